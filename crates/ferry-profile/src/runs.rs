//! `runs.json`: the runs of one DFX session over several runs (`ferry run --repeat N`), ferry's
//! own file beside the runs' directories.
//!
//! Each run's profile is a directory of its own, `run-000/`, `run-001/`, … (in launch order),
//! holding the original runtime's files for that run alone, each labelled with the run
//! ([`RunLabel`]: `metadata.run` in `chip_swimlane_records.json`, `run` in every file's `dfx`
//! loss-accounting object). `runs.json` lists them: per run its directory, the device cycles its
//! records span and its loss totals, which reconcile per run (produced = collected + dropped on
//! every lane).
//!
//! # Examples
//! ```
//! use ferry_profile::{read_runs, session_runs, write_runs, CoreType, LaneLoss, RunLabel, RunMeta,
//!                     RunModel};
//! let mut m = RunModel::new(RunMeta::new("a2a3", 50_000_000, vec![CoreType::Aic]));
//! m.loss.lanes.push(LaneLoss { produced: 5, collected: 5, ..LaneLoss::default() });
//! let runs: Vec<RunModel> = (0..2)
//!     .map(|index| {
//!         let mut r = m.clone();
//!         r.meta.run = Some(RunLabel { index, runs: 2 });
//!         r
//!     })
//!     .collect();
//! let s = session_runs(&runs);
//! assert_eq!(s.runs[1].dir, "run-001");
//! assert!(s.runs.iter().all(|r| r.reconciles && r.collected == 5));
//! let dir = std::env::temp_dir().join(format!("ferry-runs-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! write_runs(&dir, &s).unwrap();
//! assert_eq!(read_runs(&dir).unwrap(), Some(s));
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```
use std::path::Path;

use ferry_fs::Dir;
use serde::{Deserialize, Serialize};

use super::manifest::ManifestError;
use super::open::OpenError;
use super::read_limit;

use super::atomic::Written;
use super::model::{RunLabel, RunModel};
use super::OutputError;

/// File name inside a session's profile directory.
pub const RUNS_FILE: &str = "runs.json";

/// What `runs.json` holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRuns {
    /// One entry per run, in launch order.
    pub runs: Vec<SessionRun>,
    /// The first `warmup` runs are warm-up runs (`ferry run --warmup K`): readers set them
    /// apart from the steady state. Absent (0) when none was named.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warmup: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One run of a session.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRun {
    /// The run, from 0.
    pub index: u32,
    /// Its directory, relative to the session's.
    pub dir: String,
    /// Tasks its swimlane records (AICore blocks), when the swimlane was on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u64>,
    /// The device cycles its AICore records span, `[first start, last end]`, when the swimlane
    /// was on: the runs' spans are disjoint and in launch order (the chip runs one at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_cycles: Option<[u64; 2]>,
    /// Records its lanes produced (DepGen's and ArgsDump's in 8-byte words).
    pub produced: u64,
    /// Records the host collected of its buffers.
    pub collected: u64,
    /// Records its lanes dropped.
    pub dropped: u64,
    /// Whether produced = collected + dropped on every lane of the run.
    pub reconciles: bool,
}

/// The entries of `runs`, each a run's model (labelled; an unlabelled one counts as the run
/// of its position).
pub fn session_runs(runs: &[RunModel]) -> SessionRuns {
    let runs = runs
        .iter()
        .enumerate()
        .map(|(k, m)| {
            let index = m.meta.run.map_or(k as u32, |r| r.index);
            let (produced, collected, dropped) = m.loss.totals();
            let sw = m.swimlane.as_ref();
            let span = sw.and_then(|s| {
                let first = s.aicore_tasks.iter().map(|t| t.start).min()?;
                let last = s.aicore_tasks.iter().map(|t| t.end).max()?;
                Some([first, last])
            });
            SessionRun {
                index,
                dir: RunLabel::dir_name(index),
                blocks: sw.map(|s| s.aicore_tasks.len() as u64),
                device_cycles: span,
                produced,
                collected,
                dropped,
                reconciles: m.loss.reconciles(),
            }
        })
        .collect();
    SessionRuns { runs, warmup: 0 }
}

/// Writes `runs.json` into `dir`.
///
/// # Errors
/// [`OutputError::Json`], [`OutputError::Io`].
pub fn write_runs(dir: &Path, runs: &SessionRuns) -> Result<Written, OutputError> {
    write_runs_in(&Dir::open_writable(dir, true)?, runs)
}

/// [`write_runs`] through the directory handle `dir`.
///
/// # Errors
/// As [`write_runs`].
pub fn write_runs_in(dir: &Dir, runs: &SessionRuns) -> Result<Written, OutputError> {
    let bytes = serde_json::to_vec_pretty(runs).map_err(OutputError::json(RUNS_FILE))?;
    super::write_bytes_in(dir, RUNS_FILE, &bytes)
}

/// Reads `dir`'s `runs.json`; `None` when there is none (a profile of one run).
///
/// The file is checked like every file of a profile: opened without following a link, a
/// regular file of at most [`MAX_SMALL_FILE_BYTES`](super::MAX_SMALL_FILE_BYTES), and, when
/// the directory has a manifest, listed in it with the size and content hash the run wrote (an
/// edited count is refused, not shown).
///
/// # Errors
/// [`OpenError::Manifest`] (malformed, incomplete), [`OpenError::Refused`] (not listed,
/// changed), [`OpenError::Fs`] (a link, a FIFO, over the limit), and [`OpenError::Output`]:
/// [`OutputError::Json`] for a file that is not the format, [`OutputError::Format`] for a run
/// directory that is not `run-NNN` (a path that could leave the session's directory) or a run
/// listed twice.
pub fn read_runs(dir: &Path) -> Result<Option<SessionRuns>, OpenError> {
    let d = match Dir::open(dir) {
        Ok(d) => d,
        // No directory, no runs.json: the caller's reader says what is missing.
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    // The manifest that covers the session: its own, or the run's above it (a session of
    // one example of several).
    let input = match super::open::find_manifest(&d)? {
        Some((m, root, prefix)) => {
            let full = format!("{prefix}{RUNS_FILE}");
            if m.entry(&full).is_none() {
                if d.stat(RUNS_FILE)?.is_none() {
                    return Ok(None);
                }
                return Err(OpenError::Refused {
                    source: ManifestError::NotListed { dir: dir.to_path_buf(), file: full },
                });
            }
            m.open_verified(&root, &full).map_err(|source| OpenError::Refused { source })?
        }
        None => match d.open_file(RUNS_FILE, read_limit(RUNS_FILE)) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e.into()),
        },
    };
    let located = |e: OutputError| OpenError::Output(e.located(dir));
    let runs: SessionRuns = serde_json::from_reader(std::io::BufReader::new(input))
        .map_err(|e| located(OutputError::json(RUNS_FILE)(e)))?;
    let bad = |what: String| located(OutputError::Format { file: RUNS_FILE.into(), what });
    if let Some(r) = runs.runs.iter().find(|r| r.dir != RunLabel::dir_name(r.index)) {
        return Err(bad(format!(
            "run {} names directory {:?}, not {:?}",
            r.index,
            r.dir,
            RunLabel::dir_name(r.index)
        )));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(r) = runs.runs.iter().find(|r| !seen.insert(r.index)) {
        return Err(bad(format!("run {} is listed twice", r.index)));
    }
    Ok(Some(runs))
}

/// Bits of a session model's per-core dispatch counter that hold the run's own counter; the run
/// index sits above them ([`session_model`]).
pub const SESSION_REG_BITS: u32 = 24;

/// The runs of a session (each run's model, in launch order, `warmup` of them warm-up runs) read
/// as one model spanning them: for `ferry view` and `ferry trace` of a session, one timeline with
/// the runs and the gaps between them on the device clock they share.
///
/// The swimlane's and the PMU's records are concatenated; the loss lines are summed per lane;
/// [`RunMeta::session`](crate::RunMeta::session) lists each run's span. A run's per-core dispatch
/// counters restart at 1, so each run's are tagged with its index above [`SESSION_REG_BITS`] bits
/// (an AICore record still joins its own run's AICPU record). The dependency graph, the argument
/// dump and the scope records stay with each run (task ids repeat across runs): the merged model
/// has none.
///
/// # Examples
/// ```
/// use ferry_profile::{session_model, LossPolicy};
/// use ferry_profile::sample::sample_run;
/// let runs = vec![sample_run(LossPolicy::Block), sample_run(LossPolicy::Block)];
/// let one = runs[0].tasks().len();
/// let m = session_model(runs, 1);
/// assert_eq!(m.meta.session.len(), 2);
/// assert!(m.meta.session[0].warmup && !m.meta.session[1].warmup);
/// assert_eq!(m.tasks().len(), 2 * one);
/// assert!(m.deps.is_none());
/// ```
pub fn session_model(runs: Vec<RunModel>, warmup: u32) -> RunModel {
    let mut it = runs.into_iter().enumerate();
    let Some((_, first)) = it.next() else { return RunModel::new(super::RunMeta::default()) };
    let mut m = RunModel::new(super::RunMeta { run: None, ..first.meta.clone() });
    m.loss = super::LossAccounting { run: None, ..first.loss.clone() };
    m.loss.lanes.clear();
    let add = |m: &mut RunModel, k: usize, r: RunModel| {
        let index = r.meta.run.map_or(k as u32, |l| l.index);
        let tag = |reg: u32| (index << SESSION_REG_BITS) | (reg & ((1 << SESSION_REG_BITS) - 1));
        let tasks = r.tasks();
        let first = tasks.iter().map(|t| t.dispatch.unwrap_or(t.start)).min();
        let last = tasks.iter().map(|t| t.finish.unwrap_or(t.end)).max();
        if let (Some(first), Some(last)) = (first, last) {
            m.meta.session.push(super::model::RunSpan {
                index,
                warmup: index < warmup,
                first,
                last,
            });
        }
        if let Some(sw) = r.swimlane {
            let into = m.swimlane.get_or_insert_with(|| super::Swimlane::new(sw.level));
            into.aicore_tasks.extend(
                sw.aicore_tasks
                    .into_iter()
                    .map(|t| super::AicoreTask { reg_task_id: tag(t.reg_task_id), ..t }),
            );
            into.aicpu_tasks.extend(
                sw.aicpu_tasks
                    .into_iter()
                    .map(|t| super::AicpuTask { reg_task_id: tag(t.reg_task_id), ..t }),
            );
            let sched = &mut into.sched_phases;
            sched.resize_with(sched.len().max(sw.sched_phases.len()), Vec::new);
            for (d, s) in sched.iter_mut().zip(sw.sched_phases) {
                d.extend(s);
            }
            into.orch_phases
                .resize_with(into.orch_phases.len().max(sw.orch_phases.len()), Vec::new);
            for (d, s) in into.orch_phases.iter_mut().zip(sw.orch_phases) {
                d.extend(s);
            }
        }
        if let Some(p) = r.pmu {
            match &mut m.pmu {
                Some(into) if into.counter_names == p.counter_names => into.rows.extend(p.rows),
                Some(_) => {}
                None => m.pmu = Some(p),
            }
        }
        for l in r.loss.lanes {
            match m.loss.lanes.iter_mut().find(|x| x.lane == l.lane && x.subsystem == l.subsystem) {
                Some(x) => {
                    x.produced += l.produced;
                    x.collected += l.collected;
                    x.dropped += l.dropped;
                    x.stall_cycles += l.stall_cycles;
                    x.stall_waits += l.stall_waits;
                    x.stalls.extend(l.stalls);
                }
                None => m.loss.lanes.push(l),
            }
        }
        for (id, name) in r.kernels {
            m.kernels.entry(id).or_insert(name);
        }
    };
    add(&mut m, 0, first);
    for (k, r) in it {
        add(&mut m, k, r);
    }
    m
}
