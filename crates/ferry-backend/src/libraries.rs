//! What the runner needs of a backend's user libraries beyond loading them: the host copy of
//! an orchestration library ([`OrchLibraryLoader`], [`HostOrchLibrary`]) and the kernel table
//! of a loaded custom kernel library ([`CustomKernelTable`]).
//!
//! Both are separate from [`ProgramDevice`](crate::ProgramDevice): the loader
//! (`ferry_launch::loader`) does not use them, and a backend that carries no user libraries
//! (the host-memory backend) need not provide them.
use crate::ProgramError;
use ferry_abi::kernel_lib::{DeviceCall, HostCall, KernelEntry, KernelErrorRecord};
use ferry_abi::orch_lib::{OrchContext, OrchFunctionEntry};

/// A loaded custom kernel library (a cdylib built against `ferry-kernel-abi`): its validated
/// kernel table, and calls of its entries. What a backend's
/// [`ProgramDevice::CustomKernels`](crate::ProgramDevice::CustomKernels) provides for the
/// runner's kernel registry. Cheap to clone; clones keep the same library loaded.
///
/// On hardware the table is read from the library's descriptor on the host (the vendor's
/// kernel registration); the device entry runs on the AICore and
/// [`call_device`](Self::call_device) is the backend's way to run one where the device's
/// cores are host threads. The host reference ([`call_host`](Self::call_host)) is host code
/// on every backend.
pub trait CustomKernelTable: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The library's name (from its descriptor).
    fn name(&self) -> &str;

    /// The validated kernel table, in the library's order.
    fn entries(&self) -> &[KernelEntry];

    /// Runs kernel `index`'s device entry on the calling thread (a device core) over `call`.
    /// Returns its `STATUS_*` (0 = ok), a refusing kernel's reason in `error`, and
    /// `STATUS_INVALID_ARGUMENT` for an index outside the table.
    fn call_device(&self, index: usize, call: &DeviceCall, error: &mut KernelErrorRecord) -> i32;

    /// Runs kernel `index`'s host reference over `call`. Returns its `STATUS_*`;
    /// `STATUS_INVALID_ARGUMENT` for an index outside the table.
    ///
    /// # Safety
    /// Every used `call.tensors[i]` addresses `len` initialised `f32`s, valid for reads and
    /// writes for the call; no two used tensors overlap, and nothing else accesses them
    /// during the call.
    unsafe fn call_host(&self, index: usize, call: &HostCall) -> i32;
}

/// An orchestration library (`ferry_abi::orch_lib`) loaded on the host: its validated
/// function table, kept loaded, and calls of its functions on the calling thread (how a
/// host-built graph is built).
pub trait HostOrchLibrary: std::fmt::Debug + Send + Sync + 'static {
    /// The library's name (from its descriptor).
    fn name(&self) -> &str;

    /// The validated function table, in the library's order.
    fn entries(&self) -> &[OrchFunctionEntry];

    /// The index of the function named `name`.
    fn function(&self, name: &str) -> Option<usize> {
        self.entries()
            .iter()
            .position(|e| ferry_abi::orch_lib::function_name(&e.name) == Some(name))
    }

    /// Runs function `index` on the calling thread with `ctx`. Returns its status;
    /// `STATUS_INVALID_ARGUMENT` for an index outside the table.
    ///
    /// # Safety
    /// `ctx` and the tables it points at are valid for the call.
    unsafe fn call(&self, index: usize, ctx: &OrchContext) -> i32;
}

/// A backend that loads orchestration libraries' host copies (on hardware: a host `dlopen` of
/// the library's bytes and a check of its descriptor; the device-orchestrated variant loads
/// the same bytes again on the device through the AICPU program).
pub trait OrchLibraryLoader {
    /// A loaded library.
    type OrchLibrary: HostOrchLibrary;

    /// Loads `bytes` on the host and checks the library's descriptor and function table.
    ///
    /// # Errors
    /// [`ProgramError::Refused`] for a file the host's loader refuses,
    /// [`ProgramError::MissingSymbol`] without the library's export, and
    /// [`ProgramError::Backend`] for anything else (a descriptor or table of another ABI
    /// version or malformed, a file that could not be saved), the backend's error its source.
    fn load_orch_library(&self, bytes: &[u8]) -> Result<Self::OrchLibrary, ProgramError>;
}
