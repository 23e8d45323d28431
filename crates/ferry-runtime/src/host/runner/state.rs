//! What a runner has attached and holds: DFX collection for its runs, its launch slots, its
//! scheduler diagnostics.

use super::{DeviceRunner, LaunchedRun, PreparedRun, RunnerDevice};
use crate::error::{RunError, RunnerError};
use crate::host::slots::{lock, FullPath, Sides};
use ferry_backend::DevicePtr;
use std::sync::Arc;

impl<P: RunnerDevice> DeviceRunner<P> {
    /// Releases a prepared run that will not be launched (dropping it does the same).
    pub fn release(&mut self, run: PreparedRun<P>) {
        drop(run);
    }

    /// Attaches DFX collection (`crate::host::dfx::DfxSession::device`) to the runs launched
    /// from now on, or detaches it with `None`. In-process path only
    /// ([`LaunchPath::InProcess`](crate::host::LaunchPath::InProcess)): a loaded AICPU program
    /// does not see it (use [`attach_dfx_session`](Self::attach_dfx_session)).
    pub fn attach_dfx(&mut self, dfx: Option<Arc<crate::device::dfx::DfxDevice>>) {
        if let Some(ip) = &self.in_process {
            ip.program.attach_dfx(dfx);
        }
    }

    /// Attaches a DFX collection to the runs prepared from now on, on either path, or detaches
    /// it with `None`. On the full path the session must have been started in this runner's
    /// device memory ([`crate::host::dfx::DfxSession::start_on`] with [`device`](Self::device)): its
    /// profiling bases go into every run's `KernelArgs`, and the loaded AICPU program attaches
    /// its writers from them. In process the session's device half is attached directly.
    ///
    /// # Errors
    /// [`RunnerError::Busy`] while a run is prepared or in flight; [`RunnerError::DfxNotOnDevice`] on the
    /// full path for a session kept in host memory.
    pub fn attach_dfx_session(
        &mut self,
        session: Option<&crate::host::dfx::DfxSession>,
    ) -> Result<(), RunnerError> {
        // A hung run holds its launch slot for good; its session may still be detached (and
        // collected) but no new one attached.
        if self.is_busy() && (self.hung.is_none() || session.is_some()) {
            return Err(RunnerError::Busy);
        }
        if let Some(s) = session {
            let loaded = self.kernels.kernels().into_iter().filter(|k| k.library.is_some());
            s.note_loaded_kernels(loaded.map(|k| (k.id, k.name)));
        }
        if self.full.is_none() {
            self.in_process().program.attach_dfx(session.map(crate::host::dfx::DfxSession::device));
            self.dfx_profiling = None;
            return Ok(());
        }
        self.dfx_profiling = match session {
            None => None,
            Some(s) => Some(s.profiling().ok_or(RunnerError::DfxNotOnDevice)?),
        };
        Ok(())
    }

    /// The launch transaction's counters (publications, descriptor and metadata copies,
    /// bytes, forks) on the full path; `None` in process.
    pub fn launch_stats(&self) -> Option<ferry_launch::transaction::StagingStats> {
        self.full.as_ref().map(FullPath::stats)
    }

    /// Per launch slot: the transaction's counters and the slot's device destination (full
    /// path; empty in process). Two slots never share a destination or a pinned source.
    pub fn launch_slots(
        &self,
    ) -> Vec<(ferry_launch::transaction::StagingStats, Option<DevicePtr>)> {
        self.full.as_ref().map_or_else(Vec::new, |f| {
            f.slots.iter().map(|s| (s.stats(), s.destination())).collect()
        })
    }

    /// Per launch slot, what it holds (full path; empty in process): its pinned source and
    /// device destination bytes, which follow [`SlotCapacity::serving`](crate::host::SlotCapacity)
    /// over the descriptors it served.
    pub fn slot_capacities(&self) -> Vec<crate::host::SlotCapacity> {
        self.full.as_ref().map_or_else(Vec::new, |f| {
            f.slots
                .iter()
                .map(|s| crate::host::SlotCapacity {
                    pinned: s.source_capacity(),
                    destination: s.destination_capacity(),
                })
                .collect()
        })
    }

    /// Waits for the run the chip is executing (bounded by the configured timeout, reaping
    /// stuck cores) and retires it from its launch slot. The run itself stays with its
    /// holder, whose `wait`/`finalize_run` reads its outputs.
    pub(super) fn retire_executing(&mut self) -> Result<(), RunError> {
        let Some(ex) = self.executing.take() else { return Ok(()) };
        if !ex.sides.settle(&self.chip, self.cfg.timeout) {
            self.executing = Some(ex);
            return Err(RunError::Timeout { ms: self.cfg.timeout.as_millis() as u64 });
        }
        if let (Some(full), Some(run)) = (&mut self.full, ex.run) {
            if full.slots[ex.slot].execution_owner() == Some(run) {
                let e = full.settle_slot(ex.slot, self.cfg.timeout)?;
                let e = e.and_then(|r| r.run_error);
                if let (Some(e), Sides::Streams(s)) = (e, &ex.sides) {
                    *lock(&s.stream_error) = Some(e);
                }
            }
        }
        Ok(())
    }

    /// The scheduler diagnostics of launch slot `slot`'s current run (full path): only a run
    /// whose publication succeeded has them, so a failed metadata publication can never export
    /// an earlier run's scheduler records as its own.
    ///
    /// # Errors
    /// [`DiagnosticsError::NoRun`](ferry_launch::transaction::DiagnosticsError::NoRun) without
    /// a run view (in process, an unknown slot, or a failed launch whose view was released);
    /// [`DiagnosticsError::NotPublished`](ferry_launch::transaction::DiagnosticsError::NotPublished)
    /// for a run that did not publish.
    pub fn scheduler_diagnostics(
        &self,
        slot: usize,
    ) -> Result<
        ferry_launch::transaction::SchedulerDiagnostics,
        ferry_launch::transaction::DiagnosticsError,
    > {
        let staging = self.full.as_ref().and_then(|f| f.slots.get(slot));
        staging.map_or(Err(ferry_launch::transaction::DiagnosticsError::NoRun), |s| {
            s.scheduler_diagnostics()
        })
    }

    /// The stream events of a launched run on the full path (its start event and its two
    /// completion boundaries) while its launch slot has not retired it: where the run is on
    /// the device, read from stream state. `None` in process or once it retired.
    pub fn run_events(
        &self,
        run: &LaunchedRun<P>,
    ) -> Option<ferry_launch::transaction::RunEvents<P::Device>> {
        let staging = self.full.as_ref()?.slots.get(run.slot)?;
        staging.run_events().filter(|e| Some(e.run) == run.run_id)
    }

    /// Whether a run is prepared or in flight on this runner (any launch slot held).
    pub fn is_busy(&self) -> bool {
        self.pool.is_busy()
    }

    /// The fault that took one of this runner's cores out of service (a kernel that never
    /// returned within [`RunnerConfig::kernel_budget`](crate::host::RunnerConfig)), if any:
    /// such a runner cannot launch again.
    pub fn hung(&self) -> Option<&crate::DeviceFault> {
        self.hung.as_ref()
    }
}
