//! A run's profile as a data product: the run model, the five DFX subsystems' output files and
//! their readers, the manifest and atomic output directory, the Perfetto and Chrome traces, and
//! the analysis views.
//!
//! `ferry-dfx` moves records from the device to the host without losing one; this crate is what
//! those records become. The [`collect`] sinks turn collected device buffers into a [`RunModel`];
//! everything else works on the model alone, so it is testable without a device. [`write_all`] is the whole
//! write phase: every file below, streamed from the model in one pass, and both traces from one
//! [`perfetto::plan`], with a [`WriteReport`] (paths, bytes, records, time of each half) and
//! optional progress reports.
//!
//! | file (inside the run's output directory) | writer / reader | model part |
//! |---|---|---|
//! | `chip_swimlane_records.json` | [`write_swimlane`] / [`read_swimlane`] | [`RunModel::swimlane`] (+ [`RunMeta`]'s clock anchors and host orchestration) |
//! | `name_map_<case>.json` (beside the swimlane) | [`write_name_map`] / [`read_name_map`] | [`RunModel::kernels`], [`RunMeta::case`] |
//! | `pmu.csv` (+ `pmu.dfx.json` loss sidecar) | [`write_pmu`] / [`read_pmu`] | [`RunModel::pmu`] |
//! | `deps.json` | [`write_deps`] / [`read_deps`] | [`RunModel::deps`] |
//! | `args_dump/args_dump.json` + `args_dump/args.bin` | [`write_args_json`] / [`read_args`] | [`RunModel::args`] |
//! | `scope_stats/scope_stats.jsonl` | [`write_scopes`] / [`read_scopes`] | [`RunModel::scopes`] |
//! | [`PERFETTO_FILE`] (`trace.perfetto-trace`) | [`perfetto::write_plan`] (decode in tests: `ferry-perfetto-proto`) | all |
//! | [`CHROME_FILE`] (`trace.chrome.json`, only with [`WriteOptions::chrome`]) | [`chrome::write_plan`] | all |
//! | [`recorder::RECORD_FILE`] (`profile.ferry`, written while the run runs) | [`recorder::Recorder`] / [`recorder::read_recording`]; for analysis [`open_run_with`] and [`open_any`] with a [`NativeDecoder`] | the collected buffers, as sealed chunks |
//!
//! Every file is written with [`write_atomic`] (temp file, fsync, rename), so an aborted write
//! never leaves a half-written file, and every file carries the loss accounting of its
//! subsystem's lanes ([`LossAccounting`]: policy, budget, produced/collected/dropped and stall
//! time per lane) — in a `dfx` key for the JSON files, in the sidecar for the CSV.
//!
//! # Writing fast
//!
//! Every writer streams: JSON by hand (the large files) or through serde's serializer, from
//! borrowed views of the model (no `serde_json::Value`, no copied rows), the CSV through one
//! reused line buffer, both traces packet by packet or event by event, all into
//! [`write_atomic`]'s [`WRITE_BUFFER_BYTES`] buffer, whose full blocks go to the disk with direct
//! I/O once a file outgrows one ([`set_direct_io`]). JSON is
//! compact; keys, nesting, value types and key order are the original runtime's. Joins over tasks
//! ([`RunModel::tasks`], the trace plan, the views) go through indexes built once.
//!
//! # Examples
//! ```
//! use ferry_profile::{self as output, AicoreTask, CoreType, RunMeta, RunModel, Swimlane};
//! let dir = std::env::temp_dir().join(format!("ferry-output-doc-{}", std::process::id()));
//! let mut run = RunModel::new(RunMeta::new("a2a3", 50_000_000, vec![CoreType::Aiv]));
//! let mut sw = Swimlane::new(1);
//! sw.aicore_tasks.push(AicoreTask { core: 0, task_token_raw: 7, reg_task_id: 1, start: 10,
//!                                    end: 20, receive_to_start: 0 });
//! run.swimlane = Some(sw);
//! let written = output::write_run(&dir, &run).unwrap();
//! assert_eq!(written.len(), 2); // the records and their name map
//! assert_eq!(output::read_run(&dir).unwrap(), run);
//! // The whole write phase, the Perfetto trace included.
//! let report = output::write_all(&dir, &run, &output::WriteOptions::default()).unwrap();
//! assert_eq!((report.files.len(), report.records), (3, 1)); // + name_map_run.json
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```
#![doc(test(attr(deny(warnings))))]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(
    clippy::undocumented_unsafe_blocks,
    clippy::unnecessary_safety_comment,
    clippy::missing_safety_doc
)]

pub mod analysis;
mod arg_rows;
mod args;
mod args_bin;
mod atomic;
pub mod chrome;
pub mod chunks;
pub mod collect;
mod dep_tasks;
mod deps;
mod failed;
mod host_time;
mod id_table;
mod interrupted;
mod jsonw;
mod limits;
mod manifest;
mod model;
mod name_map;
mod native;
mod open;
pub mod perfetto;
mod pmu;
pub mod progress;
pub mod recorder;
mod recorder_read;
mod run_dir;
pub mod run_end;
mod runs;
pub mod sample;
mod scope_names;
mod scopes;
mod sink;
mod stream;
mod swimlane;
mod task_id;
pub mod views;
mod write;

use std::io::{self, BufReader, Write};

use ferry_fs::Dir;
use std::path::{Path, PathBuf};

pub use arg_rows::{ArgBin, ArgRows, ChainArgs, ChainArgsError};
pub use args::{
    read_args, read_args_meta, validate_arg, write_args_json, ArgsDump, DumpedArg, ARGS_BIN_FILE,
    ARGS_DIR, ARGS_FILE, ARG_ROLES, ARG_STAGES, DTYPE_UNKNOWN,
};
pub use args_bin::ArgsBin;
pub use atomic::{
    halt_writes, hash_file, hash_reader, parent_dir, temp_owner, write_atomic, write_atomic_in,
    AtomicWriter, Written,
};
pub use dep_tasks::DepTasks;
pub use deps::{
    read_deps, tensor_id, write_deps, DepArg, DepEdge, DepTask, DepTensor, DepsGraph, EdgeGeometry,
    EdgeSource, DEPS_FILE,
};
pub use failed::FailedTask;
pub use host_time::{
    host_clock_domain_id, host_now_ns, ClockAnchorSample, ClockAnchors, HostOrchPhase,
    HostOrchestration, ANCHOR_POST, ANCHOR_PRE, ANCHOR_PROVIDER_SIM, ANCHOR_SAMPLES_PER_POSITION,
    DEVICE_TIMESTAMP_UNIT, HOST_CLOCK_DOMAIN,
};
pub use id_table::IdTable;
pub use interrupted::{
    open_interrupted, InterruptedError, InterruptedOutcome, InterruptedReport, StreamCount,
};
pub use limits::{
    read_limit, MAX_LINE_BYTES, MAX_PAYLOAD_FILE_BYTES, MAX_RECORDS_FILE_BYTES,
    MAX_SMALL_FILE_BYTES,
};
pub use manifest::{
    remove_own_temps, Manifest, ManifestEntry, ManifestError, OutDir, RunOutcome, LOCK_FILE,
    MANIFEST_FILE, MANIFEST_FORMAT, MANIFEST_MAX_BYTES,
};
pub use model::{
    AicoreTask, AicpuTask, CoreType, JoinedTask, LaneLoss, LossAccounting, LossPolicy, OrchPhase,
    RunLabel, RunMeta, RunModel, RunSpan, SchedPhase, Subsystem, Swimlane, MAX_FILE_THREADS,
};
pub use name_map::{
    is_name_map_file, name_map_file, read_name_map, write_name_map, NameMap, DEFAULT_CASE,
    NAME_MAP_LABEL, NAME_MAP_LEVEL, NAME_MAP_PREFIX,
};
pub use native::{
    open_any, open_run_dir_writable, open_run_with, read_native, reads_native, NativeDecoder,
    NativeFile, NativeSession, Opened,
};
pub use open::{inconsistencies, open_run, Need, Needs, OpenError, OpenedRun};
pub use pmu::{
    pmu_counter_names, read_pmu, write_pmu, PmuRow, PmuTable, PMU_FILE, PMU_HEADER_PREFIX,
    PMU_LOSS_FILE,
};
pub use run_dir::{
    run_dir_names, writing_run_dirs, ExampleSummary, RunDir, RunDirError, SummaryJson, SummaryRun,
    WorkloadSummary, SCOPES_HTML, SUMMARY_FILE, VIEW_FILE,
};
pub use runs::{
    read_runs, session_model, session_runs, write_runs, write_runs_in, SessionRun, SessionRuns,
    RUNS_FILE, SESSION_REG_BITS,
};
pub use scope_names::{
    read_scope_names, write_scope_names, ScopeLabel, ScopeNames, MAX_SCOPE_NAMES_BYTES,
    SCOPE_NAMES_FILE, SCOPE_NAMES_VERSION,
};
pub use scopes::{
    read_scopes, write_scopes, ScopePhase, ScopeRow, ScopeStats, HEAP_MAX_RUN_RESERVATION,
    SCOPES_DIR, SCOPES_FILE, SCOPES_VERSION,
};
pub use sink::{direct_io, set_direct_io, WRITE_BUFFER_BYTES};
pub use stream::{IdHasher, IdMap, IdSet};
pub use swimlane::{read_swimlane, write_swimlane, SwimlaneParts, GRAPH_LOAD_KEY, SWIMLANE_FILE};
pub use task_id::{parse_task_id, TaskIdError};
pub use write::{
    write_all, write_all_in, TraceStats, WriteOptions, WritePhase, WriteProgress, WriteReport,
    WrittenFile, CHROME_FILE, PERFETTO_FILE,
};

/// Why an output file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// An I/O operation on the file failed.
    #[error("{file}: {source}")]
    Io {
        /// File (name or path).
        file: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The JSON could not be written or parsed.
    #[error("{file}: {source}")]
    Json {
        /// File (name or path).
        file: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// The file parsed but its content is not what the format documents.
    #[error("{file}: {what}")]
    Format {
        /// File (name or path).
        file: String,
        /// What is wrong, and where.
        what: String,
    },
    /// The file was refused before it was read (a link, not a regular file, over its limit).
    #[error(transparent)]
    Fs(#[from] ferry_fs::FsError),
    /// The directory holds no output file of a run.
    #[error("{0}: no DFX output files found")]
    Empty(PathBuf),
}

impl OutputError {
    /// A refused or unreadable file, named by its path.
    pub(crate) fn fs(e: ferry_fs::FsError) -> OutputError {
        OutputError::Fs(e)
    }

    /// This error with its file named by its path in `dir` (`run-002/deps.json`, not
    /// `deps.json`), for a reader that knows where the file was.
    pub fn located(self, dir: &Path) -> OutputError {
        let at = |file: String| {
            if Path::new(&file).is_absolute() || file.contains('/') {
                file
            } else {
                dir.join(file).display().to_string()
            }
        };
        match self {
            OutputError::Io { file, source } => OutputError::Io { file: at(file), source },
            OutputError::Json { file, source } => OutputError::Json { file: at(file), source },
            OutputError::Format { file, what } => OutputError::Format { file: at(file), what },
            e => e,
        }
    }

    pub(crate) fn io(file: &str) -> impl Fn(io::Error) -> OutputError + '_ {
        move |source| OutputError::Io { file: file.to_string(), source }
    }

    pub(crate) fn json(file: &str) -> impl Fn(serde_json::Error) -> OutputError + '_ {
        move |source| OutputError::Json { file: file.to_string(), source }
    }
}

/// Serde helpers for u64 values written as JSON strings (decimal, or `0x%016x` hex), formatted
/// on the stack rather than through `collect_str`'s `core::fmt` adapter (deps.json holds
/// several per task).
pub(crate) mod strnum {
    use super::stream::{dec_str, hex16_str};
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(dec_str(&mut [0; 20], *v))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(|e| D::Error::custom(format!("{s:?}: {e}")))
    }

    pub(crate) mod opt {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(v) => super::serialize(v, s),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<u64>, D::Error> {
            match Option::<String>::deserialize(d)? {
                Some(s) => s.parse().map(Some).map_err(|e| D::Error::custom(format!("{s:?}: {e}"))),
                None => Ok(None),
            }
        }
    }

    pub(crate) mod hex {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(hex16_str(&mut [0; 18], *v))
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
            let s = String::deserialize(d)?;
            let h =
                s.strip_prefix("0x").ok_or_else(|| D::Error::custom(format!("{s:?} lacks 0x")))?;
            u64::from_str_radix(h, 16).map_err(|e| D::Error::custom(format!("{s:?}: {e}")))
        }
    }
}

/// Writes every subsystem present in `run` into `dir` (atomically, file by file) and returns the
/// paths written. Files of absent subsystems are left alone. [`write_all`] with files only.
///
/// # Errors
///
/// The first [`OutputError`] of any file; files written before it stay complete.
pub fn write_run(dir: &Path, run: &RunModel) -> Result<Vec<PathBuf>, OutputError> {
    let opts = WriteOptions { files: true, traces: false, chrome: false, progress: None };
    Ok(write_all(dir, run, &opts)?.files.into_iter().map(|f| f.path).collect())
}

/// Opens the profile file `rel` below `dir` for reading, at most [`read_limit`] bytes, without
/// following a link; `None` when it is not there.
pub(crate) fn open_in(
    dir: &Dir,
    rel: &str,
) -> Result<Option<BufReader<ferry_fs::Input>>, OutputError> {
    match dir.open_file(rel, read_limit(rel)) {
        Ok(f) => Ok(Some(BufReader::new(f))),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(OutputError::fs(e)),
    }
}

/// Reads every output file present in `dir` back into a [`RunModel`] (each opened through the
/// directory's handle, without following a link, and read no further than [`read_limit`]).
///
/// # Errors
///
/// [`OutputError::Empty`] when no file is present; the first file's error otherwise.
pub fn read_run(dir: &Path) -> Result<RunModel, OutputError> {
    let dir = Dir::open(dir).map_err(OutputError::fs)?;
    let mut run = RunModel::default();
    let mut any = false;
    if let Some(r) = open_in(&dir, SWIMLANE_FILE)? {
        let (meta, kernels, sw, loss) = read_swimlane(r)?;
        run.meta = meta;
        run.kernels = kernels;
        run.swimlane = Some(sw);
        run.loss.merge(loss);
        any = true;
    }
    if let Some(r) = open_in(&dir, PMU_FILE)? {
        run.pmu = Some(read_pmu(r)?);
        if let Some(r) = open_in(&dir, PMU_LOSS_FILE)? {
            let loss: LossAccounting =
                serde_json::from_reader(r).map_err(OutputError::json(PMU_LOSS_FILE))?;
            model::check_loss(&loss, PMU_LOSS_FILE)?;
            run.loss.merge(loss);
        }
        any = true;
    }
    if let Some(r) = open_in(&dir, DEPS_FILE)? {
        let (g, loss) = read_deps(r)?;
        run.deps = Some(g);
        run.loss.merge(loss);
        any = true;
    }
    if let Some(r) = open_in(&dir, &format!("{ARGS_DIR}/{ARGS_FILE}"))? {
        let bin_rel = format!("{ARGS_DIR}/{ARGS_BIN_FILE}");
        let bin = match dir.open_file(&bin_rel, read_limit(&bin_rel)) {
            Ok(f) => {
                let len = f.len();
                Some(ArgsBin::from_file(f.into_file(), len))
            }
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(OutputError::fs(e)),
        };
        let (a, loss) = read_args(r, bin)?;
        run.args = Some(a);
        run.loss.merge(loss);
        any = true;
    }
    if let Some(r) = open_in(&dir, &format!("{SCOPES_DIR}/{SCOPES_FILE}"))? {
        let (s, loss) = read_scopes(r)?;
        run.scopes = Some(s);
        run.loss.merge(loss);
        any = true;
    }
    if !any {
        return Err(OutputError::Empty(dir.path().to_path_buf()));
    }
    Ok(run)
}

/// Writes `bytes` as `rel` below the directory handle `dir` atomically; returns its size and
/// hash.
///
/// # Errors
///
/// [`OutputError::Io`] naming the path.
pub fn write_bytes_in(dir: &Dir, rel: &str, bytes: &[u8]) -> Result<Written, OutputError> {
    write_atomic_in(dir, rel, |w| w.write_all(bytes))
        .map_err(|source| OutputError::Io { file: dir.join(rel).display().to_string(), source })
}

/// Writes `bytes` to `path` atomically (for traces and views); returns its size and hash.
///
/// # Errors
///
/// [`OutputError::Io`] naming the path.
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<Written, OutputError> {
    write_atomic(path, |w| w.write_all(bytes))
        .map_err(|source| OutputError::Io { file: path.display().to_string(), source })
}

#[cfg(test)]
mod empty_tests;
#[cfg(test)]
mod failed_tests;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod trace_tests;
