//! ferry-backend: the seam between ferry's host libraries and a device backend.
//!
//! The copy engine (`ferry-copy`) and the launch transaction (`ferry-launch`) program against
//! the traits here, never against a concrete chip: [`Backend`] (the devices of one process and
//! host-memory registration), [`BackendDevice`] (device memory, streams, pinned host memory,
//! queue counts), [`BackendStream`] (ordered copies, the gather kernel, entries launched with
//! an argument block, events, synchronisation), [`BackendEvent`] (a marker in a stream's
//! work), [`PinnedHostBuffer`] (page-locked host memory), [`HostMapping`] (host memory a
//! device reaches through an alias), [`CopyGroup`] (copies that hold their copy engines
//! together) and [`ProgramDevice`] (making device programs resident and calling their
//! entries, for the loader), and what the runner needs of user libraries beyond loading them
//! ([`CustomKernelTable`], [`OrchLibraryLoader`] and [`HostOrchLibrary`]) and of the AICore
//! cores (their register windows, [`CoreRegisters`], and starting the runtime's executor on
//! them, [`AicoreLauncher`] and [`CoreLaunch`]), and what a host-side collector needs of a
//! device: memory the host maps ([`MappedMemory`]), the device's cycle counter
//! ([`DeviceCounter`], [`CycleCounter`]) and its host notification ([`HostBells`]). ferry's simulated chip (`ferry-sim`)
//! implements them as the reference backend; [`host`] is a second, minimal one over plain host
//! memory with no device programs, which the seam's tests run the copy engine, the launch
//! transaction and the loader on. [`bulk_copy`] is the streaming copy both ferry's host copies
//! and the simulated chip's gather kernel write large ranges with. docs/architecture.md lists, trait by trait, what a hardware
//! backend implements.
//!
//! The engines are generic over the backend (`HbmCopyEngine<B: Backend>`, `LaunchStaging<D:
//! BackendDevice>`), so every call through the seam is monomorphic and inlines like a call to
//! the concrete type; no trait object sits on the copy or launch path.
//!
//! Errors are one type, [`BackendError`]: the operation that failed ([`BackendOp`]) and the
//! backend's own typed error as its source, so a caller matches the operation and, when it
//! knows the backend, downcasts the cause ([`BackendError::source_as`]).
//!
//! # Example
//! ```
//! use ferry_backend::host::HostMemoryBackend;
//! use ferry_backend::{Backend, BackendDevice, BackendStream, CopyKind, Segment};
//!
//! let backend = HostMemoryBackend::new(1, 1 << 20)?;
//! let dev = backend.device(0)?;
//! let buf = dev.malloc(8)?;
//! let src = *b"ferry!!!";
//! let mut back = [0u8; 8];
//! let s = dev.null_stream()?;
//! // SAFETY: `src` and `back` live until the blocking copies return and nothing else touches
//! // them.
//! unsafe {
//!     s.copy_segments_blocking(CopyKind::Htod, &[Segment { src: src.as_ptr() as u64, dst: buf.0, len: 8 }])?;
//!     s.copy_segments_blocking(CopyKind::Dtoh, &[Segment { src: buf.0, dst: back.as_mut_ptr() as u64, len: 8 }])?;
//! }
//! assert_eq!(&back, b"ferry!!!");
//! dev.free(buf)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(
    clippy::undocumented_unsafe_blocks,
    clippy::unnecessary_safety_comment,
    clippy::missing_safety_doc
)]

pub mod bulk_copy;
mod cores;
mod error;
pub mod host;
mod launch;
mod libraries;
mod mapped;
mod program;

pub use cores::{AicoreLauncher, CoreLaunch, CoreRegisters};
pub use error::{BackendError, BackendOp};
pub use launch::{
    BackendEvent, EntryOf, EventOf, HostEntry, PinnedFreeError, PinnedHostBuffer, PinnedOf,
};
pub use libraries::{CustomKernelTable, HostOrchLibrary, OrchLibraryLoader};
pub use mapped::{CycleCounter, DeviceCounter, HostBell, HostBells, MappedMemory};
pub use program::{Preinstalled, ProgramDevice, ProgramError, ProgramLaunch, ProgramSymbol};
use std::sync::Arc;
use std::time::Duration;

/// An address in some device's address space (device memory or a host alias). Never
/// dereferenced on the host without the backend's translation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The null device address.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// The raw address.
    pub const fn addr(self) -> u64 {
        self.0
    }

    /// This address plus `off` bytes.
    ///
    /// # Panics
    /// On address overflow (a programming error: device ranges are far from `u64::MAX`).
    #[track_caller]
    pub const fn add(self, off: u64) -> DevicePtr {
        match self.0.checked_add(off) {
            Some(a) => DevicePtr(a),
            None => panic!("device address overflow"),
        }
    }

    /// Whether this is the null address.
    pub const fn is_null(self) -> bool {
        self.0 == 0
    }
}

impl std::fmt::Debug for DevicePtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DevicePtr({:#x})", self.0)
    }
}

impl std::fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Direction of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CopyKind {
    /// Host to device.
    Htod,
    /// Device to host.
    Dtoh,
    /// Device to device.
    Dtod,
}

/// One segment of a blocking multi-segment copy: source, destination (host addresses for the
/// host side, device addresses for the device side) and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Source address.
    pub src: u64,
    /// Destination address.
    pub dst: u64,
    /// Bytes.
    pub len: u64,
}

/// One fragment of a gather, as the device's gather kernel reads it from device memory.
///
/// # Layout
/// `#[repr(C)]`, 24 bytes, align 8: `src` at 0, `dst` at 8, `bytes` at 16. Both addresses are
/// device-side (device memory, or a host alias of the device that runs the kernel).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatherFragment {
    /// Device-side source address.
    pub src: u64,
    /// Device-side destination address.
    pub dst: u64,
    /// Bytes to copy.
    pub bytes: u64,
}

/// Size of one [`GatherFragment`] on the device.
pub const FRAGMENT_BYTES: usize = std::mem::size_of::<GatherFragment>();
const _: () = assert!(FRAGMENT_BYTES == 24 && std::mem::align_of::<GatherFragment>() == 8);
const _: () = assert!(std::mem::offset_of!(GatherFragment, bytes) == 16);

/// Name the gather kernel is launched under (its code object loads on the first launch per
/// device).
pub const GATHER_KERNEL: &str = "ferry_device_gather";

/// Hardware queues a device holds, for reports (a backend without such queues reports zeros).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Compute queues created.
    pub compute_queues: u64,
    /// Copy-engine (SDMA) queues created.
    pub sdma_queues: u64,
    /// Device memory the queues hold.
    pub queue_memory_bytes: u64,
}

/// The devices of one process: what a backend is. Cloning gives another handle to the same
/// devices.
pub trait Backend: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// One device.
    type Device: BackendDevice;
    /// A host range registered with every device.
    type HostRegistration: HostMapping;

    /// Devices, ordinals `0..device_count()`.
    fn device_count(&self) -> u32;

    /// Device `ordinal`.
    ///
    /// # Errors
    /// [`BackendOp::Device`] when no such device exists.
    fn device(&self, ordinal: u32) -> Result<&Self::Device, BackendError>;

    /// The calling thread's current device.
    fn current_ordinal(&self) -> u32;

    /// Makes `ordinal` the calling thread's current device.
    ///
    /// # Errors
    /// [`BackendOp::Device`] when no such device exists.
    fn set_current_device(&self, ordinal: u32) -> Result<(), BackendError>;

    /// Registers `[ptr, ptr + len)` with every device; each reaches it through its own alias
    /// ([`HostMapping::alias`]) until the registration is dropped.
    ///
    /// # Errors
    /// [`BackendOp::RegisterHost`]: a null or empty range, or one overlapping a registration.
    ///
    /// # Safety
    /// The range stays valid for reads and writes until the registration is dropped, and while
    /// a device copy or kernel uses it the host does not access the bytes the device writes.
    unsafe fn register_host(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<Self::HostRegistration, BackendError>;
}

/// Host memory registered with every device of a backend.
pub trait HostMapping: std::fmt::Debug + Send + Sync {
    /// The alias through which device `ordinal` reaches `[ptr, ptr + len)`, when the
    /// registration covers that range.
    fn alias(&self, ordinal: u32, ptr: *const u8, len: usize) -> Option<DevicePtr>;
}

/// One device: its memory and its streams.
pub trait BackendDevice: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The device's streams.
    type Stream: BackendStream;
    /// Pinned host memory of this device.
    type Pinned: PinnedHostBuffer;

    /// This device's ordinal.
    fn ordinal(&self) -> u32;

    /// Allocates `bytes` of device memory.
    ///
    /// # Errors
    /// [`BackendOp::Malloc`]: out of memory, or a zero size.
    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError>;

    /// Frees an allocation.
    ///
    /// # Errors
    /// [`BackendOp::Free`]: `ptr` is not the start of a live allocation.
    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError>;

    /// Whether `[ptr, ptr + len)` lies inside one live allocation of this device.
    fn is_allocated(&self, ptr: DevicePtr, len: u64) -> bool;

    /// A new stream: work on it runs in enqueue order.
    ///
    /// # Errors
    /// [`BackendOp::CreateStream`].
    fn create_stream(&self) -> Result<Self::Stream, BackendError>;

    /// The device's null stream, which blocking copies use.
    ///
    /// # Errors
    /// [`BackendOp::CreateStream`] when it cannot be created.
    fn null_stream(&self) -> Result<&Self::Stream, BackendError>;

    /// Copy engines (each copy holds one while it moves bytes).
    fn copy_engine_count(&self) -> usize;

    /// Hardware queues the device has created so far.
    fn queue_counts(&self) -> QueueCounts;

    /// Allocates `len` bytes of zeroed pinned host memory (`cudaHostAlloc`).
    ///
    /// # Errors
    /// [`BackendOp::PinnedAlloc`].
    fn alloc_pinned(&self, len: usize) -> Result<Self::Pinned, BackendError>;

    /// Blocks the host until `event`'s latest record (at the time of the call) completes, or
    /// `timeout` passes (`cudaEventSynchronize` raced against a host timer).
    ///
    /// # Errors
    /// [`BackendOp::Wait`]: the wait ran out or failed; nothing is proven.
    fn synchronize_event(
        &self,
        event: &EventOf<Self>,
        timeout: Option<Duration>,
    ) -> Result<(), BackendError>;

    /// Writes `bytes` to device memory at `dst` and waits for them to land (a blocking copy on
    /// the null stream).
    ///
    /// # Errors
    /// [`BackendOp::Copy`] (a bad device range, a failed copy), or reaching the null stream.
    fn copy_htod(&self, bytes: &[u8], dst: DevicePtr) -> Result<(), BackendError> {
        let seg = Segment { src: bytes.as_ptr() as u64, dst: dst.0, len: bytes.len() as u64 };
        // SAFETY: `bytes` is borrowed for the whole call, which returns after the copy; the
        // shared borrow keeps writers away.
        unsafe { self.null_stream()?.copy_segments_blocking(CopyKind::Htod, &[seg]) }
    }

    /// Reads `out.len()` bytes of device memory at `src` (a blocking copy on the null stream).
    ///
    /// # Errors
    /// [`BackendOp::Copy`] (a bad device range, a failed copy), or reaching the null stream.
    fn copy_dtoh(&self, src: DevicePtr, out: &mut [u8]) -> Result<(), BackendError> {
        let seg = Segment { src: src.0, dst: out.as_mut_ptr() as u64, len: out.len() as u64 };
        // SAFETY: `out` is borrowed mutably for the whole call, which returns after the copy.
        unsafe { self.null_stream()?.copy_segments_blocking(CopyKind::Dtoh, &[seg]) }
    }
}

/// An ordered queue of device work. A failure of enqueued work is sticky: the stream's next
/// [`synchronize`](Self::synchronize) reports it.
pub trait BackendStream: std::fmt::Debug + Send + Sync + 'static {
    /// Copies that hold their copy engines at the same time.
    type CopyGroup: CopyGroup;
    /// Markers in the stream's work.
    type Event: BackendEvent;
    /// Device code launched with an argument block of type `A`
    /// ([`launch_entry`](Self::launch_entry)): a function of a loaded program on hardware, a
    /// [`HostEntry`] where device code runs on host threads.
    type Entry<A: Send + 'static>: Send + 'static;

    /// An id unique among the streams of the process.
    fn id(&self) -> u64;

    /// Records `event` at the current end of the stream (`cudaEventRecord`).
    ///
    /// # Errors
    /// [`BackendOp::RecordEvent`] (the event is unchanged).
    fn record_event(&self, event: &Self::Event) -> Result<(), BackendError>;

    /// Makes later work on the stream wait until `event`'s latest record (at the time of the
    /// call) completes (`cudaStreamWaitEvent`). Waiting for a never-recorded event is a no-op.
    ///
    /// # Errors
    /// [`BackendOp::WaitEvent`].
    fn wait_event(&self, event: &Self::Event) -> Result<(), BackendError>;

    /// Enqueues `entry` under kernel name `name`, its argument block `args` passed by value
    /// (the vendor runtime's launch with an args blob). A failure while it runs is the
    /// stream's sticky error.
    ///
    /// # Errors
    /// [`BackendOp::Launch`] when the launch is refused (nothing is enqueued).
    fn launch_entry<A: Send + 'static>(
        &self,
        name: &str,
        entry: Self::Entry<A>,
        args: A,
    ) -> Result<(), BackendError>;

    /// As [`synchronize`](Self::synchronize), giving up after `timeout`.
    ///
    /// # Errors
    /// [`BackendOp::Synchronize`]: the stream's work failed; the stream is idle and the
    /// error handed out (the source is what failed). [`BackendOp::Wait`]: the wait ran out or
    /// failed itself; nothing about the stream is proven.
    fn synchronize_timeout(&self, timeout: Duration) -> Result<(), BackendError>;

    /// Enqueues a copy of `bytes` host bytes at `src` to device address `dst`.
    ///
    /// # Errors
    /// [`BackendOp::Copy`] when the copy cannot be enqueued (a bad device range, a fault).
    ///
    /// # Safety
    /// `src` is valid for `bytes` reads until the copy completes (the stream is synchronized),
    /// and nothing writes those bytes meanwhile.
    unsafe fn copy_htod_async(
        &self,
        src: *const u8,
        dst: DevicePtr,
        bytes: u64,
    ) -> Result<(), BackendError>;

    /// As [`copy_htod_async`](Self::copy_htod_async), the copy joining `group`: after moving
    /// its bytes it keeps its copy engine until every party of the group has arrived.
    ///
    /// # Errors
    /// As [`copy_htod_async`](Self::copy_htod_async); the caller then withdraws from `group`.
    ///
    /// # Safety
    /// As [`copy_htod_async`](Self::copy_htod_async).
    unsafe fn copy_htod_async_grouped(
        &self,
        src: *const u8,
        dst: DevicePtr,
        bytes: u64,
        group: &Arc<Self::CopyGroup>,
    ) -> Result<(), BackendError>;

    /// Enqueues a copy of `bytes` device bytes at `src` to host memory at `dst`.
    ///
    /// # Errors
    /// [`BackendOp::Copy`].
    ///
    /// # Safety
    /// `dst` is valid for `bytes` writes until the copy completes, and nothing else accesses
    /// those bytes meanwhile.
    unsafe fn copy_dtoh_async(
        &self,
        src: DevicePtr,
        dst: *mut u8,
        bytes: u64,
    ) -> Result<(), BackendError>;

    /// Copies every segment and waits for them: the result is these copies' alone (an
    /// earlier failure on the stream is not reported here, nor this one later).
    ///
    /// # Errors
    /// [`BackendOp::Copy`]: a device side outside a live allocation, or a failed copy.
    ///
    /// # Safety
    /// Every host side is valid for its segment (reads for the source, writes for the
    /// destination) until the call returns, and nothing else accesses those bytes meanwhile.
    unsafe fn copy_segments_blocking(
        &self,
        kind: CopyKind,
        segments: &[Segment],
    ) -> Result<(), BackendError>;

    /// Enqueues the gather kernel ([`GATHER_KERNEL`]): it reads `count` [`GatherFragment`]s
    /// at `descriptors` from device memory and copies each through device-side addresses.
    /// `count == 0` is an empty gather that loads the kernel's code object and copies nothing.
    /// With `counted` false the launch is not counted as one (warm-ups).
    ///
    /// # Errors
    /// [`BackendOp::Launch`] when the launch is refused. A fragment the kernel cannot reach
    /// fails the kernel: [`synchronize`](Self::synchronize) reports it.
    fn launch_gather(
        &self,
        descriptors: DevicePtr,
        count: usize,
        counted: bool,
    ) -> Result<(), BackendError>;

    /// Waits for every enqueued operation and reports (and clears) the stream's sticky error.
    ///
    /// # Errors
    /// [`BackendOp::Synchronize`], with the failed operation's error as its source.
    fn synchronize(&self) -> Result<(), BackendError>;

    /// Waits for the enqueued work and drops its sticky error, so the next operation starts
    /// clean.
    fn quiesce(&self);
}

/// Copies that hold their copy engines together (so a warm-up of `n` streams takes `n`
/// distinct engines). A party whose copy will not arrive withdraws.
pub trait CopyGroup: std::fmt::Debug + Send + Sync + 'static {
    /// A group of `parties` copies.
    fn with_parties(parties: usize) -> Self;

    /// One party will not arrive.
    fn withdraw(&self);
}
