//! Drain shards: the sole runtime writers of their ready-queue heads and of the free queues their
//! entries resolve to, for every region of the engine.

use ferry_abi::dfx::{self, ReadyEntry};

use super::poll::{PollPolicy, Poller, Step};
use super::region::HostCtx;
use super::report::DrainStats;
use super::{Flags, Handoff};
use crate::spsc::{Consumer, Producer};
use crate::sync::atomic::Ordering;
use crate::sync::{Arc, Backoff, Parker, Unparker};

/// What one drain shard holds of one region: its queues, the shadows of the host-owned words it
/// writes, the retry list and its recycled lanes (one per buffer kind).
pub(crate) struct RegionDrain {
    /// Engine index of the region (set when it joins an engine).
    pub(crate) region: u32,
    pub(crate) ctx: Arc<HostCtx>,
    /// Ready queues of the region this part serves (`q % region shards == shard`).
    pub(crate) queues: Vec<u32>,
    heads: Vec<u32>,
    tails: Vec<u32>,
    retry: Vec<u32>,
    retry_scratch: Vec<u32>,
    retry_served: Vec<u32>,
    in_retry: Vec<bool>,
    held: Vec<u32>,
    quota: Vec<u32>,
    pub(crate) recycled: Vec<Consumer<u32>>,
    pub(crate) retired: Vec<u32>,
    /// By buffer index: whether the device holds the buffer (this part pushed it into a free
    /// queue and has not popped it from a ready entry since). Only this part gives the lanes it
    /// serves their buffers and takes them back, so a ready entry naming a buffer the device
    /// does not hold is a duplicate: handing it on would put one buffer into the host's rings
    /// twice, and rings sized for every buffer could then fill up in a cycle.
    device_holds: Vec<bool>,
    pub(crate) stats: DrainStats,
}

/// The hand-off side of a drain shard: its ring to the collector and the collector's parker.
pub(crate) struct HandoffTx {
    pub(crate) ring: Producer<Handoff>,
    pub(crate) collector: Unparker,
}

impl HandoffTx {
    fn push(&mut self, mut h: Handoff) {
        // The ring holds every buffer of every region, so this never waits in practice; the wait
        // keeps ownership here rather than dropping a buffer already taken from the device.
        let backoff = Backoff::new();
        while let Err(back) = self.ring.push(h) {
            h = back;
            self.collector.unpark();
            backoff.snooze();
        }
        self.collector.unpark();
    }
}

impl RegionDrain {
    pub(crate) fn new(
        ctx: Arc<HostCtx>,
        shard: u32,
        shards: u32,
        quota: &[u32],
        recycled: Vec<Consumer<u32>>,
    ) -> Self {
        let l = ctx.layout;
        let lanes = l.lanes as usize;
        Self {
            region: 0,
            queues: (shard..l.ready_queues).step_by(shards.max(1) as usize).collect(),
            heads: vec![0; l.ready_queues as usize],
            tails: vec![0; lanes],
            retry: Vec::with_capacity(lanes),
            retry_scratch: Vec::with_capacity(lanes),
            retry_served: Vec::with_capacity(lanes),
            in_retry: vec![false; lanes],
            held: vec![0; lanes],
            quota: quota.to_vec(),
            recycled,
            retired: Vec::new(),
            device_holds: vec![false; l.buffers as usize],
            stats: DrainStats::default(),
            ctx,
        }
    }

    /// Re-reads the host-owned words this part shadows (after startup replenish).
    pub(crate) fn load_shadows(&mut self) {
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
            if !self.queues.contains(&self.ctx.lanes[lane as usize].ready_queue) {
                continue;
            }
            // As for `held`: the device has not run yet, so it holds every buffer in the queue,
            // the last `min(tail, slots)` pushes (no device read, so none can fail here).
            let tail = self.tails[lane as usize];
            let n = tail.min(l.free_slots);
            for k in 0..n {
                let c = tail - n + k;
                let slot = l.free_slot_offset(lane, dfx::fq_slot(c, l.free_slots));
                // Relaxed: host-owned word, as above.
                let ptr = self.ctx.host.load_u64(slot, Ordering::Relaxed);
                if let Some(b) = self.ctx.buffer_of_addr(ptr) {
                    self.device_holds[b as usize] = true;
                }
            }
        }
    }

    /// Refreshes the host view of the device-written tails of this part's queues (non-SVM): one
    /// narrow read covering them all when they are adjacent (a region with one shard), otherwise
    /// one per queue — never a word another shard owns.
    fn pull_tails(&mut self) -> bool {
        let (Some(&first), Some(&last)) = (self.queues.first(), self.queues.last()) else {
            return false;
        };
        let l = &self.ctx.layout;
        let adjacent = (last - first) as usize + 1 == self.queues.len();
        let ok = if adjacent {
            let off = l.tail_offset(first);
            self.ctx.mem.read_range_from_device(off, l.tail_offset(last) + 4 - off).is_ok()
        } else {
            self.queues
                .iter()
                .all(|&q| self.ctx.mem.read_range_from_device(l.tail_offset(q), 4).is_ok())
        };
        if !ok {
            self.stats.mem_errors += 1;
        }
        ok
    }

    /// Pops one entry of ready queue `q`, or `None` if empty / not yet published.
    /// The queue's tail word must have been pulled from the device first.
    fn try_pop_entry(&mut self, q: u32) -> Option<ReadyEntry> {
        let ctx = &*self.ctx;
        let l = &ctx.layout;
        // Acquire: pairs with the device's Release store of the tail in `enqueue_ready`: the entry,
        // the buffer's records and its count are visible after this.
        let tail = ctx.host.load_u32(l.tail_offset(q), Ordering::Acquire);
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
        ctx.ring_lane(entry.index);
        Some(entry)
    }

    /// Handles one popped entry: validate, read its count, top up the entry's free
    /// queue from this shard's recycled lane (listing it for retry when short), and hand the
    /// buffer to the collector (which copies the records, in bulk on non-SVM).
    fn process_entry(&mut self, q: u32, e: ReadyEntry, tx: &mut HandoffTx) {
        let ctx = self.ctx.clone();
        let l = &ctx.layout;
        let buffer = ctx.buffer_of_addr(e.buffer_ptr);
        let lane_ok =
            ctx.lanes.get(e.index as usize).is_some_and(|s| s.ready_queue == q && s.kind == e.kind);
        let Some(buffer) = buffer.filter(|_| lane_ok) else {
            // Invalid entry: keep the buffer (if any) out of circulation but accounted.
            self.stats.invalid_entries += 1;
            if let Some(b) = buffer {
                if core::mem::replace(&mut self.device_holds[b as usize], false) {
                    self.retired.push(b);
                }
            }
            return;
        };
        if !core::mem::replace(&mut self.device_holds[buffer as usize], false) {
            // Already the host's (or never given out): it circulates once, where it is.
            self.stats.duplicate_entries += 1;
            return;
        }
        let count_off = l.buffer_offset(buffer) + l.count_offset();
        let mut count = 0;
        if ctx.mem.read_range_from_device(count_off, 4).is_ok() {
            // Relaxed: ordered after the Acquire load of the ready-queue tail.
            count = ctx.host.load_u32(count_off, Ordering::Relaxed).min(l.records_per_buffer);
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
        tx.push(Handoff {
            region: self.region,
            buffer,
            lane: e.index,
            kind: e.kind,
            seq: e.buffer_seq,
            count,
            queue: q,
        });
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
    /// returns `true` when the recycled lane ran dry first. Never allocates.
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
            self.device_holds[buf as usize] = true;
            self.stats.free_pushes += 1;
            self.ctx.ring_lane(lane);
        }
    }

    /// Retries every short site (after every sweep), in arrival order: a lane stays
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

    /// One sweep over this part's queues, then its retry list. Returns whether an entry was
    /// found.
    fn sweep(&mut self, tx: &mut HandoffTx) -> bool {
        let mut found = false;
        if self.pull_tails() {
            for i in 0..self.queues.len() {
                let q = self.queues[i];
                while let Some(e) = self.try_pop_entry(q) {
                    self.process_entry(q, e, tx);
                    found = true;
                }
            }
        }
        self.retry_short_site();
        found
    }

    /// Pops and processes every entry still queued (the device has flushed).
    fn final_pass(&mut self, tx: &mut HandoffTx) {
        while self.pull_tails() {
            let mut any = false;
            for i in 0..self.queues.len() {
                let q = self.queues[i];
                while let Some(e) = self.try_pop_entry(q) {
                    self.process_entry(q, e, tx);
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
    }

    /// Lanes listed for retry.
    #[cfg(all(test, not(ferry_loom)))]
    pub(crate) fn retry_list(&self) -> &[u32] {
        &self.retry
    }
}

/// One drain shard of the engine: serves its part of every region, one sweep over all of them,
/// then their retry lists.
pub(crate) struct DrainShard {
    pub(crate) shard: u32,
    pub(crate) flags: Arc<Flags>,
    pub(crate) regions: Vec<RegionDrain>,
    pub(crate) tx: HandoffTx,
    pub(crate) parker: Parker,
    pub(crate) poll: PollPolicy,
    /// Times the shard slept (parked with a timeout) after an empty sweep.
    pub(crate) parks: u64,
}

impl DrainShard {
    /// One sweep over every region's queues and retry list. Returns whether an entry was found.
    pub(crate) fn sweep(&mut self) -> bool {
        let mut found = false;
        for r in &mut self.regions {
            found |= r.sweep(&mut self.tx);
        }
        found
    }

    /// The drain thread body: polls its queues (no device-to-host signal: after an
    /// empty sweep it spins, yields, then sleeps a short growing interval, [`PollPolicy`]); on
    /// stop, one final pass; on halt, returns at once.
    pub(crate) fn mgmt_drain_loop(&mut self) {
        let mut poll = Poller::new(self.poll);
        while self.flags.running() {
            if self.flags.halted() {
                return;
            }
            if self.sweep() {
                poll.found();
                continue;
            }
            if let Step::Sleep(d) = poll.empty() {
                self.parks += 1;
                self.flags.drain_parked();
                // Woken early by host-internal events (a recycled buffer for a listed lane,
                // stop) and, when the region asked for it, by the device's doorbell hint.
                self.parker.park_timeout(d);
            }
        }
        if !self.flags.halted() {
            self.final_pass();
        }
    }

    /// Pops and processes every entry still queued in every region (the device has flushed).
    pub(crate) fn final_pass(&mut self) {
        for r in &mut self.regions {
            r.final_pass(&mut self.tx);
        }
    }
}
