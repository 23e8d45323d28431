//! Launch slots: the runner's pipeline of prepared and executing runs (docs/design/launch.md).
//!
//! A runner has `RunnerConfig::launch_slots` slots. Each prepared or launched run holds one
//! ([`Claim`]); on the full path each slot has its own [`LaunchStaging`] (pinned source, device
//! destination, cached launch-route prefix). So run k+1 is prepared (tensors uploaded, the
//! host-built graph built and uploaded in its per-run suffix) while run k executes, and slot
//! reservation keeps run k's bytes intact until it retires: nothing of run k+1 is written to
//! run k's slot. The chip runs one run at a time, in stream order on the runner's one stream
//! pair: run k+1's publication and launch are queued behind run k's completion boundaries
//! while run k executes, so the chip starts run k+1 without a round trip through the host.
//! (In process, a launch first settles and retires the run still executing, [`Executing`].)
use super::runner::Variant;
use crate::error::LaunchFailure;
use ferry_abi::regs::{RegLayout, AICORE_EXIT_SIGNAL};
use ferry_backend::{BackendError, CoreRegisters, ProgramDevice};
use ferry_launch::loader::{LoadedAicpuProgram as LoadedProgram, Loader};
use ferry_launch::transaction::{Retired, RunId, StagingStats};
use ferry_launch::{LaunchStaging, RunStreams, TransactionState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The runner's slots: which are held by a prepared or launched run.
#[derive(Debug)]
pub(super) struct SlotPool {
    held: Vec<Arc<AtomicBool>>,
    next: usize,
}

impl SlotPool {
    /// `n` free slots.
    pub(super) fn new(n: usize) -> SlotPool {
        SlotPool { held: (0..n).map(|_| Arc::new(AtomicBool::new(false))).collect(), next: 0 }
    }

    /// Claims the next free slot, round robin (so an identical graph finds its prefix resident
    /// on every slot once each slot has published it); `None` when every slot is held.
    pub(super) fn take(&mut self) -> Option<(usize, Claim)> {
        let (n, next) = (self.held.len(), self.next);
        (0..n).map(|i| (next + i) % n).find_map(|slot| {
            // Acquire: pairs with the Release store in `Claim::drop`.
            if self.held[slot].load(Ordering::Acquire) {
                return None;
            }
            self.next = (slot + 1) % n;
            Some((slot, Claim::take(&self.held[slot])))
        })
    }

    /// Whether any slot is held.
    pub(super) fn is_busy(&self) -> bool {
        // Acquire: pairs with the Release store in `Claim::drop`.
        self.held.iter().any(|h| h.load(Ordering::Acquire))
    }
}

/// The run the chip is executing (or last executed and nobody has retired yet).
pub(super) struct Executing<C> {
    /// Its slot.
    pub(super) slot: usize,
    /// Its two sides.
    pub(super) sides: Sides<C>,
    /// Its run in the slot's launch transaction (full path).
    pub(super) run: Option<RunId>,
}

/// A run's hold on its runner: the runner accepts another `prepare` only once the holder (a
/// prepared or launched run) is dropped.
#[derive(Debug)]
pub(super) struct Claim(Arc<AtomicBool>);

impl Claim {
    pub(super) fn take(flag: &Arc<AtomicBool>) -> Claim {
        // Relaxed: the runner is `&mut` here, so no other thread races for the flag; it only
        // has to be seen by the run's own drop (same Arc) and by later calls on this thread.
        flag.store(true, Ordering::Relaxed);
        Claim(flag.clone())
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Release: pairs with the Acquire loads in `SlotPool::take` and `SlotPool::is_busy`, so a
        // runner that sees a slot free also sees the run's memory released (dropped before the
        // claim).
        self.0.store(false, Ordering::Release);
    }
}

/// Completion of one side (AICore or AICPU) of a run launched through the launch transaction:
/// set by the entry body when the stream runs it to its end.
#[derive(Default)]
pub(super) struct Signals {
    done: Mutex<[Option<Result<(), LaunchFailure>>; 2]>,
    cv: Condvar,
    /// Why the AICore entry could not start the cores, if it could not
    /// ([`LaunchFailure::CoresNotStarted`]): the root cause of a run whose AICPU side then
    /// reports that no core answered its handshake.
    pub(super) cores_not_started: Mutex<Option<LaunchFailure>>,
    /// What the run's streams reported when its launch slot retired it, when that happened
    /// before the run's own `wait`.
    pub(super) stream_error: Mutex<Option<BackendError>>,
    /// The AICore entry has tried to start the cores (after resetting their register
    /// windows): from now on an EXIT written into the windows reaches this run's cores.
    cores_started: Mutex<bool>,
}

pub(super) const AICORE: usize = 0;
pub(super) const AICPU: usize = 1;

impl Signals {
    pub(super) fn set(&self, side: usize, r: Result<(), LaunchFailure>) {
        lock(&self.done)[side] = Some(r);
        self.cv.notify_all();
    }

    /// Marks that the AICore entry tried to start the cores.
    pub(super) fn set_cores_started(&self) {
        *lock(&self.cores_started) = true;
        // The condvar is shared with `done`: wake waiters of either.
        let _g = lock(&self.done);
        self.cv.notify_all();
    }

    /// Waits up to `timeout` until the AICore entry tried to start the cores; whether it did.
    pub(super) fn wait_cores_started(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut g = lock(&self.done);
        loop {
            if *lock(&self.cores_started) {
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            g = self.cv.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    fn get(&self, side: usize) -> Option<Result<(), LaunchFailure>> {
        lock(&self.done)[side].clone()
    }

    /// Waits (parked on the condvar) up to `timeout` for `side`; whether it is done.
    fn wait(&self, side: usize, timeout: Duration) -> bool {
        let g = lock(&self.done);
        let (g, _) = self
            .cv
            .wait_timeout_while(g, timeout, |d| d[side].is_none())
            .unwrap_or_else(|p| p.into_inner());
        g[side].is_some()
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The completion of one side of a run the runner started directly on the cores (the
/// in-process path, `RunnerDevice::Completion`): the simulated chip's launch completion
/// (`host::sim_backend`).
pub trait DirectCompletion: Clone {
    /// Whether every launched thread returned.
    fn is_done(&self) -> bool;

    /// Waits up to `timeout` for every launched thread; whether they all returned (a failed
    /// thread has returned too).
    fn wait_done(&self, timeout: Duration) -> bool;

    /// The side's own failure, once it is done: the first launched thread's error.
    ///
    /// # Errors
    /// That error, or a timeout when a thread is still running.
    fn finished(&self) -> Result<(), crate::error::RunError>;
}

/// The two sides of a launched run (cheap handles: the runner keeps one of the executing run).
#[derive(Clone)]
pub(super) enum Sides<C> {
    /// Started directly on the chip (in-process path).
    Direct { aicore: C, aicpu: C },
    /// Submitted through the launch transaction (full path).
    Streams(Arc<Signals>),
}

impl<C: DirectCompletion> Sides<C> {
    pub(super) fn is_done(&self, side: usize) -> bool {
        match self {
            Sides::Direct { aicore, aicpu } => [aicore, aicpu][side].is_done(),
            Sides::Streams(s) => s.get(side).is_some(),
        }
    }

    /// Waits up to `timeout`; whether the side is done.
    pub(super) fn wait(&self, side: usize, timeout: Duration) -> bool {
        match self {
            Sides::Direct { aicore, aicpu } => [aicore, aicpu][side].wait_done(timeout),
            Sides::Streams(s) => s.wait(side, timeout),
        }
    }

    /// Waits for both sides, reaping the cores if the AICPU side is done but a core never got
    /// its exit. `false` when the AICPU threads are still running after `timeout`.
    pub(super) fn settle<R: CoreRegisters>(&self, cores: &R, timeout: Duration) -> bool {
        if !self.wait(AICPU, timeout) {
            reap(cores);
            if !self.wait(AICPU, Duration::from_secs(2)) {
                return false;
            }
        }
        if !self.wait(AICORE, Duration::from_secs(1)) {
            reap(cores);
            if !self.wait(AICORE, Duration::from_secs(10)) {
                return false;
            }
        }
        true
    }

    /// The AICPU side's failure, if it failed (full path).
    pub(super) fn aicpu_error(&self) -> Option<LaunchFailure> {
        match self {
            Sides::Direct { .. } => None,
            Sides::Streams(s) => s.get(AICPU).and_then(Result::err),
        }
    }
}

/// Writes EXIT into every core's window (the host-side reset that reaps cores whose scheduler
/// did not shut them down).
pub(super) fn reap<R: CoreRegisters>(cores: &R) {
    let layout = RegLayout::of(cores.arch());
    for i in 0..cores.core_count() {
        cores.write_as_aicpu(i, layout.data_main_base as u32, AICORE_EXIT_SIGNAL);
    }
}

/// Resets the first `count` cores' register windows (`DATA_MAIN_BASE` and `COND`) for the
/// next run.
pub(super) fn reset_windows<R: CoreRegisters>(cores: &R, count: u32) {
    let layout = RegLayout::of(cores.arch());
    for i in 0..count {
        cores.write_as_aicpu(i, layout.data_main_base as u32, 0);
        cores.write_as_core(i, layout.cond as u32, 0);
    }
}

/// What the full path ([`LaunchPath::DeviceProgram`]) keeps per runner, on program device `P`.
pub(super) struct FullPath<P: ProgramDevice> {
    /// The loaded AICPU programs: device-orchestrated, host-built graph (loaded on first use).
    /// Declared before the loader: dropped first, then the loader's session.
    pub(super) programs: [Option<LoadedProgram<P>>; 2],
    pub(super) loader: Loader<P>,
    /// The AICPU programs to load ([`RunnerConfig::programs`](super::RunnerConfig::programs)).
    pub(super) images: super::AicpuPrograms,
    /// The runner's stream pair, shared by every slot: runs execute one after the other in
    /// stream order on the one chip.
    pub(super) streams: RunStreams<P::Device>,
    /// One launch staging helper per launch slot: its own pinned source and device
    /// destination, so a run prepared on one slot never writes bytes a live run of another
    /// slot reads.
    pub(super) slots: Vec<LaunchStaging<P::Device>>,
}

impl<P: ProgramDevice> FullPath<P> {
    pub(super) fn program(
        &mut self,
        variant: Variant,
    ) -> Result<&LoadedProgram<P>, ferry_launch::loader::LoadError> {
        let i = match variant {
            Variant::DeviceOrchestrated => 0,
            Variant::HostBuiltGraph => 1,
        };
        if self.programs[i].is_none() {
            self.programs[i] = Some(self.loader.load(self.images.of(variant))?);
        }
        Ok(self.programs[i].as_ref().expect("loaded above"))
    }

    /// Retires a run that still owns slot `slot`'s execution (how it retired, if one did) and
    /// drops an abandoned, unpublished view, so the slot takes a new preparation.
    pub(super) fn settle_slot(
        &mut self,
        slot: usize,
        timeout: Duration,
    ) -> Result<Option<Retired>, LaunchFailure> {
        let staging = &mut self.slots[slot];
        let mut retired = None;
        if staging.execution_owner().is_some() {
            retired = Some(staging.finish_run(timeout)?);
        }
        if matches!(staging.state(), TransactionState::Prepared | TransactionState::Partial) {
            staging.release_run_view();
        }
        Ok(retired)
    }

    /// Retires every slot and tears their staging down (normal retirement: frees the pinned
    /// sources and destinations). Stops at the first failure.
    pub(super) fn retire_all(&mut self, timeout: Duration) -> Result<(), LaunchFailure> {
        for slot in 0..self.slots.len() {
            self.settle_slot(slot, timeout)?;
            self.slots[slot].teardown()?;
        }
        Ok(())
    }

    /// The launch transaction's counters summed over the slots.
    pub(super) fn stats(&self) -> StagingStats {
        self.slots.iter().map(LaunchStaging::stats).fold(StagingStats::default(), |a, b| {
            StagingStats {
                publishes: a.publishes + b.publishes,
                bytes_copied: a.bytes_copied + b.bytes_copied,
                descriptor_copies: a.descriptor_copies + b.descriptor_copies,
                metadata_copies: a.metadata_copies + b.metadata_copies,
                unchanged_prefixes: a.unchanged_prefixes + b.unchanged_prefixes,
                forks: a.forks + b.forks,
                predecessor_waits: a.predecessor_waits + b.predecessor_waits,
                growths: a.growths + b.growths,
                suffix_uploads: a.suffix_uploads + b.suffix_uploads,
                suffix_bytes: a.suffix_bytes + b.suffix_bytes,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_abi::arch::Arch;

    /// Which side wrote.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Side {
        Aicpu,
        Core,
    }

    /// One register write: core, offset, value, side.
    type Write = (u32, u32, u32, Side);

    /// Register windows that record every write.
    #[derive(Clone, Debug, Default)]
    struct Recorded(Arc<Mutex<Vec<Write>>>);

    impl CoreRegisters for Recorded {
        fn arch(&self) -> Arch {
            Arch::A5
        }

        fn core_count(&self) -> u32 {
            3
        }

        fn reg_bases(&self) -> Vec<u64> {
            vec![0x1000, 0x2000, 0x3000]
        }

        fn write_as_aicpu(&self, core: u32, offset: u32, value: u32) {
            lock(&self.0).push((core, offset, value, Side::Aicpu));
        }

        fn write_as_core(&self, core: u32, offset: u32, value: u32) {
            lock(&self.0).push((core, offset, value, Side::Core));
        }
    }

    #[test]
    fn reaping_writes_the_exit_signal_into_every_cores_window_as_the_aicpu() {
        let r = Recorded::default();
        reap(&r);
        let main = RegLayout::of(Arch::A5).data_main_base as u32;
        let want: Vec<_> = (0..3).map(|c| (c, main, AICORE_EXIT_SIGNAL, Side::Aicpu)).collect();
        assert_eq!(*lock(&r.0), want);
    }

    #[test]
    fn reset_and_reap_reach_the_host_memory_backends_windows() {
        let c = ferry_backend::host::HostMemoryCores::new(Arch::A2a3, 3).unwrap();
        let l = RegLayout::of(Arch::A2a3);
        let (main, cond) = (l.data_main_base as u32, l.cond as u32);
        for i in 0..3 {
            c.write_as_aicpu(i, main, 7);
            c.write_as_core(i, cond, 9);
        }
        reset_windows(&c, 2);
        let regs = |c: &ferry_backend::host::HostMemoryCores| {
            (0..3).map(|i| (c.read(i, main), c.read(i, cond))).collect::<Vec<_>>()
        };
        assert_eq!(regs(&c), [(0, 0), (0, 0), (7, 9)], "the cores the run uses, and only those");
        reap(&c);
        let exit = AICORE_EXIT_SIGNAL;
        assert_eq!(regs(&c), [(exit, 0), (exit, 0), (exit, 9)], "every core's exit");
    }

    #[test]
    fn a_reset_clears_the_payload_and_the_condition_of_the_cores_a_run_uses() {
        let r = Recorded::default();
        reset_windows(&r, 2);
        let l = RegLayout::of(Arch::A5);
        let (main, cond) = (l.data_main_base as u32, l.cond as u32);
        let want: Vec<_> =
            (0..2).flat_map(|c| [(c, main, 0, Side::Aicpu), (c, cond, 0, Side::Core)]).collect();
        assert_eq!(*lock(&r.0), want);
    }
}
