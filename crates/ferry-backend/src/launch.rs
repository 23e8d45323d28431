//! What the launch path needs of a device beyond memory and copies: events, pinned host
//! memory, and entries launched with an argument block.
use crate::{BackendDevice, BackendError, BackendStream};

/// A marker in a stream's work ([`BackendStream::record_event`]). Cheap to clone; clones
/// name the same event. The default value is a never-recorded event (complete, no timestamp,
/// no error), as `cudaEventCreate` gives one.
pub trait BackendEvent: Clone + Default + std::fmt::Debug + Send + Sync + 'static {
    /// Whether the latest record has completed (true for a never-recorded event), as
    /// `cudaEventQuery`.
    fn query(&self) -> bool;

    /// The device timestamp of the latest completed record, in the device clock's cycles (the
    /// host backend: nanoseconds of the host's monotonic clock); `None` before a record
    /// completed.
    fn timestamp_cycles(&self) -> Option<u64>;

    /// The failure the event's stream held when the latest completed record ran: the first
    /// error of a copy or kernel enqueued before the record that no synchronize had reported
    /// yet ([`BackendOp::Execute`](crate::BackendOp::Execute), the failure its source). Two
    /// records after the same failure report equal errors.
    fn error(&self) -> Option<BackendError>;
}

/// Page-locked host memory that a device's copies read from or write to asynchronously
/// (`cudaHostAlloc`). Zeroed when allocated.
pub trait PinnedHostBuffer: std::fmt::Debug + Send + Sync + Sized + 'static {
    /// Length in bytes.
    fn len(&self) -> usize;

    /// Whether the buffer is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// First byte, for enqueueing copies.
    fn as_ptr(&self) -> *const u8;

    /// The bytes, writable.
    ///
    /// # Safety
    /// No asynchronous copy that reads or writes these bytes is in flight while the slice
    /// lives.
    unsafe fn as_mut_slice(&mut self) -> &mut [u8];

    /// Frees the buffer.
    ///
    /// # Errors
    /// [`BackendOp::PinnedFree`](crate::BackendOp::PinnedFree): the buffer comes back in the
    /// error, still allocated and owned, for a retry.
    fn free(self) -> Result<(), PinnedFreeError<Self>>;

    /// Keeps the memory allocated for the rest of the process (a DMA reader may still use it)
    /// and returns its address.
    fn leak(self) -> *const u8;
}

/// A failed [`PinnedHostBuffer::free`]: the buffer comes back, still allocated and owned.
#[derive(Debug)]
pub struct PinnedFreeError<P> {
    /// The buffer that was not freed.
    pub buffer: P,
    /// Why.
    pub error: BackendError,
}

/// An entry whose body runs on the host threads of a backend that carries its device code
/// as host code (the simulated chip, the host-memory backend): it gets the device it runs on
/// and its argument block by value, and reports a failure as text, which becomes the stream's
/// sticky error.
pub type HostEntry<D, A> = Box<dyn FnOnce(&D, A) -> Result<(), String> + Send>;

/// The event type of device `D`'s streams.
pub type EventOf<D> = <<D as BackendDevice>::Stream as BackendStream>::Event;

/// The pinned host buffer type of device `D`.
pub type PinnedOf<D> = <D as BackendDevice>::Pinned;

/// An entry of device `D`'s streams taking argument block `A`.
pub type EntryOf<D, A> = <<D as BackendDevice>::Stream as BackendStream>::Entry<A>;
