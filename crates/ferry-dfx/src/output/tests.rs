//! Records → files → views, on the synthetic sample run.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::PathBuf;

use ferry_perfetto_proto::protos::{self as perfetto_schema, track_event::Type, Trace};
use ferry_perfetto_proto::Message;

use super::sample::{sample_run, sample_task, SAMPLE_STALLED_LANE};
use super::*;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-output-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// The args as the export writes them (sorted), so a read-back compares equal.
fn normalised(mut run: RunModel) -> RunModel {
    if let Some(a) = &mut run.args {
        a.args.sort_by_key(|x| (x.task_id, x.stage != "before_dispatch", x.arg_index));
    }
    run
}

#[test]
fn every_file_round_trips_under_both_policies() {
    for policy in [LossPolicy::Block, LossPolicy::Drop] {
        let d = tmpdir(&format!("rt-{policy:?}"));
        let run = normalised(sample_run(policy));
        let written = write_run(&d, &run).unwrap();
        for f in [
            SWIMLANE_FILE,
            PMU_FILE,
            PMU_LOSS_FILE,
            DEPS_FILE,
            "args_dump/args_dump.json",
            "args_dump/args.bin",
            "scope_stats/scope_stats.jsonl",
        ] {
            assert!(written.contains(&d.join(f)), "{f} not written");
        }
        let back = read_run(&d).unwrap();
        assert_eq!(back.swimlane, run.swimlane);
        assert_eq!(back.pmu, run.pmu);
        assert_eq!(back.deps, run.deps);
        assert_eq!(back.args, run.args);
        assert_eq!(back.scopes, run.scopes);
        assert_eq!(back.kernels, run.kernels);
        assert_eq!(back.meta, run.meta);
        let mut a = back.loss.lanes.clone();
        let mut b = run.loss.lanes.clone();
        a.sort_by(|x, y| x.lane.cmp(&y.lane));
        b.sort_by(|x, y| x.lane.cmp(&y.lane));
        assert_eq!(a, b);
        assert_eq!((back.loss.policy, back.loss.budget_cycles), (policy, run.loss.budget_cycles));
        fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn every_file_carries_its_loss_accounting() {
    let d = tmpdir("loss");
    let run = sample_run(LossPolicy::Drop);
    write_run(&d, &run).unwrap();
    let json = |p: &str| -> serde_json::Value {
        serde_json::from_slice(&fs::read(d.join(p)).unwrap()).unwrap()
    };
    let sw = json(SWIMLANE_FILE);
    assert_eq!(sw["dfx"]["policy"], "Drop");
    let stalled = sw["dfx"]["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lane"] == SAMPLE_STALLED_LANE)
        .unwrap();
    assert_eq!(
        (stalled["dropped"].as_u64(), stalled["stall_cycles"].as_u64()),
        (Some(1), Some(500))
    );
    assert_eq!(json(PMU_LOSS_FILE)["lanes"][1]["dropped"], 1);
    assert_eq!(json(DEPS_FILE)["dfx"]["lanes"][0]["lane"], "dep_gen/thread0");
    assert_eq!(json("args_dump/args_dump.json")["dfx"]["budget_cycles"], 500);
    let scopes = fs::read_to_string(d.join("scope_stats/scope_stats.jsonl")).unwrap();
    let header: serde_json::Value = serde_json::from_str(scopes.lines().next().unwrap()).unwrap();
    assert_eq!(header["version"], 6);
    assert_eq!(header["dfx"]["lanes"][0]["lane"], "scope_stats/thread0");
    // The CSV itself stays exactly the original format: header then one row per collected task.
    let csv = fs::read_to_string(d.join(PMU_FILE)).unwrap();
    assert!(csv.starts_with("thread_id,core_id,task_id,func_id,core_type,pmu_total_cycles,"));
    assert_eq!(csv.lines().count(), 1 + 5);
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_aborted_write_keeps_the_previous_file_whole() {
    let d = tmpdir("abort");
    let run = sample_run(LossPolicy::Block);
    write_run(&d, &run).unwrap();
    let before = fs::read(d.join(PMU_FILE)).unwrap();
    // A row whose counters do not match the header fails mid-file (after the header and the
    // first rows were written to the temp file).
    let mut bad = run.clone();
    bad.pmu.as_mut().unwrap().rows[3].counters.pop();
    let err = write_run(&d, &bad).unwrap_err();
    assert!(matches!(err, OutputError::Format { .. }), "{err}");
    assert_eq!(fs::read(d.join(PMU_FILE)).unwrap(), before);
    let leftovers: Vec<String> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn reading_an_empty_dir_is_a_typed_error() {
    let d = tmpdir("empty");
    assert!(matches!(read_run(&d), Err(OutputError::Empty(_))));
    fs::write(d.join(DEPS_FILE), b"{\"tasks\": [").unwrap();
    assert!(matches!(read_run(&d), Err(OutputError::Json { .. })));
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn joined_tasks_are_ordered_and_complete_under_block() {
    let run = sample_run(LossPolicy::Block);
    let tasks = run.tasks();
    assert_eq!(tasks.len(), 6);
    assert!(tasks.iter().all(JoinedTask::is_ordered));
    assert!(tasks.iter().all(|t| t.dispatch.is_some() && t.func_id.is_some()));
    let drop = sample_run(LossPolicy::Drop);
    assert_eq!(drop.tasks().iter().filter(|t| t.dispatch.is_none()).count(), 1);
}

/// A decoded slice: name, start, end, flows out, flows in.
type Sl = (String, u64, u64, Vec<u64>, Vec<u64>);
/// An open slice: name, start, flows out, flows in.
type Open = (String, u64, Vec<u64>, Vec<u64>);

/// Decoded view of a trace: tracks by uuid, and the slices per track as (name, start, end).
struct Decoded {
    tracks: BTreeMap<u64, perfetto_schema::TrackDescriptor>,
    slices: BTreeMap<u64, Vec<Sl>>,
    counters: BTreeMap<u64, Vec<(u64, i64)>>,
}

fn decode(bytes: &[u8]) -> Decoded {
    let trace = Trace::decode(bytes).unwrap();
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    let mut cleared = false;
    let mut d =
        Decoded { tracks: BTreeMap::new(), slices: BTreeMap::new(), counters: BTreeMap::new() };
    let mut open: BTreeMap<u64, Vec<Open>> = BTreeMap::new();
    for p in trace.packet {
        assert_eq!(p.trusted_packet_sequence_id, Some(perfetto::SEQUENCE_ID));
        if p.sequence_flags.unwrap_or(0) & 1 != 0 {
            cleared = true;
        }
        if let Some(id) = &p.interned_data {
            assert!(cleared, "interned data before the incremental state was cleared");
            for n in &id.event_names {
                assert!(
                    names.insert(n.iid.unwrap(), n.name.clone().unwrap()).is_none(),
                    "iid reused"
                );
            }
        }
        if let Some(td) = p.track_descriptor {
            assert!(d.tracks.insert(td.uuid.unwrap(), td).is_none(), "duplicate track uuid");
            continue;
        }
        let ev = p.track_event.expect("packet is a descriptor or an event");
        let track = ev.track_uuid.unwrap();
        assert!(d.tracks.contains_key(&track), "event on an undeclared track {track}");
        let ts = p.timestamp.unwrap();
        match Type::try_from(ev.r#type.unwrap()).unwrap() {
            Type::SliceBegin => open.entry(track).or_default().push((
                match ev.name_iid {
                    Some(iid) => {
                        assert_eq!(
                            p.sequence_flags,
                            Some(2),
                            "interned name without NEEDS_INCREMENTAL_STATE"
                        );
                        names[&iid].clone()
                    }
                    None => ev.name.unwrap(),
                },
                ts,
                ev.flow_ids,
                ev.terminating_flow_ids,
            )),
            Type::SliceEnd => {
                let (name, start, fo, fi) =
                    open.get_mut(&track).and_then(Vec::pop).expect("end without begin");
                assert!(start <= ts);
                d.slices.entry(track).or_default().push((name, start, ts, fo, fi));
            }
            Type::Counter => {
                d.counters.entry(track).or_default().push((ts, ev.counter_value.unwrap()))
            }
            other => panic!("unexpected event type {other:?}"),
        }
    }
    assert!(open.values().all(Vec::is_empty), "unterminated slices");
    d
}

/// All slices on `track` and on its descendant overlap tracks.
fn slices_under(d: &Decoded, track: u64) -> Vec<Sl> {
    let mut v: Vec<_> = d.slices.get(&track).cloned().unwrap_or_default();
    for (uuid, td) in &d.tracks {
        if td.parent_uuid == Some(track)
            && td.name.as_deref().is_some_and(|n| n.contains(" overlap "))
        {
            v.extend(d.slices.get(uuid).cloned().unwrap_or_default());
        }
    }
    v.sort_by_key(|s| (s.1, s.2));
    v
}

#[test]
fn interned_and_plain_names_decode_to_the_same_slices() {
    let run = sample_run(LossPolicy::Block);
    let plan = perfetto::plan(&run);
    let plain = perfetto::encode_plan(&plan);
    let interned = perfetto::write_trace(&run);
    assert!(interned.len() < plain.len() + 64);
    let (a, b) = (decode(&plain), decode(&interned));
    assert_eq!(a.slices, b.slices);
    assert_eq!(a.tracks, b.tracks);
    assert_eq!(a.counters, b.counters);
}

#[test]
fn perfetto_trace_has_exactly_the_tracks_and_slices_the_records_imply() {
    for policy in [LossPolicy::Block, LossPolicy::Drop] {
        let run = sample_run(policy);
        let d = decode(&perfetto::write_trace(&run));
        let sw = run.swimlane.as_ref().unwrap();
        let m = &run.meta;

        // One thread track per core and per AICPU thread, named after them.
        for c in 0..m.num_cores() as u32 {
            let td = &d.tracks[&perfetto::uuid_core(c)];
            let th = td.thread.as_ref().unwrap();
            assert_eq!(th.pid, Some(1));
            assert!(th.thread_name.as_deref().unwrap().starts_with(&format!("core{c} ")));
            // Exactly the AICore records of this core, at their converted times, named by kernel.
            let mut want: Vec<(String, u64, u64)> = sw
                .aicore_tasks
                .iter()
                .filter(|t| t.core == c)
                .map(|t| {
                    (
                        run.kernel_name(run.task_func(t.task_token_raw)),
                        m.cycles_to_ns(t.start),
                        m.cycles_to_ns(t.end),
                    )
                })
                .collect();
            want.sort_by_key(|w| (w.1, w.2));
            let got: Vec<(String, u64, u64)> = slices_under(&d, perfetto::uuid_core(c))
                .into_iter()
                .map(|s| (s.0, s.1, s.2))
                .collect();
            assert_eq!(got, want, "core {c}");
            // Scheduler view: exactly the joined dispatch→finish pairs.
            let n_cpu = sw.aicpu_tasks.iter().filter(|t| t.core == c).count();
            assert_eq!(slices_under(&d, perfetto::uuid_sched_view(c)).len(), n_cpu);
        }
        for (t, phases) in sw.sched_phases.iter().enumerate() {
            let got = slices_under(&d, perfetto::uuid_thread(t as u32));
            let names: Vec<&str> = got.iter().map(|s| s.0.as_str()).collect();
            let want: Vec<&str> = phases.iter().map(|p| p.kind.name()).collect();
            assert_eq!(names, want);
        }
        let submits = slices_under(&d, perfetto::uuid_orch(0));
        assert_eq!(submits.len(), sw.orch_phases[0].len());
        // One name for every submit, so a trace interns it once and a viewer groups them.
        assert!(submits.iter().all(|s| s.0 == "submit"), "{submits:?}");
        let plan = perfetto::plan(&run);
        let orch: Vec<_> =
            plan.slices.iter().filter(|s| s.track == perfetto::uuid_orch(0)).collect();
        let idx: Vec<u64> = orch
            .iter()
            .map(|s| s.args.iter().find(|a| a.0 == "submit_idx").map_or(u64::MAX, |a| a.1))
            .collect();
        let want: Vec<u64> = sw.orch_phases[0].iter().map(|p| u64::from(p.submit_idx)).collect();
        assert_eq!(idx, want, "each submit's index is an annotation");

        // Overlapping T5/T6 on core 2 went to an overlap child of core 2, never onto one track.
        for v in d.slices.values() {
            let mut v = v.clone();
            v.sort_by_key(|s| s.1);
            for w in v.windows(2) {
                assert!(w[0].2 <= w[1].1, "overlap on one track: {w:?}");
            }
        }

        // Dependency flows: each edge once, leaving the producer and ending at the consumer.
        let mut out_ids = BTreeSet::new();
        let mut in_ids = BTreeSet::new();
        for v in d.slices.values() {
            for s in v {
                out_ids.extend(s.3.iter().copied());
                in_ids.extend(s.4.iter().copied());
            }
        }
        assert_eq!(out_ids.len(), run.deps.as_ref().unwrap().edges.len());
        assert_eq!(out_ids, in_ids);

        // A counter track per lane; the stalled lane's stall is a slice under its AICPU thread.
        let counters: Vec<&perfetto_schema::TrackDescriptor> =
            d.tracks.values().filter(|t| t.counter.is_some()).collect();
        assert_eq!(counters.len(), run.loss.lanes.len());
        let (i, lane) =
            run.loss.lanes.iter().enumerate().find(|(_, l)| l.lane == SAMPLE_STALLED_LANE).unwrap();
        let stall_track = &d.tracks[&perfetto::uuid_lane_stalls(i as u32)];
        assert_eq!(stall_track.parent_uuid, Some(perfetto::uuid_thread(lane.thread)));
        let stall = &d.slices[&perfetto::uuid_lane_stalls(i as u32)];
        assert_eq!(stall.len(), 1);
        assert_eq!(stall[0].0, perfetto::STALL_SLICE_NAME);
        assert_eq!(stall[0].2 - stall[0].1, m.cycles_to_ns(lane.stall_cycles));
        let last = d.counters[&perfetto::uuid_lane_counter(i as u32)].last().unwrap().1;
        assert_eq!(last as u64, m.cycles_to_ns(lane.stall_cycles));
        let stalled_rows = d
            .tracks
            .values()
            .filter(|t| t.name.as_deref().is_some_and(|n| n.ends_with(" stall")))
            .count();
        assert_eq!(stalled_rows, run.loss.lanes.iter().filter(|l| !l.stalls.is_empty()).count());
    }
}

#[test]
fn chrome_trace_keeps_overlapping_slices_on_separate_tids() {
    // Three overlapping tasks on one core plus one after them.
    let mut run = RunModel::new(RunMeta::new("a5", 1_000_000_000, vec![CoreType::Aiv]));
    let mut sw = Swimlane::new(1);
    for (i, (s, e)) in [(100, 500), (200, 300), (250, 600), (700, 800)].into_iter().enumerate() {
        sw.aicore_tasks.push(AicoreTask {
            core: 0,
            task_token_raw: i as u64,
            reg_task_id: i as u32 + 1,
            start: s,
            end: e,
            receive_to_start: 0,
        });
    }
    run.swimlane = Some(sw);
    let v: serde_json::Value = serde_json::from_slice(&chrome::write_chrome_trace(&run)).unwrap();
    let xs: Vec<&serde_json::Value> =
        v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(xs.len(), 4, "no slice lost");
    let mut by_tid: BTreeMap<i64, Vec<(f64, f64)>> = BTreeMap::new();
    for x in &xs {
        assert_eq!(x["pid"], 1);
        let ts = x["ts"].as_f64().unwrap();
        by_tid
            .entry(x["tid"].as_i64().unwrap())
            .or_default()
            .push((ts, ts + x["dur"].as_f64().unwrap()));
    }
    assert_eq!(by_tid.len(), 3, "three concurrently active lanes");
    for v in by_tid.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in v.windows(2) {
            assert!(w[0].1 <= w[1].0, "overlap within one tid: {w:?}");
        }
    }
    // Every tid that carries slices is named.
    let named: BTreeSet<i64> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["tid"].as_i64().unwrap())
        .collect();
    assert!(by_tid.keys().all(|t| named.contains(t)));
    // Nanosecond clock: 100 cycles at 1 GHz = 0.1 us.
    assert!(xs.iter().any(|x| x["ts"].as_f64() == Some(0.1)));
}

#[test]
fn chrome_trace_of_the_sample_has_flows_and_stall_counters() {
    let run = sample_run(LossPolicy::Block);
    let v: serde_json::Value = serde_json::from_slice(&chrome::write_chrome_trace(&run)).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    let count = |ph: &str| ev.iter().filter(|e| e["ph"] == ph).count();
    let edges = run.deps.as_ref().unwrap().edges.len();
    assert_eq!((count("s"), count("f")), (edges, edges));
    assert!(ev
        .iter()
        .any(|e| e["ph"] == "C" && e["name"] == format!("stall {SAMPLE_STALLED_LANE} (ns)")));
    assert!(ev.iter().any(|e| e["ph"] == "X" && e["name"] == perfetto::STALL_SLICE_NAME));
}

#[test]
fn report_lists_kernels_stalled_lanes_and_losses() {
    let block = views::report(&sample_run(LossPolicy::Block));
    for k in ["matmul", "add", "relu"] {
        assert!(block.contains(k), "{block}");
    }
    assert!(
        block.contains(&format!("{SAMPLE_STALLED_LANE} (thread 0): stalled 39.600 us")),
        "{block}"
    );
    assert!(block.contains("dropped 0; reconcile ok"), "{block}");
    assert!(block.contains("0 violations"));
    assert!(block.contains("1 task(s) were seen finishing while"), "{block}");
    assert!(block.contains("task 0x0000000100000004 on core1 finish 2600"), "{block}");
    let drop = views::report(&sample_run(LossPolicy::Drop));
    assert!(drop.contains("policy Drop"), "{drop}");
    assert!(drop.contains("dropped 2; reconcile ok"), "{drop}");
    assert!(drop.contains("pmu/thread1"), "{drop}");
    assert!(drop.contains("1 AICore tasks have no AICPU dispatch/finish record"), "{drop}");
}

#[test]
fn kernel_stats_split_head_overhead() {
    let run = sample_run(LossPolicy::Block);
    let ks = views::kernel_stats(&run);
    let mm = ks.iter().find(|k| k.name == "matmul").unwrap();
    // T1: dispatch 100, receive 106, start 110, end 400, finish 420.
    assert_eq!((mm.count, mm.exec, mm.latency), (1, 290, 320));
    assert_eq!((mm.head_propagation, mm.head_setup, mm.tail), (6, 4, 20));
}

#[test]
fn html_views_are_self_contained() {
    let run = sample_run(LossPolicy::Block);
    for html in [views::swimlane_html(&run), views::scopes_html(run.scopes.as_ref().unwrap())] {
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("http://") && !html.contains("https://"), "external reference");
        assert!(!html.contains("<script src") && !html.contains("<link"));
        assert!(html.contains("<svg"));
    }
    let sw = views::swimlane_html(&run);
    assert!(sw.contains("aicpu_task/core1 stall"));
    assert!(sw.contains("core2 (aiv) overlap 1"));
    let sc = views::scopes_html(run.scopes.as_ref().unwrap());
    assert!(sc.contains("class=\"danger\""), "{sc}");
    assert!(sc.contains("0 unmatched"));
}

#[test]
fn scope_usage_pairs_begin_and_end() {
    let s = sample_run(LossPolicy::Block).scopes.unwrap();
    let (u, unmatched) = views::scope_usage(&s);
    assert_eq!((u.len(), unmatched), (2, 0));
    let inner = &u[0];
    assert_eq!(inner.site, "orch.cpp:90");
    assert_eq!(inner.task_window, (4, 3, 4));
    assert_eq!(views::risk_class(inner.worst()), "danger");
    let mut broken = s.clone();
    broken.records.remove(0);
    assert_eq!(views::scope_usage(&broken).1, 1);
}

#[test]
fn deps_and_dump_views() {
    let run = sample_run(LossPolicy::Block);
    let t = views::deps_text(&run);
    assert!(t.contains("6 tasks, 7 tensors, 4 edges (creator 2, explicit 1, tensormap 1)"), "{t}");
    assert!(t.contains("happens-before violations: 1"), "{t}"); // T5 ends after T6 starts
    let a = run.args.as_ref().unwrap();
    let all = views::dump_list(a, &views::DumpFilter::default());
    assert!(all.contains("3 of 3 args"), "{all}");
    assert!(all.contains("[1 2 3 4]"), "{all}");
    let f = views::DumpFilter { role: Some("output".into()), ..Default::default() };
    let out = views::dump_list(a, &f);
    assert!(out.contains("1 of 3 args") && out.contains("[2 4 6 8]"), "{out}");
    let d = tmpdir("export");
    let paths = views::dump_export(
        a,
        &views::DumpFilter { task: Some(sample_task(1)), ..Default::default() },
        &d,
    )
    .unwrap();
    assert_eq!(paths.len(), 4); // two tensors: .bin + .txt each
    let txt = fs::read_to_string(paths.iter().find(|p| p.extension().unwrap() == "txt").unwrap())
        .unwrap();
    assert!(txt.contains("values 1 2 3 4"), "{txt}");
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn records_through_the_transport_become_files() {
    use crate::clock::SteadyClock;
    use crate::mem::MirroredMemory;
    use crate::output::collect::{add_aicore_records, LaneRecords};
    use crate::{DfxBuilder, DfxTransport};
    use ferry_abi::arch::A5;
    use ferry_abi::records::AicoreTaskRecord;
    use std::sync::Arc;

    // Two AICore lanes (cores 0 and 1) on one ready queue, small buffers so several switch.
    let cfg = DfxBuilder::new(&A5)
        .ready_queues(1)
        .lane(0, ferry_abi::records::SWIMLANE_KIND_AICORE_TASK, 2)
        .lane(0, ferry_abi::records::SWIMLANE_KIND_AICORE_TASK, 2)
        .records_per_buffer(8)
        .build::<AicoreTaskRecord>()
        .unwrap();
    let mem = Arc::new(MirroredMemory::new(cfg.region_size(), 0x8000_0000_0000));
    let transport =
        DfxTransport::<AicoreTaskRecord>::new(cfg, mem, Arc::new(SteadyClock::new(A5.clock_hz)))
            .unwrap();
    let device = transport.device_region();
    let host = transport.start(|_shard| LaneRecords::<AicoreTaskRecord>::default());
    let mut w = device.writer::<AicoreTaskRecord>(0, &[0, 1]).unwrap();
    for i in 0..50u64 {
        let core = (i % 2) as usize;
        w.record(
            core,
            AicoreTaskRecord {
                start_time: 100 + 10 * i,
                end_time: 105 + 10 * i,
                task_token_raw: i,
                reg_task_id: (i / 2 + 1) as u32,
                receive_to_start_cycles: 1,
            },
        );
    }
    w.finish();
    let report = host.stop();
    assert!(report.is_reconciled());
    let lanes = LaneRecords::merge(report.sinks);

    let mut run = RunModel::new(RunMeta::new("a5", A5.clock_hz, vec![CoreType::Aiv; 2]));
    let mut sw = Swimlane::new(1);
    for (lane, recs) in &lanes {
        for b in recs.buffers() {
            add_aicore_records(&mut sw, *lane, b);
        }
    }
    run.swimlane = Some(sw);
    run.loss.lanes = report
        .lanes
        .iter()
        .map(|r| {
            LaneLoss::from_reconcile(
                r,
                Subsystem::ChipSwimlane,
                format!("aicore_task/core{}", r.lane),
                0,
                Some(r.lane),
            )
        })
        .collect();
    let d = tmpdir("transport");
    write_run(&d, &run).unwrap();
    let back = read_run(&d).unwrap();
    let tasks = back.tasks();
    assert_eq!(tasks.len(), 50, "every record exactly once");
    let ids: BTreeSet<u64> = tasks.iter().map(|t| t.task_id).collect();
    assert_eq!(ids.len(), 50);
    assert!(tasks.iter().all(|t| t.core == (t.task_id % 2) as u32));
    assert_eq!(back.loss.totals(), (50, 50, 0));
    fs::remove_dir_all(&d).unwrap();
}

fn random_run(tasks: &[(u32, u64, u64)]) -> RunModel {
    let mut run = RunModel::new(RunMeta::new(
        "a2a3",
        50_000_000,
        vec![CoreType::Aic, CoreType::Aiv, CoreType::Aiv],
    ));
    let mut sw = Swimlane::new(2);
    let mut reg = [0u32; 3];
    for (i, &(core, start, len)) in tasks.iter().enumerate() {
        reg[core as usize] += 1;
        sw.aicore_tasks.push(AicoreTask {
            core,
            task_token_raw: i as u64,
            reg_task_id: reg[core as usize],
            start: start + 1,
            end: start + 1 + len,
            receive_to_start: 0,
        });
        sw.aicpu_tasks.push(AicpuTask {
            core,
            reg_task_id: reg[core as usize],
            dispatch: start,
            finish: start + 2 + len,
        });
    }
    run.swimlane = Some(sw);
    run
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    #[test]
    fn traces_keep_every_slice_and_never_overlap_on_a_track(
        tasks in proptest::collection::vec((0u32..3, 0u64..2000, 0u64..400), 0..40),
    ) {
        let run = random_run(&tasks);
        // Perfetto: per core, exactly the records; nothing overlaps on one track.
        let d = decode(&perfetto::write_trace(&run));
        for c in 0..3u32 {
            let mut want: Vec<(u64, u64)> = tasks.iter().filter(|t| t.0 == c)
                .map(|t| (run.meta.cycles_to_ns(t.1 + 1), run.meta.cycles_to_ns(t.1 + 1 + t.2))).collect();
            want.sort_unstable();
            let got: Vec<(u64, u64)> = slices_under(&d, perfetto::uuid_core(c)).iter().map(|s| (s.1, s.2)).collect();
            proptest::prop_assert_eq!(got, want);
        }
        for v in d.slices.values() {
            let mut v = v.clone();
            v.sort_by_key(|s| (s.1, s.2));
            for w in v.windows(2) {
                proptest::prop_assert!(w[0].2 <= w[1].1);
            }
        }
        // Chrome: as many X events as slices in the plan, none overlapping within a tid.
        let v: serde_json::Value = serde_json::from_slice(&chrome::write_chrome_trace(&run)).unwrap();
        let mut by_tid: BTreeMap<(i64, i64), Vec<(f64, f64)>> = BTreeMap::new();
        for x in v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X") {
            let ts = x["ts"].as_f64().unwrap();
            by_tid.entry((x["pid"].as_i64().unwrap(), x["tid"].as_i64().unwrap()))
                .or_default().push((ts, ts + x["dur"].as_f64().unwrap()));
        }
        proptest::prop_assert_eq!(by_tid.values().map(Vec::len).sum::<usize>(), 2 * tasks.len());
        for v in by_tid.values_mut() {
            v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
            for w in v.windows(2) {
                proptest::prop_assert!(w[0].1 <= w[1].0 + 1e-9);
            }
        }
        // Files round-trip.
        let mut out = Vec::new();
        let sw = run.swimlane.as_ref().unwrap();
        write_swimlane(&mut out, &run.meta, &run.kernels, sw, &run.loss).unwrap();
        proptest::prop_assert_eq!(&read_swimlane(&out[..]).unwrap().2, sw);
    }
}

/// A collector that takes its time with every buffer (a host falling behind).
struct SlowCollector(collect::LaneRecords<ferry_abi::records::AicoreTaskRecord>);

impl crate::CollectSink<ferry_abi::records::AicoreTaskRecord> for SlowCollector {
    fn on_buffer_collected(
        &mut self,
        b: &crate::CollectedBuffer<'_, ferry_abi::records::AicoreTaskRecord>,
    ) {
        std::thread::sleep(std::time::Duration::from_millis(2));
        self.0.on_buffer_collected(b);
    }
}

#[test]
fn shrunk_pool_stalls_are_intervals_on_the_starved_lane_only() {
    use crate::clock::SteadyClock;
    use crate::device::STALL_RING;
    use crate::mem::MirroredMemory;
    use crate::{DfxBuilder, DfxTransport};
    use ferry_abi::arch::A5;
    use ferry_abi::records::{AicoreTaskRecord, SWIMLANE_KIND_AICORE_TASK};
    use std::sync::Arc;

    // Lane 0 (core 0) has a one-buffer pool: every switch waits at its pop gate until the slow
    // collector has handed the buffer back. Lane 1 (core 1) has a buffer for every switch and
    // room in its own ready queue, so it never waits.
    let cfg = DfxBuilder::new(&A5)
        .ready_queues(2)
        .ready_depth(8)
        .free_slots(8)
        .lane(0, SWIMLANE_KIND_AICORE_TASK, 1)
        .lane(1, SWIMLANE_KIND_AICORE_TASK, 8)
        .records_per_buffer(8)
        .build::<AicoreTaskRecord>()
        .unwrap();
    let mem = Arc::new(MirroredMemory::new(cfg.region_size(), 0x8000_0000_0000));
    let transport =
        DfxTransport::<AicoreTaskRecord>::new(cfg, mem, Arc::new(SteadyClock::new(A5.clock_hz)))
            .unwrap();
    let device = transport.device_region();
    let host = transport.start(|_shard| SlowCollector(Default::default()));
    let rec = |i: u64| AicoreTaskRecord {
        start_time: 100 + 10 * i,
        end_time: 105 + 10 * i,
        task_token_raw: i,
        reg_task_id: i as u32 + 1,
        receive_to_start_cycles: 1,
    };
    let mut w1 = device.writer::<AicoreTaskRecord>(1, &[1]).unwrap();
    for i in 0..40 {
        w1.record(0, rec(2 * i + 1));
    }
    let mut w0 = device.writer::<AicoreTaskRecord>(0, &[0]).unwrap();
    for i in 0..32 {
        w0.record(0, rec(2 * i));
    }
    let (s0, s1) = (w0.finish()[0], w1.finish()[0]);
    let report = host.stop();
    assert!(report.is_reconciled());
    assert_eq!(report.totals(), (72, 72, 0));

    // The starved lane logged each of its waits, each a proper interval, in time order.
    let starved = &report.lanes[0];
    let waits = starved.stalls.as_slice();
    assert!(s0.stall_waits >= 1, "{s0:?}");
    assert_eq!(starved.stalls.total, s0.stall_waits);
    assert_eq!(waits.len() as u64, s0.stall_waits.min(STALL_RING as u64));
    assert_eq!(starved.stalls.overwritten(), 0);
    assert!(waits.iter().all(|w| w[0] < w[1]), "{waits:?}");
    assert!(waits.windows(2).all(|p| p[0][1] <= p[1][0]), "{waits:?}");
    assert_eq!(waits.iter().map(|w| w[1] - w[0]).sum::<u64>(), starved.stall_cycles);
    assert!(waits.iter().all(|w| w[1] - w[0] <= starved.max_stall_cycles));
    // The lane with enough buffers never waited.
    assert_eq!((s1.stall_waits, s1.stall_cycles), (0, 0));
    assert!(report.lanes[1].stalls.as_slice().is_empty());
    assert_eq!(report.lanes[1].stall_cycles, 0);

    // The loss lines carry the intervals into the model.
    let mut run = RunModel::new(RunMeta::new("a5", A5.clock_hz, vec![CoreType::Aiv; 2]));
    let mut sw = Swimlane::new(1);
    let sinks = report.sinks.into_iter().map(|s| s.0);
    for (lane, recs) in &collect::LaneRecords::merge(sinks) {
        for b in recs.buffers() {
            collect::add_aicore_records(&mut sw, *lane, b);
        }
    }
    run.swimlane = Some(sw);
    run.loss.lanes = report
        .lanes
        .iter()
        .map(|r| {
            LaneLoss::from_reconcile(
                r,
                Subsystem::ChipSwimlane,
                format!("aicore_task/core{}", r.lane),
                r.lane,
                Some(r.lane),
            )
        })
        .collect();
    assert_eq!(run.loss.lanes[0].stalls, waits.to_vec());
    assert!(run.loss.lanes[1].stalls.is_empty());

    // Perfetto: one stall slice per wait on the starved lane's stall track, none elsewhere.
    let m = &run.meta;
    let d = decode(&perfetto::write_trace(&run));
    let track = &d.tracks[&perfetto::uuid_lane_stalls(0)];
    assert_eq!(track.name.as_deref(), Some("aicore_task/core0 stall"));
    let want: Vec<(String, u64, u64)> = waits
        .iter()
        .map(|w| {
            (perfetto::STALL_SLICE_NAME.to_string(), m.cycles_to_ns(w[0]), m.cycles_to_ns(w[1]))
        })
        .collect();
    let mut got: Vec<(String, u64, u64)> =
        d.slices[&perfetto::uuid_lane_stalls(0)].iter().map(|s| (s.0.clone(), s.1, s.2)).collect();
    got.sort_by_key(|s| s.1);
    assert_eq!(got, want);
    assert!(!d.tracks.contains_key(&perfetto::uuid_lane_stalls(1)));
    let stall_slices =
        d.slices.values().flatten().filter(|s| s.0 == perfetto::STALL_SLICE_NAME).count();
    assert_eq!(stall_slices, waits.len());

    // Chrome: the same slices, on the starved lane's own stall row.
    let v: serde_json::Value = serde_json::from_slice(&chrome::write_chrome_trace(&run)).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    let row = ev
        .iter()
        .find(|e| e["ph"] == "M" && e["args"]["name"] == "aicore_task/core0 stall")
        .expect("stall row of the starved lane");
    let stalls: Vec<&serde_json::Value> =
        ev.iter().filter(|e| e["ph"] == "X" && e["name"] == perfetto::STALL_SLICE_NAME).collect();
    assert_eq!(stalls.len(), waits.len());
    assert!(stalls.iter().all(|e| e["tid"] == row["tid"] && e["pid"] == row["pid"]));
    assert!(!ev.iter().any(|e| e["args"]["name"] == "aicore_task/core1 stall"));

    // Report: the starved lane, each of its waits; the other lane is not listed as stalled.
    let text = views::report(&run);
    assert!(text.contains("aicore_task/core0 (thread 0): stalled"), "{text}");
    assert!(text.contains(&format!("in {} wait(s)", waits.len())), "{text}");
    for w in waits {
        assert!(text.contains(&format!("[{}..{}]", w[0], w[1])), "{text}");
    }
    assert!(!text.contains("aicore_task/core1 (thread 1): stalled"), "{text}");
}

/// An original runtime's directory (no `kernel_names` in the records) with a hand-written name
/// map: the analyses label kernels from the map, as the original tools do; without the map
/// they fall back to `func<N>`.
#[test]
fn analyses_label_kernels_from_the_name_map() {
    let d = tmpdir("name-map");
    let mut run = sample_run(LossPolicy::Block);
    let names = run.kernels.clone();
    assert!(!names.is_empty());
    run.kernels.clear();
    write_run(&d, &run).unwrap();
    fs::remove_file(d.join(name_map_file(DEFAULT_CASE))).unwrap();
    let unnamed = open_run(&d, &Needs::REPORT).unwrap().run;
    assert!(unnamed.kernels.is_empty());
    let report = views::report(&unnamed);
    let (&id, name) = names.iter().next().unwrap();
    assert!(!report.contains(&format!("  {name} ")), "{report}");
    // The map the user wrote by hand, under another case name.
    let map = NameMap {
        level: NAME_MAP_LEVEL,
        orchestrator_name: None,
        callable_id_to_name: names.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
    };
    let mut bytes = Vec::new();
    write_name_map(&mut bytes, &map).unwrap();
    fs::write(d.join(name_map_file("TestCase_basic")), bytes).unwrap();
    let named = open_run(&d, &Needs::REPORT).unwrap().run;
    assert_eq!(named.kernels, names);
    assert_eq!(named.kernel_name(Some(id)), *name);
    assert!(views::report(&named).contains(&format!("  {name} ")));
    fs::remove_dir_all(&d).unwrap();
}
