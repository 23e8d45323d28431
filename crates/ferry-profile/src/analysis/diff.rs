//! [`Diff`]: two runs' reports compared, B against A (a delta is `b − a`, so a regression is
//! positive).
//!
//! Times compare in nanoseconds, so runs on different clocks (arches) compare too. Kernels match
//! by name; a kernel only one run has compares against 0. The kernel rows are sorted by their
//! delta, the biggest regression first (then the biggest improvement last), and
//! [`Diff::regression`] names the first kernel whose time grew.

use serde::{Deserialize, Serialize};

use super::critical::StaticPath;
use super::{Report, REPORT_FORMAT};
use crate::RunOutcome;

/// A value of A and of B, and `b − a`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pair {
    /// Run A's value.
    pub a: u64,
    /// Run B's value.
    pub b: u64,
    /// `b − a` (saturating at the `i64` range).
    pub delta: i64,
}

impl Pair {
    /// The pair of `a` and `b`.
    pub fn new(a: u64, b: u64) -> Pair {
        let delta = (i128::from(b) - i128::from(a)).clamp(i64::MIN.into(), i64::MAX.into()) as i64;
        Pair { a, b, delta }
    }

    /// `b / a` (`None` when `a` is 0).
    pub fn ratio(&self) -> Option<f64> {
        (self.a > 0).then(|| self.b as f64 / self.a as f64)
    }
}

/// One kernel's time in both runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelDelta {
    /// Kernel name.
    pub kernel: String,
    /// Σ exec, in nanoseconds.
    pub exec_ns: Pair,
    /// Distinct tasks.
    pub tasks: Pair,
    /// Block executions.
    pub blocks: Pair,
    /// `b / a` of `exec_ns` (`None`: A did not run it).
    pub ratio: Option<f64>,
}

/// The critical paths compared (`None` where either run lacks that path).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CriticalPathDiff {
    /// Static path by time: its length in nanoseconds.
    pub static_by_time_ns: Option<Pair>,
    /// Static path by count: its length in tasks.
    pub static_by_count: Option<Pair>,
    /// Whether both static paths by count run through the same kernels in the same order.
    pub same_static_kernels: Option<bool>,
    /// Observed makespan, in nanoseconds.
    pub observed_makespan_ns: Option<Pair>,
    /// Observed path's compute, in nanoseconds.
    pub observed_compute_ns: Option<Pair>,
    /// Observed path's waits (data + core + front gap), in nanoseconds.
    pub observed_wait_ns: Option<Pair>,
    /// Tasks on the observed path.
    pub observed_tasks: Option<Pair>,
}

/// Stall time compared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StallDiff {
    /// Σ stall time over every lane, in nanoseconds.
    pub total_ns: Pair,
    /// Lanes that stalled.
    pub stalled_lanes: Pair,
    /// Tasks whose finish a stall may have inflated.
    pub inflated_tasks: Pair,
}

/// Loss compared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossDiff {
    /// Records produced.
    pub produced: Pair,
    /// Records dropped.
    pub dropped: Pair,
    /// Whether each run's lanes reconcile.
    pub reconciles: [bool; 2],
}

/// One way the two runs were set up differently (compared before anything they measured, which
/// such a difference explains).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupChange {
    /// What differs (`arch`, `clock_hz`, `cores`, `aicpu_threads`, `command`, …).
    pub what: String,
    /// Run A's.
    pub a: String,
    /// Run B's.
    pub b: String,
}

/// Run B compared with run A.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    /// [`REPORT_FORMAT`].
    pub format: u32,
    /// How the runs' setups differ (empty when they match, as far as their profiles tell):
    /// the arch, clock, cores and swimlane level from the reports, and what the caller adds
    /// from the runs' own records ([`Diff::add_setup`]).
    #[serde(default)]
    pub setup: Vec<SetupChange>,
    /// How each run ended, A then B ([`Report::outcome`]).
    #[serde(default)]
    pub outcome: [Option<RunOutcome>; 2],
    /// Wall time, in nanoseconds.
    pub wall_ns: Pair,
    /// Distinct tasks that ran.
    pub tasks: Pair,
    /// Block executions.
    pub blocks: Pair,
    /// The first kernel whose time grew, the most first (`None`: none grew).
    pub regression: Option<String>,
    /// Every kernel of either run, the biggest regression first.
    pub kernels: Vec<KernelDelta>,
    /// The critical paths.
    pub critical_path: CriticalPathDiff,
    /// Stalls.
    pub stalls: StallDiff,
    /// Loss.
    pub loss: LossDiff,
}

impl Diff {
    /// Notes that `what` was `a` in run A and `b` in run B, when they differ.
    pub fn add_setup(&mut self, what: &str, a: &str, b: &str) {
        if a != b && !self.setup.iter().any(|c| c.what == what) {
            self.setup.push(SetupChange { what: what.into(), a: a.into(), b: b.into() });
        }
    }

    /// Whether every delta is zero (a run against itself).
    pub fn is_zero(&self) -> bool {
        let cp = &self.critical_path;
        let opt = [
            cp.static_by_time_ns,
            cp.static_by_count,
            cp.observed_makespan_ns,
            cp.observed_compute_ns,
            cp.observed_wait_ns,
            cp.observed_tasks,
        ];
        let fixed = [
            self.wall_ns,
            self.tasks,
            self.blocks,
            self.stalls.total_ns,
            self.stalls.stalled_lanes,
            self.stalls.inflated_tasks,
            self.loss.produced,
            self.loss.dropped,
        ];
        let zero = fixed
            .iter()
            .chain(self.kernels.iter().flat_map(|k| [&k.exec_ns, &k.tasks, &k.blocks]))
            .chain(opt.iter().flatten())
            .all(|p| p.delta == 0);
        zero
    }
}

fn both<T, U>(a: Option<&T>, b: Option<&T>, f: impl Fn(&T) -> U) -> Option<(U, U)> {
    Some((f(a?), f(b?)))
}

/// Run `b` compared with run `a`.
pub fn diff(a: &Report, b: &Report) -> Diff {
    let ns_a = |c: u64| cycles_ns(a, c);
    let ns_b = |c: u64| cycles_ns(b, c);
    let mut names: Vec<&str> =
        a.kernels.iter().chain(&b.kernels).map(|k| k.kernel.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let find = |r: &'_ Report, n: &str| r.kernels.iter().find(|k| k.kernel == n).cloned();
    let mut kernels: Vec<KernelDelta> = names
        .into_iter()
        .map(|n| {
            let (ka, kb) = (find(a, n), find(b, n));
            let g = |k: &Option<super::KernelRow>, f: fn(&super::KernelRow) -> u64| {
                k.as_ref().map_or(0, f)
            };
            let exec_ns = Pair::new(g(&ka, |k| k.exec_ns), g(&kb, |k| k.exec_ns));
            KernelDelta {
                kernel: n.to_string(),
                ratio: exec_ns.ratio(),
                exec_ns,
                tasks: Pair::new(g(&ka, |k| k.tasks), g(&kb, |k| k.tasks)),
                blocks: Pair::new(g(&ka, |k| k.blocks), g(&kb, |k| k.blocks)),
            }
        })
        .collect();
    kernels.sort_by(|x, y| {
        y.exec_ns.delta.cmp(&x.exec_ns.delta).then_with(|| x.kernel.cmp(&y.kernel))
    });
    let regression = kernels.first().filter(|k| k.exec_ns.delta > 0).map(|k| k.kernel.clone());

    let (ca, cb) = (&a.critical_path, &b.critical_path);
    let pair = |x: Option<(u64, u64)>| x.map(|(x, y)| Pair::new(x, y));
    let kernels_of = |p: &StaticPath| p.tasks.iter().map(|t| t.kernel.clone()).collect::<Vec<_>>();
    let (oa, ob) = (ca.observed.as_ref(), cb.observed.as_ref());
    let waits = |o: &super::ObservedPath| {
        o.data_wait_cycles.saturating_add(o.core_wait_cycles).saturating_add(o.front_gap_cycles)
    };
    let critical_path = CriticalPathDiff {
        static_by_time_ns: pair(
            ca.static_by_time
                .as_ref()
                .zip(cb.static_by_time.as_ref())
                .map(|(x, y)| (ns_a(x.length), ns_b(y.length))),
        ),
        static_by_count: pair(both(
            ca.static_by_count.as_ref(),
            cb.static_by_count.as_ref(),
            |p| p.length,
        )),
        same_static_kernels: both(
            ca.static_by_count.as_ref(),
            cb.static_by_count.as_ref(),
            kernels_of,
        )
        .map(|(x, y)| x == y),
        observed_makespan_ns: pair(oa.zip(ob).map(|(x, y)| (x.makespan_ns, y.makespan_ns))),
        observed_compute_ns: pair(
            oa.zip(ob).map(|(x, y)| (ns_a(x.compute_cycles), ns_b(y.compute_cycles))),
        ),
        observed_wait_ns: pair(oa.zip(ob).map(|(x, y)| (ns_a(waits(x)), ns_b(waits(y))))),
        observed_tasks: pair(oa.zip(ob).map(|(x, y)| (x.tasks.len() as u64, y.tasks.len() as u64))),
    };
    let stalls = StallDiff {
        total_ns: Pair::new(ns_a(a.stalls.total_stall_cycles), ns_b(b.stalls.total_stall_cycles)),
        stalled_lanes: Pair::new(a.stalls.lanes.len() as u64, b.stalls.lanes.len() as u64),
        inflated_tasks: Pair::new(
            a.stalls.inflated_tasks.len() as u64,
            b.stalls.inflated_tasks.len() as u64,
        ),
    };
    let loss = LossDiff {
        produced: Pair::new(a.loss.produced, b.loss.produced),
        dropped: Pair::new(a.loss.dropped, b.loss.dropped),
        reconciles: [a.loss.reconciles, b.loss.reconciles],
    };
    let mut setup = Vec::new();
    for (what, x, y) in [
        ("arch", a.run.arch.clone(), b.run.arch.clone()),
        ("clock_hz", a.run.clock_hz.to_string(), b.run.clock_hz.to_string()),
        ("cores", a.run.cores.to_string(), b.run.cores.to_string()),
        ("swimlane_level", a.run.swimlane_level.to_string(), b.run.swimlane_level.to_string()),
    ] {
        if x != y {
            setup.push(SetupChange { what: what.into(), a: x, b: y });
        }
    }
    Diff {
        format: REPORT_FORMAT,
        setup,
        outcome: [a.outcome.clone(), b.outcome.clone()],
        wall_ns: Pair::new(a.run.wall_ns, b.run.wall_ns),
        tasks: Pair::new(a.run.tasks, b.run.tasks),
        blocks: Pair::new(a.run.blocks, b.run.blocks),
        regression,
        kernels,
        critical_path,
        stalls,
        loss,
    }
}

/// `cycles` of report `r`'s clock in nanoseconds (saturating).
fn cycles_ns(r: &Report, cycles: u64) -> u64 {
    if r.run.clock_hz == 0 {
        return cycles;
    }
    ((u128::from(cycles) * 1_000_000_000) / u128::from(r.run.clock_hz)).min(u128::from(u64::MAX))
        as u64
}
