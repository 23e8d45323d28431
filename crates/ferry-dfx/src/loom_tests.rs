//! Loom models of the transport's internals (through this crate's `sync` module): the ready queue, the free queue, both
//! gates with their budget, the recycle/retry path, the host SPSC ring and the parker wake-up.
//!
//! Capacities are shrunk (ready depth 2, one or two buffers, one record per buffer) so every
//! model finishes in seconds to minutes with `LOOM_MAX_PREEMPTIONS=2`:
//!
//! ```text
//! RUSTFLAGS="--cfg ferry_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p ferry-dfx --release --lib loom
//! ```
//!
//! The device side runs on a loom thread through the real [`DeviceWriter`]; the host side runs
//! the real drain shard, collector and replenish steps on the model's main thread (the thread
//! split of the real profiler adds no shared state beyond the SPSC rings, modelled separately).

use std::sync::Arc as StdArc;
use std::sync::Mutex as StdMutex;

use ferry_abi::arch::A2A3;
use loom::sync::atomic::AtomicBool;
use loom::thread;

use crate::clock::VirtualClock;
use crate::host::{CollectedBuffer, Parts};
use crate::mem::{DeviceMemory, MirroredMemory, SvmMemory};
use crate::sync::atomic::Ordering;
use crate::sync::{Arc, Parker};
use crate::{spsc, DeviceRegion, DfxBuilder, DfxTransport, Policy};

type Seen = StdArc<StdMutex<Vec<(u32, u32, Vec<u64>)>>>;

type Sink = Box<dyn FnMut(&CollectedBuffer<'_, u64>) + Send>;

fn setup(
    buffers: u32,
    depth: u32,
    policy: Policy,
    budget: u64,
    clock: VirtualClock,
    svm: bool,
) -> (DeviceRegion, Parts<u64, Sink>, Seen) {
    let cfg = DfxBuilder::new(&A2A3)
        .ready_queues(1)
        .ready_depth(depth)
        .free_slots(2)
        .lane(0, 0, buffers)
        .records_per_buffer(1)
        .policy(policy)
        .block_budget_cycles(budget)
        .drop_wait_cycles(budget)
        .build::<u64>()
        .unwrap();
    let mem: std::sync::Arc<dyn DeviceMemory> = if svm {
        std::sync::Arc::new(SvmMemory::new(cfg.region_size(), 0x1000))
    } else {
        std::sync::Arc::new(MirroredMemory::new(cfg.region_size(), 0x1000))
    };
    let t = DfxTransport::<u64>::new(cfg, mem, std::sync::Arc::new(clock)).unwrap();
    let device = t.device_region();
    let seen: Seen = StdArc::new(StdMutex::new(Vec::new()));
    let s2 = seen.clone();
    let parts = t.into_parts(move |_| {
        let s = s2.clone();
        Box::new(move |b: &CollectedBuffer<'_, u64>| {
            s.lock().unwrap().push((b.lane, b.seq, b.records.to_vec()));
        }) as Sink
    });
    (device, parts, seen)
}

/// The most branch points (scheduling choices and racing loads) one execution of a model may
/// take before loom fails it as a spin: the largest model here (`loom_ready_queue_push_gate`,
/// whose host polls while the writer records, finishes and logs its run's end) takes between
/// 2,000 and 3,000, so a wait that never ends (a gate whose budget is re-armed on every pass)
/// fails at this cap instead of growing until the machine runs out of memory. It replaces
/// loom's own default (1,000), which the largest model outgrew.
const MAX_BRANCHES: usize = 5_000;

/// The resident size past which the models' process counts as hung. A device thread that spins
/// at a gate whose budget never runs out (re-armed on every pass) on a virtual clock takes no
/// branch point loom could cap, yet loom records every step: the process grows by about
/// 120 MiB a second (to ~24 GB before the machine killed it). Every model here, all running at
/// once, needs a small fraction of this cap.
const MAX_RESIDENT: u64 = 2 << 30;

/// Runs one model under explicit bounds: loom's settings from the environment
/// (`LOOM_MAX_PREEMPTIONS` bounds preemptions, unset: every interleaving), at most
/// [`MAX_BRANCHES`] branch points per execution (`LOOM_MAX_BRANCHES` may lower it), and a
/// liveness bound that names the model if an execution never ends without branching (a wait
/// that spins on state nobody changes): `ferry-watchdog` aborts the test process with the
/// model's name once the process passes [`MAX_RESIDENT`] bytes, or after
/// three times `FERRY_TEST_BOUND_SECS` (15 minutes by default; the models take seconds).
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    model_with_preemptions(name, None, f);
}

/// [`model`] with at most `preemptions` preemptions per execution where the environment sets
/// none (or a larger number): for a model too large to explore every interleaving in CI's
/// time, bugs that need more preemptions than that are rare in practice.
fn model_with_preemptions(
    name: &str,
    preemptions: Option<usize>,
    f: impl Fn() + Sync + Send + 'static,
) {
    // Three liveness bounds of time (15 minutes by default): CI's own bound on a model target.
    let _bound = ferry_watchdog::bound_with_memory_for(
        format!("loom to explore every execution of {name}"),
        3 * ferry_watchdog::configured_bound(),
        MAX_RESIDENT,
    );
    let mut b = loom::model::Builder::new();
    // `Builder::new` takes `LOOM_MAX_BRANCHES` from the environment, or loom's default: an
    // explicit setting may lower the cap, the default is replaced by it.
    b.max_branches = match std::env::var_os("LOOM_MAX_BRANCHES") {
        Some(_) => b.max_branches.min(MAX_BRANCHES),
        None => MAX_BRANCHES,
    };
    if let Some(p) = preemptions {
        b.preemption_bound = Some(b.preemption_bound.map_or(p, |e| e.min(p)));
    }
    b.check(f);
}

/// One host step: drain sweep (with retry), collect, replenish.
fn host_step(p: &mut Parts<u64, Sink>) {
    p.engine.step();
}

/// Recycle/retry path: one lane, one shard, a one-buffer pool, Block policy. The lane's only
/// buffer must come back through collector → replenish → recycled → retry each time; no lost or
/// duplicated buffer, no deadlock.
#[test]
fn loom_recycle_retry_one_buffer_pool() {
    model("loom_recycle_retry_one_buffer_pool", || {
        let (device, mut parts, seen) =
            setup(1, 2, Policy::Block, u64::MAX, VirtualClock::new(), true);
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let dev = thread::spawn(move || {
            let mut w = device.writer::<u64>(0, &[0]).unwrap();
            w.record(0, 10);
            w.record(0, 11);
            let st = w.finish();
            // Release: pairs with the Acquire load below; the host's last sweep sees everything.
            d2.store(true, Ordering::Release);
            st
        });
        // Acquire: pairs with the Release store above.
        while !done.load(Ordering::Acquire) {
            host_step(&mut parts);
            thread::yield_now();
        }
        host_step(&mut parts);
        let st = dev.join().unwrap();
        assert_eq!((st[0].produced, st[0].dropped, st[0].switches), (2, 0, 2));
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, vec![(0, 0, vec![10]), (0, 1, vec![11])]);
        let report = parts.report();
        assert!(report.is_reconciled());
    });
}

/// Ready queue (capacity 1) and push gate, non-SVM: the writer publishes two buffers through a
/// one-entry ring while the host drains it; records arrive once, in order.
#[test]
fn loom_ready_queue_push_gate() {
    model("loom_ready_queue_push_gate", || {
        let (device, mut parts, seen) =
            setup(2, 2, Policy::Block, u64::MAX, VirtualClock::new(), false);
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let dev = thread::spawn(move || {
            let mut w = device.writer::<u64>(0, &[0]).unwrap();
            w.record(0, 1);
            w.record(0, 2);
            w.finish();
            // Release: pairs with the Acquire load below.
            d2.store(true, Ordering::Release);
        });
        // Acquire: pairs with the Release store above.
        while !done.load(Ordering::Acquire) {
            host_step(&mut parts);
            thread::yield_now();
        }
        host_step(&mut parts);
        dev.join().unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, vec![(0, 0, vec![1]), (0, 1, vec![2])]);
        assert!(parts.report().is_reconciled());
    });
}

/// Two buffers queued while the host pushes: a ready ring of two entries, a two-buffer lane,
/// three records (one per buffer), non-SVM, Block policy. The writer publishes both buffers
/// (both queued at once) and its third record waits for a buffer the host recycles into the
/// free queue while the host is still draining the second; every record arrives once, in
/// order, and each buffer ends held by the lane or queued for it.
#[test]
fn loom_two_buffers_queued_while_the_host_pushes() {
    // Every interleaving of this model takes minutes; five preemptions take seconds.
    model_with_preemptions("loom_two_buffers_queued_while_the_host_pushes", Some(5), || {
        let (device, mut parts, seen) =
            setup(2, 3, Policy::Block, u64::MAX, VirtualClock::new(), true);
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let dev = thread::spawn(move || {
            let mut w = device.writer::<u64>(0, &[0]).unwrap();
            w.record(0, 1);
            w.record(0, 2);
            w.record(0, 3);
            let held = w.has_buffer(0);
            let st = w.finish();
            // Release: pairs with the Acquire load below.
            d2.store(true, Ordering::Release);
            (st, held)
        });
        // Acquire: pairs with the Release store above.
        while !done.load(Ordering::Acquire) {
            host_step(&mut parts);
            thread::yield_now();
        }
        // Two more steps: the last buffer is collected by one and queued back by the next.
        host_step(&mut parts);
        host_step(&mut parts);
        let (st, held) = dev.join().unwrap();
        assert_eq!((st[0].produced, st[0].dropped, st[0].switches), (3, 0, 3));
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, vec![(0, 0, vec![1]), (0, 1, vec![2]), (0, 2, vec![3])]);
        // Buffer conservation: each of the two is held by the lane or queued for it.
        assert_eq!(parts.free_len(0) + u32::from(held), 2);
        assert!(parts.report().is_reconciled());
    });
}

/// Pop gate with a budget racing the host's push into the free queue: whichever wins, the
/// buffer is in exactly one place (claimed by the lane, or waiting in its free queue).
#[test]
fn loom_free_queue_pop_gate_budget() {
    model("loom_free_queue_pop_gate_budget", || {
        let clock = VirtualClock::ticking(1);
        let (device, mut parts, _seen) = setup(1, 2, Policy::Drop, 3, clock, true);
        let dev = thread::spawn(move || {
            let mut w = device.writer::<u64>(0, &[0]).unwrap();
            w.record(0, 7); // publishes its only buffer, then waits at most 3 cycles for it
            let got = w.has_buffer(0);
            (w, got)
        });
        // The host returns the buffer once (bounded: four steps always suffice).
        for _ in 0..4 {
            host_step(&mut parts);
            thread::yield_now();
        }
        let (mut w, got) = dev.join().unwrap();
        let free = parts.free_len(0);
        // Now the host is idle: the buffer is either the lane's or in its free queue, never both
        // and never neither (the host loop above delivered it).
        if got {
            assert_eq!(free, 0);
        } else {
            assert_eq!(free, 1);
            // The lane claims the waiting buffer (no loss) and, one record per buffer, publishes it.
            w.record(0, 8);
            let st = w.stats()[0];
            assert_eq!((st.switches, st.dropped), (2, 0), "{st:?}");
        }
        let st = w.finish();
        host_step(&mut parts);
        let report = parts.report();
        assert_eq!(report.lanes[0].produced, st[0].produced);
        assert!(report.is_reconciled(), "{:?}", report.lanes);
    });
}

/// Push gate with a budget racing the host's pop: either the second buffer is published (and
/// collected) or it times out and exactly its records are accounted dropped.
#[test]
fn loom_push_gate_budget() {
    model("loom_push_gate_budget", || {
        let clock = VirtualClock::ticking(1);
        let (device, mut parts, seen) = setup(2, 2, Policy::Drop, 2, clock, true);
        let dev = thread::spawn(move || {
            let mut w = device.writer::<u64>(0, &[0]).unwrap();
            w.record(0, 1);
            w.record(0, 2); // the ring holds one entry: waits ≤ 2 cycles for the host's pop
            w.stats()[0]
        });
        host_step(&mut parts);
        let st = dev.join().unwrap();
        host_step(&mut parts);
        host_step(&mut parts);
        let seen = seen.lock().unwrap().clone();
        let collected: Vec<u64> = seen.iter().flat_map(|s| s.2.clone()).collect();
        // No duplicate, no reordering; dropped exactly what was not published.
        assert!(collected == vec![1, 2] || collected == vec![1] || collected.is_empty());
        assert_eq!(st.produced, 2);
        assert!(st.dropped as usize + st.switches as usize == 2, "{st:?}");
        assert!(collected.len() <= st.switches as usize);
    });
}

/// The shared engine: two regions of different record sizes (one lane each, two-buffer pools,
/// one record per buffer) on one drain shard, one collector and one replenish thread, each
/// written by its own device thread while the host steps. Every record reaches its own region's
/// sink exactly once, in order; every buffer ends in its own region's lane (held or queued,
/// never lost, never in the other region); both regions reconcile.
#[test]
fn loom_shared_engine_two_regions() {
    model("loom_shared_engine_two_regions", || {
        fn transport<R: crate::Record>(addr: u64) -> DfxTransport<R> {
            let cfg = DfxBuilder::new(&A2A3)
                .ready_queues(1)
                .ready_depth(3)
                .free_slots(2)
                .lane(0, 0, 2)
                .records_per_buffer(1)
                .policy(Policy::Drop)
                .drop_wait_cycles(2)
                .build::<R>()
                .unwrap();
            let mem = std::sync::Arc::new(SvmMemory::new(cfg.region_size(), addr));
            let clock = std::sync::Arc::new(VirtualClock::ticking(1));
            DfxTransport::<R>::new(cfg, mem, clock).unwrap()
        }
        let a = transport::<u64>(0x1000);
        let b = transport::<[u64; 2]>(0x10_0000);
        let (da, db) = (a.device_region(), b.device_region());
        let seen_a: Seen = StdArc::new(StdMutex::new(Vec::new()));
        let seen_b: StdArc<StdMutex<Vec<(u32, [u64; 2])>>> = StdArc::new(StdMutex::new(Vec::new()));
        let mut e = crate::DfxEngine::new(crate::EngineConfig::default());
        let (sa, sb) = (seen_a.clone(), seen_b.clone());
        let ka = e
            .add(a, move |_| {
                let s = sa.clone();
                Box::new(move |b: &CollectedBuffer<'_, u64>| {
                    s.lock().unwrap().push((b.lane, b.seq, b.records.to_vec()));
                }) as Sink
            })
            .unwrap();
        let kb = e
            .add(b, move |_| {
                let s = sb.clone();
                move |b: &CollectedBuffer<'_, [u64; 2]>| {
                    s.lock().unwrap().extend(b.records.iter().map(|r| (b.seq, *r)));
                }
            })
            .unwrap();
        let mut parts = e.into_parts();
        let ta = thread::spawn(move || {
            let mut w = da.writer::<u64>(0, &[0]).unwrap();
            w.record(0, 1);
            w.record(0, 2); // second buffer published; the pop gate may give up (Drop)
            let held = w.has_buffer(0);
            (w.finish()[0], held)
        });
        let tb = thread::spawn(move || {
            let mut w = db.writer::<[u64; 2]>(0, &[0]).unwrap();
            w.record(0, [7, 7]);
            w.record(0, [8, 8]);
            let held = w.has_buffer(0);
            (w.finish()[0], held)
        });
        parts.step();
        let (sta, held_a) = ta.join().unwrap();
        let (stb, held_b) = tb.join().unwrap();
        parts.step();
        parts.step();
        assert_eq!(seen_a.lock().unwrap().clone(), vec![(0, 0, vec![1]), (0, 1, vec![2])]);
        assert_eq!(seen_b.lock().unwrap().clone(), vec![(0, [7, 7]), (1, [8, 8])]);
        assert_eq!((sta.dropped, stb.dropped), (0, 0));
        // Buffer conservation per region: each of the two is held by the lane or queued for it.
        assert_eq!(parts.free_len(0, 0) + u32::from(held_a), 2);
        assert_eq!(parts.free_len(1, 0) + u32::from(held_b), 2);
        let mut r = parts.report();
        let (ra, rb) = (r.take(ka), r.take(kb));
        assert!(ra.is_reconciled() && rb.is_reconciled());
        assert_eq!((ra.totals(), rb.totals()), ((2, 2, 0), (2, 2, 0)));
    });
}

/// The host SPSC ring: FIFO, nothing lost or duplicated across a wrap.
#[test]
fn loom_spsc_ring() {
    model("loom_spsc_ring", || {
        let (mut p, mut c) = spsc::channel::<u32>(2);
        let t = thread::spawn(move || {
            for i in 0..3 {
                let mut v = i;
                while let Err(back) = p.push(v) {
                    v = back;
                    thread::yield_now();
                }
            }
        });
        let mut got = Vec::new();
        while got.len() < 3 {
            match c.pop() {
                Some(v) => got.push(v),
                None => thread::yield_now(),
            }
        }
        t.join().unwrap();
        assert_eq!(got, vec![0, 1, 2]);
    });
}

/// The doorbell: "check, then park" never misses a wake-up that follows a push.
#[test]
fn loom_parker_doorbell() {
    model("loom_parker_doorbell", || {
        let (mut p, mut c) = spsc::channel::<u32>(2);
        let parker = Parker::new();
        let bell = parker.unparker().clone();
        let t = thread::spawn(move || {
            p.push(1).unwrap();
            bell.unpark();
        });
        loop {
            if c.pop().is_some() {
                break;
            }
            parker.park();
        }
        t.join().unwrap();
    });
}
