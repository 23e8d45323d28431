//! The host engine: one fixed set of host threads serving every region of a run.

use core::any::Any;
use core::marker::PhantomData;
use std::thread::JoinHandle;

use super::collect::{CollectorShard, RegionSink, TypedSink};
use super::drain::{DrainShard, HandoffTx, RegionDrain};
use super::poll::PollPolicy;
use super::region::{startup_replenish, DfxTransport, HostCtx};
use super::replenish::{RegionRecycle, Replenisher};
use super::report::{reconcile, Collected, DrainStats, LaneSnapshot, ReplenishStats, RunReport};
use super::{CollectSink, Done, Flags, Handoff, NoHooks, ReplenishHooks};
use crate::config::BuildError;
use crate::mem::MemError;
use crate::spsc::{self, Consumer, Producer};
use crate::sync::atomic::Ordering;
use crate::sync::{Arc, Parker, Unparker};
use crate::Record;

/// How the engine's host threads run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineConfig {
    /// Drain shards (and as many collector shards). Every region's shard count must not exceed
    /// it; `None`: the largest shard count of the regions added.
    pub drain_shards: Option<u32>,
    /// How drain shards poll their queues.
    pub poll: PollPolicy,
    /// Nice value of the engine's threads (Linux; `None`: inherit).
    pub nice: Option<i32>,
}

/// Lowers the calling thread's scheduling priority to `nice` (Linux; elsewhere nothing).
fn set_nice(nice: Option<i32>) {
    #[cfg(target_os = "linux")]
    if let Some(n) = nice {
        // SAFETY: gettid and setpriority take no pointers; PRIO_PROCESS with a thread id changes
        // only that thread's nice value. A failure (no permission to raise priority) leaves it.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, n);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// Names one region of an engine, with its record and sink types, so the region's report can be
/// taken back typed ([`EngineReport::take`]).
pub struct RegionKey<R, S> {
    index: usize,
    _t: PhantomData<fn(R, S)>,
}

impl<R, S> Clone for RegionKey<R, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R, S> Copy for RegionKey<R, S> {}

impl<R, S> core::fmt::Debug for RegionKey<R, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("RegionKey").field(&self.index).finish()
    }
}

impl<R, S> RegionKey<R, S> {
    /// The region's index in its engine (in the order regions were added).
    pub fn index(&self) -> usize {
        self.index
    }
}

/// A region waiting to join the threads of [`DfxEngine::start`].
struct Pending {
    ctx: Arc<HostCtx>,
    shards: u32,
    drains: Vec<RegionDrain>,
    recycle: RegionRecycle,
    sinks: Vec<Box<dyn RegionSink>>,
}

/// One host engine for every DFX region of a run.
///
/// The thread count is fixed by the engine, not by the number of regions: `D` drain shards
/// ([`EngineConfig::drain_shards`]), `D` collector shards and one replenish thread, i.e. 3 host
/// threads for a run with one drain shard whatever subsystems are on. Each ready queue of each
/// region is served by exactly one drain shard (`q % region shards`), which is the sole runtime
/// writer of that queue's head and of the free queues of its lanes; recycled lanes stay SPSC
/// (replenish → that drain shard), and the replenish thread never touches device memory.
///
/// # Examples
/// Two subsystems with different record sizes on one engine:
/// ```
/// use std::sync::Arc;
/// use ferry_abi::arch::A2A3;
/// use ferry_dfx::{clock::SteadyClock, mem::SvmMemory, CollectSink, CollectedBuffer, DfxBuilder,
///                 DfxEngine, DfxTransport, EngineConfig};
///
/// struct Count(u64);
/// impl CollectSink<u64> for Count {
///     fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, u64>) {
///         self.0 += b.records.len() as u64;
///     }
/// }
///
/// fn transport<R: ferry_dfx::Record>(addr: u64) -> DfxTransport<R> {
///     let cfg = DfxBuilder::new(&A2A3).ready_queues(1).lane(0, 0, 2).records_per_buffer(8)
///         .build::<R>().unwrap();
///     let mem = Arc::new(SvmMemory::new(cfg.region_size(), addr));
///     DfxTransport::new(cfg, mem, Arc::new(SteadyClock::new(A2A3.clock_hz))).unwrap()
/// }
/// let small = transport::<u64>(0x1_0000_0000);
/// let large = transport::<[u64; 4]>(0x2_0000_0000);
/// let (ds, dl) = (small.device_region(), large.device_region());
/// let mut engine = DfxEngine::new(EngineConfig::default());
/// let ks = engine.add(small, |_shard| Count(0)).unwrap();
/// let kl = engine.add(large, |_| |_b: &CollectedBuffer<'_, [u64; 4]>| {}).unwrap();
/// let running = engine.start();
/// assert_eq!(running.threads(), 3);
/// let mut w = ds.writer::<u64>(0, &[0]).unwrap();
/// let mut v = dl.writer::<[u64; 4]>(0, &[0]).unwrap();
/// for i in 0..100 { w.record(0, i); v.record(0, [i; 4]); }
/// w.finish();
/// v.finish();
/// let mut report = running.stop();
/// let rs = report.take(ks);
/// assert_eq!(rs.totals(), (100, 100, 0));
/// assert_eq!(rs.sinks[0].0, 100);
/// assert_eq!(report.take(kl).totals(), (100, 100, 0));
/// ```
pub struct DfxEngine {
    cfg: EngineConfig,
    regions: Vec<Pending>,
}

impl core::fmt::Debug for DfxEngine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DfxEngine")
            .field("cfg", &self.cfg)
            .field("regions", &self.regions.len())
            .finish()
    }
}

impl DfxEngine {
    /// An engine with no regions yet.
    pub fn new(cfg: EngineConfig) -> Self {
        Self { cfg, regions: Vec::new() }
    }

    /// Adds a region with no subsystem hooks: see [`add_with_hooks`](Self::add_with_hooks).
    ///
    /// # Errors
    /// As [`add_with_hooks`](Self::add_with_hooks).
    pub fn add<R: Record, S: CollectSink<R>>(
        &mut self,
        t: DfxTransport<R>,
        sinks: impl FnMut(u32) -> S,
    ) -> Result<RegionKey<R, S>, BuildError> {
        self.add_with_hooks(t, sinks, NoHooks)
    }

    /// Adds a region: `sinks(s)` is the sink of its shard `s` (one per shard of the region),
    /// `hooks` its replenish-tick hooks (ArgsDump's arena acknowledgements).
    ///
    /// # Errors
    /// [`BuildError::Shards`] when the region has more shards than the engine's
    /// [`EngineConfig::drain_shards`].
    pub fn add_with_hooks<R: Record, S: CollectSink<R>>(
        &mut self,
        t: DfxTransport<R>,
        mut sinks: impl FnMut(u32) -> S,
        hooks: impl ReplenishHooks,
    ) -> Result<RegionKey<R, S>, BuildError> {
        let shards = t.cfg.shards;
        if self.cfg.drain_shards.is_some_and(|d| shards > d) {
            return Err(BuildError::Shards);
        }
        let index = self.regions.len();
        let DfxTransport { ctx, mut drains, mut recycle, .. } = t;
        for d in &mut drains {
            d.region = index as u32;
        }
        recycle.hooks = Box::new(hooks);
        let sinks = (0..shards)
            .map(|s| Box::new(TypedSink::<R, S>::new(ctx.clone(), sinks(s))) as Box<dyn RegionSink>)
            .collect();
        self.regions.push(Pending { ctx, shards, drains, recycle, sinks });
        Ok(RegionKey { index, _t: PhantomData })
    }

    fn shard_count(&self) -> u32 {
        let need = self.regions.iter().map(|r| r.shards).max().unwrap_or(1);
        self.cfg.drain_shards.unwrap_or(need).max(need).max(1)
    }

    /// Startup replenish of every region, then the engine's pieces, unthreaded.
    fn assemble(self) -> Assembled {
        let n = self.shard_count() as usize;
        let ring_cap: usize =
            self.regions.iter().map(|r| r.ctx.layout.buffers as usize).sum::<usize>().max(1);
        let flags = Arc::new(Flags::new());
        let drain_parkers: Vec<Parker> = (0..n).map(|_| Parker::new()).collect();
        let drain_bells: Vec<Unparker> =
            drain_parkers.iter().map(|p| p.unparker().clone()).collect();
        let collector_parkers: Vec<Parker> = (0..n).map(|_| Parker::new()).collect();
        let collector_bells: Vec<Unparker> =
            collector_parkers.iter().map(|p| p.unparker().clone()).collect();
        let replenish_parker = Parker::new();
        let rbell = replenish_parker.unparker().clone();
        let (handoff_tx, handoff_rx): (Vec<Producer<Handoff>>, Vec<Consumer<Handoff>>) =
            (0..n).map(|_| spsc::channel(ring_cap)).unzip();
        let (done_tx, done_rx): (Vec<Producer<Done>>, Vec<Consumer<Done>>) =
            (0..n).map(|_| spsc::channel(ring_cap)).unzip();

        let mut shard_regions: Vec<Vec<RegionDrain>> = (0..n).map(|_| Vec::new()).collect();
        let mut shard_sinks: Vec<Vec<Option<Box<dyn RegionSink>>>> =
            (0..n).map(|_| Vec::new()).collect();
        let mut recycles = Vec::new();
        let mut ctxs = Vec::new();
        for p in self.regions {
            let Pending { ctx, shards, mut drains, mut recycle, sinks } = p;
            // A failed device write leaves the buffer in the reserve: the lane starts with fewer
            // buffers, and the run's reconcile still holds.
            let _ = startup_replenish(&ctx, &mut drains, &mut recycle.reserve);
            recycle.replenish_recycled_pools(&drain_bells);
            if let Some(b) = &ctx.bells {
                // The device's doorbell hint for queue q rings the drain shard that serves it.
                let bells = (0..ctx.layout.ready_queues)
                    .map(|q| drain_bells[(q % shards) as usize].clone())
                    .collect();
                let _ = b.drains.set(bells);
            }
            for (s, mut d) in drains.into_iter().enumerate() {
                d.load_shadows();
                shard_regions[s].push(d);
            }
            let mut sinks = sinks.into_iter();
            for (s, v) in shard_sinks.iter_mut().enumerate() {
                v.push(if s < shards as usize { sinks.next() } else { None });
            }
            recycles.push(recycle);
            ctxs.push(ctx);
        }
        let drains = shard_regions
            .into_iter()
            .zip(handoff_tx)
            .zip(drain_parkers)
            .enumerate()
            .map(|(s, ((regions, ring), parker))| DrainShard {
                shard: s as u32,
                flags: flags.clone(),
                regions,
                tx: HandoffTx { ring, collector: collector_bells[s].clone() },
                parker,
                poll: self.cfg.poll,
                parks: 0,
            })
            .collect();
        let collectors = shard_sinks
            .into_iter()
            .zip(handoff_rx)
            .zip(done_tx)
            .zip(collector_parkers)
            .enumerate()
            .map(|(s, (((sinks, from_drain), done), parker))| CollectorShard {
                shard: s as u32,
                flags: flags.clone(),
                from_drain,
                done,
                replenish_bell: rbell.clone(),
                parker,
                sinks,
            })
            .collect();
        let replenisher = Replenisher {
            flags: flags.clone(),
            done: done_rx,
            regions: recycles,
            drain_bells: drain_bells.clone(),
            parker: replenish_parker,
        };
        Assembled { flags, ctxs, drains, collectors, replenisher, drain_bells, collector_bells }
    }

    /// Runs every region's startup replenish, warms the recycled lanes, then spawns the drain
    /// shards, the replenish thread and the collector shards (producers of a ring before its
    /// consumers).
    ///
    /// # Panics
    /// If a host thread cannot be spawned.
    pub fn start(self) -> RunningEngine {
        let nice = self.cfg.nice;
        let a = self.assemble();
        let spawn = |name: String| std::thread::Builder::new().name(name);
        let drains = a
            .drains
            .into_iter()
            .map(|mut d| {
                spawn(format!("ferry-dfx-drain-{}", d.shard))
                    .spawn(move || {
                        set_nice(nice);
                        d.mgmt_drain_loop();
                        d
                    })
                    .expect("spawn drain shard")
            })
            .collect();
        let mut rep = a.replenisher;
        let replenish_bell = rep.parker.unparker().clone();
        let replenish = spawn("ferry-dfx-replenish".into())
            .spawn(move || {
                set_nice(nice);
                rep.mgmt_replenish_loop();
                rep
            })
            .expect("spawn replenish thread");
        let collectors = a
            .collectors
            .into_iter()
            .map(|mut c| {
                spawn(format!("ferry-dfx-collect-{}", c.shard))
                    .spawn(move || {
                        set_nice(nice);
                        c.poll_and_collect();
                        c
                    })
                    .expect("spawn collector shard")
            })
            .collect();
        RunningEngine {
            flags: a.flags,
            ctxs: a.ctxs,
            drain_bells: a.drain_bells,
            collector_bells: a.collector_bells,
            replenish_bell,
            drains,
            replenish: Some(replenish),
            collectors,
        }
    }

    /// The engine's pieces without threads, for single-threaded tests and loom models.
    #[cfg(test)]
    pub(crate) fn into_parts(self) -> super::profiler::EngineParts {
        let a = self.assemble();
        super::profiler::EngineParts {
            ctxs: a.ctxs,
            drains: a.drains,
            collectors: a.collectors,
            replenisher: a.replenisher,
        }
    }
}

struct Assembled {
    flags: Arc<Flags>,
    ctxs: Vec<Arc<HostCtx>>,
    drains: Vec<DrainShard>,
    collectors: Vec<CollectorShard>,
    replenisher: Replenisher,
    drain_bells: Vec<Unparker>,
    collector_bells: Vec<Unparker>,
}

/// The engine's threads while a run is live.
///
/// Stop it with [`stop`](Self::stop) after every writer of every region has finished (flushed);
/// simulate a dead host with [`halt`](Self::halt).
pub struct RunningEngine {
    flags: Arc<Flags>,
    ctxs: Vec<Arc<HostCtx>>,
    drain_bells: Vec<Unparker>,
    collector_bells: Vec<Unparker>,
    replenish_bell: Unparker,
    drains: Vec<JoinHandle<DrainShard>>,
    /// `None` once the threads were joined (by `stop`, `halt` or drop).
    replenish: Option<JoinHandle<Replenisher>>,
    collectors: Vec<JoinHandle<CollectorShard>>,
}

impl Drop for RunningEngine {
    /// An engine dropped without [`stop`](RunningEngine::stop) (an error path) halts: its
    /// threads exit at once and are joined, so none outlives it.
    fn drop(&mut self) {
        let Some(rep) = self.replenish.take() else { return };
        // Relaxed: see `Flags::halted`; the joins below order everything else.
        self.flags.halted.store(true, Ordering::Relaxed);
        self.ring_all();
        for h in self.drains.drain(..) {
            let _ = h.join();
        }
        let _ = rep.join();
        for h in self.collectors.drain(..) {
            let _ = h.join();
        }
    }
}

impl core::fmt::Debug for RunningEngine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RunningEngine")
            .field("regions", &self.ctxs.len())
            .field("threads", &self.threads())
            .finish_non_exhaustive()
    }
}

fn join<T>(h: JoinHandle<T>) -> T {
    match h.join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// A host thread of the engine ended by a panic: what it held (buffers it was draining,
/// records it was collecting) is gone, so the run cannot be reconciled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("DFX host thread {thread} died ({message}); the run's records cannot be reconciled")]
pub struct HostDied {
    /// The thread's name (`ferry-dfx-drain-<i>`, `ferry-dfx-replenish`, `ferry-dfx-collect-<i>`).
    pub thread: String,
    /// The panic's message, when it had one.
    pub message: String,
}

fn try_join<T>(h: JoinHandle<T>) -> Result<T, HostDied> {
    let thread = h.thread().name().unwrap_or("dfx host").to_owned();
    h.join().map_err(|p| {
        let message = p
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        HostDied { thread, message }
    })
}

impl RunningEngine {
    /// Host threads the engine runs (drain shards + collector shards + the replenish thread).
    pub fn threads(&self) -> usize {
        self.drains.len() + self.collectors.len() + 1
    }

    /// Regions the engine serves.
    pub fn regions(&self) -> usize {
        self.ctxs.len()
    }

    /// Times the drain shards have slept after an empty sweep so far (live; the final count is
    /// in the report's `drain.parks`).
    pub fn drain_parks(&self) -> u64 {
        self.flags.drain_parks()
    }

    /// Reads lane `lane` of region `region`'s device state (gate, counters) while the run is
    /// live.
    ///
    /// # Errors
    /// [`MemError`] if the device read fails or the region does not exist.
    pub fn lane_snapshot(&self, region: usize, lane: u32) -> Result<LaneSnapshot, MemError> {
        let ctx = self.ctxs.get(region).ok_or(MemError::OutOfRange { off: region, len: 0 })?;
        ctx.read_lane(lane, false)
    }

    fn ring_all(&self) {
        self.drain_bells.iter().for_each(Unparker::unpark);
        self.collector_bells.iter().for_each(Unparker::unpark);
        self.replenish_bell.unpark();
    }

    /// Stops the host: drain shards make a final pass and exit, then the replenish
    /// thread, then collectors drain their rings and exit; the regions' reports are then ready.
    ///
    /// Call it after every writer has flushed (finished or been dropped): records published
    /// later are not collected, and the reconcile shows them as missing.
    pub fn stop(mut self) -> EngineReport {
        // Release: pairs with the Acquire load in `Flags::running`.
        self.flags.running.store(false, Ordering::Release);
        self.ring_all();
        let drains: Vec<DrainShard> = self.drains.drain(..).map(join).collect();
        self.replenish_bell.unpark();
        let rep = join(self.replenish.take().expect("threads joined only once"));
        // Release: every drain hand-off happened before; pairs with `Flags::exec_complete`.
        self.flags.exec_complete.store(true, Ordering::Release);
        self.collector_bells.iter().for_each(Unparker::unpark);
        let collectors: Vec<CollectorShard> = self.collectors.drain(..).map(join).collect();
        EngineReport::new(core::mem::take(&mut self.ctxs), drains, rep, collectors)
    }

    /// As [`stop`](Self::stop), but a host thread that died (panicked) is an error instead of a
    /// panic here: the other threads are then halted and joined (none outlives the call), and
    /// the error names the first dead thread.
    ///
    /// # Errors
    /// [`HostDied`] when a drain shard, the replenish thread or a collector shard panicked.
    pub fn try_stop(mut self) -> Result<EngineReport, HostDied> {
        // Release: pairs with the Acquire load in `Flags::running`.
        self.flags.running.store(false, Ordering::Release);
        self.ring_all();
        let fail = |me: &mut Self, e: HostDied| {
            // Relaxed: see `Flags::halted`; `Drop` joins what is left.
            me.flags.halted.store(true, Ordering::Relaxed);
            me.ring_all();
            Err(e)
        };
        let mut drains = Vec::with_capacity(self.drains.len());
        // One at a time out of `self.drains`: on an error, `Drop` joins the ones left there.
        while !self.drains.is_empty() {
            match try_join(self.drains.remove(0)) {
                Ok(d) => drains.push(d),
                Err(e) => return fail(&mut self, e),
            }
        }
        self.replenish_bell.unpark();
        let rep = match try_join(self.replenish.take().expect("threads joined only once")) {
            Ok(r) => r,
            Err(e) => {
                // Drop joins only while the replenish handle is there: join the rest here.
                let r = fail(&mut self, e);
                for h in self.collectors.drain(..) {
                    let _ = h.join();
                }
                return r;
            }
        };
        // Release: every drain hand-off happened before; pairs with `Flags::exec_complete`.
        self.flags.exec_complete.store(true, Ordering::Release);
        self.collector_bells.iter().for_each(Unparker::unpark);
        let mut collectors = Vec::with_capacity(self.collectors.len());
        let mut died = None;
        for h in self.collectors.drain(..) {
            match try_join(h) {
                Ok(c) => collectors.push(c),
                Err(e) => died = died.or(Some(e)),
            }
        }
        if let Some(e) = died {
            return Err(e);
        }
        Ok(EngineReport::new(core::mem::take(&mut self.ctxs), drains, rep, collectors))
    }

    /// Simulates a dead or wedged host: every host thread exits at once, without a final pass,
    /// leaving queued buffers where they are. Device writers then give up at their gates within
    /// their budget. [`HaltedEngine::recover`] later plays the restarted host.
    pub fn halt(mut self) -> HaltedEngine {
        // Relaxed: see `Flags::halted`; the joins below order everything else.
        self.flags.halted.store(true, Ordering::Relaxed);
        self.ring_all();
        let drains = self.drains.drain(..).map(join).collect();
        let replenisher = join(self.replenish.take().expect("threads joined only once"));
        let collectors = self.collectors.drain(..).map(join).collect();
        HaltedEngine { ctxs: core::mem::take(&mut self.ctxs), drains, replenisher, collectors }
    }
}

/// An engine that was halted mid-run.
pub struct HaltedEngine {
    ctxs: Vec<Arc<HostCtx>>,
    drains: Vec<DrainShard>,
    replenisher: Replenisher,
    collectors: Vec<CollectorShard>,
}

impl core::fmt::Debug for HaltedEngine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HaltedEngine").field("regions", &self.ctxs.len()).finish_non_exhaustive()
    }
}

impl HaltedEngine {
    /// Reads lane `lane` of region `region`'s device state.
    ///
    /// # Errors
    /// [`MemError`] if the device read fails or the region does not exist.
    pub fn lane_snapshot(&self, region: usize, lane: u32) -> Result<LaneSnapshot, MemError> {
        let ctx = self.ctxs.get(region).ok_or(MemError::OutOfRange { off: region, len: 0 })?;
        ctx.read_lane(lane, false)
    }

    /// The restarted host, after the writers finished: collects whatever is still queued on the
    /// device and in host rings (on this thread), then reconciles.
    pub fn recover(mut self) -> EngineReport {
        for d in &mut self.drains {
            d.final_pass();
        }
        for c in &mut self.collectors {
            c.drain_all();
        }
        EngineReport::new(self.ctxs, self.drains, self.replenisher, self.collectors)
    }
}

/// One region's results, type-erased until [`EngineReport::take`].
struct RegionResult {
    ctx: Arc<HostCtx>,
    drain: DrainStats,
    retired: usize,
    replenish: ReplenishStats,
    sinks: Vec<Box<dyn Any + Send>>,
}

/// What a stopped engine produced, per region.
pub struct EngineReport {
    regions: Vec<Option<RegionResult>>,
}

impl core::fmt::Debug for EngineReport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EngineReport").field("regions", &self.regions.len()).finish()
    }
}

impl EngineReport {
    pub(super) fn new(
        ctxs: Vec<Arc<HostCtx>>,
        drains: Vec<DrainShard>,
        rep: Replenisher,
        collectors: Vec<CollectorShard>,
    ) -> Self {
        let mut regions: Vec<RegionResult> = ctxs
            .into_iter()
            .map(|ctx| RegionResult {
                ctx,
                drain: DrainStats::default(),
                retired: 0,
                replenish: ReplenishStats::default(),
                sinks: Vec::new(),
            })
            .collect();
        for d in drains {
            let parks = d.parks;
            for part in d.regions {
                let r = &mut regions[part.region as usize];
                r.drain.add(&part.stats);
                r.drain.parks += parks;
                r.retired += part.retired.len();
            }
        }
        for (r, rec) in regions.iter_mut().zip(rep.regions) {
            r.replenish = rec.stats;
        }
        for c in collectors {
            for (i, s) in c.sinks.into_iter().enumerate() {
                if let Some(s) = s {
                    regions[i].sinks.push(s.into_any());
                }
            }
        }
        Self { regions: regions.into_iter().map(Some).collect() }
    }

    /// The report of the region `key` names: its sinks (one per shard), per-lane reconcile and
    /// counters.
    ///
    /// # Panics
    /// If `key` belongs to another engine or was already taken.
    pub fn take<R: Record, S: CollectSink<R>>(&mut self, key: RegionKey<R, S>) -> RunReport<S> {
        let r = self
            .regions
            .get_mut(key.index)
            .and_then(Option::take)
            .expect("region key of this engine, taken once");
        let mut collected = vec![Collected::default(); r.ctx.lanes.len()];
        let mut read_errors = 0;
        let mut sinks = Vec::new();
        for s in r.sinks {
            let s = s.downcast::<TypedSink<R, S>>().expect("region key with the region's types");
            for (acc, x) in collected.iter_mut().zip(&s.collected) {
                acc.records += x.records;
                acc.buffers += x.buffers;
            }
            read_errors += s.read_errors;
            sinks.push(s.sink);
        }
        let mut drain = r.drain;
        drain.mem_errors += read_errors;
        RunReport {
            sinks,
            lanes: reconcile(&r.ctx, &collected),
            drain,
            replenish: r.replenish,
            retired_buffers: r.retired,
            run_ends: (0..r.ctx.lanes.len() as u32).map(|l| r.ctx.read_run_ends(l)).collect(),
        }
    }
}
