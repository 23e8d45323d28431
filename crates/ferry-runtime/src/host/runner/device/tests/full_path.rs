//! A whole full-path run on the host-memory backend: the runner loads the runtime's AICPU
//! program through the device's program loader (the Path A bootstrap), publishes each run on
//! its stream pair, starts the executor on the host-memory cores and reads the result back,
//! all through the seam. The device half runs over [`HostChipOps`], the host-memory device's
//! memory, register windows and counter.
use super::HostChip;
use crate::device::kernels::{K_ADD, K_SCALE};
use crate::device::ops::{DeviceOps, TranslateError};
use crate::device::program::AicpuProgram;
use crate::host::{Callable, DeviceRunner, RunArgs, RunnerConfig, TensorInit, Variant};
use crate::{Orchestrate, SubmitError, Task, TensorId};
use ferry_abi::arch::Arch;
use ferry_abi::launch::{AbiRecord, InitArgs, KernelArgs};
use ferry_abi::services::{
    ProgramReport, QueryArgs, EXPORT_AICPU_EXEC, EXPORT_AICPU_INIT, EXPORT_AICPU_QUERY,
    EXPORT_AICPU_REGISTER_CALLABLE, STATUS_ABI_SIZE_MISMATCH, STATUS_BAD_ADDRESS,
    STATUS_INVALID_ARGUMENT, STATUS_NOT_INITIALISED, STATUS_OK,
};
use ferry_backend::host::{aicpu_thread, HostMemoryBackend, HostMemoryCores, HostProgramCode};
use ferry_backend::{
    Backend, BackendDevice, CoreRegisters, CycleCounter, DeviceCounter, DevicePtr, MappedMemory,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The device half's operations on the host-memory backend: device memory is the device's
/// mapped allocations, a register window is named by its base
/// ([`HostMemoryCores::core_at`]), and the clock is the device's counter. Nothing parks: both
/// sides poll, so writes need no wake-up.
#[derive(Clone, Debug)]
struct HostChipOps(HostChip);

/// Polls `ready` until it gives a value or `timeout` passes (`None`).
fn poll<T>(timeout: Option<Duration>, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut spins = 0u32;
    loop {
        if let Some(v) = ready() {
            return Some(v);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        spins += 1;
        match spins < 64 {
            true => std::hint::spin_loop(),
            false => std::thread::sleep(Duration::from_micros(20)),
        }
    }
}

impl HostChipOps {
    #[track_caller]
    fn core(&self, base: u64) -> u32 {
        let core = self.0.cores.core_at(base);
        core.unwrap_or_else(|| panic!("{base:#x} is not a register window base of these cores"))
    }
}

// SAFETY: `translate` hands out the device's own view of one live allocation
// (`MappedMemory::device_view` checks the range), which stays put until the host frees it; its
// allocations are 64-byte aligned. Host copies take the device's heap lock and run only before
// a run's launch or after its completion (stream order). Register reads are Acquire loads and
// writes Release stores (`HostMemoryCores`); waiters poll, so no wake-up is owed.
unsafe impl DeviceOps for HostChipOps {
    fn translate(&self, addr: u64, len: u64) -> Result<*mut u8, TranslateError> {
        self.0
            .device
            .device_view(DevicePtr(addr), len)
            .map(|p| p.as_ptr())
            .map_err(|e| TranslateError { addr, len, reason: e.to_string() })
    }

    fn reg_read(&self, reg_base: u64, offset: u32) -> u32 {
        self.0.cores.read(self.core(reg_base), offset)
    }

    fn reg_write_aicpu(&self, reg_base: u64, offset: u32, value: u32) {
        self.0.cores.write_as_aicpu(self.core(reg_base), offset, value);
    }

    fn reg_write_core(&self, reg_base: u64, offset: u32, value: u32) {
        self.0.cores.write_as_core(self.core(reg_base), offset, value);
    }

    fn core_wait(
        &self,
        reg_base: u64,
        offset: u32,
        pred: &mut dyn FnMut(u32) -> bool,
        timeout: Option<Duration>,
    ) -> Option<u32> {
        let core = self.core(reg_base);
        poll(timeout, || Some(self.0.cores.read(core, offset)).filter(|v| pred(*v)))
    }

    fn aicpu_wait(&self, cond: &mut dyn FnMut() -> bool, timeout: Option<Duration>) -> bool {
        poll(timeout, || cond().then_some(())).is_some()
    }

    fn notify_aicpu(&self) {}

    fn clock_cycles(&self) -> u64 {
        self.0.device.cycle_counter().now_cycles()
    }

    fn clock_hz(&self) -> u64 {
        self.0.device.cycle_counter().hz()
    }
}

/// What the program's exec entry did.
#[derive(Debug, Default)]
struct Execs {
    calls: AtomicU32,
}

/// The host code that the runtime's AICPU program image (`image`) stands for on `chip`: its
/// four entries over the runtime's own program logic ([`AicpuProgram`]), its exec running on
/// every AICPU thread of the launch over `ops`.
fn aicpu_program(
    image: &'static ferry_programs::Program,
    ops: Arc<HostChipOps>,
    execs: Arc<Execs>,
) -> HostProgramCode {
    let program = Arc::new(AicpuProgram::new());
    let (p1, p2, p3) = (program.clone(), program.clone(), program);
    HostProgramCode::new()
        .export(EXPORT_AICPU_INIT, move |_, blob| match InitArgs::from_bytes(blob) {
            Ok(args) => {
                p1.init(&args);
                STATUS_OK
            }
            Err(_) => STATUS_ABI_SIZE_MISMATCH,
        })
        .export(EXPORT_AICPU_QUERY, move |dev, blob| {
            let Ok(q) = QueryArgs::from_bytes(blob) else { return STATUS_ABI_SIZE_MISMATCH };
            let mut r = ProgramReport::new(image.name, image.build_id).expect("a short name");
            r.kernel_args_size = KernelArgs::SIZE as u32;
            r.init_calls = u32::from(p2.init_args().is_some());
            match dev.copy_htod(r.as_bytes(), DevicePtr(q.result_addr)) {
                Ok(()) => STATUS_OK,
                Err(_) => STATUS_BAD_ADDRESS,
            }
        })
        // The host-built graph's program only records the call.
        .export(EXPORT_AICPU_REGISTER_CALLABLE, |_, _| STATUS_OK)
        .export(EXPORT_AICPU_EXEC, move |_, blob| {
            let Ok(args) = KernelArgs::from_bytes_checked(blob) else {
                return STATUS_ABI_SIZE_MISMATCH;
            };
            if p3.init_args().is_none() {
                return STATUS_NOT_INITIALISED;
            }
            let Some((thread, threads)) = aicpu_thread() else { return STATUS_INVALID_ARGUMENT };
            // Relaxed: read by the test after the run completed.
            execs.calls.fetch_add(1, Ordering::Relaxed);
            match p3.exec(&*ops, &args, thread, threads) {
                Ok(()) => STATUS_OK,
                Err(_) => STATUS_INVALID_ARGUMENT,
            }
        })
}

/// `out = (x + y) · s + x`, as three tasks: add, scale in place, add.
fn add_scale_add(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    let (x, y, t, out) = (TensorId(0), TensorId(1), TensorId(2), TensorId(3));
    o.submit(&Task::new(K_ADD).input(x).input(y).output(t))?;
    o.submit(&Task::new(K_SCALE).inout(t).scalar_f32(0.5))?;
    o.submit(&Task::new(K_ADD).input(t).input(x).output(out))?;
    Ok(())
}

#[test]
fn a_full_path_run_on_the_host_memory_backend_computes_the_graph_twice() {
    let _bound = ferry_watchdog::bound("a full-path run on the host-memory backend");
    let cfg = RunnerConfig::small(Arch::A2a3);
    let backend = HostMemoryBackend::with_stream_threads(1, 64 << 20).expect("a backend");
    let device = backend.device(0).expect("its device").clone();
    let cores = HostMemoryCores::new(Arch::A2a3, cfg.aic + cfg.aiv).expect("its cores");
    let chip = HostChip { device: device.clone(), cores };
    let ops = Arc::new(HostChipOps(chip.clone()));
    let execs = Arc::new(Execs::default());
    let image = cfg.programs.of(Variant::HostBuiltGraph);
    device.register_code(image.bytes, aicpu_program(image, ops, execs.clone()));

    // The runner's own operations (the AICore executor's), beside the program's.
    let services = |c: &HostChip| Some(Arc::new(HostChipOps(c.clone())) as Arc<dyn DeviceOps>);
    let mut r: DeviceRunner<HostChip> =
        DeviceRunner::assemble(device.clone(), chip.clone(), cfg, None, services)
            .expect("a runner on the host-memory device");
    r.register_callable(0, Callable::new("add-scale-add", Variant::HostBuiltGraph, add_scale_add))
        .expect("registered through the loaded program");

    // The regs table the runner wrote is the cores' window bases, through the seam.
    let mut table = vec![0u8; 8 * chip.core_count() as usize];
    device.copy_dtoh(r.regs_table, &mut table).expect("the regs table");
    let written: Vec<u64> =
        table.chunks(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect();
    assert_eq!(written, chip.reg_bases());

    const N: usize = 3000;
    for round in 0..2u32 {
        let x: Vec<f32> = (0..N).map(|i| (i as f32) * 0.25 + round as f32).collect();
        let y: Vec<f32> = (0..N).map(|i| 100.0 - (i % 97) as f32 * (round + 1) as f32).collect();
        let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| (a + b) * 0.5 + a).collect();
        let args = RunArgs {
            tensors: vec![
                TensorInit::Data(x),
                TensorInit::Data(y),
                TensorInit::Zeros(N),
                TensorInit::Zeros(N),
            ],
            scalars: vec![],
            scratch_bytes: 0,
        };
        let out = r.run(0, args).unwrap_or_else(|e| panic!("round {round}: {e}"));
        let got = out.tensors[3].as_ref().expect("a runner-owned output");
        assert_eq!(got, &want, "round {round}: the output against the host reference");
        assert_eq!(out.stats.tasks, 3, "round {round}: every task ran");
    }
    // Every AICPU thread of both launches ran the program's exec on the device.
    assert_eq!(execs.calls.load(Ordering::Relaxed), 2 * cfg.aicpu_threads);
    assert!(device.program_stats().bootstraps >= 1, "loaded by the dispatcher bootstrap");
    r.finalize().expect("torn down");
    assert_eq!(device.stats().allocated_bytes, 0, "nothing left on the device");
}
