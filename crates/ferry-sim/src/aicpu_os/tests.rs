use super::*;

#[test]
fn names_are_checked() {
    let _bound = ferry_watchdog::bound("the AICPU OS threads");
    for bad in ["", ".", "..", "a/b", "../x", "a\0b", "a\\b"] {
        assert!(matches!(check_name(bad), Err(OsError::BadName { .. })), "{bad:?}");
    }
    assert!(check_name("inner_00_0.so").is_ok());
}

#[test]
fn services_reach_attached_chips_from_any_thread() {
    let _bound = ferry_watchdog::bound("the AICPU OS threads");
    use crate::cores::CoreConfig;
    use crate::{Arch, PlatformBuilder};
    let root = std::env::temp_dir().join(format!("ferry-os-svc-{}", std::process::id()));
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 24).device_root(&root).build().unwrap();
    let dev = p.device(0).unwrap().clone();
    let chip = Chip::new(dev.clone(), CoreConfig { aicpu_threads: 1, aic: 1, aiv: 1 }).unwrap();
    let os = dev.aicpu_os();
    // SAFETY: the table lives as long as the device, which outlives this test body.
    let svc: &DeviceServices = unsafe { &*os.services() };
    let base = chip.window(1).base().0;
    // Not attached and outside any launch: no window is reachable.
    assert_eq!((svc.reg_write_core)(svc.ctx, base + 0x10, 1), STATUS_BAD_ADDRESS);
    let attachment = os.attach(&chip);
    // AICPU writes, the core waits for it (on another thread).
    let waiter = {
        // SAFETY: as above; the copy's `ctx` points at the same live table context.
        let svc: DeviceServices = unsafe { *os.services() };
        std::thread::spawn(move || {
            svc.core_wait_with(base + 0x10, &mut |v| v == 7, Some(Duration::from_secs(10)))
        })
    };
    assert_eq!((svc.reg_write_aicpu)(svc.ctx, base + 0x10, 7), STATUS_OK);
    assert_eq!(waiter.join().unwrap(), Some(7));
    assert_eq!((svc.reg_read)(svc.ctx, base + 0x10), 7);
    // A core write wakes an AICPU-side waiter.
    assert_eq!((svc.reg_write_core)(svc.ctx, base + 0x20, 3), STATUS_OK);
    assert!(svc.aicpu_wait_with(&mut || (svc.reg_read)(svc.ctx, base + 0x20) == 3, None));
    assert!(!svc.aicpu_wait_with(&mut || false, Some(Duration::from_millis(5))));
    assert_eq!(
        svc.core_wait_with(base + 0x10, &mut |v| v == 8, Some(Duration::from_millis(5))),
        None
    );
    (svc.notify_aicpu)(svc.ctx);
    // Misaligned or foreign addresses are refused, not dereferenced.
    assert_eq!((svc.reg_write_aicpu)(svc.ctx, base + 2, 1), STATUS_BAD_ADDRESS);
    assert_eq!((svc.reg_write_aicpu)(svc.ctx, 0x1234, 1), STATUS_BAD_ADDRESS);
    assert!((svc.translate)(svc.ctx, 0x1234, 4).is_null());
    assert!((svc.clock_hz)(svc.ctx) > 0);
    assert_eq!((svc.thread_info)(svc.ctx), u64::MAX, "outside a launch");
    drop(attachment);
    assert_eq!((svc.reg_read)(svc.ctx, base + 0x10), 0, "detached");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn notify_host_rings_the_bell_registered_for_its_key_until_the_guard_drops() {
    let _bound = ferry_watchdog::bound("the AICPU OS threads");
    use crate::{Arch, PlatformBuilder};
    use std::sync::atomic::AtomicU32;
    let root = std::env::temp_dir().join(format!("ferry-os-bell-{}", std::process::id()));
    let p = PlatformBuilder::new(Arch::A5).hbm_bytes(1 << 24).device_root(&root).build().unwrap();
    let dev = p.device(0).unwrap().clone();
    let os = dev.aicpu_os();
    // SAFETY: the table lives as long as the device, which outlives this test body.
    let svc: &DeviceServices = unsafe { &*os.services() };
    let rung = Arc::new(AtomicU32::new(0));
    let r = rung.clone();
    // Relaxed: a counter read on this thread after the calls returned; nothing pairs.
    let guard = os.register_host_bell(
        0x1000,
        Arc::new(move |q| {
            r.fetch_add(q + 1, Ordering::Relaxed);
        }),
    );
    (svc.notify_host)(svc.ctx, 0x1000, 2);
    (svc.notify_host)(svc.ctx, 0x2000, 5); // no bell under this key: nothing happens
    assert_eq!(rung.load(Ordering::Relaxed), 3);
    drop(guard);
    (svc.notify_host)(svc.ctx, 0x1000, 2);
    assert_eq!(rung.load(Ordering::Relaxed), 3, "unregistered with its guard");
    assert_eq!(os.host_notifications(), 3, "every call counted, rung or not");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn write_atomic_replaces_and_leaves_no_temp() {
    let _bound = ferry_watchdog::bound("the AICPU OS threads");
    let dir = std::env::temp_dir().join(format!("ferry-os-unit-{}", std::process::id()));
    let p = write_atomic(&dir, "x.so", b"one").unwrap();
    write_atomic(&dir, "x.so", b"two").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"two");
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(names.len(), 1);
    assert!(write_atomic(&dir, "../escape.so", b"x").is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
