//! Errors of the simulated driver.
use crate::fault::InjectedFault;
use crate::memory::MemoryError;

/// Errors of device, stream, event and launch operations.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// A memory operation failed (bad address, out of bounds, out of memory, registration).
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A fault injected by the test harness.
    #[error(transparent)]
    Injected(#[from] InjectedFault),
    /// No device with this ordinal exists.
    #[error("no device {ordinal} (the platform has {count})")]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: u32,
        /// How many devices exist.
        count: u32,
    },
    /// A kernel (device or CPU) reported a failure while running on a stream.
    #[error("kernel `{name}` failed: {message}")]
    Kernel {
        /// Kernel name.
        name: String,
        /// What the kernel reported.
        message: String,
    },
    /// A bounded wait ran out.
    #[error("timed out waiting for {what}")]
    Timeout {
        /// What was being waited for.
        what: &'static str,
    },
    /// A launch was malformed (e.g. a zero-block grid).
    #[error("invalid launch of `{name}`: {reason}")]
    InvalidLaunch {
        /// Kernel name.
        name: String,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// The host could not create a simulator thread or mapping.
    #[error("simulator resource failure: {0}")]
    Resource(String),
}
