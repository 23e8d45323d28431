//! Record layouts of the five DFX subsystems and a decoder of device-written record buffers
//! (`decode.rs`; the layouts' tests in `tests.rs`).
//!
//! Each record is the fixed-width `#[repr(C)]` image a device writer stores into its lane's buffer
//! (docs/dfx.md). Layouts are proved at compile time by `abi_record!` (size,
//! alignment, every field offset, no padding: explicit `_pad` fields fill what C leaves implicit),
//! so every record is also an [`AbiRecord`](crate::launch::AbiRecord) with a byte image.
//!
//! | subsystem | records | buffer count placement |
//! |---|---|---|
//! | ChipSwimlane | [`AicpuTaskRecord`], [`AicoreTaskRecord`], [`SchedPhaseRecord`], [`OrchPhaseRecord`] | after the records |
//! | PMU | [`PmuRecord`] | after the records |
//! | DepGen | variable-length word chains, see [`crate::dep_gen`] | first, padded to 64 B |
//! | ScopeStats | [`ScopeStatsRecord`] | first, padded to 64 B |
//! | ArgsDump | [`ArgsDumpRecord`] (payload bytes live in a per-thread arena) | after the records |
//!
//! # Decoding
//!
//! The host never trusts a buffer the device wrote: [`decode_buffer`] checks the length and the
//! count against the capacity, and [`RecordBuffer::records`] checks every record's enumerations
//! ([`DeviceRecord::validate`]). Neither ever panics, whatever the bytes; garbage yields a typed
//! [`RecordDecodeError`].
//!
//! # Examples
//!
//! ```
//! use ferry_abi::dfx::BufferCountPlacement;
//! use ferry_abi::launch::AbiRecord;
//! use ferry_abi::records::{decode_buffer, AicoreTaskRecord, DeviceRecord};
//!
//! // A device buffer of 4 AicoreTask slots holding one record, count after the records.
//! let cap = 4;
//! let mut buf = vec![0u8; AicoreTaskRecord::buffer_size(cap)];
//! let rec = AicoreTaskRecord { start_time: 10, end_time: 20, task_token_raw: 1 << 32,
//!                              reg_task_id: 1, receive_to_start_cycles: 2 };
//! buf[..32].copy_from_slice(rec.as_bytes());
//! let count_at = AicoreTaskRecord::PLACEMENT.count_offset(32, cap);
//! buf[count_at..count_at + 4].copy_from_slice(&1u32.to_le_bytes());
//!
//! let view = decode_buffer::<AicoreTaskRecord>(&buf, cap).unwrap();
//! assert_eq!(view.count(), 1);
//! assert_eq!(view.records().next(), Some(Ok(rec)));
//! // Garbage never panics.
//! assert!(decode_buffer::<AicoreTaskRecord>(&buf[..7], cap).is_err());
//! ```

use crate::dfx::BufferCountPlacement;
use crate::launch::abi_record;

mod decode;
pub use decode::{decode_buffer, DeviceRecord, RecordBuffer, RecordDecodeError};

// ---------------------------------------------------------------------------------------------
// ChipSwimlane
// ---------------------------------------------------------------------------------------------

/// Ready-entry `kind` of a ChipSwimlane AICPU task buffer (one lane per core).
pub const SWIMLANE_KIND_AICPU_TASK: u32 = 0;
/// Ready-entry `kind` of a ChipSwimlane scheduler phase buffer (one lane per AICPU thread).
pub const SWIMLANE_KIND_SCHED_PHASE: u32 = 1;
/// Ready-entry `kind` of the ChipSwimlane orchestrator phase buffer (one instance, pool ordinal 0).
pub const SWIMLANE_KIND_ORCH_PHASE: u32 = 2;
/// Ready-entry `kind` of a ChipSwimlane AICore task buffer (one lane per core).
pub const SWIMLANE_KIND_AICORE_TASK: u32 = 3;

/// Records per AICPU task buffer.
pub const AICPU_TASK_RECORDS_PER_BUFFER: usize = 1000;
/// Records per AICore task buffer (the rotation window).
pub const AICORE_TASK_RECORDS_PER_BUFFER: usize = 1024;
/// Records per scheduler phase buffer.
pub const SCHED_PHASE_RECORDS_PER_BUFFER: usize = 16384;
/// Records per orchestrator phase buffer.
pub const ORCH_PHASE_RECORDS_PER_BUFFER: usize = 16384;
/// Records per PMU buffer.
pub const PMU_RECORDS_PER_BUFFER: usize = 512;
/// Records per ScopeStats buffer.
pub const SCOPE_STATS_RECORDS_PER_BUFFER: usize = 512;
/// Records per ArgsDump metadata buffer.
pub const ARGS_DUMP_RECORDS_PER_BUFFER: usize = 256;

/// One AICPU-observed task: dispatch register write to FIN poll (level ≥ 2), per core.
///
/// # Layout
///
/// 32 B, aligned 32 (20 B logical):
///
/// | offset | field |
/// |---|---|
/// | 0 | `dispatch_time` u64 |
/// | 8 | `finish_time` u64 |
/// | 16 | `reg_task_id` u32 |
/// | 20 | pad 12 B |
#[repr(C, align(32))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AicpuTaskRecord {
    /// Device cycle of the dispatch register write.
    pub dispatch_time: u64,
    /// Device cycle at which the AICPU observed FIN.
    pub finish_time: u64,
    /// Low 32 bits of the per-core dispatch counter; joins with [`AicoreTaskRecord::reg_task_id`].
    pub reg_task_id: u32,
    /// Padding to 32 B.
    pub _pad: [u32; 3],
}
abi_record!(AicpuTaskRecord, size 32, align 32, [
    dispatch_time @ 0, finish_time @ 8, reg_task_id @ 16, _pad @ 20,
]);

/// One AICore execution, written by the AICore itself (level ≥ 1), per core.
///
/// # Layout
///
/// 32 B, aligned 32:
///
/// | offset | field |
/// |---|---|
/// | 0 | `start_time` u64 |
/// | 8 | `end_time` u64 |
/// | 16 | `task_token_raw` u64 (`ring_id << 32 \| local_id`) |
/// | 24 | `reg_task_id` u32 |
/// | 28 | `receive_to_start_cycles` u32 |
#[repr(C, align(32))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AicoreTaskRecord {
    /// Device cycle at which the kernel started. 0 = empty slot (skipped on collection).
    pub start_time: u64,
    /// Device cycle at which the kernel ended.
    pub end_time: u64,
    /// Task identity `(ring_id << 32) | local_id`.
    pub task_token_raw: u64,
    /// Low 32 bits of the per-core dispatch counter.
    pub reg_task_id: u32,
    /// Cycles from the core receiving the dispatch to the kernel start.
    pub receive_to_start_cycles: u32,
}
abi_record!(AicoreTaskRecord, size 32, align 32, [
    start_time @ 0, end_time @ 8, task_token_raw @ 16, reg_task_id @ 24,
    receive_to_start_cycles @ 28,
]);

/// Kind of a scheduler phase ([`SchedPhaseRecord::kind`]); 3 is unused.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SchedPhaseKind {
    /// Polling completions.
    Complete = 0,
    /// Dispatching ready tasks.
    Dispatch = 1,
    /// Releasing dependants.
    Release = 2,
    /// Idle loop iteration.
    Dummy = 4,
    /// Dispatch before all inputs resolved.
    EarlyDispatch = 5,
    /// Resolving dependencies.
    Resolve = 6,
    /// A dummy task (carries `local_id`, `ring_id`).
    DummyTask = 7,
    /// Drain.
    Drain = 8,
    /// Drain preparation.
    DrainPrepare = 9,
    /// Drain publication.
    DrainPublish = 10,
    /// Asynchronous poll.
    AsyncPoll = 11,
    /// A predicated-off task (carries `local_id`, `ring_id`).
    PredicatedSkip = 12,
    /// Graph preparation (carries `local_id`, `ring_id`).
    GraphPrepare = 13,
}

impl SchedPhaseKind {
    /// Every kind, in value order.
    pub const ALL: [SchedPhaseKind; 13] = [
        Self::Complete,
        Self::Dispatch,
        Self::Release,
        Self::Dummy,
        Self::EarlyDispatch,
        Self::Resolve,
        Self::DummyTask,
        Self::Drain,
        Self::DrainPrepare,
        Self::DrainPublish,
        Self::AsyncPoll,
        Self::PredicatedSkip,
        Self::GraphPrepare,
    ];

    /// Decodes a raw kind; `None` for 3 and values above 13.
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Complete,
            1 => Self::Dispatch,
            2 => Self::Release,
            4 => Self::Dummy,
            5 => Self::EarlyDispatch,
            6 => Self::Resolve,
            7 => Self::DummyTask,
            8 => Self::Drain,
            9 => Self::DrainPrepare,
            10 => Self::DrainPublish,
            11 => Self::AsyncPoll,
            12 => Self::PredicatedSkip,
            13 => Self::GraphPrepare,
            _ => return None,
        })
    }

    /// The name `chip_swimlane_records.json` uses (`"dispatch"`, `"dummy_task"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Dispatch => "dispatch",
            Self::Release => "release",
            Self::Dummy => "dummy",
            Self::EarlyDispatch => "early_dispatch",
            Self::Resolve => "resolve",
            Self::DummyTask => "dummy_task",
            Self::Drain => "drain",
            Self::DrainPrepare => "drain_prepare",
            Self::DrainPublish => "drain_publish",
            Self::AsyncPoll => "async_poll",
            Self::PredicatedSkip => "predicated_skip",
            Self::GraphPrepare => "graph_prepare",
        }
    }

    /// Parses [`SchedPhaseKind::name`] back.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether `phase_data` holds `(local_id, ring_id)` (a task identity) rather than
    /// `(pop_hit, pop_miss)`.
    pub const fn carries_task(self) -> bool {
        matches!(self, Self::DummyTask | Self::PredicatedSkip | Self::GraphPrepare)
    }
}

/// One scheduler phase of one loop iteration of one AICPU scheduler thread (level ≥ 3).
///
/// # Layout
///
/// 64 B, aligned 8:
///
/// | offset | field |
/// |---|---|
/// | 0 | `start` u64 |
/// | 8 | `end` u64 |
/// | 16 | `loop_iter` u32 |
/// | 20 | `kind` u32 ([`SchedPhaseKind`]) |
/// | 24 | `tasks_processed` u32 |
/// | 28 | `phase_data: [u32; 2]` (dispatch: pop_hit, pop_miss; task kinds: local_id, ring_id) |
/// | 36 | `shared_depth_at_start: [i16; 3]` |
/// | 42 | `shared_depth_at_end: [i16; 3]` |
/// | 48 | pad 16 B |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedPhaseRecord {
    /// First cycle of the phase.
    pub start: u64,
    /// Last cycle of the phase.
    pub end: u64,
    /// Scheduler loop iteration.
    pub loop_iter: u32,
    /// Raw [`SchedPhaseKind`].
    pub kind: u32,
    /// Tasks handled in the phase.
    pub tasks_processed: u32,
    /// Kind-specific pair (see the layout table).
    pub phase_data: [u32; 2],
    /// Shared ready-queue depths when the phase began.
    pub shared_depth_at_start: [i16; 3],
    /// Shared ready-queue depths when the phase ended.
    pub shared_depth_at_end: [i16; 3],
    /// Padding to 64 B.
    pub _pad: [u64; 2],
}
abi_record!(SchedPhaseRecord, size 64, align 8, [
    start @ 0, end @ 8, loop_iter @ 16, kind @ 20, tasks_processed @ 24, phase_data @ 28,
    shared_depth_at_start @ 36, shared_depth_at_end @ 42, _pad @ 48,
]);

/// One orchestrator `submit_task` / `alloc_tensors` envelope (level 4).
///
/// # Layout
///
/// 32 B, aligned 8: `start` u64 @0, `end` u64 @8, `task_id` u64 @16, `submit_idx` u32 @24,
/// pad u32 @28.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrchPhaseRecord {
    /// First cycle of the submit.
    pub start: u64,
    /// Last cycle of the submit.
    pub end: u64,
    /// Task id (`ring_id << 32 | local_id`).
    pub task_id: u64,
    /// Submit ordinal within the run.
    pub submit_idx: u32,
    /// Padding to 32 B.
    pub _pad: u32,
}
abi_record!(OrchPhaseRecord, size 32, align 8, [
    start @ 0, end @ 8, task_id @ 16, submit_idx @ 24, _pad @ 28,
]);

// ---------------------------------------------------------------------------------------------
// PMU
// ---------------------------------------------------------------------------------------------

/// Counter slots of a PMU record on a5; a2a3 uses the first [`PMU_COUNTERS_A2A3`].
pub const PMU_MAX_COUNTERS: usize = 10;
/// Counter slots of a PMU record on a2a3 (the last two slots of [`PmuRecord::counters`] are
/// padding there).
pub const PMU_COUNTERS_A2A3: usize = 8;
/// [`PmuRecord::core_type`] of a cube core.
pub const CORE_TYPE_AIC: i32 = 0;
/// [`PmuRecord::core_type`] of a vector core.
pub const CORE_TYPE_AIV: i32 = 1;

/// One task's PMU counters, written by the AICPU at FIN.
///
/// # Layout
///
/// 64 B, aligned 64:
///
/// | offset | field |
/// |---|---|
/// | 0 | `task_id` u64 |
/// | 8 | `func_id` u32 |
/// | 12 | `core_type` i32 (AIC 0 / AIV 1) |
/// | 16 | `pmu_total_cycles` u64 |
/// | 24 | `counters: [u32; 10]` (a2a3: 8 slots, then 8 B pad) |
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmuRecord {
    /// Task id (`ring_id << 32 | local_id`).
    pub task_id: u64,
    /// Kernel function id.
    pub func_id: u32,
    /// [`CORE_TYPE_AIC`] or [`CORE_TYPE_AIV`].
    pub core_type: i32,
    /// Total cycles the core spent on the task.
    pub pmu_total_cycles: u64,
    /// Event counters in slot order (names depend on the event type).
    pub counters: [u32; PMU_MAX_COUNTERS],
}
abi_record!(PmuRecord, size 64, align 64, [
    task_id @ 0, func_id @ 8, core_type @ 12, pmu_total_cycles @ 16, counters @ 24,
]);

// ---------------------------------------------------------------------------------------------
// ScopeStats
// ---------------------------------------------------------------------------------------------

/// [`ScopeStatsRecord::phase`] of a scope's begin record.
pub const SCOPE_PHASE_BEGIN: i16 = 0;
/// [`ScopeStatsRecord::phase`] of a scope's end record.
pub const SCOPE_PHASE_END: i16 = 1;
/// Rings per run (`ring = min(depth, 3)`), and the length of the per-ring capacity arrays.
pub const SCOPE_RINGS: usize = 4;

/// One `PTO2_SCOPE` begin or end with the occupancy of the run's pools.
///
/// # Layout
///
/// 80 B, aligned 8:
///
/// | offset | field |
/// |---|---|
/// | 0 | `site_file_basename: [u8; 32]` (NUL-padded) |
/// | 32 | `heap_start` u64 |
/// | 40 | `heap_end` u64 |
/// | 48 | `site_line` i32 |
/// | 52 | `task_start` i32 |
/// | 56 | `task_end` i32 |
/// | 60 | `dep_pool_start` i32 |
/// | 64 | `dep_pool_end` i32 |
/// | 68 | `tensormap_used` i32 |
/// | 72 | `depth` i16 |
/// | 74 | `ring_id` i16 |
/// | 76 | `phase` i16 (0 begin / 1 end) |
/// | 78 | pad i16 |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScopeStatsRecord {
    /// Source file basename of the scope site, NUL-padded.
    pub site_file_basename: [u8; 32],
    /// Heap tail (monotonic bytes).
    pub heap_start: u64,
    /// Heap head (monotonic bytes).
    pub heap_end: u64,
    /// Source line of the scope site.
    pub site_line: i32,
    /// Task window tail.
    pub task_start: i32,
    /// Task window head.
    pub task_end: i32,
    /// Dep pool tail.
    pub dep_pool_start: i32,
    /// Dep pool head.
    pub dep_pool_end: i32,
    /// Live tensormap entries.
    pub tensormap_used: i32,
    /// Scope nesting depth.
    pub depth: i16,
    /// Ring (`min(depth, 3)`).
    pub ring_id: i16,
    /// [`SCOPE_PHASE_BEGIN`] or [`SCOPE_PHASE_END`].
    pub phase: i16,
    /// Padding to 80 B.
    pub _pad: i16,
}
abi_record!(ScopeStatsRecord, size 80, align 8, [
    site_file_basename @ 0, heap_start @ 32, heap_end @ 40, site_line @ 48, task_start @ 52,
    task_end @ 56, dep_pool_start @ 60, dep_pool_end @ 64, tensormap_used @ 68, depth @ 72,
    ring_id @ 74, phase @ 76, _pad @ 78,
]);

impl ScopeStatsRecord {
    /// The site basename up to its first NUL (lossy on invalid UTF-8: `None`).
    pub fn site_file(&self) -> Option<&str> {
        let n = self
            .site_file_basename
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.site_file_basename.len());
        core::str::from_utf8(&self.site_file_basename[..n]).ok()
    }

    /// Stores `name` into `site_file_basename`, truncated to 31 bytes at a char boundary.
    pub fn set_site_file(&mut self, name: &str) {
        let mut n = name.len().min(31);
        while !name.is_char_boundary(n) {
            n -= 1;
        }
        self.site_file_basename = [0; 32];
        self.site_file_basename[..n].copy_from_slice(&name.as_bytes()[..n]);
    }
}

// ---------------------------------------------------------------------------------------------
// ArgsDump
// ---------------------------------------------------------------------------------------------

/// [`ArgsDumpRecord::kind`]: a tensor argument (payload in the arena).
pub const ARG_KIND_TENSOR: u8 = 0;
/// [`ArgsDumpRecord::kind`]: a scalar argument (`scalar_value`).
pub const ARG_KIND_SCALAR: u8 = 1;
/// [`ArgsDumpRecord::stage`]: captured before dispatch (inputs, inouts, scalars).
pub const ARG_STAGE_BEFORE_DISPATCH: u8 = 0;
/// [`ArgsDumpRecord::stage`]: captured after completion (outputs, inouts).
pub const ARG_STAGE_AFTER_COMPLETION: u8 = 1;
/// [`ArgsDumpRecord::role`] (and a DepGen tensor's role): input.
pub const ARG_ROLE_INPUT: u8 = 0;
/// Role: output.
pub const ARG_ROLE_OUTPUT: u8 = 1;
/// Role: input and output.
pub const ARG_ROLE_INOUT: u8 = 2;
/// Role: scalar.
pub const ARG_ROLE_SCALAR: u8 = 3;
/// Most dimensions an argument records.
pub const ARGS_MAX_DIMS: usize = 5;
/// `func_ids` entry meaning unknown.
pub const ARGS_FUNC_ID_UNKNOWN: u16 = 0xFFFF;
/// ArgsDump header magic (`"DUMP"`).
pub const ARGS_DUMP_MAGIC: u32 = 0x4455_4D50;

/// Name of a role code (`"INPUT"`, `"OUTPUT"`, `"INOUT"`, `"SCALAR"`).
pub const fn role_name(role: u8) -> Option<&'static str> {
    match role {
        ARG_ROLE_INPUT => Some("INPUT"),
        ARG_ROLE_OUTPUT => Some("OUTPUT"),
        ARG_ROLE_INOUT => Some("INOUT"),
        ARG_ROLE_SCALAR => Some("SCALAR"),
        _ => None,
    }
}

/// Name of a stage code (`"before_dispatch"`, `"after_completion"`).
pub const fn stage_name(stage: u8) -> Option<&'static str> {
    match stage {
        ARG_STAGE_BEFORE_DISPATCH => Some("before_dispatch"),
        ARG_STAGE_AFTER_COMPLETION => Some("after_completion"),
        _ => None,
    }
}

pub use ferry_kernel_abi::DType;

/// Metadata of one dumped argument; tensor payload bytes live in the thread's arena at
/// `payload_offset` (monotonic, taken modulo the arena size).
///
/// The original runtime's per-argument device record. ferry's device writes each task's
/// arguments of one stage as one variable-length chain instead ([`crate::args_dump`]), which
/// the host expands back into these records.
///
/// # Layout
///
/// 128 B (two cache lines), aligned 8:
///
/// | offset | field |
/// |---|---|
/// | 0 | `task_id` u64 |
/// | 8 | `role` u8, `stage` u8 @9, `ndims` u8 @10, pad u8 @11 |
/// | 12 | `arg_index` u32 |
/// | 16 | `dtype` u8, `truncated` u8 @17, `is_contiguous` u8 @18, pad u8 @19, pad u32 @20 |
/// | 24 | `payload_offset` u64 |
/// | 32 | `payload_size` u64 |
/// | 40 | `scalar_value` u64 |
/// | 48 | `kind` u8, `flags` u8 @49, `func_ids: [u16; 3]` @50, `func_count` u8 @56, pad 7 B @57 |
/// | 64 | `start_offset` u64 |
/// | 72 | `strides: [u32; 5]` |
/// | 92 | `shapes: [u32; 5]` |
/// | 112 | pad 16 B |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArgsDumpRecord {
    /// Task id.
    pub task_id: u64,
    /// `ARG_ROLE_*`.
    pub role: u8,
    /// `ARG_STAGE_*`.
    pub stage: u8,
    /// Dimensions used in `shapes`/`strides` (≤ 5).
    pub ndims: u8,
    /// Padding.
    pub _pad0: u8,
    /// Argument position in the kernel's signature.
    pub arg_index: u32,
    /// [`DType`] code.
    pub dtype: u8,
    /// 1 when the payload was truncated (to half the arena).
    pub truncated: u8,
    /// 1 when the tensor view is contiguous.
    pub is_contiguous: u8,
    /// Padding.
    pub _pad1: u8,
    /// Padding.
    pub _pad2: u32,
    /// Monotonic offset of the payload in the thread's arena.
    pub payload_offset: u64,
    /// Payload bytes in the arena (0 for scalars and metadata-only records).
    pub payload_size: u64,
    /// Value of a scalar argument.
    pub scalar_value: u64,
    /// [`ARG_KIND_TENSOR`] or [`ARG_KIND_SCALAR`].
    pub kind: u8,
    /// Flags (bit 0: argument index ambiguous).
    pub flags: u8,
    /// Kernel function ids of the task (`0xFFFF` unknown).
    pub func_ids: [u16; 3],
    /// Entries used in `func_ids`.
    pub func_count: u8,
    /// Padding.
    pub _pad3: [u8; 7],
    /// Element offset of the view into its buffer.
    pub start_offset: u64,
    /// Element strides per dimension.
    pub strides: [u32; ARGS_MAX_DIMS],
    /// Extent per dimension.
    pub shapes: [u32; ARGS_MAX_DIMS],
    /// Padding to 128 B.
    pub _pad4: [u64; 2],
}
abi_record!(ArgsDumpRecord, size 128, align 8, [
    task_id @ 0, role @ 8, stage @ 9, ndims @ 10, _pad0 @ 11, arg_index @ 12, dtype @ 16,
    truncated @ 17, is_contiguous @ 18, _pad1 @ 19, _pad2 @ 20, payload_offset @ 24,
    payload_size @ 32, scalar_value @ 40, kind @ 48, flags @ 49, func_ids @ 50, func_count @ 56,
    _pad3 @ 57, start_offset @ 64, strides @ 72, shapes @ 92, _pad4 @ 112,
]);

/// [`ArgsDumpRecord::flags`]: the argument index is ambiguous.
pub const ARGS_FLAG_INDEX_AMBIGUOUS: u8 = 1;

#[cfg(test)]
mod tests;
