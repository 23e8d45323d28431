//! ferry from Python: the native module (`ferry._ferry`) of the `ferry` Python package.
//!
//! The package (python/, built with `pip install ./python`) gives Python what the `ferry-job`
//! crate gives Rust: run a built-in example, a workload file or a graph built from numpy arrays
//! on a simulated chip, get the outputs back as numpy arrays that own the run's buffers (no
//! copy), get every failure as a Python exception carrying the typed error's fields, and read a
//! profile as columns (dicts of numpy arrays, which `pandas.DataFrame` and `pyarrow.table` take
//! as they are) and its report and diff as dicts. The Python side (`ferry/__init__.py`) builds
//! graphs and holds the dtype table; this crate is the thin layer over [`ferry_job`].
//!
//! The Rust half is plain Rust where it can be — [`Options`] and [`tables`] — so the tests of
//! this crate need no interpreter; the `#[pyfunction]`s only convert.
//!
//! # Examples
//! The options a Python call passes, parsed and turned into a job (what `ferry._ferry.run`
//! does before it runs it):
//! ```
//! use _ferry::Options;
//! let o = Options { arch: "a5".into(), swimlane: 4, out: Some("/tmp/x".into()), ..Options::default() };
//! let job = o.job(_ferry::Source::Example("vector".into())).unwrap();
//! assert_eq!(job.runner_config().arch.name(), "a5");
//! assert!(Options { arch: "a9".into(), ..Options::default() }
//!     .job(_ferry::Source::Example("vector".into()))
//!     .is_err());
//! ```

mod errors;
mod module;
pub mod tables;

use std::path::PathBuf;
use std::time::Duration;

use ferry_job::Job;
use ferry_runtime::examples::Example;
use ferry_runtime::host::dfx::DfxOptions;
use ferry_runtime::host::Variant;
use ferry_sim::Arch;

/// What a Python call runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A built-in example by name (`vector`, `paged_attention`, `storm`).
    Example(String),
    /// A workload file.
    Workload(PathBuf),
}

/// The options of a run, as the Python keyword arguments give them.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// `a2a3` or `a5`.
    pub arch: String,
    /// `device` (device-orchestrated) or `host` (host-built graph).
    pub variant: String,
    /// Test-sized graphs.
    pub small: bool,
    /// Kernel libraries to load.
    pub kernels: Vec<PathBuf>,
    /// The orchestration library whose function a workload's `[orchestration]` names.
    pub orchestration: Option<PathBuf>,
    /// ChipSwimlane level (0 off, 1–4).
    pub swimlane: u32,
    /// PMU event type (0 off).
    pub pmu: u32,
    /// DepGen on.
    pub dep_gen: bool,
    /// ArgsDump level (0 off, 1–3).
    pub dump_args: u32,
    /// ScopeStats on.
    pub scope_stats: bool,
    /// The run's directory.
    pub out: Option<PathBuf>,
    /// Replace a complete earlier run there.
    pub force: bool,
    /// Runs back to back.
    pub repeat: u32,
    /// Warm-up runs among them.
    pub warmup: u32,
    /// One kernel's budget in seconds (`None`: the job's default).
    pub kernel_budget_s: Option<f64>,
    /// AIC cores (`None`: the arch's default).
    pub aic: Option<u32>,
    /// AIV cores (`None`: the arch's default).
    pub aiv: Option<u32>,
    /// AICPU scheduler threads (`None`: the arch's default).
    pub aicpu_threads: Option<u32>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            arch: "a2a3".into(),
            variant: "device".into(),
            small: false,
            kernels: Vec::new(),
            orchestration: None,
            swimlane: 0,
            pmu: 0,
            dep_gen: false,
            dump_args: 0,
            scope_stats: false,
            out: None,
            force: false,
            repeat: 1,
            warmup: 0,
            kernel_budget_s: None,
            aic: None,
            aiv: None,
            aicpu_threads: None,
        }
    }
}

/// An option that names nothing ferry has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadOption {
    /// The keyword.
    pub option: &'static str,
    /// What is wrong with its value.
    pub message: String,
}

impl std::fmt::Display for BadOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.option, self.message)
    }
}

impl Options {
    /// The job these options describe for `source`.
    ///
    /// # Errors
    /// [`BadOption`]: an unknown arch, variant or example, or a budget that is not a positive
    /// finite number of seconds.
    pub fn job(&self, source: Source) -> Result<Job, BadOption> {
        let bad = |option, message: String| BadOption { option, message };
        let arch = Arch::from_name(&self.arch)
            .ok_or_else(|| bad("arch", format!("`{}` is not a2a3 or a5", self.arch)))?;
        let variant = match self.variant.as_str() {
            "device" => Variant::DeviceOrchestrated,
            "host" => Variant::HostBuiltGraph,
            v => return Err(bad("variant", format!("`{v}` is not device or host"))),
        };
        let mut job = match source {
            Source::Example(name) => Job::example(Example::from_name(&name).ok_or_else(|| {
                let all: Vec<&str> = Example::ALL.iter().map(|e| e.name()).collect();
                bad("example", format!("`{name}` is not one of {}", all.join(", ")))
            })?),
            Source::Workload(path) => Job::workload(path),
        };
        let (aic, aiv, threads) = (self.aic, self.aiv, self.aicpu_threads);
        job = job
            .arch(arch)
            .configure(|c| {
                c.aic = aic.unwrap_or(c.aic);
                c.aiv = aiv.unwrap_or(c.aiv);
                c.aicpu_threads = threads.unwrap_or(c.aicpu_threads);
            })
            .variant(variant)
            .small(self.small)
            .kernels(self.kernels.iter().cloned())
            .dfx(DfxOptions {
                swimlane: self.swimlane,
                pmu: self.pmu,
                dep_gen: self.dep_gen,
                dump_args: self.dump_args,
                scope_stats: self.scope_stats,
                ..DfxOptions::default()
            })
            .force(self.force)
            .repeat(self.repeat)
            .warmup(self.warmup)
            .command(vec!["python".into(), "ferry.run".into()]);
        if let Some(s) = self.kernel_budget_s {
            if !(s.is_finite() && s > 0.0) {
                return Err(bad(
                    "kernel_budget",
                    format!("{s} is not a positive number of seconds"),
                ));
            }
            job = job.kernel_budget(Duration::from_secs_f64(s));
        }
        if let Some(out) = &self.out {
            job = job.out(out);
        }
        if let Some(lib) = &self.orchestration {
            job = job.orchestration(lib);
        }
        Ok(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_refuse_what_ferry_does_not_have() {
        let ex = || Source::Example("vector".into());
        let err = |o: Options, s| o.job(s).unwrap_err().option;
        assert_eq!(err(Options { arch: "a9".into(), ..Options::default() }, ex()), "arch");
        assert_eq!(err(Options { variant: "gpu".into(), ..Options::default() }, ex()), "variant");
        assert_eq!(err(Options::default(), Source::Example("nope".into())), "example");
        let budget = Options { kernel_budget_s: Some(-1.0), ..Options::default() };
        assert_eq!(err(budget, ex()), "kernel_budget");
        let ok = Options { arch: "A5".into(), variant: "host".into(), ..Options::default() };
        assert_eq!(ok.job(ex()).unwrap().runner_config().arch, Arch::A5);
        let cores =
            Options { aic: Some(2), aiv: Some(3), aicpu_threads: Some(2), ..Options::default() };
        let c = *cores.job(ex()).unwrap().runner_config();
        assert_eq!((c.aic, c.aiv, c.aicpu_threads), (2, 3, 2));
    }
}
