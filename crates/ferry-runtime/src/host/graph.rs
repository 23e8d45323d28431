//! The host-built graph: the orchestration function run on the host, recorded, validated and
//! laid out for upload.
use crate::device::image::{TaskRecord, TensorRecord, TASK_DUMP_SHIFT};
use crate::device::task::{resolve, Orchestrate, ResolvedTask, Task, TaskId, TensorId, TensorInfo};
use crate::device::tensor_map::TensorMap;
use crate::error::{RunError, SubmitError};

/// A task of a prebuilt workload: a task plus explicit dependencies on any task index of the
/// workload (earlier or later — a prebuilt workload is validated as a whole, cycles included).
#[derive(Clone, Debug, PartialEq)]
pub struct PrebuiltTask {
    /// The task ([`Task::after`] is ignored; use `deps`).
    pub task: Task,
    /// Indices of tasks this one must wait for.
    pub deps: Vec<u64>,
}

/// Reads device memory at an address into a buffer; `false` when it cannot.
pub type ReadFn<'a> = dyn Fn(u64, &mut [u8]) -> bool + 'a;

/// [`Orchestrate`] on the host: records tasks and the tensor map's edges.
pub struct GraphBuilder<'a> {
    tensors: Vec<TensorInfo>,
    scalars: Vec<u64>,
    map: TensorMap,
    tasks: Vec<ResolvedTask>,
    preds: Vec<Vec<u64>>,
    scopes: Vec<(u64, usize)>,
    scratch: (u64, u64),
    scratch_used: u64,
    check: Option<&'a dyn Fn(u64, u64) -> bool>,
    read: Option<&'a ReadFn<'a>>,
    /// Host ns (`ferry_profile::host_now_ns`) around each accepted submit, by submit index.
    submit_ns: Vec<(u64, u64)>,
    /// The loaded kernels tasks may name (none unless [`with_custom_kernels`](Self::with_custom_kernels)).
    custom: crate::device::custom::CustomKernels,
}

impl std::fmt::Debug for GraphBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphBuilder").field("tasks", &self.tasks.len()).finish()
    }
}

impl<'a> GraphBuilder<'a> {
    /// A builder over `tensors` and `scalars`, with a scratch arena `(addr, bytes)`. `check`
    /// (when given) says whether a device range is live memory.
    pub fn new(
        tensors: Vec<TensorInfo>,
        scalars: Vec<u64>,
        scratch: (u64, u64),
        check: Option<&'a dyn Fn(u64, u64) -> bool>,
    ) -> GraphBuilder<'a> {
        GraphBuilder {
            tensors,
            scalars,
            map: TensorMap::new(),
            tasks: Vec::new(),
            preds: Vec::new(),
            scopes: Vec::new(),
            scratch,
            scratch_used: 0,
            check,
            read: None,
            submit_ns: Vec::new(),
            custom: crate::device::custom::CustomKernels::none(),
        }
    }

    /// The same builder reading tensor contents (for [`Orchestrate::read_words`]) through
    /// `read(addr, out)`, which fills `out` from device memory at `addr` or returns `false`.
    pub fn with_reader(mut self, read: &'a ReadFn<'a>) -> GraphBuilder<'a> {
        self.read = Some(read);
        self
    }

    /// The same builder accepting the loaded kernels of `custom` (the runner's
    /// [`crate::host::KernelRegistry`]).
    pub fn with_custom_kernels(mut self, custom: crate::device::custom::CustomKernels) -> Self {
        self.custom = custom;
        self
    }

    /// The recorded tasks.
    pub fn tasks(&self) -> &[ResolvedTask] {
        &self.tasks
    }

    /// The host orchestrator's submits so far, in the swimlane's `host_orchestrator_phases`
    /// form: one per recorded task, `task_id` = its submit index (the device's task id unless
    /// a prebuilt workload's forward dependencies renumber the graph in [`finish`](Self::finish)),
    /// with the host ns around the submit.
    pub fn host_phases(&self) -> Vec<ferry_profile::HostOrchPhase> {
        self.submit_ns
            .iter()
            .enumerate()
            .map(|(i, &(start, end))| ferry_profile::HostOrchPhase {
                submit_idx: i as u32,
                task_id: i as u64,
                start_host_ns: start,
                end_host_ns: end,
            })
            .collect()
    }

    /// Predecessors of each task (sorted, unique).
    pub fn preds(&self) -> &[Vec<u64>] {
        &self.preds
    }

    /// Every edge `(predecessor, successor)`, sorted.
    pub fn edges(&self) -> Vec<(u64, u64)> {
        let mut e: Vec<_> = self
            .preds
            .iter()
            .enumerate()
            .flat_map(|(s, ps)| ps.iter().map(move |&p| (p, s as u64)))
            .collect();
        e.sort_unstable();
        e
    }

    fn submit_inner(&mut self, task: &Task, extra: &[u64]) -> Result<TaskId, SubmitError> {
        let start = ferry_profile::host_now_ns();
        let id = self.submit_untimed(task, extra)?;
        self.submit_ns.push((start, ferry_profile::host_now_ns()));
        Ok(id)
    }

    fn submit_untimed(&mut self, task: &Task, extra: &[u64]) -> Result<TaskId, SubmitError> {
        let seq = self.tasks.len() as u64;
        let tensors = &self.tensors;
        let r = resolve(
            seq,
            task,
            &|i| tensors.get(i as usize).copied(),
            tensors.len() as u32,
            &self.custom,
        )?;
        if let Some(check) = self.check {
            for &(addr, bytes, _) in r.tensors() {
                if bytes > 0 && !check(addr, bytes) {
                    return Err(SubmitError::TensorOutsideDeviceMemory { task: seq, addr, bytes });
                }
            }
        }
        let mut deps = Vec::new();
        for &(addr, bytes, role) in r.tensors() {
            self.map.access(seq, addr, addr + bytes, role.writes(), &mut deps, &mut |_| true);
        }
        // Two arguments of one task may overlap; that is not a dependency.
        deps.retain(|&d| d != seq);
        deps.extend_from_slice(task.after_ids());
        // Explicit dependencies of a prebuilt workload are kept as given, even on itself (a
        // cycle the validation reports).
        deps.extend_from_slice(extra);
        deps.sort_unstable();
        deps.dedup();
        self.tasks.push(r);
        self.preds.push(deps);
        Ok(TaskId(seq))
    }

    /// Records a prebuilt workload (explicit dependencies may point anywhere) and validates it.
    ///
    /// # Errors
    /// [`RunError::Fault`] for a task the runtime refuses or a dependency on a task index that
    /// does not exist; [`RunError::Cycle`] when the dependencies form a cycle.
    pub fn record_prebuilt(&mut self, tasks: &[PrebuiltTask]) -> Result<(), RunError> {
        let n = tasks.len() as u64;
        for (i, t) in tasks.iter().enumerate() {
            if let Some(&bad) = t.deps.iter().find(|&&d| d >= n) {
                return Err(SubmitError::UnknownDependency { task: i as u64, after: bad }.into());
            }
            self.submit_inner(&strip_after(t.task), &t.deps)?;
        }
        Ok(())
    }

    /// Checks the graph for cycles and puts it in an order where every predecessor comes first
    /// (the order the device loader needs), renumbering tasks when explicit dependencies pointed
    /// forward.
    ///
    /// # Errors
    /// [`RunError::Cycle`] naming the tasks that can never become ready.
    pub fn finish(mut self) -> Result<HostGraph, RunError> {
        let n = self.tasks.len();
        if self.preds.iter().enumerate().all(|(i, ps)| ps.iter().all(|&p| (p as usize) < i)) {
            return Ok(HostGraph { tasks: self.tasks, preds: self.preds });
        }
        // Kahn's algorithm, lowest index first, so the order is stable.
        let mut indeg: Vec<usize> = self.preds.iter().map(Vec::len).collect();
        let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (s, ps) in self.preds.iter().enumerate() {
            for &p in ps {
                succ[p as usize].push(s);
            }
        }
        let mut ready: std::collections::BTreeSet<usize> =
            (0..n).filter(|&i| indeg[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &s in &succ[i] {
                indeg[s] -= 1;
                if indeg[s] == 0 {
                    ready.insert(s);
                }
            }
        }
        if order.len() < n {
            let tasks = (0..n).filter(|&i| indeg[i] > 0).map(|i| i as u64).collect();
            return Err(RunError::Cycle { tasks });
        }
        let mut new_index = vec![0u64; n];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new as u64;
        }
        let tasks = order.iter().map(|&o| self.tasks[o]).collect();
        let preds = order
            .iter()
            .map(|&o| {
                let mut ps: Vec<u64> = std::mem::take(&mut self.preds[o])
                    .into_iter()
                    .map(|p| new_index[p as usize])
                    .collect();
                ps.sort_unstable();
                ps
            })
            .collect();
        Ok(HostGraph { tasks, preds })
    }
}

fn strip_after(t: Task) -> Task {
    let mut s = Task::new(t.kernel).blocks(t.block_dim);
    for a in t.args() {
        s = s.arg(a.view, a.role);
    }
    for &v in t.scalars() {
        s = s.scalar(v);
    }
    s
}

impl Orchestrate for GraphBuilder<'_> {
    fn tensor_count(&self) -> u32 {
        self.tensors.len() as u32
    }

    fn tensor(&self, id: TensorId) -> Result<TensorInfo, SubmitError> {
        self.tensors.get(id.0 as usize).copied().ok_or(SubmitError::MissingTensor {
            task: self.tasks.len() as u64,
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
        self.submit_inner(task, &[])
    }

    fn scope_begin(&mut self) {
        self.scopes.push((self.scratch_used, self.tensors.len()));
    }

    fn scope_end(&mut self) -> Result<(), SubmitError> {
        let (used, n) = self.scopes.pop().ok_or(SubmitError::ScopeUnderflow)?;
        self.scratch_used = used;
        self.tensors.truncate(n);
        Ok(())
    }

    fn alloc_scratch(&mut self, len: u64) -> Result<TensorId, SubmitError> {
        let bytes = len.saturating_mul(4);
        let start = crate::device::image::align64(self.scratch_used);
        let free = self.scratch.1.saturating_sub(start);
        if bytes > free {
            return Err(SubmitError::ScratchExhausted { requested: bytes, free });
        }
        self.scratch_used = start + bytes;
        self.tensors.push(TensorInfo { addr: self.scratch.0 + start, len });
        Ok(TensorId(self.tensors.len() as u32 - 1))
    }

    fn settle(&mut self, tensor: TensorId, offset: u64, words: u64) -> Result<(), SubmitError> {
        let t = self.tensor(tensor)?;
        let start = t.addr.saturating_add(offset.saturating_mul(4));
        let mut writers = Vec::new();
        self.map.writers(start, start.saturating_add(words.saturating_mul(4)), &mut writers);
        if writers.is_empty() {
            return Ok(());
        }
        Err(SubmitError::PendingRead {
            task: self.tasks.len() as u64,
            tensor: tensor.0,
            offset: offset.saturating_mul(4),
            len: words.saturating_mul(4),
        })
    }

    fn read_words(
        &self,
        tensor: TensorId,
        offset: u64,
        out: &mut [u32],
    ) -> Result<(), SubmitError> {
        use crate::device::workload::ProgramFault;
        let unreadable = SubmitError::BadProgram { at: 0, fault: ProgramFault::Unreadable };
        let info = self.tensor(tensor)?;
        let n = out.len() as u64;
        let read = self.read.ok_or(unreadable)?;
        if offset.checked_add(n).is_none_or(|e| e > info.len) {
            return Err(unreadable);
        }
        let mut bytes = vec![0u8; out.len() * 4];
        if !read(info.addr + 4 * offset, &mut bytes) {
            return Err(unreadable);
        }
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *o = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(())
    }
}

/// A validated host-built graph, in dependency order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostGraph {
    /// Tasks, resolved.
    pub tasks: Vec<ResolvedTask>,
    /// Predecessors of each task; all lower indices.
    pub preds: Vec<Vec<u64>>,
}

impl HostGraph {
    /// The upload form: task records and the flat predecessor array.
    pub fn records(&self) -> (Vec<TaskRecord>, Vec<u32>) {
        let mut flat = Vec::new();
        let recs = self
            .tasks
            .iter()
            .zip(&self.preds)
            .map(|(t, ps)| {
                let mut r = TaskRecord {
                    kernel_id: t.kernel,
                    block_dim: t.block_dim,
                    n_tensors: t.n_tensors,
                    n_scalars: t.n_scalars,
                    roles: t.role_bits() | t.dump_mask << TASK_DUMP_SHIFT,
                    pred_count: ps.len() as u32,
                    pred_start: flat.len() as u64,
                    scalars: t.scalars,
                    ..TaskRecord::default()
                };
                for (d, s) in r.tensors.iter_mut().zip(t.tensors()) {
                    *d = TensorRecord { addr: s.0, bytes: s.1 };
                }
                flat.extend(ps.iter().map(|&p| p as u32));
                r
            })
            .collect();
        (recs, flat)
    }
}
