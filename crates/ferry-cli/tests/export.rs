//! The original formats of a run, two ways: written at once by `ferry run --original-formats`,
//! and by `ferry export DIR -o OUT` from the same run's native profile alone. They are the same
//! bytes; and the analysis commands read a run's native profile (the default output) as they
//! read its original files.
mod common;

use std::path::Path;

use common::{ferry, scratch};

/// The original runtime's files of a run (and the Perfetto trace written from the same model).
const ORIGINAL: [&str; 8] = [
    "chip_swimlane_records.json",
    "name_map_storm.json",
    "pmu.csv",
    "pmu.dfx.json",
    "deps.json",
    "args_dump/args_dump.json",
    "scope_stats/scope_stats.jsonl",
    "trace.perfetto-trace",
];

fn ok(o: std::process::Output) -> String {
    let t =
        format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{t}");
    t
}

/// The storm with all five subsystems into `dir`; `extra` flags after them.
fn run(dir: &Path, extra: &[&str]) {
    ok(ferry()
        .args(["run", "--example", "storm", "--small", "--swimlane", "4", "--pmu", "2"])
        .args(["--dep-gen", "--dump-args", "3", "--scope-stats"])
        .args(extra)
        .arg("--out")
        .arg(dir)
        .output()
        .unwrap());
}

/// Every file below `dir` except the manifest and its lock, the native profile and what a run
/// writes beside a profile (the summary and the output tensors): the original formats, sorted.
fn original_files(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, at: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(at).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
                continue;
            }
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let beside = ["ferry-manifest.json", ".ferry.lock", "profile.ferry", "summary.json"];
            if !beside.contains(&name.as_str()) && !name.ends_with(".f32") {
                out.push(rel);
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, dir, &mut v);
    v.sort();
    v
}

/// Runs `flags` with `--original-formats` into one directory, exports its native profile into
/// another, and checks that both hold the same original-format files, byte for byte; returns
/// the file names.
fn written_both_ways(tag: &str, flags: &[&str]) -> Vec<String> {
    let (a, b) = (scratch(&format!("export-{tag}-run")), scratch(&format!("export-{tag}-out")));
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    ok(ferry().args(&args).arg("--original-formats").arg("--out").arg(&a).output().unwrap());
    ok(ferry().arg("export").arg(&a).arg("-o").arg(&b).output().unwrap());
    let (fa, fb) = (original_files(&a), original_files(&b));
    assert_eq!(fa, fb, "{tag}: the two sets of files");
    assert!(!fa.is_empty(), "{tag}: no original file written");
    for f in &fa {
        let (x, y) = (std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap());
        assert!(x == y, "{tag}: {f} differs ({} vs {} bytes)", x.len(), y.len());
    }
    std::fs::remove_dir_all(&a).unwrap();
    std::fs::remove_dir_all(&b).unwrap();
    fa
}

#[test]
fn the_run_flag_and_export_write_the_same_original_formats() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    let all5 = ["--swimlane", "4", "--pmu", "2", "--dep-gen", "--scope-stats"];
    // The storm, all five (ArgsDump metadata only).
    let storm = [&["--example", "storm", "--small", "--dump-args", "3"][..], &all5[..]].concat();
    let files = written_both_ways("storm", &storm);
    for f in ORIGINAL {
        assert!(files.iter().any(|x| x == f), "{f} not in {files:?}");
    }
    // Payloads (args.bin: copied out of the arena while the run ran).
    let vector = [&["--example", "vector", "--small", "--dump-args", "2"][..], &all5[..]].concat();
    let files = written_both_ways("payloads", &vector);
    assert!(files.iter().any(|f| f == "args_dump/args.bin"), "{files:?}");
    // A host-built graph (its host orchestration).
    let host = ["--example", "vector", "--small", "--variant", "host", "--swimlane", "4"];
    written_both_ways("host", &[&host[..], &["--dep-gen", "--pmu", "2"][..]].concat());
    // A session over several runs: each run's directory and runs.json.
    let session = ["--example", "vector", "--small", "--repeat", "3", "--warmup", "1"];
    let files = written_both_ways("session", &[&session[..], &all5[..]].concat());
    for f in ["runs.json", "run-000/deps.json", "run-002/chip_swimlane_records.json"] {
        assert!(files.iter().any(|x| x == f), "{f} not in {files:?}");
    }
}

/// Without `--original-formats` a run writes its native profile and no original file, and
/// every analysis command says of it what it says of the same files exported.
#[test]
fn the_analysis_commands_read_the_native_profile_as_the_original_files() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    let (a, b) = (scratch("export-native"), scratch("export-native-out"));
    run(&a, &[]);
    assert_eq!(original_files(&a), Vec::<String>::new(), "the default output is native only");
    ok(ferry().arg("export").arg(&a).arg("-o").arg(&b).output().unwrap());
    // The standard output, the directory's name aside (stderr may carry a progress line).
    let same = |args: &[&str]| {
        let on = |d: &Path| {
            let out = ferry().args(args).arg(d).output().unwrap();
            ok(out.clone());
            String::from_utf8_lossy(&out.stdout).replace(&d.display().to_string(), "DIR")
        };
        let (x, y) = (on(&a), on(&b));
        let first = x.lines().zip(y.lines()).find(|(l, r)| l != r);
        assert!(
            x == y,
            "ferry {args:?}: native and original files differ, first at {first:?} ({} vs {} lines)",
            x.lines().count(),
            y.lines().count()
        );
    };
    same(&["report", "--json"]);
    same(&["report"]);
    same(&["deps", "--json"]);
    same(&["dump", "list"]);
    // `view` and `scopes` write a page into the directory: the same page.
    same(&["view", "--json"]);
    same(&["scopes"]);
    for f in ["swimlane.html", "scope_stats/scope_stats.html"] {
        let (x, y) = (std::fs::read(a.join(f)).ok(), std::fs::read(b.join(f)).ok());
        assert!(
            x == y,
            "{f}: native {:?} bytes, original files {:?}",
            x.map(|v| v.len()),
            y.map(|v| v.len())
        );
    }
    assert!(a.join("swimlane.html").exists());
    // The trace from the native profile is the one the export wrote.
    let t = scratch("export-native-trace");
    ok(ferry().arg("trace").arg(&a).arg("-o").arg(&t).output().unwrap());
    assert!(
        std::fs::read(t.join("trace.perfetto-trace")).unwrap()
            == std::fs::read(b.join("trace.perfetto-trace")).unwrap(),
        "the Perfetto trace of the native profile"
    );
    let d = ok(ferry().arg("diff").arg(&a).arg(&b).output().unwrap());
    assert!(d.contains("no kernel regressed"), "{d}");
    for d in [&a, &b, &t] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn export_writes_a_run_directory_of_its_own() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    let (a, b) = (scratch("export-run"), scratch("export-out"));
    run(&a, &[]);
    ok(ferry().arg("export").arg(&a).arg("-o").arg(&b).output().unwrap());
    // The export is a run directory of its own: every analysis command reads it.
    let r = ok(ferry().arg("report").arg(&b).output().unwrap());
    assert!(r.contains("add_scalar"), "{r}");
    // A second export into it is refused without --force, as a run is.
    let again = ferry().arg("export").arg(&a).arg("-o").arg(&b).output().unwrap();
    assert!(!again.status.success());
    ok(ferry().arg("export").arg(&a).arg("-o").arg(&b).arg("--force").output().unwrap());
    std::fs::remove_dir_all(&a).unwrap();
    std::fs::remove_dir_all(&b).unwrap();
}

/// A native profile changed since the run is refused, by `ferry export` and by every analysis
/// command that would read it.
#[test]
fn a_native_profile_changed_since_the_run_is_refused() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    let (a, b) = (scratch("export-changed"), scratch("export-changed-out"));
    run(&a, &[]);
    let p = a.join("profile.ferry");
    let mut bytes = std::fs::read(&p).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&p, bytes).unwrap();
    let o = ferry().arg("export").arg(&a).arg("-o").arg(&b).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("changed since the run"), "{err}");
    assert!(!b.join("deps.json").exists());
    for cmd in ["report", "view", "deps", "trace", "scopes"] {
        let o = ferry().arg(cmd).arg(&a).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("changed since the run"), "{cmd}: {err}");
    }
    std::fs::remove_dir_all(&a).unwrap();
    std::fs::remove_dir_all(&b).unwrap();
}
