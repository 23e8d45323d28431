//! Shared `#[repr(C)]` layouts that cross the ferry host/device boundary.
//!
//! `no_std`, no allocation: the same definitions are compiled into the host crates and into the
//! device programs under `device/`, so both sides agree on every byte.
//!
//! | module | what it holds |
//! |---|---|
//! | [`arch`] | the `a2a3` and `a5` arch profiles (threads, cores, clock, SVM, DFX budget) |
//! | [`dfx`] | DFX transport region: ready queues, free queues, lane states, buffer geometry |
//! | [`orch_lib`] | the orchestration-library ABI (`ferry-kernel-abi`'s, re-exported): the descriptor, function table, task records and the table ferry serves a user's orchestration function |
//! | [`kernel_lib`] | the custom kernel-library ABI: the exported descriptor and kernel table, device and host call records, their checks (`ferry-kernel-abi`'s, re-exported, as are the services table, the status codes and [`records::DType`]) |
//! | [`launch`] | launch payloads (`KernelArgs`, `AicoreLaunchArgs`, `InitArgs`, `RegisterCallableArgs`, bootstrap blob, `BootstrapArgs`) and their [`launch::AbiRecord`] byte images |
//! | [`records`] | DFX subsystem records (ChipSwimlane, PMU, ScopeStats, ArgsDump) and the decoder of device-written buffers |
//! | [`dep_gen`] | DepGen's variable-length per-submit chains: encoder and checked parser |
//! | [`args_dump`] | ArgsDump's variable-length chains (one per task and stage): encoder and checked parser |
//! | [`handshake`] | the per-core [`handshake::Handshake`] slot and its report values |
//! | [`regs`] | the per-core register window: offsets per arch, dispatch values, `COND` encoding |
//! | [`services`] | the AICPU OS ↔ device-program contract: the injected services table, program reports, the exec hook, the program fingerprint |
//!
//! # Examples
//! Both sides size the DFX backpressure budget and the device clock from one arch profile, and a
//! record crosses the boundary as its exact `#[repr(C)]` bytes:
//! ```
//! use ferry_abi::arch::A2A3;
//! use ferry_abi::records::AicoreTaskRecord;
//!
//! // 50 MHz: 20 ns per cycle.
//! assert_eq!(A2A3.cycles_to_ns(50), 1_000);
//! // Two records per cache line in a DFX buffer.
//! assert_eq!(core::mem::size_of::<AicoreTaskRecord>(), 32);
//! ```
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

pub mod arch;
pub mod args_dump;
pub mod dep_gen;
pub mod dfx;
pub mod handshake;
pub use ferry_kernel_abi::kernel_lib;
pub use ferry_kernel_abi::layout;
pub use ferry_kernel_abi::orch_lib;
pub mod launch;
pub mod records;
pub mod regs;
pub mod services;

/// The units of a buffer of words, in order: `parse` frames one unit at the start of the words
/// it is given and says how many words it spans; the first unit that does not frame yields its
/// error and ends the iteration (the words after it cannot be framed). Shared by the
/// variable-length DFX records ([`dep_gen::chains`], [`args_dump::chains`]).
fn frames<'a, T: 'a, E: 'a>(
    words: &'a [u64],
    parse: impl Fn(&'a [u64]) -> Result<(T, usize), E> + 'a,
) -> impl Iterator<Item = Result<T, E>> + 'a {
    let mut rest = words;
    let mut failed = false;
    core::iter::from_fn(move || {
        if failed || rest.is_empty() {
            return None;
        }
        match parse(rest) {
            Ok((c, n)) => {
                rest = rest.get(n..).unwrap_or(&[]);
                Some(Ok(c))
            }
            Err(e) => {
                failed = true;
                Some(Err(e))
            }
        }
    })
}
