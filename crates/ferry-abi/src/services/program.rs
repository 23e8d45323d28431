//! What the services table carries besides its functions: the program's identity and query
//! report, the exec hook the task runtime fills, orchestration objects and the kernel library's
//! call.

use super::*;

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

// `OrchContext` and `OrchEntryFn` live in `ferry-kernel-abi` (a user's orchestration library
// is built against that crate alone): what the AICPU program passes an orchestration entry.
pub use ferry_kernel_abi::orch_lib::{OrchContext, OrchEntryFn};

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
/// Kernel id: `out = a + b` over typed N-d views (`ferry_kernel_abi::layout`), any dtype.
pub const KERNEL_ADD_ND: u32 = 7;
/// Kernel id: `out = a * b` over typed N-d views, any dtype.
pub const KERNEL_MUL_ND: u32 = 8;
/// Kernel id: `out = x` converted to `out`'s dtype, over typed N-d views.
pub const KERNEL_CAST_ND: u32 = 9;
/// Kernel id: RMS normalisation of each row of a typed view, times a weight.
pub const KERNEL_RMSNORM_ND: u32 = 10;
/// Kernel id: softmax of each row of a typed view.
pub const KERNEL_SOFTMAX_ND: u32 = 11;
/// Kernel id: rotary position embedding of each row of a typed view.
pub const KERNEL_ROPE_ND: u32 = 12;
/// Kernel id: matrix product over typed views of shape `[M, K, N]` (f32 accumulation), on AIC.
pub const KERNEL_MATMUL_ND: u32 = 13;
/// Number of kernel ids (`0..KERNEL_COUNT`).
pub const KERNEL_COUNT: u32 = 14;

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
pub struct AicpuKernelCall {
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

abi_record!(AicpuKernelCall, size 48, align 8, [
    a @ 0, b @ 8, out @ 16, len @ 24, scalar_bits @ 32, block_idx @ 36, block_dim @ 40,
    reserved @ 44,
]);

impl AicpuKernelCall {
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
    unsafe extern "C" fn(services: *const DeviceServices, call: *const AicpuKernelCall) -> i32;
