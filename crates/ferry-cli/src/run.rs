//! `ferry run`: the main job. Runs example workloads (or a workload file) end to end on a
//! simulated chip, verifies them against host references, and prints a summary: the arguments
//! become a [`ferry_job::Job`], whose run this module prints through an observer.
use anyhow::bail;
use clap::{Args, ValueEnum};
use ferry_dfx::Policy;
use ferry_job::{
    GraphReady, Job, JobError, JobStart, LoadedLibrary, NextSteps, Observer, ProfileLocation,
    ProfileWriteLines, RepeatLine,
};
use ferry_profile::recorder::FsyncPolicy;
use ferry_profile::{WritePhase, WriteProgress};
use ferry_runtime::examples::Example;
use ferry_runtime::host::dfx::DfxOptions;
use ferry_runtime::host::profile::WrittenProfile;
use ferry_runtime::host::{RegisteredKernel, RepeatReport, RunnerConfig, Variant};
use ferry_sim::Arch;
use indicatif::{ProgressBar, ProgressStyle};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub(crate) mod workload;

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Custom kernel libraries to load before the runs (cdylibs built against
    /// ferry-kernel-abi, e.g. examples/kernel-template); repeatable, or comma-separated.
    #[arg(
        help_heading = "What to run",
        long = "kernels",
        value_name = "LIB.so",
        value_delimiter = ','
    )]
    kernels: Vec<PathBuf>,
    /// An orchestration library (a cdylib built against ferry-kernel-abi, e.g.
    /// examples/orchestration-template) whose function the workload file names (its
    /// `[orchestration]` table).
    #[arg(help_heading = "What to run", long, value_name = "LIB.so", requires = "workload")]
    orchestration: Option<PathBuf>,
    /// Which example to run: all three by default.
    #[arg(help_heading = "What to run", long, value_enum, default_value_t = ExampleArg::All, conflicts_with = "workload")]
    example: ExampleArg,
    /// Run a workload file instead of the examples (TOML; format in docs/workloads.md).
    #[arg(help_heading = "What to run", long, value_name = "FILE")]
    workload: Option<PathBuf>,
    /// Chip generation: a2a3 (50 MHz, SVM, up to 4 AICPU threads) or a5 (1 GHz, non-SVM, up to
    /// 5 AICPU threads).
    #[arg(help_heading = "Chip", long, default_value = "a2a3", value_parser = crate::info::arch_parser())]
    arch: Arch,
    /// Where the graph is built: on the AICPU (device) or on the host (host).
    #[arg(help_heading = "Chip", long, value_enum, default_value_t = VariantArg::Device)]
    variant: VariantArg,
    /// AICPU threads (1 orchestrator + the rest schedulers); default: all the arch allows.
    #[arg(help_heading = "Chip", long)]
    aicpu_threads: Option<u32>,
    /// AIC (cube) workers.
    #[arg(help_heading = "Chip", long, default_value_t = 8)]
    aic: u32,
    /// AIV (vector) workers.
    #[arg(help_heading = "Chip", long, default_value_t = 16)]
    aiv: u32,
    /// Test-sized workloads instead of the full ones.
    #[arg(help_heading = "What to run", long)]
    small: bool,
    /// Where this command writes its output: a directory for `summary.json` and the output
    /// tensors (`<example>.f32`, little-endian; a workload's `<tensor>.<dtype>`, its elements
    /// packed little-endian: `acc.int32`, `y.bf16`); with DFX on, also the DFX files (in
    /// `<example>/` when several examples run). A directory holding a complete earlier run is
    /// refused unless `--force`.
    #[arg(help_heading = "Output", short, long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Replace the complete earlier run in `--out DIR` (without it, such a directory is refused
    /// and left as it is).
    #[arg(help_heading = "Output", long, requires = "out")]
    force: bool,
    /// Launch each example's graph this many times back to back through the launch pipeline
    /// (run k+1 prepared while run k executes), verifying every run; prints runs/s. With DFX,
    /// one session collects every run (at most 256): each run's files go to `run-NNN/` in the
    /// profile's directory, labelled with the run and with its own loss accounting, listed in
    /// `runs.json`.
    #[arg(help_heading = "What to run", long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Of the `--repeat` runs, the first K are warm-up runs: run and verified like the others,
    /// recorded in the session's `runs.json`, and set apart by `ferry report` and `ferry diff`,
    /// whose tables cover the steady runs after them. Below `--repeat`.
    #[arg(help_heading = "What to run", long, value_name = "K", default_value_t = 0)]
    warmup: u32,
    /// The longest one kernel may run (one block on one core, device time) before ferry
    /// declares its core hung: the run then fails naming the task, the kernel and the core,
    /// with its profile written and marked failed. `90s`, `500ms`, `2m`, `1h`, or seconds.
    #[arg(help_heading = "Chip", long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    timeout: Duration,
    #[command(flatten, next_help_heading = "DFX collection (needs --out)")]
    dfx: DfxArgs,
    #[command(flatten, next_help_heading = "Device and launch path")]
    device: crate::device_opts::DeviceOpts,
}

/// A duration: a number with `ms`, `s`, `m` or `h`, or a bare number of seconds; from 1 ms to
/// a day.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, "s"),
    };
    let v: f64 = num.parse().map_err(|_| {
        format!("`{s}` is not a duration (a number with ms, s, m or h: 500ms, 90s, 2m)")
    })?;
    let secs = match unit {
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        u => return Err(format!("`{u}` is not a unit of time (ms, s, m or h)")),
    };
    if !(0.001..=86_400.0).contains(&secs) {
        return Err(format!("`{s}` is outside 1ms..=24h"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// DFX collection of `ferry run` (needs `--out`).
#[derive(Debug, Args)]
pub(crate) struct DfxArgs {
    /// ChipSwimlane level: 1 AICore start/end, 2 + AICPU dispatch/finish, 3 + scheduler phases,
    /// 4 + orchestrator submits; a bare --swimlane is level 4. Also writes the Perfetto trace.
    #[arg(long, num_args = 0..=1, value_name = "LEVEL", default_missing_value = "4", value_parser = clap::value_parser!(u32).range(1..=4))]
    swimlane: Option<u32>,
    /// PMU event type (1, 2, 4-8; a bare --pmu is type 2): one pmu.csv row per task.
    #[arg(long, num_args = 0..=1, value_name = "TYPE", default_missing_value = "2", value_parser = parse_pmu)]
    pmu: Option<u32>,
    /// DepGen: deps.json, checked against the runtime's dependencies.
    #[arg(long)]
    dep_gen: bool,
    /// ArgsDump level 0-3: 1 only arguments marked with dump(...), 2 every argument with its
    /// payload, 3 every argument's metadata with the marked ones' payloads; a bare --dump-args
    /// is level 1.
    #[arg(long, num_args = 0..=1, value_name = "LEVEL", default_missing_value = "1", value_parser = clap::value_parser!(u32).range(0..=3))]
    dump_args: Option<u32>,
    /// ScopeStats: scope begin/end with task-window, heap and dep-pool occupancy.
    #[arg(long)]
    scope_stats: bool,
    /// With the swimlane, write the Perfetto trace and trace.chrome.json, the Chrome Trace Event
    /// JSON (the legacy format; about twice the Perfetto trace's size), at the end of the run.
    /// `ferry trace DIR --chrome-json` makes them later from the profile.
    #[arg(long)]
    chrome_json: bool,
    /// Also write the original runtime's files (chip_swimlane_records.json, name_map_*.json,
    /// pmu.csv, deps.json, args_dump/, scope_stats/, a session's runs.json and run-NNN/) and,
    /// with the swimlane, the Perfetto trace at the end of the run. Without it the run writes
    /// its native profile (profile.ferry) alone: every analysis command reads it, and `ferry
    /// export DIR -o OUT` writes the same files from it later.
    #[arg(long)]
    original_formats: bool,
    /// What a DFX writer does when its lane has no free buffer.
    #[arg(long, value_enum, default_value_t = PolicyArg::Block)]
    dfx_policy: PolicyArg,
    /// Buffers per DFX lane (default: each subsystem's, sized so the path stays cold; 1: a
    /// one-buffer pool, the most backpressure).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    dfx_buffers: Option<u32>,
    /// Records per DFX buffer (default: each subsystem's; DepGen and ArgsDump buffers hold 16
    /// words per record: a one-tensor submit takes 8, a stage of one 1-D tensor 7).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    dfx_records: Option<u32>,
    /// Let device writers ring the host after each buffer they publish (an optional hint; by
    /// default the host polls its queues, as on hardware).
    #[arg(long)]
    dfx_doorbell: bool,
    /// Drop policy: how long a gate waits, in device cycles (default: 1 ms of device clock).
    #[arg(long, allow_negative_numbers = true)]
    dfx_drop_wait: Option<u64>,
    /// Force the native profile's sealed chunks to the disk (`fsync`) after every N-th one
    /// (1: each), so that a machine's crash keeps them too; by default the file is synced once,
    /// at the run's end (a killed or crashed process keeps its sealed chunks either way: they
    /// are in the page cache). Each sync costs a disk flush (docs/dfx.md).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    fsync_chunks: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PolicyArg {
    /// Wait (up to the 30-s budget): lossless.
    Block,
    /// Wait briefly, then drop and count the records.
    Drop,
}

fn parse_pmu(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(v @ (1 | 2 | 4..=8)) => Ok(v),
        _ => Err(format!("`{s}` is not a PMU event type (1, 2, 4-8)")),
    }
}

impl DfxArgs {
    /// The traces the run writes: `(perfetto, chrome)`.
    pub(crate) fn traces(&self) -> (bool, bool) {
        let swimlane = self.swimlane.is_some_and(|l| l > 0);
        (swimlane && (self.original_formats || self.chrome_json), swimlane && self.chrome_json)
    }

    pub(crate) fn options(&self) -> DfxOptions {
        DfxOptions {
            swimlane: self.swimlane.unwrap_or(0),
            pmu: self.pmu.unwrap_or(0),
            dep_gen: self.dep_gen,
            dump_args: self.dump_args.unwrap_or(0),
            scope_stats: self.scope_stats,
            policy: match self.dfx_policy {
                PolicyArg::Block => Policy::Block,
                PolicyArg::Drop => Policy::Drop,
            },
            buffers_per_lane: self.dfx_buffers,
            records_per_buffer: self.dfx_records,
            drop_wait_cycles: self.dfx_drop_wait,
            doorbell_hint: self.dfx_doorbell,
            ..DfxOptions::default()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ExampleArg {
    /// vector, paged-attention and storm, in that order.
    All,
    /// Elementwise chain (add, mul, scale, add_scalar, copy) in SPMD chunks.
    Vector,
    /// Paged-attention-shaped graph: fan-out to one task per KV page, fan-in per sequence.
    PagedAttention,
    /// 50,000 tiny tasks over 64 lanes.
    Storm,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum VariantArg {
    /// Device-orchestrated: the orchestration runs on the last AICPU thread.
    Device,
    /// Host-built graph, uploaded during prepare.
    Host,
}

impl RunArgs {
    /// What every `ferry run` (examples or a workload) derives from its flags: the runner's
    /// configuration, the variant and the DFX options, refusing DFX without `--out` and DFX with
    /// `--repeat` before anything starts.
    pub(super) fn setup(&self) -> anyhow::Result<(RunnerConfig, Variant, DfxOptions)> {
        let mut cfg = RunnerConfig::default_for(self.arch);
        cfg.aicpu_threads = self.aicpu_threads.unwrap_or(cfg.aicpu_threads);
        cfg.aic = self.aic;
        cfg.aiv = self.aiv;
        cfg.kernel_budget = self.timeout;
        // The host waits for a run's device side at least a minute past the kernel budget, so
        // the device's own report of a hung kernel arrives first.
        cfg.timeout = cfg.timeout.max(self.timeout + Duration::from_secs(60));
        self.device.apply(&mut cfg);
        let variant = match self.variant {
            VariantArg::Device => Variant::DeviceOrchestrated,
            VariantArg::Host => Variant::HostBuiltGraph,
        };
        let dfx = self.dfx.options();
        if dfx.any() && self.out.is_none() {
            bail!("DFX collection needs --out DIR");
        }
        if self.dfx.chrome_json && dfx.swimlane == 0 {
            bail!("--chrome-json is a trace of the swimlane: it needs --swimlane");
        }
        // A workload's repeats are followed by one more run (its output is checked).
        let runs = self.repeat as usize + usize::from(self.workload.is_some() && self.repeat > 1);
        if dfx.any() && runs > ferry_dfx::device::RUN_RING {
            bail!(
                "--repeat {} with DFX: one session tells at most {} runs apart",
                self.repeat,
                ferry_dfx::device::RUN_RING
            );
        }
        Ok((cfg, variant, dfx))
    }
}

pub(crate) fn run(a: &RunArgs) -> anyhow::Result<()> {
    if let Some(file) = &a.workload {
        return workload::run(a, file);
    }
    let examples: Vec<Example> = match a.example {
        ExampleArg::All => Example::ALL.to_vec(),
        ExampleArg::Vector => vec![Example::Vector],
        ExampleArg::PagedAttention => vec![Example::PagedAttention],
        ExampleArg::Storm => vec![Example::Storm],
    };
    let printer = Printer::new(&a.dfx);
    let done = a.job(Job::examples(&examples))?.run_observed(&printer);
    let done = printer.outcome(done)?;
    crate::stdout::print(&done.table().to_string())?;
    printer.print_next_steps()
}

impl RunArgs {
    /// The job these arguments describe, for the graph `job` names (checked as
    /// [`RunArgs::setup`] checks them).
    pub(super) fn job(&self, job: Job) -> anyhow::Result<Job> {
        let (cfg, variant, dfx) = self.setup()?;
        let job = match &self.orchestration {
            Some(lib) => job.orchestration(lib),
            None => job,
        };
        Ok(job
            .config(cfg)
            .variant(variant)
            .small(self.small)
            .kernels(self.kernels.iter().cloned())
            .dfx(dfx)
            .chrome_trace(self.dfx.traces().1)
            .original_formats(self.dfx.original_formats)
            .repeat(self.repeat)
            .warmup(self.warmup)
            .force(self.force)
            .crash_guard(true)
            .fsync(self.dfx.fsync_chunks.map_or(FsyncPolicy::Never, FsyncPolicy::Every))
            .command(std::env::args().collect())
            .maybe_out(self.out.as_deref()))
    }
}

/// [`Job::out`] when there is a directory.
trait MaybeOut {
    fn maybe_out(self, dir: Option<&Path>) -> Self;
}

impl MaybeOut for Job {
    fn maybe_out(self, dir: Option<&Path>) -> Job {
        match dir {
            Some(d) => self.out(d),
            None => self,
        }
    }
}

/// What `ferry run` prints while its job runs: the chip, the kernel libraries, progress bars
/// for long runs and long writes, each profile as it is written, and a failed run's kept
/// profile. Printing errors (a closed pipe) are kept for after the job.
pub(super) struct Printer {
    /// `(perfetto, chrome)`: the traces the profiles carry.
    traces: (bool, bool),
    /// Whether the profiles hold the swimlane (`ferry trace` and `ferry view` draw it).
    swimlane: bool,
    run_bar: RefCell<Option<ProgressBar>>,
    write_bar: RefCell<Option<WriteBar>>,
    /// Every profile written so far.
    pub(super) profiles: RefCell<Vec<ProfileLocation>>,
    error: RefCell<Option<anyhow::Error>>,
}

impl Printer {
    pub(super) fn new(dfx: &DfxArgs) -> Printer {
        Printer {
            traces: dfx.traces(),
            swimlane: dfx.swimlane.is_some_and(|l| l > 0),
            run_bar: RefCell::new(None),
            write_bar: RefCell::new(None),
            profiles: RefCell::new(Vec::new()),
            error: RefCell::new(None),
        }
    }

    /// Keeps the first printing error.
    fn keep(&self, r: anyhow::Result<()>) {
        if let Err(e) = r {
            self.error.borrow_mut().get_or_insert(e);
        }
    }

    /// What to do with the profiles written so far ([`NextSteps`]).
    pub(super) fn print_next_steps(&self) -> anyhow::Result<()> {
        crate::stdout::print(
            &NextSteps { profiles: &self.profiles.borrow(), swimlane: self.swimlane }.to_string(),
        )
    }

    /// The job's result, with a printing error first (a closed pipe ends the command quietly)
    /// and `--out`'s refusal named as the option.
    pub(super) fn outcome(
        &self,
        done: Result<ferry_job::JobOutcome, JobError>,
    ) -> anyhow::Result<ferry_job::JobOutcome> {
        if let Some(e) = self.error.borrow_mut().take() {
            return Err(e);
        }
        done.map_err(|e| match e {
            JobError::OutDir { dir, source } => {
                anyhow::Error::new(source).context(format!("--out {}", dir.display()))
            }
            e => e.into(),
        })
    }
}

impl Observer for Printer {
    fn chip_started(&self, s: &JobStart<'_>) {
        self.keep(crate::stdout::print(&s.to_string()));
    }

    fn kernels_loaded(&self, path: &Path, added: &[RegisteredKernel]) {
        self.keep(crate::stdout::print(&LoadedLibrary { path, kernels: added }.to_string()));
    }

    fn graph_ready(&self, g: &GraphReady<'_>) {
        self.keep(crate::stdout::print(&g.to_string()));
    }

    fn run_progress(&self, case: &str, done: u64, total: u64) {
        let mut bar = self.run_bar.borrow_mut();
        let b = bar.get_or_insert_with(|| {
            let b = ProgressBar::new(total);
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix:>16} [{bar:40}] {pos}/{len} tasks ({percent}%) eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            b.set_prefix(case.to_string());
            b
        });
        b.set_position(done);
    }

    fn run_ended(&self, _case: &str) {
        if let Some(b) = self.run_bar.borrow_mut().take() {
            b.finish_and_clear();
        }
    }

    fn repeated(&self, case: &str, rep: &RepeatReport) {
        self.keep(crate::stdout::print(&RepeatLine { case, report: rep }.to_string()));
    }

    fn write_progress(&self, case: &str, p: WriteProgress) {
        self.write_bar.borrow_mut().get_or_insert_with(|| WriteBar::new(case)).update(p);
    }

    fn write_ended(&self, _case: &str) {
        if let Some(b) = self.write_bar.borrow_mut().take() {
            b.finish();
        }
    }

    fn profile_written(&self, _case: &str, p: &WrittenProfile) {
        let (traces, chrome) = self.traces;
        let lines = ProfileWriteLines { profile: p, perfetto: traces, chrome };
        self.keep(crate::stdout::print(&lines.to_string()));
        self.profiles.borrow_mut().push(ProfileLocation {
            dir: p.dir.clone(),
            runs: p.runs.iter().map(|r| r.dir.clone()).collect(),
            perfetto: traces,
            chrome,
        });
    }

    fn failed_run_kept(&self, _dir: &Path) {
        self.keep((|| {
            crate::stdout::outln!("the run failed; its profile is complete and readable")?;
            self.print_next_steps()
        })());
    }
}

/// The write phase's progress bar: hidden for the first second (most writes are done by then),
/// then records of the files, then items of the traces.
struct WriteBar {
    start: Instant,
    name: String,
    bar: RefCell<Option<ProgressBar>>,
}

impl WriteBar {
    fn new(name: &str) -> Self {
        Self { start: Instant::now(), name: name.to_string(), bar: RefCell::new(None) }
    }

    fn update(&self, p: WriteProgress) {
        if self.start.elapsed() < Duration::from_secs(1) {
            return;
        }
        let mut bar = self.bar.borrow_mut();
        let b = bar.get_or_insert_with(|| {
            let b = ProgressBar::new(p.total);
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix:>16} [{bar:40}] {pos}/{len} {msg} ({percent}%) eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            b.set_prefix(self.name.clone());
            b
        });
        if b.length() != Some(p.total) {
            b.set_length(p.total);
        }
        let unit = match p.phase {
            WritePhase::Files => "records",
            WritePhase::Traces => "trace items",
        };
        b.set_message(format!("{unit}, {}", p.file));
        b.set_position(p.done);
    }

    fn finish(&self) {
        if let Some(b) = self.bar.borrow_mut().take() {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(done: u64) -> WriteProgress {
        WriteProgress { phase: WritePhase::Files, file: "deps.json", done, total: 100 }
    }

    #[test]
    fn the_write_bar_appears_only_after_a_second() {
        let quick = WriteBar::new("storm");
        quick.update(progress(10));
        assert!(quick.bar.borrow().is_none(), "a bar within the first second");
        let mut slow = WriteBar::new("storm");
        slow.start -= Duration::from_secs(2);
        slow.update(progress(10));
        let bar = slow.bar.borrow().clone().expect("a bar after a second");
        assert_eq!((bar.position(), bar.length()), (10, Some(100)));
        // The traces phase resizes the same bar.
        slow.update(WriteProgress { phase: WritePhase::Traces, file: "x", done: 5, total: 7 });
        assert_eq!((bar.position(), bar.length()), (5, Some(7)));
        slow.finish();
        assert!(slow.bar.borrow().is_none());
    }

    #[test]
    fn durations_take_a_unit_and_stay_between_a_millisecond_and_a_day() {
        let d = |s| parse_duration(s).unwrap();
        assert_eq!(d("90s"), Duration::from_secs(90));
        assert_eq!(d("500ms"), Duration::from_millis(500));
        assert_eq!(d("2m"), Duration::from_secs(120));
        assert_eq!(d("1h"), Duration::from_secs(3600));
        assert_eq!(d("1.5s"), Duration::from_millis(1500));
        assert_eq!(d("7"), Duration::from_secs(7), "a bare number is seconds");
        for bad in ["", "s", "10x", "0ms", "0.5ms", "25h", "-1s", "1e3s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert!(parse_duration("10x").unwrap_err().contains("unit of time"));
    }
}
