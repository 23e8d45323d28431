//! Host-only bounded SPSC rings (drain → collector, collector → replenish, replenish → drain).
//!
//! Split at construction into a producer half and a consumer half; free-running indices on
//! separate cache lines, each side caching the other's index. Items are small `Copy` handles. Every ring in the transport is
//! sized to hold every buffer of the region, so a push can never fail at runtime.

use core::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{Arc, UnsafeCell};

struct Ring<T> {
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
}

// SAFETY: a slot is accessed by the producer only between its check against `head` and its
// `Release` store of `tail`, and by the consumer only between its `Acquire` load of `tail` and its
// `Release` store of `head`; those windows never overlap for one slot, so `T: Send` suffices.
unsafe impl<T: Send> Sync for Ring<T> {}
// SAFETY: moving the ring moves `T` values; `T: Send`.
unsafe impl<T: Send> Send for Ring<T> {}

/// Producing half of a ring.
pub(crate) struct Producer<T> {
    ring: Arc<Ring<T>>,
    tail: usize,
    cached_head: usize,
}

/// Consuming half of a ring.
pub(crate) struct Consumer<T> {
    ring: Arc<Ring<T>>,
    head: usize,
    cached_tail: usize,
}

/// A ring holding at least `min_capacity` items (rounded up to a power of two).
pub(crate) fn channel<T: Copy + Send>(min_capacity: usize) -> (Producer<T>, Consumer<T>) {
    let cap = min_capacity.max(1).next_power_of_two();
    let slots = (0..cap).map(|_| UnsafeCell::new(MaybeUninit::uninit())).collect();
    let ring = Arc::new(Ring {
        head: CachePadded::new(AtomicUsize::new(0)),
        tail: CachePadded::new(AtomicUsize::new(0)),
        slots,
        mask: cap - 1,
    });
    (
        Producer { ring: ring.clone(), tail: 0, cached_head: 0 },
        Consumer { ring, head: 0, cached_tail: 0 },
    )
}

impl<T: Copy + Send> Producer<T> {
    /// Appends `v`; gives it back if the ring is full.
    pub(crate) fn push(&mut self, v: T) -> Result<(), T> {
        let cap = self.ring.mask + 1;
        if self.tail.wrapping_sub(self.cached_head) >= cap {
            // Acquire: pairs with the consumer's Release store of `head` in `pop`, so its read of
            // the slot we are about to overwrite happened before.
            self.cached_head = self.ring.head.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.cached_head) >= cap {
                return Err(v);
            }
        }
        let slot = &self.ring.slots[self.tail & self.ring.mask];
        // SAFETY: the slot is free (checked against `head` above) and only this producer writes it
        // until the Release store below hands it to the consumer.
        slot.with_mut(|p| unsafe { (*p).write(v) });
        self.tail = self.tail.wrapping_add(1);
        // Release: publishes the slot write; pairs with the Acquire load of `tail` in `pop`.
        self.ring.tail.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Items in the ring as seen now (exact for the producer's own pushes).
    pub(crate) fn len(&self) -> usize {
        // Acquire: pairs with the consumer's Release store of `head`; only a count is derived.
        self.tail.wrapping_sub(self.ring.head.load(Ordering::Acquire))
    }

    /// Slots in the ring.
    pub(crate) fn capacity(&self) -> usize {
        self.ring.mask + 1
    }
}

impl<T: Copy + Send> Consumer<T> {
    /// Removes the oldest item, if any.
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.head == self.cached_tail {
            // Acquire: pairs with the producer's Release store of `tail` in `push`, making the
            // slot write visible.
            self.cached_tail = self.ring.tail.load(Ordering::Acquire);
            if self.head == self.cached_tail {
                return None;
            }
        }
        let slot = &self.ring.slots[self.head & self.ring.mask];
        // SAFETY: `head < tail`, so the producer initialised this slot and published it with its
        // Release store of `tail`; it will not write it again until our Release store of `head`.
        let v = slot.with(|p| unsafe { (*p).assume_init() });
        self.head = self.head.wrapping_add(1);
        // Release: hands the slot back; pairs with the Acquire load of `head` in `push`.
        self.ring.head.store(self.head, Ordering::Release);
        Some(v)
    }

    /// Whether the ring is empty as seen now.
    pub(crate) fn is_empty(&mut self) -> bool {
        if self.head != self.cached_tail {
            return false;
        }
        // Acquire: pairs with the Release store of `tail` in `push`.
        self.cached_tail = self.ring.tail.load(Ordering::Acquire);
        self.head == self.cached_tail
    }
}

#[cfg(all(test, not(ferry_loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_full_and_empty() {
        let _bound = ferry_watchdog::bound("the other end of the ring");
        let (mut p, mut c) = channel::<u32>(3);
        assert_eq!(p.capacity(), 4);
        for i in 0..4 {
            p.push(i).unwrap();
        }
        assert_eq!(p.push(9), Err(9));
        assert_eq!(p.len(), 4);
        assert_eq!(c.pop(), Some(0));
        p.push(4).unwrap();
        let got: Vec<_> = std::iter::from_fn(|| c.pop()).collect();
        assert_eq!(got, vec![1, 2, 3, 4]);
        assert!(c.is_empty());
    }

    #[test]
    fn cross_thread_order() {
        let _bound = ferry_watchdog::bound("the other end of the ring");
        let (mut p, mut c) = channel::<u64>(8);
        let t = std::thread::spawn(move || {
            for i in 0..10_000u64 {
                let mut v = i;
                while let Err(back) = p.push(v) {
                    v = back;
                    std::thread::yield_now();
                }
            }
        });
        let mut next = 0;
        while next < 10_000 {
            if let Some(v) = c.pop() {
                assert_eq!(v, next);
                next += 1;
            } else {
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
    }
}
