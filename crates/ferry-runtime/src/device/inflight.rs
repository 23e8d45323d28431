//! What each AICore is running, where a crash handler can read it: a per-core slot the
//! executor writes before each kernel call and clears after it.
//!
//! A real chip's core is outside the host process, and names the task it was running in its
//! exception report. On the simulated chip a core is a thread of the host process: a kernel that
//! ends the process (a NULL dereference, `abort()`, `exit()`) takes the chip with it, and the
//! slots are how the host's crash handler (`host::crash`) still names, per core, the task that
//! started and never ended. A slot is two atomic stores per kernel call; nothing reads it unless
//! the process is ending.
//!
//! # Examples
//! ```
//! use ferry_runtime::device::inflight;
//! inflight::bind(3);
//! inflight::enter(3, 0x40, 256);
//! let mut seen = Vec::new();
//! inflight::for_each_running(|core, kernel, task| seen.push((core, kernel, task)));
//! assert!(seen.contains(&(3, 256, 0x40)));
//! assert_eq!(inflight::current_core(), Some(3));
//! inflight::leave(3);
//! ```
use core::cell::Cell;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Cores a slot is kept for (cores at or above it are not tracked).
pub const MAX_TRACKED_CORES: usize = 256;
const BUSY: u64 = 1 << 63;

/// One core's slot.
#[derive(Debug)]
pub struct CoreSlot {
    /// [`BUSY`] | the kernel id while a kernel runs; 0 between kernels.
    kernel: AtomicU64,
    /// The task of the kernel running.
    task: AtomicU64,
    /// An address near the top of the core thread's stack (0: unknown).
    stack_top: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)] // the array's initialiser, one fresh slot each
const IDLE: CoreSlot =
    CoreSlot { kernel: AtomicU64::new(0), task: AtomicU64::new(0), stack_top: AtomicUsize::new(0) };
static SLOTS: [CoreSlot; MAX_TRACKED_CORES] = [IDLE; MAX_TRACKED_CORES];

thread_local! {
    /// The core the calling thread runs (`u32::MAX`: not a core's thread). Const-initialised
    /// and without a destructor: reading it is a plain load from thread-local storage, which a
    /// signal handler may do.
    static CURRENT: Cell<u32> = const { Cell::new(u32::MAX) };
}

/// Marks the calling thread as core `core`'s and notes where its stack is (the executor, once
/// before its dispatch loop).
pub fn bind(core: u32) {
    let _ = CURRENT.try_with(|c| c.set(core));
    let here = 0u8;
    if let Some(s) = SLOTS.get(core as usize) {
        // Relaxed: read only by a crash handler of this very thread, or as a hint.
        s.stack_top.store(core::ptr::addr_of!(here) as usize, Ordering::Relaxed);
    }
}

/// Core `core` starts task `task` of kernel `kernel`.
pub fn enter(core: u32, task: u64, kernel: u32) {
    if let Some(s) = SLOTS.get(core as usize) {
        // Relaxed: published by the Release store below.
        s.task.store(task, Ordering::Relaxed);
        // Release: a reader that sees the kernel word (Acquire) sees this task's id.
        s.kernel.store(BUSY | u64::from(kernel), Ordering::Release);
    }
}

/// Core `core`'s kernel returned.
pub fn leave(core: u32) {
    if let Some(s) = SLOTS.get(core as usize) {
        // Relaxed: a reader racing with the end of a kernel may see it either way.
        s.kernel.store(0, Ordering::Relaxed);
    }
}

/// Calls `f(core, kernel, task)` for each core whose kernel started and has not returned, in
/// core order. Reads atomics only: a signal handler may call it.
pub fn for_each_running(mut f: impl FnMut(u32, u32, u64)) {
    for (core, s) in SLOTS.iter().enumerate() {
        // Acquire: pairs with `enter`'s Release store; the task read next is that kernel's.
        let k = s.kernel.load(Ordering::Acquire);
        if k & BUSY != 0 {
            // Relaxed: ordered after the Acquire load above.
            f(core as u32, k as u32, s.task.load(Ordering::Relaxed));
        }
    }
}

/// The core whose thread calls this (`None` for any other thread). A signal handler may call it.
pub fn current_core() -> Option<u32> {
    CURRENT.try_with(|c| c.get()).ok().filter(|&c| c != u32::MAX)
}

/// An address near the top of core `core`'s stack, noted by [`bind`] (`None`: not bound).
pub fn stack_top(core: u32) -> Option<usize> {
    // Relaxed: see `bind`.
    SLOTS.get(core as usize).map(|s| s.stack_top.load(Ordering::Relaxed)).filter(|&t| t != 0)
}
