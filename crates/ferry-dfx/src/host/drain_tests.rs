//! Unit tests of a drain shard's error paths, stepped by hand: a device memory that fails chosen
//! operations on demand, and the exact counters ([`DrainStats`]) each path leaves.
use std::sync::Mutex;

use ferry_abi::arch::A2A3;
use ferry_abi::dfx::DfxLayout;

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
struct FaultyMemory {
    inner: Arc<dyn DeviceMemory>,
    faults: Mutex<Vec<Fault>>,
}

impl FaultyMemory {
    fn new(inner: Arc<dyn DeviceMemory>) -> Self {
        Self { inner, faults: Mutex::new(Vec::new()) }
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
        self.inner.read_range_from_device(off, len)
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

    /// The buffer the published entry `i` of ready queue `q` names.
    fn buffer_of_entry(&self, q: u32, i: u32) -> u32 {
        // Relaxed: the test is the only thread running.
        let ptr =
            self.mem.device_view().load_u64(self.layout.entry_offset(q, i) + 8, Ordering::Relaxed);
        self.layout.buffer_index_at((ptr - ADDR) as usize).expect("a buffer's address")
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
