//! What a [`DeviceRunner`](super::DeviceRunner) needs of the device it runs on: the backend
//! seam's program device with its cores and clock, and the in-process path where the backend
//! has one.
use crate::device::ops::DeviceOps;
use crate::device::program::AicpuProgram;
use crate::error::RunError;
use crate::host::slots::DirectCompletion;
use crate::host::KernelRegistry;
use ferry_abi::launch::{AicoreLaunchArgs, KernelArgs};
use ferry_backend::{
    AicoreLauncher, BackendStream, CustomKernelTable, DeviceCounter, HostEntry, ProgramDevice,
};
use std::sync::Arc;

/// A device a [`DeviceRunner`](super::DeviceRunner) drives: a program device
/// (`ferry_backend::ProgramDevice`, which loads the AICPU programs the full path launches on
/// its streams) whose cores the runner starts (`ferry_backend::AicoreLauncher`), whose device
/// counts cycles (`ferry_backend::DeviceCounter`, the unit of its events' timestamps) and
/// whose custom kernel libraries the runner's [`KernelRegistry`] calls.
///
/// The in-process path (the runtime's AICPU program run as host code on the device's AICPU
/// threads, beside the cores) is the simulated chip's: it is what [`InProcessOps`] and
/// [`Completion`] name and [`launch_in_process`] starts. A backend without it runs the full
/// path only: its runners are assembled without in-process operations, and a configuration
/// that asks for the in-process path is refused.
///
/// [`InProcessOps`]: RunnerDevice::InProcessOps
/// [`Completion`]: RunnerDevice::Completion
/// [`launch_in_process`]: RunnerDevice::launch_in_process
pub trait RunnerDevice:
    ProgramDevice<
        Device: DeviceCounter<
            Stream: BackendStream<
                Entry<AicoreLaunchArgs> = HostEntry<Self::Device, AicoreLaunchArgs>,
                Entry<KernelArgs> = HostEntry<Self::Device, KernelArgs>,
            >,
        >,
        CustomKernels: CustomKernelTable,
    > + AicoreLauncher
{
    /// The in-process path's device operations (the simulated chip's
    /// [`SimOps`](crate::host::SimOps)).
    type InProcessOps: DeviceOps + 'static;

    /// The completion of one side of a launch started directly on the device's threads (the
    /// in-process path).
    type Completion: DirectCompletion + Send + Sync + 'static;

    /// The in-process path's launch: the AICore executor on `cores` cores, then `program.exec`
    /// over the device operations `ops` on `threads` AICPU threads; their completions, AICore
    /// first. The register windows are already reset.
    ///
    /// # Errors
    /// The device's refusal of either launch; when the AICPU side could not start, the cores
    /// already waiting for their window are reaped first.
    fn launch_in_process(
        &self,
        cores_threads: (u32, u32),
        ops: &Arc<dyn DeviceOps>,
        kernels: &Arc<KernelRegistry<Self::CustomKernels>>,
        program: &Arc<AicpuProgram>,
        kargs: KernelArgs,
    ) -> Result<(Self::Completion, Self::Completion), RunError>;
}
