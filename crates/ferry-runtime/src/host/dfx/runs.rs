//! A stopped session's regions, as one model or one model per run.
//!
//! Each lane's writer logs the lane's counters and next buffer sequence number at every run's
//! end ([`ferry_dfx::RunEnd`]). Run k of a lane then holds the buffers with sequence numbers in
//! `[end(k-1), end(k))` and its loss line counts what run k's writer produced and dropped (the
//! differences of consecutive ends) and what the host collected of those buffers: produced =
//! collected + dropped holds per run, checked beside the whole session's line.
use std::collections::BTreeMap;

use ferry_dfx::{RunEnd, RunEnds};
use ferry_profile::collect::LaneLog;
use ferry_profile::{LaneLoss, RunModel, Swimlane};

use super::model::{self, args_dump, beside, rows, Beside, Taken};
use super::sinks::ArgsLane;
use super::{deps, CollectError, DfxChip, DfxError, DfxOptions};
use ferry_abi::records::{
    AicoreTaskRecord, AicpuTaskRecord, OrchPhaseRecord, PmuRecord, SchedPhaseRecord,
    ScopeStatsRecord,
};

type Logs<R> = BTreeMap<u32, LaneLog<R>>;

/// Every region of a session (each `None` when its subsystem was off).
pub(super) struct Regions {
    pub(super) aicore: Option<Taken<Logs<AicoreTaskRecord>>>,
    pub(super) aicpu: Option<Taken<Logs<AicpuTaskRecord>>>,
    pub(super) sched: Option<Taken<Logs<SchedPhaseRecord>>>,
    pub(super) orch: Option<Taken<Logs<OrchPhaseRecord>>>,
    pub(super) pmu: Option<Taken<Logs<PmuRecord>>>,
    pub(super) scope: Option<Taken<Logs<ScopeStatsRecord>>>,
    pub(super) dep_gen: Option<Taken<Logs<u64>>>,
    pub(super) args: Option<Taken<Vec<ArgsLane>>>,
}

impl Regions {
    /// Every region's run ends, by lane.
    fn ends(&self) -> impl Iterator<Item = &RunEnds> + '_ {
        fn e<L>(t: &Option<Taken<L>>) -> &[RunEnds] {
            t.as_ref().map_or(&[], |t| &t.ends)
        }
        e(&self.aicore)
            .iter()
            .chain(e(&self.aicpu))
            .chain(e(&self.sched))
            .chain(e(&self.orch))
            .chain(e(&self.pmu))
            .chain(e(&self.scope))
            .chain(e(&self.dep_gen))
            .chain(e(&self.args))
    }

    /// Every region's loss lines, in the order a model lists them ([`build`]'s).
    pub(super) fn loss_lines(self) -> Vec<LaneLoss> {
        fn l<L>(t: Option<Taken<L>>) -> Vec<LaneLoss> {
            t.map_or_else(Vec::new, |t| t.loss)
        }
        let mut v = l(self.aicore);
        v.extend(l(self.aicpu));
        v.extend(l(self.sched));
        v.extend(l(self.orch));
        v.extend(l(self.pmu));
        v.extend(l(self.scope));
        v.extend(l(self.dep_gen));
        v.extend(l(self.args));
        v
    }

    /// The runs the session spanned: the run ends every lane logged (0 when no lane has a log).
    ///
    /// # Errors
    /// [`DfxError::Collect`] when lanes disagree, or more runs than the log keeps.
    pub(super) fn runs(&self) -> Result<usize, DfxError> {
        let mut totals = self.ends().map(|e| e.total);
        let Some(first) = totals.next() else { return Ok(0) };
        if let Some(other) = totals.find(|&t| t != first) {
            return Err(CollectError::RunEndsDisagree { first, other }.into());
        }
        if first > ferry_dfx::device::RUN_RING as u64 {
            let kept = ferry_dfx::device::RUN_RING as u64;
            return Err(CollectError::TooManyRuns { runs: first, kept }.into());
        }
        Ok(first as usize)
    }

    /// The regions of each of `runs` runs.
    pub(super) fn split(self, runs: usize) -> Result<Vec<Regions>, DfxError> {
        fn logs<R: Copy>(
            t: Option<Taken<Logs<R>>>,
            runs: usize,
        ) -> Result<Vec<Option<Taken<Logs<R>>>>, DfxError> {
            let Some(t) = t else { return Ok((0..runs).map(|_| None).collect()) };
            split_taken(t, runs, |lanes, lane, seqs| {
                let Some(log) = lanes.get(&lane) else {
                    return Ok(seqs.iter().map(|_| None).collect());
                };
                Ok(log.split_runs(seqs)?.into_iter().map(Some).collect())
            })
            .map(|v| v.into_iter().map(Some).collect())
        }
        let aicore = logs(self.aicore, runs)?;
        let aicpu = logs(self.aicpu, runs)?;
        let sched = logs(self.sched, runs)?;
        let orch = logs(self.orch, runs)?;
        let pmu = logs(self.pmu, runs)?;
        let scope = logs(self.scope, runs)?;
        let dep_gen = logs(self.dep_gen, runs)?;
        let args: Vec<Option<Taken<Vec<ArgsLane>>>> = match self.args {
            None => (0..runs).map(|_| None).collect(),
            Some(t) => split_taken(t, runs, |lanes: &Vec<ArgsLane>, lane, seqs| {
                let Some(l) = lanes.get(lane as usize) else {
                    return Ok(seqs.iter().map(|_| None).collect());
                };
                Ok(l.split_runs(seqs)?.into_iter().map(Some).collect())
            })?
            .into_iter()
            .map(Some)
            .collect(),
        };
        let mut out = Vec::with_capacity(runs);
        let mut it = (
            aicore.into_iter(),
            aicpu.into_iter(),
            sched.into_iter(),
            orch.into_iter(),
            pmu.into_iter(),
            scope.into_iter(),
            dep_gen.into_iter(),
            args.into_iter(),
        );
        for _ in 0..runs {
            out.push(Regions {
                aicore: it.0.next().flatten(),
                aicpu: it.1.next().flatten(),
                sched: it.2.next().flatten(),
                orch: it.3.next().flatten(),
                pmu: it.4.next().flatten(),
                scope: it.5.next().flatten(),
                dep_gen: it.6.next().flatten(),
                args: it.7.next().flatten(),
            });
        }
        Ok(out)
    }
}

/// Lane containers that can hold a lane's part of one run.
trait Lanes: Sized {
    type Lane;
    fn empty() -> Self;
    fn put(&mut self, lane: u32, l: Self::Lane);
    fn records(l: &Self::Lane) -> u64;
}

impl<R: Copy> Lanes for Logs<R> {
    type Lane = LaneLog<R>;
    fn empty() -> Self {
        BTreeMap::new()
    }
    fn put(&mut self, lane: u32, l: LaneLog<R>) {
        if !l.is_empty() {
            self.insert(lane, l);
        }
    }
    fn records(l: &LaneLog<R>) -> u64 {
        l.len() as u64
    }
}

impl Lanes for Vec<ArgsLane> {
    type Lane = ArgsLane;
    fn empty() -> Self {
        Vec::new()
    }
    fn put(&mut self, lane: u32, l: ArgsLane) {
        let i = lane as usize;
        if self.len() <= i {
            self.resize_with(i + 1, ArgsLane::default);
        }
        self[i] = l;
    }
    fn records(l: &ArgsLane) -> u64 {
        l.buffers.iter().map(|b| b.len() as u64).sum()
    }
}

/// Splits one region into `runs` parts: each lane's buffers by its run ends (`split_lane`
/// gives a lane's part of each run, `None` for a lane that collected nothing), and each lane's
/// loss line into the runs' lines.
fn split_taken<L: Lanes>(
    t: Taken<L>,
    runs: usize,
    split_lane: impl Fn(&L, u32, &[u32]) -> Result<Vec<Option<L::Lane>>, u32>,
) -> Result<Vec<Taken<L>>, DfxError> {
    let mut out: Vec<Taken<L>> = (0..runs)
        .map(|_| Taken { lanes: L::empty(), loss: Vec::new(), ends: Vec::new() })
        .collect();
    for (lane, (line, ends)) in t.loss.iter().zip(&t.ends).enumerate() {
        let seqs: Vec<u32> = ends.ends.iter().map(|e| e.seq).collect();
        let parts = split_lane(&t.lanes, lane as u32, &seqs).map_err(|seq| {
            DfxError::from(CollectError::AfterLastRun { lane: line.lane.clone(), seq })
        })?;
        let mut collected = 0;
        let mut prev = RunEnd::default();
        for (k, (part, end)) in parts.into_iter().zip(&ends.ends).enumerate() {
            let records = part.as_ref().map_or(0, L::records);
            collected += records;
            out[k].loss.push(run_line(line, &prev, end, records));
            out[k].ends.push(RunEnds { total: 1, ends: vec![*end] });
            if let Some(p) = part {
                out[k].lanes.put(lane as u32, p);
            }
            prev = *end;
        }
        if collected != line.collected {
            return Err(CollectError::RunRecords {
                lane: line.lane.clone(),
                in_runs: collected,
                collected: line.collected,
            }
            .into());
        }
    }
    Ok(out)
}

/// Run k's line of a lane: its writer's counts (the differences of the run's end to the one
/// before), the records the host collected of its buffers, and the gate waits the lane's stall
/// log numbers within the run.
fn run_line(session: &LaneLoss, prev: &RunEnd, end: &RunEnd, collected: u64) -> LaneLoss {
    // The stall log holds the session's last waits: wait n (from 0) is
    // `stalls[n - (stall_waits - stalls.len())]`.
    let first_logged = session.stall_waits.saturating_sub(session.stalls.len() as u64);
    let stalls = (prev.stall_waits.max(first_logged)..end.stall_waits.max(first_logged))
        .filter_map(|n| session.stalls.get((n - first_logged) as usize).copied())
        .collect();
    LaneLoss {
        produced: end.produced.saturating_sub(prev.produced),
        collected,
        dropped: end.dropped.saturating_sub(prev.dropped),
        stall_cycles: end.stall_cycles.saturating_sub(prev.stall_cycles),
        stall_waits: end.stall_waits.saturating_sub(prev.stall_waits),
        stalls,
        ..session.clone()
    }
}

/// The model of `regions` (a whole session's, or one run's) into `m`: the loss lines in the
/// subsystems' order, then three conversions on the machine's CPUs, all started at once:
/// DepGen's graph (a tensor-map replay over every submit, the dearest) and the dumped arguments'
/// index each on a thread of its own, the swimlane, PMU and ScopeStats rows on this one, which
/// then checks the DepGen graph against the swimlane once both are ready. (The index used to
/// wait for the rows, which left a core idle at the phase's end on 2 cores: the all-five storm's
/// model phase 42.1 -> 37.2 ms, medians of 10 interleaved runs.) Each falls back to this thread
/// when no thread can be had.
pub(super) fn build(
    mut m: RunModel,
    r: Regions,
    c: &DfxChip,
    opts: &DfxOptions,
    arena_drops: u64,
    t0: std::time::Instant,
) -> Result<RunModel, DfxError> {
    let ms = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1e3;
    let aicore = r.aicore.map(|t| {
        m.loss.lanes.extend(t.loss);
        t.lanes
    });
    let aicpu = r.aicpu.map(|t| {
        m.loss.lanes.extend(t.loss);
        t.lanes
    });
    let sched = r.sched.map(|t| {
        m.loss.lanes.extend(t.loss);
        t.lanes
    });
    let orch = r.orch.map(|t| {
        m.loss.lanes.extend(t.loss);
        t.lanes
    });
    let pmu = r.pmu.map(|t| {
        m.loss.lanes.extend(t.loss);
        t.lanes
    });
    let scope = r.scope.map(|t| {
        let produced = t.loss.iter().map(|l| l.produced).sum::<u64>();
        let dropped = t.loss.iter().map(|l| l.dropped).sum::<u64>();
        m.loss.lanes.extend(t.loss);
        (t.lanes, produced, dropped)
    });
    let dep_gen = r.dep_gen.map(|t| {
        let lossless = t.loss.iter().all(|l| l.dropped == 0);
        m.loss.lanes.extend(t.loss);
        (t.lanes, lossless)
    });
    let args = r.args.map(|t| {
        m.loss.lanes.extend(t.loss);
        t.lanes
    });
    let level = opts.dump_args;
    if opts.swimlane > 0 {
        m.swimlane = Some(Swimlane::new(opts.swimlane));
    }
    let thread = |name: &str| std::thread::Builder::new().name(name.into());
    std::thread::scope(|sc| -> Result<(), DfxError> {
        let graph = dep_gen.map(|(lanes, lossless)| {
            beside(sc, thread("ferry-dfx-deps"), move || {
                let r = model::dep_gen(lanes, lossless).and_then(|g| {
                    // Here, where the graph is in this CPU's cache.
                    deps::check_graph(&g, lossless)?;
                    Ok(g)
                });
                tracing::debug!(ms = ms(t0), "dfx finish: DepGen graph");
                r
            })
        });
        let dumped = args.map(|lanes| {
            beside(sc, thread("ferry-dfx-args"), move || {
                let r = args_dump(lanes, level, arena_drops);
                tracing::debug!(ms = ms(t0), "dfx finish: ArgsDump chains indexed");
                r
            })
        });
        let rows = rows(&mut m, (aicore, aicpu, sched, orch), pmu, scope, c, opts);
        tracing::debug!(ms = ms(t0), "dfx finish: swimlane, PMU and ScopeStats rows");
        let deps = graph.map(Beside::join).transpose();
        let checked = match (&rows, deps) {
            (Ok(()), Ok(Some(g))) => deps::check_timing(&g, m.swimlane.as_ref()).map(|()| Some(g)),
            (_, deps) => deps.map(|_| None),
        };
        tracing::debug!(ms = ms(t0), "dfx finish: DepGen check");
        let dumped = dumped.map(Beside::join).transpose();
        rows?;
        m.deps = checked?;
        m.args = dumped?;
        Ok(())
    })?;
    Ok(m)
}
