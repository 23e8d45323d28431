//! Retirement of a slot's run (bounded, on its completion boundaries or by discharge),
//! teardown and fatal abandonment.
use super::*;

impl<D: BackendDevice> LaunchStaging<D> {
    /// Retires the run that owns the slot's execution. A launched, non-partial run waits for
    /// its two completion boundaries (the AICPU stream's event, then the AICore stream's, each a
    /// counted event synchronisation bounded by `timeout`), which prove its publication fork
    /// was consumed; runs queued after it keep running. A failure its boundaries report is the
    /// run's `run_error` ([`inherited`](Retired::inherited) when a run ahead of it left it on
    /// the streams), and the streams are then discharged (bounded) so it does not reach runs
    /// launched later. Any other run (partial, never launched, or one whose boundary wait
    /// failed) gets a bounded stream discharge.
    ///
    /// # Errors
    /// [`FinishError::NoLiveRun`] when nothing owns the execution;
    /// [`FinishError::Quarantined`] when the discharge cannot prove the streams drained: the
    /// slot then keeps its resources allocated and refuses further work.
    pub fn finish_run(&mut self, timeout: Duration) -> Result<Retired, FinishError> {
        if self.condition == Condition::Moved {
            return Err(FinishError::Moved);
        }
        let l = self.live.as_ref().ok_or(FinishError::NoLiveRun)?;
        let run = l.run;
        let mut run_error = None;
        let mut path = None;
        let (mut inherited, mut span_cycles) = (false, None);
        if let (true, false, Some(ev)) = (l.launched, l.partial, &l.events) {
            // The run's own boundaries: runs queued after it keep running.
            let waited = [&ev.aicpu_done, &ev.aicore_done]
                .into_iter()
                .try_for_each(|e| self.device.synchronize_event(e, Some(timeout)));
            match waited {
                Ok(()) => {
                    path = Some(RetirePath::Normal);
                    span_cycles = ev.span_cycles();
                    let (a, c) = (ev.aicpu_done.error(), ev.aicore_done.error());
                    run_error = a.clone().or(c.clone());
                    // The same failure already at the predecessor's boundary on that stream:
                    // it was on the stream before this run's work.
                    let before = |mine: &Option<BackendError>, theirs: &EventOf<D>| {
                        mine.is_some() && *mine == theirs.error()
                    };
                    inherited = l.after.as_ref().is_some_and(|p| {
                        (a.is_some() || c.is_some())
                            && (a.is_none() || before(&a, &p.aicpu_done))
                            && (c.is_none() || before(&c, &p.aicore_done))
                    });
                    if run_error.is_some() {
                        // Hand the failure out of the streams (bounded; it waits for the runs
                        // queued after this one, which carry it too), so later runs start
                        // clean.
                        if let Err(e) = drain(&l.streams, timeout) {
                            tracing::warn!(%run, error = %e, "clearing a failed run's streams");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(%run, error = %e, "completion boundary failed; discharging")
                }
            }
        }
        if path.is_none() {
            match drain(&l.streams, timeout) {
                Ok(e) => {
                    run_error = run_error.or(e);
                    path = Some(RetirePath::Discharged);
                }
                Err(error) => {
                    tracing::error!(%run, %error, slot = self.slot, "discharge unproven; quarantining");
                    self.condition = Condition::Quarantined(run);
                    self.resident = None;
                    return Err(FinishError::Quarantined { run, error });
                }
            }
        }
        if run_error.is_some() {
            // A copy or kernel failed while running: the destination's content is unknown.
            self.resident = None;
        }
        if let Some(l) = self.live.take() {
            l.streams.retire_tail(run);
        }
        Ok(Retired {
            run,
            path: path.unwrap_or(RetirePath::Discharged),
            run_error,
            inherited,
            span_cycles,
        })
    }

    /// Normal retirement of the slot: frees the pinned source (and any retained from earlier
    /// failed frees) and the device destination. A failed free keeps the buffer for a retry:
    /// call `teardown` again. The helper is empty and reusable afterwards.
    ///
    /// # Errors
    /// [`TeardownError::LiveRun`] while a run owns the execution,
    /// [`TeardownError::Quarantined`] for a quarantined slot (only [`abandon`](Self::abandon)
    /// is possible), or a failed free.
    pub fn teardown(&mut self) -> Result<(), TeardownError> {
        match self.condition {
            Condition::Moved | Condition::Abandoned => return Ok(()),
            Condition::Quarantined(run) => return Err(TeardownError::Quarantined { run }),
            Condition::Active => {}
        }
        if let Some(l) = &self.live {
            return Err(TeardownError::LiveRun { run: l.run });
        }
        self.view = None;
        self.staged.clear();
        let mut first_error = None;
        let pending: Vec<_> =
            self.source.take().into_iter().chain(self.retained.drain(..)).collect();
        for buf in pending {
            if let Err(e) = buf.free() {
                first_error.get_or_insert(e.error);
                self.retained.push(e.buffer);
            }
        }
        if let Some((p, _)) = self.dst {
            self.device.free(p).map_err(TeardownError::DestinationFree)?;
            self.dst = None;
            self.resident = None;
        }
        match first_error {
            None => Ok(()),
            Some(error) => Err(TeardownError::FreesRetained {
                buffers: self.retained.len(),
                bytes: self.retained.iter().map(|b| b.len() as u64).sum(),
                error,
            }),
        }
    }

    /// Fatal abandonment: forgets the device destination without a device call and leaves the
    /// pinned source(s) allocated for the rest of the process, because a DMA reader may still
    /// exist. Returns the pinned bytes kept. The helper refuses all work afterwards.
    pub fn abandon(&mut self) -> u64 {
        let mut kept = 0;
        for buf in self.source.take().into_iter().chain(self.retained.drain(..)) {
            kept += buf.len() as u64;
            buf.leak();
        }
        self.dst = None;
        self.resident = None;
        self.view = None;
        self.live = None;
        self.staged.clear();
        if self.condition != Condition::Moved {
            self.condition = Condition::Abandoned;
        }
        kept
    }
}

/// Synchronizes the AICPU stream, then the AICore stream, each bounded by `timeout`.
///
/// `Ok(Some(e))`: both streams were idle when they reported `e` (a sticky kernel or copy error),
/// so no reader remains. `Err`: a timeout or a failed synchronize proves nothing.
fn drain<D: BackendDevice>(
    streams: &RunStreams<D>,
    timeout: Duration,
) -> Result<Option<BackendError>, BackendError> {
    let mut run_error = None;
    for s in [&streams.aicpu, &streams.aicore] {
        match s.synchronize_timeout(timeout) {
            Ok(()) => {}
            Err(e) if e.op() == BackendOp::Synchronize => {
                run_error.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(run_error)
}

impl<D: BackendDevice> Drop for LaunchStaging<D> {
    fn drop(&mut self) {
        if self.live.is_some() || self.is_quarantined() {
            // A DMA reader may remain: keep the memory (the fatal path), never free it.
            let run = self.live.as_ref().map(|l| l.run);
            let kept = self.abandon();
            if kept > 0 {
                tracing::warn!(
                    ?run,
                    kept,
                    slot = self.slot,
                    "dropped with an unretired run; pinned source kept"
                );
            }
            return;
        }
        if let Err(e) = self.teardown() {
            // Drop cannot return the error; the buffers were already handed to `retained` and
            // are freed without fault checks as the helper's fields drop.
            tracing::warn!(error = %e, slot = self.slot, "launch staging teardown during drop");
        }
    }
}
