//! A runner on another device than the simulated chip: the host-memory backend's device and
//! cores (`ferry_backend::host`), a device with the full path only.
use super::{NoInProcessPath, RunnerDevice};
use crate::device::ops::DeviceOps;
use crate::device::program::AicpuProgram;
use crate::error::{ConfigError, RunError, RunnerError};
use crate::host::{DeviceRunner, KernelRegistry, LaunchPath, RunArgs, RunOutput, RunnerConfig};
use ferry_abi::arch::Arch;
use ferry_abi::kernel_lib::{DeviceCall, HostCall, KernelEntry, KernelErrorRecord};
use ferry_abi::launch::KernelArgs;
use ferry_backend::host::{
    HostMemoryBackend, HostMemoryCoreLaunch, HostMemoryCores, HostMemoryDevice, HostMemoryFunction,
    HostMemoryLaunch, HostMemoryLibrary, HostMemorySession,
};
use ferry_backend::{
    AicoreLauncher, Backend, BackendError, CoreRegisters, CustomKernelTable, Preinstalled,
    ProgramDevice, ProgramError, ProgramSymbol,
};
use std::sync::Arc;

mod full_path;

/// The host-memory backend's device with its cores, as one program device.
#[derive(Clone, Debug)]
struct HostChip {
    device: HostMemoryDevice,
    cores: HostMemoryCores,
}

/// The custom kernel library of a device that loads none.
#[derive(Clone, Debug)]
enum NoKernels {}

impl CustomKernelTable for NoKernels {
    fn name(&self) -> &str {
        match *self {}
    }

    fn entries(&self) -> &[KernelEntry] {
        match *self {}
    }

    fn call_device(&self, _: usize, _: &DeviceCall, _: &mut KernelErrorRecord) -> i32 {
        match *self {}
    }

    unsafe fn call_host(&self, _: usize, _: &HostCall) -> i32 {
        match *self {}
    }
}

impl ProgramDevice for HostChip {
    type Device = HostMemoryDevice;
    type Session = HostMemorySession;
    type Function = HostMemoryFunction;
    type Launch = HostMemoryLaunch;
    type KernelLibrary = HostMemoryLibrary;
    type CustomKernels = NoKernels;

    fn device(&self) -> &HostMemoryDevice {
        &self.device
    }

    fn custom_scheduler_coherent(&self) -> bool {
        self.device.custom_scheduler_coherent()
    }

    fn open_session(&self) -> Result<HostMemorySession, ProgramError> {
        self.device.open_session()
    }

    fn generation(&self) -> u64 {
        self.device.generation()
    }

    fn preinstalled(&self, object: &str) -> Preinstalled {
        self.device.preinstalled(object)
    }

    fn save_custom(&self, object: &str, bytes: &[u8]) -> Result<(), ProgramError> {
        self.device.save_custom(object, bytes)
    }

    fn launch_bootstrap(&self, blob: &[u8]) -> Result<(), ProgramError> {
        self.device.launch_bootstrap(blob)
    }

    fn resolve(
        &self,
        symbols: &[ProgramSymbol<'_>],
    ) -> Result<Vec<HostMemoryFunction>, ProgramError> {
        self.device.resolve(symbols)
    }

    fn launch_function(
        &self,
        function: &HostMemoryFunction,
        threads: u32,
        payload: &[u8],
    ) -> Result<HostMemoryLaunch, ProgramError> {
        self.device.launch_function(function, threads, payload)
    }

    fn load_kernel_library(&self, bytes: &[u8]) -> Result<HostMemoryLibrary, ProgramError> {
        self.device.load_kernel_library(bytes)
    }

    fn load_custom_kernels(&self, _: &[u8]) -> Result<NoKernels, ProgramError> {
        Err(ProgramError::Refused {
            object: "custom kernel library".into(),
            reason: "this device loads no custom kernel libraries".into(),
        })
    }
}

impl CoreRegisters for HostChip {
    fn arch(&self) -> Arch {
        self.cores.arch()
    }

    fn core_count(&self) -> u32 {
        self.cores.core_count()
    }

    fn reg_bases(&self) -> Vec<u64> {
        self.cores.reg_bases()
    }

    fn write_as_aicpu(&self, core: u32, offset: u32, value: u32) {
        self.cores.write_as_aicpu(core, offset, value);
    }

    fn write_as_core(&self, core: u32, offset: u32, value: u32) {
        self.cores.write_as_core(core, offset, value);
    }
}

impl AicoreLauncher for HostChip {
    type CoreLaunch = HostMemoryCoreLaunch;

    fn launch_cores<F>(&self, cores: u32, body: F) -> Result<HostMemoryCoreLaunch, BackendError>
    where
        F: Fn(u32) -> Result<(), String> + Send + Sync + 'static,
    {
        self.cores.launch_cores(cores, body)
    }
}

/// The full path only: there is no in-process path to launch.
impl RunnerDevice for HostChip {
    type InProcessOps = NoInProcessPath;
    type Completion = NoInProcessPath;

    fn launch_in_process(
        &self,
        in_process: &NoInProcessPath,
        _: (u32, u32),
        _: &Arc<dyn DeviceOps>,
        _: &Arc<KernelRegistry<NoKernels>>,
        _: &Arc<AicpuProgram>,
        _: KernelArgs,
    ) -> Result<(NoInProcessPath, NoInProcessPath), RunError> {
        match *in_process {}
    }
}

fn host_chip() -> HostChip {
    let backend = HostMemoryBackend::new(1, 1 << 20).expect("a host-memory backend");
    let device = backend.device(0).expect("its device").clone();
    HostChip { device, cores: HostMemoryCores::new(Arch::A2a3, 4).expect("its cores") }
}

#[test]
fn the_runner_type_checks_on_another_device() {
    // The whole per-run surface, instantiated for a device that is not the simulated chip.
    let run: fn(&mut DeviceRunner<HostChip>, u32, RunArgs) -> Result<RunOutput, RunError> =
        DeviceRunner::<HostChip>::run;
    let _ = run;
}

#[test]
fn a_device_without_the_in_process_path_refuses_it() {
    // Directly, and over the AICPU OS's services: either way the launch is the device's
    // in-process one, which it does not have.
    for via_services in [false, true] {
        let chip = host_chip();
        let device = chip.device.clone();
        let cfg = RunnerConfig {
            path: LaunchPath::InProcess,
            via_services,
            ..RunnerConfig::small(Arch::A2a3)
        };
        let refused = DeviceRunner::assemble(device.clone(), chip, cfg, None, |_| None);
        assert!(
            matches!(refused, Err(RunnerError::Config(ConfigError::NoInProcessPath))),
            "via services {via_services}: {refused:?}"
        );
        // Refused before it allocated anything on the device.
        assert_eq!(device.stats().allocated_bytes, 0);
    }
}
