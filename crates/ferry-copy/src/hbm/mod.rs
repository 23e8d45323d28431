//! [`HbmCopyEngine`]: pairs with at least one device endpoint.
//!
//! Submit, for a batch of plans:
//! 1. save the caller's current device;
//! 2. **gather pass**: unless the kernel is off (config or latch), classify each plan — H2D or
//!    D2H, a device that exists, every host side inside a registered gather region (addressed
//!    through its per-device alias), every device side inside a live allocation — and pool the
//!    fragments of eligible plans **per device**, across plans and directions. A bucket with
//!    ≥ 2 fragments and a mean below [`HbmConfig::gather_threshold`] runs as one gather kernel on a
//!    pooled stream; a failed launch just declines, a failed synchronize also latches the kernel
//!    off for this engine ([`HbmCopyEngine::reset_gather_latch`] re-arms it);
//! 3. **fallback**: every plan the gather did not complete is one blocking multi-segment copy
//!    on its device's null stream (destination's device, else the source's) whose result is
//!    that plan's alone, so concurrent callers do not serialise on a lock around it;
//! 4. restore the caller's current device; return a settled handle with one failure per failed
//!    plan.
//!
//! [`HbmCopyEngine::prewarm`] implements docs/design/copy-pool.md (see its docs).
//!
//! # Lock ranks
//! Outer to inner; a lock is only taken while holding locks of a lower rank number:
//! 1. `prewarm` (`HbmCopyEngine::prewarmed`) — held for a whole prewarm;
//! 2. `regions` (RwLock) — read during classification only, never held across a device call
//!    that waits, nor together with 3 or 4;
//! 3. `DevicePool::state` (one per device) — list/count updates only;
//! 4. `null_copy` (one per device) — held across the prewarm's null-stream warm-up copies, so
//!    the stream's sticky error belongs to them. Fallback copies do not take it: each plan is
//!    one blocking multi-segment copy whose result is its own
//!    ([`BackendStream::copy_segments_blocking`]).
//!
//! The backend's internal locks rank below all of these.
//!
//! The engine reaches the device only through the [`ferry_backend`] seam: it is generic over
//! the [`Backend`], so each call to the device is a direct, inlinable call.
pub mod gather;
pub(crate) mod pool;
mod prewarm;

use crate::engine::{SettledHandle, TransferEngine, TransferHandle};
use crate::planner::plan_items;
use crate::types::{
    FailureCode, Loc, TransferFailure, TransferItem, TransferPlan, TransferPlanSet, TransferRef,
};
use ferry_backend::{
    Backend, BackendDevice, BackendError, BackendStream, CopyGroup, CopyKind, DevicePtr,
    HostMapping, Segment,
};
use gather::{grid, GatherFragment, FRAGMENT_BYTES};
pub use pool::PoolStats;
use pool::{DevicePool, SlotGuard};
pub use prewarm::{DevicePrewarm, PrewarmReport};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Critical sections leave the data consistent (unit state or plain counts); recover it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Mean fragment size at and above which a bucket stays on the copy engine.
pub const GATHER_THRESHOLD: u64 = 128 << 10;
/// Descriptors each prewarmed slot's staging is sized for: an 8192-fragment batch with the usual
/// 2× headroom, so the first large gather after prewarm allocates no device memory.
pub const PREWARM_STAGING_FRAGMENTS: usize = 16_384;
/// Bytes of each null-stream warm-up copy.
pub const NULL_WARM_BYTES: usize = 4096;

/// Configuration of [`HbmCopyEngine`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HbmConfig {
    /// Whether the gather kernel may run (`UMBP_DRAM_GATHER_KERNEL`).
    pub gather_kernel: bool,
    /// Mean fragment size at and above which a bucket is not gathered.
    pub gather_threshold: u64,
    /// Descriptors a prewarmed slot's staging holds.
    pub prewarm_staging_fragments: usize,
}

impl Default for HbmConfig {
    fn default() -> Self {
        Self {
            gather_kernel: true,
            gather_threshold: GATHER_THRESHOLD,
            prewarm_staging_fragments: PREWARM_STAGING_FRAGMENTS,
        }
    }
}

impl HbmConfig {
    /// The defaults with the knobs of `k` applied.
    pub fn from_knobs(k: &crate::env::CopyKnobs) -> Self {
        Self { gather_kernel: k.gather_kernel, ..Self::default() }
    }
}

/// Why a plan or bucket did not go through the gather kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum GatherSkip {
    /// The kernel is off (configuration or latch).
    Disabled,
    /// Device to device: no host side to gather.
    KindNotHtodOrDtoh,
    /// The plan names no existing device.
    NoDevice,
    /// A host side is outside every registered gather region.
    HostNotGatherable,
    /// A device side is outside every live allocation.
    DeviceRangeInvalid,
    /// The plan has no segments.
    NoFragments,
    /// The device's bucket has fewer than 2 fragments.
    TooFewFragments,
    /// The bucket's mean fragment is at or above the threshold.
    AtOrAboveThreshold,
    /// Switching to the device failed.
    SetDeviceFailed,
    /// No pooled stream could be created.
    NoStream,
    /// The slot's descriptor staging could not grow.
    NoStaging,
    /// The descriptor upload or the launch was refused.
    LaunchFailed,
    /// The stream failed to synchronize (latches the kernel off).
    SyncFailed,
}

impl GatherSkip {
    /// Every reason.
    pub const ALL: [GatherSkip; 13] = [
        GatherSkip::Disabled,
        GatherSkip::KindNotHtodOrDtoh,
        GatherSkip::NoDevice,
        GatherSkip::HostNotGatherable,
        GatherSkip::DeviceRangeInvalid,
        GatherSkip::NoFragments,
        GatherSkip::TooFewFragments,
        GatherSkip::AtOrAboveThreshold,
        GatherSkip::SetDeviceFailed,
        GatherSkip::NoStream,
        GatherSkip::NoStaging,
        GatherSkip::LaunchFailed,
        GatherSkip::SyncFailed,
    ];
}

/// Counters of one engine (statistics; Relaxed throughout).
#[derive(Debug, Default)]
struct Stats {
    gathers: AtomicU64,
    gather_fragments: AtomicU64,
    gather_bytes: AtomicU64,
    fallback_plans: AtomicU64,
    fallback_segments: AtomicU64,
    fallback_bytes: AtomicU64,
    skips: [AtomicU64; GatherSkip::ALL.len()],
}

fn bump(c: &AtomicU64, n: u64) {
    // Relaxed: statistics; readers synchronise through the batch that produced them.
    c.fetch_add(n, Ordering::Relaxed);
}

/// A snapshot of an engine's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HbmStats {
    /// Gather kernels that completed.
    pub gathers: u64,
    /// Fragments they copied.
    pub gather_fragments: u64,
    /// Bytes they copied.
    pub gather_bytes: u64,
    /// Plans copied on the null stream.
    pub fallback_plans: u64,
    /// Segments copied on the null stream.
    pub fallback_segments: u64,
    /// Bytes copied on the null stream.
    pub fallback_bytes: u64,
    /// Skip counts, indexed like [`GatherSkip::ALL`].
    pub skips: Vec<(GatherSkip, u64)>,
}

impl HbmStats {
    /// The count of one skip reason.
    pub fn skip(&self, r: GatherSkip) -> u64 {
        self.skips.iter().find(|(k, _)| *k == r).map_or(0, |(_, v)| *v)
    }
}

#[derive(Debug)]
struct DeviceState<D: BackendDevice> {
    pool: DevicePool<D>,
    null_copy: Mutex<()>,
}

/// The HBM copy engine: host↔device and device↔device copies, with the gather fast path and a
/// per-device stream pool.
///
/// Generic over the [`Backend`]: on ferry's simulated chip it is
/// `HbmCopyEngine<Platform>` with ferry-sim's `Platform`; the example runs on the seam's host-memory backend.
///
/// # Examples
/// ```
/// use ferry_backend::host::HostMemoryBackend;
/// use ferry_backend::{Backend, BackendDevice};
/// use ferry_copy::{transfer, HbmConfig, HbmCopyEngine, TransferItem, TransferRef};
/// let b = HostMemoryBackend::new(1, 64 << 20)?;
/// let e = HbmCopyEngine::new(b.clone(), HbmConfig::default());
/// let mut host = vec![0u8; 8192];
/// host.iter_mut().enumerate().for_each(|(i, v)| *v = i as u8);
/// // SAFETY: `host` outlives the engine's use of it (the registration is dropped with `e`,
/// // before `host`), and nothing else touches it during transfers.
/// unsafe { e.add_host_gather_region(host.as_mut_ptr(), host.len())? };
/// let dev = b.device(0)?.malloc(8192)?;
/// let mut out = vec![0u8; 8192];
/// // SAFETY: as above.
/// let (h, o) = unsafe {
///     (TransferRef::host(host.as_mut_ptr(), 8192), TransferRef::host(out.as_mut_ptr(), 8192))
/// };
/// let d = TransferRef::device(0, dev, 8192);
/// // Two scattered 4 KiB pages, swapped: one gather kernel.
/// let items = [
///     TransferItem { src: h, src_offset: 0, dst: d, dst_offset: 4096, size: 4096, tag: 0 },
///     TransferItem { src: h, src_offset: 4096, dst: d, dst_offset: 0, size: 4096, tag: 1 },
/// ];
/// assert!(transfer(&e, &items, &mut Vec::new()));
/// assert_eq!(e.stats().gathers, 1);
/// // And back in one piece (the output buffer is not registered: a null-stream copy).
/// let back = [TransferItem { src: d, src_offset: 0, dst: o, dst_offset: 0, size: 8192, tag: 2 }];
/// assert!(transfer(&e, &back, &mut Vec::new()));
/// assert_eq!(&out[4096..], &host[..4096]);
/// drop(e);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct HbmCopyEngine<B: Backend> {
    platform: B,
    cfg: HbmConfig,
    devices: Vec<DeviceState<B::Device>>,
    regions: RwLock<Vec<B::HostRegistration>>,
    latched: AtomicBool,
    prewarmed: Mutex<Option<usize>>,
    stats: Stats,
}

impl<B: Backend> std::fmt::Debug for HbmCopyEngine<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HbmCopyEngine")
            .field("devices", &self.devices.len())
            .field("cfg", &self.cfg)
            .field("latched", &self.is_gather_latched())
            .finish()
    }
}

impl<B: Backend> HbmCopyEngine<B> {
    /// An engine over every device of `platform`. No stream exists until the first gather or
    /// [`prewarm`](Self::prewarm).
    pub fn new(platform: B, cfg: HbmConfig) -> Self {
        let devices = (0..platform.device_count())
            .filter_map(|o| platform.device(o).ok())
            .map(|d| DeviceState { pool: DevicePool::new(d.clone()), null_copy: Mutex::new(()) })
            .collect();
        Self {
            platform,
            cfg,
            devices,
            regions: RwLock::new(Vec::new()),
            latched: AtomicBool::new(false),
            prewarmed: Mutex::new(None),
            stats: Stats::default(),
        }
    }

    /// The backend this engine drives.
    pub fn platform(&self) -> &B {
        &self.platform
    }

    /// The configuration.
    pub fn config(&self) -> &HbmConfig {
        &self.cfg
    }

    /// Registers `[ptr, ptr + len)` with every device and makes it a gather region.
    ///
    /// # Errors
    /// When the range is null/empty or overlaps a registration
    /// ([`BackendOp::RegisterHost`](ferry_backend::BackendOp::RegisterHost)).
    ///
    /// # Safety
    /// As [`Backend::register_host`]: the range stays valid for reads and writes until the
    /// region is cleared or the engine dropped, and while a transfer runs the host does not
    /// access the bytes it writes.
    pub unsafe fn add_host_gather_region(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<(), BackendError> {
        // SAFETY: delegated to the caller.
        let reg = unsafe { self.platform.register_host(ptr, len)? };
        self.adopt_host_registration(reg);
        Ok(())
    }

    /// Makes a registration done elsewhere (e.g. on a background thread) a gather region. The
    /// engine keeps it until [`clear_host_gather_regions`](Self::clear_host_gather_regions).
    pub fn adopt_host_registration(&self, reg: B::HostRegistration) {
        self.regions.write().unwrap_or_else(|p| p.into_inner()).push(reg);
    }

    /// Drops every gather region (which unregisters them).
    pub fn clear_host_gather_regions(&self) {
        self.regions.write().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Whether a failed synchronize turned the gather kernel off.
    pub fn is_gather_latched(&self) -> bool {
        // Relaxed: a standalone flag; no data is published through it.
        self.latched.load(Ordering::Relaxed)
    }

    /// Re-arms the gather kernel after a latch (tests, or an operator who fixed the cause).
    pub fn reset_gather_latch(&self) {
        // Relaxed: see `is_gather_latched`.
        self.latched.store(false, Ordering::Relaxed);
    }

    /// The pool of device `ordinal`.
    pub fn pool_stats(&self, ordinal: u32) -> Option<PoolStats> {
        self.devices.get(ordinal as usize).map(|d| d.pool.stats())
    }

    /// A snapshot of the engine's counters.
    pub fn stats(&self) -> HbmStats {
        // Relaxed loads: statistics (see `bump`).
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        HbmStats {
            gathers: g(&self.stats.gathers),
            gather_fragments: g(&self.stats.gather_fragments),
            gather_bytes: g(&self.stats.gather_bytes),
            fallback_plans: g(&self.stats.fallback_plans),
            fallback_segments: g(&self.stats.fallback_segments),
            fallback_bytes: g(&self.stats.fallback_bytes),
            skips: GatherSkip::ALL.iter().map(|&r| (r, g(&self.stats.skips[r as usize]))).collect(),
        }
    }

    fn skip(&self, r: GatherSkip, n: u64) {
        bump(&self.stats.skips[r as usize], n);
    }

    fn gather_enabled(&self) -> bool {
        self.cfg.gather_kernel && !self.is_gather_latched()
    }

    /// Copy kind from the pair (CPU→CPU is not claimed).
    pub fn kind_for(src: &TransferRef, dst: &TransferRef) -> Option<CopyKind> {
        match (src.loc, dst.loc) {
            (Loc::Cpu, Loc::Device) => Some(CopyKind::Htod),
            (Loc::Device, Loc::Cpu) => Some(CopyKind::Dtoh),
            (Loc::Device, Loc::Device) => Some(CopyKind::Dtod),
            (Loc::Cpu, Loc::Cpu) => None,
        }
    }

    /// Device a plan runs on: the destination's if it is device memory, else the source's.
    pub fn device_for(src: &TransferRef, dst: &TransferRef) -> Option<u32> {
        if dst.loc == Loc::Device {
            dst.device
        } else if src.loc == Loc::Device {
            src.device
        } else {
            None
        }
    }
    /// The per-device alias of `[host, host + len)` if a gather region covers it.
    fn alias_of(regions: &[B::HostRegistration], dev: u32, host: u64, len: u64) -> Option<u64> {
        let (h, l) = (usize::try_from(host).ok()?, usize::try_from(len).ok()?);
        regions.iter().find_map(|r| r.alias(dev, h as *const u8, l)).map(|p| p.0)
    }

    /// Classifies the plans, gathers eligible buckets; returns which plans are done.
    fn gather_pass(&self, plans: &[TransferPlan]) -> Vec<bool> {
        let mut done = vec![false; plans.len()];
        if !self.gather_enabled() {
            self.skip(GatherSkip::Disabled, plans.len() as u64);
            return done;
        }
        #[derive(Default)]
        struct Bucket {
            frags: Vec<GatherFragment>,
            plans: Vec<usize>,
            bytes: u64,
            max: u64,
        }
        let mut buckets: BTreeMap<u32, Bucket> = BTreeMap::new();
        {
            let regions = self.regions.read().unwrap_or_else(|p| p.into_inner());
            for (pi, p) in plans.iter().enumerate() {
                match self.classify(p, &regions) {
                    Ok((dev, frags)) => {
                        let b = buckets.entry(dev).or_default();
                        for f in &frags {
                            b.bytes += f.bytes;
                            b.max = b.max.max(f.bytes);
                        }
                        // A bucket's first plan moves its fragments in (usually the only
                        // one): no second copy of the descriptors.
                        match b.frags.is_empty() {
                            true => b.frags = frags,
                            false => b.frags.extend(frags),
                        }
                        b.plans.push(pi);
                    }
                    Err(r) => self.skip(r, 1),
                }
            }
        }
        for (dev, b) in buckets {
            let n = b.plans.len() as u64;
            let count = b.frags.len() as u64;
            if count < 2 {
                self.skip(GatherSkip::TooFewFragments, n);
                continue;
            }
            if b.bytes / count >= self.cfg.gather_threshold {
                self.skip(GatherSkip::AtOrAboveThreshold, n);
                continue;
            }
            match self.run_gather(dev, &b.frags, b.max) {
                Ok(()) => {
                    bump(&self.stats.gathers, 1);
                    bump(&self.stats.gather_fragments, count);
                    bump(&self.stats.gather_bytes, b.bytes);
                    for pi in b.plans {
                        done[pi] = true;
                    }
                }
                Err(r) => self.skip(r, n),
            }
        }
        done
    }

    fn classify(
        &self,
        p: &TransferPlan,
        regions: &[B::HostRegistration],
    ) -> Result<(u32, Vec<GatherFragment>), GatherSkip> {
        let kind = Self::kind_for(&p.src, &p.dst).ok_or(GatherSkip::KindNotHtodOrDtoh)?;
        let (host, dev_side, host_offs, dev_offs) = match kind {
            CopyKind::Htod => (&p.src, &p.dst, &p.src_offsets, &p.dst_offsets),
            CopyKind::Dtoh => (&p.dst, &p.src, &p.dst_offsets, &p.src_offsets),
            CopyKind::Dtod => return Err(GatherSkip::KindNotHtodOrDtoh),
        };
        let dev = Self::device_for(&p.src, &p.dst)
            .filter(|&d| d < self.platform.device_count())
            .ok_or(GatherSkip::NoDevice)?;
        if p.sizes.is_empty() {
            return Err(GatherSkip::NoFragments);
        }
        let device = self.platform.device(dev).map_err(|_| GatherSkip::NoDevice)?;
        // One lookup per endpoint; per segment only when the endpoint outgrows its registration
        // or allocation.
        let host_base = Self::alias_of(regions, dev, host.addr, host.size);
        let dev_whole = device.is_allocated(DevicePtr(dev_side.addr), dev_side.size);
        let mut frags = Vec::with_capacity(p.sizes.len());
        for i in 0..p.sizes.len() {
            let (len, ho, dof) = (p.sizes[i], host_offs[i], dev_offs[i]);
            let h = match host_base {
                Some(a) => a + ho,
                None => Self::alias_of(regions, dev, host.addr + ho, len)
                    .ok_or(GatherSkip::HostNotGatherable)?,
            };
            let d = dev_side.addr + dof;
            if !dev_whole && !device.is_allocated(DevicePtr(d), len) {
                return Err(GatherSkip::DeviceRangeInvalid);
            }
            frags.push(match kind {
                CopyKind::Htod => GatherFragment { src: h, dst: d, bytes: len },
                _ => GatherFragment { src: d, dst: h, bytes: len },
            });
        }
        Ok((dev, frags))
    }

    fn run_gather(&self, dev: u32, frags: &[GatherFragment], max: u64) -> Result<(), GatherSkip> {
        self.platform.set_current_device(dev).map_err(|_| GatherSkip::SetDeviceFailed)?;
        let st = &self.devices[dev as usize];
        grid(frags.len() as u64, max).ok_or(GatherSkip::LaunchFailed)?;
        let mut g = st.pool.acquire().map_err(|e| {
            tracing::debug!(device = dev, "gather: no stream: {}", chain(&e));
            GatherSkip::NoStream
        })?;
        let slot = g.slot();
        slot.staging.ensure(frags.len(), false).map_err(|_| GatherSkip::NoStaging)?;
        slot.staging.host[..frags.len()].copy_from_slice(frags);
        let bytes = (frags.len() * FRAGMENT_BYTES) as u64;
        // SAFETY: the host staging belongs to the held slot and is not written again before the
        // synchronize below (or, on a failed launch, the drain-synchronize) completes.
        let up = unsafe {
            slot.stream.copy_htod_async(
                slot.staging.host.as_ptr() as *const u8,
                slot.staging.dev,
                bytes,
            )
        };
        if up.is_err() {
            return Err(GatherSkip::LaunchFailed);
        }
        if slot.stream.launch_gather(slot.staging.dev, frags.len(), true).is_err() {
            // The upload may still be queued: drain it before the slot's staging is reused.
            if slot.stream.synchronize().is_err() {
                g.discard();
            }
            return Err(GatherSkip::LaunchFailed);
        }
        if let Err(e) = slot.stream.synchronize() {
            // Relaxed: see `is_gather_latched`.
            self.latched.store(true, Ordering::Relaxed);
            tracing::warn!(
                device = dev,
                "gather kernel failed to synchronize, turning it off: {}",
                chain(&e)
            );
            // Dropping the slot joins its stream worker, so the kernel is finished before the
            // fallback rewrites the same bytes.
            g.discard();
            return Err(GatherSkip::SyncFailed);
        }
        Ok(())
    }

    /// Copies one plan segment by segment on its device's null stream.
    fn copy_plan(&self, p: &TransferPlan) -> Result<(), TransferFailure> {
        let fail = |code, message: String, ep: String| TransferFailure {
            tags: p.tags.clone(),
            code,
            message,
            endpoint: ep,
        };
        let Some(ord) = Self::device_for(&p.src, &p.dst) else {
            return Err(fail(
                FailureCode::NoSuchDevice,
                "device endpoint without an ordinal".into(),
                "hbm".into(),
            ));
        };
        let ep = format!("hbm:dev{ord}");
        let device = self.platform.device(ord).map_err(|e| {
            fail(FailureCode::NoSuchDevice, format!("set device {ord}: {}", chain(&e)), ep.clone())
        })?;
        self.platform.set_current_device(ord).map_err(|e| {
            fail(FailureCode::NoSuchDevice, format!("set device {ord}: {}", chain(&e)), ep.clone())
        })?;
        let kind = Self::kind_for(&p.src, &p.dst).ok_or_else(|| {
            fail(FailureCode::InvalidAddress, "host-to-host pair".into(), ep.clone())
        })?;
        // Validate every device side before anything is enqueued, so a bad address fails this
        // plan alone and moves no byte.
        let check = |r: &TransferRef, off: &[u64]| -> Result<(), TransferFailure> {
            if r.loc != Loc::Device {
                return Ok(());
            }
            let o = r.device.ok_or_else(|| {
                fail(
                    FailureCode::NoSuchDevice,
                    "device endpoint without an ordinal".into(),
                    ep.clone(),
                )
            })?;
            let d = self
                .platform
                .device(o)
                .map_err(|e| fail(FailureCode::NoSuchDevice, chain(&e), ep.clone()))?;
            if d.is_allocated(DevicePtr(r.addr), r.size) {
                return Ok(());
            }
            for (i, &off) in off.iter().enumerate() {
                let (at, len) = (DevicePtr(r.addr + off), p.sizes[i]);
                if !d.is_allocated(at, len) {
                    let what = format!("{at}+{len} is outside every allocation of device {o}");
                    return Err(fail(FailureCode::InvalidAddress, what, ep.clone()));
                }
            }
            Ok(())
        };
        check(&p.src, &p.src_offsets)?;
        check(&p.dst, &p.dst_offsets)?;
        let s = device.null_stream().map_err(|e| {
            fail(FailureCode::CopyFailed, format!("null stream: {}", chain(&e)), ep.clone())
        })?;
        let segments: Vec<Segment> = (0..p.segments())
            .map(|i| Segment {
                src: p.src.addr + p.src_offsets[i],
                dst: p.dst.addr + p.dst_offsets[i],
                len: p.sizes[i],
            })
            .collect();
        // One blocking copy per plan: its result is this plan's alone, so threads copying on
        // the same null stream need no lock around enqueue + wait (the stream still runs
        // their copies one after another, as the null stream does).
        // SAFETY: the host sides are valid and unaliased for the transfer (`TransferRef::host`'s
        // contract) and in bounds (planner); the call returns only after the copies finished.
        unsafe { s.copy_segments_blocking(kind, &segments) }.map_err(|e| {
            fail(FailureCode::CopyFailed, format!("null-stream copy: {}", chain(&e)), ep.clone())
        })?;
        bump(&self.stats.fallback_plans, 1);
        bump(&self.stats.fallback_segments, p.segments() as u64);
        bump(&self.stats.fallback_bytes, p.bytes());
        Ok(())
    }
}

impl<B: Backend> TransferEngine for HbmCopyEngine<B> {
    fn name(&self) -> &str {
        "hbm"
    }

    fn can_handle(&self, src: &TransferRef, dst: &TransferRef) -> bool {
        src.has_host_ptr() && dst.has_host_ptr() && (src.is_device() || dst.is_device())
    }

    fn plan(&self, items: &[TransferItem]) -> TransferPlanSet {
        plan_items(items, |s, d| self.can_handle(s, d))
    }

    fn submit(&self, plans: Vec<TransferPlan>) -> Option<Box<dyn TransferHandle>> {
        if plans.is_empty() {
            return None;
        }
        let saved = self.platform.current_ordinal();
        let done = self.gather_pass(&plans);
        let mut failures = Vec::new();
        for (p, d) in plans.iter().zip(done) {
            if !d {
                if let Err(f) = self.copy_plan(p) {
                    tracing::debug!("{}: {}", f.endpoint, f.message);
                    failures.push(f);
                }
            }
        }
        let _ = self.platform.set_current_device(saved);
        Some(Box::new(SettledHandle::new(failures)))
    }
}

/// An error and its causes on one line (`op: cause: cause`), for a failure's message.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
