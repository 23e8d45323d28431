//! The write phase in one call: every output file of a [`RunModel`] and both traces, streamed
//! from the model through [`write_atomic`], with a report of what was written and how long each
//! half took.
//!
//! # Examples
//! ```
//! use ferry_dfx::output::{sample::sample_run, write_all, LossPolicy, WriteOptions, CHROME_FILE};
//! let dir = std::env::temp_dir().join(format!("ferry-write-all-doc-{}", std::process::id()));
//! let run = sample_run(LossPolicy::Block);
//! let report = write_all(&dir, &run, &WriteOptions::default()).unwrap();
//! assert_eq!(report.records, run.record_count());
//! assert!(report.paths().any(|p| p.ends_with(CHROME_FILE)));
//! let on_disk: u64 = report.paths().map(|p| std::fs::metadata(p).unwrap().len()).sum();
//! assert_eq!(report.bytes, on_disk);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::args::{write_args_json_ticked, ARGS_BIN_FILE, ARGS_DIR, ARGS_FILE};
use super::atomic::{write_atomic, AtomicWriter};
use super::deps::{write_deps_ticked, DEPS_FILE};
use super::model::{RunModel, Subsystem};
use super::pmu::{write_pmu_ticked, PMU_FILE, PMU_LOSS_FILE};
use super::scopes::{write_scopes_ticked, SCOPES_DIR, SCOPES_FILE};
use super::stream::Ticker;
use super::swimlane::{write_swimlane_ticked, SWIMLANE_FILE};
use super::{chrome, perfetto, OutputError};

/// File name of the Perfetto protobuf trace inside the output directory.
pub const PERFETTO_FILE: &str = "trace.perfetto-trace";
/// File name of the Chrome JSON trace inside the output directory.
pub const CHROME_FILE: &str = "trace.chrome.json";

/// Which half of the write phase a [`WriteProgress`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WritePhase {
    /// The five subsystems' files; progress counts records ([`RunModel::record_count`]).
    Files,
    /// The Perfetto and Chrome traces; progress counts trace items (tracks, slices and counter
    /// values, once per trace).
    Traces,
}

/// One progress report of [`write_all`]: sent when a file starts, every few thousand items
/// inside it, and once at the end of each phase (`done == total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteProgress {
    /// The phase.
    pub phase: WritePhase,
    /// Name of the file being written (e.g. `deps.json`).
    pub file: &'static str,
    /// Items of this phase written so far.
    pub done: u64,
    /// Items this phase writes in all.
    pub total: u64,
}

/// What [`write_all`] writes, and whom it tells how far it got.
#[derive(Clone, Copy)]
pub struct WriteOptions<'a> {
    /// Write the subsystems' files (`ferry run`); off to only add traces to existing files
    /// (`ferry trace`).
    pub files: bool,
    /// Write `trace.perfetto-trace` and `trace.chrome.json`.
    pub traces: bool,
    /// Called with the progress (always from the calling thread: the traces' progress, made on a
    /// second thread, is relayed).
    pub progress: Option<&'a dyn Fn(WriteProgress)>,
}

impl Default for WriteOptions<'_> {
    /// Files and traces, no progress.
    fn default() -> Self {
        Self { files: true, traces: true, progress: None }
    }
}

impl fmt::Debug for WriteOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteOptions")
            .field("files", &self.files)
            .field("traces", &self.traces)
            .field("progress", &self.progress.map(|_| "Fn(WriteProgress)"))
            .finish()
    }
}

/// One file [`write_all`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenFile {
    /// Where.
    pub path: PathBuf,
    /// Its size: the bytes that reached the file.
    pub bytes: u64,
    /// Records it holds (trace items for the traces; 0 for `args.bin` and the PMU sidecar).
    pub records: u64,
    /// Time to write it, fsync and rename included.
    pub elapsed: Duration,
}

/// Size of the trace [`write_all`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// Tracks.
    pub tracks: usize,
    /// Slices.
    pub slices: usize,
    /// Counter values.
    pub counters: usize,
}

/// What [`write_all`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WriteReport {
    /// Every file written: the subsystems' files in write order, then the traces.
    pub files: Vec<WrittenFile>,
    /// Total bytes of those files.
    pub bytes: u64,
    /// The model's records ([`RunModel::record_count`]); the files phase's rate is
    /// `records / files_elapsed`.
    pub records: u64,
    /// Wall time of the subsystems' files (zero when they were not written).
    pub files_elapsed: Duration,
    /// Wall time of the traces, planning included (zero when they were not written).
    pub traces_elapsed: Duration,
    /// The trace's size, when the traces were written.
    pub trace: Option<TraceStats>,
}

impl WriteReport {
    /// The paths written, in write order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> + '_ {
        self.files.iter().map(|f| f.path.as_path())
    }

    /// Records per second of the files phase (0 when it did not run).
    pub fn records_per_sec(&self) -> f64 {
        let s = self.files_elapsed.as_secs_f64();
        if s > 0.0 {
            self.records as f64 / s
        } else {
            0.0
        }
    }

    /// Bytes of the subsystems' files per record (traces excluded).
    pub fn bytes_per_record(&self) -> f64 {
        let traces = [PERFETTO_FILE, CHROME_FILE];
        let bytes: u64 = self
            .files
            .iter()
            .filter(|f| !traces.iter().any(|t| f.path.ends_with(t)))
            .map(|f| f.bytes)
            .sum();
        bytes as f64 / self.records.max(1) as f64
    }
}

/// Runs one file's writer through [`write_atomic`], keeping the writer's own error.
fn atomic_file<F>(path: &Path, write: F) -> Result<u64, OutputError>
where
    F: FnOnce(&mut AtomicWriter) -> Result<(), OutputError>,
{
    let mut inner: Option<OutputError> = None;
    let r = write_atomic(path, |w| {
        write(w).map_err(|e| {
            let io = io::Error::other(e.to_string());
            inner = Some(e);
            io
        })
    });
    match (r, inner) {
        (Ok(n), _) => Ok(n),
        (Err(_), Some(e)) => Err(e),
        (Err(source), None) => Err(OutputError::Io { file: path.display().to_string(), source }),
    }
}

/// Records the files of one phase into a report.
struct Files<'r, 't> {
    report: &'r mut WriteReport,
    tick: &'r Ticker<'t>,
}

impl Files<'_, '_> {
    fn write<F>(&mut self, path: PathBuf, name: &'static str, write: F) -> Result<(), OutputError>
    where
        F: FnOnce(&mut AtomicWriter, &Ticker<'_>) -> Result<(), OutputError>,
    {
        let (t0, before) = (Instant::now(), self.tick.done());
        self.tick.start_file(name);
        let bytes = atomic_file(&path, |w| write(w, self.tick))?;
        self.report.bytes += bytes;
        self.report.files.push(WrittenFile {
            path,
            bytes,
            records: self.tick.done() - before,
            elapsed: t0.elapsed(),
        });
        Ok(())
    }
}

/// Writes `run` into `dir`: every subsystem present in it (each file streamed from the model
/// through one [`write_atomic`], files of absent subsystems left alone) and, on a second thread
/// at the same time, the two traces ([`PERFETTO_FILE`], [`CHROME_FILE`]) from one
/// [`perfetto::plan`], as `opts` asks.
///
/// This is the whole write phase of `ferry run` (and, with `files: false`, of `ferry trace`);
/// [`WriteReport`] says what it wrote and how long each half took.
///
/// # Errors
///
/// The first [`OutputError`] of any file; files written before it stay complete, the failing
/// one keeps its previous content.
pub fn write_all(
    dir: &Path,
    run: &RunModel,
    opts: &WriteOptions<'_>,
) -> Result<WriteReport, OutputError> {
    let mut report = WriteReport { records: run.record_count(), ..Default::default() };
    // The traces are planned and written on a second thread while this one writes the files
    // (they only read the model), so the phase takes the longer of the two halves, not their
    // sum. The trace thread's progress comes back through `relay`, in order, for the callback.
    let (relay, reports) = std::sync::mpsc::channel::<WriteProgress>();
    std::thread::scope(|sc| {
        let traces = opts.traces.then(|| {
            let relay = opts.progress.is_some().then_some(relay);
            std::thread::Builder::new()
                .name("ferry-write-traces".into())
                .spawn_scoped(sc, move || write_traces(dir, run, relay))
        });
        if opts.files {
            let t0 = Instant::now();
            let tick = Ticker::new(opts.progress, WritePhase::Files, report.records);
            write_files(dir, run, &mut Files { report: &mut report, tick: &tick })?;
            tick.report();
            report.files_elapsed = t0.elapsed();
        }
        let Some(traces) = traces else { return Ok(report) };
        let traces = traces.map_err(|e| OutputError::Io { file: CHROME_FILE.into(), source: e })?;
        if let Some(cb) = opts.progress {
            // Ends when the trace thread drops its sender (done, or failed).
            for p in &reports {
                cb(p);
            }
        }
        let t = match traces.join() {
            Ok(t) => t?,
            Err(p) => std::panic::resume_unwind(p),
        };
        report.bytes += t.report.bytes;
        report.files.extend(t.report.files);
        report.trace = Some(t.stats);
        report.traces_elapsed = t.elapsed;
        Ok(report)
    })
}

/// What the trace thread wrote.
struct TracePart {
    report: WriteReport,
    stats: TraceStats,
    elapsed: Duration,
}

/// Plans the trace from `run` and writes both traces ([`PERFETTO_FILE`], [`CHROME_FILE`]),
/// sending its progress to `relay`.
fn write_traces(
    dir: &Path,
    run: &RunModel,
    relay: Option<std::sync::mpsc::Sender<WriteProgress>>,
) -> Result<TracePart, OutputError> {
    let t0 = Instant::now();
    let plan = perfetto::plan(run);
    let items = (plan.tracks.len() + plan.slices.len() + plan.counters.len()) as u64;
    let send = |p: WriteProgress| {
        if let Some(r) = &relay {
            // A receiver that stopped listening only loses progress reports.
            let _ = r.send(p);
        }
    };
    let tick = Ticker::new(relay.is_some().then_some(&send), WritePhase::Traces, 2 * items);
    let mut report = WriteReport::default();
    let mut files = Files { report: &mut report, tick: &tick };
    files.write(dir.join(PERFETTO_FILE), PERFETTO_FILE, |w, t| {
        perfetto::write_plan_ticked(w, &plan, perfetto::EncodeOptions { intern_names: true }, t)
            .map_err(OutputError::io(PERFETTO_FILE))
    })?;
    files.write(dir.join(CHROME_FILE), CHROME_FILE, |w, t| {
        chrome::write_plan_ticked(w, &plan, t).map_err(OutputError::io(CHROME_FILE))
    })?;
    tick.report();
    let stats = TraceStats {
        tracks: plan.tracks.len(),
        slices: plan.slices.len(),
        counters: plan.counters.len(),
    };
    Ok(TracePart { report, stats, elapsed: t0.elapsed() })
}

fn write_files(dir: &Path, run: &RunModel, f: &mut Files<'_, '_>) -> Result<(), OutputError> {
    let loss = |s| run.loss.of(s);
    if let Some(sw) = &run.swimlane {
        let l = loss(Subsystem::ChipSwimlane);
        f.write(dir.join(SWIMLANE_FILE), SWIMLANE_FILE, |w, t| {
            write_swimlane_ticked(w, &run.meta, &run.kernels, sw, &l, t)
        })?;
    }
    if let Some(p) = &run.pmu {
        f.write(dir.join(PMU_FILE), PMU_FILE, |w, t| write_pmu_ticked(w, p, t))?;
        let l = loss(Subsystem::Pmu);
        f.write(dir.join(PMU_LOSS_FILE), PMU_LOSS_FILE, |w, _| {
            serde_json::to_writer_pretty(w, &l).map_err(OutputError::json(PMU_LOSS_FILE))
        })?;
    }
    if let Some(g) = &run.deps {
        let l = loss(Subsystem::DepGen);
        f.write(dir.join(DEPS_FILE), DEPS_FILE, |w, t| write_deps_ticked(w, g, &l, t))?;
    }
    if let Some(a) = &run.args {
        // Payloads first: the metadata never names a bin that is not complete on disk.
        if !a.bin.is_empty() {
            f.write(dir.join(ARGS_DIR).join(ARGS_BIN_FILE), ARGS_BIN_FILE, |w, _| {
                w.write_all(&a.bin).map_err(OutputError::io(ARGS_BIN_FILE))
            })?;
        }
        let l = loss(Subsystem::ArgsDump);
        f.write(dir.join(ARGS_DIR).join(ARGS_FILE), ARGS_FILE, |w, t| {
            write_args_json_ticked(w, a, &l, t)
        })?;
    }
    if let Some(s) = &run.scopes {
        let l = loss(Subsystem::ScopeStats);
        f.write(dir.join(SCOPES_DIR).join(SCOPES_FILE), SCOPES_FILE, |w, t| {
            write_scopes_ticked(w, s, &l, t)
        })?;
    }
    Ok(())
}
