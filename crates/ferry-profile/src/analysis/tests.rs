use super::super::deps::{DepEdge, DepTask, DepsGraph};
use super::super::model::{AicoreTask, AicpuTask, CoreType, RunMeta, RunModel, Swimlane};
use super::super::pmu::{PmuRow, PmuTable};
use super::super::sample::{sample_run, sample_task};
use super::super::LossPolicy;
use super::*;

/// One block: `(task, core, kernel, start, end)`.
type B = (u64, u32, i32, u64, u64);

/// A run of `blocks` on `cores` AIV cores at 1 GHz (a cycle is a nanosecond) with `edges`
/// (`pred → succ`) and kernels named `k<func>`.
fn run_of(cores: usize, blocks: &[B], edges: &[(u64, u64)]) -> RunModel {
    let mut run = RunModel::new(RunMeta::new("a5", 1_000_000_000, vec![CoreType::Aiv; cores]));
    let mut sw = Swimlane::new(2);
    let mut g = DepsGraph::default();
    for (i, &(task, core, func, start, end)) in blocks.iter().enumerate() {
        let reg = i as u32 + 1;
        sw.aicore_tasks.push(AicoreTask {
            core,
            task_token_raw: task,
            reg_task_id: reg,
            start,
            end,
            receive_to_start: 0,
        });
        sw.aicpu_tasks.push(AicpuTask { core, reg_task_id: reg, dispatch: start, finish: end });
        if !g.tasks.iter().any(|t| t.task_id == task) {
            g.tasks.push(DepTask {
                task_id: task,
                kernel_ids: [-1, func, -1],
                block_num: 1,
                ..Default::default()
            });
        }
        run.kernels.insert(func, format!("k{func}"));
    }
    g.edges = edges.iter().map(|&(p, s)| DepEdge::explicit(p, s)).collect();
    run.swimlane = Some(sw);
    run.deps = Some(g);
    run
}

fn ids(p: &StaticPath) -> Vec<String> {
    p.tasks.iter().map(|t| t.task_id.clone()).collect()
}

fn hex(v: &[u64]) -> Vec<String> {
    v.iter().map(|&i| task_hex(i)).collect()
}

/// A long light chain 1→2→3→4→5 (10 cycles each) beside a short heavy one 6→7 (100 each): by
/// count the long chain, by time the heavy one.
#[test]
fn static_path_by_count_and_by_time_choose_different_chains() {
    let mut b: Vec<B> = (1..=5).map(|i| (i, 0, 1, i * 10, i * 10 + 10)).collect();
    b.push((6, 1, 2, 0, 100));
    b.push((7, 1, 2, 100, 200));
    let run = run_of(2, &b, &[(1, 2), (2, 3), (3, 4), (4, 5), (6, 7)]);
    let count = static_path(&run, Weight::Count).unwrap().unwrap();
    assert_eq!(ids(&count), hex(&[1, 2, 3, 4, 5]));
    assert_eq!((count.length, count.length_ns), (5, None));
    let time = static_path(&run, Weight::Time).unwrap().unwrap();
    assert_eq!(ids(&time), hex(&[6, 7]));
    assert_eq!((time.length, time.length_ns), (200, Some(200)));
    assert_eq!(time.tasks[1].kernel, "k2");
    assert_eq!(time.tasks[1].duration_cycles, Some(100));
}

/// The path follows the heaviest predecessor at every join, not the first listed, and an edge
/// from the run's inputs (pred 0) or to a task the graph does not list is ignored.
#[test]
fn static_path_takes_the_heaviest_predecessor_at_a_join() {
    // 1 (10) → 3 (10); 2 (50) → 3; 3 → 4 (10).
    let b = [(1, 0, 1, 0, 10), (2, 1, 1, 0, 50), (3, 0, 1, 50, 60), (4, 0, 1, 60, 70)];
    let run = run_of(2, &b, &[(1, 3), (2, 3), (3, 4), (0, 1), (99, 4)]);
    let p = static_path(&run, Weight::Time).unwrap().unwrap();
    assert_eq!(ids(&p), hex(&[2, 3, 4]));
    assert_eq!(p.length, 70);
    // By count both heads tie: the one submitted first wins.
    let p = static_path(&run, Weight::Count).unwrap().unwrap();
    assert_eq!(ids(&p), hex(&[1, 3, 4]));
}

#[test]
fn a_cyclic_graph_is_an_error_not_a_path() {
    let b = [(1, 0, 1, 0, 10), (2, 0, 1, 10, 20), (3, 0, 1, 20, 30)];
    let run = run_of(1, &b, &[(1, 2), (2, 3), (3, 2)]);
    let e = static_path(&run, Weight::Count).unwrap_err();
    assert!(e.contains("cycle through 2 of its 3 tasks"), "{e}");
    let r = report(&run);
    assert!(r.critical_path.static_by_count.is_none());
    assert!(r.critical_path.notes.iter().any(|n| n.contains("cycle")), "{:?}", r.critical_path);
}

/// The observed walk blames the predecessor that finished last: a data wait for a dependency,
/// a core wait for the task before it on its core; compute and waits tile the makespan.
#[test]
fn observed_path_blames_the_last_finisher_and_tiles_the_makespan() {
    // Core 0: 1 [5, 20), 3 [40, 60); core 1: 2 [10, 35), 4 [70, 100).
    // 4 depends on 1 and 3 (3 ends last: data wait 10); 3 has no dependency and comes after
    // 1 on core 0 (core wait 20); 1 is first (front gap 0).
    let b = [(1, 0, 1, 5, 20), (2, 1, 2, 10, 35), (3, 0, 3, 40, 60), (4, 1, 4, 70, 100)];
    let run = run_of(2, &b, &[(1, 4), (3, 4)]);
    let o = observed_path(&run).unwrap();
    let got: Vec<(String, WaitKind, u64)> =
        o.tasks.iter().map(|t| (t.task_id.clone(), t.wait, t.wait_cycles)).collect();
    assert_eq!(
        got,
        [
            (task_hex(1), WaitKind::FrontGap, 0),
            (task_hex(3), WaitKind::Core, 20),
            (task_hex(4), WaitKind::Data, 10),
        ]
    );
    assert_eq!(o.makespan_cycles, 95);
    assert_eq!((o.compute_cycles, o.data_wait_cycles, o.core_wait_cycles), (15 + 20 + 30, 10, 20));
    assert_eq!(
        o.compute_cycles + o.data_wait_cycles + o.core_wait_cycles + o.front_gap_cycles,
        o.makespan_cycles
    );
    assert_eq!(o.tasks[2].after.as_deref(), Some(task_hex(3).as_str()));
}

/// A predecessor that ended after the task started (an ordering violation in the file) is not
/// blamed; the walk then starts the path with a front gap, and the tiling still holds.
#[test]
fn observed_path_skips_a_predecessor_that_overlaps() {
    let b = [(1, 0, 1, 0, 50), (2, 1, 2, 40, 60)];
    let run = run_of(2, &b, &[(1, 2)]);
    let o = observed_path(&run).unwrap();
    assert_eq!(o.tasks.len(), 1);
    assert_eq!((o.tasks[0].wait, o.front_gap_cycles), (WaitKind::FrontGap, 40));
    assert_eq!(o.compute_cycles + o.front_gap_cycles, o.makespan_cycles);
}

#[test]
fn sample_run_report_has_every_section() {
    let r = report(&sample_run(LossPolicy::Block));
    assert_eq!((r.run.tasks, r.run.blocks, r.run.cores), (6, 6, 3));
    assert_eq!((r.run.first_cycle, r.run.last_cycle), (100, 2600));
    let names: Vec<&str> = r.kernels.iter().map(|k| k.kernel.as_str()).collect();
    assert_eq!(names, ["relu", "add", "matmul"]); // exec 560, 330, 290
    assert!((r.kernels.iter().map(|k| k.exec_share).sum::<f64>() - 1.0).abs() < 1e-9);
    // Core 2 runs 3 [140, 260), 5 [310, 500) and 6 [450, 700): the overlap counts once.
    assert_eq!(r.cores[2].busy_cycles, 120 + 390);
    assert_eq!(r.cores[2].blocks, 3);
    let pmu = r.pmu.as_ref().unwrap();
    assert_eq!(pmu.total.rows, 6);
    assert_eq!(pmu.total.total_cycles, 290 + 170 + 120 + 160 + 190 + 250);
    assert_eq!(pmu.kernels[0].kernel, "relu");
    assert_eq!(pmu.kernels[0].counters[0], 120 / 2 + 190 / 2 + 250 / 2);
    assert_eq!(r.stalls.lanes[0].lane, "aicpu_task/core1");
    assert_eq!(r.stalls.inflated_tasks, [task_hex(sample_task(4))]);
    assert!(r.loss.reconciles);
    let cp = &r.critical_path;
    let chain = hex(&[sample_task(3), sample_task(5), sample_task(6)]);
    assert_eq!(ids(cp.static_by_count.as_ref().unwrap()), chain);
    assert_eq!(ids(cp.static_by_time.as_ref().unwrap()), chain);
    assert_eq!(cp.static_by_time.as_ref().unwrap().length, 120 + 190 + 250);
    assert!(cp.notes.is_empty(), "{:?}", cp.notes);
    // Round trip through JSON: what a script reads is the whole model.
    let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(back, r);
    let t = r.text(Some(1));
    let table = &t[t.find("Per kernel").unwrap()..t.find("Per core").unwrap()];
    assert!(table.contains("(top 1 of 3)") && table.contains("\n  relu "), "{t}");
    assert!(!table.contains("matmul") && !table.contains("\n  add "), "{t}");
    assert!(t.contains("static by count: 3 tasks"), "{t}");
}

#[test]
fn without_deps_or_swimlane_the_notes_say_why() {
    let mut run = sample_run(LossPolicy::Block);
    run.deps = None;
    let r = report(&run);
    assert!(r.critical_path.static_by_time.is_none() && r.critical_path.observed.is_some());
    assert!(r.critical_path.notes.iter().any(|n| n.contains("--dep-gen")));
    run.swimlane = None;
    let r = report(&run);
    assert!(r.critical_path.observed.is_none());
    assert!(r.critical_path.notes.iter().any(|n| n.contains("--swimlane")));
}

#[test]
fn pmu_summary_sums_counters_per_kernel() {
    let mut run = run_of(1, &[(1, 0, 1, 0, 10), (2, 0, 2, 10, 30)], &[]);
    let mut p = PmuTable::new("a2a3", 2);
    for (task, func, cycles) in [(1, 1, 10), (2, 2, 20), (3, 2, 5)] {
        p.rows.push(PmuRow {
            task_id: task,
            func_id: func,
            pmu_total_cycles: cycles,
            counters: (0..8u64).map(|k| cycles * k).collect(),
            ..Default::default()
        });
    }
    run.pmu = Some(p);
    let s = report(&run).pmu.unwrap();
    assert_eq!(s.kernels.iter().map(|k| k.kernel.as_str()).collect::<Vec<_>>(), ["k2", "k1"]);
    assert_eq!((s.kernels[0].rows, s.kernels[0].total_cycles), (2, 25));
    assert_eq!(s.kernels[0].counters[3], 75);
    assert_eq!(s.total.counters[1], 35);
}

#[test]
fn diff_of_a_run_against_itself_is_zero() {
    let r = report(&sample_run(LossPolicy::Drop));
    let d = diff(&r, &r);
    assert!(d.is_zero(), "{d:?}");
    assert_eq!(d.regression, None);
    assert_eq!(d.critical_path.same_static_kernels, Some(true));
    assert!(d.text(None).contains("no kernel regressed"));
}

/// B's `k2` takes 300 cycles more, `k1` 20 more, `k3` 50 fewer: `k2` is named first and the
/// rows go from the biggest regression to the biggest improvement.
#[test]
fn diff_names_the_biggest_regression_first() {
    let a = run_of(1, &[(1, 0, 1, 0, 100), (2, 0, 2, 100, 200), (3, 0, 3, 200, 300)], &[(1, 2)]);
    let b = run_of(1, &[(1, 0, 1, 0, 120), (2, 0, 2, 120, 520), (3, 0, 3, 520, 570)], &[(1, 2)]);
    let d = diff(&report(&a), &report(&b));
    assert_eq!(d.regression.as_deref(), Some("k2"));
    let order: Vec<(&str, i64)> =
        d.kernels.iter().map(|k| (k.kernel.as_str(), k.exec_ns.delta)).collect();
    assert_eq!(order, [("k2", 300), ("k1", 20), ("k3", -50)]);
    assert_eq!(d.wall_ns.delta, 270);
    assert_eq!(d.critical_path.static_by_time_ns.unwrap().delta, 320);
    assert!(!d.is_zero());
    let t = d.text(None);
    assert!(t.contains("biggest kernel regression: k2"), "{t}");
    // Backwards, k3 is the only regression.
    let d = diff(&report(&b), &report(&a));
    assert_eq!(d.regression.as_deref(), Some("k3"));
    // Only faster: nothing regressed.
    let c = run_of(1, &[(1, 0, 1, 0, 50), (2, 0, 2, 50, 100), (3, 0, 3, 100, 150)], &[(1, 2)]);
    let d = diff(&report(&a), &report(&c));
    assert_eq!(d.regression, None);
    assert!(d.kernels.iter().all(|k| k.exec_ns.delta == -50), "{d:?}");
}

/// Times compare in nanoseconds: the same run on a clock twice as fast is half as long.
#[test]
fn diff_compares_runs_on_different_clocks_in_nanoseconds() {
    let a = run_of(1, &[(1, 0, 1, 0, 100)], &[]);
    let mut b = a.clone();
    b.meta.clock_freq_hz = 2_000_000_000;
    let d = diff(&report(&a), &report(&b));
    assert_eq!(d.kernels[0].exec_ns, Pair::new(100, 50));
    assert_eq!(d.critical_path.observed_makespan_ns, Some(Pair::new(100, 50)));
}

#[test]
fn listings_name_tasks_one_way() {
    let run = sample_run(LossPolicy::Block);
    let l = deps_listing(&run).unwrap();
    assert_eq!((l.tasks, l.tensors, l.edges), (6, 7, 4));
    assert_eq!(l.hb_violations.len(), 1);
    assert_eq!(l.hb_violations[0].succ, task_hex(sample_task(6)));
    let t4 = l.task_list.iter().find(|t| t.task_id == task_hex(sample_task(4))).unwrap();
    assert_eq!(t4.preds.len(), 2);
    assert_eq!(t4.preds[0].source, "creator");
    let d = dump_listing(run.args.as_ref().unwrap(), &Default::default());
    assert_eq!((d.total, d.shown), (3, 3));
    let scalar = d.args.iter().find(|a| a.kind == "scalar").unwrap();
    assert_eq!(scalar.value.as_deref(), Some("42"));
    assert_eq!(d.args[0].payload_bytes, Some(16));
}

/// A failed run's outcome reaches the report (JSON and text) and both sides of a diff; a run
/// whose outcome is not recorded says nothing of it.
#[test]
fn a_failed_runs_outcome_is_in_the_report_and_the_diff() {
    let ok = report(&sample_run(LossPolicy::Block));
    assert_eq!(ok.outcome, None);
    assert!(!ok.text(None).contains("failed"), "{}", ok.text(None));
    let error = "workload `chain` produced a wrong result: checksum 1 != 2".to_string();
    let failed = Report {
        outcome: Some(RunOutcome::Failed { error: error.clone(), task: None }),
        ..ok.clone()
    };
    let t = failed.text(None);
    assert!(t.lines().nth(1).unwrap().starts_with("the run failed"), "{t}");
    assert!(t.contains(&error), "{t}");
    let v = serde_json::to_value(&failed).unwrap();
    assert_eq!(v["outcome"]["status"], "failed", "{v}");
    assert_eq!(v["outcome"]["error"], error.as_str(), "{v}");
    let good = Report { outcome: Some(RunOutcome::Ok), ..ok.clone() };
    assert_eq!(serde_json::to_value(&good).unwrap()["outcome"]["status"], "ok");
    let d = diff(&good, &failed);
    assert!(d.is_zero(), "the figures are the same run's");
    assert_eq!(d.outcome, [Some(RunOutcome::Ok), failed.outcome.clone()]);
    let t = d.text(None);
    assert!(t.contains(&format!("run B failed (its profile is complete): {error}")), "{t}");
    assert!(!t.contains("run A failed"), "{t}");
}

/// A session of runs of one task of kernel 1 each, `(start, end)` per run, at 1 GHz.
fn session_of(spans: &[(u64, u64)], warmup: u32) -> SessionReport {
    let reports: Vec<Report> =
        spans.iter().map(|&(s, e)| report(&run_of(1, &[(1, 0, 1, s, e)], &[]))).collect();
    session_report(&crate::SessionRuns::default(), reports, warmup)
}

#[test]
fn a_session_sets_warm_up_runs_apart_and_spreads_the_steady_ones() {
    let spans = [(0, 300), (1000, 1100), (1300, 1420)];
    let s = session_of(&spans, 1);
    assert_eq!(s.runs.iter().map(|r| r.warmup).collect::<Vec<_>>(), [true, false, false]);
    assert_eq!(s.runs.iter().map(|r| r.wall_ns).collect::<Vec<_>>(), [300, 100, 120]);
    assert_eq!(s.runs.iter().map(|r| r.gap_ns).collect::<Vec<_>>(), [None, Some(700), Some(200)]);
    let st = s.steady.as_ref().unwrap();
    assert_eq!((st.first, st.last, st.runs), (1, 2, 2));
    assert_eq!(st.wall_ns, Spread { mean: 110, min: 100, max: 120 });
    assert_eq!(st.gap_ns, Some(Spread { mean: 450, min: 200, max: 700 }));
    assert_eq!(st.kernels.len(), 1);
    assert_eq!(st.kernels[0].exec_ns, Spread { mean: 110, min: 100, max: 120 });
    assert_eq!((st.kernels[0].tasks, st.kernels[0].exec_per_block_ns), (1, 110));
    assert_eq!(s.warmup_hint, None, "a warm-up run is set apart: no hint");
    let t = s.text("D", None);
    assert!(t.contains("steady state over runs 1–2"), "{t}");
    assert!(t.contains("warm-up"), "{t}");
    // Nothing set apart: the slow first run is pointed out (300 over the others' median 120).
    let none = session_of(&spans, 0);
    assert_eq!(none.warmup_hint, Some(2.5));
    assert_eq!(none.steady.as_ref().unwrap().wall_ns.max, 300);
    assert!(none.text("D", None).contains("hint: run-000 took 2.5x"), "{}", none.text("D", None));
    // Every run a warm-up run: no steady state, said so.
    let all = session_of(&spans, 9);
    assert_eq!((all.warmup, all.steady.is_none()), (3, true));
    assert!(all.text("D", None).contains("no steady state"));
}

#[test]
fn a_session_diff_names_a_regression_only_beyond_the_runs_spread() {
    let a = session_of(&[(0, 100), (200, 320)], 0);
    let slower = session_of(&[(0, 200), (300, 510)], 0);
    let d = session_diff(&a, &slower, Vec::new());
    assert_eq!(d.regression.as_deref(), Some("k1"));
    assert!(d.kernels[0].exec_ns.beyond_spread && d.wall_ns.beyond_spread);
    assert_eq!(d.kernels[0].exec_ns.delta_ns, 205 - 110);
    // Within A's spread (100..120): no regression, though the mean grew.
    let noisy = session_of(&[(0, 110), (200, 315)], 0);
    let d = session_diff(&a, &noisy, Vec::new());
    assert!(d.kernels[0].exec_ns.delta_ns > 0 && !d.kernels[0].exec_ns.beyond_spread);
    assert_eq!(d.regression, None);
    assert!(d.text(None).contains("within the runs' spread"), "{}", d.text(None));
    // A setup difference comes first.
    let setup = vec![SetupChange { what: "arch".into(), a: "a2a3".into(), b: "a5".into() }];
    let t = session_diff(&a, &noisy, setup).text(None);
    assert_eq!(t.lines().nth(1), Some("set up differently (this explains what follows):"), "{t}");
}

#[test]
fn a_session_read_as_one_model_keeps_each_runs_joins_and_spans() {
    let runs: Vec<RunModel> = [(0u64, 300u64), (1000, 1100)]
        .iter()
        .map(|&(s, e)| run_of(1, &[(1, 0, 1, s, e)], &[]))
        .collect();
    let m = crate::session_model(runs, 1);
    let spans: Vec<(u32, bool, u64, u64)> =
        m.meta.session.iter().map(|r| (r.index, r.warmup, r.first, r.last)).collect();
    assert_eq!(spans, [(0, true, 0, 300), (1, false, 1000, 1100)]);
    // Both runs' blocks use the per-core counter 1: each still joins its own run's dispatch.
    let t = m.tasks();
    assert_eq!(
        t.iter().map(|t| (t.dispatch, t.finish)).collect::<Vec<_>>(),
        [(Some(0), Some(300)), (Some(1000), Some(1100))]
    );
    // The trace's runs track: each run and the gap between them.
    let p = crate::perfetto::plan(&m);
    let mut names: Vec<&str> = p
        .slices
        .iter()
        .filter(|s| s.track == crate::perfetto::UUID_SESSION_RUNS)
        .map(|s| s.name.as_ref())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["gap before run-001", "run-000 (warm-up)", "run-001"]);
}

/// A record naming a core far past the declared ones (a damaged file) adds one row for that
/// core, not a row for every number below it.
#[test]
fn a_core_id_past_the_declared_cores_is_one_row_not_a_row_per_number() {
    let far = 3_000_000_000;
    let run = run_of(2, &[(1, 0, 0, 0, 10), (2, far, 0, 5, 20)], &[]);
    let r = report(&run);
    let cores: Vec<u32> = r.cores.iter().map(|c| c.core).collect();
    assert_eq!(cores, [0, 1, far]);
    assert_eq!(
        (r.cores[0].busy_cycles, r.cores[1].busy_cycles, r.cores[2].busy_cycles),
        (10, 0, 15)
    );
}

/// The loss table's height does not follow the host's load: of five lanes that only waited, the
/// two longest waiters are rows (with their waits and longest wait) and the other three one line
/// whose sums are theirs; a lane that dropped records is a row whatever its wait.
#[test]
fn lanes_that_only_waited_past_two_are_one_line_of_their_sums() {
    let mut run = sample_run(LossPolicy::Block);
    for ln in &mut run.loss.lanes {
        ln.stall_cycles = 0;
        ln.stalls.clear();
    }
    // Waits of 1000, 700, 600, 500 and 400 cycles (1 GHz: a cycle is a nanosecond), two each.
    let waited = [1000u64, 700, 600, 500, 400];
    for (ln, w) in run.loss.lanes.iter_mut().zip(waited) {
        ln.stall_cycles = w;
        ln.stalls = vec![[10, 10 + w / 4], [100, 100 + w - w / 4]];
    }
    let lossy = waited.len();
    run.loss.lanes[lossy].dropped = 7;
    run.loss.lanes[lossy].produced += 7;
    run.meta.clock_freq_hz = 1_000_000_000;
    let r = report(&run);
    let t = r.text(None);
    let table = &t[t.find("Loss and stalls").unwrap()..];
    let row_of = |ln: &crate::model::LaneLoss| {
        table.lines().find(|l| l.trim_start().starts_with(&format!("{} ", ln.lane)))
    };
    let lanes = &run.loss.lanes;
    for ln in &lanes[..2] {
        let row = row_of(ln).unwrap_or_else(|| panic!("{} has no row: {table}", ln.lane));
        let longest = format!("{:.3}", (ln.stall_cycles - ln.stall_cycles / 4) as f64 / 1e3);
        assert!(row.contains(" 2 ") && row.contains(&longest), "{row}");
    }
    for ln in &lanes[2..lossy] {
        assert!(row_of(ln).is_none(), "{} is a row: {table}", ln.lane);
    }
    let recs: u64 = lanes[2..lossy].iter().map(|l| l.produced).sum();
    let fold = format!(
        "3 other lanes waited too: 1.500 us in 6 wait(s) in all, longest 0.450 us; every record \
         collected ({recs} in all)"
    );
    assert!(table.contains(&fold), "{table}");
    assert!(row_of(&lanes[lossy]).unwrap().contains(" 7 "), "{table}");
    // The heading, the columns, three rows, the waiters' line, the inflated tasks, the quiet lanes and
    // the total.
    assert_eq!(table.lines().count(), 9, "{table}");
}
