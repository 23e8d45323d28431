//! The device sys counter: cycles at the arch frequency, from real time or from a virtual clock.
//!
//! A [`VirtualClock`] only moves when a test advances it, so a 30-second DFX budget is testable in
//! microseconds: the test advances the clock past the budget and every waiter that watches it
//! (through [`DeviceClock::bell`]) wakes and sees its deadline expired.
//!
//! # Examples
//! ```
//! use ferry_sim::clock::{DeviceClock, VirtualClock};
//! use ferry_abi::arch::A2A3;
//!
//! let vclock = VirtualClock::new();
//! let clock = DeviceClock::virtual_clock(&A2A3, vclock.clone());
//! let deadline = clock.deadline_after(A2A3.dfx_backpressure_budget_cycles);
//! assert!(!deadline.is_expired());
//! vclock.advance(A2A3.dfx_backpressure_budget_cycles);
//! assert!(deadline.is_expired());
//! ```
use crate::sync::{Arc, AtomicU64, Ordering};
use crate::wait::Doorbell;
use ferry_abi::arch::ArchProfile;

/// A hand-driven cycle counter shared by every device clock built on it.
#[derive(Clone, Debug, Default)]
pub struct VirtualClock(Arc<VirtualInner>);

#[derive(Debug, Default)]
struct VirtualInner {
    cycles: AtomicU64,
    bell: Doorbell,
}

impl VirtualClock {
    /// A virtual clock at cycle 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `cycles` and wakes everyone watching it.
    pub fn advance(&self, cycles: u64) {
        // Release: publishes the new time to `now`'s Acquire load in waiting threads.
        self.0.cycles.fetch_add(cycles, Ordering::Release);
        self.0.bell.ring();
    }

    /// The current cycle count.
    pub fn now(&self) -> u64 {
        // Acquire: pairs with the Release in `advance`.
        self.0.cycles.load(Ordering::Acquire)
    }
}

/// Nanoseconds per cycle of a frequency that divides 1 GHz exactly, else 0.
fn ns_per_cycle(hz: u64) -> u64 {
    if hz > 0 && 1_000_000_000 % hz == 0 {
        1_000_000_000 / hz
    } else {
        0
    }
}

/// Cycles of a `hz` clock in `ns` nanoseconds; `ns_per_cycle` is [`ns_per_cycle`]`(hz)`. Both
/// arch clocks divide 1 GHz (a2a3: 20 ns per cycle, a5: 1 ns), so the common case is no 128-bit
/// multiply and divide, and for those two not even a 64-bit division (a constant divisor
/// compiles to a multiply): this runs on every DFX timestamp and every timed wait.
fn cycles_of_ns(ns: u128, hz: u64, ns_per_cycle: u64) -> u64 {
    match (u64::try_from(ns), ns_per_cycle) {
        (Ok(ns), 1) => ns,
        (Ok(ns), 20) => ns / 20,
        (Ok(ns), d) if d > 0 => ns / d,
        _ => (ns * u128::from(hz) / 1_000_000_000) as u64,
    }
}

#[derive(Clone, Debug)]
enum Source {
    /// Host monotonic time since `epoch_ns` (a [`monotonic_ns`] reading).
    Real {
        epoch_ns: u64,
    },
    Virtual(VirtualClock),
}

/// Nanoseconds of the host's monotonic clock (`CLOCK_MONOTONIC`, what [`std::time::Instant`] reads on
/// Linux), read with one `clock_gettime` and integer arithmetic: the device clock is read several
/// times per task with DFX on (each timestamp, on the AICPU and AICore threads alike), where
/// `Instant::elapsed` adds a `Duration` subtraction and a 128-bit nanosecond count to the read.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC exists on every target ferry
    // builds for, so the call cannot fail (a failure would leave `ts` at 0, still no UB).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// One device's sys counter.
#[derive(Clone, Debug)]
pub struct DeviceClock {
    hz: u64,
    /// Nanoseconds per cycle when the frequency divides 1 GHz exactly, else 0.
    ns_per_cycle: u64,
    source: Source,
    real_bell: Arc<Doorbell>,
}

impl DeviceClock {
    /// A clock driven by the host's monotonic time, counting at the arch frequency from now.
    pub fn real(arch: &ArchProfile) -> Self {
        Self {
            hz: arch.clock_hz,
            ns_per_cycle: ns_per_cycle(arch.clock_hz),
            source: Source::Real { epoch_ns: monotonic_ns() },
            real_bell: Arc::default(),
        }
    }

    /// A clock that reads `clock` and only moves when it is advanced.
    pub fn virtual_clock(arch: &ArchProfile, clock: VirtualClock) -> Self {
        Self {
            hz: arch.clock_hz,
            ns_per_cycle: ns_per_cycle(arch.clock_hz),
            source: Source::Virtual(clock),
            real_bell: Arc::default(),
        }
    }

    /// Counter frequency in Hz.
    pub fn hz(&self) -> u64 {
        self.hz
    }

    /// Whether this clock is virtual.
    pub fn is_virtual(&self) -> bool {
        matches!(self.source, Source::Virtual(_))
    }

    /// The current counter value in cycles.
    pub fn now_cycles(&self) -> u64 {
        match &self.source {
            Source::Real { epoch_ns } => cycles_of_ns(
                u128::from(monotonic_ns().saturating_sub(*epoch_ns)),
                self.hz,
                self.ns_per_cycle,
            ),
            Source::Virtual(v) => v.now(),
        }
    }

    /// A bell that rings whenever a virtual clock advances (never for a real clock). Waiters that
    /// watch a deadline park on it so a test's `advance` wakes them at once.
    pub fn bell(&self) -> &Doorbell {
        match &self.source {
            Source::Real { .. } => &self.real_bell,
            Source::Virtual(v) => &v.0.bell,
        }
    }

    /// A deadline `budget` cycles from now (saturating).
    pub fn deadline_after(&self, budget: u64) -> Deadline {
        Deadline { clock: self.clone(), at: self.now_cycles().saturating_add(budget) }
    }
}

/// A point on a device clock; taken once before a wait and never re-armed.
#[derive(Clone, Debug)]
pub struct Deadline {
    clock: DeviceClock,
    at: u64,
}

impl Deadline {
    /// Whether the clock has reached the deadline.
    pub fn is_expired(&self) -> bool {
        self.clock.now_cycles() >= self.at
    }

    /// The cycle at which it expires.
    pub fn at_cycles(&self) -> u64 {
        self.at
    }

    /// Cycles left (0 once expired).
    pub fn remaining_cycles(&self) -> u64 {
        self.at.saturating_sub(self.clock.now_cycles())
    }
}

#[cfg(all(test, not(ferry_loom)))]
mod tests {
    use super::*;
    use ferry_abi::arch::{A2A3, A5};

    #[test]
    fn virtual_clock_only_moves_when_advanced() {
        let v = VirtualClock::new();
        let c = DeviceClock::virtual_clock(&A5, v.clone());
        assert!(c.is_virtual());
        assert_eq!(c.now_cycles(), 0);
        v.advance(1234);
        assert_eq!(c.now_cycles(), 1234);
    }

    #[test]
    fn real_clock_counts_at_arch_frequency() {
        let c = DeviceClock::real(&A2A3);
        let a = c.now_cycles();
        std::thread::sleep(std::time::Duration::from_millis(2));
        // 2 ms at 50 MHz is 100_000 cycles; only a lower bound is safe on a loaded machine.
        assert!(c.now_cycles() - a >= 100_000);
        assert_eq!(c.hz(), 50_000_000);
    }

    #[test]
    fn the_exact_divisor_agrees_with_the_general_conversion() {
        assert_eq!((ns_per_cycle(50_000_000), ns_per_cycle(1_000_000_000)), (20, 1));
        assert_eq!(ns_per_cycle(3_000_000), 0, "3 MHz does not divide 1 GHz");
        // a2a3, a5, one that divides 1 GHz by something else (8 ns), one that does not.
        for hz in [50_000_000u64, 1_000_000_000, 125_000_000, 3_000_000] {
            for ns in [0u64, 1, 19, 20, 21, 333, 999_999_999, 1 << 50, u64::MAX] {
                let general = (u128::from(ns) * u128::from(hz) / 1_000_000_000) as u64;
                let fast = cycles_of_ns(u128::from(ns), hz, ns_per_cycle(hz));
                assert_eq!(fast, general, "{hz} Hz, {ns} ns");
            }
        }
    }

    #[test]
    fn virtual_advance_wakes_a_deadline_waiter_without_real_waiting() {
        let v = VirtualClock::new();
        let c = DeviceClock::virtual_clock(&A2A3, v.clone());
        let d = c.deadline_after(A2A3.dfx_backpressure_budget_cycles);
        let c2 = c.clone();
        let t = std::thread::spawn(move || c2.bell().wait_until(|| d.is_expired(), None));
        v.advance(A2A3.dfx_backpressure_budget_cycles - 1);
        v.advance(1);
        assert!(t.join().unwrap());
    }
}
