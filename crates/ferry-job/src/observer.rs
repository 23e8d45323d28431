//! [`Observer`]: what a job reports while it runs, for a progress bar or a log.
use std::path::Path;

use ferry_profile::WriteProgress;
use ferry_runtime::host::profile::WrittenProfile;
use ferry_runtime::host::{RegisteredKernel, RepeatReport, RunnerConfig, Variant};

use crate::CaseKind;

/// The chip a job started, before any graph is registered.
#[derive(Clone, Copy, Debug)]
pub struct JobStart<'a> {
    /// The runner's configuration.
    pub config: &'a RunnerConfig,
    /// Where the graphs are built.
    pub variant: Variant,
    /// The cases the job runs, in order (examples: their names; a workload: none yet, its name
    /// comes with [`Observer::graph_ready`]).
    pub cases: &'a [String],
}

/// A workload or in-memory graph, checked and ready to run.
#[derive(Clone, Copy, Debug)]
pub struct GraphReady<'a> {
    /// What it is.
    pub kind: CaseKind,
    /// Its name.
    pub name: &'a str,
    /// The workload file it came from.
    pub file: Option<&'a Path>,
    /// Tasks of one run.
    pub tasks: u64,
    /// The runner's configuration.
    pub config: &'a RunnerConfig,
    /// Where the graph is built.
    pub variant: Variant,
}

/// What a job reports while it runs. Every method has an empty default; each is called on the
/// thread that called [`Job::run_observed`](crate::Job::run_observed), in the order the job
/// does the work.
pub trait Observer {
    /// The chip started (before kernel libraries load and graphs register).
    fn chip_started(&self, _start: &JobStart<'_>) {}

    /// A kernel library loaded from `path`, adding `kernels`.
    fn kernels_loaded(&self, _path: &Path, _kernels: &[RegisteredKernel]) {}

    /// A workload (or in-memory graph) is checked against the loaded kernels and ready.
    fn graph_ready(&self, _graph: &GraphReady<'_>) {}

    /// A run of `case` is still going after its first second: `done` of `total` tasks (called
    /// every 50 ms from then until it ends).
    fn run_progress(&self, _case: &str, _done: u64, _total: u64) {}

    /// The run of `case` that [`Observer::run_progress`] reported on ended.
    fn run_ended(&self, _case: &str) {}

    /// `case` ran `report.runs` times back to back, every run checked.
    fn repeated(&self, _case: &str, _report: &RepeatReport) {}

    /// The profile of `case` is being written (files, then traces).
    fn write_progress(&self, _case: &str, _progress: WriteProgress) {}

    /// The profile of `case` is written (or the write stopped); a progress display ends here.
    fn write_ended(&self, _case: &str) {}

    /// The profile of `case` is on disk: its files, records, loss and where.
    fn profile_written(&self, _case: &str, _profile: &WrittenProfile) {}

    /// A run failed after its profile was collected: the profile in `dir` is committed,
    /// complete and marked failed, and the job returns the run's error next.
    fn failed_run_kept(&self, _dir: &Path) {}
}

/// An [`Observer`] that reports nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl Observer for Quiet {}
