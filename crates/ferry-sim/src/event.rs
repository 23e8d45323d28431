//! Events: record on one stream, wait on another or on the host.
//!
//! # Examples
//! ```
//! use ferry_sim::{Arch, Event, PlatformBuilder};
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build()?;
//! let dev = p.device(0)?;
//! let (a, b) = (dev.create_stream()?, dev.create_stream()?);
//! let ev = Event::new();
//! a.record_event(&ev)?;
//! b.wait_event(&ev)?; // b's later work runs after a's earlier work
//! ev.synchronize();
//! assert!(ev.query());
//! # Ok::<(), ferry_sim::DeviceError>(())
//! ```
use crate::sync::{lock, Arc, Mutex};
use crate::wait::Doorbell;

#[derive(Debug, Default)]
struct State {
    /// Records enqueued so far.
    armed: u64,
    /// Highest record that has completed.
    completed: u64,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    bell: Doorbell,
}

/// A marker in a stream's work. Cheap to clone; clones name the same event.
#[derive(Clone, Debug, Default)]
pub struct Event(Arc<Inner>);

impl Event {
    /// A never-recorded event (waiting for it returns at once).
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn arm(&self) -> u64 {
        let mut s = lock(&self.0.state);
        s.armed += 1;
        s.armed
    }

    pub(crate) fn armed(&self) -> u64 {
        lock(&self.0.state).armed
    }

    pub(crate) fn complete(&self, gen: u64) {
        {
            let mut s = lock(&self.0.state);
            s.completed = s.completed.max(gen);
        }
        self.0.bell.ring();
    }

    fn reached(&self, gen: u64) -> bool {
        lock(&self.0.state).completed >= gen
    }

    pub(crate) fn wait_for(&self, gen: u64) {
        self.0.bell.wait_until(|| self.reached(gen), None);
    }

    /// Whether the latest record has completed (true for a never-recorded event).
    pub fn query(&self) -> bool {
        let s = lock(&self.0.state);
        s.completed >= s.armed
    }

    /// Blocks the host until the latest record (at the time of the call) completes.
    pub fn synchronize(&self) {
        self.wait_for(self.armed());
    }

    /// As [`synchronize`](Self::synchronize), giving up after `timeout`; returns whether the
    /// record completed.
    pub fn synchronize_timeout(&self, timeout: std::time::Duration) -> bool {
        let gen = self.armed();
        self.0.bell.wait_until(|| self.reached(gen), Some(timeout))
    }
}
