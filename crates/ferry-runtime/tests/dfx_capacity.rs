//! Default-sized DFX pools keep the path cold: with every subsystem on and default settings, no
//! lane of any built-in example waits at a gate (seed 000: "normal-sized pools keep the path cold
//! so it never triggers in production runs"). Counted waits, not time: a wait of any length,
//! even under one device tick, counts.
//!
//! Its own test binary, so that no other test's chip competes for the two CPUs of a CI machine
//! while it runs (the pools are sized for the host falling ~30 ms behind, not for a second chip).
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::dfx::{DfxChip, DfxOptions, DfxSession, HOST_THREADS};
use ferry_runtime::host::{DeviceRunner, RunnerConfig};
use ferry_sim::Arch;

#[test]
fn default_pools_record_no_gate_wait_with_every_subsystem_on() {
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
        let waited: Vec<(&str, u64)> = m
            .loss
            .lanes
            .iter()
            .filter(|l| l.stall_waits > 0 || l.stall_cycles > 0)
            .map(|l| (l.lane.as_str(), l.stall_waits))
            .collect();
        assert!(waited.is_empty(), "{ex:?}: lanes that waited at a gate: {waited:?}");
        assert!(m.loss.lanes.len() > 50, "{ex:?}: every subsystem's lanes are accounted");
    }
}
