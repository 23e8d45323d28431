//! Launches queued in stream order: run k+1 is published and launched on the shared stream pair
//! while run k executes, retirement waits for a run's own boundaries only, and a failure in
//! run k reaches run k+1 as an inherited error. Every ordering is observed through stream and
//! event state (gated entries hold run k; nothing here depends on timing).
use ferry_abi::launch::KernelArgs;
use ferry_launch::transaction::{LaunchError, PublishError, RetirePath};
use ferry_launch::{EntryKernels, LaunchDescriptor, LaunchStaging, RunStreams, TransactionState};
use ferry_sim::counters::Counter;
use ferry_sim::fault::FaultPoint;
use ferry_sim::{Arch, Device, DeviceError, Platform, PlatformBuilder};
use std::sync::mpsc;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

struct Rig {
    _p: Platform,
    dev: Device,
    streams: RunStreams<Device>,
    slots: [LaunchStaging<Device>; 2],
}

fn rig() -> Rig {
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build().unwrap();
    let dev = p.device(0).unwrap().clone();
    let streams = RunStreams::new(&dev).unwrap();
    let slots = [LaunchStaging::new(&dev, 0), LaunchStaging::new(&dev, 1)];
    Rig { _p: p, dev, streams, slots }
}

/// Device memory in use, less the context memory of the copy engines' queues (an engine makes
/// its queue on its first copy and keeps it for the device's life).
fn used(d: &Device) -> u64 {
    d.memory().used()
        - d.copy_engine_queues() as u64 * ferry_sim::device::DEFAULT_QUEUE_CONTEXT_BYTES
}

fn desc(fill: u8) -> LaunchDescriptor {
    LaunchDescriptor::new(vec![fill; 256], 256).unwrap()
}

/// Entries whose AICPU side blocks until the sender sends (or drops), then returns `result`.
fn gated(result: Result<(), String>) -> (EntryKernels<Device>, mpsc::Sender<()>) {
    let (tx, rx) = mpsc::channel::<()>();
    let k = EntryKernels::new(
        |_, _| Ok(()),
        move |_, _| {
            let _ = rx.recv();
            result
        },
    );
    (k, tx)
}

fn launch(r: &mut Rig, slot: usize, fill: u8, k: EntryKernels<Device>) -> Result<(), LaunchError> {
    r.slots[slot].prepare_runtime_args(&desc(fill), KernelArgs::new(0, 0)).unwrap();
    r.slots[slot].launch(&r.streams, k).map(|_| ())
}

#[test]
fn run_k_plus_1_is_queued_before_run_k_completes_and_each_retires_on_its_own_boundaries() {
    let _bound = ferry_watchdog::bound("the two queued runs on the simulated chip");
    let mut r = rig();
    let (k0, gate0) = gated(Ok(()));
    launch(&mut r, 0, 1, k0).unwrap();
    let ev0 = r.slots[0].run_events().expect("launched");
    let syncs = r.dev.counter(Counter::Synchronizes);
    // Run k+1 on the other slot: published and launched while run k is held on the device.
    let (k1, gate1) = gated(Ok(()));
    launch(&mut r, 1, 2, k1).unwrap();
    let ev1 = r.slots[1].run_events().expect("launched");
    assert_eq!(r.dev.counter(Counter::Synchronizes), syncs, "no host synchronisation");
    assert!(!ev0.completed(), "run k has not completed");
    assert!(!ev1.started(), "run k+1 waits in stream order behind run k");
    assert_eq!(r.slots[1].stats().predecessor_waits, 1);
    assert_eq!(r.slots[1].state(), TransactionState::Published);
    assert_eq!(r.streams.tail().map(|t| t.run), r.slots[1].run());

    gate0.send(()).unwrap();
    // Retiring run k waits for run k's boundaries only: run k+1 is still held.
    let done0 = r.slots[0].finish_run(T).unwrap();
    assert_eq!((done0.path, done0.run_error, done0.inherited), (RetirePath::Normal, None, false));
    assert!(!ev1.completed(), "run k's retirement did not wait for run k+1");
    gate1.send(()).unwrap();
    let done1 = r.slots[1].finish_run(T).unwrap();
    assert_eq!((done1.path, done1.run_error, done1.inherited), (RetirePath::Normal, None, false));
    // Device clock: run k+1's first operation ran at or after run k's last completion.
    let (s0, e0) = done0.span_cycles.unwrap();
    let (s1, e1) = done1.span_cycles.unwrap();
    assert!(s0 <= e0 && e0 <= s1 && s1 <= e1, "{s0} {e0} {s1} {e1}");
    assert!(r.streams.tail().is_none(), "every launched run retired");

    // A run published after its predecessor retired is not ordered behind anything.
    launch(&mut r, 0, 1, EntryKernels::noop()).unwrap();
    assert_eq!(r.slots[0].stats().predecessor_waits, 0);
    r.slots[0].finish_run(T).unwrap();
    for s in &mut r.slots {
        s.teardown().unwrap();
    }
    assert_eq!(r.dev.pinned_stats().live_bytes, 0);
}

/// Run k+1's first operations (its start record, the copies into regions run k may still read)
/// wait for run k's AICore entry, not only for its AICPU entry ahead of them on the AICPU
/// stream: with run k's AICore entry held, the AICPU stream ends up blocked on run k's AICore
/// boundary and run k+1 has not started; the test waits for that state, or fails at once if
/// run k+1 starts first (which it can only do with the wait missing).
#[test]
fn run_k_plus_1_waits_for_run_ks_aicore_entry_before_its_first_operation() {
    let bound = ferry_watchdog::bound("run k+1 queued behind run k's held AICore entry");
    let mut r = rig();
    let (tx, rx) = mpsc::channel::<()>();
    let k0 = EntryKernels::new(
        move |_, _| {
            let _ = rx.recv();
            Ok(())
        },
        |_, _| Ok(()),
    );
    launch(&mut r, 0, 1, k0).unwrap();
    let ev0 = r.slots[0].run_events().expect("launched");
    launch(&mut r, 1, 2, EntryKernels::noop()).unwrap();
    let ev1 = r.slots[1].run_events().expect("launched");
    bound.waiting_for("the AICPU stream to block on run k's AICore boundary");
    while !(ev0.aicpu_done.query() && r.streams.aicpu.blocked_on_event()) {
        assert!(!ev1.started(), "run k+1 started while run k's AICore entry still ran");
        std::thread::yield_now();
    }
    assert!(!ev1.started(), "run k+1 waits for run k's AICore entry");
    assert!(!ev0.aicore_done.query(), "run k's AICore entry is still held");
    assert!(!ev0.completed(), "one of run k's two boundaries is not a completed run");
    assert_eq!(ev0.span_cycles(), None);
    tx.send(()).unwrap();
    bound.waiting_for("both runs to retire");
    let done0 = r.slots[0].finish_run(T).unwrap();
    assert_eq!(r.streams.tail().map(|t| t.run), r.slots[1].run(), "run k+1 is still the tail");
    let done1 = r.slots[1].finish_run(T).unwrap();
    assert!(r.streams.tail().is_none(), "the tail retired with run k+1");
    // The span is the start record's timestamp to the later completion boundary's.
    let ts = |e: &ferry_sim::Event| e.timestamp_cycles().unwrap();
    let end0 = ts(&ev0.aicpu_done).max(ts(&ev0.aicore_done));
    assert!(ev0.completed());
    assert_eq!(ev0.span_cycles(), Some((ts(&ev0.started), end0)));
    assert_eq!(done0.span_cycles, ev0.span_cycles());
    let (_, e0) = done0.span_cycles.unwrap();
    let (s1, _) = done1.span_cycles.unwrap();
    assert!(e0 <= s1, "run k+1 started at {s1}, before run k ended at {e0}");
    for s in &mut r.slots {
        s.teardown().unwrap();
    }
}

/// A run that fails on its own while queued behind a clean run: its failure is its own, not
/// inherited, and the clean run before it retires clean.
#[test]
fn a_failure_of_run_k_plus_1_behind_a_clean_run_k_is_its_own() {
    let _bound = ferry_watchdog::bound("a clean run and a failing run queued behind it");
    for aicore_fails in [false, true] {
        let mut r = rig();
        let (k0, gate0) = gated(Ok(()));
        launch(&mut r, 0, 1, k0).unwrap();
        let k1 = if aicore_fails {
            EntryKernels::new(|_, _| Err("core fault".into()), |_, _| Ok(()))
        } else {
            EntryKernels::new(|_, _| Ok(()), |_, _| Err("aicpu fault".into()))
        };
        launch(&mut r, 1, 2, k1).unwrap();
        gate0.send(()).unwrap();
        let done0 = r.slots[0].finish_run(T).unwrap();
        assert_eq!((done0.run_error, done0.inherited), (None, false));
        let done1 = r.slots[1].finish_run(T).unwrap();
        let own = done1.run_error.clone().expect("run k+1 failed");
        assert!(matches!(own.source_as(), Some(DeviceError::Kernel { .. })), "{own}");
        assert!(!done1.inherited, "aicore fails: {aicore_fails}: its own failure");
        for s in &mut r.slots {
            s.teardown().unwrap();
        }
    }
}

/// A failure of run k (its AICPU or its AICore entry) while run k+1 is queued: run k retires
/// with its own error, run k+1 with the same error marked inherited, nothing stays allocated,
/// and the next run on the pair is clean.
#[test]
fn a_failure_in_run_k_while_k_plus_1_is_queued_fails_both_and_the_pair_recovers() {
    let _bound = ferry_watchdog::bound("the failing run and the run queued behind it");
    for aicore_fails in [false, true] {
        let mut r = rig();
        let base = used(&r.dev);
        let (tx, rx) = mpsc::channel::<()>();
        let k0 = if aicore_fails {
            EntryKernels::new(
                move |_, _| {
                    let _ = rx.recv();
                    Err("core fault".into())
                },
                |_, _| Ok(()),
            )
        } else {
            EntryKernels::new(
                |_, _| Ok(()),
                move |_, _| {
                    let _ = rx.recv();
                    Err("aicpu fault".into())
                },
            )
        };
        launch(&mut r, 0, 1, k0).unwrap();
        launch(&mut r, 1, 2, EntryKernels::noop()).unwrap();
        let ev1 = r.slots[1].run_events().unwrap();
        assert!(!ev1.completed());
        tx.send(()).unwrap();
        let done0 = r.slots[0].finish_run(T).unwrap();
        let own = done0.run_error.clone().expect("run k failed");
        assert!(matches!(own.source_as(), Some(DeviceError::Kernel { .. })), "{own}");
        assert!(!done0.inherited);
        let done1 = r.slots[1].finish_run(T).unwrap();
        assert_eq!(done1.run_error, Some(own), "aicore fails: {aicore_fails}");
        assert!(done1.inherited, "run k+1 carries run k's failure, marked as inherited");
        // The pair is clean again: the next run retires without an error.
        launch(&mut r, 0, 3, EntryKernels::noop()).unwrap();
        let next = r.slots[0].finish_run(T).unwrap();
        assert_eq!((next.path, next.run_error, next.inherited), (RetirePath::Normal, None, false));
        for s in &mut r.slots {
            s.teardown().unwrap();
        }
        assert_eq!(r.dev.pinned_stats().live_bytes, 0, "nothing leaked");
        assert_eq!(used(&r.dev), base, "nothing leaked");
    }
}

/// Every stream operation of run k+1's queued publication and launch, failed in turn while run k
/// executes: run k+1's error is typed, run k still retires normally and clean, run k+1 retires
/// through the discharge, nothing leaks and the pair runs the next run.
#[test]
fn fault_injection_on_a_queued_launch() {
    let _bound = ferry_watchdog::bound("the queued runs on the simulated chip");
    // Count run k+1's operations in a clean pass.
    let mut r = rig();
    let (k0, gate) = gated(Ok(()));
    launch(&mut r, 0, 1, k0).unwrap();
    let seen = |d: &Device| FaultPoint::ALL.map(|p| d.faults().seen(p));
    r.slots[1].prepare_runtime_args(&desc(2), KernelArgs::new(0, 0)).unwrap();
    let s0 = seen(&r.dev);
    r.slots[1].launch(&r.streams, EntryKernels::noop()).unwrap();
    let s1 = seen(&r.dev);
    drop(gate);
    r.slots[0].finish_run(T).unwrap();
    r.slots[1].finish_run(T).unwrap();
    let mut injected = 0;
    for (i, &point) in FaultPoint::ALL.iter().enumerate() {
        for n in 1..=(s1[i] - s0[i]) {
            let label = format!("{point:?} #{n}");
            let mut r = rig();
            let base = used(&r.dev);
            let (k0, gate) = gated(Ok(()));
            launch(&mut r, 0, 1, k0).unwrap();
            r.slots[1].prepare_runtime_args(&desc(2), KernelArgs::new(0, 0)).unwrap();
            r.dev.faults().fail_nth(point, n);
            let err = r.slots[1].launch(&r.streams, EntryKernels::noop()).unwrap_err();
            assert_eq!(r.dev.faults().armed(), 0, "{label}: the fault hit run k+1's launch");
            let typed = matches!(
                err,
                LaunchError::Publish(
                    PublishError::PredecessorWait { .. }
                        | PublishError::StartRecord(_)
                        | PublishError::Copy { .. }
                        | PublishError::ForkRecord(_)
                        | PublishError::ForkWait(_)
                ) | LaunchError::Submit { .. }
                    | LaunchError::CompletionRecord { .. }
            );
            assert!(typed, "{label}: {err:?}");
            let text = format!("{:?}", err);
            assert!(text.contains("Injected"), "{label}: the injected fault is the cause: {text}");
            gate.send(()).unwrap();
            let done0 = r.slots[0].finish_run(T).unwrap();
            assert_eq!((done0.path, done0.run_error), (RetirePath::Normal, None), "{label}");
            if let Some(run) = r.slots[1].execution_owner() {
                // Only a run whose AICore entry was queued without its AICPU entry can hang; the
                // no-op entries here return by themselves.
                let done1 = r.slots[1].finish_run(T).unwrap();
                assert_eq!((done1.run, done1.path), (run, RetirePath::Discharged), "{label}");
            }
            r.slots[1].release_run_view();
            launch(&mut r, 1, 3, EntryKernels::noop()).unwrap();
            let next = r.slots[1].finish_run(T).unwrap();
            assert_eq!((next.path, next.run_error), (RetirePath::Normal, None), "{label}");
            for s in &mut r.slots {
                s.teardown().unwrap();
            }
            assert_eq!(r.dev.pinned_stats().live_bytes, 0, "{label}: nothing leaked");
            assert_eq!(used(&r.dev), base, "{label}: nothing leaked");
            injected += 1;
        }
    }
    assert!(injected >= 7, "waits, records, copy and launches were all covered: {injected}");
}
