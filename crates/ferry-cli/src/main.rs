//! `ferry` — run device programs on the simulated chip, benchmark ferry, and read its outputs.
#![forbid(unsafe_code)]

mod bench;
mod info;
mod run;

use clap::{Parser, Subcommand};

/// ferry: a host↔accelerator runtime on a simulated chip.
#[derive(Debug, Parser)]
#[command(name = "ferry", version, about, long_about = None)]
struct Cli {
    /// Log filter (tracing env-filter syntax), e.g. `info` or `ferry_sim=debug`.
    #[arg(long, global = true, env = "FERRY_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The main job: run example workloads end to end on a simulated chip, verify them against
    /// host references, and print a summary.
    Run(run::RunArgs),
    /// Print the arch profiles and the simulated device inventory.
    Info(info::InfoArgs),
    /// Measure one area of ferry and print its figures (ratios against a same-run baseline).
    Bench(bench::BenchArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&cli.log)?)
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Run(a) => run::run(&a),
        Command::Info(a) => info::run(&a),
        Command::Bench(a) => bench::run(&a),
    }
}
