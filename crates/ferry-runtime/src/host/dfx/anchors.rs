//! Host↔device clock anchors (`metadata.clock_anchors`, docs/dfx.md): the host reads its
//! clock, asks the device for a timestamp through an event on the null stream, waits for it and
//! reads its clock again, as the original's clock-correlation session does with
//! `aclrtRecordEvent` + `aclrtSynchronizeEvent` + `aclrtEventGetTimestamp`. No device→host
//! shortcut: the device timestamp is the event's, taken when the stream reached it.

use std::time::Duration;

use ferry_backend::{BackendDevice, BackendError, BackendEvent, BackendOp, BackendStream, EventOf};
use ferry_profile::{host_now_ns, ClockAnchorSample, ClockAnchors, ANCHOR_SAMPLES_PER_POSITION};

/// How long one sample waits for its event.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(1);

/// `step: cause` for a sample's error (the backend's own error, not only the operation).
fn failed(step: &str, e: &BackendError) -> String {
    match std::error::Error::source(e) {
        Some(cause) => format!("{step}: {cause}"),
        None => format!("{step}: {e}"),
    }
}

/// Takes [`ANCHOR_SAMPLES_PER_POSITION`] samples at `position` on `device` into `anchors`. A
/// sample that fails is kept with its `error` (readers skip it), so a failure never costs the
/// run.
pub fn sample_clock_anchors<D: BackendDevice>(
    device: &D,
    position: &str,
    anchors: &mut ClockAnchors,
) {
    for i in 0..ANCHOR_SAMPLES_PER_POSITION {
        let host_before_ns = host_now_ns();
        let ev = EventOf::<D>::default();
        let stamped = device
            .null_stream()
            .map_err(|e| failed("create_stream", &e))
            .and_then(|s| s.record_event(&ev).map_err(|e| failed("record_event", &e)))
            .and_then(|()| {
                device.synchronize_event(&ev, Some(SAMPLE_TIMEOUT)).map_err(|e| match e.op() {
                    BackendOp::Wait => "synchronize_event: timed out".to_string(),
                    _ => failed("synchronize_event", &e),
                })
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
pub(crate) mod tests {
    use super::*;
    use ferry_backend::host::HostMemoryBackend;
    use ferry_backend::Backend;
    use ferry_profile::{ANCHOR_POST, ANCHOR_PRE};

    /// Samples twice, 20 ms apart, on `dev`, whose clock runs at `hz`: the samples are
    /// monotonic, and device time between the first and the last is host time within the two
    /// samples' round trips.
    pub(crate) fn anchors_follow_the_clock<D: BackendDevice>(dev: &D, hz: f64) {
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
        let (f, l) = (&a.samples[0], &a.samples[5]);
        let device_ns = (l.device_cycles - f.device_cycles) as f64 * 1e9 / hz;
        let lo = l.host_before_ns.saturating_sub(f.host_after_ns) as f64;
        let hi = (l.host_after_ns - f.host_before_ns) as f64;
        let cycle_ns = 1e9 / hz;
        assert!(device_ns + cycle_ns >= lo && device_ns <= hi + cycle_ns, "{device_ns} {lo} {hi}");
    }

    #[test]
    fn anchors_on_the_host_memory_backend_follow_its_clock() {
        let _bound = ferry_watchdog::bound("the clock anchors' stream round trips");
        let b = HostMemoryBackend::new(1, 1 << 20).unwrap();
        // Its event timestamps are the host's monotonic clock in nanoseconds.
        anchors_follow_the_clock(b.device(0).unwrap(), 1e9);
    }
}
