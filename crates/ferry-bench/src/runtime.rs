//! `ferry bench runtime`: task throughput and per-task dispatch overhead on the storm, against a
//! baseline measured in the same run (the same kernel called directly in a host loop over the
//! same device memory).
use crate::median;
use ferry_runtime::device::image::F32Slice;
use ferry_runtime::device::kernels::{execute, KernelCall, K_ADD_SCALAR};
use ferry_runtime::error::{RunError, RunnerError};
use ferry_runtime::examples::{storm, ExampleRun, ExampleVerifyError, STORM_LANES, STORM_LANE_LEN};
use ferry_runtime::host::{DeviceRunner, RunnerConfig, Variant};
use std::fmt::Write as _;
use std::time::Instant;

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeBenchConfig {
    /// The chip.
    pub runner: RunnerConfig,
    /// Storm tasks per run.
    pub tasks: u64,
    /// Timed runs of each variant, interleaved; the report gives their medians. A single storm
    /// varies by a third from run to run on a 2-core machine (which thread the host schedules
    /// when is not ours to choose), so one run is no figure.
    pub rounds: u32,
}

impl Default for RuntimeBenchConfig {
    fn default() -> Self {
        RuntimeBenchConfig {
            runner: RunnerConfig::default_for(ferry_sim::Arch::A2a3),
            tasks: 50_000,
            rounds: 7,
        }
    }
}

/// Why the bench failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Building the runner failed.
    #[error(transparent)]
    Runner(#[from] RunnerError),
    /// A run failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A run produced wrong results.
    #[error(transparent)]
    Verify(#[from] ExampleVerifyError),
    /// The direct kernel call's tensor is not in device memory.
    #[error("the direct call's tensor")]
    Translate(#[from] ferry_runtime::device::ops::TranslateError),
    /// The direct kernel call refused its arguments.
    #[error("the direct kernel call")]
    Kernel(#[from] ferry_runtime::KernelFault),
    /// The contention bench could not start its busy loops.
    #[error("{0}")]
    Contention(String),
}

/// Results.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeBenchReport {
    /// Arch name.
    pub arch: &'static str,
    /// AICPU threads (1 orchestrator + schedulers).
    pub aicpu_threads: u32,
    /// AICore workers.
    pub cores: u32,
    /// Storm tasks per run.
    pub tasks: u64,
    /// Timed runs of each variant (interleaved); the times below are their medians.
    pub rounds: u32,
    /// Device-orchestrated runs: median wall seconds from launch to completion.
    pub device_orch_wall_s: f64,
    /// Host-built graph runs: median wall seconds from launch to completion.
    pub host_graph_wall_s: f64,
    /// Host-built graph runs: median seconds spent building and uploading the graph in prepare.
    pub host_graph_prepare_s: f64,
    /// Baseline: nanoseconds per task calling the kernel directly in a host loop.
    pub baseline_ns_per_task: f64,
    /// Yields that found the CPUs busy during the device-orchestrated runs, all rounds together
    /// (`ferry_wait::YieldGate::long_yields`): each closed the process's yield gate for a second,
    /// and the run's waits parked where they would have yielded. 0: its waits yielded as on an
    /// idle machine throughout.
    pub device_orch_long_yields: u64,
    /// As `device_orch_long_yields`, during the host-built graph runs.
    pub host_graph_long_yields: u64,
}

impl RuntimeBenchReport {
    /// Device-orchestrated tasks per second.
    pub fn tasks_per_s(&self) -> f64 {
        self.tasks as f64 / self.device_orch_wall_s
    }

    /// Device-orchestrated wall nanoseconds per task.
    pub fn ns_per_task(&self) -> f64 {
        self.device_orch_wall_s * 1e9 / self.tasks as f64
    }

    /// Host-built graph wall nanoseconds per task.
    pub fn host_graph_ns_per_task(&self) -> f64 {
        self.host_graph_wall_s * 1e9 / self.tasks as f64
    }

    /// Per-task dispatch overhead: wall time per task beyond the baseline kernel call.
    pub fn dispatch_overhead_ns(&self) -> f64 {
        self.ns_per_task() - self.baseline_ns_per_task
    }

    /// The report as one JSON object.
    pub fn to_json(&self) -> String {
        format!(
            concat!(
                "{{\"area\":\"runtime\",\"arch\":\"{}\",\"aicpu_threads\":{},\"cores\":{},",
                "\"storm_tasks\":{},\"rounds\":{},\"device_orch_wall_s\":{:.4},",
                "\"device_orch_tasks_per_s\":{:.0},",
                "\"device_orch_ns_per_task\":{:.0},\"host_graph_wall_s\":{:.4},",
                "\"host_graph_tasks_per_s\":{:.0},\"host_graph_ns_per_task\":{:.0},",
                "\"host_graph_prepare_s\":{:.4},",
                "\"baseline_direct_call_ns_per_task\":{:.0},\"dispatch_overhead_ns_per_task\":{:.0},",
                "\"ns_per_task_vs_baseline\":{:.2},\"device_orch_long_yields\":{},",
                "\"host_graph_long_yields\":{}}}"
            ),
            self.arch,
            self.aicpu_threads,
            self.cores,
            self.tasks,
            self.rounds,
            self.device_orch_wall_s,
            self.tasks_per_s(),
            self.ns_per_task(),
            self.host_graph_wall_s,
            self.tasks as f64 / self.host_graph_wall_s,
            self.host_graph_ns_per_task(),
            self.host_graph_prepare_s,
            self.baseline_ns_per_task,
            self.dispatch_overhead_ns(),
            self.ns_per_task() / self.baseline_ns_per_task,
            self.device_orch_long_yields,
            self.host_graph_long_yields,
        )
    }
}

impl crate::AreaReport for RuntimeBenchReport {
    fn to_json(&self) -> String {
        RuntimeBenchReport::to_json(self)
    }

    fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "task runtime on a simulated {} chip: {} AICPU threads, {} cores, storm of {} tasks \
             (medians of {} rounds)",
            self.arch, self.aicpu_threads, self.cores, self.tasks, self.rounds
        );
        let _ = writeln!(
            s,
            "  device-orchestrated: {:.0} tasks/s ({:.0} ns/task)",
            self.tasks_per_s(),
            self.ns_per_task()
        );
        let _ = writeln!(
            s,
            "  host-built graph:    {:.0} tasks/s ({:.0} ns/task; prepare {:.1} ms)",
            self.tasks as f64 / self.host_graph_wall_s,
            self.host_graph_ns_per_task(),
            self.host_graph_prepare_s * 1e3
        );
        let _ = writeln!(
            s,
            "  direct kernel call baseline {:.0} ns/task; dispatch overhead {:.0} ns/task",
            self.baseline_ns_per_task,
            self.dispatch_overhead_ns()
        );
        let _ = write!(
            s,
            "  yields that found the CPUs busy: {} device-orchestrated, {} host-built",
            self.device_orch_long_yields, self.host_graph_long_yields
        );
        s
    }
}

/// `ferry bench runtime`: [`run`] with the default configuration, a 5,000-task storm in 3
/// rounds with `quick`.
///
/// # Errors
/// As [`run`].
pub fn measure(quick: bool) -> Result<RuntimeBenchReport, BenchError> {
    let mut cfg = RuntimeBenchConfig::default();
    if quick {
        cfg.tasks = 5_000;
        cfg.rounds = 3;
    }
    run(&cfg)
}

/// A runner on `runner`'s chip with the `tasks`-task storm registered as callable 0, after two
/// verified warm-up runs of a smaller storm (first runs on a fresh chip pay for page faults and
/// cold caches).
///
/// # Errors
/// [`BenchError`] when the runner cannot be built or a warm-up run fails or is wrong.
pub(crate) fn warm_storm(
    runner: RunnerConfig,
    tasks: u64,
) -> Result<(DeviceRunner, ExampleRun), BenchError> {
    let mut r = DeviceRunner::new(runner)?;
    let ex = storm(tasks);
    r.register_callable(0, ex.callable.clone())?;
    let warm = storm(tasks.min(5_000));
    for _ in 0..2 {
        warm.verify(&r.run(0, warm.args.clone())?)?;
    }
    Ok((r, ex))
}

/// Waits until `gate` is open (a long yield of a warm-up run closes it for
/// [`ferry_sim::wait::CONTENDED_HOLD`], and a storm started then would park where it yields on an
/// idle machine); returns its long yields so far.
fn gate_open(gate: &ferry_sim::wait::YieldGate) -> u64 {
    while !gate.may_yield_at(ferry_wait::now_ns()) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    gate.long_yields()
}

/// Runs the storm device-orchestrated and host-built in `cfg.rounds` interleaved rounds (after
/// warm-up runs of each, and each run started with the process's yield gate open), verifies
/// every run, and times the baseline.
///
/// # Errors
/// [`BenchError`] when a run fails or its result is wrong.
pub fn run(cfg: &RuntimeBenchConfig) -> Result<RuntimeBenchReport, BenchError> {
    // One runner (device) per runtime: on the default vendor device, Path A binds one runtime
    // per process and device (the latch), as the original's one-runtime-per-worker model. Both
    // chips exist throughout; the one not running parks every thread (no CPU).
    let (mut r, ex) = warm_storm(cfg.runner, cfg.tasks)?;
    let warm = storm(cfg.tasks.min(5_000));
    let mut h = DeviceRunner::new(cfg.runner)?;
    h.register_callable(1, ex.callable.clone().with_variant(Variant::HostBuiltGraph))?;
    for _ in 0..2 {
        warm.verify(&h.run(1, warm.args.clone())?)?;
    }
    let gate = ferry_sim::wait::YieldGate::global();
    let (mut device, mut host, mut prepare) = (Vec::new(), Vec::new(), Vec::new());
    let (mut device_orch_long_yields, mut host_graph_long_yields) = (0, 0);
    for _ in 0..cfg.rounds.max(1) {
        let y0 = gate_open(gate);
        let out = r.run(0, ex.args.clone())?;
        device_orch_long_yields += gate.long_yields() - y0;
        ex.verify(&out)?;
        device.push(out.stats.wall.as_secs_f64());

        let t0 = Instant::now();
        let p = h.prepare(1, ex.args.clone())?;
        prepare.push(t0.elapsed().as_secs_f64());
        let y0 = gate_open(gate);
        let l = h.launch(p)?;
        let out = h.finalize_run(l)?;
        host_graph_long_yields += gate.long_yields() - y0;
        ex.verify(&out)?;
        host.push(out.stats.wall.as_secs_f64());
    }
    drop(h);
    let (device_orch_wall_s, host_graph_wall_s) = (median(&device), median(&host));
    let host_graph_prepare_s = median(&prepare);

    // Baseline: the same kernel on the same kind of device memory, called in a host loop
    // (translation included, as on the core).
    let lanes = STORM_LANES * STORM_LANE_LEN;
    let buf = r.device().malloc(lanes * 4).map_err(RunError::from)?;
    r.device().copy_htod(&vec![0u8; (lanes * 4) as usize], buf).map_err(RunError::from)?;
    let scalars = [u64::from(1.0f32.to_bits())];
    let t0 = Instant::now();
    for k in 0..cfg.tasks {
        let addr = buf.0 + (k % STORM_LANES) * STORM_LANE_LEN * 4;
        let t = F32Slice::new(r.ops(), addr, STORM_LANE_LEN * 4)?;
        execute(&KernelCall {
            kernel: K_ADD_SCALAR,
            tensors: &[t],
            scalars: &scalars,
            block_idx: 0,
            block_dim: 1,
        })?;
    }
    let baseline_ns_per_task = t0.elapsed().as_nanos() as f64 / cfg.tasks as f64;
    let _ = r.device().free(buf);
    Ok(RuntimeBenchReport {
        arch: cfg.runner.arch.name(),
        aicpu_threads: cfg.runner.aicpu_threads,
        cores: cfg.runner.aic + cfg.runner.aiv,
        tasks: cfg.tasks,
        rounds: cfg.rounds.max(1),
        device_orch_wall_s,
        host_graph_wall_s,
        host_graph_prepare_s,
        baseline_ns_per_task,
        device_orch_long_yields,
        host_graph_long_yields,
    })
}
