//! Device-side DFX emission: the five subsystems' records, written on the AICPU threads through
//! the DFX transport's per-lane writers (`ferry_dfx::DeviceWriter`), never through a side channel.
//!
//! In process the host attaches a [`DfxDevice`] to the AICPU program for a run (`host::dfx`); on
//! the full path the loaded program builds it from the launch's `KernelArgs` profiling bases
//! ([`DfxDevice::from_kernel_args`]: each base names a [`DfxDirectory`] in device memory). Each AICPU
//! thread then builds its own [`ThreadDfx`] holding one writer per enabled subsystem for its ready
//! queue, and the scheduler / orchestrator call small hooks on it. When DFX is off the run holds
//! `None` and every hook is one branch on an `Option`.
//!
//! | subsystem | lanes | written by | when |
//! |---|---|---|---|
//! | ChipSwimlane AICore (level ≥ 1) | one per core | owning scheduler | at FIN, from the core's own timestamps |
//! | ChipSwimlane AICPU (level ≥ 2) | one per core | owning scheduler | at FIN (dispatch, finish) |
//! | ChipSwimlane sched phases (level ≥ 3) | one per scheduler | scheduler | per loop iteration with work |
//! | ChipSwimlane orch (level 4) | one | orchestrator | per submit (envelope) |
//! | PMU | one per core | scheduler completing the task | once per task |
//! | DepGen | one | orchestrator | once per submit: one variable-length chain (`ferry_abi::dep_gen`), plus overflow chains for a submit larger than a buffer |
//! | ScopeStats | one | orchestrator | scope begin / end |
//! | ArgsDump | one per scheduler | scheduler | before dispatch (block 0), after completion: one variable-length chain of the stage's arguments (`ferry_abi::args_dump`) |
//!
//! ArgsDump payloads go to a per-scheduler-thread [`ArgsArena`] guarded by the arena gate of
//! docs/dfx.md: before a payload would wrap or straddle the arena, the thread seals its
//! metadata buffer and waits (one budget) until the host has acknowledged every payload it
//! published (`publish_arena_acks`, docs/design/dfx-backpressure.md); on timeout the argument record is dropped and
//! counted.
use super::ops::DeviceOps;
use super::task::{ResolvedTask, Role, ScopeSite};
use ferry_abi::dep_gen::{self, DepGenHead, DepGenTensor};
use ferry_abi::records::{
    AicoreTaskRecord, AicpuTaskRecord, OrchPhaseRecord, PmuRecord, SchedPhaseRecord,
    ScopeStatsRecord, ARG_ROLE_INOUT, ARG_ROLE_INPUT, ARG_ROLE_OUTPUT, ARG_STAGE_AFTER_COMPLETION,
    ARG_STAGE_BEFORE_DISPATCH, CORE_TYPE_AIC, CORE_TYPE_AIV, SCOPE_PHASE_BEGIN, SCOPE_PHASE_END,
};
use ferry_dfx::{DeviceRegion, DeviceWriter};
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod arena;
mod directory;
mod pmu;

pub use arena::ArgsArena;
pub use directory::{
    DfxDirectory, DFX_DIR_FLAG_DOORBELL_HINT, DFX_DIR_HEADER, DFX_DIR_MAGIC, DFX_DIR_MAX_ENTRIES,
    DFX_DIR_VERSION,
};
pub use pmu::{pmu_counters, task_work, TaskWork};

/// [`super::image::RunBlock::dfx_flags`]: the swimlane is on (AICore timestamps).
pub const DFX_SWIMLANE: u32 = 1;
/// [`super::image::RunBlock::dfx_flags`]: some other subsystem is on.
pub const DFX_OTHER: u32 = 2;

/// What the host attached to the AICPU program for one run.
#[derive(Debug, Default)]
pub struct DfxDevice {
    /// ChipSwimlane level (0 off, 1–4).
    pub swimlane: u32,
    /// PMU event type (0 off).
    pub pmu: u32,
    /// DepGen on.
    pub dep_gen: bool,
    /// ArgsDump level (0 off, 1–3).
    pub args_level: u32,
    /// ScopeStats on.
    pub scope_stats: bool,
    /// AICPU threads of the run (last = orchestrator).
    pub threads: u32,
    /// AIC workers (core ids `0..aic`).
    pub aic: u32,
    /// Regions of the subsystems that are on.
    pub regions: DfxRegions,
    /// One payload arena per scheduler thread (ArgsDump only).
    pub arenas: Vec<Arc<ArgsArena>>,
}

/// The device handles of each subsystem's transport region.
#[derive(Debug, Default)]
pub struct DfxRegions {
    /// AicoreTask lanes (one per core).
    pub aicore: Option<DeviceRegion>,
    /// AicpuTask lanes (one per core).
    pub aicpu: Option<DeviceRegion>,
    /// Scheduler phase lanes (one per scheduler thread).
    pub sched: Option<DeviceRegion>,
    /// The orchestrator lane.
    pub orch: Option<DeviceRegion>,
    /// PMU lanes (one per core).
    pub pmu: Option<DeviceRegion>,
    /// The DepGen lane.
    pub dep_gen: Option<DeviceRegion>,
    /// The ScopeStats lane.
    pub scope: Option<DeviceRegion>,
    /// ArgsDump metadata lanes (one per scheduler thread).
    pub args: Option<DeviceRegion>,
}

impl DfxDevice {
    /// The header bits of this configuration.
    pub fn flags(&self) -> u32 {
        let mut f = 0;
        if self.swimlane > 0 {
            f |= DFX_SWIMLANE;
        }
        if self.pmu > 0 || self.dep_gen || self.args_level > 0 || self.scope_stats {
            f |= DFX_OTHER;
        }
        f
    }

    /// The writers of AICPU thread `thread`; `cores` are the core ids it owns (schedulers).
    pub fn thread(self: &Arc<Self>, thread: u32, cores: &[u32]) -> ThreadDfx {
        fn w<R: ferry_dfx::Record>(r: &Option<DeviceRegion>, q: u32) -> Option<DeviceWriter<R>> {
            let r = r.as_ref()?;
            let lanes = r.lanes_of_queue(q);
            if lanes.is_empty() {
                return None;
            }
            r.writer::<R>(q, &lanes).ok()
        }
        /// Where the thread builds one run of words for region `r` (a DepGen or ArgsDump chain):
        /// at most `most` words, and never more than the lane's buffer holds.
        fn scratch(r: &Option<DeviceRegion>, q: u32, most: usize) -> Vec<u64> {
            match r {
                Some(r) if r.lanes_of_queue(q).len() == 1 => {
                    vec![0; (r.layout().records_per_buffer as usize).min(most)]
                }
                _ => Vec::new(),
            }
        }
        let g = &self.regions;
        let mut core_lane =
            vec![usize::MAX; cores.iter().map(|&c| c as usize + 1).max().unwrap_or(0)];
        for (k, &c) in cores.iter().enumerate() {
            core_lane[c as usize] = k;
        }
        ThreadDfx {
            dev: self.clone(),
            thread,
            aicore: w(&g.aicore, thread),
            aicpu: w(&g.aicpu, thread),
            sched: w(&g.sched, thread),
            orch: w(&g.orch, thread),
            pmu: w(&g.pmu, thread),
            dep_gen: w(&g.dep_gen, thread),
            dep_scratch: scratch(&g.dep_gen, thread, DEP_SCRATCH_WORDS),
            scope: w(&g.scope, thread),
            args: w(&g.args, thread),
            args_chain: scratch(&g.args, thread, ARGS_CHAIN_WORDS),
            chain_head: None,
            chain_len: 0,
            chain_args: 0,
            chain_payloads: 0,
            arena: self.arenas.get(thread as usize).cloned(),
            dump_level: arena::DumpLevel::of(self.args_level),
            views: Box::new(super::image::TranslateCache::new()),
            core_lane,
            dispatch: Vec::new(),
            payloads: 0,
            loop_iter: 0,
            submit_idx: 0,
            custom: super::custom::CustomKernels::none(),
        }
    }
}

/// Most words of one DepGen chain the orchestrator builds (a larger submit continues in overflow
/// chains).
const DEP_SCRATCH_WORDS: usize = 4096;

/// Words of the longest ArgsDump chain a task's stage makes: every tensor and scalar slot, each
/// at its largest (the lane's buffer may bound it lower; a fuller stage continues in a second
/// chain).
const ARGS_CHAIN_WORDS: usize = ferry_abi::args_dump::ARGS_CHAIN_HEADER_WORDS
    + (super::image::MAX_TASK_TENSORS + super::image::MAX_TASK_SCALARS)
        * ferry_abi::args_dump::ARGS_ARG_MAX_WORDS;

/// One AICPU thread's DFX writers and per-core scratch.
pub struct ThreadDfx {
    dev: Arc<DfxDevice>,
    thread: u32,
    aicore: Option<DeviceWriter<AicoreTaskRecord>>,
    aicpu: Option<DeviceWriter<AicpuTaskRecord>>,
    sched: Option<DeviceWriter<SchedPhaseRecord>>,
    orch: Option<DeviceWriter<OrchPhaseRecord>>,
    pmu: Option<DeviceWriter<PmuRecord>>,
    dep_gen: Option<DeviceWriter<u64>>,
    /// Where DepGen chains are built (at most one buffer of words).
    dep_scratch: Vec<u64>,
    scope: Option<DeviceWriter<ScopeStatsRecord>>,
    /// ArgsDump: one chain of words per task and stage (`ferry_abi::args_dump`).
    args: Option<DeviceWriter<u64>>,
    /// Where the chain being dumped is built (at most a buffer's words).
    args_chain: Vec<u64>,
    /// The header of that chain, to continue a stage in a fresh chain.
    chain_head: Option<ferry_abi::args_dump::ArgsChainHead>,
    /// Words of that chain (0: none).
    chain_len: usize,
    /// Its arguments, and those with a payload.
    chain_args: u64,
    chain_payloads: u64,
    arena: Option<Arc<ArgsArena>>,
    /// What the session's ArgsDump level keeps.
    dump_level: arena::DumpLevel,
    /// Translations of the views this thread dumped (one per tensor per run, not per dump).
    views: Box<super::image::TranslateCache<64>>,
    core_lane: Vec<usize>,
    dispatch: Vec<u64>,
    payloads: u64,
    loop_iter: u32,
    submit_idx: u32,
    /// The run's loaded kernels (their core kinds and scalar dtypes).
    custom: super::custom::CustomKernels,
}

impl std::fmt::Debug for ThreadDfx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadDfx").field("thread", &self.thread).finish_non_exhaustive()
    }
}

fn kernel_ids(kernel: u32, custom: &super::custom::CustomKernels) -> [i32; 3] {
    match super::custom::shape(kernel, custom).map(|s| s.core) {
        Some(super::kernels::CoreKind::Aic) => [kernel as i32, -1, -1],
        _ => [-1, kernel as i32, -1],
    }
}

/// Where a dispatch's time is kept: one per entry of core `core`'s payload pair (`id & 1`).
fn dispatch_entry(core: u32, id: u32) -> usize {
    2 * core as usize + ferry_abi::regs::payload_slot(id)
}

fn role_code(r: Role) -> u8 {
    match r {
        Role::Input => ARG_ROLE_INPUT,
        Role::Output => ARG_ROLE_OUTPUT,
        Role::InOut => ARG_ROLE_INOUT,
    }
}

/// Scope occupancy the orchestrator reports at a scope boundary.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScopeSnapshot {
    /// Scope depth after begin / before end (≥ 1).
    pub depth: u32,
    /// Task-window tail (tasks completed).
    pub task_tail: u64,
    /// Task-window head (tasks submitted).
    pub task_head: u64,
    /// Scratch heap bytes in use.
    pub heap: u64,
    /// Dependencies installed by the last submit (the dep pool's live entries).
    pub dep_pool: u64,
    /// Tensor-map segments held.
    pub tensormap: u64,
}

impl ThreadDfx {
    /// The same writers, with the run's loaded kernels (so DepGen and ArgsDump describe them by
    /// their specs, as the built-ins).
    pub fn with_custom(mut self, custom: super::custom::CustomKernels) -> ThreadDfx {
        self.custom = custom;
        self
    }

    /// ChipSwimlane level.
    pub fn level(&self) -> u32 {
        self.dev.swimlane
    }

    /// Whether scheduler phase records are on (level ≥ 3).
    pub fn phases_on(&self) -> bool {
        self.sched.is_some()
    }

    /// Whether [`on_complete`](Self::on_complete) records anything (PMU or ArgsDump on): the
    /// scheduler skips the completion hook otherwise.
    pub fn wants_complete(&self) -> bool {
        self.pmu.is_some() || self.args.is_some()
    }

    /// Whether the orchestrator envelope is on (level 4).
    pub fn orch_on(&self) -> bool {
        self.orch.is_some()
    }

    /// Whether the scheduler must read the clock for this thread's records: AICPU task records
    /// (dispatch and finish times) or scheduler phases are on.
    pub fn timed(&self) -> bool {
        self.aicpu.is_some() || self.sched.is_some()
    }

    /// Dispatch `id` to core `core` of `task`'s block `block`, right before the register write;
    /// `at` is the dispatch time of the scheduler's batch (read before its first register
    /// write). Dumps block 0's arguments before dispatch.
    pub fn on_dispatch(
        &mut self,
        ops: &dyn DeviceOps,
        (core, id): (u32, u32),
        seq: u64,
        block: u32,
        task: &ResolvedTask,
        at: u64,
    ) {
        if self.aicpu.is_some() {
            // One time per entry of the core's payload pair: a dispatch queued behind the
            // running one must not overwrite the running one's dispatch time.
            let k = dispatch_entry(core, id);
            if self.dispatch.len() <= k {
                self.dispatch.resize(k + 1, 0);
            }
            self.dispatch[k] = at;
        }
        if block == 0 && self.args.is_some() {
            self.dump_args(ops, seq, task, ARG_STAGE_BEFORE_DISPATCH);
        }
    }

    /// Core `core` reported FIN for dispatch `id` of `seq` with its timestamps `times`
    /// (receive, start, end); `observed` is when the scheduler's sweep had seen it (a clock read
    /// after the sweep, so never before the core's end).
    pub fn on_finish(&mut self, core: u32, seq: u64, id: u32, times: [u64; 3], observed: u64) {
        let lane = self.core_lane.get(core as usize).copied().unwrap_or(usize::MAX);
        if let Some(w) = self.aicore.as_mut().filter(|_| lane != usize::MAX) {
            let [recv, start, end] = times;
            w.record(
                lane,
                AicoreTaskRecord {
                    start_time: start.max(1),
                    end_time: end.max(start.max(1)),
                    task_token_raw: seq,
                    reg_task_id: id,
                    receive_to_start_cycles: start.saturating_sub(recv).min(u64::from(u32::MAX))
                        as u32,
                },
            );
        }
        if let Some(w) = self.aicpu.as_mut().filter(|_| lane != usize::MAX) {
            let dispatch = self.dispatch.get(dispatch_entry(core, id)).copied().unwrap_or(0);
            w.record(
                lane,
                AicpuTaskRecord {
                    dispatch_time: dispatch,
                    finish_time: observed,
                    reg_task_id: id,
                    _pad: [0; 3],
                },
            );
        }
    }

    /// The block that finished on core `core` (timestamps `times`) completed `task`; called
    /// before the task's successors are released, so its outputs are still its own.
    pub fn on_complete(
        &mut self,
        ops: &dyn DeviceOps,
        core: u32,
        seq: u64,
        times: [u64; 3],
        task: &ResolvedTask,
    ) {
        let lane = self.core_lane.get(core as usize).copied().unwrap_or(usize::MAX);
        if let Some(w) = self.pmu.as_mut().filter(|_| lane != usize::MAX) {
            let work = task_work(task);
            let cycles = times[2].saturating_sub(times[1]).max(1);
            let aic = core < self.dev.aic;
            let counters = pmu_counters(self.dev.pmu, aic, cycles, &work);
            w.record(
                lane,
                PmuRecord {
                    task_id: seq,
                    func_id: task.kernel,
                    core_type: if aic { CORE_TYPE_AIC } else { CORE_TYPE_AIV },
                    pmu_total_cycles: cycles,
                    counters,
                },
            );
        }
        if self.args.is_some() {
            self.dump_args(ops, seq, task, ARG_STAGE_AFTER_COMPLETION);
        }
    }

    /// One scheduler phase record (level ≥ 3).
    pub fn phase(&mut self, kind: u32, start: u64, end: u64, tasks: u32, data: [u32; 2]) {
        if let Some(w) = self.sched.as_mut() {
            w.record(
                0,
                SchedPhaseRecord {
                    start,
                    end,
                    loop_iter: self.loop_iter,
                    kind,
                    tasks_processed: tasks,
                    phase_data: data,
                    ..Default::default()
                },
            );
        }
    }

    /// The scheduler finished one loop iteration.
    pub fn next_iter(&mut self) {
        self.loop_iter = self.loop_iter.wrapping_add(1);
    }

    /// An orchestrator submit envelope (level 4).
    pub fn submit_envelope(&mut self, seq: u64, start: u64, end: u64) {
        if let Some(w) = self.orch.as_mut() {
            w.record(
                0,
                OrchPhaseRecord { start, end, task_id: seq, submit_idx: self.submit_idx, _pad: 0 },
            );
            self.submit_idx += 1;
        }
    }

    /// DepGen: task `seq` installed with predecessors `preds` (the runtime's own list): one chain
    /// of exactly the submit's tensors and dependencies, written as one contiguous run.
    pub fn dep_gen(&mut self, seq: u64, task: &ResolvedTask, preds: &[u64]) {
        if self.dep_gen.is_none() {
            return;
        }
        // Each tensor's dtype, as ArgsDump records it: a view kernel's operand words name it.
        let views = self.views(task);
        let (Some(w), scratch) = (self.dep_gen.as_mut(), &mut self.dep_scratch) else { return };
        let head = DepGenHead {
            task_id: seq,
            flags: 0,
            kernel_id: kernel_ids(task.kernel, &self.custom),
            block_num: task.block_dim,
        };
        let tensors =
            task.tensors().iter().enumerate().map(|(i, &(addr, bytes, role))| DepGenTensor {
                role: role_code(role),
                dtype: arena::arg_dtype(views, task, i),
                addr,
                bytes,
            });
        let r = dep_gen::encode(&head, tensors, preds, scratch, |chain| {
            w.record_slice(0, chain);
        });
        if r.is_err() {
            // Buffers smaller than a chain's minimum: the submit is lost, and counted.
            w.account_dropped(0, dep_gen::DEP_GEN_MIN_CHAIN_WORDS as u64);
        }
    }

    /// ScopeStats: a scope opened at `site` begins (`end == false`) or ends.
    pub fn scope(&mut self, end: bool, s: ScopeSnapshot, site: &ScopeSite) {
        let Some(w) = self.scope.as_mut() else { return };
        let r = ScopeStatsRecord {
            heap_start: 0,
            heap_end: s.heap,
            site_file_basename: *site.file_bytes(),
            site_line: site.line.min(i32::MAX as u32) as i32,
            task_start: s.task_tail.min(i32::MAX as u64) as i32,
            task_end: s.task_head.min(i32::MAX as u64) as i32,
            dep_pool_start: 0,
            dep_pool_end: s.dep_pool.min(i32::MAX as u64) as i32,
            tensormap_used: s.tensormap.min(i32::MAX as u64) as i32,
            depth: s.depth.min(i16::MAX as u32) as i16,
            ring_id: s.depth.min(3) as i16,
            phase: if end { SCOPE_PHASE_END } else { SCOPE_PHASE_BEGIN },
            ..Default::default()
        };
        w.record(0, r);
    }

    /// End of the thread's part of the run: flushes every writer.
    pub fn finish(mut self) {
        if let Some(a) = &self.arena {
            if let Some(w) = self.args.as_mut() {
                w.flush();
                // Relaxed: a counter read by the host after the run. The arguments whose chain
                // the writer lost (at the write, or with a buffer it could not publish) join the
                // arena gate's drops: ArgsDump counts its losses in arguments, while its lane's
                // transport lines count words.
                a.dropped().fetch_add(w.items_dropped(0), Ordering::Relaxed);
            }
            // Relaxed: the header's count of payload records, a statistic nothing pairs with
            // (the host reads `write_offset`, `completed` and `dropped` only).
            a.published().store(self.payloads, Ordering::Relaxed);
        }
        // Dropping the writers flushes them.
    }
}
