//! `ferry report --json` and `ferry diff` end to end on `examples/workloads/chain.toml`, a
//! workload whose longest dependency chain is known: the static critical path by count is exactly
//! that chain; a run compared with itself has no delta; a run whose `mul` does 512 times the
//! work is named the biggest regression; unreadable inputs fail with the file named.
//!
//! The runs are host-built (`--variant host`): the whole graph is submitted before any task runs,
//! so `deps.json` records every dependency (a device-orchestrated run records the dependencies
//! on tasks still in flight at each submit, which depends on timing).
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn ferry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(args: &[&str]) -> Output {
    ferry().args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(o.status.success(), "{args:?}: {}\n{}", text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

fn ok_json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args)).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-reports-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

const CHAIN: &str = "chain.toml";
/// `depth` of chain.toml: the length of its longest chain.
const DEPTH: usize = 12;

fn workload(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workloads").join(name)
}

/// Runs `file` host-built with the swimlane, DepGen and PMU into `out`.
fn profile(file: &Path, out: &Path) {
    profile_with(file, out, &[]);
}

/// [`profile`] with `extra` flags.
fn profile_with(file: &Path, out: &Path, extra: &[&str]) {
    let args = [
        "run",
        "--workload",
        file.to_str().unwrap(),
        "--variant",
        "host",
        "--swimlane",
        "4",
        "--dep-gen",
        "--pmu",
        "--out",
        out.to_str().unwrap(),
    ];
    ok(&[&args[..], extra].concat());
}

/// chain.toml with `mul_len` raised from 64 to `n` (in `dir`).
fn chain_with_mul_len(dir: &Path, n: u64) -> PathBuf {
    let t = std::fs::read_to_string(workload(CHAIN)).unwrap();
    let line = t.lines().find(|l| l.starts_with("mul_len = ")).unwrap();
    assert!(line.starts_with("mul_len = 64 "), "{line}");
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(CHAIN);
    std::fs::write(&p, t.replace(line, &format!("mul_len = {n}"))).unwrap();
    p
}

fn ids(path: &Value) -> Vec<String> {
    path["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_string())
        .collect()
}

/// Every `delta` in `v`, with its path.
fn deltas(v: &Value, at: &str, out: &mut Vec<(String, i64)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "delta" {
                    out.push((at.to_string(), x.as_i64().unwrap()));
                } else {
                    deltas(x, &format!("{at}.{k}"), out);
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                deltas(x, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_static_critical_path_is_the_known_chain_and_a_run_against_itself_has_no_delta() {
    let _bound = ferry_watchdog::bound("the ferry binary's profiled run and reports");
    let d = tmp("chain");
    profile(&workload(CHAIN), &d);
    let ds = d.to_str().unwrap();
    let r = ok_json(&["report", ds, "--json"]);

    // The chain: the first DEPTH submits of the graph (the add_scalar repeat), in order.
    let deps = ok_json(&["deps", ds, "--json"]);
    let chain: Vec<String> = deps["task_list"].as_array().unwrap()[..DEPTH]
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_string())
        .collect();
    let cp = &r["critical_path"];
    assert_eq!(ids(&cp["static_by_count"]), chain, "{cp}");
    assert_eq!(cp["static_by_count"]["length"], DEPTH);
    assert!(cp["static_by_count"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["kernel"] == "add_scalar"));

    // By time: a chain of the graph at least as heavy as the known chain's durations.
    let dur = |p: &Value| -> u64 {
        p["tasks"].as_array().unwrap().iter().map(|t| t["duration_cycles"].as_u64().unwrap()).sum()
    };
    let by_time = &cp["static_by_time"];
    assert_eq!(by_time["length"].as_u64().unwrap(), dur(by_time));
    assert!(dur(by_time) >= dur(&cp["static_by_count"]), "{cp}");
    let edges: Vec<(String, String)> = deps["task_list"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| {
            let succ = t["task_id"].as_str().unwrap().to_string();
            let preds = t["preds"].as_array().unwrap().iter();
            preds.map(move |p| (p["task_id"].as_str().unwrap().to_string(), succ.clone()))
        })
        .collect();
    for w in ids(by_time).windows(2) {
        assert!(edges.contains(&(w[0].clone(), w[1].clone())), "{w:?} is no edge: {cp}");
    }

    // Observed: compute and waits tile the makespan.
    let o = &cp["observed"];
    let sum: u64 = ["compute_cycles", "data_wait_cycles", "core_wait_cycles", "front_gap_cycles"]
        .iter()
        .map(|k| o[k].as_u64().unwrap())
        .sum();
    assert_eq!(sum, o["makespan_cycles"].as_u64().unwrap(), "{o}");

    // The rest of the report.
    assert_eq!(r["run"]["tasks"], 28);
    assert_eq!(r["pmu"]["total"]["rows"], 28);
    let kernels: Vec<&str> =
        r["kernels"].as_array().unwrap().iter().map(|k| k["kernel"].as_str().unwrap()).collect();
    assert_eq!(kernels.len(), 3, "{kernels:?}");
    let top = ok_json(&["report", ds, "--json", "--top", "1"]);
    assert_eq!(top["kernels"].as_array().unwrap().len(), 1);
    assert_eq!(top["kernels"][0]["kernel"], kernels[0]);

    // Against itself: every delta zero, nothing regressed.
    let diff = ok_json(&["diff", ds, ds, "--json"]);
    let mut all = Vec::new();
    deltas(&diff, "", &mut all);
    assert!(all.len() > 10, "{diff}");
    assert!(all.iter().all(|(_, v)| *v == 0), "{all:?}");
    assert_eq!(diff["regression"], Value::Null);
    assert_eq!(diff["critical_path"]["same_static_kernels"], true);
    let t = ok(&["diff", ds, ds]);
    assert!(t.contains("no kernel regressed"), "{t}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// `mul` does 512 times the work in B (mul_len 64 → 32768, 8 tasks): it is named first, by a
/// margin of milliseconds against kernels whose totals are tens of microseconds; backwards it is
/// the biggest improvement, last.
#[test]
fn diff_names_the_slower_kernel_first() {
    let _bound = ferry_watchdog::bound("the ferry binary's profiled runs and diff");
    let (a, b) = (tmp("diff-a"), tmp("diff-b"));
    profile(&workload(CHAIN), &a);
    let slow = chain_with_mul_len(&tmp("diff-wl"), 32768);
    profile(&slow, &b);
    let (as_, bs) = (a.to_str().unwrap(), b.to_str().unwrap());
    let d = ok_json(&["diff", as_, bs, "--json"]);
    assert_eq!(d["regression"], "mul", "{d}");
    assert_eq!(d["kernels"][0]["kernel"], "mul", "{d}");
    assert_eq!(d["kernels"][0]["tasks"]["delta"], 0);
    assert_eq!(d["tasks"]["delta"], 0);
    let t = ok(&["diff", as_, bs]);
    assert!(t.contains("biggest kernel regression: mul"), "{t}");
    let back = ok_json(&["diff", bs, as_, "--json"]);
    let k = back["kernels"].as_array().unwrap();
    assert_eq!(k.last().unwrap()["kernel"], "mul", "{back}");
    for p in [a, b, slow.parent().unwrap().to_path_buf()] {
        std::fs::remove_dir_all(p).unwrap();
    }
}

/// A truncated file is an error naming it (a non-zero exit, no backtrace-only message), with the
/// manifest (the file changed since the run) and without it (the parser's error).
#[test]
fn a_truncated_input_fails_report_and_diff() {
    let _bound = ferry_watchdog::bound("the ferry binary's profiled run and reports");
    let d = tmp("truncated");
    profile(&workload(CHAIN), &d);
    let ds = d.to_str().unwrap();
    let good = ok(&["report", ds]);
    assert!(good.contains("Critical path"), "{good}");
    // The native profile (the default output) truncated: changed since the run; without the
    // manifest, a torn tail in a finished run.
    let native = d.join("profile.ferry");
    let whole = std::fs::read(&native).unwrap();
    std::fs::write(&native, &whole[..whole.len() - 7]).unwrap();
    for args in [vec!["report", ds], vec!["diff", ds, ds]] {
        let o = run(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o.stdout));
        assert!(err.contains("profile.ferry") && err.contains("changed"), "{args:?}: {err}");
    }
    let m = std::fs::read(d.join("ferry-manifest.json")).unwrap();
    std::fs::remove_file(d.join("ferry-manifest.json")).unwrap();
    let o = run(&["report", ds]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("profile.ferry") && err.contains("after its last sealed chunk"), "{err}");
    std::fs::write(d.join("ferry-manifest.json"), m).unwrap();
    std::fs::write(&native, &whole).unwrap();
    // The original files, exported from it, truncated.
    std::fs::remove_dir_all(&d).unwrap();
    profile_with(&workload(CHAIN), &d, &["--original-formats"]);
    let sw = d.join("chip_swimlane_records.json");
    let t = std::fs::read(&sw).unwrap();
    std::fs::write(&sw, &t[..t.len() / 2]).unwrap();
    for args in [vec!["report", ds], vec!["report", ds, "--json"], vec!["diff", ds, ds]] {
        let o = run(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o.stdout));
        assert!(err.contains("chip_swimlane_records.json"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: {}", text(&o.stdout));
    }
    std::fs::remove_file(d.join("ferry-manifest.json")).unwrap();
    let o = run(&["report", ds, "--json"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("chip_swimlane_records.json"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// Two runs on different chips: `ferry diff` says how they were set up differently before it
/// compares what they measured (an a2a3 at 50 MHz against an a5 at 1 GHz, and 3 against 2 AICPU
/// threads); a run against itself says nothing of the kind.
#[test]
fn diff_states_setup_differences_first() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    let d = tmp("setup");
    let (a, b) = (d.join("a2a3"), d.join("a5"));
    let small = ["run", "--small", "--example", "vector", "--swimlane", "1", "--out"];
    ok(&[&small[..], &[a.to_str().unwrap(), "--aicpu-threads", "3"]].concat());
    ok(&[&small[..], &[b.to_str().unwrap(), "--arch", "a5", "--aicpu-threads", "2"]].concat());
    let t = ok(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[1].contains("set up differently"), "{t}");
    let setup: Vec<&str> =
        lines[2..].iter().take_while(|l| l.starts_with("    ")).map(|l| l.trim()).collect();
    for want in ["arch: a2a3 -> a5", "clock_hz: 50000000 -> 1000000000", "aicpu_threads: 3 -> 2"] {
        assert!(setup.contains(&want), "{want} missing: {t}");
    }
    let v = ok_json(&["diff", a.to_str().unwrap(), b.to_str().unwrap(), "--json"]);
    assert!(v["setup"].as_array().unwrap().iter().any(|c| c["what"] == "arch"), "{v}");
    let same = ok(&["diff", a.to_str().unwrap(), a.to_str().unwrap()]);
    assert!(!same.contains("set up differently"), "{same}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The README's storm with all five subsystems: `ferry report` fits in 40 lines, whatever the
/// host's load did to the lanes' waits, and loses nothing on the way: every kernel and every
/// core that ran is on its line, the lanes that say nothing are counted, and every lane that
/// waited or lost records is a row or counted with the other waiters.
#[test]
fn the_storms_report_fits_in_40_lines_and_folds_only_what_says_nothing() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    let d = tmp("storm");
    let out = d.join("run");
    let o = out.to_str().unwrap();
    ok(&["run", "--example", "storm", "--swimlane", "4", "--pmu", "2", "--dep-gen"]
        .into_iter()
        .chain(["--dump-args", "3", "--scope-stats", "--out", o])
        .collect::<Vec<_>>());
    let t = ok(&["report", o]);
    let v = ok_json(&["report", o, "--json"]);
    assert!(t.lines().count() <= 40, "{} lines:\n{t}", t.lines().count());
    assert!(t.lines().nth(1).unwrap().starts_with("verdict: "), "{t}");
    for k in v["kernels"].as_array().unwrap() {
        let name = k["kernel"].as_str().unwrap();
        assert!(t.contains(&format!("\n  {name} ")), "kernel {name} missing:\n{t}");
    }
    for c in v["cores"].as_array().unwrap().iter().filter(|c| c["blocks"].as_u64() > Some(0)) {
        let busy = format!("{:.1}%", c["utilisation"].as_f64().unwrap() * 100.0);
        let at = t.find(&format!("core{:<3} ", c["core"])).expect("a core that ran has its entry");
        assert!(t[at..].lines().next().unwrap().contains(&busy), "core {}: {busy}\n{t}", c["core"]);
    }
    let lanes = v["loss"]["lanes"].as_array().unwrap();
    let quiet = |l: &&Value| {
        l["dropped"] == 0 && l["stall_cycles"] == 0 && l["reconciles"].as_bool() == Some(true)
    };
    let loud: Vec<&Value> = lanes.iter().filter(|l| !quiet(l)).collect();
    let table = &t[t.find("\nLoss and stalls").expect("the loss table")..];
    let rows = loud
        .iter()
        .filter(|l| table.contains(&format!("\n  {} ", l["lane"].as_str().unwrap())))
        .count();
    let folded = table
        .lines()
        .find(|l| l.contains("waited too"))
        .map_or(0, |l| l.split_whitespace().next().unwrap().parse::<usize>().unwrap());
    assert_eq!(rows + folded, loud.len(), "{table}");
    let n_quiet = lanes.len() - loud.len();
    if n_quiet > 0 {
        let which = if loud.is_empty() {
            format!("all {n_quiet} lanes")
        } else {
            format!("{n_quiet} other lanes")
        };
        assert!(table.contains(&format!("  {which}: every record collected")), "{table}");
    }
    assert!(table.contains("reconcile ok") && table.contains("dropped 0"), "{table}");
    let _ = std::fs::remove_dir_all(&d);
}
