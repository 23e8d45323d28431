//! Collector shards: hand each drained buffer to its region's sink as a borrowed slice of the
//! buffer itself (zero-copy), then return it to the replenish thread.

use core::any::Any;
use core::marker::PhantomData;

use super::region::HostCtx;
use super::report::Collected;
use super::{CollectSink, CollectedBuffer, Done, Flags, Handoff, IDLE_BACKSTOP};
use crate::spsc::{Consumer, Producer};
use crate::sync::{Arc, Backoff, Parker, Unparker};
use crate::Record;

/// One region's sink on one collector shard, with the record type erased so that one shard can
/// serve regions of different record types.
pub(crate) trait RegionSink: Send {
    /// Hands the buffer of `h` to the sink (a buffer whose records cannot be read is counted,
    /// not collected).
    fn collect(&mut self, h: &Handoff, shard: u32);
    /// The typed sink, for the region's report.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

/// The typed sink of one region on one shard, and what it has seen.
pub(crate) struct TypedSink<R, S> {
    pub(crate) ctx: Arc<HostCtx>,
    pub(crate) sink: S,
    pub(crate) collected: Vec<Collected>,
    /// Buffers whose records could not be read from the device (counted as not collected).
    pub(crate) read_errors: u64,
    #[cfg(ferry_loom)]
    scratch: Vec<R>,
    _r: PhantomData<fn(R)>,
}

impl<R: Record, S: CollectSink<R>> TypedSink<R, S> {
    pub(crate) fn new(ctx: Arc<HostCtx>, sink: S) -> Self {
        let lanes = ctx.lanes.len();
        Self {
            ctx,
            sink,
            collected: vec![Collected::default(); lanes],
            read_errors: 0,
            #[cfg(ferry_loom)]
            scratch: Vec::new(),
            _r: PhantomData,
        }
    }
}

impl<R: Record, S: CollectSink<R>> RegionSink for TypedSink<R, S> {
    fn collect(&mut self, h: &Handoff, shard: u32) {
        let l = &self.ctx.layout;
        let off = l.buffer_offset(h.buffer) + l.records_offset();
        let mut count = h.count as usize;
        // SAFETY: the buffer is the host's from the drain shard's Acquire load of the ready
        // tail (which published it) until it is pushed into a free queue again, after `done`
        // below: no device or host thread writes it, or its host copy, meanwhile.
        if unsafe { self.ctx.mem.read_owned_from_device(off, count * size_of::<R>()) }.is_err() {
            self.read_errors += 1;
            count = 0;
        }
        #[cfg(not(ferry_loom))]
        // SAFETY: [1] the buffer is owned by the host until `done` (see above), so nothing writes
        // it while the slice lives; [2] `count ≤ records_per_buffer`, so the slice is inside the
        // buffer; [3] records are 64-aligned; [4] `R: Record` accepts any bit pattern.
        let records = unsafe { self.ctx.host.records::<R>(off, count) };
        #[cfg(ferry_loom)]
        let records = {
            // SAFETY: as above.
            unsafe { self.ctx.host.read_records_into(off, count, &mut self.scratch) };
            &self.scratch[..]
        };
        self.sink.on_buffer_collected(&CollectedBuffer {
            lane: h.lane,
            kind: h.kind,
            seq: h.seq,
            queue: h.queue,
            shard,
            records,
        });
        let c = &mut self.collected[h.lane as usize];
        c.records += count as u64;
        c.buffers += 1;
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// One collector shard: the consumer of drain shard `shard`'s hand-offs, for every region.
pub(crate) struct CollectorShard {
    pub(crate) shard: u32,
    pub(crate) flags: Arc<Flags>,
    pub(crate) from_drain: Consumer<Handoff>,
    pub(crate) done: Producer<Done>,
    pub(crate) replenish_bell: Unparker,
    pub(crate) parker: Parker,
    /// By engine region index; `None` for a region without a part on this shard.
    pub(crate) sinks: Vec<Option<Box<dyn RegionSink>>>,
}

impl CollectorShard {
    pub(crate) fn collect_one(&mut self, h: Handoff) {
        if let Some(Some(s)) = self.sinks.get_mut(h.region as usize) {
            s.collect(&h, self.shard);
        }
        let mut d = Done { region: h.region, buffer: h.buffer, kind: h.kind };
        let backoff = Backoff::new();
        while let Err(back) = self.done.push(d) {
            // Cannot happen (the ring holds every buffer); wait rather than lose the buffer.
            d = back;
            self.replenish_bell.unpark();
            backoff.snooze();
        }
        self.replenish_bell.unpark();
    }

    /// Collects everything queued now.
    pub(crate) fn drain_all(&mut self) {
        while let Some(h) = self.from_drain.pop() {
            self.collect_one(h);
        }
    }

    /// Collector thread body: waits for hand-offs (its drain shard wakes it: a
    /// host-internal signal), exits once execution is complete and the ring is empty, or at once
    /// on halt.
    pub(crate) fn poll_and_collect(&mut self) {
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
                backoff.snooze();
            } else {
                self.parker.park_timeout(IDLE_BACKSTOP);
                backoff.reset();
            }
        }
    }
}
