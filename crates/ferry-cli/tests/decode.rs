//! `examples/decode`: a bf16 decode step as an orchestration library, built offline, run by
//! `ferry run` on a2a3 and a5, device-orchestrated and host-built, with all five DFX
//! subsystems, verified against its host reference; its original-format files (`--original-formats`)
//! are those `ferry export` writes from its native profile, byte for byte, and read as the
//! original tools read theirs (`tests/original`); and changing only the context lengths changes
//! the task count as the function's page walk says.
mod common;
mod original;
#[path = "../../ferry-runtime/tests/support/template.rs"]
mod template;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

/// The tasks the run executed: the count on its result line (`decode   52   22.0 ms …`).
fn ran(t: &str) -> u64 {
    let line = t.lines().find(|l| l.starts_with("decode ")).expect("a result line");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_decode_step_verifies_on_both_arches_and_variants_with_every_dfx_subsystem() {
    let lib = template::decode_lib().to_str().unwrap();
    let tmp = Tmp(std::env::temp_dir().join(format!("ferry-decode-{}", std::process::id())));
    let wl = workload();
    let want = format!(", {} tasks,", tasks(&[5, 12, 19, 26]));
    // Full dumps (every payload) on one arch, hybrid (metadata, no marked payload) on the other.
    for (arch, dump) in [("a2a3", "2"), ("a5", "3")] {
        for variant in ["device", "host"] {
            let out = tmp.0.join(format!("{arch}-{variant}"));
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
                dump,
                "--scope-stats",
                "--original-formats",
                "--out",
                out.to_str().unwrap(),
            ]);
            let t = text(&o);
            assert!(o.status.success(), "{arch} {variant}: {t}");
            assert!(t.contains(&want) && t.contains("ok (checksum"), "{arch} {variant}: {t}");
            assert_eq!(ran(&t), tasks(&[5, 12, 19, 26]), "{arch} {variant}: {t}");
            assert!(t.contains("matmul_nd 16"), "{arch} {variant}: {t}");
            common::export_matches_the_run_flag(&out);
            let kernels = ["matmul_nd", "rmsnorm_nd", "rope_nd", "softmax_nd", "add_nd", "cast_nd"];
            original::check_all(&out, "decode", variant, &kernels);
            // The payloads of a full dump are there, in bf16 (two bytes an element).
            let dumped = original::json(&out.join("args_dump/args_dump.json"));
            let bf16 =
                dumped["args"].as_array().unwrap().iter().filter(|a| a["dtype"] == "BFLOAT16");
            let sized = bf16.filter(|a| a["bin_size"] == 2 * a["numel"].as_u64().unwrap()).count();
            assert_eq!(sized > 0, dump == "2", "{arch} {variant}: {sized} bf16 payloads");
        }
    }
}

#[test]
fn changing_only_the_context_lengths_changes_the_task_count() {
    let lib = template::decode_lib().to_str().unwrap();
    let tmp = Tmp(std::env::temp_dir().join(format!("ferry-decode-lens-{}", std::process::id())));
    std::fs::create_dir_all(&tmp.0).unwrap();
    let src = std::fs::read_to_string(workload()).unwrap();
    let line = "init = { iota = { start = 5, step = 7 } }";
    assert_eq!(src.matches(line).count(), 1, "the ctx_lens init moved");
    for (init, lens) in [
        ("init = { constant = 3 }", [3u64; 4]),
        ("init = { constant = 17 }", [17; 4]),
        ("init = { iota = { start = 0, step = 9 } }", [0, 9, 18, 27]),
    ] {
        let file = tmp.0.join("decode.toml");
        std::fs::write(&file, src.replace(line, init)).unwrap();
        for variant in ["device", "host"] {
            let o = ferry(&[
                "run",
                "--orchestration",
                lib,
                "--workload",
                file.to_str().unwrap(),
                "--variant",
                variant,
            ]);
            let t = text(&o);
            assert!(o.status.success(), "{init} {variant}: {t}");
            assert_eq!(ran(&t), tasks(&lens), "{init} {variant}: {t}");
            assert!(t.contains("ok (checksum"), "{init} {variant}: {t}");
        }
    }
}
