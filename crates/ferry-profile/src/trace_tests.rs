//! Records → traces: the Perfetto and Chrome traces decoded independently of their writers
//! (the published Perfetto schema, serde_json) and compared with the records they come from.

use std::collections::{BTreeMap, BTreeSet};

use ferry_perfetto_proto::protos::{self as perfetto_schema, track_event::Type, Trace};
use ferry_perfetto_proto::Message;

use super::sample::{sample_run, SAMPLE_STALLED_LANE};
use super::*;

/// A decoded slice: name, start, end, flows out, flows in.
pub(super) type Sl = (String, u64, u64, Vec<u64>, Vec<u64>);
/// An open slice: name, start, flows out, flows in.
type Open = (String, u64, Vec<u64>, Vec<u64>);

/// Decoded view of a trace: tracks by uuid, and the slices per track as (name, start, end).
pub(super) struct Decoded {
    pub(super) tracks: BTreeMap<u64, perfetto_schema::TrackDescriptor>,
    pub(super) slices: BTreeMap<u64, Vec<Sl>>,
    counters: BTreeMap<u64, Vec<(u64, i64)>>,
}

pub(super) fn decode(bytes: &[u8]) -> Decoded {
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

        // A stall counter track per lane; the stalled lane's stall is a slice under its AICPU
        // thread.
        let counters: Vec<&perfetto_schema::TrackDescriptor> = d
            .tracks
            .values()
            .filter(|t| t.counter.is_some() && t.parent_uuid == Some(perfetto::UUID_LANES))
            .collect();
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

        // PMU: per core and counter, each task's value from its start to its end. A counter
        // holds its value until its next sample (only changes are written): its value at a
        // time is its last sample at or before it.
        let at = |v: &[(u64, i64)], ts: u64| v.iter().rev().find(|c| c.0 <= ts).map(|c| c.1);
        let pmu = run.pmu.as_ref().unwrap();
        for r in &pmu.rows {
            let t = sw.aicore_tasks.iter().find(|t| t.task_token_raw == r.task_id).unwrap();
            let total = &d.counters[&perfetto::uuid_pmu(r.core_id, 0)];
            assert_eq!(at(total, m.cycles_to_ns(t.start)), Some(r.pmu_total_cycles as i64));
            let first = &d.counters[&perfetto::uuid_pmu(r.core_id, 1)];
            assert_eq!(at(first, m.cycles_to_ns(t.start)), Some(r.counters[0] as i64));
        }
        for v in d.counters.values() {
            assert!(v.windows(2).all(|w| w[0].1 != w[1].1), "a repeated counter value: {v:?}");
        }
        let pmu_track = &d.tracks[&perfetto::uuid_pmu(pmu.rows[0].core_id, 1)];
        assert_eq!(pmu_track.parent_uuid, Some(perfetto::UUID_PMU));
        let name = format!("core{} {}", pmu.rows[0].core_id, pmu.counter_names[0]);
        assert_eq!(pmu_track.name.as_deref(), Some(&*name));
        // No PMU track for a core without PMU rows.
        let pmu_cores: BTreeSet<u32> = pmu.rows.iter().map(|r| r.core_id).collect();
        for c in 0..m.num_cores() as u32 {
            assert_eq!(d.tracks.contains_key(&perfetto::uuid_pmu(c, 0)), pmu_cores.contains(&c));
        }

        // Scope occupancy: the task window's head − tail at each record, in record order.
        let sc = run.scopes.as_ref().unwrap();
        let ring = sc.records[0].ring as u32;
        let tw: Vec<i64> = d.counters[&perfetto::uuid_scope(ring, 0)].iter().map(|c| c.1).collect();
        let mut want: Vec<i64> = sc
            .records
            .iter()
            .filter(|r| r.ring as u32 == ring)
            .map(|r| r.task_window_end - r.task_window_start)
            .collect();
        want.dedup();
        assert_eq!(tw, want);
        let times = perfetto::scope_record_times(&run, &run.tasks());
        assert_eq!(times.len(), sc.records.len());
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "scope times go backwards: {times:?}");

        // Loss accounting: one slice per lane with its counts, and the totals.
        for (i, l) in perfetto::lanes_in_file_order(&run).into_iter().enumerate() {
            let u = perfetto::uuid_lane_loss(i as u32);
            assert_eq!(d.tracks[&u].name.as_deref(), Some(&*format!("loss {}", l.lane)));
            assert_eq!(d.slices[&u].len(), 1);
        }
        let plan = perfetto::plan(&run);
        let lane0 = plan.slices.iter().find(|s| s.track == perfetto::uuid_lane_loss(0)).unwrap();
        let l0 = perfetto::lanes_in_file_order(&run)[0];
        assert!(lane0.args.contains(&("produced", l0.produced)));
        assert!(lane0.args.contains(&("dropped", l0.dropped)));
        let (p, c, dr) = run.loss.totals();
        let totals = &d.slices[&perfetto::UUID_LOSS_TOTALS];
        assert_eq!(totals[0].0, format!("produced {p}, collected {c}, dropped {dr}: reconciles"));
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
    // The kernels' slices (the run's summary slice aside).
    let xs: Vec<&serde_json::Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] != "run")
        .collect();
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
        // A kernel slice and a dispatch → finish slice per task, and the run's summary.
        proptest::prop_assert_eq!(by_tid.values().map(Vec::len).sum::<usize>(), 2 * tasks.len() + 1);
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
