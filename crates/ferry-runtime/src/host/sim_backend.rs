//! The simulated chip as the runner's default backend. Here, in the in-process path's device
//! operations (`sim_ops`) and in the simulated chip's half of the runner (`sim_runner`: the
//! platform [`DeviceRunner::new`](super::DeviceRunner::new) builds, the chip
//! [`DeviceRunner::init`](super::DeviceRunner::init) starts), the host half names
//! `ferry_sim`; nowhere else. `runner.rs` and its child modules are generic over the runner's
//! device (`DeviceRunner<P: RunnerDevice = SimProgramDevice>`); the chip is their default.
//!
//! What the host half's modules above the seam need of the chip reaches them through the
//! traits of `ferry_backend` and [`RunnerDevice`](super::RunnerDevice), at the types named
//! here: the chip's program device ([`SimProgramDevice`], which also loads orchestration
//! libraries' host copies, holds the cores' register windows, `ferry_backend::CoreRegisters`,
//! and starts the AICore executor on them, `ferry_backend::AicoreLauncher`), its device
//! ([`SimDevice`], whose streams' events are `ferry_sim::Event`; a DFX session in its memory
//! reaches it through `ferry_backend::MappedMemory`, `DeviceCounter` and `HostBells`), the DFX transports' memory and clock on it ([`SimDeviceMemory`], [`SimCycleClock`]), its
//! custom kernel libraries ([`SimCustomKernels`]), and the description of
//! the chip [`DeviceRunner::new`](super::DeviceRunner::new) builds ([`DeviceProfile`],
//! [`PathBFixes`]) and the platform it holds ([`SimPlatform`]).
//!
//! The chip is the runner's default [`RunnerDevice`](super::RunnerDevice). The in-process
//! path is the simulated chip's alone: the runtime's AICPU program runs as host code on the
//! chip's AICPU threads, beside the AICore executor on its cores (its
//! `RunnerDevice::launch_in_process`, whose sides are [`SimCompletion`]s, over
//! [`SimOps`](super::SimOps)). A hardware backend has the full path only (the AICPU program
//! loaded onto the device and launched on its streams).
use super::slots::DirectCompletion;
use super::KernelRegistry;
use crate::device::ops::DeviceOps;
use crate::device::program::AicpuProgram;
use crate::error::RunError;
use ferry_abi::launch::{AicoreLaunchArgs, KernelArgs};
use ferry_backend::ProgramDevice;
use std::sync::Arc;
use std::time::Duration;

/// The device profile and Path B fixes a runner's platform is built with.
pub use ferry_sim::profile::{DeviceProfile, PathBFixes};

/// The simulated chip as a program device (`ferry_backend::ProgramDevice`) and orchestration
/// library loader (`ferry_backend::OrchLibraryLoader`).
pub(crate) type SimProgramDevice = ferry_sim::cores::Chip;

/// A custom kernel library loaded on the simulated chip (`ferry_backend::CustomKernelTable`):
/// the kernel registry's default library type.
pub type SimCustomKernels = <SimProgramDevice as ProgramDevice>::CustomKernels;

/// The simulated platform a runner built for itself ([`DeviceRunner::new`](super::DeviceRunner::new))
/// and holds for as long as it lives.
pub(crate) type SimPlatform = ferry_sim::Platform;

/// The simulated chip's device (`ferry_backend::BackendDevice`, the program device's
/// `ProgramDevice::Device`): the runner's device memory.
pub(crate) type SimDevice = ferry_sim::Device;

/// The DFX transports' device memory on the simulated chip: its HBM as the host maps it
/// (`ferry_backend::MappedMemory`).
pub type SimDeviceMemory = super::dfx::MappedDeviceMemory<SimDevice>;

/// The simulated chip's device clock (`ferry_backend::CycleCounter`) as the DFX transports'
/// clock.
pub type SimCycleClock = super::dfx::DeviceCycleClock<ferry_sim::clock::DeviceClock>;

/// The completion of a launch the runner starts directly on the chip's cores (the in-process
/// path).
pub(crate) type SimCompletion = ferry_sim::cores::Completion;

/// The simulated chip runs both paths: its in-process launch starts the AICore executor and
/// the runtime's AICPU program as host closures on the chip's own threads.
impl super::RunnerDevice for SimProgramDevice {
    type InProcessOps = super::SimOps;
    type Completion = SimCompletion;

    fn launch_in_process(
        &self,
        _: &super::SimOps,
        (cores, threads): (u32, u32),
        ops: &Arc<dyn DeviceOps>,
        kernels: &Arc<KernelRegistry>,
        program: &Arc<AicpuProgram>,
        kargs: KernelArgs,
    ) -> Result<(SimCompletion, SimCompletion), RunError> {
        let body = super::runner::aicore_body(
            ops.clone(),
            kernels.clone(),
            AicoreLaunchArgs::from(&kargs),
        );
        let aicore = self.launch_aicore(
            cores,
            Arc::new(move |ctx: ferry_sim::cores::CoreCtx| body(ctx.index)),
        )?;
        let (ops, program) = (ops.clone(), program.clone());
        let aicpu = match self.launch_aicpu(
            threads,
            Arc::new(move |ctx: ferry_sim::cores::AicpuCtx| {
                program.exec(&*ops, &kargs, ctx.thread, ctx.threads)
            }),
        ) {
            Ok(c) => c,
            Err(e) => {
                // The cores are up and waiting for a window that will never open: reap them.
                super::slots::reap(self);
                let _ = aicore.wait_timeout(Duration::from_secs(10));
                return Err(e.into());
            }
        };
        Ok((aicore, aicpu))
    }
}

impl DirectCompletion for SimCompletion {
    fn is_done(&self) -> bool {
        SimCompletion::is_done(self)
    }

    fn wait_done(&self, timeout: Duration) -> bool {
        match self.wait_timeout(timeout) {
            Err(ferry_sim::DeviceError::Timeout { .. }) => self.is_done(),
            // Finished, or failed (which is finished too).
            _ => true,
        }
    }

    fn finished(&self) -> Result<(), RunError> {
        Ok(self.wait_timeout(Duration::ZERO)?)
    }
}

#[cfg(test)]
mod tests {
    use ferry_sim::{Arch, PlatformBuilder};

    #[test]
    fn anchors_on_the_chip_follow_its_clock() {
        let _bound = ferry_watchdog::bound("the clock anchors' stream round trips");
        let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build().unwrap();
        let hz = Arch::A2a3.profile().clock_hz as f64;
        crate::host::dfx::anchors::tests::anchors_follow_the_clock(p.device(0).unwrap(), hz);
    }
}
