//! The device programs, as bytes the host carries.
//!
//! The crates under `device/` are Rust `cdylib`s: real shared objects that the simulated AICPU
//! OS (`ferry_sim::aicpu_os`) loads, as CANN loads AICPU shared objects on hardware. This
//! crate's build script builds them with a nested `cargo build --release` (its own target
//! directory inside `OUT_DIR`; no manual step) and embeds each with `include_bytes!`, together
//! with its fingerprint and build id, both computed at build time.
//!
//! | program | kind | what it is |
//! |---|---|---|
//! | [`DISPATCHER`] | dispatcher | the Path A bootstrap dispatcher (three exports) |
//! | [`AICPU_DEVICE_ORCHESTRATED`] | AICPU program | the inner program, device-orchestrated runtime |
//! | [`AICPU_HOST_BUILT_GRAPH`] | AICPU program | the inner program, host-built-graph runtime |
//! | [`KERNELS`] | kernel library | AICore elementwise kernels by id |
//! | [`ORCH_VECTOR`], [`ORCH_PAGED_ATTENTION`], [`ORCH_STORM`] | orchestration | one per example callable |
//! | [`ORCH_WORKLOAD`] | orchestration | the workload interpreter (workload files) |
//!
//! # Examples
//!
//! ```
//! use ferry_programs::{ProgramKind, AICPU_DEVICE_ORCHESTRATED, AICPU_HOST_BUILT_GRAPH};
//! assert_eq!(AICPU_DEVICE_ORCHESTRATED.kind, ProgramKind::Aicpu);
//! assert_eq!(&AICPU_DEVICE_ORCHESTRATED.bytes[..4], b"\x7fELF");
//! // Two runtime variants are two different shared objects.
//! assert_ne!(AICPU_DEVICE_ORCHESTRATED.fingerprint, AICPU_HOST_BUILT_GRAPH.fingerprint);
//! assert_ne!(AICPU_DEVICE_ORCHESTRATED.build_id, AICPU_HOST_BUILT_GRAPH.build_id);
//! ```
#![forbid(unsafe_code)]

/// What role a program plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProgramKind {
    /// The Path A bootstrap dispatcher.
    Dispatcher,
    /// An AICPU program (inner SO): init, register-callable, exec, query.
    Aicpu,
    /// The AICore kernel library.
    KernelLibrary,
    /// A callable's orchestration object.
    Orchestration,
}

/// One embedded device program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Program {
    /// The program's name (what it reports as its identity).
    pub name: &'static str,
    /// The cargo package it was built from.
    pub package: &'static str,
    /// Its role.
    pub kind: ProgramKind,
    /// The shared object's bytes.
    pub bytes: &'static [u8],
    /// `ferry_abi::services::fingerprint` of `bytes`, computed at build time.
    pub fingerprint: u64,
    /// The build id the program was built with (and reports).
    pub build_id: u64,
}

impl Program {
    /// The program with this name.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(ferry_programs::Program::by_name("kernels").unwrap().name, "kernels");
    /// assert!(ferry_programs::Program::by_name("nope").is_none());
    /// ```
    pub fn by_name(name: &str) -> Option<&'static Program> {
        ALL.iter().copied().find(|p| p.name == name)
    }
}

include!(concat!(env!("OUT_DIR"), "/programs.rs"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_program_is_an_elf_shared_object_with_its_build_time_fingerprint() {
        for p in ALL {
            assert_eq!(&p.bytes[..4], b"\x7fELF", "{}", p.name);
            assert_eq!(u16::from_le_bytes([p.bytes[16], p.bytes[17]]), 3, "{} is ET_DYN", p.name);
            assert_eq!(ferry_abi::services::fingerprint(p.bytes), p.fingerprint, "{}", p.name);
        }
        let mut fps: Vec<u64> = ALL.iter().map(|p| p.fingerprint).collect();
        fps.sort_unstable();
        fps.dedup();
        assert_eq!(fps.len(), ALL.len(), "fingerprints are distinct");
    }
}
