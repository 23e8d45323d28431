//! A user orchestration library (`examples/orchestration-template`, built offline with cargo)
//! registered as callables on both arches and both variants: the graph it builds from a device
//! tensor's values, the outputs, and a function's own failure named with its library, function
//! and task.
#[path = "support/template.rs"]
mod template;

use ferry_runtime::host::{Callable, DeviceRunner, RunArgs, RunnerConfig, TensorInit, Variant};
use ferry_runtime::{DeviceFault, RunError, SubmitError};
use ferry_sim::Arch;

const ROWS: usize = 6;
const COLS: usize = 16;

fn args(lens: [i32; ROWS]) -> RunArgs {
    let x: Vec<f32> = (0..ROWS * COLS).map(|i| i as f32 * 0.25 - 3.0).collect();
    let lens: Vec<f32> = lens.iter().map(|&n| f32::from_bits(n as u32)).collect();
    RunArgs {
        tensors: vec![TensorInit::Data(x), TensorInit::Data(lens), TensorInit::Zeros(ROWS * COLS)],
        scalars: vec![COLS as u64],
        scratch_bytes: 64 << 10,
    }
}

/// `out[r][c] = 3 x[r][c]` for `c < lens[r]`, else 0.
fn expected(lens: [i32; ROWS]) -> Vec<f32> {
    (0..ROWS * COLS)
        .map(|i| {
            let (r, c) = (i / COLS, i % COLS);
            if (c as i32) < lens[r] {
                3.0 * (i as f32 * 0.25 - 3.0)
            } else {
                0.0
            }
        })
        .collect()
}

fn runner(arch: Arch) -> (DeviceRunner, std::sync::Arc<ferry_runtime::host::LoadedOrchLibrary>) {
    let r = DeviceRunner::new(RunnerConfig::small(arch)).unwrap();
    let lib = r.load_orchestration_file(template::orch_template_lib()).unwrap();
    assert_eq!(lib.name(), "orchestration-template");
    (r, lib)
}

#[test]
fn the_graph_follows_the_lengths_read_at_orchestration_time_on_both_arches_and_variants() {
    for arch in [Arch::A2a3, Arch::A5] {
        // One runner per variant: a runner's resident AICPU program is one variant's.
        for variant in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            let (mut r, lib) = runner(arch);
            let id = 0;
            r.register_callable(id, Callable::library(&lib, "ragged_rows", variant).unwrap())
                .unwrap();
            for lens in [[16, 3, 0, 9, 1, 16], [0, 0, 5, 0, 0, 0]] {
                let out = r.run(id, args(lens)).unwrap();
                let rows = lens.iter().filter(|&&n| n > 0).count() as u64;
                assert_eq!(out.stats.tasks, 2 * rows + 1, "{arch:?} {variant:?} {lens:?}");
                assert_eq!(
                    out.tensors[2].as_deref(),
                    Some(&expected(lens)[..]),
                    "{arch:?} {variant:?}"
                );
            }
            r.finalize().unwrap();
        }
    }
}

#[test]
fn a_failing_function_is_named_with_its_library_and_task() {
    for variant in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
        let (mut r, lib) = runner(Arch::A2a3);
        r.register_callable(0, Callable::library(&lib, "fails_after_one", variant).unwrap())
            .unwrap();
        let e = r.run(0, args([1; ROWS])).unwrap_err();
        match &e {
            RunError::Orchestration { library, function, fault } => {
                assert_eq!(
                    (library.as_str(), function.as_str()),
                    ("orchestration-template", "fails_after_one")
                );
                assert_eq!(
                    *fault,
                    DeviceFault::Submit(SubmitError::Function {
                        task: 1,
                        code: 7,
                        panicked: false
                    })
                );
            }
            e => panic!("{variant:?}: {e:?}"),
        }
        let msg = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert!(msg.contains("`fails_after_one` (library `orchestration-template`)"), "{msg}");
        assert!(msg.contains("task 1: the orchestration function failed with code 7"), "{msg}");
        // The runner goes on.
        r.register_callable(1, Callable::library(&lib, "ragged_rows", variant).unwrap()).unwrap();
        assert_eq!(r.run(1, args([2; ROWS])).unwrap().stats.tasks, 2 * ROWS as u64 + 1);
    }
}

#[test]
fn an_unknown_function_lists_the_library_s() {
    let (r, lib) = runner(Arch::A2a3);
    let e = Callable::library(&lib, "nope", Variant::HostBuiltGraph).unwrap_err();
    assert_eq!(
        e.to_string(),
        "orchestration library `orchestration-template` has no function `nope` (it has: \
         ragged_rows, fails_after_one)"
    );
    drop(r);
}

fn fixtures(arch: Arch) -> (DeviceRunner, std::sync::Arc<ferry_runtime::host::LoadedOrchLibrary>) {
    let r = DeviceRunner::new(RunnerConfig::small(arch)).unwrap();
    let lib = r.load_orchestration_file(template::orch_fixtures_lib()).unwrap();
    (r, lib)
}

/// `t0 = [3, …]`, `t1 = [1, …]`: `t2 = t0 + t1` holds 4, so 4 more tasks add `t1` again.
fn read_back_args() -> RunArgs {
    RunArgs {
        tensors: vec![
            TensorInit::Data(vec![3.0; 8]),
            TensorInit::Data(vec![1.0; 8]),
            TensorInit::Zeros(8),
        ],
        scalars: vec![],
        scratch_bytes: 0,
    }
}

#[test]
fn a_read_waits_for_its_producer_on_the_device_and_is_refused_host_built() {
    for arch in [Arch::A2a3, Arch::A5] {
        let (mut r, lib) = fixtures(arch);
        let c = Callable::library(&lib, "reads_back", Variant::DeviceOrchestrated).unwrap();
        r.register_callable(0, c).unwrap();
        let out = r.run(0, read_back_args()).unwrap();
        assert_eq!(out.stats.tasks, 5, "{arch:?}");
        assert_eq!(out.tensors[2].as_deref(), Some(&[8.0f32; 8][..]), "{arch:?}");
        r.finalize().unwrap();

        let (mut r, lib) = fixtures(arch);
        let c = Callable::library(&lib, "reads_back", Variant::HostBuiltGraph).unwrap();
        r.register_callable(0, c).unwrap();
        match r.run(0, read_back_args()).unwrap_err() {
            RunError::Orchestration { fault, .. } => assert_eq!(
                fault,
                DeviceFault::Submit(SubmitError::PendingRead {
                    task: 1,
                    tensor: 2,
                    offset: 0,
                    len: 4
                })
            ),
            e => panic!("{arch:?}: {e:?}"),
        }
    }
}

#[test]
fn a_panicking_function_fails_the_run_naming_it() {
    for variant in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
        let (mut r, lib) = fixtures(Arch::A2a3);
        r.register_callable(0, Callable::library(&lib, "panics", variant).unwrap()).unwrap();
        match r.run(0, read_back_args()).unwrap_err() {
            RunError::Orchestration { library, function, fault } => {
                assert_eq!((library.as_str(), function.as_str()), ("orch-fixtures", "panics"));
                let panicked = ferry_abi::services::STATUS_PANIC;
                assert_eq!(
                    fault,
                    DeviceFault::Submit(SubmitError::Function {
                        task: 1,
                        code: panicked,
                        panicked: true
                    })
                );
            }
            e => panic!("{variant:?}: {e:?}"),
        }
    }
}
