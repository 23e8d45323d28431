//! `ferry bench <area> [--json]`: figures of one area, as ratios against a same-run baseline.
use clap::{Args, ValueEnum};

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
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Area {
    /// The simulated chip: idle CPU cost and handshake round trip.
    Sim,
    /// The launch transaction: host time per prepare+publish+launch, changed vs unchanged prefix.
    Launch,
}

pub(crate) fn run(a: &BenchArgs) -> anyhow::Result<()> {
    match a.area {
        Area::Launch => launch(a)?,
        Area::Sim => {
            let mut cfg = ferry_sim::bench::SimBenchConfig::default();
            if a.quick {
                cfg.idle_window = std::time::Duration::from_millis(200);
                cfg.round_trips = 2_000;
            }
            let r = ferry_sim::bench::run(&cfg)?;
            if a.json {
                println!("{}", r.to_json());
            } else {
                println!(
                    "simulated a2a3 chip: {} AICPU + {} AICore threads",
                    r.aicpu_threads, r.aicore_threads
                );
                println!(
                    "  idle, threads parked:          {:.3}% of one core",
                    r.idle_parked_cpu * 100.0
                );
                println!(
                    "  idle, cores awaiting dispatch: {:.3}% of one core (goal < 2%)",
                    r.idle_waiting_cpu * 100.0
                );
                println!(
                    "  handshake round trip: {:.0} ns (mpsc ping-pong baseline {:.0} ns, ratio {:.2})",
                    r.handshake_rtt_ns,
                    r.baseline_rtt_ns,
                    r.handshake_rtt_ns / r.baseline_rtt_ns
                );
            }
        }
    }
    Ok(())
}

fn launch(a: &BenchArgs) -> anyhow::Result<()> {
    let mut cfg = ferry_launch::bench::LaunchBenchConfig::default();
    if a.quick {
        cfg.iterations = 200;
    }
    let r = ferry_launch::bench::run(&cfg)?;
    if a.json {
        println!("{}", r.to_json());
    } else {
        println!(
            "launch transaction ({:?}, {}-byte descriptor prefix, {} runs per series)",
            cfg.arch, cfg.descriptor_bytes, cfg.iterations
        );
        println!(
            "  changed prefix:   {:>8.0} ns per prepare+publish+launch, {} bytes copied",
            r.changed_ns_per_run, r.changed_bytes_per_run
        );
        println!(
            "  unchanged prefix: {:>8.0} ns per prepare+publish+launch, {} bytes copied",
            r.unchanged_ns_per_run, r.unchanged_bytes_per_run
        );
        println!(
            "  time ratio changed/unchanged: {:.2}",
            r.changed_ns_per_run / r.unchanged_ns_per_run
        );
    }
    Ok(())
}
