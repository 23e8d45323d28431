//! A [`Chip`] as the seam's program device ([`ProgramDevice`]): each step of the loader is
//! the AICPU OS's own operation on the chip's device, its [`OsError`] classified as the
//! seam's [`ProgramError`] (the OS error kept as the source of the rest).
//!
//! # Examples
//! ```
//! use ferry_backend::{ProgramDevice, ProgramError};
//! use ferry_sim::cores::{Chip, CoreConfig};
//! use ferry_sim::{Arch, PlatformBuilder};
//!
//! let root = std::env::temp_dir().join(format!("ferry-doc-programs-{}", std::process::id()));
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 20).device_root(&root).build()?;
//! let chip = Chip::new(p.device(0)?.clone(), CoreConfig { aicpu_threads: 1, aic: 1, aiv: 1 })?;
//! let session = chip.open_session()?;
//! // Not a shared object: the device's dynamic loader refuses it.
//! let e = chip.load_kernel_library(b"not an object").unwrap_err();
//! assert!(matches!(e, ProgramError::Refused { .. }));
//! # drop(session);
//! # let _ = std::fs::remove_dir_all(&root);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use super::*;
use crate::custom_kernels::CustomKernelLibrary;
use ferry_backend::{
    BackendError, BackendOp, Preinstalled, ProgramDevice, ProgramError, ProgramLaunch,
    ProgramSymbol,
};

/// The seam's classification of an OS error; what it does not classify keeps `op`.
fn program_error(op: BackendOp) -> impl FnOnce(OsError) -> ProgramError {
    move |e| match e {
        OsError::LoadFailed { path, reason } => ProgramError::Refused {
            object: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            reason,
        },
        OsError::MissingSymbol { object, symbol } => ProgramError::MissingSymbol { object, symbol },
        OsError::BadKernelTable { object, error } => ProgramError::KernelTable { object, error },
        OsError::Entry { symbol, code } => ProgramError::Entry { symbol, status: code },
        e @ OsError::Device(DeviceError::Timeout { .. }) => {
            ProgramError::Backend(BackendError::new(BackendOp::Wait, e))
        }
        e => ProgramError::Backend(BackendError::new(op, e)),
    }
}

impl ProgramLaunch for CpuLaunch {
    fn wait(&self) -> Result<(), ProgramError> {
        CpuLaunch::wait(self).map_err(program_error(BackendOp::Launch))
    }

    fn wait_timeout(&self, timeout: Duration) -> Result<(), ProgramError> {
        CpuLaunch::wait_timeout(self, timeout).map_err(program_error(BackendOp::Launch))
    }
}

impl ProgramDevice for Chip {
    type Device = Device;
    /// The process's device directories, and the chip's attachment to the OS (so the services
    /// reach its register windows from every thread, AICore workers included).
    type Session = (OsSession, ChipAttachment);
    type Function = CpuFunction;
    type Launch = CpuLaunch;
    type KernelLibrary = KernelLibrary;
    type CustomKernels = CustomKernelLibrary;

    fn device(&self) -> &Device {
        Chip::device(self)
    }

    fn custom_scheduler_coherent(&self) -> bool {
        let caps = self.device().aicpu_os().caps();
        caps.custom_scheduler_coherent || caps.noncacheable_handshake
    }

    fn open_session(&self) -> Result<Self::Session, ProgramError> {
        let os = self.device().aicpu_os();
        let session = os.open_session().map_err(program_error(BackendOp::LoadProgram))?;
        Ok((session, os.attach(self)))
    }

    fn generation(&self) -> u64 {
        self.device().aicpu_os().generation()
    }

    fn preinstalled(&self, object: &str) -> Preinstalled {
        let path = self.device().aicpu_os().preinstalled_dir().join(object);
        Preinstalled { present: path.is_file(), path }
    }

    fn save_custom(&self, object: &str, bytes: &[u8]) -> Result<(), ProgramError> {
        let os = self.device().aicpu_os();
        os.upload_custom(object, bytes).map(drop).map_err(program_error(BackendOp::LoadProgram))
    }

    fn launch_bootstrap(&self, blob: &[u8]) -> Result<(), ProgramError> {
        self.device().aicpu_os().launch_kfc(self, blob).map_err(program_error(BackendOp::Launch))
    }

    fn resolve(&self, symbols: &[ProgramSymbol<'_>]) -> Result<Vec<CpuFunction>, ProgramError> {
        let entries: Vec<OpEntry> = symbols
            .iter()
            .map(|s| OpEntry {
                op_type: s.op_type.into(),
                function_name: s.symbol.into(),
                kernel_so: s.object.into(),
                user_defined: s.custom_scheduler,
            })
            .collect();
        let os = self.device().aicpu_os();
        let binary = os.binary_load(&entries).map_err(program_error(BackendOp::LoadProgram))?;
        entries
            .iter()
            .map(|e| binary.function(&e.op_type).map_err(program_error(BackendOp::LoadProgram)))
            .collect()
    }

    fn launch_function(
        &self,
        function: &CpuFunction,
        threads: u32,
        payload: &[u8],
    ) -> Result<CpuLaunch, ProgramError> {
        self.device()
            .aicpu_os()
            .launch_cpu_kernel(self, function, threads, payload)
            .map_err(program_error(BackendOp::Launch))
    }

    fn load_kernel_library(&self, bytes: &[u8]) -> Result<KernelLibrary, ProgramError> {
        let os = self.device().aicpu_os();
        os.load_kernel_library(bytes).map_err(program_error(BackendOp::LoadProgram))
    }

    fn load_custom_kernels(&self, bytes: &[u8]) -> Result<CustomKernelLibrary, ProgramError> {
        let os = self.device().aicpu_os();
        os.load_custom_kernels(bytes).map_err(program_error(BackendOp::LoadProgram))
    }
}

impl ferry_backend::OrchLibraryLoader for Chip {
    type OrchLibrary = crate::orch_libraries::OrchLibrary;

    fn load_orch_library(&self, bytes: &[u8]) -> Result<Self::OrchLibrary, ProgramError> {
        let os = self.device().aicpu_os();
        os.load_orch_library(bytes).map_err(program_error(BackendOp::LoadProgram))
    }
}

impl ferry_backend::HostOrchLibrary for crate::orch_libraries::OrchLibrary {
    fn name(&self) -> &str {
        crate::orch_libraries::OrchLibrary::name(self)
    }

    fn entries(&self) -> &[ferry_abi::orch_lib::OrchFunctionEntry] {
        crate::orch_libraries::OrchLibrary::entries(self)
    }

    fn function(&self, name: &str) -> Option<usize> {
        crate::orch_libraries::OrchLibrary::function(self, name)
    }

    unsafe fn call(&self, index: usize, ctx: &ferry_abi::orch_lib::OrchContext) -> i32 {
        // SAFETY: the caller's contract is this one's.
        unsafe { crate::orch_libraries::OrchLibrary::call(self, index, ctx) }
    }
}

impl ferry_backend::CustomKernelTable for CustomKernelLibrary {
    fn name(&self) -> &str {
        CustomKernelLibrary::name(self)
    }

    fn entries(&self) -> &[ferry_abi::kernel_lib::KernelEntry] {
        CustomKernelLibrary::entries(self)
    }

    fn call_device(
        &self,
        index: usize,
        call: &ferry_abi::kernel_lib::DeviceCall,
        error: &mut ferry_abi::kernel_lib::KernelErrorRecord,
    ) -> i32 {
        CustomKernelLibrary::call_device(self, index, call, error)
    }

    unsafe fn call_host(&self, index: usize, call: &ferry_abi::kernel_lib::HostCall) -> i32 {
        // SAFETY: the caller's contract is this one's.
        unsafe { CustomKernelLibrary::call_host(self, index, call) }
    }
}
