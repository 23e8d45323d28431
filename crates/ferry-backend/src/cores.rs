//! What the runner needs of a device's AICore cores: their register windows between runs
//! ([`CoreRegisters`]) and starting the runtime's AICore executor on them ([`AicoreLauncher`]).
use crate::BackendError;
use ferry_abi::arch::Arch;

/// The AICore cores' register windows as the host reaches them: each core has a small block of
/// control registers (its dispatch payload address and its condition register, at the offsets
/// `ferry_abi::regs::RegLayout` gives for the chip's generation) through which the AICPU's
/// schedulers and the core signal each other. The runner writes them itself twice: before a
/// run it clears every window (so no core reads the previous run's exit), and when a run's
/// schedulers cannot shut the cores down it writes the exit signal into every window (reaping
/// the cores). Cheap to clone; clones name the same cores.
///
/// On the vendor's chip the windows are the cores' registers in the device's register space
/// (written through the driver, as its core reset does); where the cores are host threads,
/// they are shared memory with a doorbell per side.
pub trait CoreRegisters: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The chip generation, whose register layout the windows follow.
    fn arch(&self) -> Arch;

    /// The cores that have a window (AICs first, then AIVs).
    fn core_count(&self) -> u32;

    /// The address of each core's register window, by core index (AICs first, then AIVs):
    /// the runner's `regs` table, through which the AICPU's schedulers and the cores address
    /// the windows (the device half's `reg_read`/`reg_write_*` take one of these bases and a
    /// `RegLayout` offset). One entry per core, `core_count()` of them.
    ///
    /// On the vendor's chip these are the cores' register-space addresses the driver reports
    /// for the device; where the windows are host memory, the backend's own names for them,
    /// which its device operations map back to a core.
    fn reg_bases(&self) -> Vec<u64>;

    /// Writes `value` to register `offset` of core `core`'s window as the AICPU side does:
    /// ordered after the writer's earlier device-memory writes, and waking the core.
    ///
    /// # Panics
    /// When `core` is not a core index or `offset` is not a 4-aligned offset inside a window
    /// (programming errors: the offsets come from the register layout).
    fn write_as_aicpu(&self, core: u32, offset: u32, value: u32);

    /// Writes `value` to register `offset` of core `core`'s window as the core side does:
    /// ordered after the writer's earlier device-memory writes, and waking the AICPU threads.
    ///
    /// # Panics
    /// As [`write_as_aicpu`](Self::write_as_aicpu).
    fn write_as_core(&self, core: u32, offset: u32, value: u32);
}

/// Starting the runtime's AICore executor on a device's cores, as the runner's AICore entry
/// does for every run (after it cleared the register windows, [`CoreRegisters`]). Each core
/// runs the executor until the AICPU's schedulers write its exit signal; the launch completes
/// when every core has returned.
///
/// Where the cores are host threads (the simulated chip), the executor is host code: the
/// backend runs `body` once per core on that core's thread, with the core's index. On the
/// vendor's chip the cores run the AICore binary of the loaded kernel library, launched with
/// the run's `AicoreLaunchArgs` (`rtKernelLaunch` with `block_dim` = the core count), and such
/// a backend implements this by launching that binary rather than calling `body`.
///
/// Generic over the body (no trait object on the runner's side): one launch per run.
pub trait AicoreLauncher: CoreRegisters {
    /// A launch in progress on the cores.
    type CoreLaunch: CoreLaunch;

    /// Starts `body` on cores `0..cores` (AICs first, then AIVs), each call with its core's
    /// index (`block_idx`), and returns without waiting for them.
    ///
    /// # Errors
    /// [`BackendOp::Launch`](crate::BackendOp::Launch) when the cores cannot be started (a core
    /// count outside `1..=`[`core_count`](CoreRegisters::core_count), a launch the device refused);
    /// no core runs then.
    fn launch_cores<F>(&self, cores: u32, body: F) -> Result<Self::CoreLaunch, BackendError>
    where
        F: Fn(u32) -> Result<(), String> + Send + Sync + 'static;
}

/// An AICore launch in progress ([`AicoreLauncher::launch_cores`]): the hardware's kernel
/// completion (a stream synchronize after `rtKernelLaunch`).
pub trait CoreLaunch: Send + Sync + 'static {
    /// Waits until every core's body has returned.
    ///
    /// # Errors
    /// [`BackendOp::Execute`](crate::BackendOp::Execute) with the first core's failure (a
    /// body's error message, or a core that faulted) as the source.
    fn wait(&self) -> Result<(), BackendError>;
}
