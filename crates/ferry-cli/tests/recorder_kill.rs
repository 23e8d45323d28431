//! The native profile survives SIGKILL: `ferry run` killed at ten points spread over a
//! profiled run (after sealing chunk N, chosen by the recorder's test hook, never by a sleep)
//! leaves a directory that `ferry report` reads as interrupted, holding every record of every
//! chunk sealed before the kill; the next run into the directory works.
mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Output;

use common::{ferry, scratch};
use ferry_profile::recorder::{read_recording, KILL_AFTER_CHUNK_ENV, RECORD_FILE};

/// A storm with every subsystem on and small buffers: a few hundred chunks in a second or two.
fn run(dir: &Path, kill_after: Option<u64>) -> Output {
    let mut c = ferry();
    c.args(["run", "--example", "storm", "--small", "--swimlane", "4", "--pmu", "2"])
        .args(["--dep-gen", "--dump-args", "3", "--scope-stats", "--dfx-records", "64"])
        .arg("--out")
        .arg(dir)
        .env_remove(KILL_AFTER_CHUNK_ENV);
    if let Some(n) = kill_after {
        c.env(KILL_AFTER_CHUNK_ENV, n.to_string());
    }
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `(chunks, records)` of the hook's line `killed after N sealed chunks, R records`.
fn sealed_at_kill(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("ferry: recorder: killed after "))
        .unwrap_or_else(|| panic!("no kill line:\n{stderr}"));
    let (chunks, rest) = line.split_once(" sealed chunks, ").unwrap();
    let records = rest.strip_suffix(" records").unwrap();
    (chunks.parse().unwrap(), records.parse().unwrap())
}

/// Records the transport collected, from `ferry run`'s `dfx:` line (`… N collected …`).
fn collected(stdout: &str) -> u64 {
    let line = stdout.lines().find(|l| l.starts_with("dfx:") && l.contains(" collected")).unwrap();
    let before = line.split(" collected").next().unwrap();
    before.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_killed_run_keeps_every_sealed_chunk_and_the_next_run_works() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    let dir = scratch("recorder-kill");
    let first = scratch("recorder-whole");
    // A complete run first (in a directory of its own): how many chunks a run seals, and that
    // they hold every record the transport collected.
    let out = run(&first, None);
    assert!(out.status.success(), "{}", text(&out));
    let handle = ferry_fs::Dir::open(&first).unwrap();
    let whole = read_recording(&handle, RECORD_FILE, u64::MAX).unwrap();
    assert_eq!(whole.torn_bytes, 0);
    assert_eq!(whole.total(), collected(&String::from_utf8_lossy(&out.stdout)));
    let chunks = whole.chunks.len() as u64;
    assert!(chunks >= 40, "{chunks} chunks: too few to spread ten kills over");
    for k in 0..10u64 {
        // Spread over the run: from the first chunk to 90 % of a complete run's.
        let n = 1 + k * (chunks * 9 / 10 - 1) / 9;
        let killed = run(&dir, Some(n));
        assert_eq!(killed.status.signal(), Some(libc::SIGKILL), "kill {n}: {}", text(&killed));
        let stderr = String::from_utf8_lossy(&killed.stderr).to_string();
        let (sealed, records) = sealed_at_kill(&stderr);
        assert_eq!(sealed, n, "{stderr}");
        let report = ferry().arg("report").arg(&dir).arg("--json").output().unwrap();
        assert!(report.status.success(), "kill {n}: {}", text(&report));
        let j: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
        assert_eq!(j["outcome"]["status"], "interrupted", "{j}");
        assert_eq!(j["sealed_chunks"], sealed, "kill {n}: {j}");
        assert_eq!(j["records"], records, "kill {n}: {j}");
        // The hook tore the next chunk: the tail is there, and ignored.
        assert!(j["torn_bytes"].as_u64().unwrap() > 0, "{j}");
        let text_report = ferry().arg("report").arg(&dir).output().unwrap();
        assert!(String::from_utf8_lossy(&text_report.stdout).contains("run interrupted"));
    }
    // A killed run has no original formats to export: refused, nothing written.
    let out_dir = dir.with_extension("export");
    let e = ferry().arg("export").arg(&dir).arg("-o").arg(&out_dir).output().unwrap();
    assert!(!e.status.success() && text(&e).contains("did not finish"), "{}", text(&e));
    assert!(!out_dir.join("deps.json").exists());
    let _ = std::fs::remove_dir_all(&out_dir);
    // The next run into the directory of a killed one needs no --force, and finishes.
    let out = run(&dir, None);
    assert!(out.status.success(), "{}", text(&out));
    let report = ferry().arg("report").arg(&dir).arg("--json").output().unwrap();
    assert!(report.status.success(), "{}", text(&report));
    let j: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_ne!(j["outcome"]["status"], "interrupted", "{j}");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&first).unwrap();
}
