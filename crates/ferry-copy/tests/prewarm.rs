//! The stream pool and Prewarm (docs/design/copy-pool.md), asserted on the simulated device's
//! counters, never on times.
mod common;
use common::*;
use ferry_copy::{transfer_detailed, HbmConfig, HbmCopyEngine, TransferItem, TransferRef};
use ferry_sim::device::{DEFAULT_MAX_HW_QUEUES, DEFAULT_QUEUE_CONTEXT_BYTES};
use std::sync::{Arc, Barrier};

/// Six threads, each one H2D gather of 16 scattered 4 KiB fragments from its own slice of a
/// registered host region into its own device buffer, all released at once.
fn six_concurrent_gathers(
    p: &ferry_sim::Platform,
    e: &Arc<HbmCopyEngine<ferry_sim::Platform>>,
    threads: usize,
    rounds: usize,
) {
    const N: u64 = 16;
    let slice = (2 * N * 4 * KIB) as usize;
    let mut host = pattern(threads * slice, 5);
    register(e, &mut host);
    let h = host_ref(&mut host);
    let dev = p.device(0).unwrap();
    let bufs: Vec<_> = (0..threads).map(|_| dev.malloc(N * 4 * KIB).unwrap()).collect();
    let barrier = Arc::new(Barrier::new(threads));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (e, b, buf) = (e.clone(), barrier.clone(), bufs[t]);
            std::thread::spawn(move || {
                let d = TransferRef::device(0, buf, N * 4 * KIB);
                b.wait();
                for _ in 0..rounds {
                    let items = scattered(h, (t * slice) as u64, d, 0, 4 * KIB, N, 0);
                    let o = transfer_detailed(&*e, &items);
                    assert!(o.is_ok(), "{o:?}");
                }
            })
        })
        .collect();
    for t in hs {
        t.join().unwrap();
    }
    for (t, buf) in bufs.iter().enumerate() {
        let got = read_dev(p, 0, *buf, (N * 4 * KIB) as usize);
        let items = scattered(h, (t * slice) as u64, h, 0, 4 * KIB, N, 0);
        check_items(&items, &host, &got);
    }
    e.clear_host_gather_regions();
}

#[test]
fn gathers_run_on_prewarmed_streams() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    let p = platform(1);
    let e = engine(&p);
    let r = e.prewarm(3);
    assert_eq!((r.devices[0].streams, r.devices[0].cap), (3, 3), "{r:?}");
    assert!(r.devices[0].errors.is_empty(), "{r:?}");
    let dev = p.device(0).unwrap();
    let before = dev.counters();
    six_concurrent_gathers(&p, &e, 6, 1);
    let after = dev.counters();
    assert_eq!(
        after.streams_created, before.streams_created,
        "six gathers shared the three streams"
    );
    assert_eq!(after.launches - before.launches, 6, "one gather kernel per batch");
    assert_eq!(e.stats().gathers, 6);
    let pool = e.pool_stats(0).unwrap();
    assert_eq!((pool.created, pool.idle, pool.cap, pool.peak), (3, 3, 3, 3));
}

#[test]
fn without_prewarm_gathers_create_streams_lazily() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    let p = platform(1);
    let e = engine(&p);
    let dev = p.device(0).unwrap();
    assert_eq!(dev.counters().streams_created, 0, "no stream before the first gather");
    six_concurrent_gathers(&p, &e, 1, 1);
    assert_eq!(dev.counters().streams_created, 1, "the first gather created its stream");
    assert_eq!(dev.loaded_code_objects(), [ferry_copy::hbm::gather::GATHER_KERNEL]);
    six_concurrent_gathers(&p, &e, 4, 2);
    let pool = e.pool_stats(0).unwrap();
    assert_eq!(pool.cap, 0, "uncapped without prewarm");
    assert!((1..=4).contains(&pool.created), "{pool:?}");
    assert_eq!(
        dev.counters().streams_created,
        pool.created as u64,
        "streams come only from the pool"
    );
}

#[test]
fn capped_pool_never_exceeds_n() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    let p = platform(1);
    let e = engine(&p);
    e.prewarm(2);
    let before = p.device(0).unwrap().counters().streams_created;
    six_concurrent_gathers(&p, &e, 8, 5);
    let pool = e.pool_stats(0).unwrap();
    assert_eq!((pool.created, pool.peak, pool.cap), (2, 2, 2), "{pool:?}");
    assert_eq!(p.device(0).unwrap().counters().streams_created, before);
    assert_eq!(e.stats().gathers, 40);
}

#[test]
fn waiting_for_a_stream_cannot_deadlock() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    // 16 threads share 2 streams; every batch must finish (the test's own timeout is the bound).
    let p = platform(1);
    let e = engine(&p);
    e.prewarm(2);
    six_concurrent_gathers(&p, &e, 16, 4);
    let pool = e.pool_stats(0).unwrap();
    assert_eq!((pool.created, pool.idle, pool.peak), (2, 2, 2), "{pool:?}");
    assert_eq!(e.stats().gathers, 64);
}

/// Mixed serving load on device 0: concurrent gathers plus every kind of fallback copy.
fn serving_load(
    p: &ferry_sim::Platform,
    e: &Arc<HbmCopyEngine<ferry_sim::Platform>>,
    threads: usize,
) {
    let dev = p.device(0).unwrap();
    let mut unregistered = pattern((threads * 512 * KIB as usize).max(1), 9);
    let u = host_ref(&mut unregistered);
    let big: Vec<_> = (0..threads).map(|_| dev.malloc(512 * KIB).unwrap()).collect();
    let other = dev.malloc(512 * KIB).unwrap();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (e, b) = (e.clone(), big[t]);
            std::thread::spawn(move || {
                let d = TransferRef::device(0, b, 512 * KIB);
                let base = t as u64 * 512 * KIB;
                // Unregistered host memory: null-stream copies each way.
                let up = [
                    TransferItem {
                        src: u,
                        src_offset: base,
                        dst: d,
                        dst_offset: 0,
                        size: 64 * KIB,
                        tag: 1,
                    },
                    TransferItem {
                        src: u,
                        src_offset: base + 128 * KIB,
                        dst: d,
                        dst_offset: 64 * KIB,
                        size: 64 * KIB,
                        tag: 2,
                    },
                ];
                assert!(transfer_detailed(&*e, &up).is_ok());
                let down = [TransferItem {
                    src: d,
                    src_offset: 0,
                    dst: u,
                    dst_offset: base + 256 * KIB,
                    size: 4 * KIB,
                    tag: 3,
                }];
                assert!(transfer_detailed(&*e, &down).is_ok());
                // Large fragments: at or above the gather threshold.
                let large = [
                    TransferItem {
                        src: u,
                        src_offset: base,
                        dst: d,
                        dst_offset: 256 * KIB,
                        size: 128 * KIB,
                        tag: 4,
                    },
                    TransferItem {
                        src: d,
                        src_offset: 0,
                        dst: u,
                        dst_offset: base + 384 * KIB,
                        size: 128 * KIB,
                        tag: 5,
                    },
                ];
                assert!(transfer_detailed(&*e, &large).is_ok());
            })
        })
        .collect();
    for t in hs {
        t.join().unwrap();
    }
    // Device to device.
    let dd = [TransferItem {
        src: TransferRef::device(0, big[0], 512 * KIB),
        src_offset: 0,
        dst: TransferRef::device(0, other, 512 * KIB),
        dst_offset: 0,
        size: 512 * KIB,
        tag: 6,
    }];
    assert!(transfer_detailed(&**e, &dd).is_ok());
    six_concurrent_gathers(p, e, threads, 2);
}

#[test]
fn after_prewarm_fallback_copies_create_no_queue_and_load_no_code_object() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    let p = platform(1);
    let e = engine(&p);
    e.prewarm(3);
    let dev = p.device(0).unwrap();
    let before = dev.counters();
    serving_load(&p, &e, 6);
    let after = dev.counters();
    assert_eq!(after.compute_queues_created, before.compute_queues_created);
    assert_eq!(after.sdma_queues_created, before.sdma_queues_created);
    assert_eq!(after.queue_memory_bytes, before.queue_memory_bytes);
    assert_eq!(after.code_object_loads, before.code_object_loads);
    assert_eq!(after.streams_created, before.streams_created);
    assert_eq!((after.null_stream_init_htod, after.null_stream_init_dtoh), (1, 1));
    assert!(e.stats().fallback_plans > 0 && e.stats().gathers > 0);
}

#[test]
fn with_the_kernel_disabled_only_the_null_stream_is_warmed() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    let p = platform(2);
    let e = Arc::new(HbmCopyEngine::new(
        p.clone(),
        HbmConfig { gather_kernel: false, ..Default::default() },
    ));
    let r = e.prewarm(8);
    for (d, dr) in p.devices().iter().zip(&r.devices) {
        let c = d.counters();
        assert!(dr.null_stream_warm && dr.errors.is_empty(), "{dr:?}");
        assert_eq!((dr.streams, dr.cap), (0, 0), "no pool to cap");
        assert_eq!(c.streams_created, 0);
        assert_eq!(c.compute_queues_created, 1, "the null stream's queue");
        assert_eq!(c.sdma_queues_created, 1, "one copy engine for the null stream");
        assert_eq!((c.null_stream_init_htod, c.null_stream_init_dtoh), (1, 1));
        assert_eq!(c.code_object_loads, 0);
    }
    // Serving then uses the null stream only, and creates nothing.
    let before = p.device(0).unwrap().counters();
    serving_load(&p, &e, 4);
    let after = p.device(0).unwrap().counters();
    assert_eq!(after.launches, before.launches);
    assert_eq!(after.compute_queues_created, before.compute_queues_created);
    assert_eq!(after.sdma_queues_created, before.sdma_queues_created);
    assert!(e.stats().skip(ferry_copy::GatherSkip::Disabled) > 0);
}

#[test]
fn queue_count_after_prewarm_is_what_the_pool_needs_and_does_not_grow() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    for n in [1usize, 3, 8] {
        let p = platform(2);
        let e = engine(&p);
        let r = e.prewarm(n);
        for (d, dr) in p.devices().iter().zip(&r.devices) {
            let c = d.counters();
            assert!(dr.errors.is_empty(), "{dr:?}");
            assert_eq!(c.streams_created, n as u64);
            let compute = n.min(DEFAULT_MAX_HW_QUEUES as usize) as u64 + 1;
            assert_eq!(
                c.compute_queues_created, compute,
                "n pooled streams on at most 4 hardware queues + the null stream's"
            );
            assert_eq!(d.compute_queues() as u64, compute);
            assert_eq!(
                c.sdma_queues_created,
                n as u64 + 1,
                "n gathers + 1 null-stream copy at once"
            );
            assert_eq!(d.copy_engine_queues(), n + 1);
            assert_eq!(
                c.queue_memory_bytes,
                (compute + n as u64 + 1) * DEFAULT_QUEUE_CONTEXT_BYTES
            );
            assert_eq!(c.code_object_loads, 1);
            assert_eq!(c.launches, 0, "the empty gathers are not counted as launches");
            assert_eq!((dr.compute_queues, dr.sdma_queues), (compute, n as u64 + 1));
        }
        let before = p.device(0).unwrap().counters();
        serving_load(&p, &e, 12);
        let after = p.device(0).unwrap().counters();
        assert_eq!(after.compute_queues_created, before.compute_queues_created, "n = {n}");
        assert_eq!(after.sdma_queues_created, before.sdma_queues_created, "n = {n}");
        assert_eq!(after.queue_memory_bytes, before.queue_memory_bytes, "n = {n}");
    }
}

#[test]
fn prewarm_is_idempotent_and_zero_is_off() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    let p = platform(1);
    let e = engine(&p);
    let r = e.prewarm(0);
    assert!(r.devices.is_empty());
    assert_eq!(p.device(0).unwrap().counters(), Default::default(), "n = 0 does nothing");
    assert_eq!(e.pool_stats(0).unwrap().cap, 0);
    let p = platform(1);
    let e = engine(&p);
    e.prewarm(2);
    let c = p.device(0).unwrap().counters();
    assert!(e.prewarm(4).already_prewarmed);
    assert_eq!(p.device(0).unwrap().counters(), c);
    assert_eq!(e.pool_stats(0).unwrap().cap, 2);
}

#[test]
fn prewarm_restores_the_current_device_and_survives_a_failing_device() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    let p = platform(3);
    p.set_current_device(2).unwrap();
    p.device(1).unwrap().faults().fail_nth(ferry_sim::fault::FaultPoint::StreamCreate, 2);
    let e = engine(&p);
    let r = e.prewarm(3);
    assert_eq!(p.current_ordinal(), 2);
    assert_eq!((r.streams, r.already_prewarmed), (3, false), "{r:?}");
    let ordinals: Vec<u32> = r.devices.iter().map(|d| d.ordinal).collect();
    assert_eq!(ordinals, [0, 1, 2], "one entry per device, in order");
    assert_eq!(r.devices[0].cap, 3);
    assert_eq!(r.devices[1].cap, 0, "a device that failed stays uncapped: {:?}", r.devices[1]);
    assert!(!r.devices[1].errors.is_empty());
    assert_eq!(r.devices[2].cap, 3);
    // The failed device still serves, lazily.
    let pool = e.pool_stats(1).unwrap();
    assert_eq!(pool.created, pool.idle);
}

/// Prewarm uploads each slot's whole staging (every descriptor it holds) and one null-stream
/// copy each way: the bytes it moves are exactly those.
#[test]
fn prewarm_uploads_every_slots_whole_staging_and_one_null_stream_copy_each_way() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    let p = platform(1);
    let cfg = HbmConfig { prewarm_staging_fragments: 1000, ..Default::default() };
    let e = Arc::new(HbmCopyEngine::new(p.clone(), cfg));
    let dev = p.device(0).unwrap();
    let before = dev.counters();
    let r = e.prewarm(3);
    assert!(r.devices[0].errors.is_empty(), "{r:?}");
    let after = dev.counters();
    let staging = 3 * 1000 * ferry_copy::hbm::gather::FRAGMENT_BYTES as u64;
    let null = ferry_copy::hbm::NULL_WARM_BYTES as u64;
    assert_eq!(after.bytes_htod - before.bytes_htod, staging + null);
    assert_eq!(after.bytes_dtoh - before.bytes_dtoh, null);
}

#[test]
fn engines_and_handles_are_send_and_sync() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send + ?Sized>() {}
    send_sync::<HbmCopyEngine<ferry_sim::Platform>>();
    send_sync::<ferry_copy::LocalCopyEngine>();
    send_sync::<ferry_copy::CompositeTransferEngine>();
    send_sync::<TransferRef>();
    send::<dyn ferry_copy::TransferHandle>();
}

/// Long mixed load on a capped pool across devices (run with `-- --ignored stress`).
#[test]
#[ignore]
fn stress_capped_pool_under_mixed_load() {
    for _ in 0..5 {
        let p = platform(2);
        let e = engine(&p);
        e.prewarm(2);
        let before = p.device(0).unwrap().counters();
        serving_load(&p, &e, 16);
        six_concurrent_gathers(&p, &e, 16, 20);
        let after = p.device(0).unwrap().counters();
        assert_eq!(after.compute_queues_created, before.compute_queues_created);
        assert_eq!(after.sdma_queues_created, before.sdma_queues_created);
        let pool = e.pool_stats(0).unwrap();
        assert_eq!((pool.created, pool.idle, pool.peak), (2, 2, 2));
    }
}

/// What device 0 holds: allocations made, bytes in use, queues, streams, code objects.
fn holdings(p: &ferry_sim::Platform) -> [u64; 7] {
    let d = p.device(0).unwrap();
    let c = d.counters();
    [
        c.device_allocs,
        d.memory().used(),
        c.compute_queues_created,
        c.sdma_queues_created,
        c.streams_created,
        c.code_object_loads,
        c.queue_memory_bytes,
    ]
}

/// The copy-pool design's verification steps on device 0: the first null-stream copies in both directions,
/// a first 8192-fragment gather, then 16 threads of gathers (64 and 8192 fragments, both
/// directions) mixed with fallback copies in both directions. Every byte is checked.
fn seed_serving_steps(p: &ferry_sim::Platform, e: &Arc<HbmCopyEngine<ferry_sim::Platform>>) {
    const THREADS: usize = 16;
    const BIG: u64 = 8192;
    const SMALL: u64 = 64;
    const FRAG: u64 = 64;
    let dev = p.device(0).unwrap();
    // Per thread: a registered slice holding a big and a small batch (gapped sources), and an
    // unregistered slice for the fallback copies. Buffers are allocated before the steps.
    let slice = (2 * (BIG + SMALL) * FRAG) as usize;
    let mut host = pattern(THREADS * slice, 3);
    let mut back = vec![0u8; THREADS * slice];
    let mut loose = pattern(THREADS * 256 * KIB as usize, 7);
    let dbytes = (BIG + SMALL) * FRAG + 256 * KIB;
    let bufs: Vec<_> = (0..=THREADS).map(|_| dev.malloc(dbytes).unwrap()).collect();
    register(e, &mut host);
    register(e, &mut back);
    let (h, b, l) = (host_ref(&mut host), host_ref(&mut back), host_ref(&mut loose));
    let steps = |t: usize, rounds: usize| {
        let d = TransferRef::device(0, bufs[t], dbytes);
        let base = (t * slice) as u64;
        for _ in 0..rounds {
            let big = scattered(h, base, d, 0, FRAG, BIG, 0);
            let small = scattered(h, base + 2 * BIG * FRAG, d, BIG * FRAG, FRAG, SMALL, 0);
            let fallback = [TransferItem {
                src: l,
                src_offset: t as u64 * 256 * KIB,
                dst: d,
                dst_offset: (BIG + SMALL) * FRAG,
                size: 128 * KIB,
                tag: 1,
            }];
            let fallback_back = [TransferItem {
                src: d,
                src_offset: (BIG + SMALL) * FRAG,
                dst: l,
                dst_offset: t as u64 * 256 * KIB + 128 * KIB,
                size: 128 * KIB,
                tag: 2,
            }];
            // Device to host: the big batch back into the second registered buffer, each
            // fragment to the slot it came from in `host`.
            let big_back: Vec<_> = big
                .iter()
                .map(|it| TransferItem {
                    src: d,
                    src_offset: it.dst_offset,
                    dst: b,
                    dst_offset: it.src_offset,
                    ..*it
                })
                .collect();
            for items in [&big[..], &fallback, &small, &fallback_back, &big_back] {
                let o = transfer_detailed(&**e, items);
                assert!(o.is_ok(), "thread {t}: {o:?}");
            }
        }
    };
    // The first null-stream copies in both directions, then a first 8192-fragment gather.
    let mut one = [0u8; 4096];
    dev.copy_htod(&one, bufs[THREADS]).unwrap();
    dev.copy_dtoh(bufs[THREADS], &mut one).unwrap();
    steps(0, 1);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || steps(t, 1));
        }
    });
    e.clear_host_gather_regions();
    for (t, buf) in bufs.iter().enumerate().take(THREADS) {
        let got = read_dev(p, 0, *buf, dbytes as usize);
        let base = (t * slice) as u64;
        check_items(&scattered(h, base, h, 0, FRAG, BIG, 0), &host, &got);
        let small = scattered(h, base + 2 * BIG * FRAG, h, BIG * FRAG, FRAG, SMALL, 0);
        check_items(&small, &host, &got);
        let fb = (BIG + SMALL) * FRAG;
        let l0 = t * 256 * KIB as usize;
        assert_eq!(&got[fb as usize..][..128 * KIB as usize], &loose[l0..][..128 * KIB as usize]);
        assert_eq!(
            &loose[l0 + 128 * KIB as usize..][..128 * KIB as usize],
            &loose[l0..][..128 * KIB as usize]
        );
        // The big batch went back to `back` at the slots it came from in `host`.
        for i in 0..BIG as usize {
            let at = base as usize + i * 2 * FRAG as usize;
            assert_eq!(
                &back[at..at + FRAG as usize],
                &host[at..at + FRAG as usize],
                "thread {t} fragment {i}"
            );
        }
    }
}

#[test]
fn after_prewarm_8_the_seed_steps_allocate_no_device_memory_and_create_no_queue() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    let p = platform(1);
    let e = engine(&p);
    let r = e.prewarm(8);
    assert!(r.devices[0].errors.is_empty(), "{r:?}");
    let dev = p.device(0).unwrap();
    // docs/design/copy-pool.md: "After Prewarm(8) a process has 5 compute and 2 + 7 SDMA queues per GPU".
    assert_eq!(dev.counters().compute_queues_created, 5);
    assert_eq!(dev.compute_queues(), 5);
    assert_eq!(dev.compute_queue_users(), [2, 2, 2, 2], "8 pooled streams on 4 queues");
    assert_eq!(dev.counters().sdma_queues_created, 9);
    assert_eq!(dev.copy_engine_queues(), 9);
    let start = holdings(&p);
    seed_serving_steps(&p, &e);
    let end = holdings(&p);
    let buffers = 17 * ((8192 + 64) * 64 + 256 * KIB).next_multiple_of(64);
    assert_eq!(end[0] - start[0], 17, "only the test's 17 buffers were allocated");
    assert_eq!(end[1] - start[1], buffers, "device memory grew by the test's buffers alone");
    assert_eq!(end[2..], start[2..], "no queue, stream or code object was created");
    let st = e.stats();
    assert!(st.gathers >= 16 * 3 + 3, "{st:?}");
    assert!(st.fallback_plans >= 16 * 2, "{st:?}");
    let pool = e.pool_stats(0).unwrap();
    assert_eq!((pool.created, pool.cap), (8, 8), "{pool:?}");
}

#[test]
fn without_prewarm_the_seed_steps_create_queues_and_allocate_as_they_go() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    let p = platform(1);
    let e = engine(&p);
    let start = holdings(&p);
    seed_serving_steps(&p, &e);
    let end = holdings(&p);
    assert!(end[0] - start[0] > 17, "staging allocations mid-serving: {start:?} -> {end:?}");
    assert!(end[2] > start[2] && end[3] > start[3], "queues created mid-serving");
    assert!(end[4] > 0 && end[5] == 1, "streams and the code object mid-serving");
}
