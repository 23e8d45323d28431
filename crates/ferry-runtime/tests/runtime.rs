//! End-to-end behaviour of the task runtime on the simulated chip: the three examples on both
//! arches and both variants, the handshake, bad inputs, and runner reuse after failures.
//!
//! [`runner`] is the full path (the AICPU program loaded by the loader, runs through the launch
//! transaction); [`in_process`] is the direct path, for device-orchestrated callables that are
//! plain host functions (bad-input orchestrations) and for fault injection between the halves.
use ferry_runtime::device::kernels::{KERNEL_COUNT, K_ADD, K_ADD_SCALAR, K_ATTN_PARTIAL, K_COPY};
use ferry_runtime::device::task::{Orchestrate, Task, TensorId, View};
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::graph::PrebuiltTask;
use ferry_runtime::host::{
    Callable, DeviceRunner, LaunchPath, LoadMethod, RunArgs, RunnerConfig, TensorInit, Variant,
};
use ferry_runtime::{DeviceFault, KernelFault, RunError, RunnerError, SubmitError};
use ferry_sim::{Arch, DevicePtr};

fn runner(arch: Arch) -> DeviceRunner {
    let r = DeviceRunner::new(RunnerConfig::small(arch)).unwrap();
    assert_eq!(r.config().path, LaunchPath::DeviceProgram(LoadMethod::DispatcherBootstrap));
    r
}

/// A full-path runner on ferry's relaxed device (no Path A latch), for tests that need both
/// runtimes (device-orchestrated and host-built graph) in one runner: on the default vendor
/// device the second is refused (`ResidentMismatch`, tested in `path_b.rs`).
fn relaxed_runner(arch: Arch) -> DeviceRunner {
    let cfg = RunnerConfig::small(arch).with_profile(ferry_runtime::host::DeviceProfile::Relaxed);
    DeviceRunner::new(cfg).unwrap()
}

fn in_process(arch: Arch) -> DeviceRunner {
    DeviceRunner::new(RunnerConfig::small(arch).in_process()).unwrap()
}

/// The runner for a callable variant: full path, except device orchestration by a plain
/// function (which has no orchestration object for the device program to load).
fn runner_for(arch: Arch, v: Variant) -> DeviceRunner {
    match v {
        Variant::DeviceOrchestrated => in_process(arch),
        Variant::HostBuiltGraph => runner(arch),
    }
}

fn check_example(arch: Arch, ex: Example, variant: Variant) {
    let mut r = runner(arch);
    let run = ex.build(Size::Small).with_variant(variant);
    r.register_callable(3, run.callable.clone()).unwrap();
    let out =
        r.run(3, run.args.clone()).unwrap_or_else(|e| panic!("{arch:?} {ex:?} {variant:?}: {e}"));
    run.verify(&out).unwrap_or_else(|e| panic!("{arch:?} {ex:?} {variant:?}: {e}"));
    assert_eq!(out.stats.variant, variant);
    assert_eq!(out.stats.per_kernel.iter().map(|k| k.1).sum::<u64>(), run.tasks);
    // Through the launch transaction: the image was published as the descriptor, and only the
    // a5 host-built graph staged launch metadata (its regs table) before it.
    let st = r.launch_stats().expect("full path");
    assert_eq!(
        (st.publishes, st.descriptor_copies, st.forks),
        (1, 1, 1),
        "{arch:?} {ex:?} {variant:?}"
    );
    let a5_hbg = arch == Arch::A5 && variant == Variant::HostBuiltGraph;
    assert_eq!(st.metadata_copies, u64::from(a5_hbg), "{arch:?} {ex:?} {variant:?}");
    if ex != Example::Storm {
        // A second run on the same runner (new epoch, same callable) gives the same result.
        let again = r.run(3, run.args.clone()).unwrap();
        assert_eq!(again.tensors, out.tensors);
    }
}

#[test]
fn vector_example_on_both_arches_and_variants() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        for v in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            check_example(arch, Example::Vector, v);
        }
    }
}

#[test]
fn paged_attention_example_on_both_arches_and_variants() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        for v in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            check_example(arch, Example::PagedAttention, v);
        }
    }
}

#[test]
fn storm_example_on_both_arches_and_variants() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        for v in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            check_example(arch, Example::Storm, v);
        }
    }
}

/// The full 50,000-task storm: about 5 s per arch in a debug build on 2 cores, so it runs in CI.
#[test]
fn full_storm_of_50000_tasks_on_both_arches() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        let mut r = DeviceRunner::new(RunnerConfig::default_for(arch)).unwrap();
        let run = Example::Storm.build(Size::Full);
        r.register_callable(0, run.callable.clone()).unwrap();
        let out = r.run(0, run.args.clone()).unwrap();
        run.verify(&out).unwrap();
        assert_eq!(out.stats.tasks, 50_000);
    }
}

#[test]
fn examples_run_through_the_aicpu_os_services_table() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // The device half driven through `ServicesOps` over the simulated AICPU OS's table: exactly
    // the chip access a device program gets.
    for arch in Arch::ALL {
        let cfg = RunnerConfig { via_services: true, ..RunnerConfig::small(arch) };
        let mut r = DeviceRunner::new(cfg).unwrap();
        for (id, ex) in Example::ALL.into_iter().enumerate() {
            let run = ex.build(Size::Small);
            r.register_callable(id as u32, run.callable.clone()).unwrap();
            run.verify(&r.run(id as u32, run.args.clone()).unwrap()).unwrap();
        }
    }
}

#[test]
fn per_kernel_counts_and_progress_are_reported() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let mut r = runner(Arch::A2a3);
    let run = Example::Vector.build(Size::Small);
    r.register_callable(0, run.callable.clone()).unwrap();
    let p = r.prepare(0, run.args.clone()).unwrap();
    assert_eq!(p.planned_tasks(), None, "device orchestration does not know its size up front");
    let mut l = r.launch(p).unwrap();
    r.wait(&mut l).unwrap();
    assert!(r.poll(&l));
    assert_eq!(r.progress(&l).unwrap(), (20, 20));
    let out = r.finalize_run(l).unwrap();
    let names: Vec<_> = out.stats.per_kernel.iter().map(|k| k.0.as_str()).collect();
    assert_eq!(names, ["add", "mul", "scale", "copy", "add_scalar"]);
    assert!(out.stats.per_kernel.iter().all(|k| k.1 == 4));
}

#[test]
fn handshake_reports_every_core_and_cores_exit() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // Every core of both arches takes part: with more schedulers than clusters some schedulers
    // own nothing, with one AIC and no AIVs everything folds onto that core.
    for arch in Arch::ALL {
        for (threads, aic, aiv) in [(2, 1, 0), (2, 0, 3), (arch.profile().max_aicpu_threads, 3, 6)]
        {
            let cfg =
                RunnerConfig { aicpu_threads: threads, aic, aiv, ..RunnerConfig::small(arch) };
            let mut r = DeviceRunner::new(cfg).unwrap();
            let run = Example::PagedAttention.build(Size::Small);
            r.register_callable(0, run.callable.clone()).unwrap();
            let out = r.run(0, run.args.clone()).unwrap();
            run.verify(&out).unwrap();
            // The cores exited cleanly: a second launch finds them free.
            run.verify(&r.run(0, run.args.clone()).unwrap()).unwrap();
        }
    }
}

#[test]
fn runner_config_is_validated() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let one = RunnerConfig { aicpu_threads: 1, ..RunnerConfig::small(Arch::A2a3) };
    assert!(matches!(DeviceRunner::new(one), Err(RunnerError::Config(_))));
    let too_many = RunnerConfig { aicpu_threads: 5, ..RunnerConfig::small(Arch::A2a3) };
    assert!(matches!(DeviceRunner::new(too_many), Err(RunnerError::Config(_))));
    let no_window = RunnerConfig { task_window: 0, ..RunnerConfig::small(Arch::A5) };
    assert!(matches!(DeviceRunner::new(no_window), Err(RunnerError::Config(_))));
}

#[test]
fn callable_registration_rules() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // Registers a callable of each variant: both runtimes, so the relaxed device.
    let mut r = relaxed_runner(Arch::A2a3);
    let ex = Example::Vector.build(Size::Small);
    assert!(matches!(
        r.register_callable(64, ex.callable.clone()),
        Err(RunnerError::CallableId { id: 64 })
    ));
    r.register_callable(1, ex.callable.clone()).unwrap();
    let again = r.register_callable(1, ex.callable.clone());
    assert!(matches!(again, Err(RunnerError::CallableId { id: 1 })));
    assert!(matches!(r.run(2, ex.args.clone()), Err(RunError::NotRegistered { id: 2 })));
    let p = r.prepare(1, ex.args.clone()).unwrap();
    assert!(matches!(r.register_callable(5, ex.callable.clone()), Err(RunnerError::Busy)));
    // Two launch slots (the default): a second run may be prepared, a third waits.
    let q = r.prepare(1, ex.args.clone()).unwrap();
    assert!(matches!(r.prepare(1, ex.args.clone()), Err(RunError::Busy)));
    r.release(p);
    assert!(r.is_busy());
    r.release(q);
    assert!(!r.is_busy());
    // Dropping a prepared or launched run (without finalizing it) frees the runner too.
    drop(r.prepare(1, ex.args.clone()).unwrap());
    let p = r.prepare(1, ex.args.clone()).unwrap();
    let l = r.launch(p).unwrap();
    assert!(r.is_busy());
    drop(l);
    assert!(!r.is_busy());
    ex.verify(&r.run(1, ex.args.clone()).unwrap()).unwrap();
    r.unregister_callable(1).unwrap();
    assert!(matches!(r.unregister_callable(1), Err(RunnerError::NotRegistered { id: 1 })));
    assert!(matches!(r.run(1, ex.args.clone()), Err(RunError::NotRegistered { id: 1 })));
    // On the full path a device-orchestrated callable needs an orchestration object: the AICPU
    // program cannot call a host function.
    let plain = Callable::new("plain", Variant::DeviceOrchestrated, unknown_kernel);
    let err = r.register_callable(3, plain.clone()).unwrap_err();
    assert!(
        matches!(&err, RunnerError::NoOrchestrationObject { callable } if callable == "plain"),
        "{err}"
    );
    r.register_callable(3, plain.with_variant(Variant::HostBuiltGraph)).unwrap();
    r.finalize().unwrap();
}

#[test]
fn load_methods_and_loader_bad_input_leave_the_runner_usable() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    use ferry_launch::loader::{LoadError, Loader, ProgramImage};
    // Method 1 without an installed program names the missing file when the runner loads its
    // runtime (on the first callable); Path B loads on the default device (its runs hang in
    // the handshake: `path_b.rs`).
    let cfg = RunnerConfig::small(Arch::A5).with_method(LoadMethod::Preinstalled);
    let mut m1 = DeviceRunner::new(cfg).unwrap();
    let ex = Example::Vector.build(Size::Small);
    let err = m1.register_callable(0, ex.callable.clone()).unwrap_err();
    let not_preinstalled =
        matches!(&err, RunnerError::Program(e) if matches!(**e, LoadError::NotPreinstalled { .. }));
    assert!(not_preinstalled, "{err:?}");
    assert!(DeviceRunner::new(
        RunnerConfig::small(Arch::A5).with_method(LoadMethod::CustomScheduler)
    )
    .is_ok());
    for arch in Arch::ALL {
        let mut r = runner(arch);
        let ex = Example::Vector.build(Size::Small);
        r.register_callable(0, ex.callable.clone()).unwrap();
        ex.verify(&r.run(0, ex.args.clone()).unwrap()).unwrap();
        // A truncated and a corrupt program on the runner's device: typed errors, and the
        // runner's next run (same loaded program, same launch slot) still works.
        let loader = Loader::new(r.ops().chip()).unwrap();
        let good = ferry_programs::AICPU_DEVICE_ORCHESTRATED.bytes;
        let truncated = ProgramImage { name: "bad", build_id: 0, bytes: &good[..good.len() / 3] };
        assert!(matches!(loader.load_image(truncated), Err(LoadError::Truncated { .. })));
        let corrupt = ProgramImage { name: "bad", build_id: 0, bytes: b"not an elf at all" };
        assert!(matches!(loader.load_image(corrupt), Err(LoadError::Corrupt { .. })));
        drop(loader);
        ex.verify(&r.run(0, ex.args.clone()).unwrap()).unwrap();
        // A re-registration reloads the orchestration object on the device.
        r.unregister_callable(0).unwrap();
        r.register_callable(0, ex.callable.clone()).unwrap();
        ex.verify(&r.run(0, ex.args.clone()).unwrap()).unwrap();
        r.finalize().unwrap();
    }
}

// ------------------------------------------------------------------------------------------
// Bad input: each gives a typed error naming the problem, and the runner stays usable.
// ------------------------------------------------------------------------------------------

fn unknown_kernel(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    o.submit(&Task::new(K_COPY).input(TensorId(0)).output(TensorId(1)))?;
    o.submit(&Task::new(KERNEL_COUNT + 40).input(TensorId(0)))?;
    Ok(())
}

fn missing_tensor(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    o.submit(&Task::new(K_COPY).input(TensorId(0)).output(TensorId(7)))?;
    Ok(())
}

fn zero_blocks(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    o.submit(&Task::new(K_COPY).input(TensorId(0)).output(TensorId(1)).blocks(0))?;
    Ok(())
}

fn view_past_end(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    o.submit(&Task::new(K_COPY).input(View::range(TensorId(0), 60, 8)).output(TensorId(1)))?;
    Ok(())
}

fn forward_dependency(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    o.submit(
        &Task::new(K_COPY).input(TensorId(0)).output(TensorId(1)).after(ferry_runtime::TaskId(5)),
    )?;
    Ok(())
}

fn attention_with_blocks(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    let t = Task::new(K_ATTN_PARTIAL)
        .input(TensorId(0))
        .input(TensorId(0))
        .input(TensorId(0))
        .output(TensorId(1))
        .scalar(4)
        .scalar(1)
        .scalar_f32(1.0)
        .blocks(2);
    o.submit(&t)?;
    Ok(())
}

fn scope_underflow(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    o.scope_end()
}

fn panics(_: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    panic!("orchestration bug")
}

fn two_tensor_args() -> RunArgs {
    RunArgs {
        tensors: vec![TensorInit::Data(vec![1.0; 64]), TensorInit::Zeros(64)],
        scalars: vec![],
        scratch_bytes: 0,
    }
}

/// Runs `orch` on both variants and both arches, expects `want`, and checks the runner still
/// runs the storm afterwards.
fn expect_refused(orch: ferry_runtime::device::task::OrchFn, args: RunArgs, want: DeviceFault) {
    for arch in Arch::ALL {
        for v in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            let mut r = runner_for(arch, v);
            r.register_callable(0, Callable::new("bad", v, orch)).unwrap();
            let err = r.run(0, args.clone()).unwrap_err();
            assert!(matches!(&err, RunError::Fault(f) if *f == want), "{arch:?} {v:?}: {err}");
            let msg = err.to_string();
            assert!(msg.starts_with(|c: char| c.is_lowercase()), "{msg}");
            // The same variant, so the same runtime (one per runner on the vendor device).
            let good = Example::Vector.build(Size::Small).with_variant(v);
            r.register_callable(1, good.callable.clone()).unwrap();
            good.verify(&r.run(1, good.args.clone()).unwrap()).unwrap();
        }
    }
}

#[test]
fn unknown_kernel_id_is_refused_and_runner_stays_usable() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let want = SubmitError::UnknownKernel { task: 1, kernel: KERNEL_COUNT + 40 };
    expect_refused(unknown_kernel, two_tensor_args(), DeviceFault::Submit(want));
}

#[test]
fn task_referencing_a_missing_tensor_is_refused() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let want = SubmitError::MissingTensor { task: 0, tensor: 7, count: 2 };
    expect_refused(missing_tensor, two_tensor_args(), DeviceFault::Submit(want));
}

#[test]
fn zero_block_count_is_refused() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    expect_refused(
        zero_blocks,
        two_tensor_args(),
        DeviceFault::Submit(SubmitError::ZeroBlockDim { task: 0 }),
    );
}

#[test]
fn view_past_the_end_of_a_tensor_is_refused() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let want = SubmitError::ViewOutOfBounds { task: 0, tensor: 0, offset: 60, len: 8, size: 64 };
    expect_refused(view_past_end, two_tensor_args(), DeviceFault::Submit(want));
}

#[test]
fn dependency_on_a_later_task_is_refused() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let want = SubmitError::UnknownDependency { task: 0, after: 5 };
    expect_refused(forward_dependency, two_tensor_args(), DeviceFault::Submit(want));
}

#[test]
fn too_many_blocks_for_a_kernel_is_refused() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let want =
        SubmitError::BlockDimTooLarge { task: 0, kernel: K_ATTN_PARTIAL, block_dim: 2, max: 1 };
    expect_refused(attention_with_blocks, two_tensor_args(), DeviceFault::Submit(want));
}

#[test]
fn scope_underflow_is_refused() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    expect_refused(
        scope_underflow,
        two_tensor_args(),
        DeviceFault::Submit(SubmitError::ScopeUnderflow),
    );
}

#[test]
fn panicking_orchestration_is_reported() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        let mut r = in_process(arch);
        r.register_callable(0, Callable::new("panics", Variant::DeviceOrchestrated, panics))
            .unwrap();
        assert!(matches!(
            r.run(0, two_tensor_args()),
            Err(RunError::Fault(DeviceFault::OrchestrationPanicked))
        ));
        let good = Example::Vector.build(Size::Small);
        r.register_callable(1, good.callable.clone()).unwrap();
        good.verify(&r.run(1, good.args.clone()).unwrap()).unwrap();
    }
}

fn add_external(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    o.submit(&Task::new(K_ADD).input(TensorId(0)).input(TensorId(1)).output(TensorId(1)))?;
    Ok(())
}

#[test]
fn tensor_outside_device_memory_is_refused() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        let mut r = in_process(arch);
        // A host pointer posing as a device tensor, and a range past the end of HBM.
        let host = vec![0f32; 64];
        let past_hbm = DevicePtr(ferry_sim::memory::DEVICE_ADDR_BASE + (1 << 39));
        for addr in [DevicePtr(host.as_ptr() as u64 & !3), past_hbm] {
            for v in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
                let id = if v == Variant::DeviceOrchestrated { 0 } else { 1 };
                if r.register_callable(id, Callable::new("ext", v, add_external)).is_err() {
                    // already registered in the previous iteration
                }
                let args = RunArgs {
                    tensors: vec![
                        TensorInit::Data(vec![1.0; 64]),
                        TensorInit::Device { addr, bytes: 256 },
                    ],
                    scalars: vec![],
                    scratch_bytes: 0,
                };
                let err = r.run(id, args).unwrap_err();
                let want = DeviceFault::Submit(SubmitError::TensorOutsideDeviceMemory {
                    task: 0,
                    addr: addr.0,
                    bytes: 256,
                });
                assert!(matches!(&err, RunError::Fault(f) if *f == want), "{arch:?} {v:?}");
                assert!(err.to_string().contains("outside device memory"), "{err}");
            }
        }
        let good = Example::Vector.build(Size::Small);
        r.register_callable(2, good.callable.clone()).unwrap();
        good.verify(&r.run(2, good.args.clone()).unwrap()).unwrap();
    }
}

#[test]
fn cyclic_and_malformed_prebuilt_workloads_are_refused() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let copy = |i: u32, o: u32| Task::new(K_COPY).input(TensorId(i)).output(TensorId(o));
    let mut r = runner(Arch::A5);
    // 0 → 1 → 2 → 0 through explicit dependencies.
    let cyclic = vec![
        PrebuiltTask { task: copy(0, 1), deps: vec![2] },
        PrebuiltTask { task: copy(0, 1), deps: vec![0] },
        PrebuiltTask { task: copy(0, 1), deps: vec![1] },
    ];
    r.register_callable(0, Callable::prebuilt("cyclic", cyclic)).unwrap();
    let err = r.run(0, two_tensor_args()).unwrap_err();
    assert!(matches!(&err, RunError::Cycle { tasks } if !tasks.is_empty()), "{err}");
    assert!(err.to_string().contains("cycle"), "{err}");
    // A dependency on a task that does not exist.
    let dangling = vec![PrebuiltTask { task: copy(0, 1), deps: vec![9] }];
    r.register_callable(1, Callable::prebuilt("dangling", dangling)).unwrap();
    assert!(matches!(
        r.run(1, two_tensor_args()),
        Err(RunError::Fault(DeviceFault::Submit(SubmitError::UnknownDependency {
            task: 0,
            after: 9
        })))
    ));
    // A forward (acyclic) explicit dependency is fine: the graph is reordered.
    let forward = vec![
        PrebuiltTask {
            task: Task::new(K_ADD_SCALAR).inout(TensorId(1)).scalar_f32(1.0),
            deps: vec![1],
        },
        PrebuiltTask {
            task: Task::new(K_ADD_SCALAR).inout(TensorId(0)).scalar_f32(2.0),
            deps: vec![],
        },
    ];
    r.register_callable(2, Callable::prebuilt("forward", forward)).unwrap();
    let out = r.run(2, two_tensor_args()).unwrap();
    assert_eq!(out.stats.tasks, 2);
    assert_eq!(out.tensors[0].as_ref().unwrap()[0], 3.0);
    assert_eq!(out.tensors[1].as_ref().unwrap()[0], 1.0);
}

fn bad_shape(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    // `add` over a 64-element output with an 8-element input: refused by the kernel on its core.
    o.submit(
        &Task::new(K_ADD)
            .input(View::range(TensorId(0), 0, 8))
            .input(TensorId(0))
            .output(TensorId(1)),
    )?;
    Ok(())
}

#[test]
fn kernel_fault_on_a_core_is_reported_with_its_task() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        let mut r = in_process(arch);
        r.register_callable(0, Callable::new("shape", Variant::DeviceOrchestrated, bad_shape))
            .unwrap();
        assert!(matches!(
            r.run(0, two_tensor_args()),
            Err(RunError::Fault(DeviceFault::Kernel {
                task: 0,
                kernel: K_ADD,
                fault: KernelFault::Shape { kernel: K_ADD, expected: 64, got: 8 }
            }))
        ));
        let good = Example::PagedAttention.build(Size::Small);
        r.register_callable(1, good.callable.clone()).unwrap();
        good.verify(&r.run(1, good.args.clone()).unwrap()).unwrap();
    }
}

#[test]
fn misaligned_device_tensor_is_refused_before_launch() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let mut r = in_process(Arch::A2a3);
    r.register_callable(0, Callable::new("ext", Variant::DeviceOrchestrated, add_external))
        .unwrap();
    let buf = r.device().malloc(256).unwrap();
    let args = RunArgs {
        tensors: vec![
            TensorInit::Data(vec![1.0; 64]),
            TensorInit::Device { addr: buf.add(2), bytes: 16 },
        ],
        scalars: vec![],
        scratch_bytes: 0,
    };
    assert!(matches!(r.run(0, args), Err(RunError::MisalignedTensor { tensor: 1, bytes: 16, .. })));
}

/// A core that reports a physical core id past the arch's bound fails the handshake with a typed
/// fault; the schedulers shut down the cores that came up, and the host reaps the rest.
#[test]
fn handshake_rejects_a_bad_physical_core_id() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    use ferry_abi::launch::{AicoreLaunchArgs, RegisterCallableArgs};
    use ferry_abi::regs::{RegLayout, AICORE_EXIT_SIGNAL};
    use ferry_runtime::device::aicore::aicore_execute;
    use ferry_runtime::device::image::{from_bytes, ImageView, RunResult, RESULT_FAILED};
    use ferry_runtime::device::program::AicpuProgram;
    use ferry_runtime::device::sched::read_header;
    use ferry_runtime::DeviceOps;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    for arch in Arch::ALL {
        // In process: the test plays the AICPU side itself.
        let mut r = in_process(arch);
        let ex = Example::Storm.build(Size::Small);
        r.register_callable(0, ex.callable.clone()).unwrap();
        let p = r.prepare(0, ex.args.clone()).unwrap();
        let kargs = *p.kernel_args();
        let ops = Arc::new(r.ops().clone());
        let chip = ops.chip().clone();
        let hdr = read_header(&*ops, kargs.runtime_args).unwrap();
        let layout = RegLayout::of(arch);

        let program = Arc::new(AicpuProgram::new());
        let mut rca = RegisterCallableArgs::new(0, 0, 0).unwrap();
        rca.set_device_orch_func_name("storm").unwrap();
        let orch = |_: &mut dyn Orchestrate| Ok(());
        program.register_callable(&rca, &|_| Some(orch)).unwrap();

        let core_args = AicoreLaunchArgs::from(&kargs);
        let o = ops.clone();
        let cores = chip
            .launch_aicore(
                chip.config().cores(),
                Arc::new(move |ctx: ferry_sim::cores::CoreCtx| {
                    if ctx.index != 0 {
                        return aicore_execute(&*o, &core_args, ctx.index, ctx.index, None)
                            .map_err(|e| e.to_string());
                    }
                    // Core 0 is broken: it reports physical core id 500.
                    let img = ImageView::new(&*o, core_args.runtime_args, hdr.image_bytes).unwrap();
                    let hs = hdr.handshake_off as usize;
                    img.u32_at(hs + 20).store(500, Ordering::Relaxed);
                    // Release: publishes the bogus id above to the scheduler's Acquire load of
                    // `aicore_done`, as a real core's report would.
                    img.u32_at(hs + 4).store(1, Ordering::Release);
                    o.notify_aicpu();
                    let _ = ctx.window.core_wait(
                        layout.data_main_base as u32,
                        |v| v == AICORE_EXIT_SIGNAL,
                        None,
                    );
                    Ok(())
                }),
            )
            .unwrap();
        let (o, prog) = (ops.clone(), program.clone());
        let aicpu = chip
            .launch_aicpu(
                chip.config().aicpu_threads,
                Arc::new(move |ctx: ferry_sim::cores::AicpuCtx| {
                    prog.exec(&*o, &kargs, ctx.thread, ctx.threads)
                }),
            )
            .unwrap();
        aicpu.wait().unwrap();
        // The host reaps the cores that never got a window (core 0, and any core of the failed
        // scheduler's set that reported after the failure).
        for i in 0..chip.config().cores() {
            if !cores.is_done() {
                chip.window(i).aicpu_write(layout.data_main_base as u32, AICORE_EXIT_SIGNAL);
            }
        }
        cores.wait().unwrap();

        let mut b = vec![0u8; std::mem::size_of::<RunResult>()];
        r.device().copy_dtoh(DevicePtr(kargs.runtime_args + hdr.result_off), &mut b).unwrap();
        let res: RunResult = from_bytes(&b).unwrap();
        assert_eq!(res.status, RESULT_FAILED);
        let bound = layout.max_physical_cores;
        assert_eq!(
            DeviceFault::decode(res.error_code, res.error_task, res.error_detail),
            Some(DeviceFault::Handshake { core: 0, physical: 500, bound })
        );
        drop(ops);
        r.release(p);
        // The runner still runs work afterwards.
        let good = Example::Vector.build(Size::Small);
        r.register_callable(1, good.callable.clone()).unwrap();
        good.verify(&r.run(1, good.args.clone()).unwrap()).unwrap();
        drop(chip);
        drop(r);
    }
}

#[test]
fn tiny_task_windows_make_the_orchestrator_wait_without_deadlock() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for window in [1, 2, 3] {
        for v in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            let cfg = RunnerConfig { task_window: window, ..RunnerConfig::small(Arch::A5) };
            let mut r = DeviceRunner::new(cfg).unwrap();
            for (id, ex) in [Example::Vector, Example::PagedAttention].into_iter().enumerate() {
                let run = ex.build(Size::Small).with_variant(v);
                r.register_callable(id as u32, run.callable.clone()).unwrap();
                run.verify(&r.run(id as u32, run.args.clone()).unwrap()).unwrap();
            }
        }
    }
}
