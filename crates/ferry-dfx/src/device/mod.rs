//! The device-side producer engine: record write, buffer switch, the two gates.
//!
//! # Real-time contract
//! [`DeviceWriter::record`] never allocates, locks or makes a system call: on the hot path it is
//! one bounds check, one plain store of the record and one counter update. When a buffer fills,
//! the writer switches buffers: it publishes the full buffer (push gate
//! [`DeviceWriter::wait_for_ready_queue_space`], then [`DeviceWriter::enqueue_ready`]) *before*
//! it claims a replacement (pop gate [`DeviceWriter::wait_for_free_queue_entry`]). Only the gates
//! may wait, and only under the run's [`Policy`]: each wait takes one budget once, before its loop,
//! measured on the device [`CycleClock`], and never re-armed. A wait spins briefly (crossbeam's
//! backoff steps; on a machine with few CPUs it only yields) and then naps with a capped timeout. After a gate runs out of
//! budget the lane is *degraded*: its next gates check once without waiting, until one succeeds,
//! so a dead host costs one budget per lane rather than one per buffer.
//!
//! A gate fails only while ownership is still on the device (a full buffer not yet published, or
//! no replacement claimed), so the writer accounts exactly the affected records as dropped:
//! publishing and succeeding are one step, there is no post-publish wait.

use std::time::Duration;

use ferry_abi::dfx::{self, DfxLayout, DfxRegionHeader, LaneState, POLICY_DROP};

use crate::clock::CycleClock;
use crate::config::{BuildError, Policy};
use crate::mem::ShmRegion;
use crate::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use crate::sync::{Arc, Unparker};

mod writer;

pub use writer::{DeviceWriter, LaneStats};

/// First nap once spinning is exhausted.
const NAP_MIN: Duration = Duration::from_micros(2);
/// Cap of one nap inside a gate wait (how late a device thread may notice host progress).
pub const NAP_MAX: Duration = Duration::from_micros(200);

const OFF_CUR_PTR: usize = core::mem::offset_of!(LaneState, current_buf_ptr);
const OFF_CUR_SEQ: usize = core::mem::offset_of!(LaneState, current_buf_seq);
const OFF_GATE: usize = core::mem::offset_of!(LaneState, gate_state);
const OFF_TOTAL: usize = core::mem::offset_of!(LaneState, total_record_count);
const OFF_DROPPED: usize = core::mem::offset_of!(LaneState, dropped_record_count);
const OFF_STALL: usize = core::mem::offset_of!(LaneState, stall_cycles);
const OFF_SWITCHES: usize = core::mem::offset_of!(LaneState, switch_count);
const OFF_TIMEOUTS: usize = core::mem::offset_of!(LaneState, gate_timeouts);
const OFF_QUEUE: usize = core::mem::offset_of!(LaneState, ready_queue);
const OFF_KIND: usize = core::mem::offset_of!(LaneState, kind);
const OFF_MAX_STALL: usize = core::mem::offset_of!(LaneState, max_stall_cycles);

/// Gate waits a lane's stall log keeps (the most recent ones; older waits are overwritten).
pub const STALL_RING: usize = 15;
/// Run ends a lane's log keeps (the most recent ones; older ends are overwritten): one session
/// attributes the records of at most this many runs.
pub const RUN_RING: usize = 256;
/// Bytes of one run-end entry: `[produced, dropped, stall_cycles, stall_waits, seq]: [u64; 5]`.
pub const RUN_END_BYTES: usize = 40;
/// Offset of the run-end entries in a lane's log.
pub const RUN_LOG_OFFSET: usize = 16 + 16 * STALL_RING;
/// Bytes of one lane's log (gate waits, then run ends).
pub const STALL_LOG_STRIDE: usize = RUN_LOG_OFFSET + RUN_END_BYTES * RUN_RING;

/// Offset in a lane's log of gate wait `n` (counted from 0): entry `n % STALL_RING`, after the
/// log's two counters. The writer logs through it and the host reads through it.
pub fn stall_entry_offset(n: u64) -> usize {
    16 + 16 * (n % STALL_RING as u64) as usize
}

/// Bytes of the stall logs of `lanes` lanes.
///
/// # Layout
/// The logs follow the ABI region (at `DfxLayout::region_size()`), one per lane, in lane order,
/// [`STALL_LOG_STRIDE`] bytes each: `waits: u64` @0 (free-running number of gate waits that
/// waited), `runs: u64` @8 (free-running number of run ends: writers of the lane that finished),
/// then [`STALL_RING`] entries `[start, end]: [u64; 2]` in device cycles; wait `n` (from 0) is
/// entry `n % STALL_RING` @`16 + 16 * (n % STALL_RING)`; then [`RUN_RING`] run-end entries from
/// [`RUN_LOG_OFFSET`]: run end `n` is entry `n % RUN_RING` @`RUN_LOG_OFFSET + RUN_END_BYTES *
/// (n % RUN_RING)`, the lane's counters as its writer left them when the run ended
/// (`[produced, dropped, stall_cycles, stall_waits, seq]`, `seq` the sequence number its next
/// buffer will carry: every buffer of the run has a smaller one, since the end-of-run flush
/// publishes the last). Written only by the lane's writer, on the gate path and at its flush
/// (never on the record path); the host reads them after the writers finished. A region without
/// room for them has no stall log (totals only).
pub const fn stall_log_size(lanes: u32) -> usize {
    lanes as usize * STALL_LOG_STRIDE
}

/// A gate ran out of budget; ownership stayed on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateTimeout;

impl core::fmt::Display for GateTimeout {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("gate wait ran out of budget")
    }
}

impl std::error::Error for GateTimeout {}

/// Per-lane wake-up hints from the host to a waiting device thread (simulator only, and only
/// with [`DfxConfig::doorbell_hint`](crate::DfxConfig::doorbell_hint): hardware AICPU threads
/// cannot be woken by the host and rely on their capped nap).
#[derive(Debug, Default)]
pub(crate) struct LaneBells {
    slots: Vec<std::sync::Mutex<Option<crossbeam_utils::sync::Unparker>>>,
}

impl LaneBells {
    pub(crate) fn new(lanes: usize) -> Self {
        Self { slots: (0..lanes).map(|_| std::sync::Mutex::new(None)).collect() }
    }

    /// Wakes the writer of `lane`, if one is waiting or about to.
    pub(crate) fn ring(&self, lane: u32) {
        if let Some(slot) = self.slots.get(lane as usize) {
            if let Some(u) = &*slot.lock().unwrap_or_else(|e| e.into_inner()) {
                u.unpark();
            }
        }
    }

    fn set(&self, lane: u32, u: Option<crossbeam_utils::sync::Unparker>) {
        if let Some(slot) = self.slots.get(lane as usize) {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = u;
        }
    }
}

/// The wake-up hints of a region whose configuration asked for them
/// ([`DfxConfig::doorbell_hint`](crate::DfxConfig::doorbell_hint)): the drain shard of each ready
/// queue (rung by the device after a publish) and each lane's writer (rung by the host after a
/// push into its free queue or a pop of its ready queue). The drain bells are filled when the
/// region joins an engine.
#[derive(Debug, Default)]
pub(crate) struct RegionBells {
    /// Per ready queue: the unparker of the drain shard that serves it.
    pub(crate) drains: std::sync::OnceLock<Vec<Unparker>>,
    /// Per lane: the writer's parker.
    pub(crate) lanes: LaneBells,
}

impl RegionBells {
    fn ring_drain(&self, q: u32) {
        if let Some(b) = self.drains.get().and_then(|d| d.get(q as usize)) {
            b.unpark();
        }
    }
}

#[derive(Debug)]
struct Claims {
    queues: AtomicU32,
    lanes: Box<[AtomicBool]>,
}

/// The device's handle on a DFX region: what the AICPU program holds.
///
/// Obtain it from [`crate::DfxTransport::device_region`] (simulated runs) or
/// [`DeviceRegion::attach`] (a device program that only has the region and a clock). Clones share
/// the ownership claims, so two writers can never own one ready queue or one lane.
#[derive(Clone)]
pub struct DeviceRegion {
    view: ShmRegion,
    device_addr: u64,
    layout: DfxLayout,
    budget: u64,
    lanes: Arc<Vec<(u32, u32)>>,
    clock: std::sync::Arc<dyn CycleClock>,
    bells: Option<std::sync::Arc<RegionBells>>,
    notify: Option<HostNotify>,
    claims: Arc<Claims>,
    /// Offset of the first lane's stall log, when the region has room for them.
    stall_log: Option<usize>,
}

/// A device-to-host doorbell hint for a region attached without the host's parkers (a device
/// program that only has the region): called with the ready queue after each publish. Optional
/// and off by default: real hardware has no such signal, the host polls.
pub type HostNotify = std::sync::Arc<dyn Fn(u32) + Send + Sync>;

impl core::fmt::Debug for DeviceRegion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceRegion")
            .field("device_addr", &self.device_addr)
            .field("layout", &self.layout)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

fn read_header(v: &ShmRegion) -> DfxRegionHeader {
    // Relaxed: the host wrote the header before any device thread started (thread start / launch
    // orders it); nothing here races.
    let u = |o| v.load_u32(o, Ordering::Relaxed);
    DfxRegionHeader {
        magic: u(0),
        version: u(4),
        ready_queues: u(8),
        ready_depth: u(12),
        free_slots: u(16),
        lanes: u(20),
        buffers: u(24),
        buffer_stride: u(28),
        record_size: u(32),
        records_per_buffer: u(36),
        count_placement: u(40),
        policy: u(44),
        block_budget_cycles: v.load_u64(48, Ordering::Relaxed),
        drop_wait_cycles: v.load_u64(56, Ordering::Relaxed),
    }
}

impl DeviceRegion {
    /// Attaches to a region the host initialised: reads the header and each lane's queue and kind.
    ///
    /// `view` is the device view, `device_addr` the device address of its offset 0.
    ///
    /// # Errors
    /// [`BuildError::BadHeader`] for a foreign or corrupt header, [`BuildError::RegionTooSmall`]
    /// when `view` is shorter than the header's layout.
    pub fn attach(
        view: ShmRegion,
        device_addr: u64,
        clock: std::sync::Arc<dyn CycleClock>,
    ) -> Result<Self, BuildError> {
        if view.len() < 64 {
            return Err(BuildError::RegionTooSmall { need: 64, have: view.len() });
        }
        let h = read_header(&view);
        let layout = DfxLayout::from_header(&h).map_err(|_| BuildError::BadHeader)?;
        if view.len() < layout.region_size() {
            return Err(BuildError::RegionTooSmall {
                need: layout.region_size(),
                have: view.len(),
            });
        }
        let budget =
            if h.policy == POLICY_DROP { h.drop_wait_cycles } else { h.block_budget_cycles };
        let lanes = (0..layout.lanes)
            .map(|l| {
                // Relaxed: host-initialised before the device started.
                let q = view.load_u32(layout.lane_field_offset(l, OFF_QUEUE), Ordering::Relaxed);
                let k = view.load_u32(layout.lane_field_offset(l, OFF_KIND), Ordering::Relaxed);
                (q, k)
            })
            .collect();
        let claims = Claims {
            queues: AtomicU32::new(0),
            lanes: (0..layout.lanes).map(|_| AtomicBool::new(false)).collect(),
        };
        let log = layout.region_size();
        let stall_log = (view.len() >= log + stall_log_size(layout.lanes)).then_some(log);
        Ok(Self {
            view,
            device_addr,
            layout,
            budget,
            lanes: Arc::new(lanes),
            clock,
            bells: None,
            notify: None,
            claims: Arc::new(claims),
            stall_log,
        })
    }

    /// The same region with the host's wake-up hints (the transport's own region when its
    /// configuration asked for them).
    pub(crate) fn with_bells(self, bells: Option<std::sync::Arc<RegionBells>>) -> DeviceRegion {
        DeviceRegion { bells, ..self }
    }

    /// The same region with `notify` called after every publish on a ready queue (with the
    /// queue), when the host's own doorbells are out of reach: a device program rings the host
    /// through its OS (the AICPU OS services' `notify_host`). An optional hint (the host polls
    /// anyway); cold path only: a buffer switch.
    pub fn with_host_notify(&self, notify: HostNotify) -> DeviceRegion {
        DeviceRegion { notify: Some(notify), ..self.clone() }
    }

    /// What rings the host's drain shard of each ready queue, as a callback a device-to-host
    /// doorbell can route to: the host side of [`with_host_notify`](Self::with_host_notify).
    /// `None` unless the region was configured with the doorbell hint
    /// ([`DfxBuilder::doorbell_hint`](crate::DfxBuilder::doorbell_hint)), or for an attached
    /// region.
    pub fn host_doorbell(&self) -> Option<HostNotify> {
        let bells = self.bells.clone()?;
        Some(std::sync::Arc::new(move |q: u32| bells.ring_drain(q)))
    }

    /// The same region with another device clock (e.g. one clock per AICPU thread in tests).
    pub fn with_clock(&self, clock: std::sync::Arc<dyn CycleClock>) -> DeviceRegion {
        DeviceRegion { clock, ..self.clone() }
    }

    /// The region geometry.
    pub fn layout(&self) -> &DfxLayout {
        &self.layout
    }

    /// Lanes published through ready queue `q`, in lane order.
    pub fn lanes_of_queue(&self, q: u32) -> Vec<u32> {
        (0..self.layout.lanes).filter(|&l| self.lanes[l as usize].0 == q).collect()
    }

    /// The gate budget of this run (Block budget or Drop bound), in device cycles.
    pub fn budget_cycles(&self) -> u64 {
        self.budget
    }
}

/// Policy of a region header value.
pub(crate) fn policy_word(p: Policy) -> u32 {
    match p {
        Policy::Block => dfx::POLICY_BLOCK,
        Policy::Drop => dfx::POLICY_DROP,
    }
}
