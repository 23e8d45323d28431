//! What the simulated device charges with the stall cost model (docs/design/copy-pool.md), and
//! how its queues and copy engines are handed out: asserted on counters, on what the model
//! charged ([`Device::charges`], the durations it computed) and on who waits behind a creation
//! held inside its stall ([`Platform::hold_queue_creations`]), never on how long anything took.
use ferry_sim::cost::CostModel;
use ferry_sim::overlap::CopyRendezvous;
use ferry_sim::{Arch, Device, DevicePtr, Platform, PlatformBuilder, Stream};
use std::sync::Arc;
use std::time::Duration;

/// `CostModel::stalls()` with every stall cut to microseconds: the same rules, no slow test.
fn tiny() -> CostModel {
    CostModel {
        queue_base: Duration::from_micros(10),
        queue_pressure_max: Duration::from_micros(1000),
        code_object_load: Duration::from_micros(20),
        null_stream_init: Duration::from_micros(30),
        ..CostModel::stalls()
    }
}

fn platform(devices: u32, cost: CostModel) -> Platform {
    PlatformBuilder::new(Arch::A2a3)
        .devices(devices)
        .hbm_bytes(64 << 20)
        .cost_model(cost)
        .build()
        .unwrap()
}

/// Spins (yielding) until `done` holds; the test's liveness bound fails it if that never
/// happens. Every caller's condition also holds when the rule under test is broken, so a broken
/// rule is reported by an assertion, not by this wait.
fn until(mut done: impl FnMut() -> bool) {
    while !done() {
        std::thread::yield_now();
    }
}

/// Enqueues a copy of `src` to `dst` on `s`: the caller keeps `src` alive and unwritten until
/// it synchronized `s`.
fn put(s: &Stream, src: &[u8], dst: DevicePtr) {
    // SAFETY: per this function's contract, `src` outlives the copy and is not written meanwhile.
    unsafe { s.copy_htod_async(src.as_ptr(), dst, src.len() as u64) }.unwrap();
}

/// What one queue creation on `d` is charged.
fn charged_for_a_queue(d: &Device) -> Duration {
    let before = d.charges().queue_creation;
    let s = d.create_stream().unwrap();
    let after = d.charges().queue_creation;
    drop(s);
    after - before
}

#[test]
fn a_queue_created_past_80_percent_of_device_memory_is_charged_the_pressure_term() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let m = tiny();
    let p = platform(1, m);
    let d = p.device(0).unwrap();
    let total = d.memory().size();
    assert_eq!(charged_for_a_queue(d), m.queue_base, "an empty device: the base alone");
    let _to_70 = d.malloc(total * 7 / 10 - d.memory().used()).unwrap();
    assert_eq!(charged_for_a_queue(d), m.queue_base, "70 % used: still the base alone");
    let _to_90 = d.malloc(total * 9 / 10 - d.memory().used()).unwrap();
    let frac = d.memory().used() as f64 / total as f64;
    let over = (frac - 0.8) / 0.2;
    let want = m.queue_base + m.queue_pressure_max.mul_f64(over * over);
    let got = charged_for_a_queue(d);
    let diff = got.abs_diff(want);
    assert!(diff <= Duration::from_micros(1), "90 % used: charged {got:?}, want {want:?}");
    assert!(got > m.queue_base + m.queue_pressure_max / 5, "{got:?}");
}

#[test]
fn a_queue_creation_holds_the_driver_lock_for_its_whole_stall() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(2, tiny());
    let mut host = vec![0u8; 4096];
    let (ptr, len) = (host.as_mut_ptr() as usize, host.len());
    let hold = p.hold_queue_creations();
    let seen = std::thread::scope(|sc| {
        let creator = sc.spawn(|| p.device(0).unwrap().create_stream().unwrap());
        until(|| p.queue_creations_held() == 1);
        // Behind the stalled creation: an allocation, a registration, and a queue creation on
        // the other device. Each either finishes, or waits for the driver lock (counted), or
        // (the creation) stops at the hold itself, having got the lock.
        let others = [
            sc.spawn(|| {
                p.device(0).unwrap().malloc(64).unwrap();
            }),
            // SAFETY: `host` outlives this scope and nothing touches it; the registration is
            // dropped at once.
            sc.spawn(|| drop(unsafe { p.register_host(ptr as *mut u8, len) }.unwrap())),
            sc.spawn(|| drop(p.device(1).unwrap().create_stream().unwrap())),
        ];
        let finished = || others.iter().filter(|t| t.is_finished()).count() as u32;
        until(|| p.driver_lock_waiting() + finished() + p.queue_creations_held() - 1 == 3);
        let seen = (p.driver_lock_waiting(), finished(), p.queue_creations_held());
        drop(hold);
        for t in others {
            t.join().unwrap();
        }
        drop(creator.join().unwrap());
        seen
    });
    assert_eq!(
        seen,
        (3, 0, 1),
        "(waiting for the driver lock, finished, creations stalled) while one creation stalled"
    );
    drop(host);
}

#[test]
fn a_copy_engines_queue_is_created_under_its_devices_engine_allocator() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(2, tiny());
    let (d0, d1) = (p.device(0).unwrap(), p.device(1).unwrap());
    // Every compute queue and device 1's first copy engine queue exist before the hold.
    let (a, b, c) =
        (d0.create_stream().unwrap(), d0.create_stream().unwrap(), d1.create_stream().unwrap());
    let (buf0, buf1) = (d0.malloc(256).unwrap(), d1.malloc(64).unwrap());
    let src = [7u8; 64];
    put(&c, &src, buf1);
    c.synchronize().unwrap();
    let hold = p.hold_queue_creations();
    // Device 0's first copy creates its engine's queue: held inside the stall.
    put(&a, &src, buf0);
    until(|| p.queue_creations_held() == 1);
    // Another copy of device 0 waits for the engine allocator (counted); were the queue created
    // outside it, the copy would take the next engine and wait for the driver lock or stop at
    // the hold instead. Device 1's copy, whose engine has its queue, goes through.
    put(&b, &src, buf0.add(64));
    put(&c, &src, buf1);
    until(|| {
        d0.copy_engine_waiting() == 1
            || p.driver_lock_waiting() > 0
            || p.queue_creations_held() > 1
            || b.is_idle()
    });
    until(|| c.is_idle());
    let seen = (d0.copy_engine_waiting(), p.driver_lock_waiting(), p.queue_creations_held());
    drop(hold);
    for s in [&a, &b, &c] {
        s.synchronize().unwrap();
    }
    assert_eq!(seen, (1, 0, 1), "(waiting for device 0's engines, for the driver lock, held)");
    assert_eq!(d1.counters().bytes_htod, 128, "device 1's copies went through");
}

#[test]
fn overlapping_copies_take_the_lowest_free_engines_and_a_lone_copy_takes_engine_0() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(1, CostModel::default());
    let d = p.device(0).unwrap();
    let streams: Vec<_> = (0..3).map(|_| d.create_stream().unwrap()).collect();
    let buf = d.malloc(4096).unwrap();
    let src = [3u8; 64];
    // Copies that hold their engines at once (a rendezvous), then a copy alone.
    let overlap = |n: usize| {
        let meet = Arc::new(CopyRendezvous::new(n));
        for (i, s) in
            streams.iter().chain(std::iter::once(d.null_stream().unwrap())).take(n).enumerate()
        {
            // SAFETY: `src` outlives the copies (synchronized below).
            unsafe {
                s.copy_htod_async_rendezvous(src.as_ptr(), buf.add(64 * i as u64), 64, &meet)
            }
            .unwrap();
        }
        for s in streams.iter().chain(std::iter::once(d.null_stream().unwrap())).take(n) {
            s.synchronize().unwrap();
        }
    };
    overlap(3);
    assert_eq!(d.copy_engines_with_queues(), [0, 1, 2], "three at once: engines 0, 1, 2");
    d.copy_htod(&src, buf).unwrap();
    d.copy_htod(&src, buf).unwrap();
    assert_eq!(d.copy_engines_with_queues(), [0, 1, 2], "a copy alone takes engine 0");
    overlap(4);
    assert_eq!(d.copy_engines_with_queues(), [0, 1, 2, 3], "four at once: one more engine");
    assert_eq!(d.counters().sdma_queues_created, 4);
}

#[test]
fn the_first_launch_of_a_kernel_on_each_device_pays_one_code_object_load() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let m = tiny();
    let p = platform(2, m);
    let (d0, d1) = (p.device(0).unwrap(), p.device(1).unwrap());
    let (s0, s1) = (d0.create_stream().unwrap(), d1.create_stream().unwrap());
    let ok = || -> ferry_sim::stream::StreamKernelFn { Box::new(|_| Ok(())) };
    let loads = |d: &Device| {
        (d.counters().code_object_loads, d.counters().launches, d.charges().code_object_load)
    };
    s0.launch_uncounted("gather", ok()).unwrap();
    s0.synchronize().unwrap();
    assert_eq!(loads(d0), (1, 0, m.code_object_load), "a warm-up launch loads the code object");
    s0.launch("gather", ok()).unwrap();
    s0.launch("gather", ok()).unwrap();
    s0.synchronize().unwrap();
    assert_eq!(loads(d0), (1, 2, m.code_object_load), "later launches load nothing");
    s0.launch("other", ok()).unwrap();
    s0.synchronize().unwrap();
    assert_eq!(loads(d0), (2, 3, m.code_object_load * 2), "another kernel: its own load");
    assert_eq!(loads(d1), (0, 0, Duration::ZERO), "device 1 launched nothing yet");
    s1.launch("gather", ok()).unwrap();
    s1.synchronize().unwrap();
    assert_eq!(loads(d1), (1, 1, m.code_object_load), "each device loads its own");
    assert_eq!(d0.loaded_code_objects(), ["gather", "other"]);
    assert_eq!(d1.loaded_code_objects(), ["gather"]);
}

#[test]
fn the_first_null_stream_copy_in_each_direction_pays_its_queue_once() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let m = tiny();
    let p = platform(1, m);
    let d = p.device(0).unwrap();
    let buf = d.malloc(128).unwrap();
    let (src, mut back) = ([5u8; 64], [0u8; 64]);
    let inits = |d: &Device| {
        let c = d.counters();
        (c.null_stream_init_htod, c.null_stream_init_dtoh, d.charges().null_stream_init)
    };
    let s = d.create_stream().unwrap();
    // SAFETY: both host buffers outlive the copies (synchronized below).
    unsafe {
        s.copy_htod_async(src.as_ptr(), buf, 64).unwrap();
        s.copy_dtoh_async(buf, back.as_mut_ptr(), 64).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(inits(d), (0, 0, Duration::ZERO), "a pooled stream's copies pay no null init");
    d.copy_htod(&src, buf).unwrap();
    d.copy_htod(&src, buf).unwrap();
    assert_eq!(inits(d), (1, 0, m.null_stream_init), "the first host-to-device copy pays");
    d.copy_dtoh(buf, &mut back).unwrap();
    d.copy_dtoh(buf, &mut back).unwrap();
    assert_eq!(inits(d), (1, 1, m.null_stream_init * 2), "the first device-to-host one too");
    let null = d.null_stream().unwrap();
    null.copy_dtod_async(buf, buf.add(64), 64).unwrap();
    null.synchronize().unwrap();
    assert_eq!(inits(d), (1, 1, m.null_stream_init * 2), "nothing more, device to device included");
}

#[test]
fn pooled_streams_share_at_most_max_hw_queues_besides_the_null_streams_own() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(64 << 20).max_hw_queues(2).build().unwrap();
    let d = p.device(0).unwrap();
    d.copy_htod(&[0; 8], d.malloc(8).unwrap()).unwrap();
    assert_eq!(d.compute_queues(), 1, "the null stream's queue");
    let mut streams: Vec<_> = (0..3).map(|_| d.create_stream().unwrap()).collect();
    assert_eq!(d.compute_queue_users(), [2, 1], "three pooled streams on 2 pooled queues");
    assert_eq!(d.compute_queues(), 3, "2 pooled + the null stream's");
    streams.extend((0..2).map(|_| d.create_stream().unwrap()));
    assert_eq!(d.compute_queue_users(), [3, 2], "more streams share, the least-used first");
    assert_eq!(d.counters().compute_queues_created, 3);
    drop(streams);
}
