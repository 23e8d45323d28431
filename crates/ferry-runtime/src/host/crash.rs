//! Surviving a kernel that ends the process: while a [`CrashGuard`] is armed, a kernel's fatal
//! signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT: a NULL dereference, a stack overflow,
//! `abort()`) or its call to `exit()` writes the run's end record
//! ([`ferry_profile::run_end`]) through a descriptor opened before the run, says on stderr which
//! kernel, task and core ended the run, and the process still ends as it would have (by the
//! same signal), except that `exit()` during the run exits with [`EXIT_DURING_RUN`], never 0.
//!
//! On the simulated chip the cores are threads of the host process, so a kernel's crash is the
//! host's; the per-core slots of [`crate::device::inflight`] name the task each core was
//! running. What the native profile sealed before the crash stays on disk (the page cache
//! outlives the process); nothing else is written: a signal handler may call only
//! async-signal-safe functions, so it encodes the record into a buffer allocated when the guard
//! was armed and writes it with one `pwrite`.
//!
//! The handler runs on the thread's alternate signal stack (Rust gives every thread one), so a
//! stack overflow is caught too; it then hands the signal to the handler that was there before
//! (Rust's own prints `has overflowed its stack`) or to the default action.
//!
//! SIGINT and SIGTERM are not caught here: the `ferry` command's signal thread calls
//! [`end_by_signal`] before it exits.
//!
//! # Examples
//! ```no_run
//! use ferry_runtime::host::crash::CrashGuard;
//! let guard = CrashGuard::arm(None, [(256, "saxpy".to_string())], "").unwrap();
//! // … the run …
//! drop(guard); // the handlers that were there before are back
//! ```
use std::cell::UnsafeCell;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU8, Ordering};

use ferry_profile::run_end::{signal_str, EndCause, EndWriter, MAX_RUN_END_BYTES};

use crate::device::inflight;

/// The exit status of `ferry run` when a kernel called `exit()` during the run (whatever
/// status it passed): `EX_SOFTWARE`.
pub const EXIT_DURING_RUN: i32 = 70;

/// The signals a guard catches.
const SIGNALS: [libc::c_int; 5] =
    [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT];

const IDLE: u8 = 0;
const ARMING: u8 = 1;
const ARMED: u8 = 2;
const FIRED: u8 = 3;

/// The guard's state: [`IDLE`] → [`ARMING`] → [`ARMED`] → [`IDLE`] (disarmed) or [`FIRED`]
/// (the process is ending; the first to swap `ARMED` for `FIRED` writes the record).
static STATE: AtomicU8 = AtomicU8::new(IDLE);
/// What an armed guard's handlers use; owned by the guard, never freed once fired.
static ARMED_AT: AtomicPtr<Armed> = AtomicPtr::new(std::ptr::null_mut());
/// The thread that fired (its `gettid`).
static WINNER: AtomicI32 = AtomicI32::new(0);
/// The thread (its `gettid`) that [`end_by_signal`] was called on: it exits as the signal asks
/// (`128 + sig`) even when a guard was armed after it found none (0: none).
static ENDING_BY_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// 1 once the `exit()` hook is registered (it cannot be unregistered: it does nothing unless a
/// guard is armed).
static EXIT_HOOK: AtomicU8 = AtomicU8::new(0);

/// Why a guard could not be armed.
#[derive(Debug, thiserror::Error)]
pub enum CrashGuardError {
    /// Another guard is armed in this process.
    #[error("a crash guard is armed already")]
    Busy,
    /// Installing a signal handler or the `exit()` hook.
    #[error("installing the crash handlers")]
    Install(#[source] std::io::Error),
}

/// What the handlers need, prepared when the guard is armed.
struct Armed {
    /// The end record's file, empty until a handler writes it.
    record: Option<File>,
    /// Kernel id → name (NUL-padded, at most 31 bytes), for the record and the message.
    names: Vec<(u32, [u8; 32])>,
    /// Said after the cause on stderr (where the run's directory is).
    note: Vec<u8>,
    /// The handlers there before, per [`SIGNALS`] entry.
    old: [libc::sigaction; SIGNALS.len()],
    /// The record being written (only the thread that fired touches it).
    buf: UnsafeCell<[u8; MAX_RUN_END_BYTES]>,
    /// The stderr line being written (as `buf`).
    msg: UnsafeCell<[u8; 512]>,
}

/// An armed crash guard (see the [module docs](self)); dropping it disarms it.
#[derive(Debug)]
pub struct CrashGuard {
    _armed: (),
}

impl CrashGuard {
    /// Arms the guard: `record` (an empty file opened through the run directory's handle, or
    /// none without a directory) receives the end record; `kernels` names the kernel ids;
    /// `note` is printed after the cause (`; ferry report DIR reads what the run sealed`).
    ///
    /// # Errors
    /// [`CrashGuardError::Busy`] while another guard is armed; [`CrashGuardError::Install`].
    pub fn arm(
        record: Option<File>,
        kernels: impl IntoIterator<Item = (u32, String)>,
        note: &str,
    ) -> Result<CrashGuard, CrashGuardError> {
        // AcqRel: one arming at a time; pairs with `disarm`'s Release store of IDLE.
        if STATE.compare_exchange(IDLE, ARMING, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Err(CrashGuardError::Busy);
        }
        let names = kernels
            .into_iter()
            .map(|(id, n)| {
                let mut b = [0u8; 32];
                let n = &n.as_bytes()[..n.len().min(31)];
                b[..n.len()].copy_from_slice(n);
                (id, b)
            })
            .collect();
        // SAFETY: `sigaction` is plain old data; all-zero is a valid (empty) value.
        let zero: libc::sigaction = unsafe { std::mem::zeroed() };
        let mut old = [zero; SIGNALS.len()];
        for (sig, o) in SIGNALS.iter().zip(old.iter_mut()) {
            // SAFETY: a null new action only queries the current one into `o`.
            if unsafe { libc::sigaction(*sig, std::ptr::null(), o) } != 0 {
                STATE.store(IDLE, Ordering::Release); // Release: ends the arming
                return Err(CrashGuardError::Install(std::io::Error::last_os_error()));
            }
        }
        let armed = Box::new(Armed {
            record,
            names,
            note: note.as_bytes().to_vec(),
            old,
            buf: UnsafeCell::new([0; MAX_RUN_END_BYTES]),
            msg: UnsafeCell::new([0; 512]),
        });
        // Release: the handlers' Acquire loads of the pointer see the prepared `Armed`.
        ARMED_AT.store(Box::into_raw(armed), Ordering::Release);
        // Release: armed before any handler of ours is installed, so a handler never sees a
        // guard half made.
        STATE.store(ARMED, Ordering::Release);
        let install = || -> std::io::Result<()> {
            register_exit_hook()?;
            for sig in SIGNALS {
                // SAFETY: zeroed sigaction then filled: a siginfo handler on the alternate
                // stack, with an empty mask.
                let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
                act.sa_sigaction = on_signal as *const () as usize;
                act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                // SAFETY: `act` is a valid action whose handler is async-signal-safe.
                if unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        };
        let guard = CrashGuard { _armed: () };
        install().map_err(CrashGuardError::Install)?; // the guard's drop puts back what was
        Ok(guard)
    }
}

impl Drop for CrashGuard {
    fn drop(&mut self) {
        // Acquire: pairs with `arm`'s Release store of the pointer.
        let p = ARMED_AT.load(Ordering::Acquire);
        if p.is_null() {
            return;
        }
        // SAFETY: `p` is the live `Armed` of this guard: freed only below, by this guard.
        let old = unsafe { &(*p).old };
        for (sig, o) in SIGNALS.iter().zip(old) {
            // SAFETY: puts back the action that was there before.
            unsafe { libc::sigaction(*sig, o, std::ptr::null_mut()) };
        }
        // AcqRel: a handler that fired first keeps `Armed` (the process is ending); otherwise
        // none can start using it from here on, and it is freed.
        if STATE.compare_exchange(ARMED, IDLE, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            ARMED_AT.store(std::ptr::null_mut(), Ordering::Release); // Release: with the state
                                                                     // SAFETY: from `Box::into_raw` in `arm`; no handler holds it (the state was ARMED,
                                                                     // never FIRED).
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// Bytes of the alternate signal stack [`on_core_thread`] gives a core's thread.
pub const ALT_STACK_BYTES: usize = 64 << 10;

/// A thread's own alternate signal stack, given back when the thread ends.
struct AltStack {
    mem: Box<[u8]>,
}

impl Drop for AltStack {
    fn drop(&mut self) {
        // SAFETY: a disabled alternate stack; the query (`old`) shows whether ours is current.
        unsafe {
            let mut old: libc::stack_t = std::mem::zeroed();
            libc::sigaltstack(std::ptr::null(), &mut old);
            if old.ss_sp == self.mem.as_mut_ptr().cast() {
                let off = libc::stack_t {
                    ss_sp: std::ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
                libc::sigaltstack(&off, std::ptr::null_mut());
            }
        }
    }
}

thread_local! {
    static ALT_STACK: std::cell::RefCell<Option<AltStack>> = const { std::cell::RefCell::new(None) };
}

/// Called on each core's thread before its executor starts: while a guard is armed, gives the
/// thread an alternate signal stack of [`ALT_STACK_BYTES`] (the one Rust gives every thread
/// is a few KiB, too small for the handler beside the kernel's signal frame in a debug build).
/// Does nothing otherwise.
pub fn on_core_thread() {
    // Acquire: pairs with `arm`'s Release store.
    if STATE.load(Ordering::Acquire) != ARMED {
        return;
    }
    let _ = ALT_STACK.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.is_some() {
            return;
        }
        let mut alt = AltStack { mem: vec![0u8; ALT_STACK_BYTES].into_boxed_slice() };
        let st = libc::stack_t {
            ss_sp: alt.mem.as_mut_ptr().cast(),
            ss_flags: 0,
            ss_size: ALT_STACK_BYTES,
        };
        // SAFETY: `st` addresses memory this thread's `ALT_STACK` keeps until the thread ends,
        // when its drop disables the stack first.
        if unsafe { libc::sigaltstack(&st, std::ptr::null_mut()) } == 0 {
            *s = Some(alt);
        }
    });
}

/// Records that signal `sig` (SIGINT, SIGTERM: delivered to the `ferry` command's signal
/// thread) is ending the process during the run: writes the end record, with every core's
/// unfinished task, and returns `true`; `false` when no guard is armed or the record is being
/// written already. The caller then exits; the `exit()` hook lets it.
pub fn end_by_signal(sig: i32) -> bool {
    // Release: read by the exit hook on this same thread (Acquire), so a guard armed between
    // here and the caller's `exit()` does not take that exit for a kernel's.
    ENDING_BY_SIGNAL.store(tid(), Ordering::Release);
    let Some(a) = fire() else { return false };
    let cause = EndCause::Signal { signal: sig, code: libc::SI_USER };
    write_end(a, cause, None, None, false);
    true
}

/// The thread's id (`gettid`: async-signal-safe).
fn tid() -> i32 {
    // SAFETY: `gettid` has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Claims the end for the calling thread: its `Armed` when a guard was armed and no one fired.
fn fire() -> Option<&'static Armed> {
    // AcqRel: the first to fire wins; pairs with `arm`'s Release stores.
    STATE.compare_exchange(ARMED, FIRED, Ordering::AcqRel, Ordering::Acquire).ok()?;
    // Release: read by a second firing thread (Acquire) to know it is not the winner.
    WINNER.store(tid(), Ordering::Release);
    // Acquire: pairs with `arm`'s Release store; a fired `Armed` is never freed.
    let p = ARMED_AT.load(Ordering::Acquire);
    // SAFETY: non-null while ARMED (set before the state), and never freed once FIRED.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Whether another thread fired (the process is ending there: this one waits for it).
fn fired_elsewhere() -> bool {
    // Acquire: pairs with `fire`'s Release store of the winner.
    STATE.load(Ordering::Acquire) == FIRED && WINNER.load(Ordering::Acquire) != tid()
}

/// Blocks the calling thread for good (another thread is ending the process).
fn wait_for_the_end() -> ! {
    loop {
        // SAFETY: `pause` has no preconditions.
        unsafe { libc::pause() };
    }
}

/// The name of kernel `id` in `a`'s table (empty when unknown).
fn name_of(a: &Armed, id: u32) -> &[u8] {
    let n = a.names.iter().find(|(k, _)| *k == id).map_or(&[][..], |(_, n)| &n[..]);
    &n[..n.iter().position(|&c| c == 0).unwrap_or(n.len())]
}

/// Writes the end record of `cause` (the faulting core, its fault address and whether that
/// lies in its stack) and the stderr line. Async-signal-safe: atomics, fixed buffers, `pwrite`
/// and `write`.
fn write_end(a: &Armed, cause: EndCause, core: Option<u32>, addr: Option<u64>, in_stack: bool) {
    // SAFETY: only the thread that fired reaches here, once: nothing else touches the buffers.
    let (buf, msg) = unsafe { (&mut *a.buf.get(), &mut *a.msg.get()) };
    let mut w = EndWriter::new(buf, cause);
    w.fault(core, addr, in_stack);
    let (chunks, records) = ferry_profile::recorder::sealed_in_process();
    w.sealed(chunks, records);
    let mut mine = None;
    inflight::for_each_running(|c, kernel, task| {
        w.push(c, kernel, task, name_of(a, kernel));
        if Some(c) == core {
            mine = Some((kernel, task));
        }
    });
    let n = w.finish();
    if let Some(f) = &a.record {
        // SAFETY: `buf[..n]` is initialised; the descriptor is open while `a` lives.
        unsafe { libc::pwrite(f.as_raw_fd(), buf.as_ptr().cast(), n, 0) };
    }
    let mut m = Line { buf: msg, len: 0 };
    m.put(b"ferry: ");
    match (mine, core) {
        (Some((kernel, task)), Some(c)) => {
            m.put(b"kernel `");
            match name_of(a, kernel) {
                [] => m.dec(u64::from(kernel)),
                n => m.put(n),
            }
            m.put(b"` (task 0x");
            m.hex(task);
            m.put(b", core ");
            m.dec(u64::from(c));
            m.put(b") ended the run: ");
        }
        _ => m.put(b"the run was ended: "),
    }
    match cause {
        EndCause::Signal { signal, .. } => match signal_str(signal) {
            Some(s) => m.put(s.as_bytes()),
            None => {
                m.put(b"signal ");
                m.dec(signal as u64);
            }
        },
        EndCause::Exit { status } => {
            m.put(b"exit(");
            m.dec(status as u32 as u64);
            m.put(b")");
        }
    }
    if in_stack {
        m.put(b" (stack overflow)");
    }
    m.put(&a.note);
    m.put(b"\n");
    // SAFETY: `msg[..len]` is initialised; fd 2 may be closed, then nothing is written.
    unsafe { libc::write(2, m.buf.as_ptr().cast(), m.len) };
}

/// A line built in a fixed buffer, cut at its end.
struct Line<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Line<'_> {
    fn put(&mut self, b: &[u8]) {
        let n = b.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }
    fn digits(&mut self, mut v: u64, base: u64) {
        let mut d = [0u8; 20];
        let mut i = d.len();
        loop {
            i -= 1;
            d[i] = b"0123456789abcdef"[(v % base) as usize];
            v /= base;
            if v == 0 {
                break;
            }
        }
        self.put(&d[i..]);
    }
    fn dec(&mut self, v: u64) {
        self.digits(v, 10);
    }
    fn hex(&mut self, v: u64) {
        self.digits(v, 16);
    }
}

/// The signal handler (see the [module docs](self)).
extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as u64) };
    let faulted = code > 0 && sig != libc::SIGABRT;
    if let Some(a) = fire() {
        let core = inflight::current_core();
        let in_stack = faulted
            && core.and_then(inflight::stack_top).is_some_and(|top| {
                // The cores' stacks are small; a fault at most 16 MiB below the top of the
                // faulting core's stack is in it or in its guard: an overflow.
                (addr as usize) < top && top - (addr as usize) <= 16 << 20
            });
        write_end(
            a,
            EndCause::Signal { signal: sig, code },
            core,
            faulted.then_some(addr),
            in_stack,
        );
        pass_on(a, sig, faulted);
    } else if fired_elsewhere() {
        wait_for_the_end();
    } else {
        // Acquire: pairs with `arm`'s Release store.
        let p = ARMED_AT.load(Ordering::Acquire);
        // Acquire: pairs with `fire`'s AcqRel swap; a fired `Armed` stays.
        let fired = STATE.load(Ordering::Acquire) == FIRED;
        if fired && !p.is_null() {
            // This thread fired before (Rust's overflow handler aborting after ours, say).
            // SAFETY: a fired `Armed` is never freed.
            pass_on(unsafe { &*p }, sig, faulted);
        } else if !faulted {
            // Disarmed meanwhile: the old action is back; send it again.
            // SAFETY: `raise` is async-signal-safe.
            unsafe { libc::raise(sig) };
        }
    }
}

/// Puts back the action that was there before for `sig` and lets it handle the signal: a fault
/// happens again when the handler returns; a sent signal is sent again.
fn pass_on(a: &Armed, sig: libc::c_int, faulted: bool) {
    if let Some(i) = SIGNALS.iter().position(|&s| s == sig) {
        // SAFETY: puts back the action saved when the guard was armed.
        unsafe { libc::sigaction(sig, &a.old[i], std::ptr::null_mut()) };
    }
    if !faulted {
        // SAFETY: `raise` is async-signal-safe; the signal is blocked until this handler
        // returns, then delivered to the action put back.
        unsafe { libc::raise(sig) };
    }
}

/// The `exit()` hook: `exit()` called during an armed run records its status and ends the
/// process with [`EXIT_DURING_RUN`]; the thread that fired, and the thread a signal is ending
/// the process on ([`end_by_signal`]), exit as they asked; any other `exit()` goes on.
fn on_exit_status(status: libc::c_int) {
    // Acquire: pairs with `end_by_signal`'s Release store.
    if ENDING_BY_SIGNAL.load(Ordering::Acquire) == tid() {
        return;
    }
    if let Some(a) = fire() {
        write_end(a, EndCause::Exit { status }, inflight::current_core(), None, false);
        // SAFETY: `_exit` ends the process without running the other exit hooks.
        unsafe { libc::_exit(EXIT_DURING_RUN) };
    }
    if fired_elsewhere() {
        wait_for_the_end();
    }
}

#[cfg(target_env = "gnu")]
fn register_exit_hook() -> std::io::Result<()> {
    extern "C" {
        fn on_exit(
            f: extern "C" fn(libc::c_int, *mut libc::c_void),
            arg: *mut libc::c_void,
        ) -> libc::c_int;
    }
    extern "C" fn hook(status: libc::c_int, _: *mut libc::c_void) {
        on_exit_status(status);
    }
    // Relaxed: a second registration is harmless (the hook does nothing when not armed).
    if EXIT_HOOK.swap(1, Ordering::Relaxed) == 0 {
        // SAFETY: glibc's `on_exit` takes a plain function and an unused argument.
        if unsafe { on_exit(hook, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::other("on_exit refused the hook"));
        }
    }
    Ok(())
}

#[cfg(not(target_env = "gnu"))]
fn register_exit_hook() -> std::io::Result<()> {
    extern "C" fn hook() {
        // Without `on_exit` the status is not known: recorded as -1.
        on_exit_status(-1);
    }
    // Relaxed: as above.
    if EXIT_HOOK.swap(1, Ordering::Relaxed) == 0 {
        // SAFETY: `atexit` takes a plain function.
        if unsafe { libc::atexit(hook) } != 0 {
            return Err(std::io::Error::other("atexit refused the hook"));
        }
    }
    Ok(())
}
