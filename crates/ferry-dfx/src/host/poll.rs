//! Adaptive polling of the device's ready queues: spin, then yield, then sleep with a short,
//! growing interval.
//!
//! Real hardware has no device-to-host signal for DFX (seed 000: "no host-device handshake is
//! involved"): the host finds work by reading its ready queues. A drain shard that found work
//! sweeps again at once; after an empty sweep it spins briefly, then yields, then sleeps, doubling
//! the interval from [`PollPolicy::min_sleep`] up to [`PollPolicy::live_max`] — bounded well under
//! a millisecond, so a lane that published its last buffer is answered within that bound. Only
//! after [`PollPolicy::idle_after`] without any work (nothing is being profiled, e.g. between
//! runs) may the interval grow further, to [`PollPolicy::idle_max`].
//!
//! The sleep is a park with a timeout, so host-internal events (a recycled buffer for a lane on
//! the retry list, stop) and the optional device doorbell hint cut it short.

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
}

impl Default for PollPolicy {
    /// 10 µs doubling to 200 µs while live; idle after 100 ms without work, then up to 2 ms.
    fn default() -> Self {
        Self {
            min_sleep: Duration::from_micros(10),
            live_max: Duration::from_micros(200),
            idle_after: Duration::from_millis(100),
            idle_max: Duration::from_millis(2),
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
    /// then sleep for a growing interval.
    pub(crate) fn empty(&mut self) -> Step {
        if !self.backoff.is_completed() {
            self.backoff.snooze();
            return Step::Again;
        }
        let cap = if self.last_work.elapsed() >= self.policy.idle_after {
            self.policy.idle_max
        } else {
            self.policy.live_max
        };
        let d = self.sleep.min(cap);
        self.sleep = (self.sleep * 2).min(cap.max(self.policy.min_sleep));
        Step::Sleep(d)
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
}
