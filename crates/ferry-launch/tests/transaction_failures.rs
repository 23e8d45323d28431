//! What the launch transaction's failures leave behind (docs/design/launch.md): a refused
//! publication leaves nothing on a stream, a failed run leaves no prefix trusted as resident, a
//! failed start record is partial and keeps its owner, and a normal retirement waits on exactly
//! the run's two completion boundaries. Each is observed through device counters, fault-point
//! counts and device memory; nothing here depends on timing.
use ferry_abi::launch::KernelArgs;
use ferry_launch::transaction::{LaunchError, PrepareError, PublishError, RetirePath};
use ferry_launch::{
    EntryKernels, LaunchDescriptor, LaunchStaging, MetadataRegion, RunStreams, TransactionState,
};
use ferry_sim::counters::Counter;
use ferry_sim::fault::FaultPoint;
use ferry_sim::{Arch, Device, DeviceError, DevicePtr, Event, Platform, PlatformBuilder};
use std::sync::mpsc;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

struct Rig {
    _p: Platform,
    dev: Device,
    streams: RunStreams<Device>,
    slot: LaunchStaging<Device>,
}

fn rig(arch: Arch) -> Rig {
    let p = PlatformBuilder::new(arch).hbm_bytes(16 << 20).build().unwrap();
    let dev = p.device(0).unwrap().clone();
    let streams = RunStreams::new(&dev).unwrap();
    let slot = LaunchStaging::new(&dev, 0);
    Rig { _p: p, dev, streams, slot }
}

fn desc(fill: u8, len: usize) -> LaunchDescriptor {
    LaunchDescriptor::new(vec![fill; len], len).unwrap()
}

fn args() -> KernelArgs {
    KernelArgs::new(0, 0x1234)
}

fn read(dev: &Device, p: DevicePtr, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    dev.copy_dtoh(p, &mut out).unwrap();
    out
}

/// A caller-owned stream blocked by a kernel until the returned sender sends (or drops), and
/// an event recorded after that kernel: a dependency that is never satisfied while the test
/// holds the sender.
fn gated_caller(dev: &Device) -> (ferry_sim::Stream, Event, mpsc::Sender<()>) {
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
    let ev = Event::new();
    s.record_event(&ev).unwrap();
    (s, ev, tx)
}

/// Everything a publication can put on a stream: copies, event records, launches, and stream
/// waits (counted at their fault point, which sees every call).
fn stream_work(dev: &Device) -> [u64; 4] {
    [
        dev.counter(Counter::Copies),
        dev.counter(Counter::EventRecords),
        dev.counter(Counter::Launches),
        dev.faults().seen(FaultPoint::StreamWait),
    ]
}

/// Every refusal of `queue_run_entry` (nothing prepared, already published, a live
/// predecessor on the slot, a source too small for the staged metadata) leaves the streams as
/// they were, the caller's dependency included: it is never ordered onto the AICPU stream of a
/// run that was refused. The caller's gate stays closed throughout, so a wait left behind
/// would also hold the runs retired here.
#[test]
fn a_refused_publication_leaves_no_wait_or_event_on_the_streams() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let (caller, dep, gate) = gated_caller(&r.dev);
    let refused = |r: &mut Rig, want: PublishError| {
        let before = stream_work(&r.dev);
        assert_eq!(r.slot.queue_run_entry(&r.streams, Some(&dep)), Err(want));
        assert_eq!(stream_work(&r.dev), before, "a refused publication queued stream work");
    };

    refused(&mut r, PublishError::NotStarted);
    let first = r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    r.slot.publish_for_launch(&r.streams).unwrap();
    refused(&mut r, PublishError::AlreadyPublished { run: first });
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    let second = r.slot.prepare_runtime_args(&desc(2, 64), args()).unwrap();
    refused(&mut r, PublishError::SlotBusy { predecessor: first });
    assert_eq!(r.slot.state(), TransactionState::Prepared, "the refused run is untouched");

    // The live run retires on its own boundaries: nothing of the refusals holds its streams.
    let done = r.slot.finish_run(T).unwrap();
    assert_eq!((done.run, done.path, done.run_error), (first, RetirePath::Normal, None));
    let m = r.dev.malloc(64).unwrap();
    r.slot.stage_launch_metadata(vec![MetadataRegion::new(m, vec![3; 64])]).unwrap();
    refused(&mut r, PublishError::CapacityExceeded { required: 128, capacity: 64 });
    r.slot.stage_launch_metadata(Vec::new()).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    let done = r.slot.finish_run(T).unwrap();
    assert_eq!((done.run, done.path, done.run_error), (second, RetirePath::Normal, None));
    assert_eq!(read(&r.dev, r.slot.destination().unwrap(), 64), vec![2; 64]);
    gate.send(()).unwrap();
    caller.synchronize().unwrap();
}

/// A run whose entry fails after its descriptor copy was accepted (here it also scribbles over
/// the descriptor's device bytes, as a failing kernel may): the destination's content is
/// unknown, so the next run with the identical prefix copies it again instead of trusting it as
/// resident, and the device holds the prefix once that run retires. Both entries, in turn.
#[test]
fn a_failed_run_leaves_no_prefix_trusted_as_resident() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    for aicore_fails in [false, true] {
        let mut r = rig(Arch::A5);
        let d = desc(4, 256);
        r.slot.prepare_runtime_args(&d, args()).unwrap();
        let dst = r.slot.destination().unwrap();
        let scribble = move |dev: &Device, runtime_args: u64| -> Result<(), String> {
            let p = dev.translate(DevicePtr(runtime_args), 256).map_err(|e| e.to_string())?;
            // SAFETY: `translate` checked 256 bytes of a live allocation (the slot's
            // destination, held until teardown); the descriptor copy into them completed before
            // this entry (stream order and the entry fork), and nothing else touches them while
            // the entry runs.
            unsafe { std::ptr::write_bytes(p, 0xdd, 256) };
            Err("the entry scribbled over its descriptor and failed".into())
        };
        let kernels = if aicore_fails {
            EntryKernels::new(move |dev, a| scribble(dev, a.runtime_args), |_, _| Ok(()))
        } else {
            EntryKernels::new(|_, _| Ok(()), move |dev, k| scribble(dev, k.runtime_args))
        };
        let first = r.slot.queue_run_entry(&r.streams, None).unwrap();
        assert!(first.descriptor_copied);
        r.slot.launch(&r.streams, kernels).unwrap();
        let done = r.slot.finish_run(T).unwrap();
        let err = done.run_error.expect("the run failed");
        assert!(matches!(err.source_as(), Some(DeviceError::Kernel { .. })), "{err}");
        assert_eq!(read(&r.dev, dst, 256), vec![0xdd; 256], "aicore fails: {aicore_fails}");

        r.slot.prepare_runtime_args(&d, args()).unwrap();
        let next = r.slot.queue_run_entry(&r.streams, None).unwrap();
        assert!(next.descriptor_copied, "aicore fails: {aicore_fails}: the prefix was trusted");
        assert_eq!(next.bytes_copied, 256);
        r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
        let done = r.slot.finish_run(T).unwrap();
        assert_eq!((done.path, done.run_error), (RetirePath::Normal, None));
        assert_eq!(read(&r.dev, dst, 256), vec![4; 256], "aicore fails: {aicore_fails}");
        assert_eq!(r.slot.stats().descriptor_copies, 2);
    }
}

/// The run's start event is its first own stream operation after the waits that order it: when
/// recording it fails, the run is `Partial` and keeps its execution owner (what was queued
/// before it is uncertain), refuses launch and another preparation, and retires through the
/// bounded discharge; the slot then runs the next run normally.
#[test]
fn failed_start_record_is_partial_and_keeps_its_execution_owner() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let run = r.slot.prepare_runtime_args(&desc(5, 64), args()).unwrap();
    // EventRecord #1 is the run's start event.
    r.dev.faults().fail_nth(FaultPoint::EventRecord, 1);
    let err = r.slot.queue_run_entry(&r.streams, None).unwrap_err();
    assert!(matches!(err, PublishError::StartRecord(_)), "{err}");
    assert_eq!(r.slot.state(), TransactionState::Partial);
    assert_eq!(r.slot.execution_owner(), Some(run));
    assert_eq!(r.slot.launch(&r.streams, EntryKernels::noop()), Err(LaunchError::Partial { run }));
    assert_eq!(
        r.slot.prepare_runtime_args(&desc(6, 64), args()),
        Err(PrepareError::PartialRun { run })
    );
    assert_eq!(r.slot.finish_run(T).unwrap().path, RetirePath::Discharged);
    assert_eq!(r.slot.execution_owner(), None);
    r.slot.prepare_runtime_args(&desc(6, 64), args()).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    assert_eq!(r.slot.finish_run(T).unwrap().path, RetirePath::Normal);
}

/// A launched run retires on its own two completion boundaries: one counted event
/// synchronisation each (the AICPU stream's, then the AICore stream's), no stream
/// synchronisation, and both boundaries reached when it returns.
#[test]
fn normal_retirement_synchronizes_on_both_completion_boundaries() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    for arch in [Arch::A2a3, Arch::A5] {
        let mut r = rig(arch);
        r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
        r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
        let ev = r.slot.run_events().expect("launched");
        let syncs = r.dev.counter(Counter::Synchronizes);
        let done = r.slot.finish_run(T).unwrap();
        assert_eq!(done.path, RetirePath::Normal, "{arch:?}");
        assert_eq!(
            r.dev.counter(Counter::Synchronizes) - syncs,
            2,
            "{arch:?}: one synchronisation per completion boundary"
        );
        assert!(ev.completed(), "{arch:?}: retired before both boundaries were reached");
    }
}
