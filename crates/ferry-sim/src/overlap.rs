//! Overlapping copies on purpose: a rendezvous that copies hold their copy engine for.
//!
//! On hardware, copies enqueued back to back on different streams overlap in time, so each takes
//! its own copy engine (the lowest free one) and creates that engine's queue. Simulated copies
//! are memcpys too short to overlap reliably, so a warm-up that must touch exactly the engines a
//! server will use (the copy-pool design's Prewarm: `n` gathers plus one null-stream copy → engines
//! `0..=n`) joins its copies at a [`CopyRendezvous`]: each copy, after moving its bytes, keeps
//! its engine until every party has arrived. Ordinary copies never wait.
//!
//! A party that will not arrive (its enqueue failed) must [`withdraw`](CopyRendezvous::withdraw);
//! as a last resort every wait ends after [`RENDEZVOUS_TIMEOUT`], so a mistake costs time, never
//! a hang. Use at most [`Device::copy_engine_count`](crate::Device::copy_engine_count) parties: a
//! party waiting for an engine cannot arrive while the others hold them all.
//!
//! # Examples
//! ```
//! use ferry_sim::{overlap::CopyRendezvous, Arch, PlatformBuilder};
//! use std::sync::Arc;
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build()?;
//! let dev = p.device(0)?;
//! let (a, b) = (dev.create_stream()?, dev.create_stream()?);
//! let buf = dev.malloc(64)?;
//! let src = [5u8; 64];
//! let meet = Arc::new(CopyRendezvous::new(2));
//! // SAFETY: `src` outlives both copies (synchronized below) and is only read.
//! unsafe {
//!     a.copy_htod_async_rendezvous(src.as_ptr(), buf, 32, &meet)?;
//!     b.copy_htod_async_rendezvous(src.as_ptr(), buf.add(32), 32, &meet)?;
//! }
//! a.synchronize()?;
//! b.synchronize()?;
//! assert_eq!(dev.copy_engine_queues(), 2, "the two copies held two engines at once");
//! # Ok::<(), ferry_sim::DeviceError>(())
//! ```
use crate::device::CopyKind;
use crate::error::DeviceError;
use crate::memory::DevicePtr;
use crate::stream::Stream;
use crate::sync::{lock, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Longest a rendezvous party waits for the others.
pub const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(5);

/// A meeting point for copies that must hold their copy engines at the same time.
#[derive(Debug)]
pub struct CopyRendezvous {
    state: Mutex<RendezvousState>,
    cv: Condvar,
}

#[derive(Debug)]
struct RendezvousState {
    arrived: usize,
    parties: usize,
}

impl CopyRendezvous {
    /// A rendezvous for `parties` copies.
    pub fn new(parties: usize) -> Self {
        Self { state: Mutex::new(RendezvousState { arrived: 0, parties }), cv: Condvar::new() }
    }

    /// One expected party will not arrive (its enqueue failed).
    pub fn withdraw(&self) {
        let mut s = lock(&self.state);
        s.parties = s.parties.saturating_sub(1);
        drop(s);
        self.cv.notify_all();
    }

    /// Whether every party has arrived.
    pub fn is_complete(&self) -> bool {
        let s = lock(&self.state);
        s.arrived >= s.parties
    }

    /// Arrives and waits for the rest; `false` when [`RENDEZVOUS_TIMEOUT`] passed first.
    pub(crate) fn arrive_and_wait(&self) -> bool {
        let deadline = Instant::now() + RENDEZVOUS_TIMEOUT;
        let mut s = lock(&self.state);
        s.arrived += 1;
        self.cv.notify_all();
        while s.arrived < s.parties {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            s = match self.cv.wait_timeout(s, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        true
    }
}

impl Stream {
    /// [`copy_htod_async`](Stream::copy_htod_async) whose copy keeps its copy engine until every
    /// party of `meet` has arrived.
    ///
    /// # Errors
    /// As [`copy_htod_async`](Stream::copy_htod_async); on an error the caller withdraws this
    /// party from `meet`.
    ///
    /// # Safety
    /// As [`copy_htod_async`](Stream::copy_htod_async):
    /// - `src` is valid for reads of `len` bytes until the copy completes;
    /// - the host does not write those bytes before then.
    pub unsafe fn copy_htod_async_rendezvous(
        &self,
        src: *const u8,
        dst: DevicePtr,
        len: u64,
        meet: &Arc<CopyRendezvous>,
    ) -> Result<(), DeviceError> {
        self.copy_with(CopyKind::Htod, src as u64, dst.0, len, Some(meet.clone()))
    }
}
