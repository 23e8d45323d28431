//! `ferry kernels new NAME`: scaffolds a custom kernel library crate outside ferry's workspace
//! ([`ferry_job::scaffold`]).
use clap::{Args, Subcommand};
use ferry_job::scaffold;
use std::path::PathBuf;

/// `ferry kernels ...`.
#[derive(Debug, Args)]
pub(crate) struct KernelsArgs {
    #[command(subcommand)]
    command: KernelsCommand,
}

#[derive(Debug, Subcommand)]
enum KernelsCommand {
    /// Create a kernel library crate (a cdylib with two example kernels, a workload that runs
    /// them and a README): build it with `cargo build --release`, load it with
    /// `ferry run --kernels target/release/lib<NAME>.so`.
    New {
        /// Package and library name: 1..=31 bytes of ASCII letters, digits, `-` and `_`,
        /// starting with a letter (`-` becomes `_` in the built file's name).
        name: String,
        /// Directory to create (default: `./NAME`); it must not exist or be empty.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The `ferry-kernel-abi` crate directory the library depends on by path (default:
        /// the one of the ferry checkout this binary was built from).
        #[arg(long, value_name = "DIR")]
        kernel_abi: Option<PathBuf>,
        /// Create an orchestration library instead (a cdylib with an orchestration function
        /// that reads a device tensor to decide its tasks, and a workload that runs it): load it
        /// with `ferry run --orchestration target/release/lib<NAME>.so`.
        #[arg(long)]
        orchestration: bool,
    },
}

pub(crate) fn run(a: &KernelsArgs) -> anyhow::Result<()> {
    match &a.command {
        KernelsCommand::New { name, dir, kernel_abi, orchestration } => {
            let dir = dir.clone().unwrap_or_else(|| PathBuf::from(name));
            let abi = kernel_abi.clone().unwrap_or_else(|| PathBuf::from(scaffold::CHECKOUT_ABI));
            if *orchestration {
                let files = scaffold::orchestration_library(name, &abi)?;
                scaffold::write_new(&dir, &files)?;
                return crate::stdout::outln!(
                    "created orchestration library `{name}` in {}: cd there, `cargo build \
                     --release`, then `ferry run --orchestration target/release/lib{}.so \
                     --workload workload.toml`",
                    dir.display(),
                    scaffold::lib_name(name)
                );
            }
            let files = scaffold::kernel_library(name, &abi)?;
            scaffold::write_new(&dir, &files)?;
            crate::stdout::outln!(
                "created kernel library `{name}` in {}: cd there, `cargo build --release`, then \
                 `ferry run --kernels target/release/lib{}.so --workload workload.toml`",
                dir.display(),
                scaffold::lib_name(name)
            )
        }
    }
}
