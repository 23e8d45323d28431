//! Glue from the transport to the run model: the ABI records as transport [`Record`]s, a
//! per-lane collecting sink, the record → model conversions, and the transport's reconcile lines
//! as [`LaneLoss`].
//!
//! A subsystem's collection runs one [`DfxTransport`](crate::DfxTransport) per record type, with
//! [`LaneRecords`] as the sink of every collector shard; after `stop`, [`LaneRecords::merge`] puts
//! the shards' records back into per-lane write order, and the `add_*` functions below turn each
//! lane's records into the model.
//!
//! # Examples
//! ```
//! use ferry_abi::records::AicoreTaskRecord;
//! use ferry_dfx::output::{collect::add_aicore_records, Swimlane};
//! let mut sw = Swimlane::new(1);
//! let recs = [
//!     AicoreTaskRecord { start_time: 5, end_time: 9, task_token_raw: 1, reg_task_id: 1,
//!                        receive_to_start_cycles: 1 },
//!     AicoreTaskRecord::default(), // an empty slot (start_time 0) is skipped
//! ];
//! add_aicore_records(&mut sw, 3, &recs);
//! assert_eq!(sw.aicore_tasks.len(), 1);
//! assert_eq!(sw.aicore_tasks[0].core, 3);
//! ```

use std::collections::BTreeMap;

use ferry_abi::records::{
    self as abi, AicoreTaskRecord, AicpuTaskRecord, ArgsDumpRecord, DType, DepGenRecord,
    DeviceRecord, OrchPhaseRecord, PmuRecord, RecordDecodeError, SchedPhaseRecord,
    ScopeStatsRecord, DEP_GEN_FLAG_HAS_OVERFLOW, DEP_GEN_FLAG_IN_MANUAL_SCOPE,
    DEP_GEN_FLAG_LAST_OVERFLOW, DEP_GEN_FLAG_OVERFLOW, DEP_GEN_INLINE_DEPS,
};

use super::args::DumpedArg;
use super::deps::{DepArg, DepEdge, DepTask, DepsGraph};
use super::model::{AicoreTask, AicpuTask, LaneLoss, OrchPhase, SchedPhase, Subsystem, Swimlane};
use super::pmu::{PmuRow, PmuTable};
use super::scopes::{ScopeRow, ScopeStats};
use crate::{CollectSink, CollectedBuffer, LaneReconcile, Record};

macro_rules! abi_transport_record {
    ($($t:ty),* $(,)?) => {$(
        const _: () = {
            assert!(size_of::<$t>() % 8 == 0);
            assert!(align_of::<$t>() <= 64);
        };
        // SAFETY: `$t` is a sealed `AbiRecord`: `ferry-abi` proves at compile time that its fields
        // are plain integers tiling the struct with no padding, so every bit pattern is valid and
        // no byte is padding; the const block above checks the size is a multiple of 8 and the
        // alignment at most 64.
        unsafe impl Record for $t {}
    )*};
}

abi_transport_record!(
    AicpuTaskRecord,
    AicoreTaskRecord,
    SchedPhaseRecord,
    OrchPhaseRecord,
    PmuRecord,
    DepGenRecord,
    ScopeStatsRecord,
    ArgsDumpRecord,
);

/// A collector sink that keeps every record per lane, with each buffer's sequence number.
#[derive(Clone, Debug)]
pub struct LaneRecords<R> {
    /// `lane → [(seq, records of that buffer)]`, in collection order.
    pub lanes: BTreeMap<u32, Vec<(u32, Vec<R>)>>,
}

impl<R> Default for LaneRecords<R> {
    fn default() -> Self {
        Self { lanes: BTreeMap::new() }
    }
}

impl<R: Record> CollectSink<R> for LaneRecords<R> {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, R>) {
        self.lanes.entry(b.lane).or_default().push((b.seq, b.records.to_vec()));
    }
}

impl<R: Clone> LaneRecords<R> {
    /// Merges the sinks of all collector shards: per lane, the records of every buffer in
    /// sequence order.
    pub fn merge(shards: impl IntoIterator<Item = LaneRecords<R>>) -> BTreeMap<u32, Vec<R>> {
        let mut all: BTreeMap<u32, Vec<(u32, Vec<R>)>> = BTreeMap::new();
        for s in shards {
            for (lane, bufs) in s.lanes {
                all.entry(lane).or_default().extend(bufs);
            }
        }
        all.into_iter()
            .map(|(lane, mut bufs)| {
                bufs.sort_by_key(|b| b.0);
                (lane, bufs.into_iter().flat_map(|b| b.1).collect())
            })
            .collect()
    }
}

impl LaneLoss {
    /// The loss line of a transport lane.
    pub fn from_reconcile(
        r: &LaneReconcile,
        subsystem: Subsystem,
        lane: String,
        thread: u32,
        core: Option<u32>,
    ) -> Self {
        Self {
            subsystem: Some(subsystem),
            lane,
            thread,
            core,
            produced: r.produced,
            collected: r.collected,
            dropped: r.dropped,
            stall_cycles: r.stall_cycles,
            stalls: r.stalls.as_slice().to_vec(),
        }
    }
}

/// Adds core `core`'s AICore records, skipping empty slots (`start_time == 0`, §3.11).
pub fn add_aicore_records(sw: &mut Swimlane, core: u32, recs: &[AicoreTaskRecord]) {
    sw.aicore_tasks.extend(
        recs.iter().filter(|r| r.start_time != 0).map(|r| AicoreTask::from_record(core, r)),
    );
}

/// Adds core `core`'s AICPU dispatch/finish records.
pub fn add_aicpu_records(sw: &mut Swimlane, core: u32, recs: &[AicpuTaskRecord]) {
    sw.aicpu_tasks.extend(recs.iter().map(|r| AicpuTask::from_record(core, r)));
}

fn slot<T>(v: &mut Vec<Vec<T>>, i: usize) -> &mut Vec<T> {
    if v.len() <= i {
        v.resize_with(i + 1, Vec::new);
    }
    &mut v[i]
}

/// Adds scheduler thread `thread`'s phase records.
///
/// # Errors
///
/// The first record whose fields are out of range ([`DeviceRecord::validate`]); the records before
/// it are added.
pub fn add_sched_records(
    sw: &mut Swimlane,
    thread: u32,
    recs: &[SchedPhaseRecord],
) -> Result<(), RecordDecodeError> {
    let out = slot(&mut sw.sched_phases, thread as usize);
    for r in recs {
        r.validate()?;
        if let Some(p) = SchedPhase::from_record(r) {
            out.push(p);
        }
    }
    Ok(())
}

/// Adds orchestrator thread `thread`'s submit records.
pub fn add_orch_records(sw: &mut Swimlane, thread: u32, recs: &[OrchPhaseRecord]) {
    slot(&mut sw.orch_phases, thread as usize).extend(recs.iter().map(OrchPhase::from_record));
}

/// Adds PMU rows recorded by AICPU thread `thread` for core `core`.
///
/// # Errors
///
/// The first record with an invalid `core_type`.
pub fn add_pmu_records(
    t: &mut PmuTable,
    thread: u32,
    core: u32,
    recs: &[PmuRecord],
) -> Result<(), RecordDecodeError> {
    let n = t.counter_names.len().min(abi::PMU_MAX_COUNTERS);
    for r in recs {
        r.validate()?;
        t.rows.push(PmuRow {
            thread_id: thread,
            core_id: core,
            task_id: r.task_id,
            func_id: r.func_id,
            core_type: r.core_type,
            pmu_total_cycles: r.pmu_total_cycles,
            counters: r.counters[..n].iter().map(|&c| u64::from(c)).collect(),
        });
    }
    Ok(())
}

/// Adds ScopeStats records in device order.
///
/// # Errors
///
/// The first record with an invalid phase, ring or site name.
pub fn add_scope_records(
    s: &mut ScopeStats,
    recs: &[ScopeStatsRecord],
) -> Result<(), RecordDecodeError> {
    for r in recs {
        r.validate()?;
        s.records.push(ScopeRow::from_record(r));
    }
    Ok(())
}

/// Adds DepGen records (a task record followed by its overflow records) as tasks and explicit
/// edges. `tensor_arg` decodes a tensor argument from the runtime's opaque 128-byte blob
/// (`None`: role and index only).
///
/// # Errors
///
/// An invalid record, or an overflow record that does not continue the preceding task.
pub fn add_dep_gen_records(
    g: &mut DepsGraph,
    recs: &[DepGenRecord],
    tensor_arg: &dyn Fn(u32, &[u8; abi::DEP_GEN_TENSOR_BYTES]) -> Option<DepArg>,
) -> Result<(), RecordDecodeError> {
    let bad = |field, value| RecordDecodeError::BadField { record: "DepGenRecord", field, value };
    let mut expecting_overflow: Option<u64> = None;
    for r in recs {
        r.validate()?;
        if r.flags & DEP_GEN_FLAG_OVERFLOW != 0 {
            let o = r.as_overflow();
            if expecting_overflow != Some(o.task_id) {
                return Err(bad("task_id", o.task_id));
            }
            for &d in &o.deps[..usize::from(o.dep_count)] {
                g.edges.push(DepEdge::explicit(d, o.task_id));
            }
            if o.flags & DEP_GEN_FLAG_LAST_OVERFLOW != 0 {
                expecting_overflow = None;
            }
            continue;
        }
        if let Some(t) = expecting_overflow {
            return Err(bad("flags", t));
        }
        let inline = usize::from(r.explicit_dep_count).min(DEP_GEN_INLINE_DEPS);
        for &d in &r.explicit_deps[..inline] {
            g.edges.push(DepEdge::explicit(d, r.task_id));
        }
        if r.flags & DEP_GEN_FLAG_HAS_OVERFLOW != 0 {
            expecting_overflow = Some(r.task_id);
        }
        let args = (0..usize::from(r.tensor_count))
            .map(|i| {
                tensor_arg(i as u32, &r.tensors[i]).unwrap_or_else(|| DepArg {
                    idx: i as u32,
                    role: abi::role_name(r.arg_types[i]).unwrap_or("INPUT").to_string(),
                    ..Default::default()
                })
            })
            .collect();
        g.tasks.push(DepTask {
            task_id: r.task_id,
            scope: if r.flags & DEP_GEN_FLAG_IN_MANUAL_SCOPE != 0 { "manual" } else { "auto" }
                .to_string(),
            kernel_ids: r.kernel_id,
            block_num: r.block_num,
            args,
        });
    }
    match expecting_overflow {
        Some(t) => Err(bad("flags", t)),
        None => Ok(()),
    }
}

impl DumpedArg {
    /// The metadata of an ArgsDump record (payload placement is set by
    /// [`ArgsDump::push`](super::ArgsDump::push)).
    ///
    /// # Errors
    ///
    /// The record's first out-of-range field.
    pub fn from_record(r: &ArgsDumpRecord) -> Result<Self, RecordDecodeError> {
        r.validate()?;
        let n = usize::from(r.ndims);
        let shape: Vec<u64> = r.shapes[..n].iter().map(|&v| u64::from(v)).collect();
        let scalar = r.kind == abi::ARG_KIND_SCALAR;
        Ok(DumpedArg {
            task_id: r.task_id,
            func_id: r.func_ids[..usize::from(r.func_count)]
                .iter()
                .map(|&f| if f == abi::ARGS_FUNC_ID_UNKNOWN { -1 } else { i32::from(f) })
                .collect(),
            arg_index: r.arg_index,
            role: abi::role_name(r.role).unwrap_or("INPUT").to_string(),
            stage: abi::stage_name(r.stage).unwrap_or("before_dispatch").to_string(),
            kind: if scalar { "scalar" } else { "tensor" }.to_string(),
            dtype: DType::from_u8(r.dtype).map_or("UNKNOWN", DType::name).to_string(),
            value: scalar.then_some(r.scalar_value),
            is_contiguous: r.is_contiguous != 0,
            numel: if scalar { 1 } else { shape.iter().product() },
            shape,
            strides: r.strides[..n].iter().map(|&v| u64::from(v)).collect(),
            start_offset: r.start_offset,
            arg_index_ambiguous: r.flags & abi::ARGS_FLAG_INDEX_AMBIGUOUS != 0,
            bin_offset: None,
            bin_size: 0,
            truncated: r.truncated != 0,
            overwritten: false,
        })
    }
}

/// Why an argument's payload could not be copied out of its thread's arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArenaError {
    /// The device has written a full lap past the payload since publishing it.
    #[error("payload at {offset} was overwritten (device cursor {high_water}, arena {arena_size} bytes)")]
    Overwritten {
        /// Monotonic payload offset.
        offset: u64,
        /// The device's `arena_write_offset` when the host copied.
        high_water: u64,
        /// Arena size.
        arena_size: u64,
    },
    /// The payload does not lie inside one lap of the arena (the device never writes one that
    /// straddles the wrap, §3.10).
    #[error("payload at {offset} of {size} bytes does not fit the {arena_size}-byte arena")]
    OutOfRange {
        /// Monotonic payload offset.
        offset: u64,
        /// Payload bytes.
        size: u64,
        /// Arena size.
        arena_size: u64,
    },
}

/// Copies the `size` bytes at monotonic `offset` out of a thread's payload arena (`arena` is the
/// whole arena), unless the device cursor `high_water` shows they were overwritten
/// (`offset < high_water − arena_size`, §5.4).
///
/// # Errors
///
/// [`ArenaError::Overwritten`] or [`ArenaError::OutOfRange`].
///
/// # Examples
/// ```
/// use ferry_dfx::output::collect::{arena_payload, ArenaError};
/// let arena = [1u8, 2, 3, 4, 5, 6, 7, 8];
/// assert_eq!(arena_payload(&arena, 10, 2, 12).unwrap(), vec![3, 4]); // lap 1, physical 2
/// assert!(matches!(arena_payload(&arena, 2, 2, 12), Err(ArenaError::Overwritten { .. })));
/// ```
pub fn arena_payload(
    arena: &[u8],
    offset: u64,
    size: u64,
    high_water: u64,
) -> Result<Vec<u8>, ArenaError> {
    let arena_size = arena.len() as u64;
    let out_of_range = ArenaError::OutOfRange { offset, size, arena_size };
    if arena_size == 0 || size > arena_size {
        return Err(out_of_range);
    }
    if offset < high_water.saturating_sub(arena_size) {
        return Err(ArenaError::Overwritten { offset, high_water, arena_size });
    }
    let phys = offset % arena_size;
    if phys + size > arena_size {
        return Err(out_of_range);
    }
    Ok(arena[phys as usize..(phys + size) as usize].to_vec())
}

impl super::ArgsDump {
    /// Adds an ArgsDump record with its payload copied out of the thread's `arena` (device cursor
    /// `high_water`). An overwritten payload is kept as metadata with `overwritten: true` and
    /// counted in `dropped_overwrite`.
    ///
    /// # Errors
    ///
    /// An invalid record ([`DumpedArg::from_record`]) or a payload outside the arena.
    pub fn push_record(
        &mut self,
        r: &ArgsDumpRecord,
        arena: &[u8],
        high_water: u64,
    ) -> Result<(), CollectError> {
        let mut arg = DumpedArg::from_record(r)?;
        if r.kind == abi::ARG_KIND_TENSOR && r.payload_size > 0 {
            match arena_payload(arena, r.payload_offset, r.payload_size, high_water) {
                Ok(p) => {
                    self.push(arg, Some(&p));
                    return Ok(());
                }
                Err(ArenaError::Overwritten { .. }) => {
                    arg.overwritten = true;
                    self.dropped_overwrite += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.push(arg, None);
        Ok(())
    }
}

/// Why collected records could not be added to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CollectError {
    /// A record failed validation.
    #[error("invalid record: {0}")]
    Record(#[from] RecordDecodeError),
    /// A payload could not be read from its arena.
    #[error("{0}")]
    Arena(#[from] ArenaError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_abi::records::DEP_GEN_OVERFLOW_DEPS;

    #[test]
    fn dep_gen_overflow_records_become_edges() {
        let mut t = DepGenRecord {
            task_id: 9,
            flags: DEP_GEN_FLAG_HAS_OVERFLOW,
            tensor_count: 1,
            explicit_dep_count: 66,
            block_num: 2,
            kernel_id: [4, -1, -1],
            ..Default::default()
        };
        t.arg_types[0] = abi::ARG_ROLE_OUTPUT;
        for (i, d) in t.explicit_deps.iter_mut().enumerate() {
            *d = i as u64 + 100;
        }
        let mut o = abi::DepGenOverflowRecord {
            task_id: 9,
            flags: DEP_GEN_FLAG_OVERFLOW | DEP_GEN_FLAG_LAST_OVERFLOW,
            dep_count: 2,
            reserved: 0,
            deps: [0; DEP_GEN_OVERFLOW_DEPS],
        };
        o.deps[0] = 1;
        o.deps[1] = 2;
        use ferry_abi::launch::AbiRecord;
        let o = DepGenRecord::from_bytes(o.as_bytes()).unwrap();
        let mut g = DepsGraph::default();
        add_dep_gen_records(&mut g, &[t, o], &|_, _| None).unwrap();
        assert_eq!(g.tasks.len(), 1);
        assert_eq!(g.tasks[0].args[0].role, "OUTPUT");
        assert_eq!(g.edges.len(), 66);
        assert!(g.edges.iter().all(|e| e.succ == 9));
        // A task announcing overflow without it is an error.
        let mut g = DepsGraph::default();
        assert!(add_dep_gen_records(&mut g, &[t], &|_, _| None).is_err());
    }

    #[test]
    fn args_record_converts() {
        let r = ArgsDumpRecord {
            task_id: 5,
            role: abi::ARG_ROLE_INOUT,
            stage: abi::ARG_STAGE_AFTER_COMPLETION,
            ndims: 2,
            dtype: DType::Int32 as u8,
            shapes: [2, 3, 0, 0, 0],
            strides: [3, 1, 0, 0, 0],
            func_ids: [7, abi::ARGS_FUNC_ID_UNKNOWN, 0],
            func_count: 2,
            ..Default::default()
        };
        let a = DumpedArg::from_record(&r).unwrap();
        assert_eq!((a.role.as_str(), a.stage.as_str(), a.numel), ("INOUT", "after_completion", 6));
        assert_eq!(a.func_id, vec![7, -1]);
        assert!(DumpedArg::from_record(&ArgsDumpRecord { kind: 9, ..r }).is_err());
    }

    #[test]
    fn args_payloads_come_from_the_arena_or_count_as_overwritten() {
        let arena: Vec<u8> = (0..64u8).collect();
        let rec = |off, size| ArgsDumpRecord {
            task_id: 1,
            ndims: 1,
            shapes: [4, 0, 0, 0, 0],
            strides: [1, 0, 0, 0, 0],
            dtype: DType::UInt8 as u8,
            payload_offset: off,
            payload_size: size,
            ..Default::default()
        };
        let mut d = super::super::ArgsDump::default();
        d.push_record(&rec(64 + 8, 4), &arena, 100).unwrap();
        d.push_record(&rec(8, 4), &arena, 100).unwrap(); // 8 < 100 - 64: overwritten
        assert_eq!(d.payload(&d.args[0]), Some(&[8u8, 9, 10, 11][..]));
        assert!(d.args[1].overwritten && d.args[1].bin_offset.is_none());
        assert_eq!(d.dropped_overwrite, 1);
        assert!(matches!(
            d.push_record(&rec(62, 4), &arena, 66),
            Err(CollectError::Arena(ArenaError::OutOfRange { .. }))
        ));
    }

    #[test]
    fn shards_merge_in_sequence_order() {
        let mut a = LaneRecords::<u64>::default();
        let mut b = LaneRecords::<u64>::default();
        a.lanes.insert(0, vec![(1, vec![3, 4])]);
        b.lanes.insert(0, vec![(0, vec![1, 2]), (2, vec![5])]);
        assert_eq!(LaneRecords::merge([a, b])[&0], vec![1, 2, 3, 4, 5]);
    }
}
