//! `ferry export DIR -o OUT` writes, from a finished run's native profile alone, the same bytes
//! `ferry run` wrote in the original formats.
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

fn run(dir: &Path) {
    ok(ferry()
        .args(["run", "--example", "storm", "--small", "--swimlane", "4", "--pmu", "2"])
        .args(["--dep-gen", "--dump-args", "3", "--scope-stats", "--out"])
        .arg(dir)
        .output()
        .unwrap());
}

#[test]
fn export_writes_the_original_formats_byte_for_byte() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    let (a, b) = (scratch("export-run"), scratch("export-out"));
    run(&a);
    ok(ferry().arg("export").arg(&a).arg("-o").arg(&b).output().unwrap());
    for f in ORIGINAL {
        let (x, y) = (std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap());
        assert!(x == y, "{f} differs ({} vs {} bytes)", x.len(), y.len());
    }
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

#[test]
fn export_refuses_a_native_profile_changed_since_the_run() {
    let _bound = ferry_watchdog::bound("the ferry processes");
    let (a, b) = (scratch("export-changed"), scratch("export-changed-out"));
    run(&a);
    let p = a.join("profile.ferry");
    let mut bytes = std::fs::read(&p).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&p, bytes).unwrap();
    let o = ferry().arg("export").arg(&a).arg("-o").arg(&b).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("changed since the run"), "{err}");
    assert!(!b.join("deps.json").exists());
    std::fs::remove_dir_all(&a).unwrap();
    std::fs::remove_dir_all(&b).unwrap();
}
