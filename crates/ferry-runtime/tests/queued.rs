//! Runs queued in stream order on the full path: run k+1 is launched while run k has not
//! completed, a run can be ordered after a caller's event (a copy-engine gather that fills its
//! input) without the host waiting, and a failure of run k reaches run k+1 as a typed error.
//! Ordering is observed through stream and event state and the device's synchronisation
//! counter; a gate kernel on a caller stream holds run k where a test needs it held.
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::{DeviceRunner, RunnerConfig, TensorInit, Variant};
use ferry_runtime::RunError;
use ferry_sim::counters::Counter;
use ferry_sim::{Arch, Device, DevicePtr, Event, Stream};
use std::sync::mpsc;

/// A caller stream held by a kernel until the returned sender sends (or drops).
fn gated_stream(dev: &Device) -> (Stream, mpsc::Sender<()>) {
    let s = dev.create_stream().unwrap();
    let (tx, rx) = mpsc::channel::<()>();
    s.launch(
        "caller_gate",
        Box::new(move |_| {
            let _ = rx.recv();
            Ok(())
        }),
    )
    .unwrap();
    (s, tx)
}

fn runner(arch: Arch, variant: Variant) -> (DeviceRunner, ferry_runtime::examples::ExampleRun) {
    let mut r = DeviceRunner::new(RunnerConfig::small(arch).with_launch_slots(2)).unwrap();
    let ex = Example::Vector.build(Size::Small).with_variant(variant);
    r.register_callable(0, ex.callable.clone()).unwrap();
    (r, ex)
}

#[test]
fn run_k_plus_1_is_queued_before_run_k_completes() {
    let _bound = ferry_watchdog::bound("the two queued runs on the simulated chip");
    for (arch, variant) in [
        (Arch::A2a3, Variant::HostBuiltGraph),
        (Arch::A2a3, Variant::DeviceOrchestrated),
        (Arch::A5, Variant::HostBuiltGraph),
    ] {
        let what = format!("{arch:?} {variant:?}");
        let (mut r, ex) = runner(arch, variant);
        ex.verify(&r.run(0, ex.args.clone()).unwrap()).unwrap();
        // Run k waits on the device for a caller's event the test holds back.
        let (caller, gate) = gated_stream(r.device());
        let ev = Event::new();
        caller.record_event(&ev).unwrap();
        let p0 = r.prepare(0, ex.args.clone()).unwrap();
        let k = r.launch_after(p0, &ev).unwrap();
        // (Preparing uploads the run's tensors with blocking copies: counted before.)
        let p1 = r.prepare(0, ex.args.clone()).unwrap();
        let syncs = r.device().counter(Counter::Synchronizes);
        let k1 = r.launch(p1).unwrap();
        assert_eq!(r.device().counter(Counter::Synchronizes), syncs, "{what}: no host sync");
        let (e0, e1) = (r.run_events(&k).unwrap(), r.run_events(&k1).unwrap());
        assert!(!e0.started() && !e0.completed(), "{what}: run k is held");
        assert!(!e1.started() && !e1.completed(), "{what}: run k+1 is queued behind run k");
        assert!(!r.poll(&k) && !r.poll(&k1), "{what}");
        let stats = r.launch_stats().unwrap();
        assert!(stats.predecessor_waits >= 1, "{what}: ordered behind run k's boundaries");
        gate.send(()).unwrap();
        let out0 = r.finalize_run(k).unwrap();
        let out1 = r.finalize_run(k1).unwrap();
        // Device clock: run k started only once the caller's event was reached.
        let (gate_at, start_at) = (ev.timestamp_cycles(), e0.started.timestamp_cycles());
        assert!(gate_at.unwrap() <= start_at.unwrap(), "{what}: {gate_at:?} then {start_at:?}");
        ex.verify(&out0).unwrap();
        ex.verify(&out1).unwrap();
        let (d0, d1) = (out0.stats.device.unwrap(), out1.stats.device.unwrap());
        assert!(d0.end_cycles <= d1.start_cycles, "{what}: {d0:?} then {d1:?}");
        // The runner is idle and reusable.
        assert!(!r.is_busy());
        ex.verify(&r.run(0, ex.args.clone()).unwrap()).unwrap();
        drop(caller);
        r.finalize().unwrap();
    }
}

/// A copy-engine gather on the caller's stream fills the run's input from scattered
/// fragments; the run is ordered after the gather's event and launched with zero host
/// synchronisations from the gather's submission to the run's launch, and verifies.
#[test]
fn a_gather_chains_into_a_run_without_a_host_wait() {
    let _bound = ferry_watchdog::bound("the gather and the run chained after it");
    for variant in [Variant::HostBuiltGraph, Variant::DeviceOrchestrated] {
        let (mut r, ex) = runner(Arch::A2a3, variant);
        let dev = r.device().clone();
        let TensorInit::Data(a) = &ex.args.tensors[0] else { panic!("vector input is data") };
        let bytes: Vec<u8> = a.iter().flat_map(|x| x.to_le_bytes()).collect();
        const FRAG: usize = 512;
        let frags = bytes.len() / FRAG;
        assert_eq!(frags * FRAG, bytes.len());
        // The fragments sit in a pool in reverse order; the gather puts them in place.
        let pool = dev.malloc(bytes.len() as u64).unwrap();
        let mut scattered = vec![0u8; bytes.len()];
        for i in 0..frags {
            let j = frags - 1 - i;
            scattered[j * FRAG..(j + 1) * FRAG].copy_from_slice(&bytes[i * FRAG..(i + 1) * FRAG]);
        }
        dev.copy_htod(&scattered, pool).unwrap();
        let input = dev.malloc(bytes.len() as u64).unwrap();
        dev.copy_htod(&vec![0u8; bytes.len()], input).unwrap();
        let mut args = ex.args.clone();
        args.tensors[0] = TensorInit::Device { addr: input, bytes: bytes.len() as u64 };
        let p = r.prepare(0, args).unwrap();

        let syncs = dev.counter(Counter::Synchronizes);
        let (caller, gate) = gated_stream(&dev);
        for i in 0..frags {
            let j = frags - 1 - i;
            let (src, dst) =
                (DevicePtr(pool.0 + (j * FRAG) as u64), DevicePtr(input.0 + (i * FRAG) as u64));
            caller.copy_dtod_async(src, dst, FRAG as u64).unwrap();
        }
        let gathered = Event::new();
        caller.record_event(&gathered).unwrap();
        let run = r.launch_after(p, &gathered).unwrap();
        assert_eq!(dev.counter(Counter::Synchronizes), syncs, "no host wait between them");
        assert!(!gathered.query(), "the gather is still held when the run is launched");
        let ev = r.run_events(&run).unwrap();
        assert!(!ev.started(), "the run waits for the gather on the device");
        gate.send(()).unwrap();
        ex.verify(&r.finalize_run(run).unwrap()).unwrap();
        // Device clock: the run started only once the gather's event was reached.
        let (gathered_at, start_at) = (gathered.timestamp_cycles(), ev.started.timestamp_cycles());
        assert!(gathered_at.unwrap() <= start_at.unwrap(), "{gathered_at:?} then {start_at:?}");
        caller.synchronize().unwrap();
        dev.free(pool).unwrap();
        dev.free(input).unwrap();
        r.finalize().unwrap();
    }
}

/// In process a launch cannot wait on a stream event: a typed refusal, the run not lost.
#[test]
fn a_caller_dependency_in_process_is_refused() {
    let _bound = ferry_watchdog::bound("the in-process runner");
    let mut r = DeviceRunner::new(RunnerConfig::small(Arch::A2a3).in_process()).unwrap();
    let ex = Example::Vector.build(Size::Small);
    r.register_callable(0, ex.callable.clone()).unwrap();
    let p = r.prepare(0, ex.args.clone()).unwrap();
    let err = r.launch_after(p, &Event::new()).unwrap_err();
    assert!(matches!(err, RunError::DependencyNeedsStreams), "{err}");
    assert!(!r.is_busy(), "the refused run was released");
    ex.verify(&r.run(0, ex.args.clone()).unwrap()).unwrap();
}

/// Run k fails on the device while run k+1 is queued behind it: both of its entries fail to
/// start their threads (the next two device-side launches, which are run k's: run k+1's
/// entries wait for run k's completion boundaries). Run k reports its own typed error, run k+1
/// [`RunError::AfterFailedRun`]; nothing leaks and the runner runs the next run.
#[test]
fn a_failed_run_k_fails_queued_run_k_plus_1_with_a_typed_error_and_the_runner_recovers() {
    let _bound = ferry_watchdog::bound("the failing run and the run queued behind it");
    for variant in [Variant::HostBuiltGraph, Variant::DeviceOrchestrated] {
        let what = format!("{variant:?}");
        let (mut r, ex) = runner(Arch::A2a3, variant);
        // Warm both slots (each keeps its pinned source and device destination).
        let a = r.prepare(0, ex.args.clone()).and_then(|p| r.launch(p)).unwrap();
        let b = r.prepare(0, ex.args.clone()).and_then(|p| r.launch(p)).unwrap();
        ex.verify(&r.finalize_run(a).unwrap()).unwrap();
        ex.verify(&r.finalize_run(b).unwrap()).unwrap();
        let dev = r.device().clone();
        let used = dev.memory().used();
        let pinned = dev.pinned_stats().live_bytes;
        let (caller, gate) = gated_stream(&dev);
        let ev = Event::new();
        caller.record_event(&ev).unwrap();
        let p0 = r.prepare(0, ex.args.clone()).unwrap();
        let k = r.launch_after(p0, &ev).unwrap();
        let p1 = r.prepare(0, ex.args.clone()).unwrap();
        let k1 = r.launch(p1).unwrap();
        // Every launch the host makes is done; the next two are run k's entries starting the
        // cores and the AICPU threads (in either order).
        dev.faults().fail_nth(ferry_sim::fault::FaultPoint::Launch, 1);
        dev.faults().fail_nth(ferry_sim::fault::FaultPoint::Launch, 2);
        gate.send(()).unwrap();
        let e0 = r.finalize_run(k).unwrap_err();
        let e1 = r.finalize_run(k1).unwrap_err();
        assert!(!matches!(e0, RunError::AfterFailedRun(_)), "{what}: run k's own error: {e0}");
        // Run k+1's source is run k's failure on the streams, which names run k's fault.
        let names_k = matches!(
            &e1,
            RunError::AfterFailedRun(Some(e)) if matches!(
                e.source_as::<ferry_sim::DeviceError>(),
                Some(ferry_sim::DeviceError::Kernel { message, .. }) if message.contains("Launch")
            )
        );
        assert!(names_k, "{what}: run k+1: {e1:?}");
        assert_eq!(dev.faults().armed(), 0, "{what}: both faults hit run k");
        // Nothing leaked, and the runner runs the next run.
        assert!(!r.is_busy());
        ex.verify(&r.run(0, ex.args.clone()).unwrap()).unwrap();
        assert_eq!(dev.pinned_stats().live_bytes, pinned, "{what}");
        let engines =
            dev.copy_engine_queues() as u64 * ferry_sim::device::DEFAULT_QUEUE_CONTEXT_BYTES;
        assert!(dev.memory().used() <= used + engines, "{what}: device memory came back");
        drop(caller);
        r.finalize().unwrap();
    }
}
