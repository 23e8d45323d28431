//! The host side: one engine of drain shards, collector shards and a replenish thread serving
//! every region (subsystem) of a run, startup, shutdown and the per-lane reconcile.
//!
//! | file | role |
//! |---|---|
//! | `region.rs` | [`DfxTransport`]: one region's initialisation, seeding, startup replenish |
//! | `engine.rs` | [`DfxEngine`]: the threads, start / stop / halt, per-region reports |
//! | `profiler.rs` | [`HostProfiler`]: a single region's own engine ([`DfxTransport::start`]) |
//! | `drain.rs` | drain shards: pop ready entries, top up free queues, retry short sites |
//! | `collect.rs` | collector shards: zero-copy hand-off of each buffer to its region's sink |
//! | `replenish.rs` | the replenish thread: done → recycled routing, warm targets, arena acks |
//! | `poll.rs` | [`PollPolicy`]: how drain shards poll the device without a signal |
//! | `report.rs` | [`RunReport`], [`LaneReconcile`] and the counters |
//!
//! # Threads
//! A run has `D` drain shards, `D` collector shards and one replenish thread — `2·D + 1` host
//! threads however many subsystems are on (`D` = 1 by default: 3 threads). Drain shard `s`
//! serves ready queue `q` of a region with `n` shards when `q % n == s`, for every region.
//!
//! # Ownership
//! | state | writer | reader |
//! |---|---|---|
//! | device `queue_heads[q]` of a region | its drain shard | AICPU thread `q` |
//! | free queue `tail`/slots of lane L | the drain shard owning L's ready queue | lane L |
//! | host hand-off ring s | drain shard s | collector s |
//! | done ring s | collector s | replenish thread |
//! | recycled lane `[region][s][kind]` | replenish thread | drain shard s |
//!
//! The replenish thread holds no handle on device memory at all: it cannot write it. Startup
//! replenish ([`DfxTransport::replenish_free_queues`]) is the only place where free queues are
//! filled from any shard's recycled lane or from the reserve, and it runs before any host thread
//! exists.
//!
//! # Lane quotas
//! Lanes of one shard and kind share one recycled lane. A plain top-up fills a free queue to
//! `SLOT`, so a busy lane could hoard buffers that a sibling needs to recover, and a one-buffer
//! sibling would starve (found by the stress matrix). Each lane therefore holds at most its own
//! pool (seeded buffers; plus `SLOT` extra when the pool is elastic: a reserve or a warm target),
//! counted by its drain shard as pushed − drained, and short lanes are served first come, first
//! served, round robin. A listed lane leaves the retry list once it is at its quota or its free
//! queue is full.
//!
//! # Waiting
//! There is no device-to-host signal (real hardware has none, and docs/design/dfx-backpressure.md needs none): drain
//! shards poll their queues adaptively ([`PollPolicy`]: spin, yield, then sleep a short growing
//! interval, at most 200 µs while a run is live). Host-internal hand-offs wake the next thread
//! directly: a drain hand-off wakes its collector, a collected buffer the replenish thread, a
//! recycled buffer the drain shard it went to, and stop/halt everyone. A region configured with
//! [`doorbell_hint`](crate::DfxBuilder::doorbell_hint) also lets the device ring its drain shard
//! after a publish (and the host ring a waiting writer): an optional, measured hint, off by
//! default. [`IDLE_BACKSTOP`] bounds the host-internal waits.

mod collect;
mod drain;
#[cfg(all(test, not(ferry_loom)))]
mod drain_tests;
mod engine;
mod poll;
mod profiler;
#[cfg(all(test, not(ferry_loom)))]
mod refill_tests;
mod region;
mod replenish;
mod report;
#[cfg(all(test, not(ferry_loom)))]
mod tests;

use std::time::Duration;

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use engine::{
    DfxEngine, EngineConfig, EngineReport, HaltedEngine, HostDied, RegionKey, RunningEngine,
};
pub use poll::PollPolicy;
#[cfg(test)]
#[allow(unused_imports)]
pub(crate) use profiler::{EngineParts, Parts};
pub use profiler::{HaltedProfiler, HostProfiler};
pub use region::DfxTransport;
pub use replenish::select_by_deficit;
pub use report::{
    DrainStats, LaneReconcile, LaneSnapshot, ReplenishStats, RunEnd, RunEnds, RunReport,
    StallIntervals,
};

/// How long a host thread waits for a host-internal wake-up before it looks again (a backstop:
/// the hand-offs between host threads always wake the next one).
pub const IDLE_BACKSTOP: Duration = Duration::from_millis(50);

/// A full buffer handed from a drain shard to its collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handoff {
    pub(crate) region: u32,
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
    pub(crate) region: u32,
    pub(crate) buffer: u32,
    pub(crate) kind: u32,
}

/// One full buffer as a collector sees it: the records are a borrowed slice of the drained
/// buffer itself (on non-SVM, of its host copy, refreshed by one bulk copy).
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

/// Receives every collected buffer of one region's collector shard (the subsystem's
/// `on_buffer_collected`). Runs on the collector thread, which serves every region: keep it
/// proportional to the records (no blocking, no per-record allocation where avoidable).
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

/// Run-state flags shared by every host thread of an engine (and nothing else).
#[derive(Debug)]
pub(crate) struct Flags {
    running: AtomicBool,
    halted: AtomicBool,
    exec_complete: AtomicBool,
    /// Sleeps of every drain shard so far (read live: [`RunningEngine::drain_parks`]).
    drain_parks: AtomicU64,
}

impl Flags {
    fn new() -> Self {
        Self {
            running: AtomicBool::new(true),
            halted: AtomicBool::new(false),
            exec_complete: AtomicBool::new(false),
            drain_parks: AtomicU64::new(0),
        }
    }

    fn drain_parked(&self) {
        // Relaxed: a statistic; it publishes nothing.
        self.drain_parks.fetch_add(1, Ordering::Relaxed);
    }

    fn drain_parks(&self) -> u64 {
        // Relaxed: as above.
        self.drain_parks.load(Ordering::Relaxed)
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
