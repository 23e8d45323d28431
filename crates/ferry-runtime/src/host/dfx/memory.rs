//! The DFX transports' memory and clock on a `ferry_sim` chip: regions and arenas in the chip's
//! device memory (the full path), or in host memory (the in-process path).

use std::sync::Arc;

use ferry_abi::arch::ArchProfile;
use ferry_dfx::clock::CycleClock;
use ferry_dfx::mem::{DeviceMemory, MemError, MirroredMemory, ShmRegion, SvmMemory};
use ferry_sim::clock::DeviceClock;
use ferry_sim::{Device, DevicePtr};

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

/// One allocation of simulated device memory, freed when the last view of it goes.
#[derive(Debug)]
pub(super) struct SimAlloc {
    device: Device,
    pub(super) ptr: DevicePtr,
    len: u64,
    /// Host and device share these bytes (SVM): range synchronisation is a no-op.
    svm: bool,
}

impl SimAlloc {
    /// `populate`: bring the simulation's host pages in now (below); `false` for memory the run
    /// may never write, left to be faulted in where it is.
    pub(super) fn new(
        device: &Device,
        len: u64,
        populate: bool,
    ) -> Result<Arc<SimAlloc>, DfxError> {
        // Not cleared, as a device allocator hands memory out: whoever reads a word before the
        // device writes it initialises it first (a transport its control words, the ArgsDump
        // arena its counters; the directory is copied in whole). Clearing tens of MiB per
        // session would also cost the session start.
        let ptr = device.malloc(len.max(64))?;
        let mem = device.memory();
        // The simulation's host pages brought in now, not faulted in by the chip's threads while
        // the run writes its first records (a storm with all five: ~6,000 faults, measured with
        // `perf stat`, on the run's critical path; ~12 ms here instead; the whole command with
        // all five 1.61-1.73x -> 1.46-1.60x DFX off, `ferry bench dfx` A/B). Nothing is written.
        if populate {
            let _ = mem.populate(ptr, len.max(64));
        }
        let host = mem.host_ptr(ptr, len).map_err(DfxError::from);
        let dev = mem.device_ptr(ptr, len).map_err(DfxError::from);
        let (host, dev) = match (host, dev) {
            (Ok(h), Ok(d)) => (h, d),
            (Err(e), _) | (_, Err(e)) => {
                let _ = device.free(ptr);
                return Err(e);
            }
        };
        Ok(Arc::new(SimAlloc { device: device.clone(), ptr, len, svm: host == dev }))
    }

    pub(super) fn device_ptr(&self) -> std::ptr::NonNull<u8> {
        let p = self.device.memory().device_ptr(self.ptr, self.len).ok();
        // A live allocation always translates.
        std::ptr::NonNull::new(p.unwrap_or(std::ptr::null_mut())).expect("live allocation")
    }
}

impl Drop for SimAlloc {
    fn drop(&mut self) {
        if let Err(e) = self.device.free(self.ptr) {
            tracing::warn!(%e, "freeing a DFX allocation");
        }
    }
}

/// [`DeviceMemory`] over an allocation of a `ferry_sim` device: the device view is its HBM, the
/// host view the same bytes on SVM (a2a3) or the device's host mirror (a5), synchronised by the
/// simulator's narrow range copies (and one bulk copy per drained buffer).
#[derive(Debug)]
pub struct SimDeviceMemory {
    alloc: Arc<SimAlloc>,
}

impl SimDeviceMemory {
    /// Allocates `len` bytes (64-byte aligned, not cleared: a recycled range keeps its last
    /// user's bytes, as on a device; `DfxTransport::new` clears the control words it uses) on
    /// `device`.
    ///
    /// # Errors
    /// [`DfxError::Setup`] when the device is out of memory.
    pub fn new(device: &Device, len: usize) -> Result<SimDeviceMemory, DfxError> {
        Ok(SimDeviceMemory { alloc: SimAlloc::new(device, len as u64, true)? })
    }

    fn view(&self, p: Result<*mut u8, ferry_sim::memory::MemoryError>) -> ShmRegion {
        let p = std::ptr::NonNull::new(p.unwrap_or(std::ptr::null_mut())).expect("live allocation");
        // SAFETY: `p` is 64-byte aligned (device allocations are `DEVICE_ALIGN`-aligned and both
        // maps page-aligned) and valid for `len` bytes while the allocation lives, which the
        // `SimAlloc` owner guarantees; the transport touches it only atomically / single-writer.
        unsafe { ShmRegion::from_raw_parts(p, self.alloc.len as usize, self.alloc.clone()) }
    }

    fn range(&self, off: usize, len: usize) -> Result<DevicePtr, MemError> {
        if off % 4 != 0 || len % 4 != 0 || off + len > self.alloc.len as usize {
            return Err(MemError::OutOfRange { off, len });
        }
        Ok(DevicePtr(self.alloc.ptr.0 + off as u64))
    }
}

impl DeviceMemory for SimDeviceMemory {
    fn device_view(&self) -> ShmRegion {
        self.view(self.alloc.device.memory().device_ptr(self.alloc.ptr, self.alloc.len))
    }
    fn host_view(&self) -> ShmRegion {
        self.view(self.alloc.device.memory().host_ptr(self.alloc.ptr, self.alloc.len))
    }
    fn device_addr(&self) -> u64 {
        self.alloc.ptr.0
    }
    fn is_svm(&self) -> bool {
        self.alloc.device.memory().is_svm()
    }
    fn write_range_to_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        let p = self.range(off, len)?;
        if self.alloc.svm {
            // One set of bytes: nothing to copy, and the range is inside this live allocation
            // (checked above; `self` keeps it alive). The simulator's own check would take the
            // device allocator's lock on every poll of a ready queue, which the device's
            // translations contend for.
            return Ok(());
        }
        self.alloc
            .device
            .memory()
            .write_range_to_device(p, len as u64)
            .map_err(|_| MemError::Failed)
    }
    fn read_range_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        let p = self.range(off, len)?;
        if self.alloc.svm {
            // As in `write_range_to_device`.
            return Ok(());
        }
        self.alloc
            .device
            .memory()
            .read_range_from_device(p, len as u64)
            .map_err(|_| MemError::Failed)
    }
    unsafe fn read_owned_from_device(&self, off: usize, len: usize) -> Result<(), MemError> {
        let p = self.range(off, len)?;
        if self.alloc.svm {
            // As in `write_range_to_device`.
            return Ok(());
        }
        // SAFETY: the caller guarantees nobody writes the range meanwhile, which is the
        // simulator's contract for the bulk copy.
        unsafe { self.alloc.device.memory().read_owned_range_from_device(p, len as u64) }
            .map_err(|_| MemError::Failed)
    }
}

/// A `ferry_sim` device clock as the transports' [`CycleClock`]: the host side of every
/// transport (stall intervals, gate budgets of in-process writers) then reads the same counter
/// the device half stamps its records with (`DeviceOps::clock_cycles`), so a stall interval lines
/// up with the task times it delayed.
#[derive(Clone, Debug)]
pub struct SimCycleClock(pub DeviceClock);

impl CycleClock for SimCycleClock {
    fn now_cycles(&self) -> u64 {
        self.0.now_cycles()
    }
}
