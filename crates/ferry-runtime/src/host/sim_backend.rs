//! The simulated chip as the runner's default backend. Here, in the in-process path's device
//! operations (`sim_ops`) and in the simulated chip's half of the runner (`sim_runner`: the
//! platform [`DeviceRunner::new`](super::DeviceRunner::new) builds, the chip
//! [`DeviceRunner::init`](super::DeviceRunner::init) starts), the host half names
//! `ferry_sim`; nowhere else. `runner.rs` and its child modules hold the chip through the
//! aliases below.
//!
//! What the host half's modules above the seam need of the chip reaches them through the
//! traits of `ferry_backend`, monomorphic over the types named here: the chip's program device
//! ([`SimProgramDevice`], which also loads orchestration libraries' host copies, holds the
//! cores' register windows, `ferry_backend::CoreRegisters`, and starts the AICore executor on
//! them, `ferry_backend::AicoreLauncher`), its device and stream events ([`SimDevice`],
//! [`SimEvent`]; a DFX session in its memory reaches it through `ferry_backend::MappedMemory`,
//! `DeviceCounter` and `HostBells`), the DFX transports' memory and clock on it ([`SimDeviceMemory`], [`SimCycleClock`]), its
//! custom kernel libraries ([`SimCustomKernels`]), and the description of
//! the chip [`DeviceRunner::new`](super::DeviceRunner::new) builds ([`DeviceProfile`],
//! [`PathBFixes`]) and the platform it holds ([`SimPlatform`]).
//!
//! The in-process path is the simulated chip's alone: the runtime's AICPU program runs as host
//! code on the chip's AICPU threads, beside the AICore executor on its cores
//! ([`launch_in_process`], whose sides are [`SimCompletion`]s). A hardware backend has the
//! full path only (the AICPU program loaded onto the device and launched on its streams).
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

/// An event on the simulated chip's streams (`ferry_backend::BackendEvent`, its streams'
/// `BackendStream::Event`): what a caller
/// orders a run after ([`DeviceRunner::launch_after`](super::DeviceRunner::launch_after)).
pub(crate) type SimEvent = ferry_sim::Event;

/// The DFX transports' device memory on the simulated chip: its HBM as the host maps it
/// (`ferry_backend::MappedMemory`).
pub type SimDeviceMemory = super::dfx::MappedDeviceMemory<SimDevice>;

/// The simulated chip's device clock (`ferry_backend::CycleCounter`) as the DFX transports'
/// clock.
pub type SimCycleClock = super::dfx::DeviceCycleClock<ferry_sim::clock::DeviceClock>;

/// The completion of a launch the runner starts directly on the chip's cores (the in-process
/// path).
pub(crate) type SimCompletion = ferry_sim::cores::Completion;

/// The in-process path's launch: the AICore executor on `cores` cores, then the runtime's
/// AICPU program (`program.exec` over the device operations `ops`) on `threads` AICPU threads,
/// both as host closures on the chip's own threads; their completions, AICore first. The
/// register windows are already reset.
///
/// # Errors
/// The chip's refusal of either launch ([`RunError::Device`]); when the AICPU side could not
/// start, the cores already waiting for their window are reaped first.
pub(crate) fn launch_in_process(
    chip: &SimProgramDevice,
    (cores, threads): (u32, u32),
    ops: &Arc<dyn DeviceOps>,
    kernels: &Arc<KernelRegistry>,
    program: &Arc<AicpuProgram>,
    kargs: KernelArgs,
) -> Result<(SimCompletion, SimCompletion), RunError> {
    let body =
        super::runner::aicore_body(ops.clone(), kernels.clone(), AicoreLaunchArgs::from(&kargs));
    let aicore =
        chip.launch_aicore(cores, Arc::new(move |ctx: ferry_sim::cores::CoreCtx| body(ctx.index)))?;
    let (ops, program) = (ops.clone(), program.clone());
    let aicpu = match chip.launch_aicpu(
        threads,
        Arc::new(move |ctx: ferry_sim::cores::AicpuCtx| {
            program.exec(&*ops, &kargs, ctx.thread, ctx.threads)
        }),
    ) {
        Ok(c) => c,
        Err(e) => {
            // The cores are up and waiting for a window that will never open: reap them.
            super::slots::reap(chip);
            let _ = aicore.wait_timeout(Duration::from_secs(10));
            return Err(e.into());
        }
    };
    Ok((aicore, aicpu))
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
