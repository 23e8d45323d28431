//! Loom model of the doorbell's sleep/ring handshake: no lost wake-up.
//!
//! loom's `Condvar::wait_timeout` never times out, so a waiter that parks and is never notified
//! shows up as a deadlock. Run with
//! `RUSTFLAGS="--cfg ferry_loom" cargo test -p ferry-sim --release --test loom_doorbell`.
#![cfg(ferry_loom)]

mod loom_support;

use ferry_sim::wait::Doorbell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use std::time::Duration;

/// `Doorbell::wait_until`'s loop without its spin and yield phases: check, then park unless the
/// condition holds once registered.
fn wait_for(bell: &Doorbell, count: &AtomicUsize, target: usize) {
    // Acquire: pairs with the Release increment before each `ring`.
    let mut reached = || count.load(Ordering::Acquire) >= target;
    while !reached() {
        if bell.park_unless(&mut reached, Duration::from_secs(3600)) {
            return;
        }
    }
}

/// One model of this file: at most 5,000 branch points per execution.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    loom_support::model(name, 5_000, f);
}

#[test]
fn loom_doorbell_one_waiter_one_ringer() {
    model("loom_doorbell_one_waiter_one_ringer", || {
        let bell = Arc::new(Doorbell::new());
        let count = Arc::new(AtomicUsize::new(0));
        let (b, c) = (bell.clone(), count.clone());
        let t = loom::thread::spawn(move || {
            // Release: publishes the state change to the waiter's Acquire load.
            c.fetch_add(1, Ordering::Release);
            b.ring();
        });
        wait_for(&bell, &count, 1);
        t.join().unwrap();
    });
}

#[test]
fn loom_doorbell_two_waiters_two_rings() {
    model("loom_doorbell_two_waiters_two_rings", || {
        let bell = Arc::new(Doorbell::new());
        let count = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (b, c) = (bell.clone(), count.clone());
                loom::thread::spawn(move || wait_for(&b, &c, 2))
            })
            .collect();
        for _ in 0..2 {
            // Release: as above.
            count.fetch_add(1, Ordering::Release);
            bell.ring();
        }
        for w in waiters {
            w.join().unwrap();
        }
    });
}
