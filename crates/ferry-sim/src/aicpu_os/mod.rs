//! The AICPU OS: the device-side loader the bootstrap dispatcher runs in (docs/design/launch.md).
//!
//! On hardware, the AICPU cores run an OS process (CANN's `aicpu_scheduler`) that loads shared
//! objects from root-owned directories and runs their entries. This module is that process for
//! the simulated chip. Device programs are *real* shared objects (built from `device/`): the OS
//! writes their bytes to files under the device root, loads them with the platform's dynamic
//! loader (`libloading`, `RTLD_NOW | RTLD_LOCAL`), injects the [`DeviceServices`] table, and runs
//! their entries on the chip's AICPU threads.
//!
//! | operation | hardware equivalent |
//! |---|---|
//! | [`AicpuOs::launch_kfc`] | `rtAicpuKernelLaunchExWithArgs(KERNEL_TYPE_AICPU_KFC, …)`: `libaicpu_extend_kernels` saves and loads the dispatcher from the bytes in `BootstrapArgs` and calls its init export |
//! | `SaveSoFile` (a service) | the OS library writing the inner program into the per-process directory (temp file + rename), with the optional "first saved SO wins" latch |
//! | [`AicpuOs::binary_load`] → [`Binary::function`] → [`AicpuOs::launch_cpu_kernel`] | `rtsBinaryLoadFromFile` → `rtsFuncGetByName` → `rtsLaunchCpuKernel` |
//! | [`AicpuOs::install_preinstalled`] | Method 1: an operator unpacking a tarball into the root-owned preinstall directory |
//! | [`AicpuOs::upload_custom`] | Method 3 (Path B): the custom scheduler saving a program under `cust_aicpu_<dev>_<vf>_<pid>/` |
//! | [`AicpuOs::open_session`] / drop of [`OsSession`] | CANN's TSD creating / removing the process directory |
//! | [`AicpuOs::reset`] | a device reset: the OS forgets every loaded program and file |
//!
//! # Directory layout under the device root
//!
//! ```text
//! <root>/<vf>/aicpu_kernels/                          Method 1 (preinstalled; never written by ferry)
//! <root>/<vf>/aicpu_kernels_device/<pid>_<dev>/       Path A: dispatcher, inner programs, orch objects
//! <root>/cust_aicpu_<dev>_<vf>_<pid>/                 Path B: custom-scheduler programs
//! ```
//!
//! Every file the OS writes is a plain basename inside one of these directories; names with a
//! path separator, `..` or a NUL are refused, so nothing is written outside the device root.
//! The per-process directories are removed when the last [`OsSession`] of this process on that
//! directory ends; other processes' directories are never touched.
//!
//! # Capabilities
//!
//! [`OsCaps`] come from the device's [`DeviceProfile`] and [`PathBFixes`] ([`crate::profile`]).
//! `custom_scheduler_coherent` is `false` in the vendor profile (the default), as on the hardware
//! docs/design/launch.md describes (the Path B hang): the custom scheduler's worker threads sit on the OS cluster,
//! outside AICore's snoop domain, and read device memory through a line cache that AICore writes
//! do not invalidate ([`crate::cache`]); a startup handshake polled through it never sees
//! `aicore_done`. Launches of entries the custom scheduler resolved run with that reach; every
//! other launch runs on the main cluster, coherent. `first_saved_so_wins` (the Path A latch) is
//! on in the vendor profile.
//!
//! # Safety
//!
//! Loading a shared object runs its initialisers, and calling an entry runs foreign code: the
//! OS only loads the bytes the host loader asked it to load, and every entry is called through
//! the signature the device-program contract ([`ferry_abi::services`]) fixes.
//!
//! # Examples
//!
//! ```
//! use ferry_sim::{Arch, PlatformBuilder};
//! let root = std::env::temp_dir().join(format!("ferry-doc-aicpu-os-{}", std::process::id()));
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 24).device_root(&root).build()?;
//! let os = p.device(0)?.aicpu_os();
//! assert!(!os.caps().custom_scheduler_coherent);
//! assert!(os.caps().first_saved_so_wins, "the vendor profile has the Path A latch");
//! {
//!     let _session = os.open_session().unwrap();
//!     assert!(os.process_dir().is_dir());
//! }
//! assert!(!os.process_dir().exists()); // removed with the last session
//! # let _ = std::fs::remove_dir_all(&root);
//! # Ok::<(), ferry_sim::DeviceError>(())
//! ```
use crate::cache::{CacheCounters, CacheStats, Cluster, Reach, ReachGuard};
use crate::cores::{AicpuCtx, Chip, Completion, REG_WINDOW_BYTES};
use crate::device::{Device, DeviceInner};
use crate::error::DeviceError;
use crate::memory::DevicePtr;
use crate::profile::{DeviceProfile, PathBFixes};
use crate::sync::{lock, Arc, Mutex, Ordering};
use ferry_abi::launch::{
    AbiRecord, BootstrapArgs, BootstrapBlob, DecodeError, BOOTSTRAP_KERNEL_NAME, BOOTSTRAP_SO_NAME,
    DISPATCHER_EXPORT_INIT, DISPATCHER_EXPORT_RUN, DISPATCHER_EXPORT_STATIC,
};
use ferry_abi::services::{
    fingerprint, status_name, AicpuKernelCall, CondFn, CpuKernelFn, DeviceServices, KernelFn,
    RegPredFn, SetServicesFn, EXPORT_KERNEL_LOOKUP, EXPORT_SET_SERVICES, SERVICES_ABI_VERSION,
    STATUS_BAD_ADDRESS, STATUS_BAD_NAME, STATUS_INVALID_ARGUMENT, STATUS_IO, STATUS_OK,
    STATUS_PANIC, WAIT_FOREVER, WAIT_SATISFIED,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64};
use std::sync::{OnceLock, Weak};
use std::time::Duration;

mod launch;
mod programs;
mod services;
pub use launch::{Binary, CpuFunction, CpuLaunch, Kernel, KernelLibrary, OpEntry};
use services::{
    svc_aicpu_wait, svc_cache_op, svc_clock_hz, svc_close_object, svc_core_wait, svc_load_object,
    svc_log, svc_mem_load, svc_mem_store, svc_notify_aicpu, svc_notify_host, svc_now_cycles,
    svc_object_symbol, svc_reg_read, svc_reg_write_aicpu, svc_reg_write_core, svc_save_so_file,
    svc_thread_info, svc_translate,
};
use services::{window_of, with_chip, TlGuard};

/// Configuration of a device's AICPU OS (set through the `PlatformBuilder` knobs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OsConfig {
    /// The device root: everything the OS writes lives below it (default
    /// [`crate::device_root::user_root`]); made private to the user (mode 0700, this user's) when
    /// a session opens.
    pub root: PathBuf,
    /// The virtual-function index in the directory layout.
    pub vf: u32,
    /// The profile the device was built from ([`crate::profile`]; the two flags below start
    /// from it).
    pub profile: DeviceProfile,
    /// The vendor's one-shot "first saved SO wins" latch: after the first `SaveSoFile`, every
    /// later one returns success without writing (on in the vendor profile, the default). It
    /// lives in this device's OS, as the vendor's lives in the AICPU OS process serving one host
    /// process on one device.
    pub first_saved_so_wins: bool,
    /// Whether the custom-scheduler (Path B) cluster is coherent with AICore writes (off in the
    /// vendor profile: the Path B stale-L1 handshake hang; fix C turns it on).
    pub custom_scheduler_coherent: bool,
    /// Fixes A and B of docs/design/launch.md (fix C is `custom_scheduler_coherent`).
    pub fixes: PathBFixes,
    /// How long an AICore kernel takes to start on its cores after its launch is accepted
    /// (default 0). On hardware it is tens of microseconds, during which an AICPU kernel
    /// launched with it is already polling; a test sets it to order the two deterministically.
    pub aicore_launch_latency: Duration,
    /// When non-zero, an AICore kernel starts on its cores only once the cached AICPU threads
    /// of the launch now running have filled this many lines
    /// ([`AicpuOs::launch_line_fills`]): with the Path B cluster cached, the schedulers' first
    /// handshake sweep has then read that many slot lines.
    /// Orders the sweep before the cores' reports by state, not by a timer, however the host
    /// schedules the threads (default 0: no such wait).
    pub aicore_start_after_line_fills: u64,
}

impl Default for OsConfig {
    fn default() -> Self {
        let profile = DeviceProfile::default();
        Self {
            root: crate::device_root::user_root(),
            vf: 0,
            profile,
            first_saved_so_wins: profile.first_saved_so_wins(),
            custom_scheduler_coherent: profile.custom_scheduler_coherent(),
            fixes: PathBFixes::NONE,
            aicore_launch_latency: Duration::ZERO,
            aicore_start_after_line_fills: 0,
        }
    }
}

/// What the device's OS can do, as data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OsCaps {
    /// The profile the device was built from.
    pub profile: DeviceProfile,
    /// The custom-scheduler (Path B) cluster sees AICore's handshake writes (the relaxed
    /// profile, or fix C).
    pub custom_scheduler_coherent: bool,
    /// The "first saved SO wins" latch is active.
    pub first_saved_so_wins: bool,
    /// Fix A: EL0 cache maintenance is enabled on the custom-scheduler cluster.
    pub el0_cache_maintenance: bool,
    /// Fix B: the custom scheduler's context maps device memory non-cacheable.
    pub noncacheable_handshake: bool,
}

impl OsCaps {
    /// How the custom scheduler's (Path B) threads reach device memory.
    pub fn custom_reach(&self) -> Reach {
        if self.custom_scheduler_coherent {
            Reach::Coherent
        } else if self.noncacheable_handshake {
            Reach::Uncached
        } else {
            Reach::Cached { el0_maintenance: self.el0_cache_maintenance }
        }
    }
}

/// Errors of the AICPU OS.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OsError {
    /// A device operation (memory, launch) failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A launch payload could not be decoded.
    #[error("bad launch payload: {0}")]
    Payload(#[from] DecodeError),
    /// The bootstrap blob names another kernel or object than the dispatcher bootstrap.
    #[error("bootstrap blob names `{kernel}` in `{object}`, expected `{BOOTSTRAP_KERNEL_NAME}` in `{BOOTSTRAP_SO_NAME}`")]
    NotBootstrap {
        /// The kernel name in the blob.
        kernel: String,
        /// The object name in the blob.
        object: String,
    },
    /// A file name was not a plain basename (separator, `..`, NUL, empty).
    #[error("`{name}` is not a plain file name inside the device directory")]
    BadName {
        /// The offending name.
        name: String,
    },
    /// Writing or removing a file under the device root failed.
    #[error("device file i/o on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// No file of that name in any directory the lookup searches.
    #[error("no program `{basename}` in {searched:?}")]
    NotFound {
        /// The basename looked for.
        basename: String,
        /// The directories searched.
        searched: Vec<PathBuf>,
    },
    /// A kernel library's descriptor or kernel table was refused
    /// ([`crate::custom_kernels`]).
    #[error("kernel library {object}: {error}")]
    BadKernelTable {
        /// The object's file name.
        object: String,
        /// What was wrong.
        error: ferry_abi::kernel_lib::KernelTableError,
    },
    /// An orchestration library's descriptor or function table was refused
    /// ([`crate::orch_libraries`]).
    #[error("orchestration library {object}: {error}")]
    BadOrchTable {
        /// The object's file name.
        object: String,
        /// What was wrong.
        error: ferry_abi::orch_lib::OrchTableError,
    },
    /// The dynamic loader refused the file (corrupt or truncated object).
    #[error("cannot load {path}: {reason}")]
    LoadFailed {
        /// The file.
        path: PathBuf,
        /// The loader's message.
        reason: String,
    },
    /// A loaded object does not export a symbol.
    #[error("{object} does not export `{symbol}`")]
    MissingSymbol {
        /// The object's file name.
        object: String,
        /// The symbol.
        symbol: String,
    },
    /// The binary has no function registered under this op type.
    #[error("no function registered as `{op_type}`")]
    UnknownFunction {
        /// The op type asked for.
        op_type: String,
    },
    /// An entry returned a non-zero status.
    #[error("entry `{symbol}` returned {code} ({})", status_name(*code))]
    Entry {
        /// The entry's symbol.
        symbol: String,
        /// The status it returned.
        code: i32,
    },
}

/// A file the OS loaded with the dynamic loader. Unloaded when the last reference drops.
#[derive(Debug)]
pub struct LoadedObject {
    path: PathBuf,
    fingerprint: u64,
    lib: libloading::Library,
}

impl LoadedObject {
    /// The file it was loaded from (it may since have been removed).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fingerprint of the file's bytes at load time.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    pub(crate) fn symbol(&self, name: &str) -> Option<*const c_void> {
        // SAFETY: the symbol is only read as an address here; callers transmute it to the
        // signature the device-program contract fixes for that name.
        let sym = unsafe { self.lib.get::<*const c_void>(name.as_bytes()) }.ok()?;
        let p = *sym;
        (!p.is_null()).then_some(p)
    }

    pub(crate) fn file_name(&self) -> String {
        self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }
}

/// Counters of one device's OS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OsStats {
    /// Dispatcher bootstraps run (`launch_kfc`).
    pub kfc_launches: u64,
    /// `SaveSoFile` calls that wrote a file.
    pub so_saves: u64,
    /// `SaveSoFile` calls the latch turned into silent no-ops.
    pub so_save_noops: u64,
    /// Objects loaded with the dynamic loader (cache misses).
    pub object_loads: u64,
    /// `binary_load` calls.
    pub binary_loads: u64,
    /// CPU-kernel launches.
    pub cpu_launches: u64,
    /// Device resets.
    pub resets: u64,
}

#[derive(Debug, Default)]
struct OsMut {
    generation: u64,
    /// The first saved SO (the latch's resident program), when the quirk is on.
    latched: Option<PathBuf>,
    /// Programs loaded from files, by path.
    objects: HashMap<PathBuf, Arc<LoadedObject>>,
    /// Objects loaded through the `load_object` service, by handle.
    handles: HashMap<u64, Arc<LoadedObject>>,
    next_handle: u64,
    stats: OsStats,
}

/// The per-device OS state, owned by the device.
pub(crate) struct OsState {
    config: OsConfig,
    ordinal: u32,
    // Declared before `services`: loaded objects are unloaded before the table they were given.
    state: Mutex<OsMut>,
    /// Chips attached by host loaders: the services find a register window by address in them.
    chips: Mutex<Vec<(u64, Chip)>>,
    /// Host callbacks the services' `notify_host` rings, by key (a DFX region's device address).
    host_bells: Mutex<HashMap<u64, HostBell>>,
    /// `notify_host` calls, rung or not (a device-to-host signal that real DFX hardware lacks:
    /// the default DFX path must make none).
    host_notifies: std::sync::atomic::AtomicU64,
    /// The cache model's counters ([`crate::cache`]).
    cache: CacheCounters,
    services: OnceLock<ServicesBox>,
}

/// A host callback the device rings through the services' `notify_host` (argument: the queue):
/// the seam's host bell.
pub use ferry_backend::HostBell;

/// Keeps a host callback registered with [`AicpuOs::register_host_bell`]; unregisters it on drop.
pub struct HostBellGuard {
    device: Device,
    key: u64,
}

impl std::fmt::Debug for HostBellGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBellGuard").field("key", &self.key).finish_non_exhaustive()
    }
}

impl Drop for HostBellGuard {
    fn drop(&mut self) {
        lock(&self.device.0.aicpu_os.host_bells).remove(&self.key);
    }
}

impl std::fmt::Debug for OsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OsState").field("config", &self.config).finish_non_exhaustive()
    }
}

impl OsState {
    pub(crate) fn new(config: OsConfig, ordinal: u32) -> Self {
        Self {
            config,
            ordinal,
            state: Mutex::new(OsMut::default()),
            chips: Mutex::new(Vec::new()),
            host_bells: Mutex::new(HashMap::new()),
            host_notifies: std::sync::atomic::AtomicU64::new(0),
            cache: CacheCounters::default(),
            services: OnceLock::new(),
        }
    }

    pub(crate) fn cache_counters(&self) -> &CacheCounters {
        &self.cache
    }
}

/// The services table and the context it points at, at stable heap addresses.
struct ServicesBox {
    // Kept alive for the table's `ctx`.
    _ctx: Box<ServicesCtx>,
    table: Box<DeviceServices>,
}

struct ServicesCtx {
    device: Weak<DeviceInner>,
    /// The device's clock, read without touching the device handle (every DFX timestamp and
    /// timed wait reads it; the device's reference count is shared by every core thread).
    clock: crate::clock::DeviceClock,
}

/// A handle on a device's AICPU OS. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AicpuOs {
    device: Device,
}

/// Keeps this process's device directories alive; the last session on a directory removes it.
#[derive(Debug)]
pub struct OsSession {
    dirs: Vec<PathBuf>,
}

fn sessions() -> &'static std::sync::Mutex<HashMap<PathBuf, usize>> {
    static SESSIONS: OnceLock<std::sync::Mutex<HashMap<PathBuf, usize>>> = OnceLock::new();
    SESSIONS.get_or_init(Default::default)
}

impl Drop for OsSession {
    fn drop(&mut self) {
        let mut map = lock(sessions());
        for d in &self.dirs {
            if let Some(n) = map.get_mut(d) {
                *n -= 1;
                if *n == 0 {
                    map.remove(d);
                    if let Err(e) = std::fs::remove_dir_all(d) {
                        if e.kind() != std::io::ErrorKind::NotFound {
                            tracing::warn!(dir = %d.display(), error = %e, "removing device process directory");
                        }
                    }
                }
            }
        }
    }
}

/// Keeps a chip attached to its device's OS, so that the services reach its register windows
/// from any thread (AICore workers included). Dropping it detaches the chip.
#[derive(Debug)]
pub struct ChipAttachment {
    os: AicpuOs,
    id: u64,
}

impl Drop for ChipAttachment {
    fn drop(&mut self) {
        lock(&self.os.os().chips).retain(|(id, _)| *id != self.id);
    }
}

impl AicpuOs {
    pub(crate) fn new(device: Device) -> Self {
        Self { device }
    }

    fn os(&self) -> &OsState {
        &self.device.0.aicpu_os
    }

    /// The OS configuration.
    pub fn config(&self) -> &OsConfig {
        &self.os().config
    }

    /// The OS capabilities.
    pub fn caps(&self) -> OsCaps {
        let c = self.config();
        OsCaps {
            profile: c.profile,
            custom_scheduler_coherent: c.custom_scheduler_coherent,
            first_saved_so_wins: c.first_saved_so_wins,
            el0_cache_maintenance: c.fixes.el0_cache_maintenance,
            noncacheable_handshake: c.fixes.noncacheable_handshake,
        }
    }

    /// The cache model's work on this device ([`crate::cache`]); idle unless a thread ran on a
    /// cluster outside AICore's snoop domain (or through fix B's non-cacheable mapping).
    pub fn cache_stats(&self) -> CacheStats {
        self.os().cache.snapshot()
    }

    /// Lines the cached AICPU threads of the launch now running have filled (0 while no
    /// cached launch runs): what [`OsConfig::aicore_start_after_line_fills`] waits for.
    pub fn launch_line_fills(&self) -> u64 {
        self.os().cache.launch_fills()
    }

    /// How a launch on `cluster` reaches device memory on this device.
    pub fn reach(&self, cluster: Cluster) -> Reach {
        match cluster {
            Cluster::Main => Reach::Coherent,
            Cluster::Custom => self.caps().custom_reach(),
        }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// `<root>/<vf>/aicpu_kernels_device/<hostPid>_<localDeviceId>`: this process's directory.
    pub fn process_dir(&self) -> PathBuf {
        let c = self.config();
        c.root.join(c.vf.to_string()).join("aicpu_kernels_device").join(format!(
            "{}_{}",
            std::process::id(),
            self.os().ordinal
        ))
    }

    /// `<root>/<vf>/aicpu_kernels`: the preinstalled (Method 1) directory.
    pub fn preinstalled_dir(&self) -> PathBuf {
        let c = self.config();
        c.root.join(c.vf.to_string()).join("aicpu_kernels")
    }

    /// `<root>/cust_aicpu_<dev>_<vf>_<pid>`: the custom scheduler's (Path B) directory.
    pub fn custom_dir(&self) -> PathBuf {
        let c = self.config();
        c.root.join(format!("cust_aicpu_{}_{}_{}", self.os().ordinal, c.vf, std::process::id()))
    }

    /// Counters.
    pub fn stats(&self) -> OsStats {
        lock(&self.os().state).stats
    }

    /// How many resets the OS has seen; a loader's upload cache is valid for one generation.
    pub fn generation(&self) -> u64 {
        lock(&self.os().state).generation
    }

    /// Device-to-host notifications (`notify_host` calls, with or without a bell under their
    /// key) since the device was made: a statistic for tests that a path polls instead.
    pub fn host_notifications(&self) -> u64 {
        // Relaxed: a statistic.
        self.os().host_notifies.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Registers `bell` under `key` (by convention a DFX transport region's device address):
    /// a loaded program's `notify_host(key, queue)` calls it with the queue. Replaces an earlier
    /// bell under the same key; the guard unregisters it.
    pub fn register_host_bell(&self, key: u64, bell: HostBell) -> HostBellGuard {
        lock(&self.os().host_bells).insert(key, bell);
        HostBellGuard { device: self.device.clone(), key }
    }

    /// Rings the host bell registered under `key`, if any.
    pub fn ring_host(&self, key: u64, queue: u32) {
        // Relaxed: a statistic.
        self.os().host_notifies.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let bell = lock(&self.os().host_bells).get(&key).cloned();
        if let Some(b) = bell {
            b(queue);
        }
    }

    /// The services table handed to every program this OS loads.
    pub fn services(&self) -> *const DeviceServices {
        let b = self.os().services.get_or_init(|| {
            let ctx = Box::new(ServicesCtx {
                device: Arc::downgrade(&self.device.0),
                clock: self.device.clock().clone(),
            });
            let table = Box::new(DeviceServices {
                abi_version: SERVICES_ABI_VERSION,
                size: std::mem::size_of::<DeviceServices>() as u32,
                ctx: (&*ctx as *const ServicesCtx).cast(),
                translate: svc_translate,
                reg_read: svc_reg_read,
                reg_write_aicpu: svc_reg_write_aicpu,
                reg_write_core: svc_reg_write_core,
                core_wait: svc_core_wait,
                aicpu_wait: svc_aicpu_wait,
                notify_aicpu: svc_notify_aicpu,
                now_cycles: svc_now_cycles,
                clock_hz: svc_clock_hz,
                log: svc_log,
                thread_info: svc_thread_info,
                save_so_file: svc_save_so_file,
                load_object: svc_load_object,
                object_symbol: svc_object_symbol,
                close_object: svc_close_object,
                notify_host: svc_notify_host,
                mem_load: svc_mem_load,
                mem_store: svc_mem_store,
                cache_op: svc_cache_op,
            });
            ServicesBox { _ctx: ctx, table }
        });
        &*b.table
    }

    /// Starts (or joins) this process's session on the device: creates the per-process and
    /// custom-scheduler directories. They are removed when the last session of this process on
    /// them drops.
    ///
    /// # Errors
    /// [`OsError::Io`] when a directory cannot be created.
    pub fn open_session(&self) -> Result<OsSession, OsError> {
        let dirs = vec![self.process_dir(), self.custom_dir()];
        let root = &self.os().config.root;
        crate::device_root::ensure_private(root)
            .map_err(|e| OsError::Io { path: root.clone(), source: e })?;
        let mut map = lock(sessions());
        let _creating = halted_check(&dirs[0])?;
        for d in &dirs {
            std::fs::create_dir_all(d).map_err(|e| OsError::Io { path: d.clone(), source: e })?;
        }
        for d in &dirs {
            *map.entry(d.clone()).or_insert(0) += 1;
        }
        Ok(OsSession { dirs })
    }

    /// Attaches `chip` (of this device) until the returned guard drops: the services then
    /// resolve register-window addresses of this chip on every thread, not only inside OS
    /// launches.
    pub fn attach(&self, chip: &Chip) -> ChipAttachment {
        static IDS: AtomicU64 = AtomicU64::new(1);
        // Relaxed: only uniqueness matters.
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        lock(&self.os().chips).push((id, chip.clone()));
        ChipAttachment { os: self.clone(), id }
    }

    /// The chip whose register windows contain `addr`: the calling launch's chip first, then
    /// the attached chips.
    fn chip_for(&self, addr: u64) -> Option<(Chip, u32, u32)> {
        if let Some(hit) =
            with_chip(|tl| window_of(&tl.chip, addr).map(|(i, r)| (tl.chip.clone(), i, r)))
                .flatten()
        {
            return Some(hit);
        }
        lock(&self.os().chips)
            .iter()
            .find_map(|(_, c)| window_of(c, addr).map(|(i, r)| (c.clone(), i, r)))
    }

    /// The chip AICPU-side waits use: the calling launch's chip, else the first attached one.
    fn aicpu_chip(&self) -> Option<Chip> {
        with_chip(|tl| tl.chip.clone())
            .or_else(|| lock(&self.os().chips).first().map(|(_, c)| c.clone()))
    }

    /// A device reset: the OS forgets every program it loaded and every file in this process's
    /// directories, and the latch re-arms. Loaders must upload again.
    ///
    /// # Errors
    /// [`OsError::Io`] when a file cannot be removed.
    pub fn reset(&self) -> Result<(), OsError> {
        let mut st = lock(&self.os().state);
        st.generation += 1;
        st.latched = None;
        st.objects.clear();
        st.handles.clear();
        st.stats.resets += 1;
        drop(st);
        for d in [self.process_dir(), self.custom_dir()] {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                let p = e.path();
                std::fs::remove_file(&p).map_err(|e| OsError::Io { path: p.clone(), source: e })?;
            }
        }
        Ok(())
    }

    /// Method 1: an operator installs `bytes` as `basename` into the preinstalled directory
    /// (out of band, at "install time"; the host loader never calls this).
    ///
    /// # Errors
    /// [`OsError::BadName`], [`OsError::Io`].
    pub fn install_preinstalled(&self, basename: &str, bytes: &[u8]) -> Result<PathBuf, OsError> {
        write_atomic(&self.preinstalled_dir(), basename, bytes)
    }

    /// Path B: the custom scheduler saves `bytes` as `basename` in its directory. No latch
    /// applies (it lives in a library the custom scheduler does not link).
    ///
    /// # Errors
    /// [`OsError::BadName`], [`OsError::Io`].
    pub fn upload_custom(&self, basename: &str, bytes: &[u8]) -> Result<PathBuf, OsError> {
        write_atomic(&self.custom_dir(), basename, bytes)
    }

    /// `SaveSoFile`: writes `bytes` as `name` into the process directory, or silently does
    /// nothing when the latch is on and has already fired.
    ///
    /// # Errors
    /// [`OsError::BadName`], [`OsError::Io`].
    pub fn save_so_file(&self, name: &str, bytes: &[u8]) -> Result<(), OsError> {
        check_name(name)?;
        let mut st = lock(&self.os().state);
        if self.config().first_saved_so_wins && st.latched.is_some() {
            st.stats.so_save_noops += 1;
            tracing::debug!(name, "SaveSoFile latched: not writing");
            return Ok(());
        }
        let path = write_atomic(&self.process_dir(), name, bytes)?;
        st.stats.so_saves += 1;
        if self.config().first_saved_so_wins {
            st.latched = Some(path);
        }
        Ok(())
    }

    /// Loads (or finds loaded) the object at `path` and injects the services table.
    pub(crate) fn load_path(&self, path: &Path) -> Result<Arc<LoadedObject>, OsError> {
        if let Some(o) = lock(&self.os().state).objects.get(path) {
            return Ok(o.clone());
        }
        let obj = Arc::new(self.open_object(path)?);
        let mut st = lock(&self.os().state);
        st.stats.object_loads += 1;
        Ok(st.objects.entry(path.to_path_buf()).or_insert(obj).clone())
    }

    pub(crate) fn open_object(&self, path: &Path) -> Result<LoadedObject, OsError> {
        let bytes =
            std::fs::read(path).map_err(|e| OsError::Io { path: path.into(), source: e })?;
        let fingerprint = fingerprint(&bytes);
        // SAFETY: loading runs the object's initialisers. The OS loads only device programs the
        // host loader handed it (module docs); RTLD_LOCAL keeps their symbols out of the global
        // namespace, RTLD_NOW surfaces unresolved symbols here rather than mid-run.
        let lib = unsafe {
            libloading::os::unix::Library::open(
                Some(path),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
            )
        }
        .map_err(|e| OsError::LoadFailed { path: path.into(), reason: e.to_string() })?;
        let obj = LoadedObject { path: path.into(), fingerprint, lib: lib.into() };
        if let Some(p) = obj.symbol(EXPORT_SET_SERVICES) {
            // SAFETY: the contract fixes this export's signature as `SetServicesFn`.
            let set = unsafe { std::mem::transmute::<*const c_void, SetServicesFn>(p) };
            // SAFETY: the table is the device's, alive for as long as the object is loaded.
            let rc = unsafe { set(self.services()) };
            if rc != STATUS_OK {
                return Err(OsError::Entry { symbol: EXPORT_SET_SERVICES.into(), code: rc });
            }
        }
        Ok(obj)
    }
}

fn check_name(name: &str) -> Result<(), OsError> {
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.contains('\\')
        || name.contains('\0');
    if bad {
        return Err(OsError::BadName { name: name.into() });
    }
    Ok(())
}

/// Refuses to create anything under `dir` once the process is removing its device directories
/// to exit ([`crate::device_root::halted`]); otherwise the permission to create, held until the
/// creation is done ([`crate::device_root::begin_create`]).
fn halted_check(dir: &Path) -> Result<crate::device_root::CreateGuard, OsError> {
    crate::device_root::begin_create().ok_or_else(|| OsError::Io {
        path: dir.into(),
        source: std::io::Error::other("the process is exiting: its device files are removed"),
    })
}

/// Writes `bytes` as `dir/name` through a temp file and a rename (an already-loaded image keeps
/// its old inode; a reader never sees a half-written file).
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, OsError> {
    use std::io::Write;
    check_name(name)?;
    let _creating = halted_check(dir)?;
    std::fs::create_dir_all(dir).map_err(|e| OsError::Io { path: dir.into(), source: e })?;
    static SEQ: AtomicU64 = AtomicU64::new(0);
    // Relaxed: only uniqueness of the temp name matters.
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!("{name}.tmp.{}.{seq}", std::process::id()));
    let target = dir.join(name);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |e| OsError::Io { path, source: e }
    };
    let written = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        drop(f);
        std::fs::rename(&tmp, &target).map_err(io(&target))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| target)
}

#[cfg(test)]
mod tests;
