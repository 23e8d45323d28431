//! The contract between the simulated AICPU OS and the device programs it loads (seed 004).
//!
//! Device programs (the bootstrap dispatcher, the AICPU program, orchestration objects, the
//! kernel library) are shared objects built from the crates under `device/`. They are loaded
//! into the host process by the simulated AICPU OS (`ferry_sim::aicpu_os`), never linked against
//! ferry-sim: everything they need from "the device" reaches them through one injected table of
//! `extern "C"` function pointers, [`DeviceServices`], set through each program's
//! [`EXPORT_SET_SERVICES`] export before any other entry runs (the original simulator's setter
//! injection). Only `#[repr(C)]` data crosses these boundaries, and memory is freed on the side
//! that allocated it: a program never frees what the OS handed it, and vice versa.
//!
//! | item | what |
//! |---|---|
//! | [`DeviceServices`] | the injected table: translate device addresses, register-window MMIO on both sides, spin-then-park waits, clock, log, `SaveSoFile`, the OS dynamic loader, a device-to-host doorbell |
//! | [`ProgramReport`] | what an AICPU program's query entry writes to device memory: its identity (name + build id) and what it has seen |
//! | [`ExecContext`] / [`ExecHook`] | what the AICPU program's exec entry hands the task runtime on each launched thread |
//! | [`OrchContext`] / [`OrchEntryFn`] | the entry of an orchestration object, as the AICPU program calls it |
//! | [`KernelCall`] / [`KernelFn`] | the signature of the kernel library's AICore kernels |
//! | [`fingerprint`] | the 64-bit identity of program bytes both host and dispatcher compute |
//! | `STATUS_*` | the `i32` codes every entry returns (0 = ok) |
//!
//! # Why this table has pointer fields
//!
//! STYLE R28 keeps pointers out of shared-memory records, because device memory is read by
//! another address space. [`DeviceServices`], [`ExecContext`] and [`OrchContext`] never live in
//! device memory: the OS hands their *host* address to code loaded into the *same host process*
//! (the simulated AICPU runs on host threads), so a function pointer is the only faithful way to
//! model "a call into the AICPU OS". Every such type is documented as host-process-only and has
//! no [`AbiRecord`](crate::launch::AbiRecord) image.
//!
//! # Examples
//!
//! ```
//! use ferry_abi::services::{fingerprint, fnv1a_64, FNV1A_64_OFFSET};
//! // Not an ELF: the fingerprint falls back to FNV-1a-64 of the whole buffer.
//! assert_eq!(fingerprint(b"not an elf"), fnv1a_64(b"not an elf"));
//! assert_eq!(fnv1a_64(b""), FNV1A_64_OFFSET);
//! ```

use crate::launch::{abi_record, read_c_name, write_c_name, DecodeError, InitArgs, KernelArgs};
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
/// use ferry_abi::services::{status_name, STATUS_ABI_SIZE_MISMATCH};
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

// ---------------------------------------------------------------------------------------------
// Export names
// ---------------------------------------------------------------------------------------------

/// Every program: `unsafe extern "C" fn(*const DeviceServices) -> i32`, called by the OS right
/// after loading, before any other entry.
pub const EXPORT_SET_SERVICES: &str = "ferry_set_services";
/// AICPU program: init entry, payload [`InitArgs`], launched once per device.
pub const EXPORT_AICPU_INIT: &str = "ferry_aicpu_init";
/// AICPU program: register-callable entry, payload
/// [`RegisterCallableArgs`](crate::launch::RegisterCallableArgs), launched per callable.
pub const EXPORT_AICPU_REGISTER_CALLABLE: &str = "ferry_aicpu_register_callable";
/// AICPU program: exec entry, payload the front-less [`KernelArgs`] by value, launched per run.
pub const EXPORT_AICPU_EXEC: &str = "ferry_aicpu_exec";
/// AICPU program: query entry, payload [`QueryArgs`]; writes a [`ProgramReport`].
pub const EXPORT_AICPU_QUERY: &str = "ferry_aicpu_query";
/// Orchestration object: its entry ([`OrchEntryFn`]) when the callable names none.
pub const EXPORT_ORCH_ENTRY: &str = "ferry_orch_entry";
/// Orchestration object: its config ([`OrchConfigFn`]) when the callable names none.
pub const EXPORT_ORCH_CONFIG: &str = "ferry_orch_config";
/// Kernel library: `unsafe extern "C" fn(kernel_id: u32) -> Option<KernelFn>`.
pub const EXPORT_KERNEL_LOOKUP: &str = "ferry_kernel_lookup";

/// Every AICPU entry that takes a launch payload:
/// `unsafe extern "C" fn(blob: *const u8, len: u64) -> i32`, where `blob` is the entry's
/// private copy of the launch payload (the OS copies it at launch, as CANN does, so the entry
/// owns it by value and nothing it writes there reaches the host).
pub type CpuKernelFn = unsafe extern "C" fn(blob: *const u8, len: u64) -> i32;
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
    /// The device's sys counter, in cycles.
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
    /// where the cluster has one that does not snoop AICore writes (seed 004, Path B). Writes
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

// ---------------------------------------------------------------------------------------------
// Program identity and the query report
// ---------------------------------------------------------------------------------------------

/// Capacity of a program-name field (NUL-terminated).
pub const PROGRAM_NAME_CAPACITY: usize = 48;
/// `ProgramReport::magic`: `"FRPR"`.
pub const PROGRAM_REPORT_MAGIC: u32 = u32::from_le_bytes(*b"FRPR");
/// Version of [`ProgramReport`].
pub const PROGRAM_REPORT_VERSION: u32 = 1;

/// Payload of the query entry: where to write the [`ProgramReport`].
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 8 | `result_addr` u64: device address of a [`ProgramReport`]-sized buffer |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QueryArgs {
    /// Device address of the report buffer.
    pub result_addr: u64,
}

abi_record!(QueryArgs, size 8, align 8, [result_addr @ 0]);

/// What an AICPU program reports about itself: its identity and what it has seen so far.
///
/// The loader compares `name` and `build_id` with the program it shipped; a mismatch means the
/// resident program is another one (the vendor latch) and loading fails loudly.
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 4 | `magic` ([`PROGRAM_REPORT_MAGIC`]) |
/// | 4 | 4 | `version` ([`PROGRAM_REPORT_VERSION`]) |
/// | 8 | 8 | `build_id` |
/// | 16 | 48 | `name` (NUL-terminated) |
/// | 64 | 4 | `kernel_args_size`: `size_of::<KernelArgs>()` the program was built with |
/// | 68 | 4 | `init_calls` |
/// | 72 | 4 | `init_device_id` (from the last `InitArgs`) |
/// | 76 | 4 | `register_calls` |
/// | 80 | 8 | `exec_calls` |
/// | 88 | 4 | `last_exec_len`: length of the last exec blob |
/// | 92 | 4 | `last_exec_status` |
/// | 96 | 112 | `last_exec_blob`: the first 112 bytes of the last exec blob, as received |
/// | 208 | 4 | `last_callable_id` (-1 none) |
/// | 212 | 4 | `callables_loaded` |
/// | 216 | 32 | `last_orch_name`: name the last registered orchestration object reported |
/// | 248 | 4 | `last_exec_threads`: the thread count the last exec call was launched with |
/// | 252 | 4 | `exec_thread_mask`: bit `i` set once exec ran as thread `i` (`i < 32`) |
///
/// Size 256, align 8.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProgramReport {
    /// [`PROGRAM_REPORT_MAGIC`].
    pub magic: u32,
    /// [`PROGRAM_REPORT_VERSION`].
    pub version: u32,
    /// The program's build id (set by the build that produced it).
    pub build_id: u64,
    /// The program's name, NUL-terminated.
    pub name: [u8; PROGRAM_NAME_CAPACITY],
    /// `size_of::<KernelArgs>()` in the program's build.
    pub kernel_args_size: u32,
    /// How many times init latched [`InitArgs`]: once per device (a
    /// repeat of the latched arguments, from a second loader on the device, is no re-init).
    pub init_calls: u32,
    /// `device_id` of the last `InitArgs`.
    pub init_device_id: u32,
    /// How many times register-callable ran.
    pub register_calls: u32,
    /// How many exec calls (one per launched thread) ran.
    pub exec_calls: u64,
    /// Length of the last exec blob.
    pub last_exec_len: u32,
    /// Status the last exec returned.
    pub last_exec_status: i32,
    /// The first 112 bytes of the last exec blob, exactly as received.
    pub last_exec_blob: [u8; 112],
    /// Callable id of the last register call (-1 none).
    pub last_callable_id: i32,
    /// How many callable slots hold a loaded orchestration object.
    pub callables_loaded: u32,
    /// Name reported by the last registered orchestration object.
    pub last_orch_name: [u8; 32],
    /// The thread count the last exec call was launched with.
    pub last_exec_threads: u32,
    /// Bit `i` set once exec ran as AICPU thread `i` (`i < 32`).
    pub exec_thread_mask: u32,
}

abi_record!(ProgramReport, size 256, align 8, [
    magic @ 0,
    version @ 4,
    build_id @ 8,
    name @ 16,
    kernel_args_size @ 64,
    init_calls @ 68,
    init_device_id @ 72,
    register_calls @ 76,
    exec_calls @ 80,
    last_exec_len @ 88,
    last_exec_status @ 92,
    last_exec_blob @ 96,
    last_callable_id @ 208,
    callables_loaded @ 212,
    last_orch_name @ 216,
    last_exec_threads @ 248,
    exec_thread_mask @ 252,
]);

impl ProgramReport {
    /// A fresh report for program `name` with `build_id`.
    ///
    /// # Errors
    ///
    /// When `name` does not fit [`PROGRAM_NAME_CAPACITY`] with its NUL.
    pub fn new(name: &str, build_id: u64) -> Result<ProgramReport, crate::launch::EncodeError> {
        let mut r = ProgramReport {
            magic: PROGRAM_REPORT_MAGIC,
            version: PROGRAM_REPORT_VERSION,
            build_id,
            name: [0; PROGRAM_NAME_CAPACITY],
            kernel_args_size: core::mem::size_of::<KernelArgs>() as u32,
            init_calls: 0,
            init_device_id: 0,
            register_calls: 0,
            exec_calls: 0,
            last_exec_len: 0,
            last_exec_status: 0,
            last_exec_blob: [0; 112],
            last_callable_id: -1,
            callables_loaded: 0,
            last_orch_name: [0; 32],
            last_exec_threads: 0,
            exec_thread_mask: 0,
        };
        write_c_name(&mut r.name, name)?;
        Ok(r)
    }

    /// The program name.
    ///
    /// # Errors
    ///
    /// When the field is not a NUL-terminated UTF-8 string.
    pub fn name(&self) -> Result<&str, DecodeError> {
        read_c_name(&self.name)
    }

    /// The name the last registered orchestration object reported.
    ///
    /// # Errors
    ///
    /// When the field is not a NUL-terminated UTF-8 string.
    pub fn last_orch_name(&self) -> Result<&str, DecodeError> {
        read_c_name(&self.last_orch_name)
    }

    /// The last exec blob, decoded as the program saw it (at most 112 bytes were kept).
    pub fn last_exec_args(&self) -> Option<KernelArgs> {
        let len = (self.last_exec_len as usize).min(self.last_exec_blob.len());
        <KernelArgs as crate::launch::AbiRecord>::from_bytes(&self.last_exec_blob[..len]).ok()
    }
}

// ---------------------------------------------------------------------------------------------
// The exec hook (filled by the task runtime)
// ---------------------------------------------------------------------------------------------

/// What the AICPU program's exec entry hands the task runtime on each launched AICPU thread.
///
/// Host-process-only (module docs). Built fresh for every call; nothing in it outlives the call.
#[derive(Clone, Copy, Debug)]
pub struct ExecContext<'a> {
    /// The OS services.
    pub services: &'a DeviceServices,
    /// The front-less per-run payload, by value (already checked against this build's stamp).
    pub args: KernelArgs,
    /// This thread's position among the launched threads (`0..threads`).
    pub thread: u32,
    /// How many AICPU threads the launch asked for.
    pub threads: u32,
    /// The per-device invariants latched by the init entry.
    pub init: InitArgs,
    /// A snapshot of the callable table: the orchestration entry of each registered callable.
    pub orch_entries: [Option<OrchEntryFn>; crate::launch::MAX_CALLABLES as usize],
}

/// The task runtime's AICPU entry. The AICPU program's exec export decodes and checks the
/// `KernelArgs`, then calls the hook once per launched thread with an [`ExecContext`].
///
/// Contract for the implementor (the device half of `ferry-runtime`):
/// - it runs on every launched AICPU thread concurrently; `ctx.thread` says which;
/// - it must not keep `ctx` (or anything borrowed from it) past its return;
/// - it returns `Err(code)` with `code >= STATUS_RUNTIME_BASE` for its own failures; the code
///   reaches the host as the launch's status;
/// - it waits only through `ctx.services` (`aicpu_wait`, `core_wait`), never with a bare spin.
///
/// Until the runtime lands, the AICPU programs use a hook that does nothing.
pub type ExecHook = fn(ctx: &ExecContext<'_>) -> Result<(), i32>;

// ---------------------------------------------------------------------------------------------
// Orchestration objects
// ---------------------------------------------------------------------------------------------

/// What the AICPU program passes an orchestration object's entry (host-process-only).
///
/// `api` is the task runtime's submission table (tasks, scopes), opaque here: its layout
/// belongs to `ferry-runtime`, versioned by `api_version`. Null when no runtime is attached.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OrchContext {
    /// The OS services.
    pub services: *const DeviceServices,
    /// `KernelArgs::runtime_args` of the run.
    pub runtime_args: u64,
    /// The callable being run.
    pub callable_id: u32,
    /// Version of the table behind `api` (0 when `api` is null).
    pub api_version: u32,
    /// The runtime's submission table, or null.
    pub api: *const c_void,
}

/// An orchestration object's entry. Returns a `STATUS_*`.
pub type OrchEntryFn = unsafe extern "C" fn(ctx: *const OrchContext) -> i32;

/// What an orchestration object's config export fills in.
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 32 | `name` (NUL-terminated) |
/// | 32 | 4 | `expected_args`: tensors + scalars the entry reads |
/// | 36 | 4 | `reserved` |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OrchConfig {
    /// The orchestration's name.
    pub name: [u8; 32],
    /// How many arguments its entry reads.
    pub expected_args: u32,
    /// Zero.
    pub reserved: u32,
}

abi_record!(OrchConfig, size 40, align 4, [name @ 0, expected_args @ 32, reserved @ 36]);

/// An orchestration object's config export: fills `out`, returns a `STATUS_*`.
pub type OrchConfigFn = unsafe extern "C" fn(out: *mut OrchConfig) -> i32;

// ---------------------------------------------------------------------------------------------
// Kernel library
// ---------------------------------------------------------------------------------------------

// The one kernel numbering: the task runtime's seven kernels (`ferry_runtime::device::kernels`
// names these constants as its `K_*` ids) and the kernel library (`device/kernels`) use these
// ids. An id at or above `KERNEL_COUNT` is unknown everywhere (`None` from the library's
// lookup, `SubmitError::UnknownKernel` from the runtime).

/// Kernel id: `out[i] = a[i] + b[i]` (f32).
pub const KERNEL_ADD: u32 = 0;
/// Kernel id: `out[i] = a[i] * b[i]` (f32).
pub const KERNEL_MUL: u32 = 1;
/// Kernel id: `out[i] = a[i] * scalar` (f32).
pub const KERNEL_SCALE: u32 = 2;
/// Kernel id: `out[i] = a[i]` (f32).
pub const KERNEL_COPY: u32 = 3;
/// Kernel id: `out[i] = a[i] + scalar` (f32).
pub const KERNEL_ADD_SCALAR: u32 = 4;
/// Kernel id: one page of paged attention (partial softmax state), on an AIC core.
pub const KERNEL_ATTN_PARTIAL: u32 = 5;
/// Kernel id: merge of paged attention's partial states.
pub const KERNEL_ATTN_MERGE: u32 = 6;
/// Number of kernel ids (`0..KERNEL_COUNT`).
pub const KERNEL_COUNT: u32 = 7;

/// Arguments of one elementwise kernel call, over device addresses.
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 8 | `a` |
/// | 8 | 8 | `b` (0 when unused) |
/// | 16 | 8 | `out` |
/// | 24 | 8 | `len`: elements (f32) |
/// | 32 | 4 | `scalar` (f32 bits) |
/// | 36 | 4 | `block_idx` |
/// | 40 | 4 | `block_dim`: the call handles elements `block_idx, block_idx + block_dim, …` chunks |
/// | 44 | 4 | `reserved` |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KernelCall {
    /// Device address of input `a`.
    pub a: u64,
    /// Device address of input `b` (0 when unused).
    pub b: u64,
    /// Device address of the output.
    pub out: u64,
    /// Number of f32 elements.
    pub len: u64,
    /// The scalar operand, as `f32::to_bits`.
    pub scalar_bits: u32,
    /// This call's block index.
    pub block_idx: u32,
    /// How many blocks split the range (0 or 1: one block does all).
    pub block_dim: u32,
    /// Zero.
    pub reserved: u32,
}

abi_record!(KernelCall, size 48, align 8, [
    a @ 0, b @ 8, out @ 16, len @ 24, scalar_bits @ 32, block_idx @ 36, block_dim @ 40,
    reserved @ 44,
]);

impl KernelCall {
    /// The element range `[start, end)` this block handles.
    pub fn block_range(&self) -> (u64, u64) {
        let dim = u64::from(self.block_dim.max(1));
        let chunk = self.len.div_ceil(dim);
        let start = (u64::from(self.block_idx) * chunk).min(self.len);
        (start, (start + chunk).min(self.len))
    }
}

/// A kernel of the kernel library. Returns a `STATUS_*`.
pub type KernelFn =
    unsafe extern "C" fn(services: *const DeviceServices, call: *const KernelCall) -> i32;

// ---------------------------------------------------------------------------------------------
// Fingerprint
// ---------------------------------------------------------------------------------------------

/// FNV-1a-64 offset basis.
pub const FNV1A_64_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a-64 prime.
pub const FNV1A_64_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a-64 of `bytes`.
pub const fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut h = FNV1A_64_OFFSET;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(FNV1A_64_PRIME);
        i += 1;
    }
    h
}

/// The 64-bit identity of a program's bytes, computed independently by the host loader and by
/// the bootstrap dispatcher so that both name the file alike with no side channel
/// (launch.md §2.2 "What is fp").
///
/// The first 8 bytes (little-endian) of the ELF64 `NT_GNU_BUILD_ID` note found through the
/// `PT_NOTE` program headers, when the buffer is a well-formed little-endian ELF64 with such a
/// note of at least 8 bytes; otherwise FNV-1a-64 over the whole buffer.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    elf_build_id_64(bytes).unwrap_or_else(|| fnv1a_64(bytes))
}

/// The first 8 bytes of the GNU build-id note of a little-endian ELF64, if it has one.
pub fn elf_build_id_64(b: &[u8]) -> Option<u64> {
    const PT_NOTE: u32 = 4;
    const NT_GNU_BUILD_ID: u32 = 3;
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    if b.get(..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
        return None;
    }
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    if phentsize < 56 {
        return None;
    }
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(ph)? != PT_NOTE {
            continue;
        }
        let off = usize::try_from(u64_at(ph + 8)?).ok()?;
        let size = usize::try_from(u64_at(ph + 32)?).ok()?;
        let end = off.checked_add(size)?;
        let mut p = off;
        while p.checked_add(12)? <= end {
            let namesz = u32_at(p)? as usize;
            let descsz = u32_at(p + 4)? as usize;
            let ty = u32_at(p + 8)?;
            let name_at = p + 12;
            let desc_at = name_at.checked_add(namesz.checked_add(3)? & !3)?;
            let next = desc_at.checked_add(descsz.checked_add(3)? & !3)?;
            if ty == NT_GNU_BUILD_ID && namesz == 4 && b.get(name_at..name_at + 4)? == b"GNU\0" {
                if descsz >= 8 {
                    return u64_at(desc_at);
                }
                return None;
            }
            p = next;
        }
    }
    None
}

/// The file name the dispatcher gives the inner program: `inner_<fp as 16 hex>_<device>.so`.
///
/// Writes into `out` and returns the used prefix as `&str`; `None` if `out` is too small
/// (48 bytes always suffice).
///
/// # Examples
///
/// ```
/// use ferry_abi::services::inner_so_name;
/// let mut buf = [0u8; 64];
/// assert_eq!(inner_so_name(0xab, 3, &mut buf), Some("inner_00000000000000ab_3.so"));
/// ```
pub fn inner_so_name(fp: u64, device_id: u64, out: &mut [u8]) -> Option<&str> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut n = 0;
    let mut push = |out: &mut [u8], c: u8| -> Option<()> {
        *out.get_mut(n)? = c;
        n += 1;
        Some(())
    };
    for &c in b"inner_" {
        push(out, c)?;
    }
    for i in (0..16).rev() {
        push(out, HEX[((fp >> (i * 4)) & 0xF) as usize])?;
    }
    push(out, b'_')?;
    let mut digits = [0u8; 20];
    let mut d = 0;
    let mut v = device_id;
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in (0..d).rev() {
        push(out, digits[i])?;
    }
    for &c in b".so" {
        push(out, c)?;
    }
    core::str::from_utf8(&out[..n]).ok()
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::launch::AbiRecord;
    use std::vec::Vec;

    /// A minimal ELF64 with one PT_NOTE holding a GNU build-id note.
    fn elf_with_build_id(id: &[u8]) -> Vec<u8> {
        let mut b = std::vec![0u8; 64 + 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        let note_off = b.len() as u64;
        let mut note = Vec::new();
        note.extend_from_slice(&4u32.to_le_bytes());
        note.extend_from_slice(&(id.len() as u32).to_le_bytes());
        note.extend_from_slice(&3u32.to_le_bytes());
        note.extend_from_slice(b"GNU\0");
        note.extend_from_slice(id);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        b[64..68].copy_from_slice(&4u32.to_le_bytes());
        b[64 + 8..64 + 16].copy_from_slice(&note_off.to_le_bytes());
        b[64 + 32..64 + 40].copy_from_slice(&(note.len() as u64).to_le_bytes());
        b.extend_from_slice(&note);
        b
    }

    #[test]
    fn fingerprint_reads_build_id_or_falls_back() {
        let id = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        let elf = elf_with_build_id(&id);
        assert_eq!(fingerprint(&elf), u64::from_le_bytes(id[..8].try_into().unwrap()));
        let other = elf_with_build_id(&[9u8; 20]);
        assert_ne!(fingerprint(&elf), fingerprint(&other));
        // Too-short build id, truncated ELF, non-ELF: FNV fallback.
        let short = elf_with_build_id(&[1, 2, 3]);
        assert_eq!(fingerprint(&short), fnv1a_64(&short));
        assert_eq!(fingerprint(&elf[..70]), fnv1a_64(&elf[..70]));
        assert_eq!(fingerprint(b"hello"), fnv1a_64(b"hello"));
        // Known FNV-1a-64 vector.
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn names_and_records() {
        let mut buf = [0u8; 48];
        assert_eq!(
            inner_so_name(u64::MAX, u64::MAX, &mut buf),
            Some("inner_ffffffffffffffff_18446744073709551615.so")
        );
        let mut small = [0u8; 8];
        assert_eq!(inner_so_name(1, 0, &mut small), None);
        let r = ProgramReport::new("device-orchestrated", 42).unwrap();
        assert_eq!(r.name(), Ok("device-orchestrated"));
        assert_eq!(ProgramReport::from_bytes(r.as_bytes()), Ok(r));
        assert_eq!(r.last_exec_args(), None);
        assert!(ProgramReport::new(&"x".repeat(48), 0).is_err());
        let k = KernelCall { len: 10, block_idx: 2, block_dim: 3, ..Default::default() };
        assert_eq!(k.block_range(), (8, 10));
        assert_eq!(KernelCall { len: 5, ..Default::default() }.block_range(), (0, 5));
    }

    #[test]
    fn status_names_are_lowercase() {
        for c in 0..=STATUS_UNKNOWN_KERNEL {
            let s = status_name(c);
            assert!(s.starts_with(|ch: char| ch.is_lowercase()), "{s}");
        }
        assert_eq!(status_name(-7), "unknown status");
    }
}
