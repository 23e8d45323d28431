//! The orchestration-library table: [`OrchLibApi`] (`ferry_kernel_abi::orch_lib`) served over
//! any [`Orchestrate`](super::task::Orchestrate), beside the built-in objects' [`super::ffi::OrchApi`].
//!
//! A user library's function submits [`OrchTask`]s whose arguments are typed N-d views with
//! directions; [`lower`] turns one into the runtime's [`Task`]: each view becomes the word
//! range from its first to its last element (the tensor map orders tasks by those bytes), and
//! with [`TASK_VIEW_SCALARS`] the view words a view kernel reads (`ferry_abi::layout`) go before
//! the task's scalars. A dependency-only task ([`KERNEL_NONE`]) becomes the built-in `copy` over
//! no bytes of tensor 0: it does no work, so it completes once its dependencies did. Whatever
//! cannot be lowered is a [`SubmitError::BadArg`] naming the argument and the [`ArgProblem`].
use super::ffi::Server;
use super::kernels::K_COPY;
use super::task::{Role, ScopeSite, Task, TaskId, TensorId, View};
use crate::error::SubmitError;
use ferry_abi::layout;
use ferry_abi::orch_lib::{
    OrchLibApi, OrchTask, KERNEL_NONE, MAX_ARG_DIMS, MAX_TASK_AFTER, MAX_TASK_ARGS,
    MAX_TASK_SCALARS, ORCH_LIB_ABI_VERSION, TASK_VIEW_SCALARS,
};
use ferry_abi::records::DType;
use ferry_abi::services::{STATUS_INVALID_ARGUMENT, STATUS_OK};
use std::ffi::c_void;

/// Why an orchestration library's argument or scalar was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgProblem {
    /// The direction is not in, out or inout.
    #[error("direction is not in (1), out (2) or inout (3)")]
    Direction,
    /// An unknown dtype code.
    #[error("unknown dtype code")]
    Dtype,
    /// More than four dimensions, or a zero dimension.
    #[error("a view has 1..=4 dimensions, none of them zero")]
    Dims,
    /// The view's first element does not start a 32-bit word.
    #[error("the view's first element does not start a 32-bit word")]
    Unaligned,
    /// The view's extent overflows, or its words do not fit the encoding.
    #[error("the view's extent or strides are too large")]
    Extent,
    /// With view words, an argument has no view or a shape other than the first one's.
    #[error("view words need every argument to be an N-d view of one shape")]
    ViewShapes,
    /// The view words and the scalars need more than four scalars.
    #[error("the view words and scalars need more than 4 scalars")]
    TooManyScalars,
    /// More than six arguments, four scalars or four dependencies.
    #[error("more arguments, scalars or dependencies than a task carries")]
    Counts,
    /// A dependency-only task without a run tensor to name.
    #[error("a dependency-only task needs the run to have a tensor")]
    NoTensor,
}

impl ArgProblem {
    const ALL: [ArgProblem; 9] = [
        ArgProblem::Direction,
        ArgProblem::Dtype,
        ArgProblem::Dims,
        ArgProblem::Unaligned,
        ArgProblem::Extent,
        ArgProblem::ViewShapes,
        ArgProblem::TooManyScalars,
        ArgProblem::Counts,
        ArgProblem::NoTensor,
    ];

    /// Its code in an encoded fault.
    pub fn code(self) -> u32 {
        Self::ALL.iter().position(|&p| p == self).unwrap_or(0) as u32 + 1
    }

    /// The problem of [`code`](Self::code).
    pub fn from_code(c: u32) -> Option<ArgProblem> {
        Self::ALL.get((c as usize).checked_sub(1)?).copied()
    }
}

/// Lowers `d`, the `seq`-th task of the run, to a runtime [`Task`].
///
/// # Errors
/// [`SubmitError::BadArg`] naming the first argument (or scalar) that cannot be lowered.
pub fn lower(seq: u64, d: &OrchTask, tensor_count: u32) -> Result<Task, SubmitError> {
    let bad = |arg: usize, problem| SubmitError::BadArg { task: seq, arg: arg as u32, problem };
    let (na, ns, nd) = (d.n_args as usize, d.n_scalars as usize, d.n_after as usize);
    if na > MAX_TASK_ARGS || ns > MAX_TASK_SCALARS || nd > MAX_TASK_AFTER {
        return Err(bad(0, ArgProblem::Counts));
    }
    if d.kernel == KERNEL_NONE {
        if tensor_count == 0 {
            return Err(bad(0, ArgProblem::NoTensor));
        }
        let none = View::range(TensorId(0), 0, 0);
        let mut t = Task::new(K_COPY).input(none).output(none);
        for &a in &d.after[..nd] {
            t = t.after(TaskId(a));
        }
        return Ok(t);
    }
    let mut t = Task::new(d.kernel).blocks(d.block_dim);
    let views = d.flags & TASK_VIEW_SCALARS != 0;
    let mut words: Vec<u64> = Vec::with_capacity(1 + na);
    let mut shape0: Option<&[u64]> = None;
    for (i, a) in d.args[..na].iter().enumerate() {
        let role = match a.dir {
            1 => Role::Input,
            2 => Role::Output,
            3 => Role::InOut,
            _ => return Err(bad(i, ArgProblem::Direction)),
        };
        let nd = a.ndims as usize;
        if nd == 0 {
            if views {
                return Err(bad(i, ArgProblem::ViewShapes));
            }
            t = t.arg(View::whole(TensorId(a.tensor)), role);
            continue;
        }
        let dtype =
            u8::try_from(a.dtype).ok().and_then(DType::from_u8).ok_or(bad(i, ArgProblem::Dtype))?;
        if nd > MAX_ARG_DIMS || a.shape[..nd].contains(&0) {
            return Err(bad(i, ArgProblem::Dims));
        }
        let (shape, strides) = (&a.shape[..nd], &a.strides[..nd]);
        let size = dtype.size() as u64;
        let first = a.offset.checked_mul(size).ok_or(bad(i, ArgProblem::Extent))?;
        if first % 4 != 0 {
            return Err(bad(i, ArgProblem::Unaligned));
        }
        let bytes = layout::extent(shape, strides)
            .and_then(|e| e.checked_mul(size))
            .ok_or(bad(i, ArgProblem::Extent))?;
        t = t.arg(View::range(TensorId(a.tensor), first / 4, bytes.div_ceil(4)), role);
        if views {
            match shape0 {
                None => {
                    shape0 = Some(shape);
                    words
                        .push(layout::encode_shape(shape).map_err(|_| bad(i, ArgProblem::Extent))?);
                }
                Some(s) if s != shape => return Err(bad(i, ArgProblem::ViewShapes)),
                Some(_) => {}
            }
            words.push(
                layout::encode_operand(dtype, strides).map_err(|_| bad(i, ArgProblem::Extent))?,
            );
        }
    }
    if views && na == 0 {
        return Err(bad(0, ArgProblem::ViewShapes));
    }
    if words.len() + ns > MAX_TASK_SCALARS {
        return Err(bad(ns.saturating_sub(1), ArgProblem::TooManyScalars));
    }
    for w in words {
        t = t.scalar(w);
    }
    for (i, s) in d.scalars[..ns].iter().enumerate() {
        if u8::try_from(s.dtype).ok().and_then(DType::from_u8).is_none() {
            return Err(bad(i, ArgProblem::Dtype));
        }
        t = t.scalar(s.bits);
    }
    for &a in &d.after[..nd] {
        t = t.after(TaskId(a));
    }
    Ok(t)
}

/// Runs `f` on the server behind `user`; see `super::ffi::with_server`.
///
/// # Safety
/// `user` is the `Server` pointer `serve` put in the table, live for the call.
unsafe fn with(
    user: *mut c_void,
    f: impl FnOnce(&mut Server<'_>) -> Result<(), SubmitError>,
) -> i32 {
    // SAFETY: delegated to the caller.
    unsafe { super::ffi::with_server(user, f) }
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

unsafe extern "C" fn l_tensor_count(user: *mut c_void) -> u32 {
    let mut n = 0;
    // SAFETY: called through the table `serve` built, with its `user`.
    unsafe {
        with(user, |s| {
            n = s.orch.tensor_count();
            Ok(())
        })
    };
    n
}

unsafe extern "C" fn l_tensor_bytes(user: *mut c_void, id: u32, out: *mut u64) -> i32 {
    // SAFETY: called through the table `serve` built; `out` per the table's contract.
    unsafe {
        with(user, |s| {
            let t = s.orch.tensor(TensorId(id))?;
            put(out, t.len.saturating_mul(4));
            Ok(())
        })
    }
}

unsafe extern "C" fn l_scalar_count(user: *mut c_void) -> u32 {
    let mut n = 0;
    // SAFETY: called through the table `serve` built, with its `user`.
    unsafe {
        with(user, |s| {
            n = s.orch.scalar_count();
            Ok(())
        })
    };
    n
}

unsafe extern "C" fn l_scalar(user: *mut c_void, index: u32, out: *mut u64) -> i32 {
    // SAFETY: called through the table `serve` built; `out` per the table's contract.
    unsafe {
        with(user, |s| {
            let v = s.orch.scalar(index)?;
            put(out, v);
            Ok(())
        })
    }
}

unsafe extern "C" fn l_submit(user: *mut c_void, task: *const OrchTask, out: *mut u64) -> i32 {
    if task.is_null() {
        return STATUS_INVALID_ARGUMENT;
    }
    // SAFETY: non-null; the caller passes a readable OrchTask (table contract).
    let d = unsafe { task.read() };
    // SAFETY: called through the table `serve` built; `out` per the table's contract.
    unsafe {
        with(user, |s| {
            let t = lower(s.next, &d, s.orch.tensor_count())?;
            let id = s.orch.submit(&t)?;
            s.next = id.0 + 1;
            put(out, id.0);
            Ok(())
        })
    }
}

unsafe extern "C" fn l_scope_begin(
    user: *mut c_void,
    file: *const u8,
    file_len: usize,
    line: u32,
) -> i32 {
    let site = if file.is_null() {
        None
    } else {
        // SAFETY: non-null; the caller passes `file_len` readable bytes (table contract).
        let b = unsafe { std::slice::from_raw_parts(file, file_len) };
        std::str::from_utf8(b).ok().map(|f| ScopeSite::new(f, line))
    };
    // SAFETY: called through the table `serve` built, with its `user`.
    unsafe {
        with(user, |s| {
            match site {
                Some(site) => s.orch.scope_begin_at(site),
                None => s.orch.scope_begin(),
            }
            Ok(())
        })
    }
}

unsafe extern "C" fn l_scope_end(user: *mut c_void) -> i32 {
    // SAFETY: called through the table `serve` built, with its `user`.
    unsafe { with(user, |s| s.orch.scope_end()) }
}

unsafe extern "C" fn l_alloc(user: *mut c_void, bytes: u64, out: *mut u32) -> i32 {
    // SAFETY: called through the table `serve` built; `out` per the table's contract.
    unsafe {
        with(user, |s| {
            let id = s.orch.alloc_scratch(bytes.div_ceil(4))?;
            put(out, id.0);
            Ok(())
        })
    }
}

unsafe extern "C" fn l_read(
    user: *mut c_void,
    tensor: u32,
    offset: u64,
    out: *mut u8,
    len: u64,
) -> i32 {
    if out.is_null() && len > 0 {
        return STATUS_INVALID_ARGUMENT;
    }
    // SAFETY: called through the table `serve` built, with its `user`.
    unsafe {
        with(user, |s| {
            let t = s.orch.tensor(TensorId(tensor))?;
            let end = offset.checked_add(len);
            if end.is_none_or(|e| e > t.len.saturating_mul(4)) {
                return Err(SubmitError::ViewOutOfBounds {
                    task: s.next,
                    tensor,
                    offset,
                    len,
                    size: t.len.saturating_mul(4),
                });
            }
            if len == 0 {
                return Ok(());
            }
            // Bounded by the tensor's own length, checked above.
            let (w0, w1) = (offset / 4, (offset + len).div_ceil(4));
            s.orch.settle(TensorId(tensor), w0, w1 - w0)?;
            let mut words = vec![0u32; (w1 - w0) as usize];
            s.orch.read_words(TensorId(tensor), w0, &mut words)?;
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let skip = (offset - w0 * 4) as usize;
            // SAFETY: `out` is `len` writable bytes (table contract); the source has
            // `skip + len` bytes by construction.
            std::ptr::copy_nonoverlapping(bytes[skip..].as_ptr(), out, len as usize);
            Ok(())
        })
    }
}

/// The table over the server behind `user` (the one `super::ffi::serve` builds).
pub(crate) fn table(user: *mut c_void) -> OrchLibApi {
    OrchLibApi {
        version: ORCH_LIB_ABI_VERSION,
        size: std::mem::size_of::<OrchLibApi>() as u32,
        user,
        tensor_count: l_tensor_count,
        tensor_bytes: l_tensor_bytes,
        scalar_count: l_scalar_count,
        scalar: l_scalar,
        submit: l_submit,
        scope_begin: l_scope_begin,
        scope_end: l_scope_end,
        alloc: l_alloc,
        read: l_read,
    }
}

/// The run's error for an entry that returned `status` with `last` the last error ferry
/// recorded and `next` the task it would have submitted next: ferry's own refusal when there
/// is one, else the function's failure.
pub fn function_error(status: i32, last: Option<SubmitError>, next: u64) -> Option<SubmitError> {
    if status == STATUS_OK {
        return None;
    }
    Some(last.unwrap_or(SubmitError::Function {
        task: next,
        code: status,
        panicked: status == ferry_abi::services::STATUS_PANIC,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_kernel_abi::orch::{OrchView as UView, TaskSpec, Tensor};

    #[test]
    fn a_bf16_view_becomes_its_word_range_and_view_words() {
        let v = UView::nd(Tensor(1), DType::BFloat16, 64, &[2, 64]);
        let spec = TaskSpec::new(10).input(v).input(v).output(v).views();
        let t = lower(3, spec.record().unwrap(), 4).unwrap();
        let a: Vec<_> = t.args().collect();
        assert_eq!((a[0].view.offset, a[0].view.len), (32, 64));
        assert_eq!(t.scalars()[0], layout::encode_shape(&[2, 64]).unwrap());
        assert_eq!(t.scalars()[1], layout::encode_operand(DType::BFloat16, &[64, 1]).unwrap());
    }

    #[test]
    fn the_abi_names_the_builtin_ids() {
        use ferry_abi::orch_lib::builtin as b;
        use ferry_abi::services as s;
        assert_eq!(
            [b::ADD, b::MUL, b::COPY, b::ADD_ND, b::MUL_ND, b::CAST_ND],
            [
                s::KERNEL_ADD,
                s::KERNEL_MUL,
                s::KERNEL_COPY,
                s::KERNEL_ADD_ND,
                s::KERNEL_MUL_ND,
                s::KERNEL_CAST_ND
            ]
        );
        assert_eq!(
            [b::RMSNORM_ND, b::SOFTMAX_ND, b::ROPE_ND, b::MATMUL_ND],
            [s::KERNEL_RMSNORM_ND, s::KERNEL_SOFTMAX_ND, s::KERNEL_ROPE_ND, s::KERNEL_MATMUL_ND]
        );
    }

    #[test]
    fn refusals_name_the_argument() {
        let odd = UView::nd(Tensor(0), DType::BFloat16, 1, &[4]);
        let e = lower(5, TaskSpec::new(7).input(odd).record().unwrap(), 1).unwrap_err();
        assert_eq!(e, SubmitError::BadArg { task: 5, arg: 0, problem: ArgProblem::Unaligned });
        let mut rec = *TaskSpec::new(7).input(Tensor(0)).record().unwrap();
        rec.args[0].dir = 9;
        let e = lower(0, &rec, 1).unwrap_err();
        assert_eq!(e, SubmitError::BadArg { task: 0, arg: 0, problem: ArgProblem::Direction });
        for p in ArgProblem::ALL {
            assert_eq!(ArgProblem::from_code(p.code()), Some(p));
        }
    }
}
