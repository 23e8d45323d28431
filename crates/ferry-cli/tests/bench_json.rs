//! `ferry bench dfx --json`'s report: every figure the issue names is there, with the CPU split
//! that explains the in-run ratio. Values are measured, not asserted; only their shape and the
//! accounting identities are.
use std::process::Command;

use serde_json::Value;

#[test]
fn bench_dfx_quick_reports_every_figure_and_the_cpu_split() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["bench", "dfx", "--quick", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let storm = &j["storm"];
    for k in ["ratio", "ratio_paired", "off_tasks_per_s", "all_tasks_per_s"] {
        assert!(storm["in_run"][k].as_f64().is_some_and(|v| v > 0.0), "in_run.{k}: {storm}");
    }
    for k in ["ratio", "off_s", "all_s"] {
        assert!(storm["command"][k].as_f64().is_some_and(|v| v > 0.0), "command.{k}");
    }
    assert!(storm["write_phase"]["records_per_s"].as_f64().is_some_and(|v| v > 0.0));
    // Both arches, polling and doorbell, each beside both baselines measured in its rounds.
    let drains = j["drain"].as_array().unwrap();
    assert_eq!(drains.len(), 4);
    for d in drains {
        for k in ["gb_per_s", "memcpy_gb_per_s", "cross_core_gb_per_s"] {
            assert!(d[k].as_f64().is_some_and(|v| v > 0.0), "drain.{k}: {d}");
        }
        let (g, x) = (d["gb_per_s"].as_f64().unwrap(), d["cross_core_gb_per_s"].as_f64().unwrap());
        assert!((d["vs_cross_core"].as_f64().unwrap() - g / x).abs() < 1e-9, "{d}");
    }
    assert_eq!(storm["in_run_pairs"], 0, "--quick takes no extra pairs");
    assert!(
        ["tsc", "monotonic"].contains(&storm["device_clock"].as_str().unwrap_or("")),
        "the clock the figures were taken on: {}",
        storm["device_clock"]
    );
    assert_eq!(storm["trace_phase"]["tasks"], serde_json::json!([5000, 5000]));
    let all = storm["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["config"] == "all")
        .expect("an all-five row");
    assert_eq!(all["dropped"], 0);
    if cfg!(target_os = "linux") {
        let cpu = &storm["in_run"]["dfx_cpu"];
        assert_eq!(cpu["records"], all["records"], "{cpu}");
        // The engine's threads run only with DFX on, and they did work in the all-five run.
        assert!(cpu["dfx_host_ns_per_record"].as_f64().is_some_and(|v| v > 0.0), "{cpu}");
        assert!(cpu["aicpu_ns_per_record"].as_f64().is_some_and(f64::is_finite), "{cpu}");
        let off = storm["subsystems"][0].clone();
        assert_eq!(off["config"], "off");
        assert_eq!(off["cpu_ms_per_run"]["dfx_host"], 0.0, "no engine without DFX: {off}");
        assert!(off["cpu_ms_per_run"]["aicpu"].as_f64().is_some_and(|v| v > 0.0), "{off}");
    }
}
