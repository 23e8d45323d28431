//! Device cycle clocks: what the gates measure their budget against.
//!
//! A gate reads [`CycleClock::now_cycles`] only after its fast-path check misses, once to start
//! its budget and then once per wait iteration. Tests use [`VirtualClock`] to make the
//! 30-second budget pass in microseconds, or to charge a fixed number of cycles per read so that
//! wait bounds can be asserted exactly, with no wall-clock assertion.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A monotonic device cycle counter (the device system counter, `PLATFORM_PROF_SYS_CNT_FREQ`).
pub trait CycleClock: Send + Sync + fmt::Debug + 'static {
    /// Current time in device cycles; never decreases.
    fn now_cycles(&self) -> u64;
}

/// The host's steady clock rescaled to a device frequency (what the simulator uses on its real
/// clock: the budget is then wall-clock time, as on hardware).
///
/// # Examples
/// ```
/// use ferry_dfx::clock::{CycleClock, SteadyClock};
/// let c = SteadyClock::new(50_000_000);
/// let a = c.now_cycles();
/// assert!(c.now_cycles() >= a);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SteadyClock {
    origin: Instant,
    hz: u64,
}

impl SteadyClock {
    /// A clock ticking at `hz`, starting at 0 now.
    pub fn new(hz: u64) -> Self {
        Self { origin: Instant::now(), hz }
    }
}

impl CycleClock for SteadyClock {
    fn now_cycles(&self) -> u64 {
        let ns = self.origin.elapsed().as_nanos();
        (ns * self.hz as u128 / 1_000_000_000) as u64
    }
}

/// A clock that moves only when told to (and optionally by a fixed step per read).
///
/// Clones share one counter, so a test keeps one handle and gives the others to writers.
///
/// # Examples
/// ```
/// use ferry_dfx::clock::{CycleClock, VirtualClock};
/// let c = VirtualClock::new();
/// c.advance(1_500_000_000); // 30 s at 50 MHz, instantly
/// assert_eq!(c.now_cycles(), 1_500_000_000);
/// let t = VirtualClock::ticking(10);
/// assert_eq!((t.now_cycles(), t.now_cycles()), (0, 10));
/// ```
#[derive(Clone, Debug, Default)]
pub struct VirtualClock {
    inner: Arc<VirtualInner>,
}

#[derive(Debug, Default)]
struct VirtualInner {
    now: AtomicU64,
    step: u64,
}

impl VirtualClock {
    /// A clock at 0 that moves only through [`VirtualClock::advance`] / [`VirtualClock::set`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock that also advances by `step` cycles on every read (a fixed cost per poll).
    pub fn ticking(step: u64) -> Self {
        Self { inner: Arc::new(VirtualInner { now: AtomicU64::new(0), step }) }
    }

    /// Moves the clock forward by `cycles`.
    pub fn advance(&self, cycles: u64) {
        // Relaxed: the counter carries no other data; gates only compare its values.
        self.inner.now.fetch_add(cycles, Ordering::Relaxed);
    }

    /// Sets the clock to `max(now, cycles)`.
    pub fn set(&self, cycles: u64) {
        // Relaxed: as in `advance`.
        self.inner.now.fetch_max(cycles, Ordering::Relaxed);
    }

    /// The current value without ticking.
    pub fn peek(&self) -> u64 {
        // Relaxed: as in `advance`.
        self.inner.now.load(Ordering::Relaxed)
    }
}

impl CycleClock for VirtualClock {
    fn now_cycles(&self) -> u64 {
        if self.inner.step == 0 {
            self.peek()
        } else {
            // Relaxed: as in `advance`.
            self.inner.now.fetch_add(self.inner.step, Ordering::Relaxed)
        }
    }
}
