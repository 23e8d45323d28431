//! Behaviour of the simulated chip, one test per capability.
use ferry_sim::clock::VirtualDeviceClock;
use ferry_sim::cores::{AicoreType, Chip, CoreConfig};
use ferry_sim::cost::CostModel;
use ferry_sim::fault::FaultPoint;
use ferry_sim::memory::MemoryError;
use ferry_sim::{Arch, DeviceError, DevicePtr, Event, PlatformBuilder};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

fn platform(arch: Arch, devices: u32) -> ferry_sim::Platform {
    PlatformBuilder::new(arch).devices(devices).hbm_bytes(16 << 20).build().unwrap()
}

#[test]
fn eight_devices_have_disjoint_memory() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 8);
    let ptrs: Vec<_> = p.devices().iter().map(|d| d.malloc(64).unwrap()).collect();
    for (i, d) in p.devices().iter().enumerate() {
        d.copy_htod(&[i as u8; 64], ptrs[i]).unwrap();
    }
    for (i, d) in p.devices().iter().enumerate() {
        let mut out = [0u8; 64];
        d.copy_dtoh(ptrs[i], &mut out).unwrap();
        assert_eq!(out, [i as u8; 64]);
        // Another device's address is rejected, not aliased.
        let other = ptrs[(i + 1) % 8];
        assert!(matches!(d.translate(other, 1), Err(MemoryError::WrongDevice { .. })));
    }
    assert!(matches!(p.device(8), Err(DeviceError::NoSuchDevice { ordinal: 8, count: 8 })));
}

#[test]
fn host_pointer_used_as_device_address_fails_and_device_stays_usable() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 1);
    let d = p.device(0).unwrap();
    let host = [0u8; 16];
    let err = d.copy_htod(&[1; 16], DevicePtr(host.as_ptr() as u64)).unwrap_err();
    assert!(matches!(err, DeviceError::Memory(MemoryError::NotDeviceAddress { .. })), "{err}");
    // Out of bounds: past the end of a live allocation.
    let buf = d.malloc(64).unwrap();
    let err = d.copy_htod(&[1; 65], buf).unwrap_err();
    assert!(matches!(err, DeviceError::Memory(MemoryError::OutOfBounds { .. })), "{err}");
    // A device address used as a host pointer.
    let s = d.create_stream().unwrap();
    // SAFETY: the "host" pointer is a device address; the stream must reject it before use.
    unsafe { s.copy_dtoh_async(buf, buf.addr() as *mut u8, 8).unwrap() };
    assert!(matches!(
        s.synchronize(),
        Err(DeviceError::Memory(MemoryError::NotHostAddress { .. }))
    ));
    // Still usable.
    d.copy_htod(&[9; 64], buf).unwrap();
    let mut out = [0u8; 64];
    d.copy_dtoh(buf, &mut out).unwrap();
    assert_eq!(out, [9; 64]);
    s.synchronize().unwrap();
}

#[test]
fn a5_requires_explicit_range_copies_and_counts_bytes() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A5, 1);
    let d = p.device(0).unwrap();
    let buf = d.malloc(256).unwrap();
    let m = d.memory();
    let h = m.host_ptr(buf, 256).unwrap();
    // SAFETY: `h` addresses 256 bytes of the live allocation's host mirror; only this thread
    // touches it.
    unsafe { h.write_bytes(0x5A, 32) };
    let mut out = [0u8; 32];
    d.copy_dtoh(buf, &mut out).unwrap();
    assert_eq!(out, [0; 32], "host writes stay in the mirror until pushed");
    m.write_range_to_device(buf, 32).unwrap();
    d.copy_dtoh(buf, &mut out).unwrap();
    assert_eq!(out, [0x5A; 32]);
    d.copy_htod(&[1; 16], buf.add(64)).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { *h.add(64) }, 0, "device writes stay invisible until pulled");
    m.read_range_from_device(buf.add(64), 16).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { *h.add(64) }, 1);
    let c = d.counters();
    assert_eq!((c.bytes_to_device, c.bytes_from_device), (32, 16));

    // On a2a3 the same calls move nothing.
    let p = platform(Arch::A2a3, 1);
    let d = p.device(0).unwrap();
    let buf = d.malloc(64).unwrap();
    d.memory().write_range_to_device(buf, 64).unwrap();
    d.memory().read_range_from_device(buf, 64).unwrap();
    assert_eq!(d.counters().bytes_to_device + d.counters().bytes_from_device, 0);
}

#[test]
fn virtual_clock_drives_a_30s_budget_without_real_waiting() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let v = VirtualDeviceClock::new();
    let p =
        PlatformBuilder::new(Arch::A5).hbm_bytes(1 << 20).virtual_clock(v.clone()).build().unwrap();
    let d = p.device(0).unwrap().clone();
    let budget = d.arch().dfx_backpressure_budget_cycles;
    let started = std::time::Instant::now();
    let (armed_tx, armed) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let deadline = d.clock().deadline_after(budget);
        armed_tx.send(()).unwrap();
        // A condition that never becomes true: only the budget can end this wait.
        d.clock().bell().wait_until(|| deadline.is_expired(), None);
        d.clock().now_cycles()
    });
    // The clock moves only after the waiter took its deadline (else it would wait for ever).
    armed.recv().unwrap();
    v.advance(budget / 2);
    v.advance(budget / 2);
    assert_eq!(waiter.join().unwrap(), budget);
    assert!(started.elapsed() < Duration::from_secs(30), "no real 30-second wait");
}

#[test]
fn stream_runs_work_in_fifo_order() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 1);
    let s = p.device(0).unwrap().create_stream().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..100 {
        let l = log.clone();
        if i % 2 == 0 {
            s.host_fn(move || l.lock().unwrap().push(i));
        } else {
            s.launch(
                "k",
                Box::new(move |_| {
                    l.lock().unwrap().push(i);
                    Ok(())
                }),
            )
            .unwrap();
        }
    }
    s.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), (0..100).collect::<Vec<_>>());
}

#[test]
fn event_orders_work_across_two_streams() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 1);
    let d = p.device(0).unwrap();
    let (a, b) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    // Stream a is held by a gate the test controls.
    a.host_fn(move || {
        gate_rx.recv().unwrap();
        o.lock().unwrap().push("a");
    });
    let ev = Event::new();
    a.record_event(&ev).unwrap();
    b.wait_event(&ev).unwrap();
    let o = order.clone();
    b.host_fn(move || o.lock().unwrap().push("b"));
    // Stream b ends up blocked on the event; were the wait missing, its callback would show up
    // in `order` instead. Either state is reached whatever the scheduler does.
    while !b.blocked_on_event() {
        assert!(order.lock().unwrap().is_empty(), "b ran before a's event");
        std::thread::yield_now();
    }
    assert!(order.lock().unwrap().is_empty(), "b must wait for a's event");
    assert!(!ev.query());
    gate_tx.send(()).unwrap();
    b.synchronize().unwrap();
    assert_eq!(*order.lock().unwrap(), ["a", "b"]);
    assert!(ev.query());
    // Waiting for a never-recorded event does not block.
    let fresh = Event::new();
    b.wait_event(&fresh).unwrap();
    b.synchronize().unwrap();
}

#[test]
fn current_device_is_thread_local() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 3);
    assert_eq!(p.current_ordinal(), 0);
    p.set_current_device(2).unwrap();
    assert!(p.set_current_device(3).is_err());
    assert_eq!(p.current_ordinal(), 2, "a failed set keeps the current device");
    let p2 = p.clone();
    std::thread::spawn(move || assert_eq!(p2.current_ordinal(), 0)).join().unwrap();
    assert_eq!(p.current_device().unwrap().ordinal(), 2);
}

#[test]
fn host_registration_gives_a_per_device_alias() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 2);
    let mut host = vec![3u8; 4096];
    // SAFETY: `host` outlives the registration (dropped at the end of the test) and is not
    // touched while copies run.
    let reg = unsafe { p.register_host(host.as_mut_ptr(), host.len()) }.unwrap();
    let a0 = reg.alias(0, host.as_ptr(), 4096).unwrap();
    let a1 = reg.alias(1, host.as_ptr(), 4096).unwrap();
    assert_ne!(a0.addr(), host.as_ptr() as u64);
    assert_ne!(a0, a1);
    assert!(reg.alias(0, host.as_ptr(), 4097).is_err(), "straddles the end");
    // A device-to-device copy through the alias reads the host bytes.
    let d = p.device(1).unwrap();
    let buf = d.malloc(4096).unwrap();
    let s = d.create_stream().unwrap();
    s.copy_dtod_async(a1, buf, 4096).unwrap();
    s.synchronize().unwrap();
    let mut out = vec![0u8; 4096];
    d.copy_dtoh(buf, &mut out).unwrap();
    assert_eq!(out, host);
    // Device 0's alias is not valid on device 1 ... but the peer copy resolves it.
    assert!(d.translate(a0, 1).is_err());
    drop(reg);
    s.copy_dtod_async(a1, buf, 16).unwrap();
    assert!(s.synchronize().is_err(), "unregistered memory is no longer reachable");
}

#[test]
fn counters_move_when_they_should_and_only_then() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 1);
    let d = p.device(0).unwrap();
    let c0 = d.counters();
    assert_eq!(c0, Default::default(), "a fresh device has done nothing");
    let buf = d.malloc(64).unwrap();
    let expected = ferry_sim::counters::CounterSnapshot { device_allocs: 1, ..c0 };
    assert_eq!(d.counters(), expected, "allocation moves only its own counter");
    d.copy_htod(&[1; 64], buf).unwrap();
    let c1 = d.counters();
    assert_eq!(c1.streams_created, 0, "the null stream is not a created stream");
    assert_eq!(c1.compute_queues_created, 1, "but it has a queue");
    assert_eq!((c1.null_stream_init_htod, c1.null_stream_init_dtoh), (1, 0));
    assert_eq!((c1.copies, c1.bytes_htod, c1.sdma_queues_created), (1, 64, 1));
    d.copy_htod(&[1; 64], buf).unwrap();
    let c2 = d.counters();
    assert_eq!((c2.null_stream_init_htod, c2.copies, c2.bytes_htod), (1, 2, 128));
    assert_eq!(c2.sdma_queues_created, 1, "sequential copies reuse the lowest engine");
    let s = d.create_stream().unwrap();
    assert_eq!(d.counters().streams_created, 1);
    assert_eq!(d.counters().compute_queues_created, 2);
    s.launch("gather", Box::new(|_| Ok(()))).unwrap();
    s.launch("gather", Box::new(|_| Ok(()))).unwrap();
    s.launch_uncounted("other", Box::new(|_| Ok(()))).unwrap();
    s.synchronize().unwrap();
    let c3 = d.counters();
    assert_eq!((c3.launches, c3.code_object_loads), (2, 2));
    assert_eq!(d.loaded_code_objects(), ["gather", "other"]);
    assert_eq!(c3.queue_memory_bytes, 3 * ferry_sim::device::DEFAULT_QUEUE_CONTEXT_BYTES);
}

#[test]
fn concurrent_copies_take_the_lowest_free_engines() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 1);
    let d = p.device(0).unwrap();
    let streams: Vec<_> = (0..4).map(|_| d.create_stream().unwrap()).collect();
    let bufs: Vec<_> = (0..4).map(|_| d.malloc(1 << 20).unwrap()).collect();
    let src = vec![1u8; 1 << 20];
    // Hold each stream behind a barrier so the four copies overlap.
    let barrier = Arc::new(std::sync::Barrier::new(4));
    let inside = Arc::new(AtomicU32::new(0));
    for (s, b) in streams.iter().zip(&bufs) {
        let (bar, ins) = (barrier.clone(), inside.clone());
        s.host_fn(move || {
            bar.wait();
            // SeqCst: test bookkeeping; stream synchronize orders it before the assertions.
            ins.fetch_add(1, Ordering::SeqCst);
        });
        // SAFETY: `src` outlives the copies (synchronized below).
        unsafe { s.copy_htod_async(src.as_ptr(), *b, src.len() as u64).unwrap() };
    }
    for s in &streams {
        s.synchronize().unwrap();
    }
    let q = d.counters().sdma_queues_created;
    assert!((1..=4).contains(&q), "at most one queue per concurrent copy, got {q}");
    assert_eq!(d.copy_engine_queues() as u64, q);
}

#[test]
fn cost_model_pressure_term_grows_with_memory_use() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let m = CostModel::stalls();
    let total = 1u64 << 30;
    let costs: Vec<_> = [0.0, 0.5, 0.8, 0.9, 0.99]
        .iter()
        .map(|f| m.queue_creation_cost((total as f64 * f) as u64, total))
        .collect();
    assert_eq!(costs[0], m.queue_base);
    assert_eq!(costs[1], m.queue_base, "below the threshold only the base applies");
    assert!(costs.windows(2).all(|w| w[0] <= w[1]));
    assert!(costs[4] > costs[3] && costs[3] > costs[2]);
    assert!(m.registration_cost(13 << 30) >= Duration::from_millis(999));
    assert_eq!(CostModel::default().registration_cost(1 << 40), Duration::ZERO);
}

#[test]
fn queue_creation_waits_for_the_driver_lock_held_by_registration() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let mut cost = CostModel::stalls();
    cost.queue_base = Duration::ZERO;
    cost.queue_pressure_max = Duration::ZERO;
    cost.code_object_load = Duration::ZERO;
    cost.null_stream_init = Duration::ZERO;
    cost.registration_bytes_per_sec = (256 << 20) as f64;
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).cost_model(cost).build().unwrap();
    let mut host = vec![0u8; 1 << 20];
    let ptr = host.as_mut_ptr() as usize;
    let len = host.len();
    // Each thread's wait is observed through the lock's own count of waiters, never a timer:
    // the 60 s bound is a hang guard.
    let until_waiting = |n: u32, what: &str| {
        let t0 = std::time::Instant::now();
        while p.driver_lock_waiting() != n {
            assert!(t0.elapsed() < Duration::from_secs(60), "hang guard: {what}");
            std::thread::yield_now();
        }
    };
    // A registration takes the driver lock: held here, it waits.
    let held = p.hold_driver_lock();
    let p2 = p.clone();
    let reg = std::thread::spawn(move || {
        // SAFETY: `host` outlives this thread (joined below) and is not accessed meanwhile.
        unsafe { p2.register_host(ptr as *mut u8, len) }.map(|r| r.region())
    });
    until_waiting(1, "a registration never waited for the driver lock");
    // So does a stream's queue creation, and it counts the wait.
    let d = p.device(0).unwrap().clone();
    let creator = std::thread::spawn(move || {
        let s = d.create_stream().unwrap();
        (d.counters().driver_lock_waits, s)
    });
    until_waiting(2, "stream creation never queued behind the held driver lock");
    drop(held);
    let (waits, _s) = creator.join().unwrap();
    assert_eq!(waits, 1, "stream creation queued behind the lock");
    assert!(reg.join().unwrap().is_ok());
    let d = p.device(0).unwrap();
    let _s2 = d.create_stream().unwrap();
    assert_eq!(d.counters().driver_lock_waits, 1, "nothing holds the lock, no wait");
    drop(host);
}

#[test]
fn each_fault_injection_point_fails_exactly_its_occurrence() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 1);
    let d = p.device(0).unwrap();
    d.faults().fail_nth(FaultPoint::StreamCreate, 2);
    let s = d.create_stream().unwrap();
    assert!(
        matches!(d.create_stream(), Err(DeviceError::Injected(f)) if f.point == FaultPoint::StreamCreate)
    );
    let _ = d.create_stream().unwrap();
    assert_eq!(d.counters().streams_created, 2, "a failed creation creates nothing");

    let buf = d.malloc(64).unwrap();
    let src = [1u8; 64];
    d.faults().fail_next(FaultPoint::Copy);
    // SAFETY: `src` outlives the copy.
    assert!(unsafe { s.copy_htod_async(src.as_ptr(), buf, 64) }.is_err());
    // SAFETY: as above.
    unsafe { s.copy_htod_async(src.as_ptr(), buf, 64) }.unwrap();

    d.faults().fail_next(FaultPoint::Launch);
    assert!(s.launch("k", Box::new(|_| Ok(()))).is_err());
    assert!(d.loaded_code_objects().is_empty(), "a failed launch loads nothing");

    d.faults().fail_next(FaultPoint::EventRecord);
    let ev = Event::new();
    assert!(s.record_event(&ev).is_err());
    d.faults().fail_next(FaultPoint::StreamWait);
    assert!(s.wait_event(&ev).is_err());

    d.faults().fail_next(FaultPoint::Synchronize);
    assert!(matches!(s.synchronize(), Err(DeviceError::Injected(_))));
    s.synchronize().unwrap();

    d.faults().fail_next(FaultPoint::DeviceAlloc);
    assert!(d.malloc(64).is_err());
    assert!(d.malloc(64).is_ok());
    assert_eq!(d.counters().faults_injected, 7);

    // Launch on the chip.
    let chip = Chip::new(d.clone(), CoreConfig { aicpu_threads: 1, aic: 1, aiv: 0 }).unwrap();
    d.faults().fail_next(FaultPoint::Launch);
    assert!(chip.launch_aicpu(1, Arc::new(|_| Ok(()))).is_err());
    chip.launch_aicpu(1, Arc::new(|_| Ok(()))).unwrap().wait().unwrap();
}

#[test]
fn kernel_errors_and_panics_are_sticky_until_synchronize() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 1);
    let s = p.device(0).unwrap().create_stream().unwrap();
    s.launch("bad", Box::new(|_| Err("boom".into()))).unwrap();
    s.launch("panics", Box::new(|_| panic!("kernel bug"))).unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    // SeqCst: the stream's synchronize orders this store before the load below.
    s.host_fn(move || r.store(true, Ordering::SeqCst));
    let err = s.synchronize().unwrap_err();
    assert_eq!(err, DeviceError::Kernel { name: "bad".into(), message: "boom".into() });
    assert!(ran.load(Ordering::SeqCst), "later work still ran");
    s.synchronize().unwrap();
}

#[test]
fn synchronize_timeout_bounds_the_wait() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 1);
    let s = p.device(0).unwrap().create_stream().unwrap();
    let (tx, rx) = mpsc::channel::<()>();
    s.host_fn(move || {
        let _ = rx.recv();
    });
    assert!(matches!(
        s.synchronize_timeout(Duration::from_millis(10)),
        Err(DeviceError::Timeout { .. })
    ));
    tx.send(()).unwrap();
    s.synchronize().unwrap();
}

/// The AICore side of the dispatch protocol: wait for a new `DATA_MAIN_BASE` (0xA0), answer
/// `FIN(id)` in `COND` (0x4C8), stop on `EXIT` (0x7FFF_FFF0).
fn echo_core(ctx: ferry_sim::cores::CoreCtx) -> Result<(), String> {
    let mut last = 0;
    loop {
        let v = ctx.window.core_wait(0xA0, |v| v != last, None).unwrap_or(last);
        if v == 0x7FFF_FFF0 {
            ctx.window.core_write(0x4C8, (1 << 31) | 0x7FFF_FFFE);
            return Ok(());
        }
        last = v;
        ctx.window.core_write(0x4C8, (1 << 31) | v);
    }
}

#[test]
fn handshake_dispatch_round_trip_on_every_core() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 1);
    let chip =
        Chip::new(p.device(0).unwrap().clone(), CoreConfig { aicpu_threads: 4, aic: 2, aiv: 4 })
            .unwrap();
    let n = chip.config().cores();
    let cores = chip.launch_aicore(n, Arc::new(echo_core)).unwrap();
    // Four AICPU threads each dispatch 50 tasks to the cores they own.
    let aicpu = chip
        .launch_aicpu(
            4,
            Arc::new(move |ctx| {
                for core in (ctx.thread..n).step_by(ctx.threads as usize) {
                    let w = ctx.chip.window(core);
                    for id in 1..=50 {
                        w.aicpu_write(0xA0, id);
                        w.aicpu_wait(0x4C8, |c| c == (1 << 31) | id, Some(Duration::from_secs(30)))
                            .ok_or("core did not answer")?;
                    }
                }
                Ok(())
            }),
        )
        .unwrap();
    aicpu.wait().unwrap();
    for i in 0..n {
        chip.window(i).aicpu_write(0xA0, 0x7FFF_FFF0);
    }
    cores.wait().unwrap();
    for i in 0..n {
        assert_eq!(chip.window(i).read(0x4C8), (1 << 31) | 0x7FFF_FFFE, "core {i} exited");
    }
    assert_ne!(chip.handshake(0), chip.handshake(1));
    assert_eq!(chip.reg_bases().len(), n as usize);
}

#[test]
fn chip_rejects_bad_shapes_and_busy_cores() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 1);
    let d = p.device(0).unwrap().clone();
    assert!(
        Chip::new(d.clone(), CoreConfig { aicpu_threads: 5, aic: 1, aiv: 0 }).is_err(),
        "a2a3 has 4 AICPU threads"
    );
    assert!(Chip::new(d.clone(), CoreConfig { aicpu_threads: 1, aic: 25, aiv: 0 }).is_err());
    let chip = Chip::new(d, CoreConfig { aicpu_threads: 1, aic: 1, aiv: 1 }).unwrap();
    assert!(matches!(
        chip.launch_aicore(0, Arc::new(|_| Ok(()))),
        Err(DeviceError::InvalidLaunch { .. })
    ));
    assert!(chip.launch_aicore(3, Arc::new(|_| Ok(()))).is_err());
    let (tx, rx) = mpsc::channel::<()>();
    let rx = Arc::new(Mutex::new(rx));
    let (running_tx, running_rx) = mpsc::channel::<()>();
    let running_tx = Arc::new(Mutex::new(running_tx));
    let busy = chip
        .launch_aicore(
            1,
            Arc::new(move |_| {
                running_tx.lock().unwrap().send(()).unwrap();
                let _ = rx.lock().unwrap().recv();
                Ok(())
            }),
        )
        .unwrap();
    // Busy while its job runs (not only while it is queued): refused at once, in the launch.
    running_rx.recv().unwrap();
    let second = chip.launch_aicore(1, Arc::new(|_| Ok(()))).unwrap();
    assert!(second.is_done(), "a launch on a running core is refused, not queued");
    assert!(second.wait().is_err(), "core 0 is still busy");
    tx.send(()).unwrap();
    busy.wait().unwrap();
    let err = chip
        .launch_aicore(2, Arc::new(|c| if c.index == 1 { Err("bad".into()) } else { Ok(()) }))
        .unwrap()
        .wait();
    assert!(matches!(err, Err(DeviceError::Kernel { .. })));
}

#[test]
fn pooled_streams_share_at_most_max_hw_queues_and_the_null_stream_has_its_own() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = ferry_sim::PlatformBuilder::new(Arch::A2a3)
        .hbm_bytes(64 << 20)
        .max_hw_queues(3)
        .build()
        .unwrap();
    let d = p.device(0).unwrap();
    let mut streams: Vec<_> = (0..7).map(|_| d.create_stream().unwrap()).collect();
    assert_eq!(d.counters().streams_created, 7);
    assert_eq!(d.counters().compute_queues_created, 3, "7 streams on 3 hardware queues");
    assert_eq!(d.compute_queue_users(), [3, 2, 2], "least-used queue first");
    d.copy_htod(&[0; 8], d.malloc(8).unwrap()).unwrap();
    assert_eq!(d.compute_queues(), 4, "the null stream's queue besides");
    let used = d.memory().used();
    drop(streams.drain(..3).collect::<Vec<_>>());
    assert_eq!(d.compute_queue_users(), [2, 1, 1], "three streams gone, four left");
    assert_eq!(d.memory().used(), used, "every queue still has a stream");
    let _more = d.create_stream().unwrap();
    assert_eq!(d.counters().compute_queues_created, 4, "a new stream joins a live queue");
    assert_eq!(d.compute_queue_users(), [2, 2, 1]);
    drop((streams, _more));
    assert!(d.compute_queue_users().is_empty());
    assert!(d.memory().used() < used, "the last stream of a queue frees its context memory");
    assert!(ferry_sim::PlatformBuilder::new(Arch::A2a3).max_hw_queues(0).build().is_err());
}

#[test]
fn an_eviction_stops_a_devices_queues_for_its_length_and_only_that_device() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 2);
    let (d0, d1) = (p.device(0).unwrap(), p.device(1).unwrap());
    let (b0, b1) = (d0.malloc(64).unwrap(), d1.malloc(64).unwrap());
    d0.copy_htod(&[1; 64], b0).unwrap();
    d0.evict_queues(std::time::Duration::from_millis(150));
    let t = std::time::Instant::now();
    d1.copy_htod(&[1; 64], b1).unwrap();
    assert_eq!(d1.counters().eviction_waits, 0, "device 1 is not evicted");
    d0.copy_htod(&[2; 64], b0).unwrap();
    // A lower bound only: the eviction's length is a floor, whatever the machine's load.
    assert!(t.elapsed() >= std::time::Duration::from_millis(150), "device 0 waited");
    let c = d0.counters();
    assert_eq!((c.queue_evictions, c.eviction_waits), (1, 1));
    d0.copy_htod(&[3; 64], b0).unwrap();
    assert_eq!(d0.counters().eviction_waits, 1, "restored: the next copy does not wait");
}

/// The null stream lives inside its device; it used to hold the device strongly, so a device
/// that had done one blocking copy was never dropped: its HBM mapping and the null stream's
/// worker thread stayed for the rest of the process (one of each per runner).
#[test]
fn a_device_with_a_null_stream_is_dropped_with_its_last_handle() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 2);
    let d = p.device(0).unwrap().clone();
    let buf = d.malloc(64).unwrap();
    d.copy_htod(&[7u8; 64], buf).unwrap(); // creates the null stream
    let mut back = [0u8; 64];
    d.copy_dtoh(buf, &mut back).unwrap();
    assert_eq!(back, [7u8; 64]);
    let pooled = d.create_stream().unwrap();
    let weak = d.downgrade();
    drop(p);
    assert!(weak.upgrade().is_some(), "the pooled stream and `d` still hold it");
    drop(d);
    assert!(weak.upgrade().is_some(), "a pooled stream owns its device");
    assert_eq!(pooled.device().map(|d| d.ordinal()), Some(0));
    drop(pooled);
    assert!(weak.upgrade().is_none(), "nothing holds the device: it (and its null stream) went");
}

/// A stream's hardware queue takes device memory for its context-save area; dropping the stream
/// gives it back (it used to stay allocated, a queue's worth per stream ever created).
#[test]
fn a_dropped_stream_returns_its_queue_memory() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A5, 1);
    let d = p.device(0).unwrap();
    d.null_stream().unwrap();
    let base = d.memory().used();
    for _ in 0..3 {
        let s = d.create_stream().unwrap();
        assert!(d.memory().used() > base, "the queue's context area is device memory");
        s.launch("k", Box::new(|_| Ok(()))).unwrap();
        s.synchronize().unwrap();
        drop(s);
        assert_eq!(d.memory().used(), base);
    }
}

/// The chip takes every shape up to the arch's limits and nothing past them; a launch takes
/// every count from 1 to its threads or cores; cores are AICs first, then AIVs, each with its
/// own register window and handshake slot.
#[test]
fn chip_shapes_and_launch_counts_are_accepted_exactly_up_to_their_limits() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(64 << 20).build().unwrap();
    let d = p.device(0).unwrap().clone();
    let a = d.arch();
    let shape = |aicpu_threads, aic, aiv| CoreConfig { aicpu_threads, aic, aiv };
    for bad in [
        shape(0, 1, 0),
        shape(a.max_aicpu_threads + 1, 1, 0),
        shape(1, 0, 0),
        shape(1, a.aic_per_die + 1, 0),
        shape(1, 0, a.aiv_per_die + 1),
    ] {
        assert!(Chip::new(d.clone(), bad).is_err(), "{bad:?}");
    }
    drop(Chip::new(d.clone(), shape(a.max_aicpu_threads, a.aic_per_die, a.aiv_per_die)).unwrap());
    let chip = Chip::new(d, shape(2, 2, 1)).unwrap();
    let types: Vec<_> = (0..3).map(|i| chip.core_type(i)).collect();
    assert_eq!(types, [AicoreType::Aic, AicoreType::Aic, AicoreType::Aiv]);
    let windows: Vec<u64> = (0..3).map(|i| chip.window(i).base().0).collect();
    assert_eq!(chip.reg_bases(), windows, "the regs table is the windows, by core index");
    for i in 0..3u32 {
        let step = u64::from(i) * ferry_sim::cores::HANDSHAKE_BYTES;
        assert_eq!(chip.handshake(i).0, chip.handshake(0).0 + step, "slot {i}");
    }
    for n in [0, 4] {
        assert!(chip.launch_aicore(n, Arc::new(|_| Ok(()))).is_err(), "{n} cores");
    }
    for n in [0, 3] {
        assert!(chip.launch_aicpu(n, Arc::new(|_| Ok(()))).is_err(), "{n} threads");
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let entry = Arc::new(move |c: ferry_sim::cores::CoreCtx| {
        s.lock().unwrap().push((c.index, c.core_type, c.handshake.0, c.window.base().0));
        Ok(())
    });
    chip.launch_aicore(3, entry).unwrap().wait().unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by_key(|s| s.0);
    let want: Vec<_> =
        (0..3).map(|i| (i, types[i as usize], chip.handshake(i).0, windows[i as usize])).collect();
    assert_eq!(seen, want, "each core gets its own index, type, slot and window");
    let threads = Arc::new(Mutex::new(Vec::new()));
    let t = threads.clone();
    let entry = Arc::new(move |c: ferry_sim::cores::AicpuCtx| {
        t.lock().unwrap().push((c.thread, c.threads));
        Ok(())
    });
    chip.launch_aicpu(2, entry).unwrap().wait().unwrap();
    let mut threads = threads.lock().unwrap().clone();
    threads.sort();
    assert_eq!(threads, [(0, 2), (1, 2)]);
}

/// A register wait returns the value that satisfied its predicate, or `None` when the timeout
/// passed first; each side's write is what the other side's wait reads.
#[test]
fn register_waits_return_the_satisfying_value_or_none() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let p = platform(Arch::A2a3, 1);
    let chip =
        Chip::new(p.device(0).unwrap().clone(), CoreConfig { aicpu_threads: 1, aic: 1, aiv: 0 })
            .unwrap();
    let w = chip.window(0);
    w.core_write(8, 7);
    assert_eq!(w.aicpu_wait(8, |v| v == 7, None), Some(7));
    let never = Some(Duration::from_millis(1));
    assert_eq!(w.aicpu_wait(8, |v| v == 9, never), None, "never satisfied");
    w.aicpu_write(12, 5);
    assert_eq!(w.core_wait(12, |v| v == 5, None), Some(5));
    assert_eq!(w.core_wait(12, |v| v > 5, never), None, "never satisfied");
    assert_eq!((w.read(8), w.read(12)), (7, 5));
}
