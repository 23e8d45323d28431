//! ferry-copy: moving many small fragments between host and device memory (docs/design/copy-pool.md).
//!
//! The device engine reaches a device only through the [`ferry_backend`] seam, generic over
//! its [`Backend`](ferry_backend::Backend) (ferry's simulated chip is the reference backend).
//!
//! Engines take *items* (one contiguous copy each, tagged by the caller), *plan* them (pure:
//! bounds, overlap, grouping per endpoint pair, coalescing), *submit* the plans and *wait* on a
//! handle that reports one failure per failed plan with the tags it covered. A composite routes
//! each endpoint pair to the first engine that claims it; the engines split the pair space
//! without overlap. The HBM engine gathers small fragments with one device kernel per device
//! and batch, on streams from a per-device pool that [`HbmCopyEngine::prewarm`] creates up front
//! and caps, so serving never creates a hardware queue.
//!
//! | type | role |
//! |---|---|
//! | [`TransferRef`] / [`TransferItem`] | an endpoint (host or device buffer) / one tagged copy |
//! | [`TransferPlan`] / [`TransferPlanSet`] | segments of one endpoint pair / plans + rejections ([`RejectReason`]) |
//! | [`TransferEngine`] / [`TransferHandle`] | plan + submit / wait for failures ([`TransferFailure`]) |
//! | [`transfer`] / [`transfer_detailed`] | plan, submit and wait in one call |
//! | [`CompositeTransferEngine`] | first engine that claims a pair |
//! | [`LocalCopyEngine`] | host ↔ host: threads above a floor, non-temporal stores |
//! | [`HbmCopyEngine`] | any device side: gather kernel or null-stream copies; stream pool; prewarm |
//! | [`env::CopyKnobs`] | `UMBP_HBM_GATHER_PREWARM_STREAMS`, `UMBP_DRAM_GATHER_KERNEL` |
//!
//! # Example
//! ```
//! use ferry_backend::host::HostMemoryBackend;
//! use ferry_backend::{Backend, BackendDevice};
//! use ferry_copy::{transfer_detailed, CompositeTransferEngine, HbmConfig, HbmCopyEngine,
//!                  LocalCopyEngine, TransferItem, TransferRef};
//! use std::sync::Arc;
//!
//! // Any backend: ferry's simulated chip (ferry-sim's `Platform`), or here the seam's
//! // host-memory backend.
//! let p = HostMemoryBackend::new(2, 64 << 20)?;
//! let hbm = Arc::new(HbmCopyEngine::new(p.clone(), HbmConfig::default()));
//! let report = hbm.prewarm(3);               // before serving: 3 streams per device, capped
//! assert_eq!(report.devices[1].cap, 3);
//! let mut engines = CompositeTransferEngine::new();
//! engines.add_engine(Arc::new(LocalCopyEngine::default())).add_engine(hbm.clone());
//!
//! let mut pages = vec![9u8; 16 << 10];
//! // SAFETY: `pages` outlives the engines' use of it (registration dropped with `hbm` below)
//! // and nothing else touches it while transfers run.
//! unsafe { hbm.add_host_gather_region(pages.as_mut_ptr(), pages.len())? };
//! let kv = p.device(1)?.malloc(16 << 10)?;
//! // SAFETY: as above.
//! let host = unsafe { TransferRef::host(pages.as_mut_ptr(), pages.len()) };
//! let dev = TransferRef::device(1, kv, 16 << 10);
//! let items: Vec<_> = (0..4u64)
//!     .map(|i| TransferItem { src: host, src_offset: i * 4096, dst: dev, dst_offset: (3 - i) * 4096, size: 4096, tag: i })
//!     .collect();
//! let before = p.device(1)?.stats();
//! assert!(transfer_detailed(&engines, &items).is_ok());
//! let after = p.device(1)?.stats();
//! assert_eq!(after.launches - before.launches, 1, "one gather kernel");
//! assert_eq!(after.streams_created, before.streams_created, "no stream after prewarm");
//! drop(engines);
//! drop(hbm);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Safety
//! Host memory is named by raw pointers: [`TransferRef::host`] is `unsafe`, and its caller
//! vouches that the range stays valid and unaliased while transfers use it. Everything past
//! that point is checked: the planner bounds-checks every item without overflow and rejects
//! overlapping items, device sides are resolved against live allocations before anything is
//! enqueued, and the gather kernel reaches host memory only through a registration's
//! per-device alias. The `unsafe` inside this crate is the non-temporal copy, the raw copies
//! of [`LocalCopyEngine`], and the enqueue of host-pointer copies; each has a `// SAFETY:` note.
//!
//! # Threading
//! Every engine is `Send + Sync`; `submit` runs concurrently on any number of threads (the
//! parallelism across keys lives above the engine). A gather holds one pooled stream at a time
//! and releases it after a bounded synchronize, so waiting on a capped pool cannot deadlock.
//! Fallback copies of one plan hold their device's null-stream lock for that plan only. Host
//! mutexes are ranked in [`hbm`]'s module docs.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(
    clippy::undocumented_unsafe_blocks,
    clippy::unnecessary_safety_comment,
    clippy::missing_safety_doc
)]

pub mod composite;
pub mod engine;
pub mod env;
pub mod hbm;
pub mod local;
pub mod planner;
pub mod types;

pub use composite::CompositeTransferEngine;
pub use engine::{
    transfer, transfer_detailed, SettledHandle, TransferEngine, TransferHandle, TransferOutcome,
};
pub use hbm::{GatherSkip, HbmConfig, HbmCopyEngine, HbmStats, PoolStats, PrewarmReport};
pub use local::{LocalCopyConfig, LocalCopyEngine};
pub use types::{
    FailureCode, Loc, RejectReason, Rejection, TransferDirection, TransferFailure, TransferItem,
    TransferPlan, TransferPlanSet, TransferRef,
};
