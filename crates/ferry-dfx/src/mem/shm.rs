//! [`ShmRegion`]: a view of a device-visible byte region both sides access (atomic words, plain
//! record stores by the owner, bulk copies of owned ranges).

use core::fmt;
#[cfg(not(ferry_loom))]
use core::ptr::NonNull;
#[cfg(not(ferry_loom))]
use std::alloc::Layout;

#[cfg(not(ferry_loom))]
use crate::sync::atomic::AtomicU32;
use crate::sync::atomic::{AtomicU64, Ordering};
#[cfg(ferry_loom)]
use crate::sync::Arc;

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
/// view keeps its backing allocation alive (a child holds its parent). Offsets must be 4-byte aligned (8 for
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

    /// [`prefetch_write`](super::prefetch_write) of the line holding byte `off`; offsets past
    /// the end are ignored.
    #[inline(always)]
    pub(crate) fn prefetch_write(&self, off: usize) {
        // Under loom the region is model atomics: there is no line to hint.
        #[cfg(not(ferry_loom))]
        if off < self.len {
            // `wrapping_add`: a hint needs no in-bounds pointer, but `off < len` keeps it inside
            // the region anyway.
            super::prefetch_write(self.base.as_ptr().wrapping_add(off));
        }
        #[cfg(ferry_loom)]
        let _ = off;
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
    pub(super) unsafe fn copy_owned_from(&self, src: &ShmRegion, off: usize, len: usize) {
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
    pub(super) fn copy_words_from(&self, src: &ShmRegion, off: usize, len: usize, acquire: bool) {
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
