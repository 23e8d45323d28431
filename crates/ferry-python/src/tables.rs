//! A profile's records as columns: what Python gets as a dict of numpy arrays (one per
//! column, all of one length), ready for `pandas.DataFrame(d)` or `pyarrow.table(d)`.
//!
//! # Examples
//! ```
//! use ferry_profile::{sample::sample_run, LossPolicy};
//! let run = sample_run(LossPolicy::Block);
//! let t = _ferry::tables::tasks(&run);
//! let kernels = t.column("kernel").unwrap();
//! assert_eq!(kernels.len(), t.rows());
//! ```
use std::collections::BTreeMap;

use ferry_profile::RunModel;

/// One column's values.
#[derive(Clone, Debug, PartialEq)]
pub enum Column {
    /// Unsigned integers (ids, cycles, counts).
    U64(Vec<u64>),
    /// Signed integers (`-1` where a value is absent).
    I64(Vec<i64>),
    /// Text (kernel and lane names).
    Str(Vec<String>),
}

impl Column {
    /// Rows in the column.
    pub fn len(&self) -> usize {
        match self {
            Column::U64(v) => v.len(),
            Column::I64(v) => v.len(),
            Column::Str(v) => v.len(),
        }
    }

    /// Whether the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Named columns of equal length, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// `(name, values)`.
    pub columns: Vec<(String, Column)>,
}

impl Table {
    /// The column `name`.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|(n, _)| *n == name).map(|(_, c)| c)
    }

    /// Rows (the length of every column).
    pub fn rows(&self) -> usize {
        self.columns.first().map_or(0, |(_, c)| c.len())
    }
}

fn run_index(run: &RunModel) -> u64 {
    run.meta.run.map_or(0, |r| u64::from(r.index))
}

/// One task's aggregate over its blocks.
struct TaskRow {
    kernel: Option<i32>,
    core: u32,
    blocks: u64,
    start: u64,
    end: u64,
    exec: u64,
}

/// One row per task (a task of several blocks is one row): `task` (its id), `kernel`,
/// `func_id` (-1: unknown), `core` (where its first block started), `blocks`, `start` (its
/// first block's start), `end` (its last block's end), `exec_cycles` (Σ end − start over its
/// blocks, what `ferry report` sums per kernel) and `run` (the run of a repetition, 0 for a
/// single run). Device cycles; rows in start order. Empty without a swimlane.
pub fn tasks(run: &RunModel) -> Table {
    let mut order = Vec::new();
    let mut rows: BTreeMap<u64, TaskRow> = BTreeMap::new();
    for t in run.tasks() {
        let r = rows.entry(t.task_id).or_insert_with(|| {
            order.push(t.task_id);
            TaskRow {
                kernel: t.func_id,
                core: t.core,
                blocks: 0,
                start: t.start,
                end: t.end,
                exec: 0,
            }
        });
        r.blocks += 1;
        r.start = r.start.min(t.start);
        r.end = r.end.max(t.end);
        r.exec += t.end.saturating_sub(t.start);
    }
    let rows: Vec<&TaskRow> = order.iter().map(|id| &rows[id]).collect();
    let u = |f: fn(&TaskRow) -> u64| Column::U64(rows.iter().map(|r| f(r)).collect());
    Table {
        columns: vec![
            ("task".into(), Column::U64(order.clone())),
            (
                "kernel".into(),
                Column::Str(rows.iter().map(|r| run.kernel_name(r.kernel)).collect()),
            ),
            (
                "func_id".into(),
                Column::I64(rows.iter().map(|r| r.kernel.map_or(-1, i64::from)).collect()),
            ),
            ("core".into(), u(|r| u64::from(r.core))),
            ("blocks".into(), u(|r| r.blocks)),
            ("start".into(), u(|r| r.start)),
            ("end".into(), u(|r| r.end)),
            ("exec_cycles".into(), u(|r| r.exec)),
            ("run".into(), Column::U64(vec![run_index(run); rows.len()])),
        ],
    }
}

/// One row per block execution (the swimlane's AICore records joined with the AICPU's):
/// `task`, `kernel`, `core`, `dispatch` and `finish` (-1 below swimlane level 2), `start`,
/// `end`, `run`. Rows in start order.
pub fn blocks(run: &RunModel) -> Table {
    let t = run.tasks();
    let opt = |v: Option<u64>| v.map_or(-1, |c| i64::try_from(c).unwrap_or(i64::MAX));
    Table {
        columns: vec![
            ("task".into(), Column::U64(t.iter().map(|t| t.task_id).collect())),
            ("kernel".into(), Column::Str(t.iter().map(|t| run.kernel_name(t.func_id)).collect())),
            ("core".into(), Column::U64(t.iter().map(|t| u64::from(t.core)).collect())),
            ("dispatch".into(), Column::I64(t.iter().map(|t| opt(t.dispatch)).collect())),
            ("start".into(), Column::U64(t.iter().map(|t| t.start).collect())),
            ("end".into(), Column::U64(t.iter().map(|t| t.end).collect())),
            ("finish".into(), Column::I64(t.iter().map(|t| opt(t.finish)).collect())),
            ("run".into(), Column::U64(vec![run_index(run); t.len()])),
        ],
    }
}

/// One row per lane of every subsystem: `lane`, `subsystem` (empty when unknown), `thread`,
/// `core` (-1 for a lane that is not per core), `produced`, `collected`, `dropped`,
/// `stall_cycles`.
pub fn loss(run: &RunModel) -> Table {
    let l = &run.loss.lanes;
    let subsystem =
        |s: Option<ferry_profile::Subsystem>| s.map_or(String::new(), |s| s.name().into());
    Table {
        columns: vec![
            ("lane".into(), Column::Str(l.iter().map(|l| l.lane.clone()).collect())),
            ("subsystem".into(), Column::Str(l.iter().map(|l| subsystem(l.subsystem)).collect())),
            ("thread".into(), Column::U64(l.iter().map(|l| u64::from(l.thread)).collect())),
            ("core".into(), Column::I64(l.iter().map(|l| l.core.map_or(-1, i64::from)).collect())),
            ("produced".into(), Column::U64(l.iter().map(|l| l.produced).collect())),
            ("collected".into(), Column::U64(l.iter().map(|l| l.collected).collect())),
            ("dropped".into(), Column::U64(l.iter().map(|l| l.dropped).collect())),
            ("stall_cycles".into(), Column::U64(l.iter().map(|l| l.stall_cycles).collect())),
        ],
    }
}

/// One row per PMU row (one per task, at completion): `thread`, `core`, `task`, `kernel`,
/// `func_id`, `core_type` (0 AIC, 1 AIV), `total_cycles`, then one column per counter the run
/// programmed, by its name. Empty without PMU.
pub fn pmu(run: &RunModel) -> Table {
    let Some(p) = &run.pmu else { return Table::default() };
    let r = &p.rows;
    let mut columns: Vec<(String, Column)> = vec![
        ("thread".into(), Column::U64(r.iter().map(|r| u64::from(r.thread_id)).collect())),
        ("core".into(), Column::U64(r.iter().map(|r| u64::from(r.core_id)).collect())),
        ("task".into(), Column::U64(r.iter().map(|r| r.task_id).collect())),
        (
            "kernel".into(),
            Column::Str(r.iter().map(|r| run.kernel_name(Some(r.func_id as i32))).collect()),
        ),
        ("func_id".into(), Column::U64(r.iter().map(|r| u64::from(r.func_id)).collect())),
        ("core_type".into(), Column::I64(r.iter().map(|r| i64::from(r.core_type)).collect())),
        ("total_cycles".into(), Column::U64(r.iter().map(|r| r.pmu_total_cycles).collect())),
    ];
    for (i, name) in p.counter_names.iter().enumerate() {
        let values = r.iter().map(|r| r.counters.get(i).copied().unwrap_or(0)).collect();
        columns.push((name.clone(), Column::U64(values)));
    }
    Table { columns }
}

/// One row per dependency edge of DepGen's graph: `pred` (0: the run's inputs), `succ`, `arg`
/// (the consumer's argument), `source` (`explicit`, `creator`, `tensormap`), `tensor` (-1:
/// none). Empty without DepGen.
pub fn deps(run: &RunModel) -> Table {
    use ferry_profile::EdgeSource;
    let Some(d) = &run.deps else { return Table::default() };
    let e = &d.edges;
    let source = |s: EdgeSource| match s {
        EdgeSource::Explicit => "explicit",
        EdgeSource::Creator => "creator",
        EdgeSource::Tensormap => "tensormap",
    };
    let tensor = |t: Option<u64>| t.map_or(-1, |t| i64::try_from(t).unwrap_or(i64::MAX));
    Table {
        columns: vec![
            ("pred".into(), Column::U64(e.iter().map(|e| e.pred).collect())),
            ("succ".into(), Column::U64(e.iter().map(|e| e.succ).collect())),
            ("arg".into(), Column::U64(e.iter().map(|e| u64::from(e.arg)).collect())),
            ("source".into(), Column::Str(e.iter().map(|e| source(e.source).into()).collect())),
            ("tensor".into(), Column::I64(e.iter().map(|e| tensor(e.tensor_id)).collect())),
        ],
    }
}

/// One row per ScopeStats record (a scope's begin or end, in device order): `site`, `name`
/// (the scope's label, empty when the run named none), `phase` (`begin`, `end`), `depth`,
/// `ring`, then the occupancy at that moment: `task_window_start`, `task_window_end`,
/// `heap_start`, `heap_end` (bytes), `dep_pool_start`, `dep_pool_end`, `tensormap`. Empty
/// without ScopeStats.
pub fn scopes(run: &RunModel) -> Table {
    use ferry_profile::ScopePhase;
    let Some(s) = &run.scopes else { return Table::default() };
    let r = &s.records;
    let i = |f: fn(&ferry_profile::ScopeRow) -> i64| Column::I64(r.iter().map(f).collect());
    let name = |site: &str| s.names.get(site).map_or(String::new(), |l| l.name.clone());
    let phase = |p: ScopePhase| if p == ScopePhase::Begin { "begin" } else { "end" };
    Table {
        columns: vec![
            ("site".into(), Column::Str(r.iter().map(|r| r.site.clone()).collect())),
            ("name".into(), Column::Str(r.iter().map(|r| name(&r.site)).collect())),
            ("phase".into(), Column::Str(r.iter().map(|r| phase(r.phase).into()).collect())),
            ("depth".into(), i(|r| i64::from(r.depth))),
            ("ring".into(), i(|r| i64::from(r.ring))),
            ("task_window_start".into(), i(|r| r.task_window_start)),
            ("task_window_end".into(), i(|r| r.task_window_end)),
            ("heap_start".into(), Column::U64(r.iter().map(|r| r.heap_start).collect())),
            ("heap_end".into(), Column::U64(r.iter().map(|r| r.heap_end).collect())),
            ("dep_pool_start".into(), i(|r| r.dep_pool_start)),
            ("dep_pool_end".into(), i(|r| r.dep_pool_end)),
            ("tensormap".into(), i(|r| r.tensormap)),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_profile::analysis::report;
    use ferry_profile::{sample::sample_run, LossPolicy};

    #[test]
    fn per_kernel_sums_of_the_task_table_are_the_reports() {
        let run = sample_run(LossPolicy::Drop);
        let t = tasks(&run);
        let (Some(Column::Str(k)), Some(Column::U64(exec)), Some(Column::U64(task))) =
            (t.column("kernel"), t.column("exec_cycles"), t.column("task"))
        else {
            panic!("columns missing: {t:?}")
        };
        assert!(t.columns.iter().all(|(_, c)| c.len() == t.rows()));
        let distinct: std::collections::BTreeSet<_> = task.iter().collect();
        assert_eq!(distinct.len(), t.rows(), "one row per task");
        let r = report(&run);
        assert!(!r.kernels.is_empty());
        for row in &r.kernels {
            let mine: u64 =
                k.iter().zip(exec).filter(|(n, _)| **n == row.kernel).map(|(_, e)| e).sum();
            let n = k.iter().filter(|n| **n == row.kernel).count() as u64;
            assert_eq!((mine, n), (row.exec_cycles, row.tasks), "kernel {}", row.kernel);
        }
        assert_eq!(blocks(&run).rows(), run.tasks().len());
        assert_eq!(loss(&run).rows(), run.loss.lanes.len());
        let p = pmu(&run);
        let rows = run.pmu.as_ref().map_or(0, |p| p.rows.len());
        assert!(rows > 0 && p.rows() == rows);
        let names = &run.pmu.as_ref().unwrap().counter_names;
        assert_eq!(p.columns.len(), 7 + names.len());
        assert!(p.columns.iter().all(|(_, c)| c.len() == rows));
        let edges = run.deps.as_ref().map_or(0, |d| d.edges.len());
        assert!(edges > 0 && deps(&run).rows() == edges);
        let records = run.scopes.as_ref().map_or(0, |s| s.records.len());
        assert!(records > 0 && scopes(&run).rows() == records);
    }
}
