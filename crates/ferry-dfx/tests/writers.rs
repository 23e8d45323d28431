//! Making device writers through the public API: which record types a region takes, the
//! exclusive claims on queues and lanes (released on every path), a writer's accessors, and the
//! counters a lane's next writer carries on.
#![cfg(not(ferry_loom))]

mod common;

use std::sync::Arc;

use common::{cfg, svm};
use ferry_abi::arch::A2A3;
use ferry_dfx::clock::VirtualClock;
use ferry_dfx::{BuildError, DfxBuilder, DfxTransport, Policy, Record};

/// 64 bytes at the largest alignment a record may have.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u64; 8]);
// SAFETY: eight `u64`s, no padding, every bit pattern valid; size 64, align 64.
unsafe impl Record for Line {}

/// 128 bytes aligned past a cache line: no region takes it.
#[derive(Clone, Copy)]
#[repr(C, align(128))]
struct Wide([u64; 16]);
// SAFETY: sixteen `u64`s, no padding, every bit pattern valid; size 128, align 128.
unsafe impl Record for Wide {}

fn region_of<R: Record>(queues: u32) -> DfxTransport<R> {
    let mut b = DfxBuilder::new(&A2A3);
    b.ready_queues(queues).ready_depth(4).records_per_buffer(4);
    for q in 0..queues {
        b.lane(q, 0, 1);
    }
    let c = b.build::<R>().unwrap();
    DfxTransport::<R>::new(c.clone(), svm(&c), Arc::new(VirtualClock::new())).unwrap()
}

#[test]
fn a_writer_takes_records_of_the_regions_size_aligned_to_at_most_a_line() {
    let t = region_of::<Line>(1);
    let mut w = t.device_region().writer::<Line>(0, &[0]).expect("a line-aligned record");
    w.record(0, Line([7; 8]));
    assert_eq!(w.stats()[0].produced, 1);
    // Same size as the region's [u64; 16] records, but aligned past a line.
    let t = region_of::<[u64; 16]>(1);
    assert_eq!(t.device_region().writer::<Wide>(0, &[0]).unwrap_err(), BuildError::RecordType);
    assert!(t.device_region().writer::<[u64; 16]>(0, &[0]).is_ok());
}

/// Every ready queue is claimed on its own: a second writer of any queue is refused while the
/// first lives, and a writer of another queue is not.
#[test]
fn each_ready_queue_has_at_most_one_writer() {
    let t = region_of::<[u64; 2]>(3);
    let d = t.device_region();
    let writers: Vec<_> = (0..3).map(|q| d.writer::<[u64; 2]>(q, &[q]).unwrap()).collect();
    for q in 0..3 {
        assert_eq!(d.writer::<[u64; 2]>(q, &[]).unwrap_err(), BuildError::AlreadyClaimed, "{q}");
    }
    drop(writers);
    for q in 0..3 {
        assert!(d.writer::<[u64; 2]>(q, &[q]).is_ok(), "queue {q} is free again");
    }
    assert!(matches!(d.writer::<[u64; 2]>(3, &[]), Err(BuildError::LaneQueue { .. })));
}

/// A refused writer leaves no claim behind: a lane named twice is refused after its queue and
/// its first lane were claimed, and both claims are released, so the same queue and lane make a
/// writer right after.
#[test]
fn a_writer_refused_over_its_lanes_releases_the_queue_and_lanes_it_claimed() {
    let mut b = DfxBuilder::new(&A2A3);
    b.ready_queues(3).ready_depth(4).records_per_buffer(4);
    b.lane(0, 0, 1).lane(2, 0, 1).lane(2, 0, 1);
    let c = b.build::<[u64; 2]>().unwrap();
    let t =
        DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::new())).unwrap();
    let d = t.device_region();
    // Queue 2 holds lanes 1 and 2.
    assert_eq!(d.writer::<[u64; 2]>(2, &[1, 2, 1]).unwrap_err(), BuildError::AlreadyClaimed);
    let w = d.writer::<[u64; 2]>(2, &[2, 1]).expect("queue 2 and both lanes were released");
    assert_eq!((w.queue(), w.lane_count(), w.lane_id(0), w.lane_id(1)), (2, 2, 2, 1));
}

/// A lane's next writer carries on the counters its last writer left in the lane's state: the
/// records produced and dropped, the stall cycles and longest wait, the switches and timeouts.
#[test]
fn a_lanes_next_writer_carries_on_its_counters() {
    let _bound = ferry_watchdog::bound("the device writer's gate waits");
    // One buffer, nobody drains: the switch publishes it, the pop gate waits out the budget, and
    // the next record is dropped.
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::ticking(1)))
        .unwrap();
    let d = t.device_region();
    let mut w = d.writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..5 {
        w.record(0, [0, i]);
    }
    let first = w.finish()[0];
    assert_eq!((first.produced, first.dropped, first.switches, first.gate_timeouts), (5, 1, 1, 1));
    assert!(first.stall_cycles >= 40 && first.max_stall_cycles == first.stall_cycles);
    let next = d.writer::<[u64; 2]>(0, &[0]).unwrap();
    assert_eq!(next.stats()[0], first, "the next writer starts from the lane's counters");
}

/// A run that exactly fills the rest of a buffer goes into it (the buffer is published full);
/// only a run longer than the room left starts a fresh buffer.
#[test]
fn a_run_that_exactly_fills_a_buffer_goes_into_it() {
    let c = cfg(1, 3, 4, Policy::Block, 8);
    let t =
        DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::new())).unwrap();
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    assert!(w.record_slice(0, &[[0, 0], [0, 1]]));
    assert!(w.record_slice(0, &[[0, 2], [0, 3]]), "fills the buffer");
    assert_eq!(w.stats()[0].switches, 1, "published full");
    assert!(w.record_slice(0, &[[0, 4], [0, 5]]));
    assert_eq!(w.stats()[0].switches, 1, "the third run is in the fresh buffer");
    assert!(w.record_slice(0, &[[0, 6], [0, 7], [0, 8]]), "no room: a fresh buffer");
    let s = w.stats()[0];
    assert_eq!((s.switches, s.produced, s.dropped), (2, 9, 0));
}

/// A run on a lane that cannot get a buffer is refused whole and accounted: its records
/// produced and dropped, its items dropped, and nothing written.
#[test]
fn a_run_without_a_buffer_is_refused_and_accounted_whole() {
    let _bound = ferry_watchdog::bound("the device writer's gate waits");
    // One buffer, nobody drains: the first run fills and publishes it, and the pop gate waits
    // out the budget.
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::ticking(1)))
        .unwrap();
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    assert!(w.record_run(0, &[[0, 0], [0, 1], [0, 2], [0, 3]], 2));
    assert!(!w.has_buffer(0));
    assert!(!w.record_run(0, &[[0, 4], [0, 5], [0, 6]], 5), "no buffer: refused");
    let s = w.stats()[0];
    assert_eq!((s.produced, s.dropped, s.switches, s.gate_timeouts), (7, 3, 1, 1));
    assert_eq!(w.items_dropped(0), 5);
    assert!(!w.record_run(0, &[[0, 7]], 1));
    assert_eq!((w.stats()[0].produced, w.stats()[0].dropped, w.items_dropped(0)), (8, 4, 6));
}
