//! The progress line of an analysis command on a big profile (`ferry report`, `view`, `deps`,
//! …): nothing for the first second (most commands are done by then), then one line on stderr
//! naming the step the command is in and how long it has run, one more for each later step,
//! and the total at the end.
//!
//! What is printed when is [`Ticker`]'s: fed the time since the command started and its step,
//! so its rule is tested with chosen times. [`start`] runs it on a thread that parks until the
//! first second is up, then until the step changes; [`step`] names the step (the readers of
//! this crate name theirs: reading a directory, rebuilding a model from a native profile).
//!
//! ```
//! let text = ferry_profile::progress::run("report", || {
//!     ferry_profile::progress::step("computing the report");
//!     String::from("the report")
//! });
//! assert_eq!(text, "the report");
//! ```
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a command runs before its progress shows.
pub const QUIET_FOR: Duration = Duration::from_secs(1);

/// When a progress line is due, and what it says.
#[derive(Debug)]
pub struct Ticker {
    command: &'static str,
    /// The step last printed.
    shown: Option<String>,
}

impl Ticker {
    /// A ticker for `command` (`report`, `view`, …), nothing printed yet.
    pub fn new(command: &'static str) -> Ticker {
        Ticker { command, shown: None }
    }

    /// The line due `elapsed` after the command started, in `step`: none within [`QUIET_FOR`],
    /// then one for the step running at that time and one for each later step (a step printed
    /// once is not printed again).
    pub fn tick(&mut self, elapsed: Duration, step: &str) -> Option<String> {
        if elapsed < QUIET_FOR || step.is_empty() || self.shown.as_deref() == Some(step) {
            return None;
        }
        self.shown = Some(step.to_string());
        Some(format!("ferry {}: {step} ({:.1} s)", self.command, elapsed.as_secs_f64()))
    }

    /// The closing line when the command ends `elapsed` after it started: only after a
    /// progress line.
    pub fn done(&mut self, elapsed: Duration) -> Option<String> {
        self.shown
            .take()
            .map(|_| format!("ferry {}: done in {:.1} s", self.command, elapsed.as_secs_f64()))
    }
}

/// The step the command is in, shared with the progress thread.
#[derive(Debug, Default)]
struct Shared {
    step: String,
    finished: bool,
}

type Cell = Arc<(Mutex<Shared>, Condvar)>;

/// The running command's progress (one per process).
static CURRENT: Mutex<Option<Cell>> = Mutex::new(None);

/// A command's progress: the line's thread, ended (and the closing line printed) on drop.
pub struct Progress {
    cell: Cell,
    thread: Option<JoinHandle<Ticker>>,
    started: Instant,
}

/// Starts the progress of `command`, in `first` step.
pub fn start(command: &'static str, first: &str) -> Progress {
    let cell: Cell = Arc::new((Mutex::new(Shared::default()), Condvar::new()));
    cell.0.lock().unwrap_or_else(|p| p.into_inner()).step = first.to_string();
    *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = Some(cell.clone());
    let started = Instant::now();
    let c = cell.clone();
    let thread = std::thread::Builder::new()
        .name("ferry-progress".into())
        .spawn(move || {
            let mut ticker = Ticker::new(command);
            let (lock, cv) = &*c;
            let mut g = lock.lock().unwrap_or_else(|p| p.into_inner());
            while !g.finished {
                let elapsed = started.elapsed();
                if let Some(line) = ticker.tick(elapsed, &g.step) {
                    eprintln!("{line}");
                }
                // Parked until the first second is up, then until the step changes or the
                // command ends.
                g = match QUIET_FOR.checked_sub(elapsed) {
                    Some(left) if !left.is_zero() => {
                        cv.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()).0
                    }
                    _ => cv.wait(g).unwrap_or_else(|p| p.into_inner()),
                };
            }
            ticker
        })
        .ok();
    Progress { cell, thread, started }
}

/// Runs `f` as `command` with its progress line ([`start`]), ended when `f` returns.
pub fn run<T>(command: &'static str, f: impl FnOnce() -> T) -> T {
    let _progress = start(command, "");
    f()
}

/// Names the step the running command is in (nothing without a running command).
pub fn step(s: impl Into<String>) {
    let Some(cell) = CURRENT.lock().unwrap_or_else(|p| p.into_inner()).clone() else { return };
    let (lock, cv) = &*cell;
    lock.lock().unwrap_or_else(|p| p.into_inner()).step = s.into();
    cv.notify_all();
}

impl Drop for Progress {
    fn drop(&mut self) {
        CURRENT.lock().unwrap_or_else(|p| p.into_inner()).take();
        let (lock, cv) = &*self.cell;
        lock.lock().unwrap_or_else(|p| p.into_inner()).finished = true;
        cv.notify_all();
        if let Some(mut ticker) = self.thread.take().and_then(|t| t.join().ok()) {
            if let Some(line) = ticker.done(self.started.elapsed()) {
                eprintln!("{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn nothing_shows_in_the_first_second() {
        let mut t = Ticker::new("view");
        for ms in [0, 10, 500, 999] {
            assert_eq!(t.tick(s(ms), "reading D"), None, "{ms} ms");
        }
        assert_eq!(t.tick(s(999), "drawing the page"), None);
        assert_eq!(t.done(s(999)), None, "a quick command ends silent");
    }

    #[test]
    fn after_a_second_each_step_shows_once_then_the_total() {
        let mut t = Ticker::new("report");
        assert_eq!(t.tick(s(300), "reading D"), None);
        assert_eq!(
            t.tick(s(1000), "reading D").as_deref(),
            Some("ferry report: reading D (1.0 s)")
        );
        assert_eq!(t.tick(s(1500), "reading D"), None, "a step is printed once");
        let l = t.tick(s(1700), "computing the report");
        assert_eq!(l.as_deref(), Some("ferry report: computing the report (1.7 s)"));
        assert_eq!(t.tick(s(1800), ""), None, "no step, no line");
        assert_eq!(t.done(s(2345)).as_deref(), Some("ferry report: done in 2.3 s"));
        assert_eq!(t.done(s(2400)), None, "the total once");
    }

    /// The thread's side: a step named before the first second is the one shown once it is up,
    /// and a command that ends within it prints nothing (the thread's lines are its ticker's,
    /// checked above; here only that it ends when the command does).
    #[test]
    fn the_progress_thread_ends_with_its_command() {
        let _bound = ferry_watchdog::bound("the progress thread joined when its command ends");
        let p = start("deps", "reading D");
        step("listing the graph");
        assert_eq!(
            CURRENT.lock().unwrap().as_ref().unwrap().0.lock().unwrap().step,
            "listing the graph"
        );
        drop(p);
        assert!(CURRENT.lock().unwrap().is_none());
        step("after the end: ignored");
    }
}
