//! The launch transaction is generic over the device backend: the same run — prepare, publish
//! (descriptor copy from the pinned source, entry fork), launch both entries with their
//! argument blocks, retire on the two completion boundaries — on the simulated chip and on the
//! host-memory backend, and a failed entry comes back as the run's typed error from either.
use ferry_abi::launch::KernelArgs;
use ferry_backend::host::{HostMemoryBackend, HostMemoryDevice, HostMemoryError};
use ferry_backend::{Backend, BackendDevice, BackendOp};
use ferry_launch::transaction::RetirePath;
use ferry_launch::{EntryKernels, LaunchDescriptor, LaunchStaging, RunStreams};
use ferry_sim::{Arch, DeviceError, PlatformBuilder};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

/// One run on `dev`: the AICPU entry reads the published descriptor back from the device
/// through its argument block; the first retirement proves it saw the prefix.
fn one_run<D: BackendDevice>(
    dev: &D,
    entries: impl Fn(Arc<AtomicU64>) -> EntryKernels<D>,
) -> Option<ferry_backend::BackendError> {
    let streams = RunStreams::new(dev).unwrap();
    let mut slot = LaunchStaging::new(dev, 0);
    let desc = LaunchDescriptor::new(vec![0x5a; 256], 128).unwrap();
    slot.prepare_runtime_args(&desc, KernelArgs::new(3, 4)).unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    slot.launch(&streams, entries(seen.clone())).unwrap();
    let done = slot.finish_run(T).unwrap();
    assert_eq!(done.path, RetirePath::Normal);
    assert!(!done.inherited);
    if done.run_error.is_none() {
        // Relaxed: the entry ran before the completion boundary that `finish_run` waited for.
        assert_eq!(seen.load(Ordering::Relaxed), slot.destination().unwrap().0);
        assert!(done.span_cycles.is_some_and(|(a, b)| a <= b));
        // The same prefix again: no copy, no fork.
        slot.prepare_runtime_args(&desc, KernelArgs::new(3, 4)).unwrap();
        let report = slot.queue_run_entry(&streams, None).unwrap();
        assert_eq!((report.bytes_copied, report.forked), (0, false));
        slot.launch(&streams, entries(seen.clone())).unwrap();
        assert_eq!(slot.finish_run(T).unwrap().run_error, None);
    }
    slot.teardown().unwrap();
    done.run_error
}

/// Entries that record where the descriptor lives, the AICPU one failing when told.
macro_rules! entries {
    ($dev:ty, $fail:expr) => {
        |seen: Arc<AtomicU64>| {
            EntryKernels::new(
                |_: &$dev, _| Ok(()),
                move |_: &$dev, args: KernelArgs| {
                    // Relaxed: read after the run's completion boundary (see `one_run`).
                    seen.store(args.runtime_args, Ordering::Relaxed);
                    if $fail {
                        Err("entry refused".into())
                    } else {
                        Ok(())
                    }
                },
            )
        }
    };
}

#[test]
fn one_run_on_the_simulated_chip_and_on_host_memory() {
    let _bound = ferry_watchdog::bound("a run on each backend");
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build().unwrap();
    assert_eq!(one_run(p.device(0).unwrap(), entries!(ferry_sim::Device, false)), None);
    let h = HostMemoryBackend::new(1, 16 << 20).unwrap();
    assert_eq!(one_run(h.device(0).unwrap(), entries!(HostMemoryDevice, false)), None);
}

#[test]
fn a_failed_entry_is_the_runs_typed_error_on_either_backend() {
    let _bound = ferry_watchdog::bound("a failing run on each backend");
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build().unwrap();
    let e = one_run(p.device(0).unwrap(), entries!(ferry_sim::Device, true)).unwrap();
    assert_eq!(e.op(), BackendOp::Execute);
    assert!(
        matches!(e.source_as(), Some(DeviceError::Kernel { name, .. }) if name == "aicpu_exec")
    );
    let h = HostMemoryBackend::new(1, 16 << 20).unwrap();
    let e = one_run(h.device(0).unwrap(), entries!(HostMemoryDevice, true)).unwrap();
    assert_eq!(e.op(), BackendOp::Execute);
    assert!(matches!(
        e.source_as(),
        Some(HostMemoryError::Kernel { name, message }) if name == "aicpu_exec" && message == "entry refused"
    ));
}
