//! Errors, one enum per family of operations.
//!
//! | enum | raised by |
//! |---|---|
//! | [`SubmitError`] | the orchestration API (device orchestrator and host graph builder alike) |
//! | [`KernelFault`] | a kernel on an AICore that refused its arguments |
//! | [`DeviceFault`] | a failed run, as the AICPU reports it back through the image |
//! | [`RunError`] | the host `DeviceRunner`'s per-run calls |
//! | [`LaunchFailure`] | a run's launch: a step of the launch transaction, the AICPU program, the streams |
//! | [`RunnerError`] | the host `DeviceRunner`'s init, callable registration and teardown |
//! | [`ConfigError`] | a `RunnerConfig` the runner cannot use |
//!
//! Every error keeps its cause as a typed [`source`](std::error::Error::source): a caller
//! matches a launch-ABI mismatch (`LaunchFailure::Program` holding
//! `ferry_launch::loader::LoadError::AbiMismatch`) or a kernel fault
//! (`RunError::Fault(DeviceFault::Kernel { .. })`) without reading a message.
//!
//! [`DeviceFault`] crosses the device → host boundary as a code and five words
//! ([`DeviceFault::encode`] / [`DeviceFault::decode`]), so it holds no strings.
use ferry_abi::services::STATUS_RUNTIME_BASE;
#[cfg(feature = "host")]
mod host;
#[cfg(feature = "host")]
pub(crate) use host::error_chain;
#[cfg(feature = "host")]
pub use host::{ConfigError, LaunchFailure, RunError, RunnerError};

/// A task or orchestration call the runtime refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The task names a kernel id no kernel has.
    #[error("task {task}: unknown kernel id {kernel}")]
    UnknownKernel {
        /// Task sequence number.
        task: u64,
        /// The kernel id.
        kernel: u32,
    },
    /// The task has the wrong number of tensor or scalar arguments for its kernel.
    #[error("task {task}: kernel {kernel} does not take {tensors} tensors and {scalars} scalars")]
    ArgCount {
        /// Task sequence number.
        task: u64,
        /// The kernel id.
        kernel: u32,
        /// Tensor arguments given.
        tensors: u32,
        /// Scalar arguments given.
        scalars: u32,
    },
    /// The task references a tensor id the run does not have.
    #[error("task {task}: tensor {tensor} does not exist (the run has {count})")]
    MissingTensor {
        /// Task sequence number.
        task: u64,
        /// The tensor id.
        tensor: u32,
        /// Tensors the run has.
        count: u32,
    },
    /// The task's view reaches past the end of its tensor.
    #[error("task {task}: view {offset}+{len} of tensor {tensor} exceeds its {size} elements")]
    ViewOutOfBounds {
        /// Task sequence number.
        task: u64,
        /// The tensor id.
        tensor: u32,
        /// First element of the view.
        offset: u64,
        /// Elements of the view.
        len: u64,
        /// Elements of the tensor.
        size: u64,
    },
    /// A tensor argument is not inside live device memory.
    #[error("task {task}: tensor range {addr:#x}+{bytes} is outside device memory")]
    TensorOutsideDeviceMemory {
        /// Task sequence number.
        task: u64,
        /// Device address.
        addr: u64,
        /// Length in bytes.
        bytes: u64,
    },
    /// The task asks for zero SPMD blocks.
    #[error("task {task}: block count is zero")]
    ZeroBlockDim {
        /// Task sequence number.
        task: u64,
    },
    /// The task asks for more SPMD blocks than its kernel supports.
    #[error("task {task}: kernel {kernel} supports at most {max} blocks, {block_dim} requested")]
    BlockDimTooLarge {
        /// Task sequence number.
        task: u64,
        /// The kernel id.
        kernel: u32,
        /// Blocks requested.
        block_dim: u32,
        /// Most blocks the kernel supports.
        max: u32,
    },
    /// The task depends on a task that was not submitted before it.
    #[error("task {task}: depends on task {after}, which was not submitted before it")]
    UnknownDependency {
        /// Task sequence number.
        task: u64,
        /// The dependency.
        after: u64,
    },
    /// More tensor or scalar arguments than a task can carry.
    #[error("task {task}: too many arguments")]
    TooManyArgs {
        /// Task sequence number.
        task: u64,
    },
    /// The orchestration read a scalar the run does not have.
    #[error("scalar {index} does not exist (the run has {count})")]
    MissingScalar {
        /// Scalar index.
        index: u32,
        /// Scalars the run has.
        count: u32,
    },
    /// `scope_end` without a matching `scope_begin`.
    #[error("scope_end without an open scope")]
    ScopeUnderflow,
    /// The scratch arena cannot hold the allocation.
    #[error("scratch arena exhausted: {requested} bytes requested, {free} free")]
    ScratchExhausted {
        /// Bytes asked for.
        requested: u64,
        /// Bytes left.
        free: u64,
    },
    /// The run already failed elsewhere; the orchestration must stop.
    #[error("the run was aborted")]
    Aborted,
    /// A workload program (`crate::device::workload`) is malformed; nothing was submitted.
    #[error("workload program refused at word {at}: {fault}")]
    BadProgram {
        /// Word index where the problem was found.
        at: u64,
        /// What is wrong.
        fault: crate::device::workload::ProgramFault,
    },
    /// An orchestration library's task has an argument or scalar ferry cannot lower
    /// (`crate::device::lib_api`).
    #[error("task {task}: argument {arg}: {problem}")]
    BadArg {
        /// The task it was about to be.
        task: u64,
        /// The argument (or scalar) index.
        arg: u32,
        /// What is wrong.
        problem: crate::device::lib_api::ArgProblem,
    },
    /// An orchestration library's function failed on its own (returned a non-zero code
    /// without ferry refusing a call), or panicked.
    #[error("task {task}: the orchestration function {}", if *.panicked { "panicked".to_string() } else { format!("failed with code {code}") })]
    Function {
        /// The task it would have submitted next.
        task: u64,
        /// Its code.
        code: i32,
        /// Whether it panicked.
        panicked: bool,
    },
    /// A host-built orchestration read bytes a task it submitted writes: the graph has not
    /// run while it is built, so the value is not there yet.
    #[error("task {task}: reads bytes {offset}+{len} of tensor {tensor}, which an earlier task writes (a host-built graph has not run yet)")]
    PendingRead {
        /// The task it would have submitted next.
        task: u64,
        /// The tensor.
        tensor: u32,
        /// First byte.
        offset: u64,
        /// Bytes.
        len: u64,
    },
}

/// Why a kernel refused to run a dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KernelFault {
    /// No kernel has this id.
    #[error("unknown kernel id {kernel}")]
    UnknownKernel {
        /// The kernel id.
        kernel: u32,
    },
    /// The tensor and scalar counts do not fit the kernel.
    #[error("kernel {kernel}: wrong argument count")]
    ArgCount {
        /// The kernel id.
        kernel: u32,
    },
    /// Tensor lengths do not fit together (a built-in's check, or a loaded kernel's
    /// `KernelError::Shape`).
    #[error("kernel {kernel}: {}", self.detail())]
    Shape {
        /// The kernel id.
        kernel: u32,
        /// Elements expected.
        expected: u64,
        /// Elements found.
        got: u64,
    },
    /// A tensor argument is not inside live device memory.
    #[error("tensor range {addr:#x}+{bytes} is outside device memory")]
    OutsideDeviceMemory {
        /// Device address.
        addr: u64,
        /// Length in bytes.
        bytes: u64,
    },
    /// The kernel panicked (a bug in the kernel, caught so the core keeps serving). A loaded
    /// kernel's panic message goes to the device log (`info` level), once per panicking block.
    #[error("kernel {kernel}: {}", self.detail())]
    Panicked {
        /// The kernel id.
        kernel: u32,
    },
    /// A loaded kernel's device entry returned a non-zero status without a typed reason (a
    /// `KernelError::Failed` code, or a status of its own).
    #[error("kernel {kernel}: {}", self.detail())]
    Status {
        /// The kernel id.
        kernel: u32,
        /// The `STATUS_*` it returned.
        status: i32,
    },
    /// A loaded kernel's `KernelError::MissingTensor`: the task has no tensor `index`.
    #[error("kernel {kernel}: {}", self.detail())]
    MissingTensor {
        /// The kernel id.
        kernel: u32,
        /// The argument index.
        index: u32,
    },
    /// A loaded kernel's `KernelError::MissingScalar`: the task has no scalar `index`.
    #[error("kernel {kernel}: {}", self.detail())]
    MissingScalar {
        /// The kernel id.
        kernel: u32,
        /// The argument index.
        index: u32,
    },
    /// A loaded kernel's `KernelError::BadAddress`: tensor `index` is not inside live device
    /// memory.
    #[error("kernel {kernel}: {}", self.detail())]
    BadAddress {
        /// The kernel id.
        kernel: u32,
        /// The argument index.
        index: u32,
    },
    /// A loaded kernel wrote past the end of the allocation that holds its output tensor
    /// argument `index` (the guard band after each run tensor's allocation no longer holds its
    /// fill).
    #[error("kernel {kernel}: {}", self.detail())]
    OutOfBounds {
        /// The kernel id.
        kernel: u32,
        /// The tensor argument.
        index: u32,
    },
    /// The kernel did not return within the run's kernel budget: its core is taken out of
    /// service (it stays busy for the rest of the process) and the run fails.
    #[error("kernel {kernel}: {}", self.detail())]
    Hung {
        /// The kernel id.
        kernel: u32,
        /// The core (worker index) it ran on.
        core: u32,
        /// The budget it exceeded, in milliseconds of device time.
        budget_ms: u64,
    },
    /// A view kernel's layout scalars (`ferry_kernel_abi::layout`) describe a view that tensor
    /// argument `operand`'s range does not hold (`need` bytes, `have` in the range), or name an
    /// unknown dtype (`need` and `have` are 0 then, and `code` is the dtype code).
    #[error("kernel {kernel}: {}", self.detail())]
    View {
        /// The kernel id.
        kernel: u32,
        /// The tensor argument.
        operand: u32,
        /// Bytes the view spans.
        need: u64,
        /// Bytes its range has.
        have: u64,
        /// The unknown dtype code, when that is what is wrong.
        code: u8,
    },
}

/// Why a run failed on the device, as reported through the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceFault {
    /// The orchestration (or the host-built graph's loader) stopped with an error.
    #[error("orchestration failed: {0}")]
    Submit(#[from] SubmitError),
    /// A kernel refused a dispatch.
    #[error("task {task} (kernel {kernel}) failed on its core: {fault}")]
    Kernel {
        /// Task sequence number.
        task: u64,
        /// The kernel id.
        kernel: u32,
        /// What the kernel said.
        fault: KernelFault,
    },
    /// A core's handshake report was invalid or missing.
    #[error("handshake with core {core} failed: physical core id {physical} (bound {bound})")]
    Handshake {
        /// Worker index.
        core: u32,
        /// Reported physical core id (`u32::MAX`: no report before the deadline).
        physical: u32,
        /// Physical core ids must be below this.
        bound: u32,
    },
    /// A scheduler's cores did not report in its handshake before the run's handshake
    /// deadline: the stream of a real device would time out (CANN's 507018). The host compares
    /// what the AICPU saw with what device memory holds (`RunError::HandshakeTimeout`).
    #[error("handshake timed out after {waited_ms} ms: core {core} never seen to report")]
    HandshakeTimeout {
        /// The first owned core the scheduler had not seen report.
        core: u32,
        /// How long it waited (device time).
        waited_ms: u32,
    },
    /// The image is not a runtime image of this version, or its regions do not fit.
    #[error("runtime image is malformed (magic {magic:#x}, version {version})")]
    BadImage {
        /// Magic found.
        magic: u32,
        /// Version found.
        version: u32,
    },
    /// The run names a callable the AICPU program has not registered.
    #[error("callable {id} is not registered on the device")]
    NoCallable {
        /// Callable id.
        id: u32,
    },
    /// The orchestration function panicked.
    #[error("orchestration panicked")]
    OrchestrationPanicked,
    /// An orchestration object's entry returned this non-zero status without a runtime error
    /// behind it.
    #[error("orchestration object returned status {status}")]
    OrchestrationStatus {
        /// The `STATUS_*` it returned.
        status: i32,
    },
}

const C_UNKNOWN_KERNEL: u32 = 1;
const C_ARG_COUNT: u32 = 2;
const C_MISSING_TENSOR: u32 = 3;
const C_VIEW_OOB: u32 = 4;
const C_OUTSIDE: u32 = 5;
const C_ZERO_BLOCKS: u32 = 6;
const C_BLOCKS_LARGE: u32 = 7;
const C_UNKNOWN_DEP: u32 = 8;
const C_TOO_MANY_ARGS: u32 = 9;
const C_MISSING_SCALAR: u32 = 10;
const C_SCOPE_UNDERFLOW: u32 = 11;
const C_SCRATCH: u32 = 12;
const C_ABORTED: u32 = 13;
const C_BAD_PROGRAM: u32 = 14;
const C_BAD_ARG: u32 = 15;
const C_FUNCTION: u32 = 16;
const C_PENDING_READ: u32 = 17;
const K_BASE: u32 = 0x100;
const C_HANDSHAKE: u32 = 0x200;
const C_BAD_IMAGE: u32 = 0x201;
const C_NO_CALLABLE: u32 = 0x202;
const C_PANIC: u32 = 0x203;
const C_ORCH_STATUS: u32 = 0x204;
const C_HANDSHAKE_TIMEOUT: u32 = 0x205;

impl KernelFault {
    /// What the kernel said, without its id: for a loaded kernel, exactly the `Display` of the
    /// `ferry_kernel_abi::KernelError` it returned (a caller that knows the kernel's name puts
    /// it in front).
    pub fn detail(&self) -> String {
        match *self {
            KernelFault::UnknownKernel { kernel } => format!("unknown kernel id {kernel}"),
            KernelFault::ArgCount { .. } => "wrong argument count".into(),
            KernelFault::Shape { expected, got, .. } => {
                format!("a tensor has {got} elements, the kernel needs {expected}")
            }
            KernelFault::OutsideDeviceMemory { addr, bytes } => {
                format!("tensor range {addr:#x}+{bytes} is outside device memory")
            }
            KernelFault::Panicked { .. } => "panicked".into(),
            KernelFault::Status { status, .. } if status >= STATUS_RUNTIME_BASE => {
                format!("kernel-defined failure {status}")
            }
            KernelFault::Status { status, .. } => {
                format!("returned status {status} ({})", ferry_abi::services::status_name(status))
            }
            KernelFault::MissingTensor { index, .. } => format!("no tensor argument {index}"),
            KernelFault::MissingScalar { index, .. } => format!("no scalar argument {index}"),
            KernelFault::BadAddress { index, .. } => {
                format!("tensor {index} is not inside live device memory")
            }
            KernelFault::OutOfBounds { index, .. } => format!(
                "wrote past the end of tensor argument {index} (into the guard band after its \
                 allocation)"
            ),
            KernelFault::Hung { core, budget_ms, .. } => format!(
                "did not return within its budget of {budget_ms} ms on core {core} (the core \
                 stays busy: the runner cannot launch again; --timeout sets the budget)"
            ),
            KernelFault::View { operand, need: 0, have: 0, code, .. } => {
                format!("the view of tensor {operand} names dtype code {code}, which is unknown")
            }
            KernelFault::View { operand, need, have, .. } => {
                format!("the view of tensor {operand} spans {need} bytes, its range has {have}")
            }
        }
    }

    /// Encodes as `(code, detail)` for the payload status line.
    pub fn encode(&self) -> (u32, [u64; 3]) {
        match *self {
            KernelFault::UnknownKernel { kernel } => (1, [kernel.into(), 0, 0]),
            KernelFault::ArgCount { kernel } => (2, [kernel.into(), 0, 0]),
            KernelFault::Shape { kernel, expected, got } => (3, [kernel.into(), expected, got]),
            KernelFault::OutsideDeviceMemory { addr, bytes } => (4, [addr, bytes, 0]),
            KernelFault::Panicked { kernel } => (5, [kernel.into(), 0, 0]),
            KernelFault::Status { kernel, status } => (6, [kernel.into(), status as u32 as u64, 0]),
            KernelFault::MissingTensor { kernel, index } => (7, [kernel.into(), index.into(), 0]),
            KernelFault::MissingScalar { kernel, index } => (8, [kernel.into(), index.into(), 0]),
            KernelFault::BadAddress { kernel, index } => (9, [kernel.into(), index.into(), 0]),
            KernelFault::Hung { kernel, core, budget_ms } => {
                (10, [kernel.into(), core.into(), budget_ms])
            }
            KernelFault::OutOfBounds { kernel, index } => (11, [kernel.into(), index.into(), 0]),
            KernelFault::View { kernel, operand, need, have, code } => (
                12,
                [u64::from(kernel) | u64::from(operand) << 32 | u64::from(code) << 56, need, have],
            ),
        }
    }

    /// Decodes what [`encode`](Self::encode) produced; `None` for an unknown code.
    pub fn decode(code: u32, d: [u64; 3]) -> Option<KernelFault> {
        Some(match code {
            1 => KernelFault::UnknownKernel { kernel: d[0] as u32 },
            2 => KernelFault::ArgCount { kernel: d[0] as u32 },
            3 => KernelFault::Shape { kernel: d[0] as u32, expected: d[1], got: d[2] },
            4 => KernelFault::OutsideDeviceMemory { addr: d[0], bytes: d[1] },
            5 => KernelFault::Panicked { kernel: d[0] as u32 },
            6 => KernelFault::Status { kernel: d[0] as u32, status: d[1] as u32 as i32 },
            7 => KernelFault::MissingTensor { kernel: d[0] as u32, index: d[1] as u32 },
            8 => KernelFault::MissingScalar { kernel: d[0] as u32, index: d[1] as u32 },
            9 => KernelFault::BadAddress { kernel: d[0] as u32, index: d[1] as u32 },
            10 => KernelFault::Hung { kernel: d[0] as u32, core: d[1] as u32, budget_ms: d[2] },
            11 => KernelFault::OutOfBounds { kernel: d[0] as u32, index: d[1] as u32 },
            12 => KernelFault::View {
                kernel: d[0] as u32,
                operand: (d[0] >> 32) as u32 & 0x00ff_ffff,
                need: d[1],
                have: d[2],
                code: (d[0] >> 56) as u8,
            },
            _ => return None,
        })
    }
}

impl DeviceFault {
    /// Encodes as `(code, task, detail)` for [`crate::device::image::RunResult`].
    pub fn encode(&self) -> (u32, u64, [u64; 4]) {
        use SubmitError as S;
        match *self {
            DeviceFault::Submit(s) => match s {
                S::UnknownKernel { task, kernel } => {
                    (C_UNKNOWN_KERNEL, task, [kernel.into(), 0, 0, 0])
                }
                S::ArgCount { task, kernel, tensors, scalars } => {
                    (C_ARG_COUNT, task, [kernel.into(), tensors.into(), scalars.into(), 0])
                }
                S::MissingTensor { task, tensor, count } => {
                    (C_MISSING_TENSOR, task, [tensor.into(), count.into(), 0, 0])
                }
                S::ViewOutOfBounds { task, tensor, offset, len, size } => {
                    (C_VIEW_OOB, task, [tensor.into(), offset, len, size])
                }
                S::TensorOutsideDeviceMemory { task, addr, bytes } => {
                    (C_OUTSIDE, task, [addr, bytes, 0, 0])
                }
                S::ZeroBlockDim { task } => (C_ZERO_BLOCKS, task, [0; 4]),
                S::BlockDimTooLarge { task, kernel, block_dim, max } => {
                    (C_BLOCKS_LARGE, task, [kernel.into(), block_dim.into(), max.into(), 0])
                }
                S::UnknownDependency { task, after } => (C_UNKNOWN_DEP, task, [after, 0, 0, 0]),
                S::TooManyArgs { task } => (C_TOO_MANY_ARGS, task, [0; 4]),
                S::MissingScalar { index, count } => {
                    (C_MISSING_SCALAR, 0, [index.into(), count.into(), 0, 0])
                }
                S::ScopeUnderflow => (C_SCOPE_UNDERFLOW, 0, [0; 4]),
                S::ScratchExhausted { requested, free } => (C_SCRATCH, 0, [requested, free, 0, 0]),
                S::Aborted => (C_ABORTED, 0, [0; 4]),
                S::BadProgram { at, fault } => (C_BAD_PROGRAM, 0, [at, fault.code().into(), 0, 0]),
                S::BadArg { task, arg, problem } => {
                    (C_BAD_ARG, task, [arg.into(), problem.code().into(), 0, 0])
                }
                S::Function { task, code, panicked } => {
                    (C_FUNCTION, task, [code as u32 as u64, panicked.into(), 0, 0])
                }
                S::PendingRead { task, tensor, offset, len } => {
                    (C_PENDING_READ, task, [tensor.into(), offset, len, 0])
                }
            },
            DeviceFault::Kernel { task, kernel, fault } => {
                let (c, d) = fault.encode();
                (K_BASE + c, task, [kernel.into(), d[0], d[1], d[2]])
            }
            DeviceFault::Handshake { core, physical, bound } => {
                (C_HANDSHAKE, 0, [core.into(), physical.into(), bound.into(), 0])
            }
            DeviceFault::HandshakeTimeout { core, waited_ms } => {
                (C_HANDSHAKE_TIMEOUT, 0, [core.into(), waited_ms.into(), 0, 0])
            }
            DeviceFault::BadImage { magic, version } => {
                (C_BAD_IMAGE, 0, [magic.into(), version.into(), 0, 0])
            }
            DeviceFault::NoCallable { id } => (C_NO_CALLABLE, 0, [id.into(), 0, 0, 0]),
            DeviceFault::OrchestrationPanicked => (C_PANIC, 0, [0; 4]),
            DeviceFault::OrchestrationStatus { status } => {
                (C_ORCH_STATUS, 0, [u64::from(status as u32), 0, 0, 0])
            }
        }
    }

    /// Decodes what [`encode`](Self::encode) produced; `None` for an unknown code.
    pub fn decode(code: u32, task: u64, d: [u64; 4]) -> Option<DeviceFault> {
        use SubmitError as S;
        let u = |x: u64| x as u32;
        let s = match code {
            C_UNKNOWN_KERNEL => S::UnknownKernel { task, kernel: u(d[0]) },
            C_ARG_COUNT => {
                S::ArgCount { task, kernel: u(d[0]), tensors: u(d[1]), scalars: u(d[2]) }
            }
            C_MISSING_TENSOR => S::MissingTensor { task, tensor: u(d[0]), count: u(d[1]) },
            C_VIEW_OOB => {
                S::ViewOutOfBounds { task, tensor: u(d[0]), offset: d[1], len: d[2], size: d[3] }
            }
            C_OUTSIDE => S::TensorOutsideDeviceMemory { task, addr: d[0], bytes: d[1] },
            C_ZERO_BLOCKS => S::ZeroBlockDim { task },
            C_BLOCKS_LARGE => {
                S::BlockDimTooLarge { task, kernel: u(d[0]), block_dim: u(d[1]), max: u(d[2]) }
            }
            C_UNKNOWN_DEP => S::UnknownDependency { task, after: d[0] },
            C_TOO_MANY_ARGS => S::TooManyArgs { task },
            C_MISSING_SCALAR => S::MissingScalar { index: u(d[0]), count: u(d[1]) },
            C_SCOPE_UNDERFLOW => S::ScopeUnderflow,
            C_SCRATCH => S::ScratchExhausted { requested: d[0], free: d[1] },
            C_ABORTED => S::Aborted,
            C_BAD_ARG => S::BadArg {
                task,
                arg: u(d[0]),
                problem: crate::device::lib_api::ArgProblem::from_code(u(d[1]))?,
            },
            C_FUNCTION => S::Function { task, code: d[0] as u32 as i32, panicked: d[1] != 0 },
            C_PENDING_READ => S::PendingRead { task, tensor: u(d[0]), offset: d[1], len: d[2] },
            C_BAD_PROGRAM => S::BadProgram {
                at: d[0],
                fault: crate::device::workload::ProgramFault::from_code(u(d[1]))?,
            },
            C_HANDSHAKE => {
                return Some(DeviceFault::Handshake {
                    core: u(d[0]),
                    physical: u(d[1]),
                    bound: u(d[2]),
                })
            }
            C_BAD_IMAGE => return Some(DeviceFault::BadImage { magic: u(d[0]), version: u(d[1]) }),
            C_NO_CALLABLE => return Some(DeviceFault::NoCallable { id: u(d[0]) }),
            C_PANIC => return Some(DeviceFault::OrchestrationPanicked),
            C_ORCH_STATUS => {
                return Some(DeviceFault::OrchestrationStatus { status: d[0] as u32 as i32 })
            }
            C_HANDSHAKE_TIMEOUT => {
                return Some(DeviceFault::HandshakeTimeout { core: u(d[0]), waited_ms: u(d[1]) })
            }
            c if c > K_BASE && c < C_HANDSHAKE => {
                let fault = KernelFault::decode(c - K_BASE, [d[1], d[2], d[3]])?;
                return Some(DeviceFault::Kernel { task, kernel: u(d[0]), fault });
            }
            _ => return None,
        };
        Some(DeviceFault::Submit(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_faults_round_trip_through_their_encoding() {
        use SubmitError as S;
        let all = [
            DeviceFault::Submit(S::UnknownKernel { task: 3, kernel: 99 }),
            DeviceFault::Submit(S::ArgCount { task: 1, kernel: 2, tensors: 3, scalars: 4 }),
            DeviceFault::Submit(S::MissingTensor { task: 5, tensor: 9, count: 2 }),
            DeviceFault::Submit(S::ViewOutOfBounds {
                task: 1,
                tensor: 2,
                offset: 3,
                len: 4,
                size: 5,
            }),
            DeviceFault::Submit(S::TensorOutsideDeviceMemory { task: 7, addr: 0x10, bytes: 8 }),
            DeviceFault::Submit(S::ZeroBlockDim { task: 4 }),
            DeviceFault::Submit(S::BlockDimTooLarge { task: 4, kernel: 5, block_dim: 9, max: 1 }),
            DeviceFault::Submit(S::UnknownDependency { task: 2, after: 8 }),
            DeviceFault::Submit(S::TooManyArgs { task: 6 }),
            DeviceFault::Submit(S::MissingScalar { index: 1, count: 0 }),
            DeviceFault::Submit(S::ScopeUnderflow),
            DeviceFault::Submit(S::ScratchExhausted { requested: 64, free: 0 }),
            DeviceFault::Submit(S::Aborted),
            DeviceFault::Kernel {
                task: 9,
                kernel: 1,
                fault: KernelFault::UnknownKernel { kernel: 1 },
            },
            DeviceFault::Kernel {
                task: 9,
                kernel: 1,
                fault: KernelFault::Shape { kernel: 1, expected: 4, got: 2 },
            },
            DeviceFault::Kernel {
                task: 2,
                kernel: 0,
                fault: KernelFault::OutsideDeviceMemory { addr: 1, bytes: 2 },
            },
            DeviceFault::Kernel { task: 2, kernel: 0, fault: KernelFault::ArgCount { kernel: 0 } },
            DeviceFault::Kernel {
                task: 3,
                kernel: 256,
                fault: KernelFault::Panicked { kernel: 256 },
            },
            DeviceFault::Kernel {
                task: 3,
                kernel: 256,
                fault: KernelFault::Status { kernel: 256, status: 1001 },
            },
            DeviceFault::Kernel {
                task: 3,
                kernel: 257,
                fault: KernelFault::MissingTensor { kernel: 257, index: 2 },
            },
            DeviceFault::Kernel {
                task: 3,
                kernel: 257,
                fault: KernelFault::MissingScalar { kernel: 257, index: 1 },
            },
            DeviceFault::Kernel {
                task: 3,
                kernel: 257,
                fault: KernelFault::BadAddress { kernel: 257, index: 0 },
            },
            DeviceFault::Kernel {
                task: 3,
                kernel: 7,
                fault: KernelFault::View { kernel: 7, operand: 2, need: 20, have: 16, code: 0 },
            },
            DeviceFault::Kernel {
                task: 3,
                kernel: 9,
                fault: KernelFault::View { kernel: 9, operand: 1, need: 0, have: 0, code: 15 },
            },
            DeviceFault::Handshake { core: 3, physical: 200, bound: 75 },
            DeviceFault::HandshakeTimeout { core: 4, waited_ms: 250 },
            DeviceFault::BadImage { magic: 1, version: 2 },
            DeviceFault::NoCallable { id: 7 },
            DeviceFault::OrchestrationPanicked,
            DeviceFault::OrchestrationStatus { status: -7 },
        ];
        for f in all {
            let (c, t, d) = f.encode();
            assert_eq!(DeviceFault::decode(c, t, d), Some(f), "{f}");
            let s = f.to_string();
            assert!(s.starts_with(|c: char| c.is_lowercase()) && !s.ends_with('.'), "{s}");
        }
        assert_eq!(DeviceFault::decode(0xFFFF, 0, [0; 4]), None);
    }
}
