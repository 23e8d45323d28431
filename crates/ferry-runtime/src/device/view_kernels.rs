//! The built-in view kernels: elementwise work over typed N-d views, in every dtype.
//!
//! | id | name | tensors | scalars |
//! |---:|---|---|---|
//! | 7 | `add_nd` | `a`, `b` → `out` | shape word, then the operand word of `a`, `b`, `out` |
//! | 8 | `mul_nd` | `a`, `b` → `out` | as `add_nd` |
//! | 9 | `cast_nd` | `x` → `out` | shape word, then the operand word of `x`, `out` |
//!
//! The words are `ferry_kernel_abi::layout`'s: every operand has the view's shape, its own dtype
//! and strides, and its range starts at the view's first element. Before it touches an element
//! a kernel checks each range holds its view ([`KernelFault::View`] otherwise) and that the
//! output's range holds the view's elements (so a forged shape cannot make a block loop over more
//! elements than it writes). SPMD blocks split the view's elements in row-major order.
//!
//! Arithmetic: when any operand is a float type the values are computed in `f32` (integers
//! converted to the nearest `f32`) and the result rounds to the output's dtype (to nearest, ties
//! to even, for f16 and bf16; toward zero, saturating, for an integer output); otherwise in
//! 64-bit integers with two's-complement wrap-around, kept to the output's width. `cast_nd`
//! converts the same way.
use super::image::F32Slice;
use super::kernels::{block_range, K_ADD_ND, K_CAST_ND, K_MUL_ND};
use crate::error::KernelFault;
use ferry_abi::layout::{ViewLayout, ViewLayoutError};
use ferry_abi::records::DType;

/// The layout the scalars give `tensors`, checked against their ranges.
///
/// # Errors
/// [`KernelFault::ArgCount`] without a word per tensor, [`KernelFault::View`] for an unknown
/// dtype or a range that does not hold its view.
pub(crate) fn layout(
    kernel: u32,
    tensors: &[F32Slice],
    scalars: &[u64],
) -> Result<ViewLayout, KernelFault> {
    let n = tensors.len();
    let words = scalars.get(..1 + n).ok_or(KernelFault::ArgCount { kernel })?;
    let view = |operand: usize, need: u64, have: u64, code: u8| KernelFault::View {
        kernel,
        operand: operand as u32,
        need,
        have,
        code,
    };
    for (i, &w) in words[1..].iter().enumerate() {
        let code = (w & 0xf) as u8;
        if DType::from_u8(code).is_none() {
            return Err(view(i, 0, 0, code));
        }
    }
    let l =
        ViewLayout::decode(words[0], &words[1..]).map_err(|_| KernelFault::ArgCount { kernel })?;
    let ranges: Vec<u64> = tensors.iter().map(|t| t.len() as u64 * 4).collect();
    l.check_fits(&ranges).map_err(|e| match e {
        ViewLayoutError::Range { operand, need, have } => view(operand, need, have, 0),
        _ => view(0, u64::MAX, 0, 0),
    })?;
    // The output holds every element of the view once (every one but the reduced dimension's,
    // for a kernel that sums over it): its range has room for them all.
    let out = n - 1;
    let elems = match super::kernels::reduce_axis(kernel) {
        Some(ax) => match l.shape().get(ax) {
            Some(&d) if l.shape().len() == 3 => l.numel() / d.max(1),
            _ => return Err(KernelFault::ArgCount { kernel }),
        },
        None => l.numel(),
    };
    let need = elems.saturating_mul(l.operand(out).dtype.size() as u64);
    if need > ranges[out] {
        return Err(view(out, need, ranges[out], 0));
    }
    Ok(l)
}

/// `v` (bits of a `from` element) as a `to` element, by the module's conversion rules.
pub fn convert(from: DType, to: DType, v: u64) -> u64 {
    if from.is_float() || to.is_float() {
        to.from_f32(from.to_f32(v))
    } else {
        to.from_i64(from.to_i64(v))
    }
}

/// Runs one block of a view kernel.
///
/// # Errors
/// As [`layout`].
pub(crate) fn execute(
    kernel: u32,
    t: &[F32Slice],
    scalars: &[u64],
    block_idx: u32,
    block_dim: u32,
) -> Result<(), KernelFault> {
    let l = layout(kernel, t, scalars)?;
    let n = usize::try_from(l.numel()).map_err(|_| KernelFault::ArgCount { kernel })?;
    let at = |op: usize, k: u64| l.element(op, k);
    match kernel {
        K_CAST_ND => {
            let (x, o) = (l.operand(0).dtype, l.operand(1).dtype);
            for k in block_range(n, block_idx, block_dim) {
                let k = k as u64;
                let v = t[0].load_elem(x, at(0, k));
                t[1].store_elem(o, at(1, k), convert(x, o, v));
            }
        }
        K_ADD_ND | K_MUL_ND => {
            let (a, b, o) = (l.operand(0).dtype, l.operand(1).dtype, l.operand(2).dtype);
            let float = a.is_float() || b.is_float() || o.is_float();
            for k in block_range(n, block_idx, block_dim) {
                let k = k as u64;
                let (va, vb) = (t[0].load_elem(a, at(0, k)), t[1].load_elem(b, at(1, k)));
                let r = if float {
                    let (x, y) = (a.to_f32(va), b.to_f32(vb));
                    o.from_f32(if kernel == K_ADD_ND { x + y } else { x * y })
                } else {
                    let (x, y) = (a.to_i64(va), b.to_i64(vb));
                    o.from_i64(if kernel == K_ADD_ND {
                        x.wrapping_add(y)
                    } else {
                        x.wrapping_mul(y)
                    })
                };
                t[2].store_elem(o, at(2, k), r);
            }
        }
        _ => return Err(KernelFault::UnknownKernel { kernel }),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_abi::layout::{encode_operand, encode_shape};
    use std::sync::atomic::AtomicU32;

    fn cells(words: &[u32]) -> Vec<AtomicU32> {
        words.iter().map(|&w| AtomicU32::new(w)).collect()
    }

    fn words(c: &[AtomicU32]) -> Vec<u32> {
        c.iter().map(|w| w.load(std::sync::atomic::Ordering::Relaxed)).collect()
    }

    #[test]
    fn int8_add_over_a_strided_view_wraps_and_leaves_the_gaps() {
        // a: 2x3 int8 with row pitch 4 (bytes 3 and 7 are not in the view); b: contiguous.
        let a =
            cells(&[u32::from_le_bytes([1, 2, 3, 0xEE]), u32::from_le_bytes([4, 5, 127, 0xEE])]);
        let b = cells(&[u32::from_le_bytes([10, 20, 30, 40]), u32::from_le_bytes([50, 1, 0, 0])]);
        let out = cells(&[0xAAAA_AAAA, 0xAAAA_AAAA]);
        let t = [F32Slice::from_cells(&a), F32Slice::from_cells(&b), F32Slice::from_cells(&out)];
        let s = [
            encode_shape(&[2, 3]).unwrap(),
            encode_operand(DType::Int8, &[4, 1]).unwrap(),
            encode_operand(DType::Int8, &[3, 1]).unwrap(),
            encode_operand(DType::Int8, &[4, 1]).unwrap(),
        ];
        for b in 0..3 {
            execute(K_ADD_ND, &t, &s, b, 3).unwrap();
        }
        let got = words(&out);
        assert_eq!(got[0].to_le_bytes(), [11, 22, 33, 0xAA]);
        assert_eq!(got[1].to_le_bytes(), [44, 55, 128u8, 0xAA], "127 + 1 wraps to -128");
    }

    #[test]
    fn bf16_cast_and_mul_round_to_nearest_even() {
        let x = cells(&[1.5f32.to_bits(), (1.0f32 + 1.0 / 256.0).to_bits()]);
        let out = cells(&[0]);
        let t = [F32Slice::from_cells(&x), F32Slice::from_cells(&out)];
        let s = [
            encode_shape(&[2]).unwrap(),
            encode_operand(DType::Float32, &[1]).unwrap(),
            encode_operand(DType::BFloat16, &[1]).unwrap(),
        ];
        execute(K_CAST_ND, &t, &s, 0, 1).unwrap();
        let w = words(&out)[0];
        assert_eq!(DType::BFloat16.to_f32(u64::from(w & 0xffff)), 1.5);
        assert_eq!(DType::BFloat16.to_f32(u64::from(w >> 16)), 1.0, "a tie rounds to even");
        // int32 * bf16 -> f32
        let a = cells(&[3, 0xffff_fffe]);
        let bb =
            cells(
                &[u32::from(ferry_abi::records::DType::BFloat16.from_f32(0.5) as u16) * 0x1_0001],
            );
        let o = cells(&[0, 0]);
        let t = [F32Slice::from_cells(&a), F32Slice::from_cells(&bb), F32Slice::from_cells(&o)];
        let s = [
            encode_shape(&[2]).unwrap(),
            encode_operand(DType::Int32, &[1]).unwrap(),
            encode_operand(DType::BFloat16, &[1]).unwrap(),
            encode_operand(DType::Float32, &[1]).unwrap(),
        ];
        execute(K_MUL_ND, &t, &s, 0, 1).unwrap();
        assert_eq!(words(&o), [1.5f32.to_bits(), (-1.0f32).to_bits()]);
    }

    #[test]
    fn a_view_its_range_cannot_hold_is_a_typed_fault() {
        let (x, out) = (cells(&[0; 4]), cells(&[0; 2]));
        let t = [F32Slice::from_cells(&x), F32Slice::from_cells(&out)];
        let shape = encode_shape(&[3, 3]).unwrap();
        let fits = encode_operand(DType::Int8, &[3, 1]).unwrap();
        let wide = encode_operand(DType::Int8, &[4, 1]).unwrap(); // spans 11 bytes of the 8
        assert_eq!(
            execute(K_CAST_ND, &t, &[shape, fits, wide], 0, 1),
            Err(KernelFault::View { kernel: K_CAST_ND, operand: 1, need: 11, have: 8, code: 0 })
        );
        assert_eq!(
            execute(K_CAST_ND, &t, &[shape, 0xf, fits], 0, 1),
            Err(KernelFault::View { kernel: K_CAST_ND, operand: 0, need: 0, have: 0, code: 15 })
        );
        // An output that cannot hold the view's 9 elements (a stride-0 view spanning 3 bytes).
        let zero = encode_operand(DType::Int8, &[0, 1]).unwrap();
        assert_eq!(
            execute(K_CAST_ND, &t, &[shape, fits, zero], 0, 1),
            Err(KernelFault::View { kernel: K_CAST_ND, operand: 1, need: 9, have: 8, code: 0 })
        );
        assert_eq!(
            execute(K_CAST_ND, &t, &[shape, fits], 0, 1),
            Err(KernelFault::ArgCount { kernel: K_CAST_ND })
        );
    }

    #[test]
    fn conversions_follow_the_rules() {
        assert_eq!(convert(DType::Int32, DType::Int8, 300), 300 & 0xff, "integers wrap");
        assert_eq!(convert(DType::Float32, DType::Int8, u64::from(300f32.to_bits())), 127);
        assert_eq!(convert(DType::Int8, DType::Int64, 0x80), (-128i64) as u64);
        assert_eq!(
            convert(DType::UInt8, DType::Float16, 255),
            u64::from(ferry_abi::records::DType::Float16.from_f32(255.0) as u16)
        );
    }
}
