//! The device sys counter: cycles at the arch frequency, from real time or from a virtual clock.
//!
//! A [`VirtualDeviceClock`] only moves when a test advances it, so a 30-second DFX budget is testable in
//! microseconds: the test advances the clock past the budget and every waiter that watches it
//! (through [`DeviceClock::bell`]) wakes and sees its deadline expired.
//!
//! # Examples
//! ```
//! use ferry_sim::clock::{DeviceClock, VirtualDeviceClock};
//! use ferry_abi::arch::A2A3;
//!
//! let vclock = VirtualDeviceClock::new();
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
pub struct VirtualDeviceClock(Arc<VirtualInner>);

#[derive(Debug, Default)]
struct VirtualInner {
    cycles: AtomicU64,
    bell: Doorbell,
}

impl VirtualDeviceClock {
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
    /// The host CPU's time-stamp counter since `epoch` (a raw read), scaled to the device
    /// frequency: `cycles = (tsc - epoch) * mult >> 32` ([`tsc`]).
    Tsc {
        epoch: u64,
        mult: u64,
    },
    Virtual(VirtualDeviceClock),
}

/// Which host counter a real [`DeviceClock`] reads (`FERRY_DEVICE_CLOCK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RealSource {
    /// The CPU's time-stamp counter where the host kernel itself keeps time with it (its
    /// clocksource is `tsc`: invariant and synchronised across CPUs), else `CLOCK_MONOTONIC`.
    /// The default.
    Auto,
    /// Always `CLOCK_MONOTONIC` (`FERRY_DEVICE_CLOCK=monotonic`).
    Monotonic,
}

impl RealSource {
    /// `FERRY_DEVICE_CLOCK` of this process: `monotonic` picks [`RealSource::Monotonic`];
    /// unset, empty or `auto` [`RealSource::Auto`]; anything else is refused with what is
    /// accepted.
    pub fn from_env() -> Result<RealSource, String> {
        match std::env::var("FERRY_DEVICE_CLOCK") {
            Err(std::env::VarError::NotPresent) => Ok(RealSource::Auto),
            Ok(v) => RealSource::parse(&v),
            Err(e) => Err(format!("FERRY_DEVICE_CLOCK: {e}")),
        }
    }

    /// A `FERRY_DEVICE_CLOCK` value (see [`from_env`](Self::from_env)).
    pub fn parse(v: &str) -> Result<RealSource, String> {
        match v {
            "" | "auto" => Ok(RealSource::Auto),
            "monotonic" => Ok(RealSource::Monotonic),
            _ => Err(format!("FERRY_DEVICE_CLOCK={v:?}: expected `auto` or `monotonic`")),
        }
    }
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

/// Orders what follows after every load this thread issued before it has completed: the
/// barrier before an ordered counter read ([`DeviceClock::now_cycles_ordered`]), the one a device
/// program issues before its own (`ferry_abi::services::order_after_loads`).
pub use ferry_abi::services::order_after_loads;

/// The host CPU's time-stamp counter as a device clock source.
///
/// A `CLOCK_MONOTONIC` read is ~24 ns here (the vDSO's ordered counter read, its sequence lock
/// and its scaling); a raw TSC read ~10 ns. With DFX on, the chip reads its clock ~8 times per
/// task (the core's receive, start and end; the scheduler's sweep and phase bounds; the
/// orchestrator's submit envelope), on the threads that are the run's critical path, so the
/// difference is a few percent of a 50,000-task storm. A device's sys counter is a cheap
/// register read on the real chip too.
///
/// Used only where the host kernel itself keeps time with the TSC (its clocksource is `tsc`):
/// the kernel chose it because the counter is invariant (constant rate, running in every power
/// state) and synchronised across CPUs, which a device clock read on many threads needs. The
/// rate is measured once per process against `CLOCK_MONOTONIC` over [`CALIBRATION`] (a few ppm,
/// the accuracy of a real device's crystal; the run's clock anchors map the two clocks anyway).
mod tsc {
    use std::sync::OnceLock;
    use std::time::Duration;

    /// How long the rate is measured for, once per process.
    pub(super) const CALIBRATION: Duration = Duration::from_millis(2);

    /// The counter's measured rate.
    #[derive(Clone, Copy, Debug)]
    pub(super) struct Rate {
        /// Counter ticks per second.
        pub(super) hz: f64,
    }

    impl Rate {
        /// The 32.32 fixed-point factor from counter ticks to cycles of a `hz` clock.
        pub(super) fn mult_for(self, hz: u64) -> u64 {
            ((hz as f64 / self.hz) * (1u64 << 32) as f64) as u64
        }
    }

    /// Device cycles from `epoch` to `tsc` at factor `mult` (0 for a read behind the epoch).
    #[inline]
    pub(super) fn cycles_since(tsc: u64, epoch: u64, mult: u64) -> u64 {
        ((u128::from(tsc.saturating_sub(epoch)) * u128::from(mult)) >> 32) as u64
    }

    /// A raw counter read (not ordered after earlier loads; see `DeviceClock::now_cycles`).
    #[inline]
    pub(super) fn read() -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `rdtsc` has no operands and touches no memory; every x86-64 CPU has it.
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
        #[cfg(not(target_arch = "x86_64"))]
        0
    }

    /// The counter's rate where it is usable as a device clock (measured on the first call),
    /// else `None`.
    pub(super) fn rate() -> Option<Rate> {
        static RATE: OnceLock<Option<Rate>> = OnceLock::new();
        *RATE.get_or_init(|| usable().then(calibrate).flatten())
    }

    /// Whether the host kernel keeps time with the TSC.
    fn usable() -> bool {
        cfg!(all(target_arch = "x86_64", target_os = "linux"))
            && std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|s| s.trim() == "tsc")
    }

    /// One (counter, monotonic ns) pair: the monotonic read bracketed by two ordered counter
    /// reads, the tightest bracket of a few tries, at its midpoint.
    fn pair() -> (u64, u64) {
        let mut best = (u64::MAX, 0, 0);
        for _ in 0..16 {
            super::order_after_loads();
            let a = read();
            let ns = super::monotonic_ns();
            super::order_after_loads();
            let b = read();
            if b >= a && b - a < best.0 {
                best = (b - a, a + (b - a) / 2, ns);
            }
        }
        (best.1, best.2)
    }

    fn calibrate() -> Option<Rate> {
        let (t0, n0) = pair();
        std::thread::sleep(CALIBRATION);
        let (t1, n1) = pair();
        let hz = (t1.checked_sub(t0)? as f64) * 1e9 / (n1.checked_sub(n0)? as f64);
        // A counter outside 100 MHz - 20 GHz is not a TSC this code understands.
        (1e8..2e10).contains(&hz).then_some(Rate { hz })
    }
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
    /// A clock driven by the host's time, counting at the arch frequency from now: the CPU's
    /// time-stamp counter where the host kernel keeps time with it, else `CLOCK_MONOTONIC`
    /// ([`RealSource::Auto`]; `FERRY_DEVICE_CLOCK=monotonic` forces the second, and an
    /// unreadable value falls back to `Auto` with a warning).
    pub fn real(arch: &ArchProfile) -> Self {
        let source = RealSource::from_env().unwrap_or_else(|e| {
            // Once per process, not once per device.
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| tracing::warn!("{e}; using auto"));
            RealSource::Auto
        });
        Self::real_from(arch, source)
    }

    /// A real clock on the host counter `source` picks (see [`real`](Self::real)).
    pub fn real_from(arch: &ArchProfile, source: RealSource) -> Self {
        let tsc = match source {
            RealSource::Auto => tsc::rate(),
            RealSource::Monotonic => None,
        };
        let source = match tsc {
            Some(rate) => Source::Tsc { epoch: tsc::read(), mult: rate.mult_for(arch.clock_hz) },
            None => Source::Real { epoch_ns: monotonic_ns() },
        };
        Self {
            hz: arch.clock_hz,
            ns_per_cycle: ns_per_cycle(arch.clock_hz),
            source,
            real_bell: Arc::default(),
        }
    }

    /// What this clock counts: `tsc`, `monotonic` or `virtual`.
    pub fn source_name(&self) -> &'static str {
        match self.source {
            Source::Tsc { .. } => "tsc",
            Source::Real { .. } => "monotonic",
            Source::Virtual(_) => "virtual",
        }
    }

    /// A clock that reads `clock` and only moves when it is advanced.
    pub fn virtual_clock(arch: &ArchProfile, clock: VirtualDeviceClock) -> Self {
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
    ///
    /// Like a hardware counter read without a barrier, the read is not ordered after this
    /// thread's earlier loads: the CPU may take it while a load before it is still in flight.
    /// It is ordered before this thread's later stores (a store becomes visible only after every
    /// instruction before it has retired), so a timestamp taken before publishing something is
    /// never later than the publication. A timestamp that must follow an observation of another
    /// thread's store (to compare with that thread's own timestamp) is taken with
    /// [`now_cycles_ordered`](Self::now_cycles_ordered). On one thread the reads never decrease.
    #[inline]
    pub fn now_cycles(&self) -> u64 {
        match &self.source {
            Source::Tsc { epoch, mult } => tsc::cycles_since(tsc::read(), *epoch, *mult),
            Source::Real { epoch_ns } => cycles_of_ns(
                u128::from(monotonic_ns().saturating_sub(*epoch_ns)),
                self.hz,
                self.ns_per_cycle,
            ),
            Source::Virtual(v) => v.now(),
        }
    }

    /// [`now_cycles`](Self::now_cycles), taken only after every load this thread issued before
    /// it has completed: a timestamp of "after I saw it".
    #[inline]
    pub fn now_cycles_ordered(&self) -> u64 {
        order_after_loads();
        self.now_cycles()
    }

    /// A bell that rings whenever a virtual clock advances (never for a real clock). Waiters that
    /// watch a deadline park on it so a test's `advance` wakes them at once.
    pub fn bell(&self) -> &Doorbell {
        match &self.source {
            Source::Real { .. } | Source::Tsc { .. } => &self.real_bell,
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
        let _bound = ferry_watchdog::bound("the other thread");
        let v = VirtualDeviceClock::new();
        let c = DeviceClock::virtual_clock(&A5, v.clone());
        assert!(c.is_virtual());
        assert_eq!(c.now_cycles(), 0);
        v.advance(1234);
        assert_eq!(c.now_cycles(), 1234);
    }

    #[test]
    fn real_clock_counts_at_arch_frequency() {
        let _bound = ferry_watchdog::bound("the other thread");
        let c = DeviceClock::real(&A2A3);
        let a = c.now_cycles();
        std::thread::sleep(std::time::Duration::from_millis(2));
        // 2 ms at 50 MHz is 100_000 cycles; only a lower bound is safe on a loaded machine.
        assert!(c.now_cycles() - a >= 100_000);
        assert_eq!(c.hz(), 50_000_000);
    }

    #[test]
    fn both_real_sources_count_at_arch_frequency() {
        let _bound = ferry_watchdog::bound("the other thread");
        // Auto is the TSC where the kernel keeps time with it (this CI's machines do), else
        // CLOCK_MONOTONIC; both agree with the host's monotonic time to well under 1 %.
        use std::time::Instant;
        for source in [RealSource::Auto, RealSource::Monotonic] {
            let c = DeviceClock::real_from(&A5, source);
            let tsc = source == RealSource::Auto && tsc::rate().is_some();
            assert_eq!(c.source_name(), if tsc { "tsc" } else { "monotonic" });
            // Each device read bracketed by two host reads, so a pre-emption anywhere only
            // widens the brackets: a5 counts nanoseconds, so `b - a` lies between the inner and
            // the outer host interval, give or take the rate's error (ppm; 0.1 % allowed).
            let (h0, a, h1) = (Instant::now(), c.now_cycles_ordered(), Instant::now());
            std::thread::sleep(std::time::Duration::from_millis(20));
            let (h2, b, h3) = (Instant::now(), c.now_cycles_ordered(), Instant::now());
            let (inner, outer) = ((h2 - h1).as_nanos() as f64, (h3 - h0).as_nanos() as f64);
            let d = (b - a) as f64;
            assert!(
                d >= inner * 0.999 - 2.0 && d <= outer * 1.001 + 2.0,
                "{source:?}: {d} cycles against {inner}..{outer} ns"
            );
        }
    }

    #[test]
    fn a_tsc_clock_scales_and_never_reads_before_its_epoch() {
        let _bound = ferry_watchdog::bound("the other thread");
        // 2.5 GHz counter, 50 MHz device: one device cycle per 50 ticks.
        let mult = tsc::Rate { hz: 2.5e9 }.mult_for(50_000_000);
        assert_eq!(tsc::cycles_since(1_000 + 50 * 1_000_000, 1_000, mult), 999_999);
        assert_eq!(tsc::cycles_since(1_000 + 50 * 1_000_000 + 1, 1_000, mult), 1_000_000);
        assert_eq!(tsc::cycles_since(999, 1_000, mult), 0, "a CPU a tick behind the epoch");
        // 1 GHz device on a 2.5 GHz counter, an hour in: no overflow, and the 32.32 factor's
        // rounding stays under a part per billion (the rate itself is measured to ppm).
        let mult = tsc::Rate { hz: 2.5e9 }.mult_for(1_000_000_000);
        let hour = 3_600 * 2_500_000_000u64;
        let err = tsc::cycles_since(hour, 0, mult).abs_diff(3_600_000_000_000);
        assert!(err <= 3_600, "{err} cycles off in an hour");
    }

    #[test]
    fn an_ordered_read_after_an_observation_is_never_earlier_than_the_publishers_read() {
        let _bound = ferry_watchdog::bound("the other thread");
        // The core's end (a plain read, then a Release store of FIN) against the scheduler's
        // observation (an Acquire load of FIN, then an ordered read), at a5's 1 ns resolution,
        // across two threads that may sit on different CPUs, 20,000 times: fails where the
        // counter is not synchronised across CPUs or a clock's epoch or scale were per thread.
        // (The barrier itself is not observable here: a spin loop's exit branch already waits
        // for its load. It matters where a read follows a load no branch waits for.)
        use std::sync::atomic::AtomicU64;
        let c = DeviceClock::real(&A5);
        let (stamp, flag) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        const N: u64 = 20_000;
        let t = {
            let (c, stamp, flag) = (c.clone(), stamp.clone(), flag.clone());
            std::thread::spawn(move || {
                for i in 1..=N {
                    // Acquire: pairs with the observer's Release store ending turn i - 1, so this
                    // turn's read follows that turn.
                    while flag.load(Ordering::Acquire) != 2 * i - 2 {
                        std::thread::yield_now();
                    }
                    stamp.store(c.now_cycles(), Ordering::Relaxed);
                    // Release: publishes `stamp`; the read above is before it.
                    flag.store(2 * i - 1, Ordering::Release);
                }
            })
        };
        let mut last = 0;
        for i in 1..=N {
            // Acquire: pairs with the publisher's Release store.
            while flag.load(Ordering::Acquire) != 2 * i - 1 {
                std::thread::yield_now();
            }
            let seen = c.now_cycles_ordered();
            let published = stamp.load(Ordering::Relaxed);
            assert!(seen >= published, "turn {i}: observed {seen} < published {published}");
            assert!(seen >= last, "one thread's reads never decrease");
            last = seen;
            // Release: the publisher's next read follows this turn.
            flag.store(2 * i, Ordering::Release);
        }
        t.join().unwrap();
    }

    #[test]
    fn the_clock_knob_takes_auto_or_monotonic_and_refuses_the_rest() {
        let _bound = ferry_watchdog::bound("the other thread");
        assert_eq!(RealSource::parse(""), Ok(RealSource::Auto));
        assert_eq!(RealSource::parse("auto"), Ok(RealSource::Auto));
        assert_eq!(RealSource::parse("monotonic"), Ok(RealSource::Monotonic));
        let e = RealSource::parse("tsc").unwrap_err();
        assert!(e.contains("expected `auto` or `monotonic`"), "{e}");
    }

    #[test]
    fn the_exact_divisor_agrees_with_the_general_conversion() {
        let _bound = ferry_watchdog::bound("the other thread");
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
        let _bound = ferry_watchdog::bound("the other thread");
        let v = VirtualDeviceClock::new();
        let c = DeviceClock::virtual_clock(&A2A3, v.clone());
        let d = c.deadline_after(A2A3.dfx_backpressure_budget_cycles);
        let c2 = c.clone();
        let t = std::thread::spawn(move || c2.bell().wait_until(|| d.is_expired(), None));
        v.advance(A2A3.dfx_backpressure_budget_cycles - 1);
        v.advance(1);
        assert!(t.join().unwrap());
    }
}
