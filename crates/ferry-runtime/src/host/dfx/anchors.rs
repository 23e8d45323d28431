//! Host↔device clock anchors (`metadata.clock_anchors`, docs/dfx.md): the host reads its
//! clock, asks the device for a timestamp through an event on the null stream, waits for it and
//! reads its clock again, as the original's clock-correlation session does with
//! `aclrtRecordEvent` + `aclrtSynchronizeEvent` + `aclrtEventGetTimestamp`. No device→host
//! shortcut: the device timestamp is the event's, taken when the stream reached it.

use std::time::Duration;

use ferry_profile::{host_now_ns, ClockAnchorSample, ClockAnchors, ANCHOR_SAMPLES_PER_POSITION};
use ferry_sim::{Device, Event};

/// How long one sample waits for its event.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(1);

/// Takes [`ANCHOR_SAMPLES_PER_POSITION`] samples at `position` on `device` into `anchors`. A
/// sample that fails is kept with its `error` (readers skip it), so a failure never costs the
/// run.
pub fn sample_clock_anchors(device: &Device, position: &str, anchors: &mut ClockAnchors) {
    for i in 0..ANCHOR_SAMPLES_PER_POSITION {
        let host_before_ns = host_now_ns();
        let ev = Event::new();
        let stamped = device
            .null_stream()
            .map_err(|e| format!("create_stream: {e}"))
            .and_then(|s| s.record_event(&ev).map_err(|e| format!("record_event: {e}")))
            .and_then(|()| {
                ev.synchronize_timeout(SAMPLE_TIMEOUT)
                    .then_some(())
                    .ok_or_else(|| "synchronize_event: timed out".to_string())
            })
            .and_then(|()| {
                ev.timestamp_cycles().ok_or_else(|| "get_timestamp: no timestamp".to_string())
            });
        let host_after_ns = host_now_ns();
        let (device_cycles, error) = match stamped {
            Ok(c) => (c, None),
            Err(e) => (0, Some(e)),
        };
        anchors.samples.push(ClockAnchorSample {
            position: position.to_string(),
            sample_idx: i,
            host_before_ns,
            device_cycles,
            host_after_ns,
            error,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_profile::{ANCHOR_POST, ANCHOR_PRE};
    use ferry_sim::{Arch, PlatformBuilder};

    #[test]
    fn anchors_are_monotonic_and_match_the_clock() {
        let _bound = ferry_watchdog::bound("the clock anchors' stream round trips");
        let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build().unwrap();
        let dev = p.device(0).unwrap();
        let mut a = ClockAnchors::new_sim();
        sample_clock_anchors(dev, ANCHOR_PRE, &mut a);
        std::thread::sleep(Duration::from_millis(20));
        sample_clock_anchors(dev, ANCHOR_POST, &mut a);
        assert_eq!(a.samples.len(), 6);
        assert!(a.samples.iter().all(|s| s.error.is_none()), "{a:?}");
        for w in a.samples.windows(2) {
            assert!(w[1].host_before_ns >= w[0].host_after_ns, "{w:?}");
            assert!(w[1].device_cycles >= w[0].device_cycles, "{w:?}");
        }
        // Device time between the first and last sample is host time at the device clock,
        // within the two samples' round trips.
        let (f, l) = (&a.samples[0], &a.samples[5]);
        let hz = Arch::A2a3.profile().clock_hz as f64;
        let device_ns = (l.device_cycles - f.device_cycles) as f64 * 1e9 / hz;
        let lo = l.host_before_ns.saturating_sub(f.host_after_ns) as f64;
        let hi = (l.host_after_ns - f.host_before_ns) as f64;
        let cycle_ns = 1e9 / hz;
        assert!(device_ns + cycle_ns >= lo && device_ns <= hi + cycle_ns, "{device_ns} {lo} {hi}");
    }
}
