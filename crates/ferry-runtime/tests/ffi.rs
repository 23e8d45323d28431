//! The task runtime as a device program runs it: the AICPU exec hook over the AICPU OS's
//! services table, orchestration through the `OrchApi` table an orchestration object gets.
use ferry_abi::launch::{AicoreLaunchArgs, InitArgs, MAX_CALLABLES};
use ferry_abi::services::{ExecContext, OrchContext, OrchEntryFn, STATUS_OK, STATUS_RUNTIME_BASE};
use ferry_runtime::device::aicore::aicore_execute;
use ferry_runtime::device::ffi::{exec_with_program, ApiOrchestrator};
use ferry_runtime::device::image::{from_bytes, RunResult, RESULT_FAILED, RESULT_OK};
use ferry_runtime::device::kernels::K_COPY;
use ferry_runtime::device::orchestrations;
use ferry_runtime::device::program::AicpuProgram;
use ferry_runtime::device::sched::read_header;
use ferry_runtime::device::task::{Orchestrate, Task, TensorId};
use ferry_runtime::examples::{storm, STORM_LANES, STORM_LANE_LEN};
use ferry_runtime::host::{DeviceRunner, RunArgs, RunnerConfig, TensorInit};
use ferry_runtime::{DeviceFault, SubmitError};
use ferry_sim::Arch;
use std::sync::Arc;

/// An orchestration object's entry running the storm through the table.
unsafe extern "C" fn storm_entry(ctx: *const OrchContext) -> i32 {
    // SAFETY: the exec hook passes a valid context whose table lives for the call.
    let Some(mut o) = (unsafe { ApiOrchestrator::from_context(&*ctx) }) else { return 1 };
    match orchestrations::storm(&mut o) {
        Ok(()) => STATUS_OK,
        Err(_) => STATUS_RUNTIME_BASE,
    }
}

/// An orchestration object's entry that submits a task with an unknown kernel id.
unsafe extern "C" fn bad_entry(ctx: *const OrchContext) -> i32 {
    // SAFETY: as above.
    let Some(mut o) = (unsafe { ApiOrchestrator::from_context(&*ctx) }) else { return 1 };
    let r = o.submit(&Task::new(K_COPY).input(TensorId(0)).output(TensorId(0)));
    assert!(r.is_ok());
    match o.submit(&Task::new(999).input(TensorId(0))) {
        Err(SubmitError::UnknownKernel { task: 1, kernel: 999 }) => STATUS_RUNTIME_BASE,
        _ => 0,
    }
}

/// Runs a prepared storm-shaped run through the exec hook; returns the result and the lanes.
fn run_through_hook(arch: Arch, n: u64, entry: OrchEntryFn) -> (RunResult, Vec<f32>) {
    // In process: the test plays the launcher (its image is on the device after prepare).
    let mut r = DeviceRunner::new(RunnerConfig::small(arch).in_process()).unwrap();
    let ex = storm(n);
    r.register_callable(0, ex.callable.clone()).unwrap();
    let bytes = STORM_LANES * STORM_LANE_LEN * 4;
    let lanes = r.device().malloc(bytes).unwrap();
    r.device().copy_htod(&vec![0u8; bytes as usize], lanes).unwrap();
    let args =
        RunArgs { tensors: vec![TensorInit::Device { addr: lanes, bytes }], ..ex.args.clone() };
    let p = r.prepare(0, args).unwrap();
    let kargs = *p.kernel_args();
    let ops = Arc::new(r.ops().clone());
    let chip = ops.chip().clone();
    let os = r.device().aicpu_os();
    let services = os.services() as usize;
    let attach = os.attach(&chip);

    let core_args = AicoreLaunchArgs::from(&kargs);
    let o = ops.clone();
    let cores = chip
        .launch_aicore(
            chip.config().cores(),
            Arc::new(move |c: ferry_sim::cores::CoreCtx| {
                aicore_execute(&*o, &core_args, c.index, c.index, None).map_err(|e| e.to_string())
            }),
        )
        .unwrap();
    let program = Arc::new(AicpuProgram::new());
    let mut entries: [Option<OrchEntryFn>; MAX_CALLABLES as usize] = [None; MAX_CALLABLES as usize];
    entries[0] = Some(entry);
    let aicpu = chip
        .launch_aicpu(
            chip.config().aicpu_threads,
            Arc::new(move |c: ferry_sim::cores::AicpuCtx| {
                // SAFETY: the device's services table lives as long as the device, which the
                // runner keeps alive past this launch.
                let svc = unsafe { &*(services as *const ferry_abi::services::DeviceServices) };
                let ctx = ExecContext {
                    services: svc,
                    args: kargs,
                    thread: c.thread,
                    threads: c.threads,
                    init: InitArgs::new(0),
                    orch_entries: entries,
                };
                exec_with_program(&program, &ctx).map_err(|s| format!("exec hook status {s}"))
            }),
        )
        .unwrap();
    aicpu.wait().unwrap();
    cores.wait().unwrap();

    let hdr = read_header(&*ops, kargs.runtime_args).unwrap();
    let mut b = vec![0u8; std::mem::size_of::<RunResult>()];
    r.device()
        .copy_dtoh(ferry_sim::DevicePtr(kargs.runtime_args + hdr.result_off), &mut b)
        .unwrap();
    let mut out = vec![0u8; bytes as usize];
    r.device().copy_dtoh(lanes, &mut out).unwrap();
    drop((ops, attach, chip));
    r.release(p);
    let vals = out.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    (from_bytes(&b).unwrap(), vals)
}

#[test]
fn exec_hook_runs_an_orchestration_object_through_the_table() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        let n = 1_000;
        let (res, lanes) = run_through_hook(arch, n, storm_entry);
        assert_eq!(res.status, RESULT_OK, "{arch:?}: {res:?}");
        assert_eq!((res.tasks_completed, res.tasks_submitted), (n, n));
        let per_lane = (n / STORM_LANES) as f32;
        for (i, v) in lanes.iter().enumerate() {
            let lane = i as u64 / STORM_LANE_LEN;
            let want = per_lane + if lane < n % STORM_LANES { 1.0 } else { 0.0 };
            assert_eq!(*v, want, "{arch:?} element {i}");
        }
    }
}

#[test]
fn exec_hook_reports_an_orchestration_objects_refused_task() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let (res, _) = run_through_hook(Arch::A2a3, 10, bad_entry);
    assert_eq!(res.status, RESULT_FAILED);
    assert_eq!(
        DeviceFault::decode(res.error_code, res.error_task, res.error_detail),
        Some(DeviceFault::Submit(SubmitError::UnknownKernel { task: 1, kernel: 999 }))
    );
    // The task before the bad one was submitted; whether it ran before the abort stopped
    // dispatching is a race.
    assert_eq!(res.tasks_submitted, 1);
    assert!(res.tasks_completed <= 1);
}

/// Keeps what it is given: the serving side of a table round trip.
#[derive(Default)]
struct Recorder(Vec<Task>);

impl Orchestrate for Recorder {
    fn tensor_count(&self) -> u32 {
        3
    }
    fn tensor(&self, id: TensorId) -> Result<ferry_runtime::device::task::TensorInfo, SubmitError> {
        Ok(ferry_runtime::device::task::TensorInfo { addr: 0x1000 * u64::from(id.0), len: 16 })
    }
    fn scalar_count(&self) -> u32 {
        0
    }
    fn scalar(&self, _: u32) -> Result<u64, SubmitError> {
        Ok(0)
    }
    fn submit(&mut self, task: &Task) -> Result<ferry_runtime::TaskId, SubmitError> {
        self.0.push(*task);
        Ok(ferry_runtime::TaskId(self.0.len() as u64 - 1))
    }
    fn scope_begin(&mut self) {}
    fn scope_end(&mut self) -> Result<(), SubmitError> {
        Ok(())
    }
    fn alloc_scratch(&mut self, _: u64) -> Result<TensorId, SubmitError> {
        Ok(TensorId(3))
    }
}

#[test]
fn dump_marks_cross_the_table_per_argument() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    use ferry_runtime::device::ffi::serve;
    use ferry_runtime::device::kernels::K_ADD;
    let mut rec = Recorder::default();
    let sent = Task::new(K_ADD).input(TensorId(0)).input(TensorId(1)).dump().output(TensorId(2));
    let plain = Task::new(K_COPY).input(TensorId(0)).output(TensorId(1));
    let (r, last) = serve(&mut rec, |api| {
        let mut o = ApiOrchestrator::new(api);
        o.submit(&sent)?;
        o.submit(&plain)
    });
    assert!(r.is_ok() && last.is_none());
    let marks = |t: &Task| t.args().map(|a| a.dump).collect::<Vec<_>>();
    assert_eq!(marks(&rec.0[0]), [false, true, false], "the mark stays on its argument");
    assert_eq!(marks(&rec.0[1]), [false, false]);
    assert_eq!(rec.0[0], sent, "the whole task round-trips");
}
