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
//! | ArgsDump | one per scheduler | scheduler | before dispatch (block 0), after completion |
//!
//! ArgsDump payloads go to a per-scheduler-thread [`ArgsArena`] guarded by the arena gate of
//! `specs/dfx.md` §3.10: before a payload would wrap or straddle the arena, the thread seals its
//! metadata buffer and waits (one budget) until the host has acknowledged every payload it
//! published (`publish_arena_acks`, seed 000); on timeout the argument record is dropped and
//! counted.
use super::ops::DeviceOps;
use super::task::{ResolvedTask, Role};
use ferry_abi::dep_gen::{self, DepGenHead, DepGenTensor};
use ferry_abi::records::{
    AicoreTaskRecord, AicpuTaskRecord, ArgsDumpRecord, DType, OrchPhaseRecord, PmuRecord,
    SchedPhaseRecord, ScopeStatsRecord, ARG_KIND_SCALAR, ARG_KIND_TENSOR, ARG_ROLE_INOUT,
    ARG_ROLE_INPUT, ARG_ROLE_OUTPUT, ARG_ROLE_SCALAR, ARG_STAGE_AFTER_COMPLETION,
    ARG_STAGE_BEFORE_DISPATCH, CORE_TYPE_AIC, CORE_TYPE_AIV, PMU_MAX_COUNTERS, SCOPE_PHASE_BEGIN,
    SCOPE_PHASE_END,
};
use ferry_dfx::{DeviceRegion, DeviceWriter};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// [`super::image::RunBlock::dfx_flags`]: the swimlane is on (AICore timestamps).
pub const DFX_SWIMLANE: u32 = 1;
/// [`super::image::RunBlock::dfx_flags`]: some other subsystem is on.
pub const DFX_OTHER: u32 = 2;

/// A scheduler thread's ArgsDump payload arena: a 64-byte header of four counters, then the
/// payload bytes. On the full path it lives in simulated device memory (its device address
/// travels in the ArgsDump directory behind `KernelArgs::dump_data_base`); in process it may be a
/// host block shared by reference.
///
/// Header words: `write_offset` (monotonic device cursor in bytes, written modulo
/// [`size`](Self::size)), `published` (payload records the device has published), `completed`
/// (payloads the host acknowledged, `publish_arena_acks`), `dropped` (argument records the arena
/// gate gave up on).
pub struct ArgsArena {
    base: std::ptr::NonNull<u8>,
    size: u64,
    _owner: Arc<dyn Send + Sync>,
}

impl std::fmt::Debug for ArgsArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgsArena").field("size", &self.size).finish_non_exhaustive()
    }
}

// SAFETY: every concurrent access to the arena's header goes through atomics; its payload bytes
// are written (`write_from`) and read (`read_into`) with plain copies only while no other thread
// touches them, which the arena protocol orders; the owner keeps the memory alive.
unsafe impl Send for ArgsArena {}
// SAFETY: as for `Send`.
unsafe impl Sync for ArgsArena {}

impl ArgsArena {
    /// Bytes of the counter header in front of the payload bytes.
    pub const HEADER_BYTES: u64 = 64;

    /// Bytes of memory an arena of `bytes` payload bytes needs (header included).
    pub fn bytes_for(bytes: u64) -> u64 {
        Self::HEADER_BYTES + (bytes / 4).max(16) * 4
    }

    /// An arena of `bytes` bytes (rounded down to whole words, at least 64) in host memory.
    pub fn new(bytes: u64) -> ArgsArena {
        let total = Self::bytes_for(bytes);
        let words: Box<[AtomicU64]> = (0..total.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        let base = std::ptr::NonNull::from(&words[0]).cast::<u8>();
        ArgsArena { base, size: total - Self::HEADER_BYTES, _owner: Arc::new(words) }
    }

    /// An arena over `total` bytes of memory someone else owns (header included).
    ///
    /// # Safety
    /// `base` is 8-byte aligned and valid for reads and writes of `total` bytes while `owner`
    /// (or the party that allocated it) keeps it alive, i.e. for as long as this arena is used;
    /// every other access to those bytes is atomic.
    pub unsafe fn from_raw_parts(
        base: std::ptr::NonNull<u8>,
        total: u64,
        owner: Arc<dyn Send + Sync>,
    ) -> ArgsArena {
        let size = (total.saturating_sub(Self::HEADER_BYTES) / 4) * 4;
        ArgsArena { base, size, _owner: owner }
    }

    fn counter(&self, i: usize) -> &AtomicU64 {
        // SAFETY: the header holds four 8-aligned u64 words inside the live allocation
        // (constructors' contracts), only ever accessed atomically.
        unsafe { &*self.base.as_ptr().add(8 * i).cast::<AtomicU64>() }
    }

    /// Monotonic write cursor in bytes (device-written).
    pub fn write_offset(&self) -> &AtomicU64 {
        self.counter(0)
    }

    /// Payload-bearing records published so far (device-written).
    pub fn published(&self) -> &AtomicU64 {
        self.counter(1)
    }

    /// Payloads the host has copied out (host-written by the ack hook).
    pub fn completed(&self) -> &AtomicU64 {
        self.counter(2)
    }

    /// Argument records dropped at the arena gate.
    pub fn dropped(&self) -> &AtomicU64 {
        self.counter(3)
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Hands the `len` bytes at physical offset `phys` (word-aligned) of the arena to `out` as
    /// one slice, for one bulk copy; bytes past the arena's end are left out.
    ///
    /// # Safety
    /// No thread writes those bytes during the call. The arena protocol provides that for a
    /// payload whose record was published (the device wrote the bytes before the ready-queue
    /// tail's Release store the host observed) and that the host has not yet acknowledged: the
    /// device overwrites a lap only after its arena gate saw every payload acknowledged.
    pub unsafe fn read_into(&self, phys: u64, len: u64, out: impl FnOnce(&[u8])) {
        let start = phys.min(self.size) & !3;
        let n = (len & !3).min(self.size - start) as usize;
        // SAFETY: `[start, start + n)` lies inside the payload bytes behind the header (bounded
        // above), which the owner keeps alive; nobody writes them meanwhile (the caller).
        let src = unsafe {
            std::slice::from_raw_parts(
                self.base.as_ptr().add(Self::HEADER_BYTES as usize + start as usize),
                n,
            )
        };
        out(src);
    }

    /// Copies `len` bytes from `src` into the arena at physical offset `phys` with one bulk copy.
    ///
    /// # Safety
    /// `src` is valid for reads of `len` bytes that no thread writes during the call (a tensor
    /// view whose producers finished and whose consumers have not been released), and
    /// `[phys, phys + len)` lies inside the arena's payload bytes, which the host does not read
    /// until the record naming them is published.
    unsafe fn write_from(&self, phys: u64, src: *const u8, len: u64) {
        debug_assert!(phys + len <= self.size);
        // SAFETY: both ranges are valid (the caller; the arena bytes are inside the live
        // allocation behind the header) and belong to different allocations.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src,
                self.base.as_ptr().add(Self::HEADER_BYTES as usize + phys as usize),
                len as usize,
            )
        };
    }
}

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
            dep_scratch: match &g.dep_gen {
                Some(r) if r.lanes_of_queue(thread).len() == 1 => {
                    vec![0; (r.layout().records_per_buffer as usize).min(DEP_SCRATCH_WORDS)]
                }
                _ => Vec::new(),
            },
            scope: w(&g.scope, thread),
            args: w(&g.args, thread),
            arena: self.arenas.get(thread as usize).cloned(),
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

/// Magic of a DFX directory ("FDFX").
pub const DFX_DIR_MAGIC: u32 = 0x5846_4446;
/// Version of the DFX directory layout.
pub const DFX_DIR_VERSION: u32 = 1;
/// Bytes of a directory's header; `(addr, len)` pairs of u64 follow.
pub const DFX_DIR_HEADER: usize = 32;
/// Most entries a directory may hold.
pub const DFX_DIR_MAX_ENTRIES: u32 = 64;
/// [`DfxDirectory::flags`]: writers ring the host after each publish (the optional doorbell
/// hint; by default the host polls and nothing is signalled).
pub const DFX_DIR_FLAG_DOORBELL_HINT: u32 = 1;

/// What a `KernelArgs` profiling base points at on the full path: a small block of device memory
/// naming the subsystem's transport region(s) and, for ArgsDump, the payload arenas.
///
/// # Layout
/// Little-endian: `magic` u32 at 0 ([`DFX_DIR_MAGIC`]), `version` u32 at 4, `level` u32 at 8
/// (swimlane level, PMU event type, ArgsDump level; 1 for DepGen / ScopeStats), `count` u32 at 12,
/// `threads` u32 at 16 (AICPU threads, last = orchestrator), `aic` u32 at 20, `flags` u32 at 24
/// (`DFX_DIR_FLAG_*`), 4 reserved bytes, then `count` entries of `addr` u64, `len` u64 (device
/// address and bytes; `addr` 0 = absent).
///
/// | base | entries |
/// |---|---|
/// | `chip_swimlane_data_base` | AICore task, AICPU task, scheduler phase, orchestrator phase regions |
/// | `pmu_data_base`, `dep_gen_data_base`, `scope_stats_data_base` | the subsystem's region |
/// | `dump_data_base` | the metadata region, then one [`ArgsArena`] per scheduler thread |
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DfxDirectory {
    /// Level / event type.
    pub level: u32,
    /// AICPU threads of the run.
    pub threads: u32,
    /// AIC workers.
    pub aic: u32,
    /// `DFX_DIR_FLAG_*` bits.
    pub flags: u32,
    /// `(device address, bytes)` of each region or arena.
    pub entries: Vec<(u64, u64)>,
}

impl DfxDirectory {
    /// Bytes of the encoded directory.
    pub fn encoded_len(&self) -> usize {
        DFX_DIR_HEADER + 16 * self.entries.len()
    }

    /// The directory's bytes as it lies in device memory.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.encoded_len());
        for w in [
            DFX_DIR_MAGIC,
            DFX_DIR_VERSION,
            self.level,
            self.entries.len() as u32,
            self.threads,
            self.aic,
            self.flags,
            0,
        ] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        for &(a, l) in &self.entries {
            b.extend_from_slice(&a.to_le_bytes());
            b.extend_from_slice(&l.to_le_bytes());
        }
        b
    }

    /// Reads the directory at device address `base` through `ops`.
    ///
    /// # Errors
    /// When the address does not translate or the bytes are not a directory of this version.
    pub fn read(ops: &dyn DeviceOps, base: u64) -> Result<DfxDirectory, String> {
        let read = |addr: u64, len: usize| -> Result<Vec<u8>, String> {
            let p = ops.translate(addr, len as u64).map_err(|e| e.to_string())?;
            let mut out = vec![0u8; len];
            // SAFETY: `translate` returned a pointer to `len` readable bytes of one live
            // allocation; the host wrote the directory before the launch (which orders it before
            // this thread started) and nobody writes it during the run.
            unsafe { std::ptr::copy_nonoverlapping(p.cast_const(), out.as_mut_ptr(), len) };
            Ok(out)
        };
        let h = read(base, DFX_DIR_HEADER)?;
        let u = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if u(&h, 0) != DFX_DIR_MAGIC || u(&h, 4) != DFX_DIR_VERSION {
            return Err(format!("no DFX directory at {base:#x}"));
        }
        let count = u(&h, 12);
        if count > DFX_DIR_MAX_ENTRIES {
            return Err(format!("DFX directory at {base:#x}: {count} entries"));
        }
        let e = read(base + DFX_DIR_HEADER as u64, 16 * count as usize)?;
        let q = |o: usize| u64::from_le_bytes(e[o..o + 8].try_into().unwrap_or([0; 8]));
        Ok(DfxDirectory {
            level: u(&h, 8),
            threads: u(&h, 16),
            aic: u(&h, 20),
            flags: u(&h, 24),
            entries: (0..count as usize).map(|i| (q(16 * i), q(16 * i + 8))).collect(),
        })
    }
}

/// A view of `len` bytes of device memory at `addr`, through `ops.translate`.
///
/// The view does not own the memory: the host keeps every DFX allocation alive until the run's
/// AICPU threads returned and the collection finished.
fn device_view(
    ops: &dyn DeviceOps,
    addr: u64,
    len: u64,
) -> Result<(std::ptr::NonNull<u8>, u64), String> {
    let p = ops.translate(addr, len).map_err(|e| e.to_string())?;
    let p = std::ptr::NonNull::new(p).ok_or_else(|| format!("{addr:#x} translated to null"))?;
    if p.as_ptr() as usize % 64 != 0 {
        return Err(format!("DFX memory at {addr:#x} is not 64-byte aligned"));
    }
    Ok((p, len))
}

fn attach_region(
    ops: &dyn DeviceOps,
    (addr, len): (u64, u64),
    clock: &Arc<dyn ferry_dfx::clock::CycleClock>,
    doorbell_hint: bool,
) -> Result<Option<DeviceRegion>, String> {
    if addr == 0 {
        return Ok(None);
    }
    let (p, len) = device_view(ops, addr, len)?;
    // SAFETY: `p` is 64-byte aligned (checked) and valid for `len` bytes of one live allocation
    // the host keeps until the run's AICPU threads returned (the only users of this view);
    // every access to it follows the DFX transport's protocol (atomics / single writer).
    let view = unsafe { ferry_dfx::mem::ShmRegion::from_raw_parts(p, len as usize, Arc::new(())) };
    let region = DeviceRegion::attach(view, addr, clock.clone()).map_err(|e| e.to_string())?;
    // By default nothing signals the host (it polls its queues, as on hardware). With the
    // optional doorbell hint, a buffer switch rings the host's drain shard through the OS, keyed
    // by the region's device address (`DfxSession::start_on` registers the bells).
    Ok(Some(match ops.host_notifier().filter(|_| doorbell_hint) {
        Some(n) => region.with_host_notify(Arc::new(move |q| n(addr, q))),
        None => region,
    }))
}

impl DfxDevice {
    /// The full path's DFX: what the profiling bases and flag word of `args` name, attached
    /// from device memory (`ops.translate`) with `clock` for the gate budgets. `Ok(None)` when
    /// no profiling bit is set.
    ///
    /// # Errors
    /// A base that is not a directory, a region that does not translate or whose header is
    /// not a transport region.
    pub fn from_kernel_args(
        ops: &dyn DeviceOps,
        args: &ferry_abi::launch::KernelArgs,
        threads: u32,
        clock: Arc<dyn ferry_dfx::clock::CycleClock>,
    ) -> Result<Option<DfxDevice>, String> {
        use ferry_abi::launch::{
            PROFILING_FLAG_CHIP_SWIMLANE, PROFILING_FLAG_DEP_GEN, PROFILING_FLAG_DUMP_ARGS,
            PROFILING_FLAG_PMU, PROFILING_FLAG_SCOPE_STATS,
        };
        let flags = args.enable_profiling_flag;
        let dir = |bit: u32, base: u64| -> Result<Option<DfxDirectory>, String> {
            if flags & bit == 0 || base == 0 {
                return Ok(None);
            }
            DfxDirectory::read(ops, base).map(Some)
        };
        let sw = dir(PROFILING_FLAG_CHIP_SWIMLANE, args.chip_swimlane_data_base)?;
        let pmu = dir(PROFILING_FLAG_PMU, args.pmu_data_base)?;
        let dep = dir(PROFILING_FLAG_DEP_GEN, args.dep_gen_data_base)?;
        let scope = dir(PROFILING_FLAG_SCOPE_STATS, args.scope_stats_data_base)?;
        let dump = dir(PROFILING_FLAG_DUMP_ARGS, args.dump_data_base)?;
        let any = [&sw, &pmu, &dep, &scope, &dump].into_iter().flatten().next().cloned();
        let Some(first) = any else { return Ok(None) };
        let entry = |d: &Option<DfxDirectory>, i: usize| {
            d.as_ref().and_then(|d| d.entries.get(i).copied()).unwrap_or((0, 0))
        };
        let region = |d: &Option<DfxDirectory>, i: usize| {
            let hint = d.as_ref().is_some_and(|d| d.flags & DFX_DIR_FLAG_DOORBELL_HINT != 0);
            attach_region(ops, entry(d, i), &clock, hint)
        };
        let mut arenas = Vec::new();
        if let Some(d) = &dump {
            for &(addr, len) in d.entries.iter().skip(1) {
                let (p, len) = device_view(ops, addr, len)?;
                // SAFETY: 64-byte aligned, `len` bytes of one live allocation the host keeps
                // until the run's AICPU threads returned; every access is atomic.
                arenas.push(Arc::new(unsafe { ArgsArena::from_raw_parts(p, len, Arc::new(())) }));
            }
        }
        Ok(Some(DfxDevice {
            swimlane: sw.as_ref().map_or(0, |d| d.level),
            pmu: pmu.as_ref().map_or(0, |d| d.level),
            dep_gen: dep.is_some(),
            args_level: dump.as_ref().map_or(0, |d| d.level),
            scope_stats: scope.is_some(),
            threads: if first.threads == 0 { threads } else { first.threads },
            aic: first.aic,
            regions: DfxRegions {
                aicore: region(&sw, 0)?,
                aicpu: region(&sw, 1)?,
                sched: region(&sw, 2)?,
                orch: region(&sw, 3)?,
                pmu: region(&pmu, 0)?,
                dep_gen: region(&dep, 0)?,
                scope: region(&scope, 0)?,
                args: region(&dump, 0)?,
            },
            arenas,
        }))
    }
}

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
    args: Option<DeviceWriter<ArgsDumpRecord>>,
    arena: Option<Arc<ArgsArena>>,
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

/// What kernel `task.kernel` does over its tensors (the kernels of [`super::kernels`]).
pub fn task_work(task: &ResolvedTask) -> TaskWork {
    use super::kernels::*;
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

fn kernel_ids(kernel: u32, custom: &super::custom::CustomKernels) -> [i32; 3] {
    match super::custom::shape(kernel, custom).map(|s| s.core) {
        Some(super::kernels::CoreKind::Aic) => [kernel as i32, -1, -1],
        _ => [-1, kernel as i32, -1],
    }
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

    /// A dispatch to core `core` of `task`'s block `block`, right before the register write;
    /// `at` is the dispatch time of the scheduler's batch (read before its first register
    /// write). Dumps block 0's arguments before dispatch.
    pub fn on_dispatch(
        &mut self,
        ops: &dyn DeviceOps,
        core: u32,
        seq: u64,
        block: u32,
        task: &ResolvedTask,
        at: u64,
    ) {
        if self.aicpu.is_some() {
            if self.dispatch.len() <= core as usize {
                self.dispatch.resize(core as usize + 1, 0);
            }
            self.dispatch[core as usize] = at;
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
            let dispatch = self.dispatch.get(core as usize).copied().unwrap_or(0);
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
        let (Some(w), scratch) = (self.dep_gen.as_mut(), &mut self.dep_scratch) else { return };
        let head = DepGenHead {
            task_id: seq,
            flags: 0,
            kernel_id: kernel_ids(task.kernel, &self.custom),
            block_num: task.block_dim,
        };
        let tensors = task.tensors().iter().map(|&(addr, bytes, role)| DepGenTensor {
            role: role_code(role),
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

    /// ScopeStats: a scope begins (`end == false`) or ends.
    pub fn scope(&mut self, end: bool, s: ScopeSnapshot) {
        let Some(w) = self.scope.as_mut() else { return };
        let mut r = ScopeStatsRecord {
            heap_start: 0,
            heap_end: s.heap,
            site_line: s.depth as i32,
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
        r.set_site_file("orchestration");
        w.record(0, r);
    }

    fn dump_args(&mut self, ops: &dyn DeviceOps, seq: u64, task: &ResolvedTask, stage: u8) {
        let before = stage == ARG_STAGE_BEFORE_DISPATCH;
        let payloads = self.dev.args_level != 0;
        for (i, &(addr, bytes, role)) in task.tensors().iter().enumerate() {
            let dumped = match role {
                Role::Input => before,
                Role::Output => !before,
                Role::InOut => true,
            };
            if !dumped {
                continue;
            }
            let mut r = ArgsDumpRecord {
                task_id: seq,
                role: role_code(role),
                stage,
                ndims: 1,
                arg_index: i as u32,
                dtype: DType::Float32 as u8,
                is_contiguous: 1,
                kind: ARG_KIND_TENSOR,
                func_count: 1,
                ..Default::default()
            };
            r.func_ids[0] = task.kernel as u16;
            r.shapes[0] = (bytes / 4).min(u64::from(u32::MAX)) as u32;
            r.strides[0] = 1;
            if payloads && bytes > 0 {
                match self.copy_payload(ops, addr, bytes) {
                    Some((off, size, truncated)) => {
                        r.payload_offset = off;
                        r.payload_size = size;
                        r.truncated = u8::from(truncated);
                    }
                    None => continue,
                }
            }
            if let Some(w) = self.args.as_mut() {
                w.record(0, r);
            }
            if r.payload_size > 0 {
                self.payloads += 1;
            }
        }
        if before {
            for (k, &v) in task.scalars[..task.n_scalars as usize].iter().enumerate() {
                let r = ArgsDumpRecord {
                    task_id: seq,
                    role: ARG_ROLE_SCALAR,
                    stage,
                    arg_index: task.n_tensors + k as u32,
                    // By the kernel's signature: an f32 scalar dumps as FLOAT32 bits.
                    dtype: self
                        .custom
                        .scalar_dtype(task.kernel, k)
                        .unwrap_or_else(|| super::kernels::scalar_dtype(task.kernel, k))
                        as u8,
                    is_contiguous: 1,
                    kind: ARG_KIND_SCALAR,
                    scalar_value: v,
                    func_count: 1,
                    func_ids: [task.kernel as u16, 0, 0],
                    ..Default::default()
                };
                if let Some(w) = self.args.as_mut() {
                    w.record(0, r);
                }
            }
        }
    }

    /// The arena gate (§3.10) and the copy; `None` when the gate gave up (record dropped).
    fn copy_payload(
        &mut self,
        ops: &dyn DeviceOps,
        addr: u64,
        bytes: u64,
    ) -> Option<(u64, u64, bool)> {
        let arena = self.arena.as_deref()?;
        let size = arena.size();
        let (len, truncated) = if bytes > size { ((size / 2) & !3, true) } else { (bytes, false) };
        // Relaxed: this thread is the only writer of its cursor.
        let mut wo = arena.write_offset().load(Ordering::Relaxed);
        let phys = wo % size;
        let full = wo != 0 && phys == 0;
        let crosses = len > size - phys;
        if full || crosses {
            // Seal: publish the metadata buffer so the host can see (and ack) every payload.
            if let Some(w) = self.args.as_mut() {
                w.flush();
            }
            let target = self.payloads;
            // Relaxed: a statistic for the host; the acks below are what pair.
            arena.published().store(target, Ordering::Relaxed);
            let budget = self.args.as_ref().map_or(0, |_| self.budget_cycles());
            let start = ops.clock_cycles();
            // Acquire: pairs with the ack hook's Release store of `completed`, after the collector
            // copied those payloads out.
            let acked = |a: &ArgsArena| a.completed().load(Ordering::Acquire) >= target;
            while !acked(arena) {
                if ops.clock_cycles().saturating_sub(start) >= budget {
                    // Relaxed: a counter read after the run.
                    arena.dropped().fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                ops.aicpu_wait(&mut || acked(arena), Some(Duration::from_micros(50)));
            }
            if phys != 0 {
                wo += size - phys;
            }
        }
        let src = self.views.get(ops, addr, len).ok()?;
        // SAFETY: the translation vouched for `len` readable bytes at `src`, valid for the run;
        // the view is stable while it is dumped (before dispatch its producers have finished and
        // nothing else writes it; after completion its consumers are not released yet); the
        // arena range is inside one lap (the gate above moved the cursor to a lap start when it
        // would not fit).
        unsafe { arena.write_from(wo % size, src.as_ptr(), len) };
        // Relaxed: the host reads the cursor as an overwrite high-water mark only; the payload
        // itself is published with the record.
        arena.write_offset().store(wo + len, Ordering::Relaxed);
        Some((wo, len, truncated))
    }

    fn budget_cycles(&self) -> u64 {
        self.dev.regions.args.as_ref().map_or(0, DeviceRegion::budget_cycles)
    }

    /// End of the thread's part of the run: flushes every writer (§3.11).
    pub fn finish(self) {
        if let Some(a) = &self.arena {
            // Relaxed: read by the host after the run.
            a.published().store(self.payloads, Ordering::Relaxed);
        }
        // Dropping the writers flushes them.
    }
}

/// Simulated PMU counters of one task for `event_type`, in the slot order of
/// `ferry_dfx::output::pmu_counter_names` (a5 adds `fixpipe_busy_cycles`, `issued_instructions`).
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
