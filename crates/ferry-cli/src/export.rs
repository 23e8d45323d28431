//! `ferry export DIR -o OUT`: the original runtime's files of a finished run, written from its
//! native profile (`profile.ferry`) alone into another output directory.
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use ferry_profile::{ManifestError, RunDir, RunOutcome, WriteOptions};
use ferry_runtime::host::profile::{export_recording, run_dir_names, ProfileTarget};

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// Output directory of a finished run (its native profile, `profile.ferry`, checked against
    /// the run's manifest).
    dir: PathBuf,
    /// The output directory to write the original formats into (claimed as `ferry run --out`
    /// claims one).
    #[arg(short, long, value_name = "OUT")]
    out: PathBuf,
    /// Replace a complete earlier run in OUT.
    #[arg(long)]
    force: bool,
}

pub(crate) fn run(a: &ExportArgs) -> anyhow::Result<()> {
    // Checked against the manifest that covers it (the run's, or for an example's directory in
    // a run of several, the run's above it); a run that did not finish is refused.
    let native = ferry_profile::read_native(&a.dir)?;
    let Some(m) = native.manifest else {
        anyhow::bail!(ManifestError::Missing(a.dir.clone()));
    };
    let rec = native.recording;
    let command: Vec<String> = std::env::args().collect();
    let mut rd = RunDir::claim(&a.out, &m.arch, &command, &run_dir_names(), a.force)?;
    let write = WriteOptions { files: true, traces: true, chrome: false, progress: None };
    let target = ProfileTarget::in_run_dir(&mut rd, None, "run", write)?;
    let written = export_recording(&rec, target)
        .with_context(|| format!("exporting the native profile of {}", a.dir.display()))?;
    rd.commit(m.outcome.clone().unwrap_or(RunOutcome::Ok))?;
    crate::stdout::outln!(
        "wrote {} files ({} bytes) of {} to {}",
        written.report.files.len(),
        written.report.bytes,
        a.dir.display(),
        a.out.display()
    )?;
    Ok(())
}
