//! Pinned (page-locked) host memory: the staging source of asynchronous host-to-device copies.
//!
//! [`Device::alloc_pinned`] hands out a [`PinnedBuffer`]: zeroed, page-aligned host bytes that
//! stream copies may read while the host goes on working. Allocation checks
//! [`FaultPoint::HostAlloc`]; the explicit [`PinnedBuffer::free`] checks [`FaultPoint::HostFree`]
//! and, when it fails, hands the buffer back so the caller keeps ownership and can retry. A
//! buffer that a DMA reader may still use must never be freed: [`PinnedBuffer::leak`] keeps it
//! allocated for the rest of the process (fatal abandonment) and counts it.
//!
//! Each device counts its pinned bytes ([`Device::pinned_stats`]). These are host allocations,
//! outside the device's HBM budget.
//!
//! # Examples
//! ```
//! use ferry_sim::fault::FaultPoint;
//! use ferry_sim::{Arch, PlatformBuilder};
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build()?;
//! let dev = p.device(0)?;
//! let mut buf = dev.alloc_pinned(4096)?;
//! // SAFETY: no copy reads or writes `buf` yet.
//! unsafe { buf.as_mut_slice()[..4].copy_from_slice(&[1, 2, 3, 4]) };
//! assert_eq!(dev.pinned_stats().live_bytes, 4096);
//!
//! // A failed free hands the buffer back; the retry succeeds.
//! dev.faults().fail_next(FaultPoint::HostFree);
//! let buf = buf.free().unwrap_err().into_buffer();
//! buf.free().map_err(|e| e.error)?;
//! assert_eq!(dev.pinned_stats().live_bytes, 0);
//! # Ok::<(), ferry_sim::DeviceError>(())
//! ```
use crate::device::{Device, DeviceInner};
use crate::error::DeviceError;
use crate::fault::FaultPoint;
use crate::sync::{lock, Arc, AtomicU64, Mutex, Ordering};
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Weak;

/// Alignment of pinned buffers (one host page).
pub const PINNED_ALIGN: usize = 4096;

/// Per-device pinned-memory counters.
#[derive(Debug, Default)]
struct PinnedCounters {
    live_bytes: AtomicU64,
    allocs: AtomicU64,
    frees: AtomicU64,
    failed_frees: AtomicU64,
    leaked_bytes: AtomicU64,
}

impl PinnedCounters {
    fn add(cell: &AtomicU64, n: u64) {
        // Relaxed: statistics only; readers synchronise through the operation that made the
        // count meaningful (the call that returned), not through the counter.
        cell.fetch_add(n, Ordering::Relaxed);
    }

    fn sub(cell: &AtomicU64, n: u64) {
        // Relaxed: see `add`.
        cell.fetch_sub(n, Ordering::Relaxed);
    }

    fn get(cell: &AtomicU64) -> u64 {
        // Relaxed: see `add`.
        cell.load(Ordering::Relaxed)
    }
}

/// A point-in-time copy of a device's pinned-memory counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinnedStats {
    /// Bytes currently allocated (including leaked buffers, which stay allocated).
    pub live_bytes: u64,
    /// Successful allocations.
    pub allocs: u64,
    /// Successful frees (explicit or by drop).
    pub frees: u64,
    /// Frees that failed and handed the buffer back.
    pub failed_frees: u64,
    /// Bytes deliberately leaked by [`PinnedBuffer::leak`].
    pub leaked_bytes: u64,
}

/// The counters live in a side table keyed by device, so that pinned memory needs no field in
/// the device itself. Entries of dropped devices are pruned on the next lookup.
static TABLE: Mutex<Vec<(Weak<DeviceInner>, Arc<PinnedCounters>)>> = Mutex::new(Vec::new());

fn counters_of(dev: &Device) -> Arc<PinnedCounters> {
    let mut t = lock(&TABLE);
    t.retain(|(w, _)| w.strong_count() > 0);
    let me = Arc::as_ptr(&dev.0);
    if let Some((_, c)) = t.iter().find(|(w, _)| std::ptr::eq(w.as_ptr(), me)) {
        return c.clone();
    }
    let c = Arc::new(PinnedCounters::default());
    t.push((Arc::downgrade(&dev.0), c.clone()));
    c
}

impl Device {
    /// Allocates `len` bytes of zeroed, page-aligned pinned host memory.
    ///
    /// # Errors
    /// An injected [`FaultPoint::HostAlloc`], or [`DeviceError::Resource`] when the host is out
    /// of memory.
    ///
    /// # Examples
    /// ```
    /// # use ferry_sim::{Arch, PlatformBuilder};
    /// # let p = PlatformBuilder::new(Arch::A5).hbm_bytes(1 << 24).build()?;
    /// let buf = p.device(0)?.alloc_pinned(100)?;
    /// assert_eq!(buf.len(), 100);
    /// assert_eq!(buf.as_ptr() as usize % ferry_sim::pinned::PINNED_ALIGN, 0);
    /// # Ok::<(), ferry_sim::DeviceError>(())
    /// ```
    pub fn alloc_pinned(&self, len: usize) -> Result<PinnedBuffer, DeviceError> {
        self.faults().check(FaultPoint::HostAlloc).inspect_err(|_| self.fault_counted())?;
        let layout = Layout::from_size_align(len.max(1), PINNED_ALIGN).map_err(|_| {
            DeviceError::Resource(format!("pinned allocation of {len} bytes is too large"))
        })?;
        // SAFETY: `layout` has a non-zero size (`len.max(1)`).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            DeviceError::Resource(format!("host out of memory for {len} pinned bytes"))
        })?;
        let counters = counters_of(self);
        PinnedCounters::add(&counters.live_bytes, len as u64);
        PinnedCounters::add(&counters.allocs, 1);
        Ok(PinnedBuffer { ptr, len, layout, device: self.clone(), counters })
    }

    /// This device's pinned-memory counters.
    pub fn pinned_stats(&self) -> PinnedStats {
        let c = counters_of(self);
        PinnedStats {
            live_bytes: PinnedCounters::get(&c.live_bytes),
            allocs: PinnedCounters::get(&c.allocs),
            frees: PinnedCounters::get(&c.frees),
            failed_frees: PinnedCounters::get(&c.failed_frees),
            leaked_bytes: PinnedCounters::get(&c.leaked_bytes),
        }
    }
}

/// Pinned host memory of one device. Freed by [`free`](Self::free) (fallible) or on drop.
///
/// The buffer holds its device (a child holds its parent), so the counters outlive no parent.
pub struct PinnedBuffer {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
    device: Device,
    counters: Arc<PinnedCounters>,
}

// SAFETY: the buffer exclusively owns its allocation (nothing else holds `ptr` except stream
// copies, whose callers promised in `copy_htod_async`'s contract to keep the bytes alive and
// unwritten until the copy completes); moving the owner to another thread moves that ownership.
unsafe impl Send for PinnedBuffer {}
// SAFETY: `&PinnedBuffer` gives out only the address and length; every access to the bytes goes
// through an `unsafe fn` whose caller excludes concurrent writers.
unsafe impl Sync for PinnedBuffer {}

impl std::fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("device", &self.device.ordinal())
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// A failed [`PinnedBuffer::free`]: the buffer comes back, still allocated and owned.
pub struct FreeError {
    /// The buffer that was not freed.
    pub buffer: PinnedBuffer,
    /// Why.
    pub error: DeviceError,
}

impl FreeError {
    /// The buffer, for a later retry.
    pub fn into_buffer(self) -> PinnedBuffer {
        self.buffer
    }
}

impl std::fmt::Debug for FreeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FreeError")
            .field("len", &self.buffer.len)
            .field("error", &self.error)
            .finish()
    }
}

impl std::fmt::Display for FreeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "freeing {} pinned bytes failed: {}", self.buffer.len, self.error)
    }
}

impl std::error::Error for FreeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl PinnedBuffer {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device this buffer belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// First byte, for enqueueing copies.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    ///
    /// # Safety
    /// - no asynchronous copy that writes these bytes is in flight while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of at least `len` bytes, initialised by
        // `alloc_zeroed`; no concurrent writer exists by the caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, writable.
    ///
    /// # Safety
    /// - no asynchronous copy that reads or writes these bytes is in flight while the slice
    ///   lives (a DMA reader would see a torn image).
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`; `&mut self` excludes other host references, and the caller
        // excludes device-side readers.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Frees the buffer.
    ///
    /// # Errors
    /// An injected [`FaultPoint::HostFree`]: the buffer comes back in the error, still
    /// allocated, so the caller keeps ownership and can retry.
    pub fn free(self) -> Result<(), FreeError> {
        if let Err(e) = self.device.faults().check(FaultPoint::HostFree) {
            self.device.fault_counted();
            PinnedCounters::add(&self.counters.failed_frees, 1);
            return Err(FreeError { buffer: self, error: e.into() });
        }
        drop(self);
        Ok(())
    }

    /// Keeps the memory allocated for the rest of the process (a DMA reader may still use it)
    /// and returns its address. Counted in [`PinnedStats::leaked_bytes`]; the bytes stay in
    /// [`PinnedStats::live_bytes`].
    pub fn leak(self) -> *const u8 {
        PinnedCounters::add(&self.counters.leaked_bytes, self.len as u64);
        let p = self.ptr.as_ptr() as *const u8;
        std::mem::forget(self);
        p
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is freed only here (`leak`
        // forgets the value, so it never reaches this drop).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
        PinnedCounters::sub(&self.counters.live_bytes, self.len as u64);
        PinnedCounters::add(&self.counters.frees, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Arch, PlatformBuilder};

    #[test]
    fn alloc_fault_and_free_fault_keep_ownership() {
        let _bound = ferry_watchdog::bound("the other thread");
        let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 24).build().unwrap();
        let d = p.device(0).unwrap();
        d.faults().fail_next(FaultPoint::HostAlloc);
        assert!(matches!(d.alloc_pinned(64), Err(DeviceError::Injected(_))));
        assert_eq!(d.pinned_stats().live_bytes, 0);
        let b = d.alloc_pinned(64).unwrap();
        d.faults().fail_next(FaultPoint::HostFree);
        let b = b.free().unwrap_err().into_buffer();
        assert_eq!(d.pinned_stats().live_bytes, 64);
        assert_eq!(d.pinned_stats().failed_frees, 1);
        b.free().unwrap();
        let s = d.pinned_stats();
        assert_eq!((s.live_bytes, s.allocs, s.frees), (0, 1, 1));
        let leaked = d.alloc_pinned(128).unwrap().leak();
        assert!(!leaked.is_null());
        assert_eq!(d.pinned_stats().live_bytes, 128);
        assert_eq!(d.pinned_stats().leaked_bytes, 128);
    }

    #[test]
    fn counters_are_per_device() {
        let _bound = ferry_watchdog::bound("the other thread");
        let p = PlatformBuilder::new(Arch::A5).devices(2).hbm_bytes(1 << 24).build().unwrap();
        let _a = p.device(0).unwrap().alloc_pinned(10).unwrap();
        assert_eq!(p.device(0).unwrap().pinned_stats().live_bytes, 10);
        assert_eq!(p.device(1).unwrap().pinned_stats().live_bytes, 0);
    }
}
