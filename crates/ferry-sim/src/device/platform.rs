//! A [`Platform`] of simulated devices, its builder, and host memory registered with it.

use super::*;

/// Builds a [`Platform`] of simulated devices.
///
/// # Examples
/// ```
/// use ferry_sim::{Arch, PlatformBuilder};
/// let p = PlatformBuilder::new(Arch::A5).devices(2).hbm_bytes(1 << 24).build()?;
/// assert_eq!(p.device_count(), 2);
/// assert!(!p.device(1)?.arch().svm);
/// # Ok::<(), ferry_sim::DeviceError>(())
/// ```
#[derive(Clone, Debug)]
pub struct PlatformBuilder {
    arch: Arch,
    devices: u32,
    hbm_bytes: u64,
    clock: Option<VirtualDeviceClock>,
    cost: CostModel,
    copy_engines: u32,
    queue_context_bytes: u64,
    max_hw_queues: u32,
    block_workers: usize,
    aicpu_os: crate::aicpu_os::OsConfig,
}

impl PlatformBuilder {
    /// One device of `arch` with the defaults.
    pub fn new(arch: Arch) -> Self {
        Self {
            arch,
            devices: 1,
            hbm_bytes: DEFAULT_HBM_BYTES,
            clock: None,
            cost: CostModel::default(),
            copy_engines: DEFAULT_COPY_ENGINES,
            queue_context_bytes: DEFAULT_QUEUE_CONTEXT_BYTES,
            max_hw_queues: DEFAULT_MAX_HW_QUEUES,
            block_workers: std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(DEFAULT_BLOCK_WORKERS),
            aicpu_os: crate::aicpu_os::OsConfig::default(),
        }
    }

    /// The device root: every file the devices' AICPU OS writes lives below it (default
    /// [`crate::device_root::user_root`], private to the user; created mode 0700). See
    /// [`crate::aicpu_os`].
    pub fn device_root(&mut self, root: impl Into<std::path::PathBuf>) -> &mut Self {
        self.aicpu_os.root = root.into();
        self
    }

    /// The device profile ([`crate::profile`]; default [`DeviceProfile::Vendor`]): sets the
    /// Path A latch and the Path B cluster's coherence as the profile has them (the two setters
    /// below override them afterwards). Fixes set with [`path_b_fixes`](Self::path_b_fixes)
    /// stay.
    pub fn profile(&mut self, profile: DeviceProfile) -> &mut Self {
        self.aicpu_os.profile = profile;
        self.aicpu_os.first_saved_so_wins = profile.first_saved_so_wins();
        self.aicpu_os.custom_scheduler_coherent =
            profile.custom_scheduler_coherent() || self.aicpu_os.fixes.same_cluster_affinity;
        self
    }

    /// Quirk: the vendor's one-shot "first saved SO wins" latch in the AICPU OS (on in the
    /// vendor profile).
    pub fn first_saved_so_wins(&mut self, on: bool) -> &mut Self {
        self.aicpu_os.first_saved_so_wins = on;
        self
    }

    /// Capability: the custom-scheduler (Path B) cluster is coherent with AICore writes
    /// (off in the vendor profile, as on the hardware of docs/design/launch.md; fix C).
    pub fn custom_scheduler_coherent(&mut self, on: bool) -> &mut Self {
        self.aicpu_os.custom_scheduler_coherent = on;
        self
    }

    /// The vendor-side Path B fixes A, B and C of docs/design/launch.md ([`PathBFixes`]); fix C makes the
    /// custom-scheduler cluster coherent.
    pub fn path_b_fixes(&mut self, fixes: PathBFixes) -> &mut Self {
        self.aicpu_os.fixes = fixes;
        if fixes.same_cluster_affinity {
            self.aicpu_os.custom_scheduler_coherent = true;
        }
        self
    }

    /// How long an AICore kernel takes to start after its launch (default 0; see
    /// [`crate::aicpu_os::OsConfig::aicore_launch_latency`]).
    pub fn aicore_launch_latency(&mut self, d: std::time::Duration) -> &mut Self {
        self.aicpu_os.aicore_launch_latency = d;
        self
    }

    /// Lines the cache model must have filled before an AICore kernel starts (default 0; see
    /// [`crate::aicpu_os::OsConfig::aicore_start_after_line_fills`]).
    pub fn aicore_start_after_line_fills(&mut self, lines: u64) -> &mut Self {
        self.aicpu_os.aicore_start_after_line_fills = lines;
        self
    }

    /// Number of devices (1..=[`MAX_DEVICES`]).
    pub fn devices(&mut self, n: u32) -> &mut Self {
        self.devices = n;
        self
    }

    /// HBM bytes per device.
    pub fn hbm_bytes(&mut self, n: u64) -> &mut Self {
        self.hbm_bytes = n;
        self
    }

    /// Drives every device clock from `clock` instead of real time.
    pub fn virtual_clock(&mut self, clock: VirtualDeviceClock) -> &mut Self {
        self.clock = Some(clock);
        self
    }

    /// The stall cost model (default: off).
    pub fn cost_model(&mut self, cost: CostModel) -> &mut Self {
        self.cost = cost;
        self
    }

    /// Copy engines per device.
    pub fn copy_engines(&mut self, n: u32) -> &mut Self {
        self.copy_engines = n;
        self
    }

    /// Device bytes each hardware queue holds for its context-save area.
    pub fn queue_context_bytes(&mut self, n: u64) -> &mut Self {
        self.queue_context_bytes = n;
        self
    }

    /// Hardware compute queues the pooled streams of one device share (default
    /// [`DEFAULT_MAX_HW_QUEUES`]; at least 1).
    pub fn max_hw_queues(&mut self, n: u32) -> &mut Self {
        self.max_hw_queues = n;
        self
    }

    /// Most blocks of one launch that run at once (default: the host's parallelism, at most
    /// [`DEFAULT_BLOCK_WORKERS`]; at least 1).
    pub fn block_workers(&mut self, n: usize) -> &mut Self {
        self.block_workers = n;
        self
    }

    /// Creates the devices.
    ///
    /// # Errors
    /// [`DeviceError::Resource`] when the device count is 0 or above [`MAX_DEVICES`], when
    /// there are no copy engines, no hardware queues or no block workers, or when HBM cannot
    /// be mapped.
    pub fn build(&mut self) -> Result<Platform, DeviceError> {
        if self.devices == 0 || self.devices > MAX_DEVICES {
            return Err(DeviceError::Resource(format!(
                "device count {} outside 1..={MAX_DEVICES}",
                self.devices
            )));
        }
        if self.copy_engines == 0 {
            return Err(DeviceError::Resource("a device needs at least one copy engine".into()));
        }
        if self.max_hw_queues == 0 || self.block_workers == 0 {
            return Err(DeviceError::Resource(
                "a device needs at least one hardware queue and one block worker".into(),
            ));
        }
        let shared = Arc::new(PlatformShared {
            peers: OnceLock::new(),
            registry: HostRegistry::default(),
            driver: DriverLock::default(),
            cost: self.cost,
            queue_gate: Arc::default(),
        });
        let profile = self.arch.profile();
        let devices = (0..self.devices)
            .map(|ordinal| {
                let counters = Arc::new(Counters::default());
                let memory = HbmMemory::new(ordinal, self.hbm_bytes, profile.svm, counters.clone())
                    .map_err(|e| DeviceError::Resource(format!("mapping HBM: {e}")))?;
                let clock = match &self.clock {
                    Some(v) => DeviceClock::virtual_clock(profile, v.clone()),
                    None => DeviceClock::real(profile),
                };
                Ok(Device(Arc::new(DeviceInner {
                    ordinal,
                    arch: profile,
                    memory,
                    clock,
                    counters,
                    faults: FaultInjector::default(),
                    shared: shared.clone(),
                    null_stream: OnceLock::new(),
                    engines: CopyEngines::new(self.copy_engines),
                    queue_context_bytes: self.queue_context_bytes,
                    compute_queues: Mutex::new(ComputeQueues {
                        max: self.max_hw_queues as usize,
                        slots: Vec::new(),
                        null: false,
                    }),
                    block_workers: self.block_workers,
                    evicted_until: AtomicU64::new(0),
                    epoch: std::time::Instant::now(),
                    code_objects: Mutex::new(HashSet::new()),
                    null_init: Mutex::new([false; 2]),
                    charges: ChargeLedger::default(),
                    aicpu_os: crate::aicpu_os::OsState::new(self.aicpu_os.clone(), ordinal),
                })))
            })
            .collect::<Result<Vec<_>, DeviceError>>()?;
        let _ = shared.peers.set(devices.iter().map(|d| Arc::downgrade(&d.0)).collect());
        Ok(Platform(Arc::new(PlatformInner { devices, shared })))
    }
}

#[derive(Debug)]
pub(crate) struct PlatformShared {
    pub(crate) peers: OnceLock<Vec<std::sync::Weak<DeviceInner>>>,
    pub(crate) registry: HostRegistry,
    pub(crate) driver: DriverLock,
    pub(crate) cost: CostModel,
    /// Where queue creations stop while a test holds them ([`Platform::hold_queue_creations`]).
    pub(crate) queue_gate: Arc<QueueCreationGate>,
}

#[derive(Debug)]
struct PlatformInner {
    devices: Vec<Device>,
    shared: Arc<PlatformShared>,
}

/// A set of simulated devices sharing one host (registration table, driver lock, cost model).
#[derive(Clone, Debug)]
pub struct Platform(Arc<PlatformInner>);

thread_local! {
    static CURRENT: Cell<u32> = const { Cell::new(0) };
}

impl Platform {
    /// Number of devices.
    pub fn device_count(&self) -> u32 {
        self.0.devices.len() as u32
    }

    /// The device with this ordinal.
    ///
    /// # Errors
    /// [`DeviceError::NoSuchDevice`] for an ordinal out of range.
    pub fn device(&self, ordinal: u32) -> Result<&Device, DeviceError> {
        self.0
            .devices
            .get(ordinal as usize)
            .ok_or(DeviceError::NoSuchDevice { ordinal, count: self.device_count() })
    }

    /// Every device, in ordinal order.
    pub fn devices(&self) -> &[Device] {
        &self.0.devices
    }

    /// Makes `ordinal` the calling thread's current device.
    ///
    /// # Errors
    /// [`DeviceError::NoSuchDevice`] for an ordinal out of range; the current device is unchanged.
    pub fn set_current_device(&self, ordinal: u32) -> Result<(), DeviceError> {
        self.device(ordinal)?;
        CURRENT.with(|c| c.set(ordinal));
        Ok(())
    }

    /// The calling thread's current device ordinal (0 until set).
    pub fn current_ordinal(&self) -> u32 {
        CURRENT.with(|c| c.get())
    }

    /// The calling thread's current device.
    ///
    /// # Errors
    /// [`DeviceError::NoSuchDevice`] when the thread's current ordinal (set for another
    /// platform) does not exist here.
    pub fn current_device(&self) -> Result<&Device, DeviceError> {
        self.device(self.current_ordinal())
    }

    /// Registers host memory with every device (portable, mapped). While the registration runs
    /// it holds the process-wide driver lock for the cost model's registration time.
    ///
    /// # Errors
    /// [`MemoryError::Invalid`] for a null or empty range, [`MemoryError::AlreadyRegistered`]
    /// when it overlaps a registration.
    ///
    /// # Safety
    /// - `[ptr, ptr + len)` stays valid for reads and writes until the returned registration
    ///   is dropped;
    /// - while a copy or kernel that uses the range runs, the host does not access the bytes it
    ///   writes (as with pinned memory on real hardware).
    pub unsafe fn register_host(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<HostRegistration, MemoryError> {
        let shared = &self.0.shared;
        let (_guard, _) = shared.driver.acquire();
        CostModel::sleep(shared.cost.registration_cost(len as u64));
        shared.registry.insert(ptr as usize, len)?;
        Ok(HostRegistration {
            region: HostRegion { host_addr: ptr as usize, len },
            platform: self.clone(),
        })
    }

    /// The registration that contains all of `[ptr, ptr+len)`, if any.
    pub fn find_registration(&self, ptr: *const u8, len: usize) -> Option<HostRegion> {
        self.0.shared.registry.find(ptr as usize, len)
    }

    /// Holds the process's driver lock until the guard is dropped, as a host registration in
    /// progress holds it: queue creations, registrations and allocations that need it wait
    /// (and count their wait). For tests that order threads on the lock by state.
    pub fn hold_driver_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.0.shared.driver.acquire().0
    }

    /// Threads blocked on the driver lock now ([`hold_driver_lock`](Self::hold_driver_lock)).
    pub fn driver_lock_waiting(&self) -> u32 {
        self.0.shared.driver.waiting()
    }

    /// A hook for tests: until the returned guard is dropped, every queue creation on this
    /// platform's devices stops inside its stall, holding what it holds there (the driver lock,
    /// and for a copy engine's queue that device's copy-engine allocator), and is counted in
    /// [`queue_creations_held`](Self::queue_creations_held). Only stalled creations stop, so
    /// only with the cost model on. A test then sees what waits behind a stalled creation
    /// through the waiters' counts, without timing a sleep.
    pub fn hold_queue_creations(&self) -> crate::cost::QueueCreationHold {
        self.0.shared.queue_gate.hold()
    }

    /// Queue creations stopped now by [`hold_queue_creations`](Self::hold_queue_creations).
    pub fn queue_creations_held(&self) -> u32 {
        self.0.shared.queue_gate.stopped()
    }

    /// Bytes of host memory registered.
    pub fn registered_bytes(&self) -> u64 {
        self.0.shared.registry.registered_bytes()
    }

    /// Translates a device-space address of any device to a host pointer for device-side
    /// access (used by device-to-device copies).
    ///
    /// # Errors
    /// When the address is foreign or the range is outside a live allocation or registration.
    pub fn translate(&self, ptr: DevicePtr, len: u64) -> Result<*mut u8, DeviceError> {
        match classify(ptr.0) {
            AddrKind::Hbm(o) | AddrKind::HostAlias(o) => Ok(self.device(o)?.translate(ptr, len)?),
            AddrKind::Foreign => Err(MemoryError::NotDeviceAddress { addr: ptr.0 }.into()),
        }
    }
}

/// A registered host range; unregisters when dropped.
#[derive(Debug)]
pub struct HostRegistration {
    region: HostRegion,
    platform: Platform,
}

impl HostRegistration {
    /// The registered range.
    pub fn region(&self) -> HostRegion {
        self.region
    }

    /// The address device `ordinal` uses for host address `host` inside this registration.
    ///
    /// # Errors
    /// [`MemoryError::NotRegistered`] when `[host, host+len)` is not inside this registration.
    pub fn alias(
        &self,
        ordinal: u32,
        host: *const u8,
        len: usize,
    ) -> Result<DevicePtr, MemoryError> {
        let h = host as usize;
        let r = self.region;
        match h.checked_add(len) {
            Some(end) if h >= r.host_addr && end <= r.host_addr + r.len => {
                Ok(host_alias(ordinal, h))
            }
            _ => Err(MemoryError::NotRegistered { host_addr: h, len }),
        }
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        // The range was inserted by `register_host`, so removal cannot fail.
        let _ = self.platform.0.shared.registry.remove(self.region.host_addr);
    }
}
