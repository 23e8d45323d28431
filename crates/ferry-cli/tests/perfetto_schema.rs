//! The Perfetto trace a run writes, decoded by Perfetto's own published schema (the `perfetto`
//! Python package's `perfetto_trace_pb2`, through `tools/check_perfetto_trace.py`): PMU and scope
//! occupancy counter tracks, no unbalanced slice, no event on an undeclared track. The checker
//! itself is shown to fail on a trace broken on purpose.
mod common;

use std::path::Path;
use std::process::Command;

use common::{ferry_ok, need, runs, scratch, tools};

fn python_with_perfetto() -> bool {
    runs("python3", &["-c", "from perfetto.protos.perfetto.trace import perfetto_trace_pb2"])
}

fn check(trace: &Path, expect: &str) -> (bool, serde_json::Value) {
    let out = Command::new("python3")
        .arg(tools().join("check_perfetto_trace.py"))
        .arg(trace)
        .args(["--expect", expect])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "checker output is not JSON ({e}):\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), v)
}

#[test]
fn trace_of_an_all_five_run_decodes_with_perfettos_schema() {
    let _bound = ferry_watchdog::bound("the ferry binary's run and python's perfetto decoder");
    let test = "trace_of_an_all_five_run_decodes_with_perfettos_schema";
    let why = "python3 with the `perfetto` package is missing (pip install perfetto)";
    if need(python_with_perfetto(), test, why).is_none() {
        return;
    }
    let d = scratch("perfetto-schema");
    let out = d.join("run");
    let out_s = out.to_str().unwrap();
    ferry_ok(&[
        "run",
        "--small",
        "--example",
        "vector",
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
    let trace = out.join("trace.perfetto-trace");
    let (ok, v) = check(&trace, "pmu,scopes,anchors,loss");
    println!("{test}: {v}");
    assert!(ok, "{v:#}");
    assert_eq!(v["unbalanced_slices"], 0, "{v:#}");
    assert_eq!(v["undeclared_tracks"], 0, "{v:#}");
    assert!(v["pmu_counter_tracks"].as_u64().unwrap() > 0, "{v:#}");
    assert!(v["scope_counter_tracks"].as_u64().unwrap() > 0, "{v:#}");
    assert!(v["slices"].as_u64().unwrap() > 100, "{v:#}");

    // The same trace with an event on an undeclared track and an end that closes nothing: the
    // checker must see both.
    let mut bytes = std::fs::read(&trace).unwrap();
    let sliced = first_sliced_track(&bytes);
    for ty in [1u8, 2] {
        // TracePacket { timestamp, trusted_packet_sequence_id: 1, track_event: { type, track_uuid } }:
        // a begin on undeclared track 0x7777, an end on a declared track that has no open slice.
        let (track, ts) = if ty == 1 { (0x7777u64, 5u8) } else { (sliced, 6) };
        let mut ev = vec![0x48, ty, 0x58];
        let mut t = track;
        while t >= 0x80 {
            ev.push((t as u8) | 0x80);
            t >>= 7;
        }
        ev.push(t as u8);
        let mut pkt = vec![0x40, ts, 0x50, 1, 0x5a, ev.len() as u8];
        pkt.extend(ev);
        bytes.push(0x0a);
        bytes.push(pkt.len() as u8);
        bytes.extend(pkt);
    }
    let broken = d.join("broken.perfetto-trace");
    std::fs::write(&broken, bytes).unwrap();
    let (ok, v) = check(&broken, "pmu,scopes");
    assert!(!ok, "the checker passed a broken trace: {v:#}");
    assert_eq!(v["undeclared_tracks"], 1, "{v:#}");
    assert_eq!(v["unbalanced_slices"], 1, "{v:#}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_workloads_scopes_are_named_in_the_trace() {
    let test = "a_workloads_scopes_are_named_in_the_trace";
    let why = "python3 with the `perfetto` package is missing (pip install perfetto)";
    if need(python_with_perfetto(), test, why).is_none() {
        return;
    }
    let d = scratch("perfetto-scopes");
    let out = d.join("run");
    let out_s = out.to_str().unwrap();
    let wl = tools().join("../examples/workloads/diamond.toml");
    let args = ["--swimlane", "4", "--pmu", "2", "--scope-stats", "--original-formats"];
    let run = [&["run", "--workload", wl.to_str().unwrap()][..], &args[..]].concat();
    ferry_ok(&[&run[..], &["--out", out_s]].concat());
    let (ok, v) = check(&out.join("trace.perfetto-trace"), "pmu,scopes,loss");
    assert!(ok, "{v:#}");
    // One slice per scope the diamond opens (64 groups), named by the file's label.
    assert_eq!(v["scope_slices"], serde_json::json!({ "diamond": 64 }), "{v:#}");
    // `ferry trace` writes the same from the files (the names come from scope_names.json).
    std::fs::remove_file(out.join("trace.perfetto-trace")).unwrap();
    ferry_ok(&["trace", out_s]);
    let (ok, v) = check(&out.join("trace.perfetto-trace"), "pmu,scopes,loss");
    assert!(ok, "{v:#}");
    assert_eq!(v["scope_slices"], serde_json::json!({ "diamond": 64 }), "{v:#}");
    // And from the native profile alone (the names come from its profile end).
    let native = d.join("native");
    let native_s = native.to_str().unwrap();
    ferry_ok(&[&run[..run.len() - 1], &["--out", native_s]].concat());
    assert!(!native.join("trace.perfetto-trace").exists());
    ferry_ok(&["trace", native_s]);
    let (ok, v) = check(&native.join("trace.perfetto-trace"), "pmu,scopes,loss");
    assert!(ok, "{v:#}");
    assert_eq!(v["scope_slices"], serde_json::json!({ "diamond": 64 }), "{v:#}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The uuid of the first track a slice begins on in the trace `bytes` (a declared track: the
/// trace declares only tracks that hold something).
fn first_sliced_track(bytes: &[u8]) -> u64 {
    use ferry_perfetto_proto::protos::{track_event::Type, Trace};
    use ferry_perfetto_proto::Message;
    let trace = Trace::decode(bytes).unwrap();
    let begins = trace.packet.into_iter().filter_map(|p| p.track_event);
    begins
        .filter(|e| e.r#type.and_then(|t| Type::try_from(t).ok()) == Some(Type::SliceBegin))
        .find_map(|e| e.track_uuid)
        .expect("the trace holds a slice")
}
