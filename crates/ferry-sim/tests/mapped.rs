//! The chip through the seam's traits for a host-side collector (`ferry_backend::MappedMemory`,
//! `DeviceCounter`, `HostBells`): on a5 (no SVM) the host maps a mirror that the range copies
//! keep in step, a range outside every allocation is the chip's typed error, the counter is
//! the device clock, and a bell rings through the AICPU OS until its guard goes.
use ferry_backend::{BackendDevice, BackendOp, CycleCounter, DeviceCounter, HostBells};
use ferry_backend::{DevicePtr, MappedMemory};
use ferry_sim::{Arch, MemoryError, PlatformBuilder};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

#[test]
fn the_host_mirror_follows_the_range_copies_and_nothing_else() {
    let p = PlatformBuilder::new(Arch::A5).hbm_bytes(1 << 20).build().unwrap();
    let d = p.device(0).unwrap();
    assert!(!MappedMemory::is_unified(d));
    let buf = BackendDevice::malloc(d, 64).unwrap();
    let (host, dev) = (d.host_view(buf, 64).unwrap(), d.device_view(buf, 64).unwrap());
    assert_ne!(host, dev, "a5 maps a mirror");
    // SAFETY: both pointers address the live 64-byte allocation (mirror and device side), which
    // outlives every use below; this thread is the only one touching them.
    let (h, v) = unsafe {
        (&*(host.as_ptr() as *const [AtomicU32; 16]), &*(dev.as_ptr() as *const [AtomicU32; 16]))
    };
    // Relaxed throughout: one thread; the range copies order the sides themselves.
    h[1].store(7, Ordering::Relaxed);
    h[2].store(9, Ordering::Relaxed);
    assert_eq!(v[1].load(Ordering::Relaxed), 0, "not on the device before the flush");
    d.flush_to_device(buf.add(4), 4).unwrap();
    assert_eq!((v[1].load(Ordering::Relaxed), v[2].load(Ordering::Relaxed)), (7, 0));
    v[3].store(5, Ordering::Relaxed);
    d.refresh_from_device(buf.add(12), 4).unwrap();
    assert_eq!(h[3].load(Ordering::Relaxed), 5);
    v[4].store(6, Ordering::Relaxed);
    // SAFETY: nothing else writes either view of the range.
    unsafe { d.refresh_owned_from_device(buf.add(16), 4) }.unwrap();
    assert_eq!(h[4].load(Ordering::Relaxed), 6);
    let e = d.host_view(buf, 65).unwrap_err();
    assert_eq!(e.op(), BackendOp::MapMemory);
    assert!(matches!(e.source_as::<MemoryError>(), Some(MemoryError::OutOfBounds { len: 65, .. })));
    let e = d.flush_to_device(DevicePtr(buf.0 + 60), 8).unwrap_err();
    assert_eq!(e.op(), BackendOp::Copy);
    assert!(e.source_as::<MemoryError>().is_some(), "{e:?}");
    BackendDevice::free(d, buf).unwrap();
}

#[test]
fn the_counter_is_the_device_clock_and_a_bell_rings_through_the_aicpu_os() {
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 20).build().unwrap();
    let d = p.device(0).unwrap();
    assert!(MappedMemory::is_unified(d));
    let c = d.cycle_counter();
    assert_eq!(CycleCounter::hz(c), Arch::A2a3.profile().clock_hz);
    let (a, b, z) =
        (CycleCounter::now_cycles(c), d.clock().now_cycles(), CycleCounter::now_cycles(c));
    assert!(a <= b && b <= z, "one counter: {a} {b} {z}");
    let rung = Arc::new(AtomicU32::new(0));
    let r = rung.clone();
    // Relaxed: read on this thread after the ring returned.
    let g = d.register_host_bell(0x40, Arc::new(move |q| r.store(q + 1, Ordering::Relaxed)));
    let g = g.expect("the chip has host bells");
    d.aicpu_os().ring_host(0x40, 2);
    // Relaxed: see the store.
    assert_eq!(rung.load(Ordering::Relaxed), 3);
    drop(g);
    d.aicpu_os().ring_host(0x40, 8);
    // Relaxed: see the store.
    assert_eq!(rung.load(Ordering::Relaxed), 3, "unregistered with its guard");
}
