//! `ferry run --workload FILE` and `ferry workload check FILE`: a user's workload file, checked
//! and compiled by `ferry-workload`, run like an example (both variants, every DFX flag: the
//! name map and clock anchors are written for it) and verified as the file says.
use super::{Printer, RunArgs};
use clap::{Args, Subcommand};
use ferry_job::{Job, LoadedLibrary};
use std::path::{Path, PathBuf};

/// `ferry workload ...`.
#[derive(Debug, Args)]
pub(crate) struct WorkloadArgs {
    #[command(subcommand)]
    command: WorkloadCommand,
}

#[derive(Debug, Subcommand)]
enum WorkloadCommand {
    /// Parse, check and compile a workload file without running it: every error names its line
    /// (`file:line:col: message`); exit status 1 on the first one.
    Check {
        /// The workload file (TOML; format in docs/workloads.md).
        file: PathBuf,
        /// Check with the file's `[small]` parameter overrides.
        #[arg(long)]
        small: bool,
        /// Custom kernel libraries the workload names (as `ferry run --kernels`); loading them
        /// starts a simulated chip.
        #[arg(long = "kernels", value_name = "LIB.so", value_delimiter = ',')]
        kernels: Vec<PathBuf>,
    },
}

pub(crate) fn workload_command(a: &WorkloadArgs) -> anyhow::Result<()> {
    match &a.command {
        WorkloadCommand::Check { file, small, kernels } => {
            let checked = ferry_job::check_workload(file, kernels, *small)?;
            for (path, added) in &checked.loaded {
                crate::stdout::print(&LoadedLibrary { path, kernels: added }.to_string())?;
            }
            let wl = &checked.workload;
            crate::stdout::outln!(
                "{}: ok: workload `{}`, {} tensors, {} tasks, program of {} words",
                file.display(),
                wl.name(),
                wl.tensor_names().count(),
                wl.tasks(),
                wl.program().len()
            )?;
            Ok(())
        }
    }
}

pub(super) fn run(a: &RunArgs, file: &Path) -> anyhow::Result<()> {
    let printer = Printer::new(&a.dfx);
    let done = a.job(Job::workload(file))?.run_observed(&printer);
    let done = printer.outcome(done)?;
    crate::stdout::print(&done.table().to_string())?;
    printer.print_next_steps()
}
