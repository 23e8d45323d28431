//! [`DeviceOps`] for the simulated chip.
use crate::device::ops::{DeviceOps, TranslateError};
use ferry_sim::cores::{Chip, RegisterWindow, REG_WINDOW_BYTES};
use ferry_sim::{Device, DevicePtr};
use std::time::Duration;

/// The device half's view of a `ferry_sim` chip.
#[derive(Debug, Clone)]
pub struct SimOps {
    chip: Chip,
    device: Device,
    base0: u64,
    cores: u32,
}

impl SimOps {
    /// Wraps `chip`.
    pub fn new(chip: Chip) -> SimOps {
        let device = chip.device().clone();
        let bases = chip.reg_bases();
        SimOps {
            base0: bases.first().copied().unwrap_or(0),
            cores: bases.len() as u32,
            device,
            chip,
        }
    }

    /// The chip.
    pub fn chip(&self) -> &Chip {
        &self.chip
    }

    #[track_caller]
    fn window(&self, base: u64) -> &RegisterWindow {
        let off = base.wrapping_sub(self.base0);
        let i = off / REG_WINDOW_BYTES;
        assert!(
            off % REG_WINDOW_BYTES == 0 && i < u64::from(self.cores),
            "{base:#x} is not a register window base of this chip"
        );
        self.chip.window(i as u32)
    }
}

// SAFETY: [1] `translate` delegates to `Device::translate`, which bounds-checks against a live
// allocation of the device's mmap'd HBM (8-aligned allocations, 64-byte granularity), valid until
// the runner frees it after the run's threads returned; [2] the simulator's copies into HBM use
// atomic accesses, and device threads are ordered after host copies by the launch; [3] register
// accesses go through `RegisterWindow`, whose reads are Acquire and writes Release and ring the
// other side's doorbell.
unsafe impl DeviceOps for SimOps {
    fn translate(&self, addr: u64, len: u64) -> Result<*mut u8, TranslateError> {
        self.device.translate(DevicePtr(addr), len).map_err(|e| TranslateError {
            addr,
            len,
            reason: e.to_string(),
        })
    }

    fn reg_read(&self, reg_base: u64, offset: u32) -> u32 {
        self.window(reg_base).read(offset)
    }

    fn reg_write_aicpu(&self, reg_base: u64, offset: u32, value: u32) {
        self.window(reg_base).aicpu_write(offset, value);
    }

    fn reg_write_core(&self, reg_base: u64, offset: u32, value: u32) {
        self.window(reg_base).core_write(offset, value);
    }

    fn core_wait(
        &self,
        reg_base: u64,
        offset: u32,
        pred: &mut dyn FnMut(u32) -> bool,
        timeout: Option<Duration>,
    ) -> Option<u32> {
        self.window(reg_base).core_wait(offset, pred, timeout)
    }

    fn aicpu_wait(&self, cond: &mut dyn FnMut() -> bool, timeout: Option<Duration>) -> bool {
        self.chip.aicpu_bell().wait_until(cond, timeout)
    }

    fn notify_aicpu(&self) {
        self.chip.aicpu_bell().ring();
    }

    fn clock_cycles(&self) -> u64 {
        self.device.clock().now_cycles()
    }

    fn clock_hz(&self) -> u64 {
        self.device.clock().hz()
    }
}

/// [`DeviceOps`] through the simulated AICPU OS's services table: exactly what the device half
/// gets inside a device program ([`crate::device::services::ServicesOps`]), here driven from the
/// runner's own launches. Selected with [`crate::host::RunnerConfig::via_services`].
#[derive(Debug)]
pub struct OsServicesOps {
    table: *const ferry_abi::services::DeviceServices,
    _attach: ferry_sim::aicpu_os::ChipAttachment,
    _device: Device,
}

// SAFETY: the table is immutable after the OS built it and is itself Sync
// (`DeviceServices: Send + Sync`); it lives in the device's OS state, which `_device` keeps alive.
unsafe impl Send for OsServicesOps {}
// SAFETY: as for Send.
unsafe impl Sync for OsServicesOps {}

impl OsServicesOps {
    /// Attaches `chip` to its device's AICPU OS and takes the OS's services table; `None` when
    /// the table is from another ABI version.
    pub fn new(chip: &Chip) -> Option<OsServicesOps> {
        let os = chip.device().aicpu_os();
        let table = os.services();
        // SAFETY: `services()` returns the device's table, valid while the device lives.
        if table.is_null() || !unsafe { &*table }.is_compatible() {
            return None;
        }
        Some(OsServicesOps { table, _attach: os.attach(chip), _device: chip.device().clone() })
    }

    fn ops(&self) -> crate::device::services::ServicesOps<'_> {
        // SAFETY: non-null and compatible (checked in `new`); the device that owns the table is
        // kept alive by `self._device` for as long as the borrow of `self`.
        let t = unsafe { &*self.table };
        crate::device::services::ServicesOps::new(t).expect("checked compatible in new")
    }
}

// SAFETY: delegates every operation to `ServicesOps` over the OS's table, whose contract is the
// trait's (see `ServicesOps`).
unsafe impl DeviceOps for OsServicesOps {
    fn translate(&self, addr: u64, len: u64) -> Result<*mut u8, TranslateError> {
        self.ops().translate(addr, len)
    }

    fn reg_read(&self, reg_base: u64, offset: u32) -> u32 {
        self.ops().reg_read(reg_base, offset)
    }

    fn reg_write_aicpu(&self, reg_base: u64, offset: u32, value: u32) {
        self.ops().reg_write_aicpu(reg_base, offset, value);
    }

    fn reg_write_core(&self, reg_base: u64, offset: u32, value: u32) {
        self.ops().reg_write_core(reg_base, offset, value);
    }

    fn core_wait(
        &self,
        reg_base: u64,
        offset: u32,
        pred: &mut dyn FnMut(u32) -> bool,
        timeout: Option<Duration>,
    ) -> Option<u32> {
        self.ops().core_wait(reg_base, offset, pred, timeout)
    }

    fn aicpu_wait(&self, cond: &mut dyn FnMut() -> bool, timeout: Option<Duration>) -> bool {
        self.ops().aicpu_wait(cond, timeout)
    }

    fn notify_aicpu(&self) {
        self.ops().notify_aicpu();
    }

    fn clock_cycles(&self) -> u64 {
        self.ops().clock_cycles()
    }

    fn clock_hz(&self) -> u64 {
        self.ops().clock_hz()
    }

    fn mem_load(&self, addr: u64, size: u32, kind: u32) -> Option<u64> {
        self.ops().mem_load(addr, size, kind)
    }

    fn mem_store(&self, addr: u64, size: u32, value: u64, kind: u32) -> bool {
        self.ops().mem_store(addr, size, value, kind)
    }

    fn cache_op(&self, addr: u64, op: u32) {
        self.ops().cache_op(addr, op);
    }
}
