//! The AICPU clusters' data caches: why Path B hangs (the Path B hang, docs/design/launch.md).
//!
//! On the vendor stack the custom scheduler (Path B) binds its worker threads to the AICPU
//! cluster reserved for OS work, whose L1 is outside AICore's HBM-write snoop domain: a line it
//! has read stays in its cache with the old bytes however often AICore rewrites HBM. The main
//! scheduler's cluster (Method 1, Path A) is inside that domain. This module models exactly that
//! and nothing more, at the place an AICPU thread reads and writes device memory through the OS
//! services (`mem_load`, `mem_store`, `cache_op` of [`ferry_abi::services::DeviceServices`]):
//! the device program does not know, and cannot ask, whether its cluster is cached.
//!
//! | reach of a thread | when | loads / stores | `dc civac` | `dc ivac` |
//! |---|---|---|---|---|
//! | coherent | main cluster; custom cluster with fix C (same-cluster affinity) or on the relaxed device | straight to memory | nothing to do | nothing to do |
//! | uncached | custom cluster with fix B (non-cacheable mapping) | straight to memory, counted | nothing to do | nothing to do |
//! | cached | custom cluster, vendor default | through the thread's line cache | writes a dirty line back whole (the thread's stale view of every field on it); invalidates only with fix A | no-op (trapped and ignored) unless fix A enables EL0 cache maintenance |
//!
//! The line cache of a cached thread holds 64-byte lines ([`CACHE_LINE_BYTES`]): a load that
//! misses fills the line from memory, every later load of it is a hit that returns the cached
//! bytes, whatever the load's kind — `volatile` and acquire loads read through the cache like
//! plain ones (they order, they do not refetch). A store allocates the line, updates it and
//! marks it written, and also reaches memory (as docs/design/launch.md observed: the host's D2H readback saw
//! the AICPU's handshake writes land in HBM). `dc civac` writes a line the thread has written
//! back whole — the thread's stale view of every field on it, AICore's included. AICore writes
//! never touch a cached line. The cache holds [`LINES_PER_THREAD`] lines (first in, first out:
//! an evicted line is dropped, its stores are already in memory), and each launch's threads
//! start with an empty cache.
//!
//! Every access outside this model (bulk data through `translate`, register MMIO, host copies)
//! reaches memory directly: the model covers the handshake slots' polling path, which is where
//! the hang happens.
//!
//! # Counters
//! [`CacheStats`] counts the model's work per device. On a coherent cluster it does none: every
//! counter stays zero, the proof that Method 1 and Path A pay nothing for the model.
use crate::device::Device;
use crate::memory::DevicePtr;
pub use ferry_abi::services::CACHE_LINE_BYTES;
use ferry_abi::services::{
    CACHE_OP_CIVAC, CACHE_OP_IVAC, MEM_LOAD_ACQUIRE, MEM_STORE_RELEASE, STATUS_BAD_ADDRESS,
    STATUS_INVALID_ARGUMENT, STATUS_OK,
};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Lines one thread's cache holds before it evicts (32 KiB, an AICPU L1D).
pub const LINES_PER_THREAD: usize = 512;

/// The AICPU cluster a CPU-kernel launch's threads run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cluster {
    /// The main `aicpu_scheduler` cluster (Method 1, Path A, the bootstrap): in AICore's snoop
    /// domain.
    Main,
    /// The custom scheduler's cluster (Path B).
    Custom,
}

/// How one thread's accesses reach device memory (see the module table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Straight to memory, as a cluster in AICore's snoop domain.
    Coherent,
    /// Straight to memory through a non-cacheable mapping (fix B), each access counted.
    Uncached,
    /// Through the thread's line cache; `el0_maintenance` is fix A (EL0 may invalidate).
    Cached {
        /// Whether EL0 cache maintenance is enabled (`SCTLR_EL1.UCI = 1`).
        el0_maintenance: bool,
    },
}

/// The cache model's work on one device since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Loads and stores that missed and filled a line from memory.
    pub line_fills: u64,
    /// Loads served from a cached line.
    pub hits: u64,
    /// Stores into a cached line (written through to memory too).
    pub cached_stores: u64,
    /// Written lines `dc civac` wrote back whole.
    pub writebacks: u64,
    /// Lines invalidated by `dc civac` / `dc ivac` (fix A).
    pub invalidations: u64,
    /// Cache instructions the OS trapped and ignored (EL0 maintenance off).
    pub ignored_ops: u64,
    /// Accesses through a non-cacheable mapping (fix B).
    pub uncached_accesses: u64,
}

impl CacheStats {
    /// Whether the model did any work (a coherent cluster never makes it).
    pub fn is_idle(&self) -> bool {
        *self == CacheStats::default()
    }
}

/// Per-device counters behind [`CacheStats`].
#[derive(Debug, Default)]
pub(crate) struct CacheCounters {
    c: [AtomicU64; 7],
    /// Threads of a launch running with a line cache ([`ReachGuard`]s of [`Reach::Cached`]).
    cached_threads: AtomicU64,
    /// Lines filled since the cached threads now running started (0 while none runs).
    launch_fills: AtomicU64,
}

#[derive(Clone, Copy)]
enum C {
    Fill = 0,
    Hit,
    Store,
    Writeback,
    Invalidate,
    Ignored,
    Uncached,
}

impl CacheCounters {
    fn add(&self, c: C) {
        // Relaxed: statistics, read after the threads that count them have been joined.
        self.c[c as usize].fetch_add(1, Ordering::Relaxed);
        if matches!(c, C::Fill) {
            // Relaxed: a count a core start polls (`launch_fills`); it publishes nothing.
            self.launch_fills.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lines filled by the cached threads of the launch now running (0 while none runs).
    pub(crate) fn launch_fills(&self) -> u64 {
        // Relaxed: as above.
        self.launch_fills.load(Ordering::Relaxed)
    }

    fn cached_thread_enters(&self) {
        // Relaxed: runs of one device's cached launches do not overlap; the count only says
        // when the last of a launch's threads left.
        self.cached_threads.fetch_add(1, Ordering::Relaxed);
    }

    fn cached_thread_leaves(&self) {
        // Relaxed: as above.
        if self.cached_threads.fetch_sub(1, Ordering::Relaxed) == 1 {
            // Relaxed: as above.
            self.launch_fills.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn snapshot(&self) -> CacheStats {
        // Relaxed: statistics (see `add`).
        let g = |c: C| self.c[c as usize].load(Ordering::Relaxed);
        CacheStats {
            line_fills: g(C::Fill),
            hits: g(C::Hit),
            cached_stores: g(C::Store),
            writebacks: g(C::Writeback),
            invalidations: g(C::Invalidate),
            ignored_ops: g(C::Ignored),
            uncached_accesses: g(C::Uncached),
        }
    }
}

struct Line {
    bytes: [u8; CACHE_LINE_BYTES as usize],
    dirty: bool,
}

/// The calling thread's view of memory for the launch it runs.
struct ThreadCache {
    device: Device,
    el0_maintenance: bool,
    lines: HashMap<u64, Line>,
    order: VecDeque<u64>,
}

thread_local! {
    static THREAD: RefCell<Option<(Reach, Option<ThreadCache>)>> = const { RefCell::new(None) };
    /// The host addresses of the lines this launch's thread has reached through the services,
    /// so a poll does not take the device allocator's lock each time. Valid for the launch: the
    /// host frees a run's memory only after its threads returned (the `DeviceOps::translate`
    /// contract), and the map is cleared when the launch ends.
    static LINE_PTRS: RefCell<HashMap<u64, usize>> = RefCell::new(HashMap::new());
}

/// Sets the calling thread's reach for one launch; on drop forgets its lines (the next kernel
/// on the thread starts cold).
pub(crate) struct ReachGuard(Option<Device>);

impl ReachGuard {
    pub(crate) fn enter(device: &Device, reach: Reach) -> ReachGuard {
        let cached = matches!(reach, Reach::Cached { .. });
        if cached {
            counters(device).cached_thread_enters();
        }
        let cache = match reach {
            Reach::Cached { el0_maintenance } => Some(ThreadCache {
                device: device.clone(),
                el0_maintenance,
                lines: HashMap::new(),
                order: VecDeque::new(),
            }),
            Reach::Coherent | Reach::Uncached => None,
        };
        THREAD.with(|t| *t.borrow_mut() = Some((reach, cache)));
        ReachGuard(cached.then(|| device.clone()))
    }
}

impl Drop for ReachGuard {
    fn drop(&mut self) {
        THREAD.with(|t| t.borrow_mut().take());
        LINE_PTRS.with(|m| m.borrow_mut().clear());
        if let Some(d) = &self.0 {
            counters(d).cached_thread_leaves();
        }
    }
}

/// The calling thread's reach: [`Reach::Coherent`] outside an OS launch (AICore workers, host
/// threads) and on the main cluster.
fn reach() -> Reach {
    THREAD.with(|t| t.borrow().as_ref().map_or(Reach::Coherent, |(r, _)| *r))
}

fn counters(device: &Device) -> &CacheCounters {
    device.0.aicpu_os.cache_counters()
}

/// The word at `addr` (4 or 8 bytes, naturally aligned), as memory holds it.
fn word(device: &Device, addr: u64, size: u32) -> Result<*mut u8, i32> {
    if !(size == 4 || size == 8) {
        return Err(STATUS_INVALID_ARGUMENT);
    }
    if addr % u64::from(size) != 0 {
        return Err(STATUS_BAD_ADDRESS);
    }
    let in_launch = THREAD.with(|t| t.borrow().is_some());
    if !in_launch {
        return device.translate(DevicePtr(addr), u64::from(size)).map_err(|_| STATUS_BAD_ADDRESS);
    }
    let (line, off) = split(addr);
    if let Some(p) = LINE_PTRS.with(|m| m.borrow().get(&line).copied()) {
        // SAFETY: `p` is the translated start of this line (below), inside one live allocation
        // for the rest of the launch; `off + size <= 64` (natural alignment).
        return Ok(unsafe { (p as *mut u8).add(off) });
    }
    // Allocations are 64-byte aligned and sized in whole lines: a line with one valid byte lies
    // inside that allocation.
    let p = device.translate(DevicePtr(line), CACHE_LINE_BYTES).map_err(|_| STATUS_BAD_ADDRESS)?;
    LINE_PTRS.with(|m| m.borrow_mut().insert(line, p as usize));
    // SAFETY: as above.
    Ok(unsafe { p.add(off) })
}

/// The order of a direct load of `kind`: Acquire when asked (it pairs with the writer's Release
/// store, an AICore report), else Relaxed.
fn load_order(kind: u32) -> Ordering {
    if kind == MEM_LOAD_ACQUIRE {
        Ordering::Acquire
    } else {
        Ordering::Relaxed
    }
}

/// The order of a direct store of `kind`: Release when asked (it pairs with the reader's Acquire
/// load), else Relaxed.
fn store_order(kind: u32) -> Ordering {
    if kind == MEM_STORE_RELEASE {
        Ordering::Release
    } else {
        Ordering::Relaxed
    }
}

fn direct_load(p: *mut u8, size: u32, kind: u32) -> u64 {
    let order = load_order(kind);
    if size == 8 {
        // SAFETY: `word` checked 8 aligned bytes inside one live allocation; every access to
        // device memory is atomic.
        unsafe { AtomicU64::from_ptr(p.cast()) }.load(order)
    } else {
        // SAFETY: as above, 4 aligned bytes.
        u64::from(unsafe { AtomicU32::from_ptr(p.cast()) }.load(order))
    }
}

fn direct_store(p: *mut u8, size: u32, value: u64, kind: u32) {
    let order = store_order(kind);
    if size == 8 {
        // SAFETY: as in `direct_load`.
        unsafe { AtomicU64::from_ptr(p.cast()) }.store(value, order);
    } else {
        // SAFETY: as in `direct_load`, 4 aligned bytes.
        unsafe { AtomicU32::from_ptr(p.cast()) }.store(value as u32, order);
    }
}

impl ThreadCache {
    /// The 8 words of the line at `line` as memory holds them.
    fn fetch(&self, line: u64) -> Option<[u8; CACHE_LINE_BYTES as usize]> {
        let p = self.device.translate(DevicePtr(line), CACHE_LINE_BYTES).ok()?;
        let mut b = [0u8; CACHE_LINE_BYTES as usize];
        for (i, w) in b.chunks_exact_mut(8).enumerate() {
            // SAFETY: allocations are 64-byte aligned and sized in whole lines, so the line lies
            // inside the allocation `translate` checked; device memory is accessed atomically.
            let a = unsafe { AtomicU64::from_ptr(p.add(8 * i).cast()) };
            // Acquire: pairs with AICore's Release stores (its report), so a fill that sees
            // `aicore_done` also sees the fields written before it.
            w.copy_from_slice(&a.load(Ordering::Acquire).to_le_bytes());
        }
        Some(b)
    }

    /// The cached line at `line`, filled on a miss (evicting the oldest line when full).
    fn line(&mut self, line: u64, load: bool) -> Option<&mut Line> {
        if self.lines.contains_key(&line) {
            if load {
                counters(&self.device).add(C::Hit);
            }
        } else {
            let bytes = self.fetch(line)?;
            if self.lines.len() >= LINES_PER_THREAD {
                if let Some(old) = self.order.pop_front() {
                    self.lines.remove(&old);
                }
            }
            counters(&self.device).add(C::Fill);
            self.lines.insert(line, Line { bytes, dirty: false });
            self.order.push_back(line);
        }
        self.lines.get_mut(&line)
    }

    /// Writes the whole line back when it is dirty: every field on it, stale or not.
    fn write_back(&mut self, line: u64) {
        let Some(l) = self.lines.get_mut(&line) else { return };
        if !l.dirty {
            return;
        }
        l.dirty = false;
        let Ok(p) = self.device.translate(DevicePtr(line), CACHE_LINE_BYTES) else { return };
        for (i, w) in l.bytes.chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            // SAFETY: as in `fetch`.
            let a = unsafe { AtomicU64::from_ptr(p.add(8 * i).cast()) };
            // Release: the written-back line is published like a release store, so a reader
            // that acquires a register written after it sees the whole line.
            a.store(v, Ordering::Release);
        }
        counters(&self.device).add(C::Writeback);
    }

    fn invalidate(&mut self, line: u64) {
        if self.lines.remove(&line).is_some() {
            self.order.retain(|&a| a != line);
            counters(&self.device).add(C::Invalidate);
        }
    }
}

fn split(addr: u64) -> (u64, usize) {
    (addr & !(CACHE_LINE_BYTES - 1), (addr % CACHE_LINE_BYTES) as usize)
}

/// The `mem_load` service for the calling thread.
pub(crate) fn mem_load(device: &Device, addr: u64, size: u32, kind: u32) -> Result<u64, i32> {
    let p = word(device, addr, size)?;
    match reach() {
        Reach::Coherent => Ok(direct_load(p, size, kind)),
        Reach::Uncached => {
            counters(device).add(C::Uncached);
            Ok(direct_load(p, size, kind))
        }
        Reach::Cached { .. } => THREAD.with(|t| {
            let mut t = t.borrow_mut();
            let cache = t.as_mut().and_then(|(_, c)| c.as_mut()).ok_or(STATUS_BAD_ADDRESS)?;
            let (line, off) = split(addr);
            // The kind changes nothing: volatile and acquire loads read the cached line too.
            let l = cache.line(line, true).ok_or(STATUS_BAD_ADDRESS)?;
            let mut v = [0u8; 8];
            v[..size as usize].copy_from_slice(&l.bytes[off..off + size as usize]);
            Ok(u64::from_le_bytes(v))
        }),
    }
}

/// The `mem_store` service for the calling thread.
pub(crate) fn mem_store(device: &Device, addr: u64, size: u32, value: u64, kind: u32) -> i32 {
    let p = match word(device, addr, size) {
        Ok(p) => p,
        Err(s) => return s,
    };
    match reach() {
        Reach::Coherent => direct_store(p, size, value, kind),
        Reach::Uncached => {
            counters(device).add(C::Uncached);
            direct_store(p, size, value, kind);
        }
        Reach::Cached { .. } => {
            return THREAD.with(|t| {
                let mut t = t.borrow_mut();
                let Some(cache) = t.as_mut().and_then(|(_, c)| c.as_mut()) else {
                    return STATUS_BAD_ADDRESS;
                };
                let (line, off) = split(addr);
                let Some(l) = cache.line(line, false) else { return STATUS_BAD_ADDRESS };
                l.bytes[off..off + size as usize]
                    .copy_from_slice(&value.to_le_bytes()[..size as usize]);
                l.dirty = true;
                counters(&cache.device).add(C::Store);
                direct_store(p, size, value, kind);
                STATUS_OK
            })
        }
    }
    STATUS_OK
}

/// The `cache_op` service for the calling thread.
pub(crate) fn cache_op(device: &Device, addr: u64, op: u32) -> i32 {
    if op != CACHE_OP_CIVAC && op != CACHE_OP_IVAC {
        return STATUS_INVALID_ARGUMENT;
    }
    if device.translate(DevicePtr(addr), 1).is_err() {
        return STATUS_BAD_ADDRESS;
    }
    if !matches!(reach(), Reach::Cached { .. }) {
        // Coherent or non-cacheable: the instruction has nothing to do.
        return STATUS_OK;
    }
    THREAD.with(|t| {
        let mut t = t.borrow_mut();
        let Some(cache) = t.as_mut().and_then(|(_, c)| c.as_mut()) else { return STATUS_OK };
        let (line, _) = split(addr);
        if op == CACHE_OP_CIVAC {
            // The clean half runs at EL0: a dirty line goes back whole, stale fields included.
            cache.write_back(line);
        }
        if cache.el0_maintenance {
            cache.invalidate(line);
        } else {
            // SCTLR_EL1.UCI = 0: the invalidate traps and the kernel's handler drops it.
            counters(&cache.device).add(C::Ignored);
        }
        STATUS_OK
    })
}

impl crate::aicpu_os::AicpuOs {
    /// Runs `entry` on the first `threads` AICPU threads of `chip` as a CPU kernel of `cluster`
    /// would run: the services' memory accesses reach memory as that cluster's do on this
    /// device ([`AicpuOs::reach`](crate::aicpu_os::AicpuOs::reach)). For tests and benches of
    /// the cache model; device programs get their cluster from the way they were loaded.
    ///
    /// # Errors
    /// An invalid thread count or an injected launch fault.
    pub fn launch_on_cluster(
        &self,
        chip: &crate::cores::Chip,
        cluster: Cluster,
        threads: u32,
        entry: crate::cores::AicpuThreadFn,
    ) -> Result<crate::cores::Completion, crate::error::DeviceError> {
        let (reach, device) = (self.reach(cluster), self.device().clone());
        chip.launch_aicpu(
            threads,
            std::sync::Arc::new(move |ctx| {
                let _reach = ReachGuard::enter(&device, reach);
                entry(ctx)
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_abi::services::{MEM_LOAD_PLAIN, MEM_LOAD_VOLATILE, MEM_STORE_PLAIN};

    /// Which order a direct access takes is invisible on an x86-64 host (both orders of a load,
    /// or of a store, are one instruction) and loom cannot model atomics over device memory: the
    /// choice is checked here, as a function of the access kind.
    #[test]
    fn direct_accesses_take_acquire_and_release_exactly_when_asked() {
        assert_eq!(load_order(MEM_LOAD_ACQUIRE), Ordering::Acquire);
        assert_eq!(load_order(MEM_LOAD_PLAIN), Ordering::Relaxed);
        assert_eq!(load_order(MEM_LOAD_VOLATILE), Ordering::Relaxed);
        assert_eq!(store_order(MEM_STORE_RELEASE), Ordering::Release);
        assert_eq!(store_order(MEM_STORE_PLAIN), Ordering::Relaxed);
    }
}
