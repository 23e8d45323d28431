//! ferry's task runtime: gives the simulated chip real work.
//!
//! An orchestration function submits tasks (kernel id, tensor arguments with roles, scalars,
//! SPMD block count); a tensor map turns the byte ranges they touch into dependencies; scheduler
//! threads on the AICPU hand ready tasks to AIC/AIV workers through the per-core handshake slot
//! and register window; the cores run real `f32` kernels over device memory. The host
//! [`host::DeviceRunner`] drives each run: prepare → launch → poll / wait → finalize.
//!
//! Two variants, as in the original runtime:
//! - **device-orchestrated**: the orchestration function runs on the last AICPU thread and builds
//!   the graph while it executes;
//! - **host-built graph**: the same function runs on the host during prepare; the validated graph
//!   is uploaded in the runtime image and the AICPU only loads it.
//!
//! The crate is split so the device half can move into the AICPU shared object unchanged:
//! [`device`] talks to the chip only through [`device::ops::DeviceOps`]; `host` implements that
//! trait for `ferry_sim::cores::Chip` and owns the run lifecycle. The `host` feature (default)
//! gates the host half and the examples, and with them everything only the host needs: the
//! simulated chip, the loader and launch transaction, the device programs, and `ferry-profile`
//! (the run model the DFX collectors fill). Without it the crate depends on `ferry-abi`, the DFX
//! transport's device writers (`ferry-dfx`), `thiserror` and `tracing` only: that is what a
//! device program links (`default-features = false`). The measurements of the runtime are
//! `ferry-bench`'s.
//!
//! # Example
//! ```
//! use ferry_runtime::examples::{Example, Size};
//! use ferry_runtime::host::{DeviceRunner, RunnerConfig};
//! use ferry_sim::Arch;
//!
//! let mut runner = DeviceRunner::new(RunnerConfig::small(Arch::A2a3))?;
//! let ex = Example::Vector.build(Size::Small);
//! runner.register_callable(1, ex.callable.clone())?;
//! let out = runner.run(1, ex.args.clone())?;
//! ex.verify(&out)?;
//! assert!(out.stats.tasks > 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(
    clippy::undocumented_unsafe_blocks,
    clippy::unnecessary_safety_comment,
    clippy::missing_safety_doc
)]

pub mod device;
pub mod error;
#[cfg(feature = "host")]
pub mod examples;
#[cfg(feature = "host")]
pub mod host;

pub use device::ops::DeviceOps;
pub use device::task::{Orchestrate, Role, ScopeSite, Task, TaskId, TensorId, View};
#[cfg(feature = "host")]
pub use error::{ConfigError, LaunchFailure, RunError, RunnerError};
pub use error::{DeviceFault, KernelFault, SubmitError};
#[cfg(feature = "host")]
pub use host::{Callable, DeviceRunner, RunArgs, RunOutput, RunnerConfig, TensorInit, Variant};
