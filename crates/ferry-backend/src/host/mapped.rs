//! The host-memory backend's mapped memory, cycle counter and host bells
//! ([`MappedMemory`], [`DeviceCounter`], [`HostBells`]). All of its memory is host memory, so
//! an allocation's host and device views are the same bytes (a unified device), its counter is
//! the host's monotonic clock in nanoseconds (the timestamps of its events), and its bells are
//! rung by whatever stands for device code ([`HostMemoryDevice::ring_host`]).
use super::{launch::now_ns, lock, DeviceInner, HostMemoryDevice};
use crate::{
    BackendError, BackendOp, CycleCounter, DeviceCounter, DevicePtr, HostBell, HostBells,
    MappedMemory,
};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Mutex, Weak};

/// The bells registered on one device, by key.
#[derive(Default)]
pub(super) struct Bells(Mutex<HashMap<u64, HostBell>>);

impl std::fmt::Debug for Bells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<u64> = lock(&self.0).keys().copied().collect();
        f.debug_struct("Bells").field("keys", &keys).finish()
    }
}

impl HostMemoryDevice {
    /// The host view of a device range (the same bytes as the device's), checked against the
    /// live allocations; an armed fault of `op` fails it first.
    fn mapped(&self, op: BackendOp, ptr: DevicePtr, len: u64) -> Result<NonNull<u8>, BackendError> {
        let s = &self.0.shared;
        s.check(op)?;
        let p =
            s.resolve(&mut lock(&s.heap), ptr.0, len).map_err(|e| BackendError::typed(op, e))?;
        // A resolved range is inside a live allocation or registration, never at address 0.
        NonNull::new(p).ok_or_else(|| BackendError::typed(op, s.bad(ptr.0, len)))
    }

    /// Rings the bell registered under `key` with `queue`, as device code's notification of the
    /// host would (an entry launched on this device's streams may call it); whether a bell was
    /// registered there.
    pub fn ring_host(&self, key: u64, queue: u32) -> bool {
        // The bell runs outside the lock: it may register or drop bells itself.
        let bell = lock(&self.0.bells.0).get(&key).cloned();
        match bell {
            Some(b) => {
                b(queue);
                true
            }
            None => false,
        }
    }
}

/// Host and device share every byte: the flushes and refreshes only check the range.
impl MappedMemory for HostMemoryDevice {
    fn is_unified(&self) -> bool {
        true
    }

    fn host_view(&self, ptr: DevicePtr, len: u64) -> Result<NonNull<u8>, BackendError> {
        self.mapped(BackendOp::MapMemory, ptr, len)
    }

    fn device_view(&self, ptr: DevicePtr, len: u64) -> Result<NonNull<u8>, BackendError> {
        self.mapped(BackendOp::MapMemory, ptr, len)
    }

    fn flush_to_device(&self, ptr: DevicePtr, len: u64) -> Result<(), BackendError> {
        self.mapped(BackendOp::Copy, ptr, len).map(drop)
    }

    fn refresh_from_device(&self, ptr: DevicePtr, len: u64) -> Result<(), BackendError> {
        self.mapped(BackendOp::Copy, ptr, len).map(drop)
    }
}

/// The host-memory backend's cycle counter: the host's monotonic clock in nanoseconds since
/// the backend's clock started, the clock its events are stamped with (1 GHz).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostMemoryCounter;

impl CycleCounter for HostMemoryCounter {
    fn hz(&self) -> u64 {
        1_000_000_000
    }

    fn now_cycles(&self) -> u64 {
        now_ns()
    }
}

impl DeviceCounter for HostMemoryDevice {
    type Counter = HostMemoryCounter;

    fn cycle_counter(&self) -> &HostMemoryCounter {
        &HostMemoryCounter
    }
}

/// Keeps a bell registered on a [`HostMemoryDevice`]; dropping it unregisters the bell.
#[derive(Debug)]
pub struct HostMemoryBellGuard {
    device: Weak<DeviceInner>,
    key: u64,
}

impl Drop for HostMemoryBellGuard {
    fn drop(&mut self) {
        if let Some(d) = self.device.upgrade() {
            lock(&d.bells.0).remove(&self.key);
        }
    }
}

/// Bells rung through [`HostMemoryDevice::ring_host`].
impl HostBells for HostMemoryDevice {
    type BellGuard = HostMemoryBellGuard;

    fn register_host_bell(&self, key: u64, bell: HostBell) -> Option<HostMemoryBellGuard> {
        lock(&self.0.bells.0).insert(key, bell);
        Some(HostMemoryBellGuard { device: std::sync::Arc::downgrade(&self.0), key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{HostMemoryBackend, HostMemoryError};
    use crate::{Backend, BackendDevice};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_mapped_allocation_is_the_device_bytes_and_only_while_it_lives() {
        let b = HostMemoryBackend::new(1, 1 << 20).unwrap();
        let d = b.device(0).unwrap();
        let p = d.malloc(100).unwrap();
        let h = d.host_view(p, 100).unwrap();
        assert_eq!(h.as_ptr() as usize % 64, 0, "mapped for 64-byte aligned atomics");
        assert_eq!(h, d.device_view(p, 100).unwrap(), "unified: one set of bytes");
        // SAFETY: `h` addresses 100 bytes of the live allocation; nothing else touches them.
        unsafe { h.as_ptr().add(3).write(0xa5) };
        d.flush_to_device(p, 100).unwrap();
        let mut back = [0u8; 4];
        d.copy_dtoh(p, &mut back).unwrap();
        assert_eq!(back, [0, 0, 0, 0xa5], "the host's write is the device's byte");
        let past = d.host_view(p, 101).unwrap_err();
        assert_eq!(past.op(), BackendOp::MapMemory);
        assert!(matches!(past.source_as(), Some(HostMemoryError::BadAddress { len: 101, .. })));
        d.fail_next(BackendOp::Copy);
        assert_eq!(d.refresh_from_device(p, 4).unwrap_err().op(), BackendOp::Copy);
        d.free(p).unwrap();
        assert!(d.host_view(p, 1).is_err(), "freed memory is not mapped");
        assert_eq!(d.flush_to_device(p, 4).unwrap_err().op(), BackendOp::Copy);
    }

    #[test]
    fn the_counter_is_the_clock_events_are_stamped_with() {
        use crate::{BackendEvent, BackendStream, EventOf};
        let b = HostMemoryBackend::new(1, 1 << 20).unwrap();
        let d = b.device(0).unwrap();
        let c = d.cycle_counter();
        assert_eq!(c.hz(), 1_000_000_000);
        let before = c.now_cycles();
        let ev = EventOf::<HostMemoryDevice>::default();
        d.null_stream().unwrap().record_event(&ev).unwrap();
        let after = c.now_cycles();
        let at = ev.timestamp_cycles().unwrap();
        assert!(before <= at && at <= after, "{before} {at} {after}");
    }

    #[test]
    fn a_bell_rings_under_its_key_until_its_guard_goes() {
        let b = HostMemoryBackend::new(1, 1 << 20).unwrap();
        let d = b.device(0).unwrap();
        let rung = Arc::new(AtomicU32::new(0));
        let r = rung.clone();
        // Relaxed: read on this thread after the ring returned.
        let g = d.register_host_bell(0x40, Arc::new(move |q| r.store(q + 1, Ordering::Relaxed)));
        let g = g.expect("the host-memory backend has bells");
        assert!(!d.ring_host(0x80, 1), "no bell under another key");
        assert!(d.ring_host(0x40, 6));
        // Relaxed: see the store.
        assert_eq!(rung.load(Ordering::Relaxed), 7);
        drop(g);
        assert!(!d.ring_host(0x40, 1), "unregistered with its guard");
    }
}
