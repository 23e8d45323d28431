//! The areas' reports as `ferry bench` prints them, from fixed figures: the text line by line,
//! and every JSON object one valid object holding its parts.
use std::time::Duration;

use ferry_bench::contention::{Beside, ContentionReport, MAX_ROUNDS};
use ferry_bench::copy::{BenchReport, GatherRow};
use ferry_bench::launch::{LaunchArea, LaunchBenchConfig, LaunchBenchReport};
use ferry_bench::launch_series::{LaunchSeriesConfig, LaunchSeriesReport, SerialPhases};
use ferry_bench::sim::{SimArea, SimBenchReport};
use ferry_bench::AreaReport;
use serde_json::Value;

fn parse(json: &str) -> Value {
    serde_json::from_str(json).unwrap_or_else(|e| panic!("not one JSON object ({e}): {json}"))
}

#[test]
fn the_runtime_report_prints_its_rates_and_the_overhead_over_the_baseline() {
    let r = ferry_bench::runtime::RuntimeBenchReport {
        arch: "a2a3",
        aicpu_threads: 4,
        cores: 24,
        tasks: 1000,
        rounds: 5,
        device_orch_wall_s: 0.01,
        host_graph_wall_s: 0.005,
        host_graph_prepare_s: 0.002,
        baseline_ns_per_task: 100.0,
        device_orch_long_yields: 0,
        host_graph_long_yields: 3,
    };
    assert_eq!(
        AreaReport::to_text(&r),
        "task runtime on a simulated a2a3 chip: 4 AICPU threads, 24 cores, storm of 1000 tasks \
         (medians of 5 rounds)\n\
         \x20 device-orchestrated: 100000 tasks/s (10000 ns/task)\n\
         \x20 host-built graph:    200000 tasks/s (5000 ns/task; prepare 2.0 ms)\n\
         \x20 direct kernel call baseline 100 ns/task; dispatch overhead 9900 ns/task\n\
         \x20 yields that found the CPUs busy: 0 device-orchestrated, 3 host-built"
    );
    let j = parse(&AreaReport::to_json(&r));
    assert_eq!(j["dispatch_overhead_ns_per_task"], 9900, "{j}");
    assert_eq!((j["rounds"].as_u64(), j["host_graph_ns_per_task"].as_u64()), (Some(5), Some(5000)));
    assert_eq!(j["device_orch_long_yields"], 0, "{j}");
    assert_eq!(j["host_graph_long_yields"], 3, "{j}");
}

#[test]
fn the_copy_report_names_its_rounds_and_each_fragment_size() {
    let ms = Duration::from_millis;
    let r = BenchReport {
        rows: vec![GatherRow {
            fragment_bytes: 4096,
            fragments: 512,
            engine_path: "gather",
            engine: ms(2),
            per_fragment: ms(8),
            contiguous: ms(1),
        }],
        repeats: 9,
        plan_items: 1024,
        plan_ns_per_item: 12.34,
    };
    assert_eq!(
        r.to_text(),
        "host-to-device, medians of 9 interleaved rounds (simulated device; compare the columns)\n\
         \x20   512 x    4 KiB: engine (gather)     2.00 ms, per-fragment     8.00 ms, contiguous     1.00 ms\n\
         \x20 planning: 12.3 ns per item (1024 scattered items)"
    );
    let j = parse(&AreaReport::to_json(&r));
    assert_eq!(j["gather"][0]["engine_vs_contiguous"], 0.5, "{j}");
    assert!(j.get("repeats").is_none(), "the JSON object keeps its fields: {j}");
}

fn beside(loops: u32, wall_s: f64) -> Beside {
    let mut rounds_wall_s = [0.0; MAX_ROUNDS];
    rounds_wall_s[0] = wall_s;
    Beside { loops, wall_s, cpu_s: 0.25, wall_ratio: wall_s / 0.1, long_yields: 2.0, rounds_wall_s }
}

#[test]
fn the_sim_area_is_the_chip_object_with_the_storm_inside_and_its_lines_in_order() {
    let r = SimArea {
        chip: SimBenchReport {
            aicpu_threads: 4,
            aicore_threads: 24,
            idle_parked_cpu: 0.0001,
            idle_waiting_cpu: 0.005,
            handshake_rtt_ns: 2000.0,
            baseline_rtt_ns: 40_000.0,
        },
        contention: ContentionReport {
            tasks: 50_000,
            rounds: 1,
            cpus: 2,
            alone: beside(0, 0.1),
            beside_one: beside(1, 0.15),
            beside_all: beside(2, 0.2),
        },
    };
    let j = parse(&r.to_json());
    assert_eq!(j["area"], "sim");
    assert_eq!(j["contention"]["beside_all"]["busy_loops"], 2, "{j}");
    let text = r.to_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 9, "{text}");
    assert_eq!(lines[0], "simulated a2a3 chip: 4 AICPU + 24 AICore threads");
    assert_eq!(lines[2], "  idle, cores awaiting dispatch: 0.500% of one core (goal < 2%)");
    assert_eq!(
        lines[6],
        "  1 busy loop(s):    150.0 ms wall (1.50x alone),  250.0 ms CPU, 2 long yields"
    );
    assert_eq!(lines[8], "  alone: 500000 tasks/s");
    assert!(!text.ends_with('\n'), "the caller ends the last line");
}

#[test]
fn the_launch_area_adds_every_series_to_the_transaction_object_and_text() {
    let series = LaunchSeriesReport {
        config: LaunchSeriesConfig::default(),
        serial_runs_per_s: 1000.0,
        pipelined_runs_per_s: 1500.0,
        serial_rounds: vec![1000.0],
        pipelined_rounds: vec![1500.0],
        serial_idle_fraction: 0.3,
        pipelined_idle_fraction: 0.01,
        serial_idle_rounds: vec![0.3],
        pipelined_idle_rounds: vec![0.01],
        serial_device_bound_runs_per_s: 1600.0,
        pipelined_device_bound_runs_per_s: 1600.0,
        pipelined_busy_fraction: 0.95,
        pipelined_of_device_bound_rounds: vec![0.94],
        pipelined_exec_mean_over_median: 1.01,
        unchanged_bytes_per_run: 0,
        changed_bytes_per_run: 9472,
        metadata_bytes_per_run: 0,
        unchanged_forks_per_run: 0.0,
        suffix_bytes_per_run: 4096,
        serial_phases: SerialPhases::default(),
    };
    let r = LaunchArea {
        transaction: LaunchBenchReport {
            config: LaunchBenchConfig { iterations: 10, ..LaunchBenchConfig::default() },
            changed_ns_per_run: 3000.0,
            unchanged_ns_per_run: 1500.0,
            changed_bytes_per_run: 43_264,
            unchanged_bytes_per_run: 0,
            changed_forks_per_run: 1.0,
            unchanged_forks_per_run: 0.0,
        },
        series: vec![series.clone(), series],
    };
    let j = parse(&r.to_json());
    assert_eq!(j["area"], "launch");
    assert_eq!(j["bytes_ratio_changed_vs_unchanged"], Value::Null, "{j}");
    assert_eq!(j["runtime"].as_array().map(Vec::len), Some(2), "{j}");
    assert_eq!(j["runtime"][1]["speedup"], 1.5, "{j}");
    let text = r.to_text();
    assert!(
        text.starts_with(
            "launch transaction (A2a3, 43264-byte descriptor prefix, 10 runs per series)\n"
        ),
        "{text}"
    );
    assert!(text.contains("\n  time ratio changed/unchanged: 2.00\nruntime series: "), "{text}");
    assert_eq!(text.matches("runtime series: vector (Small) on a2a3 HostBuiltGraph").count(), 2);
    assert!(!text.ends_with('\n'), "the caller ends the last line");
}
