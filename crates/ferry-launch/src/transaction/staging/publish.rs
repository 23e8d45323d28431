//! Publication and launch of a slot's run, and its scheduler diagnostics.
use super::*;

impl<D: BackendDevice> LaunchStaging<D> {
    /// Orders `caller_dependency` (an event the caller recorded on its own stream, which stays
    /// caller-owned) onto the AICPU stream, then [publishes](Self::publish_for_launch). With a
    /// caller dependency the entry fork is always queued, so the AICore stream is ordered
    /// after it too.
    ///
    /// # Errors
    /// As [`publish_for_launch`](Self::publish_for_launch), plus
    /// [`PublishError::CallerDependency`] (the run stays `Prepared`).
    pub fn queue_run_entry(
        &mut self,
        streams: &RunStreams<D>,
        caller_dependency: Option<&EventOf<D>>,
    ) -> Result<PublishReport, PublishError> {
        self.check_publishable()?;
        if let Some(dep) = caller_dependency {
            // Nothing of this run is on a stream yet, so a refused wait is a clean refusal.
            streams.aicpu.wait_event(dep).map_err(PublishError::CallerDependency)?;
        }
        self.publish_inner(streams, caller_dependency.is_some())
    }

    /// Publishes the prepared run: copies the snapshot (and the staged metadata, at the
    /// source's suffix) into the pinned source, enqueues the metadata copies in order and then
    /// the descriptor copy on the AICPU stream, records the entry-fork event after them and
    /// makes the AICore stream wait for it. An unchanged launch-route prefix queues no
    /// descriptor copy; with no copy at all (and no caller dependency) no fork is queued.
    ///
    /// # Errors
    /// Refusals ([`PublishError::NotStarted`], [`AlreadyPublished`](PublishError::AlreadyPublished),
    /// [`SlotBusy`](PublishError::SlotBusy), …) queue nothing. A failed copy makes the run
    /// `Partial`, leaves the descriptor unpublished, withdraws the payload and queues no later
    /// copy; a failed fork record or wait makes it `Partial`. A partial run keeps its
    /// execution owner until [`finish_run`](Self::finish_run).
    pub fn publish_for_launch(
        &mut self,
        streams: &RunStreams<D>,
    ) -> Result<PublishReport, PublishError> {
        self.check_publishable()?;
        self.publish_inner(streams, false)
    }

    fn check_publishable(&self) -> Result<(), PublishError> {
        match self.condition {
            Condition::Active => {}
            Condition::Moved => return Err(PublishError::Moved),
            Condition::Abandoned => return Err(PublishError::Abandoned),
            Condition::Quarantined(run) => return Err(PublishError::Quarantined { run }),
        }
        let v = self.view.as_ref().ok_or(PublishError::NotStarted)?;
        match v.state {
            TransactionState::NotStarted => return Err(PublishError::NotStarted),
            TransactionState::Published => {
                return Err(PublishError::AlreadyPublished { run: v.run })
            }
            TransactionState::Partial => return Err(PublishError::Partial { run: v.run }),
            TransactionState::Prepared => {}
        }
        if let Some(l) = &self.live {
            return Err(PublishError::SlotBusy { predecessor: l.run });
        }
        let required = v.snapshot.len() as u64 + self.staged_bytes();
        if required > self.source_capacity() {
            return Err(PublishError::CapacityExceeded {
                required,
                capacity: self.source_capacity(),
            });
        }
        Ok(())
    }

    /// Publication after `check_publishable` passed: a prepared view, no live run, enough
    /// source capacity.
    fn publish_inner(
        &mut self,
        streams: &RunStreams<D>,
        caller_dependency: bool,
    ) -> Result<PublishReport, PublishError> {
        let Self { view, source, resident, staged, live, stats, dst, .. } = self;
        let (Some(v), Some(src), Some((dst, _))) = (view.as_mut(), source.as_mut(), *dst) else {
            unreachable!("check_publishable established a prepared view with its reservations")
        };
        let prefix = v.snapshot.len();
        let unchanged = resident.as_deref() == Some(v.snapshot.as_slice());
        let copies = !unchanged || !staged.is_empty();
        let fork = copies || caller_dependency;

        let mut report = PublishReport { forked: fork, ..PublishReport::default() };
        // Marked before the first stream call: from here on a failure is Partial and the run
        // owns its execution until a drain is proven.
        let l = live.insert(LiveRun::new(v.run, streams));
        let fail = |v: &mut RunView, l: &mut LiveRun<D>, withdraw: bool| {
            v.state = TransactionState::Partial;
            if withdraw {
                v.payload = None;
                v.descriptor_published = false;
            }
            l.partial = true;
        };
        // Queued behind the run launched before it on this pair, if that one has not retired:
        // each stream waits for the other stream's completion boundary (its own comes first
        // in stream order anyway), so nothing of this run — copies into regions the
        // predecessor may read, the register reset of its AICore entry — starts before the
        // predecessor's two entries have returned.
        l.after = streams.tail().filter(|t| t.run != v.run);
        if let Some(p) = l.after.clone() {
            let waited = streams
                .aicpu
                .wait_event(&p.aicore_done)
                .and_then(|()| streams.aicore.wait_event(&p.aicpu_done));
            if let Err(error) = waited {
                fail(v, l, false);
                return Err(PublishError::PredecessorWait { predecessor: p.run, error });
            }
            stats.predecessor_waits += 1;
        }
        let started = EventOf::<D>::default();
        if let Err(e) = streams.aicpu.record_event(&started) {
            fail(v, l, false);
            return Err(PublishError::StartRecord(e));
        }
        l.started = Some(started);
        if copies {
            // SAFETY: no run of this slot is live (`check_publishable`), so no copy enqueued
            // from this source is still in flight: every earlier run retired with proof that
            // its streams drained. `&mut self` excludes other host access.
            let bytes = unsafe { src.as_mut_slice() };
            if !unchanged {
                bytes[..prefix].copy_from_slice(&v.snapshot);
            }
            let mut off = prefix;
            for r in staged.iter() {
                bytes[off..off + r.bytes.len()].copy_from_slice(&r.bytes);
                report.metadata.push((off as u64, r.bytes.len() as u64));
                off += r.bytes.len();
            }
        }
        for (i, (r, &(off, len))) in staged.iter().zip(report.metadata.iter()).enumerate() {
            // SAFETY: `off + len` lies inside the source (capacity checked by
            // `check_publishable`); the source stays allocated and unwritten until the run
            // retires with a proven drain (the live run recorded above).
            let res = unsafe {
                streams.aicpu.copy_htod_async(src.as_ptr().add(off as usize), r.dst, len)
            };
            if let Err(error) = res {
                // The first failure stops later metadata and the descriptor.
                fail(v, l, true);
                return Err(PublishError::Copy { target: CopyTarget::Metadata(i), error });
            }
            report.bytes_copied += len;
            stats.metadata_copies += 1;
        }
        if unchanged {
            stats.unchanged_prefixes += 1;
        } else {
            // SAFETY: as for the metadata copies; the prefix is the source's first `prefix`
            // bytes and `dst` holds at least `prefix` bytes (reserved in prepare).
            let res = unsafe { streams.aicpu.copy_htod_async(src.as_ptr(), dst, prefix as u64) };
            if let Err(error) = res {
                fail(v, l, true);
                stats.bytes_copied += report.bytes_copied;
                return Err(PublishError::Copy { target: CopyTarget::Descriptor, error });
            }
            report.bytes_copied += prefix as u64;
            report.descriptor_copied = true;
            stats.descriptor_copies += 1;
            *resident = Some(v.snapshot.clone());
        }
        v.descriptor_published = true;
        stats.bytes_copied += report.bytes_copied;
        if fork {
            let ev = EventOf::<D>::default();
            if let Err(e) = streams.aicpu.record_event(&ev) {
                fail(v, l, false);
                return Err(PublishError::ForkRecord(e));
            }
            if let Err(e) = streams.aicore.wait_event(&ev) {
                fail(v, l, false);
                return Err(PublishError::ForkWait(e));
            }
            stats.forks += 1;
        }
        v.state = TransactionState::Published;
        v.published_metadata =
            Some((staged.len(), staged.iter().map(|r| r.bytes.len() as u64).sum()));
        staged.clear();
        v.report = Some(report.clone());
        stats.publishes += 1;
        Ok(report)
    }

    /// Launches the current run: admits `Prepared` (publishing it first with no caller
    /// dependency) or `Published`, then submits the AICore entry and, after it, the AICPU
    /// entry with the front-less [`KernelArgs`] by value. Kernels are submitted only after the
    /// publication and its fork.
    ///
    /// # Errors
    /// [`LaunchError::NotStarted`] without a prepared run; see [`LaunchError`] for the rest.
    /// An AICore refusal leaves the run `Published` and launchable; an AICPU refusal after the
    /// AICore entry was queued makes it `Partial`.
    pub fn launch(
        &mut self,
        streams: &RunStreams<D>,
        kernels: EntryKernels<D>,
    ) -> Result<LaunchReceipt, LaunchError> {
        match self.condition {
            Condition::Active => {}
            Condition::Moved => return Err(LaunchError::Moved),
            Condition::Abandoned => return Err(LaunchError::Abandoned),
            Condition::Quarantined(run) => return Err(LaunchError::Quarantined { run }),
        }
        let v = self.view.as_ref().ok_or(LaunchError::NotStarted)?;
        let (run, state, launched) = (v.run, v.state, v.launched);
        match state {
            TransactionState::NotStarted => return Err(LaunchError::NotStarted),
            TransactionState::Partial => return Err(LaunchError::Partial { run }),
            TransactionState::Prepared => {
                self.queue_run_entry(streams, None).map_err(LaunchError::Publish)?;
            }
            TransactionState::Published if launched => {
                return Err(LaunchError::AlreadyLaunched { run })
            }
            TransactionState::Published => {}
        }
        match &self.live {
            Some(l) if l.run == run && !l.streams.same_as(streams) => {
                return Err(LaunchError::StreamMismatch { run })
            }
            Some(l) if l.run != run => {
                // A view prepared while the predecessor was live, published with an unchanged
                // prefix: it must not launch over the predecessor's execution.
                return Err(LaunchError::Publish(PublishError::SlotBusy { predecessor: l.run }));
            }
            _ => {}
        }
        let Some(args) = self.view.as_ref().and_then(|v| v.payload) else {
            return Err(LaunchError::Partial { run });
        };
        let EntryKernels { aicore_name, aicore, aicpu_name, aicpu } = kernels;
        let core_args = AicoreLaunchArgs::from(&args);
        streams
            .aicore
            .launch_entry(&aicore_name, aicore, core_args)
            .map_err(|error| LaunchError::Submit { progress: LaunchProgress::NotStarted, error })?;
        let live = self.live.get_or_insert_with(|| LiveRun::new(run, streams));
        let v = self.view.as_mut().expect("checked above");
        if let Err(error) = streams.aicpu.launch_entry(&aicpu_name, aicpu, args) {
            live.partial = true;
            v.state = TransactionState::Partial;
            return Err(LaunchError::Submit { progress: LaunchProgress::Partial, error });
        }
        live.launched = true;
        v.launched = true;
        // The run's two completion boundaries: what its retirement waits for, and what the next
        // run on this pair is queued behind.
        let (aicpu_done, aicore_done) = (EventOf::<D>::default(), EventOf::<D>::default());
        let recorded = streams
            .aicpu
            .record_event(&aicpu_done)
            .and_then(|()| streams.aicore.record_event(&aicore_done));
        if let Err(error) = recorded {
            // Both entries run, but without both boundaries nothing proves where the run ends:
            // it retires through the bounded discharge, and the pair keeps no tail to wait on.
            live.partial = true;
            v.state = TransactionState::Partial;
            streams.set_tail(None);
            return Err(LaunchError::CompletionRecord { run, error });
        }
        let started = live.started.clone().unwrap_or_default();
        let events = RunEvents { run, started, aicpu_done, aicore_done };
        streams.set_tail(Some(events.clone()));
        live.events = Some(events);
        Ok(LaunchReceipt { run })
    }

    /// Scheduler diagnostics of the current run, only if its publication succeeded (so a
    /// failed metadata publication cannot label a previous run's records as this run's).
    ///
    /// # Errors
    /// [`DiagnosticsError::NoRun`] or [`DiagnosticsError::NotPublished`].
    pub fn scheduler_diagnostics(&self) -> Result<SchedulerDiagnostics, DiagnosticsError> {
        let v = self.view.as_ref().ok_or(DiagnosticsError::NoRun)?;
        match (v.state, v.published_metadata) {
            (TransactionState::Published, Some((regions, bytes))) => Ok(SchedulerDiagnostics {
                run: v.run,
                metadata_regions: regions,
                metadata_bytes: bytes,
            }),
            _ => Err(DiagnosticsError::NotPublished { run: v.run }),
        }
    }
}
