//! The AICPU program's resident state and its three entries (init, register-callable, exec).
//!
//! [`AicpuProgram`] is what the AICPU shared object keeps across runs: the latched `InitArgs`, the callable table
//! (orchestration function per callable id), and the rendezvous of the current run's threads.
//! The exported C entries of the AICPU program (`device/` cdylib, owned by the loader work) are
//! thin wrappers over these methods, with a `DeviceOps` bridged from the services table.
use super::ops::DeviceOps;
use super::orch::{load_host_graph, DeviceOrchestrator};
use super::sched::{lock, scheduler, RunState};
use super::task::OrchFn;
use crate::device::image::{VARIANT_DEVICE_ORCH, VARIANT_HOST_GRAPH};
use crate::error::DeviceFault;
use ferry_abi::launch::{InitArgs, KernelArgs, RegisterCallableArgs, MAX_CALLABLES};
use std::sync::{Arc, Mutex};

/// Why a callable could not be registered on the device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The callable id is outside `0..MAX_CALLABLES`.
    #[error("callable id {id} is outside 0..64")]
    BadId {
        /// The raw id.
        id: i32,
    },
    /// The orchestration function name is unreadable or unknown.
    #[error("orchestration function `{name}` was not found")]
    UnknownFunction {
        /// The name.
        name: String,
    },
}

#[derive(Clone, Copy)]
struct Registered {
    orch: OrchFn,
}

type Current = Option<(u64, u64, Arc<RunState>)>;

/// The AICPU program's resident state.
pub struct AicpuProgram {
    init: Mutex<Option<InitArgs>>,
    callables: Mutex<Vec<Option<Registered>>>,
    current: Mutex<Current>,
    dfx: Mutex<Option<Arc<super::dfx::DfxDevice>>>,
}

impl std::fmt::Debug for AicpuProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AicpuProgram").field("init", &*lock(&self.init)).finish()
    }
}

impl Default for AicpuProgram {
    fn default() -> Self {
        Self::new()
    }
}

impl AicpuProgram {
    /// A program with nothing registered.
    pub fn new() -> AicpuProgram {
        AicpuProgram {
            init: Mutex::new(None),
            callables: Mutex::new(vec![None; MAX_CALLABLES as usize]),
            current: Mutex::new(None),
            dfx: Mutex::new(None),
        }
    }

    /// Init entry: latches the per-device invariants (once per device).
    pub fn init(&self, args: &InitArgs) {
        *lock(&self.init) = Some(*args);
    }

    /// Attaches (or, with `None`, detaches) DFX collection for the runs that start from now on.
    /// The first AICPU thread of a run copies the collection's bits into the run block
    /// (`RunBlock::dfx_flags`, per-run suffix), where the cores read them once their window opens.
    pub fn attach_dfx(&self, dfx: Option<Arc<super::dfx::DfxDevice>>) {
        *lock(&self.dfx) = dfx;
    }

    /// The latched init arguments.
    pub fn init_args(&self) -> Option<InitArgs> {
        *lock(&self.init)
    }

    /// Register-callable entry: binds callable `args.active_callable_id` to the orchestration
    /// function named `args.device_orch_func_name`, found through `resolve`. Today `resolve` is
    /// the host's table of orchestration functions; with the loader it becomes a symbol lookup in
    /// the orchestration shared object at `args.dev_orch_so_addr`.
    ///
    /// # Errors
    /// [`RegisterError`] for a bad id or an unknown function.
    pub fn register_callable(
        &self,
        args: &RegisterCallableArgs,
        resolve: &dyn Fn(&str) -> Option<OrchFn>,
    ) -> Result<(), RegisterError> {
        let id = args.callable_id().ok_or(RegisterError::BadId { id: args.active_callable_id })?;
        let name = args.device_orch_func_name().unwrap_or("");
        let orch =
            resolve(name).ok_or_else(|| RegisterError::UnknownFunction { name: name.into() })?;
        lock(&self.callables)[id as usize] = Some(Registered { orch });
        Ok(())
    }

    /// Forgets callable `id`.
    pub fn unregister_callable(&self, id: u32) {
        if let Some(s) = lock(&self.callables).get_mut(id as usize) {
            *s = None;
        }
    }

    fn join(
        &self,
        ops: &dyn DeviceOps,
        args: &KernelArgs,
        threads: u32,
        clock: Option<&Arc<dyn ferry_dfx::clock::CycleClock>>,
    ) -> Result<Arc<RunState>, String> {
        let image = args.runtime_args;
        let hdr = super::sched::read_header(ops, image).map_err(|e| e.to_string())?;
        let epoch = super::sched::read_run_epoch(ops, image, &hdr).map_err(|e| e.to_string())?;
        let mut cur = lock(&self.current);
        if let Some((a, e, run)) = &*cur {
            if *a == image && *e == epoch {
                return Ok(run.clone());
            }
        }
        // A collection the host attached in process wins; otherwise the launch's profiling
        // bases name the regions in device memory (the full path), attached once per run.
        let dfx = match lock(&self.dfx).clone() {
            Some(d) => Some(d),
            None if args.enable_profiling_flag != 0 => {
                let clock = clock.cloned().unwrap_or_else(|| {
                    Arc::new(ferry_dfx::clock::SteadyClock::new(ops.clock_hz()))
                });
                super::dfx::DfxDevice::from_kernel_args(ops, args, threads, clock)
                    .map_err(|e| format!("dfx: {e}"))?
                    .map(Arc::new)
            }
            None => None,
        };
        let flags = dfx.as_ref().map_or(0, |d| d.flags());
        let run =
            Arc::new(RunState::new(ops, image, threads).map_err(|e| e.to_string())?.with_dfx(dfx));
        if flags != 0 {
            let off = run.hdr.run_off as usize + crate::device::image::RUN_BLOCK_DFX_FLAGS;
            // Relaxed: published to the other AICPU threads by the `current` mutex they take in
            // `join`, and by each scheduler's window-opening register write (Release) to its
            // cores, which read the flags after observing it.
            run.image.u32_at(off).store(flags, std::sync::atomic::Ordering::Relaxed);
        }
        *cur = Some((image, epoch, run.clone()));
        Ok(run)
    }

    /// Exec entry, called once on each of the launch's `threads` AICPU threads with the
    /// front-less `KernelArgs` by value. Thread `threads − 1` orchestrates (runs the callable's
    /// orchestration function, or loads the host-built graph); threads `0..threads − 1` schedule.
    /// The last thread out writes the run's result into the image.
    ///
    /// # Errors
    /// Only when the image cannot be used at all (no result can be written): the message says
    /// why. Every other failure is reported through the image's result.
    pub fn exec(
        &self,
        ops: &dyn DeviceOps,
        args: &KernelArgs,
        thread: u32,
        threads: u32,
    ) -> Result<(), String> {
        let table = &self.callables;
        let orch = |o: &mut DeviceOrchestrator<'_>, id: u32| -> Result<(), DeviceFault> {
            let reg = lock(table).get(id as usize).copied().flatten();
            let r = reg.ok_or(DeviceFault::NoCallable { id })?;
            (r.orch)(o).map_err(DeviceFault::Submit)
        };
        self.exec_with(ops, args, thread, threads, &orch)
    }

    /// [`exec`](Self::exec) with the orchestration supplied by the caller: `orch(orchestrator,
    /// callable_id)` runs the callable's graph on the orchestrator thread (device-orchestrated
    /// runs only). This is how an AICPU program plugs in orchestration objects it loaded itself
    /// (see [`crate::device::ffi::exec_hook`]).
    ///
    /// # Errors
    /// As [`exec`](Self::exec).
    pub fn exec_with(
        &self,
        ops: &dyn DeviceOps,
        args: &KernelArgs,
        thread: u32,
        threads: u32,
        orch: &dyn Fn(&mut DeviceOrchestrator<'_>, u32) -> Result<(), DeviceFault>,
    ) -> Result<(), String> {
        self.exec_with_clock(ops, args, thread, threads, orch, None)
    }

    /// [`exec_with`](Self::exec_with), with the device clock DFX gate budgets are measured on
    /// when the run's DFX comes from the profiling bases of `args` (`None`: a steady clock at
    /// `ops.clock_hz()`).
    ///
    /// # Errors
    /// As [`exec`](Self::exec); also when the profiling bases do not name usable DFX regions.
    pub fn exec_with_clock(
        &self,
        ops: &dyn DeviceOps,
        args: &KernelArgs,
        thread: u32,
        threads: u32,
        orch: &dyn Fn(&mut DeviceOrchestrator<'_>, u32) -> Result<(), DeviceFault>,
        clock: Option<&Arc<dyn ferry_dfx::clock::CycleClock>>,
    ) -> Result<(), String> {
        let run = self.join(ops, args, threads, clock)?;
        if threads < 2 {
            run.fail(ops, DeviceFault::BadImage { magic: run.hdr.magic, version: run.hdr.version });
            run.orchestration_done(ops);
        } else if thread == threads - 1 {
            Self::orchestrate(ops, &run, orch);
        } else {
            scheduler(ops, &run, thread, threads - 1);
        }
        if run.leave() {
            let mut cur = lock(&self.current);
            if cur.as_ref().is_some_and(|(_, e, _)| *e == run.epoch) {
                *cur = None;
            }
        }
        Ok(())
    }

    fn orchestrate(
        ops: &dyn DeviceOps,
        run: &RunState,
        orch: &dyn Fn(&mut DeviceOrchestrator<'_>, u32) -> Result<(), DeviceFault>,
    ) {
        let result = match run.hdr.variant {
            VARIANT_DEVICE_ORCH => {
                let mut o = DeviceOrchestrator::new(ops, run);
                o.attach_dfx(run.dfx_thread(run.hdr.aicpu_thread_num.saturating_sub(1), &[]));
                let id = run.hdr.callable_id;
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| orch(&mut o, id)))
                    .unwrap_or(Err(DeviceFault::OrchestrationPanicked))
            }
            VARIANT_HOST_GRAPH => {
                let mut dfx = run.dfx_thread(run.hdr.aicpu_thread_num.saturating_sub(1), &[]);
                let r = load_host_graph(ops, run, dfx.as_mut()).map_err(DeviceFault::Submit);
                if let Some(d) = dfx {
                    d.finish();
                }
                r
            }
            _ => Err(DeviceFault::BadImage { magic: run.hdr.magic, version: run.hdr.version }),
        };
        if let Err(f) = result {
            // An orchestration that stopped because the run already failed keeps the first
            // fault.
            run.fail(ops, f);
        }
        run.orchestration_done(ops);
    }
}
