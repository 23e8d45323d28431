//! Default-sized DFX pools keep the path cold (docs/design/dfx-backpressure.md: "normal-sized pools keep the path cold
//! so it never triggers in production runs"): with every subsystem on and default settings,
//! each lane's pool holds the records its lane produces while the whole chip runs
//! [`HOST_DELAY_TASKS`] tasks (or the lane's whole run, where that is less), for every built-in
//! example at `ferry run`'s sizes.
//!
//! The margin is computed from what the run produced (records per lane and tasks: counts, not
//! times), so it does not depend on how the host's scheduler served the drain during the test.
//! Whether the host keeps up on a given machine is a measurement: `ferry bench dfx` reports the
//! gate waits of every round.
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::dfx::{
    Capacity, DfxChip, DfxOptions, DfxRegion, DfxSession, HOST_THREADS,
};
use ferry_runtime::host::{DeviceRunner, RunnerConfig};
use ferry_sim::Arch;

/// Tasks the whole chip may run while the host is away and no lane waits: 12 ms at 1 M tasks/s
/// (the DFX-off storm on the 2-core development machine runs at 0.45-1.1 M tasks/s). With all
/// five subsystems the storm's tightest lane is DepGen's (its pool holds ~14,600 storm tasks'
/// chains); the per-core swimlane and PMU lanes hold ~65,000, the orchestrator's 32,768.
const HOST_DELAY_TASKS: u64 = 12_000;

/// The region a loss line's lane belongs to (its name: `"{region} core N"` / `"{region} thread
/// N"`).
fn region_of(lane: &str) -> DfxRegion {
    match lane.split(' ').next() {
        Some("aicore") => DfxRegion::Aicore,
        Some("aicpu") => DfxRegion::Aicpu,
        Some("sched") => DfxRegion::Sched,
        Some("orch") => DfxRegion::Orch,
        Some("pmu") => DfxRegion::Pmu,
        Some("scope") => DfxRegion::Scope,
        Some("dep_gen") => DfxRegion::DepGen,
        Some("args") => DfxRegion::Args,
        _ => panic!("a lane of no known region: {lane}"),
    }
}

#[test]
fn default_pools_hold_the_host_delay_with_every_subsystem_on() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // The full path, as `ferry run` takes it, at `ferry run`'s sizes.
    let cfg = RunnerConfig::default_for(Arch::A2a3);
    let mut r = DeviceRunner::new(cfg).unwrap();
    for (id, ex) in Example::ALL.into_iter().enumerate() {
        let run = ex.build(Size::Full);
        r.register_callable(id as u32, run.callable.clone()).unwrap();
        let chip = DfxChip {
            arch: Arch::A2a3,
            threads: cfg.aicpu_threads,
            aic: cfg.aic,
            aiv: cfg.aiv,
            task_window: cfg.task_window,
            scratch_bytes: run.args.scratch_bytes,
        };
        let s = DfxSession::start_on(&DfxOptions::all(), chip, r.device()).unwrap();
        assert_eq!(s.host_threads(), HOST_THREADS, "host threads do not grow with subsystems");
        r.attach_dfx_session(Some(&s)).unwrap();
        let out = r.run(id as u32, run.args.clone()).unwrap();
        r.attach_dfx_session(None).unwrap();
        run.verify(&out).unwrap();
        let m = s.finish().unwrap();
        assert!(m.loss.reconciles(), "{ex:?}");
        assert_eq!(m.loss.totals().2, 0, "{ex:?}: nothing dropped");
        let tasks = out.stats.tasks.max(1);
        // Per region: its records over its lanes that wrote any (a per-core lane's share of the
        // tasks depends on which cores the schedulers found free, a region's total does not).
        let mut regions: std::collections::BTreeMap<DfxRegion, (u64, u64)> = Default::default();
        for l in m.loss.lanes.iter().filter(|l| l.produced > 0) {
            let e = regions.entry(region_of(&l.lane)).or_default();
            *e = (e.0 + l.produced, e.1 + 1);
        }
        for (region, (produced, lanes)) in regions {
            let cap = Capacity::for_region(region);
            let pool = u64::from(cap.records_per_buffer) * u64::from(cap.buffers_per_lane);
            // What one lane produces while the chip runs HOST_DELAY_TASKS tasks (a run shorter
            // than that: all of it).
            let per_lane = produced.div_ceil(lanes);
            let during_delay = (per_lane * HOST_DELAY_TASKS).div_ceil(tasks).min(per_lane);
            assert!(
                pool >= during_delay,
                "{ex:?}: a {region:?} lane holds {pool} records, but produces {during_delay} \
                 while the chip runs {HOST_DELAY_TASKS} tasks ({produced} over {lanes} lanes \
                 and {tasks} tasks)"
            );
        }
        assert!(m.loss.lanes.len() > 50, "{ex:?}: every subsystem's lanes are accounted");
    }
}
