//! The sweep's machinery: one run in stages with the fault counts at each stage's end, what a
//! run must leave behind (device memory, pinned memory, threads, files), a watchdog that turns
//! a hang into a failure, and the classifier of each injected run's outcome.
use ferry_runtime::examples::ExampleRun;
use ferry_runtime::host::dfx::{DfxChip, DfxError, DfxOptions, DfxSession};
use ferry_runtime::host::{DeviceRunner, RunOutput, Variant};
use ferry_runtime::RunError;
use ferry_sim::fault::{FaultPoint, InjectedFault};
use ferry_sim::{Arch, Device, DeviceError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One configuration of the swept run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Case {
    pub arch: Arch,
    pub variant: Variant,
    /// The full path (loaded AICPU program, launch transaction); else in process.
    pub full: bool,
    /// A DFX session (every subsystem) around the run.
    pub dfx: bool,
}

/// The stages of one run, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stage {
    /// `DfxSession::start_on` / `start` and attaching it.
    DfxStart,
    /// `DeviceRunner::prepare`.
    Prepare,
    /// `DeviceRunner::launch` (AICore and AICPU entries, the launch transaction's publication).
    Launch,
    /// `DeviceRunner::finalize_run` (wait, the slot's retirement, result and output copies).
    Finalize,
    /// Detaching and `DfxSession::finish`.
    DfxFinish,
}

pub(crate) const STAGES: [Stage; 5] =
    [Stage::DfxStart, Stage::Prepare, Stage::Launch, Stage::Finalize, Stage::DfxFinish];

/// Per point, how many of its operations a run has done by the end of each stage.
pub(crate) type Marks = [[u64; STAGES.len()]; FaultPoint::ALL.len()];

/// A failed step of a run.
#[derive(Debug)]
pub(crate) enum Failure {
    Run(RunError),
    Dfx(DfxError),
}

pub(crate) fn seen(dev: &Device) -> [u64; FaultPoint::ALL.len()] {
    FaultPoint::ALL.map(|p| dev.faults().seen(p))
}

fn dfx_chip(r: &DeviceRunner, ex: &ExampleRun) -> DfxChip {
    let c = r.config();
    DfxChip {
        arch: c.arch,
        threads: c.aicpu_threads,
        aic: c.aic,
        aiv: c.aiv,
        task_window: c.task_window,
        scratch_bytes: ex.args.scratch_bytes,
    }
}

/// One run of `ex` as callable 0, in stages. `marks` gets each point's count (relative to the
/// start) at the end of every stage reached. The first failure is returned; the DFX session is
/// finished whatever the run did (its own result then only has to come back, not succeed).
pub(crate) fn staged_run(
    r: &mut DeviceRunner,
    ex: &ExampleRun,
    case: Case,
    marks: &mut Marks,
) -> Result<RunOutput, (Stage, Failure)> {
    let dev = r.device().clone();
    let start = seen(&dev);
    let mut mark = |s: Stage| {
        let now = seen(&dev);
        for (i, m) in marks.iter_mut().enumerate() {
            m[s as usize] = now[i] - start[i];
        }
    };
    let session = if case.dfx {
        let opts = DfxOptions::all();
        let chip = dfx_chip(r, ex);
        let s = if case.full {
            DfxSession::start_on(&opts, chip, r.device())
        } else {
            DfxSession::start(&opts, chip, r.device().clock())
        };
        match s {
            Ok(s) => {
                r.attach_dfx_session(Some(&s)).expect("an idle runner takes a session");
                Some(s)
            }
            Err(e) => {
                mark(Stage::DfxStart);
                return Err((Stage::DfxStart, Failure::Dfx(e)));
            }
        }
    } else {
        None
    };
    mark(Stage::DfxStart);
    let run = (|| {
        let p = r.prepare(0, ex.args.clone()).map_err(|e| (Stage::Prepare, Failure::Run(e)))?;
        mark(Stage::Prepare);
        let l = r.launch(p).map_err(|e| (Stage::Launch, Failure::Run(e)))?;
        mark(Stage::Launch);
        let out = r.finalize_run(l).map_err(|e| (Stage::Finalize, Failure::Run(e)))?;
        mark(Stage::Finalize);
        Ok(out)
    })();
    let finished = session.map(|s| {
        r.attach_dfx_session(None).expect("the run released the runner");
        s.finish()
    });
    mark(Stage::DfxFinish);
    let out = run?;
    match finished {
        Some(Err(e)) => Err((Stage::DfxFinish, Failure::Dfx(e))),
        _ => Ok(out),
    }
}

/// Whether `e` reports exactly the injected fault `f`, through its typed path: a
/// [`DeviceError::Injected`] holding `f` somewhere in its chain of typed sources (a host call
/// of the runner, a step of the launch transaction, the loaded program, the DFX session's
/// transports or memory), or — for a fault hit by the run's work on its streams, which carry a
/// failed body's message as a driver's stream error does — a stream error naming it.
pub(crate) fn carries(e: &Failure, f: InjectedFault) -> bool {
    let top: &(dyn std::error::Error + 'static) = match e {
        // Transparent: the driver's error is the run's, with no layer of its own.
        Failure::Run(RunError::Device(d)) => d,
        Failure::Run(e) => e,
        Failure::Dfx(e) => e,
    };
    let mut cause = Some(top);
    while let Some(c) = cause {
        match c.downcast_ref::<DeviceError>() {
            Some(DeviceError::Injected(g)) => return *g == f,
            Some(DeviceError::Kernel { message, .. }) => return message.contains(&f.to_string()),
            _ => {}
        }
        cause = c.source();
    }
    false
}

/// What a run holds on the host and the device while nothing runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Holdings {
    pub hbm_used: u64,
    pub pinned_live: u64,
    pub threads: usize,
    pub files: Vec<PathBuf>,
}

/// Live threads of this process.
pub(crate) fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

fn files_under(root: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(root) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        }
        out.push(p);
    }
}

pub(crate) fn holdings(dev: &Device, root: &Path) -> Holdings {
    let mut files = Vec::new();
    files_under(root, &mut files);
    files.sort();
    Holdings {
        hbm_used: dev.memory().used(),
        pinned_live: dev.pinned_stats().live_bytes,
        threads: threads(),
        files,
    }
}

/// The holdings once they have settled: two readings 20 ms apart agree (bounded by 30 s). A
/// baseline taken right after a run may otherwise count one of its threads that was joined but
/// is still listed while it exits (the DFX finish's scoped threads), which later readings, taken
/// after the settling wait below, no longer see.
pub(crate) fn settled_holdings(dev: &Device, root: &Path) -> Holdings {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = holdings(dev, root);
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = holdings(dev, root);
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// Waits (bounded) for the holdings to come back to `base`; the difference if they do not.
/// Threads are joined when their owners drop, but the kernel may list an exiting thread a
/// moment longer.
pub(crate) fn settles_to(dev: &Device, root: &Path, base: &Holdings) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = holdings(dev, root);
        if now == *base {
            return Ok(());
        }
        if Instant::now() > deadline {
            let mut d = Vec::new();
            if now.hbm_used != base.hbm_used {
                d.push(format!("device memory {} -> {} bytes", base.hbm_used, now.hbm_used));
            }
            if now.pinned_live != base.pinned_live {
                d.push(format!("pinned memory {} -> {} bytes", base.pinned_live, now.pinned_live));
            }
            if now.threads != base.threads {
                d.push(format!("threads {} -> {}", base.threads, now.threads));
            }
            if now.files != base.files {
                let new: Vec<_> = now.files.iter().filter(|f| !base.files.contains(f)).collect();
                let gone: Vec<_> = base.files.iter().filter(|f| !now.files.contains(f)).collect();
                d.push(format!("files: new {new:?}, gone {gone:?}"));
            }
            return Err(d.join("; "));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Aborts the process (with the label of what it was doing) when one step takes longer than
/// its bound: a hang becomes a failure with a name instead of a stuck CI job.
pub(crate) struct Watchdog {
    state: Arc<Mutex<(String, Instant)>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    pub(crate) fn start() -> Watchdog {
        let state = Arc::new(Mutex::new((String::from("setup"), Instant::now() + HANG)));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            // Relaxed: a stop flag; the join in `drop` orders the rest.
            while !sp.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                let g = st.lock().unwrap_or_else(|p| p.into_inner());
                if Instant::now() > g.1 {
                    eprintln!("fault sweep: hung in `{}` for over {HANG:?}", g.0);
                    std::process::abort();
                }
            }
        });
        Watchdog { state, stop, thread: Some(thread) }
    }

    /// Names the next step and restarts the bound.
    pub(crate) fn step(&self, label: String) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = (label, Instant::now() + HANG);
    }
}

/// The bound on one step (an injected run, its checks and the run after it); the runner's own
/// timeout is well inside it.
pub(crate) const HANG: Duration = Duration::from_secs(90);

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Relaxed: see `start`.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
