//! `ferry run --out DIR` owns DIR: reused directories hold one run's files, foreign files and
//! other writers are refused before the chip starts, and runs stopped by a signal (or killed)
//! leave nothing that a later run or reader mistakes for a run.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ferry_profile::{Manifest, OutDir, LOCK_FILE, MANIFEST_FILE};

fn ferry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-outdir-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Every file under `d`, relative, sorted.
fn listing(d: &Path) -> Vec<String> {
    fn walk(root: &Path, d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut v = Vec::new();
    if d.exists() {
        walk(d, d, &mut v);
    }
    v.sort();
    v
}

/// `ferry run ARGS --force --out DIR`: these tests are about what replacing a run leaves.
fn run(args: &[&str], dir: &Path) -> Output {
    ferry()
        .arg("run")
        .args(args)
        .args(["--aic", "2", "--aiv", "4", "--force", "--out"])
        .arg(dir)
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    stdout
}

/// The directory holds exactly its complete manifest's files (plus the manifest and the lock),
/// each unchanged, and no temp file.
fn holds_one_complete_run(d: &Path) -> Manifest {
    let m = Manifest::verified(d).unwrap();
    let mut want: Vec<String> = m.files.iter().map(|e| e.path.clone()).collect();
    want.extend([LOCK_FILE.to_string(), MANIFEST_FILE.to_string()]);
    want.sort();
    assert_eq!(listing(d), want);
    for e in &m.files {
        m.verify(d, &e.path).unwrap();
    }
    m
}

/// The reproducer: a PMU/DepGen run, then a swimlane-only run of another example, into
/// one directory. The second run's directory must not keep the first run's pmu.csv or deps.json.
#[test]
fn a_reused_directory_holds_only_the_last_run() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = tmpdir("reuse");
    let first = ["--example", "vector", "--small", "--pmu", "2", "--dep-gen", "--swimlane", "4"];
    ok(&run(&[&first[..], &["--chrome-json", "--original-formats"]].concat(), &d));
    let first = holds_one_complete_run(&d);
    assert!(first.entry("pmu.csv").is_some() && first.entry("deps.json").is_some());
    assert!(first.entry("trace.chrome.json").is_some());
    let second = ["--example", "paged-attention", "--small", "--swimlane", "1"];
    ok(&run(&[&second[..], &["--original-formats"]].concat(), &d));
    let m = holds_one_complete_run(&d);
    let files: Vec<&str> = m.files.iter().map(|e| e.path.as_str()).collect();
    assert!(!files.contains(&"pmu.csv") && !files.contains(&"deps.json"), "{files:?}");
    // The Chrome JSON only when asked for; the first run's is gone with the rest of it.
    assert!(files.contains(&"trace.perfetto-trace") && !files.contains(&"trace.chrome.json"));
    assert!(files.contains(&"paged-attention.f32") && !files.contains(&"vector.f32"));
    assert!(m.command.iter().any(|a| a == "paged-attention"), "{:?}", m.command);
    // Several examples: each one's native profile in its own subdirectory, all in one manifest,
    // and no original file left of the run before.
    ok(&run(&["--small", "--scope-stats"], &d));
    let m = holds_one_complete_run(&d);
    for ex in ["vector", "paged-attention", "storm"] {
        assert!(m.entry(&format!("{ex}/profile.ferry")).is_some(), "{ex}");
    }
    let files: Vec<&str> = m.files.iter().map(|e| e.path.as_str()).collect();
    assert!(!files.iter().any(|f| f.ends_with(".json") && *f != "summary.json"), "{files:?}");
    // With --original-formats, their files too.
    ok(&run(&["--small", "--scope-stats", "--original-formats"], &d));
    let m = holds_one_complete_run(&d);
    for ex in ["vector", "paged-attention", "storm"] {
        assert!(m.entry(&format!("{ex}/scope_stats/scope_stats.jsonl")).is_some(), "{ex}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// A second run into a directory holding a complete run is refused without `--force`, before
/// the chip starts, naming what it would replace; the first profile stays as it was.
#[test]
fn a_complete_run_is_replaced_only_with_force() {
    let _bound = ferry_watchdog::bound("the ferry binary's runs");
    let d = tmpdir("guard");
    let once = ["run", "--example", "vector", "--small", "--swimlane", "--aic", "2", "--aiv", "4"];
    ok(&ferry().args(once).arg("--out").arg(&d).output().unwrap());
    let first = holds_one_complete_run(&d);
    let bytes: Vec<Vec<u8>> =
        first.files.iter().map(|e| std::fs::read(d.join(&e.path)).unwrap()).collect();
    let again = ["run", "--example", "paged-attention", "--small", "--pmu", "--aic", "2"];
    let o = ferry().args(again).arg("-o").arg(&d).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{stdout}{stderr}");
    assert!(!stdout.contains("simulated"), "the chip started: {stdout}");
    assert!(
        stderr.contains("holds a complete ferry run")
            && stderr.contains("--force")
            && stderr.contains("profile.ferry")
            && stderr.contains("vector.f32"),
        "{stderr}"
    );
    assert_eq!(holds_one_complete_run(&d), first);
    for (e, b) in first.files.iter().zip(&bytes) {
        assert_eq!(&std::fs::read(d.join(&e.path)).unwrap(), b, "{}", e.path);
    }
    // With --force the second run replaces the first.
    let o = ferry().args(again).arg("--force").arg("-o").arg(&d).output().unwrap();
    ok(&o);
    let second = holds_one_complete_run(&d);
    assert!(second.entry("profile.ferry").is_some() && second.entry("vector.f32").is_none());
    assert!(second.entry("paged-attention.f32").is_some());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn foreign_files_a_file_and_a_busy_directory_are_refused_before_the_chip_starts() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = tmpdir("refused");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("deps.json"), b"not ferry's").unwrap();
    let o = run(&["--example", "vector", "--small"], &d);
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!o.status.success());
    assert!(
        stderr.contains("deps.json") && stderr.contains("no ferry run there wrote"),
        "{stderr}"
    );
    assert!(!stdout.contains("simulated"), "the chip started: {stdout}");
    assert_eq!(std::fs::read(d.join("deps.json")).unwrap(), b"not ferry's");
    std::fs::remove_file(d.join("deps.json")).unwrap();
    // A file where the directory should be.
    let f = d.join("a-file");
    std::fs::write(&f, b"").unwrap();
    let o = run(&["--example", "vector", "--small"], &f);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a directory"));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("simulated"));
    // Another writer holds the directory.
    let held = OutDir::claim(&d, &[]).unwrap();
    let o = run(&["--example", "vector", "--small"], &d);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("another ferry process is writing"));
    drop(held);
    ok(&run(&["--example", "vector", "--small"], &d));
    std::fs::remove_dir_all(&d).unwrap();
}

/// A file under a final name is never half written: each one parses as what it is.
fn complete(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap();
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    if name.ends_with(".json") {
        serde_json::from_slice::<serde_json::Value>(&bytes).is_ok()
    } else if name.ends_with(".jsonl") {
        std::str::from_utf8(&bytes).is_ok_and(|t| {
            t.ends_with('\n')
                && t.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
        })
    } else if name.ends_with(".csv") {
        bytes.ends_with(b"\n")
    } else if name.ends_with(".f32") {
        bytes.len() % 4 == 0 && !bytes.is_empty()
    } else {
        true
    }
}

/// This process's children's device directories: `runner-<pid>-…` in the user's device root.
fn device_dirs_of(pid: u32) -> Vec<String> {
    let root = ferry_sim::device_root::user_root();
    let Ok(rd) = std::fs::read_dir(&root) else { return Vec::new() };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| ferry_sim::device_root::owner_of(n).is_some_and(|(p, _)| p == pid))
        .collect()
}

/// SIGINT and SIGKILL at spread-out points of a run with every DFX subsystem on: a run stopped
/// by SIGINT exits 130 after removing its temp files and device directory; after either, no
/// file under a final name is partial, and the next run into the directory leaves only its own
/// files (the killed run's temp files and device directory are gone too).
#[test]
fn runs_stopped_by_signals_leave_no_partial_file_and_the_next_run_cleans_up() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = tmpdir("signals");
    let all = [
        "--example",
        "storm",
        "--small",
        "--swimlane",
        "4",
        "--pmu",
        "2",
        "--dep-gen",
        "--dump-args",
        "3",
        "--scope-stats",
    ];
    // A first complete run, so the stopped ones also have an earlier run's files to mix in.
    ok(&run(&all, &d));
    let t0 = Instant::now();
    ok(&run(&all, &d));
    let whole = t0.elapsed();
    // Points from the start to past the end of a run.
    let mut seed = std::process::id() as u64 ^ 0x9E37_79B9_7F4A_7C15;
    let mut stopped_by_int = 0;
    for (i, sig) in ["INT", "KILL", "INT", "KILL", "INT", "INT", "KILL", "INT"].iter().enumerate() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let at = whole.mul_f64((i as f64 + (seed % 1000) as f64 / 1000.0) / 7.0);
        let mut child = ferry()
            .arg("run")
            .args(all)
            .args(["--aic", "2", "--aiv", "4", "--log", "warn,ferry::signals=debug"])
            .args(["--force", "--out"])
            .arg(&d)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // The signal is sent only after the run says its handling is installed (a SIGINT
        // before that would end it with the default action, which no user relies on), however
        // late the scheduler starts it; the 120 s bound is a hang guard.
        let (installed_tx, installed) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            let mut all = String::new();
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("handling installed") {
                    let _ = installed_tx.send(());
                }
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        installed
            .recv_timeout(Duration::from_secs(120))
            .expect("hang guard: the run never said its signal handling was installed");
        std::thread::sleep(at);
        if *sig == "KILL" {
            let _ = child.kill();
        } else {
            Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
        }
        let status = child.wait().unwrap();
        let stderr = reader.join().unwrap();
        let what = format!("SIG{sig} after {at:?} (run takes {whole:?})");
        match (status.code(), *sig) {
            (Some(0), _) => {} // finished first
            (Some(130), "INT") => {
                stopped_by_int += 1;
                assert!(stderr.contains("stopped by SIGINT"), "{what}: {stderr}");
                let temps: Vec<String> =
                    listing(&d).into_iter().filter(|f| f.contains(".tmp.")).collect();
                assert!(temps.is_empty(), "{what}: temp files left: {temps:?}");
                assert!(device_dirs_of(pid).is_empty(), "{what}: device directory left");
            }
            (None, "KILL") => {}
            (code, _) => panic!("{what}: exit {code:?}: {stderr}"),
        }
        for f in listing(&d) {
            if !f.contains(".tmp.") {
                assert!(complete(&d.join(&f)), "{what}: {f} is partial");
            }
        }
        // Readers trust the directory only when the stopped run had finished.
        if let Err(e) = Manifest::verified(&d) {
            assert!(e.to_string().contains("did not finish"), "{what}: {e}");
        }
        // The next run (another configuration) cleans up whatever was left.
        ok(&run(&["--example", "vector", "--small", "--pmu", "2"], &d));
        let m = holds_one_complete_run(&d);
        assert!(m.entry("deps.json").is_none() && m.entry("vector.f32").is_some(), "{what}");
        assert!(device_dirs_of(pid).is_empty(), "{what}: the killed run's device directory stays");
        // And back to the full configuration for the next round.
        ok(&run(&all, &d));
    }
    assert!(stopped_by_int > 0, "no SIGINT landed inside a run");
    std::fs::remove_dir_all(&d).unwrap();
}

/// Two runs started together into one directory (the issue saw 1 in 30 fail renaming
/// summary.json over the other's fixed temp name): each either completes or is refused because
/// the other holds the directory, and the directory ends up holding one complete run.
#[test]
fn concurrent_runs_into_one_directory_never_mix_or_trip_over_each_other() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = tmpdir("concurrent");
    for round in 0..6 {
        let spawn = |ex: &str| {
            ferry()
                .args(["run", "--example", ex, "--small", "--swimlane", "2"])
                .args(["--aic", "2", "--aiv", "4", "--force", "--out"])
                .arg(&d)
                .output()
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| spawn("vector").unwrap());
            let b = s.spawn(|| spawn("paged-attention").unwrap());
            (a.join().unwrap(), b.join().unwrap())
        });
        let mut succeeded = 0;
        for o in [&a, &b] {
            if o.status.success() {
                succeeded += 1;
            } else {
                let e = String::from_utf8_lossy(&o.stderr);
                assert!(e.contains("another ferry process is writing"), "round {round}: {e}");
            }
        }
        assert!(succeeded >= 1, "round {round}: both refused");
        holds_one_complete_run(&d);
    }
    std::fs::remove_dir_all(&d).unwrap();
}
