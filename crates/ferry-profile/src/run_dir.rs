//! A run's output directory as a whole: [`RunDir`], and the run summary it holds.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::atomic::write_batch_in;
use crate::manifest::valid_rel;
use crate::{
    write_bytes_in, FailedTask, ManifestError, OutDir, OutputError, RunOutcome, ARGS_BIN_FILE,
    ARGS_DIR, ARGS_FILE, CHROME_FILE, DEPS_FILE, PERFETTO_FILE, PMU_FILE, PMU_LOSS_FILE,
    SCOPES_DIR, SCOPES_FILE, SCOPE_NAMES_FILE, SWIMLANE_FILE,
};

/// File name of the run summary ([`SummaryJson`]) in a run's directory.
pub const SUMMARY_FILE: &str = "summary.json";
/// Default file name of the `ferry view` page in a run's directory.
pub const VIEW_FILE: &str = "swimlane.html";
/// Default file name of the `ferry scopes` page, in the run's [`SCOPES_DIR`].
pub const SCOPES_HTML: &str = "scope_stats.html";

/// Every file a run (or an analysis command writing into a run's directory) may put in a run's
/// directory, for runs whose cases are `cases` (each case's output tensor `<case>.f32`, and its
/// profile in `<case>/` when several run): what a claim checks for foreign files, and what a
/// run plans in its incomplete manifest.
pub fn run_dir_names(cases: &[&str]) -> Vec<String> {
    let dfx = [
        SWIMLANE_FILE.to_string(),
        PMU_FILE.into(),
        PMU_LOSS_FILE.into(),
        DEPS_FILE.into(),
        format!("{ARGS_DIR}/{ARGS_BIN_FILE}"),
        format!("{ARGS_DIR}/{ARGS_FILE}"),
        format!("{SCOPES_DIR}/{SCOPES_FILE}"),
        format!("{SCOPES_DIR}/{SCOPE_NAMES_FILE}"),
        format!("{SCOPES_DIR}/{SCOPES_HTML}"),
        PERFETTO_FILE.into(),
        CHROME_FILE.into(),
        VIEW_FILE.into(),
        crate::recorder::RECORD_FILE.into(),
    ];
    let mut v = vec![SUMMARY_FILE.to_string(), crate::run_end::RUN_END_FILE.to_string()];
    v.extend(cases.iter().map(|c| format!("{c}.f32")));
    v.extend(dfx.iter().cloned());
    for c in cases {
        v.extend(dfx.iter().map(|f| format!("{c}/{f}")));
    }
    v
}

/// Why a run's directory could not be claimed, written or committed.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    /// The claim or the manifest.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// Writing a file.
    #[error(transparent)]
    Write(#[from] OutputError),
    /// A file name that leaves the directory or is not UTF-8.
    #[error("{} is outside the output directory {}", file.display(), dir.display())]
    Outside {
        /// The file.
        file: PathBuf,
        /// The directory.
        dir: PathBuf,
    },
    /// The summary could not be serialized.
    #[error("{SUMMARY_FILE}: {0}")]
    Summary(#[from] serde_json::Error),
}

/// The directories the live [`RunDir`]s of this process write.
fn writing() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    static DIRS: OnceLock<Mutex<Vec<PathBuf>>> = OnceLock::new();
    DIRS.get_or_init(|| Mutex::new(Vec::new())).lock().unwrap_or_else(|p| p.into_inner())
}

/// The directories that claimed, uncommitted [`RunDir`]s of this process write: what a signal
/// handler removes this process's temp files from before it exits (the manifest there still
/// says the run did not finish, so readers refuse the directory and the next run cleans it).
pub fn writing_run_dirs() -> Vec<PathBuf> {
    writing().clone()
}

/// A run's output directory as a whole: claimed before the chip starts, the profile's files and
/// the run's own (the summary, the output tensors) recorded in its manifest, and the manifest
/// committed last with how the run ended.
///
/// [`RunDir`] is what a program that runs graphs (the `ferry run` command, or a library user)
/// holds for its `--out` directory. Its rules are [`OutDir`]'s: a directory that is not one,
/// cannot be written, is being written by another ferry, or holds files under ferry's names
/// that no manifest there lists is refused, and so is one holding a complete earlier run unless
/// the caller asked to replace it. The earlier run's files are removed just before the first
/// write, and the manifest is written last:
///
/// - [`RunDir::finish`] writes [`SUMMARY_FILE`] and the output tensors, then commits the run as
///   [`RunOutcome::Ok`];
/// - [`RunDir::fail`] commits a run that failed after its profile was collected as
///   [`RunOutcome::Failed`], so the analysis commands read the profile and say the run failed;
///   a run that wrote nothing leaves the directory as it was.
///
/// While a claim is alive, [`writing_run_dirs`] names its directory: what a signal handler
/// cleans up ([`remove_own_temps`](crate::remove_own_temps)) before the process exits.
///
/// # Examples
/// ```
/// use ferry_profile::{run_dir_names, Manifest, RunDir, RunOutcome, SummaryJson, SUMMARY_FILE};
/// let dir = std::env::temp_dir().join(format!("ferry-run-dir-doc-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// let names = run_dir_names(&["vector"]);
/// let rd = RunDir::claim(&dir, "a2a3", &["ferry".into(), "run".into()], &names, false).unwrap();
/// let summary = SummaryJson::new("a2a3", 4, 8, 16, "device", "direct");
/// rd.finish(&summary, &[("vector", &[1.0, 2.0][..])]).unwrap();
/// let m = Manifest::verified(&dir).unwrap();
/// assert_eq!(m.outcome, Some(RunOutcome::Ok));
/// m.verify(&dir, SUMMARY_FILE).unwrap();
/// m.verify(&dir, "vector.f32").unwrap();
/// // A second run without `force` is refused; the first stays as it was.
/// assert!(RunDir::claim(&dir, "a2a3", &[], &names, false).is_err());
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug)]
pub struct RunDir {
    out: OutDir,
    arch: String,
    command: Vec<String>,
    names: Vec<String>,
}

impl RunDir {
    /// Claims `dir` for a run on `arch` made by `command` that may write the files `names`
    /// ([`run_dir_names`]); a complete earlier run there is refused unless `force`. Call it
    /// before the chip starts: a directory the run cannot own must not cost the run.
    ///
    /// # Errors
    /// [`RunDirError::Manifest`]: as [`OutDir::claim`], and [`ManifestError::Occupied`] for a
    /// complete earlier run without `force`.
    pub fn claim(
        dir: &Path,
        arch: &str,
        command: &[String],
        names: &[String],
        force: bool,
    ) -> Result<RunDir, RunDirError> {
        let out = OutDir::claim(dir, names)?;
        let out = if force { out } else { out.refuse_overwrite()? };
        writing().push(dir.to_path_buf());
        Ok(RunDir { out, arch: arch.to_string(), command: command.to_vec(), names: names.to_vec() })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.out.path()
    }

    /// Whether anything was written yet ([`RunDir::begun`]).
    pub fn is_begun(&self) -> bool {
        self.out.is_begun()
    }

    /// Starts writing (the first call only): the manifest says a run is writing, and the
    /// earlier run's files are removed. Returns the claim, into which a profile is written
    /// and recorded.
    ///
    /// # Errors
    /// As [`OutDir::begin`].
    pub fn begun(&mut self) -> Result<&mut OutDir, RunDirError> {
        if !self.out.is_begun() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            let run_id = format!("{now}-{}", std::process::id());
            self.out.begin(&run_id, &self.command, &self.arch, &self.names)?;
        }
        Ok(&mut self.out)
    }

    /// Writes `bytes` as `name` (relative, `/`-separated) in the directory and records it.
    ///
    /// # Errors
    /// [`RunDirError::Outside`] for a name that leaves the directory; the write.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<(), RunDirError> {
        let path = self.path().join(name);
        let outside = || RunDirError::Outside { file: path.clone(), dir: self.path().into() };
        let rel =
            self.out.relative(&path).filter(|r| r == name && valid_rel(r)).ok_or_else(outside)?;
        let out = self.begun()?;
        let w = write_bytes_in(out.dir(), &rel, bytes)?;
        out.record(&rel, w);
        Ok(())
    }

    /// Writes an output tensor as `<name>.f32`: its elements, little-endian.
    ///
    /// # Errors
    /// As [`RunDir::write`].
    pub fn write_f32(&mut self, name: &str, values: &[f32]) -> Result<(), RunDirError> {
        let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.write(&format!("{name}.f32"), &bytes)
    }

    /// A run that finished and verified: writes `summary` as [`SUMMARY_FILE`] and each output
    /// tensor `(name, elements)` as `<name>.f32`, then commits the manifest as
    /// [`RunOutcome::Ok`].
    ///
    /// # Errors
    /// A write, or the manifest.
    pub fn finish(
        self,
        summary: &SummaryJson,
        outputs: &[(&str, &[f32])],
    ) -> Result<(), RunDirError> {
        let files: Vec<(String, Vec<u8>)> = outputs
            .iter()
            .map(|(name, v)| {
                (format!("{name}.f32"), v.iter().flat_map(|x| x.to_le_bytes()).collect())
            })
            .collect();
        self.finish_files(summary, &files)
    }

    /// A run that finished and verified, as [`finish`](Self::finish), with each output tensor
    /// given as `(file name, bytes)`: a workload's tensor of another dtype is
    /// `<name>.<dtype>` (`acc.int32`, `y.bf16`), its elements packed little-endian.
    ///
    /// # Errors
    /// A write, or the manifest.
    pub fn finish_files(
        mut self,
        summary: &SummaryJson,
        files: &[(String, Vec<u8>)],
    ) -> Result<(), RunDirError> {
        let summary = serde_json::to_string_pretty(summary)?;
        let mut batch = vec![(SUMMARY_FILE, summary.as_bytes())];
        for (name, bytes) in files {
            let path = self.path().join(name);
            let ok = self.out.relative(&path).is_some_and(|r| r == *name && valid_rel(&r));
            if !ok {
                return Err(RunDirError::Outside { file: path, dir: self.path().into() });
            }
            batch.push((name.as_str(), bytes.as_slice()));
        }
        // The summary, the outputs and what was written in place (the native profile) reach
        // the disk together, then the manifest.
        let out = self.begun()?;
        let also = out.take_unsynced();
        let written = write_batch_in(out.dir(), &batch, &also).map_err(|source| {
            OutputError::Io { file: out.dir().path().display().to_string(), source }
        })?;
        for ((rel, _), w) in batch.iter().zip(written) {
            out.record(rel, w);
        }
        self.commit(RunOutcome::Ok)
    }

    /// A run that failed with `error` (one line: the error's cause chain): when its profile was
    /// written, commits it marked [`RunOutcome::Failed`] and returns `true`; a run that wrote
    /// nothing leaves the directory as it was and returns `false`.
    ///
    /// # Errors
    /// The manifest.
    pub fn fail(self, error: &str) -> Result<bool, RunDirError> {
        self.fail_at(error, None)
    }

    /// [`RunDir::fail`] of a run whose kernel failed on its core in `task`: the manifest's
    /// outcome names the task, so the page, the trace and the report mark it.
    ///
    /// # Errors
    /// The manifest.
    pub fn fail_at(self, error: &str, task: Option<FailedTask>) -> Result<bool, RunDirError> {
        if !self.out.is_begun() {
            self.released();
            return Ok(false);
        }
        self.commit(RunOutcome::Failed { error: error.to_string(), task })?;
        Ok(true)
    }

    /// Writes the manifest with how the run ended, last: the directory holds a complete run.
    ///
    /// # Errors
    /// The manifest.
    pub fn commit(mut self, outcome: RunOutcome) -> Result<(), RunDirError> {
        self.begun()?;
        let dir = self.path().to_path_buf();
        self.out.commit_as(outcome)?;
        release(&dir);
        Ok(())
    }

    /// No longer written: out of [`writing_run_dirs`].
    fn released(self) {
        release(self.path());
    }
}

/// Takes one claim on `dir` out of [`writing_run_dirs`].
fn release(dir: &Path) {
    let mut w = writing();
    if let Some(i) = w.iter().position(|d| d == dir) {
        w.remove(i);
    }
}

/// [`SUMMARY_FILE`]: the run's configuration and, per graph run, its figures. Keys are written
/// in alphabetical order (the order this file has always had).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SummaryJson {
    /// AIC (cube) workers.
    pub aic: u32,
    /// AICPU threads (1 orchestrator + the rest schedulers).
    pub aicpu_threads: u32,
    /// AIV (vector) workers.
    pub aiv: u32,
    /// Chip generation.
    pub arch: String,
    /// The host<->device path the run took.
    pub path: String,
    /// One entry per graph run.
    pub runs: Vec<SummaryRun>,
    /// Where the graph was built: `device` or `host`.
    pub variant: String,
}

impl SummaryJson {
    /// A summary without runs.
    pub fn new(
        arch: &str,
        aicpu_threads: u32,
        aic: u32,
        aiv: u32,
        variant: &str,
        path: &str,
    ) -> SummaryJson {
        SummaryJson {
            aic,
            aicpu_threads,
            aiv,
            arch: arch.to_string(),
            path: path.to_string(),
            runs: Vec::new(),
            variant: variant.to_string(),
        }
    }
}

/// One graph run of a [`SummaryJson`]: a built-in example's or a workload file's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SummaryRun {
    /// A built-in example.
    Example(ExampleSummary),
    /// A workload file.
    Workload(WorkloadSummary),
}

/// A built-in example's figures (keys in alphabetical order).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExampleSummary {
    /// Sum of the output tensor (what verification compared).
    pub checksum: f64,
    /// The example's name.
    pub example: String,
    /// Tasks per kernel name.
    pub per_kernel: BTreeMap<String, u64>,
    /// Runs back to back (`--repeat`; 1 for a single run).
    pub repeat: u32,
    /// Runs per second of a repetition (`null` for a single run).
    pub runs_per_s: Option<f64>,
    /// Tasks executed.
    pub tasks: u64,
    /// Tasks per second of wall time.
    pub tasks_per_s: f64,
    /// Whether the output verified (a summary is written only for a verified run).
    pub verified: bool,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
}

/// A workload file's figures (keys in alphabetical order).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSummary {
    /// The verification's checksum.
    pub checksum: f64,
    /// The workload file, as given.
    pub file: String,
    /// Tasks per kernel name.
    pub per_kernel: BTreeMap<String, u64>,
    /// Tasks executed.
    pub tasks: u64,
    /// Whether the output verified (a summary is written only for a verified run).
    pub verified: bool,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// The workload's name.
    pub workload: String,
}

#[cfg(test)]
mod tests;
