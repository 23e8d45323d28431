//! The bootstrap ABI of Path A, private to the loader: the [`BootstrapBlob`] and the
//! [`BootstrapArgs`] the device-side loader and the bootstrap dispatcher read.

use super::*;

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

/// The launch blob of the bootstrap dispatcher launch (Path A only).
///
/// Private to the loader: the host builds it, the device-side loader reads the names, and the
/// dispatcher follows `device_args_ptr` to a [`BootstrapArgs`]. The dispatcher's own view of the
/// blob names +48 `runtime_args` and +56 `regs` but never reads them; here they are reserved.
///
/// # Layout
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 40 | `_reserved0` [u64; 5], zero |
/// | 40 | 8 | `device_args_ptr` u64: device address of the [`BootstrapArgs`] |
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
    /// Device address of the [`BootstrapArgs`].
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
/// dispatcher and the inner (AICPU) program bytes are in device memory.
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
/// use ferry_abi::launch::{AbiRecord, BootstrapArgs};
/// let mut d = BootstrapArgs::zeroed();
/// d.inner_so_bin = 0x9000;
/// d.inner_so_len = 4096;
/// assert_eq!(&d.as_bytes()[120..128], &0x9000u64.to_le_bytes());
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BootstrapArgs {
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

abi_record!(BootstrapArgs, size 160, align 8, [
    _reserved0 @ 0,
    aicpu_so_bin @ 96,
    aicpu_so_len @ 104,
    device_id @ 112,
    inner_so_bin @ 120,
    inner_so_len @ 128,
    _reserved1 @ 136,
]);

impl BootstrapArgs {
    /// All zero.
    pub const fn zeroed() -> BootstrapArgs {
        BootstrapArgs {
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
