//! The workload interpreter: runs a compiled workload program (the compact form of a workload
//! file, `ferry-workload` compiles it) through any [`Orchestrate`].
//!
//! One interpreter serves every variant: the host graph builder (host-built), the device
//! orchestrator (device-orchestrated, in process) and the `orch-workload` orchestration object
//! (device-orchestrated, full path, through [`WithDeviceWords`]). The program travels to the
//! device as a callable argument: a run tensor whose `f32` elements hold the program's `u32`
//! words bit for bit; scalar 0 names that tensor. The interpreter reads it through
//! [`Orchestrate::read_words`], validates all of it in one linear pass (bounds, nesting, counts,
//! expressions, the task total) before submitting anything, and refuses a malformed program with
//! [`SubmitError::BadProgram`] naming the word and the [`ProgramFault`]; it never reads past the
//! program or indexes out of range.
//!
//! # Layout (all `u32` words)
//! Header, [`HEADER_WORDS`] words: `MAGIC`, `VERSION`, total words, run tensors (the program
//! tensor excluded), scratch slots, loop variables, task total (low, high).
//!
//! | op | words | then |
//! |---|---|---|
//! | [`OP_TASK`] | `op kernel n_args n_scalars` `blocks:expr` | `n_args` × (`tensor role offset:expr len:expr`), `n_scalars` × (`kind value`) |
//! | [`OP_REPEAT`] | `op var body_words` `count:expr` | the body (`body_words` words), run `count` times with `var` = 0, 1, … |
//! | [`OP_SCOPE`] | `op n_scratch body_words` | `n_scratch` × (`slot len:expr`), then the body inside `scope_begin_at`/`scope_end` (the site: [`SITE_FILE`] and the index of the `op` word) |
//!
//! An expression is `n` then `n` words of reverse-Polish code ([`E_CONST`] lo hi, [`E_VAR`]
//! slot, and the binary operators); `n = 0` as a length means "to the end of the tensor". A
//! tensor reference below the run-tensor count is that run tensor; with [`SCRATCH_REF`] set it is
//! a scratch slot of an enclosing scope. A scalar is `kind` [`SCALAR_U64`] (an expression) or
//! [`SCALAR_F32`] (one word of `f32` bits). A `role` is `Role::bits`, or'ed with [`ARG_DUMP`]
//! for an argument marked for ArgsDump. Repeat counts may not use loop variables, so the task
//! total is known from the program alone.
use super::ffi::ARG_DUMP;
use super::image::{MAX_TASK_SCALARS, MAX_TASK_TENSORS};
use super::task::{Orchestrate, Role, ScopeSite, Task, TensorId, View};
use crate::error::SubmitError;

/// First header word.
pub const MAGIC: u32 = 0x4B4C_5746;
/// Second header word.
pub const VERSION: u32 = 1;
/// Header words.
pub const HEADER_WORDS: usize = 8;
/// Longest program the interpreter reads (words); checked before anything is allocated.
pub const MAX_PROGRAM_WORDS: u64 = 1 << 20;
/// Most tasks a program may expand to.
pub const MAX_TASKS: u64 = 1 << 22;
/// Deepest nesting of repeats and scopes.
pub const MAX_DEPTH: usize = 8;
/// Most loop variables and scratch slots.
pub const MAX_SLOTS: u32 = 16;
/// Longest expression (words).
pub const MAX_EXPR_WORDS: u32 = 64;
/// Deepest expression stack.
pub const MAX_STACK: usize = 16;

/// The file of the sites of the scopes a program opens
/// ([`Orchestrate::scope_begin_at`]): ScopeStats records each scope as `workload:<word>`, `word`
/// being the index of its [`OP_SCOPE`] word in the program.
pub const SITE_FILE: &str = "workload";

/// Opcode: one task.
pub const OP_TASK: u32 = 1;
/// Opcode: a repeat loop.
pub const OP_REPEAT: u32 = 2;
/// Opcode: a scope.
pub const OP_SCOPE: u32 = 3;
/// Expression: push a 64-bit constant (two words follow, low first).
pub const E_CONST: u32 = 1;
/// Expression: push loop variable `slot` (one word follows).
pub const E_VAR: u32 = 2;
/// Expression: `a + b`.
pub const E_ADD: u32 = 3;
/// Expression: `a - b` (an underflow is a fault).
pub const E_SUB: u32 = 4;
/// Expression: `a * b`.
pub const E_MUL: u32 = 5;
/// Expression: `a / b`.
pub const E_DIV: u32 = 6;
/// Expression: `a % b`.
pub const E_MOD: u32 = 7;
/// Expression: `min(a, b)`.
pub const E_MIN: u32 = 8;
/// Expression: `max(a, b)`.
pub const E_MAX: u32 = 9;
/// Applies binary expression opcode `op` (`E_ADD..=E_MAX`) to `a` and `b`: `None` on overflow,
/// underflow or a division by zero. The one definition of the operators, shared by the
/// device's interpreter and the host compiler's constant folding and evaluation.
pub fn apply(op: u32, a: u64, b: u64) -> Option<u64> {
    match op {
        E_ADD => a.checked_add(b),
        E_SUB => a.checked_sub(b),
        E_MUL => a.checked_mul(b),
        E_DIV => a.checked_div(b),
        E_MOD => a.checked_rem(b),
        E_MIN => Some(a.min(b)),
        E_MAX => Some(a.max(b)),
        _ => None,
    }
}

/// Tensor reference flag: a scratch slot.
pub const SCRATCH_REF: u32 = 1 << 31;
/// Scalar kind: a `u64` expression.
pub const SCALAR_U64: u32 = 0;
/// Scalar kind: `f32` bits.
pub const SCALAR_F32: u32 = 1;

/// Why a workload program was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProgramFault {
    /// Wrong magic or version, or a header that contradicts the program tensor.
    #[error("bad header")]
    BadHeader,
    /// The program is longer than [`MAX_PROGRAM_WORDS`] or its tensor cannot be read.
    #[error("program too large or unreadable")]
    Unreadable,
    /// An op, operand or body runs past the end of its enclosing body.
    #[error("truncated op or body")]
    Truncated,
    /// An unknown opcode, role or scalar kind.
    #[error("unknown opcode or field value")]
    BadOpcode,
    /// Repeats and scopes nest deeper than [`MAX_DEPTH`].
    #[error("nesting too deep")]
    TooDeep,
    /// An expression is malformed (stack underflow or overflow, left more than one value).
    #[error("malformed expression")]
    BadExpr,
    /// An expression overflowed, underflowed or divided by zero.
    #[error("arithmetic overflow or division by zero")]
    Arithmetic,
    /// An expression reads a loop variable no enclosing repeat binds, a repeat count uses one,
    /// or a nested repeat rebinds one.
    #[error("unbound loop variable")]
    UnboundVar,
    /// A tensor reference names no run tensor or no live scratch slot (or a nested scope
    /// re-allocates a live slot).
    #[error("bad tensor reference")]
    BadTensorRef,
    /// The task total differs from the header's or exceeds [`MAX_TASKS`].
    #[error("task total mismatch or over the limit")]
    TaskCount,
}

impl ProgramFault {
    const ALL: [ProgramFault; 10] = [
        ProgramFault::BadHeader,
        ProgramFault::Unreadable,
        ProgramFault::Truncated,
        ProgramFault::BadOpcode,
        ProgramFault::TooDeep,
        ProgramFault::BadExpr,
        ProgramFault::Arithmetic,
        ProgramFault::UnboundVar,
        ProgramFault::BadTensorRef,
        ProgramFault::TaskCount,
    ];

    /// Wire code (1-based).
    pub fn code(self) -> u32 {
        Self::ALL.iter().position(|&f| f == self).map_or(0, |i| i as u32 + 1)
    }

    /// Decodes [`code`](Self::code).
    pub fn from_code(c: u32) -> Option<ProgramFault> {
        Self::ALL.get((c as usize).checked_sub(1)?).copied()
    }
}

fn bad(at: usize, fault: ProgramFault) -> SubmitError {
    SubmitError::BadProgram { at: at as u64, fault }
}

/// The program's words with bounds-checked reads.
struct Words<'a> {
    w: &'a [u32],
}

impl Words<'_> {
    fn at(&self, i: usize, end: usize) -> Result<u32, SubmitError> {
        if i >= end {
            return Err(bad(i, ProgramFault::Truncated));
        }
        self.w.get(i).copied().ok_or(bad(i, ProgramFault::Truncated))
    }

    /// The expression at `i` (inside `..end`): its code range and the index after it.
    fn expr(&self, i: usize, end: usize) -> Result<(usize, usize, usize), SubmitError> {
        let n = self.at(i, end)?;
        if n > MAX_EXPR_WORDS {
            return Err(bad(i, ProgramFault::BadExpr));
        }
        let (s, e) = (i + 1, i + 1 + n as usize);
        if e > end {
            return Err(bad(i, ProgramFault::Truncated));
        }
        Ok((s, e, e))
    }

    /// Evaluates code `s..e` with `vars` (`None`: unbound).
    fn eval(&self, s: usize, e: usize, vars: &[Option<u64>]) -> Result<u64, SubmitError> {
        let mut stack = [0u64; MAX_STACK];
        let mut sp = 0usize;
        let mut i = s;
        while i < e {
            let op = self.at(i, e)?;
            let v = match op {
                E_CONST => {
                    let lo = u64::from(self.at(i + 1, e)?);
                    let hi = u64::from(self.at(i + 2, e)?);
                    i += 3;
                    lo | hi << 32
                }
                E_VAR => {
                    let slot = self.at(i + 1, e)? as usize;
                    i += 2;
                    vars.get(slot).copied().flatten().ok_or(bad(i - 2, ProgramFault::UnboundVar))?
                }
                E_ADD..=E_MAX => {
                    if sp < 2 {
                        return Err(bad(i, ProgramFault::BadExpr));
                    }
                    let (a, b) = (stack[sp - 2], stack[sp - 1]);
                    sp -= 2;
                    let r = apply(op, a, b);
                    i += 1;
                    r.ok_or(bad(i - 1, ProgramFault::Arithmetic))?
                }
                _ => return Err(bad(i, ProgramFault::BadOpcode)),
            };
            if sp == MAX_STACK {
                return Err(bad(i, ProgramFault::BadExpr));
            }
            stack[sp] = v;
            sp += 1;
        }
        if sp != 1 {
            return Err(bad(s.saturating_sub(1), ProgramFault::BadExpr));
        }
        Ok(stack[0])
    }
}

/// What the header says.
#[derive(Clone, Copy, Debug)]
struct Header {
    run_tensors: u32,
    scratch: u32,
    vars: u32,
    tasks: u64,
}

fn header(w: &Words<'_>) -> Result<Header, SubmitError> {
    let end = w.w.len();
    if w.at(0, end)? != MAGIC || w.at(1, end)? != VERSION || w.at(2, end)? as usize != end {
        return Err(bad(0, ProgramFault::BadHeader));
    }
    let h = Header {
        run_tensors: w.at(3, end)?,
        scratch: w.at(4, end)?,
        vars: w.at(5, end)?,
        tasks: u64::from(w.at(6, end)?) | u64::from(w.at(7, end)?) << 32,
    };
    if h.scratch > MAX_SLOTS || h.vars > MAX_SLOTS {
        return Err(bad(4, ProgramFault::BadHeader));
    }
    Ok(h)
}

/// One linear pass: structure, expressions (evaluated with every bound variable at 0, which
/// checks their form and binding), tensor references and the task total. Returns the total.
fn validate(w: &Words<'_>, h: &Header) -> Result<u64, SubmitError> {
    // (end, multiplier, bound-var mask, scratch mask) per open body.
    let mut frames: [(usize, u64, u32, u32); MAX_DEPTH + 1] = [(0, 0, 0, 0); MAX_DEPTH + 1];
    let mut depth = 0usize;
    frames[0] = (w.w.len(), 1, 0, 0);
    let mut total = 0u64;
    let mut i = HEADER_WORDS;
    let mut zeros = [None; MAX_SLOTS as usize];
    loop {
        let (end, mult, vmask, smask) = frames[depth];
        if i == end {
            if depth == 0 {
                break;
            }
            depth -= 1;
            continue;
        }
        for (s, z) in zeros.iter_mut().enumerate() {
            *z = (vmask >> s & 1 == 1).then_some(0);
        }
        let check_expr = |at: usize| -> Result<usize, SubmitError> {
            let (s, e, next) = w.expr(at, end)?;
            match w.eval(s, e, &zeros) {
                Ok(_) | Err(SubmitError::BadProgram { fault: ProgramFault::Arithmetic, .. }) => {
                    Ok(next)
                }
                Err(x) => Err(x),
            }
        };
        let op = w.at(i, end)?;
        match op {
            OP_TASK => {
                let (n_args, n_scalars) = (w.at(i + 2, end)?, w.at(i + 3, end)?);
                if n_args as usize > MAX_TASK_TENSORS || n_scalars as usize > MAX_TASK_SCALARS {
                    return Err(bad(i + 2, ProgramFault::BadOpcode));
                }
                let mut j = check_expr(i + 4)?;
                for _ in 0..n_args {
                    let t = w.at(j, end)?;
                    let live = if t & SCRATCH_REF != 0 {
                        let s = t & !SCRATCH_REF;
                        s < h.scratch && smask >> s & 1 == 1
                    } else {
                        t < h.run_tensors
                    };
                    if !live {
                        return Err(bad(j, ProgramFault::BadTensorRef));
                    }
                    let role = w.at(j + 1, end)?;
                    if Role::from_bits(role).is_none() || role & !ARG_DUMP > 3 {
                        return Err(bad(j + 1, ProgramFault::BadOpcode));
                    }
                    j = check_expr(j + 2)?;
                    let (s, e, next) = w.expr(j, end)?;
                    if s != e {
                        check_expr(j)?;
                    }
                    j = next;
                }
                for _ in 0..n_scalars {
                    j = match w.at(j, end)? {
                        SCALAR_U64 => check_expr(j + 1)?,
                        SCALAR_F32 => {
                            w.at(j + 1, end)?;
                            j + 2
                        }
                        _ => return Err(bad(j, ProgramFault::BadOpcode)),
                    };
                }
                total = total.checked_add(mult).ok_or(bad(i, ProgramFault::TaskCount))?;
                if total > MAX_TASKS {
                    return Err(bad(i, ProgramFault::TaskCount));
                }
                i = j;
            }
            OP_REPEAT | OP_SCOPE => {
                if depth == MAX_DEPTH {
                    return Err(bad(i, ProgramFault::TooDeep));
                }
                let body = w.at(i + 2, end)? as usize;
                let (start, m, vm, sm) = if op == OP_REPEAT {
                    let var = w.at(i + 1, end)?;
                    if var >= h.vars || vmask >> var & 1 == 1 {
                        return Err(bad(i + 1, ProgramFault::UnboundVar));
                    }
                    let (s, e, next) = w.expr(i + 3, end)?;
                    let count = w.eval(s, e, &[None; MAX_SLOTS as usize])?;
                    let m = mult.checked_mul(count).ok_or(bad(i, ProgramFault::TaskCount))?;
                    (next, m, vmask | 1 << var, smask)
                } else {
                    let mut j = i + 3;
                    let mut sm = smask;
                    for _ in 0..w.at(i + 1, end)?.min(MAX_SLOTS + 1) {
                        let slot = w.at(j, end)?;
                        if slot >= h.scratch || sm >> slot & 1 == 1 {
                            return Err(bad(j, ProgramFault::BadTensorRef));
                        }
                        sm |= 1 << slot;
                        j = check_expr(j + 1)?;
                    }
                    (j, mult, vmask, sm)
                };
                let body_end = start.checked_add(body).filter(|&e| e <= end);
                let body_end = body_end.ok_or(bad(i + 2, ProgramFault::Truncated))?;
                // Bodies are contiguous: when this one closes at `body_end`, the parent's next
                // op starts there.
                depth += 1;
                frames[depth] = (body_end, m, vm, sm);
                i = start;
            }
            _ => return Err(bad(i, ProgramFault::BadOpcode)),
        }
    }
    if total != h.tasks {
        return Err(bad(6, ProgramFault::TaskCount));
    }
    Ok(total)
}

/// A live repeat or scope while the program runs.
#[derive(Clone, Copy, Debug, Default)]
struct Frame {
    end: usize,
    body: usize,
    /// `None` for a scope; `(var, count, index)` for a repeat.
    repeat: Option<(usize, u64, u64)>,
    /// Scratch slots this scope allocated (mask).
    slots: u32,
}

/// Reads, validates and runs the workload program named by scalar 0.
///
/// # Errors
/// [`SubmitError::BadProgram`] for a malformed program (nothing is submitted then), or whatever
/// the orchestrator refuses.
pub fn interpret(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    let prog = o.scalar(0)?;
    let id = TensorId(u32::try_from(prog).map_err(|_| bad(0, ProgramFault::Unreadable))?);
    let info = o.tensor(id)?;
    if info.len > MAX_PROGRAM_WORDS || (info.len as usize) < HEADER_WORDS {
        return Err(bad(0, ProgramFault::Unreadable));
    }
    let mut buf = vec![0u32; info.len as usize];
    o.read_words(id, 0, &mut buf)?;
    run_words(o, &buf)
}

/// Validates and runs `program` (already in memory).
///
/// # Errors
/// As [`interpret`].
pub fn run_words(o: &mut dyn Orchestrate, program: &[u32]) -> Result<(), SubmitError> {
    let w = Words { w: program };
    let h = header(&w)?;
    if h.run_tensors > o.tensor_count() {
        return Err(bad(3, ProgramFault::BadHeader));
    }
    validate(&w, &h)?;
    let mut vars = [None; MAX_SLOTS as usize];
    let mut scratch = [None::<TensorId>; MAX_SLOTS as usize];
    let mut frames = [Frame::default(); MAX_DEPTH + 1];
    let mut depth = 0usize;
    frames[0] = Frame { end: program.len(), body: HEADER_WORDS, repeat: None, slots: 0 };
    let mut i = HEADER_WORDS;
    let expr = |at: usize, end: usize, vars: &[Option<u64>]| -> Result<(u64, usize), SubmitError> {
        let (s, e, next) = w.expr(at, end)?;
        Ok((if s == e { u64::MAX } else { w.eval(s, e, vars)? }, next))
    };
    loop {
        let f = frames[depth];
        if i >= f.end {
            match f.repeat {
                Some((var, count, k)) if k + 1 < count => {
                    frames[depth].repeat = Some((var, count, k + 1));
                    vars[var] = Some(k + 1);
                    i = f.body;
                    continue;
                }
                Some((var, _, _)) => vars[var] = None,
                None if depth > 0 => {
                    o.scope_end()?;
                    for (s, slot) in scratch.iter_mut().enumerate() {
                        if f.slots >> s & 1 == 1 {
                            *slot = None;
                        }
                    }
                }
                None => break,
            }
            depth -= 1;
            i = f.end;
            continue;
        }
        let end = f.end;
        match w.at(i, end)? {
            OP_TASK => {
                let kernel = w.at(i + 1, end)?;
                let (n_args, n_scalars) = (w.at(i + 2, end)?, w.at(i + 3, end)?);
                let (blocks, mut j) = expr(i + 4, end, &vars)?;
                let mut t = Task::new(kernel).blocks(u32::try_from(blocks).unwrap_or(u32::MAX));
                for _ in 0..n_args {
                    let r = w.at(j, end)?;
                    let tensor = if r & SCRATCH_REF != 0 {
                        let s = (r & !SCRATCH_REF) as usize;
                        scratch
                            .get(s)
                            .copied()
                            .flatten()
                            .ok_or(bad(j, ProgramFault::BadTensorRef))?
                    } else {
                        TensorId(r)
                    };
                    let role_word = w.at(j + 1, end)?;
                    let role =
                        Role::from_bits(role_word).ok_or(bad(j + 1, ProgramFault::BadOpcode))?;
                    let (off, next) = expr(j + 2, end, &vars)?;
                    let (len, next) = expr(next, end, &vars)?;
                    let off = if off == u64::MAX { 0 } else { off };
                    t = t.arg(View::range(tensor, off, len), role);
                    if role_word & ARG_DUMP != 0 {
                        t = t.dump();
                    }
                    j = next;
                }
                for _ in 0..n_scalars {
                    let (v, next) = match w.at(j, end)? {
                        SCALAR_F32 => (u64::from(w.at(j + 1, end)?), j + 2),
                        _ => expr(j + 1, end, &vars)?,
                    };
                    t = t.scalar(v);
                    j = next;
                }
                o.submit(&t)?;
                i = j;
            }
            op @ (OP_REPEAT | OP_SCOPE) => {
                if depth == MAX_DEPTH {
                    return Err(bad(i, ProgramFault::TooDeep));
                }
                let body = w.at(i + 2, end)? as usize;
                let (start, frame) = if op == OP_REPEAT {
                    let var = w.at(i + 1, end)? as usize;
                    let (count, next) = expr(i + 3, end, &vars)?;
                    let fr = Frame { end: 0, body: next, repeat: Some((var, count, 0)), slots: 0 };
                    if count == 0 {
                        i = next + body;
                        continue;
                    }
                    *vars.get_mut(var).ok_or(bad(i + 1, ProgramFault::UnboundVar))? = Some(0);
                    (next, fr)
                } else {
                    // The site is the scope's word in the program: what a host-side table
                    // (the workload's scope names) is keyed by.
                    o.scope_begin_at(ScopeSite::new(SITE_FILE, i as u32));
                    let mut j = i + 3;
                    let mut slots = 0u32;
                    for _ in 0..w.at(i + 1, end)? {
                        let s = w.at(j, end)? as usize;
                        let (len, next) = expr(j + 1, end, &vars)?;
                        let id = o.alloc_scratch(len)?;
                        *scratch.get_mut(s).ok_or(bad(j, ProgramFault::BadTensorRef))? = Some(id);
                        slots |= 1 << s;
                        j = next;
                    }
                    (j, Frame { end: 0, body: j, repeat: None, slots })
                };
                depth += 1;
                frames[depth] = Frame { end: start + body, ..frame };
                i = start;
            }
            _ => return Err(bad(i, ProgramFault::BadOpcode)),
        }
    }
    Ok(())
}

/// An [`Orchestrate`] that reads tensor words from device memory through `ops` and forwards
/// everything else to `inner`: what the `orch-workload` orchestration object runs
/// [`interpret`] over (the submission table has no read call; the object reads its argument
/// through the AICPU OS's services, as device code does).
pub struct WithDeviceWords<'a> {
    inner: &'a mut dyn Orchestrate,
    ops: &'a dyn super::ops::DeviceOps,
}

impl std::fmt::Debug for WithDeviceWords<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithDeviceWords").finish_non_exhaustive()
    }
}

impl<'a> WithDeviceWords<'a> {
    /// Wraps `inner`, reading words through `ops`.
    pub fn new(
        inner: &'a mut dyn Orchestrate,
        ops: &'a dyn super::ops::DeviceOps,
    ) -> WithDeviceWords<'a> {
        WithDeviceWords { inner, ops }
    }
}

/// Reads `out.len()` words of `tensor` from `offset` through `ops` (bounds-checked against the
/// tensor's length first).
///
/// # Errors
/// [`SubmitError::BadProgram`] ([`ProgramFault::Unreadable`]) when the range is outside the
/// tensor or device memory.
pub fn read_device_words(
    ops: &dyn super::ops::DeviceOps,
    info: super::task::TensorInfo,
    offset: u64,
    out: &mut [u32],
) -> Result<(), SubmitError> {
    let n = out.len() as u64;
    if offset.checked_add(n).is_none_or(|e| e > info.len) {
        return Err(bad(0, ProgramFault::Unreadable));
    }
    for (k, o) in out.iter_mut().enumerate() {
        let addr = info.addr + 4 * (offset + k as u64);
        let v = ops.mem_load(addr, 4, ferry_abi::services::MEM_LOAD_PLAIN);
        *o = v.ok_or(bad(k, ProgramFault::Unreadable))? as u32;
    }
    Ok(())
}

impl Orchestrate for WithDeviceWords<'_> {
    fn tensor_count(&self) -> u32 {
        self.inner.tensor_count()
    }
    fn tensor(&self, id: TensorId) -> Result<super::task::TensorInfo, SubmitError> {
        self.inner.tensor(id)
    }
    fn scalar_count(&self) -> u32 {
        self.inner.scalar_count()
    }
    fn scalar(&self, index: u32) -> Result<u64, SubmitError> {
        self.inner.scalar(index)
    }
    fn submit(&mut self, task: &Task) -> Result<super::task::TaskId, SubmitError> {
        self.inner.submit(task)
    }
    fn scope_begin(&mut self) {
        self.inner.scope_begin();
    }
    fn scope_begin_at(&mut self, site: ScopeSite) {
        self.inner.scope_begin_at(site);
    }
    fn scope_end(&mut self) -> Result<(), SubmitError> {
        self.inner.scope_end()
    }
    fn alloc_scratch(&mut self, len: u64) -> Result<TensorId, SubmitError> {
        self.inner.alloc_scratch(len)
    }
    fn read_words(
        &self,
        tensor: TensorId,
        offset: u64,
        out: &mut [u32],
    ) -> Result<(), SubmitError> {
        read_device_words(self.ops, self.inner.tensor(tensor)?, offset, out)
    }
}

/// The `orch-workload` object's entry: [`interpret`] over `o`, reading the program through the
/// AICPU OS's services in `ctx`.
///
/// # Errors
/// As [`interpret`]; [`ProgramFault::Unreadable`] without a compatible services table.
///
/// # Safety
/// `ctx.services` is null or points at a live services table for the call.
pub unsafe fn object_entry(
    ctx: &ferry_abi::services::OrchContext,
    o: &mut dyn Orchestrate,
) -> Result<(), SubmitError> {
    if ctx.services.is_null() {
        return Err(bad(0, ProgramFault::Unreadable));
    }
    // SAFETY: non-null and live for the call (caller's contract).
    let svc = unsafe { &*ctx.services };
    let ops = super::services::ServicesOps::new(svc).ok_or(bad(0, ProgramFault::Unreadable))?;
    interpret(&mut WithDeviceWords::new(o, &ops))
}
