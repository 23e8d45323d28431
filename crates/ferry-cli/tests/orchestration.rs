//! `ferry run --orchestration LIB.so --workload FILE`: the template orchestration library built
//! offline with cargo, run on both arches and both variants and verified against its host
//! reference; a function's own failure named with its library, function and task; a workload
//! naming a function without its library refused before the chip starts.
#[path = "../../ferry-runtime/tests/support/template.rs"]
mod template;

use std::path::Path;
use std::process::{Command, Output};

fn ferry(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferry")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn workload() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/orchestration-template/workload.toml")
        .display()
        .to_string()
}

#[test]
fn the_template_runs_and_verifies_on_both_arches_and_variants() {
    let lib = template::orch_template_lib().to_str().unwrap();
    let wl = workload();
    for arch in ["a2a3", "a5"] {
        for variant in ["device", "host"] {
            let o = ferry(&[
                "run",
                "--orchestration",
                lib,
                "--workload",
                &wl,
                "--arch",
                arch,
                "--variant",
                variant,
            ]);
            let t = text(&o);
            assert!(o.status.success(), "{arch} {variant}: {t}");
            // 7 rows of 8 have a length: two tasks each, and the final dependency-only task.
            assert!(t.contains(", 15 tasks,"), "{arch} {variant}: {t}");
            assert!(t.contains("ok (checksum"), "{arch} {variant}: {t}");
        }
    }
}

#[test]
fn a_failing_function_is_named_and_a_missing_library_refused() {
    let lib = template::orch_template_lib().to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("ferry-orch-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let failing = dir.join("failing.toml");
    let src = std::fs::read_to_string(workload()).unwrap();
    std::fs::write(&failing, src.replace("\"ragged_rows\"", "\"fails_after_one\"")).unwrap();
    for variant in ["device", "host"] {
        let o = ferry(&[
            "run",
            "--orchestration",
            lib,
            "--workload",
            failing.to_str().unwrap(),
            "--variant",
            variant,
        ]);
        let t = text(&o);
        assert!(!o.status.success(), "{t}");
        assert!(
            t.contains("orchestration function `fails_after_one` (library `orchestration-template`) failed"),
            "{variant}: {t}"
        );
        assert!(
            t.contains("task 1: the orchestration function failed with code 7"),
            "{variant}: {t}"
        );
        assert!(!t.contains("panicked at"), "{t}");
    }
    let o = ferry(&["run", "--workload", &workload()]);
    let t = text(&o);
    assert!(!o.status.success());
    assert!(t.contains("pass its library with --orchestration LIB.so"), "{t}");
    assert!(!t.contains("ferry run: workload"), "refused before the chip starts: {t}");
    std::fs::remove_dir_all(&dir).unwrap();
}
