//! Synchronisation primitives, routed through one place.
//!
//! ferry-sim models hardware with ordinary host threads, mutexes and condition variables. Its one
//! lock-free protocol, the [`Doorbell`](crate::wait::Doorbell) sleep/ring handshake (a Dekker
//! pair), uses loom's types under `cfg(ferry_loom)` and is model-checked in `tests/loom_doorbell.rs`.
#![allow(unused_imports, unreachable_pub)]

pub(crate) use std::sync::{
    atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    Arc, Condvar, Mutex, MutexGuard,
};

/// Locks a mutex, recovering the data if a panicking thread poisoned it: every structure guarded
/// here stays consistent across a panic (each critical section is a single update), so a poisoned
/// lock must not take the simulated device down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// [`lock`] for loom's mutex (used by the loom-checked [`Doorbell`](crate::wait::Doorbell)).
#[cfg(ferry_loom)]
pub(crate) fn lock_loom<T>(m: &loom::sync::Mutex<T>) -> loom::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
