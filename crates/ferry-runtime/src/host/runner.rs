//! The host `DeviceRunner`: init, callables, and the per-run lifecycle (prepare here; layout,
//! launch, wait and finalize, DFX attachment, slots and diagnostics in the child modules).
mod device;
mod kernels;
mod launch;
pub(super) mod layout;
mod state;

pub use device::{NoInProcessPath, RunnerDevice};
pub(super) use launch::aicore_body;

use super::config::Source;
pub use super::config::{
    AicpuPrograms, Callable, DeviceSpan, LaunchPath, RunArgs, RunOutput, RunStats, RunnerConfig,
    TensorInit, Variant, MAX_LAUNCH_SLOTS,
};
use super::graph::GraphBuilder;
use super::handshake::{CoreHandshake, HandshakeRegion};
use super::sim_backend::{SimPlatform, SimProgramDevice};
use super::slots::{Claim, Executing, FullPath, Sides, SlotPool};
use crate::device::image::{RuntimeHeader, GUARD_BYTES, GUARD_FILL};
use crate::device::ops::DeviceOps;
use crate::device::program::AicpuProgram;
use crate::device::task::TensorInfo;
use crate::error::{ConfigError, DeviceFault, LaunchFailure, RunError, RunnerError};
use ferry_abi::arch::Arch;
use ferry_abi::launch::{InitArgs, KernelArgs, RegisterCallableArgs, MAX_CALLABLES};
use ferry_abi::regs::RegLayout;
use ferry_backend::{BackendDevice, CycleCounter, DeviceCounter, DevicePtr};
use ferry_launch::loader::LoaderBuilder;
use ferry_launch::transaction::RunId;
use ferry_launch::{LaunchDescriptor, LaunchStaging, MetadataRegion, RunStreams};
use layout::RunMemory;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of the runtime descriptor's launch-route prefix on the full path: the image header,
/// the part of the image that is the same for every run of one graph (`device::image`).
pub const ROUTE_PREFIX_BYTES: usize = std::mem::size_of::<RuntimeHeader>();

struct Allocs<D: BackendDevice> {
    device: D,
    ptrs: Vec<DevicePtr>,
}

impl<D: BackendDevice> Drop for Allocs<D> {
    fn drop(&mut self) {
        for p in self.ptrs.drain(..) {
            if let Err(e) = self.device.free(p) {
                tracing::warn!(%e, "freeing a run allocation failed");
            }
        }
    }
}

/// A prepared run: image and tensors are on the device, nothing is running.
pub struct PreparedRun<P: RunnerDevice = SimProgramDevice> {
    // Dropped after the allocations (field order): the runner is free only once they are.
    _allocs: Allocs<P::Device>,
    _claim: Claim,
    slot: usize,
    image: DevicePtr,
    result_off: u64,
    /// Where the loaded-kernel counts are, and how many.
    custom_counts: (u64, u32),
    handshake: HandshakeRegion,
    kargs: KernelArgs,
    tensors: Vec<(DevicePtr, u64, bool)>,
    variant: Variant,
    planned: Option<u64>,
    host_orchestration: Option<ferry_profile::HostOrchestration>,
    /// The orchestration library and function of a library callable, to name in its faults.
    function: Option<(String, String)>,
    /// The run stages resident scheduler state as launch metadata (a5 host-built graph): its
    /// scheduler diagnostics are exported only through `scheduler_diagnostics`.
    scheduler_metadata: bool,
}

impl<P: RunnerDevice> std::fmt::Debug for PreparedRun<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedRun")
            .field("image", &self.image)
            .field("variant", &self.variant)
            .finish()
    }
}

impl<P: RunnerDevice> PreparedRun<P> {
    /// Tasks the run will execute, when known before launch (host-built graphs).
    pub fn planned_tasks(&self) -> Option<u64> {
        self.planned
    }

    /// The host orchestrator's record of a host-built run: when it started, and the host time
    /// of every submit (`None` for a device-orchestrated run). It goes into the swimlane file
    /// as `host_orchestrator_phases` with `orchestrator_source: "host"`.
    pub fn host_orchestration(&self) -> Option<&ferry_profile::HostOrchestration> {
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
pub struct LaunchedRun<P: RunnerDevice = SimProgramDevice> {
    prepared: Option<PreparedRun<P>>,
    slot: usize,
    /// The run in its slot's launch transaction (full path).
    run_id: Option<RunId>,
    sides: Sides<P::Completion>,
    started: Instant,
    chip: P,
    finished: Option<Duration>,
    /// The launch transaction's report of a failed stream (full path), taken at retirement.
    stream_error: Option<ferry_backend::BackendError>,
    /// That failure was a run's ahead of this one (full path).
    inherited: bool,
    /// A kernel of the run outran its budget: a core is hung, the run's AICore launch never
    /// completes.
    hung: bool,
    /// The run's span on the device clock (full path), taken at retirement.
    device: Option<super::DeviceSpan>,
    /// The run's scheduler diagnostics (a5 host-built graph), taken from its successful
    /// publication.
    scheduler: Option<ferry_launch::transaction::SchedulerDiagnostics>,
}

impl<P: RunnerDevice> std::fmt::Debug for LaunchedRun<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchedRun").field("started", &self.started).finish()
    }
}

impl<P: RunnerDevice> LaunchedRun<P> {
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

impl<P: RunnerDevice> Drop for LaunchedRun<P> {
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

/// The in-process path's state of a runner: the device's in-process operations (`SimOps` on
/// the simulated chip, `host::sim_runner`) and the runtime's AICPU program linked into the
/// host, which the in-process launch runs on the device's AICPU threads.
pub(super) struct InProcess<O> {
    pub(super) ops: Arc<O>,
    pub(super) program: Arc<AicpuProgram>,
}

/// Drives runs on one device: the simulated chip's by default ([`DeviceRunner::new`],
/// [`DeviceRunner::init`]), or any [`RunnerDevice`].
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
pub struct DeviceRunner<P: RunnerDevice = SimProgramDevice> {
    /// The simulated platform [`DeviceRunner::new`] built (`None` from `init`, and on any
    /// other device).
    pub(super) platform: Option<SimPlatform>,
    device: P::Device,
    chip: P,
    /// The in-process path's state; `None` on a device that runs the full path only.
    pub(super) in_process: Option<InProcess<P::InProcessOps>>,
    device_ops: Arc<dyn DeviceOps>,
    cfg: RunnerConfig,
    regs_table: DevicePtr,
    callables: BTreeMap<u32, Callable>,
    /// The launch slots and which are held.
    pool: SlotPool,
    /// The run the chip executes (or last executed, not yet retired from its slot).
    executing: Option<Executing<P::Completion>>,
    epoch: u64,
    /// The private device root [`DeviceRunner::new`] made (removed on drop).
    pub(super) root: Option<std::path::PathBuf>,
    /// The `regs` table's bytes (a5 host-built graph stages them as launch metadata).
    regs_bytes: Vec<u8>,
    /// The full path's loader, programs, streams and launch slot (`None` in process).
    full: Option<FullPath<P>>,
    /// DFX profiling bases the next runs' `KernelArgs` carry (full path).
    dfx_profiling: Option<super::dfx::DfxProfiling>,
    /// The last finalized run's handshake, read back from device memory.
    last_handshake: Vec<CoreHandshake>,
    /// Built-in and loaded kernels ([`DeviceRunner::load_kernels`]); the AICore entries of
    /// each launch hold a handle for the loaded kernels' device entries.
    kernels: Arc<super::KernelRegistry<P::CustomKernels>>,
    /// The device clock's rate (its event timestamps' unit), read once at init.
    clock_hz: u64,
    /// The loaded kernels' spec table in device memory (`NULL` when none) and its entries.
    kernel_table: (DevicePtr, u32),
    /// The fault that took a core out of service (a kernel past its budget): the runner cannot
    /// launch again, and its drop leaves the hung core's launch, memory and streams alone.
    hung: Option<DeviceFault>,
}

impl<P: RunnerDevice> std::fmt::Debug for DeviceRunner<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceRunner")
            .field("cfg", &self.cfg)
            .field("in_flight", &self.is_busy())
            .finish()
    }
}

impl<P: RunnerDevice> DeviceRunner<P> {
    /// Refuses a configuration no runner can run on a device of `device_arch`: fewer than 2 or
    /// more than the arch's AICPU threads, a zero task window, launch slots out of range, or
    /// another arch than the device's.
    ///
    /// # Errors
    /// [`RunnerError::Config`] naming the refused setting.
    pub(super) fn check_config(cfg: &RunnerConfig, device_arch: Arch) -> Result<(), RunnerError> {
        let max = cfg.arch.profile().max_aicpu_threads;
        if !(2..=max).contains(&cfg.aicpu_threads) {
            return Err(ConfigError::AicpuThreads {
                threads: cfg.aicpu_threads,
                arch: cfg.arch,
                max,
            }
            .into());
        }
        if cfg.task_window == 0 {
            return Err(ConfigError::ZeroTaskWindow.into());
        }
        if !(1..=MAX_LAUNCH_SLOTS).contains(&cfg.launch_slots) {
            return Err(ConfigError::LaunchSlots {
                slots: cfg.launch_slots,
                max: MAX_LAUNCH_SLOTS,
            }
            .into());
        }
        if device_arch != cfg.arch {
            return Err(
                ConfigError::ArchMismatch { device: device_arch, configured: cfg.arch }.into()
            );
        }
        Ok(())
    }

    /// The runner on `chip`'s cores: writes the `regs` table (the cores' register-window
    /// bases, `CoreRegisters::reg_bases`), inits the linked AICPU program (with in-process operations `ops`) and (full path) loads the AICPU program through
    /// `ferry_launch`'s loader with the configured method, whose init entry latches the
    /// [`InitArgs`] once. The device half's operations are `ops` in process and, on the full
    /// path or with [`RunnerConfig::via_services`], what `services` attaches once the program
    /// is loaded (`None`: the services table is from another ABI version). `cfg` is checked
    /// ([`check_config`](Self::check_config)).
    ///
    /// # Errors
    /// [`RunnerError::Config`] ([`ConfigError::ServicesAbi`] when `services` gives none); a
    /// device or loader failure.
    pub(super) fn assemble(
        device: P::Device,
        chip: P,
        cfg: RunnerConfig,
        ops: Option<Arc<P::InProcessOps>>,
        services: impl FnOnce(&P) -> Option<Arc<dyn DeviceOps>>,
    ) -> Result<DeviceRunner<P>, RunnerError> {
        if cfg.path == LaunchPath::InProcess && ops.is_none() {
            return Err(ConfigError::NoInProcessPath.into());
        }
        let layout = RegLayout::of(cfg.arch);
        let mut table = vec![0u64; layout.max_physical_cores as usize];
        for (t, b) in table.iter_mut().zip(chip.reg_bases()) {
            *t = b;
        }
        let bytes: Vec<u8> = table.iter().flat_map(|b| b.to_le_bytes()).collect();
        let regs_table = device.malloc(bytes.len() as u64).map_err(RunnerError::from_backend)?;
        device.copy_htod(&bytes, regs_table).map_err(RunnerError::from_backend)?;
        let in_process = ops.map(|ops| {
            let program = Arc::new(AicpuProgram::new());
            program.init(&InitArgs::new(device.ordinal()));
            InProcess { ops, program }
        });
        let full = match cfg.path {
            LaunchPath::InProcess => None,
            LaunchPath::DeviceProgram(method) => {
                let built = (|| {
                    let loader = LoaderBuilder::new(&chip)
                        .method(method)
                        .init_args(InitArgs::new(device.ordinal()))
                        .build()?;
                    // Each runtime's program is loaded on its variant's first callable: a
                    // runner binds only the runtimes it runs, and with the vendor's Path A latch
                    // a process can bind one (the loader refuses a second with
                    // `ResidentMismatch`).
                    Ok::<_, RunnerError>(FullPath {
                        programs: [None, None],
                        loader,
                        images: cfg.programs,
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
        let device_ops: Arc<dyn DeviceOps> = match &in_process {
            Some(ip) if !cfg.via_services && full.is_none() => ip.ops.clone(),
            _ => services(&chip).ok_or(RunnerError::Config(ConfigError::ServicesAbi))?,
        };
        Ok(DeviceRunner {
            platform: None,
            in_process,
            device_ops,
            clock_hz: DeviceCounter::cycle_counter(&device).hz(),
            device,
            chip,
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
            kernels: Arc::new(super::KernelRegistry::default()),
            hung: None,
            kernel_table: (DevicePtr::NULL, 0),
        })
    }

    /// The in-process path's state of a runner without a full path, which always has it
    /// ([`assemble`](Self::assemble) refuses the in-process path without it).
    fn in_process(&self) -> &InProcess<P::InProcessOps> {
        match &self.in_process {
            Some(ip) => ip,
            None => unreachable!("`assemble` refuses the in-process path without its operations"),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RunnerConfig {
        &self.cfg
    }

    /// The device.
    pub fn device(&self) -> &P::Device {
        &self.device
    }

    /// The chip as the seam's program device (and orchestration library loader).
    pub(super) fn program_device(&self) -> &P {
        &self.chip
    }

    /// The last finalized run's handshake per core, read back from device memory after the run
    /// (the readback that diagnoses the Path B hang (docs/design/launch.md)): what the AICPU saw against what memory holds. Empty before the
    /// first run.
    pub fn last_handshake(&self) -> &[CoreHandshake] {
        &self.last_handshake
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
            let program = full.program(callable.variant)?;
            let mut entry = None;
            let symbol;
            let object: &[u8] = match (callable.variant, &callable.source, callable.object) {
                (Variant::DeviceOrchestrated, Source::Library { library, .. }, _) => {
                    symbol = format!("{}{}", ferry_abi::orch_lib::ORCH_FN_PREFIX, callable.name);
                    entry = Some(symbol.as_str());
                    library.bytes()
                }
                (Variant::DeviceOrchestrated, _, Some(o)) => o.bytes,
                (Variant::DeviceOrchestrated, _, None) => {
                    return Err(RunnerError::NoOrchestrationObject {
                        callable: callable.name.clone(),
                    })
                }
                (Variant::HostBuiltGraph, _, _) => &[],
            };
            program.register_callable(id, object, entry)?;
        } else if let (Variant::DeviceOrchestrated, Source::Library { .. }) =
            (callable.variant, &callable.source)
        {
            // The in-process path links the device half into the host: it has no AICPU
            // program to load a library into.
            return Err(RunnerError::NoOrchestrationObject { callable: callable.name.clone() });
        } else if let (Variant::DeviceOrchestrated, Source::Orch(f)) =
            (callable.variant, &callable.source)
        {
            let f = *f;
            let mut rca =
                RegisterCallableArgs::new(id, 0, 0).map_err(|_| RunnerError::CallableId { id })?;
            // Names longer than the ABI field are cut: the name is only the lookup key here.
            let name: String = callable.name.chars().take(63).collect();
            rca.set_device_orch_func_name(&name).map_err(RunnerError::CallableName)?;
            self.in_process().program.register_callable(&rca, &|n| (n == name).then_some(f))?;
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
                full.program(callable.variant).and_then(|p| p.register_callable(id, &[], None))?;
            }
        }
        if let Some(ip) = &self.in_process {
            ip.program.unregister_callable(id);
        }
        Ok(())
    }

    /// Prepares a run of callable `id` on the next free launch slot: allocates and uploads its
    /// tensors, builds the graph on the host (host-built variant), lays out the runtime image
    /// and uploads its per-run suffix into the slot. It may run while another slot's run
    /// executes.
    ///
    /// # Errors
    /// [`RunError::Busy`] when every launch slot is held, [`RunError::NotRegistered`], [`RunError::MisalignedTensor`], a refused
    /// workload ([`RunError::Fault`], [`RunError::Cycle`]) for host-built graphs, or a device
    /// error. Nothing stays allocated on error.
    pub fn prepare(&mut self, id: u32, args: RunArgs) -> Result<PreparedRun<P>, RunError> {
        if let Some(f) = self.hung {
            return Err(RunError::Hung(f));
        }
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
    ) -> Result<PreparedRun<P>, RunError> {
        let dev = &self.device.clone();
        let mut allocs = Allocs { device: dev.clone(), ptrs: Vec::new() };
        let mut tensors = Vec::with_capacity(args.tensors.len());
        // The run's own allocations, each followed by a guard band (see `device::image`): a
        // loaded kernel that writes past its output is caught there, naming it, instead of
        // corrupting whatever comes next.
        let mut guards: Vec<(u64, u64)> = Vec::new();
        const BAND: [u8; GUARD_BYTES as usize] = [GUARD_FILL; GUARD_BYTES as usize];
        let mut guarded = |bytes: &[u8], len: u64| -> Result<DevicePtr, RunError> {
            let len = len.max(4);
            let p = dev.malloc(len + GUARD_BYTES).map_err(RunError::from_backend)?;
            allocs.ptrs.push(p);
            dev.copy_htod(bytes, p).map_err(RunError::from_backend)?;
            dev.copy_htod(&BAND, p.add(len)).map_err(RunError::from_backend)?;
            guards.push((p.0, len));
            Ok(p)
        };
        for (i, t) in args.tensors.iter().enumerate() {
            match t {
                TensorInit::Data(v) => {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    let p = guarded(&bytes, bytes.len() as u64)?;
                    tensors.push((p, bytes.len() as u64, true));
                }
                TensorInit::Zeros(n) => {
                    let bytes = vec![0u8; n * 4];
                    let p = guarded(&bytes, bytes.len() as u64)?;
                    tensors.push((p, bytes.len() as u64, true));
                }
                TensorInit::Device { addr, bytes } => {
                    if addr.0 % 4 != 0 || bytes % 4 != 0 {
                        return Err(RunError::MisalignedTensor {
                            tensor: i,
                            addr: addr.0,
                            bytes: *bytes,
                        });
                    }
                    tensors.push((*addr, *bytes, false));
                }
            }
        }
        let scratch = if args.scratch_bytes > 0 {
            // The arena's own bytes are whatever the allocator hands out, as before.
            let p = guarded(&[], args.scratch_bytes)?;
            (p.0, args.scratch_bytes)
        } else {
            (0, 0)
        };
        let infos: Vec<TensorInfo> =
            tensors.iter().map(|&(p, b, _)| TensorInfo { addr: p.0, len: b / 4 }).collect();
        let mut host_orchestration = None;
        let graph = match (callable.variant, &callable.source) {
            (Variant::DeviceOrchestrated, _) => None,
            (Variant::HostBuiltGraph, _) => {
                let check = |a: u64, b: u64| dev.is_allocated(DevicePtr(a), b);
                let origin_ns = ferry_profile::host_now_ns();
                let read = |a: u64, out: &mut [u8]| dev.copy_dtoh(DevicePtr(a), out).is_ok();
                let mut gb =
                    GraphBuilder::new(infos.clone(), args.scalars.clone(), scratch, Some(&check))
                        .with_reader(&read)
                        .with_custom_kernels(self.kernels.custom_kernels());
                callable.build_graph(&mut gb)?;
                let phases = gb.host_phases();
                let g = gb.finish()?;
                host_orchestration = Some(ferry_profile::HostOrchestration {
                    clock_domain_id: ferry_profile::host_clock_domain_id(),
                    origin_ns,
                    expected_records: g.tasks.len() as u64,
                    phases,
                });
                Some(g)
            }
        };
        let (image_bytes, hdr) = self.layout(
            id,
            callable.variant,
            &infos,
            &args.scalars,
            graph.as_ref(),
            RunMemory { scratch, guards: &guards },
        );
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
            staging.stage_launch_metadata(metadata)?;
            // The header is the cached launch-route prefix; the per-run suffix (run block,
            // device-written regions, tensors, scalars, host-built graph) is uploaded
            // synchronously by prepare_runtime_args, so an identical graph publishes nothing.
            let mut image_bytes = image_bytes;
            let suffix = image_bytes.split_off(ROUTE_PREFIX_BYTES);
            let desc =
                LaunchDescriptor::new(image_bytes, ROUTE_PREFIX_BYTES)?.with_run_suffix(suffix);
            let mut kargs = KernelArgs::new(0, self.regs_table.0);
            if let Some(p) = &self.dfx_profiling {
                p.apply(&mut kargs);
            }
            staging.prepare_runtime_args(&desc, kargs)?;
            let kargs = staging.payload().ok_or(LaunchFailure::NoPayload)?;
            (DevicePtr(kargs.runtime_args), kargs)
        } else {
            let image = dev.malloc(hdr.image_bytes).map_err(RunError::from_backend)?;
            allocs.ptrs.push(image);
            dev.copy_htod(&image_bytes, image).map_err(RunError::from_backend)?;
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
            custom_counts: (hdr.custom_count_off, hdr.kernel_table_count),
            handshake: HandshakeRegion::of(&hdr),
            kargs,
            tensors,
            variant: callable.variant,
            planned: graph.as_ref().map(|g| g.tasks.len() as u64),
            host_orchestration,
            function: callable.library_function().map(|(l, f)| (l.to_owned(), f.to_owned())),
            scheduler_metadata: self.full.is_some()
                && self.cfg.arch == Arch::A5
                && callable.variant == Variant::HostBuiltGraph,
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
        if self.hung.is_some() {
            // A hung core keeps its launch, its run's memory and the streams: the drop leaves
            // them alone (see `Drop`).
            return Ok(());
        }
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
            full.retire_all(self.cfg.timeout).map_err(RunnerError::Retire)?;
        }
        self.device.free(self.regs_table).map_err(RunnerError::from_backend)?;
        self.regs_table = DevicePtr::NULL;
        if !self.kernel_table.0.is_null() {
            self.device.free(self.kernel_table.0).map_err(RunnerError::from_backend)?;
            self.kernel_table = (DevicePtr::NULL, 0);
        }
        Ok(())
    }
}

impl<P: RunnerDevice> Drop for DeviceRunner<P> {
    fn drop(&mut self) {
        if self.hung.is_some() {
            // A core still runs a kernel that never returned: it holds the chip (and so the
            // device memory it may still touch) through its entry, and its launch never
            // completes. Waiting for the launch slots or the entry closures would wait for
            // ever; the streams and the loader stay alive with it. Only the device root goes.
            if let Some(full) = self.full.take() {
                std::mem::forget(full);
            }
            if let Some(root) = self.root.take() {
                let _ = std::fs::remove_dir_all(root);
            }
            return;
        }
        if !self.regs_table.is_null() {
            let _ = self.device.free(self.regs_table);
        }
        if !self.kernel_table.0.is_null() {
            let _ = self.device.free(self.kernel_table.0);
        }
        // The entry closures of the last launch hold the device operations (and through them the chip) until
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
