//! The host's time-stamp counter as the real device clock's time base, where the host's own
//! kernel keeps time with it.
//!
//! A real device reads its sys counter with one instruction (`mrs cntvct_el0` on the AICPU). The
//! simulated chip read `Instant::now()` instead: a vDSO `clock_gettime`, then 128-bit nanosecond
//! arithmetic, ~120 instructions per read through the AICPU OS's services table — and DFX reads
//! the clock several times per task (every swimlane timestamp, every gate budget). Where the TSC
//! is invariant and Linux uses it as its clocksource (so it is synchronised across CPUs and
//! steady), [`Tsc::now_ns`] reads it with `rdtscp` (ordered after every earlier load, as the
//! vDSO's own read is, so a timestamp taken after observing another thread's store is never
//! earlier than that thread's timestamp before the store) and scales it with a multiplier
//! calibrated once per process against `Instant` over [`CALIBRATION`]. Elsewhere the device clock
//! stays on `Instant`.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the one calibration per process measures the TSC against `Instant`: the rate is
/// then known to a few parts in 10⁵ (two reads of `Instant` are ~30 ns apart at worst).
pub(super) const CALIBRATION: Duration = Duration::from_millis(2);

/// Fixed-point bits of [`Tsc::mult`].
const SHIFT: u32 = 32;

/// The calibrated TSC: nanoseconds = `(ticks * mult) >> SHIFT`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tsc {
    mult: u64,
}

impl Tsc {
    /// The process's calibrated TSC, or `None` where it is not a usable time base (not x86-64
    /// Linux, no invariant TSC, or the kernel keeps time with another clocksource).
    pub(super) fn get() -> Option<Tsc> {
        static TSC: OnceLock<Option<Tsc>> = OnceLock::new();
        *TSC.get_or_init(|| usable().then(calibrate).flatten())
    }

    /// Counter ticks now (ordered after every earlier load of this thread).
    #[inline]
    pub(super) fn ticks() -> u64 {
        read_ticks()
    }

    /// Nanoseconds of `ticks` TSC ticks.
    #[inline]
    pub(super) fn ns(self, ticks: u64) -> u64 {
        ((u128::from(ticks) * u128::from(self.mult)) >> SHIFT) as u64
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline]
fn read_ticks() -> u64 {
    let mut aux = 0u32;
    // SAFETY: `rdtscp` reads the time-stamp counter and IA32_TSC_AUX into `aux`; it touches no
    // memory of ours. `usable` checked the CPU has it before any `Tsc` exists.
    unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[inline]
fn read_ticks() -> u64 {
    0
}

/// Whether the TSC is invariant, has `rdtscp`, and is the kernel's clocksource.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn usable() -> bool {
    use core::arch::x86_64::__cpuid;
    // Leaf 0x8000_0000 reports the highest extended leaf; the two below are read only when it
    // covers them.
    if __cpuid(0x8000_0000).eax < 0x8000_0007 {
        return false;
    }
    let rdtscp = __cpuid(0x8000_0001).edx & (1 << 27) != 0;
    let invariant = __cpuid(0x8000_0007).edx & (1 << 8) != 0;
    let kernel_uses_it =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .is_ok_and(|s| s.trim() == "tsc");
    rdtscp && invariant && kernel_uses_it
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn usable() -> bool {
    false
}

/// One `(Instant, ticks)` pair, the ticks read on both sides of the `Instant` and averaged.
fn pair() -> (Instant, u64) {
    let a = read_ticks();
    let t = Instant::now();
    let b = read_ticks();
    (t, a / 2 + b / 2 + (a % 2 + b % 2) / 2)
}

fn calibrate() -> Option<Tsc> {
    let (t0, c0) = pair();
    std::thread::sleep(CALIBRATION);
    let (t1, c1) = pair();
    let ns = t1.duration_since(t0).as_nanos();
    let ticks = u128::from(c1.checked_sub(c0)?);
    if ticks == 0 || ns == 0 {
        return None;
    }
    let mult = u64::try_from((ns << SHIFT) / ticks).ok()?;
    // A TSC slower than 100 MHz or faster than 100 GHz is not one to trust.
    ((1u64 << SHIFT) / 100..=(10u64 << SHIFT)).contains(&mult).then_some(Tsc { mult })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the kernel keeps time with the TSC on x86-64 (the development and CI machines),
    /// the device clock must use it.
    #[test]
    fn a_tsc_host_gets_the_tsc() {
        let kernel_tsc = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc");
        if cfg!(all(target_arch = "x86_64", target_os = "linux")) && kernel_tsc {
            assert_eq!(usable(), Tsc::get().is_some(), "a usable TSC calibrates");
        } else {
            assert!(Tsc::get().is_none());
        }
    }

    #[test]
    fn the_tsc_keeps_time_with_instant() {
        let Some(tsc) = Tsc::get() else {
            return; // not a TSC host: the device clock stays on Instant
        };
        let (t0, c0) = pair();
        std::thread::sleep(Duration::from_millis(20));
        let (t1, c1) = pair();
        let want = t1.duration_since(t0).as_nanos() as f64;
        let got = tsc.ns(c1 - c0) as f64;
        // Calibrated over 2 ms to a few parts in 10^5; allow 0.5 % for a loaded machine.
        assert!((got - want).abs() <= want * 5e-3, "tsc {got} ns vs Instant {want} ns");
    }

    #[test]
    fn ticks_do_not_go_back_across_threads() {
        if Tsc::get().is_none() {
            return;
        }
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::Arc;
        let cell = Arc::new(AtomicU64::new(0));
        let c = cell.clone();
        let t = std::thread::spawn(move || {
            for _ in 0..100_000 {
                // Release: pairs with the Acquire load below.
                c.store(Tsc::ticks(), Ordering::Release);
            }
        });
        for _ in 0..100_000 {
            // Acquire: the stored ticks were read before the store we see.
            let seen = cell.load(Ordering::Acquire);
            assert!(Tsc::ticks() >= seen, "a tick read after observing {seen} was earlier");
        }
        t.join().unwrap();
    }
}
