//! `ferry info`'s descriptor extents: the runtime's real descriptor per arch x variant (the
//! vector example on the `ferry run` chip), next to the original runtime's figures, and the launch-slot
//! capacity that follows (`ferry_runtime::host::extent`).
use ferry_bench::launch::{A2A3_HBG_EXTENT, A2A3_TMR_EXTENT, A5_HBG_EXTENT, A5_TMR_EXTENT};
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::{descriptor_extent, DescriptorExtent, RunnerConfig, Variant};
use ferry_sim::Arch;

struct Row {
    arch: Arch,
    variant: Variant,
    small: DescriptorExtent,
    full: DescriptorExtent,
    /// The original C++ runtime's extent for this arch and variant.
    original: usize,
}

fn rows() -> anyhow::Result<Vec<Row>> {
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
            rows.push(Row {
                arch,
                variant,
                small: at(Size::Small)?,
                full: at(Size::Full)?,
                original,
            });
        }
    }
    Ok(rows)
}

fn name(v: Variant) -> &'static str {
    match v {
        Variant::DeviceOrchestrated => "device",
        Variant::HostBuiltGraph => "host",
    }
}

pub(crate) fn json() -> anyhow::Result<serde_json::Value> {
    let rows = rows()?;
    Ok(rows
        .iter()
        .map(|r| {
            let e = |d: &DescriptorExtent| {
                serde_json::json!({
                    "route_prefix": d.route_prefix,
                    "run_suffix": d.run_suffix,
                    "extent": d.extent(),
                    "metadata": d.metadata,
                    "pinned_per_slot": d.pinned_bytes(),
                })
            };
            serde_json::json!({
                "arch": r.arch.name(),
                "variant": name(r.variant),
                "example": "vector",
                "small": e(&r.small),
                "full": e(&r.full),
                "original_cpp_extent": r.original,
            })
        })
        .collect())
}

pub(crate) fn print() -> anyhow::Result<()> {
    crate::stdout::outln!(
        "descriptor extents (vector example, `ferry run` chip; bytes): prefix published from the \
         pinned source, suffix uploaded at prepare"
    )?;
    crate::stdout::outln!(
        "  {:<6} {:<7} {:>6} {:>12} {:>12} {:>9} {:>16} {:>12}",
        "arch",
        "variant",
        "prefix",
        "extent small",
        "extent full",
        "metadata",
        "pinned per slot",
        "original C++"
    )?;
    for r in rows()? {
        crate::stdout::outln!(
            "  {:<6} {:<7} {:>6} {:>12} {:>12} {:>9} {:>16} {:>12}",
            r.arch.name(),
            name(r.variant),
            r.small.route_prefix,
            r.small.extent(),
            r.full.extent(),
            r.small.metadata,
            r.small.pinned_bytes(),
            r.original
        )?;
    }
    crate::stdout::outln!(
        "  a slot holds the largest extent served (device destination) and the largest prefix + \
         metadata (pinned source)"
    )?;
    Ok(())
}
