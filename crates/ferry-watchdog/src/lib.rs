//! Liveness bounds for ferry's tests: a test that waits on another thread holds a [`Bound`];
//! if the test is still waiting when the bound's deadline passes, the watchdog prints
//! `<test> hung waiting for <what>` to standard error and aborts the test process, so
//! `cargo test` fails at once, naming the test, instead of running until CI's own limit with no
//! message.
//!
//! A bound is a hang guard, never a timing assertion: its deadline ([`DEFAULT_BOUND`], or
//! `FERRY_TEST_BOUND_SECS` seconds) is minutes, far beyond what any test takes on a slow,
//! loaded machine. A test that finishes drops its bound and nothing happens. Aborting (rather
//! than panicking in the test thread) is deliberate: the thread that hangs is blocked and cannot
//! panic, and a blocked test thread would keep the test binary alive after every other test
//! finished.
//!
//! The test's name is the name of the thread that creates the bound (the test harness names
//! each test's thread after the test); [`Bound::waiting_for`] updates what the test waits for
//! as it moves from one wait to the next, and the message names the last one. A helper the test
//! calls may arm a bound of its own for a narrower wait (one case of a matrix); when a bound of
//! a test expires, the message names the innermost (most recently armed) bound the test holds.
//!
//! A model checker's execution that never ends grows its state with every step, gigabytes in
//! a minute, long before a time bound fires: [`bound_with_memory`] also fails the wait when the
//! process's resident size passes a cap.
//!
//! # Examples
//! ```
//! let bound = ferry_watchdog::bound("the worker's reply");
//! let (tx, rx) = std::sync::mpsc::channel();
//! let worker = std::thread::spawn(move || tx.send(42).unwrap());
//! assert_eq!(rx.recv().unwrap(), 42);
//! bound.waiting_for("the worker to exit");
//! worker.join().unwrap();
//! ```
#![deny(missing_docs)]

use std::io::Write;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The deadline of a [`bound`] when `FERRY_TEST_BOUND_SECS` is unset: five minutes. ferry's
/// slowest test takes seconds idle and under a minute in a debug build beside two busy loops.
pub const DEFAULT_BOUND: Duration = Duration::from_secs(300);

/// The environment variable that overrides [`DEFAULT_BOUND`] (whole seconds, at least 1).
pub const BOUND_ENV: &str = "FERRY_TEST_BOUND_SECS";

/// The deadline of every [`bound`]: `FERRY_TEST_BOUND_SECS` seconds when set to a positive
/// integer, else [`DEFAULT_BOUND`]. A value that is not a positive integer is ignored with a
/// message on standard error.
pub fn configured_bound() -> Duration {
    match std::env::var(BOUND_ENV) {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(s) if s > 0 => Duration::from_secs(s),
            _ => {
                let _ = writeln!(
                    std::io::stderr(),
                    "ferry-watchdog: ignoring {BOUND_ENV}={v:?} (not a positive whole number \
                     of seconds); using {}s",
                    DEFAULT_BOUND.as_secs()
                );
                DEFAULT_BOUND
            }
        },
        Err(_) => DEFAULT_BOUND,
    }
}

struct Entry {
    id: u64,
    test: String,
    what: String,
    deadline: Instant,
    after: Duration,
    /// Resident bytes past which the process counts as hung in this wait (a model that grows
    /// without end); `None`: no memory bound.
    max_resident: Option<u64>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    entries: Vec<Entry>,
    monitor_started: bool,
}

struct Watchdog {
    table: Mutex<Table>,
    changed: Condvar,
}

fn watchdog() -> &'static Watchdog {
    static W: OnceLock<Watchdog> = OnceLock::new();
    W.get_or_init(|| Watchdog { table: Mutex::new(Table::default()), changed: Condvar::new() })
}

/// How often the monitor reads the process's resident size while a memory bound is armed.
const MEMORY_POLL: Duration = Duration::from_millis(200);

/// The process's resident set size in bytes (Linux `/proc/self/statm`; `None` elsewhere).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // 4 KiB pages: the page size of every Linux target ferry builds for.
    Some(pages * 4096)
}

/// What the watchdog does when a bound expires: reports it, then ends the process.
fn expire(e: &Entry, grew_to: Option<u64>) -> ! {
    if let Some(rss) = grew_to {
        let _ = writeln!(
            std::io::stderr(),
            "\nferry-watchdog: test `{}` hung waiting for {}: the process grew to {} MiB \
             resident, past its bound of {} MiB (a wait that never ends); aborting the test \
             process",
            e.test,
            e.what,
            rss >> 20,
            e.max_resident.unwrap_or(0) >> 20
        );
        std::process::abort()
    }
    // Straight to the process's stderr: the test harness captures `eprintln!` of test threads,
    // and a captured message would be lost with the aborted process.
    let _ = writeln!(
        std::io::stderr(),
        "\nferry-watchdog: test `{}` hung waiting for {} (liveness bound of {}s passed; \
         {BOUND_ENV} sets it); aborting the test process",
        e.test,
        e.what,
        e.after.as_secs_f64()
    );
    std::process::abort()
}

fn monitor(w: &'static Watchdog) {
    let mut t = w.table.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let now = Instant::now();
        let mut poll_memory = false;
        if let Some(cap) = t.entries.iter().filter_map(|e| e.max_resident).min() {
            poll_memory = true;
            if let Some(rss) = resident_bytes().filter(|&r| r > cap) {
                let e = t.entries.iter().find(|e| e.max_resident == Some(cap));
                expire(e.expect("the entry with the smallest cap"), Some(rss))
            }
        }
        match t.entries.iter().min_by_key(|e| e.deadline) {
            Some(e) if e.deadline <= now => {
                // Report the innermost bound of the same test: the wait it is stuck in.
                let inner = t.entries.iter().filter(|i| i.test == e.test).max_by_key(|i| i.id);
                expire(inner.unwrap_or(e), None)
            }
            Some(e) => {
                let mut left = e.deadline - now;
                if poll_memory {
                    left = left.min(MEMORY_POLL);
                }
                t = w.changed.wait_timeout(t, left).unwrap_or_else(|p| p.into_inner()).0;
            }
            None => t = w.changed.wait(t).unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// A liveness bound held by a test while it may wait on another thread; see the [crate docs].
/// Dropping it (the test finished, or panicked) disarms it.
///
/// [crate docs]: crate
#[must_use = "a bound is disarmed when dropped; hold it for the whole wait"]
pub struct Bound {
    id: u64,
}

/// Arms a liveness bound of [`configured_bound`] for the current test, which is about to wait
/// for `what` (a phrase: "the drain to collect lane 3").
pub fn bound(what: impl Into<String>) -> Bound {
    bound_for(what, configured_bound())
}

/// [`bound`] with an explicit deadline `after` from now (tests of this crate use short ones).
pub fn bound_for(what: impl Into<String>, after: Duration) -> Bound {
    arm(what.into(), after, None)
}

/// [`bound`] that also fails the wait when the process's resident size passes `max_resident`
/// bytes (read every 200 ms): for a model checker, whose state grows with every step of an
/// execution that never ends, long before a time bound would fire. Linux only (elsewhere just
/// the time bound).
pub fn bound_with_memory(what: impl Into<String>, max_resident: u64) -> Bound {
    arm(what.into(), configured_bound(), Some(max_resident))
}

/// [`bound_with_memory`] with an explicit deadline `after` from now (a model checker that
/// legitimately runs for many minutes).
pub fn bound_with_memory_for(what: impl Into<String>, after: Duration, max_resident: u64) -> Bound {
    arm(what.into(), after, Some(max_resident))
}

fn arm(what: String, after: Duration, max_resident: Option<u64>) -> Bound {
    let w = watchdog();
    let test = std::thread::current().name().unwrap_or("<unnamed thread>").to_owned();
    let mut t = w.table.lock().unwrap_or_else(|p| p.into_inner());
    if !t.monitor_started {
        std::thread::Builder::new()
            .name("ferry-watchdog".into())
            .spawn(move || monitor(w))
            .expect("spawn the test watchdog thread");
        t.monitor_started = true;
    }
    t.next_id += 1;
    let id = t.next_id;
    let deadline = Instant::now() + after;
    t.entries.push(Entry { id, test, what, deadline, after, max_resident });
    drop(t);
    w.changed.notify_all();
    Bound { id }
}

impl Bound {
    /// Says what the test waits for from now on (the deadline stays: one bound per test).
    pub fn waiting_for(&self, what: impl Into<String>) {
        let w = watchdog();
        let mut t = w.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = t.entries.iter_mut().find(|e| e.id == self.id) {
            e.what = what.into();
        }
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        let w = watchdog();
        let mut t = w.table.lock().unwrap_or_else(|p| p.into_inner());
        t.entries.retain(|e| e.id != self.id);
        drop(t);
        w.changed.notify_all();
    }
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = watchdog();
        let t = w.table.lock().unwrap_or_else(|p| p.into_inner());
        match t.entries.iter().find(|e| e.id == self.id) {
            Some(e) => write!(f, "Bound {{ test: {:?}, what: {:?} }}", e.test, e.what),
            None => write!(f, "Bound {{ id: {} }}", self.id),
        }
    }
}
