//! `ferry run --repeat N` with DFX: one session over every run, written as N labelled runs, each
//! a directory of the original runtime's files for that run alone, with per-run loss accounting
//! that reconciles; the tools read every run (ferry's readers, the report's checks, the trace
//! rebuilt from the files, the dump replay, and Perfetto's own schema where it is installed).
mod common;

use std::path::Path;

use common::{ferry, ferry_ok, need, runs, scratch, tools};
use serde_json::Value;

fn json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every lane line of a file's `dfx` object reconciles; returns the lines.
fn reconciled_lanes(dfx: &Value, what: &str) -> Vec<Value> {
    let lanes = dfx["lanes"].as_array().unwrap_or_else(|| panic!("{what}: no lanes: {dfx}"));
    for l in lanes {
        let n = |k: &str| l[k].as_u64().unwrap();
        assert_eq!(n("produced"), n("collected") + n("dropped"), "{what}: {l}");
    }
    lanes.clone()
}

#[test]
fn a_repeated_run_with_all_five_subsystems_writes_each_run_labelled_and_reconciled() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    let d = scratch("repeat-dfx");
    let out = d.join("run");
    let out_s = out.to_str().unwrap();
    const N: u64 = 3;
    let o = ferry_ok(&[
        "run",
        "--small",
        "--example",
        "vector",
        "--aic",
        "2",
        "--aiv",
        "4",
        "--repeat",
        "3",
        "--swimlane",
        "4",
        "--pmu",
        "2",
        "--dep-gen",
        "--dump-args",
        "3",
        "--scope-stats",
        // One buffer of 4 records per lane: every run's records span many buffers, and the
        // writers wait for the host, so run boundaries fall between buffers of a busy lane.
        "--dfx-buffers",
        "1",
        "--dfx-records",
        "4",
        "--out",
        out_s,
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("dfx: 3 runs in one session"), "{stdout}");
    assert!(stdout.contains("3 runs back to back through 2 launch slots"), "{stdout}");

    // runs.json: the runs in launch order, on disjoint device-time spans, each reconciling.
    let session = json(&out.join("runs.json"));
    let listed = session["runs"].as_array().unwrap();
    assert_eq!(listed.len() as u64, N, "{session}");
    let mut last_end = 0;
    for (k, r) in listed.iter().enumerate() {
        assert_eq!(r["index"], k as u64);
        assert_eq!(r["dir"], format!("run-{k:03}"));
        assert_eq!(r["reconciles"], true, "{r}");
        let span = r["device_cycles"].as_array().unwrap();
        let (a, b) = (span[0].as_u64().unwrap(), span[1].as_u64().unwrap());
        assert!(last_end < a && a < b, "run {k} overlaps the one before: {session}");
        last_end = b;
    }

    let python =
        runs("python3", &["-c", "from perfetto.protos.perfetto.trace import perfetto_trace_pb2"]);
    let test = "a_repeated_run_with_all_five_subsystems_writes_each_run_labelled_and_reconciled";
    let perfetto = need(python, test, "python3 with the `perfetto` package is missing").is_some();
    for k in 0..N {
        let r = out.join(format!("run-{k:03}"));
        let rs = r.to_str().unwrap();
        let label = serde_json::json!({ "index": k, "runs": N });
        // The swimlane: labelled in its metadata and its loss object; its AICore lanes collected
        // exactly the rows the file holds for this run.
        let sw = json(&r.join("chip_swimlane_records.json"));
        assert_eq!(sw["metadata"]["run"], label, "run {k}");
        assert_eq!(sw["dfx"]["run"], label, "run {k}");
        let lanes = reconciled_lanes(&sw["dfx"], &format!("run {k} swimlane"));
        let aicore: u64 = lanes
            .iter()
            .filter(|l| l["lane"].as_str().unwrap().starts_with("aicore "))
            .map(|l| l["collected"].as_u64().unwrap())
            .sum();
        assert_eq!(aicore, sw["aicore_tasks"].as_array().unwrap().len() as u64, "run {k}");
        assert!(aicore > 0, "run {k}: no AICore rows");
        // Every other file: labelled, reconciling.
        for (file, dfx) in [
            ("pmu.dfx.json", json(&r.join("pmu.dfx.json"))),
            ("deps.json", json(&r.join("deps.json"))["dfx"].clone()),
            ("args_dump.json", json(&r.join("args_dump/args_dump.json"))["dfx"].clone()),
        ] {
            assert_eq!(dfx["run"], label, "run {k}: {file}");
            reconciled_lanes(&dfx, &format!("run {k} {file}"));
        }
        let scopes = std::fs::read_to_string(r.join("scope_stats/scope_stats.jsonl")).unwrap();
        let head: Value = serde_json::from_str(scopes.lines().next().unwrap()).unwrap();
        assert_eq!(head["dfx"]["run"], label, "run {k}: scope_stats.jsonl");
        reconciled_lanes(&head["dfx"], &format!("run {k} scope_stats"));
        // One run's graph: every edge once (a session-wide graph would repeat each run's).
        let deps = json(&r.join("deps.json"));
        let edges = deps["edges"].as_array().unwrap();
        let distinct: std::collections::HashSet<String> =
            edges.iter().map(|e| format!("{}>{}", e["pred"], e["succ"])).collect();
        assert!(
            !edges.is_empty() && distinct.len() == edges.len(),
            "run {k}: {} edges",
            edges.len()
        );
        // The tools read it: the report's checks, the trace rebuilt from the files, the replay.
        let rep = String::from_utf8_lossy(&ferry_ok(&["report", rs]).stdout).into_owned();
        assert!(rep.starts_with(&format!("ferry report: run {k} of {N}, ")), "{rep}");
        assert!(rep.contains("0 violations"), "run {k}: {rep}");
        let again = d.join(format!("retrace-{k}"));
        ferry_ok(&["trace", rs, "--out", again.to_str().unwrap()]);
        let f = "trace.perfetto-trace";
        assert!(
            std::fs::read(r.join(f)).unwrap() == std::fs::read(again.join(f)).unwrap(),
            "run {k}: the trace from the model differs from the trace from the files"
        );
        let replay = ferry_ok(&["dump", "replay", rs, "--task", "0"]);
        assert!(String::from_utf8_lossy(&replay.stdout).contains("outputs reproduced"), "run {k}");
        if perfetto {
            let c = std::process::Command::new("python3")
                .arg(tools().join("check_perfetto_trace.py"))
                .arg(r.join(f))
                .args(["--expect", "pmu,scopes,anchors,loss"])
                .output()
                .unwrap();
            assert!(c.status.success(), "run {k}: {}", String::from_utf8_lossy(&c.stdout));
        }
    }
    // The session's report: the runs' table, then each run's report.
    let rep = String::from_utf8_lossy(&ferry_ok(&["report", out_s]).stdout).into_owned();
    assert!(rep.starts_with("ferry report: 3 runs of one DFX session"), "{rep}");
    for k in 0..N {
        assert!(rep.contains(&format!("== run-{k:03} ==\nferry report: run {k} of 3")), "{rep}");
    }
    // A view of the session names its runs.
    let v = ferry().args(["view", out_s]).output().unwrap();
    assert!(!v.status.success());
    assert!(String::from_utf8_lossy(&v.stderr).contains("run-000"), "{v:?}");
    let _ = std::fs::remove_dir_all(&d);
}
