//! The device writer's two gates through the public API: when they read the clock, how long
//! they wait under each policy, what a gate that gives up accounts and keeps, and the log of
//! each wait.
#![cfg(not(ferry_loom))]

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::{cfg, svm, CountingClock};
use ferry_abi::dfx::fq_slot;
use ferry_dfx::clock::VirtualClock;
use ferry_dfx::{CollectedBuffer, DfxTransport, Policy};

#[test]
fn fast_path_never_reads_the_clock() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    // Room everywhere: 4 buffers in the free queue, ready depth 8 (capacity 7).
    let c = cfg(1, 4, 8, Policy::Block, 8);
    let clock = Arc::new(CountingClock::default());
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), clock.clone()).unwrap();
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..24 {
        w.record(0, [0, i]); // three buffer switches, each finding space and a free buffer
    }
    assert_eq!(w.stats()[0].switches, 3);
    assert_eq!(clock.reads.load(Ordering::Relaxed), 0);
}

#[test]
fn push_gate_times_out_without_publishing_and_accounts_the_buffer() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    // Ready depth 2: capacity 1. Nobody drains.
    let c = cfg(1, 4, 4, Policy::Block, 2);
    let clock = Arc::new(VirtualClock::ticking(1));
    let mut c2 = c.clone();
    c2.block_budget_cycles = 50;
    let t = DfxTransport::<[u64; 2]>::new(c2, svm(&c), clock.clone()).unwrap();
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..4 {
        w.record(0, [0, i]); // first buffer: published, queue now full
    }
    for i in 4..8 {
        w.record(0, [0, i]); // second buffer: push gate times out on the 8th record
    }
    let s = w.stats()[0];
    assert_eq!(s.switches, 1, "the second buffer was not published");
    assert_eq!(s.gate_timeouts, 1);
    assert_eq!(s.dropped, 4, "exactly the records the lane still owned");
    assert!(s.max_stall_cycles >= 50, "the one budget ran out: {s:?}");
    assert!(w.has_buffer(0), "the buffer stays the lane's and is overwritten");
    // Degraded: the next gate checks once and does not wait again.
    let before = clock.peek();
    for i in 8..12 {
        w.record(0, [0, i]);
    }
    let s = w.stats()[0];
    assert_eq!(s.dropped, 8);
    assert_eq!(s.gate_timeouts, 1, "no second budget was spent");
    assert!(clock.peek() - before < 5, "degraded gate did not wait");
}

#[test]
fn pop_gate_budget_is_taken_once() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    // One buffer, nobody drains: the switch publishes it, then the pop gate waits one budget.
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let clock = Arc::new(VirtualClock::ticking(1));
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), clock.clone()).unwrap();
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..4 {
        w.record(0, [0, i]);
    }
    let s = w.stats()[0];
    assert_eq!(s.switches, 1);
    assert_eq!(s.gate_timeouts, 1);
    assert_eq!(s.dropped, 0, "nothing was owned while waiting for a replacement");
    // The clock advanced by one per poll: the wait ended as soon as 40 cycles had passed,
    // however many iterations that took.
    assert!((40..=42).contains(&s.max_stall_cycles), "{s:?}");
    assert!(!w.has_buffer(0));
    w.record(0, [0, 4]);
    assert_eq!(w.stats()[0].dropped, 1, "a buffer-less lane drops and counts");
}

#[test]
fn drop_policy_bounds_every_wait() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    let mut c = cfg(1, 1, 4, Policy::Drop, 2);
    c.drop_wait_cycles = 7;
    let clock = Arc::new(VirtualClock::ticking(1));
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), clock).unwrap();
    assert_eq!(t.device_region().budget_cycles(), 7);
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..100 {
        w.record(0, [0, i]);
    }
    let s = w.stats()[0];
    assert!(s.max_stall_cycles <= 7 + 2, "{s:?}");
    assert_eq!(s.produced, 100);
    assert_eq!(s.dropped, 96);
}

#[test]
fn a_gate_wait_is_logged_as_one_interval_and_reaches_the_reconcile() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    // One buffer, nobody drains: the first switch publishes it, then the pop gate waits out its
    // budget on a clock that ticks once per read.
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let clock = Arc::new(VirtualClock::ticking(1));
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), clock.clone()).unwrap();
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    w.record(0, [0, 0]);
    let before = clock.peek();
    for i in 1..4 {
        w.record(0, [0, i]);
    }
    let after = clock.peek();
    let s = w.stats()[0];
    assert_eq!((s.gate_timeouts, s.stall_waits), (1, 1));
    // Degraded gates check without waiting: no further interval.
    w.record(0, [0, 4]);
    assert_eq!(w.stats()[0].stall_waits, 1);
    drop(w);
    let report = t.start(|_| |_b: &CollectedBuffer<'_, [u64; 2]>| {}).stop();
    let l = &report.lanes[0];
    assert_eq!(l.stalls.total, 1);
    let [[start, end]] = l.stalls.as_slice() else { panic!("{:?}", l.stalls) };
    assert!(before <= *start && start < end && *end <= after, "{before} {start} {end} {after}");
    assert_eq!(end - start, l.stall_cycles);
    assert_eq!(l.stall_cycles, s.stall_cycles);
}

/// A flush whose push gate gives up (within the run, as an ArgsDump seal flushes) keeps the
/// buffer as the lane's current one: the records in it are accounted dropped, and the lane's
/// next records overwrite it from slot 0 instead of the writer letting go of it. A buffer let
/// go of there would be out of circulation for good once the lane claimed another: neither
/// published nor named by the lane's current pointer for the next writer to take up, while the
/// host counts it as the device's.
#[test]
fn a_flush_that_gives_up_keeps_the_buffer_for_the_lanes_next_records() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    // Two buffers of four records, ready depth 2 (capacity 1), nobody drains.
    let mut c = cfg(1, 2, 4, Policy::Block, 2);
    c.block_budget_cycles = 50;
    let clock = Arc::new(VirtualClock::ticking(1));
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), clock).unwrap();
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..4 {
        w.record(0, [0, i]); // buffer A: published (the ready ring is now full); B claimed
    }
    w.record(0, [0, 4]);
    w.record(0, [0, 5]);
    w.flush(); // B's push gate gives up: its two records are dropped
    let s = w.stats()[0];
    assert_eq!((s.switches, s.gate_timeouts, s.dropped, s.produced), (1, 1, 2, 6));
    assert!(w.has_buffer(0), "the buffer the flush could not publish stays the lane's");
    // The free queue is empty (both buffers are out): only the kept buffer can take these.
    w.record(0, [0, 6]);
    w.record(0, [0, 7]);
    let s = w.stats()[0];
    assert_eq!((s.dropped, s.produced), (2, 8), "written into the kept buffer, not dropped");
    // The end-of-run flush gives up too (the lane is degraded): the buffer stays named as the
    // lane's current one for the next writer, which takes it up without any gate.
    let s = w.finish()[0];
    assert_eq!((s.switches, s.dropped, s.produced), (1, 4, 8));
    let mut next = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    assert!(next.has_buffer(0), "the next writer took up the kept buffer");
    next.record(0, [0, 8]);
    assert_eq!(next.stats()[0].dropped, 4);
}

/// A free-queue tail that names more entries than the queue has slots (a corrupt or torn read of
/// the host's word) shows the writer an empty queue: it claims none of the slots behind it,
/// which hold buffers other lanes or the host own now. Its gate waits as for an empty queue
/// and, once the word is whole again, claims exactly the entry it names.
#[test]
fn a_free_queue_tail_past_the_queues_slots_names_no_buffer() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    // One lane, one buffer, nobody drains: the first switch publishes it and the lane's free
    // queue is empty, its head at 1.
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let mem = svm(&c);
    let t =
        DfxTransport::<[u64; 2]>::new(c.clone(), mem.clone(), Arc::new(VirtualClock::ticking(1)))
            .unwrap();
    let layout = c.layout();
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..4 {
        w.record(0, [0, i]);
    }
    let s = w.stats()[0];
    assert_eq!((s.switches, s.gate_timeouts), (1, 1));
    // The tail word reads as if it had torn from 0xff to 0x100: 0x1ff, far past one slot.
    let host = mem.host_view();
    host.store_u32(layout.free_tail_offset(0), 0x1ff, Ordering::Release);
    w.record(0, [0, 4]);
    let s = w.stats()[0];
    assert!(!w.has_buffer(0), "no slot was claimed");
    assert_eq!((s.dropped, s.bad_slots), (1, 0), "the record is dropped as with an empty queue");
    // Whole again and one ahead of the head: the writer claims that entry (the buffer the
    // host pushed into slot 1, here the lane's own one again).
    let buf = host.load_u64(layout.free_slot_offset(0, 0), Ordering::Relaxed);
    host.store_u64(
        layout.free_slot_offset(0, fq_slot(1, layout.free_slots)),
        buf,
        Ordering::Relaxed,
    );
    host.store_u32(layout.free_tail_offset(0), 2, Ordering::Release);
    w.record(0, [0, 5]);
    assert!(w.has_buffer(0));
    assert_eq!(w.stats()[0].dropped, 1);
}
