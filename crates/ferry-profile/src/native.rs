//! Opening a finished run's native profile ([`RECORD_FILE`], `profile.ferry`) for analysis,
//! without the original-format files: what every analysis command reads by default.
//!
//! `ferry run --out DIR` writes the native profile while the run runs and, unless asked for
//! the original formats, nothing else of the profile. A directory that holds no original-format
//! DFX file but a native profile (its own, or its parent's for a session's `run-NNN`, which
//! then needs no directory of its own) is read from it: the file is checked against the run's
//! manifest (its size and XXH3-64, as every file of a profile), read once into memory within
//! the size the manifest lists, indexed by the recovery rule (every chunk whole and right: a
//! finished run has no torn tail) and rebuilt into the run's models by a [`NativeDecoder`]
//! (`ferry_runtime::host::profile::NativeReader`: the conversion the collected records went
//! through), only for the parts the analysis [`Needs`]. A directory that holds the original
//! files (`ferry run --original-formats`, `ferry export`, the original runtime) is read from
//! them as before ([`open_run`]).
//!
//! The rules of [`open_run`] hold here too: the manifest decides (a native profile it does not
//! list, or one that changed, is refused), a directory without a manifest is read unverified
//! with a warning, a required part the run did not record is [`OpenError::MissingFile`] naming
//! the option that records it, and a run that did not finish is refused (`ferry report` reads
//! it through [`open_interrupted`](crate::open_interrupted)).
use std::error::Error;
use std::path::{Path, PathBuf};

use ferry_fs::Dir;

use crate::open::{find_manifest, is_file, Need, Needs, OpenError, OpenedRun};
use crate::recorder::{read_recording_bytes, Recording, RECORD_FILE};
use crate::runs::{read_runs, session_runs, SessionRuns, RUNS_FILE};
use crate::{
    inconsistencies, open_run, Manifest, OutputError, RunLabel, RunModel, RunOutcome, Subsystem,
    MANIFEST_FILE, MAX_RECORDS_FILE_BYTES,
};

/// Rebuilds a finished run's models from its native profile. The crate that owns the device
/// records' conversion implements it (`ferry_runtime::host::profile::NativeReader`); this crate
/// finds, checks and reads the file.
pub trait NativeDecoder {
    /// The models of the session `rec` recorded, in launch order (one for a single run), each
    /// with at least the parts `needs` does not [`Skip`](Need::Skip) that the run recorded
    /// (the others may be left out, and are dropped), and the session's warm-up runs.
    ///
    /// # Errors
    /// A recording that does not decode (no session end, records that disagree with it).
    fn decode(
        &self,
        rec: &Recording,
        needs: &Needs,
    ) -> Result<NativeSession, Box<dyn Error + Send + Sync>>;
}

/// What a [`NativeDecoder`] rebuilt.
#[derive(Debug, Default)]
pub struct NativeSession {
    /// One model per run, in launch order.
    pub models: Vec<RunModel>,
    /// The first `warmup` runs are warm-up runs.
    pub warmup: u32,
}

/// A directory opened for an analysis: one run, or a session over several runs.
#[derive(Debug)]
pub enum Opened {
    /// One run's profile.
    Run(Box<OpenedRun>),
    /// A session over several runs (`ferry run --repeat N`): the runs' table and each run, in
    /// launch order.
    Session(SessionRuns, Vec<OpenedRun>),
}

/// Where a directory's native profile is: the directory holding it, and the run of its
/// session the directory names (`run-NNN`), if it names one.
struct NativeAt {
    root: Dir,
    run: Option<u32>,
}

/// The run index a session's run directory is named for (`run-007` → 7), in the one spelling
/// [`RunLabel::dir_name`] gives it.
fn run_index(name: &str) -> Option<u32> {
    let k: u32 = name.strip_prefix("run-")?.parse().ok()?;
    (RunLabel::dir_name(k) == name).then_some(k)
}

/// Whether `dir` holds anything under the name of an original-format file of a profile (a run's
/// DFX files, or a session's `runs.json`): those are the original readers' to read, or to refuse
/// when they are not regular files.
fn has_originals(dir: &Dir) -> bool {
    let there = |f: &str| !matches!(dir.stat(f), Ok(None));
    crate::open::dfx_files().iter().any(|f| there(f)) || there(RUNS_FILE)
}

/// The native profile `dir` is read from, when it is read from one: `dir` holds no original
/// file and either holds [`RECORD_FILE`] or is (or names, without existing) a `run-NNN` of a
/// directory that does. `None`: the original files' readers apply (and say what is wrong).
fn resolve(dir: &Path) -> Option<NativeAt> {
    match Dir::open(dir) {
        Ok(h) if has_originals(&h) => None,
        Ok(h) if is_file(&h, RECORD_FILE) => Some(NativeAt { root: h, run: None }),
        Ok(_) => of_parent(dir),
        Err(e) if e.is_not_found() => of_parent(dir),
        Err(_) => None,
    }
}

/// `dir` as run `k` of the session whose native profile is in its parent.
fn of_parent(dir: &Path) -> Option<NativeAt> {
    let k = run_index(dir.file_name()?.to_str()?)?;
    let parent = match dir.parent()? {
        p if p.as_os_str().is_empty() => Path::new("."),
        p => p,
    };
    let root = Dir::open(parent).ok()?;
    (!has_originals(&root) && is_file(&root, RECORD_FILE))
        .then_some(NativeAt { root, run: Some(k) })
}

/// Whether `dir` is read from a native profile by [`open_run_with`] and [`open_any`].
pub fn reads_native(dir: &Path) -> bool {
    resolve(dir).is_some()
}

/// The run directory `dir` opened for writing a command's output into it: a session's run read
/// from the native profile in its parent (`DIR/run-001`) has no directory until a command
/// writes one of its files there, so it is made through the parent's handle, checked as it is.
///
/// # Errors
/// As [`Dir::open_writable`] and [`Dir::create_sub`].
pub fn open_run_dir_writable(dir: &Path) -> Result<Dir, ferry_fs::FsError> {
    match Dir::open_writable(dir, false) {
        Err(e) if e.is_not_found() && reads_native(dir) => {
            let (Some(parent), Some(name)) =
                (dir.parent(), dir.file_name().and_then(|n| n.to_str()))
            else {
                return Err(e);
            };
            let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
            Dir::open_writable(parent, false)?.create_sub(name)
        }
        r => r,
    }
}

/// Opens the run in `dir` for an analysis that needs `needs`: from its native profile, or from
/// its original files as [`open_run`] does. A directory that holds no original-format file but
/// a native profile (its own, or its parent's for a session's `run-NNN`, which needs no
/// directory of its own) is read from it: the file is checked against the run's manifest, read
/// once within the size the manifest lists, indexed by the recovery rule (a finished run's has
/// no torn tail), and rebuilt by `native` for the subsystems `needs` reads; a required one the
/// run did not record is [`OpenError::MissingFile`]. A session's directory is refused, naming
/// its runs' directories.
///
/// # Errors
/// As [`open_run`]; [`OpenError::Native`] for a native profile that does not decode.
pub fn open_run_with(
    dir: &Path,
    needs: &Needs,
    native: &dyn NativeDecoder,
) -> Result<OpenedRun, OpenError> {
    crate::progress::step(format!("reading {}", dir.display()));
    let Some(at) = resolve(dir) else { return open_run(dir, needs) };
    match open_native(dir, at, needs, native)? {
        Opened::Run(r) => Ok(*r),
        Opened::Session(runs, _) => Err(several_runs(dir, &runs)),
    }
}

/// The error for a session's directory where one run's is needed.
fn several_runs(dir: &Path, runs: &SessionRuns) -> OpenError {
    OpenError::SeveralExamples {
        dir: dir.to_path_buf(),
        file: "single run's records".into(),
        subdirs: runs.runs.iter().map(|r| dir.join(&r.dir).display().to_string()).collect(),
    }
}

/// Opens `dir` for an analysis that reads a run or a session over several runs: a session's
/// directory (its native profile holds several runs, or its `runs.json` lists them) opens every
/// run, in launch order, the native profile read and rebuilt once; any other directory opens
/// as [`open_run_with`].
///
/// # Errors
/// As [`open_run_with`], and [`read_runs`]'s for a session's `runs.json`.
pub fn open_any(
    dir: &Path,
    needs: &Needs,
    native: &dyn NativeDecoder,
) -> Result<Opened, OpenError> {
    crate::progress::step(format!("reading {}", dir.display()));
    if let Some(at) = resolve(dir) {
        return open_native(dir, at, needs, native);
    }
    if !dir.join(crate::SWIMLANE_FILE).exists() {
        if let Some(runs) = read_runs(dir)? {
            let mut opened = Vec::with_capacity(runs.runs.len());
            for r in &runs.runs {
                opened.push(open_run_with(&dir.join(&r.dir), needs, native)?);
            }
            if opened.is_empty() {
                return Err(OutputError::Format {
                    file: dir.join(RUNS_FILE).display().to_string(),
                    what: "it lists no run".into(),
                }
                .into());
            }
            return Ok(Opened::Session(runs, opened));
        }
    }
    Ok(Opened::Run(Box::new(open_run_with(dir, needs, native)?)))
}

/// A finished run's native profile as [`read_native`] read it.
#[derive(Debug)]
pub struct NativeFile {
    /// Its chunks, by the recovery rule (a finished run's has no torn tail).
    pub recording: Recording,
    /// The manifest that covers it (`None`: read unverified).
    pub manifest: Option<Manifest>,
}

/// The native profile in `dir` (a run's directory, or an example's in a run of several), read
/// as the analysis commands read it, whatever else the directory holds (`ferry export`).
///
/// # Errors
/// As [`open_run_with`]; [`OpenError::MissingFile`] when `dir` holds no native profile.
pub fn read_native(dir: &Path) -> Result<NativeFile, OpenError> {
    let root = match Dir::open(dir) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Err(OpenError::NoDirectory(dir.to_path_buf())),
        Err(e) => return Err(e.into()),
    };
    if !is_file(&root, RECORD_FILE) {
        return Err(OpenError::MissingFile {
            dir: dir.to_path_buf(),
            file: RECORD_FILE.into(),
            hint: " (a run's native profile: written by `ferry run --out DIR` with DFX on)".into(),
        });
    }
    let trust = find_manifest(&root)?;
    let (recording, _) = read_verified(&root, &trust)?;
    Ok(NativeFile { recording, manifest: trust.map(|(m, _, _)| m) })
}

/// The native profile in `root`, checked against `trust` (the manifest that covers it, its
/// directory and `root`'s prefix there), or read unverified without one (with the warning to
/// print); by the recovery rule, with no torn tail.
fn read_verified(
    root: &Dir,
    trust: &Option<(Manifest, Dir, String)>,
) -> Result<(Recording, Vec<String>), OpenError> {
    let path = root.join(RECORD_FILE);
    let mut warnings = Vec::new();
    let bytes = match trust {
        Some((m, mroot, prefix)) => {
            let full = format!("{prefix}{RECORD_FILE}");
            if let Some(size) = m.entry(&full).and_then(|e| e.bytes) {
                if size > MAX_RECORDS_FILE_BYTES {
                    let limit = MAX_RECORDS_FILE_BYTES;
                    let e = ferry_fs::FsError::TooLarge { path, size: Some(size), limit };
                    return Err(e.into());
                }
            }
            let input =
                m.open_verified(mroot, &full).map_err(|source| OpenError::Refused { source })?;
            input.read_all()?
        }
        None => {
            warnings.push(format!(
                "{} has no {MANIFEST_FILE}: its native profile is read unverified",
                root.path().display()
            ));
            root.read(RECORD_FILE, MAX_RECORDS_FILE_BYTES)?
        }
    };
    let rec = read_recording_bytes(path.clone(), bytes)
        .map_err(|e| OpenError::Native { path: path.clone(), source: Box::new(e) })?;
    if rec.torn_bytes > 0 {
        let what =
            format!("{} bytes after its last sealed chunk in a finished run", rec.torn_bytes);
        return Err(OutputError::Format { file: path.display().to_string(), what }.into());
    }
    Ok((rec, warnings))
}

/// The native profile `at` holds, checked against the manifest that covers it, read and
/// rebuilt for `needs`.
fn open_native(
    dir: &Path,
    at: NativeAt,
    needs: &Needs,
    native: &dyn NativeDecoder,
) -> Result<Opened, OpenError> {
    let trust = find_manifest(&at.root)?;
    let path = at.root.join(RECORD_FILE);
    let (rec, warnings) = read_verified(&at.root, &trust)?;
    crate::progress::step(format!(
        "rebuilding the model from {RECORD_FILE} ({} chunks, {:.1} MB)",
        rec.chunks.len(),
        rec.bytes as f64 / 1e6
    ));
    let session = native
        .decode(&rec, needs)
        .map_err(|source| OpenError::Native { path: path.clone(), source })?;
    drop(rec);
    let outcome = trust.as_ref().and_then(|(m, _, _)| m.outcome.clone());
    let trust = trust.map(|(_, root, prefix)| (root.path().to_path_buf(), prefix));
    let opened = |model: RunModel, dir: PathBuf| {
        opened_run(model, dir, needs, warnings.clone(), trust.clone(), outcome.clone())
    };
    let NativeSession { mut models, warmup } = session;
    match at.run {
        None if models.len() <= 1 => {
            let model = models.pop().unwrap_or_default();
            Ok(Opened::Run(Box::new(opened(model, dir.to_path_buf())?)))
        }
        None => {
            let runs = SessionRuns { warmup, ..session_runs(&models) };
            let mut out = Vec::with_capacity(models.len());
            for (r, model) in runs.runs.iter().zip(models) {
                out.push(opened(model, dir.join(&r.dir))?);
            }
            Ok(Opened::Session(runs, out))
        }
        Some(k) => {
            let at = models.iter().position(|m| m.meta.run.is_some_and(|r| r.index == k));
            match at {
                Some(i) => {
                    Ok(Opened::Run(Box::new(opened(models.swap_remove(i), dir.to_path_buf())?)))
                }
                None => Err(OpenError::NoDirectory(dir.to_path_buf())),
            }
        }
    }
}

/// What a run needs recorded, and the option that records it.
fn parts(needs: &Needs) -> [(Need, &'static str, &'static str); 5] {
    [
        (needs.swimlane, "ChipSwimlane", "--swimlane N"),
        (needs.pmu, "PMU", "--pmu N"),
        (needs.deps, "DepGen", "--dep-gen"),
        (needs.args, "ArgsDump", "--dump-args N"),
        (needs.scopes, "ScopeStats", "--scope-stats"),
    ]
}

/// One run's model as an analysis opened it: the parts `needs` skips dropped, a required part
/// the run did not record refused, the consistency warnings and the manifest's outcome added.
fn opened_run(
    mut run: RunModel,
    dir: PathBuf,
    needs: &Needs,
    mut warnings: Vec<String>,
    trust: Option<(PathBuf, String)>,
    outcome: Option<RunOutcome>,
) -> Result<OpenedRun, OpenError> {
    if needs.swimlane == Need::Skip {
        run.swimlane = None;
    }
    if needs.pmu == Need::Skip {
        run.pmu = None;
    }
    if needs.deps == Need::Skip {
        run.deps = None;
    }
    if needs.args == Need::Skip {
        run.args = None;
    }
    if needs.scopes == Need::Skip {
        run.scopes = None;
    }
    let present = [
        run.swimlane.is_some(),
        run.pmu.is_some(),
        run.deps.is_some(),
        run.args.is_some(),
        run.scopes.is_some(),
    ];
    for ((need, what, option), there) in parts(needs).into_iter().zip(present) {
        if need == Need::Required && !there {
            return Err(OpenError::MissingFile {
                dir,
                file: format!("{what} records"),
                hint: format!(" (recorded by `ferry run` with {option})"),
            });
        }
    }
    if !present.iter().any(|&p| p) {
        return Err(OpenError::Empty(dir));
    }
    // In the order the original files' readers merge them (swimlane, PMU, DepGen, ArgsDump,
    // ScopeStats), so every command lists them alike whichever it read.
    run.loss.lanes.sort_by_key(|l| Subsystem::ALL.iter().position(|s| Some(*s) == l.subsystem));
    warnings.extend(inconsistencies(&run));
    run.meta.failed = outcome
        .as_ref()
        .and_then(RunOutcome::failed_task)
        .filter(|f| f.run.is_none() || f.run == run.meta.run.map(|r| r.index))
        .cloned();
    Ok(OpenedRun { run, warnings, trust, dir, skipped: 0, outcome })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_directories_are_named_in_one_spelling() {
        assert_eq!(run_index("run-000"), Some(0));
        assert_eq!(run_index("run-042"), Some(42));
        assert_eq!(run_index("run-1234"), Some(1234));
        for bad in ["run-1", "run-0042", "run--01", "run-", "runs", "run-00x", "xrun-001"] {
            assert_eq!(run_index(bad), None, "{bad}");
        }
    }
}
