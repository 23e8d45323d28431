//! Device-visible memory: the [`DeviceMemory`] platform trait, the [`ShmRegion`] view both sides
//! access, and three implementations (SVM, non-SVM mirror, and a recording spy).
//!
//! The transport touches a region only through:
//!
//! * [`ShmRegion`] word operations (`load_u32`/`store_u32`/`load_u64`/`store_u64`): atomic, so a
//!   host thread and a device thread may touch the same word; records are written with plain stores
//!   and published by the ready-queue tail's `Release` store;
//! * [`DeviceMemory::read_range_from_device`] before every host read of a device-written word, and
//!   [`DeviceMemory::write_range_to_device`] after every host write of a host-owned word (seed,
//!   "Memory ordering across the PCIe boundary"). On SVM both are no-ops; on a non-SVM platform they
//!   copy exactly that range between the host mirror and device memory. There is no bulk
//!   write-back: [`MirroredMemory`] refuses a write wider than [`MAX_NARROW_WRITE`] bytes;
//! * [`DeviceMemory::read_owned_from_device`] for a published buffer the host owns: one bulk copy
//!   (a plain `memcpy` on the mirror), after the `Acquire` load of the ready-queue tail that
//!   handed the buffer over — not a word-by-word atomic loop.
//!
//! Offsets are relative to the start of the region; the device address of offset 0 is
//! [`DeviceMemory::device_addr`].

use core::fmt;
#[cfg(not(ferry_loom))]
use core::ptr::NonNull;
#[cfg(not(ferry_loom))]
use std::alloc::Layout;

#[cfg(not(ferry_loom))]
use crate::sync::atomic::AtomicU32;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Arc;

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

// ---------------------------------------------------------------------------------------------
// ShmRegion
// ---------------------------------------------------------------------------------------------

/// A zeroed, 64-byte aligned heap allocation that frees itself.
#[cfg(not(ferry_loom))]
#[derive(Debug)]
struct AlignedAlloc {
    ptr: NonNull<u8>,
    layout: Layout,
}

#[cfg(not(ferry_loom))]
impl AlignedAlloc {
    fn zeroed(len: usize) -> Self {
        let layout = Layout::from_size_align(len.max(64), 64).expect("region size overflows");
        // SAFETY: `layout` has a non-zero size (at least 64).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else { std::alloc::handle_alloc_error(layout) };
        Self { ptr, layout }
    }
}

#[cfg(not(ferry_loom))]
impl Drop for AlignedAlloc {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is freed only here, once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

// SAFETY: the allocation is plain bytes with no thread affinity; all concurrent access goes through
// `ShmRegion`, whose word operations are atomic.
#[cfg(not(ferry_loom))]
unsafe impl Send for AlignedAlloc {}
// SAFETY: as above; `AlignedAlloc` itself exposes no access, only ownership.
#[cfg(not(ferry_loom))]
unsafe impl Sync for AlignedAlloc {}

/// A view of a device-visible byte region, shared by host and device threads.
///
/// Word operations are atomic (so the other side may touch the same word concurrently); the
/// view keeps its backing allocation alive (STYLE R10). Offsets must be 4-byte aligned (8 for
/// `u64`) and in bounds; the public operations check and panic otherwise.
///
/// Under `cfg(ferry_loom)` the region is an array of loom atomic words, so the model checker sees
/// every access, including record payloads.
#[derive(Clone)]
pub struct ShmRegion {
    #[cfg(not(ferry_loom))]
    base: NonNull<u8>,
    #[cfg(not(ferry_loom))]
    _owner: std::sync::Arc<dyn Send + Sync>,
    #[cfg(ferry_loom)]
    words: Arc<Vec<AtomicU64>>,
    len: usize,
}

impl fmt::Debug for ShmRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmRegion").field("len", &self.len).finish_non_exhaustive()
    }
}

// SAFETY: a `ShmRegion` is a pointer plus an owner handle; every access it offers is either an
// atomic word operation or an `unsafe` method whose caller guarantees exclusive ownership of the
// bytes (the transport's single-writer protocol), so sharing it across threads is sound.
#[cfg(not(ferry_loom))]
unsafe impl Send for ShmRegion {}
// SAFETY: see `Send` above.
#[cfg(not(ferry_loom))]
unsafe impl Sync for ShmRegion {}

impl ShmRegion {
    /// A new zeroed, 64-byte aligned region of `len` bytes (rounded up to a multiple of 8).
    ///
    /// # Examples
    /// ```
    /// let r = ferry_dfx::mem::ShmRegion::zeroed(128);
    /// assert_eq!(r.len(), 128);
    /// ```
    pub fn zeroed(len: usize) -> Self {
        let len = (len + 7) & !7;
        #[cfg(not(ferry_loom))]
        {
            let alloc = AlignedAlloc::zeroed(len);
            Self { base: alloc.ptr, _owner: std::sync::Arc::new(alloc), len }
        }
        #[cfg(ferry_loom)]
        {
            let words = (0..len / 8).map(|_| AtomicU64::new(0)).collect();
            Self { words: Arc::new(words), len }
        }
    }

    /// A view of memory owned by someone else (e.g. a ferry-sim device allocation).
    ///
    /// # Safety
    /// - `base` is 64-byte aligned and valid for reads and writes of `len` bytes for as long as
    ///   `owner` (or any clone of the returned view) is alive;
    /// - every other access to those bytes while a view exists is atomic or follows the DFX
    ///   single-writer protocol.
    #[cfg(not(ferry_loom))]
    pub unsafe fn from_raw_parts(
        base: NonNull<u8>,
        len: usize,
        owner: std::sync::Arc<dyn Send + Sync>,
    ) -> Self {
        debug_assert!(base.as_ptr() as usize % 64 == 0);
        Self { base, _owner: owner, len }
    }

    /// Touches every 4 KiB page (an atomic add of zero, so contents and concurrent users are
    /// unaffected) so that later first writes do not take page faults — e.g. before timing.
    pub fn prefault(&self) {
        let mut off = 0;
        while off + 8 <= self.len {
            #[cfg(not(ferry_loom))]
            // Relaxed: changes nothing; only makes the page resident.
            self.atomic_u64(off).fetch_add(0, Ordering::Relaxed);
            #[cfg(ferry_loom)]
            let _ = off;
            off += 4096;
        }
    }

    /// Bytes in the region.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    #[track_caller]
    fn check(&self, off: usize, size: usize) {
        assert!(
            off % size == 0 && off.checked_add(size).is_some_and(|e| e <= self.len),
            "shm access {off}+{size} outside region of {} bytes",
            self.len
        );
    }

    #[cfg(not(ferry_loom))]
    #[inline]
    fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: [1] `off` is in bounds and 4-aligned (checked by callers, debug-asserted here);
        // [2] the base is 64-aligned, so the address is aligned for `AtomicU32`; [3] the bytes stay
        // allocated while `self` holds its owner; [4] all concurrent access to this word is atomic.
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(off).cast()) }
    }

    #[cfg(not(ferry_loom))]
    #[inline]
    fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: as in `atomic_u32`, with 8-byte alignment.
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(off).cast()) }
    }

    /// Atomically loads the `u32` at `off`.
    ///
    /// # Panics
    /// If `off` is misaligned or out of bounds.
    #[inline]
    #[track_caller]
    pub fn load_u32(&self, off: usize, order: Ordering) -> u32 {
        self.check(off, 4);
        #[cfg(not(ferry_loom))]
        {
            self.atomic_u32(off).load(order)
        }
        #[cfg(ferry_loom)]
        {
            let w = self.words[off / 8].load(order);
            (w >> ((off % 8) * 8)) as u32
        }
    }

    /// Atomically stores the `u32` at `off`.
    ///
    /// # Panics
    /// If `off` is misaligned or out of bounds.
    #[inline]
    #[track_caller]
    pub fn store_u32(&self, off: usize, v: u32, order: Ordering) {
        self.check(off, 4);
        #[cfg(not(ferry_loom))]
        self.atomic_u32(off).store(v, order);
        #[cfg(ferry_loom)]
        {
            // Model a 32-bit store as a read-modify-write of its 64-bit word: under loom each
            // word has a single writer in the DFX protocol except where both halves have the same
            // writer, so the RMW does not invent a race.
            let shift = (off % 8) * 8;
            let mask = !(0xFFFF_FFFFu64 << shift);
            let w = &self.words[off / 8];
            let load_order = match order {
                Ordering::Release => Ordering::Relaxed,
                o => o,
            };
            let mut cur = w.load(load_order);
            loop {
                let new = (cur & mask) | ((v as u64) << shift);
                match w.compare_exchange(cur, new, order, load_order) {
                    Ok(_) => break,
                    Err(c) => cur = c,
                }
            }
        }
    }

    /// Atomically loads the `u64` at `off`.
    ///
    /// # Panics
    /// If `off` is misaligned or out of bounds.
    #[inline]
    #[track_caller]
    pub fn load_u64(&self, off: usize, order: Ordering) -> u64 {
        self.check(off, 8);
        #[cfg(not(ferry_loom))]
        {
            self.atomic_u64(off).load(order)
        }
        #[cfg(ferry_loom)]
        {
            self.words[off / 8].load(order)
        }
    }

    /// Atomically stores the `u64` at `off`.
    ///
    /// # Panics
    /// If `off` is misaligned or out of bounds.
    #[inline]
    #[track_caller]
    pub fn store_u64(&self, off: usize, v: u64, order: Ordering) {
        self.check(off, 8);
        #[cfg(not(ferry_loom))]
        self.atomic_u64(off).store(v, order);
        #[cfg(ferry_loom)]
        self.words[off / 8].store(v, order);
    }

    /// Writes `v` at `off` with plain (non-atomic) stores; the record hot path.
    ///
    /// # Safety
    /// - `off` is aligned for `T`, `off + size_of::<T>() <= len`, and `size_of::<T>()` is a
    ///   multiple of 8 under `cfg(ferry_loom)`;
    /// - the caller owns these bytes: no other thread accesses them until a later `Release`
    ///   store (the ready-queue tail) publishes them.
    #[inline(always)]
    pub(crate) unsafe fn write_pod_unchecked<T: Copy>(&self, off: usize, v: T) {
        debug_assert!(off % align_of::<T>() == 0 && off + size_of::<T>() <= self.len);
        #[cfg(not(ferry_loom))]
        {
            // SAFETY: bounds, alignment and exclusive ownership are delegated to the caller.
            unsafe { self.base.as_ptr().add(off).cast::<T>().write(v) };
        }
        #[cfg(ferry_loom)]
        {
            let n = size_of::<T>() / 8;
            let src = (&v as *const T).cast::<u64>();
            for i in 0..n {
                // SAFETY: `v` is `size_of::<T>()` bytes, a multiple of 8; unaligned read of its
                // i-th 8-byte chunk.
                let w = unsafe { src.add(i).read_unaligned() };
                self.words[off / 8 + i].store(w, Ordering::Relaxed);
            }
        }
    }

    /// Writes `v` at `off` with plain (non-atomic) stores: a run of records.
    ///
    /// # Safety
    /// As [`write_pod_unchecked`](Self::write_pod_unchecked), for the `v.len()` records at `off`.
    #[inline]
    pub(crate) unsafe fn write_slice_unchecked<T: Copy>(&self, off: usize, v: &[T]) {
        debug_assert!(off % align_of::<T>() == 0 && off + size_of_val(v) <= self.len);
        #[cfg(not(ferry_loom))]
        {
            // SAFETY: bounds, alignment and exclusive ownership are delegated to the caller; the
            // source is a separate Rust slice, so the ranges do not overlap.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    v.as_ptr(),
                    self.base.as_ptr().add(off).cast::<T>(),
                    v.len(),
                )
            };
        }
        #[cfg(ferry_loom)]
        for (i, r) in v.iter().enumerate() {
            // SAFETY: as above, record by record.
            unsafe { self.write_pod_unchecked(off + i * size_of::<T>(), *r) };
        }
    }

    /// Copies `n` records of type `T` starting at `off` into `out` (cleared first).
    ///
    /// # Safety
    /// - `off` is aligned for `T` and `off + n * size_of::<T>() <= len`;
    /// - no thread writes these bytes during the call (the host owns the buffer);
    /// - every bit pattern is a valid `T`.
    #[cfg(ferry_loom)]
    pub(crate) unsafe fn read_records_into<T: Copy>(&self, off: usize, n: usize, out: &mut Vec<T>) {
        debug_assert!(off % align_of::<T>() == 0 && off + n * size_of::<T>() <= self.len);
        out.clear();
        #[cfg(not(ferry_loom))]
        {
            // SAFETY: bounds, alignment, validity and absence of writers are delegated to the caller.
            let s =
                unsafe { core::slice::from_raw_parts(self.base.as_ptr().add(off).cast::<T>(), n) };
            out.extend_from_slice(s);
        }
        #[cfg(ferry_loom)]
        {
            let per = size_of::<T>() / 8;
            for r in 0..n {
                let mut v = core::mem::MaybeUninit::<T>::uninit();
                let dst = v.as_mut_ptr().cast::<u64>();
                for i in 0..per {
                    let w = self.words[(off + r * size_of::<T>()) / 8 + i].load(Ordering::Relaxed);
                    // SAFETY: `dst` points at `size_of::<T>()` bytes; unaligned chunk write.
                    unsafe { dst.add(i).write_unaligned(w) };
                }
                // SAFETY: every byte was written above and any bit pattern is a valid `T`.
                out.push(unsafe { v.assume_init() });
            }
        }
    }

    /// A shared slice of `n` records at `off` (zero-copy host read).
    ///
    /// # Safety
    /// As [`ShmRegion::read_records_into`], for the whole lifetime of the returned slice.
    #[cfg(not(ferry_loom))]
    pub(crate) unsafe fn records<T: Copy>(&self, off: usize, n: usize) -> &[T] {
        debug_assert!(off % align_of::<T>() == 0 && off + n * size_of::<T>() <= self.len);
        // SAFETY: delegated to the caller.
        unsafe { core::slice::from_raw_parts(self.base.as_ptr().add(off).cast::<T>(), n) }
    }

    /// Copies `[off, off + len)` from `src` into `self` in bulk (a plain `memcpy`; under loom,
    /// unsynchronised loads, which add no scheduling points, and relaxed stores).
    ///
    /// # Safety
    /// `[off, off + len)` is inside both regions and no thread writes it in either region during
    /// the call (the host owns it).
    unsafe fn copy_owned_from(&self, src: &ShmRegion, off: usize, len: usize) {
        debug_assert!(off + len <= self.len && off + len <= src.len);
        #[cfg(not(ferry_loom))]
        {
            // SAFETY: both ranges are in bounds (caller), belong to two different allocations
            // (a mirror and its device region), and nobody writes either during the copy.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    src.base.as_ptr().add(off),
                    self.base.as_ptr().add(off),
                    len,
                )
            };
        }
        #[cfg(ferry_loom)]
        {
            let (mut o, end) = (off, off + len);
            while o < end {
                let w = o / 8;
                // SAFETY: nobody writes these words meanwhile (caller): every store to them
                // happened before this call, which loom checks.
                let v = unsafe { src.words[w].unsync_load() };
                let (lo, hi) = (o % 8, (end - w * 8).min(8));
                let mask = if hi - lo == 8 {
                    u64::MAX
                } else {
                    ((1u64 << (8 * (hi - lo))) - 1) << (8 * lo)
                };
                // SAFETY: as above, for the host word.
                let cur = if mask == u64::MAX { 0 } else { unsafe { self.words[w].unsync_load() } };
                // Relaxed: the host owns the word (caller); the copy publishes nothing.
                self.words[w].store((cur & !mask) | (v & mask), Ordering::Relaxed);
                o = (w + 1) * 8;
            }
        }
    }

    /// Copies `[off, off + len)` from `src` into `self` word by word: `Acquire` loads from `src`
    /// when `acquire`, `Release` stores into `self` otherwise. Used by the non-SVM range copies.
    fn copy_words_from(&self, src: &ShmRegion, off: usize, len: usize, acquire: bool) {
        let (lo, st) = if acquire {
            (Ordering::Acquire, Ordering::Relaxed)
        } else {
            (Ordering::Relaxed, Ordering::Release)
        };
        let mut o = off;
        let end = off + len;
        while o < end {
            if o % 8 == 0 && o + 8 <= end {
                self.store_u64(o, src.load_u64(o, lo), st);
                o += 8;
            } else {
                self.store_u32(o, src.load_u32(o, lo), st);
                o += 4;
            }
        }
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
        let m = SvmMemory::new(64, 0);
        m.host_view().store_u32(4, 5, Ordering::Relaxed);
        assert_eq!(m.device_view().load_u32(4, Ordering::Relaxed), 5);
        assert!(m.write_range_to_device(0, 64).is_ok());
        assert!(m.write_range_to_device(0, 68).is_err());
    }

    #[test]
    fn spy_records_thread_names() {
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
        ShmRegion::zeroed(8).load_u32(8, Ordering::Relaxed);
    }
}
