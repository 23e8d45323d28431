//! The host-memory backend keeps the device rules the seam promises: device addresses are
//! checked against this device's live memory, a failure of enqueued work is sticky until the
//! stream is synchronized, a blocking copy's result is its own, and bad input is a typed error.
use ferry_backend::host::{HostMemoryBackend, HostMemoryError, HostMemoryStream};
use ferry_backend::{
    Backend, BackendDevice, BackendError, BackendOp, BackendStream, CopyKind, DevicePtr,
    GatherFragment, HostMapping, Segment, FRAGMENT_BYTES,
};
use std::error::Error;

fn cause(e: &BackendError) -> &HostMemoryError {
    e.source_as::<HostMemoryError>().expect("the host backend's own error")
}

/// Uploads `frags` into a fresh allocation and launches the gather over them on `s`.
fn gather(
    dev: &impl BackendDevice,
    s: &impl BackendStream,
    frags: &[GatherFragment],
) -> Result<(), BackendError> {
    let table = dev.malloc((frags.len() * FRAGMENT_BYTES) as u64)?;
    // SAFETY: `frags` lives until the stream is synchronized by the caller (the host backend
    // copies at enqueue besides).
    unsafe {
        s.copy_htod_async(
            frags.as_ptr() as *const u8,
            table,
            (frags.len() * FRAGMENT_BYTES) as u64,
        )?
    };
    s.launch_gather(table, frags.len(), true)
}

#[test]
fn a_gather_reaches_registered_host_memory_through_this_devices_alias_only() {
    let b = HostMemoryBackend::new(2, 1 << 20).unwrap();
    let (d0, d1) = (b.device(0).unwrap(), b.device(1).unwrap());
    let mut page = vec![7u8; 4096];
    // SAFETY: `page` outlives `reg` (dropped at the end) and is only read by the device.
    let reg = unsafe { b.register_host(page.as_mut_ptr(), page.len()).unwrap() };
    let buf = d0.malloc(4096).unwrap();
    let s = d0.create_stream().unwrap();
    let alias0 = reg.alias(0, page.as_ptr(), 4096).unwrap();
    gather(d0, &s, &[GatherFragment { src: alias0.0, dst: buf.0, bytes: 4096 }]).unwrap();
    s.synchronize().unwrap();

    // Device 1's alias, and the raw host pointer, are not device 0's memory: the kernel
    // fails, and the stream reports it once.
    let alias1 = reg.alias(1, page.as_ptr(), 4096).unwrap();
    for src in [alias1.0, page.as_ptr() as u64] {
        let f = [
            GatherFragment { src: alias0.0, dst: buf.0, bytes: 16 },
            GatherFragment { src, dst: buf.0, bytes: 16 },
        ];
        gather(d0, &s, &f).unwrap();
        let e = s.synchronize().unwrap_err();
        assert_eq!(e.op(), BackendOp::Synchronize);
        let HostMemoryError::Fragment { index: 1, source } = cause(&e) else { panic!("{e:?}") };
        assert!(matches!(**source, HostMemoryError::BadAddress { ordinal: 0, .. }), "{source:?}");
        s.synchronize().expect("the sticky error was reported and cleared");
    }
    assert!(!d1.is_allocated(DevicePtr(buf.0), 1), "device 1 has no such allocation");
    drop(reg);
    assert!(gather(d0, &s, &[GatherFragment { src: alias0.0, dst: buf.0, bytes: 1 }]).is_ok());
    assert!(s.synchronize().is_err(), "an unregistered range is nobody's memory");
}

#[test]
fn a_blocking_copy_reports_its_own_failure_and_leaves_the_stream_clean() {
    let b = HostMemoryBackend::new(1, 1 << 20).unwrap();
    let d = b.device(0).unwrap();
    let buf = d.malloc(64).unwrap();
    let s = d.null_stream().unwrap();
    let mut host = [1u8; 128];
    // SAFETY: `host` lives across the blocking calls.
    let e = unsafe {
        s.copy_segments_blocking(
            CopyKind::Htod,
            &[Segment { src: host.as_mut_ptr() as u64, dst: buf.0, len: 128 }],
        )
    }
    .unwrap_err();
    assert_eq!(e.op(), BackendOp::Copy);
    assert!(matches!(cause(&e), HostMemoryError::BadAddress { len: 128, .. }));
    s.synchronize().expect("nothing sticky: the failure was the blocking call's");
    // The message names the operation; the cause chain the rest, once.
    assert_eq!(e.to_string(), "copying");
    let mut chain = Vec::new();
    let mut cur = e.source();
    while let Some(c) = cur {
        chain.push(c.to_string());
        cur = c.source();
    }
    assert_eq!(chain.len(), 1, "{chain:?}");
    assert!(chain[0].contains("is not live memory of device 0"), "{chain:?}");
}

#[test]
fn bad_input_is_a_typed_error() {
    assert_eq!(
        HostMemoryBackend::new(17, 1).unwrap_err(),
        HostMemoryError::TooManyDevices { asked: 17 }
    );
    let b = HostMemoryBackend::new(1, 4096).unwrap();
    let d = b.device(0).unwrap();
    assert!(matches!(
        cause(&b.device(1).unwrap_err()),
        HostMemoryError::NoSuchDevice { ordinal: 1, count: 1 }
    ));
    assert!(matches!(
        cause(&b.set_current_device(3).unwrap_err()),
        HostMemoryError::NoSuchDevice { .. }
    ));
    let e = d.malloc(0).unwrap_err();
    assert_eq!(
        (e.op(), cause(&e)),
        (BackendOp::Malloc, &HostMemoryError::OutOfMemory { bytes: 0, free: 4096 })
    );
    let a = d.malloc(4096).unwrap();
    assert!(matches!(
        cause(&d.malloc(1).unwrap_err()),
        HostMemoryError::OutOfMemory { free: 0, .. }
    ));
    assert_eq!(d.free(DevicePtr(a.0 + 8)).unwrap_err().op(), BackendOp::Free);
    d.free(a).unwrap();
    assert!(d.free(a).is_err(), "a double free");
    // SAFETY: a null range is refused before anything is registered.
    let e = unsafe { b.register_host(std::ptr::null_mut(), 8) }.unwrap_err();
    assert!(matches!(cause(&e), HostMemoryError::BadRegistration { addr: 0, len: 8 }));
}

#[test]
fn armed_faults_fail_the_nth_operation_once() {
    let b = HostMemoryBackend::new(1, 1 << 20).unwrap();
    let d = b.device(0).unwrap();
    d.fail_nth(BackendOp::CreateStream, 2);
    assert!(d.create_stream().is_ok());
    let e = d.create_stream().unwrap_err();
    assert_eq!(cause(&e), &HostMemoryError::Injected { op: BackendOp::CreateStream });
    assert!(d.create_stream().is_ok());
    assert_eq!(d.armed(), 0);
}

#[test]
fn the_current_device_is_the_calling_threads() {
    let b = HostMemoryBackend::new(2, 4096).unwrap();
    b.set_current_device(1).unwrap();
    assert_eq!(b.current_ordinal(), 1);
    let other = b.clone();
    assert_eq!(std::thread::spawn(move || other.current_ordinal()).join().unwrap(), 0);
    b.set_current_device(0).unwrap();
}

/// What the launch path uses: an entry runs with its argument block on the device; an event
/// recorded after a failed entry reports that failure (one recorded before it does not); a
/// bounded synchronize hands the failure out once and tells it from a failed wait; pinned
/// host memory is a copy source, and a failed free gives the buffer back.
#[test]
fn entries_events_bounded_waits_and_pinned_memory() {
    use ferry_backend::host::HostMemoryDevice;
    use ferry_backend::{BackendEvent, HostEntry, PinnedHostBuffer};
    use std::time::Duration;
    let b = HostMemoryBackend::new(1, 1 << 20).unwrap();
    let d = b.device(0).unwrap();
    let s = d.create_stream().unwrap();
    let buf = d.malloc(8).unwrap();

    // The entry gets its device and its arguments by value.
    let write: HostEntry<HostMemoryDevice, [u8; 8]> =
        Box::new(move |dev: &HostMemoryDevice, args: [u8; 8]| {
            dev.copy_htod(&args, buf).map_err(|e| e.to_string())
        });
    s.launch_entry("write", write, *b"entry ok").unwrap();
    let mut back = [0u8; 8];
    // SAFETY: `back` lives until the stream is synchronized below.
    unsafe { s.copy_dtoh_async(buf, back.as_mut_ptr(), 8).unwrap() };
    s.synchronize_timeout(Duration::from_secs(1)).unwrap();
    assert_eq!(&back, b"entry ok");

    let (before, after, later) = Default::default();
    let never: <HostMemoryStream as BackendStream>::Event = Default::default();
    assert!(never.query() && never.timestamp_cycles().is_none() && never.error().is_none());
    s.record_event(&before).unwrap();
    let fail: HostEntry<HostMemoryDevice, ()> = Box::new(|_, ()| Err("bad block".into()));
    s.launch_entry("fails", fail, ()).unwrap();
    s.record_event(&after).unwrap();
    s.record_event(&later).unwrap();
    s.wait_event(&after).unwrap();
    d.synchronize_event(&after, Some(Duration::from_secs(1))).unwrap();
    assert!(before.query() && after.query());
    assert_eq!(before.error(), None);
    let e = after.error().expect("the entry's failure is on the stream");
    assert_eq!(e.op(), BackendOp::Execute);
    assert!(
        matches!(cause(&e), HostMemoryError::Kernel { name, message } if name == "fails" && message == "bad block")
    );
    assert_eq!(after.error(), later.error(), "one failure, seen at both records");
    assert!(before.timestamp_cycles() <= after.timestamp_cycles());

    // The bounded synchronize hands the failure out once; an injected failure of the wait
    // itself is the wait's.
    let e = s.synchronize_timeout(Duration::from_secs(1)).unwrap_err();
    assert_eq!(e.op(), BackendOp::Synchronize);
    s.synchronize_timeout(Duration::from_secs(1)).expect("handed out and cleared");
    d.fail_next(BackendOp::Wait);
    let e = s.synchronize_timeout(Duration::from_secs(1)).unwrap_err();
    assert_eq!(e.op(), BackendOp::Wait);
    assert!(d.synchronize_event(&after, None).is_ok());

    // Pinned memory: zeroed, a copy source; a failed free gives the buffer back.
    let mut pinned = d.alloc_pinned(8).unwrap();
    assert_eq!(pinned.len(), 8);
    // SAFETY: no copy is in flight on `pinned`.
    let bytes = unsafe { pinned.as_mut_slice() };
    assert_eq!(bytes, &[0u8; 8]);
    bytes.copy_from_slice(b"pinned!!");
    // SAFETY: `pinned` is neither written nor freed before the synchronize below.
    unsafe { s.copy_htod_async(pinned.as_ptr(), buf, 8).unwrap() };
    s.synchronize().unwrap();
    d.fail_next(BackendOp::PinnedFree);
    let failed = pinned.free().unwrap_err();
    assert_eq!(failed.error.op(), BackendOp::PinnedFree);
    failed.buffer.free().expect("the retry frees it");
    d.fail_next(BackendOp::PinnedAlloc);
    assert_eq!(d.alloc_pinned(8).unwrap_err().op(), BackendOp::PinnedAlloc);
    let mut back = [0u8; 8];
    // SAFETY: `back` lives across the blocking copy.
    unsafe {
        s.copy_segments_blocking(
            CopyKind::Dtoh,
            &[Segment { src: buf.0, dst: back.as_mut_ptr() as u64, len: 8 }],
        )
        .unwrap()
    };
    assert_eq!(&back, b"pinned!!");
}

#[test]
fn a_programs_threads_run_at_once_and_each_knows_its_position() {
    use ferry_backend::host::{aicpu_thread, HostProgramCode};
    use ferry_backend::{ProgramDevice, ProgramLaunch, ProgramSymbol};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    let b = HostMemoryBackend::new(1, 1 << 20).unwrap();
    let dev = b.device(0).unwrap();
    let arrived = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (a, s) = (arrived.clone(), seen.clone());
    // Every thread waits for all of them to have arrived, as an AICPU program's schedulers and
    // orchestrator wait for each other: threads run one after another never get there.
    let code = HostProgramCode::new().export("meet", move |_, _| {
        let Some((thread, threads)) = aicpu_thread() else { return 1 };
        s.lock().unwrap().push((thread, threads));
        // AcqRel: a plain meeting count, read back by the Acquire loads below.
        a.fetch_add(1, Ordering::AcqRel);
        let guard = Instant::now() + Duration::from_secs(5);
        // Acquire: pairs with the other threads' increments.
        while a.load(Ordering::Acquire) < threads {
            if Instant::now() > guard {
                return 2; // the others never came: they did not run at the same time
            }
            std::thread::yield_now();
        }
        0
    });
    dev.register_code(b"meeting", code);
    dev.save_custom("meet.so", b"meeting").unwrap();
    let symbol = ProgramSymbol {
        op_type: "meet_1",
        symbol: "meet",
        object: "meet.so",
        custom_scheduler: true,
    };
    let f = dev.resolve(&[symbol]).unwrap().remove(0);
    let launched = dev.launch_function(&f, 4, &[]).unwrap();
    assert!(launched.wait().is_ok(), "{:?}", launched.wait());
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_unstable();
    assert_eq!(seen, (0..4).map(|t| (t, 4)).collect::<Vec<_>>(), "each position once");
    assert_eq!(aicpu_thread(), None, "the caller is no AICPU thread");
}

#[test]
fn stream_threads_run_two_streams_at_once_in_order_behind_their_events() {
    use ferry_backend::host::HostMemoryDevice;
    use ferry_backend::{BackendEvent, HostEntry};
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    let b = HostMemoryBackend::with_stream_threads(1, 1 << 20).unwrap();
    let dev = b.device(0).unwrap();
    let (a, s) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
    let order = Arc::new(Mutex::new(Vec::new()));
    let (open, gate) = mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    // Stream `a`'s first entry waits for the test to open its gate: enqueueing it returns at
    // once, and everything behind it on `a` waits.
    let o = order.clone();
    let held: HostEntry<HostMemoryDevice, ()> = Box::new(move |_, ()| {
        let opened = gate.lock().unwrap().recv_timeout(Duration::from_secs(30));
        o.lock().unwrap().push("a");
        opened.map_err(|_| "the gate never opened".to_owned())
    });
    a.launch_entry("held", held, ()).unwrap();
    let e = <HostMemoryStream as BackendStream>::Event::default();
    a.record_event(&e).unwrap();
    b_waits(&s, &e, &order);
    assert!(!e.query(), "the record is behind the held entry");
    let timed_out = a.synchronize_timeout(Duration::from_millis(20)).unwrap_err();
    assert_eq!(timed_out.op(), BackendOp::Wait);
    assert_eq!(cause(&timed_out), &HostMemoryError::TimedOut);
    let ev_wait = dev.synchronize_event(&e, Some(Duration::from_millis(20))).unwrap_err();
    assert_eq!(cause(&ev_wait), &HostMemoryError::TimedOut);
    assert!(order.lock().unwrap().is_empty(), "`b` waits for the record on `a`");

    open.send(()).unwrap();
    s.synchronize().unwrap();
    assert!(e.query() && e.timestamp_cycles().is_some());
    dev.synchronize_event(&e, Some(Duration::from_secs(30))).unwrap();
    a.synchronize().unwrap();
    assert_eq!(*order.lock().unwrap(), ["a", "b"]);

    // A failure on the stream's thread is its sticky error, handed out by synchronize.
    let failing: HostEntry<HostMemoryDevice, ()> = Box::new(|_, ()| Err("refused".into()));
    a.launch_entry("failing", failing, ()).unwrap();
    let e = a.synchronize().unwrap_err();
    assert!(matches!(cause(&e), HostMemoryError::Kernel { message, .. } if message == "refused"));
    a.synchronize().unwrap();

    fn b_waits(
        s: &HostMemoryStream,
        e: &ferry_backend::host::HostMemoryEvent,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) {
        s.wait_event(e).unwrap();
        let o = order.clone();
        let after: HostEntry<HostMemoryDevice, ()> = Box::new(move |_, ()| {
            o.lock().unwrap().push("b");
            Ok(())
        });
        s.launch_entry("after", after, ()).unwrap();
    }
}
