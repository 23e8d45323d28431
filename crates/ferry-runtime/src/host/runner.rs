//! The host `DeviceRunner`: init, callables, and the per-run lifecycle.
use super::graph::{GraphBuilder, HostGraph, PrebuiltTask};
use super::sim_ops::SimOps;
use crate::device::aicore::aicore_execute;
use crate::device::image::{
    align64, as_bytes, from_bytes, RunResult, RuntimeHeader, TensorRecord, RESULT_FAILED,
    RESULT_OK, VARIANT_DEVICE_ORCH, VARIANT_HOST_GRAPH,
};
use crate::device::kernels::KERNELS;
use crate::device::ops::DeviceOps;
use crate::device::program::AicpuProgram;
use crate::device::sched::PAYLOAD_PAIR_BYTES;
use crate::device::task::{OrchFn, TensorInfo};
use crate::error::{DeviceFault, RunError, RunnerError};
use ferry_abi::handshake::{core_type_for_index, Handshake};
use ferry_abi::launch::{
    AbiRecord, AicoreLaunchArgs, InitArgs, KernelArgs, RegisterCallableArgs, MAX_CALLABLES,
};
use ferry_abi::regs::{RegLayout, AICORE_EXIT_SIGNAL};
use ferry_sim::cores::{Chip, Completion, CoreConfig};
use ferry_sim::{Arch, Device, DevicePtr, Platform, PlatformBuilder};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Run the device half through the simulated AICPU OS's services table
    /// ([`super::OsServicesOps`], what a device program gets) instead of calling the chip
    /// directly ([`SimOps`]).
    pub via_services: bool,
}

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
        }
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
}

impl Callable {
    /// A callable whose graph comes from the orchestration function `orch`.
    pub fn new(name: impl Into<String>, variant: Variant, orch: OrchFn) -> Callable {
        Callable { name: name.into(), variant, source: Source::Orch(orch) }
    }

    /// A host-built callable from a prebuilt workload (explicit dependencies may point at any
    /// task; cycles are found in prepare).
    pub fn prebuilt(name: impl Into<String>, tasks: Vec<PrebuiltTask>) -> Callable {
        Callable {
            name: name.into(),
            variant: Variant::HostBuiltGraph,
            source: Source::Prebuilt(Arc::new(tasks)),
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

/// A run's hold on its runner: the runner accepts another `prepare` only once the holder (a
/// prepared or launched run) is dropped.
#[derive(Debug)]
struct Claim(Arc<AtomicBool>);

impl Claim {
    fn take(flag: &Arc<AtomicBool>) -> Claim {
        // Relaxed: the runner is `&mut` here, so no other thread races for the flag; it only
        // has to be seen by the run's own drop (same Arc) and by later calls on this thread.
        flag.store(true, Ordering::Relaxed);
        Claim(flag.clone())
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load in `DeviceRunner::is_busy`, so a runner that sees
        // itself free also sees the run's memory released (dropped before the claim).
        self.0.store(false, Ordering::Release);
    }
}

/// A prepared run: image and tensors are on the device, nothing is running.
pub struct PreparedRun {
    // Dropped after the allocations (field order): the runner is free only once they are.
    _allocs: Allocs,
    _claim: Claim,
    image: DevicePtr,
    result_off: u64,
    kargs: KernelArgs,
    tensors: Vec<(DevicePtr, u64, bool)>,
    variant: Variant,
    planned: Option<u64>,
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

    /// The `KernelArgs` the AICPU exec entry receives.
    pub fn kernel_args(&self) -> &KernelArgs {
        &self.kargs
    }
}

/// A launched run.
pub struct LaunchedRun {
    prepared: Option<PreparedRun>,
    aicore: Completion,
    aicpu: Completion,
    started: Instant,
    chip: Chip,
    finished: Option<Duration>,
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

    /// Waits for both launches, reaping the cores if the AICPU side is done but a core never
    /// got its exit. `false` when the AICPU threads are still running after `timeout`.
    fn settle(&mut self, timeout: Duration) -> bool {
        if self
            .aicpu
            .wait_timeout(timeout)
            .is_err_and(|e| matches!(e, ferry_sim::DeviceError::Timeout { .. }))
        {
            reap(&self.chip);
            if self
                .aicpu
                .wait_timeout(Duration::from_secs(2))
                .is_err_and(|e| matches!(e, ferry_sim::DeviceError::Timeout { .. }))
            {
                return false;
            }
        }
        if self.aicore.wait_timeout(Duration::from_secs(1)).is_err() && !self.aicore.is_done() {
            reap(&self.chip);
            if self.aicore.wait_timeout(Duration::from_secs(10)).is_err() && !self.aicore.is_done()
            {
                return false;
            }
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

/// Writes EXIT into every core's window (the host-side reset that reaps cores whose scheduler
/// did not shut them down).
fn reap(chip: &Chip) {
    let layout = RegLayout::of(chip.device().arch().arch);
    for i in 0..chip.config().cores() {
        chip.window(i).aicpu_write(layout.data_main_base as u32, AICORE_EXIT_SIGNAL);
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
    in_flight: Arc<AtomicBool>,
    epoch: u64,
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
        let p = PlatformBuilder::new(cfg.arch).hbm_bytes(cfg.hbm_bytes).build()?;
        let dev = p.device(0)?.clone();
        let mut r = DeviceRunner::init(dev, cfg)?;
        r._platform = Some(p);
        Ok(r)
    }

    /// Init on an existing device: starts the chip's threads, writes the `regs` table, and runs
    /// the AICPU program's init entry (`InitArgs`) once.
    ///
    /// # Errors
    /// [`RunnerError::Config`] for fewer than 2 AICPU threads, no cores or a zero task window; a
    /// simulator failure.
    pub fn init(device: Device, cfg: RunnerConfig) -> Result<DeviceRunner, RunnerError> {
        if cfg.aicpu_threads < 2 {
            return Err(RunnerError::Config(format!(
                "{} AICPU threads: a run needs one orchestrator and at least one scheduler",
                cfg.aicpu_threads
            )));
        }
        if cfg.task_window == 0 {
            return Err(RunnerError::Config("task window of 0".into()));
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
        let device_ops: Arc<dyn DeviceOps> = if cfg.via_services {
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
            in_flight: Arc::new(AtomicBool::new(false)),
            epoch: 0,
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
        if let (Variant::DeviceOrchestrated, Source::Orch(f)) = (callable.variant, &callable.source)
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
        self.callables.remove(&id).ok_or(RunnerError::NotRegistered { id })?;
        self.program.unregister_callable(id);
        Ok(())
    }

    /// Prepares a run of callable `id`: allocates and uploads its tensors, builds the graph on
    /// the host (host-built variant), lays out and uploads the runtime image.
    ///
    /// # Errors
    /// [`RunError::Busy`], [`RunError::NotRegistered`], [`RunError::InvalidArgs`], a refused
    /// workload ([`RunError::Fault`], [`RunError::Cycle`]) for host-built graphs, or a device
    /// error. Nothing stays allocated on error.
    pub fn prepare(&mut self, id: u32, args: RunArgs) -> Result<PreparedRun, RunError> {
        if self.is_busy() {
            return Err(RunError::Busy);
        }
        let callable = self.callables.get(&id).ok_or(RunError::NotRegistered { id })?.clone();
        let claim = Claim::take(&self.in_flight);
        self.prepare_inner(id, &callable, args, claim)
    }

    fn prepare_inner(
        &mut self,
        id: u32,
        callable: &Callable,
        args: RunArgs,
        claim: Claim,
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
        let graph = match (callable.variant, &callable.source) {
            (Variant::DeviceOrchestrated, _) => None,
            (Variant::HostBuiltGraph, source) => {
                let check = |a: u64, b: u64| dev.translate(DevicePtr(a), b).is_ok();
                let mut gb =
                    GraphBuilder::new(infos.clone(), args.scalars.clone(), scratch, Some(&check));
                match source {
                    Source::Orch(f) => f(&mut gb).map_err(DeviceFault::Submit)?,
                    Source::Prebuilt(tasks) => gb.record_prebuilt(tasks)?,
                }
                Some(gb.finish()?)
            }
        };
        let (image_bytes, hdr) =
            self.layout(id, callable.variant, &infos, &args.scalars, graph.as_ref(), scratch);
        let image = dev.malloc(hdr.image_bytes)?;
        allocs.ptrs.push(image);
        dev.copy_htod(&image_bytes, image)?;
        let kargs = KernelArgs::new(image.0, self.regs_table.0);
        Ok(PreparedRun {
            _claim: claim,
            _allocs: allocs,
            image,
            result_off: hdr.result_off,
            kargs,
            tensors,
            variant: callable.variant,
            planned: graph.as_ref().map(|g| g.tasks.len() as u64),
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
        h.handshake_off = take(w * 64);
        h.payload_off = take(w * PAYLOAD_PAIR_BYTES);
        h.tensor_off = take(tensors.len() as u64 * 16);
        h.scalar_off = take(scalars.len() as u64 * 8);
        h.result_off = take(std::mem::size_of::<RunResult>() as u64);
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
        h.run_epoch = self.epoch;
        h.task_window = cfg.task_window;
        h.tensor_count = tensors.len() as u32;
        h.scalar_count = scalars.len() as u32;
        h.graph_task_count = recs.len() as u32;
        h.graph_pred_count = preds.len() as u32;
        h.arch = cfg.arch as u32;
        h.scratch_addr = scratch.0;
        h.scratch_bytes = scratch.1;
        h.regs_table = self.regs_table.0;
        let layout = RegLayout::of(cfg.arch);
        h.regs_count = layout.max_physical_cores;
        h.max_physical_cores = layout.max_physical_cores;

        let mut img = vec![0u8; h.image_bytes as usize];
        let mut put = |o: u64, b: &[u8]| img[o as usize..o as usize + b.len()].copy_from_slice(b);
        put(0, as_bytes(&h));
        for i in 0..w {
            let slot = Handshake::pretyped(core_type_for_index(i as u32, cfg.aic));
            put(h.handshake_off + 64 * i, slot.as_bytes());
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
        let layout = RegLayout::of(self.cfg.arch);
        let cores = self.cfg.aic + self.cfg.aiv;
        for i in 0..cores {
            let w = self.chip.window(i);
            w.aicpu_write(layout.data_main_base as u32, 0);
            w.core_write(layout.cond as u32, 0);
        }
        let core_args = AicoreLaunchArgs::from(&p.kargs);
        let ops = self.device_ops.clone();
        let aicore = match self.chip.launch_aicore(
            cores,
            Arc::new(move |ctx: ferry_sim::cores::CoreCtx| {
                aicore_execute(&*ops, &core_args, ctx.index, ctx.index).map_err(|e| e.to_string())
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
        Ok(LaunchedRun {
            prepared: Some(p),
            aicore,
            aicpu,
            started: Instant::now(),
            chip: self.chip.clone(),
            finished: None,
        })
    }

    /// Whether the run has finished (both launches returned).
    pub fn poll(&self, run: &LaunchedRun) -> bool {
        run.aicpu.is_done() && run.aicore.is_done()
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
        if run.aicpu.wait_timeout(timeout).is_err() && !run.aicpu.is_done() {
            return Ok(false);
        }
        self.wait(run).map(|_| true)
    }

    /// Waits for the run to finish (up to the configured timeout, then reaps the cores).
    ///
    /// # Errors
    /// [`RunError::Timeout`] when the device did not finish in time.
    pub fn wait(&mut self, run: &mut LaunchedRun) -> Result<Duration, RunError> {
        if run.settle(self.cfg.timeout) {
            Ok(run.finished.unwrap_or_default())
        } else {
            Err(RunError::Timeout { ms: self.cfg.timeout.as_millis() as u64 })
        }
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
                // Device threads may still touch the run's memory: keep it (and the claim on the
                // runner) for the rest of the process; do not wait again on drop.
                if let Some(p) = run.prepared.take() {
                    std::mem::forget(p);
                }
                run.finished = Some(Duration::ZERO);
                return Err(e);
            }
        };
        let p = run.prepared.take().ok_or(RunError::Busy)?;
        let mut rb = vec![0u8; std::mem::size_of::<RunResult>()];
        self.device.copy_dtoh(p.image.add(p.result_off), &mut rb)?;
        let r: RunResult = from_bytes(&rb).unwrap_or_default();
        if let Err(e) = run.aicpu.wait_timeout(Duration::ZERO) {
            if r.status != RESULT_FAILED {
                return Err(e.into());
            }
        }
        match r.status {
            RESULT_OK => {}
            RESULT_FAILED => {
                return Err(match DeviceFault::decode(r.error_code, r.error_task, r.error_detail) {
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
        self.device.free(self.regs_table)?;
        self.regs_table = DevicePtr::NULL;
        Ok(())
    }
}

impl Drop for DeviceRunner {
    fn drop(&mut self) {
        if !self.regs_table.is_null() {
            let _ = self.device.free(self.regs_table);
        }
        // The entry closures of the last launch hold `SimOps` (and through it the chip) until
        // their chip thread lets go of them, just after the launch completes. Let them go first,
        // so the chip's last reference is dropped here and not on one of its own threads (which
        // cannot join itself).
        let deadline = Instant::now() + Duration::from_secs(5);
        // `device_ops` is either its own allocation or a second handle on `ops`.
        let baseline = if self.cfg.via_services { 1 } else { 2 };
        while Arc::strong_count(&self.device_ops) > baseline && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl DeviceRunner {
    /// Releases a prepared run that will not be launched (dropping it does the same).
    pub fn release(&mut self, run: PreparedRun) {
        drop(run);
    }

    /// Attaches DFX collection (`super::dfx::DfxSession::device`) to the runs launched from now
    /// on, or detaches it with `None`. The runner calls the device half linked into the host
    /// process; a separately loaded AICPU program does not see it.
    pub fn attach_dfx(&mut self, dfx: Option<Arc<crate::device::dfx::DfxDevice>>) {
        self.program.attach_dfx(dfx);
    }

    /// Whether a run is prepared or in flight on this runner.
    pub fn is_busy(&self) -> bool {
        // Acquire: pairs with the Release store in `Claim::drop`.
        self.in_flight.load(Ordering::Acquire)
    }
}
