//! The producer of one ready queue: record write, buffer switch, the two gates, flush.

use core::marker::PhantomData;

use crate::sync::Backoff;
use ferry_abi::dfx::{self, DfxLayout, GATE_NONE, GATE_POP, GATE_PUSH};

use super::{
    stall_entry_offset, Claims, DeviceRegion, GateTimeout, HostNotify, RegionBells, NAP_MAX,
    NAP_MIN, OFF_CUR_PTR, OFF_CUR_SEQ, OFF_DROPPED, OFF_GATE, OFF_MAX_STALL, OFF_STALL,
    OFF_SWITCHES, OFF_TIMEOUTS, OFF_TOTAL, RUN_END_BYTES, RUN_LOG_OFFSET, RUN_RING,
    STALL_LOG_STRIDE,
};
use crate::clock::CycleClock;
use crate::config::BuildError;
use crate::mem::ShmRegion;
use crate::sync::atomic::Ordering;
use crate::sync::{self, Arc};
use crate::Record;

impl DeviceRegion {
    /// Creates the writer of ready queue `queue`, owning `lanes` (lane ids; the writer addresses
    /// them by position in this slice). Tries to claim each lane's first buffer without waiting.
    ///
    /// # Errors
    /// [`BuildError::RecordType`] if `R` is not the region's record size,
    /// [`BuildError::AlreadyClaimed`] if the queue or a lane has a writer,
    /// [`BuildError::ForeignLane`] if a lane publishes through another queue.
    pub fn writer<R: Record>(
        &self,
        queue: u32,
        lanes: &[u32],
    ) -> Result<DeviceWriter<R>, BuildError> {
        let l = &self.layout;
        if size_of::<R>() != l.record_size as usize || align_of::<R>() > 64 {
            return Err(BuildError::RecordType);
        }
        if queue >= l.ready_queues {
            return Err(BuildError::LaneQueue { lane: u32::MAX });
        }
        for &lane in lanes {
            match self.lanes.get(lane as usize) {
                Some(&(q, _)) if q == queue => {}
                _ => return Err(BuildError::ForeignLane { lane }),
            }
        }
        // AcqRel: claims are a handshake between writer constructors only; the RMW orders them.
        if self.claims.queues.fetch_or(1 << queue, Ordering::AcqRel) & (1 << queue) != 0 {
            return Err(BuildError::AlreadyClaimed);
        }
        for (i, &lane) in lanes.iter().enumerate() {
            // AcqRel: as above.
            if self.claims.lanes[lane as usize].swap(true, Ordering::AcqRel) {
                for &undo in &lanes[..i] {
                    // Release: as above.
                    self.claims.lanes[undo as usize].store(false, Ordering::Release);
                }
                // AcqRel: as above.
                self.claims.queues.fetch_and(!(1 << queue), Ordering::AcqRel);
                return Err(BuildError::AlreadyClaimed);
            }
        }
        let v = &self.view;
        // Relaxed: the tail is this writer's own word; Acquire for head pairs with the drain
        // shard's Release store in `try_pop_entry`.
        let rq_tail = v.load_u32(l.tail_offset(queue), Ordering::Relaxed);
        let rq_cached_head = v.load_u32(l.head_offset(queue), Ordering::Acquire);
        let cursors = lanes
            .iter()
            .map(|&lane| {
                let st = l.lane_offset(lane);
                let stall_log_off = self.stall_log.map(|b| b + lane as usize * STALL_LOG_STRIDE);
                // Relaxed: device-owned words of this lane, last written by a previous owner
                // that handed over through the claim above or by host init before start.
                LaneCursor {
                    lane,
                    kind: self.lanes[lane as usize].1,
                    state_off: st,
                    records_off: 0,
                    buf_addr: 0,
                    count: 0,
                    capacity: 0,
                    seq: v.load_u32(st + OFF_CUR_SEQ, Ordering::Relaxed),
                    fq_head: v.load_u32(l.free_head_offset(lane), Ordering::Relaxed),
                    fq_cached_tail: v.load_u32(l.free_head_offset(lane), Ordering::Relaxed),
                    total: v.load_u64(st + OFF_TOTAL, Ordering::Relaxed),
                    dropped: v.load_u64(st + OFF_DROPPED, Ordering::Relaxed),
                    stall: v.load_u64(st + OFF_STALL, Ordering::Relaxed),
                    max_stall: v.load_u64(st + OFF_MAX_STALL, Ordering::Relaxed),
                    switches: v.load_u32(st + OFF_SWITCHES, Ordering::Relaxed),
                    timeouts: v.load_u32(st + OFF_TIMEOUTS, Ordering::Relaxed),
                    degraded: false,
                    bad_slots: 0,
                    stall_log_off,
                    stall_waits: stall_log_off.map_or(0, |o| v.load_u64(o, Ordering::Relaxed)),
                    run_ends: stall_log_off.map_or(0, |o| v.load_u64(o + 8, Ordering::Relaxed)),
                    run_items: 0,
                    items_dropped: 0,
                }
            })
            .collect();
        let mut w = DeviceWriter {
            view: self.view.clone(),
            device_addr: self.device_addr,
            layout: self.layout,
            queue,
            rq_tail,
            rq_cached_head,
            lanes: cursors,
            budget: self.budget,
            clock: self.clock.clone(),
            notify: self.notify.clone(),
            bells: self.bells.clone(),
            parker: self.bells.as_ref().map(|_| crossbeam_utils::sync::Parker::new()),
            claims: self.claims.clone(),
            finished: false,
            _r: PhantomData,
        };
        if let (Some(b), Some(p)) = (&w.bells, &w.parker) {
            for l in w.lanes.iter() {
                b.lanes.set(l.lane, Some(p.unparker().clone()));
            }
        }
        for i in 0..w.lanes.len() {
            if !w.resume(i) {
                w.try_pop_free(i);
            }
        }
        Ok(w)
    }
}

/// How far ahead of a record the writer hints the next write ([`crate::mem::prefetch_write`]):
/// four cache lines. A lane's buffer is written a record per task (one core's records among a
/// scheduler's dozens of streams), too slowly and in too many streams for the hardware
/// prefetcher, and every line of a recycled buffer was last read by the host: without the hint
/// each new line stalls its write for a full read-for-ownership.
const PREFETCH_BYTES: usize = 256;

#[derive(Debug)]
struct LaneCursor {
    lane: u32,
    kind: u32,
    state_off: usize,
    records_off: usize,
    buf_addr: u64,
    count: u32,
    /// Records the current buffer holds; 0 when the lane holds no buffer.
    capacity: u32,
    seq: u32,
    fq_head: u32,
    fq_cached_tail: u32,
    /// Records produced before the current buffer's: the lane's production is `total + count`
    /// (the hot path bumps only `count`; a buffer's records join `total` when it is left).
    total: u64,
    dropped: u64,
    stall: u64,
    max_stall: u64,
    switches: u32,
    timeouts: u32,
    degraded: bool,
    bad_slots: u32,
    /// Offset of the lane's stall log, if the region has one.
    stall_log_off: Option<usize>,
    /// Gate waits that waited (logged or not).
    stall_waits: u64,
    /// Runs this lane's writers finished (logged or not).
    run_ends: u64,
    /// Items ([`DeviceWriter::record_run`]) in the current buffer.
    run_items: u64,
    /// Items of runs dropped, at the write or with their buffer.
    items_dropped: u64,
}

/// What one lane of a writer did, as counted by the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Lane id.
    pub lane: u32,
    /// Records the lane attempted to write.
    pub produced: u64,
    /// Records it accounted dropped.
    pub dropped: u64,
    /// Buffers it published.
    pub switches: u32,
    /// Gate waits that ran out of budget.
    pub gate_timeouts: u32,
    /// Device cycles spent in gate waits.
    pub stall_cycles: u64,
    /// Longest single gate wait, in device cycles.
    pub max_stall_cycles: u64,
    /// Claimed free slots that held no valid buffer pointer.
    pub bad_slots: u32,
    /// Gate waits: times a gate found its queue full (push) or empty (pop) and entered its wait
    /// loop, however briefly (each one a `[start, end]` interval in the stall log).
    pub stall_waits: u64,
}

/// The producer of one ready queue (one AICPU thread) and the lanes it owns.
///
/// Never allocates, locks or makes a system call on the record path; a buffer switch waits only
/// at the two gates, under the run's policy and budget (see the [module docs](crate::device)).
/// `Send` but not `Sync`: exactly one thread writes a lane.
///
/// Dropping a writer flushes it (which may wait at the push gate, bounded by the budget); call
/// [`DeviceWriter::finish`] to flush explicitly and get the counters.
pub struct DeviceWriter<R: Record> {
    view: ShmRegion,
    device_addr: u64,
    layout: DfxLayout,
    queue: u32,
    rq_tail: u32,
    rq_cached_head: u32,
    lanes: Box<[LaneCursor]>,
    budget: u64,
    clock: std::sync::Arc<dyn CycleClock>,
    notify: Option<HostNotify>,
    bells: Option<std::sync::Arc<RegionBells>>,
    parker: Option<crossbeam_utils::sync::Parker>,
    claims: Arc<Claims>,
    finished: bool,
    _r: PhantomData<fn(R) -> R>,
}

impl<R: Record> core::fmt::Debug for DeviceWriter<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceWriter")
            .field("queue", &self.queue)
            .field("lanes", &self.lanes)
            .finish_non_exhaustive()
    }
}

/// The free-queue tail the host last published for a lane whose head is `head`, or `head` (an
/// empty queue) when the word names more than `slots` entries: a corrupt tail must not make the
/// writer claim slots the host never filled (each holding a buffer some other lane or the host
/// owns now).
fn free_tail(view: &ShmRegion, tail_off: usize, head: u32, slots: u32) -> u32 {
    // Acquire: pairs with the drain shard's Release store of the free-queue tail in `top_up`,
    // making the slot pointers it wrote visible.
    let tail = view.load_u32(tail_off, Ordering::Acquire);
    if dfx::fq_indices_valid(head, tail, slots) {
        tail
    } else {
        head
    }
}

/// Waits until `ready()` or until `budget` cycles past `start` on `clock`; returns (ready,
/// start, cycles waited). The caller takes `start` once, before it shows the lane as waiting
/// (so whoever sees the gate state knows the budget already runs), and it is never re-armed.
fn gate_wait(
    clock: &dyn CycleClock,
    start: u64,
    budget: u64,
    parker: Option<&crossbeam_utils::sync::Parker>,
    mut ready: impl FnMut() -> bool,
) -> (bool, u64, u64) {
    let backoff = Backoff::new();
    let mut nap = NAP_MIN;
    loop {
        if ready() {
            return (true, start, clock.now_cycles().saturating_sub(start));
        }
        let waited = clock.now_cycles().saturating_sub(start);
        if waited >= budget {
            return (false, start, waited);
        }
        if !backoff.is_completed() {
            backoff.snooze();
        } else {
            match parker {
                // Woken early when the host pushes into our free queue or pops our ready queue.
                Some(p) => p.park_timeout(nap),
                None => sync::device_nap(nap),
            }
            nap = (nap * 2).min(NAP_MAX);
        }
    }
}

impl<R: Record> DeviceWriter<R> {
    /// Number of lanes this writer owns.
    pub fn lane_count(&self) -> usize {
        self.lanes.len()
    }

    /// Lane id of local lane `i`.
    pub fn lane_id(&self, i: usize) -> u32 {
        self.lanes[i].lane
    }

    /// Ready queue this writer publishes to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Writes one record into local lane `lane`'s current buffer.
    ///
    /// The hot path: never allocates, locks or blocks. When the record fills the buffer the
    /// writer switches buffers (which may wait at a gate, bounded by the policy's budget). A lane
    /// without a buffer tries to claim one (gate) and otherwise counts the record dropped.
    ///
    /// # Panics
    /// If `lane >= self.lane_count()`.
    #[inline]
    pub fn record(&mut self, lane: usize, rec: R) {
        let l = &mut self.lanes[lane];
        // The slow path never sees the record, so it stays in registers on the hot path.
        if l.count >= l.capacity && !self.claim_for_record(lane) {
            return;
        }
        let l = &mut self.lanes[lane];
        let (c, cap) = (l.count, l.capacity);
        let off = l.records_off + c as usize * size_of::<R>();
        l.count = c + 1;
        // SAFETY: [1] `c < cap == records_per_buffer` (checked above, or a buffer was just
        // claimed with count 0), so the record lies inside the current buffer; [2] `records_off`
        // is 64-aligned (buffers are 64-aligned, the records offset is 0 or 64) and
        // `size_of::<R>()` is a multiple of its alignment (≤ 64, checked in `writer`), so `off` is
        // aligned; [3] the lane owns the buffer: it claimed it from its free queue and has not
        // published it yet.
        unsafe { self.view.write_pod_unchecked(off, rec) };
        self.prefetch_ahead(off);
        if c + 1 == cap {
            self.switch_buffer(lane);
        }
    }

    /// Writes `recs` into local lane `lane` as one contiguous run inside a single buffer: when the
    /// current buffer has less room than `recs.len()`, it is published first and the run starts
    /// a fresh buffer, so a buffer only ever holds whole runs (a variable-length record, e.g. a
    /// DepGen chain, never straddles two buffers, and a dropped buffer drops whole runs). Counts
    /// `recs.len()` records produced; returns whether they were written (otherwise all of them
    /// are counted dropped: no buffer could be claimed, or the run is longer than a buffer).
    ///
    /// # Panics
    /// If `lane >= self.lane_count()`.
    pub fn record_slice(&mut self, lane: usize, recs: &[R]) -> bool {
        self.record_run(lane, recs, 1)
    }

    /// [`record_slice`](Self::record_slice) of a run that stands for `items` items of the
    /// caller's own (e.g. the arguments an ArgsDump chain describes): the writer counts the items
    /// it dropped, with the run at the write or later with their buffer (a push gate that gave
    /// up), in [`items_dropped`](Self::items_dropped), so a caller whose records are words can
    /// still account its losses in its own unit. Device-local: nothing of it is in the region.
    ///
    /// # Panics
    /// If `lane >= self.lane_count()`.
    pub fn record_run(&mut self, lane: usize, recs: &[R], items: u64) -> bool {
        let n = recs.len() as u32;
        if n == 0 {
            return true;
        }
        let rpb = self.layout.records_per_buffer;
        let l = &mut self.lanes[lane];
        if recs.len() > rpb as usize {
            l.total += u64::from(n);
            l.dropped += u64::from(n);
            l.items_dropped += items;
            return false;
        }
        // (An empty buffer always has room: `n ≤ rpb` above.)
        if l.capacity > 0 && l.count + n > l.capacity {
            // Not enough room left: publish what the buffer holds, start the run in a fresh one.
            self.switch_buffer(lane);
        }
        let l = &self.lanes[lane];
        if l.capacity == 0 && !self.pop_free(lane) {
            let l = &mut self.lanes[lane];
            l.total += u64::from(n);
            l.dropped += u64::from(n);
            l.items_dropped += items;
            return false;
        }
        let l = &mut self.lanes[lane];
        let off = l.records_off + l.count as usize * size_of::<R>();
        l.count += n;
        l.run_items += items;
        let full = l.count == l.capacity;
        // SAFETY: [1] `count + n ≤ capacity == records_per_buffer` (a buffer with less room was
        // published above, and a fresh buffer holds `rpb ≥ n`), so the run lies inside the
        // current buffer; [2] `off` is aligned for `R` as in `record`; [3] the lane owns the
        // buffer until it publishes it.
        unsafe { self.view.write_slice_unchecked(off, recs) };
        self.prefetch_after_run(lane, off, recs.len());
        if full {
            self.switch_buffer(lane);
        }
        true
    }

    /// Hints the line a few records past the record at `off`: its read-for-ownership overlaps
    /// the work until it is written instead of stalling that write. Past the buffer's end it is
    /// a line of the next buffer in memory (harmless; the view keeps it inside the region), which
    /// saves the hot path a bounds test. A hint only: nothing a run writes or publishes depends
    /// on it.
    #[inline(always)]
    fn prefetch_ahead(&self, off: usize) {
        self.view.prefetch_write(off + PREFETCH_BYTES);
    }

    /// Hints the lines local lane `lane`'s next run starts in, after a run of `n` records at
    /// `off`: up to [`PREFETCH_BYTES`] on, within the current buffer. A hint only, as
    /// [`prefetch_ahead`](Self::prefetch_ahead).
    #[inline(always)]
    fn prefetch_after_run(&self, lane: usize, off: usize, n: usize) {
        let l = &self.lanes[lane];
        let next = off + n * size_of::<R>();
        let end = l.records_off + l.capacity as usize * size_of::<R>();
        for ahead in (next..end.min(next + PREFETCH_BYTES)).step_by(64) {
            self.view.prefetch_write(ahead);
        }
    }

    /// Counts `n` records of local lane `lane` as produced and dropped without writing them (a
    /// record the caller could not encode into this lane's buffers).
    ///
    /// # Panics
    /// If `lane >= self.lane_count()`.
    pub fn account_dropped(&mut self, lane: usize, n: u64) {
        let l = &mut self.lanes[lane];
        l.total += n;
        l.dropped += n;
        self.store_counters(lane);
    }

    /// A lane without a buffer (a switch found no replacement, or startup found none) tries to
    /// claim one; without success the record is counted dropped.
    #[cold]
    #[inline(never)]
    fn claim_for_record(&mut self, lane: usize) -> bool {
        if self.pop_free(lane) {
            true
        } else {
            let l = &mut self.lanes[lane];
            l.total += 1;
            l.dropped += 1;
            false
        }
    }

    fn count_off(&self, lane: usize) -> usize {
        let l = &self.lanes[lane];
        l.records_off - self.layout.records_offset() + self.layout.count_offset()
    }

    fn store_counters(&self, lane: usize) {
        let l = &self.lanes[lane];
        let v = &self.view;
        // Relaxed: device-owned counters; the host reads them after the writer has finished
        // (ordered by the join / stream sync), or as diagnostics where staleness is harmless.
        v.store_u64(l.state_off + OFF_TOTAL, l.total + u64::from(l.count), Ordering::Relaxed);
        v.store_u64(l.state_off + OFF_DROPPED, l.dropped, Ordering::Relaxed);
        v.store_u64(l.state_off + OFF_STALL, l.stall, Ordering::Relaxed);
        v.store_u64(l.state_off + OFF_MAX_STALL, l.max_stall, Ordering::Relaxed);
        v.store_u32(l.state_off + OFF_SWITCHES, l.switches, Ordering::Relaxed);
        v.store_u32(l.state_off + OFF_TIMEOUTS, l.timeouts, Ordering::Relaxed);
    }

    fn gate_budget(&self, lane: usize) -> u64 {
        if self.lanes[lane].degraded {
            0
        } else {
            self.budget
        }
    }

    /// Accounts one gate outcome. `wait`: `Some((start, cycles))` when the gate's slow path ran
    /// (it found the queue full or empty and waited, however briefly), `None` when a degraded
    /// lane gave up without waiting.
    fn account_wait(&mut self, lane: usize, wait: Option<(u64, u64)>, ok: bool) {
        let budget = self.gate_budget(lane);
        let l = &mut self.lanes[lane];
        if let Some((start, waited)) = wait {
            l.stall += waited;
            l.max_stall = l.max_stall.max(waited);
            if let Some(log) = l.stall_log_off {
                let e = log + stall_entry_offset(l.stall_waits);
                // Relaxed: device-owned log words; the host reads them after the writer finished
                // (ordered by the join / stream sync), as it reads the counters. A wait shorter
                // than one device tick is counted but logs an empty interval the host skips.
                self.view.store_u64(e, start, Ordering::Relaxed);
                self.view.store_u64(e + 8, start.saturating_add(waited), Ordering::Relaxed);
                self.view.store_u64(log, l.stall_waits + 1, Ordering::Relaxed);
            }
            l.stall_waits += 1;
        }
        if ok {
            l.degraded = false;
        } else {
            if budget > 0 {
                l.timeouts += 1;
            }
            l.degraded = true;
        }
    }

    /// Push gate: waits while this queue's ready ring is full (`next_tail == head`).
    ///
    /// Checks once without reading the clock; on a miss takes the budget once and waits.
    ///
    /// # Errors
    /// [`GateTimeout`] when the budget ran out; nothing was written.
    pub fn wait_for_ready_queue_space(&mut self, lane: usize) -> Result<(), GateTimeout> {
        let depth = self.layout.ready_depth;
        let next = dfx::rq_next(self.rq_tail, depth);
        if next != self.rq_cached_head {
            return Ok(());
        }
        let head_off = self.layout.head_offset(self.queue);
        // Acquire: pairs with the drain shard's Release store of `queue_heads[q]` in
        // `try_pop_entry`; its read of the entry we are about to overwrite happened before.
        self.rq_cached_head = self.view.load_u32(head_off, Ordering::Acquire);
        if next != self.rq_cached_head {
            self.lanes[lane].degraded = false;
            return Ok(());
        }
        let budget = self.gate_budget(lane);
        if budget == 0 {
            self.account_wait(lane, None, false);
            return Err(GateTimeout);
        }
        let state = self.lanes[lane].state_off + OFF_GATE;
        let start = self.clock.now_cycles();
        // Relaxed: diagnostics for the host ("which rows stalled"); nothing pairs.
        self.view.store_u32(state, GATE_PUSH, Ordering::Relaxed);
        let view = &self.view;
        let cached = &mut self.rq_cached_head;
        let (ok, start, waited) =
            gate_wait(&*self.clock, start, budget, self.parker.as_ref(), || {
                // Acquire: as above.
                *cached = view.load_u32(head_off, Ordering::Acquire);
                next != *cached
            });
        // Relaxed: as above.
        self.view.store_u32(state, GATE_NONE, Ordering::Relaxed);
        self.account_wait(lane, Some((start, waited)), ok);
        if ok {
            Ok(())
        } else {
            Err(GateTimeout)
        }
    }

    /// Publishes local lane `lane`'s current buffer (count and counters first) to the ready queue,
    /// after the push gate. On success the buffer belongs to the host.
    ///
    /// # Errors
    /// [`GateTimeout`] from the push gate; the buffer is still the lane's.
    pub fn enqueue_ready(&mut self, lane: usize) -> Result<(), GateTimeout> {
        self.wait_for_ready_queue_space(lane)?;
        let l = &self.lanes[lane];
        let count_off = self.count_off(lane);
        let v = &self.view;
        let e = self.layout.entry_offset(self.queue, self.rq_tail);
        // Relaxed: the buffer count and the entry fields are published by the Release store of
        // the tail below.
        v.store_u32(count_off, l.count, Ordering::Relaxed);
        v.store_u32(e, l.lane, Ordering::Relaxed);
        v.store_u32(e + 4, l.kind, Ordering::Relaxed);
        v.store_u64(e + 8, l.buf_addr, Ordering::Relaxed);
        v.store_u32(e + 16, l.seq, Ordering::Relaxed);
        self.rq_tail = dfx::rq_next(self.rq_tail, self.layout.ready_depth);
        // Release: publishes the records, the count and the entry (the original's wmb before the tail);
        // pairs with the Acquire load of `queue_tails[q]` in the drain shard's `try_pop_entry`.
        v.store_u32(self.layout.tail_offset(self.queue), self.rq_tail, Ordering::Release);
        // The optional doorbell hint (off by default: the host polls its ready queues).
        if let Some(b) = &self.bells {
            b.ring_drain(self.queue);
        } else if let Some(n) = &self.notify {
            n(self.queue);
        }
        Ok(())
    }

    /// Pop gate: waits while local lane `lane`'s free queue is empty (`head == tail`).
    ///
    /// Checks once without reading the clock; on a miss takes the budget once and waits.
    ///
    /// # Errors
    /// [`GateTimeout`] when the budget ran out; nothing was claimed.
    pub fn wait_for_free_queue_entry(&mut self, lane: usize) -> Result<(), GateTimeout> {
        let tail_off = self.layout.free_tail_offset(self.lanes[lane].lane);
        let l = &mut self.lanes[lane];
        if l.fq_head != l.fq_cached_tail {
            return Ok(());
        }
        l.fq_cached_tail = free_tail(&self.view, tail_off, l.fq_head, self.layout.free_slots);
        if l.fq_head != l.fq_cached_tail {
            l.degraded = false;
            return Ok(());
        }
        let budget = self.gate_budget(lane);
        if budget == 0 {
            self.account_wait(lane, None, false);
            return Err(GateTimeout);
        }
        let state = self.lanes[lane].state_off + OFF_GATE;
        let start = self.clock.now_cycles();
        // Relaxed: diagnostics; nothing pairs.
        self.view.store_u32(state, GATE_POP, Ordering::Relaxed);
        let view = &self.view;
        let slots = self.layout.free_slots;
        let l = &mut self.lanes[lane];
        let (ok, start, waited) =
            gate_wait(&*self.clock, start, budget, self.parker.as_ref(), || {
                l.fq_cached_tail = free_tail(view, tail_off, l.fq_head, slots);
                l.fq_head != l.fq_cached_tail
            });
        // Relaxed: as above.
        self.view.store_u32(state, GATE_NONE, Ordering::Relaxed);
        self.account_wait(lane, Some((start, waited)), ok);
        if ok {
            Ok(())
        } else {
            Err(GateTimeout)
        }
    }

    /// Claims the next free buffer of a lane whose free queue is known non-empty.
    fn claim(&mut self, lane: usize) -> bool {
        let lay = self.layout;
        let l = &mut self.lanes[lane];
        let slot = dfx::fq_slot(l.fq_head, lay.free_slots);
        // Relaxed: ordered after the Acquire load of the tail that showed this slot filled.
        let ptr = self.view.load_u64(lay.free_slot_offset(l.lane, slot), Ordering::Relaxed);
        l.fq_head = l.fq_head.wrapping_add(1);
        // Release: our read of the slot happens before the host rewrites it; pairs with the
        // Acquire load of the free-queue head in the drain shard's `top_up`.
        self.view.store_u32(lay.free_head_offset(l.lane), l.fq_head, Ordering::Release);
        let off = ptr.wrapping_sub(self.device_addr);
        let Some(_) = usize::try_from(off).ok().and_then(|o| lay.buffer_index_at(o)) else {
            // A null or foreign pointer in a claimed slot: no buffer (the original's on_null_free_slot).
            l.bad_slots += 1;
            return false;
        };
        let buf_off = off as usize;
        l.buf_addr = ptr;
        l.records_off = buf_off + lay.records_offset();
        l.count = 0;
        l.capacity = lay.records_per_buffer;
        // The buffer's count word is left as it is: `enqueue_ready` stores it before the buffer
        // is published, and nobody reads it before. Relaxed: the current pointer is diagnostics /
        // end-of-run state, read after the writer finished.
        self.view.store_u64(l.state_off + OFF_CUR_PTR, ptr, Ordering::Relaxed);
        // (The lane's sequence word already holds `seq`: it is stored where `seq` changes, at a
        // publication.)
        true
    }

    /// Startup: takes up the buffer the lane's previous writer still held at its end (the
    /// lane's current pointer: a buffer it claimed but never wrote, or one whose publication ran
    /// out of budget, its records accounted dropped), so a session over several runs loses no
    /// buffer of the pool between runs. `false` when there is none.
    fn resume(&mut self, lane: usize) -> bool {
        let lay = self.layout;
        let l = &mut self.lanes[lane];
        // Relaxed: device-owned word, last written by the lane's previous writer (handed over
        // through the claim in `writer`).
        let ptr = self.view.load_u64(l.state_off + OFF_CUR_PTR, Ordering::Relaxed);
        let off = ptr.wrapping_sub(self.device_addr);
        if ptr == 0 || usize::try_from(off).ok().and_then(|o| lay.buffer_index_at(o)).is_none() {
            return false;
        }
        let buf_off = off as usize;
        l.buf_addr = ptr;
        l.records_off = buf_off + lay.records_offset();
        l.count = 0;
        l.capacity = lay.records_per_buffer;
        // (Its count word, as in `claim`, is stored at publication.)
        true
    }

    /// Startup claim of a lane that took up no held buffer (`resume`): no waiting at all (the
    /// host threads may not run yet).
    fn try_pop_free(&mut self, lane: usize) -> bool {
        let tail_off = self.layout.free_tail_offset(self.lanes[lane].lane);
        let l = &mut self.lanes[lane];
        l.fq_cached_tail = free_tail(&self.view, tail_off, l.fq_head, self.layout.free_slots);
        l.fq_head != l.fq_cached_tail && self.claim(lane)
    }

    /// Pop gate, then claim: installs a replacement buffer as current.
    fn pop_free(&mut self, lane: usize) -> bool {
        if self.wait_for_free_queue_entry(lane).is_err() {
            self.store_counters(lane);
            return false;
        }
        self.claim(lane)
    }

    #[cold]
    #[inline(never)]
    fn switch_buffer(&mut self, lane: usize) {
        match self.enqueue_ready(lane) {
            Err(GateTimeout) => {
                // Still ours: account the whole buffer and overwrite it from slot 0.
                let l = &mut self.lanes[lane];
                l.total += u64::from(l.count);
                l.dropped += l.count as u64;
                l.items_dropped += l.run_items;
                l.count = 0;
                l.run_items = 0;
                self.store_counters(lane);
                return;
            }
            Ok(()) => {
                let l = &mut self.lanes[lane];
                l.total += u64::from(l.count);
                l.capacity = 0;
                l.count = 0;
                l.run_items = 0;
                l.buf_addr = 0;
                l.seq = l.seq.wrapping_add(1);
                l.switches += 1;
                let st = l.state_off;
                let seq = l.seq;
                // Relaxed: device-owned end-of-run / diagnostic words.
                self.view.store_u64(st + OFF_CUR_PTR, 0, Ordering::Relaxed);
                self.view.store_u32(st + OFF_CUR_SEQ, seq, Ordering::Relaxed);
                self.store_counters(lane);
            }
        }
        // Publish-before-acquire: the full buffer is the host's; now wait for a replacement.
        self.pop_free(lane);
    }

    /// Flush: publishes every non-empty current buffer (push gate with budget); a buffer that
    /// cannot be published is accounted dropped. Writes the counters. At the run's end
    /// ([`finish`](Self::finish), or dropping the writer) the lanes' run ends are logged too; a
    /// flush within the run (sealing a buffer early) logs none.
    pub fn flush(&mut self) {
        for lane in 0..self.lanes.len() {
            let l = &self.lanes[lane];
            let seq_before = l.seq;
            if l.count > 0 {
                // (A lane with records holds a buffer.)
                match self.enqueue_ready(lane) {
                    Ok(()) => {
                        let l = &mut self.lanes[lane];
                        l.seq = l.seq.wrapping_add(1);
                        l.switches += 1;
                    }
                    Err(GateTimeout) => {
                        let l = &mut self.lanes[lane];
                        l.dropped += l.count as u64;
                        l.items_dropped += l.run_items;
                    }
                }
                let l = &mut self.lanes[lane];
                l.total += u64::from(l.count);
                l.count = 0;
                l.run_items = 0;
                if l.seq == seq_before {
                    // Not published: the buffer is still the device's. It stays the lane's
                    // current one, overwritten from slot 0 by this writer's next records (a
                    // flush within the run) or taken up by the next writer (`resume`): its
                    // current pointer keeps naming it. Letting go of it here would take it out
                    // of circulation for good once the lane claimed another.
                    self.store_counters(lane);
                    continue;
                }
                l.capacity = 0;
                l.buf_addr = 0;
                let (st, seq) = (l.state_off, l.seq);
                // Relaxed: end-of-run words read after the writer finished.
                self.view.store_u64(st + OFF_CUR_PTR, 0, Ordering::Relaxed);
                self.view.store_u32(st + OFF_CUR_SEQ, seq, Ordering::Relaxed);
            }
            self.store_counters(lane);
        }
    }

    /// Appends every lane's counters to its run-end log (when the region has one): the writer's
    /// run ends (its last flush is done), so the host can tell each run's records and counts
    /// apart in a session that spans several runs. Once per writer.
    fn log_run_ends(&mut self) {
        for lane in 0..self.lanes.len() {
            self.log_run_end(lane);
        }
    }

    fn log_run_end(&mut self, lane: usize) {
        let l = &mut self.lanes[lane];
        let Some(log) = l.stall_log_off else { return };
        let e = log + RUN_LOG_OFFSET + RUN_END_BYTES * (l.run_ends % RUN_RING as u64) as usize;
        // After the run's last flush: the lane holds no record, so `total` counts them all.
        debug_assert_eq!(l.count, 0, "run end logged before the flush");
        let words = [l.total, l.dropped, l.stall, l.stall_waits, u64::from(l.seq)];
        for (i, w) in words.into_iter().enumerate() {
            // Relaxed: device-owned log words; the host reads them after the writer finished
            // (ordered by the join / stream sync), as it reads the counters.
            self.view.store_u64(e + 8 * i, w, Ordering::Relaxed);
        }
        l.run_ends += 1;
        // Relaxed: as above.
        self.view.store_u64(log + 8, l.run_ends, Ordering::Relaxed);
    }

    /// Counters of every lane as the device counts them.
    pub fn stats(&self) -> Vec<LaneStats> {
        self.lanes
            .iter()
            .map(|l| LaneStats {
                lane: l.lane,
                produced: l.total + u64::from(l.count),
                dropped: l.dropped,
                switches: l.switches,
                gate_timeouts: l.timeouts,
                stall_cycles: l.stall,
                max_stall_cycles: l.max_stall,
                bad_slots: l.bad_slots,
                stall_waits: l.stall_waits,
            })
            .collect()
    }

    /// Items of [`record_run`](Self::record_run)s on local lane `lane` that were dropped so far
    /// (at the write, or with a buffer a push gate could not publish).
    ///
    /// # Panics
    /// If `lane >= self.lane_count()`.
    pub fn items_dropped(&self, lane: usize) -> u64 {
        self.lanes[lane].items_dropped
    }

    /// Whether local lane `lane` currently holds a buffer.
    pub fn has_buffer(&self, lane: usize) -> bool {
        self.lanes[lane].capacity > 0
    }

    /// Flushes and returns the final counters.
    pub fn finish(mut self) -> Vec<LaneStats> {
        self.flush();
        self.log_run_ends();
        self.finished = true;
        self.stats()
    }
}

impl<R: Record> Drop for DeviceWriter<R> {
    fn drop(&mut self) {
        if !self.finished {
            self.flush();
            self.log_run_ends();
        }
        if let Some(b) = &self.bells {
            for l in self.lanes.iter() {
                b.lanes.set(l.lane, None);
            }
        }
        for l in self.lanes.iter() {
            // Release: hands the lane to a later writer; pairs with the AcqRel swap in `writer`.
            self.claims.lanes[l.lane as usize].store(false, Ordering::Release);
        }
        // AcqRel: as above.
        self.claims.queues.fetch_and(!(1 << self.queue), Ordering::AcqRel);
    }
}
