//! The built-in row kernels: per-row work over typed N-d views, the normalisations and the
//! rotary embedding a model layer needs.
//!
//! | id | name | tensors | per row of the view's last dimension (`D` elements) |
//! |---:|---|---|---|
//! | 10 | `rmsnorm_nd` | `x`, `g` → `out` | `out_j = x_j / sqrt(Σ x_k² / D + 1e-6) · g_j` |
//! | 11 | `softmax_nd` | `x` → `out` | `out_j = e^(x_j − max x) / Σ_k e^(x_k − max x)` |
//! | 12 | `rope_nd` | `x`, `cs` → `out` | for each pair `(2i, 2i+1)`: `c = cs_2i`, `s = cs_2i+1`; `out_2i = x_2i c − x_2i+1 s`, `out_2i+1 = x_2i s + x_2i+1 c` |
//!
//! and `matmul_nd` (13, AIC): `out[m, n] = Σ_k a[m, k] · b[k, n]` over views of shape
//! `[M, K, N]` (`a` with stride 0 on `N`, `b` on `M`, `out` on `K`), products accumulated in
//! f32, each output rounded to its dtype once; SPMD blocks split the `M·N` outputs.
//!
//! Their scalars are view kernels' layout words (`ferry_abi::layout`, as in
//! [`super::view_kernels`]): every operand has the view's shape, the rows are its elements in
//! row-major order `D` at a time, and an operand broadcast over the rows has stride 0 on them
//! (`rmsnorm_nd`'s weight `g`: `strides = [0, 1]`). Values are read as f32, the row computed in
//! f32 and each result rounded to the output's dtype (to nearest, ties to even, for bf16 and
//! f16). SPMD blocks split the rows. `rope_nd` needs an even `D` ([`KernelFault::Shape`]).
use super::image::F32Slice;
use super::kernels::{block_range, K_MATMUL_ND, K_RMSNORM_ND, K_ROPE_ND, K_SOFTMAX_ND};
use crate::error::KernelFault;

/// `rmsnorm_nd`'s epsilon.
pub const RMSNORM_EPS: f32 = 1e-6;

/// Runs one block of a row kernel.
///
/// # Errors
/// As [`super::view_kernels::layout`]; [`KernelFault::Shape`] for `rope_nd` over an odd row.
pub(crate) fn execute(
    kernel: u32,
    t: &[F32Slice],
    scalars: &[u64],
    block_idx: u32,
    block_dim: u32,
) -> Result<(), KernelFault> {
    let l = super::view_kernels::layout(kernel, t, scalars)?;
    if kernel == K_MATMUL_ND {
        // `layout` checked the shape has three dimensions.
        let (m, k, n) = (l.shape()[0] as usize, l.shape()[1] as usize, l.shape()[2] as usize);
        for o in block_range(m * n, block_idx, block_dim) {
            let (i, j) = (o / n, o % n);
            let at = |kk: usize| ((i * k + kk) * n + j) as u64;
            let mut acc = 0.0f32;
            for kk in 0..k {
                let (a, b) = (l.operand(0), l.operand(1));
                let x = a.dtype.to_f32(t[0].load_elem(a.dtype, l.element(0, at(kk))));
                let y = b.dtype.to_f32(t[1].load_elem(b.dtype, l.element(1, at(kk))));
                acc += x * y;
            }
            let c = l.operand(2);
            t[2].store_elem(c.dtype, l.element(2, at(0)), c.dtype.from_f32(acc));
        }
        return Ok(());
    }
    let d = *l.shape().last().unwrap_or(&1) as usize;
    let numel = usize::try_from(l.numel()).map_err(|_| KernelFault::ArgCount { kernel })?;
    if d == 0 || numel == 0 {
        return Ok(());
    }
    if kernel == K_ROPE_ND && d % 2 != 0 {
        return Err(KernelFault::Shape { kernel, expected: d as u64 + 1, got: d as u64 });
    }
    let out = t.len() - 1;
    let get = |op: usize, k: usize| {
        let o = l.operand(op);
        o.dtype.to_f32(t[op].load_elem(o.dtype, l.element(op, k as u64)))
    };
    let set = |k: usize, v: f32| {
        let o = l.operand(out);
        t[out].store_elem(o.dtype, l.element(out, k as u64), o.dtype.from_f32(v));
    };
    for r in block_range(numel / d, block_idx, block_dim) {
        let row = r * d;
        match kernel {
            K_RMSNORM_ND => {
                let ss: f32 = (0..d).map(|j| get(0, row + j) * get(0, row + j)).sum();
                let inv = 1.0 / (ss / d as f32 + RMSNORM_EPS).sqrt();
                for j in 0..d {
                    set(row + j, get(0, row + j) * inv * get(1, row + j));
                }
            }
            K_SOFTMAX_ND => {
                let m = (0..d).map(|j| get(0, row + j)).fold(f32::NEG_INFINITY, f32::max);
                let s: f32 = (0..d).map(|j| (get(0, row + j) - m).exp()).sum();
                for j in 0..d {
                    set(row + j, (get(0, row + j) - m).exp() / s);
                }
            }
            K_ROPE_ND => {
                for i in (0..d).step_by(2) {
                    let (x0, x1) = (get(0, row + i), get(0, row + i + 1));
                    let (c, s) = (get(1, row + i), get(1, row + i + 1));
                    set(row + i, x0 * c - x1 * s);
                    set(row + i + 1, x0 * s + x1 * c);
                }
            }
            _ => return Err(KernelFault::UnknownKernel { kernel }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_abi::layout::{encode_operand, encode_shape};
    use ferry_abi::records::DType;
    use std::sync::atomic::{AtomicU32, Ordering};

    const BF: DType = DType::BFloat16;

    /// `n` bf16 values packed in words, from `f`.
    fn bf16s(n: usize, f: impl Fn(usize) -> f64) -> Vec<AtomicU32> {
        let h: Vec<u16> = (0..n).map(|i| BF.from_f32(f(i) as f32) as u16).collect();
        h.chunks(2)
            .map(|c| AtomicU32::new(u32::from(c[0]) | u32::from(*c.get(1).unwrap_or(&0)) << 16))
            .collect()
    }

    fn values(c: &[AtomicU32], n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| {
                let w = c[i / 2].load(Ordering::Relaxed);
                f64::from(BF.to_f32(u64::from((w >> (16 * (i % 2))) & 0xffff)))
            })
            .collect()
    }

    /// Runs `kernel` over `R x D` bf16 views (the second input with `strides2`), in 3 blocks.
    fn run(kernel: u32, x: &[AtomicU32], y: Option<(&[AtomicU32], [u64; 2])>, out: &[AtomicU32]) {
        const D: u64 = 8;
        let shape = encode_shape(&[4, D]).unwrap();
        let op = |s: &[u64]| encode_operand(BF, s).unwrap();
        let mut t = vec![F32Slice::from_cells(x)];
        let mut s = vec![shape, op(&[D, 1])];
        if let Some((y, st)) = y {
            t.push(F32Slice::from_cells(y));
            s.push(op(&st));
        }
        t.push(F32Slice::from_cells(out));
        s.push(op(&[D, 1]));
        for b in 0..3 {
            execute(kernel, &t, &s, b, 3).unwrap();
        }
    }

    /// Each output element within bf16's tolerance (one ulp, relative) of `want`.
    fn close(got: &[f64], want: &[f64]) {
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= (1.0 + w.abs()) / 128.0, "element {k}: {g} vs {w}");
        }
    }

    fn input(i: usize) -> f64 {
        ((i * 37 % 23) as f64 - 11.0) / 4.0
    }

    #[test]
    fn rmsnorm_matches_an_f64_reference_within_bf16_tolerance() {
        let (x, g, out) =
            (bf16s(32, input), bf16s(8, |j| 0.5 + j as f64 / 8.0), bf16s(32, |_| 0.0));
        run(K_RMSNORM_ND, &x, Some((&g, [0, 1])), &out);
        let (xv, gv) = (values(&x, 32), values(&g, 8));
        let mut want = vec![0.0; 32];
        for r in 0..4 {
            let row = &xv[r * 8..r * 8 + 8];
            let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / 8.0 + 1e-6).sqrt();
            for j in 0..8 {
                want[r * 8 + j] = row[j] * inv * gv[j];
            }
        }
        close(&values(&out, 32), &want);
    }

    #[test]
    fn softmax_matches_an_f64_reference_within_bf16_tolerance() {
        let (x, out) = (bf16s(32, input), bf16s(32, |_| 0.0));
        run(K_SOFTMAX_ND, &x, None, &out);
        let xv = values(&x, 32);
        let mut want = vec![0.0; 32];
        for r in 0..4 {
            let row = &xv[r * 8..r * 8 + 8];
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            for j in 0..8 {
                want[r * 8 + j] = (row[j] - m).exp() / s;
            }
        }
        close(&values(&out, 32), &want);
        let sums: Vec<f64> = values(&out, 32).chunks(8).map(|c| c.iter().sum()).collect();
        assert!(sums.iter().all(|s| (s - 1.0).abs() < 0.02), "{sums:?}");
    }

    #[test]
    fn rope_matches_an_f64_reference_within_bf16_tolerance() {
        // cs: per row r and pair i, cos and sin of r / 10000^(2i / D).
        let angle = |k: usize| (k / 8) as f64 / 10000f64.powf((k % 8 / 2 * 2) as f64 / 8.0);
        let cs = bf16s(32, |k| if k % 2 == 0 { angle(k).cos() } else { angle(k).sin() });
        let (x, out) = (bf16s(32, input), bf16s(32, |_| 0.0));
        run(K_ROPE_ND, &x, Some((&cs, [8, 1])), &out);
        let (xv, cv) = (values(&x, 32), values(&cs, 32));
        let mut want = vec![0.0; 32];
        for k in (0..32).step_by(2) {
            let (c, s) = (cv[k], cv[k + 1]);
            want[k] = xv[k] * c - xv[k + 1] * s;
            want[k + 1] = xv[k] * s + xv[k + 1] * c;
        }
        close(&values(&out, 32), &want);
        // Row 0 turns by angle 0: unchanged.
        assert_eq!(values(&out, 8), values(&x, 8));
    }

    #[test]
    fn matmul_matches_an_f64_reference_within_bf16_tolerance() {
        // [3, 8] @ [8, 4] -> [3, 4], b stored transposed ([4, 8]) to read it through strides.
        let (m, k, n) = (3u64, 8u64, 4u64);
        let a = bf16s(24, input);
        let bt = bf16s(32, |i| input(i + 5) / 2.0);
        let out = bf16s(12, |_| 0.0);
        let op = |s: &[u64]| encode_operand(BF, s).unwrap();
        let t = [F32Slice::from_cells(&a), F32Slice::from_cells(&bt), F32Slice::from_cells(&out)];
        let s = [encode_shape(&[m, k, n]).unwrap(), op(&[k, 1, 0]), op(&[0, 1, k]), op(&[n, 0, 1])];
        for b in 0..5 {
            execute(K_MATMUL_ND, &t, &s, b, 5).unwrap();
        }
        let (av, bv) = (values(&a, 24), values(&bt, 32));
        let want: Vec<f64> = (0..12)
            .map(|o| (0..8).map(|kk| av[o / 4 * 8 + kk] * bv[o % 4 * 8 + kk]).sum())
            .collect();
        close(&values(&out, 12), &want);
        // An output view of another rank, or without room for M·N elements, is refused.
        let flat = [encode_shape(&[12]).unwrap(), op(&[1]), op(&[1]), op(&[1])];
        assert_eq!(
            execute(K_MATMUL_ND, &t, &flat, 0, 1),
            Err(KernelFault::ArgCount { kernel: K_MATMUL_ND })
        );
    }

    #[test]
    fn rope_refuses_an_odd_row() {
        let (x, out) = (bf16s(6, input), bf16s(6, |_| 0.0));
        let t = [F32Slice::from_cells(&x), F32Slice::from_cells(&x), F32Slice::from_cells(&out)];
        let op = encode_operand(BF, &[3, 1]).unwrap();
        let s = [encode_shape(&[2, 3]).unwrap(), op, op, op];
        assert_eq!(
            execute(K_ROPE_ND, &t, &s, 0, 1),
            Err(KernelFault::Shape { kernel: K_ROPE_ND, expected: 4, got: 3 })
        );
    }
}
