//! The host-memory backend's events and pinned host memory. A record completes when its
//! stream reaches it (when it is made, where streams run their work at enqueue), stamped with
//! the host's monotonic clock and the stream's sticky error at that point.
use super::{lock, HostMemoryError, Shared};
use crate::{BackendError, BackendEvent, BackendOp, PinnedFreeError, PinnedHostBuffer};
use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Nanoseconds since the backend's clock started: the host backend's "device cycles".
pub(super) fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[derive(Debug, Default)]
struct Record {
    /// Host time of the latest completed record, once one completed.
    at: Option<u64>,
    /// The stream's sticky error when it completed.
    error: Option<HostMemoryError>,
    /// Records made (enqueued), and the latest of them that completed.
    made: u64,
    completed: u64,
}

/// An event of the host-memory backend. Cheap to clone; clones name the same event.
#[derive(Clone, Debug, Default)]
pub struct HostMemoryEvent(Arc<(Mutex<Record>, Condvar)>);

impl HostMemoryEvent {
    /// A record made on a stream: its ticket, which [`complete`](Self::complete) gets when
    /// the stream reaches it.
    pub(super) fn begin(&self) -> u64 {
        let mut r = lock(&self.0 .0);
        r.made += 1;
        r.made
    }

    /// The latest record made (0: never recorded).
    pub(super) fn recorded(&self) -> u64 {
        lock(&self.0 .0).made
    }

    /// The stream reached record `ticket`, with its sticky error then.
    pub(super) fn complete(&self, ticket: u64, error: Option<HostMemoryError>) {
        let mut r = lock(&self.0 .0);
        if ticket >= r.completed {
            (r.at, r.error, r.completed) = (Some(now_ns()), error, ticket);
        }
        self.0 .1.notify_all();
    }

    /// Waits until record `ticket` completed, or `timeout` passed (`false`).
    pub(super) fn wait_for(&self, ticket: u64, timeout: Option<Duration>) -> bool {
        let r = lock(&self.0 .0);
        let pending = |r: &mut Record| r.completed < ticket;
        match timeout {
            None => drop(self.0 .1.wait_while(r, pending).unwrap_or_else(|p| p.into_inner())),
            Some(t) => {
                let (r, _) =
                    self.0 .1.wait_timeout_while(r, t, pending).unwrap_or_else(|p| p.into_inner());
                return r.completed >= ticket;
            }
        }
        true
    }
}

impl BackendEvent for HostMemoryEvent {
    fn query(&self) -> bool {
        let r = lock(&self.0 .0);
        r.completed >= r.made
    }

    fn timestamp_cycles(&self) -> Option<u64> {
        lock(&self.0 .0).at
    }

    fn error(&self) -> Option<BackendError> {
        let e = lock(&self.0 .0).error.clone()?;
        Some(BackendError::typed(BackendOp::Execute, e))
    }
}

/// Pinned host memory of the host-memory backend: a zeroed heap allocation (all of its
/// memory is host memory).
pub struct HostMemoryPinned {
    ptr: NonNull<u8>,
    len: usize,
    shared: Arc<Shared>,
}

// SAFETY: the buffer exclusively owns its allocation; moving it moves that ownership (device
// copies that read it were promised, by the copy's caller, to finish before it is touched).
unsafe impl Send for HostMemoryPinned {}
// SAFETY: `&HostMemoryPinned` gives out only the address and length; the bytes are reached
// through `unsafe` calls whose callers exclude concurrent writers.
unsafe impl Sync for HostMemoryPinned {}

impl std::fmt::Debug for HostMemoryPinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostMemoryPinned").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

impl HostMemoryPinned {
    pub(super) fn new(len: usize, shared: Arc<Shared>) -> Self {
        let bytes: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let ptr = NonNull::new(Box::into_raw(bytes) as *mut u8).expect("a box is never null");
        Self { ptr, len, shared }
    }
}

impl PinnedHostBuffer for HostMemoryPinned {
    fn len(&self) -> usize {
        self.len
    }

    fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is a live allocation of `len` initialised bytes (from `new`); `&mut
        // self` excludes other host references and the caller excludes device readers.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    fn free(self) -> Result<(), PinnedFreeError<Self>> {
        match self.shared.check(BackendOp::PinnedFree) {
            Err(error) => Err(PinnedFreeError { buffer: self, error }),
            Ok(()) => Ok(()),
        }
    }

    fn leak(self) -> *const u8 {
        let p = self.ptr.as_ptr() as *const u8;
        std::mem::forget(self);
        p
    }
}

impl Drop for HostMemoryPinned {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: `slice` is the `Box<[u8]>` that `new` turned into a raw pointer; it is given
        // back only here (`leak` forgets the value, so it never reaches this drop).
        drop(unsafe { Box::from_raw(slice) });
    }
}
