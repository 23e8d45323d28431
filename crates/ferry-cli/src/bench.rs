//! `ferry bench <area> [--json]` and `ferry figures`: their arguments and what they print; the
//! measurements, their reports and the figures page are `ferry_bench`'s.
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use ferry_bench::{all, copy, copy_server, dfx, figures, launch, runtime, sim, view, AreaReport};

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Which area to measure.
    area: Area,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Shorter measurement windows (for smoke runs).
    #[arg(long)]
    quick: bool,
    /// copy: run the server emulator (without and with Prewarm) instead of the gather bench.
    #[arg(long)]
    emulate_server: bool,
    /// copy: the full sizes (8192 fragments of every size; 8192-range batches on 4
    /// devices) instead of the scaled-down defaults.
    #[arg(long)]
    full: bool,
    /// all: write the JSON object here instead of standard output.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    out: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Area {
    /// The simulated chip: idle CPU cost, handshake round trip, and the storm's wall time beside
    /// busy loops (1 and one per CPU) as ratios of the storm alone.
    Sim,
    /// The launch transaction: host time per prepare+publish+launch, changed vs unchanged prefix.
    Launch,
    /// The copy engine: gather throughput vs contiguous copies, planning cost; or, with
    /// `--emulate-server`, the server emulator with and without Prewarm.
    Copy,
    /// The task runtime: storm tasks/s, per-task dispatch overhead vs direct kernel calls, and the
    /// yields that found the CPUs busy during each storm.
    Runtime,
    /// DFX: the transport's figures (hot path, switch, drain vs a streaming memcpy on both
    /// arches, polling and with the doorbell hint) and the all-five storm: in-run throughput and
    /// the whole `ferry run` command as ratios of DFX off, bytes per record and records/s of the
    /// write phase, the trace phase at 5,000 and 50,000 tasks, and each subsystem's cost.
    Dfx,
    /// The storm's `ferry view` page: its size and first frame in headless Chromium (needs
    /// Debian's chromium and tools/browser's playwright-core; see tools/README.md).
    View,
    /// Every area above but `view` (which needs a browser) in turn, each in a process of its own, as one JSON object with the date,
    /// the machine and the build (`--json`; without it, the headline figures as a table). The
    /// input of `ferry figures`.
    All,
}

pub(crate) fn run(a: &BenchArgs) -> anyhow::Result<()> {
    if a.out.is_some() && !matches!(a.area, Area::All) {
        anyhow::bail!(
            "-o/--out is only for `ferry bench all`; the other areas print to standard output"
        );
    }
    let exe = || std::env::current_exe().context("locating the ferry binary");
    let r: Box<dyn AreaReport> = match a.area {
        Area::All => return bench_all(a, &exe()?),
        Area::Sim => {
            let cfg = sim::SimAreaConfig::new(a.quick);
            // indicatif draws to stderr and hides itself where stderr is not a terminal.
            let bar = indicatif::ProgressBar::new(u64::from(cfg.contention.rounds));
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "contention rounds [{bar:30}] {pos}/{len} (each: alone, 1 busy loop, 1 per CPU)",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            let r = sim::measure(&cfg, |i| bar.set_position(u64::from(i)))?;
            bar.finish_and_clear();
            Box::new(r)
        }
        Area::Launch => Box::new(launch::measure(a.quick)?),
        Area::Copy if a.emulate_server => {
            Box::new(copy_server::run(&copy_server::config(a.quick, a.full))?)
        }
        Area::Copy => Box::new(copy::run(&copy::config(a.quick, a.full))?),
        Area::Runtime => Box::new(runtime::measure(a.quick)?),
        Area::Dfx => Box::new(dfx::measure(&exe()?, a.quick)?),
        Area::View => {
            let tools = view::tools_dir(Path::new(env!("CARGO_MANIFEST_DIR")));
            Box::new(view::measure(&exe()?, &tools, a.quick)?)
        }
    };
    Ok(crate::stdout::outln!("{}", if a.json { r.to_json() } else { r.to_text() })?)
}

fn bench_all(a: &BenchArgs, exe: &Path) -> anyhow::Result<()> {
    let v = all::bench_all(exe, a.quick, |line| eprintln!("{line}"))?;
    if !a.json {
        return Ok(crate::stdout::outln!("{}", figures::render_one(&v).trim_end())?);
    }
    let text = serde_json::to_string_pretty(&v)?;
    match &a.out {
        Some(p) => Ok(ferry_profile::write_bytes_atomic(p, (text + "\n").as_bytes()).map(drop)?),
        None => Ok(crate::stdout::outln!("{text}")?),
    }
}

/// `ferry figures`: render the figures page from `ferry bench all --json` outputs.
#[derive(Debug, Args)]
pub(crate) struct FiguresArgs {
    /// `ferry bench all --json` outputs, one per invocation (at least two for a figure to count
    /// as reproduced).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Write the page here instead of standard output.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    out: Option<PathBuf>,
}

pub(crate) fn figures(a: &FiguresArgs) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    for f in &a.files {
        // A regular file of at most 16 MiB (a bench output is a few KiB): a FIFO or a device
        // is refused before any read.
        runs.push(figures::invocation(f, &ferry_fs::read_input(f, 16 << 20)?)?);
    }
    let page = figures::render(&runs);
    match &a.out {
        // Through an unpredictable temp file beside it and a rename, its directory checked.
        Some(p) => Ok(ferry_profile::write_bytes_atomic(p, page.as_bytes()).map(drop)?),
        None => Ok(crate::stdout::outln!("{}", page.trim_end())?),
    }
}
