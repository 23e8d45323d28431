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
//! writes the core's payload entry `id & 1` and then `DATA_MAIN_BASE = id`, and
//! watches `COND` for `FIN(id)`. The last block of a task to finish releases its successors.
use super::image::{
    DispatchPayload, ImageView, RunBlock, RunResult, RuntimeHeader, TensorRecord, RESULT_FAILED,
    RESULT_OK,
};
use super::kernels::CoreKind;
use super::ops::DeviceOps;
use super::task::ResolvedTask;
use crate::error::DeviceFault;
use ferry_abi::handshake::HandshakeLayout;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

mod thread;

pub use thread::{is_dispatch, scheduler};

/// Bytes of one core's payload pair.
pub const PAYLOAD_PAIR_BYTES: u64 = 2 * std::mem::size_of::<DispatchPayload>() as u64;
/// How long a scheduler waits for a core's handshake report or exit acknowledgement (the sim
/// deadline).
pub const CORE_DEADLINE: Duration = Duration::from_secs(10);
/// How long one kernel execution may run (device time) when the image names no budget.
pub const DEFAULT_KERNEL_BUDGET: Duration = Duration::from_secs(60);
/// How often a scheduler whose cores are all busy looks at the device clock for a kernel past
/// its budget.
pub const BUDGET_POLL: Duration = Duration::from_millis(50);

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
    /// Finished tasks per loaded kernel (`id - CUSTOM_KERNEL_BASE`), one per kernel-table entry.
    custom_counts: Vec<AtomicU64>,
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
            && end(hdr.custom_count_off, u64::from(hdr.kernel_table_count) * 8)
            && hdr.custom_count_off % 8 == 0
            // The counts are written, so they live in the per-run suffix, never the prefix.
            && (hdr.kernel_table_count == 0 || hdr.custom_count_off >= hdr.run_off)
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
                    task: ResolvedTask::EMPTY,
                    successors: Vec::new(),
                }),
                fanin: AtomicU32::new(0),
                blocks_left: AtomicU32::new(0),
            })
            .collect();
        let run: RunBlock = image.read_record(hdr.run_off as usize);
        let custom =
            super::custom::CustomKernels::read(ops, hdr.kernel_table, hdr.kernel_table_count, bad)?;
        let custom_counts = custom.records().iter().map(|_| AtomicU64::new(0)).collect();
        Ok(RunState {
            custom_counts,
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
        &self.slots[super::wrap(seq, self.slots.len() as u64) as usize]
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

    /// Whether queue `q` holds enough work to queue a dispatch behind a running one: at least
    /// one ready block per core that takes from it, so no idle core (of any scheduler) goes
    /// without work because a busy core took it.
    fn has_spare(&self, q: usize) -> bool {
        let cores = match q {
            0 => self.hdr.aic_count,
            _ => self.hdr.worker_count - self.hdr.aic_count,
        };
        // Relaxed: a hint, as in `has_ready`.
        self.ready_len[q].load(Ordering::Relaxed) >= (cores as usize).max(1)
    }

    /// One block of `seq` finished; the last one runs `last` (DFX: PMU row, outputs dump, with
    /// the caller's copy of the task) while no successor can run yet, completes it, releases its
    /// successors and returns `true`.
    fn block_done(&self, ops: &dyn DeviceOps, seq: u64, last: Option<&mut dyn FnMut()>) -> bool {
        let slot = self.slot(seq);
        // AcqRel: the last block's thread must see the other blocks' completions.
        if slot.blocks_left.fetch_sub(1, Ordering::AcqRel) != 1 {
            return false;
        }
        if let Some(f) = last {
            f();
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
        let count = match kernel.checked_sub(ferry_abi::kernel_lib::CUSTOM_KERNEL_BASE) {
            Some(i) => self.custom_counts.get(i as usize),
            None => self.kernel_counts.get(kernel as usize),
        };
        if let Some(c) = count {
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
        for (i, c) in self.custom_counts.iter().enumerate() {
            // Relaxed (both): every increment happened-before via the AcqRel exit count above;
            // the host reads the counts after the launch completes, as it reads the result.
            let n = c.load(Ordering::Relaxed);
            self.image
                .u64_at(self.hdr.custom_count_off as usize + 8 * i)
                .store(n, Ordering::Relaxed);
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

/// Cluster of worker `i`: AIC `c` is cluster `c`; AIVs pair up after the AICs.
pub fn cluster_of(i: u32, aic: u32) -> u32 {
    if i < aic {
        i
    } else {
        (i - aic) / 2
    }
}
