//! What a run produced: host counters, lane snapshots, the per-lane reconcile.

use super::region::HostCtx;
use crate::device::STALL_RING;

/// Counters of the drain shards (one region's part of them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Ready entries popped.
    pub entries: u64,
    /// Entries whose lane, kind, queue or buffer pointer was invalid (buffer retired).
    pub invalid_entries: u64,
    /// Entries naming a buffer the device did not hold (the host had not given it to a free
    /// queue, or already took it back): a device that publishes a buffer twice. Skipped, so the
    /// buffer circulates once; the lane's reconcile shows what the device counted in it.
    pub duplicate_entries: u64,
    /// Times a top-up ran dry and listed the lane for retry.
    pub short_sites: u64,
    /// Retry attempts that pushed at least one buffer.
    pub retries_refilled: u64,
    /// Buffers pushed into free queues at runtime.
    pub free_pushes: u64,
    /// Device memory operations that failed.
    pub mem_errors: u64,
    /// Empty sweeps after which a shard serving this region slept (parked with a timeout).
    pub parks: u64,
}

impl DrainStats {
    pub(crate) fn add(&mut self, o: &DrainStats) {
        self.entries += o.entries;
        self.invalid_entries += o.invalid_entries;
        self.duplicate_entries += o.duplicate_entries;
        self.short_sites += o.short_sites;
        self.retries_refilled += o.retries_refilled;
        self.free_pushes += o.free_pushes;
        self.mem_errors += o.mem_errors;
        self.parks += o.parks;
    }
}

/// Counters of the replenish thread (one region's part of them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplenishStats {
    /// Done buffers routed to recycled lanes.
    pub routed: u64,
    /// Of those, routed to a shard other than their origin (deficit rebalancing).
    pub rebalanced: u64,
    /// Buffers "allocated" from the reserve to meet warm targets.
    pub allocated: u64,
    /// `publish_arena_acks` calls.
    pub ack_ticks: u64,
}

/// Per-lane counts seen by the collectors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Collected {
    pub(crate) records: u64,
    pub(crate) buffers: u64,
}

/// A host-side snapshot of one lane's device state (read through the memory operations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneSnapshot {
    /// Lane id.
    pub lane: u32,
    /// Gate the lane waits at ([`ferry_abi::dfx::GATE_NONE`], `GATE_PUSH`, `GATE_POP`).
    pub gate_state: u32,
    /// Buffers published so far.
    pub switch_count: u32,
    /// Records produced (as of the lane's last switch).
    pub produced: u64,
    /// Records dropped (as of the lane's last counter store).
    pub dropped: u64,
    /// Gate timeouts.
    pub gate_timeouts: u32,
    /// Cycles spent at gates.
    pub stall_cycles: u64,
    /// Longest single wait.
    pub max_stall_cycles: u64,
    /// Current buffer device address (0 = none).
    pub current_buf_ptr: u64,
    /// Buffers waiting in the lane's free queue (pushed by the host, not yet claimed).
    pub free_len: u32,
    /// Free entries of the lane's ready queue (0: a publish would wait at the push gate).
    pub ready_space: u32,
}

/// The most recent gate waits of a lane, oldest first, as the device logged them (`[start, end]`
/// in device cycles, `start < end`).
///
/// The device keeps the last [`STALL_RING`] waits; [`StallIntervals::total`] counts all of them,
/// so [`overwritten`](StallIntervals::overwritten) of them the ring no longer holds (their
/// cycles are still in the lane's `stall_cycles`). A kept wait shorter than one device tick has
/// an empty interval and is left out of [`as_slice`](StallIntervals::as_slice).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StallIntervals {
    ring: [[u64; 2]; STALL_RING],
    len: usize,
    /// Gate waits that waited, logged or overwritten.
    pub total: u64,
}

impl StallIntervals {
    /// The logged waits, oldest first.
    pub fn as_slice(&self) -> &[[u64; 2]] {
        &self.ring[..self.len]
    }

    /// Waits the ring no longer holds: all but the last [`STALL_RING`].
    pub fn overwritten(&self) -> u64 {
        self.total.saturating_sub(STALL_RING as u64)
    }

    pub(crate) fn push(&mut self, w: [u64; 2]) {
        if self.len < STALL_RING {
            self.ring[self.len] = w;
            self.len += 1;
        }
    }
}

/// A lane's counters at the end of one run, as its writer logged them at its end-of-run flush
/// (cumulative over the session: run k's own counts are the differences to run k-1's end).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunEnd {
    /// Records produced up to this run's end.
    pub produced: u64,
    /// Records dropped up to this run's end.
    pub dropped: u64,
    /// Device cycles spent at gates up to this run's end.
    pub stall_cycles: u64,
    /// Gate waits up to this run's end.
    pub stall_waits: u64,
    /// The sequence number of the lane's next buffer: every buffer the lane published up to this
    /// run's end has a smaller one.
    pub seq: u32,
}

/// The run ends of one lane, oldest first: the device keeps the last
/// [`RUN_RING`](crate::device::RUN_RING); [`RunEnds::total`] counts all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunEnds {
    /// Run ends logged or overwritten (writers of the lane that finished).
    pub total: u64,
    /// The logged ends, oldest first.
    pub ends: Vec<RunEnd>,
}

/// The reconcile line of one lane: produced = collected + dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneReconcile {
    /// Lane id.
    pub lane: u32,
    /// Records the device attempted to write.
    pub produced: u64,
    /// Records the collectors received.
    pub collected: u64,
    /// Records the device accounted dropped.
    pub dropped: u64,
    /// Buffers the collectors received.
    pub buffers_collected: u64,
    /// Buffers the device published.
    pub switches: u32,
    /// Gate waits that ran out of budget.
    pub gate_timeouts: u32,
    /// Device cycles spent at gates.
    pub stall_cycles: u64,
    /// Longest single gate wait.
    pub max_stall_cycles: u64,
    /// The individual gate waits (the most recent ones; empty when the region has no stall log).
    pub stalls: StallIntervals,
    /// The lane still held a buffer at reconcile (empty, or an unflushed writer).
    pub holds_buffer: bool,
}

impl LaneReconcile {
    /// Whether every produced record is either collected or dropped.
    pub fn holds(&self) -> bool {
        self.produced == self.collected + self.dropped
    }
}

/// What a run produced for one region: the sinks, the per-lane reconcile and host counters.
#[derive(Debug)]
pub struct RunReport<S> {
    /// One sink per collector shard of the region, in shard order.
    pub sinks: Vec<S>,
    /// One line per lane.
    pub lanes: Vec<LaneReconcile>,
    /// Drain shard counters of this region, summed over its shards.
    pub drain: DrainStats,
    /// Replenish thread counters of this region.
    pub replenish: ReplenishStats,
    /// Buffers taken out of circulation (invalid entries, failed pushes).
    pub retired_buffers: usize,
    /// One per lane: the lane's counters at the end of each run (empty without a stall log).
    pub run_ends: Vec<RunEnds>,
}

impl<S> RunReport<S> {
    /// Whether the reconcile holds for every lane.
    pub fn is_reconciled(&self) -> bool {
        self.lanes.iter().all(LaneReconcile::holds)
    }

    /// Sum over lanes of (produced, collected, dropped).
    pub fn totals(&self) -> (u64, u64, u64) {
        self.lanes
            .iter()
            .fold((0, 0, 0), |(p, c, d), l| (p + l.produced, c + l.collected, d + l.dropped))
    }

    /// Gate waits that waited, summed over lanes (0 when the pools kept the path cold).
    pub fn stall_waits(&self) -> u64 {
        self.lanes.iter().map(|l| l.stalls.total).sum()
    }
}

/// The reconcile lines of a region after its writers finished, from what its collectors saw.
pub(crate) fn reconcile(ctx: &HostCtx, collected: &[Collected]) -> Vec<LaneReconcile> {
    (0..ctx.lanes.len() as u32)
        .map(|lane| {
            let s = ctx.read_lane(lane, true).unwrap_or_default();
            let c = collected.get(lane as usize).copied().unwrap_or_default();
            LaneReconcile {
                lane,
                produced: s.produced,
                collected: c.records,
                dropped: s.dropped,
                buffers_collected: c.buffers,
                switches: s.switch_count,
                gate_timeouts: s.gate_timeouts,
                stall_cycles: s.stall_cycles,
                max_stall_cycles: s.max_stall_cycles,
                stalls: ctx.read_stalls(lane).unwrap_or_default(),
                holds_buffer: s.current_buf_ptr != 0,
            }
        })
        .collect()
}
