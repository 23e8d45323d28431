//! Prewarm under every fault point, at every occurrence a clean prewarm reaches (docs/design/copy-pool.md):
//! Prewarm never fails, so each injected fault must show up in the device's report, naming the
//! fault, with the device left lazy and uncapped; nothing leaks (device memory, pinned memory,
//! threads); the same engine then serves a gather that verifies, and the device comes back to
//! where it was once the engine is dropped. One test in its own binary: the thread count is the
//! whole process's.
mod common;
use common::*;
use ferry_copy::{transfer_detailed, HbmCopyEngine};
use ferry_sim::fault::{FaultPoint, InjectedFault};
use ferry_sim::{Device, Platform};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const STREAMS: usize = 2;

#[derive(Debug, PartialEq, Eq)]
struct Holdings {
    hbm_used: u64,
    pinned_live: u64,
    threads: usize,
}

fn holdings(d: &Device) -> Holdings {
    Holdings {
        hbm_used: d.memory().used(),
        pinned_live: d.pinned_stats().live_bytes,
        threads: std::fs::read_dir("/proc/self/task").map(|t| t.count()).unwrap_or(0),
    }
}

/// Waits (bounded) for `d` to come back to `base`.
fn settles(d: &Device, base: &Holdings) -> Result<(), Holdings> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = holdings(d);
        if now == *base {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(now);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Prewarm on another thread; the calling test's liveness bound turns a hang into a failure
/// that names the test.
fn prewarm_bounded(
    e: &Arc<HbmCopyEngine<ferry_sim::Platform>>,
    label: &str,
) -> ferry_copy::hbm::PrewarmReport {
    let (tx, rx) = mpsc::channel();
    let e2 = e.clone();
    let t = std::thread::spawn(move || {
        let _ = tx.send(e2.prewarm(STREAMS));
    });
    let r = rx.recv().unwrap_or_else(|_| panic!("{label}: the prewarm thread panicked"));
    t.join().unwrap();
    r
}

/// One gather of 13 scattered 4 KiB fragments to device memory, verified.
fn gather_verifies(p: &Platform, e: &HbmCopyEngine<ferry_sim::Platform>) -> Result<(), String> {
    const N: u64 = 13;
    let mut host = pattern((2 * N * 4 * KIB) as usize, 9);
    register(e, &mut host);
    let h = host_ref(&mut host);
    let dev = p.device(0).unwrap();
    let buf = dev.malloc(N * 4 * KIB).unwrap();
    let d = ferry_copy::TransferRef::device(0, buf, N * 4 * KIB);
    let items = scattered(h, 0, d, 0, 4 * KIB, N, 0);
    let o = transfer_detailed(e, &items);
    let res = if o.is_ok() {
        let got = read_dev(p, 0, buf, (N * 4 * KIB) as usize);
        let back = scattered(h, 0, h, 0, 4 * KIB, N, 0);
        std::panic::catch_unwind(|| check_items(&back, &host, &got))
            .map_err(|_| "the gather's destination is wrong".to_string())
    } else {
        Err(format!("{o:?}"))
    };
    e.clear_host_gather_regions();
    dev.free(buf).unwrap();
    res
}

#[test]
fn prewarm_reports_every_fault_and_leaves_the_device_serving() {
    let _bound = ferry_watchdog::bound("the prewarm and copy threads");
    let p = platform(1);
    let dev = p.device(0).unwrap().clone();
    // A first engine's life makes what the device keeps (the null stream, copy-engine queues).
    let first = engine(&p);
    assert!(prewarm_bounded(&first, "clean").devices[0].errors.is_empty());
    gather_verifies(&p, &first).unwrap();
    drop(first);
    let base = holdings(&dev);
    // What a clean prewarm reaches, per point.
    let before: Vec<u64> = FaultPoint::ALL.iter().map(|&f| dev.faults().seen(f)).collect();
    let clean = engine(&p);
    let r = prewarm_bounded(&clean, "clean");
    assert_eq!((r.devices[0].streams, r.devices[0].cap), (STREAMS, STREAMS), "{r:?}");
    let totals: Vec<u64> =
        FaultPoint::ALL.iter().zip(&before).map(|(&f, b)| dev.faults().seen(f) - b).collect();
    drop(clean);
    settles(&dev, &base).unwrap_or_else(|h| panic!("a clean engine leaked: {h:?} vs {base:?}"));
    for must in [FaultPoint::Copy, FaultPoint::DeviceAlloc, FaultPoint::Synchronize] {
        assert!(totals[must as usize] > 0, "prewarm reaches {must:?}");
    }
    let mut problems = Vec::new();
    let mut injected = 0;
    for (i, &point) in FaultPoint::ALL.iter().enumerate() {
        for k in 1..=totals[i] {
            let label = format!("{point:?} #{k}/{}", totals[i]);
            let e = engine(&p);
            let occurrence = dev.faults().seen(point) + k;
            dev.faults().fail_nth(point, k);
            let r = prewarm_bounded(&e, &label);
            let reached = dev.faults().seen(point) >= occurrence;
            dev.faults().clear();
            let want = InjectedFault { point, occurrence }.to_string();
            let d = &r.devices[0];
            // Every slot warmed and synchronized went back to the pool; every failed one was
            // discarded: the report's count is what the pool holds.
            let pooled = e.pool_stats(0).unwrap().created;
            if !reached {
                problems.push(format!("{label}: not reached (the clean prewarm reached it)"));
            } else if !d.errors.iter().any(|m| m.contains(&want)) {
                problems.push(format!("{label}: the report does not name `{want}`: {d:?}"));
            } else if d.cap != 0 {
                problems.push(format!("{label}: a failed device was capped: {d:?}"));
            } else if d.streams != pooled {
                problems.push(format!("{label}: {} streams reported, {pooled} pooled", d.streams));
            } else {
                injected += 1;
            }
            if let Err(m) = gather_verifies(&p, &e) {
                problems.push(format!("{label}: the engine does not serve afterwards: {m}"));
            }
            drop(e);
            if let Err(h) = settles(&dev, &base) {
                problems.push(format!("{label}: leaked: {h:?} vs {base:?}"));
            }
        }
    }
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
    assert!(injected >= 3, "the sweep injected {injected} faults");
    let weak = dev.downgrade();
    drop(dev);
    drop(p);
    assert!(weak.upgrade().is_none(), "the device outlived its platform and the engines");
}
