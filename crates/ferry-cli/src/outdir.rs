//! `ferry run`'s output directory when a signal stops the run.
//!
//! The directory is a [`ferry_profile::RunDir`]: claimed before the chip starts, every file
//! recorded in the run's manifest, by the rules of [`ferry_profile::OutDir`] (see the README's
//! "Output directories"): a run refuses a directory that is not one, cannot be written, is
//! being written by another ferry, or holds files under ferry's names that no manifest there
//! lists, and a directory holding a complete earlier run unless `--force`; it removes the
//! earlier run's files just before writing its own, and writes the manifest last, with how the
//! run ended.
//!
//! SIGINT and SIGTERM stop a run: the handler writes the run's end record (the signal, and per
//! core the task that started and never ended: `ferry_runtime::host::crash`), removes this
//! process's temp files in the output directory and its device directories, and exits with
//! 130 / 143 (128 + the signal). Files already under their final names are complete (every
//! file is written through a temp file and a rename), and so is every chunk the native profile
//! sealed; the manifest still says the run did not finish, so `ferry report` reads the
//! directory as interrupted and the next run into it removes what this one wrote. A run killed
//! outright (SIGKILL) leaves its temp files and device directory to the next run's claim and
//! start, and an empty end record.

use anyhow::Context;
use ferry_profile as output;

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
            // The end record first, while the cores still show what they run (it prints the
            // cause and where to read the profile); `false` outside a run's graphs.
            let recorded = ferry_runtime::host::crash::end_by_signal(sig);
            // No write starts a temp file from here on, and those in progress lose theirs.
            output::halt_writes();
            let dirs = output::writing_run_dirs();
            for d in &dirs {
                output::remove_own_temps(d);
            }
            ferry_sim::device_root::remove_own(&ferry_sim::device_root::user_root());
            let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
            match dirs.first() {
                Some(d) if recorded => eprintln!(
                    "ferry: stopped by {name}; {} holds what the run sealed (`ferry report` \
                     reads it; the next run into it removes it)",
                    d.display()
                ),
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
