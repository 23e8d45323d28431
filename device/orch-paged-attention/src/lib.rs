//! Orchestration object of the `paged-attention` example callable (a device shared object).
//!
//! The AICPU program (device-orchestrated variant) loads it through the OS loader when the
//! callable is registered, and calls [`ferry_orch_entry`] from the task runtime's exec hook.
//! The submission API behind `OrchContext::api` belongs to the task runtime; until it is
//! attached (`api` null) the entry only checks its context.
#![deny(unsafe_op_in_unsafe_fn)]

use ferry_abi::services::{
    DeviceServices, OrchConfig, OrchContext, STATUS_INVALID_ARGUMENT, STATUS_OK,
};

/// The name this object reports.
pub const NAME: &str = "paged-attention";

/// Stores nothing: the entry receives the table in its context.
///
/// # Safety
/// `services` is null or points at a live table.
#[no_mangle]
pub unsafe extern "C" fn ferry_set_services(services: *const DeviceServices) -> i32 {
    if services.is_null() {
        return STATUS_INVALID_ARGUMENT;
    }
    STATUS_OK
}

/// Fills the config record.
///
/// # Safety
/// `out` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ferry_orch_config(out: *mut OrchConfig) -> i32 {
    if out.is_null() {
        return STATUS_INVALID_ARGUMENT;
    }
    let mut c = OrchConfig { expected_args: 4, ..OrchConfig::default() };
    c.name[..NAME.len()].copy_from_slice(NAME.as_bytes());
    // SAFETY: non-null and valid for writes by the caller's contract.
    unsafe { out.write(c) };
    STATUS_OK
}

/// The orchestration entry.
///
/// # Safety
/// `ctx` is null or valid for reads for the call.
#[no_mangle]
pub unsafe extern "C" fn ferry_orch_entry(ctx: *const OrchContext) -> i32 {
    if ctx.is_null() {
        return STATUS_INVALID_ARGUMENT;
    }
    // SAFETY: non-null and valid by the caller's contract.
    let ctx = unsafe { &*ctx };
    if ctx.services.is_null() {
        return STATUS_INVALID_ARGUMENT;
    }
    STATUS_OK
}
