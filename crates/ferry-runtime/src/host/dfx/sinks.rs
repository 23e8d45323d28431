//! The subsystems' collector sinks: each collected buffer becomes model rows on the collector
//! thread, read straight from the drained buffer (one conversion, no copy of the records first).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferry_abi::records::{
    self as abi, AicoreTaskRecord, AicpuTaskRecord, ArgsDumpRecord, DeviceRecord, OrchPhaseRecord,
    PmuRecord, RecordDecodeError, SchedPhaseRecord, ScopeStatsRecord,
};
use ferry_dfx::output::{
    AicoreTask, AicpuTask, DumpedArg, OrchPhase, PmuRow, SchedPhase, ScopeRow,
};
use ferry_dfx::{CollectSink, CollectedBuffer, ReplenishHooks};

use crate::device::dfx::ArgsArena;

/// Rows of one subsystem, per lane, in each lane's write order.
#[derive(Debug)]
pub(super) struct Rows<T> {
    lanes: Vec<Vec<T>>,
    /// The first record that failed validation (the rest of its buffer was skipped).
    pub(super) error: Option<RecordDecodeError>,
}

impl<T> Rows<T> {
    pub(super) fn new(lanes: usize) -> Self {
        Rows { lanes: (0..lanes).map(|_| Vec::new()).collect(), error: None }
    }

    fn lane(&mut self, lane: u32) -> &mut Vec<T> {
        let i = lane as usize;
        if self.lanes.len() <= i {
            self.lanes.resize_with(i + 1, Vec::new);
        }
        &mut self.lanes[i]
    }

    /// Adds the lanes `other` collected (another shard's: lanes are disjoint between shards).
    pub(super) fn absorb(mut self, other: Rows<T>) -> Rows<T> {
        for (i, l) in other.lanes.into_iter().enumerate() {
            if !l.is_empty() {
                self.lane(i as u32).extend(l);
            }
        }
        self.error = self.error.or(other.error);
        self
    }

    /// Every lane's rows, lane by lane.
    pub(super) fn into_lanes(self) -> Vec<Vec<T>> {
        self.lanes
    }

    /// Every row, lane by lane (one copy into one vector).
    pub(super) fn flatten(self) -> Vec<T> {
        let n = self.lanes.iter().map(Vec::len).sum();
        let mut out = Vec::with_capacity(n);
        for l in self.lanes {
            out.extend(l);
        }
        out
    }

    /// Adds the buffer's records converted by `conv` (which may skip a record with `None`).
    fn add<R: DeviceRecord>(
        &mut self,
        b: &CollectedBuffer<'_, R>,
        conv: impl Fn(u32, &R) -> Option<T>,
    ) {
        let lane = b.lane;
        let out = self.lane(lane);
        out.reserve(b.records.len());
        for r in b.records {
            if let Err(e) = r.validate() {
                self.error.get_or_insert(e);
                return;
            }
            if let Some(t) = conv(lane, r) {
                out.push(t);
            }
        }
    }
}

impl CollectSink<AicoreTaskRecord> for Rows<AicoreTask> {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, AicoreTaskRecord>) {
        // Lane = core. An empty slot (start_time 0, §3.11) is skipped.
        self.add(b, |core, r| (r.start_time != 0).then(|| AicoreTask::from_record(core, r)));
    }
}

impl CollectSink<AicpuTaskRecord> for Rows<AicpuTask> {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, AicpuTaskRecord>) {
        self.add(b, |core, r| Some(AicpuTask::from_record(core, r)));
    }
}

impl CollectSink<SchedPhaseRecord> for Rows<SchedPhase> {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, SchedPhaseRecord>) {
        // Lane = scheduler thread.
        self.add(b, |_, r| SchedPhase::from_record(r));
    }
}

impl CollectSink<OrchPhaseRecord> for Rows<OrchPhase> {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, OrchPhaseRecord>) {
        self.add(b, |_, r| Some(OrchPhase::from_record(r)));
    }
}

impl CollectSink<ScopeStatsRecord> for Rows<ScopeRow> {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, ScopeStatsRecord>) {
        self.add(b, |_, r| Some(ScopeRow::from_record(r)));
    }
}

/// PMU rows: lane = core; the AICPU thread that owns the core and the arch's counter count are
/// fixed per run.
#[derive(Debug)]
pub(super) struct PmuRows {
    pub(super) rows: Rows<PmuRow>,
    threads: Arc<Vec<u32>>,
    counters: usize,
}

impl PmuRows {
    pub(super) fn new(threads: Arc<Vec<u32>>, counters: usize) -> Self {
        PmuRows {
            rows: Rows::new(threads.len()),
            threads,
            counters: counters.min(abi::PMU_MAX_COUNTERS),
        }
    }
}

impl CollectSink<PmuRecord> for PmuRows {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, PmuRecord>) {
        let (threads, n) = (&self.threads, self.counters);
        self.rows.add(b, |core, r| {
            Some(PmuRow {
                thread_id: threads.get(core as usize).copied().unwrap_or(0),
                core_id: core,
                task_id: r.task_id,
                func_id: r.func_id,
                core_type: r.core_type,
                pmu_total_cycles: r.pmu_total_cycles,
                counters: r.counters[..n].iter().map(|&c| u64::from(c)).collect(),
            })
        });
    }
}

/// One scheduler thread's dumped arguments, with their payloads in a `bin` of its own
/// (`bin_offset` relative to it until the lanes are joined).
#[derive(Debug, Default)]
pub(super) struct ArgsLane {
    pub(super) args: Vec<DumpedArg>,
    pub(super) bin: Vec<u8>,
    pub(super) overwritten: u64,
}

/// Collects ArgsDump records and copies their payloads out of the thread's arena while the run
/// is live, counting the payloads consumed per thread for the arena acknowledgement.
pub(super) struct ArgsSink {
    arenas: Vec<Arc<ArgsArena>>,
    consumed: Arc<Vec<AtomicU64>>,
    pub(super) lanes: Vec<ArgsLane>,
    pub(super) error: Option<RecordDecodeError>,
}

impl ArgsSink {
    pub(super) fn new(arenas: Vec<Arc<ArgsArena>>, consumed: Arc<Vec<AtomicU64>>) -> Self {
        let lanes = (0..arenas.len()).map(|_| ArgsLane::default()).collect();
        ArgsSink { arenas, consumed, lanes, error: None }
    }
}

impl CollectSink<ArgsDumpRecord> for ArgsSink {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, ArgsDumpRecord>) {
        let t = b.lane as usize;
        let (Some(out), arena) = (self.lanes.get_mut(t), self.arenas.get(t)) else { return };
        out.args.reserve(b.records.len());
        for r in b.records {
            let has_payload = r.kind == abi::ARG_KIND_TENSOR && r.payload_size > 0;
            match DumpedArg::from_record(r) {
                Ok(mut arg) => {
                    if let (true, Some(a)) = (has_payload, arena) {
                        let size = a.size();
                        // Relaxed: the device cursor as an overwrite high-water mark (§5.4); a
                        // stale value is only smaller, i.e. less conservative by bytes the device
                        // had not yet written.
                        let hw = a.write_offset().load(Ordering::Relaxed);
                        if r.payload_offset < hw.saturating_sub(size) || r.payload_size > size {
                            arg.overwritten = true;
                            out.overwritten += 1;
                        } else {
                            let at = out.bin.len();
                            // SAFETY: the record was published after the device wrote its
                            // payload, and the device overwrites a lap only after this thread's
                            // payloads are all acknowledged, which the count below (after the
                            // copy) precedes.
                            unsafe {
                                a.read_into(r.payload_offset % size, r.payload_size, &mut out.bin)
                            };
                            arg.bin_offset = Some(at as u64);
                            arg.bin_size = (out.bin.len() - at) as u64;
                        }
                    }
                    out.args.push(arg);
                }
                // A record that does not validate is not kept, but its payload still counts as
                // consumed so the device's arena gate is not left waiting for it.
                Err(e) => {
                    self.error.get_or_insert(e);
                }
            }
            if let (true, Some(c)) = (has_payload, self.consumed.get(t)) {
                // Release: orders the payload copy above before the count; pairs with the ack
                // hook's Acquire load, which then publishes it to the device.
                c.fetch_add(1, Ordering::Release);
            }
        }
    }
}

/// `publish_arena_acks`: tells each scheduler thread how many of its payloads the host copied.
pub(super) struct ArgsAcks {
    pub(super) arenas: Vec<Arc<ArgsArena>>,
    pub(super) consumed: Arc<Vec<AtomicU64>>,
}

impl ReplenishHooks for ArgsAcks {
    fn publish_arena_acks(&mut self) {
        for (a, c) in self.arenas.iter().zip(self.consumed.iter()) {
            // Acquire: pairs with the collector's Release increment, so the copies it counted
            // happen before the acknowledgement below (and the device's next lap of writes).
            let n = c.load(Ordering::Acquire);
            // Release: pairs with the device's Acquire load in the arena gate (`copy_payload`).
            a.completed().store(n, Ordering::Release);
        }
    }
}
