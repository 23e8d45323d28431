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
mod cli_reference;
mod deps;
mod device_opts;
mod diagnose;
mod diff;
mod dump;
mod export;
mod info;
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
    #[arg(
        long,
        global = true,
        env = "FERRY_LOG",
        default_value = "warn",
        help_heading = "Global options"
    )]
    log: String,
    /// Write output files past 1 MiB with direct I/O (full 1 MiB blocks straight to the disk,
    /// not through the page cache; the filesystem's refusal falls back to the cache). `off`
    /// sends every byte through the page cache.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "FERRY_DIRECT_IO",
        default_value = "on",
        value_name = "on|off",
        action = clap::ArgAction::Set,
        value_parser = on_off,
        hide_possible_values = true,
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
    /// Write the original runtime's files of a finished run from its native profile
    /// (`profile.ferry`) into another output directory.
    Export(export::ExportArgs),
    /// Read device state back and explain it (`handshake`: the readback that diagnoses the Path B hang (docs/design/launch.md)).
    Diagnose(diagnose::DiagnoseArgs),
    /// Workload files: `check FILE` validates one (line-numbered errors); run one with
    /// `ferry run --workload FILE`.
    Workload(run::workload::WorkloadArgs),
    /// Custom kernel libraries: `new NAME` scaffolds one (load it with `ferry run --kernels`).
    Kernels(kernels_new::KernelsArgs),
    /// Render the figures page (`docs/figures.md`) from `ferry bench all --json` outputs.
    Figures(bench::FiguresArgs),
    /// Print the command-line reference (`docs/cli.md`) as markdown.
    #[command(hide = true)]
    CliReference,
}

/// Runs the command; an error caused by a closed stdout pipe (`ferry dump list D | head -1`) ends
/// quietly with exit 0, as coreutils do; any other is printed, exit 1.
fn main() -> ExitCode {
    let cli = Cli::parse();
    let debug = wants_backtrace(&cli.log, std::env::var_os("RUST_LIB_BACKTRACE").is_some());
    if !debug {
        // A user error is one line; RUST_BACKTRACE=1, set by many Rust developers, must not
        // make every error capture and print a backtrace.
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    let result = run(cli).and_then(|()| match analysis::skipped_inputs() {
        0 => Ok(()),
        n => Err(anyhow::anyhow!(
            "{} could not be read (the warnings above name {}); the output leaves {} out",
            if n == 1 { "an input file".to_string() } else { format!("{n} input files") },
            if n == 1 { "it" } else { "them" },
            if n == 1 { "it" } else { "them" },
        )),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if stdout::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {}", one_line(&e));
            if debug {
                eprintln!("\n{}", e.backtrace());
            }
            ExitCode::FAILURE
        }
    }
}

/// `--direct-io`'s value: `on` or `off` (`true`/`1`/`yes` and `false`/`0`/`no` too, any case).
fn on_off(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(format!("`{s}` is not on or off")),
    }
}

/// Whether an error prints its backtrace: only when asked for, with a debug log
/// (`FERRY_LOG=debug`, `--log debug`) or `RUST_LIB_BACKTRACE` set.
fn wants_backtrace(log: &str, lib_backtrace: bool) -> bool {
    lib_backtrace || log.contains("debug") || log.contains("trace")
}

/// `e`'s cause chain on one line, `outer: inner: ...`, each cause once: a cause whose message
/// the one before it already carries (`file: {source}`) is not repeated.
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let m = cause.to_string();
        if m.is_empty() || parts.last().is_some_and(|p| p.contains(&m)) {
            continue;
        }
        parts.push(m);
    }
    parts.join(": ")
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
        Command::Export(a) => export::run(&a),
        Command::Diagnose(a) => diagnose::run(&a),
        Command::Workload(a) => run::workload::workload_command(&a),
        Command::Kernels(a) => kernels_new::run(&a),
        Command::Figures(a) => bench::figures(&a),
        Command::CliReference => {
            use clap::CommandFactory;
            Ok(stdout::outln!("{}", cli_reference::render(&mut Cli::command()).trim_end())?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{one_line, wants_backtrace};

    #[test]
    fn an_error_is_one_line_with_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = ferry_profile::OutputError::Io { file: "deps.json".into(), source: io };
        let e = anyhow::Error::new(e).context("reading D");
        // The io error is already in the file's message: said once.
        assert_eq!(one_line(&e), "reading D: deps.json: no such file");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&e), "outer: inner");
    }

    #[test]
    fn the_backtrace_is_only_for_a_debug_log_or_rust_lib_backtrace() {
        assert!(!wants_backtrace("warn", false));
        assert!(!wants_backtrace("info,ferry::signals=warn", false));
        assert!(wants_backtrace("debug", false));
        assert!(wants_backtrace("warn,ferry_sim=trace", false));
        assert!(wants_backtrace("warn", true));
    }
}
