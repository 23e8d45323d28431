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
    /// copy: run the server emulator (without and with Prewarm) instead of the gather bench.
    #[arg(long)]
    emulate_server: bool,
    /// copy: the full sizes (8192 fragments of every size; 8192-range batches on 4
    /// devices) instead of the scaled-down defaults.
    #[arg(long)]
    full: bool,
    /// all: write the JSON object here instead of standard output.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    out: Option<std::path::PathBuf>,
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
    /// The task runtime: storm tasks/s and per-task dispatch overhead vs direct kernel calls.
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
    match a.area {
        Area::All => all(a)?,
        Area::Launch => launch(a)?,
        Area::Copy => copy(a)?,
        Area::Runtime => runtime(a)?,
        Area::Dfx => dfx(a)?,
        Area::Sim => sim(a)?,
        Area::View => crate::bench_view::run(a.json, a.quick)?,
    }
    Ok(())
}

fn all(a: &BenchArgs) -> anyhow::Result<()> {
    let v = crate::figures::bench_all(a.quick)?;
    if !a.json {
        let page = crate::figures::render_one(&v);
        crate::stdout::outln!("{}", page.trim_end())?;
        return Ok(());
    }
    let text = serde_json::to_string_pretty(&v)?;
    match &a.out {
        Some(p) => {
            ferry_profile::write_bytes_atomic(p, (text + "\n").as_bytes())?;
            Ok(())
        }
        None => Ok(crate::stdout::outln!("{text}")?),
    }
}

fn sim(a: &BenchArgs) -> anyhow::Result<()> {
    let mut cfg = ferry_bench::sim::SimBenchConfig::default();
    let mut contention = ferry_bench::contention::ContentionConfig::default();
    if a.quick {
        cfg.idle_window = std::time::Duration::from_millis(200);
        cfg.round_trips = 2_000;
        contention.rounds = 2;
        contention.tasks = 10_000;
    }
    let r = ferry_bench::sim::run(&cfg)?;
    // indicatif draws to stderr and hides itself where stderr is not a terminal.
    let bar = indicatif::ProgressBar::new(u64::from(contention.rounds));
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "contention rounds [{bar:30}] {pos}/{len} (each: alone, 1 busy loop, 1 per CPU)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let c = ferry_bench::contention::run_with(&contention, |i| bar.set_position(u64::from(i)))?;
    bar.finish_and_clear();
    if a.json {
        let sim = r.to_json();
        let sim = sim.strip_suffix('}').unwrap_or(&sim);
        crate::stdout::outln!("{sim},\"contention\":{}}}", c.to_json())?;
        return Ok(());
    }
    crate::stdout::outln!(
        "simulated a2a3 chip: {} AICPU + {} AICore threads",
        r.aicpu_threads,
        r.aicore_threads
    )?;
    crate::stdout::outln!(
        "  idle, threads parked:          {:.3}% of one core",
        r.idle_parked_cpu * 100.0
    )?;
    crate::stdout::outln!(
        "  idle, cores awaiting dispatch: {:.3}% of one core (goal < 2%)",
        r.idle_waiting_cpu * 100.0
    )?;
    crate::stdout::outln!(
        "  handshake round trip: {:.0} ns (mpsc ping-pong baseline {:.0} ns, ratio {:.2})",
        r.handshake_rtt_ns,
        r.baseline_rtt_ns,
        r.handshake_rtt_ns / r.baseline_rtt_ns
    )?;
    crate::stdout::outln!(
        "storm of {} tasks beside busy loops (sh -c 'while :; do :; done', nice 0), {} CPUs, medians of {} interleaved rounds:",
        c.tasks,
        c.cpus,
        c.rounds
    )?;
    for b in [&c.alone, &c.beside_one, &c.beside_all] {
        crate::stdout::outln!(
            "  {} busy loop(s): {:>8.1} ms wall ({:.2}x alone), {:>6.1} ms CPU, {} long yields",
            b.loops,
            b.wall_s * 1e3,
            b.wall_ratio,
            b.cpu_s * 1e3,
            b.long_yields
        )?;
    }
    crate::stdout::outln!("  alone: {:.0} tasks/s", c.alone_tasks_per_s())?;
    Ok(())
}

fn launch(a: &BenchArgs) -> anyhow::Result<()> {
    let mut cfg = ferry_bench::launch::LaunchBenchConfig::default();
    if a.quick {
        cfg.iterations = 200;
    }
    let r = ferry_bench::launch::run(&cfg)?;
    let series = crate::bench_launch::runtime_series(a.quick)?;
    if a.json {
        crate::stdout::outln!("{}", crate::bench_launch::json(&r.to_json(), &series))?;
    } else {
        crate::stdout::outln!(
            "launch transaction ({:?}, {}-byte descriptor prefix, {} runs per series)",
            cfg.arch,
            cfg.descriptor_bytes,
            cfg.iterations
        )?;
        crate::stdout::outln!(
            "  changed prefix:   {:>8.0} ns per prepare+publish+launch, {} bytes copied",
            r.changed_ns_per_run,
            r.changed_bytes_per_run
        )?;
        crate::stdout::outln!(
            "  unchanged prefix: {:>8.0} ns per prepare+publish+launch, {} bytes copied",
            r.unchanged_ns_per_run,
            r.unchanged_bytes_per_run
        )?;
        crate::stdout::outln!(
            "  time ratio changed/unchanged: {:.2}",
            r.changed_ns_per_run / r.unchanged_ns_per_run
        )?;
        crate::bench_launch::print(&series)?;
    }
    Ok(())
}

fn copy(a: &BenchArgs) -> anyhow::Result<()> {
    use ferry_bench::{copy as bench, copy_server as emulator};
    if a.emulate_server {
        let mut cfg = match (a.full, a.quick) {
            (true, _) => emulator::EmulatorConfig::full(),
            (false, true) => emulator::EmulatorConfig { calls: 2, rounds: 1, ..Default::default() },
            (false, false) => emulator::EmulatorConfig::default(),
        };
        // The "with prewarm" leg uses the server's knob, as the server would: a bad value is
        // logged and the default kept; 0 would turn the leg into a second lazy run, so it keeps
        // the default too and says so.
        match ferry_copy::env::CopyKnobs::from_env().prewarm_streams {
            0 => tracing::warn!(
                "UMBP_HBM_GATHER_PREWARM_STREAMS=0 disables prewarm; the emulator's prewarm leg keeps {}",
                cfg.prewarm_streams
            ),
            n => cfg.prewarm_streams = n,
        }
        let r = emulator::run(&cfg)?;
        if a.json {
            crate::stdout::outln!("{}", r.to_json())?;
            return Ok(());
        }
        crate::stdout::outln!(
            "server emulator: {} devices, {} threads x {} calls, {} ranges of {} B, stall cost model {}, {} interleaved rounds (medians)",
            cfg.devices,
            cfg.threads,
            cfg.calls,
            cfg.ranges,
            cfg.page_bytes,
            if cfg.cost.enabled { "on (docs/design/copy-pool.md / 1000)" } else { "off" },
            r.rounds.len()
        )?;
        crate::stdout::outln!("  {:<34} {:>14} {:>14}", "", "without", "with prewarm")?;
        let (w, p) = (&r.without_prewarm, &r.with_prewarm);
        let ms = |d: std::time::Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
        let rows = [
            ("max call", ms(w.max_call), ms(p.max_call)),
            ("p99 call", ms(w.p99_call), ms(p.p99_call)),
            ("mean call", ms(w.mean_call), ms(p.mean_call)),
            (
                "queues created after start",
                w.queues_created_after_start.to_string(),
                p.queues_created_after_start.to_string(),
            ),
            (
                "streams created after start",
                w.streams_created_after_start.to_string(),
                p.streams_created_after_start.to_string(),
            ),
            (
                "MiB/s",
                format!("{:.0}", w.bytes_per_sec() / (1u64 << 20) as f64),
                format!("{:.0}", p.bytes_per_sec() / (1u64 << 20) as f64),
            ),
            ("prewarm", ms(w.prewarm), ms(p.prewarm)),
            ("failed items", w.failed_items.to_string(), p.failed_items.to_string()),
            ("bytes verified", format!("{:?}", w.verified), format!("{:?}", p.verified)),
        ];
        for (name, x, y) in rows {
            crate::stdout::outln!("  {name:<34} {x:>14} {y:>14}")?;
        }
        crate::stdout::outln!(
            "  freeze ratio (max call with / without): {:.3} (docs/design/copy-pool.md: 5 s / 342 s = 0.015)",
            r.freeze_ratio()
        )?;
        return Ok(());
    }
    let cfg = match (a.full, a.quick) {
        (true, _) => bench::BenchConfig::full(),
        (false, true) => bench::BenchConfig::quick(),
        (false, false) => bench::BenchConfig::default(),
    };
    let r = bench::run(&cfg)?;
    if a.json {
        crate::stdout::outln!("{}", r.to_json())?;
        return Ok(());
    }
    crate::stdout::outln!(
        "host-to-device, medians of {} interleaved rounds (simulated device; compare the columns)",
        cfg.repeats
    )?;
    for row in &r.rows {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        crate::stdout::outln!(
            "  {:>5} x {:>4} KiB: engine ({}) {:>8.2} ms, per-fragment {:>8.2} ms, contiguous {:>8.2} ms",
            row.fragments,
            row.fragment_bytes >> 10,
            row.engine_path,
            ms(row.engine),
            ms(row.per_fragment),
            ms(row.contiguous)
        )?;
    }
    crate::stdout::outln!(
        "  planning: {:.1} ns per item ({} scattered items)",
        r.plan_ns_per_item,
        r.plan_items
    )?;
    Ok(())
}

fn runtime(a: &BenchArgs) -> anyhow::Result<()> {
    let mut cfg = ferry_bench::runtime::BenchConfig::default();
    if a.quick {
        cfg.tasks = 5_000;
    }
    let r = ferry_bench::runtime::run(&cfg)?;
    if a.json {
        crate::stdout::outln!("{}", r.to_json())?;
    } else {
        crate::stdout::outln!(
            "task runtime on a simulated {} chip: {} AICPU threads, {} cores, storm of {} tasks",
            r.arch,
            r.aicpu_threads,
            r.cores,
            r.tasks
        )?;
        crate::stdout::outln!(
            "  device-orchestrated: {:.0} tasks/s ({:.0} ns/task)",
            r.tasks_per_s(),
            r.ns_per_task()
        )?;
        crate::stdout::outln!(
            "  host-built graph:    {:.0} tasks/s (prepare {:.1} ms)",
            r.tasks as f64 / r.host_graph_wall_s,
            r.host_graph_prepare_s * 1e3
        )?;
        crate::stdout::outln!(
            "  direct kernel call baseline {:.0} ns/task; dispatch overhead {:.0} ns/task",
            r.baseline_ns_per_task,
            r.dispatch_overhead_ns()
        )?;
    }
    Ok(())
}

fn dfx(a: &BenchArgs) -> anyhow::Result<()> {
    crate::bench_dfx::run(a.quick, a.json)
}
