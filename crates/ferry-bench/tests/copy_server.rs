//! The copy server emulator and the gather bench at small size: counters and correctness, never
//! times.
use ferry_bench::copy::{self as bench, CopyBenchConfig};
use ferry_bench::copy_server::{self as emulator, EmulatorConfig};

#[test]
fn emulator_with_prewarm_creates_no_queue_after_start() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let cfg = EmulatorConfig::small();
    let r = emulator::run(&cfg).unwrap();
    for run in [&r.without_prewarm, &r.with_prewarm] {
        assert_eq!(run.calls, cfg.threads * cfg.calls);
        assert_eq!(run.failed_items, 0, "{run:?}");
        assert_eq!(run.verified, Some(true), "{run:?}");
        assert!(run.gathers > 0 && run.fallback_plans > 0, "{run:?}");
        assert!(run.bytes > 0);
    }
    let (lazy, warm) = (&r.without_prewarm, &r.with_prewarm);
    assert_eq!(warm.prewarm_streams, cfg.prewarm_streams);
    assert_eq!(warm.queues_created_after_start, 0, "{warm:?}");
    assert_eq!(warm.streams_created_after_start, 0);
    assert_eq!(warm.code_object_loads_after_start, 0);
    assert!(lazy.queues_created_after_start > 0, "{lazy:?}");
    assert!(lazy.streams_created_after_start > 0);
    assert_eq!(lazy.code_object_loads_after_start, u64::from(cfg.devices));
    assert_eq!(r.rounds.len(), 1);
    let j = r.to_json();
    assert!(
        j.contains("\"with_prewarm\":{") && j.contains("\"queues_created_after_start\":0"),
        "{j}"
    );
    assert!(j.contains("\"freeze_ratio\":") && j.contains("\"round_freeze_ratios\":["), "{j}");
}

#[test]
fn emulator_rounds_interleave_and_an_eviction_is_survived() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let cfg = EmulatorConfig {
        rounds: 2,
        eviction: Some((std::time::Duration::ZERO, std::time::Duration::from_millis(30))),
        ..EmulatorConfig::small()
    };
    let r = emulator::run(&cfg).unwrap();
    assert_eq!(r.rounds.len(), 2);
    for (lazy, warm) in &r.rounds {
        assert_eq!(warm.queues_created_after_start, 0, "{warm:?}");
        assert!(lazy.queues_created_after_start > 0, "{lazy:?}");
        for run in [lazy, warm] {
            assert_eq!(run.evictions, u64::from(cfg.devices), "one eviction per device");
            assert_eq!((run.failed_items, run.verified), (0, Some(true)), "{run:?}");
        }
    }
    // The summaries: counters are the most any round saw, `verified` needs every round.
    assert_eq!(r.with_prewarm.queues_created_after_start, 0);
    assert_eq!(r.with_prewarm.verified, Some(true));
    assert!(r.freeze_ratio().is_finite());
}

#[test]
fn emulator_rejects_an_empty_configuration() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let cfg = EmulatorConfig { threads: 0, ..EmulatorConfig::small() };
    assert!(emulator::run(&cfg).is_err());
}

#[test]
fn bench_runs_every_path_at_small_size() {
    let _bound = ferry_watchdog::bound("the copy engines' threads");
    let r = bench::run(&CopyBenchConfig::quick()).unwrap();
    let paths: Vec<_> = r.rows.iter().map(|r| r.engine_path).collect();
    assert_eq!(paths, ["gather", "gather", "copy-engine"]);
    assert!(r.plan_ns_per_item > 0.0);
    let j = r.to_json();
    assert!(j.starts_with("{\"area\":\"copy\"") && j.contains("\"plan_ns_per_item\""), "{j}");
}
