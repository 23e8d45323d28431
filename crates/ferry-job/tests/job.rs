//! The job API end to end: typed outcomes and typed errors (a kernel fault naming its kernel,
//! library, task and workload line; a kernel library of another ABI version; a device program
//! of another launch ABI; the options and
//! directories refused before the chip starts), an in-memory graph with its check, and what an
//! observer hears.
#[path = "../../ferry-runtime/tests/support/template.rs"]
mod template;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_abi::services::STATUS_ABI_VERSION_MISMATCH;
use ferry_job::{CaseKind, Job, JobError, Observer, Profile};
use ferry_launch::loader::LoadError;
use ferry_profile::{Manifest, ManifestError, RunDirError, RunOutcome};
use ferry_programs::{Program, ProgramKind};
use ferry_runtime::device::task::{Orchestrate, Task, TensorId};
use ferry_runtime::examples::Example;
use ferry_runtime::host::dfx::DfxOptions;
use ferry_runtime::host::{Callable, KernelLoadError, RunArgs, TensorInit, Variant};
use ferry_runtime::{DeviceFault, KernelFault, LaunchFailure, RunError, SubmitError};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-job-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A one-task workload of `kernel` on a 16-element inout tensor.
fn one_task(dir: &Path, kernel: &str) -> PathBuf {
    let wl = dir.join(format!("{kernel}.toml"));
    std::fs::write(
        &wl,
        format!(
            "[workload]\nname = \"{kernel}\"\nverify = \"host-reference\"\noutputs = [\"x\"]\n\
             [[tensor]]\nname = \"x\"\nshape = [16]\n\
             [[graph]]\nkernel = \"{kernel}\"\nargs = [{{ tensor = \"x\", role = \"inout\" }}]\n"
        ),
    )
    .unwrap();
    wl
}

fn all_five() -> DfxOptions {
    DfxOptions {
        swimlane: 4,
        pmu: 2,
        dep_gen: true,
        dump_args: 3,
        scope_stats: true,
        ..DfxOptions::default()
    }
}

#[test]
fn a_kernel_fault_comes_back_typed_naming_kernel_library_task_and_line() {
    let _bound = ferry_watchdog::bound("the job's run");
    let d = scratch("fault");
    let wl = one_task(&d, "overrun");
    let out = d.join("out");
    let e = Job::workload(&wl)
        .small(true)
        .kernels([template::faulty_lib()])
        .dfx(all_five())
        .out(&out)
        .run()
        .expect_err("the kernel writes past its output");
    let JobError::Run { kind, case, failure, profile } = &e else { panic!("{e:?}") };
    assert_eq!((*kind, case.as_str()), (CaseKind::Workload, "overrun"));
    let k = failure.kernel.as_ref().expect("the kernel is named");
    assert_eq!(
        (k.task, k.name.as_str(), k.library.as_deref()),
        (0, "overrun", Some("faulty-kernels"))
    );
    assert_eq!(k.fault, KernelFault::OutOfBounds { kernel: k.id, index: 0 });
    assert!(k.at.as_deref().is_some_and(|a| a.ends_with("overrun.toml:8:1")), "{:?}", k.at);
    assert!(matches!(
        failure.fault(),
        Some(DeviceFault::Kernel { task: 0, fault: KernelFault::OutOfBounds { .. }, .. })
    ));
    // The profile was committed, complete and marked failed with the same message.
    assert_eq!(profile.as_deref(), Some(out.as_path()));
    let m = Manifest::verified(&out).unwrap();
    let Some(RunOutcome::Failed { error, .. }) = m.outcome else { panic!("{:?}", m.outcome) };
    assert!(error.contains("wrote past the end of tensor argument 0"), "{error}");
    let p = Profile::open(&out).unwrap();
    assert!(p.failure().is_some());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_kernel_library_of_another_abi_version_is_a_typed_load_error() {
    let _bound = ferry_watchdog::bound("the job's chip");
    let d = scratch("abi");
    let mut bytes = std::fs::read(template::template_lib()).unwrap();
    let magic = u64::from_le_bytes(*b"FRYKERNL").to_le_bytes();
    let at = bytes
        .windows(12)
        .position(|w| w[..8] == magic && w[8..] == 3u32.to_le_bytes())
        .expect("the descriptor's magic and version");
    bytes[at + 8..at + 12].copy_from_slice(&4u32.to_le_bytes());
    let lib = d.join("abi4.so");
    std::fs::write(&lib, &bytes).unwrap();
    let e = Job::example(Example::Vector).small(true).kernels([&lib]).run().unwrap_err();
    match &e {
        JobError::Kernels {
            path,
            source: KernelLoadError::Load(LoadError::KernelAbiVersion { found, expected, .. }),
        } => {
            assert_eq!(path, &lib);
            assert_eq!((*found, *expected), (4, 3));
        }
        other => panic!("expected the ABI mismatch, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_device_program_of_another_launch_abi_fails_the_run_with_a_typed_abi_mismatch() {
    let _bound = ferry_watchdog::bound("the job's run");
    // The device-orchestrated program, built as if against the next launch ABI: it loads,
    // reports its identity and takes the callable, then refuses the run's `KernelArgs`.
    let bytes: &'static [u8] =
        Box::leak(std::fs::read(template::skewed_aicpu_program()).unwrap().into_boxed_slice());
    let skewed: &'static Program = Box::leak(Box::new(Program {
        name: "skewed-launch-abi",
        package: "ferry-skewed-aicpu-program",
        kind: ProgramKind::Aicpu,
        bytes,
        fingerprint: ferry_abi::services::fingerprint(bytes),
        build_id: 0,
    }));
    let e = Job::example(Example::Vector)
        .small(true)
        .configure(|c| c.programs.device_orchestrated = skewed)
        .run()
        .expect_err("the program refuses this launch ABI");
    let JobError::Run { kind, case, failure, profile: None } = &e else { panic!("{e:?}") };
    assert_eq!((*kind, case.as_str()), (CaseKind::Example, "vector"));
    assert!(failure.kernel.is_none(), "{failure:?}");
    let RunError::Launch(LaunchFailure::Program(load)) = &failure.error else {
        panic!("expected the AICPU program's refusal, got {:?}", failure.error)
    };
    let LoadError::AbiMismatch { entry, status } = &**load else { panic!("{load:?}") };
    assert_eq!((entry.as_str(), *status), ("ferry_aicpu_exec", STATUS_ABI_VERSION_MISMATCH));
}

#[test]
fn options_and_directories_are_refused_before_the_chip_starts() {
    let d = scratch("refused");
    let dfx = DfxOptions { swimlane: 1, ..DfxOptions::default() };
    let job = || Job::example(Example::Vector).small(true);
    assert!(matches!(job().dfx(dfx).run(), Err(JobError::DfxNeedsOut)));
    assert!(matches!(job().chrome_trace(true).run(), Err(JobError::ChromeNeedsSwimlane)));
    assert!(matches!(job().repeat(0).run(), Err(JobError::NoRuns)));
    assert!(matches!(
        job().dfx(dfx).out(&d).repeat(1000).run(),
        Err(JobError::TooManyRuns { repeat: 1000, .. })
    ));
    // A complete run there is refused without `force`, named by its directory.
    job().out(&d).run().unwrap();
    match job().out(&d).run() {
        Err(JobError::OutDir {
            dir,
            source: RunDirError::Manifest(ManifestError::Occupied { .. }),
        }) => assert_eq!(dir, d),
        other => panic!("expected the occupied directory, got {other:?}"),
    }
    job().out(&d).force(true).run().unwrap();
    // A workload that does not parse is refused with its line before a chip starts.
    let bad = d.join("bad.toml");
    std::fs::write(&bad, "[workload]\nname = \"b\"\n[[graph]]\nkernel = 7\n").unwrap();
    match Job::workload(&bad).run() {
        Err(JobError::Workload(w)) => assert_eq!(w.line(), Some(4), "{w}"),
        other => panic!("expected the workload's error, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// One task of the built-in `copy`: tensor 0 into tensor 1.
fn copy_graph(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    let copy = o.scalar(0)? as u32;
    o.submit(&Task::new(copy).input(TensorId(0)).output(TensorId(1)))?;
    Ok(())
}

#[test]
fn an_in_memory_graph_runs_with_its_check_and_a_failed_check_is_a_wrong_result() {
    let _bound = ferry_watchdog::bound("the job's run");
    let copy = ferry_runtime::device::kernels::K_COPY;
    let args = RunArgs {
        tensors: vec![TensorInit::Data((0..64).map(|i| i as f32).collect()), TensorInit::Zeros(64)],
        scalars: vec![u64::from(copy)],
        scratch_bytes: 0,
    };
    for variant in [Variant::HostBuiltGraph, Variant::DeviceOrchestrated] {
        let callable = Callable::new("copy", variant, copy_graph);
        let ok: ferry_job::OutputCheck = Arc::new(|out| {
            let y = out.tensors[1].as_deref().ok_or("no output")?;
            let want: Vec<f32> = (0..64).map(|i| i as f32).collect();
            if y == want {
                Ok(y.iter().map(|v| f64::from(*v)).sum())
            } else {
                Err("y is not x".into())
            }
        });
        let done = Job::graph("copy", callable.clone(), args.clone())
            .check(ok)
            .variant(variant)
            .configure(|c| c.path = ferry_runtime::host::LaunchPath::InProcess)
            .run()
            .unwrap();
        assert_eq!(done.cases[0].checksum, (0..64).sum::<i32>() as f64);
        assert_eq!(done.cases[0].output.stats.tasks, 1);
        let wrong: ferry_job::OutputCheck = Arc::new(|_| Err("always wrong".into()));
        let e = Job::graph("copy", callable, args.clone())
            .check(wrong)
            .variant(variant)
            .configure(|c| c.path = ferry_runtime::host::LaunchPath::InProcess)
            .run()
            .unwrap_err();
        assert!(
            matches!(&e, JobError::WrongResult { what, profile: None, .. } if what == "always wrong"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "graph `copy` produced a wrong result: always wrong");
    }
}

#[derive(Default)]
struct Heard {
    events: RefCell<Vec<String>>,
}

impl Observer for Heard {
    fn chip_started(&self, s: &ferry_job::JobStart<'_>) {
        self.events.borrow_mut().push(format!("chip {}", s.cases.join(",")));
    }
    fn graph_ready(&self, g: &ferry_job::GraphReady<'_>) {
        self.events.borrow_mut().push(format!("graph {} {}", g.name, g.tasks));
    }
    fn profile_written(&self, case: &str, p: &ferry_runtime::host::profile::WrittenProfile) {
        self.events.borrow_mut().push(format!("profile {case} {}", p.runs.len()));
    }
    fn repeated(&self, case: &str, r: &ferry_runtime::host::RepeatReport) {
        self.events.borrow_mut().push(format!("repeated {case} {}", r.runs));
    }
}

#[test]
fn an_observer_hears_the_chip_the_graph_the_repetition_and_the_profile() {
    let _bound = ferry_watchdog::bound("the job's runs");
    let d = scratch("observer");
    let wl = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/workloads/diamond.toml");
    let heard = Heard::default();
    let dfx = DfxOptions { swimlane: 1, ..DfxOptions::default() };
    let done = Job::workload(wl)
        .small(true)
        .dfx(dfx)
        .out(&d)
        .force(true)
        .repeat(2)
        .run_observed(&heard)
        .unwrap();
    let tasks = done.cases[0].output.stats.tasks;
    // Two runs and the one whose output is checked, in one session: three run directories.
    assert_eq!(
        *heard.events.borrow(),
        [
            "chip ".to_string(),
            format!("graph diamond {tasks}"),
            "profile diamond 3".into(),
            "repeated diamond 2".into()
        ]
    );
    assert_eq!(done.cases[0].profile.as_ref().unwrap().runs.len(), 3);
    assert!(Manifest::verified(&d).unwrap().outcome == Some(RunOutcome::Ok));
    let _ = std::fs::remove_dir_all(&d);
}
