//! The a5 host-built graph's scheduler DFX export goes through the launch transaction's
//! `scheduler_diagnostics` (docs/design/launch.md): a run's scheduler records are labelled with the run only
//! when its own launch metadata (the resident scheduler state) was published.
use ferry_launch::transaction::{CopyTarget, DiagnosticsError, PublishError};
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::dfx::{DfxChip, DfxOptions, DfxSession};
use ferry_runtime::host::{DeviceRunner, RunnerConfig, Variant};
use ferry_runtime::{LaunchFailure, RunError};
use ferry_sim::fault::FaultPoint;
use ferry_sim::Arch;
use ferry_sim::DeviceError;
use std::time::Duration;

fn sched_records(s: DfxSession) -> usize {
    let m = s.finish().unwrap();
    m.swimlane.map_or(0, |sw| sw.sched_phases.iter().map(Vec::len).sum())
}

#[test]
fn a_failed_metadata_publication_labels_no_scheduler_records_with_its_run() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let cfg = RunnerConfig { timeout: Duration::from_secs(10), ..RunnerConfig::small(Arch::A5) };
    // One slot: run B is prepared on the very slot whose previous run (A) published.
    let mut r = DeviceRunner::new(cfg.with_launch_slots(1)).unwrap();
    let ex = Example::Vector.build(Size::Small).with_variant(Variant::HostBuiltGraph);
    r.register_callable(0, ex.callable.clone()).unwrap();
    let chip = DfxChip {
        arch: Arch::A5,
        threads: cfg.aicpu_threads,
        aic: cfg.aic,
        aiv: cfg.aiv,
        task_window: cfg.task_window,
        scratch_bytes: ex.args.scratch_bytes,
    };
    let opts = DfxOptions { swimlane: 3, ..DfxOptions::default() };
    let session = |r: &mut DeviceRunner| {
        let s = DfxSession::start_on(&opts, chip, r.device()).unwrap();
        r.attach_dfx_session(Some(&s)).unwrap();
        s
    };

    // Run A: published, so its scheduler records carry its run.
    let s = session(&mut r);
    let a = r.run(0, ex.args.clone()).unwrap();
    ex.verify(&a).unwrap();
    r.attach_dfx_session(None).unwrap();
    let diag_a = a.scheduler.clone().expect("an a5 host-built run exports scheduler diagnostics");
    assert_eq!(r.scheduler_diagnostics(0), Ok(diag_a.clone()));
    assert_eq!(diag_a.metadata_regions, 1, "the resident regs table");
    assert!(diag_a.metadata_bytes > 0);
    assert!(sched_records(s) > 0, "run A recorded scheduler phases");

    // Run B: the metadata copy (the first copy its launch queues: the prefix is resident) fails.
    let s = session(&mut r);
    let p = r.prepare(0, ex.args.clone()).unwrap();
    r.device().faults().fail_next(FaultPoint::Copy);
    let err = r.launch(p).unwrap_err();
    r.device().faults().clear();
    r.attach_dfx_session(None).unwrap();
    // The typed cause: the publication's metadata copy, failed by the injected fault.
    let copy = matches!(
        &err,
        RunError::Launch(LaunchFailure::Publish(PublishError::Copy {
            target: CopyTarget::Metadata(0),
            error,
        })) if matches!(error.source_as::<DeviceError>(), Some(DeviceError::Injected(_)))
    );
    assert!(copy, "{err:?}");
    // Nothing is exported for B, and in particular not A's diagnostics.
    let after = r.scheduler_diagnostics(0);
    assert!(
        matches!(after, Err(DiagnosticsError::NoRun | DiagnosticsError::NotPublished { .. })),
        "{after:?}"
    );
    assert_eq!(sched_records(s), 0, "no scheduler record belongs to run B");

    // The runner is usable; run C's diagnostics are its own, not A's.
    let c = r.run(0, ex.args.clone()).unwrap();
    ex.verify(&c).unwrap();
    let diag_c = c.scheduler.expect("run C exports");
    assert_ne!(diag_c.run, diag_a.run);
    assert_eq!(diag_c.metadata_bytes, diag_a.metadata_bytes);
    r.finalize().unwrap();
}

/// Runs that stage no launch metadata export no scheduler diagnostics.
#[test]
fn other_combinations_stage_no_scheduler_metadata() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for (arch, variant) in [
        (Arch::A5, Variant::DeviceOrchestrated),
        (Arch::A2a3, Variant::HostBuiltGraph),
        (Arch::A2a3, Variant::DeviceOrchestrated),
    ] {
        let mut r = DeviceRunner::new(RunnerConfig::small(arch)).unwrap();
        let ex = Example::Vector.build(Size::Small).with_variant(variant);
        r.register_callable(0, ex.callable.clone()).unwrap();
        let out = r.run(0, ex.args.clone()).unwrap();
        ex.verify(&out).unwrap();
        assert_eq!(out.scheduler, None, "{arch:?} {variant:?}");
    }
}
