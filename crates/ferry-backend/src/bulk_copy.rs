//! Copies that, like a DMA engine's writes into device memory, do not pull the destination into
//! the host CPU's caches: ferry's host-to-host block copies (`ferry-copy`'s local engine) and a
//! simulated device's gather kernel (`ferry-sim`) write with it.
//!
//! A device's gather kernel writes many fragments into its memory; a simulated chip's memory
//! is host memory, and an ordinary copy (`memmove`) of a 4 KiB fragment first reads every
//! destination cache line it is about to overwrite (read-for-ownership), then evicts it again:
//! three trips to memory per byte where a device makes two. One large contiguous copy does not
//! pay it (the C library switches to non-temporal stores past a size), so a gather of small
//! fragments lost to one contiguous copy of the same bytes for a reason real hardware lacks.
//! [`copy_bypassing_cache`] writes with non-temporal stores on x86-64 (SSE2, which every
//! x86-64 CPU has); elsewhere it is an ordinary copy. A [`StoreFence`] orders the stores before
//! whatever publishes the copy (a kernel block's end): non-temporal stores are weakly ordered.
//!
//! # Examples
//! ```
//! use ferry_backend::bulk_copy::{copy_bypassing_cache, StoreFence};
//! let src: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
//! let mut dst = vec![0u8; 5000];
//! {
//!     let _fence = StoreFence;
//!     let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
//!     // SAFETY: both ranges are 4999 bytes inside their own live vectors; nothing follows.
//!     unsafe { copy_bypassing_cache(s.add(1), d.add(1), 4999, (std::ptr::null(), 0)) };
//! }
//! assert_eq!(dst[1..], src[1..]);
//! ```

/// Copies shorter than this are ordinary copies: aligning the destination and the fence cost
/// more than the cache lines they would keep clean.
pub const MIN_BYPASS_BYTES: usize = 256;

/// Copies `len` bytes from `src` to `dst`, storing around the CPU's caches where it can (see
/// the [module docs](self)). Overlapping ranges are copied as by [`std::ptr::copy`].
///
/// `next` is the source of the copy that follows (its address and length), or `(null, 0)`:
/// while this copy runs, the first `len` bytes of it are prefetched, a cache line for each line
/// copied. A gather's fragments start at scattered addresses, where the CPU's own prefetcher
/// (which follows a stream within a page) has nothing to go on; without this, each fragment
/// starts with a full memory latency per line. A prefetch never faults and changes no memory:
/// `next` need not be valid.
///
/// The stores are not ordered before later stores of this thread, nor visible to other
/// threads, until a store fence: hold a [`StoreFence`] across the copies and let it drop
/// before the copy is published.
///
/// # Safety
/// `src` must be valid for reads and `dst` valid for writes of `len` bytes, as for
/// [`std::ptr::copy`], and no other thread may access `dst`'s bytes until the fence.
pub unsafe fn copy_bypassing_cache(
    src: *const u8,
    dst: *mut u8,
    len: usize,
    next: (*const u8, usize),
) {
    let (s, d) = (src as usize, dst as usize);
    let overlap = s < d.wrapping_add(len) && d < s.wrapping_add(len);
    if len < MIN_BYPASS_BYTES || overlap {
        // SAFETY: the caller's contract is `ptr::copy`'s.
        unsafe { std::ptr::copy(src, dst, len) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the ranges are valid (the caller's contract) and do not overlap (checked above).
    unsafe {
        copy_nontemporal(src, dst, len, next)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = next;
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the ranges are valid and do not overlap (as above).
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    };
}

/// The x86-64 body of [`copy_bypassing_cache`]: an ordinary copy up to the destination's first
/// 16-byte boundary, 64 bytes at a time through `movntdq` (unaligned loads, aligned streaming
/// stores, a prefetch of `next`'s line at the same offset), then 16 bytes at a time, then an
/// ordinary copy of the last bytes.
///
/// # Safety
/// `src` valid for reads and `dst` for writes of `len` bytes; the ranges do not overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_nontemporal(src: *const u8, dst: *mut u8, len: usize, next: (*const u8, usize)) {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_prefetch, _mm_stream_si128, _MM_HINT_T0,
    };
    let (next, ahead) = (next.0, next.1.min(len));
    let head = dst.align_offset(16).min(len);
    // SAFETY: `head <= len`: inside both ranges, which do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    let mut i = head;
    // `dst + i` stays 16-byte aligned: `head` aligned it and `i` advances by multiples of 16.
    while i + 64 <= len {
        if i < ahead {
            // `wrapping_add`: the address is only a hint, never dereferenced.
            // SAFETY: a prefetch has no preconditions: it never faults and writes nothing (SSE).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(i) as *const i8) };
        }
        // SAFETY: `i + 64 <= len` keeps the four loads and stores inside both ranges; `dst + i`
        // is 16-byte aligned, as `_mm_stream_si128` needs; `_mm_loadu_si128` needs no
        // alignment; SSE2 is part of x86-64, so the intrinsics exist on every CPU this runs on.
        unsafe {
            let s = src.add(i) as *const __m128i;
            let d = dst.add(i) as *mut __m128i;
            let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
            let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
        i += 64;
    }
    while i + 16 <= len {
        // SAFETY: as above, with `i + 16 <= len` for the one load and store.
        unsafe { _mm_stream_si128(dst.add(i) as *mut __m128i, _mm_loadu_si128(src.add(i) as _)) };
        i += 16;
    }
    // SAFETY: `i <= len`: the last `len - i` bytes are inside both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i) };
}

/// A store fence on drop (`sfence` on x86-64; elsewhere nothing is needed): the
/// [`copy_bypassing_cache`] stores before it are ordered before every later store, so a
/// release that follows (a thread's join, an atomic store) publishes them. Drops on every
/// path out of a scope, an early error return included.
#[derive(Debug)]
pub struct StoreFence;

impl Drop for StoreFence {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `sfence` has no preconditions (SSE, part of x86-64).
        unsafe {
            std::arch::x86_64::_mm_sfence()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every destination alignment, source alignment and length around the boundaries of the
    /// head, the 64- and 16-byte loops and the tail copies exactly the bytes asked for and
    /// touches none around them.
    #[test]
    fn copies_exactly_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..2048u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut lens: Vec<usize> = (0..=MIN_BYPASS_BYTES + 80).collect();
        lens.extend([511, 512, 513, 1000, 1024, 1500]);
        for src_off in [0, 1, 15, 16, 33] {
            for dst_off in 0..17 {
                for &len in &lens {
                    let mut dst = vec![0xAAu8; 1600];
                    {
                        let _fence = StoreFence;
                        // SAFETY: `src_off + len <= 2048` and `dst_off + len <= 1600`.
                        unsafe {
                            copy_bypassing_cache(
                                src.as_ptr().add(src_off),
                                dst.as_mut_ptr().add(dst_off),
                                len,
                                (src.as_ptr(), src.len()),
                            )
                        };
                    }
                    let ctx = format!("src+{src_off} dst+{dst_off} len {len}");
                    assert_eq!(dst[dst_off..dst_off + len], src[src_off..src_off + len], "{ctx}");
                    assert!(dst[..dst_off].iter().all(|&b| b == 0xAA), "before: {ctx}");
                    assert!(dst[dst_off + len..].iter().all(|&b| b == 0xAA), "after: {ctx}");
                }
            }
        }
    }

    /// Overlapping ranges (either direction) copy as `memmove` does.
    #[test]
    fn overlapping_ranges_copy_as_memmove() {
        for (from, to) in [(0usize, 100usize), (100, 0), (0, 1), (1, 0)] {
            let len = 1000;
            let mut a: Vec<u8> = (0..1200u32).map(|i| i as u8).collect();
            let mut b = a.clone();
            let (pa, pb) = (a.as_mut_ptr(), b.as_mut_ptr());
            // SAFETY: both ranges are inside `a` (resp. `b`), 1200 bytes long.
            unsafe {
                let _fence = StoreFence;
                copy_bypassing_cache(pa.add(from), pa.add(to), len, (std::ptr::null(), 0));
                std::ptr::copy(pb.add(from), pb.add(to), len);
            }
            assert_eq!(a, b, "{from} -> {to}");
        }
    }
}
