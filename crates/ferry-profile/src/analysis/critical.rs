//! The critical paths of a run.
//!
//! - **Static** ([`static_path`]): the longest chain of the dependency graph (`deps.json`), each
//!   task weighted by its duration in the swimlane ([`Weight::Time`]: `max end − min start` over
//!   its blocks; a task the swimlane does not show weighs 0) or by 1 ([`Weight::Count`]). By time
//!   it is the latency floor the dependencies impose with unlimited cores; by count, the longest
//!   chain of dependent submits. Ties go to the task submitted first, so the path is a function
//!   of the files alone.
//! - **Observed** ([`observed_path`]): the chain that made the run as long as it was, walked back
//!   from the last task to finish: at each task, of its dependency predecessors and the task that
//!   ran before it on the core of its first block, the one that finished last (and no later than
//!   the task started) is blamed for the wait before it (`data` or `core` wait); a task with none
//!   starts the path after the `front_gap` from the run's first start. Compute plus waits plus
//!   the front gap tile the makespan (`last end − first start`) exactly.
//!
//! Both are linear in tasks and edges (one topological pass; one walk over the blamed chain).

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::super::model::{JoinedTask, RunModel};
use super::task_hex;

/// What a static path's tasks weigh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Weight {
    /// The task's duration in the swimlane, in cycles.
    Time,
    /// 1 per task.
    Count,
}

/// The longest weighted chain of the dependency graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaticPath {
    /// What a task weighs.
    pub weight: Weight,
    /// Σ weights: cycles ([`Weight::Time`]) or tasks ([`Weight::Count`]).
    pub length: u64,
    /// `length` in nanoseconds ([`Weight::Time`] only).
    pub length_ns: Option<u64>,
    /// The chain, first task first.
    pub tasks: Vec<PathTask>,
}

/// One task of a static path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathTask {
    /// Task id.
    pub task_id: String,
    /// Kernel name.
    pub kernel: String,
    /// First block's start (`None`: not in the swimlane).
    pub start: Option<u64>,
    /// Last block's end.
    pub end: Option<u64>,
    /// `end − start`.
    pub duration_cycles: Option<u64>,
}

/// Why the observed path waited before a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// The first task of the path: the gap from the run's first start.
    FrontGap,
    /// Waiting for a dependency predecessor.
    Data,
    /// Waiting for the core (the task before it on the core).
    Core,
}

/// One task of the observed path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedStep {
    /// Task id.
    pub task_id: String,
    /// Kernel name.
    pub kernel: String,
    /// Core of its first block.
    pub core: u32,
    /// First block's start.
    pub start: u64,
    /// Last block's end.
    pub end: u64,
    /// `end − start`.
    pub compute_cycles: u64,
    /// Cycles between the blamed task's end (or the run's first start) and `start`.
    pub wait_cycles: u64,
    /// What it waited for.
    pub wait: WaitKind,
    /// The blamed task (`None` for the front gap).
    pub after: Option<String>,
}

/// The as-executed critical path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedPath {
    /// Last end − first start over the AICore blocks.
    pub makespan_cycles: u64,
    /// `makespan_cycles` in nanoseconds.
    pub makespan_ns: u64,
    /// Σ compute of the path's tasks.
    pub compute_cycles: u64,
    /// Σ data waits.
    pub data_wait_cycles: u64,
    /// Σ core waits.
    pub core_wait_cycles: u64,
    /// The first task's gap from the run's first start.
    pub front_gap_cycles: u64,
    /// Whether dependency edges were used (`false`: no `deps.json`, core waits only).
    pub uses_deps: bool,
    /// The path, first task first.
    pub tasks: Vec<ObservedStep>,
}

/// The run's critical paths; each is `None` when its inputs are missing, and `notes` says why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriticalPaths {
    /// Static, weighted by duration (needs `deps.json` and the swimlane).
    pub static_by_time: Option<StaticPath>,
    /// Static, weighted by count (needs `deps.json`).
    pub static_by_count: Option<StaticPath>,
    /// Observed (needs the swimlane; uses `deps.json` when there).
    pub observed: Option<ObservedPath>,
    /// Why a path is missing, one line each.
    pub notes: Vec<String>,
}

/// One task's blocks, together.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u64,
    end: u64,
    /// Core of the block that started first.
    core: u32,
    func: Option<i32>,
}

/// Every task's span, by task id, from the joined blocks (in start order).
fn spans(tasks: &[JoinedTask]) -> HashMap<u64, Span> {
    let mut m: HashMap<u64, Span> = HashMap::with_capacity(tasks.len());
    for t in tasks {
        m.entry(t.task_id)
            .and_modify(|s| {
                if t.start < s.start {
                    s.start = t.start;
                    s.core = t.core;
                }
                s.end = s.end.max(t.end);
            })
            .or_insert(Span {
                start: t.start,
                end: t.end.max(t.start),
                core: t.core,
                func: t.func_id,
            });
    }
    m
}

/// Both static paths and the observed one (`tasks`: [`RunModel::tasks`] of `run`).
pub fn critical_paths(run: &RunModel, tasks: &[JoinedTask]) -> CriticalPaths {
    let mut cp = CriticalPaths::default();
    let sp = spans(tasks);
    if run.deps.is_some() {
        for w in [Weight::Time, Weight::Count] {
            if w == Weight::Time && run.swimlane.is_none() {
                cp.notes.push(
                    "no swimlane: no static critical path by time (run with --swimlane)".into(),
                );
                continue;
            }
            match static_path_with(run, &sp, w) {
                Ok(p) if w == Weight::Time => cp.static_by_time = p,
                Ok(p) => cp.static_by_count = p,
                Err(e) => {
                    cp.notes.push(e);
                    break;
                }
            }
        }
    } else {
        cp.notes.push("no deps.json: no static critical path (run with --dep-gen)".into());
    }
    if run.swimlane.is_some() {
        cp.observed = observed_with(run, tasks, &sp);
        if run.deps.is_none() {
            cp.notes.push(
                "no deps.json: the observed path blames core waits only (run with --dep-gen)"
                    .into(),
            );
        }
    } else {
        cp.notes.push("no swimlane: no observed critical path (run with --swimlane)".into());
    }
    cp
}

/// The static critical path of `run` by `weight` (`Ok(None)`: no `deps.json` or no task).
///
/// # Errors
/// The graph's edges form a cycle (a file no run writes): the message says through how many
/// tasks.
pub fn static_path(run: &RunModel, weight: Weight) -> Result<Option<StaticPath>, String> {
    static_path_with(run, &spans(&run.tasks()), weight)
}

fn static_path_with(
    run: &RunModel,
    sp: &HashMap<u64, Span>,
    weight: Weight,
) -> Result<Option<StaticPath>, String> {
    let Some(g) = &run.deps else { return Ok(None) };
    // Nodes: the graph's tasks in submission order (a repeated id is one node).
    let mut ids: Vec<u64> = Vec::with_capacity(g.tasks.len());
    let mut kernel: Vec<Option<i32>> = Vec::with_capacity(g.tasks.len());
    let mut index: HashMap<u64, usize> = HashMap::with_capacity(g.tasks.len());
    for (id, k) in g.tasks.kernels() {
        index.entry(id).or_insert_with(|| {
            ids.push(id);
            kernel.push(k.iter().copied().find(|&k| k >= 0));
            ids.len() - 1
        });
    }
    let n = ids.len();
    if n == 0 {
        return Ok(None);
    }
    // Out-edges as one CSR array (no vector per task); edges to or from tasks the graph does
    // not list (the run's inputs, `pred` 0) and self-loops are left out.
    let pairs: Vec<(usize, usize)> = g
        .edges
        .iter()
        .filter_map(|e| Some((*index.get(&e.pred)?, *index.get(&e.succ)?)))
        .filter(|(p, s)| p != s)
        .collect();
    let mut head = vec![0usize; n + 1];
    for &(p, _) in &pairs {
        head[p + 1] += 1;
    }
    for i in 0..n {
        head[i + 1] += head[i];
    }
    let mut fill = head.clone();
    let mut out = vec![0usize; pairs.len()];
    let mut indeg = vec![0u32; n];
    for &(p, s) in &pairs {
        out[fill[p]] = s;
        fill[p] += 1;
        indeg[s] += 1;
    }
    let w = |i: usize| match weight {
        Weight::Count => 1,
        Weight::Time => sp.get(&ids[i]).map_or(0, |s| s.end - s.start),
    };
    // Kahn's order; best[v] = w(v) + the best predecessor's best, ties to the earliest submit.
    let mut best = vec![0u64; n];
    let mut pred_best = vec![0u64; n];
    let mut from = vec![usize::MAX; n];
    let mut queue: VecDeque<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut done = 0;
    while let Some(v) = queue.pop_front() {
        done += 1;
        best[v] = pred_best[v].saturating_add(w(v));
        for &s in &out[head[v]..head[v + 1]] {
            if from[s] == usize::MAX
                || best[v] > pred_best[s]
                || (best[v] == pred_best[s] && v < from[s])
            {
                pred_best[s] = best[v];
                from[s] = v;
            }
            indeg[s] -= 1;
            if indeg[s] == 0 {
                queue.push_back(s);
            }
        }
    }
    if done < n {
        return Err(format!(
            "deps.json: its edges form a cycle through {} of its {n} tasks; no static critical path",
            n - done
        ));
    }
    let mut end = 0;
    for i in 1..n {
        if best[i] > best[end] {
            end = i;
        }
    }
    let mut chain = vec![end];
    while from[*chain.last().expect("never empty")] != usize::MAX {
        chain.push(from[*chain.last().expect("never empty")]);
    }
    chain.reverse();
    let tasks = chain
        .into_iter()
        .map(|i| {
            let s = sp.get(&ids[i]);
            PathTask {
                task_id: task_hex(ids[i]),
                kernel: run.kernel_name(kernel[i].or(s.and_then(|s| s.func))),
                start: s.map(|s| s.start),
                end: s.map(|s| s.end),
                duration_cycles: s.map(|s| s.end - s.start),
            }
        })
        .collect();
    Ok(Some(StaticPath {
        weight,
        length: best[end],
        length_ns: (weight == Weight::Time).then(|| run.meta.cycles_to_ns(best[end])),
        tasks,
    }))
}

/// The observed critical path of `run` (`None`: no task in the swimlane).
pub fn observed_path(run: &RunModel) -> Option<ObservedPath> {
    let tasks = run.tasks();
    observed_with(run, &tasks, &spans(&tasks))
}

fn observed_with(
    run: &RunModel,
    tasks: &[JoinedTask],
    sp: &HashMap<u64, Span>,
) -> Option<ObservedPath> {
    let first_start = tasks.iter().map(|t| t.start).min()?;
    // The task before each task on the core of its first block (blocks in start order).
    let mut last_on_core: HashMap<u32, u64> = HashMap::new();
    let mut core_prev: HashMap<u64, u64> = HashMap::new();
    for t in tasks {
        let s = &sp[&t.task_id];
        if t.core == s.core && t.start == s.start && !core_prev.contains_key(&t.task_id) {
            if let Some(&p) = last_on_core.get(&t.core).filter(|&&p| p != t.task_id) {
                core_prev.insert(t.task_id, p);
            }
        }
        last_on_core.insert(t.core, t.task_id);
    }
    let mut preds: HashMap<u64, Vec<u64>> = HashMap::new();
    if let Some(g) = &run.deps {
        for e in &g.edges {
            if e.pred != e.succ && sp.contains_key(&e.pred) && sp.contains_key(&e.succ) {
                preds.entry(e.succ).or_default().push(e.pred);
            }
        }
    }
    let (&last, _) = sp.iter().max_by(|a, b| a.1.end.cmp(&b.1.end).then(b.0.cmp(a.0)))?;
    let mut steps = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut cur = last;
    loop {
        seen.insert(cur);
        let s = sp[&cur];
        // The candidate that ended last, no later than `cur` started: data before core, then
        // the lower id.
        let mut blame: Option<(u64, WaitKind, u64)> = None;
        let data = preds.get(&cur).into_iter().flatten().map(|&p| (p, WaitKind::Data));
        for (p, kind) in data.chain(core_prev.get(&cur).map(|&p| (p, WaitKind::Core))) {
            let pe = sp[&p].end;
            if pe > s.start || seen.contains(&p) {
                continue;
            }
            let better = match blame {
                None => true,
                Some((b, bk, be)) => {
                    pe > be
                        || (pe == be && bk == WaitKind::Core && kind == WaitKind::Data)
                        || (pe == be && bk == kind && p < b)
                }
            };
            if better {
                blame = Some((p, kind, pe));
            }
        }
        let (wait, kind, after) = match blame {
            Some((p, k, pe)) => (s.start - pe, k, Some(p)),
            None => (s.start.saturating_sub(first_start), WaitKind::FrontGap, None),
        };
        steps.push(ObservedStep {
            task_id: task_hex(cur),
            kernel: run.kernel_name(s.func),
            core: s.core,
            start: s.start,
            end: s.end,
            compute_cycles: s.end - s.start,
            wait_cycles: wait,
            wait: kind,
            after: after.map(task_hex),
        });
        match after {
            Some(p) => cur = p,
            None => break,
        }
    }
    steps.reverse();
    let sum = |k: WaitKind| {
        steps.iter().filter(|x| x.wait == k).map(|x| x.wait_cycles).fold(0u64, u64::saturating_add)
    };
    let makespan = sp[&last].end - first_start;
    Some(ObservedPath {
        makespan_cycles: makespan,
        makespan_ns: run.meta.cycles_to_ns(makespan),
        compute_cycles: steps.iter().map(|x| x.compute_cycles).fold(0, u64::saturating_add),
        data_wait_cycles: sum(WaitKind::Data),
        core_wait_cycles: sum(WaitKind::Core),
        front_gap_cycles: sum(WaitKind::FrontGap),
        uses_deps: run.deps.is_some(),
        tasks: steps,
    })
}
