//! [`DeviceOps`]: the only way the device half of the runtime touches the chip.
//!
//! Everything under [`crate::device`] (orchestration, tensor map, task ring, schedulers, AICore
//! executor, kernels) reaches device memory, the per-core register windows, the wake-ups between
//! AICPU threads and cores, and the device clock through this one object-safe trait. Two
//! implementations exist: `host::SimOps` calls `ferry_sim::cores::Chip` directly, and
//! [`crate::device::services::ServicesOps`] maps the same operations one to one onto the
//! `ferry_abi::services::DeviceServices` table the AICPU OS injects into device programs — so
//! the device half runs unchanged inside the AICPU shared object (`crate::device::ffi::exec_hook`).
//!
//! Register windows are named by their *base address* — the value the host put into the
//! `KernelArgs::regs` table for a physical core id — and a register offset from
//! `ferry_abi::regs::RegLayout`. The implementation maps a base to its window.
//!
//! Every wait is "spin briefly, then park": the implementation polls the condition a few times
//! with backoff, then sleeps until the matching doorbell rings (a register write by the other
//! side, or [`DeviceOps::notify_aicpu`]) or a bounded park passes. Nothing here ever spins
//! without parking.
use std::time::Duration;

/// Why a device address could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("device range {addr:#x}+{len} is not inside live device memory: {reason}")]
pub struct TranslateError {
    /// The device address.
    pub addr: u64,
    /// The length in bytes.
    pub len: u64,
    /// What the chip said.
    pub reason: String,
}

/// The chip services the device half of the runtime uses.
///
/// Object safe: the device half holds a `&dyn DeviceOps`.
///
/// # Safety
///
/// Implementors guarantee:
/// - [`translate`](Self::translate) returns `Ok(p)` only when `[p, p + len)` is valid for reads
///   and writes, 8-byte aligned where `addr` is, and stays valid until the host frees the
///   allocation — which the host does only after every device thread of the run has returned;
/// - other agents (host copies, other device threads) touch translated memory only with atomic
///   accesses or under a happens-before edge (launch, register Release/Acquire, stream sync), so
///   the runtime's relaxed atomic accesses never race with a non-atomic access;
/// - `reg_write_*` are Release stores and `reg_read` is an Acquire load of a 32-bit register;
///   each write wakes the waiters on the other side (AICPU writes wake that core's
///   [`core_wait`](Self::core_wait); core writes wake [`aicpu_wait`](Self::aicpu_wait)).
pub unsafe trait DeviceOps: Send + Sync {
    /// Translates `[addr, addr + len)` of device memory to a pointer device code may use.
    ///
    /// # Errors
    /// When the range is not inside one live allocation of this device (a host pointer, another
    /// device's address, out of bounds).
    fn translate(&self, addr: u64, len: u64) -> Result<*mut u8, TranslateError>;

    /// Reads the 32-bit register at `offset` of the window at `reg_base` (Acquire).
    fn reg_read(&self, reg_base: u64, offset: u32) -> u32;

    /// AICPU-side register write (Release); wakes the core that owns the window.
    fn reg_write_aicpu(&self, reg_base: u64, offset: u32, value: u32);

    /// Core-side register write (Release); wakes the AICPU threads.
    fn reg_write_core(&self, reg_base: u64, offset: u32, value: u32);

    /// Core side: spins briefly, then parks until `pred(register)` holds; returns that value, or
    /// `None` when `timeout` passed first (`None` waits for ever).
    fn core_wait(
        &self,
        reg_base: u64,
        offset: u32,
        pred: &mut dyn FnMut(u32) -> bool,
        timeout: Option<Duration>,
    ) -> Option<u32>;

    /// AICPU side: spins briefly, then parks until `cond()` holds; `false` when `timeout` passed
    /// first (`None` waits for ever). Woken by every core-side register write and by
    /// [`notify_aicpu`](Self::notify_aicpu).
    fn aicpu_wait(&self, cond: &mut dyn FnMut() -> bool, timeout: Option<Duration>) -> bool;

    /// Wakes every AICPU thread parked in [`aicpu_wait`](Self::aicpu_wait). Called after a state
    /// change another AICPU thread may wait for (ready task, freed ring slot, a core's report in
    /// its handshake slot). Cheap when nobody waits.
    fn notify_aicpu(&self);

    /// The device sys counter, in cycles. Like a counter read without a barrier, the read is not
    /// ordered after this thread's earlier loads (it is before its later stores): a timestamp
    /// that must follow an observation of another thread's store, to be compared with that
    /// thread's own timestamp, is [`clock_cycles_ordered`](Self::clock_cycles_ordered).
    fn clock_cycles(&self) -> u64;

    /// [`clock_cycles`](Self::clock_cycles) after every earlier load of this thread completed:
    /// the CPU's barrier (`lfence` on the simulator's x86-64 hosts, `isb` on the AICPU's arm64)
    /// then the read. A core's receive time (after it saw the dispatch) and a scheduler's FIN
    /// observation time take it, so neither precedes the other side's timestamp.
    fn clock_cycles_ordered(&self) -> u64 {
        ferry_abi::services::order_after_loads();
        self.clock_cycles()
    }

    /// The device sys counter frequency in Hz.
    fn clock_hz(&self) -> u64;

    /// A CPU load of `size` (4 or 8) bytes at the aligned device address `addr`, of kind
    /// `ferry_abi::services::MEM_LOAD_*`, as this thread's CPU issues it (through its cluster's
    /// data cache, when it has one that does not snoop AICore writes: `ferry_sim::cache`). The
    /// device half polls the handshake slots with it; it does not know whether it is cached.
    /// `None` for an address outside live device memory. The default goes straight to memory
    /// (a coherent cluster).
    fn mem_load(&self, addr: u64, size: u32, kind: u32) -> Option<u64> {
        let p = self.translate(addr, u64::from(size)).ok()?;
        if addr % u64::from(size) != 0 {
            return None;
        }
        // Acquire when asked: pairs with the writer's Release store.
        let order = if kind == ferry_abi::services::MEM_LOAD_ACQUIRE {
            std::sync::atomic::Ordering::Acquire
        } else {
            std::sync::atomic::Ordering::Relaxed
        };
        Some(match size {
            // SAFETY: `translate` vouched for 8 bytes, aligned (checked above); device memory is
            // accessed atomically by every agent (trait contract).
            8 => unsafe { std::sync::atomic::AtomicU64::from_ptr(p.cast()) }.load(order),
            // SAFETY: as above, 4 bytes.
            4 => u64::from(unsafe { std::sync::atomic::AtomicU32::from_ptr(p.cast()) }.load(order)),
            _ => return None,
        })
    }

    /// A CPU store of the low `size` bytes of `value` at `addr`, of kind `MEM_STORE_*`, as
    /// [`mem_load`](Self::mem_load). `false` for an address outside live device memory.
    fn mem_store(&self, addr: u64, size: u32, value: u64, kind: u32) -> bool {
        let Ok(p) = self.translate(addr, u64::from(size)) else { return false };
        if addr % u64::from(size) != 0 {
            return false;
        }
        // Release when asked: pairs with the reader's Acquire load.
        let order = if kind == ferry_abi::services::MEM_STORE_RELEASE {
            std::sync::atomic::Ordering::Release
        } else {
            std::sync::atomic::Ordering::Relaxed
        };
        match size {
            // SAFETY: as in `mem_load`.
            8 => unsafe { std::sync::atomic::AtomicU64::from_ptr(p.cast()) }.store(value, order),
            // SAFETY: as in `mem_load`, 4 bytes.
            4 => unsafe { std::sync::atomic::AtomicU32::from_ptr(p.cast()) }
                .store(value as u32, order),
            _ => return false,
        }
        true
    }

    /// A data-cache maintenance instruction (`ferry_abi::services::CACHE_OP_*`: `dc civac`,
    /// `dc ivac`) on the line holding `addr`. The default (a coherent cluster) has nothing to
    /// do.
    fn cache_op(&self, addr: u64, op: u32) {
        let _ = (addr, op);
    }

    /// A device-to-host doorbell: a callback that rings the host callback registered under
    /// `key` (a DFX region's device address) with a ready queue. `None` (the default) where
    /// the host's own doorbells are reachable or there is no host to ring.
    fn host_notifier(&self) -> Option<HostNotifier> {
        None
    }
}

/// See [`DeviceOps::host_notifier`]: `(key, queue)`.
pub type HostNotifier = std::sync::Arc<dyn Fn(u64, u32) + Send + Sync>;
