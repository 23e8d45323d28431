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
    /// The device counter (cycles) when the highest completed record ran on its stream; `None`
    /// until a record completes on a stream whose device is still there.
    completed_cycles: Option<u64>,
    /// The first failure its stream had reported and not yet handed to a synchronize when the
    /// highest completed record ran (a failed copy or kernel before it on that stream).
    completed_error: Option<crate::DeviceError>,
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

    /// Completes record `gen`, stamped with the device counter `cycles` it ran at and the
    /// stream's unreported failure `error` at that point.
    pub(crate) fn complete(
        &self,
        gen: u64,
        cycles: Option<u64>,
        error: Option<crate::DeviceError>,
    ) {
        {
            let mut s = lock(&self.0.state);
            if gen >= s.completed {
                s.completed = gen;
                s.completed_cycles = cycles.or(s.completed_cycles);
                s.completed_error = error;
            }
        }
        self.0.bell.ring();
    }

    pub(crate) fn reached(&self, gen: u64) -> bool {
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

    /// The device timestamp of the latest completed record: the device's system counter (in
    /// its clock's cycles) when the record ran on its stream, as `aclrtEventGetTimestamp` or
    /// `cuEventRecord` + elapsed time give on hardware. `None` for an event that never
    /// completed a record. Read after [`synchronize`](Self::synchronize) it is the timestamp
    /// of that record; the host pairs it with its own clock read before and after to anchor
    /// host time to device time.
    ///
    /// # Examples
    /// ```
    /// use ferry_sim::{Arch, Event, PlatformBuilder};
    /// let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build()?;
    /// let dev = p.device(0)?;
    /// let ev = Event::new();
    /// assert_eq!(ev.timestamp_cycles(), None);
    /// dev.null_stream()?.record_event(&ev)?;
    /// ev.synchronize();
    /// let t0 = ev.timestamp_cycles().unwrap();
    /// dev.null_stream()?.record_event(&ev)?;
    /// ev.synchronize();
    /// assert!(ev.timestamp_cycles().unwrap() >= t0);
    /// # Ok::<(), ferry_sim::DeviceError>(())
    /// ```
    pub fn timestamp_cycles(&self) -> Option<u64> {
        let s = lock(&self.0.state);
        if s.armed == 0 {
            return None;
        }
        s.completed_cycles
    }

    /// The failure the event's stream held when the latest completed record ran: the first
    /// error of a copy or kernel enqueued before the record on that stream that no
    /// [`Stream::synchronize`](crate::Stream::synchronize) had reported yet (a stream keeps its
    /// first failure until a synchronize hands it out, as a device stream stays in error).
    /// `None` for a clean stream, or an event that never completed a record. This is how a
    /// host learns whether the work up to one point of a stream failed without waiting for
    /// the work queued after it.
    ///
    /// # Examples
    /// ```
    /// use ferry_sim::{Arch, Event, PlatformBuilder};
    /// let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build()?;
    /// let s = p.device(0)?.create_stream()?;
    /// let (before, after) = (Event::new(), Event::new());
    /// s.record_event(&before)?;
    /// s.launch("fails", Box::new(|_| Err("bad".into())))?;
    /// s.record_event(&after)?;
    /// after.synchronize();
    /// assert_eq!(before.error(), None);
    /// assert!(after.error().is_some());
    /// assert!(s.synchronize().is_err()); // hands the failure out and clears it
    /// # Ok::<(), ferry_sim::DeviceError>(())
    /// ```
    pub fn error(&self) -> Option<crate::DeviceError> {
        lock(&self.0.state).completed_error.clone()
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
