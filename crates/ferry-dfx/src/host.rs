//! The host side: drain shards, collector shards, the replenish thread, startup, shutdown and
//! the per-lane reconcile.
//!
//! # Ownership (spec §4.2)
//! | state | writer | reader |
//! |---|---|---|
//! | device `queue_heads[q]` | drain shard `q % shards` | AICPU thread `q` |
//! | free queue `tail`/slots of lane L | the drain shard owning L's ready queue | lane L |
//! | host ready ring s | drain shard s | collector s |
//! | done ring s | collector s | replenish thread |
//! | recycled lane `[s][kind]` | replenish thread | drain shard s |
//!
//! The replenish thread holds no handle on device memory at all: it cannot write it. Startup
//! ([`DfxTransport::replenish_free_queues`]) is the only place where free queues are filled from any
//! shard's recycled lane or from the reserve, and it runs before any host thread exists.
//!
//! # Lane quotas (a refinement of the seed)
//! Lanes of one shard and kind share one recycled lane. The seed's top-up fills a free queue to
//! `SLOT`, so a busy lane could hoard buffers that a sibling needs to recover, and a one-buffer
//! sibling would starve (found by the stress matrix). Each lane therefore holds at most its own
//! pool (seeded buffers; plus `SLOT` extra when the pool is elastic: a reserve or a warm target),
//! counted by its drain shard as pushed − drained, and short lanes are served first come, first
//! served, round robin. A listed lane leaves the retry list once it is at its quota or its free
//! queue is full.
//!
//! # Waiting
//! Every host thread spins briefly and then parks; it is woken by work: a device publish rings
//! the drain shard of that queue, a drain hand-off rings its collector, a collected buffer rings
//! the replenish thread, a recycled buffer rings the drain shard it went to, and stop/halt ring
//! everyone. A writer attached from a device program (a separate copy of this crate, which
//! cannot reach these parkers) rings the drain shard through a host notify hook instead
//! ([`DeviceRegion::with_host_notify`](crate::DeviceRegion::with_host_notify), routed by the
//! platform to [`DeviceRegion::host_doorbell`](crate::DeviceRegion::host_doorbell)). A long
//! backstop timeout (`IDLE_BACKSTOP`) covers platforms without a doorbell.

use core::marker::PhantomData;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_utils::Backoff;
use ferry_abi::dfx::{self, DfxLayout, LaneState, ReadyEntry};

use crate::clock::CycleClock;
use crate::config::{BuildError, DfxConfig, LaneSpec};
use crate::device::{
    policy_word, stall_log_size, DeviceRegion, LaneBells, STALL_LOG_STRIDE, STALL_RING,
};
use crate::mem::{DeviceMemory, MemError, ShmRegion};
use crate::spsc::{self, Consumer, Producer};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{self, Arc, Parker, Unparker};
use crate::Record;

/// How long an idle host thread sleeps when no doorbell rings (a backstop, not a polling period).
pub const IDLE_BACKSTOP: Duration = Duration::from_millis(50);

/// A full buffer handed from a drain shard to its collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handoff {
    pub(crate) buffer: u32,
    pub(crate) lane: u32,
    pub(crate) kind: u32,
    pub(crate) seq: u32,
    pub(crate) count: u32,
    pub(crate) queue: u32,
}

/// A collected buffer on its way back to a recycled lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Done {
    pub(crate) buffer: u32,
    pub(crate) kind: u32,
}

/// One full buffer as a collector sees it.
#[derive(Debug)]
pub struct CollectedBuffer<'a, R> {
    /// Lane the buffer came from.
    pub lane: u32,
    /// Buffer kind.
    pub kind: u32,
    /// Per-lane sequence number (contiguous from 0 in a lossless run).
    pub seq: u32,
    /// Ready queue it was published on.
    pub queue: u32,
    /// Collector shard handling it.
    pub shard: u32,
    /// The records, in write order.
    pub records: &'a [R],
}

/// Receives every collected buffer of one collector shard (the subsystem's
/// `on_buffer_collected`). Runs on the collector thread; may take its time.
pub trait CollectSink<R>: Send + 'static {
    /// Called once per buffer, in ready-queue order per lane.
    fn on_buffer_collected(&mut self, buf: &CollectedBuffer<'_, R>);
}

impl<R, F> CollectSink<R> for F
where
    F: FnMut(&CollectedBuffer<'_, R>) + Send + 'static,
{
    fn on_buffer_collected(&mut self, buf: &CollectedBuffer<'_, R>) {
        self(buf)
    }
}

/// Subsystem hooks evaluated on the replenish thread, once per tick.
pub trait ReplenishHooks: Send + 'static {
    /// Publishes per-lane consumption of a separate reusable region (ArgsDump's payload arena).
    /// Default: nothing. Must be cheap and non-blocking.
    fn publish_arena_acks(&mut self) {}
}

/// The default hooks: no arena.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHooks;

impl ReplenishHooks for NoHooks {}

/// Run-state flags shared by every host thread (and nothing else).
#[derive(Debug)]
pub(crate) struct Flags {
    running: AtomicBool,
    halted: AtomicBool,
    exec_complete: AtomicBool,
}

impl Flags {
    fn new() -> Self {
        Self {
            running: AtomicBool::new(true),
            halted: AtomicBool::new(false),
            exec_complete: AtomicBool::new(false),
        }
    }
    fn running(&self) -> bool {
        // Acquire: pairs with the Release store in `stop`; the stop happens after the device
        // flushed, so what the final pass reads is complete.
        self.running.load(Ordering::Acquire)
    }
    fn halted(&self) -> bool {
        // Relaxed: a halt only makes threads exit; it publishes nothing.
        self.halted.load(Ordering::Relaxed)
    }
    fn exec_complete(&self) -> bool {
        // Acquire: pairs with the Release store in `stop`, after every drain shard was joined.
        self.exec_complete.load(Ordering::Acquire)
    }
}

/// Immutable host context of the drain and collector shards.
pub(crate) struct HostCtx {
    mem: std::sync::Arc<dyn DeviceMemory>,
    host: ShmRegion,
    layout: DfxLayout,
    device_addr: u64,
    lanes: Vec<LaneSpec>,
    bells: Option<std::sync::Arc<LaneBells>>,
    /// Offset of the first lane's stall log, when the region has room for them.
    stall_log: Option<usize>,
}

impl HostCtx {
    fn buffer_addr(&self, b: u32) -> u64 {
        self.device_addr + self.layout.buffer_offset(b) as u64
    }

    fn buffer_of_addr(&self, addr: u64) -> Option<u32> {
        let off = usize::try_from(addr.checked_sub(self.device_addr)?).ok()?;
        self.layout.buffer_index_at(off)
    }

    /// Host push into a lane's free queue (spec §2.3): slot, narrow write, tail, narrow write.
    /// On failure the host word is rolled back and the caller keeps the buffer.
    fn push_free(&self, lane: u32, tail: u32, buffer: u32) -> Result<(), MemError> {
        let l = &self.layout;
        let slot_off = l.free_slot_offset(lane, dfx::fq_slot(tail, l.free_slots));
        // Relaxed: the slot is published by the Release store of the tail below.
        self.host.store_u64(slot_off, self.buffer_addr(buffer), Ordering::Relaxed);
        self.mem.write_range_to_device(slot_off, 8)?;
        let tail_off = l.free_tail_offset(lane);
        // Release: publishes the slot; pairs with the Acquire load of the free-queue tail in the
        // device's `wait_for_free_queue_entry` / `try_pop_free`.
        self.host.store_u32(tail_off, tail.wrapping_add(1), Ordering::Release);
        if let Err(e) = self.mem.write_range_to_device(tail_off, 4) {
            // Release: restores the old tail word (host-owned); same pairing as above.
            self.host.store_u32(tail_off, tail, Ordering::Release);
            return Err(e);
        }
        Ok(())
    }

    /// Device-written free-queue head of `lane`.
    fn free_head(&self, lane: u32) -> Result<u32, MemError> {
        let off = self.layout.free_head_offset(lane);
        self.mem.read_range_from_device(off, 4)?;
        // Acquire: pairs with the device's Release store of the head in `claim`: its slot read
        // happened before we may overwrite the slot.
        Ok(self.host.load_u32(off, Ordering::Acquire))
    }
}

/// Counters of the drain shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Ready entries popped.
    pub entries: u64,
    /// Entries whose lane, kind, queue or buffer pointer was invalid (buffer retired).
    pub invalid_entries: u64,
    /// Times a top-up ran dry and listed the lane for retry.
    pub short_sites: u64,
    /// Retry attempts that pushed at least one buffer.
    pub retries_refilled: u64,
    /// Buffers pushed into free queues at runtime.
    pub free_pushes: u64,
    /// Device memory operations that failed.
    pub mem_errors: u64,
    /// Empty sweeps after which the shard parked.
    pub parks: u64,
}

impl DrainStats {
    fn add(&mut self, o: &DrainStats) {
        self.entries += o.entries;
        self.invalid_entries += o.invalid_entries;
        self.short_sites += o.short_sites;
        self.retries_refilled += o.retries_refilled;
        self.free_pushes += o.free_pushes;
        self.mem_errors += o.mem_errors;
        self.parks += o.parks;
    }
}

/// One drain shard: the sole runtime writer of its ready-queue heads and of the free queues its
/// entries resolve to.
pub(crate) struct DrainShard {
    ctx: Arc<HostCtx>,
    flags: Arc<Flags>,
    queues: Vec<u32>,
    heads: Vec<u32>,
    tails: Vec<u32>,
    retry: Vec<u32>,
    retry_scratch: Vec<u32>,
    retry_served: Vec<u32>,
    in_retry: Vec<bool>,
    held: Vec<u32>,
    quota: Vec<u32>,
    recycled: Vec<Consumer<u32>>,
    to_collector: Producer<Handoff>,
    collector_bell: Unparker,
    parker: Parker,
    retired: Vec<u32>,
    pub(crate) stats: DrainStats,
}

impl DrainShard {
    /// Re-reads the host-owned words this shard shadows (after startup replenish).
    fn load_shadows(&mut self) {
        let l = &self.ctx.layout;
        for q in 0..l.ready_queues {
            // Relaxed: host-owned words, last written by this process before the thread started.
            self.heads[q as usize] = self.ctx.host.load_u32(l.head_offset(q), Ordering::Relaxed);
        }
        for lane in 0..l.lanes {
            // Relaxed: as above.
            self.tails[lane as usize] =
                self.ctx.host.load_u32(l.free_tail_offset(lane), Ordering::Relaxed);
            // Every buffer pushed so far (seeds and startup replenish) is still the lane's.
            self.held[lane as usize] = self.tails[lane as usize];
        }
    }

    /// Pops one entry of ready queue `q` (spec §4.4), or `None` if empty / not yet published.
    fn try_pop_entry(&mut self, q: u32) -> Option<ReadyEntry> {
        let ctx = &*self.ctx;
        let l = &ctx.layout;
        let tail_off = l.tail_offset(q);
        if ctx.mem.read_range_from_device(tail_off, 4).is_err() {
            self.stats.mem_errors += 1;
            return None;
        }
        // Acquire: pairs with the device's Release store of the tail in `enqueue_ready`: the entry,
        // the buffer's records and its count are visible after this.
        let tail = ctx.host.load_u32(tail_off, Ordering::Acquire);
        let head = self.heads[q as usize];
        if !dfx::rq_indices_valid(head, tail, l.ready_depth) {
            self.stats.invalid_entries += 1;
            return None;
        }
        if dfx::rq_is_empty(head, tail) {
            return None;
        }
        let e_off = l.entry_offset(q, head);
        if ctx.mem.read_range_from_device(e_off, 32).is_err() {
            self.stats.mem_errors += 1;
            return None;
        }
        // Relaxed: ordered after the Acquire load of the tail above.
        let entry = ReadyEntry {
            index: ctx.host.load_u32(e_off, Ordering::Relaxed),
            kind: ctx.host.load_u32(e_off + 4, Ordering::Relaxed),
            buffer_ptr: ctx.host.load_u64(e_off + 8, Ordering::Relaxed),
            buffer_seq: ctx.host.load_u32(e_off + 16, Ordering::Relaxed),
            _reserved: [0; 3],
        };
        if entry.buffer_ptr == 0 {
            return None;
        }
        let next = dfx::rq_next(head, l.ready_depth);
        let head_off = l.head_offset(q);
        // Release: our reads of the entry happen before the device reuses the slot; pairs with the
        // Acquire load of `queue_heads[q]` in the device's `wait_for_ready_queue_space`.
        ctx.host.store_u32(head_off, next, Ordering::Release);
        if ctx.mem.write_range_to_device(head_off, 4).is_err() {
            // Release: restores our own word; same pairing.
            ctx.host.store_u32(head_off, head, Ordering::Release);
            self.stats.mem_errors += 1;
            return None;
        }
        self.heads[q as usize] = next;
        self.stats.entries += 1;
        if let Some(b) = &ctx.bells {
            b.ring(entry.index);
        }
        Some(entry)
    }

    /// Handles one popped entry (spec §4.5): validate, pull the records (non-SVM), top up the
    /// entry's free queue from this shard's recycled lane (listing it for retry when short), and
    /// hand the buffer to this shard's collector.
    pub(crate) fn process_entry(&mut self, q: u32, e: ReadyEntry) {
        let ctx = self.ctx.clone();
        let l = &ctx.layout;
        let buffer = ctx.buffer_of_addr(e.buffer_ptr);
        let lane_ok =
            ctx.lanes.get(e.index as usize).is_some_and(|s| s.ready_queue == q && s.kind == e.kind);
        let Some(buffer) = buffer.filter(|_| lane_ok) else {
            // Invalid entry: keep the buffer (if any) out of circulation but accounted.
            self.stats.invalid_entries += 1;
            if let Some(b) = buffer {
                self.retired.push(b);
            }
            return;
        };
        let buf_off = l.buffer_offset(buffer);
        let count_off = buf_off + l.count_offset();
        let mut count = 0;
        if ctx.mem.read_range_from_device(count_off, 4).is_ok() {
            // Relaxed: ordered after the Acquire load of the ready-queue tail.
            count = ctx.host.load_u32(count_off, Ordering::Relaxed).min(l.records_per_buffer);
            let rec_off = buf_off + l.records_offset();
            let bytes = count as usize * l.record_size as usize;
            if ctx.mem.read_range_from_device(rec_off, bytes).is_err() {
                self.stats.mem_errors += 1;
                count = 0;
            }
        } else {
            self.stats.mem_errors += 1;
        }
        // The published buffer has left the lane.
        let lane = e.index as usize;
        self.held[lane] = self.held[lane].saturating_sub(1);
        if self.retry.is_empty() {
            if self.top_up(e.index) {
                self.enlist(e.index);
            }
        } else {
            // Others are already waiting: join the back of the line, first come first served.
            self.enlist(e.index);
            self.retry_short_site();
        }
        let mut h =
            Handoff { buffer, lane: e.index, kind: e.kind, seq: e.buffer_seq, count, queue: q };
        // The ring holds every buffer of the region, so this never waits in practice; the wait
        // keeps ownership here rather than dropping a buffer already taken from the device.
        let backoff = Backoff::new();
        while let Err(back) = self.to_collector.push(h) {
            h = back;
            self.collector_bell.unpark();
            sync::snooze(&backoff);
        }
        self.collector_bell.unpark();
    }

    /// Lists `lane` for retry (once).
    fn enlist(&mut self, lane: u32) {
        self.stats.short_sites += 1;
        if !self.in_retry[lane as usize] {
            self.in_retry[lane as usize] = true;
            self.retry.push(lane);
        }
    }

    /// Tops lane `lane`'s free queue up from this shard's recycled lane, up to the lane's quota;
    /// returns `true` when the recycled lane ran dry first (spec §4.6). Never allocates.
    fn top_up(&mut self, lane: u32) -> bool {
        let kind = self.ctx.lanes[lane as usize].kind as usize;
        let slots = self.ctx.layout.free_slots;
        loop {
            if self.held[lane as usize] >= self.quota[lane as usize] {
                return false;
            }
            let head = match self.ctx.free_head(lane) {
                Ok(h) => h,
                Err(_) => {
                    self.stats.mem_errors += 1;
                    return true;
                }
            };
            let tail = self.tails[lane as usize];
            if dfx::fq_is_full(head, tail, slots) {
                return false;
            }
            let Some(buf) = self.recycled[kind].pop() else {
                return true;
            };
            if self.ctx.push_free(lane, tail, buf).is_err() {
                self.stats.mem_errors += 1;
                self.retired.push(buf);
                return true;
            }
            self.tails[lane as usize] = tail.wrapping_add(1);
            self.held[lane as usize] += 1;
            self.stats.free_pushes += 1;
            if let Some(b) = &self.ctx.bells {
                b.ring(lane);
            }
        }
    }

    /// Retries every short site (after every sweep, spec §4.7), in arrival order: a lane stays
    /// listed until it is at its quota or its free queue is observed full; a lane that got
    /// buffers but is still short moves to the back (round robin between starved lanes). A site
    /// whose recycled lane is empty is skipped without any device access. Allocates nothing.
    pub(crate) fn retry_short_site(&mut self) {
        if self.retry.is_empty() {
            return;
        }
        let mut listed = core::mem::take(&mut self.retry_scratch);
        core::mem::swap(&mut listed, &mut self.retry);
        let mut served = core::mem::take(&mut self.retry_served);
        for &lane in &listed {
            let kind = self.ctx.lanes[lane as usize].kind as usize;
            if self.recycled[kind].is_empty() {
                self.retry.push(lane);
                continue;
            }
            let before = self.stats.free_pushes;
            let short = self.top_up(lane);
            let got = self.stats.free_pushes > before;
            if got {
                self.stats.retries_refilled += 1;
            }
            if !short {
                self.in_retry[lane as usize] = false;
            } else if got {
                served.push(lane);
            } else {
                self.retry.push(lane);
            }
        }
        self.retry.append(&mut served);
        listed.clear();
        self.retry_scratch = listed;
        self.retry_served = served;
    }

    /// One sweep over this shard's queues, then the retry list. Returns whether an entry was found.
    pub(crate) fn sweep(&mut self) -> bool {
        let mut found = false;
        for i in 0..self.queues.len() {
            let q = self.queues[i];
            while let Some(e) = self.try_pop_entry(q) {
                self.process_entry(q, e);
                found = true;
            }
        }
        self.retry_short_site();
        found
    }

    /// The drain thread body (spec §4.3): serves ready queues `queue_start, queue_start +
    /// queue_stride, …`, sweeping while there is work and parking when there is none; on stop,
    /// one final pass; on halt, returns at once.
    pub(crate) fn mgmt_drain_loop(&mut self, queue_start: u32, queue_stride: u32) {
        self.queues = (queue_start..self.ctx.layout.ready_queues)
            .step_by(queue_stride.max(1) as usize)
            .collect();
        let backoff = Backoff::new();
        while self.flags.running() {
            if self.flags.halted() {
                return;
            }
            if self.sweep() {
                backoff.reset();
                continue;
            }
            if !backoff.is_completed() {
                sync::snooze(&backoff);
                continue;
            }
            self.stats.parks += 1;
            self.parker.park_timeout(IDLE_BACKSTOP);
            backoff.reset();
        }
        if !self.flags.halted() {
            self.final_pass();
        }
    }

    /// Pops and processes every entry still queued (the device has flushed).
    pub(crate) fn final_pass(&mut self) {
        for i in 0..self.queues.len() {
            let q = self.queues[i];
            while let Some(e) = self.try_pop_entry(q) {
                self.process_entry(q, e);
            }
        }
    }
}

/// Per-lane counts seen by the collectors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Collected {
    records: u64,
    buffers: u64,
}

/// One collector shard: hands buffers to its sink and returns them to the replenish thread.
pub(crate) struct CollectorShard<R, S> {
    shard: u32,
    ctx: Arc<HostCtx>,
    flags: Arc<Flags>,
    from_drain: Consumer<Handoff>,
    done: Producer<Done>,
    replenish_bell: Unparker,
    parker: Parker,
    sink: S,
    collected: Vec<Collected>,
    #[cfg(ferry_loom)]
    scratch: Vec<R>,
    _r: PhantomData<fn(R)>,
}

impl<R: Record, S: CollectSink<R>> CollectorShard<R, S> {
    pub(crate) fn collect_one(&mut self, h: Handoff) {
        let l = &self.ctx.layout;
        let off = l.buffer_offset(h.buffer) + l.records_offset();
        #[cfg(not(ferry_loom))]
        // SAFETY: [1] the buffer was published by its lane (tail Release → our drain shard's
        // Acquire → ring hand-off) and the device does not touch it until it comes back through a
        // free queue, which happens only after `done` below; [2] `count ≤ records_per_buffer`, so
        // the slice is inside the buffer; [3] records are 64-aligned; [4] `R: Record` accepts any
        // bit pattern.
        let records = unsafe { self.ctx.host.records::<R>(off, h.count as usize) };
        #[cfg(ferry_loom)]
        let records = {
            // SAFETY: as above.
            unsafe { self.ctx.host.read_records_into(off, h.count as usize, &mut self.scratch) };
            &self.scratch[..]
        };
        self.sink.on_buffer_collected(&CollectedBuffer {
            lane: h.lane,
            kind: h.kind,
            seq: h.seq,
            queue: h.queue,
            shard: self.shard,
            records,
        });
        let c = &mut self.collected[h.lane as usize];
        c.records += h.count as u64;
        c.buffers += 1;
        let mut d = Done { buffer: h.buffer, kind: h.kind };
        let backoff = Backoff::new();
        while let Err(back) = self.done.push(d) {
            // Cannot happen (the ring holds every buffer); wait rather than lose the buffer.
            d = back;
            self.replenish_bell.unpark();
            sync::snooze(&backoff);
        }
        self.replenish_bell.unpark();
    }

    /// Collects everything queued now.
    pub(crate) fn drain_all(&mut self) {
        while let Some(h) = self.from_drain.pop() {
            self.collect_one(h);
        }
    }

    /// Collector thread body (spec §4.12): waits for hand-offs, exits once execution is complete
    /// and the ring is empty, or at once on halt.
    fn poll_and_collect(&mut self) {
        let backoff = Backoff::new();
        loop {
            if self.flags.halted() {
                return;
            }
            if let Some(h) = self.from_drain.pop() {
                self.collect_one(h);
                backoff.reset();
                continue;
            }
            if self.flags.exec_complete() {
                self.drain_all();
                return;
            }
            if !backoff.is_completed() {
                sync::snooze(&backoff);
            } else {
                self.parker.park_timeout(IDLE_BACKSTOP);
                backoff.reset();
            }
        }
    }
}

/// Counters of the replenish thread.
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

/// The replenish thread's state. It owns no device-memory handle: it cannot touch device memory.
pub(crate) struct Replenisher {
    flags: Arc<Flags>,
    shards: u32,
    slots: u32,
    done: Vec<Consumer<Done>>,
    recycled: Vec<Vec<Producer<u32>>>,
    reserve: Vec<u32>,
    warm: Vec<u32>,
    drain_bells: Vec<Unparker>,
    parker: Parker,
    hooks: Box<dyn ReplenishHooks>,
    pub(crate) stats: ReplenishStats,
}

/// Picks the recycled shard with the strictly largest deficit below `target`, examining `origin`
/// first so that it wins ties (spec §4.11, PER-LANE rule). `len(s)` is shard `s`'s recycled size.
pub fn select_by_deficit(target: u32, origin: u32, shards: u32, len: impl Fn(u32) -> u32) -> u32 {
    if target == 0 {
        return origin;
    }
    let mut best = origin;
    let mut best_def = target.saturating_sub(len(origin));
    for k in 1..shards {
        let s = (origin + k) % shards;
        let d = target.saturating_sub(len(s));
        if d > best_def {
            best = s;
            best_def = d;
        }
    }
    best
}

impl Replenisher {
    /// Where a done buffer of `kind` collected by `origin_shard` goes (origin wins ties).
    pub(crate) fn select_recycled_shard(&self, kind: u32, origin_shard: u32) -> u32 {
        let k = kind as usize;
        let cap = self.recycled[0][k].capacity() as u32;
        let target = self.warm.get(k).copied().unwrap_or(0).min(cap);
        select_by_deficit(target, origin_shard, self.shards, |s| {
            self.recycled[s as usize][k].len() as u32
        })
    }

    /// Moves every done buffer into a recycled lane; returns how many moved.
    pub(crate) fn drain_done_into_recycled(&mut self) -> u64 {
        let mut moved = 0;
        for o in 0..self.shards {
            while let Some(d) = self.done[o as usize].pop() {
                let t = self.select_recycled_shard(d.kind, o);
                let mut b = d.buffer;
                let backoff = Backoff::new();
                while let Err(back) = self.recycled[t as usize][d.kind as usize].push(b) {
                    // Cannot happen (rings hold every buffer); keep the buffer rather than lose it.
                    b = back;
                    sync::snooze(&backoff);
                }
                if t != o {
                    self.stats.rebalanced += 1;
                }
                self.drain_bells[t as usize].unpark();
                moved += 1;
            }
        }
        self.stats.routed += moved;
        moved
    }

    /// Tops recycled lanes up to their warm targets from the reserve; returns buffers added.
    pub(crate) fn replenish_recycled_pools(&mut self) -> u64 {
        let mut grown = 0;
        for kind in 0..self.warm.len() {
            let target = self.warm[kind];
            if target == 0 {
                continue;
            }
            for s in 0..self.shards as usize {
                let have = self.recycled[s][kind].len() as u32;
                let target = target.min(self.recycled[s][kind].capacity() as u32);
                if have >= target || self.reserve.is_empty() {
                    continue;
                }
                // One batch of max(SLOT, gap), as the original's carved allocation.
                let batch = (target - have).max(self.slots) as usize;
                for _ in 0..batch {
                    let Some(b) = self.reserve.pop() else { break };
                    if let Err(b) = self.recycled[s][kind].push(b) {
                        self.reserve.push(b);
                        break;
                    }
                    grown += 1;
                }
                self.drain_bells[s].unpark();
            }
        }
        self.stats.allocated += grown;
        grown
    }

    /// One replenish tick.
    pub(crate) fn tick(&mut self) -> u64 {
        let moved = self.drain_done_into_recycled();
        let grown = self.replenish_recycled_pools();
        self.hooks.publish_arena_acks();
        self.stats.ack_ticks += 1;
        moved + grown
    }

    /// The replenish thread body (spec §4.11): never touches device memory.
    fn mgmt_replenish_loop(&mut self) {
        let backoff = Backoff::new();
        loop {
            if self.flags.halted() {
                return;
            }
            if self.tick() > 0 {
                backoff.reset();
                continue;
            }
            if !self.flags.running() {
                return;
            }
            if !backoff.is_completed() {
                sync::snooze(&backoff);
            } else {
                self.parker.park_timeout(IDLE_BACKSTOP);
                backoff.reset();
            }
        }
    }
}

/// A host-side snapshot of one lane's device state (read through the memory operations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneSnapshot {
    /// Lane id.
    pub lane: u32,
    /// Gate the lane waits at ([`dfx::GATE_NONE`], [`dfx::GATE_PUSH`], [`dfx::GATE_POP`]).
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
}

fn read_lane(ctx: &HostCtx, lane: u32) -> Result<LaneSnapshot, MemError> {
    let off = ctx.layout.lane_offset(lane);
    ctx.mem.read_range_from_device(off, size_of::<LaneState>())?;
    let h = &ctx.host;
    use core::mem::offset_of as o;
    // Relaxed: diagnostic / post-run reads of device counters (the run's end is ordered by the
    // writers' join before `stop`).
    let r = Ordering::Relaxed;
    Ok(LaneSnapshot {
        lane,
        gate_state: h.load_u32(off + o!(LaneState, gate_state), r),
        switch_count: h.load_u32(off + o!(LaneState, switch_count), r),
        produced: h.load_u64(off + o!(LaneState, total_record_count), r),
        dropped: h.load_u64(off + o!(LaneState, dropped_record_count), r),
        gate_timeouts: h.load_u32(off + o!(LaneState, gate_timeouts), r),
        stall_cycles: h.load_u64(off + o!(LaneState, stall_cycles), r),
        max_stall_cycles: h.load_u64(off + o!(LaneState, max_stall_cycles), r),
        current_buf_ptr: h.load_u64(off + o!(LaneState, current_buf_ptr), r),
    })
}

/// The most recent gate waits of a lane, oldest first, as the device logged them (`[start, end]`
/// in device cycles, `start < end`).
///
/// The device keeps the last [`STALL_RING`] waits; [`StallIntervals::total`] counts all of them,
/// so `total - as_slice().len()` waits were overwritten (their cycles are still in the lane's
/// `stall_cycles`).
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

    /// Waits the ring no longer holds.
    pub fn overwritten(&self) -> u64 {
        self.total - self.len as u64
    }
}

fn read_stalls(ctx: &HostCtx, lane: u32) -> Result<StallIntervals, MemError> {
    let Some(base) = ctx.stall_log else {
        return Ok(StallIntervals::default());
    };
    let off = base + lane as usize * STALL_LOG_STRIDE;
    ctx.mem.read_range_from_device(off, STALL_LOG_STRIDE)?;
    let h = &ctx.host;
    // Relaxed: post-run reads of the lane's log (the writers' join orders them before `stop`).
    let r = Ordering::Relaxed;
    let total = h.load_u64(off, r);
    let mut out = StallIntervals { total, ..StallIntervals::default() };
    let ring = STALL_RING as u64;
    for n in total.saturating_sub(ring)..total {
        let e = off + 16 + 16 * (n % ring) as usize;
        let w = [h.load_u64(e, r), h.load_u64(e + 8, r)];
        // A torn or foreign entry (a halted writer) is skipped rather than reported backwards.
        if w[0] < w[1] {
            out.ring[out.len] = w;
            out.len += 1;
        }
    }
    Ok(out)
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

/// What a run produced: the sinks, the per-lane reconcile and host counters.
#[derive(Debug)]
pub struct RunReport<S> {
    /// One sink per collector shard, in shard order.
    pub sinks: Vec<S>,
    /// One line per lane.
    pub lanes: Vec<LaneReconcile>,
    /// Drain shard counters, summed.
    pub drain: DrainStats,
    /// Replenish thread counters.
    pub replenish: ReplenishStats,
    /// Buffers taken out of circulation (invalid entries, failed pushes).
    pub retired_buffers: usize,
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
}

/// An initialised DFX transport, before its host threads start.
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use ferry_abi::arch::A2A3;
/// use ferry_dfx::{clock::SteadyClock, mem::SvmMemory, DfxBuilder, DfxTransport, CollectedBuffer};
///
/// let cfg = DfxBuilder::new(&A2A3).ready_queues(1).lane(0, 0, 2).records_per_buffer(4).build::<u64>().unwrap();
/// let mem = Arc::new(SvmMemory::new(cfg.region_size(), 0x1_0000_0000));
/// let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(SteadyClock::new(A2A3.clock_hz))).unwrap();
/// let device = t.device_region();
/// let host = t.start(|_shard| {
///     let mut seen = Vec::new();
///     move |b: &CollectedBuffer<'_, u64>| seen.extend_from_slice(b.records)
/// });
/// let mut w = device.writer::<u64>(0, &[0]).unwrap();
/// for i in 0..10 { w.record(0, i); }
/// w.finish();
/// let report = host.stop();
/// assert!(report.is_reconciled());
/// assert_eq!(report.totals(), (10, 10, 0));
/// ```
pub struct DfxTransport<R: Record> {
    cfg: DfxConfig,
    ctx: Arc<HostCtx>,
    flags: Arc<Flags>,
    device: DeviceRegion,
    drains: Vec<DrainShard>,
    collector_parts: Vec<(Consumer<Handoff>, Producer<Done>, Parker)>,
    replenisher: Replenisher,
    _r: PhantomData<fn(R)>,
}

impl<R: Record> core::fmt::Debug for DfxTransport<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DfxTransport").field("cfg", &self.cfg).finish_non_exhaustive()
    }
}

fn write_u32(ctx: &HostCtx, off: usize, v: u32) -> Result<(), MemError> {
    // Relaxed: init-time writes, before any device thread exists.
    ctx.host.store_u32(off, v, Ordering::Relaxed);
    ctx.mem.write_range_to_device(off, 4)
}

impl<R: Record> DfxTransport<R> {
    /// Initialises the region in `mem` for `cfg`: header, lane descriptors, and each lane's seed
    /// buffers (free queue first, surplus to its shard's recycled lane). `clock` is the device
    /// clock the gates measure against.
    ///
    /// # Errors
    /// [`BuildError::RecordType`] if `R` does not match `cfg`, [`BuildError::RegionTooSmall`],
    /// [`BuildError::Memory`] if a device write fails.
    pub fn new(
        cfg: DfxConfig,
        mem: std::sync::Arc<dyn DeviceMemory>,
        clock: std::sync::Arc<dyn CycleClock>,
    ) -> Result<Self, BuildError> {
        if size_of::<R>() != cfg.record_size as usize {
            return Err(BuildError::RecordType);
        }
        let layout = cfg.layout();
        layout.validate().map_err(BuildError::Layout)?;
        let host = mem.host_view();
        if host.len() < layout.region_size() || mem.device_view().len() < layout.region_size() {
            return Err(BuildError::RegionTooSmall {
                need: layout.region_size(),
                have: host.len(),
            });
        }
        let log = layout.region_size();
        let log_end = log + stall_log_size(layout.lanes);
        let stall_log =
            (host.len() >= log_end && mem.device_view().len() >= log_end).then_some(log);
        let ctx = Arc::new(HostCtx {
            stall_log,
            device_addr: mem.device_addr(),
            mem,
            host,
            layout,
            lanes: cfg.lanes.clone(),
            // Loom models run without wake hints: device threads only yield.
            bells: if cfg!(ferry_loom) {
                None
            } else {
                Some(std::sync::Arc::new(LaneBells::new(cfg.lanes.len())))
            },
        });
        // Header: one 64-byte narrow write.
        let mut h = layout.header();
        h.policy = policy_word(cfg.policy);
        h.block_budget_cycles = cfg.block_budget_cycles;
        h.drop_wait_cycles = cfg.drop_wait_cycles;
        let words = [
            h.magic,
            h.version,
            h.ready_queues,
            h.ready_depth,
            h.free_slots,
            h.lanes,
            h.buffers,
            h.buffer_stride,
            h.record_size,
            h.records_per_buffer,
            h.count_placement,
            h.policy,
        ];
        for (i, w) in words.iter().enumerate() {
            // Relaxed: init-time, before any device thread exists.
            ctx.host.store_u32(i * 4, *w, Ordering::Relaxed);
        }
        ctx.host.store_u64(48, h.block_budget_cycles, Ordering::Relaxed);
        ctx.host.store_u64(56, h.drop_wait_cycles, Ordering::Relaxed);
        ctx.mem.write_range_to_device(0, 64).map_err(BuildError::Memory)?;

        let n = cfg.shards as usize;
        let kinds = cfg.kinds() as usize;
        let ring_cap = cfg.total_buffers().max(1) as usize;
        let mut drain_parkers: Vec<Parker> = (0..n).map(|_| Parker::new()).collect();
        let collector_parkers: Vec<Parker> = (0..n).map(|_| Parker::new()).collect();
        let replenish_parker = Parker::new();
        let mut recycled_p: Vec<Vec<Producer<u32>>> = Vec::new();
        let mut recycled_c: Vec<Vec<Consumer<u32>>> = Vec::new();
        for _ in 0..n {
            let (p, c): (Vec<_>, Vec<_>) = (0..kinds).map(|_| spsc::channel(ring_cap)).unzip();
            recycled_p.push(p);
            recycled_c.push(c);
        }
        let mut done_c = Vec::new();
        let mut collector_parts = Vec::new();
        let mut to_collector = Vec::new();
        for (s, cp) in collector_parkers.into_iter().enumerate() {
            let (hp, hc) = spsc::channel::<Handoff>(ring_cap);
            let (dp, dc) = spsc::channel::<Done>(ring_cap);
            to_collector.push((hp, cp.unparker().clone()));
            collector_parts.push((hc, dp, cp));
            done_c.push(dc);
            let _ = s;
        }

        // Seed each lane: free queue first, surplus to its shard's recycled lane.
        let mut next_buffer = 0u32;
        for (lane, spec) in cfg.lanes.iter().enumerate() {
            let lane = lane as u32;
            write_u32(
                &ctx,
                layout.lane_field_offset(lane, core::mem::offset_of!(LaneState, ready_queue)),
                spec.ready_queue,
            )
            .map_err(BuildError::Memory)?;
            write_u32(
                &ctx,
                layout.lane_field_offset(lane, core::mem::offset_of!(LaneState, kind)),
                spec.kind,
            )
            .map_err(BuildError::Memory)?;
            let shard = cfg.shard_of_queue(spec.ready_queue) as usize;
            for i in 0..spec.buffers {
                let b = next_buffer;
                next_buffer += 1;
                if i < cfg.free_slots {
                    ctx.push_free(lane, i, b).map_err(BuildError::Memory)?;
                } else {
                    recycled_p[shard][spec.kind as usize]
                        .push(b)
                        .expect("recycled ring holds every buffer");
                }
            }
        }
        let reserve: Vec<u32> = (next_buffer..cfg.total_buffers()).rev().collect();

        let doorbells: Vec<Unparker> = (0..layout.ready_queues)
            .map(|q| drain_parkers[cfg.shard_of_queue(q) as usize].unparker().clone())
            .collect();
        let drain_bells: Vec<Unparker> =
            drain_parkers.iter().map(|p| p.unparker().clone()).collect();
        let mut device = DeviceRegion::attach(ctx.mem.device_view(), ctx.device_addr, clock)?;
        device.set_doorbells(Arc::new(doorbells), ctx.bells.clone());

        // A lane may hold at most its own pool (free queue + current buffer + published but not
        // yet drained); lanes of an elastic pool (warm target or reserve) may also hold a free
        // queue's worth of extra buffers. Without this cap a busy lane would hoard buffers that
        // a sibling on the same recycled lane needs to recover.
        let elastic = cfg.reserve_buffers > 0;
        let quota: Vec<u32> = cfg
            .lanes
            .iter()
            .map(|l| {
                let warm = cfg.warm_targets.get(l.kind as usize).copied().unwrap_or(0) > 0;
                l.buffers.max(1) + if elastic || warm { cfg.free_slots } else { 0 }
            })
            .collect();
        let flags = Arc::new(Flags::new());
        let mut drains = Vec::new();
        for (s, (recycled, (hp, cbell))) in recycled_c.into_iter().zip(to_collector).enumerate() {
            let parker = drain_parkers.remove(0);
            drains.push(DrainShard {
                ctx: ctx.clone(),
                flags: flags.clone(),
                queues: (s as u32..layout.ready_queues).step_by(n).collect(),
                heads: vec![0; layout.ready_queues as usize],
                tails: vec![0; layout.lanes as usize],
                retry: Vec::with_capacity(layout.lanes as usize),
                retry_scratch: Vec::with_capacity(layout.lanes as usize),
                retry_served: Vec::with_capacity(layout.lanes as usize),
                in_retry: vec![false; layout.lanes as usize],
                held: vec![0; layout.lanes as usize],
                quota: quota.clone(),
                recycled,
                to_collector: hp,
                collector_bell: cbell,
                parker,
                retired: Vec::new(),
                stats: DrainStats::default(),
            });
        }
        let replenisher = Replenisher {
            flags: flags.clone(),
            shards: cfg.shards,
            slots: cfg.free_slots,
            done: done_c,
            recycled: recycled_p,
            reserve,
            warm: cfg.warm_targets.clone(),
            drain_bells,
            parker: replenish_parker,
            hooks: Box::new(NoHooks),
            stats: ReplenishStats::default(),
        };
        let _ = collector_parts.len();
        Ok(Self { cfg, ctx, flags, device, drains, collector_parts, replenisher, _r: PhantomData })
    }

    /// The device's handle on the region (hand it to the AICPU threads).
    pub fn device_region(&self) -> DeviceRegion {
        self.device.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &DfxConfig {
        &self.cfg
    }

    /// Startup proactive replenish (spec §4.9): fills every free queue to `free_slots` from any
    /// shard's recycled lane, then from the reserve. Runs before any host thread exists — the only
    /// place where cross-shard consumption and allocation are allowed. Returns buffers pushed.
    ///
    /// # Errors
    /// [`MemError`] if a device write fails (the buffer stays in the reserve).
    pub fn replenish_free_queues(&mut self) -> Result<u64, MemError> {
        let mut pushed = 0;
        for lane in 0..self.cfg.lanes.len() as u32 {
            let kind = self.cfg.lanes[lane as usize].kind as usize;
            // Relaxed: host-owned word, written by this thread.
            let mut tail =
                self.ctx.host.load_u32(self.ctx.layout.free_tail_offset(lane), Ordering::Relaxed);
            loop {
                let head = self.ctx.free_head(lane)?;
                if dfx::fq_is_full(head, tail, self.cfg.free_slots) {
                    break;
                }
                let from_recycled = self.drains.iter_mut().find_map(|d| d.recycled[kind].pop());
                let Some(b) = from_recycled.or_else(|| self.replenisher.reserve.pop()) else {
                    break;
                };
                if let Err(e) = self.ctx.push_free(lane, tail, b) {
                    self.replenisher.reserve.push(b);
                    return Err(e);
                }
                tail = tail.wrapping_add(1);
                pushed += 1;
            }
        }
        Ok(pushed)
    }

    /// Starts the host threads with no subsystem hooks: see [`DfxTransport::start_with_hooks`].
    pub fn start<S: CollectSink<R>>(self, sinks: impl FnMut(u32) -> S) -> HostProfiler<R, S> {
        self.start_with_hooks(sinks, NoHooks)
    }

    /// Runs startup replenish, warms the recycled lanes, then spawns the drain shards, the
    /// replenish thread and the collector shards (producers of a ring before its consumers).
    ///
    /// # Panics
    /// If a host thread cannot be spawned.
    pub fn start_with_hooks<S: CollectSink<R>>(
        mut self,
        mut sinks: impl FnMut(u32) -> S,
        hooks: impl ReplenishHooks,
    ) -> HostProfiler<R, S> {
        let _ = self.replenish_free_queues();
        self.replenisher.replenish_recycled_pools();
        self.replenisher.hooks = Box::new(hooks);
        let n = self.cfg.shards;
        let drain_bells: Vec<Unparker> =
            self.drains.iter().map(|d| d.parker.unparker().clone()).collect();
        let rbell = self.replenisher.parker.unparker().clone();
        let mut drains = Vec::new();
        for (s, mut d) in self.drains.drain(..).enumerate() {
            d.load_shadows();
            drains.push(
                std::thread::Builder::new()
                    .name(format!("ferry-dfx-drain-{s}"))
                    .spawn(move || {
                        d.mgmt_drain_loop(s as u32, n);
                        d
                    })
                    .expect("spawn drain shard"),
            );
        }
        let mut rep = self.replenisher;
        let replenish = std::thread::Builder::new()
            .name("ferry-dfx-replenish".into())
            .spawn(move || {
                rep.mgmt_replenish_loop();
                rep
            })
            .expect("spawn replenish thread");
        let mut collectors = Vec::new();
        let mut collector_bells = Vec::new();
        for (s, (hc, dp, parker)) in self.collector_parts.into_iter().enumerate() {
            collector_bells.push(parker.unparker().clone());
            let mut c = CollectorShard::<R, S> {
                shard: s as u32,
                ctx: self.ctx.clone(),
                flags: self.flags.clone(),
                from_drain: hc,
                done: dp,
                replenish_bell: rbell.clone(),
                parker,
                sink: sinks(s as u32),
                collected: vec![Collected::default(); self.cfg.lanes.len()],
                #[cfg(ferry_loom)]
                scratch: Vec::new(),
                _r: PhantomData,
            };
            collectors.push(
                std::thread::Builder::new()
                    .name(format!("ferry-dfx-collect-{s}"))
                    .spawn(move || {
                        c.poll_and_collect();
                        c
                    })
                    .expect("spawn collector shard"),
            );
        }
        HostProfiler {
            ctx: self.ctx,
            flags: self.flags,
            drain_bells,
            collector_bells,
            replenish_bell: rbell,
            drains,
            replenish,
            collectors,
        }
    }
}

/// The running host side of a transport: drain shards, replenish thread, collector shards.
///
/// Stop it with [`HostProfiler::stop`] after every writer has finished (flushed); simulate a dead
/// host with [`HostProfiler::halt`].
pub struct HostProfiler<R: Record, S: CollectSink<R>> {
    ctx: Arc<HostCtx>,
    flags: Arc<Flags>,
    drain_bells: Vec<Unparker>,
    collector_bells: Vec<Unparker>,
    replenish_bell: Unparker,
    drains: Vec<JoinHandle<DrainShard>>,
    replenish: JoinHandle<Replenisher>,
    collectors: Vec<JoinHandle<CollectorShard<R, S>>>,
}

impl<R: Record, S: CollectSink<R>> core::fmt::Debug for HostProfiler<R, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostProfiler").field("shards", &self.drains.len()).finish_non_exhaustive()
    }
}

fn join<T>(h: JoinHandle<T>) -> T {
    match h.join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    }
}

impl<R: Record, S: CollectSink<R>> HostProfiler<R, S> {
    /// Reads lane `lane`'s device state (gate, counters) through the memory operations.
    ///
    /// # Errors
    /// [`MemError`] if the device read fails.
    pub fn lane_snapshot(&self, lane: u32) -> Result<LaneSnapshot, MemError> {
        read_lane(&self.ctx, lane)
    }

    fn ring_all(&self) {
        self.drain_bells.iter().for_each(Unparker::unpark);
        self.collector_bells.iter().for_each(Unparker::unpark);
        self.replenish_bell.unpark();
    }

    /// Stops the host (spec §4.13): drain shards make a final pass and exit, then the replenish
    /// thread, then collectors drain their rings and exit; then reconciles every lane.
    ///
    /// Call it after every writer has flushed (finished or been dropped): records published
    /// later are not collected, and the reconcile shows them as missing.
    pub fn stop(self) -> RunReport<S> {
        // Release: pairs with the Acquire load in `Flags::running`.
        self.flags.running.store(false, Ordering::Release);
        self.ring_all();
        let drains: Vec<DrainShard> = self.drains.into_iter().map(join).collect();
        self.replenish_bell.unpark();
        let rep = join(self.replenish);
        // Release: every drain hand-off happened before; pairs with `Flags::exec_complete`.
        self.flags.exec_complete.store(true, Ordering::Release);
        self.collector_bells.iter().for_each(Unparker::unpark);
        let collectors: Vec<_> = self.collectors.into_iter().map(join).collect();
        report(&self.ctx, drains, rep, collectors)
    }

    /// Simulates a dead or wedged host: every host thread exits at once, without a final pass,
    /// leaving queued buffers where they are. Device writers then give up at their gates within
    /// their budget. [`HaltedProfiler::recover`] later plays the restarted host.
    pub fn halt(self) -> HaltedProfiler<R, S> {
        // Relaxed: see `Flags::halted`; the joins below order everything else.
        self.flags.halted.store(true, Ordering::Relaxed);
        self.ring_all();
        let drains: Vec<DrainShard> = self.drains.into_iter().map(join).collect();
        let rep = join(self.replenish);
        let collectors: Vec<_> = self.collectors.into_iter().map(join).collect();
        HaltedProfiler { ctx: self.ctx, drains, rep, collectors }
    }
}

/// A host that was halted mid-run.
pub struct HaltedProfiler<R: Record, S: CollectSink<R>> {
    ctx: Arc<HostCtx>,
    drains: Vec<DrainShard>,
    rep: Replenisher,
    collectors: Vec<CollectorShard<R, S>>,
}

impl<R: Record, S: CollectSink<R>> core::fmt::Debug for HaltedProfiler<R, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HaltedProfiler").field("shards", &self.drains.len()).finish_non_exhaustive()
    }
}

impl<R: Record, S: CollectSink<R>> HaltedProfiler<R, S> {
    /// Reads lane `lane`'s device state.
    ///
    /// # Errors
    /// [`MemError`] if the device read fails.
    pub fn lane_snapshot(&self, lane: u32) -> Result<LaneSnapshot, MemError> {
        read_lane(&self.ctx, lane)
    }

    /// The restarted host, after the writers finished: collects whatever is still queued on the
    /// device and in host rings (on this thread), then reconciles.
    pub fn recover(mut self) -> RunReport<S> {
        for d in &mut self.drains {
            d.final_pass();
        }
        for c in &mut self.collectors {
            c.drain_all();
        }
        report(&self.ctx, self.drains, self.rep, self.collectors)
    }
}

fn report<R: Record, S: CollectSink<R>>(
    ctx: &HostCtx,
    drains: Vec<DrainShard>,
    rep: Replenisher,
    collectors: Vec<CollectorShard<R, S>>,
) -> RunReport<S> {
    let mut drain = DrainStats::default();
    let mut retired = 0;
    for d in &drains {
        drain.add(&d.stats);
        retired += d.retired.len();
    }
    let mut collected = vec![Collected::default(); ctx.lanes.len()];
    let mut sinks = Vec::new();
    for c in collectors {
        for (acc, x) in collected.iter_mut().zip(&c.collected) {
            acc.records += x.records;
            acc.buffers += x.buffers;
        }
        sinks.push(c.sink);
    }
    let lanes = (0..ctx.lanes.len() as u32)
        .map(|lane| {
            let s = read_lane(ctx, lane).unwrap_or_default();
            let c = collected[lane as usize];
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
                stalls: read_stalls(ctx, lane).unwrap_or_default(),
                holds_buffer: s.current_buf_ptr != 0,
            }
        })
        .collect();
    RunReport { sinks, lanes, drain, replenish: rep.stats, retired_buffers: retired }
}

/// The host pieces of a transport without threads, for single-threaded tests and loom models.
#[cfg(test)]
pub(crate) struct Parts<R: Record, S: CollectSink<R>> {
    pub(crate) drains: Vec<DrainShard>,
    pub(crate) replenisher: Replenisher,
    pub(crate) collectors: Vec<CollectorShard<R, S>>,
    ctx: Arc<HostCtx>,
}

#[cfg(test)]
impl<R: Record> DfxTransport<R> {
    /// Startup replenish, then the host pieces, unthreaded.
    pub(crate) fn into_parts<S: CollectSink<R>>(
        mut self,
        mut sinks: impl FnMut(u32) -> S,
    ) -> Parts<R, S> {
        self.replenish_free_queues().expect("startup replenish");
        self.replenisher.replenish_recycled_pools();
        let n = self.cfg.shards;
        let rbell = self.replenisher.parker.unparker().clone();
        for (s, d) in self.drains.iter_mut().enumerate() {
            d.load_shadows();
            d.queues = (s as u32..self.ctx.layout.ready_queues).step_by(n as usize).collect();
        }
        let collectors = self
            .collector_parts
            .into_iter()
            .enumerate()
            .map(|(s, (hc, dp, parker))| CollectorShard {
                shard: s as u32,
                ctx: self.ctx.clone(),
                flags: self.flags.clone(),
                from_drain: hc,
                done: dp,
                replenish_bell: rbell.clone(),
                parker,
                sink: sinks(s as u32),
                collected: vec![Collected::default(); self.cfg.lanes.len()],
                #[cfg(ferry_loom)]
                scratch: Vec::new(),
                _r: PhantomData,
            })
            .collect();
        Parts { drains: self.drains, replenisher: self.replenisher, collectors, ctx: self.ctx }
    }
}

#[cfg(test)]
impl<R: Record, S: CollectSink<R>> Parts<R, S> {
    /// Free-queue occupancy of `lane` as the host sees it.
    pub(crate) fn free_len(&self, lane: u32) -> u32 {
        let head = self.ctx.free_head(lane).expect("read head");
        // Relaxed: host-owned word.
        let tail =
            self.ctx.host.load_u32(self.ctx.layout.free_tail_offset(lane), Ordering::Relaxed);
        dfx::fq_len(head, tail)
    }

    /// Lanes listed for retry on shard `s`.
    #[cfg(not(ferry_loom))]
    pub(crate) fn retry_list(&self, s: usize) -> &[u32] {
        &self.drains[s].retry
    }

    /// Reconcile of the pieces as they stand.
    pub(crate) fn report(self) -> RunReport<S> {
        report(&self.ctx, self.drains, self.replenisher, self.collectors)
    }
}

#[cfg(all(test, not(ferry_loom)))]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::mem::{MirroredMemory, SvmMemory};
    use crate::{DfxBuilder, Policy};
    use ferry_abi::arch::A2A3;

    fn sink() -> impl FnMut(&CollectedBuffer<'_, u64>) + Send + 'static {
        |_b: &CollectedBuffer<'_, u64>| {}
    }

    #[test]
    fn origin_wins_deficit_ties() {
        // All shards equally short: origin (2) wins.
        assert_eq!(select_by_deficit(4, 2, 4, |_| 1), 2);
        // A strictly larger deficit elsewhere wins; the first in cyclic order after origin.
        assert_eq!(select_by_deficit(4, 2, 4, |s| if s == 0 || s == 1 { 0 } else { 3 }), 0);
        assert_eq!(select_by_deficit(4, 3, 4, |s| if s == 1 || s == 2 { 0 } else { 3 }), 1);
        // No target: always origin.
        assert_eq!(select_by_deficit(0, 1, 4, |s| if s == 1 { 9 } else { 0 }), 1);
        // Origin over target, others at target: origin (deficit 0 everywhere).
        assert_eq!(select_by_deficit(2, 0, 3, |_| 2), 0);
    }

    #[test]
    fn select_recycled_shard_reads_recycled_lanes() {
        let cfg = DfxBuilder::new(&A2A3)
            .ready_queues(3)
            .lane(0, 0, 1)
            .lane(1, 0, 1)
            .lane(2, 0, 3)
            .free_slots(1)
            .warm_target(0, 2)
            .records_per_buffer(4)
            .build::<u64>()
            .unwrap();
        let mem = Arc::new(SvmMemory::new(cfg.region_size(), 0x10_0000));
        let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(VirtualClock::new())).unwrap();
        let parts = t.into_parts(|_| sink());
        // Lane 2 seeded 2 surplus buffers into shard 2's recycled lane; shards 0 and 1 are empty.
        let r = &parts.replenisher;
        assert_eq!(r.recycled[2][0].len(), 2);
        assert_eq!(r.select_recycled_shard(0, 0), 0, "tie between 0 and 1: origin wins");
        assert_eq!(r.select_recycled_shard(0, 2), 0, "strictly larger deficit at 0");
    }

    /// A listed lane whose recycled lane is empty is skipped without touching device memory
    /// (on a non-SVM platform every refresh would be a copy).
    #[test]
    fn retry_skips_dry_sites_without_device_reads() {
        use crate::mem::{MemOpKind, SpyMemory};
        let cfg = DfxBuilder::new(&A2A3)
            .ready_queues(1)
            .lane(0, 0, 1)
            .records_per_buffer(2)
            .policy(Policy::Drop)
            .drop_wait_cycles(2)
            .build::<u64>()
            .unwrap();
        let layout = cfg.layout();
        let spy = Arc::new(SpyMemory::new(MirroredMemory::new(cfg.region_size(), 0x1000)));
        let t =
            DfxTransport::<u64>::new(cfg, spy.clone(), Arc::new(VirtualClock::ticking(1))).unwrap();
        let device = t.device_region();
        let mut parts = t.into_parts(|_| sink());
        let mut w = device.writer::<u64>(0, &[0]).unwrap();
        w.record(0, 1);
        w.record(0, 2); // publishes the only buffer; the pop gate gives up
        assert!(parts.drains[0].sweep());
        assert_eq!(parts.retry_list(0), &[0]);
        let head_off = layout.free_head_offset(0);
        let before = spy.ops().len();
        for _ in 0..5 {
            assert!(!parts.drains[0].sweep());
        }
        let reads_of_head = spy.ops()[before..]
            .iter()
            .filter(|o| o.kind == MemOpKind::Read && o.off == head_off)
            .count();
        assert_eq!(reads_of_head, 0, "a dry site costs no device access");
        assert_eq!(parts.retry_list(0), &[0]);
        drop(w);
    }

    /// The retry list refills a lane whose ready queue is idle: a one-buffer lane publishes its
    /// only buffer and has nothing left to publish; the buffer comes back through the collector
    /// and the replenish thread, and only the retry after the next (empty) sweep delivers it.
    #[test]
    fn retry_refills_lane_with_idle_ready_queue() {
        for svm in [true, false] {
            let cfg = DfxBuilder::new(&A2A3)
                .ready_queues(1)
                .lane(0, 0, 1)
                .records_per_buffer(4)
                .policy(Policy::Drop)
                .drop_wait_cycles(3)
                .build::<u64>()
                .unwrap();
            let mem: Arc<dyn DeviceMemory> = if svm {
                Arc::new(SvmMemory::new(cfg.region_size(), 0x1000_0000))
            } else {
                Arc::new(MirroredMemory::new(cfg.region_size(), 0x1000_0000))
            };
            let t = DfxTransport::<u64>::new(cfg, mem, Arc::new(VirtualClock::ticking(1))).unwrap();
            let device = t.device_region();
            let mut parts = t.into_parts(|_| sink());
            let mut w = device.writer::<u64>(0, &[0]).unwrap();
            assert!(w.has_buffer(0));
            for i in 0..4 {
                w.record(0, i);
            }
            // Published, and the pop gate found nothing: the lane holds no buffer.
            assert!(!w.has_buffer(0));
            assert_eq!(parts.free_len(0), 0);
            assert!(parts.drains[0].sweep());
            assert_eq!(parts.retry_list(0), &[0], "dry top-up lists the lane");
            parts.collectors[0].drain_all();
            assert_eq!(parts.replenisher.tick(), 1);
            // No ready entry can trigger process_entry now: only the retry delivers.
            assert!(!parts.drains[0].sweep());
            assert_eq!(parts.free_len(0), 1);
            // The lane is back at its quota (its one-buffer pool): no longer listed.
            assert!(parts.retry_list(0).is_empty());
            w.record(0, 99);
            assert!(w.has_buffer(0));
            let stats = w.finish();
            assert!(parts.drains[0].sweep());
            parts.collectors[0].drain_all();
            let report = parts.report();
            assert_eq!(stats[0].produced, 5);
            assert_eq!(report.lanes[0].collected, 5);
            assert!(report.is_reconciled(), "{:?}", report.lanes);
        }
    }
}
