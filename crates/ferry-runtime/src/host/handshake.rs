//! The handshake read back from device memory: the readback that diagnoses the Path B hang
//! (docs/design/launch.md).
//!
//! After a run (finished or timed out) the host copies every core's handshake slot and the
//! AICPU's handshake record (what each scheduler's last load of `aicore_done` returned) back
//! from the runtime image with ordinary device-to-host copies, and compares them per core. A
//! core whose report memory holds but the AICPU never saw is a stale handshake: the AICPU read
//! it through a cache that AICore's write did not invalidate (on the simulated chip, its cache
//! model). The readback is two blocking copies through the backend seam, so it reads any
//! backend's device memory.
use crate::device::image::RuntimeHeader;
use ferry_abi::handshake::HandshakeLayout;
use ferry_backend::{BackendDevice, BackendError, DevicePtr};

/// One core's handshake as the AICPU saw it and as device memory holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoreHandshake {
    /// Worker index.
    pub core: u32,
    /// The `aicore_done` value the scheduler's last load returned (0: pending).
    pub aicpu_saw: u32,
    /// `aicore_done` in device memory (`block_idx + 1` once the core reported).
    pub memory_done: u32,
    /// `physical_core_id` in device memory.
    pub physical_core_id: u32,
    /// `core_type` in device memory.
    pub core_type: u32,
}

impl CoreHandshake {
    /// Whether memory holds the core's report but the AICPU never saw it.
    pub fn is_stale(&self) -> bool {
        self.memory_done != 0 && self.aicpu_saw != self.memory_done
    }
}

/// Where a run's handshake lives in its image.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HandshakeRegion {
    pub(crate) slots_off: u64,
    pub(crate) seen_off: u64,
    pub(crate) workers: u32,
    pub(crate) layout: HandshakeLayout,
}

impl HandshakeRegion {
    pub(crate) fn of(h: &RuntimeHeader) -> HandshakeRegion {
        HandshakeRegion {
            slots_off: h.handshake_off,
            seen_off: h.handshake_seen_off,
            workers: h.worker_count,
            layout: HandshakeLayout::from_u32(h.handshake_layout)
                .unwrap_or(HandshakeLayout::COMBINED),
        }
    }

    /// Copies the slots and the AICPU's record of the image at `image` back (two D2H copies).
    pub(crate) fn read<D: BackendDevice>(
        &self,
        device: &D,
        image: DevicePtr,
    ) -> Result<Vec<CoreHandshake>, BackendError> {
        let stride = u64::from(self.layout.slot_bytes);
        let mut slots = vec![0u8; (stride * u64::from(self.workers)) as usize];
        device.copy_dtoh(image.add(self.slots_off), &mut slots)?;
        let mut seen = vec![0u8; 4 * self.workers as usize];
        device.copy_dtoh(image.add(self.seen_off), &mut seen)?;
        let u32_at = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        Ok((0..self.workers)
            .map(|i| {
                let s = (stride * u64::from(i)) as usize;
                let l = &self.layout;
                CoreHandshake {
                    core: i,
                    aicpu_saw: u32_at(&seen, 4 * i as usize),
                    memory_done: u32_at(&slots, s + l.aicore_done_off as usize),
                    physical_core_id: u32_at(&slots, s + l.physical_core_id_off as usize),
                    core_type: u32_at(&slots, s + l.core_type_off as usize),
                }
            })
            .collect())
    }
}
