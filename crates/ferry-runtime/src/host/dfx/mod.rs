//! Host-side DFX collection: one transport region per subsystem record type, all served by one
//! host engine, set up before a run, collected and checked after it, turned into the run model
//! `ferry_profile` writes.
//!
//! [`DfxSession::start`] builds each enabled subsystem's region (lanes per core, per AICPU
//! thread or one for the orchestrator; ready queue = the AICPU thread that owns the lane), adds
//! every region to one [`DfxEngine`] — [`HOST_THREADS`] host threads whatever is on — and
//! returns the [`DfxDevice`] to attach to the runner ([`super::DeviceRunner::attach_dfx`]).
//! Collector sinks turn each drained buffer straight into model rows while the run is live.
//! After the run, [`DfxSession::finish`] stops the engine (every device writer has flushed by
//! then: the AICPU threads returned), reconciles every lane (loss accounting in every file),
//! checks the DepGen graph against the runtime's dependencies and returns the [`RunModel`].
//!
//! # Capacity (keeping the path cold)
//! Default pools ([`Capacity::for_region`]) are sized so that no lane of the built-in examples
//! waits at a gate with all five subsystems on: a lane must hold what it produces while the host
//! turns a buffer around. Measured on the 50,000-task storm (2 cores, all five on), the busiest
//! lanes produce: DepGen 8 words per submit at up to ~500 k submits/s (4 M words/s), the
//! orchestrator's submit envelopes ~500 k/s, ArgsDump ~3 arguments per task per scheduler thread
//! (~500 k/s each: two chains per task, 16 words, ~2.7 M words/s), scheduler phases ~300 k/s per
//! thread, per-core lanes ≤ 40 k/s. The host's
//! turnaround is a poll interval (≤ 200 µs live) plus two host-internal wake-ups; on a loaded
//! 2-core machine a host thread may wait for a CPU for a scheduler slice or more, so pools cover
//! ≥ 30 ms of the peak rate (a budget of `rate × 30 ms` records plus the buffer being written):
//! DepGen 16 × 8,192 words (≥ 30 k submits), envelopes 8 × 4,096, ArgsDump 16 × 8,192 words per
//! thread (~48 ms of its peak), phases 8 × 4,096, per-core lanes 4 × ~1,000 (PMU 8 × 512). The
//! swimlane/PMU/ArgsDump regions then take ~30 MB of device memory on a2a3's default chip, the
//! ArgsDump arenas 4 MiB per thread. (PMU had 4 buffers until the chip got ~1.6x faster and the
//! test below saw a PMU lane wait in about one storm run in four; see [`HOST_NICE`]. ArgsDump had
//! 32 × 1,024 records of 128 bytes, 4 MiB per thread, before its chains.)
//! The regression guard is a test: default pools record zero gate waits on every lane for the
//! three examples with every subsystem on.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferry_abi::arch::Arch;
use ferry_abi::launch::{
    KernelArgs, PROFILING_FLAG_CHIP_SWIMLANE, PROFILING_FLAG_DEP_GEN, PROFILING_FLAG_DUMP_ARGS,
    PROFILING_FLAG_PMU, PROFILING_FLAG_SCOPE_STATS,
};
use ferry_abi::records::{
    AicoreTaskRecord, AicpuTaskRecord, OrchPhaseRecord, PmuRecord, SchedPhaseRecord,
    ScopeStatsRecord,
};
use ferry_backend::{CycleCounter, DeviceCounter, HostBells, MappedMemory};
use ferry_dfx::{DfxEngine, EngineConfig, Policy, RegionKey, RunningEngine};
use ferry_profile::collect::LaneRecords;
use ferry_profile::{CoreType, LossAccounting, RunLabel, RunMeta, RunModel, Subsystem};

use crate::device::dfx::{
    ArgsArena, DfxDevice, DfxDirectory, DfxRegions, DFX_DIR_FLAG_DOORBELL_HINT,
};
use crate::device::sched::cluster_of;

pub(crate) mod anchors;
mod deps;
mod error;
mod layout;
mod memory;
mod model;
mod native;
mod replay;
mod runs;
mod sinks;

pub use crate::host::sim_backend::{SimCycleClock, SimDeviceMemory};
pub use anchors::sample_clock_anchors;
pub use error::{CollectError, DepsCheckError, DfxError};
pub use memory::{DeviceCycleClock, MappedDeviceMemory};
pub use native::{models_from_recording, models_from_recording_parts, Parts, META_SESSION};
pub use replay::{replay_task, ReplayArg, ReplayError};

use layout::Layout;
pub use layout::{Capacity, DfxRegion};
use memory::SessionDevice;
use model::{loss_lines, take, Taken};
use sinks::{ArgsAcks, ArgsSink};

/// Host threads a session runs, whatever subsystems are on: one drain shard, one collector
/// shard and the replenish thread of its [`DfxEngine`].
pub const HOST_THREADS: usize = 3;

/// Nice value of a session's host threads (Linux): below the simulated chip's threads, which on
/// hardware would not share CPUs with the host at all. A host thread that wakes less often finds
/// more buffers per wake-up, so it also spends less: measured in process on the 2-core machines
/// (the storm, all five subsystems, 6 processes x 8 interleaved rounds, paired ratios of DFX
/// off), nice 0 gave 0.75 of DFX off with 20 ms of host CPU per run, 5 gave 0.80-0.81 with
/// 11-14 ms, 12 gave 0.84-0.85 with 6-8 ms (15 and 19 the same within noise), with no gate wait
/// in any round. The default pools stay cold at 12 (`ferry bench dfx` counts the gate waits of
/// every round: 0); what it costs is latency where a pool has no slack: the one-buffer-pool
/// tests take ~1.5x as long. `tests/dfx_capacity.rs` keeps the pools' margin from shrinking.
pub const HOST_NICE: i32 = 12;

/// What to collect in a run (`ferry run --swimlane/--pmu/--dep-gen/--dump-args/--scope-stats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DfxOptions {
    /// ChipSwimlane level (0 off, 1–4).
    pub swimlane: u32,
    /// PMU event type (0 off; 1, 2, 4–8).
    pub pmu: u32,
    /// DepGen on.
    pub dep_gen: bool,
    /// ArgsDump level (0 off, 1–3).
    pub dump_args: u32,
    /// ScopeStats on.
    pub scope_stats: bool,
    /// Full-buffer policy.
    pub policy: Policy,
    /// Buffers per lane (`None`: each subsystem's default, [`Capacity::for_region`]; 1 forces a
    /// one-buffer pool).
    pub buffers_per_lane: Option<u32>,
    /// Records per buffer (`None`: each subsystem's default). DepGen and ArgsDump buffers hold
    /// 16 words per record of this setting (a one-tensor submit takes 8; a stage of one
    /// one-dimensional tensor 7).
    pub records_per_buffer: Option<u32>,
    /// Drop-policy gate bound in device cycles (`None`: the transport's 1 ms).
    pub drop_wait_cycles: Option<u64>,
    /// ArgsDump payload arena bytes per scheduler thread.
    pub arena_bytes: u64,
    /// The optional device→host doorbell hint (off: the host polls its queues, as on hardware).
    pub doorbell_hint: bool,
}

impl Default for DfxOptions {
    fn default() -> Self {
        DfxOptions {
            swimlane: 0,
            pmu: 0,
            dep_gen: false,
            dump_args: 0,
            scope_stats: false,
            policy: Policy::Block,
            buffers_per_lane: None,
            records_per_buffer: None,
            drop_wait_cycles: None,
            arena_bytes: 4 << 20,
            doorbell_hint: false,
        }
    }
}

impl DfxOptions {
    /// Whether any subsystem is on.
    pub fn any(&self) -> bool {
        self.swimlane > 0 || self.pmu > 0 || self.dep_gen || self.dump_args > 0 || self.scope_stats
    }

    /// Every subsystem on (swimlane level 4, PMU type 2, args level 3).
    pub fn all() -> DfxOptions {
        DfxOptions {
            swimlane: 4,
            pmu: 2,
            dep_gen: true,
            dump_args: 3,
            scope_stats: true,
            ..DfxOptions::default()
        }
    }
}

/// Geometry of the chip a session collects from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DfxChip {
    /// Arch.
    pub arch: Arch,
    /// AICPU threads (last = orchestrator).
    pub threads: u32,
    /// AIC workers.
    pub aic: u32,
    /// AIV workers.
    pub aiv: u32,
    /// Task window.
    pub task_window: u32,
    /// Scratch bytes of the run (ScopeStats heap capacity).
    pub scratch_bytes: u64,
}

impl DfxChip {
    /// The chip a runner built from `cfg` has, for a run of `scratch_bytes` scratch bytes.
    pub fn of(cfg: &super::RunnerConfig, scratch_bytes: u64) -> DfxChip {
        DfxChip {
            arch: cfg.arch,
            threads: cfg.aicpu_threads,
            aic: cfg.aic,
            aiv: cfg.aiv,
            task_window: cfg.task_window,
            scratch_bytes,
        }
    }
}

/// One lane's identity for the loss lines: (thread, core).
type LaneIds = Vec<(u32, Option<u32>)>;

/// A region on the session's engine: its key and its lanes' identities.
struct Sub<R, S> {
    key: RegionKey<R, S>,
    ids: LaneIds,
}

/// The regions of a running session.
#[derive(Default)]
struct Subs {
    aicore: Option<Sub<AicoreTaskRecord, LaneRecords<AicoreTaskRecord>>>,
    aicpu: Option<Sub<AicpuTaskRecord, LaneRecords<AicpuTaskRecord>>>,
    sched: Option<Sub<SchedPhaseRecord, LaneRecords<SchedPhaseRecord>>>,
    orch: Option<Sub<OrchPhaseRecord, LaneRecords<OrchPhaseRecord>>>,
    pmu: Option<Sub<PmuRecord, LaneRecords<PmuRecord>>>,
    dep_gen: Option<Sub<u64, LaneRecords<u64>>>,
    scope: Option<Sub<ScopeStatsRecord, LaneRecords<ScopeStatsRecord>>>,
    args: Option<Sub<u64, ArgsSink>>,
}

/// A running collection.
pub struct DfxSession {
    opts: DfxOptions,
    chip: DfxChip,
    device: Arc<DfxDevice>,
    profiling: Option<DfxProfiling>,
    /// The subsystems' directories in device memory (freed with the session).
    _dirs: Vec<Arc<dyn Send + Sync>>,
    /// The device-to-host doorbells of the regions in device memory (only with the doorbell
    /// hint; unregistered with the session).
    _bells: Vec<Box<dyn Send + Sync>>,
    /// `None` only inside `halt_host`, between taking the running engine and storing it
    /// halted.
    engine: Option<Engine>,
    subs: Subs,
    /// Loaded kernels' `(id, name)`, noted by the runners the session is attached to, so the
    /// files name them as they name the built-ins.
    loaded_kernels: std::sync::Mutex<Vec<(u32, String)>>,
    /// The native profile the session's sinks seal into, when recording: its end goes there too.
    rec: Option<Arc<ferry_profile::recorder::Recorder>>,
    /// Whether the sinks keep the records (else only the native profile holds them, and the
    /// session finishes into loss accounting alone).
    keep: bool,
}

/// The session's host: serving, or halted (a dead or wedged host) until `finish` plays the
/// restarted one.
enum Engine {
    Running(RunningEngine),
    Halted(ferry_dfx::HaltedEngine),
}

impl std::fmt::Debug for DfxSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DfxSession").field("opts", &self.opts).finish_non_exhaustive()
    }
}

/// The `KernelArgs` profiling fields of a collection placed in device memory: each base is the
/// device address of the subsystem's directory (`crate::device::dfx::DfxDirectory`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DfxProfiling {
    /// `dump_data_base`.
    pub dump_data_base: u64,
    /// `chip_swimlane_data_base`.
    pub chip_swimlane_data_base: u64,
    /// `pmu_data_base`.
    pub pmu_data_base: u64,
    /// `dep_gen_data_base`.
    pub dep_gen_data_base: u64,
    /// `scope_stats_data_base`.
    pub scope_stats_data_base: u64,
    /// `enable_profiling_flag` bits.
    pub flags: u32,
}

impl DfxProfiling {
    /// Writes the bases and flag word into `k`.
    pub fn apply(&self, k: &mut KernelArgs) {
        k.dump_data_base = self.dump_data_base;
        k.chip_swimlane_data_base = self.chip_swimlane_data_base;
        k.pmu_data_base = self.pmu_data_base;
        k.dep_gen_data_base = self.dep_gen_data_base;
        k.scope_stats_data_base = self.scope_stats_data_base;
        k.enable_profiling_flag = self.flags;
    }
}

impl DfxSession {
    /// Builds and starts the transports of every enabled subsystem, in host memory (the
    /// in-process path: attach [`device`](Self::device) with
    /// [`super::DeviceRunner::attach_dfx`]). `clock` is the device's cycle counter (the
    /// chip's device clock, `runner.device().clock()`), the one the device half stamps records
    /// with: the transports measure their stall intervals on it, so stalls line up with task
    /// times.
    ///
    /// # Errors
    /// [`DfxError::Setup`] when a transport cannot be configured.
    pub fn start<C: CycleCounter>(
        opts: &DfxOptions,
        chip: DfxChip,
        clock: &C,
    ) -> Result<DfxSession, DfxError> {
        Self::start_in(opts, chip, None, Arc::new(DeviceCycleClock(clock.clone())), None, true)
    }

    /// Builds and starts the transports of every enabled subsystem with each transport region,
    /// each ArgsDump arena and each subsystem's directory in `device`'s memory, so a loaded
    /// AICPU program can attach to them from the launch's `KernelArgs` profiling bases
    /// ([`profiling`](Self::profiling); [`super::DeviceRunner::attach_dfx_session`] does both
    /// paths). `device` is any backend's device that maps its memory for the host, counts
    /// cycles and has host bells ([`SessionBackend`]): the runner's, `runner.device()`.
    ///
    /// # Errors
    /// [`DfxError::Setup`] when a transport cannot be configured; [`DfxError::Device`] when
    /// device memory is short or cannot be mapped or written (the backend's error).
    pub fn start_on<D: SessionBackend>(
        opts: &DfxOptions,
        chip: DfxChip,
        device: &D,
    ) -> Result<DfxSession, DfxError> {
        Self::start_in(opts, chip, Some(Arc::new(device.clone())), clock_of(device), None, true)
    }

    /// [`start_on`](Self::start_on), with every collected buffer also sealed into `rec`, the
    /// native profile written while the run runs ([`ferry_profile::recorder`]).
    ///
    /// # Errors
    /// As [`start_on`](Self::start_on).
    pub fn start_recorded<D: SessionBackend>(
        opts: &DfxOptions,
        chip: DfxChip,
        device: &D,
        rec: Arc<ferry_profile::recorder::Recorder>,
    ) -> Result<DfxSession, DfxError> {
        let d = Some(Arc::new(device.clone()) as Arc<dyn SessionDevice>);
        Self::start_in(opts, chip, d, clock_of(device), Some(rec), true)
    }

    /// [`start_recorded`](Self::start_recorded) for a profile that is its native profile alone:
    /// the collectors seal every buffer into `rec` and keep no record themselves (only each
    /// buffer's sequence number and count), so collection neither copies the records a second
    /// time nor grows the host's memory with the run. Finish it with
    /// [`finish_runs_accounting`](Self::finish_runs_accounting); a reader rebuilds the rows from
    /// the native profile ([`models_from_recording`]).
    ///
    /// # Errors
    /// As [`start_on`](Self::start_on).
    pub fn start_recorded_only<D: SessionBackend>(
        opts: &DfxOptions,
        chip: DfxChip,
        device: &D,
        rec: Arc<ferry_profile::recorder::Recorder>,
    ) -> Result<DfxSession, DfxError> {
        let d = Some(Arc::new(device.clone()) as Arc<dyn SessionDevice>);
        Self::start_in(opts, chip, d, clock_of(device), Some(rec), false)
    }

    fn start_in(
        opts: &DfxOptions,
        chip: DfxChip,
        device: Option<Arc<dyn SessionDevice>>,
        clock: Arc<dyn ferry_dfx::clock::CycleClock>,
        rec: Option<Arc<ferry_profile::recorder::Recorder>>,
        keep: bool,
    ) -> Result<DfxSession, DfxError> {
        let threads = chip.threads.max(2);
        let scheds = threads - 1;
        let w = chip.aic + chip.aiv;
        let mut lay = Layout {
            profile: chip.arch.profile(),
            opts: *opts,
            threads,
            device,
            clock,
            bells: Mutex::new(Vec::new()),
            engine: DfxEngine::new(EngineConfig {
                drain_shards: Some(1),
                // The chip's own threads share this machine's CPUs, where on hardware the device
                // has CPUs of its own: the host's collection yields to them when both want a CPU
                // (the pools absorb the extra latency).
                nice: Some(HOST_NICE),
                ..EngineConfig::default()
            }),
            at: BTreeMap::new(),
            regions: DfxRegions::default(),
            rec: rec.clone(),
            keep,
        };
        let core_thread: Vec<u32> = (0..w).map(|i| cluster_of(i, chip.aic) % scheds).collect();
        let per_core: LaneIds =
            core_thread.iter().enumerate().map(|(i, &t)| (t, Some(i as u32))).collect();
        let per_sched: LaneIds = (0..scheds).map(|t| (t, None)).collect();
        let orch: LaneIds = vec![(threads - 1, None)];
        let sl = opts.swimlane;
        let mut s = Subs::default();
        if sl >= 1 {
            s.aicore = Some(lay.raw(DfxRegion::Aicore, per_core.clone())?);
        }
        if sl >= 2 {
            s.aicpu = Some(lay.raw(DfxRegion::Aicpu, per_core.clone())?);
        }
        if sl >= 3 {
            s.sched = Some(lay.raw(DfxRegion::Sched, per_sched.clone())?);
        }
        if sl >= 4 {
            s.orch = Some(lay.raw(DfxRegion::Orch, orch.clone())?);
        }
        if opts.pmu > 0 {
            s.pmu = Some(lay.raw(DfxRegion::Pmu, per_core.clone())?);
        }
        if opts.dep_gen {
            s.dep_gen = Some(lay.raw(DfxRegion::DepGen, orch.clone())?);
        }
        if opts.scope_stats {
            s.scope = Some(lay.raw(DfxRegion::Scope, orch.clone())?);
        }
        let mut arenas = Vec::new();
        let mut arena_at = Vec::new();
        if opts.dump_args > 0 {
            for _ in 0..scheds {
                let a = match &lay.device {
                    Some(d) => {
                        let total = ArgsArena::bytes_for(opts.arena_bytes);
                        // Only level 2 copies every argument's payload: at levels 1 and 3 the
                        // device writes an arena only for arguments marked with `dump(...)`,
                        // which most graphs (the storm among them) have none of, so its 4 MiB
                        // per thread are not brought in ahead (a fault each where one is
                        // written). The storm with all five: the session's start 11.6 -> 7.9 ms
                        // (medians of 15 interleaved runs), the run's page faults unchanged.
                        let populate = opts.dump_args == 2;
                        let m = d.alloc(total, populate)?;
                        arena_at.push((m.addr, total));
                        // SAFETY: `m.view` is the 64-byte aligned start of `total` bytes its
                        // owner keeps alive; host and device touch them only atomically, but for
                        // the host's copy of payloads no one writes meanwhile. The host reads the
                        // device view: the payload copy stands for the arena's DMA read.
                        let a = unsafe { ArgsArena::from_raw_parts(m.view, total, m.owner) };
                        a.clear_counters();
                        a
                    }
                    None => ArgsArena::new(opts.arena_bytes),
                };
                arenas.push(Arc::new(a));
            }
            let queues: Vec<u32> = (0..scheds).collect();
            let t = lay.build::<u64>(DfxRegion::Args, &queues)?;
            let consumed: Arc<Vec<AtomicU64>> =
                Arc::new((0..scheds).map(|_| AtomicU64::new(0)).collect());
            let (a2, c2, rec) = (arenas.clone(), consumed.clone(), lay.rec.clone());
            let key = lay.engine.add_with_hooks(
                t,
                move |_| {
                    let mut s = ArgsSink::new(a2.clone(), c2.clone());
                    s.keep = keep || rec.is_none();
                    s.rec = rec.clone();
                    s
                },
                ArgsAcks { arenas: arenas.clone(), consumed },
            )?;
            s.args = Some(Sub { key, ids: per_sched.clone() });
        }
        let mut dirs = Vec::new();
        let profiling = match &lay.device {
            Some(d) => {
                let flags = if opts.doorbell_hint { DFX_DIR_FLAG_DOORBELL_HINT } else { 0 };
                let mut write = |level: u32, entries: Vec<(u64, u64)>| -> Result<u64, DfxError> {
                    let dir = DfxDirectory { level, threads, aic: chip.aic, flags, entries };
                    let bytes = dir.encode();
                    let m = d.alloc(bytes.len() as u64, true)?;
                    d.upload(&bytes, m.addr)?;
                    dirs.push(m.owner);
                    Ok(m.addr)
                };
                let at = |r| lay.at.get(&r).copied().unwrap_or((0, 0));
                let mut p = DfxProfiling::default();
                if sl > 0 {
                    let e =
                        [DfxRegion::Aicore, DfxRegion::Aicpu, DfxRegion::Sched, DfxRegion::Orch];
                    p.chip_swimlane_data_base = write(sl, e.into_iter().map(at).collect())?;
                    p.flags |= PROFILING_FLAG_CHIP_SWIMLANE;
                }
                if opts.pmu > 0 {
                    p.pmu_data_base = write(opts.pmu, vec![at(DfxRegion::Pmu)])?;
                    p.flags |= PROFILING_FLAG_PMU;
                }
                if opts.dep_gen {
                    p.dep_gen_data_base = write(1, vec![at(DfxRegion::DepGen)])?;
                    p.flags |= PROFILING_FLAG_DEP_GEN;
                }
                if opts.scope_stats {
                    p.scope_stats_data_base = write(1, vec![at(DfxRegion::Scope)])?;
                    p.flags |= PROFILING_FLAG_SCOPE_STATS;
                }
                if opts.dump_args > 0 {
                    let mut e = vec![at(DfxRegion::Args)];
                    e.extend(arena_at);
                    p.dump_data_base = write(opts.dump_args, e)?;
                    p.flags |= PROFILING_FLAG_DUMP_ARGS;
                }
                Some(p)
            }
            None => None,
        };
        let device = Arc::new(DfxDevice {
            swimlane: sl,
            pmu: opts.pmu,
            dep_gen: opts.dep_gen,
            args_level: opts.dump_args,
            scope_stats: opts.scope_stats,
            threads,
            aic: chip.aic,
            regions: lay.regions,
            arenas,
        });
        let engine = lay.engine.start();
        debug_assert_eq!(engine.threads(), HOST_THREADS);
        Ok(DfxSession {
            opts: *opts,
            chip,
            device,
            profiling,
            _dirs: dirs,
            _bells: lay.bells.into_inner().unwrap_or_else(|p| p.into_inner()),
            engine: Some(Engine::Running(engine)),
            subs: s,
            loaded_kernels: std::sync::Mutex::new(Vec::new()),
            rec,
            keep,
        })
    }

    /// Notes loaded kernels' `(id, name)` for the run model's kernel names (what the name map
    /// and the views label them with).
    /// [`DeviceRunner::attach_dfx_session`](crate::host::DeviceRunner::attach_dfx_session) notes
    /// its runner's.
    pub fn note_loaded_kernels(&self, kernels: impl IntoIterator<Item = (u32, String)>) {
        let mut k = self.loaded_kernels.lock().unwrap_or_else(|p| p.into_inner());
        k.extend(kernels);
    }

    /// The `KernelArgs` profiling bases and flags of a session started with
    /// [`start_on`](Self::start_on); `None` for a host-memory session.
    pub fn profiling(&self) -> Option<DfxProfiling> {
        self.profiling
    }

    /// The device half to attach to the runner for the run.
    pub fn device(&self) -> Arc<DfxDevice> {
        self.device.clone()
    }

    /// Host threads serving the session (fixed: [`HOST_THREADS`]).
    pub fn host_threads(&self) -> usize {
        match &self.engine {
            Some(Engine::Running(e)) => e.threads(),
            _ => 0,
        }
    }

    /// A dead or wedged DFX host (docs/design/dfx-backpressure.md): every host thread of the session exits at once,
    /// leaving queued buffers where they are; the run goes on, and the device's writers, which
    /// no longer get buffers back, give up at their gates within their budget (counted as
    /// dropped in the loss accounting). [`finish`](Self::finish) then plays the restarted host:
    /// it collects everything still queued and reconciles, so every record is either in the
    /// model or counted as lost. A second call does nothing.
    pub fn halt_host(&mut self) {
        self.engine = match self.engine.take() {
            Some(Engine::Running(e)) => Some(Engine::Halted(e.halt())),
            other => other,
        };
    }

    /// Whether [`halt_host`](Self::halt_host) stopped the host.
    pub fn host_halted(&self) -> bool {
        matches!(self.engine, Some(Engine::Halted(_)))
    }

    /// Stops the engine (after the run's AICPU threads returned), reconciles, builds and checks
    /// the model: one model of everything the session collected, however many runs it spanned
    /// (see [`finish_runs`](Self::finish_runs) for one model per run).
    ///
    /// # Errors
    /// [`DfxError::Collect`] for records that do not decode, [`DfxError::Deps`] when the DepGen
    /// graph disagrees with the runtime's dependencies.
    pub fn finish(self) -> Result<RunModel, DfxError> {
        let mut models = self.finish_as(false, true)?;
        Ok(models.remove(0))
    }

    /// Stops the engine as [`finish`](Self::finish) does and builds one model per run the
    /// session spanned, in launch order: each lane's writer logs its counters and next buffer
    /// sequence number at every run's end ([`ferry_dfx::RunEnd`]), which tells each run's
    /// buffers apart and gives each run its own loss lines (produced, collected and dropped
    /// reconcile per run). Each model is labelled ([`ferry_profile::RunLabel`]) when there are
    /// several; one model, unlabelled, for a session of one run (or none).
    ///
    /// # Errors
    /// As [`finish`](Self::finish); [`DfxError::Collect`] when the lanes disagree on the number
    /// of runs, a buffer belongs to no run, or the session spanned more runs than the run-end
    /// log keeps ([`ferry_dfx::device::RUN_RING`]).
    pub fn finish_runs(self) -> Result<Vec<RunModel>, DfxError> {
        self.finish_as(true, true)
    }

    /// Stops the engine as [`finish_runs`](Self::finish_runs) does, seals the session's end into
    /// the native profile, and returns one model per run holding its loss accounting alone
    /// (produced, collected, dropped and stalls per lane, labelled by run): no record is
    /// converted, since the native profile holds them and a reader rebuilds the rows from it
    /// ([`models_from_recording`]). For a run whose profile is its native profile alone.
    ///
    /// # Errors
    /// As [`finish_runs`](Self::finish_runs), but for the conversion's (records that do not
    /// decode, a DepGen graph that disagrees with the runtime's): a reader meets those.
    pub fn finish_runs_accounting(self) -> Result<Vec<RunModel>, DfxError> {
        self.finish_as(true, false)
    }

    fn finish_as(self, per_run: bool, rows: bool) -> Result<Vec<RunModel>, DfxError> {
        let t0 = std::time::Instant::now();
        let ms = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1e3;
        let c = self.chip;
        let loaded =
            std::mem::take(&mut *self.loaded_kernels.lock().unwrap_or_else(|p| p.into_inner()));
        let kernels = crate::device::kernels::KERNELS
            .iter()
            .map(|k| (k.id as i32, k.name.to_string()))
            .chain(loaded.into_iter().map(|(id, name)| (id as i32, name)))
            .collect::<Vec<_>>();
        let budget = match self.opts.policy {
            Policy::Block => c.arch.profile().dfx_backpressure_budget_cycles,
            Policy::Drop => self.opts.drop_wait_cycles.unwrap_or(c.arch.profile().clock_hz / 1000),
        };
        let policy = self.opts.policy.into();
        let m = base_model(&c, kernels.iter().cloned(), policy, budget);
        use Subsystem::ChipSwimlane;
        let mut report = match self.engine {
            Some(Engine::Running(e)) => e.try_stop()?,
            Some(Engine::Halted(h)) => h.recover(),
            None => unreachable!("halt_host always stores the engine back"),
        };
        tracing::debug!(ms = ms(t0), "dfx finish: engine stopped");
        let s = self.subs;
        // Every region's report first (no copying: each lane's buffers stay where the collector
        // put them).
        let r = &mut report;
        let taken = runs::Regions {
            aicore: s.aicore.map(|sub| take(r, sub, ChipSwimlane, "aicore")),
            aicpu: s.aicpu.map(|sub| take(r, sub, ChipSwimlane, "aicpu")),
            sched: s.sched.map(|sub| take(r, sub, ChipSwimlane, "sched")),
            orch: s.orch.map(|sub| take(r, sub, ChipSwimlane, "orch")),
            pmu: s.pmu.map(|sub| take(r, sub, Subsystem::Pmu, "pmu")),
            scope: s.scope.map(|sub| take(r, sub, Subsystem::ScopeStats, "scope")),
            dep_gen: s.dep_gen.map(|sub| take(r, sub, Subsystem::DepGen, "dep_gen")),
            args: s.args.map(|sub| {
                let r = report.take(sub.key);
                let loss = loss_lines(&r, &sub.ids, Subsystem::ArgsDump, "args");
                Taken { loss, ends: r.run_ends, lanes: ArgsSink::merge(r.sinks) }
            }),
        };
        let arena_drops: u64 = self
            .device
            .arenas
            .iter()
            // Relaxed: device counters read after the run (the join orders them).
            .map(|a| a.dropped().load(Ordering::Relaxed))
            .sum();
        if let Some(rec) = &self.rec {
            // The session's end beside its records: what a model rebuilt from the native
            // profile alone takes (`models_from_recording`).
            let end = native::SessionEnd::of(
                &taken,
                &c,
                &self.opts,
                kernels,
                policy,
                budget,
                arena_drops,
                per_run,
            );
            let json = serde_json::to_vec(&end).map_err(|e| CollectError::Native(e.to_string()))?;
            rec.append_bytes(ferry_profile::recorder::RecordStream::Meta, META_SESSION, 0, &json);
        }
        if !rows {
            return accounting_models(m, taken, per_run);
        }
        if !self.keep {
            let why = "its records are in its native profile alone (a session started \
                       recorded-only finishes into accounting)";
            return Err(CollectError::Native(why.into()).into());
        }
        build_models(m, taken, &c, &self.opts, arena_drops, per_run)
    }
}

/// One model per run of `taken` (one for a single run, or with `per_run` off) holding its loss
/// lines alone, labelled as [`build_models`] labels its models.
fn accounting_models(
    m: RunModel,
    taken: runs::Regions,
    per_run: bool,
) -> Result<Vec<RunModel>, DfxError> {
    let runs = if per_run { taken.runs()? } else { 1 };
    if runs <= 1 {
        let mut m = m;
        m.loss.lanes = taken.loss_lines();
        return Ok(vec![m]);
    }
    let parts = taken.split(runs)?;
    Ok(parts
        .into_iter()
        .enumerate()
        .map(|(k, part)| {
            let mut mk = m.clone();
            let label = RunLabel { index: k as u32, runs: runs as u32 };
            mk.meta.run = Some(label);
            mk.loss.run = Some(label);
            mk.loss.lanes = part.loss_lines();
            mk
        })
        .collect())
}

/// A device a session's transports, arenas and directories can live in: its memory mapped for
/// the host, its cycle counter the transports' clock, its host bells the doorbell hint's
/// (the simulated chip's `Device`; `ferry_backend::host::HostMemoryDevice`).
pub trait SessionBackend: MappedMemory + DeviceCounter + HostBells {}

impl<D: MappedMemory + DeviceCounter + HostBells> SessionBackend for D {}

/// `device`'s cycle counter as the transports' clock.
fn clock_of<D: DeviceCounter>(device: &D) -> Arc<dyn ferry_dfx::clock::CycleClock> {
    Arc::new(DeviceCycleClock(device.cycle_counter().clone()))
}

/// The model a session's records go into: the chip's metadata, the kernels' names, the loss
/// accounting's policy and budget.
fn base_model(
    c: &DfxChip,
    kernels: impl Iterator<Item = (i32, String)>,
    policy: ferry_profile::LossPolicy,
    budget: u64,
) -> RunModel {
    let w = c.aic + c.aiv;
    let core_types =
        (0..w).map(|i| if i < c.aic { CoreType::Aic } else { CoreType::Aiv }).collect();
    let mut meta = RunMeta::new(c.arch.name(), c.arch.profile().clock_hz, core_types);
    let scheds = c.threads.max(2) - 1;
    meta.core_to_thread = (0..w).map(|i| (cluster_of(i, c.aic) % scheds) as i32).collect();
    let mut m = RunModel::new(meta);
    m.kernels = kernels.collect();
    m.loss = LossAccounting { policy, budget_cycles: budget, lanes: Vec::new(), run: None };
    m
}

/// The models of a stopped session's regions: one, or one per run (`per_run`).
fn build_models(
    m: RunModel,
    taken: runs::Regions,
    chip: &DfxChip,
    opts: &DfxOptions,
    arena_drops: u64,
    per_run: bool,
) -> Result<Vec<RunModel>, DfxError> {
    let t0 = std::time::Instant::now();
    {
        let runs = if per_run { taken.runs()? } else { 1 };
        if runs <= 1 {
            return Ok(vec![runs::build(m, taken, chip, opts, arena_drops, t0)?]);
        }
        let parts = taken.split(runs)?;
        let mut models = Vec::with_capacity(runs);
        for (k, part) in parts.into_iter().enumerate() {
            let mut mk = m.clone();
            let label = RunLabel { index: k as u32, runs: runs as u32 };
            mk.meta.run = Some(label);
            mk.loss.run = Some(label);
            // The arena gate's drops are counted per session, not per run: the session's total
            // goes with its first run (docs/dfx.md).
            let drops = if k == 0 { arena_drops } else { 0 };
            models.push(runs::build(mk, part, chip, opts, drops, t0)?);
        }
        Ok(models)
    }
}
