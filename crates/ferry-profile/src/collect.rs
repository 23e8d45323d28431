//! Glue from the transport to the run model: the ABI records as transport [`Record`]s, a
//! per-lane collecting sink, the record → model conversions, and the transport's reconcile lines
//! as [`LaneLoss`].
//!
//! A subsystem's collection runs one region ([`DfxTransport`](ferry_dfx::DfxTransport)) per record
//! type, every region on the run's one [`DfxEngine`](ferry_dfx::DfxEngine). A sink converts each
//! collected buffer straight into model rows with the `add_*` functions below (DepGen:
//! [`DepGenLog`]); [`LaneRecords`] keeps raw records per lane where a caller wants them.
//!
//! # Examples
//! ```
//! use ferry_abi::records::AicoreTaskRecord;
//! use ferry_profile::{collect::add_aicore_records, Swimlane};
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

use ferry_abi::dep_gen::{self, DepGenChain, DepGenError, DepGenTensor};
use ferry_abi::records::{
    self as abi, AicoreTaskRecord, AicpuTaskRecord, ArgsDumpRecord, DType, DeviceRecord,
    OrchPhaseRecord, PmuRecord, RecordDecodeError, SchedPhaseRecord, ScopeStatsRecord,
};

use super::args::DumpedArg;
use super::chunks::{ChunkLog, Span};
use super::model::{AicoreTask, AicpuTask, LaneLoss, OrchPhase, SchedPhase, Subsystem, Swimlane};
use super::pmu::{PmuRow, PmuTable};
use super::recorder::{Packed, RecordStream, Recorder};
use super::scopes::{ScopeRow, ScopeStats};
use super::stream::InlineList;
use ferry_dfx::{CollectSink, CollectedBuffer, LaneReconcile, Record};

/// A collector sink that keeps every record per lane, one bulk copy per buffer into the lane's
/// [`ChunkLog`] (no reallocation, nothing moved while the run is live), with each buffer's
/// sequence number.
///
/// # Examples
/// ```
/// use ferry_profile::collect::LaneRecords;
/// let mut a = LaneRecords::<u64>::default();
/// a.push(0, 0, &[1, 2]);
/// a.push(0, 1, &[3]);
/// let lanes = LaneRecords::merge([a]);
/// assert_eq!(lanes[&0].to_vec(), vec![1, 2, 3]);
/// assert_eq!(lanes[&0].buffers().collect::<Vec<_>>(), [&[1, 2][..], &[3][..]]);
/// ```
#[derive(Debug)]
pub struct LaneRecords<R> {
    /// By lane.
    lanes: Vec<Lane<R>>,
    /// Where each collected buffer is also sealed as a chunk of the native profile, with its
    /// stream ([`LaneRecords::recorded`]).
    rec: Option<(std::sync::Arc<Recorder>, RecordStream)>,
    /// Whether the records are kept (else only each buffer's sequence number and record count:
    /// [`LaneRecords::recorded_only`]).
    keep: bool,
}

/// One lane's records, and `(seq, where the buffer went)` per buffer.
#[derive(Debug)]
struct Lane<R> {
    log: ChunkLog<R>,
    bufs: Vec<(u32, Span)>,
}

impl<R> Default for Lane<R> {
    fn default() -> Self {
        Self { log: ChunkLog::default(), bufs: Vec::new() }
    }
}

impl<R> Default for LaneRecords<R> {
    fn default() -> Self {
        Self { lanes: Vec::new(), rec: None, keep: true }
    }
}

impl<R: Packed> LaneRecords<R> {
    /// A sink that also seals every collected buffer into `rec` as a chunk of `stream` (the
    /// native profile, written while the run runs).
    ///
    /// # Panics
    /// When `R` is not `stream`'s record type.
    pub fn recorded(rec: std::sync::Arc<Recorder>, stream: RecordStream) -> Self {
        assert_eq!(R::BYTES, stream.record_bytes(), "record type of {stream:?}");
        Self { lanes: Vec::new(), rec: Some((rec, stream)), keep: true }
    }

    /// A sink whose records go to `rec` alone (a run whose profile is its native profile):
    /// each collected buffer is sealed there, and kept here only as its sequence number and
    /// record count ([`Span::counted`]): no copy, no memory growing with the run. Its lanes
    /// count their records but read as empty.
    ///
    /// # Panics
    /// When `R` is not `stream`'s record type.
    pub fn recorded_only(rec: std::sync::Arc<Recorder>, stream: RecordStream) -> Self {
        Self { keep: false, ..Self::recorded(rec, stream) }
    }
}

impl<R: Record + Packed> CollectSink<R> for LaneRecords<R> {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, R>) {
        if let Some((rec, stream)) = &self.rec {
            rec.append(*stream, b.lane, b.seq, b.records);
        }
        if self.keep {
            self.push(b.lane, b.seq, b.records);
        } else {
            self.lane(b.lane).bufs.push((b.seq, Span::counted(b.records.len())));
        }
    }
}

impl<R: Copy> LaneRecords<R> {
    /// Appends buffer `seq` of `lane`.
    pub fn push(&mut self, lane: u32, seq: u32, records: &[R]) {
        let l = self.lane(lane);
        let span = l.log.append_whole(records);
        l.bufs.push((seq, span));
    }

    /// Lane `lane`, made where missing.
    fn lane(&mut self, lane: u32) -> &mut Lane<R> {
        let i = lane as usize;
        if self.lanes.len() <= i {
            self.lanes.resize_with(i + 1, Lane::default);
        }
        &mut self.lanes[i]
    }

    /// Records kept, over every lane.
    pub fn len(&self) -> usize {
        self.lanes.iter().map(|l| l.log.len()).sum()
    }

    /// Whether no record was kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Merges the sinks of all collector shards: per lane, the buffers of every shard in sequence
    /// order. Nothing is copied: a lane's buffers stay where their collector put them.
    pub fn merge(shards: impl IntoIterator<Item = LaneRecords<R>>) -> BTreeMap<u32, LaneLog<R>> {
        let mut out: BTreeMap<u32, LaneLog<R>> = BTreeMap::new();
        for s in shards {
            for (lane, l) in s.lanes.into_iter().enumerate() {
                if !l.bufs.is_empty() {
                    let m = out.entry(lane as u32).or_default();
                    let part = m.parts.len();
                    m.order.extend(l.bufs.iter().map(|&(seq, span)| (seq, part, span)));
                    m.parts.push(std::sync::Arc::new(l.log));
                }
            }
        }
        for m in out.values_mut() {
            // A lane's buffers all come in order from one shard (every lane of a run: a lane's
            // queue has one drain shard); otherwise, by sequence number.
            if !m.order.windows(2).all(|w| w[0].0 < w[1].0) {
                m.order.sort_by_key(|b| b.0);
            }
        }
        out
    }
}

/// One lane's collected records after [`LaneRecords::merge`]: its buffers in sequence order.
#[derive(Debug)]
pub struct LaneLog<R> {
    /// Shared by the logs [`split_runs`](Self::split_runs) makes of one lane.
    parts: Vec<std::sync::Arc<ChunkLog<R>>>,
    /// `(seq, part, span)` per buffer, in sequence order.
    order: Vec<(u32, usize, Span)>,
}

impl<R> Default for LaneLog<R> {
    fn default() -> Self {
        Self { parts: Vec::new(), order: Vec::new() }
    }
}

impl<R: Copy> LaneLog<R> {
    /// The lane's buffers in sequence order, each as collected.
    pub fn buffers(&self) -> impl Iterator<Item = &[R]> + '_ {
        self.order.iter().map(|&(_, part, span)| self.parts[part].get(span))
    }

    /// Records of the lane.
    pub fn len(&self) -> usize {
        self.order.iter().map(|b| b.2.len()).sum()
    }

    /// Whether the lane holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The lane's buffers split by run: `ends[k]` is run k's end sequence number (every buffer
    /// of runs `0..=k` has a smaller one, [`ferry_dfx::RunEnd::seq`]), so run k holds the buffers
    /// with `ends[k-1] <= seq < ends[k]`. Nothing is copied. `Err` with the sequence number of a
    /// buffer past the last end (no run it could belong to).
    ///
    /// # Examples
    /// ```
    /// use ferry_profile::collect::LaneRecords;
    /// let mut a = LaneRecords::<u64>::default();
    /// a.push(0, 0, &[1, 2]);
    /// a.push(0, 1, &[3]);
    /// a.push(0, 2, &[4]);
    /// let lane = LaneRecords::merge([a]).remove(&0).unwrap();
    /// let runs = lane.split_runs(&[2, 2, 3]).unwrap();
    /// let v: Vec<Vec<u64>> = runs.iter().map(|l| l.to_vec()).collect();
    /// assert_eq!(v, [vec![1, 2, 3], vec![], vec![4]]);
    /// ```
    pub fn split_runs(&self, ends: &[u32]) -> Result<Vec<LaneLog<R>>, u32> {
        let mut out: Vec<LaneLog<R>> =
            ends.iter().map(|_| LaneLog { parts: self.parts.clone(), order: Vec::new() }).collect();
        for &(seq, part, span) in &self.order {
            let k = ends.iter().position(|&e| seq < e).ok_or(seq)?;
            out[k].order.push((seq, part, span));
        }
        Ok(out)
    }

    /// Every record of the lane, buffer after buffer, in one `Vec`.
    pub fn to_vec(&self) -> Vec<R> {
        let mut v = Vec::with_capacity(self.len());
        for b in self.buffers() {
            v.extend_from_slice(b);
        }
        v
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
            stall_waits: r.stalls.total,
        }
    }
}

/// Adds core `core`'s AICore records, skipping empty slots (`start_time == 0`).
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

/// One submit as DepGen recorded it, reassembled from its chains (see [`DepGenLog`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepGenSubmit<'a> {
    /// Task id.
    pub task_id: u64,
    /// The head chain's `DEP_GEN_FLAG_*` bits.
    pub flags: u32,
    /// Kernel per sub-core (AIC, AIV0, AIV1); −1 when inactive.
    pub kernel_id: [i32; 3],
    /// SPMD block count.
    pub block_num: u32,
    /// Tensor arguments, in argument order.
    pub tensors: &'a [DepGenTensor],
    /// Explicit dependencies (predecessor task ids).
    pub deps: &'a [u64],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SubmitRow {
    task_id: u64,
    flags: u32,
    kernel_id: [i32; 3],
    block_num: u32,
    total: (u32, u32),
    tensors: (usize, usize),
    deps: (usize, usize),
}

/// The submits of one DepGen lane, reassembled from its chains buffer by buffer, in lane order:
/// flat arrays of tensors and dependencies (no allocation per submit).
///
/// Only whole submits are kept: a submit whose overflow chains did not all arrive (a buffer
/// dropped under the Drop policy), or an overflow chain whose head is missing, is counted in
/// [`incomplete`](Self::incomplete) and left out. A chain that does not parse stops the lane and
/// is kept in [`error`](Self::error).
///
/// # Examples
/// ```
/// use ferry_abi::dep_gen::{encode, DepGenHead, DepGenTensor};
/// use ferry_abi::records::DType;
/// use ferry_profile::collect::DepGenLog;
/// let head = DepGenHead { task_id: 1, flags: 0, kernel_id: [-1, 4, -1], block_num: 1 };
/// let t = [DepGenTensor { role: 1, dtype: DType::Int8, addr: 0x40, bytes: 64 }];
/// let mut words = Vec::new();
/// encode(&head, t.iter().copied(), &[0], &mut [0; 64], |c| words.extend_from_slice(c)).unwrap();
/// let mut log = DepGenLog::default();
/// log.push_buffer(&words);
/// let s = log.submits().next().unwrap();
/// assert_eq!((s.task_id, s.tensors, s.deps), (1, &t[..], &[0u64][..]));
/// assert_eq!((log.incomplete, log.error), (0, None));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DepGenLog {
    rows: Vec<SubmitRow>,
    tensors: Vec<DepGenTensor>,
    deps: Vec<u64>,
    /// The last row is still waiting for overflow chains.
    pending: bool,
    /// Submits left out because not all their chains arrived.
    pub incomplete: u64,
    /// The first chain that did not parse (the rest of its buffer was skipped).
    pub error: Option<DepGenError>,
}

impl DepGenLog {
    /// Adds the chains of one collected buffer (its words, in order).
    pub fn push_buffer(&mut self, words: &[u64]) {
        for c in dep_gen::chains(words) {
            match c {
                Ok(c) => self.push_chain(&c),
                Err(e) => {
                    self.error.get_or_insert(e);
                    return;
                }
            }
        }
    }

    fn drop_pending(&mut self) {
        if self.pending {
            if let Some(r) = self.rows.pop() {
                self.tensors.truncate(r.tensors.0);
                self.deps.truncate(r.deps.0);
            }
            self.pending = false;
            self.incomplete += 1;
        }
    }

    fn push_chain(&mut self, c: &DepGenChain<'_>) {
        let total = (c.total_tensors, c.total_deps);
        if c.is_overflow() {
            let continues = self.pending
                && self.rows.last().is_some_and(|r| r.task_id == c.task_id && r.total == total);
            if !continues {
                // The head (or an earlier overflow chain) of this submit was lost.
                self.drop_pending();
                self.incomplete += 1;
                return;
            }
        } else {
            self.drop_pending();
            self.rows.push(SubmitRow {
                task_id: c.task_id,
                flags: c.flags,
                kernel_id: c.kernel_id,
                block_num: c.block_num,
                total,
                tensors: (self.tensors.len(), self.tensors.len()),
                deps: (self.deps.len(), self.deps.len()),
            });
            self.pending = true;
        }
        self.tensors.extend(c.tensors());
        self.deps.extend_from_slice(c.deps());
        let (nt, nd) = (self.tensors.len(), self.deps.len());
        let Some(r) = self.rows.last_mut() else { return };
        r.tensors.1 = nt;
        r.deps.1 = nd;
        let (have_t, have_d) = (nt - r.tensors.0, nd - r.deps.0);
        if have_t > total.0 as usize || have_d > total.1 as usize {
            // More than the submit announced: not a chain sequence the encoder writes.
            self.error
                .get_or_insert(DepGenError::BadField { field: "chain counts", value: c.task_id });
            self.drop_pending();
        } else if have_t == total.0 as usize && have_d == total.1 as usize {
            self.pending = false;
        }
    }

    /// Ends the lane: a submit still waiting for overflow chains is incomplete.
    pub fn finish(&mut self) {
        self.drop_pending();
    }

    /// Whole submits, in lane order.
    pub fn submits(&self) -> impl ExactSizeIterator<Item = DepGenSubmit<'_>> + '_ {
        self.rows[..self.len()].iter().map(|r| self.submit_of(r))
    }

    /// Whole submit `i` (in lane order), in O(1).
    pub fn submit(&self, i: usize) -> Option<DepGenSubmit<'_>> {
        self.rows[..self.len()].get(i).map(|r| self.submit_of(r))
    }

    /// Where whole submit `i`'s tensor arguments start among all the log's tensor arguments:
    /// [`submits`](Self::submits)' tensors laid end to end, `tensors` of submit `i` are at
    /// `tensor_offset(i)..tensor_offset(i) + tensors.len()`, and [`tensor_args`](Self::tensor_args)
    /// is the end of the last.
    pub fn tensor_offset(&self, i: usize) -> Option<usize> {
        self.rows[..self.len()].get(i).map(|r| r.tensors.0)
    }

    /// Tensor arguments of the whole submits, over all of them.
    pub fn tensor_args(&self) -> usize {
        self.rows[..self.len()].last().map_or(0, |r| r.tensors.1)
    }

    fn submit_of(&self, r: &SubmitRow) -> DepGenSubmit<'_> {
        DepGenSubmit {
            task_id: r.task_id,
            flags: r.flags,
            kernel_id: r.kernel_id,
            block_num: r.block_num,
            tensors: &self.tensors[r.tensors.0..r.tensors.1],
            deps: &self.deps[r.deps.0..r.deps.1],
        }
    }

    /// Whole submits kept.
    pub fn len(&self) -> usize {
        self.rows.len() - usize::from(self.pending)
    }

    /// Whether no whole submit was kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl CollectSink<u64> for DepGenLog {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, u64>) {
        self.push_buffer(b.records);
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
        let shape: InlineList<u64, { abi::ARGS_MAX_DIMS }> =
            r.shapes[..n].iter().map(|&v| u64::from(v)).collect();
        let scalar = r.kind == abi::ARG_KIND_SCALAR;
        Ok(DumpedArg {
            task_id: r.task_id,
            func_id: r.func_ids[..usize::from(r.func_count)]
                .iter()
                .map(|&f| if f == abi::ARGS_FUNC_ID_UNKNOWN { -1 } else { i32::from(f) })
                .collect(),
            arg_index: r.arg_index,
            role: abi::role_name(r.role).unwrap_or("INPUT").into(),
            stage: abi::stage_name(r.stage).unwrap_or("before_dispatch").into(),
            kind: if scalar { "scalar" } else { "tensor" }.into(),
            dtype: DType::from_u8(r.dtype).map_or("UNKNOWN", DType::name).into(),
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
    /// straddles the wrap).
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
/// (`offset < high_water − arena_size`).
///
/// # Errors
///
/// [`ArenaError::Overwritten`] or [`ArenaError::OutOfRange`].
///
/// # Examples
/// ```
/// use ferry_profile::collect::{arena_payload, ArenaError};
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
    ) -> Result<(), IngestError> {
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
pub enum IngestError {
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

    fn chains_of(task: u64, nt: usize, nd: usize, cap: usize) -> Vec<Vec<u64>> {
        let head =
            dep_gen::DepGenHead { task_id: task, flags: 0, kernel_id: [2, -1, -1], block_num: 3 };
        let ts: Vec<DepGenTensor> = (0..nt)
            .map(|i| DepGenTensor {
                role: abi::ARG_ROLE_OUTPUT,
                dtype: abi::DType::Float32,
                addr: 64 * i as u64,
                bytes: 64,
            })
            .collect();
        let ds: Vec<u64> = (0..nd as u64).collect();
        let mut out = Vec::new();
        dep_gen::encode(&head, ts.into_iter(), &ds, &mut vec![0; cap], |c| out.push(c.to_vec()))
            .unwrap();
        out
    }

    #[test]
    fn dep_gen_chains_reassemble_into_whole_submits_across_buffers() {
        let _bound = ferry_watchdog::bound("the DFX transport's threads");
        // Task 9 needs three chains of at most 16 words; each lands in its own buffer.
        let chains = chains_of(9, 3, 20, 16);
        assert_eq!(chains.len(), 3);
        let mut log = DepGenLog::default();
        for c in &chains {
            log.push_buffer(c);
        }
        log.push_buffer(&chains_of(10, 1, 0, 16).concat());
        log.finish();
        let s: Vec<DepGenSubmit<'_>> = log.submits().collect();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].task_id, s[0].tensors.len(), s[0].deps.len()), (9, 3, 20));
        assert_eq!(s[0].deps, (0..20).collect::<Vec<u64>>().as_slice());
        assert_eq!((s[1].task_id, s[1].block_num, s[1].kernel_id), (10, 3, [2, -1, -1]));
        assert_eq!((log.incomplete, log.error), (0, None));
    }

    #[test]
    fn dep_gen_lossy_lanes_keep_whole_submits_only() {
        let _bound = ferry_watchdog::bound("the DFX transport's threads");
        let chains = chains_of(9, 3, 20, 16);
        // The middle chain's buffer was dropped: task 9 is incomplete, task 10 survives.
        let mut log = DepGenLog::default();
        log.push_buffer(&chains[0]);
        log.push_buffer(&chains[2]);
        log.push_buffer(&chains_of(10, 1, 0, 16).concat());
        // An orphan overflow chain (its head was dropped) is left out too.
        log.push_buffer(&chains_of(11, 3, 20, 16)[1]);
        // A submit whose last chain never came.
        log.push_buffer(&chains_of(12, 3, 20, 16)[0]);
        log.finish();
        let ids: Vec<u64> = log.submits().map(|s| s.task_id).collect();
        assert_eq!(ids, vec![10]);
        assert_eq!(log.incomplete, 3);
        assert_eq!(log.error, None);
        // Corrupt words are an error, not a submit.
        let mut bad = DepGenLog::default();
        bad.push_buffer(&[1, 1 << 20, 0, 0, 0]);
        assert!(bad.error.is_some() && bad.is_empty());
    }

    #[test]
    fn args_record_converts() {
        let _bound = ferry_watchdog::bound("the DFX transport's threads");
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
        assert_eq!((&*a.role, &*a.stage, a.numel), ("INOUT", "after_completion", 6));
        assert_eq!(&a.func_id[..], &[7, -1]);
        assert!(DumpedArg::from_record(&ArgsDumpRecord { kind: 9, ..r }).is_err());
    }

    #[test]
    fn args_payloads_come_from_the_arena_or_count_as_overwritten() {
        let _bound = ferry_watchdog::bound("the DFX transport's threads");
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
        assert_eq!(d.payload(&d.args.get(0).unwrap()).as_deref(), Some(&[8u8, 9, 10, 11][..]));
        let a1 = d.args.get(1).unwrap();
        assert!(a1.overwritten && a1.bin_offset.is_none());
        assert_eq!(d.dropped_overwrite, 1);
        assert!(matches!(
            d.push_record(&rec(62, 4), &arena, 66),
            Err(IngestError::Arena(ArenaError::OutOfRange { .. }))
        ));
    }

    #[test]
    fn shards_merge_in_sequence_order() {
        let _bound = ferry_watchdog::bound("the DFX transport's threads");
        let mut a = LaneRecords::<u64>::default();
        let mut b = LaneRecords::<u64>::default();
        a.push(0, 1, &[3, 4]);
        b.push(0, 0, &[1, 2]);
        b.push(0, 2, &[5]);
        b.push(3, 0, &[9]);
        let m = LaneRecords::merge([a, b]);
        assert_eq!(m[&0].to_vec(), vec![1, 2, 3, 4, 5]);
        assert_eq!(m[&0].buffers().collect::<Vec<_>>(), [&[1, 2][..], &[3, 4], &[5]]);
        assert_eq!(m[&3].to_vec(), vec![9]);
        assert_eq!(m.len(), 2, "lanes without records are left out");
    }
}
