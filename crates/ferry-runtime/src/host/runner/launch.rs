//! Launch, wait and finalize of a prepared run.
//!
//! Above the backend seam: the cores are started through `ferry_backend::AicoreLauncher`,
//! their windows reset and reaped through `CoreRegisters`, the run read back through
//! `BackendDevice`; the in-process path's launch is the device's own
//! (`RunnerDevice::launch_in_process`, the simulated chip's in `host::sim_backend`).
use super::{DeviceRunner, LaunchedRun, PreparedRun, RunnerDevice};
use crate::device::aicore::aicore_execute;
use crate::device::image::{from_bytes, RunResult, RESULT_FAILED, RESULT_OK};
use crate::device::kernels::KERNELS;
use crate::device::ops::DeviceOps;
use crate::error::{error_chain, DeviceFault, KernelFault, LaunchFailure, RunError};
use crate::host::slots::{
    lock, reap, reset_windows, DirectCompletion, Executing, Sides, Signals, AICORE, AICPU,
};
use crate::host::{KernelRegistry, RunOutput, RunStats};
use ferry_abi::launch::{AicoreLaunchArgs, KernelArgs};
use ferry_backend::{BackendDevice, CoreLaunch, CustomKernelTable, EventOf};
use ferry_launch::EntryKernels;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The runtime's AICore executor as one core's body (`ferry_backend::AicoreLauncher`'s
/// host form): core `index` executes the run whose `AicoreLaunchArgs` are `args`, calling
/// loaded kernels through `kernels`; a fault is the core's failure message.
pub(in crate::host) fn aicore_body<K: CustomKernelTable>(
    ops: Arc<dyn DeviceOps>,
    kernels: Arc<KernelRegistry<K>>,
    args: AicoreLaunchArgs,
) -> impl Fn(u32) -> Result<(), String> + Send + Sync + 'static {
    move |index| {
        crate::host::crash::on_core_thread();
        aicore_execute(&*ops, &args, index, index, Some(&*kernels)).map_err(|e| e.to_string())
    }
}

/// Reads `out.len()` bytes of a run at `src` back from the runner's device.
fn read_back<D: BackendDevice>(
    device: &D,
    src: ferry_backend::DevicePtr,
    out: &mut [u8],
) -> Result<(), RunError> {
    BackendDevice::copy_dtoh(device, src, out).map_err(RunError::Readback)
}

impl<P: RunnerDevice> DeviceRunner<P> {
    /// Launches a prepared run: the register windows are reset, the AICore entry starts on
    /// every core, then the AICPU exec entry on every AICPU thread (AICore first, as the
    /// original).
    ///
    /// On the full path nothing here waits for the device: the run's publication and both
    /// entries are queued on the runner's stream pair behind the completion boundaries of the
    /// run launched before it, which may still be executing, and the register reset is the
    /// first thing its AICore entry does on the device. The chip starts the run as soon as
    /// the one ahead of it completed. In process, the run still executing is waited for and
    /// retired first, and the host resets the windows.
    ///
    /// # Errors
    /// A launch failure; the run is released and the runner stays usable.
    pub fn launch(&mut self, p: PreparedRun<P>) -> Result<LaunchedRun<P>, RunError> {
        if let Some(f) = self.hung {
            return Err(RunError::Hung(f));
        }
        let cores = self.cfg.aic + self.cfg.aiv;
        if self.full.is_some() {
            return self.launch_full(p, cores, None);
        }
        // One run at a time on the chip: the one still executing finishes and retires from its
        // slot before the register windows are reset for this one.
        self.retire_executing()?;
        let in_process = self.in_process();
        reset_windows(&self.chip, cores);
        let (aicore, aicpu) = self.chip.launch_in_process(
            &in_process.ops,
            (cores, self.cfg.aicpu_threads),
            &self.device_ops,
            &self.kernels,
            &in_process.program,
            p.kargs,
        )?;
        let sides = Sides::Direct { aicore, aicpu };
        self.executing = Some(Executing { slot: p.slot, sides: sides.clone(), run: None });
        Ok(LaunchedRun {
            slot: p.slot,
            run_id: None,
            prepared: Some(p),
            sides,
            started: Instant::now(),
            chip: self.chip.clone(),
            finished: None,
            stream_error: None,
            inherited: false,
            hung: false,
            device: None,
            scheduler: None,
        })
    }

    /// Launches a prepared run ordered after `dependency`, an event the caller recorded on its
    /// own stream (for example after a copy-engine gather that fills the run's input): the
    /// AICPU stream waits for it, and the entry fork orders the AICore stream after it too, so
    /// the run starts when the caller's work is done without the host waiting for it. The
    /// caller's stream stays the caller's. Full path only.
    ///
    /// # Errors
    /// [`RunError::DependencyNeedsStreams`] in process (its launch cannot wait on a stream event); as
    /// [`launch`](Self::launch) otherwise.
    pub fn launch_after(
        &mut self,
        p: PreparedRun<P>,
        dependency: &EventOf<P::Device>,
    ) -> Result<LaunchedRun<P>, RunError> {
        if self.full.is_none() {
            return Err(RunError::DependencyNeedsStreams);
        }
        let cores = self.cfg.aic + self.cfg.aiv;
        self.launch_full(p, cores, Some(dependency))
    }

    /// The full path's launch: `queue_run_entry` orders the caller dependency (if any) onto the
    /// AICPU stream and publishes: the run is queued behind the previous run's completion
    /// boundaries, the descriptor (and any staged metadata) is copied on the AICPU stream and
    /// the AICore stream forked after it; `launch` then submits the AICore entry (the register
    /// windows reset, then every core runs the runtime's AICore executor over the OS services
    /// table with `AicoreLaunchArgs` by value) and the AICPU entry (the loaded program's exec on
    /// every AICPU thread with the front-less `KernelArgs` by value), and records the run's two
    /// completion boundaries.
    fn launch_full(
        &mut self,
        p: PreparedRun<P>,
        cores: u32,
        dependency: Option<&EventOf<P::Device>>,
    ) -> Result<LaunchedRun<P>, RunError> {
        let Some(full) = self.full.as_mut() else { unreachable!("called on the full path") };
        let aicpu_entry = full.program(p.variant)?.aicpu_entry(self.cfg.aicpu_threads);
        let signals = Arc::new(Signals::default());
        let (chip, ops, sig) = (self.chip.clone(), self.device_ops.clone(), signals.clone());
        let kernels = self.kernels.clone();
        let aicore = move |_: &P::Device, args: AicoreLaunchArgs| {
            // In stream order, after the run ahead of this one completed (its entries returned)
            // and before this run's cores start: no core reads the previous run's EXIT.
            reset_windows(&chip, cores);
            let launched =
                chip.launch_cores(cores, aicore_body(ops.clone(), kernels.clone(), args));
            // The stream gets the message, as a driver's stream error; the run keeps the
            // typed error.
            let r = match launched {
                Ok(c) => {
                    sig.set_cores_started();
                    CoreLaunch::wait(&c).map_err(LaunchFailure::Stream)
                }
                Err(e) => {
                    let failure = LaunchFailure::CoresNotStarted(e);
                    *lock(&sig.cores_not_started) = Some(failure.clone());
                    sig.set_cores_started();
                    Err(failure)
                }
            };
            sig.set(AICORE, r.clone());
            r.map_err(|e| error_chain(&e))
        };
        let (chip, sig, timeout) = (self.chip.clone(), signals.clone(), self.cfg.timeout);
        let aicpu = move |d: &P::Device, args: KernelArgs| {
            let r = aicpu_entry(d, args).map_err(LaunchFailure::from);
            if r.is_err() {
                // The exec entry refused the run before its schedulers could shut the cores
                // down: release them, once the AICore entry reset their windows and started
                // them (it runs on the other stream; the bound is a hang guard).
                sig.wait_cores_started(timeout);
                reap(&chip);
            }
            sig.set(AICPU, r.clone());
            r.map_err(|e| error_chain(&e))
        };
        let staging = &mut full.slots[p.slot];
        let published = staging.queue_run_entry(&full.streams, dependency);
        // The a5 host-built graph's scheduler diagnostics go through the transaction's
        // `scheduler_diagnostics`, which needs this run's successful publication: a failed
        // metadata copy can never label a previous run's scheduler records as this run's.
        let mut scheduler = None;
        // Whether this run's AICore entry was queued without its AICPU entry.
        let mut cores_orphaned = false;
        let launched = published
            .map_err(RunError::from)
            .and_then(|_| {
                if p.scheduler_metadata {
                    scheduler = Some(staging.scheduler_diagnostics()?);
                }
                Ok(())
            })
            .and_then(|_| {
                staging.launch(&full.streams, EntryKernels::new(aicore, aicpu)).map_err(|e| {
                    cores_orphaned = matches!(
                        e,
                        ferry_launch::transaction::LaunchError::Submit {
                            progress: ferry_launch::transaction::LaunchProgress::Partial,
                            ..
                        }
                    );
                    RunError::from(e)
                })
            });
        if let Err(e) = launched {
            // The runs queued ahead of this one keep running. If this run's AICore entry was
            // queued without its AICPU entry, its cores will wait for a window that never
            // opens: release them once the entry has reset and started them (it runs after the
            // runs ahead; the bound is a hang guard). Then retire what reached the streams and
            // leave the slot ready.
            if cores_orphaned {
                signals.wait_cores_started(self.cfg.timeout);
                reap(&self.chip);
            }
            if let Err(settle) = full.settle_slot(p.slot, self.cfg.timeout) {
                tracing::warn!(%settle, "retiring a failed launch");
            }
            return Err(e);
        }
        let run_id = full.slots[p.slot].run();
        Ok(LaunchedRun {
            slot: p.slot,
            run_id,
            prepared: Some(p),
            sides: Sides::Streams(signals),
            started: Instant::now(),
            chip: self.chip.clone(),
            finished: None,
            stream_error: None,
            inherited: false,
            hung: false,
            device: None,
            scheduler,
        })
    }

    /// Whether the run has finished (both launches returned).
    pub fn poll(&self, run: &LaunchedRun<P>) -> bool {
        run.sides.is_done(AICPU) && run.sides.is_done(AICORE)
    }

    /// Live progress of a launched run: `(tasks completed, tasks submitted)`.
    ///
    /// # Errors
    /// A device read failure.
    pub fn progress(&self, run: &LaunchedRun<P>) -> Result<(u64, u64), RunError> {
        let Some(p) = &run.prepared else { return Ok((0, 0)) };
        let mut b = [0u8; 16];
        read_back(&self.device, p.image.add(p.result_off + 8), &mut b)?;
        let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        Ok((w(0), w(8)))
    }

    /// Waits up to `timeout` for the run to finish; `Ok(false)` when it is still running. The
    /// run's wall time is taken when it finishes, not when this returns.
    ///
    /// # Errors
    /// [`RunError::Timeout`] when the AICPU side finished but the cores could not be reaped.
    pub fn wait_timeout(
        &mut self,
        run: &mut LaunchedRun<P>,
        timeout: Duration,
    ) -> Result<bool, RunError> {
        if run.finished.is_some() {
            return Ok(true);
        }
        if !run.sides.wait(AICPU, timeout) {
            return Ok(false);
        }
        self.wait(run).map(|_| true)
    }

    /// Waits for the run to finish (up to the configured timeout, then reaps the cores).
    ///
    /// # Errors
    /// [`RunError::Timeout`] when the device did not finish in time.
    pub fn wait(&mut self, run: &mut LaunchedRun<P>) -> Result<Duration, RunError> {
        if run.hung {
            return Ok(run.finished.unwrap_or_default());
        }
        if run.finished.is_none() && run.sides.wait(AICPU, self.cfg.timeout) {
            if let Some(f) = self.hung_core(run)? {
                // The AICPU side ended the run because a kernel outran its budget: that core's
                // launch never completes. The run is over; the runner is hung.
                let wall = run.started.elapsed();
                run.finished = Some(wall);
                run.hung = true;
                self.hung.get_or_insert(f);
                return Ok(wall);
            }
        }
        if !run.settle(self.cfg.timeout) {
            return Err(RunError::Timeout { ms: self.cfg.timeout.as_millis() as u64 });
        }
        if self.executing.as_ref().is_some_and(|e| e.slot == run.slot && e.run == run.run_id) {
            self.executing = None;
        }
        if let (Some(full), Sides::Streams(s)) = (&mut self.full, &run.sides) {
            // Both entries returned: the run's two completion boundaries retire it from the
            // launch slot (`finish_run`), proving its publication was consumed; the runs queued
            // after it keep running.
            if run.run_id.is_some() && full.slots[run.slot].execution_owner() == run.run_id {
                if let Some(retired) = full.settle_slot(run.slot, self.cfg.timeout)? {
                    if let Some(e) = retired.run_error {
                        run.stream_error.get_or_insert(e);
                    }
                    run.inherited |= retired.inherited;
                    let hz = self.clock_hz;
                    run.device = retired.span_cycles.map(|(start_cycles, end_cycles)| {
                        crate::host::DeviceSpan { start_cycles, end_cycles, hz }
                    });
                }
            } else if let Some(e) = lock(&s.stream_error).take() {
                run.stream_error.get_or_insert(e);
            }
        }
        Ok(run.finished.unwrap_or_default())
    }

    /// The fault of `run` when its AICPU side ended it because a kernel outran its budget
    /// ([`KernelFault::Hung`](crate::KernelFault::Hung)): read from its result in device memory.
    ///
    /// # Errors
    /// A device read failure.
    fn hung_core(&self, run: &LaunchedRun<P>) -> Result<Option<DeviceFault>, RunError> {
        let Some(p) = &run.prepared else { return Ok(None) };
        let mut rb = vec![0u8; std::mem::size_of::<RunResult>()];
        read_back(&self.device, p.image.add(p.result_off), &mut rb)?;
        let r: RunResult = from_bytes(&rb).unwrap_or_default();
        if r.status != RESULT_FAILED {
            return Ok(None);
        }
        Ok(DeviceFault::decode(r.error_code, r.error_task, r.error_detail)
            .filter(|f| matches!(f, DeviceFault::Kernel { fault: KernelFault::Hung { .. }, .. })))
    }

    /// Finishes a run: waits for it, reads its result, copies the runner-owned tensors back and
    /// frees everything. The runner is ready for the next run whatever the outcome.
    ///
    /// # Errors
    /// The run's failure ([`RunError::Fault`] with the device's typed fault), a timeout, or a
    /// device error.
    pub fn finalize_run(&mut self, mut run: LaunchedRun<P>) -> Result<RunOutput, RunError> {
        let waited = self.wait(&mut run);
        // A run whose threads never finished keeps its memory and its claim on the runner
        // (LaunchedRun<P>'s drop); everything else is released when `run` drops below.
        let wall = match waited {
            Ok(w) => w,
            Err(e) => {
                // Only a run whose device threads never finished may still touch its memory:
                // keep that (and the claim on the runner) for the rest of the process, and do not
                // wait again on drop. A run that finished but whose retirement from the launch
                // slot failed is over on the device: it drops (frees) below like any other.
                if run.finished.is_none() {
                    if let Some(p) = run.prepared.take() {
                        std::mem::forget(p);
                    }
                    run.finished = Some(Duration::ZERO);
                }
                return Err(e);
            }
        };
        let p = run.prepared.take().ok_or(RunError::Busy)?;
        if run.hung {
            // The hung kernel may still touch the run's memory: keep it (and its slot) for the
            // rest of the process.
            std::mem::forget(p);
            let f = self.hung.ok_or(RunError::Busy)?;
            return Err(RunError::Fault(f));
        }
        if run.inherited {
            // A run ahead of this one failed and its failure was on the streams when this run's
            // work ran: whatever this run's result says, it is not trusted.
            return Err(RunError::AfterFailedRun(run.stream_error.take()));
        }
        if let Sides::Streams(s) = &run.sides {
            // The AICPU side then failed its handshake with cores that never started: report
            // the cause, not the symptom.
            if let Some(failure) = lock(&s.cores_not_started).take() {
                return Err(failure.into());
            }
        }
        let mut rb = vec![0u8; std::mem::size_of::<RunResult>()];
        read_back(&self.device, p.image.add(p.result_off), &mut rb)?;
        let r: RunResult = from_bytes(&rb).unwrap_or_default();
        self.last_handshake =
            p.handshake.read(&self.device, p.image).map_err(RunError::Readback)?;
        if r.status != RESULT_FAILED {
            match &run.sides {
                Sides::Direct { aicpu, .. } => aicpu.finished()?,
                Sides::Streams(_) => {
                    let stream = || run.stream_error.take().map(LaunchFailure::Stream);
                    if let Some(e) = run.sides.aicpu_error().or_else(stream) {
                        return Err(e.into());
                    }
                }
            }
        }
        match r.status {
            RESULT_OK => {}
            RESULT_FAILED => {
                return Err(match DeviceFault::decode(r.error_code, r.error_task, r.error_detail) {
                    Some(DeviceFault::HandshakeTimeout { waited_ms, .. }) => {
                        let stale =
                            self.last_handshake.iter().filter(|c| c.is_stale()).copied().collect();
                        RunError::HandshakeTimeout { waited_ms, stale }
                    }
                    Some(f @ DeviceFault::Submit(_)) => match &p.function {
                        Some((library, function)) => RunError::Orchestration {
                            library: library.clone(),
                            function: function.clone(),
                            fault: f,
                        },
                        None => RunError::Fault(f),
                    },
                    Some(f) => RunError::Fault(f),
                    None => RunError::BadResult { status: r.status, code: r.error_code },
                })
            }
            s => return Err(RunError::BadResult { status: s, code: r.error_code }),
        }
        let mut outs = Vec::with_capacity(p.tensors.len());
        for &(ptr, bytes, owned) in &p.tensors {
            if !owned {
                outs.push(None);
                continue;
            }
            let mut b = vec![0u8; bytes as usize];
            read_back(&self.device, ptr, &mut b)?;
            outs.push(Some(
                b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            ));
        }
        let mut per_kernel: Vec<(String, u64)> = KERNELS
            .iter()
            .zip(r.kernel_counts)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (k.name.to_string(), n))
            .collect();
        let (off, n) = p.custom_counts;
        if n > 0 {
            let mut b = vec![0u8; n as usize * 8];
            read_back(&self.device, p.image.add(off), &mut b)?;
            for (i, c) in b.chunks_exact(8).enumerate() {
                let count = u64::from_le_bytes(c.try_into().unwrap_or_default());
                let id = ferry_abi::kernel_lib::CUSTOM_KERNEL_BASE + i as u32;
                if let (true, Some(k)) = (count > 0, self.kernels().info(id)) {
                    per_kernel.push((k.name, count));
                }
            }
        }
        Ok(RunOutput {
            scheduler: run.scheduler.take(),
            tensors: outs,
            stats: RunStats {
                tasks: r.tasks_completed,
                per_kernel,
                wall,
                variant: p.variant,
                device: run.device,
            },
        })
    }
}
