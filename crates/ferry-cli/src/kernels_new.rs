//! `ferry kernels new NAME`: scaffolds a custom kernel library outside ferry's workspace
//! ([`ferry_job::scaffold`]): a Rust crate, or with `--lang c` a C library built by `make`.
use clap::{Args, Subcommand, ValueEnum};
use ferry_job::scaffold;
use std::path::PathBuf;

/// `ferry kernels ...`.
#[derive(Debug, Args)]
pub(crate) struct KernelsArgs {
    #[command(subcommand)]
    command: KernelsCommand,
}

/// The language of a scaffolded library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Lang {
    /// A Rust crate over `ferry-kernel-abi`, built by cargo.
    Rust,
    /// C with the ABI's header `ferry_kernel.h`, built by the system C compiler and `make`.
    C,
}

#[derive(Debug, Subcommand)]
enum KernelsCommand {
    /// Create a kernel library (two example kernels, a workload that runs them and a README):
    /// a Rust crate (build it with `cargo build --release`, load
    /// `target/release/lib<NAME>.so`) or, with `--lang c`, C sources and a Makefile (build it
    /// with `make`, load `lib<NAME>.so`), loaded with `ferry run --kernels`.
    New {
        /// Package and library name: 1..=31 bytes of ASCII letters, digits, `-` and `_`,
        /// starting with a letter (`-` becomes `_` in the built file's name).
        name: String,
        /// Directory to create (default: `./NAME`); it must not exist or be empty.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The library's language: `rust` (a cdylib crate) or `c` (a C source, the ABI's
        /// header and a Makefile; no Rust needed).
        #[arg(long, value_enum, default_value = "rust")]
        lang: Lang,
        /// The `ferry-kernel-abi` crate directory a Rust library depends on by path (default:
        /// the one of the ferry checkout this binary was built from). Not for `--lang c`,
        /// which carries the header this binary was built with.
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
        KernelsCommand::New { name, dir, lang, kernel_abi, orchestration } => {
            let dir = dir.clone().unwrap_or_else(|| PathBuf::from(name));
            let lib = scaffold::lib_name(name);
            if *orchestration {
                if *lang == Lang::C {
                    anyhow::bail!(
                        "--orchestration scaffolds a Rust library; for one in C or C++, start \
                         from examples/decode-cpp, over ferry_orchestration.h \
                         (docs/orchestration.md, \"In C or C++\")"
                    );
                }
                let abi =
                    kernel_abi.clone().unwrap_or_else(|| PathBuf::from(scaffold::CHECKOUT_ABI));
                let files = scaffold::orchestration_library(name, &abi)?;
                scaffold::write_new(&dir, &files)?;
                return crate::stdout::outln!(
                    "created orchestration library `{name}` in {}: cd there, `cargo build \
                     --release`, then `ferry run --orchestration target/release/lib{lib}.so \
                     --workload workload.toml`",
                    dir.display(),
                );
            }
            let (files, build, so) = match lang {
                Lang::Rust => {
                    let abi =
                        kernel_abi.clone().unwrap_or_else(|| PathBuf::from(scaffold::CHECKOUT_ABI));
                    let files = scaffold::kernel_library(name, &abi)?;
                    (files, "cargo build --release", format!("target/release/lib{lib}.so"))
                }
                Lang::C => {
                    if kernel_abi.is_some() {
                        anyhow::bail!(
                            "--kernel-abi is for a Rust library; a C library carries the \
                             header ferry_kernel.h of this ferry"
                        );
                    }
                    (scaffold::c_kernel_library(name)?, "make", format!("lib{lib}.so"))
                }
            };
            scaffold::write_new(&dir, &files)?;
            crate::stdout::outln!(
                "created kernel library `{name}` in {}: cd there, `{build}`, then \
                 `ferry run --kernels {so} --workload workload.toml`",
                dir.display()
            )
        }
    }
}
