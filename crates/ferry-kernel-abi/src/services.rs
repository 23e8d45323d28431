//! The AICPU OS services every program ferry loads receives, and the status codes every entry
//! returns.
//!
//! Device programs (ferry's own AICPU programs and kernel libraries alike) are loaded into the
//! host process by the simulated AICPU OS; everything they need from "the device" reaches them
//! through one injected table of `extern "C"` function pointers, [`DeviceServices`], set through
//! each program's [`EXPORT_SET_SERVICES`] export before any other entry runs. A kernel's device
//! entry receives the same table with every call and reaches device memory only through its
//! `translate` function.
//!
//! [`DeviceServices`] never lives in device memory: the OS hands its *host* address to code
//! loaded into the *same host process* (the simulated AICPU runs on host threads), so a function
//! pointer is the faithful model of "a call into the AICPU OS".
//!
//! # Examples
//!
//! ```
//! use ferry_kernel_abi::services::{status_name, STATUS_ABI_SIZE_MISMATCH};
//! assert_eq!(status_name(STATUS_ABI_SIZE_MISMATCH), "abi size mismatch");
//! assert_eq!(status_name(1234), "runtime-defined failure");
//! ```

use core::ffi::c_void;

// ---------------------------------------------------------------------------------------------
// Status codes
// ---------------------------------------------------------------------------------------------

/// Entry succeeded.
pub const STATUS_OK: i32 = 0;
/// A null or otherwise invalid argument (e.g. a null device-args pointer).
pub const STATUS_INVALID_ARGUMENT: i32 = 1;
/// The entry is not supported by this program.
pub const STATUS_UNSUPPORTED: i32 = 2;
/// The launch blob is not the size of the record this program was built against.
pub const STATUS_ABI_SIZE_MISMATCH: i32 = 3;
/// The record's ABI version stamp is not this program's.
pub const STATUS_ABI_VERSION_MISMATCH: i32 = 4;
/// The services table was never injected (or is from another ABI version).
pub const STATUS_NO_SERVICES: i32 = 5;
/// A device address could not be translated (outside a live allocation).
pub const STATUS_BAD_ADDRESS: i32 = 6;
/// The AICPU OS could not write or load a file.
pub const STATUS_IO: i32 = 7;
/// A name field was malformed.
pub const STATUS_BAD_NAME: i32 = 8;
/// A symbol was not found in a loaded object.
pub const STATUS_MISSING_SYMBOL: i32 = 9;
/// `exec` ran before `init`.
pub const STATUS_NOT_INITIALISED: i32 = 10;
/// The entry panicked (caught at the boundary).
pub const STATUS_PANIC: i32 = 11;
/// A callable id outside `0..MAX_CALLABLES`, or one with no orchestration loaded.
pub const STATUS_BAD_CALLABLE: i32 = 12;
/// An unknown kernel id.
pub const STATUS_UNKNOWN_KERNEL: i32 = 13;
/// First code the task runtime may use for its own failures (`ExecHook` errors).
pub const STATUS_RUNTIME_BASE: i32 = 1000;

/// A short lowercase description of a status code.
///
/// # Examples
///
/// ```
/// use ferry_kernel_abi::services::{status_name, STATUS_ABI_SIZE_MISMATCH};
/// assert_eq!(status_name(STATUS_ABI_SIZE_MISMATCH), "abi size mismatch");
/// assert_eq!(status_name(1234), "runtime-defined failure");
/// ```
pub const fn status_name(code: i32) -> &'static str {
    match code {
        STATUS_OK => "ok",
        STATUS_INVALID_ARGUMENT => "invalid argument",
        STATUS_UNSUPPORTED => "unsupported entry",
        STATUS_ABI_SIZE_MISMATCH => "abi size mismatch",
        STATUS_ABI_VERSION_MISMATCH => "abi version mismatch",
        STATUS_NO_SERVICES => "services table not injected",
        STATUS_BAD_ADDRESS => "bad device address",
        STATUS_IO => "device file i/o failed",
        STATUS_BAD_NAME => "malformed name",
        STATUS_MISSING_SYMBOL => "missing symbol",
        STATUS_NOT_INITIALISED => "program not initialised",
        STATUS_PANIC => "entry panicked",
        STATUS_BAD_CALLABLE => "bad callable id",
        STATUS_UNKNOWN_KERNEL => "unknown kernel id",
        c if c >= STATUS_RUNTIME_BASE => "runtime-defined failure",
        _ => "unknown status",
    }
}

/// Every program: `unsafe extern "C" fn(*const DeviceServices) -> i32`, called by the OS right
/// after loading, before any other entry.
pub const EXPORT_SET_SERVICES: &str = "ferry_set_services";
/// The [`EXPORT_SET_SERVICES`] export.
pub type SetServicesFn = unsafe extern "C" fn(services: *const DeviceServices) -> i32;

// ---------------------------------------------------------------------------------------------
// The services table
// ---------------------------------------------------------------------------------------------

/// A register wait predicate: non-zero when `value` is what the waiter waits for. Must not
/// unwind.
pub type RegPredFn = unsafe extern "C" fn(user: *mut c_void, value: u32) -> u8;
/// A wait condition: non-zero when it holds. Must not unwind.
pub type CondFn = unsafe extern "C" fn(user: *mut c_void) -> u8;
/// `timeout_ns` meaning "no bound".
pub const WAIT_FOREVER: u64 = u64::MAX;
/// Flag in `core_wait`'s result: the predicate held (the low 32 bits hold the value).
pub const WAIT_SATISFIED: u64 = 1 << 32;

/// The barrier a caller of [`DeviceServices::now_cycles`] issues first when its timestamp must
/// follow an observation of another thread's store (the read itself is not ordered after the
/// caller's earlier loads): every earlier load of this thread completes before anything after
/// it runs. `lfence` on the simulator's x86-64 hosts (the kernel's own ordered TSC read); a
/// compiler fence elsewhere, where the simulator's counter is `CLOCK_MONOTONIC`, whose read the
/// kernel orders itself. On the AICPU's arm64 the same place takes `isb`.
#[inline]
pub fn order_after_loads() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` (SSE2, part of the x86-64 baseline) has no operands and touches no memory.
    unsafe {
        core::arch::x86_64::_mm_lfence()
    };
    // SeqCst: the strongest compiler-only fence; elsewhere it at least keeps the compiler from
    // moving the caller's later loads above its earlier ones.
    #[cfg(not(target_arch = "x86_64"))]
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
}

/// Version of [`DeviceServices`]; a program refuses a table of another version.
pub const SERVICES_ABI_VERSION: u32 = 3;

/// `mem_load` kind: a plain load.
pub const MEM_LOAD_PLAIN: u32 = 0;
/// `mem_load` kind: a `volatile` load (the compiler may not cache it; the CPU still reads through
/// its data cache).
pub const MEM_LOAD_VOLATILE: u32 = 1;
/// `mem_load` kind: an acquire load (`ldar`): orders later accesses, still reads through the
/// data cache.
pub const MEM_LOAD_ACQUIRE: u32 = 2;
/// `mem_store` kind: a plain store.
pub const MEM_STORE_PLAIN: u32 = 0;
/// `mem_store` kind: a release store (`stlr`).
pub const MEM_STORE_RELEASE: u32 = 1;
/// `cache_op`: `dc civac`, clean and invalidate the line holding the address to the point of
/// coherency.
pub const CACHE_OP_CIVAC: u32 = 1;
/// `cache_op`: `dc ivac`, invalidate the line holding the address (no write-back).
pub const CACHE_OP_IVAC: u32 = 2;
/// Bytes of one data-cache line of the AICPU clusters.
pub const CACHE_LINE_BYTES: u64 = 64;

/// The AICPU OS services a device program may call, injected through [`EXPORT_SET_SERVICES`].
///
/// Host-process-only (see the module docs): the OS owns the table and keeps it alive, at a
/// stable address, for as long as any program it loaded is loaded. Every function takes the
/// table's own `ctx` as its first argument and may be called from any AICPU (or AICore) thread.
/// Functions that act on "the current chip" (register MMIO, waits, thread identity) use the
/// chip of the launch the calling thread is running; called outside a launch they fail.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DeviceServices {
    /// [`SERVICES_ABI_VERSION`].
    pub abi_version: u32,
    /// `size_of::<DeviceServices>()` of the OS that built the table.
    pub size: u32,
    /// Opaque OS context, passed back as the first argument of every function.
    pub ctx: *const c_void,
    /// Translates `[addr, addr+len)` of this device's address space to a pointer the device
    /// code may read and write; null when the range is not inside one live allocation.
    pub translate: extern "C" fn(ctx: *const c_void, addr: u64, len: u64) -> *mut u8,
    /// Reads the 32-bit register at device address `addr` (a register-window base from the
    /// `regs` table plus a register offset), with Acquire ordering. Returns 0 for an address
    /// outside every window.
    pub reg_read: extern "C" fn(ctx: *const c_void, addr: u64) -> u32,
    /// AICPU-side register write (Release) at device address `addr`; wakes the core that owns
    /// the window (the simulated MMIO write). Returns a `STATUS_*`.
    pub reg_write_aicpu: extern "C" fn(ctx: *const c_void, addr: u64, value: u32) -> i32,
    /// Core-side register write (Release) at device address `addr`; wakes the AICPU threads.
    /// Returns a `STATUS_*`.
    pub reg_write_core: extern "C" fn(ctx: *const c_void, addr: u64, value: u32) -> i32,
    /// Core side: spins briefly, then parks until `pred(user, register at addr) != 0`, or
    /// `timeout_ns` ([`WAIT_FOREVER`]: no bound) passes. Returns [`WAIT_SATISFIED`] `|` the
    /// value that satisfied it, or 0 on timeout or for an address outside every window.
    pub core_wait: extern "C" fn(
        ctx: *const c_void,
        addr: u64,
        pred: RegPredFn,
        user: *mut c_void,
        timeout_ns: u64,
    ) -> u64,
    /// AICPU side: spins briefly, then parks until `cond(user) != 0` or `timeout_ns` passes;
    /// woken by every core-side register write and by `notify_aicpu`. Returns 1 when the
    /// condition held, 0 on timeout.
    pub aicpu_wait:
        extern "C" fn(ctx: *const c_void, cond: CondFn, user: *mut c_void, timeout_ns: u64) -> u8,
    /// Wakes every AICPU thread parked in `aicpu_wait`.
    pub notify_aicpu: extern "C" fn(ctx: *const c_void),
    /// The device's sys counter, in cycles. As a counter read without a barrier, it is not
    /// ordered after the caller's earlier loads: a caller that timestamps an observation of
    /// another thread's store issues [`order_after_loads`] first.
    pub now_cycles: extern "C" fn(ctx: *const c_void) -> u64,
    /// The sys counter's frequency in Hz.
    pub clock_hz: extern "C" fn(ctx: *const c_void) -> u64,
    /// Logs a UTF-8 message at a `LOG_LEVEL_*` level.
    pub log: extern "C" fn(ctx: *const c_void, level: u32, msg: *const u8, len: u64),
    /// The calling thread's launch position: `thread << 32 | threads`; `u64::MAX` outside a
    /// launch.
    pub thread_info: extern "C" fn(ctx: *const c_void) -> u64,
    /// `SaveSoFile`: writes `bytes` as the file `name` (a plain basename) into this process's
    /// device directory, via a temp file and a rename. Returns a `STATUS_*`. With the device's
    /// "first saved SO wins" quirk on, every call after the first returns [`STATUS_OK`] without
    /// writing (the vendor latch the loader must detect).
    pub save_so_file: extern "C" fn(
        ctx: *const c_void,
        name: *const u8,
        name_len: u64,
        bytes: *const u8,
        len: u64,
    ) -> i32,
    /// The OS dynamic loader: writes `bytes` to a file named after `tag` in this process's
    /// device directory, loads it, unlinks the file and returns a handle (0 on failure).
    pub load_object: extern "C" fn(
        ctx: *const c_void,
        bytes: *const u8,
        len: u64,
        tag: *const u8,
        tag_len: u64,
    ) -> u64,
    /// Looks up `name` in a loaded object; null when absent or when the handle is unknown.
    pub object_symbol: extern "C" fn(
        ctx: *const c_void,
        handle: u64,
        name: *const u8,
        name_len: u64,
    ) -> *const c_void,
    /// Unloads an object loaded by `load_object`. Returns a `STATUS_*`.
    pub close_object: extern "C" fn(ctx: *const c_void, handle: u64) -> i32,
    /// Device-to-host doorbell: rings the host callback registered under `key` (by convention
    /// the device address of a DFX transport region) with `queue` (the ready queue just
    /// published). Nothing happens when no callback is registered. Called on cold paths only
    /// (a DFX buffer switch), never per record.
    pub notify_host: extern "C" fn(ctx: *const c_void, key: u64, queue: u32),
    /// A load of `size` (4 or 8) bytes at the naturally aligned device address `addr`, of kind
    /// `MEM_LOAD_*`, as the calling thread's CPU issues it: through its cluster's data cache
    /// where the cluster has one that does not snoop AICore writes (docs/design/launch.md, Path B). Writes
    /// the value to `out`; returns a `STATUS_*` (`STATUS_BAD_ADDRESS` outside live memory or
    /// misaligned).
    pub mem_load:
        extern "C" fn(ctx: *const c_void, addr: u64, size: u32, kind: u32, out: *mut u64) -> i32,
    /// A store of the low `size` (4 or 8) bytes of `value` at `addr`, of kind `MEM_STORE_*`,
    /// through the calling thread's data cache as `mem_load`. Returns a `STATUS_*`.
    pub mem_store:
        extern "C" fn(ctx: *const c_void, addr: u64, size: u32, value: u64, kind: u32) -> i32,
    /// A data-cache maintenance instruction (`CACHE_OP_*`) by virtual address, issued at EL0 by
    /// the calling thread. Returns a `STATUS_*`; an instruction the OS traps and ignores returns
    /// `STATUS_OK` (it looks as if it ran).
    pub cache_op: extern "C" fn(ctx: *const c_void, addr: u64, op: u32) -> i32,
}

// SAFETY: the table is immutable after the OS builds it; `ctx` points at OS state that is
// itself `Sync` and outlives the table; the function pointers are plain code addresses.
unsafe impl Send for DeviceServices {}
// SAFETY: as for Send: nothing in the table is mutated after construction.
unsafe impl Sync for DeviceServices {}

impl DeviceServices {
    /// Whether this table has the version and size this build expects.
    pub fn is_compatible(&self) -> bool {
        self.abi_version == SERVICES_ABI_VERSION
            && self.size as usize == core::mem::size_of::<DeviceServices>()
    }

    /// [`Self::translate`] as a byte slice.
    ///
    /// # Safety
    ///
    /// The caller must not create overlapping live `&mut` slices, and must not keep the slice
    /// past the lifetime of the allocation it points into.
    pub unsafe fn bytes_mut<'a>(&self, addr: u64, len: u64) -> Option<&'a mut [u8]> {
        let p = (self.translate)(self.ctx, addr, len);
        if p.is_null() {
            return None;
        }
        // SAFETY: `translate` returned a non-null pointer to `len` bytes inside one live
        // allocation; exclusivity and lifetime are the caller's obligations above.
        Some(unsafe { core::slice::from_raw_parts_mut(p, len as usize) })
    }

    /// Logs `msg` at `level`.
    pub fn log_str(&self, level: u32, msg: &str) {
        (self.log)(self.ctx, level, msg.as_ptr(), msg.len() as u64)
    }

    /// [`Self::core_wait`] with a Rust predicate; `None` timeout waits for ever. Returns the
    /// value that satisfied `pred`, or `None` on timeout.
    pub fn core_wait_with(
        &self,
        addr: u64,
        pred: &mut dyn FnMut(u32) -> bool,
        timeout: Option<core::time::Duration>,
    ) -> Option<u32> {
        unsafe extern "C" fn tramp(user: *mut c_void, value: u32) -> u8 {
            // SAFETY: `user` is the `&mut &mut dyn FnMut` below, live for the whole wait.
            let f = unsafe { &mut *user.cast::<&mut dyn FnMut(u32) -> bool>() };
            u8::from(f(value))
        }
        let mut pred = pred;
        let user = (&mut pred as *mut &mut dyn FnMut(u32) -> bool).cast::<c_void>();
        let r = (self.core_wait)(self.ctx, addr, tramp, user, timeout_ns(timeout));
        (r & WAIT_SATISFIED != 0).then_some(r as u32)
    }

    /// [`Self::aicpu_wait`] with a Rust condition; `None` timeout waits for ever. `false` when
    /// the timeout passed first.
    pub fn aicpu_wait_with(
        &self,
        cond: &mut dyn FnMut() -> bool,
        timeout: Option<core::time::Duration>,
    ) -> bool {
        unsafe extern "C" fn tramp(user: *mut c_void) -> u8 {
            // SAFETY: `user` is the `&mut &mut dyn FnMut` below, live for the whole wait.
            let f = unsafe { &mut *user.cast::<&mut dyn FnMut() -> bool>() };
            u8::from(f())
        }
        let mut cond = cond;
        let user = (&mut cond as *mut &mut dyn FnMut() -> bool).cast::<c_void>();
        (self.aicpu_wait)(self.ctx, tramp, user, timeout_ns(timeout)) != 0
    }
}

fn timeout_ns(t: Option<core::time::Duration>) -> u64 {
    t.map_or(WAIT_FOREVER, |d| u64::try_from(d.as_nanos()).unwrap_or(WAIT_FOREVER - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_are_lowercase() {
        for c in 0..=STATUS_UNKNOWN_KERNEL {
            let s = status_name(c);
            assert!(s.starts_with(|ch: char| ch.is_lowercase()), "{s}");
        }
        assert_eq!(status_name(-7), "unknown status");
    }
}
