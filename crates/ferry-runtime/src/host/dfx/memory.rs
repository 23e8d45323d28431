//! The DFX transports' memory and clock on a backend's device: regions and arenas in device
//! memory the host maps (`ferry_backend::MappedMemory`, the full path), or in host memory (the
//! in-process path), and the device's cycle counter as the transports' clock
//! (`ferry_backend::CycleCounter`).

use std::sync::Arc;

use ferry_abi::arch::ArchProfile;
use ferry_backend::{BackendDevice, CycleCounter, DevicePtr, HostBell, HostBells, MappedMemory};
use ferry_dfx::clock::CycleClock;
use ferry_dfx::mem::{DeviceMemory, MemError, MirroredMemory, ShmRegion, SvmMemory};

use super::DfxError;

/// A host-memory region for the in-process path: SVM on a2a3, a mirrored pair on a5, at a
/// device address of its own (`k` numbers the regions of a session).
pub(super) fn host_memory(profile: &ArchProfile, len: usize, k: u64) -> Arc<dyn DeviceMemory> {
    let addr = 0x4000_0000_0000 + (k << 36);
    if profile.svm {
        Arc::new(SvmMemory::new(len, addr))
    } else {
        Arc::new(MirroredMemory::new(len, addr))
    }
}

/// An allocation of a session's device memory ([`SessionDevice::alloc`]).
pub(super) struct Held {
    /// Its device address.
    pub(super) addr: u64,
    /// Its device view, valid while `owner` lives.
    pub(super) view: std::ptr::NonNull<u8>,
    /// Frees it when the last clone goes.
    pub(super) owner: Arc<dyn Send + Sync>,
}

/// What a DFX session needs of the device whose memory holds it, as one object for the
/// session's start (called per region and directory, never on a record's path): mapped
/// allocations, uploads, and the device's host bells. Every backend device that maps its
/// memory and has host bells is one.
pub(super) trait SessionDevice: Send + Sync {
    /// A transport region of `len` bytes.
    ///
    /// # Errors
    /// [`DfxError::Device`] when the device cannot allocate or map it.
    fn region(&self, len: usize) -> Result<Arc<dyn DeviceMemory>, DfxError>;

    /// `len` bytes of mapped memory (`populate`: their host pages brought in now).
    ///
    /// # Errors
    /// As [`region`](Self::region).
    fn alloc(&self, len: u64, populate: bool) -> Result<Held, DfxError>;

    /// Writes `bytes` to device address `dst` (a blocking upload).
    ///
    /// # Errors
    /// [`DfxError::Device`] when the copy fails.
    fn upload(&self, bytes: &[u8], dst: u64) -> Result<(), DfxError>;

    /// Registers `bell` under `key` until the returned guard drops; `None` where the device
    /// has no host notification.
    fn register_bell(&self, key: u64, bell: HostBell) -> Option<Box<dyn Send + Sync>>;
}

impl<D: MappedMemory + HostBells> SessionDevice for D {
    fn region(&self, len: usize) -> Result<Arc<dyn DeviceMemory>, DfxError> {
        Ok(Arc::new(MappedDeviceMemory::new(self, len)?))
    }

    fn alloc(&self, len: u64, populate: bool) -> Result<Held, DfxError> {
        let m = MappedAlloc::new(self, len, populate)?;
        Ok(Held { addr: m.ptr.0, view: m.device_ptr(), owner: m })
    }

    fn upload(&self, bytes: &[u8], dst: u64) -> Result<(), DfxError> {
        Ok(BackendDevice::copy_htod(self, bytes, DevicePtr(dst))?)
    }

    fn register_bell(&self, key: u64, bell: HostBell) -> Option<Box<dyn Send + Sync>> {
        let g = self.register_host_bell(key, bell)?;
        Some(Box::new(g))
    }
}

/// One allocation of a device's mapped memory, freed when the last view of it goes.
#[derive(Debug)]
pub(crate) struct MappedAlloc<D: MappedMemory> {
    device: D,
    pub(super) ptr: DevicePtr,
    len: u64,
    /// Host and device share these bytes (SVM): range synchronisation is a no-op.
    svm: bool,
}

impl<D: MappedMemory> MappedAlloc<D> {
    /// `populate`: bring the host pages in now (below); `false` for memory the run may never
    /// write, left to be faulted in where it is.
    pub(super) fn new(device: &D, len: u64, populate: bool) -> Result<Arc<Self>, DfxError> {
        // Not cleared, as a device allocator hands memory out: whoever reads a word before the
        // device writes it initialises it first (a transport its control words, the ArgsDump
        // arena its counters; the directory is copied in whole). Clearing tens of MiB per
        // session would also cost the session start.
        let ptr = BackendDevice::malloc(device, len.max(64)).map_err(DfxError::Device)?;
        // The simulation's host pages brought in now, not faulted in by the chip's threads while
        // the run writes its first records (a storm with all five: ~6,000 faults, measured with
        // `perf stat`, on the run's critical path; ~12 ms here instead; the whole command with
        // all five 1.61-1.73x -> 1.46-1.60x DFX off, `ferry bench dfx` A/B). Nothing is written.
        if populate {
            device.prefault(ptr, len.max(64));
        }
        let views = device.host_view(ptr, len).and_then(|h| Ok((h, device.device_view(ptr, len)?)));
        let (host, dev) = match views {
            Ok(v) => v,
            Err(e) => {
                let _ = BackendDevice::free(device, ptr);
                return Err(DfxError::Device(e));
            }
        };
        Ok(Arc::new(MappedAlloc { device: device.clone(), ptr, len, svm: host == dev }))
    }

    pub(super) fn device_ptr(&self) -> std::ptr::NonNull<u8> {
        // A live allocation always maps.
        self.device.device_view(self.ptr, self.len).expect("live allocation")
    }
}

impl<D: MappedMemory> Drop for MappedAlloc<D> {
    fn drop(&mut self) {
        if let Err(e) = BackendDevice::free(&self.device, self.ptr) {
            tracing::warn!(%e, "freeing a DFX allocation");
        }
    }
}

/// [`DeviceMemory`] over an allocation of a device's mapped memory (`D: MappedMemory`): the
/// device view is its device memory, the host view the same bytes on a unified device (SVM,
/// a2a3) or the host's mirror of them (a5), synchronised by the backend's narrow range copies
/// (and one bulk copy per drained buffer).
#[derive(Debug)]
pub struct MappedDeviceMemory<D: MappedMemory> {
    alloc: Arc<MappedAlloc<D>>,
}

impl<D: MappedMemory> MappedDeviceMemory<D> {
    /// Allocates `len` bytes (64-byte aligned, not cleared: a recycled range keeps its last
    /// user's bytes, as on a device; `DfxTransport::new` clears the control words it uses) on
    /// `device`.
    ///
    /// # Errors
    /// [`DfxError::Device`] when the device is out of memory or cannot map the allocation
    /// (the backend's error, its cause the device's own).
    pub fn new(device: &D, len: usize) -> Result<Self, DfxError> {
        Ok(MappedDeviceMemory { alloc: MappedAlloc::new(device, len as u64, true)? })
    }

    fn view(&self, p: std::ptr::NonNull<u8>) -> ShmRegion {
        // SAFETY: `p` is 64-byte aligned (device allocations are at least 64-byte aligned and
        // both maps page-aligned) and valid for `len` bytes while the allocation lives, which
        // the `MappedAlloc` owner guarantees; the transport touches it only atomically /
        // single-writer.
        unsafe { ShmRegion::from_raw_parts(p, self.alloc.len as usize, self.alloc.clone()) }
    }

    fn range(&self, off: usize, len: usize) -> Result<DevicePtr, MemError> {
        if off % 4 != 0 || len % 4 != 0 || off + len > self.alloc.len as usize {
            return Err(MemError::OutOfRange { off, len });
        }
        Ok(DevicePtr(self.alloc.ptr.0 + off as u64))
    }
}

impl<D: MappedMemory> DeviceMemory for MappedDeviceMemory<D> {
    fn device_view(&self) -> ShmRegion {
        self.view(self.alloc.device_ptr())
    }
    fn host_view(&self) -> ShmRegion {
        let a = &self.alloc;
        // A live allocation always maps.
        self.view(a.device.host_view(a.ptr, a.len).expect("live allocation"))
    }
    fn device_addr(&self) -> u64 {
        self.alloc.ptr.0
    }
    fn is_svm(&self) -> bool {
        self.alloc.device.is_unified()
    }
    fn write_range_to_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        let p = self.range(off, len)?;
        if self.alloc.svm {
            // One set of bytes: nothing to copy, and the range is inside this live allocation
            // (checked above; `self` keeps it alive). The backend's own check would take the
            // device allocator's lock on every poll of a ready queue, which the device's
            // translations contend for.
            return Ok(());
        }
        self.alloc.device.flush_to_device(p, len as u64).map_err(|_| MemError::Failed)
    }
    fn read_range_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        let p = self.range(off, len)?;
        if self.alloc.svm {
            // As in `write_range_to_device`.
            return Ok(());
        }
        self.alloc.device.refresh_from_device(p, len as u64).map_err(|_| MemError::Failed)
    }
    unsafe fn read_owned_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        let p = self.range(off, len)?;
        if self.alloc.svm {
            // As in `write_range_to_device`.
            return Ok(());
        }
        // SAFETY: the caller guarantees nobody writes the range meanwhile, which is the
        // backend's contract for the bulk copy.
        unsafe { self.alloc.device.refresh_owned_from_device(p, len as u64) }
            .map_err(|_| MemError::Failed)
    }
}

/// A device's cycle counter as the transports' [`CycleClock`]: the host side of every
/// transport (stall intervals, gate budgets of in-process writers) then reads the same counter
/// the device half stamps its records with (`DeviceOps::clock_cycles`), so a stall interval lines
/// up with the task times it delayed.
#[derive(Clone, Debug)]
pub struct DeviceCycleClock<C: CycleCounter>(pub C);

impl<C: CycleCounter> CycleClock for DeviceCycleClock<C> {
    #[inline]
    fn now_cycles(&self) -> u64 {
        self.0.now_cycles()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_abi::arch::A2A3;
    use ferry_backend::host::{
        HostMemoryBackend, HostMemoryCounter, HostMemoryDevice, HostMemoryError,
    };
    use ferry_backend::{Backend, BackendError, BackendOp, DeviceCounter};
    use ferry_dfx::{CollectSink, CollectedBuffer, DfxBuilder, DfxTransport};

    /// A collector that counts records and sums their second words.
    struct Sum(u64, u64);
    impl CollectSink<[u64; 2]> for Sum {
        fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, [u64; 2]>) {
            self.0 += b.records.len() as u64;
            self.1 += b.records.iter().map(|r| r[1]).sum::<u64>();
        }
    }

    #[test]
    fn a_transport_in_a_second_backends_memory_moves_every_record() {
        let _bound = ferry_watchdog::bound("two writers' records through host-backend memory");
        let b = HostMemoryBackend::new(1, 1 << 20).unwrap();
        let d = b.device(0).unwrap();
        let cfg = DfxBuilder::new(&A2A3)
            .ready_queues(2)
            .lane(0, 0, 2)
            .lane(1, 0, 2)
            .records_per_buffer(64)
            .build::<[u64; 2]>()
            .unwrap();
        let mem = Arc::new(MappedDeviceMemory::new(d, cfg.region_size()).unwrap());
        assert!(mem.is_svm(), "the host-memory backend is unified");
        let at = DevicePtr(mem.device_addr());
        assert!(d.is_allocated(at, cfg.region_size() as u64), "the region is device memory");
        assert_eq!(mem.write_range_to_device(4, 8), Ok(()));
        let past = mem.read_range_from_device(cfg.region_size() - 4, 8);
        assert_eq!(past, Err(MemError::OutOfRange { off: cfg.region_size() - 4, len: 8 }));
        let clock = Arc::new(DeviceCycleClock(*d.cycle_counter()));
        let t = DfxTransport::<[u64; 2]>::new(cfg, mem, clock).unwrap();
        let device = t.device_region();
        let host = t.start(|_shard| Sum(0, 0));
        std::thread::scope(|s| {
            for q in 0..2u32 {
                let device = device.clone();
                s.spawn(move || {
                    let mut w = device.writer::<[u64; 2]>(q, &[q]).unwrap();
                    for i in 0..1000 {
                        w.record(0, [u64::from(q), i]);
                    }
                    w.finish();
                });
            }
        });
        let report = host.stop();
        assert!(report.is_reconciled());
        assert_eq!(report.totals(), (2000, 2000, 0));
        let (n, sum) = report.sinks.iter().fold((0, 0), |(n, s), c| (n + c.0, s + c.1));
        assert_eq!((n, sum), (2000, 2 * 999 * 1000 / 2), "every record, each once");
        drop((device, report));
        assert_eq!(d.stats().allocated_bytes, 0, "the region is freed with its last view");
    }

    /// `(flags, entries)` of the directory at `base` in `d`'s memory.
    fn directory(d: &HostMemoryDevice, base: u64) -> (u32, Vec<(u64, u64)>) {
        let word = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let mut head = [0u8; 32];
        BackendDevice::copy_dtoh(d, DevicePtr(base), &mut head).unwrap();
        assert_eq!(word(&head, 0), crate::device::dfx::DFX_DIR_MAGIC);
        let mut all = vec![0u8; 32 + 16 * word(&head, 12) as usize];
        BackendDevice::copy_dtoh(d, DevicePtr(base), &mut all).unwrap();
        let u64_at = |at: usize| u64::from_le_bytes(all[at..at + 8].try_into().unwrap());
        let entries = (32..all.len()).step_by(16).map(|at| (u64_at(at), u64_at(at + 8))).collect();
        (word(&head, 24), entries)
    }

    #[test]
    fn a_session_lives_in_a_second_backends_memory_and_leaves_none_behind() {
        use crate::host::dfx::{DfxChip, DfxOptions, DfxSession};
        let _bound = ferry_watchdog::bound("a DFX session's host threads");
        let b = HostMemoryBackend::new(1, 64 << 20).unwrap();
        let d = b.device(0).unwrap();
        let opts = DfxOptions {
            doorbell_hint: true,
            buffers_per_lane: Some(2),
            records_per_buffer: Some(32),
            arena_bytes: 64 << 10,
            ..DfxOptions::all()
        };
        let chip = DfxChip {
            arch: ferry_abi::arch::Arch::A2a3,
            threads: 3,
            aic: 1,
            aiv: 2,
            task_window: 16,
            scratch_bytes: 1 << 20,
        };
        let s = DfxSession::start_on(&opts, chip, d).unwrap();
        let p = s.profiling().expect("a session in device memory has its bases");
        let bases = [
            p.chip_swimlane_data_base,
            p.pmu_data_base,
            p.dep_gen_data_base,
            p.scope_stats_data_base,
            p.dump_data_base,
        ];
        let mut regions = Vec::new();
        for base in bases {
            let (flags, entries) = directory(d, base);
            assert_eq!(flags, crate::device::dfx::DFX_DIR_FLAG_DOORBELL_HINT);
            for (addr, len) in entries {
                assert!(d.is_allocated(DevicePtr(addr), len), "{addr:#x}+{len} in device memory");
                regions.push(addr);
            }
        }
        // Four swimlane regions, PMU, DepGen, ScopeStats, the ArgsDump region and its two
        // scheduler threads' arenas.
        assert_eq!(regions.len(), 10);
        // Each transport region's doorbell is registered under its address (the arenas have
        // none); a ring reaches the session's host.
        let rung = regions.iter().filter(|&&a| d.ring_host(a, 0)).count();
        assert_eq!(rung, 8);
        let models = s.finish_runs_accounting().unwrap();
        assert_eq!(models.len(), 1);
        assert!(models[0].loss.lanes.iter().all(|l| l.produced == 0), "no run, no record");
        assert!(regions.iter().all(|&a| !d.ring_host(a, 0)), "bells go with the session");
        assert_eq!(d.stats().allocated_bytes, 0, "and so does its memory");
    }

    #[test]
    fn a_device_memory_failure_is_the_backends_typed_error_and_leaks_nothing() {
        let b = HostMemoryBackend::new(1, 4096).unwrap();
        let d = b.device(0).unwrap();
        d.fail_next(BackendOp::MapMemory);
        let e = MappedDeviceMemory::new(d, 1024).unwrap_err();
        let DfxError::Device(be) = &e else { panic!("{e:?}") };
        assert_eq!(be.op(), BackendOp::MapMemory);
        let cause = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<BackendError>());
        let injected = HostMemoryError::Injected { op: BackendOp::MapMemory };
        assert_eq!(cause.and_then(|c| c.source_as::<HostMemoryError>()), Some(&injected));
        assert_eq!(d.stats().allocated_bytes, 0, "the allocation is freed when it cannot map");
        let e = MappedDeviceMemory::new(d, 8192).unwrap_err();
        assert!(matches!(&e, DfxError::Device(be) if be.op() == BackendOp::Malloc), "{e:?}");
    }

    #[test]
    fn the_transports_clock_reads_the_devices_counter() {
        use ferry_backend::{BackendEvent, BackendStream, EventOf};
        let b = HostMemoryBackend::new(1, 4096).unwrap();
        let d = b.device(0).unwrap();
        let clock = DeviceCycleClock(HostMemoryCounter);
        let before = clock.now_cycles();
        let ev = EventOf::<ferry_backend::host::HostMemoryDevice>::default();
        d.null_stream().unwrap().record_event(&ev).unwrap();
        let after = clock.now_cycles();
        let stamped = ev.timestamp_cycles().unwrap();
        assert!(before <= stamped && stamped <= after, "{before} {stamped} {after}");
    }
}
