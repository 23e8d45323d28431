//! The Path A bootstrap dispatcher: a shared object the AICPU OS loads from the bytes in
//! `BootstrapArgs` and calls once, so that the inner (AICPU) program gets written where the OS
//! can load it.
//!
//! # The three exports
//!
//! All three have the CPU-kernel signature `unsafe extern "C" fn(blob: *const u8, len: u64) ->
//! i32`, where `blob` is the OS's private copy of the 304-byte [`BootstrapBlob`]
//! (docs/design/launch.md), and return a `STATUS_*` code. The OS resolves all three before
//! calling any (a missing one fails the bootstrap), as CANN's `libaicpu_extend_kernels` does.
//!
//! | export (role in docs/design/launch.md) | contract |
//! |---|---|
//! | `StaticTileFwkBackendKernelServer` | the static-graph server. ferry ships no statically registered programs, so it touches nothing and returns `STATUS_UNSUPPORTED`. |
//! | `DynTileFwkBackendKernelServerInit` | the bootstrap. Reads `device_args_ptr` at blob offset 40 as a [`BootstrapArgs`] in device memory; rejects a null pointer or an empty inner program (`STATUS_INVALID_ARGUMENT`) and an untranslatable range (`STATUS_BAD_ADDRESS`); fingerprints the inner bytes with the same [`fingerprint`] as the host; hands them to the OS's `SaveSoFile` as `inner_<fp:016x>_<device_id>.so` (a temp file then a rename, in this process's device directory). It never skips an existing file: a stale or corrupt file could share the name, and a rename is cheap. |
//! | `DynTileFwkBackendKernelServer` | the dynamic per-launch server. ferry's per-task launches go straight to the inner program, so this is a probe: it re-reads the `BootstrapArgs` and returns `STATUS_OK` when they still describe a readable inner program; it writes nothing. |
//!
//! The dispatcher keeps no state besides the services table, and frees nothing it did not
//! allocate.
#![deny(unsafe_op_in_unsafe_fn)]

use ferry_abi::launch::{AbiRecord, BootstrapArgs, BootstrapBlob};
use ferry_abi::services::{
    fingerprint, inner_so_name, DeviceServices, STATUS_ABI_SIZE_MISMATCH, STATUS_BAD_ADDRESS,
    STATUS_INVALID_ARGUMENT, STATUS_NO_SERVICES, STATUS_OK, STATUS_PANIC, STATUS_UNSUPPORTED,
};
use std::sync::atomic::{AtomicPtr, Ordering};

static SERVICES: AtomicPtr<DeviceServices> = AtomicPtr::new(core::ptr::null_mut());

fn services() -> Option<&'static DeviceServices> {
    // Acquire: pairs with the Release store in `ferry_set_services`.
    let p = SERVICES.load(Ordering::Acquire);
    // SAFETY: a non-null pointer came from the OS, which keeps the table alive while this
    // object is loaded.
    (!p.is_null()).then(|| unsafe { &*p })
}

fn guarded(f: impl FnOnce() -> i32) -> i32 {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(STATUS_PANIC)
}

/// # Safety
/// `blob` is null or valid for reads of `len` bytes.
unsafe fn payload<'a>(blob: *const u8, len: u64) -> &'a [u8] {
    if blob.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts(blob, len as usize) }
}

/// Reads the `BootstrapArgs` and the inner program bytes the blob points at.
fn inner_program(svc: &DeviceServices, blob: &[u8]) -> Result<(BootstrapArgs, &'static [u8]), i32> {
    let b = BootstrapBlob::from_bytes(blob).map_err(|_| STATUS_ABI_SIZE_MISMATCH)?;
    if b.device_args_ptr == 0 {
        return Err(STATUS_INVALID_ARGUMENT);
    }
    let p = (svc.translate)(svc.ctx, b.device_args_ptr, BootstrapArgs::SIZE as u64);
    if p.is_null() {
        return Err(STATUS_BAD_ADDRESS);
    }
    // SAFETY: `translate` checked `BootstrapArgs::SIZE` readable bytes at `p`.
    let d =
        BootstrapArgs::from_bytes(unsafe { core::slice::from_raw_parts(p, BootstrapArgs::SIZE) })
            .map_err(|_| STATUS_ABI_SIZE_MISMATCH)?;
    if d.inner_so_bin == 0 || d.inner_so_len == 0 {
        return Err(STATUS_INVALID_ARGUMENT);
    }
    let q = (svc.translate)(svc.ctx, d.inner_so_bin, d.inner_so_len);
    if q.is_null() {
        return Err(STATUS_BAD_ADDRESS);
    }
    // SAFETY: `translate` checked `inner_so_len` readable bytes at `q`; the host keeps the
    // buffer alive and unchanged until the bootstrap launch completes (it waits for it).
    Ok((d, unsafe { core::slice::from_raw_parts(q, d.inner_so_len as usize) }))
}

/// Stores the OS services table. Called by the OS before any other export.
///
/// # Safety
/// `services` is null or points at a table that outlives this object.
#[no_mangle]
pub unsafe extern "C" fn ferry_set_services(services: *const DeviceServices) -> i32 {
    if services.is_null() {
        return STATUS_INVALID_ARGUMENT;
    }
    // SAFETY: non-null and valid by the caller's contract.
    if !unsafe { &*services }.is_compatible() {
        return STATUS_NO_SERVICES;
    }
    // Release: pairs with the Acquire load in `services`.
    SERVICES.store(services.cast_mut(), Ordering::Release);
    STATUS_OK
}

/// The static-graph server: unsupported in ferry (see the crate docs).
///
/// # Safety
/// `blob` is null or valid for reads of `len` bytes.
#[no_mangle]
#[allow(non_snake_case)]
pub unsafe extern "C" fn StaticTileFwkBackendKernelServer(_blob: *const u8, _len: u64) -> i32 {
    STATUS_UNSUPPORTED
}

/// The bootstrap: saves the inner program through the OS's `SaveSoFile` (see the crate docs).
///
/// # Safety
/// `blob` is null or valid for reads of `len` bytes.
#[no_mangle]
#[allow(non_snake_case)]
pub unsafe extern "C" fn DynTileFwkBackendKernelServerInit(blob: *const u8, len: u64) -> i32 {
    // SAFETY: forwarded contract.
    let blob = unsafe { payload(blob, len) };
    guarded(|| {
        let Some(svc) = services() else { return STATUS_NO_SERVICES };
        let (d, inner) = match inner_program(svc, blob) {
            Ok(x) => x,
            Err(code) => return code,
        };
        let mut buf = [0u8; 48];
        let Some(name) = inner_so_name(fingerprint(inner), d.device_id, &mut buf) else {
            return STATUS_INVALID_ARGUMENT;
        };
        let msg = format!("dispatcher: saving {name} ({} bytes)", inner.len());
        svc.log_str(ferry_abi::launch::LOG_LEVEL_DEBUG, &msg);
        (svc.save_so_file)(
            svc.ctx,
            name.as_ptr(),
            name.len() as u64,
            inner.as_ptr(),
            inner.len() as u64,
        )
    })
}

/// The dynamic per-launch server: a read-only probe (see the crate docs).
///
/// # Safety
/// `blob` is null or valid for reads of `len` bytes.
#[no_mangle]
#[allow(non_snake_case)]
pub unsafe extern "C" fn DynTileFwkBackendKernelServer(blob: *const u8, len: u64) -> i32 {
    // SAFETY: forwarded contract.
    let blob = unsafe { payload(blob, len) };
    guarded(|| {
        let Some(svc) = services() else { return STATUS_NO_SERVICES };
        match inner_program(svc, blob) {
            Ok(_) => STATUS_OK,
            Err(code) => code,
        }
    })
}
