//! The AICPU program's once-per-device [`InitArgs`] and per-callable [`RegisterCallableArgs`].

use super::*;

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

/// Per-device invariants, sent once to the AICPU program's init entry.
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

/// Hands the AICPU program one callable's device orchestration code.
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
