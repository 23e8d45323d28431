//! AICPU threads and AICore workers as host threads, with per-core register windows and
//! handshake slots.
//!
//! A [`Chip`] owns one persistent host thread per AICPU thread and per AICore (AIC first, then
//! AIV, as on hardware). Threads park while they have no job, so an idle chip costs nothing.
//! [`Chip::launch_aicore`] / [`Chip::launch_aicpu`] hand every selected thread one call of an
//! entry function and return a [`Completion`] that collects their results (first error wins).
//!
//! Each AICore has a [`RegisterWindow`] in device memory (its base goes in `KernelArgs.regs`)
//! and a 64-byte handshake slot. Register writes go through the window so the simulated MMIO
//! write wakes the other side: an AICPU write wakes the core, a core write wakes the AICPU
//! threads. Every wait spins briefly, then parks ([`crate::wait`]).
//!
//! # Examples
//! ```
//! use ferry_sim::{Arch, PlatformBuilder};
//! use ferry_sim::cores::{Chip, CoreConfig};
//! use std::sync::Arc;
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 24).build()?;
//! let chip = Chip::new(p.device(0)?.clone(), CoreConfig { aicpu_threads: 2, aic: 1, aiv: 2 })?;
//! // Each core writes its index into register 0x10 of its window.
//! let done = chip.launch_aicore(3, Arc::new(|ctx: ferry_sim::cores::CoreCtx| {
//!     ctx.window.core_write(0x10, ctx.index + 1);
//!     Ok(())
//! }))?;
//! done.wait()?;
//! assert_eq!(chip.window(2).read(0x10), 3);
//! # Ok::<(), ferry_sim::DeviceError>(())
//! ```
use crate::device::Device;
use crate::error::DeviceError;
use crate::memory::DevicePtr;
use crate::sync::{lock, Arc, AtomicU32, AtomicU64, Condvar, Mutex, Ordering};
use crate::wait::Doorbell;
use std::time::Duration;

/// Bytes of one simulated register window (covers every register offset of both arches).
pub const REG_WINDOW_BYTES: u64 = 0x6000;
/// Bytes of one handshake slot.
pub const HANDSHAKE_BYTES: u64 = 64;

/// How many threads of each kind a chip runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreConfig {
    /// AICPU threads (at most the arch's `max_aicpu_threads`).
    pub aicpu_threads: u32,
    /// AIC (cube) cores.
    pub aic: u32,
    /// AIV (vector) cores.
    pub aiv: u32,
}

impl CoreConfig {
    /// The simulator default for an arch: all AICPU threads, 8 AIC + 16 AIV (one third of a die
    /// keeps the host thread count reasonable on small machines).
    pub fn default_for(arch: &ferry_abi::arch::ArchProfile) -> Self {
        Self { aicpu_threads: arch.max_aicpu_threads, aic: 8, aiv: 16 }
    }

    /// AICore workers in total.
    pub fn cores(&self) -> u32 {
        self.aic + self.aiv
    }
}

/// Whether a core is a cube or a vector core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AicoreType {
    /// Cube core.
    Aic,
    /// Vector core.
    Aiv,
}

/// One core's register window: 32-bit registers in device memory, written through this type
/// so that writes wake the other side.
#[derive(Debug)]
pub struct RegisterWindow {
    base: DevicePtr,
    ptr: *mut u8,
    /// Rung by AICPU-side writes; the core parks on it.
    core_bell: Doorbell,
    /// Rung by core-side writes; AICPU threads park on it (shared by all cores of the chip).
    aicpu_bell: Arc<Doorbell>,
}

// SAFETY: `ptr` addresses device memory owned by the chip's allocation for the chip's whole
// lifetime; every access through it is atomic, so sharing the window between threads is sound.
unsafe impl Send for RegisterWindow {}
// SAFETY: as for Send: all access is through atomics.
unsafe impl Sync for RegisterWindow {}

impl RegisterWindow {
    /// Device address of the window (what `KernelArgs.regs[core]` holds).
    pub fn base(&self) -> DevicePtr {
        self.base
    }

    fn cell(&self, offset: u32) -> &AtomicU32 {
        assert!(
            u64::from(offset) + 4 <= REG_WINDOW_BYTES && offset % 4 == 0,
            "bad register offset {offset:#x}"
        );
        // SAFETY: the offset is in bounds and 4-aligned (checked above; the window is 64-aligned),
        // and the window lives as long as `self`; registers are only accessed atomically.
        unsafe { AtomicU32::from_ptr(self.ptr.add(offset as usize).cast()) }
    }

    /// Reads a register.
    pub fn read(&self, offset: u32) -> u32 {
        // Acquire: pairs with the Release store of the writing side, so what it wrote to device
        // memory before the register write is visible (the `rmb()` after an MMIO poll).
        self.cell(offset).load(Ordering::Acquire)
    }

    /// AICPU-side write: stores and wakes the core.
    pub fn aicpu_write(&self, offset: u32, value: u32) {
        // Release: publishes the AICPU's prior writes (dispatch payload) to the core's Acquire
        // read of this register.
        self.cell(offset).store(value, Ordering::Release);
        self.core_bell.ring();
    }

    /// Core-side write: stores and wakes the AICPU threads.
    pub fn core_write(&self, offset: u32, value: u32) {
        // Release: publishes the core's prior writes (kernel outputs) to the AICPU's Acquire read.
        self.cell(offset).store(value, Ordering::Release);
        self.aicpu_bell.ring();
    }

    /// Core side: waits until `pred(register)` holds; `None` waits for ever. Returns the value
    /// that satisfied it, or `None` on timeout.
    pub fn core_wait(
        &self,
        offset: u32,
        pred: impl FnMut(u32) -> bool,
        timeout: Option<Duration>,
    ) -> Option<u32> {
        self.wait_on(&self.core_bell, offset, pred, timeout)
    }

    /// AICPU side: waits until `pred(register)` holds; `None` waits for ever.
    pub fn aicpu_wait(
        &self,
        offset: u32,
        pred: impl FnMut(u32) -> bool,
        timeout: Option<Duration>,
    ) -> Option<u32> {
        self.wait_on(&self.aicpu_bell, offset, pred, timeout)
    }

    fn wait_on(
        &self,
        bell: &Doorbell,
        offset: u32,
        mut pred: impl FnMut(u32) -> bool,
        timeout: Option<Duration>,
    ) -> Option<u32> {
        let mut v = 0;
        bell.wait_until(
            || {
                v = self.read(offset);
                pred(v)
            },
            timeout,
        )
        .then_some(v)
    }
}

/// What an AICore entry receives.
#[derive(Clone)]
pub struct CoreCtx {
    /// Core index (`block_idx`): AICs first, then AIVs.
    pub index: u32,
    /// Cube or vector.
    pub core_type: AicoreType,
    /// The device.
    pub device: Device,
    /// This core's register window.
    pub window: Arc<RegisterWindow>,
    /// Device address of this core's 64-byte handshake slot.
    pub handshake: DevicePtr,
}

/// What an AICPU entry receives.
#[derive(Clone)]
pub struct AicpuCtx {
    /// Thread index among the launched threads.
    pub thread: u32,
    /// How many threads were launched.
    pub threads: u32,
    /// The device.
    pub device: Device,
    /// The chip (register windows, bells).
    pub chip: Chip,
}

/// Entry of an AICore launch.
pub type CoreEntry = Arc<dyn Fn(CoreCtx) -> Result<(), String> + Send + Sync>;
/// Entry of an AICPU launch.
pub type AicpuThreadFn = Arc<dyn Fn(AicpuCtx) -> Result<(), String> + Send + Sync>;

/// An entry bound to its context, and the launch's completion it reports to.
type Job = (Box<dyn FnOnce() -> Result<(), String> + Send>, Completion);

/// One core's (or AICPU thread's) worker. It is busy from the moment a launch gives it a job
/// until that job has returned: a second launch meanwhile is refused ("still busy"), whether
/// the first job is still queued or already running.
struct Worker {
    /// (queued job, closed, busy).
    slot: Mutex<(Option<Job>, bool, bool)>,
    cv: Condvar,
}

impl Worker {
    fn run(self: &Arc<Self>) {
        loop {
            let job = {
                let mut g = lock(&self.slot);
                loop {
                    if let Some(j) = g.0.take() {
                        break Some(j);
                    }
                    if g.1 {
                        break None;
                    }
                    g = match self.cv.wait(g) {
                        Ok(g) => g,
                        Err(p) => p.into_inner(),
                    };
                }
            };
            let Some((entry, done)) = job else { return };
            let result = catch(entry);
            // Idle before the completion reports: a caller woken by it may launch again at once.
            lock(&self.slot).2 = false;
            done.finish(result);
        }
    }

    fn give(&self, job: Job) -> bool {
        let mut g = lock(&self.slot);
        if g.0.is_some() || g.2 {
            return false;
        }
        g.0 = Some(job);
        g.2 = true;
        drop(g);
        self.cv.notify_one();
        true
    }
}

/// Collects the results of one launch: pending until every launched thread finished; the
/// first error is kept; an abandoned completion stays abandoned.
#[derive(Clone, Debug, Default)]
pub struct Completion(Arc<CompletionInner>);

#[derive(Debug, Default)]
struct CompletionInner {
    remaining: AtomicU64,
    error: Mutex<Option<String>>,
    bell: Doorbell,
}

impl Completion {
    fn new(n: u64) -> Self {
        let c = Completion::default();
        // Relaxed: set before any thread that could read it is started.
        c.0.remaining.store(n, Ordering::Relaxed);
        c
    }

    fn finish(&self, r: Result<(), String>) {
        if let Err(e) = r {
            lock(&self.0.error).get_or_insert(e);
        }
        // Release: publishes this thread's work (and its error) to the Acquire load in `is_done`.
        self.0.remaining.fetch_sub(1, Ordering::Release);
        self.0.bell.ring();
    }

    /// Whether every launched thread returned.
    pub fn is_done(&self) -> bool {
        // Acquire: pairs with the Release in `finish`.
        self.0.remaining.load(Ordering::Acquire) == 0
    }

    /// Waits for every thread; returns the first error.
    ///
    /// # Errors
    /// [`DeviceError::Kernel`] with the first thread's error message.
    pub fn wait(&self) -> Result<(), DeviceError> {
        self.0.bell.wait_until(|| self.is_done(), None);
        self.result()
    }

    /// As [`wait`](Self::wait), giving up after `timeout`.
    ///
    /// # Errors
    /// [`DeviceError::Timeout`] when threads are still running.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<(), DeviceError> {
        if !self.0.bell.wait_until(|| self.is_done(), Some(timeout)) {
            return Err(DeviceError::Timeout { what: "launch completion" });
        }
        self.result()
    }

    fn result(&self) -> Result<(), DeviceError> {
        match lock(&self.0.error).clone() {
            Some(message) => Err(DeviceError::Kernel { name: "launch".into(), message }),
            None => Ok(()),
        }
    }
}

struct ChipInner {
    device: Device,
    config: CoreConfig,
    aicpu: Vec<Arc<Worker>>,
    cores: Vec<Arc<Worker>>,
    windows: Vec<Arc<RegisterWindow>>,
    aicpu_bell: Arc<Doorbell>,
    regs_block: DevicePtr,
    handshakes: DevicePtr,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Core starts now held back waiting for the cached launch's line fills.
    held_for_line_fills: AtomicU32,
}

impl Drop for ChipInner {
    fn drop(&mut self) {
        for w in self.aicpu.iter().chain(&self.cores) {
            lock(&w.slot).1 = true;
            w.cv.notify_all();
        }
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
        let _ = self.device.free(self.regs_block);
        let _ = self.device.free(self.handshakes);
    }
}

/// The AICPU threads and AICore workers of one device. Cheap to clone.
#[derive(Clone)]
pub struct Chip(Arc<ChipInner>);

impl std::fmt::Debug for Chip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chip")
            .field("device", &self.0.device.ordinal())
            .field("config", &self.0.config)
            .finish()
    }
}

impl Chip {
    /// Starts the chip's threads (parked until launched) and allocates register windows and
    /// handshake slots in device memory.
    ///
    /// # Errors
    /// More AICPU threads than the arch allows, no cores, out of device memory, or a thread that
    /// could not be spawned.
    pub fn new(device: Device, config: CoreConfig) -> Result<Chip, DeviceError> {
        let arch = device.arch();
        if config.aicpu_threads == 0 || config.aicpu_threads > arch.max_aicpu_threads {
            return Err(DeviceError::Resource(format!(
                "{} AICPU threads requested; {} allows 1..={}",
                config.aicpu_threads, arch.name, arch.max_aicpu_threads
            )));
        }
        if config.cores() == 0 || config.aic > arch.aic_per_die || config.aiv > arch.aiv_per_die {
            return Err(DeviceError::Resource(format!(
                "{} AIC + {} AIV requested; {} has {} + {} per die",
                config.aic, config.aiv, arch.name, arch.aic_per_die, arch.aiv_per_die
            )));
        }
        let n = u64::from(config.cores());
        let regs_block = device.malloc(n * REG_WINDOW_BYTES)?;
        let handshakes = device.malloc(n * HANDSHAKE_BYTES)?;
        let zero = |p: DevicePtr, len: u64| -> Result<(), DeviceError> {
            let ptr = device.translate(p, len)?;
            // SAFETY: `translate` checked `[ptr, ptr+len)` is inside a live allocation that
            // nothing else references yet.
            unsafe { ptr.write_bytes(0, len as usize) };
            Ok(())
        };
        zero(regs_block, n * REG_WINDOW_BYTES)?;
        zero(handshakes, n * HANDSHAKE_BYTES)?;
        let aicpu_bell = Arc::new(Doorbell::new());
        let windows = (0..n)
            .map(|i| {
                let base = regs_block.add(i * REG_WINDOW_BYTES);
                Ok(Arc::new(RegisterWindow {
                    base,
                    ptr: device.translate(base, REG_WINDOW_BYTES)?,
                    core_bell: Doorbell::new(),
                    aicpu_bell: aicpu_bell.clone(),
                }))
            })
            .collect::<Result<Vec<_>, DeviceError>>()?;
        let mk = || Arc::new(Worker { slot: Mutex::new((None, false, false)), cv: Condvar::new() });
        let aicpu: Vec<_> = (0..config.aicpu_threads).map(|_| mk()).collect();
        let cores: Vec<_> = (0..n).map(|_| mk()).collect();
        let mut threads = Vec::new();
        for (i, w) in aicpu.iter().enumerate() {
            let w = w.clone();
            threads.push(spawn(format!("aicpu-{}-{i}", device.ordinal()), move || w.run())?);
        }
        for (i, w) in cores.iter().enumerate() {
            let w = w.clone();
            threads.push(spawn(format!("aicore-{}-{i}", device.ordinal()), move || w.run())?);
        }
        Ok(Chip(Arc::new(ChipInner {
            device,
            config,
            aicpu,
            cores,
            windows,
            aicpu_bell,
            regs_block,
            handshakes,
            threads: Mutex::new(threads),
            held_for_line_fills: AtomicU32::new(0),
        })))
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.0.device
    }

    /// The thread counts.
    pub fn config(&self) -> CoreConfig {
        self.0.config
    }

    /// Core `i`'s register window.
    ///
    /// # Panics
    /// When `i` is not a core index.
    #[track_caller]
    pub fn window(&self, i: u32) -> &Arc<RegisterWindow> {
        &self.0.windows[i as usize]
    }

    /// Core `i`'s type (AICs first, then AIVs).
    pub fn core_type(&self, i: u32) -> AicoreType {
        if i < self.0.config.aic {
            AicoreType::Aic
        } else {
            AicoreType::Aiv
        }
    }

    /// Device address of core `i`'s handshake slot.
    pub fn handshake(&self, i: u32) -> DevicePtr {
        self.0.handshakes.add(u64::from(i) * HANDSHAKE_BYTES)
    }

    /// The bell that core-side register writes ring (AICPU threads park on it).
    pub fn aicpu_bell(&self) -> &Doorbell {
        &self.0.aicpu_bell
    }

    /// Core starts now held back until the cached AICPU launch has filled its lines
    /// ([`crate::aicpu_os::OsConfig::aicore_start_after_line_fills`]): the state a test waits
    /// for to know a core is held, rather than assuming it has not run yet.
    pub fn starts_held_for_line_fills(&self) -> u32 {
        self.0.held_for_line_fills.load(Ordering::Relaxed)
    }

    /// Device addresses of every register window, by core index (the `regs` table).
    pub fn reg_bases(&self) -> Vec<u64> {
        self.0.windows.iter().map(|w| w.base.0).collect()
    }

    /// Runs `entry` once on each of the first `block_dim` cores.
    ///
    /// # Errors
    /// [`DeviceError::InvalidLaunch`] for a zero or too-large `block_dim`, or when a core is
    /// still busy with an earlier launch; an injected launch fault.
    pub fn launch_aicore(
        &self,
        block_dim: u32,
        entry: CoreEntry,
    ) -> Result<Completion, DeviceError> {
        if block_dim == 0 || block_dim > self.0.config.cores() {
            return Err(DeviceError::InvalidLaunch {
                name: "aicore".into(),
                reason: "block_dim outside 1..=cores",
            });
        }
        self.0
            .device
            .faults()
            .check(crate::fault::FaultPoint::Launch)
            .inspect_err(|_| self.0.device.fault_counted())?;
        let done = Completion::new(u64::from(block_dim));
        let os = self.0.device.aicpu_os();
        let (latency, after_fills) =
            (os.config().aicore_launch_latency, os.config().aicore_start_after_line_fills);
        for i in 0..block_dim {
            let ctx = CoreCtx {
                index: i,
                core_type: self.core_type(i),
                device: self.0.device.clone(),
                window: self.0.windows[i as usize].clone(),
                handshake: self.handshake(i),
            };
            let (e, d, chip) = (entry.clone(), done.clone(), self.clone());
            let run = move || {
                if !latency.is_zero() {
                    std::thread::sleep(latency);
                }
                wait_for_line_fills(&chip, after_fills);
                let _chip = CoreChip::enter(chip);
                e(ctx)
            };
            if !self.0.cores[i as usize].give((Box::new(run), d)) {
                done.finish(Err(format!("core {i} is still busy")));
            }
        }
        Ok(done)
    }

    /// Runs `entry` once on each of the first `threads` AICPU threads.
    ///
    /// # Errors
    /// As [`launch_aicore`](Self::launch_aicore).
    pub fn launch_aicpu(
        &self,
        threads: u32,
        entry: AicpuThreadFn,
    ) -> Result<Completion, DeviceError> {
        if threads == 0 || threads > self.0.config.aicpu_threads {
            return Err(DeviceError::InvalidLaunch {
                name: "aicpu".into(),
                reason: "thread count outside 1..=aicpu_threads",
            });
        }
        self.0
            .device
            .faults()
            .check(crate::fault::FaultPoint::Launch)
            .inspect_err(|_| self.0.device.fault_counted())?;
        let done = Completion::new(u64::from(threads));
        for t in 0..threads {
            let ctx =
                AicpuCtx { thread: t, threads, device: self.0.device.clone(), chip: self.clone() };
            let (e, d) = (entry.clone(), done.clone());
            if !self.0.aicpu[t as usize].give((Box::new(move || e(ctx)), d)) {
                done.finish(Err(format!("AICPU thread {t} is still busy")));
            }
        }
        Ok(done)
    }
}

thread_local! {
    /// The chip whose AICore entry this thread is running (set for the entry's duration), so
    /// the OS services resolve a core's register accesses without a lock or a reference count.
    static CORE_CHIP: std::cell::RefCell<Option<Chip>> = const { std::cell::RefCell::new(None) };
}

/// Marks the calling core thread as running an entry of `chip` until dropped.
struct CoreChip;

impl CoreChip {
    fn enter(chip: Chip) -> CoreChip {
        CORE_CHIP.with(|c| *c.borrow_mut() = Some(chip));
        CoreChip
    }
}

impl Drop for CoreChip {
    fn drop(&mut self) {
        CORE_CHIP.with(|c| *c.borrow_mut() = None);
    }
}

/// `f` over the chip whose AICore entry the calling thread runs; `None` on any other thread.
pub(crate) fn with_core_chip<R>(f: impl FnOnce(&Chip) -> Option<R>) -> Option<R> {
    CORE_CHIP.with(|c| c.borrow().as_ref().and_then(f))
}

/// How long (device time) a core start waits for line fills that never come before it gives up.
const LINE_FILLS_GIVE_UP_SECS: u64 = 60;

/// [`LINE_FILLS_GIVE_UP_SECS`] in cycles of a clock of `hz`.
fn line_fills_give_up_cycles(hz: u64) -> u64 {
    hz.saturating_mul(LINE_FILLS_GIVE_UP_SECS)
}

/// Holds a core's start until the cached AICPU threads of the launch now running have filled
/// `lines` lines (see [`crate::aicpu_os::OsConfig::aicore_start_after_line_fills`]; 0 holds
/// nothing). The cache model rings no bell, so this polls; it gives up after a minute of device
/// time (a misconfigured count), and the run then goes on unordered, which the test that asked
/// for the order reports.
fn wait_for_line_fills(chip: &Chip, lines: u64) {
    if lines == 0 {
        return;
    }
    let device = &chip.0.device;
    let clock = device.clock();
    let deadline = clock.deadline_after(line_fills_give_up_cycles(clock.hz()));
    let held = &chip.0.held_for_line_fills;
    held.fetch_add(1, Ordering::Relaxed);
    while device.aicpu_os().launch_line_fills() < lines {
        if deadline.is_expired() {
            tracing::warn!(lines, "the cache model never filled the lines a core start waits for");
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    held.fetch_sub(1, Ordering::Relaxed);
}

fn catch(f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err("entry panicked".into()))
}

fn spawn(
    name: String,
    f: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, DeviceError> {
    std::thread::Builder::new()
        .name(name)
        .stack_size(256 << 10)
        .spawn(f)
        .map_err(|e| DeviceError::Resource(format!("spawning a chip thread: {e}")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_held_start_gives_up_after_sixty_seconds_of_cycles() {
        assert_eq!(super::line_fills_give_up_cycles(1_000_000), 60_000_000);
        assert_eq!(super::line_fills_give_up_cycles(u64::MAX), u64::MAX, "saturates");
    }
}
