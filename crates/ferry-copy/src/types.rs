//! Endpoints, items, plans and failures: the vocabulary every transfer engine shares.
use ferry_backend::DevicePtr;
use std::fmt;

/// Where an endpoint's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loc {
    /// Host memory, addressed by a process pointer.
    Cpu,
    /// Device memory ("HBM"), addressed by a device address of one device.
    Device,
}

/// One endpoint of a transfer: a contiguous buffer the items index into.
///
/// `addr` is "addressable here": a host pointer for [`Loc::Cpu`], a device address
/// ([`DevicePtr`]) for [`Loc::Device`]. The engines derive everything else (copy
/// kind, device, whether a gather can reach it) from the pair of endpoints.
///
/// # Examples
/// ```
/// use ferry_copy::{Loc, TransferRef};
/// use ferry_backend::DevicePtr;
/// let d = TransferRef::device(1, DevicePtr(0x4000_0100_0000_0000), 4096);
/// assert_eq!((d.loc, d.device, d.size), (Loc::Device, Some(1), 4096));
/// assert!(d.has_host_ptr());
/// let mut host = vec![0u8; 64];
/// // SAFETY: `host` outlives every transfer that uses this endpoint (none here).
/// let h = unsafe { TransferRef::host(host.as_mut_ptr(), host.len()) };
/// assert!(h.has_host_ptr() && h.device.is_none());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransferRef {
    /// Base address (host pointer or device address).
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// Host or device memory.
    pub loc: Loc,
    /// Device ordinal for device memory; `None` for host memory.
    pub device: Option<u32>,
}

impl fmt::Debug for TransferRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.loc, self.device) {
            (Loc::Cpu, _) => write!(f, "host[{:#x}+{}]", self.addr, self.size),
            (Loc::Device, Some(d)) => write!(f, "dev{d}[{:#x}+{}]", self.addr, self.size),
            (Loc::Device, None) => write!(f, "dev?[{:#x}+{}]", self.addr, self.size),
        }
    }
}

impl TransferRef {
    /// A host buffer.
    ///
    /// # Safety
    /// For as long as any transfer that names this endpoint runs (until its handle's `wait`
    /// returns):
    /// - `[ptr, ptr + len)` is valid for reads and, where it is a destination, for writes;
    /// - nothing else writes the bytes a transfer reads, and nothing else accesses the bytes a
    ///   transfer writes.
    pub unsafe fn host(ptr: *mut u8, len: usize) -> Self {
        Self { addr: ptr as u64, size: len as u64, loc: Loc::Cpu, device: None }
    }

    /// A device buffer of device `ordinal`. Safe: every device access is checked against live
    /// allocations by the device, so a wrong address fails instead of corrupting memory.
    pub fn device(ordinal: u32, ptr: DevicePtr, len: u64) -> Self {
        Self { addr: ptr.0, size: len, loc: Loc::Device, device: Some(ordinal) }
    }

    /// A non-null address and a non-zero size.
    pub fn has_host_ptr(&self) -> bool {
        self.addr != 0 && self.size != 0
    }

    /// Whether this endpoint is device memory.
    pub fn is_device(&self) -> bool {
        self.loc == Loc::Device
    }

    /// The address space this endpoint lives in (host, or one device's).
    pub(crate) fn space(&self) -> Space {
        match self.loc {
            Loc::Cpu => Space::Host,
            Loc::Device => Space::Device(self.device.unwrap_or(u32::MAX)),
        }
    }
}

/// An address space: ranges in different spaces never alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Space {
    Host,
    Device(u32),
}

/// One contiguous copy: `size` bytes from `src + src_offset` to `dst + dst_offset`.
///
/// `tag` is the caller's index for the entry (a key, a page); it survives grouping and comes
/// back in failures and rejections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferItem {
    /// Source endpoint.
    pub src: TransferRef,
    /// Offset into the source.
    pub src_offset: u64,
    /// Destination endpoint.
    pub dst: TransferRef,
    /// Offset into the destination.
    pub dst_offset: u64,
    /// Bytes to copy.
    pub size: u64,
    /// Caller's tag.
    pub tag: u64,
}

/// Which side of a transfer is this node's (copy engines are always `Local`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferDirection {
    /// This node writes a remote buffer.
    Push,
    /// This node reads a remote buffer.
    Pull,
    /// Both sides are local.
    Local,
}

/// The copies of one endpoint pair, as parallel segment arrays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferPlan {
    /// Source endpoint.
    pub src: TransferRef,
    /// Destination endpoint.
    pub dst: TransferRef,
    /// Segment offsets into `src`.
    pub src_offsets: Vec<u64>,
    /// Segment offsets into `dst`.
    pub dst_offsets: Vec<u64>,
    /// Segment lengths.
    pub sizes: Vec<u64>,
    /// Tags of the items this plan carries (adjacent duplicates removed).
    pub tags: Vec<u64>,
    /// Always [`TransferDirection::Local`] for copy engines.
    pub dir: TransferDirection,
    /// Index of the owning engine inside a composite (stamped by
    /// [`CompositeTransferEngine`](crate::CompositeTransferEngine)'s `plan`).
    pub engine: Option<usize>,
}

impl TransferPlan {
    /// Total bytes of the plan.
    pub fn bytes(&self) -> u64 {
        self.sizes.iter().sum()
    }

    /// Number of segments.
    pub fn segments(&self) -> usize {
        self.sizes.len()
    }
}

/// Why the planner refused an item. Nothing of a rejected item is copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RejectReason {
    /// No engine claims this pair of endpoints.
    #[error("no engine handles this pair of endpoints")]
    NoEngine,
    /// An endpoint is null or empty.
    #[error("endpoint is null or empty")]
    InvalidEndpoint,
    /// An endpoint's `addr + size` overflows the address space.
    #[error("endpoint wraps the address space")]
    EndpointOverflow,
    /// The source range runs past the end of the source endpoint (or overflows).
    #[error("source range is out of bounds")]
    SrcOutOfBounds,
    /// The destination range runs past the end of the destination endpoint (or overflows).
    #[error("destination range is out of bounds")]
    DstOutOfBounds,
    /// Source and destination ranges of the item overlap.
    #[error("source and destination overlap")]
    SrcDstOverlap,
    /// The item writes bytes an earlier item of the batch reads or writes, or reads bytes an
    /// earlier item writes (the result would depend on execution order).
    #[error("overlaps an earlier item of the batch")]
    OverlapsEarlierItem,
}

/// One item the planner refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The item's tag.
    pub tag: u64,
    /// Why.
    pub reason: RejectReason,
}

/// What planning produced: plans, refused items, and empty items that need no copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransferPlanSet {
    /// One plan per endpoint pair, in first-appearance order.
    pub plans: Vec<TransferPlan>,
    /// Items refused, in input order.
    pub rejected: Vec<Rejection>,
    /// Tags of zero-size items: skipped, neither planned nor failed (there is nothing to copy).
    pub skipped: Vec<u64>,
}

impl TransferPlanSet {
    /// Tags of the rejected items.
    pub fn rejected_tags(&self) -> Vec<u64> {
        self.rejected.iter().map(|r| r.tag).collect()
    }
}

/// What went wrong with a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureCode {
    /// The plan names a device that does not exist.
    NoSuchDevice,
    /// An address did not resolve (not a live allocation, wrong device, not a host pointer).
    InvalidAddress,
    /// The device refused or failed a copy.
    CopyFailed,
    /// The plan had no owning engine, or the engine posted nothing.
    NotSubmitted,
}

/// One failed plan and the tags it covered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferFailure {
    /// Tags of the failed plan.
    pub tags: Vec<u64>,
    /// Failure class.
    pub code: FailureCode,
    /// Human-readable reason.
    pub message: String,
    /// Where it failed (`"hbm:dev0"`, `"local"`, ...).
    pub endpoint: String,
}
