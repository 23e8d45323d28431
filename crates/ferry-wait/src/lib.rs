//! How ferry's threads wait when other processes compete for the CPU: one process-wide
//! [`YieldGate`] that says whether a wait may hand its CPU away with `sched_yield`.
//!
//! The simulated chip and the DFX engine run two to three dozen threads that hand work to each
//! other. On a small machine the thread a waiter waits for is usually runnable but not running,
//! and a yield lets it run for the price of a system call, far cheaper than a futex sleep and
//! wake-up (on a virtual machine, an inter-processor interrupt). Beside a CPU-bound process of
//! equal priority the same yield hands that process a whole scheduler slice (and the kernel
//! moves the yielder's deadline back), so a run of tens of thousands of hand-offs slows
//! thirtyfold. A woken sleeper is treated the other way round: the kernel lets it preempt a
//! thread that has used more than its share.
//!
//! So every wait of ferry that would yield asks the gate first. A yield that kept its thread off
//! the CPU for [`CONTENDED_YIELD`] or longer (another process held it) closes the gate for
//! [`CONTENDED_HOLD`]; while it is closed no wait yields, each parks or sleeps instead. The
//! first yield after the hold probes the CPUs again. The policy is a pure function of the
//! gate's state and the clock readings it is given ([`YieldGate::may_yield_at`],
//! [`YieldGate::yielded_at`]), so it is tested with chosen readings; [`may_yield`] and
//! [`yield_measured`] apply it to [`YieldGate::global`] on the process's monotonic clock.
//!
//! Nothing here needs a privilege: no priorities are raised, no scheduling class changed.
//!
//! # Examples
//! ```
//! use ferry_wait::{YieldGate, CONTENDED_HOLD, CONTENDED_YIELD};
//! use std::time::Duration;
//!
//! let gate = YieldGate::new();
//! assert!(gate.may_yield_at(10));
//! // A yield that took a scheduler slice: another process holds the CPU.
//! assert!(gate.yielded_at(1_000, CONTENDED_YIELD + Duration::from_micros(800)));
//! assert!(!gate.may_yield_at(2_000));
//! assert!(gate.may_yield_at(1_000 + CONTENDED_HOLD.as_nanos() as u64));
//! ```
#![deny(missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A yield that kept its thread off the CPU at least this long closes the [`YieldGate`]. ferry's
/// own threads run for microseconds between waits, so a yield among them returns within tens of
/// microseconds; beside a CPU-bound process it returns after that process's slice (about a
/// millisecond or more). A ferry thread that runs long (a long kernel, a large DFX copy) may
/// also close the gate: then hand-offs are rare, and parking costs nothing that matters.
pub const CONTENDED_YIELD: Duration = Duration::from_micros(200);

/// How long a closed [`YieldGate`] stays closed. While it is closed, waits park where they would
/// have yielded; each yield after it reopens probes the CPUs again, and a long one closes it for
/// another hold. Probing costs up to one scheduler slice per thread that yields, so a hold is
/// long against a slice.
pub const CONTENDED_HOLD: Duration = Duration::from_secs(1);

/// Whether this process's waits may yield the CPU: open until a yield shows that another process
/// holds the CPU, then closed for [`CONTENDED_HOLD`]. One per process ([`YieldGate::global`]);
/// the methods ending in `_at` take the clock as an argument.
#[derive(Debug, Default)]
pub struct YieldGate {
    /// Nanoseconds (on the caller's clock) until which the gate is closed; 0: never closed.
    closed_until: AtomicU64,
    /// Yields that closed (or extended) the gate so far.
    long_yields: AtomicU64,
}

impl YieldGate {
    /// A gate that is open.
    pub const fn new() -> Self {
        Self { closed_until: AtomicU64::new(0), long_yields: AtomicU64::new(0) }
    }

    /// The gate every wait of this process consults.
    pub fn global() -> &'static YieldGate {
        static GATE: YieldGate = YieldGate::new();
        &GATE
    }

    /// Whether a wait may yield at `now_ns`.
    pub fn may_yield_at(&self, now_ns: u64) -> bool {
        // Relaxed: a hint; a stale value costs one yield more or less, never a lost wake-up.
        now_ns >= self.closed_until.load(Ordering::Relaxed)
    }

    /// Records a yield that returned at `now_ns` after `took`; returns whether it closed the
    /// gate (it took [`CONTENDED_YIELD`] or longer).
    pub fn yielded_at(&self, now_ns: u64, took: Duration) -> bool {
        if took < CONTENDED_YIELD {
            return false;
        }
        let until = now_ns.saturating_add(CONTENDED_HOLD.as_nanos() as u64);
        // Relaxed: a hint (as above); fetch_max keeps the latest hold of racing closers.
        self.closed_until.fetch_max(until, Ordering::Relaxed);
        // Relaxed: a statistic.
        self.long_yields.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Yields so far that took [`CONTENDED_YIELD`] or longer (each closed or extended the
    /// gate): 0 over a run means its waits yielded as on an idle machine throughout.
    pub fn long_yields(&self) -> u64 {
        // Relaxed: a statistic.
        self.long_yields.load(Ordering::Relaxed)
    }

    /// Whether the gate has ever been closed: while it has not, [`may_yield`] needs no clock
    /// read.
    pub fn ever_closed(&self) -> bool {
        // Relaxed: a hint (as above).
        self.closed_until.load(Ordering::Relaxed) != 0
    }
}

/// Nanoseconds on this process's coarse monotonic clock, as the global gate reads them (plus one
/// so that no reading is 0). Every wait of a process whose gate has closed once reads it, so it
/// is `CLOCK_MONOTONIC_COARSE`: a read of the kernel's last tick (a few nanoseconds, where a
/// precise read costs as much as a spin step), whose resolution of a few milliseconds is fine
/// against a hold of [`CONTENDED_HOLD`].
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64) + 1
}

/// Whether a wait of this process may yield now ([`YieldGate::global`]). Costs one atomic load
/// while the gate has never closed, and a clock read after.
pub fn may_yield() -> bool {
    let gate = YieldGate::global();
    !gate.ever_closed() || gate.may_yield_at(now_ns())
}

/// Yields the CPU once and records how long that took in [`YieldGate::global`]; returns how long
/// the thread was off the CPU (`>=` [`CONTENDED_YIELD`]: the gate is now closed).
pub fn yield_measured() -> Duration {
    let t = Instant::now();
    std::thread::yield_now();
    let took = t.elapsed();
    YieldGate::global().yielded_at(now_ns(), took);
    took
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_yield_closes_the_gate_for_the_hold_and_a_short_one_does_not() {
        let gate = YieldGate::new();
        let hold = CONTENDED_HOLD.as_nanos() as u64;
        assert!(gate.may_yield_at(1), "a new gate is open");
        assert!(!gate.ever_closed());
        // Yields among ferry's own threads return quickly: the gate stays open.
        let short = CONTENDED_YIELD - Duration::from_nanos(1);
        assert!(!gate.yielded_at(1_000, short));
        assert!(gate.may_yield_at(1_000) && !gate.ever_closed());
        // A yield that another process's slice kept off the CPU closes it for the hold.
        assert!(gate.yielded_at(5_000, CONTENDED_YIELD));
        assert!(gate.ever_closed());
        assert!(!gate.may_yield_at(5_000));
        assert!(!gate.may_yield_at(5_000 + hold - 1));
        assert!(gate.may_yield_at(5_000 + hold), "it reopens after the hold");
        // A later long yield extends it; an earlier reading (a racing thread) never shortens it.
        assert!(gate.yielded_at(9_000, Duration::from_millis(4)));
        assert!(gate.yielded_at(6_000, Duration::from_millis(4)));
        assert!(!gate.may_yield_at(9_000 + hold - 1));
        assert!(gate.may_yield_at(9_000 + hold));
        assert_eq!(gate.long_yields(), 3, "every long yield is counted, the short one is not");
    }

    #[test]
    fn the_process_clock_never_reads_zero_and_never_goes_back() {
        let a = now_ns();
        let b = now_ns();
        assert!(a >= 1 && b >= a);
    }
}
