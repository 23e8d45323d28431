//! What the host reads back of each lane (its reconcile line, gate waits and run ends, over
//! several runs of a session) and what its startup replenish pushes, through the public API.
#![cfg(not(ferry_loom))]

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use common::{cfg, svm, CountingClock};
use ferry_abi::arch::A2A3;
use ferry_abi::dfx::BufferCountPlacement;
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

/// Each writer's end-of-run flush logs the lane's counters and next buffer sequence number, so
/// a session over several runs tells each run's buffers and counts apart: every buffer of run
/// k has a sequence number below run k's end and at or above run k-1's.
#[test]
fn every_run_end_logs_the_lanes_counters_and_next_sequence_number() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    let c = cfg(1, 2, 4, Policy::Block, 4);
    let t =
        DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::new())).unwrap();
    let device = t.device_region();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let running = t.start(move |_| {
        let sink = sink.clone();
        move |b: &CollectedBuffer<'_, [u64; 2]>| {
            sink.lock().unwrap().push((b.seq, b.records.iter().map(|r| r[1]).collect::<Vec<_>>()))
        }
    });
    // Three runs of 6, 3 and 0 records, each through a writer of its own (as each run's AICPU
    // thread builds one).
    let mut next = 0u64;
    for n in [6u64, 3, 0] {
        let mut w = device.writer::<[u64; 2]>(0, &[0]).unwrap();
        for _ in 0..n {
            w.record(0, [0, next]);
            next += 1;
        }
        w.finish();
    }
    let report = running.stop();
    let log = &report.run_ends[0];
    assert_eq!(log.total, 3);
    let ends: Vec<(u64, u64, u32)> =
        log.ends.iter().map(|e| (e.produced, e.dropped, e.seq)).collect();
    // Run 0: a full buffer and a flushed one of 2 (seqs 0, 1); run 1: one of 3 (seq 2); run 2:
    // nothing.
    assert_eq!(ends, [(6, 0, 2), (9, 0, 3), (9, 0, 3)]);
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    let run_of = |seq: u32| log.ends.iter().position(|e| seq < e.seq).unwrap();
    let mut per_run = [Vec::new(), Vec::new(), Vec::new()];
    for (seq, recs) in seen {
        per_run[run_of(seq)].extend(recs);
    }
    assert_eq!(per_run, [(0..6).collect::<Vec<u64>>(), (6..9).collect(), vec![]]);
}

/// A writer that ends holding a buffer it never wrote (it claimed a replacement after its last
/// publish) hands it to the lane's next writer: a session over several runs loses no buffer of a
/// one-buffer pool, so the next run writes without waiting at a gate.
#[test]
fn the_next_runs_writer_takes_up_the_buffer_the_last_one_held_empty() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    // Both places of a buffer's count: the taken-up buffer's records and count go where the
    // host reads them.
    for placement in [BufferCountPlacement::AfterRecords, BufferCountPlacement::FirstPadded64] {
        let mut b = DfxBuilder::new(&A2A3);
        b.ready_queues(1).ready_depth(4).records_per_buffer(4).policy(Policy::Drop);
        // A gate gives up after this many clock reads: far longer than the host takes to return
        // a buffer, far shorter than the test's bound.
        b.drop_wait_cycles(5_000_000);
        b.lane(0, 0, 1);
        let c = b.placement(placement).build::<[u64; 2]>().unwrap();
        let clock = Arc::new(CountingClock::default());
        let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), clock.clone()).unwrap();
        let device = t.device_region();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let running = t.start(move |_| {
            let sink = sink.clone();
            move |b: &CollectedBuffer<'_, [u64; 2]>| {
                sink.lock().unwrap().push((b.seq, b.records.iter().map(|r| r[1]).collect()));
            }
        });
        // Run 0 fills its one buffer exactly: it publishes it and claims it back, empty.
        let mut w = device.writer::<[u64; 2]>(0, &[0]).unwrap();
        for i in 0..4 {
            w.record(0, [0, i]);
        }
        assert!(w.has_buffer(0), "run 0 ends holding its (empty) buffer");
        w.finish();
        let reads = clock.reads.load(Ordering::Relaxed);
        // Run 1 starts with that buffer: no gate wait (no clock read), nothing dropped.
        let mut w = device.writer::<[u64; 2]>(0, &[0]).unwrap();
        assert!(w.has_buffer(0), "run 1 took up the held buffer");
        for i in 4..7 {
            w.record(0, [0, i]);
        }
        assert_eq!(clock.reads.load(Ordering::Relaxed), reads, "run 1 waited at a gate");
        let s = w.finish()[0];
        assert_eq!((s.produced, s.dropped), (7, 0));
        let report = running.stop();
        assert_eq!(report.lanes[0].collected, 7);
        let ends: Vec<(u64, u32)> =
            report.run_ends[0].ends.iter().map(|e| (e.produced, e.seq)).collect();
        assert_eq!(ends, [(4, 1), (7, 2)]);
        let mut seen: Vec<(u32, Vec<u64>)> = seen.lock().unwrap().clone();
        seen.sort();
        assert_eq!(seen, [(0, vec![0, 1, 2, 3]), (1, vec![4, 5, 6])], "{placement:?}");
    }
}

/// A gate wait shows in the row of the lane that waited, and only there: two lanes of one thread
/// (one ready queue, so lane and queue numbers differ for lane 1), lane 1 with one buffer
/// waiting out its pop gate after its switch, lane 0 never waiting. Lane 1's row carries the wait
/// (its interval, as long as the budget at least, and its count); lane 0's carries none.
#[test]
fn a_stall_shows_in_its_own_lanes_row_only() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    let mut b = DfxBuilder::new(&A2A3);
    b.ready_queues(1).ready_depth(8).records_per_buffer(4).policy(Policy::Block);
    b.block_budget_cycles(40).lane(0, 0, 2).lane(0, 0, 1);
    let c = b.build::<[u64; 2]>().unwrap();
    // Nobody drains while the writer runs, on a clock that ticks once per read.
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::ticking(1)))
        .unwrap();
    let device = t.device_region();
    let mut w = device.writer::<[u64; 2]>(0, &[0, 1]).unwrap();
    w.record(0, [0, 0]);
    for i in 0..4 {
        w.record(1, [1, i]);
    }
    let s = w.finish();
    assert_eq!((s[0].stall_waits, s[1].stall_waits, s[1].gate_timeouts), (0, 1, 1));
    let report = t.start(|_| |_b: &CollectedBuffer<'_, [u64; 2]>| {}).stop();
    assert!(report.is_reconciled(), "{:?}", report.lanes);
    let (l0, l1) = (&report.lanes[0], &report.lanes[1]);
    assert_eq!((l0.stalls.total, l0.stalls.as_slice(), l0.stall_cycles), (0, &[][..], 0));
    assert_eq!((l1.stalls.total, l1.stalls.as_slice().len()), (1, 1), "{:?}", l1.stalls);
    let [start, end] = l1.stalls.as_slice()[0];
    assert!(end - start >= 40, "a wait of the whole budget: {:?}", l1.stalls);
    assert_eq!(l1.stall_cycles, s[1].stall_cycles);
}
