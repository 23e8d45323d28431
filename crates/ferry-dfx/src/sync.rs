//! The one place this crate takes its synchronisation primitives from (STYLE R34).
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

/// One step of a bounded spin: crossbeam's `Backoff::snooze` (spin, then `yield`), or a loom yield
/// so that the model scheduler runs the thread that makes progress.
#[inline]
pub(crate) fn snooze(backoff: &crossbeam_utils::Backoff) {
    #[cfg(not(ferry_loom))]
    backoff.snooze();
    #[cfg(ferry_loom)]
    {
        let _ = backoff;
        loom::thread::yield_now();
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
