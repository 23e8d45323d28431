//! Fault injection: make the N-th operation of a kind fail on one device.
//!
//! # Examples
//! ```
//! use ferry_sim::fault::{FaultInjector, FaultPoint};
//! let f = FaultInjector::default();
//! f.fail_nth(FaultPoint::Copy, 2);
//! assert!(f.check(FaultPoint::Copy).is_ok());
//! assert!(f.check(FaultPoint::Copy).is_err()); // the second copy fails
//! assert!(f.check(FaultPoint::Copy).is_ok());  // one-shot
//! ```
use crate::sync::{lock, AtomicU64, Mutex, Ordering};

/// Operations that can be made to fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum FaultPoint {
    /// Stream creation.
    StreamCreate,
    /// Enqueue of a copy (async or blocking).
    Copy,
    /// Enqueue of a kernel launch (device or CPU kernel).
    Launch,
    /// Stream or event synchronisation.
    Synchronize,
    /// Recording an event on a stream.
    EventRecord,
    /// Making a stream wait for an event.
    StreamWait,
    /// Allocation of pinned host memory.
    HostAlloc,
    /// Free of pinned host memory.
    HostFree,
    /// Allocation of device memory.
    DeviceAlloc,
}

impl FaultPoint {
    /// Every point.
    pub const ALL: [FaultPoint; 9] = [
        FaultPoint::StreamCreate,
        FaultPoint::Copy,
        FaultPoint::Launch,
        FaultPoint::Synchronize,
        FaultPoint::EventRecord,
        FaultPoint::StreamWait,
        FaultPoint::HostAlloc,
        FaultPoint::HostFree,
        FaultPoint::DeviceAlloc,
    ];
}

/// The error an injected fault produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("injected fault: {point:?} #{occurrence}")]
pub struct InjectedFault {
    /// Which kind of operation failed.
    pub point: FaultPoint,
    /// Its 1-based occurrence number on this device.
    pub occurrence: u64,
}

/// Per-device fault plan: counts every operation of each kind and fails the armed occurrences.
#[derive(Debug, Default)]
pub struct FaultInjector {
    seen: [AtomicU64; FaultPoint::ALL.len()],
    armed: Mutex<Vec<(FaultPoint, u64)>>,
}

impl FaultInjector {
    /// Makes the `n`-th (1-based, counted from now) next operation of kind `point` fail once.
    pub fn fail_nth(&self, point: FaultPoint, n: u64) {
        let at = self.seen(point) + n.max(1);
        lock(&self.armed).push((point, at));
    }

    /// Fails the next operation of kind `point` once.
    pub fn fail_next(&self, point: FaultPoint) {
        self.fail_nth(point, 1);
    }

    /// Disarms every pending fault.
    pub fn clear(&self) {
        lock(&self.armed).clear();
    }

    /// Faults armed and not yet injected (an armed occurrence that has not happened yet).
    pub fn armed(&self) -> usize {
        lock(&self.armed).len()
    }

    /// How many operations of kind `point` this device has seen.
    pub fn seen(&self, point: FaultPoint) -> u64 {
        // Relaxed: an occurrence count; `armed` is guarded by its mutex.
        self.seen[point as usize].load(Ordering::Relaxed)
    }

    /// Counts one operation of kind `point`.
    ///
    /// # Errors
    /// [`InjectedFault`] when this occurrence was armed.
    pub fn check(&self, point: FaultPoint) -> Result<(), InjectedFault> {
        // Relaxed: the count itself orders nothing; see `seen`.
        let occurrence = self.seen[point as usize].fetch_add(1, Ordering::Relaxed) + 1;
        let mut armed = lock(&self.armed);
        if let Some(i) = armed.iter().position(|&(p, at)| p == point && at == occurrence) {
            armed.swap_remove(i);
            tracing::debug!(?point, occurrence, "injecting fault");
            return Err(InjectedFault { point, occurrence });
        }
        Ok(())
    }
}
