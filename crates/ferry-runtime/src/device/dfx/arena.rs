//! ArgsDump on the device: a scheduler thread's payload arena and its dumps (one chain of the
//! arguments per task and stage, `ferry_abi::args_dump`, and payload copies behind the arena gate
//! of docs/dfx.md).
use super::super::ops::DeviceOps;
use super::super::task::{ResolvedTask, Role};
use super::super::wrap;
use super::{role_code, ThreadDfx};
use ferry_abi::args_dump::{self, ArgBody, ArgsChainError, ArgsChainHead, ChainArg};
use ferry_abi::records::{DType, ARG_ROLE_SCALAR, ARG_STAGE_BEFORE_DISPATCH};
use ferry_dfx::DeviceRegion;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How much of the next payload's space [`ArgsArena::prefetch_write`] hints after each copy:
/// four cache lines (a storm tensor is one line; a larger payload's first lines still start
/// early).
const PREFETCH_BYTES: u64 = 256;

/// A scheduler thread's ArgsDump payload arena: a 64-byte header of four counters, then the
/// payload bytes. On the full path it lives in simulated device memory (its device address
/// travels in the ArgsDump directory behind `KernelArgs::dump_data_base`); in process it may be a
/// host block shared by reference.
///
/// Header words: `write_offset` (monotonic device cursor in bytes, written modulo
/// [`size`](Self::size)), `published` (payload records the device has published), `completed`
/// (payloads the host acknowledged, `publish_arena_acks`), `dropped` (arguments lost: the arena
/// gate gave up on their payload, or their chain was dropped, at the write or with its buffer).
pub struct ArgsArena {
    base: std::ptr::NonNull<u8>,
    size: u64,
    _owner: Arc<dyn Send + Sync>,
}

impl std::fmt::Debug for ArgsArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgsArena").field("size", &self.size).finish_non_exhaustive()
    }
}

// SAFETY: every concurrent access to the arena's header goes through atomics; its payload bytes
// are written (`write_from`) and read (`read_into`) with plain copies only while no other thread
// touches them, which the arena protocol orders; the owner keeps the memory alive.
unsafe impl Send for ArgsArena {}
// SAFETY: as for `Send`.
unsafe impl Sync for ArgsArena {}

impl ArgsArena {
    /// Bytes of the counter header in front of the payload bytes.
    pub const HEADER_BYTES: u64 = 64;

    /// Bytes of memory an arena of `bytes` payload bytes needs (header included).
    pub fn bytes_for(bytes: u64) -> u64 {
        Self::HEADER_BYTES + (bytes / 4).max(16) * 4
    }

    /// An arena of `bytes` bytes (rounded down to whole words, at least 64) in host memory.
    pub fn new(bytes: u64) -> ArgsArena {
        let total = Self::bytes_for(bytes);
        let words: Box<[AtomicU64]> = (0..total.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        let base = std::ptr::NonNull::from(&words[0]).cast::<u8>();
        ArgsArena { base, size: total - Self::HEADER_BYTES, _owner: Arc::new(words) }
    }

    /// An arena over `total` bytes of memory someone else owns (header included).
    ///
    /// # Safety
    /// `base` is 8-byte aligned and valid for reads and writes of `total` bytes while `owner`
    /// (or the party that allocated it) keeps it alive, i.e. for as long as this arena is used;
    /// every other access to those bytes is atomic.
    pub unsafe fn from_raw_parts(
        base: std::ptr::NonNull<u8>,
        total: u64,
        owner: Arc<dyn Send + Sync>,
    ) -> ArgsArena {
        let size = (total.saturating_sub(Self::HEADER_BYTES) / 4) * 4;
        ArgsArena { base, size, _owner: owner }
    }

    /// Zeroes the four header counters: a fresh arena's state, for memory whose allocator did not
    /// clear it (a recycled device range keeps its last user's words). A stale `completed` would
    /// let the device's arena gate pass before the host copied a lap's payloads out.
    ///
    /// Call it before any device thread can see the arena.
    pub fn clear_counters(&self) {
        for i in 0..4 {
            // Relaxed: init-time, before the arena's address is handed to the device (the
            // launch that carries it orders these stores).
            self.counter(i).store(0, Ordering::Relaxed);
        }
    }

    fn counter(&self, i: usize) -> &AtomicU64 {
        // SAFETY: the header holds four 8-aligned u64 words inside the live allocation
        // (constructors' contracts), only ever accessed atomically.
        unsafe { &*self.base.as_ptr().add(8 * i).cast::<AtomicU64>() }
    }

    /// Monotonic write cursor in bytes (device-written).
    pub fn write_offset(&self) -> &AtomicU64 {
        self.counter(0)
    }

    /// Payload-bearing records published so far (device-written; a statistic of the header
    /// layout that no protocol step reads).
    pub fn published(&self) -> &AtomicU64 {
        self.counter(1)
    }

    /// Payloads the host has copied out (host-written by the ack hook).
    pub fn completed(&self) -> &AtomicU64 {
        self.counter(2)
    }

    /// Argument records dropped at the arena gate.
    pub fn dropped(&self) -> &AtomicU64 {
        self.counter(3)
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Hands the `len` bytes at physical offset `phys` (word-aligned) of the arena to `out` as
    /// one slice, for one bulk copy; bytes past the arena's end are left out.
    ///
    /// # Safety
    /// No thread writes those bytes during the call. The arena protocol provides that for a
    /// payload whose record was published (the device wrote the bytes before the ready-queue
    /// tail's Release store the host observed) and that the host has not yet acknowledged: the
    /// device overwrites a lap only after its arena gate saw every payload acknowledged.
    pub unsafe fn read_into(&self, phys: u64, len: u64, out: impl FnOnce(&[u8])) {
        let start = phys.min(self.size) & !3;
        let n = (len & !3).min(self.size - start) as usize;
        // SAFETY: `[start, start + n)` lies inside the payload bytes behind the header (bounded
        // above), which the owner keeps alive; nobody writes them meanwhile (the caller).
        let src = unsafe {
            std::slice::from_raw_parts(
                self.base.as_ptr().add(Self::HEADER_BYTES as usize + start as usize),
                n,
            )
        };
        out(src);
    }

    /// Hints that the payload bytes after a payload of `len` bytes at cursor `wo` will be
    /// written soon ([`ferry_dfx::mem::prefetch_write`] of each line of [`PREFETCH_BYTES`] from
    /// the cursor's physical offset, stopping at the arena's end). A hint only: nothing written
    /// or published depends on it.
    fn prefetch_write(&self, wo: u64, len: u64) {
        let phys = wrap(wo + len, self.size);
        let end = (phys + PREFETCH_BYTES).min(self.size);
        let base = self.base.as_ptr().wrapping_add(Self::HEADER_BYTES as usize);
        for p in (phys..end).step_by(64) {
            ferry_dfx::mem::prefetch_write(base.wrapping_add(p as usize));
        }
    }

    /// Copies `len` bytes from `src` into the arena at physical offset `phys` with one bulk copy.
    ///
    /// # Safety
    /// `src` is valid for reads of `len` bytes that no thread writes during the call (a tensor
    /// view whose producers finished and whose consumers have not been released), and
    /// `[phys, phys + len)` lies inside the arena's payload bytes, which the host does not read
    /// until the record naming them is published.
    unsafe fn write_from(&self, phys: u64, src: *const u8, len: u64) {
        debug_assert!(phys + len <= self.size);
        // SAFETY: both ranges are valid (the caller; the arena bytes are inside the live
        // allocation behind the header) and belong to different allocations.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src,
                self.base.as_ptr().add(Self::HEADER_BYTES as usize + phys as usize),
                len as usize,
            )
        };
    }
}

// Every argument index of a task (tensors, then scalars) fits a chain's u16 `arg_index`, so the
// casts in `dump_args` cannot truncate.
const _: () = assert!(
    super::super::image::MAX_TASK_TENSORS + super::super::image::MAX_TASK_SCALARS
        <= u16::MAX as usize
);

/// What an ArgsDump level keeps of a task's arguments (docs/dfx.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DumpLevel {
    /// Only tensors marked with `dump(...)` ([`Task::dump`](super::super::task::Task::dump))
    /// are dumped, and no scalar (level 1, partial).
    pub(crate) marked_only: bool,
    /// Every dumped tensor carries its payload (level 2, full); otherwise only marked ones do
    /// (levels 1 and 3: at level 3, hybrid, the others keep their metadata).
    pub(crate) every_payload: bool,
}

impl DumpLevel {
    /// Level `level` (1 partial, 2 full, 3 hybrid; anything else dumps like full).
    pub(crate) fn of(level: u32) -> DumpLevel {
        DumpLevel { marked_only: level == 1, every_payload: !matches!(level, 1 | 3) }
    }

    /// Whether a tensor argument is dumped, and whether with its payload.
    pub(crate) fn tensor(self, marked: bool) -> (bool, bool) {
        (marked || !self.marked_only, marked || self.every_payload)
    }
}

/// Whether a tensor of `role` is dumped at the stage before dispatch (`before`) or after
/// completion: inputs before, outputs after, inouts at both.
fn dumped_at(role: Role, before: bool) -> bool {
    match role {
        Role::Input => before,
        Role::Output => !before,
        Role::InOut => true,
    }
}

/// Tensor argument `index` of `bytes` bytes (one dimension of `dims.0` elements, contiguous)
/// with its payload's place in the arena (`payload_size` 0: metadata only).
fn tensor_arg<'a>(
    role: Role,
    index: usize,
    payload: (u64, u64, bool),
    dims: &'a (DType, [(u32, u32); 1]),
) -> ChainArg<'a> {
    let (payload_offset, payload_size, truncated) = payload;
    let (dtype, dims) = (dims.0, &dims.1);
    ChainArg {
        role: role_code(role),
        dtype: dtype as u8,
        flags: 0,
        arg_index: index as u16,
        truncated,
        contiguous: true,
        body: ArgBody::Tensor { payload_offset, payload_size, dims, start_offset: 0 },
    }
}

/// The dtype of tensor argument `i` of `task`: a view kernel's (`views`) operand word names it;
/// every other kernel's tensors are f32. ArgsDump and DepGen both record it.
pub(super) fn arg_dtype(views: bool, task: &ResolvedTask, i: usize) -> DType {
    match task.scalars.get(1 + i) {
        Some(&w) if views && 1 + i < task.n_scalars as usize => {
            DType::from_u8((w & 0xf) as u8).unwrap_or(DType::UInt8)
        }
        _ => DType::Float32,
    }
}

/// The dtype of tensor argument `i` of `task` (`bytes` bytes) and its one dimension, in elements
/// of that dtype ([`arg_dtype`]): a view kernel's argument is dumped as the contiguous range its
/// view spans.
fn arg_dims(views: bool, task: &ResolvedTask, i: usize, bytes: u64) -> (DType, [(u32, u32); 1]) {
    let dtype = arg_dtype(views, task, i);
    (dtype, [((bytes / dtype.size() as u64).min(u64::from(u32::MAX)) as u32, 1)])
}

impl ThreadDfx {
    /// Dumps `task`'s arguments of one stage, as the session's level keeps them ([`DumpLevel`]).
    pub(super) fn dump_args(
        &mut self,
        ops: &dyn DeviceOps,
        seq: u64,
        task: &ResolvedTask,
        stage: u8,
    ) {
        let before = stage == ARG_STAGE_BEFORE_DISPATCH;
        let level = self.dump_level;
        if level.marked_only && task.dump_mask == 0 {
            return;
        }
        let head = ArgsChainHead {
            task_id: seq,
            stage,
            func_count: 1,
            func_ids: [task.kernel as u16, 0, 0],
        };
        if self.dump_in_one_pass(&head, task, before) {
            return;
        }
        self.chain_begin(&head);
        // Each argument goes straight into the chain's words from the task (no record first).
        for (i, &(addr, bytes, role)) in task.tensors().iter().enumerate() {
            let (kept, payload) = level.tensor(task.marked(i));
            if !dumped_at(role, before) || !kept {
                continue;
            }
            let mut at = (0, 0, false);
            if payload {
                match self.copy_payload(ops, addr, bytes) {
                    Some(p) => at = p,
                    None => continue,
                }
            }
            self.chain_push(&tensor_arg(role, i, at, &arg_dims(self.views(task), task, i, bytes)));
        }
        if before && !level.marked_only {
            for (k, &v) in task.scalars[..task.n_scalars as usize].iter().enumerate() {
                self.chain_push(&self.scalar_arg(task, k, v));
            }
        }
        self.chain_emit();
    }

    /// Whether `task`'s kernel is a view kernel (built-in or loaded).
    pub(super) fn views(&self, task: &ResolvedTask) -> bool {
        super::super::kernels::spec(task.kernel).is_some_and(|s| s.views)
            || self.custom.is_view(task.kernel)
    }

    /// Scalar `k` of `task` (value bits `v`), typed by the kernel's signature: an f32 scalar
    /// dumps as FLOAT32 bits.
    fn scalar_arg(&self, task: &ResolvedTask, k: usize, v: u64) -> ChainArg<'static> {
        let dtype = self
            .custom
            .scalar_dtype(task.kernel, k)
            .unwrap_or_else(|| super::super::kernels::scalar_dtype(task.kernel, k));
        ChainArg {
            role: ARG_ROLE_SCALAR,
            dtype: dtype as u8,
            flags: 0,
            arg_index: (task.n_tensors as usize + k) as u16,
            truncated: false,
            contiguous: true,
            body: ArgBody::Scalar(v),
        }
    }

    /// The common stage, a handful of arguments none of which carries a payload (every stage
    /// at level 3 whose tensors are unmarked, and the storm's): its chain encoded in one pass
    /// ([`args_dump::put_arg`], then [`args_dump::header`] with the count) and written as one
    /// run, the words [`chain_push`](Self::chain_push) would have built one argument at a
    /// time. `false`, having written nothing, when the stage needs the general path: a payload
    /// to copy (the arena gate may seal the chain half-way), or more arguments than one chain
    /// or the scratch holds (continuation chains).
    fn dump_in_one_pass(
        &mut self,
        head: &ArgsChainHead,
        task: &ResolvedTask,
        before: bool,
    ) -> bool {
        let level = self.dump_level;
        let scalars = if before && !level.marked_only { task.n_scalars as usize } else { 0 };
        let mut out = std::mem::take(&mut self.args_chain);
        let mut len = args_dump::ARGS_CHAIN_HEADER_WORDS;
        let mut args = 0;
        let mut fits = out.len() >= len;
        for (i, &(_, bytes, role)) in task.tensors().iter().enumerate() {
            let (kept, payload) = level.tensor(task.marked(i));
            if !fits || !dumped_at(role, before) || !kept {
                continue;
            }
            fits = !(payload && bytes > 0);
            let dims = arg_dims(self.views(task), task, i, bytes);
            let arg = tensor_arg(role, i, (0, 0, false), &dims);
            match out.get_mut(len..).map(|o| args_dump::put_arg(o, &arg)) {
                Some(Ok(n)) if fits => (len, args) = (len + n, args + 1),
                _ => fits = false,
            }
        }
        for (k, &v) in task.scalars[..scalars].iter().enumerate() {
            if !fits {
                break;
            }
            match out.get_mut(len..).map(|o| args_dump::put_arg(o, &self.scalar_arg(task, k, v))) {
                Some(Ok(n)) => (len, args) = (len + n, args + 1),
                _ => fits = false,
            }
        }
        let head_words = if fits { args_dump::header(head, args).ok() } else { None };
        if let Some(h) = head_words {
            if args > 0 {
                out[..h.len()].copy_from_slice(&h);
                if let Some(w) = self.args.as_mut() {
                    // Nothing to account on success: no payload rides on these arguments; a run
                    // the writer could not place it counts dropped, in arguments, itself.
                    w.record_run(0, &out[..len], args as u64);
                }
            }
        }
        self.args_chain = out;
        head_words.is_some()
    }

    /// Starts the chain of one task's arguments of one stage in the thread's scratch.
    fn chain_begin(&mut self, head: &ArgsChainHead) {
        // A scratch too small for a header (a lane of buffers under 3 words) keeps no chain:
        // every argument is then counted dropped.
        self.chain_head = Some(*head);
        self.chain_len = args_dump::start(&mut self.args_chain, head).unwrap_or(0);
        self.chain_args = 0;
        self.chain_payloads = 0;
    }

    /// Appends argument `r` to the chain; a chain that is full (a buffer's worth, or 255
    /// arguments) is written first and continues in a fresh one with the same header. An
    /// argument that fits no chain is counted dropped.
    fn chain_push(&mut self, r: &ChainArg<'_>) {
        let mut pushed = self.chain_len > 0 && self.try_push(r).is_ok();
        if !pushed && self.chain_args > 0 {
            self.chain_emit();
            pushed = self.try_push(r).is_ok();
        }
        if !pushed {
            if let Some(a) = &self.arena {
                // Relaxed: a counter read after the run.
                a.dropped().fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn try_push(&mut self, r: &ChainArg<'_>) -> Result<(), ArgsChainError> {
        self.chain_len = args_dump::push_arg(&mut self.args_chain, self.chain_len, r)?;
        self.chain_args += 1;
        self.chain_payloads += u64::from(r.payload_size() > 0);
        Ok(())
    }

    /// Writes the chain built so far (if it holds an argument) as one run of the lane and starts
    /// an empty one with the same header. Its payloads count as published once it is written.
    pub(super) fn chain_emit(&mut self) {
        if self.chain_args == 0 {
            return;
        }
        let run = &self.args_chain[..self.chain_len];
        if let Some(w) = self.args.as_mut() {
            if w.record_run(0, run, self.chain_args) {
                self.payloads += self.chain_payloads;
            }
        }
        if let Some(head) = self.chain_head {
            self.chain_begin(&head);
        }
    }

    /// The arena gate and the copy; `None` when the gate gave up (record dropped). An empty
    /// tensor has no payload: `(0, 0, false)`, with no gate and nothing copied.
    #[inline(never)]
    fn copy_payload(
        &mut self,
        ops: &dyn DeviceOps,
        addr: u64,
        bytes: u64,
    ) -> Option<(u64, u64, bool)> {
        if bytes == 0 {
            return Some((0, 0, false));
        }
        let size = self.arena.as_deref()?.size();
        let (len, truncated) = if bytes > size { ((size / 2) & !3, true) } else { (bytes, false) };
        // Relaxed: this thread is the only writer of its cursor.
        let mut wo = self.arena.as_deref()?.write_offset().load(Ordering::Relaxed);
        let phys = wrap(wo, size);
        let full = wo != 0 && phys == 0;
        let crosses = len > size - phys;
        if full || crosses {
            // Seal: publish the metadata buffer so the host can see (and ack) every payload,
            // with the arguments of the chain being built whose payloads are already copied.
            self.chain_emit();
            if let Some(w) = self.args.as_mut() {
                w.flush();
            }
        }
        let arena = self.arena.as_deref()?;
        if full || crosses {
            let target = self.payloads;
            // Relaxed: the header's count of payload records, a statistic nothing pairs with;
            // the acks below are what pair.
            arena.published().store(target, Ordering::Relaxed);
            let budget = self.args.as_ref().map_or(0, |_| self.budget_cycles());
            let start = ops.clock_cycles();
            // Acquire: pairs with the ack hook's Release store of `completed`, after the collector
            // copied those payloads out.
            let acked = |a: &ArgsArena| a.completed().load(Ordering::Acquire) >= target;
            while !acked(arena) {
                if ops.clock_cycles().saturating_sub(start) >= budget {
                    // Relaxed: a counter read after the run.
                    arena.dropped().fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                ops.aicpu_wait(&mut || acked(arena), Some(Duration::from_micros(50)));
            }
            if phys != 0 {
                wo += size - phys;
            }
        }
        let src = self.views.get(ops, addr, len).ok()?;
        // SAFETY: the translation vouched for `len` readable bytes at `src`, valid for the run;
        // the view is stable while it is dumped (before dispatch its producers have finished and
        // nothing else writes it; after completion its consumers are not released yet); the
        // arena range is inside one lap (the gate above moved the cursor to a lap start when it
        // would not fit).
        unsafe { arena.write_from(wrap(wo, size), src.as_ptr(), len) };
        // Relaxed: the host reads the cursor as an overwrite high-water mark only; the payload
        // itself is published with the record.
        arena.write_offset().store(wo + len, Ordering::Relaxed);
        // The next payload's lines: each lap's bytes are fresh to this thread (last written a lap
        // ago, or zeroed at the session's start on another CPU).
        arena.prefetch_write(wo, len);
        Some((wo, len, truncated))
    }

    fn budget_cycles(&self) -> u64 {
        self.dev.regions.args.as_ref().map_or(0, DeviceRegion::budget_cycles)
    }
}
