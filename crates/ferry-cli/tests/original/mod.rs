//! What the original runtime's readers require of the files `ferry run` writes (docs/dfx.md),
//! checked field by field on a run's directory: the swimlane converter's (the name map beside
//! the records, the clock anchors, the orchestrator's records), the critical path's (the
//! swimlane's blocks against `deps.json`'s edges), the deps viewer's (`deps.json`'s tasks,
//! tensors and edges) and the dump viewer's (`args_dump.json` and `args.bin`).
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The file at `p`, parsed.
pub fn json(p: &Path) -> Value {
    let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} of {v} is not a u64"))
}

/// A `deps.json` u64: a decimal string.
fn dec(v: &Value) -> u64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{v} is no decimal string"))
}

/// Element types the readers know, with their sizes in bytes.
const DTYPES: [(&str, u64); 10] = [
    ("FLOAT32", 4),
    ("FLOAT16", 2),
    ("BFLOAT16", 2),
    ("INT8", 1),
    ("INT16", 2),
    ("INT32", 4),
    ("INT64", 8),
    ("UINT8", 1),
    ("UINT32", 4),
    ("UINT64", 8),
];

fn dtype_size(name: &str) -> Option<u64> {
    DTYPES.iter().find(|(n, _)| *n == name).map(|&(_, s)| s)
}

/// Every check below, for a run of `case` (`variant` `device` or `host`) with the swimlane at
/// level 4, DepGen and ArgsDump on, whose tasks ran each of `kernels`.
pub fn check_all(d: &Path, case: &str, variant: &str, kernels: &[&str]) {
    check_name_map(d, case, kernels);
    let sw = json(&d.join("chip_swimlane_records.json"));
    let (t0, t1) = check_anchors(&sw);
    check_orchestrator(d, &sw, variant, (t0, t1));
    check_deps(d);
    check_critical_path(d, &sw);
    check_dump(d);
    check_dtypes_agree(d);
}

/// The two viewers name the same dtype and element count for every tensor argument both list
/// (the dump keys an argument by task and `arg_index`, `deps.json` by task and `idx`).
pub fn check_dtypes_agree(d: &Path) {
    let deps = json(&d.join("deps.json"));
    let mut of: HashMap<(u64, u64), (String, u64)> = HashMap::new();
    for t in deps["tasks"].as_array().unwrap() {
        for a in t["args"].as_array().unwrap() {
            let v = (a["dtype"].as_str().unwrap().to_string(), a["shape"][0].as_u64().unwrap());
            of.insert((dec(&t["task_id"]), u(a, "idx")), v);
        }
    }
    let dump = json(&d.join("args_dump/args_dump.json"));
    let mut compared = 0;
    for a in dump["args"].as_array().unwrap().iter().filter(|a| a["kind"] == "tensor") {
        let task = u64::from_str_radix(&a["task_id"].as_str().unwrap()[2..], 16).unwrap();
        let got = &of[&(task, u(a, "arg_index"))];
        assert_eq!((got.0.as_str(), got.1), (a["dtype"].as_str().unwrap(), u(a, "numel")), "{a}");
        compared += 1;
    }
    assert!(compared > 0, "no tensor argument dumped");
}

/// The name map's layout, field by field (`{"level", "orchestrator_name",
/// "callable_id_to_name"}`), and the swimlane converter's labelling resolved with it: every
/// AICore task's `func_id` (from `deps.json` `kernel_ids`) maps to its kernel's name, not to a
/// `func_<id>_<x>` fallback, and each of `kernels` labels some block.
pub fn check_name_map(d: &Path, case: &str, kernels: &[&str]) {
    let file = format!("name_map_{case}.json");
    let m = json(&d.join(&file));
    let o = m.as_object().unwrap();
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["callable_id_to_name", "level", "orchestrator_name"], "{m}");
    assert_eq!(m["level"], 2, "level 2: orchestration + in-core kernels");
    assert_eq!(m["orchestrator_name"], case);
    let names = m["callable_id_to_name"].as_object().unwrap();
    assert!(!names.is_empty());
    for (id, name) in names {
        assert!(id.parse::<u32>().is_ok(), "callable id {id:?} is a decimal string");
        assert!(name.is_string() && !name.as_str().unwrap().is_empty(), "{id}: {name}");
    }
    // What swimlane_converter does: func_id = the first non-negative kernel id of the task in
    // deps.json, label = callable_id_to_name[str(func_id)].
    let deps = json(&d.join("deps.json"));
    let func_of: HashMap<u64, i64> = deps["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let k = t["kernel_ids"].as_array().unwrap().iter().filter_map(Value::as_i64);
            (dec(&t["task_id"]), k.into_iter().find(|&k| k >= 0).unwrap())
        })
        .collect();
    let sw = json(&d.join("chip_swimlane_records.json"));
    let rows = sw["aicore_tasks"].as_array().unwrap();
    assert!(!rows.is_empty());
    let mut labelled: BTreeSet<&str> = BTreeSet::new();
    for r in rows {
        let token = r[1].as_u64().unwrap();
        let f = func_of[&token];
        let name = names.get(&f.to_string()).unwrap_or_else(|| panic!("func_id {f} unnamed"));
        assert_eq!(name, &sw["metadata"]["kernel_names"][f.to_string()]);
        labelled.insert(name.as_str().unwrap());
    }
    for k in kernels {
        assert!(labelled.contains(k), "{k} not among {labelled:?}");
    }
    // Recorded in the run's manifest, as every file `ferry run` writes.
    let man = std::fs::read_to_string(d.join("ferry-manifest.json")).unwrap();
    assert!(man.contains(&file), "{man}");
}

/// Clock anchors: three valid samples at each position, monotonic in both clocks, device time
/// between them equal to host time at `clock_freq_hz` within the round trips, and every
/// device timestamp of the run inside the anchored interval. Returns the anchored host
/// interval.
pub fn check_anchors(sw: &Value) -> (u64, u64) {
    let m = &sw["metadata"];
    let hz = m["clock_freq_hz"].as_u64().unwrap();
    let a = &m["clock_anchors"];
    assert_eq!(a["provider"], "sim_syscnt");
    assert_eq!(a["device_timestamp_unit"], "syscnt_cycles");
    assert_eq!(a["samples_per_position"], 3);
    let s = a["samples"].as_array().unwrap();
    let at = |p: &str| s.iter().filter(|x| x["position"] == p).collect::<Vec<_>>();
    let (pre, post) = (at("pre_host_orchestration"), at("post_device_execution"));
    assert_eq!((pre.len(), post.len(), s.len()), (3, 3, 6), "{a}");
    for w in s.windows(2) {
        assert!(w[0]["error"].is_null() && w[1]["error"].is_null(), "{w:?}");
        assert!(u(&w[0], "host_before_ns") <= u(&w[0], "host_after_ns"));
        assert!(u(&w[0], "host_after_ns") <= u(&w[1], "host_before_ns"), "{w:?}");
        assert!(u(&w[0], "device_cycles") <= u(&w[1], "device_cycles"), "{w:?}");
    }
    let (f, l) = (&s[0], &s[5]);
    let device_ns = (u(l, "device_cycles") - u(f, "device_cycles")) as f64 * 1e9 / hz as f64;
    let lo = (u(l, "host_before_ns") - u(f, "host_after_ns")) as f64;
    let hi = (u(l, "host_after_ns") - u(f, "host_before_ns")) as f64;
    let cycle = 1e9 / hz as f64;
    assert!(device_ns + cycle >= lo && device_ns <= hi + cycle, "{device_ns} ns not in {lo}..{hi}");
    let (first, last) = (u(pre[2], "device_cycles"), u(post[0], "device_cycles"));
    for r in sw["aicore_tasks"].as_array().unwrap() {
        let (start, end) = (r[3].as_u64().unwrap(), r[4].as_u64().unwrap());
        assert!(first <= start && end <= last, "task {r} outside the anchors {first}..{last}");
    }
    (u(pre[0], "host_before_ns"), u(post[2], "host_after_ns"))
}

/// The orchestrator's records as the converter reads them: a device-orchestrated run has its
/// submits as AICPU orchestrator phases and no host marks; a host-built run is marked
/// host-orchestrated, its capture complete with one host phase per task, in order, inside the
/// anchored host interval `anchored`, and carries no AICPU orchestrator records (the original
/// readers refuse both in one file).
pub fn check_orchestrator(d: &Path, sw: &Value, variant: &str, anchored: (u64, u64)) {
    let m = &sw["metadata"];
    let tasks = u(&json(&d.join("summary.json"))["runs"][0], "tasks");
    if variant == "device" {
        assert!(m.get("orchestrator_source").is_none(), "{m}");
        assert!(sw.get("host_orchestrator_phases").is_none());
        let phases = sw["aicpu_orchestrator_phases"][0].as_array().unwrap();
        assert!(!phases.is_empty());
        return;
    }
    assert_eq!(variant, "host");
    assert_eq!(m["orchestrator_source"], "host");
    assert_eq!(m["orchestrator_clock_domain"], "host_monotonic_ns");
    assert!(m["host_clock_domain_id"].as_str().unwrap().starts_with("ferry-process-"));
    let c = &m["host_capture"];
    assert_eq!(
        (c["status"].as_str(), c["expected_records"].as_u64()),
        (Some("complete"), Some(tasks))
    );
    assert_eq!(
        (c["recorded_records"].as_u64(), c["dropped_records"].as_u64()),
        (Some(tasks), Some(0))
    );
    assert!(c["error"].is_null());
    let phases = sw["host_orchestrator_phases"][0].as_array().unwrap();
    assert_eq!(phases.len() as u64, tasks);
    let origin = m["host_orchestration_origin_ns"].as_u64().unwrap();
    assert!(anchored.0 <= origin);
    for (i, p) in phases.iter().enumerate() {
        assert_eq!(p["submit_idx"], i);
        let (s, e) = (u(p, "start_host_ns"), u(p, "end_host_ns"));
        assert!(origin <= s && s <= e && e <= anchored.1, "{p}");
    }
    assert!(sw.get("aicpu_orchestrator_phases").is_none());
}

/// FNV-1a 64 of a buffer address and a version (the little-endian bytes of each): the
/// `tensor_id` the deps viewer joins arguments and tensors on.
fn tensor_id(addr: u64, version: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in addr.to_le_bytes().into_iter().chain(version.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `deps.json` as the deps viewer (`deps_to_graph`) reads it: every u64 a decimal string; one
/// task per submit (as many as the run's tasks), each with three kernel ids of which one at
/// least names a kernel, a block count and its tensor arguments in order, each with a role, a
/// known dtype, one extent per stride and a `tensor_id` that `tensors` lists; each tensor's id
/// the FNV-1a of its address and version and its dtype that of the arguments naming it; every
/// edge forward between two listed tasks, labelled with a known source, none repeated.
pub fn check_deps(d: &Path) {
    let deps = json(&d.join("deps.json"));
    let tasks = deps["tasks"].as_array().unwrap();
    let ran = u(&json(&d.join("summary.json"))["runs"][0], "tasks");
    assert_eq!(tasks.len() as u64, ran, "one deps.json task per task run");
    let tensors: BTreeMap<u64, &Value> =
        deps["tensors"].as_array().unwrap().iter().map(|t| (dec(&t["tensor_id"]), t)).collect();
    assert_eq!(tensors.len(), deps["tensors"].as_array().unwrap().len(), "a tensor listed twice");
    for (&id, t) in &tensors {
        let version = u32::try_from(u(t, "version")).unwrap();
        assert_eq!(tensor_id(dec(&t["buffer_addr"]), version), id, "{t}");
        assert!(dtype_size(t["dtype"].as_str().unwrap()).is_some(), "{t}");
        assert!(dec(&t["buffer_numel"]) > 0, "{t}");
    }
    let mut ids = BTreeSet::new();
    let mut named = BTreeSet::new();
    for t in tasks {
        assert!(ids.insert(dec(&t["task_id"])), "task {} listed twice", t["task_id"]);
        assert!(matches!(t["scope"].as_str(), Some("auto" | "manual")), "{t}");
        let k: Vec<i64> =
            t["kernel_ids"].as_array().unwrap().iter().map(|k| k.as_i64().unwrap()).collect();
        assert!(k.len() == 3 && k.iter().all(|&k| k >= -1) && k.iter().any(|&k| k >= 0), "{t}");
        assert!(u(t, "block_num") >= 1, "{t}");
        for (i, a) in t["args"].as_array().unwrap().iter().enumerate() {
            assert_eq!(u(a, "idx"), i as u64, "{t}");
            assert!(matches!(a["type"].as_str(), Some("INPUT" | "OUTPUT" | "INOUT")), "{a}");
            let dtype = a["dtype"].as_str().unwrap();
            assert!(dtype_size(dtype).is_some(), "{a}");
            let (shape, strides) =
                (a["shape"].as_array().unwrap(), a["strides"].as_array().unwrap());
            assert!(!shape.is_empty() && shape.len() == strides.len(), "{a}");
            assert!(shape.iter().all(|e| e.as_u64().is_some_and(|e| e > 0)), "{a}");
            let _ = dec(&a["start_offset"]);
            let tensor = tensors.get(&dec(&a["tensor_id"])).unwrap_or_else(|| panic!("{a}"));
            assert_eq!(tensor["dtype"].as_str(), Some(dtype), "{a} names {tensor}");
            named.insert(dec(&a["tensor_id"]));
        }
    }
    assert_eq!(named.len(), tensors.len(), "every listed tensor is some argument's");
    let mut pairs = BTreeSet::new();
    for e in deps["edges"].as_array().unwrap() {
        let (p, s) = (dec(&e["pred"]), dec(&e["succ"]));
        assert!(p < s && ids.contains(&p) && ids.contains(&s), "{e}");
        assert!(matches!(e["source"].as_str(), Some("explicit" | "creator" | "tensormap")), "{e}");
        assert!(e["arg"].as_u64().is_some() && e["flags"].is_array(), "{e}");
        assert!(pairs.insert((p, s)), "{e} repeated");
    }
}

/// What the critical-path tool joins: every `deps.json` task has as many AICore blocks in the
/// swimlane as its `block_num` (task token = task id), every edge's predecessor's last block
/// ended before its successor's first started, and `ferry report`'s longest chain by count is a
/// path of those edges.
pub fn check_critical_path(d: &Path, sw: &Value) {
    let deps = json(&d.join("deps.json"));
    let mut spans: HashMap<u64, (u64, u64, u64)> = HashMap::new();
    for r in sw["aicore_tasks"].as_array().unwrap() {
        let (task, start, end) =
            (r[1].as_u64().unwrap(), r[3].as_u64().unwrap(), r[4].as_u64().unwrap());
        let s = spans.entry(task).or_insert((u64::MAX, 0, 0));
        *s = (s.0.min(start), s.1.max(end), s.2 + 1);
    }
    for t in deps["tasks"].as_array().unwrap() {
        let id = dec(&t["task_id"]);
        let blocks = spans.get(&id).map_or(0, |s| s.2);
        assert_eq!(blocks, u(t, "block_num"), "task {id}'s blocks in the swimlane");
    }
    let edges: BTreeSet<(u64, u64)> = deps["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (dec(&e["pred"]), dec(&e["succ"])))
        .collect();
    for &(p, s) in &edges {
        assert!(spans[&p].1 <= spans[&s].0, "{s} started before {p} ended");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["report", "--json"])
        .arg(d)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let path = &r["critical_path"]["static_by_count"];
    let hex = |v: &Value| u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16);
    let chain: Vec<u64> =
        path["tasks"].as_array().unwrap().iter().map(|t| hex(&t["task_id"]).unwrap()).collect();
    assert_eq!(chain.len() as u64, u(path, "length"), "{path}");
    assert!(!chain.is_empty(), "{path}");
    for w in chain.windows(2) {
        assert!(edges.contains(&(w[0], w[1])), "{w:?} is no edge of deps.json");
    }
}

/// `args_dump.json` and `args.bin` as the dump viewer reads them: the counts in the header
/// equal the arguments listed; each argument's task id a `0x`-prefixed 16-digit hex string, its
/// role, stage, kind and dtype from their closed sets; a tensor's `numel` the product of its
/// extents, its payload inside `args.bin` and `numel` × the dtype's size bytes long (unless
/// truncated); a scalar with a value and no payload; `bin_file` null exactly when no argument
/// has a payload. `ferry dump list` reads it back.
pub fn check_dump(d: &Path) {
    let dir = d.join("args_dump");
    let f = json(&dir.join("args_dump.json"));
    let args = f["args"].as_array().unwrap();
    assert_eq!(u(&f, "total_args"), args.len() as u64);
    let count = |k: &str, v: &str| args.iter().filter(|a| a[k] == v).count() as u64;
    assert_eq!(u(&f, "before_dispatch"), count("stage", "before_dispatch"));
    assert_eq!(u(&f, "after_completion"), count("stage", "after_completion"));
    assert_eq!(u(&f, "input_args"), count("role", "INPUT"));
    assert_eq!(u(&f, "output_args"), count("role", "OUTPUT"));
    assert_eq!(u(&f, "inout_args"), count("role", "INOUT"));
    assert_eq!(f["bin_format"]["type"], "raw");
    assert_eq!(f["bin_format"]["byte_order"], "little");
    let bin_len = match f["bin_file"].as_str() {
        Some(name) => std::fs::metadata(dir.join(name)).unwrap().len(),
        None => 0,
    };
    let mut payloads = 0;
    for a in args {
        let id = a["task_id"].as_str().unwrap();
        assert!(id.len() == 18 && id.starts_with("0x"), "{a}");
        assert!(u64::from_str_radix(&id[2..], 16).is_ok(), "{a}");
        assert!(matches!(a["role"].as_str(), Some("INPUT" | "OUTPUT" | "INOUT" | "SCALAR")), "{a}");
        assert!(matches!(a["stage"].as_str(), Some("before_dispatch" | "after_completion")), "{a}");
        let size = dtype_size(a["dtype"].as_str().unwrap()).unwrap_or_else(|| panic!("{a}"));
        let numel = u(a, "numel");
        if a["kind"] == "scalar" {
            assert_eq!(a["role"], "SCALAR", "{a}");
            assert!(a["value"].is_u64() && a["bin_offset"].is_null() && numel == 1, "{a}");
            continue;
        }
        assert_eq!(a["kind"], "tensor", "{a}");
        let shape = a["shape"].as_array().unwrap();
        assert_eq!(shape.len(), a["strides"].as_array().unwrap().len(), "{a}");
        let product: u64 = shape.iter().map(|e| e.as_u64().unwrap()).product();
        assert_eq!(product, numel, "{a}");
        if let Some(off) = a["bin_offset"].as_u64() {
            let n = u(a, "bin_size");
            assert!(off + n <= bin_len, "{a} past args.bin's {bin_len} bytes");
            if a["truncated"] == false {
                assert_eq!(n, numel * size, "{a}");
            }
            payloads += 1;
        }
    }
    assert_eq!(f["bin_file"].is_null(), payloads == 0, "bin_file {}", f["bin_file"]);
    let out = Command::new(env!("CARGO_BIN_EXE_ferry")).args(["dump", "list"]).arg(d).output();
    let out = out.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
