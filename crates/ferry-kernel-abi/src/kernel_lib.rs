//! The custom kernel-library ABI: what a user's kernel cdylib exports and how ferry calls it.
//!
//! A kernel library is a shared object built against this crate (whose root re-exports this
//! module and adds a macro and safe wrappers). It exports one function,
//! [`EXPORT_KERNEL_LIBRARY`], returning a pointer to a static [`KernelLibraryDesc`]: a magic, the
//! [`KERNEL_LIB_ABI_VERSION`] the library was built against, the sizes of the two records (so a
//! loader of another version never reads a record of the wrong shape) and a table of
//! [`KernelEntry`]s. Each entry names one kernel, describes what it accepts (core kind, tensor
//! count range, scalar dtypes, most SPMD blocks) and carries two functions:
//!
//! | function | runs | arguments |
//! |---|---|---|
//! | [`KernelEntry::device`] ([`DeviceKernelFn`]) | on an AICore worker thread, once per SPMD block | the OS services table, a [`DeviceCall`] of device addresses, translated by the kernel through the table (bounds-checked), and a [`KernelErrorRecord`] it fills when it refuses |
//! | [`KernelEntry::host`] ([`HostKernelFn`]) | on the host, once per task | a [`HostCall`] of host `f32` buffers, distinct per argument: the reference ferry verifies the device against |
//!
//! # Versioning
//!
//! [`KERNEL_LIB_ABI_VERSION`] changes whenever any record here changes layout or meaning. The
//! loader reads only `magic` and `abi_version` (the first 12 bytes, fixed for every version)
//! before it has checked the version, then checks `desc_bytes` and `entry_bytes` against its own
//! record sizes, then the kernel count against [`MAX_LIBRARY_KERNELS`]: nothing sized by the
//! library is read or allocated before it is checked. [`validate_entries`] checks each entry.
//!
//! # Ids
//!
//! Loaded kernels get ids from [`CUSTOM_KERNEL_BASE`] up, in load order (ferry's built-in
//! kernels take the ids below it); at most [`MAX_CUSTOM_KERNELS`] per runner.
//!
//! # Examples
//!
//! ```
//! use ferry_kernel_abi::kernel_lib::{c_name, validate_entries, KernelEntry, CORE_AIV};
//! let e = KernelEntry { name: c_name("saxpy"), core: CORE_AIV, min_tensors: 3, max_tensors: 3,
//!     scalar_count: 1, scalar_dtypes: [0, 0, 0, 0], max_blocks: 64, ..KernelEntry::EMPTY };
//! // No device entry: refused.
//! assert!(validate_entries(&[e]).is_err());
//! ```
use crate::dtype::DType;
use crate::services::DeviceServices;

/// Version of this ABI; a loader refuses a library built against another. Version 3 added
/// the view-kernel scalar codes ([`SCALAR_VIEW_SHAPE`], [`SCALAR_VIEW_OPERAND`]).
pub const KERNEL_LIB_ABI_VERSION: u32 = 3;
/// [`KernelEntry::scalar_dtypes`] code of a view kernel's scalar 0: the shape word of its
/// tensors' views (`crate::layout`), which a workload fills in.
pub const SCALAR_VIEW_SHAPE: u8 = 0x80;
/// [`KernelEntry::scalar_dtypes`] code of a view kernel's scalars `1..=n`: the operand word
/// (dtype and strides) of tensor argument `i - 1`.
pub const SCALAR_VIEW_OPERAND: u8 = 0x81;
/// [`KernelLibraryDesc::magic`]: `"FRYKERNL"`.
pub const KERNEL_LIB_MAGIC: u64 = u64::from_le_bytes(*b"FRYKERNL");
/// The library's one required export: `extern "C" fn() -> *const KernelLibraryDesc`.
pub const EXPORT_KERNEL_LIBRARY: &str = "ferry_kernel_library";
/// Most kernels one library may export.
pub const MAX_LIBRARY_KERNELS: u32 = 64;
/// Most loaded (custom) kernels per runner, over all libraries.
pub const MAX_CUSTOM_KERNELS: u32 = 256;
/// Id of the first loaded kernel; loaded kernels are `CUSTOM_KERNEL_BASE..+MAX_CUSTOM_KERNELS`.
pub const CUSTOM_KERNEL_BASE: u32 = 0x100;
/// Bytes of a name field (NUL-terminated, so at most 31 bytes of UTF-8).
pub const NAME_BYTES: usize = 32;
/// Most tensor arguments of one call (the task runtime's per-task capacity).
pub const MAX_CALL_TENSORS: usize = 6;
/// Most scalar arguments of one call (the task runtime's per-task capacity).
pub const MAX_CALL_SCALARS: usize = 4;
/// [`KernelEntry::core`]: a cube core (AIC).
pub const CORE_AIC: u32 = 0;
/// [`KernelEntry::core`]: a vector core (AIV).
pub const CORE_AIV: u32 = 1;

/// Whether `id` is in the loaded-kernel range.
pub const fn is_custom_kernel(id: u32) -> bool {
    id >= CUSTOM_KERNEL_BASE && id - CUSTOM_KERNEL_BASE < MAX_CUSTOM_KERNELS
}

/// A kernel's device entry: one SPMD block. Returns a `STATUS_*` (0 = ok) and, when it refuses,
/// describes why in `*error` (which may be null); it must not unwind.
pub type DeviceKernelFn = unsafe extern "C" fn(
    services: *const DeviceServices,
    call: *const DeviceCall,
    error: *mut KernelErrorRecord,
) -> i32;

/// [`KernelErrorRecord::kind`]: nothing recorded (the status alone says what happened).
pub const KERNEL_ERR_NONE: u32 = 0;
/// [`KernelErrorRecord::kind`]: tensor argument `index` is not there.
pub const KERNEL_ERR_MISSING_TENSOR: u32 = 1;
/// [`KernelErrorRecord::kind`]: scalar argument `index` is not there.
pub const KERNEL_ERR_MISSING_SCALAR: u32 = 2;
/// [`KernelErrorRecord::kind`]: tensor `index`'s range is not inside live device memory.
pub const KERNEL_ERR_BAD_ADDRESS: u32 = 3;
/// [`KernelErrorRecord::kind`]: a tensor has `got` elements where the kernel needs `expected`.
pub const KERNEL_ERR_SHAPE: u32 = 4;
/// [`KernelErrorRecord::kind`]: the kernel panicked (its message went to the device log).
pub const KERNEL_ERR_PANIC: u32 = 5;
/// [`KernelErrorRecord::kind`]: tensor `index`'s view does not fit its range (`expected` bytes
/// the view spans, `got` in the range), or (`expected` and `got` 0) its operand word names
/// an unknown dtype, whose code is `index >> 16`.
pub const KERNEL_ERR_VIEW: u32 = 6;

/// Why a device entry refused its block, in numbers (the typed error crosses the device → host
/// boundary as a fault code and words, never as a string). The AICore executor passes a zeroed
/// record with every call and turns what the kernel wrote into the run's typed fault.
///
/// # Layout
/// 24 bytes: `kind` u32 at 0 (a `KERNEL_ERR_*`), `index` u32 at 4 (the argument index),
/// `expected` u64 at 8, `got` u64 at 16 (elements, for [`KERNEL_ERR_SHAPE`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelErrorRecord {
    /// A `KERNEL_ERR_*`.
    pub kind: u32,
    /// The argument index (`MISSING_TENSOR`, `MISSING_SCALAR`, `BAD_ADDRESS`).
    pub index: u32,
    /// Elements the kernel needs (`SHAPE`).
    pub expected: u64,
    /// Elements there (`SHAPE`).
    pub got: u64,
}

const _: () = {
    assert!(core::mem::size_of::<KernelErrorRecord>() == 24);
    assert!(core::mem::offset_of!(KernelErrorRecord, expected) == 8);
};
/// A kernel's host reference: the whole task over host buffers. Returns a `STATUS_*`; it must
/// not unwind.
pub type HostKernelFn = unsafe extern "C" fn(call: *const HostCall) -> i32;
/// The [`EXPORT_KERNEL_LIBRARY`] export.
pub type KernelLibraryFn = unsafe extern "C" fn() -> *const KernelLibraryDesc;

/// What [`EXPORT_KERNEL_LIBRARY`] returns a pointer to (host-process-only: it lives in the
/// loaded library's static data, like [`DeviceServices`] it never lives in device memory).
///
/// # Layout
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 8 | `magic` ([`KERNEL_LIB_MAGIC`]) |
/// | 8 | 4 | `abi_version` |
/// | 12 | 4 | `desc_bytes` (`size_of::<KernelLibraryDesc>()`) |
/// | 16 | 4 | `entry_bytes` (`size_of::<KernelEntry>()`) |
/// | 20 | 4 | `kernel_count` |
/// | 24 | 8 | `kernels` (pointer to `kernel_count` entries) |
/// | 32 | 32 | `name` (the library's name, NUL-terminated) |
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelLibraryDesc {
    /// [`KERNEL_LIB_MAGIC`].
    pub magic: u64,
    /// [`KERNEL_LIB_ABI_VERSION`] of the crate the library was built with.
    pub abi_version: u32,
    /// `size_of::<KernelLibraryDesc>()` of that crate.
    pub desc_bytes: u32,
    /// `size_of::<KernelEntry>()` of that crate.
    pub entry_bytes: u32,
    /// Entries behind `kernels`.
    pub kernel_count: u32,
    /// The kernel table.
    pub kernels: *const KernelEntry,
    /// The library's name.
    pub name: [u8; NAME_BYTES],
}

// SAFETY: the descriptor is immutable static data of a loaded library; the pointer addresses
// equally immutable static data.
unsafe impl Sync for KernelLibraryDesc {}

const _: () = {
    assert!(core::mem::size_of::<KernelLibraryDesc>() == 64);
    assert!(core::mem::offset_of!(KernelLibraryDesc, abi_version) == 8);
    assert!(core::mem::offset_of!(KernelLibraryDesc, kernels) == 24);
    assert!(core::mem::offset_of!(KernelLibraryDesc, name) == 32);
};

/// One kernel of a library.
///
/// # Layout
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 32 | `name` (NUL-terminated UTF-8) |
/// | 32 | 4 | `core` ([`CORE_AIC`] / [`CORE_AIV`]) |
/// | 36 | 4 | `min_tensors` |
/// | 40 | 4 | `max_tensors` |
/// | 44 | 4 | `scalar_count` |
/// | 48 | 4 | `scalar_dtypes` (a `DType` code per scalar, `scalar_count` used) |
/// | 52 | 4 | `max_blocks` |
/// | 56 | 8 | `device` |
/// | 64 | 8 | `host` |
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelEntry {
    /// The kernel's name, unique among every kernel of a runner (built-ins included).
    pub name: [u8; NAME_BYTES],
    /// Which core kind runs it.
    pub core: u32,
    /// Fewest tensor arguments.
    pub min_tensors: u32,
    /// Most tensor arguments (at most [`MAX_CALL_TENSORS`]).
    pub max_tensors: u32,
    /// Scalars it requires (at most [`MAX_CALL_SCALARS`]).
    pub scalar_count: u32,
    /// The `DType` code of each scalar (how its 64 raw bits are read).
    pub scalar_dtypes: [u8; MAX_CALL_SCALARS],
    /// Most SPMD blocks of one task (at least 1).
    pub max_blocks: u32,
    /// The device entry (required).
    pub device: Option<DeviceKernelFn>,
    /// The host reference (required).
    pub host: Option<HostKernelFn>,
}

const _: () = {
    assert!(core::mem::size_of::<KernelEntry>() == 72);
    assert!(core::mem::offset_of!(KernelEntry, core) == 32);
    assert!(core::mem::offset_of!(KernelEntry, scalar_dtypes) == 48);
    assert!(core::mem::offset_of!(KernelEntry, max_blocks) == 52);
    assert!(core::mem::offset_of!(KernelEntry, device) == 56);
    assert!(core::mem::offset_of!(KernelEntry, host) == 64);
};

impl KernelEntry {
    /// An entry with every field zero (no name, no functions): a base for struct updates.
    pub const EMPTY: KernelEntry = KernelEntry {
        name: [0; NAME_BYTES],
        core: CORE_AIV,
        min_tensors: 0,
        max_tensors: 0,
        scalar_count: 0,
        scalar_dtypes: [0; MAX_CALL_SCALARS],
        max_blocks: 0,
        device: None,
        host: None,
    };

    /// The name, when it is well formed (non-empty UTF-8 before a NUL).
    pub fn name(&self) -> Option<&str> {
        name_str(&self.name)
    }

    /// Whether the entry declares a view kernel: its scalars are a shape word and one operand
    /// word per tensor ([`SCALAR_VIEW_SHAPE`], [`SCALAR_VIEW_OPERAND`]).
    pub fn is_view_kernel(&self) -> bool {
        self.scalar_count > 0 && self.scalar_dtypes[0] == SCALAR_VIEW_SHAPE
    }

    /// The scalar dtypes (valid after [`validate_entries`]; a view kernel's layout words read
    /// as `UINT64`).
    pub fn dtypes(&self) -> impl Iterator<Item = DType> + '_ {
        let n = (self.scalar_count as usize).min(MAX_CALL_SCALARS);
        self.scalar_dtypes[..n].iter().map(|&c| DType::from_u8(c).unwrap_or(DType::UInt64))
    }
}

/// A name as a NUL-terminated field; panics at compile time (in a const) when it does not fit.
///
/// # Panics
/// When `s` is empty or longer than `NAME_BYTES - 1` bytes.
pub const fn c_name(s: &str) -> [u8; NAME_BYTES] {
    let b = s.as_bytes();
    assert!(!b.is_empty() && b.len() < NAME_BYTES, "a kernel name takes 1..=31 bytes");
    let mut out = [0u8; NAME_BYTES];
    let mut i = 0;
    while i < b.len() {
        out[i] = b[i];
        i += 1;
    }
    out
}

/// The string in a NUL-terminated name field: `None` when empty, unterminated or not UTF-8.
pub fn name_str(field: &[u8; NAME_BYTES]) -> Option<&str> {
    let end = field.iter().position(|&c| c == 0)?;
    if end == 0 {
        return None;
    }
    core::str::from_utf8(&field[..end]).ok()
}

/// One tensor argument of a [`DeviceCall`]: a device range.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorArg {
    /// Device address.
    pub addr: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The arguments of one device call (one SPMD block of one task).
///
/// # Layout
/// 144 bytes: `tensors` at 0 (6 × 16), `scalars` at 96 (4 × 8), then `n_tensors`, `n_scalars`,
/// `block_idx`, `block_dim` (u32 each) at 128..144.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCall {
    /// Tensor arguments (device ranges; `n_tensors` used).
    pub tensors: [TensorArg; MAX_CALL_TENSORS],
    /// Scalars, raw 64 bits each (`n_scalars` used).
    pub scalars: [u64; MAX_CALL_SCALARS],
    /// Used entries of `tensors`.
    pub n_tensors: u32,
    /// Used entries of `scalars`.
    pub n_scalars: u32,
    /// This block's index in `0..block_dim`.
    pub block_idx: u32,
    /// Blocks of the task (at least 1).
    pub block_dim: u32,
}

const _: () = {
    assert!(core::mem::size_of::<DeviceCall>() == 144);
    assert!(core::mem::offset_of!(DeviceCall, scalars) == 96);
    assert!(core::mem::offset_of!(DeviceCall, n_tensors) == 128);
};

/// One tensor argument of a [`HostCall`]: a host `f32` buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HostTensor {
    /// First element.
    pub ptr: *mut f32,
    /// Elements.
    pub len: u64,
}

/// The arguments of one host-reference call (a whole task). Every tensor is a distinct host
/// buffer (ferry copies each argument's view), so the reference may write any of them.
///
/// # Layout
/// 136 bytes: `tensors` at 0 (6 × 16), `scalars` at 96 (4 × 8), `n_tensors`, `n_scalars` at 128.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HostCall {
    /// Tensor arguments (`n_tensors` used).
    pub tensors: [HostTensor; MAX_CALL_TENSORS],
    /// Scalars (`n_scalars` used).
    pub scalars: [u64; MAX_CALL_SCALARS],
    /// Used entries of `tensors`.
    pub n_tensors: u32,
    /// Used entries of `scalars`.
    pub n_scalars: u32,
}

const _: () = assert!(core::mem::size_of::<HostCall>() == 136);

/// Why a library's descriptor or kernel table was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelTableError {
    /// The export returned null.
    NullDescriptor,
    /// `magic` is not [`KERNEL_LIB_MAGIC`].
    BadMagic {
        /// What the library has.
        found: u64,
    },
    /// Built against another ABI version.
    AbiVersion {
        /// The library's version.
        found: u32,
        /// This loader's.
        expected: u32,
    },
    /// The record sizes are not this version's.
    Layout {
        /// The library's `desc_bytes`.
        desc_bytes: u32,
        /// The library's `entry_bytes`.
        entry_bytes: u32,
    },
    /// No kernels, more than [`MAX_LIBRARY_KERNELS`], or a null table.
    Count {
        /// The library's `kernel_count`.
        count: u32,
    },
    /// An entry is malformed.
    Entry {
        /// Its index in the table.
        index: u32,
        /// What is wrong.
        problem: EntryProblem,
    },
    /// Two entries of the library share a name.
    DuplicateName {
        /// The first entry with the name.
        first: u32,
        /// The second.
        second: u32,
    },
}

/// What is wrong with one [`KernelEntry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryProblem {
    /// Empty, unterminated or not UTF-8.
    Name,
    /// `core` is neither [`CORE_AIC`] nor [`CORE_AIV`].
    Core,
    /// `min_tensors > max_tensors`, no tensors, or more than [`MAX_CALL_TENSORS`].
    Tensors,
    /// More than [`MAX_CALL_SCALARS`] scalars.
    Scalars,
    /// A scalar dtype code that is neither a `DType` nor a view code.
    Dtype,
    /// View codes that do not declare a view kernel: a view kernel's scalars are exactly
    /// [`SCALAR_VIEW_SHAPE`] then one [`SCALAR_VIEW_OPERAND`] per tensor, and it takes a fixed
    /// number of tensors, at most `crate::layout::MAX_OPERANDS`.
    Views,
    /// `max_blocks` is 0.
    MaxBlocks,
    /// No device entry.
    NoDevice,
    /// No host reference.
    NoHost,
}

impl core::fmt::Display for EntryProblem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            EntryProblem::Name => "its name is empty, unterminated or not utf-8",
            EntryProblem::Core => "its core kind is neither aic (0) nor aiv (1)",
            EntryProblem::Tensors => "its tensor count range is empty or outside 1..=6",
            EntryProblem::Scalars => "it takes more than 4 scalars",
            EntryProblem::Dtype => "a scalar dtype code is unknown",
            EntryProblem::Views => {
                "its view scalar codes are not a shape word then one operand word per tensor \
                 of a fixed count of at most 3"
            }
            EntryProblem::MaxBlocks => "its max_blocks is 0",
            EntryProblem::NoDevice => "it has no device entry",
            EntryProblem::NoHost => "it has no host reference",
        })
    }
}

impl core::fmt::Display for KernelTableError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            KernelTableError::NullDescriptor => f.write_str("its descriptor export returned null"),
            KernelTableError::BadMagic { found } => {
                write!(f, "its descriptor magic is {found:#018x}, not a ferry kernel library")
            }
            KernelTableError::AbiVersion { found, expected } => write!(
                f,
                "built against kernel abi version {found}, this ferry loads version {expected}"
            ),
            KernelTableError::Layout { desc_bytes, entry_bytes } => write!(
                f,
                "its records are {desc_bytes} and {entry_bytes} bytes, this abi's are {} and {}",
                core::mem::size_of::<KernelLibraryDesc>(),
                core::mem::size_of::<KernelEntry>()
            ),
            KernelTableError::Count { count } => write!(
                f,
                "its kernel table has {count} entries (or is null), a library has \
                 1..={MAX_LIBRARY_KERNELS}"
            ),
            KernelTableError::Entry { index, problem } => write!(f, "kernel {index}: {problem}"),
            KernelTableError::DuplicateName { first, second } => {
                write!(f, "kernels {first} and {second} have the same name")
            }
        }
    }
}

/// Checks a library's header fields before anything else of it is read.
///
/// # Errors
/// [`KernelTableError::BadMagic`], [`KernelTableError::AbiVersion`],
/// [`KernelTableError::Layout`], [`KernelTableError::Count`].
pub fn check_header(
    magic: u64,
    abi_version: u32,
    desc_bytes: u32,
    entry_bytes: u32,
    kernel_count: u32,
    table_null: bool,
) -> Result<(), KernelTableError> {
    if magic != KERNEL_LIB_MAGIC {
        return Err(KernelTableError::BadMagic { found: magic });
    }
    if abi_version != KERNEL_LIB_ABI_VERSION {
        return Err(KernelTableError::AbiVersion {
            found: abi_version,
            expected: KERNEL_LIB_ABI_VERSION,
        });
    }
    if desc_bytes as usize != core::mem::size_of::<KernelLibraryDesc>()
        || entry_bytes as usize != core::mem::size_of::<KernelEntry>()
    {
        return Err(KernelTableError::Layout { desc_bytes, entry_bytes });
    }
    if kernel_count == 0 || kernel_count > MAX_LIBRARY_KERNELS || table_null {
        return Err(KernelTableError::Count { count: kernel_count });
    }
    Ok(())
}

/// Checks every entry of a table and that no two share a name. Quadratic in the entry count,
/// which [`check_header`] bounds to [`MAX_LIBRARY_KERNELS`].
///
/// # Errors
/// The first [`KernelTableError::Entry`] or [`KernelTableError::DuplicateName`].
pub fn validate_entries(entries: &[KernelEntry]) -> Result<(), KernelTableError> {
    for (i, e) in entries.iter().enumerate() {
        let index = i as u32;
        let bad = |problem| Err(KernelTableError::Entry { index, problem });
        let Some(name) = e.name() else { return bad(EntryProblem::Name) };
        if e.core != CORE_AIC && e.core != CORE_AIV {
            return bad(EntryProblem::Core);
        }
        if e.min_tensors == 0
            || e.min_tensors > e.max_tensors
            || e.max_tensors as usize > MAX_CALL_TENSORS
        {
            return bad(EntryProblem::Tensors);
        }
        if e.scalar_count as usize > MAX_CALL_SCALARS {
            return bad(EntryProblem::Scalars);
        }
        let codes = &e.scalar_dtypes[..e.scalar_count as usize];
        let view = |c: u8| c == SCALAR_VIEW_SHAPE || c == SCALAR_VIEW_OPERAND;
        if codes.iter().any(|&c| DType::from_u8(c).is_none() && !view(c)) {
            return bad(EntryProblem::Dtype);
        }
        if codes.iter().any(|&c| view(c)) {
            let n = e.max_tensors as usize;
            let shaped = codes.first() == Some(&SCALAR_VIEW_SHAPE)
                && codes[1..].iter().all(|&c| c == SCALAR_VIEW_OPERAND);
            if !shaped
                || e.min_tensors != e.max_tensors
                || n > crate::layout::MAX_OPERANDS
                || codes.len() != 1 + n
            {
                return bad(EntryProblem::Views);
            }
        }
        if e.max_blocks == 0 {
            return bad(EntryProblem::MaxBlocks);
        }
        if e.device.is_none() {
            return bad(EntryProblem::NoDevice);
        }
        if e.host.is_none() {
            return bad(EntryProblem::NoHost);
        }
        for (j, other) in entries[..i].iter().enumerate() {
            if other.name() == Some(name) {
                return Err(KernelTableError::DuplicateName { first: j as u32, second: index });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn dev(
        _: *const DeviceServices,
        _: *const DeviceCall,
        _: *mut KernelErrorRecord,
    ) -> i32 {
        0
    }
    unsafe extern "C" fn host(_: *const HostCall) -> i32 {
        0
    }

    fn good(name: &str) -> KernelEntry {
        KernelEntry {
            name: c_name(name),
            core: CORE_AIV,
            min_tensors: 2,
            max_tensors: 3,
            scalar_count: 1,
            scalar_dtypes: [DType::Float32 as u8, 0, 0, 0],
            max_blocks: 8,
            device: Some(dev),
            host: Some(host),
        }
    }

    #[test]
    fn header_checks_each_field_in_order() {
        let ok = |m, v, d, e, n, null| check_header(m, v, d, e, n, null);
        const V: u32 = KERNEL_LIB_ABI_VERSION;
        assert_eq!(ok(KERNEL_LIB_MAGIC, V, 64, 72, 1, false), Ok(()));
        assert_eq!(ok(7, V, 64, 72, 1, false), Err(KernelTableError::BadMagic { found: 7 }));
        assert_eq!(
            ok(KERNEL_LIB_MAGIC, V + 1, 0, 0, 0, true),
            Err(KernelTableError::AbiVersion { found: V + 1, expected: V })
        );
        assert_eq!(
            ok(KERNEL_LIB_MAGIC, V, 64, 80, 1, false),
            Err(KernelTableError::Layout { desc_bytes: 64, entry_bytes: 80 })
        );
        for n in [0, MAX_LIBRARY_KERNELS + 1, u32::MAX] {
            assert_eq!(
                ok(KERNEL_LIB_MAGIC, V, 64, 72, n, false),
                Err(KernelTableError::Count { count: n })
            );
        }
        assert_eq!(
            ok(KERNEL_LIB_MAGIC, V, 64, 72, 1, true),
            Err(KernelTableError::Count { count: 1 })
        );
    }

    #[test]
    fn entries_are_checked_field_by_field() {
        assert_eq!(validate_entries(&[good("a"), good("b")]), Ok(()));
        type Case = (fn(&mut KernelEntry), EntryProblem);
        let cases: [Case; 9] = [
            (|e| e.name = [0; NAME_BYTES], EntryProblem::Name),
            (|e| e.name = [b'x'; NAME_BYTES], EntryProblem::Name),
            (|e| e.core = 2, EntryProblem::Core),
            (|e| e.min_tensors = 0, EntryProblem::Tensors),
            (|e| e.max_tensors = 7, EntryProblem::Tensors),
            (|e| e.scalar_count = 5, EntryProblem::Scalars),
            (|e| e.scalar_dtypes[0] = 200, EntryProblem::Dtype),
            (|e| e.max_blocks = 0, EntryProblem::MaxBlocks),
            (|e| e.device = None, EntryProblem::NoDevice),
        ];
        for (f, problem) in cases {
            let mut e = good("k");
            f(&mut e);
            assert_eq!(
                validate_entries(&[good("a"), e]),
                Err(KernelTableError::Entry { index: 1, problem })
            );
        }
        let mut e = good("k");
        e.host = None;
        assert_eq!(
            validate_entries(&[e]),
            Err(KernelTableError::Entry { index: 0, problem: EntryProblem::NoHost })
        );
        // A view kernel: a shape word, then an operand word per tensor of a fixed count.
        let mut v = good("v");
        (v.min_tensors, v.max_tensors, v.scalar_count) = (2, 2, 3);
        v.scalar_dtypes = [SCALAR_VIEW_SHAPE, SCALAR_VIEW_OPERAND, SCALAR_VIEW_OPERAND, 0];
        assert_eq!(validate_entries(&[v]), Ok(()));
        assert!(v.is_view_kernel() && !good("a").is_view_kernel());
        assert!(v.dtypes().all(|d| d == DType::UInt64));
        type Bad = fn(&mut KernelEntry);
        let views: [Bad; 5] = [
            |e| e.min_tensors = 1,
            |e| e.scalar_count = 2,
            |e| e.scalar_dtypes[0] = SCALAR_VIEW_OPERAND,
            |e| e.scalar_dtypes[2] = DType::Float32 as u8,
            |e| (e.min_tensors, e.max_tensors, e.scalar_count) = (4, 4, 4),
        ];
        for f in views {
            let mut e = v;
            f(&mut e);
            assert_eq!(
                validate_entries(&[e]),
                Err(KernelTableError::Entry { index: 0, problem: EntryProblem::Views })
            );
        }
        // A dtype code past `scalar_count` is not looked at.
        let mut e = good("k");
        e.scalar_dtypes[3] = 200;
        assert_eq!(validate_entries(&[e]), Ok(()));
        assert_eq!(
            validate_entries(&[good("a"), good("b"), good("a")]),
            Err(KernelTableError::DuplicateName { first: 0, second: 2 })
        );
    }

    #[test]
    fn custom_range_and_names() {
        assert!(!is_custom_kernel(CUSTOM_KERNEL_BASE - 1));
        assert!(is_custom_kernel(CUSTOM_KERNEL_BASE));
        assert!(is_custom_kernel(CUSTOM_KERNEL_BASE + MAX_CUSTOM_KERNELS - 1));
        assert!(!is_custom_kernel(CUSTOM_KERNEL_BASE + MAX_CUSTOM_KERNELS));
        assert!(!is_custom_kernel(u32::MAX));
        assert_eq!(name_str(&c_name("saxpy")), Some("saxpy"));
        let mut f = c_name("ab");
        f[1] = 0xff;
        assert_eq!(name_str(&f), None);
    }
}
