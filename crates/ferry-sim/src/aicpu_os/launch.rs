//! Loading and launching: the Path A bootstrap ([`AicpuOs::launch_kfc`]), programs resolved by
//! name ([`AicpuOs::binary_load`] → [`Binary::function`] → [`AicpuOs::launch_cpu_kernel`]) and
//! kernel libraries ([`AicpuOs::load_kernel_library`]).

use super::*;

/// Where a program resolved by [`AicpuOs::binary_load`] is searched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpEntry {
    /// The registry key (`<symbol>_<fp>` by convention, so two runtimes never merge).
    pub op_type: String,
    /// The exported symbol.
    pub function_name: String,
    /// Basename of the object that exports it.
    pub kernel_so: String,
    /// `true` routes the lookup to the custom-scheduler directory (Path B).
    pub user_defined: bool,
}

/// A loaded binary: the result of [`AicpuOs::binary_load`].
#[derive(Clone, Debug)]
pub struct Binary {
    os: AicpuOs,
    entries: HashMap<String, (String, Arc<LoadedObject>, Cluster)>,
}

impl Binary {
    /// `rtsFuncGetByName`: the function registered as `op_type`.
    ///
    /// # Errors
    /// [`OsError::UnknownFunction`] when no entry has that op type;
    /// [`OsError::MissingSymbol`] when the object does not export the entry's symbol.
    pub fn function(&self, op_type: &str) -> Result<CpuFunction, OsError> {
        let (symbol, object, cluster) = self
            .entries
            .get(op_type)
            .ok_or_else(|| OsError::UnknownFunction { op_type: op_type.into() })?;
        let p = object.symbol(symbol).ok_or_else(|| OsError::MissingSymbol {
            object: object.file_name(),
            symbol: symbol.clone(),
        })?;
        // SAFETY: by the device-program contract every CPU-kernel export has the `CpuKernelFn`
        // signature; `p` is a non-null code address of an object `object` keeps loaded.
        let entry = unsafe { std::mem::transmute::<*const c_void, CpuKernelFn>(p) };
        Ok(CpuFunction {
            symbol: symbol.clone(),
            object: object.clone(),
            entry,
            cluster: *cluster,
            _os: self.os.clone(),
        })
    }

    /// The object an op type resolved to.
    pub fn object(&self, op_type: &str) -> Option<&Arc<LoadedObject>> {
        self.entries.get(op_type).map(|(_, o, _)| o)
    }
}

/// A CPU-kernel entry resolved in a loaded object; keeps the object loaded and its device (so
/// the services table the object was given) alive.
#[derive(Clone, Debug)]
pub struct CpuFunction {
    symbol: String,
    object: Arc<LoadedObject>,
    entry: CpuKernelFn,
    cluster: Cluster,
    _os: AicpuOs,
}

impl CpuFunction {
    /// The cluster its launches run on: [`Cluster::Custom`] for an entry the custom scheduler
    /// resolved (Path B, `user_defined`), else [`Cluster::Main`].
    pub fn cluster(&self) -> Cluster {
        self.cluster
    }

    /// The exported symbol.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// The object it lives in.
    pub fn object(&self) -> &Arc<LoadedObject> {
        &self.object
    }
}

/// A CPU-kernel launch in flight.
#[derive(Clone, Debug)]
pub struct CpuLaunch {
    symbol: String,
    completion: Completion,
    status: Arc<AtomicI32>,
}

impl CpuLaunch {
    /// Waits for every launched thread.
    ///
    /// # Errors
    /// [`OsError::Entry`] with the first non-zero status an entry returned; the device error
    /// of a thread that failed otherwise.
    pub fn wait(&self) -> Result<(), OsError> {
        let r = self.completion.wait();
        self.result(r)
    }

    /// As [`wait`](Self::wait), bounded.
    ///
    /// # Errors
    /// As `wait`, plus [`DeviceError::Timeout`].
    pub fn wait_timeout(&self, timeout: Duration) -> Result<(), OsError> {
        let r = self.completion.wait_timeout(timeout);
        self.result(r)
    }

    fn result(&self, r: Result<(), DeviceError>) -> Result<(), OsError> {
        // Relaxed: the completion's Acquire (inside `wait`) already ordered the threads' stores.
        let code = self.status.load(Ordering::Relaxed);
        if code != STATUS_OK && !matches!(r, Err(DeviceError::Timeout { .. })) {
            return Err(OsError::Entry { symbol: self.symbol.clone(), code });
        }
        Ok(r?)
    }
}

/// A kernel library loaded for the AICore workers.
#[derive(Clone, Debug)]
pub struct KernelLibrary {
    object: Arc<LoadedObject>,
    lookup: unsafe extern "C" fn(u32) -> Option<KernelFn>,
    services: *const DeviceServices,
    os: AicpuOs,
}

// SAFETY: the services pointer addresses the device's immutable, `Sync` table, which `os` (a
// device handle) keeps alive as long as the library; `Arc<LoadedObject>` is Send + Sync.
unsafe impl Send for KernelLibrary {}
// SAFETY: as for Send.
unsafe impl Sync for KernelLibrary {}

/// One kernel of a [`KernelLibrary`]; keeps the library loaded and its device alive.
#[derive(Clone, Debug)]
pub struct Kernel {
    f: KernelFn,
    services: *const DeviceServices,
    _object: Arc<LoadedObject>,
    _os: AicpuOs,
}

// SAFETY: as for KernelLibrary: a code address kept loaded by `_object`, and a pointer to the
// immutable table `_os` keeps alive.
unsafe impl Send for Kernel {}
// SAFETY: as above.
unsafe impl Sync for Kernel {}

impl KernelLibrary {
    /// The kernel with this id, if the library has it.
    pub fn kernel(&self, id: u32) -> Option<Kernel> {
        // SAFETY: `lookup` is the library's `ferry_kernel_lookup` export, kept loaded by
        // `self.object`; it only reads its integer argument.
        let f = unsafe { (self.lookup)(id) }?;
        Some(Kernel {
            f,
            services: self.services,
            _object: self.object.clone(),
            _os: self.os.clone(),
        })
    }

    /// The object the library was loaded from.
    pub fn object(&self) -> &Arc<LoadedObject> {
        &self.object
    }
}

impl Kernel {
    /// Runs the kernel on the calling thread. Returns its `STATUS_*` (0 = ok).
    ///
    /// The kernel reads and writes device memory only through the addresses in `call`, which it
    /// translates (bounds-checked) through the services table; a bad address is a status, never
    /// a wild access.
    pub fn call(&self, call: &AicpuKernelCall) -> i32 {
        // SAFETY: `f` follows the `KernelFn` contract and `_object` keeps its code loaded;
        // `services` is the live table `_os` keeps alive; `call` is a valid reference for the
        // duration of the call.
        unsafe { (self.f)(self.services, call) }
    }
}

// ---------------------------------------------------------------------------------------------
// AicpuOs
// ---------------------------------------------------------------------------------------------

impl AicpuOs {
    /// Path A, device side: runs the bootstrap that `rtAicpuKernelLaunchExWithArgs(KFC, …)`
    /// starts. On AICPU thread 0: decodes the [`BootstrapBlob`], reads the [`BootstrapArgs`] at
    /// `device_args_ptr`, saves the dispatcher bytes as `dispatcher_<fp>_<dev>.so` in the
    /// process directory, loads it, resolves its three exports and calls
    /// `DynTileFwkBackendKernelServerInit` with the blob, which saves the inner program.
    ///
    /// # Errors
    /// A malformed blob, a bad device address, a dispatcher that cannot be loaded or lacks an
    /// export, or the init export's non-zero status.
    pub fn launch_kfc(&self, chip: &Chip, blob: &[u8]) -> Result<(), OsError> {
        let b = BootstrapBlob::from_bytes(blob)?;
        let (kernel, object) = (b.kernel_name()?, b.so_name()?);
        if kernel != BOOTSTRAP_KERNEL_NAME || object != BOOTSTRAP_SO_NAME {
            return Err(OsError::NotBootstrap { kernel: kernel.into(), object: object.into() });
        }
        lock(&self.os().state).stats.kfc_launches += 1;
        let result: Arc<Mutex<Option<OsError>>> = Arc::default();
        let (os, blob, slot) = (self.clone(), blob.to_vec(), result.clone());
        let done = chip.launch_aicpu(
            1,
            Arc::new(move |ctx: AicpuCtx| {
                let _tl = TlGuard::set(&ctx);
                match os.bootstrap_on_device(&blob) {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        let msg = e.to_string();
                        *lock(&slot) = Some(e);
                        Err(msg)
                    }
                }
            }),
        )?;
        // Bounded like the original's stream synchronisation after the bootstrap launch.
        let r = done.wait_timeout(Duration::from_secs(50));
        if let Some(e) = lock(&result).take() {
            return Err(e);
        }
        Ok(r?)
    }

    fn bootstrap_on_device(&self, blob: &[u8]) -> Result<(), OsError> {
        let b = BootstrapBlob::from_bytes(blob)?;
        let dargs_bytes = self.read_device(b.device_args_ptr, BootstrapArgs::SIZE as u64)?;
        let dargs = BootstrapArgs::from_bytes(&dargs_bytes)?;
        let disp = self.read_device(dargs.aicpu_so_bin, dargs.aicpu_so_len)?;
        let name = format!("dispatcher_{:016x}_{}.so", fingerprint(&disp), dargs.device_id);
        let path = write_atomic(&self.process_dir(), &name, &disp)?;
        let obj = self.load_path(&path)?;
        let mut init = None;
        for sym in [DISPATCHER_EXPORT_STATIC, DISPATCHER_EXPORT_INIT, DISPATCHER_EXPORT_RUN] {
            let p = obj.symbol(sym).ok_or_else(|| OsError::MissingSymbol {
                object: obj.file_name(),
                symbol: sym.into(),
            })?;
            if sym == DISPATCHER_EXPORT_INIT {
                init = Some(p);
            }
        }
        let init = init.ok_or_else(|| OsError::MissingSymbol {
            object: obj.file_name(),
            symbol: DISPATCHER_EXPORT_INIT.into(),
        })?;
        // SAFETY: the dispatcher contract fixes its exports' signature as `CpuKernelFn`.
        let init = unsafe { std::mem::transmute::<*const c_void, CpuKernelFn>(init) };
        let private = blob.to_vec();
        // SAFETY: `private` is a live buffer of `len` bytes; `obj` keeps the dispatcher loaded.
        let rc = unsafe { init(private.as_ptr(), private.len() as u64) };
        if rc != STATUS_OK {
            return Err(OsError::Entry { symbol: DISPATCHER_EXPORT_INIT.into(), code: rc });
        }
        Ok(())
    }

    fn read_device(&self, addr: u64, len: u64) -> Result<Vec<u8>, OsError> {
        let p = self.device.translate(DevicePtr(addr), len).map_err(DeviceError::from)?;
        // SAFETY: `translate` checked that `[p, p+len)` lies inside one live allocation; the
        // host does not write it while the bootstrap launch it waits for runs.
        Ok(unsafe { std::slice::from_raw_parts(p, len as usize) }.to_vec())
    }

    /// `rtsBinaryLoadFromFile`: resolves every entry's object and loads it.
    ///
    /// A `user_defined` entry is looked up in the custom-scheduler directory only. Any other is
    /// looked up in the process directory, then the preinstalled directory; when neither has it
    /// and the latch holds a resident program, the name resolves to that resident program (the
    /// vendor behaviour: the second runtime runs the first runtime's code).
    ///
    /// # Errors
    /// [`OsError::NotFound`], [`OsError::LoadFailed`], [`OsError::BadName`].
    pub fn binary_load(&self, entries: &[OpEntry]) -> Result<Binary, OsError> {
        lock(&self.os().state).stats.binary_loads += 1;
        let mut out = HashMap::new();
        for e in entries {
            check_name(&e.kernel_so)?;
            let path = self.resolve(&e.kernel_so, e.user_defined)?;
            let obj = self.load_path(&path)?;
            let cluster = if e.user_defined { Cluster::Custom } else { Cluster::Main };
            out.insert(e.op_type.clone(), (e.function_name.clone(), obj, cluster));
        }
        Ok(Binary { os: self.clone(), entries: out })
    }

    fn resolve(&self, basename: &str, user_defined: bool) -> Result<PathBuf, OsError> {
        let dirs = if user_defined {
            vec![self.custom_dir()]
        } else {
            vec![self.process_dir(), self.preinstalled_dir()]
        };
        for d in &dirs {
            let p = d.join(basename);
            if p.is_file() {
                return Ok(p);
            }
        }
        if !user_defined && self.config().first_saved_so_wins {
            if let Some(p) = lock(&self.os().state).latched.clone() {
                tracing::debug!(basename, resident = %p.display(), "resolving to the latched program");
                return Ok(p);
            }
        }
        Err(OsError::NotFound { basename: basename.into(), searched: dirs })
    }

    /// `rtsLaunchCpuKernel`: runs `f` on the first `threads` AICPU threads. Each thread gets its
    /// own private copy of `payload` (the launch argument blob, by value).
    ///
    /// # Errors
    /// An invalid thread count or an injected launch fault (from [`Chip::launch_aicpu`]).
    pub fn launch_cpu_kernel(
        &self,
        chip: &Chip,
        f: &CpuFunction,
        threads: u32,
        payload: &[u8],
    ) -> Result<CpuLaunch, OsError> {
        let status = Arc::new(AtomicI32::new(STATUS_OK));
        let blob: Arc<[u8]> = payload.into();
        let (func, st) = (f.clone(), status.clone());
        let (reach, device) = (self.reach(f.cluster), self.device.clone());
        let completion = chip.launch_aicpu(
            threads,
            Arc::new(move |ctx: AicpuCtx| {
                let _tl = TlGuard::set(&ctx);
                // Dropped before `_tl`: the thread's cache is flushed when its kernel ends.
                let _reach = ReachGuard::enter(&device, reach);
                let private = blob.to_vec();
                // SAFETY: `func.entry` follows the `CpuKernelFn` contract; `private` is a live
                // buffer of `len` bytes owned by this thread; `func.object` keeps the code loaded.
                let rc = unsafe { (func.entry)(private.as_ptr(), private.len() as u64) };
                if rc == STATUS_OK {
                    return Ok(());
                }
                // Relaxed: the first failing status wins; the completion's Release/Acquire
                // orders it before the host reads it.
                let _ = st.compare_exchange(STATUS_OK, rc, Ordering::Relaxed, Ordering::Relaxed);
                Err(format!("{} returned {rc} ({})", func.symbol, status_name(rc)))
            }),
        )?;
        lock(&self.os().state).stats.cpu_launches += 1;
        Ok(CpuLaunch { symbol: f.symbol.clone(), completion, status })
    }

    /// Registers a kernel library for the AICore workers (`rtRegisterAllKernel`): saves
    /// `bytes` as `kernels_<fp>_<dev>.so` in the process directory, loads it and resolves its
    /// lookup export.
    ///
    /// # Errors
    /// [`OsError::Io`], [`OsError::LoadFailed`], [`OsError::MissingSymbol`].
    pub fn load_kernel_library(&self, bytes: &[u8]) -> Result<KernelLibrary, OsError> {
        let name = format!("kernels_{:016x}_{}.so", fingerprint(bytes), self.os().ordinal);
        let path = write_atomic(&self.process_dir(), &name, bytes)?;
        let object = self.load_path(&path)?;
        let p = object.symbol(EXPORT_KERNEL_LOOKUP).ok_or_else(|| OsError::MissingSymbol {
            object: object.file_name(),
            symbol: EXPORT_KERNEL_LOOKUP.into(),
        })?;
        // SAFETY: the kernel-library contract fixes the lookup export's signature.
        let lookup = unsafe {
            std::mem::transmute::<*const c_void, unsafe extern "C" fn(u32) -> Option<KernelFn>>(p)
        };
        Ok(KernelLibrary { object, lookup, services: self.services(), os: self.clone() })
    }

    /// The `load_object` service: used by AICPU programs to (re)load orchestration objects.
    pub(super) fn load_object(&self, bytes: &[u8], tag: &str) -> Result<u64, OsError> {
        let name =
            format!("libdevice_orch_{}_{}_{}.so", std::process::id(), tag, self.os().ordinal);
        let path = write_atomic(&self.process_dir(), &name, bytes)?;
        let obj = self.open_object(&path);
        // The file is unlinked as soon as it is loaded (or failed to load), as on hardware.
        let _ = std::fs::remove_file(&path);
        let obj = Arc::new(obj?);
        let mut st = lock(&self.os().state);
        st.stats.object_loads += 1;
        st.next_handle += 1;
        let h = st.next_handle;
        st.handles.insert(h, obj);
        Ok(h)
    }
}
