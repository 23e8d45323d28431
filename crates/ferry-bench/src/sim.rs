//! Measurements of the simulated chip itself, shared by `cargo bench -p ferry-bench --bench sim`
//! and `ferry bench sim` ([`measure`]: these and the storm beside busy loops,
//! [`crate::contention`]).
//!
//! - **Idle cost**: CPU time the process uses per wall second while a chip sits idle, both with
//!   its threads parked (nothing launched) and with every AICore entry launched and waiting on
//!   its register window for a dispatch (the state of a chip between tasks).
//! - **Handshake round trip**: an AICPU-side write of `DATA_MAIN_BASE` until the core's `FIN` in
//!   `COND` is observed, against a baseline of a plain two-thread ping-pong over
//!   `std::sync::mpsc` measured in the same run.
use crate::contention::{self, ContentionConfig, ContentionReport};
use crate::runtime::BenchError;
use ferry_sim::cores::{Chip, CoreConfig, CoreCtx};
use ferry_sim::{Arch, DeviceError, PlatformBuilder};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `DATA_MAIN_BASE` offset used by the bench (a2a3 layout).
const DATA_MAIN_BASE: u32 = 0xA0;
/// `COND` offset used by the bench (a2a3 layout).
const COND: u32 = 0x4C8;
const EXIT: u32 = 0x7FFF_FFF0;
const FIN: u32 = 1 << 31;

/// What to measure.
#[derive(Clone, Copy, Debug)]
pub struct SimBenchConfig {
    /// Chip shape.
    pub cores: CoreConfig,
    /// Wall time of each idle measurement.
    pub idle_window: Duration,
    /// Round trips to time.
    pub round_trips: u32,
}

impl Default for SimBenchConfig {
    fn default() -> Self {
        Self {
            cores: CoreConfig { aicpu_threads: 4, aic: 8, aiv: 16 },
            idle_window: Duration::from_secs(1),
            round_trips: 20_000,
        }
    }
}

/// Results.
#[derive(Clone, Copy, Debug)]
pub struct SimBenchReport {
    /// AICPU threads of the chip.
    pub aicpu_threads: u32,
    /// AICore workers of the chip.
    pub aicore_threads: u32,
    /// Process CPU seconds per wall second with all chip threads parked (1.0 = one core).
    pub idle_parked_cpu: f64,
    /// Process CPU seconds per wall second with every core waiting for a dispatch.
    pub idle_waiting_cpu: f64,
    /// Mean handshake dispatch round trip, nanoseconds.
    pub handshake_rtt_ns: f64,
    /// Mean mpsc ping-pong round trip measured in the same run (baseline), nanoseconds.
    pub baseline_rtt_ns: f64,
}

impl SimBenchReport {
    /// The report as one JSON object, with ratios against the baseline.
    pub fn to_json(&self) -> String {
        format!(
            concat!(
                "{{\"area\":\"sim\",\"aicpu_threads\":{},\"aicore_threads\":{},",
                "\"idle_parked_cpu_pct_of_core\":{:.4},\"idle_waiting_cpu_pct_of_core\":{:.4},",
                "\"idle_goal_pct_of_core\":2.0,",
                "\"handshake_rtt_ns\":{:.0},\"baseline_mpsc_rtt_ns\":{:.0},",
                "\"handshake_rtt_vs_baseline\":{:.3}}}"
            ),
            self.aicpu_threads,
            self.aicore_threads,
            self.idle_parked_cpu * 100.0,
            self.idle_waiting_cpu * 100.0,
            self.handshake_rtt_ns,
            self.baseline_rtt_ns,
            self.handshake_rtt_ns / self.baseline_rtt_ns
        )
    }
}

/// Process CPU time (user + system) so far.
pub fn process_cpu_time() -> Duration {
    // SAFETY: `getrusage` fills the zero-initialised struct we pass; RUSAGE_SELF is always valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn cpu_per_wall(window: Duration) -> f64 {
    let (c0, w0) = (process_cpu_time(), Instant::now());
    std::thread::sleep(window);
    (process_cpu_time() - c0).as_secs_f64() / w0.elapsed().as_secs_f64()
}

/// The AICore side of the dispatch protocol used by the bench and tests: wait for a new
/// `DATA_MAIN_BASE`, answer `FIN(id)` in `COND`, stop on `EXIT`.
pub fn echo_core(ctx: CoreCtx) -> Result<(), String> {
    let mut last = 0;
    loop {
        let v = ctx.window.core_wait(DATA_MAIN_BASE, |v| v != last, None).unwrap_or(last);
        if v == EXIT {
            ctx.window.core_write(COND, FIN | 0x7FFF_FFFE);
            return Ok(());
        }
        last = v;
        ctx.window.core_write(COND, FIN | v);
    }
}

/// Runs the measurements on a fresh a2a3 device.
///
/// # Errors
/// When the chip cannot be built or a launch fails.
pub fn run(cfg: &SimBenchConfig) -> Result<SimBenchReport, DeviceError> {
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(64 << 20).build()?;
    let chip = Chip::new(p.device(0)?.clone(), cfg.cores)?;
    let idle_parked_cpu = cpu_per_wall(cfg.idle_window);

    let n = cfg.cores.cores();
    let done = chip.launch_aicore(n, Arc::new(echo_core))?;
    // Let every core reach its wait before measuring.
    std::thread::sleep(Duration::from_millis(50));
    let idle_waiting_cpu = cpu_per_wall(cfg.idle_window);

    let w = chip.window(0);
    let t0 = Instant::now();
    for id in 1..=cfg.round_trips {
        w.aicpu_write(DATA_MAIN_BASE, id);
        w.aicpu_wait(COND, |c| c == FIN | id, None);
    }
    let handshake_rtt_ns = t0.elapsed().as_nanos() as f64 / f64::from(cfg.round_trips);
    for i in 0..n {
        chip.window(i).aicpu_write(DATA_MAIN_BASE, EXIT);
    }
    done.wait()?;

    let (tx, rx) = std::sync::mpsc::channel::<u32>();
    let (btx, brx) = std::sync::mpsc::channel::<u32>();
    let echo = std::thread::spawn(move || {
        while let Ok(v) = rx.recv() {
            if btx.send(v).is_err() {
                break;
            }
        }
    });
    let t0 = Instant::now();
    for id in 0..cfg.round_trips {
        tx.send(id).map_err(|e| DeviceError::Resource(e.to_string()))?;
        brx.recv().map_err(|e| DeviceError::Resource(e.to_string()))?;
    }
    let baseline_rtt_ns = t0.elapsed().as_nanos() as f64 / f64::from(cfg.round_trips);
    drop(tx);
    let _ = echo.join();

    Ok(SimBenchReport {
        aicpu_threads: cfg.cores.aicpu_threads,
        aicore_threads: n,
        idle_parked_cpu,
        idle_waiting_cpu,
        handshake_rtt_ns,
        baseline_rtt_ns,
    })
}

/// What `ferry bench sim` measures: the idle chip and the handshake, then the storm beside busy
/// loops.
#[derive(Clone, Copy, Debug)]
pub struct SimArea {
    /// The chip's own figures.
    pub chip: SimBenchReport,
    /// The storm beside busy loops.
    pub contention: ContentionReport,
}

/// Why `ferry bench sim` failed.
#[derive(Debug, thiserror::Error)]
pub enum SimAreaError {
    /// The chip measurements failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The storm beside busy loops failed.
    #[error(transparent)]
    Contention(#[from] BenchError),
}

/// What `ferry bench sim` measures with.
#[derive(Clone, Copy, Debug)]
pub struct SimAreaConfig {
    /// The chip's own figures.
    pub chip: SimBenchConfig,
    /// The storm beside busy loops.
    pub contention: ContentionConfig,
}

impl SimAreaConfig {
    /// The defaults, or shorter windows and fewer rounds with `quick` (smoke runs).
    pub fn new(quick: bool) -> Self {
        let mut cfg = SimAreaConfig {
            chip: SimBenchConfig::default(),
            contention: ContentionConfig::default(),
        };
        if quick {
            cfg.chip.idle_window = Duration::from_millis(200);
            cfg.chip.round_trips = 2_000;
            cfg.contention.rounds = 2;
            cfg.contention.tasks = 10_000;
        }
        cfg
    }
}

/// `ferry bench sim`: [`run`], then the storm beside busy loops ([`contention::run_with`],
/// `progress(round)` before each round).
///
/// # Errors
/// [`SimAreaError`] when either measurement fails.
pub fn measure(cfg: &SimAreaConfig, progress: impl FnMut(u32)) -> Result<SimArea, SimAreaError> {
    let chip = run(&cfg.chip)?;
    let contention = contention::run_with(&cfg.contention, progress)?;
    Ok(SimArea { chip, contention })
}

impl crate::AreaReport for SimArea {
    /// One JSON object: the chip's figures with the storm's under `"contention"`.
    fn to_json(&self) -> String {
        let sim = self.chip.to_json();
        let sim = sim.strip_suffix('}').unwrap_or(&sim);
        format!("{sim},\"contention\":{}}}", self.contention.to_json())
    }

    fn to_text(&self) -> String {
        let (r, c) = (&self.chip, &self.contention);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "simulated a2a3 chip: {} AICPU + {} AICore threads",
            r.aicpu_threads, r.aicore_threads
        );
        let _ = writeln!(
            s,
            "  idle, threads parked:          {:.3}% of one core",
            r.idle_parked_cpu * 100.0
        );
        let _ = writeln!(
            s,
            "  idle, cores awaiting dispatch: {:.3}% of one core (goal < 2%)",
            r.idle_waiting_cpu * 100.0
        );
        let _ = writeln!(
            s,
            "  handshake round trip: {:.0} ns (mpsc ping-pong baseline {:.0} ns, ratio {:.2})",
            r.handshake_rtt_ns,
            r.baseline_rtt_ns,
            r.handshake_rtt_ns / r.baseline_rtt_ns
        );
        let _ = writeln!(
            s,
            "storm of {} tasks beside busy loops (sh -c 'while :; do :; done', nice 0), {} CPUs, medians of {} interleaved rounds:",
            c.tasks, c.cpus, c.rounds
        );
        for b in [&c.alone, &c.beside_one, &c.beside_all] {
            let _ = writeln!(
                s,
                "  {} busy loop(s): {:>8.1} ms wall ({:.2}x alone), {:>6.1} ms CPU, {} long yields",
                b.loops,
                b.wall_s * 1e3,
                b.wall_ratio,
                b.cpu_s * 1e3,
                b.long_yields
            );
        }
        let _ = write!(s, "  alone: {:.0} tasks/s", c.alone_tasks_per_s());
        s
    }
}
