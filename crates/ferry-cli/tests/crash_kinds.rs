//! Kernels that end the process, and signals that stop a run: `ferry run` never exits 0, the
//! run's end record names the cause, the kernel, the task and its core, `ferry report` reads the
//! directory as interrupted with every chunk the process had sealed, and the next run into the
//! directory works. The kernels are the faulty-kernels fixture's (`segv`, `abort`, `overflow`,
//! `quit`, `hang`), built offline from the kernel template's ABI crate.
#[path = "../../ferry-runtime/tests/support/template.rs"]
mod template;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use ferry_profile::run_end::RUN_END_FILE;

fn ferry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A scratch directory (named by `tag`) holding a one-task workload of `kernel` on `x`.
fn workload(kernel: &str, tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ferry-crash-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let wl = dir.join(format!("{kernel}.toml"));
    std::fs::write(
        &wl,
        format!(
            "[workload]\nname = \"{kernel}\"\nverify = \"host-reference\"\noutputs = [\"x\"]\n\
             [[tensor]]\nname = \"x\"\nshape = [16]\n\
             [[graph]]\nkernel = \"{kernel}\"\nargs = [{{ tensor = \"x\", role = \"inout\" }}]\n"
        ),
    )
    .unwrap();
    (dir.clone(), wl)
}

/// `ferry run` of `wl` with the faulty kernels and all five DFX subsystems into `out`.
fn run_cmd(wl: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = ferry();
    c.args(["run", "--small", "--aic", "2", "--aiv", "4", "--kernels"])
        .arg(template::faulty_lib())
        .arg("--workload")
        .arg(wl)
        .args(["--swimlane", "4", "--pmu", "2", "--dep-gen", "--dump-args", "3", "--scope-stats"])
        .args(["--dfx-records", "4"])
        .args(extra)
        .arg("--out")
        .arg(out);
    c
}

/// `ferry report DIR --json` of an interrupted run: its JSON, checked to say `interrupted`, to
/// hold at least the chunks and records the process had sealed when it ended, and to name
/// `kernel`'s task 0x0 as the faulting core's and among the unfinished ones.
fn interrupted(out: &Path, kernel: &str) -> serde_json::Value {
    let o = ferry().arg("report").arg(out).arg("--json").output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["outcome"]["status"], "interrupted", "{j}");
    let end = &j["outcome"]["end"];
    assert!(j["sealed_chunks"].as_u64().unwrap() >= end["sealed_chunks"].as_u64().unwrap(), "{j}");
    assert!(j["records"].as_u64().unwrap() >= end["sealed_records"].as_u64().unwrap(), "{j}");
    let unfinished = end["unfinished"].as_array().unwrap();
    assert!(
        unfinished.iter().any(|t| t["kernel"] == kernel && t["task"] == "0x0"),
        "{kernel}: {j}"
    );
    let text = ferry().arg("report").arg(out).output().unwrap();
    let t = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(t.contains(&format!("task 0x0 ({kernel}) started and never ended")), "{t}");
    j
}

/// The next run into the directory of an interrupted one needs no `--force` and finishes.
fn next_run_works(out: &Path) {
    let diamond = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/workloads/diamond.toml");
    let o = ferry()
        .args(["run", "--small", "--swimlane", "4", "--workload", diamond, "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let m = ferry_profile::Manifest::verified(out).unwrap();
    assert!(m.complete, "{m:?}");
    assert!(!out.join(RUN_END_FILE).exists(), "a run that ends well leaves no end record");
}

/// Each kernel that ends the process: how the process ends, and what the end record says.
#[test]
fn a_kernel_that_ends_the_process_is_named_and_the_run_is_interrupted() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    for (kernel, cause) in
        [("segv", "SIGSEGV"), ("abort", "SIGABRT"), ("overflow", "SIGSEGV"), ("quit", "exit(0)")]
    {
        let (dir, wl) = workload(kernel, kernel);
        let out = dir.join("out");
        let o = run_cmd(&wl, &out, &[]).output().unwrap();
        let t = text(&o);
        assert!(!o.status.success(), "{kernel}: {t}");
        match kernel {
            "segv" => assert_eq!(o.status.signal(), Some(libc::SIGSEGV), "{t}"),
            "abort" => assert_eq!(o.status.signal(), Some(libc::SIGABRT), "{t}"),
            // Rust's own overflow handler, which the guard hands the fault on to, aborts.
            "overflow" => assert_eq!(o.status.signal(), Some(libc::SIGABRT), "{t}"),
            _ => assert_eq!(o.status.code(), Some(70), "{t}"),
        }
        let said = format!("ferry: kernel `{kernel}` (task 0x0, core ");
        assert!(t.contains(&said), "{kernel}: {said:?} missing: {t}");
        assert!(t.contains(&format!("ended the run: {cause}")), "{kernel}: {t}");
        let j = interrupted(&out, kernel);
        let end = &j["outcome"]["end"];
        assert_eq!(end["name"], cause, "{j}");
        assert_eq!(end["task"]["kernel"], kernel, "{j}");
        assert_eq!(end["task"]["task"], "0x0", "{j}");
        assert_eq!(end["stack_overflow"], kernel == "overflow", "{j}");
        match kernel {
            "quit" => assert_eq!(end["cause"], serde_json::json!({"kind": "exit", "status": 0})),
            "segv" => assert_eq!(end["fault_address"], "0x0", "{j}"),
            _ => {}
        }
        assert!(j["outcome"]["cause"].as_str().unwrap().starts_with(cause), "{j}");
        next_run_works(&out);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A kernel that loops is stopped by the kernel budget: the run fails (not interrupted), its
/// manifest names the kernel and the task, and it leaves no end record.
#[test]
fn a_kernel_that_loops_fails_by_the_budget_and_leaves_no_end_record() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let (dir, wl) = workload("hang", "budget");
    let out = dir.join("out");
    let o = run_cmd(&wl, &out, &["--timeout", "300ms"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let m = ferry_profile::Manifest::verified(&out).unwrap();
    let task = m.outcome.as_ref().and_then(|o| o.failed_task()).expect("the task");
    assert_eq!((task.id, task.kernel.as_str()), (0, "hang"));
    assert!(!out.join(RUN_END_FILE).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGINT and SIGTERM while a kernel runs (the test waits for the kernel's own line, never for
/// a time): the run exits 128 + the signal, the end record names the signal and the core's
/// unfinished task, and the next run works.
#[test]
fn ctrl_c_and_sigterm_keep_what_was_sealed_and_name_the_running_task() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let (dir, wl) = workload("hang", name);
        let out = dir.join("out");
        let mut child = run_cmd(&wl, &out, &[]).stderr(Stdio::piped()).spawn().unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            assert!(err.read_line(&mut line).unwrap() > 0, "ended before the kernel ran: {seen}");
            seen.push_str(&line);
            if line.contains("faulty-kernels: hang started") {
                break;
            }
        }
        // SAFETY: `kill` on the child's pid, which has not been waited for.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(128 + sig), "{seen}{rest}");
        assert!(rest.contains(&format!("the run was ended: {name}")), "{rest}");
        let j = interrupted(&out, "hang");
        assert_eq!(j["outcome"]["end"]["name"], name, "{j}");
        assert_eq!(j["outcome"]["cause"], name, "{j}");
        next_run_works(&out);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
