//! DFX transport layouts: the region that device profiling writers and host collectors share.
//!
//! One region per subsystem holds, in this order (see [`DfxLayout`] for the offsets):
//!
//! | part | size | who writes what |
//! |---|---|---|
//! | [`DfxRegionHeader`] | 64 B | host, once, before the device starts |
//! | [`ReadyQueueIndices`] | 128 B | `queue_heads[q]`: the drain shard of queue `q`; `queue_tails[q]`: AICPU thread `q` |
//! | ready entries `[ready_queues][ready_depth]` | 32 B each ([`ReadyEntry`]) | AICPU thread `q` (before advancing its tail) |
//! | [`LaneState`] `[lanes]` | 192 B each | free-queue `tail`/`buffer_ptrs`: the owning drain shard; everything else: the lane's AICPU thread |
//! | record buffers `[buffers]` | [`DfxLayout::buffer_stride`] each | the lane holding the buffer (device) or the host, never both |
//!
//! Two kinds of queue cross the boundary, with different index conventions (both the original's):
//!
//! * the **ready queue** (device → host, one per AICPU thread) uses *wrapped* indices in
//!   `[0, depth)`; empty is `head == tail`, full is `(tail + 1) % depth == head`, so its capacity is
//!   `depth − 1` ([`rq_capacity`]);
//! * the **free queue** (host → device, one per lane) uses *free-running* `u32` counters; the slot is
//!   `counter % slots`, empty is `head == tail`, full is `tail − head ≥ slots` (wrapping), so its
//!   capacity is exactly `slots` ([`fq_capacity`]). `slots` must be a power of two so that the slot of
//!   a counter stays continuous when the counter wraps at 2³².
//!
//! The index arithmetic is pure `const fn` so both sides (and the property tests) share it.
//!
//! # Examples
//! ```
//! use ferry_abi::dfx::{self, BufferCountPlacement, DfxLayout};
//! let layout = DfxLayout {
//!     ready_queues: 4,
//!     ready_depth: 8,
//!     free_slots: 4,
//!     lanes: 4,
//!     buffers: 16,
//!     record_size: 32,
//!     records_per_buffer: 1000,
//!     placement: BufferCountPlacement::AfterRecords,
//! };
//! assert!(layout.validate().is_ok());
//! // The original's AicpuTask buffer: 1000 × 32 B records, then the count, rounded to 64.
//! assert_eq!(layout.buffer_stride(), 32_064);
//! assert_eq!(dfx::rq_capacity(8), 7);
//! assert!(dfx::fq_is_full(u32::MAX - 1, 2, 4)); // four entries across the u32 wrap
//! ```

use core::mem::{align_of, offset_of, size_of};

/// Magic number at offset 0 of every DFX region (`"DFXR"` in little-endian ASCII).
pub const DFX_REGION_MAGIC: u32 = 0x5258_4644;
/// Layout version of the DFX region; bump on any change to the structures in this module.
pub const DFX_REGION_VERSION: u32 = 1;
/// Most ready queues (AICPU threads) a region can describe; both arches' `max_aicpu_threads` fit.
pub const MAX_READY_QUEUES: usize = 16;
/// Most slots a free queue can have (must be a power of two, see the module docs).
pub const FREE_QUEUE_MAX_SLOTS: usize = 8;
/// Cache-line size every shared structure is padded to.
pub const CACHE_LINE: usize = 64;

/// Header at offset 0 of a DFX region, written once by the host before any device thread runs.
///
/// # Layout
/// 64 bytes, align 64: `magic` @0, `version` @4, `ready_queues` @8, `ready_depth` @12,
/// `free_slots` @16, `lanes` @20, `buffers` @24, `buffer_stride` @28, `record_size` @32,
/// `records_per_buffer` @36, `count_placement` @40, `policy` @44, `block_budget_cycles` @48,
/// `drop_wait_cycles` @56.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DfxRegionHeader {
    /// [`DFX_REGION_MAGIC`].
    pub magic: u32,
    /// [`DFX_REGION_VERSION`].
    pub version: u32,
    /// Number of ready queues (`MAX_T`).
    pub ready_queues: u32,
    /// Ready-queue depth `RQ` (capacity `RQ − 1`).
    pub ready_depth: u32,
    /// Free-queue slot count `SLOT` (power of two, at most [`FREE_QUEUE_MAX_SLOTS`]).
    pub free_slots: u32,
    /// Number of lanes (free queues).
    pub lanes: u32,
    /// Number of record buffers carved in the region.
    pub buffers: u32,
    /// Bytes from one buffer to the next.
    pub buffer_stride: u32,
    /// Bytes per record.
    pub record_size: u32,
    /// Records one buffer holds.
    pub records_per_buffer: u32,
    /// [`BufferCountPlacement`] as `u32`.
    pub count_placement: u32,
    /// Full-buffer policy of the run: [`POLICY_BLOCK`] or [`POLICY_DROP`].
    pub policy: u32,
    /// Budget of one Block-policy gate wait, in device cycles (the arch's 30-s constant).
    pub block_budget_cycles: u64,
    /// Budget of one Drop-policy gate wait, in device cycles (short).
    pub drop_wait_cycles: u64,
}

/// [`DfxRegionHeader::policy`]: wait at a gate for up to `block_budget_cycles` (lossless).
pub const POLICY_BLOCK: u32 = 0;
/// [`DfxRegionHeader::policy`]: wait at a gate for up to `drop_wait_cycles`, then drop and count.
pub const POLICY_DROP: u32 = 1;

/// Head and tail words of every ready queue, heads and tails on separate cache lines.
///
/// # Layout
/// 128 bytes, align 64: `queue_heads[16]` @0 (host-written, one line), `queue_tails[16]` @64
/// (device-written, the next line). Indices are wrapped into `[0, ready_depth)`.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadyQueueIndices {
    /// Consumer index of each ready queue; written only by the drain shard serving it.
    pub queue_heads: [u32; MAX_READY_QUEUES],
    /// Producer index of each ready queue; written only by the AICPU thread owning it.
    pub queue_tails: [u32; MAX_READY_QUEUES],
}

/// One ready-queue entry: a full buffer handed from a lane to the host.
///
/// A `buffer_ptr` of 0 means "not published yet"; the host retries on its next sweep.
///
/// # Layout
/// 32 bytes, align 32: `index` @0 (lane id), `kind` @4 (buffer kind), `buffer_ptr` @8 (device
/// address of the full buffer), `buffer_seq` @16 (per-lane sequence number), `_reserved` @20..32.
#[repr(C, align(32))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadyEntry {
    /// Lane (free queue) the buffer belongs to.
    pub index: u32,
    /// Buffer kind (subsystem-defined, e.g. ChipSwimlane's 0..3); 0 where unused.
    pub kind: u32,
    /// Device address of the full buffer; 0 = not published.
    pub buffer_ptr: u64,
    /// Per-lane buffer sequence number, contiguous from 0 in a lossless run.
    pub buffer_seq: u32,
    /// Zero.
    pub _reserved: [u32; 3],
}

/// A lane's free queue: buffer pointers published by the host, claimed by the device.
///
/// Free-running `u32` counters; the slot of counter `c` is `c % free_slots`.
///
/// # Layout
/// 128 bytes, align 8: `buffer_ptrs[8]` @0 (host-written), `head` @64 (device-written consumer
/// counter), `tail` @68 (host-written producer counter), `_reserved` @72..128. Only the first
/// `free_slots` pointers are used. The two counters share a line: at 128 B per lane there is no room
/// to split them, and each line is shared only by the one lane and its one drain shard.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FreeQueue {
    /// Device addresses of free buffers, indexed by `counter % free_slots`.
    pub buffer_ptrs: [u64; FREE_QUEUE_MAX_SLOTS],
    /// Consumer counter (device).
    pub head: u32,
    /// Producer counter (host).
    pub tail: u32,
    /// Zero.
    pub _reserved: [u32; 14],
}

/// Per-lane state: the free queue plus the device's current-buffer bookkeeping and counters.
///
/// Every field except the free queue's `tail`/`buffer_ptrs` and the host-initialised
/// `ready_queue`/`kind` is written only by the lane's AICPU thread. Counters only increase.
///
/// # Layout
/// 192 bytes, align 64: `free_queue` @0 (128 B), `current_buf_ptr` @128, `current_buf_seq` @136,
/// `gate_state` @140, `total_record_count` @144, `dropped_record_count` @152, `stall_cycles` @160,
/// `switch_count` @168, `gate_timeouts` @172, `ready_queue` @176, `kind` @180, `max_stall_cycles` @184.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneState {
    /// The lane's free queue.
    pub free_queue: FreeQueue,
    /// Device address of the buffer being filled; 0 = none.
    pub current_buf_ptr: u64,
    /// Sequence number the current (or next) buffer carries.
    pub current_buf_seq: u32,
    /// Which gate the lane is waiting at ([`GATE_NONE`], [`GATE_PUSH`], [`GATE_POP`]).
    pub gate_state: u32,
    /// Records the lane attempted to write (produced).
    pub total_record_count: u64,
    /// Records the lane accounted as dropped.
    pub dropped_record_count: u64,
    /// Device cycles spent waiting at either gate.
    pub stall_cycles: u64,
    /// Buffers published to the ready queue.
    pub switch_count: u32,
    /// Gate waits that ran out of budget.
    pub gate_timeouts: u32,
    /// Ready queue (AICPU thread) that publishes this lane's buffers; host-initialised, fixed.
    pub ready_queue: u32,
    /// Buffer kind of this lane; host-initialised, fixed.
    pub kind: u32,
    /// Longest single gate wait, in device cycles.
    pub max_stall_cycles: u64,
}

/// [`LaneState::gate_state`]: not waiting.
pub const GATE_NONE: u32 = 0;
/// [`LaneState::gate_state`]: waiting for ready-queue space (push gate).
pub const GATE_PUSH: u32 = 1;
/// [`LaneState::gate_state`]: waiting for a free buffer (pop gate).
pub const GATE_POP: u32 = 2;

/// Where a record buffer keeps its `u32` record count.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferCountPlacement {
    /// Records from offset 0, then the count; the whole rounded up to 64 B (ChipSwimlane, PMU,
    /// ArgsDump `TypedBuffer`).
    AfterRecords = 0,
    /// The count at offset 0, padded to 64 B; records from offset 64 (DepGen, ScopeStats).
    FirstPadded64 = 1,
}

impl BufferCountPlacement {
    /// Decodes the header value; `None` for an unknown value.
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::AfterRecords),
            1 => Some(Self::FirstPadded64),
            _ => None,
        }
    }

    /// Offset of the first record inside a buffer.
    pub const fn records_offset(self) -> usize {
        match self {
            Self::AfterRecords => 0,
            Self::FirstPadded64 => CACHE_LINE,
        }
    }

    /// Offset of the `u32` count inside a buffer of `records` records of `record_size` bytes.
    pub const fn count_offset(self, record_size: usize, records: usize) -> usize {
        match self {
            Self::AfterRecords => record_size * records,
            Self::FirstPadded64 => 0,
        }
    }

    /// Size of one buffer, a multiple of 64.
    pub const fn buffer_size(self, record_size: usize, records: usize) -> usize {
        match self {
            Self::AfterRecords => align_up(record_size * records + 4, CACHE_LINE),
            Self::FirstPadded64 => CACHE_LINE + align_up(record_size * records, CACHE_LINE),
        }
    }
}

/// Rounds `v` up to a multiple of `align` (a power of two).
pub const fn align_up(v: usize, align: usize) -> usize {
    (v + align - 1) & !(align - 1)
}

/// Why a [`DfxLayout`] is not usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// `ready_queues` is 0 or above [`MAX_READY_QUEUES`].
    ReadyQueues,
    /// `ready_depth` is below 2 (a ready queue must hold at least one entry).
    ReadyDepth,
    /// `free_slots` is 0, not a power of two, or above [`FREE_QUEUE_MAX_SLOTS`].
    FreeSlots,
    /// `lanes` is 0.
    Lanes,
    /// `record_size` is 0 or not a multiple of 4, or `records_per_buffer` is 0.
    Records,
    /// The region would not fit the `u32` offsets of the header.
    TooLarge,
    /// A header's magic, version or count placement is not this module's.
    BadHeader,
}

impl core::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::ReadyQueues => "ready queue count out of range",
            Self::ReadyDepth => "ready queue depth below 2",
            Self::FreeSlots => "free slot count must be a power of two up to 8",
            Self::Lanes => "no lanes",
            Self::Records => "record size or count invalid",
            Self::TooLarge => "region larger than 4 GiB",
            Self::BadHeader => "not a dfx region header of this version",
        })
    }
}

/// The geometry of one DFX region; every offset both sides use is a `const fn` of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DfxLayout {
    /// Ready queues (`MAX_T`), one per AICPU thread.
    pub ready_queues: u32,
    /// Ready-queue depth `RQ`.
    pub ready_depth: u32,
    /// Free-queue slots `SLOT`.
    pub free_slots: u32,
    /// Lanes (free queues).
    pub lanes: u32,
    /// Record buffers carved in the region (all lanes' pools plus any host reserve).
    pub buffers: u32,
    /// Bytes per record.
    pub record_size: u32,
    /// Records per buffer.
    pub records_per_buffer: u32,
    /// Where each buffer keeps its count.
    pub placement: BufferCountPlacement,
}

impl DfxLayout {
    /// Offset of the [`ReadyQueueIndices`] block.
    pub const INDICES_OFFSET: usize = size_of::<DfxRegionHeader>();
    /// Offset of the first ready entry.
    pub const ENTRIES_OFFSET: usize = Self::INDICES_OFFSET + size_of::<ReadyQueueIndices>();

    /// Checks every limit; the offsets below are meaningful only for a valid layout.
    ///
    /// # Errors
    /// The first violated limit.
    pub const fn validate(&self) -> Result<(), LayoutError> {
        if self.ready_queues == 0 || self.ready_queues as usize > MAX_READY_QUEUES {
            return Err(LayoutError::ReadyQueues);
        }
        if self.ready_depth < 2 {
            return Err(LayoutError::ReadyDepth);
        }
        if self.free_slots == 0
            || !self.free_slots.is_power_of_two()
            || self.free_slots as usize > FREE_QUEUE_MAX_SLOTS
        {
            return Err(LayoutError::FreeSlots);
        }
        if self.lanes == 0 {
            return Err(LayoutError::Lanes);
        }
        if self.record_size == 0 || self.record_size % 4 != 0 || self.records_per_buffer == 0 {
            return Err(LayoutError::Records);
        }
        // Compute in u128 so that the check itself cannot overflow.
        let rq = self.ready_queues as u128 * self.ready_depth as u128 * 32;
        let lanes = self.lanes as u128 * 192;
        let buf = self.record_size as u128 * self.records_per_buffer as u128 + 128;
        let total =
            Self::ENTRIES_OFFSET as u128 + rq + 64 + lanes + 64 + buf * self.buffers as u128;
        if total > u32::MAX as u128 {
            return Err(LayoutError::TooLarge);
        }
        Ok(())
    }

    /// Offset of `queue_heads[q]`.
    pub const fn head_offset(&self, q: u32) -> usize {
        Self::INDICES_OFFSET + offset_of!(ReadyQueueIndices, queue_heads) + 4 * q as usize
    }

    /// Offset of `queue_tails[q]`.
    pub const fn tail_offset(&self, q: u32) -> usize {
        Self::INDICES_OFFSET + offset_of!(ReadyQueueIndices, queue_tails) + 4 * q as usize
    }

    /// Offset of entry `i` of ready queue `q`.
    pub const fn entry_offset(&self, q: u32, i: u32) -> usize {
        Self::ENTRIES_OFFSET
            + (q as usize * self.ready_depth as usize + i as usize) * size_of::<ReadyEntry>()
    }

    /// Offset of the first [`LaneState`].
    pub const fn lanes_offset(&self) -> usize {
        align_up(
            Self::ENTRIES_OFFSET
                + self.ready_queues as usize * self.ready_depth as usize * size_of::<ReadyEntry>(),
            CACHE_LINE,
        )
    }

    /// Offset of lane `l`'s [`LaneState`].
    pub const fn lane_offset(&self, l: u32) -> usize {
        self.lanes_offset() + l as usize * size_of::<LaneState>()
    }

    /// Offset of a field of lane `l`'s state, given the field's offset inside [`LaneState`].
    pub const fn lane_field_offset(&self, l: u32, field: usize) -> usize {
        self.lane_offset(l) + field
    }

    /// Offset of slot `slot` of lane `l`'s free queue.
    pub const fn free_slot_offset(&self, l: u32, slot: u32) -> usize {
        self.lane_offset(l) + offset_of!(FreeQueue, buffer_ptrs) + 8 * slot as usize
    }

    /// Offset of lane `l`'s free-queue `head`.
    pub const fn free_head_offset(&self, l: u32) -> usize {
        self.lane_offset(l) + offset_of!(FreeQueue, head)
    }

    /// Offset of lane `l`'s free-queue `tail`.
    pub const fn free_tail_offset(&self, l: u32) -> usize {
        self.lane_offset(l) + offset_of!(FreeQueue, tail)
    }

    /// Offset of the first record buffer.
    pub const fn buffers_offset(&self) -> usize {
        align_up(self.lanes_offset() + self.lanes as usize * size_of::<LaneState>(), CACHE_LINE)
    }

    /// Bytes from one buffer to the next (a multiple of 64).
    pub const fn buffer_stride(&self) -> usize {
        self.placement.buffer_size(self.record_size as usize, self.records_per_buffer as usize)
    }

    /// Offset of buffer `b`.
    pub const fn buffer_offset(&self, b: u32) -> usize {
        self.buffers_offset() + b as usize * self.buffer_stride()
    }

    /// Offset of the records inside any buffer.
    pub const fn records_offset(&self) -> usize {
        self.placement.records_offset()
    }

    /// Offset of the count inside any buffer.
    pub const fn count_offset(&self) -> usize {
        self.placement.count_offset(self.record_size as usize, self.records_per_buffer as usize)
    }

    /// Total bytes of the region.
    pub const fn region_size(&self) -> usize {
        self.buffer_offset(self.buffers)
    }

    /// Index of the buffer at region offset `off`, if `off` is exactly a buffer start.
    pub const fn buffer_index_at(&self, off: usize) -> Option<u32> {
        let base = self.buffers_offset();
        if off < base {
            return None;
        }
        let rel = off - base;
        let stride = self.buffer_stride();
        if rel % stride != 0 || rel / stride >= self.buffers as usize {
            return None;
        }
        Some((rel / stride) as u32)
    }

    /// Recovers the layout from a region header (what a device program does on attach).
    ///
    /// # Errors
    /// [`LayoutError::BadHeader`] for a foreign header, else what [`DfxLayout::validate`] says.
    pub const fn from_header(h: &DfxRegionHeader) -> Result<DfxLayout, LayoutError> {
        if h.magic != DFX_REGION_MAGIC || h.version != DFX_REGION_VERSION {
            return Err(LayoutError::BadHeader);
        }
        let placement = match BufferCountPlacement::from_u32(h.count_placement) {
            Some(p) => p,
            None => return Err(LayoutError::BadHeader),
        };
        let l = DfxLayout {
            ready_queues: h.ready_queues,
            ready_depth: h.ready_depth,
            free_slots: h.free_slots,
            lanes: h.lanes,
            buffers: h.buffers,
            record_size: h.record_size,
            records_per_buffer: h.records_per_buffer,
            placement,
        };
        match l.validate() {
            Ok(()) => Ok(l),
            Err(e) => Err(e),
        }
    }

    /// The header the host writes at offset 0 for this layout (policy Block, budgets 0: the
    /// caller fills the run's policy and budgets).
    pub const fn header(&self) -> DfxRegionHeader {
        DfxRegionHeader {
            magic: DFX_REGION_MAGIC,
            version: DFX_REGION_VERSION,
            ready_queues: self.ready_queues,
            ready_depth: self.ready_depth,
            free_slots: self.free_slots,
            lanes: self.lanes,
            buffers: self.buffers,
            buffer_stride: self.buffer_stride() as u32,
            record_size: self.record_size,
            records_per_buffer: self.records_per_buffer,
            count_placement: self.placement as u32,
            policy: POLICY_BLOCK,
            block_budget_cycles: 0,
            drop_wait_cycles: 0,
        }
    }
}

// ---- ready queue index arithmetic (wrapped indices, capacity depth − 1) ----

/// The index after `i` in a ready queue of `depth` entries.
pub const fn rq_next(i: u32, depth: u32) -> u32 {
    if i + 1 >= depth {
        0
    } else {
        i + 1
    }
}

/// Whether a ready queue is empty.
pub const fn rq_is_empty(head: u32, tail: u32) -> bool {
    head == tail
}

/// Whether a ready queue is full (`next_tail == head`).
pub const fn rq_is_full(head: u32, tail: u32, depth: u32) -> bool {
    rq_next(tail, depth) == head
}

/// Entries in a ready queue (both indices must be valid).
pub const fn rq_len(head: u32, tail: u32, depth: u32) -> u32 {
    if tail >= head {
        tail - head
    } else {
        depth - head + tail
    }
}

/// Entries a ready queue of `depth` slots can hold: one slot is always unused.
pub const fn rq_capacity(depth: u32) -> u32 {
    depth - 1
}

/// Whether both indices are inside `[0, depth)`; anything else is corruption.
pub const fn rq_indices_valid(head: u32, tail: u32, depth: u32) -> bool {
    head < depth && tail < depth
}

// ---- free queue index arithmetic (free-running u32 counters, capacity = slots) ----

/// Entries in a free queue.
pub const fn fq_len(head: u32, tail: u32) -> u32 {
    tail.wrapping_sub(head)
}

/// Whether a free queue is empty.
pub const fn fq_is_empty(head: u32, tail: u32) -> bool {
    head == tail
}

/// Whether a free queue of `slots` slots is full.
pub const fn fq_is_full(head: u32, tail: u32, slots: u32) -> bool {
    fq_len(head, tail) >= slots
}

/// Whether a free queue of `slots` slots can be at `head` and `tail`: it never holds more than
/// `slots` entries, so a tail further ahead (a corrupt or torn read of the host's word) names no
/// entry the device may claim.
pub const fn fq_indices_valid(head: u32, tail: u32, slots: u32) -> bool {
    fq_len(head, tail) <= slots
}

/// Slot that counter `counter` uses (`slots` is a power of two).
pub const fn fq_slot(counter: u32, slots: u32) -> u32 {
    counter & (slots - 1)
}

/// Entries a free queue of `slots` slots can hold: all of them.
pub const fn fq_capacity(slots: u32) -> u32 {
    slots
}

// ---- compile-time layout checks ----

const _: () = assert!(size_of::<DfxRegionHeader>() == 64 && align_of::<DfxRegionHeader>() == 64);
const _: () = assert!(offset_of!(DfxRegionHeader, count_placement) == 40);
const _: () = assert!(size_of::<ReadyQueueIndices>() == 128);
const _: () = assert!(offset_of!(ReadyQueueIndices, queue_tails) == 64);
const _: () = assert!(size_of::<ReadyEntry>() == 32 && align_of::<ReadyEntry>() == 32);
const _: () = assert!(offset_of!(ReadyEntry, kind) == 4);
const _: () = assert!(offset_of!(ReadyEntry, buffer_ptr) == 8);
const _: () = assert!(offset_of!(ReadyEntry, buffer_seq) == 16);
const _: () = assert!(size_of::<FreeQueue>() == 128);
const _: () = assert!(offset_of!(FreeQueue, head) == 64 && offset_of!(FreeQueue, tail) == 68);
const _: () = assert!(size_of::<LaneState>() == 192 && align_of::<LaneState>() == 64);
const _: () = assert!(offset_of!(LaneState, current_buf_ptr) == 128);
const _: () = assert!(offset_of!(LaneState, current_buf_seq) == 136);
const _: () = assert!(offset_of!(LaneState, gate_state) == 140);
const _: () = assert!(offset_of!(LaneState, total_record_count) == 144);
const _: () = assert!(offset_of!(LaneState, dropped_record_count) == 152);
const _: () = assert!(offset_of!(LaneState, stall_cycles) == 160);
const _: () = assert!(offset_of!(LaneState, switch_count) == 168);
const _: () = assert!(offset_of!(LaneState, gate_timeouts) == 172);
const _: () =
    assert!(offset_of!(LaneState, ready_queue) == 176 && offset_of!(LaneState, kind) == 180);
const _: () = assert!(offset_of!(DfxRegionHeader, policy) == 44);
const _: () = assert!(offset_of!(DfxRegionHeader, block_budget_cycles) == 48);
const _: () = assert!(offset_of!(DfxRegionHeader, drop_wait_cycles) == 56);
const _: () = assert!(DfxLayout::ENTRIES_OFFSET == 192);
// The original's buffer sizes: AicpuTask (count after 1000 × 32 B) and DepGen (count first, 1024 × 4672 B).
const _: () = assert!(BufferCountPlacement::AfterRecords.buffer_size(32, 1000) == 32_064);
const _: () = assert!(BufferCountPlacement::FirstPadded64.buffer_size(4672, 1024) == 4_784_192);
const _: () = assert!(BufferCountPlacement::AfterRecords.count_offset(32, 1000) == 32_000);

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> DfxLayout {
        DfxLayout {
            ready_queues: 3,
            ready_depth: 5,
            free_slots: 4,
            lanes: 2,
            buffers: 3,
            record_size: 16,
            records_per_buffer: 10,
            placement: BufferCountPlacement::FirstPadded64,
        }
    }

    #[test]
    fn offsets_are_ordered_and_aligned() {
        let l = layout();
        assert_eq!(l.validate(), Ok(()));
        assert_eq!(l.head_offset(0), 64);
        assert_eq!(l.tail_offset(2), 64 + 64 + 8);
        assert_eq!(l.entry_offset(1, 0), 192 + 5 * 32);
        assert_eq!(l.lanes_offset() % 64, 0);
        assert!(l.lanes_offset() >= l.entry_offset(2, 4) + 32);
        assert_eq!(l.free_tail_offset(1), l.lane_offset(1) + 68);
        assert_eq!(l.buffers_offset() % 64, 0);
        assert_eq!(l.buffer_stride(), 64 + 192);
        assert_eq!(l.region_size(), l.buffers_offset() + 3 * 256);
        assert_eq!(l.buffer_index_at(l.buffer_offset(2)), Some(2));
        assert_eq!(l.buffer_index_at(l.buffer_offset(2) + 4), None);
        assert_eq!(l.buffer_index_at(l.buffer_offset(3)), None);
        assert_eq!(l.header().magic, DFX_REGION_MAGIC);
        assert_eq!(DfxLayout::from_header(&l.header()), Ok(l));
        let mut h = l.header();
        h.version += 1;
        assert_eq!(DfxLayout::from_header(&h), Err(LayoutError::BadHeader));
    }

    #[test]
    fn validate_rejects_each_limit() {
        let mut l = layout();
        l.free_slots = 3;
        assert_eq!(l.validate(), Err(LayoutError::FreeSlots));
        l.free_slots = 16;
        assert_eq!(l.validate(), Err(LayoutError::FreeSlots));
        let mut l = layout();
        l.ready_depth = 1;
        assert_eq!(l.validate(), Err(LayoutError::ReadyDepth));
        let mut l = layout();
        l.ready_queues = 17;
        assert_eq!(l.validate(), Err(LayoutError::ReadyQueues));
        let mut l = layout();
        l.lanes = 0;
        assert_eq!(l.validate(), Err(LayoutError::Lanes));
        let mut l = layout();
        l.record_size = 6;
        assert_eq!(l.validate(), Err(LayoutError::Records));
        let mut l = layout();
        l.buffers = u32::MAX;
        assert_eq!(l.validate(), Err(LayoutError::TooLarge));
    }
}
