//! The runtime's real launch descriptor per arch × variant (the vector example on the `ferry run`
//! chip, [`ferry_runtime::host::descriptor_extent`]), beside the original runtime's extents and
//! with the launch-slot capacity that follows: what `ferry info` shows.
//!
//! # Example
//! ```
//! let t = ferry_bench::extents::measure()?;
//! assert_eq!(t.rows.len(), 4, "two arches, two variants");
//! assert!(t.to_text().contains("original C++"));
//! # Ok::<(), ferry_runtime::RunError>(())
//! ```
use std::fmt::Write as _;

use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::{descriptor_extent, DescriptorExtent, RunnerConfig, Variant};
use ferry_runtime::RunError;
use ferry_sim::Arch;
use serde_json::{json, Value};

use crate::launch::{A2A3_HBG_EXTENT, A2A3_TMR_EXTENT, A5_HBG_EXTENT, A5_TMR_EXTENT};

/// One arch and variant.
#[derive(Clone, Copy, Debug)]
pub struct ExtentRow {
    /// The arch.
    pub arch: Arch,
    /// Where the graph is built.
    pub variant: Variant,
    /// The small vector example's descriptor.
    pub small: DescriptorExtent,
    /// The full vector example's descriptor.
    pub full: DescriptorExtent,
    /// The original C++ runtime's extent for this arch and variant.
    pub original: usize,
}

/// Every arch and variant, in that order.
#[derive(Clone, Debug)]
pub struct ExtentTable {
    /// One row per arch and variant.
    pub rows: Vec<ExtentRow>,
}

/// Lays out the vector example's descriptor (small and full) for every arch and variant.
///
/// # Errors
/// What laying out a host-built graph refuses ([`descriptor_extent`]).
pub fn measure() -> Result<ExtentTable, RunError> {
    let mut rows = Vec::new();
    for arch in Arch::ALL {
        let cfg = RunnerConfig::default_for(arch);
        for variant in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            let at = |size| {
                let ex = Example::Vector.build(size).with_variant(variant);
                descriptor_extent(&cfg, &ex.callable, &ex.args)
            };
            let original = match (arch, variant) {
                (Arch::A2a3, Variant::DeviceOrchestrated) => A2A3_TMR_EXTENT,
                (Arch::A5, Variant::DeviceOrchestrated) => A5_TMR_EXTENT,
                (Arch::A2a3, Variant::HostBuiltGraph) => A2A3_HBG_EXTENT,
                (Arch::A5, Variant::HostBuiltGraph) => A5_HBG_EXTENT,
            };
            rows.push(ExtentRow {
                arch,
                variant,
                small: at(Size::Small)?,
                full: at(Size::Full)?,
                original,
            });
        }
    }
    Ok(ExtentTable { rows })
}

fn name(v: Variant) -> &'static str {
    match v {
        Variant::DeviceOrchestrated => "device",
        Variant::HostBuiltGraph => "host",
    }
}

impl ExtentTable {
    /// One JSON object per row (`ferry info --json`'s `descriptor_extents`).
    pub fn json(&self) -> Value {
        self.rows
            .iter()
            .map(|r| {
                let e = |d: &DescriptorExtent| {
                    json!({
                        "route_prefix": d.route_prefix,
                        "run_suffix": d.run_suffix,
                        "extent": d.extent(),
                        "metadata": d.metadata,
                        "pinned_per_slot": d.pinned_bytes(),
                    })
                };
                json!({
                    "arch": r.arch.name(),
                    "variant": name(r.variant),
                    "example": "vector",
                    "small": e(&r.small),
                    "full": e(&r.full),
                    "original_cpp_extent": r.original,
                })
            })
            .collect()
    }

    /// The table as text lines (no final newline), as `ferry info` prints it.
    pub fn to_text(&self) -> String {
        let mut s = String::from(
            "descriptor extents (vector example, `ferry run` chip; bytes): prefix published from \
             the pinned source, suffix uploaded at prepare\n",
        );
        let _ = writeln!(
            s,
            "  {:<6} {:<7} {:>6} {:>12} {:>12} {:>9} {:>16} {:>12}",
            "arch",
            "variant",
            "prefix",
            "extent small",
            "extent full",
            "metadata",
            "pinned per slot",
            "original C++"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "  {:<6} {:<7} {:>6} {:>12} {:>12} {:>9} {:>16} {:>12}",
                r.arch.name(),
                name(r.variant),
                r.small.route_prefix,
                r.small.extent(),
                r.full.extent(),
                r.small.metadata,
                r.small.pinned_bytes(),
                r.original
            );
        }
        s.push_str(
            "  a slot holds the largest extent served (device destination) and the largest prefix \
             + metadata (pinned source)",
        );
        s
    }
}
