//! [`LocalCopyEngine`]: host ↔ host copies.
//!
//! Large batches are split over a few threads (scoped threads that claim segments through an
//! atomic cursor; large segments are cut into chunks first), and copies at or above a size floor
//! use non-temporal stores where the CPU has them ([`host_copy_block`]).
use crate::engine::{SettledHandle, TransferEngine, TransferHandle};
use crate::planner::plan_items;
use crate::types::{Loc, TransferItem, TransferPlan, TransferPlanSet, TransferRef};
use ferry_backend::bulk_copy::{copy_bypassing_cache, StoreFence};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Tuning of [`LocalCopyEngine`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalCopyConfig {
    /// Most threads one batch uses (the caller included). 1 = never split.
    pub max_threads: usize,
    /// Batches smaller than this run on the calling thread.
    pub threads_min_bytes: u64,
    /// Whether non-temporal stores may be used.
    pub non_temporal: bool,
    /// Copies smaller than this use a plain `memcpy`.
    pub non_temporal_min_bytes: usize,
}

impl Default for LocalCopyConfig {
    /// 2 threads above 1 MiB, non-temporal stores from 2 KiB.
    fn default() -> Self {
        Self {
            max_threads: 2,
            threads_min_bytes: 1 << 20,
            non_temporal: true,
            non_temporal_min_bytes: 2048,
        }
    }
}

/// Chunk size large segments are cut into when a batch is split over threads.
const CHUNK_BYTES: u64 = 1 << 20;

/// Host ↔ host copy engine. Claims exactly the pairs whose both sides are host memory.
///
/// # Examples
/// ```
/// use ferry_copy::{transfer, LocalCopyEngine, TransferEngine, TransferItem, TransferRef};
/// let (mut a, mut b) = (vec![1u8; 4096], vec![0u8; 4096]);
/// // SAFETY: both buffers outlive the transfer and are not touched meanwhile.
/// let (src, dst) = unsafe { (TransferRef::host(a.as_mut_ptr(), 4096), TransferRef::host(b.as_mut_ptr(), 4096)) };
/// let items = [
///     TransferItem { src, src_offset: 0, dst, dst_offset: 1024, size: 1024, tag: 0 },
///     TransferItem { src, src_offset: 1024, dst, dst_offset: 0, size: 1024, tag: 1 },
/// ];
/// let e = LocalCopyEngine::default();
/// assert!(transfer(&e, &items, &mut Vec::new()));
/// assert_eq!(&b[..2048], &a[..2048]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct LocalCopyEngine {
    cfg: LocalCopyConfig,
}

impl LocalCopyEngine {
    /// An engine with `cfg`.
    pub fn new(cfg: LocalCopyConfig) -> Self {
        Self { cfg }
    }

    /// The engine's configuration.
    pub fn config(&self) -> &LocalCopyConfig {
        &self.cfg
    }
}

#[derive(Clone, Copy)]
struct Job {
    src: u64,
    dst: u64,
    len: u64,
}

impl TransferEngine for LocalCopyEngine {
    fn name(&self) -> &str {
        "local"
    }

    fn can_handle(&self, src: &TransferRef, dst: &TransferRef) -> bool {
        src.has_host_ptr() && dst.has_host_ptr() && src.loc == Loc::Cpu && dst.loc == Loc::Cpu
    }

    fn plan(&self, items: &[TransferItem]) -> TransferPlanSet {
        plan_items(items, |s, d| self.can_handle(s, d))
    }

    fn submit(&self, plans: Vec<TransferPlan>) -> Option<Box<dyn TransferHandle>> {
        if plans.is_empty() {
            return None;
        }
        let mut jobs = Vec::new();
        let mut total = 0u64;
        for p in &plans {
            for i in 0..p.segments() {
                jobs.push(Job {
                    src: p.src.addr + p.src_offsets[i],
                    dst: p.dst.addr + p.dst_offsets[i],
                    len: p.sizes[i],
                });
                total += p.sizes[i];
            }
        }
        let threads = if self.cfg.max_threads <= 1 || total < self.cfg.threads_min_bytes {
            1
        } else {
            self.cfg.max_threads
        };
        if threads > 1 {
            jobs = jobs
                .into_iter()
                .flat_map(|j| {
                    (0..j.len.div_ceil(CHUNK_BYTES)).map(move |k| {
                        let off = k * CHUNK_BYTES;
                        Job {
                            src: j.src + off,
                            dst: j.dst + off,
                            len: (j.len - off).min(CHUNK_BYTES),
                        }
                    })
                })
                .collect();
        }
        let threads = threads.min(jobs.len()).max(1);
        let cursor = AtomicUsize::new(0);
        let work = || loop {
            // Relaxed: the cursor only hands out distinct indices; the jobs are immutable and the
            // copied bytes are published to the caller by the scope's join.
            let i = cursor.fetch_add(1, Ordering::Relaxed);
            let Some(j) = jobs.get(i) else { break };
            // SAFETY: [1] the planner bounds-checked every segment against its endpoint, and the
            // endpoints' constructor (`TransferRef::host`, unsafe) made the caller vouch that they
            // stay valid and unaliased until this batch completes; [2] the planner rejected
            // overlapping items, and chunks of one segment are disjoint, so no two jobs touch the
            // same destination byte and no source overlaps a destination.
            unsafe {
                host_copy_block_with(
                    j.dst as *mut u8,
                    j.src as *const u8,
                    j.len as usize,
                    &self.cfg,
                )
            };
        };
        if threads == 1 {
            work();
        } else {
            std::thread::scope(|s| {
                for _ in 1..threads {
                    s.spawn(work);
                }
                work();
            });
        }
        Some(Box::new(SettledHandle::new(Vec::new())))
    }
}

/// Copies `n` bytes from `src` to `dst`, with non-temporal stores when the CPU has them and
/// `n ≥ 2 KiB` (a cold destination written completely then avoids read-for-ownership).
///
/// # Safety
/// - `src` is valid for reads and `dst` for writes of `n` bytes;
/// - the ranges do not overlap, and no other thread accesses `dst` meanwhile.
///
/// # Examples
/// ```
/// let src = vec![3u8; 10_000];
/// let mut dst = vec![0u8; 10_000];
/// // SAFETY: both are 10 000-byte live buffers that do not overlap.
/// unsafe { ferry_copy::local::host_copy_block(dst.as_mut_ptr(), src.as_ptr(), 10_000) };
/// assert_eq!(dst, src);
/// ```
pub unsafe fn host_copy_block(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: delegated to the caller.
    unsafe { host_copy_block_with(dst, src, n, &LocalCopyConfig::default()) }
}

/// # Safety
/// As [`host_copy_block`].
unsafe fn host_copy_block_with(dst: *mut u8, src: *const u8, n: usize, cfg: &LocalCopyConfig) {
    if cfg.non_temporal && n >= cfg.non_temporal_min_bytes {
        // The fence orders the streaming (weakly ordered) stores before any later store of this
        // thread, so whoever synchronises with it afterwards (scope join, handle wait) sees
        // the copied bytes.
        let _fence = StoreFence;
        // SAFETY: delegated to the caller (valid, non-overlapping ranges of `n` bytes, which
        // nothing else touches during the copy); no copy follows to prefetch for.
        unsafe { copy_bypassing_cache(src, dst, n, (std::ptr::null(), 0)) };
        return;
    }
    // SAFETY: delegated to the caller (valid, non-overlapping ranges of `n` bytes).
    unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nt_copy_handles_every_alignment_and_length() {
        let _bound = ferry_watchdog::bound("the copy threads");
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
        for off in 0..17 {
            for n in [0usize, 1, 15, 16, 63, 64, 65, 2047, 2048, 4100, 8000] {
                let mut dst = vec![0u8; 9000];
                // SAFETY: `off + n ≤ 8017 < 9000` for both buffers; they do not overlap.
                unsafe { host_copy_block(dst.as_mut_ptr().add(off), src.as_ptr().add(3), n) };
                assert_eq!(&dst[off..off + n], &src[3..3 + n], "off {off} n {n}");
                assert!(dst[..off].iter().all(|&b| b == 0));
                assert!(dst[off + n..].iter().all(|&b| b == 0));
            }
        }
    }
}
