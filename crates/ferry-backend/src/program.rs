//! What loading device programs needs of a device: [`ProgramDevice`], the part of the seam
//! the host loader (`ferry_launch::loader`) programs against.
//!
//! A device program is a shared object the device's own loader makes resident (the vendor's
//! AICPU OS: `SaveSoFile`, `BinaryLoad`, op lookup, `rtsLaunchCpuKernel`; on CUDA,
//! `cuModuleLoadData`, `cuModuleGetFunction`, `cuLaunchKernel`). The host loader keeps the
//! policy: which method, what is uploaded where, the names entries are registered under, the
//! identity and ABI checks, and what each failure means. The backend provides the mechanism
//! below, each step one method, and reports a failure as a [`ProgramError`] the loader can
//! classify without knowing the backend.
use crate::{BackendDevice, BackendError};
use ferry_abi::kernel_lib::KernelTableError;
use std::path::PathBuf;
use std::time::Duration;

/// Why a program operation failed, in the terms the loader classifies.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProgramError {
    /// The device's dynamic loader refused an object (corrupt or truncated).
    #[error("the device refused {object}: {reason}")]
    Refused {
        /// The object's name on the device.
        object: String,
        /// The loader's message.
        reason: String,
    },
    /// A loaded object does not export a symbol.
    #[error("{object} does not export `{symbol}`")]
    MissingSymbol {
        /// The object's name on the device.
        object: String,
        /// The symbol.
        symbol: String,
    },
    /// A kernel library's descriptor or kernel table was refused.
    #[error("kernel library {object}: {error}")]
    KernelTable {
        /// The object's name on the device.
        object: String,
        /// What was wrong.
        error: KernelTableError,
    },
    /// An entry ran and returned a non-zero status (`ferry_abi::services::STATUS_*`).
    #[error("entry `{symbol}` returned {status}")]
    Entry {
        /// The entry's symbol.
        symbol: String,
        /// The status it returned.
        status: i32,
    },
    /// Anything else the backend's loader or launcher reports: a file it could not save, a
    /// launch it refused, a wait that ran out. The operation is
    /// [`BackendOp::LoadProgram`](crate::BackendOp::LoadProgram) or
    /// [`BackendOp::Launch`](crate::BackendOp::Launch), the backend's own error its source.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// One function the loader asks a device to resolve ([`ProgramDevice::resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramSymbol<'a> {
    /// The key the function is registered under (`<symbol>_<fingerprint>`, so two programs
    /// never share one).
    pub op_type: &'a str,
    /// The exported symbol.
    pub symbol: &'a str,
    /// The name of the object that exports it on the device.
    pub object: &'a str,
    /// Whether the custom scheduler saved the object (Path B): it is looked up in the
    /// custom scheduler's place only, and its entries run on the custom scheduler's cores.
    pub custom_scheduler: bool,
}

/// Where Method 1 expects a preinstalled object, and whether it is there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preinstalled {
    /// The object's place on the device (for messages).
    pub path: PathBuf,
    /// Whether an object is installed there.
    pub present: bool,
}

/// A launch of a program's function in flight ([`ProgramDevice::launch_function`]).
pub trait ProgramLaunch: std::fmt::Debug + Send + Sync {
    /// Waits for every thread of the launch.
    ///
    /// # Errors
    /// [`ProgramError::Entry`] with the first non-zero status a thread returned;
    /// [`ProgramError::Backend`] when a thread failed otherwise.
    fn wait(&self) -> Result<(), ProgramError>;

    /// As [`wait`](Self::wait), giving up after `timeout`
    /// ([`BackendOp::Wait`](crate::BackendOp::Wait): nothing about the launch is proven).
    ///
    /// # Errors
    /// As [`wait`](Self::wait).
    fn wait_timeout(&self, timeout: Duration) -> Result<(), ProgramError>;
}

/// A device that loads programs: the AICPU program's four entries and the AICore kernel
/// libraries. Cheap to clone; clones name the same device.
///
/// The three load methods map onto it as follows: Method 1 checks
/// [`preinstalled`](Self::preinstalled) and resolves; Path A uploads the dispatcher and the
/// program to device memory, launches the bootstrap ([`launch_bootstrap`](Self::launch_bootstrap),
/// which saves the program on the device) and resolves; Path B saves the program in the
/// custom scheduler's place ([`save_custom`](Self::save_custom)) and resolves with
/// [`ProgramSymbol::custom_scheduler`] set.
pub trait ProgramDevice: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The device whose memory programs and their arguments live in.
    type Device: BackendDevice;
    /// This process's session on the device's loader: kept by the loader and every program it
    /// loaded; the device forgets the process's saved objects when the last one drops.
    type Session: std::fmt::Debug + Send + Sync + 'static;
    /// A resolved function of a loaded object; keeps the object loaded.
    type Function: Clone + std::fmt::Debug + Send + Sync + 'static;
    /// A launch of a function in flight.
    type Launch: ProgramLaunch;
    /// A loaded AICore kernel library (the built-in one).
    type KernelLibrary: std::fmt::Debug + Send + Sync + 'static;
    /// A loaded custom kernel library (a user's, built against `ferry-kernel-abi`).
    type CustomKernels: std::fmt::Debug + Send + Sync + 'static;

    /// The device.
    fn device(&self) -> &Self::Device;

    /// Whether functions resolved for the custom scheduler see the AICore cores' writes (a
    /// coherent cluster, or a handshake the device keeps uncached). Where not, a run's startup
    /// handshake through Path B would spin on a stale copy.
    fn custom_scheduler_coherent(&self) -> bool;

    /// Opens (or joins) this process's session.
    ///
    /// # Errors
    /// [`ProgramError::Backend`] when the device cannot hold the session.
    fn open_session(&self) -> Result<Self::Session, ProgramError>;

    /// Counts device resets: after one the device has forgotten every object it saved, and a
    /// loader uploads again.
    fn generation(&self) -> u64;

    /// Where Method 1 expects `object`, and whether it is installed there.
    fn preinstalled(&self, object: &str) -> Preinstalled;

    /// Path B: the custom scheduler saves `bytes` as `object` in its own place.
    ///
    /// # Errors
    /// [`ProgramError::Backend`]: a bad name, a failed write.
    fn save_custom(&self, object: &str, bytes: &[u8]) -> Result<(), ProgramError>;

    /// Path A: launches the dispatcher bootstrap with `blob` (a `ferry_abi::launch::BootstrapBlob`
    /// whose arguments, the dispatcher's and the program's bytes are in the device's memory)
    /// on the device's AICPU, and waits for it: the dispatcher saves the program under its
    /// fingerprint name.
    ///
    /// # Errors
    /// [`ProgramError::Refused`] / [`ProgramError::MissingSymbol`] for a dispatcher the device
    /// cannot load, [`ProgramError::Entry`] for its non-zero status, [`ProgramError::Backend`]
    /// for a malformed blob, a bad device address or a refused launch.
    fn launch_bootstrap(&self, blob: &[u8]) -> Result<(), ProgramError>;

    /// Loads every symbol's object (searching the place its flag names) and resolves the
    /// symbols, in order.
    ///
    /// # Errors
    /// [`ProgramError::Refused`] for an object the device cannot load,
    /// [`ProgramError::MissingSymbol`], [`ProgramError::Backend`] for an object found nowhere
    /// or a bad name.
    fn resolve(&self, symbols: &[ProgramSymbol<'_>]) -> Result<Vec<Self::Function>, ProgramError>;

    /// Launches `function` on the first `threads` AICPU threads, each with its own copy of
    /// `payload` (the argument block, by value).
    ///
    /// # Errors
    /// [`ProgramError::Backend`]: an invalid thread count, a refused launch.
    fn launch_function(
        &self,
        function: &Self::Function,
        threads: u32,
        payload: &[u8],
    ) -> Result<Self::Launch, ProgramError>;

    /// Loads the built-in AICore kernel library (`rtRegisterAllKernel`).
    ///
    /// # Errors
    /// [`ProgramError::Refused`], [`ProgramError::MissingSymbol`], [`ProgramError::Backend`].
    fn load_kernel_library(&self, bytes: &[u8]) -> Result<Self::KernelLibrary, ProgramError>;

    /// Loads a custom kernel library and checks its descriptor and kernel table.
    ///
    /// # Errors
    /// As [`load_kernel_library`](Self::load_kernel_library), and
    /// [`ProgramError::KernelTable`].
    fn load_custom_kernels(&self, bytes: &[u8]) -> Result<Self::CustomKernels, ProgramError>;
}
