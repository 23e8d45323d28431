//! Device memory ("HBM"), its host mirror, and host-memory registration.
//!
//! # Address map
//!
//! | range | what |
//! |---|---|
//! | `DEVICE_ADDR_BASE + ordinal · DEVICE_ADDR_STRIDE ..` | device `ordinal`'s HBM |
//! | `HOST_ALIAS_BASE + (ordinal << 48) + host_addr` | device `ordinal`'s alias of registered host memory |
//!
//! Both ranges are non-canonical x86-64/aarch64 user addresses, so no host pointer can ever be a
//! valid device address: a host pointer handed to the device fails with
//! [`MemoryError::NotDeviceAddress`], and every access is checked against the live allocation
//! (or registration) that contains it, so an out-of-bounds access fails with an error instead of
//! corrupting memory.
//!
//! # Access disciplines
//!
//! On an SVM arch (a2a3) the host and the device share one view of HBM: [`HbmMemory::host_ptr`]
//! and [`HbmMemory::device_ptr`] return the same bytes, and
//! [`read_range_from_device`](HbmMemory::read_range_from_device) /
//! [`write_range_to_device`](HbmMemory::write_range_to_device) do nothing. On a non-SVM arch
//! (a5) the host works on a mirror and must copy ranges explicitly; there is no call that writes
//! a whole region back, so a bulk write-back (which would roll back device-owned words) is
//! impossible by construction. The bytes moved each way are counted.
use crate::counters::Counters;
use crate::sync::{fence, lock, Arc, Mutex, Ordering};
use memmap2::MmapMut;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64 as StdAtomicU64, AtomicU8};

/// First address of device 0's HBM.
pub const DEVICE_ADDR_BASE: u64 = 0x4000_0000_0000_0000;
/// Address distance between two devices' HBM ranges (1 TiB).
pub const DEVICE_ADDR_STRIDE: u64 = 1 << 40;
/// Base of the per-device aliases of registered host memory.
pub const HOST_ALIAS_BASE: u64 = 0x2000_0000_0000_0000;
/// Allocation granularity and default alignment of device memory.
pub const DEVICE_ALIGN: u64 = 64;

/// An address in some device's address space (HBM or a host alias): the seam's type.
pub use ferry_backend::DevicePtr;

/// What an address turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrKind {
    /// HBM of the device with this ordinal.
    Hbm(u32),
    /// A host alias on the device with this ordinal.
    HostAlias(u32),
    /// Neither: a host pointer, null, or garbage.
    Foreign,
}

/// Classifies an address by range alone (no liveness check).
pub fn classify(addr: u64) -> AddrKind {
    if addr >= DEVICE_ADDR_BASE {
        let ord = (addr - DEVICE_ADDR_BASE) / DEVICE_ADDR_STRIDE;
        if ord < 256 {
            return AddrKind::Hbm(ord as u32);
        }
    } else if addr >= HOST_ALIAS_BASE {
        let ord = (addr - HOST_ALIAS_BASE) >> 48;
        if ord < 256 {
            return AddrKind::HostAlias(ord as u32);
        }
    }
    AddrKind::Foreign
}

/// The alias device `ordinal` uses for host address `host_addr`.
pub const fn host_alias(ordinal: u32, host_addr: usize) -> DevicePtr {
    DevicePtr(HOST_ALIAS_BASE + ((ordinal as u64) << 48) + host_addr as u64)
}

/// Errors of device-memory and registration operations.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// The device has no free range large enough.
    #[error("device {device} out of memory: requested {requested} bytes, {free} free")]
    OutOfMemory {
        /// Device ordinal.
        device: u32,
        /// Bytes asked for.
        requested: u64,
        /// Bytes free (possibly fragmented).
        free: u64,
    },
    /// The address is not in any device range: typically a host pointer used as a device address.
    #[error("{addr:#x} is not a device address (a host pointer used as a device address?)")]
    NotDeviceAddress {
        /// The offending address.
        addr: u64,
    },
    /// A device-space address (or null) was passed where a host pointer was expected.
    #[error("{addr:#x} is not a host address (a device address used as a host pointer?)")]
    NotHostAddress {
        /// The offending address.
        addr: u64,
    },
    /// The address belongs to another device.
    #[error("{addr:#x} belongs to device {owner}, not device {device}")]
    WrongDevice {
        /// The offending address.
        addr: u64,
        /// The device that owns it.
        owner: u32,
        /// The device it was used on.
        device: u32,
    },
    /// No live allocation or registration contains the whole range.
    #[error("range {addr:#x}+{len} is outside every live allocation of device {device}")]
    OutOfBounds {
        /// Start of the range.
        addr: u64,
        /// Length of the range.
        len: u64,
        /// Device ordinal.
        device: u32,
    },
    /// `free` of an address that is not the start of a live allocation.
    #[error("{addr:#x} is not the start of a live allocation on device {device}")]
    InvalidFree {
        /// The offending address.
        addr: u64,
        /// Device ordinal.
        device: u32,
    },
    /// A host range is not registered (or straddles the end of a registration).
    #[error("host range {host_addr:#x}+{len} is not registered")]
    NotRegistered {
        /// Host start address.
        host_addr: usize,
        /// Length.
        len: usize,
    },
    /// A host range overlaps an existing registration.
    #[error("host range {host_addr:#x}+{len} overlaps an existing registration")]
    AlreadyRegistered {
        /// Host start address.
        host_addr: usize,
        /// Length.
        len: usize,
    },
    /// A zero-length or null registration or allocation.
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// What was invalid.
        what: &'static str,
        /// Why.
        detail: String,
    },
}

#[derive(Debug, Default)]
struct Allocator {
    /// start offset → length of live allocations.
    live: BTreeMap<u64, u64>,
    /// start offset → length of free ranges (coalesced).
    free: BTreeMap<u64, u64>,
    used: u64,
}

impl Allocator {
    fn new(size: u64) -> Self {
        let mut a = Allocator::default();
        if size > 0 {
            a.free.insert(0, size);
        }
        a
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        let size = size.max(1).checked_next_multiple_of(DEVICE_ALIGN)?;
        let align = align.max(DEVICE_ALIGN);
        let (start, len, at) = self.free.iter().find_map(|(&s, &l)| {
            let at = s.checked_next_multiple_of(align)?;
            (at.checked_add(size)? <= s + l).then_some((s, l, at))
        })?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        let end = at + size;
        if end < start + len {
            self.free.insert(end, start + len - end);
        }
        self.live.insert(at, size);
        self.used += size;
        Some(at)
    }

    fn release(&mut self, at: u64) -> bool {
        let Some(size) = self.live.remove(&at) else { return false };
        self.used -= size;
        let (mut s, mut l) = (at, size);
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            if ps + pl == s {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(s + l)) {
            self.free.remove(&(s + l));
            l += nl;
        }
        self.free.insert(s, l);
        true
    }

    fn containing(&self, off: u64, len: u64) -> Option<(u64, u64)> {
        let (&s, &l) = self.live.range(..=off).next_back()?;
        let end = off.checked_add(len)?;
        (end <= s + l).then_some((s, l))
    }
}

/// One device's HBM, its host mirror (non-SVM only) and its allocator.
pub struct HbmMemory {
    ordinal: u32,
    svm: bool,
    base: u64,
    size: u64,
    hbm: MmapMut,
    mirror: Option<MmapMut>,
    alloc: Mutex<Allocator>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for HbmMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HbmMemory")
            .field("ordinal", &self.ordinal)
            .field("svm", &self.svm)
            .field("size", &self.size)
            .field("used", &self.used())
            .finish()
    }
}

impl HbmMemory {
    pub(crate) fn new(
        ordinal: u32,
        size: u64,
        svm: bool,
        counters: Arc<Counters>,
    ) -> std::io::Result<Self> {
        let len = usize::try_from(size.max(DEVICE_ALIGN)).map_err(std::io::Error::other)?;
        // Anonymous mappings are committed lazily, so a large, mostly empty HBM costs nothing.
        let hbm = MmapMut::map_anon(len)?;
        let mirror = if svm { None } else { Some(MmapMut::map_anon(len)?) };
        Ok(Self {
            ordinal,
            svm,
            base: DEVICE_ADDR_BASE + ordinal as u64 * DEVICE_ADDR_STRIDE,
            size,
            hbm,
            mirror,
            alloc: Mutex::new(Allocator::new(size)),
            counters,
        })
    }

    /// Total HBM bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes in live allocations.
    pub fn used(&self) -> u64 {
        lock(&self.alloc).used
    }

    /// Whether host and device share one view (SVM).
    pub fn is_svm(&self) -> bool {
        self.svm
    }

    /// Allocates `size` bytes aligned to at least [`DEVICE_ALIGN`] (and to `align`).
    ///
    /// # Errors
    /// [`MemoryError::OutOfMemory`] when no free range fits; [`MemoryError::Invalid`] for a
    /// non-power-of-two alignment.
    pub fn alloc(&self, size: u64, align: u64) -> Result<DevicePtr, MemoryError> {
        if align != 0 && !align.is_power_of_two() {
            return Err(MemoryError::Invalid {
                what: "alignment",
                detail: format!("{align} is not a power of two"),
            });
        }
        let mut a = lock(&self.alloc);
        match a.alloc(size, align) {
            Some(off) => Ok(DevicePtr(self.base + off)),
            None => Err(MemoryError::OutOfMemory {
                device: self.ordinal,
                requested: size,
                free: self.size - a.used,
            }),
        }
    }

    /// Frees an allocation returned by [`alloc`](Self::alloc).
    ///
    /// # Errors
    /// [`MemoryError::InvalidFree`] when `ptr` is not the start of a live allocation.
    pub fn free(&self, ptr: DevicePtr) -> Result<(), MemoryError> {
        let off = self.offset_of(ptr.0)?;
        if lock(&self.alloc).release(off) {
            Ok(())
        } else {
            Err(MemoryError::InvalidFree { addr: ptr.0, device: self.ordinal })
        }
    }

    fn offset_of(&self, addr: u64) -> Result<u64, MemoryError> {
        match classify(addr) {
            AddrKind::Hbm(o) if o == self.ordinal => Ok(addr - self.base),
            AddrKind::Hbm(owner) | AddrKind::HostAlias(owner) if owner != self.ordinal => {
                Err(MemoryError::WrongDevice { addr, owner, device: self.ordinal })
            }
            _ => Err(MemoryError::NotDeviceAddress { addr }),
        }
    }

    /// Checks that `[ptr, ptr+len)` lies inside one live allocation and returns its offset.
    fn check(&self, ptr: DevicePtr, len: u64) -> Result<u64, MemoryError> {
        let off = self.offset_of(ptr.0)?;
        lock(&self.alloc).containing(off, len).map(|_| off).ok_or(MemoryError::OutOfBounds {
            addr: ptr.0,
            len,
            device: self.ordinal,
        })
    }

    /// The live allocation containing `[ptr, ptr+len)`: its device address, its length and
    /// the device-side view of its first byte (what [`device_ptr`](Self::device_ptr) returns
    /// for that address). A kernel's [`Translator`](crate::kernel::Translator) caches it.
    ///
    /// # Errors
    /// When the range is not inside one live allocation of this device.
    pub fn allocation_of(
        &self,
        ptr: DevicePtr,
        len: u64,
    ) -> Result<(u64, u64, *mut u8), MemoryError> {
        let off = self.offset_of(ptr.0)?;
        let (s, l) = lock(&self.alloc).containing(off, len).ok_or(MemoryError::OutOfBounds {
            addr: ptr.0,
            len,
            device: self.ordinal,
        })?;
        // SAFETY: `containing` returned a live allocation inside the map: `s + l <= size`, and
        // `hbm` maps `size` bytes.
        Ok((self.base + s, l, unsafe { self.hbm.as_ptr().cast_mut().add(s as usize) }))
    }

    /// The device-side view of `[ptr, ptr+len)`: what device code (AICPU, AICore, DMA) reads and
    /// writes.
    ///
    /// # Errors
    /// When the range is not inside one live allocation of this device.
    pub fn device_ptr(&self, ptr: DevicePtr, len: u64) -> Result<*mut u8, MemoryError> {
        let off = self.check(ptr, len)?;
        // SAFETY: `check` proved `off + len <= size`, and `hbm` maps `size` bytes.
        Ok(unsafe { self.hbm.as_ptr().cast_mut().add(off as usize) })
    }

    /// Brings in the host pages behind `[ptr, ptr+len)` (and the host mirror's on non-SVM)
    /// without changing a byte (Linux `MADV_POPULATE_WRITE`; elsewhere nothing): the
    /// simulation's own cost, which real HBM does not have, paid once by the caller instead of
    /// as page faults of the chip's threads while a run touches the range. Best effort.
    ///
    /// # Errors
    /// When the range is not inside one live allocation of this device.
    pub fn populate(&self, ptr: DevicePtr, len: u64) -> Result<(), MemoryError> {
        let off = self.check(ptr, len)?;
        #[cfg(target_os = "linux")]
        for map in std::iter::once(&self.hbm).chain(self.mirror.as_ref()) {
            // A refusal (an old kernel) leaves the pages to be faulted in when touched.
            let _ = map.advise_range(memmap2::Advice::PopulateWrite, off as usize, len as usize);
        }
        Ok(())
    }

    /// The host-side view of `[ptr, ptr+len)`: the same bytes as the device view on SVM, the
    /// host mirror on non-SVM (synchronised only by the explicit range calls).
    ///
    /// # Errors
    /// When the range is not inside one live allocation of this device.
    pub fn host_ptr(&self, ptr: DevicePtr, len: u64) -> Result<*mut u8, MemoryError> {
        let off = self.check(ptr, len)?;
        let map = self.mirror.as_ref().unwrap_or(&self.hbm);
        // SAFETY: `check` proved `off + len <= size`, and both maps are `size` bytes long.
        Ok(unsafe { map.as_ptr().cast_mut().add(off as usize) })
    }

    /// Makes the host's writes to `[ptr, ptr+len)` visible to the device. No-op on SVM.
    ///
    /// Ordering: everything the host wrote before this call happens-before a device Acquire load
    /// that observes any word of the range (the host's `wmb()` before the push).
    ///
    /// # Errors
    /// When the range is not inside one live allocation of this device.
    pub fn write_range_to_device(&self, ptr: DevicePtr, len: u64) -> Result<(), MemoryError> {
        let off = self.check(ptr, len)?;
        let Some(mirror) = &self.mirror else { return Ok(()) };
        // Release: the store barrier before the push; pairs with device Acquire loads of the
        // words copied below.
        fence(Ordering::Release);
        // SAFETY: both ranges are `len` bytes inside maps of `size` bytes (checked above), and
        // the copy uses atomic accesses only, so concurrent device atomics are not a data race.
        unsafe {
            atomic_copy(mirror.as_ptr().add(off as usize), self.hbm.as_ptr().add(off as usize), len)
        };
        self.counters.add(crate::counters::Counter::BytesToDevice, len);
        Ok(())
    }

    /// Refreshes the host's view of `[ptr, ptr+len)` from the device. No-op on SVM.
    ///
    /// Ordering: a device Release store observed by this copy happens-before the host's reads of
    /// the mirror after this call (the host's `rmb()` after the pull).
    ///
    /// # Errors
    /// When the range is not inside one live allocation of this device.
    pub fn read_range_from_device(&self, ptr: DevicePtr, len: u64) -> Result<(), MemoryError> {
        let off = self.check(ptr, len)?;
        let Some(mirror) = &self.mirror else { return Ok(()) };
        // SAFETY: as in `write_range_to_device`, with source and destination swapped.
        unsafe {
            atomic_copy(self.hbm.as_ptr().add(off as usize), mirror.as_ptr().add(off as usize), len)
        };
        // Acquire: the load barrier after the pull; pairs with the device's Release stores.
        fence(Ordering::Acquire);
        self.counters.add(crate::counters::Counter::BytesFromDevice, len);
        Ok(())
    }
}

impl HbmMemory {
    /// Refreshes the host's view of `[ptr, ptr+len)` from the device with one bulk copy (a plain
    /// `memcpy`; no-op on SVM), for a range the host owns: a buffer the device published with a
    /// Release store the host has already observed with an Acquire load, and does not write
    /// again until the host hands it back.
    ///
    /// # Safety
    /// No thread writes `[ptr, ptr+len)` of the device memory or of its host mirror during the
    /// call.
    ///
    /// # Errors
    /// When the range is not inside one live allocation of this device.
    pub unsafe fn read_owned_range_from_device(
        &self,
        ptr: DevicePtr,
        len: u64,
    ) -> Result<(), MemoryError> {
        let off = self.check(ptr, len)?;
        let Some(mirror) = &self.mirror else { return Ok(()) };
        // SAFETY: both ranges are `len` bytes inside maps of `size` bytes (checked above), the
        // maps are distinct, and the caller guarantees nobody writes either range meanwhile.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.hbm.as_ptr().add(off as usize),
                mirror.as_ptr().cast_mut().add(off as usize),
                len as usize,
            )
        };
        self.counters.add(crate::counters::Counter::BytesFromDevice, len);
        Ok(())
    }
}

/// Copies `len` bytes with relaxed atomic accesses, each naturally aligned word in one access
/// (see [`copy_unit`]), so a copy that races with atomic accesses of the other side is not a
/// data race, and a reader polling an aligned word on the other side sees its old or its new
/// value, never a mix of their bytes, as with a DMA of an aligned word.
///
/// # Safety
/// - `src` is valid for reads and `dst` for writes of `len` bytes;
/// - every concurrent access to either range is atomic (or the ranges are not shared).
pub(crate) unsafe fn atomic_copy(src: *const u8, dst: *const u8, len: u64) {
    let len = len as usize;
    let mut i = 0usize;
    while i < len {
        // SAFETY: `i < len`, so both pointers stay inside the ranges the caller vouched for.
        let (s, d) = unsafe { (src.add(i), dst.add(i)) };
        let unit = copy_unit(s as usize, d as usize, len - i);
        // Relaxed (every width): ordering comes from the fences around the whole copy.
        match unit {
            8 => {
                // SAFETY: 8 bytes at `s` and `d`, 8-aligned on both sides and inside both ranges
                // (`copy_unit`); all concurrent accesses are atomic.
                let (sa, da) = unsafe {
                    (StdAtomicU64::from_ptr(s as *mut u64), StdAtomicU64::from_ptr(d as *mut u64))
                };
                da.store(sa.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            4 => {
                // SAFETY: as above, 4 bytes, 4-aligned.
                let (sa, da) = unsafe {
                    (AtomicU32::from_ptr(s as *mut u32), AtomicU32::from_ptr(d as *mut u32))
                };
                da.store(sa.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            2 => {
                // SAFETY: as above, 2 bytes, 2-aligned.
                let (sa, da) = unsafe {
                    (AtomicU16::from_ptr(s as *mut u16), AtomicU16::from_ptr(d as *mut u16))
                };
                da.store(sa.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            _ => {
                // SAFETY: as above, one byte.
                let (sa, da) =
                    unsafe { (AtomicU8::from_ptr(s as *mut u8), AtomicU8::from_ptr(d as *mut u8)) };
                da.store(sa.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        i += unit;
    }
}

/// The bytes [`atomic_copy`] moves in one access at source address `s` and destination `d`
/// with `left` bytes to go: the widest of 8, 4, 2 and 1 to which both addresses are aligned and
/// which fits in `left`. Copying a 4-byte word byte by byte would let a reader of it on the
/// other side see a mix of its old and new bytes (0xff to 0x100 read as 0 or 0x1ff).
pub(crate) fn copy_unit(s: usize, d: usize, left: usize) -> usize {
    [8, 4, 2].into_iter().find(|&w| s % w == 0 && d % w == 0 && left >= w).unwrap_or(1)
}

/// One registered host range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostRegion {
    /// Host start address.
    pub host_addr: usize,
    /// Length in bytes.
    pub len: usize,
}

/// The platform-wide table of registered host memory (portable: valid on every device).
#[derive(Debug, Default)]
pub struct HostRegistry {
    regions: Mutex<BTreeMap<usize, usize>>,
}

impl HostRegistry {
    pub(crate) fn insert(&self, host_addr: usize, len: usize) -> Result<(), MemoryError> {
        if host_addr == 0 || len == 0 || host_addr.checked_add(len).is_none() {
            return Err(MemoryError::Invalid {
                what: "host registration",
                detail: format!("{host_addr:#x}+{len}"),
            });
        }
        let mut r = lock(&self.regions);
        let end = host_addr + len;
        let overlaps_prev = r.range(..end).next_back().is_some_and(|(&s, &l)| s + l > host_addr);
        if overlaps_prev {
            return Err(MemoryError::AlreadyRegistered { host_addr, len });
        }
        r.insert(host_addr, len);
        Ok(())
    }

    pub(crate) fn remove(&self, host_addr: usize) -> Result<HostRegion, MemoryError> {
        lock(&self.regions)
            .remove(&host_addr)
            .map(|len| HostRegion { host_addr, len })
            .ok_or(MemoryError::NotRegistered { host_addr, len: 0 })
    }

    /// The registration that contains all of `[host_addr, host_addr+len)`, if any (a range
    /// straddling the end of a registration has none).
    pub fn find(&self, host_addr: usize, len: usize) -> Option<HostRegion> {
        let r = lock(&self.regions);
        let (&s, &l) = r.range(..=host_addr).next_back()?;
        let end = host_addr.checked_add(len)?;
        (end <= s + l).then_some(HostRegion { host_addr: s, len: l })
    }

    /// Total registered bytes.
    pub fn registered_bytes(&self) -> u64 {
        lock(&self.regions).values().map(|&l| l as u64).sum()
    }
}

#[cfg(all(test, not(ferry_loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mem(svm: bool) -> HbmMemory {
        HbmMemory::new(1, 1 << 20, svm, Arc::default()).unwrap()
    }

    /// Every naturally aligned word of a range moves in one access: a queue index (4 bytes at a
    /// 4-aligned offset) whole, even next to an 8-aligned neighbour; a misaligned side or the
    /// range's end narrows the unit.
    #[test]
    fn a_range_copy_moves_each_aligned_word_in_one_access() {
        assert_eq!(copy_unit(0x1000, 0x2000, 64), 8);
        assert_eq!(copy_unit(0x1000, 0x2000, 4), 4, "a lone 4-byte index at an 8-aligned offset");
        assert_eq!(copy_unit(0x1004, 0x2004, 4), 4);
        assert_eq!(copy_unit(0x1004, 0x2004, 12), 4, "up to the next 8-aligned word");
        assert_eq!(copy_unit(0x1008, 0x2008, 7), 4);
        assert_eq!(copy_unit(0x1000, 0x2004, 16), 4, "the less aligned side decides");
        assert_eq!(copy_unit(0x1002, 0x2002, 8), 2);
        assert_eq!(copy_unit(0x1000, 0x2000, 3), 2);
        assert_eq!(copy_unit(0x1001, 0x2000, 8), 1);
        assert_eq!(copy_unit(0x1000, 0x2000, 1), 1);
        // And the copy moves the bytes themselves, at every alignment and length.
        let src: Vec<u8> = (0..64u8).collect();
        for off in 0..8 {
            for len in 0..24 {
                let dst = [0u64; 8];
                let d = dst.as_ptr().cast::<u8>();
                // SAFETY: `off + len <= 32` bytes of both the 64-byte `src` and `dst`; no other
                // thread touches them.
                unsafe { atomic_copy(src.as_ptr().add(off), d.add(off), len as u64) };
                // SAFETY: as above.
                let got = unsafe { core::slice::from_raw_parts(d, 64) };
                let mut want = [0u8; 64];
                want[off..off + len].copy_from_slice(&src[off..off + len]);
                assert_eq!(got, want, "offset {off}, {len} bytes");
            }
        }
    }

    #[test]
    fn host_pointer_is_not_a_device_address() {
        let m = mem(true);
        let host = [0u8; 64];
        let err = m.device_ptr(DevicePtr(host.as_ptr() as u64), 64).unwrap_err();
        assert!(matches!(err, MemoryError::NotDeviceAddress { .. }), "{err}");
        assert_eq!(classify(host.as_ptr() as u64), AddrKind::Foreign);
    }

    #[test]
    fn out_of_bounds_and_wrong_device_fail() {
        let m = mem(true);
        let p = m.alloc(100, 0).unwrap();
        assert!(m.device_ptr(p, 128).is_ok(), "allocation is rounded to 64");
        assert!(matches!(m.device_ptr(p, 129), Err(MemoryError::OutOfBounds { .. })));
        assert!(matches!(m.device_ptr(p.add(128), 1), Err(MemoryError::OutOfBounds { .. })));
        let other = DevicePtr(DEVICE_ADDR_BASE + 5 * DEVICE_ADDR_STRIDE);
        assert!(matches!(m.device_ptr(other, 1), Err(MemoryError::WrongDevice { owner: 5, .. })));
        m.free(p).unwrap();
        assert!(matches!(m.device_ptr(p, 1), Err(MemoryError::OutOfBounds { .. })));
        assert!(matches!(m.free(p), Err(MemoryError::InvalidFree { .. })));
    }

    #[test]
    fn out_of_memory_reports_free_bytes() {
        let m = mem(true);
        let _a = m.alloc(1 << 19, 0).unwrap();
        let err = m.alloc(1 << 20, 0).unwrap_err();
        assert_eq!(err, MemoryError::OutOfMemory { device: 1, requested: 1 << 20, free: 1 << 19 });
    }

    #[test]
    fn svm_shares_one_view_and_range_calls_move_nothing() {
        let c = Arc::new(Counters::default());
        let m = HbmMemory::new(0, 1 << 16, true, c.clone()).unwrap();
        let p = m.alloc(64, 0).unwrap();
        assert_eq!(m.host_ptr(p, 64).unwrap(), m.device_ptr(p, 64).unwrap());
        m.write_range_to_device(p, 64).unwrap();
        m.read_range_from_device(p, 64).unwrap();
        let s = c.snapshot();
        assert_eq!((s.bytes_to_device, s.bytes_from_device), (0, 0));
    }

    #[test]
    fn non_svm_needs_explicit_range_copies_and_counts_bytes() {
        let c = Arc::new(Counters::default());
        let m = HbmMemory::new(0, 1 << 16, false, c.clone()).unwrap();
        let p = m.alloc(64, 0).unwrap();
        let (h, d) = (m.host_ptr(p, 64).unwrap(), m.device_ptr(p, 64).unwrap());
        assert_ne!(h, d);
        // SAFETY: both pointers address 64 live bytes; no other thread touches them.
        unsafe {
            h.write_bytes(0xAB, 16);
            assert_eq!(*d, 0, "a host write is invisible to the device before the push");
        }
        m.write_range_to_device(p, 16).unwrap();
        // SAFETY: as above.
        unsafe {
            assert_eq!(*d.add(15), 0xAB);
            assert_eq!(*d.add(16), 0);
            d.add(32).write(7);
            assert_eq!(*h.add(32), 0, "a device write is invisible to the host before the pull");
        }
        m.read_range_from_device(p.add(32), 8).unwrap();
        // SAFETY: as above.
        unsafe { assert_eq!(*h.add(32), 7) };
        let s = c.snapshot();
        assert_eq!((s.bytes_to_device, s.bytes_from_device), (16, 8));
        assert!(m.write_range_to_device(p, 65).is_err(), "ranges are bounds-checked");
    }

    #[test]
    fn registry_rejects_overlap_and_straddle() {
        let r = HostRegistry::default();
        r.insert(0x1000, 0x1000).unwrap();
        assert!(matches!(r.insert(0x1800, 0x10), Err(MemoryError::AlreadyRegistered { .. })));
        assert!(matches!(r.insert(0x800, 0x1000), Err(MemoryError::AlreadyRegistered { .. })));
        r.insert(0x2000, 0x10).unwrap();
        assert!(r.find(0x1ff0, 0x10).is_some());
        assert!(r.find(0x1ff0, 0x11).is_none(), "straddles two registrations");
        assert_eq!(r.registered_bytes(), 0x1010);
        r.remove(0x1000).unwrap();
        assert!(r.find(0x1000, 1).is_none());
        assert!(r.insert(0, 1).is_err());
    }

    proptest! {
        #[test]
        fn allocations_never_overlap_and_free_coalesces(sizes in proptest::collection::vec(1u64..5000, 1..40)) {
            let mut a = Allocator::new(1 << 20);
            let mut live = Vec::new();
            for s in &sizes {
                if let Some(at) = a.alloc(*s, 0) {
                    prop_assert_eq!(at % DEVICE_ALIGN, 0);
                    for &(o, l) in &live {
                        prop_assert!(at + s <= o || o + l <= at);
                    }
                    live.push((at, *s));
                }
            }
            for (o, _) in live.drain(..) {
                prop_assert!(a.release(o));
            }
            prop_assert_eq!(a.used, 0);
            prop_assert_eq!(a.free.len(), 1);
        }
    }
}
