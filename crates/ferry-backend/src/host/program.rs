//! The host-memory backend's program loader ([`ProgramDevice`] for [`HostMemoryDevice`]).
//!
//! Its "device" runs host code, so it cannot execute a shared object's machine code: the code
//! an image stands for is registered with the device beforehand
//! ([`HostMemoryDevice::register_code`]: the image's bytes and a table of host functions by
//! symbol). Everything else follows the device's rules: objects are saved in three places
//! (the process's, the preinstalled one, the custom scheduler's) and looked up by name; the
//! bootstrap reads its blob, its arguments and the program's bytes from device memory and saves
//! the program under its fingerprint name, as the dispatcher does; resolving an object whose
//! bytes have no registered code is a refused load, a symbol the code lacks a missing symbol;
//! an entry's non-zero status is an entry failure; a reset forgets every saved object.
//! Launches run at launch: one call per AICPU thread asked for, each on a host thread of its
//! own and all at once (an AICPU program's threads wait for each other), and the launch returns
//! when every one has returned. A call learns its position in the launch from
//! [`aicpu_thread`], as a program on the device asks its OS.
//!
//! # Examples
//! ```
//! use ferry_backend::host::{HostMemoryBackend, HostProgramCode};
//! use ferry_backend::{Backend, ProgramDevice, ProgramError, ProgramLaunch, ProgramSymbol};
//!
//! let b = HostMemoryBackend::new(1, 1 << 20)?;
//! let dev = b.device(0)?;
//! let image = b"an image of a program";
//! dev.register_code(image, HostProgramCode::new().export("answer", |_, args| i32::from(args[0])));
//! dev.save_custom("answer.so", image)?;
//! let symbol = ProgramSymbol { op_type: "answer_1", symbol: "answer", object: "answer.so", custom_scheduler: true };
//! let f = dev.resolve(&[symbol])?.remove(0);
//! assert!(dev.launch_function(&f, 2, &[0])?.wait().is_ok());
//! let e = dev.launch_function(&f, 2, &[7])?.wait().unwrap_err();
//! assert!(matches!(e, ProgramError::Entry { status: 7, .. }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use super::{lock, HostMemoryDevice, HostMemoryError};
use crate::{
    BackendDevice, BackendError, BackendOp, Preinstalled, ProgramDevice, ProgramError,
    ProgramLaunch, ProgramSymbol,
};
use ferry_abi::kernel_lib::EXPORT_KERNEL_LIBRARY;
use ferry_abi::launch::{
    AbiRecord, BootstrapArgs, BootstrapBlob, BOOTSTRAP_KERNEL_NAME, BOOTSTRAP_SO_NAME,
};
use ferry_abi::services::{
    fingerprint, inner_so_name, EXPORT_KERNEL_LOOKUP, STATUS_OK, STATUS_PANIC,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

thread_local! {
    static POSITION: std::cell::Cell<Option<(u32, u32)>> = const { std::cell::Cell::new(None) };
}

/// The calling thread's position in the launch of a host-memory device's function that runs
/// it: `(thread, threads)`, `thread` in `0..threads`; `None` outside such a launch.
pub fn aicpu_thread() -> Option<(u32, u32)> {
    POSITION.with(std::cell::Cell::get)
}

/// A host function standing for a device program's export: it gets the device it runs on and
/// its argument block, and returns a status (`ferry_abi::services::STATUS_OK` for success).
pub type HostFunctionBody = Arc<dyn Fn(&HostMemoryDevice, &[u8]) -> i32 + Send + Sync>;

/// The code an image stands for on the host-memory backend: its exports, by symbol.
#[derive(Clone, Default)]
pub struct HostProgramCode {
    exports: BTreeMap<String, HostFunctionBody>,
}

impl std::fmt::Debug for HostProgramCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostProgramCode").field("exports", &self.exports.keys()).finish()
    }
}

impl HostProgramCode {
    /// Code with no exports.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same code, exporting `body` as `symbol`.
    pub fn export(
        mut self,
        symbol: &str,
        body: impl Fn(&HostMemoryDevice, &[u8]) -> i32 + Send + Sync + 'static,
    ) -> Self {
        self.exports.insert(symbol.into(), Arc::new(body));
        self
    }

    /// Whether the code exports `symbol`.
    pub fn exports(&self, symbol: &str) -> bool {
        self.exports.contains_key(symbol)
    }
}

/// Where an object is saved on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    /// This process's place (Path A saves there).
    Process,
    /// Method 1's, filled out of band.
    Preinstalled,
    /// The custom scheduler's (Path B).
    Custom,
}

/// A device's program state.
#[derive(Debug, Default)]
pub(super) struct Programs {
    state: Mutex<ProgramState>,
}

#[derive(Debug, Default)]
struct ProgramState {
    /// Registered code, by the image's bytes.
    code: BTreeMap<Vec<u8>, HostProgramCode>,
    /// Saved objects, by place and name.
    saved: BTreeMap<(Place, String), Arc<[u8]>>,
    generation: u64,
    stats: HostProgramStats,
}

/// What a device's program loader has done (statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostProgramStats {
    /// Sessions open now.
    pub sessions: u64,
    /// Bootstraps that saved a program.
    pub bootstraps: u64,
    /// Objects saved, in any place.
    pub saves: u64,
    /// Functions launched.
    pub launches: u64,
}

/// A resolved function of the host-memory backend.
#[derive(Clone)]
pub struct HostMemoryFunction {
    symbol: String,
    body: HostFunctionBody,
}

impl std::fmt::Debug for HostMemoryFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostMemoryFunction").field("symbol", &self.symbol).finish()
    }
}

impl HostMemoryFunction {
    /// The exported symbol.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }
}

/// A launch of the host-memory backend: it ran when it was made.
#[derive(Clone, Debug)]
pub struct HostMemoryLaunch {
    result: Result<(), ProgramError>,
}

impl ProgramLaunch for HostMemoryLaunch {
    fn wait(&self) -> Result<(), ProgramError> {
        self.result.clone()
    }

    fn wait_timeout(&self, _timeout: Duration) -> Result<(), ProgramError> {
        self.result.clone()
    }
}

/// A session of the host-memory backend's program loader; the device forgets the process's
/// saved objects when the last one drops.
#[derive(Debug)]
pub struct HostMemorySession {
    device: HostMemoryDevice,
}

impl Drop for HostMemorySession {
    fn drop(&mut self) {
        let mut st = lock(&self.device.0.programs.state);
        st.stats.sessions -= 1;
        if st.stats.sessions == 0 {
            st.saved.retain(|(place, _), _| *place != Place::Process);
        }
    }
}

/// A kernel library loaded on the host-memory backend: the registered code of its image.
#[derive(Clone, Debug)]
pub struct HostMemoryLibrary {
    code: HostProgramCode,
}

impl HostMemoryLibrary {
    /// The library's code.
    pub fn code(&self) -> &HostProgramCode {
        &self.code
    }
}

fn refused(op: BackendOp, e: HostMemoryError) -> ProgramError {
    ProgramError::Backend(BackendError::typed(op, e))
}

/// A plain object name (no separator, not `.` or `..`, not empty, no NUL).
fn check_name(name: &str) -> Result<(), ProgramError> {
    let bad = name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']);
    match bad {
        true => {
            Err(refused(BackendOp::LoadProgram, HostMemoryError::BadName { name: name.into() }))
        }
        false => Ok(()),
    }
}

impl HostMemoryDevice {
    /// Registers what `image` stands for: a program whose bytes are `image` runs `code` on
    /// this device. Registering the same bytes again replaces the code.
    pub fn register_code(&self, image: &[u8], code: HostProgramCode) {
        lock(&self.0.programs.state).code.insert(image.to_vec(), code);
    }

    /// Method 1: installs `bytes` as `name` in the preinstalled place (out of band).
    ///
    /// # Errors
    /// [`BackendOp::LoadProgram`] for a name that is not a plain name.
    pub fn install_preinstalled(&self, name: &str, bytes: &[u8]) -> Result<(), ProgramError> {
        self.save(Place::Preinstalled, name, bytes)
    }

    /// A device reset: every saved object of the process's and the custom scheduler's places
    /// is forgotten and [`generation`](ProgramDevice::generation) moves on.
    pub fn reset_programs(&self) {
        let mut st = lock(&self.0.programs.state);
        st.generation += 1;
        st.saved.retain(|(place, _), _| *place == Place::Preinstalled);
    }

    /// What the device's program loader has done.
    pub fn program_stats(&self) -> HostProgramStats {
        lock(&self.0.programs.state).stats
    }

    fn save(&self, place: Place, name: &str, bytes: &[u8]) -> Result<(), ProgramError> {
        check_name(name)?;
        let mut st = lock(&self.0.programs.state);
        st.saved.insert((place, name.into()), bytes.into());
        st.stats.saves += 1;
        Ok(())
    }

    /// Device bytes `[addr, addr + len)`, checked to be live memory before anything is
    /// allocated for them.
    fn read_device(&self, addr: u64, len: u64) -> Result<Vec<u8>, ProgramError> {
        let ptr = crate::DevicePtr(addr);
        if !self.is_allocated(ptr, len) {
            let e = self.0.shared.bad(addr, len);
            return Err(refused(BackendOp::Launch, e));
        }
        let mut out = vec![0u8; len as usize];
        self.copy_dtoh(ptr, &mut out)?;
        Ok(out)
    }

    /// The code of the object saved as `name` in the first of `places` that has it.
    fn code_of(&self, name: &str, places: &[Place]) -> Result<HostProgramCode, ProgramError> {
        check_name(name)?;
        let st = lock(&self.0.programs.state);
        let bytes =
            places.iter().find_map(|p| st.saved.get(&(*p, name.to_owned()))).ok_or_else(|| {
                refused(BackendOp::LoadProgram, HostMemoryError::NoObject { name: name.into() })
            })?;
        st.code.get(&bytes[..]).cloned().ok_or_else(|| ProgramError::Refused {
            object: name.into(),
            reason: "no code is registered for these bytes".into(),
        })
    }

    /// Loads an image that is not saved by name (a kernel library) and checks its export.
    fn library(&self, bytes: &[u8], export: &str) -> Result<HostMemoryLibrary, ProgramError> {
        let name = format!("kernels_{:016x}_{}.so", fingerprint(bytes), self.ordinal());
        self.save(Place::Process, &name, bytes)?;
        let code = self.code_of(&name, &[Place::Process])?;
        if !code.exports(export) {
            return Err(ProgramError::MissingSymbol { object: name, symbol: export.into() });
        }
        Ok(HostMemoryLibrary { code })
    }
}

impl ProgramDevice for HostMemoryDevice {
    type Device = HostMemoryDevice;
    type Session = HostMemorySession;
    type Function = HostMemoryFunction;
    type Launch = HostMemoryLaunch;
    type KernelLibrary = HostMemoryLibrary;
    type CustomKernels = HostMemoryLibrary;

    fn device(&self) -> &HostMemoryDevice {
        self
    }

    fn custom_scheduler_coherent(&self) -> bool {
        // Every "core" is a host thread of one coherent machine.
        true
    }

    fn open_session(&self) -> Result<HostMemorySession, ProgramError> {
        self.0.shared.check(BackendOp::LoadProgram)?;
        lock(&self.0.programs.state).stats.sessions += 1;
        Ok(HostMemorySession { device: self.clone() })
    }

    fn generation(&self) -> u64 {
        lock(&self.0.programs.state).generation
    }

    fn preinstalled(&self, object: &str) -> Preinstalled {
        let present = lock(&self.0.programs.state)
            .saved
            .contains_key(&(Place::Preinstalled, object.to_owned()));
        let path = PathBuf::from(format!("host-memory/{}/preinstalled/{object}", self.ordinal()));
        Preinstalled { path, present }
    }

    fn save_custom(&self, object: &str, bytes: &[u8]) -> Result<(), ProgramError> {
        self.save(Place::Custom, object, bytes)
    }

    fn launch_bootstrap(&self, blob: &[u8]) -> Result<(), ProgramError> {
        self.0.shared.check(BackendOp::Launch)?;
        let bad = |e| refused(BackendOp::Launch, HostMemoryError::Bootstrap(e));
        let b = BootstrapBlob::from_bytes(blob).map_err(bad)?;
        let (kernel, object) = (b.kernel_name().map_err(bad)?, b.so_name().map_err(bad)?);
        if kernel != BOOTSTRAP_KERNEL_NAME || object != BOOTSTRAP_SO_NAME {
            let e = HostMemoryError::NotBootstrap { kernel: kernel.into(), object: object.into() };
            return Err(refused(BackendOp::Launch, e));
        }
        let args = self.read_device(b.device_args_ptr, BootstrapArgs::SIZE as u64)?;
        let args = BootstrapArgs::from_bytes(&args).map_err(bad)?;
        // The dispatcher must be readable, as the device loads it before it saves the program.
        self.read_device(args.aicpu_so_bin, args.aicpu_so_len)?;
        let inner = self.read_device(args.inner_so_bin, args.inner_so_len)?;
        let mut buf = [0u8; 48];
        let name = inner_so_name(fingerprint(&inner), args.device_id, &mut buf)
            .ok_or_else(|| {
                refused(BackendOp::Launch, HostMemoryError::BadName { name: "inner".into() })
            })?
            .to_owned();
        self.save(Place::Process, &name, &inner)?;
        lock(&self.0.programs.state).stats.bootstraps += 1;
        Ok(())
    }

    fn resolve(
        &self,
        symbols: &[ProgramSymbol<'_>],
    ) -> Result<Vec<HostMemoryFunction>, ProgramError> {
        symbols
            .iter()
            .map(|s| {
                let places: &[Place] = match s.custom_scheduler {
                    true => &[Place::Custom],
                    false => &[Place::Process, Place::Preinstalled],
                };
                let code = self.code_of(s.object, places)?;
                let body = code.exports.get(s.symbol).cloned().ok_or_else(|| {
                    ProgramError::MissingSymbol { object: s.object.into(), symbol: s.symbol.into() }
                })?;
                Ok(HostMemoryFunction { symbol: s.symbol.into(), body })
            })
            .collect()
    }

    fn launch_function(
        &self,
        function: &HostMemoryFunction,
        threads: u32,
        payload: &[u8],
    ) -> Result<HostMemoryLaunch, ProgramError> {
        self.0.shared.check(BackendOp::Launch)?;
        if threads == 0 {
            return Err(refused(BackendOp::Launch, HostMemoryError::NoThreads));
        }
        lock(&self.0.programs.state).stats.launches += 1;
        let statuses: Vec<i32> = std::thread::scope(|scope| {
            let running: Vec<_> = (0..threads)
                .map(|thread| {
                    // Each thread gets its own copy of the argument block, by value.
                    let private = payload.to_vec();
                    std::thread::Builder::new()
                        .name(format!("aicpu-{thread}"))
                        .spawn_scoped(scope, move || {
                            POSITION.with(|p| p.set(Some((thread, threads))));
                            (function.body)(self, &private)
                        })
                        // As `std::thread::spawn`: a process that cannot start a thread is out
                        // of resources, not handed bad input.
                        .expect("starting an AICPU thread")
                })
                .collect();
            // A body that panicked returned no status: it failed as a panicking export does.
            running.into_iter().map(|t| t.join().unwrap_or(STATUS_PANIC)).collect()
        });
        let first = statuses.into_iter().find(|&s| s != STATUS_OK).unwrap_or(STATUS_OK);
        let result = match first {
            STATUS_OK => Ok(()),
            status => Err(ProgramError::Entry { symbol: function.symbol.clone(), status }),
        };
        Ok(HostMemoryLaunch { result })
    }

    fn load_kernel_library(&self, bytes: &[u8]) -> Result<HostMemoryLibrary, ProgramError> {
        self.library(bytes, EXPORT_KERNEL_LOOKUP)
    }

    fn load_custom_kernels(&self, bytes: &[u8]) -> Result<HostMemoryLibrary, ProgramError> {
        self.library(bytes, EXPORT_KERNEL_LIBRARY)
    }
}
