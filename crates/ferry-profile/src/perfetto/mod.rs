//! Native Perfetto protobuf trace, hand-encoded (no SDK, no generated code on the write side).
//!
//! The trace is `Trace { repeated TracePacket packet = 1 }`: one `TrackDescriptor` packet per
//! track, then one `TrackEvent` packet per slice begin/end and per counter value, all on trusted
//! sequence 1, with plain (not interned) names and nanosecond timestamps converted from device
//! cycles. The layout ([`plan`]):
//!
//! | process (pid) | tracks (thread tracks, one tid each) | slices / values |
//! |---|---|---|
//! | `AICore` (1) | one per core, `core<N> (aic\|aiv)` | kernel start → end, named after the kernel; `task_id` annotation; dependency flows (`flow_ids` on the producer, `terminating_flow_ids` on the consumer) |
//! | `AICPU` (2) | one per scheduler thread, one per orchestrator thread | scheduler phases; submit envelopes |
//! | `Scheduler view` (3) | one per core | dispatch → finish (AICPU-observed) |
//! | `DFX lanes` (4) | one counter track per lane, `stall <lane> (ns)` | cumulative stall time at each wait's start and end |
//!
//! Beyond the swimlane, what the report and the HTML pages show:
//!
//! | process (pid) | tracks | values |
//! |---|---|---|
//! | `Run` (5) | `run`, `clock anchors`, `loss accounting` | one slice spanning the run (arch, clock, policy, budget as annotations); one slice per host↔device clock anchor sample, from its device timestamp for the host read's length; one slice spanning the run with the loss totals |
//! | `DFX lanes` (4) | `loss <lane>` per lane | one slice spanning the run with the lane's produced / collected / dropped / stall counts |
//! | `PMU` (6) | one counter track per core and counter, `core<N> <counter>` | the task's value from its start to its end (0 between tasks) |
//! | `Scope occupancy` (7) | `ring<R> task window`, `ring<R> heap bytes`, `ring<R> dep pool`, `tensormap`, `scope depth` | occupancy (head − tail) at each scope record |
//! | `Scope occupancy` (7) | `scopes` (a slice track) | one slice per scope, begin to end, named by its site's name (a workload's `scope = "…"` label, from `scope_stats/scope_names.json`) or its `file:line`; `depth` and `ring` annotations |
//! | `AICPU` (2) | `shared queue<K> depth` | the shared ready-queue depths every scheduler thread saw at each phase's start and end |
//!
//! Scope records carry queue positions, not times: a record whose task-window head is `N` was
//! taken after the orchestrator's `N`-th submit, so it is placed at that submit's end (level-4
//! swimlane), else at the first start of the `N`-th task by id ([`scope_record_times`]).
//!
//! A lane that stalled also gets a slice track `<lane> stall` under its AICPU thread's track with
//! one `dfx backpressure stall` slice per wait, so the stall shows on the row that stalled. Slices
//! that overlap on one track (an SPMD re-dispatch, a finish inflated by a stall) go to child tracks
//! `… overlap <k>` of that track, because slices on one Perfetto track must nest.
//!
//! In a failed run's profile, the task whose kernel failed on its core
//! ([`RunMeta::failed`](crate::RunMeta::failed)) is marked: each of its kernel slices carries a
//! `failed = 1` annotation and opens with a zero-length `failed: task 0x40 (kernel)` slice on the
//! same track (category [`FAILED_CATEGORY`]); a task that left no slice (its kernel never
//! returned) has that marker on the `Run` process's [`FAILED_TRACK`] track, at the run's end.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use ferry_abi::records::SchedPhaseKind;

use super::id_table::IdTable;
use super::model::{LaneLoss, RunModel};
pub use super::stream::InlineList;

mod encode;
mod extra;
pub(crate) use encode::write_plan_ticked;
pub use encode::{encode_plan, encode_plan_with, write_plan, write_trace, EncodeOptions};
pub use extra::{
    scope_record_times, uuid_lane_loss, uuid_pmu, uuid_queue_depth, uuid_scope, SCOPE_METRICS,
    SCOPE_SLICES_TRACK, UUID_ANCHORS, UUID_FAILED, UUID_LOSS_TOTALS, UUID_PMU, UUID_RUN,
    UUID_RUN_INFO, UUID_SCOPES, UUID_SCOPE_SLICES, UUID_SESSION_RUNS,
};

/// Trusted packet sequence id of every packet.
pub const SEQUENCE_ID: u32 = 1;
/// Name of the stall slices.
pub const STALL_SLICE_NAME: &str = "dfx backpressure stall";

/// What a planned track is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrackKind {
    /// A process track.
    Process {
        /// Process id.
        pid: i32,
    },
    /// A thread track.
    Thread {
        /// Process id.
        pid: i32,
        /// Thread id.
        tid: i32,
    },
    /// A plain child track (overlap lanes, stall rows).
    Child,
    /// A counter track (values in [`PlanTrack::unit`]).
    Counter,
}

/// What the values of a counter track count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CounterUnit {
    /// Nanoseconds.
    #[default]
    TimeNs,
    /// Events or items.
    Count,
    /// Bytes.
    Bytes,
}

/// One planned track.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanTrack {
    /// Track uuid.
    pub uuid: u64,
    /// Parent track uuid.
    pub parent: Option<u64>,
    /// Display name.
    pub name: String,
    /// Kind.
    pub kind: TrackKind,
    /// Unit of a counter track's values ([`CounterUnit::TimeNs`] for other tracks).
    pub unit: CounterUnit,
}

/// One planned slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanSlice {
    /// Track uuid.
    pub track: u64,
    /// Slice name (shared: every slice of one kernel points at one string).
    pub name: Arc<str>,
    /// Category.
    pub category: &'static str,
    /// Start (ns).
    pub start_ns: u64,
    /// End (ns).
    pub end_ns: u64,
    /// Flows leaving this slice.
    pub flows_out: InlineList<u64, 2>,
    /// Flows ending at this slice.
    pub flows_in: InlineList<u64, 2>,
    /// Integer annotations.
    pub args: InlineList<(&'static str, u64), 2>,
}

/// The tracks, slices and counter values a run implies; shared by the Perfetto and Chrome writers.
///
/// A counter track holds its value until its next sample, so only the samples where a value
/// changes are planned (the first sample of a track always is).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TracePlan {
    /// Every track, parents before children.
    pub tracks: Vec<PlanTrack>,
    /// Every slice, in track order then start order.
    pub slices: Vec<PlanSlice>,
    /// Counter values `(track, ts_ns, value)`, where a track's value changes.
    pub counters: Vec<(u64, u64, i64)>,
}

impl TracePlan {
    /// Drops the tracks that hold nothing: no slice, no counter value, no track below them that
    /// holds one (an idle core's rows, an idle thread's, a PMU counter of a core that ran no
    /// task). Returns their names, in plan order: what a trace says in one line instead of
    /// drawing. The pages keep the full plan (they fold idle rows into one line themselves).
    ///
    /// # Examples
    /// ```
    /// use ferry_profile::{perfetto, sample::sample_run, LossPolicy};
    /// let mut plan = perfetto::plan(&sample_run(LossPolicy::Block));
    /// let before = plan.tracks.len();
    /// let dropped = plan.prune_empty();
    /// assert_eq!(plan.tracks.len() + dropped.len(), before);
    /// ```
    pub fn prune_empty(&mut self) -> Vec<String> {
        let mut keep: BTreeSet<u64> = self.slices.iter().map(|s| s.track).collect();
        keep.extend(self.counters.iter().map(|c| c.0));
        let parent: HashMap<u64, u64> =
            self.tracks.iter().filter_map(|t| Some((t.uuid, t.parent?))).collect();
        for u in keep.clone() {
            let mut u = u;
            while let Some(&p) = parent.get(&u) {
                if !keep.insert(p) {
                    break;
                }
                u = p;
            }
        }
        let mut dropped = Vec::new();
        self.tracks.retain(|t| {
            let k = keep.contains(&t.uuid);
            if !k {
                dropped.push(t.name.clone());
            }
            k
        });
        dropped
    }
}

/// Assigns each interval `[start, end]` the lowest lane in which it overlaps no other interval.
/// Touching intervals (`end == next start`) share a lane.
///
/// # Examples
/// ```
/// use ferry_profile::perfetto::assign_lanes;
/// assert_eq!(assign_lanes(&[(0, 10), (5, 20), (10, 12), (21, 22)]), vec![0, 1, 0, 0]);
/// ```
pub fn assign_lanes(iv: &[(u64, u64)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..iv.len()).collect();
    order.sort_by_key(|&i| (iv[i].0, iv[i].1));
    let mut lane_end: Vec<u64> = Vec::new();
    let mut out = vec![0; iv.len()];
    for i in order {
        let (s, e) = iv[i];
        let lane = match lane_end.iter().position(|&end| end <= s) {
            Some(l) => l,
            None => {
                lane_end.push(0);
                lane_end.len() - 1
            }
        };
        lane_end[lane] = e.max(s);
        out[i] = lane;
    }
    out
}

/// Uuid of the AICore process track.
pub const UUID_AICORE: u64 = 1;
/// Uuid of the AICPU process track.
pub const UUID_AICPU: u64 = 2;
/// Uuid of the scheduler-view process track.
pub const UUID_SCHED_VIEW: u64 = 3;
/// Uuid of the DFX lanes process track.
pub const UUID_LANES: u64 = 4;

/// Uuid of core `c`'s AICore track.
pub const fn uuid_core(c: u32) -> u64 {
    1000 + c as u64
}
/// Uuid of AICPU scheduler thread `t`'s track.
pub const fn uuid_thread(t: u32) -> u64 {
    2000 + t as u64
}
/// Uuid of orchestrator thread `o`'s track.
pub const fn uuid_orch(o: u32) -> u64 {
    2900 + o as u64
}
/// Uuid of core `c`'s scheduler-view track.
pub const fn uuid_sched_view(c: u32) -> u64 {
    3000 + c as u64
}
/// Uuid of lane `i`'s stall counter track (`i` counts lanes in [`lanes_in_file_order`]).
pub const fn uuid_lane_counter(i: u32) -> u64 {
    4000 + i as u64
}
/// Uuid of lane `i`'s stall slice track (`i` counts lanes in [`lanes_in_file_order`]).
pub const fn uuid_lane_stalls(i: u32) -> u64 {
    5000 + i as u64
}

/// The loss lines in the order the files hold them: by subsystem (stable, so as collected
/// within one). The plan numbers lanes in this order, so the trace `ferry run` writes from its
/// model and the one `ferry trace` writes from the files are the same bytes.
pub fn lanes_in_file_order(run: &RunModel) -> Vec<&LaneLoss> {
    let mut lanes: Vec<&LaneLoss> = run.loss.lanes.iter().collect();
    lanes.sort_by_key(|l| l.subsystem);
    lanes
}

struct Planner {
    plan: TracePlan,
    next_child: u64,
}

impl Planner {
    fn track(&mut self, uuid: u64, parent: Option<u64>, name: String, kind: TrackKind) {
        self.plan.tracks.push(PlanTrack { uuid, parent, name, kind, unit: CounterUnit::TimeNs });
    }

    /// A thread track `uuid` (its tid is its uuid) of process `pid` under `parent`, named
    /// `name`, with `slices` placed on it.
    fn thread(
        &mut self,
        (uuid, parent, pid): (u64, u64, i32),
        name: String,
        slices: impl IntoIterator<Item = PlanSlice>,
    ) {
        self.track(uuid, Some(parent), name.clone(), TrackKind::Thread { pid, tid: uuid as i32 });
        self.place(uuid, &name, slices);
    }

    /// Places `slices` (all meant for `track`) on it and on overlap child tracks as needed,
    /// ordered by lane, then start, then end (stable): they are appended to the plan and ordered
    /// where they lie, never copied through a staging list.
    fn place(&mut self, track: u64, track_name: &str, slices: impl IntoIterator<Item = PlanSlice>) {
        let from = self.plan.slices.len();
        self.plan.slices.extend(slices);
        let iv: Vec<(u64, u64)> =
            self.plan.slices[from..].iter().map(|s| (s.start_ns, s.end_ns)).collect();
        let lanes = assign_lanes(&iv);
        // Child uuids in the order the lanes first appear.
        let mut child: BTreeMap<usize, u64> = BTreeMap::new();
        for &lane in lanes.iter().filter(|&&l| l > 0) {
            child.entry(lane).or_insert_with(|| {
                self.next_child += 1;
                self.next_child
            });
        }
        for (lane, uuid) in &child {
            self.track(
                *uuid,
                Some(track),
                format!("{track_name} overlap {lane}"),
                TrackKind::Child,
            );
        }
        let slices = &mut self.plan.slices[from..];
        // The lane rides in `track` through the (stable) sort, then becomes the track's uuid.
        for (s, &lane) in slices.iter_mut().zip(&lanes) {
            s.track = lane as u64;
        }
        slices.sort_by_key(|s| (s.track, s.start_ns, s.end_ns));
        for s in slices {
            s.track = if s.track == 0 { track } else { child[&(s.track as usize)] };
        }
    }
}

fn slice(name: Arc<str>, category: &'static str, start_ns: u64, end_ns: u64) -> PlanSlice {
    PlanSlice {
        track: 0,
        name,
        category,
        start_ns,
        end_ns: end_ns.max(start_ns),
        flows_out: InlineList::new(),
        flows_in: InlineList::new(),
        args: InlineList::new(),
    }
}

/// The tracks, slices, flows and counter values of `run` (see the [module docs](self)).
pub fn plan(run: &RunModel) -> TracePlan {
    let mut p = Planner { plan: TracePlan::default(), next_child: 100_000 };
    let meta = &run.meta;
    let ns = |c: u64| meta.cycles_to_ns(c);
    let tasks = run.tasks();
    // Task indexes per core, in `tasks` order (start order): one pass instead of a scan per core.
    let mut on_core: Vec<Vec<usize>> = vec![Vec::new(); meta.num_cores()];
    for (i, t) in tasks.iter().enumerate() {
        if let Some(v) = on_core.get_mut(t.core as usize) {
            v.push(i);
        }
    }
    // Kernel and scheduler-view slices per task, plus the phases: grown once, not by doubling.
    let phases = run.swimlane.as_ref().map_or(0, |sw| {
        sw.sched_phases.iter().map(Vec::len).sum::<usize>()
            + sw.orch_phases.iter().map(Vec::len).sum::<usize>()
    });
    p.plan.slices.reserve(2 * tasks.len() + phases);
    // One name per kernel, shared by its slices: no allocation per slice.
    let mut names: BTreeMap<Option<i32>, Arc<str>> = BTreeMap::new();
    for t in &tasks {
        names.entry(t.func_id).or_insert_with(|| run.kernel_name(t.func_id).into());
    }
    let kernel = |f: Option<i32>| Arc::clone(&names[&f]);

    // Dependency flows: one id per edge whose both ends ran, by task index (moved into the
    // task's slice, not copied).
    let first_slice = IdTable::first(|| tasks.iter().enumerate().map(|(i, t)| (t.task_id, i)));
    let mut flows_out: Vec<InlineList<u64, 2>> = vec![InlineList::new(); tasks.len()];
    let mut flows_in: Vec<InlineList<u64, 2>> = vec![InlineList::new(); tasks.len()];
    if let Some(g) = &run.deps {
        for (k, e) in g.edges.iter().enumerate() {
            if let (Some(&a), Some(&b)) = (first_slice.get(e.pred), first_slice.get(e.succ)) {
                let id = k as u64 + 1;
                flows_out[a].push(id);
                flows_in[b].push(id);
            }
        }
    }

    // The task whose kernel failed on its core: its slices carry `failed = 1`, and a
    // zero-length marker named after it opens each of them on the same track.
    let failed = meta.failed.as_ref();
    let marker: Arc<str> = failed.map_or_else(|| "".into(), |f| failed_marker_name(f).into());
    if run.swimlane.is_some() {
        p.track(UUID_AICORE, None, "AICore".into(), TrackKind::Process { pid: 1 });
        for (c, ty) in meta.core_types.iter().enumerate() {
            let c = c as u32;
            let slices = on_core[c as usize].iter().flat_map(|&i| {
                let t = &tasks[i];
                let hit = failed.is_some_and(|f| f.id == t.task_id);
                let mark = hit.then(|| {
                    let mut m = slice(marker.clone(), FAILED_CATEGORY, ns(t.start), ns(t.start));
                    m.args = [("task_id", t.task_id), ("failed", 1)].into();
                    m
                });
                let mut s = slice(kernel(t.func_id), "aicore", ns(t.start), ns(t.end));
                s.flows_out = std::mem::take(&mut flows_out[i]);
                s.flows_in = std::mem::take(&mut flows_in[i]);
                s.args = if meta.session.is_empty() {
                    [("task_id", t.task_id), ("reg_task_id", t.reg_task_id.into())].into()
                } else {
                    // A session read as one: the run sits above the run's own counter.
                    let own = t.reg_task_id & ((1 << crate::SESSION_REG_BITS) - 1);
                    let run = t.reg_task_id >> crate::SESSION_REG_BITS;
                    [("task_id", t.task_id), ("run", run.into()), ("reg_task_id", own.into())]
                        .into()
                };
                if hit {
                    s.args.push(("failed", 1));
                }
                mark.into_iter().chain(std::iter::once(s))
            });
            p.thread((uuid_core(c), UUID_AICORE, 1), format!("core{c} ({})", ty.name()), slices);
        }
    }

    if let Some(sw) = &run.swimlane {
        let threads = sw
            .sched_phases
            .len()
            .max(meta.core_to_thread.iter().map(|&t| (t + 1).max(0) as usize).max().unwrap_or(0));
        let threads =
            threads.max(run.loss.lanes.iter().map(|l| l.thread as usize + 1).max().unwrap_or(0));
        p.track(UUID_AICPU, None, "AICPU".into(), TrackKind::Process { pid: 2 });
        let mut phase_names: HashMap<&'static str, Arc<str>> = HashMap::new();
        for ph in sw.sched_phases.iter().flatten() {
            phase_names.entry(ph.kind.name()).or_insert_with(|| ph.kind.name().into());
        }
        let phase_name = |k: SchedPhaseKind| Arc::clone(&phase_names[k.name()]);
        for t in 0..threads as u32 {
            let slices = sw.sched_phases.get(t as usize).into_iter().flatten().map(|ph| {
                let mut s = slice(phase_name(ph.kind), "sched", ns(ph.start), ns(ph.end));
                s.args = [("loop_iter", ph.loop_iter.into())].into();
                if let Some(task) = ph.task_id() {
                    s.args.push(("task_id", task));
                }
                s
            });
            p.thread((uuid_thread(t), UUID_AICPU, 2), format!("aicpu thread{t}"), slices);
        }
        for (o, v) in sw.orch_phases.iter().enumerate() {
            let o = o as u32;
            // One name for every submit (the index is an annotation): a trace viewer groups
            // them, and the trace interns one name, not one per submit.
            let submit: Arc<str> = "submit".into();
            let slices = v.iter().map(|ph| {
                let mut s = slice(submit.clone(), "orch", ns(ph.start), ns(ph.end));
                s.args = [("task_id", ph.task_id), ("submit_idx", ph.submit_idx.into())].into();
                s
            });
            p.thread((uuid_orch(o), UUID_AICPU, 2), format!("orchestrator{o}"), slices);
        }
        if !sw.aicpu_tasks.is_empty() {
            p.track(UUID_SCHED_VIEW, None, "Scheduler view".into(), TrackKind::Process { pid: 3 });
            for c in 0..meta.num_cores() as u32 {
                let slices = on_core[c as usize].iter().filter_map(|&i| {
                    let t = &tasks[i];
                    let (d, f) = (t.dispatch?, t.finish?);
                    let mut s = slice(kernel(t.func_id), "sched_view", ns(d), ns(f));
                    s.args = [("task_id", t.task_id)].into();
                    Some(s)
                });
                let name = format!("core{c} dispatch-finish");
                p.thread((uuid_sched_view(c), UUID_SCHED_VIEW, 3), name, slices);
            }
        }
    }

    // Loss accounting: a stall-time counter per lane, a stall row per lane that stalled.
    if !run.loss.lanes.is_empty() {
        let stall_name: Arc<str> = STALL_SLICE_NAME.into();
        p.track(UUID_LANES, None, "DFX lanes".into(), TrackKind::Process { pid: 4 });
        let has_thread: BTreeSet<u64> = p.plan.tracks.iter().map(|t| t.uuid).collect();
        // Where a lane that knows only its stall total puts it: the last task's finish.
        let run_end = tasks.iter().map(|t| t.finish.unwrap_or(t.end)).max().unwrap_or(0);
        for (i, l) in lanes_in_file_order(run).into_iter().enumerate() {
            let i = i as u32;
            let cu = uuid_lane_counter(i);
            p.track(cu, Some(UUID_LANES), format!("stall {} (ns)", l.lane), TrackKind::Counter);
            let mut acc = 0u64;
            let mut out = p.series(cu);
            out.push(0, 0);
            // Counter values must come in time order on their track.
            let mut stalls = l.stalls.clone();
            stalls.sort_unstable();
            for s in &stalls {
                out.push(ns(s[0]), ns(acc) as i64);
                acc = acc.saturating_add(s[1].saturating_sub(s[0]));
                out.push(ns(s[1]), ns(acc) as i64);
            }
            if l.stalls.is_empty() && l.stall_cycles > 0 {
                out.push(ns(run_end), ns(l.stall_cycles) as i64);
            }
            if !l.stalls.is_empty() {
                let parent = uuid_thread(l.thread);
                let parent = if has_thread.contains(&parent) { parent } else { UUID_LANES };
                let name = format!("{} stall", l.lane);
                let su = uuid_lane_stalls(i);
                p.track(su, Some(parent), name.clone(), TrackKind::Child);
                let slices = l.stalls.iter().map(|s| {
                    let mut sl = slice(stall_name.clone(), "dfx", ns(s[0]), ns(s[1]));
                    sl.args = [("stall_cycles", s[1].saturating_sub(s[0]))].into();
                    sl
                });
                p.place(su, &name, slices);
            }
        }
    }

    // What the report and the pages show beyond the swimlane (see `extra`).
    let t0 = p.plan.slices.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let t1 = p.plan.slices.iter().map(|s| s.end_ns).max().unwrap_or(t0).max(t0);
    p.queue_tracks(run);
    p.pmu_tracks(run, &tasks);
    p.scope_tracks(run, &tasks);
    p.run_tracks(run, (t0, t1));
    // A failed task that left no slice (its kernel never returned): the marker goes on the
    // run's own `failed task` track, at the run's end.
    if let Some(f) = failed.filter(|f| !tasks.iter().any(|t| t.task_id == f.id)) {
        p.track(UUID_FAILED, Some(UUID_RUN), FAILED_TRACK.into(), TrackKind::Child);
        let mut m = slice(marker, FAILED_CATEGORY, t1, t1);
        m.args = [("task_id", f.id), ("failed", 1)].into();
        p.place(UUID_FAILED, FAILED_TRACK, [m]);
    }
    p.plan
}

/// Category of the failed task's markers ([`failed_marker_name`]).
pub const FAILED_CATEGORY: &str = "failed";
/// Name of the run's track that holds the marker of a failed task that left no slice.
pub const FAILED_TRACK: &str = "failed task";

/// The name of the marker on the failed task's track: `failed: task 0x40 (saxpy)`.
pub fn failed_marker_name(f: &crate::FailedTask) -> String {
    format!("failed: {}", f.label())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_never_overlap() {
        let iv = [(0, 10), (1, 3), (2, 4), (3, 9), (9, 12), (11, 11)];
        let lanes = assign_lanes(&iv);
        for i in 0..iv.len() {
            for j in 0..i {
                if lanes[i] == lanes[j] {
                    assert!(iv[i].1 <= iv[j].0 || iv[j].1 <= iv[i].0, "{i} {j}");
                }
            }
        }
    }
}
