//! [`BackendError`]: the operation that failed, with the backend's own error as its source.
use std::error::Error;
use std::sync::Arc;

/// The operation of the seam that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendOp {
    /// Reaching a device (no such device, or making it current).
    Device,
    /// Registering host memory.
    RegisterHost,
    /// Allocating device memory.
    Malloc,
    /// Freeing device memory.
    Free,
    /// Creating a stream.
    CreateStream,
    /// Enqueueing or running a copy.
    Copy,
    /// Launching a kernel.
    Launch,
    /// Synchronizing a stream (the source is what failed on it).
    Synchronize,
    /// A bounded wait (a stream's or an event's) ran out, or the wait itself failed: nothing
    /// about the work waited for is proven.
    Wait,
    /// Device work enqueued on a stream (a copy or kernel) failed, as an event recorded after it
    /// reports.
    Execute,
    /// Recording an event on a stream.
    RecordEvent,
    /// Making a stream wait for an event.
    WaitEvent,
    /// Allocating pinned host memory.
    PinnedAlloc,
    /// Freeing pinned host memory.
    PinnedFree,
    /// Loading a device program: the loader's session, saving or resolving an object.
    LoadProgram,
    /// Mapping device memory for the host (a range outside every live allocation).
    MapMemory,
}

impl std::fmt::Display for BackendOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendOp::Device => "reaching the device",
            BackendOp::RegisterHost => "registering host memory",
            BackendOp::Malloc => "allocating device memory",
            BackendOp::Free => "freeing device memory",
            BackendOp::CreateStream => "creating a stream",
            BackendOp::Copy => "copying",
            BackendOp::Launch => "launching a kernel",
            BackendOp::Synchronize => "synchronizing a stream",
            BackendOp::Wait => "waiting for the device",
            BackendOp::Execute => "running device work",
            BackendOp::RecordEvent => "recording an event",
            BackendOp::WaitEvent => "ordering a stream after an event",
            BackendOp::PinnedAlloc => "allocating pinned host memory",
            BackendOp::PinnedFree => "freeing pinned host memory",
            BackendOp::LoadProgram => "loading a device program",
            BackendOp::MapMemory => "mapping device memory for the host",
        })
    }
}

/// An error of a backend operation: which operation ([`op`](Self::op)) and why (the
/// backend's own typed error, the [`source`](Error::source)). Its message names only the
/// operation; the cause chain carries the rest once.
///
/// # Examples
/// ```
/// use ferry_backend::host::{HostMemoryBackend, HostMemoryError};
/// use ferry_backend::{Backend, BackendDevice, BackendOp};
///
/// let b = HostMemoryBackend::new(1, 4096)?;
/// let e = b.device(0)?.malloc(1 << 20).unwrap_err();
/// assert_eq!(e.op(), BackendOp::Malloc);
/// assert!(matches!(e.source_as::<HostMemoryError>(), Some(HostMemoryError::OutOfMemory { .. })));
/// assert_eq!(e.to_string(), "allocating device memory");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Cloning shares the source. Two errors are equal when their operations are and their
/// sources are the same error, or errors of one type that compare equal (for sources given to
/// [`typed`](Self::typed); a source given to [`new`](Self::new) equals only itself).
#[derive(Clone)]
pub struct BackendError {
    op: BackendOp,
    source: Arc<dyn Error + Send + Sync + 'static>,
    same: SameSource,
}

/// Compares two sources (both of the type the error was built with, or unequal).
type SameSource = fn(&(dyn Error + 'static), &(dyn Error + 'static)) -> bool;

fn never_same(_: &(dyn Error + 'static), _: &(dyn Error + 'static)) -> bool {
    false
}

fn same_typed<E: Error + PartialEq + 'static>(
    a: &(dyn Error + 'static),
    b: &(dyn Error + 'static),
) -> bool {
    matches!((a.downcast_ref::<E>(), b.downcast_ref::<E>()), (Some(a), Some(b)) if a == b)
}

impl BackendError {
    /// `op` failed because of `source`.
    pub fn new(op: BackendOp, source: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        Self { op, source: Arc::from(source.into()), same: never_same }
    }

    /// `op` failed because of `source`, a backend error type that compares: two such errors
    /// are equal when their operations and sources are.
    ///
    /// # Examples
    /// ```
    /// use ferry_backend::host::HostMemoryError;
    /// use ferry_backend::{BackendError, BackendOp};
    /// let e = |op| BackendError::typed(op, HostMemoryError::Injected { op: BackendOp::Copy });
    /// assert_eq!(e(BackendOp::Copy), e(BackendOp::Copy));
    /// assert_ne!(e(BackendOp::Copy), e(BackendOp::Launch));
    /// ```
    pub fn typed<E: Error + PartialEq + Send + Sync + 'static>(op: BackendOp, source: E) -> Self {
        Self { op, source: Arc::new(source), same: same_typed::<E> }
    }

    /// The operation that failed.
    pub fn op(&self) -> BackendOp {
        self.op
    }

    /// The cause as the backend's error type `E`, when it is one.
    pub fn source_as<E: Error + 'static>(&self) -> Option<&E> {
        self.source.downcast_ref::<E>()
    }
}

impl std::fmt::Debug for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendError").field("op", &self.op).field("source", &self.source).finish()
    }
}

impl PartialEq for BackendError {
    fn eq(&self, other: &Self) -> bool {
        self.op == other.op
            && (Arc::ptr_eq(&self.source, &other.source)
                || (self.same)(&*self.source, &*other.source))
    }
}

impl Eq for BackendError {}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.op, f)
    }
}

impl Error for BackendError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}
