//! The simulated chip as the runner's default backend. Here, in the in-process path's device
//! operations (`sim_ops`) and in the modules docs/architecture.md lists under "What still
//! names the simulated chip" (the runner itself and most of `dfx/`), the host half names
//! `ferry_sim`; nowhere else.
//!
//! What the host half's modules above the seam need of the chip reaches them through the
//! traits of `ferry_backend`, monomorphic over the types named here: the chip's program device
//! ([`SimProgramDevice`], which also loads orchestration libraries' host copies and holds the
//! cores' register windows, `ferry_backend::CoreRegisters`), its custom kernel libraries ([`SimCustomKernels`]), the
//! in-process path's launch completions ([`SimCompletion`]), and the description of the chip
//! [`DeviceRunner::new`](super::DeviceRunner::new) builds ([`DeviceProfile`], [`PathBFixes`]).
use super::slots::DirectCompletion;
use ferry_backend::ProgramDevice;
use std::time::Duration;

/// The device profile and Path B fixes a runner's platform is built with.
pub use ferry_sim::profile::{DeviceProfile, PathBFixes};

/// The simulated chip as a program device (`ferry_backend::ProgramDevice`) and orchestration
/// library loader (`ferry_backend::OrchLibraryLoader`).
pub(crate) type SimProgramDevice = ferry_sim::cores::Chip;

/// A custom kernel library loaded on the simulated chip (`ferry_backend::CustomKernelTable`):
/// the kernel registry's default library type.
pub type SimCustomKernels = <SimProgramDevice as ProgramDevice>::CustomKernels;

/// The completion of a launch the runner starts directly on the chip's cores (the in-process
/// path).
pub(crate) type SimCompletion = ferry_sim::cores::Completion;

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
