//! [`JobError`]: why a job did not complete, with every source kept typed.
use std::fmt;
use std::path::PathBuf;

use ferry_profile::RunDirError;
use ferry_runtime::host::crash::CrashGuardError;
use ferry_runtime::host::profile::ProfileError;
use ferry_runtime::host::KernelLoadError;
use ferry_runtime::RunnerError;
use ferry_runtime::{DeviceFault, KernelFault, RunError};

/// What kind of graph a case is (the word in front of its name in messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaseKind {
    /// A built-in example.
    Example,
    /// A workload file.
    Workload,
    /// An in-memory graph.
    Graph,
}

impl fmt::Display for CaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CaseKind::Example => "example",
            CaseKind::Workload => "workload",
            CaseKind::Graph => "graph",
        })
    }
}

/// A kernel that failed on its core, named: what the device's numbers (`task 3, kernel 256`)
/// mean in the user's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedKernel {
    /// The task's id (its sequence number in the run; the `task_id` of its profile).
    pub task: u64,
    /// `file:line:col` of the task's graph entry, when the graph came from a workload file.
    pub at: Option<String>,
    /// Kernel name (`id N` when the registry does not know it).
    pub name: String,
    /// The loaded library that defines it (`None` for a built-in).
    pub library: Option<String>,
    /// Kernel id.
    pub id: u32,
    /// What the device reported.
    pub fault: KernelFault,
}

impl fmt::Display for FailedKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(at) = &self.at {
            write!(f, "{at}: ")?;
        }
        // The task's id as every ferry command prints and reads it.
        write!(f, "task {:#x}: kernel `{}`", self.task, self.name)?;
        if let Some(l) = &self.library {
            write!(f, " (library `{l}`, id {})", self.id)?;
        }
        write!(f, " failed on its core: {}", self.fault.detail())?;
        if matches!(self.fault, KernelFault::Panicked { .. }) && self.library.is_some() {
            write!(f, " (FERRY_LOG=info prints its panic message from the device log)")?;
        }
        Ok(())
    }
}

/// A run that failed on the chip: the runtime's error, with the failing kernel named when a
/// kernel failed, and the run's index in a repetition.
#[derive(Debug)]
pub struct RunFailure {
    /// The runtime's error.
    pub error: RunError,
    /// The kernel, when a kernel failed on its core (`error` is then a
    /// [`DeviceFault::Kernel`]).
    pub kernel: Option<FailedKernel>,
    /// `(run, runs)` in a repetition (`--repeat`).
    pub repeat: Option<(u32, u32)>,
}

impl RunFailure {
    /// The device fault, when the run failed on the device.
    pub fn fault(&self) -> Option<&DeviceFault> {
        match &self.error {
            RunError::Fault(f) => Some(f),
            _ => None,
        }
    }
}

impl fmt::Display for RunFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The kernel's failure says more than a repeat's `run N of runs 0..M`.
        if let Some(k) = &self.kernel {
            return write!(f, "{k}");
        }
        if let Some((run, runs)) = self.repeat {
            write!(f, "run {run} of runs 0..{runs}: ")?;
        }
        write!(f, "{}", self.error)
    }
}

impl std::error::Error for RunFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The message already holds the error's own text: the chain goes on with its cause
        // (a launch failure's step, the driver's error), typed.
        self.error.source()
    }
}

/// Why a job did not complete. A run that failed after its profile was collected left that
/// profile complete and marked failed (`profile`).
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// DFX collection needs an output directory.
    #[error("DFX collection needs an output directory (--out DIR)")]
    DfxNeedsOut,
    /// The Chrome JSON trace is a trace of the swimlane.
    #[error("the Chrome JSON trace is a trace of the swimlane: it needs the swimlane on")]
    ChromeNeedsSwimlane,
    /// More runs with DFX than one session tells apart.
    #[error("{repeat} runs with DFX: one session tells at most {max} runs apart")]
    TooManyRuns {
        /// Runs asked for.
        repeat: u32,
        /// Runs one session tells apart.
        max: usize,
    },
    /// More warm-up runs than leave a run of the steady state.
    #[error(
        "{warmup} warm-up runs of {repeat}: the warm-up runs must leave at least one run \
         (--warmup below --repeat)"
    )]
    WarmupNotBelowRepeat {
        /// Warm-up runs asked for.
        warmup: u32,
        /// Runs.
        repeat: u32,
    },
    /// A repeat count of zero.
    #[error("a job runs its graph at least once (repeat 0)")]
    NoRuns,
    /// The output directory could not be claimed (refused before the chip starts).
    #[error("{}", dir.display())]
    OutDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: RunDirError,
    },
    /// The simulated chip did not start.
    #[error("starting the simulated chip")]
    Start(#[source] RunnerError),
    /// Method 1's out-of-band install failed.
    #[error("installing {program} for method 1")]
    Preinstall {
        /// The program.
        program: &'static str,
        /// Why.
        #[source]
        source: ferry_sim::aicpu_os::OsError,
    },
    /// A kernel library did not load; nothing of it was added.
    #[error("loading kernel library {}", path.display())]
    Kernels {
        /// The library.
        path: PathBuf,
        /// Why.
        #[source]
        source: KernelLoadError,
    },
    /// An orchestration library did not load, or has no function the workload names.
    #[error("orchestration library {}", path.display())]
    Orchestration {
        /// The library.
        path: PathBuf,
        /// Why.
        #[source]
        source: ferry_runtime::host::OrchLoadError,
    },
    /// The workload's graph is an orchestration function and no library was given.
    #[error("the workload's graph is orchestration function `{function}`: pass its library with --orchestration LIB.so")]
    NoOrchestration {
        /// The function the workload names.
        function: String,
    },
    /// The workload file is refused.
    #[error(transparent)]
    Workload(#[from] ferry_workload::WorkloadError),
    /// The graph could not be registered with the runner.
    #[error("{kind} `{case}`")]
    Register {
        /// The case's kind.
        kind: CaseKind,
        /// The case.
        case: String,
        /// Why.
        #[source]
        source: RunnerError,
    },
    /// The DFX session did not start; nothing ran.
    #[error("starting DFX collection")]
    DfxStart(#[source] Box<ProfileError>),
    /// A run failed on the chip.
    #[error("{kind} `{case}`: {failure}")]
    Run {
        /// The case's kind.
        kind: CaseKind,
        /// The case.
        case: String,
        /// The failure.
        #[source]
        failure: Box<RunFailure>,
        /// Its profile, written complete and marked failed (DFX on, with an output directory).
        profile: Option<PathBuf>,
    },
    /// A run finished but its output is not what the graph expects.
    #[error("{kind} `{case}` produced a wrong result: {what}")]
    WrongResult {
        /// The case's kind.
        kind: CaseKind,
        /// The case.
        case: String,
        /// What the check found.
        what: String,
        /// Its profile, written complete and marked failed.
        profile: Option<PathBuf>,
    },
    /// The profile could not be collected or written.
    #[error("DFX of `{case}`")]
    Profile {
        /// The case.
        case: String,
        /// Why.
        #[source]
        source: Box<ProfileError>,
    },
    /// The run's directory could not be written or committed.
    #[error("writing the run's directory")]
    RunDir(#[source] RunDirError),
    /// The runner could not be torn down.
    #[error("finishing the runner")]
    Finalize(#[source] RunnerError),
    /// The crash guard could not be armed (another is armed in this process, or its handlers
    /// could not be installed).
    #[error("preparing for a kernel that ends the process")]
    CrashGuard(#[source] CrashGuardError),
    /// The run's end record could not be created or removed.
    #[error("the run's end record")]
    EndRecord(#[source] ferry_fs::FsError),
}

impl JobError {
    /// The failed run's profile, when one was written (complete, marked failed).
    pub fn profile(&self) -> Option<&std::path::Path> {
        match self {
            JobError::Run { profile, .. } | JobError::WrongResult { profile, .. } => {
                profile.as_deref()
            }
            _ => None,
        }
    }

    /// The run's failure on the chip, when the job failed there.
    pub fn run_failure(&self) -> Option<&RunFailure> {
        match self {
            JobError::Run { failure, .. } => Some(&**failure),
            _ => None,
        }
    }
}

/// `e` and its sources, `: `-joined, each cause once (what a failed run's manifest records).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !m.is_empty() && !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}
