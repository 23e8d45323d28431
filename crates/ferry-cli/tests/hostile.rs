//! The analysis commands on hostile, broken and foreign files (reproducers of real failures, each
//! through the `ferry` binary): replay of crafted metadata, closed pipes, files a command does
//! not need, the manifest check, the no-manifest rule and the messages a user hits.
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use ferry_profile::{hash_file, Manifest, ManifestEntry, MANIFEST_FILE};
use serde_json::Value;

fn ferry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-hostile-{tag}-{}", std::process::id()));
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

/// A failure with a message, never a panic (exit 1, no "panicked").
fn fails(o: &Output) -> String {
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}\n{e}", text(&o.stdout));
    assert!(!e.contains("panicked"), "{e}");
    e
}

fn cli(args: &[&str], dir: &Path) -> Output {
    // The run directory comes right after the command (`dump`'s: after its subcommand).
    let at = if args[0] == "dump" { 2 } else { 1 };
    ferry().args(&args[..at]).arg(dir).args(&args[at..]).output().unwrap()
}

/// A `--small` vector run with all five subsystems in the original formats, made once per test
/// binary; each test copies it.
fn pristine() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tmpdir("pristine");
        ok(&ferry()
            .args(["run", "--example", "vector", "--small", "--aic", "2", "--aiv", "4"])
            .args(["--swimlane", "4", "--pmu", "2", "--dep-gen", "--dump-args", "3"])
            .args(["--scope-stats", "--original-formats"])
            .arg("--out")
            .arg(&d)
            .output()
            .unwrap());
        d
    })
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A fresh copy of the pristine run.
fn run_copy(tag: &str) -> PathBuf {
    let d = tmpdir(tag);
    copy_dir(pristine(), &d);
    d
}

/// Re-writes the manifest so every listed file's size and hash are what is on disk now: the
/// parsers, not the hash check, meet the crafted content.
fn reseal(d: &Path) {
    let mut m = Manifest::verified(d).unwrap();
    for e in &mut m.files {
        let w = hash_file(&d.join(&e.path)).unwrap();
        *e = ManifestEntry {
            path: e.path.clone(),
            bytes: Some(w.bytes),
            xxh3: Some(format!("{:016x}", w.xxh3)),
        };
    }
    m.write(d).unwrap();
}

fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
}

fn args_json(d: &Path) -> PathBuf {
    d.join("args_dump").join("args_dump.json")
}

/// The index in `args` of task 0's after-completion output.
fn task0_output(v: &Value) -> usize {
    v["args"]
        .as_array()
        .unwrap()
        .iter()
        .position(|a| a["task_id"] == "0x0000000000000000" && a["stage"] == "after_completion")
        .unwrap()
}

/// An edit of `args_dump.json` given the index of task 0's output.
type Edit = fn(&mut Value, usize);

#[test]
fn replay_of_crafted_metadata_is_a_typed_error_not_a_panic_or_an_abort() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = run_copy("replay");
    assert!(ok(&cli(&["dump", "replay", "--task", "0"], &d)).contains("outputs reproduced"));
    // (edit, what the error says)
    let cases: [(&str, Edit, &str); 5] = [
        ("numel 2^62", |v, i| v["args"][i]["numel"] = (1u64 << 62).into(), "numel"),
        (
            "numel 2^40 with a matching shape",
            |v, i| {
                v["args"][i]["numel"] = (1u64 << 40).into();
                v["args"][i]["shape"] = serde_json::json!([1u64 << 40]);
            },
            "payload bytes",
        ),
        ("arg_index 4e9", |v, i| v["args"][i]["arg_index"] = 4_000_000_000u32.into(), "arg_index"),
        (
            "an INT8 tensor of the same bytes",
            |v, i| {
                v["args"][i]["dtype"] = "INT8".into();
                v["args"][i]["numel"] = 4096.into();
                v["args"][i]["shape"] = serde_json::json!([4096]);
            },
            "INT8",
        ),
        ("big-endian payloads", |v, _| v["bin_format"]["byte_order"] = "big".into(), "little"),
    ];
    for (name, edit, says) in cases {
        let d2 = tmpdir("replay-case");
        copy_dir(&d, &d2);
        edit_json(&args_json(&d2), |v| {
            let i = task0_output(v);
            edit(v, i)
        });
        reseal(&d2);
        let e = fails(&cli(&["dump", "replay", "--task", "0"], &d2));
        assert!(e.contains(says), "{name}: {e}");
        std::fs::remove_dir_all(&d2).unwrap();
    }
    // total_args that disagrees with the list.
    edit_json(&args_json(&d), |v| v["total_args"] = 7.into());
    reseal(&d);
    assert!(fails(&cli(&["dump", "list"], &d)).contains("total_args 7"));
    std::fs::remove_dir_all(&d).unwrap();
}

/// Spawns `args` with its stdout a pipe whose reader is already gone.
fn into_closed_pipe(args: &[&str]) -> Output {
    let mut child =
        ferry().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take()); // the reader goes before the first write
    let mut err = Vec::new();
    child.stderr.take().unwrap().read_to_end(&mut err).unwrap();
    let status = child.wait().unwrap();
    Output { status, stdout: Vec::new(), stderr: err }
}

#[test]
fn a_closed_pipe_ends_output_quietly_with_exit_0() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = pristine().to_str().unwrap().to_string();
    for args in [
        vec!["dump", "list", &d],
        vec!["deps", &d],
        vec!["report", &d],
        vec!["info", "--devices", "64"],
    ] {
        let o = into_closed_pipe(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert!(!text(&o.stderr).contains("panicked"), "{args:?}: {}", text(&o.stderr));
    }
}

#[test]
fn commands_read_only_the_files_they_need() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = run_copy("needs");
    let pmu = d.join("pmu.csv");
    let t = std::fs::read(&pmu).unwrap();
    // Cut mid-row, just before a comma: the last row is short of fields whatever the rows' widths
    // (half the file can end exactly at a row's end, a shorter file that parses).
    let cut = t[..t.len() / 2].iter().rposition(|&b| b == b',').unwrap();
    std::fs::write(&pmu, &t[..cut]).unwrap();
    // deps never reads pmu.csv, nor args.bin (gone here).
    std::fs::remove_file(d.join("args_dump").join("args.bin")).unwrap();
    let o = cli(&["deps"], &d);
    assert!(ok(&o).contains("20 tasks"));
    assert!(!text(&o.stderr).contains("pmu.csv"), "{}", text(&o.stderr));
    // report reads everything there but args.bin, and a file it cannot trust fails it: the
    // changed pmu.csv is refused, naming it and saying what to do.
    let err = fails(&cli(&["report"], &d));
    assert!(err.contains("pmu.csv") && err.contains("rerun"), "{err}");
    // A replay needs the payloads: the manifest lists args.bin, so its absence is refused.
    let o = cli(&["dump", "replay", "--task", "0"], &d);
    assert!(!o.status.success() && text(&o.stderr).contains("args.bin"), "{}", text(&o.stderr));
    // Resealed, the truncated CSV reaches its parser: an error naming the line.
    reseal_without(&d, "args_dump/args.bin");
    assert!(fails(&cli(&["report"], &d)).contains("pmu.csv: line"));
    // deps, which never reads it, still works.
    assert!(ok(&cli(&["deps"], &d)).contains("20 tasks"));
    // Unlisted now, args.bin may be absent only where args_dump.json names no bin file (a dump
    // without payloads); this one names it.
    let o = cli(&["dump", "replay", "--task", "0"], &d);
    let err = text(&o.stderr);
    assert!(!o.status.success() && err.contains("bin_file \"args.bin\" is missing"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// [`reseal`], dropping `gone` from the manifest.
fn reseal_without(d: &Path, gone: &str) {
    let mut m = Manifest::verified(d).unwrap();
    m.files.retain(|e| e.path != gone);
    m.write(d).unwrap();
    reseal(d);
}

#[test]
fn inconsistent_metadata_is_an_error_or_a_warning_never_a_wrapped_number() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = run_copy("inconsistent");
    // A clock of 0 leaves no time to report: an error naming the field (report reads every
    // file that is there, and one it cannot read fails it).
    let mut clock = Value::Null;
    edit_json(&d.join("chip_swimlane_records.json"), |v| {
        clock = v["metadata"]["clock_freq_hz"].take();
        v["metadata"]["clock_freq_hz"] = 0.into();
    });
    reseal(&d);
    assert!(fails(&cli(&["report"], &d)).contains("clock_freq_hz is 0"));
    edit_json(&d.join("chip_swimlane_records.json"), |v| {
        v["metadata"]["clock_freq_hz"] = clock.clone();
    });
    // An edge to a task the graph does not list, added (a device-orchestrated run's edges are
    // those to tasks still in flight at each submit: how many there are depends on timing).
    edit_json(&d.join("deps.json"), |v| {
        let pred = v["tasks"][0]["task_id"].clone();
        v["edges"].as_array_mut().unwrap().push(serde_json::json!({
            "pred": pred, "succ": "77777", "arg": 0, "source": "tensormap", "flags": []
        }));
    });
    let scopes = d.join("scope_stats").join("scope_stats.jsonl");
    let t = std::fs::read_to_string(&scopes).unwrap();
    let (head, rest) = t.split_once('\n').unwrap();
    let mut h: Value = serde_json::from_str(head).unwrap();
    h["task_window_max"] = serde_json::json!([0, 0, 0, 0]);
    std::fs::write(&scopes, format!("{h}\n{rest}")).unwrap();
    reseal(&d);
    let o = cli(&["report"], &d);
    let err = text(&o.stderr);
    ok(&o);
    assert!(err.contains("edge(s) name a task") && err.contains("0x12fd1"), "{err}");
    assert!(err.contains("ring 1 has scope records but no task-window capacity"), "{err}");
    // A start at u64::MAX: a warning, and no wrapped figure in the report.
    let d2 = run_copy("start-max");
    edit_json(&d2.join("chip_swimlane_records.json"), |v| {
        v["aicore_tasks"][0][3] = u64::MAX.into();
    });
    reseal(&d2);
    let o = cli(&["report"], &d2);
    let (out, err) = (ok(&o), text(&o.stderr));
    assert!(err.contains("end before they start"), "{err}");
    assert!(out.contains("order check: ") && !out.contains("18446744073709551"), "{out}");
    // Every task ending at u64::MAX: per-kernel sums past u64::MAX saturate (no overflow panic).
    edit_json(&d2.join("chip_swimlane_records.json"), |v| {
        for t in v["aicore_tasks"].as_array_mut().unwrap() {
            t[4] = u64::MAX.into();
        }
    });
    reseal(&d2);
    ok(&cli(&["report"], &d2));
    ok(&cli(&["view"], &d2));
    // Threads beyond any chip are refused by the reader (they sized the trace's tracks).
    edit_json(&d2.join("chip_swimlane_records.json"), |v| {
        v["metadata"]["core_to_thread"][0] = i32::MAX.into();
    });
    reseal(&d2);
    assert!(fails(&cli(&["trace"], &d2)).contains("core_to_thread names thread"));
    for d in [d, d2] {
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn the_manifest_decides_what_is_read() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = run_copy("manifest");
    // A needed file that changed: refused, naming it and what to do.
    let deps = d.join("deps.json");
    let good = std::fs::read(&deps).unwrap();
    let mut t = good.clone();
    t[10] ^= 1;
    std::fs::write(&deps, &t).unwrap();
    let e = fails(&cli(&["deps"], &d));
    assert!(e.contains("deps.json changed since the run wrote it"), "{e}");
    assert!(e.contains("rerun `ferry run --out DIR`") && e.contains(MANIFEST_FILE), "{e}");
    std::fs::write(&deps, &good).unwrap();
    // Not listed (a file of another run): refused.
    let mut m = Manifest::verified(&d).unwrap();
    m.files.retain(|e| e.path != "deps.json");
    m.write(&d).unwrap();
    let e = fails(&cli(&["deps"], &d));
    assert!(e.contains("deps.json is not listed in the manifest"), "{e}");
    // An unfinished run: refused, but by the report, which reads what its native profile sealed.
    let mut m = Manifest::verified(&d).unwrap();
    m.complete = false;
    m.write(&d).unwrap();
    assert!(fails(&cli(&["deps"], &d)).contains("did not finish"));
    assert!(ok(&cli(&["report"], &d)).starts_with("run interrupted"));
    // No manifest (another tool's, an older ferry's, the library's): read, with a warning.
    std::fs::remove_file(d.join(MANIFEST_FILE)).unwrap();
    let o = cli(&["deps"], &d);
    assert!(ok(&o).contains("20 tasks"));
    let err = text(&o.stderr);
    assert!(err.contains("has no ferry-manifest.json") && err.contains("unverified"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
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
    walk(d, d, &mut v);
    v.sort();
    v
}

#[test]
fn files_analysis_writes_into_a_run_belong_to_it_and_go_with_it() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = tmpdir("trace-view");
    let run = |args: &[&str]| {
        ferry()
            .args(["run", "--small", "--aic", "2", "--aiv", "4", "--force"])
            .args(args)
            .arg("--out")
            .arg(&d)
            .output()
            .unwrap()
    };
    ok(&run(&["--example", "vector", "--swimlane", "2", "--scope-stats"]));
    ok(&cli(&["trace"], &d));
    ok(&cli(&["view"], &d));
    ok(&cli(&["scopes"], &d));
    let m = Manifest::verified(&d).unwrap();
    for f in ["swimlane.html", "scope_stats/scope_stats.html", "trace.perfetto-trace"] {
        m.verify(&d, f).unwrap();
    }
    // The next run is not refused for "foreign" files and leaves only its own.
    ok(&run(&["--example", "paged-attention"]));
    let m = Manifest::verified(&d).unwrap();
    let mut want: Vec<String> = m.files.iter().map(|e| e.path.clone()).collect();
    want.extend([".ferry.lock".to_string(), MANIFEST_FILE.to_string()]);
    want.sort();
    assert_eq!(listing(&d), want);
    assert!(!want.iter().any(|f| f.contains("html") || f.contains("trace")), "{want:?}");
    // In a run of several examples, a page written into DIR/<example>/ is recorded in DIR's
    // manifest.
    ok(&run(&["--swimlane", "1"]));
    let ex = d.join("vector");
    ok(&cli(&["view"], &ex));
    Manifest::verified(&d).unwrap().verify(&d, "vector/swimlane.html").unwrap();
    // A session of several examples: DIR/<example>/run-NNN/, read from the native profile in
    // DIR/<example>/ (the run's directory is made for the page a command writes there), is
    // covered by DIR's manifest and read verified (no warning).
    ok(&run(&["--swimlane", "1", "--repeat", "2"]));
    assert!(!d.join("vector/run-001").exists());
    for sub in ["vector", "vector/run-001"] {
        let o = cli(&["report"], &d.join(sub));
        ok(&o);
        assert!(!text(&o.stderr).contains("unverified"), "{sub}: {}", text(&o.stderr));
    }
    ok(&cli(&["view"], &d.join("vector/run-001")));
    Manifest::verified(&d).unwrap().verify(&d, "vector/run-001/swimlane.html").unwrap();
    ok(&cli(&["report"], &d.join("vector/run-001")));
    // In the original formats, a file changed after the run is refused.
    ok(&run(&["--swimlane", "1", "--repeat", "2", "--original-formats"]));
    let f = d.join("vector/run-001/chip_swimlane_records.json");
    let mut bytes = std::fs::read(&f).unwrap();
    let last = bytes.len() - 2;
    bytes[last] = b' ';
    std::fs::write(&f, bytes).unwrap();
    let e = fails(&cli(&["report"], &d.join("vector/run-001")));
    assert!(e.contains("changed since the run") || e.contains("refused"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn messages_say_what_is_wrong_and_what_to_do() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let e = fails(&cli(&["report"], Path::new("/nonexistent")));
    assert!(e.contains("/nonexistent: no such directory"), "{e}");
    // Two examples' files: the hint names the subdirectories to pass.
    let d = tmpdir("several");
    ok(&ferry()
        .args(["run", "--small", "--aic", "2", "--aiv", "4", "--dep-gen", "--out"])
        .arg(&d)
        .output()
        .unwrap());
    for cmd in ["report", "deps"] {
        let e = fails(&cli(&[cmd], &d));
        assert!(e.contains("a run of several examples") && e.contains("vector"), "{cmd}: {e}");
    }
    ok(&cli(&["deps"], &d.join("vector")));
    // A role that does not exist lists the ones that do.
    let o = ferry().args(["dump", "list"]).arg(&d).args(["--role", "bogus"]).output().unwrap();
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("INPUT, OUTPUT, INOUT, SCALAR"), "{e}");
    // A subsystem the run did not record: the same kind of message, exit 1, from every
    // command, read from the native profile or from the original files.
    let v = d.join("vector");
    let x = tmpdir("several-export");
    ok(&ferry().arg("export").arg(&v).arg("-o").arg(&x).output().unwrap());
    for (cmd, what, file, opt) in [
        (&["scopes"][..], "ScopeStats", "scope_stats/scope_stats.jsonl", "--scope-stats"),
        (&["dump", "list"], "ArgsDump", "args_dump/args_dump.json", "--dump-args"),
        (&["trace"], "ChipSwimlane", "chip_swimlane_records.json", "--swimlane"),
    ] {
        let e = fails(&cli(cmd, &v));
        assert!(e.contains(&format!("has no {what} records")) && e.contains(opt), "{cmd:?}: {e}");
        let e = fails(&cli(cmd, &x));
        assert!(e.contains(&format!("has no {file}")) && e.contains(opt), "{cmd:?}: {e}");
    }
    std::fs::remove_dir_all(&x).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
    let empty = tmpdir("empty");
    std::fs::create_dir_all(&empty).unwrap();
    for cmd in ["deps", "scopes", "report"] {
        let e = fails(&cli(&[cmd], &empty));
        assert!(e.contains("has no") || e.contains("no DFX output files"), "{cmd}: {e}");
    }
    std::fs::remove_dir_all(&empty).unwrap();
}
