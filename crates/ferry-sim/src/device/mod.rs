//! Platforms, devices, the current device, host registration and copy engines: the
//! [`Platform`] and its builder in `platform.rs`, the [`Device`] here.
use crate::clock::{DeviceClock, VirtualDeviceClock};
use crate::cost::{Charge, ChargeLedger, Charges, CostModel, DriverLock, QueueCreationGate};
use crate::counters::{Counter, CounterSnapshot, Counters};
use crate::error::DeviceError;
use crate::fault::{FaultInjector, FaultPoint};
use crate::memory::{
    classify, host_alias, AddrKind, DevicePtr, HbmMemory, HostRegion, HostRegistry, MemoryError,
};
use crate::profile::{DeviceProfile, PathBFixes};
use crate::stream::{Stream, StreamKind};
use crate::sync::{lock, Arc, AtomicU32, AtomicU64, Condvar, Mutex, Ordering};
use ferry_abi::arch::{Arch, ArchProfile};
use std::cell::Cell;
use std::collections::HashSet;
use std::sync::OnceLock;

mod platform;
pub(crate) use platform::PlatformShared;
pub use platform::{HostRegistration, Platform, PlatformBuilder};

/// Default HBM size of a simulated device (virtual; pages are committed only when touched).
pub const DEFAULT_HBM_BYTES: u64 = 1 << 30;
/// Copy engines per device (docs/design/copy-pool.md: 16).
pub const DEFAULT_COPY_ENGINES: u32 = 16;
/// Default device memory a hardware queue's context-save area holds (scaled from
/// ~173 MiB per SDMA queue on a 288 GiB GPU to a 1 GiB simulated device).
pub const DEFAULT_QUEUE_CONTEXT_BYTES: u64 = 1 << 20;
/// Hardware compute queues the pooled streams of a device share (HIP's `GPU_MAX_HW_QUEUES`
/// default): stream `k` gets a queue of its own while fewer than this many exist, else it
/// shares the least-used one. The null stream has a queue of its own besides, so a prewarmed
/// pool of 8 streams gives the 5 compute queues per GPU of the real server.
pub const DEFAULT_MAX_HW_QUEUES: u32 = 4;
/// Most blocks of one launch that run at once ([`Device::run_blocks`]) by default; the
/// platform's default is this or the host's parallelism, whichever is less.
pub const DEFAULT_BLOCK_WORKERS: usize = 4;
/// Most devices one platform may have (the address map reserves 8 bits for the ordinal).
pub const MAX_DEVICES: u32 = 64;

#[derive(Debug)]
pub(crate) struct DeviceInner {
    pub(crate) ordinal: u32,
    pub(crate) arch: &'static ArchProfile,
    pub(crate) memory: HbmMemory,
    pub(crate) clock: DeviceClock,
    pub(crate) counters: Arc<Counters>,
    pub(crate) faults: FaultInjector,
    pub(crate) shared: Arc<PlatformShared>,
    null_stream: OnceLock<Stream>,
    pub(crate) engines: CopyEngines,
    queue_context_bytes: u64,
    compute_queues: Mutex<ComputeQueues>,
    block_workers: usize,
    /// Nanoseconds after `epoch` until which the device's queues are evicted (0: never).
    evicted_until: AtomicU64,
    epoch: std::time::Instant,
    code_objects: Mutex<HashSet<String>>,
    null_init: Mutex<[bool; 2]>,
    /// What the cost model charged this device.
    charges: ChargeLedger,
    pub(crate) aicpu_os: crate::aicpu_os::OsState,
}

/// One simulated device. Cheap to clone (an `Arc`).
#[derive(Clone, Debug)]
pub struct Device(pub(crate) Arc<DeviceInner>);

/// A handle on a device that does not keep it alive ([`Device::downgrade`]).
///
/// # Examples
/// ```
/// use ferry_sim::{Arch, PlatformBuilder};
/// let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 24).build()?;
/// let weak = p.device(0)?.downgrade();
/// assert!(weak.upgrade().is_some());
/// drop(p);
/// assert!(weak.upgrade().is_none(), "the platform held the last reference");
/// # Ok::<(), ferry_sim::DeviceError>(())
/// ```
#[derive(Clone, Debug)]
pub struct WeakDevice(std::sync::Weak<DeviceInner>);

impl WeakDevice {
    /// The device, if anything still holds it.
    pub fn upgrade(&self) -> Option<Device> {
        self.0.upgrade().map(Device)
    }
}

/// Direction of a copy: the seam's type.
pub use ferry_backend::CopyKind;

impl Device {
    /// This device's ordinal.
    pub fn ordinal(&self) -> u32 {
        self.0.ordinal
    }

    /// Another device of the same platform (for peer copies).
    pub fn peer(&self, ordinal: u32) -> Option<Device> {
        self.0.shared.peers.get()?.get(ordinal as usize)?.upgrade().map(Device)
    }

    /// A handle that does not keep the device alive (to check that a device was released).
    pub fn downgrade(&self) -> WeakDevice {
        WeakDevice(Arc::downgrade(&self.0))
    }

    /// This device's arch profile.
    pub fn arch(&self) -> &'static ArchProfile {
        self.0.arch
    }

    /// This device's sys counter.
    pub fn clock(&self) -> &DeviceClock {
        &self.0.clock
    }

    /// This device's memory.
    pub fn memory(&self) -> &HbmMemory {
        &self.0.memory
    }

    /// This device's fault plan.
    pub fn faults(&self) -> &FaultInjector {
        &self.0.faults
    }

    /// This device's AICPU OS (the device-side loader).
    pub fn aicpu_os(&self) -> crate::aicpu_os::AicpuOs {
        crate::aicpu_os::AicpuOs::new(self.clone())
    }

    /// The live counters.
    pub fn counter(&self, c: Counter) -> u64 {
        self.0.counters.get(c)
    }

    /// A snapshot of every counter.
    pub fn counters(&self) -> CounterSnapshot {
        self.0.counters.snapshot()
    }

    /// The cost model of the platform.
    pub fn cost_model(&self) -> &CostModel {
        &self.0.shared.cost
    }

    /// What the cost model charged this device so far, by kind (all zero with the model off).
    pub fn charges(&self) -> Charges {
        self.0.charges.snapshot()
    }

    /// Code objects loaded on this device, one per kernel name launched so far.
    pub fn loaded_code_objects(&self) -> Vec<String> {
        let mut v: Vec<_> = lock(&self.0.code_objects).iter().cloned().collect();
        v.sort();
        v
    }

    /// Allocates device memory (alignment at least 64).
    ///
    /// # Errors
    /// Out of memory, or an injected [`FaultPoint::DeviceAlloc`].
    pub fn malloc(&self, size: u64) -> Result<DevicePtr, DeviceError> {
        self.0.faults.check(FaultPoint::DeviceAlloc).inspect_err(|_| self.fault_counted())?;
        // With the cost model on, an allocation takes the driver lock as the KFD ioctl takes
        // the process's FMM lock: it backs up behind a stalled queue creation (docs/design/copy-pool.md).
        let _fmm = self.0.shared.cost.enabled.then(|| self.0.shared.driver.acquire());
        self.0.counters.bump(Counter::DeviceAllocs);
        Ok(self.0.memory.alloc(size, 0)?)
    }

    /// Frees device memory.
    ///
    /// # Errors
    /// When `ptr` is not the start of a live allocation.
    pub fn free(&self, ptr: DevicePtr) -> Result<(), DeviceError> {
        Ok(self.0.memory.free(ptr)?)
    }

    /// Blocks the host until `event`'s latest record (at the time of the call) completed on
    /// its stream, giving up after `timeout` (`None`: no bound): the host's event
    /// synchronisation on this device (`aclrtSynchronizeEvent`). Counted as a synchronisation
    /// ([`Counter::Synchronizes`]) and subject to [`FaultPoint::Synchronize`], like a stream
    /// synchronize; unlike one, it waits for the work before the record only, not for work
    /// queued after it. What that work reported is [`Event::error`](crate::Event::error).
    ///
    /// # Errors
    /// An injected [`FaultPoint::Synchronize`] (nothing waited), or [`DeviceError::Timeout`].
    ///
    /// # Examples
    /// ```
    /// use ferry_sim::{Arch, Event, PlatformBuilder};
    /// let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build()?;
    /// let dev = p.device(0)?;
    /// let s = dev.create_stream()?;
    /// let ev = Event::new();
    /// s.record_event(&ev)?;
    /// dev.synchronize_event(&ev, None)?;
    /// assert!(ev.query());
    /// # Ok::<(), ferry_sim::DeviceError>(())
    /// ```
    pub fn synchronize_event(
        &self,
        event: &crate::Event,
        timeout: Option<std::time::Duration>,
    ) -> Result<(), DeviceError> {
        self.0.faults.check(FaultPoint::Synchronize).inspect_err(|_| self.fault_counted())?;
        self.0.counters.bump(Counter::Synchronizes);
        let done = match timeout {
            Some(t) => event.synchronize_timeout(t),
            None => {
                event.synchronize();
                true
            }
        };
        if done {
            Ok(())
        } else {
            Err(DeviceError::Timeout { what: "event synchronize" })
        }
    }

    pub(crate) fn fault_counted(&self) {
        self.0.counters.bump(Counter::FaultsInjected);
    }

    /// Translates a device-space address of this device (its HBM or its host aliases) to the
    /// pointer device code uses.
    ///
    /// # Errors
    /// A host pointer, another device's address, or a range outside a live allocation or
    /// registration.
    pub fn translate(&self, ptr: DevicePtr, len: u64) -> Result<*mut u8, MemoryError> {
        match classify(ptr.0) {
            AddrKind::HostAlias(o) if o == self.0.ordinal => {
                let host = (ptr.0 - host_alias(o, 0).0) as usize;
                let len = usize::try_from(len)
                    .map_err(|_| MemoryError::NotRegistered { host_addr: host, len: usize::MAX })?;
                self.0
                    .shared
                    .registry
                    .find(host, len)
                    .map(|_| host as *mut u8)
                    .ok_or(MemoryError::NotRegistered { host_addr: host, len })
            }
            _ => self.0.memory.device_ptr(ptr, len),
        }
    }

    /// Writes `bytes` to device memory at `dst` synchronously on the null stream.
    ///
    /// # Errors
    /// See [`Stream::synchronize`] and the copy's address checks.
    pub fn copy_htod(&self, bytes: &[u8], dst: DevicePtr) -> Result<(), DeviceError> {
        let s = self.null_stream()?;
        // SAFETY: `bytes` outlives the copy: `synchronize` below waits for it to finish, and
        // when it fails (an injected fault returns before waiting) `quiesce` does.
        unsafe { s.copy_htod_async(bytes.as_ptr(), dst, bytes.len() as u64)? };
        s.synchronize().inspect_err(|_| s.quiesce())
    }

    /// Reads device memory at `src` into `out` synchronously on the null stream.
    ///
    /// # Errors
    /// See [`Stream::synchronize`] and the copy's address checks.
    pub fn copy_dtoh(&self, src: DevicePtr, out: &mut [u8]) -> Result<(), DeviceError> {
        let s = self.null_stream()?;
        // SAFETY: `out` outlives the copy: `synchronize` below waits for it to finish (or, when
        // it fails, `quiesce` does), and the exclusive borrow keeps the host from
        // touching it meanwhile.
        unsafe { s.copy_dtoh_async(src, out.as_mut_ptr(), out.len() as u64)? };
        s.synchronize().inspect_err(|_| s.quiesce())
    }

    /// The device's null (default) stream, created on first use. Its creation is not counted
    /// as a stream creation, but its hardware queue is counted.
    ///
    /// # Errors
    /// When the stream's queue cannot be created.
    pub fn null_stream(&self) -> Result<&Stream, DeviceError> {
        if let Some(s) = self.0.null_stream.get() {
            return Ok(s);
        }
        let s = Stream::new(self.clone(), StreamKind::Null)?;
        Ok(self.0.null_stream.get_or_init(|| s))
    }

    /// Creates a stream (a FIFO executor on its own hardware queue).
    ///
    /// # Errors
    /// An injected [`FaultPoint::StreamCreate`], or no device memory for the queue.
    pub fn create_stream(&self) -> Result<Stream, DeviceError> {
        self.0.faults.check(FaultPoint::StreamCreate).inspect_err(|_| self.fault_counted())?;
        let s = Stream::new(self.clone(), StreamKind::Pooled)?;
        self.0.counters.bump(Counter::StreamsCreated);
        Ok(s)
    }

    /// Creates one hardware queue: applies the cost model (driver lock, pressure) and takes
    /// device memory for its context-save area. With the cost model on, the creation holds the
    /// driver lock for its whole cost, as libhsakmt holds the process's FMM lock across the
    /// context-save area's migration (docs/design/copy-pool.md): every other queue creation, registration and
    /// allocation of the process waits behind it.
    pub(crate) fn create_hw_queue(&self, counter: Counter) -> Result<DevicePtr, DeviceError> {
        let cost = &self.0.shared.cost;
        let _fmm = if cost.enabled && cost.queue_waits_for_driver_lock {
            let (g, waited) = self.0.shared.driver.acquire();
            if waited {
                self.0.counters.bump(Counter::DriverLockWaits);
            }
            Some(g)
        } else {
            None
        };
        if cost.enabled {
            let stall = cost.queue_creation_cost(self.0.memory.used(), self.0.memory.size());
            self.0.charges.charge(Charge::QueueCreation, stall);
            // A test's `QueueCreationHold` stops the creation here, inside its stall.
            self.0.shared.queue_gate.pass();
            CostModel::sleep(stall);
        }
        let ctx = self.0.memory.alloc(self.0.queue_context_bytes, 0)?;
        self.0.counters.bump(counter);
        self.0.counters.add(Counter::QueueMemoryBytes, self.0.queue_context_bytes);
        Ok(ctx)
    }

    /// A hardware compute queue for a new stream: the null stream's own, or for a pooled
    /// stream a new queue while fewer than the device's maximum exist, else the least-used one
    /// (clr's device queue pool). A pooled queue lives while a stream uses it; its context
    /// memory is freed with its last stream ([`release_compute_queue`]).
    ///
    /// [`release_compute_queue`]: Device::release_compute_queue
    pub(crate) fn attach_compute_queue(
        &self,
        kind: StreamKind,
    ) -> Result<crate::stream::HwQueue, DeviceError> {
        use crate::stream::HwQueue;
        // Held across a creation: queue assignment is serialised, and a second stream never
        // creates a queue the first is still creating.
        let mut q = lock(&self.0.compute_queues);
        if kind == StreamKind::Null {
            let ctx = self.create_hw_queue(Counter::ComputeQueuesCreated)?;
            q.null = true;
            return Ok(HwQueue::Own(ctx));
        }
        let live = q.slots.iter().flatten().count();
        if live < q.max {
            let ctx = self.create_hw_queue(Counter::ComputeQueuesCreated)?;
            let i = match q.slots.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    q.slots.push(None);
                    q.slots.len() - 1
                }
            };
            q.slots[i] = Some((1, ctx));
            return Ok(HwQueue::Pooled(i));
        }
        let i = q
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|(users, _)| (users, i)))
            .min()
            .map(|(_, i)| i)
            .ok_or_else(|| DeviceError::Resource("no hardware queue".into()))?;
        if let Some((users, _)) = &mut q.slots[i] {
            *users += 1;
        }
        Ok(HwQueue::Pooled(i))
    }

    /// A pooled stream on queue `i` is gone; the queue (and its context memory) goes with its
    /// last stream.
    pub(crate) fn release_compute_queue(&self, i: usize) {
        let mut q = lock(&self.0.compute_queues);
        if let Some(Some((users, ctx))) = q.slots.get_mut(i) {
            *users = users.saturating_sub(1);
            if *users == 0 {
                let ctx = *ctx;
                q.slots[i] = None;
                let _ = self.0.memory.free(ctx);
            }
        }
    }

    /// Hardware compute queues that exist on this device (the null stream's included).
    pub fn compute_queues(&self) -> usize {
        let q = lock(&self.0.compute_queues);
        q.slots.iter().flatten().count() + usize::from(q.null)
    }

    /// Streams on each live pooled hardware compute queue, in queue order.
    pub fn compute_queue_users(&self) -> Vec<u32> {
        lock(&self.0.compute_queues).slots.iter().flatten().map(|(u, _)| *u).collect()
    }

    /// Most blocks of one launch that run at once.
    pub fn block_workers(&self) -> usize {
        self.0.block_workers
    }

    /// A KFD-style eviction: every queue of this device stops for `d` (work already running
    /// finishes; no stream starts another copy or kernel until the queues are restored).
    /// Returns at once; an eviction during an eviction extends it.
    pub fn evict_queues(&self, d: std::time::Duration) {
        let until = (self.0.epoch.elapsed() + d).as_nanos().min(u64::MAX as u128) as u64;
        // Relaxed: a deadline read by stream workers between ops; nothing is published with it.
        self.0.evicted_until.fetch_max(until.max(1), Ordering::Relaxed);
        self.0.counters.bump(Counter::QueueEvictions);
    }

    /// Waits (in steps of at most 10 ms) while the device's queues are evicted; returns
    /// whether it waited. Stream workers call it before each copy or kernel.
    pub(crate) fn wait_while_evicted(&self) -> bool {
        let mut waited = false;
        loop {
            // Relaxed: see `evict_queues`.
            let until = self.0.evicted_until.load(Ordering::Relaxed);
            if until == 0 {
                // Never evicted, or restored: no clock read on a stream op's path.
                return waited;
            }
            let now = self.0.epoch.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            if until <= now {
                // Restored: clear the deadline unless a later eviction replaced it meanwhile.
                // Relaxed: as above.
                let _ = self.0.evicted_until.compare_exchange(
                    until,
                    0,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                return waited;
            }
            waited = true;
            std::thread::sleep(
                std::time::Duration::from_nanos(until - now)
                    .min(std::time::Duration::from_millis(10)),
            );
        }
    }

    /// Records a launch of kernel `name`: counts it and loads its code object on first use.
    pub(crate) fn note_launch(&self, name: &str, count_launch: bool) {
        let first = lock(&self.0.code_objects).insert(name.to_owned());
        if first {
            self.0.counters.bump(Counter::CodeObjectLoads);
            let c = &self.0.shared.cost;
            if c.enabled {
                self.0.charges.charge(Charge::CodeObjectLoad, c.code_object_load);
                CostModel::sleep(c.code_object_load);
            }
        }
        if count_launch {
            self.0.counters.bump(Counter::Launches);
        }
    }

    /// Marks the first null-stream copy in a direction.
    pub(crate) fn note_null_copy(&self, kind: CopyKind) {
        let idx = match kind {
            CopyKind::Htod => 0,
            CopyKind::Dtoh => 1,
            CopyKind::Dtod => return,
        };
        let mut init = lock(&self.0.null_init);
        if !init[idx] {
            init[idx] = true;
            self.0.counters.bump(if idx == 0 {
                Counter::NullStreamInitHtod
            } else {
                Counter::NullStreamInitDtoh
            });
            let c = &self.0.shared.cost;
            if c.enabled {
                self.0.charges.charge(Charge::NullStreamInit, c.null_stream_init);
                CostModel::sleep(c.null_stream_init);
            }
        }
    }
}

/// The device's copy engines: each concurrent copy takes the lowest free engine; an engine's
/// queue is created on its first copy.
#[derive(Debug)]
pub(crate) struct CopyEngines {
    state: Mutex<Vec<EngineState>>,
    cv: Condvar,
    /// Copies blocked on the engine allocator now (see [`Device::copy_engine_waiting`]).
    waiting: AtomicU32,
}

/// The pooled streams' hardware compute queues of one device.
#[derive(Debug)]
struct ComputeQueues {
    max: usize,
    /// Live pooled queues: (streams on it, context-save area); `None` for a freed slot.
    slots: Vec<Option<(u32, DevicePtr)>>,
    /// Whether the null stream's queue exists.
    null: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct EngineState {
    busy: bool,
    queue_created: bool,
}

impl CopyEngines {
    fn new(n: u32) -> Self {
        Self {
            state: Mutex::new(vec![EngineState::default(); n as usize]),
            cv: Condvar::new(),
            waiting: AtomicU32::new(0),
        }
    }

    /// Engines whose queue exists.
    pub(crate) fn queues(&self) -> usize {
        lock(&self.state).iter().filter(|e| e.queue_created).count()
    }

    /// Locks the engine list, counting the wait when another copy holds it (an engine's queue
    /// being created holds it for the whole creation).
    fn lock_counted(&self) -> crate::sync::MutexGuard<'_, Vec<EngineState>> {
        match self.state.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                // Relaxed: a count tests order themselves on; the mutex orders the data.
                self.waiting.fetch_add(1, Ordering::Relaxed);
                let g = lock(&self.state);
                // Relaxed: as above.
                self.waiting.fetch_sub(1, Ordering::Relaxed);
                g
            }
        }
    }
}

impl Device {
    /// Number of copy engines whose queue has been created.
    pub fn copy_engine_queues(&self) -> usize {
        self.0.engines.queues()
    }

    /// The engines whose queue has been created, in engine order.
    pub fn copy_engines_with_queues(&self) -> Vec<usize> {
        let st = lock(&self.0.engines.state);
        st.iter().enumerate().filter(|(_, e)| e.queue_created).map(|(i, _)| i).collect()
    }

    /// Copies blocked now on this device's copy-engine allocator, which a copy holds while it
    /// picks an engine and, on an engine's first copy, while that engine's queue is created.
    pub fn copy_engine_waiting(&self) -> u32 {
        // Relaxed: as in `CopyEngines::lock_counted`.
        self.0.engines.waiting.load(Ordering::Relaxed)
    }

    /// Number of copy engines this device has.
    pub fn copy_engine_count(&self) -> usize {
        lock(&self.0.engines.state).len()
    }

    /// Runs `f` while holding the lowest free copy engine (waiting if all are busy), creating
    /// that engine's queue on its first use.
    pub(crate) fn with_copy_engine<R>(&self, f: impl FnOnce() -> R) -> Result<R, DeviceError> {
        let e = &self.0.engines;
        let (idx, create) = {
            let mut st = e.lock_counted();
            loop {
                if let Some(i) = st.iter().position(|s| !s.busy) {
                    st[i].busy = true;
                    break (i, !st[i].queue_created);
                }
                st = match e.cv.wait(st) {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
            }
        };
        let created = if create {
            // clr creates an engine's queue under its SDMA engine allocator lock: every other
            // copy of this device waits for the engine list meanwhile (docs/design/copy-pool.md).
            let _alloc = lock(&e.state);
            self.create_hw_queue(Counter::SdmaQueuesCreated).map(|_| ())
        } else {
            Ok(())
        };
        let out = created.map(|()| f());
        let mut st = lock(&e.state);
        st[idx].busy = false;
        if out.is_ok() {
            st[idx].queue_created = true;
        }
        drop(st);
        e.cv.notify_one();
        out
    }
}
