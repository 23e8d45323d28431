//! A ferry orchestration library: the graph of a callable, decided at run time from a device
//! tensor.
//!
//! `ragged_rows` runs over a `[rows, cols]` f32 matrix `x` (tensor 0) whose row `r` holds
//! `lens[r]` valid elements (`lens`, tensor 1, int32, read when the graph is built). For every
//! row with `lens[r] > 0` it allocates a row-sized tensor inside a scope, submits
//! `t = x[r] + x[r]` and `out[r] = t + x[r]` (tensor 2) over the row's first `lens[r]`
//! elements (both `add_nd` over N-d views), and ends with one dependency-only task after the
//! last row's. So `out[r][c] = 3 x[r][c]` for `c < lens[r]`, the rest untouched, and the graph
//! has `2 × (rows with lens > 0) + 1` tasks. Scalar 0 is `cols`.
//!
//! `fails_after_one` submits one task and then fails with its own code, 7: the run fails
//! naming the library, the function and task 1.
use ferry_kernel_abi::orch::{Orch, OrchError, OrchView, TaskHandle, TaskSpec, Tensor};
use ferry_kernel_abi::orch_lib::builtin;
use ferry_kernel_abi::{orchestration_library, DType};

fn ragged_rows(o: &mut Orch<'_>) -> Result<(), OrchError> {
    let (x, lens, out) = (Tensor(0), Tensor(1), Tensor(2));
    let cols = o.scalar(0)?;
    let rows = o.tensor_bytes(lens)? / 4;
    let lens = o.read_i32(lens, 0, rows as usize)?;
    let mut last: Option<TaskHandle> = None;
    for (r, &n) in lens.iter().enumerate() {
        let n = u64::try_from(n).map_err(|_| OrchError::Failed(2))?.min(cols);
        if n == 0 {
            continue;
        }
        let row = OrchView::flat(x, DType::Float32, r as u64 * cols, n);
        let dst = OrchView::flat(out, DType::Float32, r as u64 * cols, n);
        last = Some(o.scope("ragged_rows", r as u32, |o| {
            let t = o.alloc(n * 4)?;
            let tv = OrchView::flat(t, DType::Float32, 0, n);
            o.submit(&TaskSpec::new(builtin::ADD_ND).input(row).input(row).output(tv).views())?;
            o.submit(&TaskSpec::new(builtin::ADD_ND).input(tv).input(row).output(dst).views())
        })?);
    }
    let mut join = TaskSpec::join();
    if let Some(t) = last {
        join = join.after(t);
    }
    o.submit(&join)?;
    Ok(())
}

fn fails_after_one(o: &mut Orch<'_>) -> Result<(), OrchError> {
    let v = OrchView::flat(Tensor(0), DType::Float32, 0, 4);
    let out = OrchView::flat(Tensor(2), DType::Float32, 0, 4);
    o.submit(&TaskSpec::new(builtin::ADD_ND).input(v).input(v).output(out).views())?;
    Err(OrchError::Failed(7))
}

orchestration_library! {
    name: "orchestration-template",
    functions: [
        { name: ragged_rows, tensors: 3, scalars: 1 },
        { name: fails_after_one, tensors: 3, scalars: 0 },
    ],
}
