//! The regions of a session: which exist, how big their pools are, and how they are built and
//! added to the session's engine.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ferry_abi::arch::ArchProfile;
use ferry_abi::records as abi;
use ferry_dfx::clock::CycleClock;
use ferry_dfx::mem::DeviceMemory;
use ferry_dfx::{CollectSink, DfxBuilder, DfxEngine, DfxTransport, Record};
use ferry_profile::collect::LaneRecords;
use ferry_profile::recorder::{RecordStream, Recorder};

use super::memory::{host_memory, SessionDevice};
use super::{DfxError, DfxOptions, LaneIds, Sub};
use crate::device::dfx::DfxRegions;

/// The regions of a session, one per record type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DfxRegion {
    /// ChipSwimlane AICore task records, one lane per core.
    Aicore,
    /// ChipSwimlane AICPU dispatch/finish records, one lane per core.
    Aicpu,
    /// ChipSwimlane scheduler phases, one lane per scheduler thread.
    Sched,
    /// ChipSwimlane orchestrator submit envelopes, one lane.
    Orch,
    /// PMU rows, one lane per core.
    Pmu,
    /// DepGen chains, one lane (the orchestrator).
    DepGen,
    /// ScopeStats records, one lane (the orchestrator).
    Scope,
    /// ArgsDump records, one lane per scheduler thread.
    Args,
}

/// Pool geometry of one region: what [`DfxOptions`] leaves at `None` comes from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Records (DepGen: 8-byte words) per buffer.
    pub records_per_buffer: u32,
    /// Buffers per lane.
    pub buffers_per_lane: u32,
}

impl Capacity {
    /// The default pool of `region` (see the module docs' capacity note).
    pub fn for_region(region: DfxRegion) -> Capacity {
        let (records_per_buffer, buffers_per_lane) = match region {
            DfxRegion::Aicore => (abi::AICORE_TASK_RECORDS_PER_BUFFER as u32, 4),
            DfxRegion::Aicpu => (abi::AICPU_TASK_RECORDS_PER_BUFFER as u32, 4),
            DfxRegion::Sched => (4096, 8),
            DfxRegion::Orch => (4096, 8),
            DfxRegion::Pmu => (abi::PMU_RECORDS_PER_BUFFER as u32, 8),
            DfxRegion::DepGen => (ferry_abi::dep_gen::DEP_GEN_WORDS_PER_BUFFER as u32, 16),
            DfxRegion::Scope => (abi::SCOPE_STATS_RECORDS_PER_BUFFER as u32, 4),
            DfxRegion::Args => (ferry_abi::args_dump::ARGS_WORDS_PER_BUFFER as u32, 16),
        };
        Capacity { records_per_buffer, buffers_per_lane }
    }

    /// The pool of `region` under `opts`' overrides.
    pub fn of(region: DfxRegion, opts: &DfxOptions) -> Capacity {
        let d = Self::for_region(region);
        let records_per_buffer = match (region, opts.records_per_buffer) {
            (_, None) => d.records_per_buffer,
            (DfxRegion::DepGen | DfxRegion::Args, Some(n)) => n.saturating_mul(16),
            (_, Some(n)) => n,
        };
        Capacity {
            records_per_buffer: records_per_buffer.max(1),
            buffers_per_lane: opts.buffers_per_lane.unwrap_or(d.buffers_per_lane).max(1),
        }
    }
}

/// Builds the regions of a session.
pub(super) struct Layout {
    pub(super) profile: &'static ArchProfile,
    pub(super) opts: DfxOptions,
    pub(super) threads: u32,
    /// The device whose memory holds the regions (the full path), or none (host memory).
    pub(super) device: Option<Arc<dyn SessionDevice>>,
    /// The device's cycle counter, which the device half stamps its records with.
    pub(super) clock: Arc<dyn CycleClock>,
    /// The device-to-host doorbells registered for the regions in device memory.
    pub(super) bells: Mutex<Vec<Box<dyn Send + Sync>>>,
    pub(super) engine: DfxEngine,
    /// Device address and bytes of each region.
    pub(super) at: BTreeMap<DfxRegion, (u64, u64)>,
    pub(super) regions: DfxRegions,
    /// The native profile every region's sink also seals its buffers into, when recording.
    pub(super) rec: Option<Arc<Recorder>>,
    /// Whether the sinks keep the records (else the native profile alone holds them).
    pub(super) keep: bool,
}

impl Layout {
    pub(super) fn build<R: Record>(
        &mut self,
        region: DfxRegion,
        queues: &[u32],
    ) -> Result<DfxTransport<R>, DfxError> {
        let cap = Capacity::of(region, &self.opts);
        let bufs = cap.buffers_per_lane;
        let lanes_per_queue = (0..self.threads)
            .map(|q| queues.iter().filter(|&&l| l == q).count())
            .max()
            .unwrap_or(1);
        let mut b = DfxBuilder::new(self.profile);
        b.ready_queues(self.threads)
            .shards(1)
            // The ready queue holds every buffer its lanes can publish: only the pop gate
            // (a lane's own pool) can ever make a writer wait.
            .ready_depth((lanes_per_queue as u32 * bufs + 1).max(8))
            .free_slots(bufs.min(8).next_power_of_two().min(8))
            .records_per_buffer(cap.records_per_buffer)
            .policy(self.opts.policy)
            .doorbell_hint(self.opts.doorbell_hint);
        if let Some(c) = self.opts.drop_wait_cycles {
            b.drop_wait_cycles(c);
        }
        for &q in queues {
            b.lane(q, kind_of(region), bufs);
        }
        let cfg = b.build::<R>()?;
        let mem: Arc<dyn DeviceMemory> = match &self.device {
            Some(d) => d.region(cfg.region_size())?,
            None => host_memory(self.profile, cfg.region_size(), region as u64),
        };
        let at = (mem.device_addr(), cfg.region_size() as u64);
        self.at.insert(region, at);
        let t = DfxTransport::new(cfg, mem, self.clock.clone())?;
        // With the doorbell hint, a loaded AICPU program (which cannot reach the drain threads'
        // parkers) rings them through the device's host notification (the AICPU OS's
        // `notify_host` on the chip), keyed by the region's address. A device without one
        // registers nothing: the host polls.
        if let (Some(d), Some(bell)) = (&self.device, t.device_region().host_doorbell()) {
            if let Some(g) = d.register_bell(at.0, bell) {
                self.bells.lock().unwrap_or_else(|p| p.into_inner()).push(g);
            }
        }
        let r = t.device_region();
        let slot = match region {
            DfxRegion::Aicore => &mut self.regions.aicore,
            DfxRegion::Aicpu => &mut self.regions.aicpu,
            DfxRegion::Sched => &mut self.regions.sched,
            DfxRegion::Orch => &mut self.regions.orch,
            DfxRegion::Pmu => &mut self.regions.pmu,
            DfxRegion::DepGen => &mut self.regions.dep_gen,
            DfxRegion::Scope => &mut self.regions.scope,
            DfxRegion::Args => &mut self.regions.args,
        };
        *slot = Some(r);
        Ok(t)
    }

    /// A region whose records are kept raw per lane while the run is live.
    pub(super) fn raw<R: Record + ferry_profile::recorder::Packed>(
        &mut self,
        region: DfxRegion,
        ids: LaneIds,
    ) -> Result<Sub<R, LaneRecords<R>>, DfxError> {
        let (rec, keep) = (self.rec.clone(), self.keep);
        self.sub(region, ids, move |_| match &rec {
            Some(rec) if keep => LaneRecords::recorded(rec.clone(), stream_of(region)),
            Some(rec) => LaneRecords::recorded_only(rec.clone(), stream_of(region)),
            None => LaneRecords::default(),
        })
    }

    pub(super) fn sub<R: Record, S: CollectSink<R>>(
        &mut self,
        region: DfxRegion,
        ids: LaneIds,
        sink: impl FnMut(u32) -> S,
    ) -> Result<Sub<R, S>, DfxError> {
        let queues: Vec<u32> = ids.iter().map(|i| i.0).collect();
        let t = self.build::<R>(region, &queues)?;
        let key = self.engine.add(t, sink)?;
        Ok(Sub { key, ids })
    }
}

/// The native profile's stream of a region's records.
pub(super) fn stream_of(region: DfxRegion) -> RecordStream {
    match region {
        DfxRegion::Aicore => RecordStream::Aicore,
        DfxRegion::Aicpu => RecordStream::Aicpu,
        DfxRegion::Sched => RecordStream::Sched,
        DfxRegion::Orch => RecordStream::Orch,
        DfxRegion::Pmu => RecordStream::Pmu,
        DfxRegion::DepGen => RecordStream::DepGen,
        DfxRegion::Scope => RecordStream::Scope,
        DfxRegion::Args => RecordStream::Args,
    }
}

/// Ready-entry kind of a region's lanes (the ChipSwimlane buffer kinds; 0 elsewhere).
fn kind_of(region: DfxRegion) -> u32 {
    match region {
        DfxRegion::Aicore => abi::SWIMLANE_KIND_AICORE_TASK,
        DfxRegion::Aicpu => abi::SWIMLANE_KIND_AICPU_TASK,
        DfxRegion::Sched => abi::SWIMLANE_KIND_SCHED_PHASE,
        DfxRegion::Orch => abi::SWIMLANE_KIND_ORCH_PHASE,
        _ => 0,
    }
}
