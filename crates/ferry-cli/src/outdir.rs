//! `ferry run`'s output directory: claimed before the chip starts, every file recorded in the
//! run's manifest, and cleaned up when a signal stops the run.
//!
//! The rules are [`ferry_profile::OutDir`]'s (see the README's "Output directories"): a run
//! refuses a directory that is not one, cannot be written, is being written by another ferry,
//! or holds files under ferry's names that no manifest there lists, and a directory holding a
//! complete earlier run unless `--force`; it removes the earlier run's files just before writing
//! its own, and writes the manifest last, with how the run ended.
//!
//! SIGINT and SIGTERM stop a run: the handler removes this process's temp files in the output
//! directory and its device directories, and exits with 130 / 143 (128 + the signal). Files
//! already under their final names are complete (every file is written through a temp file
//! and a rename); the manifest still says the run did not finish, so readers refuse the
//! directory and the next run into it removes what this one wrote. A run killed outright
//! (SIGKILL) leaves its temp files and device directory to the next run's claim and start.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use anyhow::Context;
use ferry_profile::{
    self as output, OutDir, RunOutcome, Written, ARGS_BIN_FILE, ARGS_DIR, ARGS_FILE, CHROME_FILE,
    DEPS_FILE, PERFETTO_FILE, PMU_FILE, PMU_LOSS_FILE, SCOPES_DIR, SCOPES_FILE, SWIMLANE_FILE,
};
use ferry_runtime::examples::Example;

/// File name of the run summary.
pub(crate) const SUMMARY_FILE: &str = "summary.json";

/// Every file a run (or an analysis command writing into a run's directory) may put in a run's
/// directory: what a claim checks for foreign files, and what a run plans.
pub(crate) fn ferry_names() -> Vec<String> {
    let dfx = [
        SWIMLANE_FILE.to_string(),
        PMU_FILE.into(),
        PMU_LOSS_FILE.into(),
        DEPS_FILE.into(),
        format!("{ARGS_DIR}/{ARGS_BIN_FILE}"),
        format!("{ARGS_DIR}/{ARGS_FILE}"),
        format!("{SCOPES_DIR}/{SCOPES_FILE}"),
        format!("{SCOPES_DIR}/{}", crate::scopes::SCOPES_HTML),
        PERFETTO_FILE.into(),
        CHROME_FILE.into(),
        crate::view::VIEW_FILE.into(),
    ];
    let mut v = vec![SUMMARY_FILE.to_string()];
    for ex in Example::ALL {
        v.push(format!("{}.f32", ex.name()));
    }
    v.extend(dfx.iter().cloned());
    for ex in Example::ALL {
        v.extend(dfx.iter().map(|f| format!("{}/{f}", ex.name())));
    }
    v
}

/// The directory cleaned up when a signal stops this process.
fn signal_dir() -> &'static Mutex<Option<PathBuf>> {
    static DIR: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();
    DIR.get_or_init(|| Mutex::new(None))
}

/// A run's output directory (see the [module docs](self)).
pub(crate) struct RunDir {
    out: OutDir,
    arch: String,
}

impl RunDir {
    /// Claims `dir` before the chip starts, for a run on `arch`.
    ///
    /// # Errors
    /// The directory cannot be a run's ([`ferry_profile::ManifestError`], with context).
    pub(crate) fn claim(dir: &Path, arch: &str, force: bool) -> anyhow::Result<RunDir> {
        let out = OutDir::claim(dir, &ferry_names())
            .and_then(|o| if force { Ok(o) } else { o.refuse_overwrite() })
            .with_context(|| format!("--out {}", dir.display()))?;
        *signal_dir().lock().unwrap_or_else(|p| p.into_inner()) = Some(dir.to_path_buf());
        Ok(RunDir { out, arch: arch.to_string() })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        self.out.path()
    }

    /// Called before each write: the first one removes the earlier run's files and marks the
    /// directory as being written.
    pub(crate) fn begin(&mut self) -> anyhow::Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let run_id = format!("{now}-{}", std::process::id());
        let command: Vec<String> = std::env::args().collect();
        self.out.begin(&run_id, &command, &self.arch, &ferry_names())?;
        Ok(())
    }

    /// The claim, begun ([`RunDir::begin`]): what the library writes a profile into.
    pub(crate) fn begun(&mut self) -> anyhow::Result<&mut OutDir> {
        self.begin()?;
        Ok(&mut self.out)
    }

    /// Records a file written under the directory.
    pub(crate) fn record(&mut self, path: &Path, w: Written) -> anyhow::Result<()> {
        let rel = self
            .out
            .relative(path)
            .with_context(|| format!("{} is outside {}", path.display(), self.path().display()))?;
        self.out.record(&rel, w);
        Ok(())
    }

    /// Writes `bytes` as `name` in the directory and records it.
    pub(crate) fn write(&mut self, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
        self.begin()?;
        let path = self.path().join(name);
        let w = output::write_bytes_atomic(&path, bytes)?;
        self.record(&path, w)
    }

    /// Writes the manifest with how the run ended: the run's output is complete.
    pub(crate) fn commit(mut self, outcome: RunOutcome) -> anyhow::Result<()> {
        self.begin()?;
        self.out.commit_as(outcome)?;
        *signal_dir().lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
    }
}

/// The `tracing` target of the line that says the signal handling is installed (at debug
/// level): a supervisor that must not signal a run before then waits for it
/// (`--log warn,ferry::signals=debug`).
pub(crate) const SIGNALS_TARGET: &str = "ferry::signals";

/// Installs the SIGINT/SIGTERM handling of the [module docs](self): a thread that waits for
/// either signal, cleans up and exits.
///
/// # Errors
/// The handler could not be registered.
pub(crate) fn handle_signals() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).context("installing signals")?;
    std::thread::Builder::new().name("ferry-signals".into()).spawn(move || {
        if let Some(sig) = signals.forever().next() {
            // No write starts a temp file from here on, and those in progress lose theirs.
            output::halt_writes();
            let dir = signal_dir().lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(d) = &dir {
                output::remove_own_temps(d);
            }
            ferry_sim::device_root::remove_own(&ferry_sim::device_root::user_root());
            let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
            match dir {
                Some(d) => eprintln!(
                    "ferry: stopped by {name}; {} holds no complete run (the next run into it \
                     removes what this one wrote)",
                    d.display()
                ),
                None => eprintln!("ferry: stopped by {name}"),
            }
            std::process::exit(128 + sig);
        }
    })?;
    tracing::debug!(target: SIGNALS_TARGET, "SIGINT and SIGTERM handling installed");
    Ok(())
}
