//! The simulated ferry chip: the default backend and the reference for hardware backends.
//!
//! It models devices the way the original runtimes' platforms behave, on ordinary host threads, so all of
//! ferry runs and is tested on any Linux machine — efficiently: every wait spins briefly, then
//! parks, and an idle chip uses no CPU.
//!
//! | type | models |
//! |---|---|
//! | [`PlatformBuilder`] / [`Platform`] | a host with several devices, host registration, the driver lock, the current device |
//! | [`Device`] | one device: HBM ([`memory`]), a sys counter ([`clock`]), counters, fault injection, copy engines |
//! | [`Stream`] / [`Event`] | FIFO executors and cross-stream ordering; the null stream |
//! | [`cores::Chip`] | AICPU threads and AICore workers with register windows and handshake slots |
//! | [`cost::CostModel`] | the stalls of docs/design/copy-pool.md (queue creation under memory pressure, driver lock, code-object load) |
//! | [`fault::FaultInjector`] | fail the N-th stream creation, copy, launch, synchronize, … of a device |
//! | [`profile::DeviceProfile`] | vendor (default: the Path A latch, an incoherent Path B cluster) or ferry's relaxed device, plus the Path B fixes |
//! | [`cache`] | the AICPU clusters' data caches: a Path B thread's stale line cache |
//! | [`aicpu_os::AicpuOs`] | the device-side loader: the AICPU OS that loads device programs (real shared objects) and runs their entries |
//!
//! # Example
//! ```
//! use ferry_sim::{Arch, PlatformBuilder, counters::Counter};
//! let p = PlatformBuilder::new(Arch::A5).hbm_bytes(16 << 20).build()?;
//! let dev = p.device(0)?;
//! let buf = dev.malloc(8)?;
//! dev.copy_htod(&[7; 8], buf)?;
//! let mut out = [0u8; 8];
//! dev.copy_dtoh(buf, &mut out)?;
//! assert_eq!(out, [7; 8]);
//! assert_eq!(dev.counter(Counter::BytesHtod), 8);
//! // A host pointer is never a device address.
//! assert!(dev.copy_htod(&[1], ferry_sim::DevicePtr(out.as_ptr() as u64)).is_err());
//! # Ok::<(), ferry_sim::DeviceError>(())
//! ```
//!
//! # Safety
//! Device memory is reached through raw pointers that [`Device::translate`] bounds-checks
//! against live allocations; copies that take host pointers are `unsafe fn`s whose callers keep
//! the host bytes alive until the copy completes. Fields shared between host and device threads
//! are accessed atomically only.
//!
//! # Threading
//! Every type is `Send + Sync`. Streams and chip threads are real host threads that park while
//! idle; dropping the last handle stops them.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(
    clippy::undocumented_unsafe_blocks,
    clippy::unnecessary_safety_comment,
    clippy::missing_safety_doc
)]

pub mod aicpu_os;
pub mod backend;
pub mod cache;
pub mod clock;
pub mod cores;
pub mod cost;
pub mod counters;
pub mod custom_kernels;
pub mod device;
pub mod device_root;
pub mod error;
pub mod event;
pub mod fault;
pub mod kernel;
pub mod memory;
pub mod orch_libraries;
pub mod overlap;
pub mod pinned;
pub mod profile;
pub mod stream;
mod sync;
pub mod wait;

pub use device::{CopyKind, Device, HostRegistration, Platform, PlatformBuilder, WeakDevice};
pub use error::DeviceError;
pub use event::Event;
pub use ferry_abi::arch::{Arch, ArchProfile};
pub use memory::{DevicePtr, MemoryError};
pub use stream::{Stream, StreamKind};
