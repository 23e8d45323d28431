//! Path B on the vendor-faithful device (the hang of docs/design/launch.md): the handshake hang through the
//! real loader, its diagnosis, the fixes, the Path A latch, and that coherent clusters pay
//! nothing for the cache model. Every test is named `path_b_*` (`cargo test -- path_b`).
use ferry_launch::loader::LoadError;
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::{
    DeviceProfile, DeviceRunner, HandshakeLayout, LoadMethod, PathBFixes, RunnerConfig, Variant,
};
use ferry_runtime::{RunError, RunnerError};
use ferry_sim::Arch;
use std::time::Duration;

/// A short handshake deadline for the runs that must hang: the hang shows in well under a
/// second.
const SHORT: Duration = Duration::from_millis(300);
/// The handshake deadline of runs that must complete: only a hang guard. A run that should
/// pass gets no short wall-clock deadline, since a loaded host can keep the AICPU's threads off
/// the CPU for longer than [`SHORT`] and the handshake would then time out with nothing wrong.
const GUARD: Duration = Duration::from_secs(10);
/// The AICore kernel starts only once the custom cluster's schedulers have filled this many
/// cache lines (one slot line per core of the 4 AIC + 8 AIV chip), so their first sweep reads
/// every slot before its core reports, whenever the host runs either side (on hardware the
/// AICPU is polling while AICore kernels start; without the order, a core that reported first
/// is simply seen and the hang is partial).
const LATE_CORES_AFTER_FILLS: u64 = 12;

fn path_b(arch: Arch, fixes: PathBFixes, layout: HandshakeLayout) -> RunnerConfig {
    RunnerConfig {
        fixes,
        handshake_layout: layout,
        handshake_timeout: GUARD,
        // Bounds a run that goes wrong in another way.
        timeout: Duration::from_secs(20),
        ..RunnerConfig::small(arch).with_method(LoadMethod::CustomScheduler)
    }
}

fn run_example(r: &mut DeviceRunner, id: u32, ex: Example, v: Variant) -> Result<(), RunError> {
    let run = ex.build(Size::Small).with_variant(v);
    if r.register_callable(id, run.callable.clone()).is_err() {
        r.unregister_callable(id).unwrap();
        r.register_callable(id, run.callable.clone()).unwrap();
    }
    let out = r.run(id, run.args.clone())?;
    run.verify(&out).unwrap_or_else(|e| panic!("{ex:?} {v:?}: {e}"));
    Ok(())
}

#[test]
fn path_b_hang_reproduces_as_a_typed_timeout_naming_the_stale_handshake() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // 4 AIC + 8 AIV starting late: the schedulers' first sweep reads every slot before its core
    // reports, and those lines stay stale.
    let cfg = RunnerConfig {
        aic: 4,
        aiv: 8,
        aicore_start_after_line_fills: LATE_CORES_AFTER_FILLS,
        handshake_timeout: SHORT,
        ..path_b(Arch::A2a3, PathBFixes::NONE, HandshakeLayout::COMBINED)
    };
    let mut r = DeviceRunner::new(cfg).unwrap();
    let caps = r.device().aicpu_os().caps();
    assert_eq!(caps.profile, DeviceProfile::Vendor);
    assert!(!caps.custom_scheduler_coherent);
    let ex = Example::Vector.build(Size::Small);
    r.register_callable(0, ex.callable.clone()).unwrap();
    for attempt in 0..2 {
        // The run ends at its handshake budget (`waited_ms` below); the test's liveness bound
        // catches one that never ends.
        let err = r.run(0, ex.args.clone()).unwrap_err();
        let RunError::HandshakeTimeout { waited_ms, stale } = &err else {
            panic!("run {attempt}: expected the handshake timeout, got {err:?}");
        };
        assert_eq!(*waited_ms, SHORT.as_millis() as u32);
        assert_eq!(stale.len(), 12, "the error names the stale cores: all, the cores came late");
        let msg = err.to_string();
        assert!(msg.contains("stale handshake") && msg.contains("aicore_done"), "{msg}");
        // The D2H recipe: every core reported in memory; a stale core's aicore_done is 0 as the
        // AICPU saw it and block_idx + 1 in memory; the others were seen as memory holds them.
        let hs = r.last_handshake();
        assert_eq!(hs.len(), 12);
        for c in hs {
            assert_eq!(c.memory_done, c.core + 1, "core {}", c.core);
            assert!(c.aicpu_saw == 0 || c.aicpu_saw == c.memory_done, "core {}", c.core);
        }
        let stale_now: Vec<_> = hs.iter().filter(|c| c.is_stale()).copied().collect();
        assert_eq!(&stale_now, stale);
        assert!(stale.iter().all(|c| c.aicpu_saw == 0));
        // The runner stays usable: the loop's second run fails the same way in bounded time.
    }
    // The model did the work: the schedulers filled the slots' lines and then hit them.
    let st = r.device().aicpu_os().cache_stats();
    assert!(st.line_fills >= 12 && st.hits > st.line_fills, "{st:?}");
}

#[test]
fn path_b_fixes_a_with_split_lines_b_and_c_complete_the_three_examples() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let a = PathBFixes { el0_cache_maintenance: true, ..PathBFixes::NONE };
    let b = PathBFixes { noncacheable_handshake: true, ..PathBFixes::NONE };
    let c = PathBFixes { same_cluster_affinity: true, ..PathBFixes::NONE };
    let cases = [
        (a, HandshakeLayout::SPLIT),
        (b, HandshakeLayout::COMBINED),
        (c, HandshakeLayout::COMBINED),
    ];
    for arch in Arch::ALL {
        for (fixes, layout) in cases {
            let mut r = DeviceRunner::new(path_b(arch, fixes, layout)).unwrap();
            for (id, ex) in Example::ALL.into_iter().enumerate() {
                run_example(&mut r, id as u32, ex, Variant::DeviceOrchestrated)
                    .unwrap_or_else(|e| panic!("{arch:?} fix {} {ex:?}: {e}", fixes.letters()));
            }
            assert!(r.last_handshake().iter().all(|c| !c.is_stale() && c.aicpu_saw != 0));
            let st = r.device().aicpu_os().cache_stats();
            match fixes.letters().as_str() {
                // A + D: the AICore line is refetched after each civac; nothing trapped.
                "a" => assert!(st.invalidations > 0 && st.ignored_ops == 0, "{st:?}"),
                // B: every handshake access went to memory through the uncached mapping.
                "b" => assert!(st.uncached_accesses > 0 && st.line_fills == 0, "{st:?}"),
                // C: the cluster is coherent: no cache-model work at all.
                _ => assert!(st.is_idle(), "{st:?}"),
            }
        }
    }
}

#[test]
fn path_b_fix_a_alone_and_split_lines_alone_still_hang() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let a = PathBFixes { el0_cache_maintenance: true, ..PathBFixes::NONE };
    // A without D: the one-line protocol issues no cache maintenance, so nothing invalidates.
    // D without A: the civac's invalidate half is trapped and ignored.
    for (fixes, layout) in
        [(a, HandshakeLayout::COMBINED), (PathBFixes::NONE, HandshakeLayout::SPLIT)]
    {
        // As in the hang test: the cores report after the first sweep.
        let cfg = RunnerConfig {
            aic: 4,
            aiv: 8,
            aicore_start_after_line_fills: LATE_CORES_AFTER_FILLS,
            handshake_timeout: SHORT,
            ..path_b(Arch::A5, fixes, layout)
        };
        let mut r = DeviceRunner::new(cfg).unwrap();
        let err = run_example(&mut r, 0, Example::Vector, Variant::DeviceOrchestrated).unwrap_err();
        assert!(matches!(err, RunError::HandshakeTimeout { .. }), "{fixes:?} {layout:?}: {err}");
        if layout.is_split() {
            assert!(r.device().aicpu_os().cache_stats().ignored_ops > 0);
        }
    }
}

#[test]
fn path_b_method_1_and_path_a_are_unaffected_and_do_no_cache_work() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        for method in [LoadMethod::DispatcherBootstrap, LoadMethod::Preinstalled] {
            let cfg = RunnerConfig::small(arch).with_method(method);
            let mut r = match method {
                LoadMethod::Preinstalled => preinstalled_runner(cfg),
                _ => DeviceRunner::new(cfg).unwrap(),
            };
            for (id, ex) in Example::ALL.into_iter().enumerate() {
                run_example(&mut r, id as u32, ex, Variant::DeviceOrchestrated).unwrap();
            }
            assert!(r.last_handshake().iter().all(|c| c.aicpu_saw == c.memory_done));
            let st = r.device().aicpu_os().cache_stats();
            assert!(st.is_idle(), "{arch:?} {method:?}: {st:?}");
        }
    }
}

/// A Method 1 runner: the programs installed out of band into the device's preinstalled
/// directory, before the runner loads them.
fn preinstalled_runner(cfg: RunnerConfig) -> DeviceRunner {
    use ferry_launch::loader::Loader;
    // The runner's device root is private to it: install through a first runner's device,
    // which fails to load nothing until a callable needs a program.
    let r = DeviceRunner::new(cfg).unwrap();
    let os = r.device().aicpu_os();
    for p in [&ferry_programs::AICPU_DEVICE_ORCHESTRATED, &ferry_programs::AICPU_HOST_BUILT_GRAPH] {
        os.install_preinstalled(&Loader::preinstalled_name(p.name), p.bytes).unwrap();
    }
    r
}

#[test]
fn path_b_second_runtime_under_path_a_is_refused_by_default_and_works_elsewhere() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // Default profile, Path A: the second runtime in this process (device) is refused.
    let mut r = DeviceRunner::new(RunnerConfig::small(Arch::A2a3)).unwrap();
    run_example(&mut r, 0, Example::Vector, Variant::DeviceOrchestrated).unwrap();
    let hbg = Example::Vector.build(Size::Small).with_variant(Variant::HostBuiltGraph);
    let err = r.register_callable(1, hbg.callable.clone()).unwrap_err();
    let latched = matches!(&err, RunnerError::Program(e) if matches!(**e, LoadError::ResidentMismatch { .. }));
    assert!(latched, "{err:?}");
    // The first runtime still runs.
    run_example(&mut r, 0, Example::Vector, Variant::DeviceOrchestrated).unwrap();
    drop(r);
    // Both runtimes in one runner: Method 1, and Path B on a coherent device (fix C), and the
    // relaxed profile under Path A.
    let both = |r: &mut DeviceRunner| {
        run_example(r, 0, Example::Vector, Variant::DeviceOrchestrated).unwrap();
        run_example(r, 1, Example::Vector, Variant::HostBuiltGraph).unwrap();
    };
    both(&mut preinstalled_runner(
        RunnerConfig::small(Arch::A2a3).with_method(LoadMethod::Preinstalled),
    ));
    let c = PathBFixes { same_cluster_affinity: true, ..PathBFixes::NONE };
    both(&mut DeviceRunner::new(path_b(Arch::A2a3, c, HandshakeLayout::COMBINED)).unwrap());
    both(
        &mut DeviceRunner::new(RunnerConfig::small(Arch::A5).with_profile(DeviceProfile::Relaxed))
            .unwrap(),
    );
}
