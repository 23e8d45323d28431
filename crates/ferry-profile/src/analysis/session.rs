//! [`SessionReport`]: a session over several runs (`ferry run --repeat N`) read as one profile —
//! each run's wall time and the gap before it, warm-up runs set apart, and one table per kernel
//! over the steady runs (mean, min, max) — and [`SessionDiff`], two sessions compared on their
//! steady state.
//!
//! A run's wall time is its device time from its first dispatch to its last finish
//! ([`RunOverview::wall_ns`](super::RunOverview::wall_ns)); the gap before it is the device time
//! from the end of the run before it to its first dispatch: the time the launch pipeline left
//! the chip idle between runs. Runs of one session share one device clock, so gaps are exact.
//!
//! # Examples
//! ```
//! use ferry_profile::analysis::{report, session_report, SessionReport};
//! use ferry_profile::sample::sample_run;
//! use ferry_profile::{session_runs, LossPolicy};
//! let runs: Vec<_> = (0..3).map(|_| sample_run(LossPolicy::Block)).collect();
//! let reports = runs.iter().map(report).collect();
//! let s: SessionReport = session_report(&session_runs(&runs), reports, 1);
//! assert_eq!(s.runs.len(), 3);
//! assert!(s.runs[0].warmup && !s.runs[1].warmup);
//! assert_eq!(s.steady.as_ref().unwrap().runs, 2);
//! ```
use serde::{Deserialize, Serialize};

use super::diff::SetupChange;
use super::text::duration;
use super::{Report, REPORT_FORMAT};
use crate::runs::SessionRuns;
use crate::RunOutcome;

/// A mean, a minimum and a maximum over runs, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spread {
    /// The mean, rounded to the nanosecond.
    pub mean: u64,
    /// The least.
    pub min: u64,
    /// The most.
    pub max: u64,
}

impl Spread {
    /// The spread of `values` (`None` when there are none).
    pub fn of(values: impl IntoIterator<Item = u64>) -> Option<Spread> {
        let (mut n, mut sum, mut min, mut max) = (0u128, 0u128, u64::MAX, 0u64);
        for v in values {
            n += 1;
            sum += u128::from(v);
            min = min.min(v);
            max = max.max(v);
        }
        (n > 0).then(|| Spread { mean: ((sum + n / 2) / n) as u64, min, max })
    }
}

/// One run of a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionRunRow {
    /// The run, from 0.
    pub index: u32,
    /// Its directory, relative to the session's.
    pub dir: String,
    /// Whether it is a warm-up run, set apart from the steady state.
    pub warmup: bool,
    /// Device time from its first dispatch to its last finish, in nanoseconds.
    pub wall_ns: u64,
    /// Device time from the end of the run before it to its first dispatch, in nanoseconds
    /// (`None` for the first run, or when either run recorded no task).
    pub gap_ns: Option<u64>,
    /// Distinct tasks that ran.
    pub tasks: u64,
    /// Block executions.
    pub blocks: u64,
    /// Records its lanes produced.
    pub produced: u64,
    /// Records its lanes dropped.
    pub dropped: u64,
    /// Whether its loss accounting reconciles on every lane.
    pub reconciles: bool,
    /// How it ended, when recorded.
    pub outcome: Option<RunOutcome>,
}

/// One kernel over the steady runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelSpread {
    /// Kernel name.
    pub kernel: String,
    /// Distinct tasks per run (the most any steady run had).
    pub tasks: u64,
    /// Block executions per run (the most any steady run had).
    pub blocks: u64,
    /// Σ exec per run, in nanoseconds (a run without the kernel counts 0).
    pub exec_ns: Spread,
    /// Mean exec per block over every steady run's blocks, in nanoseconds.
    pub exec_per_block_ns: u64,
    /// This kernel's share of all kernels' mean exec, 0..=1.
    pub share: f64,
}

/// The runs after the warm-up, as one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SteadyState {
    /// The first steady run's index.
    pub first: u32,
    /// The last steady run's index.
    pub last: u32,
    /// Steady runs.
    pub runs: u32,
    /// Wall time per run.
    pub wall_ns: Spread,
    /// Gap before each steady run (the first run of the session has none).
    pub gap_ns: Option<Spread>,
    /// Busy cores' share of the cores' time, mean over the steady runs, 0..=1.
    pub busy: f64,
    /// Records dropped over the steady runs.
    pub dropped: u64,
    /// Records produced over the steady runs.
    pub produced: u64,
    /// Whether every steady run's loss accounting reconciles.
    pub reconciles: bool,
    /// Per kernel, the most mean device time first.
    pub kernels: Vec<KernelSpread>,
}

/// A session over several runs, read as one profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionReport {
    /// [`REPORT_FORMAT`].
    pub format: u32,
    /// Runs set apart as warm-up (the first `warmup` runs).
    pub warmup: u32,
    /// Every run, in launch order.
    pub runs: Vec<SessionRunRow>,
    /// The steady runs as one (`None`: every run is a warm-up run).
    pub steady: Option<SteadyState>,
    /// When no run is set apart: the first run's wall time over the others' median, when it
    /// is at least [`WARMUP_HINT_RATIO`] (a warm-up run the user may want to set apart).
    pub warmup_hint: Option<f64>,
    /// Each run's full report, in launch order.
    pub reports: Vec<Report>,
}

/// How much longer than the others' median the first run must take for the report to suggest
/// setting it apart.
pub const WARMUP_HINT_RATIO: f64 = 1.5;

/// Busy cycles over the cores' time of `r`, 0..=1.
fn busy(r: &Report) -> f64 {
    let busy = r.cores.iter().fold(0u128, |a, c| a + u128::from(c.busy_cycles));
    let whole = u128::from(r.run.wall_cycles) * r.cores.len() as u128;
    if whole == 0 {
        0.0
    } else {
        busy as f64 / whole as f64
    }
}

fn cycles_ns(r: &Report, cycles: u64) -> u64 {
    if r.run.clock_hz == 0 {
        return cycles;
    }
    (u128::from(cycles) * 1_000_000_000 / u128::from(r.run.clock_hz)) as u64
}

/// The session of `runs` (its `runs.json`) with each run's report, in the same order; the
/// first `warmup` runs are set apart (clamped to the runs there are).
pub fn session_report(runs: &SessionRuns, reports: Vec<Report>, warmup: u32) -> SessionReport {
    let warmup = warmup.min(reports.len() as u32);
    let mut rows: Vec<SessionRunRow> = Vec::with_capacity(reports.len());
    let mut prev_end: Option<u64> = None;
    for (k, r) in reports.iter().enumerate() {
        let listed = runs.runs.get(k);
        let index = listed.map_or(k as u32, |l| l.index);
        let ran = r.run.blocks > 0;
        let gap_ns = match (prev_end, ran) {
            (Some(end), true) => Some(cycles_ns(r, r.run.first_cycle.saturating_sub(end))),
            _ => None,
        };
        prev_end = ran.then_some(r.run.last_cycle);
        rows.push(SessionRunRow {
            index,
            dir: listed.map_or_else(|| crate::RunLabel::dir_name(index), |l| l.dir.clone()),
            warmup: (k as u32) < warmup,
            wall_ns: r.run.wall_ns,
            gap_ns,
            tasks: r.run.tasks,
            blocks: r.run.blocks,
            produced: r.loss.produced,
            dropped: r.loss.dropped,
            reconciles: r.loss.reconciles,
            outcome: r.outcome.clone(),
        });
    }
    let steady_rows: Vec<usize> = (warmup as usize..reports.len()).collect();
    let steady = steady(&rows, &reports, &steady_rows);
    let warmup_hint = (warmup == 0 && rows.len() >= 3)
        .then(|| {
            let mut rest: Vec<u64> = rows[1..].iter().map(|r| r.wall_ns).collect();
            rest.sort_unstable();
            let median = rest[rest.len() / 2];
            (median > 0).then(|| rows[0].wall_ns as f64 / median as f64)
        })
        .flatten()
        .filter(|&x| x >= WARMUP_HINT_RATIO);
    SessionReport { format: REPORT_FORMAT, warmup, runs: rows, steady, warmup_hint, reports }
}

fn steady(rows: &[SessionRunRow], reports: &[Report], idx: &[usize]) -> Option<SteadyState> {
    let (&first, &last) = (idx.first()?, idx.last()?);
    let mut names: Vec<&str> =
        idx.iter().flat_map(|&k| reports[k].kernels.iter().map(|r| r.kernel.as_str())).collect();
    names.sort_unstable();
    names.dedup();
    let mut kernels: Vec<KernelSpread> = names
        .into_iter()
        .map(|name| {
            let rows: Vec<Option<&super::KernelRow>> =
                idx.iter().map(|&k| reports[k].kernels.iter().find(|r| r.kernel == name)).collect();
            let exec_ns =
                Spread::of(rows.iter().map(|r| r.map_or(0, |r| r.exec_ns))).unwrap_or_default();
            let blocks: u64 = rows.iter().flatten().map(|r| r.blocks).sum();
            let exec: u128 = rows.iter().flatten().map(|r| u128::from(r.exec_ns)).sum();
            KernelSpread {
                kernel: name.to_string(),
                tasks: rows.iter().flatten().map(|r| r.tasks).max().unwrap_or(0),
                blocks: rows.iter().flatten().map(|r| r.blocks).max().unwrap_or(0),
                exec_ns,
                exec_per_block_ns: if blocks == 0 { 0 } else { (exec / u128::from(blocks)) as u64 },
                share: 0.0,
            }
        })
        .collect();
    let total: u128 = kernels.iter().map(|k| u128::from(k.exec_ns.mean)).sum();
    for k in &mut kernels {
        k.share = if total == 0 { 0.0 } else { k.exec_ns.mean as f64 / total as f64 };
    }
    kernels.sort_by(|a, b| b.exec_ns.mean.cmp(&a.exec_ns.mean).then(a.kernel.cmp(&b.kernel)));
    let busy_sum: f64 = idx.iter().map(|&k| busy(&reports[k])).sum();
    Some(SteadyState {
        first: rows[first].index,
        last: rows[last].index,
        runs: idx.len() as u32,
        wall_ns: Spread::of(idx.iter().map(|&k| rows[k].wall_ns)).unwrap_or_default(),
        gap_ns: Spread::of(idx.iter().filter_map(|&k| rows[k].gap_ns)),
        busy: busy_sum / idx.len() as f64,
        dropped: idx.iter().map(|&k| rows[k].dropped).sum(),
        produced: idx.iter().map(|&k| rows[k].produced).sum(),
        reconciles: idx.iter().all(|&k| rows[k].reconciles),
        kernels,
    })
}

fn ms(ns: u64) -> String {
    duration(ns as f64)
}

impl SessionReport {
    /// The steady runs' span, `runs 1–4` (or `run 3`).
    pub fn steady_label(&self) -> Option<String> {
        let s = self.steady.as_ref()?;
        Some(if s.first == s.last {
            format!("run {}", s.first)
        } else {
            format!("runs {}–{}", s.first, s.last)
        })
    }

    /// The steady state's per-kernel table as CSV: a header, then one line per kernel (times in
    /// microseconds); `top` kernels at most.
    pub fn kernels_csv(&self, top: Option<usize>) -> String {
        let mut out = String::from(
            "kernel,tasks_per_run,blocks_per_run,mean_us,min_us,max_us,share,exec_per_block_us\n",
        );
        let us = |ns: u64| ns as f64 / 1e3;
        let kernels = self.steady.iter().flat_map(|st| st.kernels.iter());
        for k in kernels.take(top.unwrap_or(usize::MAX)) {
            out += &format!(
                "{},{},{},{:.3},{:.3},{:.3},{:.4},{:.3}\n",
                k.kernel,
                k.tasks,
                k.blocks,
                us(k.exec_ns.mean),
                us(k.exec_ns.min),
                us(k.exec_ns.max),
                k.share,
                us(k.exec_per_block_ns)
            );
        }
        out
    }

    /// The report as text: a verdict over the steady runs, the runs' table with wall times and
    /// gaps, one table per kernel over the steady runs; `top` kernels at most.
    pub fn text(&self, dir: &str, top: Option<usize>) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let n = self.runs.len();
        let set_apart = match self.warmup {
            0 => String::new(),
            1 => ", run 0 a warm-up run set apart".to_string(),
            w => format!(", runs 0–{} warm-up runs set apart", w - 1),
        };
        let _ = writeln!(s, "ferry report: a session of {n} runs in {dir}{set_apart}");
        match (&self.steady, self.steady_label()) {
            (Some(st), Some(label)) => {
                let gap = st.gap_ns.map_or_else(String::new, |g| {
                    format!(", {} between runs (min {}, max {})", ms(g.mean), ms(g.min), ms(g.max))
                });
                let loss = match (st.dropped, st.reconciles) {
                    (0, true) => format!("loss: none ({} records)", st.produced),
                    (d, true) => format!("loss: {d} of {} records dropped", st.produced),
                    (d, false) => format!(
                        "loss: {d} of {} records dropped, and the accounting does NOT reconcile",
                        st.produced
                    ),
                };
                let _ = writeln!(
                    s,
                    "verdict: steady state over {label}: wall {} per run (min {}, max {}){gap}; \
                     cores {:.1} % busy; {loss}",
                    ms(st.wall_ns.mean),
                    ms(st.wall_ns.min),
                    ms(st.wall_ns.max),
                    st.busy * 100.0
                );
            }
            _ => {
                let _ = writeln!(s, "verdict: every run is a warm-up run: no steady state");
            }
        }
        if let Some(x) = self.warmup_hint {
            let _ = writeln!(
                s,
                "hint: {} took {x:.1}x the other runs' median: a warm-up run? `--warmup 1` sets \
                 it apart (ferry report, or ferry run to record it)",
                self.runs[0].dir
            );
        }
        let failed: Vec<&SessionRunRow> = self
            .runs
            .iter()
            .filter(|r| r.outcome.as_ref().is_some_and(|o| o.failure().is_some()))
            .collect();
        for r in failed {
            let why = r.outcome.as_ref().and_then(RunOutcome::failure).unwrap_or_default();
            let _ = writeln!(s, "{} FAILED: {why}", r.dir);
        }
        let _ = writeln!(
            s,
            "\nRuns (wall: first dispatch to last finish on the device; gap: device time since \
             the run before ended):"
        );
        let _ = writeln!(
            s,
            "  {:<9} {:>12} {:>12} {:>7} {:>7} {:>9} {:>8}  reconcile",
            "run", "wall", "gap", "tasks", "blocks", "records", "dropped"
        );
        for r in &self.runs {
            let _ = writeln!(
                s,
                "  {:<9} {:>12} {:>12} {:>7} {:>7} {:>9} {:>8}  {}{}",
                r.dir,
                ms(r.wall_ns),
                r.gap_ns.map_or_else(|| "-".to_string(), ms),
                r.tasks,
                r.blocks,
                r.produced,
                r.dropped,
                if r.reconciles { "ok" } else { "FAILS" },
                if r.warmup { "   warm-up" } else { "" }
            );
        }
        if let (Some(st), Some(label)) = (&self.steady, self.steady_label()) {
            let _ = writeln!(
                s,
                "\nPer kernel over {label} (device time per run: mean, min, max; exec per block: \
                 mean):"
            );
            let _ = writeln!(
                s,
                "  {:<16} {:>9} {:>10} {:>12} {:>12} {:>12} {:>6} {:>12}",
                "kernel", "tasks/run", "blocks/run", "mean", "min", "max", "share", "exec/block"
            );
            let shown = top.unwrap_or(usize::MAX);
            for k in st.kernels.iter().take(shown) {
                let _ = writeln!(
                    s,
                    "  {:<16} {:>9} {:>10} {:>12} {:>12} {:>12} {:>5.1}% {:>12}",
                    k.kernel,
                    k.tasks,
                    k.blocks,
                    ms(k.exec_ns.mean),
                    ms(k.exec_ns.min),
                    ms(k.exec_ns.max),
                    k.share * 100.0,
                    ms(k.exec_per_block_ns)
                );
            }
            if st.kernels.len() > shown {
                let _ = writeln!(s, "  ... ({} more)", st.kernels.len() - shown);
            }
        }
        if let Some(r) = self.runs.first() {
            let _ = writeln!(s, "\nEach run's full report: ferry report {dir}/{} (…)", r.dir);
        }
        s
    }
}

/// Two values of a [`Spread`], A's and B's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpreadPair {
    /// Session A's (`None`: A has none).
    pub a: Option<Spread>,
    /// Session B's.
    pub b: Option<Spread>,
    /// `b.mean − a.mean`, in nanoseconds.
    pub delta_ns: i64,
    /// Whether the ranges do not overlap: B's least above A's most (slower beyond the runs'
    /// spread) or B's most below A's least (faster beyond it).
    pub beyond_spread: bool,
}

impl SpreadPair {
    /// `a` against `b` (a missing side counts as 0).
    pub fn new(a: Option<Spread>, b: Option<Spread>) -> SpreadPair {
        let (ma, mb) = (a.map_or(0, |s| s.mean), b.map_or(0, |s| s.mean));
        let delta_ns =
            (i128::from(mb) - i128::from(ma)).clamp(i64::MIN.into(), i64::MAX.into()) as i64;
        let beyond_spread = match (a, b) {
            (Some(a), Some(b)) => b.min > a.max || b.max < a.min,
            (None, Some(_)) | (Some(_), None) => true,
            (None, None) => false,
        };
        SpreadPair { a, b, delta_ns, beyond_spread }
    }

    /// `b.mean / a.mean` (`None` when A has none or 0).
    pub fn ratio(&self) -> Option<f64> {
        let a = self.a?.mean;
        (a > 0).then(|| self.b.map_or(0, |b| b.mean) as f64 / a as f64)
    }
}

/// One kernel in the two sessions' steady states.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelSpreadDelta {
    /// Kernel name.
    pub kernel: String,
    /// Σ exec per run.
    pub exec_ns: SpreadPair,
}

/// Session B's steady state against session A's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionDiff {
    /// [`REPORT_FORMAT`].
    pub format: u32,
    /// How the sessions' setups differ (their first steady runs'), stated first.
    pub setup: Vec<SetupChange>,
    /// Steady runs, A then B.
    pub runs: [u32; 2],
    /// Warm-up runs set apart, A then B.
    pub warmup: [u32; 2],
    /// Wall time per run.
    pub wall_ns: SpreadPair,
    /// Gap between runs.
    pub gap_ns: SpreadPair,
    /// The first kernel that is slower beyond the runs' spread, the most first (`None`: none).
    pub regression: Option<String>,
    /// Every kernel of either steady state, the biggest regression first.
    pub kernels: Vec<KernelSpreadDelta>,
    /// Records dropped over the steady runs, A then B.
    pub dropped: [u64; 2],
    /// Whether each session's steady runs reconcile.
    pub reconciles: [bool; 2],
}

/// Session `b` against session `a`, on their steady states (a profile of one run is a
/// session of one). `setup` is what the caller found set up differently (e.g.
/// [`diff`](super::diff)'s of the first steady runs' reports, plus the runs' own records).
pub fn session_diff(a: &SessionReport, b: &SessionReport, setup: Vec<SetupChange>) -> SessionDiff {
    let st = |s: &SessionReport| s.steady.clone();
    let (sa, sb) = (st(a), st(b));
    let mut names: Vec<&str> = sa
        .iter()
        .chain(sb.iter())
        .flat_map(|s| s.kernels.iter().map(|k| k.kernel.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let find = |s: &Option<SteadyState>, n: &str| {
        s.as_ref().and_then(|s| s.kernels.iter().find(|k| k.kernel == n)).map(|k| k.exec_ns)
    };
    let mut kernels: Vec<KernelSpreadDelta> = names
        .into_iter()
        .map(|n| KernelSpreadDelta {
            kernel: n.to_string(),
            exec_ns: SpreadPair::new(find(&sa, n), find(&sb, n)),
        })
        .collect();
    kernels
        .sort_by(|x, y| y.exec_ns.delta_ns.cmp(&x.exec_ns.delta_ns).then(x.kernel.cmp(&y.kernel)));
    let regression = kernels
        .iter()
        .find(|k| k.exec_ns.delta_ns > 0 && k.exec_ns.beyond_spread)
        .map(|k| k.kernel.clone());
    let field =
        |s: &Option<SteadyState>, f: fn(&SteadyState) -> Option<Spread>| s.as_ref().and_then(f);
    SessionDiff {
        format: REPORT_FORMAT,
        setup,
        runs: [sa.as_ref().map_or(0, |s| s.runs), sb.as_ref().map_or(0, |s| s.runs)],
        warmup: [a.warmup, b.warmup],
        wall_ns: SpreadPair::new(field(&sa, |s| Some(s.wall_ns)), field(&sb, |s| Some(s.wall_ns))),
        gap_ns: SpreadPair::new(field(&sa, |s| s.gap_ns), field(&sb, |s| s.gap_ns)),
        regression,
        kernels,
        dropped: [sa.as_ref().map_or(0, |s| s.dropped), sb.as_ref().map_or(0, |s| s.dropped)],
        reconciles: [
            sa.as_ref().is_none_or(|s| s.reconciles),
            sb.as_ref().is_none_or(|s| s.reconciles),
        ],
    }
}

fn pair_text(p: &SpreadPair) -> String {
    let side = |s: Option<Spread>| {
        s.map_or_else(
            || "-".to_string(),
            |s| {
                if s.min == s.max {
                    ms(s.mean)
                } else {
                    format!("{} ({}..{})", ms(s.mean), ms(s.min), ms(s.max))
                }
            },
        )
    };
    let ratio = p.ratio().map_or_else(String::new, |r| format!(", x{r:.3}"));
    let noise = if p.beyond_spread { "" } else { ", within the runs' spread" };
    format!(
        "{} -> {} ({}{}{ratio}{noise})",
        side(p.a),
        side(p.b),
        if p.delta_ns >= 0 { "+" } else { "-" },
        duration(p.delta_ns.unsigned_abs() as f64)
    )
}

impl SessionDiff {
    /// The comparison as text: setup differences first, then wall and gaps, then kernels (at
    /// most `top`), the biggest regression first.
    pub fn text(&self, top: Option<usize>) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "ferry diff: steady states compared, B against A ({} runs against {}; warm-up runs \
             set apart: {} and {})",
            self.runs[1], self.runs[0], self.warmup[1], self.warmup[0]
        );
        if !self.setup.is_empty() {
            let _ = writeln!(s, "set up differently (this explains what follows):");
            for c in &self.setup {
                let _ = writeln!(s, "  {}: {} -> {}", c.what, c.a, c.b);
            }
        }
        let _ = writeln!(
            s,
            "{}",
            match &self.regression {
                Some(k) => format!("regression: {k} is slower beyond the runs' spread"),
                None => "no kernel is slower beyond the runs' spread".to_string(),
            }
        );
        let _ = writeln!(s, "wall per run: {}", pair_text(&self.wall_ns));
        if self.gap_ns.a.is_some() || self.gap_ns.b.is_some() {
            let _ = writeln!(s, "gap between runs: {}", pair_text(&self.gap_ns));
        }
        let _ = writeln!(s, "\nPer kernel (device time per run: mean (min..max)):");
        let shown = top.unwrap_or(usize::MAX);
        for k in self.kernels.iter().take(shown) {
            let _ = writeln!(s, "  {:<16} {}", k.kernel, pair_text(&k.exec_ns));
        }
        if self.kernels.len() > shown {
            let _ = writeln!(s, "  ... ({} more)", self.kernels.len() - shown);
        }
        let _ = writeln!(
            s,
            "\nloss: {} -> {} records dropped{}",
            self.dropped[0],
            self.dropped[1],
            if self.reconciles == [true, true] {
                ""
            } else {
                " (an accounting does NOT reconcile)"
            }
        );
        s
    }
}
