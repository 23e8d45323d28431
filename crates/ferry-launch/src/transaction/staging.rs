//! [`LaunchStaging`]: one slot's pinned staging of launch descriptors and metadata.
use super::error::{
    CopyTarget, DiagnosticsError, FinishError, LaunchError, PrepareError, PublishError, StageError,
    TeardownError,
};
use super::{
    EntryKernels, LaunchDescriptor, LaunchProgress, LaunchReceipt, MetadataRegion, PublishReport,
    RetirePath, Retired, RunEvents, RunId, RunStreams, SchedulerDiagnostics, StagingStats,
    TransactionState,
};
use ferry_abi::launch::{AicoreLaunchArgs, KernelArgs};
use ferry_backend::{
    BackendDevice, BackendError, BackendEvent, BackendOp, BackendStream, DevicePtr, EventOf,
    PinnedHostBuffer, PinnedOf,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static NEXT_RUN: AtomicU64 = AtomicU64::new(1);

fn next_run() -> RunId {
    // Relaxed: a unique id; nothing is published through it.
    RunId(NEXT_RUN.fetch_add(1, Ordering::Relaxed))
}

/// The per-run view: what one prepared run snapshotted and how far its publication got.
#[derive(Debug)]
struct RunView {
    run: RunId,
    state: TransactionState,
    /// Owned snapshot of the descriptor's launch-route prefix.
    snapshot: Vec<u8>,
    /// The launch payload; withdrawn (None) when a copy failed.
    payload: Option<KernelArgs>,
    /// The copy was accepted into stream order, or the identical prefix was already resident.
    descriptor_published: bool,
    launched: bool,
    /// Metadata this run published (for diagnostics), set on successful publication.
    published_metadata: Option<(usize, u64)>,
    report: Option<PublishReport>,
}

/// The execution owner of a run whose asynchronous work was attempted and has not retired.
#[derive(Debug)]
struct LiveRun<D: BackendDevice> {
    run: RunId,
    streams: RunStreams<D>,
    launched: bool,
    partial: bool,
    /// The run it was queued behind (the pair's tail at publication), if that had not retired.
    after: Option<RunEvents<D>>,
    /// Its start event, once recorded.
    started: Option<EventOf<D>>,
    /// Its start and completion events, once both boundaries were recorded.
    events: Option<RunEvents<D>>,
}

impl<D: BackendDevice> LiveRun<D> {
    fn new(run: RunId, streams: &RunStreams<D>) -> LiveRun<D> {
        LiveRun {
            run,
            streams: streams.clone(),
            launched: false,
            partial: false,
            after: None,
            started: None,
            events: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Condition {
    Active,
    Moved,
    Abandoned,
    Quarantined(RunId),
}

/// One pipeline slot's launch staging helper.
///
/// It owns the slot's device destination (where the descriptor prefix lives on the device) and
/// pinned host source (where publication stages bytes for the asynchronous copies), the
/// per-run view (snapshot, state, payload), the staged metadata batch, and the execution owner
/// of the run whose stream work has not retired. See the [module docs](super) for the flow.
///
/// # Examples
/// ```
/// use ferry_abi::launch::KernelArgs;
/// use ferry_launch::{LaunchDescriptor, LaunchStaging, RunStreams, TransactionState};
/// use ferry_launch::transaction::PrepareError;
/// # use ferry_backend::{host::HostMemoryBackend, Backend};
/// # let b = HostMemoryBackend::new(1, 16 << 20)?;
/// # let dev = b.device(0)?;
/// let mut slot = LaunchStaging::new(dev, 1);
/// let a = LaunchDescriptor::new(vec![1; 64], 64)?;
/// let b = LaunchDescriptor::new(vec![2; 64], 64)?;
/// slot.prepare_runtime_args(&a, KernelArgs::new(0, 0))?;
/// // An unpublished descriptor refuses another preparation and keeps its snapshot.
/// assert!(matches!(
///     slot.prepare_runtime_args(&b, KernelArgs::new(0, 0)),
///     Err(PrepareError::Unpublished { .. })
/// ));
/// assert_eq!(slot.snapshot(), Some(&[1u8; 64][..]));
/// slot.release_run_view();
/// assert_eq!(slot.state(), TransactionState::NotStarted);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LaunchStaging<D: BackendDevice> {
    device: D,
    slot: u32,
    condition: Condition,
    /// Device destination of the descriptor prefix and its capacity.
    dst: Option<(DevicePtr, u64)>,
    /// The slot's pinned source (capacity = its length).
    source: Option<PinnedOf<D>>,
    /// Pinned sources whose free failed at teardown, kept for a retry.
    retained: Vec<PinnedOf<D>>,
    /// The prefix bytes known to be resident at `dst`.
    resident: Option<Vec<u8>>,
    view: Option<RunView>,
    staged: Vec<MetadataRegion>,
    live: Option<LiveRun<D>>,
    stats: StagingStats,
}

impl<D: BackendDevice> LaunchStaging<D> {
    /// An empty helper for pipeline slot `slot` of `device`. Allocates nothing.
    pub fn new(device: &D, slot: u32) -> Self {
        Self {
            device: device.clone(),
            slot,
            condition: Condition::Active,
            dst: None,
            source: None,
            retained: Vec::new(),
            resident: None,
            view: None,
            staged: Vec::new(),
            live: None,
            stats: StagingStats::default(),
        }
    }

    /// The pipeline slot this helper serves.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The current run's publication state (`NotStarted` without a run view).
    pub fn state(&self) -> TransactionState {
        self.view.as_ref().map_or(TransactionState::NotStarted, |v| v.state)
    }

    /// The current run, if a view exists.
    pub fn run(&self) -> Option<RunId> {
        self.view.as_ref().map(|v| v.run)
    }

    /// Whether the current run's descriptor copy was accepted into stream order, or an
    /// identical prefix was already resident. Not a proof of DMA completion.
    pub fn runtime_args_published(&self) -> bool {
        self.view.as_ref().is_some_and(|v| v.descriptor_published)
    }

    /// The current run's descriptor snapshot.
    pub fn snapshot(&self) -> Option<&[u8]> {
        self.view.as_ref().map(|v| v.snapshot.as_slice())
    }

    /// The current run's launch payload (`runtime_args` = the device destination); `None`
    /// without a run or after a failed copy withdrew it.
    pub fn payload(&self) -> Option<KernelArgs> {
        self.view.as_ref().and_then(|v| v.payload)
    }

    /// The current run's last publication report.
    pub fn last_publish(&self) -> Option<&PublishReport> {
        self.view.as_ref().and_then(|v| v.report.as_ref())
    }

    /// The staged (not yet published) metadata batch.
    pub fn staged_metadata(&self) -> &[MetadataRegion] {
        &self.staged
    }

    /// The run that owns the slot's execution (its stream work has not retired).
    pub fn execution_owner(&self) -> Option<RunId> {
        self.live.as_ref().map(|l| l.run)
    }

    /// The stream events (start and both completion boundaries) of the run that owns the
    /// slot's execution, once it was launched: where it is on the device, read from stream
    /// state ([`RunEvents::completed`]).
    pub fn run_events(&self) -> Option<RunEvents<D>> {
        self.live.as_ref().and_then(|l| l.events.clone())
    }

    /// Whether an unproven drain quarantined the slot.
    pub fn is_quarantined(&self) -> bool {
        matches!(self.condition, Condition::Quarantined(_))
    }

    /// Whether this helper was moved from (it can no longer publish or launch).
    pub fn is_moved_from(&self) -> bool {
        self.condition == Condition::Moved
    }

    /// The device destination of the descriptor prefix.
    pub fn destination(&self) -> Option<DevicePtr> {
        self.dst.map(|(p, _)| p)
    }

    /// Bytes of the device destination (0 when none is held): the largest descriptor extent
    /// (prefix + per-run suffix) the slot has served since its destination was last replaced.
    pub fn destination_capacity(&self) -> u64 {
        self.dst.map_or(0, |(_, cap)| cap)
    }

    /// Bytes of the pinned source (0 when none is held).
    pub fn source_capacity(&self) -> u64 {
        self.source.as_ref().map_or(0, |s| s.len() as u64)
    }

    /// Pinned buffers retained after failed frees.
    pub fn retained_frees(&self) -> usize {
        self.retained.len()
    }

    /// Cumulative counters.
    pub fn stats(&self) -> StagingStats {
        self.stats
    }

    /// Hands the descriptor and metadata snapshots, publication status, resources and
    /// execution owner to a new helper (a move that leaves the source inert). `self`
    /// is left moved-from: it owns nothing and refuses to prepare, publish or launch.
    pub fn take(&mut self) -> LaunchStaging<D> {
        let mut moved = LaunchStaging::new(&self.device, self.slot);
        moved.condition = Condition::Moved;
        std::mem::replace(self, moved)
    }

    /// Stages owned byte snapshots of launch metadata regions, published in the given
    /// (dependency) order before the descriptor. Replaces any staged batch; an empty batch
    /// clears an abandoned unpublished one, so a run without metadata never inherits it.
    ///
    /// # Errors
    /// The helper is moved from, abandoned or quarantined.
    pub fn stage_launch_metadata(&mut self, batch: Vec<MetadataRegion>) -> Result<(), StageError> {
        match self.condition {
            Condition::Active => {}
            Condition::Moved => return Err(StageError::Moved),
            Condition::Abandoned => return Err(StageError::Abandoned),
            Condition::Quarantined(run) => return Err(StageError::Quarantined { run }),
        }
        self.staged = batch;
        Ok(())
    }

    fn staged_bytes(&self) -> u64 {
        self.staged.iter().map(|r| r.bytes.len() as u64).sum()
    }

    /// Reserves the slot-owned device destination and pinned source, and snapshots the
    /// descriptor's launch-route prefix into a new per-run view. The pinned source is sized for
    /// the prefix plus the staged metadata; it grows only while the slot has no live
    /// predecessor, freeing the retired source first. Submits nothing to any stream.
    ///
    /// `args` is the launch payload; its `runtime_args` is set to the device destination.
    ///
    /// # Errors
    /// See [`PrepareError`]. A refused preparation leaves the view, snapshot, destination and
    /// source unchanged; a failed growth can be retried.
    pub fn prepare_runtime_args(
        &mut self,
        descriptor: &LaunchDescriptor,
        mut args: KernelArgs,
    ) -> Result<RunId, PrepareError> {
        match self.condition {
            Condition::Active => {}
            Condition::Moved => return Err(PrepareError::Moved),
            Condition::Abandoned => return Err(PrepareError::Abandoned),
            Condition::Quarantined(run) => return Err(PrepareError::Quarantined { run }),
        }
        if let Some(v) = &self.view {
            match v.state {
                TransactionState::Prepared => return Err(PrepareError::Unpublished { run: v.run }),
                TransactionState::Partial if self.live.is_some() => {
                    return Err(PrepareError::PartialRun { run: v.run })
                }
                _ => {}
            }
        }
        let prefix = descriptor.route_prefix_len() as u64;
        let extent = descriptor.device_extent() as u64;
        let suffix = descriptor.run_suffix();
        let required = prefix + self.staged_bytes();
        let grow_source = self.source_capacity() < required;
        let grow_dst = self.dst.is_none_or(|(_, cap)| cap < extent);
        if grow_source || grow_dst {
            if let Some(l) = &self.live {
                return Err(PrepareError::PredecessorLive { predecessor: l.run, required });
            }
        }
        if let (false, Some(l)) = (suffix.is_empty(), &self.live) {
            // The suffix shares the destination with the live run's descriptor: slot
            // reservation (docs/design/launch.md) keeps a live run's bytes intact until it retires.
            return Err(PrepareError::SuffixBusy { predecessor: l.run });
        }
        if grow_source {
            // The retired source goes first: a failed free keeps it (ownership retained).
            if let Some(old) = self.source.take() {
                if let Err(e) = old.free() {
                    let (buffer, error) = (e.buffer, e.error);
                    self.source = Some(buffer);
                    return Err(PrepareError::FreeRetiredSource(error));
                }
            }
            let buf = self
                .device
                .alloc_pinned(required as usize)
                .map_err(|error| PrepareError::PinnedAlloc { bytes: required, error })?;
            self.source = Some(buf);
            self.stats.growths += 1;
        }
        if grow_dst {
            if let Some((old, _)) = self.dst {
                self.device.free(old).map_err(PrepareError::FreeRetiredDestination)?;
                self.dst = None;
                self.resident = None;
            }
            let p = self
                .device
                .malloc(extent)
                .map_err(|error| PrepareError::DeviceAlloc { bytes: extent, error })?;
            self.dst = Some((p, extent));
        }
        let Some((dst, _)) = self.dst else { unreachable!("the destination was reserved above") };
        if !suffix.is_empty() {
            // Synchronous: no run of this slot is live (checked above), so nothing reads the
            // suffix region while it is written; the copy returns once the bytes are in place.
            self.device.copy_htod(suffix, dst.add(prefix)).map_err(|error| {
                PrepareError::SuffixUpload { bytes: suffix.len() as u64, error }
            })?;
            self.stats.suffix_uploads += 1;
            self.stats.suffix_bytes += suffix.len() as u64;
        }
        args.runtime_args = dst.addr();
        let run = next_run();
        self.view = Some(RunView {
            run,
            state: TransactionState::Prepared,
            snapshot: descriptor.route_prefix().to_vec(),
            payload: Some(args),
            descriptor_published: false,
            launched: false,
            published_metadata: None,
            report: None,
        });
        Ok(run)
    }

    /// Discards the per-run view (snapshot, payload, state). It does not release the slot's
    /// source or destination, the staged metadata, or a live run's execution owner. Returns the
    /// discarded run.
    pub fn release_run_view(&mut self) -> Option<RunId> {
        self.view.take().map(|v| v.run)
    }

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
