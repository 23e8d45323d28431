//! Descriptor extents: how many device bytes a run's descriptor takes, and the launch slot
//! capacities that follow from them (the launch design's pinned-capacity rule on ferry's layouts).
//!
//! A run's descriptor is its runtime image: the route prefix ([`ROUTE_PREFIX_BYTES`], the image
//! header, published on the AICPU stream from the slot's pinned source and cached) and the
//! per-run suffix (run block, device-written regions, tensors, scalars, host-built graph),
//! uploaded synchronously at prepare straight into the slot's device destination. So a slot's
//! **device destination** holds the largest descriptor extent (prefix + suffix) it served, and
//! its **pinned source** the largest bytes it stages for stream copies: the prefix plus the
//! launch metadata (the a5 host-built graph's resident scheduler state, its `regs` table).
//! The original runtime stages the whole extent through the pinned source; ferry's suffix never
//! passes through it, so the pinned rule here is prefix + metadata and the extent rule governs
//! the destination.
use super::graph::GraphBuilder;
use super::runner::layout::{image_offsets, ImageCounts};
use super::{Callable, RunArgs, RunnerConfig, TensorInit, Variant, ROUTE_PREFIX_BYTES};
use crate::device::task::TensorInfo;
use crate::error::RunError;
use ferry_abi::regs::RegLayout;
use ferry_sim::Arch;

/// The device bytes of one run's descriptor and the launch metadata staged with it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DescriptorExtent {
    /// The launch-route prefix (the image header).
    pub route_prefix: u64,
    /// The per-run suffix.
    pub run_suffix: u64,
    /// Launch-metadata bytes published with it (a5 host-built graph: the `regs` table).
    pub metadata: u64,
}

impl DescriptorExtent {
    /// Device bytes of the descriptor: prefix + suffix.
    pub fn extent(&self) -> u64 {
        self.route_prefix + self.run_suffix
    }

    /// Pinned bytes a slot stages for it: the prefix and the metadata (the suffix is uploaded
    /// synchronously, not staged).
    pub fn pinned_bytes(&self) -> u64 {
        self.route_prefix + self.metadata
    }
}

/// What one launch slot holds after serving a set of descriptors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotCapacity {
    /// Pinned source bytes: the largest [`DescriptorExtent::pinned_bytes`] served.
    pub pinned: u64,
    /// Device destination bytes: the largest [`DescriptorExtent::extent`] served.
    pub destination: u64,
}

impl SlotCapacity {
    /// The capacity rule over the descriptors one slot served (both parts only grow).
    ///
    /// # Examples
    /// ```
    /// use ferry_runtime::host::{DescriptorExtent, SlotCapacity};
    /// let a = DescriptorExtent { route_prefix: 256, run_suffix: 4_000, metadata: 864 };
    /// let b = DescriptorExtent { route_prefix: 256, run_suffix: 9_000, metadata: 0 };
    /// assert_eq!(
    ///     SlotCapacity::serving([a, b]),
    ///     SlotCapacity { pinned: 256 + 864, destination: 9_256 }
    /// );
    /// ```
    pub fn serving(served: impl IntoIterator<Item = DescriptorExtent>) -> SlotCapacity {
        served.into_iter().fold(SlotCapacity::default(), |c, d| SlotCapacity {
            pinned: c.pinned.max(d.pinned_bytes()),
            destination: c.destination.max(d.extent()),
        })
    }
}

/// Launch-metadata bytes a run of `variant` on `arch` stages: the a5 host-built graph's
/// resident scheduler state (the `regs` table, one address per physical core); none elsewhere.
pub fn metadata_bytes(arch: Arch, variant: Variant) -> u64 {
    match (arch, variant) {
        (Arch::A5, Variant::HostBuiltGraph) => {
            u64::from(RegLayout::of(arch).max_physical_cores) * 8
        }
        _ => 0,
    }
}

/// The descriptor extent of a run of `callable` with `args` on a full-path runner built with
/// `cfg`, computed on the host without a device: the same layout `prepare` writes. A
/// host-built graph is built (against placeholder tensor addresses) to count its tasks and
/// dependencies.
///
/// # Errors
/// What building a host-built graph refuses ([`RunError::Fault`], [`RunError::Cycle`]).
pub fn descriptor_extent(
    cfg: &RunnerConfig,
    callable: &Callable,
    args: &RunArgs,
) -> Result<DescriptorExtent, RunError> {
    // Placeholder addresses, 64-byte aligned and disjoint: only counts matter to the layout.
    let mut next = 1u64 << 32;
    let mut infos = Vec::with_capacity(args.tensors.len());
    for t in &args.tensors {
        let bytes = match t {
            TensorInit::Data(v) => v.len() as u64 * 4,
            TensorInit::Zeros(n) => *n as u64 * 4,
            TensorInit::Device { bytes, .. } => *bytes,
        };
        infos.push(TensorInfo { addr: next, len: bytes / 4 });
        next += bytes.max(4).div_ceil(64) * 64;
    }
    // The guard table lists each tensor the run allocates itself and its scratch arena.
    let owned = args.tensors.iter().filter(|t| !matches!(t, TensorInit::Device { .. })).count();
    let mut counts = ImageCounts {
        tensors: infos.len() as u64,
        scalars: args.scalars.len() as u64,
        guards: owned as u64 + u64::from(args.scratch_bytes > 0),
        ..ImageCounts::default()
    };
    if callable.variant == Variant::HostBuiltGraph {
        let scratch = if args.scratch_bytes > 0 { (next, args.scratch_bytes) } else { (0, 0) };
        let mut gb = GraphBuilder::new(infos, args.scalars.clone(), scratch, None);
        callable.build_graph(&mut gb)?;
        let (recs, preds) = gb.finish()?.records();
        counts.graph_tasks = recs.len() as u64;
        counts.graph_preds = preds.len() as u64;
    }
    let image = image_offsets(cfg, counts).image_bytes;
    let prefix = ROUTE_PREFIX_BYTES as u64;
    Ok(DescriptorExtent {
        route_prefix: prefix,
        run_suffix: image - prefix,
        metadata: metadata_bytes(cfg.arch, callable.variant),
    })
}
