//! The example callables' orchestration functions: plain device code, run by the device
//! orchestrator on the AICPU, by the host graph builder, or by an orchestration object through
//! [`super::ffi::ApiOrchestrator`]. Their host halves (inputs, references) are in
//! `crate::examples`.
use super::kernels::{K_ADD, K_ADD_SCALAR, K_ATTN_MERGE, K_ATTN_PARTIAL, K_COPY, K_MUL, K_SCALE};
use super::task::{Orchestrate, Task, TensorId, View};
use crate::error::SubmitError;

/// Lanes of the storm.
pub const STORM_LANES: u64 = 64;
/// Elements per storm lane.
pub const STORM_LANE_LEN: u64 = 16;

/// The vector example's graph. Scalars: `n`, `chunk`, `blocks`; tensors: `a`, `b`, `out`.
/// Every argument is marked for ArgsDump ([`Task::dump`]), so a level-3 capture keeps every
/// payload and each task can be replayed from it.
///
/// # Errors
/// Whatever the runtime refuses.
pub fn vector(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    let (n, chunk, blocks) = (o.scalar(0)?, o.scalar(1)?, o.scalar(2)? as u32);
    let (a, b, out) = (TensorId(0), TensorId(1), TensorId(2));
    let mut off = 0;
    while off < n {
        let len = chunk.min(n - off);
        o.scope_begin();
        let c = o.alloc_scratch(len)?;
        let d = o.alloc_scratch(len)?;
        let e = o.alloc_scratch(len)?;
        let (av, bv) = (View::range(a, off, len), View::range(b, off, len));
        let add = Task::new(K_ADD).input(av).dump().input(bv).dump().output(c).dump();
        o.submit(&add.blocks(blocks))?;
        let mul = Task::new(K_MUL).input(c).dump().input(av).dump().output(d).dump();
        o.submit(&mul.blocks(blocks))?;
        let scale = Task::new(K_SCALE).input(d).dump().output(e).dump().scalar_f32(0.5);
        o.submit(&scale.blocks(blocks))?;
        o.submit(&Task::new(K_ADD_SCALAR).inout(e).dump().scalar_f32(1.0).blocks(blocks))?;
        let copy = Task::new(K_COPY).input(e).dump().output(View::range(out, off, len)).dump();
        o.submit(&copy.blocks(blocks))?;
        o.scope_end()?;
        off += len;
    }
    Ok(())
}

/// The paged-attention example's graph. Scalars: `B`, `P`, `S`, `D`; tensors: `q_raw`, `k`, `v`,
/// `parts`, `out`, `q`. Every argument is marked for ArgsDump, as in [`vector`].
///
/// # Errors
/// Whatever the runtime refuses.
pub fn paged_attention(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    let (bn, pn, sn, dn) = (o.scalar(0)?, o.scalar(1)?, o.scalar(2)?, o.scalar(3)?);
    let (q_raw, k, v, parts, out, q) =
        (TensorId(0), TensorId(1), TensorId(2), TensorId(3), TensorId(4), TensorId(5));
    let scale = 1.0 / (dn as f32).sqrt();
    o.submit(
        &Task::new(K_SCALE)
            .input(q_raw)
            .dump()
            .output(q)
            .dump()
            .scalar_f32(scale)
            .blocks(bn.clamp(1, 4) as u32),
    )?;
    let page = sn * dn;
    for b in 0..bn {
        for p in 0..pn {
            let kv = (b * pn + p) * page;
            o.submit(
                &Task::new(K_ATTN_PARTIAL)
                    .input(View::range(q, b * dn, dn))
                    .dump()
                    .input(View::range(k, kv, page))
                    .dump()
                    .input(View::range(v, kv, page))
                    .dump()
                    .output(View::range(parts, (b * pn + p) * (dn + 2), dn + 2))
                    .dump()
                    .scalar(dn)
                    .scalar(sn)
                    .scalar_f32(1.0),
            )?;
        }
    }
    for b in 0..bn {
        o.submit(
            &Task::new(K_ATTN_MERGE)
                .input(View::range(parts, b * pn * (dn + 2), pn * (dn + 2)))
                .dump()
                .output(View::range(out, b * dn, dn))
                .dump()
                .scalar(dn)
                .scalar(pn),
        )?;
    }
    Ok(())
}

/// The storm's graph. Scalars: `n`, `lanes`, `lane_len`; tensor: the lanes. No argument is
/// marked for ArgsDump: a level-3 capture of the storm keeps every argument's metadata and no
/// payload (level 2 copies them all).
///
/// # Errors
/// Whatever the runtime refuses.
pub fn storm(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    let (n, w, l) = (o.scalar(0)?, o.scalar(1)?, o.scalar(2)?);
    let lanes = TensorId(0);
    for k in 0..n {
        let lane = View::range(lanes, (k % w) * l, l);
        o.submit(&Task::new(K_ADD_SCALAR).inout(lane).scalar_f32(1.0))?;
    }
    Ok(())
}
