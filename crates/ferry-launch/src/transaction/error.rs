//! Errors of the launch transaction, one enum per family of operations.
use super::RunId;
use ferry_backend::BackendError;

/// A malformed [`LaunchDescriptor`](super::LaunchDescriptor).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    /// The launch-route prefix is empty.
    #[error("the launch-route prefix is empty")]
    EmptyPrefix,
    /// The prefix is longer than the image.
    #[error("launch-route prefix of {prefix} bytes exceeds the {image}-byte image")]
    PrefixTooLong {
        /// Prefix length asked for.
        prefix: usize,
        /// Image length.
        image: usize,
    },
}

/// Why [`stage_launch_metadata`](super::LaunchStaging::stage_launch_metadata) refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StageError {
    /// The helper was moved from; its successor owns the slot.
    #[error("the staging helper was moved from")]
    Moved,
    /// The slot was abandoned after a fatal failure.
    #[error("the slot was abandoned")]
    Abandoned,
    /// The slot is quarantined.
    #[error("the slot is quarantined after an unproven drain of {run}")]
    Quarantined {
        /// The run whose drain could not be proven.
        run: RunId,
    },
}

/// Why [`prepare_runtime_args`](super::LaunchStaging::prepare_runtime_args) refused. The
/// snapshot, destination and source are unchanged unless a variant says otherwise.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    /// The helper was moved from.
    #[error("the staging helper was moved from")]
    Moved,
    /// The slot was abandoned after a fatal failure.
    #[error("the slot was abandoned")]
    Abandoned,
    /// The slot is quarantined.
    #[error("the slot is quarantined after an unproven drain of {run}")]
    Quarantined {
        /// The run whose drain could not be proven.
        run: RunId,
    },
    /// The current run's descriptor is prepared but unpublished.
    #[error("{run} is prepared but unpublished; publish or release its view first")]
    Unpublished {
        /// The unpublished run.
        run: RunId,
    },
    /// The current run is partial and still owns its execution.
    #[error("{run} is partial and still owns its execution; finish it first")]
    PartialRun {
        /// The partial run.
        run: RunId,
    },
    /// Growing the slot's staging needs the live predecessor to retire first.
    #[error("growing staging to {required} bytes must wait until {predecessor} retires")]
    PredecessorLive {
        /// The live run on this slot.
        predecessor: RunId,
        /// Bytes the new run needs.
        required: u64,
    },
    /// Freeing the retired pinned source failed; the slot still owns it (retry later).
    #[error("freeing the retired pinned source failed")]
    FreeRetiredSource(#[source] BackendError),
    /// Allocating the replacement pinned source failed; retry later (nothing was submitted).
    #[error("allocating {bytes} pinned bytes failed")]
    PinnedAlloc {
        /// Bytes asked for.
        bytes: u64,
        /// Why.
        #[source]
        error: BackendError,
    },
    /// Freeing the retired device destination failed; the slot still owns it.
    #[error("freeing the retired device destination failed")]
    FreeRetiredDestination(#[source] BackendError),
    /// Allocating the device destination failed; retry later.
    #[error("allocating a {bytes}-byte device destination failed")]
    DeviceAlloc {
        /// Bytes asked for.
        bytes: u64,
        /// Why.
        #[source]
        error: BackendError,
    },
    /// The descriptor has a per-run suffix, and the slot's destination still serves a live
    /// run: the suffix cannot be written under it (nothing was written).
    #[error("the per-run suffix cannot be written while {predecessor} is live on this slot")]
    SuffixBusy {
        /// The live run on this slot.
        predecessor: RunId,
    },
    /// The synchronous upload of the per-run suffix failed; the previous view is kept and the
    /// preparation can be retried (nothing was submitted to a stream).
    #[error("uploading the {bytes}-byte per-run suffix failed")]
    SuffixUpload {
        /// Bytes of the suffix.
        bytes: u64,
        /// Why.
        #[source]
        error: BackendError,
    },
}

/// Which copy of a publication failed to enqueue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CopyTarget {
    /// Metadata region `index` (0-based, queue order).
    Metadata(usize),
    /// The descriptor prefix.
    Descriptor,
}

/// Why [`publish_for_launch`](super::LaunchStaging::publish_for_launch) or
/// [`queue_run_entry`](super::LaunchStaging::queue_run_entry) failed or refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The helper was moved from.
    #[error("the staging helper was moved from")]
    Moved,
    /// The slot was abandoned.
    #[error("the slot was abandoned")]
    Abandoned,
    /// The slot is quarantined.
    #[error("the slot is quarantined after an unproven drain of {run}")]
    Quarantined {
        /// The run whose drain could not be proven.
        run: RunId,
    },
    /// Nothing is prepared.
    #[error("no run is prepared")]
    NotStarted,
    /// The run was already published; nothing was copied again.
    #[error("{run} is already published")]
    AlreadyPublished {
        /// The run.
        run: RunId,
    },
    /// The run is partial; it cannot publish again.
    #[error("{run} is partial")]
    Partial {
        /// The run.
        run: RunId,
    },
    /// Another run of this slot has not retired: its DMA may still read the pinned source.
    #[error("{predecessor} still owns the slot's pinned source")]
    SlotBusy {
        /// The live run.
        predecessor: RunId,
    },
    /// The staged metadata no longer fits the prepared source (staged after preparation).
    #[error("publication needs {required} pinned bytes, the slot has {capacity}")]
    CapacityExceeded {
        /// Bytes needed.
        required: u64,
        /// Bytes reserved.
        capacity: u64,
    },
    /// Ordering the caller dependency onto the AICPU stream failed; nothing of the run was
    /// submitted and it stays `Prepared`.
    #[error("ordering the caller dependency failed")]
    CallerDependency(#[source] BackendError),
    /// Ordering the run behind the completion boundaries of the run launched before it on the
    /// same stream pair failed: the run is `Partial`.
    #[error("ordering the run behind {predecessor}'s completion failed")]
    PredecessorWait {
        /// The run it was to follow.
        predecessor: RunId,
        /// Why.
        #[source]
        error: BackendError,
    },
    /// Recording the run's start event (before its first copy) failed: the run is `Partial`.
    #[error("recording the run's start event failed")]
    StartRecord(#[source] BackendError),
    /// A copy failed to enqueue: the run is `Partial`, the descriptor unpublished, the payload
    /// withdrawn, and no later copy was queued.
    #[error("enqueueing the {target:?} copy failed")]
    Copy {
        /// Which copy.
        target: CopyTarget,
        /// Why.
        #[source]
        error: BackendError,
    },
    /// Recording the entry-fork event failed: the run is `Partial`.
    #[error("recording the entry fork failed")]
    ForkRecord(#[source] BackendError),
    /// The AICore stream could not be made to wait for the fork: the run is `Partial`.
    #[error("making the AICore stream wait for the entry fork failed")]
    ForkWait(#[source] BackendError),
}

/// Why [`launch`](super::LaunchStaging::launch) refused or failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// The helper was moved from.
    #[error("the staging helper was moved from")]
    Moved,
    /// The slot was abandoned.
    #[error("the slot was abandoned")]
    Abandoned,
    /// The slot is quarantined.
    #[error("the slot is quarantined after an unproven drain of {run}")]
    Quarantined {
        /// The run whose drain could not be proven.
        run: RunId,
    },
    /// Nothing is prepared (missing preparation).
    #[error("no run is prepared")]
    NotStarted,
    /// The run is partial; its payload is withheld.
    #[error("{run} is partial")]
    Partial {
        /// The run.
        run: RunId,
    },
    /// The run was already launched.
    #[error("{run} was already launched")]
    AlreadyLaunched {
        /// The run.
        run: RunId,
    },
    /// The run was published on another stream pair; its fork does not order these streams.
    #[error("{run} was published on another stream pair")]
    StreamMismatch {
        /// The run.
        run: RunId,
    },
    /// Publishing the prepared run failed.
    #[error("publishing before launch failed")]
    Publish(#[source] PublishError),
    /// Both entries were submitted but a completion boundary could not be recorded after them:
    /// the run is `Partial` (it retires through the bounded stream discharge).
    #[error("recording {run}'s completion boundary failed")]
    CompletionRecord {
        /// The run.
        run: RunId,
        /// Why.
        #[source]
        error: BackendError,
    },
    /// Submitting an entry failed; `progress` says how far the launch got.
    #[error("submitting the launch failed ({progress:?})")]
    Submit {
        /// `NotStarted`: the AICore entry was refused, the run can be launched again;
        /// `Partial`: the AICPU entry was refused after the AICore entry was queued.
        progress: super::LaunchProgress,
        /// Why.
        #[source]
        error: BackendError,
    },
}

/// Why [`finish_run`](super::LaunchStaging::finish_run) failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FinishError {
    /// The helper was moved from.
    #[error("the staging helper was moved from")]
    Moved,
    /// No run of this slot owns an execution.
    #[error("no run owns an execution on this slot")]
    NoLiveRun,
    /// The bounded discharge could not prove the streams drained: the slot is quarantined and
    /// keeps its resources allocated.
    #[error("{run} could not be proven drained; the slot is quarantined")]
    Quarantined {
        /// The run.
        run: RunId,
        /// The failed proof.
        #[source]
        error: BackendError,
    },
}

/// Why [`teardown`](super::LaunchStaging::teardown) did not release everything.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TeardownError {
    /// A run still owns an execution; finish it (or abandon the slot).
    #[error("{run} still owns an execution")]
    LiveRun {
        /// The run.
        run: RunId,
    },
    /// The slot is quarantined: only abandonment is possible.
    #[error("the slot is quarantined after an unproven drain of {run}")]
    Quarantined {
        /// The run.
        run: RunId,
    },
    /// Some pinned frees failed; the slot retains those buffers for a retry.
    #[error("{buffers} pinned frees failed ({bytes} bytes retained for retry)")]
    FreesRetained {
        /// Buffers retained.
        buffers: usize,
        /// Their bytes.
        bytes: u64,
        /// The first failure.
        #[source]
        error: BackendError,
    },
    /// Freeing the device destination failed; the slot retains it for a retry.
    #[error("freeing the device destination failed")]
    DestinationFree(#[source] BackendError),
}

/// Why scheduler diagnostics cannot be exported for the current run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DiagnosticsError {
    /// No run view exists.
    #[error("no run is prepared")]
    NoRun,
    /// The run's publication did not succeed: exporting would label another run's records.
    #[error("{run} was not published; its scheduler records are not its own")]
    NotPublished {
        /// The run.
        run: RunId,
    },
}
