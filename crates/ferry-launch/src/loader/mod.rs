//! The host loader: makes the AICPU program runnable on a device (docs/design/launch.md).
//!
//! | method | [`LoadMethod`] | where the program lands | several runtimes per process |
//! |---|---|---|---|
//! | 1, preinstalled | [`LoadMethod::Preinstalled`] | `<root>/<vf>/aicpu_kernels/`, put there out of band | yes |
//! | 2, Path A (default) | [`LoadMethod::DispatcherBootstrap`] | `<root>/<vf>/aicpu_kernels_device/<pid>_<dev>/inner_<fp>_<dev>.so`, written by the dispatcher on the device | no on the vendor device (the default profile): the latch keeps the first program and the loader refuses the second with [`LoadError::ResidentMismatch`]; yes on the relaxed device |
//! | 3, Path B | [`LoadMethod::CustomScheduler`] | `<root>/cust_aicpu_<dev>_<vf>_<pid>/` | yes (no latch); on the vendor device its entries run on the custom scheduler's incoherent cluster, and a runtime's startup handshake hangs (the Path B hang, docs/design/launch.md) unless the device has fix A (with the split handshake), B or C |
//!
//! Path B loads on every device, as on the real stack, where the hang shows only when a run
//! starts. [`LoaderBuilder::refuse_incoherent_path_b`] turns on a preflight check that refuses
//! it up front on a device whose custom-scheduler cluster is not coherent.
//!
//! The loader is generic over the device's program loader, the seam's
//! [`ProgramDevice`] (the simulated chip's `Chip` is one, a hardware backend's AICPU loader
//! another): it keeps the policy (method, uploads, entry names, identity and ABI checks, the
//! typed errors) and the device provides each step.
//!
//! # Path A, step by step
//!
//! 1. The program's bytes are checked on the host (ELF64 shared object, every header and
//!    segment inside the buffer): a truncated or non-ELF image never reaches the device.
//! 2. Unless this loader already bootstrapped and verified the same image since the device's
//!    last reset:
//!    the dispatcher bytes, the program bytes and a [`BootstrapArgs`] pointing at both are uploaded;
//!    a [`BootstrapBlob`] with `device_args_ptr` at offset 40 is launched on the device's AICPU
//!    ([`ProgramDevice::launch_bootstrap`]); the dispatcher writes `inner_<fp>_<dev>.so`
//!    through the OS's `SaveSoFile` (temp file + rename). The three device buffers are freed on return, on every
//!    path (the host allocated them).
//! 3. Binary load → function lookup for every entry (op type `<symbol>_<fp:016x>`, so two
//!    runtimes never share a registry key) → launch of the query entry.
//! 4. **Identity check.** The program reports its name and build id; when they are not those
//!    of the program this loader shipped, the resident program is another runtime's (the
//!    vendor's "first saved SO wins" latch silently kept the first upload) and loading fails
//!    with [`LoadError::ResidentMismatch`] instead of running the wrong code.
//! 5. The init entry runs once with [`InitArgs`].
//!
//! Teardown: the per-process device directory is removed when the loader and every program it
//! loaded are dropped (the OS's session refcount); other processes' directories are never
//! touched. After a device reset ([`ProgramDevice::generation`] moves on) the loader uploads
//! again.
//!
//! # Examples
//!
//! ```
//! use ferry_abi::launch::KernelArgs;
//! use ferry_launch::loader::Loader;
//! use ferry_sim::cores::{Chip, CoreConfig};
//! use ferry_sim::{Arch, PlatformBuilder};
//!
//! let root = std::env::temp_dir().join(format!("ferry-doc-loader-{}", std::process::id()));
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(32 << 20).device_root(&root).build()?;
//! let chip = Chip::new(p.device(0)?.clone(), CoreConfig { aicpu_threads: 2, aic: 1, aiv: 2 })?;
//! let loader = Loader::new(&chip)?; // Path A
//! let program = loader.load(&ferry_programs::AICPU_DEVICE_ORCHESTRATED)?;
//! // Not a runtime image: the program's task runtime refuses it with a typed status.
//! assert!(program.exec(&KernelArgs::new(0x10, 0x20), 2).is_err());
//! let report = program.report()?;
//! assert_eq!(report.name()?, "device-orchestrated");
//! assert_eq!(report.last_exec_args(), Some(KernelArgs::new(0x10, 0x20)));
//! # drop((program, loader));
//! # let _ = std::fs::remove_dir_all(&root);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use ferry_abi::launch::{
    AbiRecord, BootstrapArgs, BootstrapBlob, InitArgs, KernelArgs, RegisterCallableArgs,
};
use ferry_abi::services::{
    inner_so_name, status_name, ProgramReport, QueryArgs, EXPORT_AICPU_EXEC, EXPORT_AICPU_INIT,
    EXPORT_AICPU_QUERY, EXPORT_AICPU_REGISTER_CALLABLE, PROGRAM_REPORT_MAGIC,
    PROGRAM_REPORT_VERSION, STATUS_ABI_SIZE_MISMATCH, STATUS_ABI_VERSION_MISMATCH,
};
use ferry_backend::{
    BackendDevice, BackendError, DevicePtr, ProgramDevice, ProgramError, ProgramLaunch,
    ProgramSymbol,
};
use ferry_programs::Program;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

mod program;
pub use program::LoadedAicpuProgram;

/// How long the loader waits for one of its own entry launches (init, register-callable,
/// query) before giving up, as the original bounds its stream synchronisation (50 s).
pub const ENTRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(50);

/// How the loader makes the AICPU program runnable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LoadMethod {
    /// Method 1: the program was installed into the preinstalled directory out of band, under
    /// [`preinstalled_name`]. Nothing is uploaded.
    Preinstalled,
    /// Method 2, Path A (default): the bootstrap dispatcher writes the program on the device.
    #[default]
    DispatcherBootstrap,
    /// Method 3, Path B: the custom scheduler saves and runs the program; its entries run on
    /// the custom scheduler's cluster (not coherent with AICore writes on the vendor device).
    CustomScheduler,
}

/// Who a program says it is (or who the loader expects it to be).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The program name.
    pub name: String,
    /// Its build id.
    pub build_id: u64,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` (build {:#018x})", self.name, self.build_id)
    }
}

/// Errors of loading a device program and of running its entries.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The image is shorter than its own headers say: a truncated shared object.
    #[error("program `{program}` is truncated: {len} bytes, its headers need {needed}")]
    Truncated {
        /// The program.
        program: String,
        /// Bytes present.
        len: usize,
        /// Bytes its headers need.
        needed: u64,
    },
    /// The image is not a loadable shared object (bad magic or headers, or the device's
    /// dynamic loader refused it).
    #[error("program `{program}` is corrupt: {reason}")]
    Corrupt {
        /// The program.
        program: String,
        /// What is wrong.
        reason: String,
    },
    /// The program does not export an entry the loader needs.
    #[error("program `{program}` does not export `{symbol}`")]
    MissingSymbol {
        /// The program.
        program: String,
        /// The missing entry.
        symbol: String,
    },
    /// A kernel library was built against another kernel ABI version
    /// (`ferry_abi::kernel_lib::KERNEL_LIB_ABI_VERSION`).
    #[error(
        "kernel library `{program}` was built against kernel abi version {found}, this ferry \
         loads version {expected}: rebuild it against this ferry's ferry-kernel-abi"
    )]
    KernelAbiVersion {
        /// The library.
        program: String,
        /// Its version.
        found: u32,
        /// This loader's.
        expected: u32,
    },
    /// Two kernels of one kernel library share a name.
    #[error("kernel library `{program}`: kernels {first} and {second} have the same name")]
    DuplicateKernel {
        /// The library.
        program: String,
        /// The first entry's index.
        first: u32,
        /// The second entry's index.
        second: u32,
    },
    /// A kernel library's descriptor or kernel table is malformed (magic, record sizes, a
    /// kernel count or an entry out of range).
    #[error("kernel library `{program}`: {error}")]
    KernelTable {
        /// The library.
        program: String,
        /// What is wrong.
        error: ferry_abi::kernel_lib::KernelTableError,
    },
    /// An entry rejected its payload as built against another ABI (size or version).
    #[error("abi mismatch at `{entry}`: {}", status_name(*status))]
    AbiMismatch {
        /// The entry.
        entry: String,
        /// The status it returned.
        status: i32,
    },
    /// The resident program is not the one this loader shipped: the vendor's "first saved SO
    /// wins" latch kept another runtime's program, which would otherwise run in its place.
    #[error(
        "resident device program is {resident}, not the shipped {shipped}: the device kept \
         another runtime's program (\"first saved SO wins\" latch); refusing to run it"
    )]
    ResidentMismatch {
        /// What the loader shipped.
        shipped: Identity,
        /// What the resident program reported.
        resident: Identity,
    },
    /// Method 1: the program is not in the preinstalled directory.
    #[error("program `{program}` is not preinstalled as {path}")]
    NotPreinstalled {
        /// The program.
        program: String,
        /// Where it was expected.
        path: std::path::PathBuf,
    },
    /// Path B was asked for on a device whose custom scheduler is not coherent.
    #[error(
        "path b (custom scheduler) refused on device {device}: its AICPU cluster is outside \
         AICore's snoop domain, so the startup handshake would spin forever on a stale L1 copy \
         of `aicore_done` (the Path B hang, docs/design/launch.md); use path a (dispatcher bootstrap)"
    )]
    PathBIncoherent {
        /// The device ordinal.
        device: u32,
    },
    /// A program of the wrong kind was handed to the loader.
    #[error("program `{program}` is a {kind}, not an AICPU program")]
    WrongKind {
        /// The program.
        program: String,
        /// Its kind.
        kind: String,
    },
    /// An entry returned a non-zero status.
    #[error("`{entry}` failed with status {status} ({})", status_name(*status))]
    Entry {
        /// The entry.
        entry: String,
        /// The status.
        status: i32,
    },
    /// The query entry wrote something that is not a program report.
    #[error("program `{program}` wrote a malformed report")]
    BadReport {
        /// The program.
        program: String,
    },
    /// A callable id or name that does not fit [`RegisterCallableArgs`].
    #[error("bad callable: {0}")]
    BadCallable(#[from] ferry_abi::launch::EncodeError),
    /// The device's program loader failed otherwise (its session, a file it could not save,
    /// a launch it refused, a wait that ran out); the backend's error is the source.
    #[error(transparent)]
    Program(#[from] ProgramError),
    /// A device operation (allocation, copy) failed.
    #[error(transparent)]
    Device(#[from] BackendError),
}

/// The bytes of a program and who it should be.
#[derive(Clone, Copy, Debug)]
pub struct ProgramImage<'a> {
    /// The name the program must report.
    pub name: &'a str,
    /// The build id the program must report.
    pub build_id: u64,
    /// The shared object.
    pub bytes: &'a [u8],
}

impl<'a> From<&'a Program> for ProgramImage<'a> {
    fn from(p: &'a Program) -> Self {
        ProgramImage { name: p.name, build_id: p.build_id, bytes: p.bytes }
    }
}

/// Builds a [`Loader`].
#[derive(Clone, Debug)]
pub struct LoaderBuilder<P: ProgramDevice> {
    programs: P,
    method: LoadMethod,
    init: Option<InitArgs>,
    dispatcher: &'static Program,
    refuse_incoherent: bool,
}

impl<P: ProgramDevice> LoaderBuilder<P> {
    /// A Path A loader for the device `programs` loads onto, with the embedded dispatcher.
    pub fn new(programs: &P) -> Self {
        Self {
            programs: programs.clone(),
            method: LoadMethod::default(),
            init: None,
            dispatcher: &ferry_programs::DISPATCHER,
            refuse_incoherent: false,
        }
    }

    /// Preflight for Path B (default off): refuse it with [`LoadError::PathBIncoherent`] on a
    /// device whose custom-scheduler cluster does not see AICore writes and has neither fix B
    /// nor C, instead of letting the first run's handshake time out.
    pub fn refuse_incoherent_path_b(&mut self, on: bool) -> &mut Self {
        self.refuse_incoherent = on;
        self
    }

    /// The load method.
    pub fn method(&mut self, method: LoadMethod) -> &mut Self {
        self.method = method;
        self
    }

    /// The [`InitArgs`] each loaded program is initialised with (default: this device's id).
    pub fn init_args(&mut self, init: InitArgs) -> &mut Self {
        self.init = Some(init);
        self
    }

    /// The dispatcher to bootstrap with (default: the embedded one).
    pub fn dispatcher(&mut self, dispatcher: &'static Program) -> &mut Self {
        self.dispatcher = dispatcher;
        self
    }

    /// Opens the device session and checks the method against the device's capabilities.
    ///
    /// # Errors
    /// [`LoadError::PathBIncoherent`] for Path B on an incoherent device when the preflight is
    /// on ([`refuse_incoherent_path_b`](Self::refuse_incoherent_path_b));
    /// [`LoadError::Program`] when the device cannot open the session.
    pub fn build(&mut self) -> Result<Loader<P>, LoadError> {
        let ordinal = self.programs.device().ordinal();
        if self.refuse_incoherent
            && self.method == LoadMethod::CustomScheduler
            && !self.programs.custom_scheduler_coherent()
        {
            return Err(LoadError::PathBIncoherent { device: ordinal });
        }
        let session = Arc::new(self.programs.open_session()?);
        Ok(Loader {
            programs: self.programs.clone(),
            session,
            method: self.method,
            init: self.init.unwrap_or(InitArgs::new(ordinal)),
            dispatcher: self.dispatcher,
            bootstrapped: Mutex::new(HashSet::new()),
        })
    }
}

/// Loads AICPU programs onto one device. See the module docs.
#[derive(Debug)]
pub struct Loader<P: ProgramDevice> {
    programs: P,
    /// The process's session on the device's loader, shared with every program.
    session: Arc<P::Session>,
    method: LoadMethod,
    init: InitArgs,
    dispatcher: &'static Program,
    /// (fingerprint, FNV-1a of the whole image, OS generation) of the images this loader
    /// bootstrapped *and verified*. The content hash matters: a build-id fingerprint survives
    /// a corrupted byte, and a failed image must not make the good one skip its upload.
    bootstrapped: Mutex<HashSet<(u64, u64, u64)>>,
}

impl<P: ProgramDevice> Loader<P> {
    /// A Path A loader with the defaults ([`LoaderBuilder::new`] then `build`).
    ///
    /// # Errors
    /// As [`LoaderBuilder::build`].
    pub fn new(programs: &P) -> Result<Loader<P>, LoadError> {
        LoaderBuilder::new(programs).build()
    }

    /// The load method.
    pub fn method(&self) -> LoadMethod {
        self.method
    }

    /// The device's program loader.
    pub fn programs(&self) -> &P {
        &self.programs
    }
}

/// The name Method 1 expects a program under in the preinstalled directory.
pub fn preinstalled_name(program_name: &str) -> String {
    format!("libferry_aicpu_{program_name}.so")
}

impl<P: ProgramDevice> Loader<P> {
    /// Loads an embedded AICPU program, verifies its identity and runs its init entry.
    ///
    /// # Errors
    /// [`LoadError::WrongKind`] for a program that is not an AICPU program; otherwise as
    /// [`load_image`](Self::load_image).
    pub fn load(&self, program: &'static Program) -> Result<LoadedAicpuProgram<P>, LoadError> {
        if program.kind != ferry_programs::ProgramKind::Aicpu {
            return Err(LoadError::WrongKind {
                program: program.name.into(),
                kind: format!("{:?}", program.kind),
            });
        }
        self.load_image(program.into())
    }

    /// Loads any image as an AICPU program (the path bad inputs take).
    ///
    /// # Errors
    /// [`LoadError::Truncated`], [`LoadError::Corrupt`], [`LoadError::MissingSymbol`],
    /// [`LoadError::ResidentMismatch`], [`LoadError::AbiMismatch`],
    /// [`LoadError::NotPreinstalled`], or a device/OS failure. After any of them the loader and
    /// the device stay usable.
    pub fn load_image(&self, image: ProgramImage<'_>) -> Result<LoadedAicpuProgram<P>, LoadError> {
        let fp = ferry_abi::services::fingerprint(image.bytes);
        let dev = u64::from(self.programs.device().ordinal());
        let generation = self.programs.generation();
        let (basename, custom_scheduler) = match self.method {
            LoadMethod::Preinstalled => {
                let name = preinstalled_name(image.name);
                let found = self.programs.preinstalled(&name);
                if !found.present {
                    let path = found.path;
                    return Err(LoadError::NotPreinstalled { program: image.name.into(), path });
                }
                (name, false)
            }
            LoadMethod::DispatcherBootstrap => {
                validate_elf(image.name, image.bytes)?;
                self.bootstrap(image, fp, generation)?;
                let mut buf = [0u8; 48];
                let name = inner_so_name(fp, dev, &mut buf).unwrap_or_default().to_owned();
                (name, false)
            }
            LoadMethod::CustomScheduler => {
                validate_elf(image.name, image.bytes)?;
                let mut buf = [0u8; 48];
                let name = inner_so_name(fp, dev, &mut buf).unwrap_or_default().to_owned();
                self.programs
                    .save_custom(&name, image.bytes)
                    .map_err(|e| classify(image.name, e))?;
                (name, true)
            }
        };
        let exports = [
            EXPORT_AICPU_INIT,
            EXPORT_AICPU_REGISTER_CALLABLE,
            EXPORT_AICPU_EXEC,
            EXPORT_AICPU_QUERY,
        ];
        let op_types = exports.map(|s| format!("{s}_{fp:016x}"));
        let symbols: Vec<ProgramSymbol<'_>> = exports
            .iter()
            .zip(&op_types)
            .map(|(symbol, op_type)| ProgramSymbol {
                op_type,
                symbol,
                object: &basename,
                custom_scheduler,
            })
            .collect();
        let resolved = self.programs.resolve(&symbols).map_err(|e| classify(image.name, e))?;
        let Ok([init, register, exec, query]) = <[P::Function; 4]>::try_from(resolved) else {
            return Err(LoadError::Corrupt {
                program: image.name.into(),
                reason: "the device resolved another number of entries than asked".into(),
            });
        };
        let program = LoadedAicpuProgram {
            programs: self.programs.clone(),
            _session: self.session.clone(),
            shipped: Identity { name: image.name.into(), build_id: image.build_id },
            fingerprint: fp,
            init,
            register,
            exec,
            query,
        };
        let report = program.report()?;
        let resident = Identity {
            name: report.name().unwrap_or("<unreadable>").into(),
            build_id: report.build_id,
        };
        if resident != program.shipped {
            tracing::error!(%resident, shipped = %program.shipped, "resident device program mismatch");
            return Err(LoadError::ResidentMismatch { shipped: program.shipped.clone(), resident });
        }
        if report.kernel_args_size as usize != KernelArgs::SIZE {
            return Err(LoadError::AbiMismatch {
                entry: EXPORT_AICPU_QUERY.into(),
                status: STATUS_ABI_SIZE_MISMATCH,
            });
        }
        program.init(&self.init)?;
        if self.method == LoadMethod::DispatcherBootstrap {
            let key = (fp, ferry_abi::services::fnv1a_64(image.bytes), generation);
            lock(&self.bootstrapped).insert(key);
        }
        Ok(program)
    }

    /// Path A, host side: uploads and launches the dispatcher bootstrap for `image` unless this
    /// loader did so since the device's last reset.
    fn bootstrap(
        &self,
        image: ProgramImage<'_>,
        fp: u64,
        generation: u64,
    ) -> Result<(), LoadError> {
        let key = (fp, ferry_abi::services::fnv1a_64(image.bytes), generation);
        if lock(&self.bootstrapped).contains(&key) {
            return Ok(());
        }
        let device = self.programs.device();
        let mut bufs = DeviceBuffers { device: device.clone(), ptrs: Vec::new() };
        let disp = bufs.upload(self.dispatcher.bytes)?;
        let inner = bufs.upload(image.bytes)?;
        let mut dargs = BootstrapArgs::zeroed();
        dargs.aicpu_so_bin = disp.0;
        dargs.aicpu_so_len = self.dispatcher.bytes.len() as u64;
        dargs.device_id = u64::from(device.ordinal());
        dargs.inner_so_bin = inner.0;
        dargs.inner_so_len = image.bytes.len() as u64;
        let dargs_ptr = bufs.upload(dargs.as_bytes())?;
        let blob = BootstrapBlob::new(dargs_ptr.0);
        self.programs.launch_bootstrap(blob.as_bytes()).map_err(|e| classify(image.name, e))
    }

    /// Loads the AICore kernel library (`rtRegisterAllKernel`).
    ///
    /// # Errors
    /// [`LoadError::Truncated`] / [`LoadError::Corrupt`] for a bad image,
    /// [`LoadError::MissingSymbol`] when it has no lookup export.
    pub fn load_kernel_library(&self, program: &Program) -> Result<P::KernelLibrary, LoadError> {
        validate_elf(program.name, program.bytes)?;
        self.programs.load_kernel_library(program.bytes).map_err(|e| classify(program.name, e))
    }

    /// Loads a custom kernel library (a user's cdylib built against `ferry-kernel-abi`) for the
    /// AICore workers, the way [`load_kernel_library`](Self::load_kernel_library) loads the
    /// built-in one: the image is checked as an ELF shared object first, then the AICPU OS
    /// saves, loads and checks its descriptor and kernel table
    /// ([`ProgramDevice::load_custom_kernels`]).
    ///
    /// # Errors
    /// [`LoadError::Truncated`] / [`LoadError::Corrupt`] for a bad image,
    /// [`LoadError::MissingSymbol`] without the descriptor export,
    /// [`LoadError::KernelAbiVersion`], [`LoadError::DuplicateKernel`],
    /// [`LoadError::KernelTable`].
    pub fn load_custom_kernels(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Result<P::CustomKernels, LoadError> {
        load_custom_kernels(&self.programs, name, bytes)
    }

    /// Ends this loader's session (same as dropping it). The per-process device directory is
    /// removed once no loader or program of this process uses it.
    pub fn teardown(self) {}
}

/// Device buffers the bootstrap allocated; freed on every path (the host allocated them).
struct DeviceBuffers<D: BackendDevice> {
    device: D,
    ptrs: Vec<DevicePtr>,
}

impl<D: BackendDevice> DeviceBuffers<D> {
    fn upload(&mut self, bytes: &[u8]) -> Result<DevicePtr, LoadError> {
        let p = self.device.malloc(bytes.len().max(1) as u64)?;
        self.ptrs.push(p);
        self.device.copy_htod(bytes, p)?;
        Ok(p)
    }
}

impl<D: BackendDevice> Drop for DeviceBuffers<D> {
    fn drop(&mut self) {
        for p in self.ptrs.drain(..) {
            if let Err(e) = self.device.free(p) {
                tracing::warn!(error = %e, "freeing a bootstrap buffer");
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// [`Loader::load_custom_kernels`] without a loader (the in-process runner path).
///
/// # Errors
/// As [`Loader::load_custom_kernels`].
pub fn load_custom_kernels<P: ProgramDevice>(
    programs: &P,
    name: &str,
    bytes: &[u8],
) -> Result<P::CustomKernels, LoadError> {
    validate_elf(name, bytes)?;
    programs.load_custom_kernels(bytes).map_err(|e| classify(name, e))
}

/// What a failure of the device's program loader means for `program`: the loader's typed
/// refusals by what the device reported, the rest kept as [`LoadError::Program`].
fn classify(program: &str, e: ProgramError) -> LoadError {
    use ferry_abi::kernel_lib::KernelTableError as T;
    match e {
        ProgramError::Refused { reason, .. } => {
            LoadError::Corrupt { program: program.into(), reason }
        }
        ProgramError::MissingSymbol { symbol, .. } => {
            LoadError::MissingSymbol { program: program.into(), symbol }
        }
        ProgramError::KernelTable { error: T::AbiVersion { found, expected }, .. } => {
            LoadError::KernelAbiVersion { program: program.into(), found, expected }
        }
        ProgramError::KernelTable { error: T::DuplicateName { first, second }, .. } => {
            LoadError::DuplicateKernel { program: program.into(), first, second }
        }
        ProgramError::KernelTable { error, .. } => {
            LoadError::KernelTable { program: program.into(), error }
        }
        ProgramError::Entry { symbol, status }
            if status == STATUS_ABI_SIZE_MISMATCH || status == STATUS_ABI_VERSION_MISMATCH =>
        {
            LoadError::AbiMismatch { entry: symbol, status }
        }
        ProgramError::Entry { symbol, status } => LoadError::Entry { entry: symbol, status },
        e => LoadError::Program(e),
    }
}

/// Checks that `bytes` is a little-endian ELF64 shared object whose headers and segments lie
/// inside the buffer, before anything is uploaded.
///
/// # Errors
/// [`LoadError::Truncated`] when a header or segment extends past the end;
/// [`LoadError::Corrupt`] for anything else that is not such an object.
pub fn validate_elf(program: &str, b: &[u8]) -> Result<(), LoadError> {
    let corrupt =
        |reason: &str| LoadError::Corrupt { program: program.into(), reason: reason.into() };
    let truncated =
        |needed: u64| LoadError::Truncated { program: program.into(), len: b.len(), needed };
    if b.len() >= 4 && &b[..4] != b"\x7fELF" {
        return Err(corrupt("not an ELF file (bad magic)"));
    }
    if b.len() < 64 {
        return Err(truncated(64));
    }
    if b[4] != 2 || b[5] != 1 {
        return Err(corrupt("not a little-endian ELF64 object"));
    }
    let u16_at = |o: usize| u64::from(u16::from_le_bytes([b[o], b[o + 1]]));
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    if u16_at(16) != 3 {
        return Err(corrupt("not a shared object (e_type is not ET_DYN)"));
    }
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    let (shoff, shentsize, shnum) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c));
    if phnum == 0 || phentsize < 56 {
        return Err(corrupt("no program headers"));
    }
    let len = b.len() as u64;
    let end = |off: u64, n: u64, size: u64| off.checked_add(n.checked_mul(size)?);
    let ph_end = end(phoff, phnum, phentsize).ok_or_else(|| corrupt("program headers overflow"))?;
    if ph_end > len {
        return Err(truncated(ph_end));
    }
    if shnum > 0 {
        let sh_end =
            end(shoff, shnum, shentsize).ok_or_else(|| corrupt("section headers overflow"))?;
        if sh_end > len {
            return Err(truncated(sh_end));
        }
    }
    for i in 0..phnum {
        let ph = (phoff + i * phentsize) as usize;
        let (off, filesz) = (u64_at(ph + 8), u64_at(ph + 32));
        let seg_end = off.checked_add(filesz).ok_or_else(|| corrupt("segment overflows"))?;
        if seg_end > len {
            return Err(truncated(seg_end));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
