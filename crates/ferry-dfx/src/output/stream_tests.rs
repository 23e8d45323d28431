//! Scale and streaming tests: the task join at scale, the views' indexes against their
//! definitions, the streamed traces against the plan, and the write phase's report.

use std::collections::BTreeMap;

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
            let id = l.trim_start().strip_prefix("task 0x")?.get(..16)?;
            Some((u64::from_str_radix(id, 16).ok()?, l))
        })
        .collect();
    assert_eq!(lines.len(), g.tasks.len());
    for t in &g.tasks {
        let preds: Vec<String> = g
            .edges
            .iter()
            .filter(|e| e.succ == t.task_id)
            .map(|e| format!("0x{:016x}({:?})", e.pred, e.source).to_lowercase())
            .collect();
        let succs: Vec<String> = g
            .edges
            .iter()
            .filter(|e| e.pred == t.task_id)
            .map(|e| format!("0x{:016x}", e.succ))
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
