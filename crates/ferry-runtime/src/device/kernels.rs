//! The kernel library: real `f32` kernels over tensors in device memory, found by kernel id.
//!
//! | id | name | core | tensors | scalars | blocks |
//! |---:|---|---|---|---|---|
//! | 0 | `add` | AIV | `a`, `b` → `out` | — | SPMD over `out` |
//! | 1 | `mul` | AIV | `a`, `b` → `out` | — | SPMD |
//! | 2 | `scale` | AIV | `x` → `out` (or one inout) | `s` (f32 bits) | SPMD |
//! | 3 | `copy` | AIV | `x` → `out` | — | SPMD |
//! | 4 | `add_scalar` | AIV | `x` → `out` (or one inout) | `s` (f32 bits) | SPMD |
//! | 5 | `attn_partial` | AIC | `q` (D), `k` (S·D), `v` (S·D) → `part` (D+2) | `D`, `S`, `scale` (f32 bits) | 1 |
//! | 6 | `attn_merge` | AIV | `parts` (P·(D+2)) → `out` (D) | `D`, `P` | 1 |
//! | 7 | `add_nd` | AIV | `a`, `b` → `out`, typed N-d views | shape word, 3 operand words | SPMD |
//! | 8 | `mul_nd` | AIV | `a`, `b` → `out`, typed N-d views | shape word, 3 operand words | SPMD |
//! | 9 | `cast_nd` | AIV | `x` → `out`, typed N-d views | shape word, 2 operand words | SPMD |
//! | 10 | `rmsnorm_nd` | AIV | `x`, `g` → `out`, per row | shape word, 3 operand words | SPMD over rows |
//! | 11 | `softmax_nd` | AIV | `x` → `out`, per row | shape word, 2 operand words | SPMD over rows |
//! | 12 | `rope_nd` | AIV | `x`, `cs` → `out`, per row | shape word, 3 operand words | SPMD over rows |
//! | 13 | `matmul_nd` | AIC | `a`, `b` → `out`, views of shape `[M, K, N]` | shape word, 3 operand words | SPMD over the `M·N` outputs |
//!
//! SPMD kernels split their output into `block_dim` contiguous chunks; block `b` computes chunk
//! `b`. `attn_partial` is one page of paged attention: scores `s_i = scale · q·k_i`, then the
//! partial softmax state `[m, l, o]` with `m = max s_i`, `l = Σ e^(s_i − m)`,
//! `o = Σ e^(s_i − m) v_i`. `attn_merge` combines `P` partial states into `o / l` over the
//! common maximum. Ids 7-12 are *view kernels* ([`super::view_kernels`], and the row kernels
//! of [`super::row_kernels`]): their scalars describe each tensor argument as a typed N-d view
//! (`ferry_abi::layout`), in any dtype.
//!
//! # Where AICore kernels come from
//!
//! One numbering (`ferry_abi::services::KERNEL_*`) covers these kernels and the kernel library
//! shared object (`device/kernels`, loaded with `Loader::load_kernel_library`), which exports
//! the five elementwise ones (ids 0-4) under the `KernelFn` ABI; it has no attention kernels,
//! so ids 5-6 look up as unknown there. The AICore executor
//! ([`super::aicore::aicore_execute`]) runs the kernels of this module: on the simulated chip an
//! AICore "binary" is the executor closure the launch starts on each core thread, not an
//! object the AICPU OS loads, so the runtime keeps the kernels it validates (shapes, block
//! counts, typed [`KernelFault`]s) next to the executor. An unknown id is refused at submission
//! ([`crate::SubmitError::UnknownKernel`]) on every path.
use ferry_abi::records::DType;

use super::image::F32Slice;
use crate::error::KernelFault;

// The ids are defined once, in `ferry_abi::services` (shared with the kernel library
// `device/kernels`, which exports the elementwise ones under the same ids).

/// Kernel id of `add`.
pub const K_ADD: u32 = ferry_abi::services::KERNEL_ADD;
/// Kernel id of `mul`.
pub const K_MUL: u32 = ferry_abi::services::KERNEL_MUL;
/// Kernel id of `scale`.
pub const K_SCALE: u32 = ferry_abi::services::KERNEL_SCALE;
/// Kernel id of `copy`.
pub const K_COPY: u32 = ferry_abi::services::KERNEL_COPY;
/// Kernel id of `add_scalar`.
pub const K_ADD_SCALAR: u32 = ferry_abi::services::KERNEL_ADD_SCALAR;
/// Kernel id of `attn_partial`.
pub const K_ATTN_PARTIAL: u32 = ferry_abi::services::KERNEL_ATTN_PARTIAL;
/// Kernel id of `attn_merge`.
pub const K_ATTN_MERGE: u32 = ferry_abi::services::KERNEL_ATTN_MERGE;
/// Kernel id of `add_nd`.
pub const K_ADD_ND: u32 = ferry_abi::services::KERNEL_ADD_ND;
/// Kernel id of `mul_nd`.
pub const K_MUL_ND: u32 = ferry_abi::services::KERNEL_MUL_ND;
/// Kernel id of `cast_nd`.
pub const K_CAST_ND: u32 = ferry_abi::services::KERNEL_CAST_ND;
/// Kernel id of `rmsnorm_nd`.
pub const K_RMSNORM_ND: u32 = ferry_abi::services::KERNEL_RMSNORM_ND;
/// Kernel id of `softmax_nd`.
pub const K_SOFTMAX_ND: u32 = ferry_abi::services::KERNEL_SOFTMAX_ND;
/// Kernel id of `rope_nd`.
pub const K_ROPE_ND: u32 = ferry_abi::services::KERNEL_ROPE_ND;
/// Kernel id of `matmul_nd`.
pub const K_MATMUL_ND: u32 = ferry_abi::services::KERNEL_MATMUL_ND;
/// Number of kernels (ids are `0..KERNEL_COUNT`).
pub const KERNEL_COUNT: u32 = ferry_abi::services::KERNEL_COUNT;

/// Which kind of core a kernel prefers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoreKind {
    /// Cube core.
    Aic,
    /// Vector core.
    Aiv,
}

/// What the runtime knows about a kernel before it runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSpec {
    /// Kernel id.
    pub id: u32,
    /// Name (per-kernel counts in summaries).
    pub name: &'static str,
    /// Preferred core kind.
    pub core: CoreKind,
    /// Accepted tensor argument counts (inclusive).
    pub tensors: (u32, u32),
    /// Scalars required.
    pub scalars: u32,
    /// The dtype of each scalar, in order (`scalars` entries): how its 64 raw bits are read
    /// (`FLOAT32`: the low 32 bits are an `f32`). The ArgsDump writes it, so dumps print
    /// `0.5` instead of the bits `1056964608`.
    pub scalar_dtypes: &'static [DType],
    /// Most SPMD blocks.
    pub max_blocks: u32,
    /// Every tensor argument before the last has at least as many elements as the last (the
    /// output): what [`execute`] refuses with [`KernelFault::Shape`] otherwise, and what
    /// `ferry workload check` checks before a run.
    pub inputs_cover_output: bool,
    /// A view kernel: scalar 0 is the shape word and scalar `1 + i` the operand word of tensor
    /// argument `i` (`ferry_abi::layout`), which a workload fills in from its views; its tensors
    /// may have any dtype.
    pub views: bool,
}

const SPMD: u32 = 1 << 16;

/// Every kernel, indexed by id.
pub const KERNELS: [KernelSpec; KERNEL_COUNT as usize] = [
    KernelSpec {
        id: K_ADD,
        name: "add",
        core: CoreKind::Aiv,
        tensors: (3, 3),
        scalars: 0,
        scalar_dtypes: &[],
        max_blocks: SPMD,
        inputs_cover_output: true,
        views: false,
    },
    KernelSpec {
        id: K_MUL,
        name: "mul",
        core: CoreKind::Aiv,
        tensors: (3, 3),
        scalars: 0,
        scalar_dtypes: &[],
        max_blocks: SPMD,
        inputs_cover_output: true,
        views: false,
    },
    KernelSpec {
        id: K_SCALE,
        name: "scale",
        core: CoreKind::Aiv,
        tensors: (1, 2),
        scalars: 1,
        scalar_dtypes: &[DType::Float32],
        max_blocks: SPMD,
        inputs_cover_output: true,
        views: false,
    },
    KernelSpec {
        id: K_COPY,
        name: "copy",
        core: CoreKind::Aiv,
        tensors: (2, 2),
        scalars: 0,
        scalar_dtypes: &[],
        max_blocks: SPMD,
        inputs_cover_output: true,
        views: false,
    },
    KernelSpec {
        id: K_ADD_SCALAR,
        name: "add_scalar",
        core: CoreKind::Aiv,
        tensors: (1, 2),
        scalars: 1,
        scalar_dtypes: &[DType::Float32],
        max_blocks: SPMD,
        inputs_cover_output: true,
        views: false,
    },
    KernelSpec {
        id: K_ATTN_PARTIAL,
        name: "attn_partial",
        core: CoreKind::Aic,
        tensors: (4, 4),
        scalars: 3,
        scalar_dtypes: &[DType::UInt64, DType::UInt64, DType::Float32],
        max_blocks: 1,
        inputs_cover_output: false,
        views: false,
    },
    KernelSpec {
        id: K_ATTN_MERGE,
        name: "attn_merge",
        core: CoreKind::Aiv,
        tensors: (2, 2),
        scalars: 2,
        scalar_dtypes: &[DType::UInt64, DType::UInt64],
        max_blocks: 1,
        inputs_cover_output: false,
        views: false,
    },
    KernelSpec {
        id: K_ADD_ND,
        name: "add_nd",
        core: CoreKind::Aiv,
        tensors: (3, 3),
        scalars: 4,
        scalar_dtypes: &[DType::UInt64; 4],
        max_blocks: SPMD,
        inputs_cover_output: false,
        views: true,
    },
    KernelSpec {
        id: K_MUL_ND,
        name: "mul_nd",
        core: CoreKind::Aiv,
        tensors: (3, 3),
        scalars: 4,
        scalar_dtypes: &[DType::UInt64; 4],
        max_blocks: SPMD,
        inputs_cover_output: false,
        views: true,
    },
    KernelSpec {
        id: K_CAST_ND,
        name: "cast_nd",
        core: CoreKind::Aiv,
        tensors: (2, 2),
        scalars: 3,
        scalar_dtypes: &[DType::UInt64; 3],
        max_blocks: SPMD,
        inputs_cover_output: false,
        views: true,
    },
    KernelSpec {
        id: K_RMSNORM_ND,
        name: "rmsnorm_nd",
        core: CoreKind::Aiv,
        tensors: (3, 3),
        scalars: 4,
        scalar_dtypes: &[DType::UInt64; 4],
        max_blocks: SPMD,
        inputs_cover_output: false,
        views: true,
    },
    KernelSpec {
        id: K_SOFTMAX_ND,
        name: "softmax_nd",
        core: CoreKind::Aiv,
        tensors: (2, 2),
        scalars: 3,
        scalar_dtypes: &[DType::UInt64; 3],
        max_blocks: SPMD,
        inputs_cover_output: false,
        views: true,
    },
    KernelSpec {
        id: K_ROPE_ND,
        name: "rope_nd",
        core: CoreKind::Aiv,
        tensors: (3, 3),
        scalars: 4,
        scalar_dtypes: &[DType::UInt64; 4],
        max_blocks: SPMD,
        inputs_cover_output: false,
        views: true,
    },
    KernelSpec {
        id: K_MATMUL_ND,
        name: "matmul_nd",
        core: CoreKind::Aic,
        tensors: (3, 3),
        scalars: 4,
        scalar_dtypes: &[DType::UInt64; 4],
        max_blocks: SPMD,
        inputs_cover_output: false,
        views: true,
    },
];

/// The dimension of its views' shape that view kernel `id` sums over (its output's stride on
/// it is 0): `matmul_nd`'s `K`, dimension 1 of `[M, K, N]`. `None` for every other kernel.
pub fn reduce_axis(id: u32) -> Option<usize> {
    (id == K_MATMUL_ND).then_some(1)
}

/// The dtype of scalar `index` of kernel `id` (`UINT64` for an unknown kernel or index: the raw
/// bits).
pub fn scalar_dtype(id: u32, index: usize) -> DType {
    spec(id).and_then(|s| s.scalar_dtypes.get(index)).copied().unwrap_or(DType::UInt64)
}

/// The spec of kernel `id`, if it exists.
pub fn spec(id: u32) -> Option<&'static KernelSpec> {
    KERNELS.get(id as usize)
}

/// One dispatch of a kernel: translated tensors, scalars, block coordinates.
#[derive(Debug)]
pub struct KernelCall<'a> {
    /// Kernel id.
    pub kernel: u32,
    /// Tensor arguments, translated.
    pub tensors: &'a [F32Slice],
    /// Scalar arguments.
    pub scalars: &'a [u64],
    /// This block.
    pub block_idx: u32,
    /// Blocks of the task.
    pub block_dim: u32,
}

fn f(bits: u64) -> f32 {
    f32::from_bits(bits as u32)
}

/// The chunk of `n` elements block `b` of `bd` owns.
pub fn block_range(n: usize, b: u32, bd: u32) -> std::ops::Range<usize> {
    let bd = bd.max(1) as usize;
    let chunk = n.div_ceil(bd);
    let start = (b as usize * chunk).min(n);
    start..(start + chunk).min(n)
}

fn same_len(k: u32, a: &F32Slice, n: usize) -> Result<(), KernelFault> {
    if a.len() < n {
        return Err(KernelFault::Shape { kernel: k, expected: n as u64, got: a.len() as u64 });
    }
    Ok(())
}

/// Runs one dispatch.
///
/// # Errors
/// [`KernelFault`] when the id is unknown or the arguments do not fit the kernel.
pub fn execute(call: &KernelCall<'_>) -> Result<(), KernelFault> {
    let k = call.kernel;
    let s = spec(k).ok_or(KernelFault::UnknownKernel { kernel: k })?;
    let nt = call.tensors.len() as u32;
    if nt < s.tensors.0 || nt > s.tensors.1 || (call.scalars.len() as u32) < s.scalars {
        return Err(KernelFault::ArgCount { kernel: k });
    }
    let t = call.tensors;
    if matches!(k, K_RMSNORM_ND | K_SOFTMAX_ND | K_ROPE_ND | K_MATMUL_ND) {
        return super::row_kernels::execute(k, t, call.scalars, call.block_idx, call.block_dim);
    }
    if s.views {
        return super::view_kernels::execute(k, t, call.scalars, call.block_idx, call.block_dim);
    }
    match k {
        K_ADD | K_MUL => {
            let out = &t[2];
            let n = out.len();
            same_len(k, &t[0], n)?;
            same_len(k, &t[1], n)?;
            for i in block_range(n, call.block_idx, call.block_dim) {
                let (a, b) = (t[0].get(i), t[1].get(i));
                out.set(i, if k == K_ADD { a + b } else { a * b });
            }
        }
        K_SCALE | K_ADD_SCALAR | K_COPY => {
            let (x, out) = (&t[0], t.get(1).unwrap_or(&t[0]));
            let n = out.len();
            same_len(k, x, n)?;
            let sv = call.scalars.first().map(|&b| f(b)).unwrap_or(0.0);
            for i in block_range(n, call.block_idx, call.block_dim) {
                let v = x.get(i);
                out.set(
                    i,
                    match k {
                        K_SCALE => v * sv,
                        K_ADD_SCALAR => v + sv,
                        _ => v,
                    },
                );
            }
        }
        K_ATTN_PARTIAL => {
            let (d, sl) = (call.scalars[0] as usize, call.scalars[1] as usize);
            let scale = f(call.scalars[2]);
            let (q, kk, v, out) = (&t[0], &t[1], &t[2], &t[3]);
            same_len(k, q, d)?;
            same_len(k, kk, sl * d)?;
            same_len(k, v, sl * d)?;
            same_len(k, out, d + 2)?;
            let mut scores = Vec::with_capacity(sl);
            for i in 0..sl {
                let mut acc = 0.0f32;
                for j in 0..d {
                    acc += q.get(j) * kk.get(i * d + j);
                }
                scores.push(acc * scale);
            }
            let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut l = 0.0f32;
            let mut o = vec![0.0f32; d];
            for (i, &sc) in scores.iter().enumerate() {
                let p = (sc - m).exp();
                l += p;
                for (j, oj) in o.iter_mut().enumerate() {
                    *oj += p * v.get(i * d + j);
                }
            }
            out.set(0, m);
            out.set(1, l);
            for (j, oj) in o.into_iter().enumerate() {
                out.set(2 + j, oj);
            }
        }
        K_ATTN_MERGE => {
            let (d, p) = (call.scalars[0] as usize, call.scalars[1] as usize);
            let (parts, out) = (&t[0], &t[1]);
            same_len(k, parts, p * (d + 2))?;
            same_len(k, out, d)?;
            let stride = d + 2;
            let m = (0..p).map(|i| parts.get(i * stride)).fold(f32::NEG_INFINITY, f32::max);
            let mut l = 0.0f32;
            let mut o = vec![0.0f32; d];
            for i in 0..p {
                let w = (parts.get(i * stride) - m).exp();
                l += w * parts.get(i * stride + 1);
                for (j, oj) in o.iter_mut().enumerate() {
                    *oj += w * parts.get(i * stride + 2 + j);
                }
            }
            for (j, oj) in o.into_iter().enumerate() {
                out.set(j, oj / l);
            }
        }
        _ => return Err(KernelFault::UnknownKernel { kernel: k }),
    }
    Ok(())
}

/// Runs every block of one task on the host over host memory: the kernels' host
/// implementation, which a workload's `host-reference` verification runs the graph with. Each
/// tensor argument is a slice of atomic cells (arguments may alias, as views of one tensor do
/// on the device).
///
/// # Errors
/// As [`execute`].
pub fn execute_host(
    kernel: u32,
    block_dim: u32,
    tensors: &[&[std::sync::atomic::AtomicU32]],
    scalars: &[u64],
) -> Result<(), KernelFault> {
    let slices: Vec<F32Slice> = tensors.iter().map(|t| F32Slice::from_cells(t)).collect();
    for block_idx in 0..block_dim.max(1) {
        execute(&KernelCall { kernel, tensors: &slices, scalars, block_idx, block_dim })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scalar_has_a_dtype() {
        for k in &KERNELS {
            assert_eq!(k.scalar_dtypes.len(), k.scalars as usize, "{}", k.name);
        }
        assert_eq!(scalar_dtype(K_SCALE, 0), DType::Float32);
        assert_eq!(scalar_dtype(K_ATTN_PARTIAL, 1), DType::UInt64);
        assert_eq!(scalar_dtype(K_ATTN_PARTIAL, 2), DType::Float32);
        assert_eq!(scalar_dtype(999, 0), DType::UInt64);
    }

    #[test]
    fn block_ranges_tile_the_output() {
        for n in [0usize, 1, 7, 64, 100] {
            for bd in 1..9 {
                let mut next = 0;
                for b in 0..bd {
                    let r = block_range(n, b, bd);
                    assert_eq!(r.start, next.min(n));
                    next = r.end.max(next);
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn specs_are_indexed_by_id() {
        for (i, s) in KERNELS.iter().enumerate() {
            assert_eq!(s.id as usize, i);
        }
        assert!(spec(KERNEL_COUNT).is_none());
    }
}
