//! `examples/decode-cpp`: the decode step's orchestration in C++ over `ferry_orchestration.h`,
//! built by `make` and the system C++ compiler alone (no Rust), run by `ferry run
//! --orchestration` on a2a3 and a5, device-orchestrated and host-built, with all five DFX
//! subsystems, verified against its host reference; for the same context lengths it builds the
//! graph the Rust decode step (`examples/decode`) builds: the same task count, the same kernels,
//! the same outputs; and its own failure names the library, the function and its code. Where
//! `c++` or `make` does not run, the tests say why and pass, unless `FERRY_REQUIRE_TEST_TOOLS=1`.
mod common;
#[path = "../../ferry-runtime/tests/support/template.rs"]
mod template;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{make_decode_cpp, scratch};

fn ferry(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferry")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn workload() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/decode/workload.toml")
}

/// The function's task count for these context lengths (pages of 8): 8 per sequence with a
/// context, and 2 per page.
fn tasks(lens: &[u64]) -> u64 {
    lens.iter().filter(|&&n| n > 0).map(|&n| 8 + 2 * n.div_ceil(8)).sum()
}

/// What a verified run says about its graph: the task count on its result line
/// (`decode   52   22.0 ms …  ok (checksum …)`), its checksum and its per-kernel counts.
fn graph(t: &str) -> (u64, String, String) {
    let line = t.lines().find(|l| l.starts_with("decode ")).expect("a result line");
    let count = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let checksum = line.split("ok (checksum ").nth(1).expect("a verified run").to_string();
    let per = t.lines().find(|l| l.trim_start().starts_with("per kernel:")).expect("per kernel");
    (count, checksum, per.trim().to_string())
}

#[test]
fn the_cpp_decode_step_verifies_on_both_arches_and_variants_with_every_dfx_subsystem() {
    let test = "the_cpp_decode_step_verifies_on_both_arches_and_variants_with_every_dfx_subsystem";
    let tmp = scratch("decode-cpp-dfx");
    let Some(lib) = make_decode_cpp(test, &tmp.join("lib")) else { return };
    let lib = lib.to_str().unwrap();
    let wl = workload();
    let want = tasks(&[5, 12, 19, 26]);
    for arch in ["a2a3", "a5"] {
        for variant in ["device", "host"] {
            let out = tmp.join(format!("{arch}-{variant}"));
            let o = ferry(&[
                "run",
                "--orchestration",
                lib,
                "--workload",
                wl.to_str().unwrap(),
                "--arch",
                arch,
                "--variant",
                variant,
                "--swimlane",
                "4",
                "--pmu",
                "2",
                "--dep-gen",
                "--dump-args",
                "3",
                "--scope-stats",
                "--out",
                out.to_str().unwrap(),
            ]);
            let t = text(&o);
            assert!(o.status.success(), "{arch} {variant}: {t}");
            assert!(t.contains(&format!(", {want} tasks,")), "{arch} {variant}: {t}");
            let (count, _, per) = graph(&t);
            assert_eq!(count, want, "{arch} {variant}: {t}");
            assert!(per.contains("matmul_nd 16") && per.contains("cast_nd 20"), "{per}");
            common::export_every_subsystem(&out);
        }
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn the_cpp_and_rust_decode_steps_build_the_same_graph_for_the_same_lengths() {
    let test = "the_cpp_and_rust_decode_steps_build_the_same_graph_for_the_same_lengths";
    let tmp = scratch("decode-cpp-same");
    let Some(cpp) = make_decode_cpp(test, &tmp.join("lib")) else { return };
    let rust = template::decode_lib();
    let src = std::fs::read_to_string(workload()).unwrap();
    let line = "init = { iota = { start = 5, step = 7 } }";
    assert_eq!(src.matches(line).count(), 1, "the ctx_lens init moved");
    for (init, lens) in [
        (line, [5u64, 12, 19, 26]),
        ("init = { constant = 3 }", [3; 4]),
        ("init = { constant = 17 }", [17; 4]),
        ("init = { iota = { start = 0, step = 9 } }", [0, 9, 18, 27]),
    ] {
        let file = tmp.join("decode.toml");
        std::fs::write(&file, src.replace(line, init)).unwrap();
        for variant in ["device", "host"] {
            let run = |lib: &Path| {
                let o = ferry(&[
                    "run",
                    "--orchestration",
                    lib.to_str().unwrap(),
                    "--workload",
                    file.to_str().unwrap(),
                    "--variant",
                    variant,
                ]);
                let t = text(&o);
                assert!(o.status.success(), "{} {init} {variant}: {t}", lib.display());
                graph(&t)
            };
            let (c, r) = (run(&cpp), run(rust));
            assert_eq!(c.0, tasks(&lens), "C++ {init} {variant}: {c:?}");
            assert_eq!(c, r, "C++ and Rust differ for {init} {variant}");
        }
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// Context lengths past the position table: the function's own failure (code 1), named with
/// its library and function, in both variants; no task runs.
#[test]
fn a_length_the_cpp_step_refuses_fails_the_run_naming_it() {
    let test = "a_length_the_cpp_step_refuses_fails_the_run_naming_it";
    let tmp = scratch("decode-cpp-bad");
    let Some(lib) = make_decode_cpp(test, &tmp.join("lib")) else { return };
    let src = std::fs::read_to_string(workload()).unwrap();
    let line = "init = { iota = { start = 5, step = 7 } }";
    let file = tmp.join("long.toml");
    std::fs::write(&file, src.replace(line, "init = { constant = 40 }")).unwrap();
    for variant in ["device", "host"] {
        let o = ferry(&[
            "run",
            "--orchestration",
            lib.to_str().unwrap(),
            "--workload",
            file.to_str().unwrap(),
            "--variant",
            variant,
        ]);
        let t = text(&o);
        assert!(!o.status.success(), "{variant}: {t}");
        let why = "orchestration function `decode_step` (library `decode-cpp`) failed: \
                   orchestration failed: task 0: the orchestration function failed with code 1";
        assert!(t.contains(why), "{variant}: {t}");
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// `ferry kernels new --orchestration --lang c` scaffolds nothing and says where a C or C++
/// orchestration library starts.
#[test]
fn a_c_orchestration_scaffold_points_at_the_cpp_example() {
    let tmp = scratch("decode-cpp-new");
    let o = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .current_dir(&tmp)
        .args(["kernels", "new", "my-orch", "--orchestration", "--lang", "c"])
        .output()
        .unwrap();
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("examples/decode-cpp, over ferry_orchestration.h"), "{t}");
    assert!(!tmp.join("my-orch").exists(), "{t}");
    std::fs::remove_dir_all(&tmp).unwrap();
}
