//! The listings of `ferry deps --json` and `ferry dump list --json`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::super::args::ArgsDump;
use super::super::model::RunModel;
use super::super::views::{format_scalar, DumpFilter};
use super::task_hex;
use crate::RunOutcome;

/// The dependency graph of a run, as `ferry deps` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepsListing {
    /// Tasks in `deps.json`.
    pub tasks: u64,
    /// Tensors.
    pub tensors: u64,
    /// Edges.
    pub edges: u64,
    /// Edges per source (`explicit`, `creator`, `tensormap`).
    pub edges_by_source: BTreeMap<String, u64>,
    /// Edges whose producer ended after its consumer started, in the swimlane.
    pub hb_violations: Vec<HbViolation>,
    /// Every task, in submission order (those `ferry deps --task/--kernel/--top` keep).
    pub task_list: Vec<DepsTask>,
    /// Tasks in `task_list` (`tasks` unless filtered).
    #[serde(default)]
    pub shown: u64,
    /// How the run ended, from its manifest (`None`: not recorded); set by the caller that
    /// opened the run ([`OpenedRun::outcome`](crate::OpenedRun::outcome)).
    #[serde(default)]
    pub outcome: Option<RunOutcome>,
}

/// A happens-before violation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HbViolation {
    /// Producer.
    pub pred: String,
    /// Its last end.
    pub pred_end: u64,
    /// Consumer.
    pub succ: String,
    /// Its first start.
    pub succ_start: u64,
}

/// One task of the graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepsTask {
    /// Task id.
    pub task_id: String,
    /// Kernel name.
    pub kernel: String,
    /// SPMD blocks.
    pub blocks: u32,
    /// Arguments.
    pub args: u64,
    /// Its predecessors, in edge order.
    pub preds: Vec<TaskEdge>,
    /// Its successors, in edge order.
    pub succs: Vec<String>,
}

/// One incoming edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskEdge {
    /// Producer (`0x0`: the run's inputs).
    pub task_id: String,
    /// `explicit`, `creator` or `tensormap`.
    pub source: String,
}

fn source_name(s: super::super::EdgeSource) -> String {
    format!("{s:?}").to_lowercase()
}

/// The listing of `run`'s `deps.json` (`None`: the run has none).
pub fn deps_listing(run: &RunModel) -> Option<DepsListing> {
    deps_listing_filtered(run, &crate::views::DepsFilter::default())
}

/// [`deps_listing`] whose `task_list` holds only the tasks `filter` keeps (the counts and the
/// violations stay those of the whole graph; `shown` says how many are listed).
pub fn deps_listing_filtered(
    run: &RunModel,
    filter: &crate::views::DepsFilter,
) -> Option<DepsListing> {
    let g = run.deps.as_ref()?;
    let mut by_source: BTreeMap<String, u64> = BTreeMap::new();
    for e in &g.edges {
        *by_source.entry(source_name(e.source)).or_default() += 1;
    }
    // First start and last end per task, over its blocks.
    let mut span: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for t in run.tasks() {
        let s = span.entry(t.task_id).or_insert((t.start, t.end));
        s.0 = s.0.min(t.start);
        s.1 = s.1.max(t.end);
    }
    let hb_violations = g
        .edges
        .iter()
        .filter_map(|e| {
            let (p, c) = (span.get(&e.pred)?, span.get(&e.succ)?);
            (p.1 > c.0).then(|| HbViolation {
                pred: task_hex(e.pred),
                pred_end: p.1,
                succ: task_hex(e.succ),
                succ_start: c.0,
            })
        })
        .collect();
    let mut into: BTreeMap<u64, Vec<TaskEdge>> = BTreeMap::new();
    let mut from: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for e in &g.edges {
        into.entry(e.succ)
            .or_default()
            .push(TaskEdge { task_id: task_hex(e.pred), source: source_name(e.source) });
        from.entry(e.pred).or_default().push(task_hex(e.succ));
    }
    let task_list: Vec<DepsTask> = g
        .tasks
        .iter()
        .map(|t| {
            let kernel = run.kernel_name(t.kernel_ids.iter().copied().find(|&k| k >= 0));
            (t, kernel)
        })
        .filter(|(t, kernel)| filter.keeps(t.task_id, kernel))
        .take(filter.top.unwrap_or(usize::MAX))
        .map(|(t, kernel)| DepsTask {
            task_id: task_hex(t.task_id),
            kernel,
            blocks: t.block_num,
            args: t.args.len() as u64,
            preds: into.get(&t.task_id).cloned().unwrap_or_default(),
            succs: from.get(&t.task_id).cloned().unwrap_or_default(),
        })
        .collect();
    Some(DepsListing {
        tasks: g.tasks.len() as u64,
        tensors: g.tensors.len() as u64,
        edges: g.edges.len() as u64,
        edges_by_source: by_source,
        hb_violations,
        shown: task_list.len() as u64,
        task_list,
        outcome: None,
    })
}

/// The arguments `ferry dump list` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpListing {
    /// ArgsDump level of the run.
    pub level: u32,
    /// Arguments in the dump.
    pub total: u64,
    /// Arguments that pass the filter (the length of `args`).
    pub shown: u64,
    /// Records the device dropped.
    pub dropped_records: u64,
    /// Payloads overwritten in the arena before the host copied them.
    pub dropped_overwrite: u64,
    /// The arguments that pass the filter, in the dump's order.
    pub args: Vec<DumpedArgRow>,
    /// How the run ended, from its manifest (`None`: not recorded); set by the caller that
    /// opened the run ([`OpenedRun::outcome`](crate::OpenedRun::outcome)).
    #[serde(default)]
    pub outcome: Option<RunOutcome>,
}

/// One dumped argument.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedArgRow {
    /// Task id.
    pub task_id: String,
    /// `before_dispatch` or `after_completion`.
    pub stage: String,
    /// Argument index.
    pub arg_index: u32,
    /// `INPUT`, `OUTPUT`, `INOUT` or `SCALAR`.
    pub role: String,
    /// `tensor` or `scalar`.
    pub kind: String,
    /// Element type.
    pub dtype: String,
    /// Extents.
    pub shape: Vec<u64>,
    /// A scalar's value, formatted as its dtype (`0.5`, `-3`).
    pub value: Option<String>,
    /// Payload bytes in `args.bin` (`None`: no payload dumped).
    pub payload_bytes: Option<u64>,
    /// The payload was cut at the dump's size limit.
    pub truncated: bool,
    /// The payload was overwritten before the host copied it.
    pub overwritten: bool,
}

/// The arguments of `d` that pass `f`.
pub fn dump_listing(d: &ArgsDump, f: &DumpFilter) -> DumpListing {
    let args: Vec<DumpedArgRow> = d
        .in_export_order()
        .filter(|a| f.matches(a))
        .map(|a| DumpedArgRow {
            task_id: task_hex(a.task_id),
            stage: a.stage.to_string(),
            arg_index: a.arg_index,
            role: a.role.to_string(),
            kind: a.kind.to_string(),
            dtype: a.dtype.to_string(),
            shape: a.shape.iter().copied().collect(),
            value: a.value.map(|v| format_scalar(&a.dtype, v)),
            payload_bytes: d.payload(&a).map(|p| p.len() as u64),
            truncated: a.truncated,
            overwritten: a.overwritten,
        })
        .collect();
    DumpListing {
        level: d.level,
        total: d.args.len() as u64,
        shown: args.len() as u64,
        dropped_records: d.dropped_records,
        dropped_overwrite: d.dropped_overwrite,
        args,
        outcome: None,
    }
}
