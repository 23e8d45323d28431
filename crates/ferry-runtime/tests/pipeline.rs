//! Launch staging as the runtime uses it: the descriptor split (per-run values travel
//! in the per-run suffix, outside the cached launch-route prefix), measured with the launch
//! transaction's own counters.
use ferry_launch::transaction::StagingStats;
use ferry_runtime::examples::{Example, ExampleRun, Size};
use ferry_runtime::host::{
    DeviceRunner, LaunchedRun, RunOutput, RunnerConfig, Variant, MAX_LAUNCH_SLOTS,
    ROUTE_PREFIX_BYTES,
};
use ferry_runtime::{RunError, RunnerError};
use ferry_sim::fault::FaultPoint;
use ferry_sim::{Arch, DevicePtr};
use std::time::Duration;

fn delta(a: StagingStats, b: StagingStats) -> StagingStats {
    StagingStats {
        publishes: b.publishes - a.publishes,
        bytes_copied: b.bytes_copied - a.bytes_copied,
        descriptor_copies: b.descriptor_copies - a.descriptor_copies,
        metadata_copies: b.metadata_copies - a.metadata_copies,
        unchanged_prefixes: b.unchanged_prefixes - a.unchanged_prefixes,
        forks: b.forks - a.forks,
        predecessor_waits: b.predecessor_waits - a.predecessor_waits,
        growths: b.growths - a.growths,
        suffix_uploads: b.suffix_uploads - a.suffix_uploads,
        suffix_bytes: b.suffix_bytes - a.suffix_bytes,
    }
}

/// An identical graph launched again copies no descriptor byte and (without a caller
/// dependency, and with no launch metadata) queues no entry fork; a changed graph copies
/// exactly its prefix. Every run still verifies: the per-run suffix (new epoch, new tensor
/// addresses, fresh handshakes and result) reached the device without a stream copy.
#[test]
fn repeated_identical_run_publishes_nothing_and_changed_run_copies_its_prefix() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        for variant in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            let what = format!("{arch:?} {variant:?}");
            let mut r = DeviceRunner::new(RunnerConfig::small(arch)).unwrap();
            let ex = Example::Vector.build(Size::Small).with_variant(variant);
            // Two callables with the same graph: their headers differ (callable id), so a run of
            // one after the other is a changed prefix.
            r.register_callable(0, ex.callable.clone()).unwrap();
            r.register_callable(1, ex.callable.clone()).unwrap();
            // The a5 host-built graph stages its resident scheduler state as launch metadata on
            // every run (docs/design/launch.md): those copies, and the fork after them, are not the
            // descriptor's.
            let a5_hbg = arch == Arch::A5 && variant == Variant::HostBuiltGraph;
            let run = |r: &mut DeviceRunner, id: u32| {
                let before = r.launch_stats().unwrap();
                let out = r.run(id, ex.args.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
                ex.verify(&out).unwrap_or_else(|e| panic!("{what}: {e}"));
                delta(before, r.launch_stats().unwrap())
            };
            // Cold: every slot publishes its first descriptor.
            let mut metadata = 0;
            for _ in 0..r.config().launch_slots {
                let d = run(&mut r, 0);
                assert_eq!(d.descriptor_copies, 1, "{what}: a cold slot copies its prefix");
            }
            for k in 0..3 {
                let d = run(&mut r, 0);
                metadata = d.bytes_copied;
                assert_eq!(d.descriptor_copies, 0, "{what} repeat {k}: {d:?}");
                assert_eq!(d.unchanged_prefixes, 1, "{what} repeat {k}: {d:?}");
                assert_eq!(d.publishes, 1, "{what} repeat {k}: {d:?}");
                assert_eq!(d.suffix_uploads, 1, "{what} repeat {k}: the suffix goes every run");
                if a5_hbg {
                    assert_eq!(d.metadata_copies, 1, "{what} repeat {k}: {d:?}");
                    assert!(metadata > 0, "{what} repeat {k}: {d:?}");
                    assert_eq!(d.forks, 1, "{what} repeat {k}: the fork follows the metadata");
                } else {
                    assert_eq!((metadata, d.forks), (0, 0), "{what} repeat {k}: {d:?}");
                }
            }
            // A changed graph: exactly the prefix (plus the metadata where there is some).
            let d = run(&mut r, 1);
            assert_eq!(d.descriptor_copies, 1, "{what}: {d:?}");
            assert_eq!(d.bytes_copied, ROUTE_PREFIX_BYTES as u64 + metadata, "{what}: {d:?}");
            assert_eq!(d.forks, 1, "{what}: a copied prefix is forked after");
        }
    }
}

fn full(arch: Arch, slots: u32) -> DeviceRunner {
    let cfg = RunnerConfig { timeout: Duration::from_secs(10), ..RunnerConfig::small(arch) };
    DeviceRunner::new(cfg.with_launch_slots(slots)).unwrap()
}

fn read(r: &DeviceRunner, at: DevicePtr, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    r.device().copy_dtoh(at, &mut b).unwrap();
    b
}

/// Run k+1 is prepared on another slot while run k is launched (and executing, unless it is
/// already done): its own destination, and run k's run block (epoch, scratch) is byte for byte
/// what it was. Had the two slots shared a destination, run k+1's per-run
/// suffix would have overwritten run k's run block under it; had they shared one staging helper
/// the preparation would have been refused (`SuffixBusy`).
#[test]
fn two_slots_in_flight_never_share_a_destination_and_both_runs_verify() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        let mut r = full(arch, 2);
        let ex = Example::Vector.build(Size::Small).with_variant(Variant::HostBuiltGraph);
        r.register_callable(0, ex.callable.clone()).unwrap();
        r.register_callable(1, ex.callable.clone()).unwrap();
        for _ in 0..3 {
            let a = launch(&mut r, 0, &ex);
            let dst_a = r.launch_slots()[a.slot()].1.unwrap();
            // The run block (epoch, scratch), written synchronously when run k was prepared:
            // the header itself may still be on its way (the stream copy is asynchronous).
            let run_block = dst_a.add(ROUTE_PREFIX_BYTES as u64);
            let before = read(&r, run_block, 64);
            let b = r.prepare(1, ex.args.clone()).unwrap();
            assert_ne!(a.slot(), b.slot());
            let dst_b = r.launch_slots()[b.slot()].1.unwrap();
            assert_ne!(dst_a, dst_b, "{arch:?}: two slots share a destination");
            assert_eq!(read(&r, run_block, 64), before, "{arch:?}: run k's descriptor was torn");
            // Both slots held: a third preparation waits for one to be released.
            assert!(matches!(r.prepare(0, ex.args.clone()), Err(RunError::Busy)));
            // Launching k+1 retires k first (one run at a time on the chip); k's outputs are
            // still read by its own finalize.
            let b = r.launch(b).unwrap();
            let out_a = r.finalize_run(a).unwrap();
            ex.verify(&out_a).unwrap_or_else(|e| panic!("{arch:?} run k: {e}"));
            let out_b = r.finalize_run(b).unwrap();
            ex.verify(&out_b).unwrap_or_else(|e| panic!("{arch:?} run k+1: {e}"));
        }
        r.finalize().unwrap();
    }
}

#[test]
fn launch_slots_are_configurable_and_zero_is_refused() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let cfg = RunnerConfig::small(Arch::A2a3);
    assert_eq!(cfg.launch_slots, 2, "pipelined by default");
    for bad in [0, MAX_LAUNCH_SLOTS + 1] {
        assert!(matches!(
            DeviceRunner::new(cfg.with_launch_slots(bad)),
            Err(RunnerError::Config(_))
        ));
    }
    let mut r = full(Arch::A2a3, 3);
    let ex = Example::Vector.build(Size::Small);
    r.register_callable(0, ex.callable.clone()).unwrap();
    let held: Vec<_> = (0..3).map(|_| r.prepare(0, ex.args.clone()).unwrap()).collect();
    assert_eq!(held.iter().map(|p| p.slot()).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(matches!(r.prepare(0, ex.args.clone()), Err(RunError::Busy)));
    drop(held);
    ex.verify(&r.run(0, ex.args.clone()).unwrap()).unwrap();
}

/// Device and pinned memory of the runner's device.
/// Device memory in use (less what copy engines hold: an engine creates its queue on its first
/// copy and keeps it, with its context memory, for the device's life, and which engines a run's
/// copies land on depends on what else is copying at that moment) and live pinned bytes.
fn holdings(r: &DeviceRunner) -> (u64, u64) {
    let d = r.device();
    let engines = d.copy_engine_queues() as u64 * ferry_sim::device::DEFAULT_QUEUE_CONTEXT_BYTES;
    (d.memory().used() - engines, d.pinned_stats().live_bytes)
}

/// The holdings once they are back to `base`, or what they are after a bounded wait (memory a
/// finished run's entry closures still hold goes when their chip threads let go of them).
fn settled(r: &DeviceRunner, base: (u64, u64)) -> (u64, u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = holdings(r);
        if now == base || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn seen(r: &DeviceRunner) -> Vec<u64> {
    FaultPoint::ALL.iter().map(|&p| r.device().faults().seen(p)).collect()
}

/// Fault injection on each step of slot 2 (its preparation and launch, which also retires slot
/// 1's run from its slot) while slot 1's run is launched and not finalized (and executing, for
/// every point but `Launch`, whose injections wait for slot 1's device work so that they cannot
/// hit slot 1's own entries): slot 1's run
/// verifies, slot 2's failure is the typed error carrying the injected fault, device and pinned
/// memory come back to what they were, and the runner's next runs verify. (The runtime sweep in
/// `faults.rs` also checks threads and files; those are the process's and this binary's tests
/// run side by side, so here only the device's own holdings are compared.)
fn sweep_second_slot(all: bool) {
    for arch in Arch::ALL {
        for variant in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            let what = format!("{arch:?} {variant:?}");
            let mut r = full(arch, 2);
            let ex = Example::Vector.build(Size::Small).with_variant(variant);
            r.register_callable(0, ex.callable.clone()).unwrap();
            r.register_callable(1, ex.callable.clone()).unwrap();
            // Warm both slots, then count slot 2's operations in a clean pass.
            let pass = |r: &mut DeviceRunner| -> (RunResult2, RunResult2) {
                let a = launch(r, 0, &ex);
                let b = r.prepare(1, ex.args.clone()).and_then(|p| r.launch(p));
                r.device().faults().clear();
                let out_a = r.finalize_run(a);
                (out_a, b.and_then(|b| r.finalize_run(b)))
            };
            for _ in 0..2 {
                let (a, b) = pass(&mut r);
                ex.verify(&a.unwrap()).unwrap();
                ex.verify(&b.unwrap()).unwrap();
            }
            let base = holdings(&r);
            // Slot 2's steps: from after slot 1's launch to slot 2's launch.
            let mut a = launch(&mut r, 0, &ex);
            // Slot 1's own entries start the chip's cores from their stream threads (Launch
            // operations of their own): counted once slot 1's device work is done.
            r.wait(&mut a).unwrap();
            let s0 = seen(&r);
            let b = launch(&mut r, 1, &ex);
            let s1 = seen(&r);
            ex.verify(&r.finalize_run(a).unwrap()).unwrap();
            ex.verify(&r.finalize_run(b).unwrap()).unwrap();
            let mut injected = 0;
            for (i, &point) in FaultPoint::ALL.iter().enumerate() {
                let total = s1[i] - s0[i];
                let picks: Vec<u64> = if total == 0 {
                    Vec::new()
                } else if all {
                    (1..=total).collect()
                } else {
                    let mut v = vec![1, total.div_ceil(2), total];
                    v.retain(|&k| k > 0);
                    v.dedup();
                    v
                };
                for k in picks {
                    if !all && point == FaultPoint::Launch && k > 1 {
                        // The AICore entry's own start of the cores: its failure is seen only at
                        // the schedulers' 10 s core deadline (as in faults.rs); in the stress run.
                        continue;
                    }
                    let label = format!("{what} {point:?} #{k}/{total}");
                    let mut a = launch(&mut r, 0, &ex);
                    if point == FaultPoint::Launch {
                        // Otherwise the armed launch could be one of slot 1's own (above).
                        r.wait(&mut a).unwrap();
                    }
                    r.device().faults().fail_nth(point, k);
                    let b = r.prepare(1, ex.args.clone()).and_then(|p| r.launch(p));
                    // A launched run starts its cores from a stream thread, after `launch`
                    // returned: disarm only once the armed occurrence has happened (the 60 s
                    // bound is a hang guard for an occurrence that never comes).
                    let t0 = std::time::Instant::now();
                    while r.device().faults().armed() > 0 && t0.elapsed().as_secs() < 60 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    r.device().faults().clear();
                    let out_a = r.finalize_run(a);
                    let out_a = out_a.unwrap_or_else(|e| panic!("{label}: slot 1's run: {e}"));
                    ex.verify(&out_a).unwrap_or_else(|e| panic!("{label}: slot 1's run: {e}"));
                    let b = b.and_then(|b| r.finalize_run(b));
                    match b {
                        Ok(out) => {
                            // Only an absorbed failure may let slot 2 succeed: slot 1's failed
                            // completion boundary, discharged (docs/design/launch.md).
                            assert_eq!(point, FaultPoint::Synchronize, "{label}: swallowed");
                            ex.verify(&out).unwrap_or_else(|e| panic!("{label}: {e}"));
                        }
                        Err(e) => {
                            assert!(carries_injected(&e), "{label}: untyped cause: {e:?}");
                            injected += 1;
                        }
                    }
                    let after = (0..2).map(|_| r.run(1, ex.args.clone()));
                    for out in after {
                        let out = out.unwrap_or_else(|e| panic!("{label}: runner unusable: {e}"));
                        ex.verify(&out).unwrap_or_else(|e| panic!("{label}: after: {e}"));
                    }
                    // Both slots again (the fault may have hit either's staging).
                    let (a, b) = pass(&mut r);
                    ex.verify(&a.unwrap()).unwrap_or_else(|e| panic!("{label}: after: {e}"));
                    ex.verify(&b.unwrap()).unwrap_or_else(|e| panic!("{label}: after: {e}"));
                    assert_eq!(settled(&r, base), base, "{label}: leaked (device, pinned) bytes");
                }
            }
            assert!(injected > 0, "{what}: no injection failed slot 2");
            r.finalize().unwrap();
        }
    }
}

type RunResult2 = Result<RunOutput, RunError>;

fn launch(r: &mut DeviceRunner, id: u32, ex: &ExampleRun) -> LaunchedRun {
    let p = r.prepare(id, ex.args.clone()).unwrap();
    r.launch(p).unwrap()
}

#[test]
fn faults_on_the_second_slot_leave_the_first_run_correct_and_the_runner_usable() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    sweep_second_slot(false);
}

#[test]
#[ignore = "stress: every occurrence, including the launches that cost the 10 s core deadline"]
fn stress_faults_on_every_occurrence_of_the_second_slot() {
    sweep_second_slot(true);
}

/// Whether `e`'s chain of typed sources holds an injected fault: a driver error, or a stream
/// error naming it (the streams carry a failed body's message, as a driver's do).
fn carries_injected(e: &RunError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = match e {
        // Transparent: the driver's error is the run's.
        RunError::Device(d) => Some(d),
        e => Some(e),
    };
    while let Some(c) = cause {
        match c.downcast_ref::<ferry_sim::DeviceError>() {
            Some(ferry_sim::DeviceError::Injected(_)) => return true,
            Some(ferry_sim::DeviceError::Kernel { message, .. }) => {
                return message.contains("injected fault")
            }
            _ => {}
        }
        cause = c.source();
    }
    false
}
