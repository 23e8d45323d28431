//! A scheduler thread: the handshake with its cores, the dispatch loop over
//! them until the run is finished or aborted, and their shutdown.
use super::super::image::{
    DispatchArgs, PayloadStatus, TensorRecord, PAYLOAD_CORE_LINE, PAYLOAD_FAULT,
};
use super::super::kernels::CoreKind;
use super::super::ops::DeviceOps;
use super::super::task::ResolvedTask;
use super::{cluster_of, lock, RunState, CORE_DEADLINE, PAYLOAD_PAIR_BYTES};
use crate::error::{DeviceFault, KernelFault};
use ferry_abi::arch::Arch;
use ferry_abi::handshake::HandshakeLayout;
use ferry_abi::regs::{
    cond_fin, is_task_id, RegLayout, AICORE_EXIT_SIGNAL, AICPU_IDLE, COND_EXITED, FAST_PATH_CLOSE,
    FAST_PATH_OPEN, MAX_TASK_ID,
};
use std::sync::atomic::Ordering;
use std::time::Duration;

struct CoreState {
    index: u32,
    base: u64,
    queue: usize,
    payload_off: usize,
    running: Option<(u64, u32)>,
    next_id: u32,
}

/// Scheduler thread `sched` of `scheds`: handshake with its cores, dispatch until the run
/// is finished or aborted, then shut its cores down.
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
    // The cores whose FIN one sweep saw (reused: no allocation per iteration).
    let mut fins: Vec<usize> = Vec::with_capacity(cores.len());
    // Per core, the task of its dispatch in flight: copied out of its slot once, at dispatch, and
    // lent to the completion hooks from here. Beside `cores`, not in it, so the sweeps and the
    // wait condition scan a compact array.
    let mut tasks: Vec<ResolvedTask> = vec![ResolvedTask::EMPTY; cores.len()];
    // What the thread's writers need timed: AICPU task records or scheduler phases (phases
    // imply `timed`).
    let timed = dfx.as_ref().is_some_and(|d| d.timed());
    let phases = dfx.as_ref().is_some_and(|d| d.phases_on());
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
            if c.running.is_some_and(|(_, id)| ops.reg_read(c.base, cond) == cond_fin(id)) {
                fins.push(k);
            }
        }
        let observed = (timed && !fins.is_empty()).then(|| ops.clock_cycles_ordered());
        for &k in &fins {
            let c = &mut cores[k];
            let Some((seq, id)) = c.running.take() else { continue };
            progress = true;
            let st: PayloadStatus =
                run.image.read_record(c.payload_off + (id as usize & 1) * 256 + PAYLOAD_CORE_LINE);
            if st.status == PAYLOAD_FAULT {
                let kernel = tasks[k].kernel;
                let fault = KernelFault::decode(st.fault_code, st.fault_detail)
                    .unwrap_or(KernelFault::UnknownKernel { kernel });
                run.fail(ops, DeviceFault::Kernel { task: seq, kernel, fault });
            }
            let Some(d) = dfx.as_mut() else {
                run.block_done(ops, seq, None);
                continue;
            };
            let (core, times, task) = (c.index, st.times(), &tasks[k]);
            d.on_finish(core, seq, id, times, observed.unwrap_or(0));
            if d.wants_complete() {
                // Every block of `seq` carries the same task, so the core that finished the last
                // one lends its dispatch's copy: no second copy out of the slot.
                run.block_done(ops, seq, Some(&mut || d.on_complete(ops, core, seq, times, task)));
            } else {
                run.block_done(ops, seq, None);
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
            for (c, task) in cores.iter_mut().zip(&mut tasks).filter(|(c, _)| c.running.is_none()) {
                // A core takes work of its kind (`queue_for` already folded both kinds into one
                // queue when the chip has no cores of one kind).
                let w = run.pop(c.queue);
                let Some((seq, block)) = w else { continue };
                if timed && dispatch_start.is_none() {
                    dispatch_start = Some(complete_end.unwrap_or_else(|| ops.clock_cycles()));
                }
                let at = dispatch_start.unwrap_or(0);
                dispatch(ops, run, (c, task), seq, block, dmb, dfx.as_mut().map(|d| (d, at)));
                if block == 0 && task.block_dim > 1 && run.args_dump_on() {
                    run.queue_rest_blocks(ops, seq);
                }
                progress = true;
                dispatched_n += 1;
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
        let idle = cores.iter().all(|c| c.running.is_none());
        if idle && (run.is_finished() || run.is_aborted()) {
            break;
        }
        if progress {
            continue;
        }
        ops.aicpu_wait(
            &mut || {
                cores.iter().any(|c| {
                    c.running.is_some_and(|(_, id)| ops.reg_read(c.base, cond) == cond_fin(id))
                }) || (!run.is_aborted()
                    && cores.iter().any(|c| c.running.is_none() && run.has_ready(c.queue)))
                    || (cores.iter().all(|c| c.running.is_none())
                        && (run.is_finished() || run.is_aborted()))
            },
            None,
        );
    }
    if let Some(d) = dfx {
        d.finish();
    }
    let up: Vec<u64> = cores.iter().map(|c| c.base).collect();
    shutdown(ops, &up, dmb, cond, layout.fast_path_enable);
}

/// Dispatches block `block` of `seq` to core `c`, copying the task into `task` (the core's
/// task in flight); with DFX on, `dfx` is the thread's writers and the batch's dispatch time.
fn dispatch(
    ops: &dyn DeviceOps,
    run: &RunState,
    (c, task): (&mut CoreState, &mut ResolvedTask),
    seq: u64,
    block: u32,
    dmb: u32,
    dfx: Option<(&mut super::super::dfx::ThreadDfx, u64)>,
) {
    let id = c.next_id;
    c.next_id = if id >= MAX_TASK_ID { 1 } else { id + 1 };
    c.running = Some((seq, id));
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
        d.on_dispatch(ops, c.index, seq, block, task, at);
    }
    ops.reg_write_aicpu(c.base, dmb, id);
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
                next_id: 1,
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
