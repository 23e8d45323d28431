//! The original tools' full format (docs/dfx.md) as `ferry run` writes it: the name map
//! beside the swimlane records, the clock anchors, host-orchestrated marks, `deps.json`, the
//! args dump, typed scalars (the readers' checks in
//! `tests/original`); and the CLI's counts and wording.
mod original;

use std::path::PathBuf;
use std::process::Command;

use original::json;
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

#[test]
fn device_and_host_runs_write_the_full_format() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let kernels = ["add", "mul", "scale", "copy", "add_scalar"];
    for variant in ["device", "host"] {
        let d = vector_run("full", variant);
        original::check_all(&d, "vector", variant, &kernels);
        // ferry's own analysis reads it back.
        let r = ok(&["report", d.to_str().unwrap()]);
        assert!(r.contains("add_scalar"), "{r}");
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
