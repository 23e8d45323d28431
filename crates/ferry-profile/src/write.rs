//! The write phase in one call: every output file of a [`RunModel`] and its traces, streamed
//! from the model through [`write_atomic`], with a report of what was written and how long each
//! half took.
//!
//! # Examples
//! ```
//! use ferry_profile::{sample::sample_run, write_all, LossPolicy, WriteOptions};
//! use ferry_profile::{CHROME_FILE, PERFETTO_FILE};
//! let dir = std::env::temp_dir().join(format!("ferry-write-all-doc-{}", std::process::id()));
//! let run = sample_run(LossPolicy::Block);
//! let report = write_all(&dir, &run, &WriteOptions::default()).unwrap();
//! assert_eq!(report.records, run.record_count());
//! assert!(report.paths().any(|p| p.ends_with(PERFETTO_FILE)));
//! // The Chrome JSON only when asked for.
//! assert!(!report.paths().any(|p| p.ends_with(CHROME_FILE)));
//! let opts = WriteOptions { chrome: true, ..WriteOptions::default() };
//! let report = write_all(&dir, &run, &opts).unwrap();
//! assert!(report.paths().any(|p| p.ends_with(CHROME_FILE)));
//! let on_disk: u64 = report.paths().map(|p| std::fs::metadata(p).unwrap().len()).sum();
//! assert_eq!(report.bytes, on_disk);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::args::{write_args_json_ticked, ARGS_BIN_FILE, ARGS_DIR, ARGS_FILE};
use super::atomic::{AtomicWriter, CommitResult, Committer, Written};
use super::deps::{write_deps_ticked, DEPS_FILE};
use super::model::{RunModel, Subsystem};
use super::name_map::{name_map_file, write_name_map, NameMap, DEFAULT_CASE, NAME_MAP_LABEL};
use super::pmu::{write_pmu_ticked, PMU_FILE, PMU_LOSS_FILE};
use super::scope_names::{write_scope_names, SCOPE_NAMES_FILE};
use super::scopes::{write_scopes_ticked, SCOPES_DIR, SCOPES_FILE};
use super::stream::Ticker;
use super::swimlane::{write_swimlane_ticked, SWIMLANE_FILE};
use super::{chrome, perfetto, OutputError};
use ferry_fs::Dir;

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
    /// Write `trace.perfetto-trace`.
    pub traces: bool,
    /// With `traces`, also write `trace.chrome.json`, the Chrome Trace Event JSON (Perfetto's
    /// "legacy, best-effort" format, for tools that read nothing else). Off by default: it is
    /// the largest file of a run (~2x the Perfetto trace) and the costliest to encode.
    pub chrome: bool,
    /// Called with the progress (always from the calling thread: the traces' progress, made on a
    /// second thread, is relayed).
    pub progress: Option<&'a dyn Fn(WriteProgress)>,
}

impl Default for WriteOptions<'_> {
    /// Files and the Perfetto trace, no Chrome JSON, no progress.
    fn default() -> Self {
        Self { files: true, traces: true, chrome: false, progress: None }
    }
}

impl fmt::Debug for WriteOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteOptions")
            .field("files", &self.files)
            .field("traces", &self.traces)
            .field("chrome", &self.chrome)
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
    /// XXH3-64 of its content (for a run's manifest).
    pub xxh3: u64,
    /// Records it holds (trace items for the traces; 0 for `args.bin` and the PMU sidecar).
    pub records: u64,
    /// Time to write its bytes. Its fsync and rename follow on [`write_all`]'s commit thread
    /// (the phase's `files_elapsed` / `traces_elapsed` include them).
    pub elapsed: Duration,
}

/// Size of the trace [`write_all`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// Tracks.
    pub tracks: usize,
    /// Slices.
    pub slices: usize,
    /// Counter values.
    pub counters: usize,
    /// The tracks that held nothing, not written ([`TracePlan::prune_empty`](crate::perfetto::TracePlan::prune_empty)).
    pub empty: Vec<String>,
}

/// What [`write_all`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WriteReport {
    /// Every file written: the subsystems' files (by subsystem: swimlane, PMU, DepGen, ArgsDump,
    /// ScopeStats; each one's in the order it wrote them), then the traces.
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
    /// Adds `other`'s files, bytes, records and times to this report (the runs of a session
    /// written one after the other); the traces' sizes add up too.
    pub fn add(&mut self, other: &WriteReport) {
        self.files.extend(other.files.iter().cloned());
        self.bytes += other.bytes;
        self.records += other.records;
        self.files_elapsed += other.files_elapsed;
        self.traces_elapsed += other.traces_elapsed;
        if let Some(t) = other.trace.clone() {
            let s = self.trace.get_or_insert_with(TraceStats::default);
            s.tracks += t.tracks;
            s.slices += t.slices;
            s.counters += t.counters;
        }
    }

    /// Bytes of the two traces (Perfetto and Chrome JSON) among the files written; the rest of
    /// [`WriteReport::bytes`] is the subsystems' files.
    pub fn trace_bytes(&self) -> u64 {
        let traces = [crate::PERFETTO_FILE, crate::CHROME_FILE];
        let is_trace = |f: &&WrittenFile| traces.iter().any(|t| f.path.ends_with(t));
        self.files.iter().filter(is_trace).map(|f| f.bytes).sum()
    }

    /// The paths written, in the order of [`WriteReport::files`].
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

    /// What `ferry trace` (and `ferry run` with the swimlane on) prints about the traces this
    /// write put in `dir`: the Perfetto trace's tracks, slices and counter values, the tracks
    /// left out for holding nothing, and the Chrome JSON when it was written.
    pub fn traces_text(&self, dir: &Path) -> String {
        let t = self.trace.clone().unwrap_or_default();
        let mut s = format!(
            "{}: {}, {}, {}\n",
            dir.join(PERFETTO_FILE).display(),
            crate::views::plural(t.tracks as u64, "track", "tracks"),
            crate::views::plural(t.slices as u64, "slice", "slices"),
            crate::views::plural(t.counters as u64, "counter value", "counter values"),
        );
        // The tracks that held nothing are not in the trace: named in one line.
        if !t.empty.is_empty() {
            const SHOWN: usize = 6;
            let more = t.empty.len().saturating_sub(SHOWN);
            let tail = if more > 0 { format!(", … ({more} more)") } else { String::new() };
            s += &format!(
                "  not drawn, nothing recorded: {}: {}{tail}\n",
                crate::views::plural(t.empty.len() as u64, "track", "tracks"),
                t.empty[..t.empty.len().min(SHOWN)].join(", ")
            );
        }
        if self.paths().any(|p| p.ends_with(CHROME_FILE)) {
            s += &format!("{}: Chrome JSON\n", dir.join(CHROME_FILE).display());
        }
        s
    }
}

/// Runs one file's writer through `commit` (the atomic write's fsync and rename follow on its
/// thread), keeping the writer's own error.
fn atomic_file<F>(
    commit: &Committer,
    dir: &Dir,
    rel: &str,
    write: F,
) -> Result<Written, OutputError>
where
    F: FnOnce(&mut AtomicWriter) -> Result<(), OutputError>,
{
    let mut inner: Option<OutputError> = None;
    let r = commit.write(dir, rel, |w| {
        write(w).map_err(|e| {
            let io = io::Error::other(e.to_string());
            inner = Some(e);
            io
        })
    });
    match (r, inner) {
        (Ok(n), _) => Ok(n),
        (Err(_), Some(e)) => Err(e),
        (Err(source), None) => {
            Err(OutputError::Io { file: dir.join(rel).display().to_string(), source })
        }
    }
}

/// Records the files one thread wrote.
struct Files<'r, 't> {
    dir: &'r Dir,
    report: &'r mut WriteReport,
    tick: &'r Ticker<'t>,
    commit: &'r Committer,
}

impl Files<'_, '_> {
    fn write<F>(&mut self, rel: &str, name: &'static str, write: F) -> Result<(), OutputError>
    where
        F: FnOnce(&mut AtomicWriter, &Ticker<'_>) -> Result<(), OutputError>,
    {
        let (t0, before) = (Instant::now(), self.tick.done());
        self.tick.start_file(name);
        let written = atomic_file(self.commit, self.dir, rel, |w| write(w, self.tick))?;
        let path = self.dir.join(rel);
        self.report.bytes += written.bytes;
        self.report.files.push(WrittenFile {
            path,
            bytes: written.bytes,
            xxh3: written.xxh3,
            records: self.tick.done() - before,
            elapsed: t0.elapsed(),
        });
        Ok(())
    }
}

/// One unit of the files phase: one subsystem's files, written in order by one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum FileJob {
    Swimlane,
    Pmu,
    Deps,
    Args,
    Scopes,
}

impl FileJob {
    /// The jobs `run` needs, in the order the threads take them: the ones that usually take
    /// longest first (per record, the dumped arguments' JSON is the largest file, then the
    /// DepGen graph), so the two threads end close together.
    fn for_run(run: &RunModel) -> Vec<FileJob> {
        let mut v = Vec::new();
        if run.args.is_some() {
            v.push(FileJob::Args);
        }
        if run.deps.is_some() {
            v.push(FileJob::Deps);
        }
        if run.swimlane.is_some() {
            v.push(FileJob::Swimlane);
        }
        if run.pmu.is_some() {
            v.push(FileJob::Pmu);
        }
        if run.scopes.is_some() {
            v.push(FileJob::Scopes);
        }
        v
    }

    fn write(self, run: &RunModel, f: &mut Files<'_, '_>) -> Result<(), OutputError> {
        let loss = |s| run.loss.of(s);
        match self {
            FileJob::Swimlane => {
                let Some(sw) = &run.swimlane else { return Ok(()) };
                let l = loss(Subsystem::ChipSwimlane);
                f.write(SWIMLANE_FILE, SWIMLANE_FILE, |w, t| {
                    write_swimlane_ticked(w, &run.meta, &run.kernels, sw, &l, t)
                })?;
                // Beside the records, the names the original tools label kernels with.
                let case = run.meta.case.as_deref().unwrap_or(DEFAULT_CASE);
                let map = NameMap::of_run(run);
                f.write(&name_map_file(case), NAME_MAP_LABEL, |w, _| write_name_map(w, &map))
            }
            FileJob::Pmu => {
                let Some(p) = &run.pmu else { return Ok(()) };
                f.write(PMU_FILE, PMU_FILE, |w, t| write_pmu_ticked(w, p, t))?;
                let l = loss(Subsystem::Pmu);
                f.write(PMU_LOSS_FILE, PMU_LOSS_FILE, |w, _| {
                    serde_json::to_writer_pretty(w, &l).map_err(OutputError::json(PMU_LOSS_FILE))
                })
            }
            FileJob::Deps => {
                let Some(g) = &run.deps else { return Ok(()) };
                let l = loss(Subsystem::DepGen);
                f.write(DEPS_FILE, DEPS_FILE, |w, t| write_deps_ticked(w, g, &l, t))
            }
            FileJob::Args => {
                let Some(a) = &run.args else { return Ok(()) };
                // Payloads first: the metadata never names a bin that is not complete on disk.
                if !a.bin.is_empty() {
                    f.write(&format!("{ARGS_DIR}/{ARGS_BIN_FILE}"), ARGS_BIN_FILE, |w, _| {
                        a.bin.write_to(w).map_err(OutputError::io(ARGS_BIN_FILE))
                    })?;
                }
                let l = loss(Subsystem::ArgsDump);
                f.write(&format!("{ARGS_DIR}/{ARGS_FILE}"), ARGS_FILE, |w, t| {
                    write_args_json_ticked(w, a, &l, t)
                })
            }
            FileJob::Scopes => {
                let Some(s) = &run.scopes else { return Ok(()) };
                let l = loss(Subsystem::ScopeStats);
                f.write(&format!("{SCOPES_DIR}/{SCOPES_FILE}"), SCOPES_FILE, |w, t| {
                    write_scopes_ticked(w, s, &l, t)
                })?;
                if s.names.is_empty() {
                    return Ok(());
                }
                f.write(&format!("{SCOPES_DIR}/{SCOPE_NAMES_FILE}"), SCOPE_NAMES_FILE, |w, _| {
                    write_scope_names(w, &s.names)
                })
            }
        }
    }
}

/// The files phase's jobs, taken in turn by the threads of [`write_all`].
struct JobQueue {
    jobs: Vec<FileJob>,
    next: AtomicUsize,
    /// A thread's job failed: nobody starts another.
    failed: AtomicBool,
    /// Records the files phase wrote so far (shared by the threads' tickers).
    done: AtomicU64,
}

/// The files one thread wrote, by job, and when it finished its last job.
#[derive(Default)]
struct JobsDone {
    files: Vec<(FileJob, WrittenFile)>,
    bytes: u64,
    ended: Option<Instant>,
}

impl JobQueue {
    /// Takes jobs until none is left (or one failed), writing each with a ticker reporting to
    /// `cb`.
    fn work(
        &self,
        dir: &Dir,
        run: &RunModel,
        total: u64,
        commit: &Committer,
        cb: Option<&dyn Fn(WriteProgress)>,
    ) -> Result<JobsDone, OutputError> {
        let tick = Ticker::shared(cb, WritePhase::Files, total, &self.done);
        let mut out = JobsDone::default();
        // Relaxed (both): the index only hands out each job once (an RMW); a failure seen late
        // only lets one more job start, whose files are complete on their own.
        while !self.failed.load(Ordering::Relaxed) && !commit.failed() {
            let Some(&job) = self.jobs.get(self.next.fetch_add(1, Ordering::Relaxed)) else {
                break;
            };
            let mut report = WriteReport::default();
            let r = job.write(run, &mut Files { dir, report: &mut report, tick: &tick, commit });
            out.bytes += report.bytes;
            out.files.extend(report.files.into_iter().map(|f| (job, f)));
            out.ended = Some(Instant::now());
            if let Err(e) = r {
                // Relaxed: as above.
                self.failed.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(out)
    }
}

/// Hands the calling thread's callback the progress of both threads in the order a progress
/// bar wants it: the files phase as it goes (its count never going back, though the two
/// threads' reports arrive interleaved), the traces phase's reports once the files are done.
struct Relay<'a> {
    cb: &'a dyn Fn(WriteProgress),
    rx: std::sync::mpsc::Receiver<WriteProgress>,
    files_done: std::cell::Cell<u64>,
    traces: std::cell::RefCell<Vec<WriteProgress>>,
}

impl Relay<'_> {
    fn emit(&self, p: WriteProgress) {
        match p.phase {
            WritePhase::Files if p.done >= self.files_done.get() => {
                self.files_done.set(p.done);
                (self.cb)(p);
            }
            WritePhase::Files => {}
            WritePhase::Traces => self.traces.borrow_mut().push(p),
        }
    }

    /// Passes on what the second thread sent so far, then `p`.
    fn own(&self, p: WriteProgress) {
        while let Ok(q) = self.rx.try_recv() {
            self.emit(q);
        }
        self.emit(p);
    }

    /// Passes on everything until the second thread hangs up, then the traces' reports.
    fn finish(&self) {
        for q in self.rx.iter() {
            self.emit(q);
        }
        for q in self.traces.take() {
            (self.cb)(q);
        }
    }
}

/// Writes `run` into `dir`: every subsystem present in it (each file streamed from the model
/// into a temp file beside its target, files of absent subsystems left alone) and the traces
/// ([`PERFETTO_FILE`], and [`CHROME_FILE`] with `opts.chrome`) from one [`perfetto::plan`], as
/// `opts` asks, on two threads: a second one plans and writes the traces while the calling one
/// starts on the files, then both take the remaining subsystems' files in turn (one subsystem's
/// files stay on one thread, in order). A third thread commits each finished temp file as
/// [`write_atomic`](super::write_atomic) does (fsync, rename; each directory fsynced once at
/// the end), in the order they were finished, so the writers never wait for the disk.
///
/// This is the whole write phase of `ferry run` (and, with `files: false`, of `ferry trace`);
/// [`WriteReport`] says what it wrote and how long each half took. When it returns `Ok`, every
/// file is durable under its final name.
///
/// # Errors
///
/// The first [`OutputError`] of any file (the calling thread's, when both threads failed, a
/// writer's before a commit's); after a failure no further subsystem is started and nothing
/// more is renamed: files committed before it stay complete, the failing one and those after
/// it keep their previous content.
pub fn write_all(
    dir: &Path,
    run: &RunModel,
    opts: &WriteOptions<'_>,
) -> Result<WriteReport, OutputError> {
    let handle = ferry_fs::Dir::open_writable(dir, true)?;
    write_all_in(&handle, run, opts)
}

/// [`write_all`] into the directory handle `dir` (every file and subdirectory below it is
/// reached through the handle, without following a link).
///
/// # Errors
/// As [`write_all`].
pub fn write_all_in(
    dir: &Dir,
    run: &RunModel,
    opts: &WriteOptions<'_>,
) -> Result<WriteReport, OutputError> {
    let t0 = Instant::now();
    let records = run.record_count();
    let queue = JobQueue {
        jobs: if opts.files { FileJob::for_run(run) } else { Vec::new() },
        next: AtomicUsize::new(0),
        failed: AtomicBool::new(false),
        done: AtomicU64::new(0),
    };
    let (tx, rx) = std::sync::mpsc::channel::<WriteProgress>();
    let relay = opts.progress.map(|cb| Relay {
        cb,
        rx,
        files_done: std::cell::Cell::new(0),
        traces: std::cell::RefCell::new(Vec::new()),
    });
    let with_traces = opts.traces;
    let with_chrome = opts.chrome;
    let second = with_traces || queue.jobs.len() > 1;
    let (commit, commit_loop) = Committer::new();
    let (mine, theirs, committed) = std::thread::scope(|sc| {
        let queue = &queue;
        let committer = std::thread::Builder::new()
            .name("ferry-commit".into())
            .spawn_scoped(sc, commit_loop)
            .map_err(|source| OutputError::Io { file: "(commit thread)".into(), source })?;
        let theirs = second.then(|| {
            let tx = opts.progress.is_some().then_some(tx);
            let commit = commit.clone();
            std::thread::Builder::new().name("ferry-write".into()).spawn_scoped(sc, move || {
                let commit = &commit;
                let send = |p: WriteProgress| {
                    if let Some(tx) = &tx {
                        // A receiver that stopped listening only loses progress reports.
                        let _ = tx.send(p);
                    }
                };
                let cb = tx.is_some().then_some(&send as &dyn Fn(WriteProgress));
                let traces = if with_traces {
                    match write_traces(dir, run, with_chrome, commit, cb) {
                        Ok(t) => Some(t),
                        Err(e) => {
                            // Relaxed: as in `JobQueue::work`.
                            queue.failed.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                } else {
                    None
                };
                Ok((traces, queue.work(dir, run, records, commit, cb)?))
            })
        });
        let own = |p: WriteProgress| {
            if let Some(r) = &relay {
                r.own(p);
            }
        };
        let cb = relay.is_some().then_some(&own as &dyn Fn(WriteProgress));
        let mine = queue.work(dir, run, records, &commit, cb);
        let theirs = match theirs {
            None => None,
            Some(Err(e)) => Some(Err(OutputError::Io { file: "(write thread)".into(), source: e })),
            Some(Ok(h)) => {
                if let Some(r) = &relay {
                    // Ends when the second thread drops its sender (done, or failed).
                    r.finish();
                }
                Some(match h.join() {
                    Ok(t) => t,
                    Err(p) => std::panic::resume_unwind(p),
                })
            }
        };
        // Both writers are done: the commit loop ends once its last sender is gone.
        drop(commit);
        let committed: CommitResult = match committer.join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        };
        Ok::<_, OutputError>((mine, theirs, committed))
    })?;
    let (committed, commit_err) = committed;
    let mine = mine?;
    let (traces, theirs) = match theirs.transpose()? {
        Some((t, j)) => (t, j),
        None => (None, JobsDone::default()),
    };
    if let Some((path, source)) = commit_err {
        return Err(OutputError::Io { file: path.display().to_string(), source });
    }
    let commit_of = |f: &WrittenFile| committed.iter().find(|c| c.path == f.path).map(|c| c.at);
    let mut report = WriteReport { records, ..Default::default() };
    if opts.files {
        let mut files: Vec<(FileJob, WrittenFile)> = mine.files;
        files.extend(theirs.files);
        let ended = mine.ended.into_iter().chain(theirs.ended).max();
        let last_commit = files.iter().filter_map(|(_, f)| commit_of(f)).max();
        let ended = ended.into_iter().chain(last_commit).max();
        report.files_elapsed = ended.map_or(Duration::ZERO, |e| e - t0);
        if let (Some(r), Some(_)) = (&relay, ended) {
            // Relaxed: both threads have been joined.
            let done = queue.done.load(Ordering::Relaxed);
            (r.cb)(WriteProgress { phase: WritePhase::Files, file: "", done, total: records });
        }
        // The report lists files by subsystem, each subsystem's in the order it wrote them.
        files.sort_by_key(|(job, _)| *job);
        report.files = files.into_iter().map(|(_, f)| f).collect();
        report.bytes = mine.bytes + theirs.bytes;
    }
    if let Some(t) = traces {
        let last_commit = t.report.files.iter().filter_map(commit_of).max();
        report.bytes += t.report.bytes;
        report.files.extend(t.report.files);
        report.trace = Some(t.stats);
        report.traces_elapsed = last_commit.map_or(t.elapsed, |c| (c - t.started).max(t.elapsed));
    }
    Ok(report)
}

/// What the trace thread wrote.
struct TracePart {
    report: WriteReport,
    stats: TraceStats,
    /// When it started, and how long its writing took (commits excluded).
    started: Instant,
    elapsed: Duration,
}

/// Plans the trace from `run` and writes [`PERFETTO_FILE`] (and, with `chrome`,
/// [`CHROME_FILE`]), reporting its progress to `cb`.
fn write_traces(
    dir: &Dir,
    run: &RunModel,
    chrome: bool,
    commit: &Committer,
    cb: Option<&dyn Fn(WriteProgress)>,
) -> Result<TracePart, OutputError> {
    let t0 = Instant::now();
    // Tracks that hold nothing are not drawn (the trace summary names them in one line).
    let mut plan = perfetto::plan(run);
    let empty = plan.prune_empty();
    let items = (plan.tracks.len() + plan.slices.len() + plan.counters.len()) as u64;
    let tick = Ticker::new(cb, WritePhase::Traces, if chrome { 2 } else { 1 } * items);
    let mut report = WriteReport::default();
    let mut files = Files { dir, report: &mut report, tick: &tick, commit };
    files.write(PERFETTO_FILE, PERFETTO_FILE, |w, t| {
        perfetto::write_plan_ticked(w, &plan, perfetto::EncodeOptions { intern_names: true }, t)
            .map_err(OutputError::io(PERFETTO_FILE))
    })?;
    if chrome {
        files.write(CHROME_FILE, CHROME_FILE, |w, t| {
            chrome::write_plan_ticked(w, &plan, t).map_err(OutputError::io(CHROME_FILE))
        })?;
    }
    tick.report();
    let stats = TraceStats {
        tracks: plan.tracks.len(),
        slices: plan.slices.len(),
        counters: plan.counters.len(),
        empty,
    };
    Ok(TracePart { report, stats, started: t0, elapsed: t0.elapsed() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(jobs: Vec<FileJob>) -> JobQueue {
        JobQueue {
            jobs,
            next: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            done: AtomicU64::new(0),
        }
    }

    /// Each job goes to exactly one taker, and nobody starts one once another has failed.
    #[test]
    fn a_queue_hands_out_each_job_once_and_stops_after_a_failure() {
        let _bound = ferry_watchdog::bound("the writer threads");
        let dir = std::env::temp_dir().join(format!("ferry-write-queue-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let handle = Dir::open_writable(&dir, true).unwrap();
        let run = super::super::sample::scaled_run(500);
        let q = queue(FileJob::for_run(&run));
        assert_eq!(q.jobs.len(), 5);
        let (commit, commit_loop) = Committer::new();
        let committer = std::thread::spawn(commit_loop);
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| q.work(&handle, &run, 0, &commit, None).unwrap());
            let b = q.work(&handle, &run, 0, &commit, None).unwrap();
            (a.join().unwrap(), b)
        });
        let mut jobs: Vec<FileJob> = a.files.iter().chain(&b.files).map(|(j, _)| *j).collect();
        jobs.sort();
        jobs.dedup();
        assert_eq!(jobs.len(), 5, "every job written: {jobs:?}");
        // Eight files (the name map beside the swimlane), none twice.
        let mut paths: Vec<&Path> = a.files.iter().chain(&b.files).map(|(_, f)| &*f.path).collect();
        paths.sort();
        let n = paths.len();
        paths.dedup();
        assert_eq!((n, paths.len()), (8, 8));
        assert_eq!(q.done.load(Ordering::Relaxed), run.record_count());
        let stopped = queue(FileJob::for_run(&run));
        stopped.failed.store(true, Ordering::Relaxed);
        let none = stopped.work(&handle, &run, 0, &commit, None).unwrap();
        drop(commit);
        let (committed, err) = committer.join().unwrap();
        assert!(err.is_none());
        assert_eq!(committed.len(), 8, "each file committed once");
        assert!(none.files.is_empty() && none.ended.is_none());
        assert_eq!(stopped.next.load(Ordering::Relaxed), 0, "no job taken");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Only the Perfetto and Chrome files count as trace bytes.
    #[test]
    fn trace_bytes_count_only_the_two_traces() {
        let file = |name: &str, bytes| WrittenFile {
            path: PathBuf::from("d").join(name),
            bytes,
            xxh3: 0,
            records: 0,
            elapsed: Duration::ZERO,
        };
        let r = WriteReport {
            files: vec![file("swimlane.bin", 7), file(PERFETTO_FILE, 100), file(CHROME_FILE, 20)],
            bytes: 127,
            ..WriteReport::default()
        };
        assert_eq!(r.trace_bytes(), 120);
        assert_eq!(WriteReport::default().trace_bytes(), 0);
    }
}
