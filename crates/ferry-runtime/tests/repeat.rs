//! `DeviceRunner::repeat` (`ferry run --repeat N`): the same graph N times back to back through
//! the launch pipeline, each run's outputs checked in launch order.
use ferry_runtime::examples::{Example, ExampleVerifyError};
use ferry_runtime::host::{DeviceRunner, RepeatError, RunnerConfig, TensorInit, Variant};
use ferry_runtime::RunError;
use ferry_sim::Arch;
use std::time::Duration;

fn runner(arch: Arch, slots: u32) -> DeviceRunner {
    let cfg = RunnerConfig { timeout: Duration::from_secs(10), ..RunnerConfig::small(arch) };
    DeviceRunner::new(cfg.with_launch_slots(slots)).unwrap()
}

/// Every run verifies and the pipeline keeps the runner's slots busy: an identical graph
/// publishes its descriptor once per slot, then nothing.
#[test]
fn repeated_runs_all_verify_and_publish_no_descriptor_once_warm() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for (arch, variant, slots) in [
        (Arch::A2a3, Variant::HostBuiltGraph, 2),
        (Arch::A5, Variant::DeviceOrchestrated, 3),
        (Arch::A2a3, Variant::DeviceOrchestrated, 1),
    ] {
        let what = format!("{arch:?} {variant:?} {slots} slots");
        let mut r = runner(arch, slots);
        let ex = Example::Vector.build(ferry_runtime::examples::Size::Small).with_variant(variant);
        r.register_callable(0, ex.callable.clone()).unwrap();
        let mut checked = Vec::new();
        let rep = r
            .repeat(
                0,
                8,
                |_| ex.args.clone(),
                |k, out| {
                    checked.push(k);
                    ex.verify(out).map(|_| ())
                },
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(checked, (0..8).collect::<Vec<_>>(), "{what}: checked in launch order");
        assert_eq!((rep.runs, rep.slots), (8, slots), "{what}");
        assert!(rep.runs_per_s() > 0.0);
        let s = r.launch_stats().unwrap();
        assert_eq!(s.descriptor_copies, u64::from(slots), "{what}: one cold copy per slot");
        assert_eq!(s.publishes, 8, "{what}");
        assert!(!r.is_busy(), "{what}: every run finalized");
        r.finalize().unwrap();
    }
}

/// A wrong output in run k of N is reported as run k (the device really computes it: run k's
/// first input differs), the runs after it are not checked, and the runner is idle and usable.
#[test]
fn a_wrong_output_in_run_k_is_reported_as_run_k() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for slots in [1, 2] {
        let mut r = runner(Arch::A2a3, slots);
        let ex = Example::Vector.build(ferry_runtime::examples::Size::Small);
        let ex = ex.with_variant(Variant::HostBuiltGraph);
        r.register_callable(0, ex.callable.clone()).unwrap();
        let bad = 3;
        let mut args = |k: u32| {
            let mut a = ex.args.clone();
            if k == bad {
                if let TensorInit::Data(v) = &mut a.tensors[0] {
                    v[17] += 1.0;
                }
            }
            a
        };
        let mut checked = Vec::new();
        let err = r
            .repeat(0, 6, &mut args, |k, out| {
                checked.push(k);
                ex.verify(out).map(|_| ())
            })
            .unwrap_err();
        assert_eq!(err.run(), bad, "{slots} slots: {err}");
        assert!(
            matches!(
                err,
                RepeatError::Check {
                    run: 3,
                    runs: 6,
                    source: ExampleVerifyError::Mismatch { index: 17, .. }
                }
            ),
            "{slots} slots: {err:?}"
        );
        assert!(err.to_string().starts_with("run 3 of runs 0..6: wrong output"), "{err}");
        assert_eq!(checked, [0, 1, 2, 3], "{slots} slots: nothing after run k is checked");
        assert!(!r.is_busy(), "{slots} slots: the runs after k were finalized too");
        ex.verify(&r.run(0, ex.args.clone()).unwrap()).unwrap();
    }
}

/// A run that fails on the device (a bad argument found in prepare here) is reported with its
/// index; earlier runs still held are finalized and checked first.
#[test]
fn a_failed_run_is_reported_with_its_index() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let mut r = runner(Arch::A5, 2);
    let ex = Example::Vector.build(ferry_runtime::examples::Size::Small);
    r.register_callable(0, ex.callable.clone()).unwrap();
    let err = r
        .repeat(
            0,
            5,
            |k| {
                let mut a = ex.args.clone();
                if k == 2 {
                    a.tensors[0] = TensorInit::Device { addr: ferry_sim::DevicePtr(3), bytes: 4 };
                }
                a
            },
            |_, out| ex.verify(out).map(|_| ()),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            RepeatError::Run {
                run: 2,
                runs: 5,
                source: RunError::MisalignedTensor { tensor: 0, addr: 3, bytes: 4 }
            }
        ),
        "{err:?}"
    );
    assert!(!r.is_busy());
    ex.verify(&r.run(0, ex.args.clone()).unwrap()).unwrap();
}
