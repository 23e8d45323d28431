//! Python exceptions for ferry's typed errors: each carries its error's fields as attributes
//! (a workload error's `file`, `line`, `col`; a kernel fault's `kernel`, `task`, `library`,
//! `at`), and its message is the whole chain of sources on one line, as `ferry` prints it.
use std::panic::{catch_unwind, AssertUnwindSafe};

use ferry_job::JobError;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::{create_exception, BoundObject, PyErr};

create_exception!(ferry, FerryError, PyException, "Base class of every error ferry raises.");
create_exception!(
    ferry,
    WorkloadError,
    FerryError,
    "A workload (file or graph) was refused: `file`, `line`, `col` (None for an unreadable \
     file) and `message`."
);
create_exception!(
    ferry,
    OptionsError,
    FerryError,
    "Options refused before the chip started (`option` names the keyword when one does)."
);
create_exception!(ferry, KernelsError, FerryError, "A kernel library did not load: `path`.");
create_exception!(
    ferry,
    RunFailed,
    FerryError,
    "A run failed on the chip: `case`, `profile` (the failed run's profile, or None), `repeat` \
     ((run, runs) in a repetition, or None)."
);
create_exception!(
    ferry,
    KernelFault,
    RunFailed,
    "A kernel failed on its core: `kernel`, `task`, `library` (None for a built-in), `at` \
     (file:line:col of the task's entry, or None) and `fault`."
);
create_exception!(
    ferry,
    WrongResult,
    FerryError,
    "A run finished but its output is not what the graph expects: `case`, `what`, `profile`."
);
create_exception!(
    ferry,
    ProfileError,
    FerryError,
    "A profile could not be opened, or was used after close(): `dir`."
);
create_exception!(
    ferry,
    InternalError,
    FerryError,
    "A bug in ferry (a Rust panic), caught before it reached the interpreter."
);

/// `e` and its sources, `: `-joined, each cause once.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !m.is_empty() && !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// An exception of type `T` with `message` and the attributes `attrs`.
pub(crate) fn raise<T: pyo3::PyTypeInfo>(
    py: Python<'_>,
    message: String,
    attrs: &[(&str, Py<PyAny>)],
) -> PyErr {
    let err = PyErr::new::<T, _>(message);
    let value = err.value(py);
    for (k, v) in attrs {
        if let Err(e) = value.setattr(*k, v) {
            return e;
        }
    }
    err
}

pub(crate) fn obj<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: T) -> Py<PyAny> {
    v.into_pyobject(py).map_or_else(|_| py.None(), |b| b.into_any().unbind())
}

fn path(py: Python<'_>, p: Option<&std::path::Path>) -> Py<PyAny> {
    obj(py, p.map(|p| p.display().to_string()))
}

/// The exception for a job's error.
pub(crate) fn job_error(py: Python<'_>, e: &JobError) -> PyErr {
    let msg = chain(e);
    match e {
        JobError::Workload(w) => workload_error(py, w),
        JobError::Run { case, failure, profile, .. } => {
            let mut attrs = vec![
                ("case", obj(py, case.as_str())),
                ("profile", path(py, profile.as_deref())),
                ("repeat", obj(py, failure.repeat)),
            ];
            match &failure.kernel {
                Some(k) => {
                    attrs.extend([
                        ("kernel", obj(py, k.name.as_str())),
                        ("task", obj(py, k.task)),
                        ("library", obj(py, k.library.as_deref())),
                        ("at", obj(py, k.at.as_deref())),
                        ("fault", obj(py, k.fault.detail())),
                    ]);
                    raise::<KernelFault>(py, msg, &attrs)
                }
                None => raise::<RunFailed>(py, msg, &attrs),
            }
        }
        JobError::WrongResult { case, what, profile, .. } => raise::<WrongResult>(
            py,
            msg,
            &[
                ("case", obj(py, case.as_str())),
                ("what", obj(py, what.as_str())),
                ("profile", path(py, profile.as_deref())),
            ],
        ),
        JobError::Kernels { path: p, .. } => {
            raise::<KernelsError>(py, msg, &[("path", path(py, Some(p)))])
        }
        JobError::OutDir { dir, .. } => raise::<OptionsError>(
            py,
            msg,
            &[("option", obj(py, "out")), ("dir", path(py, Some(dir)))],
        ),
        JobError::Start(ferry_runtime::RunnerError::Config(_)) => {
            raise::<OptionsError>(py, msg, &[("option", py.None())])
        }
        JobError::DfxNeedsOut
        | JobError::ChromeNeedsSwimlane
        | JobError::TooManyRuns { .. }
        | JobError::WarmupNotBelowRepeat { .. }
        | JobError::NoRuns => raise::<OptionsError>(py, msg, &[("option", py.None())]),
        _ => raise::<FerryError>(py, msg, &[]),
    }
}

/// The exception for a refused workload.
pub(crate) fn workload_error(py: Python<'_>, e: &ferry_workload::WorkloadError) -> PyErr {
    use ferry_workload::WorkloadError as W;
    let (file, line, col) = match e {
        W::At { file, line, col, .. } => (file.as_str(), Some(*line), Some(*col)),
        W::Io { file, .. } => (file.as_str(), None, None),
    };
    raise::<WorkloadError>(
        py,
        e.to_string(),
        &[
            ("file", obj(py, file)),
            ("line", obj(py, line)),
            ("col", obj(py, col)),
            ("message", obj(py, e.message())),
        ],
    )
}

/// A refused option.
pub(crate) fn bad_option(py: Python<'_>, e: &crate::BadOption) -> PyErr {
    raise::<OptionsError>(py, e.to_string(), &[("option", obj(py, e.option))])
}

/// Runs `f`, turning a panic into an [`InternalError`]: a bug in ferry never takes the
/// interpreter down.
pub(crate) fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Err(InternalError::new_err(format!("ferry panicked (a bug in ferry): {what}")))
        }
    }
}
