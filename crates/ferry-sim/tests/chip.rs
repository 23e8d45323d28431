//! The chip's own rules: when a core starts (after the launch latency, after the cached
//! launch's line fills, or after a minute of device time when those never come), which bell a
//! core's register write rings, how a launch's completion reports, which chip a core thread's
//! service calls resolve to, how deep a kernel's stack may go, and what dropping the chip gives
//! back. Each test waits for state the chip exposes, never for a thread to be slow.
use ferry_abi::services::{DeviceServices, MEM_LOAD_PLAIN, STATUS_OK};
use ferry_sim::cache::Cluster;
use ferry_sim::clock::VirtualDeviceClock;
use ferry_sim::cores::{Chip, CoreConfig, CoreCtx};
use ferry_sim::{Arch, DeviceError, PlatformBuilder};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A one-device platform rooted in its own temporary directory (removed on drop).
struct Rig {
    root: std::path::PathBuf,
    chip: Chip,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn rig(name: &str, config: CoreConfig, f: impl FnOnce(&mut PlatformBuilder)) -> Rig {
    let root = std::env::temp_dir().join(format!("ferry-chip-{}-{name}", std::process::id()));
    let mut b = PlatformBuilder::new(Arch::A2a3);
    b.hbm_bytes(1 << 24).device_root(&root);
    f(&mut b);
    let p = b.build().unwrap();
    let chip = Chip::new(p.device(0).unwrap().clone(), config).unwrap();
    Rig { root, chip }
}

const ONE_CORE: CoreConfig = CoreConfig { aicpu_threads: 1, aic: 1, aiv: 0 };

fn services(chip: &Chip) -> DeviceServices {
    // SAFETY: the table lives as long as the device, which the rig keeps alive.
    unsafe { *chip.device().aicpu_os().services() }
}

/// Polls `held` until it holds (the state that proves a wait); fails at once with `early` if
/// `started` shows the work behind the wait already ran.
fn until_held(mut held: impl FnMut() -> bool, started: &mpsc::Receiver<u64>, early: &str) {
    while !held() {
        if let Ok(v) = started.try_recv() {
            panic!("{early} (it reported {v})");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A core start waits until the cached AICPU launch now running has filled the configured
/// number of lines: it is held (the chip counts it) before the fills, it sees every fill when
/// it starts, and the count of held starts is back to 0 afterwards.
#[test]
fn a_core_start_waits_for_the_cached_launchs_line_fills() {
    let bound = ferry_watchdog::bound("the cached launch and the held core start");
    // A virtual clock that never moves: the minute a held start gives up after never passes.
    let rig = rig("fills", ONE_CORE, |b| {
        b.aicore_start_after_line_fills(2).virtual_clock(VirtualDeviceClock::new());
    });
    let dev = rig.chip.device().clone();
    let lines = dev.malloc(4 * 64).unwrap();
    dev.copy_htod(&[0u8; 4 * 64], lines).unwrap();
    let os = dev.aicpu_os();
    let svc = services(&rig.chip);
    let (go_tx, go_rx) = mpsc::sync_channel::<()>(1);
    let (end_tx, end_rx) = mpsc::sync_channel::<()>(1);
    let rx = Mutex::new((go_rx, end_rx));
    let cached = os
        .launch_on_cluster(
            &rig.chip,
            Cluster::Custom,
            1,
            Arc::new(move |_| {
                let svc = &svc; // the whole table (Send), not its raw `ctx` field
                let rx = rx.lock().unwrap();
                rx.0.recv().map_err(|e| e.to_string())?;
                for i in 0..2 {
                    let mut v = 0;
                    assert_eq!(
                        (svc.mem_load)(svc.ctx, lines.0 + 64 * i, 4, MEM_LOAD_PLAIN, &mut v),
                        STATUS_OK
                    );
                }
                // Stays running (its fills counted) until the core has started.
                rx.1.recv().map_err(|e| e.to_string())
            }),
        )
        .unwrap();
    let (seen_tx, seen_rx) = mpsc::sync_channel::<u64>(1);
    let seen_tx = Mutex::new(seen_tx);
    let os2 = os.clone();
    let core = rig
        .chip
        .launch_aicore(
            1,
            Arc::new(move |_: CoreCtx| {
                let fills = os2.launch_line_fills();
                seen_tx.lock().unwrap().send(fills).map_err(|e| e.to_string())
            }),
        )
        .unwrap();
    bound.waiting_for("the core start to be held for the line fills");
    until_held(
        || rig.chip.starts_held_for_line_fills() == 1,
        &seen_rx,
        "the core started before the cached launch filled any line",
    );
    go_tx.send(()).unwrap();
    bound.waiting_for("the core to start once two lines are filled");
    assert_eq!(seen_rx.recv().unwrap(), 2, "the core started with both fills done");
    end_tx.send(()).unwrap();
    bound.waiting_for("both launches to end");
    core.wait().unwrap();
    cached.wait().unwrap();
    assert_eq!(rig.chip.starts_held_for_line_fills(), 0, "no start is held any more");
}

/// When the fills never come (a count the launch never reaches), a held start gives up after a
/// minute of device time and the core runs: on a virtual clock the start stays held until the
/// clock has moved that minute.
#[test]
fn a_held_core_start_gives_up_after_a_minute_of_device_time() {
    let bound = ferry_watchdog::bound("the held core start");
    let clock = VirtualDeviceClock::new();
    let rig = rig("give-up", ONE_CORE, |b| {
        b.aicore_start_after_line_fills(5).virtual_clock(clock.clone());
    });
    let (seen_tx, seen_rx) = mpsc::sync_channel::<u64>(1);
    let seen_tx = Mutex::new(seen_tx);
    let os = rig.chip.device().aicpu_os();
    let core = rig
        .chip
        .launch_aicore(
            1,
            Arc::new(move |_: CoreCtx| {
                seen_tx.lock().unwrap().send(os.launch_line_fills()).map_err(|e| e.to_string())
            }),
        )
        .unwrap();
    bound.waiting_for("the core start to be held");
    until_held(
        || rig.chip.starts_held_for_line_fills() == 1,
        &seen_rx,
        "the core started without a single line fill",
    );
    let hz = rig.chip.device().clock().hz();
    clock.advance(60 * hz);
    bound.waiting_for("the held start to give up once a minute of device time passed");
    assert_eq!(seen_rx.recv().unwrap(), 0, "it ran without the fills");
    core.wait().unwrap();
    assert_eq!(rig.chip.starts_held_for_line_fills(), 0);
}

/// A core starts no sooner than the configured launch latency after its launch. (A lower
/// bound: a sleep never ends early, however the host schedules the thread.)
#[test]
fn a_core_starts_no_sooner_than_the_launch_latency() {
    let bound = ferry_watchdog::bound("the core start");
    let latency = Duration::from_millis(40);
    let rig = rig("latency", ONE_CORE, |b| {
        b.aicore_launch_latency(latency);
    });
    let (tx, rx) = mpsc::sync_channel::<Instant>(1);
    let tx = Mutex::new(tx);
    let launched = Instant::now();
    let done = rig
        .chip
        .launch_aicore(
            1,
            Arc::new(move |_: CoreCtx| {
                tx.lock().unwrap().send(Instant::now()).map_err(|e| e.to_string())
            }),
        )
        .unwrap();
    bound.waiting_for("the core to start");
    let started = rx.recv().unwrap();
    assert!(started - launched >= latency, "started {:?} after the launch", started - launched);
    done.wait().unwrap();
}

/// A core's register write rings the bell the AICPU threads park on: an AICPU thread parked
/// on `Chip::aicpu_bell` (the chip counts it) is woken by the core's write and sees it.
#[test]
fn a_core_register_write_wakes_an_aicpu_thread_parked_on_the_chips_bell() {
    let bound = ferry_watchdog::bound("the AICPU thread parked on the chip's bell");
    let rig = rig("bell", ONE_CORE, |_| {});
    let aicpu = rig
        .chip
        .launch_aicpu(
            1,
            Arc::new(|ctx| {
                let w = ctx.chip.window(0).clone();
                let woke = ctx.chip.aicpu_bell().wait_until(|| w.read(0x20) == 7, None);
                if woke {
                    Ok(())
                } else {
                    Err("woke without the write".into())
                }
            }),
        )
        .unwrap();
    bound.waiting_for("the AICPU thread to park on the chip's bell");
    while rig.chip.aicpu_bell().waiters() == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let core = rig
        .chip
        .launch_aicore(
            1,
            Arc::new(|ctx: CoreCtx| {
                ctx.window.core_write(0x20, 7);
                Ok(())
            }),
        )
        .unwrap();
    bound.waiting_for("the core's write to wake the AICPU thread");
    core.wait().unwrap();
    aicpu.wait().unwrap();
}

/// `wait_timeout` reports a launch whose threads still run as a timeout (and the launch goes
/// on), then the launch's own result once it ended: success, or the first thread's error.
#[test]
fn wait_timeout_reports_a_running_launch_then_its_result() {
    let bound = ferry_watchdog::bound("the launch held by the test");
    let rig = rig("wait-timeout", CoreConfig { aicpu_threads: 1, aic: 2, aiv: 0 }, |_| {});
    let (go_tx, go_rx) = mpsc::sync_channel::<()>(2);
    let go_rx = Mutex::new(go_rx);
    let done = rig
        .chip
        .launch_aicore(
            2,
            Arc::new(move |ctx: CoreCtx| {
                go_rx.lock().unwrap().recv().map_err(|e| e.to_string())?;
                if ctx.index == 1 {
                    Err("core 1 failed".into())
                } else {
                    Ok(())
                }
            }),
        )
        .unwrap();
    // The threads wait for the test, so the launch cannot have ended.
    match done.wait_timeout(Duration::from_millis(5)) {
        Err(DeviceError::Timeout { .. }) => {}
        other => panic!("a running launch reported {other:?}"),
    }
    assert!(!done.is_done());
    go_tx.send(()).unwrap();
    go_tx.send(()).unwrap();
    bound.waiting_for("the launch to end");
    match done.wait_timeout(Duration::from_secs(600)) {
        Err(DeviceError::Kernel { message, .. }) => assert_eq!(message, "core 1 failed"),
        other => panic!("a failed launch reported {other:?}"),
    }
    let ok = rig.chip.launch_aicore(1, Arc::new(|_: CoreCtx| Ok(()))).unwrap();
    bound.waiting_for("a launch that succeeds");
    ok.wait().unwrap();
    assert!(ok.wait_timeout(Duration::from_millis(1)).is_ok(), "an ended launch reports at once");
}

/// A core thread's service calls resolve to the chip whose entry it runs, also for a chip no
/// one attached to the device's OS: a register read through the services sees the value the
/// AICPU side wrote into the core's own window.
#[test]
fn a_core_threads_services_resolve_its_own_unattached_chip() {
    let bound = ferry_watchdog::bound("the core reading its register through the services");
    let rig = rig("core-chip", ONE_CORE, |_| {});
    let svc = services(&rig.chip);
    rig.chip.window(0).aicpu_write(0x30, 0x5eed);
    let done = rig
        .chip
        .launch_aicore(
            1,
            Arc::new(move |ctx: CoreCtx| {
                let svc = &svc; // the whole table (Send), not its raw `ctx` field
                let v = (svc.reg_read)(svc.ctx, ctx.window.base().0 + 0x30);
                if v == 0x5eed {
                    Ok(())
                } else {
                    Err(format!("the services read {v:#x}"))
                }
            }),
        )
        .unwrap();
    bound.waiting_for("the core's entry");
    done.wait().unwrap();
}

/// A kernel entry may use a deep stack: each core thread has 256 KiB, and an entry using
/// 128 KiB of it runs.
#[test]
fn a_core_entry_may_use_128_kib_of_stack() {
    let bound = ferry_watchdog::bound("the core's entry");
    let rig = rig("stack", ONE_CORE, |_| {});
    let done = rig
        .chip
        .launch_aicore(
            1,
            Arc::new(|_: CoreCtx| {
                let mut buf = [1u8; 128 << 10];
                std::hint::black_box(&mut buf);
                let sum: u64 = buf.iter().map(|&b| u64::from(b)).sum();
                if sum == 128 << 10 {
                    Ok(())
                } else {
                    Err(format!("sum {sum}"))
                }
            }),
        )
        .unwrap();
    bound.waiting_for("the core's entry");
    done.wait().unwrap();
}

/// Dropping the chip (its last handle, after launches on both kinds of thread) frees its
/// register windows and handshake slots and ends its threads before the drop returns.
#[test]
fn dropping_the_chip_frees_its_device_memory_and_ends_its_threads() {
    let bound = ferry_watchdog::bound("the chip's threads");
    let root = std::env::temp_dir().join(format!("ferry-chip-{}-drop", std::process::id()));
    // Device ordinal 5 of six: thread names no other test of this binary uses.
    let p = PlatformBuilder::new(Arch::A2a3)
        .hbm_bytes(1 << 24)
        .devices(6)
        .device_root(&root)
        .build()
        .unwrap();
    let dev = p.device(5).unwrap().clone();
    let before = dev.memory().used();
    let ours = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|n| n.starts_with("aicore-5-") || n.starts_with("aicpu-5-"))
            .count()
    };
    let chip = Chip::new(dev.clone(), CoreConfig { aicpu_threads: 2, aic: 1, aiv: 2 }).unwrap();
    assert!(dev.memory().used() > before, "windows and slots are device memory");
    bound.waiting_for("a launch on each kind of thread");
    chip.launch_aicore(3, Arc::new(|_: CoreCtx| Ok(()))).unwrap().wait().unwrap();
    chip.launch_aicpu(2, Arc::new(|_| Ok(()))).unwrap().wait().unwrap();
    // Every thread has run a job, so each has named itself (a thread sets its name when it
    // starts, which need not have happened when `Chip::new` returned).
    assert_eq!(ours(), 5, "one thread per AICPU thread and per core");
    bound.waiting_for("the chip's drop to join its threads");
    drop(chip);
    assert_eq!(dev.memory().used(), before, "the chip's device memory is free again");
    // The drop joined the threads; the kernel may list an exiting thread a moment longer, so
    // wait for the listing itself.
    bound.waiting_for("the joined chip threads to leave /proc/self/task");
    while ours() > 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(p);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_chip_as_an_aicore_launcher_runs_the_body_once_per_core_and_types_its_failures() {
    use ferry_backend::{AicoreLauncher, BackendOp, CoreLaunch};
    let _bound = ferry_watchdog::bound("AICore launches through the seam");
    let r = rig("launcher", CoreConfig { aicpu_threads: 1, aic: 2, aiv: 1 }, |_| {});
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let launch = r
        .chip
        .launch_cores(3, move |index| {
            s.lock().unwrap().push(index);
            Ok(())
        })
        .unwrap();
    CoreLaunch::wait(&launch).unwrap();
    let mut cores = seen.lock().unwrap().clone();
    cores.sort_unstable();
    assert_eq!(cores, [0, 1, 2]);

    // A core's failure is the launch's, as device work that failed, the message kept.
    let failed = r
        .chip
        .launch_cores(3, |index| if index == 1 { Err("core 1 refused".into()) } else { Ok(()) })
        .unwrap();
    let e = CoreLaunch::wait(&failed).unwrap_err();
    assert_eq!(e.op(), BackendOp::Execute);
    assert!(
        matches!(e.source_as::<DeviceError>(), Some(DeviceError::Kernel { message, .. }) if message == "core 1 refused"),
        "{e:?}"
    );

    // More cores than the chip has: refused before any core runs.
    let e = r.chip.launch_cores(4, |_| Ok(())).unwrap_err();
    assert_eq!(e.op(), BackendOp::Launch);
    assert!(
        matches!(e.source_as::<DeviceError>(), Some(DeviceError::InvalidLaunch { .. })),
        "{e:?}"
    );
}
