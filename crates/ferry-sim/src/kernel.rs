//! What a kernel body running on a stream has beyond [`Device::translate`]: a translator with
//! a device-TLB-like cache, and a grid of blocks that run in parallel on the device's block
//! workers.
//!
//! A real kernel dereferences device addresses and the MMU translates them; the simulated one
//! must check every access against a live allocation or registration (so a host pointer or a
//! freed range fails instead of working by accident), and those tables sit behind locks that
//! every stream of the platform shares. [`Translator`] keeps the checks and drops the lock from
//! the common case: the first access to an allocation (or host registration) looks it up, and
//! later accesses inside the same range are bounds-checked against the cached entry. A kernel
//! creates one per block; the cache lives only while that block runs (a range freed by another
//! thread while a kernel still uses it is a use-after-free on real hardware too).
//!
//! [`Device::run_blocks`] splits a launch's `n` independent work items into blocks of
//! [`BLOCK_ITEMS`] that up to
//! [`PlatformBuilder::block_workers`](crate::PlatformBuilder::block_workers) threads claim in
//! turn from a shared cursor, as a GPU hands thread blocks to whichever multiprocessor frees up
//! first: the stream's worker claims blocks itself, scoped helper threads claim the rest, and
//! the launch finishes when every block has. A helper that starts late (on a machine whose
//! CPUs are busy) claims fewer blocks, so the launch never waits for a thread that has not run
//! to do a share fixed in advance.
//!
//! # Examples
//! ```
//! use ferry_sim::{Arch, PlatformBuilder};
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 20).build()?;
//! let d = p.device(0)?;
//! let a = d.malloc(4096)?;
//! let mut t = d.translator();
//! assert!(t.translate(a, 4096).is_ok());
//! assert!(t.translate(a.add(4000), 200).is_err(), "past the allocation's end");
//! let sum = std::sync::atomic::AtomicUsize::new(0);
//! d.run_blocks(1000, |range| {
//!     sum.fetch_add(range.len(), std::sync::atomic::Ordering::Relaxed);
//!     Ok(())
//! })
//! .unwrap();
//! assert_eq!(sum.into_inner(), 1000);
//! # Ok::<(), ferry_sim::DeviceError>(())
//! ```
use crate::device::Device;
use crate::error::DeviceError;
use crate::memory::{classify, host_alias, AddrKind, DevicePtr, MemoryError};
use crate::sync::{AtomicUsize, Ordering};
use std::ops::Range;

/// Work items below which [`Device::run_blocks`] keeps a launch on one thread: a helper
/// thread costs tens of microseconds to start, more than a few hundred small copies.
pub const MIN_ITEMS_PER_BLOCK: usize = 512;

/// Work items of one block of [`Device::run_blocks`]: what a thread claims at a time.
pub const BLOCK_ITEMS: usize = 128;

/// A kernel's address translation with one cached range per kind (HBM allocation, host
/// registration). Not `Send`: one per block.
#[derive(Debug)]
pub struct Translator<'d> {
    dev: &'d Device,
    /// Cached HBM allocation: device address, length, device-side pointer to its start.
    hbm: Option<(u64, u64, *mut u8)>,
    /// Cached host registration (host address, length).
    host: Option<(usize, usize)>,
}

impl Device {
    /// A translator for a kernel body on this device (see the [module docs](self)).
    pub fn translator(&self) -> Translator<'_> {
        Translator { dev: self, hbm: None, host: None }
    }

    /// Runs `f` over `0..items` in blocks of [`BLOCK_ITEMS`], claimed in turn by up to
    /// [`block_workers`](Device::block_workers) threads (the calling thread included); on the
    /// calling thread alone, as one block, when `items` is below [`MIN_ITEMS_PER_BLOCK`] per
    /// extra worker. A thread stops claiming at its first error; the others go on. Returns the
    /// first error.
    ///
    /// # Errors
    /// The message of a block that failed (the calling thread's first, else the first helper's
    /// in spawn order).
    pub fn run_blocks<F>(&self, items: usize, f: F) -> Result<(), String>
    where
        F: Fn(Range<usize>) -> Result<(), String> + Sync,
    {
        let workers = self.block_workers().min(items / MIN_ITEMS_PER_BLOCK).max(1);
        if workers == 1 {
            return f(0..items);
        }
        let cursor = AtomicUsize::new(0);
        let claim = || -> Result<(), String> {
            loop {
                // Relaxed: the cursor only hands out disjoint ranges; what a block wrote is
                // published to the caller by the scope's join.
                let start = cursor.fetch_add(BLOCK_ITEMS, Ordering::Relaxed);
                if start >= items {
                    return Ok(());
                }
                f(start..(start + BLOCK_ITEMS).min(items))?;
            }
        };
        std::thread::scope(|s| {
            let helpers: Vec<_> = (1..workers)
                .map(|_| {
                    std::thread::Builder::new().name("sim-block".into()).spawn_scoped(s, claim)
                })
                .collect();
            // A helper that could not be spawned claims nothing: this thread's own loop runs
            // until every block is claimed.
            let mut first = claim();
            for h in helpers.into_iter().flatten() {
                let res = h.join().unwrap_or_else(|_| Err("a kernel block panicked".into()));
                if first.is_ok() {
                    first = res;
                }
            }
            first
        })
    }
}

impl Translator<'_> {
    /// As [`Device::translate`]: the device-side pointer for `[ptr, ptr+len)`, which must lie
    /// inside one live allocation of this device or one registered host range (through this
    /// device's alias).
    ///
    /// # Errors
    /// As [`Device::translate`].
    pub fn translate(&mut self, ptr: DevicePtr, len: u64) -> Result<*mut u8, DeviceError> {
        let a = ptr.0;
        match classify(a) {
            AddrKind::HostAlias(o) if o == self.dev.ordinal() => {
                let host = (a - host_alias(o, 0).0) as usize;
                let l = usize::try_from(len)
                    .map_err(|_| MemoryError::NotRegistered { host_addr: host, len: usize::MAX })?;
                let inside = |(s, n): (usize, usize)| {
                    host >= s && host.checked_add(l).is_some_and(|e| e <= s + n)
                };
                if !self.host.is_some_and(inside) {
                    let r = self.dev.0.shared.registry.find(host, l);
                    let r = r.ok_or(MemoryError::NotRegistered { host_addr: host, len: l })?;
                    self.host = Some((r.host_addr, r.len));
                }
                Ok(host as *mut u8)
            }
            AddrKind::Hbm(o) if o == self.dev.ordinal() => {
                if let Some((s, n, base)) = self.hbm {
                    if a >= s && a.checked_add(len).is_some_and(|e| e <= s + n) {
                        // SAFETY: `[a, a+len)` lies inside the cached live allocation
                        // `[s, s+n)`, whose device view starts at `base`.
                        return Ok(unsafe { base.add((a - s) as usize) });
                    }
                }
                let (s, n, base) = self.dev.memory().allocation_of(ptr, len)?;
                self.hbm = Some((s, n, base));
                // SAFETY: as above; `allocation_of` proved the range lies inside `[s, s+n)`.
                Ok(unsafe { base.add((a - s) as usize) })
            }
            _ => Ok(self.dev.translate(ptr, len)?),
        }
    }
}
