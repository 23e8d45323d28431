//! Run state shared by the AICPU threads of one run, and the scheduler loop.
//!
//! # Task ring
//!
//! Tasks in flight sit in a ring of `task_window` slots; task `seq` uses slot
//! `seq % task_window`. The orchestrator reuses a slot only after its previous task finished, so
//! the number of tasks in flight is bounded and the orchestrator waits (spin, then park) when the
//! ring is full. Each slot's mutex guards its descriptor, its `done` flag and its successor list;
//! `fanin` counts unfinished predecessors plus one submission guard.
//!
//! Adding an edge `p → c` locks `p`'s slot: if `p` is still the slot's task and not done, `c`
//! joins its successors and `c.fanin` grows — under the lock, so `p`'s completion (which takes the
//! same lock to set `done` and take the successors) cannot miss it. Finished predecessors are
//! simply skipped.
//!
//! # Ready queues and dispatch
//!
//! A task whose `fanin` reaches zero enters the ready queue of its kernel's core kind (AIC or
//! AIV), once per SPMD block. Scheduler threads own disjoint sets of cores (cluster `c` = AIC `c`
//! plus its two AIVs, owned by scheduler `c mod schedulers`); each pops work for its idle cores,
//! writes the core's payload entry `id & 1` and then `DATA_MAIN_BASE = id` (launch.md §5.3), and
//! watches `COND` for `FIN(id)`. The last block of a task to finish releases its successors.
use super::image::{
    DispatchArgs, DispatchPayload, ImageView, PayloadStatus, RunBlock, RunResult, RuntimeHeader,
    TensorRecord, PAYLOAD_CORE_LINE, PAYLOAD_FAULT, RESULT_FAILED, RESULT_OK,
};
use super::kernels::CoreKind;
use super::ops::DeviceOps;
use super::task::ResolvedTask;
use crate::error::{DeviceFault, KernelFault};
use ferry_abi::arch::Arch;
use ferry_abi::handshake::HandshakeLayout;
use ferry_abi::regs::{
    cond_fin, is_task_id, RegLayout, AICORE_EXIT_SIGNAL, AICPU_IDLE, COND_EXITED, FAST_PATH_CLOSE,
    FAST_PATH_OPEN, MAX_TASK_ID,
};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Bytes of one core's payload pair.
pub const PAYLOAD_PAIR_BYTES: u64 = 2 * std::mem::size_of::<DispatchPayload>() as u64;
/// How long a scheduler waits for a core's handshake report or exit acknowledgement (the sim
/// deadline of launch.md §5.4).
pub const CORE_DEADLINE: Duration = Duration::from_secs(10);

const FREE: u64 = u64::MAX;

/// Successors a completing task releases from a stack copy (more: the list itself is taken).
const SUCC_INLINE: usize = 16;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a slot lock leaves plain data behind; keep going with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct SlotInner {
    seq: u64,
    done: bool,
    task: ResolvedTask,
    successors: Vec<u64>,
}

struct Slot {
    inner: Mutex<SlotInner>,
    fanin: AtomicU32,
    blocks_left: AtomicU32,
}

/// One piece of ready work: a task and one of its blocks.
type Work = (u64, u32);

/// State of one run, shared by its AICPU threads. Lives in AICPU memory; see the module docs of
/// [`super::image`] for what lives in device memory instead.
pub struct RunState {
    pub(crate) image: ImageView,
    pub(crate) hdr: RuntimeHeader,
    /// The run's per-run values (the first record of the per-run suffix).
    pub(crate) run: RunBlock,
    pub(crate) epoch: u64,
    slots: Vec<Slot>,
    ready: Mutex<[VecDeque<Work>; 2]>,
    ready_len: [AtomicUsize; 2],
    submitted: AtomicU64,
    completed: AtomicU64,
    orch_done: AtomicBool,
    abort: AtomicBool,
    fault: Mutex<Option<DeviceFault>>,
    kernel_counts: [AtomicU64; super::image::KERNEL_COUNT_SLOTS],
    threads_left: AtomicU32,
    regs: ImageView,
    pub(crate) dfx: Option<std::sync::Arc<super::dfx::DfxDevice>>,
    /// The loaded kernels' shapes, read from the header's kernel table.
    pub(crate) custom: super::custom::CustomKernels,
}

impl std::fmt::Debug for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunState")
            .field("image", &self.image.addr())
            .field("epoch", &self.epoch)
            .field("window", &self.slots.len())
            .finish()
    }
}

impl RunState {
    /// Reads and checks the header at `image_addr`, translates the image and the regs table,
    /// and builds the ring. `threads` is the launch's AICPU thread count.
    ///
    /// # Errors
    /// [`DeviceFault::BadImage`] when the header is not a runtime image of this version or its
    /// regions are not live device memory.
    pub fn new(
        ops: &dyn DeviceOps,
        image_addr: u64,
        threads: u32,
    ) -> Result<RunState, DeviceFault> {
        let hdr = read_header(ops, image_addr)?;
        let bad = DeviceFault::BadImage { magic: hdr.magic, version: hdr.version };
        let image = ImageView::new(ops, image_addr, hdr.image_bytes).map_err(|_| bad)?;
        let regs =
            ImageView::new(ops, hdr.regs_table, u64::from(hdr.regs_count) * 8).map_err(|_| bad)?;
        let end = |off: u64, n: u64| off.checked_add(n).is_some_and(|e| e <= hdr.image_bytes);
        let w = u64::from(hdr.worker_count);
        let hl = HandshakeLayout::from_u32(hdr.handshake_layout).ok_or(bad)?;
        if !(end(hdr.run_off, std::mem::size_of::<RunBlock>() as u64)
            && hdr.run_off % 64 == 0
            && end(hdr.handshake_off, w * u64::from(hl.slot_bytes))
            && (hdr.handshake_seen_off == 0 || end(hdr.handshake_seen_off, w * 4))
            && end(hdr.payload_off, w * PAYLOAD_PAIR_BYTES)
            && end(hdr.tensor_off, u64::from(hdr.tensor_count) * 16)
            && end(hdr.scalar_off, u64::from(hdr.scalar_count) * 8)
            && end(hdr.result_off, std::mem::size_of::<RunResult>() as u64)
            && end(hdr.graph_task_off, u64::from(hdr.graph_task_count) * 160)
            && end(hdr.graph_pred_off, u64::from(hdr.graph_pred_count) * 4)
            && hdr.task_window > 0
            && hdr.aic_count <= hdr.worker_count)
        {
            return Err(bad);
        }
        let slots = (0..hdr.task_window)
            .map(|_| Slot {
                inner: Mutex::new(SlotInner {
                    seq: FREE,
                    done: true,
                    task: empty_task(),
                    successors: Vec::new(),
                }),
                fanin: AtomicU32::new(0),
                blocks_left: AtomicU32::new(0),
            })
            .collect();
        let run: RunBlock = image.read_record(hdr.run_off as usize);
        let custom =
            super::custom::CustomKernels::read(ops, hdr.kernel_table, hdr.kernel_table_count, bad)?;
        Ok(RunState {
            custom,
            image,
            epoch: run.run_epoch,
            run,
            hdr,
            slots,
            ready: Mutex::new([VecDeque::new(), VecDeque::new()]),
            ready_len: [AtomicUsize::new(0), AtomicUsize::new(0)],
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            orch_done: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            fault: Mutex::new(None),
            kernel_counts: Default::default(),
            threads_left: AtomicU32::new(threads),
            regs,
            dfx: None,
        })
    }

    /// The same run with DFX collection attached (the host's [`super::dfx::DfxDevice`]).
    pub fn with_dfx(mut self, dfx: Option<std::sync::Arc<super::dfx::DfxDevice>>) -> RunState {
        self.dfx = dfx;
        self
    }

    /// This AICPU thread's DFX writers, when DFX is on.
    pub(crate) fn dfx_thread(&self, thread: u32, cores: &[u32]) -> Option<super::dfx::ThreadDfx> {
        self.dfx.as_ref().map(|d| d.thread(thread, cores).with_custom(self.custom.clone()))
    }

    /// Tasks completed so far (the task window's tail).
    pub(crate) fn completed_count(&self) -> u64 {
        // Relaxed: an occupancy statistic for ScopeStats; nothing is ordered by it.
        self.completed.load(Ordering::Relaxed)
    }

    fn slot(&self, seq: u64) -> &Slot {
        &self.slots[(seq % self.slots.len() as u64) as usize]
    }

    /// Whether the run was aborted by an error.
    pub fn is_aborted(&self) -> bool {
        // Acquire: pairs with the Release store in `fail`, so the recorded fault is visible.
        self.abort.load(Ordering::Acquire)
    }

    /// Records the run's first fault and stops dispatching.
    pub fn fail(&self, ops: &dyn DeviceOps, fault: DeviceFault) {
        lock(&self.fault).get_or_insert(fault);
        // Release: publishes the fault above to `is_aborted`'s Acquire load.
        self.abort.store(true, Ordering::Release);
        ops.notify_aicpu();
    }

    /// Whether task `seq` can still be waited for (submitted and not finished).
    pub fn is_live(&self, seq: u64) -> bool {
        let g = lock(&self.slot(seq).inner);
        g.seq == seq && !g.done
    }

    /// Whether the ring slot for `seq` is free for reuse.
    pub fn slot_free(&self, seq: u64) -> bool {
        lock(&self.slot(seq).inner).done
    }

    /// Task window (ring capacity).
    pub fn window(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Places task `seq` in its (free) slot with its submission guard held, adds the edges from
    /// `preds` (finished ones are skipped), then releases the guard. The caller has waited for
    /// [`slot_free`](Self::slot_free).
    pub fn install(&self, ops: &dyn DeviceOps, seq: u64, task: ResolvedTask, preds: &[u64]) {
        let slot = self.slot(seq);
        {
            let mut g = lock(&slot.inner);
            debug_assert!(g.done, "slot reused before its task finished");
            g.seq = seq;
            g.done = false;
            g.task = task;
            g.successors.clear();
        }
        // Relaxed: the slot mutex above orders these for every thread that later locks it;
        // the counters themselves are only read-modify-written.
        slot.blocks_left.store(task.block_dim, Ordering::Relaxed);
        // Relaxed: as above; the guard keeps it above zero until the release below.
        slot.fanin.store(1, Ordering::Relaxed);
        for &p in preds {
            if p == seq {
                continue;
            }
            let mut g = lock(&self.slot(p).inner);
            if g.seq == p && !g.done {
                g.successors.push(seq);
                // Relaxed: done under `p`'s lock, which `p`'s completion also takes before its
                // decrement; the AcqRel decrement in `release` is the synchronising side.
                slot.fanin.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Relaxed: a progress counter; completion ordering uses `completed`/`orch_done`.
        self.image.u64_at(self.hdr.result_off as usize + 16).fetch_add(1, Ordering::Relaxed);
        // Release: pairs with the Acquire loads in `is_finished`: a scheduler that sees this
        // count also sees the slot set up.
        self.submitted.fetch_add(1, Ordering::Release);
        self.release(ops, seq);
    }

    /// Drops one reference on `seq`'s fan-in; queues its blocks when it reaches zero.
    fn release(&self, ops: &dyn DeviceOps, seq: u64) {
        let slot = self.slot(seq);
        // AcqRel: the last decrement (which queues the task) must see every predecessor's
        // completion (Release side of their decrements) and the slot setup.
        if slot.fanin.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let (kernel, blocks) = {
            let g = lock(&slot.inner);
            (g.task.kernel, g.task.block_dim)
        };
        // With the args dump on, only block 0 is queued: its scheduler dumps the inputs, then
        // queues the rest (`queue_rest_blocks`), so no block changes an inout before the dump.
        let blocks = if self.args_dump_on() { blocks.min(1) } else { blocks };
        self.queue_blocks(ops, seq, kernel, 0..blocks);
    }

    fn queue_blocks(&self, ops: &dyn DeviceOps, seq: u64, kernel: u32, blocks: Range<u32>) {
        let q = self.queue_for(kernel);
        let n = blocks.len();
        {
            let mut r = lock(&self.ready);
            r[q].extend(blocks.map(|b| (seq, b)));
            // Relaxed: a hint for waiters, kept equal to the queue length under its mutex; the
            // mutex orders the work itself.
            self.ready_len[q].fetch_add(n, Ordering::Relaxed);
        }
        ops.notify_aicpu();
    }

    fn args_dump_on(&self) -> bool {
        self.dfx.as_ref().is_some_and(|d| d.args_level > 0)
    }

    /// Block 0 of `seq` was dispatched after its inputs were dumped: queues blocks `1..`.
    fn queue_rest_blocks(&self, ops: &dyn DeviceOps, seq: u64) {
        let (kernel, blocks) = {
            let g = lock(&self.slot(seq).inner);
            (g.task.kernel, g.task.block_dim)
        };
        if blocks > 1 {
            self.queue_blocks(ops, seq, kernel, 1..blocks);
        }
    }

    fn queue_for(&self, kernel: u32) -> usize {
        let aic = self.hdr.aic_count;
        let aiv = self.hdr.worker_count - aic;
        match super::custom::shape(kernel, &self.custom).map(|s| s.core) {
            Some(CoreKind::Aic) if aic > 0 => 0,
            _ if aiv == 0 => 0,
            _ => 1,
        }
    }

    fn pop(&self, q: usize) -> Option<Work> {
        if !self.has_ready(q) {
            return None;
        }
        let mut r = lock(&self.ready);
        let w = r[q].pop_front();
        if w.is_some() {
            // Relaxed: a hint, kept equal to the queue length under its mutex.
            self.ready_len[q].fetch_sub(1, Ordering::Relaxed);
        }
        w
    }

    fn has_ready(&self, q: usize) -> bool {
        // Relaxed: a hint for the wait condition; `pop` decides under the mutex, and the pusher
        // rings the AICPU bell after updating it.
        self.ready_len[q].load(Ordering::Relaxed) != 0
    }

    /// One block of `seq` finished; the last one runs `last` on the task (DFX: PMU row, outputs
    /// dump) while no successor can run yet, completes it, releases its successors and returns
    /// `true`.
    fn block_done(
        &self,
        ops: &dyn DeviceOps,
        seq: u64,
        last: Option<&mut dyn FnMut(&ResolvedTask)>,
    ) -> bool {
        let slot = self.slot(seq);
        // AcqRel: the last block's thread must see the other blocks' completions.
        if slot.blocks_left.fetch_sub(1, Ordering::AcqRel) != 1 {
            return false;
        }
        if let Some(f) = last {
            let task = lock(&slot.inner).task;
            f(&task);
        }
        // The successors are copied out (a few, on the stack) and the slot's list cleared in
        // place, so its allocation serves the slot's next task: no allocation per edge.
        let mut few = [0u64; SUCC_INLINE];
        let (kernel, n, many) = {
            let mut g = lock(&slot.inner);
            g.done = true;
            let n = g.successors.len();
            let many = if n <= SUCC_INLINE {
                few[..n].copy_from_slice(&g.successors);
                g.successors.clear();
                Vec::new()
            } else {
                std::mem::take(&mut g.successors)
            };
            (g.task.kernel, n, many)
        };
        if let Some(c) = self.kernel_counts.get(kernel as usize) {
            // Relaxed: a statistic read after every thread has left (the exit protocol orders it).
            c.fetch_add(1, Ordering::Relaxed);
        }
        let succ = if n <= SUCC_INLINE { &few[..n] } else { &many[..] };
        for &s in succ {
            self.release(ops, s);
        }
        // Relaxed: a progress counter for the host.
        self.image.u64_at(self.hdr.result_off as usize + 8).fetch_add(1, Ordering::Relaxed);
        // Release: pairs with the Acquire load in `is_finished`.
        self.completed.fetch_add(1, Ordering::Release);
        ops.notify_aicpu();
        true
    }

    /// The orchestrator (or graph loader) will submit nothing more.
    pub fn orchestration_done(&self, ops: &dyn DeviceOps) {
        // Release: pairs with the Acquire load in `is_finished`; orders every submission before.
        self.orch_done.store(true, Ordering::Release);
        ops.notify_aicpu();
    }

    fn is_finished(&self) -> bool {
        // Acquire: pairs with the Release store in `orchestration_done`, then with the Release
        // increments of `submitted` / `completed`.
        self.orch_done.load(Ordering::Acquire)
            && self.completed.load(Ordering::Acquire) == self.submitted.load(Ordering::Acquire)
    }

    /// Marks one AICPU thread as gone; the last one writes the final [`RunResult`] and returns
    /// `true`.
    pub fn leave(&self) -> bool {
        // AcqRel: the last thread out must see every other thread's work (Release side of their
        // decrements) before it writes the result.
        if self.threads_left.fetch_sub(1, Ordering::AcqRel) != 1 {
            return false;
        }
        let fault = *lock(&self.fault);
        let mut r = RunResult {
            status: if fault.is_some() { RESULT_FAILED } else { RESULT_OK },
            // Acquire: see every completion counted above.
            tasks_completed: self.completed.load(Ordering::Acquire),
            // Acquire: as above.
            tasks_submitted: self.submitted.load(Ordering::Acquire),
            ..RunResult::default()
        };
        if let Some(f) = fault {
            let (code, task, detail) = f.encode();
            r.error_code = code;
            r.error_task = task;
            r.error_detail = detail;
        }
        for (o, c) in r.kernel_counts.iter_mut().zip(&self.kernel_counts) {
            // Relaxed: every increment happened-before via the AcqRel exit count above.
            *o = c.load(Ordering::Relaxed);
        }
        self.image.write_record(self.hdr.result_off as usize, &r);
        true
    }

    /// Reads tensor record `i` of the image.
    pub fn tensor_record(&self, i: u32) -> TensorRecord {
        self.image.read_record(self.hdr.tensor_off as usize + 16 * i as usize)
    }

    /// Reads scalar `i` of the image.
    pub fn scalar_word(&self, i: u32) -> u64 {
        // Relaxed: written by the host before the launch (the launch orders it).
        self.image.u64_at(self.hdr.scalar_off as usize + 8 * i as usize).load(Ordering::Relaxed)
    }
}

/// Reads the header at `addr` and checks magic and version.
///
/// # Errors
/// [`DeviceFault::BadImage`].
pub fn read_header(ops: &dyn DeviceOps, addr: u64) -> Result<RuntimeHeader, DeviceFault> {
    let v = ImageView::new(ops, addr, std::mem::size_of::<RuntimeHeader>() as u64)
        .map_err(|_| DeviceFault::BadImage { magic: 0, version: 0 })?;
    let h: RuntimeHeader = v.read_record(0);
    if h.magic != super::image::IMAGE_MAGIC || h.version != super::image::IMAGE_VERSION {
        return Err(DeviceFault::BadImage { magic: h.magic, version: h.version });
    }
    Ok(h)
}

/// Reads the epoch of the run whose header is `hdr` at `addr` (its [`RunBlock`]).
///
/// # Errors
/// [`DeviceFault::BadImage`] when the run block is not live device memory.
pub fn read_run_epoch(
    ops: &dyn DeviceOps,
    addr: u64,
    hdr: &RuntimeHeader,
) -> Result<u64, DeviceFault> {
    let bad = DeviceFault::BadImage { magic: hdr.magic, version: hdr.version };
    let at = addr.checked_add(hdr.run_off).ok_or(bad)?;
    let v = ImageView::new(ops, at, std::mem::size_of::<RunBlock>() as u64).map_err(|_| bad)?;
    Ok(v.read_record::<RunBlock>(0).run_epoch)
}

pub(crate) fn empty_task() -> ResolvedTask {
    ResolvedTask {
        kernel: 0,
        block_dim: 0,
        tensors: [(0, 0, super::task::Role::Input); super::image::MAX_TASK_TENSORS],
        n_tensors: 0,
        scalars: [0; super::image::MAX_TASK_SCALARS],
        n_scalars: 0,
    }
}

/// Cluster of worker `i`: AIC `c` is cluster `c`; AIVs pair up after the AICs.
pub fn cluster_of(i: u32, aic: u32) -> u32 {
    if i < aic {
        i
    } else {
        (i - aic) / 2
    }
}

struct CoreState {
    index: u32,
    base: u64,
    queue: usize,
    payload_off: usize,
    running: Option<(u64, u32)>,
    next_id: u32,
}

/// Scheduler thread `sched` of `scheds`: handshake with its cores (§5.2), dispatch until the run
/// is finished or aborted, then shut its cores down (§5.4).
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
    let timed = dfx.as_ref().is_some_and(|d| d.timed());
    loop {
        let mut progress = false;
        let phases = dfx.as_ref().is_some_and(|d| d.phases_on());
        // First every FIN of this sweep is seen, then they are completed. With DFX on, one clock
        // read after the sweep stamps them all: it follows every FIN it stamps (each was
        // observed, Acquire, before it), so no AICPU finish time precedes its core's end. A
        // Complete phase runs from that read to the end of the completions, a Dispatch phase
        // from then (or the first dispatch) to the last dispatch; idle polling reads no clock.
        fins.clear();
        for (k, c) in cores.iter().enumerate() {
            if c.running.is_some_and(|(_, id)| ops.reg_read(c.base, cond) == cond_fin(id)) {
                fins.push(k);
            }
        }
        let observed = (timed && !fins.is_empty()).then(|| ops.clock_cycles());
        for &k in &fins {
            let c = &mut cores[k];
            let Some((seq, id)) = c.running.take() else { continue };
            progress = true;
            let st: PayloadStatus =
                run.image.read_record(c.payload_off + (id as usize & 1) * 256 + PAYLOAD_CORE_LINE);
            if st.status == PAYLOAD_FAULT {
                let kernel = lock(&run.slot(seq).inner).task.kernel;
                let fault = KernelFault::decode(st.fault_code, st.fault_detail)
                    .unwrap_or(KernelFault::UnknownKernel { kernel });
                run.fail(ops, DeviceFault::Kernel { task: seq, kernel, fault });
            }
            let Some(d) = dfx.as_mut() else {
                run.block_done(ops, seq, None);
                continue;
            };
            let (core, times) = (c.index, st.times());
            d.on_finish(core, seq, id, times, observed.unwrap_or(0));
            if d.wants_complete() {
                run.block_done(ops, seq, Some(&mut |t| d.on_complete(ops, core, seq, times, t)));
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
            for c in cores.iter_mut().filter(|c| c.running.is_none()) {
                // A core takes work of its kind (`queue_for` already folded both kinds into one
                // queue when the chip has no cores of one kind).
                let w = run.pop(c.queue);
                let Some((seq, block)) = w else { continue };
                if timed && dispatch_start.is_none() {
                    dispatch_start = Some(complete_end.unwrap_or_else(|| ops.clock_cycles()));
                }
                let at = dispatch_start.unwrap_or(0);
                dispatch(ops, run, c, seq, block, dmb, dfx.as_mut().map(|d| (d, at)));
                if block == 0 && run.args_dump_on() {
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

/// Dispatches block `block` of `seq` to core `c`; with DFX on, `dfx` is the thread's writers and
/// the batch's dispatch time.
fn dispatch(
    ops: &dyn DeviceOps,
    run: &RunState,
    c: &mut CoreState,
    seq: u64,
    block: u32,
    dmb: u32,
    dfx: Option<(&mut super::dfx::ThreadDfx, u64)>,
) {
    let task = lock(&run.slot(seq).inner).task;
    let id = c.next_id;
    c.next_id = if id >= MAX_TASK_ID { 1 } else { id + 1 };
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
    c.running = Some((seq, id));
    if let Some((d, at)) = dfx {
        d.on_dispatch(ops, c.index, seq, block, &task, at);
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
