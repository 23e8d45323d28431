//! One transport region (one subsystem's record type): initialisation, seeding, startup
//! replenish, and the host context every engine thread shares for it.

use core::marker::PhantomData;
use std::sync::OnceLock;

use ferry_abi::dfx::{self, DfxLayout, LaneState};

use super::drain::RegionDrain;
use super::replenish::RegionRecycle;
use super::report::{LaneSnapshot, RunEnd, RunEnds, StallIntervals};
use crate::clock::CycleClock;
use crate::config::{BuildError, DfxConfig, LaneSpec};
use crate::device::{
    policy_word, stall_entry_offset, stall_log_size, DeviceRegion, LaneBells, RegionBells,
    RUN_END_BYTES, RUN_LOG_OFFSET, RUN_RING, STALL_LOG_STRIDE, STALL_RING,
};
use crate::mem::{DeviceMemory, MemError, ShmRegion, MAX_NARROW_WRITE};
use crate::spsc::{self, Consumer, Producer};
use crate::sync::atomic::Ordering;
use crate::sync::Arc;
use crate::Record;

/// Immutable host context of one region, shared by the engine's threads.
pub(crate) struct HostCtx {
    pub(crate) mem: std::sync::Arc<dyn DeviceMemory>,
    pub(crate) host: ShmRegion,
    pub(crate) layout: DfxLayout,
    pub(crate) device_addr: u64,
    pub(crate) lanes: Vec<LaneSpec>,
    pub(crate) bells: Option<std::sync::Arc<RegionBells>>,
    /// Offset of the first lane's stall log, when the region has room for them.
    pub(crate) stall_log: Option<usize>,
}

impl HostCtx {
    pub(crate) fn buffer_addr(&self, b: u32) -> u64 {
        self.device_addr + self.layout.buffer_offset(b) as u64
    }

    pub(crate) fn buffer_of_addr(&self, addr: u64) -> Option<u32> {
        let off = usize::try_from(addr.checked_sub(self.device_addr)?).ok()?;
        self.layout.buffer_index_at(off)
    }

    /// Host push into a lane's free queue: slot, narrow write, tail, narrow write.
    /// On failure the host word is rolled back and the caller keeps the buffer.
    pub(crate) fn push_free(&self, lane: u32, tail: u32, buffer: u32) -> Result<(), MemError> {
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
    pub(crate) fn free_head(&self, lane: u32) -> Result<u32, MemError> {
        let off = self.layout.free_head_offset(lane);
        self.mem.read_range_from_device(off, 4)?;
        // Acquire: pairs with the device's Release store of the head in `claim`: its slot read
        // happened before we may overwrite the slot.
        Ok(self.host.load_u32(off, Ordering::Acquire))
    }

    /// Wakes lane `lane`'s writer, when the region has wake-up hints.
    pub(crate) fn ring_lane(&self, lane: u32) {
        if let Some(b) = &self.bells {
            b.lanes.ring(lane);
        }
    }

    /// Reads lane `lane`'s device state. `settled`: the lane's writer has finished (after the
    /// run), so the state is copied in bulk; otherwise word by word, as a live diagnostic. Only
    /// device-written words are pulled: the free queue's head and the fields after the free
    /// queue, never the host-owned tail or slots, which a drain shard may be pushing meanwhile
    /// (a pull of those would overwrite its new tail in the host view with the device's old one).
    pub(crate) fn read_lane(&self, lane: u32, settled: bool) -> Result<LaneSnapshot, MemError> {
        use core::mem::offset_of as o;
        let off = self.layout.lane_offset(lane);
        let state = off + size_of::<ferry_abi::dfx::FreeQueue>();
        self.pull(state, size_of::<LaneState>() - size_of::<ferry_abi::dfx::FreeQueue>(), settled)?;
        let head = self.layout.free_head_offset(lane);
        self.pull(head, 4, settled)?;
        let h = &self.host;
        // Relaxed: diagnostic / post-run reads of device counters (the run's end is ordered by the
        // writers' join before `stop`); the tail is host-owned.
        let r = Ordering::Relaxed;
        let free_len =
            h.load_u32(self.layout.free_tail_offset(lane), r).wrapping_sub(h.load_u32(head, r));
        let q = self.lanes.get(lane as usize).map_or(0, |l| l.ready_queue);
        let (rq_head, rq_tail) = (self.layout.head_offset(q), self.layout.tail_offset(q));
        self.pull(rq_tail, 4, settled)?;
        let depth = self.layout.ready_depth;
        let queued = dfx::rq_len(h.load_u32(rq_head, r), h.load_u32(rq_tail, r), depth);
        let ready_space = dfx::rq_capacity(depth).saturating_sub(queued);
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
            free_len,
            ready_space,
        })
    }

    fn pull(&self, off: usize, len: usize, settled: bool) -> Result<(), MemError> {
        if settled {
            // SAFETY: the lane's writer has finished (the caller says so): nobody writes these
            // device words any more, and only this thread writes the host copy of them.
            unsafe { self.mem.read_owned_from_device(off, len) }
        } else {
            self.mem.read_range_from_device(off, len)
        }
    }

    /// The stall log of lane `lane`, read after its writer finished.
    pub(crate) fn read_stalls(&self, lane: u32) -> Result<StallIntervals, MemError> {
        let Some(base) = self.stall_log else {
            return Ok(StallIntervals::default());
        };
        let off = base + lane as usize * STALL_LOG_STRIDE;
        self.pull(off, STALL_LOG_STRIDE, true)?;
        let h = &self.host;
        // Relaxed: post-run reads of the lane's log (the writers' join orders them before `stop`).
        let r = Ordering::Relaxed;
        let total = h.load_u64(off, r);
        let mut out = StallIntervals::default();
        out.total = total;
        let ring = STALL_RING as u64;
        for n in total.saturating_sub(ring)..total {
            let e = off + stall_entry_offset(n);
            let w = [h.load_u64(e, r), h.load_u64(e + 8, r)];
            // A torn or foreign entry (a halted writer) is skipped rather than reported backwards.
            if w[0] < w[1] {
                out.push(w);
            }
        }
        Ok(out)
    }
}

impl HostCtx {
    /// The run-end log of lane `lane`, read after its writer finished (after
    /// [`read_stalls`](Self::read_stalls), which pulls the whole log).
    pub(crate) fn read_run_ends(&self, lane: u32) -> RunEnds {
        let Some(base) = self.stall_log else {
            return RunEnds::default();
        };
        let off = base + lane as usize * STALL_LOG_STRIDE;
        let h = &self.host;
        // Relaxed: post-run reads of the lane's log (the writers' join orders them before `stop`).
        let r = Ordering::Relaxed;
        let total = h.load_u64(off + 8, r);
        let ring = RUN_RING as u64;
        let ends = (total.saturating_sub(ring)..total)
            .map(|n| {
                let e = off + RUN_LOG_OFFSET + RUN_END_BYTES * (n % ring) as usize;
                let w = |i: usize| h.load_u64(e + 8 * i, r);
                RunEnd {
                    produced: w(0),
                    dropped: w(1),
                    stall_cycles: w(2),
                    stall_waits: w(3),
                    seq: w(4) as u32,
                }
            })
            .collect();
        RunEnds { total, ends }
    }
}

fn write_u32(ctx: &HostCtx, off: usize, v: u32) -> Result<(), MemError> {
    // Relaxed: init-time writes, before any device thread exists.
    ctx.host.store_u32(off, v, Ordering::Relaxed);
    ctx.mem.write_range_to_device(off, 4)
}

/// An initialised DFX transport region, before it joins a host engine.
///
/// A region holds one record type's lanes, queues and buffers (one subsystem, or one ChipSwimlane
/// buffer kind). [`start`](Self::start) serves it with a host engine of its own; a run with
/// several subsystems adds every region to one [`DfxEngine`](super::DfxEngine) instead, so the
/// number of host threads does not grow with the number of subsystems.
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
    pub(crate) cfg: DfxConfig,
    pub(crate) ctx: Arc<HostCtx>,
    pub(crate) device: DeviceRegion,
    /// One drain part per shard of the region.
    pub(crate) drains: Vec<RegionDrain>,
    pub(crate) recycle: RegionRecycle,
    pub(crate) _r: PhantomData<fn(R)>,
}

impl<R: Record> core::fmt::Debug for DfxTransport<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DfxTransport").field("cfg", &self.cfg).finish_non_exhaustive()
    }
}

impl<R: Record> DfxTransport<R> {
    /// Initialises the region in `mem` for `cfg`: header, lane descriptors, and each lane's seed
    /// buffers (free queue first, surplus to its shard's recycled lane). `clock` is the device
    /// clock the gates measure against.
    ///
    /// `mem` need not be zeroed: every control word (queue indices and entries, lane states,
    /// free queues, the stall log) is cleared here first, in narrow writes, as a device allocator
    /// hands out memory with whatever its last user left there.
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
        // Loom models run without wake hints: device threads only yield.
        let bells = (cfg.doorbell_hint && !cfg!(ferry_loom)).then(|| {
            std::sync::Arc::new(RegionBells {
                drains: OnceLock::new(),
                lanes: LaneBells::new(cfg.lanes.len()),
            })
        });
        let ctx = Arc::new(HostCtx {
            stall_log,
            device_addr: mem.device_addr(),
            mem,
            host,
            layout,
            lanes: cfg.lanes.clone(),
            bells,
        });
        clear_control_words(&ctx).map_err(BuildError::Memory)?;
        write_header(&ctx, &cfg)?;

        let n = cfg.shards as usize;
        let kinds = cfg.kinds() as usize;
        let ring_cap = cfg.total_buffers().max(1) as usize;
        let mut recycled_p: Vec<Vec<Producer<u32>>> = Vec::new();
        let mut recycled_c: Vec<Vec<Consumer<u32>>> = Vec::new();
        for _ in 0..n {
            let (p, c): (Vec<_>, Vec<_>) = (0..kinds).map(|_| spsc::channel(ring_cap)).unzip();
            recycled_p.push(p);
            recycled_c.push(c);
        }

        // Seed each lane: free queue first, surplus to its shard's recycled lane.
        let mut next_buffer = 0u32;
        for (lane, spec) in cfg.lanes.iter().enumerate() {
            let lane = lane as u32;
            let field = |f| layout.lane_field_offset(lane, f);
            write_u32(&ctx, field(core::mem::offset_of!(LaneState, ready_queue)), spec.ready_queue)
                .map_err(BuildError::Memory)?;
            write_u32(&ctx, field(core::mem::offset_of!(LaneState, kind)), spec.kind)
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
        let device = DeviceRegion::attach(ctx.mem.device_view(), ctx.device_addr, clock)?
            .with_bells(ctx.bells.clone());

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
        let drains = recycled_c
            .into_iter()
            .enumerate()
            .map(|(s, recycled)| {
                RegionDrain::new(ctx.clone(), s as u32, n as u32, &quota, recycled)
            })
            .collect();
        let recycle = RegionRecycle::new(&cfg, recycled_p, reserve);
        Ok(Self { cfg, ctx, device, drains, recycle, _r: PhantomData })
    }

    /// The device's handle on the region (hand it to the AICPU threads).
    pub fn device_region(&self) -> DeviceRegion {
        self.device.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &DfxConfig {
        &self.cfg
    }

    /// Startup proactive replenish: fills every free queue to `free_slots` from any
    /// shard's recycled lane, then from the reserve. Runs before any host thread exists — the only
    /// place where cross-shard consumption and allocation are allowed. Returns buffers pushed.
    ///
    /// # Errors
    /// [`MemError`] if a device write fails (the buffer stays in the reserve).
    pub fn replenish_free_queues(&mut self) -> Result<u64, MemError> {
        startup_replenish(&self.ctx, &mut self.drains, &mut self.recycle.reserve)
    }
}

/// Startup proactive replenish of one region (see [`DfxTransport::replenish_free_queues`]).
pub(crate) fn startup_replenish(
    ctx: &HostCtx,
    drains: &mut [RegionDrain],
    reserve: &mut Vec<u32>,
) -> Result<u64, MemError> {
    let mut pushed = 0;
    let slots = ctx.layout.free_slots;
    for lane in 0..ctx.lanes.len() as u32 {
        let kind = ctx.lanes[lane as usize].kind as usize;
        // Relaxed: host-owned word, written by this thread.
        let mut tail = ctx.host.load_u32(ctx.layout.free_tail_offset(lane), Ordering::Relaxed);
        loop {
            let head = ctx.free_head(lane)?;
            if dfx::fq_is_full(head, tail, slots) {
                break;
            }
            let from_recycled = drains.iter_mut().find_map(|d| d.recycled[kind].pop());
            let Some(b) = from_recycled.or_else(|| reserve.pop()) else {
                break;
            };
            if let Err(e) = ctx.push_free(lane, tail, b) {
                reserve.push(b);
                return Err(e);
            }
            tail = tail.wrapping_add(1);
            pushed += 1;
        }
    }
    Ok(pushed)
}

/// Zeroes every control word of the region (header, ready-queue indices and entries, lane states
/// and free queues, and the stall log when there is one) in both views, in narrow writes, before
/// anything else is written: device memory comes from an allocator that does not clear it (a
/// recycled range keeps the words of its last user), and the protocol starts from zeroed queue
/// indices and lane counters. Record buffers are not cleared: the device writes a buffer's
/// records and count before it publishes the buffer, and the host reads nothing else of it.
fn clear_control_words(ctx: &HostCtx) -> Result<(), MemError> {
    // Both ranges below are whole narrow writes long: the buffers start 64-aligned and a lane's
    // log is a multiple of 64 bytes, so no write is cut short at a range's end.
    const _: () = assert!(MAX_NARROW_WRITE == 64 && STALL_LOG_STRIDE % MAX_NARROW_WRITE == 0);
    // Under loom every region is a fresh model allocation of zeroed words, and each model atomic
    // spends the model's bounded branch budget: this single-threaded init step (checked by the
    // dirty-memory transport test) is left out of the models.
    if cfg!(ferry_loom) {
        return Ok(());
    }
    let mut ranges = vec![(0, ctx.layout.buffers_offset())];
    if let Some(log) = ctx.stall_log {
        ranges.push((log, log + stall_log_size(ctx.layout.lanes)));
    }
    for (start, end) in ranges {
        let mut off = start;
        while off < end {
            let len = MAX_NARROW_WRITE.min(end - off);
            for w in (off..off + len).step_by(4) {
                // Relaxed: init-time, before any device thread exists.
                ctx.host.store_u32(w, 0, Ordering::Relaxed);
            }
            ctx.mem.write_range_to_device(off, len)?;
            off += len;
        }
    }
    Ok(())
}

/// The region header: one 64-byte narrow write.
fn write_header(ctx: &HostCtx, cfg: &DfxConfig) -> Result<(), BuildError> {
    let mut h = ctx.layout.header();
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
    // Relaxed: as above.
    ctx.host.store_u64(48, h.block_budget_cycles, Ordering::Relaxed);
    // Relaxed: as above.
    ctx.host.store_u64(56, h.drop_wait_cycles, Ordering::Relaxed);
    ctx.mem.write_range_to_device(0, 64).map_err(BuildError::Memory)
}
