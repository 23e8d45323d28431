//! The host `DeviceRunner`: init, callables, and the per-run lifecycle.
use super::graph::{GraphBuilder, HostGraph, PrebuiltTask};
use super::handshake::{CoreHandshake, HandshakeRegion};
use super::sim_ops::SimOps;
use super::slots::{
    launch_error, lock, reap, Claim, Executing, FullPath, Sides, Signals, SlotPool, AICORE, AICPU,
};
use crate::device::aicore::aicore_execute;
use crate::device::image::{
    align64, as_bytes, from_bytes, RunBlock, RunResult, RuntimeHeader, TensorRecord, RESULT_FAILED,
    RESULT_OK, VARIANT_DEVICE_ORCH, VARIANT_HOST_GRAPH,
};
use crate::device::kernels::KERNELS;
use crate::device::ops::DeviceOps;
use crate::device::program::AicpuProgram;
use crate::device::sched::PAYLOAD_PAIR_BYTES;
use crate::device::task::{OrchFn, TensorInfo};
use crate::error::{DeviceFault, RunError, RunnerError};
use ferry_abi::handshake::HandshakeLayout;
use ferry_abi::handshake::{core_type_for_index, Handshake};
use ferry_abi::launch::{
    AbiRecord, AicoreLaunchArgs, InitArgs, KernelArgs, RegisterCallableArgs, MAX_CALLABLES,
};
use ferry_abi::regs::RegLayout;
use ferry_launch::loader::{LoadMethod, LoaderBuilder};
use ferry_launch::transaction::RunId;
use ferry_launch::{EntryKernels, LaunchDescriptor, LaunchStaging, MetadataRegion, RunStreams};
use ferry_sim::cores::{Chip, CoreConfig};
use ferry_sim::profile::{DeviceProfile, PathBFixes};
use ferry_sim::{Arch, Device, DevicePtr, Platform, PlatformBuilder};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of the runtime descriptor's launch-route prefix on the full path: the image header,
/// the part of the image that is the same for every run of one graph (`device::image`).
pub const ROUTE_PREFIX_BYTES: usize = std::mem::size_of::<RuntimeHeader>();

/// How a runner reaches the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchPath {
    /// The full path (default): the AICPU program (`ferry_programs::AICPU_*`, a real shared
    /// object with the task runtime inside) is loaded by `ferry_launch`'s loader with this
    /// method, callables are registered through its register-callable entry with their
    /// orchestration objects, and every run goes through the launch transaction (prepare →
    /// publish → launch → retire) on the runner's stream pair.
    DeviceProgram(LoadMethod),
    /// Direct, in-process: the runner calls the device half linked into the host process and
    /// starts the chip's AICore/AICPU entries itself. For tests of the runtime alone (plain
    /// orchestration functions as callables, fault injection between the halves).
    InProcess,
}

impl std::fmt::Display for LaunchPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchPath::DeviceProgram(m) => {
                let how = match m {
                    LoadMethod::Preinstalled => "method 1, preinstalled",
                    LoadMethod::DispatcherBootstrap => "path a, dispatcher bootstrap",
                    LoadMethod::CustomScheduler => "path b, custom scheduler",
                };
                write!(f, "device program ({how}) + launch transaction")
            }
            LaunchPath::InProcess => f.write_str("in process (direct)"),
        }
    }
}

impl Default for LaunchPath {
    fn default() -> Self {
        LaunchPath::DeviceProgram(LoadMethod::DispatcherBootstrap)
    }
}

/// How a runner is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunnerConfig {
    /// Chip generation.
    pub arch: Arch,
    /// AICPU threads per launch (last = orchestrator, rest = schedulers); at least 2.
    pub aicpu_threads: u32,
    /// AIC workers.
    pub aic: u32,
    /// AIV workers.
    pub aiv: u32,
    /// Simulated HBM bytes.
    pub hbm_bytes: u64,
    /// Tasks in flight at once on the AICPU (task ring capacity).
    pub task_window: u32,
    /// How long `wait` waits before reaping the cores.
    pub timeout: Duration,
    /// [`LaunchPath::InProcess`] only: run the device half through the simulated AICPU OS's
    /// services table ([`super::OsServicesOps`], what a device program gets) instead of calling
    /// the chip directly ([`SimOps`]). The full path always uses the table.
    pub via_services: bool,
    /// How the runner reaches the device (default: the full path, loaded with Path A).
    pub path: LaunchPath,
    /// The profile of the device [`DeviceRunner::new`] builds (default: vendor, with the Path A
    /// latch and an incoherent Path B cluster; [`DeviceProfile::Relaxed`] is ferry's own
    /// device). [`DeviceRunner::init`] takes the device as it is.
    pub profile: DeviceProfile,
    /// The Path B fixes of that device (default: none).
    pub fixes: PathBFixes,
    /// The handshake slots' layout ([`HandshakeLayout::SPLIT`] is seed 004's option D).
    pub handshake_layout: HandshakeLayout,
    /// How long the schedulers wait for their cores' handshake reports (device time) before the
    /// run fails with [`RunError::HandshakeTimeout`].
    pub handshake_timeout: Duration,
    /// How long the AICore kernel of each run takes to start on the device [`DeviceRunner::new`]
    /// builds (default 0; `ferry_sim::PlatformBuilder::aicore_launch_latency`).
    pub aicore_launch_latency: Duration,
    /// Launch slots (default 2): how many runs may be prepared or in flight at once. With two
    /// or more, run k+1 is prepared (tensors and its per-run suffix uploaded) while run k
    /// executes; 1 serialises prepare behind the previous run's retirement.
    pub launch_slots: u32,
}

/// Most launch slots a runner takes.
pub const MAX_LAUNCH_SLOTS: u32 = 16;

impl RunnerConfig {
    /// The `ferry run` default: every AICPU thread of the arch, 8 AIC + 16 AIV, 1 GiB HBM.
    pub fn default_for(arch: Arch) -> RunnerConfig {
        RunnerConfig {
            arch,
            aicpu_threads: arch.profile().max_aicpu_threads,
            aic: 8,
            aiv: 16,
            hbm_bytes: 1 << 30,
            task_window: 4096,
            timeout: Duration::from_secs(120),
            via_services: false,
            path: LaunchPath::default(),
            profile: DeviceProfile::default(),
            fixes: PathBFixes::NONE,
            handshake_layout: HandshakeLayout::COMBINED,
            handshake_timeout: crate::device::sched::CORE_DEADLINE,
            aicore_launch_latency: Duration::ZERO,
            launch_slots: 2,
        }
    }

    /// The same configuration loading with `method` on the full path.
    pub fn with_method(self, method: LoadMethod) -> RunnerConfig {
        RunnerConfig { path: LaunchPath::DeviceProgram(method), ..self }
    }

    /// The same configuration on a device of `profile`.
    pub fn with_profile(self, profile: DeviceProfile) -> RunnerConfig {
        RunnerConfig { profile, ..self }
    }

    /// The same configuration on the direct in-process path ([`LaunchPath::InProcess`]).
    pub fn in_process(self) -> RunnerConfig {
        RunnerConfig { path: LaunchPath::InProcess, ..self }
    }

    /// The same configuration with `n` launch slots.
    pub fn with_launch_slots(self, n: u32) -> RunnerConfig {
        RunnerConfig { launch_slots: n, ..self }
    }

    /// A small chip for tests: 3 AICPU threads, 2 AIC + 4 AIV, 64 MiB.
    pub fn small(arch: Arch) -> RunnerConfig {
        RunnerConfig {
            aicpu_threads: 3,
            aic: 2,
            aiv: 4,
            hbm_bytes: 64 << 20,
            task_window: 512,
            ..RunnerConfig::default_for(arch)
        }
    }
}

/// Where a callable's graph is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// On the AICPU, by the orchestration function, while the graph executes.
    DeviceOrchestrated,
    /// On the host during prepare; the validated graph is uploaded in the image.
    HostBuiltGraph,
}

#[derive(Clone, Debug)]
enum Source {
    Orch(OrchFn),
    Prebuilt(Arc<Vec<PrebuiltTask>>),
}

/// A callable: a named graph recipe and the variant that runs it.
#[derive(Clone, Debug)]
pub struct Callable {
    name: String,
    variant: Variant,
    source: Source,
    object: Option<&'static ferry_programs::Program>,
}

impl Callable {
    /// A callable whose graph comes from the orchestration function `orch`.
    pub fn new(name: impl Into<String>, variant: Variant, orch: OrchFn) -> Callable {
        Callable { name: name.into(), variant, source: Source::Orch(orch), object: None }
    }

    /// The same callable with its orchestration object: the shared object (built from
    /// `device/orch-*`) that the AICPU program loads when the callable is registered and calls
    /// on the full path. It must build the same graph as the orchestration function, which the
    /// host-built variant and the in-process path use.
    pub fn with_object(mut self, object: &'static ferry_programs::Program) -> Callable {
        self.object = Some(object);
        self
    }

    /// The orchestration object, if any.
    pub fn object(&self) -> Option<&'static ferry_programs::Program> {
        self.object
    }

    /// A host-built callable from a prebuilt workload (explicit dependencies may point at any
    /// task; cycles are found in prepare).
    pub fn prebuilt(name: impl Into<String>, tasks: Vec<PrebuiltTask>) -> Callable {
        Callable {
            name: name.into(),
            variant: Variant::HostBuiltGraph,
            source: Source::Prebuilt(Arc::new(tasks)),
            object: None,
        }
    }

    /// The same recipe with another variant (a prebuilt workload stays host-built).
    pub fn with_variant(mut self, variant: Variant) -> Callable {
        if let Source::Orch(_) = self.source {
            self.variant = variant;
        }
        self
    }

    /// Name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Variant.
    pub fn variant(&self) -> Variant {
        self.variant
    }
}

/// How one run tensor is provided.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorInit {
    /// Uploaded from these values; copied back after the run.
    Data(Vec<f32>),
    /// This many zeroed elements; copied back after the run.
    Zeros(usize),
    /// Caller-owned device memory (not copied, not freed).
    Device {
        /// Device address.
        addr: DevicePtr,
        /// Length in bytes.
        bytes: u64,
    },
}

/// Inputs of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunArgs {
    /// Tensors, indexed by `TensorId`.
    pub tensors: Vec<TensorInit>,
    /// Scalars the orchestration reads.
    pub scalars: Vec<u64>,
    /// Bytes of scratch arena for `alloc_scratch`.
    pub scratch_bytes: u64,
}

/// Figures of a finished run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunStats {
    /// Tasks that ran.
    pub tasks: u64,
    /// Finished tasks per kernel, by name (kernels with zero tasks left out).
    pub per_kernel: Vec<(&'static str, u64)>,
    /// Wall time from launch to completion.
    pub wall: Duration,
    /// Variant of the run.
    pub variant: Variant,
}

/// What a finished run returns.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutput {
    /// Contents of every runner-owned tensor after the run, by `TensorId` (`None` for
    /// caller-owned device tensors).
    pub tensors: Vec<Option<Vec<f32>>>,
    /// Figures.
    pub stats: RunStats,
}

struct Allocs {
    device: Device,
    ptrs: Vec<DevicePtr>,
}

impl Drop for Allocs {
    fn drop(&mut self) {
        for p in self.ptrs.drain(..) {
            if let Err(e) = self.device.free(p) {
                tracing::warn!(%e, "freeing a run allocation failed");
            }
        }
    }
}

/// A prepared run: image and tensors are on the device, nothing is running.
pub struct PreparedRun {
    // Dropped after the allocations (field order): the runner is free only once they are.
    _allocs: Allocs,
    _claim: Claim,
    slot: usize,
    image: DevicePtr,
    result_off: u64,
    handshake: HandshakeRegion,
    kargs: KernelArgs,
    tensors: Vec<(DevicePtr, u64, bool)>,
    variant: Variant,
    planned: Option<u64>,
    host_orchestration: Option<ferry_dfx::output::HostOrchestration>,
}

impl std::fmt::Debug for PreparedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedRun")
            .field("image", &self.image)
            .field("variant", &self.variant)
            .finish()
    }
}

impl PreparedRun {
    /// Tasks the run will execute, when known before launch (host-built graphs).
    pub fn planned_tasks(&self) -> Option<u64> {
        self.planned
    }

    /// The host orchestrator's record of a host-built run: when it started, and the host time
    /// of every submit (`None` for a device-orchestrated run). It goes into the swimlane file
    /// as `host_orchestrator_phases` with `orchestrator_source: "host"`.
    pub fn host_orchestration(&self) -> Option<&ferry_dfx::output::HostOrchestration> {
        self.host_orchestration.as_ref()
    }

    /// The `KernelArgs` the AICPU exec entry receives.
    pub fn kernel_args(&self) -> &KernelArgs {
        &self.kargs
    }

    /// The launch slot the run holds.
    pub fn slot(&self) -> usize {
        self.slot
    }
}

/// A launched run.
pub struct LaunchedRun {
    prepared: Option<PreparedRun>,
    slot: usize,
    /// The run in its slot's launch transaction (full path).
    run_id: Option<RunId>,
    sides: Sides,
    started: Instant,
    chip: Chip,
    finished: Option<Duration>,
    /// The launch transaction's report of a failed stream (full path), taken at retirement.
    stream_error: Option<String>,
}

impl std::fmt::Debug for LaunchedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchedRun").field("started", &self.started).finish()
    }
}

impl LaunchedRun {
    /// Tasks planned before launch (host-built graphs), if known.
    pub fn planned_tasks(&self) -> Option<u64> {
        self.prepared.as_ref().and_then(|p| p.planned)
    }

    /// The launch slot the run holds.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Waits for both launches, reaping the cores if the AICPU side is done but a core never
    /// got its exit. `false` when the AICPU threads are still running after `timeout`.
    fn settle(&mut self, timeout: Duration) -> bool {
        if !self.sides.settle(&self.chip, timeout) {
            return false;
        }
        self.finished.get_or_insert_with(|| self.started.elapsed());
        true
    }
}

impl Drop for LaunchedRun {
    fn drop(&mut self) {
        if self.finished.is_none() && !self.settle(Duration::from_secs(30)) {
            // Device threads may still touch the run's memory: keep it allocated for the rest
            // of the process rather than free it under them.
            if let Some(p) = self.prepared.take() {
                std::mem::forget(p);
            }
        }
    }
}

/// Drives runs on one simulated device.
///
/// ```
/// use ferry_runtime::examples::{Example, Size};
/// use ferry_runtime::host::{DeviceRunner, RunnerConfig};
/// let mut r = DeviceRunner::new(RunnerConfig::small(ferry_sim::Arch::A5))?;
/// let ex = Example::Storm.build(Size::Small);
/// r.register_callable(0, ex.callable.clone())?;
/// let prepared = r.prepare(0, ex.args.clone())?;
/// let launched = r.launch(prepared)?;
/// r.wait(&mut { launched }).map(|_| ())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DeviceRunner {
    _platform: Option<Platform>,
    device: Device,
    chip: Chip,
    ops: Arc<SimOps>,
    device_ops: Arc<dyn DeviceOps>,
    program: Arc<AicpuProgram>,
    cfg: RunnerConfig,
    regs_table: DevicePtr,
    callables: BTreeMap<u32, Callable>,
    /// The launch slots and which are held.
    pool: SlotPool,
    /// The run the chip executes (or last executed, not yet retired from its slot).
    executing: Option<Executing>,
    epoch: u64,
    /// The private device root [`DeviceRunner::new`] made (removed on drop).
    root: Option<std::path::PathBuf>,
    /// The `regs` table's bytes (a5 host-built graph stages them as launch metadata).
    regs_bytes: Vec<u8>,
    /// The full path's loader, programs, streams and launch slot (`None` in process).
    full: Option<FullPath>,
    /// DFX profiling bases the next runs' `KernelArgs` carry (full path).
    dfx_profiling: Option<super::dfx::DfxProfiling>,
    /// The last finalized run's handshake, read back from device memory.
    last_handshake: Vec<CoreHandshake>,
    /// Built-in and loaded kernels ([`DeviceRunner::load_kernels`]); the AICore entries of
    /// each launch hold a handle for the loaded kernels' device entries.
    kernels: Arc<super::KernelRegistry>,
    /// The loaded kernels' spec table in device memory (`NULL` when none) and its entries.
    kernel_table: (DevicePtr, u32),
}

#[path = "runner_kernels.rs"]
mod runner_kernels;

fn load_err(e: ferry_launch::loader::LoadError) -> RunnerError {
    RunnerError::Load(e.to_string())
}

/// A device root private to one runner's platform, in the user's device root
/// ([`ferry_sim::device_root`]): the simulated AICPU OS keys loaded objects by path, so two
/// platforms in one process must not share a root. Made private first, and cleared of the
/// directories of processes that were killed before they could remove theirs.
fn private_root() -> Result<std::path::PathBuf, RunnerError> {
    use ferry_sim::device_root;
    static SEQ: AtomicU64 = AtomicU64::new(0);
    // Relaxed: only uniqueness of the name matters.
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let base = device_root::user_root();
    device_root::ensure_private(&base)
        .map_err(|e| RunnerError::Config(format!("device root {}: {e}", base.display())))?;
    let swept = device_root::sweep_stale(&base);
    if swept > 0 {
        tracing::info!(swept, root = %base.display(), "removed device directories of killed runs");
    }
    Ok(base.join(device_root::process_dir_name(n)))
}

impl std::fmt::Debug for DeviceRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceRunner")
            .field("cfg", &self.cfg)
            .field("in_flight", &self.is_busy())
            .finish()
    }
}

impl DeviceRunner {
    /// Builds a simulated platform with one device and a runner on it.
    ///
    /// # Errors
    /// [`RunnerError::Config`] for an unusable configuration; a simulator failure.
    pub fn new(cfg: RunnerConfig) -> Result<DeviceRunner, RunnerError> {
        let root = private_root()?;
        let p = PlatformBuilder::new(cfg.arch)
            .hbm_bytes(cfg.hbm_bytes)
            .device_root(&root)
            .profile(cfg.profile)
            .path_b_fixes(cfg.fixes)
            .aicore_launch_latency(cfg.aicore_launch_latency)
            .build()?;
        let dev = p.device(0)?.clone();
        let mut r = match DeviceRunner::init(dev, cfg) {
            Ok(r) => r,
            Err(e) => {
                drop(p);
                let _ = std::fs::remove_dir_all(&root);
                return Err(e);
            }
        };
        r._platform = Some(p);
        r.root = Some(root);
        Ok(r)
    }

    /// Init on an existing device: starts the chip's threads, writes the `regs` table, and (full
    /// path) loads the AICPU program through `ferry_launch`'s loader with the configured method,
    /// whose init entry latches the [`InitArgs`] once; in process, the linked program's init.
    ///
    /// The simulated AICPU OS keys loaded programs by path (`<device root>/…/<pid>_<dev>/`):
    /// two runners on devices of different platforms in one process need different device
    /// roots ([`DeviceRunner::new`] gives each platform its own).
    ///
    /// # Errors
    /// [`RunnerError::Config`] for fewer than 2 or more than the arch's AICPU threads, no cores
    /// or a zero task window; a simulator failure.
    pub fn init(device: Device, cfg: RunnerConfig) -> Result<DeviceRunner, RunnerError> {
        let max = cfg.arch.profile().max_aicpu_threads;
        if !(2..=max).contains(&cfg.aicpu_threads) {
            return Err(RunnerError::Config(format!(
                "{} AICPU threads: a run on {} takes 2..={max} (one orchestrator and at least one \
                 scheduler, on the chip's {max} AICPU threads)",
                cfg.aicpu_threads,
                cfg.arch.name()
            )));
        }
        if cfg.task_window == 0 {
            return Err(RunnerError::Config("task window of 0".into()));
        }
        if !(1..=MAX_LAUNCH_SLOTS).contains(&cfg.launch_slots) {
            return Err(RunnerError::Config(format!(
                "{} launch slots: a runner takes 1..={MAX_LAUNCH_SLOTS}",
                cfg.launch_slots
            )));
        }
        if device.arch().arch != cfg.arch {
            return Err(RunnerError::Config("device arch differs from the configured arch".into()));
        }
        let chip = Chip::new(
            device.clone(),
            CoreConfig { aicpu_threads: cfg.aicpu_threads, aic: cfg.aic, aiv: cfg.aiv },
        )
        .map_err(|e| RunnerError::Config(e.to_string()))?;
        let layout = RegLayout::of(cfg.arch);
        let bases = chip.reg_bases();
        let mut table = vec![0u64; layout.max_physical_cores as usize];
        for (t, b) in table.iter_mut().zip(&bases) {
            *t = *b;
        }
        let bytes: Vec<u8> = table.iter().flat_map(|b| b.to_le_bytes()).collect();
        let regs_table = device.malloc(bytes.len() as u64)?;
        device.copy_htod(&bytes, regs_table)?;
        let program = Arc::new(AicpuProgram::new());
        program.init(&InitArgs::new(device.ordinal()));
        let ops = Arc::new(SimOps::new(chip.clone()));
        let full = match cfg.path {
            LaunchPath::InProcess => None,
            LaunchPath::DeviceProgram(method) => {
                let built = (|| {
                    let loader = LoaderBuilder::new(&chip)
                        .method(method)
                        .init_args(InitArgs::new(device.ordinal()))
                        .build()
                        .map_err(load_err)?;
                    // Each runtime's program is loaded on its variant's first callable: a
                    // runner binds only the runtimes it runs, and with the vendor's Path A latch
                    // a process can bind one (the loader refuses a second with
                    // `ResidentMismatch`).
                    Ok::<_, RunnerError>(FullPath {
                        programs: [None, None],
                        loader,
                        streams: RunStreams::new(&device)?,
                        slots: (0..cfg.launch_slots)
                            .map(|i| LaunchStaging::new(&device, i))
                            .collect(),
                    })
                })();
                match built {
                    Ok(f) => Some(f),
                    Err(e) => {
                        let _ = device.free(regs_table);
                        return Err(e);
                    }
                }
            }
        };
        let device_ops: Arc<dyn DeviceOps> = if cfg.via_services || full.is_some() {
            Arc::new(super::OsServicesOps::new(&chip).ok_or_else(|| {
                RunnerError::Config("the AICPU OS's services table has another ABI version".into())
            })?)
        } else {
            ops.clone()
        };
        Ok(DeviceRunner {
            _platform: None,
            ops,
            device_ops,
            device,
            chip,
            program,
            cfg,
            regs_table,
            callables: BTreeMap::new(),
            pool: SlotPool::new(cfg.launch_slots as usize),
            executing: None,
            epoch: 0,
            regs_bytes: bytes,
            full,
            dfx_profiling: None,
            root: None,
            last_handshake: Vec::new(),
            kernels: Arc::new(super::KernelRegistry::new()),
            kernel_table: (DevicePtr::NULL, 0),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RunnerConfig {
        &self.cfg
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The last finalized run's handshake per core, read back from device memory after the run
    /// (seed 004's D2H recipe): what the AICPU saw against what memory holds. Empty before the
    /// first run.
    pub fn last_handshake(&self) -> &[CoreHandshake] {
        &self.last_handshake
    }

    /// The device half's chip services (for benches and tests that call kernels directly).
    pub fn ops(&self) -> &SimOps {
        &self.ops
    }

    /// Registers `callable` under `id` (`0..64`). A device-orchestrated callable goes through the
    /// AICPU program's register-callable entry (`RegisterCallableArgs`).
    ///
    /// # Errors
    /// [`RunnerError::CallableId`] for an id out of range or taken; [`RunnerError::Busy`] while
    /// a run is in flight.
    pub fn register_callable(&mut self, id: u32, callable: Callable) -> Result<(), RunnerError> {
        if self.is_busy() {
            return Err(RunnerError::Busy);
        }
        if id >= MAX_CALLABLES || self.callables.contains_key(&id) {
            return Err(RunnerError::CallableId { id });
        }
        if let Some(full) = &mut self.full {
            // Full path: through the loaded program's register-callable entry. The
            // device-orchestrated program (re)loads the callable's orchestration object from
            // the bytes shipped with the call; the host-built-graph one only records the call.
            let program = full.program(callable.variant).map_err(load_err)?;
            let object: &[u8] = match (callable.variant, &callable.source, callable.object) {
                (Variant::DeviceOrchestrated, _, Some(o)) => o.bytes,
                (Variant::DeviceOrchestrated, _, None) => {
                    return Err(RunnerError::Config(format!(
                        "device-orchestrated callable `{}` has no orchestration object (the \
                         AICPU program cannot call a host function; use the host-built-graph \
                         variant or the in-process path)",
                        callable.name
                    )))
                }
                (Variant::HostBuiltGraph, _, _) => &[],
            };
            program.register_callable(id, object, None).map_err(load_err)?;
        } else if let (Variant::DeviceOrchestrated, Source::Orch(f)) =
            (callable.variant, &callable.source)
        {
            let f = *f;
            let mut rca =
                RegisterCallableArgs::new(id, 0, 0).map_err(|_| RunnerError::CallableId { id })?;
            // Names longer than the ABI field are cut: the name is only the lookup key here.
            let name: String = callable.name.chars().take(63).collect();
            rca.set_device_orch_func_name(&name).map_err(|e| RunnerError::Config(e.to_string()))?;
            self.program
                .register_callable(&rca, &|n| (n == name).then_some(f))
                .map_err(|e| RunnerError::Config(e.to_string()))?;
        }
        self.callables.insert(id, callable);
        Ok(())
    }

    /// Unregisters callable `id`.
    ///
    /// # Errors
    /// [`RunnerError::NotRegistered`]; [`RunnerError::Busy`] while a run is in flight.
    pub fn unregister_callable(&mut self, id: u32) -> Result<(), RunnerError> {
        if self.is_busy() {
            return Err(RunnerError::Busy);
        }
        let callable = self.callables.remove(&id).ok_or(RunnerError::NotRegistered { id })?;
        if let Some(full) = &mut self.full {
            if callable.variant == Variant::DeviceOrchestrated {
                // An empty object unloads the callable's orchestration object on the device.
                full.program(callable.variant)
                    .and_then(|p| p.register_callable(id, &[], None))
                    .map_err(load_err)?;
            }
        }
        self.program.unregister_callable(id);
        Ok(())
    }

    /// Prepares a run of callable `id` on the next free launch slot: allocates and uploads its
    /// tensors, builds the graph on the host (host-built variant), lays out the runtime image
    /// and uploads its per-run suffix into the slot. It may run while another slot's run
    /// executes.
    ///
    /// # Errors
    /// [`RunError::Busy`] when every launch slot is held, [`RunError::NotRegistered`], [`RunError::InvalidArgs`], a refused
    /// workload ([`RunError::Fault`], [`RunError::Cycle`]) for host-built graphs, or a device
    /// error. Nothing stays allocated on error.
    pub fn prepare(&mut self, id: u32, args: RunArgs) -> Result<PreparedRun, RunError> {
        let callable = self.callables.get(&id).ok_or(RunError::NotRegistered { id })?.clone();
        let (slot, claim) = self.pool.take().ok_or(RunError::Busy)?;
        self.prepare_inner(id, &callable, args, (slot, claim))
    }

    fn prepare_inner(
        &mut self,
        id: u32,
        callable: &Callable,
        args: RunArgs,
        (slot, claim): (usize, Claim),
    ) -> Result<PreparedRun, RunError> {
        let dev = &self.device.clone();
        let mut allocs = Allocs { device: dev.clone(), ptrs: Vec::new() };
        let mut tensors = Vec::with_capacity(args.tensors.len());
        for (i, t) in args.tensors.iter().enumerate() {
            match t {
                TensorInit::Data(v) => {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    let p = dev.malloc(bytes.len().max(4) as u64)?;
                    allocs.ptrs.push(p);
                    dev.copy_htod(&bytes, p)?;
                    tensors.push((p, bytes.len() as u64, true));
                }
                TensorInit::Zeros(n) => {
                    let bytes = vec![0u8; n * 4];
                    let p = dev.malloc(bytes.len().max(4) as u64)?;
                    allocs.ptrs.push(p);
                    dev.copy_htod(&bytes, p)?;
                    tensors.push((p, bytes.len() as u64, true));
                }
                TensorInit::Device { addr, bytes } => {
                    if addr.0 % 4 != 0 || bytes % 4 != 0 {
                        return Err(RunError::InvalidArgs(format!(
                            "tensor {i}: device range {addr}+{bytes} is not whole aligned f32"
                        )));
                    }
                    tensors.push((*addr, *bytes, false));
                }
            }
        }
        let scratch = if args.scratch_bytes > 0 {
            let p = dev.malloc(args.scratch_bytes)?;
            allocs.ptrs.push(p);
            (p.0, args.scratch_bytes)
        } else {
            (0, 0)
        };
        let infos: Vec<TensorInfo> =
            tensors.iter().map(|&(p, b, _)| TensorInfo { addr: p.0, len: b / 4 }).collect();
        let mut host_orchestration = None;
        let graph = match (callable.variant, &callable.source) {
            (Variant::DeviceOrchestrated, _) => None,
            (Variant::HostBuiltGraph, source) => {
                let check = |a: u64, b: u64| dev.translate(DevicePtr(a), b).is_ok();
                let origin_ns = ferry_dfx::output::host_now_ns();
                let mut gb =
                    GraphBuilder::new(infos.clone(), args.scalars.clone(), scratch, Some(&check))
                        .with_custom_kernels(self.kernels.custom_kernels());
                match source {
                    Source::Orch(f) => f(&mut gb).map_err(DeviceFault::Submit)?,
                    Source::Prebuilt(tasks) => gb.record_prebuilt(tasks)?,
                }
                let phases = gb.host_phases();
                let g = gb.finish()?;
                host_orchestration = Some(ferry_dfx::output::HostOrchestration {
                    clock_domain_id: ferry_dfx::output::host_clock_domain_id(),
                    origin_ns,
                    expected_records: g.tasks.len() as u64,
                    phases,
                });
                Some(g)
            }
        };
        let (image_bytes, hdr) =
            self.layout(id, callable.variant, &infos, &args.scalars, graph.as_ref(), scratch);
        let (image, kargs) = if let Some(full) = &mut self.full {
            // Full path: the runtime image is the launch descriptor. prepare_runtime_args
            // reserves the slot-owned device destination and the pinned source and snapshots
            // the image; it is published on the AICPU stream at launch. On a5, the host-built
            // graph's resident scheduler state (the per-core `regs` table the schedulers
            // dispatch through) is staged as launch metadata, published before the descriptor.
            full.settle_slot(slot, self.cfg.timeout)?;
            let staging = &mut full.slots[slot];
            let metadata =
                if self.cfg.arch == Arch::A5 && callable.variant == Variant::HostBuiltGraph {
                    vec![MetadataRegion::new(self.regs_table, self.regs_bytes.clone())]
                } else {
                    Vec::new() // also clears an abandoned, unpublished batch
                };
            let launch = |e: &dyn std::error::Error| launch_error(e);
            staging.stage_launch_metadata(metadata).map_err(|e| launch(&e))?;
            // The header is the cached launch-route prefix; the per-run suffix (run block,
            // device-written regions, tensors, scalars, host-built graph) is uploaded
            // synchronously by prepare_runtime_args, so an identical graph publishes nothing.
            let mut image_bytes = image_bytes;
            let suffix = image_bytes.split_off(ROUTE_PREFIX_BYTES);
            let desc = LaunchDescriptor::new(image_bytes, ROUTE_PREFIX_BYTES)
                .map_err(|e| launch(&e))?
                .with_run_suffix(suffix);
            let mut kargs = KernelArgs::new(0, self.regs_table.0);
            if let Some(p) = &self.dfx_profiling {
                p.apply(&mut kargs);
            }
            staging.prepare_runtime_args(&desc, kargs).map_err(|e| launch(&e))?;
            let kargs = staging
                .payload()
                .ok_or_else(|| RunError::Launch("no payload after prepare".into()))?;
            (DevicePtr(kargs.runtime_args), kargs)
        } else {
            let image = dev.malloc(hdr.image_bytes)?;
            allocs.ptrs.push(image);
            dev.copy_htod(&image_bytes, image)?;
            let mut kargs = KernelArgs::new(image.0, self.regs_table.0);
            if let Some(p) = &self.dfx_profiling {
                p.apply(&mut kargs);
            }
            (image, kargs)
        };
        Ok(PreparedRun {
            _claim: claim,
            slot,
            _allocs: allocs,
            image,
            result_off: hdr.result_off,
            handshake: HandshakeRegion::of(&hdr),
            kargs,
            tensors,
            variant: callable.variant,
            planned: graph.as_ref().map(|g| g.tasks.len() as u64),
            host_orchestration,
        })
    }

    fn layout(
        &mut self,
        id: u32,
        variant: Variant,
        tensors: &[TensorInfo],
        scalars: &[u64],
        graph: Option<&HostGraph>,
        scratch: (u64, u64),
    ) -> (Vec<u8>, RuntimeHeader) {
        self.epoch += 1;
        let cfg = &self.cfg;
        let w = u64::from(cfg.aic + cfg.aiv);
        let (recs, preds) = graph.map(HostGraph::records).unwrap_or_default();
        let mut h = RuntimeHeader::new();
        let mut off = std::mem::size_of::<RuntimeHeader>() as u64;
        let mut take = |n: u64| {
            let o = off;
            off += align64(n);
            o
        };
        let hl = cfg.handshake_layout;
        // Everything from the run block on is the per-run suffix (see `device::image`).
        h.run_off = take(std::mem::size_of::<RunBlock>() as u64);
        h.handshake_off = take(w * u64::from(hl.slot_bytes));
        h.payload_off = take(w * PAYLOAD_PAIR_BYTES);
        h.tensor_off = take(tensors.len() as u64 * 16);
        h.scalar_off = take(scalars.len() as u64 * 8);
        h.result_off = take(std::mem::size_of::<RunResult>() as u64);
        h.handshake_seen_off = take(w * 4);
        h.graph_task_off = take(recs.len() as u64 * 160);
        h.graph_pred_off = take(preds.len() as u64 * 4);
        h.image_bytes = off;
        h.variant = match variant {
            Variant::DeviceOrchestrated => VARIANT_DEVICE_ORCH,
            Variant::HostBuiltGraph => VARIANT_HOST_GRAPH,
        };
        h.worker_count = w as u32;
        h.aic_count = cfg.aic;
        h.aicpu_thread_num = cfg.aicpu_threads;
        h.callable_id = id;
        h.task_window = cfg.task_window;
        h.tensor_count = tensors.len() as u32;
        h.scalar_count = scalars.len() as u32;
        h.graph_task_count = recs.len() as u32;
        h.graph_pred_count = preds.len() as u32;
        h.arch = cfg.arch as u32;
        h.regs_table = self.regs_table.0;
        (h.kernel_table, h.kernel_table_count) = (self.kernel_table.0 .0, self.kernel_table.1);
        let layout = RegLayout::of(cfg.arch);
        h.regs_count = layout.max_physical_cores;
        h.max_physical_cores = layout.max_physical_cores;
        h.handshake_layout = hl.id;
        h.handshake_timeout_ms =
            cfg.handshake_timeout.as_millis().clamp(1, u128::from(u32::MAX)) as u32;

        let mut img = vec![0u8; h.image_bytes as usize];
        let mut put = |o: u64, b: &[u8]| img[o as usize..o as usize + b.len()].copy_from_slice(b);
        put(0, as_bytes(&h));
        put(h.run_off, as_bytes(&RunBlock::new(self.epoch, scratch.0, scratch.1)));
        for i in 0..w {
            let slot = Handshake::pretyped(core_type_for_index(i as u32, cfg.aic));
            put(h.handshake_off + u64::from(hl.slot_bytes) * i, slot.as_bytes());
        }
        for (i, t) in tensors.iter().enumerate() {
            put(
                h.tensor_off + 16 * i as u64,
                as_bytes(&TensorRecord { addr: t.addr, bytes: t.len * 4 }),
            );
        }
        for (i, s) in scalars.iter().enumerate() {
            put(h.scalar_off + 8 * i as u64, &s.to_le_bytes());
        }
        for (i, r) in recs.iter().enumerate() {
            put(h.graph_task_off + 160 * i as u64, as_bytes(r));
        }
        for (i, p) in preds.iter().enumerate() {
            put(h.graph_pred_off + 4 * i as u64, &p.to_le_bytes());
        }
        (img, h)
    }

    /// Launches a prepared run: resets every core's register window, starts the AICore entry on
    /// every core, then the AICPU exec entry on every AICPU thread (AICore first, as the
    /// original). This is the seam where the launch transaction (`ferry-launch`) takes over the
    /// publication of `KernelArgs` and the stream pair.
    ///
    /// # Errors
    /// A launch failure; the run is released and the runner stays usable.
    pub fn launch(&mut self, p: PreparedRun) -> Result<LaunchedRun, RunError> {
        // One run at a time on the chip: the one still executing finishes and retires from its
        // slot before the register windows are reset for this one.
        self.retire_executing()?;
        let layout = RegLayout::of(self.cfg.arch);
        let cores = self.cfg.aic + self.cfg.aiv;
        for i in 0..cores {
            let w = self.chip.window(i);
            w.aicpu_write(layout.data_main_base as u32, 0);
            w.core_write(layout.cond as u32, 0);
        }
        if self.full.is_some() {
            return self.launch_full(p, cores);
        }
        let core_args = AicoreLaunchArgs::from(&p.kargs);
        let (ops, kernels) = (self.device_ops.clone(), self.kernels.clone());
        let aicore = match self.chip.launch_aicore(
            cores,
            Arc::new(move |ctx: ferry_sim::cores::CoreCtx| {
                aicore_execute(&*ops, &core_args, ctx.index, ctx.index, Some(&*kernels))
                    .map_err(|e| e.to_string())
            }),
        ) {
            Ok(c) => c,
            Err(e) => {
                return Err(e.into());
            }
        };
        let (ops, program, kargs) = (self.device_ops.clone(), self.program.clone(), p.kargs);
        let aicpu = match self.chip.launch_aicpu(
            self.cfg.aicpu_threads,
            Arc::new(move |ctx: ferry_sim::cores::AicpuCtx| {
                program.exec(&*ops, &kargs, ctx.thread, ctx.threads)
            }),
        ) {
            Ok(c) => c,
            Err(e) => {
                // The cores are up and waiting for a window that will never open: reap them.
                reap(&self.chip);
                let _ = aicore.wait_timeout(Duration::from_secs(10));
                return Err(e.into());
            }
        };
        let sides = Sides::Direct { aicore, aicpu };
        self.executing = Some(Executing { slot: p.slot, sides: sides.clone(), run: None });
        Ok(LaunchedRun {
            slot: p.slot,
            run_id: None,
            prepared: Some(p),
            sides,
            started: Instant::now(),
            chip: self.chip.clone(),
            finished: None,
            stream_error: None,
        })
    }

    /// The full path's launch: `publish_for_launch` queues the descriptor (and any staged
    /// metadata) on the AICPU stream and forks the AICore stream after it; `launch` then submits
    /// the AICore entry (every core runs the runtime's AICore executor over the OS services
    /// table with `AicoreLaunchArgs` by value) and the AICPU entry (the loaded program's exec
    /// on every AICPU thread with the front-less `KernelArgs` by value).
    fn launch_full(&mut self, p: PreparedRun, cores: u32) -> Result<LaunchedRun, RunError> {
        let Some(full) = self.full.as_mut() else { unreachable!("called on the full path") };
        let launch = |e: &dyn std::error::Error| launch_error(e);
        let aicpu_entry =
            full.program(p.variant).map_err(|e| launch(&e))?.aicpu_entry(self.cfg.aicpu_threads);
        let signals = Arc::new(Signals::default());
        let (chip, ops, sig) = (self.chip.clone(), self.device_ops.clone(), signals.clone());
        let kernels = self.kernels.clone();
        let aicore = move |_: &Device, args: AicoreLaunchArgs| {
            let kernels = kernels.clone();
            let launched = chip.launch_aicore(
                cores,
                Arc::new(move |ctx: ferry_sim::cores::CoreCtx| {
                    aicore_execute(&*ops, &args, ctx.index, ctx.index, Some(&*kernels))
                        .map_err(|e| e.to_string())
                }),
            );
            let r = match launched {
                Ok(c) => c.wait().map_err(|e| e.to_string()),
                Err(e) => {
                    let m = format!("the AICore entry could not start the cores: {e}");
                    *lock(&sig.cores_not_started) = Some(m.clone());
                    Err(m)
                }
            };
            sig.set(AICORE, r.clone());
            r
        };
        let (chip, sig) = (self.chip.clone(), signals.clone());
        let aicpu = move |d: &Device, args: KernelArgs| {
            let r = aicpu_entry(d, args);
            if r.is_err() {
                // The exec entry refused the run before its schedulers could shut the cores
                // down: release them.
                reap(&chip);
            }
            sig.set(AICPU, r.clone());
            r
        };
        let staging = &mut full.slots[p.slot];
        let published = staging.publish_for_launch(&full.streams);
        let launched = published.map_err(|e| launch(&e)).and_then(|_| {
            staging.launch(&full.streams, EntryKernels::new(aicore, aicpu)).map_err(|e| launch(&e))
        });
        if let Err(e) = launched {
            // Nothing runs, or the AICore side waits for a window that never opens: release the
            // cores, retire what reached the streams and leave the slot ready.
            reap(&self.chip);
            if let Err(settle) = full.settle_slot(p.slot, self.cfg.timeout) {
                tracing::warn!(%settle, "retiring a failed launch");
            }
            return Err(e);
        }
        let run_id = full.slots[p.slot].run();
        let sides = Sides::Streams(signals);
        self.executing = Some(Executing { slot: p.slot, sides: sides.clone(), run: run_id });
        Ok(LaunchedRun {
            slot: p.slot,
            run_id,
            prepared: Some(p),
            sides,
            started: Instant::now(),
            chip: self.chip.clone(),
            finished: None,
            stream_error: None,
        })
    }

    /// Whether the run has finished (both launches returned).
    pub fn poll(&self, run: &LaunchedRun) -> bool {
        run.sides.is_done(AICPU) && run.sides.is_done(AICORE)
    }

    /// Live progress of a launched run: `(tasks completed, tasks submitted)`.
    ///
    /// # Errors
    /// A device read failure.
    pub fn progress(&self, run: &LaunchedRun) -> Result<(u64, u64), RunError> {
        let Some(p) = &run.prepared else { return Ok((0, 0)) };
        let mut b = [0u8; 16];
        self.device.copy_dtoh(p.image.add(p.result_off + 8), &mut b)?;
        let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        Ok((w(0), w(8)))
    }

    /// Waits up to `timeout` for the run to finish; `Ok(false)` when it is still running. The
    /// run's wall time is taken when it finishes, not when this returns.
    ///
    /// # Errors
    /// [`RunError::Timeout`] when the AICPU side finished but the cores could not be reaped.
    pub fn wait_timeout(
        &mut self,
        run: &mut LaunchedRun,
        timeout: Duration,
    ) -> Result<bool, RunError> {
        if run.finished.is_some() {
            return Ok(true);
        }
        if !run.sides.wait(AICPU, timeout) {
            return Ok(false);
        }
        self.wait(run).map(|_| true)
    }

    /// Waits for the run to finish (up to the configured timeout, then reaps the cores).
    ///
    /// # Errors
    /// [`RunError::Timeout`] when the device did not finish in time.
    pub fn wait(&mut self, run: &mut LaunchedRun) -> Result<Duration, RunError> {
        if !run.settle(self.cfg.timeout) {
            return Err(RunError::Timeout { ms: self.cfg.timeout.as_millis() as u64 });
        }
        if self.executing.as_ref().is_some_and(|e| e.slot == run.slot && e.run == run.run_id) {
            self.executing = None;
        }
        if let (Some(full), Sides::Streams(s)) = (&mut self.full, &run.sides) {
            // Both entries returned: the run's two completion boundaries retire it from the
            // launch slot (`finish_run`), proving its publication was consumed. The next launch
            // may have retired it already, and kept what its streams reported.
            if run.run_id.is_some() && full.slots[run.slot].execution_owner() == run.run_id {
                if let Some(e) = full.settle_slot(run.slot, self.cfg.timeout)? {
                    run.stream_error.get_or_insert(e);
                }
            } else if let Some(e) = lock(&s.stream_error).take() {
                run.stream_error.get_or_insert(e);
            }
        }
        Ok(run.finished.unwrap_or_default())
    }

    /// Finishes a run: waits for it, reads its result, copies the runner-owned tensors back and
    /// frees everything. The runner is ready for the next run whatever the outcome.
    ///
    /// # Errors
    /// The run's failure ([`RunError::Fault`] with the device's typed fault), a timeout, or a
    /// device error.
    pub fn finalize_run(&mut self, mut run: LaunchedRun) -> Result<RunOutput, RunError> {
        let waited = self.wait(&mut run);
        // A run whose threads never finished keeps its memory and its claim on the runner
        // (LaunchedRun's drop); everything else is released when `run` drops below.
        let wall = match waited {
            Ok(w) => w,
            Err(e) => {
                // Only a run whose device threads never finished may still touch its memory:
                // keep that (and the claim on the runner) for the rest of the process, and do not
                // wait again on drop. A run that finished but whose retirement from the launch
                // slot failed is over on the device: it drops (frees) below like any other.
                if run.finished.is_none() {
                    if let Some(p) = run.prepared.take() {
                        std::mem::forget(p);
                    }
                    run.finished = Some(Duration::ZERO);
                }
                return Err(e);
            }
        };
        let p = run.prepared.take().ok_or(RunError::Busy)?;
        if let Sides::Streams(s) = &run.sides {
            // The AICPU side then failed its handshake with cores that never started: report
            // the cause, not the symptom.
            if let Some(e) = lock(&s.cores_not_started).take() {
                return Err(RunError::Launch(e));
            }
        }
        let mut rb = vec![0u8; std::mem::size_of::<RunResult>()];
        self.device.copy_dtoh(p.image.add(p.result_off), &mut rb)?;
        let r: RunResult = from_bytes(&rb).unwrap_or_default();
        self.last_handshake = p.handshake.read(&self.device, p.image)?;
        if r.status != RESULT_FAILED {
            match &run.sides {
                Sides::Direct { aicpu, .. } => aicpu.wait_timeout(Duration::ZERO)?,
                Sides::Streams(_) => {
                    if let Some(e) = run.sides.aicpu_error().or(run.stream_error.take()) {
                        return Err(RunError::Launch(e));
                    }
                }
            }
        }
        match r.status {
            RESULT_OK => {}
            RESULT_FAILED => {
                return Err(match DeviceFault::decode(r.error_code, r.error_task, r.error_detail) {
                    Some(DeviceFault::HandshakeTimeout { waited_ms, .. }) => {
                        let stale =
                            self.last_handshake.iter().filter(|c| c.is_stale()).copied().collect();
                        RunError::HandshakeTimeout { waited_ms, stale }
                    }
                    Some(f) => RunError::Fault(f),
                    None => RunError::BadResult { status: r.status, code: r.error_code },
                })
            }
            s => return Err(RunError::BadResult { status: s, code: r.error_code }),
        }
        let mut outs = Vec::with_capacity(p.tensors.len());
        for &(ptr, bytes, owned) in &p.tensors {
            if !owned {
                outs.push(None);
                continue;
            }
            let mut b = vec![0u8; bytes as usize];
            self.device.copy_dtoh(ptr, &mut b)?;
            outs.push(Some(
                b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            ));
        }
        let per_kernel = KERNELS
            .iter()
            .zip(r.kernel_counts)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (k.name, n))
            .collect();
        Ok(RunOutput {
            tensors: outs,
            stats: RunStats { tasks: r.tasks_completed, per_kernel, wall, variant: p.variant },
        })
    }

    /// prepare → launch → wait → finalize.
    ///
    /// # Errors
    /// As the four steps.
    pub fn run(&mut self, id: u32, args: RunArgs) -> Result<RunOutput, RunError> {
        let p = self.prepare(id, args)?;
        let l = self.launch(p)?;
        self.finalize_run(l)
    }

    /// Tears the runner down: unregisters every callable and frees the `regs` table.
    ///
    /// # Errors
    /// [`RunnerError::Busy`] while a run is in flight; a device error freeing memory.
    pub fn finalize(mut self) -> Result<(), RunnerError> {
        if self.is_busy() {
            return Err(RunnerError::Busy);
        }
        let ids: Vec<u32> = self.callables.keys().copied().collect();
        for id in ids {
            self.unregister_callable(id)?;
        }
        self.executing = None;
        if let Some(full) = &mut self.full {
            // Normal retirement of the launch slots: frees their pinned sources and destinations.
            full.retire_all(self.cfg.timeout).map_err(|e| RunnerError::Load(e.to_string()))?;
        }
        self.device.free(self.regs_table)?;
        self.regs_table = DevicePtr::NULL;
        if !self.kernel_table.0.is_null() {
            self.device.free(self.kernel_table.0)?;
            self.kernel_table = (DevicePtr::NULL, 0);
        }
        Ok(())
    }
}

impl Drop for DeviceRunner {
    fn drop(&mut self) {
        if !self.regs_table.is_null() {
            let _ = self.device.free(self.regs_table);
        }
        if !self.kernel_table.0.is_null() {
            let _ = self.device.free(self.kernel_table.0);
        }
        // The entry closures of the last launch hold `SimOps` (and through it the chip) until
        // their chip thread lets go of them, just after the launch completes. Let them go first,
        // so the chip's last reference is dropped here and not on one of its own threads (which
        // cannot join itself).
        let deadline = Instant::now() + Duration::from_secs(5);
        // `device_ops` is either its own allocation or a second handle on `ops`.
        let baseline = if self.cfg.via_services || self.full.is_some() { 1 } else { 2 };
        while Arc::strong_count(&self.device_ops) > baseline && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(mut full) = self.full.take() {
            if let Err(e) = full.retire_all(self.cfg.timeout) {
                tracing::warn!(%e, "retiring the launch slots on drop");
            }
            // Programs, then the loader: the per-process device directory goes with the last.
            drop(full);
        }
        if let Some(root) = self.root.take() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

impl DeviceRunner {
    /// Releases a prepared run that will not be launched (dropping it does the same).
    pub fn release(&mut self, run: PreparedRun) {
        drop(run);
    }

    /// Attaches DFX collection (`super::dfx::DfxSession::device`) to the runs launched from now
    /// on, or detaches it with `None`. In-process path only ([`LaunchPath::InProcess`]): a loaded
    /// AICPU program does not see it (use [`attach_dfx_session`](Self::attach_dfx_session)).
    pub fn attach_dfx(&mut self, dfx: Option<Arc<crate::device::dfx::DfxDevice>>) {
        self.program.attach_dfx(dfx);
    }

    /// Attaches a DFX collection to the runs prepared from now on, on either path, or detaches
    /// it with `None`. On the full path the session must have been started in this runner's
    /// device memory ([`super::dfx::DfxSession::start_on`] with [`device`](Self::device)): its
    /// profiling bases go into every run's `KernelArgs`, and the loaded AICPU program attaches
    /// its writers from them. In process the session's device half is attached directly.
    ///
    /// # Errors
    /// [`RunnerError::Busy`] while a run is prepared or in flight; [`RunnerError::Load`] on the
    /// full path for a session kept in host memory.
    pub fn attach_dfx_session(
        &mut self,
        session: Option<&super::dfx::DfxSession>,
    ) -> Result<(), RunnerError> {
        if self.is_busy() {
            return Err(RunnerError::Busy);
        }
        if let Some(s) = session {
            let loaded = self.kernels.kernels().into_iter().filter(|k| k.library.is_some());
            s.note_loaded_kernels(loaded.map(|k| (k.id, k.name)));
        }
        if self.full.is_none() {
            self.program.attach_dfx(session.map(super::dfx::DfxSession::device));
            self.dfx_profiling = None;
            return Ok(());
        }
        self.dfx_profiling = match session {
            None => None,
            Some(s) => Some(s.profiling().ok_or_else(|| {
                RunnerError::Load(
                    "a DFX session in host memory cannot reach a loaded AICPU program; start it \
                     with DfxSession::start_on(runner.device())"
                        .into(),
                )
            })?),
        };
        Ok(())
    }

    /// The launch transaction's counters (publications, descriptor and metadata copies,
    /// bytes, forks) on the full path; `None` in process.
    pub fn launch_stats(&self) -> Option<ferry_launch::transaction::StagingStats> {
        self.full.as_ref().map(FullPath::stats)
    }

    /// Per launch slot: the transaction's counters and the slot's device destination (full
    /// path; empty in process). Two slots never share a destination or a pinned source.
    pub fn launch_slots(
        &self,
    ) -> Vec<(ferry_launch::transaction::StagingStats, Option<DevicePtr>)> {
        self.full.as_ref().map_or_else(Vec::new, |f| {
            f.slots.iter().map(|s| (s.stats(), s.destination())).collect()
        })
    }

    /// Waits for the run the chip is executing (bounded by the configured timeout, reaping
    /// stuck cores) and retires it from its launch slot. The run itself stays with its
    /// holder, whose `wait`/`finalize_run` reads its outputs.
    fn retire_executing(&mut self) -> Result<(), RunError> {
        let Some(ex) = self.executing.take() else { return Ok(()) };
        if !ex.sides.settle(&self.chip, self.cfg.timeout) {
            self.executing = Some(ex);
            return Err(RunError::Timeout { ms: self.cfg.timeout.as_millis() as u64 });
        }
        if let (Some(full), Some(run)) = (&mut self.full, ex.run) {
            if full.slots[ex.slot].execution_owner() == Some(run) {
                let e = full.settle_slot(ex.slot, self.cfg.timeout)?;
                if let (Some(e), Sides::Streams(s)) = (e, &ex.sides) {
                    *lock(&s.stream_error) = Some(e);
                }
            }
        }
        Ok(())
    }

    /// Whether a run is prepared or in flight on this runner (any launch slot held).
    pub fn is_busy(&self) -> bool {
        self.pool.is_busy()
    }
}
