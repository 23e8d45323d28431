//! The one place this crate takes its synchronisation primitives from.
//!
//! Under `cfg(ferry_loom)` everything maps to [loom](https://docs.rs/loom) so the model tests in
//! `tests/loom_*.rs` explore every interleaving; otherwise it maps to `std` and `crossbeam-utils`.
//! The [`Parker`]/[`Unparker`] pair has crossbeam's token semantics in both builds: an `unpark`
//! that happens before `park` makes that `park` return at once, so a "check, then park" loop
//! never loses a wake-up.

#[cfg(not(ferry_loom))]
pub(crate) use std::sync::Arc;

#[cfg(ferry_loom)]
pub(crate) use loom::sync::Arc;

/// Atomics (std or loom).
pub(crate) mod atomic {
    #[cfg(ferry_loom)]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
    pub(crate) use std::sync::atomic::Ordering;
    #[cfg(not(ferry_loom))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
}

/// `UnsafeCell` with loom's closure API in both builds.
#[cfg(not(ferry_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(ferry_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(v: T) -> Self {
        Self(std::cell::UnsafeCell::new(v))
    }

    /// Runs `f` with a mutable pointer to the contents.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a shared pointer to the contents.
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(ferry_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// A bounded spin-then-yield backoff for every wait of this crate's threads (host engine threads
/// between sweeps, a device writer at a gate): crossbeam's `Backoff` steps, except that the spin
/// steps are left out on machines with fewer than [`SPARE_CPUS`] CPUs, and that no step yields
/// while `ferry_wait`'s gate is closed (another process holds the CPU: a yield would hand it a
/// scheduler slice; the step returns at once and the caller soon parks or sleeps instead).
///
/// There a waiter's spin is CPU time taken from the thread it waits for (on the simulated chip,
/// two dozen device threads share two CPUs with the host engine): each step then yields at once.
/// Under `cfg(ferry_loom)` every step is a loom yield, so the model scheduler runs the thread that
/// makes progress.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    step: core::cell::Cell<u32>,
}

/// Spin steps (`2^k` pauses each) before yielding, where CPUs are to spare (crossbeam's).
#[cfg(not(ferry_loom))]
const SPIN_LIMIT: u32 = 6;
/// Steps after which [`Backoff::is_completed`] says to block instead (crossbeam's).
const YIELD_LIMIT: u32 = 10;
/// CPUs from which spinning is worth it.
#[cfg(not(ferry_loom))]
pub(crate) const SPARE_CPUS: usize = 8;

/// Spin steps of this process's backoffs ([`spin_limit_for`] its CPUs). Read once.
#[cfg(not(ferry_loom))]
fn spin_limit() -> Option<u32> {
    static LIMIT: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *LIMIT
        .get_or_init(|| spin_limit_for(std::thread::available_parallelism().ok().map(|n| n.get())))
}

/// Spin steps of a backoff on a machine with `cpus` CPUs (`None`: unknown): [`SPIN_LIMIT`] from
/// [`SPARE_CPUS`] on, else none (every step yields).
#[cfg(not(ferry_loom))]
fn spin_limit_for(cpus: Option<usize>) -> Option<u32> {
    match cpus {
        Some(n) if n >= SPARE_CPUS => Some(SPIN_LIMIT),
        _ => None,
    }
}

impl Backoff {
    /// A fresh backoff.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Starts over (work was found).
    pub(crate) fn reset(&self) {
        self.step.set(0);
    }

    /// One step: spin `2^step` pauses while under the spin limit, else yield the CPU.
    #[inline]
    pub(crate) fn snooze(&self) {
        let step = self.step.get();
        #[cfg(not(ferry_loom))]
        match spin_limit() {
            Some(limit) if step <= limit => {
                for _ in 0..1u32 << step {
                    core::hint::spin_loop();
                }
            }
            _ => {
                if ferry_wait::may_yield() {
                    ferry_wait::yield_measured();
                }
            }
        }
        #[cfg(ferry_loom)]
        loom::thread::yield_now();
        if step <= YIELD_LIMIT {
            self.step.set(step + 1);
        }
    }

    /// Whether the backoff is spent: the caller should park or sleep instead.
    pub(crate) fn is_completed(&self) -> bool {
        self.step.get() > YIELD_LIMIT
    }
}

#[cfg(not(ferry_loom))]
pub(crate) use crossbeam_utils::sync::{Parker, Unparker};

#[cfg(ferry_loom)]
pub(crate) use self::loom_parker::{Parker, Unparker};

#[cfg(ferry_loom)]
mod loom_parker {
    use loom::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;

    #[derive(Debug, Default)]
    struct Inner {
        token: Mutex<bool>,
        cv: Condvar,
    }

    /// A loom-modelled parker with a wake-up token.
    #[derive(Debug, Default)]
    pub(crate) struct Parker {
        inner: Arc<Inner>,
        unparker: Unparker,
    }

    /// The waking half of [`Parker`].
    #[derive(Clone, Debug, Default)]
    pub(crate) struct Unparker {
        inner: Arc<Inner>,
    }

    impl Parker {
        pub(crate) fn new() -> Self {
            let inner = Arc::new(Inner::default());
            Self { unparker: Unparker { inner: inner.clone() }, inner }
        }

        // Used by the loom models only; the transport parks with a timeout.
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) fn park(&self) {
            let mut t = self.inner.token.lock().unwrap();
            while !*t {
                t = self.inner.cv.wait(t).unwrap();
            }
            *t = false;
        }

        /// Loom has no time: a timed park consumes a pending token or yields once.
        pub(crate) fn park_timeout(&self, _d: Duration) {
            let mut t = self.inner.token.lock().unwrap();
            if *t {
                *t = false;
            } else {
                drop(t);
                loom::thread::yield_now();
            }
        }

        pub(crate) fn unparker(&self) -> &Unparker {
            &self.unparker
        }
    }

    impl Unparker {
        pub(crate) fn unpark(&self) {
            *self.inner.token.lock().unwrap() = true;
            self.inner.cv.notify_one();
        }
    }
}

/// A capped nap of a device thread inside a gate wait (it has nobody to wake it: hardware AICPU
/// threads cannot be woken by the host either).
#[inline]
pub(crate) fn device_nap(d: std::time::Duration) {
    #[cfg(not(ferry_loom))]
    std::thread::park_timeout(d);
    #[cfg(ferry_loom)]
    {
        let _ = d;
        loom::thread::yield_now();
    }
}

#[cfg(all(test, not(ferry_loom)))]
mod tests {
    use super::*;

    #[test]
    fn backoffs_spin_only_where_cpus_are_to_spare_and_end_after_the_same_steps() {
        let _bound = ferry_watchdog::bound("the other thread's wake-up");
        for cpus in [None, Some(1), Some(2), Some(SPARE_CPUS - 1)] {
            assert_eq!(spin_limit_for(cpus), None, "{cpus:?}");
        }
        for cpus in [SPARE_CPUS, 64] {
            assert_eq!(spin_limit_for(Some(cpus)), Some(SPIN_LIMIT), "{cpus}");
        }
        // Whatever the machine, a backoff is spent after crossbeam's number of steps, and a
        // reset starts it over.
        let b = Backoff::new();
        for _ in 0..=YIELD_LIMIT {
            assert!(!b.is_completed());
            b.snooze();
        }
        assert!(b.is_completed());
        b.reset();
        assert!(!b.is_completed());
    }
}
