//! What a host-side collector needs of a device beyond copies and streams: device memory the
//! host maps and reads in place ([`MappedMemory`]), the device's cycle counter as the host reads
//! it ([`CycleCounter`], [`DeviceCounter`]), and the notification a device program raises on
//! the host ([`HostBells`]). The runtime's DFX session builds its transports' regions, stall
//! clocks and doorbells on these.
use crate::{BackendDevice, BackendError, DevicePtr};
use std::ptr::NonNull;
use std::sync::Arc;

/// Device memory the host maps: an allocation ([`BackendDevice::malloc`]) the host reads and
/// writes in place through its host view, while device code works on its device view.
///
/// On hardware this is device memory mapped into the host's address space: the same pages on
/// a chip with shared virtual memory (SVM, or unified memory), else a host mirror of device
/// memory kept in step by narrow range copies (pinned, mapped memory, `cudaHostAllocMapped`
/// or the driver's `mmap` of a device buffer). Where device code runs on host threads (the
/// simulated chip), the device view is the device memory itself as the host addresses it.
pub trait MappedMemory: BackendDevice {
    /// Whether an allocation's host and device views are the same bytes (SVM): then
    /// [`flush_to_device`](Self::flush_to_device) and the refreshes have nothing to copy.
    fn is_unified(&self) -> bool;

    /// The host's view of `[ptr, ptr + len)`, valid while the allocation lives.
    ///
    /// # Errors
    /// [`BackendOp::MapMemory`](crate::BackendOp::MapMemory) when the range is not inside one
    /// live allocation of this device.
    fn host_view(&self, ptr: DevicePtr, len: u64) -> Result<NonNull<u8>, BackendError>;

    /// The device's view of `[ptr, ptr + len)` as the host addresses it (the host view on a
    /// unified device), valid while the allocation lives.
    ///
    /// # Errors
    /// As [`host_view`](Self::host_view).
    fn device_view(&self, ptr: DevicePtr, len: u64) -> Result<NonNull<u8>, BackendError>;

    /// Brings in the host pages behind `[ptr, ptr + len)` now, so that the device's first
    /// writes do not fault them in one by one; changes no byte. Best effort: the default does
    /// nothing (device memory on hardware has no pages to bring in).
    fn prefault(&self, ptr: DevicePtr, len: u64) {
        let _ = (ptr, len);
    }

    /// Makes the host's writes to `[ptr, ptr + len)` visible to the device, word-atomically
    /// with `Release` ordering (the host's store barrier, then the push); no copy on a unified
    /// device.
    ///
    /// # Errors
    /// [`BackendOp::Copy`](crate::BackendOp::Copy) when the range is not inside one live
    /// allocation or the copy fails.
    fn flush_to_device(&self, ptr: DevicePtr, len: u64) -> Result<(), BackendError>;

    /// Refreshes the host view of `[ptr, ptr + len)` from the device, word-atomically with
    /// `Acquire` ordering (the pull, then the host's load barrier); no copy on a unified
    /// device.
    ///
    /// # Errors
    /// As [`flush_to_device`](Self::flush_to_device).
    fn refresh_from_device(&self, ptr: DevicePtr, len: u64) -> Result<(), BackendError>;

    /// As [`refresh_from_device`](Self::refresh_from_device), one bulk copy, for a range the
    /// host owns (the device published it and does not write it again until the host hands it
    /// back).
    ///
    /// # Safety
    /// No thread writes `[ptr, ptr + len)` of either view during the call.
    ///
    /// # Errors
    /// As [`flush_to_device`](Self::flush_to_device).
    unsafe fn refresh_owned_from_device(
        &self,
        ptr: DevicePtr,
        len: u64,
    ) -> Result<(), BackendError> {
        self.refresh_from_device(ptr, len)
    }
}

/// A device's free-running cycle counter as the host reads it: what device code stamps its
/// records with, so host-side intervals measured on it line up with the device's timestamps.
///
/// On hardware this is the device's system counter read from the host (a counter register
/// the driver maps, or the driver's query of it, as `aclrtGetDeviceSysCnt`-style calls do);
/// on the simulated chip, its device clock.
pub trait CycleCounter: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The counter's frequency in Hz.
    fn hz(&self) -> u64;

    /// The counter's value now; successive reads on one thread never decrease.
    fn now_cycles(&self) -> u64;
}

/// A device whose cycle counter the host reads ([`CycleCounter`]).
pub trait DeviceCounter: BackendDevice {
    /// The counter.
    type Counter: CycleCounter;

    /// The device's cycle counter.
    fn cycle_counter(&self) -> &Self::Counter;
}

/// A host callback a device program rings with a queue number ([`HostBells`]).
pub type HostBell = Arc<dyn Fn(u32) + Send + Sync>;

/// A device → host notification: device code rings a bell the host registered under a key
/// (by convention the device address of the region it concerns), with a queue number.
///
/// On hardware this is a host interrupt the device raises through the driver, delivered to
/// the host as an eventfd or a blocking driver call where the device has one; a device
/// without one registers nothing ([`register_host_bell`](Self::register_host_bell) returns
/// `None`) and the host polls. On the simulated chip it is the AICPU OS's `notify_host`.
pub trait HostBells: BackendDevice {
    /// Keeps a bell registered; dropping it unregisters the bell.
    type BellGuard: std::fmt::Debug + Send + Sync + 'static;

    /// Registers `bell` under `key` (replacing an earlier bell under the same key) until the
    /// guard is dropped; `None` when the device has no host notification.
    fn register_host_bell(&self, key: u64, bell: HostBell) -> Option<Self::BellGuard>;
}
