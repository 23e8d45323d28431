//! Opening a run's output directory for analysis: only the files an analysis needs, each checked
//! against the run's manifest before it is parsed, and the model checked for inconsistencies.
//!
//! The rules (the README's "Analysis commands"):
//!
//! - **Only what is needed.** Each analysis names its [`Needs`]: a [`Need::Required`] file that is
//!   missing or broken is an error ([`OpenError`]); an [`Need::Optional`] one that is broken is
//!   skipped with a warning ([`OpenedRun::warnings`]), so one truncated `pmu.csv` does not stop
//!   `ferry deps`; a [`Need::Skip`] file is never opened (`ferry deps` never reads `args.bin`).
//! - **The manifest decides.** With a manifest (in the directory, or up to two levels above it
//!   for the `DIR/<example>/` of a run of several examples and its `run-NNN/` directories of a
//!   session over several runs) only the files it lists are read, and only
//!   while their size and XXH3-64 are what the run wrote: a required file it does not list, or one
//!   that changed, is refused ([`OpenError::Refused`], naming the file and what to do); an optional
//!   one is skipped with a warning. A manifest of a run that did not finish is an error.
//! - **No manifest: read unverified, with a warning.** A directory written by another tool (the
//!   original runtime's files), by a ferry before manifests, or by the library ([`write_run`]) has
//!   none; its files are read as they are and the warning says they may mix runs. Removing the
//!   manifest of a directory is the escape hatch for reading files edited after the run.
//! - **Consistency.** What parses but does not add up (an edge to a task the graph does not list,
//!   a task that ends before it starts, a scope ring with records but no capacity) becomes a
//!   warning; what cannot be read meaningfully (`clock_freq_hz` 0, a thread id beyond any chip,
//!   payload sizes that disagree with the metadata) is a [`OutputError::Format`] of its reader.
//!
//! Every file is opened through the directory's handle without following a link, must be a
//! regular file (a FIFO or a device is refused before any read), and is read no further than
//! the size the manifest lists or, without one, [`read_limit`](super::read_limit); a manifest
//! listing a size past that limit is refused too. Every size a parser meets is capped by the
//! file's length: JSON and CSV grow their vectors as they parse (never from a length the file
//! states), lines are bounded, and `args.bin` is read one payload at a time when the analysis
//! needs payloads, after its size has been checked. Errors name the file by its path
//! (`run-002/deps.json`).
//!
//! [`write_run`]: super::write_run

use std::fs;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use ferry_fs::{Dir, FsError, Input, Kind};

use super::args::{read_args, read_args_meta, ARGS_BIN_FILE, ARGS_DIR, ARGS_FILE};
use super::deps::{read_deps, DEPS_FILE};
use super::manifest::{Manifest, ManifestError, RunOutcome, MANIFEST_FILE};
use super::model::RunModel;
use super::name_map::{is_name_map_file, name_map_file, read_name_map};
use super::pmu::{read_pmu, PMU_FILE, PMU_LOSS_FILE};
use super::recorder::RECORD_FILE;
use super::scope_names::{read_scope_names, SCOPE_NAMES_FILE};
use super::scopes::{read_scopes, SCOPES_DIR, SCOPES_FILE};
use super::swimlane::{read_swimlane, SWIMLANE_FILE};
use super::{read_limit, ArgsBin, OutputError, Written};

/// How much an analysis needs one file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Need {
    /// Never opened.
    #[default]
    Skip,
    /// Read when present and sound; skipped with a warning otherwise.
    Optional,
    /// Missing or broken: the analysis fails.
    Required,
    /// Read when present; present but broken (or refused by the manifest): the analysis fails.
    IfPresent,
}

impl Need {
    /// Whether a file that is there but cannot be read fails the analysis.
    fn strict(self) -> bool {
        matches!(self, Need::Required | Need::IfPresent)
    }
}

/// The files an analysis reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// `chip_swimlane_records.json`.
    pub swimlane: Need,
    /// `pmu.csv` (and its sidecar).
    pub pmu: Need,
    /// `deps.json`.
    pub deps: Need,
    /// `args_dump/args_dump.json`.
    pub args: Need,
    /// Whether `args_dump/args.bin` is read too (else only its size is checked).
    pub args_payloads: bool,
    /// `scope_stats/scope_stats.jsonl`.
    pub scopes: Need,
}

impl Needs {
    /// `ferry deps`: the graph, and the swimlane for the happens-before check and kernel names.
    pub const DEPS: Needs = Needs {
        deps: Need::Required,
        swimlane: Need::Optional,
        pmu: Need::Skip,
        args: Need::Skip,
        args_payloads: false,
        scopes: Need::Skip,
    };
    /// `ferry report` and `ferry diff`: every file that is there (payloads excepted), at least
    /// one; one that is there but unreadable fails the report (it would be silently wrong).
    pub const REPORT: Needs = Needs {
        swimlane: Need::IfPresent,
        pmu: Need::IfPresent,
        deps: Need::IfPresent,
        args: Need::IfPresent,
        args_payloads: false,
        scopes: Need::IfPresent,
    };
    /// `ferry dump`: the argument dump with its payloads.
    pub const DUMP: Needs = Needs {
        args: Need::Required,
        args_payloads: true,
        swimlane: Need::Skip,
        pmu: Need::Skip,
        deps: Need::Skip,
        scopes: Need::Skip,
    };
    /// `ferry scopes`: the scope records.
    pub const SCOPES: Needs = Needs {
        scopes: Need::Required,
        swimlane: Need::Skip,
        pmu: Need::Skip,
        deps: Need::Skip,
        args: Need::Skip,
        args_payloads: false,
    };
    /// `ferry trace` and `ferry view`: the swimlane, and the rest for kernels, flows and lanes.
    pub const TRACE: Needs = Needs {
        swimlane: Need::Required,
        pmu: Need::Optional,
        deps: Need::Optional,
        args: Need::Optional,
        args_payloads: false,
        scopes: Need::Optional,
    };
}

/// Why a run's directory could not be opened for an analysis.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The directory, or a file in it, was refused before it was read (a link, not a regular
    /// file, over its limit).
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The directory does not exist.
    #[error("{}: no such directory", .0.display())]
    NoDirectory(PathBuf),
    /// The path is not a directory.
    #[error("{} is not a directory (pass a run's output directory, the --out of `ferry run`)", .0.display())]
    NotADirectory(PathBuf),
    /// A file the analysis needs is not there.
    #[error("{} has no {file}{}", dir.display(), hint)]
    MissingFile {
        /// The directory.
        dir: PathBuf,
        /// The file, relative to it.
        file: String,
        /// What to do (`: run ferry run with --dep-gen …`), or empty.
        hint: String,
    },
    /// The directory holds no file of the analysis, but its subdirectories (a run of several
    /// examples, or of several runs) do.
    #[error(
        "{} holds no {file}, but {} do (a run of several examples writes each one's files in \
         DIR/<example>/, a repeated run each run's in DIR/run-NNN/): pass one of them",
        dir.display(),
        subdirs.join(", ")
    )]
    SeveralExamples {
        /// The directory.
        dir: PathBuf,
        /// The file looked for.
        file: String,
        /// The subdirectories that hold it.
        subdirs: Vec<String>,
    },
    /// The directory holds no DFX file at all.
    #[error("{}: no DFX output files found (run ferry run with --out DIR and a DFX option)", .0.display())]
    Empty(PathBuf),
    /// The manifest cannot be trusted (malformed, or the run did not finish).
    #[error(transparent)]
    Manifest(ManifestError),
    /// A file the analysis needs is not what the run wrote, or no run there wrote it.
    #[error(
        "{source}: refusing to read it; rerun `ferry run --out DIR` to rewrite the directory, or \
         remove {MANIFEST_FILE} to read its files unverified"
    )]
    Refused {
        /// Why (not listed, changed, listed but gone).
        #[source]
        source: ManifestError,
    },
    /// A file could not be read or parsed.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The native profile could not be rebuilt into the run's models.
    #[error("{}: {source}", path.display())]
    Native {
        /// The native profile.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The directory holds only a native profile, and this reader has no decoder for it
    /// ([`open_run`]; the analysis commands read it through [`open_run_with`](crate::open_run_with)).
    #[error(
        "{} holds the run's native profile ({RECORD_FILE}) and no original-format file: read it \
         with ferry's analysis commands, or write the original formats with `ferry export {} -o OUT`",
        .0.display(),
        .0.display()
    )]
    NativeOnly(PathBuf),
}

/// A run's files as an analysis read them.
#[derive(Debug)]
pub struct OpenedRun {
    /// The model of the files read.
    pub run: RunModel,
    /// What was skipped or does not add up, one line each (print them; they are not errors).
    pub warnings: Vec<String>,
    /// Where the manifest lives and the directory's path under it (`"vector/"`), when verified.
    pub(crate) trust: Option<(PathBuf, String)>,
    /// The directory.
    pub(crate) dir: PathBuf,
    /// How many files were there but could not be read (truncated, malformed, changed since the
    /// run): the analysis leaves them out, and its command should not report success.
    pub skipped: usize,
    /// How the run ended, from its manifest (`None` without one, or in a manifest from before
    /// outcomes were recorded: those runs succeeded).
    pub outcome: Option<RunOutcome>,
}

impl OpenedRun {
    /// Why the run failed, when its manifest says it did (its profile is complete and readable).
    pub fn failure(&self) -> Option<&str> {
        self.outcome.as_ref().and_then(RunOutcome::failure)
    }

    /// Whether the files were checked against a manifest.
    pub fn is_verified(&self) -> bool {
        self.trust.is_some()
    }

    /// Records `path`, a file an analysis wrote (a trace, a page), in the run's manifest, so the
    /// next run into the directory removes it like the run's own files. Returns whether it was
    /// recorded: `false` without a manifest, or for a path outside the manifest's directory.
    ///
    /// # Errors
    /// As [`Manifest::add_file`] ([`ManifestError::Busy`] while a run writes the directory).
    pub fn record_output(&self, path: &Path, w: Written) -> Result<bool, ManifestError> {
        let Some((root, _)) = &self.trust else { return Ok(false) };
        let abs = |p: &Path| fs::canonicalize(p).ok();
        let (Some(root_abs), Some(parent)) = (abs(root), path.parent().and_then(abs)) else {
            return Ok(false);
        };
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return Ok(false) };
        let Ok(rel_dir) = parent.strip_prefix(&root_abs) else { return Ok(false) };
        let mut parts: Vec<&str> = Vec::new();
        for c in rel_dir.components() {
            match c.as_os_str().to_str() {
                Some(s) => parts.push(s),
                None => return Ok(false),
            }
        }
        parts.push(name);
        Manifest::add_file(root, &parts.join("/"), w)?;
        Ok(true)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// What to run `ferry run` with to get `file`.
fn option_for(file: &str) -> &'static str {
    match file {
        SWIMLANE_FILE => "--swimlane N",
        PMU_FILE => "--pmu N",
        DEPS_FILE => "--dep-gen",
        SCOPES_FILE => "--scope-stats",
        _ => "--dump-args N",
    }
}

/// Every DFX file an analysis may read, relative to a run's directory.
pub(crate) fn dfx_files() -> [String; 5] {
    [
        SWIMLANE_FILE.to_string(),
        PMU_FILE.to_string(),
        DEPS_FILE.to_string(),
        format!("{ARGS_DIR}/{ARGS_FILE}"),
        format!("{SCOPES_DIR}/{SCOPES_FILE}"),
    ]
}

struct Opener {
    dir: Dir,
    /// The manifest, the directory it lives in and this directory's prefix under it.
    trust: Option<(Manifest, Dir, String)>,
    warnings: Vec<String>,
    /// Files that are there but could not be read (each also a warning).
    skipped: usize,
}

impl Opener {
    /// `rel`, opened for reading if the analysis may read it (see the module docs); `None` when
    /// it is absent (or skipped with a warning).
    fn source(&mut self, rel: &str, need: Need) -> Result<Option<Input>, OpenError> {
        if need == Need::Skip {
            return Ok(None);
        }
        let path = self.dir.join(rel);
        let exists = match self.dir.stat(rel) {
            Ok(m) => m.is_some(),
            // A link among the directories on the way: refused like a file that is there.
            Err(e) => return self.refuse(rel, need, OpenError::Fs(e)),
        };
        let missing = || OpenError::MissingFile {
            dir: self.dir.path().to_path_buf(),
            file: rel.to_string(),
            hint: format!(" (written by `ferry run` with {})", option_for(file_name(rel))),
        };
        let Some((m, root, prefix)) = &self.trust else {
            return match (exists, need) {
                (true, _) => match self.dir.open_file(rel, read_limit(rel)) {
                    Ok(f) => Ok(Some(f)),
                    Err(e) => self.refuse(rel, need, OpenError::Fs(e)),
                },
                (false, Need::Required) => Err(missing()),
                (false, _) => Ok(None),
            };
        };
        let full = format!("{prefix}{rel}");
        let refusal = match (m.entry(&full), exists) {
            (None, false) => {
                return if need == Need::Required { Err(missing()) } else { Ok(None) };
            }
            (None, true) => ManifestError::NotListed { dir: root.path().to_path_buf(), file: full },
            (Some(_), false) => ManifestError::Changed {
                file: path.clone(),
                what: "the manifest lists it but it is gone".into(),
            },
            (Some(e), true) if e.bytes.is_some_and(|b| b > read_limit(rel)) => {
                ManifestError::Fs(FsError::TooLarge { path, size: e.bytes, limit: read_limit(rel) })
            }
            (Some(_), true) => match m.open_verified(root, &full) {
                Ok(f) => return Ok(Some(f)),
                Err(e) => e,
            },
        };
        let refusal = OpenError::Refused { source: refusal };
        self.refuse(rel, need, refusal)
    }

    /// A file that is there but refused: an error when the analysis cannot do without it, else
    /// a warning and nothing.
    fn refuse<T>(&mut self, rel: &str, need: Need, e: OpenError) -> Result<Option<T>, OpenError> {
        if need.strict() {
            return Err(e);
        }
        self.skipped += 1;
        self.warnings.push(format!("skipped {rel}: {e}"));
        Ok(None)
    }

    /// A parse failure of a file: an error when required, else a warning and nothing. The
    /// error names the file by its path.
    fn failed<T>(&mut self, need: Need, e: OutputError) -> Result<Option<T>, OpenError> {
        let e = e.located(self.dir.path());
        if need.strict() {
            return Err(e.into());
        }
        self.skipped += 1;
        self.warnings.push(format!("skipped {e}"));
        Ok(None)
    }

    /// Whether `rel` is neither in the directory nor in its manifest.
    fn absent_and_unlisted(&self, rel: &str) -> bool {
        let listed = self
            .trust
            .as_ref()
            .is_some_and(|(m, _, prefix)| m.entry(&format!("{prefix}{rel}")).is_some());
        matches!(self.dir.stat(rel), Ok(None)) && !listed
    }

    /// The size of `rel` when the analysis may rely on it: listed with that size (no hash: the
    /// file is not read), or present in an unverified directory (a regular file; a link is
    /// refused).
    fn size_of(&mut self, rel: &str) -> Result<Option<u64>, OpenError> {
        let path = self.dir.join(rel);
        let Some(meta) = self.dir.stat(rel)? else { return Ok(None) };
        if meta.kind != Kind::File {
            let e = match meta.kind {
                Kind::Symlink => FsError::Symlink { path },
                _ => FsError::NotAFile { path, kind: "not a regular file" },
            };
            return Err(e.into());
        }
        let limit = read_limit(rel);
        if meta.len > limit {
            return Err(FsError::TooLarge { path, size: Some(meta.len), limit }.into());
        }
        let Some((m, root, prefix)) = &self.trust else { return Ok(Some(meta.len)) };
        let full = format!("{prefix}{rel}");
        match m.entry(&full) {
            Some(e) if e.bytes == Some(meta.len) => Ok(Some(meta.len)),
            Some(e) => Err(OpenError::Refused {
                source: ManifestError::Changed {
                    file: path,
                    what: format!("{} bytes, the run wrote {}", meta.len, e.bytes.unwrap_or(0)),
                },
            }),
            None => Err(OpenError::Refused {
                source: ManifestError::NotListed { dir: root.path().to_path_buf(), file: full },
            }),
        }
    }
}

fn file_name(rel: &str) -> &str {
    rel.rsplit('/').next().unwrap_or(rel)
}

/// The manifest that covers `dir`: its own, or that of the nearest directory above it (at most
/// two levels up) that lists files under `dir` — the `DIR/<example>/` of a run of several
/// examples, the `DIR/<example>/run-NNN/` of a session over several runs; with the directory it
/// lives in and `dir`'s prefix under it.
pub(crate) fn find_manifest(dir: &Dir) -> Result<Option<(Manifest, Dir, String)>, OpenError> {
    let complete = |m: Manifest, at: &Path| {
        if m.complete {
            Ok(m)
        } else {
            Err(OpenError::Manifest(ManifestError::Incomplete(at.to_path_buf())))
        }
    };
    if let Some(m) = Manifest::read_in(dir).map_err(OpenError::Manifest)? {
        return Ok(Some((complete(m, dir.path())?, dir.clone(), String::new())));
    }
    let abs = fs::canonicalize(dir.path())
        .map_err(|source| OutputError::Io { file: dir.path().display().to_string(), source })?;
    let mut prefix = String::new();
    let mut at = abs.as_path();
    for _ in 0..2 {
        let (Some(parent), Some(name)) = (at.parent(), at.file_name().and_then(|n| n.to_str()))
        else {
            return Ok(None);
        };
        prefix = format!("{name}/{prefix}");
        at = parent;
        let Ok(root) = Dir::open(parent) else { return Ok(None) };
        match Manifest::read_in(&root).map_err(OpenError::Manifest)? {
            Some(m) if m.files.iter().any(|e| e.path.starts_with(&prefix)) => {
                let at = root.path().to_path_buf();
                return Ok(Some((complete(m, &at)?, root, prefix)));
            }
            // A manifest that lists nothing under `dir` covers another run: stop here.
            Some(_) => return Ok(None),
            None => {}
        }
    }
    Ok(None)
}

/// Whether `rel` below `dir` is a regular file (reached without following a link).
pub(crate) fn is_file(dir: &Dir, rel: &str) -> bool {
    matches!(dir.stat(rel), Ok(Some(m)) if m.kind == Kind::File)
}

/// Subdirectories of `dir` that hold `rel` (any DFX file when `rel` is `None`), sorted; links
/// are not followed.
fn subdirs_with(dir: &Dir, rel: Option<&str>) -> Vec<String> {
    let Ok(entries) = dir.entries() else { return Vec::new() };
    let mut v: Vec<String> = entries
        .into_iter()
        .filter(|e| e.kind == Kind::Dir)
        .filter_map(|e| e.name.into_string().ok())
        .filter(|name| match rel {
            Some(r) => is_file(dir, &format!("{name}/{r}")),
            None => dfx_files()
                .iter()
                .map(String::as_str)
                .chain([RECORD_FILE])
                .any(|f| is_file(dir, &format!("{name}/{f}"))),
        })
        .map(|name| dir.join(&name).display().to_string())
        .collect();
    v.sort();
    v
}

/// The name map file of `dir`: `name_map_<case>.json` when it exists, else the first
/// `name_map_*.json` by name.
fn name_map_of(dir: &Dir, case: Option<&str>) -> Option<String> {
    if let Some(c) = case {
        let f = name_map_file(c);
        if is_file(dir, &f) {
            return Some(f);
        }
    }
    let mut found: Vec<String> = dir
        .entries()
        .ok()?
        .into_iter()
        .filter_map(|e| e.name.into_string().ok())
        .filter(|n| is_name_map_file(n))
        .collect();
    found.sort();
    found.into_iter().next()
}

/// Opens `dir` for an analysis that needs `needs` (the rules are the README's "Analysis
/// commands").
///
/// # Errors
/// [`OpenError`]: the directory is missing or not one, a required file is missing, refused by
/// the manifest or broken, the manifest is malformed or incomplete, or nothing was read.
pub fn open_run(dir: &Path, needs: &Needs) -> Result<OpenedRun, OpenError> {
    let handle = match Dir::open(dir) {
        Ok(d) => d,
        Err(FsError::NotADirectory { .. }) => {
            return Err(OpenError::NotADirectory(dir.to_path_buf()))
        }
        Err(e) if e.is_not_found() => return Err(OpenError::NoDirectory(dir.to_path_buf())),
        Err(e) => return Err(e.into()),
    };
    let trust = find_manifest(&handle)?;
    let mut o = Opener { dir: handle.clone(), trust, warnings: Vec::new(), skipped: 0 };
    if o.trust.is_none() {
        o.warnings.push(format!(
            "{} has no {MANIFEST_FILE} (not written by `ferry run`, or by a ferry before \
             manifests): its files are read unverified and may mix runs",
            dir.display()
        ));
    }
    // A required file that is missing: point at the subdirectories that hold it.
    let required = [
        (needs.swimlane, SWIMLANE_FILE.to_string()),
        (needs.deps, DEPS_FILE.to_string()),
        (needs.args, format!("{ARGS_DIR}/{ARGS_FILE}")),
        (needs.scopes, format!("{SCOPES_DIR}/{SCOPES_FILE}")),
    ];
    for (need, rel) in &required {
        if *need == Need::Required && matches!(handle.stat(rel), Ok(None)) {
            let mut subdirs = subdirs_with(&handle, Some(rel));
            if subdirs.is_empty() {
                // Subdirectories read from their native profiles hold it too.
                subdirs = subdirs_with(&handle, Some(RECORD_FILE));
            }
            if !subdirs.is_empty() {
                return Err(OpenError::SeveralExamples {
                    dir: dir.to_path_buf(),
                    file: rel.clone(),
                    subdirs,
                });
            }
        }
    }
    let mut run = RunModel::default();
    let mut any = false;
    if let Some(f) = o.source(SWIMLANE_FILE, needs.swimlane)? {
        match read_swimlane(BufReader::new(f)) {
            Ok((meta, kernels, sw, loss)) => {
                run.meta = meta;
                run.kernels = kernels;
                run.swimlane = Some(sw);
                run.loss.merge(loss);
                any = true;
            }
            Err(e) => o.failed::<()>(needs.swimlane, e).map(drop)?,
        }
    }
    // The name map beside the records (the case's, else the first): its names label kernels,
    // over the metadata's, as the original tools label them.
    if run.swimlane.is_some() {
        if let Some(rel) = name_map_of(&handle, run.meta.case.as_deref()) {
            if let Some(f) = o.source(&rel, Need::Optional)? {
                match read_name_map(BufReader::new(f)) {
                    Ok(m) => run.kernels.extend(m.kernels()),
                    Err(e) => o.failed::<()>(Need::Optional, e).map(drop)?,
                }
            }
        }
    }
    if let Some(f) = o.source(PMU_FILE, needs.pmu)? {
        match read_pmu(BufReader::new(f)) {
            Ok(t) => {
                run.pmu = Some(t);
                any = true;
                if let Some(f) = o.source(PMU_LOSS_FILE, Need::Optional)? {
                    let loss = serde_json::from_reader(BufReader::new(f))
                        .map_err(OutputError::json(PMU_LOSS_FILE))
                        .and_then(|l| super::model::check_loss(&l, PMU_LOSS_FILE).map(|()| l));
                    match loss {
                        Ok(l) => run.loss.merge(l),
                        Err(e) => o.failed::<()>(Need::Optional, e).map(drop)?,
                    }
                }
            }
            Err(e) => o.failed::<()>(needs.pmu, e).map(drop)?,
        }
    }
    if let Some(f) = o.source(DEPS_FILE, needs.deps)? {
        match read_deps(BufReader::new(f)) {
            Ok((g, loss)) => {
                run.deps = Some(g);
                run.loss.merge(loss);
                any = true;
            }
            Err(e) => o.failed::<()>(needs.deps, e).map(drop)?,
        }
    }
    let args_rel = format!("{ARGS_DIR}/{ARGS_FILE}");
    if let Some(f) = o.source(&args_rel, needs.args)? {
        let p = handle.join(&args_rel);
        let bin_rel = format!("{ARGS_DIR}/{ARGS_BIN_FILE}");
        let read = if needs.args_payloads {
            // A dump without payloads (level 3 with no marked tensor) writes no `args.bin` and
            // names none: its absence is then read_args' to judge against `bin_file`. One the
            // manifest lists stays required.
            let bin_need =
                if o.absent_and_unlisted(&bin_rel) { Need::Optional } else { needs.args };
            match o.source(&bin_rel, bin_need)? {
                Some(b) => {
                    // Read one payload at a time when asked, never copied whole.
                    let len = b.len();
                    read_args(BufReader::new(f), Some(ArgsBin::from_file(b.into_file(), len)))
                }
                None => read_args(BufReader::new(f), None),
            }
        } else {
            let len = o.size_of(&bin_rel);
            match len {
                Ok(len) => read_args_meta(BufReader::new(f), len),
                Err(e) if needs.args.strict() => return Err(e),
                Err(e) => {
                    o.skipped += 1;
                    o.warnings.push(format!("skipped {}: {e}", p.display()));
                    Err(OutputError::Empty(p.clone()))
                }
            }
        };
        match read {
            Ok((a, loss)) => {
                run.args = Some(a);
                run.loss.merge(loss);
                any = true;
            }
            Err(OutputError::Empty(_)) => {}
            Err(e) => o.failed::<()>(needs.args, e).map(drop)?,
        }
    }
    let scopes_rel = format!("{SCOPES_DIR}/{SCOPES_FILE}");
    if let Some(f) = o.source(&scopes_rel, needs.scopes)? {
        match read_scopes(BufReader::new(f)) {
            Ok((mut s, loss)) => {
                // The sites' names, when the run wrote them: a table that is there but broken
                // is skipped with a warning (the records stand without it).
                let names_rel = format!("{SCOPES_DIR}/{SCOPE_NAMES_FILE}");
                if let Some(nf) = o.source(&names_rel, Need::Optional)? {
                    match read_scope_names(BufReader::new(nf)) {
                        Ok(n) => s.names = n,
                        Err(e) => o.failed::<()>(Need::Optional, e).map(drop)?,
                    }
                }
                run.scopes = Some(s);
                run.loss.merge(loss);
                any = true;
            }
            Err(e) => o.failed::<()>(needs.scopes, e).map(drop)?,
        }
    }
    if !any {
        let subdirs = subdirs_with(&handle, None);
        if !subdirs.is_empty() {
            return Err(OpenError::SeveralExamples {
                dir: dir.to_path_buf(),
                file: "DFX files".into(),
                subdirs,
            });
        }
        if o.warnings.len() > usize::from(o.trust.is_none()) {
            // Files were there but none could be read: say why, not "no files".
            let why = o.warnings.split_off(usize::from(o.trust.is_none())).join("; ");
            return Err(OutputError::Format { file: dir.display().to_string(), what: why }.into());
        }
        if is_file(&handle, RECORD_FILE) {
            return Err(OpenError::NativeOnly(dir.to_path_buf()));
        }
        return Err(OpenError::Empty(dir.to_path_buf()));
    }
    o.warnings.extend(inconsistencies(&run));
    let outcome = o.trust.as_ref().and_then(|(m, _, _)| m.outcome.clone());
    // The task a kernel fault names, on the run it failed in (a session's last).
    run.meta.failed = outcome
        .as_ref()
        .and_then(RunOutcome::failed_task)
        .filter(|f| f.run.is_none() || f.run == run.meta.run.map(|r| r.index))
        .cloned();
    let trust = o.trust.map(|(_, root, prefix)| (root.path().to_path_buf(), prefix));
    let skipped = o.skipped;
    Ok(OpenedRun { run, warnings: o.warnings, trust, dir: dir.to_path_buf(), outcome, skipped })
}

/// What parses but does not add up in `run`, one line per kind (with the first example): tasks
/// that end before they start, edges to tasks the graph does not list, scope rings with records
/// but no capacity.
pub fn inconsistencies(run: &RunModel) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(sw) = &run.swimlane {
        let bad: Vec<_> = sw.aicore_tasks.iter().filter(|t| t.end < t.start).collect();
        if let Some(t) = bad.first() {
            w.push(format!(
                "{SWIMLANE_FILE}: {} AICore task record(s) end before they start (first: core {} \
                 task {:#x}, start {} end {}); their exec time counts as 0",
                bad.len(),
                t.core,
                t.task_token_raw,
                t.start,
                t.end
            ));
        }
        let bad = sw.aicpu_tasks.iter().filter(|t| t.finish < t.dispatch).count();
        if bad > 0 {
            w.push(format!(
                "{SWIMLANE_FILE}: {bad} AICPU task record(s) finish before their dispatch"
            ));
        }
    }
    if let Some(g) = &run.deps {
        let known: std::collections::HashSet<u64> = g.tasks.task_ids().collect();
        let unknown: Vec<_> = g
            .edges
            .iter()
            .filter(|e| (e.pred != 0 && !known.contains(&e.pred)) || !known.contains(&e.succ))
            .collect();
        if let Some(e) = unknown.first() {
            w.push(format!(
                "{DEPS_FILE}: {} edge(s) name a task the graph does not list (first: {:#x} -> \
                 {:#x})",
                unknown.len(),
                e.pred,
                e.succ
            ));
        }
    }
    if let Some(s) = &run.scopes {
        let mut rings: Vec<i32> = s.records.iter().map(|r| r.ring).collect();
        rings.sort_unstable();
        rings.dedup();
        for r in rings {
            let cap = usize::try_from(r).ok().and_then(|i| s.task_window_max.get(i));
            if cap.is_none_or(|&c| c <= 0) {
                w.push(format!(
                    "{SCOPES_FILE}: ring {r} has scope records but no task-window capacity \
                     ({}): its occupancy risk is unknown",
                    cap.map_or("no such ring".to_string(), |c| format!("task_window_max {c}"))
                ));
            }
        }
    }
    w
}
