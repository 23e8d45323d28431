//! What each DFX subsystem costs a run: the storm's throughput with DFX off and with each
//! subsystem on, from medians of interleaved rounds.

use super::thread_cpu::{RoleCpu, ThreadCpu};
use ferry_profile::RunModel;
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::dfx::{DfxChip, DfxOptions, DfxSession};
use ferry_runtime::host::{DeviceRunner, RunnerConfig};
use ferry_sim::Arch;

/// One row of [`subsystem_costs`]: a DFX configuration and the storm's throughput with it.
#[derive(Clone, Debug, PartialEq)]
pub struct CostRow {
    /// What was on (`off`, `swimlane=1` … `swimlane=4`, `pmu`, `dep_gen`, `dump_args=3`,
    /// `dump_args=2`, `scope_stats`, `all`, `all_dump_args=2`).
    pub config: String,
    /// Tasks per second (median of the rounds).
    pub tasks_per_s: f64,
    /// `tasks_per_s` over the DFX-off figure.
    pub ratio: f64,
    /// The median over the rounds of each round's throughput over that round's DFX-off
    /// throughput: each ratio compares two runs taken moments apart, so it follows the machine's
    /// drifts less than the ratio of the two medians.
    pub ratio_paired: f64,
    /// Records the run's model holds (swimlane, PMU and ScopeStats rows, DepGen submits, dumped
    /// arguments) in the last round.
    pub records: u64,
    /// Records dropped (0 under Block).
    pub dropped: u64,
    /// Gate waits over every lane in every round (0: the pools kept the path cold).
    pub stall_waits: u64,
    /// CPU time of a run by thread role (median of the rounds, each role on its own), from the
    /// run's start to its end, before the session's engine stops; `None` where the kernel does
    /// not account threads ([`ThreadCpu::snapshot`]).
    pub cpu: Option<RoleCpu>,
}

/// The configurations [`subsystem_costs`] measures, in order (the first is DFX off).
pub fn cost_configs() -> Vec<(String, DfxOptions)> {
    let base = DfxOptions::default();
    let mut v = vec![("off".to_string(), base)];
    for l in 1..=4 {
        v.push((format!("swimlane={l}"), DfxOptions { swimlane: l, ..base }));
    }
    v.push(("pmu".into(), DfxOptions { pmu: 2, ..base }));
    v.push(("dep_gen".into(), DfxOptions { dep_gen: true, ..base }));
    v.push(("dump_args=3".into(), DfxOptions { dump_args: 3, ..base }));
    // The storm marks no argument for dump: level 3 dumps every argument's metadata and no
    // payload, level 2 every payload.
    v.push(("dump_args=2".into(), DfxOptions { dump_args: 2, ..base }));
    v.push(("scope_stats".into(), DfxOptions { scope_stats: true, ..base }));
    v.push(("all".into(), DfxOptions::all()));
    // All five with the native profile written while the run runs, as `ferry run --out` does.
    v.push((ALL_RECORDED.into(), DfxOptions::all()));
    v.push(("all_dump_args=2".into(), DfxOptions { dump_args: 2, ..DfxOptions::all() }));
    v
}

/// The configuration of all five subsystems with the native profile recorded.
pub const ALL_RECORDED: &str = "all_recorded";

/// What each DFX subsystem costs the storm example: tasks/s on a default-sized chip, on the full
/// path `ferry run` takes (the loaded AICPU program, regions in device memory), with DFX off and
/// with each subsystem / swimlane level on, as ratios against off. Runs `repeats` rounds of every
/// configuration in turn, then `pairs` more rounds of DFX off and all five alone (one right after
/// the other: the headline pair gets more samples, each ratio taken between two runs a moment
/// apart), and takes each configuration's median over its rounds (the 2-core development
/// machine schedules some 40 threads, so single runs vary by 2-3x). `size` picks the storm
/// (`Full`: 50,000 tasks).
///
/// # Errors
/// A run or a collection that failed.
pub fn subsystem_costs(
    arch: Arch,
    size: Size,
    repeats: u32,
    pairs: u32,
) -> Result<Vec<CostRow>, Box<dyn std::error::Error + Send + Sync>> {
    let cfg = RunnerConfig::default_for(arch);
    let mut r = DeviceRunner::new(cfg)?;
    let run = Example::Storm.build(size);
    r.register_callable(1, run.callable.clone())?;
    let chip = DfxChip::of(&cfg, run.args.scratch_bytes);
    // Warm-up.
    r.run(1, run.args.clone())?;
    // Rounds: every configuration once per round, so machine noise spreads over all of them;
    // then the headline pair alone.
    let configs = cost_configs();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    let mut counts = vec![(0u64, 0u64, 0u64); configs.len()];
    let mut cpu: Vec<Vec<RoleCpu>> = vec![Vec::new(); configs.len()];
    let all = configs.iter().position(|(name, _)| name == "all");
    let recorded = configs.iter().position(|(name, _)| name == ALL_RECORDED);
    let headline: Vec<usize> = [Some(0), all, recorded].into_iter().flatten().collect();
    let rounds = (0..repeats.max(1))
        .map(|_| (0..configs.len()).collect::<Vec<_>>())
        .chain((0..pairs).map(move |_| headline.clone()));
    // Where the recorded configuration's native profile goes (a new file each run).
    let scratch = std::env::temp_dir().join(format!("ferry-bench-rec-{}", std::process::id()));
    let scratch_dir = ferry_fs::Dir::open_writable(&scratch, true)?;
    for round in rounds {
        for k in round {
            let (name, opts) = (&configs[k].0, &configs[k].1);
            let s = if name == ALL_RECORDED {
                use ferry_profile::recorder::{FsyncPolicy, Recorder, RECORD_FILE};
                scratch_dir.remove_file(RECORD_FILE)?;
                let rec = Recorder::create(&scratch_dir, RECORD_FILE, FsyncPolicy::Never)?;
                // As `ferry run --out` records by default: the native profile alone.
                let rec = std::sync::Arc::new(rec);
                Some(DfxSession::start_recorded_only(opts, chip, r.device(), rec)?)
            } else if opts.any() {
                Some(DfxSession::start_on(opts, chip, r.device())?)
            } else {
                None
            };
            r.attach_dfx_session(s.as_ref())?;
            let before = ThreadCpu::snapshot();
            let out = r.run(1, run.args.clone());
            if let (Some(b), Some(a)) = (before, ThreadCpu::snapshot()) {
                cpu[k].push(a.since(&b));
            }
            r.attach_dfx_session(None)?;
            let out = out?;
            run.verify(&out)?;
            samples[k].push(out.stats.tasks as f64 / out.stats.wall.as_secs_f64());
            if let Some(s) = s {
                // The native profile alone finishes into its loss accounting: its records are
                // the transport's (words for DepGen and ArgsDump), not the model's rows.
                let (records, m) = if name == ALL_RECORDED {
                    let m = s.finish_runs_accounting()?.remove(0);
                    (m.loss.totals().1, m)
                } else {
                    let m = s.finish()?;
                    (m.record_count(), m)
                };
                let waits: u64 = m.loss.lanes.iter().map(|l| l.stall_waits).sum();
                counts[k] = (records, m.loss.totals().2, counts[k].2 + waits);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let paired: Vec<f64> = samples
        .iter()
        .map(|s| {
            let mut r: Vec<f64> = s.iter().zip(&samples[0]).map(|(x, off)| x / off).collect();
            median(&mut r)
        })
        .collect();
    let meds: Vec<f64> = samples.iter_mut().map(median).collect();
    let cpu_meds: Vec<Option<RoleCpu>> = cpu
        .iter()
        .zip(&samples)
        .map(|(v, s)| {
            (v.len() == s.len()).then(|| {
                let role = |f: fn(&RoleCpu) -> f64| median(&mut v.iter().map(f).collect());
                RoleCpu {
                    aicpu_ns: role(|c| c.aicpu_ns),
                    aicore_ns: role(|c| c.aicore_ns),
                    dfx_host_ns: role(|c| c.dfx_host_ns),
                }
            })
        })
        .collect();
    let rows = configs
        .into_iter()
        .zip(meds.iter().zip(paired).zip(counts).zip(cpu_meds))
        .map(|((config, _), (((&tps, ratio_paired), (records, dropped, stall_waits)), cpu))| {
            CostRow {
                config,
                tasks_per_s: tps,
                ratio: tps / meds[0],
                ratio_paired,
                records,
                dropped,
                stall_waits,
                cpu,
            }
        })
        .collect();
    Ok(rows)
}

/// The run model of one storm with every subsystem on, on the full path `ferry run` takes
/// (default pools, Block): what the write-phase and trace-phase measurements write.
///
/// # Errors
/// A run or a collection that failed.
pub fn storm_model(
    arch: Arch,
    size: Size,
) -> Result<RunModel, Box<dyn std::error::Error + Send + Sync>> {
    let cfg = RunnerConfig::default_for(arch);
    let mut r = DeviceRunner::new(cfg)?;
    let run = Example::Storm.build(size);
    r.register_callable(1, run.callable.clone())?;
    let chip = DfxChip::of(&cfg, run.args.scratch_bytes);
    let s = DfxSession::start_on(&DfxOptions::all(), chip, r.device())?;
    r.attach_dfx_session(Some(&s))?;
    let out = r.run(1, run.args.clone());
    r.attach_dfx_session(None)?;
    run.verify(&out?)?;
    Ok(s.finish()?)
}
