//! The contract between the simulated AICPU OS and the device programs it loads (docs/design/launch.md).
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
//! | [`AicpuKernelCall`] / [`KernelFn`] | the signature of the kernel library's AICore kernels |
//! | [`fingerprint`] | the 64-bit identity of program bytes both host and dispatcher compute |
//! | `STATUS_*` | the `i32` codes every entry returns (0 = ok) |
//!
//! # Why this table has pointer fields
//!
//! Records in shared memory hold no pointers, because device memory is read by another address
//! space. [`DeviceServices`], [`ExecContext`] and [`OrchContext`] never live in
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

mod fingerprint;
mod program;
pub use fingerprint::*;
pub use program::*;

// The status codes, the services table and its set-services export are the kernel ABI's
// (a kernel library receives the same table), re-exported here for the programs.
pub use ferry_kernel_abi::services::*;

// ---------------------------------------------------------------------------------------------
// Export names
// ---------------------------------------------------------------------------------------------

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

#[cfg(test)]
mod tests;
