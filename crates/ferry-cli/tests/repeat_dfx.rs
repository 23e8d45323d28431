//! `ferry run --repeat N` with DFX: one session over every run, written (with
//! `--original-formats`) as N labelled runs, each a directory of the original runtime's files
//! for that run alone, with per-run loss accounting that reconciles; the tools read every run
//! (ferry's readers, the report's checks, the trace rebuilt from the files, the dump replay, and
//! Perfetto's own schema where it is installed). By default the session is its native profile,
//! read as one profile and run by run.
mod common;

use std::path::Path;

use common::{ferry_ok, need, runs, scratch, tools};
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
        "--original-formats",
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
    // The session's report: the runs with their wall times, then the kernels over the runs.
    let rep = String::from_utf8_lossy(&ferry_ok(&["report", out_s]).stdout).into_owned();
    assert!(rep.starts_with("ferry report: a session of 3 runs"), "{rep}");
    for k in 0..N {
        assert!(rep.contains(&format!("\n  run-{k:03} ")), "{rep}");
    }
    assert!(rep.contains("Per kernel over runs 0–2"), "{rep}");
    let _ = std::fs::remove_dir_all(&d);
}

fn text(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A session of `--repeat 5 --warmup 1` on `arch` into `dir`.
fn session(dir: &Path, arch: &str) {
    ferry_ok(&[
        "run",
        "--small",
        "--example",
        "vector",
        "--arch",
        arch,
        "--repeat",
        "5",
        "--warmup",
        "1",
        "--swimlane",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
}

#[test]
fn a_session_reads_as_one_profile_warm_up_set_apart() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    let d = scratch("session-one");
    let (a, b) = (d.join("a2a3"), d.join("a5"));
    session(&a, "a2a3");
    session(&b, "a5");
    let a_s = a.to_str().unwrap();
    // The default output: the session's native profile, read as one run per `run-NNN`.
    assert!(a.join("profile.ferry").is_file() && !a.join("runs.json").exists());

    // One aggregate table over runs 1–4 and a runs table with wall times and gaps.
    let rep = text(&ferry_ok(&["report", a_s]));
    assert!(rep.starts_with("ferry report: a session of 5 runs"), "{rep}");
    assert!(rep.contains("run 0 a warm-up run set apart"), "{rep}");
    assert!(rep.lines().nth(1).unwrap().starts_with("verdict: steady state over runs 1–4: wall "));
    assert!(rep.contains("Per kernel over runs 1–4"), "{rep}");
    let rows: Vec<&str> = rep.lines().filter(|l| l.starts_with("  run-0")).collect();
    assert_eq!(rows.len(), 5, "{rep}");
    assert!(rows[0].ends_with("warm-up") && !rows[1].ends_with("warm-up"), "{rep}");
    assert!(rows.iter().all(|r| r.contains(" ms ") || r.contains(" us ")), "wall times: {rep}");
    let v: Value = serde_json::from_str(&text(&ferry_ok(&["report", a_s, "--json"]))).unwrap();
    assert_eq!((v["warmup"].as_u64(), v["steady"]["runs"].as_u64()), (Some(1), Some(4)), "{v}");
    assert_eq!(v["runs"].as_array().unwrap().len(), 5);
    assert_eq!(v["reports"].as_array().unwrap().len(), 5);
    // `--warmup` on the report overrides what the run recorded.
    let none = text(&ferry_ok(&["report", a_s, "--warmup", "0"]));
    assert!(none.contains("Per kernel over runs 0–4"), "{none}");

    // Two sessions compare: the setup first, then the steady states with their spread.
    let diff = text(&ferry_ok(&["diff", a_s, b.to_str().unwrap()]));
    let lines: Vec<&str> = diff.lines().collect();
    assert!(lines[0].starts_with("ferry diff: steady states compared"), "{diff}");
    assert_eq!(lines[1], "set up differently (this explains what follows):", "{diff}");
    assert_eq!(lines[2].trim(), "arch: a2a3 -> a5", "{diff}");
    assert!(diff.contains("wall per run: "), "{diff}");
    let j: Value =
        serde_json::from_str(&text(&ferry_ok(&["diff", a_s, b.to_str().unwrap(), "--json"])))
            .unwrap();
    assert_eq!(j["runs"], serde_json::json!([4, 4]), "{j}");

    // One page and one trace spanning the runs, with a row of the runs and their gaps.
    let page = a.join("swimlane.html");
    assert_eq!(text(&ferry_ok(&["view", a_s])).trim(), page.to_str().unwrap());
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("\"label\":\"runs\""), "the page has the runs row");
    assert!(html.contains("steady state over runs 1–4"), "the page's report is the session's");
    ferry_ok(&["trace", a_s]);
    let pb = std::fs::read(a.join("trace.perfetto-trace")).unwrap();
    for name in ["run-000 (warm-up)", "gap before run-001", "run-004"] {
        assert!(pb.windows(name.len()).any(|w| w == name.as_bytes()), "{name} in the trace");
    }
    let _ = std::fs::remove_dir_all(&d);
}
