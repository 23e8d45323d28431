//! The orchestrator thread: device orchestration (the graph is built here, on the last AICPU
//! thread, while the schedulers execute it) and the host-built graph's loader.
use super::image::{TaskRecord, MAX_TASK_SCALARS, MAX_TASK_TENSORS, TASK_DUMP_SHIFT};
use super::ops::DeviceOps;
use super::sched::RunState;
use super::task::{
    resolve, Orchestrate, ResolvedTask, Role, ScopeSite, TaskId, TensorId, TensorInfo,
};
use super::tensor_map::TensorMap;
use crate::error::SubmitError;
use std::sync::atomic::Ordering;

/// File of a scope opened without a site ([`Orchestrate::scope_begin`]); its line is the
/// scope's depth.
pub const DEFAULT_SCOPE_FILE: &str = "orchestration";

/// [`Orchestrate`] on the AICPU: submissions go straight into the run's task ring.
pub struct DeviceOrchestrator<'a> {
    ops: &'a dyn DeviceOps,
    run: &'a RunState,
    tensors: Vec<TensorInfo>,
    /// Whether each tensor's whole range was found to be live device memory (its views then
    /// need no further check).
    valid: Vec<bool>,
    scalars: Vec<u64>,
    map: TensorMap,
    next: u64,
    /// Open scopes: the scratch used and tensor count at their begin, and their site.
    scopes: Vec<(u64, usize, ScopeSite)>,
    scratch_used: u64,
    deps: Vec<u64>,
    dfx: Option<super::dfx::ThreadDfx>,
}

impl std::fmt::Debug for DeviceOrchestrator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceOrchestrator").field("next", &self.next).finish()
    }
}

impl<'a> DeviceOrchestrator<'a> {
    /// Reads the run's tensor and scalar tables from the image.
    pub fn new(ops: &'a dyn DeviceOps, run: &'a RunState) -> DeviceOrchestrator<'a> {
        let tensors: Vec<TensorInfo> = (0..run.hdr.tensor_count)
            .map(|i| {
                let r = run.tensor_record(i);
                TensorInfo { addr: r.addr, len: r.bytes / 4 }
            })
            .collect();
        let scalars = (0..run.hdr.scalar_count).map(|i| run.scalar_word(i)).collect();
        let valid = vec![false; tensors.len()];
        DeviceOrchestrator {
            ops,
            run,
            valid,
            tensors,
            scalars,
            map: TensorMap::new(),
            next: 0,
            scopes: Vec::new(),
            scratch_used: 0,
            deps: Vec::new(),
            dfx: None,
        }
    }

    /// Attaches this thread's DFX writers (DepGen, ScopeStats, the level-4 submit envelope).
    pub fn attach_dfx(&mut self, dfx: Option<super::dfx::ThreadDfx>) {
        self.dfx = dfx;
    }

    fn scope_snapshot(&self) -> super::dfx::ScopeSnapshot {
        super::dfx::ScopeSnapshot {
            depth: self.scopes.len() as u32,
            task_tail: self.run.completed_count(),
            task_head: self.next,
            heap: self.scratch_used,
            dep_pool: self.deps.len() as u64,
            tensormap: self.map.len() as u64,
        }
    }

    /// Tasks submitted so far.
    pub fn submitted(&self) -> u64 {
        self.next
    }

    /// Waits (spin, then park) until the ring slot for `seq` is free.
    fn wait_slot(&self, seq: u64) -> Result<(), SubmitError> {
        let run = self.run;
        if run.slot_free(seq) {
            return Ok(());
        }
        self.ops.aicpu_wait(&mut || run.slot_free(seq) || run.is_aborted(), None);
        if run.is_aborted() {
            return Err(SubmitError::Aborted);
        }
        Ok(())
    }
}

impl Orchestrate for DeviceOrchestrator<'_> {
    fn tensor_count(&self) -> u32 {
        self.tensors.len() as u32
    }

    fn tensor(&self, id: TensorId) -> Result<TensorInfo, SubmitError> {
        self.tensors.get(id.0 as usize).copied().ok_or(SubmitError::MissingTensor {
            task: self.next,
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

    fn submit(&mut self, task: &super::task::Task) -> Result<TaskId, SubmitError> {
        if self.run.is_aborted() {
            return Err(SubmitError::Aborted);
        }
        let seq = self.next;
        let t0 = match &self.dfx {
            Some(d) if d.orch_on() => self.ops.clock_cycles(),
            _ => 0,
        };
        let tensors = &self.tensors;
        let r = resolve(
            seq,
            task,
            &|i| tensors.get(i as usize).copied(),
            tensors.len() as u32,
            &self.run.custom,
        )?;
        for (a, &(addr, bytes, _)) in task.args().zip(r.tensors()) {
            let t = a.view.tensor.0 as usize;
            if self.valid[t] || bytes == 0 {
                continue;
            }
            let whole = self.tensors[t];
            if self.ops.translate(whole.addr, whole.len.saturating_mul(4).max(1)).is_ok() {
                self.valid[t] = true;
            } else if self.ops.translate(addr, bytes).is_err() {
                return Err(SubmitError::TensorOutsideDeviceMemory { task: seq, addr, bytes });
            }
        }
        self.wait_slot(seq)?;
        self.deps.clear();
        let run = self.run;
        let mut live = |t: u64| run.is_live(t);
        for &(addr, bytes, role) in r.tensors() {
            self.map.access(seq, addr, addr + bytes, role.writes(), &mut self.deps, &mut live);
        }
        self.deps.extend_from_slice(task.after_ids());
        self.deps.sort_unstable();
        self.deps.dedup();
        if let Some(d) = self.dfx.as_mut() {
            d.dep_gen(seq, &r, &self.deps);
        }
        run.install(self.ops, seq, r, &self.deps);
        if let Some(d) = self.dfx.as_mut().filter(|d| d.orch_on()) {
            d.submit_envelope(seq, t0, self.ops.clock_cycles());
        }
        self.next += 1;
        Ok(TaskId(seq))
    }

    fn scope_begin(&mut self) {
        // Without a site, the scope is named by its depth (1 for the outermost).
        let depth = self.scopes.len() as u32 + 1;
        self.scope_begin_at(ScopeSite::new(DEFAULT_SCOPE_FILE, depth));
    }

    fn scope_begin_at(&mut self, site: ScopeSite) {
        self.scopes.push((self.scratch_used, self.tensors.len(), site));
        if self.dfx.is_some() {
            let s = self.scope_snapshot();
            if let Some(d) = self.dfx.as_mut() {
                d.scope(false, s, &site);
            }
        }
    }

    fn scope_end(&mut self) -> Result<(), SubmitError> {
        if let (true, Some(&(_, _, site))) = (self.dfx.is_some(), self.scopes.last()) {
            let s = self.scope_snapshot();
            if let Some(d) = self.dfx.as_mut() {
                d.scope(true, s, &site);
            }
        }
        let (used, n, _) = self.scopes.pop().ok_or(SubmitError::ScopeUnderflow)?;
        self.scratch_used = used;
        self.tensors.truncate(n);
        self.valid.truncate(n);
        Ok(())
    }

    fn alloc_scratch(&mut self, len: u64) -> Result<TensorId, SubmitError> {
        let bytes = len.saturating_mul(4);
        let start = super::image::align64(self.scratch_used);
        let free = self.run.run.scratch_bytes.saturating_sub(start);
        if bytes > free {
            return Err(SubmitError::ScratchExhausted { requested: bytes, free });
        }
        self.scratch_used = start + bytes;
        self.tensors.push(TensorInfo { addr: self.run.run.scratch_addr + start, len });
        self.valid.push(false);
        Ok(TensorId(self.tensors.len() as u32 - 1))
    }

    fn read_words(
        &self,
        tensor: TensorId,
        offset: u64,
        out: &mut [u32],
    ) -> Result<(), SubmitError> {
        super::workload::read_device_words(self.ops, self.tensor(tensor)?, offset, out)
    }

    fn settle(&mut self, tensor: TensorId, offset: u64, words: u64) -> Result<(), SubmitError> {
        let t = self.tensor(tensor)?;
        let start = t.addr.saturating_add(offset.saturating_mul(4));
        self.deps.clear();
        self.map.writers(start, start.saturating_add(words.saturating_mul(4)), &mut self.deps);
        let (run, writers) = (self.run, &self.deps);
        let done = || writers.iter().all(|&w| !run.is_live(w));
        if !done() {
            self.ops.aicpu_wait(&mut || done() || run.is_aborted(), None);
        }
        if run.is_aborted() {
            return Err(SubmitError::Aborted);
        }
        Ok(())
    }
}

/// Host-built graph: submits the uploaded tasks into the ring with their uploaded predecessor
/// lists, in order.
///
/// # Errors
/// [`SubmitError::Aborted`] when the run failed meanwhile; [`SubmitError::UnknownDependency`]
/// for a predecessor index that is not an earlier task (the host validates graphs, so this only
/// fires on a corrupt image).
pub fn load_host_graph(
    ops: &dyn DeviceOps,
    run: &RunState,
    mut dfx: Option<&mut super::dfx::ThreadDfx>,
) -> Result<(), SubmitError> {
    let hdr = &run.hdr;
    let mut preds = Vec::new();
    for seq in 0..u64::from(hdr.graph_task_count) {
        if run.is_aborted() {
            return Err(SubmitError::Aborted);
        }
        let rec: TaskRecord =
            run.image.read_record(hdr.graph_task_off as usize + 160 * seq as usize);
        let mut t = ResolvedTask::EMPTY;
        t.kernel = rec.kernel_id;
        t.block_dim = rec.block_dim.max(1);
        t.n_tensors = rec.n_tensors.min(MAX_TASK_TENSORS as u32);
        t.n_scalars = rec.n_scalars.min(MAX_TASK_SCALARS as u32);
        for i in 0..t.n_tensors as usize {
            let role = Role::from_bits(rec.roles >> (2 * i)).unwrap_or(Role::InOut);
            t.tensors[i] = (rec.tensors[i].addr, rec.tensors[i].bytes, role);
        }
        t.scalars = rec.scalars;
        t.dump_mask = (rec.roles >> TASK_DUMP_SHIFT) & ((1 << t.n_tensors) - 1);
        preds.clear();
        for k in 0..u64::from(rec.pred_count) {
            let off = hdr.graph_pred_off as usize + 4 * (rec.pred_start + k) as usize;
            // Relaxed: written by the host before the launch.
            let p = u64::from(run.image.u32_at(off).load(Ordering::Relaxed));
            if p >= seq {
                return Err(SubmitError::UnknownDependency { task: seq, after: p });
            }
            preds.push(p);
        }
        if !run.slot_free(seq) {
            ops.aicpu_wait(&mut || run.slot_free(seq) || run.is_aborted(), None);
            if run.is_aborted() {
                return Err(SubmitError::Aborted);
            }
        }
        let t0 = match &dfx {
            Some(d) if d.orch_on() => ops.clock_cycles(),
            _ => 0,
        };
        if let Some(d) = dfx.as_deref_mut() {
            d.dep_gen(seq, &t, &preds);
        }
        run.install(ops, seq, t, &preds);
        if let Some(d) = dfx.as_deref_mut().filter(|d| d.orch_on()) {
            d.submit_envelope(seq, t0, ops.clock_cycles());
        }
    }
    Ok(())
}
