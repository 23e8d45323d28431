//! [`ChunkLog`]: the append-only store collectors copy records into while a run is live.
//!
//! A growing `Vec` is the wrong container on the collection path: every doubling copies what it
//! holds, and a large reallocation moves its pages with `mremap`, whose TLB shootdown interrupts
//! every CPU — on the 2-core development machines, the simulated chip's threads. A `ChunkLog`
//! never moves what it stores: it appends into chunks whose sizes double from
//! [`FIRST_CHUNK_BYTES`] to [`CHUNK_BYTES`] (a lane with a few records stays small), then stay
//! there. Reading back is by chunk ([`ChunkLog::chunks`]), by element ([`ChunkLog::iter`]) or by
//! the runs appended whole ([`ChunkLog::append_whole`], [`ChunkLog::get`]: a collected buffer
//! reads back as the slice it was).
//!
//! Measured on the 50,000-task storm with all five DFX subsystems (2 cores, 9 interleaved
//! rounds): the host engine's CPU per run went from 37-39 ms to 24 ms. Transparent huge pages
//! (`MADV_HUGEPAGE` on 2 MiB-aligned chunks) were tried and made it far worse on these VMs (the
//! engine's CPU rose to ~175 ms per run, most of it zeroing fresh huge pages): this store relies
//! on ordinary pages.
//!
//! # Examples
//! ```
//! use ferry_profile::chunks::ChunkLog;
//! let mut log = ChunkLog::<u64>::new();
//! log.extend_from_slice(&[1, 2, 3]);
//! log.push(4);
//! assert_eq!(log.len(), 4);
//! assert_eq!(log.iter().copied().collect::<Vec<_>>(), [1, 2, 3, 4]);
//! assert_eq!(log.to_vec(), [1, 2, 3, 4]);
//! ```

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// Bytes of the first chunk of a log.
pub const FIRST_CHUNK_BYTES: usize = 16 << 10;

/// Bytes of every chunk once the sizes have doubled up to it.
pub const CHUNK_BYTES: usize = 2 << 20;

/// One allocation of a log: `cap` elements, the first `len` written.
struct Chunk<T> {
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
    layout: Layout,
}

impl<T> Chunk<T> {
    /// A chunk of `bytes` (at least one element's worth), or `None` when the allocator refused.
    fn new(bytes: usize) -> Option<Self> {
        let size = size_of::<T>().max(1);
        let cap = (bytes / size).max(1);
        let bytes = bytes.max(size);
        let align = align_of::<T>().max(64);
        let layout = Layout::from_size_align(bytes, align).ok()?;
        let raw = match pool::POOL.take(layout) {
            Some(p) => p.as_ptr(),
            // SAFETY: the layout's size is non-zero (`cap ≥ 1` elements of at least one byte).
            None => unsafe { alloc::alloc(layout) },
        };
        let ptr = NonNull::new(raw.cast::<T>())?;
        Some(Self { ptr, len: 0, cap, layout })
    }

    fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` elements were written (`push_from`), the allocation lives as
        // long as `self`, and `ptr` is aligned for `T`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Chunk<T> {
    /// Copies as much of `src` as fits; returns how many elements it took.
    fn push_from(&mut self, src: &[T]) -> usize {
        let n = src.len().min(self.cap - self.len);
        // SAFETY: `[len, len + n)` lies inside the allocation (`n ≤ cap - len`) and was never
        // handed out; `src` is a different allocation (the log owns this one).
        unsafe { self.ptr.as_ptr().add(self.len).copy_from_nonoverlapping(src.as_ptr(), n) };
        self.len += n;
        n
    }
}

impl<T> Drop for Chunk<T> {
    fn drop(&mut self) {
        let p = self.ptr.cast::<u8>();
        if !pool::POOL.give(p, self.layout) {
            // SAFETY: allocated in `new` with this layout (by the allocator, or taken from the
            // pool, which holds only allocator blocks of its layout); `T: Copy` elements need no
            // drop.
            unsafe { alloc::dealloc(p.as_ptr(), self.layout) };
        }
    }
}

/// Chunks kept for the next log after theirs was dropped, so that collection in a long-lived
/// process (a server that profiles run after run, the bench's rounds) writes into memory that
/// is already faulted in: on the 2-core VMs a new page costs ~2 µs, and the storm's ~40 MB of
/// records is ~10,000 pages, a tenth of its run with every subsystem on. Only the power-of-two
/// chunk sizes a log grows through are kept, at most `POOL_MAX_BYTES` (64 MiB) in all; the rest
/// goes back to the allocator.
mod pool {
    use super::{CHUNK_BYTES, FIRST_CHUNK_BYTES};
    use std::alloc::Layout;
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// Most bytes the process's pool keeps.
    pub(crate) const POOL_MAX_BYTES: usize = 64 << 20;
    /// Alignment of every pooled chunk.
    const ALIGN: usize = 64;
    /// Size classes: `FIRST_CHUNK_BYTES << k`, up to `CHUNK_BYTES`.
    const CLASSES: usize = (CHUNK_BYTES / FIRST_CHUNK_BYTES).trailing_zeros() as usize + 1;

    /// A free allocator block of its class's size and [`ALIGN`].
    struct Block(NonNull<u8>);
    // SAFETY: a pooled block is owned by the pool alone (no other pointer to it is used), so it
    // may be handed to another thread.
    unsafe impl Send for Block {}

    /// Free blocks by size class, at most `max` bytes in all.
    pub(crate) struct Pool {
        free: [Mutex<Vec<Block>>; CLASSES],
        held: AtomicUsize,
        max: usize,
    }

    /// The process's pool.
    pub(super) static POOL: Pool = Pool::new(POOL_MAX_BYTES);

    impl Pool {
        pub(crate) const fn new(max: usize) -> Pool {
            Pool {
                free: [const { Mutex::new(Vec::new()) }; CLASSES],
                held: AtomicUsize::new(0),
                max,
            }
        }

        fn class(layout: Layout) -> Option<usize> {
            let n = layout.size();
            (layout.align() == ALIGN
                && n.is_power_of_two()
                && (FIRST_CHUNK_BYTES..=CHUNK_BYTES).contains(&n))
            .then(|| (n / FIRST_CHUNK_BYTES).trailing_zeros() as usize)
        }

        fn lock(&self, k: usize) -> std::sync::MutexGuard<'_, Vec<Block>> {
            self.free[k].lock().unwrap_or_else(|p| p.into_inner())
        }

        /// A kept block for `layout`, if one is free.
        pub(crate) fn take(&self, layout: Layout) -> Option<NonNull<u8>> {
            let b = self.lock(Self::class(layout)?).pop()?;
            // Relaxed: a budget counter; the mutex hands over the block itself.
            self.held.fetch_sub(layout.size(), Ordering::Relaxed);
            Some(b.0)
        }

        /// Keeps `p` (an allocator block of `layout`) for reuse; `false` when it is not a
        /// pooled size or the pool is full (the caller frees it).
        pub(crate) fn give(&self, p: NonNull<u8>, layout: Layout) -> bool {
            let Some(k) = Self::class(layout) else { return false };
            let size = layout.size();
            // Relaxed: a budget counter; reserving with a CAS keeps it under `max` exactly.
            let reserved = self.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                (h + size <= self.max).then_some(h + size)
            });
            if reserved.is_err() {
                return false;
            }
            self.lock(k).push(Block(p));
            true
        }

        /// Bytes held now.
        #[cfg(test)]
        pub(crate) fn held(&self) -> usize {
            // Relaxed: a statistic.
            self.held.load(Ordering::Relaxed)
        }
    }
}

// SAFETY: a chunk owns its allocation exclusively (like a `Box<[T]>`), so it may move to another
// thread when `T` may.
unsafe impl<T: Send> Send for Chunk<T> {}
// SAFETY: shared access only reads (`as_slice`), as for `&[T]`.
unsafe impl<T: Sync> Sync for Chunk<T> {}

/// Where [`ChunkLog::append_whole`] put a run of elements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    chunk: usize,
    start: usize,
    len: usize,
}

impl Span {
    /// A run of `len` elements kept nowhere: counted only (a sink whose records went to the
    /// native profile alone). It reads as empty ([`ChunkLog::get`]) and counts `len`.
    pub fn counted(len: usize) -> Span {
        Span { chunk: usize::MAX, start: 0, len }
    }

    /// Elements in the run.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the run is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// An append-only sequence of `T` in chunks that never move (see the [module docs](self)).
pub struct ChunkLog<T> {
    chunks: Vec<Chunk<T>>,
    len: usize,
}

impl<T> Default for ChunkLog<T> {
    fn default() -> Self {
        Self { chunks: Vec::new(), len: 0 }
    }
}

impl<T> std::fmt::Debug for ChunkLog<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkLog")
            .field("len", &self.len)
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

impl<T: Copy> ChunkLog<T> {
    /// An empty log (allocates nothing yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// Elements stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends one element.
    pub fn push(&mut self, v: T) {
        self.extend_from_slice(std::slice::from_ref(&v));
    }

    /// Appends `src`, filling the last chunk and then new ones.
    ///
    /// # Panics
    /// When the allocator fails (as `Vec` does).
    pub fn extend_from_slice(&mut self, mut src: &[T]) {
        self.len += src.len();
        while !src.is_empty() {
            if let Some(c) = self.chunks.last_mut().filter(|c| c.len < c.cap) {
                let n = c.push_from(src);
                src = &src[n..];
                continue;
            }
            self.grow(1);
        }
    }

    /// Appends `src` in one piece (in a new chunk when the last one has no room for all of it)
    /// and returns where it went, for [`get`](Self::get). Buffers stored this way read back as
    /// the slices they were.
    ///
    /// # Panics
    /// When the allocator fails (as `Vec` does).
    pub fn append_whole(&mut self, src: &[T]) -> Span {
        if src.is_empty() {
            return Span::default();
        }
        if self.chunks.last().is_none_or(|c| c.cap - c.len < src.len()) {
            self.grow(src.len());
        }
        let chunk = self.chunks.len() - 1;
        let c = &mut self.chunks[chunk];
        let start = c.len;
        c.push_from(src);
        self.len += src.len();
        Span { chunk, start, len: src.len() }
    }

    /// What [`append_whole`](Self::append_whole) stored at `span` (nothing for a
    /// [`Span::counted`]).
    ///
    /// # Panics
    /// When `span` was not returned by this log.
    pub fn get(&self, span: Span) -> &[T] {
        if span.len == 0 || span.chunk == usize::MAX {
            return &[];
        }
        &self.chunks[span.chunk].as_slice()[span.start..span.start + span.len]
    }

    /// Adds a chunk for at least `need` elements: the next size (double the last, up to
    /// [`CHUNK_BYTES`]) or, for a larger `need`, the next power of two up to [`CHUNK_BYTES`],
    /// then whole multiples of it.
    fn grow(&mut self, need: usize) {
        let size = size_of::<T>().max(1);
        let next = match self.chunks.last() {
            None => FIRST_CHUNK_BYTES,
            Some(c) => (c.layout.size() * 2).min(CHUNK_BYTES),
        };
        let want = need.saturating_mul(size);
        let bytes = match want {
            w if w <= next => next,
            w if w <= CHUNK_BYTES => w.next_power_of_two(),
            w => w.div_ceil(CHUNK_BYTES) * CHUNK_BYTES,
        };
        match Chunk::new(bytes) {
            Some(c) => self.chunks.push(c),
            None => alloc::handle_alloc_error(
                Layout::from_size_align(bytes, 64).unwrap_or(Layout::new::<T>()),
            ),
        }
    }

    /// The stored elements, chunk by chunk (no chunk is empty).
    pub fn chunks(&self) -> impl Iterator<Item = &[T]> + '_ {
        self.chunks.iter().map(Chunk::as_slice).filter(|s| !s.is_empty())
    }

    /// The stored elements in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks().flatten()
    }

    /// A copy of everything in one `Vec`.
    pub fn to_vec(&self) -> Vec<T> {
        let mut v = Vec::with_capacity(self.len);
        for c in self.chunks() {
            v.extend_from_slice(c);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_across_growing_chunks_in_order() {
        let mut log = ChunkLog::<[u64; 5]>::new();
        let mut want = Vec::new();
        let mut k = 0u64;
        // Pieces of every size up to past a whole chunk, so appends straddle chunk ends.
        for piece in [1usize, 7, 409, 410, 1000, 52_429, 60_000, 3] {
            let part: Vec<[u64; 5]> = (0..piece).map(|i| [k + i as u64; 5]).collect();
            k += piece as u64;
            log.extend_from_slice(&part);
            want.extend_from_slice(&part);
        }
        log.push([u64::MAX; 5]);
        want.push([u64::MAX; 5]);
        assert_eq!(log.len(), want.len());
        assert_eq!(log.to_vec(), want);
        assert_eq!(log.iter().copied().collect::<Vec<_>>(), want);
        // Chunks double to CHUNK_BYTES and stay there; none is empty.
        let sizes: Vec<usize> = log.chunks.iter().map(|c| c.layout.size()).collect();
        assert_eq!(sizes[0], FIRST_CHUNK_BYTES);
        for w in sizes.windows(2) {
            assert_eq!(w[1], (w[0] * 2).min(CHUNK_BYTES));
        }
        assert_eq!(*sizes.last().unwrap(), CHUNK_BYTES);
        assert!(log.chunks().all(|c| !c.is_empty()));
    }

    #[test]
    fn whole_appends_read_back_as_they_were() {
        let mut log = ChunkLog::<u64>::new();
        let mut spans = Vec::new();
        // A first buffer larger than the first chunk, and one larger than a whole chunk.
        for (k, n) in [3000usize, 2047, 2048, 5000, 300_000, 1, 262_144].into_iter().enumerate() {
            let part: Vec<u64> = (0..n as u64).map(|i| (k as u64) << 32 | i).collect();
            spans.push((log.append_whole(&part), part));
        }
        assert_eq!(log.append_whole(&[]), Span::default());
        for (span, part) in &spans {
            assert_eq!(span.len(), part.len());
            assert_eq!(log.get(*span), &part[..]);
        }
        // 3,000 words need 24,000 bytes: a 32 KiB first chunk, not a whole 2 MiB one.
        assert_eq!(log.chunks[0].layout.size(), 32 << 10);
        let all: Vec<u64> = spans.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        assert_eq!(log.to_vec(), all, "whole appends keep the order too");
        assert_eq!(log.len(), all.len());
    }

    #[test]
    fn the_pool_reuses_blocks_up_to_its_cap() {
        let p = pool::Pool::new(3 * FIRST_CHUNK_BYTES);
        let small = Layout::from_size_align(FIRST_CHUNK_BYTES, 64).unwrap();
        let odd = Layout::from_size_align(FIRST_CHUNK_BYTES + 8, 64).unwrap();
        let blocks: Vec<NonNull<u8>> = (0..4)
            // SAFETY: a non-zero layout.
            .map(|_| NonNull::new(unsafe { alloc::alloc(small) }).unwrap())
            .collect();
        assert!(p.give(blocks[0], small) && p.give(blocks[1], small) && p.give(blocks[2], small));
        assert!(!p.give(blocks[3], small), "past the cap the caller frees");
        assert_eq!(p.held(), 3 * FIRST_CHUNK_BYTES);
        assert_eq!(p.take(odd), None, "only the power-of-two sizes a log grows through");
        let again = p.take(small).unwrap();
        assert!(blocks[..3].contains(&again), "a kept block comes back");
        assert_eq!(p.held(), 2 * FIRST_CHUNK_BYTES);
        assert!(p.take(Layout::from_size_align(2 * FIRST_CHUNK_BYTES, 64).unwrap()).is_none());
        for b in [again, blocks[3], p.take(small).unwrap(), p.take(small).unwrap()] {
            // SAFETY: each block came from `alloc(small)` and is freed once.
            unsafe { alloc::dealloc(b.as_ptr(), small) };
        }
        assert_eq!((p.take(small), p.held()), (None, 0));
    }

    #[test]
    fn an_empty_log_has_no_chunks() {
        let mut log = ChunkLog::<u8>::new();
        log.extend_from_slice(&[]);
        assert!(log.is_empty());
        assert_eq!(log.chunks().count(), 0);
        assert_eq!(log.to_vec(), Vec::<u8>::new());
    }

    #[test]
    fn bytes_keep_their_order() {
        let mut log = ChunkLog::<u8>::new();
        let data: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
        for piece in data.chunks(65_537) {
            log.extend_from_slice(piece);
        }
        assert_eq!(log.to_vec(), data);
    }
}
