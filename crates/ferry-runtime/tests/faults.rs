//! Fault injection through the runtime: every [`FaultPoint`] at the places one run reaches it.
//!
//! A clean run of the vector example (`--small`) counts, per point, the operations of each
//! stage ([`Stage`]: DFX start, prepare, launch, finalize, DFX finish). The sweep then arms
//! one occurrence at a time ([`FaultInjector::fail_nth`](ferry_sim::fault::FaultInjector)),
//! runs again on the same runner and classifies the outcome ([`Outcome`]); for every injection
//! it asserts
//! - the typed error that carries the injected fault (no panic; a watchdog bounds every step);
//! - nothing leaked: device memory, pinned host memory, the process's threads and the files
//!   under the device root are back to what they were before the injected run;
//! - the next run on the same runner verifies its outputs;
//!
//! and per configuration that a fresh runner on the same device works and leaves the device as
//! the first one did, and that the device itself is released with its last handle.
//!
//! The normal suite sweeps the first, middle and last occurrence of each point on four
//! configurations; `stress_every_occurrence_on_both_arches` (ignored) sweeps every occurrence of
//! every configuration. Everything runs in one test per mode because the thread count is the
//! whole process's: tests of this binary must not run side by side.
#[path = "faults/harness.rs"]
mod harness;

use ferry_runtime::examples::{Example, ExampleRun, Size};
use ferry_runtime::host::{DeviceRunner, RunnerConfig, Variant};
use ferry_sim::fault::{FaultPoint, InjectedFault};
use ferry_sim::{Arch, PlatformBuilder};
use harness::{settled_holdings, settles_to, staged_run, Case, Marks, Stage, Watchdog, STAGES};
use std::path::PathBuf;
use std::time::Duration;

/// Which occurrences of a point the sweep injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spread {
    /// First, middle and last.
    Ends,
    /// Every one.
    All,
}

impl Spread {
    fn pick(self, total: u64) -> Vec<u64> {
        let mut v = match self {
            Spread::Ends => vec![1, total.div_ceil(2), total],
            Spread::All => (1..=total).collect(),
        };
        v.dedup();
        v
    }
}

/// How one injected run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// The run (or its DFX session) failed at this stage with the injected fault.
    Failed(Stage),
    /// The fault was reached by an operation whose failure the runtime handles by design; the
    /// run succeeded and verified.
    Recovered(&'static str),
    /// The injected occurrence was never reached: say why it cannot fail the run.
    NotReached(&'static str),
}

/// Where an injected fault is absorbed by design rather than failing the run. Every entry says
/// why; anything else that returns `Ok` with the fault consumed is a swallowed error.
fn recovery(point: FaultPoint, stage: Stage) -> Option<&'static str> {
    match (point, stage) {
        // Every other synchronize of finalize is a blocking result or output copy, which fails
        // the run; the one that can fail without failing it is the launch slot's completion
        // boundary (`finish_run`), which docs/design/launch.md discharges: a second drain proves both streams
        // idle and the run, which finished, retires on the discharge path.
        (FaultPoint::Synchronize, Stage::Finalize) => Some(
            "the launch slot's failed completion boundary was discharged (docs/design/launch.md)",
        ),
        _ => None,
    }
}

fn stage_of(marks: &Marks, point: FaultPoint, k: u64) -> Stage {
    let m = &marks[point as usize];
    STAGES.into_iter().find(|&s| m[s as usize] >= k).unwrap_or(Stage::DfxFinish)
}

fn runner_config(case: Case) -> RunnerConfig {
    let cfg = RunnerConfig { timeout: Duration::from_secs(10), ..RunnerConfig::small(case.arch) };
    if case.full {
        cfg
    } else {
        cfg.in_process()
    }
}

/// A device root of its own (removed at the end), so its files are this sweep's alone.
fn private_root() -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    // Relaxed: a unique name only.
    let n = N.fetch_add(1, Ordering::Relaxed);
    let root = std::env::temp_dir().join(format!("ferry-faults-{}-{n}", std::process::id()));
    ferry_sim::device_root::ensure_private(&root).unwrap();
    root
}

fn clean_run(r: &mut DeviceRunner, ex: &ExampleRun, case: Case, what: &str) -> Marks {
    let mut marks = Marks::default();
    let out = staged_run(r, ex, case, &mut marks)
        .unwrap_or_else(|(s, e)| panic!("{case:?}: {what}: failed at {s:?}: {e:?}"));
    ex.verify(&out).unwrap_or_else(|e| panic!("{case:?}: {what}: {e}"));
    marks
}

/// Sweeps one configuration; every broken rule goes into `problems`, every outcome into `rows`.
fn sweep_case(
    case: Case,
    spread: Spread,
    dog: &Watchdog,
    rows: &mut Vec<String>,
    problems: &mut Vec<String>,
) {
    let cfg = runner_config(case);
    let root = private_root();
    let platform = PlatformBuilder::new(case.arch)
        .hbm_bytes(cfg.hbm_bytes)
        .device_root(&root)
        .build()
        .unwrap();
    let dev = platform.device(0).unwrap().clone();
    let ex = Example::Vector.build(Size::Small).with_variant(case.variant);
    dog.step(format!("{case:?}: first runner"));
    let mut r = DeviceRunner::init(dev.clone(), cfg).unwrap();
    r.register_callable(0, ex.callable.clone()).unwrap();
    // The first run makes what runs keep (the null stream, copy-engine queues, the launch slot's
    // buffers); the second one's counts are the steady state the sweep injects into.
    clean_run(&mut r, &ex, case, "first clean run");
    let marks = clean_run(&mut r, &ex, case, "second clean run");
    let base = settled_holdings(&dev, &root);
    for point in FaultPoint::ALL {
        let total = marks[point as usize][Stage::DfxFinish as usize];
        if total == 0 {
            rows.push(format!("{case:?} {point:?}: -  not reached by a clean run"));
            continue;
        }
        for k in spread.pick(total) {
            let label =
                format!("{case:?} {point:?} #{k}/{total} ({:?})", stage_of(&marks, point, k));
            if spread == Spread::Ends && case.full && point == FaultPoint::Launch && k > 1 {
                // The later launches race: one of them is the AICore entry's own start of the
                // cores, whose failure the schedulers see only at their 10 s core deadline
                // (`CORE_DEADLINE`, a device constant). The stress sweep injects them all.
                rows.push(format!("{label}: skipped here (costs the core deadline), in stress"));
                continue;
            }
            dog.step(label.clone());
            let before = dev.faults().seen(point);
            dev.faults().fail_nth(point, k);
            let want = InjectedFault { point, occurrence: before + k };
            let mut m = Marks::default();
            let started = std::time::Instant::now();
            let res = staged_run(&mut r, &ex, case, &mut m);
            let reached = dev.faults().seen(point) >= before + k;
            dev.faults().clear();
            let outcome = match (&res, reached) {
                (Err((stage, e)), true) if harness::carries(e, want) => {
                    Some(Outcome::Failed(*stage))
                }
                (Err((stage, e)), _) => {
                    problems.push(format!("{label}: wrong error at {stage:?}: {e:?}"));
                    None
                }
                (Ok(out), reached) => match ex.verify(out) {
                    Err(e) => {
                        problems.push(format!("{label}: the run succeeded with wrong output: {e}"));
                        None
                    }
                    Ok(_) if !reached => Some(Outcome::NotReached(
                        "this run did fewer operations of the point than the clean run",
                    )),
                    Ok(_) => match recovery(point, stage_of(&marks, point, k)) {
                        Some(why) => Some(Outcome::Recovered(why)),
                        None => {
                            problems.push(format!("{label}: the fault was swallowed (Ok)"));
                            None
                        }
                    },
                },
            };
            if let Some(o) = &outcome {
                rows.push(format!("{label}: {o:?} in {:?}", started.elapsed()));
            }
            if let Err(d) = settles_to(&dev, &root, &base) {
                problems.push(format!("{label}: leaked after the injected run: {d}"));
            }
            let mut m = Marks::default();
            match staged_run(&mut r, &ex, case, &mut m) {
                Ok(out) => {
                    if let Err(e) = ex.verify(&out) {
                        problems.push(format!("{label}: the next run is wrong: {e}"));
                    }
                }
                Err((s, e)) => {
                    problems.push(format!("{label}: the next run failed at {s:?}: {e:?}"))
                }
            }
            if let Err(d) = settles_to(&dev, &root, &base) {
                problems.push(format!("{label}: leaked after the next run: {d}"));
            }
            if !problems.is_empty() && problems.len() > 40 {
                return; // enough to act on
            }
        }
    }
    dog.step(format!("{case:?}: fresh runner"));
    drop(r);
    let after_first = settled_holdings(&dev, &root);
    let mut fresh = DeviceRunner::init(dev.clone(), cfg).unwrap();
    fresh.register_callable(0, ex.callable.clone()).unwrap();
    clean_run(&mut fresh, &ex, case, "fresh runner on the same device");
    drop(fresh);
    if let Err(d) = settles_to(&dev, &root, &after_first) {
        problems.push(format!("{case:?}: a second runner's life leaked: {d}"));
    }
    let weak = dev.downgrade();
    drop(dev);
    drop(platform);
    if weak.upgrade().is_some() {
        problems.push(format!("{case:?}: the device outlived its platform and every handle"));
    }
    let _ = std::fs::remove_dir_all(&root);
}

fn sweep(cases: &[Case], spread: Spread) {
    let dog = Watchdog::start();
    let (mut rows, mut problems) = (Vec::new(), Vec::new());
    for &case in cases {
        sweep_case(case, spread, &dog, &mut rows, &mut problems);
    }
    for r in &rows {
        eprintln!("{r}");
    }
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
    assert!(rows.iter().any(|r| r.contains("Failed")), "the sweep injected nothing");
}

const fn case(arch: Arch, variant: Variant, full: bool, dfx: bool) -> Case {
    Case { arch, variant, full, dfx }
}

#[test]
fn every_fault_point_at_its_first_middle_and_last_occurrence() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    use Variant::{DeviceOrchestrated as Dev, HostBuiltGraph as Host};
    sweep(
        &[
            case(Arch::A2a3, Dev, true, false),
            case(Arch::A2a3, Host, true, true),
            case(Arch::A5, Host, true, false),
            case(Arch::A5, Dev, false, true),
        ],
        Spread::Ends,
    );
}

#[test]
#[ignore = "stress: every occurrence of every point, 16 configurations (minutes)"]
fn stress_every_occurrence_on_both_arches() {
    let mut cases = Vec::new();
    for arch in Arch::ALL {
        for variant in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            for full in [true, false] {
                for dfx in [false, true] {
                    cases.push(case(arch, variant, full, dfx));
                }
            }
        }
    }
    sweep(&cases, Spread::All);
}
