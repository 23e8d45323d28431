//! A run's ownership of its output directory: the manifest and the directory lock.
//!
//! Reusing an output directory must never mix two runs' files. The rules:
//!
//! - **Every run writes a manifest last**: [`MANIFEST_FILE`] lists each file the run wrote (path
//!   relative to the directory, size, XXH3-64 of the content), the run's id, command and arch.
//!   While a run writes, the manifest says `"complete": false` and lists both what the earlier
//!   run left and what this one plans, so a run killed half-way is recognised (and cleaned up)
//!   by the next one.
//! - **A run owns the directory while it writes**: [`OutDir::claim`] takes an advisory lock on
//!   [`LOCK_FILE`] (a second ferry process writing the same directory is refused at once with
//!   [`ManifestError::Busy`]) and removes temp files ([`temp_owner`]) that killed runs left.
//! - **Only ferry's own files are removed**: before writing, [`OutDir::begin`] removes every file
//!   the earlier run's manifest lists (so nothing of it survives beside the new files), never a
//!   file no manifest lists. A file under one of ferry's names that no manifest lists (written
//!   by hand, by another tool, or by a ferry without manifests) makes the claim fail with
//!   [`ManifestError::Foreign`] before the chip starts: ferry neither mixes it in nor deletes it.
//! - **Readers verify**: [`Manifest::verified`] refuses a directory without a complete manifest,
//!   and [`Manifest::verify`] a file the manifest does not list or whose size or hash differs.
//!
//! # Examples
//! ```
//! use ferry_profile::{write_atomic, Manifest, OutDir};
//! use std::io::Write;
//! let dir = std::env::temp_dir().join(format!("ferry-manifest-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let names = vec!["deps.json".to_string()];
//! let mut out = OutDir::claim(&dir, &names).unwrap();
//! out.begin("run-1", &["ferry".into(), "run".into()], "a2a3", &names).unwrap();
//! let w = write_atomic(&dir.join("deps.json"), |f| f.write_all(b"{}")).unwrap();
//! out.record("deps.json", w);
//! out.commit().unwrap();
//! let m = Manifest::verified(&dir).unwrap();
//! m.verify(&dir, "deps.json").unwrap();
//! std::fs::write(dir.join("deps.json"), b"[]").unwrap(); // edited behind ferry's back
//! assert!(m.verify(&dir, "deps.json").is_err());
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::io;
use std::path::{Path, PathBuf};

use ferry_fs::{Dir, FsError, Kind};
use serde::{Deserialize, Serialize};

use super::atomic::{hash_reader, temp_owner, write_atomic_in, Written};
use super::failed::FailedTask;

/// File name of a run's manifest inside its output directory.
pub const MANIFEST_FILE: &str = "ferry-manifest.json";
/// File name of the advisory lock a writing run holds on its output directory.
pub const LOCK_FILE: &str = ".ferry.lock";
/// The manifest format this build writes and reads.
pub const MANIFEST_FORMAT: u32 = 1;
/// The largest manifest a reader accepts (a run's manifest is a few KiB).
pub const MANIFEST_MAX_BYTES: u64 = 4 << 20;
/// How deep below the output directory ferry writes files (`<example>/args_dump/args.bin`).
const MAX_DEPTH: usize = 3;

/// What went wrong with an output directory or its manifest.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A file-system operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path it was about.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The output path exists and is not a directory.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// The directory, or something in it, was refused (a link, another user's directory, a
    /// file that is not a regular file or is over its limit).
    #[error(transparent)]
    Fs(#[from] FsError),
    /// Another process holds the directory's lock.
    #[error("another ferry process is writing {}", .0.display())]
    Busy(PathBuf),
    /// Files under ferry's names that no manifest there lists.
    #[error(
        "{} holds files with ferry's names that no ferry run there wrote (no manifest lists \
         them): {}; remove them or choose another directory",
        dir.display(),
        files.join(", ")
    )]
    Foreign {
        /// The directory.
        dir: PathBuf,
        /// The files, relative to it.
        files: Vec<String>,
    },
    /// The directory holds a complete earlier run that this one would replace (refused unless
    /// the caller asked to replace it: `ferry run --force`).
    #[error(
        "{} holds a complete ferry run ({}; {} files: {}); writing here would replace it: pass \
         --force to replace it, or choose another directory",
        dir.display(),
        if command.is_empty() { format!("run {run_id}") } else { format!("`{command}`") },
        files.len(),
        files.join(", ")
    )]
    Occupied {
        /// The directory.
        dir: PathBuf,
        /// The earlier run's id.
        run_id: String,
        /// The earlier run's command line, joined with spaces.
        command: String,
        /// The files it wrote, relative to the directory.
        files: Vec<String>,
    },
    /// No manifest: not the output of a complete ferry run.
    #[error(
        "{} has no {MANIFEST_FILE}: not the output of a complete ferry run (interrupted, written \
         by another tool or by a ferry without manifests)",
        .0.display()
    )]
    Missing(PathBuf),
    /// The run writing the directory did not finish.
    #[error("the ferry run writing {} did not finish (its manifest is incomplete)", .0.display())]
    Incomplete(PathBuf),
    /// The manifest is not one this build can trust.
    #[error("{}: malformed manifest: {reason}", path.display())]
    Malformed {
        /// The manifest's path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A file the manifest does not list.
    #[error("{file} is not listed in the manifest of {}", dir.display())]
    NotListed {
        /// The directory.
        dir: PathBuf,
        /// The file, relative to it.
        file: String,
    },
    /// A listed file whose size or content differs from what the run wrote.
    #[error("{} changed since the run wrote it ({what})", file.display())]
    Changed {
        /// The file.
        file: PathBuf,
        /// How it differs.
        what: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ManifestError + '_ {
    move |source| ManifestError::Io { path: path.to_path_buf(), source }
}

/// A run's manifest ([`MANIFEST_FILE`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: u32,
    /// The run's id (unique per run: wall-clock nanoseconds and process id).
    pub run_id: String,
    /// The command line that made the run.
    pub command: Vec<String>,
    /// The chip generation it ran on.
    pub arch: String,
    /// Whether the run finished writing (`false` while it writes, and after it was killed).
    pub complete: bool,
    /// The files, in the order written.
    pub files: Vec<ManifestEntry>,
    /// How the run ended; absent in manifests written before outcomes were recorded (those runs
    /// succeeded: a failed run left its manifest incomplete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<RunOutcome>,
}

/// How a run whose profile is complete ended: a run that fails verification or whose kernel
/// faults still writes its profile, marked so that readers say it failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum RunOutcome {
    /// The run finished and verified.
    Ok,
    /// The run failed after its profile was collected.
    Failed {
        /// Why, one line (the error's cause chain).
        error: String,
        /// The task whose kernel failed on its core, when a kernel failed (absent for a wrong
        /// result, a failed launch, a profile of before this was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<FailedTask>,
    },
}

impl RunOutcome {
    /// The error of a failed run.
    pub fn failure(&self) -> Option<&str> {
        match self {
            RunOutcome::Ok => None,
            RunOutcome::Failed { error, .. } => Some(error),
        }
    }

    /// The task whose kernel failed, when the run failed on one.
    pub fn failed_task(&self) -> Option<&FailedTask> {
        match self {
            RunOutcome::Ok => None,
            RunOutcome::Failed { task, .. } => task.as_ref(),
        }
    }
}

/// One file of a [`Manifest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Path relative to the output directory, `/`-separated.
    pub path: String,
    /// Its size (absent while the run writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// XXH3-64 of its content, 16 hex digits (absent while the run writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xxh3: Option<String>,
}

/// Whether `rel` is a path a manifest may name: relative, `/`-separated, no `.`/`..`
/// components, no empty component, at most [`MAX_DEPTH`] deep.
pub(crate) fn valid_rel(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    !rel.is_empty()
        && parts.len() <= MAX_DEPTH
        && parts
            .iter()
            .all(|p| !p.is_empty() && *p != "." && *p != ".." && !p.contains(['\\', '\0']))
}

fn hex(h: u64) -> String {
    format!("{h:016x}")
}

impl Manifest {
    /// The manifest of `dir`, if it has one.
    ///
    /// # Errors
    /// [`ManifestError::Io`] reading it; [`ManifestError::Malformed`] for a manifest over
    /// [`MANIFEST_MAX_BYTES`], of another format, or naming a path outside the directory, twice,
    /// or without (or, incomplete, with) its size and hash.
    pub fn read(dir: &Path) -> Result<Option<Manifest>, ManifestError> {
        Manifest::read_in(&Dir::open(dir)?)
    }

    /// [`Manifest::read`] through the directory handle `dir` (the manifest is opened without
    /// following a link, and must be a regular file of at most [`MANIFEST_MAX_BYTES`]).
    ///
    /// # Errors
    /// As [`Manifest::read`]; [`ManifestError::Fs`] for a link or a file that is not a regular
    /// file.
    pub fn read_in(dir: &Dir) -> Result<Option<Manifest>, ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        let malformed = |reason: String| ManifestError::Malformed { path: path.clone(), reason };
        let text = match dir.read(MANIFEST_FILE, MANIFEST_MAX_BYTES) {
            Ok(t) => t,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(FsError::TooLarge { .. }) => {
                return Err(malformed(format!("over {MANIFEST_MAX_BYTES} bytes")))
            }
            Err(e) => return Err(e.into()),
        };
        let m: Manifest = serde_json::from_slice(&text).map_err(|e| malformed(e.to_string()))?;
        if m.format != MANIFEST_FORMAT {
            return Err(malformed(format!(
                "format {} (this ferry reads {MANIFEST_FORMAT})",
                m.format
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for e in &m.files {
            if !valid_rel(&e.path) {
                return Err(malformed(format!("path `{}` leaves the directory", e.path)));
            }
            if !seen.insert(e.path.as_str()) {
                return Err(malformed(format!("`{}` listed twice", e.path)));
            }
            let hashed = e
                .xxh3
                .as_deref()
                .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()));
            if m.complete && (e.bytes.is_none() || !hashed) {
                return Err(malformed(format!("`{}` has no size or hash", e.path)));
            }
        }
        Ok(Some(m))
    }

    /// The complete manifest of `dir`: what a reader of the directory trusts.
    ///
    /// # Errors
    /// As [`Manifest::read`]; [`ManifestError::Missing`] without a manifest,
    /// [`ManifestError::Incomplete`] for a run that did not finish writing.
    pub fn verified(dir: &Path) -> Result<Manifest, ManifestError> {
        Manifest::verified_in(&Dir::open(dir)?)
    }

    /// [`Manifest::verified`] through the directory handle `dir`.
    ///
    /// # Errors
    /// As [`Manifest::verified`].
    pub fn verified_in(dir: &Dir) -> Result<Manifest, ManifestError> {
        let dir_path = dir.path();
        match Manifest::read_in(dir)? {
            None => Err(ManifestError::Missing(dir_path.to_path_buf())),
            Some(m) if !m.complete => Err(ManifestError::Incomplete(dir_path.to_path_buf())),
            Some(m) => Ok(m),
        }
    }

    /// The entry of `rel`, if listed.
    pub fn entry(&self, rel: &str) -> Option<&ManifestEntry> {
        self.files.iter().find(|e| e.path == rel)
    }

    /// Checks that `dir/rel` is listed and unchanged: its size first (no read), then its hash
    /// (one pass over the file in bounded chunks).
    ///
    /// # Errors
    /// [`ManifestError::NotListed`], [`ManifestError::Changed`], or [`ManifestError::Io`].
    pub fn verify(&self, dir: &Path, rel: &str) -> Result<(), ManifestError> {
        self.verify_in(&Dir::open(dir)?, rel)
    }

    /// [`Manifest::verify`] through the directory handle `dir`: the file is opened without
    /// following a link, must be a regular file, and is read no further than the size the run
    /// wrote.
    ///
    /// # Errors
    /// As [`Manifest::verify`]; [`ManifestError::Fs`] for a link or a file that is not a
    /// regular file.
    pub fn verify_in(&self, dir: &Dir, rel: &str) -> Result<(), ManifestError> {
        self.open_verified(dir, rel).map(drop)
    }

    /// Opens `rel` below `dir` for reading once it is verified: listed, a regular file of the
    /// size the run wrote, and of the content hash it wrote (one pass over the file in bounded
    /// chunks). The returned file reads from its start, at most that size.
    ///
    /// # Errors
    /// As [`Manifest::verify_in`].
    pub fn open_verified(&self, dir: &Dir, rel: &str) -> Result<ferry_fs::Input, ManifestError> {
        let e = self.entry(rel).ok_or_else(|| ManifestError::NotListed {
            dir: dir.path().to_path_buf(),
            file: rel.to_string(),
        })?;
        let path = dir.join(rel);
        let changed = |what: String| ManifestError::Changed { file: path.clone(), what };
        let wrote = e.bytes.unwrap_or(0);
        let mut input = match dir.open_file(rel, wrote) {
            Ok(i) => i,
            Err(FsError::TooLarge { size, .. }) => {
                let len = size.map_or("more".to_string(), |s| s.to_string());
                return Err(changed(format!("{len} bytes, the run wrote {wrote}")));
            }
            Err(e) => return Err(e.into()),
        };
        let len = input.len();
        if Some(len) != e.bytes {
            return Err(changed(format!("{len} bytes, the run wrote {wrote}")));
        }
        let w = hash_reader(&mut input).map_err(io_err(&path))?;
        if e.xxh3.as_deref() != Some(hex(w.xxh3).as_str()) || w.bytes != len {
            return Err(changed("its content hash differs".into()));
        }
        // The same open file from its start: what was hashed is what the caller reads.
        input.rewind().map_err(io_err(&path))?;
        Ok(input)
    }

    /// Writes the manifest into `dir`, atomically.
    ///
    /// # Errors
    /// [`ManifestError::Io`].
    pub fn write(&self, dir: &Path) -> Result<Written, ManifestError> {
        self.write_in(&Dir::open_writable(dir, false)?)
    }

    /// [`Manifest::write`] through the directory handle `dir`.
    ///
    /// # Errors
    /// [`ManifestError::Io`].
    pub fn write_in(&self, dir: &Dir) -> Result<Written, ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        write_atomic_in(dir, MANIFEST_FILE, |w| {
            serde_json::to_writer_pretty(w, self).map_err(io::Error::other)
        })
        .map_err(io_err(&path))
    }

    /// Adds (or replaces) `rel` in the complete manifest of `dir` under the directory's lock:
    /// for a file an analysis command writes into a run's directory (a trace, a page), so the
    /// next run into it removes that file too.
    ///
    /// # Errors
    /// [`ManifestError::Busy`] while a run writes the directory; as [`Manifest::verified`];
    /// [`ManifestError::Io`].
    pub fn add_file(dir: &Path, rel: &str, w: Written) -> Result<(), ManifestError> {
        Manifest::add_file_in(&Dir::open_writable(dir, false)?, rel, w)
    }

    /// [`Manifest::add_file`] through the directory handle `dir`.
    ///
    /// # Errors
    /// As [`Manifest::add_file`].
    pub fn add_file_in(dir: &Dir, rel: &str, w: Written) -> Result<(), ManifestError> {
        let _lock = DirLock::take(dir)?;
        let mut m = Manifest::verified_in(dir)?;
        m.files.retain(|e| e.path != rel);
        m.files.push(ManifestEntry {
            path: rel.to_string(),
            bytes: Some(w.bytes),
            xxh3: Some(hex(w.xxh3)),
        });
        m.write_in(dir)?;
        Ok(())
    }
}

/// An exclusive advisory lock (`flock`) on a directory's [`LOCK_FILE`], released on drop.
#[derive(Debug)]
struct DirLock {
    _lock: ferry_fs::Lock,
}

impl DirLock {
    /// Takes the lock of `dir` (its [`LOCK_FILE`] opened without following a link, and a
    /// regular file).
    fn take(dir: &Dir) -> Result<DirLock, ManifestError> {
        match dir.try_lock(LOCK_FILE)? {
            Some(l) => Ok(DirLock { _lock: l }),
            None => Err(ManifestError::Busy(dir.path().to_path_buf())),
        }
    }
}

/// A run's claim on its output directory (the rules are the README's "Output directories"):
/// validated, locked, cleaned of what killed runs left, and the files it writes recorded for the
/// manifest.
#[derive(Debug)]
pub struct OutDir {
    dir: Dir,
    _lock: DirLock,
    /// The manifest the directory had when claimed.
    earlier: Option<Manifest>,
    /// What the incomplete manifest on disk lists (the earlier run's files and the planned
    /// ones), once [`OutDir::begin`] ran.
    pending: Vec<ManifestEntry>,
    /// This run's manifest, once [`OutDir::begin`] ran.
    manifest: Option<Manifest>,
    /// Files recorded whose fsync is still due: done before the complete manifest is written
    /// ([`OutDir::record_unsynced`]).
    unsynced: Vec<std::fs::File>,
}

impl OutDir {
    /// Claims `dir` for a run that may write the files `names` (relative, `/`-separated):
    /// creates the directory, checks that it is one and that this process can write it, takes
    /// its lock, removes temp files other (dead: the lock says no live ferry writes here)
    /// processes left, and refuses files under `names` that no manifest there lists.
    ///
    /// # Errors
    /// [`ManifestError::NotADirectory`], [`ManifestError::Busy`], [`ManifestError::Foreign`],
    /// a malformed manifest, or [`ManifestError::Io`] (not creatable, not writable).
    pub fn claim(dir: &Path, names: &[String]) -> Result<OutDir, ManifestError> {
        let handle = match Dir::open_writable(dir, true) {
            Ok(d) => d,
            Err(FsError::NotADirectory { .. }) => {
                return Err(ManifestError::NotADirectory(dir.to_path_buf()))
            }
            Err(e) => return Err(e.into()),
        };
        // Creating the lock file proves the directory writable.
        let lock = DirLock::take(&handle)?;
        let earlier = Manifest::read_in(&handle)?;
        remove_stale_temps(&handle, 0)?;
        let listed = |rel: &str| earlier.as_ref().is_some_and(|m| m.entry(rel).is_some());
        let mut foreign = Vec::new();
        for rel in names {
            // A link among the directories on the way (`args_dump -> /elsewhere`) is refused
            // here, before the chip starts, naming it.
            if handle.stat(rel)?.is_some() && !listed(rel) {
                foreign.push(rel.clone());
            }
        }
        if !foreign.is_empty() {
            return Err(ManifestError::Foreign { dir: dir.to_path_buf(), files: foreign });
        }
        Ok(OutDir {
            dir: handle,
            _lock: lock,
            earlier,
            pending: Vec::new(),
            manifest: None,
            unsynced: Vec::new(),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The directory's handle: everything the run writes goes through it.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Starts writing (once; later calls do nothing): writes an incomplete manifest listing the
    /// earlier run's files and `planned`, then removes every file the earlier run's manifest
    /// lists. From here until [`OutDir::commit`] the directory reads as an unfinished run.
    ///
    /// # Errors
    /// [`ManifestError::Io`] writing the manifest or removing a file.
    pub fn begin(
        &mut self,
        run_id: &str,
        command: &[String],
        arch: &str,
        planned: &[String],
    ) -> Result<(), ManifestError> {
        if self.manifest.is_some() {
            return Ok(());
        }
        let earlier: Vec<String> = self
            .earlier
            .as_ref()
            .map(|m| m.files.iter().map(|e| e.path.clone()).collect())
            .unwrap_or_default();
        let mut pending: Vec<ManifestEntry> = Vec::new();
        for p in earlier.iter().chain(planned) {
            if pending.iter().all(|e| &e.path != p) {
                pending.push(ManifestEntry { path: p.clone(), bytes: None, xxh3: None });
            }
        }
        let m = Manifest {
            format: MANIFEST_FORMAT,
            run_id: run_id.to_string(),
            command: command.to_vec(),
            arch: arch.to_string(),
            complete: false,
            files: pending,
            outcome: None,
        };
        m.write_in(&self.dir)?;
        self.pending = m.files.clone();
        for rel in &earlier {
            // Through the handle, never through a link: a listed file below a directory that
            // is now a link (`args_dump -> /elsewhere`) is refused, not removed there.
            self.dir.remove_file(rel)?;
            // Its directories (`<example>/args_dump/`) go too once empty; one still holding
            // anything (another file, the user's) stays.
            let mut parent = rel.rsplit_once('/').map(|(d, _)| d);
            while let Some(d) = parent {
                if !self.dir.remove_dir(d).unwrap_or(false) {
                    break;
                }
                parent = d.rsplit_once('/').map(|(d, _)| d);
            }
        }
        self.manifest = Some(Manifest { files: Vec::new(), ..m });
        Ok(())
    }

    /// Lists `rel` in the incomplete manifest on disk before the run creates it (a file written
    /// while the run runs, such as the native profile): if the run never finishes, the next run
    /// into the directory removes it with the rest. Nothing is written when it is listed already.
    ///
    /// # Errors
    /// [`ManifestError::Io`] writing the manifest.
    ///
    /// # Panics
    /// Before [`OutDir::begin`].
    pub fn plan(&mut self, rel: &str) -> Result<(), ManifestError> {
        let m = self.manifest.as_ref().expect("OutDir::plan before begin");
        if self.pending.iter().any(|e| e.path == rel) {
            return Ok(());
        }
        self.pending.push(ManifestEntry { path: rel.to_string(), bytes: None, xxh3: None });
        Manifest { files: self.pending.clone(), ..m.clone() }.write_in(&self.dir)?;
        Ok(())
    }

    /// Whether [`OutDir::begin`] ran.
    pub fn is_begun(&self) -> bool {
        self.manifest.is_some()
    }

    /// Records a file this run wrote (`rel` to the directory).
    ///
    /// # Panics
    /// Before [`OutDir::begin`].
    pub fn record(&mut self, rel: &str, w: Written) {
        let m = self.manifest.as_mut().expect("OutDir::record before begin");
        m.files.retain(|e| e.path != rel);
        m.files.push(ManifestEntry {
            path: rel.to_string(),
            bytes: Some(w.bytes),
            xxh3: Some(hex(w.xxh3)),
        });
    }

    /// [`OutDir::record`] of a file written in place whose fsync is still due (the native
    /// profile, complete but not yet synced): `file` is fsynced before the complete manifest is
    /// written, with the run's last files
    /// ([`RunDir::finish_files`](crate::RunDir::finish_files)) or by the commit.
    ///
    /// # Panics
    /// Before [`OutDir::begin`].
    pub fn record_unsynced(&mut self, rel: &str, w: Written, file: std::fs::File) {
        self.record(rel, w);
        self.unsynced.push(file);
    }

    /// The files [`OutDir::record_unsynced`] left to fsync, for a caller that syncs them with
    /// its own (they must be synced before the commit).
    pub(crate) fn take_unsynced(&mut self) -> Vec<std::fs::File> {
        std::mem::take(&mut self.unsynced)
    }

    /// The path of `file` (under the directory) relative to it, `/`-separated.
    pub fn relative(&self, file: &Path) -> Option<String> {
        let rel = file.strip_prefix(self.dir.path()).ok()?;
        let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
        Some(parts?.join("/"))
    }

    /// Finishes: writes the complete manifest of what was recorded, last.
    ///
    /// # Errors
    /// [`ManifestError::Io`].
    ///
    /// # Panics
    /// Before [`OutDir::begin`].
    pub fn commit(self) -> Result<(), ManifestError> {
        self.commit_as(RunOutcome::Ok)
    }

    /// Finishes with `outcome`: writes the complete manifest of what was recorded, last. A
    /// failed run's profile is as readable as a good one's; readers report the failure.
    ///
    /// # Errors
    /// [`ManifestError::Io`].
    ///
    /// # Panics
    /// Before [`OutDir::begin`].
    pub fn commit_as(self, outcome: RunOutcome) -> Result<(), ManifestError> {
        let m = self.manifest.expect("OutDir::commit before begin");
        // What the manifest lists is on the disk before the manifest says it is complete.
        for f in &self.unsynced {
            f.sync_all().map_err(io_err(&self.dir.join(MANIFEST_FILE)))?;
        }
        Manifest { complete: true, outcome: Some(outcome), ..m }.write_in(&self.dir)?;
        Ok(())
    }

    /// The complete run the directory held when claimed, if any: what writing here replaces.
    pub fn earlier_run(&self) -> Option<&Manifest> {
        self.earlier.as_ref().filter(|m| m.complete)
    }

    /// Refuses a directory that holds a complete earlier run ([`ManifestError::Occupied`],
    /// naming it and its files); an interrupted run's leftovers are not a run and pass. A caller
    /// that means to replace the earlier run (`ferry run --force`) skips this.
    ///
    /// # Errors
    /// [`ManifestError::Occupied`].
    pub fn refuse_overwrite(self) -> Result<OutDir, ManifestError> {
        match self.earlier_run() {
            Some(m) => Err(ManifestError::Occupied {
                dir: self.dir.path().to_path_buf(),
                run_id: m.run_id.clone(),
                command: m.command.join(" "),
                files: m.files.iter().map(|e| e.path.clone()).collect(),
            }),
            None => Ok(self),
        }
    }
}

/// Removes the temp files ([`temp_owner`]) under `dir` (down to [`MAX_DEPTH`], never through
/// a link) that another process made: called with the directory's lock held, so no live ferry
/// process writes them.
fn remove_stale_temps(dir: &Dir, depth: usize) -> Result<(), ManifestError> {
    let me = std::process::id();
    for e in dir.entries()? {
        let Some(name) = e.name.to_str() else { continue };
        match e.kind {
            Kind::Dir if depth + 1 < MAX_DEPTH => remove_stale_temps(&dir.sub(name)?, depth + 1)?,
            Kind::File if temp_owner(name).is_some_and(|pid| pid != me) => {
                dir.remove_file(name)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Removes this process's temp files under `dir` (down to three levels, never through a link):
/// what a run stopped by a signal does before it exits. Best effort: errors are skipped.
pub fn remove_own_temps(dir: &Path) {
    fn walk(dir: &Dir, depth: usize, me: u32) {
        let Ok(entries) = dir.entries() else { return };
        for e in entries {
            let Some(name) = e.name.to_str() else { continue };
            match e.kind {
                Kind::Dir if depth + 1 < MAX_DEPTH => {
                    if let Ok(d) = dir.sub(name) {
                        walk(&d, depth + 1, me);
                    }
                }
                Kind::File if temp_owner(name) == Some(me) => {
                    let _ = dir.remove_file(name);
                }
                _ => {}
            }
        }
    }
    if let Ok(d) = Dir::open(dir) {
        walk(&d, 0, std::process::id());
    }
}

#[cfg(test)]
mod tests;
