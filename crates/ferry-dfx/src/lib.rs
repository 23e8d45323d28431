//! Lossless per-lane DFX transport between device profiling writers and host collectors.
//!
//! Device writers (AICPU threads) fill per-lane record buffers and hand full buffers to the host
//! through a per-thread ready queue; host drain shards pull them while the run is live, collectors
//! copy records out, and the buffers return to the lanes' free queues. When the host falls behind,
//! only the lane that ran dry waits, at its own gate, for at most one budget (
//! docs/design/dfx-backpressure.md).
//!
//! | type | side | role |
//! |---|---|---|
//! | [`DfxBuilder`] / [`DfxConfig`] | host | lanes, queues, pools, shards, [`Policy`], budgets |
//! | [`mem::DeviceMemory`] | platform | device/host views of the region, narrow range copies (SVM: no-ops) |
//! | [`clock::CycleClock`] | platform | device cycle counter the gate budgets are measured on |
//! | [`DfxTransport`] | host | one region: initialises it, seeds pools, startup replenish |
//! | [`DfxEngine`] / [`RunningEngine`] | host | one set of drain / replenish / collector threads for every region of a run; `stop`, `halt` |
//! | [`PollPolicy`] | host | how drain shards poll the device (no device→host signal) |
//! | [`DeviceRegion`] / [`DeviceWriter`] | device | record write, buffer switch, push and pop gates |
//! | [`HostProfiler`] | host | an engine serving a single region ([`DfxTransport::start`]) |
//! | [`CollectSink`] | host | the subsystem's `on_buffer_collected` |
//! | [`RunReport`] / [`LaneReconcile`] | host | per-lane produced = collected + dropped |
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use ferry_abi::arch::A5;
//! use ferry_dfx::{clock::SteadyClock, mem::MirroredMemory, CollectSink, CollectedBuffer, DfxBuilder, DfxTransport};
//!
//! /// A subsystem's collector: here it only counts records.
//! struct Count(u64);
//! impl CollectSink<[u64; 2]> for Count {
//!     fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, [u64; 2]>) {
//!         self.0 += b.records.len() as u64;
//!     }
//! }
//!
//! // a5 is non-SVM: the host works on a mirror and copies narrow ranges explicitly.
//! let cfg = DfxBuilder::new(&A5).ready_queues(2).lane(0, 0, 2).lane(1, 0, 2)
//!     .records_per_buffer(64).build::<[u64; 2]>().unwrap();
//! let mem = Arc::new(MirroredMemory::new(cfg.region_size(), 0x8000_0000_0000));
//! let transport = DfxTransport::<[u64; 2]>::new(cfg, mem, Arc::new(SteadyClock::new(A5.clock_hz))).unwrap();
//! let device = transport.device_region();
//! let host = transport.start(|_shard| Count(0));
//! std::thread::scope(|s| {
//!     for q in 0..2u32 {
//!         let device = device.clone();
//!         s.spawn(move || {
//!             let mut w = device.writer::<[u64; 2]>(q, &[q]).unwrap();
//!             for i in 0..1000 { w.record(0, [q as u64, i]); }
//!             w.finish();
//!         });
//!     }
//! });
//! let report = host.stop();
//! assert!(report.is_reconciled());
//! assert_eq!(report.totals(), (2000, 2000, 0));
//! assert_eq!(report.sinks.iter().map(|c| c.0).sum::<u64>(), 2000);
//! ```
//!
//! # Safety
//! The region is shared memory written by two parties. Every word both sides touch is accessed
//! atomically through [`mem::ShmRegion`]; record payloads are written with plain stores by the
//! lane that owns the buffer and published by the ready-queue tail's `Release` store. Ownership of
//! a buffer moves strictly device → host (ready queue) → host rings → device (free queue), and
//! each queue has exactly one writer per index, so no two parties ever write the same bytes.
//! [`Record`] is an `unsafe` trait: implementors promise any bit pattern is a valid value.
//!
//! # Threading
//! One [`DeviceWriter`] per ready queue (AICPU thread) and region, owning its lanes; `Send`, not
//! `Sync`. The host runs one [`DfxEngine`] per run: `D` drain threads, `D` collector threads and
//! one replenish thread, however many regions (subsystems) it serves — 3 threads with the
//! default `D = 1`. Drain shard `s` serves ready queues `s, s + shards, …` of each region and is
//! the only runtime writer of their heads and of the free queues of their lanes; the replenish
//! thread writes only host-side recycled lanes and holds no handle on device memory. Nothing
//! signals the host from the device: drain shards poll ([`PollPolicy`]); host threads wake each
//! other on hand-offs; device waits spin briefly, then nap (capped at [`device::NAP_MAX`]).
//!
//! Synchronisation primitives come from `crate::sync`, which maps to loom under
//! `cfg(ferry_loom)`; the models live in `src/loom_tests.rs` and run with
//! `RUSTFLAGS="--cfg ferry_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p ferry-dfx --release --lib loom`.
#![doc(test(attr(deny(warnings))))]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(
    clippy::undocumented_unsafe_blocks,
    clippy::unnecessary_safety_comment,
    clippy::missing_safety_doc
)]

pub mod clock;
mod config;
pub mod device;
mod host;
pub mod mem;
mod spsc;
mod sync;

#[cfg(all(test, ferry_loom))]
mod loom_tests;

pub use config::{BuildError, DfxBuilder, DfxConfig, LaneSpec, Policy};
pub use device::{DeviceRegion, DeviceWriter, GateTimeout, HostNotify, LaneStats};
pub use host::{
    select_by_deficit, CollectSink, CollectedBuffer, DfxEngine, DfxTransport, DrainStats,
    EngineConfig, EngineReport, HaltedEngine, HaltedProfiler, HostDied, HostProfiler,
    LaneReconcile, LaneSnapshot, NoHooks, PollPolicy, RegionKey, ReplenishHooks, ReplenishStats,
    RunEnd, RunEnds, RunReport, RunningEngine, StallIntervals, IDLE_BACKSTOP,
};

/// A fixed-size record a lane writes into its buffers.
///
/// # Safety
/// Implementors guarantee:
/// - the type has no padding bytes and every bit pattern is a valid value (the host reads
///   records back from raw device memory);
/// - `size_of::<Self>()` is a multiple of 8 and `align_of::<Self>() <= 64`.
pub unsafe trait Record: Copy + Send + Sync + 'static {}

// SAFETY: integers have no padding and accept every bit pattern; size 8, align 8.
unsafe impl Record for u64 {}
// SAFETY: an array of `u64` has no padding and accepts every bit pattern; size 8·N, align 8.
unsafe impl<const N: usize> Record for [u64; N] {}

// The five subsystems' device records travel through the transport as they are.
macro_rules! abi_transport_record {
    ($($t:ty),* $(,)?) => {$(
        const _: () = {
            assert!(size_of::<$t>() % 8 == 0);
            assert!(align_of::<$t>() <= 64);
        };
        // SAFETY: `$t` is a sealed `AbiRecord`: `ferry-abi` proves at compile time that its fields
        // are plain integers tiling the struct with no padding, so every bit pattern is valid and
        // no byte is padding; the const block above checks the size is a multiple of 8 and the
        // alignment at most 64.
        unsafe impl Record for $t {}
    )*};
}

abi_transport_record!(
    ferry_abi::records::AicpuTaskRecord,
    ferry_abi::records::AicoreTaskRecord,
    ferry_abi::records::SchedPhaseRecord,
    ferry_abi::records::OrchPhaseRecord,
    ferry_abi::records::PmuRecord,
    ferry_abi::records::ScopeStatsRecord,
    ferry_abi::records::ArgsDumpRecord,
);
