//! Unit tests of the host pieces, stepped by hand.
use super::*;
use crate::clock::VirtualClock;
use crate::mem::{DeviceMemory, MirroredMemory, SvmMemory};
use crate::sync::Arc;
use crate::{DfxBuilder, Policy};
use ferry_abi::arch::A2A3;

fn sink() -> impl FnMut(&CollectedBuffer<'_, u64>) + Send + 'static {
    |_b: &CollectedBuffer<'_, u64>| {}
}

#[test]
fn origin_wins_deficit_ties() {
    let _bound = ferry_watchdog::bound("the DFX host threads");
    // All shards equally short: origin (2) wins.
    assert_eq!(select_by_deficit(4, 2, 4, |_| 1), 2);
    // A strictly larger deficit elsewhere wins; the first in cyclic order after origin.
    assert_eq!(select_by_deficit(4, 2, 4, |s| if s == 0 || s == 1 { 0 } else { 3 }), 0);
    assert_eq!(select_by_deficit(4, 3, 4, |s| if s == 1 || s == 2 { 0 } else { 3 }), 1);
    // No target: always origin.
    assert_eq!(select_by_deficit(0, 1, 4, |s| if s == 1 { 9 } else { 0 }), 1);
    // Origin over target, others at target: origin (deficit 0 everywhere).
    assert_eq!(select_by_deficit(2, 0, 3, |_| 2), 0);
}

#[test]
fn select_recycled_shard_reads_recycled_lanes() {
    let _bound = ferry_watchdog::bound("the DFX host threads");
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(3)
        .lane(0, 0, 1)
        .lane(1, 0, 1)
        .lane(2, 0, 3)
        .free_slots(1)
        .warm_target(0, 2)
        .records_per_buffer(4)
        .build::<u64>()
        .unwrap();
    let mem = Arc::new(SvmMemory::new(cfg.region_size(), 0x10_0000));
    let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(VirtualClock::new())).unwrap();
    let parts = t.into_parts(|_| sink());
    // Lane 2 seeded 2 surplus buffers into shard 2's recycled lane; shards 0 and 1 are empty.
    let r = &parts.engine.replenisher.regions[0];
    assert_eq!(r.recycled[2][0].len(), 2);
    assert_eq!(r.select_recycled_shard(0, 0), 0, "tie between 0 and 1: origin wins");
    assert_eq!(r.select_recycled_shard(0, 2), 0, "strictly larger deficit at 0");
}

/// A listed lane whose recycled lane is empty is skipped without touching device memory
/// (on a non-SVM platform every refresh would be a copy).
#[test]
fn retry_skips_dry_sites_without_device_reads() {
    let _bound = ferry_watchdog::bound("the DFX host threads");
    use crate::mem::{MemOpKind, SpyMemory};
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(1)
        .lane(0, 0, 1)
        .records_per_buffer(2)
        .policy(Policy::Drop)
        .drop_wait_cycles(2)
        .build::<u64>()
        .unwrap();
    let layout = cfg.layout();
    let spy = Arc::new(SpyMemory::new(MirroredMemory::new(cfg.region_size(), 0x1000)));
    let t = DfxTransport::<u64>::new(cfg, spy.clone(), Arc::new(VirtualClock::ticking(1))).unwrap();
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    let mut w = device.writer::<u64>(0, &[0]).unwrap();
    w.record(0, 1);
    w.record(0, 2); // publishes the only buffer; the pop gate gives up
    assert!(parts.engine.drains[0].sweep());
    assert_eq!(parts.retry_list(0), &[0]);
    let head_off = layout.free_head_offset(0);
    let before = spy.ops().len();
    for _ in 0..5 {
        assert!(!parts.engine.drains[0].sweep());
    }
    let reads_of_head = spy.ops()[before..]
        .iter()
        .filter(|o| o.kind == MemOpKind::Read && o.off == head_off)
        .count();
    assert_eq!(reads_of_head, 0, "a dry site costs no device access");
    assert_eq!(parts.retry_list(0), &[0]);
    drop(w);
}

/// The retry list refills a lane whose ready queue is idle: a one-buffer lane publishes its
/// only buffer and has nothing left to publish; the buffer comes back through the collector
/// and the replenish thread, and only the retry after the next (empty) sweep delivers it.
#[test]
fn retry_refills_lane_with_idle_ready_queue() {
    let _bound = ferry_watchdog::bound("the DFX host threads");
    for svm in [true, false] {
        let cfg = DfxBuilder::new(&A2A3)
            .ready_queues(1)
            .lane(0, 0, 1)
            .records_per_buffer(4)
            .policy(Policy::Drop)
            .drop_wait_cycles(3)
            .build::<u64>()
            .unwrap();
        let mem: Arc<dyn DeviceMemory> = if svm {
            Arc::new(SvmMemory::new(cfg.region_size(), 0x1000_0000))
        } else {
            Arc::new(MirroredMemory::new(cfg.region_size(), 0x1000_0000))
        };
        let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(VirtualClock::ticking(1))).unwrap();
        let device = t.device_region();
        let mut parts = t.into_parts(|_| sink());
        let mut w = device.writer::<u64>(0, &[0]).unwrap();
        assert!(w.has_buffer(0));
        for i in 0..4 {
            w.record(0, i);
        }
        // Published, and the pop gate found nothing: the lane holds no buffer.
        assert!(!w.has_buffer(0));
        assert_eq!(parts.free_len(0), 0);
        assert!(parts.engine.drains[0].sweep());
        assert_eq!(parts.retry_list(0), &[0], "dry top-up lists the lane");
        parts.engine.collectors[0].drain_all();
        assert_eq!(parts.engine.replenisher.tick(), 1);
        // No ready entry can trigger process_entry now: only the retry delivers.
        assert!(!parts.engine.drains[0].sweep());
        assert_eq!(parts.free_len(0), 1);
        // The lane is back at its quota (its one-buffer pool): no longer listed.
        assert!(parts.retry_list(0).is_empty());
        w.record(0, 99);
        assert!(w.has_buffer(0));
        let stats = w.finish();
        assert!(parts.engine.drains[0].sweep());
        parts.engine.collectors[0].drain_all();
        let report = parts.report();
        assert_eq!(stats[0].produced, 5);
        assert_eq!(report.lanes[0].collected, 5);
        assert!(report.is_reconciled(), "{:?}", report.lanes);
    }
}

/// Two regions with different record sizes share one engine's shards: one sweep serves both,
/// each buffer reaches its own region's sink, and each region reconciles on its own.
#[test]
fn one_engine_serves_regions_of_different_record_sizes() {
    let _bound = ferry_watchdog::bound("the DFX host threads");
    use crate::clock::SteadyClock;
    // Two buffers per lane: a switch always finds its replacement, so no gate waits while the
    // host is stepped by hand.
    let cfg_a = DfxBuilder::new(&A2A3)
        .ready_queues(2)
        .lane(0, 0, 2)
        .lane(1, 0, 2)
        .records_per_buffer(3)
        .shards(1)
        .build::<u64>()
        .unwrap();
    let cfg_b = DfxBuilder::new(&A2A3)
        .ready_queues(2)
        .lane(1, 0, 2)
        .records_per_buffer(2)
        .shards(1)
        .build::<[u64; 4]>()
        .unwrap();
    for svm in [true, false] {
        let mem = |len: usize, addr: u64| -> Arc<dyn DeviceMemory> {
            if svm {
                Arc::new(SvmMemory::new(len, addr))
            } else {
                Arc::new(MirroredMemory::new(len, addr))
            }
        };
        let clock = Arc::new(SteadyClock::new(A2A3.clock_hz));
        let a = DfxTransport::<u64>::new(
            cfg_a.clone(),
            mem(cfg_a.region_size(), 0x1000_0000),
            clock.clone(),
        )
        .unwrap();
        let b = DfxTransport::<[u64; 4]>::new(
            cfg_b.clone(),
            mem(cfg_b.region_size(), 0x2000_0000),
            clock,
        )
        .unwrap();
        let (da, db) = (a.device_region(), b.device_region());
        let mut e = DfxEngine::new(EngineConfig::default());
        let ka = e.add(a, |_| Vec::<(u32, Vec<u64>)>::new()).unwrap();
        let kb = e.add(b, |_| Vec::<(u32, Vec<[u64; 4]>)>::new()).unwrap();
        let mut parts = e.into_parts();
        assert_eq!(parts.drains.len(), 1, "one drain shard serves both regions");
        assert_eq!(parts.drains[0].regions.len(), 2);
        let mut wa = da.writer::<u64>(1, &[1]).unwrap();
        let mut wb = db.writer::<[u64; 4]>(1, &[0]).unwrap();
        for i in 0..3 {
            wa.record(0, 10 + i);
        }
        for i in 0..2 {
            wb.record(0, [20 + i; 4]);
        }
        // One sweep drains the full buffer of each region.
        assert!(parts.drains[0].sweep());
        parts.step();
        wa.finish();
        wb.finish();
        parts.step();
        let mut r = parts.report();
        let ra = r.take(ka);
        let rb = r.take(kb);
        assert!(ra.is_reconciled() && rb.is_reconciled(), "{:?} {:?}", ra.lanes, rb.lanes);
        assert_eq!(ra.totals(), (3, 3, 0));
        assert_eq!(rb.totals(), (2, 2, 0));
        assert_eq!(ra.sinks[0], vec![(1, vec![10, 11, 12])]);
        assert_eq!(rb.sinks[0], vec![(0, vec![[20; 4], [21; 4]])]);
    }
}

impl<R: crate::Record> crate::CollectSink<R> for Vec<(u32, Vec<R>)> {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, R>) {
        self.push((b.lane, b.records.to_vec()));
    }
}

/// A region with more shards than its engine is refused.
#[test]
fn an_engine_refuses_a_region_with_more_shards() {
    let _bound = ferry_watchdog::bound("the DFX host threads");
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(2)
        .lane(0, 0, 1)
        .lane(1, 0, 1)
        .shards(2)
        .records_per_buffer(2)
        .build::<u64>()
        .unwrap();
    let t = DfxTransport::<u64>::new(
        cfg.clone(),
        Arc::new(SvmMemory::new(cfg.region_size(), 0x1000)),
        Arc::new(VirtualClock::new()),
    )
    .unwrap();
    let mut e = DfxEngine::new(EngineConfig { drain_shards: Some(1), ..EngineConfig::default() });
    assert_eq!(e.add(t, |_| sink()).unwrap_err(), crate::BuildError::Shards);
}

/// A host thread that dies (panics) is a typed error of `try_stop`, naming the thread; the other
/// threads are halted and joined (the call returns, so none is left waiting). Both the replenish
/// thread (through its hooks) and a collector (through its sink) are killed here.
#[test]
fn a_dead_host_thread_is_a_typed_error_of_try_stop_and_the_rest_are_joined() {
    let _bound = ferry_watchdog::bound("the DFX host threads");
    struct Dies;
    impl ReplenishHooks for Dies {
        fn publish_arena_acks(&mut self) {
            panic!("replenish hook died");
        }
    }
    struct DyingSink;
    impl crate::CollectSink<u64> for DyingSink {
        fn on_buffer_collected(&mut self, _b: &CollectedBuffer<'_, u64>) {
            panic!("collector sink died");
        }
    }
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(1)
        .lane(0, 0, 2)
        .records_per_buffer(2)
        .shards(1)
        .build::<u64>()
        .unwrap();
    for which in ["replenish", "collect"] {
        let clock = Arc::new(crate::clock::SteadyClock::new(A2A3.clock_hz));
        let mem: Arc<dyn DeviceMemory> = Arc::new(SvmMemory::new(cfg.region_size(), 0x1000_0000));
        let t = DfxTransport::<u64>::new(cfg.clone(), mem, clock).unwrap();
        let dev = t.device_region();
        let mut e = DfxEngine::new(EngineConfig::default());
        if which == "replenish" {
            e.add_with_hooks(t, |_| Vec::<(u32, Vec<u64>)>::new(), Dies).unwrap();
        } else {
            e.add(t, |_| DyingSink).unwrap();
        }
        let running = e.start();
        let mut w = dev.writer::<u64>(0, &[0]).unwrap();
        // Three records: the first buffer fills and the lane switches to its second, which
        // `finish` flushes; no switch waits for a buffer the dead host would never return.
        for i in 0..3 {
            w.record(0, i);
        }
        w.finish();
        let err = running.try_stop().expect_err("a host thread died");
        assert!(err.thread.contains(which), "{which}: {err:?}");
        assert!(err.message.contains("died"), "{err:?}");
        assert!(err.to_string().contains("cannot be reconciled"), "{err}");
    }
}

/// A device that publishes one buffer twice (its second ready entry names the buffer its first
/// one did, which the host has taken back): the drain counts it and hands the buffer on once, so
/// the rings that hold every buffer never see it twice, and the engine keeps serving the lane.
#[test]
fn a_buffer_published_twice_is_counted_and_handed_on_once() {
    let _bound = ferry_watchdog::bound("the DFX host threads");
    use std::sync::Mutex;
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(1)
        .lane(0, 0, 2)
        .free_slots(2)
        .records_per_buffer(2)
        // The host is stepped by hand between the writes: a writer that finds no buffer gives up
        // instead of waiting for a host that is not running.
        .policy(Policy::Drop)
        .drop_wait_cycles(1000)
        .build::<u64>()
        .unwrap();
    let layout = cfg.layout();
    let mem = Arc::new(SvmMemory::new(cfg.region_size(), 0x10_0000));
    let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(VirtualClock::ticking(1))).unwrap();
    let device = t.device_region();
    let seen: std::sync::Arc<Mutex<Vec<Vec<u64>>>> = Default::default();
    let s2 = seen.clone();
    let mut parts = t.into_parts(move |_| {
        let s = s2.clone();
        move |b: &CollectedBuffer<'_, u64>| s.lock().unwrap().push(b.records.to_vec())
    });
    let mut w = device.writer::<u64>(0, &[0]).unwrap();
    for v in 1..=4 {
        w.record(0, v); // publishes the first buffer as entry 0, the second as entry 1
    }
    // The duplicate: entry 1 names the first buffer again.
    let host = &parts.engine.ctxs[0].host;
    let (e0, e1) = (layout.entry_offset(0, 0), layout.entry_offset(0, 1));
    // Relaxed: the test is the only thread running; the entry was published before.
    host.store_u64(e1 + 8, host.load_u64(e0 + 8, Ordering::Relaxed), Ordering::Relaxed);
    parts.engine.step();
    parts.engine.step();
    let stats = parts.engine.drains[0].regions[0].stats;
    assert_eq!((stats.entries, stats.duplicate_entries), (2, 1));
    assert_eq!(seen.lock().unwrap().clone(), [vec![1, 2]], "collected once");
    // The first buffer came back once: the lane records into it again.
    w.record(0, 5);
    w.record(0, 6);
    parts.engine.step();
    parts.engine.step();
    assert_eq!(seen.lock().unwrap().clone(), [vec![1, 2], vec![5, 6]]);
    assert_eq!(parts.engine.drains[0].regions[0].stats.duplicate_entries, 1);
}

/// Origin wins deficit ties, end to end: two lanes on two drain shards, one buffer each, a warm
/// target of one and empty recycled lanes. Lane 0's buffer, collected by shard 0, must return to
/// shard 0's recycled lane (equal deficits everywhere: the origin wins), where shard 0's retry
/// gives it back to lane 0, so every record is collected. Under another tie-break the buffer
/// lands in shard 1's recycled lane, which never serves lane 0: lane 0 starves and drops.
#[test]
fn origin_wins_ties_end_to_end_a_lane_gets_its_buffer_back_from_its_own_shard() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(2)
        .shards(2)
        .lane(0, 0, 1)
        .lane(1, 0, 1)
        .warm_target(0, 1)
        .records_per_buffer(2)
        .policy(Policy::Drop)
        .drop_wait_cycles(2)
        .build::<u64>()
        .unwrap();
    let mem = Arc::new(SvmMemory::new(cfg.region_size(), 0x2000_0000));
    let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(VirtualClock::ticking(1))).unwrap();
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    let mut w = device.writer::<u64>(0, &[0]).unwrap();
    for round in 0..3u64 {
        // Fills and publishes the lane's only buffer; the pop gate gives up (nothing recycled).
        w.record(0, 2 * round);
        w.record(0, 2 * round + 1);
        assert!(!w.has_buffer(0), "round {round}");
        assert!(parts.engine.drains[0].sweep(), "round {round}: shard 0 pops lane 0's entry");
        for c in &mut parts.engine.collectors {
            c.drain_all();
        }
        assert_eq!(parts.engine.replenisher.tick(), 1, "round {round}: one buffer routed");
        for d in &mut parts.engine.drains {
            d.sweep();
        }
        assert_eq!(parts.free_len(0), 1, "round {round}: lane 0's buffer came back to it");
    }
    let stats = w.finish();
    for d in &mut parts.engine.drains {
        d.sweep();
    }
    for c in &mut parts.engine.collectors {
        c.drain_all();
    }
    let report = parts.report();
    assert_eq!((stats[0].produced, stats[0].dropped), (6, 0));
    assert_eq!(report.lanes[0].collected, 6);
    assert_eq!(report.replenish.rebalanced, 0, "{:?}", report.replenish);
    assert!(report.is_reconciled(), "{:?}", report.lanes);
}

/// The replenish tick tops every recycled lane up to its warm target from the host reserve, one
/// batch of max(free slots, gap) per short lane while the reserve lasts, counts what it moved,
/// and stops at the target: stepped by hand, so the counts are exact.
#[test]
fn a_tick_tops_recycled_lanes_up_to_their_warm_target_from_the_reserve() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(2)
        .shards(2)
        .lane(0, 0, 1)
        .lane(1, 0, 1)
        .free_slots(1)
        .reserve_buffers(8)
        .warm_target(0, 3)
        .records_per_buffer(2)
        .build::<u64>()
        .unwrap();
    let mem = Arc::new(SvmMemory::new(cfg.region_size(), 0x3000_0000));
    let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(VirtualClock::new())).unwrap();
    let mut parts = t.into_parts(|_| sink());
    let lens = |p: &Parts<u64, _>| {
        let r = &p.engine.replenisher.regions[0];
        (r.recycled[0][0].len(), r.recycled[1][0].len(), r.reserve.len())
    };
    // Hands `n` buffers of shard `s`'s recycled lane back to the reserve (as if lanes had
    // taken them and they were retired).
    let give_back = |p: &mut Parts<u64, _>, s: usize, n: usize| {
        for _ in 0..n {
            let b = p.engine.drains[s].regions[0].recycled[0].pop().unwrap();
            p.engine.replenisher.regions[0].reserve.push(b);
        }
    };
    // 10 buffers: one in each lane's one-slot free queue, the recycled lanes warm at 3 each,
    // the last 2 in the reserve.
    assert_eq!(lens(&parts), (3, 3, 2));
    give_back(&mut parts, 0, 3);
    give_back(&mut parts, 1, 3);
    assert_eq!(lens(&parts), (0, 0, 8));
    let allocated = parts.engine.replenisher.regions[0].stats.allocated;
    let ack_ticks = parts.engine.replenisher.regions[0].stats.ack_ticks;
    // Each shard short by 3 = max(1 slot, gap 3): 3 each.
    assert_eq!(parts.engine.replenisher.tick(), 6);
    assert_eq!(lens(&parts), (3, 3, 2));
    assert_eq!(parts.engine.replenisher.regions[0].stats.allocated, allocated + 6);
    // At target: nothing moves.
    assert_eq!(parts.engine.replenisher.tick(), 0);
    // Shard 0 down to 1: it gets exactly its gap of 2 back, shard 1 nothing.
    give_back(&mut parts, 0, 2);
    assert_eq!(lens(&parts), (1, 3, 4));
    assert_eq!(parts.engine.replenisher.tick(), 2);
    assert_eq!(lens(&parts), (3, 3, 2));
    assert_eq!(parts.engine.replenisher.regions[0].stats.allocated, allocated + 8);
    // Every tick published the region's arena acks once.
    assert_eq!(parts.engine.replenisher.regions[0].stats.ack_ticks, ack_ticks + 3);
}

/// Starved lanes are served first come, first served: two one-buffer lanes on one shard both
/// publish their only buffer with nothing recycled, so both are listed for retry in arrival
/// order (lane 0, then lane 1, which joins the back of the line). With one buffer recycled, the
/// sweep's retry gives it to lane 0; lane 1 stays listed and gets the next one.
#[test]
fn starved_lanes_are_retried_in_arrival_order() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(2)
        .shards(1)
        .lane(0, 0, 1)
        .lane(1, 0, 1)
        .records_per_buffer(2)
        .policy(Policy::Drop)
        .drop_wait_cycles(2)
        .build::<u64>()
        .unwrap();
    let mem = Arc::new(SvmMemory::new(cfg.region_size(), 0x4000_0000));
    let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(VirtualClock::ticking(1))).unwrap();
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    let mut a = device.writer::<u64>(0, &[0]).unwrap();
    let mut b = device.writer::<u64>(1, &[1]).unwrap();
    for w in [&mut a, &mut b] {
        w.record(0, 1);
        w.record(0, 2);
        assert!(!w.has_buffer(0));
    }
    assert!(parts.engine.drains[0].sweep());
    assert_eq!(parts.retry_list(0), &[0, 1], "listed in arrival order");
    parts.engine.collectors[0].drain_all();
    assert_eq!(parts.engine.replenisher.tick(), 2);
    // Hold one of the two recycled buffers back: only one is there to give.
    let held = parts.engine.drains[0].regions[0].recycled[0].pop().unwrap();
    assert!(!parts.engine.drains[0].sweep());
    assert_eq!((parts.free_len(0), parts.free_len(1)), (1, 0), "the first listed is served first");
    assert_eq!(parts.retry_list(0), &[1]);
    // The held buffer arrives, the way the replenish thread routes a done buffer.
    assert!(parts.engine.replenisher.regions[0].recycled[0][0].push(held).is_ok());
    assert!(!parts.engine.drains[0].sweep());
    assert_eq!((parts.free_len(0), parts.free_len(1)), (1, 1));
    assert!(parts.retry_list(0).is_empty());
    drop((a, b));
}

/// A done buffer goes to the recycled lane with the strictly largest deficit, which may be
/// another shard's; such a move is counted as a rebalance (and a routed buffer), a return to the
/// origin is not.
#[test]
fn a_done_buffer_goes_to_the_largest_deficit_and_counts_as_rebalanced() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(2)
        .shards(2)
        .lane(0, 0, 1)
        .lane(1, 0, 1)
        .free_slots(1)
        .reserve_buffers(8)
        .warm_target(0, 3)
        .records_per_buffer(2)
        .policy(Policy::Drop)
        .drop_wait_cycles(2)
        .build::<u64>()
        .unwrap();
    let mem = Arc::new(SvmMemory::new(cfg.region_size(), 0x5000_0000));
    let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(VirtualClock::ticking(1))).unwrap();
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    let lens = |p: &Parts<u64, _>| {
        let r = &p.engine.replenisher.regions[0];
        (r.recycled[0][0].len(), r.recycled[1][0].len(), r.reserve.len())
    };
    assert_eq!(lens(&parts), (3, 3, 2));
    // Shard 1's recycled lane and the reserve emptied (held here): shard 1 is short by 3.
    let mut aside: Vec<u32> = std::mem::take(&mut parts.engine.replenisher.regions[0].reserve);
    while let Some(b) = parts.engine.drains[1].regions[0].recycled[0].pop() {
        aside.push(b);
    }
    assert_eq!((lens(&parts), aside.len()), ((3, 0, 0), 5));
    // Lane 0 (shard 0) publishes its buffer; shard 0 gives it one of its recycled three.
    let mut w = device.writer::<u64>(0, &[0]).unwrap();
    w.record(0, 1);
    w.record(0, 2);
    assert!(parts.engine.drains[0].sweep());
    assert_eq!((lens(&parts), parts.free_len(0)), ((2, 0, 0), 1));
    parts.engine.collectors[0].drain_all();
    // Deficits: shard 0 short by 1, shard 1 by 3: the buffer goes to shard 1.
    assert_eq!(parts.engine.replenisher.tick(), 1);
    assert_eq!(lens(&parts), (2, 1, 0));
    let st = &parts.engine.replenisher.regions[0].stats;
    assert_eq!((st.routed, st.rebalanced), (1, 1), "{st:?}");
    drop(w);
}

/// A lane whose records are not all accounted for (collected or dropped) is reported, whatever
/// it still holds: lane 0 published a buffer the host has not drained (produced 2, collected 0)
/// and holds its next one, so the report is not reconciled and names lane 0; lane 1, which wrote
/// nothing and holds a buffer too, reconciles.
#[test]
fn a_lane_that_does_not_reconcile_is_reported_whatever_it_holds() {
    let _bound = ferry_watchdog::bound("the stepped writers' gates on the virtual clock");
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(2)
        .lane(0, 0, 2)
        .lane(1, 0, 2)
        .records_per_buffer(2)
        .policy(Policy::Drop)
        .drop_wait_cycles(2)
        .build::<u64>()
        .unwrap();
    let mem = Arc::new(SvmMemory::new(cfg.region_size(), 0x6000_0000));
    let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(VirtualClock::ticking(1))).unwrap();
    let device = t.device_region();
    let parts = t.into_parts(|_| sink());
    let mut w0 = device.writer::<u64>(0, &[0]).unwrap();
    let w1 = device.writer::<u64>(1, &[1]).unwrap();
    w0.record(0, 1);
    w0.record(0, 2);
    assert!(w0.has_buffer(0) && w1.has_buffer(0));
    let report = parts.report();
    let (l0, l1) = (report.lanes[0], report.lanes[1]);
    assert_eq!((l0.produced, l0.collected, l0.dropped, l0.holds_buffer), (2, 0, 0, true));
    assert!(!l0.holds(), "{l0:?}");
    assert!(l1.holds() && l1.holds_buffer, "{l1:?}");
    assert!(!report.is_reconciled(), "lane 0 is short of 2 records: {:?}", report.lanes);
    drop((w0, w1));
}

/// The replenish thread publishes every region's arena acknowledgements once per tick, busy or
/// idle: two regions' hooks each run exactly once in a tick that found nothing to move and once
/// in each tick that moved a buffer, so a replenish thread kept busy still acknowledges.
#[test]
fn every_tick_publishes_each_regions_arena_acks_once_busy_or_idle() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    use std::sync::atomic::AtomicU64;
    struct CountAcks(std::sync::Arc<AtomicU64>);
    impl ReplenishHooks for CountAcks {
        fn publish_arena_acks(&mut self) {
            // Relaxed: read by the test on this same thread.
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(1)
        .lane(0, 0, 2)
        .records_per_buffer(2)
        .policy(Policy::Drop)
        .drop_wait_cycles(2)
        .build::<u64>()
        .unwrap();
    let counts: Vec<std::sync::Arc<AtomicU64>> = (0..2).map(|_| Default::default()).collect();
    let mut e = DfxEngine::new(EngineConfig::default());
    let mut devices = Vec::new();
    for (i, c) in counts.iter().enumerate() {
        let mem = Arc::new(SvmMemory::new(cfg.region_size(), 0x7000_0000 + ((i as u64) << 28)));
        let t =
            DfxTransport::<u64>::new(cfg.clone(), mem, Arc::new(VirtualClock::ticking(1))).unwrap();
        devices.push(t.device_region());
        e.add_with_hooks(t, |_| sink(), CountAcks(c.clone())).unwrap();
    }
    let mut parts = e.into_parts();
    // Relaxed: this thread's own counters.
    let acks = || counts.iter().map(|c| c.load(Ordering::Relaxed)).collect::<Vec<_>>();
    assert_eq!(acks(), [0, 0]);
    assert_eq!(parts.replenisher.tick(), 0, "an idle tick");
    assert_eq!(acks(), [1, 1]);
    let mut w = devices[0].writer::<u64>(0, &[0]).unwrap();
    for round in 0..3u64 {
        w.record(0, 2 * round);
        w.record(0, 2 * round + 1);
        assert!(parts.drains[0].sweep(), "round {round}");
        parts.collectors[0].drain_all();
        assert_eq!(parts.replenisher.tick(), 1, "round {round}: a busy tick");
        assert_eq!(acks(), [round + 2, round + 2], "round {round}");
    }
    let st: Vec<u64> = parts.replenisher.regions.iter().map(|r| r.stats.ack_ticks).collect();
    assert_eq!(st, [4, 4]);
    drop(w);
}

/// Origin wins deficit ties on every shard, end to end: as in
/// [`origin_wins_ties_end_to_end_a_lane_gets_its_buffer_back_from_its_own_shard`], but the lane
/// that publishes is lane 1, on shard 1, whose shard is not the first a scan would look at: its
/// buffer, collected by shard 1, goes back to shard 1's recycled lane every round, and lane 1
/// loses nothing.
#[test]
fn origin_wins_ties_end_to_end_on_a_shard_other_than_the_first() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(2)
        .shards(2)
        .lane(0, 0, 1)
        .lane(1, 0, 1)
        .warm_target(0, 1)
        .records_per_buffer(2)
        .policy(Policy::Drop)
        .drop_wait_cycles(2)
        .build::<u64>()
        .unwrap();
    let mem = Arc::new(SvmMemory::new(cfg.region_size(), 0x2000_0000));
    let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(VirtualClock::ticking(1))).unwrap();
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    let mut w = device.writer::<u64>(1, &[1]).unwrap();
    for round in 0..3u64 {
        w.record(0, 2 * round);
        w.record(0, 2 * round + 1);
        assert!(!w.has_buffer(0), "round {round}");
        assert!(parts.engine.drains[1].sweep(), "round {round}: shard 1 pops lane 1's entry");
        parts.engine.collectors[1].drain_all();
        assert_eq!(parts.engine.replenisher.tick(), 1, "round {round}: one buffer routed");
        let r = &parts.engine.replenisher.regions[0];
        assert_eq!((r.recycled[0][0].len(), r.recycled[1][0].len()), (0, 1), "round {round}");
        assert!(!parts.engine.drains[1].sweep(), "round {round}");
        assert_eq!(parts.free_len(1), 1, "round {round}: lane 1's buffer came back to it");
    }
    let stats = w.finish();
    parts.engine.step();
    let report = parts.report();
    assert_eq!((stats[0].produced, stats[0].dropped), (6, 0));
    assert_eq!(report.lanes[1].collected, 6);
    assert_eq!(report.replenish.rebalanced, 0, "{:?}", report.replenish);
    assert!(report.is_reconciled(), "{:?}", report.lanes);
}
