//! Stress matrix: lanes × pool sizes × collector delay × arch × policy × regions on one engine,
//! plus dead-host runs.
//!
//! The CI subset runs by default; the full matrix is `#[ignore]`d:
//! `cargo test -p ferry-dfx --release --test stress -- --ignored stress`.
//!
//! Assertions are on counts and device-clock accounting, never on wall time. Waits for a
//! condition (a lane reaching a gate) are bounded by a generous guard that only turns a hang into
//! a failure.
#![cfg(not(ferry_loom))]

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ferry_abi::arch::{A2A3, A5};
use ferry_abi::dfx::{GATE_NONE, GATE_POP, GATE_PUSH};
use ferry_dfx::clock::{CycleClock, VirtualClock};
use ferry_dfx::mem::{DeviceMemory, MirroredMemory, SvmMemory};
use ferry_dfx::{
    CollectSink, CollectedBuffer, DeviceRegion, DfxBuilder, DfxEngine, DfxTransport, EngineConfig,
    Policy, RunReport,
};

type Rec = [u64; 2];

/// A stress record: carries its lane and its index in the lane. Two sizes, so a shared engine
/// serves regions of different record types.
trait StressRec: ferry_dfx::Record {
    fn make(lane: u32, i: u64) -> Self;
    fn lane(&self) -> u64;
    fn value(&self) -> u64;
}

impl StressRec for [u64; 2] {
    fn make(lane: u32, i: u64) -> Self {
        [lane as u64, i]
    }
    fn lane(&self) -> u64 {
        self[0]
    }
    fn value(&self) -> u64 {
        self[1]
    }
}

impl StressRec for [u64; 4] {
    fn make(lane: u32, i: u64) -> Self {
        [lane as u64, i, !i, lane as u64]
    }
    fn lane(&self) -> u64 {
        assert_eq!((self[3], self[2]), (self[0], !self[1]), "torn record {self:?}");
        self[0]
    }
    fn value(&self) -> u64 {
        self[1]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delay {
    None,
    Random,
    StalledShard,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    lanes: u32,
    pool: u32,
    delay: Delay,
    svm: bool,
    policy: Policy,
    /// Buffers each lane fills.
    buffers_per_lane: u32,
    /// Regions on the one engine: 1 (`[u64; 2]` records), or 2 (plus a `[u64; 4]` region whose
    /// lanes the same threads write).
    regions: u32,
}

const RPB: u32 = 16;
const DROP_BOUND: u64 = 64;
/// Guard against hangs only (never asserted as a duration).
const GUARD: Duration = Duration::from_secs(60);

/// Holds shard 0's collector until released.
#[derive(Default)]
struct Stall {
    released: Mutex<bool>,
    cv: Condvar,
}

impl Stall {
    fn wait(&self) {
        let mut r = self.released.lock().unwrap();
        while !*r {
            r = self.cv.wait(r).unwrap();
        }
    }
    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

struct Sink {
    shard: u32,
    delay: Delay,
    rng: u64,
    stall: Arc<Stall>,
    /// lane -> (seqs, record values)
    seen: BTreeMap<u32, (Vec<u32>, Vec<u64>)>,
}

impl Sink {
    fn new(shard: u32, delay: Delay, stall: Arc<Stall>) -> Self {
        Sink {
            shard,
            delay,
            rng: 0x9E37_79B9_7F4A_7C15 ^ (shard as u64 + 1),
            stall,
            seen: BTreeMap::new(),
        }
    }
}

impl<R: StressRec> CollectSink<R> for Sink {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, R>) {
        match self.delay {
            Delay::None => {}
            Delay::Random => {
                // xorshift64
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                if self.rng % 4 == 0 {
                    std::thread::sleep(Duration::from_micros(self.rng % 200));
                }
            }
            Delay::StalledShard => {
                if self.shard == 0 {
                    self.stall.wait();
                }
            }
        }
        let e = self.seen.entry(b.lane).or_default();
        e.0.push(b.seq);
        for r in b.records {
            assert_eq!(
                r.lane(),
                b.lane as u64,
                "record of lane {} in lane {}'s buffer",
                r.lane(),
                b.lane
            );
            e.1.push(r.value());
        }
    }
}

/// One region's outcome, with the record type erased.
struct RegionOutcome {
    lanes: Vec<ferry_dfx::LaneReconcile>,
    reconciled: bool,
    /// lane -> (seqs, values), merged over shards.
    seen: BTreeMap<u32, (Vec<u32>, Vec<u64>)>,
    /// Per lane: writer-side stats.
    stats: Vec<ferry_dfx::LaneStats>,
}

impl RegionOutcome {
    fn new(r: RunReport<Sink>, mut stats: Vec<ferry_dfx::LaneStats>) -> Self {
        let mut seen: BTreeMap<u32, (Vec<u32>, Vec<u64>)> = BTreeMap::new();
        for s in &r.sinks {
            for (lane, (seqs, vals)) in &s.seen {
                let e = seen.entry(*lane).or_default();
                e.0.extend(seqs);
                e.1.extend(vals);
            }
        }
        stats.sort_by_key(|s| s.lane);
        RegionOutcome { reconciled: r.is_reconciled(), lanes: r.lanes, seen, stats }
    }
}

struct Outcome {
    regions: Vec<RegionOutcome>,
    /// Switch counts of starved lanes (region, lane, switches) when every peer had finished
    /// (stalled-shard runs).
    starved_switches_at_peer_finish: Option<Vec<(usize, u32, u32)>>,
}

fn shards_for(lanes: u32) -> u32 {
    lanes.div_ceil(2).min(4)
}

fn transport<R: StressRec>(case: &Case, addr: u64) -> DfxTransport<R> {
    let arch = if case.svm { &A2A3 } else { &A5 };
    let mut b = DfxBuilder::new(arch);
    b.ready_queues(case.lanes)
        .shards(shards_for(case.lanes))
        .ready_depth(8)
        .records_per_buffer(RPB)
        .policy(case.policy)
        .drop_wait_cycles(DROP_BOUND);
    for l in 0..case.lanes {
        b.lane(l, 0, case.pool);
    }
    let cfg = b.build::<R>().unwrap();
    let mem: Arc<dyn DeviceMemory> = if case.svm {
        Arc::new(SvmMemory::new(cfg.region_size(), addr))
    } else {
        Arc::new(MirroredMemory::new(cfg.region_size(), addr))
    };
    // Block: a frozen clock (the 30-s budget never runs out in a live run). Drop: each writer
    // gets its own clock that advances one cycle per read, so waits are counted exactly.
    DfxTransport::<R>::new(cfg, mem, Arc::new(VirtualClock::new())).unwrap()
}

fn run(case: Case) -> Outcome {
    let shards = shards_for(case.lanes);
    let t0 = transport::<[u64; 2]>(&case, 0x4000_0000);
    let t1 = (case.regions > 1).then(|| transport::<[u64; 4]>(&case, 0x8000_0000));
    let (d0, d1) = (t0.device_region(), t1.as_ref().map(DfxTransport::device_region));
    let stall = Arc::new(Stall::default());
    let mut engine = DfxEngine::new(EngineConfig::default());
    let st = stall.clone();
    let k0 = engine.add(t0, move |shard| Sink::new(shard, case.delay, st.clone())).unwrap();
    let st = stall.clone();
    let k1 =
        t1.map(|t| engine.add(t, move |shard| Sink::new(shard, case.delay, st.clone())).unwrap());
    let host = engine.start();
    assert_eq!(host.threads() as u32, 2 * shards + 1, "threads do not grow with the regions");
    let n = (case.buffers_per_lane * RPB) as u64;
    let clock = |d: &DeviceRegion| {
        if case.policy == Policy::Drop {
            d.with_clock(Arc::new(VirtualClock::ticking(1)) as Arc<dyn CycleClock>)
        } else {
            d.clone()
        }
    };
    let mut handles = Vec::new();
    for q in 0..case.lanes {
        let r0 = clock(&d0);
        let r1 = d1.as_ref().map(clock);
        handles.push((
            q,
            std::thread::spawn(move || {
                let mut w0 = r0.writer::<[u64; 2]>(q, &[q]).unwrap();
                let mut w1 = r1.map(|r| r.writer::<[u64; 4]>(q, &[q]).unwrap());
                for i in 0..n {
                    w0.record(0, StressRec::make(q, i));
                    if let Some(w) = w1.as_mut() {
                        w.record(0, StressRec::make(q, i));
                    }
                }
                (w0.finish()[0], w1.map(|w| w.finish()[0]))
            }),
        ));
    }
    let mut stats: Vec<(ferry_dfx::LaneStats, Option<ferry_dfx::LaneStats>)> = Vec::new();
    let mut starved_at = None;
    if case.delay == Delay::StalledShard {
        let starved: Vec<u32> = (0..case.lanes).filter(|q| q % shards == 0).collect();
        // Peers (other shards) must finish entirely while shard 0 is stalled.
        let mut rest = Vec::new();
        for (q, h) in handles {
            if q % shards != 0 {
                stats.push(h.join().unwrap());
            } else {
                rest.push((q, h));
            }
        }
        if case.policy == Policy::Block && case.buffers_per_lane > case.pool {
            // The starved lanes are parked at a pop gate (of one of their regions), short of
            // their work.
            let start = Instant::now();
            for &q in &starved {
                loop {
                    let waiting = (0..case.regions as usize)
                        .any(|r| host.lane_snapshot(r, q).unwrap().gate_state != GATE_NONE);
                    if waiting {
                        break;
                    }
                    assert!(start.elapsed() < GUARD, "lane {q} never reached a gate");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            starved_at = Some(
                starved
                    .iter()
                    .flat_map(|&q| {
                        let host = &host;
                        (0..case.regions as usize)
                            .map(move |r| (r, q, host.lane_snapshot(r, q).unwrap().switch_count))
                    })
                    .collect::<Vec<_>>(),
            );
        }
        stall.release();
        for (_, h) in rest {
            stats.push(h.join().unwrap());
        }
    } else {
        stats = handles.into_iter().map(|(_, h)| h.join().unwrap()).collect();
        stall.release();
    }
    let mut report = host.stop();
    let mut regions =
        vec![RegionOutcome::new(report.take(k0), stats.iter().map(|s| s.0).collect())];
    if let Some(k1) = k1 {
        regions
            .push(RegionOutcome::new(report.take(k1), stats.iter().filter_map(|s| s.1).collect()));
    }
    Outcome { regions, starved_switches_at_peer_finish: starved_at }
}

fn check(case: Case) {
    let _case = ferry_watchdog::bound(format!(
        "the engine to collect every buffer of {case:?} and every writer to finish"
    ));
    let o = run(case);
    let n = (case.buffers_per_lane * RPB) as u64;
    assert_eq!(o.regions.len() as u32, case.regions);
    for (ri, r) in o.regions.into_iter().enumerate() {
        assert!(r.reconciled, "{case:?} region {ri}: {:?}", r.lanes);
        let mut per_lane = r.seen;
        for l in 0..case.lanes {
            let line = r.lanes[l as usize];
            let st = r.stats[l as usize];
            assert_eq!(line.produced, n, "{case:?} region {ri} lane {l}");
            assert_eq!(st.produced, n);
            let (seqs, vals) = per_lane.remove(&l).unwrap_or_default();
            assert_eq!(vals.len() as u64, line.collected);
            match case.policy {
                Policy::Block => {
                    // Every record exactly once, in order; buffer sequence numbers contiguous.
                    assert_eq!(line.dropped, 0, "{case:?} region {ri} lane {l}: {line:?}");
                    assert_eq!(vals, (0..n).collect::<Vec<_>>(), "{case:?} region {ri} lane {l}");
                    assert_eq!(
                        seqs,
                        (0..seqs.len() as u32).collect::<Vec<_>>(),
                        "{case:?} lane {l}"
                    );
                    assert_eq!(seqs.len() as u32, case.buffers_per_lane);
                }
                Policy::Drop => {
                    // Losses counted exactly: no duplicate, increasing, and the rest were dropped.
                    assert!(vals.windows(2).all(|w| w[0] < w[1]), "{case:?} lane {l}");
                    assert_eq!(vals.len() as u64 + st.dropped, n);
                    // No writer waited longer than its bound (device-clock accounting).
                    assert!(st.max_stall_cycles <= DROP_BOUND, "{case:?} lane {l}: {st:?}");
                    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
                }
            }
        }
        if o.starved_switches_at_peer_finish.is_some() {
            for l in (0..case.lanes).filter(|q| q % shards_for(case.lanes) != 0) {
                let st = r.stats[l as usize];
                assert_eq!(st.switches, case.buffers_per_lane, "{case:?} region {ri} peer {l}");
            }
        }
    }
    if let Some(starved) = o.starved_switches_at_peer_finish {
        // While the starved lanes could publish at most their pool, every peer finished all of
        // its buffers.
        for (r, q, switches) in starved {
            assert!(
                switches <= case.pool,
                "{case:?}: starved lane {q} of region {r} switched {switches}"
            );
        }
    }
}

fn matrix(lanes: &[u32], pools: &[u32], policies: &[Policy], buffers_per_lane: u32) {
    for &lanes in lanes {
        for &pool in pools {
            for delay in [Delay::None, Delay::Random, Delay::StalledShard] {
                for svm in [true, false] {
                    for &policy in policies {
                        for regions in [1, 2] {
                            check(Case {
                                lanes,
                                pool,
                                delay,
                                svm,
                                policy,
                                buffers_per_lane,
                                regions,
                            });
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn block_matrix_ci_subset() {
    let _bound = ferry_watchdog::bound(
        "the DFX engine's drain, collector and replenish threads and the device writer threads",
    );
    matrix(&[1, 3, 8], &[1, 4], &[Policy::Block], 24);
}

#[test]
fn drop_matrix_ci_subset() {
    let _bound = ferry_watchdog::bound(
        "the DFX engine's drain, collector and replenish threads and the device writer threads",
    );
    matrix(&[2, 8], &[1, 3], &[Policy::Drop], 24);
}

#[test]
#[ignore = "full stress matrix; run with --ignored stress"]
fn stress_full_matrix() {
    matrix(&[1, 2, 3, 4, 5, 6, 7, 8], &[1, 2, 3, 4], &[Policy::Block, Policy::Drop], 200);
}

/// Dead host: the host stops mid-run. Every lane ends up at a gate; once one budget of device
/// clock passes, each gives up exactly once, accounts the records it still owned, and finishes;
/// the restarted host collects what was published; the reconcile holds.
fn dead_host(lanes: u32, pool: u32, svm: bool) {
    let arch = if svm { &A2A3 } else { &A5 };
    let budget = arch.dfx_backpressure_budget_cycles;
    let mut b = DfxBuilder::new(arch);
    b.ready_queues(lanes).shards(shards_for(lanes)).ready_depth(4).records_per_buffer(RPB);
    for l in 0..lanes {
        b.lane(l, 0, pool);
    }
    let cfg = b.build::<Rec>().unwrap();
    let mem: Arc<dyn DeviceMemory> = if svm {
        Arc::new(SvmMemory::new(cfg.region_size(), 0x4000_0000))
    } else {
        Arc::new(MirroredMemory::new(cfg.region_size(), 0x4000_0000))
    };
    let clock = VirtualClock::new();
    let t = DfxTransport::<Rec>::new(cfg, mem, Arc::new(clock.clone())).unwrap();
    let device = t.device_region();
    let host = t.start(|shard| Sink::new(shard, Delay::None, Arc::new(Stall::default())));
    let n = 1000 * RPB as u64;
    let handles: Vec<_> = (0..lanes)
        .map(|q| {
            let device = device.clone();
            std::thread::spawn(move || {
                let mut w = device.writer::<Rec>(q, &[q]).unwrap();
                for i in 0..n {
                    w.record(0, [q as u64, i]);
                }
                w.finish()[0]
            })
        })
        .collect();
    // Let every lane make some progress, then kill the host.
    let start = Instant::now();
    while (0..lanes).any(|q| host.lane_snapshot(q).unwrap().switch_count == 0) {
        assert!(start.elapsed() < GUARD);
        std::thread::yield_now();
    }
    let halted = host.halt();
    // Every lane runs out of pool or ready-queue space and waits at a gate for good: at the push
    // gate with a full ready queue, or at the pop gate with an empty free queue (nobody pops or
    // pushes any more; a wait that began before the halt may still find what the host did just
    // before it, so the gate state alone is not enough).
    for q in 0..lanes {
        loop {
            let s = halted.lane_snapshot(q).unwrap();
            let for_good = match s.gate_state {
                GATE_PUSH => s.ready_space == 0,
                GATE_POP => s.free_len == 0,
                _ => false,
            };
            if for_good {
                break;
            }
            assert!(start.elapsed() < GUARD, "lane {q} never reached a gate");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Nobody gives up before the budget.
    clock.advance(budget - 1);
    std::thread::sleep(Duration::from_millis(2));
    for q in 0..lanes {
        assert_eq!(halted.lane_snapshot(q).unwrap().gate_timeouts, 0, "lane {q} gave up early");
    }
    // One more cycle: the budget has passed for everyone.
    clock.advance(1);
    let stats: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let report = halted.recover();
    assert!(report.is_reconciled(), "{:?}", report.lanes);
    let mut per_lane: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for s in &report.sinks {
        for (lane, (_, vals)) in &s.seen {
            per_lane.entry(*lane).or_default().extend(vals);
        }
    }
    for (l, st) in stats.iter().enumerate() {
        assert_eq!(st.produced, n);
        assert_eq!(st.gate_timeouts, 1, "one budget per lane, not one per buffer: {st:?}");
        assert_eq!(st.max_stall_cycles, budget, "gave up exactly at its budget: {st:?}");
        let vals = per_lane.remove(&(l as u32)).unwrap_or_default();
        // What was published arrived once, in order; everything else was accounted dropped.
        assert!(vals.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(vals.len() as u64 + st.dropped, n, "lane {l}");
        assert!(st.dropped > 0);
    }
}

#[test]
fn dead_host_ci_subset() {
    let _bound = ferry_watchdog::bound(
        "the DFX engine's drain, collector and replenish threads and the device writer threads",
    );
    for svm in [true, false] {
        dead_host(3, 1, svm);
        dead_host(4, 4, svm);
    }
}

#[test]
#[ignore = "full dead-host matrix; run with --ignored stress"]
fn stress_dead_host_matrix() {
    for lanes in 1..=8 {
        for pool in 1..=4 {
            for svm in [true, false] {
                dead_host(lanes, pool, svm);
            }
        }
    }
}

/// A starved lane does not stall another subsystem's lanes on the same engine: region A's lane
/// has a one-buffer pool and a writer that never pauses, so it waits at its pop gate on almost
/// every switch for the whole run; region B's lanes, on the same drain shard and collector, are
/// paced by the host itself: each B writer fills a buffer only once the lane's snapshot shows a
/// free buffer and ready-queue space for its switch, so it never waits at a gate (counted, not
/// timed) while the host serves it. If the engine waited on a starved lane (a drain or replenish
/// thread blocking on A's empty free queue), B's free queue would stay empty and the test fails
/// at its hang guard, naming the lane; no assertion depends on how fast any thread ran.
#[test]
fn a_starved_lane_does_not_stall_another_regions_lanes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let bound = ferry_watchdog::bound("the engine to start");
    const B_LANES: u32 = 2;
    const B_POOL: u32 = 16;
    const B_BUFFERS: u64 = 48;
    for svm in [true, false] {
        let arch = if svm { &A2A3 } else { &A5 };
        let region = |addr: u64, lanes: u32, pool: u32| {
            let mut b = DfxBuilder::new(arch);
            b.ready_queues(lanes).shards(1).ready_depth(32).free_slots(8).records_per_buffer(RPB);
            for l in 0..lanes {
                b.lane(l, 0, pool);
            }
            let cfg = b.build::<Rec>().unwrap();
            let mem: Arc<dyn DeviceMemory> = if svm {
                Arc::new(SvmMemory::new(cfg.region_size(), addr))
            } else {
                Arc::new(MirroredMemory::new(cfg.region_size(), addr))
            };
            // A frozen clock: Block's budget never runs out, so every wait is a real one.
            DfxTransport::<Rec>::new(cfg, mem, Arc::new(VirtualClock::new())).unwrap()
        };
        let (a, b) = (region(0x4000_0000, 1, 1), region(0x8000_0000, B_LANES, B_POOL));
        let (da, db) = (a.device_region(), b.device_region());
        let mut engine =
            DfxEngine::new(EngineConfig { drain_shards: Some(1), ..EngineConfig::default() });
        let none = || Arc::new(Stall::default());
        let ka = engine.add(a, move |s| Sink::new(s, Delay::None, none())).unwrap();
        let kb = engine.add(b, move |s| Sink::new(s, Delay::None, none())).unwrap();
        let host = engine.start();
        assert_eq!(host.threads(), 3, "one drain shard, one collector, one replenish thread");
        let stop = Arc::new(AtomicBool::new(false));
        let starved = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut w = da.writer::<Rec>(0, &[0]).unwrap();
                let mut i = 0;
                // Relaxed: a plain stop flag; the join below orders everything after it.
                while !stop.load(Ordering::Relaxed) || i < 8 * RPB as u64 {
                    w.record(0, [0, i]);
                    i += 1;
                }
                w.finish()[0]
            })
        };
        bound.waiting_for(format!(
            "svm={svm}: the host to serve region B's paced lanes while region A's lane is starved"
        ));
        let b_stats: Vec<_> = std::thread::scope(|scope| {
            let host = &host;
            let paced: Vec<_> = (0..B_LANES)
                .map(|q| {
                    let db = db.clone();
                    scope.spawn(move || {
                        let mut w = db.writer::<Rec>(q, &[q]).unwrap();
                        let started = std::time::Instant::now();
                        for i in 0..B_BUFFERS * RPB as u64 {
                            // A record that may switch buffers waits (here, not at a gate)
                            // until the host gave the lane a free buffer and queue space.
                            if i % RPB as u64 == 0 || (i + 1) % RPB as u64 == 0 {
                                loop {
                                    let s = host.lane_snapshot(1, q).unwrap();
                                    if s.free_len >= 1 && s.ready_space >= 1 {
                                        break;
                                    }
                                    assert!(
                                        started.elapsed() < Duration::from_secs(120),
                                        "hang guard: svm={svm}: the host stopped serving region \
                                         B's lane {q} while A was starved: {s:?}"
                                    );
                                    std::thread::sleep(Duration::from_micros(200));
                                }
                            }
                            w.record(0, [q as u64, i]);
                        }
                        w.finish()[0]
                    })
                })
                .collect();
            paced.into_iter().map(|h| h.join().unwrap()).collect()
        });
        stop.store(true, Ordering::Relaxed);
        bound.waiting_for(format!("svm={svm}: region A's starved writer to finish"));
        let a_stats = starved.join().unwrap();
        bound.waiting_for(format!("svm={svm}: the engine to stop"));
        let mut report = host.stop();
        let (ra, rb) = (report.take(ka), report.take(kb));
        // A was starved throughout, and lost nothing.
        assert!(a_stats.stall_waits >= 8, "region A's lane was never starved: {a_stats:?}");
        assert!(ra.is_reconciled(), "{:?}", ra.lanes);
        assert_eq!(ra.lanes[0].collected, a_stats.produced);
        assert_eq!(ra.lanes[0].dropped, 0);
        // B never waited, and lost nothing.
        assert!(rb.is_reconciled(), "{:?}", rb.lanes);
        for st in &b_stats {
            assert_eq!(st.produced, B_BUFFERS * RPB as u64);
            assert_eq!(st.switches as u64, B_BUFFERS);
            assert_eq!(
                (st.stall_waits, st.gate_timeouts),
                (0, 0),
                "svm={svm}: region B's lane {} waited while A was starved: {st:?}",
                st.lane
            );
        }
        for l in 0..B_LANES as usize {
            assert_eq!(rb.lanes[l].collected, B_BUFFERS * RPB as u64);
        }
        let vals = |r: &RunReport<Sink>, lane: u32| -> Vec<u64> {
            r.sinks.iter().flat_map(|s| s.seen.get(&lane).map(|e| e.1.clone())).flatten().collect()
        };
        assert_eq!(vals(&ra, 0), (0..a_stats.produced).collect::<Vec<_>>());
        for q in 0..B_LANES {
            assert_eq!(vals(&rb, q), (0..B_BUFFERS * RPB as u64).collect::<Vec<_>>());
        }
    }
}
