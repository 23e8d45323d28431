//! Property tests of the DFX queue index arithmetic against a `VecDeque` model.
//!
//! Ready queues use wrapped indices (capacity `depth − 1`); free queues use free-running `u32`
//! counters (capacity `slots`), including runs that start just below the `u32` wrap.

use std::collections::VecDeque;

use ferry_abi::dfx::{
    fq_capacity, fq_is_empty, fq_is_full, fq_len, fq_slot, rq_capacity, rq_indices_valid,
    rq_is_empty, rq_is_full, rq_len, rq_next,
};
use proptest::prelude::*;

/// A sequence of operations: `true` = push, `false` = pop.
fn ops() -> impl Strategy<Value = Vec<bool>> {
    proptest::collection::vec(any::<bool>(), 0..300)
}

proptest! {
    #[test]
    fn ready_queue_matches_model(depth in 2u32..40, start in 0u32..40, ops in ops()) {
        let start = start % depth;
        let (mut head, mut tail) = (start, start);
        let mut slots = vec![u64::MAX; depth as usize];
        let mut model = VecDeque::new();
        let mut next_val = 0u64;
        prop_assert!(rq_is_empty(head, tail));
        for push in ops {
            prop_assert!(rq_indices_valid(head, tail, depth));
            prop_assert_eq!(rq_len(head, tail, depth) as usize, model.len());
            prop_assert_eq!(rq_is_empty(head, tail), model.is_empty());
            prop_assert_eq!(rq_is_full(head, tail, depth), model.len() == rq_capacity(depth) as usize);
            if push {
                if rq_is_full(head, tail, depth) {
                    continue;
                }
                slots[tail as usize] = next_val;
                model.push_back(next_val);
                next_val += 1;
                tail = rq_next(tail, depth);
            } else if !rq_is_empty(head, tail) {
                let got = slots[head as usize];
                prop_assert_eq!(Some(got), model.pop_front());
                head = rq_next(head, depth);
            } else {
                prop_assert!(model.is_empty());
            }
        }
    }

    #[test]
    fn ready_queue_fills_to_capacity(depth in 2u32..64, start in 0u32..64) {
        let start = start % depth;
        let (head, mut tail) = (start, start);
        let mut pushed = 0;
        while !rq_is_full(head, tail, depth) {
            tail = rq_next(tail, depth);
            pushed += 1;
        }
        prop_assert_eq!(pushed, rq_capacity(depth));
        prop_assert_eq!(rq_len(head, tail, depth), depth - 1);
        prop_assert!(!rq_is_empty(head, tail));
    }

    #[test]
    fn free_queue_matches_model(
        log_slots in 0u32..4,
        start in prop_oneof![Just(u32::MAX - 20), Just(0u32), any::<u32>()],
        ops in ops(),
    ) {
        let slots = 1u32 << log_slots;
        let (mut head, mut tail) = (start, start);
        let mut ring = vec![u64::MAX; slots as usize];
        let mut model = VecDeque::new();
        let mut next_val = 0u64;
        for push in ops {
            prop_assert_eq!(fq_len(head, tail) as usize, model.len());
            prop_assert_eq!(fq_is_empty(head, tail), model.is_empty());
            prop_assert_eq!(fq_is_full(head, tail, slots), model.len() == fq_capacity(slots) as usize);
            if push {
                if fq_is_full(head, tail, slots) {
                    continue;
                }
                ring[fq_slot(tail, slots) as usize] = next_val;
                model.push_back(next_val);
                next_val += 1;
                tail = tail.wrapping_add(1);
            } else if !fq_is_empty(head, tail) {
                prop_assert_eq!(Some(ring[fq_slot(head, slots) as usize]), model.pop_front());
                head = head.wrapping_add(1);
            }
        }
    }

    #[test]
    fn free_queue_slots_stay_distinct_across_wrap(log_slots in 0u32..4, back in 0u32..16) {
        let slots = 1u32 << log_slots;
        let head = u32::MAX - back;
        // Every in-flight counter maps to a distinct slot, even across the 2^32 wrap.
        let mut seen = vec![false; slots as usize];
        for k in 0..slots {
            let s = fq_slot(head.wrapping_add(k), slots) as usize;
            prop_assert!(!seen[s]);
            seen[s] = true;
        }
        prop_assert!(fq_is_full(head, head.wrapping_add(slots), slots));
        prop_assert!(!fq_is_full(head, head.wrapping_add(slots - 1), slots));
    }
}

#[test]
fn edge_values() {
    assert_eq!(rq_capacity(2), 1);
    assert!(rq_is_full(0, 1, 2));
    assert!(rq_is_full(1, 0, 2));
    assert!(!rq_indices_valid(0, 5, 5));
    assert_eq!(rq_len(4, 1, 5), 2);
    assert_eq!(fq_len(u32::MAX, 1), 2);
    assert!(fq_is_empty(7, 7));
    assert_eq!(fq_slot(u32::MAX, 8), 7);
    assert_eq!(fq_slot(0, 8), 0);
}
