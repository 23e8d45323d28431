//! The tracks beyond the swimlane (the run summary, clock anchors, loss accounting, PMU counters,
//! scope occupancy, ready-queue depths); the table is in the [parent module](super).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{slice, CounterUnit, Planner, TrackKind, UUID_AICPU, UUID_LANES};
use crate::model::{JoinedTask, LossPolicy, RunLabel, RunModel};
use crate::scopes::ScopePhase;

/// Uuid of the run process track (run summary, clock anchors, loss totals).
pub const UUID_RUN: u64 = 5;
/// Uuid of the PMU process track.
pub const UUID_PMU: u64 = 6;
/// Uuid of the scope occupancy process track.
pub const UUID_SCOPES: u64 = 7;
/// Uuid of the `run` slice track.
pub const UUID_RUN_INFO: u64 = 50;
/// Uuid of the `clock anchors` slice track.
pub const UUID_ANCHORS: u64 = 51;
/// Uuid of the `loss accounting` (totals) slice track.
pub const UUID_LOSS_TOTALS: u64 = 52;
/// The runs of a session read as one, and the gaps between them.
pub const UUID_SESSION_RUNS: u64 = 53;
/// Uuid of the `failed task` slice track (the marker of a failed task that left no slice).
pub const UUID_FAILED: u64 = 54;
/// Uuid of the `scopes` slice track (one slice per scope, named by its site's name).
pub const UUID_SCOPE_SLICES: u64 = 70;
/// Name of the [`UUID_SCOPE_SLICES`] track.
pub const SCOPE_SLICES_TRACK: &str = "scopes";

/// Uuid of counter `k` (0: `pmu_total_cycles`, then the named counters in slot order) of core
/// `c`'s PMU.
pub const fn uuid_pmu(c: u32, k: u32) -> u64 {
    (1 << 40) | ((c as u64) << 8) | k as u64
}
/// Uuid of scope metric `m` (0 task window, 1 heap bytes, 2 dep pool) of ring `r`; `m` 3 is the
/// tensormap, 4 the scope depth (ring 0).
pub const fn uuid_scope(r: u32, m: u32) -> u64 {
    (2 << 40) | ((r as u64) << 8) | m as u64
}
/// Uuid of shared ready queue `k`'s depth counter.
pub const fn uuid_queue_depth(k: u32) -> u64 {
    (3 << 40) | k as u64
}
/// Uuid of lane `i`'s loss accounting slice track (`i` as in [`super::lanes_in_file_order`]).
pub const fn uuid_lane_loss(i: u32) -> u64 {
    (4 << 40) | i as u64
}

/// Names of the scope metrics, by `m` of [`uuid_scope`].
pub const SCOPE_METRICS: [&str; 5] =
    ["task window", "heap bytes", "dep pool", "tensormap", "depth"];

/// The device cycle at which each scope record of `run` is placed (one per record, in record
/// order; empty without scope records). A record with task-window head `N` follows the `N`-th
/// submit: at that submit's end when the orchestrator's submits were recorded (swimlane level
/// 4), else at the first start of the `N`-th task by id; head 0 is the run's first timestamp.
/// Times never go backwards from one record to the next (records are in device order).
pub fn scope_record_times(run: &RunModel, tasks: &[JoinedTask]) -> Vec<u64> {
    let Some(sc) = &run.scopes else { return Vec::new() };
    let mut submits: Vec<(u32, u64)> = run
        .swimlane
        .iter()
        .flat_map(|sw| sw.orch_phases.iter().flatten())
        .map(|p| (p.submit_idx, p.end))
        .collect();
    submits.sort_unstable();
    let mut after: Vec<u64> = submits.iter().map(|s| s.1).collect();
    if after.is_empty() {
        // First start of each task, by task id.
        let mut first: BTreeMap<u64, u64> = BTreeMap::new();
        for t in tasks {
            let e = first.entry(t.task_id).or_insert(t.start);
            *e = (*e).min(t.start);
        }
        after = first.into_values().collect();
    }
    let t0 = tasks.iter().map(|t| t.dispatch.unwrap_or(t.start).min(t.start)).min();
    let t0 = t0.or(after.first().copied()).unwrap_or(0);
    let mut last = t0;
    sc.records
        .iter()
        .map(|r| {
            let n = usize::try_from(r.task_window_end).unwrap_or(0);
            let t = match n.checked_sub(1) {
                None => t0,
                Some(i) => after.get(i).or(after.last()).copied().unwrap_or(t0),
            };
            last = last.max(t);
            last
        })
        .collect()
}

/// The values of one counter track as they are planned: a sample is kept only where the value
/// changes (a counter holds its value until the next sample, so a repeated value adds nothing:
/// the storm's shared queues sit at one depth for all their ~350,000 samples).
pub(super) struct Series<'a> {
    counters: &'a mut Vec<(u64, u64, i64)>,
    track: u64,
    last: Option<i64>,
}

impl Series<'_> {
    /// Value `v` from `ts` on.
    pub(super) fn push(&mut self, ts: u64, v: i64) {
        if self.last != Some(v) {
            self.counters.push((self.track, ts, v));
            self.last = Some(v);
        }
    }
}

impl Planner {
    /// A counter track.
    fn counter(&mut self, uuid: u64, parent: u64, name: String, unit: CounterUnit) {
        self.track(uuid, Some(parent), name, TrackKind::Counter);
        if let Some(t) = self.plan.tracks.last_mut() {
            t.unit = unit;
        }
    }

    /// The values of counter track `track`, in time order (see [`Series`]).
    pub(super) fn series(&mut self, track: u64) -> Series<'_> {
        Series { counters: &mut self.plan.counters, track, last: None }
    }

    /// The run summary, clock anchors and loss accounting slices.
    pub(super) fn run_tracks(&mut self, run: &RunModel, (t0, t1): (u64, u64)) {
        let m = &run.meta;
        let ns = |c: u64| m.cycles_to_ns(c);
        // A run of a session over several (`--repeat N`) names itself in the process, the
        // track and the slice, and carries its index as annotations.
        let (process, label) = match m.run {
            Some(r) => (
                format!("Run {} of {}", r.index, r.runs),
                format!("run {} of {}: ", r.index, r.runs),
            ),
            None => ("Run".to_string(), String::new()),
        };
        self.track(UUID_RUN, None, process, TrackKind::Process { pid: 5 });
        self.track(UUID_RUN_INFO, Some(UUID_RUN), "run".into(), TrackKind::Child);
        let l = &run.loss;
        let mut s = slice(
            format!(
                "{label}{} run, {} Hz, {} cores, policy {:?}",
                m.arch,
                m.clock_freq_hz,
                m.num_cores(),
                l.policy
            )
            .into(),
            "run",
            t0,
            t1,
        );
        s.args = [("clock_freq_hz", m.clock_freq_hz), ("cores", m.num_cores() as u64)].into();
        s.args.push(("budget_cycles", l.budget_cycles));
        s.args.push(("policy_drop", u64::from(l.policy == LossPolicy::Drop)));
        if let Some(r) = m.run {
            s.args.push(("run_index", r.index.into()));
            s.args.push(("runs", r.runs.into()));
        }
        self.place(UUID_RUN_INFO, "run", [s]);

        // A session read as one: each run, and the device time the launch pipeline left the
        // chip idle between two runs.
        if !m.session.is_empty() {
            self.track(UUID_SESSION_RUNS, Some(UUID_RUN), "runs".into(), TrackKind::Child);
            let mut slices = Vec::new();
            let mut prev: Option<u64> = None;
            for r in &m.session {
                if let Some(end) = prev.filter(|&e| e < r.first) {
                    let mut g = slice(
                        format!("gap before {}", RunLabel::dir_name(r.index)).into(),
                        "session",
                        ns(end),
                        ns(r.first),
                    );
                    g.args = [("run_index", r.index.into())].into();
                    slices.push(g);
                }
                let name = if r.warmup {
                    format!("{} (warm-up)", RunLabel::dir_name(r.index))
                } else {
                    RunLabel::dir_name(r.index)
                };
                let mut s = slice(name.into(), "session", ns(r.first), ns(r.last));
                s.args = [("run_index", r.index.into()), ("warmup", u64::from(r.warmup))].into();
                slices.push(s);
                prev = Some(r.last);
            }
            self.place(UUID_SESSION_RUNS, "session", slices);
        }

        if let Some(a) = m.clock_anchors.as_ref().filter(|a| !a.samples.is_empty()) {
            self.track(UUID_ANCHORS, Some(UUID_RUN), "clock anchors".into(), TrackKind::Child);
            let slices: Vec<_> = a
                .samples
                .iter()
                .map(|x| {
                    // Few distinct names (the numbers are annotations): interned once each.
                    let name = match &x.error {
                        None => format!("clock anchor {}", x.position),
                        Some(_) => format!("clock anchor {} failed", x.position),
                    };
                    let at = ns(x.device_cycles);
                    let read = x.host_after_ns.saturating_sub(x.host_before_ns);
                    let mut s = slice(name.into(), "clock", at, at.saturating_add(read));
                    s.args =
                        [("device_cycles", x.device_cycles), ("host_before_ns", x.host_before_ns)]
                            .into();
                    s.args.push(("host_after_ns", x.host_after_ns));
                    s
                })
                .collect();
            self.place(UUID_ANCHORS, "clock anchors", slices);
        }

        if !l.lanes.is_empty() {
            let (p, c, d) = l.totals();
            self.track(
                UUID_LOSS_TOTALS,
                Some(UUID_RUN),
                "loss accounting".into(),
                TrackKind::Child,
            );
            let ok = if l.reconciles() { "reconciles" } else { "MISMATCH" };
            let name = format!("produced {p}, collected {c}, dropped {d}: {ok}");
            let mut s = slice(name.into(), "dfx", t0, t1);
            s.args = [("produced", p), ("collected", c)].into();
            s.args.push(("dropped", d));
            s.args.push(("lanes", l.lanes.len() as u64));
            s.args.push(("reconciles", u64::from(l.reconciles())));
            self.place(UUID_LOSS_TOTALS, "loss accounting", [s]);
            let lane_ok: Arc<str> = "loss accounting: reconciles".into();
            let lane_bad: Arc<str> = "loss accounting: MISMATCH".into();
            for (i, ln) in super::lanes_in_file_order(run).into_iter().enumerate() {
                let u = uuid_lane_loss(i as u32);
                let track = format!("loss {}", ln.lane);
                self.track(u, Some(UUID_LANES), track.clone(), TrackKind::Child);
                // One name for every lane that reconciles (the lane is the track, the counts
                // are annotations): interned once.
                let name = if ln.reconciles() { lane_ok.clone() } else { lane_bad.clone() };
                let mut s = slice(name, "dfx", t0, t1);
                s.args = [("produced", ln.produced), ("collected", ln.collected)].into();
                s.args.push(("dropped", ln.dropped));
                s.args.push(("stall_cycles", ln.stall_cycles));
                s.args.push(("stall_waits", ln.stall_waits));
                s.args.push(("thread", ln.thread.into()));
                self.place(u, &track, [s]);
            }
        }
    }

    /// PMU counter tracks: per core and counter, the task's value over the task.
    pub(super) fn pmu_tracks(&mut self, run: &RunModel, tasks: &[JoinedTask]) {
        let Some(pmu) = &run.pmu else { return };
        if pmu.rows.is_empty() {
            return;
        }
        let ns = |c: u64| run.meta.cycles_to_ns(c);
        // The first PMU row of each (core, task): the row a task's execution wrote.
        let mut row_of: BTreeMap<(u32, u64), usize> = BTreeMap::new();
        for (i, r) in pmu.rows.iter().enumerate() {
            row_of.entry((r.core_id, r.task_id)).or_insert(i);
        }
        let mut names: Vec<&str> = vec!["pmu_total_cycles"];
        names.extend(pmu.counter_names.iter().map(String::as_str));
        self.track(UUID_PMU, None, "PMU".into(), TrackKind::Process { pid: 6 });
        // Tasks per core in start order (`tasks` is in start order).
        let mut on_core: BTreeMap<u32, Vec<(&JoinedTask, usize)>> = BTreeMap::new();
        for t in tasks {
            if let Some(&r) = row_of.get(&(t.core, t.task_id)) {
                on_core.entry(t.core).or_default().push((t, r));
            }
        }
        for (&c, list) in &on_core {
            for (k, name) in names.iter().enumerate() {
                let u = uuid_pmu(c, k as u32);
                let unit =
                    if name.ends_with("_bytes") { CounterUnit::Bytes } else { CounterUnit::Count };
                self.counter(u, UUID_PMU, format!("core{c} {name}"), unit);
                let mut out = self.series(u);
                for (j, &(t, r)) in list.iter().enumerate() {
                    let row = &pmu.rows[r];
                    let v = if k == 0 {
                        row.pmu_total_cycles
                    } else {
                        row.counters.get(k - 1).copied().unwrap_or(0)
                    };
                    let v = i64::try_from(v).unwrap_or(i64::MAX);
                    out.push(ns(t.start), v);
                    // Back to 0 after the task, unless the next task starts by then.
                    let next = list.get(j + 1).map(|n| n.0.start);
                    if next.is_none_or(|n| n > t.end) {
                        out.push(ns(t.end.max(t.start)), 0);
                    }
                }
            }
        }
    }

    /// Scope occupancy counter tracks (see the [module docs](self)).
    pub(super) fn scope_tracks(&mut self, run: &RunModel, tasks: &[JoinedTask]) {
        let Some(sc) = &run.scopes else { return };
        if sc.records.is_empty() {
            return;
        }
        let ns = |c: u64| run.meta.cycles_to_ns(c);
        let times = scope_record_times(run, tasks);
        self.track(UUID_SCOPES, None, "Scope occupancy".into(), TrackKind::Process { pid: 7 });
        // Values per track, in record (so time) order; tracks declared in (ring, metric) order.
        let mut values: BTreeMap<u64, Vec<(u64, i64)>> = BTreeMap::new();
        for (r, &t) in sc.records.iter().zip(&times) {
            let ring = u32::try_from(r.ring).unwrap_or(0).min(63);
            let at = ns(t);
            let occ = |tail: i64, head: i64| head.saturating_sub(tail).max(0);
            let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            values
                .entry(uuid_scope(ring, 0))
                .or_default()
                .push((at, occ(r.task_window_start, r.task_window_end)));
            values
                .entry(uuid_scope(ring, 1))
                .or_default()
                .push((at, occ(signed(r.heap_start), signed(r.heap_end))));
            values
                .entry(uuid_scope(ring, 2))
                .or_default()
                .push((at, occ(r.dep_pool_start, r.dep_pool_end)));
            values.entry(uuid_scope(0, 3)).or_default().push((at, r.tensormap));
            let depth = match r.phase {
                ScopePhase::Begin => i64::from(r.depth),
                ScopePhase::End => i64::from(r.depth).saturating_sub(1),
            };
            values.entry(uuid_scope(0, 4)).or_default().push((at, depth));
        }
        // One slice per scope, begin to end, named by its site's name (the workload's label)
        // or its `file:line`: begins and ends pair per (ring, site), as `ferry scopes` pairs them.
        let mut open: BTreeMap<(i32, &str), Vec<(u64, i32)>> = BTreeMap::new();
        let mut labels: BTreeMap<&str, Arc<str>> = BTreeMap::new();
        let mut slices = Vec::new();
        let last = times.last().map_or(0, |&t| ns(t));
        for (r, &t) in sc.records.iter().zip(&times) {
            let key = (r.ring, r.site.as_str());
            match r.phase {
                ScopePhase::Begin => open.entry(key).or_default().push((ns(t), r.depth)),
                ScopePhase::End => {
                    let Some((b, depth)) = open.get_mut(&key).and_then(Vec::pop) else { continue };
                    slices.push((b, ns(t), depth, key));
                }
            }
        }
        // A scope left open closes at the last record.
        for (key, v) in &open {
            slices.extend(v.iter().map(|&(b, depth)| (b, last, depth, *key)));
        }
        let slices: Vec<_> = slices
            .into_iter()
            .map(|(b, e, depth, (ring, site))| {
                let name = labels.entry(site).or_insert_with(|| sc.label(site).into()).clone();
                let mut s = slice(name, "scope", b, e);
                s.args = [("depth", u64::try_from(depth).unwrap_or(0))].into();
                s.args.push(("ring", u64::try_from(ring).unwrap_or(0)));
                s
            })
            .collect();
        self.track(
            UUID_SCOPE_SLICES,
            Some(UUID_SCOPES),
            SCOPE_SLICES_TRACK.into(),
            TrackKind::Child,
        );
        self.place(UUID_SCOPE_SLICES, SCOPE_SLICES_TRACK, slices);
        for (u, v) in values {
            let (ring, m) = (((u >> 8) & 0xff) as u32, (u & 0xff) as usize);
            let name = if m >= 3 {
                SCOPE_METRICS[m].to_string()
            } else {
                format!("ring{ring} {}", SCOPE_METRICS[m])
            };
            let name = if m == 4 { "scope depth".to_string() } else { name };
            let unit = if m == 1 { CounterUnit::Bytes } else { CounterUnit::Count };
            self.counter(u, UUID_SCOPES, name, unit);
            let mut out = self.series(u);
            for (t, x) in v {
                out.push(t, x);
            }
        }
    }

    /// Shared ready-queue depth counters: every scheduler thread samples the shared queues at
    /// each phase's start and end; the samples of all threads, in time order, make one track per
    /// queue.
    pub(super) fn queue_tracks(&mut self, run: &RunModel) {
        let Some(sw) = &run.swimlane else { return };
        let ns = |c: u64| run.meta.cycles_to_ns(c);
        let mut samples: Vec<(u64, usize, [i16; 3])> = Vec::new();
        for (i, p) in sw.sched_phases.iter().flatten().enumerate() {
            samples.push((ns(p.start), 2 * i, p.shared_at_start));
            samples.push((ns(p.end.max(p.start)), 2 * i + 1, p.shared_at_end));
        }
        if samples.is_empty() {
            return;
        }
        samples.sort_unstable_by_key(|s| (s.0, s.1));
        for k in 0..3 {
            let u = uuid_queue_depth(k as u32);
            let name = format!("shared queue{k} depth");
            self.counter(u, UUID_AICPU, name, CounterUnit::Count);
            let mut out = self.series(u);
            for s in &samples {
                out.push(s.0, i64::from(s.2[k]));
            }
        }
    }
}
