//! The orchestration-library ABI: the records a user's orchestration library exports and the
//! table ferry serves its functions, all `#[repr(C)]` with fixed sizes.
//!
//! An orchestration library is a `cdylib` that exports [`EXPORT_ORCH_LIBRARY`], a function
//! returning its [`OrchLibraryDesc`], and one [`OrchEntryFn`] per orchestration function under
//! the name [`ORCH_FN_PREFIX`]` + <function name>`. ferry registers a function as a callable:
//! device-orchestrated, the AICPU program loads the library through the AICPU OS and calls the
//! function's export on the orchestrator thread while the schedulers run the graph; host-built,
//! the same export runs on the host while the run is prepared and the graph it submits is
//! validated and uploaded. Either way the export receives an [`OrchContext`] whose `lib_api`
//! is an [`OrchLibApi`]: the function's tensors and scalars, task submission, scopes,
//! runtime-allocated tensors and reads of device tensor values.
//!
//! # Records
//!
//! | record | bytes | what |
//! |---|---:|---|
//! | [`OrchLibraryDesc`] | 64 | `magic` `"FRYORCHL"` at 0, `abi_version` at 8, `desc_bytes` at 12, `entry_bytes` at 16, `function_count` at 20, `functions` at 24, `name` at 32 |
//! | [`OrchFunctionEntry`] | 48 | `name` at 0 (32), `tensors` at 32, `scalars` at 36, `entry` at 40 |
//! | [`OrchArg`] | 88 | `tensor` at 0, `dir` at 4, `dtype` at 8, `ndims` at 12, `offset` at 16, `shape` at 24 (4 × u64), `strides` at 56 (4 × u64) |
//! | [`OrchScalar`] | 16 | `dtype` at 0, `reserved` at 4, `bits` at 8 |
//! | [`OrchTask`] | 648 | `kernel` at 0, `block_dim` at 4, `n_args` at 8, `n_scalars` at 12, `n_after` at 16, `flags` at 20, `args` at 24 (6 × 88), `scalars` at 552 (4 × 16), `after` at 616 (4 × u64) |
//! | [`OrchLibApi`] | 88 | `version` at 0, `size` at 4, `user` at 8, then ten function pointers |
//!
//! # Versioning rule
//!
//! [`ORCH_LIB_ABI_VERSION`] changes whenever a record's layout or meaning changes. The
//! descriptor's first 12 bytes (`magic`, `abi_version`) are the same in every version, so a
//! loader reads only those before it knows the version, then checks both record sizes, then
//! bounds `function_count` before it copies the table. The table ferry serves carries its own
//! `version` and `size`; a function refuses a table of another version.
use crate::services::DeviceServices;
use core::ffi::c_void;
use core::mem::size_of;

/// The version of every record in this module.
pub const ORCH_LIB_ABI_VERSION: u32 = 1;
/// `OrchLibraryDesc::magic`: `"FRYORCHL"` little-endian.
pub const ORCH_LIB_MAGIC: u64 = u64::from_le_bytes(*b"FRYORCHL");
/// The export returning the library's descriptor ([`OrchLibraryFn`]).
pub const EXPORT_ORCH_LIBRARY: &str = "ferry_orch_library";
/// A function `f`'s entry is exported as `ferry_orch_fn_f`.
pub const ORCH_FN_PREFIX: &str = "ferry_orch_fn_";
/// Most functions one library declares.
pub const MAX_LIBRARY_FUNCTIONS: u32 = 64;
/// Longest function name (bytes of ASCII letters, digits and `_`, so the export is a C name).
pub const MAX_FUNCTION_NAME: usize = 31;
/// Tensor arguments a task carries at most.
pub const MAX_TASK_ARGS: usize = 6;
/// Scalars a task carries at most (after the view words when [`TASK_VIEW_SCALARS`] is set).
pub const MAX_TASK_SCALARS: usize = 4;
/// Explicit dependencies a task carries at most.
pub const MAX_TASK_AFTER: usize = 4;
/// Most dimensions of a view.
pub const MAX_ARG_DIMS: usize = 4;

/// [`OrchArg::dir`]: the task reads the view.
pub const DIR_IN: u32 = 1;
/// [`OrchArg::dir`]: the task writes the view (its previous contents are not read).
pub const DIR_OUT: u32 = 2;
/// [`OrchArg::dir`]: the task reads and writes the view.
pub const DIR_INOUT: u32 = 3;

/// [`OrchTask::flags`]: ferry puts the view words a view kernel reads (the shape word, then one
/// operand word per argument, `crate::layout`) before the task's own scalars. Every argument
/// then needs `ndims >= 1` and the same shape.
pub const TASK_VIEW_SCALARS: u32 = 1;

/// [`OrchTask::kernel`] of a dependency-only task: it runs no kernel and completes once every
/// task it depends on (its arguments' producers and its `after` list) completed, so later
/// tasks can wait on one task instead of many.
pub const KERNEL_NONE: u32 = u32::MAX;

/// The ids of ferry's built-in kernels a function submits (loaded kernels are
/// `0x100 + n`, in load order).
pub mod builtin {
    /// `add`: flat f32 `out = a + b`.
    pub const ADD: u32 = 0;
    /// `mul`: flat f32 `out = a * b`.
    pub const MUL: u32 = 1;
    /// `copy`: flat `out = a`.
    pub const COPY: u32 = 3;
    /// `add_nd`: views, `out = a + b` in any dtype.
    pub const ADD_ND: u32 = 7;
    /// `mul_nd`: views, `out = a * b`.
    pub const MUL_ND: u32 = 8;
    /// `cast_nd`: views, `out = a` converted.
    pub const CAST_ND: u32 = 9;
    /// `rmsnorm_nd`: views, rows of `x` normalised and scaled by `g`.
    pub const RMSNORM_ND: u32 = 10;
    /// `softmax_nd`: views, a softmax per row.
    pub const SOFTMAX_ND: u32 = 11;
    /// `rope_nd`: views, the rotary embedding.
    pub const ROPE_ND: u32 = 12;
    /// `matmul_nd`: views `[M, K, N]`, on AIC, f32 accumulation.
    pub const MATMUL_ND: u32 = 13;
}

/// Status an entry returns when it was handed no table or a table of another version.
pub const ORCH_STATUS_BAD_TABLE: i32 = crate::services::STATUS_ABI_VERSION_MISMATCH;

/// What the AICPU program (device-orchestrated) or the host (host-built) passes an
/// orchestration entry. Host-process-only: the pointers are valid for the call.
///
/// `api` is ferry's own submission table for its built-in orchestration objects (opaque here,
/// versioned by `api_version`); `lib_api` is the [`OrchLibApi`] user libraries use.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OrchContext {
    /// The OS services (null on the host).
    pub services: *const DeviceServices,
    /// `KernelArgs::runtime_args` of the run (0 on the host).
    pub runtime_args: u64,
    /// The callable being run.
    pub callable_id: u32,
    /// Version of the table behind `api` (0 when `api` is null).
    pub api_version: u32,
    /// ferry's built-in submission table, or null.
    pub api: *const c_void,
    /// Version of the table behind `lib_api` ([`ORCH_LIB_ABI_VERSION`]; 0 when it is null).
    pub lib_api_version: u32,
    /// Zero.
    pub reserved: u32,
    /// The user-library table ([`OrchLibApi`]), or null.
    pub lib_api: *const OrchLibApi,
}

/// An orchestration entry: returns a `STATUS_*` (0 = ok) or the function's own failure code.
pub type OrchEntryFn = unsafe extern "C" fn(ctx: *const OrchContext) -> i32;

/// The library's descriptor export.
pub type OrchLibraryFn = unsafe extern "C" fn() -> *const OrchLibraryDesc;

/// A library's descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OrchLibraryDesc {
    /// [`ORCH_LIB_MAGIC`].
    pub magic: u64,
    /// [`ORCH_LIB_ABI_VERSION`] of the crate the library was built with.
    pub abi_version: u32,
    /// `size_of::<OrchLibraryDesc>()` (64).
    pub desc_bytes: u32,
    /// `size_of::<OrchFunctionEntry>()` (48).
    pub entry_bytes: u32,
    /// Entries in `functions` (1..=[`MAX_LIBRARY_FUNCTIONS`]).
    pub function_count: u32,
    /// The function table.
    pub functions: *const OrchFunctionEntry,
    /// The library's name, NUL-terminated.
    pub name: [u8; 32],
}

// SAFETY: the descriptor points at static, immutable data of the library.
unsafe impl Sync for OrchLibraryDesc {}

/// One orchestration function of a library.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OrchFunctionEntry {
    /// Its name (1..=[`MAX_FUNCTION_NAME`] bytes of ASCII letters, digits and `_`,
    /// NUL-terminated); the entry is also exported as [`ORCH_FN_PREFIX`]` + name`.
    pub name: [u8; 32],
    /// Run tensors the function needs at least.
    pub tensors: u32,
    /// Run scalars the function needs at least.
    pub scalars: u32,
    /// The entry (the same function as the export).
    pub entry: Option<OrchEntryFn>,
}

/// One tensor argument of a task: a view of a tensor and the task's direction on it.
///
/// With `ndims == 0` the argument is the whole tensor, read as 32-bit words. Otherwise it is
/// the N-d view of `dtype` elements starting at element `offset` (whose byte offset must be a
/// multiple of 4), `shape[..ndims]` outermost first, `strides[..ndims]` in elements (0 repeats
/// an element); the task receives the device range from its first to its last element,
/// rounded up to whole words, and the tensor map orders tasks by those bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrchArg {
    /// Tensor id: a run tensor (`0..tensor_count`) or an allocated one.
    pub tensor: u32,
    /// [`DIR_IN`], [`DIR_OUT`] or [`DIR_INOUT`].
    pub dir: u32,
    /// The elements' `DType` code (ignored when `ndims == 0`).
    pub dtype: u32,
    /// Dimensions (0..=[`MAX_ARG_DIMS`]).
    pub ndims: u32,
    /// First element.
    pub offset: u64,
    /// Dimensions, outermost first.
    pub shape: [u64; MAX_ARG_DIMS],
    /// Strides in elements.
    pub strides: [u64; MAX_ARG_DIMS],
}

/// A typed scalar: its `DType` code and its bits (low bits; an `f32` is its `to_bits`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrchScalar {
    /// `DType` code.
    pub dtype: u32,
    /// Zero.
    pub reserved: u32,
    /// The value's bits.
    pub bits: u64,
}

/// A task crossing the table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrchTask {
    /// Kernel id (built-in `0..`, loaded `0x100..`) or [`KERNEL_NONE`].
    pub kernel: u32,
    /// SPMD block count (≥ 1; 1 for a dependency-only task).
    pub block_dim: u32,
    /// Used entries of `args`.
    pub n_args: u32,
    /// Used entries of `scalars`.
    pub n_scalars: u32,
    /// Used entries of `after`.
    pub n_after: u32,
    /// [`TASK_VIEW_SCALARS`] or 0.
    pub flags: u32,
    /// Tensor arguments.
    pub args: [OrchArg; MAX_TASK_ARGS],
    /// Scalars.
    pub scalars: [OrchScalar; MAX_TASK_SCALARS],
    /// Tasks (their ids from `submit`) this task runs after, beyond what the tensor map
    /// derives.
    pub after: [u64; MAX_TASK_AFTER],
}

/// The table ferry serves an orchestration function (behind [`OrchContext::lib_api`]).
/// Every function takes the table's own `user` first and returns a `STATUS_*` (0 = ok) unless
/// it says otherwise; after a non-zero status the run fails with the cause ferry recorded, so a
/// function should return that status.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OrchLibApi {
    /// [`ORCH_LIB_ABI_VERSION`].
    pub version: u32,
    /// `size_of::<OrchLibApi>()`.
    pub size: u32,
    /// ferry's state, passed back to every function.
    pub user: *mut c_void,
    /// Tensors the function can name: run tensors, then allocated ones.
    pub tensor_count: unsafe extern "C" fn(user: *mut c_void) -> u32,
    /// Tensor `id`'s length in bytes into `out`.
    pub tensor_bytes: unsafe extern "C" fn(user: *mut c_void, id: u32, out: *mut u64) -> i32,
    /// Run scalars.
    pub scalar_count: unsafe extern "C" fn(user: *mut c_void) -> u32,
    /// Run scalar `index` into `out`.
    pub scalar: unsafe extern "C" fn(user: *mut c_void, index: u32, out: *mut u64) -> i32,
    /// Submits `task`; its id (0, 1, 2, … in submission order) into `out`.
    pub submit:
        unsafe extern "C" fn(user: *mut c_void, task: *const OrchTask, out: *mut u64) -> i32,
    /// Opens a scope at a site (`file`: `file_len` bytes of UTF-8, at most 31 kept; `line`),
    /// as the profile's scope statistics name it. Tensors allocated inside are released at
    /// its end.
    pub scope_begin:
        unsafe extern "C" fn(user: *mut c_void, file: *const u8, file_len: usize, line: u32) -> i32,
    /// Closes the innermost scope.
    pub scope_end: unsafe extern "C" fn(user: *mut c_void) -> i32,
    /// Allocates a tensor of `bytes` bytes (rounded up to whole words) for the rest of the
    /// innermost scope (the run, outside every scope); its id into `out`. A runtime-allocated
    /// output: tasks write it, later tasks read it.
    pub alloc: unsafe extern "C" fn(user: *mut c_void, bytes: u64, out: *mut u32) -> i32,
    /// Copies `len` bytes of tensor `tensor` from byte `offset` into `out`: the device's
    /// values once every task submitted so far that writes those bytes completed (the
    /// device-orchestrated variant waits for them; the host-built one refuses a range a task
    /// writes, as its graph has not run yet).
    pub read: unsafe extern "C" fn(
        user: *mut c_void,
        tensor: u32,
        offset: u64,
        out: *mut u8,
        len: u64,
    ) -> i32,
}

const _: () = assert!(size_of::<OrchLibraryDesc>() == 64);
const _: () = assert!(size_of::<OrchFunctionEntry>() == 48);
const _: () = assert!(size_of::<OrchArg>() == 88);
const _: () = assert!(size_of::<OrchScalar>() == 16);
const _: () = assert!(size_of::<OrchTask>() == 648);
const _: () = assert!(size_of::<OrchLibApi>() == 88);
const _: () = assert!(size_of::<OrchContext>() == 48);

/// Why a library's descriptor or function table was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrchTableError {
    /// The descriptor export returned null.
    NullDescriptor,
    /// `magic` is not [`ORCH_LIB_MAGIC`].
    BadMagic {
        /// What it was.
        found: u64,
    },
    /// Another ABI version.
    AbiVersion {
        /// The library's.
        found: u32,
        /// This crate's.
        expected: u32,
    },
    /// A record size differs from this version's.
    RecordSize {
        /// `desc_bytes`.
        desc: u32,
        /// `entry_bytes`.
        entry: u32,
    },
    /// `function_count` is 0 or above [`MAX_LIBRARY_FUNCTIONS`], or the table is null.
    FunctionCount {
        /// What it was.
        count: u32,
    },
    /// Entry `index` has a bad name or no entry.
    Entry {
        /// Which entry.
        index: u32,
    },
    /// Two entries have one name.
    DuplicateFunction {
        /// The later one.
        index: u32,
    },
}

impl core::fmt::Display for OrchTableError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::NullDescriptor => write!(f, "the descriptor export returned null"),
            Self::BadMagic { found } => write!(f, "bad magic {found:#018x}"),
            Self::AbiVersion { found, expected } => write!(
                f,
                "built against orchestration ABI version {found}, this ferry speaks {expected}: \
                 rebuild it against this ferry's ferry-kernel-abi"
            ),
            Self::RecordSize { desc, entry } => {
                write!(f, "record sizes {desc}/{entry}, expected 64/48")
            }
            Self::FunctionCount { count } => {
                write!(f, "{count} functions (1..={MAX_LIBRARY_FUNCTIONS} expected)")
            }
            Self::Entry { index } => write!(
                f,
                "function {index}: a name of 1..={MAX_FUNCTION_NAME} ASCII letters, digits or \
                 `_` and an entry are required"
            ),
            Self::DuplicateFunction { index } => {
                write!(f, "function {index} has the name of an earlier one")
            }
        }
    }
}

/// A function name's bytes up to its NUL, when it is a valid name.
pub fn function_name(name: &[u8; 32]) -> Option<&str> {
    let n = name.iter().position(|&b| b == 0)?;
    let ok = (1..=MAX_FUNCTION_NAME).contains(&n)
        && name[..n].iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_');
    if !ok {
        return None;
    }
    core::str::from_utf8(&name[..n]).ok()
}

/// Checks a copied function table: names valid and distinct, entries present.
///
/// # Errors
/// The first [`OrchTableError::Entry`] or [`OrchTableError::DuplicateFunction`].
pub fn validate_functions(entries: &[OrchFunctionEntry]) -> Result<(), OrchTableError> {
    for (i, e) in entries.iter().enumerate() {
        let name = function_name(&e.name);
        if name.is_none() || e.entry.is_none() {
            return Err(OrchTableError::Entry { index: i as u32 });
        }
        if entries[..i].iter().any(|p| p.name == e.name) {
            return Err(OrchTableError::DuplicateFunction { index: i as u32 });
        }
    }
    Ok(())
}

/// Checks the descriptor's header fields (after the loader read `magic` and `abi_version`).
///
/// # Errors
/// As the fields are found wrong, in order: magic, version, sizes, count.
pub fn check_orch_header(d: &OrchLibraryDesc) -> Result<(), OrchTableError> {
    if d.magic != ORCH_LIB_MAGIC {
        return Err(OrchTableError::BadMagic { found: d.magic });
    }
    if d.abi_version != ORCH_LIB_ABI_VERSION {
        return Err(OrchTableError::AbiVersion {
            found: d.abi_version,
            expected: ORCH_LIB_ABI_VERSION,
        });
    }
    if d.desc_bytes as usize != size_of::<OrchLibraryDesc>()
        || d.entry_bytes as usize != size_of::<OrchFunctionEntry>()
    {
        return Err(OrchTableError::RecordSize { desc: d.desc_bytes, entry: d.entry_bytes });
    }
    if d.function_count == 0 || d.function_count > MAX_LIBRARY_FUNCTIONS || d.functions.is_null() {
        return Err(OrchTableError::FunctionCount { count: d.function_count });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn records_have_the_documented_offsets() {
        assert_eq!(offset_of!(OrchLibraryDesc, functions), 24);
        assert_eq!(offset_of!(OrchLibraryDesc, name), 32);
        assert_eq!(offset_of!(OrchFunctionEntry, entry), 40);
        assert_eq!(offset_of!(OrchArg, offset), 16);
        assert_eq!(offset_of!(OrchArg, shape), 24);
        assert_eq!(offset_of!(OrchArg, strides), 56);
        assert_eq!(offset_of!(OrchTask, args), 24);
        assert_eq!(offset_of!(OrchTask, scalars), 552);
        assert_eq!(offset_of!(OrchTask, after), 616);
        assert_eq!(offset_of!(OrchLibApi, read), 80);
        assert_eq!(offset_of!(OrchContext, lib_api), 40);
    }

    #[test]
    fn names_are_c_identifiers() {
        let mut n = [0u8; 32];
        n[..6].copy_from_slice(b"decode");
        assert_eq!(function_name(&n), Some("decode"));
        n[2] = b'-';
        assert_eq!(function_name(&n), None);
        assert_eq!(function_name(&[0; 32]), None);
        assert_eq!(function_name(&[b'a'; 32]), None, "no NUL");
    }
}
