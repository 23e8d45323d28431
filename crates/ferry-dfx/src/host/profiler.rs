//! The single-region host ([`DfxTransport::start`]: an engine of its own serving one region)
//! and, for tests and loom models, an engine's pieces without threads.

use super::engine::{DfxEngine, EngineConfig, HaltedEngine, RegionKey, RunningEngine};
use super::region::DfxTransport;
use super::report::{LaneSnapshot, RunReport};
#[cfg(test)]
use super::{
    collect::CollectorShard, drain::DrainShard, engine::EngineReport, region::HostCtx,
    replenish::Replenisher,
};
use super::{CollectSink, NoHooks, ReplenishHooks};
use crate::mem::MemError;
#[cfg(test)]
use crate::sync::{atomic::Ordering, Arc};
use crate::Record;

/// The running host side of a single-region transport ([`DfxTransport::start`]): an engine
/// serving that one region.
pub struct HostProfiler<R: Record, S: CollectSink<R>> {
    engine: RunningEngine,
    key: RegionKey<R, S>,
}

impl<R: Record, S: CollectSink<R>> core::fmt::Debug for HostProfiler<R, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostProfiler").field("engine", &self.engine).finish()
    }
}

impl<R: Record, S: CollectSink<R>> HostProfiler<R, S> {
    /// Reads lane `lane`'s device state (gate, counters) through the memory operations.
    ///
    /// # Errors
    /// [`MemError`] if the device read fails.
    pub fn lane_snapshot(&self, lane: u32) -> Result<LaneSnapshot, MemError> {
        self.engine.lane_snapshot(self.key.index(), lane)
    }

    /// Host threads serving the region.
    pub fn threads(&self) -> usize {
        self.engine.threads()
    }

    /// Times the drain shards have slept so far: see [`RunningEngine::drain_parks`].
    pub fn drain_parks(&self) -> u64 {
        self.engine.drain_parks()
    }

    /// Stops the host and reconciles every lane: see [`RunningEngine::stop`].
    pub fn stop(self) -> RunReport<S> {
        self.engine.stop().take(self.key)
    }

    /// Simulates a dead host: see [`RunningEngine::halt`].
    pub fn halt(self) -> HaltedProfiler<R, S> {
        HaltedProfiler { engine: self.engine.halt(), key: self.key }
    }
}

/// A single-region host that was halted mid-run.
pub struct HaltedProfiler<R: Record, S: CollectSink<R>> {
    engine: HaltedEngine,
    key: RegionKey<R, S>,
}

impl<R: Record, S: CollectSink<R>> core::fmt::Debug for HaltedProfiler<R, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HaltedProfiler").field("engine", &self.engine).finish()
    }
}

impl<R: Record, S: CollectSink<R>> HaltedProfiler<R, S> {
    /// Reads lane `lane`'s device state.
    ///
    /// # Errors
    /// [`MemError`] if the device read fails.
    pub fn lane_snapshot(&self, lane: u32) -> Result<LaneSnapshot, MemError> {
        self.engine.lane_snapshot(self.key.index(), lane)
    }

    /// The restarted host: see [`HaltedEngine::recover`].
    pub fn recover(self) -> RunReport<S> {
        self.engine.recover().take(self.key)
    }
}

impl<R: Record> DfxTransport<R> {
    /// Starts an engine of its own for this region with no subsystem hooks: see
    /// [`DfxTransport::start_with_hooks`].
    pub fn start<S: CollectSink<R>>(self, sinks: impl FnMut(u32) -> S) -> HostProfiler<R, S> {
        self.start_with_hooks(sinks, NoHooks)
    }

    /// Starts an engine of its own for this region: startup replenish, warm recycled lanes, then
    /// the region's drain shards, the replenish thread and the collector shards.
    ///
    /// # Panics
    /// If a host thread cannot be spawned.
    pub fn start_with_hooks<S: CollectSink<R>>(
        self,
        sinks: impl FnMut(u32) -> S,
        hooks: impl ReplenishHooks,
    ) -> HostProfiler<R, S> {
        let mut e = DfxEngine::new(EngineConfig::default());
        let key = e.add_with_hooks(self, sinks, hooks).expect("an engine sized by its only region");
        HostProfiler { engine: e.start(), key }
    }
}

/// The engine's pieces without threads (tests and loom models): step them by hand.
#[cfg(test)]
pub(crate) struct EngineParts {
    pub(crate) ctxs: Vec<Arc<HostCtx>>,
    pub(crate) drains: Vec<DrainShard>,
    pub(crate) collectors: Vec<CollectorShard>,
    pub(crate) replenisher: Replenisher,
}

#[cfg(test)]
impl EngineParts {
    /// One host step: every drain shard's sweep (with retry), every collector, one replenish
    /// tick.
    pub(crate) fn step(&mut self) {
        for d in &mut self.drains {
            d.sweep();
        }
        for c in &mut self.collectors {
            c.drain_all();
        }
        self.replenisher.tick();
    }

    /// Free-queue occupancy of `lane` of region `region` as the host sees it.
    pub(crate) fn free_len(&self, region: usize, lane: u32) -> u32 {
        let ctx = &self.ctxs[region];
        let head = ctx.free_head(lane).expect("read head");
        // Relaxed: host-owned word.
        let tail = ctx.host.load_u32(ctx.layout.free_tail_offset(lane), Ordering::Relaxed);
        ferry_abi::dfx::fq_len(head, tail)
    }

    /// The reports of every region, as the pieces stand.
    pub(crate) fn report(self) -> EngineReport {
        EngineReport::new(self.ctxs, self.drains, self.replenisher, self.collectors)
    }
}

/// A single-region [`EngineParts`], typed.
#[cfg(test)]
pub(crate) struct Parts<R: Record, S: CollectSink<R>> {
    pub(crate) engine: EngineParts,
    key: RegionKey<R, S>,
}

#[cfg(test)]
impl<R: Record> DfxTransport<R> {
    /// Startup replenish, then the host pieces of an engine of its own, unthreaded.
    pub(crate) fn into_parts<S: CollectSink<R>>(self, sinks: impl FnMut(u32) -> S) -> Parts<R, S> {
        let mut e = DfxEngine::new(EngineConfig::default());
        let key = e.add(self, sinks).expect("an engine sized by its only region");
        Parts { engine: e.into_parts(), key }
    }
}

#[cfg(test)]
impl<R: Record, S: CollectSink<R>> Parts<R, S> {
    /// Free-queue occupancy of `lane` as the host sees it.
    pub(crate) fn free_len(&self, lane: u32) -> u32 {
        self.engine.free_len(self.key.index(), lane)
    }

    /// Lanes listed for retry on shard `s`.
    #[cfg(not(ferry_loom))]
    pub(crate) fn retry_list(&self, s: usize) -> &[u32] {
        self.engine.drains[s].regions[0].retry_list()
    }

    /// Reconcile of the pieces as they stand.
    pub(crate) fn report(self) -> RunReport<S> {
        self.engine.report().take(self.key)
    }
}
