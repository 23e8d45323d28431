//! The run directory's rules, each on a real directory, and the summary's layout.
use super::*;
use crate::Manifest;
use serde_json::json;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-run-dir-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn command() -> Vec<String> {
    vec!["ferry".into(), "run".into()]
}

fn claim(d: &Path, force: bool) -> Result<RunDir, RunDirError> {
    RunDir::claim(d, "a2a3", &command(), &run_dir_names(&["vector", "storm"]), force)
}

fn example(name: &str) -> SummaryRun {
    SummaryRun::Example(ExampleSummary {
        checksum: 12.5,
        example: name.into(),
        per_kernel: [("add".to_string(), 3), ("copy".to_string(), 1)].into(),
        repeat: 1,
        runs_per_s: None,
        tasks: 4,
        tasks_per_s: 4.0 / 0.003,
        verified: true,
        wall_s: 0.003,
    })
}

/// The summary's text is the one `summary.json` has always had: the keys of a JSON map built
/// by hand (alphabetical), `null` for a single run's runs/s, per-kernel counts by name.
#[test]
fn the_summary_keeps_its_layout() {
    let mut s = SummaryJson::new("a5", 5, 8, 16, "host", "direct");
    s.runs.push(example("vector"));
    s.runs.push(SummaryRun::Workload(WorkloadSummary {
        checksum: 2.0,
        file: "chain.toml".into(),
        per_kernel: [("mul".to_string(), 8)].into(),
        tasks: 8,
        verified: true,
        wall_s: 0.5,
        workload: "chain".into(),
    }));
    let by_hand = json!({
        "arch": "a5",
        "aicpu_threads": 5,
        "aic": 8,
        "aiv": 16,
        "variant": "host",
        "path": "direct",
        "runs": [{
            "example": "vector",
            "tasks": 4,
            "wall_s": 0.003,
            "tasks_per_s": 4.0 / 0.003,
            "per_kernel": { "copy": 1, "add": 3 },
            "verified": true,
            "checksum": 12.5,
            "repeat": 1,
            "runs_per_s": null,
        }, {
            "workload": "chain",
            "file": "chain.toml",
            "tasks": 8,
            "wall_s": 0.5,
            "per_kernel": { "mul": 8 },
            "verified": true,
            "checksum": 2.0,
        }],
    });
    let text = serde_json::to_string_pretty(&s).unwrap();
    assert_eq!(text, serde_json::to_string_pretty(&by_hand).unwrap());
    assert_eq!(serde_json::from_str::<SummaryJson>(&text).unwrap(), s);
}

#[test]
fn a_finished_run_writes_its_summary_and_tensors_and_commits_ok() {
    let d = tmpdir("finish");
    let rd = claim(&d, false).unwrap();
    assert!(writing_run_dirs().contains(&d), "a claim is being written");
    assert!(!rd.is_begun() && !d.join(crate::MANIFEST_FILE).exists(), "nothing before a write");
    let mut s = SummaryJson::new("a2a3", 4, 8, 16, "device", "direct");
    s.runs.push(example("vector"));
    rd.finish(&s, &[("vector", &[1.0, -2.5][..])]).unwrap();
    assert!(!writing_run_dirs().contains(&d), "a committed run is no longer written");
    let m = Manifest::verified(&d).unwrap();
    assert_eq!(m.outcome, Some(RunOutcome::Ok));
    assert_eq!((m.arch.as_str(), &m.command), ("a2a3", &command()));
    let listed: Vec<&str> = m.files.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(listed, [SUMMARY_FILE, "vector.f32"]);
    for f in listed {
        m.verify(&d, f).unwrap();
    }
    let bytes = std::fs::read(d.join("vector.f32")).unwrap();
    assert_eq!(bytes, [1.0f32.to_le_bytes(), (-2.5f32).to_le_bytes()].concat());
    let back: SummaryJson =
        serde_json::from_slice(&std::fs::read(d.join(SUMMARY_FILE)).unwrap()).unwrap();
    assert_eq!(back, s);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A complete run is refused without `force` and stays; with it, it is replaced.
#[test]
fn a_complete_run_is_replaced_only_with_force() {
    let d = tmpdir("force");
    let s = SummaryJson::new("a2a3", 4, 8, 16, "device", "direct");
    claim(&d, false).unwrap().finish(&s, &[("vector", &[1.0][..])]).unwrap();
    let before = Manifest::verified(&d).unwrap();
    match claim(&d, false).unwrap_err() {
        RunDirError::Manifest(ManifestError::Occupied { files, command: c, .. }) => {
            assert_eq!(files, [SUMMARY_FILE, "vector.f32"]);
            assert_eq!(c, "ferry run");
        }
        e => panic!("{e}"),
    }
    assert!(!writing_run_dirs().contains(&d), "a refused claim is not written");
    assert_eq!(Manifest::verified(&d).unwrap(), before);
    assert_eq!(std::fs::read(d.join("vector.f32")).unwrap(), 1.0f32.to_le_bytes());
    claim(&d, true).unwrap().finish(&s, &[("storm", &[3.0][..])]).unwrap();
    assert!(!d.join("vector.f32").exists(), "the earlier run's tensor is gone");
    Manifest::verified(&d).unwrap().verify(&d, "storm.f32").unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

/// A run that failed after writing is committed as failed, its files listed; one that wrote
/// nothing leaves the earlier run as it was.
#[test]
fn a_failed_run_is_committed_only_when_it_wrote_something() {
    let d = tmpdir("fail");
    let s = SummaryJson::new("a2a3", 4, 8, 16, "device", "direct");
    claim(&d, false).unwrap().finish(&s, &[]).unwrap();
    let before = Manifest::verified(&d).unwrap();
    assert!(!claim(&d, true).unwrap().fail("kernel faulted").unwrap());
    assert_eq!(Manifest::verified(&d).unwrap(), before, "nothing written, nothing replaced");
    assert!(d.join(SUMMARY_FILE).exists());

    let mut rd = claim(&d, true).unwrap();
    rd.write("deps.json", b"{}").unwrap();
    assert!(rd.fail("task 3: wrong result").unwrap());
    let m = Manifest::verified(&d).unwrap();
    assert_eq!(
        m.outcome,
        Some(RunOutcome::Failed { error: "task 3: wrong result".into(), task: None })
    );
    let listed: Vec<&str> = m.files.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(listed, ["deps.json"]);
    assert!(!d.join(SUMMARY_FILE).exists(), "the earlier run's summary is gone");
    assert!(!writing_run_dirs().contains(&d));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_name_that_leaves_the_directory_is_refused() {
    let d = tmpdir("outside");
    let mut rd = claim(&d, false).unwrap();
    for bad in ["../x.f32", "a/../../x", "/etc/x", "", "a//b"] {
        match rd.write(bad, b"1") {
            Err(RunDirError::Outside { .. }) => {}
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert!(!rd.is_begun(), "a refused name writes nothing");
    assert!(!rd.fail("x").unwrap());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_names_cover_each_case_and_its_profile() {
    let n = run_dir_names(&["vector"]);
    for f in [SUMMARY_FILE, "vector.f32", "deps.json", "vector/deps.json", VIEW_FILE] {
        assert!(n.iter().any(|x| x == f), "{f}: {n:?}");
    }
    assert!(n.contains(&format!("vector/{SCOPES_DIR}/{SCOPES_HTML}")), "{n:?}");
}
