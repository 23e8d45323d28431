//! ferry's measurements: what `ferry bench <area>` runs, the reports it prints, and the figures
//! page (`docs/figures.md`) rendered from them.
//!
//! The libraries measured (`ferry-sim`, `ferry-launch`, `ferry-runtime`, `ferry-copy`,
//! `ferry-dfx`, `ferry-profile`) keep no bench code of their own: every harness here drives them
//! through their public API, and nothing but the `ferry` binary and this crate's benches depends
//! on it. Each figure is a ratio against a baseline from the same run where it is a ratio,
//! medians of interleaved rounds; each area's report prints as one JSON object (`to_json`) or as
//! text (`to_text`, without a final newline).
//!
//! | module | `ferry bench` area | what |
//! |---|---|---|
//! | [`sim`] / [`contention`] | `sim` | the idle chip's CPU cost, the handshake round trip; the storm beside busy loops |
//! | [`launch`] / [`launch_series`] | `launch` | the launch transaction's host cost; back-to-back runs, one slot against two |
//! | [`copy`] / [`copy_server`] | `copy` | gather throughput and planning cost; the server emulator without and with Prewarm |
//! | [`runtime`] | `runtime` | storm throughput and per-task dispatch overhead against direct kernel calls |
//! | [`dfx`] | `dfx` | the transport, each subsystem's in-run cost, the whole command, the write and trace phases |
//! | [`view`] | `view` | the storm's `ferry view` page: size and first frame in headless Chromium |
//! | [`all`] / [`figures`] | `all` | every area in a process of its own; the figures page from such runs |
//! | [`extents`] | (`ferry info`) | the runtime's launch descriptor per arch and variant, beside the original runtime's |
//!
//! The criterion benches (`cargo bench -p ferry-bench`) time the same harnesses: `sim`,
//! `launch`, `launch_series`, `copy` and `dfx`.
//!
//! # Example
//! ```
//! use ferry_bench::launch::{run, LaunchBenchConfig};
//!
//! // 20 runs of the launch transaction with a changed prefix, then 20 with the same one.
//! let r = run(&LaunchBenchConfig { iterations: 20, ..LaunchBenchConfig::default() })?;
//! assert_eq!(r.changed_bytes_per_run, ferry_bench::launch::A2A3_TMR_EXTENT as u64);
//! assert_eq!(r.unchanged_bytes_per_run, 0, "a resident prefix is not copied again");
//! assert!(r.to_json().starts_with("{\"area\":\"launch\""));
//! # Ok::<(), ferry_bench::launch::LaunchBenchError>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(
    clippy::undocumented_unsafe_blocks,
    clippy::unnecessary_safety_comment,
    clippy::missing_safety_doc
)]

pub mod all;
pub mod contention;
pub mod copy;
pub mod copy_server;
pub mod dfx;
pub mod extents;
pub mod figures;
pub mod launch;
pub mod launch_series;
pub mod runtime;
pub mod sim;
pub mod view;

/// A `ferry bench` area's report: what it prints with `--json` and without.
pub trait AreaReport {
    /// One JSON object.
    fn to_json(&self) -> String;
    /// Text lines, without a final newline.
    fn to_text(&self) -> String;
}

/// The median of `v` (the mean of the two middle values for an even count; 0 when empty).
pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}
