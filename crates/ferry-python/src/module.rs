//! The `ferry._ferry` module: the functions and the class Python calls.
use std::path::PathBuf;

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{self, guard};
use crate::tables::{Column, Table};
use crate::{Options, Source};

/// Runs a built-in example (`kind="example"`, `target` its name) or a workload file
/// (`kind="workload"`, `target` its path) on a simulated chip; returns a dict of what the job
/// did (see `ferry/_ferry.pyi`). The chip runs without the GIL.
#[pyfunction]
#[pyo3(signature = (kind, target, *, arch="a2a3", variant="device", small=false, kernels=Vec::new(),
    orchestration=None, swimlane=0, pmu=0, dep_gen=false, dump_args=0, scope_stats=false, out=None, force=false,
    repeat=1, warmup=0, kernel_budget=None, aic=None, aiv=None, aicpu_threads=None))]
#[allow(clippy::too_many_arguments)]
fn run<'py>(
    py: Python<'py>,
    kind: &str,
    target: &str,
    arch: &str,
    variant: &str,
    small: bool,
    kernels: Vec<PathBuf>,
    orchestration: Option<PathBuf>,
    swimlane: u32,
    pmu: u32,
    dep_gen: bool,
    dump_args: u32,
    scope_stats: bool,
    out: Option<PathBuf>,
    force: bool,
    repeat: u32,
    warmup: u32,
    kernel_budget: Option<f64>,
    aic: Option<u32>,
    aiv: Option<u32>,
    aicpu_threads: Option<u32>,
) -> PyResult<Bound<'py, PyDict>> {
    guard(|| {
        let source = match kind {
            "example" => Source::Example(target.to_string()),
            "workload" => Source::Workload(PathBuf::from(target)),
            k => {
                return Err(errors::bad_option(
                    py,
                    &crate::BadOption {
                        option: "kind",
                        message: format!("`{k}` is not example or workload"),
                    },
                ))
            }
        };
        let options = Options {
            arch: arch.into(),
            variant: variant.into(),
            small,
            kernels: kernels.clone(),
            orchestration,
            swimlane,
            pmu,
            dep_gen,
            dump_args,
            scope_stats,
            out,
            force,
            repeat,
            warmup,
            kernel_budget_s: kernel_budget,
            aic,
            aiv,
            aicpu_threads,
        };
        let job = options.job(source.clone()).map_err(|e| errors::bad_option(py, &e))?;
        // The tensors' names, dtypes and elements: a workload's, from the file (checked before
        // the chip starts).
        let names: Vec<Named> = match &source {
            Source::Workload(p) => {
                let c = ferry_job::check_workload(p, &kernels, small)
                    .map_err(|e| errors::job_error(py, &e))?;
                let w = &c.workload;
                w.tensor_names()
                    .zip(w.tensor_dtypes())
                    .zip(w.tensor_elems())
                    .map(|((n, d), e)| Named { name: n.into(), dtype: d.short_name(), elems: e })
                    .collect()
            }
            Source::Example(_) => Vec::new(),
        };
        let (done, job_s) = py.detach(|| {
            let t = std::time::Instant::now();
            let done = job.run();
            (done, t.elapsed().as_secs_f64())
        });
        let done = done.map_err(|e| errors::job_error(py, &e))?;
        let d = outcome(py, done, &names)?;
        d.set_item("job_s", job_s)?;
        Ok(d)
    })
}

/// A workload tensor as Python names it: its name, its dtype's workload name and elements.
struct Named {
    name: String,
    dtype: &'static str,
    elems: u64,
}

/// The job's outcome as a dict; every output tensor moves into a numpy array that owns it.
/// A workload's tensors are named, with their dtypes and element counts in `typed` (the
/// package views each word buffer as its dtype, without a copy).
fn outcome<'py>(
    py: Python<'py>,
    done: ferry_job::JobOutcome,
    names: &[Named],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("out", done.out.as_ref().map(|p| p.display().to_string()))?;
    let cases = PyList::empty(py);
    for c in done.cases {
        let cd = PyDict::new(py);
        cd.set_item("name", &c.name)?;
        cd.set_item("kind", c.kind.to_string())?;
        cd.set_item("tasks", c.output.stats.tasks)?;
        cd.set_item("wall_s", c.output.stats.wall.as_secs_f64())?;
        cd.set_item("checksum", c.checksum)?;
        let per_kernel = PyDict::new(py);
        for (k, n) in &c.output.stats.per_kernel {
            per_kernel.set_item(k, n)?;
        }
        cd.set_item("per_kernel", per_kernel)?;
        let profile = c.profile.as_ref();
        cd.set_item("profile", profile.map(|p| p.dir.display().to_string()))?;
        let runs: Vec<String> = profile
            .map_or_else(Vec::new, |p| p.runs.iter().map(|r| r.display().to_string()).collect());
        cd.set_item("runs", runs)?;
        let outputs = PyList::empty(py);
        let named = PyDict::new(py);
        let typed = PyDict::new(py);
        for (i, t) in c.output.tensors.into_iter().enumerate() {
            match t {
                Some(v) => {
                    // No copy: the array takes the run's buffer.
                    let a = PyArray1::from_vec(py, v);
                    if let Some(n) = names.get(i) {
                        named.set_item(&n.name, &a)?;
                        typed.set_item(&n.name, (n.dtype, n.elems))?;
                    }
                    outputs.append(a)?;
                }
                None => outputs.append(py.None())?,
            }
        }
        cd.set_item("outputs", outputs)?;
        cd.set_item("named", named)?;
        cd.set_item("typed", typed)?;
        cases.append(cd)?;
    }
    d.set_item("cases", cases)?;
    Ok(d)
}

/// Checks a workload file without running it; returns its tensor names and task count, or
/// raises `WorkloadError` naming the line.
#[pyfunction]
#[pyo3(signature = (path, *, kernels=Vec::new(), small=false))]
fn check_workload<'py>(
    py: Python<'py>,
    path: PathBuf,
    kernels: Vec<PathBuf>,
    small: bool,
) -> PyResult<Bound<'py, PyDict>> {
    guard(|| {
        let c = ferry_job::check_workload(&path, &kernels, small)
            .map_err(|e| errors::job_error(py, &e))?;
        let d = PyDict::new(py);
        d.set_item("name", c.workload.name())?;
        d.set_item("tensors", c.workload.tensor_names().collect::<Vec<_>>())?;
        d.set_item("tasks", c.workload.tasks())?;
        Ok(d)
    })
}

/// A run's profile, opened for analysis (`ferry._ferry.Profile(dir)`).
#[pyclass(name = "Profile", module = "ferry._ferry")]
struct PyProfile {
    dir: PathBuf,
    inner: Option<ferry_job::Profile>,
}

impl PyProfile {
    fn get(&self, py: Python<'_>) -> PyResult<&ferry_job::Profile> {
        self.inner.as_ref().ok_or_else(|| {
            errors::raise::<errors::ProfileError>(
                py,
                format!("{}: the profile is closed", self.dir.display()),
                &[("dir", errors::obj(py, self.dir.display().to_string()))],
            )
        })
    }

    fn table<'py>(
        &self,
        py: Python<'py>,
        f: fn(&ferry_profile::RunModel) -> Table,
    ) -> PyResult<Bound<'py, PyDict>> {
        let t = f(self.get(py)?.model());
        let d = PyDict::new(py);
        for (name, col) in t.columns {
            match col {
                Column::U64(v) => d.set_item(&name, PyArray1::from_vec(py, v))?,
                Column::I64(v) => d.set_item(&name, PyArray1::from_vec(py, v))?,
                Column::Str(v) => d.set_item(&name, v)?,
            }
        }
        Ok(d)
    }
}

fn to_py<'py>(py: Python<'py>, v: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let s = serde_json::to_string(v)
        .map_err(|e| errors::InternalError::new_err(format!("serialising a report: {e}")))?;
    py.import("json")?.call_method1("loads", (s,))
}

#[pymethods]
impl PyProfile {
    #[new]
    fn new(py: Python<'_>, dir: PathBuf) -> PyResult<Self> {
        guard(|| {
            let p = ferry_job::Profile::open(&dir).map_err(|e| {
                let dir_s = dir.display().to_string();
                errors::raise::<errors::ProfileError>(
                    py,
                    format!("{dir_s}: {}", errors::chain(&e)),
                    &[("dir", errors::obj(py, dir_s.clone()))],
                )
            })?;
            Ok(PyProfile { dir, inner: Some(p) })
        })
    }

    /// One row per task.
    fn tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| self.table(py, crate::tables::tasks))
    }

    /// One row per block execution.
    fn blocks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| self.table(py, crate::tables::blocks))
    }

    /// One row per lane.
    fn loss<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| self.table(py, crate::tables::loss))
    }

    /// One row per PMU row, a column per counter.
    fn pmu<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| self.table(py, crate::tables::pmu))
    }

    /// One row per dependency edge.
    fn deps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| self.table(py, crate::tables::deps))
    }

    /// One row per scope record.
    fn scopes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| self.table(py, crate::tables::scopes))
    }

    /// `ferry report --json`'s model.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| to_py(py, &self.get(py)?.report()))
    }

    /// `ferry diff --json`'s model of `other` against this run.
    fn diff<'py>(
        &self,
        py: Python<'py>,
        other: PyRef<'_, PyProfile>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| to_py(py, &ferry_job::diff(self.get(py)?, other.get(py)?)))
    }

    /// What was skipped or does not add up.
    fn warnings(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        guard(|| Ok(self.get(py)?.warnings().to_vec()))
    }

    /// Why the run failed, when its manifest says so.
    fn failure(&self, py: Python<'_>) -> PyResult<Option<String>> {
        guard(|| Ok(self.get(py)?.failure().map(String::from)))
    }

    /// The profile's directory.
    #[getter]
    fn dir(&self) -> String {
        self.dir.display().to_string()
    }

    /// Frees the records; later calls raise `ProfileError`.
    fn close(&mut self) {
        self.inner = None;
    }
}

/// Runs the same job as `run(kind="example", ...)` from Rust and returns the seconds
/// `Job::run` took (the outcome is dropped, nothing is converted): the baseline that
/// `python/bench/overhead.py` measures the Python call against.
#[pyfunction]
#[pyo3(signature = (example, *, arch="a2a3", small=false))]
fn _job_seconds(py: Python<'_>, example: &str, arch: &str, small: bool) -> PyResult<f64> {
    guard(|| {
        let o = Options { arch: arch.into(), small, ..Options::default() };
        let job = o.job(Source::Example(example.into())).map_err(|e| errors::bad_option(py, &e))?;
        py.detach(|| {
            let t = std::time::Instant::now();
            let done = job.run();
            let s = t.elapsed().as_secs_f64();
            done.map(|d| (s, d))
        })
        .map(|(s, d)| {
            drop(d);
            s
        })
        .map_err(|e| errors::job_error(py, &e))
    })
}

/// Panics inside the module, to check that a panic comes out as `InternalError`.
#[pyfunction]
fn _panic_for_test() -> PyResult<()> {
    guard(|| panic!("a deliberate panic"))
}

/// The native module.
#[pymodule]
fn _ferry(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(check_workload, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    m.add_function(wrap_pyfunction!(_job_seconds, m)?)?;
    m.add_class::<PyProfile>()?;
    m.add("FerryError", py.get_type::<errors::FerryError>())?;
    m.add("WorkloadError", py.get_type::<errors::WorkloadError>())?;
    m.add("OptionsError", py.get_type::<errors::OptionsError>())?;
    m.add("KernelsError", py.get_type::<errors::KernelsError>())?;
    m.add("RunFailed", py.get_type::<errors::RunFailed>())?;
    m.add("KernelFault", py.get_type::<errors::KernelFault>())?;
    m.add("WrongResult", py.get_type::<errors::WrongResult>())?;
    m.add("ProfileError", py.get_type::<errors::ProfileError>())?;
    m.add("InternalError", py.get_type::<errors::InternalError>())?;
    m.add("ARCHES", ferry_sim::Arch::ALL.iter().map(|a| a.name()).collect::<Vec<_>>())?;
    Ok(())
}
