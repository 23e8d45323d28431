//! Each step of the prewarm, the cap and the null-stream fallback (docs/design/copy-pool.md), one
//! test per rule, on small pools and sequential batches: asserted on the simulated device's
//! counters and the pool's own counts, never on times or on how threads were scheduled.
mod common;
use common::*;
use ferry_copy::hbm::gather::{FRAGMENT_BYTES, GATHER_KERNEL};
use ferry_copy::hbm::NULL_WARM_BYTES;
use ferry_copy::{
    transfer_detailed, GatherSkip, HbmConfig, HbmCopyEngine, TransferItem, TransferRef,
};
use ferry_sim::fault::FaultPoint;
use ferry_sim::Platform;
use std::sync::Arc;

fn engine_with(p: &Platform, cfg: HbmConfig) -> Arc<HbmCopyEngine<ferry_sim::Platform>> {
    Arc::new(HbmCopyEngine::new(p.clone(), cfg))
}

/// Host memory for the batches below: a registered half (gathers) and an unregistered one
/// (null-stream fallback copies).
struct Host {
    registered: Vec<u8>,
    loose: Vec<u8>,
}

impl Host {
    fn new(e: &HbmCopyEngine<ferry_sim::Platform>) -> Self {
        let mut h = Host {
            registered: pattern(512 * KIB as usize, 4),
            loose: pattern(64 * KIB as usize, 8),
        };
        register(e, &mut h.registered);
        h
    }
}

/// One serving round on device 0, one batch at a time: a gather each way (`frags` fragments of
/// 64 bytes) and a fallback copy each way. Every batch must succeed.
fn serve(p: &Platform, e: &HbmCopyEngine<ferry_sim::Platform>, host: &mut Host, frags: u64) {
    let dev = p.device(0).unwrap();
    let buf = dev.malloc(frags * 64 + 8 * KIB).unwrap();
    let d = TransferRef::device(0, buf, frags * 64 + 8 * KIB);
    let (h, l) = (host_ref(&mut host.registered), host_ref(&mut host.loose));
    let up = scattered(h, 0, d, 0, 64, frags, 0);
    let down: Vec<_> = up
        .iter()
        .map(|it| TransferItem {
            src: d,
            src_offset: it.dst_offset,
            dst: h,
            dst_offset: 256 * KIB + it.src_offset,
            ..*it
        })
        .collect();
    let fb_up = [TransferItem {
        src: l,
        src_offset: 0,
        dst: d,
        dst_offset: frags * 64,
        size: 4 * KIB,
        tag: 1,
    }];
    let fb_down = [TransferItem {
        src: d,
        src_offset: frags * 64,
        dst: l,
        dst_offset: 32 * KIB,
        size: 4 * KIB,
        tag: 2,
    }];
    for items in [&up[..], &down, &fb_up, &fb_down] {
        let o = transfer_detailed(e, items);
        assert!(o.is_ok(), "{o:?}");
    }
    dev.free(buf).unwrap();
}

#[test]
fn prewarm_creates_n_streams_and_their_compute_queues_on_every_device() {
    let _bound = ferry_watchdog::bound("the prewarm's stream workers");
    let p = platform(2);
    let e = engine(&p);
    let r = e.prewarm(3);
    for (d, dr) in p.devices().iter().zip(&r.devices) {
        assert!(dr.errors.is_empty(), "{dr:?}");
        let c = d.counters();
        assert_eq!((c.streams_created, dr.streams), (3, 3), "device {}: {dr:?}", dr.ordinal);
        let pool = e.pool_stats(dr.ordinal).unwrap();
        assert_eq!((pool.created, pool.idle), (3, 3), "device {}: {pool:?}", dr.ordinal);
        assert_eq!(d.compute_queue_users(), [1, 1, 1], "a compute queue per stream (3 ≤ 4)");
        assert_eq!(c.compute_queues_created, 3 + 1, "and the null stream's");
    }
}

#[test]
fn prewarm_sizes_each_streams_staging_and_uploads_all_of_it() {
    let _bound = ferry_watchdog::bound("the prewarm's stream workers");
    let p = platform(1);
    let e = engine_with(&p, HbmConfig { prewarm_staging_fragments: 1000, ..Default::default() });
    let dev = p.device(0).unwrap();
    let r = e.prewarm(2);
    assert!(r.devices[0].errors.is_empty(), "{r:?}");
    let c = dev.counters();
    assert_eq!(c.device_allocs, 2 + 1, "a staging per stream and the null stream's scratch");
    let staging = 2 * 1000 * FRAGMENT_BYTES as u64;
    assert_eq!(c.bytes_htod, staging + NULL_WARM_BYTES as u64, "every staging uploaded whole");
    // A batch as large as the staging then allocates no descriptor memory.
    let mut host = Host::new(&e);
    let allocs = dev.counters().device_allocs;
    serve(&p, &e, &mut host, 1000);
    assert_eq!(dev.counters().device_allocs, allocs + 1, "the test's own buffer alone");
    assert_eq!(e.stats().gathers, 2);
    e.clear_host_gather_regions();
}

#[test]
fn prewarm_launches_the_gather_kernel_uncounted_so_serving_loads_no_code_object() {
    let _bound = ferry_watchdog::bound("the prewarm's stream workers");
    let p = platform(1);
    let e = engine(&p);
    let dev = p.device(0).unwrap();
    assert!(e.prewarm(2).devices[0].errors.is_empty());
    let c = dev.counters();
    assert_eq!((c.code_object_loads, c.launches), (1, 0), "loaded, not counted as a launch");
    assert_eq!(dev.loaded_code_objects(), [GATHER_KERNEL]);
    let mut host = Host::new(&e);
    serve(&p, &e, &mut host, 64);
    let c = dev.counters();
    assert_eq!((c.code_object_loads, c.launches), (1, 2), "two gathers, no load");
    e.clear_host_gather_regions();
}

#[test]
fn prewarm_copies_once_each_way_on_the_null_stream() {
    let _bound = ferry_watchdog::bound("the prewarm's stream workers");
    let p = platform(1);
    let e = engine(&p);
    let dev = p.device(0).unwrap();
    let r = e.prewarm(2);
    assert!(r.devices[0].null_stream_warm && r.devices[0].errors.is_empty(), "{r:?}");
    let c = dev.counters();
    assert_eq!((c.null_stream_init_htod, c.null_stream_init_dtoh), (1, 1));
    assert_eq!(c.bytes_dtoh, NULL_WARM_BYTES as u64, "one copy back, of the warm-up's size");
    let mut host = Host::new(&e);
    serve(&p, &e, &mut host, 64);
    let after = dev.counters();
    assert_eq!((after.null_stream_init_htod, after.null_stream_init_dtoh), (1, 1));
    assert_eq!(after.compute_queues_created, c.compute_queues_created);
    assert_eq!(e.stats().fallback_plans, 2);
    e.clear_host_gather_regions();
}

#[test]
fn prewarm_creates_exactly_the_copy_engine_queues_of_n_gathers_and_the_null_stream() {
    let _bound = ferry_watchdog::bound("the prewarm's stream workers");
    for n in [1usize, 3] {
        let p = platform(1);
        let e = engine(&p);
        let dev = p.device(0).unwrap();
        let r = e.prewarm(n);
        assert!(r.devices[0].errors.is_empty(), "{r:?}");
        let engines: Vec<usize> = (0..=n).collect();
        assert_eq!(dev.copy_engines_with_queues(), engines, "n = {n}: engines 0..=n");
        assert_eq!(r.devices[0].sdma_queues, n as u64 + 1);
    }
}

#[test]
fn with_the_kernel_off_prewarm_warms_the_null_stream_alone() {
    let _bound = ferry_watchdog::bound("the prewarm's stream workers");
    let p = platform(2);
    let e = engine_with(&p, HbmConfig { gather_kernel: false, ..Default::default() });
    let r = e.prewarm(4);
    for (d, dr) in p.devices().iter().zip(&r.devices) {
        assert!(dr.null_stream_warm && dr.errors.is_empty(), "{dr:?}");
        assert_eq!((dr.streams, dr.cap), (0, 0), "no pool to warm or cap: {dr:?}");
        let c = d.counters();
        assert_eq!((c.null_stream_init_htod, c.null_stream_init_dtoh), (1, 1));
        assert_eq!((c.streams_created, c.compute_queues_created, c.sdma_queues_created), (0, 1, 1));
        assert_eq!(c.code_object_loads, 0);
    }
}

#[test]
fn a_prewarmed_pool_serves_from_its_streams_and_creates_nothing() {
    let _bound = ferry_watchdog::bound("the prewarm's stream workers");
    let p = platform(1);
    let e = engine(&p);
    let dev = p.device(0).unwrap();
    assert!(e.prewarm(1).devices[0].errors.is_empty());
    let mut host = Host::new(&e);
    let held = |c: ferry_sim::counters::CounterSnapshot| {
        [
            c.streams_created,
            c.compute_queues_created,
            c.sdma_queues_created,
            c.queue_memory_bytes,
            c.code_object_loads,
        ]
    };
    let before = held(dev.counters());
    let allocs = dev.counters().device_allocs;
    for round in 0..3 {
        serve(&p, &e, &mut host, 64);
        assert_eq!(held(dev.counters()), before, "round {round}: a stream, queue or code object");
        let pool = e.pool_stats(0).unwrap();
        assert_eq!((pool.created, pool.idle, pool.cap), (1, 1, 1), "round {round}: {pool:?}");
    }
    assert_eq!(dev.counters().device_allocs, allocs + 3, "the rounds' own buffers alone");
    assert_eq!(e.stats().gathers, 6);
    e.clear_host_gather_regions();
}

#[test]
fn a_gather_gives_its_stream_back_on_every_path() {
    let _bound = ferry_watchdog::bound("the prewarm's stream workers");
    let p = platform(1);
    let e = engine(&p);
    let dev = p.device(0).unwrap();
    assert!(e.prewarm(1).devices[0].errors.is_empty());
    let mut host = Host::new(&e);
    // With a cap of 1, a stream not given back would leave the next gather waiting for ever: the
    // pool's counts are checked after every path, before the next gather.
    let pool = || {
        let s = e.pool_stats(0).unwrap();
        (s.created, s.idle)
    };
    for (point, what) in
        [(FaultPoint::Copy, "a failed upload"), (FaultPoint::Launch, "a failed launch")]
    {
        dev.faults().fail_next(point);
        serve(&p, &e, &mut host, 64);
        assert_eq!(pool(), (1, 1), "after {what} the stream is back in the pool");
    }
    dev.faults().fail_next(FaultPoint::Synchronize);
    serve(&p, &e, &mut host, 64);
    assert!(e.is_gather_latched());
    let st = e.stats();
    assert_eq!((st.skip(GatherSkip::LaunchFailed), st.skip(GatherSkip::SyncFailed)), (2, 1));
    assert_eq!(pool(), (0, 0), "a stream whose synchronize failed is dropped, its place freed");
    e.reset_gather_latch();
    let streams = dev.counters().streams_created;
    serve(&p, &e, &mut host, 64);
    assert_eq!(pool(), (1, 1), "the freed place is refilled");
    assert_eq!(dev.counters().streams_created, streams + 1);
    e.clear_host_gather_regions();
}

#[test]
fn fallback_copies_run_on_the_null_stream_and_create_no_stream() {
    let _bound = ferry_watchdog::bound("the copy engine's stream workers");
    let p = platform(1);
    let e = engine(&p);
    let dev = p.device(0).unwrap();
    let buf = dev.malloc(64 * KIB).unwrap();
    let d = TransferRef::device(0, buf, 64 * KIB);
    let mut loose = pattern(64 * KIB as usize, 6);
    let l = host_ref(&mut loose);
    let up = [TransferItem { src: l, src_offset: 0, dst: d, dst_offset: 0, size: 8 * KIB, tag: 0 }];
    let down = [TransferItem {
        src: d,
        src_offset: 0,
        dst: l,
        dst_offset: 32 * KIB,
        size: 8 * KIB,
        tag: 1,
    }];
    for items in [&up, &down] {
        assert!(transfer_detailed(&*e, items).is_ok());
    }
    assert_eq!(&loose[32 * KIB as usize..40 * KIB as usize], &loose[..8 * KIB as usize]);
    let c = dev.counters();
    assert_eq!(e.stats().fallback_plans, 2);
    assert_eq!((c.null_stream_init_htod, c.null_stream_init_dtoh), (1, 1), "the null stream");
    assert_eq!((c.streams_created, c.compute_queues_created), (0, 1), "no other stream");
    assert_eq!(e.pool_stats(0).unwrap().created, 0);
}
