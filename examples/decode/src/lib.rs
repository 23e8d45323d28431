//! A decode step of one attention layer in bf16, as a ferry orchestration library.
//!
//! Per sequence `s` whose context length `ctx = ctx_lens[s]` (read from the device when the
//! graph is built) is not 0, with `pos = ctx - 1` its position, inside one scope:
//!
//! | task | kernel (core) | what |
//! |---|---|---|
//! | 1 | `rmsnorm_nd` (AIV) | `h = rmsnorm(x[s]) · g` |
//! | 2 | `matmul_nd` (AIC) | `q = h @ wq` |
//! | 3 | `rope_nd` (AIV) | `qr = rope(q, cs[pos])` |
//! | 2 per page | `cast_nd` (AIV) | page `j` of the sequence (block `block_table[s][j]` of the paged caches) gathered into `kc`, `vc`: `min(bs, ctx − j·bs)` rows each |
//! | 1 | `matmul_nd` (AIC) | `sc = qr @ kcᵀ` over the `ctx` gathered rows |
//! | 1 | `softmax_nd` (AIV) | `p = softmax(sc)` |
//! | 1 | `matmul_nd` (AIC) | `o = p @ vc` |
//! | 1 | `matmul_nd` (AIC) | `y = o @ wo` |
//! | 1 | `add_nd` (AIV) | `out[s] = x[s] + y`, the residual |
//!
//! so a sequence costs `8 + 2 · ceil(ctx / bs)` tasks: the graph follows the lengths. Its
//! temporaries are tensors the runtime allocates inside the sequence's scope.
//!
//! Tensors, in order: `x` [S, D], `g` [D], `wq` [D, D], `wo` [D, D], `cs` [P, D] (each pair's
//! cosine and sine per position), `kcache` and `vcache` [NB, bs, D], `block_table` int32
//! [S, MB], `ctx_lens` int32 [S], `out` [S, D]; all bf16 but the two int32 tables. Scalars:
//! `D`, `bs`, `MB`.
use ferry_kernel_abi::orch::{Orch, OrchError, OrchView, TaskSpec, Tensor};
use ferry_kernel_abi::orch_lib::builtin;
use ferry_kernel_abi::{orchestration_library, DType};

const BF16: DType = DType::BFloat16;

/// The function's own failure codes.
const BAD_LENGTH: i32 = 1;
const BAD_BLOCK: i32 = 2;

/// A `[1, D, N]` matmul: `out[0, n] = Σ_k a[k] · b[k, n]`, `b` row-major with `row` elements a
/// row (`a`: `[k]`; `b`: `[k, n]` at `k · row + n`), written as the kernel's `[M, K, N]` views.
fn vec_mat(
    a: (Tensor, u64),
    b: (Tensor, u64),
    out: (Tensor, u64),
    k: u64,
    n: u64,
    row: u64,
) -> TaskSpec {
    let shape = [1, k, n];
    TaskSpec::new(builtin::MATMUL_ND)
        .input(OrchView::strided(a.0, BF16, a.1, &shape, &[k, 1, 0]))
        .input(OrchView::strided(b.0, BF16, b.1, &shape, &[0, row, 1]))
        .output(OrchView::strided(out.0, BF16, out.1, &shape, &[n, 0, 1]))
        .views()
}

fn decode_step(o: &mut Orch<'_>) -> Result<(), OrchError> {
    let [x, g, wq, wo, cs, kcache, vcache, table, lens, out] =
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(Tensor);
    let (d, bs, mb) = (o.scalar(0)?, o.scalar(1)?, o.scalar(2)?);
    let seqs = o.tensor_bytes(lens)? / 4;
    let blocks = o.tensor_bytes(kcache)? / (2 * bs * d).max(1);
    let positions = o.tensor_bytes(cs)? / (2 * d).max(1);
    let lens = o.read_i32(lens, 0, seqs as usize)?;
    for (s, &ctx) in lens.iter().enumerate() {
        let s = s as u64;
        let ctx = u64::try_from(ctx).map_err(|_| OrchError::Failed(BAD_LENGTH))?;
        if ctx == 0 {
            continue;
        }
        let pages = ctx.div_ceil(bs);
        if pages > mb || ctx > positions {
            return Err(OrchError::Failed(BAD_LENGTH));
        }
        let ids = o.read_i32(table, s * mb, pages as usize)?;
        o.scope("decode_step", s as u32, |o| {
            let row = OrchView::nd(x, BF16, s * d, &[1, d]);
            let h = o.alloc(2 * d)?;
            let q = o.alloc(2 * d)?;
            let qr = o.alloc(2 * d)?;
            let kc = o.alloc(2 * ctx * d)?;
            let vc = o.alloc(2 * ctx * d)?;
            let sc = o.alloc(2 * ctx)?;
            let p = o.alloc(2 * ctx)?;
            let ov = o.alloc(2 * d)?;
            let y = o.alloc(2 * d)?;
            let vec = |t: Tensor| OrchView::nd(t, BF16, 0, &[1, d]);
            o.submit(
                &TaskSpec::new(builtin::RMSNORM_ND)
                    .input(row)
                    .input(OrchView::strided(g, BF16, 0, &[1, d], &[0, 1]))
                    .output(vec(h))
                    .views(),
            )?;
            o.submit(&vec_mat((h, 0), (wq, 0), (q, 0), d, d, d))?;
            let pos = ctx - 1;
            o.submit(
                &TaskSpec::new(builtin::ROPE_ND)
                    .input(vec(q))
                    .input(OrchView::nd(cs, BF16, pos * d, &[1, d]))
                    .output(vec(qr))
                    .views(),
            )?;
            for (j, &id) in ids.iter().enumerate() {
                let j = j as u64;
                let blk = u64::try_from(id).ok().filter(|&b| b < blocks);
                let blk = blk.ok_or(OrchError::Failed(BAD_BLOCK))?;
                let rows = bs.min(ctx - j * bs);
                for (cache, dst) in [(kcache, kc), (vcache, vc)] {
                    o.submit(
                        &TaskSpec::new(builtin::CAST_ND)
                            .input(OrchView::nd(cache, BF16, blk * bs * d, &[rows, d]))
                            .output(OrchView::nd(dst, BF16, j * bs * d, &[rows, d]))
                            .views(),
                    )?;
                }
            }
            // sc[0, n] = Σ_k qr[k] · kc[n, k]: kc read transposed.
            let shape = [1, d, ctx];
            o.submit(
                &TaskSpec::new(builtin::MATMUL_ND)
                    .input(OrchView::strided(qr, BF16, 0, &shape, &[d, 1, 0]))
                    .input(OrchView::strided(kc, BF16, 0, &shape, &[0, 1, d]))
                    .output(OrchView::strided(sc, BF16, 0, &shape, &[ctx, 0, 1]))
                    .views(),
            )?;
            o.submit(
                &TaskSpec::new(builtin::SOFTMAX_ND)
                    .input(OrchView::nd(sc, BF16, 0, &[1, ctx]))
                    .output(OrchView::nd(p, BF16, 0, &[1, ctx]))
                    .views(),
            )?;
            o.submit(&vec_mat((p, 0), (vc, 0), (ov, 0), ctx, d, d))?;
            o.submit(&vec_mat((ov, 0), (wo, 0), (y, 0), d, d, d))?;
            o.submit(
                &TaskSpec::new(builtin::ADD_ND)
                    .input(row)
                    .input(vec(y))
                    .output(OrchView::nd(out, BF16, s * d, &[1, d]))
                    .views(),
            )?;
            Ok(())
        })?;
    }
    Ok(())
}

orchestration_library! {
    name: "decode",
    functions: [{ name: decode_step, tensors: 10, scalars: 3 }],
}
