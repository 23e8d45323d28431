//! The host reference of a workload whose graph is an orchestration library's function
//! (`[orchestration]`): the function runs on the host over [`HostExec`], which executes every
//! task's host reference the moment it is submitted, so a value the function reads is the one
//! the tasks before it produced, as on the device.
use crate::KernelCatalog;
use ferry_runtime::device::task::{Orchestrate, Task, TaskId, TensorId, TensorInfo};
use ferry_runtime::host::LoadedOrchLibrary;
use ferry_runtime::SubmitError;
use std::sync::atomic::{AtomicU32, Ordering};

/// The base of the addresses [`HostExec`] gives its tensors (each tensor its own 2^40-byte
/// window, so ranges never overlap).
const WINDOW: u64 = 1 << 40;

/// [`Orchestrate`] that runs each task's host reference as it is submitted.
pub(crate) struct HostExec<'a> {
    catalog: &'a dyn KernelCatalog,
    /// Run tensors, then allocated ones.
    pub(crate) tensors: Vec<Vec<AtomicU32>>,
    runs: usize,
    scalars: Vec<u64>,
    scopes: Vec<usize>,
    scratch_left: u64,
    scratch_marks: Vec<u64>,
    pub(crate) tasks: u64,
    failed: Option<String>,
}

impl<'a> HostExec<'a> {
    pub(crate) fn new(
        catalog: &'a dyn KernelCatalog,
        words: Vec<Vec<u32>>,
        scalars: Vec<u64>,
        scratch_bytes: u64,
    ) -> HostExec<'a> {
        let runs = words.len();
        HostExec {
            catalog,
            tensors: words
                .into_iter()
                .map(|w| w.into_iter().map(AtomicU32::new).collect())
                .collect(),
            runs,
            scalars,
            scopes: Vec::new(),
            scratch_left: scratch_bytes,
            scratch_marks: Vec::new(),
            tasks: 0,
            failed: None,
        }
    }

    fn info(&self, i: u32) -> Option<TensorInfo> {
        let t = self.tensors.get(i as usize)?;
        Some(TensorInfo { addr: WINDOW * (u64::from(i) + 1), len: t.len() as u64 })
    }

    /// The run tensors' words after the function ran.
    pub(crate) fn into_words(self) -> Vec<Vec<u32>> {
        self.tensors
            .into_iter()
            .take(self.runs)
            // Relaxed: this thread wrote every cell.
            .map(|v| v.into_iter().map(|c| c.load(Ordering::Relaxed)).collect())
            .collect()
    }
}

impl Orchestrate for HostExec<'_> {
    fn tensor_count(&self) -> u32 {
        self.tensors.len() as u32
    }

    fn tensor(&self, id: TensorId) -> Result<TensorInfo, SubmitError> {
        self.info(id.0).ok_or(SubmitError::MissingTensor {
            task: self.tasks,
            tensor: id.0,
            count: self.tensors.len() as u32,
        })
    }

    fn scalar_count(&self) -> u32 {
        self.scalars.len() as u32
    }

    fn scalar(&self, index: u32) -> Result<u64, SubmitError> {
        self.scalars
            .get(index as usize)
            .copied()
            .ok_or(SubmitError::MissingScalar { index, count: self.scalars.len() as u32 })
    }

    fn submit(&mut self, task: &Task) -> Result<TaskId, SubmitError> {
        let seq = self.tasks;
        if task.is_overflowed() {
            return Err(SubmitError::TooManyArgs { task: seq });
        }
        for a in task.args() {
            let t = self.tensor(a.view.tensor)?;
            let len = if a.view.len == u64::MAX {
                t.len.saturating_sub(a.view.offset)
            } else {
                a.view.len
            };
            if a.view.offset.checked_add(len).is_none_or(|e| e > t.len) {
                return Err(SubmitError::ViewOutOfBounds {
                    task: seq,
                    tensor: a.view.tensor.0,
                    offset: a.view.offset,
                    len,
                    size: t.len,
                });
            }
        }
        let mut views: Vec<&[AtomicU32]> = Vec::with_capacity(task.args().len());
        for a in task.args() {
            let cells = &self.tensors[a.view.tensor.0 as usize];
            let off = a.view.offset as usize;
            let len = if a.view.len == u64::MAX { cells.len() - off } else { a.view.len as usize };
            views.push(&cells[off..off + len]);
        }
        if let Err(m) = self.catalog.run_host(task.kernel, task.block_dim, &views, task.scalars()) {
            self.failed.get_or_insert(format!("task {seq}: {m}"));
            return Err(SubmitError::Aborted);
        }
        self.tasks += 1;
        Ok(TaskId(seq))
    }

    fn scope_begin(&mut self) {
        self.scopes.push(self.tensors.len());
        self.scratch_marks.push(self.scratch_left);
    }

    fn scope_end(&mut self) -> Result<(), SubmitError> {
        let n = self.scopes.pop().ok_or(SubmitError::ScopeUnderflow)?;
        self.tensors.truncate(n);
        self.scratch_left = self.scratch_marks.pop().unwrap_or(self.scratch_left);
        Ok(())
    }

    fn alloc_scratch(&mut self, len: u64) -> Result<TensorId, SubmitError> {
        // As the device's arena: 64-byte aligned allocations out of `scratch_bytes`.
        let bytes = len.saturating_mul(4).div_ceil(64) * 64;
        if bytes > self.scratch_left {
            return Err(SubmitError::ScratchExhausted {
                requested: len.saturating_mul(4),
                free: self.scratch_left,
            });
        }
        self.scratch_left -= bytes;
        // Scratch is not cleared on the device: NaN here keeps a read-before-write visible.
        self.tensors.push((0..len).map(|_| AtomicU32::new(f32::NAN.to_bits())).collect());
        Ok(TensorId(self.tensors.len() as u32 - 1))
    }

    fn read_words(
        &self,
        tensor: TensorId,
        offset: u64,
        out: &mut [u32],
    ) -> Result<(), SubmitError> {
        let t = self.tensor(tensor)?;
        let end = offset.checked_add(out.len() as u64).filter(|&e| e <= t.len);
        if end.is_none() {
            return Err(SubmitError::ViewOutOfBounds {
                task: self.tasks,
                tensor: tensor.0,
                offset,
                len: out.len() as u64,
                size: t.len,
            });
        }
        let cells = &self.tensors[tensor.0 as usize][offset as usize..];
        for (o, c) in out.iter_mut().zip(cells) {
            // Relaxed: this thread wrote every cell.
            *o = c.load(Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Runs `function` of `library` on the host over the run tensors `words` with `scalars`;
/// returns the run tensors' words after it and the tasks it submitted.
///
/// # Errors
/// The function's fault, or a kernel's refusal, as text.
pub(crate) fn run(
    library: &LoadedOrchLibrary,
    function: &str,
    catalog: &dyn KernelCatalog,
    words: Vec<Vec<u32>>,
    scalars: Vec<u64>,
    scratch_bytes: u64,
) -> Result<(Vec<Vec<u32>>, u64), String> {
    let index = library.function_index(function).ok_or_else(|| {
        format!("orchestration library `{}` has no function `{function}`", library.name())
    })?;
    let mut exec = HostExec::new(catalog, words, scalars, scratch_bytes);
    let r = library.run_on(index, &mut exec);
    if let Some(m) = exec.failed.take() {
        return Err(m);
    }
    r.map_err(|e| {
        format!("orchestration function `{function}` (library `{}`): {e}", library.name())
    })?;
    let tasks = exec.tasks;
    Ok((exec.into_words(), tasks))
}
