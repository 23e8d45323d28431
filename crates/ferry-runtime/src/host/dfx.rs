//! Host-side DFX collection: one transport per subsystem record type, set up before a run,
//! collected and checked after it, turned into the run model `ferry_dfx::output` writes.
//!
//! [`DfxSession::start`] builds each enabled subsystem's [`DfxTransport`] (lanes per core, per
//! AICPU thread or one for the orchestrator; ready queue = the AICPU thread that owns the lane),
//! starts its host threads and returns the [`DfxDevice`] to attach to the runner
//! ([`super::DeviceRunner::attach_dfx`]). After the run, [`DfxSession::finish`] stops the
//! transports (every device writer has flushed by then: the AICPU threads returned), merges the
//! collector shards per lane, reconciles every lane (loss accounting in every file), checks the
//! DepGen graph against the runtime's dependencies and returns the [`RunModel`].
use crate::device::dfx::{decode_tensor_blob, ArgsArena, DfxDevice, DfxDirectory, DfxRegions};
use crate::device::ops::{DeviceOps, TranslateError};
use crate::device::sched::cluster_of;
use crate::device::tensor_map::TensorMap;
use ferry_abi::arch::ArchProfile;
use ferry_abi::launch::{
    KernelArgs, PROFILING_FLAG_CHIP_SWIMLANE, PROFILING_FLAG_DEP_GEN, PROFILING_FLAG_DUMP_ARGS,
    PROFILING_FLAG_PMU, PROFILING_FLAG_SCOPE_STATS,
};
use ferry_abi::records::{
    self as abi, AicoreTaskRecord, AicpuTaskRecord, ArgsDumpRecord, DepGenRecord, OrchPhaseRecord,
    PmuRecord, SchedPhaseRecord, ScopeStatsRecord,
};
use ferry_dfx::clock::CycleClock;
use ferry_dfx::mem::{DeviceMemory, MemError, MirroredMemory, ShmRegion, SvmMemory};
use ferry_dfx::output::collect::{self, LaneRecords};
use ferry_dfx::output::{
    ArgsDump, CoreType, DepArg, DepEdge, DepTensor, DepsGraph, DumpedArg, EdgeSource, LaneLoss,
    LossAccounting, PmuTable, RunMeta, RunModel, ScopeStats, Subsystem, Swimlane,
};
use ferry_dfx::{
    CollectSink, CollectedBuffer, DfxBuilder, DfxTransport, HostProfiler, Policy, Record,
    ReplenishHooks, RunReport,
};
use ferry_sim::clock::DeviceClock;
use ferry_sim::{Arch, Device, DevicePtr};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
    /// Buffers per lane (1 forces a one-buffer pool).
    pub buffers_per_lane: u32,
    /// Records per buffer (`None`: each record type's ABI default).
    pub records_per_buffer: Option<u32>,
    /// Drop-policy gate bound in device cycles (`None`: the transport's 1 ms).
    pub drop_wait_cycles: Option<u64>,
    /// ArgsDump payload arena bytes per scheduler thread.
    pub arena_bytes: u64,
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
            buffers_per_lane: 4,
            records_per_buffer: None,
            drop_wait_cycles: None,
            arena_bytes: 4 << 20,
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

/// Why DFX collection failed.
#[derive(Debug, thiserror::Error)]
pub enum DfxError {
    /// A transport could not be configured.
    #[error("dfx transport setup: {0}")]
    Setup(String),
    /// Collected records could not be turned into the model.
    #[error("dfx collection: {0}")]
    Collect(String),
    /// `deps.json` disagrees with the runtime's dependencies; it is not written.
    #[error("deps.json check failed: {0}")]
    Deps(String),
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

/// One lane's identity for the loss lines: (thread, core).
type LaneIds = Vec<(u32, Option<u32>)>;

struct Sub<R: Record, S: CollectSink<R> = LaneRecords<R>> {
    prof: HostProfiler<R, S>,
    ids: LaneIds,
}

/// A running collection.
pub struct DfxSession {
    opts: DfxOptions,
    chip: DfxChip,
    device: Arc<DfxDevice>,
    profiling: Option<DfxProfiling>,
    /// The subsystems' directories in device memory (freed with the session).
    _dirs: Vec<Arc<SimAlloc>>,
    /// The device-to-host doorbells of the regions in device memory (unregistered with the
    /// session).
    _bells: Vec<ferry_sim::aicpu_os::HostBellGuard>,
    aicore: Option<Sub<AicoreTaskRecord>>,
    aicpu: Option<Sub<AicpuTaskRecord>>,
    sched: Option<Sub<SchedPhaseRecord>>,
    orch: Option<Sub<OrchPhaseRecord>>,
    pmu: Option<Sub<PmuRecord>>,
    dep_gen: Option<Sub<DepGenRecord>>,
    scope: Option<Sub<ScopeStatsRecord>>,
    args: Option<Sub<ArgsDumpRecord, ArgsSink>>,
}

impl std::fmt::Debug for DfxSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DfxSession").field("opts", &self.opts).finish_non_exhaustive()
    }
}

/// Collects ArgsDump records and copies their payloads out of the thread's arena while the run
/// is live, counting the payloads consumed per thread for the arena acknowledgement.
struct ArgsSink {
    arenas: Vec<Arc<ArgsArena>>,
    consumed: Arc<Vec<AtomicU64>>,
    /// `(lane, seq, [(record, payload, overwritten)])`.
    bufs: Vec<(u32, u32, Vec<ArgsItem>)>,
}

type ArgsItem = (ArgsDumpRecord, Option<Vec<u8>>, bool);

impl CollectSink<ArgsDumpRecord> for ArgsSink {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, ArgsDumpRecord>) {
        let t = b.lane as usize;
        let mut items = Vec::with_capacity(b.records.len());
        for r in b.records {
            if r.kind != abi::ARG_KIND_TENSOR || r.payload_size == 0 {
                items.push((*r, None, false));
                continue;
            }
            let Some(a) = self.arenas.get(t) else {
                items.push((*r, None, false));
                continue;
            };
            // Relaxed: the device cursor as an overwrite high-water mark (§5.4); a stale value is
            // only smaller, i.e. less conservative by bytes the device had not yet written.
            let hw = a.write_offset().load(Ordering::Relaxed);
            let size = a.size();
            if r.payload_offset < hw.saturating_sub(size) || r.payload_size > size {
                items.push((*r, None, true));
            } else {
                items.push((*r, Some(a.read(r.payload_offset % size, r.payload_size)), false));
            }
            if let Some(c) = self.consumed.get(t) {
                // Release: orders the payload copy above before the count; pairs with the ack
                // hook's Acquire load, which then publishes it to the device.
                c.fetch_add(1, Ordering::Release);
            }
        }
        self.bufs.push((b.lane, b.seq, items));
    }
}

/// `publish_arena_acks`: tells each scheduler thread how many of its payloads the host copied.
struct ArgsAcks {
    arenas: Vec<Arc<ArgsArena>>,
    consumed: Arc<Vec<AtomicU64>>,
}

impl ReplenishHooks for ArgsAcks {
    fn publish_arena_acks(&mut self) {
        for (a, c) in self.arenas.iter().zip(self.consumed.iter()) {
            // Acquire: pairs with the collector's Release increment, so the copies it counted
            // happen before the acknowledgement below (and the device's next lap of writes).
            let n = c.load(Ordering::Acquire);
            // Release: pairs with the device's Acquire load in the arena gate (`copy_payload`).
            a.completed().store(n, Ordering::Release);
        }
    }
}

fn memory(profile: &ArchProfile, len: usize, k: u64) -> Arc<dyn DeviceMemory> {
    let addr = 0x4000_0000_0000 + (k << 36);
    if profile.svm {
        Arc::new(SvmMemory::new(len, addr))
    } else {
        Arc::new(MirroredMemory::new(len, addr))
    }
}

/// One allocation of simulated device memory, freed when the last view of it goes.
#[derive(Debug)]
struct SimAlloc {
    device: Device,
    ptr: DevicePtr,
    len: u64,
}

impl SimAlloc {
    fn new(device: &Device, len: u64) -> Result<Arc<SimAlloc>, DfxError> {
        let setup = |e: &dyn std::fmt::Display| DfxError::Setup(e.to_string());
        let ptr = device.malloc(len.max(64)).map_err(|e| setup(&e))?;
        let a = Arc::new(SimAlloc { device: device.clone(), ptr, len });
        // A recycled allocation keeps its old bytes: zero both views before anyone uses them.
        let mem = device.memory();
        for p in [mem.device_ptr(ptr, len), mem.host_ptr(ptr, len)] {
            let p = p.map_err(|e| setup(&e))?;
            // SAFETY: `p` points at `len` bytes of the live allocation just made, which no one
            // else can reach yet.
            unsafe { std::ptr::write_bytes(p, 0, len as usize) };
        }
        Ok(a)
    }

    fn device_ptr(&self) -> std::ptr::NonNull<u8> {
        let p = self.device.memory().device_ptr(self.ptr, self.len).ok();
        // A live allocation always translates.
        std::ptr::NonNull::new(p.unwrap_or(std::ptr::null_mut())).expect("live allocation")
    }
}

impl Drop for SimAlloc {
    fn drop(&mut self) {
        if let Err(e) = self.device.free(self.ptr) {
            tracing::warn!(%e, "freeing a DFX allocation");
        }
    }
}

/// [`DeviceMemory`] over an allocation of a `ferry_sim` device: the device view is its HBM, the
/// host view the same bytes on SVM (a2a3) or the device's host mirror (a5), synchronised by the
/// simulator's narrow range copies.
#[derive(Debug)]
pub struct SimDeviceMemory {
    alloc: Arc<SimAlloc>,
}

impl SimDeviceMemory {
    /// Allocates `len` bytes (64-byte aligned, zeroed) on `device`.
    ///
    /// # Errors
    /// [`DfxError::Setup`] when the device is out of memory.
    pub fn new(device: &Device, len: usize) -> Result<SimDeviceMemory, DfxError> {
        Ok(SimDeviceMemory { alloc: SimAlloc::new(device, len as u64)? })
    }

    fn view(&self, p: Result<*mut u8, ferry_sim::memory::MemoryError>) -> ShmRegion {
        let p = std::ptr::NonNull::new(p.unwrap_or(std::ptr::null_mut())).expect("live allocation");
        // SAFETY: `p` is 64-byte aligned (device allocations are `DEVICE_ALIGN`-aligned and both
        // maps page-aligned) and valid for `len` bytes while the allocation lives, which the
        // `SimAlloc` owner guarantees; the transport touches it only atomically / single-writer.
        unsafe { ShmRegion::from_raw_parts(p, self.alloc.len as usize, self.alloc.clone()) }
    }

    fn range(&self, off: usize, len: usize) -> Result<DevicePtr, MemError> {
        if off % 4 != 0 || len % 4 != 0 || off + len > self.alloc.len as usize {
            return Err(MemError::OutOfRange { off, len });
        }
        Ok(DevicePtr(self.alloc.ptr.0 + off as u64))
    }
}

impl DeviceMemory for SimDeviceMemory {
    fn device_view(&self) -> ShmRegion {
        self.view(self.alloc.device.memory().device_ptr(self.alloc.ptr, self.alloc.len))
    }
    fn host_view(&self) -> ShmRegion {
        self.view(self.alloc.device.memory().host_ptr(self.alloc.ptr, self.alloc.len))
    }
    fn device_addr(&self) -> u64 {
        self.alloc.ptr.0
    }
    fn is_svm(&self) -> bool {
        self.alloc.device.memory().is_svm()
    }
    fn write_range_to_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        let p = self.range(off, len)?;
        self.alloc
            .device
            .memory()
            .write_range_to_device(p, len as u64)
            .map_err(|_| MemError::Failed)
    }
    fn read_range_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        let p = self.range(off, len)?;
        self.alloc
            .device
            .memory()
            .read_range_from_device(p, len as u64)
            .map_err(|_| MemError::Failed)
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

/// A `ferry_sim` device clock as the transports' [`CycleClock`]: the host side of every
/// transport (stall intervals, gate budgets of in-process writers) then reads the same counter
/// the device half stamps its records with (`DeviceOps::clock_cycles`), so a stall interval lines
/// up with the task times it delayed.
#[derive(Clone, Debug)]
pub struct SimCycleClock(pub DeviceClock);

impl CycleClock for SimCycleClock {
    fn now_cycles(&self) -> u64 {
        self.0.now_cycles()
    }
}

struct Layout {
    profile: &'static ArchProfile,
    opts: DfxOptions,
    threads: u32,
    device: Option<Device>,
    clock: Arc<SimCycleClock>,
    /// The device-to-host doorbells registered for the regions in device memory.
    bells: Mutex<Vec<ferry_sim::aicpu_os::HostBellGuard>>,
}

impl Layout {
    fn build<R: Record>(
        &self,
        k: u64,
        kind: u32,
        lanes: &[u32],
        rpb: usize,
    ) -> Result<(DfxTransport<R>, (u64, u64)), DfxError> {
        let bufs = self.opts.buffers_per_lane.max(1);
        let mut b = DfxBuilder::new(self.profile);
        b.ready_queues(self.threads)
            .shards(1)
            .free_slots(bufs.min(4).next_power_of_two())
            .records_per_buffer(self.opts.records_per_buffer.unwrap_or(rpb as u32).max(1))
            .policy(self.opts.policy);
        if let Some(c) = self.opts.drop_wait_cycles {
            b.drop_wait_cycles(c);
        }
        for &q in lanes {
            b.lane(q, kind, bufs);
        }
        let cfg = b.build::<R>().map_err(|e| DfxError::Setup(e.to_string()))?;
        let mem: Arc<dyn DeviceMemory> = match &self.device {
            Some(d) => Arc::new(SimDeviceMemory::new(d, cfg.region_size())?),
            None => memory(self.profile, cfg.region_size(), k),
        };
        let at = (mem.device_addr(), cfg.region_size() as u64);
        let t = DfxTransport::new(cfg, mem, self.clock.clone())
            .map_err(|e| DfxError::Setup(e.to_string()))?;
        // A loaded AICPU program cannot reach the drain threads' parkers: it rings them through
        // the AICPU OS (`notify_host`), keyed by the region's device address.
        if let (Some(d), Some(bell)) = (&self.device, t.device_region().host_doorbell()) {
            let g = d.aicpu_os().register_host_bell(at.0, bell);
            self.bells.lock().unwrap_or_else(|p| p.into_inner()).push(g);
        }
        Ok((t, at))
    }

    fn sub<R: Record>(
        &self,
        k: u64,
        kind: u32,
        ids: LaneIds,
        rpb: usize,
        region: &mut Option<ferry_dfx::DeviceRegion>,
        at: &mut (u64, u64),
    ) -> Result<Sub<R>, DfxError> {
        let queues: Vec<u32> = ids.iter().map(|i| i.0).collect();
        let (t, a) = self.build::<R>(k, kind, &queues, rpb)?;
        *region = Some(t.device_region());
        *at = a;
        Ok(Sub { prof: t.start(|_| LaneRecords::default()), ids })
    }
}

impl DfxSession {
    /// Builds and starts the transports of every enabled subsystem, in host memory (the
    /// in-process path: attach [`device`](Self::device) with
    /// [`super::DeviceRunner::attach_dfx`]). `clock` is the chip's device clock
    /// (`runner.device().clock()`), the one the device half stamps records with: the
    /// transports measure their stall intervals on it, so stalls line up with task times.
    ///
    /// # Errors
    /// [`DfxError::Setup`] when a transport cannot be configured.
    pub fn start(
        opts: &DfxOptions,
        chip: DfxChip,
        clock: &DeviceClock,
    ) -> Result<DfxSession, DfxError> {
        Self::start_in(opts, chip, None, clock)
    }

    /// Builds and starts the transports of every enabled subsystem with each transport region,
    /// each ArgsDump arena and each subsystem's directory in `device`'s memory, so a loaded
    /// AICPU program can attach to them from the launch's `KernelArgs` profiling bases
    /// ([`profiling`](Self::profiling); [`super::DeviceRunner::attach_dfx_session`] does both
    /// paths).
    ///
    /// # Errors
    /// [`DfxError::Setup`] when a transport cannot be configured or device memory is short.
    pub fn start_on(
        opts: &DfxOptions,
        chip: DfxChip,
        device: &Device,
    ) -> Result<DfxSession, DfxError> {
        Self::start_in(opts, chip, Some(device.clone()), device.clock())
    }

    fn start_in(
        opts: &DfxOptions,
        chip: DfxChip,
        device: Option<Device>,
        clock: &DeviceClock,
    ) -> Result<DfxSession, DfxError> {
        let threads = chip.threads.max(2);
        let scheds = threads - 1;
        let w = chip.aic + chip.aiv;
        let clock = Arc::new(SimCycleClock(clock.clone()));
        let lay = Layout {
            profile: chip.arch.profile(),
            opts: *opts,
            threads,
            device,
            clock,
            bells: Mutex::new(Vec::new()),
        };
        let per_core: LaneIds =
            (0..w).map(|i| (cluster_of(i, chip.aic) % scheds, Some(i))).collect();
        let per_sched: LaneIds = (0..scheds).map(|t| (t, None)).collect();
        let orch: LaneIds = vec![(threads - 1, None)];
        let mut g = DfxRegions::default();
        // Device address and bytes of each region: aicore, aicpu, sched, orch, pmu, dep_gen,
        // scope, args.
        let mut at = [(0u64, 0u64); 8];
        let sl = opts.swimlane;
        let on = |b: bool| b.then_some(());
        let [a0, a1, a2, a3, a4, a5, a6, a7] = &mut at;
        let aicore = on(sl >= 1)
            .map(|_| {
                let k = abi::SWIMLANE_KIND_AICORE_TASK;
                lay.sub(0, k, per_core.clone(), 1024, &mut g.aicore, a0)
            })
            .transpose()?;
        let aicpu = on(sl >= 2)
            .map(|_| {
                let k = abi::SWIMLANE_KIND_AICPU_TASK;
                lay.sub(1, k, per_core.clone(), 1000, &mut g.aicpu, a1)
            })
            .transpose()?;
        let sched = on(sl >= 3)
            .map(|_| {
                let k = abi::SWIMLANE_KIND_SCHED_PHASE;
                lay.sub(2, k, per_sched.clone(), 4096, &mut g.sched, a2)
            })
            .transpose()?;
        let orch_s = on(sl >= 4)
            .map(|_| lay.sub(3, abi::SWIMLANE_KIND_ORCH_PHASE, orch.clone(), 4096, &mut g.orch, a3))
            .transpose()?;
        let pmu = on(opts.pmu > 0)
            .map(|_| lay.sub(4, 0, per_core.clone(), abi::PMU_RECORDS_PER_BUFFER, &mut g.pmu, a4))
            .transpose()?;
        let dep_gen = on(opts.dep_gen)
            .map(|_| lay.sub(5, 0, orch.clone(), 64, &mut g.dep_gen, a5))
            .transpose()?;
        let scope = on(opts.scope_stats)
            .map(|_| {
                let rpb = abi::SCOPE_STATS_RECORDS_PER_BUFFER;
                lay.sub(6, 0, orch.clone(), rpb, &mut g.scope, a6)
            })
            .transpose()?;
        let mut arenas = Vec::new();
        let mut arena_at = Vec::new();
        let args = if opts.dump_args > 0 {
            for _ in 0..scheds {
                let a = match &lay.device {
                    Some(d) => {
                        let total = ArgsArena::bytes_for(opts.arena_bytes);
                        let m = SimAlloc::new(d, total)?;
                        arena_at.push((m.ptr.0, total));
                        let p = m.device_ptr();
                        // SAFETY: `p` is the 64-byte aligned start of `total` bytes the `SimAlloc`
                        // owner keeps alive; host and device touch them only atomically. The
                        // host reads the device view: the payload copy stands for the arena's
                        // DMA read.
                        unsafe { ArgsArena::from_raw_parts(p, total, m) }
                    }
                    None => ArgsArena::new(opts.arena_bytes),
                };
                arenas.push(Arc::new(a));
            }
            let queues: Vec<u32> = (0..scheds).collect();
            let (t, a) =
                lay.build::<ArgsDumpRecord>(7, 0, &queues, abi::ARGS_DUMP_RECORDS_PER_BUFFER)?;
            *a7 = a;
            g.args = Some(t.device_region());
            let consumed: Arc<Vec<AtomicU64>> =
                Arc::new((0..scheds).map(|_| AtomicU64::new(0)).collect());
            let (a2, c2) = (arenas.clone(), consumed.clone());
            let prof = t.start_with_hooks(
                move |_| ArgsSink { arenas: a2.clone(), consumed: c2.clone(), bufs: Vec::new() },
                ArgsAcks { arenas: arenas.clone(), consumed },
            );
            Some(Sub { prof, ids: per_sched.clone() })
        } else {
            None
        };
        let mut dirs = Vec::new();
        let profiling = match &lay.device {
            Some(d) => {
                let mut write = |level: u32, entries: Vec<(u64, u64)>| -> Result<u64, DfxError> {
                    let dir = DfxDirectory { level, threads, aic: chip.aic, entries };
                    let bytes = dir.encode();
                    let m = SimAlloc::new(d, bytes.len() as u64)?;
                    d.copy_htod(&bytes, m.ptr).map_err(|e| DfxError::Setup(e.to_string()))?;
                    let addr = m.ptr.0;
                    dirs.push(m);
                    Ok(addr)
                };
                let mut p = DfxProfiling::default();
                if sl > 0 {
                    p.chip_swimlane_data_base = write(sl, at[..4].to_vec())?;
                    p.flags |= PROFILING_FLAG_CHIP_SWIMLANE;
                }
                if opts.pmu > 0 {
                    p.pmu_data_base = write(opts.pmu, vec![at[4]])?;
                    p.flags |= PROFILING_FLAG_PMU;
                }
                if opts.dep_gen {
                    p.dep_gen_data_base = write(1, vec![at[5]])?;
                    p.flags |= PROFILING_FLAG_DEP_GEN;
                }
                if opts.scope_stats {
                    p.scope_stats_data_base = write(1, vec![at[6]])?;
                    p.flags |= PROFILING_FLAG_SCOPE_STATS;
                }
                if opts.dump_args > 0 {
                    let mut e = vec![at[7]];
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
            regions: g,
            arenas,
        });
        Ok(DfxSession {
            opts: *opts,
            chip,
            device,
            profiling,
            _dirs: dirs,
            _bells: lay.bells.into_inner().unwrap_or_else(|p| p.into_inner()),
            aicore,
            aicpu,
            sched,
            orch: orch_s,
            pmu,
            dep_gen,
            scope,
            args,
        })
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

    /// Stops every transport (after the run's AICPU threads returned), reconciles, builds and
    /// checks the model.
    ///
    /// # Errors
    /// [`DfxError::Collect`] for records that do not decode, [`DfxError::Deps`] when the DepGen
    /// graph disagrees with the runtime's dependencies.
    pub fn finish(self) -> Result<RunModel, DfxError> {
        let c = self.chip;
        let w = c.aic + c.aiv;
        let core_types =
            (0..w).map(|i| if i < c.aic { CoreType::Aic } else { CoreType::Aiv }).collect();
        let mut meta = RunMeta::new(c.arch.name(), c.arch.profile().clock_hz, core_types);
        let scheds = c.threads.max(2) - 1;
        meta.core_to_thread = (0..w).map(|i| (cluster_of(i, c.aic) % scheds) as i32).collect();
        let mut m = RunModel::new(meta);
        m.kernels = crate::device::kernels::KERNELS
            .iter()
            .map(|k| (k.id as i32, k.name.to_string()))
            .collect();
        let budget = match self.opts.policy {
            Policy::Block => c.arch.profile().dfx_backpressure_budget_cycles,
            Policy::Drop => self.opts.drop_wait_cycles.unwrap_or(c.arch.profile().clock_hz / 1000),
        };
        m.loss = LossAccounting {
            policy: self.opts.policy.into(),
            budget_cycles: budget,
            lanes: Vec::new(),
        };
        let bad = |e: &dyn std::fmt::Display| DfxError::Collect(e.to_string());

        if self.opts.swimlane > 0 {
            m.swimlane = Some(Swimlane::new(self.opts.swimlane));
        }
        if let Some(s) = self.aicore {
            let (lanes, loss) = stop(s, Subsystem::ChipSwimlane, "aicore");
            m.loss.lanes.extend(loss);
            let sw = m.swimlane.get_or_insert_with(|| Swimlane::new(1));
            for (lane, recs) in lanes {
                collect::add_aicore_records(sw, lane, &recs);
            }
        }
        if let Some(s) = self.aicpu {
            let (lanes, loss) = stop(s, Subsystem::ChipSwimlane, "aicpu");
            m.loss.lanes.extend(loss);
            let sw = m.swimlane.get_or_insert_with(|| Swimlane::new(2));
            for (lane, recs) in lanes {
                collect::add_aicpu_records(sw, lane, &recs);
            }
        }
        if let Some(s) = self.sched {
            let (lanes, loss) = stop(s, Subsystem::ChipSwimlane, "sched");
            m.loss.lanes.extend(loss);
            let sw = m.swimlane.get_or_insert_with(|| Swimlane::new(3));
            for (lane, recs) in lanes {
                collect::add_sched_records(sw, lane, &recs).map_err(|e| bad(&e))?;
            }
        }
        if let Some(s) = self.orch {
            let (lanes, loss) = stop(s, Subsystem::ChipSwimlane, "orch");
            m.loss.lanes.extend(loss);
            let sw = m.swimlane.get_or_insert_with(|| Swimlane::new(4));
            for recs in lanes.into_values() {
                collect::add_orch_records(sw, 0, &recs);
            }
        }
        if let Some(s) = self.pmu {
            let (lanes, loss) = stop(s, Subsystem::Pmu, "pmu");
            m.loss.lanes.extend(loss);
            let mut t = PmuTable::new(c.arch.name(), self.opts.pmu);
            for (lane, recs) in lanes {
                let thread = cluster_of(lane, c.aic) % scheds;
                collect::add_pmu_records(&mut t, thread, lane, &recs).map_err(|e| bad(&e))?;
            }
            t.rows.sort_by_key(|r| r.task_id);
            m.pmu = Some(t);
        }
        if let Some(s) = self.scope {
            let (lanes, loss) = stop(s, Subsystem::ScopeStats, "scope");
            let mut st = ScopeStats {
                total: loss.iter().map(|l| l.produced).sum(),
                dropped: loss.iter().map(|l| l.dropped).sum(),
                task_window_max: [i64::from(c.task_window); abi::SCOPE_RINGS],
                heap_max: [c.scratch_bytes; abi::SCOPE_RINGS],
                dep_pool_max: [i64::from(c.task_window) * 16; abi::SCOPE_RINGS],
                tensormap_max: i64::from(c.task_window) * 64,
                ..ScopeStats::default()
            };
            m.loss.lanes.extend(loss);
            for recs in lanes.into_values() {
                collect::add_scope_records(&mut st, &recs).map_err(|e| bad(&e))?;
            }
            m.scopes = Some(st);
        }
        if let Some(s) = self.args {
            let report = s.prof.stop();
            let loss = loss_lines(&report, &s.ids, Subsystem::ArgsDump, "args");
            let mut d = ArgsDump { level: self.opts.dump_args, ..ArgsDump::default() };
            let mut bufs: Vec<(u32, u32, Vec<ArgsItem>)> =
                report.sinks.into_iter().flat_map(|k| k.bufs).collect();
            bufs.sort_by_key(|b| (b.0, b.1));
            for (_, _, items) in bufs {
                for (r, payload, overwritten) in items {
                    let mut a = DumpedArg::from_record(&r).map_err(|e| bad(&e))?;
                    if overwritten {
                        a.overwritten = true;
                        d.dropped_overwrite += 1;
                    }
                    d.push(a, payload.as_deref());
                }
            }
            d.dropped_records = loss.iter().map(|l| l.dropped).sum::<u64>()
                + self
                    .device
                    .arenas
                    .iter()
                    // Relaxed: device counters read after the run (the join orders them).
                    .map(|a| a.dropped().load(Ordering::Relaxed))
                    .sum::<u64>();
            m.loss.lanes.extend(loss);
            m.args = Some(d);
        }
        if let Some(s) = self.dep_gen {
            let (lanes, loss) = stop(s, Subsystem::DepGen, "dep_gen");
            let lossless = loss.iter().all(|l| l.dropped == 0);
            m.loss.lanes.extend(loss);
            let mut recs: Vec<DepGenRecord> = lanes.into_values().flatten().collect();
            if !lossless {
                recs = whole_tasks(recs);
            }
            let g = deps_graph(&recs)?;
            check_deps(&g, &recs, lossless, m.swimlane.as_ref())?;
            m.deps = Some(g);
        }
        Ok(m)
    }
}

fn loss_lines<R: Record, S: CollectSink<R>>(
    report: &RunReport<S>,
    ids: &LaneIds,
    sub: Subsystem,
    name: &str,
) -> Vec<LaneLoss> {
    report
        .lanes
        .iter()
        .map(|r| {
            let (thread, core) = ids.get(r.lane as usize).copied().unwrap_or((0, None));
            let label = match core {
                Some(c) => format!("{name} core {c}"),
                None => format!("{name} thread {thread}"),
            };
            LaneLoss::from_reconcile(r, sub, label, thread, core)
        })
        .collect()
}

fn stop<R: Record>(
    s: Sub<R>,
    sub: Subsystem,
    name: &str,
) -> (BTreeMap<u32, Vec<R>>, Vec<LaneLoss>) {
    let report = s.prof.stop();
    let loss = loss_lines(&report, &s.ids, sub, name);
    (LaneRecords::merge(report.sinks), loss)
}

/// Keeps only tasks whose overflow records all survived a lossy (Drop) collection.
fn whole_tasks(recs: Vec<DepGenRecord>) -> Vec<DepGenRecord> {
    let mut out = Vec::with_capacity(recs.len());
    let mut pending: Vec<DepGenRecord> = Vec::new();
    for r in recs {
        let overflow = r.flags & abi::DEP_GEN_FLAG_OVERFLOW != 0;
        match (overflow, pending.first()) {
            (true, Some(head)) if head.task_id == r.task_id => {
                let last = r.flags & abi::DEP_GEN_FLAG_LAST_OVERFLOW != 0;
                pending.push(r);
                if last {
                    out.append(&mut pending);
                }
            }
            (true, _) => pending.clear(),
            (false, _) => {
                pending.clear();
                if r.flags & abi::DEP_GEN_FLAG_HAS_OVERFLOW != 0 {
                    pending.push(r);
                } else {
                    out.push(r);
                }
            }
        }
    }
    out
}

/// The DepGen graph: tasks with their tensor arguments, tensors (a version per producer), and
/// the runtime's dependency edges, each labelled by a host replay of the tensor map
/// (`tensormap`, or `creator` when the producer wrote the whole buffer the consumer reads) or
/// `explicit` (declared with `after`).
fn deps_graph(recs: &[DepGenRecord]) -> Result<DepsGraph, DfxError> {
    let versions: Mutex<HashMap<u64, u32>> = Mutex::new(HashMap::new());
    let mut g = DepsGraph::default();
    let mut tensors: BTreeMap<u64, DepTensor> = BTreeMap::new();
    // Args in task order: reads see the current version, writes bump it.
    let decode = |i: u32, role: u8, blob: &[u8; abi::DEP_GEN_TENSOR_BYTES]| {
        let (addr, bytes) = decode_tensor_blob(blob);
        let mut v = versions.lock().unwrap_or_else(|p| p.into_inner());
        let ver = v.entry(addr).or_insert(0);
        if role != abi::ARG_ROLE_INPUT {
            *ver += 1;
        }
        let id = ferry_dfx::output::tensor_id(addr, *ver);
        (
            DepArg {
                idx: i,
                role: abi::role_name(role).unwrap_or("INPUT").to_string(),
                tensor_id: Some(id),
                dtype: "FLOAT32".into(),
                shape: vec![bytes / 4],
                start_offset: 0,
                strides: vec![1],
            },
            DepTensor {
                tensor_id: id,
                buffer_addr: addr,
                version: *ver,
                dtype: "FLOAT32".into(),
                buffer_numel: bytes / 4,
            },
        )
    };
    let mut edges = Vec::new();
    for r in recs {
        if r.flags & abi::DEP_GEN_FLAG_OVERFLOW != 0 {
            continue;
        }
        let n = usize::from(r.tensor_count).min(abi::DEP_GEN_MAX_TENSORS);
        for i in 0..n {
            let (_, t) = decode(i as u32, r.arg_types[i], &r.tensors[i]);
            tensors.entry(t.tensor_id).or_insert(t);
        }
    }
    versions.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let tensor_arg = |i: u32, blob: &[u8; abi::DEP_GEN_TENSOR_BYTES]| -> Option<DepArg> {
        // The role is not in the blob; `add_dep_gen_records` passes args in order, so the
        // arg types of the current record are looked up by the caller below.
        let _ = (i, blob);
        None
    };
    collect::add_dep_gen_records(&mut g, recs, &tensor_arg)
        .map_err(|e| DfxError::Collect(e.to_string()))?;
    for (t, r) in
        g.tasks.iter_mut().zip(recs.iter().filter(|r| r.flags & abi::DEP_GEN_FLAG_OVERFLOW == 0))
    {
        let n = usize::from(r.tensor_count).min(abi::DEP_GEN_MAX_TENSORS);
        t.args = (0..n).map(|i| decode(i as u32, r.arg_types[i], &r.tensors[i]).0).collect();
    }
    // Label the runtime's edges by a replay of the tensor map over every task (none finished).
    let mut map = TensorMap::new();
    let mut found = Vec::new();
    for r in recs.iter().filter(|r| r.flags & abi::DEP_GEN_FLAG_OVERFLOW == 0) {
        let mut deps = Vec::new();
        for i in 0..usize::from(r.tensor_count).min(abi::DEP_GEN_MAX_TENSORS) {
            let (addr, bytes) = decode_tensor_blob(&r.tensors[i]);
            let write = r.arg_types[i] != abi::ARG_ROLE_INPUT;
            map.access(r.task_id, addr, addr + bytes, write, &mut deps, &mut |_| true);
        }
        found.extend(deps.into_iter().map(|p| (p, r.task_id)));
    }
    let replay: BTreeSet<(u64, u64)> = found.into_iter().collect();
    for e in g.edges.drain(..) {
        let mut e: DepEdge = e;
        if replay.contains(&(e.pred, e.succ)) {
            e.source = EdgeSource::Tensormap;
        }
        edges.push(e);
    }
    g.edges = edges;
    g.tensors = tensors.into_values().collect();
    Ok(g)
}

/// Checks the DepGen graph against the runtime before `deps.json` is written: every edge joins
/// two recorded tasks in submission order, no edge repeats, every non-explicit edge is one the
/// tensor map implies, and — with the swimlane on — every predecessor's last block ended before
/// its successor's first block started (the runtime really waited for it).
fn check_deps(
    g: &DepsGraph,
    recs: &[DepGenRecord],
    lossless: bool,
    sw: Option<&Swimlane>,
) -> Result<(), DfxError> {
    let tasks: BTreeSet<u64> = g.tasks.iter().map(|t| t.task_id).collect();
    let declared: usize = recs
        .iter()
        .filter(|r| r.flags & abi::DEP_GEN_FLAG_OVERFLOW == 0)
        .map(|r| usize::from(r.explicit_dep_count))
        .sum();
    if g.edges.len() != declared {
        return Err(DfxError::Deps(format!(
            "{} edges decoded, the runtime installed {declared}",
            g.edges.len()
        )));
    }
    let mut seen = BTreeSet::new();
    for e in &g.edges {
        if e.pred >= e.succ || (lossless && !tasks.contains(&e.pred)) {
            return Err(DfxError::Deps(format!(
                "edge {} -> {} is not a forward edge",
                e.pred, e.succ
            )));
        }
        if !seen.insert((e.pred, e.succ)) {
            return Err(DfxError::Deps(format!("edge {} -> {} repeats", e.pred, e.succ)));
        }
    }
    if let Some(sw) = sw {
        let mut span: HashMap<u64, (u64, u64)> = HashMap::new();
        for t in &sw.aicore_tasks {
            let s = span.entry(t.task_token_raw).or_insert((u64::MAX, 0));
            s.0 = s.0.min(t.start);
            s.1 = s.1.max(t.end);
        }
        for e in &g.edges {
            if let (Some(p), Some(s)) = (span.get(&e.pred), span.get(&e.succ)) {
                if p.1 > s.0 {
                    return Err(DfxError::Deps(format!(
                        "task {} started at {} before its predecessor {} ended at {}",
                        e.succ, s.0, e.pred, p.1
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Host memory a replayed kernel runs on: buffer `i` lives at device address `(i + 1) << 32`.
struct HostBuffers {
    bufs: Vec<Box<[u32]>>,
}

// SAFETY: `translate` returns pointers into the boxed buffers, which live as long as `self` and
// are only touched through `F32Slice`'s atomic accesses; the other methods never touch memory.
unsafe impl DeviceOps for HostBuffers {
    fn translate(&self, addr: u64, len: u64) -> Result<*mut u8, TranslateError> {
        let i = (addr >> 32) as usize;
        let off = addr & 0xffff_ffff;
        let err = |reason: &str| TranslateError { addr, len, reason: reason.into() };
        let b = i.checked_sub(1).and_then(|i| self.bufs.get(i)).ok_or_else(|| err("no buffer"))?;
        if off + len > b.len() as u64 * 4 {
            return Err(err("out of bounds"));
        }
        Ok(b.as_ptr().cast::<u8>().wrapping_add(off as usize).cast_mut())
    }
    fn reg_read(&self, _: u64, _: u32) -> u32 {
        0
    }
    fn reg_write_aicpu(&self, _: u64, _: u32, _: u32) {}
    fn reg_write_core(&self, _: u64, _: u32, _: u32) {}
    fn core_wait(
        &self,
        _: u64,
        _: u32,
        _: &mut dyn FnMut(u32) -> bool,
        _: Option<std::time::Duration>,
    ) -> Option<u32> {
        None
    }
    fn aicpu_wait(&self, _: &mut dyn FnMut() -> bool, _: Option<std::time::Duration>) -> bool {
        false
    }
    fn notify_aicpu(&self) {}
    fn clock_cycles(&self) -> u64 {
        0
    }
    fn clock_hz(&self) -> u64 {
        1
    }
}

/// One argument of a replayed task.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayArg {
    /// Argument index.
    pub index: u32,
    /// Elements the dump holds after completion.
    pub dumped: Vec<f32>,
    /// Elements the replay computed.
    pub replayed: Vec<f32>,
}

impl ReplayArg {
    /// Whether the replay reproduced the dumped output bit for bit.
    pub fn matches(&self) -> bool {
        self.dumped.len() == self.replayed.len()
            && self.dumped.iter().zip(&self.replayed).all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

/// Why a task could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The dump has no such task, or lacks a payload the kernel needs.
    #[error("task {task}: {what}")]
    Missing {
        /// Task id.
        task: u64,
        /// What is missing.
        what: String,
    },
    /// The kernel failed on the dumped inputs.
    #[error("task {task}: kernel failed: {fault}")]
    Kernel {
        /// Task id.
        task: u64,
        /// The fault.
        fault: crate::error::KernelFault,
    },
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Replays task `task` from a level ≥ 1 args dump: rebuilds its arguments from the
/// before-dispatch payloads (outputs start zeroed), runs its kernel over every block on the host,
/// and returns each after-completion argument with what the replay computed.
///
/// # Errors
/// [`ReplayError`] when the dump lacks the task or a payload, or the kernel fails.
pub fn replay_task(d: &ArgsDump, task: u64) -> Result<Vec<ReplayArg>, ReplayError> {
    let missing = |what: &str| ReplayError::Missing { task, what: what.into() };
    let args: Vec<&DumpedArg> = d.args.iter().filter(|a| a.task_id == task).collect();
    if args.is_empty() {
        return Err(missing("not in the dump"));
    }
    let kernel = args[0]
        .func_id
        .first()
        .copied()
        .filter(|&f| f >= 0)
        .ok_or_else(|| missing("no kernel id"))?;
    let tensor_count =
        args.iter().filter(|a| a.kind == "tensor").map(|a| a.arg_index + 1).max().unwrap_or(0);
    let mut scalars: Vec<(u32, u64)> = args
        .iter()
        .filter(|a| a.kind == "scalar")
        .map(|a| (a.arg_index, a.value.unwrap_or(0)))
        .collect();
    scalars.sort_unstable();
    let mut bufs: Vec<Box<[u32]>> = Vec::new();
    for i in 0..tensor_count {
        let find = |stage: &str| {
            args.iter().find(|a| a.kind == "tensor" && a.arg_index == i && a.stage == stage)
        };
        let before = find("before_dispatch");
        let after = find("after_completion");
        let numel = before.or(after).map_or(0, |a| a.numel) as usize;
        let words: Box<[u32]> = match before {
            Some(a) => {
                let p = d.payload(a).ok_or_else(|| missing(&format!("payload of input {i}")))?;
                floats(p).into_iter().map(f32::to_bits).collect()
            }
            None => vec![0u32; numel].into(),
        };
        bufs.push(words);
    }
    let ops = HostBuffers { bufs };
    let slices: Vec<crate::device::image::F32Slice> = (0..tensor_count as usize)
        .map(|i| {
            crate::device::image::F32Slice::new(
                &ops,
                ((i as u64) + 1) << 32,
                ops.bufs[i].len() as u64 * 4,
            )
            .map_err(|e| missing(&e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    let sc: Vec<u64> = scalars.iter().map(|s| s.1).collect();
    crate::device::kernels::execute(&crate::device::kernels::KernelCall {
        kernel: kernel as u32,
        tensors: &slices,
        scalars: &sc,
        block_idx: 0,
        block_dim: 1,
    })
    .map_err(|fault| ReplayError::Kernel { task, fault })?;
    let mut out = Vec::new();
    for a in args.iter().filter(|a| a.kind == "tensor" && a.stage == "after_completion") {
        let p =
            d.payload(a).ok_or_else(|| missing(&format!("payload of output {}", a.arg_index)))?;
        let s = &slices[a.arg_index as usize];
        out.push(ReplayArg {
            index: a.arg_index,
            dumped: floats(p),
            replayed: (0..s.len()).map(|k| s.get(k)).collect(),
        });
    }
    Ok(out)
}

/// One row of [`subsystem_costs`]: a DFX configuration and the storm's throughput with it.
#[derive(Clone, Debug, PartialEq)]
pub struct CostRow {
    /// What was on (`off`, `swimlane=1` … `swimlane=4`, `pmu`, `dep_gen`, `dump_args=3`,
    /// `scope_stats`, `all`).
    pub config: String,
    /// Tasks per second (median of the rounds).
    pub tasks_per_s: f64,
    /// `tasks_per_s` over the DFX-off figure.
    pub ratio: f64,
    /// Records the run produced (all subsystems).
    pub records: u64,
    /// Records dropped (0 under Block).
    pub dropped: u64,
}

/// The configurations [`subsystem_costs`] measures, in order (the first is DFX off).
pub fn cost_configs() -> Vec<(String, DfxOptions)> {
    let base = DfxOptions::default();
    let mut v = vec![("off".to_string(), base)];
    for l in 1..=4 {
        v.push((format!("swimlane={l}"), DfxOptions { swimlane: l, ..base }));
    }
    v.push(("pmu".into(), DfxOptions { pmu: 2, ..base }));
    v.push(("dep_gen".into(), DfxOptions { dep_gen: true, ..base }));
    v.push(("dump_args=3".into(), DfxOptions { dump_args: 3, ..base }));
    v.push(("scope_stats".into(), DfxOptions { scope_stats: true, ..base }));
    v.push(("all".into(), DfxOptions::all()));
    v
}

/// What each DFX subsystem costs the storm example: tasks/s on a default-sized chip (in-process
/// path) with DFX off and with each subsystem / swimlane level on, as ratios against off. Runs
/// `repeats` rounds of every configuration in turn and takes each one's median (the 2-core
/// development machine schedules some 40 threads, so single runs vary by 2-3x). `size` picks the
/// storm (`Full`: 50,000 tasks).
///
/// # Errors
/// A run or a collection that failed.
pub fn subsystem_costs(
    arch: Arch,
    size: crate::examples::Size,
    repeats: u32,
) -> Result<Vec<CostRow>, Box<dyn std::error::Error + Send + Sync>> {
    use super::{DeviceRunner, RunnerConfig};
    let cfg = RunnerConfig::default_for(arch).in_process();
    let mut r = DeviceRunner::new(cfg)?;
    let run = crate::examples::Example::Storm.build(size);
    r.register_callable(1, run.callable.clone())?;
    let chip = DfxChip {
        arch,
        threads: cfg.aicpu_threads,
        aic: cfg.aic,
        aiv: cfg.aiv,
        task_window: cfg.task_window,
        scratch_bytes: run.args.scratch_bytes,
    };
    // Warm-up.
    r.run(1, run.args.clone())?;
    // Rounds: every configuration once per round, so machine noise spreads over all of them.
    let configs = cost_configs();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    let mut counts = vec![(0u64, 0u64); configs.len()];
    for _ in 0..repeats.max(1) {
        for (k, (_, opts)) in configs.iter().enumerate() {
            let s = if opts.any() {
                Some(DfxSession::start(opts, chip, r.device().clock())?)
            } else {
                None
            };
            r.attach_dfx(s.as_ref().map(DfxSession::device));
            let out = r.run(1, run.args.clone());
            r.attach_dfx(None);
            let out = out?;
            run.verify(&out)?;
            samples[k].push(out.stats.tasks as f64 / out.stats.wall.as_secs_f64());
            if let Some(s) = s {
                let m = s.finish()?;
                let (p, _, d) = m.loss.totals();
                counts[k] = (p, d);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let meds: Vec<f64> = samples.iter_mut().map(median).collect();
    let rows = configs
        .into_iter()
        .zip(meds.iter().zip(counts))
        .map(|((config, _), (&tps, (records, dropped)))| CostRow {
            config,
            tasks_per_s: tps,
            ratio: tps / meds[0],
            records,
            dropped,
        })
        .collect();
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_abi::launch::AbiRecord;

    fn task(id: u64, preds: &[u64]) -> DepGenRecord {
        let mut r = DepGenRecord {
            task_id: id,
            explicit_dep_count: preds.len() as u16,
            kernel_id: [-1, 0, -1],
            block_num: 1,
            ..Default::default()
        };
        let n = preds.len().min(abi::DEP_GEN_INLINE_DEPS);
        r.explicit_deps[..n].copy_from_slice(&preds[..n]);
        if preds.len() > abi::DEP_GEN_INLINE_DEPS {
            r.flags |= abi::DEP_GEN_FLAG_HAS_OVERFLOW;
        }
        r
    }

    fn overflow(id: u64, deps: &[u64]) -> DepGenRecord {
        let mut o = abi::DepGenOverflowRecord {
            task_id: id,
            flags: abi::DEP_GEN_FLAG_OVERFLOW | abi::DEP_GEN_FLAG_LAST_OVERFLOW,
            dep_count: deps.len() as u16,
            reserved: 0,
            deps: [0; abi::DEP_GEN_OVERFLOW_DEPS],
        };
        o.deps[..deps.len()].copy_from_slice(deps);
        DepGenRecord::from_bytes(o.as_bytes()).unwrap()
    }

    #[test]
    fn overflowing_dependency_lists_become_edges_and_lossy_runs_keep_whole_tasks_only() {
        let many: Vec<u64> = (0..70).collect();
        let recs: Vec<DepGenRecord> = (0..70)
            .map(|i| task(i, &[]))
            .chain([task(70, &many), overflow(70, &many[64..])])
            .collect();
        let g = deps_graph(&recs).unwrap();
        assert_eq!(g.edges.len(), 70);
        check_deps(&g, &recs, true, None).unwrap();
        // Drop lost task 70's overflow record: the task goes, the rest stays.
        let lossy = whole_tasks(recs[..71].to_vec());
        assert_eq!(lossy.len(), 70);
        // An orphan overflow record (its task record was dropped) goes too.
        let orphan = whole_tasks(vec![task(1, &[0]), overflow(2, &[1])]);
        assert_eq!(orphan.len(), 1);
        // A backward edge is refused before deps.json is written.
        let bad = vec![task(0, &[]), task(1, &[]), task(2, &[1]), task(3, &[5])];
        let g = deps_graph(&bad).unwrap();
        assert!(matches!(check_deps(&g, &bad, true, None), Err(DfxError::Deps(_))));
    }

    #[test]
    fn replay_of_a_missing_task_is_an_error() {
        let d = ArgsDump::default();
        assert!(matches!(replay_task(&d, 7), Err(ReplayError::Missing { task: 7, .. })));
    }
}

#[cfg(test)]
mod replay_tests {
    use super::*;
    use ferry_abi::records::{ArgsDumpRecord, DType};

    fn tensor(stage: u8, role: u8, index: u32) -> DumpedArg {
        let mut r = ArgsDumpRecord {
            task_id: 9,
            role,
            stage,
            ndims: 1,
            arg_index: index,
            dtype: DType::Float32 as u8,
            is_contiguous: 1,
            kind: abi::ARG_KIND_TENSOR,
            func_count: 1,
            ..Default::default()
        };
        r.func_ids[0] = crate::device::kernels::K_COPY as u16;
        r.shapes[0] = 2;
        r.strides[0] = 1;
        DumpedArg::from_record(&r).unwrap()
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_replay_reproduces_a_copy_and_flags_a_tampered_output() {
        let mut d = ArgsDump::default();
        d.push(
            tensor(abi::ARG_STAGE_BEFORE_DISPATCH, abi::ARG_ROLE_INPUT, 0),
            Some(&bytes(&[1.0, 2.0])),
        );
        d.push(
            tensor(abi::ARG_STAGE_AFTER_COMPLETION, abi::ARG_ROLE_OUTPUT, 1),
            Some(&bytes(&[1.0, 2.0])),
        );
        let r = replay_task(&d, 9).unwrap();
        assert_eq!(r.len(), 1);
        assert!(r[0].matches());
        // The same dump with a wrong output: the replay says so.
        let mut bad = ArgsDump::default();
        bad.push(
            tensor(abi::ARG_STAGE_BEFORE_DISPATCH, abi::ARG_ROLE_INPUT, 0),
            Some(&bytes(&[1.0, 2.0])),
        );
        bad.push(
            tensor(abi::ARG_STAGE_AFTER_COMPLETION, abi::ARG_ROLE_OUTPUT, 1),
            Some(&bytes(&[1.0, 3.0])),
        );
        let r = replay_task(&bad, 9).unwrap();
        assert!(!r[0].matches());
        assert_eq!(r[0].replayed, vec![1.0, 2.0]);
        // An input without its payload (metadata-only dump) cannot be replayed.
        let mut meta = ArgsDump::default();
        meta.push(tensor(abi::ARG_STAGE_BEFORE_DISPATCH, abi::ARG_ROLE_INPUT, 0), None);
        assert!(matches!(replay_task(&meta, 9), Err(ReplayError::Missing { .. })));
    }
}
