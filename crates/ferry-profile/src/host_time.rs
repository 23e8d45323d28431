//! Host time in the swimlane file (docs/dfx.md): the host↔device clock anchors taken at
//! the start and end of a run, and the host orchestrator's submits of a host-built run.
//!
//! The layout is the original runtime's, so its tools (`swimlane_converter`, `critical_path`,
//! the clock-correlation reader) align host time with device time:
//!
//! ```text
//! "metadata": {
//!   ...,
//!   "orchestrator_source": "host",                   (host-built runs only)
//!   "orchestrator_clock_domain": "host_monotonic_ns",
//!   "host_clock_domain_id": "ferry-process-<pid>",
//!   "host_orchestration_origin_ns": 1000,
//!   "host_capture": {"status": "complete", "expected_records": 1, "recorded_records": 1,
//!                    "dropped_records": 0, "error": null},
//!   "clock_anchors": {"provider": "sim_syscnt", "device_timestamp_unit": "syscnt_cycles",
//!                     "raw_device_timestamp_unit": "syscnt_cycles", "samples_per_position": 3,
//!                     "samples": [{"position": "pre_host_orchestration", "sample_idx": 0,
//!                                  "host_before_ns": 990, "device_cycles": 12,
//!                                  "host_after_ns": 1010, "error": null}, ...]}
//! },
//! "host_orchestrator_phases": [[{"submit_idx": 0, "task_id": 0, "start_host_ns": 1000,
//!                                "end_host_ns": 1100}]]
//! ```
//!
//! Host times are nanoseconds of one monotonic clock per process ([`host_now_ns`]); the
//! `host_clock_domain_id` names the process, so files of two processes are never aligned with
//! each other by mistake. A device-orchestrated run carries the anchors but no
//! `orchestrator_source` and no host phases: its orchestrator's submits are device records
//! (`aicpu_orchestrator_phases`).

use std::sync::OnceLock;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Position of the anchors taken before a run's orchestration starts (before the host builds
/// the graph, or before the launch of a device-orchestrated run).
pub const ANCHOR_PRE: &str = "pre_host_orchestration";
/// Position of the anchors taken after the device finished the run.
pub const ANCHOR_POST: &str = "post_device_execution";
/// Anchor samples taken at each position (the reader keeps the one with the smallest round
/// trip).
pub const ANCHOR_SAMPLES_PER_POSITION: u32 = 3;
/// `clock_anchors.provider` of the simulated chip's event timestamps.
pub const ANCHOR_PROVIDER_SIM: &str = "sim_syscnt";
/// Unit of `device_cycles`: the device's system counter at `metadata.clock_freq_hz`.
pub const DEVICE_TIMESTAMP_UNIT: &str = "syscnt_cycles";
/// `orchestrator_clock_domain` of host phases.
pub const HOST_CLOCK_DOMAIN: &str = "host_monotonic_ns";

/// Nanoseconds of the host's monotonic clock, counted from a fixed instant of this process
/// (the first call). Every host time in one process's files is on this axis.
pub fn host_now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = EPOCH.get_or_init(Instant::now);
    // Offset by 1 s so no valid reading is 0 (the readers treat 0 as "not taken").
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX).saturating_add(1_000_000_000)
}

/// `host_clock_domain_id` of this process's host times.
pub fn host_clock_domain_id() -> String {
    format!("ferry-process-{}", std::process::id())
}

/// `metadata.clock_anchors`: host↔device clock pairs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockAnchors {
    /// Who took the device timestamps ([`ANCHOR_PROVIDER_SIM`]).
    pub provider: String,
    /// Unit of `device_cycles` ([`DEVICE_TIMESTAMP_UNIT`]).
    pub device_timestamp_unit: String,
    /// Unit the backend reported before normalisation (the same on the simulated chip).
    pub raw_device_timestamp_unit: String,
    /// Samples per position ([`ANCHOR_SAMPLES_PER_POSITION`]).
    pub samples_per_position: u32,
    /// The samples, by position then index.
    pub samples: Vec<ClockAnchorSample>,
}

impl ClockAnchors {
    /// An empty set from the simulated chip's provider.
    pub fn new_sim() -> Self {
        Self {
            provider: ANCHOR_PROVIDER_SIM.into(),
            device_timestamp_unit: DEVICE_TIMESTAMP_UNIT.into(),
            raw_device_timestamp_unit: DEVICE_TIMESTAMP_UNIT.into(),
            samples_per_position: ANCHOR_SAMPLES_PER_POSITION,
            samples: Vec::new(),
        }
    }

    /// The valid samples at `position`.
    pub fn at<'a>(&'a self, position: &'a str) -> impl Iterator<Item = &'a ClockAnchorSample> {
        self.samples.iter().filter(move |s| s.position == position && s.error.is_none())
    }
}

/// One host↔device pair: the host clock read before and after one device timestamp.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockAnchorSample {
    /// [`ANCHOR_PRE`] or [`ANCHOR_POST`].
    pub position: String,
    /// Index within the position.
    pub sample_idx: u32,
    /// Host ns just before the device timestamp was requested.
    pub host_before_ns: u64,
    /// The device timestamp (cycles of `clock_freq_hz`).
    pub device_cycles: u64,
    /// Host ns just after the device timestamp was read.
    pub host_after_ns: u64,
    /// Why the sample is not valid (`None`: valid), e.g. `record_event: …`.
    pub error: Option<String>,
}

impl ClockAnchorSample {
    /// Host midpoint of the sample.
    pub fn host_mid_ns(&self) -> u64 {
        self.host_before_ns + (self.host_after_ns.saturating_sub(self.host_before_ns)) / 2
    }
}

/// What a host-built run records about its host orchestrator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostOrchestration {
    /// `host_clock_domain_id`.
    pub clock_domain_id: String,
    /// Host ns when the orchestration started (`host_orchestration_origin_ns`).
    pub origin_ns: u64,
    /// Submits the graph has (`host_capture.expected_records`).
    pub expected_records: u64,
    /// One entry per submit (`host_orchestrator_phases`, one host thread).
    pub phases: Vec<HostOrchPhase>,
}

/// One host submit (`host_orchestrator_phases` entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostOrchPhase {
    /// Submit index.
    pub submit_idx: u32,
    /// Task id of the submit.
    pub task_id: u64,
    /// Host ns when the submit started.
    pub start_host_ns: u64,
    /// Host ns when it returned.
    pub end_host_ns: u64,
}

/// `metadata.host_capture`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HostCapture {
    pub(crate) status: String,
    pub(crate) expected_records: u64,
    pub(crate) recorded_records: u64,
    pub(crate) dropped_records: u64,
    pub(crate) error: Option<String>,
}

impl HostCapture {
    pub(crate) fn of(h: &HostOrchestration) -> Self {
        let recorded = h.phases.len() as u64;
        let dropped = h.expected_records.saturating_sub(recorded);
        HostCapture {
            status: if dropped == 0 { "complete" } else { "partial" }.into(),
            expected_records: h.expected_records,
            recorded_records: recorded,
            dropped_records: dropped,
            error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_clock_is_monotonic_and_never_zero() {
        let a = host_now_ns();
        let b = host_now_ns();
        assert!(a > 0 && b >= a);
    }

    #[test]
    fn capture_counts_missing_submits_as_dropped() {
        let mut h = HostOrchestration { expected_records: 2, ..Default::default() };
        h.phases.push(HostOrchPhase {
            submit_idx: 0,
            task_id: 0,
            start_host_ns: 1,
            end_host_ns: 2,
        });
        let c = HostCapture::of(&h);
        assert_eq!((c.status.as_str(), c.recorded_records, c.dropped_records), ("partial", 1, 1));
        h.expected_records = 1;
        assert_eq!(HostCapture::of(&h).status, "complete");
    }
}
