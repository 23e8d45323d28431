//! The host half: [`DeviceRunner`] and the simulated chip's [`SimOps`].
//!
//! One run on the full path ([`LaunchPath::DeviceProgram`], the default):
//!
//! | step | what happens |
//! |---|---|
//! | [`DeviceRunner::new`] / [`DeviceRunner::init`] | chip threads start, the `regs` table is written; `ferry_launch`'s loader makes the device-orchestrated AICPU program (`ferry_programs::AICPU_DEVICE_ORCHESTRATED`) resident with the configured [`LoadMethod`] (Path A by default: dispatcher bootstrap, binary load, identity check) and its init entry latches `InitArgs`; the host-built-graph program is loaded the same way on its first callable |
//! | [`DeviceRunner::register_callable`] | the program's register-callable entry (`RegisterCallableArgs`) with the callable's orchestration object (`device/orch-*`), which the device-orchestrated program (re)loads |
//! | [`DeviceRunner::prepare`] | tensors uploaded; host-built graphs built, validated and laid out; the runtime image becomes the launch descriptor, its header the cached launch-route prefix and the rest (run block, device-written regions, tensors, scalars, host-built graph) the per-run suffix: `prepare_runtime_args` reserves the slot's device destination and pinned source, snapshots the prefix and uploads the suffix synchronously, so an identical graph launched again publishes nothing (a5 host-built graph first stages its resident scheduler state, the `regs` table, as launch metadata) |
//! | [`DeviceRunner::launch`] / [`DeviceRunner::launch_after`] | nothing waits for the device: `queue_run_entry` orders the caller's event (`launch_after`) and the previous run's completion boundaries onto the streams, then queues metadata and descriptor on the AICPU stream and forks the AICore stream; `launch` submits the AICore entry (register windows reset, then the runtime executor on every core, `AicoreLaunchArgs` by value, over the OS services table) and the program's exec entry on every AICPU thread (front-less `KernelArgs` by value), and records the run's two completion boundaries. Run k+1 is queued while run k executes |
//! | [`DeviceRunner::poll`] / [`DeviceRunner::progress`] / [`DeviceRunner::wait`] | completion, live task counts, bounded wait that reaps stuck cores; `finish_run` retires the run from the launch slot on its own completion boundaries |
//! | [`DeviceRunner::finalize_run`] | result decoded (typed [`crate::DeviceFault`] on failure), outputs copied back, everything freed |
//!
//! [`LaunchPath::InProcess`] keeps the direct path for tests of the runtime alone: the device
//! half linked into this process ([`crate::device::program::AicpuProgram`]) is called on the
//! chip's AICPU threads and plain orchestration functions serve as device-orchestrated
//! callables.
mod config;
pub mod crash;
pub mod dfx;
mod extent;
pub mod graph;
mod handshake;
mod kernel_registry;
mod orch_library;
pub mod profile;
mod repeat;
mod runner;
mod sim_backend;
mod sim_ops;
mod sim_runner;
mod slots;

pub use slots::DirectCompletion;

pub use extent::{descriptor_extent, metadata_bytes, DescriptorExtent, SlotCapacity};
/// The handshake slots' layout of a runner's runs.
pub use ferry_abi::handshake::HandshakeLayout;
/// The loader method of a full-path runner ([`LaunchPath::DeviceProgram`]).
pub use ferry_launch::loader::LoadMethod;
pub use handshake::CoreHandshake;
pub use kernel_registry::{
    HostRefError, KernelLoadError, KernelRegistry, RegisteredKernel, MAX_KERNEL_LIBRARY_BYTES,
};
pub use orch_library::{LoadedOrchLibrary, OrchLoadError, MAX_ORCH_LIBRARY_BYTES};
pub use repeat::{RepeatError, RepeatReport};
pub use runner::{
    AicpuPrograms, Callable, DeviceRunner, DeviceSpan, LaunchPath, LaunchedRun, NoInProcessPath,
    PreparedRun, RunArgs, RunOutput, RunStats, RunnerConfig, RunnerDevice, TensorInit, Variant,
    MAX_LAUNCH_SLOTS, ROUTE_PREFIX_BYTES,
};
pub use sim_backend::{DeviceProfile, PathBFixes, SimCustomKernels};
pub use sim_ops::{OsServicesOps, SimOps};
