//! The per-run launch transaction: staged, event-ordered publication of the launch descriptor,
//! queued on the streams behind the run before it (docs/design/launch.md).
//!
//! One [`LaunchStaging`] serves one pipeline slot. A run goes through:
//!
//! 1. [`stage_launch_metadata`](LaunchStaging::stage_launch_metadata) (optional): owned byte
//!    snapshots of metadata regions (e.g. a5 host-built-graph resident scheduler state). An
//!    empty batch clears an abandoned, unpublished one.
//! 2. [`prepare_runtime_args`](LaunchStaging::prepare_runtime_args): reserves the slot-owned
//!    device destination and pinned host source (growing them only while the slot has no live
//!    predecessor) and snapshots the descriptor's launch-route prefix. No stream work.
//! 3. [`queue_run_entry`](LaunchStaging::queue_run_entry): orders an optional caller dependency
//!    onto the AICPU stream, then [`publish_for_launch`](LaunchStaging::publish_for_launch):
//!    orders the run behind the completion boundaries of the run launched before it on the
//!    same stream pair (when that one has not retired), records the run's start event, copies
//!    the snapshot into the pinned source, enqueues the metadata copies (source suffix,
//!    dependency order) and then the descriptor copy on the AICPU stream, records the
//!    entry-fork event and makes the AICore stream wait for it. An unchanged prefix queues no
//!    copy and, without a caller dependency, no fork.
//! 4. [`launch`](LaunchStaging::launch): admits `Prepared` (publishing first) or `Published`,
//!    submits the AICore entry, then the AICPU entry with the front-less [`KernelArgs`] by
//!    value, then records the run's two completion boundaries (one event per stream). Nothing
//!    here waits for the device: run k+1 is queued while run k executes, and the chip starts it
//!    when run k's boundaries are reached, without a host round trip.
//! 5. [`finish_run`](LaunchStaging::finish_run): waits for the run's own two completion
//!    boundaries (not for the runs queued after it) and retires it; a run without them gets a
//!    bounded stream discharge, and a failed proof quarantines the slot.
//! 6. [`teardown`](LaunchStaging::teardown) (normal path) or [`abandon`](LaunchStaging::abandon)
//!    (fatal path, keeps the pinned source allocated).
//!
//! # Failures while runs are queued
//!
//! A stream keeps its first failure (a failed copy or entry) until a synchronize hands it
//! out, and every boundary recorded after it reports it ([`BackendEvent::error`]). So when run k fails
//! while run k+1 is queued behind it, both retire with an error: run k with its own, run k+1
//! marked [`inherited`](Retired::inherited) (the failure was on the streams before its own
//! work). The failing run's retirement discharges the pair (bounded), which clears the
//! failure, so runs launched after that start clean.
//!
//! # States
//!
//! ```text
//!  NotStarted --prepare--> Prepared --publish ok--> Published --launch--> (launched)
//!                             |   \--copy/record/wait fails--> Partial (owner kept)
//!                             '--launch (publishes first)--^
//!  Prepared --prepare--> refused (Unpublished), snapshot unchanged
//!  any --release_run_view--> NotStarted (source, destination and owner kept)
//! ```
//!
//! [`KernelArgs`]: ferry_abi::launch::KernelArgs
use ferry_abi::launch::{AicoreLaunchArgs, KernelArgs};
use ferry_backend::{
    BackendDevice, BackendError, BackendEvent, BackendStream, DevicePtr, EntryOf, EventOf,
    HostEntry,
};
use std::sync::{Arc, Mutex};

mod error;
mod staging;

pub use error::{
    CopyTarget, DescriptorError, DiagnosticsError, FinishError, LaunchError, PrepareError,
    PublishError, StageError, TeardownError,
};
pub use staging::LaunchStaging;

/// The launch descriptor: an owned byte image whose first `route_prefix` bytes (the
/// launch-route prefix) are what a run publishes to the device, and an optional per-run suffix.
///
/// The prefix is published on the launch stream and cached per slot: an identical prefix is
/// not copied again. The per-run suffix ([`with_run_suffix`](Self::with_run_suffix)) holds what
/// changes every run (run identity, per-run arguments, regions the device writes); it lands on
/// the device right after the prefix, uploaded synchronously while the run is prepared (the
/// slot has no live run then), so it never costs a stream copy or an entry fork. The device
/// extent is prefix + suffix.
///
/// # Examples
/// ```
/// use ferry_launch::LaunchDescriptor;
/// let d = LaunchDescriptor::new(vec![1, 2, 3, 4], 2)?;
/// assert_eq!(d.route_prefix(), &[1, 2]);
/// assert!(LaunchDescriptor::new(vec![1], 2).is_err());
/// # Ok::<(), ferry_launch::transaction::DescriptorError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchDescriptor {
    image: Vec<u8>,
    route_prefix: usize,
    run_suffix: Vec<u8>,
}

impl LaunchDescriptor {
    /// A descriptor image whose first `route_prefix` bytes are published.
    ///
    /// # Errors
    /// [`DescriptorError::EmptyPrefix`] for a zero prefix, [`DescriptorError::PrefixTooLong`]
    /// when the prefix exceeds the image.
    pub fn new(image: Vec<u8>, route_prefix: usize) -> Result<Self, DescriptorError> {
        if route_prefix == 0 {
            return Err(DescriptorError::EmptyPrefix);
        }
        if route_prefix > image.len() {
            return Err(DescriptorError::PrefixTooLong {
                prefix: route_prefix,
                image: image.len(),
            });
        }
        Ok(Self { image, route_prefix, run_suffix: Vec::new() })
    }

    /// The same descriptor with a per-run suffix, placed on the device right after the prefix.
    ///
    /// # Examples
    /// ```
    /// use ferry_launch::LaunchDescriptor;
    /// let d = LaunchDescriptor::new(vec![1; 64], 64)?.with_run_suffix(vec![2; 32]);
    /// assert_eq!((d.route_prefix_len(), d.run_suffix().len(), d.device_extent()), (64, 32, 96));
    /// # Ok::<(), ferry_launch::transaction::DescriptorError>(())
    /// ```
    pub fn with_run_suffix(mut self, suffix: Vec<u8>) -> Self {
        self.run_suffix = suffix;
        self
    }

    /// The per-run suffix (empty when none).
    pub fn run_suffix(&self) -> &[u8] {
        &self.run_suffix
    }

    /// Device bytes the descriptor occupies: the launch-route prefix plus the per-run suffix.
    pub fn device_extent(&self) -> usize {
        self.route_prefix + self.run_suffix.len()
    }

    /// The whole image.
    pub fn image(&self) -> &[u8] {
        &self.image
    }

    /// The whole image, writable (the host edits the descriptor between runs).
    pub fn image_mut(&mut self) -> &mut [u8] {
        &mut self.image
    }

    /// The launch-route prefix: the bytes a run publishes.
    pub fn route_prefix(&self) -> &[u8] {
        &self.image[..self.route_prefix]
    }

    /// Length of the launch-route prefix.
    pub fn route_prefix_len(&self) -> usize {
        self.route_prefix
    }
}

/// One launch-metadata region: an owned byte snapshot and the device address it is published
/// to. A batch is published in the order given (dependency order), before the descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataRegion {
    /// Device destination (owned by the caller, e.g. resident scheduler state).
    pub dst: DevicePtr,
    /// The bytes to publish.
    pub bytes: Vec<u8>,
}

impl MetadataRegion {
    /// A region publishing `bytes` to `dst`.
    pub fn new(dst: DevicePtr, bytes: Vec<u8>) -> Self {
        Self { dst, bytes }
    }
}

/// The runner-owned stream pair a run is published and launched on, of device type `D`.
/// Caller streams are never part of it: a caller hands in a dependency event only.
///
/// Clones share the pair and its tail: the completion boundaries of the last run launched on
/// it that has not retired, which the next publication on the pair (from any slot) is
/// ordered behind.
#[derive(Debug)]
pub struct RunStreams<D: BackendDevice> {
    /// The AICPU stream: caller dependency, publication copies, fork record, AICPU entry.
    pub aicpu: Arc<D::Stream>,
    /// The AICore stream: waits for the entry fork, then runs the AICore entry.
    pub aicore: Arc<D::Stream>,
    tail: Arc<Mutex<Option<RunEvents<D>>>>,
}

impl<D: BackendDevice> Clone for RunStreams<D> {
    fn clone(&self) -> Self {
        Self { aicpu: self.aicpu.clone(), aicore: self.aicore.clone(), tail: self.tail.clone() }
    }
}

impl<D: BackendDevice> RunStreams<D> {
    /// Creates a fresh AICPU + AICore stream pair on `device`.
    ///
    /// # Errors
    /// When a stream cannot be created.
    pub fn new(device: &D) -> Result<Self, BackendError> {
        Ok(Self {
            aicpu: Arc::new(device.create_stream()?),
            aicore: Arc::new(device.create_stream()?),
            tail: Arc::default(),
        })
    }

    /// The events of the last run launched on this pair that has not retired: the run the
    /// next publication is queued behind. `None` when every launched run retired.
    pub fn tail(&self) -> Option<RunEvents<D>> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_tail(&self, events: Option<RunEvents<D>>) {
        *self.tail.lock().unwrap_or_else(|p| p.into_inner()) = events;
    }

    /// Clears the tail if it is `run`'s (the run retired).
    fn retire_tail(&self, run: RunId) {
        let mut t = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        if t.as_ref().is_some_and(|e| e.run == run) {
            *t = None;
        }
    }

    fn same_as(&self, other: &RunStreams<D>) -> bool {
        self.aicpu.id() == other.aicpu.id() && self.aicore.id() == other.aicore.id()
    }
}

/// The stream events of one launched run: its start (recorded on the AICPU stream before its
/// first copy, after whatever it is ordered behind) and its two completion boundaries
/// (recorded after the AICPU entry on the AICPU stream and after the AICore entry on the
/// AICore stream). Their states and device timestamps say where the run is without asking
/// the host: [`BackendEvent::query`], [`BackendEvent::timestamp_cycles`],
/// [`BackendEvent::error`].
#[derive(Clone, Debug)]
pub struct RunEvents<D: BackendDevice> {
    /// The run.
    pub run: RunId,
    /// Recorded before the run's first copy.
    pub started: EventOf<D>,
    /// The AICPU stream's completion boundary.
    pub aicpu_done: EventOf<D>,
    /// The AICore stream's completion boundary.
    pub aicore_done: EventOf<D>,
}

impl<D: BackendDevice> RunEvents<D> {
    /// Whether both completion boundaries were reached.
    pub fn completed(&self) -> bool {
        self.aicpu_done.query() && self.aicore_done.query()
    }

    /// Whether the run's start event was reached (its first stream operation ran).
    pub fn started(&self) -> bool {
        self.started.query()
    }

    /// The device-clock span of a completed run, in device cycles: from its start event to the
    /// later of its two completion boundaries. `None` until all three completed.
    pub fn span_cycles(&self) -> Option<(u64, u64)> {
        if !(self.started() && self.completed()) {
            return None;
        }
        let start = self.started.timestamp_cycles()?;
        let end = self.aicpu_done.timestamp_cycles()?.max(self.aicore_done.timestamp_cycles()?);
        Some((start, end))
    }
}

/// A process-unique id of one prepared run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(pub u64);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "run {}", self.0)
    }
}

/// Publication state of a slot's current run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransactionState {
    /// No prepared run (never prepared, view released, or moved from).
    NotStarted,
    /// Snapshot taken; nothing published.
    Prepared,
    /// Every copy and the entry fork were accepted into stream order (or the identical prefix
    /// was already resident). Not a proof of DMA completion.
    Published,
    /// An asynchronous step failed after the transaction was marked: device state is
    /// uncertain; the run keeps its execution owner until a bounded discharge proves the
    /// streams drained.
    Partial,
}

/// How far a launch got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaunchProgress {
    /// Nothing of the launch reached a stream; the run can be launched again.
    NotStarted,
    /// The AICore entry was submitted but the AICPU entry was not: device state uncertain.
    Partial,
    /// Both entries were submitted.
    Complete,
}

/// What one publication queued.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishReport {
    /// Bytes enqueued for host-to-device copy (metadata plus descriptor).
    pub bytes_copied: u64,
    /// Whether the descriptor prefix was copied (false: identical prefix already resident).
    pub descriptor_copied: bool,
    /// `(source offset, length)` of each metadata region inside the pinned source, in queue
    /// order. Every offset is at or past the descriptor prefix.
    pub metadata: Vec<(u64, u64)>,
    /// Whether an entry fork (AICPU record, AICore wait) was queued.
    pub forked: bool,
}

/// Proof that both entries of a run were submitted. Move-only; minted only by
/// [`LaunchStaging::launch`].
#[derive(Debug, PartialEq, Eq)]
pub struct LaunchReceipt {
    run: RunId,
}

impl LaunchReceipt {
    /// The launched run.
    pub fn run(&self) -> RunId {
        self.run
    }
}

/// How a run's execution owner was retired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetirePath {
    /// Both completion boundaries were observed: the publication fork was consumed.
    Normal,
    /// A run without its two boundaries (partial, never launched, or a failed boundary)
    /// drained under the bounded stream discharge.
    Discharged,
}

/// The outcome of [`LaunchStaging::finish_run`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retired {
    /// The retired run.
    pub run: RunId,
    /// Which path proved the streams drained.
    pub path: RetirePath,
    /// The first error the run's streams reported up to its completion boundaries (a failed
    /// kernel or copy), if any.
    pub run_error: Option<BackendError>,
    /// `run_error` was already on the streams when the run was queued behind its predecessor:
    /// a run ahead of it failed, and this run's results cannot be trusted either.
    pub inherited: bool,
    /// The run's device-clock span (start event to the later completion boundary, device
    /// cycles), for a run retired on its boundaries.
    pub span_cycles: Option<(u64, u64)>,
}

/// Scheduler diagnostics of a run whose publication succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerDiagnostics {
    /// The run the diagnostics belong to.
    pub run: RunId,
    /// Metadata regions that run published.
    pub metadata_regions: usize,
    /// Metadata bytes that run published.
    pub metadata_bytes: u64,
}

/// Cumulative counters of one slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagingStats {
    /// Publications that reached `Published`.
    pub publishes: u64,
    /// Bytes enqueued for copy by all publications.
    pub bytes_copied: u64,
    /// Descriptor copies enqueued.
    pub descriptor_copies: u64,
    /// Metadata copies enqueued.
    pub metadata_copies: u64,
    /// Publications that found the identical prefix resident and copied no descriptor.
    pub unchanged_prefixes: u64,
    /// Entry forks queued.
    pub forks: u64,
    /// Publications ordered behind the completion boundaries of a run that had not retired
    /// (a queued launch: one wait per stream).
    pub predecessor_waits: u64,
    /// Pinned-source growths.
    pub growths: u64,
    /// Per-run suffixes uploaded (synchronously, at prepare).
    pub suffix_uploads: u64,
    /// Bytes of those suffixes (not stream copies: not in `bytes_copied`).
    pub suffix_bytes: u64,
}

/// The AICore entry of device `D`: gets the AICore projection of the launch payload by value.
pub type AicoreEntry<D> = EntryOf<D, AicoreLaunchArgs>;
/// The AICPU entry of device `D`: gets the front-less [`KernelArgs`] by value.
pub type AicpuExecFn<D> = EntryOf<D, KernelArgs>;

/// The two entries a launch submits: AICore first, then AICPU.
pub struct EntryKernels<D: BackendDevice> {
    /// Kernel name of the AICore entry.
    pub aicore_name: String,
    /// The AICore entry.
    pub aicore: AicoreEntry<D>,
    /// Kernel name of the AICPU entry.
    pub aicpu_name: String,
    /// The AICPU entry.
    pub aicpu: AicpuExecFn<D>,
}

impl<D: BackendDevice> EntryKernels<D> {
    /// Entries named `aicore_entry` / `aicpu_exec`, as the backend carries them.
    pub fn from_entries(aicore: AicoreEntry<D>, aicpu: AicpuExecFn<D>) -> Self {
        Self { aicore_name: "aicore_entry".into(), aicore, aicpu_name: "aicpu_exec".into(), aicpu }
    }
}

impl<D> EntryKernels<D>
where
    D: BackendDevice,
    D::Stream: BackendStream<
        Entry<AicoreLaunchArgs> = HostEntry<D, AicoreLaunchArgs>,
        Entry<KernelArgs> = HostEntry<D, KernelArgs>,
    >,
{
    /// Entries that do nothing (for benches and tests of the transaction alone).
    pub fn noop() -> Self {
        Self::new(|_, _| Ok(()), |_, _| Ok(()))
    }

    /// Entries named `aicore_entry` / `aicpu_exec` with the given bodies, for a backend whose
    /// device code runs on host threads ([`HostEntry`]).
    pub fn new(
        aicore: impl FnOnce(&D, AicoreLaunchArgs) -> Result<(), String> + Send + 'static,
        aicpu: impl FnOnce(&D, KernelArgs) -> Result<(), String> + Send + 'static,
    ) -> Self {
        Self::from_entries(Box::new(aicore), Box::new(aicpu))
    }
}

impl<D: BackendDevice> std::fmt::Debug for EntryKernels<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryKernels")
            .field("aicore_name", &self.aicore_name)
            .field("aicpu_name", &self.aicpu_name)
            .finish_non_exhaustive()
    }
}
