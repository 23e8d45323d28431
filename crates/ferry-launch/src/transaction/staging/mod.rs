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

mod publish;
mod retire;

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
}
