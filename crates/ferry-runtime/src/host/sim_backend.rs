//! The simulated chip as the runner's default backend: the one module of the host half, with
//! the in-process path's device operations (`sim_ops`) and the parts of the runner listed in
//! docs/architecture.md ("What still names the simulated chip"), that names `ferry_sim`.
//!
//! Everything the runner's modules above the seam need of the chip reaches them through the
//! traits of `ferry_backend`, monomorphic over the types named here: the chip's program device
//! ([`SimProgramDevice`], which also loads orchestration libraries' host copies), its custom
//! kernel libraries ([`SimCustomKernels`]), and the description of the chip
//! [`DeviceRunner::new`](super::DeviceRunner::new) builds ([`DeviceProfile`], [`PathBFixes`]).
use ferry_backend::ProgramDevice;

/// The device profile and Path B fixes a runner's platform is built with.
pub use ferry_sim::profile::{DeviceProfile, PathBFixes};

/// The simulated chip as a program device (`ferry_backend::ProgramDevice`) and orchestration
/// library loader (`ferry_backend::OrchLibraryLoader`).
pub(crate) type SimProgramDevice = ferry_sim::cores::Chip;

/// A custom kernel library loaded on the simulated chip (`ferry_backend::CustomKernelTable`):
/// the kernel registry's default library type.
pub type SimCustomKernels = <SimProgramDevice as ProgramDevice>::CustomKernels;
