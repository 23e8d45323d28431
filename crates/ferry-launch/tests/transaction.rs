//! The launch transaction of docs/design/launch.md, one test per rule, driven by the sim's fault injection.
use ferry_abi::launch::KernelArgs;
use ferry_launch::transaction::{
    CopyTarget, DiagnosticsError, FinishError, LaunchError, LaunchProgress, PrepareError,
    PublishError, RetirePath, StageError, TeardownError,
};
use ferry_launch::{
    EntryKernels, LaunchDescriptor, LaunchStaging, MetadataRegion, RunStreams, TransactionState,
};
use ferry_sim::counters::Counter;
use ferry_sim::fault::{FaultPoint, InjectedFault};
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
    let mut image = vec![fill; len + 16];
    image[len..].fill(0xee); // past the prefix: never published
    LaunchDescriptor::new(image, len).unwrap()
}

fn args() -> KernelArgs {
    KernelArgs::new(0, 0x1234)
}

fn read(dev: &Device, p: DevicePtr, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    dev.copy_dtoh(p, &mut out).unwrap();
    out
}

/// A device buffer filled with `fill`.
fn sentinel(dev: &Device, len: usize, fill: u8) -> DevicePtr {
    let p = dev.malloc(len as u64).unwrap();
    dev.copy_htod(&vec![fill; len], p).unwrap();
    p
}

/// A caller-owned stream blocked by a kernel until the returned sender sends (or drops), and
/// an event recorded after that kernel.
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

fn counts(dev: &Device) -> (u64, u64, u64) {
    (
        dev.counter(Counter::Copies),
        dev.counter(Counter::EventRecords),
        dev.counter(Counter::Launches),
    )
}

#[test]
fn prepare_reserves_and_snapshots_without_stream_work() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    for arch in [Arch::A2a3, Arch::A5] {
        let mut r = rig(arch);
        let before = counts(&r.dev);
        let run = r.slot.prepare_runtime_args(&desc(3, 256), args()).unwrap();
        assert_eq!(r.slot.state(), TransactionState::Prepared);
        assert_eq!(r.slot.run(), Some(run));
        assert_eq!(r.slot.snapshot(), Some(&[3u8; 256][..]));
        assert_eq!(r.slot.source_capacity(), 256);
        let dst = r.slot.destination().unwrap();
        let payload = r.slot.payload().unwrap();
        assert_eq!(payload.runtime_args, dst.addr());
        assert_eq!(payload.regs, 0x1234);
        assert!(!r.slot.runtime_args_published());
        assert_eq!(r.slot.execution_owner(), None);
        assert_eq!(counts(&r.dev), before, "prepare submits nothing");
        assert_eq!(r.dev.pinned_stats().live_bytes, 256);
    }
}

#[test]
fn publish_queues_metadata_in_order_at_the_suffix_then_the_descriptor_then_the_fork() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    for arch in [Arch::A2a3, Arch::A5] {
        let mut r = rig(arch);
        let shared = sentinel(&r.dev, 16, 0);
        let b = sentinel(&r.dev, 8, 0);
        r.slot
            .stage_launch_metadata(vec![
                MetadataRegion::new(shared, vec![0xaa; 16]),
                MetadataRegion::new(b, vec![0xbb; 8]),
                MetadataRegion::new(shared, vec![0xcc; 16]), // depends on the first: must win
            ])
            .unwrap();
        r.slot.prepare_runtime_args(&desc(7, 128), args()).unwrap();
        assert_eq!(r.slot.source_capacity(), 128 + 40, "prefix plus the metadata regions");
        let dst = r.slot.destination().unwrap();
        let before = counts(&r.dev);
        let rep = r.slot.queue_run_entry(&r.streams, None).unwrap();
        assert_eq!(r.slot.state(), TransactionState::Published);
        assert!(r.slot.runtime_args_published());
        assert!(rep.descriptor_copied && rep.forked);
        assert_eq!(rep.bytes_copied, 128 + 40);
        // Metadata lives in the source's suffix, disjoint from the descriptor prefix.
        assert_eq!(rep.metadata, vec![(128, 16), (144, 8), (152, 16)]);
        let (c, e, l) = counts(&r.dev);
        // Four copies; the run's start event and the fork; no kernel.
        assert_eq!((c - before.0, e - before.1, l - before.2), (4, 2, 0));
        assert!(r.slot.staged_metadata().is_empty(), "a published batch is consumed");
        r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
        let done = r.slot.finish_run(T).unwrap();
        assert_eq!(done.path, RetirePath::Normal);
        assert_eq!(read(&r.dev, shared, 16), vec![0xcc; 16], "dependency order kept");
        assert_eq!(read(&r.dev, b, 8), vec![0xbb; 8]);
        assert_eq!(read(&r.dev, dst, 128), vec![7; 128]);
    }
}

#[test]
fn metadata_overlapping_the_descriptor_is_overwritten_because_the_descriptor_goes_last() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    let dst = r.slot.destination().unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();
    r.slot.stage_launch_metadata(vec![MetadataRegion::new(dst, vec![0x55; 64])]).unwrap();
    r.slot.prepare_runtime_args(&desc(2, 64), args()).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();
    assert_eq!(read(&r.dev, dst, 64), vec![2; 64]);
}

#[test]
fn kernels_run_after_publication_and_fork_and_get_the_payload_by_value() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    for arch in [Arch::A2a3, Arch::A5] {
        let mut r = rig(arch);
        // The caller's stream holds the AICPU stream back, so the descriptor copy is still
        // pending when the kernels are submitted: only the fork can order the AICore entry.
        let (caller, dep, gate) = gated_caller(&r.dev);
        r.slot.prepare_runtime_args(&desc(9, 512), args()).unwrap();
        let dst = r.slot.destination().unwrap();
        r.slot.queue_run_entry(&r.streams, Some(&dep)).unwrap();
        let (tx_core, rx_core) = mpsc::channel();
        let (tx_cpu, rx_cpu) = mpsc::channel();
        let kernels = EntryKernels::new(
            move |d: &Device, a| {
                let p = d.translate(DevicePtr(a.runtime_args), 512).map_err(|e| e.to_string())?;
                // SAFETY: `translate` checked 512 bytes of a live allocation; the descriptor
                // copy that writes them completed before this kernel (entry fork).
                let seen = unsafe { std::slice::from_raw_parts(p, 512) }.to_vec();
                tx_core.send(seen).unwrap();
                Ok(())
            },
            move |_, k| {
                tx_cpu.send(k).unwrap();
                Ok(())
            },
        );
        let receipt = r.slot.launch(&r.streams, kernels).unwrap();
        assert_eq!(Some(receipt.run()), r.slot.run());
        // The caller holds the AICPU stream back, so the fork cannot complete: the AICore
        // stream ends up blocked on it. Wait for that state, or for the AICore entry to report
        // (which it can only do with the wait missing), rather than guess the stream's thread
        // has not run yet.
        while !r.streams.aicore.blocked_on_event() {
            assert!(rx_core.try_recv().is_err(), "the AICore entry ran before the fork");
            std::thread::yield_now();
        }
        assert!(rx_core.try_recv().is_err(), "the AICore entry waits for the fork");
        assert!(!r.streams.aicpu.is_idle(), "the descriptor copy is held behind the caller");
        gate.send(()).unwrap();
        assert_eq!(rx_core.recv().unwrap(), vec![9; 512]);
        let k = rx_cpu.recv().unwrap();
        assert_eq!(k.runtime_args, dst.addr());
        assert_eq!(k.regs, 0x1234);
        assert_eq!(r.slot.finish_run(T).unwrap().path, RetirePath::Normal);
        // The caller's stream stays the caller's: still usable, never synchronized by us.
        caller.synchronize().unwrap();
    }
}

#[test]
fn launch_admits_prepared_or_published_and_missing_preparation_is_not_started() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let before = counts(&r.dev);
    assert_eq!(r.slot.launch(&r.streams, EntryKernels::noop()), Err(LaunchError::NotStarted));
    assert_eq!(counts(&r.dev), before);
    // Prepared: the launch publishes first.
    let run = r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    assert_eq!(r.slot.launch(&r.streams, EntryKernels::noop()).unwrap().run(), run);
    assert!(r.slot.runtime_args_published());
    assert_eq!(
        r.slot.launch(&r.streams, EntryKernels::noop()),
        Err(LaunchError::AlreadyLaunched { run })
    );
    r.slot.finish_run(T).unwrap();
    // Published: launches without publishing again.
    r.slot.prepare_runtime_args(&desc(2, 64), args()).unwrap();
    r.slot.publish_for_launch(&r.streams).unwrap();
    let copies = r.dev.counter(Counter::Copies);
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    assert_eq!(r.dev.counter(Counter::Copies), copies);
    r.slot.finish_run(T).unwrap();
    // A released view is NotStarted again.
    r.slot.release_run_view();
    assert_eq!(r.slot.launch(&r.streams, EntryKernels::noop()), Err(LaunchError::NotStarted));
}

#[test]
fn unchanged_prefix_queues_neither_copy_nor_fork_without_a_caller() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A5);
    let d = desc(4, 1024);
    r.slot.prepare_runtime_args(&d, args()).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();

    r.slot.prepare_runtime_args(&d, args()).unwrap();
    let before = counts(&r.dev);
    let rep = r.slot.queue_run_entry(&r.streams, None).unwrap();
    assert_eq!((rep.bytes_copied, rep.descriptor_copied, rep.forked), (0, false, false));
    // No copy, no fork: only the run's start event.
    let (c, e, l) = counts(&r.dev);
    assert_eq!((c - before.0, e - before.1, l - before.2), (0, 1, 0));
    assert!(r.slot.runtime_args_published(), "identical prefix already resident");
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();

    // With a caller dependency the fork is still queued (the AICore stream must follow it).
    r.slot.prepare_runtime_args(&d, args()).unwrap();
    let dep = Event::new();
    let before = counts(&r.dev);
    let rep = r.slot.queue_run_entry(&r.streams, Some(&dep)).unwrap();
    assert_eq!((rep.bytes_copied, rep.forked), (0, true));
    let (c, e, _) = counts(&r.dev);
    assert_eq!((c - before.0, e - before.1), (0, 2), "the start event and the fork");
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();
    assert_eq!(r.slot.stats().unchanged_prefixes, 2);
}

#[test]
fn failed_descriptor_copy_is_partial_unpublished_and_withdraws_the_payload() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let run = r.slot.prepare_runtime_args(&desc(5, 64), args()).unwrap();
    r.dev.faults().fail_next(FaultPoint::Copy);
    let err = r.slot.queue_run_entry(&r.streams, None).unwrap_err();
    assert!(matches!(err, PublishError::Copy { target: CopyTarget::Descriptor, .. }), "{err}");
    assert_eq!(r.slot.state(), TransactionState::Partial);
    assert!(!r.slot.runtime_args_published());
    assert_eq!(r.slot.payload(), None);
    assert_eq!(r.slot.execution_owner(), Some(run));
    let launches = r.dev.counter(Counter::Launches);
    assert_eq!(r.slot.launch(&r.streams, EntryKernels::noop()), Err(LaunchError::Partial { run }));
    assert_eq!(r.dev.counter(Counter::Launches), launches);
    assert_eq!(
        r.slot.prepare_runtime_args(&desc(6, 64), args()),
        Err(PrepareError::PartialRun { run })
    );
    assert_eq!(r.slot.finish_run(T).unwrap().path, RetirePath::Discharged);
    // The resident prefix is unknown after a failed copy: the next run copies again.
    r.slot.prepare_runtime_args(&desc(5, 64), args()).unwrap();
    assert!(r.slot.queue_run_entry(&r.streams, None).unwrap().descriptor_copied);
}

/// A descriptor copy that fails after the metadata went out: the counters keep the metadata's
/// copy and its bytes, and no descriptor copy.
#[test]
fn failed_descriptor_copy_after_the_metadata_counts_what_was_copied() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let m = sentinel(&r.dev, 32, 0);
    r.slot.stage_launch_metadata(vec![MetadataRegion::new(m, vec![1; 32])]).unwrap();
    r.slot.prepare_runtime_args(&desc(5, 64), args()).unwrap();
    // Copy #1 is the metadata region, #2 the descriptor.
    r.dev.faults().fail_nth(FaultPoint::Copy, 2);
    let err = r.slot.queue_run_entry(&r.streams, None).unwrap_err();
    assert!(matches!(err, PublishError::Copy { target: CopyTarget::Descriptor, .. }), "{err}");
    let st = r.slot.stats();
    assert_eq!((st.metadata_copies, st.descriptor_copies, st.bytes_copied), (1, 0, 32));
    assert_eq!(r.slot.finish_run(T).unwrap().path, RetirePath::Discharged);
    // A clean publication afterwards adds its own: metadata and descriptor, 32 + 64 bytes.
    r.slot.stage_launch_metadata(vec![MetadataRegion::new(m, vec![2; 32])]).unwrap();
    r.slot.prepare_runtime_args(&desc(6, 64), args()).unwrap();
    let rep = r.slot.queue_run_entry(&r.streams, None).unwrap();
    assert_eq!(rep.bytes_copied, 96);
    let st = r.slot.stats();
    assert_eq!((st.metadata_copies, st.descriptor_copies, st.bytes_copied), (2, 1, 128));
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();
}

#[test]
fn failed_fork_record_is_partial_and_keeps_its_execution_owner() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let run = r.slot.prepare_runtime_args(&desc(5, 64), args()).unwrap();
    // EventRecord #1 is the run's start event, #2 the fork.
    r.dev.faults().fail_nth(FaultPoint::EventRecord, 2);
    let err = r.slot.publish_for_launch(&r.streams).unwrap_err();
    assert!(matches!(err, PublishError::ForkRecord(_)), "{err}");
    assert_eq!(r.slot.state(), TransactionState::Partial);
    assert!(r.slot.runtime_args_published(), "the copy was accepted into stream order");
    assert_eq!(r.slot.execution_owner(), Some(run));
    assert_eq!(r.slot.launch(&r.streams, EntryKernels::noop()), Err(LaunchError::Partial { run }));
    assert!(matches!(r.slot.teardown(), Err(TeardownError::LiveRun { .. })));
    assert_eq!(r.slot.finish_run(T).unwrap().path, RetirePath::Discharged);
    assert_eq!(r.slot.execution_owner(), None);
}

#[test]
fn failed_fork_wait_is_partial_and_keeps_its_execution_owner() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A5);
    let run = r.slot.prepare_runtime_args(&desc(5, 64), args()).unwrap();
    r.dev.faults().fail_next(FaultPoint::StreamWait);
    let err = r.slot.publish_for_launch(&r.streams).unwrap_err();
    assert!(matches!(err, PublishError::ForkWait(_)), "{err}");
    assert_eq!(r.slot.state(), TransactionState::Partial);
    assert_eq!(r.slot.execution_owner(), Some(run));
    assert_eq!(
        r.slot.prepare_runtime_args(&desc(6, 64), args()),
        Err(PrepareError::PartialRun { run })
    );
    assert_eq!(r.slot.finish_run(T).unwrap().path, RetirePath::Discharged);
}

#[test]
fn failed_entry_submission_aicore_is_not_started_aicpu_is_partial() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let run = r.slot.prepare_runtime_args(&desc(5, 64), args()).unwrap();
    r.slot.publish_for_launch(&r.streams).unwrap();
    let launches = r.dev.counter(Counter::Launches);
    r.dev.faults().fail_next(FaultPoint::Launch);
    let err = r.slot.launch(&r.streams, EntryKernels::noop()).unwrap_err();
    assert!(matches!(err, LaunchError::Submit { progress: LaunchProgress::NotStarted, .. }));
    assert_eq!(r.dev.counter(Counter::Launches), launches, "AICore goes first: nothing queued");
    assert_eq!(r.slot.state(), TransactionState::Published, "launchable again");
    // AICore accepted, AICPU refused: Partial, owner kept.
    r.dev.faults().fail_nth(FaultPoint::Launch, 2);
    let err = r.slot.launch(&r.streams, EntryKernels::noop()).unwrap_err();
    assert!(matches!(err, LaunchError::Submit { progress: LaunchProgress::Partial, .. }));
    assert_eq!(r.dev.counter(Counter::Launches), launches + 1, "only the AICore entry queued");
    assert_eq!(r.slot.state(), TransactionState::Partial);
    assert_eq!(r.slot.execution_owner(), Some(run));
    assert_eq!(r.slot.finish_run(T).unwrap().path, RetirePath::Discharged);
}

#[test]
fn first_metadata_failure_stops_later_metadata_and_descriptor_writes() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let regions: Vec<_> = (0..3).map(|_| sentinel(&r.dev, 32, 0x11)).collect();
    r.slot
        .stage_launch_metadata(
            regions
                .iter()
                .zip([0xa0u8, 0xa1, 0xa2])
                .map(|(&p, b)| MetadataRegion::new(p, vec![b; 32]))
                .collect(),
        )
        .unwrap();
    let run = r.slot.prepare_runtime_args(&desc(8, 64), args()).unwrap();
    let dst = r.slot.destination().unwrap();
    r.dev.copy_htod(&[0x22; 64], dst).unwrap();
    let copies = r.dev.counter(Counter::Copies);
    r.dev.faults().fail_nth(FaultPoint::Copy, 2);
    let err = r.slot.queue_run_entry(&r.streams, None).unwrap_err();
    assert!(matches!(err, PublishError::Copy { target: CopyTarget::Metadata(1), .. }), "{err}");
    assert_eq!(r.dev.counter(Counter::Copies), copies + 1, "only the first region was queued");
    assert_eq!(r.slot.state(), TransactionState::Partial);
    assert!(!r.slot.runtime_args_published());
    assert_eq!(r.slot.payload(), None);
    assert_eq!(r.slot.execution_owner(), Some(run), "region 0's copy may still read the source");
    r.slot.finish_run(T).unwrap();
    assert_eq!(read(&r.dev, regions[0], 32), vec![0xa0; 32]);
    assert_eq!(read(&r.dev, regions[1], 32), vec![0x11; 32]);
    assert_eq!(read(&r.dev, regions[2], 32), vec![0x11; 32]);
    assert_eq!(read(&r.dev, dst, 64), vec![0x22; 64]);
}

#[test]
fn repeated_publish_is_rejected_without_a_copy() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let run = r.slot.prepare_runtime_args(&desc(5, 64), args()).unwrap();
    r.slot.publish_for_launch(&r.streams).unwrap();
    let before = counts(&r.dev);
    assert_eq!(r.slot.publish_for_launch(&r.streams), Err(PublishError::AlreadyPublished { run }));
    assert_eq!(
        r.slot.queue_run_entry(&r.streams, Some(&Event::new())),
        Err(PublishError::AlreadyPublished { run })
    );
    assert_eq!(counts(&r.dev), before);
    assert_eq!(r.slot.stats().publishes, 1);
    r.slot.finish_run(T).unwrap();
}

#[test]
fn unpublished_descriptor_rejects_another_preparation_without_changing_it() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let run = r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    let (dst, cap, pinned) = (r.slot.destination(), r.slot.source_capacity(), r.dev.pinned_stats());
    assert_eq!(
        r.slot.prepare_runtime_args(&desc(2, 4096), args()),
        Err(PrepareError::Unpublished { run })
    );
    assert_eq!(r.slot.snapshot(), Some(&[1u8; 64][..]));
    assert_eq!(r.slot.run(), Some(run));
    assert_eq!((r.slot.destination(), r.slot.source_capacity()), (dst, cap));
    assert_eq!(r.dev.pinned_stats(), pinned, "allocator untouched");
}

#[test]
fn release_run_view_discards_only_the_per_run_view() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let (_caller, dep, gate) = gated_caller(&r.dev);
    let run = r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    r.slot.queue_run_entry(&r.streams, Some(&dep)).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    let (dst, cap, pinned) = (r.slot.destination(), r.slot.source_capacity(), r.dev.pinned_stats());
    assert_eq!(r.slot.release_run_view(), Some(run));
    assert_eq!(r.slot.state(), TransactionState::NotStarted);
    assert_eq!(r.slot.snapshot(), None);
    assert!(!r.slot.runtime_args_published());
    assert_eq!((r.slot.destination(), r.slot.source_capacity()), (dst, cap));
    assert_eq!(r.dev.pinned_stats(), pinned);
    assert_eq!(r.slot.execution_owner(), Some(run), "the run still owns its execution");
    gate.send(()).unwrap();
    assert_eq!(r.slot.finish_run(T).unwrap().run, run);
}

#[test]
fn take_transfers_snapshots_and_status_and_leaves_the_source_unable_to_publish() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A5);
    let m = sentinel(&r.dev, 8, 0);
    r.slot.stage_launch_metadata(vec![MetadataRegion::new(m, vec![3; 8])]).unwrap();
    let run = r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    let mut moved = r.slot.take();
    assert!(r.slot.is_moved_from());
    assert_eq!(r.slot.state(), TransactionState::NotStarted);
    assert_eq!(moved.state(), TransactionState::Prepared);
    assert_eq!(moved.snapshot(), Some(&[1u8; 64][..]));
    assert_eq!(moved.staged_metadata().len(), 1);
    let before = counts(&r.dev);
    assert_eq!(r.slot.publish_for_launch(&r.streams), Err(PublishError::Moved));
    assert_eq!(r.slot.launch(&r.streams, EntryKernels::noop()), Err(LaunchError::Moved));
    assert_eq!(r.slot.prepare_runtime_args(&desc(1, 64), args()), Err(PrepareError::Moved));
    assert_eq!(r.slot.stage_launch_metadata(vec![]), Err(StageError::Moved));
    assert_eq!(counts(&r.dev), before);
    // Publication status moves too.
    moved.publish_for_launch(&r.streams).unwrap();
    let mut again = moved.take();
    assert_eq!(again.state(), TransactionState::Published);
    assert!(again.runtime_args_published());
    assert_eq!(again.execution_owner(), Some(run));
    assert_eq!(moved.launch(&r.streams, EntryKernels::noop()), Err(LaunchError::Moved));
    again.launch(&r.streams, EntryKernels::noop()).unwrap();
    again.finish_run(T).unwrap();
    assert_eq!(read(&r.dev, m, 8), vec![3; 8]);
}

#[test]
fn slot_reservation_keeps_a_successor_from_overwriting_a_live_pinned_source() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let (_caller, dep, gate) = gated_caller(&r.dev);
    let first = r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    let dst = r.slot.destination().unwrap();
    r.slot.queue_run_entry(&r.streams, Some(&dep)).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    // A successor may snapshot (host memory only) but not publish over the live source.
    let second = r.slot.prepare_runtime_args(&desc(2, 64), args()).unwrap();
    let before = counts(&r.dev);
    assert_eq!(
        r.slot.publish_for_launch(&r.streams),
        Err(PublishError::SlotBusy { predecessor: first })
    );
    assert_eq!(counts(&r.dev), before);
    gate.send(()).unwrap();
    r.slot.finish_run(T).unwrap();
    assert_eq!(read(&r.dev, dst, 64), vec![1; 64], "the first run's bytes were not torn");
    assert_eq!(r.slot.run(), Some(second));
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();
    assert_eq!(read(&r.dev, dst, 64), vec![2; 64]);
}

#[test]
fn pinned_capacity_grows_only_without_a_live_predecessor() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let first = r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    assert_eq!(
        r.slot.prepare_runtime_args(&desc(2, 256), args()),
        Err(PrepareError::PredecessorLive { predecessor: first, required: 256 })
    );
    // Metadata that outgrows the source alone (the destination still fits) is refused too.
    let m = sentinel(&r.dev, 32, 0);
    r.slot.stage_launch_metadata(vec![MetadataRegion::new(m, vec![1; 32])]).unwrap();
    assert_eq!(
        r.slot.prepare_runtime_args(&desc(2, 64), args()),
        Err(PrepareError::PredecessorLive { predecessor: first, required: 96 })
    );
    r.slot.stage_launch_metadata(Vec::new()).unwrap();
    assert_eq!(r.slot.source_capacity(), 64);
    assert_eq!(r.slot.run(), Some(first), "the refused preparation changed nothing");
    r.slot.finish_run(T).unwrap();
    r.slot.prepare_runtime_args(&desc(2, 256), args()).unwrap();
    assert_eq!(r.slot.source_capacity(), 256);
    let s = r.dev.pinned_stats();
    assert_eq!((s.allocs, s.frees, s.live_bytes), (2, 1, 256));
    // A smaller run reuses the larger source.
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();
    r.slot.prepare_runtime_args(&desc(3, 32), args()).unwrap();
    assert_eq!(r.slot.source_capacity(), 256);
    assert_eq!(r.slot.stats().growths, 2);
}

#[test]
fn growth_frees_the_retired_source_first_and_a_failed_growth_can_be_retried() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A5);
    r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();
    let before = counts(&r.dev);

    // A failed free keeps the retired source owned.
    r.dev.faults().fail_next(FaultPoint::HostFree);
    let err = r.slot.prepare_runtime_args(&desc(2, 512), args()).unwrap_err();
    assert!(matches!(err, PrepareError::FreeRetiredSource(_)), "{err}");
    assert_eq!(r.slot.source_capacity(), 64);
    assert_eq!(r.dev.pinned_stats().live_bytes, 64);

    // The retired source is freed before the replacement is allocated.
    r.dev.faults().fail_next(FaultPoint::HostAlloc);
    let err = r.slot.prepare_runtime_args(&desc(2, 512), args()).unwrap_err();
    assert!(matches!(err, PrepareError::PinnedAlloc { bytes: 512, .. }), "{err}");
    assert_eq!(r.slot.source_capacity(), 0);
    assert_eq!(r.dev.pinned_stats().live_bytes, 0);

    // Retry, with no device submission in between.
    assert_eq!(counts(&r.dev), before);
    r.slot.prepare_runtime_args(&desc(2, 512), args()).unwrap();
    assert_eq!(r.slot.source_capacity(), 512);
    assert_eq!(r.dev.pinned_stats().live_bytes, 512);
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();
    assert_eq!(read(&r.dev, r.slot.destination().unwrap(), 512), vec![2; 512]);
}

#[test]
fn fatal_abandonment_keeps_the_pinned_source_allocated() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let (_caller, dep, gate) = gated_caller(&r.dev);
    r.slot.prepare_runtime_args(&desc(1, 4096), args()).unwrap();
    r.slot.queue_run_entry(&r.streams, Some(&dep)).unwrap(); // copy still pending: a DMA reader
    assert_eq!(r.slot.abandon(), 4096);
    let s = r.dev.pinned_stats();
    assert_eq!((s.live_bytes, s.leaked_bytes, s.frees), (4096, 4096, 0));
    assert_eq!(r.slot.prepare_runtime_args(&desc(1, 64), args()), Err(PrepareError::Abandoned));
    assert_eq!(r.slot.launch(&r.streams, EntryKernels::noop()), Err(LaunchError::Abandoned));
    // The pending copy still reads valid memory when it runs.
    gate.send(()).unwrap();
    r.streams.aicpu.synchronize().unwrap();
    drop(r.slot);
    assert_eq!(r.dev.pinned_stats().live_bytes, 4096, "kept for the rest of the process");
}

#[test]
fn normal_run_retires_on_its_two_boundaries_and_a_failed_boundary_is_discharged() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let run = r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    let done = r.slot.finish_run(T).unwrap();
    assert_eq!((done.run, done.path, done.run_error), (run, RetirePath::Normal, None));
    assert_eq!(r.slot.finish_run(T), Err(FinishError::NoLiveRun));

    r.slot.prepare_runtime_args(&desc(2, 64), args()).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.dev.faults().fail_next(FaultPoint::Synchronize);
    assert_eq!(r.slot.finish_run(T).unwrap().path, RetirePath::Discharged);
    assert!(!r.slot.is_quarantined());
}

#[test]
fn partial_run_failed_discharge_quarantines_its_resources() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let (_caller, dep, gate) = gated_caller(&r.dev);
    let run = r.slot.prepare_runtime_args(&desc(1, 256), args()).unwrap();
    // StreamWait #1 orders the caller dependency; #2 is the AICore stream's fork wait.
    r.dev.faults().fail_nth(FaultPoint::StreamWait, 2);
    let err = r.slot.queue_run_entry(&r.streams, Some(&dep)).unwrap_err();
    assert!(matches!(err, PublishError::ForkWait(_)), "{err}");
    // The AICPU stream is held by the caller's gate: the discharge cannot prove a drain.
    let err = r.slot.finish_run(Duration::from_millis(50)).unwrap_err();
    assert!(matches!(err, FinishError::Quarantined { run: q, .. } if q == run), "{err}");
    assert!(r.slot.is_quarantined());
    assert_eq!(
        r.slot.prepare_runtime_args(&desc(1, 64), args()),
        Err(PrepareError::Quarantined { run })
    );
    assert_eq!(r.slot.teardown(), Err(TeardownError::Quarantined { run }));
    assert_eq!(r.dev.pinned_stats().live_bytes, 256, "quarantined resources stay allocated");
    gate.send(()).unwrap();
    r.streams.aicpu.synchronize().unwrap();
    drop(r.slot);
    assert_eq!(r.dev.pinned_stats().live_bytes, 256);
}

#[test]
fn teardown_releases_only_on_normal_retirement_and_retains_failed_frees() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    r.slot.prepare_runtime_args(&desc(1, 128), args()).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    let run = r.slot.execution_owner().unwrap();
    assert_eq!(r.slot.teardown(), Err(TeardownError::LiveRun { run }));
    assert_eq!(r.dev.pinned_stats().live_bytes, 128, "nothing freed under a live run");
    r.slot.finish_run(T).unwrap();
    r.dev.faults().fail_next(FaultPoint::HostFree);
    let err = r.slot.teardown().unwrap_err();
    assert!(matches!(err, TeardownError::FreesRetained { buffers: 1, bytes: 128, .. }), "{err}");
    assert_eq!(r.slot.retained_frees(), 1);
    assert_eq!(r.dev.pinned_stats().live_bytes, 128);
    r.slot.teardown().unwrap();
    assert_eq!(r.slot.retained_frees(), 0);
    assert_eq!(r.dev.pinned_stats().live_bytes, 0);
    // The slot is reusable after teardown.
    r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
}

#[test]
fn dropping_a_slot_with_a_live_run_keeps_its_source() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let (_caller, dep, gate) = gated_caller(&r.dev);
    r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    r.slot.queue_run_entry(&r.streams, Some(&dep)).unwrap();
    drop(r.slot);
    assert_eq!(r.dev.pinned_stats().live_bytes, 64);
    gate.send(()).unwrap();
    r.streams.aicpu.synchronize().unwrap();
}

#[test]
fn empty_metadata_batch_clears_an_abandoned_unpublished_batch() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A5);
    let m = sentinel(&r.dev, 16, 0x10);
    r.slot.stage_launch_metadata(vec![MetadataRegion::new(m, vec![0x99; 16])]).unwrap();
    r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    r.dev.faults().fail_next(FaultPoint::Copy);
    assert!(r.slot.queue_run_entry(&r.streams, None).is_err());
    r.slot.finish_run(T).unwrap();
    r.slot.release_run_view();
    assert_eq!(r.slot.staged_metadata().len(), 1, "the unpublished batch was abandoned");
    // A legacy run stages an empty batch and inherits nothing.
    r.slot.stage_launch_metadata(Vec::new()).unwrap();
    assert!(r.slot.staged_metadata().is_empty());
    r.slot.prepare_runtime_args(&desc(2, 64), args()).unwrap();
    let rep = r.slot.queue_run_entry(&r.streams, None).unwrap();
    assert!(rep.metadata.is_empty());
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();
    assert_eq!(read(&r.dev, m, 16), vec![0x10; 16]);
}

#[test]
fn scheduler_diagnostics_need_a_successful_publication() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A5);
    assert_eq!(r.slot.scheduler_diagnostics(), Err(DiagnosticsError::NoRun));
    let m = sentinel(&r.dev, 16, 0);
    r.slot.stage_launch_metadata(vec![MetadataRegion::new(m, vec![1; 16])]).unwrap();
    let first = r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    assert_eq!(r.slot.scheduler_diagnostics(), Err(DiagnosticsError::NotPublished { run: first }));
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    let d = r.slot.scheduler_diagnostics().unwrap();
    assert_eq!((d.run, d.metadata_regions, d.metadata_bytes), (first, 1, 16));
    r.slot.finish_run(T).unwrap();

    // The next run's metadata publication fails: its diagnostics are refused, so the first
    // run's scheduler records cannot be labelled as the second run's.
    r.slot.stage_launch_metadata(vec![MetadataRegion::new(m, vec![2; 16])]).unwrap();
    let second = r.slot.prepare_runtime_args(&desc(2, 64), args()).unwrap();
    r.dev.faults().fail_next(FaultPoint::Copy);
    assert!(r.slot.queue_run_entry(&r.streams, None).is_err());
    assert_eq!(r.slot.scheduler_diagnostics(), Err(DiagnosticsError::NotPublished { run: second }));
    r.slot.finish_run(T).unwrap();
}

#[test]
fn failed_caller_dependency_leaves_the_run_prepared() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    r.dev.faults().fail_next(FaultPoint::StreamWait);
    let before = counts(&r.dev);
    let err = r.slot.queue_run_entry(&r.streams, Some(&Event::new())).unwrap_err();
    assert!(matches!(err, PublishError::CallerDependency(_)), "{err}");
    assert_eq!(r.slot.state(), TransactionState::Prepared);
    assert_eq!(r.slot.execution_owner(), None);
    assert_eq!(counts(&r.dev), before);
    r.slot.queue_run_entry(&r.streams, Some(&Event::new())).unwrap();
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();
}

#[test]
fn metadata_staged_after_preparation_must_fit_the_reservation() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    let m = sentinel(&r.dev, 32, 0);
    r.slot.stage_launch_metadata(vec![MetadataRegion::new(m, vec![1; 32])]).unwrap();
    let before = counts(&r.dev);
    assert_eq!(
        r.slot.publish_for_launch(&r.streams),
        Err(PublishError::CapacityExceeded { required: 96, capacity: 64 })
    );
    assert_eq!(counts(&r.dev), before);
    assert_eq!(r.slot.state(), TransactionState::Prepared);
}

#[test]
fn a_run_published_on_one_stream_pair_cannot_launch_on_another() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut r = rig(Arch::A2a3);
    let run = r.slot.prepare_runtime_args(&desc(1, 64), args()).unwrap();
    r.slot.publish_for_launch(&r.streams).unwrap();
    let other = RunStreams::new(&r.dev).unwrap();
    assert_eq!(
        r.slot.launch(&other, EntryKernels::noop()),
        Err(LaunchError::StreamMismatch { run })
    );
    // A pair that shares one of the two streams is another pair too.
    let (mut same_aicpu, mut same_aicore) = (r.streams.clone(), r.streams.clone());
    same_aicpu.aicore = other.aicore.clone();
    same_aicore.aicpu = other.aicpu.clone();
    for half in [&same_aicpu, &same_aicore] {
        assert_eq!(
            r.slot.launch(half, EntryKernels::noop()),
            Err(LaunchError::StreamMismatch { run })
        );
    }
    r.slot.launch(&r.streams, EntryKernels::noop()).unwrap();
    r.slot.finish_run(T).unwrap();
}

/// What the descriptor and the slot report about themselves: the image as given and edited,
/// the slot's number, its destination's capacity once prepared, the last publication's report,
/// whether it was moved from, and a run id as text.
#[test]
fn descriptor_and_slot_accessors_report_their_state() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    let mut d = desc(1, 64);
    assert_eq!(d.image().len(), 80);
    assert!(d.image()[..64].iter().all(|&b| b == 1) && d.image()[64..].iter().all(|&b| b == 0xee));
    d.image_mut()[0] = 9;
    assert_eq!((d.image()[0], d.route_prefix()[0]), (9, 9));
    assert_eq!(ferry_launch::transaction::RunId(7).to_string(), "run 7");

    let mut r = rig(Arch::A2a3);
    assert_eq!(r.slot.slot(), 0);
    assert_eq!(LaunchStaging::new(&r.dev, 3).slot(), 3);
    assert!(!r.slot.is_moved_from());
    assert_eq!(r.slot.destination_capacity(), 0, "no destination before a preparation");
    r.slot.prepare_runtime_args(&d, args()).unwrap();
    assert_eq!(r.slot.destination_capacity(), 64, "the descriptor's device extent");
    assert_eq!(r.slot.last_publish(), None);
    let report = r.slot.publish_for_launch(&r.streams).unwrap();
    assert!(report.descriptor_copied && report.bytes_copied == 64, "{report:?}");
    assert_eq!(r.slot.last_publish(), Some(&report));
    let mut moved = r.slot.take();
    assert!(r.slot.is_moved_from() && !moved.is_moved_from());
    assert_eq!(moved.last_publish(), Some(&report), "the move hands the report over");
    moved.launch(&r.streams, EntryKernels::noop()).unwrap();
    moved.finish_run(T).unwrap();
    moved.teardown().unwrap();
}

#[test]
fn transaction_types_are_send() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    fn send<T: Send>() {}
    send::<LaunchStaging<Device>>();
    send::<RunStreams<Device>>();
    send::<EntryKernels<Device>>();
    send::<ferry_sim::pinned::PinnedBuffer>();
}

/// The transaction's own resources under injected faults: the stream pair's creation (either
/// stream) and the slot's device destination. Each failure is typed with the fault it carries,
/// releases what the failed step had made (a half-built stream pair gives its first queue's
/// memory back), and the slot then prepares, runs and retires normally; at the end the device
/// holds what it held before and is released with its last handle.
#[test]
fn stream_creation_and_staging_allocation_faults_are_typed_and_leave_nothing() {
    let _bound = ferry_watchdog::bound("the launch transaction's run on the simulated chip");
    for arch in Arch::ALL {
        let p = PlatformBuilder::new(arch).hbm_bytes(16 << 20).build().unwrap();
        let dev = p.device(0).unwrap().clone();
        dev.null_stream().unwrap();
        // Copy engines keep their queue (and its context memory) for the device's life once
        // used; everything else must come back.
        let engine_queues = |d: &Device| {
            d.copy_engine_queues() as u64 * ferry_sim::device::DEFAULT_QUEUE_CONTEXT_BYTES
        };
        let base = dev.memory().used() - engine_queues(&dev);
        for k in 1..=2 {
            let occurrence = dev.faults().seen(FaultPoint::StreamCreate) + k;
            dev.faults().fail_nth(FaultPoint::StreamCreate, k);
            let err = RunStreams::new(&dev).unwrap_err();
            let want = InjectedFault { point: FaultPoint::StreamCreate, occurrence };
            let cause = err.source_as::<DeviceError>();
            assert_eq!(cause, Some(&DeviceError::Injected(want)), "{arch:?} stream {k}");
            let used = dev.memory().used() - engine_queues(&dev);
            assert_eq!(used, base, "{arch:?} stream {k}: a queue was kept");
        }
        let streams = RunStreams::new(&dev).unwrap();
        let mut slot = LaunchStaging::new(&dev, 0);
        let occurrence = dev.faults().seen(FaultPoint::DeviceAlloc) + 1;
        dev.faults().fail_next(FaultPoint::DeviceAlloc);
        let err = slot.prepare_runtime_args(&desc(3, 256), args()).unwrap_err();
        let want = InjectedFault { point: FaultPoint::DeviceAlloc, occurrence };
        let PrepareError::DeviceAlloc { bytes: 256, error } = &err else { panic!("{err:?}") };
        assert_eq!(
            error.source_as::<DeviceError>(),
            Some(&DeviceError::Injected(want)),
            "{arch:?}"
        );
        assert_eq!(slot.destination(), None, "{arch:?}: no destination after the failure");
        slot.prepare_runtime_args(&desc(3, 256), args()).unwrap();
        slot.launch(&streams, EntryKernels::noop()).unwrap();
        slot.finish_run(T).unwrap();
        assert_eq!(read(&dev, slot.destination().unwrap(), 256), vec![3; 256], "{arch:?}");
        slot.teardown().unwrap();
        drop((slot, streams));
        let used = dev.memory().used() - engine_queues(&dev);
        assert_eq!(used, base, "{arch:?}: the slot and its streams gave it back");
        assert_eq!(dev.pinned_stats().live_bytes, 0, "{arch:?}");
        let weak = dev.downgrade();
        drop((dev, p));
        assert!(weak.upgrade().is_none(), "{arch:?}: the device outlived every handle");
    }
}
