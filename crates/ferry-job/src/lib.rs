//! ferry as a library: one job API for what `ferry run` does, and the analysis side as typed
//! values.
//!
//! A [`Job`] is a graph — built-in examples, a workload file or an in-memory graph — with the
//! kernel libraries it needs, the simulated chip it runs on, the DFX subsystems to collect and
//! the run's directory. [`Job::run`] claims the directory, starts the chip, loads the
//! libraries, runs and checks every graph inside one DFX session each, writes the profile, the
//! summary and the output tensors, and returns a [`JobOutcome`]; whatever goes wrong comes back
//! as a [`JobError`] with its sources typed (a kernel fault as a [`FailedKernel`] naming the
//! kernel, its library, the task and the workload line). [`Job::run_observed`] reports progress
//! to an [`Observer`] (the `ferry` command's progress bars are one). The `ferry run` command is
//! this crate plus argument parsing and printing.
//!
//! The analysis side: [`Profile::open`] reads a run's directory (its native profile, or the
//! original-format files where the run wrote them; checked against its manifest, every read
//! bounded), [`Profile::report`] computes `ferry report`'s model and [`diff`] `ferry diff`'s.
//!
//! # Examples
//!
//! A workload with all five DFX subsystems into a directory, and its report:
//! ```
//! use ferry_job::{Job, Profile};
//! use ferry_runtime::host::dfx::DfxOptions;
//!
//! let out = std::env::temp_dir().join(format!("ferry-job-doc-{}", std::process::id()));
//! let wl = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/workloads/diamond.toml");
//! let dfx = DfxOptions { swimlane: 4, pmu: 2, dep_gen: true, dump_args: 3, scope_stats: true,
//!                        ..DfxOptions::default() };
//! let done = Job::workload(wl).small(true).dfx(dfx).out(&out).force(true).run().unwrap();
//! let profile = Profile::open(done.profile_dir().unwrap()).unwrap();
//! let report = profile.report();
//! let tasks: u64 = report.kernels.iter().map(|k| k.tasks).sum();
//! assert_eq!(tasks, done.cases[0].output.stats.tasks);
//! assert!(report.kernels.iter().any(|k| k.kernel == "add"));
//! # std::fs::remove_dir_all(&out).unwrap();
//! ```
#![deny(unsafe_code)]

mod error;
mod job;
mod observer;
pub mod scaffold;
mod text;

use std::path::Path;

pub use error::{CaseKind, FailedKernel, JobError, RunFailure};
pub use job::{CaseOutcome, Job, JobOutcome, OutputCheck, ProfileLocation};
pub use observer::{GraphReady, JobStart, Observer, Quiet};
pub use text::{
    device_line, variant_name, LoadedLibrary, NextSteps, OutcomeTable, ProfileWriteLines,
    RepeatLine,
};

use ferry_profile::analysis::{self, Diff, Report};
use ferry_profile::{Needs, OpenError, OpenedRun, RunModel};

/// Checks and compiles the workload file at `file` without running it, against the built-in
/// kernels and the kernel libraries `kernels` (loading them starts a simulated chip, which is
/// torn down again); `small` applies its `[small]` overrides. Returns the compiled workload and
/// what each library added.
///
/// # Errors
/// [`JobError::Workload`] naming the line of the first problem; [`JobError::Start`],
/// [`JobError::Kernels`] for a library that does not load.
pub fn check_workload(
    file: &Path,
    kernels: &[std::path::PathBuf],
    small: bool,
) -> Result<CheckedWorkload, JobError> {
    use ferry_runtime::host::{DeviceRunner, KernelRegistry, RunnerConfig};
    let mut loaded = Vec::new();
    let registry = if kernels.is_empty() {
        std::sync::Arc::new(KernelRegistry::new())
    } else {
        let mut r = DeviceRunner::new(RunnerConfig::small(ferry_sim::Arch::A2a3))
            .map_err(JobError::Start)?;
        for path in kernels {
            let added = r
                .load_kernels_file(path)
                .map_err(|source| JobError::Kernels { path: path.clone(), source })?;
            loaded.push((path.clone(), added));
        }
        let k = r.kernel_registry();
        r.finalize().map_err(JobError::Finalize)?;
        k
    };
    let workload = ferry_workload::Workload::load(file, &*registry, small)?;
    Ok(CheckedWorkload { workload, loaded })
}

/// What [`check_workload`] found: the compiled workload, and each kernel library loaded with
/// the kernels it added.
#[derive(Debug)]
pub struct CheckedWorkload {
    /// The workload, checked and compiled.
    pub workload: ferry_workload::Workload,
    /// Each library's path and kernels, in order.
    pub loaded: Vec<(std::path::PathBuf, Vec<ferry_runtime::host::RegisteredKernel>)>,
}

/// Installs both AICPU programs of `runner`'s configuration
/// ([`RunnerConfig::programs`](ferry_runtime::host::RunnerConfig::programs)) into its
/// preinstalled directory: method 1's out-of-band step, before any callable loads one. [`Job`]
/// does it itself for a configuration on method 1.
///
/// # Errors
/// [`JobError::Preinstall`].
pub fn install_preinstalled(runner: &ferry_runtime::host::DeviceRunner) -> Result<(), JobError> {
    let os = runner.device().aicpu_os();
    let programs = runner.config().programs;
    for p in [programs.device_orchestrated, programs.host_built_graph] {
        os.install_preinstalled(&ferry_launch::loader::preinstalled_name(p.name), p.bytes)
            .map_err(|source| JobError::Preinstall { program: p.name, source })?;
    }
    Ok(())
}

/// A run's profile, read for analysis: the files an analysis needs, each checked against the
/// run's manifest and bounded, and what was skipped or does not add up.
#[derive(Debug)]
pub struct Profile {
    opened: OpenedRun,
}

impl Profile {
    /// Opens the run in `dir` for a report: every DFX file that is there (payloads excepted);
    /// one that is there but unreadable is an error.
    ///
    /// # Errors
    /// [`OpenError`]: the directory is missing, a file is refused or broken, the manifest is
    /// malformed or incomplete, or nothing was read.
    pub fn open(dir: &Path) -> Result<Profile, OpenError> {
        Profile::open_with(dir, &Needs::REPORT)
    }

    /// Opens the run in `dir` reading the files `needs` names.
    ///
    /// # Errors
    /// As [`Profile::open`].
    pub fn open_with(dir: &Path, needs: &Needs) -> Result<Profile, OpenError> {
        let native = ferry_runtime::host::profile::NativeReader;
        Ok(Profile { opened: ferry_profile::open_run_with(dir, needs, &native)? })
    }

    /// `ferry report`'s model: per-kernel time, per-core utilisation, the PMU summary, stalls,
    /// loss and the critical paths.
    pub fn report(&self) -> Report {
        analysis::report_opened(&self.opened)
    }

    /// The run's records.
    pub fn model(&self) -> &RunModel {
        &self.opened.run
    }

    /// What was skipped or does not add up, one line each.
    pub fn warnings(&self) -> &[String] {
        &self.opened.warnings
    }

    /// Why the run failed, when its manifest says it did (its profile is complete).
    pub fn failure(&self) -> Option<&str> {
        self.opened.failure()
    }

    /// The files as opened (for a caller that needs the manifest's view).
    pub fn opened(&self) -> &OpenedRun {
        &self.opened
    }
}

/// `ferry diff`'s model: run `b` compared with run `a`.
pub fn diff(a: &Profile, b: &Profile) -> Diff {
    analysis::diff(&a.report(), &b.report())
}
