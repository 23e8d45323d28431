//! A run's profile from the session's start to its files: the one call a caller makes to run a
//! graph with DFX and keep what it collected.
//!
//! [`run_profiled`] starts a [`DfxSession`] in the chip's device memory, attaches it to the
//! runner, samples the clock anchors, runs the caller's closure (one launch, or several: the
//! session spans everything the closure launches), samples the anchors again, detaches, builds
//! the [`RunModel`] and writes every file into the claimed output directory, recording each in
//! its manifest. The run's own result comes back beside the profile's, so a run that failed
//! (a kernel fault, a wrong result found by the closure) still leaves its profile: the caller
//! commits the manifest with the run's [`RunOutcome`](ferry_profile::RunOutcome).
//!
//! The run's directory is a [`RunDir`]: claimed with [`claim_run_dir`] before the chip starts,
//! a profile written into it through [`ProfileTarget::in_run_dir`], and at the end
//! [`RunDir::finish`] (the [`SummaryJson`] of [`run_summary`], [`example_summary`] or
//! [`workload_summary`], and the output tensors) or [`RunDir::fail`].
//!
//! The steps are also available one by one ([`Profiler::start`], [`Profiler::finish`],
//! [`write_profile`]) for a caller that interleaves its own work between them.
//!
//! # Example
//! ```
//! use ferry_profile::{Manifest, RunOutcome, WriteOptions};
//! use ferry_runtime::examples::{Example, Size};
//! use ferry_runtime::host::dfx::DfxOptions;
//! use ferry_runtime::host::profile::{
//!     claim_run_dir, example_summary, run_profiled, run_summary, ProfileTarget,
//! };
//! use ferry_runtime::host::{DeviceRunner, RunnerConfig, Variant};
//!
//! let dir = std::env::temp_dir().join(format!("ferry-profile-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let cfg = RunnerConfig::small(ferry_sim::Arch::A2a3);
//! // Claimed before the chip starts: a directory the run cannot own costs nothing.
//! let mut rd = claim_run_dir(&dir, &cfg, &["my-tool".into()], false).unwrap();
//! let mut runner = DeviceRunner::new(cfg).unwrap();
//! let run = Example::Vector.build(Size::Small);
//! runner.register_callable(0, run.callable.clone()).unwrap();
//! let dfx = DfxOptions { swimlane: 1, ..DfxOptions::default() };
//! let target = ProfileTarget::in_run_dir(&mut rd, None, "vector", WriteOptions::default())
//!     .unwrap();
//! let done = run_profiled(&mut runner, &dfx, run.args.scratch_bytes, Some(target), |r| {
//!     let p = r.prepare(0, run.args.clone())?;
//!     let host = p.host_orchestration().cloned();
//!     let l = r.launch(p)?;
//!     Ok::<_, ferry_runtime::RunError>((r.finalize_run(l)?, host))
//! })
//! .unwrap();
//! let profile = done.profile.unwrap().expect("DFX was on");
//! // One AICore row per block, at least one per task; each file recorded for the manifest.
//! assert!(profile.model.swimlane.as_ref().unwrap().aicore_tasks.len() as u64 >= run.tasks);
//! let output = done.run.unwrap();
//! match run.verify(&output) {
//!     Ok(checksum) => {
//!         let mut summary = run_summary(runner.config(), Variant::DeviceOrchestrated);
//!         summary.runs.push(example_summary(Example::Vector, &output, checksum, None));
//!         let tensor = output.tensors[run.output_tensor()].as_deref().unwrap();
//!         rd.finish(&summary, &[("vector", tensor)]).unwrap();
//!     }
//!     // The profile stays readable, marked failed.
//!     Err(e) => assert!(rd.fail(&e.to_string()).unwrap()),
//! }
//! assert_eq!(Manifest::verified(&dir).unwrap().outcome, Some(RunOutcome::Ok));
//! runner.finalize().unwrap();
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```
use std::path::{Path, PathBuf};

use ferry_profile::{
    ClockAnchors, ExampleSummary, FailedTask, HostOrchestration, ManifestError, OutDir,
    OutputError, RunDir, RunDirError, RunLabel, RunModel, ScopeNames, SummaryJson, SummaryRun,
    WorkloadSummary, WriteOptions, WriteReport, Written, WrittenFile, ANCHOR_POST, ANCHOR_PRE,
};

use ferry_profile::recorder::{
    FsyncPolicy, RecordStream, Recorder, RecorderError, Recording, Sealed, RECORD_FILE,
};
use std::sync::Arc;

use super::dfx::{
    sample_clock_anchors, DfxChip, DfxError, DfxOptions, DfxSession, Parts, SessionBackend,
};
use super::{DeviceRunner, RepeatReport, RunOutput, RunnerConfig, RunnerDevice, Variant};
use crate::error::RunnerError;
use crate::examples::Example;
use crate::{DeviceFault, RunError};
use ferry_profile::{NativeDecoder, NativeSession, Need, Needs};

/// Why a profile could not be collected or written.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Starting the session or building the model failed.
    #[error(transparent)]
    Dfx(#[from] DfxError),
    /// Attaching the session to the runner or detaching it failed.
    #[error(transparent)]
    Runner(#[from] RunnerError),
    /// Writing a file failed.
    #[error(transparent)]
    Write(#[from] OutputError),
    /// Recording a file in the manifest failed.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// Starting to write the run's directory failed.
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// Writing the native profile failed.
    #[error(transparent)]
    Recorder(#[from] RecorderError),
    /// A written file lies outside the claimed directory.
    #[error("{} is outside the output directory {}", file.display(), dir.display())]
    Outside {
        /// The file.
        file: PathBuf,
        /// The claimed directory.
        dir: PathBuf,
    },
}

/// A DFX session attached to a runner: everything launched on the runner until
/// [`finish`](Self::finish) is collected into one profile.
#[derive(Debug)]
pub struct Profiler {
    session: DfxSession,
    anchors: ClockAnchors,
    host: Option<HostOrchestration>,
}

impl Profiler {
    /// Starts a session for `opts` in `runner`'s device memory and attaches it, then samples
    /// the clock anchors before the first run. `scratch_bytes` is the largest scratch any run
    /// of the session asks for. `None` when `opts` enables no subsystem.
    ///
    /// # Errors
    /// [`ProfileError::Dfx`] (transports, device memory), [`ProfileError::Runner`] (attaching).
    pub fn start<P: RunnerDevice<Device: SessionBackend>>(
        runner: &mut DeviceRunner<P>,
        opts: &DfxOptions,
        scratch_bytes: u64,
    ) -> Result<Option<Profiler>, ProfileError> {
        Self::start_recorded(runner, opts, scratch_bytes, None)
    }

    /// [`start`](Self::start), with every collected buffer also sealed into `rec` (the native
    /// profile, written while the run runs) when there is one.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_recorded<P: RunnerDevice<Device: SessionBackend>>(
        runner: &mut DeviceRunner<P>,
        opts: &DfxOptions,
        scratch_bytes: u64,
        rec: Option<Arc<Recorder>>,
    ) -> Result<Option<Profiler>, ProfileError> {
        Self::start_as(runner, opts, scratch_bytes, rec, true)
    }

    /// [`start_recorded`](Self::start_recorded) for a profile that is its native profile alone
    /// ([`DfxSession::start_recorded_only`]: the collectors keep no record); finish it with
    /// [`finish_accounting`](Self::finish_accounting).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_recorded_only<P: RunnerDevice<Device: SessionBackend>>(
        runner: &mut DeviceRunner<P>,
        opts: &DfxOptions,
        scratch_bytes: u64,
        rec: Arc<Recorder>,
    ) -> Result<Option<Profiler>, ProfileError> {
        Self::start_as(runner, opts, scratch_bytes, Some(rec), false)
    }

    fn start_as<P: RunnerDevice<Device: SessionBackend>>(
        runner: &mut DeviceRunner<P>,
        opts: &DfxOptions,
        scratch_bytes: u64,
        rec: Option<Arc<Recorder>>,
        keep: bool,
    ) -> Result<Option<Profiler>, ProfileError> {
        if !opts.any() {
            return Ok(None);
        }
        let chip = DfxChip::of(runner.config(), scratch_bytes);
        let session = match rec {
            Some(rec) if keep => DfxSession::start_recorded(opts, chip, runner.device(), rec)?,
            Some(rec) => DfxSession::start_recorded_only(opts, chip, runner.device(), rec)?,
            None => DfxSession::start_on(opts, chip, runner.device())?,
        };
        runner.attach_dfx_session(Some(&session))?;
        let mut anchors = ClockAnchors::new_sim();
        sample_clock_anchors(runner.device(), ANCHOR_PRE, &mut anchors);
        Ok(Some(Profiler { session, anchors, host: None }))
    }

    /// Notes a host-built run's host orchestration (its phases go into the swimlane file); the
    /// last one noted is kept.
    pub fn note_host_orchestration(&mut self, host: Option<HostOrchestration>) {
        if host.is_some() {
            self.host = host;
        }
    }

    /// Ends the session after the runs: samples the anchors after them, detaches from
    /// `runner`, stops collection and builds one model per run the session spanned
    /// ([`DfxSession::finish_runs`]: one, unlabelled, for a single run; several, each labelled
    /// with its run, when the closure launched several), each named `case` (the name map's
    /// name) and carrying the session's clock anchors.
    ///
    /// # Errors
    /// [`ProfileError::Runner`] (detaching), [`ProfileError::Dfx`] (records that do not decode,
    /// a DepGen graph that disagrees with the runtime's, a dead host thread, records that
    /// cannot be told apart by run).
    pub fn finish<P: RunnerDevice>(
        self,
        runner: &mut DeviceRunner<P>,
        case: &str,
    ) -> Result<Vec<RunModel>, ProfileError> {
        self.finish_as(runner, case, true)
    }

    /// [`finish`](Self::finish) for a session recorded into a native profile that is the whole
    /// profile: each run's model holds its loss accounting, labels, case and anchors, no rows
    /// ([`DfxSession::finish_runs_accounting`]); a reader rebuilds them from the native profile.
    ///
    /// # Errors
    /// As [`finish`](Self::finish), but for the conversion's.
    pub fn finish_accounting<P: RunnerDevice>(
        self,
        runner: &mut DeviceRunner<P>,
        case: &str,
    ) -> Result<Vec<RunModel>, ProfileError> {
        self.finish_as(runner, case, false)
    }

    fn finish_as<P: RunnerDevice>(
        mut self,
        runner: &mut DeviceRunner<P>,
        case: &str,
        rows: bool,
    ) -> Result<Vec<RunModel>, ProfileError> {
        sample_clock_anchors(runner.device(), ANCHOR_POST, &mut self.anchors);
        runner.attach_dfx_session(None)?;
        let t0 = std::time::Instant::now();
        let mut models = if rows {
            self.session.finish_runs()?
        } else {
            self.session.finish_runs_accounting()?
        };
        tracing::debug!(ms = t0.elapsed().as_secs_f64() * 1e3, "phase: dfx model");
        let last = models.len().saturating_sub(1);
        for (k, model) in models.iter_mut().enumerate() {
            model.meta.case = Some(case.to_string());
            model.meta.clock_anchors = Some(self.anchors.clone());
            // The host orchestration noted is the last run's.
            if k == last {
                model.meta.host_orchestration = self.host.take();
            }
        }
        Ok(models)
    }
}

/// Writes `model`'s files (and, as `opts` says, its traces) into `dir`, which lies in (or is)
/// `out`'s directory, and records each file in `out`'s manifest.
///
/// # Errors
/// [`ProfileError::Write`], [`ProfileError::Outside`].
///
/// # Panics
/// Before [`OutDir::begin`].
pub fn write_profile(
    out: &mut OutDir,
    dir: &Path,
    model: &RunModel,
    opts: &WriteOptions<'_>,
) -> Result<WriteReport, ProfileError> {
    let t0 = std::time::Instant::now();
    let handle = sub_dir(out, dir)?;
    let report = ferry_profile::write_all_in(&handle, model, opts)?;
    tracing::debug!(ms = t0.elapsed().as_secs_f64() * 1e3, "phase: dfx write");
    for f in &report.files {
        let rel = out.relative(&f.path).ok_or_else(|| ProfileError::Outside {
            file: f.path.clone(),
            dir: out.path().to_path_buf(),
        })?;
        out.record(&rel, Written { bytes: f.bytes, xxh3: f.xxh3 });
    }
    Ok(report)
}

/// The handle of `dir`, which lies in (or is) `out`'s directory: reached from `out`'s handle,
/// created where missing, without following a link.
fn sub_dir(out: &OutDir, dir: &Path) -> Result<ferry_fs::Dir, ProfileError> {
    let outside =
        || ProfileError::Outside { file: dir.to_path_buf(), dir: out.path().to_path_buf() };
    if dir == out.path() {
        return Ok(out.dir().clone());
    }
    let rel = out.relative(dir).ok_or_else(outside)?;
    out.dir().create_sub(&rel).map_err(|e| ProfileError::Write(e.into()))
}

/// Where [`run_profiled`] writes: the claimed output directory (already
/// [begun](OutDir::begin)), the directory of this profile inside it, its case name and what to
/// write.
pub struct ProfileTarget<'a> {
    /// The claimed output directory; every file written is recorded in its manifest.
    pub out: &'a mut OutDir,
    /// The profile's directory: `out`'s, or a subdirectory of it.
    pub dir: PathBuf,
    /// The case name (names the name map).
    pub case: String,
    /// Files, traces, progress.
    pub write: WriteOptions<'a>,
    /// What the run's scope sites are called (a workload's scope labels): written beside the
    /// scope records and used to label them; empty for none.
    pub scope_names: ScopeNames,
    /// Runs of a session over several runs that are warm-up runs (the first ones), recorded in
    /// `runs.json` for the readers to set apart.
    pub warmup: u32,
    /// When the native profile ([`RECORD_FILE`], written while the run runs) is synced.
    pub fsync: FsyncPolicy,
}

impl<'a> ProfileTarget<'a> {
    /// The target of a profile named `case` in the run directory `rd`, in its subdirectory
    /// `sub` when several profiles share it: starts writing `rd` (its earlier run's files go).
    ///
    /// # Errors
    /// [`ProfileError::RunDir`]: starting to write the directory.
    pub fn in_run_dir(
        rd: &'a mut RunDir,
        sub: Option<&str>,
        case: &str,
        write: WriteOptions<'a>,
    ) -> Result<ProfileTarget<'a>, ProfileError> {
        let dir = sub.map_or_else(|| rd.path().to_path_buf(), |s| rd.path().join(s));
        Ok(ProfileTarget {
            out: rd.begun()?,
            dir,
            case: case.to_string(),
            write,
            scope_names: ScopeNames::new(),
            warmup: 0,
            fsync: FsyncPolicy::default(),
        })
    }

    /// This target, with the run's scope sites called `names` (a workload's scope labels).
    pub fn with_scope_names(self, names: ScopeNames) -> ProfileTarget<'a> {
        ProfileTarget { scope_names: names, ..self }
    }

    /// This target, with its native profile synced by `policy`.
    pub fn with_fsync(self, policy: FsyncPolicy) -> ProfileTarget<'a> {
        ProfileTarget { fsync: policy, ..self }
    }

    /// This target, with the session's first `warmup` runs recorded as warm-up runs.
    pub fn with_warmup(self, warmup: u32) -> ProfileTarget<'a> {
        ProfileTarget { warmup, ..self }
    }
}

/// Every file a run may put in its output directory: the summary, the built-in examples'
/// output tensors and the profile's files, at the top and in each example's subdirectory
/// ([`ferry_profile::run_dir_names`] of [`Example::ALL`]).
pub fn run_dir_names() -> Vec<String> {
    let cases: Vec<&str> = Example::ALL.iter().map(|e| e.name()).collect();
    ferry_profile::run_dir_names(&cases)
}

/// Claims `dir` for a run on `cfg`'s chip made by `command` (see [`RunDir::claim`]), before the
/// chip starts.
///
/// # Errors
/// As [`RunDir::claim`].
pub fn claim_run_dir(
    dir: &Path,
    cfg: &RunnerConfig,
    command: &[String],
    force: bool,
) -> Result<RunDir, RunDirError> {
    RunDir::claim(dir, cfg.arch.name(), command, &run_dir_names(), force)
}

/// The [`SummaryJson`] of runs on `cfg` built as `variant` (`device` or `host`), without runs.
pub fn run_summary(cfg: &RunnerConfig, variant: Variant) -> SummaryJson {
    let variant = match variant {
        Variant::DeviceOrchestrated => "device",
        Variant::HostBuiltGraph => "host",
    };
    SummaryJson::new(
        cfg.arch.name(),
        cfg.aicpu_threads,
        cfg.aic,
        cfg.aiv,
        variant,
        &cfg.path.to_string(),
    )
}

fn per_kernel(out: &RunOutput) -> std::collections::BTreeMap<String, u64> {
    out.stats.per_kernel.iter().cloned().collect()
}

/// A verified example run's summary entry: its output's figures, the checksum verification
/// computed and, with `--repeat`, the repetition's.
pub fn example_summary(
    example: Example,
    out: &RunOutput,
    checksum: f64,
    repeat: Option<&RepeatReport>,
) -> SummaryRun {
    let s = &out.stats;
    SummaryRun::Example(ExampleSummary {
        checksum,
        example: example.name().to_string(),
        per_kernel: per_kernel(out),
        repeat: repeat.map_or(1, |r| r.runs),
        runs_per_s: repeat.map(RepeatReport::runs_per_s),
        tasks: s.tasks,
        tasks_per_s: s.tasks as f64 / s.wall.as_secs_f64(),
        verified: true,
        wall_s: s.wall.as_secs_f64(),
    })
}

/// A verified workload run's summary entry: the workload `name` from `file`.
pub fn workload_summary(name: &str, file: &Path, out: &RunOutput, checksum: f64) -> SummaryRun {
    let s = &out.stats;
    SummaryRun::Workload(WorkloadSummary {
        checksum,
        file: file.display().to_string(),
        per_kernel: per_kernel(out),
        tasks: s.tasks,
        verified: true,
        wall_s: s.wall.as_secs_f64(),
        workload: name.to_string(),
    })
}

/// A profile written by [`run_profiled`].
#[derive(Debug)]
pub struct WrittenProfile {
    /// The model the files were written from (the first run's when the session spanned
    /// several: each run's is in [`runs`](Self::runs)). With nothing to write but the native
    /// profile, each model holds its run's loss accounting and labels alone: the records are in
    /// the native profile ([`Profiler::finish_accounting`]).
    pub model: RunModel,
    /// What was written (every run's files, and `runs.json`, when the session spanned several).
    pub report: WriteReport,
    /// Where: the profile's directory (each run's is a directory in it when the session spanned
    /// several).
    pub dir: PathBuf,
    /// When the session spanned several runs, each run's profile, in launch order, written to
    /// `dir/run-000`, `dir/run-001`, … (empty for a single run). Without the original formats
    /// nothing is written there: the analysis commands read `dir/run-NNN` from the native
    /// profile in `dir`.
    pub runs: Vec<WrittenProfile>,
    /// The native profile the session wrote while it ran (`None` for an export, and for each
    /// run of [`runs`](Self::runs): the session's is the one file).
    pub native: Option<NativeWritten>,
}

/// The native profile ([`RECORD_FILE`]) a profiled run wrote while it ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeWritten {
    /// Its path.
    pub path: PathBuf,
    /// Its chunks, records and bytes.
    pub sealed: Sealed,
}

/// What [`run_profiled`] gives back: the run's result and, independently, the profile's.
#[derive(Debug)]
pub struct ProfiledRun<T, E> {
    /// The closure's result.
    pub run: Result<T, E>,
    /// The profile: `Ok(None)` with DFX off (or without a target: nothing is written).
    pub profile: Result<Option<WrittenProfile>, ProfileError>,
}

/// Writes the models of a session into `t`: one run's files into `t.dir`; several runs' each
/// into `t.dir/run-NNN` ([`RunLabel::dir_name`]) with `runs.json` beside them.
fn write_session(
    t: ProfileTarget<'_>,
    mut models: Vec<RunModel>,
) -> Result<WrittenProfile, ProfileError> {
    // The native profile only: nothing to write, a session's runs named by their directories.
    if !t.write.files && !t.write.traces {
        let report = WriteReport::default();
        if models.len() == 1 {
            let model = models.remove(0);
            return Ok(WrittenProfile {
                model,
                report,
                dir: t.dir,
                runs: Vec::new(),
                native: None,
            });
        }
        let runs: Vec<WrittenProfile> = models
            .into_iter()
            .enumerate()
            .map(|(k, m)| WrittenProfile {
                dir: t.dir.join(RunLabel::dir_name(m.meta.run.map_or(k as u32, |r| r.index))),
                model: m,
                report: WriteReport::default(),
                runs: Vec::new(),
                native: None,
            })
            .collect();
        let model = runs[0].model.clone();
        return Ok(WrittenProfile { model, report, dir: t.dir, runs, native: None });
    }
    if models.len() == 1 {
        let model = models.remove(0);
        let report = write_profile(t.out, &t.dir, &model, &t.write)?;
        return Ok(WrittenProfile { model, report, dir: t.dir, runs: Vec::new(), native: None });
    }
    let mut runs = Vec::with_capacity(models.len());
    let mut total = WriteReport::default();
    let mut session = ferry_profile::session_runs(&models);
    session.warmup = t.warmup;
    for (k, model) in models.into_iter().enumerate() {
        let index = model.meta.run.map_or(k as u32, |r| r.index);
        let dir = t.dir.join(RunLabel::dir_name(index));
        let report = write_profile(t.out, &dir, &model, &t.write)?;
        total.add(&report);
        runs.push(WrittenProfile { model, report, dir, runs: Vec::new(), native: None });
    }
    let w = ferry_profile::write_runs_in(&sub_dir(t.out, &t.dir)?, &session)?;
    let path = t.dir.join(ferry_profile::RUNS_FILE);
    let rel = t.out.relative(&path).ok_or_else(|| ProfileError::Outside {
        file: path.clone(),
        dir: t.out.path().to_path_buf(),
    })?;
    t.out.record(&rel, w);
    let records = session.runs.len() as u64;
    total.files.push(WrittenFile {
        path,
        bytes: w.bytes,
        xxh3: w.xxh3,
        records,
        elapsed: std::time::Duration::ZERO,
    });
    total.bytes += w.bytes;
    let model = runs[0].model.clone();
    Ok(WrittenProfile { model, report: total, dir: t.dir, runs, native: None })
}

/// Lane of the [`RecordStream::Meta`] chunk holding a profile's end: what its models take beside the
/// session's ([`super::dfx::META_SESSION`]).
pub const META_PROFILE: u32 = 1;

/// A profile's end in its native profile: what its models take beside the session's end.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ProfileEnd {
    case: String,
    clock_anchors: Option<ClockAnchors>,
    scope_names: ScopeNames,
    warmup: u32,
    /// A host-built run's host orchestration (the session's last run's).
    host: Option<HostOrchestration>,
}

/// The session a finished run's native profile recorded: its models rebuilt from the native
/// profile alone ([`super::dfx::models_from_recording_parts`], the subsystems in `parts`), each
/// with the run's case, clock anchors and scope names and the last with a host-built run's host
/// orchestration, and the profile's end.
fn session_from_recording(
    rec: &Recording,
    parts: Parts,
) -> Result<(Vec<RunModel>, ProfileEnd), ProfileError> {
    let native =
        |why: &str| ProfileError::Dfx(super::dfx::CollectError::Native(why.to_string()).into());
    let chunk = rec
        .chunks
        .iter()
        .find(|c| c.stream == RecordStream::Meta && c.lane == META_PROFILE)
        .ok_or_else(|| native("it holds no profile end (the run did not finish)"))?;
    let mut end: ProfileEnd = serde_json::from_slice(rec.payload(chunk))
        .map_err(|e| native(&format!("its profile end: {e}")))?;
    let mut models = super::dfx::models_from_recording_parts(rec, parts)?;
    for m in &mut models {
        m.meta.case = Some(end.case.clone());
        m.meta.clock_anchors = end.clock_anchors.clone();
        if let Some(s) = m.scopes.as_mut() {
            s.names = end.scope_names.clone();
        }
    }
    if let Some(m) = models.last_mut() {
        m.meta.host_orchestration = end.host.take();
    }
    Ok((models, end))
}

/// Writes the original formats of the profile `rec` recorded (a finished run's native profile)
/// into `t`, as the run wrote them: the session's models rebuilt from the native profile alone
/// ([`super::dfx::models_from_recording`]), with the run's case, clock anchors, scope names,
/// host orchestration and warm-up runs.
///
/// # Errors
/// [`ProfileError::Dfx`] when `rec` holds no session or profile end (the run did not finish), or
/// records that disagree with them; writing the files.
pub fn export_recording(
    rec: &Recording,
    t: ProfileTarget<'_>,
) -> Result<WrittenProfile, ProfileError> {
    let (models, end) = session_from_recording(rec, Parts::ALL)?;
    let t = ProfileTarget { case: end.case, scope_names: end.scope_names, warmup: end.warmup, ..t };
    write_session(t, models)
}

/// The analysis commands' reader of a finished run's native profile
/// ([`ferry_profile::open_run_with`], [`ferry_profile::open_any`]): the session's models
/// rebuilt as [`export_recording`] rebuilds them, only for the subsystems the analysis needs.
///
/// # Example
/// ```no_run
/// use ferry_profile::{open_run_with, Needs};
/// use ferry_runtime::host::profile::NativeReader;
/// let run = open_run_with("out".as_ref(), &Needs::DEPS, &NativeReader).unwrap();
/// assert!(run.run.deps.is_some());
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NativeReader;

impl NativeReader {
    /// The subsystems an analysis that needs `needs` reads.
    pub fn parts(needs: &Needs) -> Parts {
        let on = |n: Need| n != Need::Skip;
        Parts {
            swimlane: on(needs.swimlane),
            pmu: on(needs.pmu),
            dep_gen: on(needs.deps),
            args: on(needs.args),
            scopes: on(needs.scopes),
        }
    }
}

impl NativeDecoder for NativeReader {
    fn decode(
        &self,
        rec: &Recording,
        needs: &Needs,
    ) -> Result<NativeSession, Box<dyn std::error::Error + Send + Sync>> {
        let (models, end) = session_from_recording(rec, NativeReader::parts(needs))?;
        Ok(NativeSession { models, warmup: end.warmup })
    }
}

/// Creates the native profile of `t` ([`RECORD_FILE`] in its directory, through the claimed
/// directory's handle) and its path relative to the claimed directory.
fn open_recorder(t: &mut ProfileTarget<'_>) -> Result<(Arc<Recorder>, String), ProfileError> {
    let path = t.dir.join(RECORD_FILE);
    let outside = || ProfileError::Outside { file: path.clone(), dir: t.out.path().to_path_buf() };
    let rel = t.out.relative(&path).ok_or_else(outside)?;
    let handle = sub_dir(t.out, &t.dir)?;
    // Listed before it exists: a run killed while writing it leaves a file the next run
    // removes.
    t.out.plan(&rel)?;
    let rec = Recorder::create(&handle, RECORD_FILE, t.fsync)?;
    Ok((Arc::new(rec), rel))
}

/// What a failed run's error tells its profile: the device fault behind it, if any. A kernel
/// that failed on its core ([`DeviceFault::Kernel`]) names the task the profile marks
/// ([`RunMeta::failed`](ferry_profile::RunMeta::failed)).
pub trait RunFault {
    /// The device fault the run failed with (`None`: it failed otherwise, or not on the chip).
    fn device_fault(&self) -> Option<&DeviceFault>;
}

impl RunFault for RunError {
    fn device_fault(&self) -> Option<&DeviceFault> {
        match self {
            RunError::Fault(f) => Some(f),
            _ => None,
        }
    }
}

/// A message says no fault (a caller's own verdict, a check that failed).
impl RunFault for String {
    fn device_fault(&self) -> Option<&DeviceFault> {
        None
    }
}

/// The task a kernel fault names, its kernel named from `runner`'s registry (`id N` when the
/// registry does not know it).
pub fn failed_task<P: RunnerDevice>(
    fault: &DeviceFault,
    runner: &DeviceRunner<P>,
) -> Option<FailedTask> {
    let DeviceFault::Kernel { task, kernel, .. } = fault else { return None };
    let name = runner.kernels().info(*kernel).map_or_else(|| format!("id {kernel}"), |k| k.name);
    Some(FailedTask { id: *task, kernel: name, run: None })
}

/// Runs `run` on `runner` inside one DFX session for `opts` and writes the profile to `target`
/// (see the [module docs](self)). `run` returns its result and, for a host-built run, the host
/// orchestration to put in the swimlane file; it may launch any number of runs. The profile is
/// collected and written whether or not `run` failed; a run whose kernel failed on its core
/// ([`RunFault`]) has that task marked in the last run's model, and so in its traces.
///
/// # Errors
/// The session could not start (as [`Profiler::start`]); nothing ran.
pub fn run_profiled<T, E: RunFault, P: RunnerDevice<Device: SessionBackend>>(
    runner: &mut DeviceRunner<P>,
    opts: &DfxOptions,
    scratch_bytes: u64,
    mut target: Option<ProfileTarget<'_>>,
    run: impl FnOnce(&mut DeviceRunner<P>) -> Result<(T, Option<HostOrchestration>), E>,
) -> Result<ProfiledRun<T, E>, ProfileError> {
    // The native profile is written while the run runs: created before the chip starts.
    let rec = match &mut target {
        Some(t) if opts.any() => Some(open_recorder(t)?),
        _ => None,
    };
    // The native profile alone (nothing else to write): the collectors keep no record and no
    // record is converted at the end; the readers rebuild the rows from it when asked.
    let writes = target.as_ref().is_none_or(|t| t.write.files || t.write.traces);
    let t0 = std::time::Instant::now();
    let profiler = match &rec {
        Some((r, _)) if !writes => {
            Profiler::start_recorded_only(runner, opts, scratch_bytes, r.clone())?
        }
        _ => Profiler::start_recorded(
            runner,
            opts,
            scratch_bytes,
            rec.as_ref().map(|r| r.0.clone()),
        )?,
    };
    tracing::debug!(ms = t0.elapsed().as_secs_f64() * 1e3, "phase: dfx start");
    let t0 = std::time::Instant::now();
    let result = run(runner);
    tracing::debug!(ms = t0.elapsed().as_secs_f64() * 1e3, "phase: run");
    let Some(mut profiler) = profiler else {
        return Ok(ProfiledRun { run: result.map(|(t, _)| t), profile: Ok(None) });
    };
    let result = result.map(|(t, host)| {
        profiler.note_host_orchestration(host);
        t
    });
    let failed =
        result.as_ref().err().and_then(E::device_fault).and_then(|f| failed_task(f, runner));
    let profile = (|| {
        let mut native = None;
        let case = target.as_ref().map_or("run", |t| t.case.as_str()).to_string();
        let models = if writes || rec.is_none() {
            profiler.finish(runner, &case)
        } else {
            profiler.finish_accounting(runner, &case)
        };
        let Some(t) = target else { return models.map(|_| None) };
        // Every buffer is sealed once the session stopped: the file is listed with its size
        // and hash whatever became of the model.
        if let Some((rec, rel)) = &rec {
            if let Ok(models) = &models {
                let end = ProfileEnd {
                    case: case.clone(),
                    clock_anchors: models.first().and_then(|m| m.meta.clock_anchors.clone()),
                    scope_names: t.scope_names.clone(),
                    warmup: t.warmup,
                    host: models.last().and_then(|m| m.meta.host_orchestration.clone()),
                };
                // Serializing plain data cannot fail; a profile without its end is not exported.
                if let Ok(json) = serde_json::to_vec(&end) {
                    rec.append_bytes(RecordStream::Meta, META_PROFILE, 0, &json);
                }
            }
            // Synced with the run's last files, before the manifest says it is complete.
            let (written, file) = rec.finish_unsynced()?;
            t.out.record_unsynced(rel, written, file);
            let sealed = rec.sealed();
            native = Some(NativeWritten { path: t.dir.join(RECORD_FILE), sealed });
        }
        let mut models = models?;
        // The run that failed is the last the session spans.
        if let (Some(m), Some(f)) = (models.last_mut(), failed) {
            m.meta.failed = Some(FailedTask { run: m.meta.run.map(|r| r.index), ..f });
        }
        for m in &mut models {
            if let Some(s) = m.scopes.as_mut() {
                s.names = t.scope_names.clone();
            }
        }
        let mut written = write_session(t, models)?;
        written.native = native;
        Ok(Some(written))
    })();
    Ok(ProfiledRun { run: result, profile })
}
