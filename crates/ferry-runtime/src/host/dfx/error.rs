//! [`DfxError`]: why a DFX session could not start or its records could not become a model,
//! each cause typed.
use ferry_abi::args_dump::ArgsChainError;
use ferry_abi::dep_gen::DepGenError;
use ferry_abi::records::RecordDecodeError;
use ferry_backend::BackendError;
use ferry_profile::ChainArgsError;

/// Why DFX collection failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DfxError {
    /// A transport could not be configured.
    #[error("dfx transport setup")]
    Setup(#[from] ferry_dfx::BuildError),
    /// The session's device memory could not be allocated, mapped for the host or written:
    /// the operation, with the device's own error as its cause.
    #[error("dfx device memory")]
    Device(#[from] BackendError),
    /// Collected records could not be turned into the model.
    #[error("dfx collection")]
    Collect(#[from] CollectError),
    /// `deps.json` disagrees with the runtime's dependencies; it is not written.
    #[error("deps.json check failed")]
    Deps(#[from] DepsCheckError),
    /// A host thread of the session's engine died: the run's records cannot be reconciled
    /// (no model; the session's device memory is freed all the same).
    #[error(transparent)]
    HostDied(#[from] ferry_dfx::HostDied),
}

/// Why collected records could not become the model.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CollectError {
    /// A native profile that cannot be rebuilt into models (what it lacks).
    #[error("the native profile cannot be rebuilt: {0}")]
    Native(String),
    /// A subsystem's device-written records do not decode.
    #[error("{subsystem} records")]
    Records {
        /// `scheduler phase`, `pmu`, `scope stats`.
        subsystem: &'static str,
        /// Why.
        #[source]
        source: RecordDecodeError,
    },
    /// DepGen's words are not chains of submits.
    #[error("dep_gen records")]
    DepGen(#[source] DepGenError),
    /// A lossless collection holds submits whose chains are incomplete.
    #[error("dep_gen: {incomplete} submits incomplete in a lossless collection")]
    IncompleteSubmits {
        /// Submits without all their words.
        incomplete: u64,
    },
    /// ArgsDump's words are not chains of arguments.
    #[error("args dump records")]
    ArgsChain(#[source] ArgsChainError),
    /// ArgsDump's chains cannot be kept as arguments.
    #[error("args dump records")]
    Args(#[source] ChainArgsError),
    /// The lanes logged different numbers of run ends.
    #[error(
        "the DFX lanes logged different numbers of run ends ({first} and {other}): the records \
         cannot be told apart by run"
    )]
    RunEndsDisagree {
        /// One lane's count.
        first: u64,
        /// Another's.
        other: u64,
    },
    /// More runs than the run-end log keeps.
    #[error(
        "{runs} runs in one DFX session: its run-end log keeps the last {kept}, so the earlier \
         runs' records cannot be told apart"
    )]
    TooManyRuns {
        /// Runs in the session.
        runs: u64,
        /// Runs the log keeps.
        kept: u64,
    },
    /// A lane published a buffer after its last run ended.
    #[error("{lane}: buffer {seq} was published after the lane's last run ended")]
    AfterLastRun {
        /// The lane.
        lane: String,
        /// The buffer's sequence number.
        seq: u32,
    },
    /// The runs' buffers of a lane do not hold the records the lane collected.
    #[error("{lane}: the runs' buffers hold {in_runs} records, the lane collected {collected}")]
    RunRecords {
        /// The lane.
        lane: String,
        /// Records in the runs' buffers.
        in_runs: u64,
        /// Records the lane collected.
        collected: u64,
    },
}

/// How `deps.json` disagrees with the runtime's dependencies.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DepsCheckError {
    /// An edge that does not point forward (or, lossless, names an unrecorded predecessor).
    #[error("edge {pred} -> {succ} is not a forward edge")]
    NotForward {
        /// Predecessor task id.
        pred: u64,
        /// Successor task id.
        succ: u64,
    },
    /// An edge listed twice.
    #[error("edge {pred} -> {succ} repeats")]
    Repeated {
        /// Predecessor task id.
        pred: u64,
        /// Successor task id.
        succ: u64,
    },
    /// A task started before a predecessor ended.
    #[error("task {succ} started at {start} before its predecessor {pred} ended at {end}")]
    StartedEarly {
        /// Successor task id.
        succ: u64,
        /// Its first block's start cycle.
        start: u64,
        /// Predecessor task id.
        pred: u64,
        /// Its last block's end cycle.
        end: u64,
    },
}
