//! Waiting without burning a core: spin briefly, then park until a [`Doorbell`] rings.
//!
//! Every wait in the simulated chip goes through [`Doorbell::wait_until`]: it first polls the
//! condition under [`crossbeam_utils::Backoff`] (a few microseconds), then parks on a condition
//! variable until the bell rings or the park timeout passes. A writer that makes a condition
//! true calls [`Doorbell::ring`]; when nobody is parked, `ring` costs one atomic increment and one
//! atomic load, so it is cheap enough for hot paths.
//!
//! # Examples
//! ```
//! use ferry_sim::wait::Doorbell;
//! use std::sync::{Arc, atomic::{AtomicBool, Ordering}};
//! use std::time::Duration;
//!
//! let bell = Arc::new(Doorbell::new());
//! let flag = Arc::new(AtomicBool::new(false));
//! let (b, f) = (bell.clone(), flag.clone());
//! let t = std::thread::spawn(move || {
//!     f.store(true, Ordering::Release);
//!     b.ring();
//! });
//! assert!(bell.wait_until(|| flag.load(Ordering::Acquire), Some(Duration::from_secs(10))));
//! t.join().unwrap();
//! ```
use crate::sync::{lock, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering};
use crossbeam_utils::Backoff;
use std::time::{Duration, Instant};

/// Longest single park: a parked waiter re-checks its condition at least this often, so a
/// condition that changes without a ring (e.g. a deadline) is still noticed. Long enough that an
/// idle waiter costs well under 0.1% of a core.
pub const MAX_PARK: Duration = Duration::from_millis(50);

/// An event count: writers ring it after changing shared state, waiters park on it.
#[derive(Debug, Default)]
pub struct Doorbell {
    seq: AtomicU64,
    waiters: AtomicUsize,
    mutex: Mutex<()>,
    cv: Condvar,
}

impl Doorbell {
    /// A new bell with nobody waiting.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes every parked waiter so it re-checks its condition.
    ///
    /// Call it after the state change the waiters look for.
    pub fn ring(&self) {
        // SeqCst: with the SeqCst `waiters` increment and `seq` re-load in `park`, one of the two
        // sides must see the other (Dekker): either the waiter sees the new `seq` and does not
        // sleep, or this load sees its registration and notifies. Also releases the state change
        // made before the ring to the waiter's SeqCst `seq` load.
        self.seq.fetch_add(1, Ordering::SeqCst);
        // SeqCst: second half of the Dekker pair above.
        if self.waiters.load(Ordering::SeqCst) != 0 {
            let _g = lock(&self.mutex);
            self.cv.notify_all();
        }
    }

    /// How many times the bell has rung; a cheap change detector.
    pub fn rings(&self) -> u64 {
        // Relaxed: a statistic; no data is published through this read.
        self.seq.load(Ordering::Relaxed)
    }

    /// Waits until `cond()` is true; `None` timeout waits for ever. Returns the final value of
    /// `cond()`: `false` only when the timeout passed first.
    pub fn wait_until(&self, mut cond: impl FnMut() -> bool, timeout: Option<Duration>) -> bool {
        let start = Instant::now();
        let backoff = Backoff::new();
        loop {
            // SeqCst: pairs with the SeqCst increment in `ring` (see there).
            let key = self.seq.load(Ordering::SeqCst);
            if cond() {
                return true;
            }
            let remaining = match timeout {
                Some(t) => match t.checked_sub(start.elapsed()) {
                    Some(r) if !r.is_zero() => r,
                    _ => return cond(),
                },
                None => MAX_PARK,
            };
            if !backoff.is_completed() {
                backoff.snooze();
                continue;
            }
            self.park(key, remaining.min(MAX_PARK));
        }
    }

    /// Parks until the bell rings after `key` was read, or `timeout` passes.
    pub fn park(&self, key: u64, timeout: Duration) {
        let g = lock(&self.mutex);
        // SeqCst: Dekker pair with `ring` (see there).
        self.waiters.fetch_add(1, Ordering::SeqCst);
        // SeqCst: Dekker pair with `ring`.
        if self.seq.load(Ordering::SeqCst) == key {
            let _ = self.cv.wait_timeout(g, timeout);
        } else {
            drop(g);
        }
        // Relaxed: only `ring`'s decision to notify depends on this count, and a stale non-zero
        // value only costs one spurious notify.
        self.waiters.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(ferry_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn times_out_when_nobody_rings() {
        let bell = Doorbell::new();
        assert!(!bell.wait_until(|| false, Some(Duration::from_millis(5))));
    }

    #[test]
    fn ring_wakes_a_parked_waiter() {
        for _ in 0..20 {
            let bell = Arc::new(Doorbell::new());
            let flag = Arc::new(AtomicBool::new(false));
            let (b, f) = (bell.clone(), flag.clone());
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(1));
                f.store(true, Ordering::Release);
                b.ring();
            });
            assert!(bell.wait_until(|| flag.load(Ordering::Acquire), None));
            t.join().unwrap();
            assert!(bell.rings() >= 1);
        }
    }
}
