//! What the runner needs of a device's AICore cores between runs: their register windows
//! ([`CoreRegisters`]).
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
