//! The runner's configuration and the values a run takes and returns.
use super::graph::PrebuiltTask;
use super::sim_backend::{DeviceProfile, PathBFixes};
use crate::device::task::OrchFn;
use ferry_abi::arch::Arch;
use ferry_abi::handshake::HandshakeLayout;
use ferry_backend::DevicePtr;
use ferry_launch::loader::LoadMethod;
use std::sync::Arc;
use std::time::Duration;

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
    /// How long one kernel execution (one block on one core) may run, in device time, before
    /// its scheduler declares the core hung: the run fails with
    /// [`KernelFault::Hung`](crate::KernelFault::Hung) naming the task, the kernel and the
    /// core, the core is taken out of service and the runner cannot launch again (default
    /// [`DEFAULT_KERNEL_BUDGET`](crate::device::sched::DEFAULT_KERNEL_BUDGET), 60 s).
    pub kernel_budget: Duration,
    /// [`LaunchPath::InProcess`] only: run the device half through the simulated AICPU OS's
    /// services table ([`super::OsServicesOps`], what a device program gets) instead of calling
    /// the chip directly ([`SimOps`](super::SimOps)). The full path always uses the table.
    pub via_services: bool,
    /// How the runner reaches the device (default: the full path, loaded with Path A).
    pub path: LaunchPath,
    /// The profile of the device [`DeviceRunner::new`](super::DeviceRunner::new) builds
    /// (default: vendor, with the Path A latch and an incoherent Path B cluster;
    /// [`DeviceProfile::Relaxed`] is ferry's own device).
    /// [`DeviceRunner::init`](super::DeviceRunner::init) takes the device as it is.
    pub profile: DeviceProfile,
    /// The Path B fixes of that device (default: none).
    pub fixes: PathBFixes,
    /// The handshake slots' layout ([`HandshakeLayout::SPLIT`] is option D of docs/design/launch.md).
    pub handshake_layout: HandshakeLayout,
    /// How long the schedulers wait for their cores' handshake reports (device time) before the
    /// run fails with [`RunError::HandshakeTimeout`](crate::RunError::HandshakeTimeout).
    pub handshake_timeout: Duration,
    /// How long the AICore kernel of each run takes to start on the device
    /// [`DeviceRunner::new`](super::DeviceRunner::new) builds (default 0;
    /// `ferry_sim::PlatformBuilder::aicore_launch_latency`).
    pub aicore_launch_latency: Duration,
    /// Lines the Path B cluster's cache must have filled before each run's AICore kernel starts
    /// (default 0: no wait; `ferry_sim::PlatformBuilder::aicore_start_after_line_fills`).
    pub aicore_start_after_line_fills: u64,
    /// Launch slots (default 2): how many runs may be prepared or in flight at once. With two
    /// or more, run k+1 is prepared (tensors and its per-run suffix uploaded) while run k
    /// executes; 1 serialises prepare behind the previous run's retirement.
    pub launch_slots: u32,
    /// The AICPU programs the full path loads (default: the ones ferry embeds).
    pub programs: AicpuPrograms,
}

/// The AICPU programs a runner loads on the full path ([`LaunchPath::DeviceProgram`]), one per
/// variant: by default the ones ferry embeds (`ferry_programs`). A build of them shipped apart
/// from the host library (installed by a vendor's package, or from another release) is named
/// here; the loader checks it as it checks its own — its identity against the program's `name`
/// and `build_id`, the launch ABI it reports, and each entry's payload — so a program of
/// another launch ABI fails the run with `LoadError::AbiMismatch`, typed, instead of running.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AicpuPrograms {
    /// The device-orchestrated variant's program.
    pub device_orchestrated: &'static ferry_programs::Program,
    /// The host-built-graph variant's program.
    pub host_built_graph: &'static ferry_programs::Program,
}

impl AicpuPrograms {
    /// The programs ferry embeds.
    pub const EMBEDDED: AicpuPrograms = AicpuPrograms {
        device_orchestrated: &ferry_programs::AICPU_DEVICE_ORCHESTRATED,
        host_built_graph: &ferry_programs::AICPU_HOST_BUILT_GRAPH,
    };

    /// The program of `variant`.
    pub fn of(&self, variant: Variant) -> &'static ferry_programs::Program {
        match variant {
            Variant::DeviceOrchestrated => self.device_orchestrated,
            Variant::HostBuiltGraph => self.host_built_graph,
        }
    }
}

impl Default for AicpuPrograms {
    fn default() -> AicpuPrograms {
        AicpuPrograms::EMBEDDED
    }
}

impl std::fmt::Debug for AicpuPrograms {
    /// The programs' names and build ids (not their bytes).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = |p: &ferry_programs::Program| format!("{} (build id {:#x})", p.name, p.build_id);
        f.debug_struct("AicpuPrograms")
            .field("device_orchestrated", &p(self.device_orchestrated))
            .field("host_built_graph", &p(self.host_built_graph))
            .finish()
    }
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
            kernel_budget: crate::device::sched::DEFAULT_KERNEL_BUDGET,
            via_services: false,
            path: LaunchPath::default(),
            profile: DeviceProfile::default(),
            fixes: PathBFixes::NONE,
            handshake_layout: HandshakeLayout::COMBINED,
            handshake_timeout: crate::device::sched::CORE_DEADLINE,
            aicore_launch_latency: Duration::ZERO,
            aicore_start_after_line_fills: 0,
            launch_slots: 2,
            programs: AicpuPrograms::EMBEDDED,
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
pub(super) enum Source {
    Orch(OrchFn),
    Prebuilt(Arc<Vec<PrebuiltTask>>),
    /// Function `index` of an orchestration library.
    Library {
        library: Arc<super::orch_library::LoadedOrchLibrary>,
        index: usize,
    },
}

/// A callable: a named graph recipe and the variant that runs it.
#[derive(Clone, Debug)]
pub struct Callable {
    pub(super) name: String,
    pub(super) variant: Variant,
    pub(super) source: Source,
    pub(super) object: Option<&'static ferry_programs::Program>,
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
        if let Source::Orch(_) | Source::Library { .. } = self.source {
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
    /// Finished tasks per kernel, by name, built-ins then loaded kernels in id order (kernels
    /// with zero tasks left out).
    pub per_kernel: Vec<(String, u64)>,
    /// Wall time from launch to completion.
    pub wall: Duration,
    /// Variant of the run.
    pub variant: Variant,
    /// The run's span on the device clock (full path): from its first stream operation to its
    /// last completion boundary. `None` in process.
    pub device: Option<DeviceSpan>,
}

/// Where a run was on the device clock: from its start event (its first stream operation,
/// which the chip reaches once the run ahead of it completed) to the later of its two
/// completion boundaries, in device cycles.
///
/// # Examples
/// ```
/// use ferry_runtime::host::DeviceSpan;
/// let a = DeviceSpan { start_cycles: 1_000, end_cycles: 3_000, hz: 1_000_000 };
/// let b = DeviceSpan { start_cycles: 3_500, end_cycles: 6_000, hz: 1_000_000 };
/// assert_eq!(a.execution().as_micros(), 2_000);
/// assert_eq!(a.idle_before(&b).as_micros(), 500);
/// assert_eq!(b.idle_before(&a).as_micros(), 0, "no idle time when they overlap");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceSpan {
    /// The start event's device timestamp.
    pub start_cycles: u64,
    /// The later completion boundary's device timestamp.
    pub end_cycles: u64,
    /// The device clock's rate.
    pub hz: u64,
}

impl DeviceSpan {
    fn cycles(&self, c: u64) -> Duration {
        Duration::from_secs_f64(c as f64 / self.hz.max(1) as f64)
    }

    /// The run's device execution: start to last completion.
    pub fn execution(&self) -> Duration {
        self.cycles(self.end_cycles.saturating_sub(self.start_cycles))
    }

    /// The chip's idle time between this run's last completion and `next`'s first operation.
    pub fn idle_before(&self, next: &DeviceSpan) -> Duration {
        self.cycles(next.start_cycles.saturating_sub(self.end_cycles))
    }
}

/// What a finished run returns.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutput {
    /// Contents of every runner-owned tensor after the run, by `TensorId` (`None` for
    /// caller-owned device tensors).
    pub tensors: Vec<Option<Vec<f32>>>,
    /// Figures.
    pub stats: RunStats,
    /// The a5 host-built graph's scheduler diagnostics: the run its scheduler records belong to
    /// and the resident scheduler state it published (launch metadata). `None` for runs that
    /// stage no metadata. Taken only from the run's own successful publication.
    pub scheduler: Option<ferry_launch::transaction::SchedulerDiagnostics>,
}
