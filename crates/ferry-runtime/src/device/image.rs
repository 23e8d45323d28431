//! The runtime image: what `KernelArgs::runtime_args` points at, and the views
//! the device half reads and writes it through.
//!
//! # Layout
//!
//! One device allocation, 64-byte aligned, regions in this order (offsets in the header):
//!
//! | region | type | writer → reader |
//! |---|---|---|
//! | header | [`RuntimeHeader`] (256 B) | host → AICPU, AICore; never written by the device |
//! | loaded kernels | `device::custom::KernelSpecRecord` × `kernel_table_count`, a separate allocation per runner | host → AICPU |
//! | run block | [`RunBlock`] (64 B) | host → AICPU, AICore (epoch, scratch); AICPU → AICore (DFX flags) |
//! | handshakes | `ferry_abi::handshake::Handshake` × `worker_count` (64 B each), or split slots of 128 B (`HandshakeLayout::SPLIT`, option D) | host zeroes; AICore ↔ AICPU, polled by the AICPU through `DeviceOps::mem_load` |
//! | dispatch payloads | [`DispatchPayload`] × 2 × `worker_count` | AICPU → AICore (first 192 B), AICore → AICPU (last 64 B) |
//! | tensor table | [`TensorRecord`] × `tensor_count` | host → AICPU |
//! | scalars | `u64` × `scalar_count` | host → AICPU |
//! | result | [`RunResult`] (128 B) | AICPU → host (live progress words and the final status) |
//! | loaded-kernel counts | `u64` × `kernel_table_count`: finished tasks per loaded kernel, by `id - CUSTOM_KERNEL_BASE` | AICPU → host (written with the result) |
//! | handshake record | `u32` × `worker_count` | AICPU → host: the `aicore_done` each scheduler last saw |
//! | host-built graph | [`TaskRecord`] × `graph_task_count`, then `u32` predecessor indices | host → AICPU |
//!
//! # Launch-route prefix and per-run suffix
//!
//! The header is the launch descriptor's launch-route prefix on the full path (docs/design/launch.md): it is
//! what the launch transaction publishes and caches per slot, so it holds only what is the same
//! for every run of one graph on one runner (shape, offsets, counts, the `regs` table). Every
//! per-run value (the run epoch, the scratch arena, tensor addresses and scalars, the host-built
//! graph whose records carry resolved tensor addresses) and every region the device writes
//! (handshakes, payloads, result, DFX flags) lives after it, in the per-run suffix the host
//! uploads synchronously when it prepares the run. An identical graph launched again therefore
//! publishes an identical prefix: no descriptor copy and no entry fork. The device never writes
//! the prefix, so a resident prefix is exactly the bytes the host last published.
//!
//! Run-private scheduler state (the task ring, ready queues, the tensor map) lives in AICPU
//! memory, like the original's per-core private scheduler state; only what crosses
//! to the cores or back to the host lives in the image.
//!
//! Every record is `#[repr(C)]`, fixed-width integers only, explicit `_reserved` padding, size
//! and offsets asserted at compile time. Records are copied in and out of device memory with
//! relaxed 8-byte atomic accesses ([`ImageView::read_record`] / [`ImageView::write_record`]), so a
//! malformed run can produce wrong numbers but never a data race; ordering comes from the
//! register Release/Acquire pairs of the dispatch protocol.
use super::ops::{DeviceOps, TranslateError};
use ferry_abi::records::DType;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// `RuntimeHeader::magic`: "FRRT".
pub const IMAGE_MAGIC: u32 = u32::from_le_bytes(*b"FRRT");
/// `RuntimeHeader::version` of this layout.
pub const IMAGE_VERSION: u32 = 4;
/// Most tensor arguments one task carries.
pub const MAX_TASK_TENSORS: usize = 6;
/// Most scalar arguments one task carries.
pub const MAX_TASK_SCALARS: usize = 4;
/// Entries in [`RunResult::kernel_counts`].
pub const KERNEL_COUNT_SLOTS: usize = 16;

/// `RuntimeHeader::variant`: the graph is built on the AICPU by the orchestration function.
pub const VARIANT_DEVICE_ORCH: u32 = 0;
/// `RuntimeHeader::variant`: the graph was built on the host and uploaded in the image.
pub const VARIANT_HOST_GRAPH: u32 = 1;

/// `DispatchPayload::status`: the core has not finished this dispatch.
pub const PAYLOAD_PENDING: u32 = 0;
/// `DispatchPayload::status`: the kernel ran.
pub const PAYLOAD_OK: u32 = 1;
/// `DispatchPayload::status`: the kernel refused its arguments (`fault_code` says why).
pub const PAYLOAD_FAULT: u32 = 2;

/// `RunResult::status`: the run has not finished.
pub const RESULT_RUNNING: u32 = 0;
/// `RunResult::status`: every task ran.
pub const RESULT_OK: u32 = 1;
/// `RunResult::status`: the run failed (`error_code` and `error_detail` say why).
pub const RESULT_FAILED: u32 = 2;

/// Records that may be copied to and from device memory as words.
///
/// # Safety
/// `#[repr(C)]`, only `u32`/`u64` fields (or arrays of them), no padding, size a multiple of 8:
/// every bit pattern is a valid value and every byte is initialised.
pub unsafe trait Record: Copy + 'static {}

/// The image header.
///
/// # Layout
/// 256 bytes, align 64; offsets asserted below. All `*_off` fields are byte offsets from the
/// image start.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeHeader {
    /// [`IMAGE_MAGIC`].
    pub magic: u32,
    /// [`IMAGE_VERSION`].
    pub version: u32,
    /// [`VARIANT_DEVICE_ORCH`] or [`VARIANT_HOST_GRAPH`].
    pub variant: u32,
    /// Handshake slots (AICore workers of the launch).
    pub worker_count: u32,
    /// AICPU threads of the launch (last = orchestrator, rest = schedulers).
    pub aicpu_thread_num: u32,
    /// The callable this run executes.
    pub callable_id: u32,
    /// Offset of the [`RunBlock`] (the start of the per-run suffix).
    pub run_off: u64,
    /// Capacity of the AICPU task ring (tasks in flight at once).
    pub task_window: u32,
    /// Entries in the tensor table.
    pub tensor_count: u32,
    /// Entries in the scalar table.
    pub scalar_count: u32,
    /// Tasks of the host-built graph (0 for device orchestration).
    pub graph_task_count: u32,
    /// Predecessor indices of the host-built graph.
    pub graph_pred_count: u32,
    /// `ferry_abi::arch::Arch as u32`.
    pub arch: u32,
    /// Total image bytes.
    pub image_bytes: u64,
    /// Offset of the handshake slots.
    pub handshake_off: u64,
    /// Offset of the dispatch payload pairs.
    pub payload_off: u64,
    /// Offset of the tensor table.
    pub tensor_off: u64,
    /// Offset of the scalar table.
    pub scalar_off: u64,
    /// Offset of the [`RunResult`].
    pub result_off: u64,
    /// Offset of the host-built graph's [`TaskRecord`]s.
    pub graph_task_off: u64,
    /// Offset of the host-built graph's predecessor indices (`u32`).
    pub graph_pred_off: u64,
    _reserved0: [u64; 2],
    /// Device address of the `regs` table (`u64` register base per physical core id).
    pub regs_table: u64,
    /// Entries of the `regs` table.
    pub regs_count: u32,
    /// Physical core ids reported in a handshake must be below this.
    pub max_physical_cores: u32,
    /// AIC workers (indices `0..aic_count`); the rest are AIV.
    pub aic_count: u32,
    /// Reserved (was the DFX collection bits, now [`RunBlock::dfx_flags`] in the per-run
    /// suffix: the device writes them, and the device never writes the prefix).
    _reserved1: u32,
    /// The handshake slots' layout (`ferry_abi::handshake::HandshakeLayout::id`: 0 one line,
    /// 1 split lines, option D).
    pub handshake_layout: u32,
    /// How long a scheduler waits for its cores' handshake reports, in milliseconds of device
    /// time (0: [`super::sched::CORE_DEADLINE`]).
    pub handshake_timeout_ms: u32,
    /// Offset of the AICPU's handshake record (in the per-run suffix): per core, the
    /// `aicore_done` value the scheduler's last load returned (`u32`), written when its
    /// handshake ends, met or not (what the AICPU saw, for the host to compare with what memory
    /// holds).
    pub handshake_seen_off: u64,
    /// Device address of the loaded kernels' spec table (`device::custom::KernelSpecRecord`
    /// per kernel; 0 when none). The same for every run of a runner, so part of the prefix.
    pub kernel_table: u64,
    /// Entries of the kernel table.
    pub kernel_table_count: u32,
    /// How long one kernel execution (a block on a core) may run, in milliseconds of device
    /// time, before its scheduler declares the core hung and fails the run (0:
    /// [`super::sched::DEFAULT_KERNEL_BUDGET`]).
    pub kernel_budget_ms: u32,
    /// Offset of the loaded-kernel counts (in the per-run suffix): `u64` ×
    /// `kernel_table_count`, finished tasks per loaded kernel (the built-ins' are in
    /// [`RunResult::kernel_counts`]).
    pub custom_count_off: u64,
    /// Offset of the guard table (in the per-run suffix): a [`TensorRecord`] per guarded
    /// allocation (its address and size), sorted by address. [`GUARD_BYTES`] of
    /// [`GUARD_FILL`] follow each such allocation in device memory; a core checks them after a
    /// loaded kernel wrote an output inside it.
    pub guard_off: u64,
    /// Entries of the guard table.
    pub guard_count: u32,
    _reserved3: u32,
    _reserved: [u64; 5],
}

/// Bytes of guard band after each run tensor's allocation (and the scratch arena's).
pub const GUARD_BYTES: u64 = 4096;
/// What a guard band holds until something writes past its allocation.
pub const GUARD_FILL: u8 = 0xa5;
/// How much of a guard band a core checks after a loaded kernel ran: a kernel that writes past
/// the end of its output writes here first.
pub const GUARD_CHECK_BYTES: u64 = 64;

const _: () = {
    assert!(size_of::<RuntimeHeader>() == 256);
    assert!(offset_of!(RuntimeHeader, run_off) == 24);
    assert!(offset_of!(RuntimeHeader, image_bytes) == 56);
    assert!(offset_of!(RuntimeHeader, regs_table) == 136);
    assert!(offset_of!(RuntimeHeader, max_physical_cores) == 148);
    assert!(offset_of!(RuntimeHeader, aic_count) == 152);
    assert!(offset_of!(RuntimeHeader, handshake_layout) == 160);
    assert!(offset_of!(RuntimeHeader, handshake_seen_off) == 168);
    assert!(offset_of!(RuntimeHeader, kernel_table) == 176);
    assert!(offset_of!(RuntimeHeader, kernel_table_count) == 184);
    assert!(offset_of!(RuntimeHeader, kernel_budget_ms) == 188);
    assert!(offset_of!(RuntimeHeader, custom_count_off) == 192);
    assert!(offset_of!(RuntimeHeader, guard_off) == 200);
    assert!(offset_of!(RuntimeHeader, guard_count) == 208);
    assert!(offset_of!(RuntimeHeader, _reserved) == 216);
};
// SAFETY: repr(C), u32/u64 fields tiling 0..256 without padding (offsets asserted above).
unsafe impl Record for RuntimeHeader {}

impl RuntimeHeader {
    /// A header with the magic and version set and everything else zero.
    pub fn new() -> RuntimeHeader {
        RuntimeHeader { magic: IMAGE_MAGIC, version: IMAGE_VERSION, ..Default::default() }
    }
}

/// The per-run values of one run: the first record of the per-run suffix.
///
/// # Layout
/// 64 bytes, align 64: `run_epoch` u64 at 0, `scratch_addr` at 8, `scratch_bytes` at 16,
/// `dfx_flags` u32 at 24, `_reserved` from 28.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunBlock {
    /// Host-minted identity of the run; distinguishes two runs that reuse one image address
    /// (every run of a launch slot does).
    pub run_epoch: u64,
    /// Device address of the scratch arena (0 when none).
    pub scratch_addr: u64,
    /// Bytes of the scratch arena.
    pub scratch_bytes: u64,
    /// DFX collection bits of the run (`crate::device::dfx::DFX_*`; 0 = off), written by the
    /// AICPU. The AICore reads it to decide whether to timestamp its executions.
    pub dfx_flags: u32,
    _reserved0: u32,
    _reserved: [u64; 4],
}
const _: () = {
    assert!(size_of::<RunBlock>() == 64);
    assert!(offset_of!(RunBlock, scratch_addr) == 8);
    assert!(offset_of!(RunBlock, dfx_flags) == 24);
};
// SAFETY: repr(C), u32/u64 fields tiling 0..64 without padding (offsets asserted above).
unsafe impl Record for RunBlock {}

impl RunBlock {
    /// The run block of run `run_epoch` with its scratch arena.
    pub fn new(run_epoch: u64, scratch_addr: u64, scratch_bytes: u64) -> RunBlock {
        RunBlock { run_epoch, scratch_addr, scratch_bytes, ..Default::default() }
    }
}

/// Offset of [`RunBlock::dfx_flags`] inside the run block.
pub const RUN_BLOCK_DFX_FLAGS: usize = offset_of!(RunBlock, dfx_flags);

/// One tensor: a device range.
///
/// # Layout
/// 16 bytes: `addr` u64 at 0, `bytes` u64 at 8.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TensorRecord {
    /// Device address.
    pub addr: u64,
    /// Length in bytes.
    pub bytes: u64,
}
const _: () = assert!(size_of::<TensorRecord>() == 16);
// SAFETY: repr(C), two u64 fields, no padding.
unsafe impl Record for TensorRecord {}

/// Bit of [`TaskRecord::roles`] at which the ArgsDump marks start (one bit per tensor).
pub const TASK_DUMP_SHIFT: u32 = 16;

/// One task of a host-built graph, with its tensor arguments resolved to device ranges.
///
/// # Layout
/// 160 bytes, align 8: `kernel_id`, `block_dim`, `n_tensors`, `n_scalars`, `roles` (2 bits per
/// tensor: 1 input, 2 output, 3 inout; bit `16 + i`: tensor `i` is marked for ArgsDump),
/// `pred_count` (u32 each, 0..24), `pred_start` u64 at 24,
/// `tensors` at 32 (6 × 16), `scalars` at 128 (4 × 8).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskRecord {
    /// Kernel id.
    pub kernel_id: u32,
    /// SPMD block count.
    pub block_dim: u32,
    /// Used entries of `tensors`.
    pub n_tensors: u32,
    /// Used entries of `scalars`.
    pub n_scalars: u32,
    /// Roles, 2 bits per tensor; ArgsDump marks from bit [`TASK_DUMP_SHIFT`] on.
    pub roles: u32,
    /// Predecessors of this task.
    pub pred_count: u32,
    /// Index of the first predecessor in the predecessor array.
    pub pred_start: u64,
    /// Tensor arguments.
    pub tensors: [TensorRecord; MAX_TASK_TENSORS],
    /// Scalar arguments.
    pub scalars: [u64; MAX_TASK_SCALARS],
}
const _: () = {
    assert!(size_of::<TaskRecord>() == 160);
    assert!(offset_of!(TaskRecord, pred_start) == 24);
    assert!(offset_of!(TaskRecord, tensors) == 32);
    assert!(offset_of!(TaskRecord, scalars) == 128);
};
// SAFETY: repr(C), u32/u64 fields tiling 0..160 without padding (offsets asserted above).
unsafe impl Record for TaskRecord {}

/// One entry of a core's two-entry dispatch payload (`payload + (id & 1)`).
///
/// # Layout
/// 256 bytes, align 64: [`DispatchArgs`] at 0 (192 bytes, written by the AICPU before it writes
/// the dispatch id to `DATA_MAIN_BASE`), then [`PayloadStatus`] at 192 (one cache line of its
/// own, written by the core before it writes `FIN`), so the two directions never share a line —
/// the Path B lesson (docs/design/launch.md).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchPayload {
    /// AICPU → core.
    pub args: DispatchArgs,
    /// Core → AICPU.
    pub status: PayloadStatus,
}
const _: () = {
    assert!(size_of::<DispatchPayload>() == 256);
    assert!(offset_of!(DispatchPayload, status) == 192);
};
// SAFETY: repr(C), two Records tiling 0..256 without padding (offsets asserted above).
unsafe impl Record for DispatchPayload {}

/// The AICPU-written part of a [`DispatchPayload`].
///
/// # Layout
/// 192 bytes, align 8: `task` u64 at 0, six u32 (`kernel_id`, `block_idx`, `block_dim`,
/// `n_tensors`, `n_scalars`, `roles`) at 8..32, `tensors` at 32, `scalars` at 128,
/// `_reserved0` at 160.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchArgs {
    /// Task sequence number.
    pub task: u64,
    /// Kernel id.
    pub kernel_id: u32,
    /// This block's index in `0..block_dim`.
    pub block_idx: u32,
    /// SPMD block count of the task.
    pub block_dim: u32,
    /// Used entries of `tensors`.
    pub n_tensors: u32,
    /// Used entries of `scalars`.
    pub n_scalars: u32,
    /// Roles, 2 bits per tensor.
    pub roles: u32,
    /// Tensor arguments.
    pub tensors: [TensorRecord; MAX_TASK_TENSORS],
    /// Scalar arguments.
    pub scalars: [u64; MAX_TASK_SCALARS],
    _reserved0: [u64; 4],
}
const _: () = {
    assert!(size_of::<DispatchArgs>() == 192);
    assert!(offset_of!(DispatchArgs, tensors) == 32);
    assert!(offset_of!(DispatchArgs, scalars) == 128);
    assert!(offset_of!(DispatchArgs, _reserved0) == 160);
};
// SAFETY: repr(C), u32/u64 fields tiling 0..192 without padding (offsets asserted above).
unsafe impl Record for DispatchArgs {}

/// Offset of the core-written line inside a [`DispatchPayload`].
pub const PAYLOAD_CORE_LINE: usize = offset_of!(DispatchPayload, status);

/// The core-written part of a [`DispatchPayload`].
///
/// # Layout
/// 64 bytes: `status` u32 at 0, `fault_code` u32 at 4, `fault_detail` at 8, `_reserved` at 32.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PayloadStatus {
    /// [`PAYLOAD_PENDING`], [`PAYLOAD_OK`] or [`PAYLOAD_FAULT`].
    pub status: u32,
    /// `KernelFault` code when `status` is [`PAYLOAD_FAULT`].
    pub fault_code: u32,
    /// Fault details.
    pub fault_detail: [u64; 3],
    _reserved: [u64; 4],
}
const _: () = assert!(size_of::<PayloadStatus>() == 64);
// SAFETY: repr(C), u32/u64 fields tiling 0..64 without padding.
unsafe impl Record for PayloadStatus {}

impl PayloadStatus {
    /// A status word with its details.
    pub fn new(status: u32, fault_code: u32, fault_detail: [u64; 3]) -> PayloadStatus {
        PayloadStatus { status, fault_code, fault_detail, _reserved: [0; 4] }
    }

    /// The same status with the core's DFX timestamps (receive, start, end; device cycles).
    pub fn with_times(mut self, receive: u64, start: u64, end: u64) -> PayloadStatus {
        self._reserved = [receive, start, end, 0];
        self
    }

    /// The DFX timestamps `[receive, start, end]` (zeros when the core took none).
    pub fn times(&self) -> [u64; 3] {
        [self._reserved[0], self._reserved[1], self._reserved[2]]
    }
}

/// What the AICPU reports back to the host: live progress and the final status.
///
/// # Layout
/// 192 bytes, align 64. `tasks_completed` (8) and `tasks_submitted` (16) are updated live with
/// relaxed atomics (the host reads them for progress); the rest is written once by the last
/// AICPU thread out, before the launch completes.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunResult {
    /// [`RESULT_RUNNING`], [`RESULT_OK`] or [`RESULT_FAILED`].
    pub status: u32,
    /// Error code (`crate::error::DeviceFault` encoding) when failed.
    pub error_code: u32,
    /// Tasks finished so far.
    pub tasks_completed: u64,
    /// Tasks submitted so far.
    pub tasks_submitted: u64,
    /// The task the error concerns.
    pub error_task: u64,
    /// Error details.
    pub error_detail: [u64; 4],
    /// Finished tasks per kernel id.
    pub kernel_counts: [u64; KERNEL_COUNT_SLOTS],
}
const _: () = {
    assert!(size_of::<RunResult>() == 192);
    assert!(offset_of!(RunResult, tasks_completed) == 8);
    assert!(offset_of!(RunResult, tasks_submitted) == 16);
    assert!(offset_of!(RunResult, kernel_counts) == 64);
};
// SAFETY: repr(C), u32/u64 fields tiling 0..192 without padding (offsets asserted above).
unsafe impl Record for RunResult {}

/// Rounds `n` up to a multiple of 64.
pub const fn align64(n: u64) -> u64 {
    (n + 63) & !63
}

/// A translated range of device memory, accessed only with atomics.
#[derive(Clone, Copy, Debug)]
pub struct ImageView {
    base: *mut u8,
    len: usize,
    addr: u64,
}

// SAFETY: the view is a pointer into device memory that the `DeviceOps` contract keeps valid for
// the run; every access through it is atomic, so sharing it between threads is sound.
unsafe impl Send for ImageView {}
// SAFETY: as for Send.
unsafe impl Sync for ImageView {}

impl ImageView {
    /// Translates `[addr, addr + len)`.
    ///
    /// # Errors
    /// When the range is not live device memory, or `addr` is not 8-byte aligned.
    pub fn new(ops: &dyn DeviceOps, addr: u64, len: u64) -> Result<ImageView, TranslateError> {
        let base = ops.translate(addr, len)?;
        if base as usize % 8 != 0 {
            return Err(TranslateError { addr, len, reason: "not 8-byte aligned".into() });
        }
        let len = usize::try_from(len).map_err(|_| TranslateError {
            addr,
            len,
            reason: "too large for this host".into(),
        })?;
        Ok(ImageView { base, len, addr })
    }

    /// Device address of the view's start.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[track_caller]
    fn check(&self, off: usize, len: usize, align: usize) {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len) && off % align == 0,
            "image access {off}+{len} outside the {}-byte view or misaligned",
            self.len
        );
    }

    /// The 32-bit word at `off`.
    ///
    /// # Panics
    /// When `off` is out of bounds or not 4-aligned (a programming error).
    #[track_caller]
    pub fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4, 4);
        // SAFETY: in bounds and 4-aligned (checked; the base is 8-aligned); the memory is valid
        // for the run (DeviceOps contract) and only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast()) }
    }

    /// The 64-bit word at `off`.
    ///
    /// # Panics
    /// When `off` is out of bounds or not 8-aligned (a programming error).
    #[track_caller]
    pub fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8, 8);
        // SAFETY: in bounds and 8-aligned (checked; the base is 8-aligned); the memory is valid
        // for the run (DeviceOps contract) and only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(off).cast()) }
    }

    /// Copies a record out of the view (relaxed word loads; ordering comes from the protocol).
    ///
    /// # Panics
    /// When the record does not fit at `off` or `off` is not 8-aligned.
    #[track_caller]
    pub fn read_record<T: Record>(&self, off: usize) -> T {
        let n = size_of::<T>();
        self.check(off, n, 8);
        let mut out = std::mem::MaybeUninit::<T>::uninit();
        let dst = out.as_mut_ptr().cast::<u64>();
        for i in 0..n / 8 {
            // Relaxed: the dispatch protocol's register Acquire (or the launch) orders this read
            // after the writer's stores; nothing pairs with the individual word.
            let w = self.u64_at(off + 8 * i).load(Ordering::Relaxed);
            // SAFETY: `i < size_of::<T>() / 8` and T is at least 8-aligned-sized (Record), so the
            // write stays inside `out`; write_unaligned has no alignment requirement.
            unsafe { dst.add(i).write_unaligned(w) };
        }
        // SAFETY: every byte of `out` was written above (size is a multiple of 8, Record), and
        // any bit pattern is a valid T (Record).
        unsafe { out.assume_init() }
    }

    /// Copies a record into the view (relaxed word stores; ordering comes from the protocol).
    ///
    /// # Panics
    /// When the record does not fit at `off` or `off` is not 8-aligned.
    #[track_caller]
    pub fn write_record<T: Record>(&self, off: usize, value: &T) {
        let n = size_of::<T>();
        self.check(off, n, 8);
        let src = (value as *const T).cast::<u64>();
        for i in 0..n / 8 {
            // SAFETY: `i < size_of::<T>() / 8`, so the read stays inside `*value`; every byte of
            // a Record is initialised; read_unaligned has no alignment requirement.
            let w = unsafe { src.add(i).read_unaligned() };
            // Relaxed: published by the following register Release (or the end of the launch).
            self.u64_at(off + 8 * i).store(w, Ordering::Relaxed);
        }
    }
}

/// A translated `f32` tensor range, accessed with relaxed 32-bit atomics.
///
/// Tasks that touch overlapping bytes are ordered by the tensor map, so the relaxed accesses
/// never need to synchronise anything themselves; being atomic, a malformed graph that lets two
/// kernels touch the same element yields a wrong number, never undefined behaviour.
#[derive(Clone, Copy, Debug)]
pub struct F32Slice {
    base: *mut u8,
    len: usize,
}

/// Translations a device thread already made during the current run, direct-mapped by address
/// (`N` slots).
///
/// Sound because a translated range stays valid until the host frees it, which it does only
/// after every device thread of the run has returned (`DeviceOps` contract), and a cache lives
/// in one device thread's part of one run.
pub(crate) struct TranslateCache<const N: usize> {
    slots: [Option<(u64, u64, F32Slice)>; N],
}

impl<const N: usize> TranslateCache<N> {
    pub(crate) fn new() -> Self {
        Self { slots: [None; N] }
    }

    /// The slice of `bytes` bytes at `addr`, translated once per run.
    pub(crate) fn get(
        &mut self,
        ops: &dyn DeviceOps,
        addr: u64,
        bytes: u64,
    ) -> Result<F32Slice, TranslateError> {
        let i = ((addr >> 6) as usize ^ (bytes as usize)) % N;
        if let Some((a, b, s)) = self.slots[i] {
            if a == addr && b == bytes {
                return Ok(s);
            }
        }
        let s = F32Slice::new(ops, addr, bytes)?;
        self.slots[i] = Some((addr, bytes, s));
        Ok(s)
    }
}

impl F32Slice {
    /// Translates a tensor of `bytes` bytes at `addr`.
    ///
    /// # Errors
    /// When the range is not live device memory, or not 4-byte aligned / sized.
    pub fn new(ops: &dyn DeviceOps, addr: u64, bytes: u64) -> Result<F32Slice, TranslateError> {
        if addr % 4 != 0 || bytes % 4 != 0 {
            return Err(TranslateError {
                addr,
                len: bytes,
                reason: "not a whole number of aligned f32".into(),
            });
        }
        let base = ops.translate(addr, bytes)?;
        Ok(F32Slice { base, len: (bytes / 4) as usize })
    }

    /// A slice over host cells, for the kernels' host implementation
    /// ([`super::kernels::execute_host`]); crate-private, so no slice outlives the cells it
    /// points at (`execute_host` drops them before returning).
    pub(crate) fn from_cells(cells: &[AtomicU32]) -> F32Slice {
        F32Slice { base: cells.as_ptr().cast_mut().cast(), len: cells.len() }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The first byte, for a bulk copy of the whole view by a thread that knows no one writes it
    /// meanwhile.
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.base
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[track_caller]
    fn cell(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.len, "tensor index {i} out of {}", self.len);
        // SAFETY: `i < len`, so the 4 bytes are inside the translated range, which is 4-aligned
        // (checked in `new`) and valid for the run (DeviceOps contract), or inside the host
        // cells of `from_cells`, which outlive every use (`execute_host`); accessed atomically.
        unsafe { AtomicU32::from_ptr(self.base.add(4 * i).cast()) }
    }

    /// Element `i`.
    ///
    /// # Panics
    /// When `i` is out of range.
    #[track_caller]
    pub fn get(&self, i: usize) -> f32 {
        // Relaxed: ordered by the dispatch protocol (see the type doc).
        f32::from_bits(self.cell(i).load(Ordering::Relaxed))
    }

    /// Sets element `i`.
    ///
    /// # Panics
    /// When `i` is out of range.
    #[track_caller]
    pub fn set(&self, i: usize, v: f32) {
        // Relaxed: published by the core's FIN Release (see the type doc).
        self.cell(i).store(v.to_bits(), Ordering::Relaxed);
    }

    /// The bits of the `dtype` element `at` elements into the range (zero-extended): the range
    /// read as a packed little-endian array of `dtype`.
    ///
    /// # Panics
    /// When the element lies past the range.
    #[track_caller]
    pub fn load_elem(&self, dtype: DType, at: u64) -> u64 {
        let (word, shift, size) = self.locate(dtype, at);
        // Relaxed: as `get`.
        let w = u64::from(self.cell(word).load(Ordering::Relaxed));
        match size {
            8 => w | u64::from(self.cell(word + 1).load(Ordering::Relaxed)) << 32,
            4 => w,
            n => (w >> shift) & ((1 << (8 * n)) - 1),
        }
    }

    /// Stores the `dtype` element `at` elements into the range (the low bytes of `bits`). An
    /// element narrower than a word changes only its own bytes, so blocks writing neighbouring
    /// elements of one word never undo each other's writes.
    ///
    /// # Panics
    /// When the element lies past the range.
    #[track_caller]
    pub fn store_elem(&self, dtype: DType, at: u64, bits: u64) {
        let (word, shift, size) = self.locate(dtype, at);
        let cell = self.cell(word);
        // Relaxed throughout: as `set`.
        match size {
            8 => {
                cell.store(bits as u32, Ordering::Relaxed);
                self.cell(word + 1).store((bits >> 32) as u32, Ordering::Relaxed);
            }
            4 => cell.store(bits as u32, Ordering::Relaxed),
            n => {
                let mask = ((1u32 << (8 * n)) - 1) << shift;
                cell.fetch_and(!mask, Ordering::Relaxed);
                cell.fetch_or(((bits as u32) << shift) & mask, Ordering::Relaxed);
            }
        }
    }

    /// The word, bit shift and size of element `at` of `dtype`.
    #[track_caller]
    fn locate(&self, dtype: DType, at: u64) -> (usize, u32, usize) {
        let size = dtype.size();
        let byte = at.checked_mul(size as u64).and_then(|b| usize::try_from(b).ok());
        let byte = byte.unwrap_or(usize::MAX);
        assert!(byte / 4 < self.len, "element {at} of {dtype:?} past {} words", self.len);
        (byte / 4, (byte % 4 * 8) as u32, size)
    }
}

/// The byte image of a record (host side, for building the image before upload).
pub fn as_bytes<T: Record>(v: &T) -> &[u8] {
    // SAFETY: [1] `v` is a live reference, so size_of::<T>() bytes at it are readable for the
    // borrow; [2] a Record has no padding, so every byte is initialised; [3] u8 needs no alignment.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

/// Reads a record from its byte image (host side, after a download); `None` on a length
/// mismatch.
pub fn from_bytes<T: Record>(b: &[u8]) -> Option<T> {
    if b.len() != size_of::<T>() {
        return None;
    }
    // SAFETY: `b` holds exactly size_of::<T>() readable bytes (checked); read_unaligned has no
    // alignment requirement; every bit pattern is a valid Record.
    Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}
