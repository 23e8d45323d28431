//! Verification of a run's outputs: the host reference, `[[expect]]`s and the per-dtype
//! comparison rules.
use crate::{expand, typed, Check, KernelCatalog, TensorDef, Workload, WorkloadError};
use ferry_runtime::host::RunOutput;

/// A run of a workload that did not verify.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum VerifyError {
    /// The wrong number of tasks ran.
    #[error("{got} tasks ran, {want} expected")]
    TaskCount {
        /// Tasks that ran.
        got: u64,
        /// Tasks the workload has.
        want: u64,
    },
    /// An output tensor was not returned.
    #[error("tensor `{0}` was not returned")]
    Missing(String),
    /// An element differs from the host reference or the expected values.
    #[error("tensor `{tensor}`[{index}] = {got}, expected {want} ({dtype}, tolerance {tol})")]
    Mismatch {
        /// Tensor.
        tensor: String,
        /// Element.
        index: usize,
        /// What the run produced.
        got: f64,
        /// What was expected.
        want: f64,
        /// The tensor's dtype (`f32`, `bf16`, …).
        dtype: &'static str,
        /// Relative tolerance the comparison used (integers compare exactly).
        tol: f64,
    },
    /// A checksum differs.
    #[error("{at}: checksum of `{tensor}` = {got}, expected {want} (tolerance {tol})")]
    Checksum {
        /// Where the expectation is (`file:line`).
        at: String,
        /// Tensor.
        tensor: String,
        /// Sum of the run's elements.
        got: f64,
        /// Expected.
        want: f64,
        /// Relative tolerance.
        tol: f64,
    },
    /// The host reference itself failed.
    #[error(transparent)]
    Reference(#[from] WorkloadError),
    /// The orchestration function's host reference failed.
    #[error("the host reference: {0}")]
    HostRun(String),
    /// The workload's graph is an orchestration function, and no library was given.
    #[error(
        "the workload's graph is orchestration function `{0}`: its library is needed to verify it"
    )]
    NoLibrary(String),
}

fn close(g: f64, w: f64, tol: f64) -> bool {
    if tol == 0.0 {
        g == w
    } else {
        (g - w).abs() <= tol * (1.0 + w.abs())
    }
}

impl Workload {
    /// The host reference: every tensor's words after the graph ran on the host with the
    /// kernels' host implementations.
    ///
    /// # Errors
    /// A kernel refusal, with the task's line.
    pub fn host_reference_words(
        &self,
        catalog: &dyn KernelCatalog,
    ) -> Result<Vec<Vec<u32>>, WorkloadError> {
        use std::sync::atomic::{AtomicU32, Ordering};
        let run = self
            .initial_words()?
            .into_iter()
            .map(|v| v.into_iter().map(AtomicU32::new).collect())
            .collect();
        let mut h = expand::HostRef {
            catalog,
            run,
            scratch: (0..self.ir.scratch_slots).map(|_| Vec::new()).collect(),
        };
        let (sizes, elems) = self.sizes();
        expand::Walk::new(&self.lines, &sizes, &elems, self.scratch_bytes, &self.ir)
            .run(&self.ir, &mut h)?;
        // Relaxed: this thread wrote every cell.
        Ok(h.run
            .into_iter()
            .map(|v| v.into_iter().map(|c| c.load(Ordering::Relaxed)).collect())
            .collect())
    }

    /// The host reference as element values (integers exact where `f64` holds them).
    ///
    /// # Errors
    /// As [`host_reference_words`](Self::host_reference_words).
    pub fn host_reference(
        &self,
        catalog: &dyn KernelCatalog,
    ) -> Result<Vec<Vec<f64>>, WorkloadError> {
        let words = self.host_reference_words(catalog)?;
        Ok(self.tensors.iter().zip(&words).map(|(t, w)| self.values(t, w)).collect())
    }

    /// The elements of tensor `t` held in `words`, as values.
    fn values(&self, t: &TensorDef, words: &[u32]) -> Vec<f64> {
        (0..t.elems as usize)
            .map(|i| typed::value(t.dtype, typed::element(t.dtype, words, i)))
            .collect()
    }

    /// Checks a run's output (task count, `[[expect]]`s, the host reference); returns the
    /// checksum (sum of elements, as values) of the primary output.
    ///
    /// Elements compare by dtype: integers exactly, floats within the relative tolerance
    /// `|got - want| <= tol * (1 + |want|)` with `tol` at least one unit in the last place of
    /// bf16 (2^-7) and f16 (2^-10); an f32 at tolerance 0 must match bit for bit.
    ///
    /// # Errors
    /// [`VerifyError`] naming the first difference.
    pub fn verify(&self, out: &RunOutput, catalog: &dyn KernelCatalog) -> Result<f64, VerifyError> {
        self.verify_with(out, catalog, None)
    }

    /// The tasks an `[orchestration]` workload's function submits, from its host reference
    /// (`None` for a `[[graph]]` workload, or when the reference fails: verifying the run
    /// reports why).
    pub fn function_tasks(
        &self,
        catalog: &dyn KernelCatalog,
        library: &ferry_runtime::host::LoadedOrchLibrary,
    ) -> Option<u64> {
        let (function, scalars) = self.orchestration.as_ref()?;
        let words = self.initial_words().ok()?;
        crate::orch_ref::run(library, function, catalog, words, scalars.clone(), self.scratch_bytes)
            .ok()
            .map(|r| r.1)
    }

    /// [`verify`](Self::verify) for a workload whose graph may be an `[orchestration]`
    /// function of `library`: its host reference runs the function on the host, every task's
    /// host reference executed as it is submitted, and the run must have as many tasks as
    /// that reference submitted.
    ///
    /// # Errors
    /// As `verify`; [`VerifyError::NoLibrary`], [`VerifyError::HostRun`].
    pub fn verify_with(
        &self,
        out: &RunOutput,
        catalog: &dyn KernelCatalog,
        library: Option<&ferry_runtime::host::LoadedOrchLibrary>,
    ) -> Result<f64, VerifyError> {
        let mut by_function = None;
        if let Some((function, scalars)) = &self.orchestration {
            let lib = library.ok_or_else(|| VerifyError::NoLibrary(function.clone()))?;
            let words = self.initial_words()?;
            let r = crate::orch_ref::run(
                lib,
                function,
                catalog,
                words,
                scalars.clone(),
                self.scratch_bytes,
            )
            .map_err(VerifyError::HostRun)?;
            by_function = Some(r);
        }
        let want = by_function.as_ref().map_or(self.tasks(), |r| r.1);
        if out.stats.tasks != want {
            return Err(VerifyError::TaskCount { got: out.stats.tasks, want });
        }
        let get = |t: u32| -> Result<Vec<u32>, VerifyError> {
            let d = &self.tensors[t as usize];
            out.tensors
                .get(t as usize)
                .and_then(|x| x.as_ref())
                .filter(|v| v.len() as u64 == d.words())
                .map(|v| v.iter().map(|x| x.to_bits()).collect())
                .ok_or_else(|| VerifyError::Missing(d.name.clone()))
        };
        let sum =
            |t: u32, w: &[u32]| self.values(&self.tensors[t as usize], w).into_iter().sum::<f64>();
        let mismatch = |t: u32, i: usize, got: u64, want: f64, tol: f64| {
            let d = &self.tensors[t as usize];
            VerifyError::Mismatch {
                tensor: d.name.clone(),
                index: i,
                got: typed::value(d.dtype, got),
                want,
                dtype: d.dtype.short_name(),
                tol: if d.dtype.is_float() {
                    tol.max(typed::tolerance_floor(d.dtype))
                } else {
                    0.0
                },
            }
        };
        for c in &self.checks {
            match c {
                Check::Checksum { tensor, want, tol, at } => {
                    let got = sum(*tensor, &get(*tensor)?);
                    if !close(got, *want, *tol) {
                        let line = self.lines.at(*at, "").line().unwrap_or(0);
                        return Err(VerifyError::Checksum {
                            at: format!("{}:{line}", self.lines.file),
                            tensor: self.tensors[*tensor as usize].name.clone(),
                            got,
                            want: *want,
                            tol: *tol,
                        });
                    }
                }
                Check::Values { tensor, want, tol, .. } => {
                    let (w, d) = (get(*tensor)?, self.tensors[*tensor as usize].dtype);
                    for (i, &v) in want.iter().enumerate() {
                        let g = typed::element(d, &w, i);
                        if !typed::matches_value(d, g, v, *tol) {
                            return Err(mismatch(*tensor, i, g, v, *tol));
                        }
                    }
                }
            }
        }
        if let Some(tol) = self.host_reference {
            let reference = match by_function {
                Some((words, _)) => words,
                None => self.host_reference_words(catalog)?,
            };
            for &t in &self.outputs {
                let (w, d) = (get(t)?, &self.tensors[t as usize]);
                let r = &reference[t as usize];
                for i in 0..d.elems as usize {
                    let (g, want) = (typed::element(d.dtype, &w, i), typed::element(d.dtype, r, i));
                    if !typed::matches(d.dtype, g, want, tol) {
                        return Err(mismatch(t, i, g, typed::value(d.dtype, want), tol));
                    }
                }
            }
        }
        match self.primary_output() {
            Some(t) => Ok(sum(t as u32, &get(t as u32)?)),
            None => Ok(0.0),
        }
    }
}
