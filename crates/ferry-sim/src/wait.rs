//! Waiting without burning a core, and without handing the CPU to another process: spin
//! briefly, yield while the CPUs are ours, then park until a [`Doorbell`] rings.
//!
//! Every wait in the simulated chip goes through [`Doorbell::wait_until`]: it first polls the
//! condition while spinning ([`spin_steps`]: a few microseconds where the host has CPUs to spare,
//! a single `pause` where it does not), then while yielding the CPU ([`YIELDS`] times), then
//! parks on a futex until the bell rings or the park timeout passes. A writer that makes a
//! condition true calls [`Doorbell::ring`]; when nobody is parked, `ring` costs one fence and one
//! atomic load and writes nothing shared, so it is cheap enough for hot paths.
//!
//! # Waits on a busy machine
//!
//! A yield is cheap only while the threads it hands the CPU to are the chip's own: on a small
//! machine the side that will ring is usually runnable but not running, and a yield lets it run
//! for the price of a system call. Beside a CPU-bound process of equal priority a yield hands
//! that process a whole scheduler slice (and the kernel moves the yielder's deadline back), so a
//! run of tens of thousands of hand-offs slows thirtyfold. A woken sleeper is treated the other
//! way round: the kernel lets it preempt a thread that has used more than its share.
//!
//! So the waits of this process share one [`YieldGate`] (from `ferry-wait`, which the DFX
//! engine's waits consult too): a yield that kept its thread off the CPU for [`CONTENDED_YIELD`]
//! or longer (another process held it) closes the gate for [`CONTENDED_HOLD`]; while it is
//! closed no wait yields: each spins for [`SPIN_STEPS`] (the other side is then often running on
//! another CPU) and parks. The first yield after the hold probes again.
//!
//! # Examples
//! ```
//! use ferry_sim::wait::Doorbell;
//! use std::sync::{Arc, atomic::{AtomicBool, Ordering}};
//! use std::time::Duration;
//!
//! let bell = Arc::new(Doorbell::new());
//! let flag = Arc::new(AtomicBool::new(false));
//! let (b, f) = (bell.clone(), flag.clone());
//! let t = std::thread::spawn(move || {
//!     f.store(true, Ordering::Release);
//!     b.ring();
//! });
//! assert!(bell.wait_until(|| flag.load(Ordering::Acquire), Some(Duration::from_secs(10))));
//! t.join().unwrap();
//! ```
#[cfg(ferry_loom)]
use crate::sync::lock_loom as lock;
#[cfg(ferry_loom)]
use loom::sync::{
    atomic::{fence, AtomicU32, AtomicUsize},
    Condvar, Mutex,
};
use std::sync::atomic::Ordering;
#[cfg(not(ferry_loom))]
use std::sync::atomic::{fence, AtomicU32, AtomicUsize};
use std::time::{Duration, Instant};

/// Longest single park: a parked waiter re-checks its condition at least this often, so a
/// condition that changes without a ring (e.g. a deadline) is still noticed. Long enough that an
/// idle waiter costs well under 0.1% of a core.
pub const MAX_PARK: Duration = Duration::from_millis(50);

/// Spinning polls of a wait before it yields, on a machine with CPUs to spare
/// ([`SPARE_CPUS`] or more): the `k`-th spins `2^k` times (`1 + 2 + … + 64` `pause`s in all, a
/// few microseconds), for the hand-offs that complete while the other side is still on a CPU.
pub const SPIN_STEPS: u32 = 7;

/// Spinning polls of a wait before it yields on a machine with fewer than [`SPARE_CPUS`] CPUs:
/// one `pause`. There the chip's two dozen threads share two or four CPUs, the side that will
/// ring is almost never running while we spin, and every spin is CPU time taken from it. On 2
/// cores (interleaved rounds of the 50,000-task storm): 7 steps 66-71 ms, 1 step 57-64 ms; with
/// all five DFX subsystems 131-141 ms vs 102-108 ms, because work added to one chip thread
/// (a DFX record, a payload copy) no longer waits behind the spins of two dozen others.
pub const SMALL_MACHINE_SPIN_STEPS: u32 = 1;

/// CPUs from which the host counts as having CPUs to spare for spinning waiters.
pub const SPARE_CPUS: usize = 8;

/// The spin budget of every wait in this process: [`spin_steps_for`] the CPUs available to it.
/// Read once.
pub fn spin_steps() -> u32 {
    #[cfg(not(ferry_loom))]
    {
        static STEPS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        *STEPS.get_or_init(|| {
            spin_steps_for(std::thread::available_parallelism().ok().map(|n| n.get()))
        })
    }
    #[cfg(ferry_loom)]
    {
        SMALL_MACHINE_SPIN_STEPS
    }
}

/// Polls of a wait that each yield the CPU first (`sched_yield`), after the spins and before it
/// parks, while the [`YieldGate`] is open. The chip runs two dozen threads on machines with two
/// cores, where the thread that will ring is usually runnable but not running: a yield hands it
/// the CPU for the price of a system call, where parking costs a futex sleep and wake-up (on a
/// virtual machine, an inter-processor interrupt). On 2 cores the 50,000-task storm runs at
/// about the same speed either way when the CPUs are ours; parking wins by far when they are not
/// (see the module docs). A wait with nobody else runnable costs its yields' system calls
/// (~10-20 µs) before it parks.
pub const YIELDS: u32 = 16;

pub use ferry_wait::{YieldGate, CONTENDED_HOLD, CONTENDED_YIELD};

/// The spin budget on a machine with `cpus` CPUs (`None`: unknown): [`SPIN_STEPS`] from
/// [`SPARE_CPUS`] on, else [`SMALL_MACHINE_SPIN_STEPS`].
pub fn spin_steps_for(cpus: Option<usize>) -> u32 {
    match cpus {
        Some(n) if n >= SPARE_CPUS => SPIN_STEPS,
        _ => SMALL_MACHINE_SPIN_STEPS,
    }
}

/// A wake-up point: writers ring it after changing shared state, waiters park on it.
///
/// Ringing costs one fence and one load while nobody is registered (the common case: most waits
/// end in their spin or yield phase); a ring that finds a registered waiter moves the bell's
/// epoch on, and only one that finds a waiter asleep (or deciding to sleep) makes the futex wake
/// system call. A bell rung by two dozen threads therefore shares no written cache line between
/// them. A waiter registers first, then re-checks its condition, then sleeps on the epoch word
/// only if no ring has moved it since it registered (the kernel compares the word atomically
/// with the sleep). Under loom the futex is modelled by a mutex and condition variable.
///
/// Its sleep/ring handshake is model-checked by loom (`tests/loom_doorbell.rs`): a waiter that
/// decided to park is always woken by a ring that follows its state change.
#[derive(Debug)]
pub struct Doorbell {
    /// Rings that found a waiter registered; parked waiters sleep on this word (a futex).
    epoch: AtomicU32,
    /// Waiters between registration and the end of their park.
    waiters: AtomicUsize,
    /// Waiters that decided to sleep since the last ring that woke sleepers (a ring clears it).
    sleepers: AtomicUsize,
    /// The futex's model under loom: a waiter sleeps on `cv` while `epoch` still holds its key.
    #[cfg(ferry_loom)]
    mutex: Mutex<()>,
    #[cfg(ferry_loom)]
    cv: Condvar,
}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

impl Doorbell {
    /// A new bell with nobody waiting.
    pub fn new() -> Self {
        Self {
            epoch: AtomicU32::new(0),
            waiters: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            #[cfg(ferry_loom)]
            mutex: Mutex::new(()),
            #[cfg(ferry_loom)]
            cv: Condvar::new(),
        }
    }

    /// Waiters registered on the bell now (from registration to the end of their park): the
    /// state a test waits for to know a thread is parked here, rather than assuming it is.
    pub fn waiters(&self) -> usize {
        // Relaxed: a snapshot for observation; no memory is published through it.
        self.waiters.load(Ordering::Relaxed)
    }

    /// Wakes every parked waiter so it re-checks its condition.
    ///
    /// Call it after the state change the waiters look for (a store to an atomic, or a mutex
    /// released, that the waiters' condition reads).
    pub fn ring(&self) {
        // SeqCst fence: Dekker pair with the fence in `park_unless`, between the caller's state
        // change (before this fence) and the load of `waiters` (after it). Either this fence
        // comes first in the single total order, and the waiter's condition check after its
        // fence sees the state change (it does not sleep), or the waiter's fence comes first
        // and the load below sees its registration (we wake it). loom checks this in
        // tests/loom_doorbell.rs (it needs fences here: it does not model SeqCst accesses alone
        // as a total order).
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above.
        if self.waiters.load(Ordering::Relaxed) != 0 {
            // SeqCst (at least Release: a waiter whose key read this increment, Acquire, sees
            // the state change made before the ring). A waiter that read its key before it
            // finds the word moved when it goes to sleep (the futex compares it atomically with
            // the sleep), or is asleep and is woken below.
            self.epoch.fetch_add(1, Ordering::SeqCst);
            // SeqCst (with the increment above, against the sleeper's SeqCst increment before
            // its futex compare): either this swap sees the sleeper, and the wake below reaches
            // it (asleep, or about to compare against the moved word), or the sleeper's
            // increment comes later in the total order, and so does its compare, which then
            // sees the moved word and does not sleep. A sleeper woken by another ring, or one
            // that timed out, leaves its count behind: one wake for nobody, then the swap
            // clears it. Only rings that find a sleeper make the wake system call, not every
            // ring that races a waiter's condition check.
            if self.sleepers.swap(0, Ordering::SeqCst) != 0 {
                self.wake_all();
            }
        }
    }

    /// Waits until `cond()` is true; `None` timeout waits for ever. Returns the final value of
    /// `cond()`: `false` only when the timeout passed first.
    pub fn wait_until(&self, mut cond: impl FnMut() -> bool, timeout: Option<Duration>) -> bool {
        // Only a timed wait reads the clock up front: an untimed one (an AICore waiting for its
        // next dispatch) would pay a clock read per wait for nothing.
        let start = timeout.map(|_| Instant::now());
        let mut yields = if cfg!(ferry_loom) { 0 } else { YIELDS };
        let mut spins = spin_steps();
        if !ferry_wait::may_yield() {
            (spins, yields) = (SPIN_STEPS, 0);
        }
        let mut step = 0u32;
        loop {
            if cond() {
                return true;
            }
            // The spin steps after the first read no clock (a timed wait overruns its timeout
            // by at most the spin, a few microseconds): on a busy machine the spin is where a
            // scheduler's timed waits spend their time, and a clock read costs as much as a
            // `pause`.
            let mut remaining = MAX_PARK;
            if let (Some(t), Some(s), true) = (timeout, start, step == 0 || step >= spins) {
                match t.checked_sub(s.elapsed()) {
                    Some(r) if !r.is_zero() => remaining = r,
                    _ => return cond(),
                }
            }
            if step < spins {
                for _ in 0..1u32 << step {
                    std::hint::spin_loop();
                }
                step += 1;
                continue;
            }
            if step < spins + yields {
                if ferry_wait::yield_measured() >= CONTENDED_YIELD {
                    // Another process holds the CPU: park from now on.
                    yields = 0;
                }
                step += 1;
                continue;
            }
            if self.park_unless(&mut cond, remaining.min(MAX_PARK)) {
                return true;
            }
        }
    }

    /// Parks until a ring or `timeout`, unless `cond()` holds once this waiter is registered
    /// (then returns `true` at once; `false` after a park: re-check the condition). A ring
    /// that follows the state change `cond` looks for, from any point before or during this
    /// call, ends the park.
    ///
    /// `cond` runs without any lock of the bell's held, so it may take locks of its own that a
    /// ringer holds while it rings.
    pub fn park_unless(&self, cond: &mut impl FnMut() -> bool, timeout: Duration) -> bool {
        // Relaxed: ordered by the fence below.
        self.waiters.fetch_add(1, Ordering::Relaxed);
        // SeqCst fence: Dekker pair with the fence in `ring` (see there).
        fence(Ordering::SeqCst);
        // Acquire: pairs with the Release increment in `ring`: a key that includes a ring also
        // shows the state change made before it.
        let key = self.epoch.load(Ordering::Acquire);
        let ready = cond();
        if !ready {
            // SeqCst: pairs with `ring`'s increment and swap (see there).
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            self.sleep_while(key, timeout);
        }
        // Relaxed: only `ring`'s decision to wake depends on this count, and a stale non-zero
        // value only costs one spurious wake.
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        ready
    }

    /// Sleeps until woken or `timeout`, unless `epoch` no longer holds `key` (checked atomically
    /// with going to sleep, so a ring between the caller's key and this call is not missed).
    #[cfg(not(ferry_loom))]
    fn sleep_while(&self, key: u32, timeout: Duration) {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: FUTEX_WAIT reads the aligned 32-bit word `epoch` points at, which lives as
        // long as `self` (borrowed for the call); `ts` is a valid relative timeout. Any result
        // (woken, EAGAIN because the word moved, ETIMEDOUT, EINTR) sends the caller back to
        // its condition, so the return value carries nothing to act on.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.epoch.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                key,
                &ts as *const libc::timespec,
            );
        }
    }

    /// Wakes every thread asleep in [`sleep_while`](Self::sleep_while).
    #[cfg(not(ferry_loom))]
    fn wake_all(&self) {
        // SAFETY: FUTEX_WAKE only uses the word's address as a key; it reads no memory.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.epoch.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX,
            );
        }
    }

    /// The futex's model: the word is compared under the mutex that a wake takes.
    #[cfg(ferry_loom)]
    fn sleep_while(&self, key: u32, timeout: Duration) {
        let g = lock(&self.mutex);
        // Relaxed: the mutex orders it against the wake that follows `ring`'s increment.
        if self.epoch.load(Ordering::Relaxed) == key {
            let _ = self.cv.wait_timeout(g, timeout);
        }
    }

    #[cfg(ferry_loom)]
    fn wake_all(&self) {
        let _g = lock(&self.mutex);
        self.cv.notify_all();
    }
}

#[cfg(all(test, not(ferry_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn waits_spin_only_where_cpus_are_to_spare() {
        let _bound = ferry_watchdog::bound("the other thread's wake-up");
        assert_eq!(SMALL_MACHINE_SPIN_STEPS, 1, "one pause: no spin phase to speak of");
        for cpus in [None, Some(1), Some(2), Some(4), Some(SPARE_CPUS - 1)] {
            assert_eq!(spin_steps_for(cpus), SMALL_MACHINE_SPIN_STEPS, "{cpus:?}");
        }
        for cpus in [SPARE_CPUS, 16, 192] {
            assert_eq!(spin_steps_for(Some(cpus)), SPIN_STEPS, "{cpus}");
        }
        let here = std::thread::available_parallelism().ok().map(|n| n.get());
        assert_eq!(spin_steps(), spin_steps_for(here), "this process follows the rule");
    }

    #[test]
    fn times_out_when_nobody_rings() {
        let _bound = ferry_watchdog::bound("the other thread's wake-up");
        let bell = Doorbell::new();
        assert!(!bell.wait_until(|| false, Some(Duration::from_millis(5))));
    }

    #[test]
    fn ring_wakes_a_parked_waiter() {
        let _bound = ferry_watchdog::bound("the other thread's wake-up");
        for _ in 0..20 {
            let bell = Arc::new(Doorbell::new());
            let flag = Arc::new(AtomicBool::new(false));
            let (b, f) = (bell.clone(), flag.clone());
            let t = std::thread::spawn(move || {
                // The waiter's registration (it has parked or is about to): the ring below
                // must reach it, whether it is asleep yet or not.
                // Relaxed: a progress hint; the doorbell's own fences order the hand-off.
                while b.waiters.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                    std::thread::yield_now();
                }
                // Release: pairs with the Acquire load in the waiter's condition.
                f.store(true, Ordering::Release);
                b.ring();
            });
            // Acquire: pairs with the Release store above. A lost wake-up leaves the waiter
            // asleep until its 120 s park timeout; the hang guard names it.
            let t0 = std::time::Instant::now();
            let mut cond = || flag.load(Ordering::Acquire);
            while !cond() {
                if bell.park_unless(&mut cond, Duration::from_secs(120)) {
                    break;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "hang guard: the ring did not wake the parked waiter"
                );
            }
            t.join().unwrap();
        }
    }
}
