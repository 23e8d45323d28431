//! The original tools' full format (docs/dfx.md) as `ferry run` writes it: the name map
//! beside the swimlane records, the clock anchors, host-orchestrated marks, typed scalars; and
//! the CLI's counts and wording.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn ferry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
}

fn ok(args: &[&str]) -> String {
    let out = ferry().args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{args:?}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// One small vector run with every subsystem the format tests read.
fn vector_run(tag: &str, variant: &str) -> PathBuf {
    let pid = std::process::id();
    let d = std::env::temp_dir().join(format!("ferry-format-{tag}-{variant}-{pid}"));
    let _ = std::fs::remove_dir_all(&d);
    let ds = d.to_str().unwrap();
    ok(&[
        "run",
        "--small",
        "--example",
        "vector",
        "--variant",
        variant,
        "--out",
        ds,
        "--swimlane",
        "4",
        "--dep-gen",
        "--dump-args",
        "2",
        "--scope-stats",
        "--original-formats",
    ]);
    d
}

/// The name map's layout, field by field (`{"level", "orchestrator_name",
/// "callable_id_to_name"}`), and the swimlane converter's labelling resolved with it: every
/// AICore task's `func_id` (from `deps.json` `kernel_ids`) maps to its kernel's name, not to a
/// `func_<id>_<x>` fallback.
fn check_name_map(d: &Path) {
    let m = json(&d.join("name_map_vector.json"));
    let o = m.as_object().unwrap();
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["callable_id_to_name", "level", "orchestrator_name"], "{m}");
    assert_eq!(m["level"], 2, "level 2: orchestration + in-core kernels");
    assert_eq!(m["orchestrator_name"], "vector");
    let names = m["callable_id_to_name"].as_object().unwrap();
    assert!(!names.is_empty());
    for (id, name) in names {
        assert!(id.parse::<u32>().is_ok(), "callable id {id:?} is a decimal string");
        assert!(name.is_string() && !name.as_str().unwrap().is_empty(), "{id}: {name}");
    }
    // What swimlane_converter does: func_id = the first non-negative kernel id of the task in
    // deps.json, label = callable_id_to_name[str(func_id)].
    let deps = json(&d.join("deps.json"));
    let func_of: HashMap<u64, i64> = deps["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let id: u64 = t["task_id"].as_str().unwrap().parse().unwrap();
            let k = t["kernel_ids"].as_array().unwrap().iter().filter_map(Value::as_i64);
            (id, k.into_iter().find(|&k| k >= 0).unwrap())
        })
        .collect();
    let sw = json(&d.join("chip_swimlane_records.json"));
    let rows = sw["aicore_tasks"].as_array().unwrap();
    assert!(!rows.is_empty());
    let mut labelled: Vec<&str> = Vec::new();
    for r in rows {
        let token = r[1].as_u64().unwrap();
        let f = func_of[&token];
        let name = names.get(&f.to_string()).unwrap_or_else(|| panic!("func_id {f} unnamed"));
        assert_eq!(name, &sw["metadata"]["kernel_names"][f.to_string()]);
        labelled.push(name.as_str().unwrap());
    }
    for k in ["add", "mul", "scale", "copy", "add_scalar"] {
        assert!(labelled.contains(&k), "{k} not among {labelled:?}");
    }
    // Recorded in the run's manifest, as every file `ferry run` writes.
    let man = std::fs::read_to_string(d.join("ferry-manifest.json")).unwrap();
    assert!(man.contains("name_map_vector.json"), "{man}");
}

/// Clock anchors: three valid samples at each position, monotonic in both clocks, device time
/// between them equal to host time at `clock_freq_hz` within the round trips, and every
/// device timestamp of the run inside the anchored interval.
fn check_anchors(sw: &Value) -> (u64, u64) {
    let m = &sw["metadata"];
    let hz = m["clock_freq_hz"].as_u64().unwrap();
    let a = &m["clock_anchors"];
    assert_eq!(a["provider"], "sim_syscnt");
    assert_eq!(a["device_timestamp_unit"], "syscnt_cycles");
    assert_eq!(a["samples_per_position"], 3);
    let s = a["samples"].as_array().unwrap();
    let at = |p: &str| s.iter().filter(|x| x["position"] == p).collect::<Vec<_>>();
    let (pre, post) = (at("pre_host_orchestration"), at("post_device_execution"));
    assert_eq!((pre.len(), post.len(), s.len()), (3, 3, 6), "{a}");
    fn u(v: &Value, k: &str) -> u64 {
        v[k].as_u64().unwrap()
    }
    for w in s.windows(2) {
        assert!(w[0]["error"].is_null() && w[1]["error"].is_null(), "{w:?}");
        assert!(u(&w[0], "host_before_ns") <= u(&w[0], "host_after_ns"));
        assert!(u(&w[0], "host_after_ns") <= u(&w[1], "host_before_ns"), "{w:?}");
        assert!(u(&w[0], "device_cycles") <= u(&w[1], "device_cycles"), "{w:?}");
    }
    let (f, l) = (&s[0], &s[5]);
    let device_ns = (u(l, "device_cycles") - u(f, "device_cycles")) as f64 * 1e9 / hz as f64;
    let lo = (u(l, "host_before_ns") - u(f, "host_after_ns")) as f64;
    let hi = (u(l, "host_after_ns") - u(f, "host_before_ns")) as f64;
    let cycle = 1e9 / hz as f64;
    assert!(device_ns + cycle >= lo && device_ns <= hi + cycle, "{device_ns} ns not in {lo}..{hi}");
    let (first, last) = (u(pre[2], "device_cycles"), u(post[0], "device_cycles"));
    for r in sw["aicore_tasks"].as_array().unwrap() {
        let (start, end) = (r[3].as_u64().unwrap(), r[4].as_u64().unwrap());
        assert!(first <= start && end <= last, "task {r} outside the anchors {first}..{last}");
    }
    (u(pre[0], "host_before_ns"), u(post[2], "host_after_ns"))
}

#[test]
fn device_and_host_runs_write_the_full_format() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let dev = vector_run("full", "device");
    check_name_map(&dev);
    let sw = json(&dev.join("chip_swimlane_records.json"));
    check_anchors(&sw);
    // Device-orchestrated: not marked as host-orchestrated; its submits are device records.
    assert!(sw["metadata"].get("orchestrator_source").is_none(), "{}", sw["metadata"]);
    assert!(sw.get("host_orchestrator_phases").is_none());
    assert!(!sw["aicpu_orchestrator_phases"][0].as_array().unwrap().is_empty());

    let host = vector_run("full", "host");
    check_name_map(&host);
    let sw = json(&host.join("chip_swimlane_records.json"));
    let (t0, t1) = check_anchors(&sw);
    let m = &sw["metadata"];
    assert_eq!(m["orchestrator_source"], "host");
    assert_eq!(m["orchestrator_clock_domain"], "host_monotonic_ns");
    assert!(m["host_clock_domain_id"].as_str().unwrap().starts_with("ferry-process-"));
    let tasks = json(&host.join("summary.json"))["runs"][0]["tasks"].as_u64().unwrap();
    let c = &m["host_capture"];
    assert_eq!(
        (c["status"].as_str(), c["expected_records"].as_u64()),
        (Some("complete"), Some(tasks))
    );
    assert_eq!(
        (c["recorded_records"].as_u64(), c["dropped_records"].as_u64()),
        (Some(tasks), Some(0))
    );
    assert!(c["error"].is_null());
    // The host phases: one per task, in order, inside the anchored host interval.
    let phases = sw["host_orchestrator_phases"][0].as_array().unwrap();
    assert_eq!(phases.len() as u64, tasks);
    let origin = m["host_orchestration_origin_ns"].as_u64().unwrap();
    assert!(t0 <= origin);
    for (i, p) in phases.iter().enumerate() {
        assert_eq!(p["submit_idx"], i);
        let (s, e) = (p["start_host_ns"].as_u64().unwrap(), p["end_host_ns"].as_u64().unwrap());
        assert!(origin <= s && s <= e && e <= t1, "{p}");
    }
    // The original readers refuse host and AICPU orchestrator records in one file.
    assert!(sw.get("aicpu_orchestrator_phases").is_none());

    // ferry's own analysis reads both back.
    for d in [&dev, &host] {
        let r = ok(&["report", d.to_str().unwrap()]);
        assert!(r.contains("add_scalar"), "{r}");
    }
    for d in [dev, host] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// A scalar prints by its dtype (f32 0.5 as 0.5, not `UINT64 value 1056964608`), the dump file
/// carries the dtype, `ferry report` counts tasks and blocks apart, `ferry scopes` calls a
/// healthy run healthy.
#[test]
fn scalars_counts_and_scopes_read_as_they_are() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = vector_run("ux", "device");
    let ds = d.to_str().unwrap();
    let args = json(&d.join("args_dump/args_dump.json"));
    let scalars: Vec<&Value> =
        args["args"].as_array().unwrap().iter().filter(|a| a["kind"] == "scalar").collect();
    assert!(!scalars.is_empty());
    for a in &scalars {
        assert_eq!(a["dtype"], "FLOAT32", "{a}");
    }
    assert!(scalars.iter().any(|a| a["value"] == u64::from(0.5f32.to_bits())));
    let list = ok(&["dump", "list", ds]);
    assert!(list.contains("SCALAR scalar FLOAT32 shape [] value 0.5"), "{list}");
    assert!(list.contains("SCALAR scalar FLOAT32 shape [] value 1\n"), "{list}");
    assert!(!list.contains("UINT64"), "{list}");

    let summary = json(&d.join("summary.json"));
    let tasks = summary["runs"][0]["tasks"].as_u64().unwrap();
    let blocks =
        json(&d.join("chip_swimlane_records.json"))["aicore_tasks"].as_array().unwrap().len();
    assert!(blocks as u64 > tasks, "the small vector run is SPMD");
    let report = ok(&["report", ds]);
    let head = report.lines().next().unwrap();
    assert!(
        head.contains(&format!(", {tasks} tasks, {blocks} blocks on 24 cores, wall ")),
        "{head}"
    );

    let scopes = ok(&["scopes", ds]);
    assert!(scopes.contains("(ok)") && !scopes.contains("danger"), "{scopes}");
    let html = std::fs::read_to_string(d.join("scope_stats/scope_stats.html")).unwrap();
    assert!(html.contains("run's own scratch reservation"), "the page says why");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn info_and_help_explain_themselves() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let info = ok(&["info"]);
    assert!(info.contains("die aic") && info.contains("8 AIC + 16 AIV"), "{info}");
    assert!(info.contains("a simulated run uses fewer"), "{info}");
    let v: Value = serde_json::from_str(&ok(&["info", "--json"])).unwrap();
    let a2a3 = &v["arch_profiles"][0];
    assert_eq!(
        (a2a3["aic_per_die"].as_u64(), a2a3["run_default_aic"].as_u64()),
        (Some(24), Some(8))
    );
    // The descriptor extents, beside the original C++ runtime's.
    let e = &v["descriptor_extents"][0];
    assert_eq!(
        (e["arch"].as_str(), e["variant"].as_str(), e["original_cpp_extent"].as_u64()),
        (Some("a2a3"), Some("device"), Some(ferry_bench::launch::A2A3_TMR_EXTENT as u64))
    );
    assert!(info.contains("original C++"), "{info}");
    for cmd in ["run", "info"] {
        let help = ok(&[cmd, "--help"]);
        let arch = &help[help.find("--arch").unwrap()..];
        assert!(arch.contains("a2a3") && arch.contains("a5"), "{cmd}: {arch}");
        assert!(arch.contains("[default: a2a3]"), "{cmd}: {arch}");
    }
}
