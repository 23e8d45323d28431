//! The orchestration API: what an orchestration function sees.
//!
//! An orchestration function ([`OrchFn`]) receives a `&mut dyn Orchestrate` and submits
//! [`Task`]s. The same function runs either on the last AICPU thread (device orchestration: the
//! graph is built while it executes) or on the host (host-built graph: the graph is recorded,
//! validated and uploaded during prepare). Dependencies are never stated by hand for data: the
//! tensor map derives them from the byte ranges each task reads and writes (RAW, WAR, WAW).
//! [`Task::after`] adds an explicit control dependency on an earlier task.
use crate::error::SubmitError;

use super::image::{MAX_TASK_SCALARS, MAX_TASK_TENSORS};

/// A tensor of the run: an index into its tensor table (run tensors first, then scratch
/// allocations in the order they were made).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

/// A submitted task: its sequence number in the run (0, 1, 2, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub u64);

/// How a task uses a tensor argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Read only.
    Input,
    /// Written (previous contents ignored).
    Output,
    /// Read and written.
    InOut,
}

impl Role {
    /// Whether the task writes the range.
    pub fn writes(self) -> bool {
        !matches!(self, Role::Input)
    }

    /// 2-bit wire encoding (1 input, 2 output, 3 inout).
    pub fn bits(self) -> u32 {
        match self {
            Role::Input => 1,
            Role::Output => 2,
            Role::InOut => 3,
        }
    }

    /// Decodes [`bits`](Self::bits).
    pub fn from_bits(b: u32) -> Option<Role> {
        match b & 3 {
            1 => Some(Role::Input),
            2 => Some(Role::Output),
            3 => Some(Role::InOut),
            _ => None,
        }
    }
}

/// A range of `f32` elements of one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct View {
    /// The tensor.
    pub tensor: TensorId,
    /// First element.
    pub offset: u64,
    /// Elements; `u64::MAX` means "to the end of the tensor".
    pub len: u64,
}

impl View {
    /// The whole tensor.
    pub fn whole(tensor: TensorId) -> View {
        View { tensor, offset: 0, len: u64::MAX }
    }

    /// Elements `offset..offset + len`.
    pub fn range(tensor: TensorId, offset: u64, len: u64) -> View {
        View { tensor, offset, len }
    }
}

impl From<TensorId> for View {
    fn from(t: TensorId) -> View {
        View::whole(t)
    }
}

/// A tensor argument: a view, a role and its ArgsDump mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Arg {
    /// What it touches.
    pub view: View,
    /// How.
    pub role: Role,
    /// Marked for ArgsDump ([`Task::dump`]): at level 1 only marked arguments are dumped, at
    /// level 3 only marked tensors carry their payload.
    pub dump: bool,
}

/// Explicit control dependencies a task can carry.
pub const MAX_TASK_AFTER: usize = 4;

/// One task: kernel id, tensor arguments with roles, scalars, SPMD block count. Fixed capacity,
/// no allocation, so submitting is cheap on the AICPU.
///
/// ```
/// use ferry_runtime::device::task::{Task, TensorId};
/// use ferry_runtime::device::kernels::K_ADD;
/// let t = Task::new(K_ADD).input(TensorId(0)).input(TensorId(1)).output(TensorId(2)).blocks(4);
/// assert_eq!(t.args().len(), 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task {
    /// Kernel id.
    pub kernel: u32,
    /// SPMD block count (default 1).
    pub block_dim: u32,
    args: [Option<Arg>; MAX_TASK_TENSORS],
    n_args: u8,
    scalars: [u64; MAX_TASK_SCALARS],
    n_scalars: u8,
    after: [u64; MAX_TASK_AFTER],
    n_after: u8,
    overflow: bool,
}

impl Task {
    /// A task running `kernel` with one block and no arguments yet.
    pub fn new(kernel: u32) -> Task {
        Task {
            kernel,
            block_dim: 1,
            args: [None; MAX_TASK_TENSORS],
            n_args: 0,
            scalars: [0; MAX_TASK_SCALARS],
            n_scalars: 0,
            after: [0; MAX_TASK_AFTER],
            n_after: 0,
            overflow: false,
        }
    }

    /// Adds a tensor argument.
    pub fn arg(mut self, view: impl Into<View>, role: Role) -> Task {
        if (self.n_args as usize) < MAX_TASK_TENSORS {
            self.args[self.n_args as usize] = Some(Arg { view: view.into(), role, dump: false });
            self.n_args += 1;
        } else {
            self.overflow = true;
        }
        self
    }

    /// Adds an input.
    pub fn input(self, view: impl Into<View>) -> Task {
        self.arg(view, Role::Input)
    }

    /// Adds an output.
    pub fn output(self, view: impl Into<View>) -> Task {
        self.arg(view, Role::Output)
    }

    /// Adds an inout.
    pub fn inout(self, view: impl Into<View>) -> Task {
        self.arg(view, Role::InOut)
    }

    /// Marks the tensor argument added last for ArgsDump, the original runtime's `dump(...)`:
    /// `--dump-args 1` (partial) dumps only marked arguments, `3` (hybrid) dumps every
    /// argument's metadata and the payload of marked tensors only, `2` (full) dumps everything
    /// whatever the marks. Without a tensor argument yet it does nothing.
    ///
    /// ```
    /// use ferry_runtime::device::task::{Task, TensorId};
    /// use ferry_runtime::device::kernels::K_ADD;
    /// let t = Task::new(K_ADD).input(TensorId(0)).input(TensorId(1)).output(TensorId(2)).dump();
    /// let marks: Vec<bool> = t.args().map(|a| a.dump).collect();
    /// assert_eq!(marks, [false, false, true]);
    /// ```
    pub fn dump(mut self) -> Task {
        if let Some(Some(a)) = self.args[..self.n_args as usize].last_mut() {
            a.dump = true;
        }
        self
    }

    /// Adds a raw 64-bit scalar.
    pub fn scalar(mut self, v: u64) -> Task {
        if (self.n_scalars as usize) < MAX_TASK_SCALARS {
            self.scalars[self.n_scalars as usize] = v;
            self.n_scalars += 1;
        } else {
            self.overflow = true;
        }
        self
    }

    /// Adds an `f32` scalar (its bits).
    pub fn scalar_f32(self, v: f32) -> Task {
        self.scalar(u64::from(v.to_bits()))
    }

    /// Sets the SPMD block count.
    pub fn blocks(mut self, n: u32) -> Task {
        self.block_dim = n;
        self
    }

    /// Adds an explicit dependency on an earlier task.
    pub fn after(mut self, t: TaskId) -> Task {
        if (self.n_after as usize) < MAX_TASK_AFTER {
            self.after[self.n_after as usize] = t.0;
            self.n_after += 1;
        } else {
            self.overflow = true;
        }
        self
    }

    /// The tensor arguments.
    pub fn args(&self) -> impl ExactSizeIterator<Item = Arg> + '_ {
        self.args[..self.n_args as usize].iter().map(|a| {
            a.unwrap_or(Arg {
                view: View::whole(TensorId(u32::MAX)),
                role: Role::Input,
                dump: false,
            })
        })
    }

    /// The scalars.
    pub fn scalars(&self) -> &[u64] {
        &self.scalars[..self.n_scalars as usize]
    }

    /// The explicit dependencies.
    pub fn after_ids(&self) -> &[u64] {
        &self.after[..self.n_after as usize]
    }

    /// Whether more arguments were added than a task can carry.
    pub fn is_overflowed(&self) -> bool {
        self.overflow
    }
}

/// Size of a tensor as the orchestration sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Device address.
    pub addr: u64,
    /// Elements (`f32`).
    pub len: u64,
}

/// Where a scope was opened, as ScopeStats records it: a source file (basename, at most 31
/// bytes are kept) and a line. The original runtime's `PTO2_SCOPE` records its own `__FILE__`
/// and `__LINE__`; an interpreter records the position of the scope in what it runs (the
/// workload interpreter: [`super::workload::SITE_FILE`] and the scope's word in the program),
/// so a host-side table can name the scope after the fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScopeSite {
    file: [u8; 32],
    /// The line (or position) inside `file`.
    pub line: u32,
}

impl ScopeSite {
    /// The site `file:line`; `file` is truncated to 31 bytes at a char boundary.
    pub fn new(file: &str, line: u32) -> ScopeSite {
        let mut n = file.len().min(31);
        while !file.is_char_boundary(n) {
            n -= 1;
        }
        let mut f = [0; 32];
        f[..n].copy_from_slice(&file.as_bytes()[..n]);
        ScopeSite { file: f, line }
    }

    /// The file, NUL-padded to 32 bytes (the ScopeStats record's `site_file_basename`).
    pub fn file_bytes(&self) -> &[u8; 32] {
        &self.file
    }

    /// The file as text (`""` when it is not UTF-8).
    pub fn file(&self) -> &str {
        let n = self.file.iter().position(|&b| b == 0).unwrap_or(self.file.len());
        core::str::from_utf8(&self.file[..n]).unwrap_or("")
    }
}

/// What an orchestration function can do. Object safe; implemented by the device orchestrator
/// (`crate::device::orch::DeviceOrchestrator`) and the host graph builder
/// (`crate::host::graph::GraphBuilder`).
pub trait Orchestrate {
    /// Tensors in the run's table (run tensors plus scratch allocations so far).
    fn tensor_count(&self) -> u32;

    /// A tensor's address and length.
    ///
    /// # Errors
    /// [`SubmitError::MissingTensor`] (with `task` = the next task's number).
    fn tensor(&self, id: TensorId) -> Result<TensorInfo, SubmitError>;

    /// Scalars in the run's table.
    fn scalar_count(&self) -> u32;

    /// Scalar `index` of the run.
    ///
    /// # Errors
    /// [`SubmitError::MissingScalar`].
    fn scalar(&self, index: u32) -> Result<u64, SubmitError>;

    /// Submits a task; its dependencies come from the tensor map and [`Task::after`].
    ///
    /// # Errors
    /// Any [`SubmitError`] naming the problem; nothing is submitted then.
    fn submit(&mut self, task: &Task) -> Result<TaskId, SubmitError>;

    /// Opens a scope: scratch tensors allocated from here on are released at the matching
    /// [`scope_end`](Self::scope_end).
    fn scope_begin(&mut self);

    /// [`scope_begin`](Self::scope_begin) at a known site: ScopeStats records `site` instead
    /// of the orchestrator's default (`orchestration:<depth>`). Implementations that record
    /// nothing per scope open it as `scope_begin` does.
    fn scope_begin_at(&mut self, site: ScopeSite) {
        let _ = site;
        self.scope_begin();
    }

    /// Closes the innermost scope and releases its scratch tensors. Their memory is reused by
    /// later allocations; the tensor map orders the reuse after every earlier access.
    ///
    /// # Errors
    /// [`SubmitError::ScopeUnderflow`] without an open scope.
    fn scope_end(&mut self) -> Result<(), SubmitError>;

    /// Allocates a scratch tensor of `len` `f32` elements in the run's scratch arena.
    ///
    /// # Errors
    /// [`SubmitError::ScratchExhausted`].
    fn alloc_scratch(&mut self, len: u64) -> Result<TensorId, SubmitError>;

    /// Reads `out.len()` 32-bit words of tensor `tensor` from word `offset` (the bits of its
    /// `f32` elements): how an interpreted orchestration reads its program argument (see
    /// `crate::device::workload`). The default reads nothing.
    ///
    /// # Errors
    /// [`SubmitError::BadProgram`] when the orchestrator cannot read tensors or the range is not
    /// inside the tensor.
    fn read_words(
        &self,
        tensor: TensorId,
        offset: u64,
        out: &mut [u32],
    ) -> Result<(), SubmitError> {
        let _ = (tensor, offset, out);
        Err(SubmitError::BadProgram {
            at: 0,
            fault: crate::device::workload::ProgramFault::Unreadable,
        })
    }

    /// Makes words `offset..offset + words` of `tensor` readable with the values every task
    /// submitted so far that writes them produces: the device orchestrator waits until those
    /// tasks completed; the host graph builder, whose graph has not run, refuses a range a
    /// task writes with [`SubmitError::PendingRead`]. The default has no tasks to wait for.
    ///
    /// # Errors
    /// [`SubmitError::PendingRead`], [`SubmitError::Aborted`], [`SubmitError::MissingTensor`].
    fn settle(&mut self, tensor: TensorId, offset: u64, words: u64) -> Result<(), SubmitError> {
        let _ = (tensor, offset, words);
        Ok(())
    }
}

/// An orchestration function: the graph of one callable. A plain function pointer, so the
/// device half can receive it from an orchestration shared object later.
pub type OrchFn = fn(&mut dyn Orchestrate) -> Result<(), SubmitError>;

/// A task after validation: kernel, block count and tensor arguments resolved to device ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolvedTask {
    /// Kernel id.
    pub kernel: u32,
    /// SPMD block count.
    pub block_dim: u32,
    /// `(addr, bytes, role)` per tensor argument.
    pub tensors: [(u64, u64, Role); MAX_TASK_TENSORS],
    /// Used entries of `tensors`.
    pub n_tensors: u32,
    /// Scalars.
    pub scalars: [u64; MAX_TASK_SCALARS],
    /// Used entries of `scalars`.
    pub n_scalars: u32,
    /// ArgsDump marks ([`Task::dump`]): bit `i` set when tensor argument `i` is marked.
    pub dump_mask: u32,
}

impl ResolvedTask {
    /// No kernel, no block, no argument: the task of a free slot, of a core before its first
    /// dispatch, and the start of a task read from a host-built graph.
    pub const EMPTY: ResolvedTask = ResolvedTask {
        kernel: 0,
        block_dim: 0,
        tensors: [(0, 0, Role::Input); MAX_TASK_TENSORS],
        n_tensors: 0,
        scalars: [0; MAX_TASK_SCALARS],
        n_scalars: 0,
        dump_mask: 0,
    };

    /// The used tensor entries.
    pub fn tensors(&self) -> &[(u64, u64, Role)] {
        &self.tensors[..self.n_tensors as usize]
    }

    /// Whether tensor argument `i` is marked for ArgsDump.
    pub fn marked(&self, i: usize) -> bool {
        i < 32 && self.dump_mask & (1 << i) != 0
    }

    /// Role bits, 2 per tensor.
    pub fn role_bits(&self) -> u32 {
        self.tensors().iter().enumerate().fold(0, |acc, (i, t)| acc | (t.2.bits() << (2 * i)))
    }
}

/// Validates `task` (sequence number `seq`) against the kernel table (the built-in kernels and
/// the loaded ones in `custom`) and the tensor table, and
/// resolves its views to device ranges. Shared by both orchestrators, so both refuse the same
/// workloads with the same errors.
///
/// # Errors
/// The first problem found, as a [`SubmitError`].
pub fn resolve(
    seq: u64,
    task: &Task,
    tensors: &dyn Fn(u32) -> Option<TensorInfo>,
    tensor_count: u32,
    custom: &super::custom::CustomKernels,
) -> Result<ResolvedTask, SubmitError> {
    if task.is_overflowed() {
        return Err(SubmitError::TooManyArgs { task: seq });
    }
    let spec = super::custom::shape(task.kernel, custom)
        .ok_or(SubmitError::UnknownKernel { task: seq, kernel: task.kernel })?;
    let nt = task.args().len() as u32;
    let ns = task.scalars().len() as u32;
    if nt < spec.tensors.0 || nt > spec.tensors.1 || ns < spec.scalars {
        return Err(SubmitError::ArgCount {
            task: seq,
            kernel: task.kernel,
            tensors: nt,
            scalars: ns,
        });
    }
    if task.block_dim == 0 {
        return Err(SubmitError::ZeroBlockDim { task: seq });
    }
    if task.block_dim > spec.max_blocks {
        return Err(SubmitError::BlockDimTooLarge {
            task: seq,
            kernel: task.kernel,
            block_dim: task.block_dim,
            max: spec.max_blocks,
        });
    }
    for &a in task.after_ids() {
        if a >= seq {
            return Err(SubmitError::UnknownDependency { task: seq, after: a });
        }
    }
    let mut r = ResolvedTask {
        kernel: task.kernel,
        block_dim: task.block_dim,
        tensors: [(0, 0, Role::Input); MAX_TASK_TENSORS],
        n_tensors: nt,
        scalars: [0; MAX_TASK_SCALARS],
        n_scalars: ns,
        dump_mask: 0,
    };
    r.scalars[..ns as usize].copy_from_slice(task.scalars());
    for (i, a) in task.args().enumerate() {
        let t = a.view.tensor.0;
        let info = tensors(t).ok_or(SubmitError::MissingTensor {
            task: seq,
            tensor: t,
            count: tensor_count,
        })?;
        let len = if a.view.len == u64::MAX {
            info.len.saturating_sub(a.view.offset)
        } else {
            a.view.len
        };
        if a.view.offset.checked_add(len).is_none_or(|end| end > info.len) {
            return Err(SubmitError::ViewOutOfBounds {
                task: seq,
                tensor: t,
                offset: a.view.offset,
                len,
                size: info.len,
            });
        }
        r.tensors[i] = (info.addr + 4 * a.view.offset, 4 * len, a.role);
        r.dump_mask |= u32::from(a.dump) << i;
    }
    Ok(r)
}
