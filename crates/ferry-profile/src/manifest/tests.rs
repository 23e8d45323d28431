//! The output-directory rules, each on a real directory.
use super::*;
use crate::write_atomic;
use std::fs::{self, File};
use std::io::Write;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-manifest-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    d
}

/// Every file under `d`, relative, sorted.
fn listing(d: &Path) -> Vec<String> {
    fn walk(root: &Path, d: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut v = Vec::new();
    walk(d, d, &mut v);
    v.sort();
    v
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// One run: claims, begins, writes `files` (relative path, content), commits.
fn run(d: &Path, all: &[&str], files: &[(&str, &[u8])]) -> Result<(), ManifestError> {
    let mut out = OutDir::claim(d, &names(all))?;
    let planned: Vec<String> = files.iter().map(|f| f.0.to_string()).collect();
    out.begin("run", &names(&["ferry", "run"]), "a2a3", &planned)?;
    for (rel, bytes) in files {
        let w = write_atomic(&d.join(rel), |f| f.write_all(bytes)).unwrap();
        out.record(rel, w);
    }
    out.commit()
}

const ALL: [&str; 4] = ["summary.json", "deps.json", "pmu.csv", "args_dump/args.bin"];

#[test]
fn a_reused_directory_holds_only_the_last_runs_files() {
    let d = tmpdir("reuse");
    run(&d, &ALL, &[("summary.json", b"1"), ("deps.json", b"{}"), ("args_dump/args.bin", b"x")])
        .unwrap();
    // A file of the user's, under no ferry name: never touched.
    fs::write(d.join("notes.txt"), b"mine").unwrap();
    run(&d, &ALL, &[("summary.json", b"2"), ("pmu.csv", b"a,b\n")]).unwrap();
    assert_eq!(
        listing(&d),
        [LOCK_FILE, MANIFEST_FILE, "notes.txt", "pmu.csv", "summary.json"],
        "the first run's deps.json and args.bin are gone"
    );
    let m = Manifest::verified(&d).unwrap();
    let listed: Vec<&str> = m.files.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(listed, ["summary.json", "pmu.csv"]);
    for f in listed {
        m.verify(&d, f).unwrap();
    }
    assert_eq!(fs::read(d.join("summary.json")).unwrap(), b"2");
    assert_eq!(fs::read(d.join("notes.txt")).unwrap(), b"mine");
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn foreign_files_under_ferry_names_refuse_the_claim_and_stay() {
    let d = tmpdir("foreign");
    fs::create_dir_all(d.join("args_dump")).unwrap();
    fs::write(d.join("deps.json"), b"someone else's").unwrap();
    fs::write(d.join("args_dump/args.bin"), b"theirs").unwrap();
    match OutDir::claim(&d, &names(&ALL)).unwrap_err() {
        ManifestError::Foreign { files, .. } => {
            assert_eq!(files, ["deps.json", "args_dump/args.bin"]);
        }
        e => panic!("{e}"),
    }
    assert_eq!(fs::read(d.join("deps.json")).unwrap(), b"someone else's");
    // A complete earlier run's files are ferry's own; one it does not list is still foreign.
    fs::remove_file(d.join("deps.json")).unwrap();
    fs::remove_file(d.join("args_dump/args.bin")).unwrap();
    run(&d, &ALL, &[("deps.json", b"{}")]).unwrap();
    fs::write(d.join("pmu.csv"), b"hand-made").unwrap();
    let e = OutDir::claim(&d, &names(&ALL)).unwrap_err();
    assert!(matches!(&e, ManifestError::Foreign { files, .. } if files == &["pmu.csv"]), "{e}");
    assert!(e.to_string().contains("pmu.csv") && e.to_string().contains("remove them"), "{e}");
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn one_writer_at_a_time() {
    let d = tmpdir("busy");
    let a = OutDir::claim(&d, &[]).unwrap();
    assert!(matches!(OutDir::claim(&d, &[]).unwrap_err(), ManifestError::Busy(_)));
    assert!(matches!(
        Manifest::add_file(&d, "x", Written::default()).unwrap_err(),
        ManifestError::Busy(_)
    ));
    drop(a);
    OutDir::claim(&d, &[]).unwrap();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_file_is_not_a_directory_and_an_unwritable_directory_is_refused() {
    let d = tmpdir("notdir");
    fs::create_dir_all(&d).unwrap();
    let f = d.join("file");
    fs::write(&f, b"").unwrap();
    assert!(matches!(OutDir::claim(&f, &[]).unwrap_err(), ManifestError::NotADirectory(_)));
    // Below a file: not creatable.
    assert!(matches!(
        OutDir::claim(&f.join("sub"), &[]).unwrap_err(),
        ManifestError::Fs(FsError::Io { .. })
    ));
    fs::remove_dir_all(&d).unwrap();
}

/// A run killed while writing leaves an incomplete manifest, a file and a temp file; readers
/// refuse the directory, and the next run removes all of it.
#[test]
fn the_run_after_a_killed_one_cleans_up() {
    let d = tmpdir("killed");
    run(&d, &ALL, &[("deps.json", b"{}"), ("pmu.csv", b"old")]).unwrap();
    {
        let mut out = OutDir::claim(&d, &names(&ALL)).unwrap();
        out.begin("killed", &[], "a5", &names(&["summary.json", "args_dump/args.bin"])).unwrap();
        fs::create_dir_all(d.join("args_dump")).unwrap();
        fs::write(d.join("summary.json"), b"half a run").unwrap();
        // What write_atomic of a dead process left.
        fs::write(d.join("args_dump/.args.bin.tmp.4000000000.3"), b"partial").unwrap();
        // Dropped without commit: killed.
    }
    assert!(!d.join("deps.json").exists(), "the earlier run's files went at begin");
    assert!(matches!(Manifest::verified(&d).unwrap_err(), ManifestError::Incomplete(_)));
    run(&d, &ALL, &[("pmu.csv", b"new")]).unwrap();
    assert_eq!(listing(&d), [LOCK_FILE, MANIFEST_FILE, "pmu.csv"]);
    assert!(!d.join("args_dump").exists(), "emptied directories go too");
    Manifest::verified(&d).unwrap().verify(&d, "pmu.csv").unwrap();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn verify_refuses_unlisted_resized_and_edited_files() {
    let d = tmpdir("verify");
    run(&d, &ALL, &[("deps.json", b"{\"a\":1}")]).unwrap();
    let m = Manifest::verified(&d).unwrap();
    m.verify(&d, "deps.json").unwrap();
    assert!(matches!(m.verify(&d, "pmu.csv").unwrap_err(), ManifestError::NotListed { .. }));
    fs::write(d.join("deps.json"), b"{\"a\":12}").unwrap();
    let e = m.verify(&d, "deps.json").unwrap_err();
    assert!(matches!(&e, ManifestError::Changed { what, .. } if what.contains("bytes")), "{e}");
    fs::write(d.join("deps.json"), b"{\"a\":2}").unwrap();
    let e = m.verify(&d, "deps.json").unwrap_err();
    assert!(matches!(&e, ManifestError::Changed { what, .. } if what.contains("hash")), "{e}");
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn malformed_manifests_are_refused() {
    let d = tmpdir("malformed");
    fs::create_dir_all(&d).unwrap();
    assert!(matches!(Manifest::verified(&d).unwrap_err(), ManifestError::Missing(_)));
    let entry = |p: &str| format!(r#"{{"path":"{p}","bytes":1,"xxh3":"00000000000000ff"}}"#);
    let doc = |format: u32, files: &[String]| {
        format!(
            r#"{{"format":{format},"run_id":"r","command":[],"arch":"a2a3","complete":true,"files":[{}]}}"#,
            files.join(",")
        )
    };
    let bad = [
        doc(2, &[]),
        doc(1, &[entry("../etc/passwd")]),
        doc(1, &[entry("/abs")]),
        doc(1, &[entry("a//b")]),
        doc(1, &[entry("a/b/c/d")]),
        doc(1, &[entry("x"), entry("x")]),
        doc(1, &[r#"{"path":"x"}"#.to_string()]),
        doc(1, &[r#"{"path":"x","bytes":1,"xxh3":"zz"}"#.to_string()]),
        "{".to_string(),
    ];
    for text in bad {
        fs::write(d.join(MANIFEST_FILE), &text).unwrap();
        let e = Manifest::read(&d).unwrap_err();
        assert!(matches!(e, ManifestError::Malformed { .. }), "{text}: {e}");
    }
    // Oversized: refused without reading it all.
    let f = File::create(d.join(MANIFEST_FILE)).unwrap();
    f.set_len(MANIFEST_MAX_BYTES + 10).unwrap();
    let e = Manifest::read(&d).unwrap_err();
    assert!(e.to_string().contains("over"), "{e}");
    fs::write(d.join(MANIFEST_FILE), doc(1, &[entry("x"), entry("a/b")])).unwrap();
    assert_eq!(Manifest::verified(&d).unwrap().files.len(), 2);
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_analysis_file_joins_the_manifest_and_goes_with_the_next_run() {
    let d = tmpdir("add");
    run(&d, &ALL, &[("deps.json", b"{}")]).unwrap();
    let w = write_atomic(&d.join("swimlane.html"), |f| f.write_all(b"<html>")).unwrap();
    Manifest::add_file(&d, "swimlane.html", w).unwrap();
    Manifest::verified(&d).unwrap().verify(&d, "swimlane.html").unwrap();
    run(&d, &ALL, &[("pmu.csv", b"p")]).unwrap();
    assert_eq!(listing(&d), [LOCK_FILE, MANIFEST_FILE, "pmu.csv"]);
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn own_temps_go_and_others_stay_until_a_claim() {
    let d = tmpdir("temps");
    fs::create_dir_all(d.join("a/b")).unwrap();
    let mine = format!(".x.tmp.{}.0", std::process::id());
    fs::write(d.join(&mine), b"").unwrap();
    fs::write(d.join("a/b").join(&mine), b"").unwrap();
    fs::write(d.join("a/.y.tmp.4000000000.1"), b"").unwrap();
    fs::write(d.join("a/.y.tmp.not-a-pid"), b"").unwrap();
    remove_own_temps(&d);
    assert_eq!(listing(&d), ["a/.y.tmp.4000000000.1", "a/.y.tmp.not-a-pid"]);
    OutDir::claim(&d, &[]).unwrap();
    assert_eq!(listing(&d), [LOCK_FILE, "a/.y.tmp.not-a-pid"]);
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_complete_run_is_refused_unless_replaced_and_an_interrupted_one_is_not() {
    let d = tmpdir("occupied");
    let all = ["deps.json", "pmu.csv"];
    run(&d, &all, &[("deps.json", b"{}")]).unwrap();
    let err = OutDir::claim(&d, &names(&all)).unwrap().refuse_overwrite().unwrap_err();
    match &err {
        ManifestError::Occupied { files, command, .. } => {
            assert_eq!(files, &names(&["deps.json"]));
            assert_eq!(command, "ferry run");
        }
        e => panic!("{e}"),
    }
    assert!(err.to_string().contains("--force"), "{err}");
    // Refused, the directory is as it was.
    assert_eq!(fs::read(d.join("deps.json")).unwrap(), b"{}");
    Manifest::verified(&d).unwrap().verify(&d, "deps.json").unwrap();
    // A run that began and never committed holds no complete run: not refused.
    let mut out = OutDir::claim(&d, &names(&all)).unwrap();
    out.begin("killed", &names(&["ferry", "run"]), "a2a3", &names(&["pmu.csv"])).unwrap();
    drop(out);
    OutDir::claim(&d, &names(&all)).unwrap().refuse_overwrite().unwrap();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_failed_runs_outcome_is_kept_and_old_manifests_read_as_before() {
    let d = tmpdir("outcome");
    let mut out = OutDir::claim(&d, &[]).unwrap();
    out.begin("r", &names(&["ferry"]), "a2a3", &[]).unwrap();
    let failed = RunOutcome::Failed { error: "wrong result".into(), task: None };
    out.commit_as(failed.clone()).unwrap();
    let m = Manifest::verified(&d).unwrap();
    assert_eq!(m.outcome, Some(failed));
    assert_eq!(m.outcome.as_ref().and_then(RunOutcome::failure), Some("wrong result"));
    let text = fs::read_to_string(d.join(MANIFEST_FILE)).unwrap();
    assert!(text.contains("\"status\": \"failed\""), "{text}");
    // A manifest from before outcomes: no key, read as it was.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("outcome");
    fs::write(d.join(MANIFEST_FILE), v.to_string()).unwrap();
    assert_eq!(Manifest::verified(&d).unwrap().outcome, None);
    fs::remove_dir_all(&d).unwrap();
}

/// A file listed with `plan` while the run writes it (the native profile) is removed by the
/// next run when this one never finished; one the run did not plan would be refused as foreign.
#[test]
fn a_planned_file_of_a_killed_run_is_removed_by_the_next() {
    let d = tmpdir("plan");
    let mut out = OutDir::claim(&d, &[]).unwrap();
    out.begin("killed", &names(&["ferry", "run"]), "a2a3", &[]).unwrap();
    out.plan("live.bin").unwrap();
    out.plan("live.bin").unwrap();
    fs::write(d.join("live.bin"), b"sealed chunks").unwrap();
    let m = Manifest::read(&d).unwrap().unwrap();
    assert!(!m.complete);
    assert_eq!(m.files.iter().filter(|e| e.path == "live.bin").count(), 1);
    drop(out); // killed: never committed
    let mut next = OutDir::claim(&d, &names(&["live.bin"])).unwrap();
    next.begin("next", &names(&["ferry", "run"]), "a2a3", &[]).unwrap();
    assert!(!d.join("live.bin").exists());
    next.commit().unwrap();
    fs::remove_dir_all(&d).unwrap();
}
