//! The per-device stream pool: slots of (stream, descriptor staging), optionally capped.
//!
//! `acquire`: take an idle slot; else, if uncapped or `created < cap`, reserve a creation and
//! create a stream outside the lock; else wait on the condition variable. `release` pushes the
//! slot back and wakes one waiter. A slot whose stream failed is discarded (`created -= 1`, so a
//! capped pool can refill). A gather holds one slot at a time and releases it after a bounded
//! synchronize, so waiting cannot deadlock.
//!
//! Lock rank 2 (`DevicePool::state`): held only for list/count updates, never across a device
//! call or another ferry-copy lock.
use super::gather::{GatherFragment, FRAGMENT_BYTES, MIN_STAGING_FRAGMENTS};
use ferry_backend::{BackendDevice, BackendError, DevicePtr};
use std::sync::{Condvar, Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is one update of plain counts/lists, so the data stays
    // consistent across a panic; recover it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Descriptor staging owned by one slot: pinned host descriptors plus a device buffer.
#[derive(Debug)]
pub(crate) struct Staging<D: BackendDevice> {
    device: D,
    /// Host side; `host.len() == capacity`.
    pub(crate) host: Vec<GatherFragment>,
    /// Device side (`NULL` while capacity is 0).
    pub(crate) dev: DevicePtr,
}

impl<D: BackendDevice> Staging<D> {
    fn new(device: D) -> Self {
        Self { device, host: Vec::new(), dev: DevicePtr::NULL }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.host.len()
    }

    /// Grows to at least `count` descriptors: max(2 × count, 256), or exactly `count` when
    /// `exact`. The new device buffer is allocated before the old one is freed.
    pub(crate) fn ensure(&mut self, count: usize, exact: bool) -> Result<(), BackendError> {
        if self.capacity() >= count {
            return Ok(());
        }
        let cap = if exact { count } else { (2 * count).max(MIN_STAGING_FRAGMENTS) };
        let dev = self.device.malloc((cap * FRAGMENT_BYTES) as u64)?;
        if !self.dev.is_null() {
            // The old buffer is idle: the slot's holder synchronized its stream before release.
            let _ = self.device.free(self.dev);
        }
        self.dev = dev;
        self.host.resize(cap, GatherFragment::default());
        Ok(())
    }
}

impl<D: BackendDevice> Drop for Staging<D> {
    fn drop(&mut self) {
        if !self.dev.is_null() {
            // A failed free is dropped on purpose: nothing to report to; the device is being torn down or the slot discarded.
            let _ = self.device.free(self.dev);
        }
    }
}

/// One pooled stream and the staging it owns. Field order matters: the stream drops first (its
/// worker drains and exits), so no queued kernel can read the staging after it is freed.
#[derive(Debug)]
pub(crate) struct Slot<D: BackendDevice> {
    pub(crate) stream: D::Stream,
    pub(crate) staging: Staging<D>,
}

#[derive(Debug)]
struct PoolState<D: BackendDevice> {
    idle: Vec<Slot<D>>,
    created: usize,
    cap: usize,
    waits: u64,
    peak: usize,
}

/// Snapshot of one device's pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Slots that exist (idle + held).
    pub created: usize,
    /// Idle slots.
    pub idle: usize,
    /// Cap (0 = uncapped).
    pub cap: usize,
    /// Times an acquire had to wait for a release.
    pub waits: u64,
    /// Most slots that ever existed at once.
    pub peak: usize,
}

#[derive(Debug)]
pub(crate) struct DevicePool<D: BackendDevice> {
    device: D,
    state: Mutex<PoolState<D>>,
    cv: Condvar,
}

impl<D: BackendDevice> DevicePool<D> {
    pub(crate) fn new(device: D) -> Self {
        let state = PoolState { idle: Vec::new(), created: 0, cap: 0, waits: 0, peak: 0 };
        Self { device, state: Mutex::new(state), cv: Condvar::new() }
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let s = lock(&self.state);
        PoolStats {
            created: s.created,
            idle: s.idle.len(),
            cap: s.cap,
            waits: s.waits,
            peak: s.peak,
        }
    }

    pub(crate) fn set_cap(&self, cap: usize) {
        lock(&self.state).cap = cap;
        self.cv.notify_all();
    }

    fn create(&self) -> Result<Slot<D>, BackendError> {
        match self.device.create_stream() {
            Ok(stream) => Ok(Slot { stream, staging: Staging::new(self.device.clone()) }),
            Err(e) => {
                // Undo the reservation and let a waiter try.
                lock(&self.state).created -= 1;
                self.cv.notify_one();
                Err(e)
            }
        }
    }

    fn reserve(s: &mut PoolState<D>) {
        s.created += 1;
        s.peak = s.peak.max(s.created);
    }

    /// Takes a slot, creating one if allowed, else waiting for a release.
    pub(crate) fn acquire(&self) -> Result<SlotGuard<'_, D>, BackendError> {
        let mut s = lock(&self.state);
        let mut waited = false;
        loop {
            if let Some(slot) = s.idle.pop() {
                return Ok(SlotGuard { pool: self, slot: Some(slot) });
            }
            if s.cap == 0 || s.created < s.cap {
                Self::reserve(&mut s);
                drop(s);
                return self.create().map(|slot| SlotGuard { pool: self, slot: Some(slot) });
            }
            if !waited {
                waited = true;
                s.waits += 1;
            }
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Takes `n` slots for prewarm: idle ones first, the rest created (ignoring the cap).
    pub(crate) fn take_for_prewarm(
        &self,
        n: usize,
    ) -> (Vec<SlotGuard<'_, D>>, Option<BackendError>) {
        let mut out = Vec::with_capacity(n);
        let to_create = {
            let mut s = lock(&self.state);
            while out.len() < n {
                match s.idle.pop() {
                    Some(slot) => out.push(SlotGuard { pool: self, slot: Some(slot) }),
                    None => break,
                }
            }
            let k = n - out.len();
            for _ in 0..k {
                Self::reserve(&mut s);
            }
            k
        };
        for i in 0..to_create {
            match self.create() {
                Ok(slot) => out.push(SlotGuard { pool: self, slot: Some(slot) }),
                Err(e) => {
                    // `create` undid its own reservation; undo the ones never attempted.
                    let left = to_create - i - 1;
                    lock(&self.state).created -= left;
                    return (out, Some(e));
                }
            }
        }
        (out, None)
    }

    fn release(&self, slot: Slot<D>) {
        let mut s = lock(&self.state);
        if s.cap != 0 && s.created > s.cap {
            // Surplus from before the cap was set: shrink to the cap.
            s.created -= 1;
            drop(s);
            drop(slot);
        } else {
            s.idle.push(slot);
            drop(s);
        }
        self.cv.notify_one();
    }

    fn discard(&self, slot: Slot<D>) {
        // Drop outside the lock: dropping the stream joins its worker.
        drop(slot);
        lock(&self.state).created -= 1;
        self.cv.notify_one();
    }
}

/// A held slot; returns to the pool on drop.
#[derive(Debug)]
pub(crate) struct SlotGuard<'a, D: BackendDevice> {
    pool: &'a DevicePool<D>,
    slot: Option<Slot<D>>,
}

impl<D: BackendDevice> SlotGuard<'_, D> {
    pub(crate) fn slot(&mut self) -> &mut Slot<D> {
        // Invariant: `slot` is `Some` until `discard` consumes the guard or `drop` runs.
        self.slot.as_mut().expect("slot present until the guard is consumed")
    }

    /// Drops the slot instead of returning it (its stream failed).
    pub(crate) fn discard(mut self) {
        if let Some(s) = self.slot.take() {
            self.pool.discard(s);
        }
    }
}

impl<D: BackendDevice> Drop for SlotGuard<'_, D> {
    fn drop(&mut self) {
        if let Some(s) = self.slot.take() {
            self.pool.release(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_backend::host::{HostMemoryBackend, HostMemoryDevice};
    use ferry_backend::{Backend, BackendOp};

    fn pool() -> (HostMemoryBackend, DevicePool<HostMemoryDevice>) {
        let p = HostMemoryBackend::new(1, 16 << 20).unwrap();
        let d = p.device(0).unwrap().clone();
        (p, DevicePool::new(d))
    }

    /// Runs `acquire` on another thread while `held` is held; returns whether that acquire had
    /// to wait for `held`'s release (it then counts one wait), or got a slot at once.
    fn acquire_beside(
        pool: &DevicePool<HostMemoryDevice>,
        held: SlotGuard<'_, HostMemoryDevice>,
    ) -> bool {
        std::thread::scope(|sc| {
            let t = sc.spawn(|| drop(pool.acquire().unwrap()));
            // Either the acquire returns, or it counts its wait and blocks until the release;
            // neither state depends on how the threads are scheduled.
            while !t.is_finished() && pool.stats().waits == 0 {
                std::thread::yield_now();
            }
            let waited = !t.is_finished();
            drop(held);
            t.join().unwrap();
            waited
        })
    }

    #[test]
    fn at_its_cap_an_acquire_waits_for_a_release_and_counts_the_wait_once() {
        let _bound = ferry_watchdog::bound("an acquire at the cap to count its wait");
        let (_p, pool) = pool();
        let held = pool.acquire().unwrap();
        pool.set_cap(1);
        assert!(acquire_beside(&pool, held), "the second acquire waited for the first slot");
        let s = pool.stats();
        assert_eq!((s.created, s.idle, s.cap, s.waits, s.peak), (1, 1, 1, 1, 1), "{s:?}");
    }

    #[test]
    fn a_capped_pool_below_its_cap_after_a_discard_creates_instead_of_waiting() {
        let _bound = ferry_watchdog::bound("an acquire below the cap");
        let (_p, pool) = pool();
        let (a, b) = (pool.acquire().unwrap(), pool.acquire().unwrap());
        pool.set_cap(2);
        assert_eq!((pool.stats().created, pool.stats().peak), (2, 2));
        b.discard();
        assert_eq!(pool.stats().created, 1, "a discarded slot frees its place under the cap");
        assert!(!acquire_beside(&pool, a), "below the cap an acquire creates a slot");
        let s = pool.stats();
        assert_eq!((s.created, s.idle, s.waits, s.peak), (2, 2, 0, 2), "{s:?}");
    }

    #[test]
    fn a_cap_set_below_the_slots_that_exist_shrinks_the_pool_as_they_come_back() {
        let _bound = ferry_watchdog::bound("the pooled streams' workers");
        let (_p, pool) = pool();
        let (a, b, c) = (pool.acquire().unwrap(), pool.acquire().unwrap(), pool.acquire().unwrap());
        assert_eq!((pool.stats().created, pool.stats().peak), (3, 3));
        pool.set_cap(2);
        drop(a);
        assert_eq!((pool.stats().created, pool.stats().idle), (2, 0), "surplus dropped");
        drop(b);
        drop(c);
        let s = pool.stats();
        assert_eq!((s.created, s.idle, s.cap, s.peak), (2, 2, 2, 3), "{s:?}");
    }

    #[test]
    fn a_pool_never_capped_creates_a_slot_for_every_holder_and_never_waits() {
        let _bound = ferry_watchdog::bound("the pooled streams' workers");
        let (p, pool) = pool();
        assert_eq!(pool.stats(), PoolStats::default(), "nothing exists before the first acquire");
        assert_eq!(p.device(0).unwrap().stats().streams_created, 0);
        // More holders at once than the default prewarm would allow.
        let n = crate::env::DEFAULT_PREWARM_STREAMS + 1;
        let held: Vec<_> = (0..n).map(|_| pool.acquire().unwrap()).collect();
        assert_eq!(p.device(0).unwrap().stats().streams_created, n as u64);
        drop(held);
        let s = pool.stats();
        assert_eq!((s.created, s.idle, s.cap, s.waits, s.peak), (n, n, 0, 0, n), "{s:?}");
    }

    #[test]
    fn prewarm_takes_the_idle_slots_first_and_creates_only_the_rest() {
        let _bound = ferry_watchdog::bound("the pooled streams' workers");
        let (p, pool) = pool();
        let streams = || p.device(0).unwrap().stats().streams_created;
        let held: Vec<_> = (0..3).map(|_| pool.acquire().unwrap()).collect();
        drop(held);
        let before = streams();
        let (taken, err) = pool.take_for_prewarm(2);
        assert!(err.is_none());
        assert_eq!(taken.len(), 2);
        assert_eq!((pool.stats().created, pool.stats().idle), (3, 1), "two of the idle three");
        assert_eq!(streams(), before, "no stream created while idle ones were there");
        drop(taken);
        let (taken, err) = pool.take_for_prewarm(5);
        assert!(err.is_none());
        assert_eq!(taken.len(), 5);
        assert_eq!(streams(), before + 2, "the three idle ones, then two created");
        drop(taken);
        let s = pool.stats();
        assert_eq!((s.created, s.idle, s.peak), (5, 5, 5), "{s:?}");
    }

    #[test]
    fn a_failed_creation_in_prewarm_undoes_every_reservation_it_did_not_use() {
        let _bound = ferry_watchdog::bound("the pooled streams' workers");
        let (p, pool) = pool();
        // The second of four creations fails: one slot exists, three reservations are undone.
        p.device(0).unwrap().fail_nth(BackendOp::CreateStream, 2);
        let (taken, err) = pool.take_for_prewarm(4);
        assert!(err.is_some());
        assert_eq!(taken.len(), 1);
        assert_eq!(pool.stats().created, 1, "{:?}", pool.stats());
        drop(taken);
        assert_eq!((pool.stats().created, pool.stats().idle), (1, 1));
    }
}
