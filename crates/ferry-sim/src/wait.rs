//! Waiting without burning a core: spin briefly, then park until a [`Doorbell`] rings.
//!
//! Every wait in the simulated chip goes through [`Doorbell::wait_until`]: it first polls the
//! condition while spinning ([`spin_steps`]: a few microseconds where the host has CPUs to spare,
//! a single `pause` where it does not), then while yielding the CPU
//! ([`YIELDS`] times), then parks on a condition variable until the bell rings or the park
//! timeout passes. A writer that makes a condition true calls [`Doorbell::ring`]; when nobody is
//! parked, `ring` costs one fence and one atomic load and writes nothing shared, so it is cheap
//! enough for hot paths.
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
#[cfg(not(ferry_loom))]
use crate::sync::lock;
#[cfg(ferry_loom)]
use crate::sync::lock_loom as lock;
#[cfg(ferry_loom)]
use loom::sync::{
    atomic::{fence, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex,
};
#[cfg(not(ferry_loom))]
use std::sync::{
    atomic::{fence, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex,
};
use std::time::{Duration, Instant};

/// Longest single park: a parked waiter re-checks its condition at least this often, so a
/// condition that changes without a ring (e.g. a deadline) is still noticed. Long enough that an
/// idle waiter costs well under 0.1% of a core.
pub const MAX_PARK: Duration = Duration::from_millis(50);

/// Spinning polls of a wait before it yields, on a machine with CPUs to spare
/// ([`SPARE_CPUS`] or more): the `k`-th spins `2^k` times (`1 + 2 + … + 64` `pause`s in all, a
/// few microseconds), for the hand-offs that complete while the other side is still on a CPU.
pub const SPIN_STEPS: u32 = 7;

/// Spinning polls of a wait before it yields on a machine with fewer than [`SPARE_CPUS`] CPUs:
/// one `pause`. There the chip's two dozen threads share two or four CPUs, the side that will
/// ring is almost never running while we spin, and every spin is CPU time taken from it. On 2
/// cores (interleaved rounds of the 50,000-task storm): 7 steps 66-71 ms, 1 step 57-64 ms; with
/// all five DFX subsystems 131-141 ms vs 102-108 ms, because work added to one chip thread
/// (a DFX record, a payload copy) no longer waits behind the spins of two dozen others.
pub const SMALL_MACHINE_SPIN_STEPS: u32 = 1;

/// CPUs from which the host counts as having CPUs to spare for spinning waiters.
pub const SPARE_CPUS: usize = 8;

/// The spin budget of every wait in this process: [`spin_steps_for`] the CPUs available to it.
/// Read once.
pub fn spin_steps() -> u32 {
    #[cfg(not(ferry_loom))]
    {
        static STEPS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        *STEPS.get_or_init(|| {
            spin_steps_for(std::thread::available_parallelism().ok().map(|n| n.get()))
        })
    }
    #[cfg(ferry_loom)]
    {
        SMALL_MACHINE_SPIN_STEPS
    }
}

/// Polls of a wait that each yield the CPU first (`sched_yield`), after the spins and before it
/// parks. The chip runs two dozen threads on machines with two cores, where the thread that
/// will ring is usually runnable but not running: a yield hands it the CPU for the price of a
/// system call, where parking costs a futex sleep and wake-up and the ringer's notify. With 4
/// (crossbeam's `Backoff`, used before) `ferry bench launch`'s 200 pipelined vector runs (a2a3,
/// host-built) went at 525-618 runs/s; with 16, at 752-913 (DFX-off storm medians 123 -> 80
/// ms). A wait with nobody else runnable costs its yields' system calls (~10-20 µs) before it
/// parks.
pub const YIELDS: u32 = 16;

/// The spin budget on a machine with `cpus` CPUs (`None`: unknown): [`SPIN_STEPS`] from
/// [`SPARE_CPUS`] on, else [`SMALL_MACHINE_SPIN_STEPS`].
pub fn spin_steps_for(cpus: Option<usize>) -> u32 {
    match cpus {
        Some(n) if n >= SPARE_CPUS => SPIN_STEPS,
        _ => SMALL_MACHINE_SPIN_STEPS,
    }
}

/// A wake-up point: writers ring it after changing shared state, waiters park on it.
///
/// Ringing costs one fence and one load while nobody is parked (the common case: most waits end
/// in their spin or yield phase); only a ring that finds a parked waiter takes the lock, moves
/// the bell's epoch on and notifies. A bell rung by two dozen threads therefore shares no
/// written cache line between them. A waiter registers first, then re-checks its condition,
/// then parks only if no ring has moved the epoch since it registered.
///
/// Its sleep/ring handshake is model-checked by loom (`tests/loom_doorbell.rs`): a waiter that
/// decided to park is always woken by a ring that follows its state change.
#[derive(Debug)]
pub struct Doorbell {
    /// Rings that found a waiter registered (moved under `mutex`).
    epoch: AtomicU64,
    /// Waiters between registration and the end of their park.
    waiters: AtomicUsize,
    mutex: Mutex<()>,
    cv: Condvar,
}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

impl Doorbell {
    /// A new bell with nobody waiting.
    pub fn new() -> Self {
        Self {
            epoch: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            mutex: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Wakes every parked waiter so it re-checks its condition.
    ///
    /// Call it after the state change the waiters look for (a store to an atomic, or a mutex
    /// released, that the waiters' condition reads).
    pub fn ring(&self) {
        // SeqCst fence: Dekker pair with the fence in `park_unless`, between the caller's state
        // change (before this fence) and the load of `waiters` (after it). Either this fence
        // comes first in the single total order, and the waiter's condition check after its
        // fence sees the state change (it does not sleep), or the waiter's fence comes first
        // and the load below sees its registration (we notify). loom checks this in
        // tests/loom_doorbell.rs (it needs fences here: it does not model SeqCst accesses alone
        // as a total order).
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above.
        if self.waiters.load(Ordering::Relaxed) != 0 {
            let _g = lock(&self.mutex);
            // Release: a waiter whose registration read the epoch after this increment
            // (Acquire) sees the state change made before the ring. Under the mutex, so a
            // waiter that read the epoch before it either sees it moved when it takes the
            // mutex to park, or is already waiting on the condition variable.
            self.epoch.fetch_add(1, Ordering::Release);
            self.cv.notify_all();
        }
    }

    /// Waits until `cond()` is true; `None` timeout waits for ever. Returns the final value of
    /// `cond()`: `false` only when the timeout passed first.
    pub fn wait_until(&self, mut cond: impl FnMut() -> bool, timeout: Option<Duration>) -> bool {
        // Only a timed wait reads the clock: an untimed one (an AICore waiting for its next
        // dispatch) would pay a clock read per wait for nothing.
        let start = timeout.map(|_| Instant::now());
        let spins = spin_steps();
        let mut step = 0u32;
        loop {
            if cond() {
                return true;
            }
            let remaining = match timeout {
                Some(t) => match start.and_then(|s| t.checked_sub(s.elapsed())) {
                    Some(r) if !r.is_zero() => r,
                    _ => return cond(),
                },
                None => MAX_PARK,
            };
            if step < spins {
                for _ in 0..1u32 << step {
                    std::hint::spin_loop();
                }
                step += 1;
                continue;
            }
            if step < spins + YIELDS {
                std::thread::yield_now();
                step += 1;
                continue;
            }
            if self.park_unless(&mut cond, remaining.min(MAX_PARK)) {
                return true;
            }
        }
    }

    /// Parks until a ring or `timeout`, unless `cond()` holds once this waiter is registered
    /// (then returns `true` at once; `false` after a park: re-check the condition). A ring
    /// that follows the state change `cond` looks for, from any point before or during this
    /// call, ends the park.
    ///
    /// `cond` runs without the bell's lock held, so it may take locks of its own that a ringer
    /// holds while it rings.
    pub fn park_unless(&self, cond: &mut impl FnMut() -> bool, timeout: Duration) -> bool {
        // Relaxed: ordered by the fence below.
        self.waiters.fetch_add(1, Ordering::Relaxed);
        // SeqCst fence: Dekker pair with the fence in `ring` (see there).
        fence(Ordering::SeqCst);
        // Acquire: pairs with the Release increment in `ring`: a key that includes a ring also
        // shows the state change made before it.
        let key = self.epoch.load(Ordering::Acquire);
        let ready = cond();
        if !ready {
            let g = lock(&self.mutex);
            // Relaxed: the mutex orders it against `ring`'s increment.
            if self.epoch.load(Ordering::Relaxed) == key {
                let _ = self.cv.wait_timeout(g, timeout);
            }
        }
        // Relaxed: only `ring`'s decision to notify depends on this count, and a stale non-zero
        // value only costs one spurious notify.
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        ready
    }
}

#[cfg(all(test, not(ferry_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn waits_spin_only_where_cpus_are_to_spare() {
        assert_eq!(SMALL_MACHINE_SPIN_STEPS, 1, "one pause: no spin phase to speak of");
        for cpus in [None, Some(1), Some(2), Some(4), Some(SPARE_CPUS - 1)] {
            assert_eq!(spin_steps_for(cpus), SMALL_MACHINE_SPIN_STEPS, "{cpus:?}");
        }
        for cpus in [SPARE_CPUS, 16, 192] {
            assert_eq!(spin_steps_for(Some(cpus)), SPIN_STEPS, "{cpus}");
        }
        let here = std::thread::available_parallelism().ok().map(|n| n.get());
        assert_eq!(spin_steps(), spin_steps_for(here), "this process follows the rule");
    }

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
                // Release: pairs with the Acquire load in the waiter's condition.
                f.store(true, Ordering::Release);
                b.ring();
            });
            // Acquire: pairs with the Release store above.
            assert!(bell.wait_until(|| flag.load(Ordering::Acquire), None));
            t.join().unwrap();
        }
    }
}
