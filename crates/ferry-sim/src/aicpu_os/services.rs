//! The OS services behind the table every loaded program receives (`extern "C"` functions),
//! and the thread-local launch context they read: the calling thread's chip (an AICPU thread's
//! launch, or the chip whose AICore entry the thread runs), borrowed without a lock or a
//! reference count on the hot paths (register accesses, waits, notifications).
use super::*;

// ---------------------------------------------------------------------------------------------
// The thread-local launch context the services read
// ---------------------------------------------------------------------------------------------

pub(super) struct LaunchTl {
    pub(super) chip: Chip,
    thread: u32,
    threads: u32,
}

thread_local! {
    static CURRENT: RefCell<Option<LaunchTl>> = const { RefCell::new(None) };
}

pub(super) struct TlGuard;

impl TlGuard {
    pub(super) fn set(ctx: &AicpuCtx) -> TlGuard {
        CURRENT.with(|c| {
            *c.borrow_mut() =
                Some(LaunchTl { chip: ctx.chip.clone(), thread: ctx.thread, threads: ctx.threads })
        });
        TlGuard
    }
}

impl Drop for TlGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

pub(super) fn with_chip<R>(f: impl FnOnce(&LaunchTl) -> R) -> Option<R> {
    CURRENT.with(|c| c.borrow().as_ref().map(f))
}

/// `f` over the calling thread's own chip, borrowed: an AICPU thread's launch chip or the chip
/// whose AICore entry the thread runs. `None` on other threads or when `f` declines. The hot
/// services (register accesses, waits, notifications) take this path first: it touches no
/// lock and no shared reference count, which 28 chip threads on two cores would contend.
fn on_thread_chip<R>(mut f: impl FnMut(&Chip) -> Option<R>) -> Option<R> {
    CURRENT
        .with(|c| c.borrow().as_ref().and_then(|tl| f(&tl.chip)))
        .or_else(|| crate::cores::with_core_chip(f))
}

/// `f(chip, window, register)` for the chip whose register windows hold `addr` (the calling
/// thread's own chip first, then the attached chips); `Ok(None)` when no chip has `addr` or the
/// device is gone, `Err(())` when `f` panicked.
fn with_window<R>(
    ctx: *const c_void,
    addr: u64,
    mut f: impl FnMut(&Chip, u32, u32) -> R,
) -> Result<Option<R>, ()> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if let Some(r) = on_thread_chip(|c| window_of(c, addr).map(|(i, r)| f(c, i, r))) {
            return Some(r);
        }
        // SAFETY: as in `with_os`.
        let sc = unsafe { &*ctx.cast::<ServicesCtx>() };
        let os = AicpuOs::new(Device(sc.device.upgrade()?));
        os.chip_for(addr).map(|(c, i, r)| f(&c, i, r))
    }))
    .map_err(drop)
}

// ---------------------------------------------------------------------------------------------
// The services (extern "C" functions behind the table)
// ---------------------------------------------------------------------------------------------

/// Runs `f` with the device behind `ctx`, or returns `default` (device gone, or a panic).
fn with_os<R>(ctx: *const c_void, default: R, f: impl FnOnce(AicpuOs) -> R) -> R {
    // SAFETY: `ctx` is the `ServicesCtx` this module put in the table; it lives in the
    // device's `OsState` for as long as the table does.
    let sc = unsafe { &*ctx.cast::<ServicesCtx>() };
    let Some(inner) = sc.device.upgrade() else { return default };
    let os = AicpuOs::new(Device(inner));
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(os))) {
        Ok(r) => r,
        Err(_) => default,
    }
}

/// Reads a byte string the program passed.
///
/// # Safety
/// `p` is valid for `len` bytes, or `len` is 0.
unsafe fn arg_bytes<'a>(p: *const u8, len: u64) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract above.
    Some(unsafe { std::slice::from_raw_parts(p, len as usize) })
}

pub(super) extern "C" fn svc_translate(ctx: *const c_void, addr: u64, len: u64) -> *mut u8 {
    with_os(ctx, std::ptr::null_mut(), |os| {
        os.device.translate(DevicePtr(addr), len).unwrap_or(std::ptr::null_mut())
    })
}

pub(super) fn window_of(chip: &Chip, addr: u64) -> Option<(u32, u32)> {
    let base = chip.window(0).base().0;
    let off = addr.checked_sub(base)?;
    let idx = off / REG_WINDOW_BYTES;
    let reg = (off % REG_WINDOW_BYTES) as u32;
    (idx < u64::from(chip.config().cores()) && reg % 4 == 0).then_some((idx as u32, reg))
}

pub(super) extern "C" fn svc_reg_read(ctx: *const c_void, addr: u64) -> u32 {
    with_window(ctx, addr, |c, i, r| c.window(i).read(r)).ok().flatten().unwrap_or(0)
}

pub(super) extern "C" fn svc_reg_write_aicpu(ctx: *const c_void, addr: u64, value: u32) -> i32 {
    match with_window(ctx, addr, |c, i, r| c.window(i).aicpu_write(r, value)) {
        Ok(Some(())) => STATUS_OK,
        Ok(None) => STATUS_BAD_ADDRESS,
        Err(()) => STATUS_PANIC,
    }
}

pub(super) extern "C" fn svc_reg_write_core(ctx: *const c_void, addr: u64, value: u32) -> i32 {
    match with_window(ctx, addr, |c, i, r| c.window(i).core_write(r, value)) {
        Ok(Some(())) => STATUS_OK,
        Ok(None) => STATUS_BAD_ADDRESS,
        Err(()) => STATUS_PANIC,
    }
}

fn timeout_of(ns: u64) -> Option<Duration> {
    (ns != WAIT_FOREVER).then(|| Duration::from_nanos(ns))
}

pub(super) extern "C" fn svc_core_wait(
    ctx: *const c_void,
    addr: u64,
    pred: RegPredFn,
    user: *mut c_void,
    timeout_ns: u64,
) -> u64 {
    with_window(ctx, addr, |c, i, r| {
        // SAFETY: `pred` and `user` come from the waiting program, which keeps `user` alive for
        // the call (services contract); the predicate does not unwind.
        let hit =
            c.window(i).core_wait(r, |v| unsafe { pred(user, v) } != 0, timeout_of(timeout_ns));
        hit.map_or(0, |v| WAIT_SATISFIED | u64::from(v))
    })
    .ok()
    .flatten()
    .unwrap_or(0)
}

pub(super) extern "C" fn svc_aicpu_wait(
    ctx: *const c_void,
    cond: CondFn,
    user: *mut c_void,
    timeout_ns: u64,
) -> u8 {
    let wait = |c: &Chip| {
        // SAFETY: as in `svc_core_wait`.
        u8::from(c.aicpu_bell().wait_until(|| unsafe { cond(user) } != 0, timeout_of(timeout_ns)))
    };
    let fast = std::panic::catch_unwind(|| on_thread_chip(|c| Some(wait(c))));
    match fast {
        Ok(Some(r)) => r,
        Err(_) => 0,
        Ok(None) => with_os(ctx, 0, |os| os.aicpu_chip().map_or(0, |c| wait(&c))),
    }
}

pub(super) extern "C" fn svc_notify_aicpu(ctx: *const c_void) {
    let ring = |c: &Chip| c.aicpu_bell().ring();
    let rung = |c: &Chip| {
        ring(c);
        Some(())
    };
    match std::panic::catch_unwind(|| on_thread_chip(rung)) {
        Ok(Some(())) | Err(_) => {}
        Ok(None) => with_os(ctx, (), |os| {
            if let Some(c) = os.aicpu_chip() {
                ring(&c);
            }
        }),
    }
}

pub(super) extern "C" fn svc_notify_host(ctx: *const c_void, key: u64, queue: u32) {
    with_os(ctx, (), |os| os.ring_host(key, queue))
}

pub(super) extern "C" fn svc_mem_load(
    ctx: *const c_void,
    addr: u64,
    size: u32,
    kind: u32,
    out: *mut u64,
) -> i32 {
    with_os(ctx, STATUS_PANIC, |os| match crate::cache::mem_load(&os.device, addr, size, kind) {
        Ok(v) if !out.is_null() => {
            // SAFETY: the program passes a pointer to a live u64 (services contract).
            unsafe { out.write_unaligned(v) };
            STATUS_OK
        }
        Ok(_) => STATUS_INVALID_ARGUMENT,
        Err(s) => s,
    })
}

pub(super) extern "C" fn svc_mem_store(
    ctx: *const c_void,
    addr: u64,
    size: u32,
    value: u64,
    kind: u32,
) -> i32 {
    with_os(ctx, STATUS_PANIC, |os| crate::cache::mem_store(&os.device, addr, size, value, kind))
}

pub(super) extern "C" fn svc_cache_op(ctx: *const c_void, addr: u64, op: u32) -> i32 {
    with_os(ctx, STATUS_PANIC, |os| crate::cache::cache_op(&os.device, addr, op))
}

pub(super) extern "C" fn svc_now_cycles(ctx: *const c_void) -> u64 {
    // SAFETY: as in `with_os`: `ctx` is the `ServicesCtx` this module put in the table, alive as
    // long as the table. Reading the clock cannot panic, so no unwind guard is needed.
    let sc = unsafe { &*ctx.cast::<ServicesCtx>() };
    sc.clock.now_cycles()
}

pub(super) extern "C" fn svc_clock_hz(ctx: *const c_void) -> u64 {
    with_os(ctx, 0, |os| os.device.clock().hz())
}

pub(super) extern "C" fn svc_log(ctx: *const c_void, level: u32, msg: *const u8, len: u64) {
    with_os(ctx, (), |os| {
        // SAFETY: the program passes a buffer of `len` bytes (services contract).
        let Some(b) = (unsafe { arg_bytes(msg, len) }) else { return };
        let m = String::from_utf8_lossy(b);
        let dev = os.device.ordinal();
        match level {
            0..=19 => tracing::debug!(device = dev, "{m}"),
            20..=29 => tracing::info!(device = dev, "{m}"),
            30..=39 => tracing::warn!(device = dev, "{m}"),
            _ => tracing::error!(device = dev, "{m}"),
        }
    })
}

pub(super) extern "C" fn svc_thread_info(ctx: *const c_void) -> u64 {
    with_os(ctx, u64::MAX, |_| {
        with_chip(|tl| (u64::from(tl.thread) << 32) | u64::from(tl.threads)).unwrap_or(u64::MAX)
    })
}

pub(super) extern "C" fn svc_save_so_file(
    ctx: *const c_void,
    name: *const u8,
    name_len: u64,
    bytes: *const u8,
    len: u64,
) -> i32 {
    with_os(ctx, STATUS_PANIC, |os| {
        // SAFETY: the program passes buffers of the given lengths (services contract).
        let (Some(n), Some(b)) =
            (unsafe { arg_bytes(name, name_len) }, unsafe { arg_bytes(bytes, len) })
        else {
            return STATUS_INVALID_ARGUMENT;
        };
        let Ok(n) = std::str::from_utf8(n) else { return STATUS_BAD_NAME };
        match os.save_so_file(n, b) {
            Ok(()) => STATUS_OK,
            Err(OsError::BadName { .. }) => STATUS_BAD_NAME,
            Err(e) => {
                tracing::warn!(error = %e, "SaveSoFile");
                STATUS_IO
            }
        }
    })
}

pub(super) extern "C" fn svc_load_object(
    ctx: *const c_void,
    bytes: *const u8,
    len: u64,
    tag: *const u8,
    tag_len: u64,
) -> u64 {
    with_os(ctx, 0, |os| {
        // SAFETY: the program passes buffers of the given lengths (services contract).
        let (Some(b), Some(t)) =
            (unsafe { arg_bytes(bytes, len) }, unsafe { arg_bytes(tag, tag_len) })
        else {
            return 0;
        };
        let Ok(t) = std::str::from_utf8(t) else { return 0 };
        os.load_object(b, t).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "load_object");
            0
        })
    })
}

pub(super) extern "C" fn svc_object_symbol(
    ctx: *const c_void,
    handle: u64,
    name: *const u8,
    name_len: u64,
) -> *const c_void {
    with_os(ctx, std::ptr::null(), |os| {
        // SAFETY: the program passes a buffer of `name_len` bytes (services contract).
        let Some(n) = (unsafe { arg_bytes(name, name_len) }) else { return std::ptr::null() };
        let Ok(n) = std::str::from_utf8(n) else { return std::ptr::null() };
        let obj = lock(&os.os().state).handles.get(&handle).cloned();
        obj.and_then(|o| o.symbol(n)).unwrap_or(std::ptr::null())
    })
}

pub(super) extern "C" fn svc_close_object(ctx: *const c_void, handle: u64) -> i32 {
    with_os(ctx, STATUS_PANIC, |os| match lock(&os.os().state).handles.remove(&handle) {
        Some(_) => STATUS_OK,
        None => STATUS_INVALID_ARGUMENT,
    })
}
