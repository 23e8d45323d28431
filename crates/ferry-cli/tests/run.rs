//! `ferry run`, the main job, as a user runs it (small workloads so debug builds stay quick).
use std::process::Command;

fn ferry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
}

#[test]
fn run_small_verifies_all_examples_and_prints_a_summary() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let out = ferry().args(["run", "--small", "--aic", "2", "--aiv", "4"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("simulated a2a3 chip, 4 AICPU threads"), "{stdout}");
    for name in ["vector", "paged-attention", "storm", "total"] {
        assert!(stdout.lines().any(|l| l.starts_with(name)), "{name} missing:\n{stdout}");
    }
    assert!(stdout.contains("per kernel: add_scalar 5000"), "{stdout}");
    assert_eq!(stdout.matches("ok (checksum").count(), 3, "{stdout}");
    // The full path: the AICPU program loaded by Path A, runs through the launch transaction.
    assert!(
        stdout.contains(
            "path:            device program (path a, dispatcher bootstrap) + launch transaction"
        ),
        "{stdout}"
    );
}

#[test]
fn run_on_a5_host_built_writes_its_outputs() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let dir = std::env::temp_dir().join(format!("ferry-run-test-{}", std::process::id()));
    let out = ferry()
        .args([
            "run",
            "--small",
            "--arch",
            "a5",
            "--variant",
            "host",
            "--example",
            "paged-attention",
        ])
        .args(["--aicpu-threads", "3", "--aic", "2", "--aiv", "4", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("a5 chip, 3 AICPU threads (1 orchestrator + 2 schedulers)"),
        "{stdout}"
    );
    assert!(stdout.contains("host-built"), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["arch"], "a5");
    assert_eq!(
        summary["path"],
        "device program (path a, dispatcher bootstrap) + launch transaction"
    );
    assert_eq!(summary["runs"][0]["example"], "paged-attention");
    assert_eq!(summary["runs"][0]["tasks"], 11);
    assert_eq!(summary["runs"][0]["per_kernel"]["attn_partial"], 8);
    // 2 sequences × head dim 16, f32.
    assert_eq!(std::fs::metadata(dir.join("paged-attention.f32")).unwrap().len(), 2 * 16 * 4);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_rejects_a_bad_configuration_with_a_message() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let out = ferry().args(["run", "--small", "--aicpu-threads", "1"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("one orchestrator and at least one scheduler"), "{stderr}");
    let out = ferry().args(["run", "--arch", "a9"]).output().unwrap();
    assert!(!out.status.success());
    // The message names the arches there are.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid value 'a9'"), "{stderr}");
    assert!(stderr.contains("[possible values: a2a3, a5]"), "{stderr}");
}

#[test]
fn run_with_every_dfx_subsystem_writes_the_files_traces_and_a_replayable_dump() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let dir = std::env::temp_dir().join(format!("ferry-run-dfx-{}", std::process::id()));
    let out = ferry()
        .args(["run", "--small", "--aicpu-threads", "3", "--aic", "2", "--aiv", "4", "--out"])
        .arg(&dir)
        .args(["--swimlane", "--pmu", "--dep-gen", "--dump-args", "3", "--scope-stats"])
        .args(["--chrome-json", "--original-formats"])
        // One buffer per lane of 4 records: every few records the writer waits for the host,
        // which the loaded AICPU program rings through the AICPU OS on each buffer switch.
        .args(["--dfx-buffers", "1", "--dfx-records", "4"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for ex in ["vector", "paged-attention", "storm"] {
        let d = dir.join(ex);
        for f in [
            "chip_swimlane_records.json",
            "pmu.csv",
            "deps.json",
            "args_dump/args_dump.json",
            "scope_stats/scope_stats.jsonl",
            "trace.perfetto-trace",
            "trace.chrome.json",
        ] {
            assert!(d.join(f).exists(), "{ex}: {f} missing");
        }
        // Level 3 (hybrid) keeps the payloads of marked tensors only: the vector and
        // paged-attention examples mark every argument, the storm none.
        let marked = ex != "storm";
        assert_eq!(d.join("args_dump/args.bin").exists(), marked, "{ex}: args.bin");
        // `ferry run` wrote its traces from the model in memory; `ferry trace` rebuilds them from
        // the files: the same bytes.
        let again = d.join("retrace");
        let mut tr = ferry();
        let tr = tr.arg("trace").arg(&d).args(["--chrome-json", "--out"]).arg(&again);
        let tr = tr.output().unwrap();
        assert!(tr.status.success(), "{ex}: {}", String::from_utf8_lossy(&tr.stderr));
        for f in ["trace.perfetto-trace", "trace.chrome.json"] {
            let (a, b) = (std::fs::read(d.join(f)).unwrap(), std::fs::read(again.join(f)).unwrap());
            assert!(a == b, "{ex}: {f} from the model differs from {f} from the files");
        }
        let rep = ferry().arg("report").arg(&d).output().unwrap();
        let rep = String::from_utf8_lossy(&rep.stdout);
        assert!(rep.contains("0 violations"), "{ex}: {rep}");
        let replay =
            ferry().args(["dump", "replay"]).arg(&d).args(["--task", "0"]).output().unwrap();
        let text = String::from_utf8_lossy(&replay.stdout);
        if marked {
            assert!(replay.status.success() && text.contains("outputs reproduced"), "{ex}: {text}");
        } else {
            let err = String::from_utf8_lossy(&replay.stderr);
            assert!(!replay.status.success(), "{ex}: replayed without payloads: {text}");
            assert!(
                err.contains("no payload for input 0") && err.contains("--dump-args 2"),
                "{err}"
            );
        }
    }
    // Level 2 (full) dumps every payload, marked or not: the storm replays from it.
    let full = dir.join("full");
    let out = ferry()
        .args(["run", "--small", "--example", "storm", "--dump-args", "2", "--out"])
        .arg(&full)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The default output: the payloads are in the native profile, read from there.
    assert!(full.join("profile.ferry").exists() && !full.join("args_dump").exists());
    let replay =
        ferry().args(["dump", "replay"]).arg(&full).args(["--task", "0"]).output().unwrap();
    let text = String::from_utf8_lossy(&replay.stdout);
    assert!(
        replay.status.success() && text.contains("outputs reproduced"),
        "storm, level 2: {text}"
    );
    assert_eq!(stdout.matches(" 0 dropped, Block)").count(), 3, "{stdout}");
    assert_eq!(stdout.matches("records/s").count(), 3, "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dfx_without_out_is_refused() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let out = ferry().args(["run", "--small", "--swimlane", "2"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --out"));
    let d = std::env::temp_dir().join(format!("ferry-run-chrome-{}", std::process::id()));
    let mut out = ferry();
    let out = out.args(["run", "--small", "--pmu", "--chrome-json", "--out"]).arg(&d);
    let out = out.output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --swimlane"));
    assert!(!d.exists(), "refused before the directory was claimed");
}

#[test]
fn run_repeat_launches_the_graph_n_times_and_prints_runs_per_second() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let dir = std::env::temp_dir().join(format!("ferry-run-repeat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = ferry()
        .args(["run", "--small", "--aic", "2", "--aiv", "4", "--variant", "host"])
        .args(["--example", "vector", "--repeat", "6", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = stdout
        .lines()
        .find(|l| l.starts_with("vector") && l.contains("runs back to back"))
        .unwrap_or_else(|| panic!("no repeat line:\n{stdout}"));
    assert!(line.contains("6 runs back to back through 2 launch slots"), "{line}");
    assert!(line.contains("runs/s, every run verified"), "{line}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    let run = &summary["runs"][0];
    assert_eq!(run["repeat"], 6, "{summary}");
    assert!(run["runs_per_s"].as_f64().unwrap() > 0.0, "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
    // Zero repetitions, and more repetitions with DFX than one session tells apart, are
    // refused with a message (tests/repeat_dfx.rs runs the repetitions DFX collects).
    let zero = ferry().args(["run", "--small", "--repeat", "0"]).output().unwrap();
    assert!(!zero.status.success());
    let dir = std::env::temp_dir().join(format!("ferry-run-repeat-dfx-{}", std::process::id()));
    let dfx = ferry()
        .args(["run", "--small", "--example", "vector", "--repeat", "257", "--swimlane", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!dfx.status.success());
    let err = String::from_utf8_lossy(&dfx.stderr);
    assert!(err.contains("one session tells at most 256 runs apart"), "{err}");
    assert!(!dir.exists(), "refused before the directory was claimed");
}
