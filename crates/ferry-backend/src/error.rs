//! [`BackendError`]: the operation that failed, with the backend's own error as its source.
use std::error::Error;

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
#[derive(Debug)]
pub struct BackendError {
    op: BackendOp,
    source: Box<dyn Error + Send + Sync + 'static>,
}

impl BackendError {
    /// `op` failed because of `source`.
    pub fn new(op: BackendOp, source: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        Self { op, source: source.into() }
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
