//! Tensor data in a workload's dtypes: the packed little-endian words the runtime moves, the
//! initial values written into them, and how verification reads and compares elements.
//!
//! A tensor of `n` elements of a dtype of `s` bytes occupies `ceil(n * s / 4)` 32-bit words on
//! the device (the last one zero-padded); element `i` is bytes `i * s .. (i + 1) * s`.
use ferry_abi::records::DType;

/// Words a tensor of `elems` elements of `dtype` occupies.
pub(crate) fn words_for(dtype: DType, elems: u64) -> u64 {
    (elems * dtype.size() as u64).div_ceil(4)
}

/// Bits of element `i` of a packed tensor (zero-extended); 0 past its words.
pub(crate) fn element(dtype: DType, words: &[u32], i: usize) -> u64 {
    let size = dtype.size();
    let byte = i * size;
    let mut out = 0u64;
    for k in 0..size {
        let b = byte + k;
        let w = words.get(b / 4).copied().unwrap_or(0);
        out |= u64::from((w >> (8 * (b % 4))) as u8) << (8 * k);
    }
    out
}

/// Packs `elems` elements' bits into words.
pub(crate) fn pack(dtype: DType, elems: usize, bits: impl Iterator<Item = u64>) -> Vec<u32> {
    let size = dtype.size();
    let mut bytes = Vec::with_capacity(elems * size + 3);
    for b in bits.take(elems) {
        bytes.extend_from_slice(&b.to_le_bytes()[..size]);
    }
    bytes.resize(bytes.len().div_ceil(4) * 4, 0);
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// The smallest and largest value of an integer dtype, as `f64`.
fn int_range(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::Int8 => (-128.0, 127.0),
        DType::Int16 => (-32768.0, 32767.0),
        DType::Int32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        DType::Int64 => (i64::MIN as f64, i64::MAX as f64),
        DType::UInt8 => (0.0, 255.0),
        DType::UInt32 => (0.0, f64::from(u32::MAX)),
        _ => (0.0, u64::MAX as f64),
    }
}

/// The bits of the `dtype` element nearest the initial value `v`: floats through `f32` (round
/// to nearest, ties to even), integers toward zero, saturating at the type's range (NaN is 0).
pub(crate) fn from_value(dtype: DType, v: f64) -> u64 {
    if dtype.is_float() {
        return dtype.from_f32(v as f32);
    }
    let (lo, hi) = int_range(dtype);
    let t = if v.is_nan() { 0.0 } else { v.trunc().clamp(lo, hi) };
    if dtype.is_signed_int() {
        dtype.from_i64(t as i64)
    } else {
        t as u64 & dtype.from_i64(-1)
    }
}

/// An element's value: floats widened, integers exactly where `f64` holds them.
pub(crate) fn value(dtype: DType, bits: u64) -> f64 {
    match dtype {
        _ if dtype.is_float() => f64::from(dtype.to_f32(bits)),
        _ if dtype.is_signed_int() => dtype.to_i64(bits) as f64,
        _ => bits as f64,
    }
}

/// The relative tolerance floor of a float dtype (one unit in the last place, relative):
/// a comparison with a smaller tolerance (or none) uses this one.
pub(crate) fn tolerance_floor(dtype: DType) -> f64 {
    match dtype {
        DType::BFloat16 => 1.0 / 128.0,
        DType::Float16 => 1.0 / 1024.0,
        _ => 0.0,
    }
}

/// Whether element `got` matches `want` (both bits of `dtype`) under relative tolerance `tol`:
/// integers exactly; floats within `max(tol, floor) * (1 + |want|)` (bit-exact when that is 0),
/// NaN matching NaN.
pub(crate) fn matches(dtype: DType, got: u64, want: u64, tol: f64) -> bool {
    if !dtype.is_float() {
        return got == want;
    }
    let (g, w) = (value(dtype, got), value(dtype, want));
    let tol = tol.max(tolerance_floor(dtype));
    (g.is_nan() && w.is_nan())
        || if tol == 0.0 { got == want } else { (g - w).abs() <= tol * (1.0 + w.abs()) }
}

/// Whether element `got` (bits of `dtype`) matches the expected value `want` of an
/// `[[expect]]`: integers exactly, floats as [`matches`] does.
pub(crate) fn matches_value(dtype: DType, got: u64, want: f64, tol: f64) -> bool {
    if dtype.is_float() {
        let g = value(dtype, got);
        let tol = tol.max(tolerance_floor(dtype));
        (g.is_nan() && want.is_nan())
            || if tol == 0.0 { g == want } else { (g - want).abs() <= tol * (1.0 + want.abs()) }
    } else {
        want.fract() == 0.0 && from_value(dtype, want) == got && value(dtype, got) == want
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips_every_dtype() {
        for d in DType::ALL {
            let vals: Vec<u64> = (0..7u64).map(|i| from_value(d, i as f64 - 3.0)).collect();
            let words = pack(d, vals.len(), vals.iter().copied());
            assert_eq!(words.len() as u64, words_for(d, 7), "{d:?}");
            for (i, &v) in vals.iter().enumerate() {
                assert_eq!(element(d, &words, i), v, "{d:?} {i}");
            }
        }
        // int8 elements share words, little-endian.
        assert_eq!(pack(DType::Int8, 5, [1, 2, 3, 4, 0xff].into_iter()), [0x0403_0201, 0xff]);
    }

    #[test]
    fn initial_values_convert_by_the_rules() {
        assert_eq!(from_value(DType::Int8, 300.0), 127);
        assert_eq!(from_value(DType::Int8, -2.9), (-2i8) as u8 as u64);
        assert_eq!(from_value(DType::UInt8, -5.0), 0);
        assert_eq!(from_value(DType::Int32, 16_777_217.0), 16_777_217, "not through f32");
        assert_eq!(value(DType::Int64, from_value(DType::Int64, -7.0)), -7.0);
        assert_eq!(value(DType::BFloat16, from_value(DType::BFloat16, 0.1)), 0.10009765625);
    }

    #[test]
    fn comparisons_per_dtype() {
        let bf = |v: f32| DType::BFloat16.from_f32(v);
        // One bf16 ulp apart passes at tolerance 0 (the floor), two do not.
        assert!(matches(DType::BFloat16, bf(100.0), bf(100.5), 0.0));
        assert!(!matches(DType::BFloat16, bf(100.0), bf(101.0), 0.0));
        assert!(!matches(DType::Int8, 1, 2, 0.5), "integers are exact whatever the tolerance");
        assert!(matches(DType::Float32, 1.0f32.to_bits().into(), 1.0f32.to_bits().into(), 0.0));
        assert!(!matches(
            DType::Float32,
            1.0f32.to_bits().into(),
            1.0000001f32.to_bits().into(),
            0.0
        ));
        assert!(matches_value(DType::Int32, from_value(DType::Int32, -5.0), -5.0, 0.0));
        assert!(!matches_value(DType::Int32, from_value(DType::Int32, -5.0), -5.5, 1.0));
        assert!(!matches_value(DType::Int8, 127, 300.0, 0.0), "a saturated value is not 300");
    }
}
