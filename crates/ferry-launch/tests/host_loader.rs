//! The loader is generic over the device's program loader: on the host-memory backend (whose
//! programs are host code registered for their images) each method loads a program, verifies
//! its identity and ABI and runs its init, its exec runs as the AICPU body of a launch, and a
//! bad image, a missing export, another program's identity or another ABI is the loader's
//! typed error, with nothing left allocated on the device.
use ferry_abi::launch::{AbiRecord, InitArgs, KernelArgs};
use ferry_abi::services::{
    ProgramReport, QueryArgs, EXPORT_AICPU_EXEC, EXPORT_AICPU_INIT, EXPORT_AICPU_QUERY,
    EXPORT_AICPU_REGISTER_CALLABLE, STATUS_ABI_SIZE_MISMATCH, STATUS_ABI_VERSION_MISMATCH,
    STATUS_OK,
};
use ferry_backend::host::{HostMemoryBackend, HostMemoryDevice, HostProgramCode};
use ferry_backend::{Backend, BackendDevice, DevicePtr, ProgramDevice};
use ferry_launch::loader::{
    preinstalled_name, LoadError, LoadMethod, Loader, LoaderBuilder, ProgramImage,
};
use ferry_launch::{EntryKernels, LaunchDescriptor, LaunchStaging, RunStreams};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the program's entries saw.
#[derive(Debug, Default)]
struct Seen {
    init_calls: AtomicU32,
    init_device: AtomicU32,
    exec_calls: AtomicU32,
    last_runtime_args: AtomicU64,
}

/// How the program behaves.
#[derive(Clone, Copy)]
struct Behaviour {
    /// The identity it reports.
    name: &'static str,
    build_id: u64,
    /// The `KernelArgs` size it reports it was built against.
    kernel_args_size: u32,
    /// Whether its init refuses the host's `InitArgs` as another version.
    init_other_version: bool,
}

const NAME: &str = "host-program";
const BUILD: u64 = 0x5eed;
const GOOD: Behaviour = Behaviour {
    name: NAME,
    build_id: BUILD,
    kernel_args_size: KernelArgs::SIZE as u32,
    init_other_version: false,
};

/// The host code of an AICPU program with the four entries.
fn program(b: Behaviour, seen: &Arc<Seen>) -> HostProgramCode {
    let (s1, s2, s3) = (seen.clone(), seen.clone(), seen.clone());
    HostProgramCode::new()
        .export(EXPORT_AICPU_INIT, move |_, p| {
            let Ok(args) = InitArgs::from_bytes(p) else { return STATUS_ABI_SIZE_MISMATCH };
            if b.init_other_version {
                return STATUS_ABI_VERSION_MISMATCH;
            }
            // Relaxed: read by the test after the launch returned on this thread.
            s1.init_calls.fetch_add(1, Ordering::Relaxed);
            s1.init_device.store(args.device_id, Ordering::Relaxed);
            STATUS_OK
        })
        .export(EXPORT_AICPU_QUERY, move |dev: &HostMemoryDevice, p| {
            let Ok(q) = QueryArgs::from_bytes(p) else { return STATUS_ABI_SIZE_MISMATCH };
            let mut r = ProgramReport::new(b.name, b.build_id).expect("a short name");
            r.kernel_args_size = b.kernel_args_size;
            // Relaxed: as above.
            r.init_calls = s2.init_calls.load(Ordering::Relaxed);
            match dev.copy_htod(r.as_bytes(), DevicePtr(q.result_addr)) {
                Ok(()) => STATUS_OK,
                Err(_) => ferry_abi::services::STATUS_BAD_ADDRESS,
            }
        })
        .export(EXPORT_AICPU_REGISTER_CALLABLE, |_, _| STATUS_OK)
        .export(EXPORT_AICPU_EXEC, move |_, p| {
            let Ok(args) = KernelArgs::from_bytes_checked(p) else {
                return STATUS_ABI_SIZE_MISMATCH;
            };
            // Relaxed: as above.
            s3.exec_calls.fetch_add(1, Ordering::Relaxed);
            s3.last_runtime_args.store(args.runtime_args, Ordering::Relaxed);
            STATUS_OK
        })
}

/// A well-formed shared object to stand for the program (the loader checks the ELF headers
/// before anything reaches the device): the embedded kernel library's bytes, with one byte
/// changed per `variant` so that each variant is its own image.
fn image(variant: u8) -> Vec<u8> {
    let mut bytes = ferry_programs::KERNELS.bytes.to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= variant;
    bytes
}

fn device() -> (HostMemoryBackend, HostMemoryDevice) {
    let b = HostMemoryBackend::new(2, 64 << 20).unwrap();
    let d = b.device(1).unwrap().clone();
    (b, d)
}

#[test]
fn path_a_loads_a_program_and_its_exec_runs_as_a_launchs_aicpu_body() {
    let _bound = ferry_watchdog::bound("the host-memory backend's loader");
    let (_b, dev) = device();
    let (bytes, seen) = (image(0), Arc::new(Seen::default()));
    dev.register_code(&bytes, program(GOOD, &seen));
    let loader = Loader::new(&dev).unwrap();
    assert_eq!(loader.method(), LoadMethod::DispatcherBootstrap);
    let img = ProgramImage { name: NAME, build_id: BUILD, bytes: &bytes };
    let prog = loader.load_image(img).unwrap();
    assert_eq!((prog.identity().name.as_str(), prog.identity().build_id), (NAME, BUILD));
    // The bootstrap saved the program; init ran once, with this device's id.
    assert_eq!(dev.program_stats().bootstraps, 1);
    assert_eq!(seen.init_calls.load(Ordering::Relaxed), 1);
    assert_eq!(seen.init_device.load(Ordering::Relaxed), 1);
    assert_eq!(prog.report().unwrap().init_calls, 1);
    // Every buffer the loader uploaded (dispatcher, program, arguments, report) is freed.
    assert_eq!(dev.stats().allocated_bytes, 0);
    // A second load of the same image does not bootstrap again.
    drop(loader.load_image(img).unwrap());
    assert_eq!(dev.program_stats().bootstraps, 1);

    // Exec directly, then as the AICPU entry of a launch transaction on this backend.
    prog.exec(&KernelArgs::new(0x10, 0x20), 3).unwrap();
    assert_eq!(seen.exec_calls.load(Ordering::Relaxed), 3, "one call per AICPU thread");
    let exec = prog.aicpu_entry(2);
    let streams = RunStreams::new(&dev).unwrap();
    let mut slot = LaunchStaging::new(&dev, 0);
    let desc = LaunchDescriptor::new(vec![0x3c; 256], 128).unwrap();
    slot.prepare_runtime_args(&desc, KernelArgs::new(0, 0)).unwrap();
    let entries = EntryKernels::new(
        |_: &HostMemoryDevice, _| Ok(()),
        move |d: &HostMemoryDevice, args: KernelArgs| exec(d, args).map_err(|e| e.to_string()),
    );
    slot.launch(&streams, entries).unwrap();
    let done = slot.finish_run(Duration::from_secs(10)).unwrap();
    assert_eq!(done.run_error, None);
    assert_eq!(seen.exec_calls.load(Ordering::Relaxed), 5);
    let dst = slot.destination().unwrap().0;
    assert_eq!(seen.last_runtime_args.load(Ordering::Relaxed), dst, "the run's KernelArgs");
    slot.teardown().unwrap();

    // A reset forgets the saved program: the loader uploads again.
    dev.reset_programs();
    drop(loader.load_image(img).unwrap());
    assert_eq!(dev.program_stats().bootstraps, 2);
}

#[test]
fn preinstalled_and_custom_scheduler_methods_load_on_the_host_backend() {
    let _bound = ferry_watchdog::bound("the host-memory backend's loader");
    let (_b, dev) = device();
    let (bytes, seen) = (image(1), Arc::new(Seen::default()));
    dev.register_code(&bytes, program(GOOD, &seen));
    let img = ProgramImage { name: NAME, build_id: BUILD, bytes: &bytes };

    let m1 = LoaderBuilder::new(&dev).method(LoadMethod::Preinstalled).build().unwrap();
    match m1.load_image(img) {
        Err(LoadError::NotPreinstalled { program, path }) => {
            assert_eq!(program, NAME);
            assert!(path.ends_with(preinstalled_name(NAME)), "{}", path.display());
        }
        other => panic!("expected NotPreinstalled, got {other:?}"),
    }
    dev.install_preinstalled(&preinstalled_name(NAME), &bytes).unwrap();
    m1.load_image(img).unwrap();

    // Path B, with its preflight on: the host backend's cores are coherent.
    let pb = LoaderBuilder::new(&dev)
        .method(LoadMethod::CustomScheduler)
        .refuse_incoherent_path_b(true)
        .build()
        .unwrap();
    pb.load_image(img).unwrap();
    assert!(dev.custom_scheduler_coherent());
    assert_eq!(dev.program_stats().bootstraps, 0, "neither method bootstraps");
    assert_eq!(seen.init_calls.load(Ordering::Relaxed), 2);
    drop((m1, pb));
    assert_eq!(dev.program_stats().sessions, 0, "every session closed with its loader");
}

#[test]
fn bad_images_and_other_abis_are_typed_errors() {
    let _bound = ferry_watchdog::bound("the host-memory backend's loader");
    let (_b, dev) = device();
    let seen = Arc::new(Seen::default());
    let loader = Loader::new(&dev).unwrap();
    let load =
        |bytes: &[u8]| loader.load_image(ProgramImage { name: NAME, build_id: BUILD, bytes });

    // Truncated and non-ELF images never reach the device.
    let good = image(2);
    assert!(matches!(load(&good[..100]), Err(LoadError::Truncated { .. })));
    assert!(matches!(load(b"MZ not an object"), Err(LoadError::Corrupt { .. })));
    assert_eq!(dev.program_stats().bootstraps, 0);

    // An image the device has no code for: its loader refuses the object.
    match load(&good) {
        Err(LoadError::Corrupt { program, reason }) => {
            assert_eq!(program, NAME);
            assert!(reason.contains("no code"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }

    // Code without a query entry: a missing export.
    let missing = image(3);
    let partial = HostProgramCode::new()
        .export(EXPORT_AICPU_INIT, |_, _| STATUS_OK)
        .export(EXPORT_AICPU_EXEC, |_, _| STATUS_OK)
        .export(EXPORT_AICPU_REGISTER_CALLABLE, |_, _| STATUS_OK);
    dev.register_code(&missing, partial);
    assert!(matches!(
        load(&missing),
        Err(LoadError::MissingSymbol { symbol, .. }) if symbol == EXPORT_AICPU_QUERY
    ));

    // Another program answers: the identity check refuses it.
    let other = image(4);
    dev.register_code(&other, program(Behaviour { name: "someone-else", ..GOOD }, &seen));
    match load(&other) {
        Err(LoadError::ResidentMismatch { shipped, resident }) => {
            assert_eq!((shipped.name.as_str(), resident.name.as_str()), (NAME, "someone-else"));
        }
        r => panic!("expected ResidentMismatch, got {r:?}"),
    }

    // A program built against another KernelArgs, or whose init refuses the InitArgs version.
    let wide = image(5);
    let size = KernelArgs::SIZE as u32 + 8;
    dev.register_code(&wide, program(Behaviour { kernel_args_size: size, ..GOOD }, &seen));
    assert!(matches!(
        load(&wide),
        Err(LoadError::AbiMismatch { entry, status: STATUS_ABI_SIZE_MISMATCH })
            if entry == EXPORT_AICPU_QUERY
    ));
    let old = image(6);
    dev.register_code(&old, program(Behaviour { init_other_version: true, ..GOOD }, &seen));
    assert!(matches!(
        load(&old),
        Err(LoadError::AbiMismatch { entry, status: STATUS_ABI_VERSION_MISMATCH })
            if entry == EXPORT_AICPU_INIT
    ));
    assert_eq!(seen.init_calls.load(Ordering::Relaxed), 0, "no refused program was initialised");

    // Exec with a payload of another layout is the program's typed refusal.
    let ok = image(7);
    dev.register_code(&ok, program(GOOD, &seen));
    let prog = load(&ok).unwrap();
    assert!(matches!(
        prog.exec_blob(&[0u8; 12], 1),
        Err(LoadError::AbiMismatch { entry, status: STATUS_ABI_SIZE_MISMATCH })
            if entry == EXPORT_AICPU_EXEC
    ));
    // Nothing the failed loads uploaded is left on the device, and the loader still works.
    assert_eq!(dev.stats().allocated_bytes, 0);
    prog.exec(&KernelArgs::new(1, 2), 1).unwrap();
}
