//! What the host reads back of each lane (its reconcile line, gate waits and run ends) and
//! what its startup replenish pushes, through the public API.
#![cfg(not(ferry_loom))]

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::{cfg, svm};
use ferry_abi::arch::A2A3;
use ferry_dfx::clock::VirtualClock;
use ferry_dfx::{CollectedBuffer, DfxBuilder, DfxTransport, Policy};

/// Each lane's reconcile line, gate waits and run ends are read from that lane's own words:
/// two lanes that ended differently (one wrote nothing and still holds the buffer it claimed, the
/// other waited out its pop gate and holds none) each report exactly their writer's
/// counts.
#[test]
fn each_lanes_reconcile_line_and_logs_are_its_own() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    // One buffer per lane, nobody drains while the writers run: lane 1's switch publishes its
    // buffer and its pop gate waits out the budget on a clock that ticks once per read.
    let mut c = cfg(2, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::ticking(1)))
        .unwrap();
    let device = t.device_region();
    let w0 = device.writer::<[u64; 2]>(0, &[0]).unwrap();
    assert!(w0.has_buffer(0));
    let s0 = w0.finish()[0];
    let mut w1 = device.writer::<[u64; 2]>(1, &[1]).unwrap();
    for i in 0..4 {
        w1.record(0, [1, i]);
    }
    let s1 = w1.finish()[0];
    assert_eq!((s0.produced, s0.gate_timeouts, s0.stall_waits, s0.max_stall_cycles), (0, 0, 0, 0));
    assert_eq!((s1.produced, s1.gate_timeouts, s1.stall_waits), (4, 1, 1));
    assert!(s1.max_stall_cycles >= 40, "{s1:?}");
    let report = t.start(|_| |_b: &CollectedBuffer<'_, [u64; 2]>| {}).stop();
    assert!(report.is_reconciled(), "{:?}", report.lanes);
    for (l, s, holds) in [(&report.lanes[0], s0, true), (&report.lanes[1], s1, false)] {
        let lane = l.lane;
        assert_eq!(
            (l.produced, l.collected, l.dropped),
            (s.produced, s.produced, 0),
            "lane {lane}"
        );
        assert_eq!(l.gate_timeouts, s.gate_timeouts, "lane {lane}");
        assert_eq!(l.stall_cycles, s.stall_cycles, "lane {lane}");
        assert_eq!(l.max_stall_cycles, s.max_stall_cycles, "lane {lane}");
        assert_eq!(l.stalls.total, s.stall_waits, "lane {lane}");
        assert_eq!(l.holds_buffer, holds, "lane {lane}");
        let ends: Vec<_> = report.run_ends[lane as usize].ends.iter().map(|e| e.produced).collect();
        assert_eq!(ends, [s.produced], "lane {lane}'s run end");
    }
}

/// The startup replenish fills each free queue to its slots, first from the recycled buffers a
/// lane's seed left over, then from the reserve, and returns exactly how many it pushed; once
/// every queue is full it pushes nothing.
#[test]
fn the_startup_replenish_counts_exactly_the_buffers_it_pushed() {
    let _bound = ferry_watchdog::bound("the DFX transport's startup replenish");
    // Free queues of 4 slots. Lane 0's seed of 6 fills its queue and leaves 2 recycled; lane 1's
    // seed of 1 leaves 3 slots: 2 from the recycled buffers, 1 from the reserve of 3.
    let mut b = DfxBuilder::new(&A2A3);
    b.ready_queues(2).ready_depth(8).records_per_buffer(4).free_slots(4).reserve_buffers(3);
    b.lane(0, 0, 6).lane(1, 0, 1);
    let c = b.build::<[u64; 2]>().unwrap();
    let mem = svm(&c);
    let mut t =
        DfxTransport::<[u64; 2]>::new(c.clone(), mem.clone(), Arc::new(VirtualClock::new()))
            .unwrap();
    let l = c.layout();
    let tail = |lane| mem.host_view().load_u32(l.free_tail_offset(lane), Ordering::Relaxed);
    assert_eq!((tail(0), tail(1)), (4, 1), "the seeds");
    assert_eq!(t.replenish_free_queues(), Ok(3));
    assert_eq!((tail(0), tail(1)), (4, 4));
    assert_eq!(t.replenish_free_queues(), Ok(0), "every free queue is full");
}
