//! Stepped tests of how the drain shards keep free queues filled (docs/design/dfx-backpressure.md,
//! "The drain shard owns every free queue"): which shard serves which ready queue, who writes a
//! free queue, where a top-up takes its buffers and whom it gives them to, the retry list, the
//! startup fill, and that none of it allocates. Each test steps the host by hand and asserts the
//! words and counters the rule leaves.
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ferry_abi::arch::A2A3;

use super::*;
use crate::clock::VirtualClock;
use crate::config::DfxConfig;
use crate::mem::{DeviceMemory, MemOpKind, SpyMemory, SvmMemory};
use crate::sync::atomic::Ordering;
use crate::sync::Arc;
use crate::{DfxBuilder, Policy};

/// Counts the heap allocations of the calling thread, for the whole of this crate's unit-test
/// binary (the crate itself sets no allocator): a test reads [`allocations`] before and after a
/// step to show that the step allocated nothing.
struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Counts one allocation of this thread (a const thread-local without a destructor: reachable,
/// and allocation-free, at any point of a thread's life).
fn note_allocation() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

/// Heap allocations this thread has made so far.
fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees hold; the only addition is a thread-local counter, which allocates nothing.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: delegated to the caller (GlobalAlloc::alloc's contract).
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: delegated to the caller.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: delegated to the caller (`ptr` came from this allocator, i.e. from System).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: delegated to the caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// A builder for a host stepped by hand: buffers of two records, and a writer that gives up at
/// once when it finds no buffer (nothing else would give it one while it waits).
fn stepped() -> DfxBuilder {
    let mut b = DfxBuilder::new(&A2A3);
    b.records_per_buffer(2).policy(Policy::Drop).drop_wait_cycles(2);
    b
}

fn transport(cfg: &DfxConfig, mem: Arc<dyn DeviceMemory>) -> DfxTransport<u64> {
    DfxTransport::<u64>::new(cfg.clone(), mem, Arc::new(VirtualClock::ticking(1))).unwrap()
}

fn svm(cfg: &DfxConfig, addr: u64) -> Arc<dyn DeviceMemory> {
    Arc::new(SvmMemory::new(cfg.region_size(), addr))
}

fn sink() -> impl FnMut(&CollectedBuffer<'_, u64>) + Send + 'static {
    |_b: &CollectedBuffer<'_, u64>| {}
}

/// A word of region `region`'s host view (SVM: the device's word too).
fn word(p: &EngineParts, region: usize, off: usize) -> u32 {
    // Relaxed: the test is the only thread running.
    p.ctxs[region].host.load_u32(off, Ordering::Relaxed)
}

/// Fills lane `lane` of `w` with one buffer's worth of records (two), which publishes it.
fn publish(w: &mut crate::device::DeviceWriter<u64>, lane: usize, first: u64) {
    w.record(lane, first);
    w.record(lane, first + 1);
}

/// Each ready queue is served by exactly one drain shard, the one of its index (`q % shards`):
/// five queues over two shards, one buffer published on each; shard 0's sweep pops the entries
/// of queues 0, 2 and 4 and nothing else (the heads of 1 and 3 stay), shard 1's those of 1 and 3.
#[test]
fn each_ready_queue_is_served_by_exactly_one_shard_the_one_of_its_index() {
    let _bound = ferry_watchdog::bound("the stepped writers' gates on the virtual clock");
    let mut b = stepped();
    b.ready_queues(5).shards(2);
    for q in 0..5 {
        b.lane(q, 0, 2);
    }
    let cfg = b.build::<u64>().unwrap();
    let l = cfg.layout();
    let t = transport(&cfg, svm(&cfg, 0x1000_0000));
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    let served = |p: &Parts<u64, _>, s: usize| p.engine.drains[s].regions[0].queues.clone();
    assert_eq!((served(&parts, 0), served(&parts, 1)), (vec![0, 2, 4], vec![1, 3]));
    let mut writers: Vec<_> = (0..5).map(|q| device.writer::<u64>(q, &[q]).unwrap()).collect();
    for w in &mut writers {
        publish(w, 0, 1);
    }
    let heads = |p: &Parts<u64, _>| -> Vec<u32> {
        (0..5).map(|q| word(&p.engine, 0, l.head_offset(q))).collect()
    };
    assert!(parts.engine.drains[0].sweep());
    assert_eq!(heads(&parts), [1, 0, 1, 0, 1], "shard 0 popped its queues' entries, only those");
    assert!(parts.engine.drains[1].sweep());
    assert_eq!(heads(&parts), [1, 1, 1, 1, 1]);
    assert!(!parts.engine.drains[0].sweep(), "shard 0 has nothing left");
    let entries = |p: &Parts<u64, _>, s: usize| p.engine.drains[s].regions[0].stats.entries;
    assert_eq!((entries(&parts, 0), entries(&parts, 1)), (3, 2));
    drop(writers);
}

/// Only the drain shard serving a lane's ready queue writes that lane's free queue: shard 0 has
/// buffers to spare in its recycled lane while lane 1 (shard 1's) has run its free queue empty,
/// yet no write of shard 0's sweep touches lane 1's free queue (slots or tail, checked by a spy
/// on every memory operation) and its tail stays; shard 1's own sweep and retry refill it.
#[test]
fn only_the_shard_serving_a_lane_writes_its_free_queue() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    // Lane 0 (shard 0): 2 buffers in its free queue, 2 in shard 0's recycled lane. Lane 1
    // (shard 1): 2 in its free queue. The reserve makes both pools elastic (room to take more).
    let cfg = stepped()
        .ready_queues(2)
        .shards(2)
        .lane(0, 0, 4)
        .lane(1, 0, 2)
        .free_slots(2)
        .reserve_buffers(1)
        .build::<u64>()
        .unwrap();
    let l = cfg.layout();
    let spy = Arc::new(SpyMemory::new(SvmMemory::new(cfg.region_size(), 0x2000_0000)));
    let t = transport(&cfg, spy.clone());
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    assert_eq!(parts.engine.replenisher.regions[0].recycled[0][0].len(), 2);
    let mut w = device.writer::<u64>(1, &[1]).unwrap();
    publish(&mut w, 0, 1); // lane 1 publishes its first buffer and claims its second
    assert_eq!(parts.free_len(1), 0);
    let fq = l.lane_offset(1)..l.free_tail_offset(1) + 4;
    let writes_to_lane_1 = |from: usize| {
        spy.ops()[from..]
            .iter()
            .filter(|o| o.kind == MemOpKind::Write && o.off < fq.end && fq.start < o.off + o.len)
            .count()
    };
    let tail = l.free_tail_offset(1);
    let before = spy.ops().len();
    assert!(!parts.engine.drains[0].sweep());
    assert_eq!(writes_to_lane_1(before), 0, "shard 0 wrote lane 1's free queue");
    assert_eq!(word(&parts.engine, 0, tail), 2, "lane 1's tail moved in shard 0's sweep");
    assert_eq!(parts.engine.replenisher.regions[0].recycled[0][0].len(), 2);
    // Shard 1 pops the entry (nothing recycled for it yet: listed), the buffer comes back to
    // its recycled lane, and its retry refills lane 1.
    let before = spy.ops().len();
    assert!(parts.engine.drains[1].sweep());
    assert_eq!(parts.retry_list(1), &[1]);
    parts.engine.collectors[1].drain_all();
    assert_eq!(parts.engine.replenisher.tick(), 1);
    assert!(!parts.engine.drains[1].sweep());
    assert_eq!(word(&parts.engine, 0, tail), 3);
    assert_eq!(writes_to_lane_1(before), 2, "shard 1's push: the slot, then the tail");
    drop(w);
}

/// After each drained buffer the shard tops up the free queue that buffer came from, at once and
/// out of its own recycled lane: lane 0 publishes on queue 1 and lane 1 on queue 0 (lane and
/// queue numbers differ), and lane 0's entry gives lane 0 its recycled buffer in the same sweep;
/// lane 1's free queue is untouched.
#[test]
fn after_each_drained_buffer_the_shard_tops_up_the_free_queue_it_came_from() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    // Lane 0 (queue 1): 2 buffers in its free queue, 1 recycled. Lane 1 (queue 0): 2 in its
    // free queue, room for none more.
    let cfg = stepped()
        .ready_queues(2)
        .shards(1)
        .lane(1, 0, 3)
        .lane(0, 0, 2)
        .free_slots(2)
        .build::<u64>()
        .unwrap();
    let t = transport(&cfg, svm(&cfg, 0x3000_0000));
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    let mut w = device.writer::<u64>(1, &[0]).unwrap();
    publish(&mut w, 0, 1);
    assert_eq!((parts.free_len(0), parts.free_len(1)), (0, 2));
    assert!(parts.engine.drains[0].sweep());
    assert_eq!((parts.free_len(0), parts.free_len(1)), (1, 2), "lane 0 got its top-up");
    let stats = parts.engine.drains[0].regions[0].stats;
    assert_eq!((stats.entries, stats.free_pushes), (1, 1));
    // Its third buffer is still the host's (drained, not yet recycled): listed for it.
    assert_eq!(parts.retry_list(0), &[0]);
    assert_eq!(
        parts.engine.replenisher.regions[0].recycled[0][0].len(),
        0,
        "from its recycled lane"
    );
    // The lane records on into the buffer it was given.
    publish(&mut w, 0, 3);
    assert!(w.has_buffer(0));
    drop(w);
}

/// A drain shard's refill allocates nothing: rounds of the steady state (a lane's buffer drained
/// and its free queue topped up from the recycled lane) beside a starved lane retried on every
/// sweep while its recycled lane stays dry, counted by this binary's allocator, allocate nothing
/// on the sweeping thread.
#[test]
fn the_drains_top_ups_and_retries_allocate_nothing() {
    let _bound = ferry_watchdog::bound("the stepped writers' gates on the virtual clock");
    // Lane 0 (kind 0): 2 buffers in its free queue, 1 recycled. Lane 1 (kind 1): one buffer.
    let cfg = stepped()
        .ready_queues(2)
        .shards(1)
        .lane(0, 0, 3)
        .lane(1, 1, 1)
        .free_slots(2)
        .build::<u64>()
        .unwrap();
    let t = transport(&cfg, svm(&cfg, 0x4000_0000));
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    let mut w0 = device.writer::<u64>(0, &[0]).unwrap();
    let mut w1 = device.writer::<u64>(1, &[1]).unwrap();
    // Lane 1 publishes its only buffer and is listed; the buffer is kept out of its recycled
    // lane, so every sweep retries lane 1 and finds that lane dry.
    publish(&mut w1, 0, 100);
    assert!(parts.engine.drains[0].sweep());
    assert_eq!(parts.retry_list(0), &[1]);
    parts.engine.collectors[0].drain_all();
    assert_eq!(parts.engine.replenisher.tick(), 1);
    let aside = parts.engine.drains[0].regions[0].recycled[1].pop().unwrap();
    let mut allocated = 0;
    for round in 0..8u64 {
        publish(&mut w0, 0, 2 * round);
        let before = allocations();
        assert!(parts.engine.drains[0].sweep(), "round {round}");
        assert!(!parts.engine.drains[0].sweep(), "round {round}");
        allocated += allocations() - before;
        assert!(parts.retry_list(0).contains(&1), "round {round}: lane 1 is still listed");
        assert!(w0.has_buffer(0), "round {round}: lane 0 was topped up");
        parts.engine.collectors[0].drain_all();
        parts.engine.replenisher.tick();
    }
    assert_eq!(allocated, 0, "the drain's sweeps allocated");
    let stats = parts.engine.drains[0].regions[0].stats;
    assert_eq!(stats.entries, 9);
    assert!(parts.engine.replenisher.regions[0].recycled[0][1].push(aside).is_ok());
    drop((w0, w1));
}

/// A lane whose top-up comes up short (its recycled lane dry) is listed for retry, even while it
/// still holds a buffer: a two-buffer lane publishes one and claims the other; the top-up after
/// the entry finds nothing recycled and lists it, and once its buffer comes back the retry after
/// the next sweep returns it to the lane.
#[test]
fn a_lane_whose_top_up_runs_dry_is_listed_for_retry_while_it_holds_a_buffer() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = stepped().ready_queues(1).lane(0, 0, 2).free_slots(2).build::<u64>().unwrap();
    let t = transport(&cfg, svm(&cfg, 0x5000_0000));
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    let mut w = device.writer::<u64>(0, &[0]).unwrap();
    publish(&mut w, 0, 1);
    assert!(w.has_buffer(0), "the lane holds its second buffer");
    assert!(parts.engine.drains[0].sweep());
    assert_eq!(parts.retry_list(0), &[0], "short top-up: listed");
    assert_eq!(parts.engine.drains[0].regions[0].stats.short_sites, 1);
    parts.engine.collectors[0].drain_all();
    assert_eq!(parts.engine.replenisher.tick(), 1);
    assert!(!parts.engine.drains[0].sweep());
    assert_eq!(parts.free_len(0), 1, "the retry returned the buffer");
    assert!(parts.retry_list(0).is_empty());
    publish(&mut w, 0, 3);
    assert!(w.has_buffer(0), "the lane switched into it");
    drop(w);
}

/// Starved lanes are retried after every sweep, busy or idle: region A's one-buffer lane is
/// starved and listed while region B's lane, on the same drain shard, publishes a buffer before
/// every sweep, so the shard never has an idle sweep; each busy sweep's retry still returns A's
/// recycled buffer to A.
#[test]
fn starved_lanes_are_retried_after_a_busy_sweep_too() {
    let _bound = ferry_watchdog::bound("the stepped writers' gates on the virtual clock");
    let a = stepped().ready_queues(1).lane(0, 0, 1).build::<u64>().unwrap();
    // B: 4 buffers in its free queue, 2 recycled: never short.
    let b = stepped().ready_queues(1).lane(0, 0, 6).build::<u64>().unwrap();
    let ta = transport(&a, svm(&a, 0x6000_0000));
    let tb = transport(&b, svm(&b, 0x7000_0000));
    let (da, db) = (ta.device_region(), tb.device_region());
    let mut e = DfxEngine::new(EngineConfig::default());
    e.add(ta, |_| sink()).unwrap();
    e.add(tb, |_| sink()).unwrap();
    let mut parts = e.into_parts();
    assert_eq!(parts.drains.len(), 1, "one shard serves both regions");
    let mut wa = da.writer::<u64>(0, &[0]).unwrap();
    let mut wb = db.writer::<u64>(0, &[0]).unwrap();
    for round in 0..3u64 {
        publish(&mut wa, 0, 2 * round);
        assert!(!wa.has_buffer(0), "round {round}: A published its only buffer");
        assert!(parts.drains[0].sweep(), "round {round}");
        assert_eq!(parts.drains[0].regions[0].retry_list(), &[0], "round {round}: A is listed");
        parts.collectors[0].drain_all();
        assert_eq!(parts.replenisher.tick(), 1, "round {round}: A's buffer is recycled");
        // B keeps the shard busy: the next sweep finds B's entry.
        publish(&mut wb, 0, 2 * round);
        assert!(parts.drains[0].sweep(), "round {round}: a busy sweep");
        assert_eq!(parts.free_len(0, 0), 1, "round {round}: A got its buffer back");
        assert!(parts.drains[0].regions[0].retry_list().is_empty(), "round {round}");
        parts.collectors[0].drain_all();
        parts.replenisher.tick();
    }
    drop((wa, wb));
}

/// A listed lane stays on the retry list until it is filled (at its quota, here its three
/// buffers), and leaves it then: its buffers come back one at a time, each retry gives it the
/// one there is and keeps it listed, and the third leaves the list empty.
#[test]
fn a_starved_lane_stays_listed_until_it_is_filled_and_leaves_then() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = stepped().ready_queues(1).lane(0, 0, 3).build::<u64>().unwrap();
    let t = transport(&cfg, svm(&cfg, 0x8000_0000));
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    let mut w = device.writer::<u64>(0, &[0]).unwrap();
    for i in 0..3 {
        publish(&mut w, 0, 2 * i);
    }
    assert!(!w.has_buffer(0), "all three published, none left");
    assert!(parts.engine.drains[0].sweep());
    assert_eq!(parts.retry_list(0), &[0]);
    parts.engine.collectors[0].drain_all();
    assert_eq!(parts.engine.replenisher.tick(), 3);
    // Two of the three held back: they return one at a time.
    let recycled = |p: &mut Parts<u64, _>| p.engine.drains[0].regions[0].recycled[0].pop().unwrap();
    let mut aside = vec![recycled(&mut parts), recycled(&mut parts)];
    for have in 1..=3 {
        assert!(!parts.engine.drains[0].sweep());
        assert_eq!(parts.free_len(0), have, "{have} of 3 back");
        if have < 3 {
            assert_eq!(parts.retry_list(0), &[0], "{have} of 3: still listed");
            let b = aside.pop().unwrap();
            assert!(parts.engine.replenisher.regions[0].recycled[0][0].push(b).is_ok());
        }
    }
    assert!(parts.retry_list(0).is_empty(), "filled: no longer listed");
    let stats = parts.engine.drains[0].regions[0].stats;
    assert_eq!((stats.free_pushes, stats.retries_refilled), (3, 3));
    drop(w);
}

/// Every free queue is filled to capacity at startup, before any drain shard runs, from any
/// shard's recycled lane: lane 0's one-buffer seed is topped up with a surplus buffer of lane
/// 1's (shard 1's recycled lane). Shard 0 starts from that filled queue: the lane publishes both
/// buffers, and both are drained and collected once each (none mistaken for a duplicate).
#[test]
fn every_free_queue_is_full_before_the_shards_start_and_they_start_from_it() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = stepped()
        .ready_queues(2)
        .shards(2)
        .lane(0, 0, 1)
        .lane(1, 0, 5)
        .free_slots(2)
        .build::<u64>()
        .unwrap();
    let t = transport(&cfg, svm(&cfg, 0x9000_0000));
    let device = t.device_region();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let mut parts = t.into_parts(move |_| {
        let s = s.clone();
        move |b: &CollectedBuffer<'_, u64>| s.lock().unwrap().push((b.lane, b.records.to_vec()))
    });
    assert_eq!((parts.free_len(0), parts.free_len(1)), (2, 2), "every free queue is full");
    let recycled =
        |p: &Parts<u64, _>, s: usize| p.engine.replenisher.regions[0].recycled[s][0].len();
    assert_eq!((recycled(&parts, 0), recycled(&parts, 1)), (0, 2), "one of shard 1's went");
    let mut w = device.writer::<u64>(0, &[0]).unwrap();
    publish(&mut w, 0, 1);
    publish(&mut w, 0, 3);
    assert!(!w.has_buffer(0));
    assert!(parts.engine.drains[0].sweep());
    parts.engine.collectors[0].drain_all();
    let stats = parts.engine.drains[0].regions[0].stats;
    assert_eq!((stats.entries, stats.duplicate_entries), (2, 0));
    assert_eq!(seen.lock().unwrap().clone(), [(0, vec![1, 2]), (0, vec![3, 4])]);
    drop(w);
}

/// A shard tops a lane up only from its own recycled lane of the lane's kind: lane 0 (kind 0)
/// comes up short while the shard's kind-1 recycled lane holds a buffer; lane 0 is listed and
/// gets nothing until its own kind's buffer comes back, and the kind-1 buffer stays.
#[test]
fn a_top_up_takes_buffers_from_its_own_recycled_lane_only() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    // Lane 0 (kind 0): 2 buffers in its free queue. Lane 1 (kind 1): 2 in its free queue and 1
    // in the shard's kind-1 recycled lane.
    let cfg = stepped()
        .ready_queues(2)
        .shards(1)
        .lane(0, 0, 2)
        .lane(1, 1, 3)
        .free_slots(2)
        .build::<u64>()
        .unwrap();
    let t = transport(&cfg, svm(&cfg, 0xa000_0000));
    let device = t.device_region();
    let mut parts = t.into_parts(|_| sink());
    let recycled =
        |p: &Parts<u64, _>, kind: usize| p.engine.replenisher.regions[0].recycled[0][kind].len();
    assert_eq!((recycled(&parts, 0), recycled(&parts, 1)), (0, 1));
    let mut w = device.writer::<u64>(0, &[0]).unwrap();
    publish(&mut w, 0, 1);
    assert!(parts.engine.drains[0].sweep());
    assert_eq!(parts.free_len(0), 0, "no buffer of another kind's recycled lane");
    assert_eq!(parts.retry_list(0), &[0]);
    assert_eq!((recycled(&parts, 0), recycled(&parts, 1)), (0, 1));
    parts.engine.collectors[0].drain_all();
    assert_eq!(parts.engine.replenisher.tick(), 1);
    assert_eq!((recycled(&parts, 0), recycled(&parts, 1)), (1, 1), "back to its kind's lane");
    assert!(!parts.engine.drains[0].sweep());
    assert_eq!(parts.free_len(0), 1);
    assert_eq!((recycled(&parts, 0), recycled(&parts, 1)), (0, 1));
    drop(w);
}
