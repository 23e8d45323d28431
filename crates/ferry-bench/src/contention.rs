//! The storm on a busy machine: its wall time beside CPU-bound processes, as a ratio of the same
//! storm alone, measured in one process with interleaved rounds.
//!
//! Each round runs the 50,000-task storm three ways on one runner: alone, beside one busy loop,
//! and beside as many busy loops as the host has CPUs. A busy loop is a child process
//! `sh -c 'while :; do :; done'` at the bench's own nice value (0 for a user's shell), started
//! before the storm and killed after it. Before each storm the bench waits out
//! [`ferry_sim::wait::CONTENDED_HOLD`], so every storm starts with its waits as a fresh process
//! has them (the yield gate open) and pays for finding out that the CPUs are busy. The figures are medians over the rounds; the ratios are ratios of
//! medians. With N busy loops on C CPUs a fair scheduler gives the storm about C / (C + N) of
//! the machine once its own threads are counted as one job, so about 2x with C loops.
//!
//! # Examples
//! ```no_run
//! use ferry_bench::contention::{run, ContentionConfig};
//! let r = run(&ContentionConfig { rounds: 3, ..ContentionConfig::default() })?;
//! println!("2 loops: {:.2}x the storm alone", r.beside_all.wall_ratio);
//! # Ok::<(), ferry_bench::runtime::BenchError>(())
//! ```
use crate::median;
use crate::runtime::BenchError;
use ferry_runtime::host::RunnerConfig;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentionConfig {
    /// The chip.
    pub runner: RunnerConfig,
    /// Storm tasks per run.
    pub tasks: u64,
    /// Interleaved rounds (each: alone, 1 loop, `cpus` loops).
    pub rounds: u32,
    /// Busy loops of the last configuration; `None`: the CPUs available to this process.
    pub cpus: Option<u32>,
    /// How long the busy loops run before the storm starts (they reach their full share).
    pub settle: Duration,
}

impl Default for ContentionConfig {
    fn default() -> Self {
        ContentionConfig {
            runner: RunnerConfig::default_for(ferry_sim::Arch::A2a3),
            tasks: 50_000,
            rounds: 7,
            cpus: None,
            settle: Duration::from_millis(100),
        }
    }
}

/// The storm beside one number of busy loops: medians over the rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Beside {
    /// Busy loops beside the storm.
    pub loops: u32,
    /// Median wall seconds of the storm (launch to completion).
    pub wall_s: f64,
    /// Median CPU seconds this process used during the storm.
    pub cpu_s: f64,
    /// `wall_s` over the storm alone's `wall_s`.
    pub wall_ratio: f64,
    /// Median over the rounds of the yields during the storm that found another process on
    /// the CPU (each closes `ferry_wait`'s gate: the waits then park instead of yielding).
    pub long_yields: f64,
    /// Every round's wall seconds, in round order.
    pub rounds_wall_s: [f64; MAX_ROUNDS],
}

/// Most rounds a report keeps per configuration.
pub const MAX_ROUNDS: usize = 32;

/// Results.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ContentionReport {
    /// Storm tasks per run.
    pub tasks: u64,
    /// Rounds measured.
    pub rounds: u32,
    /// CPUs available to this process.
    pub cpus: u32,
    /// The storm alone.
    pub alone: Beside,
    /// Beside one busy loop.
    pub beside_one: Beside,
    /// Beside one busy loop per CPU.
    pub beside_all: Beside,
}

impl ContentionReport {
    /// Storm tasks per second alone (median wall).
    pub fn alone_tasks_per_s(&self) -> f64 {
        self.tasks as f64 / self.alone.wall_s
    }

    /// The report as one JSON object.
    pub fn to_json(&self) -> String {
        let one = |b: &Beside| {
            let rounds: Vec<String> = b.rounds_wall_s[..self.rounds as usize]
                .iter()
                .map(|w| format!("{:.4}", w))
                .collect();
            format!(
                concat!(
                    "{{\"busy_loops\":{},\"wall_s\":{:.4},\"cpu_s\":{:.4},",
                    "\"wall_vs_alone\":{:.3},\"long_yields\":{},\"rounds_wall_s\":[{}]}}"
                ),
                b.loops,
                b.wall_s,
                b.cpu_s,
                b.wall_ratio,
                b.long_yields,
                rounds.join(",")
            )
        };
        format!(
            concat!(
                "{{\"storm_tasks\":{},\"rounds\":{},\"cpus\":{},",
                "\"alone_tasks_per_s\":{:.0},\"alone\":{},\"beside_one\":{},\"beside_all\":{}}}"
            ),
            self.tasks,
            self.rounds,
            self.cpus,
            self.alone_tasks_per_s(),
            one(&self.alone),
            one(&self.beside_one),
            one(&self.beside_all)
        )
    }
}

/// CPU-bound child processes, killed and reaped when dropped (also on an error path).
struct BusyLoops(Vec<Child>);

impl BusyLoops {
    fn start(n: u32) -> Result<BusyLoops, BenchError> {
        let mut loops = BusyLoops(Vec::new());
        for _ in 0..n {
            let child = Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    BenchError::Contention(format!("starting a busy loop (sh -c ...): {e}"))
                })?;
            loops.0.push(child);
        }
        Ok(loops)
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs the rounds; `progress(round)` is called before each round.
///
/// # Errors
/// [`BenchError`] when the runner cannot be built, a run fails or is wrong, or a busy loop
/// cannot be started.
pub fn run_with(
    cfg: &ContentionConfig,
    mut progress: impl FnMut(u32),
) -> Result<ContentionReport, BenchError> {
    let rounds = cfg.rounds.clamp(1, MAX_ROUNDS as u32);
    let cpus = cfg
        .cpus
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()) as u32);
    let (mut r, ex) = crate::runtime::warm_storm(cfg.runner, cfg.tasks)?;
    let loops = [0, 1, cpus];
    let mut wall = [[0.0; MAX_ROUNDS]; 3];
    let mut cpu = [[0.0; MAX_ROUNDS]; 3];
    let mut long = [[0.0; MAX_ROUNDS]; 3];
    let gate = ferry_sim::wait::YieldGate::global();
    for round in 0..rounds as usize {
        progress(round as u32);
        for (k, &n) in loops.iter().enumerate() {
            // Let a yield gate closed by the previous storm reopen: each storm starts with its
            // waits as a fresh process has them and pays for finding out the CPUs are busy.
            std::thread::sleep(ferry_sim::wait::CONTENDED_HOLD + Duration::from_millis(50));
            let busy = BusyLoops::start(n)?;
            if n > 0 {
                std::thread::sleep(cfg.settle);
            }
            let (c0, y0) = (crate::sim::process_cpu_time(), gate.long_yields());
            let out = r.run(0, ex.args.clone())?;
            cpu[k][round] = (crate::sim::process_cpu_time() - c0).as_secs_f64();
            long[k][round] = (gate.long_yields() - y0) as f64;
            drop(busy);
            ex.verify(&out)?;
            wall[k][round] = out.stats.wall.as_secs_f64();
        }
    }
    let n = rounds as usize;
    let alone_wall = median(&wall[0][..n]);
    let beside = |k: usize| Beside {
        loops: loops[k],
        wall_s: median(&wall[k][..n]),
        cpu_s: median(&cpu[k][..n]),
        wall_ratio: median(&wall[k][..n]) / alone_wall,
        long_yields: median(&long[k][..n]),
        rounds_wall_s: wall[k],
    };
    Ok(ContentionReport {
        tasks: cfg.tasks,
        rounds,
        cpus,
        alone: beside(0),
        beside_one: beside(1),
        beside_all: beside(2),
    })
}

/// [`run_with`] without progress reports.
///
/// # Errors
/// As [`run_with`].
pub fn run(cfg: &ContentionConfig) -> Result<ContentionReport, BenchError> {
    run_with(cfg, |_| {})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beside(loops: u32, wall_s: f64, rounds: &[f64]) -> Beside {
        let mut rounds_wall_s = [0.0; MAX_ROUNDS];
        rounds_wall_s[..rounds.len()].copy_from_slice(rounds);
        Beside {
            loops,
            wall_s,
            cpu_s: 0.2,
            wall_ratio: wall_s / 0.1,
            long_yields: 3.0,
            rounds_wall_s,
        }
    }

    #[test]
    fn the_json_names_every_configuration_and_only_the_measured_rounds() {
        let _bound = ferry_watchdog::bound("the bench's child processes");
        let r = ContentionReport {
            tasks: 50_000,
            rounds: 2,
            cpus: 2,
            alone: beside(0, 0.1, &[0.1, 0.12]),
            beside_one: beside(1, 0.15, &[0.15, 0.2]),
            beside_all: beside(2, 0.2, &[0.2, 0.3]),
        };
        let j = r.to_json();
        assert!(j.starts_with("{\"storm_tasks\":50000,\"rounds\":2,\"cpus\":2,"), "{j}");
        assert!(j.contains("\"alone_tasks_per_s\":500000"), "{j}");
        assert!(j.contains("\"beside_one\":{\"busy_loops\":1,\"wall_s\":0.1500"), "{j}");
        assert!(j.contains("\"beside_all\":{\"busy_loops\":2,\"wall_s\":0.2000"), "{j}");
        assert!(j.contains("\"wall_vs_alone\":2.000,\"long_yields\":3,"), "{j}");
        assert!(j.contains("\"rounds_wall_s\":[0.2000,0.3000]}"), "only the measured rounds: {j}");
        assert_eq!(j.matches('{').count(), j.matches('}').count());
    }

    #[test]
    fn busy_loops_run_until_dropped_and_are_reaped() {
        let _bound = ferry_watchdog::bound("the bench's child processes");
        let mut loops = BusyLoops::start(2).unwrap();
        let pids: Vec<u32> = loops.0.iter().map(Child::id).collect();
        for c in &mut loops.0 {
            assert!(c.try_wait().unwrap().is_none(), "a busy loop ended by itself");
        }
        drop(loops);
        for pid in pids {
            // Killed and waited for: no process (not even a zombie) is left under that id.
            assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "{pid} is left");
        }
    }
}
