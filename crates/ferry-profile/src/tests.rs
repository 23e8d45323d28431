//! Records → files → views, on the synthetic sample run.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use super::sample::{sample_run, sample_task, SAMPLE_STALLED_LANE};
use super::trace_tests::decode;
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
        a.args.rows_mut().sort_by_key(|x| (x.task_id, x.stage != "before_dispatch", x.arg_index));
    }
    run
}

#[test]
fn every_file_round_trips_under_both_policies() {
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
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
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
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
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
    let d = tmpdir("abort");
    let run = sample_run(LossPolicy::Block);
    write_run(&d, &run).unwrap();
    let before = fs::read(d.join(PMU_FILE)).unwrap();
    // A row whose counters do not match the header fails mid-file (after the header and the
    // first rows were written to the temp file).
    let mut bad = run.clone();
    let c = &mut bad.pmu.as_mut().unwrap().rows[3].counters;
    *c = c[..c.len() - 1].iter().copied().collect();
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
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
    let d = tmpdir("empty");
    assert!(matches!(read_run(&d), Err(OutputError::Empty(_))));
    fs::write(d.join(DEPS_FILE), b"{\"tasks\": [").unwrap();
    assert!(matches!(read_run(&d), Err(OutputError::Json { .. })));
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn joined_tasks_are_ordered_and_complete_under_block() {
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
    let run = sample_run(LossPolicy::Block);
    let tasks = run.tasks();
    assert_eq!(tasks.len(), 6);
    assert!(tasks.iter().all(JoinedTask::is_ordered));
    assert!(tasks.iter().all(|t| t.dispatch.is_some() && t.func_id.is_some()));
    let drop = sample_run(LossPolicy::Drop);
    assert_eq!(drop.tasks().iter().filter(|t| t.dispatch.is_none()).count(), 1);
}

#[test]
fn report_lists_kernels_stalled_lanes_and_losses() {
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
    let block = views::report(&sample_run(LossPolicy::Block));
    for k in ["matmul", "add", "relu"] {
        assert!(block.contains(k), "{block}");
    }
    let row = block
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{SAMPLE_STALLED_LANE} ")))
        .unwrap_or_else(|| panic!("no row of the stalled lane: {block}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    // lane, thread, produced, collected, dropped, stall_us, waits, longest_us, reconcile
    assert_eq!((cols[1], cols[5], cols[8]), ("0", "39.600", "ok"), "{row}");
    assert!(block.contains("dropped 0; reconcile ok"), "{block}");
    assert!(block.contains("0 violations"));
    assert!(
        block.contains(
            "1 task(s) were seen finishing while their scheduler thread's lane was \
             stalled (finish, latency and tail may be inflated; start and end stay exact): \
             0x100000004"
        ),
        "{block}"
    );
    let drop = views::report(&sample_run(LossPolicy::Drop));
    assert!(drop.contains("policy Drop"), "{drop}");
    assert!(drop.contains("dropped 2; reconcile ok"), "{drop}");
    assert!(drop.contains("pmu/thread1"), "{drop}");
    assert!(drop.contains("1 AICore tasks have no AICPU dispatch/finish record"), "{drop}");
}

#[test]
fn kernel_stats_split_head_overhead() {
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
    let run = sample_run(LossPolicy::Block);
    let ks = views::kernel_stats(&run);
    let mm = ks.iter().find(|k| k.name == "matmul").unwrap();
    // T1: dispatch 100, receive 106, start 110, end 400, finish 420.
    assert_eq!((mm.count, mm.exec, mm.latency), (1, 290, 320));
    assert_eq!((mm.head_propagation, mm.head_setup, mm.tail), (6, 4, 20));
}

#[test]
fn html_views_are_self_contained() {
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
    let run = sample_run(LossPolicy::Block);
    for html in [views::swimlane_html(&run), views::scopes_html(run.scopes.as_ref().unwrap())] {
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("http://") && !html.contains("https://"), "external reference");
        assert!(!html.contains("<script src") && !html.contains("<link"));
        assert!(!html.contains("fetch(") && !html.contains("XMLHttpRequest"));
    }
    let sw = views::swimlane_html(&run);
    assert!(sw.contains("<canvas"));
    assert!(views::scopes_html(run.scopes.as_ref().unwrap()).contains("<svg"));
    assert!(sw.contains("aicpu_task/core1 stall"));
    assert!(sw.contains("core2 (aiv) overlap 1"));
    // A failed run's page says so in its bar, escaped; a good run's says nothing of it.
    assert!(!sw.contains("fv-failed\""), "no failure on a good run's page");
    let failed = views::swimlane_html_of(&run, Some("task 3: <wrong> result"));
    let bar = &failed[failed.find("<div id=\"fv-bar\">").unwrap()..failed.find("<input").unwrap()];
    assert!(
        bar.contains("the run failed (its profile is complete): task 3: &lt;wrong&gt; result"),
        "{bar}"
    );
    let sc = views::scopes_html(run.scopes.as_ref().unwrap());
    assert!(sc.contains("class=\"danger\""), "{sc}");
    assert!(sc.contains("0 unmatched"));
}

#[test]
fn scope_usage_pairs_begin_and_end() {
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
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
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
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
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
    use crate::collect::{add_aicore_records, LaneRecords};
    use ferry_abi::arch::A5;
    use ferry_abi::records::AicoreTaskRecord;
    use ferry_dfx::clock::SteadyClock;
    use ferry_dfx::mem::MirroredMemory;
    use ferry_dfx::{DfxBuilder, DfxTransport};
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

/// A collector that takes its time with every buffer (a host falling behind).
struct SlowCollector(collect::LaneRecords<ferry_abi::records::AicoreTaskRecord>);

impl ferry_dfx::CollectSink<ferry_abi::records::AicoreTaskRecord> for SlowCollector {
    fn on_buffer_collected(
        &mut self,
        b: &ferry_dfx::CollectedBuffer<'_, ferry_abi::records::AicoreTaskRecord>,
    ) {
        std::thread::sleep(std::time::Duration::from_millis(2));
        self.0.on_buffer_collected(b);
    }
}

#[test]
fn shrunk_pool_stalls_are_intervals_on_the_starved_lane_only() {
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
    use ferry_abi::arch::A5;
    use ferry_abi::records::{AicoreTaskRecord, SWIMLANE_KIND_AICORE_TASK};
    use ferry_dfx::clock::SteadyClock;
    use ferry_dfx::device::STALL_RING;
    use ferry_dfx::mem::MirroredMemory;
    use ferry_dfx::{DfxBuilder, DfxTransport};
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

    // Report: the starved lane, its waits and the longest (each wait's interval is the trace's
    // stall slice, above); the other lane is not listed as stalled.
    let text = views::report(&run);
    let row_of = |lane: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{lane} ")))
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
    };
    let row = row_of("aicore_task/core0").unwrap_or_else(|| panic!("no row: {text}"));
    let longest = waits.iter().map(|w| w[1] - w[0]).max().unwrap();
    let hz = run.meta.clock_freq_hz as f64;
    assert_eq!(row[6], waits.len().to_string(), "{text}");
    assert_eq!(row[7], format!("{:.3}", longest as f64 * 1e6 / hz), "{text}");
    let lane = crate::analysis::report(&run).stalls.lanes;
    assert_eq!(lane.len(), 1, "{lane:?}");
    assert_eq!((lane[0].waits, lane[0].longest_cycles), (waits.len() as u64, longest), "{lane:?}");
    assert!(row_of("aicore_task/core1").is_none(), "{text}");
}

/// An original runtime's directory (no `kernel_names` in the records) with a hand-written name
/// map: the analyses label kernels from the map, as the original tools do; without the map
/// they fall back to `func<N>`.
#[test]
fn analyses_label_kernels_from_the_name_map() {
    let _bound = ferry_watchdog::bound("the DFX transport's threads");
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
