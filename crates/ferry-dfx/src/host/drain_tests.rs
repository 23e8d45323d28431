//! Unit tests of a drain shard's error paths and retry list, stepped by hand: a device memory
//! that fails chosen operations on demand, forged or corrupt ready-queue words, and the exact
//! counters ([`DrainStats`]) each path leaves.
use std::sync::Mutex;

use ferry_abi::arch::A2A3;
use ferry_abi::dfx::{self, DfxLayout, ReadyEntry};

use super::*;
use crate::clock::VirtualClock;
use crate::config::DfxConfig;
use crate::device::DeviceRegion;
use crate::mem::{DeviceMemory, MemError, MirroredMemory, ShmRegion, SvmMemory};
use crate::sync::atomic::Ordering;
use crate::sync::Arc;
use crate::{DfxBuilder, Policy};

/// Which kind of memory operation a [`FaultyMemory`] fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// `read_range_from_device` and `read_owned_from_device`.
    Read,
    /// `write_range_to_device`.
    Write,
}

#[derive(Debug)]
struct Fault {
    op: Op,
    off: usize,
    len: usize,
    left: u32,
}

/// A device memory that fails chosen operations on demand, deterministically:
/// [`fail_next`](Self::fail_next) makes the next `n` operations of one kind that overlap a byte
/// range fail with [`MemError::Failed`] (copying nothing); every other call goes to the wrapped
/// memory unchanged.
///
/// It also plays a device that claims a buffer right after a host read:
/// [`claim_after_next_read`](Self::claim_after_next_read).
struct FaultyMemory {
    inner: Arc<dyn DeviceMemory>,
    faults: Mutex<Vec<Fault>>,
    claims: Mutex<Vec<usize>>,
}

impl FaultyMemory {
    fn new(inner: Arc<dyn DeviceMemory>) -> Self {
        Self { inner, faults: Mutex::new(Vec::new()), claims: Mutex::new(Vec::new()) }
    }

    /// Right after the next host read that covers the free-queue head word at `head_off`, the
    /// device claims a buffer: the word advances by one in the device's memory (the host's copy
    /// keeps what it just read).
    fn claim_after_next_read(&self, head_off: usize) {
        self.claims.lock().unwrap().push(head_off);
    }

    fn claim_if_armed(&self, off: usize, len: usize) {
        let mut claims = self.claims.lock().unwrap();
        if let Some(i) = claims.iter().position(|&h| off <= h && h + 4 <= off + len) {
            let h = claims.remove(i);
            let d = self.inner.device_view();
            // Release: as the device's claim publishes its new head.
            d.store_u32(h, d.load_u32(h, Ordering::Relaxed) + 1, Ordering::Release);
        }
    }

    /// Fails the next `n` operations `op` that overlap `[off, off + len)`.
    fn fail_next(&self, op: Op, off: usize, len: usize, n: u32) {
        self.faults.lock().unwrap().push(Fault { op, off, len, left: n });
    }

    /// Failures armed and not taken yet.
    fn armed(&self) -> u32 {
        self.faults.lock().unwrap().iter().map(|f| f.left).sum()
    }

    fn check(&self, op: Op, off: usize, len: usize) -> Result<(), MemError> {
        let mut faults = self.faults.lock().unwrap();
        let hit = faults
            .iter_mut()
            .find(|f| f.op == op && f.left > 0 && off < f.off + f.len && f.off < off + len);
        match hit {
            Some(f) => {
                f.left -= 1;
                Err(MemError::Failed)
            }
            None => Ok(()),
        }
    }
}

impl DeviceMemory for FaultyMemory {
    fn device_view(&self) -> ShmRegion {
        self.inner.device_view()
    }
    fn host_view(&self) -> ShmRegion {
        self.inner.host_view()
    }
    fn device_addr(&self) -> u64 {
        self.inner.device_addr()
    }
    fn is_svm(&self) -> bool {
        self.inner.is_svm()
    }
    fn write_range_to_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        self.check(Op::Write, off, len)?;
        self.inner.write_range_to_device(off, len)
    }
    fn read_range_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        self.check(Op::Read, off, len)?;
        self.inner.read_range_from_device(off, len)?;
        self.claim_if_armed(off, len);
        Ok(())
    }
    unsafe fn read_owned_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        self.check(Op::Read, off, len)?;
        // SAFETY: the caller's guarantee is passed on unchanged.
        unsafe { self.inner.read_owned_from_device(off, len) }
    }
}

/// What a collector handed its sink: lane, kind, sequence number and records.
type Got = (u32, u32, u32, Vec<u64>);

struct Seen(Arc<Mutex<Vec<Got>>>);

impl crate::CollectSink<u64> for Seen {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, u64>) {
        self.0.lock().unwrap().push((b.lane, b.kind, b.seq, b.records.to_vec()));
    }
}

/// One region over a [`FaultyMemory`] (SVM or mirrored), its host pieces unthreaded.
struct Rig {
    mem: Arc<FaultyMemory>,
    layout: DfxLayout,
    device: DeviceRegion,
    parts: Parts<u64, Seen>,
    seen: Arc<Mutex<Vec<Got>>>,
}

const ADDR: u64 = 0x6000_0000;

impl Rig {
    fn new(cfg: &DfxConfig, svm: bool) -> Self {
        let inner: Arc<dyn DeviceMemory> = if svm {
            Arc::new(SvmMemory::new(cfg.region_size(), ADDR))
        } else {
            Arc::new(MirroredMemory::new(cfg.region_size(), ADDR))
        };
        let mem = Arc::new(FaultyMemory::new(inner));
        let t =
            DfxTransport::<u64>::new(cfg.clone(), mem.clone(), Arc::new(VirtualClock::ticking(1)))
                .unwrap();
        let device = t.device_region();
        let seen: Arc<Mutex<Vec<Got>>> = Default::default();
        let s = seen.clone();
        let parts = t.into_parts(move |_| Seen(s.clone()));
        Self { mem, layout: cfg.layout(), device, parts, seen }
    }

    fn drain(&self) -> &super::drain::RegionDrain {
        &self.parts.engine.drains[0].regions[0]
    }

    fn stats(&self) -> DrainStats {
        self.drain().stats
    }

    fn sweep(&mut self) -> bool {
        self.parts.engine.drains[0].sweep()
    }

    /// Collects every hand-off, then one replenish tick; returns the buffers it routed.
    fn collect_and_tick(&mut self) -> u64 {
        self.parts.engine.collectors[0].drain_all();
        self.parts.engine.replenisher.tick()
    }

    fn seen(&self) -> Vec<Got> {
        self.seen.lock().unwrap().clone()
    }

    /// A word of the device's memory (the device view).
    fn device_u32(&self, off: usize) -> u32 {
        // Relaxed: the test is the only thread running.
        self.mem.device_view().load_u32(off, Ordering::Relaxed)
    }

    fn set_device_u32(&self, off: usize, v: u32) {
        // Release: as the device publishes a ready-queue tail.
        self.mem.device_view().store_u32(off, v, Ordering::Release);
    }

    /// The buffer the published entry `i` of ready queue `q` names.
    fn buffer_of_entry(&self, q: u32, i: u32) -> u32 {
        // Relaxed: the test is the only thread running.
        let ptr =
            self.mem.device_view().load_u64(self.layout.entry_offset(q, i) + 8, Ordering::Relaxed);
        self.layout.buffer_index_at((ptr - ADDR) as usize).expect("a buffer's address")
    }

    /// Publishes `e` at the tail of ready queue `q`, as a device thread would (entry, then tail).
    fn forge(&self, q: u32, e: ReadyEntry) {
        let l = &self.layout;
        let d = self.mem.device_view();
        let tail = self.device_u32(l.tail_offset(q));
        let off = l.entry_offset(q, tail);
        // Relaxed: published by the tail's Release store below.
        let r = Ordering::Relaxed;
        d.store_u32(off, e.index, r);
        d.store_u32(off + 4, e.kind, r);
        d.store_u64(off + 8, e.buffer_ptr, r);
        d.store_u32(off + 16, e.buffer_seq, r);
        self.set_device_u32(l.tail_offset(q), dfx::rq_next(tail, l.ready_depth));
    }
}

/// One ready queue, one two-buffer lane (both buffers in its free queue, none recycled), the
/// writer giving up at once when it finds no buffer (the host is stepped by hand).
fn one_lane() -> DfxConfig {
    DfxBuilder::new(&A2A3)
        .ready_queues(1)
        .lane(0, 0, 2)
        .records_per_buffer(2)
        .policy(Policy::Drop)
        .drop_wait_cycles(2)
        .build::<u64>()
        .unwrap()
}

/// Two ready queues on one shard: lane 0 (kind 0) on queue 0, lane 1 (kind 1) on queue 1, two
/// buffers each filling their free queues, and one buffer in the host reserve that the device
/// is never given.
fn two_lanes() -> DfxConfig {
    DfxBuilder::new(&A2A3)
        .ready_queues(2)
        .shards(1)
        .lane(0, 0, 2)
        .lane(1, 1, 2)
        .free_slots(2)
        .reserve_buffers(1)
        .records_per_buffer(2)
        .policy(Policy::Drop)
        .drop_wait_cycles(2)
        .build::<u64>()
        .unwrap()
}

/// The double fails exactly the operations armed, of the kind armed, overlapping the range
/// armed, as many times as armed, and passes everything else through.
#[test]
fn faulty_memory_fails_only_the_armed_operations_in_range() {
    let _bound = ferry_watchdog::bound("the test thread");
    let m = FaultyMemory::new(Arc::new(MirroredMemory::new(256, 0x1000)));
    m.fail_next(Op::Read, 64, 8, 2);
    m.fail_next(Op::Write, 128, 4, 1);
    assert_eq!(m.armed(), 3);
    assert_eq!(m.read_range_from_device(56, 8), Ok(()), "ends where the range starts");
    assert_eq!(m.read_range_from_device(72, 4), Ok(()), "starts where the range ends");
    assert_eq!(m.write_range_to_device(64, 8), Ok(()), "another kind");
    assert_eq!(m.read_range_from_device(68, 8), Err(MemError::Failed));
    assert_eq!(m.read_range_from_device(0, 256), Err(MemError::Failed));
    assert_eq!(m.read_range_from_device(64, 4), Ok(()), "two reads failed, as armed");
    m.device_view().store_u32(128, 7, Ordering::Relaxed);
    // SAFETY: no other thread exists, so nothing writes the range during the call.
    assert_eq!(unsafe { m.read_owned_from_device(128, 4) }, Ok(()));
    assert_eq!(m.host_view().load_u32(128, Ordering::Relaxed), 7);
    m.host_view().store_u32(128, 9, Ordering::Relaxed);
    assert_eq!(m.write_range_to_device(124, 8), Err(MemError::Failed));
    assert_eq!(m.device_view().load_u32(128, Ordering::Relaxed), 7, "a failed copy copies nothing");
    assert_eq!(m.write_range_to_device(128, 4), Ok(()));
    assert_eq!(m.device_view().load_u32(128, Ordering::Relaxed), 9);
    assert_eq!(m.armed(), 0);
}

/// A failed device access on the pop path (the refresh of the queue's tail, the read of the
/// entry, the write-back of the new head) pops nothing and counts exactly one memory error;
/// the device's head word stays where it was, and the next sweep pops the entry once.
#[test]
fn a_failed_access_on_the_pop_path_counts_one_memory_error_and_the_entry_pops_once() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = one_lane();
    let l = cfg.layout();
    let sites = [
        ("the tail refresh", Op::Read, l.tail_offset(0), 4),
        ("the entry read", Op::Read, l.entry_offset(0, 0), 32),
        ("the head write-back", Op::Write, l.head_offset(0), 4),
    ];
    for svm in [true, false] {
        for (site, op, off, len) in sites {
            let what = format!("{site} (svm {svm})");
            let mut r = Rig::new(&cfg, svm);
            let mut w = r.device.writer::<u64>(0, &[0]).unwrap();
            w.record(0, 1);
            w.record(0, 2); // publishes the first buffer; the lane takes its second
            assert!(w.has_buffer(0), "{what}");
            r.mem.fail_next(op, off, len, 1);
            assert!(!r.sweep(), "{what}: nothing popped");
            assert_eq!(r.mem.armed(), 0, "{what}: the failure was hit");
            assert_eq!(r.stats(), DrainStats { mem_errors: 1, ..DrainStats::default() }, "{what}");
            assert_eq!(r.device_u32(l.head_offset(0)), 0, "{what}: the head did not move");
            // The lane's top-up after the pop finds nothing recycled: it is listed once.
            let popped =
                DrainStats { entries: 1, short_sites: 1, mem_errors: 1, ..DrainStats::default() };
            assert!(r.sweep(), "{what}");
            assert_eq!(r.stats(), popped, "{what}");
            assert_eq!(r.device_u32(l.head_offset(0)), 1, "{what}");
            assert!(!r.sweep(), "{what}: popped once");
            assert_eq!(r.stats(), popped, "{what}: a sweep that fails nothing counts nothing");
            r.collect_and_tick();
            assert_eq!(r.seen(), [(0, 0, 0, vec![1, 2])], "{what}");
        }
    }
}

/// A buffer whose count cannot be read is handed on empty (count 0, so the collector reads none
/// of its records), with exactly one memory error counted.
#[test]
fn a_failed_count_read_counts_one_memory_error_and_hands_the_buffer_on_empty() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = one_lane();
    let l = cfg.layout();
    for svm in [true, false] {
        let mut r = Rig::new(&cfg, svm);
        let mut w = r.device.writer::<u64>(0, &[0]).unwrap();
        w.record(0, 1);
        w.record(0, 2);
        let b = r.buffer_of_entry(0, 0);
        r.mem.fail_next(Op::Read, l.buffer_offset(b) + l.count_offset(), 4, 1);
        assert!(r.sweep(), "svm {svm}");
        assert_eq!(r.mem.armed(), 0, "svm {svm}: the drain's count read failed");
        let want =
            DrainStats { entries: 1, short_sites: 1, mem_errors: 1, ..DrainStats::default() };
        assert_eq!(r.stats(), want, "svm {svm}");
        r.collect_and_tick();
        assert_eq!(r.seen(), [(0, 0, 0, vec![])], "svm {svm}");
        assert_eq!(r.stats(), want, "svm {svm}: the collector's read did not fail");
    }
}

/// Forged ready entries (a lane out of range, a lane that publishes on another queue, a kind not
/// the lane's, an address that is no buffer's start) are popped, counted invalid exactly once
/// and handed to no collector; they name a reserve buffer the device was never given (or none),
/// so nothing is retired, and the real entries around them (lane 1's of kind 1 among them) are
/// collected once each.
#[test]
fn forged_ready_entries_are_counted_invalid_once_and_handed_on_never() {
    let _bound = ferry_watchdog::bound("the stepped writers' gates on the virtual clock");
    let cfg = two_lanes();
    let l = cfg.layout();
    let reserve = ADDR + l.buffer_offset(4) as u64;
    let entry =
        |index, kind, buffer_ptr| ReadyEntry { index, kind, buffer_ptr, ..ReadyEntry::default() };
    let forged = [
        ("a lane out of range", 0, entry(9, 0, reserve)),
        ("the lane of another queue", 1, entry(0, 0, reserve)),
        ("a kind not the lane's", 0, entry(0, 1, reserve)),
        ("an address inside a buffer", 0, entry(0, 0, reserve + 8)),
    ];
    for svm in [true, false] {
        for (what, q, e) in forged {
            let what = format!("{what} (svm {svm})");
            let mut r = Rig::new(&cfg, svm);
            let mut w0 = r.device.writer::<u64>(0, &[0]).unwrap();
            let mut w1 = r.device.writer::<u64>(1, &[1]).unwrap();
            w0.record(0, 1);
            w0.record(0, 2);
            w1.record(0, 10);
            w1.record(0, 11);
            r.forge(q, e);
            assert!(r.sweep(), "{what}");
            // Each real entry's lane finds nothing recycled for its top-up: listed once each.
            let want = DrainStats {
                entries: 3,
                invalid_entries: 1,
                short_sites: 2,
                ..DrainStats::default()
            };
            assert_eq!(r.stats(), want, "{what}");
            assert!(r.drain().retired.is_empty(), "{what}");
            assert_eq!(r.collect_and_tick(), 2, "{what}: the two real buffers come back");
            assert_eq!(r.seen(), [(0, 0, 0, vec![1, 2]), (1, 1, 0, vec![10, 11])], "{what}");
            // The next sweep pops nothing again; its retry gives each lane its buffer back.
            assert!(!r.sweep(), "{what}");
            let want = DrainStats { free_pushes: 2, retries_refilled: 2, ..want };
            assert_eq!(r.stats(), want, "{what}: counted once");
        }
    }
}

/// Corrupt words of a ready queue: a tail outside the queue is counted invalid once per look
/// and leaves the queue alone (the other queue is served meanwhile); once repaired, an entry of
/// a kind not its lane's is counted invalid and its buffer, which the device held, is retired
/// rather than handed on.
#[test]
fn corrupt_ready_queue_words_are_counted_invalid_and_keep_their_buffers_out() {
    let _bound = ferry_watchdog::bound("the stepped writers' gates on the virtual clock");
    let cfg = two_lanes();
    let l = cfg.layout();
    for svm in [true, false] {
        let mut r = Rig::new(&cfg, svm);
        let mut w0 = r.device.writer::<u64>(0, &[0]).unwrap();
        let mut w1 = r.device.writer::<u64>(1, &[1]).unwrap();
        w0.record(0, 1);
        w0.record(0, 2);
        w1.record(0, 10);
        w1.record(0, 11);
        let b0 = r.buffer_of_entry(0, 0);
        r.set_device_u32(l.tail_offset(0), l.ready_depth);
        assert!(r.sweep(), "svm {svm}: queue 1 is served");
        let want =
            DrainStats { entries: 1, invalid_entries: 1, short_sites: 1, ..DrainStats::default() };
        assert_eq!(r.stats(), want, "svm {svm}");
        assert_eq!(r.device_u32(l.head_offset(0)), 0, "svm {svm}");
        // Repaired tail, corrupt kind.
        r.set_device_u32(l.entry_offset(0, 0) + 4, 1);
        r.set_device_u32(l.tail_offset(0), 1);
        assert!(r.sweep(), "svm {svm}");
        let want = DrainStats { entries: 2, invalid_entries: 2, ..want };
        assert_eq!(r.stats(), want, "svm {svm}");
        assert_eq!(r.drain().retired, [b0], "svm {svm}");
        r.collect_and_tick();
        assert_eq!(r.seen(), [(1, 1, 0, vec![10, 11])], "svm {svm}");
    }
}

/// A starved lane's retries, stepped one failure at a time, each counted exactly: the top-up
/// after the pop cannot read the free queue's head (listed, one memory error); a retry that
/// cannot read it either, and one whose push fails (the buffer retired), refill nothing and
/// keep the lane listed; a retry that pushes a buffer counts one refill and one push. The lane
/// then records into that buffer, and every record is collected once.
#[test]
fn a_starved_lanes_retries_count_exactly_what_they_refill_and_every_failure() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = one_lane();
    let l = cfg.layout();
    for svm in [true, false] {
        let mut r = Rig::new(&cfg, svm);
        let stats = |entries, short_sites, free_pushes, retries_refilled, mem_errors| DrainStats {
            entries,
            short_sites,
            free_pushes,
            retries_refilled,
            mem_errors,
            ..DrainStats::default()
        };
        let mut w = r.device.writer::<u64>(0, &[0]).unwrap();
        w.record(0, 1);
        w.record(0, 2);
        let b0 = r.buffer_of_entry(0, 0);
        r.mem.fail_next(Op::Read, l.free_head_offset(0), 4, 1);
        assert!(r.sweep(), "svm {svm}");
        assert_eq!(r.stats(), stats(1, 1, 0, 0, 1), "svm {svm}: the top-up failed");
        assert_eq!(r.parts.retry_list(0), &[0], "svm {svm}");
        assert_eq!(r.collect_and_tick(), 1, "svm {svm}: the buffer is recycled");
        // A retry with a recycled buffer that cannot read the head.
        r.mem.fail_next(Op::Read, l.free_head_offset(0), 4, 1);
        assert!(!r.sweep(), "svm {svm}");
        assert_eq!(r.mem.armed(), 0, "svm {svm}");
        assert_eq!(r.stats(), stats(1, 1, 0, 0, 2), "svm {svm}: no refill");
        assert_eq!(r.parts.retry_list(0), &[0], "svm {svm}");
        // A retry whose push fails at the tail write: the buffer is retired.
        r.mem.fail_next(Op::Write, l.free_tail_offset(0), 4, 1);
        assert!(!r.sweep(), "svm {svm}");
        assert_eq!(r.mem.armed(), 0, "svm {svm}");
        assert_eq!(r.stats(), stats(1, 1, 0, 0, 3), "svm {svm}: no refill");
        assert_eq!(r.drain().retired, [b0], "svm {svm}");
        assert_eq!(r.parts.retry_list(0), &[0], "svm {svm}");
        assert_eq!(r.parts.free_len(0), 0, "svm {svm}: the tail was rolled back");
        // The lane's second buffer: published, popped (the lane is listed already, nothing is
        // recycled), recycled, then a retry refills the lane with it.
        w.record(0, 3);
        w.record(0, 4);
        assert!(!w.has_buffer(0), "svm {svm}");
        assert!(r.sweep(), "svm {svm}");
        assert_eq!(r.stats(), stats(2, 2, 0, 0, 3), "svm {svm}");
        assert_eq!(r.collect_and_tick(), 1, "svm {svm}");
        assert!(!r.sweep(), "svm {svm}");
        assert_eq!(r.stats(), stats(2, 2, 1, 1, 3), "svm {svm}: one refill of one buffer");
        assert_eq!(r.parts.free_len(0), 1, "svm {svm}");
        // Still short of its two-buffer quota (one retired): listed at the back.
        assert_eq!(r.parts.retry_list(0), &[0], "svm {svm}");
        w.record(0, 5);
        w.record(0, 6);
        assert!(r.sweep(), "svm {svm}");
        assert_eq!(r.stats(), stats(3, 3, 1, 1, 3), "svm {svm}");
        r.collect_and_tick();
        let seen = [(0, 0, 0, vec![1, 2]), (0, 0, 1, vec![3, 4]), (0, 0, 2, vec![5, 6])];
        assert_eq!(r.seen(), seen, "svm {svm}");
        let lane = w.finish()[0];
        assert_eq!((lane.produced, lane.dropped), (6, 0), "svm {svm}");
        let report = r.parts.report();
        assert_eq!(report.retired_buffers, 1, "svm {svm}");
        assert!(report.is_reconciled(), "svm {svm}: {:?}", report.lanes);
    }
}

/// One ready queue, one two-buffer lane whose free queue has two slots: both buffers fill it,
/// so a host that counted from a stale head would take the queue for full.
fn two_slot_lane() -> DfxConfig {
    DfxBuilder::new(&A2A3)
        .ready_queues(1)
        .lane(0, 0, 2)
        .free_slots(2)
        .records_per_buffer(2)
        .policy(Policy::Drop)
        .drop_wait_cycles(2)
        .build::<u64>()
        .unwrap()
}

/// On a non-SVM device the host reads each device-written word through a range read before it
/// uses it: the free queue's head, which the device advanced by claiming both its buffers
/// (while the host's copy still says 0), is read before the top-up, so the lane is seen short
/// and listed rather than full, and the retry pushes its buffer behind the device's head, where
/// the lane's next switch finds it.
#[test]
fn the_host_reads_the_device_written_head_before_it_tops_a_lane_up() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = two_slot_lane();
    let l = cfg.layout();
    let mut r = Rig::new(&cfg, false);
    let mut w = r.device.writer::<u64>(0, &[0]).unwrap();
    w.record(0, 1);
    w.record(0, 2); // publishes the first buffer and claims the second: the device's head is 2
    assert_eq!(r.device_u32(l.free_head_offset(0)), 2);
    assert!(r.sweep());
    assert_eq!(r.parts.retry_list(0), &[0], "the lane is short, not full");
    assert_eq!(r.collect_and_tick(), 1);
    assert!(!r.sweep());
    assert_eq!(r.device_u32(l.free_tail_offset(0)), 3, "the retry pushed the buffer");
    w.record(0, 3);
    w.record(0, 4);
    assert!(w.has_buffer(0), "the lane's switch found it");
    assert!(r.sweep());
    r.collect_and_tick();
    assert_eq!(r.seen(), [(0, 0, 0, vec![1, 2]), (0, 0, 1, vec![3, 4])]);
}

/// On a non-SVM device a push writes only the words the host owns (the slot, then the tail),
/// each in a narrow range write, and never the device-owned head beside the tail: a device
/// that claims a buffer between the host's read of the head and its push keeps its claim (the
/// head it wrote is not rolled back to the host's copy).
#[test]
fn a_host_push_never_rolls_back_the_head_the_device_wrote() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    // Five buffers: four fill the free queue, one is recycled.
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(1)
        .lane(0, 0, 5)
        .records_per_buffer(2)
        .policy(Policy::Drop)
        .drop_wait_cycles(2)
        .build::<u64>()
        .unwrap();
    let l = cfg.layout();
    let mut r = Rig::new(&cfg, false);
    let mut w = r.device.writer::<u64>(0, &[0]).unwrap();
    w.record(0, 1);
    w.record(0, 2); // publishes the first buffer and claims the second: head 2, tail 4
    let head = l.free_head_offset(0);
    assert_eq!((r.device_u32(head), r.device_u32(l.free_tail_offset(0))), (2, 4));
    r.mem.claim_after_next_read(head);
    assert!(r.sweep());
    assert_eq!(r.stats().free_pushes, 1, "the recycled buffer was pushed");
    assert_eq!(r.device_u32(l.free_tail_offset(0)), 5);
    assert_eq!(r.device_u32(head), 3, "the device's claim was rolled back");
    drop(w);
}

/// An invalid entry's buffer is retired once and never handed on: after an entry of a wrong
/// kind retired the buffer the device held, a later entry naming that buffer again, valid or
/// not, finds it the host's: a valid one counts as a duplicate and reaches no collector, an
/// invalid one counts invalid, and neither retires it a second time.
#[test]
fn an_invalid_entrys_buffer_is_retired_once_and_never_handed_on() {
    let _bound = ferry_watchdog::bound("the stepped writer's gates on the virtual clock");
    let cfg = two_lanes();
    let l = cfg.layout();
    let mut r = Rig::new(&cfg, true);
    let mut w = r.device.writer::<u64>(0, &[0]).unwrap();
    w.record(0, 1);
    w.record(0, 2);
    let b0 = r.buffer_of_entry(0, 0);
    r.set_device_u32(l.entry_offset(0, 0) + 4, 1); // a kind not the lane's
    assert!(r.sweep());
    let want = DrainStats { entries: 1, invalid_entries: 1, ..DrainStats::default() };
    assert_eq!(r.stats(), want);
    assert_eq!(r.drain().retired, [b0]);
    let ptr = ADDR + l.buffer_offset(b0) as u64;
    let entry = |kind| ReadyEntry { index: 0, kind, buffer_ptr: ptr, ..ReadyEntry::default() };
    r.forge(0, entry(0));
    assert!(r.sweep());
    let want = DrainStats { entries: 2, duplicate_entries: 1, ..want };
    assert_eq!(r.stats(), want, "a valid entry naming the retired buffer is a duplicate");
    r.forge(0, entry(1));
    assert!(r.sweep());
    let want = DrainStats { entries: 3, invalid_entries: 2, ..want };
    assert_eq!(r.stats(), want);
    assert_eq!(r.drain().retired, [b0], "retired once");
    r.collect_and_tick();
    assert_eq!(r.seen(), [], "handed on never");
    drop(w);
}
