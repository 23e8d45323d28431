//! The stall cost model (off by default) that makes the GPU driver's stalls (docs/design/copy-pool.md) reproducible.
//!
//! With the model on, creating a stream or hardware queue costs
//! [`queue_base`](CostModel::queue_base) plus a pressure term that grows once device memory use
//! passes [`pressure_threshold`](CostModel::pressure_threshold) (docs/design/copy-pool.md: queue creation on a
//! nearly full GPU stalls for seconds), and it first waits for the process-wide [`DriverLock`]
//! that host registration holds for `bytes / registration_bytes_per_sec`. The first launch of a
//! kernel on a device costs a code-object load. Costs are real sleeps, scaled to milliseconds so
//! a demo shows the effect without taking minutes; tests assert counters and what the model
//! charged ([`Charges`], the durations it computed, exactly), never the times the sleeps took.
//! [`QueueCreationHold`] stops every queue creation inside its stall, so a test can look at what
//! waits behind one.
//!
//! # Examples
//! ```
//! use ferry_sim::cost::CostModel;
//! use std::time::Duration;
//! let m = CostModel::stalls();
//! let empty = m.queue_creation_cost(0, 1 << 30);
//! let full = m.queue_creation_cost((1 << 30) - (1 << 20), 1 << 30);
//! assert!(full > empty * 10);
//! assert_eq!(CostModel::default().queue_creation_cost(1 << 30, 1 << 30), Duration::ZERO);
//! ```
use crate::sync::{lock, Arc, AtomicU32, AtomicU64, Condvar, Mutex, MutexGuard, Ordering};
use std::time::Duration;

/// Parameters of the cost model. `CostModel::default()` is off: every cost is zero.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Whether any cost applies.
    pub enabled: bool,
    /// Cost of creating a stream or hardware queue on an empty device.
    pub queue_base: Duration,
    /// Extra cost of a queue creation on a completely full device.
    pub queue_pressure_max: Duration,
    /// Memory-use fraction (0..1) above which the pressure term starts to grow.
    pub pressure_threshold: f64,
    /// Whether queue creation waits for the driver lock held by host registration.
    pub queue_waits_for_driver_lock: bool,
    /// Host registration speed while it holds the driver lock (seed: ~13 GiB/s).
    pub registration_bytes_per_sec: f64,
    /// Cost of the first launch of a kernel on a device (code-object load).
    pub code_object_load: Duration,
    /// Cost of the first null-stream copy per direction (queue/blit initialisation).
    pub null_stream_init: Duration,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            enabled: false,
            queue_base: Duration::ZERO,
            queue_pressure_max: Duration::ZERO,
            pressure_threshold: 1.0,
            queue_waits_for_driver_lock: false,
            registration_bytes_per_sec: f64::INFINITY,
            code_object_load: Duration::ZERO,
            null_stream_init: Duration::ZERO,
        }
    }
}

impl CostModel {
    /// The driver's stall profile (docs/design/copy-pool.md), scaled down ~1000× (seconds become milliseconds): 6.5 ms
    /// per queue on an empty device growing to ~300 ms when full, a driver lock during
    /// registration at 13 GiB/s, 28 ms per first kernel load.
    pub fn stalls() -> Self {
        Self {
            enabled: true,
            queue_base: Duration::from_micros(6_500),
            queue_pressure_max: Duration::from_millis(300),
            pressure_threshold: 0.8,
            queue_waits_for_driver_lock: true,
            registration_bytes_per_sec: 13.0 * (1u64 << 30) as f64,
            code_object_load: Duration::from_millis(28),
            null_stream_init: Duration::from_millis(2),
        }
    }

    /// Cost of one queue creation with `used` of `total` device bytes in use.
    pub fn queue_creation_cost(&self, used: u64, total: u64) -> Duration {
        if !self.enabled {
            return Duration::ZERO;
        }
        let frac = if total == 0 { 1.0 } else { used as f64 / total as f64 };
        let over = ((frac - self.pressure_threshold) / (1.0 - self.pressure_threshold).max(1e-9))
            .clamp(0.0, 1.0);
        // Quadratic: cheap until the device is nearly full, then steep (the copy-pool design's cliff).
        self.queue_base + self.queue_pressure_max.mul_f64(over * over)
    }

    /// How long registering `bytes` holds the driver lock.
    pub fn registration_cost(&self, bytes: u64) -> Duration {
        if !self.enabled || !self.registration_bytes_per_sec.is_finite() {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(bytes as f64 / self.registration_bytes_per_sec)
    }

    pub(crate) fn sleep(d: Duration) {
        if !d.is_zero() {
            std::thread::sleep(d);
        }
    }
}

/// The process-wide driver lock: host registration holds it; queue creation may wait for it.
#[derive(Debug, Default)]
pub struct DriverLock {
    m: Mutex<()>,
    /// Threads blocked in [`acquire`](Self::acquire) now.
    waiting: AtomicU32,
}

impl DriverLock {
    /// Takes the lock, reporting whether it had to wait.
    pub fn acquire(&self) -> (MutexGuard<'_, ()>, bool) {
        match self.m.try_lock() {
            Ok(g) => (g, false),
            Err(std::sync::TryLockError::Poisoned(p)) => (p.into_inner(), false),
            Err(std::sync::TryLockError::WouldBlock) => {
                // Relaxed: a count tests order themselves on; the mutex orders the data.
                self.waiting.fetch_add(1, Ordering::Relaxed);
                let g = lock(&self.m);
                // Relaxed: as above.
                self.waiting.fetch_sub(1, Ordering::Relaxed);
                (g, true)
            }
        }
    }

    /// Threads waiting for the lock now (blocked behind its holder).
    pub fn waiting(&self) -> u32 {
        // Relaxed: as in `acquire`.
        self.waiting.load(Ordering::Relaxed)
    }
}

/// What the cost model charged one device, by kind: the durations it computed (and then slept),
/// summed exactly, whatever the sleeps took on a busy host. All zero with the model off.
///
/// # Examples
/// ```
/// use ferry_sim::cost::CostModel;
/// use ferry_sim::{Arch, PlatformBuilder};
/// use std::time::Duration;
/// let cost = CostModel {
///     queue_base: Duration::from_micros(10),
///     queue_pressure_max: Duration::from_micros(100),
///     code_object_load: Duration::from_micros(10),
///     null_stream_init: Duration::from_micros(10),
///     ..CostModel::stalls()
/// };
/// let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).cost_model(cost).build()?;
/// let d = p.device(0)?;
/// let s = d.create_stream()?;
/// s.launch("k", Box::new(|_| Ok(())))?;
/// s.synchronize()?;
/// let c = d.charges();
/// assert_eq!(c.queue_creation, cost.queue_base, "one queue on an empty device");
/// assert_eq!(c.code_object_load, cost.code_object_load);
/// assert_eq!(c.null_stream_init, Duration::ZERO);
/// # Ok::<(), ferry_sim::DeviceError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Charges {
    /// Hardware-queue creations (compute and copy-engine queues): base plus pressure, summed.
    pub queue_creation: Duration,
    /// Code-object loads (first launch of a kernel on the device).
    pub code_object_load: Duration,
    /// First null-stream copies, one per direction.
    pub null_stream_init: Duration,
}

/// What a stall is charged for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Charge {
    QueueCreation,
    CodeObjectLoad,
    NullStreamInit,
}

/// A device's running [`Charges`], in nanoseconds.
#[derive(Debug, Default)]
pub(crate) struct ChargeLedger {
    ns: [AtomicU64; 3],
}

impl ChargeLedger {
    /// Adds `d` to what `kind` was charged.
    pub(crate) fn charge(&self, kind: Charge, d: Duration) {
        let ns = d.as_nanos().min(u64::MAX as u128) as u64;
        // Relaxed: a statistic; readers synchronise through the operation that charged it (a
        // stream synchronize, a join), not through the sum.
        self.ns[kind as usize].fetch_add(ns, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Charges {
        // Relaxed: as in `charge`.
        let get = |k: Charge| Duration::from_nanos(self.ns[k as usize].load(Ordering::Relaxed));
        Charges {
            queue_creation: get(Charge::QueueCreation),
            code_object_load: get(Charge::CodeObjectLoad),
            null_stream_init: get(Charge::NullStreamInit),
        }
    }
}

/// Where queue creations stop while a [`QueueCreationHold`] lives (a hook for tests; a
/// creation passes it with one uncontended lock, and only with the cost model on).
#[derive(Debug, Default)]
pub(crate) struct QueueCreationGate {
    state: Mutex<GateState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    held: bool,
    stopped: u32,
}

impl QueueCreationGate {
    /// Stops here while the gate is held (counted in [`stopped`](Self::stopped)).
    pub(crate) fn pass(&self) {
        let mut s = lock(&self.state);
        if !s.held {
            return;
        }
        s.stopped += 1;
        while s.held {
            s = match self.cv.wait(s) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        s.stopped -= 1;
    }

    /// Queue creations stopped at the gate now.
    pub(crate) fn stopped(&self) -> u32 {
        lock(&self.state).stopped
    }

    pub(crate) fn hold(self: &Arc<Self>) -> QueueCreationHold {
        lock(&self.state).held = true;
        QueueCreationHold(self.clone())
    }
}

/// While this lives, every queue creation of its platform stops inside its stall, holding what
/// the stall holds (the driver lock, a device's copy-engine allocator), until it is dropped: a
/// test looks at what waits behind a stalled creation through state instead of racing a sleep.
/// Only creations that stall stop, so only with the cost model on. From
/// [`Platform::hold_queue_creations`](crate::Platform::hold_queue_creations).
#[derive(Debug)]
#[must_use = "queue creations go on as soon as the hold is dropped"]
pub struct QueueCreationHold(Arc<QueueCreationGate>);

impl Drop for QueueCreationHold {
    fn drop(&mut self) {
        lock(&self.0.state).held = false;
        self.0.cv.notify_all();
    }
}
