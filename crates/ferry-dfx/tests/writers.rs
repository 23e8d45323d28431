//! Making device writers through the public API: which record types a region takes, the
//! exclusive claims on queues and lanes (released on every path), a writer's accessors, and the
//! counters a lane's next writer carries on.
#![cfg(not(ferry_loom))]

mod common;

use std::mem::offset_of;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::{cfg, svm};
use ferry_abi::arch::A2A3;
use ferry_abi::dfx::{fq_slot, DfxLayout, LaneState};
use ferry_dfx::clock::VirtualClock;
use ferry_dfx::mem::DeviceMemory;
use ferry_dfx::{BuildError, CollectedBuffer, DfxBuilder, DfxTransport, Policy, Record};

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
    let lanes: Vec<Vec<u32>> = (0..3).map(|q| d.lanes_of_queue(q)).collect();
    assert_eq!(lanes, [vec![0], vec![], vec![1, 2]]);
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

/// What the device reads of one lane's free queue and state, written as the host (or a stray
/// write) would: the tests below put words there by hand.
struct LaneWords {
    mem: Arc<dyn DeviceMemory>,
    layout: DfxLayout,
}

impl LaneWords {
    fn free_head(&self, lane: u32) -> u32 {
        self.mem.device_view().load_u32(self.layout.free_head_offset(lane), Ordering::Acquire)
    }

    /// Pushes `ptr` into `lane`'s free queue (slot, then tail), as a drain shard does.
    fn push_free(&self, lane: u32, ptr: u64) {
        let v = self.mem.device_view();
        let tail = v.load_u32(self.layout.free_tail_offset(lane), Ordering::Relaxed);
        let slot = self.layout.free_slot_offset(lane, fq_slot(tail, self.layout.free_slots));
        v.store_u64(slot, ptr, Ordering::Relaxed);
        v.store_u32(self.layout.free_tail_offset(lane), tail + 1, Ordering::Release);
    }

    fn set_current_buffer(&self, lane: u32, ptr: u64) {
        let off = self.layout.lane_offset(lane) + offset_of!(LaneState, current_buf_ptr);
        self.mem.device_view().store_u64(off, ptr, Ordering::Relaxed);
    }
}

/// One lane of `buffers` buffers of four records, nobody draining, gates that give up after 40
/// reads of a clock that ticks once per read.
fn lone_lane(buffers: u32) -> (DfxTransport<[u64; 2]>, LaneWords) {
    let mut c = cfg(1, buffers, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let mem = svm(&c);
    let t =
        DfxTransport::<[u64; 2]>::new(c.clone(), mem.clone(), Arc::new(VirtualClock::ticking(1)))
            .unwrap();
    (t, LaneWords { mem, layout: c.layout() })
}

/// A free slot that holds no buffer of the region (null, or an address outside its buffers)
/// gives the writer nothing: it counts each such slot and drops the record it was for.
#[test]
fn a_free_slot_without_a_buffer_is_counted_and_claims_nothing() {
    let _bound = ferry_watchdog::bound("the device writer's gate waits");
    let (t, words) = lone_lane(1);
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..4 {
        w.record(0, [0, i]); // publishes the lane's one buffer; the pop gate gives up
    }
    assert!(!w.has_buffer(0));
    words.push_free(0, 0);
    w.record(0, [0, 4]);
    let s = w.stats()[0];
    assert_eq!((s.bad_slots, s.dropped), (1, 1), "a null slot");
    assert!(!w.has_buffer(0));
    words.push_free(0, words.mem.device_addr() + 8); // inside the region's header
    w.record(0, [0, 5]);
    let s = w.stats()[0];
    assert_eq!((s.bad_slots, s.dropped), (2, 2), "a foreign slot");
    assert_eq!(words.free_head(0), 3, "both slots were taken off the queue");
}

/// A lane's next writer takes up the buffer the last one held only when the lane's current
/// pointer names a buffer of the region: a foreign pointer left there is ignored.
#[test]
fn a_foreign_current_pointer_is_not_taken_up() {
    let _bound = ferry_watchdog::bound("the device writer's gate waits");
    let (t, words) = lone_lane(1);
    let d = t.device_region();
    let mut w = d.writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..4 {
        w.record(0, [0, i]); // publishes the lane's one buffer; the pop gate gives up
    }
    w.finish();
    words.set_current_buffer(0, words.mem.device_addr() + 8);
    let w = d.writer::<[u64; 2]>(0, &[0]).unwrap();
    assert!(!w.has_buffer(0), "nothing to take up, nothing in the free queue");
}

/// A writer that took up the buffer its lane's last writer held claims no other at its start:
/// the free queue's head does not move, and the buffer still in the queue stays there.
#[test]
fn a_writer_that_took_up_a_held_buffer_claims_no_second_one() {
    let _bound = ferry_watchdog::bound("the device writer's gate waits");
    let (t, words) = lone_lane(2);
    let d = t.device_region();
    let w = d.writer::<[u64; 2]>(0, &[0]).unwrap();
    assert!(w.has_buffer(0));
    assert_eq!(words.free_head(0), 1, "the first writer claimed one of the two");
    w.finish(); // holds it, empty
    let w = d.writer::<[u64; 2]>(0, &[0]).unwrap();
    assert!(w.has_buffer(0));
    assert_eq!(words.free_head(0), 1, "the held buffer was taken up, no second one claimed");
}

/// The sequence number of a lane's next buffer survives its writer when the writer's last
/// switch found no replacement: the next writer's first buffer carries the next number, so
/// each run's buffers stay apart.
#[test]
fn a_switch_without_a_replacement_leaves_the_next_sequence_number_for_the_next_writer() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    let (t, _) = lone_lane(1);
    let d = t.device_region();
    let mut w = d.writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..4 {
        w.record(0, [0, i]); // buffer seq 0 published; the pop gate gives up
    }
    w.finish();
    d.writer::<[u64; 2]>(0, &[0]).unwrap().finish();
    let report = t.start(|_| |_b: &CollectedBuffer<'_, [u64; 2]>| {}).stop();
    let seqs: Vec<u32> = report.run_ends[0].ends.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 1], "run 1 starts at seq 1 and publishes nothing");
}
