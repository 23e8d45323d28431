//! The host half: [`DeviceRunner`] and the simulated chip's [`SimOps`].
//!
//! | step | what happens |
//! |---|---|
//! | [`DeviceRunner::new`] / [`DeviceRunner::init`] | chip threads start, the `regs` table is written, the AICPU program's init entry latches `InitArgs` |
//! | [`DeviceRunner::register_callable`] | a device-orchestrated callable goes through the AICPU program's register-callable entry (`RegisterCallableArgs`) |
//! | [`DeviceRunner::prepare`] | tensors uploaded; host-built graphs are built, validated and laid out; the runtime image is uploaded |
//! | [`DeviceRunner::launch`] | register windows reset; AICore entry on every core, then the AICPU exec entry on every thread (`KernelArgs` by value) |
//! | [`DeviceRunner::poll`] / [`DeviceRunner::progress`] / [`DeviceRunner::wait`] | completion, live task counts, bounded wait that reaps stuck cores |
//! | [`DeviceRunner::finalize_run`] | result decoded (typed [`crate::DeviceFault`] on failure), outputs copied back, everything freed |
//!
//! The launch is the seam for `ferry-launch`: today [`DeviceRunner::launch`] starts the chip's
//! AICore and AICPU entries directly; the launch transaction replaces exactly that call with
//! its staged publication of `KernelArgs` on the stream pair, and Path A's loader replaces
//! [`crate::device::program::AicpuProgram`]'s direct calls with the loaded program's entries.
pub mod dfx;
pub mod graph;
mod runner;
mod sim_ops;

/// The loader method of a full-path runner ([`LaunchPath::DeviceProgram`]).
pub use ferry_launch::loader::LoadMethod;
pub use runner::{
    Callable, DeviceRunner, LaunchPath, LaunchedRun, PreparedRun, RunArgs, RunOutput, RunStats,
    RunnerConfig, TensorInit, Variant,
};
pub use sim_ops::{OsServicesOps, SimOps};
