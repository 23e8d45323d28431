//! `ferry run --kernels LIB.so`: the template kernel library built with cargo, bad libraries
//! refused with the loader's typed message, and the runner running afterwards.
#[path = "../../ferry-runtime/tests/support/template.rs"]
mod template;

use std::collections::BTreeMap;
use std::process::{Command, Output};

fn ferry(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferry")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The slices of the Perfetto trace at `path` (decoded by the published schema) that carry a
/// `task_id` annotation: (track name, slice name, start, annotations).
fn task_slices(path: &std::path::Path) -> Vec<(String, String, u64, BTreeMap<String, u64>)> {
    use ferry_perfetto_proto::protos::{track_event::Type, Trace};
    use ferry_perfetto_proto::Message;
    let trace = Trace::decode(&std::fs::read(path).unwrap()[..]).unwrap();
    let (mut names, mut tracks, mut out) = (BTreeMap::new(), BTreeMap::new(), Vec::new());
    for p in trace.packet {
        for n in p.interned_data.iter().flat_map(|d| &d.event_names) {
            names.insert(n.iid.unwrap(), n.name.clone().unwrap());
        }
        if let Some(td) = p.track_descriptor {
            let name = td.name.or_else(|| td.thread.and_then(|t| t.thread_name));
            tracks.insert(td.uuid.unwrap(), name.unwrap_or_default());
            continue;
        }
        let ev = p.track_event.unwrap();
        if Type::try_from(ev.r#type.unwrap()) != Ok(Type::SliceBegin) {
            continue;
        }
        let args: BTreeMap<String, u64> = ev
            .debug_annotations
            .iter()
            .filter_map(|a| Some((a.name.clone()?, a.uint_value?)))
            .collect();
        if args.contains_key("task_id") {
            let name = ev.name.or_else(|| Some(names[&ev.name_iid?].clone())).unwrap();
            out.push((tracks[&ev.track_uuid.unwrap()].clone(), name, p.timestamp.unwrap(), args));
        }
    }
    out
}

/// Checks that the trace at `path` marks task 0x1 (`saxpy`) on its own core track, and no
/// other task.
fn assert_marks_task_1(path: &std::path::Path) {
    let slices = task_slices(path);
    let marker = "failed: task 0x1 (saxpy)";
    let kernel: Vec<_> = slices
        .iter()
        .filter(|s| s.1 == "saxpy" && s.3["task_id"] == 1 && s.0.starts_with("core"))
        .filter(|s| !s.0.ends_with("dispatch-finish"))
        .collect();
    assert!(!kernel.is_empty(), "task 0x1 has no kernel slice: {slices:?}");
    for k in &kernel {
        assert_eq!(k.3.get("failed"), Some(&1), "{k:?}");
        let on_track = slices.iter().any(|m| m.1 == marker && m.0 == k.0 && m.2 == k.2);
        assert!(on_track, "no `{marker}` on {} at {}: {slices:?}", k.0, k.2);
    }
    let flagged: Vec<_> = slices.iter().filter(|s| s.3.contains_key("failed")).collect();
    assert!(flagged.iter().all(|s| s.3["task_id"] == 1), "{flagged:?}");
}

#[test]
fn run_loads_kernel_libraries_and_refuses_bad_ones() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let lib = template::template_lib();
    let good = std::fs::read(lib).unwrap();
    let dir = std::env::temp_dir().join(format!("ferry-cli-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let truncated = dir.join("truncated.so");
    std::fs::write(&truncated, &good[..good.len() / 2]).unwrap();
    let mut v2 = good.clone();
    let magic = u64::from_le_bytes(*b"FRYKERNL").to_le_bytes();
    let at = v2.windows(12).position(|w| w[..8] == magic && w[8..] == 3u32.to_le_bytes()).unwrap();
    v2[at + 8..at + 12].copy_from_slice(&4u32.to_le_bytes());
    let wrong_abi = dir.join("abi4.so");
    std::fs::write(&wrong_abi, &v2).unwrap();
    let run = ["run", "--small", "--aic", "2", "--aiv", "4", "--example", "vector", "--kernels"];

    let o = ferry(&[&run[..], &[truncated.to_str().unwrap()]].concat());
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("truncated"), "{}", text(&o));
    let o = ferry(&[&run[..], &[wrong_abi.to_str().unwrap()]].concat());
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("kernel abi version 4, this ferry loads version 3"), "{}", text(&o));
    let o = ferry(&[&run[..], &[&format!("{},{}", lib.display(), lib.display())]].concat());
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("`saxpy` is already defined by library `kernel-template`"),
        "{}",
        text(&o)
    );

    // A good one loads and the example still verifies.
    let o = ferry(&[&run[..], &[lib.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("kernel-template from"), "{t}");
    assert!(t.contains("saxpy (id 256), clamp (id 257)"), "{t}");
    assert_eq!(t.matches("ok (checksum").count(), 1, "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The template library's kernels named by a workload file: checked (refused without the
/// library, with the line; accepted with it), run on both variants and both arches and verified
/// against the library's host references, and repeated through the launch pipeline.
#[test]
fn a_workload_runs_the_template_librarys_kernels() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let lib = template::template_lib().to_str().unwrap();
    let wl = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/kernel-template/workload.toml");

    let o = ferry(&["workload", "check", wl]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("workload.toml:52:12: unknown kernel `saxpy`"), "{}", text(&o));
    assert!(text(&o).contains("--kernels LIB.so"), "{}", text(&o));
    let o = ferry(&["workload", "check", "--kernels", lib, wl]);
    assert!(o.status.success(), "{}", text(&o));

    for arch in ["a2a3", "a5"] {
        for variant in ["device", "host"] {
            let args = ["run", "--small", "--arch", arch, "--variant", variant, "--aic", "2"];
            let o =
                ferry(&[&args[..], &["--aiv", "4", "--kernels", lib, "--workload", wl]].concat());
            let t = text(&o);
            assert!(o.status.success(), "{arch} {variant}: {t}");
            // 8 chunks of 1,024: out = clamp(2 i + 1, 0, 1001) summed over i < 8,192.
            let expected: f64 = (0..8192).map(|i| f64::from((2 * i + 1).min(1001))).sum();
            assert!(t.contains(&format!("ok (checksum {expected:.4})")), "{arch} {variant}: {t}");
            // Loaded kernels are counted by name, like built-ins.
            assert!(t.contains("per kernel: saxpy 8, clamp 8, relu_nd 8"), "{arch} {variant}: {t}");
        }
    }

    // The view kernel `relu_nd` reads and writes bf16: the args dump records its arguments so.
    let d = std::env::temp_dir().join(format!("ferry-cli-relu-nd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let o = ferry(&[
        "run",
        "--small",
        "--kernels",
        lib,
        "--workload",
        wl,
        "--dump-args",
        "2",
        "--original-formats",
        "--out",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let dump = std::fs::read_to_string(d.join("args_dump/args_dump.json")).unwrap();
    let dump: serde_json::Value = serde_json::from_str(&dump).unwrap();
    let relu: Vec<&serde_json::Value> = dump["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["func_id"][0] == 258 && a["kind"] == "tensor")
        .collect();
    assert_eq!(relu.len(), 16, "8 tasks, an input and an output each");
    assert!(relu.iter().all(|a| a["dtype"] == "BFLOAT16" && a["numel"] == 1024), "{relu:?}");
    assert_eq!(std::fs::metadata(d.join("r.bf16")).unwrap().len(), 2 * 8192);
    let _ = std::fs::remove_dir_all(&d);

    let o = ferry(&["run", "--small", "--repeat", "3", "--kernels", lib, "--workload", wl]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("3 runs back to back through 2 launch slots"), "{t}");
    assert!(t.contains("every run verified"), "{t}");
}

/// A loaded kernel's typed error reaches the user as its own words, under its name and library,
/// with the line of the task that failed: the template's `saxpy` refuses an `x` shorter than
/// its output with `KernelError::Shape`, here in the second task of the file.
#[test]
fn a_loaded_kernels_error_names_the_kernel_its_message_and_the_task_line() {
    let _bound = ferry_watchdog::bound("the ferry binary's run");
    let lib = template::template_lib().to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("ferry-cli-kernel-error-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wl = dir.join("short.toml");
    std::fs::write(
        &wl,
        r#"[workload]
name = "short"
verify = "host-reference"
[[tensor]]
name = "x"
shape = [512]
[[tensor]]
name = "y"
shape = [1024]
[[tensor]]
name = "out"
shape = [1024]
[[graph]]
kernel = "clamp"
args = [{ tensor = "out", role = "inout" }]
scalars = [{ f32 = 0.0 }, { f32 = 1.0 }]
[[graph]]
kernel = "saxpy"
args = [
  { tensor = "x", role = "input" },
  { tensor = "y", role = "input" },
  { tensor = "out", role = "output" },
]
scalars = [{ f32 = 2.0 }]
"#,
    )
    .unwrap();
    let said = ferry_kernel_abi::KernelError::Shape { expected: 1024, got: 512 }.to_string();
    for variant in ["device", "host"] {
        let o = ferry(&[
            "run",
            "--small",
            "--variant",
            variant,
            "--aic",
            "2",
            "--aiv",
            "4",
            "--kernels",
            lib,
            "--workload",
            wl.to_str().unwrap(),
        ]);
        let t = text(&o);
        assert!(!o.status.success(), "{variant}: {t}");
        let want = format!(
            "short.toml:17:1: task 0x1: kernel `saxpy` (library `kernel-template`, id 256) failed on its core: {said}"
        );
        assert!(t.contains(&want), "{variant}: want `{want}` in {t}");
        assert!(!t.contains("returned status"), "{variant}: {t}");
    }

    // Profiled, the faulting run completes its profile, marked failed with the kernel's error,
    // and every analysis command reads it and says the run failed.
    let out = dir.join("profile");
    let page = dir.join("page.html");
    let (ds, pg) = (out.to_str().unwrap(), page.to_str().unwrap());
    let o = ferry(&[
        "run",
        "--small",
        "--variant",
        "host",
        "--aic",
        "2",
        "--aiv",
        "4",
        "--kernels",
        lib,
        "--workload",
        wl.to_str().unwrap(),
        "--swimlane",
        "--pmu",
        "--dep-gen",
        "--dump-args",
        "2",
        "--scope-stats",
        "--original-formats",
        "-o",
        ds,
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("the run failed; its profile is complete"), "{t}");
    let m = ferry_profile::Manifest::verified(&out).unwrap();
    let (error, task) = match m.outcome.clone() {
        Some(ferry_profile::RunOutcome::Failed { error, task }) => (error, task),
        other => panic!("outcome {other:?}"),
    };
    // The manifest names the task that failed, in the tools' id form, and its kernel.
    let task = task.expect("the failed task is recorded");
    assert_eq!((task.id, task.kernel.as_str(), task.run), (1, "saxpy", None));
    // The trace the run wrote marks it.
    assert_marks_task_1(&out.join("trace.perfetto-trace"));
    assert!(error.contains("kernel `saxpy`") && error.contains("failed on its core"), "{error}");
    for e in &m.files {
        m.verify(&out, &e.path).unwrap();
    }
    for args in [
        vec!["report", ds, "--json"],
        vec!["deps", ds, "--json"],
        vec!["dump", "list", ds, "--json"],
        vec!["scopes", ds, "--json"],
        vec!["trace", ds, "--json"],
        vec!["view", ds, "-o", pg, "--json"],
    ] {
        let o = ferry(&args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("failed"), "{args:?}: {}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["outcome"]["status"], "failed", "{args:?}: {v}");
        assert_eq!(v["outcome"]["error"], error.as_str(), "{args:?}: {v}");
        assert_eq!(v["outcome"]["task"]["id"], "0x1", "{args:?}: {v}");
    }
    // The trace `ferry trace` wrote from the files marks it too, and so does the page.
    assert_marks_task_1(&out.join("trace.perfetto-trace"));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("failed: task 0x1 (saxpy)</button>"), "the page names the task");
    let o = ferry(&["report", ds]);
    let report = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(report.contains("the run failed"), "{}", text(&o));
    // The page's report is `ferry report`'s, the failure included.
    let escaped = report
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(&format!("<pre id=\"fv-report\">{escaped}</pre>")), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kernel that never returns (`hang` of the faulty-kernels fixture): `ferry run --timeout`
/// fails the run with an error naming the task's workload line, the kernel, its library, the
/// core and the budget; the profile of all five subsystems is complete and marked failed, and
/// every analysis command reads it.
#[test]
fn a_kernel_that_never_returns_fails_within_its_budget_with_a_readable_profile() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let lib = template::faulty_lib();
    let dir = std::env::temp_dir().join(format!("ferry-cli-hang-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let wl = dir.join("hang.toml");
    std::fs::write(
        &wl,
        "[workload]\nname = \"hang\"\nverify = \"host-reference\"\noutputs = [\"x\"]\n\
         [[tensor]]\nname = \"x\"\nshape = [16]\n\
         [[graph]]\nkernel = \"hang\"\nargs = [{ tensor = \"x\", role = \"inout\" }]\n",
    )
    .unwrap();
    let out = dir.join("out");
    let (lib, wl, out_s) = (lib.to_str().unwrap(), wl.to_str().unwrap(), out.to_str().unwrap());
    for variant in ["device", "host"] {
        let _ = std::fs::remove_dir_all(&out);
        let o = ferry(&[
            "run",
            "--small",
            "--variant",
            variant,
            "--kernels",
            lib,
            "--workload",
            wl,
            "--timeout",
            "300ms",
            "--swimlane",
            "4",
            "--pmu",
            "2",
            "--dep-gen",
            "--dump-args",
            "3",
            "--scope-stats",
            "--original-formats",
            "--out",
            out_s,
        ]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{t}");
        for want in [
            "hang.toml:8:1: task 0x0: kernel `hang` (library `faulty-kernels`, id 256)",
            "did not return within its budget of 300 ms on core ",
        ] {
            assert!(t.contains(want), "{variant}: {want:?} missing: {t}");
        }
        assert!(!t.contains("panicked"), "{t}");
        let m = ferry_profile::Manifest::verified(&out).unwrap();
        let why = m.outcome.as_ref().and_then(|o| o.failure()).unwrap_or_default().to_string();
        assert!(why.contains("did not return within its budget"), "{variant}: {why}");
        // The task is recorded and marked, though it left no slice: on the run's own track.
        let task = m.outcome.as_ref().and_then(|o| o.failed_task()).expect("the task");
        assert_eq!((task.id, task.kernel.as_str()), (0, "hang"), "{variant}");
        let marked: Vec<_> = task_slices(&out.join("trace.perfetto-trace"))
            .into_iter()
            .filter(|s| s.1 == "failed: task 0x0 (hang)")
            .collect();
        assert_eq!(marked.len(), 1, "{variant}: {marked:?}");
        assert_eq!(marked[0].0, "failed task", "{variant}: {marked:?}");
        for cmd in ["report", "deps", "scopes", "trace"] {
            let o = ferry(&[cmd, out_s]);
            assert!(o.status.success(), "{variant}: ferry {cmd}: {}", text(&o));
            assert!(
                text(&o).contains("failed"),
                "{variant}: ferry {cmd} says nothing: {}",
                text(&o)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kernel that writes 4 KiB past its output (`overrun` of the faulty-kernels fixture): the run
/// fails naming the task's workload line, the kernel and the argument, not the runtime image.
#[test]
fn a_write_past_an_output_is_the_kernels_fault() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let lib = template::faulty_lib();
    let dir = std::env::temp_dir().join(format!("ferry-cli-overrun-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let wl = dir.join("overrun.toml");
    std::fs::write(
        &wl,
        "[workload]\nname = \"overrun\"\nverify = \"host-reference\"\noutputs = [\"x\"]\n\
         [[tensor]]\nname = \"x\"\nshape = [16]\n\
         [[graph]]\nkernel = \"overrun\"\nargs = [{ tensor = \"x\", role = \"inout\" }]\n",
    )
    .unwrap();
    let o = ferry(&[
        "run",
        "--small",
        "--kernels",
        lib.to_str().unwrap(),
        "--workload",
        wl.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("overrun.toml:8:1: task 0x0: kernel `overrun` (library `faulty-kernels`"),
        "{t}"
    );
    assert!(t.contains("wrote past the end of tensor argument 0"), "{t}");
    assert!(!t.contains("malformed"), "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}
