//! The safe layer an orchestration library is written in: [`Orch`] (what a function sees),
//! [`TaskSpec`] and [`OrchView`] (what it submits), [`OrchError`], and the
//! [`orchestration_library!`](crate::orchestration_library) macro with the trampoline it
//! expands to (it catches panics, so this layer needs `std`).
use crate::dtype::DType;
use crate::orch_lib::{
    OrchArg, OrchContext, OrchLibApi, OrchScalar, OrchTask, DIR_IN, DIR_INOUT, DIR_OUT,
    KERNEL_NONE, MAX_ARG_DIMS, MAX_TASK_AFTER, MAX_TASK_ARGS, MAX_TASK_SCALARS,
    ORCH_LIB_ABI_VERSION, ORCH_STATUS_BAD_TABLE, TASK_VIEW_SCALARS,
};
use crate::services::{STATUS_OK, STATUS_PANIC, STATUS_RUNTIME_BASE};

/// Why an orchestration function stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrchError {
    /// ferry refused a call (the status it returned); the run fails with the cause ferry
    /// recorded (a bad kernel id, a view outside its tensor, …).
    Refused(i32),
    /// The function's own failure, with a code of its choosing (1..1000): the run fails naming
    /// the library, the function, the task it was about to submit and this code.
    Failed(i32),
    /// A task was built with more arguments, scalars or dependencies than it can carry, or a
    /// view with more than four dimensions.
    TooMany,
}

impl OrchError {
    /// The status the entry returns for this error.
    pub fn status(self) -> i32 {
        match self {
            OrchError::Refused(s) => s,
            OrchError::Failed(c) => c.clamp(1, STATUS_RUNTIME_BASE - 1),
            OrchError::TooMany => crate::services::STATUS_INVALID_ARGUMENT,
        }
    }
}

impl core::fmt::Display for OrchError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            OrchError::Refused(s) => write!(f, "ferry refused the call (status {s})"),
            OrchError::Failed(c) => write!(f, "failed with code {c}"),
            OrchError::TooMany => write!(f, "too many arguments, scalars or dependencies"),
        }
    }
}

impl std::error::Error for OrchError {}

/// A tensor the function names: a run tensor (`Tensor(0)` …) or one it allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tensor(pub u32);

/// A submitted task, to depend on with [`TaskSpec::after`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskHandle(pub u64);

/// A view of a tensor: the whole tensor as words, or an N-d view of typed elements.
///
/// ```
/// use ferry_kernel_abi::orch::{OrchView, Tensor};
/// use ferry_kernel_abi::DType;
/// // rows 2..4 of a [8, 64] bf16 matrix
/// let v = OrchView::nd(Tensor(0), DType::BFloat16, 2 * 64, &[2, 64]);
/// assert_eq!(v.numel(), 128);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrchView {
    arg: OrchArg,
}

impl OrchView {
    /// The whole tensor, as 32-bit words.
    pub fn whole(t: Tensor) -> OrchView {
        OrchView { arg: OrchArg { tensor: t.0, ..OrchArg::default() } }
    }

    /// A row-major contiguous view of `shape` (outermost first) from element `offset`.
    pub fn nd(t: Tensor, dtype: DType, offset: u64, shape: &[u64]) -> OrchView {
        let mut strides = [0u64; MAX_ARG_DIMS];
        let n = shape.len().min(MAX_ARG_DIMS);
        let mut s = 1u64;
        for k in (0..n).rev() {
            strides[k] = s;
            s = s.saturating_mul(shape[k]);
        }
        OrchView::strided(t, dtype, offset, shape, &strides[..n])
    }

    /// A view of `shape` with `strides` (elements; 0 repeats an element) from element
    /// `offset`. More than four dimensions, or strides of another count, is refused when the
    /// task is submitted.
    pub fn strided(
        t: Tensor,
        dtype: DType,
        offset: u64,
        shape: &[u64],
        strides: &[u64],
    ) -> OrchView {
        let mut arg = OrchArg {
            tensor: t.0,
            dtype: dtype as u32,
            ndims: shape.len() as u32,
            offset,
            ..OrchArg::default()
        };
        if shape.len() > MAX_ARG_DIMS || strides.len() != shape.len() {
            arg.ndims = u32::MAX;
            return OrchView { arg };
        }
        arg.shape[..shape.len()].copy_from_slice(shape);
        arg.strides[..strides.len()].copy_from_slice(strides);
        OrchView { arg }
    }

    /// A one-dimensional contiguous view of `len` elements from `offset`.
    pub fn flat(t: Tensor, dtype: DType, offset: u64, len: u64) -> OrchView {
        OrchView::nd(t, dtype, offset, &[len])
    }

    /// Elements in the view (0 for a whole-tensor view).
    pub fn numel(&self) -> u64 {
        if self.arg.ndims as usize > MAX_ARG_DIMS {
            return 0;
        }
        self.arg.shape[..self.arg.ndims as usize].iter().product::<u64>()
            * u64::from(self.arg.ndims != 0)
    }

    /// The record this view crosses the table as (with direction 0).
    pub fn record(&self) -> OrchArg {
        self.arg
    }
}

impl From<Tensor> for OrchView {
    fn from(t: Tensor) -> OrchView {
        OrchView::whole(t)
    }
}

/// A task to submit: a kernel (or none), its views with directions, typed scalars, blocks and
/// explicit dependencies. Fixed capacity; an overflow is [`OrchError::TooMany`] at submission.
#[derive(Clone, Copy, Debug)]
pub struct TaskSpec {
    task: OrchTask,
    overflow: bool,
}

impl TaskSpec {
    /// A task running kernel `kernel` (a built-in id from [`crate::orch_lib`]'s callers, or a
    /// loaded kernel's `0x100 + n`) on one block.
    pub fn new(kernel: u32) -> TaskSpec {
        TaskSpec { task: OrchTask { kernel, block_dim: 1, ..OrchTask::default() }, overflow: false }
    }

    /// A dependency-only task: no kernel; it completes once its dependencies did.
    pub fn join() -> TaskSpec {
        TaskSpec::new(KERNEL_NONE)
    }

    fn arg(mut self, v: impl Into<OrchView>, dir: u32) -> TaskSpec {
        let n = self.task.n_args as usize;
        if n < MAX_TASK_ARGS {
            let mut a = v.into().arg;
            a.dir = dir;
            self.task.args[n] = a;
            self.task.n_args += 1;
        } else {
            self.overflow = true;
        }
        self
    }

    /// Adds a view the task reads.
    pub fn input(self, v: impl Into<OrchView>) -> TaskSpec {
        self.arg(v, DIR_IN)
    }

    /// Adds a view the task writes.
    pub fn output(self, v: impl Into<OrchView>) -> TaskSpec {
        self.arg(v, DIR_OUT)
    }

    /// Adds a view the task reads and writes.
    pub fn inout(self, v: impl Into<OrchView>) -> TaskSpec {
        self.arg(v, DIR_INOUT)
    }

    /// Adds a typed scalar (its bits, low first).
    pub fn scalar(mut self, dtype: DType, bits: u64) -> TaskSpec {
        let n = self.task.n_scalars as usize;
        if n < MAX_TASK_SCALARS {
            self.task.scalars[n] = OrchScalar { dtype: dtype as u32, reserved: 0, bits };
            self.task.n_scalars += 1;
        } else {
            self.overflow = true;
        }
        self
    }

    /// Adds an `f32` scalar.
    pub fn scalar_f32(self, v: f32) -> TaskSpec {
        self.scalar(DType::Float32, u64::from(v.to_bits()))
    }

    /// Adds a `u64` scalar.
    pub fn scalar_u64(self, v: u64) -> TaskSpec {
        self.scalar(DType::UInt64, v)
    }

    /// Puts the view words a view kernel reads before the scalars
    /// ([`TASK_VIEW_SCALARS`]).
    pub fn views(mut self) -> TaskSpec {
        self.task.flags |= TASK_VIEW_SCALARS;
        self
    }

    /// Sets the SPMD block count.
    pub fn blocks(mut self, n: u32) -> TaskSpec {
        self.task.block_dim = n;
        self
    }

    /// Runs after `t` (beyond what the tensor map derives).
    pub fn after(mut self, t: TaskHandle) -> TaskSpec {
        let n = self.task.n_after as usize;
        if n < MAX_TASK_AFTER {
            self.task.after[n] = t.0;
            self.task.n_after += 1;
        } else {
            self.overflow = true;
        }
        self
    }

    /// The record this task crosses the table as; `None` after an overflow.
    pub fn record(&self) -> Option<&OrchTask> {
        let bad_view = self.task.args[..self.task.n_args as usize]
            .iter()
            .any(|a| a.ndims as usize > MAX_ARG_DIMS);
        (!self.overflow && !bad_view).then_some(&self.task)
    }
}

/// What an orchestration function sees: ferry's table for this run.
#[derive(Debug)]
pub struct Orch<'a> {
    api: &'a OrchLibApi,
}

impl<'a> Orch<'a> {
    /// The table behind `ctx.lib_api`, when it is there and of this crate's version.
    ///
    /// # Safety
    /// `ctx.lib_api` is null or points at a table valid for `'a`.
    pub unsafe fn from_context(ctx: &'a OrchContext) -> Option<Orch<'a>> {
        if ctx.lib_api.is_null() || ctx.lib_api_version != ORCH_LIB_ABI_VERSION {
            return None;
        }
        // SAFETY: non-null and valid for 'a (caller's contract).
        let api = unsafe { &*ctx.lib_api };
        (api.version == ORCH_LIB_ABI_VERSION
            && api.size as usize == core::mem::size_of::<OrchLibApi>())
        .then_some(Orch { api })
    }

    fn check(status: i32) -> Result<(), OrchError> {
        if status == STATUS_OK {
            Ok(())
        } else {
            Err(OrchError::Refused(status))
        }
    }

    /// Tensors the function can name (run tensors, then allocated ones).
    pub fn tensor_count(&self) -> u32 {
        // SAFETY: the table's functions take its own `user`.
        unsafe { (self.api.tensor_count)(self.api.user) }
    }

    /// Tensor `t`'s length in bytes.
    ///
    /// # Errors
    /// [`OrchError::Refused`] for a tensor that does not exist.
    pub fn tensor_bytes(&self, t: Tensor) -> Result<u64, OrchError> {
        let mut b = 0;
        // SAFETY: the table's functions take its own `user`; `b` is a valid out pointer.
        Self::check(unsafe { (self.api.tensor_bytes)(self.api.user, t.0, &mut b) })?;
        Ok(b)
    }

    /// Run scalars.
    pub fn scalar_count(&self) -> u32 {
        // SAFETY: the table's functions take its own `user`.
        unsafe { (self.api.scalar_count)(self.api.user) }
    }

    /// Run scalar `index`'s bits.
    ///
    /// # Errors
    /// [`OrchError::Refused`] for a scalar that does not exist.
    pub fn scalar(&self, index: u32) -> Result<u64, OrchError> {
        let mut v = 0;
        // SAFETY: the table's functions take its own `user`; `v` is a valid out pointer.
        Self::check(unsafe { (self.api.scalar)(self.api.user, index, &mut v) })?;
        Ok(v)
    }

    /// Submits `task`.
    ///
    /// # Errors
    /// [`OrchError::TooMany`] for an overflowed task; [`OrchError::Refused`] when ferry
    /// refuses it (the run fails with the reason).
    pub fn submit(&mut self, task: &TaskSpec) -> Result<TaskHandle, OrchError> {
        let rec = task.record().ok_or(OrchError::TooMany)?;
        let mut id = 0;
        // SAFETY: the table's functions take its own `user`; `rec` and `id` are valid.
        Self::check(unsafe { (self.api.submit)(self.api.user, rec, &mut id) })?;
        Ok(TaskHandle(id))
    }

    /// Runs `body` inside a scope opened at `file:line` (what the profile's scope statistics
    /// record); tensors allocated inside are released at its end.
    ///
    /// # Errors
    /// `body`'s error, or [`OrchError::Refused`].
    pub fn scope<R>(
        &mut self,
        file: &str,
        line: u32,
        body: impl FnOnce(&mut Orch<'a>) -> Result<R, OrchError>,
    ) -> Result<R, OrchError> {
        // SAFETY: the table's functions take its own `user`; `file` is `len` readable bytes.
        Self::check(unsafe {
            (self.api.scope_begin)(self.api.user, file.as_ptr(), file.len(), line)
        })?;
        let r = body(self)?;
        // SAFETY: as above.
        Self::check(unsafe { (self.api.scope_end)(self.api.user) })?;
        Ok(r)
    }

    /// Allocates a tensor of `bytes` bytes for the rest of the innermost scope: a
    /// runtime-allocated output.
    ///
    /// # Errors
    /// [`OrchError::Refused`] when the run's arena is exhausted.
    pub fn alloc(&mut self, bytes: u64) -> Result<Tensor, OrchError> {
        let mut id = 0;
        // SAFETY: the table's functions take its own `user`; `id` is a valid out pointer.
        Self::check(unsafe { (self.api.alloc)(self.api.user, bytes, &mut id) })?;
        Ok(Tensor(id))
    }

    /// Reads `out.len()` bytes of `t` from byte `offset`: the device's values once every task
    /// submitted so far that writes them completed.
    ///
    /// # Errors
    /// [`OrchError::Refused`] for a range outside the tensor, or (host-built) a range a
    /// submitted task writes.
    pub fn read(&self, t: Tensor, offset: u64, out: &mut [u8]) -> Result<(), OrchError> {
        // SAFETY: the table's functions take its own `user`; `out` is `len` writable bytes.
        Self::check(unsafe {
            (self.api.read)(self.api.user, t.0, offset, out.as_mut_ptr(), out.len() as u64)
        })
    }

    /// Reads `n` little-endian `i32`s of `t` from element `first`.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn read_i32(&self, t: Tensor, first: u64, n: usize) -> Result<Vec<i32>, OrchError> {
        let mut b = vec![0u8; n * 4];
        self.read(t, first.saturating_mul(4), &mut b)?;
        Ok(b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
}

use std::vec;
use std::vec::Vec;

/// Runs a user function behind an entry export; what
/// [`orchestration_library!`](crate::orchestration_library) expands to.
///
/// # Safety
/// `ctx` is null or valid for reads for the call, and its `lib_api` is null or a live table.
#[doc(hidden)]
pub unsafe fn __orch_trampoline(
    ctx: *const OrchContext,
    f: fn(&mut Orch<'_>) -> Result<(), OrchError>,
) -> i32 {
    if ctx.is_null() {
        return ORCH_STATUS_BAD_TABLE;
    }
    // SAFETY: non-null and valid for the call (caller's contract).
    let ctx = unsafe { &*ctx };
    // SAFETY: `lib_api` is null or live for the call (caller's contract).
    let Some(mut o) = (unsafe { Orch::from_context(ctx) }) else {
        return ORCH_STATUS_BAD_TABLE;
    };
    let r = crate::library::quietly(|| f(&mut o));
    match r {
        Ok(Ok(())) => STATUS_OK,
        Ok(Err(e)) => e.status(),
        Err(_) => STATUS_PANIC,
    }
}

/// Declares an orchestration library: its name and its functions, each
/// `fn(&mut Orch<'_>) -> Result<(), OrchError>` with the run tensors and scalars it needs at
/// least. It exports the descriptor (`ferry_orch_library`) and each function's entry
/// (`ferry_orch_fn_<name>`); it defines no `ferry_set_services`, so a crate may hold a
/// [`kernel_library!`](crate::kernel_library) beside it.
///
/// ```
/// use ferry_kernel_abi::orch::{Orch, OrchError, TaskSpec, Tensor};
/// use ferry_kernel_abi::orchestration_library;
///
/// /// out = a + b, once per element count the first scalar names.
/// fn twice(o: &mut Orch<'_>) -> Result<(), OrchError> {
///     let add = 0; // the built-in `add`
///     let t = o.submit(&TaskSpec::new(add).input(Tensor(0)).input(Tensor(1)).output(Tensor(2)))?;
///     o.submit(&TaskSpec::new(add).input(Tensor(2)).input(Tensor(1)).output(Tensor(2)).after(t))?;
///     Ok(())
/// }
///
/// orchestration_library! {
///     name: "example-orch",
///     functions: [{ name: twice, tensors: 3, scalars: 0 }],
/// }
/// # fn main() {
/// # let d = unsafe { &*ferry_orch_library() };
/// # assert_eq!(d.function_count, 1);
/// # }
/// ```
#[macro_export]
macro_rules! orchestration_library {
    (
        name: $lib:literal,
        functions: [ $( { name: $f:ident, tensors: $t:expr, scalars: $s:expr $(,)? } ),+ $(,)? ] $(,)?
    ) => {
        const __FERRY_ORCH_N: usize = <[&str]>::len(&[$(stringify!($f)),+]);
        static __FERRY_ORCH_FUNCTIONS: [$crate::orch_lib::OrchFunctionEntry; __FERRY_ORCH_N] = [
            $( $crate::orch_lib::OrchFunctionEntry {
                name: $crate::c_name(stringify!($f)),
                tensors: $t,
                scalars: $s,
                entry: Some({
                    #[export_name = concat!("ferry_orch_fn_", stringify!($f))]
                    unsafe extern "C" fn entry(ctx: *const $crate::orch_lib::OrchContext) -> i32 {
                        // SAFETY: forwarded `OrchEntryFn` contract.
                        unsafe { $crate::orch::__orch_trampoline(ctx, $f) }
                    }
                    entry
                }),
            } ),+
        ];

        static __FERRY_ORCH_DESC: $crate::orch::__OrchTable =
            $crate::orch::__OrchTable($crate::orch_lib::OrchLibraryDesc {
                magic: $crate::orch_lib::ORCH_LIB_MAGIC,
                abi_version: $crate::orch_lib::ORCH_LIB_ABI_VERSION,
                desc_bytes: ::core::mem::size_of::<$crate::orch_lib::OrchLibraryDesc>() as u32,
                entry_bytes: ::core::mem::size_of::<$crate::orch_lib::OrchFunctionEntry>() as u32,
                function_count: __FERRY_ORCH_N as u32,
                functions: &__FERRY_ORCH_FUNCTIONS
                    as *const [$crate::orch_lib::OrchFunctionEntry; __FERRY_ORCH_N]
                    as *const $crate::orch_lib::OrchFunctionEntry,
                name: $crate::c_name($lib),
            });

        /// The library's descriptor (the orchestration ABI's required export).
        ///
        /// # Safety
        /// Always safe to call; `unsafe` because it is an FFI export.
        #[no_mangle]
        pub unsafe extern "C" fn ferry_orch_library() -> *const $crate::orch_lib::OrchLibraryDesc {
            &__FERRY_ORCH_DESC.0
        }
    };
}

/// The descriptor as a `static` (it holds a pointer, so it needs a `Sync` wrapper).
#[doc(hidden)]
#[derive(Debug)]
pub struct __OrchTable(pub crate::orch_lib::OrchLibraryDesc);
// SAFETY: the descriptor and the table it points at are immutable statics.
unsafe impl Sync for __OrchTable {}
