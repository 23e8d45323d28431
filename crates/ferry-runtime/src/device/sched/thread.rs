//! A scheduler thread: the handshake with its cores, the dispatch loop over
//! them until the run is finished or aborted, and their shutdown.
use super::super::image::{
    DispatchArgs, PayloadStatus, TensorRecord, PAYLOAD_CORE_LINE, PAYLOAD_FAULT,
};
use super::super::kernels::CoreKind;
use super::super::ops::DeviceOps;
use super::super::task::ResolvedTask;
use super::{
    cluster_of, lock, RunState, BUDGET_POLL, CORE_DEADLINE, DEFAULT_KERNEL_BUDGET,
    PAYLOAD_PAIR_BYTES,
};
use crate::error::{DeviceFault, KernelFault};
use ferry_abi::arch::Arch;
use ferry_abi::handshake::HandshakeLayout;
use ferry_abi::regs::{
    dispatch_progress, is_task_id, DispatchProgress, RegLayout, AICORE_EXIT_SIGNAL, AICPU_IDLE,
    COND_EXITED, FAST_PATH_CLOSE, FAST_PATH_OPEN, MAX_TASK_ID,
};
use std::sync::atomic::Ordering;
use std::time::Duration;

struct CoreState {
    index: u32,
    base: u64,
    queue: usize,
    payload_off: usize,
    /// The dispatch the core holds, `(seq, id)`.
    running: Option<(u64, u32)>,
    /// A dispatch queued behind `running` in the other entry of the payload pair: the core
    /// takes it when it finishes `running`, without waiting for the scheduler.
    pending: Option<(u64, u32)>,
    next_id: u32,
    /// When the scheduler, about to wait, first saw the dispatch in flight still running
    /// (device cycles): what its kernel budget counts from. Stamped only before a wait, so the
    /// dispatch path reads no clock for it.
    since: Option<u64>,
    /// Its kernel outran the budget: out of service for the rest of the launch (never
    /// dispatched to, never waited for).
    hung: bool,
}

/// The kernel budget of the run, in device cycles of a `hz` clock (at least 1).
fn budget_cycles(ms: u32, hz: u64) -> (u64, u64) {
    let ms = match ms {
        0 => DEFAULT_KERNEL_BUDGET.as_millis() as u64,
        ms => u64::from(ms),
    };
    let cycles = u128::from(ms) * u128::from(hz) / 1000;
    (ms, u64::try_from(cycles).unwrap_or(u64::MAX).max(1))
}

/// Stamps each running core's first sight and takes out of service those whose kernel has run
/// for `budget` cycles or more at `now`: each fails the run with [`KernelFault::Hung`] naming
/// its task, kernel and core. Returns the cores taken out, and the earliest cycle at which a
/// running core's budget runs out.
fn expire_hung(
    cores: &mut [CoreState],
    kernels: &[u32],
    now: u64,
    (budget_ms, budget): (u64, u64),
) -> (Vec<DeviceFault>, Option<u64>) {
    let (mut hung, mut earliest) = (Vec::new(), None::<u64>);
    for (c, &kernel) in cores.iter_mut().zip(kernels) {
        let Some((seq, _)) = c.running else { continue };
        let since = *c.since.get_or_insert(now);
        let end = since.saturating_add(budget);
        if now >= end {
            // A dispatch queued behind it never starts: the run fails with this fault.
            c.running = None;
            c.pending = None;
            c.since = None;
            c.hung = true;
            let fault = KernelFault::Hung { kernel, core: c.index, budget_ms };
            hung.push(DeviceFault::Kernel { task: seq, kernel, fault });
        } else {
            earliest = Some(earliest.map_or(end, |e| e.min(end)));
        }
    }
    (hung, earliest)
}

impl CoreState {
    /// What the core's `COND` says about its dispatches now.
    fn progress(&self, ops: &dyn DeviceOps, cond: u32) -> DispatchProgress {
        match self.running {
            Some((_, id)) => {
                dispatch_progress(ops.reg_read(self.base, cond), id, self.pending.map(|p| p.1))
            }
            None => DispatchProgress::NONE,
        }
    }

    /// Whether the core holds no dispatch (and may be shut down or handed new work).
    fn is_idle(&self) -> bool {
        self.running.is_none()
    }
}

/// Scheduler thread `sched` of `scheds`: handshake with its cores, dispatch until the run
/// is finished or aborted, then shut its cores down.
///
/// Each core holds up to two dispatches, one per entry of its payload pair: once a core has
/// acknowledged its dispatch and its queue has a block to spare for every core that takes from
/// it, the scheduler queues the next one behind it, and the core starts it as it finishes,
/// without waiting for the scheduler to see its FIN (`ferry_abi::regs::dispatch_progress`).
pub fn scheduler(ops: &dyn DeviceOps, run: &RunState, sched: u32, scheds: u32) {
    let hdr = &run.hdr;
    let layout = Arch::from_u32(hdr.arch).map(RegLayout::of).unwrap_or(RegLayout::of(Arch::A2a3));
    let (dmb, cond) = (layout.data_main_base as u32, layout.cond as u32);
    let owned: Vec<u32> =
        (0..hdr.worker_count).filter(|&i| cluster_of(i, hdr.aic_count) % scheds == sched).collect();
    let mut dfx = run.dfx_thread(sched, &owned);
    let mut cores = match handshake(ops, run, &owned, layout) {
        Ok(c) => c,
        Err((fault, up)) => {
            run.fail(ops, fault);
            shutdown(ops, &up, dmb, cond, layout.fast_path_enable);
            return;
        }
    };
    // The cores whose running dispatch one sweep saw finished, and whether their queued one
    // finished too (reused: no allocation per iteration).
    let mut fins: Vec<(usize, bool)> = Vec::with_capacity(cores.len());
    // Per core, the task of its dispatch in flight: copied out of its slot once, at dispatch, and
    // lent to the completion hooks from here. Beside `cores`, not in it, so the sweeps and the
    // wait condition scan a compact array.
    let mut tasks: Vec<ResolvedTask> = vec![ResolvedTask::EMPTY; cores.len()];
    // The same for the dispatch queued behind it; swapped into `tasks` when it starts running.
    let mut queued: Vec<ResolvedTask> = vec![ResolvedTask::EMPTY; cores.len()];
    // What the thread's writers need timed: AICPU task records or scheduler phases (phases
    // imply `timed`).
    let timed = dfx.as_ref().is_some_and(|d| d.timed());
    let phases = dfx.as_ref().is_some_and(|d| d.phases_on());
    let hz = ops.clock_hz().max(1);
    let budget = budget_cycles(hdr.kernel_budget_ms, hz);
    // Each core's kernel id in flight, beside `tasks` for `expire_hung`.
    let mut kernels: Vec<u32> = vec![0; cores.len()];
    loop {
        let mut progress = false;
        // First every FIN of this sweep is seen, then they are completed. With DFX on, one clock
        // read after the sweep stamps them all: it follows every FIN it stamps (each was
        // observed, Acquire, before it, and the read waits for those loads), so no AICPU finish
        // time precedes its core's end (read before its FIN store). A
        // Complete phase runs from that read to the end of the completions, a Dispatch phase
        // from then (or the first dispatch) to the last dispatch; idle polling reads no clock.
        fins.clear();
        for (k, c) in cores.iter().enumerate() {
            let p = c.progress(ops, cond);
            if p.running_done {
                fins.push((k, p.pending_done));
            }
        }
        let observed = (timed && !fins.is_empty()).then(|| ops.clock_cycles_ordered());
        for &(k, both) in &fins {
            let c = &mut cores[k];
            let Some(done) = c.running.take() else { continue };
            c.since = None;
            progress = true;
            finish(
                ops,
                run,
                dfx.as_mut(),
                c.payload_off,
                (c.index, done),
                &tasks[k],
                observed.unwrap_or(0),
            );
            // The queued dispatch is the core's now (it may have finished already too).
            if let Some(next) = c.pending.take() {
                std::mem::swap(&mut tasks[k], &mut queued[k]);
                if both {
                    finish(
                        ops,
                        run,
                        dfx.as_mut(),
                        c.payload_off,
                        (c.index, next),
                        &tasks[k],
                        observed.unwrap_or(0),
                    );
                } else {
                    c.running = Some(next);
                }
            }
        }
        let completed_n = fins.len() as u32;
        let complete_start = observed.filter(|_| phases);
        let complete_end = (phases && completed_n > 0).then(|| ops.clock_cycles());
        // One dispatch time per batch, read before the batch's first register write, so it
        // precedes every core's receive time.
        let mut dispatch_start = None;
        let mut dispatched_n = 0u32;
        if !run.is_aborted() {
            // Idle cores first, then a second dispatch behind each running one that its core
            // has taken, while the queue has a block to spare for every core.
            for second in [false, true] {
                for ((c, task), next) in cores.iter_mut().zip(&mut tasks).zip(&mut queued) {
                    let ok = if second {
                        c.pending.is_none()
                            && !c.hung
                            && run.has_spare(c.queue)
                            && c.progress(ops, cond).may_queue
                    } else {
                        c.is_idle() && !c.hung
                    };
                    if !ok {
                        continue;
                    }
                    // A core takes work of its kind (`queue_for` already folded both kinds into
                    // one queue when the chip has no cores of one kind).
                    let w = run.pop(c.queue);
                    let Some((seq, block)) = w else { continue };
                    if timed && dispatch_start.is_none() {
                        dispatch_start = Some(complete_end.unwrap_or_else(|| ops.clock_cycles()));
                    }
                    let at = dispatch_start.unwrap_or(0);
                    let task = if second { next } else { task };
                    let d = dfx.as_mut().map(|d| (d, at));
                    let sent = dispatch(ops, run, (c, task), seq, block, dmb, d);
                    if second {
                        c.pending = Some(sent);
                    } else {
                        c.running = Some(sent);
                    }
                    if block == 0 && task.block_dim > 1 && run.args_dump_on() {
                        run.queue_rest_blocks(ops, seq);
                    }
                    progress = true;
                    dispatched_n += 1;
                }
            }
        }
        if let Some(d) = dfx.as_mut().filter(|_| phases && progress) {
            use ferry_abi::records::SchedPhaseKind;
            if let (Some(t0), Some(t1)) = (complete_start, complete_end) {
                d.phase(SchedPhaseKind::Complete as u32, t0, t1, completed_n, [0, 0]);
            }
            if let Some(t1) = dispatch_start {
                let t2 = ops.clock_cycles();
                d.phase(SchedPhaseKind::Dispatch as u32, t1, t2, dispatched_n, [dispatched_n, 0]);
            }
            d.next_iter();
        }
        let idle = cores.iter().all(CoreState::is_idle);
        if idle && (run.is_finished() || run.is_aborted()) {
            break;
        }
        if progress {
            continue;
        }
        // About to wait: a kernel past its budget takes its core out of service and fails the
        // run; otherwise the wait ends by the earliest budget's end (in slices, so a clock that
        // jumps, as a virtual one does, is seen within one).
        let busy = cores.iter().any(|c| c.running.is_some());
        let mut timeout = None;
        if busy {
            for (k, t) in kernels.iter_mut().zip(&tasks) {
                *k = t.kernel;
            }
            let now = ops.clock_cycles();
            let (hung, earliest) = expire_hung(&mut cores, &kernels, now, budget);
            if !hung.is_empty() {
                for f in hung {
                    run.fail(ops, f);
                }
                continue;
            }
            let left = earliest.map_or(0, |e| e.saturating_sub(now));
            let left = Duration::from_nanos(left.saturating_mul(1_000_000_000 / hz));
            timeout = Some(left.clamp(Duration::from_micros(100), BUDGET_POLL));
        }
        ops.aicpu_wait(
            &mut || {
                let aborted = run.is_aborted();
                cores.iter().any(|c| {
                    let p = c.progress(ops, cond);
                    p.running_done
                        || (!aborted
                            && !c.hung
                            && if c.is_idle() {
                                run.has_ready(c.queue)
                            } else {
                                p.may_queue && run.has_spare(c.queue)
                            })
                }) || (cores.iter().all(CoreState::is_idle) && (run.is_finished() || aborted))
            },
            timeout,
        );
    }
    if let Some(d) = dfx {
        d.finish();
    }
    // A hung core gets its exit signal (taken if its kernel ever returns) but is not waited for.
    for c in cores.iter().filter(|c| c.hung) {
        ops.reg_write_aicpu(c.base, dmb, AICORE_EXIT_SIGNAL);
    }
    let up: Vec<u64> = cores.iter().filter(|c| !c.hung).map(|c| c.base).collect();
    shutdown(ops, &up, dmb, cond, layout.fast_path_enable);
}

/// What the scheduler does when core `core` (index, `(seq, id)`) finished a dispatch: reads its
/// status line (a fault fails the run), records it (DFX on: `dfx`, with `observed`, the sweep's
/// clock read) and completes the block; `task` is the dispatch's copy of its task.
fn finish(
    ops: &dyn DeviceOps,
    run: &RunState,
    dfx: Option<&mut super::super::dfx::ThreadDfx>,
    payload_off: usize,
    (core, (seq, id)): (u32, (u64, u32)),
    task: &ResolvedTask,
    observed: u64,
) {
    let st: PayloadStatus =
        run.image.read_record(payload_off + (id as usize & 1) * 256 + PAYLOAD_CORE_LINE);
    if st.status == PAYLOAD_FAULT {
        let kernel = task.kernel;
        let fault = KernelFault::decode(st.fault_code, st.fault_detail)
            .unwrap_or(KernelFault::UnknownKernel { kernel });
        run.fail(ops, DeviceFault::Kernel { task: seq, kernel, fault });
    }
    let Some(d) = dfx else {
        run.block_done(ops, seq, None);
        return;
    };
    let times = st.times();
    d.on_finish(core, seq, id, times, observed);
    if d.wants_complete() {
        // Every block of `seq` carries the same task, so the core that finished the last one
        // lends its dispatch's copy: no second copy out of the slot.
        run.block_done(ops, seq, Some(&mut || d.on_complete(ops, core, seq, times, task)));
    } else {
        run.block_done(ops, seq, None);
    }
}

/// Dispatches block `block` of `seq` to core `c` in the payload entry of its next id, copying
/// the task into `task` (the dispatch's copy); with DFX on, `dfx` is the thread's writers and
/// the batch's dispatch time. Returns `(seq, id)`: the caller makes it the core's running or
/// queued dispatch.
fn dispatch(
    ops: &dyn DeviceOps,
    run: &RunState,
    (c, task): (&mut CoreState, &mut ResolvedTask),
    seq: u64,
    block: u32,
    dmb: u32,
    dfx: Option<(&mut super::super::dfx::ThreadDfx, u64)>,
) -> (u64, u32) {
    let id = c.next_id;
    c.next_id = if id >= MAX_TASK_ID { 1 } else { id + 1 };
    *task = lock(&run.slot(seq).inner).task;
    let mut a = DispatchArgs::default();
    a.task = seq;
    a.kernel_id = task.kernel;
    a.block_idx = block;
    a.block_dim = task.block_dim;
    a.n_tensors = task.n_tensors;
    a.n_scalars = task.n_scalars;
    a.roles = task.role_bits();
    a.scalars = task.scalars;
    for (d, s) in a.tensors.iter_mut().zip(task.tensors()) {
        *d = TensorRecord { addr: s.0, bytes: s.1 };
    }
    // Only the AICPU-written lines; the core owns the status line. Published by the Release
    // register write below.
    run.image.write_record(c.payload_off + (id as usize & 1) * 256, &a);
    if let Some((d, at)) = dfx {
        d.on_dispatch(ops, (c.index, id), seq, block, task, at);
    }
    ops.reg_write_aicpu(c.base, dmb, id);
    (seq, id)
}

type HandshakeFailure = (DeviceFault, Vec<u64>);

fn handshake(
    ops: &dyn DeviceOps,
    run: &RunState,
    owned: &[u32],
    layout: &RegLayout,
) -> Result<Vec<CoreState>, HandshakeFailure> {
    use ferry_abi::services::{
        CACHE_OP_CIVAC, MEM_LOAD_ACQUIRE, MEM_LOAD_PLAIN, MEM_STORE_RELEASE,
    };
    let hdr = &run.hdr;
    let hl = HandshakeLayout::from_u32(hdr.handshake_layout).unwrap_or(HandshakeLayout::COMBINED);
    let img = run.image.addr();
    let slot = |i: u32| img + hdr.handshake_off + u64::from(hl.slot_bytes) * u64::from(i);
    // What this thread's last load of each owned core's `aicore_done` returned.
    let seen: Vec<std::cell::Cell<u32>> = owned.iter().map(|_| std::cell::Cell::new(0)).collect();
    // One poll of core `i`'s report, as the CPU issues it: the loads go through whatever cache
    // the cluster has (`DeviceOps::mem_load`). With the split layout (option D) the line the
    // AICore writes is cleaned and invalidated first (`dc civac`): it holds no AICPU field, so
    // the clean writes nothing back, and where EL0 may invalidate (fix A) the load refetches.
    let poll = |k: usize, i: u32| -> u32 {
        if hl.is_split() {
            ops.cache_op(slot(i) + u64::from(hl.aicore_line_off), CACHE_OP_CIVAC);
        }
        // Acquire: pairs with the core's Release store of `aicore_done`, after its
        // `physical_core_id` / `core_type` stores.
        let v = ops
            .mem_load(slot(i) + u64::from(hl.aicore_done_off), 4, MEM_LOAD_ACQUIRE)
            .unwrap_or(0) as u32;
        seen[k].set(v);
        v
    };
    // The core's physical id, read after its report was seen (ordered by that Acquire load).
    let pcid_of = |i: u32| {
        ops.mem_load(slot(i) + u64::from(hl.physical_core_id_off), 4, MEM_LOAD_PLAIN)
            .unwrap_or(u64::from(u32::MAX)) as u32
    };
    let record = || {
        if hdr.handshake_seen_off == 0 {
            return; // an image without a handshake record
        }
        for (k, &i) in owned.iter().enumerate() {
            let at = hdr.handshake_seen_off as usize + 4 * i as usize;
            // Relaxed: read by the host after the run's launch completed.
            run.image.u32_at(at).store(seen[k].get(), Ordering::Relaxed);
        }
    };
    let hz = ops.clock_hz().max(1);
    let timeout = match hdr.handshake_timeout_ms {
        0 => CORE_DEADLINE,
        ms => Duration::from_millis(u64::from(ms)),
    };
    let wait_cycles = (timeout.as_nanos() as u64).saturating_mul(hz) / 1_000_000_000;
    let deadline = ops.clock_cycles().saturating_add(wait_cycles.max(1));
    let mut reported: Vec<Option<CoreState>> = owned.iter().map(|_| None).collect();
    let bound = hdr.max_physical_cores.min(hdr.regs_count);
    // Phase 1: sweep the owned set until every core has reported.
    loop {
        for (k, &i) in owned.iter().enumerate() {
            if reported[k].is_some() {
                continue;
            }
            if poll(k, i) == 0 {
                continue;
            }
            let pcid = pcid_of(i);
            if pcid >= bound {
                record();
                // Emergency shutdown reaches every owned core that has reported a usable id so
                // far; the host reaps the rest.
                let up = owned
                    .iter()
                    .enumerate()
                    .filter_map(|(kj, &j)| {
                        let done = seen[kj].get() != 0;
                        let p = pcid_of(j);
                        // Relaxed: written by the host before the launch.
                        (done && p < bound)
                            .then(|| run.regs.u64_at(8 * p as usize).load(Ordering::Relaxed))
                    })
                    .collect();
                return Err((DeviceFault::Handshake { core: i, physical: pcid, bound }, up));
            }
            // Relaxed: the regs table is written by the host before the launch.
            let base = run.regs.u64_at(8 * pcid as usize).load(Ordering::Relaxed);
            let kind = if i < hdr.aic_count { CoreKind::Aic } else { CoreKind::Aiv };
            let queue = match kind {
                CoreKind::Aic => 0,
                CoreKind::Aiv => 1,
            };
            reported[k] = Some(CoreState {
                index: i,
                base,
                queue,
                payload_off: (hdr.payload_off + u64::from(i) * PAYLOAD_PAIR_BYTES) as usize,
                running: None,
                pending: None,
                next_id: 1,
                since: None,
                hung: false,
            });
        }
        if reported.iter().all(Option::is_some) {
            break;
        }
        let now = ops.clock_cycles();
        if now >= deadline {
            record();
            let k = reported.iter().position(Option::is_none).unwrap_or(0);
            let up = reported.iter().flatten().map(|c| c.base).collect();
            let waited_ms = timeout.as_millis().min(u128::from(u32::MAX)) as u32;
            return Err((DeviceFault::HandshakeTimeout { core: owned[k], waited_ms }, up));
        }
        let left = Duration::from_nanos((deadline - now).saturating_mul(1_000_000_000 / hz));
        ops.aicpu_wait(
            &mut || {
                owned
                    .iter()
                    .enumerate()
                    .zip(&reported)
                    .any(|((k, &i), r)| r.is_none() && poll(k, i) != 0)
            },
            Some(left.min(Duration::from_millis(50))),
        );
    }
    record();
    let cores: Vec<CoreState> = reported.into_iter().flatten().collect();
    // Phase 2: every core's payload pointer, written only after its report (in the one-line
    // layout the report rewrites the line). With the split layout the AICPU's own line is then
    // cleaned, so the store reaches memory however the cluster caches it; it holds no AICore
    // field, so nothing stale goes back with it.
    for c in &cores {
        let addr = run.image.addr() + c.payload_off as u64;
        let task = slot(c.index) + u64::from(hl.task_off);
        // Release: pairs with the core's Acquire load of `task` after it sees the window open
        // (the register write below also orders it).
        ops.mem_store(task, 8, addr, MEM_STORE_RELEASE);
        if hl.is_split() {
            ops.cache_op(slot(c.index) + u64::from(hl.aicpu_line_off), CACHE_OP_CIVAC);
        }
    }
    // Phase 3: open every window; this write is the acknowledgement.
    for c in &cores {
        if let Some(fp) = layout.fast_path_enable {
            ops.reg_write_aicpu(c.base, fp as u32, FAST_PATH_OPEN);
        }
        ops.reg_write_aicpu(c.base, layout.data_main_base as u32, AICPU_IDLE);
    }
    Ok(cores)
}

fn shutdown(ops: &dyn DeviceOps, bases: &[u64], dmb: u32, cond: u32, fast_path: Option<u64>) {
    for &b in bases {
        ops.reg_write_aicpu(b, dmb, AICORE_EXIT_SIGNAL);
    }
    for &b in bases {
        let exited =
            ops.aicpu_wait(&mut || ops.reg_read(b, cond) == COND_EXITED, Some(CORE_DEADLINE));
        if !exited {
            tracing::warn!(reg_base = b, "core did not acknowledge exit; the host reaps it");
        }
        ops.reg_write_aicpu(b, dmb, AICPU_IDLE);
        if let Some(fp) = fast_path {
            ops.reg_write_aicpu(b, fp as u32, FAST_PATH_CLOSE);
        }
    }
}

/// Whether a `DATA_MAIN_BASE` value is a dispatch.
pub fn is_dispatch(v: u32) -> bool {
    v != 0 && is_task_id(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(index: u32, running: Option<(u64, u32)>) -> CoreState {
        CoreState {
            index,
            base: 0,
            queue: 1,
            payload_off: 0,
            running,
            pending: None,
            next_id: 1,
            since: None,
            hung: false,
        }
    }

    /// The budget counts from the first wait that sees a dispatch running, a core is taken out
    /// at exactly the budget (not a cycle before), and the fault names its task, kernel and
    /// core; idle cores are left alone, and the earliest end is the next deadline to wake for.
    #[test]
    fn a_core_past_its_kernel_budget_is_taken_out_naming_task_kernel_and_core() {
        let budget = (5, 100); // 5 ms, 100 cycles
        let mut cores = vec![core(3, Some((7, 1))), core(4, None), core(5, Some((9, 2)))];
        cores[0].pending = Some((8, 2));
        let kernels = [256, 0, 257];
        let (hung, earliest) = expire_hung(&mut cores, &kernels, 1_000, budget);
        assert!(hung.is_empty());
        assert_eq!(earliest, Some(1_100));
        assert_eq!(
            (cores[0].since, cores[1].since, cores[2].since),
            (Some(1_000), None, Some(1_000))
        );
        // A dispatch seen later counts from then.
        cores[2].since = Some(1_050);
        let (hung, earliest) = expire_hung(&mut cores, &kernels, 1_099, budget);
        assert!(hung.is_empty(), "a cycle before the budget");
        assert_eq!(earliest, Some(1_100));
        let (hung, earliest) = expire_hung(&mut cores, &kernels, 1_100, budget);
        let fault = KernelFault::Hung { kernel: 256, core: 3, budget_ms: 5 };
        assert_eq!(hung, [DeviceFault::Kernel { task: 7, kernel: 256, fault }]);
        assert_eq!(earliest, Some(1_150));
        assert!(cores[0].hung && cores[0].running.is_none() && cores[0].since.is_none());
        assert!(cores[0].pending.is_none(), "its queued dispatch is dropped with it");
        assert!(!cores[2].hung && cores[2].running.is_some());
        // A hung core is never expired again; the clock past both budgets takes the second.
        let (hung, earliest) = expire_hung(&mut cores, &kernels, 5_000, budget);
        assert_eq!(hung.len(), 1);
        assert!(matches!(hung[0], DeviceFault::Kernel { task: 9, kernel: 257, .. }));
        assert_eq!(earliest, None);
    }

    #[test]
    fn the_budget_in_cycles_follows_the_clock_and_defaults_to_a_minute() {
        assert_eq!(budget_cycles(2_000, 50_000_000), (2_000, 100_000_000));
        assert_eq!(budget_cycles(0, 1_000), (60_000, 60_000));
        assert_eq!(budget_cycles(1, 1), (1, 1), "at least one cycle");
        assert_eq!(budget_cycles(u32::MAX, u64::MAX), (u64::from(u32::MAX), u64::MAX));
    }
}
