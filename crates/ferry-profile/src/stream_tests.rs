//! Scale and streaming tests: the task join at scale, the views' indexes against their
//! definitions, the streamed traces against the plan, and the write phase's report.

use std::collections::BTreeMap;
use std::io;

use super::sample::{scaled_run, scaled_task, SCALED_CORES};
use super::*;

#[test]
fn tasks_join_every_record_at_scale() {
    const N: u32 = 20_000;
    let run = scaled_run(N);
    let tasks = run.tasks();
    assert_eq!(tasks.len(), N as usize);
    let mut want: Vec<JoinedTask> = (0..N).map(scaled_task).collect();
    want.sort_by_key(|t| (t.start, t.core, t.reg_task_id));
    assert_eq!(tasks, want);
    // The fixture exercises every branch of the join.
    assert!(tasks.iter().any(|t| t.dispatch.is_none()), "missing AICPU records");
    for k in [Some(7), Some(20), None] {
        assert!(tasks.iter().any(|t| t.func_id == k), "no task with kernel {k:?}");
    }
    assert_eq!(run.record_count(), run.loss.totals().1);
}

#[test]
fn task_func_agrees_with_the_join() {
    let run = scaled_run(2_000);
    for t in run.tasks().iter().step_by(7) {
        assert_eq!(run.task_func(t.task_id), t.func_id, "task {:#x}", t.task_id);
    }
}

#[test]
fn stall_inflated_tasks_match_their_definition() {
    let mut run = scaled_run(5_000);
    // Waits on several threads, unsorted, some nested in others.
    for (i, l) in run.loss.lanes.iter_mut().enumerate().filter(|(_, l)| l.core.is_some()) {
        let b = 2_000 + 700 * i as u64;
        l.stalls = vec![[b + 400, b + 450], [b, b + 300], [b + 100, b + 120]];
    }
    let got = views::stall_inflated_tasks(&run);
    let stalls: Vec<(u32, [u64; 2])> =
        run.loss.lanes.iter().flat_map(|l| l.stalls.iter().map(move |w| (l.thread, *w))).collect();
    let want: Vec<JoinedTask> = run
        .tasks()
        .into_iter()
        .filter(|t| {
            let Some(f) = t.finish else { return false };
            let thread = run.meta.core_to_thread[t.core as usize];
            stalls
                .iter()
                .any(|&(th, w)| i64::from(th) == i64::from(thread) && t.end <= w[1] && f >= w[0])
        })
        .collect();
    assert!(!want.is_empty());
    assert_eq!(got, want);
}

#[test]
fn deps_text_lists_each_tasks_edges() {
    let run = scaled_run(600);
    let text = views::deps_text(&run);
    let g = run.deps.as_ref().unwrap();
    let lines: BTreeMap<u64, &str> = text
        .lines()
        .filter_map(|l| {
            let id = l.trim_start().strip_prefix("task 0x")?.split(' ').next()?;
            Some((u64::from_str_radix(id, 16).ok()?, l))
        })
        .collect();
    assert_eq!(lines.len(), g.tasks.len());
    for t in &g.tasks {
        let preds: Vec<String> = g
            .edges
            .iter()
            .filter(|e| e.succ == t.task_id)
            .map(|e| format!("{:#x}({:?})", e.pred, e.source).to_lowercase())
            .collect();
        let succs: Vec<String> = g
            .edges
            .iter()
            .filter(|e| e.pred == t.task_id)
            .map(|e| format!("{:#x}", e.succ))
            .collect();
        let line = lines[&t.task_id];
        assert!(
            line.ends_with(&format!("<- [{}] -> [{}]", preds.join(", "), succs.join(", "))),
            "{line}"
        );
    }
}

#[test]
fn the_plan_puts_every_task_on_its_core() {
    let run = scaled_run(3_000);
    let p = perfetto::plan(&run);
    let mut per_core = vec![0usize; SCALED_CORES as usize];
    for s in p.slices.iter().filter(|s| s.category == "aicore") {
        let core = p
            .tracks
            .iter()
            .find(|t| t.uuid == s.track)
            .map(|t| if t.uuid < 100_000 { t.uuid } else { t.parent.unwrap() })
            .unwrap();
        per_core[(core - perfetto::uuid_core(0)) as usize] += 1;
    }
    let want: Vec<usize> = (0..SCALED_CORES)
        .map(|c| run.swimlane.as_ref().unwrap().aicore_tasks.iter().filter(|t| t.core == c).count())
        .collect();
    assert_eq!(per_core, want);
}

/// The Chrome trace as the writer built it before streaming: one `serde_json::Value` per event.
/// The reference the streamed bytes must equal.
fn reference_chrome(p: &perfetto::TracePlan) -> serde_json::Value {
    use perfetto::TrackKind;
    use serde_json::{json, Value};
    let us = |ns: u64| ns as f64 / 1000.0;
    let ids = chrome::track_ids(p);
    let mut ev: Vec<Value> = Vec::new();
    for t in &p.tracks {
        let (pid, tid) = ids[&t.uuid];
        match t.kind {
            TrackKind::Process { .. } => ev.push(
                json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": t.name}}),
            ),
            TrackKind::Thread { .. } | TrackKind::Child => ev.push(
                json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": t.name}}),
            ),
            TrackKind::Counter => {}
        }
    }
    for s in &p.slices {
        let (pid, tid) = ids[&s.track];
        let args: serde_json::Map<String, Value> =
            s.args.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect();
        ev.push(json!({
            "ph": "X", "name": &*s.name, "cat": s.category, "pid": pid, "tid": tid,
            "ts": us(s.start_ns), "dur": us(s.end_ns - s.start_ns), "args": args,
        }));
        for f in &s.flows_out {
            ev.push(
                json!({"ph": "s", "name": "dep", "cat": "dep", "id": f, "pid": pid, "tid": tid,
                           "ts": us(s.start_ns)}),
            );
        }
        for f in &s.flows_in {
            ev.push(json!({"ph": "f", "bp": "e", "name": "dep", "cat": "dep", "id": f, "pid": pid,
                           "tid": tid, "ts": us(s.start_ns)}));
        }
    }
    let names: BTreeMap<u64, &perfetto::PlanTrack> = p.tracks.iter().map(|t| (t.uuid, t)).collect();
    for &(track, ts, v) in &p.counters {
        let (pid, _) = ids[&track];
        let t = names[&track];
        let key = match t.unit {
            perfetto::CounterUnit::TimeNs if t.name.starts_with("stall ") => "stall_ns",
            perfetto::CounterUnit::TimeNs => "ns",
            perfetto::CounterUnit::Count => "count",
            perfetto::CounterUnit::Bytes => "bytes",
        };
        ev.push(json!({"ph": "C", "name": t.name, "pid": pid, "ts": us(ts),
                       "args": {key: v}}));
    }
    json!({"traceEvents": ev, "displayTimeUnit": "ns"})
}

/// Runs whose traces the tests compare: the sample under both policies and a scaled run.
fn trace_runs() -> Vec<RunModel> {
    vec![
        sample::sample_run(LossPolicy::Block),
        sample::sample_run(LossPolicy::Drop),
        scaled_run(500),
    ]
}

#[test]
fn streamed_chrome_json_is_the_value_built_trace_byte_for_byte() {
    for run in trace_runs() {
        let p = perfetto::plan(&run);
        let mut streamed = Vec::new();
        chrome::write_plan(&mut streamed, &p).unwrap();
        let want = serde_json::to_vec(&reference_chrome(&p)).unwrap();
        assert_eq!(String::from_utf8(streamed).unwrap(), String::from_utf8(want).unwrap());
    }
    // An annotation repeated on one slice keeps its last value, as the map did.
    let mut p = perfetto::plan(&sample::sample_run(LossPolicy::Block));
    p.slices[0].args = [("b", 1), ("a", 2), ("b", 3)].into();
    let mut streamed = Vec::new();
    chrome::write_plan(&mut streamed, &p).unwrap();
    assert_eq!(streamed, serde_json::to_vec(&reference_chrome(&p)).unwrap());
}

/// A writer that records the size of every write it gets.
#[derive(Default)]
struct Writes {
    bytes: Vec<u8>,
    sizes: Vec<usize>,
}

impl io::Write for Writes {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sizes.push(buf.len());
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn traces_reach_the_writer_piece_by_piece() {
    let run = scaled_run(2_000);
    let p = perfetto::plan(&run);
    let opts = perfetto::EncodeOptions { intern_names: true };
    let mut w = Writes::default();
    perfetto::write_plan(&mut w, &p, opts).unwrap();
    assert_eq!(w.bytes, perfetto::encode_plan_with(&p, opts));
    // At least one write per packet, none larger than a packet: never a whole trace at once.
    assert!(w.sizes.len() >= 2 * p.slices.len() + p.tracks.len() + p.counters.len());
    assert!(*w.sizes.iter().max().unwrap() < 512, "{:?}", w.sizes.iter().max());
    // The Chrome JSON goes out in bounded pieces: a buffer of events at a time, never the trace.
    let mut w = Writes::default();
    chrome::write_plan(&mut w, &p).unwrap();
    let piece = crate::jsonw::FLUSH_BYTES + 4096;
    assert!(w.bytes.len() > 4 * piece, "{}", w.bytes.len());
    assert!(*w.sizes.iter().max().unwrap() < piece, "{:?}", w.sizes.iter().max());
    assert!(w.sizes.len() >= w.bytes.len() / piece, "{} writes", w.sizes.len());
}

/// Decodes a Perfetto trace and checks it is exactly `plan`, packet by packet and in order.
fn assert_trace_is_plan(bytes: &[u8], p: &perfetto::TracePlan, interned: bool) {
    use ferry_perfetto_proto::protos::{track_event::Type, Trace};
    use ferry_perfetto_proto::Message;
    use perfetto::TrackKind;
    let trace = Trace::decode(bytes).unwrap();
    let n = p.tracks.len() + 2 * p.slices.len() + p.counters.len();
    assert_eq!(trace.packet.len(), n);
    let mut packets = trace.packet.into_iter();
    for (i, t) in p.tracks.iter().enumerate() {
        let pk = packets.next().unwrap();
        assert_eq!(pk.trusted_packet_sequence_id, Some(perfetto::SEQUENCE_ID));
        assert_eq!(pk.sequence_flags.is_some(), i == 0, "only the first packet clears state");
        let td = pk.track_descriptor.unwrap();
        assert_eq!((td.uuid, td.parent_uuid), (Some(t.uuid), t.parent));
        match &t.kind {
            TrackKind::Process { pid } => {
                let pd = td.process.unwrap();
                assert_eq!((pd.pid, pd.process_name.as_deref()), (Some(*pid), Some(&*t.name)));
            }
            TrackKind::Thread { pid, tid } => {
                let th = td.thread.unwrap();
                assert_eq!((th.pid, th.tid), (Some(*pid), Some(*tid)));
                assert_eq!(th.thread_name.as_deref(), Some(&*t.name));
            }
            TrackKind::Child => assert_eq!(td.name.as_deref(), Some(&*t.name)),
            TrackKind::Counter => {
                assert_eq!(td.name.as_deref(), Some(&*t.name));
                assert!(td.counter.is_some());
            }
        }
    }
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    for s in &p.slices {
        let b = packets.next().unwrap();
        assert_eq!(b.timestamp, Some(s.start_ns));
        if let Some(id) = &b.interned_data {
            for en in &id.event_names {
                assert!(names.insert(en.iid.unwrap(), en.name.clone().unwrap()).is_none());
            }
        }
        let ev = b.track_event.unwrap();
        assert_eq!(Type::try_from(ev.r#type.unwrap()).unwrap(), Type::SliceBegin);
        assert_eq!(ev.track_uuid, Some(s.track));
        assert_eq!(ev.categories, vec![s.category.to_string()]);
        let name = match ev.name_iid {
            Some(iid) => names[&iid].clone(),
            None => ev.name.clone().unwrap(),
        };
        assert_eq!((name, ev.name_iid.is_some()), (s.name.to_string(), interned));
        let args: Vec<(String, u64)> = ev
            .debug_annotations
            .iter()
            .map(|a| (a.name.clone().unwrap(), a.uint_value.unwrap()))
            .collect();
        let want: Vec<(String, u64)> = s.args.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(args, want);
        assert_eq!(
            (&ev.flow_ids[..], &ev.terminating_flow_ids[..]),
            (&s.flows_out[..], &s.flows_in[..])
        );
        let e = packets.next().unwrap();
        assert_eq!(e.timestamp, Some(s.end_ns));
        let ev = e.track_event.unwrap();
        assert_eq!(Type::try_from(ev.r#type.unwrap()).unwrap(), Type::SliceEnd);
        assert_eq!(ev.track_uuid, Some(s.track));
    }
    for &(track, ts, v) in &p.counters {
        let c = packets.next().unwrap();
        assert_eq!(c.timestamp, Some(ts));
        let ev = c.track_event.unwrap();
        assert_eq!(Type::try_from(ev.r#type.unwrap()).unwrap(), Type::Counter);
        assert_eq!((ev.track_uuid, ev.counter_value), (Some(track), Some(v)));
    }
}

#[test]
fn streamed_perfetto_bytes_decode_to_the_plan() {
    for run in trace_runs() {
        let p = perfetto::plan(&run);
        for intern_names in [false, true] {
            let mut out = Vec::new();
            perfetto::write_plan(&mut out, &p, perfetto::EncodeOptions { intern_names }).unwrap();
            assert_trace_is_plan(&out, &p, intern_names);
        }
    }
}

/// Top-level keys of a JSON object in file order (and, under `args`, each element's keys).
#[derive(Debug, Default)]
struct Keys {
    top: Vec<String>,
    args: Vec<Vec<String>>,
}

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Keys;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Keys, A::Error> {
                let mut k = Keys::default();
                while let Some(key) = m.next_key::<String>()? {
                    if key == "args" {
                        let v: Vec<Keys> = m.next_value()?;
                        k.args = v.into_iter().map(|a| a.top).collect();
                    } else {
                        m.next_value::<serde::de::IgnoredAny>()?;
                    }
                    k.top.push(key);
                }
                Ok(k)
            }
        }
        d.deserialize_map(V)
    }
}

#[test]
fn files_keep_the_original_key_order() {
    let run = sample::sample_run(LossPolicy::Block);
    let loss = &run.loss;
    let keys = |bytes: Vec<u8>| serde_json::from_slice::<Keys>(&bytes).unwrap();
    let mut sw = Vec::new();
    write_swimlane(&mut sw, &run.meta, &run.kernels, run.swimlane.as_ref().unwrap(), loss).unwrap();
    let swimlane = [
        "chip_swimlane_level",
        "metadata",
        "aicore_tasks",
        "aicpu_tasks",
        "aicpu_scheduler_phases",
        "aicpu_orchestrator_phases",
        "dfx",
    ];
    assert_eq!(keys(sw).top, swimlane);
    let mut deps = Vec::new();
    write_deps(&mut deps, run.deps.as_ref().unwrap(), loss).unwrap();
    assert_eq!(keys(deps).top, ["tasks", "tensors", "edges", "dfx"]);
    let mut args = Vec::new();
    write_args_json(&mut args, run.args.as_ref().unwrap(), loss).unwrap();
    assert!(!args.contains(&b'\n'), "compact JSON");
    let k = keys(args);
    let top = [
        "run_dir",
        "bin_format",
        "dump_args_level",
        "total_args",
        "before_dispatch",
        "after_completion",
        "input_args",
        "output_args",
        "inout_args",
        "truncated_args",
        "dropped_records",
        "dropped_overwrite",
        "bin_file",
        "args",
        "dfx",
    ];
    assert_eq!(k.top, top);
    let tensor = [
        "task_id",
        "func_id",
        "arg_index",
        "role",
        "stage",
        "kind",
        "dtype",
        "is_contiguous",
        "shape",
        "strides",
        "start_offset",
        "numel",
        "bin_offset",
        "bin_size",
        "truncated",
        "overwritten",
    ];
    assert_eq!(k.args[0], tensor);
    let mut scalar: Vec<&str> = tensor.to_vec();
    scalar.insert(7, "value");
    assert_eq!(k.args[2], scalar);
}

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-write-all-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn write_all_reports_what_is_on_disk() {
    let d = tmpdir("report");
    let run = scaled_run(3_000);
    let r = write_all(&d, &run, &WriteOptions { chrome: true, ..WriteOptions::default() }).unwrap();
    let names: Vec<String> =
        r.paths().map(|p| p.strip_prefix(&d).unwrap().to_string_lossy().into_owned()).collect();
    let want = [
        SWIMLANE_FILE,
        "name_map_run.json",
        PMU_FILE,
        PMU_LOSS_FILE,
        DEPS_FILE,
        "args_dump/args.bin",
        "args_dump/args_dump.json",
        "scope_stats/scope_stats.jsonl",
        PERFETTO_FILE,
        CHROME_FILE,
    ];
    assert_eq!(names, want);
    for f in &r.files {
        assert_eq!(f.bytes, std::fs::metadata(&f.path).unwrap().len(), "{}", f.path.display());
    }
    assert_eq!(r.bytes, r.files.iter().map(|f| f.bytes).sum::<u64>());
    // Every record counted once, in the file that holds it.
    assert_eq!(r.records, run.record_count());
    let in_files: u64 = r.files[..8].iter().map(|f| f.records).sum();
    assert_eq!(in_files, r.records);
    let sw = run.swimlane.as_ref().unwrap();
    let phases: usize = sw.sched_phases.iter().map(Vec::len).sum::<usize>()
        + sw.orch_phases.iter().map(Vec::len).sum::<usize>();
    let swimlane = sw.aicore_tasks.len() + sw.aicpu_tasks.len() + phases;
    assert_eq!(r.files[0].records, swimlane as u64);
    assert_eq!(r.files[1].records, 0, "the name map holds no records");
    assert_eq!(r.files[2].records, run.pmu.as_ref().unwrap().rows.len() as u64);
    let t = r.trace.clone().unwrap();
    // The trace is the plan without the tracks that hold nothing, which it names.
    let mut p = perfetto::plan(&run);
    let empty = p.prune_empty();
    assert_eq!(
        (t.tracks, t.slices, t.counters, &t.empty),
        (p.tracks.len(), p.slices.len(), p.counters.len(), &empty)
    );
    assert!(r.bytes_per_record() > 0.0 && r.records_per_sec() > 0.0);
    // The traces are the in-memory encoders' bytes.
    let pb = std::fs::read(d.join(PERFETTO_FILE)).unwrap();
    assert_eq!(pb, perfetto::write_trace(&run));
    assert_eq!(std::fs::read(d.join(CHROME_FILE)).unwrap(), chrome::write_chrome_trace(&run));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn traces_from_the_files_equal_traces_from_the_model() {
    // Collection lists lanes in its own order; the files hold them by subsystem.
    let mut shuffled = scaled_run(400);
    shuffled.loss.lanes.reverse();
    let runs = [
        ("sample", sample::sample_run(LossPolicy::Drop)),
        ("scaled", scaled_run(400)),
        ("shuffled", shuffled),
    ];
    for (tag, run) in runs {
        let (a, b) = (tmpdir(&format!("model-{tag}")), tmpdir(&format!("files-{tag}")));
        let all = WriteOptions { chrome: true, ..WriteOptions::default() };
        write_all(&a, &run, &all).unwrap();
        // `ferry trace DIR`: read the files back, write only the traces, elsewhere.
        let back = read_run(&a).unwrap();
        let only = WriteOptions { files: false, traces: true, chrome: true, progress: None };
        let r = write_all(&b, &back, &only).unwrap();
        assert_eq!(r.files.len(), 2);
        assert_eq!(r.files_elapsed, std::time::Duration::ZERO);
        for f in [PERFETTO_FILE, CHROME_FILE] {
            assert_eq!(std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap(), "{f}");
        }
        let files_only = WriteOptions { traces: false, ..WriteOptions::default() };
        let r = write_all(&b, &back, &files_only).unwrap();
        assert!(r.trace.is_none() && !r.paths().any(|p| p.ends_with(CHROME_FILE)));
        std::fs::remove_dir_all(&a).unwrap();
        std::fs::remove_dir_all(&b).unwrap();
    }
}

#[test]
fn progress_covers_every_file_and_ends_at_the_total() {
    let d = tmpdir("progress");
    let run = scaled_run(20_000);
    let seen = std::cell::RefCell::new(Vec::new());
    let cb = |p: WriteProgress| seen.borrow_mut().push(p);
    let opts = WriteOptions { chrome: true, progress: Some(&cb), ..WriteOptions::default() };
    let r = write_all(&d, &run, &opts).unwrap();
    let seen = seen.into_inner();
    for phase in [WritePhase::Files, WritePhase::Traces] {
        let v: Vec<&WriteProgress> = seen.iter().filter(|p| p.phase == phase).collect();
        assert!(v.windows(2).all(|w| w[0].done <= w[1].done), "{phase:?} goes backwards");
        let last = v.last().unwrap();
        assert_eq!(last.done, last.total, "{phase:?} ends short");
        let files: Vec<&str> = v.iter().map(|p| p.file).collect();
        let is_trace =
            |f: &WrittenFile| f.path.ends_with(PERFETTO_FILE) || f.path.ends_with(CHROME_FILE);
        for f in r.files.iter().filter(|f| is_trace(f) == (phase == WritePhase::Traces)) {
            let name = f.path.file_name().unwrap().to_str().unwrap();
            let name = if is_name_map_file(name) { NAME_MAP_LABEL } else { name };
            assert!(files.contains(&name), "{name} not reported in {phase:?}");
        }
        // Reports come per chunk, not only per file.
        assert!(v.len() > 12, "{phase:?}: {} reports", v.len());
    }
    assert_eq!(seen.iter().find(|p| p.phase == WritePhase::Files).unwrap().total, r.records);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Every file `dir` holds, relative to it.
fn listing(dir: &std::path::Path) -> Vec<String> {
    fn walk(root: &std::path::Path, d: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, dir, &mut v);
    v.sort();
    v
}

/// A subsystem whose file cannot be written fails the phase with that file's error; no temp
/// file stays behind, every file is either its old content or complete, and once the cause is
/// gone the same call succeeds.
#[test]
fn write_all_fails_on_one_subsystem_and_leaves_the_directory_whole() {
    let d = tmpdir("fails");
    let run = scaled_run(2_000);
    std::fs::create_dir_all(&d).unwrap();
    // A regular file where the ArgsDump directory goes: its files cannot be created.
    std::fs::write(d.join(ARGS_DIR), b"in the way").unwrap();
    std::fs::write(d.join(DEPS_FILE), b"old").unwrap();
    let e = write_all(&d, &run, &WriteOptions::default()).unwrap_err();
    assert!(e.to_string().contains(ARGS_DIR), "{e}");
    let left = listing(&d);
    assert!(!left.iter().any(|f| f.contains(".tmp.")), "temp files left: {left:?}");
    let deps = std::fs::read(d.join(DEPS_FILE)).unwrap();
    assert_eq!(std::fs::read(d.join(ARGS_DIR)).unwrap(), b"in the way");
    std::fs::remove_file(d.join(ARGS_DIR)).unwrap();
    let r = write_all(&d, &run, &WriteOptions::default()).unwrap();
    assert_eq!(r.files.len(), 9, "the files and the Perfetto trace");
    // DepGen's file was either not started (the failure came first) or written whole.
    let fresh = std::fs::read(d.join(DEPS_FILE)).unwrap();
    assert!(deps == b"old" || deps == fresh, "deps.json half written");
    assert_ne!(fresh, b"old");
    std::fs::remove_dir_all(&d).unwrap();
}

/// Both threads take subsystems: with the traces off, the files phase still splits over two
/// threads, and the report lists the files by subsystem whichever thread wrote them.
#[test]
fn files_only_report_lists_files_by_subsystem() {
    let d = tmpdir("files-only");
    let run = scaled_run(3_000);
    let seen = std::cell::RefCell::new(Vec::new());
    let cb = |p: WriteProgress| seen.borrow_mut().push(p);
    let opts = WriteOptions { files: true, traces: false, chrome: false, progress: Some(&cb) };
    let r = write_all(&d, &run, &opts).unwrap();
    let names: Vec<String> =
        r.paths().map(|p| p.strip_prefix(&d).unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(
        names,
        [
            SWIMLANE_FILE,
            "name_map_run.json",
            PMU_FILE,
            PMU_LOSS_FILE,
            DEPS_FILE,
            "args_dump/args.bin",
            "args_dump/args_dump.json",
            "scope_stats/scope_stats.jsonl",
        ]
    );
    assert_eq!(r.files.iter().map(|f| f.records).sum::<u64>(), run.record_count());
    let seen = seen.into_inner();
    assert!(seen.iter().all(|p| p.phase == WritePhase::Files));
    assert!(seen.windows(2).all(|w| w[0].done <= w[1].done), "progress goes backwards");
    assert_eq!(seen.last().unwrap().done, run.record_count());
    std::fs::remove_dir_all(&d).unwrap();
}
