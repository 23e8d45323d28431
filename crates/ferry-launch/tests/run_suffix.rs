//! The per-run suffix of a launch descriptor: uploaded synchronously at prepare, after the
//! cached launch-route prefix, never under a live run of the slot, never a stream copy.
use ferry_abi::launch::KernelArgs;
use ferry_launch::transaction::PrepareError;
use ferry_launch::{EntryKernels, LaunchDescriptor, LaunchStaging, RunStreams};
use ferry_sim::fault::{FaultPoint, InjectedFault};
use ferry_sim::{Arch, Device, DeviceError, DevicePtr, Event, PlatformBuilder};
use std::sync::mpsc;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn read(dev: &Device, p: DevicePtr, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    dev.copy_dtoh(p, &mut out).unwrap();
    out
}

fn desc(prefix: u8, suffix: u8) -> LaunchDescriptor {
    LaunchDescriptor::new(vec![prefix; 64], 64).unwrap().with_run_suffix(vec![suffix; 128])
}

#[test]
fn suffix_lands_after_the_prefix_every_run_while_an_identical_prefix_is_not_copied() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build().unwrap();
    let dev = p.device(0).unwrap().clone();
    let streams = RunStreams::new(&dev).unwrap();
    let mut slot = LaunchStaging::new(&dev, 0);
    for (k, fill) in [3u8, 4, 5].into_iter().enumerate() {
        slot.prepare_runtime_args(&desc(1, fill), KernelArgs::new(0, 0)).unwrap();
        let dst = slot.destination().unwrap();
        // Synchronous: in place before any stream work.
        assert_eq!(read(&dev, dst.add(64), 128), vec![fill; 128]);
        let report = slot.queue_run_entry(&streams, None).unwrap();
        assert_eq!(report.descriptor_copied, k == 0, "run {k}");
        assert_eq!(report.forked, k == 0, "run {k}");
        slot.launch(&streams, EntryKernels::noop()).unwrap();
        slot.finish_run(T).unwrap();
        assert_eq!(read(&dev, dst, 64), vec![1; 64]);
    }
    let st = slot.stats();
    assert_eq!((st.suffix_uploads, st.suffix_bytes), (3, 3 * 128));
    assert_eq!((st.descriptor_copies, st.bytes_copied, st.forks), (1, 64, 1));
    slot.teardown().unwrap();
}

#[test]
fn suffix_is_never_written_under_a_live_run_and_a_failed_upload_keeps_the_view() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let p = PlatformBuilder::new(Arch::A5).hbm_bytes(16 << 20).build().unwrap();
    let dev = p.device(0).unwrap().clone();
    let streams = RunStreams::new(&dev).unwrap();
    let mut slot = LaunchStaging::new(&dev, 0);
    let first = slot.prepare_runtime_args(&desc(1, 7), KernelArgs::new(0, 0)).unwrap();
    let dst = slot.destination().unwrap();
    let (tx, rx) = mpsc::channel::<()>();
    let gate = dev.create_stream().unwrap();
    gate.launch(
        "gate",
        Box::new(move |_| {
            let _ = rx.recv();
            Ok(())
        }),
    )
    .unwrap();
    let dep = Event::new();
    gate.record_event(&dep).unwrap();
    slot.queue_run_entry(&streams, Some(&dep)).unwrap();
    slot.launch(&streams, EntryKernels::noop()).unwrap();
    // The first run is live: its suffix region must stay as it is.
    assert_eq!(
        slot.prepare_runtime_args(&desc(1, 8), KernelArgs::new(0, 0)),
        Err(PrepareError::SuffixBusy { predecessor: first })
    );
    assert_eq!(read(&dev, dst.add(64), 128), vec![7; 128], "the live run's suffix was torn");
    assert_eq!(slot.run(), Some(first));
    tx.send(()).unwrap();
    slot.finish_run(T).unwrap();
    // A failed synchronous upload is typed, keeps the previous view, and can be retried.
    dev.faults().fail_nth(FaultPoint::Copy, 1);
    match slot.prepare_runtime_args(&desc(1, 9), KernelArgs::new(0, 0)) {
        Err(PrepareError::SuffixUpload { bytes: 128, error })
            if matches!(
                error.source_as::<DeviceError>(),
                Some(DeviceError::Injected(InjectedFault { point: FaultPoint::Copy, .. }))
            ) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(slot.run(), Some(first));
    slot.prepare_runtime_args(&desc(1, 9), KernelArgs::new(0, 0)).unwrap();
    assert_eq!(read(&dev, dst.add(64), 128), vec![9; 128]);
    slot.launch(&streams, EntryKernels::noop()).unwrap();
    slot.finish_run(T).unwrap();
    slot.teardown().unwrap();
}
