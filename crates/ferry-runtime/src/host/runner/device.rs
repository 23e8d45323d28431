//! What a [`DeviceRunner`](super::DeviceRunner) needs of the device it runs on: the backend
//! seam's program device with its cores and clock, and the in-process path where the backend
//! has one.
use crate::device::ops::DeviceOps;
use crate::device::ops::TranslateError;
use crate::device::program::AicpuProgram;
use crate::error::RunError;
use crate::host::slots::DirectCompletion;
use crate::host::KernelRegistry;
use ferry_abi::launch::{AicoreLaunchArgs, KernelArgs};
use ferry_backend::{
    AicoreLauncher, BackendStream, CustomKernelTable, DeviceCounter, HostEntry, ProgramDevice,
};
use std::sync::Arc;
use std::time::Duration;

/// A device a [`DeviceRunner`](super::DeviceRunner) drives: a program device
/// (`ferry_backend::ProgramDevice`, which loads the AICPU programs the full path launches on
/// its streams) whose cores the runner starts (`ferry_backend::AicoreLauncher`), whose device
/// counts cycles (`ferry_backend::DeviceCounter`, the unit of its events' timestamps) and
/// whose custom kernel libraries the runner's [`KernelRegistry`] calls.
///
/// The in-process path (the runtime's AICPU program run as host code on the device's AICPU
/// threads, beside the cores) is the simulated chip's: it is what [`InProcessOps`] and
/// [`Completion`] name and [`launch_in_process`] starts. A backend without it runs the full
/// path only: it names [`NoInProcessPath`] for both, its runners are assembled without
/// in-process operations, and a configuration that asks for the in-process path is refused.
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

    /// The in-process path's launch, on a runner that holds the device's in-process operations
    /// `in_process`: the AICore executor on `cores` cores, then `program.exec` over the device
    /// operations `ops` (`in_process`, or the AICPU OS's services) on `threads` AICPU threads;
    /// their completions, AICore first. The register windows are already reset.
    ///
    /// # Errors
    /// The device's refusal of either launch; when the AICPU side could not start, the cores
    /// already waiting for their window are reaped first.
    fn launch_in_process(
        &self,
        in_process: &Self::InProcessOps,
        cores_threads: (u32, u32),
        ops: &Arc<dyn DeviceOps>,
        kernels: &Arc<KernelRegistry<Self::CustomKernels>>,
        program: &Arc<AicpuProgram>,
        kargs: KernelArgs,
    ) -> Result<(Self::Completion, Self::Completion), RunError>;
}

/// The in-process path of a device that has none (a [`RunnerDevice`]'s
/// [`InProcessOps`](RunnerDevice::InProcessOps) and [`Completion`](RunnerDevice::Completion)
/// where the device runs the full path only): no value of it exists, so a runner on such a
/// device holds no in-process operations and never launches in process.
#[derive(Clone, Copy, Debug)]
pub enum NoInProcessPath {}

impl DirectCompletion for NoInProcessPath {
    fn is_done(&self) -> bool {
        match *self {}
    }

    fn wait_done(&self, _: Duration) -> bool {
        match *self {}
    }

    fn finished(&self) -> Result<(), RunError> {
        match *self {}
    }
}

// SAFETY: no value of the type exists, so none of the operations is ever called.
unsafe impl DeviceOps for NoInProcessPath {
    fn translate(&self, _: u64, _: u64) -> Result<*mut u8, TranslateError> {
        match *self {}
    }

    fn reg_read(&self, _: u64, _: u32) -> u32 {
        match *self {}
    }

    fn reg_write_aicpu(&self, _: u64, _: u32, _: u32) {
        match *self {}
    }

    fn reg_write_core(&self, _: u64, _: u32, _: u32) {
        match *self {}
    }

    fn core_wait(
        &self,
        _: u64,
        _: u32,
        _: &mut dyn FnMut(u32) -> bool,
        _: Option<Duration>,
    ) -> Option<u32> {
        match *self {}
    }

    fn aicpu_wait(&self, _: &mut dyn FnMut() -> bool, _: Option<Duration>) -> bool {
        match *self {}
    }

    fn notify_aicpu(&self) {
        match *self {}
    }

    fn clock_cycles(&self) -> u64 {
        match *self {}
    }

    fn clock_hz(&self) -> u64 {
        match *self {}
    }
}

#[cfg(test)]
mod tests;
