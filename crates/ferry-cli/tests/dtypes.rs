//! `ferry run --workload examples/workloads/dtypes.toml`: int8, int32 and bf16 tensors through
//! N-d views run and verify on both variants; the output tensors are written in their dtypes;
//! the args dump records each argument's dtype and `ferry dump replay` reproduces every task, in
//! every dtype; `deps.json` names each argument's and tensor's dtype as the dump does, and so
//! does the one `ferry export` writes from the native profile alone; `ferry workload check` names
//! the line of a view out of range.
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn ferry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workloads/dtypes.toml")
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-dtypes-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn the_dtypes_workload_runs_verifies_dumps_and_replays_every_dtype() {
    let _bound = ferry_watchdog::bound("the dtypes workload through the CLI");
    let root = tmp("run");
    for variant in ["device", "host"] {
        let d = root.join(variant);
        let out = ferry()
            .args(["run", "--workload"])
            .arg(example())
            .args([
                "--variant",
                variant,
                "--dump-args",
                "2",
                "--dep-gen",
                "--original-formats",
                "--out",
            ])
            .arg(&d)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{variant}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("ok (checksum 2976.0000)"), "{variant}: {stdout}");
        assert!(stdout.contains("add_nd 2") && stdout.contains("cast_nd 9"), "{stdout}");
        // Each output tensor in its dtype: 8 x 12 elements.
        for (file, bytes) in
            [("sum8.int8", 96), ("acc.int32", 384), ("y.bf16", 192), ("t.f32", 384)]
        {
            let len = std::fs::metadata(d.join(file)).map(|m| m.len());
            assert_eq!(len.ok(), Some(bytes), "{variant}: {file}");
        }
        let acc = std::fs::read(d.join("acc.int32")).unwrap();
        let sum: i64 =
            acc.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap()))).sum();
        assert_eq!(sum, 2976);
        // The dump records each tensor's dtype.
        let dump: Value =
            serde_json::from_slice(&std::fs::read(d.join("args_dump/args_dump.json")).unwrap())
                .unwrap();
        let args = dump["args"].as_array().expect("args");
        let dtypes: BTreeSet<&str> = args
            .iter()
            .filter(|a| a["kind"] == "tensor")
            .map(|a| a["dtype"].as_str().unwrap())
            .collect();
        assert_eq!(dtypes, BTreeSet::from(["BFLOAT16", "FLOAT32", "INT32", "INT8"]), "{variant}");
        check_deps_dtypes(&d, args, variant);
        // Every task replays from the dump, bit for bit, in its dtypes.
        let tasks: BTreeSet<u64> = args
            .iter()
            .map(|a| {
                let id = a["task_id"].as_str().unwrap();
                u64::from_str_radix(id.trim_start_matches("0x"), 16).unwrap()
            })
            .collect();
        assert_eq!(tasks.len(), 12, "{tasks:?}");
        let mut seen = BTreeSet::new();
        for t in tasks {
            let r = ferry()
                .args(["dump", "replay"])
                .arg(&d)
                .args(["--task", &format!("{t:#x}")])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&r.stdout);
            assert!(
                r.status.success() && text.contains("outputs reproduced"),
                "task {t}: {text}{}",
                String::from_utf8_lossy(&r.stderr)
            );
            for dt in ["INT8", "INT32", "BFLOAT16", "FLOAT32"] {
                if text.contains(&format!(" {dt} elements")) {
                    seen.insert(dt);
                }
            }
        }
        assert_eq!(seen.len(), 4, "every dtype's output replayed: {seen:?}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// `deps.json` against the args dump of the same run: every tensor argument of every task has
/// the dump's dtype and element count, each listed tensor the dtype of the arguments naming it,
/// and the run's four dtypes all appear.
fn check_deps_dtypes(d: &Path, dumped: &[Value], variant: &str) {
    let deps: Value = serde_json::from_slice(&std::fs::read(d.join("deps.json")).unwrap()).unwrap();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    // (task, argument) -> (dtype, numel), from the dump's tensor arguments.
    let want: BTreeMap<(u64, u64), (&str, u64)> = dumped
        .iter()
        .filter(|a| a["kind"] == "tensor")
        .map(|a| {
            let key = (hex(a["task_id"].as_str().unwrap()), a["arg_index"].as_u64().unwrap());
            (key, (a["dtype"].as_str().unwrap(), a["numel"].as_u64().unwrap()))
        })
        .collect();
    let mut of_tensor: BTreeMap<&str, &str> = BTreeMap::new();
    let mut checked = BTreeSet::new();
    for t in deps["tasks"].as_array().unwrap() {
        let id: u64 = t["task_id"].as_str().unwrap().parse().unwrap();
        for a in t["args"].as_array().unwrap() {
            let (dtype, shape) = (a["dtype"].as_str().unwrap(), &a["shape"]);
            let key = (id, a["idx"].as_u64().unwrap());
            let w = want.get(&key).unwrap_or_else(|| panic!("{variant}: {key:?} not dumped"));
            assert_eq!((dtype, shape[0].as_u64().unwrap()), *w, "{variant}: task {id} {a}");
            of_tensor.insert(a["tensor_id"].as_str().unwrap(), dtype);
            checked.insert(key);
        }
    }
    assert!(checked.iter().eq(want.keys()), "{variant}: every tensor argument compared");
    let tensors = deps["tensors"].as_array().unwrap();
    for t in tensors {
        let id = t["tensor_id"].as_str().unwrap();
        assert_eq!(t["dtype"].as_str(), Some(of_tensor[id]), "{variant}: {t}");
    }
    let named: BTreeSet<&str> = tensors.iter().map(|t| t["dtype"].as_str().unwrap()).collect();
    assert_eq!(named, BTreeSet::from(["BFLOAT16", "FLOAT32", "INT32", "INT8"]), "{variant}");
}

/// The native profile keeps each DepGen tensor's dtype: `ferry export` writes from it alone the
/// `deps.json` the run wrote, dtypes and all.
#[test]
fn the_exported_deps_json_keeps_every_dtype() {
    let _bound = ferry_watchdog::bound("the dtypes workload and its export through the CLI");
    let (run, out) = (tmp("export-run"), tmp("export-out"));
    let o = ferry()
        .args(["run", "--workload"])
        .arg(example())
        .args(["--variant", "device", "--dep-gen", "--original-formats", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = ferry().arg("export").arg(&run).arg("-o").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (a, b) = (
        std::fs::read(run.join("deps.json")).unwrap(),
        std::fs::read(out.join("deps.json")).unwrap(),
    );
    assert!(a == b, "deps.json differs ({} vs {} bytes)", a.len(), b.len());
    let deps: Value = serde_json::from_slice(&b).unwrap();
    let named: BTreeSet<&str> =
        deps["tensors"].as_array().unwrap().iter().map(|t| t["dtype"].as_str().unwrap()).collect();
    assert_eq!(named, BTreeSet::from(["BFLOAT16", "FLOAT32", "INT32", "INT8"]));
    let _ = std::fs::remove_dir_all(&run);
    let _ = std::fs::remove_dir_all(&out);
}

/// Every dtype: an f32 iota cast to each of the nine others, then each added to itself in its
/// own dtype; every task's dump replays, and the dump names all ten dtypes.
#[test]
fn args_dump_and_replay_round_trip_every_dtype() {
    let _bound = ferry_watchdog::bound("the every-dtype workload through the CLI");
    let d = tmp("every");
    std::fs::create_dir_all(&d).unwrap();
    let names = ["f16", "bf16", "int8", "int16", "int32", "int64", "uint8", "uint32", "uint64"];
    let mut w = String::from(
        "[workload]\nname = \"every\"\nverify = \"host-reference\"\n\
         [[tensor]]\nname = \"src\"\nshape = [16]\ninit = { iota = { start = -3.0, step = 1.25 } }\n",
    );
    for n in names {
        for t in ["c", "s"] {
            w += &format!("[[tensor]]\nname = \"{t}_{n}\"\ndtype = \"{n}\"\nshape = [16]\n");
        }
    }
    for n in names {
        w += &format!(
            "[[graph]]\nkernel = \"cast_nd\"\nargs = [{{ tensor = \"src\", role = \"input\" }}, \
             {{ tensor = \"c_{n}\", role = \"output\" }}]\n\
             [[graph]]\nkernel = \"add_nd\"\nargs = [{{ tensor = \"c_{n}\", role = \"input\", shape = [4, 4] }}, \
             {{ tensor = \"c_{n}\", role = \"input\", shape = [4, 4] }}, \
             {{ tensor = \"s_{n}\", role = \"output\", shape = [4, 4] }}]\n"
        );
    }
    let f = d.join("every.toml");
    std::fs::write(&f, w).unwrap();
    let out = d.join("out");
    let o = ferry()
        .args(["run", "--workload"])
        .arg(&f)
        .args(["--dump-args", "2", "--original-formats", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // uint8 saturates the negative values to 0, int8 keeps them: -3 + -3 = -6.
    assert_eq!(std::fs::read(out.join("s_int8.int8")).unwrap()[0], (-6i8) as u8);
    assert_eq!(std::fs::read(out.join("s_uint8.uint8")).unwrap()[..3], [0, 0, 0]);
    let dump: Value =
        serde_json::from_slice(&std::fs::read(out.join("args_dump/args_dump.json")).unwrap())
            .unwrap();
    let dtypes: BTreeSet<&str> = dump["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "tensor")
        .map(|a| a["dtype"].as_str().unwrap())
        .collect();
    assert_eq!(dtypes.len(), 10, "{dtypes:?}");
    let mut replayed = BTreeSet::new();
    for t in 0..18u64 {
        let r = ferry()
            .args(["dump", "replay"])
            .arg(&out)
            .args(["--task", &format!("{t:#x}")])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&r.stdout).into_owned();
        assert!(
            r.status.success() && text.contains("all 1 outputs reproduced"),
            "task {t}: {text}"
        );
        let dt = text.split_whitespace().skip_while(|w| *w != "16").nth(1).unwrap().to_string();
        replayed.insert(dt);
    }
    assert_eq!(replayed.len(), 9, "each non-f32 dtype's outputs replayed: {replayed:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn check_names_the_line_of_a_view_out_of_range() {
    let d = tmp("check");
    std::fs::create_dir_all(&d).unwrap();
    let text = std::fs::read_to_string(example()).unwrap();
    // The transposed view of `w` one element further: its last element falls past the tensor.
    let bad = text.replace(
        r#"shape = ["rows", "cols"], strides = [1, "rows"]"#,
        r#"offset = 2, shape = ["rows", "cols"], strides = [1, "rows"]"#,
    );
    assert_ne!(bad, text);
    let f = d.join("bad.toml");
    std::fs::write(&f, &bad).unwrap();
    let line = bad.lines().position(|l| l.contains("offset = 2, shape")).unwrap() + 1;
    for args in [vec!["workload", "check"], vec!["run", "--workload"]] {
        let out = ferry().args(&args).arg(&f).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!("bad.toml:{line}:"))
                && err.contains("input view of `w` out of range: offset 2 + extent 96 (shape [8, 12]) > 96 elements"),
            "{args:?}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}
