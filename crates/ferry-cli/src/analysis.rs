//! What the analysis commands share: opening a run's directory through
//! [`ferry_profile::open_run_with`] (its native profile, rebuilt for what the command needs, or
//! the original-format files the command needs; checked against the run's manifest; see the
//! README's "Analysis commands") with its warnings on stderr, and recording the files a command
//! writes into a run's directory in its manifest.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use ferry_profile::{self as output, Needs, Opened, OpenedRun, Written};
use ferry_runtime::host::profile::NativeReader;

/// Prints `r`'s warnings and failure, and counts what it skipped.
fn note(dir: &Path, r: &OpenedRun) {
    for w in &r.warnings {
        eprintln!("ferry: warning: {w}");
    }
    if let Some(why) = r.failure() {
        eprintln!("ferry: the run in {} failed: {why}", dir.display());
    }
    SKIPPED.fetch_add(r.skipped, Ordering::Relaxed);
}

/// Opens `dir` for a command that needs `needs`; prints the warnings to stderr.
///
/// # Errors
/// [`ferry_profile::OpenError`]: the message names the directory or file and what to do.
pub(crate) fn open(dir: &Path, needs: &Needs) -> anyhow::Result<OpenedRun> {
    let r = output::open_run_with(dir, needs, &NativeReader)?;
    note(dir, &r);
    Ok(r)
}

/// Opens `dir` for a command that reads a run or a session over several runs (`ferry run
/// --repeat N`: the runs in launch order, read as one model spanning them by
/// [`ferry_profile::session_model`]); prints the warnings to stderr.
///
/// # Errors
/// As [`open`], for the session's `runs.json` or any run.
pub(crate) fn open_any(dir: &Path, needs: &Needs) -> anyhow::Result<Opened> {
    let o = output::open_any(dir, needs, &NativeReader)?;
    match &o {
        Opened::Run(r) => note(dir, r),
        Opened::Session(_, runs) => {
            for r in runs {
                note(r.dir(), r);
            }
        }
    }
    Ok(o)
}

/// Input files the analysis commands of this process could not read (see [`skipped_inputs`]).
static SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// How many input files the analysis left out because they could not be read: `main` turns a
/// command that printed its output without them into a non-zero exit.
pub(crate) fn skipped_inputs() -> usize {
    // Relaxed: read on the main thread after the command that counted them returned.
    SKIPPED.load(Ordering::Relaxed)
}

/// Writes `bytes` as `rel` in the run's directory (a command's default output, e.g.
/// `scope_stats/scope_stats.html`): through the directory's handle, so a link planted in the
/// run's directory (`scope_stats -> /elsewhere`) is refused, never written through; then
/// records it in the run's manifest. Returns the path written.
///
/// # Errors
/// The directory refused (another user's, writable by everyone, a link), the write, or the
/// manifest update (the file is removed again then).
pub(crate) fn write_in_run(run: &OpenedRun, rel: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
    write_in(run, run.dir(), rel, bytes)
}

/// [`write_in_run`] into `dir`, a directory the run's manifest covers (a session's, whose runs
/// are its subdirectories).
///
/// # Errors
/// As [`write_in_run`].
pub(crate) fn write_in(
    run: &OpenedRun,
    dir: &Path,
    rel: &str,
    bytes: &[u8],
) -> anyhow::Result<PathBuf> {
    let dir = output::open_run_dir_writable(dir)?;
    let w = output::write_bytes_in(&dir, rel, bytes)?;
    let path = dir.join(rel);
    record(run, &path, w)?;
    Ok(path)
}

/// Writes `bytes` to `path` (a path the user chose: `-o FILE`) atomically, its directory
/// checked as every output directory is, and, when `path` lies in the run's directory,
/// records it in the run's manifest.
///
/// # Errors
/// The write, or the manifest update (another ferry writing the directory; the file is removed
/// again then).
pub(crate) fn write_output(run: &OpenedRun, path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let w = output::write_bytes_atomic(path, bytes)?;
    record(run, path, w)
}

/// Records `path` (already written) in the run's manifest, when it lies in the run's directory.
/// A file that cannot be recorded is removed again: a file under one of ferry's names that no
/// manifest lists would make the next `ferry run --out DIR` refuse the directory.
///
/// # Errors
/// The manifest update.
pub(crate) fn record(run: &OpenedRun, path: &Path, w: Written) -> anyhow::Result<()> {
    if let Err(e) = run.record_output(path, w) {
        if let Ok((dir, name)) = output::parent_dir(path) {
            let _ = dir.remove_file(&name);
        }
        return Err(anyhow::Error::new(e)
            .context(format!("recording {} in the run's manifest", path.display())));
    }
    Ok(())
}
