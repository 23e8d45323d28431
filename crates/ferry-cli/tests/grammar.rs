//! One grammar for every command, each rule through the `ferry` binary: the run directory right
//! after the (sub)command, `-o/--out` as where a command writes, flags with optional levels that
//! say their bare level, `--direct-io <on|off>`, task ids printed one way, user errors on one
//! line without a backtrace, unreadable input as a non-zero exit, failed runs that stay
//! analysable, and the next steps a profiled run prints.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use ferry_profile::{Manifest, RunOutcome};

fn ferry() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
    // As many users have it: a user error must still be one line.
    c.env("RUST_BACKTRACE", "1").env_remove("RUST_LIB_BACKTRACE").env_remove("FERRY_LOG");
    c
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-grammar-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}\n{}", text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

fn run(args: &[&str]) -> Output {
    ferry().args(args).output().unwrap()
}

/// A `--small` vector run with all five subsystems (payloads dumped), made once per binary.
fn profiled() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tmpdir("all");
        let o = ferry()
            .args(["run", "--example", "vector", "--small", "--aic", "2", "--aiv", "4"])
            .args(["--swimlane", "--pmu", "--dep-gen", "--dump-args", "2", "--scope-stats", "-o"])
            .arg(&d)
            .output()
            .unwrap();
        ok(&o);
        d
    })
}

#[test]
fn the_run_directory_comes_right_after_the_command() {
    let _bound = ferry_watchdog::bound("the ferry binary's profiled run and analysis commands");
    let d = profiled().to_str().unwrap();
    let pages = tmpdir("pages");
    std::fs::create_dir_all(&pages).unwrap();
    let p = |f: &str| pages.join(f).to_str().unwrap().to_string();
    let (view, scopes, traces, export) = (p("v.html"), p("s.html"), p("traces"), p("export"));
    for args in [
        vec!["report", d],
        vec!["deps", d],
        vec!["dump", "list", d],
        vec!["dump", "list", d, "--role", "OUTPUT"],
        vec!["dump", "replay", d, "--task", "0"],
        vec!["dump", "export", d, "-o", &export],
        vec!["view", d, "-o", &view],
        vec!["scopes", d, "--out", &scopes],
        vec!["trace", d, "-o", &traces],
    ] {
        let o = run(&args);
        ok(&o);
    }
    assert!(Path::new(&view).is_file() && Path::new(&scopes).is_file());
    assert!(Path::new(&traces).join("trace.perfetto-trace").is_file());
    assert!(std::fs::read_dir(&export).unwrap().count() > 0);
    // The old order (directory before dump's subcommand) is not a second grammar.
    assert!(!run(&["dump", d, "list"]).status.success());
    std::fs::remove_dir_all(&pages).unwrap();
}

#[test]
fn every_command_that_writes_takes_o_and_out_for_where() {
    let _bound = ferry_watchdog::bound("the ferry binary");
    for cmd in [&["run"][..], &["view"], &["scopes"], &["trace"], &["dump", "export"]] {
        let help = ok(&run(&[cmd, &["--help"]].concat()));
        assert!(help.contains("-o, --out <"), "{cmd:?}: {help}");
        assert!(help.contains("Where this command writes its output"), "{cmd:?}: {help}");
    }
}

#[test]
fn replay_requires_its_task_and_says_so() {
    let _bound = ferry_watchdog::bound("the ferry binary's profiled run and replay");
    let help = ok(&run(&["dump", "replay", "--help"]));
    let usage = help.lines().find(|l| l.starts_with("Usage:")).unwrap();
    assert!(usage.contains("--task <ID>") && !usage.contains("[--task"), "{usage}");
    let o = run(&["dump", "replay", profiled().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--task <ID>"), "{}", text(&o.stderr));
}

#[test]
fn optional_levels_say_their_bare_level_and_direct_io_says_on_or_off() {
    let _bound = ferry_watchdog::bound("the ferry binary");
    let help = ok(&run(&["run", "--help"]));
    for (flag, bare) in [
        ("--swimlane [<LEVEL>]", "a bare --swimlane is level 4"),
        ("--pmu [<TYPE>]", "a bare --pmu is type 2"),
        ("--dump-args [<LEVEL>]", "a bare --dump-args\n          is level 1"),
    ] {
        assert!(help.contains(flag), "{flag}: {help}");
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let bare = bare.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(&bare), "{bare}: {help}");
    }
    let top = ok(&run(&["--help"]));
    assert!(top.contains("--direct-io <on|off>"), "{top}");
    assert!(!top.contains("true, false"), "{top}");
    assert!(!run(&["--direct-io", "maybe", "info"]).status.success());
    ok(&run(&["--direct-io", "off", "info"]));
}

#[test]
fn task_ids_print_one_way() {
    let _bound = ferry_watchdog::bound("the ferry binary's profiled run and analysis commands");
    let d = profiled().to_str().unwrap();
    let deps = ok(&run(&["deps", d]));
    let list = ok(&run(&["dump", "list", d]));
    let replay = ok(&run(&["dump", "replay", d, "--task", "0x0"]));
    for out in [&deps, &list, &replay] {
        assert!(!out.contains("0x000"), "{out}");
        assert!(!out.contains("task_id="), "{out}");
    }
    assert!(deps.contains("task 0x0 ") || deps.contains("task 0x1 "), "{deps}");
    assert!(replay.contains("task 0x0 arg"), "{replay}");
}

#[test]
fn a_user_error_is_one_line_without_a_backtrace() {
    let _bound = ferry_watchdog::bound("the ferry binary");
    let o = run(&["report", "/nonexistent/ferry-run"]);
    assert_eq!(o.status.code(), Some(1));
    let e = text(&o.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("Error: ") && e.contains("/nonexistent/ferry-run"), "{e}");
    // Several causes: one line, each said once.
    let f = tmpdir("a-file");
    std::fs::write(&f, b"").unwrap();
    let o = run(&["run", "--example", "vector", "--small", "-o", f.to_str().unwrap()]);
    let e = text(&o.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(!e.contains("Caused by") && !e.contains("backtrace"), "{e}");
    let parts: Vec<&str> = e.trim_start_matches("Error: ").trim().split(": ").collect();
    for (i, p) in parts.iter().enumerate() {
        assert!(!parts[i + 1..].contains(p), "`{p}` said twice: {e}");
    }
    // The backtrace only when asked for.
    for (k, v) in [("FERRY_LOG", "debug"), ("RUST_LIB_BACKTRACE", "1")] {
        let o = ferry().env(k, v).args(["report", "/nonexistent/ferry-run"]).output().unwrap();
        let e = text(&o.stderr);
        assert!(e.lines().count() > 3 && e.contains("main"), "{k}={v}: {e}");
    }
    std::fs::remove_file(&f).unwrap();
}

#[test]
fn a_truncated_input_is_a_non_zero_exit() {
    let _bound = ferry_watchdog::bound("the ferry binary's profiled run and analysis commands");
    let d = tmpdir("truncated");
    std::fs::create_dir_all(&d).unwrap();
    // The original runtime's files, no manifest: read unverified.
    let src = tmpdir("truncated-src");
    ok(&run(&["export", profiled().to_str().unwrap(), "-o", src.to_str().unwrap()]));
    for f in ["chip_swimlane_records.json", "name_map_vector.json", "pmu.csv", "deps.json"] {
        std::fs::copy(src.join(f), d.join(f)).unwrap();
    }
    let sw = d.join("chip_swimlane_records.json");
    let t = std::fs::read(&sw).unwrap();
    std::fs::write(&sw, &t[..t.len() / 2]).unwrap();
    for cmd in ["report", "trace", "view"] {
        let o = run(&[cmd, d.to_str().unwrap()]);
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        // What could be read may be printed; the exit says the swimlane was not.
        assert_eq!(o.status.code(), Some(1), "{cmd}: {out}{err}");
        assert!(err.contains("chip_swimlane_records.json"), "{cmd}: {err}");
    }
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_dir_all(&src).unwrap();
}

#[test]
fn a_failed_run_keeps_a_profile_every_analysis_command_reads() {
    let _bound = ferry_watchdog::bound("the ferry binary's run and analysis commands");
    let wl = tmpdir("bad.toml");
    let good = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workloads/diamond.toml"),
    )
    .unwrap();
    assert!(good.contains("checksum = 402677760.0"));
    std::fs::write(&wl, good.replace("checksum = 402677760.0", "checksum = 1.0")).unwrap();
    let d = tmpdir("failed");
    let o = ferry()
        .args(["run", "--small", "--aic", "2", "--aiv", "4", "--workload"])
        .arg(&wl)
        .args(["--swimlane", "--pmu", "--dep-gen", "--dump-args", "2", "--scope-stats", "-o"])
        .arg(&d)
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(err.contains("wrong result") && err.lines().count() == 1, "{err}");
    let m = Manifest::verified(&d).unwrap();
    match &m.outcome {
        Some(RunOutcome::Failed { error, .. }) => {
            assert!(error.contains("wrong result"), "{error}")
        }
        other => panic!("outcome {other:?}"),
    }
    assert!(out.contains("ferry report"), "{out}");
    let ds = d.to_str().unwrap();
    let page = tmpdir("failed.html");
    for args in [
        vec!["report", ds],
        vec!["deps", ds],
        vec!["dump", "list", ds],
        vec!["scopes", ds],
        vec!["trace", ds],
        vec!["view", ds, "-o", page.to_str().unwrap()],
    ] {
        let o = run(&args);
        ok(&o);
        assert!(text(&o.stderr).contains("failed"), "{args:?}: {}", text(&o.stderr));
    }
    // The report says it in its text, and every command's JSON carries the outcome.
    let r = ok(&run(&["report", ds]));
    assert!(r.lines().nth(1).is_some_and(|l| l.starts_with("the run failed")), "{r}");
    assert!(r.contains("wrong result"), "{r}");
    let pg = page.to_str().unwrap();
    for args in [
        vec!["report", ds, "--json"],
        vec!["deps", ds, "--json"],
        vec!["dump", "list", ds, "--json"],
        vec!["scopes", ds, "--json"],
        vec!["trace", ds, "--json"],
        vec!["view", ds, "-o", pg, "--json"],
    ] {
        let v: serde_json::Value = serde_json::from_str(&ok(&run(&args))).unwrap();
        assert_eq!(v["outcome"]["status"], "failed", "{args:?}: {v}");
        assert!(v["outcome"]["error"].as_str().unwrap().contains("wrong result"), "{v}");
    }
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("the run failed (its profile is complete)"), "the page says it");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&run(&["diff", ds, profiled().to_str().unwrap(), "--json"])))
            .unwrap();
    assert_eq!(v["outcome"][0]["status"], "failed", "{v}");
    assert_eq!(v["outcome"][1]["status"], "ok", "{v}");
    // An interrupted run: the report reads the chunks its native profile sealed; the other
    // commands refuse it as unfinished.
    let mut m = m;
    m.complete = false;
    m.outcome = None;
    m.write(&d).unwrap();
    let r = ok(&run(&["report", ds]));
    assert!(r.starts_with("run interrupted"), "{r}");
    let o = run(&["deps", ds]);
    assert!(!o.status.success() && text(&o.stderr).contains("did not finish"));
    for p in [&d, &wl, &page] {
        let _ = std::fs::remove_dir_all(p);
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn a_profiled_run_says_where_its_files_are_and_what_to_do_next() {
    let _bound = ferry_watchdog::bound("the ferry binary's run");
    let d = tmpdir("next");
    let o = ferry()
        .args(["run", "--example", "vector", "--small", "--swimlane", "--aic", "2", "--aiv", "4"])
        .arg("-o")
        .arg(&d)
        .output()
        .unwrap();
    let out = ok(&o);
    let ds = d.display().to_string();
    // The native profile alone: where it is, and the command that makes the Perfetto trace.
    let native = d.join("profile.ferry").display().to_string();
    assert!(out.contains(&format!("dfx: native profile {native}: ")), "{out}");
    assert!(out.contains(&format!("ferry trace {ds} ")), "{out}");
    assert!(out.contains(&format!("ferry view {ds}")), "{out}");
    assert!(out.contains(&format!("ferry report {ds}")), "{out}");
    // With the original formats, the trace was written: where to open it.
    let o = ferry()
        .args(["run", "--example", "vector", "--small", "--swimlane", "--aic", "2", "--aiv", "4"])
        .args(["--original-formats", "--force", "-o"])
        .arg(&d)
        .output()
        .unwrap();
    let out = ok(&o);
    let trace = d.join("trace.perfetto-trace").display().to_string();
    assert!(out.contains(&format!("open {trace} at https://ui.perfetto.dev")), "{out}");
    assert!(!out.contains(&format!("ferry trace {ds} ")), "{out}");
    // Without a swimlane, no Perfetto line; without DFX, no next steps at all.
    let o = ferry()
        .args(["run", "--example", "vector", "--small", "--pmu", "--force", "-o"])
        .arg(&d)
        .output()
        .unwrap();
    let out = ok(&o);
    assert!(!out.contains("perfetto") && out.contains(&format!("ferry report {ds}")), "{out}");
    let out = ok(&run(&["run", "--example", "vector", "--small", "--force", "-o", &ds]));
    assert!(!out.contains("next:"), "{out}");
    std::fs::remove_dir_all(&d).unwrap();
}
