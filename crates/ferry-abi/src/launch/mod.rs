//! Launch payloads: the bootstrap ABI and the per-task launch ABI (docs/design/launch.md).
//!
//! Two channels with similar shapes are kept apart:
//!
//! | channel | records | who reads them |
//! |---|---|---|
//! | bootstrap (Path A only, private to the loader) | [`BootstrapBlob`] → [`BootstrapArgs`] | the device-side loader and the bootstrap dispatcher |
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
    /// use ferry_abi::launch::{AbiRecord, BootstrapArgs};
    /// assert!(BootstrapArgs::from_bytes(&[0u8; 160]).is_ok());
    /// assert!(BootstrapArgs::from_bytes(&[0u8; 136]).is_err());
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

mod bootstrap;
mod program;
mod run;
pub use bootstrap::*;
pub use program::*;
pub use run::*;

#[cfg(test)]
mod tests;
