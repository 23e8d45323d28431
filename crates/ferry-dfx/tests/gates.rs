//! The device writer's two gates through the public API: when they read the clock, how long
//! they wait under each policy, what a gate that gives up accounts and keeps, and the log of
//! each wait.
//!
//! Nobody drains in these tests unless a test plays the host itself: a [`HostClock`] runs the
//! host's part (pop a ready entry, push a free buffer) at chosen reads of the device clock, which
//! a gate reads once per pass of its wait loop, so every interleaving of device and host here is
//! fixed by the test, never by the scheduler.
#![cfg(not(ferry_loom))]

mod common;

use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::{cfg, svm, CountingClock};
use ferry_abi::arch::{ArchProfile, A2A3, A5};
use ferry_abi::dfx::{fq_slot, rq_next, DfxLayout, LaneState, GATE_NONE, GATE_POP};
use ferry_dfx::clock::{CycleClock, VirtualClock};
use ferry_dfx::mem::DeviceMemory;
use ferry_dfx::{CollectedBuffer, DfxBuilder, DfxTransport, Policy};

/// What the test's host does at a read of the device clock (given the read's number, counted
/// from 1 since the step was set).
type HostStep = Box<dyn FnMut(u64) + Send>;

/// Cycles a [`HostClock`] jumps per read once it ran away: more than any budget here, so that
/// any gate, even one whose budget is broken, ends its wait at its next read.
const RUNAWAY_STEP: u64 = 1 << 40;

/// A device clock that advances `step` cycles per read and runs the test's host step at each
/// read. Past `max_reads` reads it stops running the host and jumps [`RUNAWAY_STEP`] per read,
/// remembering that it ran away: a gate that should have given up long before (a budget
/// re-armed on every pass, a 30-second budget where the Drop bound was due) then ends at its
/// next read, and the test fails on [`ran_away`](Self::ran_away) instead of spinning for ever.
struct HostClock {
    step: u64,
    max_reads: u64,
    now: AtomicU64,
    reads: AtomicU64,
    ran_away: AtomicBool,
    /// The host's step and the read it was set at.
    host: Mutex<Option<(u64, HostStep)>>,
}

impl std::fmt::Debug for HostClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostClock").field("reads", &self.reads).finish_non_exhaustive()
    }
}

impl HostClock {
    fn new(step: u64, max_reads: u64) -> Arc<HostClock> {
        Arc::new(HostClock {
            step,
            max_reads,
            now: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            ran_away: AtomicBool::new(false),
            host: Mutex::new(None),
        })
    }

    /// Runs `f` at every later read (replacing the previous step), numbering the reads from 1.
    fn on_read(&self, f: impl FnMut(u64) + Send + 'static) {
        *self.host.lock().unwrap() = Some((self.reads(), Box::new(f)));
    }

    fn reads(&self) -> u64 {
        // Relaxed: a counter of this test thread's own reads.
        self.reads.load(Ordering::Relaxed)
    }

    fn ran_away(&self) -> bool {
        // Relaxed: as above.
        self.ran_away.load(Ordering::Relaxed)
    }
}

impl CycleClock for HostClock {
    fn now_cycles(&self) -> u64 {
        // Relaxed (here and below): one thread reads this clock; the words are its own.
        let n = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.max_reads {
            self.ran_away.store(true, Ordering::Relaxed);
            return self.now.fetch_add(RUNAWAY_STEP, Ordering::Relaxed);
        }
        if let Some((set_at, host)) = self.host.lock().unwrap().as_mut() {
            host(n - *set_at);
        }
        self.now.fetch_add(self.step, Ordering::Relaxed)
    }
}

/// One entry of a ready queue as the host pops it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    lane: u32,
    buf: u64,
    seq: u32,
    count: u32,
}

/// The host's side of a region, played by hand on its host view: what a drain shard and the
/// replenish thread do to the words the device reads.
#[derive(Clone)]
struct Host {
    mem: Arc<dyn DeviceMemory>,
    layout: DfxLayout,
}

impl Host {
    fn new(mem: &Arc<dyn DeviceMemory>, layout: DfxLayout) -> Host {
        Host { mem: mem.clone(), layout }
    }

    fn u32_at(&self, off: usize) -> u32 {
        // Acquire: pairs with the writer's Release stores (tails, heads); harmless elsewhere.
        self.mem.host_view().load_u32(off, Ordering::Acquire)
    }

    fn ready_tail(&self, q: u32) -> u32 {
        self.u32_at(self.layout.tail_offset(q))
    }

    fn free_head(&self, lane: u32) -> u32 {
        self.u32_at(self.layout.free_head_offset(lane))
    }

    /// A `u32` field of lane `lane`'s state (`field`: its offset in [`LaneState`]).
    fn lane_u32(&self, lane: u32, field: usize) -> u32 {
        self.u32_at(self.layout.lane_field_offset(lane, field))
    }

    /// A `u64` field of lane `lane`'s state.
    fn lane_u64(&self, lane: u32, field: usize) -> u64 {
        // Relaxed: device counters, read after the writer stored them on this thread.
        self.mem.host_view().load_u64(self.layout.lane_field_offset(lane, field), Ordering::Relaxed)
    }

    /// Pops the oldest entry of ready queue `q`, as its drain shard does, with the count its
    /// buffer was published with.
    fn pop_ready(&self, q: u32) -> Option<Entry> {
        let v = self.mem.host_view();
        let l = &self.layout;
        let head = self.u32_at(l.head_offset(q));
        if head == self.ready_tail(q) {
            return None;
        }
        let e = l.entry_offset(q, head);
        // Relaxed: published by the tail's Release store, read with Acquire above.
        let buf = v.load_u64(e + 8, Ordering::Relaxed);
        let off = (buf - self.mem.device_addr()) as usize;
        let entry = Entry {
            lane: v.load_u32(e, Ordering::Relaxed),
            buf,
            seq: v.load_u32(e + 16, Ordering::Relaxed),
            count: v.load_u32(off - l.records_offset() + l.count_offset(), Ordering::Relaxed),
        };
        // Release: the entry was read before the writer may reuse its slot.
        v.store_u32(l.head_offset(q), rq_next(head, l.ready_depth), Ordering::Release);
        Some(entry)
    }

    /// Pushes buffer `buf` into lane `lane`'s free queue (slot, then tail), as a drain shard
    /// tops it up.
    fn push_free(&self, lane: u32, buf: u64) {
        let v = self.mem.host_view();
        let l = &self.layout;
        let tail = self.u32_at(l.free_tail_offset(lane));
        // Relaxed: published by the tail's Release store below.
        v.store_u64(l.free_slot_offset(lane, fq_slot(tail, l.free_slots)), buf, Ordering::Relaxed);
        // Release: pairs with the writer's Acquire load of the tail.
        v.store_u32(l.free_tail_offset(lane), tail.wrapping_add(1), Ordering::Release);
    }

    /// Pops every entry of ready queue `q` and gives each buffer back to its lane's free queue;
    /// returns the entries.
    fn recycle(&self, q: u32) -> Vec<Entry> {
        let mut out = Vec::new();
        while let Some(e) = self.pop_ready(q) {
            self.push_free(e.lane, e.buf);
            out.push(e);
        }
        out
    }

    /// The `n` records (`[u64; 2]`) at the start of the buffer at device address `buf`.
    fn records(&self, buf: u64, n: usize) -> Vec<[u64; 2]> {
        let v = self.mem.host_view();
        let at = (buf - self.mem.device_addr()) as usize + self.layout.records_offset();
        // Relaxed: published with the buffer's entry, read after it.
        (0..n)
            .map(|i| {
                let r = at + 16 * i;
                [v.load_u64(r, Ordering::Relaxed), v.load_u64(r + 8, Ordering::Relaxed)]
            })
            .collect()
    }
}

/// A region of `cfg`'s lanes over SVM memory with `clock` as its device clock, and the host's
/// side of it.
fn region(c: &ferry_dfx::DfxConfig, clock: Arc<HostClock>) -> (DfxTransport<[u64; 2]>, Host) {
    let mem = svm(c);
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), mem.clone(), clock).unwrap();
    (t, Host::new(&mem, c.layout()))
}

/// Records `[lane, i]` for `i` in `range` on local lane `lane` of `w`.
fn write(w: &mut ferry_dfx::DeviceWriter<[u64; 2]>, lane: usize, range: std::ops::Range<u64>) {
    for i in range {
        w.record(lane, [w.lane_id(lane) as u64, i]);
    }
}

const GATE_STATE: usize = offset_of!(LaneState, gate_state);
const CUR_PTR: usize = offset_of!(LaneState, current_buf_ptr);
const DROPPED: usize = offset_of!(LaneState, dropped_record_count);
const TIMEOUTS: usize = offset_of!(LaneState, gate_timeouts);

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

/// The budget is taken once, before the wait loop: on a clock that advances one cycle per read,
/// a gate whose queue stays empty gives up after about its budget's worth of reads. A budget
/// re-armed on every pass would never run out; the clock then runs away after 2,000 reads and
/// the test fails on that, within a fraction of a second, instead of waiting for ever.
#[test]
fn pop_gate_budget_is_taken_once() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    // One buffer, nobody drains: the switch publishes it, then the pop gate waits one budget.
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let clock = HostClock::new(1, 2_000);
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), clock.clone()).unwrap();
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..4 {
        w.record(0, [0, i]);
    }
    assert!(
        !clock.ran_away(),
        "the gate read the clock {} times: its budget of 40 cycles never ran out",
        clock.reads()
    );
    assert!(clock.reads() <= 43, "one read to start, one per pass: {}", clock.reads());
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

/// The push gate never publishes into a full ready queue (`next_tail == head`): it waits, and
/// the tail stays where it is until the drain shard moves the head. The host pops the first
/// buffer at the gate's fifth read of the clock; until then the tail still names one entry, and
/// the second buffer is published only after it (both reach the host, in order).
#[test]
fn a_full_ready_queue_is_not_published_into_until_its_head_moves() {
    let _bound = ferry_watchdog::bound("the device writer's push gate");
    // Ready depth 2 (capacity 1), three buffers; the gate waits up to 1,000 reads.
    let mut c = cfg(1, 3, 4, Policy::Block, 2);
    c.block_budget_cycles = 1_000;
    let clock = HostClock::new(1, 2_000);
    let (t, host) = region(&c, clock.clone());
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    write(&mut w, 0, 0..4); // buffer A: published, the ready queue is now full
    assert_eq!((host.ready_tail(0), clock.reads()), (1, 0), "published without waiting");
    let seen = Arc::new(Mutex::new(None));
    let (h, s) = (host.clone(), seen.clone());
    clock.on_read(move |n| {
        if n == 5 {
            let tail = h.ready_tail(0);
            *s.lock().unwrap() = Some((tail, h.pop_ready(0)));
        }
    });
    write(&mut w, 0, 4..8); // buffer B: full queue, the gate waits for the head
    let (tail_while_full, first) =
        seen.lock().unwrap().take().expect("the push gate waited for the host");
    assert_eq!(tail_while_full, 1, "the tail did not move while the queue was full");
    let s = w.stats()[0];
    assert_eq!((s.switches, s.stall_waits, s.gate_timeouts, s.dropped), (2, 1, 0, 0), "{s:?}");
    assert_eq!(host.ready_tail(0), 0, "B published once the head had moved");
    let second = host.pop_ready(0).expect("B is on the ready queue");
    let (a, b) = (first.expect("A was on the ready queue"), second);
    assert_eq!((a.seq, a.count, b.seq, b.count), (0, 4, 1, 4));
    assert_eq!(host.records(a.buf, 4), (0..4).map(|i| [0, i]).collect::<Vec<_>>());
    assert_eq!(host.records(b.buf, 4), (4..8).map(|i| [0, i]).collect::<Vec<_>>());
}

/// The pop gate never claims a slot of an empty free queue (`head == tail`): with the lane's
/// one buffer published and nothing pushed back, the gate waits out its budget and the free
/// queue's head stays where it was; no slot is taken, no record lands in a buffer.
#[test]
fn an_empty_free_queue_is_never_claimed_from() {
    let _bound = ferry_watchdog::bound("the device writer's pop gate");
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let clock = HostClock::new(1, 2_000);
    let (t, host) = region(&c, clock.clone());
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    assert_eq!(host.free_head(0), 1, "the writer claimed the lane's one buffer");
    write(&mut w, 0, 0..4);
    let s = w.stats()[0];
    assert_eq!((s.switches, s.stall_waits, s.gate_timeouts), (1, 1, 1), "{s:?}");
    assert_eq!((host.free_head(0), s.bad_slots), (1, 0), "no slot of the empty queue taken");
    assert!(!w.has_buffer(0));
    assert_eq!(host.lane_u32(0, GATE_STATE), GATE_NONE, "the gate is left");
}

/// Step 1 of the deadlock-freedom chain: a full buffer is published on the ready queue before
/// a replacement is claimed, so a host that refills a lane only from the buffers it sees
/// published (a one-buffer pool) always can. The host recycles at every read of the clock: each
/// of the three switches finds its buffer back at the pop gate, none gives up, nothing drops.
#[test]
fn a_full_buffer_is_published_before_its_replacement_is_claimed() {
    let _bound = ferry_watchdog::bound("the device writer's gates");
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 200;
    let clock = HostClock::new(1, 2_000);
    let (t, host) = region(&c, clock.clone());
    let collected = Arc::new(Mutex::new(Vec::new()));
    let (h, got) = (host.clone(), collected.clone());
    // What the host saw each time the lane waited at its pop gate: whether its full buffer
    // was on the ready queue.
    let waits = Arc::new(Mutex::new(Vec::new()));
    let seen = waits.clone();
    clock.on_read(move |_| {
        if h.lane_u32(0, GATE_STATE) == GATE_POP {
            seen.lock().unwrap().push(h.ready_tail(0));
        }
        got.lock().unwrap().extend(h.recycle(0));
    });
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    write(&mut w, 0, 0..12);
    let s = w.stats()[0];
    assert_eq!((s.switches, s.gate_timeouts, s.dropped), (3, 0, 0), "{s:?}");
    assert_eq!(s.stall_waits, 3, "each switch waited at its pop gate");
    let got = collected.lock().unwrap();
    let seqs: Vec<(u32, u32)> = got.iter().map(|e| (e.seq, e.count)).collect();
    assert_eq!(seqs, [(0, 4), (1, 4), (2, 4)]);
    let waits = waits.lock().unwrap();
    assert!(!waits.is_empty() && waits.iter().all(|&t| t != 0), "published first: {waits:?}");
}

/// Under Block a gate's budget is the arch's `dfx_backpressure_budget_cycles`, 30 seconds of
/// its device clock, on both arches: a pop gate that never sees a buffer waits exactly that
/// long (to one step of a clock that advances a fiftieth of it per read), then gives up and
/// says so: a timeout in the writer's counters and in the lane's words the host reads.
#[test]
fn a_block_gate_waits_the_arch_budget_then_gives_up_and_says_so() {
    let _bound = ferry_watchdog::bound("the device writer's pop gate");
    let arches: [&ArchProfile; 2] = [&A2A3, &A5];
    for arch in arches {
        let budget = arch.dfx_backpressure_budget_cycles;
        assert_eq!(budget, arch.clock_hz * 30);
        let c = DfxBuilder::new(arch)
            .ready_queues(1)
            .ready_depth(8)
            .records_per_buffer(4)
            .lane(0, 0, 1)
            .build::<[u64; 2]>()
            .unwrap();
        assert_eq!((c.policy, c.block_budget_cycles), (Policy::Block, budget));
        let step = budget / 50;
        let clock = HostClock::new(step, 2_000);
        let (t, host) = region(&c, clock.clone());
        let name = arch.name;
        assert_eq!(t.device_region().budget_cycles(), budget, "{name}: the Block budget");
        let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
        write(&mut w, 0, 0..4); // publishes the one buffer; the pop gate finds none
        assert!(!clock.ran_away(), "{name}");
        let s = w.stats()[0];
        assert_eq!((s.gate_timeouts, s.stall_waits), (1, 1), "{name}: {s:?}");
        let waited = s.max_stall_cycles;
        assert!((budget..budget + 2 * step).contains(&waited), "{name}: {waited}");
        assert!(!w.has_buffer(0));
        assert_eq!(host.lane_u32(0, TIMEOUTS), 1, "{name}: reported to the host");
        assert_eq!(host.lane_u32(0, GATE_STATE), GATE_NONE, "{name}");
    }
}

/// Under Drop a gate gives up after the Drop bound (`drop_wait_cycles`), not the Block
/// budget, and counts what it lost: here 7 cycles against the arch's 30 seconds, on a clock
/// that advances one cycle per read (a gate waiting the Block budget makes it run away).
#[test]
fn a_drop_gate_gives_up_after_the_drop_wait_and_counts_its_loss() {
    let _bound = ferry_watchdog::bound("the device writer's gates");
    let mut c = cfg(1, 1, 4, Policy::Drop, 2);
    c.drop_wait_cycles = 7;
    assert_eq!(c.block_budget_cycles, A2A3.dfx_backpressure_budget_cycles);
    let clock = HostClock::new(1, 2_000);
    let (t, host) = region(&c, clock.clone());
    assert_eq!(t.device_region().budget_cycles(), 7, "the Drop bound, not the Block budget");
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    write(&mut w, 0, 0..100);
    assert!(!clock.ran_away(), "a Drop gate waited {} reads", clock.reads());
    let s = w.stats()[0];
    assert!((7..=9).contains(&s.max_stall_cycles), "{s:?}");
    assert_eq!((s.produced, s.dropped, s.gate_timeouts), (100, 96, 1), "{s:?}");
    w.finish();
    assert_eq!(host.lane_u64(0, DROPPED), 96, "the loss is in the lane's words");
}

/// A lane that ran out of budget is degraded (its gates check once and do not wait) only
/// until one of its gates succeeds: once the host gave its buffer back and the lane claimed
/// it, the lane's next empty free queue is waited for with a whole budget again (a second
/// timeout, a second logged wait), rather than dropping at once for the rest of the run.
#[test]
fn a_lane_whose_gate_succeeds_again_waits_its_whole_budget_next_time() {
    let _bound = ferry_watchdog::bound("the device writer's gates");
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let clock = HostClock::new(1, 2_000);
    let (t, host) = region(&c, clock.clone());
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    write(&mut w, 0, 0..4); // publishes the one buffer; the pop gate gives up
    let s = w.stats()[0];
    assert_eq!((s.gate_timeouts, s.stall_waits), (1, 1));
    write(&mut w, 0, 4..5); // degraded: checks once, drops
    assert_eq!((w.stats()[0].stall_waits, w.stats()[0].dropped), (1, 1));
    assert_eq!(host.recycle(0).len(), 1, "the host gives the buffer back");
    write(&mut w, 0, 5..9); // claims it, fills it, publishes it: the pop gate waits again
    let s = w.stats()[0];
    assert_eq!((s.switches, s.dropped), (2, 1), "{s:?}");
    assert_eq!((s.gate_timeouts, s.stall_waits), (2, 2), "a whole budget again: {s:?}");
    assert!(s.stall_cycles >= 80, "{s:?}");
}

/// A gate's budget and its degraded state are its lane's own: lane 0 of a writer ran out of
/// budget, yet lane 1 of the same writer waits its whole budget at its own pop gate and gets
/// its buffer back when the host returns it. And while one writer waits at a gate, another
/// writer (another AICPU thread) publishes and claims as if nothing waited.
#[test]
fn one_lanes_expired_budget_does_not_stop_another_lane() {
    let _bound = ferry_watchdog::bound("the device writers' gates");
    // Lanes 0 and 1 on ready queue 0, lane 2 on ready queue 1; one buffer each, 3 for lane 2.
    let mut c = DfxBuilder::new(&A2A3)
        .ready_queues(2)
        .ready_depth(8)
        .records_per_buffer(4)
        .lane(0, 0, 1)
        .lane(0, 0, 1)
        .lane(1, 0, 3)
        .build::<[u64; 2]>()
        .unwrap();
    c.block_budget_cycles = 40;
    let clock = HostClock::new(1, 2_000);
    let (t, host) = region(&c, clock.clone());
    let d = t.device_region();
    let mut w = d.writer::<[u64; 2]>(0, &[0, 1]).unwrap();
    // The other thread's writer, on a clock of its own (the gate's reads run the host step).
    let other = d.with_clock(Arc::new(VirtualClock::new())).writer::<[u64; 2]>(1, &[2]).unwrap();
    write(&mut w, 0, 0..4); // lane 0: publishes its buffer, its pop gate gives up
    assert_eq!(w.stats()[0].gate_timeouts, 1);
    // Lane 1's pop gate: the host writes with the other thread at its first read, and gives
    // lane 1's buffer back at its tenth.
    let other = Arc::new(Mutex::new(Some(other)));
    let o = other.clone();
    let h = host.clone();
    clock.on_read(move |n| {
        if n == 1 {
            if let Some(o) = o.lock().unwrap().as_mut() {
                write(o, 0, 0..8);
            }
        }
        if n == 10 {
            while let Some(e) = h.pop_ready(0) {
                if e.lane == 1 {
                    h.push_free(1, e.buf);
                }
            }
        }
    });
    let start = clock.reads();
    write(&mut w, 1, 0..4);
    let [a, b] = w.stats()[..] else { panic!() };
    assert_eq!((a.gate_timeouts, a.stall_waits), (1, 1), "lane 0: {a:?}");
    assert_eq!((b.gate_timeouts, b.stall_waits, b.switches), (0, 1, 1), "lane 1: {b:?}");
    assert!(w.has_buffer(1) && !w.has_buffer(0));
    assert!(clock.reads() - start >= 10, "lane 1 waited for its buffer");
    write(&mut w, 1, 4..5);
    assert_eq!(w.stats()[1].dropped, 0);
    let o = other.lock().unwrap().take().unwrap().stats()[0];
    assert_eq!((o.switches, o.stall_waits, o.dropped), (2, 0, 0), "the other thread: {o:?}");
}

/// A push gate that gives up leaves the ready tail where it was, and the buffer it could not
/// publish stays the lane's: its records are counted dropped, the lane's next records overwrite
/// it from slot 0 (no other buffer is claimed), and it is the buffer published, with the next
/// sequence number, once the host has made room.
#[test]
fn a_push_gate_that_gives_up_leaves_the_tail_and_keeps_the_buffer() {
    let _bound = ferry_watchdog::bound("the device writer's gates");
    // Ready depth 2 (capacity 1), buffers A and B, nobody drains.
    let mut c = cfg(1, 2, 4, Policy::Block, 2);
    c.block_budget_cycles = 50;
    let clock = HostClock::new(1, 2_000);
    let (t, host) = region(&c, clock.clone());
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    write(&mut w, 0, 0..4); // A published; B claimed
    assert_eq!((host.ready_tail(0), host.free_head(0)), (1, 2));
    let b = host.lane_u64(0, CUR_PTR);
    write(&mut w, 0, 4..8); // B's push gate gives up
    let s = w.stats()[0];
    assert_eq!((s.switches, s.gate_timeouts, s.dropped), (1, 1, 4), "{s:?}");
    assert_eq!(host.ready_tail(0), 1, "the tail did not move");
    assert!(w.has_buffer(0), "B is still the lane's");
    assert_eq!(host.lane_u64(0, CUR_PTR), b, "and still named as its current buffer");
    // The host makes room; B, rewritten from slot 0, is published next.
    let a = host.pop_ready(0).unwrap();
    write(&mut w, 0, 8..12);
    assert_eq!(host.free_head(0), 2, "no buffer claimed in place of B");
    let e = host.pop_ready(0).expect("B published");
    assert_eq!((e.buf, e.seq, e.count), (b, 1, 4), "A was {a:?}");
    assert_eq!(host.records(b, 4), (8..12).map(|i| [0, i]).collect::<Vec<_>>());
    let s = w.stats()[0];
    assert_eq!((s.produced, s.dropped, s.switches), (12, 4, 2), "{s:?}");
}

/// A pop gate that gives up leaves the lane without a buffer: the buffer it just published is
/// the host's, and the lane's later records are dropped and counted, never written into it.
#[test]
fn a_lane_whose_pop_gate_gave_up_writes_into_no_buffer_the_host_owns() {
    let _bound = ferry_watchdog::bound("the device writer's gates");
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let clock = HostClock::new(1, 2_000);
    let (t, host) = region(&c, clock.clone());
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    write(&mut w, 0, 0..4); // the one buffer published; the pop gate gives up
    assert!(!w.has_buffer(0));
    assert_eq!(host.lane_u64(0, CUR_PTR), 0, "the lane names no current buffer");
    for i in 4..8 {
        w.record(0, [9, i]);
    }
    let s = w.stats()[0];
    assert_eq!((s.produced, s.dropped), (8, 4), "{s:?}");
    let e = host.pop_ready(0).expect("the published buffer");
    assert_eq!(e.count, 4);
    assert_eq!(host.records(e.buf, 4), (0..4).map(|i| [0, i]).collect::<Vec<_>>());
}

/// Publication and success are one step: no buffer handed to the host is also counted lost.
/// The lane's one buffer is published, then its pop gate gives up; the switch that gave up
/// drops nothing (the full buffer was the host's already), and the run reconciles with all
/// four records collected and none dropped.
#[test]
fn a_buffer_handed_to_the_host_is_never_counted_lost() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let clock = HostClock::new(1, 2_000);
    let (t, host) = region(&c, clock.clone());
    let mut w = t.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    write(&mut w, 0, 0..4);
    let s = w.finish()[0];
    assert_eq!((s.produced, s.dropped, s.switches, s.gate_timeouts), (4, 0, 1, 1), "{s:?}");
    assert_eq!(host.lane_u64(0, DROPPED), 0);
    let report = t.start(|_| |_b: &CollectedBuffer<'_, [u64; 2]>| {}).stop();
    assert!(report.is_reconciled(), "{:?}", report.lanes);
    assert_eq!(report.totals(), (4, 4, 0));
}
