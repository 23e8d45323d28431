//! Launch payloads: the bootstrap ABI and the per-task launch ABI (seed 004, `specs/launch.md` §3).
//!
//! Two channels with similar shapes are kept apart, as the seed insists:
//!
//! | channel | records | who reads them |
//! |---|---|---|
//! | bootstrap (Path A only, private to the loader) | [`BootstrapBlob`] → [`DeviceArgs`] | the device-side loader and the bootstrap dispatcher |
//! | per device, once | [`InitArgs`] | the AICPU program's init entry |
//! | per callable | [`RegisterCallableArgs`] | the AICPU program's register-callable entry |
//! | per run, by value | [`KernelArgs`] (AICPU), [`AicoreLaunchArgs`] (AICore) | the AICPU exec entry, the AICore entry |
//!
//! # Byte images
//!
//! Every record here implements [`AbiRecord`]: [`AbiRecord::as_bytes`] is the exact image the host
//! copies into device memory (or hands to a launch as the argument blob), and
//! [`AbiRecord::from_bytes`] reads it back on the other side. `from_bytes` rejects an image of the
//! wrong length with [`DecodeError::WrongLength`]; that is how an ABI size mismatch between two
//! separately built programs surfaces. [`KernelArgs`] and [`AicoreLaunchArgs`] additionally end
//! in an ABI stamp (`abi_version`, `abi_size`) checked by `from_bytes_checked`.
//!
//! Images are little-endian, like the device; ferry refuses to build for a big-endian target
//! rather than produce images the device would misread.
//!
//! # Examples
//!
//! ```
//! use ferry_abi::launch::{AbiRecord, DecodeError, KernelArgs, PROFILING_FLAG_PMU};
//!
//! let mut args = KernelArgs::new(0x1000_0000, 0x2000_0000);
//! args.pmu_data_base = 0x3000_0000;
//! args.enable_profiling_flag |= PROFILING_FLAG_PMU;
//!
//! // Host: the launch blob is the struct's bytes.
//! let blob = args.as_bytes();
//! assert_eq!(blob.len(), KernelArgs::SIZE);
//!
//! // Device: decode and check the ABI stamp before trusting any field.
//! let seen = KernelArgs::from_bytes_checked(blob).unwrap();
//! assert_eq!(seen.runtime_args, 0x1000_0000);
//! assert!(seen.profiling_enabled(PROFILING_FLAG_PMU));
//!
//! // A blob from a program built against another layout is rejected, not misread.
//! assert!(matches!(
//!     KernelArgs::from_bytes_checked(&blob[..96]),
//!     Err(DecodeError::WrongLength { .. })
//! ));
//! ```

use core::fmt;
use core::mem::size_of;

#[cfg(target_endian = "big")]
compile_error!(
    "ferry-abi byte images are little-endian, like the device; big-endian hosts are not supported"
);

// ---------------------------------------------------------------------------------------------
// Byte images
// ---------------------------------------------------------------------------------------------

pub(crate) mod sealed {
    /// Implemented only by [`abi_record!`](crate::launch::abi_record), after its compile-time
    /// layout proof.
    ///
    /// # Safety
    ///
    /// - every field of the type is a fixed-width integer or an array of them, so every bit
    ///   pattern of `size_of::<Self>()` bytes is a valid value;
    /// - the fields tile `0..size_of::<Self>()` with no gap, so the type has no padding bytes and
    ///   every byte of a value is initialised.
    pub unsafe trait Sealed {}
}

/// Integer types (and arrays of them) that may appear as fields of an [`AbiRecord`].
///
/// # Safety
///
/// Every bit pattern of `size_of::<Self>()` bytes is a valid value, and the type has no padding.
pub(crate) unsafe trait PlainInt {}

macro_rules! plain_int {
    ($($t:ty),*) => {
        // SAFETY: primitive integers have no padding and every bit pattern is a valid value.
        $(unsafe impl PlainInt for $t {})*
    };
}
plain_int!(u8, u16, u32, u64, i8, i16, i32, i64);

// SAFETY: an array has no padding between elements (its size is `N * size_of::<T>()`), and it is
// valid for any bit pattern exactly when `T` is; `T: PlainInt` gives both.
unsafe impl<T: PlainInt, const N: usize> PlainInt for [T; N] {}

/// Size of the field selected by `_field`, for the compile-time tiling check in [`abi_record!`].
/// The `F: PlainInt` bound is the compile-time proof that the field is plain integer data.
pub(crate) const fn field_size<T, F: PlainInt>(_field: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// Declares a struct an [`AbiRecord`] after proving its layout at compile time.
///
/// `abi_record!(Type, size N, align A, [field @ offset, ...]);` asserts the size, the alignment
/// and every listed offset, and that the listed fields (each [`PlainInt`]) tile `0..N` without
/// gaps. A field missing from the list leaves a gap and fails the build, so the list is the whole
/// struct, in order, and the type has no padding. Only then is `Sealed` implemented.
macro_rules! abi_record {
    ($ty:ident, size $size:literal, align $align:literal, [$($field:ident @ $off:literal),+ $(,)?]) => {
        const _: () = {
            assert!(::core::mem::size_of::<$ty>() == $size);
            assert!(::core::mem::align_of::<$ty>() == $align);
            let mut end = 0usize;
            $(
                assert!(::core::mem::offset_of!($ty, $field) == $off);
                assert!(::core::mem::offset_of!($ty, $field) == end);
                end += $crate::launch::field_size(|r: &$ty| &r.$field);
            )+
            assert!(end == $size);
        };

        // SAFETY: the const block above is the proof `Sealed` asks for: every listed field is
        // `PlainInt` (the bound on `field_size`), and the listed fields start where the previous
        // one ended and end at `size_of::<Self>()`, so there is no gap and therefore no padding.
        unsafe impl $crate::launch::sealed::Sealed for $ty {}

        impl $crate::launch::AbiRecord for $ty {
            const NAME: &'static str = stringify!($ty);
        }
    };
}
pub(crate) use abi_record;

/// A fixed-layout record that crosses the host/device boundary as raw bytes.
///
/// Implemented for every `#[repr(C)]` record in this crate (launch payloads, handshakes) and
/// sealed: the crate proves each implementor's layout at compile time (no padding, integer
/// fields only), which is what makes the byte views below safe.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{AbiRecord, DecodeError, InitArgs};
///
/// let init = InitArgs::new(3);
/// let image = init.as_bytes().to_vec(); // what the host copies to the device
/// assert_eq!(InitArgs::from_bytes(&image), Ok(init));
/// assert_eq!(
///     InitArgs::from_bytes(&image[..16]),
///     Err(DecodeError::WrongLength { record: "InitArgs", expected: 32, actual: 16 })
/// );
/// ```
pub trait AbiRecord: sealed::Sealed + Copy + 'static {
    /// The record's type name, used in error messages.
    const NAME: &'static str;

    /// Size of the byte image in bytes (`size_of::<Self>()`).
    const SIZE: usize = size_of::<Self>();

    /// The record's byte image: exactly [`Self::SIZE`] bytes, little-endian, no padding.
    ///
    /// # Examples
    ///
    /// ```
    /// use ferry_abi::launch::{AbiRecord, InitArgs};
    /// assert_eq!(&InitArgs::new(7).as_bytes()[..4], &7u32.to_le_bytes());
    /// ```
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: [1] `self` is a live reference, so `size_of::<Self>()` bytes at it are readable
        // for the borrow's lifetime and nothing mutates them meanwhile; [2] `Sealed` (implemented
        // only by `abi_record!` after its layout proof) guarantees there are no padding bytes, so
        // every byte is initialised; [3] `u8` needs no alignment.
        unsafe {
            core::slice::from_raw_parts((self as *const Self).cast::<u8>(), size_of::<Self>())
        }
    }

    /// Reads a record back from its byte image.
    ///
    /// # Errors
    ///
    /// [`DecodeError::WrongLength`] when `bytes` is not exactly [`Self::SIZE`] long: the image was
    /// produced against another layout (an ABI size mismatch).
    ///
    /// # Examples
    ///
    /// ```
    /// use ferry_abi::launch::{AbiRecord, DeviceArgs};
    /// assert!(DeviceArgs::from_bytes(&[0u8; 160]).is_ok());
    /// assert!(DeviceArgs::from_bytes(&[0u8; 136]).is_err());
    /// ```
    fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() != size_of::<Self>() {
            return Err(DecodeError::WrongLength {
                record: Self::NAME,
                expected: size_of::<Self>(),
                actual: bytes.len(),
            });
        }
        // SAFETY: [1] `bytes` holds exactly `size_of::<Self>()` readable bytes (checked above);
        // [2] `read_unaligned` has no alignment requirement; [3] `Sealed` guarantees every field
        // is plain integer data, so any bit pattern is a valid `Self`.
        Ok(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<Self>()) })
    }
}

/// The ABI stamp that ends a versioned record ([`KernelArgs`], [`AicoreLaunchArgs`]).
///
/// The stamp is always the last 8 bytes (`abi_version` u32, then `abi_size` u32), whatever the
/// layout in front of it, so a program built against another layout can still read who sent the
/// blob and report the skew instead of misreading fields.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{AbiRecord, AbiStamp, KernelArgs, KERNEL_ARGS_ABI_VERSION};
/// let args = KernelArgs::new(1, 2);
/// let stamp = AbiStamp::peek(args.as_bytes()).unwrap();
/// assert_eq!(stamp, AbiStamp { version: KERNEL_ARGS_ABI_VERSION, size: KernelArgs::SIZE as u32 });
/// assert_eq!(AbiStamp::peek(&[0u8; 7]), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AbiStamp {
    /// The sender's `abi_version`.
    pub version: u32,
    /// The sender's `abi_size` (its `size_of` the record).
    pub size: u32,
}

impl AbiStamp {
    /// Reads the stamp from the last 8 bytes of a blob; `None` when the blob is shorter than 8.
    pub fn peek(bytes: &[u8]) -> Option<AbiStamp> {
        let tail = bytes.len().checked_sub(8).map(|start| &bytes[start..])?;
        let version = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        let size = u32::from_le_bytes([tail[4], tail[5], tail[6], tail[7]]);
        Some(AbiStamp { version, size })
    }
}

/// Checks a record's stamp against this build.
fn check_stamp(
    record: &'static str,
    version: u32,
    size: u32,
    own_size: usize,
) -> Result<(), DecodeError> {
    if version != KERNEL_ARGS_ABI_VERSION {
        return Err(DecodeError::VersionMismatch {
            record,
            expected: KERNEL_ARGS_ABI_VERSION,
            found: version,
        });
    }
    if size as usize != own_size {
        return Err(DecodeError::SizeFieldMismatch {
            record,
            expected: own_size as u32,
            found: size,
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Reading a record (or a name inside one) that crossed the boundary failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The byte image is not the record's size: the two sides were built against different
    /// layouts (ABI size mismatch).
    WrongLength {
        /// The record type expected.
        record: &'static str,
        /// This build's size of the record.
        expected: usize,
        /// Length of the image received.
        actual: usize,
    },
    /// The record's `abi_version` is not this build's version.
    VersionMismatch {
        /// The record type.
        record: &'static str,
        /// This build's version.
        expected: u32,
        /// The version in the record.
        found: u32,
    },
    /// The record's `abi_size` field disagrees with this build's size of the record.
    SizeFieldMismatch {
        /// The record type.
        record: &'static str,
        /// This build's size of the record.
        expected: u32,
        /// The size written in the record.
        found: u32,
    },
    /// A fixed-size name field holds no NUL terminator.
    NameUnterminated {
        /// Capacity of the field in bytes.
        capacity: usize,
    },
    /// A name field's bytes before the NUL are not UTF-8.
    NameNotUtf8 {
        /// Length of the longest valid UTF-8 prefix.
        valid_up_to: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::WrongLength { record, expected, actual } => {
                write!(f, "abi size mismatch for {record}: expected {expected} bytes, got {actual}")
            }
            DecodeError::VersionMismatch { record, expected, found } => {
                write!(f, "abi version mismatch for {record}: expected {expected}, found {found}")
            }
            DecodeError::SizeFieldMismatch { record, expected, found } => {
                write!(
                    f,
                    "abi size field of {record} says {found} bytes, this build has {expected}"
                )
            }
            DecodeError::NameUnterminated { capacity } => {
                write!(f, "name field of {capacity} bytes has no nul terminator")
            }
            DecodeError::NameNotUtf8 { valid_up_to } => {
                write!(f, "name is not utf-8 after byte {valid_up_to}")
            }
        }
    }
}

impl core::error::Error for DecodeError {}

/// Building a launch payload from host values failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// A name does not fit its field together with the NUL terminator.
    NameTooLong {
        /// Length of the name in bytes.
        len: usize,
        /// Longest name the field holds (capacity − 1).
        max: usize,
    },
    /// A name contains a NUL byte, which would silently truncate it on the device.
    NameContainsNul {
        /// Byte position of the first NUL.
        pos: usize,
    },
    /// A callable id outside `0..MAX_CALLABLES`.
    CallableIdOutOfRange {
        /// The id given.
        id: u32,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EncodeError::NameTooLong { len, max } => {
                write!(f, "name of {len} bytes is too long, the field holds at most {max}")
            }
            EncodeError::NameContainsNul { pos } => write!(f, "name contains a nul byte at {pos}"),
            EncodeError::CallableIdOutOfRange { id } => {
                write!(f, "callable id {id} is outside 0..{MAX_CALLABLES}")
            }
        }
    }
}

impl core::error::Error for EncodeError {}

// ---------------------------------------------------------------------------------------------
// NUL-terminated names
// ---------------------------------------------------------------------------------------------

/// Writes `name` into a fixed-size, NUL-terminated field, zeroing the rest of the field.
///
/// # Errors
///
/// [`EncodeError::NameTooLong`] when `name` needs more than `dst.len() - 1` bytes;
/// [`EncodeError::NameContainsNul`] when it contains a NUL byte. On error `dst` is unchanged.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{read_c_name, write_c_name, EncodeError};
/// let mut field = [0xAAu8; 8];
/// write_c_name(&mut field, "exec").unwrap();
/// assert_eq!(&field, b"exec\0\0\0\0");
/// assert_eq!(read_c_name(&field), Ok("exec"));
/// assert_eq!(write_c_name(&mut field, "too long"), Err(EncodeError::NameTooLong { len: 8, max: 7 }));
/// ```
pub fn write_c_name(dst: &mut [u8], name: &str) -> Result<(), EncodeError> {
    let bytes = name.as_bytes();
    // `>=`: the NUL terminator needs a byte too (an empty field holds no name at all).
    if bytes.len() >= dst.len() {
        return Err(EncodeError::NameTooLong {
            len: bytes.len(),
            max: dst.len().saturating_sub(1),
        });
    }
    if let Some(pos) = bytes.iter().position(|&b| b == 0) {
        return Err(EncodeError::NameContainsNul { pos });
    }
    let (head, tail) = dst.split_at_mut(bytes.len());
    head.copy_from_slice(bytes);
    tail.fill(0);
    Ok(())
}

/// Reads a NUL-terminated name from a fixed-size field (the bytes before the first NUL).
///
/// # Errors
///
/// [`DecodeError::NameUnterminated`] when the field has no NUL; [`DecodeError::NameNotUtf8`]
/// when the name is not UTF-8.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{read_c_name, DecodeError};
/// assert_eq!(read_c_name(b"so\0junk"), Ok("so"));
/// assert_eq!(read_c_name(b"full"), Err(DecodeError::NameUnterminated { capacity: 4 }));
/// ```
pub fn read_c_name(src: &[u8]) -> Result<&str, DecodeError> {
    let len = src
        .iter()
        .position(|&b| b == 0)
        .ok_or(DecodeError::NameUnterminated { capacity: src.len() })?;
    core::str::from_utf8(&src[..len])
        .map_err(|e| DecodeError::NameNotUtf8 { valid_up_to: e.valid_up_to() })
}

/// `write_c_name` for the constant names this module ships; fails the build if one does not fit.
const fn const_c_name<const N: usize>(name: &str) -> [u8; N] {
    let bytes = name.as_bytes();
    assert!(bytes.len() < N, "name does not fit its field with the nul terminator");
    let mut out = [0u8; N];
    let mut i = 0;
    while i < bytes.len() {
        assert!(bytes[i] != 0, "name contains a nul byte");
        out[i] = bytes[i];
        i += 1;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Per-run KernelArgs and its AICore projection
// ---------------------------------------------------------------------------------------------

/// Version of the [`KernelArgs`] / [`AicoreLaunchArgs`] layouts. Bump it on any change to either.
pub const KERNEL_ARGS_ABI_VERSION: u32 = 1;

/// `enable_profiling_flag` bit 0: dump task arguments (ArgsDump).
pub const PROFILING_FLAG_DUMP_ARGS: u32 = 1 << 0;
/// `enable_profiling_flag` bit 1: chip swimlane (ChipSwimlane).
pub const PROFILING_FLAG_CHIP_SWIMLANE: u32 = 1 << 1;
/// `enable_profiling_flag` bit 2: PMU counters (PMU).
pub const PROFILING_FLAG_PMU: u32 = 1 << 2;
/// `enable_profiling_flag` bit 3: dependency-graph capture (DepGen).
pub const PROFILING_FLAG_DEP_GEN: u32 = 1 << 3;
/// `enable_profiling_flag` bit 4: scope statistics (ScopeStats).
pub const PROFILING_FLAG_SCOPE_STATS: u32 = 1 << 4;
/// Every defined profiling bit; the others are reserved and zero.
pub const PROFILING_FLAG_ALL: u32 = PROFILING_FLAG_DUMP_ARGS
    | PROFILING_FLAG_CHIP_SWIMLANE
    | PROFILING_FLAG_PMU
    | PROFILING_FLAG_DEP_GEN
    | PROFILING_FLAG_SCOPE_STATS;

/// The front-less per-run payload of the AICPU exec entry, passed by value as the launch blob.
///
/// `runtime_args` sits at offset 0 and `regs` at 8 with no launch front before them (seed 004:
/// the 48-byte "front" was a misdiagnosis of build skew). Per-device invariants (device id, log
/// level, timeouts, DMA workspaces) are not here; they travel once in [`InitArgs`]. The AICPU gets
/// a private copy, so anything it returns to the host goes through a device address in the
/// payload (`device_wall_data_base`), never an inline field.
///
/// # One layout for both arches
///
/// The original had two layouts (96 bytes on a2a3, 88 on a5) in which the shared fields sat at
/// different offsets (`dump_data_base` at 24 vs 16, …). Two separately built programs that
/// disagree on the arch then misread each other silently, which is exactly the 507018 build-skew
/// failure the seed records. ferry uses one layout: the a2a3 one, whose offsets are kept
/// unchanged, with the a5-only fields placed where a2a3 had tail padding (`force_simt_anchor`) or
/// after it (`aicore_pmu_ring_addrs`). Arch-only fields are zero on the other arch. The ABI stamp
/// (`abi_version`, `abi_size`) comes last, because offset 0 is locked to `runtime_args`; it is
/// the last 8 bytes of any version of this payload, so [`AbiStamp::peek`] can read it from a blob
/// of any length.
///
/// # Layout
///
/// | offset | size | field | arch | read by |
/// |---:|---:|---|---|---|
/// | 0 | 8 | `runtime_args` | both | AICPU, AICore |
/// | 8 | 8 | `regs` | both | AICPU (a5: AICore too) |
/// | 16 | 8 | `ffts_base_addr` | a2a3 | AICore |
/// | 24 | 8 | `dump_data_base` | both | AICPU |
/// | 32 | 8 | `chip_swimlane_data_base` | both | AICPU |
/// | 40 | 8 | `pmu_data_base` | both | AICPU |
/// | 48 | 8 | `pmu_reg_addrs` | a2a3 | AICPU |
/// | 56 | 8 | `dep_gen_data_base` | both | AICPU |
/// | 64 | 8 | `scope_stats_data_base` | both | AICPU |
/// | 72 | 8 | `chip_swimlane_aicore_rotation_table` | both | AICore |
/// | 80 | 8 | `device_wall_data_base` | both | AICPU |
/// | 88 | 4 | `enable_profiling_flag` | both | AICPU, AICore |
/// | 92 | 4 | `force_simt_anchor` | a5 | AICore |
/// | 96 | 8 | `aicore_pmu_ring_addrs` | a5 | AICore |
/// | 104 | 4 | `abi_version` | both | both (stamp) |
/// | 108 | 4 | `abi_size` | both | both (stamp) |
///
/// Size 112, align 8.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{AbiRecord, KernelArgs, KERNEL_ARGS_ABI_VERSION};
/// let args = KernelArgs::new(0x10, 0x20);
/// assert_eq!(args.abi_version, KERNEL_ARGS_ABI_VERSION);
/// assert_eq!(args.abi_size as usize, KernelArgs::SIZE);
/// assert_eq!(&args.as_bytes()[..8], &0x10u64.to_le_bytes());
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelArgs {
    /// Device address of the uploaded runtime image.
    pub runtime_args: u64,
    /// Device address of a `u64` table of per-core register block bases, indexed by physical core
    /// id (length [`RegLayout::max_physical_cores`](crate::regs::RegLayout::max_physical_cores)).
    pub regs: u64,
    /// a2a3 only: FFTS control base set into each AICore; 0 on a5.
    pub ffts_base_addr: u64,
    /// ArgsDump shared-memory base, or 0.
    pub dump_data_base: u64,
    /// ChipSwimlane profiling base, or 0.
    pub chip_swimlane_data_base: u64,
    /// PMU profiling base, or 0.
    pub pmu_data_base: u64,
    /// a2a3 only: device address of the per-core PMU register table; 0 on a5.
    pub pmu_reg_addrs: u64,
    /// DepGen capture base, or 0.
    pub dep_gen_data_base: u64,
    /// ScopeStats base, or 0.
    pub scope_stats_data_base: u64,
    /// Device address of a `u64[num_aicore]` table of per-core swimlane head slots, indexed by
    /// block index.
    pub chip_swimlane_aicore_rotation_table: u64,
    /// Device address of the phase/timing buffer the AICPU writes and the host reads back.
    pub device_wall_data_base: u64,
    /// Profiling bitmask: `PROFILING_FLAG_*`.
    pub enable_profiling_flag: u32,
    /// a5 only: always 0; an opaque runtime condition that keeps a never-taken SIMT path alive in
    /// the AICore program. 0 on a2a3.
    pub force_simt_anchor: u32,
    /// a5 only: device address of the per-core PMU ring table read by AICore; 0 on a2a3.
    pub aicore_pmu_ring_addrs: u64,
    /// [`KERNEL_ARGS_ABI_VERSION`] of the build that wrote the payload.
    pub abi_version: u32,
    /// `size_of::<KernelArgs>()` of the build that wrote the payload.
    pub abi_size: u32,
}

abi_record!(KernelArgs, size 112, align 8, [
    runtime_args @ 0,
    regs @ 8,
    ffts_base_addr @ 16,
    dump_data_base @ 24,
    chip_swimlane_data_base @ 32,
    pmu_data_base @ 40,
    pmu_reg_addrs @ 48,
    dep_gen_data_base @ 56,
    scope_stats_data_base @ 64,
    chip_swimlane_aicore_rotation_table @ 72,
    device_wall_data_base @ 80,
    enable_profiling_flag @ 88,
    force_simt_anchor @ 92,
    aicore_pmu_ring_addrs @ 96,
    abi_version @ 104,
    abi_size @ 108,
]);

impl KernelArgs {
    /// A payload with the two locked fields set, profiling off, and this build's ABI stamp.
    pub const fn new(runtime_args: u64, regs: u64) -> KernelArgs {
        KernelArgs {
            runtime_args,
            regs,
            ffts_base_addr: 0,
            dump_data_base: 0,
            chip_swimlane_data_base: 0,
            pmu_data_base: 0,
            pmu_reg_addrs: 0,
            dep_gen_data_base: 0,
            scope_stats_data_base: 0,
            chip_swimlane_aicore_rotation_table: 0,
            device_wall_data_base: 0,
            enable_profiling_flag: 0,
            force_simt_anchor: 0,
            aicore_pmu_ring_addrs: 0,
            abi_version: KERNEL_ARGS_ABI_VERSION,
            abi_size: size_of::<KernelArgs>() as u32,
        }
    }

    /// Whether every bit of `flag` (a `PROFILING_FLAG_*` mask) is set.
    ///
    /// # Examples
    ///
    /// ```
    /// use ferry_abi::launch::{KernelArgs, PROFILING_FLAG_DEP_GEN, PROFILING_FLAG_PMU};
    /// let mut args = KernelArgs::new(0, 0);
    /// args.enable_profiling_flag = PROFILING_FLAG_PMU;
    /// assert!(args.profiling_enabled(PROFILING_FLAG_PMU));
    /// assert!(!args.profiling_enabled(PROFILING_FLAG_DEP_GEN));
    /// ```
    pub const fn profiling_enabled(&self, flag: u32) -> bool {
        self.enable_profiling_flag & flag == flag
    }

    /// Checks the ABI stamp against this build.
    ///
    /// # Errors
    ///
    /// [`DecodeError::VersionMismatch`] or [`DecodeError::SizeFieldMismatch`] when the payload was
    /// written by a build with another layout.
    pub fn check_abi(&self) -> Result<(), DecodeError> {
        check_stamp(Self::NAME, self.abi_version, self.abi_size, Self::SIZE)
    }

    /// [`AbiRecord::from_bytes`] followed by [`KernelArgs::check_abi`]: what a device program
    /// calls on the blob it was launched with.
    ///
    /// # Errors
    ///
    /// [`DecodeError::WrongLength`], [`DecodeError::VersionMismatch`] or
    /// [`DecodeError::SizeFieldMismatch`]; use [`AbiStamp::peek`] on the blob to report the
    /// sender's version.
    pub fn from_bytes_checked(bytes: &[u8]) -> Result<KernelArgs, DecodeError> {
        let args = KernelArgs::from_bytes(bytes)?;
        args.check_abi()?;
        Ok(args)
    }
}

impl Default for KernelArgs {
    /// [`KernelArgs::new(0, 0)`](KernelArgs::new): zero addresses, but a valid ABI stamp.
    fn default() -> KernelArgs {
        KernelArgs::new(0, 0)
    }
}

/// The projection of [`KernelArgs`] that the AICore entry reads, passed by value in the AICore
/// launch's own argument block (seed 004: neither side reads a device-resident copy).
///
/// It carries every field an AICore program reads on either arch, plus its own ABI stamp (same
/// version as `KernelArgs`: the two change together). The block dimension and each core's block
/// index are not here: as on hardware, they come from the launch configuration (`block_dim`)
/// and the core itself.
///
/// # Layout
///
/// | offset | size | field | arch |
/// |---:|---:|---|---|
/// | 0 | 8 | `runtime_args` | both |
/// | 8 | 8 | `regs` | both |
/// | 16 | 8 | `ffts_base_addr` | a2a3 |
/// | 24 | 8 | `chip_swimlane_aicore_rotation_table` | both |
/// | 32 | 8 | `aicore_pmu_ring_addrs` | a5 |
/// | 40 | 4 | `enable_profiling_flag` | both |
/// | 44 | 4 | `force_simt_anchor` | a5 |
/// | 48 | 4 | `abi_version` | both |
/// | 52 | 4 | `abi_size` | both |
///
/// Size 56, align 8.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{AbiRecord, AicoreLaunchArgs, KernelArgs};
/// let mut args = KernelArgs::new(0x10, 0x20);
/// args.chip_swimlane_aicore_rotation_table = 0x30;
/// let core = AicoreLaunchArgs::from(&args);
/// assert_eq!(core.chip_swimlane_aicore_rotation_table, 0x30);
/// assert_eq!(AicoreLaunchArgs::from_bytes_checked(core.as_bytes()), Ok(core));
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AicoreLaunchArgs {
    /// [`KernelArgs::runtime_args`].
    pub runtime_args: u64,
    /// [`KernelArgs::regs`].
    pub regs: u64,
    /// [`KernelArgs::ffts_base_addr`] (a2a3).
    pub ffts_base_addr: u64,
    /// [`KernelArgs::chip_swimlane_aicore_rotation_table`].
    pub chip_swimlane_aicore_rotation_table: u64,
    /// [`KernelArgs::aicore_pmu_ring_addrs`] (a5).
    pub aicore_pmu_ring_addrs: u64,
    /// [`KernelArgs::enable_profiling_flag`].
    pub enable_profiling_flag: u32,
    /// [`KernelArgs::force_simt_anchor`] (a5).
    pub force_simt_anchor: u32,
    /// [`KERNEL_ARGS_ABI_VERSION`] of the build that wrote the payload.
    pub abi_version: u32,
    /// `size_of::<AicoreLaunchArgs>()` of the build that wrote the payload.
    pub abi_size: u32,
}

abi_record!(AicoreLaunchArgs, size 56, align 8, [
    runtime_args @ 0,
    regs @ 8,
    ffts_base_addr @ 16,
    chip_swimlane_aicore_rotation_table @ 24,
    aicore_pmu_ring_addrs @ 32,
    enable_profiling_flag @ 40,
    force_simt_anchor @ 44,
    abi_version @ 48,
    abi_size @ 52,
]);

impl AicoreLaunchArgs {
    /// Whether every bit of `flag` (a `PROFILING_FLAG_*` mask) is set.
    pub const fn profiling_enabled(&self, flag: u32) -> bool {
        self.enable_profiling_flag & flag == flag
    }

    /// Checks the ABI stamp against this build.
    ///
    /// # Errors
    ///
    /// [`DecodeError::VersionMismatch`] or [`DecodeError::SizeFieldMismatch`].
    pub fn check_abi(&self) -> Result<(), DecodeError> {
        check_stamp(Self::NAME, self.abi_version, self.abi_size, Self::SIZE)
    }

    /// [`AbiRecord::from_bytes`] followed by [`AicoreLaunchArgs::check_abi`].
    ///
    /// # Errors
    ///
    /// [`DecodeError::WrongLength`], [`DecodeError::VersionMismatch`] or
    /// [`DecodeError::SizeFieldMismatch`].
    pub fn from_bytes_checked(bytes: &[u8]) -> Result<AicoreLaunchArgs, DecodeError> {
        let args = AicoreLaunchArgs::from_bytes(bytes)?;
        args.check_abi()?;
        Ok(args)
    }
}

impl From<&KernelArgs> for AicoreLaunchArgs {
    /// Projects the AICore-read fields and stamps this build's ABI.
    fn from(k: &KernelArgs) -> AicoreLaunchArgs {
        AicoreLaunchArgs {
            runtime_args: k.runtime_args,
            regs: k.regs,
            ffts_base_addr: k.ffts_base_addr,
            chip_swimlane_aicore_rotation_table: k.chip_swimlane_aicore_rotation_table,
            aicore_pmu_ring_addrs: k.aicore_pmu_ring_addrs,
            enable_profiling_flag: k.enable_profiling_flag,
            force_simt_anchor: k.force_simt_anchor,
            abi_version: KERNEL_ARGS_ABI_VERSION,
            abi_size: size_of::<AicoreLaunchArgs>() as u32,
        }
    }
}

impl Default for AicoreLaunchArgs {
    /// The projection of [`KernelArgs::default`].
    fn default() -> AicoreLaunchArgs {
        AicoreLaunchArgs::from(&KernelArgs::default())
    }
}

// ---------------------------------------------------------------------------------------------
// InitArgs
// ---------------------------------------------------------------------------------------------

/// Log level DEBUG.
pub const LOG_LEVEL_DEBUG: u32 = 10;
/// Log level INFO.
pub const LOG_LEVEL_INFO: u32 = 20;
/// Log level TIMING (the default).
pub const LOG_LEVEL_TIMING: u32 = 25;
/// Log level WARN.
pub const LOG_LEVEL_WARN: u32 = 30;
/// Log level ERROR.
pub const LOG_LEVEL_ERROR: u32 = 40;
/// Log level NUL: logging off.
pub const LOG_LEVEL_NUL: u32 = 60;
/// Default `InitArgs::log_level`.
pub const LOG_LEVEL_DEFAULT: u32 = LOG_LEVEL_TIMING;

/// Index of the SDMA workspace in [`InitArgs::dma_workspace_addr`].
pub const DMA_WORKSPACE_SDMA: usize = 0;
/// Index of the URMA workspace in [`InitArgs::dma_workspace_addr`] (reserved).
pub const DMA_WORKSPACE_URMA: usize = 1;

/// Per-device invariants, sent once to the AICPU program's init entry (launch.md §3.3).
///
/// The AICPU program stays loaded across launches and latches these values; a reused runner
/// re-sends them after the next bootstrap.
///
/// # Layout
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 4 | `device_id` u32 |
/// | 4 | 4 | `log_level` u32 |
/// | 8 | 4 | `scheduler_timeout_ms` i32 |
/// | 12 | 4 | `_reserved0` |
/// | 16 | 16 | `dma_workspace_addr` [u64; 2] |
///
/// Size 32, align 8.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{AbiRecord, InitArgs, LOG_LEVEL_DEFAULT};
/// let init = InitArgs::new(1);
/// assert_eq!(init.log_level, LOG_LEVEL_DEFAULT);
/// assert_eq!(InitArgs::SIZE, 32);
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InitArgs {
    /// The device (die) id.
    pub device_id: u32,
    /// `LOG_LEVEL_*`; default [`LOG_LEVEL_DEFAULT`].
    pub log_level: u32,
    /// Scheduler watchdog in milliseconds; 0 = the program's compiled default.
    pub scheduler_timeout_ms: i32,
    _reserved0: u32,
    /// DMA workspace device addresses: [`DMA_WORKSPACE_SDMA`], [`DMA_WORKSPACE_URMA`]; 0 = absent.
    pub dma_workspace_addr: [u64; 2],
}

abi_record!(InitArgs, size 32, align 8, [
    device_id @ 0,
    log_level @ 4,
    scheduler_timeout_ms @ 8,
    _reserved0 @ 12,
    dma_workspace_addr @ 16,
]);

impl InitArgs {
    /// Init args for `device_id` with the default log level, the compiled-in scheduler timeout and
    /// no DMA workspaces.
    pub const fn new(device_id: u32) -> InitArgs {
        InitArgs {
            device_id,
            log_level: LOG_LEVEL_DEFAULT,
            scheduler_timeout_ms: 0,
            _reserved0: 0,
            dma_workspace_addr: [0; 2],
        }
    }
}

impl Default for InitArgs {
    /// [`InitArgs::new(0)`](InitArgs::new).
    fn default() -> InitArgs {
        InitArgs::new(0)
    }
}

// ---------------------------------------------------------------------------------------------
// RegisterCallableArgs
// ---------------------------------------------------------------------------------------------

/// Number of callable slots; a callable id is valid in `0..MAX_CALLABLES`.
pub const MAX_CALLABLES: u32 = 64;
/// `active_callable_id` of a payload that names no callable (the default).
pub const NO_CALLABLE: i32 = -1;
/// Capacity of each name field of [`RegisterCallableArgs`] (names hold at most 63 bytes).
pub const CALLABLE_NAME_CAPACITY: usize = 64;

/// Hands the AICPU program one callable's device orchestration code (launch.md §3.5).
///
/// Empty names mean the default entry / config symbol.
///
/// # Layout
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 4 | `active_callable_id` i32 (−1 = none; else `0..MAX_CALLABLES`) |
/// | 4 | 4 | `_reserved0` |
/// | 8 | 8 | `dev_orch_so_addr` u64 |
/// | 16 | 8 | `dev_orch_so_size` u64 |
/// | 24 | 64 | `device_orch_func_name` [u8; 64], NUL-terminated |
/// | 88 | 64 | `device_orch_config_name` [u8; 64], NUL-terminated |
///
/// Size 152, align 8.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{AbiRecord, RegisterCallableArgs};
/// let mut rca = RegisterCallableArgs::new(5, 0x8000, 4096).unwrap();
/// rca.set_device_orch_func_name("orch_main").unwrap();
/// let seen = RegisterCallableArgs::from_bytes(rca.as_bytes()).unwrap();
/// assert_eq!(seen.callable_id(), Some(5));
/// assert_eq!(seen.device_orch_func_name(), Ok("orch_main"));
/// assert_eq!(seen.device_orch_config_name(), Ok(""));
/// ```
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegisterCallableArgs {
    /// The callable slot, or [`NO_CALLABLE`]; read it with [`RegisterCallableArgs::callable_id`].
    pub active_callable_id: i32,
    _reserved0: u32,
    /// Device address of the orchestration SO image.
    pub dev_orch_so_addr: u64,
    /// Size of the orchestration SO image in bytes.
    pub dev_orch_so_size: u64,
    /// Entry symbol, NUL-terminated; empty = default. Use the accessors.
    pub device_orch_func_name: [u8; CALLABLE_NAME_CAPACITY],
    /// Config symbol, NUL-terminated; empty = default. Use the accessors.
    pub device_orch_config_name: [u8; CALLABLE_NAME_CAPACITY],
}

abi_record!(RegisterCallableArgs, size 152, align 8, [
    active_callable_id @ 0,
    _reserved0 @ 4,
    dev_orch_so_addr @ 8,
    dev_orch_so_size @ 16,
    device_orch_func_name @ 24,
    device_orch_config_name @ 88,
]);

impl RegisterCallableArgs {
    /// A payload for callable `callable_id` whose orchestration SO is `so_size` bytes at device
    /// address `so_addr`, with default (empty) names.
    ///
    /// # Errors
    ///
    /// [`EncodeError::CallableIdOutOfRange`] unless `callable_id < MAX_CALLABLES`.
    pub const fn new(callable_id: u32, so_addr: u64, so_size: u64) -> Result<Self, EncodeError> {
        if callable_id >= MAX_CALLABLES {
            return Err(EncodeError::CallableIdOutOfRange { id: callable_id });
        }
        Ok(RegisterCallableArgs {
            active_callable_id: callable_id as i32,
            dev_orch_so_addr: so_addr,
            dev_orch_so_size: so_size,
            ..RegisterCallableArgs::EMPTY
        })
    }

    /// The no-op payload: no callable, no SO, empty names.
    pub const EMPTY: RegisterCallableArgs = RegisterCallableArgs {
        active_callable_id: NO_CALLABLE,
        _reserved0: 0,
        dev_orch_so_addr: 0,
        dev_orch_so_size: 0,
        device_orch_func_name: [0; CALLABLE_NAME_CAPACITY],
        device_orch_config_name: [0; CALLABLE_NAME_CAPACITY],
    };

    /// The callable id when it is in `0..MAX_CALLABLES`; `None` for [`NO_CALLABLE`] or any other
    /// out-of-range value.
    pub const fn callable_id(&self) -> Option<u32> {
        if self.active_callable_id >= 0 && (self.active_callable_id as u32) < MAX_CALLABLES {
            Some(self.active_callable_id as u32)
        } else {
            None
        }
    }

    /// The entry symbol name ("" = default entry).
    ///
    /// # Errors
    ///
    /// [`DecodeError::NameUnterminated`] or [`DecodeError::NameNotUtf8`] for a corrupt field.
    pub fn device_orch_func_name(&self) -> Result<&str, DecodeError> {
        read_c_name(&self.device_orch_func_name)
    }

    /// Sets the entry symbol name ("" = default entry).
    ///
    /// # Errors
    ///
    /// [`EncodeError::NameTooLong`] beyond 63 bytes, [`EncodeError::NameContainsNul`]; the field
    /// is unchanged on error.
    pub fn set_device_orch_func_name(&mut self, name: &str) -> Result<(), EncodeError> {
        write_c_name(&mut self.device_orch_func_name, name)
    }

    /// The config symbol name ("" = default config).
    ///
    /// # Errors
    ///
    /// [`DecodeError::NameUnterminated`] or [`DecodeError::NameNotUtf8`] for a corrupt field.
    pub fn device_orch_config_name(&self) -> Result<&str, DecodeError> {
        read_c_name(&self.device_orch_config_name)
    }

    /// Sets the config symbol name ("" = default config).
    ///
    /// # Errors
    ///
    /// [`EncodeError::NameTooLong`] beyond 63 bytes, [`EncodeError::NameContainsNul`]; the field
    /// is unchanged on error.
    pub fn set_device_orch_config_name(&mut self, name: &str) -> Result<(), EncodeError> {
        write_c_name(&mut self.device_orch_config_name, name)
    }
}

impl Default for RegisterCallableArgs {
    /// [`RegisterCallableArgs::EMPTY`].
    fn default() -> RegisterCallableArgs {
        RegisterCallableArgs::EMPTY
    }
}

impl fmt::Debug for RegisterCallableArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisterCallableArgs")
            .field("active_callable_id", &self.active_callable_id)
            .field("dev_orch_so_addr", &format_args!("{:#x}", self.dev_orch_so_addr))
            .field("dev_orch_so_size", &self.dev_orch_so_size)
            .field("device_orch_func_name", &DebugName(&self.device_orch_func_name))
            .field("device_orch_config_name", &DebugName(&self.device_orch_config_name))
            .finish_non_exhaustive()
    }
}

/// Debug view of a name field: the string when it decodes, else the raw bytes.
struct DebugName<'a>(&'a [u8]);

impl fmt::Debug for DebugName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match read_c_name(self.0) {
            Ok(s) => fmt::Debug::fmt(s, f),
            Err(_) => fmt::Debug::fmt(self.0, f),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bootstrap ABI (Path A)
// ---------------------------------------------------------------------------------------------

/// Dispatcher export: a stub that logs and returns 0 (success, in case the loader probes it).
pub const DISPATCHER_EXPORT_STATIC: &str = "StaticTileFwkBackendKernelServer";
/// Dispatcher export: the only real work, writes the inner program; 0 = written, 1 = any failure.
pub const DISPATCHER_EXPORT_INIT: &str = "DynTileFwkBackendKernelServerInit";
/// Dispatcher export: a stub that logs and returns 0; the dispatcher never runs per-task work.
pub const DISPATCHER_EXPORT_RUN: &str = "DynTileFwkBackendKernelServer";
/// The three exports a dispatcher must have; a dispatcher missing any of them is unusable.
pub const DISPATCHER_EXPORTS: [&str; 3] =
    [DISPATCHER_EXPORT_STATIC, DISPATCHER_EXPORT_INIT, DISPATCHER_EXPORT_RUN];

/// Kernel name written into [`BootstrapBlob`] at offset 208: the device-side loader entry that
/// loads the dispatcher and calls [`DISPATCHER_EXPORT_INIT`].
pub const BOOTSTRAP_KERNEL_NAME: &str = "DynTileFwkKernelServerInit";
/// SO name written into [`BootstrapBlob`] at offset 240: the preinstalled device-side loader.
pub const BOOTSTRAP_SO_NAME: &str = "libaicpu_extend_kernels.so";
/// Op type passed to the bootstrap launch call itself (not stored in the blob, whose op-name field
/// stays empty).
pub const BOOTSTRAP_OP_TYPE: &str = "AST_DYN_AICPU";
/// Capacity of each name field of [`BootstrapBlob`] (names hold at most 31 bytes).
pub const BOOTSTRAP_NAME_CAPACITY: usize = 32;

/// The launch blob of the bootstrap dispatcher launch (Path A only; launch.md §3.1).
///
/// Private to the loader: the host builds it, the device-side loader reads the names, and the
/// dispatcher follows `device_args_ptr` to a [`DeviceArgs`]. The dispatcher's own view of the
/// blob names +48 `runtime_args` and +56 `regs` but never reads them; here they are reserved.
///
/// # Layout
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 40 | `_reserved0` [u64; 5], zero |
/// | 40 | 8 | `device_args_ptr` u64: device address of the [`DeviceArgs`] |
/// | 48 | 160 | `_reserved1` [u64; 20], zero |
/// | 208 | 32 | `kernel_name`, NUL-terminated: [`BOOTSTRAP_KERNEL_NAME`] |
/// | 240 | 32 | `so_name`, NUL-terminated: [`BOOTSTRAP_SO_NAME`] |
/// | 272 | 32 | `op_name`, NUL-terminated: empty |
///
/// Size 304, align 8.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{AbiRecord, BootstrapBlob, BOOTSTRAP_SO_NAME};
/// let blob = BootstrapBlob::new(0x4000);
/// let seen = BootstrapBlob::from_bytes(blob.as_bytes()).unwrap();
/// assert_eq!(seen.device_args_ptr, 0x4000);
/// assert_eq!(seen.so_name(), Ok(BOOTSTRAP_SO_NAME));
/// assert_eq!(BootstrapBlob::SIZE, 304);
/// ```
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BootstrapBlob {
    _reserved0: [u64; 5],
    /// Device address of the [`DeviceArgs`].
    pub device_args_ptr: u64,
    _reserved1: [u64; 20],
    /// Kernel name field; see [`BootstrapBlob::kernel_name`].
    pub kernel_name: [u8; BOOTSTRAP_NAME_CAPACITY],
    /// SO name field; see [`BootstrapBlob::so_name`].
    pub so_name: [u8; BOOTSTRAP_NAME_CAPACITY],
    /// Op name field (empty); see [`BootstrapBlob::op_name`].
    pub op_name: [u8; BOOTSTRAP_NAME_CAPACITY],
}

abi_record!(BootstrapBlob, size 304, align 8, [
    _reserved0 @ 0,
    device_args_ptr @ 40,
    _reserved1 @ 48,
    kernel_name @ 208,
    so_name @ 240,
    op_name @ 272,
]);

/// Offset of `kernel_name` in the blob (the launch's kernel-name offset argument).
pub const BOOTSTRAP_KERNEL_NAME_OFFSET: usize = core::mem::offset_of!(BootstrapBlob, kernel_name);
/// Offset of `so_name` in the blob (the launch's SO-name offset argument).
pub const BOOTSTRAP_SO_NAME_OFFSET: usize = core::mem::offset_of!(BootstrapBlob, so_name);

impl BootstrapBlob {
    /// The blob that points the dispatcher at `device_args_ptr`, with the standard names.
    pub const fn new(device_args_ptr: u64) -> BootstrapBlob {
        BootstrapBlob {
            _reserved0: [0; 5],
            device_args_ptr,
            _reserved1: [0; 20],
            kernel_name: const_c_name(BOOTSTRAP_KERNEL_NAME),
            so_name: const_c_name(BOOTSTRAP_SO_NAME),
            op_name: [0; BOOTSTRAP_NAME_CAPACITY],
        }
    }

    /// The kernel name (normally [`BOOTSTRAP_KERNEL_NAME`]).
    ///
    /// # Errors
    ///
    /// [`DecodeError::NameUnterminated`] or [`DecodeError::NameNotUtf8`] for a corrupt field.
    pub fn kernel_name(&self) -> Result<&str, DecodeError> {
        read_c_name(&self.kernel_name)
    }

    /// The SO name (normally [`BOOTSTRAP_SO_NAME`]).
    ///
    /// # Errors
    ///
    /// [`DecodeError::NameUnterminated`] or [`DecodeError::NameNotUtf8`] for a corrupt field.
    pub fn so_name(&self) -> Result<&str, DecodeError> {
        read_c_name(&self.so_name)
    }

    /// The op name (normally empty).
    ///
    /// # Errors
    ///
    /// [`DecodeError::NameUnterminated`] or [`DecodeError::NameNotUtf8`] for a corrupt field.
    pub fn op_name(&self) -> Result<&str, DecodeError> {
        read_c_name(&self.op_name)
    }
}

impl Default for BootstrapBlob {
    /// [`BootstrapBlob::new(0)`](BootstrapBlob::new).
    fn default() -> BootstrapBlob {
        BootstrapBlob::new(0)
    }
}

impl fmt::Debug for BootstrapBlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapBlob")
            .field("device_args_ptr", &format_args!("{:#x}", self.device_args_ptr))
            .field("kernel_name", &DebugName(&self.kernel_name))
            .field("so_name", &DebugName(&self.so_name))
            .field("op_name", &DebugName(&self.op_name))
            .finish_non_exhaustive()
    }
}

/// What the bootstrap dispatcher reads through [`BootstrapBlob::device_args_ptr`]: where the
/// dispatcher and the inner (AICPU) program bytes are in device memory (launch.md §3.1).
///
/// The name is kept because the device side really reads a structure of that name. 136 of the
/// 160 bytes are meaningful.
///
/// # Layout
///
/// | offset | size | field | read by |
/// |---:|---:|---|---|
/// | 0 | 96 | `_reserved0` [u64; 12], zero | — |
/// | 96 | 8 | `aicpu_so_bin` u64: device address of the dispatcher bytes | device loader |
/// | 104 | 8 | `aicpu_so_len` u64 | device loader |
/// | 112 | 8 | `device_id` u64 | device loader, dispatcher (file-name suffix) |
/// | 120 | 8 | `inner_so_bin` u64: device address of the inner program bytes | dispatcher |
/// | 128 | 8 | `inner_so_len` u64 | dispatcher |
/// | 136 | 24 | `_reserved1` [u64; 3], zero | — |
///
/// Size 160, align 8.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{AbiRecord, DeviceArgs};
/// let mut d = DeviceArgs::zeroed();
/// d.inner_so_bin = 0x9000;
/// d.inner_so_len = 4096;
/// assert_eq!(&d.as_bytes()[120..128], &0x9000u64.to_le_bytes());
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceArgs {
    _reserved0: [u64; 12],
    /// Device address of the dispatcher program bytes.
    pub aicpu_so_bin: u64,
    /// Length of the dispatcher program in bytes.
    pub aicpu_so_len: u64,
    /// The device (die) id.
    pub device_id: u64,
    /// Device address of the inner (AICPU runtime) program bytes.
    pub inner_so_bin: u64,
    /// Length of the inner program in bytes.
    pub inner_so_len: u64,
    _reserved1: [u64; 3],
}

abi_record!(DeviceArgs, size 160, align 8, [
    _reserved0 @ 0,
    aicpu_so_bin @ 96,
    aicpu_so_len @ 104,
    device_id @ 112,
    inner_so_bin @ 120,
    inner_so_len @ 128,
    _reserved1 @ 136,
]);

impl DeviceArgs {
    /// All zero.
    pub const fn zeroed() -> DeviceArgs {
        DeviceArgs {
            _reserved0: [0; 12],
            aicpu_so_bin: 0,
            aicpu_so_len: 0,
            device_id: 0,
            inner_so_bin: 0,
            inner_so_len: 0,
            _reserved1: [0; 3],
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::format;
    use std::string::ToString;
    use std::vec::Vec;

    fn round_trip<T: AbiRecord + PartialEq + fmt::Debug>(v: T) {
        let bytes = v.as_bytes();
        assert_eq!(bytes.len(), T::SIZE);
        assert_eq!(T::from_bytes(bytes), Ok(v));
        // One byte short and one byte long are both ABI size mismatches.
        let mut long: Vec<u8> = bytes.to_vec();
        long.push(0);
        for bad in [&bytes[..T::SIZE - 1], &long[..], &[][..]] {
            assert_eq!(
                T::from_bytes(bad),
                Err(DecodeError::WrongLength {
                    record: T::NAME,
                    expected: T::SIZE,
                    actual: bad.len()
                })
            );
        }
    }

    fn full_kernel_args() -> KernelArgs {
        KernelArgs {
            ffts_base_addr: 3,
            dump_data_base: 4,
            chip_swimlane_data_base: 5,
            pmu_data_base: 6,
            pmu_reg_addrs: 7,
            dep_gen_data_base: 8,
            scope_stats_data_base: 9,
            chip_swimlane_aicore_rotation_table: 10,
            device_wall_data_base: 11,
            enable_profiling_flag: PROFILING_FLAG_ALL,
            force_simt_anchor: 13,
            aicore_pmu_ring_addrs: 14,
            ..KernelArgs::new(1, 2)
        }
    }

    #[test]
    fn every_record_round_trips_and_rejects_wrong_lengths() {
        round_trip(full_kernel_args());
        round_trip(AicoreLaunchArgs::from(&full_kernel_args()));
        let mut init = InitArgs::new(9);
        init.scheduler_timeout_ms = -1;
        init.dma_workspace_addr = [0xAA, 0xBB];
        round_trip(init);
        let mut rca = RegisterCallableArgs::new(63, 0x1000, 77).unwrap();
        rca.set_device_orch_config_name("cfg").unwrap();
        round_trip(rca);
        round_trip(RegisterCallableArgs::default());
        round_trip(BootstrapBlob::new(0xdead_beef));
        let mut d = DeviceArgs::zeroed();
        d.aicpu_so_bin = 1;
        d.inner_so_len = 2;
        round_trip(d);
    }

    #[test]
    fn kernel_args_image_is_little_endian_at_documented_offsets() {
        let k = full_kernel_args();
        let b = k.as_bytes();
        let u64_at = |off: usize| u64::from_le_bytes(b[off..off + 8].try_into().unwrap());
        let u32_at = |off: usize| u32::from_le_bytes(b[off..off + 4].try_into().unwrap());
        assert_eq!(u64_at(0), 1);
        assert_eq!(u64_at(8), 2);
        assert_eq!(u64_at(16), 3);
        assert_eq!(u64_at(24), 4);
        assert_eq!(u64_at(72), 10);
        assert_eq!(u64_at(80), 11);
        assert_eq!(u32_at(88), PROFILING_FLAG_ALL);
        assert_eq!(u32_at(92), 13);
        assert_eq!(u64_at(96), 14);
        assert_eq!(u32_at(104), KERNEL_ARGS_ABI_VERSION);
        assert_eq!(u32_at(108), 112);
    }

    #[test]
    fn kernel_args_stamp_detects_skew() {
        let good = KernelArgs::new(1, 2);
        assert_eq!(KernelArgs::from_bytes_checked(good.as_bytes()), Ok(good));
        assert_eq!(KernelArgs::default().check_abi(), Ok(()));

        let mut old = good;
        old.abi_version = KERNEL_ARGS_ABI_VERSION + 1;
        assert_eq!(
            KernelArgs::from_bytes_checked(old.as_bytes()),
            Err(DecodeError::VersionMismatch {
                record: "KernelArgs",
                expected: KERNEL_ARGS_ABI_VERSION,
                found: KERNEL_ARGS_ABI_VERSION + 1
            })
        );

        let mut lying = good;
        lying.abi_size = 96;
        assert_eq!(
            lying.check_abi(),
            Err(DecodeError::SizeFieldMismatch { record: "KernelArgs", expected: 112, found: 96 })
        );

        // A zeroed image (e.g. a device program that never got a payload) fails the stamp.
        assert!(matches!(
            KernelArgs::from_bytes_checked(&[0u8; 112]),
            Err(DecodeError::VersionMismatch { found: 0, .. })
        ));

        // A blob from a build with a longer layout: wrong length, and its stamp is still readable.
        let mut longer = good.as_bytes()[..104].to_vec();
        longer.extend_from_slice(&[0u8; 8]); // a field this build does not know
        longer.extend_from_slice(&7u32.to_le_bytes());
        longer.extend_from_slice(&120u32.to_le_bytes());
        assert_eq!(
            KernelArgs::from_bytes_checked(&longer),
            Err(DecodeError::WrongLength { record: "KernelArgs", expected: 112, actual: 120 })
        );
        assert_eq!(AbiStamp::peek(&longer), Some(AbiStamp { version: 7, size: 120 }));
    }

    #[test]
    fn aicore_projection_copies_the_aicore_fields() {
        let k = full_kernel_args();
        let a = AicoreLaunchArgs::from(&k);
        assert_eq!(a.runtime_args, k.runtime_args);
        assert_eq!(a.regs, k.regs);
        assert_eq!(a.ffts_base_addr, k.ffts_base_addr);
        assert_eq!(a.chip_swimlane_aicore_rotation_table, k.chip_swimlane_aicore_rotation_table);
        assert_eq!(a.aicore_pmu_ring_addrs, k.aicore_pmu_ring_addrs);
        assert_eq!(a.enable_profiling_flag, k.enable_profiling_flag);
        assert_eq!(a.force_simt_anchor, k.force_simt_anchor);
        assert_eq!(a.check_abi(), Ok(()));
        assert_eq!(a.abi_size as usize, AicoreLaunchArgs::SIZE);
        assert!(a.profiling_enabled(PROFILING_FLAG_CHIP_SWIMLANE | PROFILING_FLAG_PMU));
        assert_eq!(AbiStamp::peek(a.as_bytes()), Some(AbiStamp { version: 1, size: 56 }));
        assert!(matches!(
            AicoreLaunchArgs::from_bytes_checked(k.as_bytes()),
            Err(DecodeError::WrongLength { expected: 56, actual: 112, .. })
        ));
    }

    #[test]
    fn profiling_flags_are_the_documented_bits() {
        assert_eq!(
            [
                PROFILING_FLAG_DUMP_ARGS,
                PROFILING_FLAG_CHIP_SWIMLANE,
                PROFILING_FLAG_PMU,
                PROFILING_FLAG_DEP_GEN,
                PROFILING_FLAG_SCOPE_STATS
            ],
            [1, 2, 4, 8, 16]
        );
        assert_eq!(PROFILING_FLAG_ALL, 0x1F);
        let k = KernelArgs::new(0, 0);
        assert!(k.profiling_enabled(0));
        assert!(!k.profiling_enabled(PROFILING_FLAG_DUMP_ARGS));
    }

    #[test]
    fn init_args_defaults_and_layout() {
        let i = InitArgs::default();
        assert_eq!((i.device_id, i.log_level, i.scheduler_timeout_ms), (0, 25, 0));
        assert_eq!(i.dma_workspace_addr, [0, 0]);
        let mut i = InitArgs::new(2);
        i.log_level = LOG_LEVEL_ERROR;
        i.scheduler_timeout_ms = -5;
        i.dma_workspace_addr[DMA_WORKSPACE_SDMA] = 0x55;
        let b = i.as_bytes();
        assert_eq!(&b[0..4], &2u32.to_le_bytes());
        assert_eq!(&b[4..8], &40u32.to_le_bytes());
        assert_eq!(&b[8..12], &(-5i32).to_le_bytes());
        assert_eq!(&b[12..16], &[0; 4]);
        assert_eq!(&b[16..24], &0x55u64.to_le_bytes());
        assert_eq!(
            [
                LOG_LEVEL_DEBUG,
                LOG_LEVEL_INFO,
                LOG_LEVEL_TIMING,
                LOG_LEVEL_WARN,
                LOG_LEVEL_ERROR,
                LOG_LEVEL_NUL
            ],
            [10, 20, 25, 30, 40, 60]
        );
    }

    #[test]
    fn callable_ids_are_checked() {
        assert_eq!(RegisterCallableArgs::new(0, 0, 0).unwrap().callable_id(), Some(0));
        assert_eq!(RegisterCallableArgs::new(63, 0, 0).unwrap().callable_id(), Some(63));
        assert_eq!(
            RegisterCallableArgs::new(64, 0, 0),
            Err(EncodeError::CallableIdOutOfRange { id: 64 })
        );
        let mut r = RegisterCallableArgs::default();
        assert_eq!(r.active_callable_id, NO_CALLABLE);
        assert_eq!(r.callable_id(), None);
        r.active_callable_id = 64;
        assert_eq!(r.callable_id(), None);
        r.active_callable_id = i32::MIN;
        assert_eq!(r.callable_id(), None);
    }

    #[test]
    fn callable_names_set_get_and_reject() {
        let mut r = RegisterCallableArgs::default();
        assert_eq!(r.device_orch_func_name(), Ok(""));
        let max = "x".repeat(63);
        r.set_device_orch_func_name(&max).unwrap();
        assert_eq!(r.device_orch_func_name(), Ok(max.as_str()));
        assert_eq!(r.device_orch_func_name[63], 0);

        // Too long: typed error, field unchanged.
        let long = "y".repeat(64);
        assert_eq!(
            r.set_device_orch_func_name(&long),
            Err(EncodeError::NameTooLong { len: 64, max: 63 })
        );
        assert_eq!(r.device_orch_func_name(), Ok(max.as_str()));
        assert_eq!(
            r.set_device_orch_config_name("a\0b"),
            Err(EncodeError::NameContainsNul { pos: 1 })
        );

        // A shorter name clears the tail of a longer one.
        r.set_device_orch_func_name("main").unwrap();
        assert_eq!(r.device_orch_func_name(), Ok("main"));
        assert!(r.device_orch_func_name[4..].iter().all(|&b| b == 0));

        // Corrupt fields from the other side are reported, not misread.
        r.device_orch_config_name = [b'z'; 64];
        assert_eq!(
            r.device_orch_config_name(),
            Err(DecodeError::NameUnterminated { capacity: 64 })
        );
        r.device_orch_config_name[0] = 0xFF;
        r.device_orch_config_name[1] = 0;
        assert_eq!(r.device_orch_config_name(), Err(DecodeError::NameNotUtf8 { valid_up_to: 0 }));

        let dbg = format!("{:?}", RegisterCallableArgs::new(1, 0x10, 2).unwrap());
        assert!(dbg.contains("device_orch_func_name: \"\""), "{dbg}");
    }

    #[test]
    fn c_name_helpers_edge_cases() {
        let mut empty: [u8; 0] = [];
        assert_eq!(write_c_name(&mut empty, ""), Err(EncodeError::NameTooLong { len: 0, max: 0 }));
        assert_eq!(read_c_name(&empty), Err(DecodeError::NameUnterminated { capacity: 0 }));
        let mut one = [7u8; 1];
        write_c_name(&mut one, "").unwrap();
        assert_eq!(one, [0]);
        assert_eq!(read_c_name(&one), Ok(""));
    }

    #[test]
    fn bootstrap_blob_layout_and_names() {
        let blob = BootstrapBlob::new(0x1234);
        let b = blob.as_bytes();
        assert!(b[..40].iter().all(|&x| x == 0));
        assert_eq!(&b[40..48], &0x1234u64.to_le_bytes());
        assert!(b[48..208].iter().all(|&x| x == 0));
        assert_eq!(&b[208..208 + BOOTSTRAP_KERNEL_NAME.len()], BOOTSTRAP_KERNEL_NAME.as_bytes());
        assert_eq!(&b[240..240 + BOOTSTRAP_SO_NAME.len()], BOOTSTRAP_SO_NAME.as_bytes());
        assert!(b[272..].iter().all(|&x| x == 0));
        assert_eq!((BOOTSTRAP_KERNEL_NAME_OFFSET, BOOTSTRAP_SO_NAME_OFFSET), (208, 240));
        assert_eq!(blob.kernel_name(), Ok("DynTileFwkKernelServerInit"));
        assert_eq!(blob.so_name(), Ok("libaicpu_extend_kernels.so"));
        assert_eq!(blob.op_name(), Ok(""));
        assert_eq!(BootstrapBlob::default().device_args_ptr, 0);
        assert!(format!("{blob:?}").contains("libaicpu_extend_kernels.so"));
        assert_eq!(
            DISPATCHER_EXPORTS,
            [
                "StaticTileFwkBackendKernelServer",
                "DynTileFwkBackendKernelServerInit",
                "DynTileFwkBackendKernelServer"
            ]
        );
    }

    #[test]
    fn device_args_layout() {
        let mut d = DeviceArgs::default();
        assert_eq!(d, DeviceArgs::zeroed());
        d.aicpu_so_bin = 0xA;
        d.aicpu_so_len = 0xB;
        d.device_id = 0xC;
        d.inner_so_bin = 0xD;
        d.inner_so_len = 0xE;
        let b = d.as_bytes();
        assert!(b[..96].iter().all(|&x| x == 0));
        for (i, v) in [0xAu64, 0xB, 0xC, 0xD, 0xE].into_iter().enumerate() {
            let off = 96 + 8 * i;
            assert_eq!(&b[off..off + 8], &v.to_le_bytes());
        }
        assert!(b[136..].iter().all(|&x| x == 0));
    }

    #[test]
    fn errors_display_lowercase() {
        let e = DecodeError::WrongLength { record: "KernelArgs", expected: 112, actual: 96 };
        assert_eq!(e.to_string(), "abi size mismatch for KernelArgs: expected 112 bytes, got 96");
        assert_eq!(
            EncodeError::CallableIdOutOfRange { id: 70 }.to_string(),
            "callable id 70 is outside 0..64"
        );
        for s in [
            DecodeError::VersionMismatch { record: "X", expected: 1, found: 2 }.to_string(),
            DecodeError::SizeFieldMismatch { record: "X", expected: 1, found: 2 }.to_string(),
            DecodeError::NameUnterminated { capacity: 3 }.to_string(),
            DecodeError::NameNotUtf8 { valid_up_to: 3 }.to_string(),
            EncodeError::NameTooLong { len: 3, max: 2 }.to_string(),
            EncodeError::NameContainsNul { pos: 3 }.to_string(),
        ] {
            assert!(s.starts_with(|c: char| c.is_lowercase()), "{s}");
            assert!(!s.ends_with('.'), "{s}");
        }
    }
}
