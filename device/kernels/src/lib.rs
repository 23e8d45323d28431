//! The AICore kernel library: elementwise f32 kernels selected by id (a device shared object).
//!
//! | id | kernel |
//! |---|---|
//! | `KERNEL_ADD` | `out[i] = a[i] + b[i]` |
//! | `KERNEL_MUL` | `out[i] = a[i] * b[i]` |
//! | `KERNEL_SCALE` | `out[i] = a[i] * scalar` |
//! | `KERNEL_COPY` | `out[i] = a[i]` |
//! | `KERNEL_ADD_SCALAR` | `out[i] = a[i] + scalar` |
//!
//! Ids are the one numbering of `ferry_abi::services` (the task runtime's kernel ids); the
//! attention kernels (`KERNEL_ATTN_*`) are not in this library, and every id it does not
//! export (including any at or above `KERNEL_COUNT`) looks up as `None`: an unknown kernel.
//!
//! Every kernel has the [`KernelFn`] signature: it receives the OS services table and a
//! [`AicpuKernelCall`] of device addresses, translates each operand range through the table
//! (bounds-checked: a bad address is `STATUS_BAD_ADDRESS`, never a wild access), and handles the
//! element range of its block. Operands may alias (in-place kernels), so elements are accessed
//! through raw pointers, never through overlapping slices.
#![deny(unsafe_op_in_unsafe_fn)]

use ferry_abi::services::{
    AicpuKernelCall, DeviceServices, KernelFn, KERNEL_ADD, KERNEL_ADD_SCALAR, KERNEL_COPY,
    KERNEL_MUL, KERNEL_SCALE, STATUS_BAD_ADDRESS, STATUS_INVALID_ARGUMENT, STATUS_NO_SERVICES,
    STATUS_OK,
};

/// Stores nothing: kernels receive the table with every call. Present so the OS's uniform
/// injection succeeds.
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

/// The kernel with id `id`, or `None`.
///
/// # Safety
/// Always safe to call; `unsafe` only because it is an FFI export.
#[no_mangle]
pub unsafe extern "C" fn ferry_kernel_lookup(id: u32) -> Option<KernelFn> {
    match id {
        KERNEL_ADD => Some(add),
        KERNEL_MUL => Some(mul),
        KERNEL_SCALE => Some(scale),
        KERNEL_COPY => Some(copy),
        KERNEL_ADD_SCALAR => Some(add_scalar),
        _ => None,
    }
}

/// Runs `op(a, b)` over the block's range.
///
/// # Safety
/// `services` and `call` are null or valid (the `KernelFn` contract).
unsafe fn elementwise(
    services: *const DeviceServices,
    call: *const AicpuKernelCall,
    uses_b: bool,
    op: impl Fn(f32, f32, f32) -> f32,
) -> i32 {
    if services.is_null() || call.is_null() {
        return STATUS_NO_SERVICES;
    }
    // SAFETY: non-null and valid by the caller's contract.
    let (svc, c) = unsafe { (&*services, *call) };
    let Some(bytes) = c.len.checked_mul(4) else { return STATUS_INVALID_ARGUMENT };
    if c.len == 0 {
        return STATUS_OK;
    }
    let tr = |addr: u64| (svc.translate)(svc.ctx, addr, bytes).cast::<f32>();
    let (a, out) = (tr(c.a), tr(c.out));
    let b = if uses_b { tr(c.b) } else { a };
    if a.is_null() || b.is_null() || out.is_null() {
        return STATUS_BAD_ADDRESS;
    }
    let s = f32::from_bits(c.scalar_bits);
    let (start, end) = c.block_range();
    for i in start as usize..end as usize {
        // SAFETY: `translate` checked `len * 4` bytes at each base and `i < len`; unaligned
        // accesses need no alignment; operands may alias, so no references are formed.
        unsafe {
            out.add(i).write_unaligned(op(a.add(i).read_unaligned(), b.add(i).read_unaligned(), s))
        };
    }
    STATUS_OK
}

/// `out = a + b`.
///
/// # Safety
/// The `KernelFn` contract: `services` and `call` are null or valid for the call.
pub unsafe extern "C" fn add(services: *const DeviceServices, call: *const AicpuKernelCall) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { elementwise(services, call, true, |x, y, _| x + y) }
}

/// `out = a * b`.
///
/// # Safety
/// As [`add`].
pub unsafe extern "C" fn mul(services: *const DeviceServices, call: *const AicpuKernelCall) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { elementwise(services, call, true, |x, y, _| x * y) }
}

/// `out = a * scalar`.
///
/// # Safety
/// As [`add`].
pub unsafe extern "C" fn scale(
    services: *const DeviceServices,
    call: *const AicpuKernelCall,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { elementwise(services, call, false, |x, _, s| x * s) }
}

/// `out = a`.
///
/// # Safety
/// As [`add`].
pub unsafe extern "C" fn copy(
    services: *const DeviceServices,
    call: *const AicpuKernelCall,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { elementwise(services, call, false, |x, _, _| x) }
}

/// `out = a + scalar`.
///
/// # Safety
/// As [`add`].
pub unsafe extern "C" fn add_scalar(
    services: *const DeviceServices,
    call: *const AicpuKernelCall,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { elementwise(services, call, false, |x, _, s| x + s) }
}
