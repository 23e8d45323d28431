//! Device-engine and host-rule tests through the public API.
#![cfg(not(ferry_loom))]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::{cfg, svm};
use ferry_abi::arch::{A2A3, A5};
use ferry_abi::dfx::{BufferCountPlacement, GATE_NONE};
use ferry_dfx::clock::VirtualClock;
use ferry_dfx::mem::{DeviceMemory, MemOpKind, MirroredMemory, SpyMemory, SvmMemory};
use ferry_dfx::{
    BuildError, CollectedBuffer, DeviceRegion, DfxBuilder, DfxTransport, LaneStats, Policy,
    ReplenishHooks,
};

/// One writer thread per lane `q < lanes` (lane `q` on ready queue `q`) writes records
/// `[q, 0..n]` and finishes; returns each writer's lane stats, by lane.
fn write_lanes(device: &DeviceRegion, lanes: u32, n: u64) -> Vec<LaneStats> {
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..lanes)
            .map(|q| {
                s.spawn(move || {
                    let mut w = device.writer::<[u64; 2]>(q, &[q]).unwrap();
                    for i in 0..n {
                        w.record(0, [q as u64, i]);
                    }
                    w.finish()[0]
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    })
}

#[test]
fn writers_claim_queues_and_lanes_exclusively() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    let c = cfg(2, 1, 4, Policy::Block, 4);
    let t =
        DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::new())).unwrap();
    let d = t.device_region();
    let w = d.writer::<[u64; 2]>(0, &[0]).unwrap();
    assert_eq!(d.writer::<[u64; 2]>(0, &[0]).unwrap_err(), BuildError::AlreadyClaimed);
    assert_eq!(d.writer::<[u64; 2]>(1, &[0]).unwrap_err(), BuildError::ForeignLane { lane: 0 });
    assert_eq!(d.writer::<u64>(1, &[1]).unwrap_err(), BuildError::RecordType);
    drop(w);
    assert!(d.writer::<[u64; 2]>(0, &[0]).is_ok(), "dropping a writer releases its claims");
}

#[test]
fn attach_rejects_a_foreign_region() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    let r = ferry_dfx::mem::ShmRegion::zeroed(4096);
    let e = ferry_dfx::DeviceRegion::attach(r, 0, Arc::new(VirtualClock::new())).unwrap_err();
    assert_eq!(e, BuildError::BadHeader);
    // A view shorter than the header itself is refused before it is read.
    let r = ferry_dfx::mem::ShmRegion::zeroed(32);
    let e = ferry_dfx::DeviceRegion::attach(r, 0, Arc::new(VirtualClock::new())).unwrap_err();
    assert_eq!(e, BuildError::RegionTooSmall { need: 64, have: 32 });
    assert_eq!(ferry_dfx::device::GateTimeout.to_string(), "gate wait ran out of budget");
}

/// A view holding a valid header attaches when it is at least as long as the layout the
/// header names, and is refused, naming both lengths, when it is shorter (the bare header
/// included).
#[test]
fn attach_needs_the_whole_layout_the_header_names() {
    let _bound = ferry_watchdog::bound("the DFX device region");
    let c = cfg(1, 2, 4, Policy::Block, 4);
    let mem = svm(&c);
    let _t = DfxTransport::<[u64; 2]>::new(c.clone(), mem.clone(), Arc::new(VirtualClock::new()))
        .unwrap();
    let src = mem.device_view();
    let with_header = |len: usize| {
        let r = ferry_dfx::mem::ShmRegion::zeroed(len);
        for o in (0..64).step_by(8) {
            r.store_u64(o, src.load_u64(o, Ordering::Relaxed), Ordering::Relaxed);
        }
        r
    };
    let attach = |len: usize| {
        ferry_dfx::DeviceRegion::attach(with_header(len), 0x1000, Arc::new(VirtualClock::new()))
    };
    let need = c.layout().region_size();
    assert!(attach(need).is_ok());
    for have in [need - 8, 64] {
        assert_eq!(attach(have).unwrap_err(), BuildError::RegionTooSmall { need, have });
    }
}

#[derive(Default)]
struct AckProbe {
    calls: Arc<AtomicU64>,
    threads: Arc<Mutex<Vec<String>>>,
}

impl ReplenishHooks for AckProbe {
    fn publish_arena_acks(&mut self) {
        if self.calls.fetch_add(1, Ordering::Relaxed) == 0 {
            let name = std::thread::current().name().unwrap_or("").to_owned();
            self.threads.lock().unwrap().push(name);
        }
    }
}

/// The replenish thread never touches device memory, checked by a spy on every memory
/// operation, on a run that recycles every buffer many times (one-buffer pools, non-SVM).
#[test]
fn replenish_thread_never_touches_device_memory() {
    let bound = ferry_watchdog::bound("the transport to start");
    let mut b = DfxBuilder::new(&A5);
    b.ready_queues(3).shards(2).records_per_buffer(8);
    for l in 0..3 {
        b.lane(l, 0, 1);
    }
    let c = b.build::<[u64; 2]>().unwrap();
    let spy = Arc::new(SpyMemory::new(MirroredMemory::new(c.region_size(), 0x7000_0000)));
    let t = DfxTransport::<[u64; 2]>::new(c, spy.clone(), Arc::new(VirtualClock::new())).unwrap();
    let device = t.device_region();
    let probe = AckProbe::default();
    let (calls, threads) = (probe.calls.clone(), probe.threads.clone());
    let host = t.start_with_hooks(|_| |_b: &CollectedBuffer<'_, [u64; 2]>| {}, probe);
    bound.waiting_for("three one-buffer lanes' writers to publish 400 records each");
    write_lanes(&device, 3, 400);
    bound.waiting_for("the transport to collect every buffer and stop");
    let report = host.stop();
    assert!(report.is_reconciled(), "{:?}", report.lanes);
    assert_eq!(report.totals(), (1200, 1200, 0));
    assert!(report.replenish.routed >= 150 - 3, "{:?}", report.replenish);
    let ops = spy.ops();
    assert!(ops
        .iter()
        .any(|o| o.thread.starts_with("ferry-dfx-drain") && o.kind == MemOpKind::Write));
    let by_replenish: Vec<_> = ops.iter().filter(|o| o.thread == "ferry-dfx-replenish").collect();
    assert!(by_replenish.is_empty(), "replenish touched device memory: {by_replenish:?}");
    // Collectors only read host views; they make no device writes either.
    assert!(!ops
        .iter()
        .any(|o| o.thread.starts_with("ferry-dfx-collect") && o.kind == MemOpKind::Write));
    assert!(calls.load(Ordering::Relaxed) > 0);
    assert_eq!(threads.lock().unwrap().as_slice(), ["ferry-dfx-replenish"]);
}

/// A collected buffer's sequence number and records.
type Seen = (u32, Vec<[u64; 2]>);

/// A lossless run with one-buffer pools on both arches: every record once, contiguous seqs.
#[test]
fn one_buffer_pools_are_lossless() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    // Both places of a buffer's count: after its records, and first in a padded line.
    let (after, first) = (BufferCountPlacement::AfterRecords, BufferCountPlacement::FirstPadded64);
    for (svm_arch, placement) in [(true, after), (false, after), (true, first), (false, first)] {
        let mut b = DfxBuilder::new(&A2A3);
        b.ready_queues(4).ready_depth(4).records_per_buffer(16).policy(Policy::Block);
        for l in 0..4 {
            b.lane(l, 0, 1);
        }
        let c = b.placement(placement).build::<[u64; 2]>().unwrap();
        let mem: Arc<dyn DeviceMemory> = if svm_arch {
            Arc::new(SvmMemory::new(c.region_size(), 0x10_0000_0000))
        } else {
            Arc::new(MirroredMemory::new(c.region_size(), 0x10_0000_0000))
        };
        let t = DfxTransport::<[u64; 2]>::new(
            c,
            mem,
            Arc::new(ferry_dfx::clock::SteadyClock::new(A2A3.clock_hz)),
        )
        .unwrap();
        let device = t.device_region();
        // Every collected buffer: its lane, sequence number and records.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let host = t.start(move |_| {
            let sink = sink.clone();
            move |b: &CollectedBuffer<'_, [u64; 2]>| {
                sink.lock().unwrap().push((b.lane, b.seq, b.records.to_vec()));
            }
        });
        for st in write_lanes(&device, 4, 1000) {
            assert_eq!(st.dropped, 0);
        }
        let report = host.stop();
        // Each lane's buffers in sequence order hold exactly its records, in order: the device
        // wrote them where the host reads them, whichever place the count has.
        let mut per_lane: BTreeMap<u32, Vec<Seen>> = BTreeMap::new();
        for (lane, seq, recs) in seen.lock().unwrap().drain(..) {
            per_lane.entry(lane).or_default().push((seq, recs));
        }
        assert_eq!(per_lane.len(), 4, "{placement:?}");
        for (lane, mut bufs) in per_lane {
            bufs.sort_by_key(|b| b.0);
            let seqs: Vec<u32> = bufs.iter().map(|b| b.0).collect();
            assert_eq!(seqs, (0..bufs.len() as u32).collect::<Vec<_>>(), "lane {lane}");
            let recs: Vec<[u64; 2]> = bufs.into_iter().flat_map(|b| b.1).collect();
            let want: Vec<[u64; 2]> = (0..1000).map(|i| [lane as u64, i]).collect();
            assert!(recs == want, "lane {lane}, {placement:?}: records differ");
        }
        assert!(report.is_reconciled(), "{:?}", report.lanes);
        assert_eq!(report.totals(), (4000, 4000, 0));
        for l in &report.lanes {
            assert!(!l.holds_buffer || l.produced == l.collected);
            assert_eq!(l.switches as u64, l.buffers_collected);
        }
    }
}

/// One lossless run of `cfg(4, 2, 16, Block, 8)`'s four lanes over `mem`, 500 records a lane,
/// bounded in time: a protocol that starts from stale words must fail here, not hang.
fn lossless_run_over(mem: Arc<dyn DeviceMemory>) {
    let c = cfg(4, 2, 16, Policy::Block, 8);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let clock = Arc::new(ferry_dfx::clock::SteadyClock::new(A2A3.clock_hz));
        let t = DfxTransport::<[u64; 2]>::new(c, mem, clock).unwrap();
        let device = t.device_region();
        let seen = Arc::new(Mutex::new(BTreeMap::<u32, Vec<u64>>::new()));
        let s2 = seen.clone();
        let host = t.start(move |_| {
            let seen = s2.clone();
            move |b: &CollectedBuffer<'_, [u64; 2]>| {
                let mut g = seen.lock().unwrap();
                g.entry(b.lane).or_default().extend(b.records.iter().map(|r| r[1]));
            }
        });
        for st in write_lanes(&device, 4, 500) {
            assert_eq!(st.dropped, 0);
        }
        let report = host.stop();
        let _ =
            done_tx.send((report.is_reconciled(), report.totals(), seen.lock().unwrap().clone()));
    });
    // The caller's liveness bound names a run that never finishes (stale control words).
    let (reconciled, totals, seen) = done_rx.recv().expect("the run's thread panicked");
    assert!(reconciled);
    assert_eq!(totals, (2000, 2000, 0));
    for q in 0..4 {
        assert_eq!(
            seen[&q],
            (0..500).collect::<Vec<u64>>(),
            "lane {q}: every record once, in order"
        );
    }
}

/// Device memory is not cleared by its allocator: a region built over words left by an earlier
/// region's run, or over all-ones garbage, still runs losslessly (the transport clears its own
/// control words at init), on both arches.
#[test]
fn a_region_over_dirty_memory_starts_from_cleared_control_words() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    let c = cfg(4, 2, 16, Policy::Block, 8);
    for svm_arch in [true, false] {
        let mem: Arc<dyn DeviceMemory> = if svm_arch {
            Arc::new(SvmMemory::new(c.region_size(), 0x10_0000_0000))
        } else {
            Arc::new(MirroredMemory::new(c.region_size(), 0x10_0000_0000))
        };
        // Stale: the words an earlier region's run left behind (indices, counters, entries).
        lossless_run_over(mem.clone());
        lossless_run_over(mem.clone());
        // Garbage: every byte of both views set.
        for view in [mem.host_view(), mem.device_view()] {
            for off in (0..view.len()).step_by(8) {
                view.store_u64(off, u64::MAX, Ordering::Relaxed);
            }
        }
        lossless_run_over(mem);
    }
}

/// An idle engine polls its queues (nothing signals it) and sleeps between sweeps, with sleeps
/// that grow to the policy's live cap: over a window it parks at most `window / live_max` times
/// plus the ramp, never a busy loop. The test waits for the drain's own count of sleeps, however
/// long the scheduler keeps the drain off the CPU (the 60 s limit is only a hang guard).
#[test]
fn idle_profiler_parks_and_lane_snapshot_reads_state() {
    let _bound = ferry_watchdog::bound("the idle drain shard to park three times");
    let c = cfg(1, 2, 4, Policy::Block, 4);
    let t =
        DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::new())).unwrap();
    let started = std::time::Instant::now();
    let host = t.start(|_| |_b: &CollectedBuffer<'_, [u64; 2]>| {});
    while host.drain_parks() < 3 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let snap = host.lane_snapshot(0).unwrap();
    assert_eq!(snap.gate_state, GATE_NONE);
    assert_eq!(snap.switch_count, 0);
    let report = host.stop();
    let p = ferry_dfx::PollPolicy::default();
    let ramp = (p.live_max.as_nanos() / p.min_sleep.as_nanos()).ilog2() as u64 + 2;
    let most = (started.elapsed().as_nanos() / p.live_max.as_nanos()) as u64 + ramp;
    assert!(report.drain.parks >= 3, "an idle drain shard sleeps: {:?}", report.drain);
    assert!(report.drain.parks <= most, "sleeps grow to the live cap: {:?} > {most}", report.drain);
    assert!(report.is_reconciled());
}

#[test]
fn the_stall_log_keeps_the_most_recent_waits_and_counts_the_rest() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    use ferry_dfx::device::{STALL_LOG_STRIDE, STALL_RING};
    let c = cfg(2, 1, 4, Policy::Block, 4);
    let mem = svm(&c);
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), mem.clone(), Arc::new(VirtualClock::new()))
        .unwrap();
    // Lane 1's writer logged 20 waits into its ring of STALL_RING (as the device would).
    let log = c.layout().region_size() + STALL_LOG_STRIDE;
    let dv = mem.device_view();
    let n = 20u64;
    // Wait 12 was shorter than one device tick: an empty interval, counted but not reported.
    let end = |i: u64| if i == 12 { 1000 * i + 1 } else { 1000 * i + 500 };
    for i in 0..n {
        let e = log + 16 + 16 * (i % STALL_RING as u64) as usize;
        dv.store_u64(e, 1000 * i + 1, Ordering::Relaxed);
        dv.store_u64(e + 8, end(i), Ordering::Relaxed);
    }
    dv.store_u64(log, n, Ordering::Relaxed);
    let report = t.start(|_| |_b: &CollectedBuffer<'_, [u64; 2]>| {}).stop();
    assert!(report.lanes[0].stalls.as_slice().is_empty());
    let s = &report.lanes[1].stalls;
    assert_eq!((s.total, s.overwritten()), (n, n - STALL_RING as u64));
    let want: Vec<[u64; 2]> =
        (n - STALL_RING as u64..n).filter(|&i| i != 12).map(|i| [1000 * i + 1, end(i)]).collect();
    assert_eq!(s.as_slice(), want.as_slice());
}

/// An engine dropped without `stop` (an error path) stops and joins its threads: nothing they
/// own (the sinks, the region's memory) outlives it.
#[test]
fn a_dropped_engine_leaves_no_thread_behind() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    let c = cfg(2, 2, 4, Policy::Block, 4);
    let mem = svm(&c);
    let t = DfxTransport::<[u64; 2]>::new(c, mem.clone(), Arc::new(VirtualClock::new())).unwrap();
    let probe = Arc::new(());
    let p = probe.clone();
    let host = t.start(move |_| {
        let p = p.clone();
        move |_b: &CollectedBuffer<'_, [u64; 2]>| {
            let _ = &p;
        }
    });
    assert_eq!(host.threads(), 5, "two drain shards, two collectors, one replenish thread");
    assert!(Arc::strong_count(&probe) > 1 && Arc::strong_count(&mem) > 1);
    drop(host);
    assert_eq!(Arc::strong_count(&probe), 1, "the collector threads ended and dropped their sinks");
    assert_eq!(Arc::strong_count(&mem), 1, "no thread holds the region any more");
}

/// Keeps every buffer it is handed, as is.
#[derive(Default)]
struct Buffers(Vec<Vec<u64>>);

impl ferry_dfx::CollectSink<u64> for Buffers {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, u64>) {
        self.0.push(b.records.to_vec());
    }
}

/// `record_slice` keeps a run inside one buffer: when the current buffer has no room for it,
/// the buffer is published and the run starts the next one; a run longer than a buffer is
/// dropped and counted; every buffer the host sees holds whole runs.
#[test]
fn runs_never_straddle_two_buffers() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    for svm_arch in [true, false] {
        let c = DfxBuilder::new(&A2A3)
            .ready_queues(1)
            .lane(0, 0, 4)
            .records_per_buffer(8)
            .build::<u64>()
            .unwrap();
        let mem: Arc<dyn DeviceMemory> = if svm_arch {
            Arc::new(SvmMemory::new(c.region_size(), 0x10_0000_0000))
        } else {
            Arc::new(MirroredMemory::new(c.region_size(), 0x10_0000_0000))
        };
        let clock = Arc::new(ferry_dfx::clock::SteadyClock::new(A2A3.clock_hz));
        let t = DfxTransport::<u64>::new(c, mem, clock).unwrap();
        let device = t.device_region();
        let host = t.start(|_| Buffers::default());
        let mut w = device.writer::<u64>(0, &[0]).unwrap();
        // Run k is `len` copies of k.
        let runs: [(u64, usize); 7] = [(1, 3), (2, 3), (3, 3), (4, 8), (5, 9), (6, 1), (7, 7)];
        for &(k, len) in &runs {
            assert_eq!(w.record_slice(0, &vec![k; len]), len <= 8, "run {k}");
        }
        let st = w.finish()[0];
        let report = host.stop();
        assert!(report.is_reconciled(), "{:?}", report.lanes);
        assert_eq!((st.produced, st.dropped), (34, 9), "the 9-record run is dropped, counted");
        let bufs: Vec<Vec<u64>> = report.sinks.into_iter().flat_map(|s| s.0).collect();
        let expect: Vec<Vec<u64>> = vec![
            vec![1, 1, 1, 2, 2, 2], // run 3 did not fit: published with 6 of 8 records
            vec![3, 3, 3],          // run 4 (a whole buffer) did not fit
            vec![4; 8],
            [vec![6], vec![7; 7]].concat(),
        ];
        assert_eq!(bufs, expect, "svm {svm_arch}");
    }
}

/// `record_run` counts the caller's items it lost in either place a run can be lost: at the
/// write (a run longer than a buffer) and with its buffer (a push gate that gave up), including
/// the last buffer at the flush; runs that reach the host count nothing.
#[test]
fn runs_account_their_items_wherever_they_are_dropped() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    let mut b = DfxBuilder::new(&A2A3);
    // Ready depth 2 holds one buffer; nobody drains; the Drop policy gives up after 5 cycles.
    b.ready_queues(1).ready_depth(2).records_per_buffer(8).policy(Policy::Drop).lane(0, 0, 4);
    let mut c = b.build::<u64>().unwrap();
    c.drop_wait_cycles = 5;
    let t =
        DfxTransport::<u64>::new(c.clone(), svm(&c), Arc::new(VirtualClock::ticking(1))).unwrap();
    let mut w = t.device_region().writer::<u64>(0, &[0]).unwrap();
    assert!(w.record_run(0, &[1; 5], 2), "fits the first buffer");
    assert!(w.record_run(0, &[2; 5], 3), "publishes the first buffer, starts the second");
    assert_eq!(w.items_dropped(0), 0);
    assert!(w.record_run(0, &[3; 5], 4), "the ready queue is full: the second buffer is lost");
    assert_eq!(w.items_dropped(0), 3, "with the run it held");
    assert!(!w.record_run(0, &[4; 9], 5), "longer than a buffer");
    assert_eq!(w.items_dropped(0), 8);
    w.flush();
    assert_eq!(w.items_dropped(0), 12, "the last buffer could not be published either");
    let st = w.stats()[0];
    assert_eq!((st.produced, st.dropped), (24, 19), "words: runs 2, 4 and 3");
}

/// Threads of this process named `ferry-dfx-…` whose nice value is `nice` (Linux).
fn dfx_threads_with_nice(nice: i64) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return 0 };
    dir.flatten()
        .filter(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            // Field 19 of stat is the nice value; fields after the `(comm)` one are space-separated.
            let fields: Vec<&str> =
                stat.rsplit_once(") ").map(|(_, r)| r.split(' ').collect()).unwrap_or_default();
            comm.starts_with("ferry-dfx-")
                && fields.get(16).and_then(|v| v.parse().ok()) == Some(nice)
        })
        .count()
}

/// `EngineConfig::nice` lowers the priority of every engine thread (and only of them).
#[test]
#[cfg(target_os = "linux")]
fn engine_threads_take_their_nice_value() {
    let bound = ferry_watchdog::bound("the DFX engine's threads");
    let c = cfg(1, 2, 4, Policy::Block, 4);
    let t =
        DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::new())).unwrap();
    // A value no other test uses, so engines of tests running alongside do not count.
    let mut e =
        ferry_dfx::DfxEngine::new(ferry_dfx::EngineConfig { nice: Some(7), ..Default::default() });
    e.add(t, |_| |_b: &CollectedBuffer<'_, [u64; 2]>| {}).unwrap();
    let running = e.start();
    bound.waiting_for("the engine's three threads to take nice value 7");
    while dfx_threads_with_nice(7) < 3 {
        std::thread::yield_now();
    }
    assert_eq!(dfx_threads_with_nice(7), running.threads());
    running.stop();
    // The threads are joined; the kernel may list an exiting thread in /proc a moment longer,
    // so wait for the listing itself.
    bound.waiting_for("the stopped engine's threads to leave /proc");
    while dfx_threads_with_nice(7) > 0 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The host writes only words it owns and reads only words it does not: every
/// `write_range_to_device` of a non-SVM run after the region's initialisation (startup seeding,
/// every free-queue push, every ready-queue pop, the stop) lies inside one host-owned field of the
/// layout (a free-queue slot, a free-queue tail, a ready-queue head), and no read from the
/// device touches one, checked by a spy on every range against that map. A wider write, or one
/// that reaches a neighbouring device-owned word (a tail, a free-queue head, lane state, a
/// record), would roll that word back to the host's stale copy; a read of a host-owned word
/// would roll the host's copy back to the device's.
#[test]
fn every_host_write_covers_only_host_owned_words_and_every_read_none() {
    let bound = ferry_watchdog::bound("the transport to start");
    let (lanes, queues) = (3, 2);
    let mut b = DfxBuilder::new(&A5);
    b.ready_queues(queues).shards(2).ready_depth(4).records_per_buffer(8);
    for l in 0..lanes {
        b.lane(l % queues, 0, 2);
    }
    let c = b.build::<[u64; 2]>().unwrap();
    let l = c.layout();
    let mut owned: Vec<(usize, usize, String)> = Vec::new();
    for lane in 0..l.lanes {
        owned.push((
            l.free_slot_offset(lane, 0),
            8 * l.free_slots as usize,
            format!("lane {lane}'s free-queue slots"),
        ));
        owned.push((l.free_tail_offset(lane), 4, format!("lane {lane}'s free-queue tail")));
    }
    for q in 0..l.ready_queues {
        owned.push((l.head_offset(q), 4, format!("ready queue {q}'s head")));
    }
    let spy = Arc::new(SpyMemory::new(MirroredMemory::new(c.region_size(), 0x7000_0000)));
    let t = DfxTransport::<[u64; 2]>::new(c, spy.clone(), Arc::new(VirtualClock::new())).unwrap();
    // Initialising the region (header, indices, lane states) happens before any device thread
    // exists: those writes own the whole region. Everything after is checked.
    let init = spy.ops().len();
    let device = t.device_region();
    let host = t.start(|_| |_b: &CollectedBuffer<'_, [u64; 2]>| {});
    bound.waiting_for("the writers of three two-buffer lanes to publish 200 records each");
    std::thread::scope(|s| {
        for q in 0..queues {
            let device = device.clone();
            let mine: Vec<u32> = (0..lanes).filter(|l| l % queues == q).collect();
            s.spawn(move || {
                let mut w = device.writer::<[u64; 2]>(q, &mine).unwrap();
                for i in 0..200 {
                    for (j, &lane) in mine.iter().enumerate() {
                        w.record(j, [lane as u64, i]);
                    }
                }
                w.finish();
            });
        }
    });
    bound.waiting_for("the transport to collect every buffer and stop");
    let report = host.stop();
    assert!(report.is_reconciled(), "{:?}", report.lanes);
    assert_eq!(report.totals(), (600, 600, 0));
    let writes: Vec<_> =
        spy.ops().into_iter().skip(init).filter(|o| o.kind == MemOpKind::Write).collect();
    let (mut pushes, mut pops) = (0, 0);
    for w in &writes {
        let field = owned.iter().find(|(off, len, _)| w.off >= *off && w.off + w.len <= off + len);
        let Some((_, _, name)) = field else {
            panic!("host write {}+{} (by {}) covers a word the device owns", w.off, w.len, w.thread)
        };
        if name.ends_with("tail") {
            pushes += 1;
        } else if name.ends_with("head") {
            pops += 1;
        }
    }
    // One head write per pop of the 75 published buffers. Each lane published 25 buffers from
    // a pool of 2, so at least 23 of them came back through a free-queue push (one tail write
    // each); how many more (startup seeding, refills after the last record) depends on timing.
    assert_eq!(pops, 75, "pushes {pushes}");
    assert!(pushes >= 3 * 23, "pushes {pushes}");
    // The other direction: a pull that covered a host-owned word (a free-queue tail or slot, a
    // ready queue's head) would roll the host's copy back to the device's older one, e.g. undo
    // a push a drain shard made meanwhile. The end-of-run reads of every lane's state included.
    let reads: Vec<_> =
        spy.ops().into_iter().skip(init).filter(|o| o.kind == MemOpKind::Read).collect();
    assert!(reads.len() >= 75, "{} reads", reads.len());
    for r in &reads {
        if let Some((_, _, name)) =
            owned.iter().find(|(off, len, _)| r.off < off + len && *off < r.off + r.len)
        {
            panic!("host read {}+{} (by {}) covers {name}", r.off, r.len, r.thread);
        }
    }
}

/// A record the caller could not encode is counted produced and dropped, each time by the
/// number given, beside the records written.
#[test]
fn an_accounted_drop_counts_its_records_produced_and_dropped() {
    let _bound = ferry_watchdog::bound("the DFX transport's host threads and the device writer");
    let c = cfg(1, 4, 8, Policy::Block, 8);
    let t =
        DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::new())).unwrap();
    let device = t.device_region();
    let host = t.start(|_| |_b: &CollectedBuffer<'_, [u64; 2]>| {});
    let mut w = device.writer::<[u64; 2]>(0, &[0]).unwrap();
    w.record(0, [0, 1]);
    w.record(0, [0, 2]);
    w.account_dropped(0, 3);
    w.account_dropped(0, 4);
    let st = w.stats()[0];
    assert_eq!((st.produced, st.dropped), (9, 7), "{st:?}");
    // The lane's words in device memory say the same mid-buffer: the two records still in the
    // current buffer count as produced.
    let snap = host.lane_snapshot(0).unwrap();
    assert_eq!((snap.produced, snap.dropped), (9, 7), "{snap:?}");
    w.finish();
    let report = host.stop();
    assert!(report.is_reconciled(), "{:?}", report.lanes);
}

/// A lane's log is packed as documented: the run-end entries follow the header and the ring
/// of gate waits directly, and a log is exactly its entries long, so the logs of many lanes
/// cost their entries and nothing more.
#[test]
fn a_lanes_log_is_packed_as_documented() {
    use ferry_dfx::device::{
        RUN_END_BYTES, RUN_LOG_OFFSET, RUN_RING, STALL_LOG_STRIDE, STALL_RING,
    };
    assert_eq!(RUN_LOG_OFFSET, 16 + 16 * STALL_RING);
    assert_eq!(STALL_LOG_STRIDE, RUN_LOG_OFFSET + RUN_END_BYTES * RUN_RING);
    assert_eq!(STALL_LOG_STRIDE, 10_496, "256 bytes of header and waits, 256 run ends of 40");
}

/// Non-SVM, a drain shard refreshes the device-written tails of its own ready queues only: with
/// four queues over two shards (shard `q % 2`: queues 0 and 2, 1 and 3, never adjacent) no read
/// from the device covers the tail of a queue another shard serves, and with one shard serving
/// all four (adjacent) each refresh on the drain thread is one read of exactly the four tails.
/// Every entry popped
/// carries its lane's kind, and no read or write fails.
#[test]
fn a_drain_shard_reads_only_its_own_queues_tails() {
    let bound = ferry_watchdog::bound("the transport to start");
    let queues = 4;
    for shards in [2, 1] {
        let mut b = DfxBuilder::new(&A5);
        b.ready_queues(queues).shards(shards).ready_depth(4).records_per_buffer(8);
        for q in 0..queues {
            b.lane(q, 3, 2);
        }
        let c = b.build::<[u64; 2]>().unwrap();
        let l = c.layout();
        let tails: Vec<(u32, usize)> = (0..queues).map(|q| (q, l.tail_offset(q))).collect();
        let all = (l.tail_offset(0), l.tail_offset(queues - 1) + 4 - l.tail_offset(0));
        let spy = Arc::new(SpyMemory::new(MirroredMemory::new(c.region_size(), 0x7000_0000)));
        let t =
            DfxTransport::<[u64; 2]>::new(c, spy.clone(), Arc::new(VirtualClock::new())).unwrap();
        let device = t.device_region();
        let kinds = Arc::new(Mutex::new(Vec::new()));
        let k2 = kinds.clone();
        let host = t.start(move |_| {
            let kinds = k2.clone();
            move |b: &CollectedBuffer<'_, [u64; 2]>| kinds.lock().unwrap().push(b.kind)
        });
        bound.waiting_for("the writers of four two-buffer lanes to publish 100 records each");
        for st in write_lanes(&device, queues, 100) {
            assert_eq!(st.dropped, 0);
        }
        bound.waiting_for("the transport to collect every buffer and stop");
        let report = host.stop();
        assert!(report.is_reconciled(), "{:?}", report.lanes);
        assert_eq!(report.drain.mem_errors, 0, "{:?}", report.drain);
        let kinds = kinds.lock().unwrap();
        assert!(!kinds.is_empty() && kinds.iter().all(|&k| k == 3), "{kinds:?}");
        let (mut tail_reads, mut whole) = (0, 0);
        for r in spy.ops().into_iter().filter(|o| o.kind == MemOpKind::Read) {
            let covered: Vec<u32> = tails
                .iter()
                .filter(|&&(_, off)| r.off < off + 4 && off < r.off + r.len)
                .map(|&(q, _)| q)
                .collect();
            let Some(&first) = covered.first() else { continue };
            tail_reads += 1;
            whole += usize::from((r.off, r.len) == all);
            let what = format!("{shards} shards: a read of {}+{} by {}", r.off, r.len, r.thread);
            if shards == 1 && r.thread.starts_with("ferry-dfx-drain-") {
                assert_eq!((r.off, r.len), all, "{what}: one read of exactly the four tails");
            } else {
                let one_shard = covered.iter().all(|q| q % 2 == first % 2);
                assert!(one_shard, "{what} covers the tails of queues {covered:?}");
            }
        }
        assert!(tail_reads > 0, "{shards} shards: the shards pulled their tails");
        assert!(shards == 2 || whole > 0, "one shard refreshes all four tails in one read");
    }
}

/// A region taken with another clock times its writers' gates on that clock: the region's own
/// clock stands still (a wait timed on it would never run out, and the test's liveness bound
/// would fail it), the one given ticks, and the pop gate's budget runs out on it.
#[test]
fn a_region_with_another_clock_times_its_gates_on_it() {
    let _bound = ferry_watchdog::bound("a gate wait timed on the region's second clock");
    let mut c = cfg(1, 1, 4, Policy::Block, 8);
    c.block_budget_cycles = 40;
    let still = Arc::new(VirtualClock::new());
    let t = DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), still.clone()).unwrap();
    let ticking = Arc::new(VirtualClock::ticking(1));
    let device = t.device_region().with_clock(ticking.clone());
    let mut w = device.writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..4 {
        w.record(0, [0, i]); // the fourth fills the only buffer: published, then the pop gate
    }
    assert_eq!(w.stats()[0].gate_timeouts, 1);
    assert!(ticking.peek() >= 40, "the gate's budget ran out on the second clock");
}

/// The wake-up hints reach exactly the regions configured for them: the transport's own region
/// offers the host's doorbell only with `doorbell_hint`, and a region given a notify hook calls
/// it once per publish, with the publishing queue.
#[test]
fn the_wake_up_hints_reach_only_the_regions_that_asked_for_them() {
    let _bound =
        ferry_watchdog::bound("the DFX transport's host threads and the device writer threads");
    // Nobody drains: a gate that finds no free buffer gives up after 10 reads of the clock.
    let mut c = cfg(2, 2, 4, Policy::Block, 4);
    c.block_budget_cycles = 10;
    let plain =
        DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::ticking(1)))
            .unwrap();
    assert!(plain.device_region().host_doorbell().is_none());
    c.doorbell_hint = true;
    let hinted =
        DfxTransport::<[u64; 2]>::new(c.clone(), svm(&c), Arc::new(VirtualClock::new())).unwrap();
    assert!(hinted.device_region().host_doorbell().is_some());
    // A notify hook on the plain region: one call per published buffer, naming its queue.
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = calls.clone();
    let region = plain
        .device_region()
        .with_host_notify(Arc::new(move |q: u32| seen.lock().unwrap().push(q)));
    let mut w = region.writer::<[u64; 2]>(1, &[1]).unwrap();
    for i in 0..8 {
        w.record(0, [1, i]);
    }
    assert_eq!(*calls.lock().unwrap(), [1, 1], "two buffers published on queue 1");
    // The transport's own region has no hook: its writers publish without calling one.
    let mut w0 = plain.device_region().writer::<[u64; 2]>(0, &[0]).unwrap();
    for i in 0..4 {
        w0.record(0, [0, i]);
    }
    assert_eq!(calls.lock().unwrap().len(), 2);
}
