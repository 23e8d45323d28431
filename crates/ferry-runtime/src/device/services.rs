//! [`DeviceOps`] over the AICPU OS's injected services table (`ferry_abi::services`).
//!
//! This is what the device half uses inside a device program: the AICPU OS hands every program a
//! [`DeviceServices`] table of `extern "C"` functions, and [`ServicesOps`] maps the trait onto it
//! one to one (a register is addressed as `base + offset`).
use super::ops::{DeviceOps, TranslateError};
use ferry_abi::services::DeviceServices;
use std::time::Duration;

/// The device half's chip services inside a device program.
#[derive(Clone, Copy, Debug)]
pub struct ServicesOps<'a> {
    svc: &'a DeviceServices,
}

impl<'a> ServicesOps<'a> {
    /// Wraps `svc`; `None` when the table is from another ABI version.
    pub fn new(svc: &'a DeviceServices) -> Option<ServicesOps<'a>> {
        svc.is_compatible().then_some(ServicesOps { svc })
    }

    /// The table.
    pub fn services(&self) -> &'a DeviceServices {
        self.svc
    }
}

// SAFETY: the AICPU OS builds the table over the same simulated chip `SimOps` uses and documents
// the same obligations for it (`ferry_abi::services::DeviceServices`): `translate` returns null or
// a pointer to `len` bytes inside one live allocation that stays allocated for the run, device
// memory is touched by others only atomically or under a launch/register happens-before edge, and
// the register functions are Acquire reads / Release writes that wake the other side.
unsafe impl DeviceOps for ServicesOps<'_> {
    fn translate(&self, addr: u64, len: u64) -> Result<*mut u8, TranslateError> {
        let p = (self.svc.translate)(self.svc.ctx, addr, len);
        if p.is_null() {
            return Err(TranslateError { addr, len, reason: "the AICPU OS refused it".into() });
        }
        Ok(p)
    }

    fn reg_read(&self, reg_base: u64, offset: u32) -> u32 {
        (self.svc.reg_read)(self.svc.ctx, reg_base + u64::from(offset))
    }

    fn reg_write_aicpu(&self, reg_base: u64, offset: u32, value: u32) {
        let _ = (self.svc.reg_write_aicpu)(self.svc.ctx, reg_base + u64::from(offset), value);
    }

    fn reg_write_core(&self, reg_base: u64, offset: u32, value: u32) {
        let _ = (self.svc.reg_write_core)(self.svc.ctx, reg_base + u64::from(offset), value);
    }

    fn core_wait(
        &self,
        reg_base: u64,
        offset: u32,
        pred: &mut dyn FnMut(u32) -> bool,
        timeout: Option<Duration>,
    ) -> Option<u32> {
        self.svc.core_wait_with(reg_base + u64::from(offset), pred, timeout)
    }

    fn aicpu_wait(&self, cond: &mut dyn FnMut() -> bool, timeout: Option<Duration>) -> bool {
        self.svc.aicpu_wait_with(cond, timeout)
    }

    fn notify_aicpu(&self) {
        (self.svc.notify_aicpu)(self.svc.ctx);
    }

    fn clock_cycles(&self) -> u64 {
        (self.svc.now_cycles)(self.svc.ctx)
    }

    fn clock_hz(&self) -> u64 {
        (self.svc.clock_hz)(self.svc.ctx)
    }

    fn mem_load(&self, addr: u64, size: u32, kind: u32) -> Option<u64> {
        let mut v = 0u64;
        let st = (self.svc.mem_load)(self.svc.ctx, addr, size, kind, &mut v);
        (st == ferry_abi::services::STATUS_OK).then_some(v)
    }

    fn mem_store(&self, addr: u64, size: u32, value: u64, kind: u32) -> bool {
        (self.svc.mem_store)(self.svc.ctx, addr, size, value, kind)
            == ferry_abi::services::STATUS_OK
    }

    fn cache_op(&self, addr: u64, op: u32) {
        let _ = (self.svc.cache_op)(self.svc.ctx, addr, op);
    }

    fn host_notifier(&self) -> Option<super::ops::HostNotifier> {
        // The table is `Copy` and its `ctx` stays valid for as long as the OS keeps the table
        // (the services tolerate a device that is gone: they do nothing).
        let svc = *self.svc;
        Some(std::sync::Arc::new(move |key, queue| {
            // The whole table (`Send + Sync`), not its `ctx` field alone.
            let t: &DeviceServices = &svc;
            (t.notify_host)(t.ctx, key, queue)
        }))
    }
}
