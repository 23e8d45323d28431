//! Device-visible memory: the [`DeviceMemory`] platform trait, the [`ShmRegion`] view both sides
//! access, and three implementations (SVM, non-SVM mirror, and a recording spy).
//!
//! The transport touches a region only through:
//!
//! * [`ShmRegion`] word operations (`load_u32`/`store_u32`/`load_u64`/`store_u64`): atomic, so a
//!   host thread and a device thread may touch the same word; records are written with plain stores
//!   and published by the ready-queue tail's `Release` store;
//! * [`DeviceMemory::read_range_from_device`] before every host read of a device-written word, and
//!   [`DeviceMemory::write_range_to_device`] after every host write of a host-owned word (memory
//!   ordering across the PCIe boundary). On SVM both are no-ops; on a non-SVM platform they
//!   copy exactly that range between the host mirror and device memory. There is no bulk
//!   write-back: [`MirroredMemory`] refuses a write wider than [`MAX_NARROW_WRITE`] bytes;
//! * [`DeviceMemory::read_owned_from_device`] for a published buffer the host owns: one bulk copy
//!   (a plain `memcpy` on the mirror), after the `Acquire` load of the ready-queue tail that
//!   handed the buffer over — not a word-by-word atomic loop.
//!
//! Offsets are relative to the start of the region; the device address of offset 0 is
//! [`DeviceMemory::device_addr`].

use core::fmt;

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Arc;

mod shm;

pub use shm::ShmRegion;

/// Hints the CPU that the cache line holding `p` will be written soon (`prefetchw` /
/// `prefetcht0` on x86-64, `prfm pstl1keep` on aarch64, nothing elsewhere or under loom; see
/// `prefetch`), so its read-for-ownership overlaps the work before the write instead of stalling
/// it.
///
/// A hint only: it reads and writes nothing, never faults and may be ignored, so any address is
/// allowed. The device writers use it a few lines ahead of their streams of records and payloads:
/// each stream advances a record per task among dozens of streams per thread (too slowly and too
/// many for the hardware prefetcher), into buffers the host last read on another CPU.
///
/// # Examples
/// ```
/// let buf = vec![0u8; 4096];
/// ferry_dfx::mem::prefetch_write(buf[256..].as_ptr());
/// // A hint changes no byte.
/// assert!(buf.iter().all(|&b| b == 0));
/// ```
#[inline(always)]
pub fn prefetch_write(p: *const u8) {
    prefetch::<true>(p);
}

/// Hints the CPU that the cache line holding `p` will be read soon (`prefetcht0` on x86-64,
/// `prfm pldl1keep` on aarch64, nothing elsewhere or under loom). A hint only, as
/// [`prefetch_write`]: any address is allowed.
///
/// # Examples
/// ```
/// let buf = vec![7u8; 256];
/// ferry_dfx::mem::prefetch_read(buf[128..].as_ptr());
/// assert_eq!(buf[128], 7);
/// ```
#[inline(always)]
pub fn prefetch_read(p: *const u8) {
    prefetch::<false>(p);
}

/// The two hints: for a write (`prefetchw` where the build targets `prfchw`, else `prefetcht0`:
/// the line comes in shared and its upgrade to exclusive is then a short invalidation rather than
/// a full miss; on the 2-core VMs both measured the same) or for a read (`prefetcht0`); on
/// aarch64 `prfm pstl1keep` / `prfm pldl1keep`; nothing elsewhere or under loom.
#[inline(always)]
fn prefetch<const WRITE: bool>(p: *const u8) {
    #[cfg(all(not(ferry_loom), target_arch = "x86_64"))]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint: it has no architectural effect on memory and does not
        // fault on any address.
        unsafe {
            if WRITE {
                _mm_prefetch::<_MM_HINT_ET0>(p.cast())
            } else {
                _mm_prefetch::<_MM_HINT_T0>(p.cast())
            }
        };
    }
    #[cfg(all(not(ferry_loom), target_arch = "aarch64"))]
    {
        // SAFETY: as above: `prfm` is a hint that touches no memory architecturally.
        unsafe {
            if WRITE {
                core::arch::asm!("prfm pstl1keep, [{p}]", p = in(reg) p,
                    options(nostack, preserves_flags, readonly))
            } else {
                core::arch::asm!("prfm pldl1keep, [{p}]", p = in(reg) p,
                    options(nostack, preserves_flags, readonly))
            }
        };
    }
    #[cfg(any(ferry_loom, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    let _ = p;
}

/// Widest range one [`DeviceMemory::write_range_to_device`] may cover (one cache line): host writes
/// are narrow field writes, never a bulk write-back that could roll back device-owned words.
pub const MAX_NARROW_WRITE: usize = 64;

/// Why a memory operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemError {
    /// The range is outside the region or not 4-byte aligned.
    OutOfRange {
        /// Offset asked for.
        off: usize,
        /// Length asked for.
        len: usize,
    },
    /// A host→device write wider than [`MAX_NARROW_WRITE`] (a bulk write-back).
    TooWide {
        /// Length asked for.
        len: usize,
    },
    /// The platform failed the copy (fault injection, lost device).
    Failed,
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange { off, len } => write!(f, "range {off}+{len} outside the region"),
            Self::TooWide { len } => write!(f, "device write of {len} bytes is not a narrow write"),
            Self::Failed => f.write_str("device memory operation failed"),
        }
    }
}

impl std::error::Error for MemError {}

/// The platform's view of one device-visible region.
///
/// ferry-sim implements this through a thin adapter over its device memory; this crate ships
/// [`SvmMemory`] (a2a3: one shared mapping), [`MirroredMemory`] (a5: host mirror + explicit copies)
/// and [`SpyMemory`] (records every operation, for tests).
///
/// # Examples
/// ```
/// use ferry_dfx::mem::{DeviceMemory, MirroredMemory};
/// let m = MirroredMemory::new(256, 0x1000_0000);
/// m.host_view().store_u32(64, 7, std::sync::atomic::Ordering::Release);
/// assert_eq!(m.device_view().load_u32(64, std::sync::atomic::Ordering::Acquire), 0);
/// m.write_range_to_device(64, 4).unwrap();
/// assert_eq!(m.device_view().load_u32(64, std::sync::atomic::Ordering::Acquire), 7);
/// assert!(m.write_range_to_device(0, 256).is_err()); // no bulk write-back
/// ```
pub trait DeviceMemory: Send + Sync + 'static {
    /// The region as device threads access it.
    fn device_view(&self) -> ShmRegion;
    /// The region as host threads access it: the same memory on SVM, a host mirror otherwise.
    fn host_view(&self) -> ShmRegion;
    /// Device address of offset 0 (what goes into free-queue slots and ready entries).
    fn device_addr(&self) -> u64;
    /// Whether host and device views are the same memory.
    fn is_svm(&self) -> bool;
    /// Makes `[off, off + len)` of the host view visible to the device (no-op on SVM).
    ///
    /// Each call completes before it returns, so two calls are seen by the device in call order
    /// (slot before tail). Copies are word-atomic with `Release` stores into device memory.
    ///
    /// # Errors
    /// [`MemError`] when the range is invalid, too wide, or the platform fails.
    fn write_range_to_device(&self, off: usize, len: usize) -> Result<(), MemError>;
    /// Refreshes `[off, off + len)` of the host view from device memory (no-op on SVM).
    ///
    /// Copies are word-atomic with `Acquire` loads from device memory.
    ///
    /// # Errors
    /// [`MemError`] when the range is invalid or the platform fails.
    fn read_range_from_device(&self, off: usize, len: usize) -> Result<(), MemError>;
    /// Refreshes `[off, off + len)` of the host view from device memory with one bulk copy
    /// (no-op on SVM), for a range the host owns: a published buffer (its ready entry was taken
    /// with an `Acquire` load of the tail, and the device does not write it again until the host
    /// returns it through a free queue), or a finished writer's state. The default is
    /// [`read_range_from_device`](Self::read_range_from_device).
    ///
    /// # Safety
    /// No thread writes `[off, off + len)` of either view during the call.
    ///
    /// # Errors
    /// [`MemError`] when the range is invalid or the platform fails.
    unsafe fn read_owned_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        self.read_range_from_device(off, len)
    }
}

impl<M: DeviceMemory + ?Sized> DeviceMemory for std::sync::Arc<M> {
    fn device_view(&self) -> ShmRegion {
        (**self).device_view()
    }
    fn host_view(&self) -> ShmRegion {
        (**self).host_view()
    }
    fn device_addr(&self) -> u64 {
        (**self).device_addr()
    }
    fn is_svm(&self) -> bool {
        (**self).is_svm()
    }
    fn write_range_to_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        (**self).write_range_to_device(off, len)
    }
    fn read_range_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        (**self).read_range_from_device(off, len)
    }
    unsafe fn read_owned_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        // SAFETY: the caller's guarantee is passed on unchanged.
        unsafe { (**self).read_owned_from_device(off, len) }
    }
}

fn check_range(region: &ShmRegion, off: usize, len: usize) -> Result<(), MemError> {
    if off % 4 != 0 || len % 4 != 0 || off.checked_add(len).is_none_or(|e| e > region.len()) {
        return Err(MemError::OutOfRange { off, len });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Implementations
// ---------------------------------------------------------------------------------------------

/// SVM region (a2a3): host and device share one mapping, the range operations are no-ops.
#[derive(Clone, Debug)]
pub struct SvmMemory {
    region: ShmRegion,
    device_addr: u64,
}

impl SvmMemory {
    /// A zeroed shared region of `len` bytes whose offset 0 the device sees at `device_addr`.
    pub fn new(len: usize, device_addr: u64) -> Self {
        Self { region: ShmRegion::zeroed(len), device_addr }
    }
}

impl DeviceMemory for SvmMemory {
    fn device_view(&self) -> ShmRegion {
        self.region.clone()
    }
    fn host_view(&self) -> ShmRegion {
        self.region.clone()
    }
    fn device_addr(&self) -> u64 {
        self.device_addr
    }
    fn is_svm(&self) -> bool {
        true
    }
    fn write_range_to_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        check_range(&self.region, off, len)
    }
    fn read_range_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        check_range(&self.region, off, len)
    }
}

/// Byte and call counters of a [`MirroredMemory`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MirrorCounters {
    /// `write_range_to_device` calls.
    pub htod_ops: u64,
    /// Bytes copied host → device.
    pub htod_bytes: u64,
    /// `read_range_from_device` calls.
    pub dtoh_ops: u64,
    /// Bytes copied device → host.
    pub dtoh_bytes: u64,
}

#[derive(Debug, Default)]
struct Counters {
    htod_ops: AtomicU64,
    htod_bytes: AtomicU64,
    dtoh_ops: AtomicU64,
    dtoh_bytes: AtomicU64,
}

/// Non-SVM region (a5): device memory plus a separate host mirror; the range operations copy
/// exactly the range asked for and count the bytes. There is no bulk write-back: a host→device
/// write wider than [`MAX_NARROW_WRITE`] is refused.
#[derive(Clone, Debug)]
pub struct MirroredMemory {
    device: ShmRegion,
    host: ShmRegion,
    device_addr: u64,
    counters: Arc<Counters>,
}

impl MirroredMemory {
    /// A zeroed device region of `len` bytes at `device_addr`, with a zeroed host mirror.
    pub fn new(len: usize, device_addr: u64) -> Self {
        Self {
            device: ShmRegion::zeroed(len),
            host: ShmRegion::zeroed(len),
            device_addr,
            counters: Arc::new(Counters::default()),
        }
    }

    /// Calls and bytes copied so far.
    pub fn counters(&self) -> MirrorCounters {
        // Relaxed: statistics; nothing is published through them.
        MirrorCounters {
            htod_ops: self.counters.htod_ops.load(Ordering::Relaxed),
            htod_bytes: self.counters.htod_bytes.load(Ordering::Relaxed),
            dtoh_ops: self.counters.dtoh_ops.load(Ordering::Relaxed),
            dtoh_bytes: self.counters.dtoh_bytes.load(Ordering::Relaxed),
        }
    }
}

impl DeviceMemory for MirroredMemory {
    fn device_view(&self) -> ShmRegion {
        self.device.clone()
    }
    fn host_view(&self) -> ShmRegion {
        self.host.clone()
    }
    fn device_addr(&self) -> u64 {
        self.device_addr
    }
    fn is_svm(&self) -> bool {
        false
    }
    fn write_range_to_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        check_range(&self.host, off, len)?;
        if len > MAX_NARROW_WRITE {
            return Err(MemError::TooWide { len });
        }
        self.device.copy_words_from(&self.host, off, len, false);
        // Relaxed: statistics only.
        self.counters.htod_ops.fetch_add(1, Ordering::Relaxed);
        self.counters.htod_bytes.fetch_add(len as u64, Ordering::Relaxed);
        Ok(())
    }
    fn read_range_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        check_range(&self.host, off, len)?;
        self.host.copy_words_from(&self.device, off, len, true);
        // Relaxed: statistics only.
        self.counters.dtoh_ops.fetch_add(1, Ordering::Relaxed);
        self.counters.dtoh_bytes.fetch_add(len as u64, Ordering::Relaxed);
        Ok(())
    }
    unsafe fn read_owned_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        check_range(&self.host, off, len)?;
        // SAFETY: the range is in bounds of both views (same length, checked above), and the
        // caller guarantees nobody writes it in either view during the call.
        unsafe { self.host.copy_owned_from(&self.device, off, len) };
        // Relaxed: statistics only.
        self.counters.dtoh_ops.fetch_add(1, Ordering::Relaxed);
        self.counters.dtoh_bytes.fetch_add(len as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// One operation seen by a [`SpyMemory`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemOp {
    /// Name of the calling thread (`"<unnamed>"` if none).
    pub thread: String,
    /// What was called.
    pub kind: MemOpKind,
    /// Offset (0 for view requests).
    pub off: usize,
    /// Length (0 for view requests).
    pub len: usize,
}

/// Kind of a [`MemOp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemOpKind {
    /// `device_view()`.
    DeviceView,
    /// `host_view()`.
    HostView,
    /// `write_range_to_device`.
    Write,
    /// `read_range_from_device`.
    Read,
}

/// Wraps a [`DeviceMemory`] and records every call with the calling thread's name.
///
/// Used to prove properties like "the replenish thread never touches device memory".
#[derive(Debug)]
pub struct SpyMemory<M> {
    inner: M,
    ops: std::sync::Mutex<Vec<MemOp>>,
}

impl<M: DeviceMemory> SpyMemory<M> {
    /// Wraps `inner`.
    pub fn new(inner: M) -> Self {
        Self { inner, ops: std::sync::Mutex::new(Vec::new()) }
    }

    /// Every operation recorded so far.
    pub fn ops(&self) -> Vec<MemOp> {
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn note(&self, kind: MemOpKind, off: usize, len: usize) {
        let thread = std::thread::current().name().unwrap_or("<unnamed>").to_owned();
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).push(MemOp { thread, kind, off, len });
    }
}

impl<M: DeviceMemory> DeviceMemory for SpyMemory<M> {
    fn device_view(&self) -> ShmRegion {
        self.note(MemOpKind::DeviceView, 0, 0);
        self.inner.device_view()
    }
    fn host_view(&self) -> ShmRegion {
        self.note(MemOpKind::HostView, 0, 0);
        self.inner.host_view()
    }
    fn device_addr(&self) -> u64 {
        self.inner.device_addr()
    }
    fn is_svm(&self) -> bool {
        self.inner.is_svm()
    }
    fn write_range_to_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        self.note(MemOpKind::Write, off, len);
        self.inner.write_range_to_device(off, len)
    }
    fn read_range_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        self.note(MemOpKind::Read, off, len);
        self.inner.read_range_from_device(off, len)
    }
    unsafe fn read_owned_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        self.note(MemOpKind::Read, off, len);
        // SAFETY: the caller's guarantee is passed on unchanged.
        unsafe { self.inner.read_owned_from_device(off, len) }
    }
}

#[cfg(all(test, not(ferry_loom)))]
mod tests {
    use super::*;

    #[test]
    fn mirror_copies_only_the_range_and_counts_bytes() {
        let _bound = ferry_watchdog::bound("the other thread");
        let m = MirroredMemory::new(256, 0x4000);
        let h = m.host_view();
        h.store_u32(8, 1, Ordering::Relaxed);
        h.store_u64(16, 2, Ordering::Relaxed);
        m.write_range_to_device(16, 8).unwrap();
        let d = m.device_view();
        assert_eq!(d.load_u32(8, Ordering::Relaxed), 0);
        assert_eq!(d.load_u64(16, Ordering::Relaxed), 2);
        d.store_u32(100, 9, Ordering::Relaxed);
        m.read_range_from_device(100, 4).unwrap();
        assert_eq!(h.load_u32(100, Ordering::Relaxed), 9);
        assert_eq!(
            m.counters(),
            MirrorCounters { htod_ops: 1, htod_bytes: 8, dtoh_ops: 1, dtoh_bytes: 4 }
        );
        assert_eq!(m.write_range_to_device(0, 128), Err(MemError::TooWide { len: 128 }));
        assert_eq!(m.read_range_from_device(2, 4), Err(MemError::OutOfRange { off: 2, len: 4 }));
        assert!(m.read_range_from_device(0, 256).is_ok()); // wide reads are fine
    }

    #[test]
    fn svm_views_alias() {
        let _bound = ferry_watchdog::bound("the other thread");
        let m = SvmMemory::new(64, 0);
        m.host_view().store_u32(4, 5, Ordering::Relaxed);
        assert_eq!(m.device_view().load_u32(4, Ordering::Relaxed), 5);
        assert!(m.write_range_to_device(0, 64).is_ok());
        assert!(m.write_range_to_device(0, 68).is_err());
    }

    #[test]
    fn spy_records_thread_names() {
        let _bound = ferry_watchdog::bound("the other thread");
        let s = Arc::new(SpyMemory::new(SvmMemory::new(64, 0)));
        let s2 = s.clone();
        std::thread::Builder::new()
            .name("probe".into())
            .spawn(move || s2.read_range_from_device(0, 4).unwrap())
            .unwrap()
            .join()
            .unwrap();
        let ops = s.ops();
        assert_eq!(ops.len(), 1);
        assert_eq!(ops[0].thread, "probe");
        assert_eq!(ops[0].kind, MemOpKind::Read);
    }

    #[test]
    #[should_panic(expected = "outside region")]
    fn out_of_bounds_word_access_panics() {
        let _bound = ferry_watchdog::bound("the other thread");
        ShmRegion::zeroed(8).load_u32(8, Ordering::Relaxed);
    }
}
