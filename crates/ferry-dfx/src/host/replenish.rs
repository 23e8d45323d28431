//! The replenish thread: routes collected buffers back to recycled lanes, keeps warm
//! targets, and runs the subsystems' arena acknowledgements. It owns no device-memory handle at
//! all, so it cannot write device memory.

use super::report::ReplenishStats;
use super::{Done, Flags, ReplenishHooks, IDLE_BACKSTOP};
use crate::config::DfxConfig;
use crate::spsc::{Consumer, Producer};
use crate::sync::{Arc, Backoff, Parker, Unparker};

/// What the replenish thread holds of one region.
pub(crate) struct RegionRecycle {
    /// Shards of the region (its recycled lanes are `recycled[0..shards]`).
    pub(crate) shards: u32,
    slots: u32,
    /// `[shard][kind]`: producer side of each recycled lane.
    pub(crate) recycled: Vec<Vec<Producer<u32>>>,
    /// Buffers carved but not seeded (startup replenish and warm targets take from it).
    pub(crate) reserve: Vec<u32>,
    warm: Vec<u32>,
    pub(crate) hooks: Box<dyn ReplenishHooks>,
    pub(crate) stats: ReplenishStats,
}

/// Picks the recycled shard with the strictly largest deficit below `target`, examining `origin`
/// first so that it wins ties. `len(s)` is shard `s`'s recycled size.
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

impl RegionRecycle {
    pub(crate) fn new(
        cfg: &DfxConfig,
        recycled: Vec<Vec<Producer<u32>>>,
        reserve: Vec<u32>,
    ) -> Self {
        Self {
            shards: cfg.shards,
            slots: cfg.free_slots,
            recycled,
            reserve,
            warm: cfg.warm_targets.clone(),
            hooks: Box::new(super::NoHooks),
            stats: ReplenishStats::default(),
        }
    }

    /// Where a done buffer of `kind` collected by `origin_shard` goes (origin wins ties).
    pub(crate) fn select_recycled_shard(&self, kind: u32, origin_shard: u32) -> u32 {
        let k = kind as usize;
        let cap = self.recycled[0][k].capacity() as u32;
        let target = self.warm.get(k).copied().unwrap_or(0).min(cap);
        select_by_deficit(target, origin_shard, self.shards, |s| {
            self.recycled[s as usize][k].len() as u32
        })
    }

    /// Tops recycled lanes up to their warm targets from the reserve; returns buffers added.
    /// `bells[s]` wakes drain shard `s`.
    pub(crate) fn replenish_recycled_pools(&mut self, bells: &[Unparker]) -> u64 {
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
                if let Some(b) = bells.get(s) {
                    b.unpark();
                }
            }
        }
        self.stats.allocated += grown;
        grown
    }
}

/// The replenish thread's state.
pub(crate) struct Replenisher {
    pub(crate) flags: Arc<Flags>,
    /// One done ring per collector shard.
    pub(crate) done: Vec<Consumer<Done>>,
    /// By engine region index.
    pub(crate) regions: Vec<RegionRecycle>,
    /// Per engine drain shard.
    pub(crate) drain_bells: Vec<Unparker>,
    pub(crate) parker: Parker,
}

impl Replenisher {
    /// Moves every done buffer into a recycled lane; returns how many moved.
    pub(crate) fn drain_done_into_recycled(&mut self) -> u64 {
        let mut moved = 0;
        for o in 0..self.done.len() {
            while let Some(d) = self.done[o].pop() {
                let Some(r) = self.regions.get_mut(d.region as usize) else { continue };
                let origin = o as u32;
                let t = r.select_recycled_shard(d.kind, origin);
                let mut b = d.buffer;
                let backoff = Backoff::new();
                while let Err(back) = r.recycled[t as usize][d.kind as usize].push(b) {
                    // Cannot happen (rings hold every buffer); keep the buffer rather than lose it.
                    b = back;
                    backoff.snooze();
                }
                r.stats.routed += 1;
                if t != origin {
                    r.stats.rebalanced += 1;
                }
                self.drain_bells[t as usize].unpark();
                moved += 1;
            }
        }
        moved
    }

    /// Tops every region's recycled lanes up to their warm targets.
    pub(crate) fn replenish_recycled_pools(&mut self) -> u64 {
        let bells = &self.drain_bells;
        self.regions.iter_mut().map(|r| r.replenish_recycled_pools(bells)).sum()
    }

    /// One replenish tick.
    pub(crate) fn tick(&mut self) -> u64 {
        let moved = self.drain_done_into_recycled();
        let grown = self.replenish_recycled_pools();
        for r in &mut self.regions {
            r.hooks.publish_arena_acks();
            r.stats.ack_ticks += 1;
        }
        moved + grown
    }

    /// The replenish thread body: never touches device memory. Woken by the
    /// collectors (host-internal) and by stop.
    pub(crate) fn mgmt_replenish_loop(&mut self) {
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
                backoff.snooze();
            } else {
                self.parker.park_timeout(IDLE_BACKSTOP);
                backoff.reset();
            }
        }
    }
}
