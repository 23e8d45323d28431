//! The loader end to end on the simulated chip: each method and refusal, the latch detection,
//! two runtimes in one process, teardown, device reset, bad inputs, and the exec ABI.
use ferry_abi::launch::{AbiRecord, KernelArgs, RegisterCallableArgs, KERNEL_ARGS_ABI_VERSION};
use ferry_abi::services::{
    AicpuKernelCall, KERNEL_ADD, KERNEL_ADD_ND, KERNEL_ADD_SCALAR, KERNEL_ATTN_MERGE,
    KERNEL_ATTN_PARTIAL, KERNEL_CAST_ND, KERNEL_COPY, KERNEL_COUNT, KERNEL_MUL, KERNEL_SCALE,
    STATUS_ABI_SIZE_MISMATCH, STATUS_ABI_VERSION_MISMATCH, STATUS_BAD_ADDRESS,
    STATUS_MISSING_SYMBOL, STATUS_OK,
};
use ferry_launch::loader::{
    LoadError, LoadMethod, LoadedAicpuProgram, Loader, LoaderBuilder, ProgramImage,
};
use ferry_programs::{
    AICPU_DEVICE_ORCHESTRATED as ORCHESTRATED, AICPU_HOST_BUILT_GRAPH as HBG, KERNELS, ORCH_STORM,
    ORCH_VECTOR,
};
use ferry_sim::cores::{Chip, CoreConfig};
use ferry_sim::profile::{DeviceProfile, PathBFixes};
use ferry_sim::{Arch, PlatformBuilder};
use std::path::{Path, PathBuf};

/// The task runtime's status for exec args whose `runtime_args` is not a runtime image
/// (`ferry_runtime::device::ffi::STATUS_BAD_IMAGE`; spelled out here because ferry-runtime
/// depends on this crate).
const STATUS_BAD_IMAGE: i32 = ferry_abi::services::STATUS_RUNTIME_BASE + 1;

/// Runs exec with `args` that are not a runtime image: the program receives them by value, its
/// task runtime (the exec hook) refuses them with its typed status, and nothing else happens.
fn exec_probe(prog: &LoadedAicpuProgram<Chip>, args: &KernelArgs, threads: u32) {
    match prog.exec(args, threads) {
        Err(LoadError::Entry { entry, status }) => {
            assert_eq!((entry.as_str(), status), ("ferry_aicpu_exec", STATUS_BAD_IMAGE));
        }
        other => panic!("expected the runtime's bad-image status, got {other:?}"),
    }
}

/// A device root private to one test, removed when dropped.
struct Root(PathBuf);

impl Root {
    fn new(test: &str) -> Root {
        let p =
            std::env::temp_dir().join(format!("ferry-loader-test-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Root(p)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn chip_with(root: &Path, arch: Arch, f: impl FnOnce(&mut PlatformBuilder)) -> Chip {
    let mut b = PlatformBuilder::new(arch);
    b.hbm_bytes(64 << 20).device_root(root);
    f(&mut b);
    let p = b.build().unwrap();
    Chip::new(p.device(0).unwrap().clone(), CoreConfig { aicpu_threads: 2, aic: 1, aiv: 2 })
        .unwrap()
}

/// A chip on the default (vendor) device: the Path A latch is on, so one Path A program per
/// device.
fn chip(root: &Path) -> Chip {
    chip_with(root, Arch::A2a3, |_| {})
}

/// A chip on ferry's relaxed device (no Path A latch, coherent Path B cluster), for the tests
/// that load several different programs through Path A on one device (two runtimes, a run of
/// bad images after a good one): the vendor latch would keep the first.
fn relaxed_chip(root: &Path) -> Chip {
    chip_with(root, Arch::A2a3, |b| {
        b.profile(DeviceProfile::Relaxed);
    })
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn path_a_bootstraps_through_the_dispatcher_and_runs_exec() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("path-a");
    let chip = chip(&root.0);
    let loader = Loader::new(&chip).unwrap();
    assert_eq!(loader.method(), LoadMethod::DispatcherBootstrap);
    let prog = loader.load(&ORCHESTRATED).unwrap();
    let os = loader.programs().device().aicpu_os();

    // The dispatcher ran once on the AICPU and saved the program under its fingerprint name,
    // in this process's directory under the device root.
    let st = os.stats();
    assert_eq!((st.kfc_launches, st.so_saves), (1, 1));
    let dir = os.process_dir();
    assert!(dir.starts_with(&root.0));
    assert!(dir.ends_with(format!("0/aicpu_kernels_device/{}_0", std::process::id())));
    let inner = format!("inner_{:016x}_0.so", ORCHESTRATED.fingerprint);
    let names = files(&dir);
    assert!(names.contains(&inner), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("dispatcher_")), "{names:?}");
    assert!(!names.iter().any(|n| n.contains(".tmp.")), "no temp file left: {names:?}");
    assert_eq!(std::fs::read(dir.join(&inner)).unwrap(), ORCHESTRATED.bytes);

    // Identity verified; init ran once with this device's id.
    assert_eq!(prog.identity().name, "device-orchestrated");
    let r = prog.report().unwrap();
    assert_eq!(r.name().unwrap(), "device-orchestrated");
    assert_eq!(r.build_id, ORCHESTRATED.build_id);
    assert_eq!((r.init_calls, r.init_device_id), (1, 0));

    // A second load of the same program does not bootstrap again.
    let again = loader.load(&ORCHESTRATED).unwrap();
    assert_eq!(os.stats().kfc_launches, 1);
    drop(again);
}

#[test]
fn path_a_works_on_both_arches_and_on_a_second_device() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    for arch in [Arch::A2a3, Arch::A5] {
        let root = Root::new(&format!("arches-{arch:?}"));
        let p = PlatformBuilder::new(arch)
            .devices(2)
            .hbm_bytes(64 << 20)
            .device_root(&root.0)
            .build()
            .unwrap();
        let chip = Chip::new(
            p.device(1).unwrap().clone(),
            CoreConfig { aicpu_threads: 2, aic: 1, aiv: 2 },
        )
        .unwrap();
        let loader = Loader::new(&chip).unwrap();
        let prog = loader.load(&HBG).unwrap();
        let r = prog.report().unwrap();
        assert_eq!((r.name().unwrap(), r.init_device_id), ("host-built-graph", 1), "{arch:?}");
        let dir = loader.programs().device().aicpu_os().process_dir();
        assert!(dir.ends_with(format!("{}_1", std::process::id())), "{}", dir.display());
        assert!(files(&dir).contains(&format!("inner_{:016x}_1.so", HBG.fingerprint)));
        exec_probe(&prog, &KernelArgs::new(9, 10), 2);
        assert_eq!(prog.report().unwrap().last_exec_args(), Some(KernelArgs::new(9, 10)));
    }
}

#[test]
fn exec_receives_front_less_kernel_args_by_value() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("exec-abi");
    let chip = chip(&root.0);
    let loader = Loader::new(&chip).unwrap();
    let prog = loader.load(&ORCHESTRATED).unwrap();
    let mut args = KernelArgs::new(0x1111_2222_3333_4444, 0x5555_6666_7777_8888);
    args.device_wall_data_base = 0x99;
    exec_probe(&prog, &args, 2);
    let r = prog.report().unwrap();
    assert_eq!(r.exec_calls, 2, "one exec per launched AICPU thread");
    assert_eq!((r.last_exec_threads, r.exec_thread_mask), (2, 0b11), "threads 0 and 1 ran exec");
    assert_eq!(r.last_exec_status, STATUS_BAD_IMAGE, "the runtime saw and refused them");
    // The launch blob is exactly the KernelArgs image: runtime_args at 0, regs at 8, no front.
    assert_eq!(r.last_exec_len as usize, KernelArgs::SIZE);
    assert_eq!(&r.last_exec_blob[0..8], &0x1111_2222_3333_4444u64.to_le_bytes());
    assert_eq!(&r.last_exec_blob[8..16], &0x5555_6666_7777_8888u64.to_le_bytes());
    assert_eq!(r.last_exec_args(), Some(args));

    // Skew: a blob built against another layout gets a typed error, and the program stays
    // usable afterwards.
    let short = &args.as_bytes()[..KernelArgs::SIZE - 8];
    match prog.exec_blob(short, 1) {
        Err(LoadError::AbiMismatch { entry, status }) => {
            assert_eq!(entry, "ferry_aicpu_exec");
            assert_eq!(status, STATUS_ABI_SIZE_MISMATCH);
        }
        other => panic!("expected an abi mismatch, got {other:?}"),
    }
    let mut newer = args;
    newer.abi_version = KERNEL_ARGS_ABI_VERSION + 1;
    assert!(matches!(
        prog.exec(&newer, 1),
        Err(LoadError::AbiMismatch { status: STATUS_ABI_VERSION_MISMATCH, .. })
    ));
    exec_probe(&prog, &KernelArgs::new(1, 2), 1);
    assert_eq!(prog.report().unwrap().last_exec_args(), Some(KernelArgs::new(1, 2)));
}

#[test]
fn latch_quirk_is_detected_and_refused() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("latch");
    let chip = chip_with(&root.0, Arch::A2a3, |b| {
        b.first_saved_so_wins(true);
    });
    let loader = Loader::new(&chip).unwrap();
    assert!(loader.programs().device().aicpu_os().caps().first_saved_so_wins);
    let first = loader.load(&ORCHESTRATED).unwrap();
    let err = loader.load(&HBG).unwrap_err();
    match &err {
        LoadError::ResidentMismatch { shipped, resident } => {
            assert_eq!(shipped.name, "host-built-graph");
            assert_eq!(shipped.build_id, HBG.build_id);
            assert_eq!(resident.name, "device-orchestrated");
            assert_eq!(resident.build_id, ORCHESTRATED.build_id);
        }
        other => panic!("expected a resident mismatch, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("latch") && msg.contains("host-built-graph"), "{msg}");
    // The second SaveSoFile silently did nothing: its file was never written.
    let st = loader.programs().device().aicpu_os().stats();
    assert_eq!((st.so_saves, st.so_save_noops), (1, 1));
    let hbg_file = format!("inner_{:016x}_0.so", HBG.fingerprint);
    assert!(!files(&loader.programs().device().aicpu_os().process_dir()).contains(&hbg_file));
    // The wrong program was never initialised by the second runtime, and the first one still
    // works.
    assert_eq!(first.report().unwrap().init_calls, 1);
    exec_probe(&first, &KernelArgs::new(5, 6), 1);
    // With the latch holding a resident program, a name found nowhere resolves to it; a
    // custom-scheduler (user-defined) entry is looked up in its own directory only.
    let entry = |user_defined: bool| ferry_sim::aicpu_os::OpEntry {
        op_type: "probe".into(),
        function_name: "ferry_aicpu_exec".into(),
        kernel_so: "never_saved.so".into(),
        user_defined,
    };
    let os = loader.programs().device().aicpu_os();
    assert!(os.binary_load(&[entry(false)]).is_ok(), "resolved to the resident program");
    match os.binary_load(&[entry(true)]) {
        Err(ferry_sim::aicpu_os::OsError::NotFound { basename, .. }) => {
            assert_eq!(basename, "never_saved.so");
        }
        other => panic!("a user-defined entry took the latched program: {other:?}"),
    }
}

/// The identity check compares both halves of the identity: another build of a runtime of the
/// same name (same name, other build id) and another runtime that happens to share a build id
/// are both refused while the latch keeps the first program resident.
#[test]
fn resident_check_compares_the_name_and_the_build_id() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("resident-identity");
    let chip = chip(&root.0);
    let loader = Loader::new(&chip).unwrap();
    let first = loader.load(&ORCHESTRATED).unwrap();
    let rebuilt =
        ProgramImage { name: ORCHESTRATED.name, build_id: HBG.build_id, bytes: HBG.bytes };
    let same_build =
        ProgramImage { name: "other-runtime", build_id: ORCHESTRATED.build_id, ..rebuilt };
    for shipped in [rebuilt, same_build] {
        match loader.load_image(shipped) {
            Err(LoadError::ResidentMismatch { shipped: s, resident }) => {
                assert_eq!((s.name.as_str(), s.build_id), (shipped.name, shipped.build_id));
                assert_eq!(resident.name, ORCHESTRATED.name);
                assert_eq!(resident.build_id, ORCHESTRATED.build_id);
            }
            other => panic!(
                "{} {:#x}: expected a resident mismatch, got {other:?}",
                shipped.name, shipped.build_id
            ),
        }
    }
    assert_eq!(
        first.report().unwrap().init_calls,
        1,
        "the resident program was not re-initialised"
    );
}

/// Path A uploads again for every loader (every runner), even when this process's directory
/// already holds the program's file from an earlier loader: each loader bootstraps once, and
/// only its own bootstrap lets it skip the next upload of the same image.
#[test]
fn path_a_each_loader_bootstraps_again() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("reupload");
    let chip = chip(&root.0);
    let first = Loader::new(&chip).unwrap();
    let a = first.load(&ORCHESTRATED).unwrap();
    let os = first.programs().device().aicpu_os().clone();
    assert_eq!(os.stats().kfc_launches, 1);
    let inner = os.process_dir().join(format!("inner_{:016x}_0.so", ORCHESTRATED.fingerprint));
    assert!(inner.is_file());
    let second = Loader::new(&chip).unwrap();
    let b = second.load(&ORCHESTRATED).unwrap();
    assert_eq!(os.stats().kfc_launches, 2, "the second loader bootstrapped again");
    // On the vendor device the second SaveSoFile is the latch's silent no-op.
    assert_eq!((os.stats().so_saves, os.stats().so_save_noops), (1, 1));
    let _again = second.load(&ORCHESTRATED).unwrap();
    assert_eq!(os.stats().kfc_launches, 2, "a loader's own bootstrap is not repeated");
    exec_probe(&a, &KernelArgs::new(1, 0), 1);
    exec_probe(&b, &KernelArgs::new(2, 0), 1);
}

#[test]
fn two_runtimes_in_one_process_without_the_quirk() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("two-runtimes");
    let chip = relaxed_chip(&root.0);
    assert!(!chip.device().aicpu_os().caps().first_saved_so_wins, "the relaxed device");
    let loader = Loader::new(&chip).unwrap();
    let a = loader.load(&ORCHESTRATED).unwrap();
    let b = loader.load(&HBG).unwrap();
    assert_ne!(a.fingerprint(), b.fingerprint());
    exec_probe(&a, &KernelArgs::new(0xA, 0), 1);
    exec_probe(&b, &KernelArgs::new(0xB, 0), 2);
    let (ra, rb) = (a.report().unwrap(), b.report().unwrap());
    assert_eq!((ra.name().unwrap(), ra.exec_calls), ("device-orchestrated", 1));
    assert_eq!((rb.name().unwrap(), rb.exec_calls), ("host-built-graph", 2));
    assert_eq!(ra.last_exec_args().unwrap().runtime_args, 0xA);
    assert_eq!(rb.last_exec_args().unwrap().runtime_args, 0xB);
    // A second loader (another runner) on the same device shares the OS and the files.
    let loader2 = Loader::new(&chip).unwrap();
    let a2 = loader2.load(&ORCHESTRATED).unwrap();
    // InitArgs once per device: the resident program latched them for the first loader and the
    // second one's init does not re-init it.
    let r2 = a2.report().unwrap();
    assert_eq!((r2.init_calls, r2.init_device_id), (1, 0), "the resident program re-initialised");
    exec_probe(&a2, &KernelArgs::new(0xC, 0), 2);
}

#[test]
fn method_1_loads_a_preinstalled_program_and_refuses_a_missing_one() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("method-1");
    let chip = chip(&root.0);
    let loader = LoaderBuilder::new(&chip).method(LoadMethod::Preinstalled).build().unwrap();
    match loader.load(&ORCHESTRATED) {
        Err(LoadError::NotPreinstalled { program, path }) => {
            assert_eq!(program, "device-orchestrated");
            assert!(path.starts_with(loader.programs().device().aicpu_os().preinstalled_dir()));
        }
        other => panic!("expected not-preinstalled, got {other:?}"),
    }
    // The operator installs both runtimes; both load, nothing is uploaded.
    for p in [&ORCHESTRATED, &HBG] {
        loader
            .programs()
            .device()
            .aicpu_os()
            .install_preinstalled(&ferry_launch::loader::preinstalled_name(p.name), p.bytes)
            .unwrap();
    }
    let a = loader.load(&ORCHESTRATED).unwrap();
    let b = loader.load(&HBG).unwrap();
    exec_probe(&a, &KernelArgs::new(1, 0), 1);
    exec_probe(&b, &KernelArgs::new(2, 0), 1);
    assert_eq!(loader.programs().device().aicpu_os().stats().kfc_launches, 0);
    assert_eq!(loader.programs().device().aicpu_os().stats().so_saves, 0);
}

#[test]
fn path_b_loads_on_the_vendor_device_and_the_preflight_refuses_it() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("path-b");
    let chip = chip(&root.0);
    let caps = chip.device().aicpu_os().caps();
    assert!(!caps.custom_scheduler_coherent, "default: incoherent");
    // As on the real stack, Path B loads: the program's entries run (the hang is in a run's
    // handshake, tested in ferry-runtime's path_b tests).
    let loader = LoaderBuilder::new(&chip).method(LoadMethod::CustomScheduler).build().unwrap();
    let a = loader.load(&ORCHESTRATED).unwrap();
    exec_probe(&a, &KernelArgs::new(1, 0), 1);
    assert_eq!(a.exec_function().cluster(), ferry_sim::cache::Cluster::Custom);
    drop((a, loader));
    // The opt-in preflight refuses it up front, with the reason.
    let err = LoaderBuilder::new(&chip)
        .method(LoadMethod::CustomScheduler)
        .refuse_incoherent_path_b(true)
        .build()
        .unwrap_err();
    assert!(matches!(err, LoadError::PathBIncoherent { device: 0 }));
    let msg = err.to_string();
    assert!(
        msg.contains("stale L1") && msg.contains("aicore_done") && msg.contains("the Path B hang"),
        "{msg}"
    );
    // Fix B or C satisfies the preflight.
    for fixes in [
        PathBFixes { noncacheable_handshake: true, ..PathBFixes::NONE },
        PathBFixes { same_cluster_affinity: true, ..PathBFixes::NONE },
    ] {
        let r = Root::new(&format!("path-b-fix-{}", fixes.letters()));
        let chip = chip_with(&r.0, Arch::A2a3, |b| {
            b.path_b_fixes(fixes);
        });
        let mut b = LoaderBuilder::new(&chip);
        b.method(LoadMethod::CustomScheduler).refuse_incoherent_path_b(true);
        assert!(b.build().is_ok(), "{fixes:?}");
    }
}

#[test]
fn path_b_runs_two_runtimes_in_one_process_on_a_coherent_device() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root2 = Root::new("path-b-coherent");
    let chip = chip_with(&root2.0, Arch::A5, |b| {
        b.custom_scheduler_coherent(true).first_saved_so_wins(true);
    });
    let loader = LoaderBuilder::new(&chip).method(LoadMethod::CustomScheduler).build().unwrap();
    // The latch lives in a library the custom scheduler does not link: two runtimes coexist.
    let a = loader.load(&ORCHESTRATED).unwrap();
    let b = loader.load(&HBG).unwrap();
    exec_probe(&a, &KernelArgs::new(1, 0), 1);
    exec_probe(&b, &KernelArgs::new(2, 0), 1);
    let names = files(&loader.programs().device().aicpu_os().custom_dir());
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(loader.programs().device().aicpu_os().stats().kfc_launches, 0);
}

#[test]
fn path_a_second_runtime_is_refused_by_default_and_works_under_method_1() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    // The default (vendor) device has the latch: a second runtime under Path A is refused.
    let root = Root::new("default-latch");
    let chip = chip(&root.0);
    assert!(chip.device().aicpu_os().caps().first_saved_so_wins, "vendor default");
    assert_eq!(chip.device().aicpu_os().caps().profile, DeviceProfile::Vendor);
    let loader = Loader::new(&chip).unwrap();
    let first = loader.load(&ORCHESTRATED).unwrap();
    assert!(matches!(loader.load(&HBG), Err(LoadError::ResidentMismatch { .. })));
    exec_probe(&first, &KernelArgs::new(7, 0), 1);
    // The same device, Method 1: both preinstalled runtimes load (no SaveSoFile, no latch).
    let m1 = LoaderBuilder::new(&chip).method(LoadMethod::Preinstalled).build().unwrap();
    for p in [&ORCHESTRATED, &HBG] {
        m1.programs()
            .device()
            .aicpu_os()
            .install_preinstalled(&ferry_launch::loader::preinstalled_name(p.name), p.bytes)
            .unwrap();
    }
    let (a, b) = (m1.load(&ORCHESTRATED).unwrap(), m1.load(&HBG).unwrap());
    exec_probe(&a, &KernelArgs::new(1, 0), 1);
    exec_probe(&b, &KernelArgs::new(2, 0), 1);
}

#[test]
fn teardown_removes_only_this_process_directory() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("teardown");
    let chip = chip(&root.0);
    let os = chip.device().aicpu_os();
    // Another process's directory, and a historical file in the shared root.
    let other = os.process_dir().parent().unwrap().join("999999_0");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("inner_00000000000000aa_0.so"), b"x").unwrap();
    let loader = Loader::new(&chip).unwrap();
    let prog = loader.load(&ORCHESTRATED).unwrap();
    let mine = os.process_dir();
    assert!(mine.is_dir());
    loader.teardown();
    assert!(mine.is_dir(), "a loaded program keeps the session open");
    drop(prog);
    assert!(!mine.exists(), "the last user removed this process's directory");
    assert_eq!(files(&other), vec!["inner_00000000000000aa_0.so".to_string()]);
}

#[test]
fn device_reset_uploads_again() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("reset");
    let chip = chip(&root.0);
    let loader = Loader::new(&chip).unwrap();
    let before = loader.load(&ORCHESTRATED).unwrap();
    drop(before);
    let os = loader.programs().device().aicpu_os();
    assert_eq!(os.stats().kfc_launches, 1);
    let loads = os.stats().object_loads;
    assert!(loads > 0, "the dispatcher and the program were loaded");
    assert_eq!(os.stats().resets, 0);
    os.reset().unwrap();
    assert_eq!(os.stats().resets, 1);
    assert!(files(&os.process_dir()).is_empty(), "the reset device forgot every file");
    let after = loader.load(&ORCHESTRATED).unwrap();
    assert_eq!(os.stats().kfc_launches, 2, "bootstrapped again after the reset");
    assert_eq!(os.stats().object_loads, 2 * loads, "every object loaded again after the reset");
    exec_probe(&after, &KernelArgs::new(3, 4), 1);
}

#[test]
fn bad_inputs_give_typed_errors_and_leave_the_loader_usable() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("bad-inputs");
    let chip = relaxed_chip(&root.0);
    let loader = Loader::new(&chip).unwrap();
    let good = ORCHESTRATED.bytes;
    let image = |bytes| ProgramImage { name: "bad", build_id: 0, bytes };
    let before = loader.programs().device().aicpu_os().stats();

    // Truncated: caught on the host, nothing uploaded.
    let half = &good[..good.len() / 2];
    assert!(matches!(loader.load_image(image(half)), Err(LoadError::Truncated { .. })));
    // Not an ELF at all.
    let garbage = vec![0x5Au8; 4096];
    assert!(matches!(loader.load_image(image(&garbage)), Err(LoadError::Corrupt { .. })));
    assert_eq!(loader.programs().device().aicpu_os().stats().kfc_launches, before.kfc_launches);

    // Well-formed headers, but the device's dynamic loader refuses it (wrong machine).
    let mut wrong_machine = good.to_vec();
    wrong_machine[18] ^= 0xFF;
    match loader.load_image(image(&wrong_machine)) {
        Err(LoadError::Corrupt { program, reason }) => {
            assert_eq!(program, "bad");
            assert!(!reason.is_empty());
        }
        other => panic!("expected corrupt, got {other:?}"),
    }

    // A valid shared object without the AICPU entries: missing entry symbol.
    match loader.load_image(ProgramImage::from(&KERNELS)) {
        Err(LoadError::MissingSymbol { symbol, .. }) => assert_eq!(symbol, "ferry_aicpu_init"),
        other => panic!("expected a missing symbol, got {other:?}"),
    }
    // A program that is not an AICPU program is refused before anything happens.
    assert!(matches!(loader.load(&KERNELS), Err(LoadError::WrongKind { .. })));

    // Nothing was written outside the device root.
    let tmp = files(&std::env::temp_dir());
    assert!(
        !tmp.iter().any(|n| n.starts_with("inner_") || n.starts_with("dispatcher_")),
        "{tmp:?}"
    );
    for e in walk(&root.0) {
        assert!(e.starts_with(&root.0));
    }

    // The loader and the device stay usable.
    let prog = loader.load(&ORCHESTRATED).unwrap();
    exec_probe(&prog, &KernelArgs::new(7, 8), 2);
    // Register-callable with a payload of the wrong size: abi mismatch, still usable.
    let rca = RegisterCallableArgs::new(1, 0, 0).unwrap();
    assert!(matches!(
        prog.register_callable_raw(&rca.as_bytes()[..100]),
        Err(LoadError::AbiMismatch { status: STATUS_ABI_SIZE_MISMATCH, .. })
    ));
    // An orchestration object address outside device memory.
    let bogus = RegisterCallableArgs::new(1, 0x4000_0000_dead_0000, 64).unwrap();
    assert!(matches!(
        prog.register_callable_raw(bogus.as_bytes()),
        Err(LoadError::Entry { status: STATUS_BAD_ADDRESS, .. })
    ));
    prog.register_callable(1, ORCH_VECTOR.bytes, None).unwrap();
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            }
            out.push(p);
        }
    }
    out
}

#[test]
fn register_callable_loads_reloads_and_unloads_orchestration() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("callables");
    // Both runtimes through Path A on one device: the relaxed device.
    let chip = relaxed_chip(&root.0);
    let loader = Loader::new(&chip).unwrap();
    let prog = loader.load(&ORCHESTRATED).unwrap();
    let used_before = chip.device().memory().used();
    let loads_before = loader.programs().device().aicpu_os().stats().object_loads;
    prog.register_callable(3, ORCH_VECTOR.bytes, None).unwrap();
    assert_eq!(
        loader.programs().device().aicpu_os().stats().object_loads,
        loads_before + 1,
        "the orchestration object"
    );
    let r = prog.report().unwrap();
    assert_eq!((r.register_calls, r.last_callable_id, r.callables_loaded), (1, 3, 1));
    assert_eq!(r.last_orch_name().unwrap(), "vector");
    // The object file is unlinked once loaded, and the host freed the upload buffer.
    assert!(!files(&loader.programs().device().aicpu_os().process_dir())
        .iter()
        .any(|n| n.starts_with("libdevice_orch_")));
    assert_eq!(chip.device().memory().used(), used_before);

    // Re-registering reloads; a missing entry symbol is a typed status and unloads the slot.
    prog.register_callable(3, ORCH_STORM.bytes, None).unwrap();
    let r = prog.report().unwrap();
    assert_eq!((r.callables_loaded, r.last_orch_name().unwrap()), (1, "storm"));
    assert!(matches!(
        prog.register_callable(4, ORCH_VECTOR.bytes, Some("no_such_entry")),
        Err(LoadError::Entry { status: STATUS_MISSING_SYMBOL, .. })
    ));
    assert!(matches!(
        prog.register_callable(64, ORCH_VECTOR.bytes, None),
        Err(LoadError::BadCallable(_))
    ));
    prog.register_callable(3, &[], None).unwrap();
    assert_eq!(prog.report().unwrap().callables_loaded, 0);

    // The host-built-graph runtime only records the call.
    let hbg = loader.load(&HBG).unwrap();
    hbg.register_callable(0, ORCH_VECTOR.bytes, None).unwrap();
    let r = hbg.report().unwrap();
    assert_eq!((r.register_calls, r.callables_loaded), (1, 0));
}

#[test]
fn kernel_library_runs_elementwise_kernels_over_device_memory() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    let root = Root::new("kernels");
    let chip = chip(&root.0);
    let dev = chip.device().clone();
    let loader = Loader::new(&chip).unwrap();
    let lib = loader.load_kernel_library(&KERNELS).unwrap();
    assert!(lib.kernel(KERNEL_ADD).is_some() && lib.kernel(99).is_none());
    let n = 1000u64;
    let upload = |v: &[f32]| {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let p = dev.malloc(bytes.len() as u64).unwrap();
        dev.copy_htod(&bytes, p).unwrap();
        p
    };
    let download = |p: ferry_sim::DevicePtr| {
        let mut b = vec![0u8; n as usize * 4];
        dev.copy_dtoh(p, &mut b).unwrap();
        b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<f32>>()
    };
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 2.0 * i as f32 + 1.0).collect();
    let (pa, pb, out) = (upload(&a), upload(&b), upload(&vec![0.0; n as usize]));
    let call = |id, scalar: f32| {
        let k = lib.kernel(id).unwrap();
        // Split over 3 blocks, as 3 cores would run it.
        for blk in 0..3 {
            let c = AicpuKernelCall {
                a: pa.0,
                b: pb.0,
                out: out.0,
                len: n,
                scalar_bits: scalar.to_bits(),
                block_idx: blk,
                block_dim: 3,
                reserved: 0,
            };
            assert_eq!(k.call(&c), STATUS_OK);
        }
        download(out)
    };
    let want = |f: &dyn Fn(usize) -> f32| (0..n as usize).map(f).collect::<Vec<f32>>();
    assert_eq!(call(KERNEL_ADD, 0.0), want(&|i| a[i] + b[i]));
    assert_eq!(call(KERNEL_MUL, 0.0), want(&|i| a[i] * b[i]));
    assert_eq!(call(KERNEL_SCALE, 0.5), want(&|i| a[i] * 0.5));
    assert_eq!(call(KERNEL_COPY, 0.0), a);
    assert_eq!(call(KERNEL_ADD_SCALAR, 2.0), want(&|i| a[i] + 2.0));
    // One numbering with the task runtime: ids 0..KERNEL_COUNT; the attention and view kernels
    // run only in the runtime's AICore executor, and ids past the table are unknown.
    assert_eq!((KERNEL_ADD, KERNEL_ADD_SCALAR, KERNEL_COUNT), (0, 4, 14));
    for id in [
        KERNEL_ATTN_PARTIAL,
        KERNEL_ATTN_MERGE,
        KERNEL_ADD_ND,
        KERNEL_CAST_ND,
        KERNEL_COUNT,
        u32::MAX,
    ] {
        assert!(lib.kernel(id).is_none(), "kernel {id}");
    }
    // A range outside device memory is a status, not a wild access.
    let k = lib.kernel(KERNEL_COPY).unwrap();
    let bad = AicpuKernelCall { a: pa.0, out: out.0, len: n * 2, ..AicpuKernelCall::default() };
    assert_eq!(k.call(&bad), STATUS_BAD_ADDRESS);
}

#[test]
fn dispatcher_exports_follow_their_contracts() {
    let _bound = ferry_watchdog::bound("the simulated chip");
    use ferry_abi::launch::{BootstrapArgs, BootstrapBlob};
    use ferry_abi::services::{STATUS_INVALID_ARGUMENT, STATUS_UNSUPPORTED};
    use ferry_programs::DISPATCHER;
    use ferry_sim::aicpu_os::{OpEntry, OsError};
    let root = Root::new("dispatcher");
    let chip = chip(&root.0);
    let dev = chip.device().clone();
    let os = dev.aicpu_os();
    let _session = os.open_session().unwrap();

    // A bootstrap whose BootstrapArgs pointer is null is rejected by the init export.
    let upload = |b: &[u8]| {
        let p = dev.malloc(b.len() as u64).unwrap();
        dev.copy_htod(b, p).unwrap();
        p
    };
    let disp = upload(DISPATCHER.bytes);
    let mut dargs = BootstrapArgs::zeroed();
    dargs.aicpu_so_bin = disp.0;
    dargs.aicpu_so_len = DISPATCHER.bytes.len() as u64;
    let dargs_ptr = upload(dargs.as_bytes());
    // No inner program in the BootstrapArgs: invalid argument, nothing saved.
    match os.launch_kfc(&chip, BootstrapBlob::new(dargs_ptr.0).as_bytes()) {
        Err(OsError::Entry { symbol, code }) => {
            assert_eq!(symbol, "DynTileFwkBackendKernelServerInit");
            assert_eq!(code, STATUS_INVALID_ARGUMENT);
        }
        other => panic!("expected the init export's status, got {other:?}"),
    }
    assert_eq!(os.stats().so_saves, 0);
    // A blob that is not the bootstrap's is refused before anything runs.
    let mut not_bootstrap = BootstrapBlob::new(dargs_ptr.0);
    not_bootstrap.kernel_name[0] = b'X';
    assert!(matches!(
        os.launch_kfc(&chip, not_bootstrap.as_bytes()),
        Err(OsError::NotBootstrap { .. })
    ));

    // The static server is unsupported; the dynamic server is a read-only probe.
    let name = files(&os.process_dir()).into_iter().find(|n| n.starts_with("dispatcher_")).unwrap();
    let entry = |sym: &str| OpEntry {
        op_type: sym.into(),
        function_name: sym.into(),
        kernel_so: name.clone(),
        user_defined: false,
    };
    let syms = ["StaticTileFwkBackendKernelServer", "DynTileFwkBackendKernelServer"];
    let before = os.stats();
    let bin = os.binary_load(&syms.map(entry)).unwrap();
    assert_eq!(bin.function(syms[1]).unwrap().symbol(), syms[1]);
    // The loaded object: its file, the fingerprint of its bytes, and a missing export named
    // with the object's file name.
    let obj = bin.object(syms[1]).expect("the entry's object");
    assert_eq!(obj.path(), os.process_dir().join(&name));
    let bytes = std::fs::read(obj.path()).unwrap();
    assert_eq!(obj.fingerprint(), ferry_abi::services::fingerprint(&bytes));
    assert!(bin.object("no-such-op").is_none());
    let missing =
        os.binary_load(&[OpEntry { function_name: "NoSuchExport".into(), ..entry("probe") }]);
    match missing.unwrap().function("probe") {
        Err(OsError::MissingSymbol { object, symbol }) => {
            assert_eq!((object.as_str(), symbol.as_str()), (name.as_str(), "NoSuchExport"));
        }
        other => panic!("expected a missing symbol, got {other:?}"),
    }
    let run = |sym: &str, blob: &BootstrapBlob| {
        os.launch_cpu_kernel(&chip, &bin.function(sym).unwrap(), 1, blob.as_bytes()).unwrap().wait()
    };
    let inner = upload(ORCHESTRATED.bytes);
    dargs.inner_so_bin = inner.0;
    dargs.inner_so_len = ORCHESTRATED.bytes.len() as u64;
    let good = upload(dargs.as_bytes());
    let blob = BootstrapBlob::new(good.0);
    assert!(matches!(run(syms[0], &blob), Err(OsError::Entry { code: STATUS_UNSUPPORTED, .. })));
    run(syms[1], &blob).unwrap();
    assert!(matches!(
        run(syms[1], &BootstrapBlob::new(0)),
        Err(OsError::Entry { code: STATUS_INVALID_ARGUMENT, .. })
    ));
    assert_eq!(os.stats().so_saves, 0, "neither server writes");
    let after = os.stats();
    assert_eq!(after.binary_loads - before.binary_loads, 2, "this binary and the missing one");
    assert_eq!(after.cpu_launches - before.cpu_launches, 3, "three launches, failed ones too");
}
