//! The shared planner and the host engine it feeds.
mod common;
use common::*;
use ferry_copy::planner::{in_bounds, plan_items};
use ferry_copy::{
    transfer, transfer_detailed, CompositeTransferEngine, HbmCopyEngine, LocalCopyConfig,
    LocalCopyEngine, RejectReason, TransferEngine, TransferItem, TransferRef,
};
use proptest::prelude::*;
use std::sync::Arc;

fn item(
    src: TransferRef,
    so: u64,
    dst: TransferRef,
    dof: u64,
    size: u64,
    tag: u64,
) -> TransferItem {
    TransferItem { src, src_offset: so, dst, dst_offset: dof, size, tag }
}

fn fake(addr: u64, size: u64) -> TransferRef {
    // SAFETY: planning only; these endpoints are never copied through.
    unsafe { TransferRef::host(addr as *mut u8, size as usize) }
}

#[test]
fn coalesces_adjacent_segments_into_one_plan() {
    let (a, b) = (fake(0x10000, 4096), fake(0x20000, 4096));
    let items: Vec<_> = (0..4).map(|i| item(a, i * 1024, b, i * 1024, 1024, i)).collect();
    let set = plan_items(&items, |_, _| true);
    assert_eq!(set.plans.len(), 1);
    let p = &set.plans[0];
    assert_eq!(
        (p.src_offsets.clone(), p.dst_offsets.clone(), p.sizes.clone()),
        (vec![0], vec![0], vec![4096])
    );
    assert_eq!(p.tags, [0, 1, 2, 3]);
    assert!(set.rejected.is_empty() && set.skipped.is_empty());
}

#[test]
fn adjacency_must_hold_on_both_sides_and_in_order() {
    let (a, b) = (fake(0x10000, 8192), fake(0x20000, 8192));
    let items = [
        item(a, 0, b, 0, 1024, 0),
        item(a, 1024, b, 2048, 1024, 1), // adjacent in src only
        item(a, 4096, b, 4096, 1024, 2),
        item(a, 3072, b, 3072, 1024, 3), // adjacent to #1's dst end, but #2 came in between
        item(a, 5120, b, 5120, 512, 3),  // adjacent to #2... no: last segment is #3; not merged
    ];
    let set = plan_items(&items, |_, _| true);
    let p = &set.plans[0];
    assert_eq!(p.sizes, [1024, 1024, 1024, 1024, 512]);
    assert_eq!(p.tags, [0, 1, 2, 3], "adjacent duplicate tags collapse");
}

#[test]
fn separate_plan_per_endpoint_pair_in_first_appearance_order() {
    let (a, b, c) = (fake(0x10000, 4096), fake(0x20000, 4096), fake(0x30000, 4096));
    let items = [item(a, 0, b, 0, 64, 0), item(a, 64, c, 0, 64, 1), item(a, 128, b, 64, 64, 2)];
    let set = plan_items(&items, |_, _| true);
    assert_eq!(set.plans.len(), 2);
    assert_eq!((set.plans[0].dst, set.plans[1].dst), (b, c));
    assert_eq!(set.plans[0].tags, [0, 2]);
    assert_eq!(set.plans[0].sizes, [64, 64], "adjacent in dst but not in src: two segments");
}

#[test]
fn rejects_every_out_of_bounds_shape_without_overflow() {
    let (a, b) = (fake(0x10000, 1024), fake(0x20000, 1024));
    let big = u64::MAX;
    let cases = [
        (item(a, 0, b, 0, 1025, 1), RejectReason::SrcOutOfBounds), // size > src.size
        (item(a, 512, b, 0, 1024, 2), RejectReason::SrcOutOfBounds), // offset + size past end
        (item(a, 1024, b, 0, 1, 3), RejectReason::SrcOutOfBounds), // starts at the end
        (item(a, big, b, 0, 2, 4), RejectReason::SrcOutOfBounds),  // offset + size overflows
        (item(a, 1, b, 0, big, 5), RejectReason::SrcOutOfBounds),  // size overflows
        (item(a, 0, b, 1, 1024, 6), RejectReason::DstOutOfBounds),
        (item(a, 0, b, big - 1, 8, 7), RejectReason::DstOutOfBounds),
        (item(a, 0, b, 1024, 1, 8), RejectReason::DstOutOfBounds),
        (item(fake(u64::MAX - 10, 100), 0, b, 0, 8, 9), RejectReason::EndpointOverflow),
        (item(a, 0, fake(u64::MAX - 10, 100), 0, 8, 10), RejectReason::EndpointOverflow),
        (item(fake(0, 100), 0, b, 0, 8, 11), RejectReason::InvalidEndpoint),
        (item(a, 0, fake(0x40000, 0), 0, 8, 12), RejectReason::InvalidEndpoint),
    ];
    let mut items: Vec<_> = cases.iter().map(|(i, _)| *i).collect();
    items.push(item(a, 0, b, 0, 1024, 99)); // the one good item (edge: exactly fills both)
    let set = plan_items(&items, |_, _| true);
    let want: Vec<_> = cases.iter().map(|(i, r)| (i.tag, *r)).collect();
    let got: Vec<_> = set.rejected.iter().map(|r| (r.tag, r.reason)).collect();
    assert_eq!(got, want);
    assert_eq!(set.plans.len(), 1);
    assert_eq!(set.plans[0].tags, [99]);
    assert!(in_bounds(0, 0, 0) && in_bounds(5, 0, 5) && !in_bounds(6, 0, 5));
    assert!(!in_bounds(u64::MAX, 1, u64::MAX) && in_bounds(u64::MAX - 1, 1, u64::MAX));
}

#[test]
fn rejects_overlapping_items_and_skips_empty_ones() {
    let (a, b) = (fake(0x10000, 4096), fake(0x20000, 4096));
    let same = fake(0x10000, 4096);
    let items = [
        item(a, 0, b, 0, 1024, 0),
        item(a, 0, b, 512, 1024, 1),    // writes bytes item 0 wrote
        item(b, 0, a, 2048, 256, 2),    // reads bytes item 0 wrote
        item(a, 2048, b, 2048, 512, 3), // fine (reading a's bytes that nobody wrote)
        item(a, 0, same, 100, 200, 4),  // src and dst overlap in one buffer
        item(b, 3000, a, 2048, 16, 5),  // writes bytes item 3 reads
        item(a, 0, b, 4000, 0, 6),      // empty: skipped
    ];
    let set = plan_items(&items, |_, _| true);
    let got: Vec<_> = set.rejected.iter().map(|r| (r.tag, r.reason)).collect();
    assert_eq!(
        got,
        [
            (1, RejectReason::OverlapsEarlierItem),
            (2, RejectReason::OverlapsEarlierItem),
            (4, RejectReason::SrcDstOverlap),
            (5, RejectReason::OverlapsEarlierItem),
        ]
    );
    assert_eq!(set.skipped, [6]);
    let planned: Vec<u64> = set.plans.iter().flat_map(|p| p.tags.clone()).collect();
    assert_eq!(planned, [0, 3]);
}

#[test]
fn local_engine_copies_scattered_pages_and_leaves_rejected_ranges_alone() {
    let _bound = ferry_watchdog::bound("the local copy engine's threads");
    let mut src = pattern(8192, 1);
    let mut dst = vec![0u8; 8192];
    let (s, d) = (host_ref(&mut src), host_ref(&mut dst));
    let items = [
        item(s, 0, d, 4096, 1024, 0),
        item(s, 4096, d, 0, 1024, 1),
        item(s, 8000, d, 2048, 1024, 2), // out of bounds in src
    ];
    let e = LocalCopyEngine::default();
    let mut failed = Vec::new();
    assert!(!transfer(&e, &items, &mut failed));
    assert_eq!(failed, [2]);
    assert_eq!(&dst[4096..5120], &src[..1024]);
    assert_eq!(&dst[..1024], &src[4096..5120]);
    assert!(dst[2048..3072].iter().all(|&b| b == 0), "the rejected range stays zero");
}

#[test]
fn local_engine_splits_large_batches_over_threads() {
    let _bound = ferry_watchdog::bound("the local copy engine's threads");
    let mut src = pattern(6 << 20, 3);
    let mut dst = vec![0u8; 6 << 20];
    let (s, d) = (host_ref(&mut src), host_ref(&mut dst));
    let items = [item(s, 0, d, 3 << 20, 3 << 20, 0), item(s, 3 << 20, d, 0, (3 << 20) - 5, 1)];
    let e = LocalCopyEngine::new(LocalCopyConfig { max_threads: 3, ..Default::default() });
    assert!(transfer(&e, &items, &mut Vec::new()));
    assert_eq!(&dst[3 << 20..], &src[..3 << 20]);
    assert_eq!(&dst[..(3 << 20) - 5], &src[3 << 20..(6 << 20) - 5]);
}

#[test]
fn engines_split_the_pair_space_without_overlap() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(1);
    let hbm = HbmCopyEngine::new(p.clone(), Default::default());
    let local = LocalCopyEngine::default();
    let (h1, h2) = (fake(0x1000, 64), fake(0x2000, 64));
    let dev = p.device(0).unwrap().malloc(64).unwrap();
    let d = TransferRef::device(0, dev, 64);
    for (s, t, want_local, want_hbm) in
        [(h1, h2, true, false), (h1, d, false, true), (d, h1, false, true), (d, d, false, true)]
    {
        assert_eq!(local.can_handle(&s, &t), want_local);
        assert_eq!(hbm.can_handle(&s, &t), want_hbm);
    }
    let mut c = CompositeTransferEngine::new();
    c.add_engine(Arc::new(local)).add_engine(Arc::new(hbm));
    assert_eq!(c.select_engine(&h1, &h2), Some(0));
    assert_eq!(c.select_engine(&h1, &d), Some(1));
    assert_eq!(c.select_engine(&fake(0, 0), &d), None);
}

#[test]
fn composite_routes_a_mixed_batch_and_reports_unclaimed_items() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(1);
    let dev = p.device(0).unwrap().malloc(4096).unwrap();
    let d = TransferRef::device(0, dev, 4096);
    let mut src = pattern(4096, 2);
    let mut dst = vec![0u8; 4096];
    let (s, t) = (host_ref(&mut src), host_ref(&mut dst));
    let mut c = CompositeTransferEngine::new();
    c.add_engine(Arc::new(LocalCopyEngine::default()))
        .add_engine(Arc::new(HbmCopyEngine::new(p.clone(), Default::default())));
    let items = [
        item(s, 0, t, 0, 1024, 0),
        item(s, 1024, d, 0, 1024, 1),
        item(fake(0, 0), 0, d, 0, 16, 42),
        item(s, 0, t, 2048, 0, 7),
    ];
    let set = c.plan(&items);
    assert!(set.plans.iter().all(|p| p.engine.is_some()));
    assert_eq!(set.rejected_tags(), [42]);
    assert_eq!(set.rejected[0].reason, RejectReason::InvalidEndpoint);
    assert_eq!(set.skipped, [7]);
    let o = transfer_detailed(&c, &items);
    assert_eq!(o.failed_tags(), [42]);
    assert_eq!(&dst[..1024], &src[..1024]);
    assert_eq!(read_dev(&p, 0, dev, 1024), &src[1024..2048]);
    // A plan without an owner fails with its tags.
    let mut orphan = set.plans[0].clone();
    orphan.engine = None;
    let mut out = Vec::new();
    c.submit(vec![orphan]).unwrap().wait(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].code, ferry_copy::FailureCode::NotSubmitted);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// A batch copies exactly the bytes its accepted items describe: every accepted item's
    /// destination holds its source bytes, everything else is untouched, and the rejected items
    /// are exactly the out-of-bounds ones and those overlapping an earlier accepted one.
    #[test]
    fn plan_copies_exactly_the_items_bytes(
        raw in proptest::collection::vec((0u64..1200, 0u64..1200, 0u64..200), 0..40),
        threads in 1usize..3,
    ) {
        let _bound = ferry_watchdog::bound("the copy engine's threads");
        let mut src = pattern(1024, 7);
        let mut dst = vec![0xEEu8; 1024];
        let (s, d) = (host_ref(&mut src), host_ref(&mut dst));
        let items: Vec<_> = raw.iter().enumerate()
            .map(|(i, &(so, dof, n))| item(s, so, d, dof, n, i as u64)).collect();
        // Model.
        let mut model = vec![0xEEu8; 1024];
        let mut written: Vec<(u64, u64)> = Vec::new();
        let mut want_rejected = Vec::new();
        let mut want_bytes = 0;
        for it in &items {
            if it.size == 0 { continue; }
            if it.src_offset + it.size > 1024 || it.dst_offset + it.size > 1024 {
                want_rejected.push(it.tag);
                continue;
            }
            let (a, b) = (it.dst_offset, it.dst_offset + it.size);
            if written.iter().any(|&(x, y)| a < y && x < b) {
                want_rejected.push(it.tag);
                continue;
            }
            written.push((a, b));
            want_bytes += it.size;
            let (so, dof, n) = (it.src_offset as usize, it.dst_offset as usize, it.size as usize);
            model[dof..dof + n].copy_from_slice(&src[so..so + n]);
        }
        let e = LocalCopyEngine::new(LocalCopyConfig { max_threads: threads, threads_min_bytes: 0, ..Default::default() });
        let set = e.plan(&items);
        prop_assert_eq!(set.plans.iter().map(|p| p.bytes()).sum::<u64>(), want_bytes);
        let o = transfer_detailed(&e, &items);
        prop_assert_eq!(o.failed_tags(), want_rejected);
        prop_assert!(o.failures.is_empty());
        prop_assert_eq!(dst, model);
    }
}
