//! The host half's errors: a run's ([`RunError`]), its launch's ([`LaunchFailure`]), the
//! runner's ([`RunnerError`]) and its configuration's ([`ConfigError`]).
//!
//! Each keeps its cause as a typed [`source`](std::error::Error::source), and none repeats its
//! source in its own message: print the chain (`anyhow`'s `{:#}`, or walk `source()`) to see
//! the whole cause.
use std::sync::Arc;

use ferry_abi::arch::Arch;
use ferry_backend::BackendError;
use ferry_launch::loader::LoadError;
use ferry_launch::transaction::{
    DescriptorError, DiagnosticsError, FinishError, LaunchError, PrepareError, PublishError,
    StageError, TeardownError,
};
use ferry_sim::DeviceError;

use super::{DeviceFault, SubmitError};
use crate::device::program::RegisterError;

/// Errors of a run on the host `DeviceRunner`.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The run failed on the device (or while the host built its graph).
    #[error(transparent)]
    Fault(#[from] DeviceFault),
    /// A user orchestration library's function failed (its own failure, a panic, or a call
    /// ferry refused): the source names the task.
    #[error("orchestration function `{function}` (library `{library}`) failed")]
    Orchestration {
        /// The library's name.
        library: String,
        /// The function.
        function: String,
        /// What happened, with the task.
        #[source]
        fault: DeviceFault,
    },
    /// The host-built graph has a dependency cycle through these tasks.
    #[error("workload has a dependency cycle through tasks {tasks:?}")]
    Cycle {
        /// Tasks on or behind the cycle (never ready).
        tasks: Vec<u64>,
    },
    /// No callable is registered under this id.
    #[error("callable {id} is not registered")]
    NotRegistered {
        /// Callable id.
        id: u32,
    },
    /// Another run is prepared or in flight on this runner.
    #[error("another run is in flight on this runner")]
    Busy,
    /// A device tensor of the run's arguments is not whole aligned `f32`s.
    #[error("tensor {tensor}: device range {addr:#x}+{bytes} is not whole aligned f32")]
    MisalignedTensor {
        /// The tensor's index in the run's arguments.
        tensor: usize,
        /// Its device address.
        addr: u64,
        /// Its length in bytes.
        bytes: u64,
    },
    /// [`DeviceRunner::launch_after`](crate::DeviceRunner::launch_after) on the in-process
    /// path, whose launch cannot wait on a stream event.
    #[error("a caller dependency needs the device-program launch path (stream-ordered)")]
    DependencyNeedsStreams,
    /// The simulated driver failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A device operation of another backend than the simulated chip failed (allocating or
    /// uploading a run's memory through the backend seam).
    #[error("a device operation failed")]
    Backend(#[source] BackendError),
    /// Reading the run back from device memory failed: its result, its progress, its startup
    /// handshake, its kernel counts or its output tensors (a copy through the backend seam;
    /// the backend's error is the source).
    #[error("reading the run back from the device")]
    Readback(#[source] BackendError),
    /// A core of this runner is hung (a kernel of an earlier run never returned within its
    /// budget): the runner cannot launch again. Drop it and make a new one.
    #[error(
        "a core of this runner is hung since an earlier run ({0}): it cannot launch again; \
         make a new runner"
    )]
    Hung(DeviceFault),
    /// The run did not finish within the runner's timeout; the cores were reaped.
    #[error("run did not finish within {ms} ms")]
    Timeout {
        /// The timeout.
        ms: u64,
    },
    /// The launch failed: a step of the launch transaction (prepare, publish, launch, retire),
    /// the loaded AICPU program, or the run's work on its streams. The source says which.
    #[error("launch failed")]
    Launch(#[from] LaunchFailure),
    /// A run queued ahead of this one on the runner's streams failed, and its failure was on
    /// the streams when this run's work ran: this run's results are not trusted. The source is
    /// that failure (when the streams kept it); the failing run reports its own error.
    #[error("a run queued ahead of this one failed")]
    AfterFailedRun(#[source] Option<BackendError>),
    /// The run's scheduler diagnostics cannot be exported: its publication did not succeed, so
    /// the resident scheduler state is not its own.
    #[error("scheduler diagnostics")]
    SchedulerDiagnostics(#[from] DiagnosticsError),
    /// The run's startup handshake timed out (on a real device: the stream timeout, CANN
    /// 507018). `stale` lists the cores whose report device memory holds but the AICPU never
    /// saw (read back with the readback that diagnoses the Path B hang, docs/design/launch.md):
    /// a stale cache line on an AICPU cluster outside AICore's snoop domain. Empty when no core
    /// reported at all.
    #[error("run timed out after {waited_ms} ms in the startup handshake{}", stale_summary(stale))]
    HandshakeTimeout {
        /// How long the schedulers waited (device time).
        waited_ms: u32,
        /// The cores whose handshake is stale, in order.
        stale: Vec<crate::host::CoreHandshake>,
    },
    /// The device returned a result the host cannot decode.
    #[error("device result is unreadable (status {status}, code {code:#x})")]
    BadResult {
        /// Status word.
        status: u32,
        /// Error code word.
        code: u32,
    },
}

fn stale_summary(stale: &[crate::host::CoreHandshake]) -> String {
    let Some(first) = stale.first() else {
        return ": no core's report reached device memory".into();
    };
    format!(
        ": stale handshake on {} core(s) — core {}'s aicore_done is {} in device memory but the \
         AICPU still sees {} (a stale cache line: the AICPU cluster is outside AICore's snoop \
         domain: the path b hang; use path a, or a device with fix a + split handshake lines, \
         b or c)",
        stale.len(),
        first.core,
        first.memory_done,
        first.aicpu_saw
    )
}

impl From<SubmitError> for RunError {
    fn from(e: SubmitError) -> RunError {
        RunError::Fault(DeviceFault::Submit(e))
    }
}

/// Why a run's launch failed, with the typed error of the step that failed.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchFailure {
    /// Staging the run's launch metadata failed.
    #[error("staging the launch metadata")]
    Stage(#[source] StageError),
    /// The launch descriptor is malformed.
    #[error("building the launch descriptor")]
    Descriptor(#[source] DescriptorError),
    /// Preparing the run's runtime arguments (staging memory, the per-run suffix) failed.
    #[error("preparing the launch")]
    Prepare(#[source] PrepareError),
    /// Publishing the run onto its streams failed.
    #[error("publishing the launch")]
    Publish(#[source] PublishError),
    /// Submitting the run's entries failed.
    #[error("submitting the launch")]
    Submit(#[source] LaunchError),
    /// Retiring a run from its launch slot failed.
    #[error("retiring the run from its launch slot")]
    Finish(#[source] FinishError),
    /// Tearing a launch slot down failed.
    #[error("tearing a launch slot down")]
    Teardown(#[source] TeardownError),
    /// The AICPU program could not be loaded, or its entry refused the run (an ABI mismatch is
    /// [`LoadError::AbiMismatch`]).
    #[error("the AICPU program")]
    Program(#[source] Arc<LoadError>),
    /// The AICore entry could not start the cores (the backend's
    /// [`AicoreLauncher`](ferry_backend::AicoreLauncher) refused the launch).
    #[error("the AICore entry could not start the cores")]
    CoresNotStarted(#[source] BackendError),
    /// The run's work on its streams failed.
    #[error("the run's streams")]
    Stream(#[source] BackendError),
    /// The launch transaction held no runtime arguments after a successful prepare (a broken
    /// invariant of the transaction).
    #[error("the launch transaction gave no runtime arguments after prepare")]
    NoPayload,
}

impl LaunchFailure {
    /// The loader's error, when the AICPU program failed.
    pub fn program(&self) -> Option<&LoadError> {
        match self {
            LaunchFailure::Program(e) => Some(e),
            _ => None,
        }
    }
}

macro_rules! launch_from {
    ($($variant:ident($t:ty)),* $(,)?) => {$(
        impl From<$t> for LaunchFailure {
            fn from(e: $t) -> LaunchFailure {
                LaunchFailure::$variant(e)
            }
        }
        impl From<$t> for RunError {
            fn from(e: $t) -> RunError {
                RunError::Launch(LaunchFailure::$variant(e))
            }
        }
    )*};
}

launch_from!(
    Stage(StageError),
    Descriptor(DescriptorError),
    Prepare(PrepareError),
    Publish(PublishError),
    Submit(LaunchError),
    Finish(FinishError),
    Teardown(TeardownError),
);

impl From<LoadError> for LaunchFailure {
    fn from(e: LoadError) -> LaunchFailure {
        LaunchFailure::Program(Arc::new(e))
    }
}

impl From<LoadError> for RunError {
    fn from(e: LoadError) -> RunError {
        RunError::Launch(e.into())
    }
}

/// A [`RunnerConfig`](crate::RunnerConfig) the runner cannot use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The AICPU thread count is outside what a run on the arch takes.
    #[error(
        "{threads} AICPU threads: a run on {} takes 2..={max} (one orchestrator and at least \
         one scheduler, on the chip's {max} AICPU threads)",
        arch.name()
    )]
    AicpuThreads {
        /// The configured count.
        threads: u32,
        /// The arch.
        arch: Arch,
        /// The arch's AICPU threads.
        max: u32,
    },
    /// A task window of 0.
    #[error("task window of 0")]
    ZeroTaskWindow,
    /// The launch-slot count is outside `1..=max`.
    #[error("{slots} launch slots: a runner takes 1..={max}")]
    LaunchSlots {
        /// The configured count.
        slots: u32,
        /// The most a runner takes.
        max: u32,
    },
    /// The device is of another arch than the configured one.
    #[error("the device is {} but the runner is configured for {}", device.name(), configured.name())]
    ArchMismatch {
        /// The device's arch.
        device: Arch,
        /// The configured arch.
        configured: Arch,
    },
    /// The user's device root cannot be made private to them.
    #[error("device root {path}: {reason}")]
    DeviceRoot {
        /// The root.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The AICPU OS's services table is of another ABI version.
    #[error("the AICPU OS's services table has another ABI version")]
    ServicesAbi,
    /// The in-process path was asked of a device that runs the full path only.
    #[error("the device has no in-process path: it runs the AICPU program it loads")]
    NoInProcessPath,
}

/// Errors of `DeviceRunner` init, configuration, callable registration and teardown.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// The configuration is unusable.
    #[error("invalid runner configuration")]
    Config(#[from] ConfigError),
    /// The callable id is outside the ABI's range or already taken.
    #[error("callable id {id} is invalid or already registered")]
    CallableId {
        /// Callable id.
        id: u32,
    },
    /// No callable is registered under this id.
    #[error("callable {id} is not registered")]
    NotRegistered {
        /// Callable id.
        id: u32,
    },
    /// A device-orchestrated callable without an orchestration object on the device-program
    /// path (the AICPU program cannot call a host function).
    #[error(
        "device-orchestrated callable `{callable}` has no orchestration object (the AICPU \
         program cannot call a host function; use the host-built-graph variant or the \
         in-process path)"
    )]
    NoOrchestrationObject {
        /// The callable's name.
        callable: String,
    },
    /// The callable's name does not fit the register-callable ABI's name field.
    #[error("the callable's name")]
    CallableName(#[source] ferry_abi::launch::EncodeError),
    /// The in-process device program refused the callable's registration.
    #[error("registering the callable with the device program")]
    Register(#[from] RegisterError),
    /// A run is in flight; registration changes must wait for it.
    #[error("a run is in flight on this runner")]
    Busy,
    /// Loading the AICPU program or running its init / register-callable entry failed.
    #[error("device program")]
    Program(#[source] Arc<LoadError>),
    /// A DFX session in host memory was attached to a runner on the device-program path: the
    /// loaded AICPU program cannot reach host memory.
    #[error(
        "a DFX session in host memory cannot reach a loaded AICPU program; start it with \
         DfxSession::start_on(runner.device())"
    )]
    DfxNotOnDevice,
    /// Retiring the launch slots at teardown failed.
    #[error("retiring the launch slots")]
    Retire(#[source] LaunchFailure),
    /// The simulated driver failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A device operation through the backend seam failed (creating the runner's streams).
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl RunError {
    /// A device operation's failure through the backend seam: the simulated driver's own error
    /// where it is one ([`RunError::Device`], as the runner reports it on the simulated chip),
    /// [`RunError::Backend`] otherwise.
    pub(crate) fn from_backend(e: BackendError) -> RunError {
        match e.source_as::<DeviceError>() {
            Some(d) => RunError::Device(d.clone()),
            None => RunError::Backend(e),
        }
    }
}

impl RunnerError {
    /// A device operation's failure through the backend seam: the simulated driver's own error
    /// where it is one ([`RunnerError::Device`]), [`RunnerError::Backend`] otherwise.
    pub(crate) fn from_backend(e: BackendError) -> RunnerError {
        match e.source_as::<DeviceError>() {
            Some(d) => RunnerError::Device(d.clone()),
            None => RunnerError::Backend(e),
        }
    }
}

impl From<LoadError> for RunnerError {
    fn from(e: LoadError) -> RunnerError {
        RunnerError::Program(Arc::new(e))
    }
}

/// `e` and its sources as one line, each cause once (`a: b: c`): the message a stream carries
/// for a failed entry body.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let m = c.to_string();
        if !msg.contains(&m) {
            msg.push_str(": ");
            msg.push_str(&m);
        }
        cause = c.source();
    }
    msg
}
