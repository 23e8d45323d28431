//! The launch bench's runtime series (`ferry bench launch`, `cargo bench -p ferry-bench --bench
//! launch_series`): back-to-back runs of the vector example on the runtime's real descriptor,
//! one launch slot (serial) against N slots (pipelined, [`DeviceRunner::repeat`]).
//!
//! Both series run the same graph with the same arguments on runners built alike but for their
//! slot count, every run verified against the host reference. The figures are medians of
//! interleaved rounds (serial, pipelined, then pipelined, serial, …): on a shared 2-core machine
//! single runs swing 2-3x.
//!
//! What the pipeline must achieve is that the chip never waits for the host, so each series
//! also reports, from the device clock, the chip's idle time between consecutive runs (run k's
//! last completion boundary to run k+1's first stream operation, [`DeviceSpan::idle_before`])
//! as a fraction of the series' wall time, and its device-bound rate: 1 / the median device
//! execution of a run ([`DeviceSpan::execution`]), what back-to-back runs would reach if the
//! chip never idled. The descriptor figures come from the launch transaction's own
//! counters: `unchanged_bytes_per_run` over the identical runs of the pipelined series (0 once
//! every slot holds the graph's prefix), `changed_bytes_per_run` over a series whose callable
//! changes every run on every slot (the launch-route prefix, [`ROUTE_PREFIX_BYTES`]).
//!
//! # Examples
//! ```no_run
//! use ferry_bench::launch_series::{run, LaunchSeriesConfig};
//! let r = run(&LaunchSeriesConfig { runs: 20, rounds: 1, ..LaunchSeriesConfig::default() })?;
//! assert_eq!(r.unchanged_bytes_per_run, 0);
//! println!("{}", r.to_json());
//! # Ok::<(), ferry_bench::launch_series::SeriesError>(())
//! ```
use crate::median;
use ferry_runtime::error::{RunError, RunnerError};
use ferry_runtime::examples::{Example, ExampleRun, ExampleVerifyError, Size};
use ferry_runtime::host::{
    DeviceRunner, DeviceSpan, RepeatError, RunnerConfig, Variant, ROUTE_PREFIX_BYTES,
};
use ferry_sim::Arch;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaunchSeriesConfig {
    /// The chip both runners are built with (their slot counts are set by the bench).
    pub runner: RunnerConfig,
    /// Where the vector graph is built.
    pub variant: Variant,
    /// Size of the vector example.
    pub size: Size,
    /// Back-to-back runs per series.
    pub runs: u32,
    /// Interleaved rounds (each one serial and one pipelined series).
    pub rounds: u32,
    /// Launch slots of the pipelined runner (at least 2).
    pub pipelined_slots: u32,
}

impl Default for LaunchSeriesConfig {
    fn default() -> Self {
        LaunchSeriesConfig {
            runner: RunnerConfig::default_for(Arch::A2a3),
            variant: Variant::HostBuiltGraph,
            size: Size::Small,
            runs: 200,
            rounds: 9,
            pipelined_slots: 2,
        }
    }
}

/// Mean host time of each step of a serial run, microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SerialPhases {
    /// `prepare`: tensor uploads, host-built graph, layout, suffix upload, prefix snapshot.
    pub prepare_us: f64,
    /// `launch`: register reset, publication, both entries submitted.
    pub launch_us: f64,
    /// `finalize_run`: waiting for the device, retirement, result and output read-back, frees.
    pub finalize_us: f64,
    /// The device's execution as the host sees it (launch to both entries returned), a part
    /// of `finalize_us`.
    pub execute_us: f64,
    /// Checking the outputs against the host reference.
    pub check_us: f64,
}

/// Results.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchSeriesReport {
    /// The configuration measured.
    pub config: LaunchSeriesConfig,
    /// Median runs/s of the one-slot series.
    pub serial_runs_per_s: f64,
    /// Median runs/s of the N-slot series.
    pub pipelined_runs_per_s: f64,
    /// Runs/s of every serial round, in order.
    pub serial_rounds: Vec<f64>,
    /// Runs/s of every pipelined round, in order.
    pub pipelined_rounds: Vec<f64>,
    /// The serial series: the chip's idle time between consecutive runs over the series' wall
    /// time (median of the rounds).
    pub serial_idle_fraction: f64,
    /// The same for the pipelined series.
    pub pipelined_idle_fraction: f64,
    /// Every serial round's idle fraction, in order.
    pub serial_idle_rounds: Vec<f64>,
    /// Every pipelined round's idle fraction, in order.
    pub pipelined_idle_rounds: Vec<f64>,
    /// The serial series' device-bound rate: 1 / its median device execution per run (median
    /// of the rounds).
    pub serial_device_bound_runs_per_s: f64,
    /// The same for the pipelined series.
    pub pipelined_device_bound_runs_per_s: f64,
    /// The pipelined series: the runs' device execution summed over the series' wall time
    /// (median of the rounds). With the idle fraction near 0 it is near 1, and runs/s is then
    /// 1 / the *mean* device execution: below the device-bound rate by as much as slow runs
    /// pull the mean above the median.
    pub pipelined_busy_fraction: f64,
    /// Every pipelined round's runs/s over that round's own device-bound rate, in order: both
    /// from the same runs, so a round the machine slowed down counts against its own bound and
    /// not against another round's.
    pub pipelined_of_device_bound_rounds: Vec<f64>,
    /// The pipelined series: the mean device execution of a run over the median (median of the
    /// rounds): how far slow runs pull runs/s below the device-bound rate when the chip never
    /// idles.
    pub pipelined_exec_mean_over_median: f64,
    /// Descriptor bytes copied per identical run (pipelined series, warm slots).
    pub unchanged_bytes_per_run: u64,
    /// Descriptor bytes copied per run when the graph's prefix changes every run.
    pub changed_bytes_per_run: u64,
    /// Launch-metadata bytes copied per run (a5 host-built graph: its resident scheduler
    /// state; 0 elsewhere).
    pub metadata_bytes_per_run: u64,
    /// Entry forks per identical run.
    pub unchanged_forks_per_run: f64,
    /// Per-run suffix bytes uploaded at prepare (synchronous, not a stream copy).
    pub suffix_bytes_per_run: u64,
    /// Where a serial run's time goes (one extra serial pass).
    pub serial_phases: SerialPhases,
}

impl LaunchSeriesReport {
    /// `pipelined_runs_per_s / serial_runs_per_s`.
    pub fn speedup(&self) -> f64 {
        self.pipelined_runs_per_s / self.serial_runs_per_s
    }

    /// How close the pipeline comes to a chip that never waits: the median over the pipelined
    /// rounds of each round's runs/s over its own device-bound rate
    /// ([`pipelined_of_device_bound_rounds`](Self::pipelined_of_device_bound_rounds)).
    pub fn pipelined_of_device_bound(&self) -> f64 {
        median(&self.pipelined_of_device_bound_rounds)
    }

    /// One JSON object.
    pub fn to_json(&self) -> String {
        let list = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(",");
        let fractions =
            |v: &[f64]| v.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>().join(",");
        let ratios = |v: &[f64]| v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(",");
        let p = &self.serial_phases;
        format!(
            concat!(
                "{{\"series\":\"runtime\",\"example\":\"vector\",\"size\":\"{}\",\"arch\":\"{}\",",
                "\"variant\":\"{}\",\"runs\":{},\"rounds\":{},\"pipelined_slots\":{},",
                "\"serial_runs_per_s\":{:.0},\"pipelined_runs_per_s\":{:.0},",
                "\"speedup\":{:.3},\"serial_rounds\":[{}],\"pipelined_rounds\":[{}],",
                "\"serial_idle_fraction\":{:.4},\"pipelined_idle_fraction\":{:.4},",
                "\"serial_idle_rounds\":[{}],\"pipelined_idle_rounds\":[{}],",
                "\"serial_device_bound_runs_per_s\":{:.0},",
                "\"pipelined_device_bound_runs_per_s\":{:.0},",
                "\"pipelined_of_device_bound\":{:.3},\"pipelined_of_device_bound_rounds\":[{}],",
                "\"pipelined_busy_fraction\":{:.4},\"pipelined_exec_mean_over_median\":{:.3},",
                "\"unchanged_bytes_per_run\":{},\"changed_bytes_per_run\":{},",
                "\"metadata_bytes_per_run\":{},\"unchanged_forks_per_run\":{:.2},",
                "\"suffix_bytes_per_run\":{},",
                "\"serial_phase_us\":{{\"prepare\":{:.1},\"launch\":{:.1},\"finalize\":{:.1},",
                "\"execute\":{:.1},\"check\":{:.1}}}}}"
            ),
            match self.config.size {
                Size::Small => "small",
                Size::Full => "full",
            },
            self.config.runner.arch.name(),
            match self.config.variant {
                Variant::DeviceOrchestrated => "device",
                Variant::HostBuiltGraph => "host",
            },
            self.config.runs,
            self.config.rounds,
            self.config.pipelined_slots,
            self.serial_runs_per_s,
            self.pipelined_runs_per_s,
            self.speedup(),
            list(&self.serial_rounds),
            list(&self.pipelined_rounds),
            self.serial_idle_fraction,
            self.pipelined_idle_fraction,
            fractions(&self.serial_idle_rounds),
            fractions(&self.pipelined_idle_rounds),
            self.serial_device_bound_runs_per_s,
            self.pipelined_device_bound_runs_per_s,
            self.pipelined_of_device_bound(),
            ratios(&self.pipelined_of_device_bound_rounds),
            self.pipelined_busy_fraction,
            self.pipelined_exec_mean_over_median,
            self.unchanged_bytes_per_run,
            self.changed_bytes_per_run,
            self.metadata_bytes_per_run,
            self.unchanged_forks_per_run,
            self.suffix_bytes_per_run,
            p.prepare_us,
            p.launch_us,
            p.finalize_us,
            p.execute_us,
            p.check_us,
        )
    }
}

impl LaunchSeriesReport {
    /// The series as text lines (no final newline), as `ferry bench launch` prints them.
    pub fn to_text(&self) -> String {
        let (c, p) = (&self.config, &self.serial_phases);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "runtime series: vector ({:?}) on {} {:?}, {} runs per series, medians of {} interleaved rounds",
            c.size,
            c.runner.arch.name(),
            c.variant,
            c.runs,
            c.rounds
        );
        let _ = writeln!(
            s,
            "  serial (1 slot): {:>8.0} runs/s; pipelined ({} slots): {:>8.0} runs/s ({:.2}x)",
            self.serial_runs_per_s,
            c.pipelined_slots,
            self.pipelined_runs_per_s,
            self.speedup()
        );
        let _ = writeln!(
            s,
            "  descriptor bytes per run: unchanged {}, changed {}; metadata {}, suffix {} (synchronous at prepare)",
            self.unchanged_bytes_per_run,
            self.changed_bytes_per_run,
            self.metadata_bytes_per_run,
            self.suffix_bytes_per_run
        );
        let _ = writeln!(
            s,
            "  chip idle between runs (device clock): serial {:.1} % of wall, pipelined {:.1} %; \
             pipelined {:.0} runs/s = {:.2} of device-bound (each round against its own; {:.0} \
             runs/s; chip busy {:.1} %, mean run {:.2}x the median)",
            100.0 * self.serial_idle_fraction,
            100.0 * self.pipelined_idle_fraction,
            self.pipelined_runs_per_s,
            self.pipelined_of_device_bound(),
            self.pipelined_device_bound_runs_per_s,
            100.0 * self.pipelined_busy_fraction,
            self.pipelined_exec_mean_over_median
        );
        let _ = write!(
            s,
            "  serial run: prepare {:.0} us, launch {:.0} us, finalize {:.0} us (device execution {:.0} us), check {:.0} us",
            p.prepare_us,
            p.launch_us,
            p.finalize_us,
            p.execute_us,
            p.check_us
        );
        s
    }
}

/// The series `ferry bench launch` measures: the vector example on a2a3 host-built (the 1.5x
/// target) and device-orchestrated, and a5 host-built (which also stages launch metadata);
/// 200 runs per series in 9 rounds, or 40 runs in one round with `quick`.
pub fn legs(quick: bool) -> Vec<LaunchSeriesConfig> {
    let legs = [
        (Arch::A2a3, Variant::HostBuiltGraph),
        (Arch::A2a3, Variant::DeviceOrchestrated),
        (Arch::A5, Variant::HostBuiltGraph),
    ];
    legs.into_iter()
        .map(|(arch, variant)| LaunchSeriesConfig {
            runner: RunnerConfig::default_for(arch),
            variant,
            size: Size::Small,
            runs: if quick { 40 } else { 200 },
            // 9 rounds: on the 2-core VMs a serial round now and then runs in a mode ~1.7x
            // faster than the rest (its host steps ~10x faster; the host thread's waits then
            // find the CPU busy instead of idle), and the median must not land on it by chance.
            rounds: if quick { 1 } else { 9 },
            pipelined_slots: 2,
        })
        .collect()
}

/// Why the series failed.
#[derive(Debug, thiserror::Error)]
pub enum SeriesError {
    /// The configuration is unusable.
    #[error("invalid series configuration: {0}")]
    Config(String),
    /// Building a runner or registering the callable failed.
    #[error(transparent)]
    Runner(#[from] RunnerError),
    /// A run failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A run failed or produced a wrong result inside a series.
    #[error(transparent)]
    Repeat(#[from] RepeatError<ExampleVerifyError>),
    /// A run outside the series produced a wrong result.
    #[error(transparent)]
    Verify(#[from] ExampleVerifyError),
}

/// A runner with `slots` launch slots, `callables` registrations of the vector graph (ids
/// `0..callables`: same graph, different headers) and every slot warmed with callable 0.
fn runner(
    cfg: &LaunchSeriesConfig,
    ex: &ExampleRun,
    slots: u32,
    callables: u32,
) -> Result<DeviceRunner, SeriesError> {
    let mut r = DeviceRunner::new(cfg.runner.with_launch_slots(slots))?;
    for id in 0..callables {
        r.register_callable(id, ex.callable.clone())?;
    }
    // Warm-up: first runs pay for page faults, the program load and every slot's first
    // publication.
    for _ in 0..slots.max(2) {
        ex.verify(&r.run(0, ex.args.clone())?)?;
    }
    Ok(r)
}

/// What one series measured.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Series {
    runs_per_s: f64,
    /// The chip's idle time between consecutive runs over the series' wall time.
    idle_fraction: f64,
    /// 1 / the median device execution of a run.
    device_bound_runs_per_s: f64,
    /// The runs' device execution summed over the wall time.
    busy_fraction: f64,
    /// The mean device execution of a run over the median.
    mean_over_median: f64,
}

/// The chip's idle time between consecutive runs (device clock) over `wall`, 1 / the median
/// device execution of a run, the runs' device execution summed over `wall`, and the mean
/// device execution over the median.
fn device_figures(spans: &[DeviceSpan], wall: Duration) -> (f64, f64, f64, f64) {
    let wall = wall.as_secs_f64().max(1e-9);
    let idle: f64 = spans.windows(2).map(|w| w[0].idle_before(&w[1]).as_secs_f64()).sum();
    let exec: Vec<f64> = spans.iter().map(|s| s.execution().as_secs_f64()).collect();
    let (sum, med) = (exec.iter().sum::<f64>(), median(&exec).max(1e-12));
    let mean = sum / exec.len().max(1) as f64;
    (idle / wall, 1.0 / med, sum / wall, mean / med)
}

/// One series of `runs` identical runs.
fn series(r: &mut DeviceRunner, ex: &ExampleRun, runs: u32) -> Result<Series, SeriesError> {
    let mut spans = Vec::with_capacity(runs as usize);
    let rep = r.repeat(
        0,
        runs,
        |_| ex.args.clone(),
        |_, out| {
            spans.push(out.stats.device);
            ex.verify(out).map(|_| ())
        },
    )?;
    let spans: Option<Vec<DeviceSpan>> = spans.into_iter().collect();
    let spans = spans.ok_or_else(|| {
        SeriesError::Config("the launch series needs the device-program path's spans".into())
    })?;
    let (idle_fraction, device_bound_runs_per_s, busy_fraction, mean_over_median) =
        device_figures(&spans, rep.elapsed);
    Ok(Series {
        runs_per_s: rep.runs_per_s(),
        idle_fraction,
        device_bound_runs_per_s,
        busy_fraction,
        mean_over_median,
    })
}

fn serial_phases(
    r: &mut DeviceRunner,
    ex: &ExampleRun,
    runs: u32,
) -> Result<SerialPhases, SeriesError> {
    let mut p = SerialPhases::default();
    let us = |t: Instant| t.elapsed().as_secs_f64() * 1e6;
    for _ in 0..runs {
        let t = Instant::now();
        let prepared = r.prepare(0, ex.args.clone())?;
        p.prepare_us += us(t);
        let t = Instant::now();
        let launched = r.launch(prepared)?;
        p.launch_us += us(t);
        let t = Instant::now();
        let out = r.finalize_run(launched)?;
        p.finalize_us += us(t);
        p.execute_us += out.stats.wall.as_secs_f64() * 1e6;
        let t = Instant::now();
        ex.verify(&out)?;
        p.check_us += us(t);
    }
    let n = f64::from(runs.max(1));
    Ok(SerialPhases {
        prepare_us: p.prepare_us / n,
        launch_us: p.launch_us / n,
        finalize_us: p.finalize_us / n,
        execute_us: p.execute_us / n,
        check_us: p.check_us / n,
    })
}

/// Measures both series (and the descriptor counters).
///
/// # Errors
/// [`SeriesError`] for a bad configuration, a failed run or a wrong result.
pub fn run(cfg: &LaunchSeriesConfig) -> Result<LaunchSeriesReport, SeriesError> {
    if cfg.pipelined_slots < 2 || cfg.runs == 0 || cfg.rounds == 0 {
        return Err(SeriesError::Config(format!(
            "{} pipelined slots, {} runs, {} rounds: needs at least 2 slots, 1 run and 1 round",
            cfg.pipelined_slots, cfg.runs, cfg.rounds
        )));
    }
    let ex = Example::Vector.build(cfg.size).with_variant(cfg.variant);
    let n = cfg.pipelined_slots;
    // The pipelined runner registers n + 2 callables of the same graph (different headers) for
    // the changed series below.
    let mut serial = runner(cfg, &ex, 1, 1)?;
    let mut piped = runner(cfg, &ex, n, n + 2)?;
    let (mut serial_series, mut pipelined_series) = (Vec::new(), Vec::new());
    for round in 0..cfg.rounds {
        if round % 2 == 0 {
            serial_series.push(series(&mut serial, &ex, cfg.runs)?);
            pipelined_series.push(series(&mut piped, &ex, cfg.runs)?);
        } else {
            pipelined_series.push(series(&mut piped, &ex, cfg.runs)?);
            serial_series.push(series(&mut serial, &ex, cfg.runs)?);
        }
    }
    let pick = |v: &[Series], f: fn(&Series) -> f64| v.iter().map(f).collect::<Vec<f64>>();
    let serial_rounds = pick(&serial_series, |s| s.runs_per_s);
    let pipelined_rounds = pick(&pipelined_series, |s| s.runs_per_s);
    let serial_idle_rounds = pick(&serial_series, |s| s.idle_fraction);
    let pipelined_idle_rounds = pick(&pipelined_series, |s| s.idle_fraction);
    let stats = |r: &DeviceRunner| r.launch_stats().unwrap_or_default();
    // Identical runs on warm slots: the counters over one more pipelined series.
    let before = stats(&piped);
    series(&mut piped, &ex, cfg.runs)?;
    let after = stats(&piped);
    let runs = u64::from(cfg.runs);
    let prefix = ROUTE_PREFIX_BYTES as u64;
    let unchanged_descriptor = (after.descriptor_copies - before.descriptor_copies) * prefix;
    let metadata_bytes = after.bytes_copied - before.bytes_copied - unchanged_descriptor;
    let unchanged_forks = (after.forks - before.forks) as f64 / runs as f64;
    let suffix_bytes = (after.suffix_bytes - before.suffix_bytes) / runs;
    // Changed prefix every run: `repeat` runs one callable, so this series steps through
    // callables 1..=n+1 itself (every slot holds callable 0's prefix now; consecutive runs of
    // one slot, k and k + n, differ since n mod (n + 1) != 0).
    let before = stats(&piped);
    for k in 0..cfg.runs {
        ex.verify(&piped.run(1 + k % (n + 1), ex.args.clone())?)?;
    }
    let after = stats(&piped);
    let changed_bytes = (after.descriptor_copies - before.descriptor_copies) * prefix / runs;
    let serial_phases = serial_phases(&mut serial, &ex, cfg.runs.min(50))?;
    serial.finalize()?;
    piped.finalize()?;
    Ok(LaunchSeriesReport {
        config: *cfg,
        serial_runs_per_s: median(&serial_rounds),
        pipelined_runs_per_s: median(&pipelined_rounds),
        serial_rounds,
        pipelined_rounds,
        serial_idle_fraction: median(&serial_idle_rounds),
        pipelined_idle_fraction: median(&pipelined_idle_rounds),
        serial_idle_rounds,
        pipelined_idle_rounds,
        serial_device_bound_runs_per_s: median(&pick(&serial_series, |s| {
            s.device_bound_runs_per_s
        })),
        pipelined_device_bound_runs_per_s: median(&pick(&pipelined_series, |s| {
            s.device_bound_runs_per_s
        })),
        pipelined_busy_fraction: median(&pick(&pipelined_series, |s| s.busy_fraction)),
        pipelined_of_device_bound_rounds: pick(&pipelined_series, |s| {
            s.runs_per_s / s.device_bound_runs_per_s.max(1e-12)
        }),
        pipelined_exec_mean_over_median: median(&pick(&pipelined_series, |s| s.mean_over_median)),
        unchanged_bytes_per_run: unchanged_descriptor / runs,
        changed_bytes_per_run: changed_bytes,
        metadata_bytes_per_run: metadata_bytes / runs,
        unchanged_forks_per_run: unchanged_forks,
        suffix_bytes_per_run: suffix_bytes,
        serial_phases,
    })
}

/// Bench-friendly single series for criterion: a runner with `slots` slots and a closure
/// running `runs` identical verified runs through the pipeline.
///
/// # Errors
/// As [`run`].
pub fn series_runner(
    cfg: &LaunchSeriesConfig,
    slots: u32,
) -> Result<impl FnMut(u32) -> Result<Duration, SeriesError>, SeriesError> {
    let ex = Example::Vector.build(cfg.size).with_variant(cfg.variant);
    let mut r = runner(cfg, &ex, slots, 1)?;
    Ok(move |runs: u32| {
        let rep = r.repeat(0, runs, |_| ex.args.clone(), |_, out| ex.verify(out).map(|_| ()))?;
        Ok(rep.elapsed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_time_is_the_gaps_between_runs_over_the_wall_time() {
        let hz = 1_000_000; // 1 cycle = 1 us
        let span = |start_cycles, end_cycles| DeviceSpan { start_cycles, end_cycles, hz };
        // Runs of 100, 100, 200 us; gaps of 50 us, then none (overlapping stamps count 0).
        let spans = [span(0, 100), span(150, 250), span(240, 440)];
        let (idle, bound, busy, mean_over_median) =
            device_figures(&spans, Duration::from_micros(500));
        assert!((idle - 50.0 / 500.0).abs() < 1e-9, "{idle}");
        assert!((busy - 400.0 / 500.0).abs() < 1e-9, "{busy}");
        assert!((bound - 1e6 / 100.0).abs() < 1e-6, "median execution 100 us: {bound}");
        assert!((mean_over_median - (400.0 / 3.0) / 100.0).abs() < 1e-9, "{mean_over_median}");
    }
}
