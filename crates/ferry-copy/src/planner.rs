//! The copy-engine planner shared by [`LocalCopyEngine`](crate::LocalCopyEngine) and
//! [`HbmCopyEngine`](crate::HbmCopyEngine), plus overlap rejection.
//!
//! For each item, in input order:
//! 1. size 0 → skipped (reported in [`TransferPlanSet::skipped`], neither planned nor failed);
//! 2. a null/empty endpoint, an endpoint whose `addr + size` overflows, a pair the engine does
//!    not claim → rejected;
//! 3. bounds, written so nothing can overflow: reject when `size > ref.size` or
//!    `offset > ref.size - size`, for each side;
//! 4. overlap: reject an item whose source and destination overlap, or that writes bytes an
//!    earlier accepted item reads or writes, or reads bytes an earlier accepted item writes
//!    (ferry's addition: such a batch's result would depend on execution order, and concurrent
//!    copies of overlapping ranges are data races);
//! 5. group by the endpoint pair (`(src base, dst base)` with their sizes and devices) (plans in first-appearance order) and coalesce with the
//!    plan's *last* segment when adjacent on both sides; out-of-order adjacency is not merged;
//! 6. append the tag unless it equals the plan's last tag.
//!
//! Planning is pure: no IO, no engine state.
//!
//! # Examples
//! ```
//! use ferry_copy::{planner::plan_items, TransferItem, TransferRef};
//! let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
//! // SAFETY: nothing is copied; the endpoints only describe the buffers.
//! let (src, dst) = unsafe { (TransferRef::host(a.as_mut_ptr(), 4096), TransferRef::host(b.as_mut_ptr(), 4096)) };
//! let items: Vec<_> = (0..3)
//!     .map(|i| TransferItem { src, src_offset: i * 1024, dst, dst_offset: i * 1024, size: 1024, tag: i })
//!     .collect();
//! let set = plan_items(&items, |_, _| true);
//! assert_eq!(set.plans.len(), 1);
//! assert_eq!(set.plans[0].sizes, [3072]);
//! assert_eq!(set.plans[0].tags, [0, 1, 2]);
//! ```
use crate::types::{
    RejectReason, Rejection, Space, TransferDirection, TransferItem, TransferPlan, TransferPlanSet,
    TransferRef,
};
use std::collections::{BTreeMap, HashMap};

/// Plans `items` for an engine whose claim on a pair is `can_handle`.
///
/// Cost: the per-item checks, one sort of the accepted ranges to prove that nothing overlaps
/// (the common case), and a hash lookup per change of endpoint pair. Only a batch that does
/// overlap pays for the exact, order-respecting overlap pass.
pub fn plan_items(
    items: &[TransferItem],
    can_handle: impl Fn(&TransferRef, &TransferRef) -> bool,
) -> TransferPlanSet {
    let mut set = TransferPlanSet::default();
    // Pass 1: checks that need no other item.
    let mut verdict: Vec<Result<bool, RejectReason>> = items
        .iter()
        .map(
            |it| if it.size == 0 { Ok(false) } else { check_alone(it, &can_handle).map(|()| true) },
        )
        .collect();
    // Pass 2: overlap. Prove the batch overlap-free with one sort; else decide item by item.
    if !overlap_free(items, &verdict) {
        let mut writes = Ranges::default();
        let mut reads = Ranges::default();
        for (it, v) in items.iter().zip(verdict.iter_mut()) {
            if *v != Ok(true) {
                continue;
            }
            // In bounds (pass 1), so neither sum overflows.
            let (s, d) = (it.src.addr + it.src_offset, it.dst.addr + it.dst_offset);
            let (ss, ds) = (it.src.space(), it.dst.space());
            if ss == ds && s < d + it.size && d < s + it.size {
                *v = Err(RejectReason::SrcDstOverlap);
            } else if writes.overlaps(ds, d, d + it.size)
                || reads.overlaps(ds, d, d + it.size)
                || writes.overlaps(ss, s, s + it.size)
            {
                *v = Err(RejectReason::OverlapsEarlierItem);
            } else {
                writes.insert(ds, d, d + it.size);
                reads.insert(ss, s, s + it.size);
            }
        }
    }
    // Pass 3: group and coalesce, in input order.
    let mut index: HashMap<(TransferRef, TransferRef), usize> = HashMap::new();
    let mut last: Option<((TransferRef, TransferRef), usize)> = None;
    for (it, v) in items.iter().zip(verdict) {
        match v {
            Ok(false) => {
                set.skipped.push(it.tag);
                continue;
            }
            Err(reason) => {
                set.rejected.push(Rejection { tag: it.tag, reason });
                continue;
            }
            Ok(true) => {}
        }
        let key = (it.src, it.dst);
        let pi = match last {
            Some((k, i)) if k == key => i,
            _ => {
                let i = *index.entry(key).or_insert_with(|| {
                    // The first plan usually holds the whole batch (one pair of buffers): its
                    // segments are sized for every item at once instead of growing by
                    // doubling, which touches twice the memory and copies it on the way.
                    let cap = match set.plans.is_empty() {
                        true => items.len(),
                        false => 0,
                    };
                    set.plans.push(TransferPlan {
                        src: it.src,
                        dst: it.dst,
                        src_offsets: Vec::with_capacity(cap),
                        dst_offsets: Vec::with_capacity(cap),
                        sizes: Vec::with_capacity(cap),
                        tags: Vec::with_capacity(cap),
                        dir: TransferDirection::Local,
                        engine: None,
                    });
                    set.plans.len() - 1
                });
                last = Some((key, i));
                i
            }
        };
        let p = &mut set.plans[pi];
        let merged = match (p.src_offsets.last(), p.dst_offsets.last(), p.sizes.last_mut()) {
            (Some(&so), Some(&dso), Some(sz)) => {
                let adjacent = so.checked_add(*sz) == Some(it.src_offset)
                    && dso.checked_add(*sz) == Some(it.dst_offset);
                if adjacent {
                    *sz += it.size;
                }
                adjacent
            }
            _ => false,
        };
        if !merged {
            p.src_offsets.push(it.src_offset);
            p.dst_offsets.push(it.dst_offset);
            p.sizes.push(it.size);
        }
        if p.tags.last() != Some(&it.tag) {
            p.tags.push(it.tag);
        }
    }
    set
}

/// Overflow-safe: is `[off, off + size)` inside `[0, len)`?
pub fn in_bounds(off: u64, size: u64, len: u64) -> bool {
    size <= len && off <= len - size
}

fn check_alone(
    it: &TransferItem,
    can_handle: &impl Fn(&TransferRef, &TransferRef) -> bool,
) -> Result<(), RejectReason> {
    if !it.src.has_host_ptr() || !it.dst.has_host_ptr() {
        return Err(RejectReason::InvalidEndpoint);
    }
    if it.src.addr.checked_add(it.src.size).is_none()
        || it.dst.addr.checked_add(it.dst.size).is_none()
    {
        return Err(RejectReason::EndpointOverflow);
    }
    if !can_handle(&it.src, &it.dst) {
        return Err(RejectReason::NoEngine);
    }
    if !in_bounds(it.src_offset, it.size, it.src.size) {
        return Err(RejectReason::SrcOutOfBounds);
    }
    if !in_bounds(it.dst_offset, it.size, it.dst.size) {
        return Err(RejectReason::DstOutOfBounds);
    }
    Ok(())
}

/// Whether no accepted item's write range overlaps any other accepted range (read or write,
/// its own source included).
///
/// Only writes are sorted (and not even they when they come in address order, as a gather's
/// destinations usually do): disjoint sorted writes are checked with one sweep, and each read
/// is looked up among them by binary search, only when its address space holds a write. A
/// host→device batch's reads are all in the host's space and cost one comparison each.
fn overlap_free(items: &[TransferItem], verdict: &[Result<bool, RejectReason>]) -> bool {
    let accepted = || items.iter().zip(verdict).filter(|(_, v)| **v == Ok(true)).map(|(it, _)| it);
    // Sized once for every item: growing it by doubling would touch (and, for a large batch,
    // fault in) about twice the memory.
    let mut writes: Vec<(Space, u64, u64)> = Vec::with_capacity(items.len());
    writes.extend(accepted().map(|it| {
        let d = it.dst.addr + it.dst_offset;
        (it.dst.space(), d, d + it.size)
    }));
    if !writes.is_sorted_by_key(|&(sp, s, _)| (sp, s)) {
        writes.sort_unstable_by_key(|&(sp, s, _)| (sp, s));
    }
    // Sorted by start within a space: a write overlaps an earlier one iff it starts before the
    // previous one's end (all of them disjoint so far, so the previous end is the largest).
    if writes.windows(2).any(|w| w[0].0 == w[1].0 && w[1].1 < w[0].2) {
        return false;
    }
    // The spaces written to, in order (a batch writes to one or two).
    let mut spaces: Vec<Space> = Vec::new();
    for &(sp, _, _) in &writes {
        if spaces.last() != Some(&sp) {
            spaces.push(sp);
        }
    }
    accepted().all(|it| {
        let sp = it.src.space();
        if !spaces.contains(&sp) {
            return true;
        }
        let s = it.src.addr + it.src_offset;
        let e = s + it.size;
        // The last write starting before `e`: disjoint and sorted, so ends ascend too and only
        // it can reach past `s`.
        let i = writes.partition_point(|&(wsp, ws, _)| (wsp, ws) < (sp, e));
        i == 0 || writes[i - 1].0 != sp || writes[i - 1].2 <= s
    })
}

/// Disjoint, merged half-open ranges per address space.
#[derive(Default)]
struct Ranges {
    by_space: HashMap<Space, BTreeMap<u64, u64>>,
}

impl Ranges {
    fn overlaps(&self, sp: Space, s: u64, e: u64) -> bool {
        let Some(m) = self.by_space.get(&sp) else { return false };
        // Ranges are disjoint and sorted, so only the last one starting before `e` can overlap.
        m.range(..e).next_back().is_some_and(|(_, &end)| end > s)
    }

    fn insert(&mut self, sp: Space, mut s: u64, mut e: u64) {
        let m = self.by_space.entry(sp).or_default();
        // Merge every range that overlaps or touches [s, e).
        while let Some((&rs, &re)) = m.range(..=e).next_back() {
            if re < s {
                break;
            }
            m.remove(&rs);
            s = s.min(rs);
            e = e.max(re);
        }
        m.insert(s, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Loc;

    #[test]
    fn ranges_merge_and_detect_overlap() {
        let mut r = Ranges::default();
        r.insert(Space::Host, 10, 20);
        r.insert(Space::Host, 30, 40);
        r.insert(Space::Host, 20, 30);
        assert_eq!(r.by_space[&Space::Host].len(), 1);
        assert!(r.overlaps(Space::Host, 39, 50));
        assert!(!r.overlaps(Space::Host, 40, 50));
        assert!(!r.overlaps(Space::Host, 0, 10));
        assert!(!r.overlaps(Space::Device(0), 10, 20));
        r.insert(Space::Host, 0, 100);
        assert_eq!(r.by_space[&Space::Host].len(), 1);
        assert!(r.overlaps(Space::Host, 99, 1000));
    }

    /// An endpoint at `addr` in the host's space or device 0's (fake: planning never reads it).
    fn at(addr: u64, device: bool) -> TransferRef {
        let (loc, device) = if device { (Loc::Device, Some(0)) } else { (Loc::Cpu, None) };
        TransferRef { addr, size: 1 << 20, loc, device }
    }

    /// The rule by brute force: some accepted item's write range meets another accepted item's
    /// write or any accepted item's read (its own included) in the same address space.
    fn overlaps_by_pairs(items: &[TransferItem]) -> bool {
        let range = |r: &TransferRef, off: u64, n: u64| (r.space(), r.addr + off, r.addr + off + n);
        let meet =
            |a: (Space, u64, u64), b: (Space, u64, u64)| a.0 == b.0 && a.1 < b.2 && b.1 < a.2;
        items.iter().enumerate().any(|(i, w)| {
            let wr = range(&w.dst, w.dst_offset, w.size);
            items.iter().enumerate().any(|(j, o)| {
                meet(wr, range(&o.src, o.src_offset, o.size))
                    || (i != j && meet(wr, range(&o.dst, o.dst_offset, o.size)))
            })
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

        /// The sorted-writes check decides exactly as comparing every pair: writes in or out of
        /// order, reads in a written space or not, ranges that touch without overlapping.
        #[test]
        fn overlap_free_decides_as_every_pair_does(
            raw in proptest::collection::vec(
                (0u64..64, proptest::bool::ANY, 0u64..64, proptest::bool::ANY, 1u64..8),
                0..12,
            ),
        ) {
            let items: Vec<TransferItem> = raw
                .iter()
                .enumerate()
                .map(|(i, &(s, s_dev, d, d_dev, n))| TransferItem {
                    src: at(0x1000, s_dev),
                    src_offset: s,
                    dst: at(0x1000, d_dev),
                    dst_offset: d,
                    size: n,
                    tag: i as u64,
                })
                .collect();
            let verdict = vec![Ok(true); items.len()];
            proptest::prop_assert_eq!(overlap_free(&items, &verdict), !overlaps_by_pairs(&items));
        }
    }
}
