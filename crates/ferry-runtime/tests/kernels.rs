//! Custom kernels without rebuilding ferry: the template kernel library
//! (`examples/kernel-template`) is built with cargo (once, offline, into this test's temp
//! dir), loaded into runners through the AICPU OS's loader, and run in a graph naming its
//! kernels on both variants; the outputs are checked against the library's own host
//! reference. Bad libraries give typed errors and leave the runner usable.
use ferry_abi::kernel_lib::{CUSTOM_KERNEL_BASE, KERNEL_LIB_ABI_VERSION, KERNEL_LIB_MAGIC};
use ferry_launch::loader::LoadError;
use ferry_runtime::device::task::{Orchestrate, Task, TensorId};
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::{
    Callable, DeviceRunner, KernelLoadError, RunArgs, RunnerConfig, TensorInit, Variant,
};
use ferry_runtime::{DeviceFault, KernelFault, RunError, SubmitError};
use ferry_sim::Arch;

#[path = "support/template.rs"]
mod template;
use template::template_lib;

/// saxpy on tensors 0, 1 → 2, then clamp of 2 in place. Kernel ids and their scalars come from
/// the run's scalars: `[saxpy, a, clamp, lo, hi, blocks]`.
fn saxpy_then_clamp(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    let (saxpy, a, clamp) = (o.scalar(0)? as u32, o.scalar(1)?, o.scalar(2)? as u32);
    let (lo, hi, blocks) = (o.scalar(3)?, o.scalar(4)?, o.scalar(5)? as u32);
    let (x, y, out) = (TensorId(0), TensorId(1), TensorId(2));
    o.submit(&Task::new(saxpy).input(x).input(y).output(out).scalar(a).blocks(blocks))?;
    o.submit(&Task::new(clamp).inout(out).scalar(lo).scalar(hi).blocks(blocks))?;
    Ok(())
}

/// saxpy with one tensor too few.
fn saxpy_short(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    let saxpy = o.scalar(0)? as u32;
    o.submit(&Task::new(saxpy).input(TensorId(0)).output(TensorId(2)).scalar(0).blocks(1))?;
    Ok(())
}

const N: usize = 1000;

fn inputs() -> (Vec<f32>, Vec<f32>) {
    let x: Vec<f32> = (0..N).map(|i| i as f32 * 0.01 - 3.0).collect();
    let y: Vec<f32> = (0..N).map(|i| ((i * 7) % 13) as f32 * 0.25).collect();
    (x, y)
}

fn args(r: &DeviceRunner) -> RunArgs {
    let (saxpy, clamp) =
        (r.kernels().lookup("saxpy").unwrap(), r.kernels().lookup("clamp").unwrap());
    let (x, y) = inputs();
    let f = |v: f32| u64::from(v.to_bits());
    RunArgs {
        tensors: vec![TensorInit::Data(x), TensorInit::Data(y), TensorInit::Zeros(N)],
        scalars: vec![u64::from(saxpy.id), f(1.5), u64::from(clamp.id), f(-2.0), f(4.0), 4],
        scratch_bytes: 0,
    }
}

/// The expected output through the library's host references.
fn expected(r: &DeviceRunner, a: &RunArgs) -> Vec<f32> {
    let (x, y) = inputs();
    let mut t = vec![x, y, vec![0.0; N]];
    r.kernels().host_reference(a.scalars[0] as u32, &mut t, &a.scalars[1..2]).unwrap();
    let mut out = vec![t.pop().unwrap()];
    r.kernels().host_reference(a.scalars[2] as u32, &mut out, &a.scalars[3..5]).unwrap();
    out.pop().unwrap()
}

fn run_custom(r: &mut DeviceRunner, id: u32, variant: Variant) -> Vec<f32> {
    r.register_callable(id, Callable::new("saxpy-clamp", variant, saxpy_then_clamp)).unwrap();
    let a = args(r);
    let want = expected(r, &a);
    // The host reference does what it says, so the comparison means something.
    let (x, y) = inputs();
    for i in [0, 10, 500, N - 1] {
        assert_eq!(want[i], (1.5 * x[i] + y[i]).clamp(-2.0, 4.0), "host reference at {i}");
    }
    assert!(want.contains(&-2.0) && want.contains(&4.0));
    let out = r.run(id, a).unwrap_or_else(|e| panic!("{variant:?}: {e}"));
    assert_eq!(out.stats.tasks, 2);
    // Loaded kernels are counted by name, like built-ins.
    let per: Vec<_> = out.stats.per_kernel.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    assert_eq!(per, [("saxpy", 1), ("clamp", 1)], "{variant:?}");
    let got = out.tensors[2].clone().unwrap();
    assert_eq!(got, want, "{variant:?}: device output differs from the host reference");
    got
}

fn loaded(cfg: RunnerConfig) -> DeviceRunner {
    let mut r = DeviceRunner::new(cfg).unwrap();
    let infos = r.load_kernels_file(template_lib()).unwrap();
    let names: Vec<_> = infos.iter().map(|k| (k.id, k.name.as_str())).collect();
    assert_eq!(
        names,
        [
            (CUSTOM_KERNEL_BASE, "saxpy"),
            (CUSTOM_KERNEL_BASE + 1, "clamp"),
            (CUSTOM_KERNEL_BASE + 2, "relu_nd")
        ]
    );
    assert_eq!(infos[1].tensors, (1, 2));
    assert_eq!(infos[1].scalar_dtypes.len(), 2);
    // `relu_nd` declares a view kernel: its three scalars are layout words.
    assert_eq!(infos.iter().map(|k| k.views).collect::<Vec<_>>(), [false, false, true]);
    assert_eq!(infos[2].scalar_dtypes, [ferry_abi::records::DType::UInt64; 3]);
    assert_eq!(r.kernels().lookup("saxpy").unwrap().library.as_deref(), Some("kernel-template"));
    r
}

#[test]
fn template_kernels_run_on_both_variants_and_match_their_host_reference() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // Host-built graph on the full path (the AICPU program from the loader, Path A).
    let mut full = loaded(RunnerConfig::small(Arch::A2a3));
    run_custom(&mut full, 0, Variant::HostBuiltGraph);
    // Device-orchestrated: the orchestration runs on the AICPU threads and validates every
    // submission against the kernel table the image names in device memory. (On the full path
    // a device-orchestrated callable needs an orchestration object naming the kernels; the
    // in-process path runs the same device half over the AICPU OS's services table.)
    let mut dev =
        loaded(RunnerConfig { via_services: true, ..RunnerConfig::small(Arch::A5) }.in_process());
    run_custom(&mut dev, 0, Variant::DeviceOrchestrated);
    // The AICPU refuses a submission that does not fit the loaded kernel's spec.
    dev.register_callable(1, Callable::new("short", Variant::DeviceOrchestrated, saxpy_short))
        .unwrap();
    let a = args(&dev);
    match dev.run(1, a) {
        Err(RunError::Fault(DeviceFault::Submit(SubmitError::ArgCount {
            kernel,
            tensors,
            ..
        }))) => {
            assert_eq!((kernel, tensors), (CUSTOM_KERNEL_BASE, 2));
        }
        other => panic!("expected an argument-count refusal, got {other:?}"),
    }
    // And the runner still runs.
    let a = args(&dev);
    assert_eq!(dev.run(0, a).unwrap().stats.tasks, 2);
}

#[test]
fn a_runner_without_the_library_refuses_its_kernel_ids() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for variant in [Variant::HostBuiltGraph, Variant::DeviceOrchestrated] {
        let cfg = RunnerConfig { via_services: true, ..RunnerConfig::small(Arch::A2a3) };
        let mut r = DeviceRunner::new(cfg.in_process()).unwrap();
        r.register_callable(0, Callable::new("x", variant, saxpy_short)).unwrap();
        let a = RunArgs {
            tensors: vec![TensorInit::Zeros(4), TensorInit::Zeros(4), TensorInit::Zeros(4)],
            scalars: vec![u64::from(CUSTOM_KERNEL_BASE)],
            scratch_bytes: 0,
        };
        match r.run(0, a) {
            Err(RunError::Fault(DeviceFault::Submit(SubmitError::UnknownKernel {
                kernel,
                ..
            }))) => {
                assert_eq!(kernel, CUSTOM_KERNEL_BASE)
            }
            other => panic!("{variant:?}: expected unknown kernel, got {other:?}"),
        }
    }
}

/// `bytes` with the first occurrence of `from` replaced by `to` (same length).
fn patched(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let at = bytes.windows(from.len()).position(|w| w == from).expect("pattern in the library");
    let mut b = bytes.to_vec();
    b[at..at + to.len()].copy_from_slice(to);
    b
}

fn name_field(s: &str) -> Vec<u8> {
    let mut f = s.as_bytes().to_vec();
    f.resize(32, 0);
    f
}

#[test]
fn bad_libraries_give_typed_errors_and_the_runner_works_afterwards() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let good = std::fs::read(template_lib()).unwrap();
    let mut r = DeviceRunner::new(RunnerConfig::small(Arch::A2a3)).unwrap();
    let magic = KERNEL_LIB_MAGIC.to_le_bytes();
    let mut header = magic.to_vec();
    header.extend_from_slice(&KERNEL_LIB_ABI_VERSION.to_le_bytes());

    // Truncated and corrupt files.
    match r.load_kernels("truncated.so", &good[..good.len() / 3]) {
        Err(KernelLoadError::Load(LoadError::Truncated { .. } | LoadError::Corrupt { .. })) => {}
        other => panic!("truncated: {other:?}"),
    }
    match r.load_kernels("noise.so", &[0x5a; 4096]) {
        Err(KernelLoadError::Load(LoadError::Corrupt { .. })) => {}
        other => panic!("noise: {other:?}"),
    }
    // A shared object without the descriptor export: the built-in kernel library.
    match r.load_kernels("builtin.so", ferry_programs::KERNELS.bytes) {
        Err(KernelLoadError::Load(LoadError::MissingSymbol { symbol, .. })) => {
            assert_eq!(symbol, "ferry_kernel_library")
        }
        other => panic!("missing symbol: {other:?}"),
    }
    // Built against another ABI version.
    let mut v99 = magic.to_vec();
    v99.extend_from_slice(&99u32.to_le_bytes());
    match r.load_kernels("v99.so", &patched(&good, &header, &v99)) {
        Err(KernelLoadError::Load(LoadError::KernelAbiVersion {
            found: 99,
            expected: KERNEL_LIB_ABI_VERSION,
            ..
        })) => {}
        other => panic!("abi version: {other:?}"),
    }
    // A kernel count out of range (the descriptor's count follows the two record sizes).
    let mut counted = header.clone();
    counted.extend_from_slice(&64u32.to_le_bytes());
    counted.extend_from_slice(&72u32.to_le_bytes());
    let mut over = counted.clone();
    counted.extend_from_slice(&3u32.to_le_bytes());
    over.extend_from_slice(&65u32.to_le_bytes());
    match r.load_kernels("over.so", &patched(&good, &counted, &over)) {
        Err(KernelLoadError::Load(LoadError::KernelTable { error, .. })) => {
            assert_eq!(error, ferry_abi::kernel_lib::KernelTableError::Count { count: 65 })
        }
        other => panic!("count: {other:?}"),
    }
    // Two kernels of one library with one name, and one with a built-in's name.
    let dup = patched(&good, &name_field("clamp"), &name_field("saxpy"));
    match r.load_kernels("dup.so", &dup) {
        Err(KernelLoadError::Load(LoadError::DuplicateKernel { first: 0, second: 1, .. })) => {}
        other => panic!("duplicate within: {other:?}"),
    }
    let clash = patched(&good, &name_field("clamp"), &name_field("add"));
    match r.load_kernels("clash.so", &clash) {
        Err(KernelLoadError::DuplicateName { name, existing, .. }) => {
            assert_eq!((name.as_str(), existing.as_str()), ("add", "built-in"))
        }
        other => panic!("duplicate built-in: {other:?}"),
    }
    // Nothing of the refused libraries stayed.
    assert_eq!(r.kernels().loaded_count(), 0);

    // The runner works afterwards: a built-in example verifies, the good library loads once
    // (a second time its names clash with itself) and its kernels run.
    // Host-built, like the custom graph: with the vendor's Path A latch a runner binds one
    // variant's AICPU program.
    let ex = Example::Vector.build(Size::Small).with_variant(Variant::HostBuiltGraph);
    r.register_callable(5, ex.callable.clone()).unwrap();
    let out = r.run(5, ex.args.clone()).unwrap();
    ex.verify(&out).unwrap();
    r.load_kernels("template.so", &good).unwrap();
    match r.load_kernels("again.so", &good) {
        Err(KernelLoadError::DuplicateName { existing, .. }) => {
            assert_eq!(existing, "library `kernel-template`")
        }
        other => panic!("loaded twice: {other:?}"),
    }
    run_custom(&mut r, 0, Variant::HostBuiltGraph);
    let out = r.run(5, ex.args.clone()).unwrap();
    ex.verify(&out).unwrap();
}

#[test]
fn a_failing_device_entry_is_a_typed_kernel_fault() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // clamp with its two scalars swapped is fine; saxpy over a view longer than its inputs
    // makes the device entry refuse (a shape error), which reaches the host as the kernel's
    // typed error: the `KernelError::Shape` it returned, in numbers.
    fn long_out(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
        let saxpy = o.scalar(0)? as u32;
        o.submit(
            &Task::new(saxpy).input(TensorId(0)).input(TensorId(1)).output(TensorId(2)).scalar(0),
        )?;
        Ok(())
    }
    let mut r = loaded(RunnerConfig::small(Arch::A2a3));
    r.register_callable(0, Callable::new("long", Variant::HostBuiltGraph, long_out)).unwrap();
    let a = RunArgs {
        tensors: vec![TensorInit::Zeros(4), TensorInit::Zeros(4), TensorInit::Zeros(8)],
        scalars: vec![u64::from(CUSTOM_KERNEL_BASE)],
        scratch_bytes: 0,
    };
    match r.run(0, a) {
        Err(RunError::Fault(DeviceFault::Kernel {
            fault: f @ KernelFault::Shape { kernel, expected, got },
            ..
        })) => {
            assert_eq!((kernel, expected, got), (CUSTOM_KERNEL_BASE, 8, 4));
            assert_eq!(f.detail(), "a tensor has 4 elements, the kernel needs 8");
        }
        other => panic!("expected the kernel's shape error, got {other:?}"),
    }
}

#[test]
fn dfx_collection_names_loaded_kernels() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    use ferry_runtime::host::dfx::{DfxChip, DfxOptions, DfxSession};
    let mut r = loaded(RunnerConfig::small(Arch::A2a3));
    let c = Callable::new("saxpy-clamp", Variant::HostBuiltGraph, saxpy_then_clamp);
    r.register_callable(0, c).unwrap();
    let cfg = *r.config();
    let chip = DfxChip::of(&cfg, 0);
    // Level 2 (full): the scalars are dumped whatever the marks (level 1 keeps marked tensors
    // only).
    let opts = DfxOptions { swimlane: 4, dep_gen: true, dump_args: 2, ..DfxOptions::default() };
    let s = DfxSession::start_on(&opts, chip, r.device()).unwrap();
    r.attach_dfx_session(Some(&s)).unwrap();
    let a = args(&r);
    let want = expected(&r, &a);
    let out = r.run(0, a).unwrap();
    r.attach_dfx_session(None).unwrap();
    assert_eq!(out.tensors[2].as_ref(), Some(&want));
    let m = s.finish().unwrap();
    let name = |id: u32| m.kernels.get(&(id as i32)).map(String::as_str);
    assert_eq!(name(CUSTOM_KERNEL_BASE), Some("saxpy"));
    assert_eq!(name(CUSTOM_KERNEL_BASE + 1), Some("clamp"));
    assert_eq!(name(0), Some("add"));
    // ArgsDump prints the loaded kernels' scalars by their declared dtypes (all f32 here), as
    // it does the built-ins'.
    let dump = m.args.as_ref().expect("args dump");
    let scalars: Vec<_> = dump.args.iter().filter(|a| a.value.is_some()).collect();
    assert_eq!(scalars.len(), 3, "saxpy's a, clamp's lo and hi");
    for a in scalars {
        assert_eq!(a.dtype, "FLOAT32", "{a:?}");
    }
}

#[test]
fn the_aicpu_reads_the_kernel_table_bounded_and_checked() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    use ferry_abi::kernel_lib::MAX_CUSTOM_KERNELS;
    use ferry_runtime::device::custom::CustomKernels;
    use ferry_runtime::device::image::as_bytes;
    let r = loaded(RunnerConfig::small(Arch::A2a3));
    let bad = DeviceFault::BadImage { magic: 1, version: 2 };
    let ops = r.ops();
    // The registry's records, uploaded as the runner does.
    let recs = r.kernels().device_table();
    let bytes: Vec<u8> = recs.iter().flat_map(|x| as_bytes(x).to_vec()).collect();
    let dev = r.device();
    let p = dev.malloc(bytes.len() as u64).unwrap();
    dev.copy_htod(&bytes, p).unwrap();
    let t = CustomKernels::read(ops, p.0, 3, bad).unwrap();
    assert_eq!(t.records(), &recs[..]);
    // The view flag travels with the table: ArgsDump reads `relu_nd`'s dtypes from its words.
    assert!(t.is_view(CUSTOM_KERNEL_BASE + 2) && !t.is_view(CUSTOM_KERNEL_BASE + 1));
    let s = t.shape(CUSTOM_KERNEL_BASE + 1).unwrap();
    assert_eq!((s.tensors, s.scalars, s.max_blocks), ((1, 2), 2, 65536));
    assert_eq!(CustomKernels::read(ops, 0, 0, bad).unwrap(), CustomKernels::none());
    // Too many entries: refused before anything is read (address 0 is not device memory, and
    // the count is checked first).
    assert_eq!(CustomKernels::read(ops, 0, MAX_CUSTOM_KERNELS + 1, bad), Err(bad));
    // A table longer than its allocation, or outside device memory.
    assert_eq!(CustomKernels::read(ops, p.0, recs.len() as u32 + 1, bad), Err(bad));
    assert_eq!(CustomKernels::read(ops, 0x10, 1, bad), Err(bad));
    // A record out of place.
    let mut swapped = recs.clone();
    swapped.swap(0, 1);
    let bytes: Vec<u8> = swapped.iter().flat_map(|x| as_bytes(x).to_vec()).collect();
    dev.copy_htod(&bytes, p).unwrap();
    assert_eq!(CustomKernels::read(ops, p.0, 3, bad), Err(bad));
    dev.free(p).unwrap();
}

#[test]
fn libraries_load_between_runs_only() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let good = std::fs::read(template_lib()).unwrap();
    let mut r = DeviceRunner::new(RunnerConfig::small(Arch::A2a3)).unwrap();
    let ex = Example::Vector.build(Size::Small).with_variant(Variant::HostBuiltGraph);
    r.register_callable(0, ex.callable.clone()).unwrap();
    let p = r.prepare(0, ex.args.clone()).unwrap();
    assert!(matches!(r.load_kernels("t.so", &good), Err(KernelLoadError::Busy)));
    assert_eq!(r.kernels().loaded_count(), 0);
    r.release(p);
    assert_eq!(r.load_kernels("t.so", &good).unwrap().len(), 3);
    ex.verify(&r.run(0, ex.args.clone()).unwrap()).unwrap();
}

#[test]
fn host_references_run_over_aliasing_views_of_f32_bits() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    use std::sync::atomic::{AtomicU32, Ordering};
    let r = loaded(RunnerConfig::small(Arch::A2a3));
    let (saxpy, clamp) = (CUSTOM_KERNEL_BASE, CUSTOM_KERNEL_BASE + 1);
    let cells = |v: &[f32]| v.iter().map(|x| AtomicU32::new(x.to_bits())).collect::<Vec<_>>();
    let get = |t: &[AtomicU32]| {
        t.iter().map(|b| f32::from_bits(b.load(Ordering::Relaxed))).collect::<Vec<_>>()
    };
    let f = |v: f32| u64::from(v.to_bits());
    // saxpy with its output the same view as its input x: x = 2x + y.
    let (x, y) = (cells(&[1.0, 2.0, 3.0]), cells(&[10.0, 20.0, 30.0]));
    r.kernels().host_reference_bits(saxpy, &[&x, &y, &x], &[f(2.0)]).unwrap();
    assert_eq!(get(&x), [12.0, 24.0, 36.0]);
    assert_eq!(get(&y), [10.0, 20.0, 30.0]);
    // clamp in place.
    r.kernels().host_reference_bits(clamp, &[&x], &[f(15.0), f(30.0)]).unwrap();
    assert_eq!(get(&x), [15.0, 24.0, 30.0]);
    // The reference's own refusal is typed.
    assert_eq!(
        r.kernels().host_reference_bits(saxpy, &[&x, &y], &[f(1.0)]),
        Err(ferry_runtime::host::HostRefError::Status {
            kernel: saxpy,
            status: ferry_abi::services::STATUS_INVALID_ARGUMENT
        })
    );
}

/// One task of the `hang` kernel (never returns) on tensor 0.
fn hang_once(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    let hang = o.scalar(0)? as u32;
    o.submit(&Task::new(hang).inout(TensorId(0)))?;
    Ok(())
}

/// A kernel that never returns fails its run within the kernel budget with a typed fault naming
/// the task, the kernel and the core; the runner then refuses to launch again, and dropping it
/// does not wait for the hung core. On both launch paths, and in process on both variants (a
/// device-orchestrated graph on the full path needs an orchestration object, not a host
/// function).
#[test]
fn a_kernel_that_never_returns_fails_the_run_and_hangs_only_its_runner() {
    use ferry_runtime::host::LaunchPath;
    let _bound = ferry_watchdog::bound("a run whose kernel never returns");
    let budget = std::time::Duration::from_millis(200);
    let full = LaunchPath::default();
    let direct = LaunchPath::InProcess;
    let host = Variant::HostBuiltGraph;
    for (path, variant) in [(full, host), (direct, host), (direct, Variant::DeviceOrchestrated)] {
        let what = format!("{path:?} {variant:?}");
        let mut cfg = RunnerConfig::small(Arch::A2a3);
        cfg.path = path;
        cfg.kernel_budget = budget;
        let mut r = DeviceRunner::new(cfg).unwrap();
        let hang = r.load_kernels_file(template::faulty_lib()).unwrap()[0].id;
        r.register_callable(0, Callable::new("hang", variant, hang_once)).unwrap();
        let a = RunArgs {
            tensors: vec![TensorInit::Zeros(16)],
            scalars: vec![u64::from(hang)],
            scratch_bytes: 0,
        };
        let cores = cfg.aic..cfg.aic + cfg.aiv;
        let fault = match r.run(0, a.clone()) {
            Err(RunError::Fault(f @ DeviceFault::Kernel { task: 0, kernel, fault })) => {
                assert_eq!(kernel, hang, "{what}");
                match fault {
                    KernelFault::Hung { kernel: k, core, budget_ms } => {
                        assert_eq!((k, budget_ms), (hang, 200), "{what}");
                        // The kernel is an AIV kernel: its core is an AIV worker.
                        assert!(cores.contains(&core), "{what}: core {core}");
                    }
                    other => panic!("{what}: expected a hung kernel, got {other:?}"),
                }
                f
            }
            other => panic!("{what}: expected the hung kernel's fault, got {other:?}"),
        };
        assert_eq!(r.hung(), Some(&fault), "{what}");
        match r.prepare(0, a) {
            Err(RunError::Hung(f)) => assert_eq!(f, fault, "{what}"),
            other => panic!("{what}: a hung runner prepared a run: {other:?}"),
        }
        // Neither finalize nor drop waits for the hung core (the bound above fails the
        // test if one did).
        r.finalize().unwrap();
    }
}

/// A loaded kernel that writes 4 KiB past the end of its output fails its task with
/// `KernelFault::OutOfBounds` naming the kernel, the task and the tensor argument (not a
/// corrupt runtime image), and the runner goes on to run the template's kernels correctly.
#[test]
fn a_write_past_an_output_names_the_kernel_and_task_and_the_runner_goes_on() {
    use ferry_runtime::host::LaunchPath;
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    fn overrun_second(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
        let (copy, overrun) = (o.scalar(0)? as u32, o.scalar(1)? as u32);
        o.submit(&Task::new(copy).input(TensorId(1)).output(TensorId(0)))?;
        o.submit(&Task::new(overrun).inout(TensorId(0)))?;
        Ok(())
    }
    for path in [LaunchPath::default(), LaunchPath::InProcess] {
        let mut cfg = RunnerConfig::small(Arch::A2a3);
        cfg.path = path;
        let mut r = DeviceRunner::new(cfg).unwrap();
        let overrun = r.load_kernels_file(template::faulty_lib()).unwrap()[1].id;
        r.load_kernels_file(template_lib()).unwrap();
        let copy = ferry_runtime::device::kernels::K_COPY;
        let callable = Callable::new("overrun", Variant::HostBuiltGraph, overrun_second);
        r.register_callable(0, callable).unwrap();
        let a = RunArgs {
            tensors: vec![TensorInit::Zeros(64), TensorInit::Data(vec![1.0; 64])],
            scalars: vec![u64::from(copy), u64::from(overrun)],
            scratch_bytes: 0,
        };
        match r.run(0, a) {
            Err(RunError::Fault(DeviceFault::Kernel { task: 1, kernel, fault })) => {
                assert_eq!(kernel, overrun, "{path:?}");
                assert_eq!(
                    fault,
                    KernelFault::OutOfBounds { kernel: overrun, index: 0 },
                    "{path:?}"
                );
                assert!(fault.detail().contains("past the end of tensor argument 0"), "{path:?}");
            }
            other => panic!("{path:?}: expected the overrun's fault, got {other:?}"),
        }
        // The runtime image was not touched: the next run on the runner is right.
        run_custom(&mut r, 1, Variant::HostBuiltGraph);
    }
}
