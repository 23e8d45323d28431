//! The task runtime inside device programs: the AICPU program's exec hook and the submission
//! table orchestration objects call.
//!
//! | piece | side | what |
//! |---|---|---|
//! | [`exec_hook`] | AICPU program | `ferry_abi::services::ExecHook`: runs [`AicpuProgram::exec_with`] over [`ServicesOps`], calling the callable's orchestration object with an [`OrchApi`] |
//! | [`OrchApi`] | both | `#[repr(C)]` table of `extern "C"` functions behind `OrchContext::api` (version [`ORCH_API_VERSION`]) |
//! | [`serve`] | AICPU program | builds an [`OrchApi`] over any [`Orchestrate`] for the duration of a call |
//! | [`ApiOrchestrator`] | orchestration object | [`Orchestrate`] over an [`OrchApi`], so an object's entry is `orchestrations::vector(&mut ApiOrchestrator::from_context(ctx)?)` |
//!
//! The AICore side needs no hook of its own: the AICore entry calls
//! [`super::aicore::aicore_execute`] with a [`ServicesOps`] over the same table. As with
//! `DeviceRunner::launch`, whoever launches the run zeroes every core's `DATA_MAIN_BASE` and
//! `COND` before the AICore entry starts, and starts the AICore entry before the AICPU one.
//!
//! Host-process-only, like the services table (`ferry_abi::services` explains why pointers are
//! fine here): the table lives on the AICPU thread's stack for one entry call. Errors cross as
//! `STATUS_RUNTIME_BASE + code` plus the full [`SubmitError`] through `last_error`, using
//! [`DeviceFault::encode`].
use super::orch::DeviceOrchestrator;
use super::program::AicpuProgram;
use super::services::ServicesOps;
use super::task::{Orchestrate, Role, ScopeSite, Task, TaskId, TensorId, TensorInfo, View};
use crate::error::{DeviceFault, SubmitError};
use ferry_abi::orch_lib::OrchLibApi;
use ferry_abi::services::{
    ExecContext, OrchContext, STATUS_NO_SERVICES, STATUS_OK, STATUS_PANIC, STATUS_RUNTIME_BASE,
};
use ferry_dfx::clock::CycleClock;
use std::ffi::c_void;
use std::mem::size_of;
use std::sync::{Arc, OnceLock};

/// Version of [`OrchApi`] (2: `report_error`, so an object's own refusal reaches the host
/// typed; 3: `scope_begin_at`, so ScopeStats records the site an object names).
pub const ORCH_API_VERSION: u32 = 3;
/// Exec hook status: the runtime image could not be used (`STATUS_RUNTIME_BASE + 1`).
pub const STATUS_BAD_IMAGE: i32 = STATUS_RUNTIME_BASE + 1;

/// [`ArgDesc::role`] bit: the argument is marked for ArgsDump ([`Task::dump`]).
pub const ARG_DUMP: u32 = 1 << 8;

/// The role word of a tensor argument, as [`ArgDesc::role`] and a workload program carry it:
/// [`Role::bits`], with [`ARG_DUMP`] for an argument marked for ArgsDump.
pub fn arg_role_word(role: Role, dump: bool) -> u32 {
    role.bits() | if dump { ARG_DUMP } else { 0 }
}

/// One tensor argument of a [`TaskDesc`].
///
/// # Layout
/// 24 bytes: `tensor` u32 at 0, `role` u32 at 4 (`Role::bits`, or'ed with [`ARG_DUMP`] for a
/// marked argument), `offset` u64 at 8, `len` u64 at 16 (elements; `u64::MAX` = to the end).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArgDesc {
    /// Tensor id.
    pub tensor: u32,
    /// Role bits, and [`ARG_DUMP`].
    pub role: u32,
    /// First element.
    pub offset: u64,
    /// Elements.
    pub len: u64,
}

/// A task crossing the table.
///
/// # Layout
/// 232 bytes: six u32 counts at 0..24, `args` at 24 (6 × 24), `scalars` at 168, `after` at 200.
/// `n_args` above 6 means "more than fits" (refused as too many arguments).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskDesc {
    /// Kernel id.
    pub kernel: u32,
    /// SPMD block count.
    pub block_dim: u32,
    /// Used entries of `args`.
    pub n_args: u32,
    /// Used entries of `scalars`.
    pub n_scalars: u32,
    /// Used entries of `after`.
    pub n_after: u32,
    /// Zero.
    pub reserved: u32,
    /// Tensor arguments.
    pub args: [ArgDesc; 6],
    /// Scalars.
    pub scalars: [u64; 4],
    /// Explicit dependencies.
    pub after: [u64; 4],
}
const _: () = assert!(size_of::<TaskDesc>() == 232 && size_of::<ArgDesc>() == 24);

/// A runtime error crossing the table ([`DeviceFault::encode`] of a [`SubmitError`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorDesc {
    /// Code.
    pub code: u32,
    /// Zero.
    pub reserved: u32,
    /// Task.
    pub task: u64,
    /// Details.
    pub detail: [u64; 4],
}

/// The submission table behind `OrchContext::api`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OrchApi {
    /// [`ORCH_API_VERSION`].
    pub version: u32,
    /// `size_of::<OrchApi>()`.
    pub size: u32,
    /// The serving side's state; passed back to every function.
    pub user: *mut c_void,
    /// Tensors in the run's table.
    pub tensor_count: unsafe extern "C" fn(user: *mut c_void) -> u32,
    /// Tensor `id`'s address and length into `out`.
    pub tensor: unsafe extern "C" fn(user: *mut c_void, id: u32, out: *mut TensorInfoDesc) -> i32,
    /// Scalars in the run's table.
    pub scalar_count: unsafe extern "C" fn(user: *mut c_void) -> u32,
    /// Scalar `index` into `out`.
    pub scalar: unsafe extern "C" fn(user: *mut c_void, index: u32, out: *mut u64) -> i32,
    /// Submits `task`; its sequence number into `out`.
    pub submit:
        unsafe extern "C" fn(user: *mut c_void, task: *const TaskDesc, out: *mut u64) -> i32,
    /// Opens a scope.
    pub scope_begin: unsafe extern "C" fn(user: *mut c_void),
    /// Closes a scope.
    pub scope_end: unsafe extern "C" fn(user: *mut c_void) -> i32,
    /// Allocates a scratch tensor of `len` elements; its id into `out`.
    pub alloc_scratch: unsafe extern "C" fn(user: *mut c_void, len: u64, out: *mut u32) -> i32,
    /// The error behind the last non-zero status into `out`.
    pub last_error: unsafe extern "C" fn(user: *mut c_void, out: *mut ErrorDesc) -> i32,
    /// Records a runtime error the object itself raised (e.g. the workload interpreter
    /// refusing its program), so the run fails with it instead of a bare status.
    pub report_error: unsafe extern "C" fn(user: *mut c_void, err: *const ErrorDesc) -> i32,
    /// Opens a scope at a site: `file` (`file_len` bytes of UTF-8, at most 31 are kept) and
    /// `line`, what ScopeStats records for it. A null or non-UTF-8 `file` opens it as
    /// `scope_begin` does.
    pub scope_begin_at:
        unsafe extern "C" fn(user: *mut c_void, file: *const u8, file_len: usize, line: u32),
}

/// A tensor's address and length crossing the table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorInfoDesc {
    /// Device address.
    pub addr: u64,
    /// Elements.
    pub len: u64,
}

/// The serving side of both tables: the orchestrator, the last error an entry saw, and the
/// task the function would submit next.
pub(crate) struct Server<'a> {
    pub(crate) orch: &'a mut dyn Orchestrate,
    pub(crate) last: Option<SubmitError>,
    pub(crate) next: u64,
}

fn status_of(e: SubmitError) -> i32 {
    STATUS_RUNTIME_BASE + DeviceFault::Submit(e).encode().0 as i32
}

/// Runs `f` on the serving side's state behind `user`, mapping errors and panics to statuses.
///
/// # Safety
/// `user` is the `Server` pointer [`serve`] put in the table, live for the call.
pub(crate) unsafe fn with_server(
    user: *mut c_void,
    f: impl FnOnce(&mut Server<'_>) -> Result<(), SubmitError>,
) -> i32 {
    // SAFETY: delegated to the caller: `user` points at the live `Server` of `serve`, and the
    // table's functions are only called from the orchestration entry `serve` is running, on this
    // thread, so nothing else borrows it.
    let s = unsafe { &mut *user.cast::<Server<'_>>() };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(s))) {
        Ok(Ok(())) => STATUS_OK,
        Ok(Err(e)) => {
            s.last = Some(e);
            status_of(e)
        }
        Err(_) => STATUS_PANIC,
    }
}

/// Writes `v` to `out` when it is non-null.
///
/// # Safety
/// `out` is null or valid for writes.
unsafe fn put<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: non-null and valid for writes by the caller's contract.
        unsafe { out.write(v) };
    }
}

unsafe extern "C" fn s_tensor_count(user: *mut c_void) -> u32 {
    let mut n = 0;
    // SAFETY: called through the table `serve` built, with its `user`.
    unsafe {
        with_server(user, |s| {
            n = s.orch.tensor_count();
            Ok(())
        })
    };
    n
}

unsafe extern "C" fn s_tensor(user: *mut c_void, id: u32, out: *mut TensorInfoDesc) -> i32 {
    // SAFETY: called through the table `serve` built, with its `user`; `out` per the table docs.
    unsafe {
        with_server(user, |s| {
            let t = s.orch.tensor(TensorId(id))?;
            put(out, TensorInfoDesc { addr: t.addr, len: t.len });
            Ok(())
        })
    }
}

unsafe extern "C" fn s_scalar_count(user: *mut c_void) -> u32 {
    let mut n = 0;
    // SAFETY: called through the table `serve` built, with its `user`.
    unsafe {
        with_server(user, |s| {
            n = s.orch.scalar_count();
            Ok(())
        })
    };
    n
}

unsafe extern "C" fn s_scalar(user: *mut c_void, index: u32, out: *mut u64) -> i32 {
    // SAFETY: called through the table `serve` built, with its `user`; `out` per the table docs.
    unsafe {
        with_server(user, |s| {
            let v = s.orch.scalar(index)?;
            put(out, v);
            Ok(())
        })
    }
}

unsafe extern "C" fn s_submit(user: *mut c_void, task: *const TaskDesc, out: *mut u64) -> i32 {
    if task.is_null() {
        return ferry_abi::services::STATUS_INVALID_ARGUMENT;
    }
    // SAFETY: non-null; the caller passes a readable TaskDesc (table contract).
    let d = unsafe { task.read() };
    let mut t = Task::new(d.kernel).blocks(d.block_dim);
    for i in 0..d.n_args as usize {
        let a = d.args.get(i).copied().unwrap_or_default();
        let role = Role::from_bits(a.role).unwrap_or(Role::InOut);
        t = t.arg(View::range(TensorId(a.tensor), a.offset, a.len), role);
        if a.role & ARG_DUMP != 0 {
            t = t.dump();
        }
    }
    for i in 0..d.n_scalars as usize {
        t = t.scalar(d.scalars.get(i).copied().unwrap_or(u64::MAX));
    }
    for i in 0..d.n_after as usize {
        t = t.after(TaskId(d.after.get(i).copied().unwrap_or(u64::MAX)));
    }
    // SAFETY: called through the table `serve` built, with its `user`; `out` per the table docs.
    unsafe {
        with_server(user, |s| {
            let id = s.orch.submit(&t)?;
            s.next = id.0 + 1;
            put(out, id.0);
            Ok(())
        })
    }
}

unsafe extern "C" fn s_scope_begin(user: *mut c_void) {
    // SAFETY: called through the table `serve` built, with its `user`.
    unsafe {
        with_server(user, |s| {
            s.orch.scope_begin();
            Ok(())
        })
    };
}

unsafe extern "C" fn s_scope_begin_at(
    user: *mut c_void,
    file: *const u8,
    file_len: usize,
    line: u32,
) {
    let site = if file.is_null() {
        None
    } else {
        // SAFETY: non-null; the caller passes `file_len` readable bytes (table contract).
        let b = unsafe { std::slice::from_raw_parts(file, file_len) };
        std::str::from_utf8(b).ok().map(|f| ScopeSite::new(f, line))
    };
    // SAFETY: called through the table `serve` built, with its `user`.
    unsafe {
        with_server(user, |s| {
            match site {
                Some(site) => s.orch.scope_begin_at(site),
                None => s.orch.scope_begin(),
            }
            Ok(())
        })
    };
}

unsafe extern "C" fn s_scope_end(user: *mut c_void) -> i32 {
    // SAFETY: called through the table `serve` built, with its `user`.
    unsafe { with_server(user, |s| s.orch.scope_end()) }
}

unsafe extern "C" fn s_alloc_scratch(user: *mut c_void, len: u64, out: *mut u32) -> i32 {
    // SAFETY: called through the table `serve` built, with its `user`; `out` per the table docs.
    unsafe {
        with_server(user, |s| {
            let id = s.orch.alloc_scratch(len)?;
            put(out, id.0);
            Ok(())
        })
    }
}

unsafe extern "C" fn s_last_error(user: *mut c_void, out: *mut ErrorDesc) -> i32 {
    // SAFETY: `user` is the live Server of `serve` (table contract); read only.
    let last = unsafe { &*user.cast::<Server<'_>>() }.last;
    let Some(e) = last else { return ferry_abi::services::STATUS_INVALID_ARGUMENT };
    let (code, task, detail) = DeviceFault::Submit(e).encode();
    // SAFETY: `out` is null or valid for writes (table contract).
    unsafe { put(out, ErrorDesc { code, reserved: 0, task, detail }) };
    STATUS_OK
}

unsafe extern "C" fn s_report_error(user: *mut c_void, err: *const ErrorDesc) -> i32 {
    if err.is_null() {
        return ferry_abi::services::STATUS_INVALID_ARGUMENT;
    }
    // SAFETY: non-null; the caller passes a readable ErrorDesc (table contract).
    let d = unsafe { err.read() };
    let Some(DeviceFault::Submit(e)) = DeviceFault::decode(d.code, d.task, d.detail) else {
        return ferry_abi::services::STATUS_INVALID_ARGUMENT;
    };
    // SAFETY: called through the table `serve` built, with its `user`.
    unsafe {
        with_server(user, |s| {
            s.last = Some(e);
            Ok(())
        })
    }
}

/// Serves `orch` through an [`OrchApi`] for the duration of `f`; returns `f`'s result and the
/// last runtime error an entry saw.
pub fn serve<R>(
    orch: &mut dyn Orchestrate,
    f: impl FnOnce(&OrchApi) -> R,
) -> (R, Option<SubmitError>) {
    let (r, last, _) = serve_tables(orch, |api, _| f(api));
    (r, last)
}

/// Serves `orch` through both tables for the duration of `f`: the built-in objects'
/// [`OrchApi`] and the user libraries' [`OrchLibApi`] (one state behind both). Returns `f`'s
/// result, the last runtime error an entry saw and the task the orchestration would submit
/// next.
pub fn serve_tables<R>(
    orch: &mut dyn Orchestrate,
    f: impl FnOnce(&OrchApi, &OrchLibApi) -> R,
) -> (R, Option<SubmitError>, u64) {
    let mut server = Server { orch, last: None, next: 0 };
    let user: *mut c_void = (&mut server as *mut Server<'_>).cast();
    let api = OrchApi {
        version: ORCH_API_VERSION,
        size: size_of::<OrchApi>() as u32,
        user,
        tensor_count: s_tensor_count,
        tensor: s_tensor,
        scalar_count: s_scalar_count,
        scalar: s_scalar,
        submit: s_submit,
        scope_begin: s_scope_begin,
        scope_end: s_scope_end,
        alloc_scratch: s_alloc_scratch,
        last_error: s_last_error,
        report_error: s_report_error,
        scope_begin_at: s_scope_begin_at,
    };
    let lib = super::lib_api::table(user);
    let r = f(&api, &lib);
    (r, server.last, server.next)
}

/// The [`OrchContext`] an entry receives: both tables, `services` and `runtime_args` as given.
pub fn orch_context(
    services: *const ferry_abi::services::DeviceServices,
    runtime_args: u64,
    callable_id: u32,
    api: &OrchApi,
    lib: &OrchLibApi,
) -> OrchContext {
    OrchContext {
        services,
        runtime_args,
        callable_id,
        api_version: ORCH_API_VERSION,
        api: (api as *const OrchApi).cast(),
        lib_api_version: ferry_abi::orch_lib::ORCH_LIB_ABI_VERSION,
        reserved: 0,
        lib_api: lib,
    }
}

/// [`Orchestrate`] over an [`OrchApi`]: what an orchestration object's entry uses.
#[derive(Debug)]
pub struct ApiOrchestrator<'a> {
    api: &'a OrchApi,
}

impl<'a> ApiOrchestrator<'a> {
    /// The orchestrator behind `ctx.api`; `None` when there is none or it is another version.
    ///
    /// # Safety
    /// `ctx.api` is null or points at an [`OrchApi`] that stays valid for `'a` (the entry call).
    pub unsafe fn from_context(ctx: &'a OrchContext) -> Option<ApiOrchestrator<'a>> {
        if ctx.api.is_null() || ctx.api_version != ORCH_API_VERSION {
            return None;
        }
        // SAFETY: non-null and valid for 'a by the caller's contract.
        let api = unsafe { &*ctx.api.cast::<OrchApi>() };
        (api.version == ORCH_API_VERSION && api.size as usize == size_of::<OrchApi>())
            .then_some(ApiOrchestrator { api })
    }

    /// The orchestrator over `api`.
    pub fn new(api: &'a OrchApi) -> ApiOrchestrator<'a> {
        ApiOrchestrator { api }
    }

    fn err(&self, status: i32) -> SubmitError {
        let mut e = ErrorDesc::default();
        // SAFETY: the table's functions take its own `user`; `e` is a valid out pointer.
        let got = unsafe { (self.api.last_error)(self.api.user, &mut e) };
        match (got, DeviceFault::decode(e.code, e.task, e.detail)) {
            (STATUS_OK, Some(DeviceFault::Submit(s))) => s,
            _ => {
                tracing::warn!(status, "orchestration table call failed without a runtime error");
                SubmitError::Aborted
            }
        }
    }

    /// Hands `e`, an error this object raised itself, to the runtime (see
    /// [`OrchApi::report_error`]).
    pub fn report(&self, e: SubmitError) {
        let (code, task, detail) = DeviceFault::Submit(e).encode();
        let d = ErrorDesc { code, reserved: 0, task, detail };
        // SAFETY: the table's functions take its own `user`; `d` is a valid pointer.
        let _ = unsafe { (self.api.report_error)(self.api.user, &d) };
    }

    fn check(&self, status: i32) -> Result<(), SubmitError> {
        if status == STATUS_OK {
            Ok(())
        } else {
            Err(self.err(status))
        }
    }
}

impl Orchestrate for ApiOrchestrator<'_> {
    fn tensor_count(&self) -> u32 {
        // SAFETY: the table's functions take its own `user`.
        unsafe { (self.api.tensor_count)(self.api.user) }
    }

    fn tensor(&self, id: TensorId) -> Result<TensorInfo, SubmitError> {
        let mut d = TensorInfoDesc::default();
        // SAFETY: the table's functions take its own `user`; `d` is a valid out pointer.
        self.check(unsafe { (self.api.tensor)(self.api.user, id.0, &mut d) })?;
        Ok(TensorInfo { addr: d.addr, len: d.len })
    }

    fn scalar_count(&self) -> u32 {
        // SAFETY: the table's functions take its own `user`.
        unsafe { (self.api.scalar_count)(self.api.user) }
    }

    fn scalar(&self, index: u32) -> Result<u64, SubmitError> {
        let mut v = 0;
        // SAFETY: the table's functions take its own `user`; `v` is a valid out pointer.
        self.check(unsafe { (self.api.scalar)(self.api.user, index, &mut v) })?;
        Ok(v)
    }

    fn submit(&mut self, task: &Task) -> Result<TaskId, SubmitError> {
        let mut d =
            TaskDesc { kernel: task.kernel, block_dim: task.block_dim, ..TaskDesc::default() };
        for (slot, a) in d.args.iter_mut().zip(task.args()) {
            *slot = ArgDesc {
                tensor: a.view.tensor.0,
                role: arg_role_word(a.role, a.dump),
                offset: a.view.offset,
                len: a.view.len,
            };
        }
        d.n_args = if task.is_overflowed() { 7 } else { task.args().len() as u32 };
        d.n_scalars = task.scalars().len() as u32;
        d.scalars[..task.scalars().len()].copy_from_slice(task.scalars());
        d.n_after = task.after_ids().len() as u32;
        d.after[..task.after_ids().len()].copy_from_slice(task.after_ids());
        let mut id = 0;
        // SAFETY: the table's functions take its own `user`; `d` and `id` are valid pointers.
        self.check(unsafe { (self.api.submit)(self.api.user, &d, &mut id) })?;
        Ok(TaskId(id))
    }

    fn scope_begin(&mut self) {
        // SAFETY: the table's functions take its own `user`.
        unsafe { (self.api.scope_begin)(self.api.user) }
    }

    fn scope_begin_at(&mut self, site: ScopeSite) {
        let f = site.file();
        // SAFETY: the table's functions take its own `user`; `f` is `f.len()` readable bytes.
        unsafe { (self.api.scope_begin_at)(self.api.user, f.as_ptr(), f.len(), site.line) }
    }

    fn scope_end(&mut self) -> Result<(), SubmitError> {
        // SAFETY: the table's functions take its own `user`.
        self.check(unsafe { (self.api.scope_end)(self.api.user) })
    }

    fn alloc_scratch(&mut self, len: u64) -> Result<TensorId, SubmitError> {
        let mut id = 0;
        // SAFETY: the table's functions take its own `user`; `id` is a valid out pointer.
        self.check(unsafe { (self.api.alloc_scratch)(self.api.user, len, &mut id) })?;
        Ok(TensorId(id))
    }
}

/// The AICPU program's resident runtime state inside a device program.
static PROGRAM: OnceLock<AicpuProgram> = OnceLock::new();

/// The task runtime's `ExecHook` for the AICPU program: point the `exec:` field of the
/// `device/aicpu-*` variants at it.
///
/// # Errors
/// `STATUS_NO_SERVICES` for an incompatible services table; [`STATUS_BAD_IMAGE`] when
/// `KernelArgs::runtime_args` is not a runtime image. A failed run is reported through the image.
pub fn exec_hook(ctx: &ExecContext<'_>) -> Result<(), i32> {
    exec_with_program(PROGRAM.get_or_init(AicpuProgram::new), ctx)
}

/// [`exec_hook`] on a given program state (tests, or a program that keeps its own).
///
/// # Errors
/// As [`exec_hook`].
pub fn exec_with_program(program: &AicpuProgram, ctx: &ExecContext<'_>) -> Result<(), i32> {
    let ops = ServicesOps::new(ctx.services).ok_or(STATUS_NO_SERVICES)?;
    if program.init_args() != Some(ctx.init) {
        program.init(&ctx.init);
    }
    let orch = |o: &mut DeviceOrchestrator<'_>, id: u32| -> Result<(), DeviceFault> {
        let entry = ctx.orch_entries.get(id as usize).copied().flatten();
        let entry = entry.ok_or(DeviceFault::NoCallable { id })?;
        let (status, last, next) = serve_tables(o, |api, lib| {
            let oc = orch_context(ctx.services, ctx.args.runtime_args, id, api, lib);
            // SAFETY: the AICPU program loaded `entry` from the callable's orchestration object
            // and keeps the object loaded while the callable is registered; `oc` and the table
            // it points at live until the call returns.
            unsafe { entry(&oc) }
        });
        match (status, last) {
            (STATUS_OK, _) => Ok(()),
            (_, Some(e)) => Err(DeviceFault::Submit(e)),
            // A user library's function reports its own failure by its code; ferry's built-in
            // objects never return a bare status.
            (status, None) => match super::lib_api::function_error(status, None, next) {
                Some(e) => Err(DeviceFault::Submit(e)),
                None => Err(DeviceFault::OrchestrationStatus { status }),
            },
        }
    };
    let clock: Arc<dyn CycleClock> = Arc::new(ServicesClock(*ctx.services));
    program.exec_with_clock(&ops, &ctx.args, ctx.thread, ctx.threads, &orch, Some(&clock)).map_err(
        |e| {
            tracing::warn!(%e, "exec refused the run");
            STATUS_BAD_IMAGE
        },
    )
}

/// The AICPU OS's device clock (`DeviceServices::now_cycles`) as the DFX gates' cycle clock.
#[derive(Clone, Copy, Debug)]
struct ServicesClock(ferry_abi::services::DeviceServices);

impl CycleClock for ServicesClock {
    fn now_cycles(&self) -> u64 {
        // The OS keeps the table's context alive while any program it loaded is loaded
        // (`DeviceServices` docs), which outlasts every run of this program.
        (self.0.now_cycles)(self.0.ctx)
    }
}

/// The status an orchestration object's entry returns for `e` (the AICPU program reads the
/// full error back through the table's `last_error`).
pub fn orchestration_status(e: SubmitError) -> i32 {
    status_of(e)
}

/// Defines an orchestration object's exports (`ferry_set_services`, `ferry_orch_config`,
/// `ferry_orch_entry`) in a `device/orch-*` cdylib crate, running `orch` (an
/// `fn(&mut dyn Orchestrate) -> Result<(), SubmitError>`, e.g. one of
/// [`super::orchestrations`]) through [`ApiOrchestrator`] over the table behind
/// `OrchContext::api`.
///
/// ```ignore
/// ferry_runtime::orchestration_object! {
///     name: "vector",
///     expected_args: 3,
///     orch: ferry_runtime::device::orchestrations::vector,
/// }
/// ```
///
/// `orch_with_context: path` instead passes the entry's `OrchContext` too (an
/// `unsafe fn(&OrchContext, &mut dyn Orchestrate) -> Result<(), SubmitError>` whose contract is
/// that `ctx`'s pointers are live for the call), as the workload interpreter's object needs.
#[macro_export]
macro_rules! orchestration_object {
    (name: $name:literal, expected_args: $n:literal, orch: $orch:path $(,)?) => {
        $crate::orchestration_object! {
            name: $name,
            expected_args: $n,
            orch_with_context: (|_ctx, o| $orch(o)),
        }
    };
    (name: $name:literal, expected_args: $n:literal, orch_with_context: $orch:expr $(,)?) => {
        /// The name this object reports.
        pub const NAME: &str = $name;

        /// Stores nothing: the entry receives the table in its context.
        ///
        /// # Safety
        /// `services` is null or points at a live table.
        #[no_mangle]
        pub unsafe extern "C" fn ferry_set_services(
            services: *const $crate::device::ffi::abi::DeviceServices,
        ) -> i32 {
            if services.is_null() {
                return $crate::device::ffi::abi::STATUS_INVALID_ARGUMENT;
            }
            $crate::device::ffi::abi::STATUS_OK
        }

        /// Fills the config record.
        ///
        /// # Safety
        /// `out` is null or valid for writes.
        #[no_mangle]
        pub unsafe extern "C" fn ferry_orch_config(
            out: *mut $crate::device::ffi::abi::OrchConfig,
        ) -> i32 {
            if out.is_null() {
                return $crate::device::ffi::abi::STATUS_INVALID_ARGUMENT;
            }
            let mut c =
                $crate::device::ffi::abi::OrchConfig { expected_args: $n, ..Default::default() };
            c.name[..NAME.len()].copy_from_slice(NAME.as_bytes());
            // SAFETY: non-null and valid for writes by the caller's contract.
            unsafe { out.write(c) };
            $crate::device::ffi::abi::STATUS_OK
        }

        /// The orchestration entry: builds the callable's graph through the runtime's
        /// submission table. A panic becomes `STATUS_PANIC` (no unwind crosses the boundary).
        ///
        /// # Safety
        /// `ctx` is null or valid for reads for the call, and its `api` is null or the
        /// runtime's live submission table.
        #[no_mangle]
        pub unsafe extern "C" fn ferry_orch_entry(
            ctx: *const $crate::device::ffi::abi::OrchContext,
        ) -> i32 {
            if ctx.is_null() {
                return $crate::device::ffi::abi::STATUS_INVALID_ARGUMENT;
            }
            // SAFETY: non-null and valid for the call by the caller's contract.
            let ctx = unsafe { &*ctx };
            // SAFETY: `ctx.api` is null or the live table (caller's contract).
            let Some(mut o) = (unsafe { $crate::device::ffi::ApiOrchestrator::from_context(ctx) })
            else {
                return $crate::device::ffi::abi::STATUS_INVALID_ARGUMENT;
            };
            #[allow(unused_unsafe)]
            // SAFETY: `ctx` and the table behind it are live for the call (caller's contract).
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
                ($orch)(ctx, &mut o)
            }));
            match r {
                Ok(Ok(())) => $crate::device::ffi::abi::STATUS_OK,
                Ok(Err(e)) => {
                    o.report(e);
                    $crate::device::ffi::orchestration_status(e)
                }
                Err(_) => $crate::device::ffi::abi::STATUS_PANIC,
            }
        }
    };
}

/// `ferry_abi::services`, re-exported for [`orchestration_object!`](crate::orchestration_object).
pub use ferry_abi::services as abi;
