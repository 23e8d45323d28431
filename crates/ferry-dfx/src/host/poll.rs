//! Adaptive polling of the device's ready queues: spin, then yield, then sleep with a short,
//! growing interval.
//!
//! Real hardware has no device-to-host signal for DFX (docs/design/dfx-backpressure.md: "no host-device handshake is
//! involved"): the host finds work by reading its ready queues. A drain shard that found work
//! sweeps again at once; after an empty sweep it spins briefly, then yields, then sleeps, doubling
//! the interval from [`PollPolicy::min_sleep`] up to [`PollPolicy::live_max`] — bounded well under
//! a millisecond, so a lane that published its last buffer is answered within that bound. Only
//! after [`PollPolicy::idle_after`] without any work (nothing is being profiled, e.g. between
//! runs) may the interval grow further, to [`PollPolicy::idle_max`].
//!
//! The sleep is a park with a timeout, so host-internal events (a recycled buffer for a lane on
//! the retry list, stop) and the optional device doorbell hint cut it short.
//!
//! While live, each sleep is first offered to the CPU as one yield
//! ([`PollPolicy::yield_when_busy`]): where other threads want the CPU (the simulated chip's
//! two dozen threads on a small machine), the yield returns only after they ran, which is a
//! sleep without a timer. Where another process holds the CPU (`ferry_wait`'s gate is closed)
//! no yield is made: the yield would hand it a scheduler slice, and the timed sleep follows. A timed wake-up costs the run far more than its own CPU time: on the
//! 2-core VMs here the storm with an idle session (ScopeStats, which the storm never records)
//! ran at 0.93-0.95 of DFX off with timed sleeps and 0.98 with this yield, in the same process
//! (interleaved rounds). A yield that returns at once (nobody else was runnable) is followed by
//! the timed sleep, so an idle machine is not spun on.

use std::time::{Duration, Instant};

use crate::sync::Backoff;

/// How a drain shard polls its queues when they are empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollPolicy {
    /// First sleep after spinning and yielding.
    pub min_sleep: Duration,
    /// Longest sleep while work arrived within [`idle_after`](Self::idle_after).
    pub live_max: Duration,
    /// Time without any work after which the shard counts as idle.
    pub idle_after: Duration,
    /// Longest sleep when idle.
    pub idle_max: Duration,
    /// While live, yield the CPU once before each sleep, and count a yield that kept this
    /// thread off the CPU for at least [`min_sleep`](Self::min_sleep) as the sleep.
    pub yield_when_busy: bool,
}

impl Default for PollPolicy {
    /// 10 µs doubling to 200 µs while live, each sleep offered as a yield first; idle after
    /// 100 ms without work, then up to 2 ms.
    fn default() -> Self {
        Self {
            min_sleep: Duration::from_micros(10),
            live_max: Duration::from_micros(200),
            idle_after: Duration::from_millis(100),
            idle_max: Duration::from_millis(2),
            yield_when_busy: true,
        }
    }
}

/// What a poller says to do after an empty sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Sweep again right away (the spin/yield phase already paused).
    Again,
    /// Park for at most this long, then sweep again.
    Sleep(Duration),
}

/// The per-thread state of one [`PollPolicy`].
#[derive(Debug)]
pub(crate) struct Poller {
    policy: PollPolicy,
    backoff: Backoff,
    sleep: Duration,
    last_work: Instant,
}

impl Poller {
    pub(crate) fn new(policy: PollPolicy) -> Self {
        Self { policy, backoff: Backoff::new(), sleep: policy.min_sleep, last_work: Instant::now() }
    }

    /// A sweep found work: poll eagerly again.
    pub(crate) fn found(&mut self) {
        self.backoff.reset();
        self.sleep = self.policy.min_sleep;
        self.last_work = Instant::now();
    }

    /// A sweep found nothing: spin / yield (returns [`Step::Again`]) until the backoff is spent,
    /// then sleep for a growing interval; while live, a yield that kept the thread off a busy
    /// CPU for [`PollPolicy::min_sleep`] stands in for the sleep ([`Step::Again`]).
    pub(crate) fn empty(&mut self) -> Step {
        self.empty_with(yielded_to_others)
    }

    /// [`empty`](Self::empty) with the yield as a parameter: `yield_off_cpu(d)` yields once and
    /// says whether that kept the thread off the CPU for at least `d`.
    fn empty_with(&mut self, yield_off_cpu: impl FnOnce(Duration) -> bool) -> Step {
        if !self.backoff.is_completed() {
            self.backoff.snooze();
            return Step::Again;
        }
        let live = self.last_work.elapsed() < self.policy.idle_after;
        if live && self.policy.yield_when_busy && yield_off_cpu(self.policy.min_sleep) {
            return Step::Again;
        }
        let cap = if live { self.policy.live_max } else { self.policy.idle_max };
        let d = self.sleep.min(cap);
        self.sleep = (self.sleep * 2).min(cap.max(self.policy.min_sleep));
        Step::Sleep(d)
    }
}

/// Yields the CPU once; whether that kept this thread off it for at least `at_least` (other
/// threads were runnable and ran). No yield while `ferry_wait`'s gate is closed (another process
/// holds the CPU): the timed sleep follows instead. Under loom a yield is a model step, never a
/// sleep.
fn yielded_to_others(at_least: Duration) -> bool {
    #[cfg(not(ferry_loom))]
    {
        ferry_wait::may_yield() && ferry_wait::yield_measured() >= at_least
    }
    #[cfg(ferry_loom)]
    {
        let _ = at_least;
        false
    }
}

#[cfg(all(test, not(ferry_loom)))]
mod tests {
    use super::*;

    #[test]
    fn sleeps_grow_to_the_live_cap_and_reset_on_work() {
        let p = PollPolicy {
            min_sleep: Duration::from_micros(10),
            live_max: Duration::from_micros(40),
            idle_after: Duration::from_secs(3600),
            idle_max: Duration::from_secs(1),
            yield_when_busy: false,
        };
        let mut poll = Poller::new(p);
        let mut sleeps = Vec::new();
        while sleeps.len() < 4 {
            if let Step::Sleep(d) = poll.empty() {
                sleeps.push(d.as_micros());
            }
        }
        assert_eq!(sleeps, [10, 20, 40, 40]);
        poll.found();
        assert_eq!(poll.empty(), Step::Again, "work resets the spin phase");
        let first = loop {
            if let Step::Sleep(d) = poll.empty() {
                break d;
            }
        };
        assert_eq!(first, Duration::from_micros(10));
    }

    #[test]
    fn an_idle_poller_may_sleep_longer_but_stays_bounded() {
        let p = PollPolicy {
            min_sleep: Duration::from_micros(10),
            live_max: Duration::from_micros(20),
            idle_after: Duration::ZERO,
            idle_max: Duration::from_micros(80),
            yield_when_busy: true,
        };
        let mut poll = Poller::new(p);
        let mut sleeps = Vec::new();
        while sleeps.len() < 5 {
            if let Step::Sleep(d) = poll.empty() {
                sleeps.push(d.as_micros());
            }
        }
        assert_eq!(sleeps, [10, 20, 40, 80, 80]);
    }

    #[test]
    fn a_live_poller_counts_a_long_yield_as_its_sleep_and_an_idle_one_never_yields() {
        // The yield is fed its outcome: what the scheduler did is not the policy's to decide.
        let policy = PollPolicy { idle_after: Duration::from_secs(3600), ..PollPolicy::default() };
        let mut poll = Poller::new(policy);
        while !poll.backoff.is_completed() {
            let _ = poll.empty();
        }
        let mut asked = None;
        let step = poll.empty_with(|d| {
            asked = Some(d);
            true
        });
        assert_eq!(step, Step::Again, "a yield that kept the thread off the CPU is the sleep");
        assert_eq!(asked, Some(policy.min_sleep), "measured against the shortest sleep");
        // A yield that came straight back (nobody else wanted the CPU): the timed sleep follows.
        assert_eq!(poll.empty_with(|_| false), Step::Sleep(policy.min_sleep));
        // Without the option no yield is made at all.
        let mut poll = Poller::new(PollPolicy { yield_when_busy: false, ..policy });
        while !poll.backoff.is_completed() {
            let _ = poll.empty();
        }
        for _ in 0..4 {
            assert!(matches!(poll.empty_with(|_| panic!("yielded")), Step::Sleep(_)));
        }
        // An idle poller (no work for `idle_after`) sleeps without yielding first.
        let mut poll = Poller::new(PollPolicy { idle_after: Duration::ZERO, ..policy });
        while !poll.backoff.is_completed() {
            let _ = poll.empty();
        }
        assert!(matches!(poll.empty_with(|_| panic!("yielded while idle")), Step::Sleep(_)));
    }
}
