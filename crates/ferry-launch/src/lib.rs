//! ferry-launch: makes device programs runnable and launches them in stream order
//! (docs/design/launch.md).
//!
//! The crate has three parts: the host loader (preinstall, dispatcher bootstrap "Path A",
//! custom scheduler "Path B"), the launch payload builders, and the per-run launch transaction
//! (prepare → publish → launch → retire) with its state machine. This crate documents the
//! transaction; each module documents its own part.
//!
//! It sits above the device backend seam (`ferry-backend`): the transaction is generic over a
//! [`BackendDevice`](ferry_backend::BackendDevice) and the loader over a
//! [`ProgramDevice`](ferry_backend::ProgramDevice), so it runs on the simulated chip (the
//! examples below) and on any other backend alike, and does not depend on the chip.
//!
//! | type | role |
//! |---|---|
//! | [`LaunchStaging`] | one pipeline slot's launch staging helper: pinned source, device destination, per-run view |
//! | [`LaunchDescriptor`] | the launch descriptor as an owned byte image with a launch-route prefix |
//! | [`MetadataRegion`] | one owned byte snapshot of launch metadata and its device destination |
//! | [`RunStreams`] | the runner-owned AICPU and AICore streams a run is published and launched on |
//! | [`TransactionState`] | `NotStarted` / `Prepared` / `Published` / `Partial` |
//! | [`EntryKernels`] | the AICore and AICPU entry bodies a launch submits |
//!
//! # Example
//! ```
//! use ferry_abi::launch::KernelArgs;
//! use ferry_launch::{EntryKernels, LaunchDescriptor, LaunchStaging, RunStreams, TransactionState};
//! use ferry_sim::{Arch, PlatformBuilder};
//! use std::time::Duration;
//!
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build()?;
//! let dev = p.device(0)?;
//! let streams = RunStreams::new(dev)?;
//! let mut slot = LaunchStaging::new(dev, 0);
//!
//! let desc = LaunchDescriptor::new(vec![7u8; 4096], 1024)?;
//! slot.prepare_runtime_args(&desc, KernelArgs::new(0, 0))?;
//! assert_eq!(slot.state(), TransactionState::Prepared);
//! // Publication happens on the launch stream; launch submits AICore, then AICPU.
//! slot.launch(&streams, EntryKernels::noop())?;
//! assert!(slot.runtime_args_published());
//! slot.finish_run(Duration::from_secs(10))?;
//!
//! // The same launch-route prefix again: nothing is copied, no fork is queued.
//! slot.prepare_runtime_args(&desc, KernelArgs::new(0, 0))?;
//! let report = slot.queue_run_entry(&streams, None)?;
//! assert_eq!((report.bytes_copied, report.forked), (0, false));
//! slot.launch(&streams, EntryKernels::noop())?;
//! slot.finish_run(Duration::from_secs(10))?;
//! slot.teardown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Safety
//! Asynchronous copies read the slot's pinned source after the enqueueing call returns. The
//! staging helper writes that source only while no run of the slot is live (its execution
//! owner has retired with proof that its streams drained), and never frees it while a DMA reader
//! may remain: a run without proof quarantines the slot, and fatal abandonment leaks the source.
//!
//! # Threading
//! Every type is `Send`. A [`LaunchStaging`] is driven by one thread at a time (`&mut self`).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(
    clippy::undocumented_unsafe_blocks,
    clippy::unnecessary_safety_comment,
    clippy::missing_safety_doc
)]

pub mod loader;
pub mod transaction;

pub use transaction::{
    EntryKernels, LaunchDescriptor, LaunchStaging, MetadataRegion, RunStreams, TransactionState,
};
