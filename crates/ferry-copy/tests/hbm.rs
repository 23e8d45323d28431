//! HbmCopyEngine: copy kinds, the gather decision, bad input and injected failures.
mod common;
use common::*;
use ferry_copy::hbm::gather::FRAGMENT_BYTES;
use ferry_copy::{
    transfer_detailed, FailureCode, GatherSkip, RejectReason, TransferEngine, TransferItem,
    TransferRef,
};
use ferry_sim::fault::FaultPoint;
use proptest::prelude::*;

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

#[test]
fn round_trips_host_to_device_and_back_without_the_kernel() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(1);
    let e = engine(&p);
    let mut src = pattern(256 * KIB as usize, 1);
    let mut back = vec![0u8; 256 * KIB as usize];
    let dev = p.device(0).unwrap().malloc(256 * KIB).unwrap();
    let d = TransferRef::device(0, dev, 256 * KIB);
    let (s, b) = (host_ref(&mut src), host_ref(&mut back));
    assert!(transfer_detailed(&*e, &[item(s, 0, d, 0, 256 * KIB, 0)]).is_ok());
    assert!(transfer_detailed(&*e, &[item(d, 0, b, 0, 256 * KIB, 0)]).is_ok());
    assert_eq!(back, src);
    let st = e.stats();
    assert_eq!((st.gathers, st.fallback_plans), (0, 2));
    assert_eq!(st.skip(GatherSkip::HostNotGatherable), 2, "host memory was not registered");
    assert_eq!(p.device(0).unwrap().counters().launches, 0);
}

#[test]
fn gather_round_trips_scattered_pages_in_one_launch_each_way() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(1);
    let e = engine(&p);
    const N: u64 = 64;
    const F: u64 = 8448; // the production median restore fragment
    let mut host = pattern((2 * N * F) as usize, 3);
    let mut back = vec![0u8; (2 * N * F) as usize];
    register(&e, &mut host);
    register(&e, &mut back);
    let (h, b) = (host_ref(&mut host), host_ref(&mut back));
    let dev = p.device(0).unwrap().malloc(N * F).unwrap();
    let d = TransferRef::device(0, dev, N * F);
    let up = scattered(h, 0, d, 0, F, N, 0);
    assert!(transfer_detailed(&*e, &up).is_ok());
    // Read back with the same permutation: device slot perm(i) → back at 2·i·F.
    let down: Vec<_> =
        up.iter().map(|it| item(d, it.dst_offset, b, it.src_offset, it.size, it.tag)).collect();
    assert!(transfer_detailed(&*e, &down).is_ok());
    assert_eq!(p.device(0).unwrap().counters().launches, 2);
    for it in &up {
        let (o, n) = (it.src_offset as usize, it.size as usize);
        assert_eq!(&back[o..o + n], &host[o..o + n]);
    }
    e.clear_host_gather_regions();
}

#[test]
fn gather_decision_follows_count_mean_and_registration() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(1);
    let e = engine(&p);
    let mut host = pattern(8 << 20, 4);
    register(&e, &mut host);
    let h = host_ref(&mut host);
    let dev = p.device(0).unwrap().malloc(4 << 20).unwrap();
    let d = TransferRef::device(0, dev, 4 << 20);
    let launches = || p.device(0).unwrap().counters().launches;
    // One fragment: too few.
    assert!(transfer_detailed(&*e, &[item(h, 0, d, 0, 4096, 0)]).is_ok());
    assert_eq!(launches(), 0);
    // Two fragments, mean 64 KiB: gathered.
    assert!(transfer_detailed(&*e, &scattered(h, 0, d, 0, 64 * KIB, 2, 0)).is_ok());
    assert_eq!(launches(), 1);
    // Mean exactly 128 KiB: stays on the copy engine.
    assert!(transfer_detailed(&*e, &scattered(h, 0, d, 0, 128 * KIB, 4, 0)).is_ok());
    assert_eq!(launches(), 1);
    // Fragments from two plans (two device buffers) pool into one bucket: one launch.
    let dev2 = p.device(0).unwrap().malloc(4096).unwrap();
    let d2 = TransferRef::device(0, dev2, 4096);
    let items = [item(h, 0, d, 0, 4096, 0), item(h, 8192, d2, 0, 4096, 1)];
    assert!(transfer_detailed(&*e, &items).is_ok());
    assert_eq!(launches(), 2);
    // H2D and D2H fragments share a bucket too.
    let items = [item(h, 0, d, 0, 4096, 0), item(d, 8192, h, 1 << 20, 4096, 1)];
    assert!(transfer_detailed(&*e, &items).is_ok());
    assert_eq!(launches(), 3);
    assert_eq!(&host[1 << 20..(1 << 20) + 4096], &read_dev(&p, 0, dev, 12288)[8192..]);
    let st = e.stats();
    assert_eq!(st.skip(GatherSkip::TooFewFragments), 1);
    assert_eq!(st.skip(GatherSkip::AtOrAboveThreshold), 1);
    e.clear_host_gather_regions();
}

/// A slot's descriptor staging grows to twice the fragments the gather needs (at least 256
/// descriptors), so growth is amortized: a later gather of up to that many fragments allocates
/// nothing, one past it grows the staging once.
#[test]
fn staging_grows_to_twice_the_fragments_so_a_later_larger_gather_allocates_nothing() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(1);
    let e = engine(&p);
    const F: u64 = 4096;
    const SLOTS: u64 = 1024;
    let mut host = pattern((2 * SLOTS * F) as usize, 5);
    register(&e, &mut host);
    let h = host_ref(&mut host);
    let dev = p.device(0).unwrap().malloc(SLOTS * F).unwrap();
    let d = TransferRef::device(0, dev, SLOTS * F);
    let allocs = || p.device(0).unwrap().counters().device_allocs;
    // 300 fragments (past the 256-descriptor minimum): the staging grows to 600 descriptors.
    assert!(transfer_detailed(&*e, &scattered(h, 0, d, 0, F, 300, 0)).is_ok());
    let grown = allocs();
    assert!(transfer_detailed(&*e, &scattered(h, 0, d, 0, F, 599, 0)).is_ok());
    assert_eq!(allocs(), grown, "599 fragments fit the staging grown for 300");
    let used = || p.device(0).unwrap().memory().used();
    let before = used();
    assert!(transfer_detailed(&*e, &scattered(h, 0, d, 0, F, 601, 0)).is_ok());
    assert_eq!(allocs(), grown + 1, "601 fragments grow the staging once");
    // To 1202 descriptors, and the 600-descriptor buffer it replaced is freed.
    let size = |descriptors: usize| ((descriptors * FRAGMENT_BYTES) as u64).next_multiple_of(64);
    assert_eq!(used() - before, size(1202) - size(600), "the old staging buffer was freed");
    assert_eq!(p.device(0).unwrap().counters().launches, 3, "each batch was one gather");
    e.clear_host_gather_regions();
}

#[test]
fn copies_device_to_device_on_one_and_across_devices() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(2);
    let e = engine(&p);
    let mut src = pattern(64 * KIB as usize, 6);
    let (d0, d1) = (
        p.device(0).unwrap().malloc(64 * KIB).unwrap(),
        p.device(1).unwrap().malloc(64 * KIB).unwrap(),
    );
    let a = p.device(0).unwrap().malloc(64 * KIB).unwrap();
    let (r0, r1, ra) = (
        TransferRef::device(0, d0, 64 * KIB),
        TransferRef::device(1, d1, 64 * KIB),
        TransferRef::device(0, a, 64 * KIB),
    );
    let s = host_ref(&mut src);
    assert!(transfer_detailed(&*e, &[item(s, 0, r0, 0, 64 * KIB, 0)]).is_ok());
    assert!(transfer_detailed(&*e, &[item(r0, 0, ra, 0, 64 * KIB, 1)]).is_ok());
    assert!(transfer_detailed(&*e, &[item(ra, 0, r1, 0, 64 * KIB, 2)]).is_ok());
    assert_eq!(read_dev(&p, 1, d1, 64 * KIB as usize), src);
    assert_eq!(e.stats().skip(GatherSkip::KindNotHtodOrDtoh), 2);
    // The cross-device copy ran on the destination's device.
    assert_eq!(p.device(1).unwrap().counters().bytes_dtod, 64 * KIB);
}

#[test]
fn restores_the_callers_current_device() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(3);
    let e = engine(&p);
    let mut host = pattern(64 * KIB as usize, 8);
    register(&e, &mut host);
    let h = host_ref(&mut host);
    let dev = p.device(0).unwrap().malloc(64 * KIB).unwrap();
    let d = TransferRef::device(0, dev, 64 * KIB);
    p.set_current_device(2).unwrap();
    assert!(transfer_detailed(&*e, &scattered(h, 0, d, 0, 4096, 4, 0)).is_ok()); // gather
    assert_eq!(p.current_ordinal(), 2);
    assert!(transfer_detailed(&*e, &[item(h, 0, d, 0, 4096, 0)]).is_ok()); // fallback
    assert_eq!(p.current_ordinal(), 2);
    let bad = TransferRef::device(9, dev, 64 * KIB);
    assert!(!transfer_detailed(&*e, &[item(h, 0, bad, 0, 4096, 0)]).is_ok());
    assert_eq!(p.current_ordinal(), 2);
    e.clear_host_gather_regions();
}

#[test]
fn bad_input_fails_per_item_with_reasons_and_corrupts_nothing_else() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(2);
    let e = engine(&p);
    let mut host = pattern(64 * KIB as usize, 10);
    let mut unreg = pattern(16 * KIB as usize, 11);
    register(&e, &mut host);
    let (h, u) = (host_ref(&mut host), host_ref(&mut unreg));
    let dev0 = p.device(0).unwrap().malloc(32 * KIB).unwrap();
    let dev1 = p.device(1).unwrap().malloc(32 * KIB).unwrap();
    let guard = p.device(0).unwrap().malloc(4 * KIB).unwrap(); // must stay zero
    let d = TransferRef::device(0, dev0, 32 * KIB);
    let nonexistent = TransferRef::device(7, dev0, 32 * KIB);
    let wrong_dev = TransferRef::device(0, dev1, 32 * KIB); // device 1's address labelled 0
    let items = [
        item(h, 0, d, 0, 4096, 0),           // good (gather bucket of device 0)
        item(h, 8192, d, 4096, 4096, 1),     // good
        item(u, 0, d, 8192, 4096, 2),        // unregistered host: still copied (fallback)
        item(h, 0, nonexistent, 0, 4096, 3), // no such device
        item(h, 0, wrong_dev, 0, 4096, 4),   // address of another device
        item(h, 0, d, 30 * KIB, 4096, 5),    // out of range
        item(h, 16384, d, 0, 1024, 6),       // overlaps item 0's destination
        item(h, 0, d, 12288, 0, 7),          // zero size: skipped
        item(TransferRef::device(0, dev0, 0), 0, d, 0, 16, 8), // empty endpoint
    ];
    let o = transfer_detailed(&*e, &items);
    let rej: Vec<_> = o.rejected.iter().map(|r| (r.tag, r.reason)).collect();
    assert_eq!(
        rej,
        [
            (5, RejectReason::DstOutOfBounds),
            (6, RejectReason::OverlapsEarlierItem),
            (8, RejectReason::InvalidEndpoint),
        ]
    );
    assert_eq!(o.skipped, [7]);
    let mut fails: Vec<_> = o.failures.iter().map(|f| (f.tags.clone(), f.code)).collect();
    fails.sort();
    assert_eq!(
        fails,
        [(vec![3], FailureCode::NoSuchDevice), (vec![4], FailureCode::InvalidAddress)]
    );
    assert!(o.failures.iter().all(|f| !f.message.is_empty()));
    assert_eq!(o.failed_tags(), [3, 4, 5, 6, 8]);
    let got = read_dev(&p, 0, dev0, 32 * KIB as usize);
    assert_eq!(&got[..4096], &host[..4096]);
    assert_eq!(&got[4096..8192], &host[8192..12288]);
    assert_eq!(&got[8192..12288], &unreg[..4096]);
    assert!(got[12288..].iter().all(|&b| b == 0), "nothing else written");
    assert!(read_dev(&p, 0, guard, 4096).iter().all(|&b| b == 0));
    assert!(read_dev(&p, 1, dev1, 32 * KIB as usize).iter().all(|&b| b == 0));
    e.clear_host_gather_regions();
}

#[test]
fn failed_sync_latches_the_kernel_off_and_the_pool_stays_consistent() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(1);
    let e = engine(&p);
    e.prewarm(2);
    let mut host = pattern(256 * KIB as usize, 12);
    register(&e, &mut host);
    let h = host_ref(&mut host);
    let dev = p.device(0).unwrap();
    let buf = dev.malloc(64 * KIB).unwrap();
    let d = TransferRef::device(0, buf, 64 * KIB);
    dev.faults().fail_next(FaultPoint::Synchronize);
    let items = scattered(h, 0, d, 0, 4096, 8, 0);
    assert!(transfer_detailed(&*e, &items).is_ok(), "the fallback still copies");
    check_items(&items, &host, &read_dev(&p, 0, buf, 64 * KIB as usize));
    assert!(e.is_gather_latched());
    assert_eq!(e.stats().skip(GatherSkip::SyncFailed), 1);
    let pool = e.pool_stats(0).unwrap();
    assert_eq!((pool.created, pool.idle), (1, 1), "the failed slot was dropped: {pool:?}");
    // Latched: the next batch runs without the kernel.
    let l = dev.counters().launches;
    let items = scattered(h, 4096, d, 0, 4096, 8, 0);
    assert!(transfer_detailed(&*e, &items).is_ok());
    assert_eq!(dev.counters().launches, l);
    // Re-armed: the capped pool refills to its cap and gathers again.
    e.reset_gather_latch();
    let s0 = dev.counters().streams_created;
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let e = &e;
            sc.spawn(move || {
                // Disjoint source and destination ranges per thread.
                let items = scattered(h, t * 16384, d, t * 8192, 1024, 8, 0);
                assert!(transfer_detailed(&**e, &items).is_ok());
            });
        }
    });
    let pool = e.pool_stats(0).unwrap();
    assert!(pool.created <= 2 && pool.created == pool.idle, "{pool:?}");
    assert!(dev.counters().streams_created - s0 <= 1);
    e.clear_host_gather_regions();
}

#[test]
fn failed_launch_falls_back_without_latching() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(1);
    let e = engine(&p);
    let mut host = pattern(64 * KIB as usize, 13);
    register(&e, &mut host);
    let h = host_ref(&mut host);
    let dev = p.device(0).unwrap();
    let buf = dev.malloc(32 * KIB).unwrap();
    let d = TransferRef::device(0, buf, 32 * KIB);
    dev.faults().fail_next(FaultPoint::Launch);
    let items = scattered(h, 0, d, 0, 4096, 8, 0);
    assert!(transfer_detailed(&*e, &items).is_ok());
    check_items(&items, &host, &read_dev(&p, 0, buf, 32 * KIB as usize));
    assert!(!e.is_gather_latched());
    assert_eq!(e.stats().skip(GatherSkip::LaunchFailed), 1);
    let pool = e.pool_stats(0).unwrap();
    assert_eq!(pool.created, pool.idle);
    // The next batch gathers.
    assert!(transfer_detailed(&*e, &scattered(h, 4096, d, 0, 4096, 8, 0)).is_ok());
    assert_eq!(e.stats().gathers, 1);
    e.clear_host_gather_regions();
}

#[test]
fn injected_copy_failure_mid_batch_fails_that_plan_only_and_the_next_batch_works() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(1);
    let e = engine(&p);
    e.prewarm(2);
    let dev = p.device(0).unwrap();
    let mut src = pattern(64 * KIB as usize, 14);
    let s = host_ref(&mut src);
    let bufs: Vec<_> = (0..3).map(|_| dev.malloc(16 * KIB).unwrap()).collect();
    let refs: Vec<_> = bufs.iter().map(|b| TransferRef::device(0, *b, 16 * KIB)).collect();
    // Three plans (one per device buffer), two segments each, unregistered host: null stream.
    let items: Vec<_> = (0..3u64)
        .flat_map(|i| {
            [
                item(s, i * 20480, refs[i as usize], 0, 4096, i),
                item(s, i * 20480 + 8192, refs[i as usize], 8192, 4096, i),
            ]
        })
        .collect();
    dev.faults().fail_nth(FaultPoint::Copy, 3); // plan 1's first segment
    let o = transfer_detailed(&*e, &items);
    assert_eq!(o.failures.len(), 1, "{o:?}");
    assert_eq!(
        (o.failures[0].tags.clone(), o.failures[0].code),
        (vec![1], FailureCode::CopyFailed)
    );
    for i in [0usize, 2] {
        let got = read_dev(&p, 0, bufs[i], 16 * KIB as usize);
        assert_eq!(&got[..4096], &src[i * 20480..i * 20480 + 4096]);
    }
    let o = transfer_detailed(&*e, &items);
    assert!(o.is_ok(), "{o:?}");
    let got = read_dev(&p, 0, bufs[1], 16 * KIB as usize);
    assert_eq!(&got[8192..12288], &src[20480 + 8192..20480 + 12288]);
    let pool = e.pool_stats(0).unwrap();
    assert_eq!((pool.created, pool.idle, pool.cap), (2, 2, 2));
}

#[test]
fn a_stream_creation_failure_declines_the_gather_and_is_retried_later() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(1);
    let e = engine(&p);
    let mut host = pattern(64 * KIB as usize, 15);
    register(&e, &mut host);
    let h = host_ref(&mut host);
    let dev = p.device(0).unwrap();
    let buf = dev.malloc(32 * KIB).unwrap();
    let d = TransferRef::device(0, buf, 32 * KIB);
    dev.faults().fail_next(FaultPoint::StreamCreate);
    assert!(transfer_detailed(&*e, &scattered(h, 0, d, 0, 4096, 8, 0)).is_ok());
    assert_eq!(e.stats().skip(GatherSkip::NoStream), 1);
    assert_eq!(e.pool_stats(0).unwrap().created, 0, "the reservation was undone");
    assert!(transfer_detailed(&*e, &scattered(h, 0, d, 0, 4096, 8, 0)).is_ok());
    assert_eq!((e.stats().gathers, e.pool_stats(0).unwrap().created), (1, 1));
    e.clear_host_gather_regions();
}

#[test]
fn submit_of_nothing_posts_nothing() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let p = platform(1);
    let e = engine(&p);
    assert!(e.submit(Vec::new()).is_none());
    assert!(transfer_detailed(&*e, &[]).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Through the HBM engine (gather or fallback, whichever it picks), a batch uploads exactly
    /// the accepted items' bytes and nothing else.
    #[test]
    fn hbm_plan_copies_exactly_the_items_bytes(
        raw in proptest::collection::vec((0u64..64, 0u64..64, 1u64..4), 1..24),
        registered in any::<bool>(),
    ) {
        const P: u64 = 512;
        let p = platform(1);
        let e = engine(&p);
        let mut host = pattern((64 * P) as usize, 17);
        if registered { register(&e, &mut host); }
        let h = host_ref(&mut host);
        let buf = p.device(0).unwrap().malloc(64 * P).unwrap();
        let d = TransferRef::device(0, buf, 64 * P);
        let items: Vec<_> = raw.iter().enumerate()
            .map(|(i, &(a, b, n))| item(h, a * P, d, b * P, n * P, i as u64)).collect();
        let mut model = vec![0u8; (64 * P) as usize];
        let mut written: Vec<(u64, u64)> = Vec::new();
        let mut want_rejected = Vec::new();
        for it in &items {
            let (a, b) = (it.dst_offset, it.dst_offset + it.size);
            if it.src_offset + it.size > 64 * P || b > 64 * P || written.iter().any(|&(x, y)| a < y && x < b) {
                want_rejected.push(it.tag);
                continue;
            }
            written.push((a, b));
            let (so, n) = (it.src_offset as usize, it.size as usize);
            model[a as usize..a as usize + n].copy_from_slice(&host[so..so + n]);
        }
        let o = transfer_detailed(&*e, &items);
        prop_assert!(o.failures.is_empty(), "{:?}", o.failures);
        prop_assert_eq!(o.failed_tags(), want_rejected);
        prop_assert_eq!(read_dev(&p, 0, buf, (64 * P) as usize), model);
        e.clear_host_gather_regions();
    }
}
