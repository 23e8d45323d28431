//! [`Job`]: the builder for what `ferry run` does, and its run.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferry_profile::recorder::FsyncPolicy;
use ferry_profile::run_end::RUN_END_FILE;
use ferry_profile::{
    FailedTask, RunDir, ScopeLabel, ScopeNames, SummaryJson, WriteOptions, WriteProgress,
};
use ferry_runtime::examples::{Example, ExampleRun, Size};
use ferry_runtime::host::crash::CrashGuard;
use ferry_runtime::host::dfx::DfxOptions;
use ferry_runtime::host::profile::{
    claim_run_dir, example_summary, run_profiled, run_summary, workload_summary, ProfileTarget,
    ProfiledRun, RunFault,
};
use ferry_runtime::host::{
    Callable, DeviceRunner, KernelRegistry, LaunchPath, LoadMethod, LoadedOrchLibrary, RepeatError,
    RepeatReport, RunArgs, RunOutput, RunnerConfig, Variant,
};
use ferry_runtime::{DeviceFault, RunError};
use ferry_sim::Arch;
use ferry_workload::Workload;

use crate::error::{error_chain, CaseKind, FailedKernel, JobError, RunFailure};
use crate::observer::{GraphReady, JobStart, Observer, Quiet};

/// Checks an in-memory graph's output; returns a checksum of it, or what is wrong.
pub type OutputCheck = Arc<dyn Fn(&RunOutput) -> Result<f64, String> + Send + Sync>;

/// What a [`Job`] runs.
#[derive(Clone)]
enum Source {
    Examples(Vec<Example>),
    Workload(PathBuf),
    Graph { name: String, callable: Callable, args: RunArgs, check: Option<OutputCheck> },
}

/// What `ferry run` does, as a value: a graph (built-in examples, a workload file or an
/// in-memory graph), the kernel libraries it needs, the simulated chip it runs on, the DFX
/// subsystems to collect and where the run's directory goes. [`Job::run`] (or
/// [`Job::run_observed`], with progress) does it all and returns a typed [`JobOutcome`].
///
/// The order of the work, and its rules, are `ferry run`'s: a job refuses DFX without an output
/// directory and an output directory it cannot own before the chip starts; a workload is
/// checked against the built-in kernels before the chip starts (and again once its libraries
/// are loaded); each run's profile is written whether the run succeeded or not, and a run that
/// failed commits its profile marked failed before the job returns the error
/// ([`JobError::profile`]).
///
/// # Examples
/// ```
/// use ferry_job::Job;
/// use ferry_runtime::examples::Example;
/// let outcome = Job::example(Example::Vector).small(true).run().unwrap();
/// assert_eq!(outcome.cases[0].name, "vector");
/// assert!(outcome.cases[0].output.stats.tasks > 0);
/// ```
#[derive(Clone)]
pub struct Job {
    source: Source,
    kernels: Vec<PathBuf>,
    orchestration: Option<PathBuf>,
    config: RunnerConfig,
    variant: Variant,
    small: bool,
    dfx: DfxOptions,
    chrome: bool,
    original_formats: bool,
    out: Option<PathBuf>,
    force: bool,
    repeat: u32,
    warmup: u32,
    command: Vec<String>,
    crash_guard: bool,
    fsync: FsyncPolicy,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match &self.source {
            Source::Examples(e) => format!("examples {e:?}"),
            Source::Workload(p) => format!("workload {}", p.display()),
            Source::Graph { name, .. } => format!("graph `{name}`"),
        };
        f.debug_struct("Job")
            .field("source", &source)
            .field("kernels", &self.kernels)
            .field("orchestration", &self.orchestration)
            .field("config", &self.config)
            .field("variant", &self.variant)
            .field("dfx", &self.dfx)
            .field("out", &self.out)
            .field("repeat", &self.repeat)
            .field("warmup", &self.warmup)
            .finish_non_exhaustive()
    }
}

impl Job {
    fn new(source: Source) -> Job {
        Job {
            source,
            kernels: Vec::new(),
            orchestration: None,
            config: RunnerConfig::default_for(Arch::A2a3),
            variant: Variant::DeviceOrchestrated,
            small: false,
            dfx: DfxOptions::default(),
            chrome: false,
            original_formats: false,
            out: None,
            force: false,
            repeat: 1,
            warmup: 0,
            command: std::env::args().collect(),
            crash_guard: false,
            fsync: FsyncPolicy::Never,
        }
    }

    /// A job running one built-in example.
    pub fn example(example: Example) -> Job {
        Job::new(Source::Examples(vec![example]))
    }

    /// A job running built-in examples, one after the other on one chip (each one's profile in
    /// its own subdirectory of the output directory when there are several).
    pub fn examples(examples: &[Example]) -> Job {
        Job::new(Source::Examples(examples.to_vec()))
    }

    /// A job running the workload file at `path` (TOML; `docs/workloads.md`).
    pub fn workload(path: impl Into<PathBuf>) -> Job {
        Job::new(Source::Workload(path.into()))
    }

    /// A job running an in-memory graph: `callable` with `args`, named `name` (the profile's
    /// case name). Its output is checked by [`Job::check`] when one is given.
    pub fn graph(name: &str, callable: Callable, args: RunArgs) -> Job {
        Job::new(Source::Graph { name: name.to_string(), callable, args, check: None })
    }

    /// The check of an in-memory graph's output ([`Job::graph`]); ignored for the others.
    pub fn check(mut self, check: OutputCheck) -> Job {
        if let Source::Graph { check: c, .. } = &mut self.source {
            *c = Some(check);
        }
        self
    }

    /// The chip generation, with its default configuration (`RunnerConfig::default_for`);
    /// call it before the options that change the configuration.
    pub fn arch(mut self, arch: Arch) -> Job {
        let budget = self.config.kernel_budget;
        self.config = RunnerConfig::default_for(arch);
        self.config.kernel_budget = budget;
        self
    }

    /// The whole runner configuration (chip, cores, device profile, launch path, timeouts).
    pub fn config(mut self, config: RunnerConfig) -> Job {
        self.config = config;
        self
    }

    /// Changes the runner configuration in place.
    pub fn configure(mut self, f: impl FnOnce(&mut RunnerConfig)) -> Job {
        f(&mut self.config);
        self
    }

    /// How long one kernel may run before its core is declared hung
    /// (`RunnerConfig::kernel_budget`); the runner's own wait for a run is made at least a
    /// minute longer, so the device's report of a hung kernel comes first.
    pub fn kernel_budget(mut self, budget: Duration) -> Job {
        self.config.kernel_budget = budget;
        self.config.timeout = self.config.timeout.max(budget + Duration::from_secs(60));
        self
    }

    /// Where the graph is built (default: on the device).
    pub fn variant(mut self, variant: Variant) -> Job {
        self.variant = variant;
        self
    }

    /// Test-sized graphs: the examples' small size, a workload's `[small]` overrides.
    pub fn small(mut self, small: bool) -> Job {
        self.small = small;
        self
    }

    /// Kernel libraries to load before the runs, in order.
    pub fn kernels(mut self, libraries: impl IntoIterator<Item = impl Into<PathBuf>>) -> Job {
        self.kernels.extend(libraries.into_iter().map(Into::into));
        self
    }

    /// The orchestration library whose function a workload's `[orchestration]` names
    /// (`docs/orchestration.md`), loaded after the kernel libraries.
    pub fn orchestration(mut self, library: impl Into<PathBuf>) -> Job {
        self.orchestration = Some(library.into());
        self
    }

    /// The DFX subsystems to collect (needs [`Job::out`]).
    pub fn dfx(mut self, dfx: DfxOptions) -> Job {
        self.dfx = dfx;
        self
    }

    /// With the swimlane, write the Chrome JSON trace beside the Perfetto trace at the end of
    /// the run (the traces only, without [`original_formats`](Self::original_formats)).
    pub fn chrome_trace(mut self, on: bool) -> Job {
        self.chrome = on;
        self
    }

    /// Also write the original runtime's files (and, with the swimlane, the Perfetto trace) at
    /// the end of each run, beside the native profile (`profile.ferry`) every profiled run
    /// writes while it runs. Off by default: the analysis commands and [`crate::Profile`] read
    /// the native profile, and `ferry export DIR -o OUT` writes the same files from it later.
    pub fn original_formats(mut self, on: bool) -> Job {
        self.original_formats = on;
        self
    }

    /// The run's directory: the summary, the output tensors and the profile go there.
    pub fn out(mut self, dir: impl Into<PathBuf>) -> Job {
        self.out = Some(dir.into());
        self
    }

    /// Replace a complete earlier run in the output directory (refused without it).
    pub fn force(mut self, force: bool) -> Job {
        self.force = force;
        self
    }

    /// Run each graph `n` times back to back through the launch pipeline, every run checked
    /// (default 1). With DFX, one session collects every run, each in `run-NNN/`.
    pub fn repeat(mut self, n: u32) -> Job {
        self.repeat = n;
        self
    }

    /// The first `k` runs of a repetition are warm-up runs: every run is collected and checked,
    /// and the profile's `runs.json` records them so `ferry report` and `ferry diff` set them
    /// apart from the steady state (default 0). Below [`repeat`](Self::repeat).
    pub fn warmup(mut self, k: u32) -> Job {
        self.warmup = k;
        self
    }

    /// The command line recorded in the run's manifest (default: this process's arguments).
    pub fn command(mut self, command: Vec<String>) -> Job {
        self.command = command;
        self
    }

    /// Arm a crash guard while the graphs run (default off): a kernel that ends the process
    /// (a fatal signal, `exit()`) writes the run's end record into the run's directory and
    /// names its kernel, task and core on stderr; `exit()` during the run exits with
    /// `ferry_runtime::host::crash::EXIT_DURING_RUN`. It installs process-wide signal handlers
    /// for the run's length: for a process of its own (the `ferry` command), not for a host
    /// that has its own (an interpreter).
    pub fn crash_guard(mut self, on: bool) -> Job {
        self.crash_guard = on;
        self
    }

    /// When the native profile's sealed chunks are forced to the disk (default: never while
    /// the run runs; the file is synced once at its end).
    pub fn fsync(mut self, policy: FsyncPolicy) -> Job {
        self.fsync = policy;
        self
    }

    /// The runner configuration the job runs with.
    pub fn runner_config(&self) -> &RunnerConfig {
        &self.config
    }

    /// Runs the job, reporting nothing while it runs.
    ///
    /// # Errors
    /// [`JobError`]: the first thing that went wrong, typed.
    pub fn run(self) -> Result<JobOutcome, JobError> {
        self.run_observed(&Quiet)
    }

    /// Runs the job, reporting its progress to `obs`.
    ///
    /// # Errors
    /// [`JobError`]: the first thing that went wrong, typed.
    pub fn run_observed(self, obs: &dyn Observer) -> Result<JobOutcome, JobError> {
        self.check_options()?;
        // Before the chip starts: a malformed workload costs nothing (a name only a library
        // defines is checked again once the libraries are loaded).
        if let (Source::Workload(file), true) = (&self.source, self.kernels.is_empty()) {
            let wl = Workload::load(file, &KernelRegistry::new(), self.small)?;
            if let (Some(f), None) = (wl.orchestration_function(), &self.orchestration) {
                return Err(JobError::NoOrchestration { function: f.into() });
            }
        }
        // Before the chip starts: a directory the run cannot own must not cost the run.
        let mut run_dir = match &self.out {
            Some(d) => Some(
                claim_run_dir(d, &self.config, &self.command, self.force)
                    .map_err(|source| JobError::OutDir { dir: d.clone(), source })?,
            ),
            None => None,
        };
        let mut runner = DeviceRunner::new(self.config).map_err(JobError::Start)?;
        if self.config.path == LaunchPath::DeviceProgram(LoadMethod::Preinstalled) {
            crate::install_preinstalled(&runner)?;
        }
        let names: Vec<String> = match &self.source {
            Source::Examples(e) => e.iter().map(|e| e.name().to_string()).collect(),
            _ => Vec::new(),
        };
        obs.chip_started(&JobStart { config: &self.config, variant: self.variant, cases: &names });
        for path in &self.kernels {
            let added = runner
                .load_kernels_file(path)
                .map_err(|source| JobError::Kernels { path: path.clone(), source })?;
            obs.kernels_loaded(path, &added);
        }
        let library = match &self.orchestration {
            Some(path) => Some(
                runner
                    .load_orchestration_file(path)
                    .map_err(|source| JobError::Orchestration { path: path.clone(), source })?,
            ),
            None => None,
        };
        let cases = self.cases(&runner, obs, library.as_ref())?;
        let guard = self.arm(&runner, run_dir.as_mut())?;
        let several = cases.len() > 1;
        let mut done = Vec::with_capacity(cases.len());
        for (id, case) in cases.iter().enumerate() {
            let sub = several.then_some(case.name.as_str());
            match self.run_case(&mut runner, obs, id as u32, case, run_dir.as_mut(), sub) {
                Ok(c) => done.push(c),
                Err(e) => {
                    disarm(guard, run_dir.as_mut())?;
                    let e = self.fail(run_dir.take(), obs, e)?;
                    return Err(e);
                }
            }
        }
        disarm(guard, run_dir.as_mut())?;
        let summary = match run_dir {
            Some(rd) => Some(self.finish(rd, &cases, &done)?),
            None => None,
        };
        runner.finalize().map_err(JobError::Finalize)?;
        Ok(JobOutcome {
            cases: done,
            out: self.out.clone(),
            summary,
            config: self.config,
            variant: self.variant,
        })
    }

    /// Arms the crash guard when asked: its end record is created empty in the run's directory
    /// (through its handle; listed in the incomplete manifest, so the next run removes it), and
    /// the runner's kernels are named for it.
    fn arm(
        &self,
        runner: &DeviceRunner,
        run_dir: Option<&mut RunDir>,
    ) -> Result<Option<CrashGuard>, JobError> {
        if !self.crash_guard {
            return Ok(None);
        }
        let (record, note) = match run_dir {
            Some(rd) => {
                let out = rd.begun().map_err(JobError::RunDir)?;
                let f = out.dir().create_new(RUN_END_FILE).map_err(JobError::EndRecord)?;
                let dir = out.path().display().to_string();
                (Some(f), format!("; `ferry report {dir}` reads what the run sealed"))
            }
            None => (None, String::new()),
        };
        let names = runner.kernels().kernels().into_iter().map(|k| (k.id, k.name));
        CrashGuard::arm(record, names, &note).map(Some).map_err(JobError::CrashGuard)
    }

    /// The options that are refused before anything starts.
    fn check_options(&self) -> Result<(), JobError> {
        if self.repeat == 0 {
            return Err(JobError::NoRuns);
        }
        if self.dfx.any() && self.out.is_none() {
            return Err(JobError::DfxNeedsOut);
        }
        if self.chrome && self.dfx.swimlane == 0 {
            return Err(JobError::ChromeNeedsSwimlane);
        }
        if self.warmup > 0 && self.warmup >= self.repeat {
            return Err(JobError::WarmupNotBelowRepeat {
                warmup: self.warmup,
                repeat: self.repeat,
            });
        }
        // A workload's repeats are followed by one more run (its output is checked).
        let extra = matches!(self.source, Source::Workload(_)) && self.repeat > 1;
        let runs = self.repeat as usize + usize::from(extra);
        if self.dfx.any() && runs > ferry_dfx::device::RUN_RING {
            return Err(JobError::TooManyRuns {
                repeat: self.repeat,
                max: ferry_dfx::device::RUN_RING,
            });
        }
        Ok(())
    }

    /// The cases to run, built for the runner (a workload is checked against its kernels).
    fn cases(
        &self,
        runner: &DeviceRunner,
        obs: &dyn Observer,
        library: Option<&Arc<LoadedOrchLibrary>>,
    ) -> Result<Vec<Case>, JobError> {
        let size = if self.small { Size::Small } else { Size::Full };
        Ok(match &self.source {
            Source::Examples(list) => list
                .iter()
                .map(|&e| {
                    let run = e.build(size).with_variant(self.variant);
                    Case {
                        kind: CaseKind::Example,
                        name: e.name().to_string(),
                        callable: run.callable.clone(),
                        args: run.args.clone(),
                        tasks: run.tasks,
                        check: Check::Example(Box::new(run)),
                    }
                })
                .collect(),
            Source::Workload(file) => {
                let registry = runner.kernel_registry();
                let wl = Workload::load(file, &*registry, self.small)?;
                let args = wl.run_args()?;
                // An orchestration function's task count is what its host reference submits.
                let tasks = library
                    .and_then(|l| wl.function_tasks(&*registry, l))
                    .unwrap_or_else(|| wl.tasks());
                obs.graph_ready(&GraphReady {
                    kind: CaseKind::Workload,
                    name: wl.name(),
                    file: Some(file),
                    tasks,
                    config: &self.config,
                    variant: self.variant,
                });
                let callable = match (wl.orchestration_function(), library) {
                    (None, _) => wl.callable(self.variant),
                    (Some(f), None) => {
                        return Err(JobError::NoOrchestration { function: f.into() })
                    }
                    (Some(_), Some(lib)) => {
                        wl.library_callable(lib, self.variant).map_err(|source| {
                            JobError::Orchestration {
                                path: self.orchestration.clone().unwrap_or_default(),
                                source,
                            }
                        })?
                    }
                };
                vec![Case {
                    kind: CaseKind::Workload,
                    name: wl.name().to_string(),
                    callable,
                    args,
                    tasks,
                    check: Check::Workload {
                        wl: Box::new(wl),
                        file: file.clone(),
                        registry,
                        library: library.cloned(),
                    },
                }]
            }
            Source::Graph { name, callable, args, check } => {
                obs.graph_ready(&GraphReady {
                    kind: CaseKind::Graph,
                    name,
                    file: None,
                    tasks: 0,
                    config: &self.config,
                    variant: self.variant,
                });
                vec![Case {
                    kind: CaseKind::Graph,
                    name: name.clone(),
                    callable: callable.clone(),
                    args: args.clone(),
                    tasks: 0,
                    check: Check::Graph(check.clone()),
                }]
            }
        })
    }

    /// Runs one case: registered, run (repeated) inside one DFX session whose profile goes to
    /// the run directory, and checked.
    fn run_case(
        &self,
        runner: &mut DeviceRunner,
        obs: &dyn Observer,
        id: u32,
        case: &Case,
        run_dir: Option<&mut RunDir>,
        sub: Option<&str>,
    ) -> Result<CaseOutcome, CaseError> {
        let register =
            |source| JobError::Register { kind: case.kind, case: case.name.clone(), source };
        runner.register_callable(id, case.callable.clone()).map_err(register)?;
        let progress = |p: WriteProgress| obs.write_progress(&case.name, p);
        let traces = self.dfx.swimlane > 0 && (self.original_formats || self.chrome);
        let write = WriteOptions {
            files: self.original_formats,
            traces,
            chrome: traces && self.chrome,
            progress: Some(&progress),
        };
        let target = match run_dir {
            Some(rd) if self.dfx.any() => Some(
                ProfileTarget::in_run_dir(rd, sub, &case.name, write)
                    .map_err(|e| JobError::DfxStart(Box::new(e)))?
                    .with_scope_names(case.scope_names())
                    .with_warmup(self.warmup)
                    .with_fsync(self.fsync),
            ),
            _ => None,
        };
        let scratch = case.args.scratch_bytes;
        let ProfiledRun { run, profile } =
            run_profiled(runner, &self.dfx, scratch, target, |r| self.body(r, obs, id, case))
                .map_err(|e| JobError::DfxStart(Box::new(e)))?;
        obs.write_ended(&case.name);
        let profile = profile.map_err(|source| {
            CaseError::from(JobError::Profile { case: case.name.clone(), source: Box::new(source) })
        })?;
        let location = profile.map(|p| {
            obs.profile_written(&case.name, &p);
            let loc = ProfileLocation {
                dir: p.dir.clone(),
                runs: p.runs.iter().map(|r| r.dir.clone()).collect(),
                perfetto: traces,
                chrome: traces && self.chrome,
            };
            // Freeing a storm's model (hundreds of thousands of rows) takes tens of
            // milliseconds; nothing waits for it.
            std::thread::spawn(move || drop(p));
            loc
        });
        let at = location.as_ref().map(|l| l.dir.clone());
        let (output, repeat) = match run {
            Ok(v) => v,
            Err(BodyError::Run(error, repeat)) => {
                let kernel = name_kernel(&error, runner, case);
                let failure = Box::new(RunFailure { error, kernel, repeat });
                return Err(CaseError::failed(
                    JobError::Run {
                        kind: case.kind,
                        case: case.name.clone(),
                        failure,
                        profile: at,
                    },
                    location,
                ));
            }
            Err(BodyError::Check(what)) => {
                return Err(CaseError::failed(
                    JobError::WrongResult {
                        kind: case.kind,
                        case: case.name.clone(),
                        what,
                        profile: at,
                    },
                    location,
                ))
            }
        };
        let checksum = case.check.verify(&output).map_err(|what| {
            CaseError::failed(
                JobError::WrongResult {
                    kind: case.kind,
                    case: case.name.clone(),
                    what,
                    profile: at,
                },
                location.clone(),
            )
        })?;
        if let Some(rep) = &repeat {
            obs.repeated(&case.name, rep);
        }
        Ok(CaseOutcome {
            kind: case.kind,
            name: case.name.clone(),
            output,
            checksum,
            repeat,
            profile: location,
        })
    }

    /// What runs inside the DFX session: the repetition (every run checked) and then one run
    /// whose output is kept, or the single run.
    #[allow(clippy::type_complexity)]
    fn body(
        &self,
        r: &mut DeviceRunner,
        obs: &dyn Observer,
        id: u32,
        case: &Case,
    ) -> Result<
        ((RunOutput, Option<RepeatReport>), Option<ferry_profile::HostOrchestration>),
        BodyError,
    > {
        if self.repeat > 1 {
            let n = self.repeat;
            let mut last = None;
            let keep_last = matches!(case.check, Check::Example(_));
            let rep = r
                .repeat(
                    id,
                    n,
                    |_| case.args.clone(),
                    |k, out| {
                        case.check.verify(out).map_err(CheckFailed)?;
                        if keep_last && k + 1 == n {
                            last = Some(out.clone());
                        }
                        Ok::<(), CheckFailed>(())
                    },
                )
                .map_err(|e| match e {
                    RepeatError::Run { run, runs, source } => {
                        BodyError::Run(source, Some((run, runs)))
                    }
                    RepeatError::Check { run, runs, source } => {
                        BodyError::Check(format!("run {run} of runs 0..{runs}: {}", source.0))
                    }
                })?;
            if let Some(out) = last {
                return Ok(((out, Some(rep)), None));
            }
            // A workload's (or graph's) output is checked on one more run after the repetition.
            let (out, host) = self.run_once(r, obs, id, case)?;
            return Ok(((out, Some(rep)), host));
        }
        let (out, host) = self.run_once(r, obs, id, case)?;
        Ok(((out, None), host))
    }

    /// prepare → launch → wait (reporting progress after the first second) → finalize.
    fn run_once(
        &self,
        r: &mut DeviceRunner,
        obs: &dyn Observer,
        id: u32,
        case: &Case,
    ) -> Result<(RunOutput, Option<ferry_profile::HostOrchestration>), BodyError> {
        let run = |e: RunError| BodyError::Run(e, None);
        let p = r.prepare(id, case.args.clone()).map_err(run)?;
        let host = p.host_orchestration().cloned();
        let mut l = r.launch(p).map_err(run)?;
        // Most runs finish within the first second: those report no progress.
        if !r.wait_timeout(&mut l, Duration::from_secs(1)).map_err(run)? {
            let (start, limit) = (std::time::Instant::now(), r.config().timeout);
            while !r.wait_timeout(&mut l, Duration::from_millis(50)).map_err(run)?
                && start.elapsed() < limit
            {
                let done = r.progress(&l).map_err(run)?.0;
                obs.run_progress(&case.name, done, case.tasks);
            }
            obs.run_ended(&case.name);
        }
        Ok((r.finalize_run(l).map_err(run)?, host))
    }

    /// A case failed: a profile it already collected is committed marked failed (so every
    /// analysis command reads it and says the run failed); the error is returned.
    fn fail(
        &self,
        run_dir: Option<RunDir>,
        obs: &dyn Observer,
        e: CaseError,
    ) -> Result<JobError, JobError> {
        let (e, profile) = match e {
            CaseError::Failed(b) => *b,
            CaseError::Job(e) => (e, None),
        };
        if let Some(rd) = run_dir {
            let why = error_chain(&e);
            let task = e.run_failure().and_then(|f| {
                let k = f.kernel.as_ref()?;
                Some(FailedTask { id: k.task, kernel: k.name.clone(), run: f.repeat.map(|r| r.0) })
            });
            if rd.fail_at(&why, task).map_err(JobError::RunDir)? {
                if let Some(p) = &profile {
                    obs.failed_run_kept(&p.dir);
                }
            }
        }
        Ok(e)
    }

    /// Every case ran and checked: the summary and the output tensors, then the manifest.
    fn finish(
        &self,
        rd: RunDir,
        cases: &[Case],
        done: &[CaseOutcome],
    ) -> Result<SummaryJson, JobError> {
        let mut summary = run_summary(&self.config, self.variant);
        let mut outputs: Vec<(String, Vec<u8>)> = Vec::new();
        let f32_file = |name: &str, t: &[f32]| {
            (format!("{name}.f32"), t.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
        };
        for (case, d) in cases.iter().zip(done) {
            match &case.check {
                Check::Example(run) => {
                    summary.runs.push(example_summary(
                        run.example,
                        &d.output,
                        d.checksum,
                        d.repeat.as_ref(),
                    ));
                    if let Some(t) =
                        d.output.tensors.get(run.output_tensor()).and_then(|t| t.as_deref())
                    {
                        outputs.push(f32_file(&case.name, t));
                    }
                }
                Check::Workload { wl, file, .. } => {
                    summary.runs.push(workload_summary(wl.name(), file, &d.output, d.checksum));
                    outputs.extend(wl.output_files(&d.output));
                }
                Check::Graph(_) => {
                    for (i, t) in d.output.tensors.iter().enumerate() {
                        if let Some(t) = t.as_deref() {
                            outputs.push(f32_file(&format!("{}-{i}", case.name), t));
                        }
                    }
                }
            }
        }
        rd.finish_files(&summary, &outputs).map_err(JobError::RunDir)?;
        Ok(summary)
    }
}

/// The graphs ran (well or not) without ending the process: the crash guard is disarmed and
/// its empty end record removed, before the manifest is committed.
fn disarm(guard: Option<CrashGuard>, run_dir: Option<&mut RunDir>) -> Result<(), JobError> {
    let Some(guard) = guard else { return Ok(()) };
    drop(guard);
    if let Some(rd) = run_dir {
        let out = rd.begun().map_err(JobError::RunDir)?;
        out.dir().remove_file(RUN_END_FILE).map_err(JobError::EndRecord)?;
    }
    Ok(())
}

/// The kernel of a kernel fault, named from the runner's registry and (for a workload) the
/// task's line in the file.
fn name_kernel(e: &RunError, runner: &DeviceRunner, case: &Case) -> Option<FailedKernel> {
    let RunError::Fault(DeviceFault::Kernel { task, kernel, fault }) = e else { return None };
    let info = runner.kernels().info(*kernel);
    let at = match &case.check {
        Check::Workload { wl, .. } => wl.task_location(*task),
        _ => None,
    };
    Some(FailedKernel {
        task: *task,
        at,
        name: info.as_ref().map_or_else(|| format!("id {kernel}"), |k| k.name.clone()),
        library: info.and_then(|k| k.library),
        id: *kernel,
        fault: *fault,
    })
}

/// One graph of a job, built.
struct Case {
    kind: CaseKind,
    name: String,
    callable: Callable,
    args: RunArgs,
    tasks: u64,
    check: Check,
}

impl Case {
    /// What the run's scope sites are called (a workload's scope labels).
    fn scope_names(&self) -> ScopeNames {
        match &self.check {
            Check::Workload { wl, .. } => wl
                .scopes()
                .iter()
                .map(|s| (s.site.clone(), ScopeLabel { name: s.name.clone(), at: s.at.clone() }))
                .collect(),
            _ => ScopeNames::new(),
        }
    }
}

/// How a case's output is checked.
enum Check {
    Example(Box<ExampleRun>),
    Workload {
        wl: Box<Workload>,
        file: PathBuf,
        registry: Arc<KernelRegistry>,
        library: Option<Arc<LoadedOrchLibrary>>,
    },
    Graph(Option<OutputCheck>),
}

impl Check {
    /// The output's checksum, or what is wrong with it.
    fn verify(&self, out: &RunOutput) -> Result<f64, String> {
        match self {
            Check::Example(run) => run.verify(out).map_err(|e| e.to_string()),
            Check::Workload { wl, registry, library, .. } => {
                wl.verify_with(out, &**registry, library.as_deref()).map_err(|e| e.to_string())
            }
            Check::Graph(Some(f)) => f(out),
            Check::Graph(None) => Ok(0.0),
        }
    }
}

/// A repetition's check that failed.
#[derive(Debug)]
struct CheckFailed(String);

impl std::fmt::Display for CheckFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CheckFailed {}

/// Why the body of a profiled run failed.
enum BodyError {
    /// A run failed on the chip (`(run, runs)` in a repetition).
    Run(RunError, Option<(u32, u32)>),
    /// A repetition's run produced a wrong output.
    Check(String),
}

impl RunFault for BodyError {
    fn device_fault(&self) -> Option<&DeviceFault> {
        match self {
            BodyError::Run(e, _) => e.device_fault(),
            BodyError::Check(_) => None,
        }
    }
}

/// Why a case failed: after its profile was collected (with where it went), or before.
enum CaseError {
    Failed(Box<(JobError, Option<ProfileLocation>)>),
    Job(JobError),
}

impl CaseError {
    fn failed(e: JobError, profile: Option<ProfileLocation>) -> CaseError {
        CaseError::Failed(Box::new((e, profile)))
    }
}

impl From<JobError> for CaseError {
    fn from(e: JobError) -> CaseError {
        CaseError::Job(e)
    }
}

/// Where a case's profile went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileLocation {
    /// The profile's directory.
    pub dir: PathBuf,
    /// A session over several runs: each run's directory (`run-000/`, …), in order.
    pub runs: Vec<PathBuf>,
    /// Whether the Perfetto trace was written.
    pub perfetto: bool,
    /// Whether the Chrome JSON trace was written.
    pub chrome: bool,
}

/// One graph a job ran.
#[derive(Clone, Debug)]
pub struct CaseOutcome {
    /// What it is.
    pub kind: CaseKind,
    /// Its name.
    pub name: String,
    /// The run's output (the last run's, when repeated): tensors, tasks, per-kernel counts,
    /// wall time.
    pub output: RunOutput,
    /// The checksum its check computed.
    pub checksum: f64,
    /// The repetition's figures, when repeated.
    pub repeat: Option<RepeatReport>,
    /// Where its profile went (DFX on, with an output directory).
    pub profile: Option<ProfileLocation>,
}

/// What a job did.
#[derive(Clone, Debug)]
pub struct JobOutcome {
    /// Each graph it ran, in order, every one checked.
    pub cases: Vec<CaseOutcome>,
    /// The run's directory, when it had one.
    pub out: Option<PathBuf>,
    /// The summary written there.
    pub summary: Option<SummaryJson>,
    /// The runner configuration it ran with.
    pub config: RunnerConfig,
    /// Where its graphs were built.
    pub variant: Variant,
}

impl JobOutcome {
    /// The case named `name`.
    pub fn case(&self, name: &str) -> Option<&CaseOutcome> {
        self.cases.iter().find(|c| c.name == name)
    }

    /// The profile directory of the first case that wrote one.
    pub fn profile_dir(&self) -> Option<&Path> {
        self.cases.iter().find_map(|c| c.profile.as_ref()).map(|p| p.dir.as_path())
    }
}
