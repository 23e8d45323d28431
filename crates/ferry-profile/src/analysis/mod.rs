//! Analyses of a run that a script can read: the [`Report`] (`ferry report`), the [`Diff`] of two
//! reports (`ferry diff`), and the listings of `ferry deps` and `ferry dump list`
//! ([`DepsListing`], [`DumpListing`]), each a serde model with a text rendering.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the report model and [`report`], which builds it from a [`RunModel`] |
//! | `critical.rs` | the static and the observed critical path |
//! | `diff.rs` | [`Diff`]: two reports compared |
//! | `listing.rs` | [`DepsListing`], [`DumpListing`] |
//! | `text.rs` | the text renderings |
//!
//! Times are device cycles of the run's clock (`*_cycles`) and, where two runs are compared,
//! nanoseconds (`*_ns`). Task ids are `0x` and hex digits, as everywhere in ferry's output.
//! The JSON schemas are documented in the repository's `docs/reports.md`; [`REPORT_FORMAT`]
//! changes when a field changes meaning or goes away.
//!
//! # Examples
//! ```
//! use ferry_profile::{analysis, sample::sample_run, LossPolicy};
//! let r = analysis::report(&sample_run(LossPolicy::Block));
//! assert_eq!(r.run.tasks, 6);
//! assert_eq!(r.kernels[0].kernel, "relu"); // the most device time first
//! let cp = r.critical_path.static_by_count.as_ref().unwrap();
//! assert_eq!(cp.length, 3);
//! let d = analysis::diff(&r, &r);
//! assert!(d.is_zero());
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model::{CoreType, LossPolicy, RunModel};
use super::views::{kernel_stats, stall_inflated_tasks};
use super::{OpenedRun, RunOutcome};

mod critical;
mod diff;
mod listing;
mod session;
#[cfg(test)]
mod tests;
mod text;
pub use text::KernelSort;

pub use critical::{
    critical_paths, observed_path, static_path, CriticalPaths, ObservedPath, ObservedStep,
    PathTask, StaticPath, WaitKind, Weight,
};
pub use diff::{diff, CriticalPathDiff, Diff, KernelDelta, LossDiff, Pair, SetupChange, StallDiff};
pub use listing::{
    deps_listing, deps_listing_filtered, dump_listing, DepsListing, DepsTask, DumpListing,
    DumpedArgRow, HbViolation, TaskEdge,
};
pub use session::{
    session_diff, session_report, KernelSpread, KernelSpreadDelta, SessionDiff, SessionReport,
    SessionRunRow, Spread, SpreadPair, SteadyState, WARMUP_HINT_RATIO,
};

/// Version of the [`Report`] and [`Diff`] JSON layouts.
pub const REPORT_FORMAT: u32 = 3;

/// A task id as ferry prints it: `0x` and its hex digits (`0x13`, `0x100000003`).
pub fn task_hex(id: u64) -> String {
    format!("{id:#x}")
}

/// Everything `ferry report` says about one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`REPORT_FORMAT`].
    pub format: u32,
    /// The run as a whole.
    pub run: RunOverview,
    /// How the run ended, from its manifest (`None`: not recorded — no manifest, or one from
    /// before outcomes were recorded). A failed run's profile is complete; its figures are
    /// those of the run that failed.
    #[serde(default)]
    pub outcome: Option<RunOutcome>,
    /// One row per kernel, the most device time (Σ exec) first.
    pub kernels: Vec<KernelRow>,
    /// One row per core of the run, by core id.
    pub cores: Vec<CoreRow>,
    /// The PMU rows summed per kernel (`None`: no `pmu.csv`).
    pub pmu: Option<PmuSummary>,
    /// Tasks whose timestamps break `dispatch <= start <= end <= finish`.
    pub order_violations: u64,
    /// AICore executions without their AICPU dispatch/finish record (swimlane level >= 2).
    pub missing_aicpu_records: u64,
    /// Lanes whose writers waited for a free buffer.
    pub stalls: Stalls,
    /// Loss accounting of every lane.
    pub loss: Loss,
    /// The static and observed critical paths.
    pub critical_path: CriticalPaths,
}

/// The run as a whole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOverview {
    /// Arch name.
    pub arch: String,
    /// Device clock in Hz (the unit of every `*_cycles`).
    pub clock_hz: u64,
    /// ChipSwimlane level (0: no swimlane).
    pub swimlane_level: u32,
    /// Cores in the run.
    pub cores: u32,
    /// Distinct tasks that ran (task ids in the swimlane).
    pub tasks: u64,
    /// Block executions (an SPMD task of `b` blocks counts `b`).
    pub blocks: u64,
    /// Tasks in `deps.json` (`None`: no `deps.json`).
    pub submitted_tasks: Option<u64>,
    /// First timestamp of any task (its dispatch when known, else its start), in cycles.
    pub first_cycle: u64,
    /// Last timestamp of any task (its finish when known, else its end), in cycles.
    pub last_cycle: u64,
    /// `last_cycle - first_cycle`.
    pub wall_cycles: u64,
    /// `wall_cycles` in nanoseconds.
    pub wall_ns: u64,
    /// Which run of a session over several runs this is (absent for a session's only run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<crate::RunLabel>,
    /// The subsystems that were on but recorded nothing (`PMU`, `ScopeStats`, …; empty when
    /// each recorded something): said in one line, no empty table drawn.
    #[serde(default)]
    pub no_records: Vec<String>,
    /// Tasks of `deps.json` with no slice in the swimlane (0 without either file): in a failed
    /// run, the tasks that never ran.
    #[serde(default)]
    pub no_slice: u64,
    /// The first [`NO_SLICE_SHOWN`] of them, in submission order.
    #[serde(default)]
    pub no_slice_first: Vec<String>,
}

/// How many of the tasks with no slice a report names ([`RunOverview::no_slice_first`]).
pub const NO_SLICE_SHOWN: usize = 8;

/// One kernel's time, summed over its tasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelRow {
    /// Kernel name (`func<N>` when the run names none, `unknown` without a kernel id).
    pub kernel: String,
    /// Kernel function id.
    pub func_id: Option<i32>,
    /// Distinct tasks.
    pub tasks: u64,
    /// Block executions.
    pub blocks: u64,
    /// Σ end − start over the blocks.
    pub exec_cycles: u64,
    /// `exec_cycles` in nanoseconds.
    pub exec_ns: u64,
    /// This kernel's share of all kernels' `exec_cycles`, 0..=1.
    pub exec_share: f64,
    /// Blocks with AICPU timestamps: the count the four sums below are over.
    pub with_aicpu: u64,
    /// Σ finish − dispatch.
    pub latency_cycles: u64,
    /// Σ receive − dispatch.
    pub head_propagation_cycles: u64,
    /// Σ start − receive.
    pub head_setup_cycles: u64,
    /// Σ finish − end.
    pub tail_cycles: u64,
    /// Exec over latency of the blocks with AICPU timestamps, in percent.
    pub exec_pct: Option<f64>,
}

/// One core's busy time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoreRow {
    /// Core id.
    pub core: u32,
    /// `aic` or `aiv`.
    pub core_type: CoreType,
    /// AICPU scheduler thread that owns the core (−1: unassigned).
    pub thread: i32,
    /// Blocks the core ran.
    pub blocks: u64,
    /// Cycles with at least one block running (overlapping blocks count once).
    pub busy_cycles: u64,
    /// `busy_cycles` over the run's wall time, 0..=1.
    pub utilisation: f64,
}

/// The PMU rows of `pmu.csv`, summed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmuSummary {
    /// Event type the counters were programmed with.
    pub event_type: u32,
    /// Counter names, in the order of every `counters` below.
    pub counter_names: Vec<String>,
    /// Per kernel (by the row's `func_id`), the most `total_cycles` first.
    pub kernels: Vec<PmuKernel>,
    /// All rows.
    pub total: PmuKernel,
}

/// PMU sums of one kernel's rows (or of all rows).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmuKernel {
    /// Kernel name (`all` for the total).
    pub kernel: String,
    /// Rows summed.
    pub rows: u64,
    /// Σ `pmu_total_cycles`.
    pub total_cycles: u64,
    /// Σ of each counter, in `counter_names` order.
    pub counters: Vec<u64>,
}

/// Lanes whose writers waited at their gates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stalls {
    /// Block (lossless) or Drop.
    pub policy: LossPolicy,
    /// One wait's budget, in cycles.
    pub budget_cycles: u64,
    /// Σ `stall_cycles` over every lane.
    pub total_stall_cycles: u64,
    /// The lanes that stalled, the longest total first.
    pub lanes: Vec<StalledLane>,
    /// Tasks whose finish was seen while their scheduler's lane was stalled (their latency and
    /// tail may be inflated by the stall; start and end stay exact).
    pub inflated_tasks: Vec<String>,
}

/// One lane that stalled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StalledLane {
    /// Lane name.
    pub lane: String,
    /// AICPU thread that writes it.
    pub thread: u32,
    /// Cycles waited in all.
    pub stall_cycles: u64,
    /// Waits (at least 1 when only the total is known).
    pub waits: u64,
    /// The longest wait, in cycles.
    pub longest_cycles: u64,
}

/// Loss accounting: every lane's produced, collected and dropped records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loss {
    /// Σ produced.
    pub produced: u64,
    /// Σ collected.
    pub collected: u64,
    /// Σ dropped.
    pub dropped: u64,
    /// Whether every lane has `produced == collected + dropped`.
    pub reconciles: bool,
    /// Per lane.
    pub lanes: Vec<LossLane>,
    /// ArgsDump records dropped and arguments overwritten (`None`: no argument dump).
    pub args_dropped: Option<[u64; 2]>,
    /// ScopeStats records dropped (`None`: no scope stats).
    pub scopes_dropped: Option<u64>,
}

/// One lane's loss line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossLane {
    /// Lane name.
    pub lane: String,
    /// AICPU thread that writes it.
    pub thread: u32,
    /// Records the device attempted to write (DepGen and ArgsDump lanes: 8-byte words).
    pub produced: u64,
    /// Records the host collected.
    pub collected: u64,
    /// Records the device counted dropped.
    pub dropped: u64,
    /// Cycles the writer waited.
    pub stall_cycles: u64,
    /// `produced == collected + dropped`.
    pub reconciles: bool,
}

/// The report of `run`.
pub fn report(run: &RunModel) -> Report {
    let m = &run.meta;
    let tasks = run.tasks();
    let level = run.swimlane.as_ref().map_or(0, |sw| sw.level);
    let distinct: std::collections::HashSet<u64> = tasks.iter().map(|t| t.task_id).collect();
    let no_slice: Vec<u64> = match (&run.deps, &run.swimlane) {
        (Some(g), Some(_)) => {
            g.tasks.iter().map(|t| t.task_id).filter(|id| !distinct.contains(id)).collect()
        }
        _ => Vec::new(),
    };
    let first = tasks.iter().map(|t| t.dispatch.unwrap_or(t.start).min(t.start)).min().unwrap_or(0);
    let last = tasks.iter().map(|t| t.finish.unwrap_or(t.end).max(t.end)).max().unwrap_or(0);
    let wall = last.saturating_sub(first);
    let summary = RunOverview {
        arch: m.arch.clone(),
        clock_hz: m.clock_freq_hz,
        swimlane_level: level,
        cores: m.num_cores() as u32,
        tasks: distinct.len() as u64,
        blocks: tasks.len() as u64,
        submitted_tasks: run.deps.as_ref().map(|d| d.tasks.len() as u64),
        first_cycle: first,
        last_cycle: last,
        wall_cycles: wall,
        wall_ns: m.cycles_to_ns(wall),
        run: m.run,
        no_records: run.no_records().iter().map(|s| s.title().to_string()).collect(),
        no_slice: no_slice.len() as u64,
        no_slice_first: no_slice.iter().take(NO_SLICE_SHOWN).map(|&id| task_hex(id)).collect(),
    };

    let stats = kernel_stats(run);
    let all_exec = stats.iter().map(|k| k.exec).fold(0u64, u64::saturating_add);
    let mut kernels: Vec<KernelRow> = stats
        .iter()
        .map(|k| KernelRow {
            kernel: k.name.clone(),
            func_id: k.func_id,
            tasks: k.tasks,
            blocks: k.count,
            exec_cycles: k.exec,
            exec_ns: m.cycles_to_ns(k.exec),
            exec_share: if all_exec == 0 { 0.0 } else { k.exec as f64 / all_exec as f64 },
            with_aicpu: k.with_aicpu,
            latency_cycles: k.latency,
            head_propagation_cycles: k.head_propagation,
            head_setup_cycles: k.head_setup,
            tail_cycles: k.tail,
            exec_pct: k.exec_pct(&tasks),
        })
        .collect();
    kernels.sort_by(|a, b| b.exec_cycles.cmp(&a.exec_cycles).then_with(|| a.kernel.cmp(&b.kernel)));

    let missing_aicpu = match (&run.swimlane, level >= 2) {
        (Some(sw), true) => sw
            .aicore_tasks
            .len()
            .saturating_sub(tasks.iter().filter(|t| t.dispatch.is_some()).count())
            as u64,
        _ => 0,
    };

    Report {
        format: REPORT_FORMAT,
        kernels,
        cores: cores(run, &tasks, first, wall),
        pmu: pmu_summary(run),
        order_violations: tasks.iter().filter(|t| !t.is_ordered()).count() as u64,
        missing_aicpu_records: missing_aicpu,
        stalls: stalls(run),
        loss: loss(run),
        critical_path: critical_paths(run, &tasks),
        run: summary,
        outcome: None,
    }
}

/// The [`Report`] of a run opened from its directory ([`open_run`](crate::open_run)), with the
/// run's outcome from its manifest.
pub fn report_opened(opened: &OpenedRun) -> Report {
    Report { outcome: opened.outcome.clone(), ..report(&opened.run) }
}

/// Per-core busy time: the union of each core's block intervals, one sort per core.
fn cores(run: &RunModel, tasks: &[super::JoinedTask], first: u64, wall: u64) -> Vec<CoreRow> {
    let m = &run.meta;
    let mut spans: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for t in tasks {
        spans.entry(t.core).or_default().push((t.start.max(first), t.end.max(t.start)));
    }
    // The declared cores, and any other core a record names: a row per core that exists, never
    // one per number below the highest id a (possibly damaged) record carries.
    let declared = u32::try_from(m.num_cores()).unwrap_or(u32::MAX);
    let named: Vec<u32> = spans.keys().copied().filter(|&c| c >= declared).collect();
    (0..declared)
        .chain(named)
        .map(|core| {
            let mut s = spans.remove(&core).unwrap_or_default();
            s.sort_unstable();
            let (mut busy, mut reach) = (0u64, 0u64);
            for &(a, b) in &s {
                let a = a.max(reach);
                if b > a {
                    busy = busy.saturating_add(b - a);
                    reach = b;
                }
            }
            CoreRow {
                core,
                core_type: m.core_types.get(core as usize).copied().unwrap_or(CoreType::Aiv),
                thread: m.core_to_thread.get(core as usize).copied().unwrap_or(-1),
                blocks: s.len() as u64,
                busy_cycles: busy,
                utilisation: if wall == 0 { 0.0 } else { (busy as f64 / wall as f64).min(1.0) },
            }
        })
        .collect()
}

/// The PMU rows summed per kernel and in all.
fn pmu_summary(run: &RunModel) -> Option<PmuSummary> {
    let p = run.pmu.as_ref()?;
    let width = p.counter_names.len();
    let add = |k: &mut PmuKernel, r: &super::PmuRow| {
        k.rows += 1;
        k.total_cycles = k.total_cycles.saturating_add(r.pmu_total_cycles);
        if k.counters.len() < width {
            k.counters.resize(width, 0);
        }
        for (s, v) in k.counters.iter_mut().zip(r.counters.iter()) {
            *s = s.saturating_add(*v);
        }
    };
    let mut by: BTreeMap<u32, PmuKernel> = BTreeMap::new();
    let mut total =
        PmuKernel { kernel: "all".into(), counters: vec![0; width], ..Default::default() };
    for r in &p.rows {
        let k = by.entry(r.func_id).or_insert_with(|| PmuKernel {
            kernel: run.kernel_name(i32::try_from(r.func_id).ok()),
            counters: vec![0; width],
            ..Default::default()
        });
        add(k, r);
        add(&mut total, r);
    }
    let mut kernels: Vec<PmuKernel> = by.into_values().collect();
    kernels
        .sort_by(|a, b| b.total_cycles.cmp(&a.total_cycles).then_with(|| a.kernel.cmp(&b.kernel)));
    Some(PmuSummary {
        event_type: p.event_type,
        counter_names: p.counter_names.clone(),
        kernels,
        total,
    })
}

fn stalls(run: &RunModel) -> Stalls {
    let l = &run.loss;
    let lanes = super::views::stalled_lanes(run)
        .into_iter()
        .map(|ln| StalledLane {
            lane: ln.lane.clone(),
            thread: ln.thread,
            stall_cycles: ln.stall_cycles,
            waits: (ln.stalls.len() as u64).max(1),
            longest_cycles: ln
                .stalls
                .iter()
                .map(|w| w[1].saturating_sub(w[0]))
                .max()
                .unwrap_or(ln.stall_cycles),
        })
        .collect();
    Stalls {
        policy: l.policy,
        budget_cycles: l.budget_cycles,
        total_stall_cycles: l.lanes.iter().map(|x| x.stall_cycles).fold(0, u64::saturating_add),
        lanes,
        inflated_tasks: stall_inflated_tasks(run).iter().map(|t| task_hex(t.task_id)).collect(),
    }
}

fn loss(run: &RunModel) -> Loss {
    let l = &run.loss;
    let (produced, collected, dropped) = l.totals();
    Loss {
        produced,
        collected,
        dropped,
        reconciles: l.reconciles(),
        lanes: l
            .lanes
            .iter()
            .map(|ln| LossLane {
                lane: ln.lane.clone(),
                thread: ln.thread,
                produced: ln.produced,
                collected: ln.collected,
                dropped: ln.dropped,
                stall_cycles: ln.stall_cycles,
                reconciles: ln.reconciles(),
            })
            .collect(),
        args_dropped: run.args.as_ref().map(|a| [a.dropped_records, a.dropped_overwrite]),
        scopes_dropped: run.scopes.as_ref().map(|s| s.dropped),
    }
}
