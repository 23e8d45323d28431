//! [`HostMemoryBackend`]: the seam's second, minimal backend — "device" memory is host heap,
//! streams run their work on the calling thread at enqueue (or, made with
//! [`HostMemoryBackend::with_stream_threads`], in order on a thread of their own), and device
//! programs are host code registered for their images' bytes (its program loader,
//! [`HostProgramCode`]). Its memory is mapped for the host as it is (a unified device,
//! `MappedMemory`), its cycle counter is the clock its events are stamped with
//! ([`HostMemoryCounter`]), its host bells are rung by [`HostMemoryDevice::ring_host`], and
//! [`HostMemoryCores`] are AICore cores whose register windows are host memory and whose
//! launches run on one host thread per core.
//!
//! It exists so the seam is exercised by something other than the simulated chip (as
//! wgpu-hal keeps an `empty` backend): the copy engine's tests run on it, including its error
//! paths, which [`HostMemoryDevice::fail_next`] arms one operation at a time. What it keeps of
//! a device's rules: device addresses are not host pointers (every access is checked against a
//! live allocation or a live registration of *this* device), a failure of enqueued work is
//! sticky until the stream is synchronized, and a blocking copy's result is its own.
//!
//! Addresses: device `d`'s memory lives at `0x2000_0000_0000_0000 + (d << 40)` onward (bump
//! allocated, never reused); its alias of host address `h` is `0x1000_0000_0000_0000 +
//! (d << 48) + h`. [`HostMemoryCores`] name core `i`'s register window
//! `0x3000_0000_0000_0000 + i × block_size` (its [`reg_bases`](crate::CoreRegisters::reg_bases),
//! mapped back by [`HostMemoryCores::core_at`]): not memory, only the key of a window.
//!
//! # Examples
//! ```
//! use ferry_backend::host::HostMemoryBackend;
//! use ferry_backend::{Backend, BackendDevice, HostMapping};
//! let b = HostMemoryBackend::new(2, 1 << 20)?;
//! let mut page = vec![0u8; 4096];
//! // SAFETY: `page` outlives the registration, dropped at the end of the example.
//! let reg = unsafe { b.register_host(page.as_mut_ptr(), page.len())? };
//! let a0 = reg.alias(0, page.as_ptr(), 4096).unwrap();
//! let a1 = reg.alias(1, page.as_ptr(), 4096).unwrap();
//! assert_ne!(a0, a1, "each device has its own alias");
//! assert!(reg.alias(0, page.as_ptr(), 4097).is_none(), "past the registration");
//! assert!(b.device(2).is_err());
//! drop(reg);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use crate::{
    Backend, BackendDevice, BackendError, BackendOp, CopyGroup, CopyKind, DevicePtr, EventOf,
    GatherFragment, HostMapping, QueueCounts, FRAGMENT_BYTES,
};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

mod cores;
mod launch;
mod mapped;
mod program;
mod stream;
pub use cores::{HostMemoryCoreLaunch, HostMemoryCores};
pub use launch::{HostMemoryEvent, HostMemoryPinned};
pub use mapped::{HostMemoryBellGuard, HostMemoryCounter};
pub use program::{
    aicpu_thread, HostFunctionBody, HostMemoryFunction, HostMemoryLaunch, HostMemoryLibrary,
    HostMemorySession, HostProgramCode, HostProgramStats,
};
pub use stream::HostMemoryStream;

/// Most devices one backend has (the alias scheme's limit).
pub const MAX_DEVICES: u32 = 16;
/// Copy engines each device reports.
pub const COPY_ENGINES: usize = 16;
const HBM_BASE: u64 = 0x2000_0000_0000_0000;
const ALIAS_BASE: u64 = 0x1000_0000_0000_0000;
const ALIGN: u64 = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its map or list whole; recover it after a panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why an operation of the host-memory backend failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostMemoryError {
    /// More devices than the alias scheme has room for.
    #[error("{asked} devices asked for; at most {MAX_DEVICES}")]
    TooManyDevices {
        /// Devices asked for.
        asked: u32,
    },
    /// A wait ran out before what it waited for completed.
    #[error("the wait ran out")]
    TimedOut,
    /// No device with this ordinal.
    #[error("no device {ordinal} (the backend has {count})")]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: u32,
        /// Devices of the backend.
        count: u32,
    },
    /// The allocation does not fit the device's remaining memory (or is empty).
    #[error("{bytes} bytes asked for, {free} free")]
    OutOfMemory {
        /// Bytes asked for.
        bytes: u64,
        /// Bytes free.
        free: u64,
    },
    /// A device range outside every live allocation and registration of the device.
    #[error("{ptr}+{len} is not live memory of device {ordinal}")]
    BadAddress {
        /// The device.
        ordinal: u32,
        /// Start of the range.
        ptr: DevicePtr,
        /// Its length.
        len: u64,
    },
    /// A host range that is null, empty or overlaps a registration.
    #[error("host range {addr:#x}+{len} is null, empty or already registered")]
    BadRegistration {
        /// Start of the range.
        addr: usize,
        /// Its length.
        len: usize,
    },
    /// A fault armed with [`HostMemoryDevice::fail_next`].
    #[error("injected fault at {op}")]
    Injected {
        /// The operation it failed.
        op: BackendOp,
    },
    /// An entry ([`BackendStream::launch_entry`](crate::BackendStream::launch_entry)) reported
    /// a failure while it ran.
    #[error("kernel `{name}` failed: {message}")]
    Kernel {
        /// Kernel name.
        name: String,
        /// What the entry reported.
        message: String,
    },
    /// An entry was launched on a stream whose device is gone.
    #[error("the stream's device is gone")]
    DeviceGone,
    /// A program object name that is not a plain name.
    #[error("`{name}` is not a plain object name")]
    BadName {
        /// The name.
        name: String,
    },
    /// No object of that name is saved where the lookup searched.
    #[error("no object `{name}` is saved on the device")]
    NoObject {
        /// The name.
        name: String,
    },
    /// The bootstrap's blob or arguments could not be decoded.
    #[error("bad bootstrap: {0}")]
    Bootstrap(ferry_abi::launch::DecodeError),
    /// The bootstrap blob names another kernel or object than the dispatcher bootstrap.
    #[error("bootstrap blob names `{kernel}` in `{object}`, not the dispatcher bootstrap")]
    NotBootstrap {
        /// The kernel name in the blob.
        kernel: String,
        /// The object name in the blob.
        object: String,
    },
    /// A function launched on no thread.
    #[error("a launch needs at least one thread")]
    NoThreads,
    /// An AICore launch or a set of cores on no core, or on more than there are.
    #[error("{asked} cores asked for; 1 to {count}")]
    NoSuchCores {
        /// Cores asked for.
        asked: u32,
        /// Cores there are (or may be).
        count: u32,
    },
    /// A fragment of a gather could not be copied; the gather's earlier fragments were.
    #[error("gather fragment {index}")]
    Fragment {
        /// The fragment's index.
        index: usize,
        /// Why.
        #[source]
        source: Box<HostMemoryError>,
    },
}

type Registry = Mutex<Vec<(usize, usize)>>;

/// The host-memory backend: `devices` devices of `bytes` each. Cheap to clone.
#[derive(Clone, Debug)]
pub struct HostMemoryBackend {
    devices: Arc<[HostMemoryDevice]>,
    registry: Arc<Registry>,
}

thread_local! {
    static CURRENT: Cell<u32> = const { Cell::new(0) };
}

impl HostMemoryBackend {
    /// A backend of `devices` devices with `bytes` of memory each.
    ///
    /// # Errors
    /// [`HostMemoryError::TooManyDevices`] above [`MAX_DEVICES`].
    pub fn new(devices: u32, bytes: u64) -> Result<Self, HostMemoryError> {
        Self::build(devices, bytes, false)
    }

    /// As [`new`](Self::new), each stream running its work in order on a host thread of its
    /// own: enqueueing returns at once, a record completes when its stream reaches it, a
    /// stream waiting for an event waits (on its thread) for that record, and synchronizing
    /// waits for the work. Device code on two streams runs at the same time, as on a device
    /// (the runtime's AICore entry waits for its cores while its AICPU entry runs).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_stream_threads(devices: u32, bytes: u64) -> Result<Self, HostMemoryError> {
        Self::build(devices, bytes, true)
    }

    fn build(devices: u32, bytes: u64, stream_threads: bool) -> Result<Self, HostMemoryError> {
        if devices > MAX_DEVICES {
            return Err(HostMemoryError::TooManyDevices { asked: devices });
        }
        let registry = Arc::new(Mutex::new(Vec::new()));
        let devices = (0..devices)
            .map(|ordinal| {
                HostMemoryDevice(Arc::new(DeviceInner {
                    shared: Arc::new(Shared {
                        ordinal,
                        capacity: bytes,
                        heap: Mutex::new(Heap {
                            next: HBM_BASE + (u64::from(ordinal) << 40),
                            ..Heap::default()
                        }),
                        registry: registry.clone(),
                        armed: Mutex::new(Vec::new()),
                        stats: Stats::default(),
                        stream_threads,
                    }),
                    null: OnceLock::new(),
                    programs: program::Programs::default(),
                    bells: mapped::Bells::default(),
                }))
            })
            .collect();
        Ok(Self { devices, registry })
    }

    /// Bytes registered, over every live registration.
    pub fn registered_bytes(&self) -> usize {
        lock(&self.registry).iter().map(|r| r.1).sum()
    }
}

impl Backend for HostMemoryBackend {
    type Device = HostMemoryDevice;
    type HostRegistration = HostMemoryRegistration;

    fn device_count(&self) -> u32 {
        self.devices.len() as u32
    }

    fn device(&self, ordinal: u32) -> Result<&HostMemoryDevice, BackendError> {
        self.devices.get(ordinal as usize).ok_or_else(|| {
            BackendError::typed(
                BackendOp::Device,
                HostMemoryError::NoSuchDevice { ordinal, count: self.device_count() },
            )
        })
    }

    fn current_ordinal(&self) -> u32 {
        CURRENT.with(Cell::get)
    }

    fn set_current_device(&self, ordinal: u32) -> Result<(), BackendError> {
        self.device(ordinal)?;
        CURRENT.with(|c| c.set(ordinal));
        Ok(())
    }

    unsafe fn register_host(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<HostMemoryRegistration, BackendError> {
        let addr = ptr as usize;
        let bad = || {
            BackendError::typed(
                BackendOp::RegisterHost,
                HostMemoryError::BadRegistration { addr, len },
            )
        };
        let end = addr.checked_add(len).filter(|_| addr != 0 && len != 0).ok_or_else(bad)?;
        let mut r = lock(&self.registry);
        if r.iter().any(|&(a, l)| addr < a + l && a < end) {
            return Err(bad());
        }
        r.push((addr, len));
        Ok(HostMemoryRegistration { registry: self.registry.clone(), addr, len })
    }
}

/// A registered host range; unregistered on drop.
#[derive(Debug)]
pub struct HostMemoryRegistration {
    registry: Arc<Registry>,
    addr: usize,
    len: usize,
}

impl HostMapping for HostMemoryRegistration {
    fn alias(&self, ordinal: u32, ptr: *const u8, len: usize) -> Option<DevicePtr> {
        let p = ptr as usize;
        let inside = p >= self.addr && p.checked_add(len)? <= self.addr + self.len;
        (inside && ordinal < MAX_DEVICES).then(|| DevicePtr(alias_base(ordinal) + p as u64))
    }
}

impl Drop for HostMemoryRegistration {
    fn drop(&mut self) {
        lock(&self.registry).retain(|&r| r != (self.addr, self.len));
    }
}

fn alias_base(ordinal: u32) -> u64 {
    ALIAS_BASE + (u64::from(ordinal) << 48)
}

/// What one device has done (statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostMemoryStats {
    /// Counted kernel launches.
    pub launches: u64,
    /// Streams created (the null stream included).
    pub streams_created: u64,
    /// Copies that joined a [`HostMemoryCopyGroup`].
    pub grouped_copies: u64,
    /// Bytes allocated and not freed.
    pub allocated_bytes: u64,
}

#[derive(Debug, Default)]
struct Stats {
    launches: AtomicU64,
    streams: AtomicU64,
    grouped: AtomicU64,
}

/// 64 bytes of device memory, aligned as a device allocation is (so the host may map an
/// allocation for atomic word accesses, [`MappedMemory`](crate::MappedMemory)).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Line([u8; 64]);

#[derive(Debug, Default)]
struct Heap {
    /// Live allocations by start address: (length, bytes, in 64-byte lines).
    allocs: BTreeMap<u64, (u64, Box<[Line]>)>,
    next: u64,
    used: u64,
}

#[derive(Debug)]
struct Shared {
    ordinal: u32,
    capacity: u64,
    heap: Mutex<Heap>,
    registry: Arc<Registry>,
    /// Armed faults: the operation and how many of its occurrences pass before it fails.
    armed: Mutex<Vec<(BackendOp, u64)>>,
    stats: Stats,
    /// Each stream runs its work on a thread of its own.
    stream_threads: bool,
}

impl Shared {
    /// Fails `op` when a fault for it is armed (consuming it).
    fn check(&self, op: BackendOp) -> Result<(), BackendError> {
        let mut a = lock(&self.armed);
        match a.iter().position(|&(o, _)| o == op) {
            Some(i) if a[i].1 == 0 => {
                a.remove(i);
                Err(BackendError::typed(op, HostMemoryError::Injected { op }))
            }
            Some(i) => {
                a[i].1 -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn bad(&self, ptr: u64, len: u64) -> HostMemoryError {
        HostMemoryError::BadAddress { ordinal: self.ordinal, ptr: DevicePtr(ptr), len }
    }

    /// The host pointer behind device range `[ptr, ptr + len)`: inside one live allocation
    /// of `heap` or one live registration reached through this device's alias.
    fn resolve(&self, heap: &mut Heap, ptr: u64, len: u64) -> Result<*mut u8, HostMemoryError> {
        let end = ptr.checked_add(len).ok_or_else(|| self.bad(ptr, len))?;
        let base = alias_base(self.ordinal);
        if (base..base + (1 << 48)).contains(&ptr) {
            let (h, e) = ((ptr - base) as usize, (end - base) as usize);
            let reg = lock(&self.registry);
            if reg.iter().any(|&(a, l)| h >= a && e <= a + l) {
                return Ok(h as *mut u8);
            }
            return Err(self.bad(ptr, len));
        }
        match heap.allocs.range_mut(..=ptr).next_back() {
            Some((&s, (l, buf))) if end <= s + *l => {
                // SAFETY: in bounds: `ptr - s + len <= l <= 64 * buf.len()`, the bytes of
                // `buf`.
                Ok(unsafe { buf.as_mut_ptr().cast::<u8>().add((ptr - s) as usize) })
            }
            _ => Err(self.bad(ptr, len)),
        }
    }

    /// Copies `len` bytes between two resolved sides. `src`/`dst` are device addresses when
    /// `*_dev`, else host pointers the caller vouched for.
    ///
    /// # Safety
    /// A host side is valid for `len` bytes (reads for `src`, writes for `dst`) and not
    /// accessed by anything else during the call.
    unsafe fn copy(
        &self,
        kind: CopyKind,
        src: u64,
        dst: u64,
        len: u64,
    ) -> Result<(), HostMemoryError> {
        if len == 0 {
            return Ok(());
        }
        let mut heap = lock(&self.heap);
        let s = match kind {
            CopyKind::Htod => src as *const u8,
            CopyKind::Dtoh | CopyKind::Dtod => self.resolve(&mut heap, src, len)?,
        };
        let d = match kind {
            CopyKind::Dtoh => dst as *mut u8,
            CopyKind::Htod | CopyKind::Dtod => self.resolve(&mut heap, dst, len)?,
        };
        // SAFETY: device sides were resolved inside live allocations or registrations (held by
        // the heap lock and the registrations' owners); host sides are the caller's promise.
        // `copy` allows the two to overlap.
        unsafe { std::ptr::copy(s, d, len as usize) };
        Ok(())
    }

    /// The gather kernel's body: `count` descriptors at `table`, each fragment copied
    /// between device-side addresses.
    fn gather(&self, table: u64, count: usize) -> Result<(), HostMemoryError> {
        let bytes = (count * FRAGMENT_BYTES) as u64;
        let descriptors: Vec<GatherFragment> = {
            let mut heap = lock(&self.heap);
            let t = self.resolve(&mut heap, table, bytes)?;
            (0..count)
                // SAFETY: `t` addresses `count * 24` bytes of a live allocation (resolved
                // above, under the heap lock still held); `read_unaligned` needs no alignment.
                .map(|i| unsafe {
                    (t.add(i * FRAGMENT_BYTES) as *const GatherFragment).read_unaligned()
                })
                .collect()
        };
        for (index, f) in descriptors.iter().enumerate() {
            // SAFETY: both sides are device addresses, resolved and bounds-checked by `copy`.
            unsafe { self.copy(CopyKind::Dtod, f.src, f.dst, f.bytes) }
                .map_err(|e| HostMemoryError::Fragment { index, source: Box::new(e) })?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct DeviceInner {
    shared: Arc<Shared>,
    null: OnceLock<HostMemoryStream>,
    programs: program::Programs,
    bells: mapped::Bells,
}

/// One device of a [`HostMemoryBackend`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct HostMemoryDevice(Arc<DeviceInner>);

impl HostMemoryDevice {
    /// Makes the next `op` on this device fail once with [`HostMemoryError::Injected`]
    /// (arming the same operation twice fails its next two).
    pub fn fail_next(&self, op: BackendOp) {
        self.fail_nth(op, 1);
    }

    /// Makes the `n`-th (1-based, counted from now) next `op` on this device fail once; `n`
    /// of 0 is taken as 1.
    pub fn fail_nth(&self, op: BackendOp, n: u64) {
        lock(&self.0.shared.armed).push((op, n.saturating_sub(1)));
    }

    /// Faults armed and not yet injected.
    pub fn armed(&self) -> usize {
        lock(&self.0.shared.armed).len()
    }

    /// What the device has done.
    pub fn stats(&self) -> HostMemoryStats {
        let s = &self.0.shared.stats;
        // Relaxed: statistics; readers synchronise through the calls that produced them.
        HostMemoryStats {
            launches: s.launches.load(Ordering::Relaxed),
            streams_created: s.streams.load(Ordering::Relaxed),
            grouped_copies: s.grouped.load(Ordering::Relaxed),
            allocated_bytes: lock(&self.0.shared.heap).used,
        }
    }

    fn stream(&self) -> HostMemoryStream {
        // Relaxed: a statistic.
        self.0.shared.stats.streams.fetch_add(1, Ordering::Relaxed);
        static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);
        // Relaxed: a unique id; nothing is published through it.
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        HostMemoryStream::new(self.0.shared.clone(), id, Arc::downgrade(&self.0))
    }
}

impl BackendDevice for HostMemoryDevice {
    type Stream = HostMemoryStream;
    type Pinned = HostMemoryPinned;

    fn ordinal(&self) -> u32 {
        self.0.shared.ordinal
    }

    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        let s = &self.0.shared;
        s.check(BackendOp::Malloc)?;
        let mut heap = lock(&s.heap);
        let free = s.capacity - heap.used;
        if bytes == 0 || bytes > free {
            return Err(BackendError::typed(
                BackendOp::Malloc,
                HostMemoryError::OutOfMemory { bytes, free },
            ));
        }
        let len = usize::try_from(bytes).map_err(|_| {
            BackendError::typed(BackendOp::Malloc, HostMemoryError::OutOfMemory { bytes, free })
        })?;
        let at = heap.next;
        heap.next += bytes.div_ceil(ALIGN) * ALIGN;
        heap.used += bytes;
        let lines = vec![Line([0; 64]); len.div_ceil(64)].into_boxed_slice();
        heap.allocs.insert(at, (bytes, lines));
        Ok(DevicePtr(at))
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        let s = &self.0.shared;
        let mut heap = lock(&s.heap);
        let (len, _) = heap
            .allocs
            .remove(&ptr.0)
            .ok_or_else(|| BackendError::typed(BackendOp::Free, s.bad(ptr.0, 0)))?;
        heap.used -= len;
        Ok(())
    }

    fn is_allocated(&self, ptr: DevicePtr, len: u64) -> bool {
        let heap = lock(&self.0.shared.heap);
        let end = ptr.0.checked_add(len);
        matches!((heap.allocs.range(..=ptr.0).next_back(), end), (Some((&s, (l, _))), Some(e)) if e <= s + *l)
    }

    fn create_stream(&self) -> Result<HostMemoryStream, BackendError> {
        self.0.shared.check(BackendOp::CreateStream)?;
        Ok(self.stream())
    }

    fn null_stream(&self) -> Result<&HostMemoryStream, BackendError> {
        Ok(self.0.null.get_or_init(|| self.stream()))
    }

    fn copy_engine_count(&self) -> usize {
        COPY_ENGINES
    }

    fn queue_counts(&self) -> QueueCounts {
        QueueCounts::default()
    }

    fn alloc_pinned(&self, len: usize) -> Result<HostMemoryPinned, BackendError> {
        self.0.shared.check(BackendOp::PinnedAlloc)?;
        Ok(HostMemoryPinned::new(len, self.0.shared.clone()))
    }

    fn synchronize_event(
        &self,
        event: &EventOf<Self>,
        timeout: Option<Duration>,
    ) -> Result<(), BackendError> {
        self.0.shared.check(BackendOp::Wait)?;
        match event.wait_for(event.recorded(), timeout) {
            true => Ok(()),
            false => Err(BackendError::typed(BackendOp::Wait, HostMemoryError::TimedOut)),
        }
    }
}

/// A copy group of the host-memory backend. Its copies run one at a time on their callers'
/// threads, so none waits for the others: the group counts who arrived and who withdrew.
#[derive(Debug)]
pub struct HostMemoryCopyGroup {
    parties: AtomicU64,
    arrived: AtomicU64,
}

impl HostMemoryCopyGroup {
    fn arrive(&self) {
        // Relaxed: counts read after the copies returned, on the same or a joined thread.
        self.arrived.fetch_add(1, Ordering::Relaxed);
    }

    /// Parties still expected (the initial count minus withdrawals).
    pub fn parties(&self) -> u64 {
        // Relaxed: see `arrive`.
        self.parties.load(Ordering::Relaxed)
    }

    /// Copies that arrived.
    pub fn arrived(&self) -> u64 {
        // Relaxed: see `arrive`.
        self.arrived.load(Ordering::Relaxed)
    }
}

impl CopyGroup for HostMemoryCopyGroup {
    fn with_parties(parties: usize) -> Self {
        Self { parties: AtomicU64::new(parties as u64), arrived: AtomicU64::new(0) }
    }

    fn withdraw(&self) {
        // Relaxed: see `arrive`.
        let _ =
            self.parties.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| p.checked_sub(1));
    }
}
