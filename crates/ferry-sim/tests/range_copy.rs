//! The non-SVM range copies between device memory and its host mirror move every naturally
//! aligned word whole, as a DMA of an aligned word does: a reader polling a 4-byte queue index
//! on the other side sees its old or its new value, never a mix of their bytes. (A torn index
//! tells a DFX writer that its free queue holds billions of buffers, or the host that a ready
//! queue does.)
use ferry_sim::{Arch, PlatformBuilder};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Pairs of values that differ in every byte, so any mix of their bytes is neither.
const PAIRS_32: [(u32, u32); 2] = [(0x0000_00ff, 0x0000_0100), (0x00ff_ffff, 0xff00_0000)];

#[test]
fn a_polled_word_is_never_seen_torn_in_either_direction() {
    let _bound = ferry_watchdog::bound("the reader thread of the range copy test");
    let p = PlatformBuilder::new(Arch::A5).hbm_bytes(1 << 20).build().unwrap();
    let d = p.device(0).unwrap();
    assert!(!d.memory().is_svm());
    let buf = d.malloc(64).unwrap();
    let m = d.memory();
    // SAFETY: both pointers address the live 64-byte allocation (mirror and device side), which
    // outlives the scope below; every access to them is atomic.
    let (host, dev) = unsafe {
        (
            &*(m.host_ptr(buf, 64).unwrap() as *const [AtomicU32; 16]),
            &*(m.device_ptr(buf, 64).unwrap() as *const [AtomicU32; 16]),
        )
    };
    // Enough rounds that a byte-wise copy shows torn values on a loaded 2-core machine
    // (thousands of them), few enough to take well under a second.
    const ROUNDS: u32 = 200_000;
    for (a, b) in PAIRS_32 {
        // Both sides of both words start at 0 (the one other value a reader may see).
        for w in [&host[1], &dev[1], &host[2], &dev[2]] {
            w.store(0, Ordering::Relaxed);
        }
        // Host to device: the host flips word 1 and pushes exactly it; a device thread polls.
        let stop = AtomicBool::new(false);
        let torn = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut torn = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let v = dev[1].load(Ordering::Relaxed);
                    torn += u64::from(v != a && v != b && v != 0);
                }
                torn
            });
            for i in 0..ROUNDS {
                host[1].store(if i % 2 == 0 { a } else { b }, Ordering::Relaxed);
                m.write_range_to_device(buf.add(4), 4).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            reader.join().unwrap()
        });
        assert_eq!(torn, 0, "host to device, {a:#x} / {b:#x}: torn reads");
        // Device to host: a device thread flips word 2; the host pulls exactly it and reads.
        let stop = AtomicBool::new(false);
        let torn = std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    dev[2].store(if i % 2 == 0 { a } else { b }, Ordering::Relaxed);
                    i = i.wrapping_add(1);
                }
            });
            let mut torn = 0u64;
            for _ in 0..ROUNDS {
                m.read_range_from_device(buf.add(8), 4).unwrap();
                let v = host[2].load(Ordering::Relaxed);
                torn += u64::from(v != a && v != b && v != 0);
            }
            stop.store(true, Ordering::Relaxed);
            torn
        });
        assert_eq!(torn, 0, "device to host, {a:#x} / {b:#x}: torn reads");
    }
}
