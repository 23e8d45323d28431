//! `ferry` — run device programs on the simulated chip, benchmark ferry, and read its outputs.
//!
//! ```text
//! ferry run                                    # the three examples end to end, DFX off
//! ferry run --example storm --swimlane 4 --pmu 2 --dep-gen --dump-args 3 --scope-stats --out D
//! ferry trace D                                # Perfetto and Chrome traces from D's files
//! ferry bench dfx --json                       # figures as ratios against a same-run baseline
//! ```
//! `ferry --help` and `ferry <command> --help` document every option.
#![forbid(unsafe_code)]

mod analysis;
mod bench;
mod bench_dfx;
mod bench_launch;
mod bench_view;
mod cli_reference;
mod deps;
mod device_opts;
mod diagnose;
mod diff;
mod dump;
mod figures;
mod info;
mod info_extents;
mod kernel_fault;
mod kernels;
mod kernels_new;
mod outdir;
mod report;
mod run;
mod scopes;
mod stdout;
#[cfg(test)]
mod testdir;
mod trace;
mod view;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// ferry: a host↔accelerator runtime on a simulated chip.
#[derive(Debug, Parser)]
#[command(name = "ferry", version, about, long_about = None)]
struct Cli {
    /// Log filter (tracing env-filter syntax), e.g. `info` or `ferry_sim=debug`.
    #[arg(long, global = true, env = "FERRY_LOG", default_value = "warn")]
    log: String,
    /// Write output files past 1 MiB with direct I/O (full 1 MiB blocks straight to the disk,
    /// not through the page cache; the filesystem's refusal falls back to the cache). `off`
    /// sends every byte through the page cache.
    #[arg(
        long,
        global = true,
        env = "FERRY_DIRECT_IO",
        default_value = "on",
        value_name = "on|off",
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    direct_io: bool,
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
    /// Write the Perfetto protobuf trace and the Chrome JSON trace of a run's DFX files.
    Trace(trace::TraceArgs),
    /// Write one self-contained HTML swimlane of a run.
    View(view::ViewArgs),
    /// Per-kernel time, core utilisation, PMU sums, stalls, loss and the critical paths of a run.
    Report(report::ReportArgs),
    /// Compare two runs: wall, tasks, per-kernel time (the biggest regression first), critical
    /// paths, stalls, loss.
    Diff(diff::DiffArgs),
    /// The dependency graph of a run (deps.json).
    Deps(deps::DepsArgs),
    /// List, filter and export a run's argument dump.
    Dump(dump::DumpArgs),
    /// Write a self-contained HTML plot of a run's scope occupancy.
    Scopes(scopes::ScopesArgs),
    /// Read device state back and explain it (`handshake`: the readback that diagnoses the Path B hang (docs/design/launch.md)).
    Diagnose(diagnose::DiagnoseArgs),
    /// Workload files: `check FILE` validates one (line-numbered errors); run one with
    /// `ferry run --workload FILE`.
    Workload(run::workload::WorkloadArgs),
    /// Custom kernel libraries: `new NAME` scaffolds one (load it with `ferry run --kernels`).
    Kernels(kernels_new::KernelsArgs),
    /// Render the figures page (`docs/figures.md`) from `ferry bench all --json` outputs.
    Figures(figures::FiguresArgs),
    /// Print the command-line reference (`docs/cli.md`) as markdown.
    #[command(hide = true)]
    CliReference,
}

/// Runs the command; an error caused by a closed stdout pipe (`ferry dump D | head -1`) ends
/// quietly with exit 0, as coreutils do; any other is printed, exit 1.
fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if stdout::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&cli.log)
                .with_context(|| format!("--log / FERRY_LOG `{}`", cli.log))?,
        )
        .with_writer(std::io::stderr)
        .init();
    ferry_profile::set_direct_io(cli.direct_io);
    match cli.command {
        Command::Run(a) => {
            outdir::handle_signals()?;
            run::run(&a)
        }
        Command::Info(a) => info::run(&a),
        Command::Bench(a) => bench::run(&a),
        Command::Trace(a) => trace::run(&a),
        Command::View(a) => view::run(&a),
        Command::Report(a) => report::run(&a),
        Command::Diff(a) => diff::run(&a),
        Command::Deps(a) => deps::run(&a),
        Command::Dump(a) => dump::run(&a),
        Command::Scopes(a) => scopes::run(&a),
        Command::Diagnose(a) => diagnose::run(&a),
        Command::Workload(a) => run::workload::workload_command(&a),
        Command::Kernels(a) => kernels_new::run(&a),
        Command::Figures(a) => figures::run(&a),
        Command::CliReference => {
            use clap::CommandFactory;
            Ok(stdout::outln!("{}", cli_reference::render(&mut Cli::command()).trim_end())?)
        }
    }
}
