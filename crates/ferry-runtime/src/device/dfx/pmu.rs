//! The simulated PMU: what a task's kernel does, and the counters of each event type.
use super::super::task::{ResolvedTask, Role};
use ferry_abi::records::PMU_MAX_COUNTERS;

/// Work a task does, as the PMU counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskWork {
    /// Bytes read from global memory (inputs and inouts).
    pub bytes_read: u64,
    /// Bytes written to global memory (outputs and inouts).
    pub bytes_written: u64,
    /// Elements produced.
    pub elements: u64,
    /// Arithmetic operations issued.
    pub ops: u64,
}

/// What kernel `task.kernel` does over its tensors (the kernels of [`super::super::kernels`]).
pub fn task_work(task: &ResolvedTask) -> TaskWork {
    use super::super::kernels::*;
    let mut w = TaskWork::default();
    for &(_, bytes, role) in task.tensors() {
        match role {
            Role::Input => w.bytes_read += bytes,
            Role::Output => w.bytes_written += bytes,
            Role::InOut => {
                w.bytes_read += bytes;
                w.bytes_written += bytes;
            }
        }
    }
    w.elements = w.bytes_written / 4;
    let s = |i: usize| task.scalars[i];
    w.ops = match task.kernel {
        K_ADD | K_MUL | K_SCALE | K_ADD_SCALAR => w.elements,
        K_COPY => 0,
        // scores (2·D per key), exp + sum (3 per key), o update (2·D per key)
        K_ATTN_PARTIAL => s(1).saturating_mul(4 * s(0) + 3),
        // per part: exp, rescale of D + 2 values, then the division
        K_ATTN_MERGE => s(1).saturating_mul(2 * s(0) + 4) + s(0),
        _ => w.elements,
    };
    w
}

/// Simulated PMU counters of one task for `event_type`, in the slot order of
/// `ferry_profile::pmu_counter_names` (a5 adds `fixpipe_busy_cycles`, `issued_instructions`).
pub fn pmu_counters(
    event_type: u32,
    aic: bool,
    cycles: u64,
    w: &TaskWork,
) -> [u32; PMU_MAX_COUNTERS] {
    let c = |v: u64| v.min(u64::from(u32::MAX)) as u32;
    // 32 B per MTE beat, 8 lanes per vector op, 16x16 per cube op.
    let (beats_r, beats_w) = (w.bytes_read.div_ceil(32), w.bytes_written.div_ceil(32));
    let issued = if aic { w.ops.div_ceil(256) } else { w.ops.div_ceil(8) } + beats_r + beats_w;
    let busy = cycles;
    let mut out = [0u32; PMU_MAX_COUNTERS];
    let v: [u64; 8] = match event_type {
        1 => [
            if aic { w.ops } else { 0 },
            0,
            if aic { 0 } else { w.ops },
            0,
            0,
            0,
            issued / 4,
            w.elements,
        ],
        4 => [
            w.bytes_read,
            w.bytes_written,
            w.bytes_read,
            w.bytes_written,
            if aic { w.bytes_read } else { 0 },
            0,
            beats_r + beats_w,
            0,
        ],
        5 => {
            let l0 = if aic { w.bytes_read } else { 0 };
            [l0 / 2, l0 / 2, l0 / 2, l0 / 2, w.bytes_written, w.bytes_written, 0, beats_r]
        }
        6 => [0; 8],
        7 => [beats_r, beats_w, w.bytes_read, w.bytes_written, 0, w.bytes_read, w.bytes_written, 0],
        8 => [beats_r, 0, beats_w, 0, 0, w.bytes_read, w.bytes_written, beats_r + beats_w],
        _ => {
            let total = (w.ops + beats_r + beats_w).max(1);
            let share = |x: u64| busy.saturating_mul(x) / total;
            [
                if aic { 0 } else { share(w.ops) },
                if aic { share(w.ops) } else { 0 },
                busy / 16,
                0,
                share(beats_r),
                share(beats_w),
                0,
                issued / 16 + 1,
            ]
        }
    };
    for (o, x) in out.iter_mut().zip(v) {
        *o = c(x);
    }
    out[8] = 0;
    out[9] = c(issued);
    out
}
