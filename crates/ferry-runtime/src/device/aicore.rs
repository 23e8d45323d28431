//! The AICore executor: handshake, then run dispatched kernels until told to exit.
use super::custom::CustomDispatch;
use super::image::{
    DispatchArgs, F32Slice, ImageView, PayloadStatus, RuntimeHeader, TensorRecord, TranslateCache,
    GUARD_CHECK_BYTES, GUARD_FILL, PAYLOAD_CORE_LINE, PAYLOAD_FAULT, PAYLOAD_OK,
};
use super::kernels::{self, KernelCall};
use super::ops::DeviceOps;
use super::sched::{is_dispatch, read_header, PAYLOAD_PAIR_BYTES};
use crate::error::{DeviceFault, KernelFault};
use ferry_abi::arch::Arch;
use ferry_abi::handshake::{aicore_done_value, HandshakeLayout, CORE_TYPE_AIC, CORE_TYPE_AIV};
use ferry_abi::kernel_lib::{
    is_custom_kernel, DeviceCall, KernelErrorRecord, TensorArg, KERNEL_ERR_BAD_ADDRESS,
    KERNEL_ERR_MISSING_SCALAR, KERNEL_ERR_MISSING_TENSOR, KERNEL_ERR_PANIC, KERNEL_ERR_SHAPE,
    KERNEL_ERR_VIEW,
};
use ferry_abi::launch::AicoreLaunchArgs;
use ferry_abi::regs::{
    cond_ack, cond_fin, RegLayout, AICORE_EXIT_SIGNAL, AICPU_IDLE, COND_EXITED, COND_IDLE,
};
use std::sync::atomic::{AtomicU8, Ordering};

/// The AICore entry: worker `block_idx` with physical core id `physical_core_id` of the launch
/// whose arguments are `args` (the AICore projection of `KernelArgs`).
///
/// 1. Report: write `physical_core_id` and `core_type` into the core's handshake slot, then
///    `aicore_done = block_idx + 1` (Release) — no waiting on the AICPU first.
/// 2. Wait until `DATA_MAIN_BASE != 0` (the window is open), write `COND = idle`, read `task`
///    (this core's payload pair).
/// 3. Loop: wait for a new `DATA_MAIN_BASE` value; `EXIT` → `COND = exited`, return; a dispatch
///    id → `COND = ACK(id)`, run the kernel from payload `id & 1`, write the status line,
///    `COND = FIN(id)`.
///
/// # Errors
/// [`DeviceFault::BadImage`] when `runtime_args` is not a runtime image, or the regs table has no
/// entry for this core; the core cannot take part in the run then.
///
/// Kernel ids in the loaded range (`ferry_abi::kernel_lib::CUSTOM_KERNEL_BASE..`) run through
/// `custom`, the device entries of the kernel libraries the AICPU OS loaded; without one (or
/// for an id no library has) the dispatch faults as an unknown kernel.
pub fn aicore_execute(
    ops: &dyn DeviceOps,
    args: &AicoreLaunchArgs,
    block_idx: u32,
    physical_core_id: u32,
    custom: Option<&dyn CustomDispatch>,
) -> Result<(), DeviceFault> {
    let hdr = read_header(ops, args.runtime_args)?;
    let bad = DeviceFault::BadImage { magic: hdr.magic, version: hdr.version };
    let image = ImageView::new(ops, args.runtime_args, hdr.image_bytes).map_err(|_| bad)?;
    let run_block_fits = hdr.run_off % 64 == 0
        && hdr.run_off.checked_add(64).is_some_and(|e| e <= image.len() as u64);
    if block_idx >= hdr.worker_count || physical_core_id >= hdr.regs_count || !run_block_fits {
        return Err(bad);
    }
    let regs = ImageView::new(ops, args.regs, u64::from(hdr.regs_count) * 8).map_err(|_| bad)?;
    // Relaxed: the regs table is written by the host before the launch.
    let base = regs.u64_at(8 * physical_core_id as usize).load(Ordering::Relaxed);
    let layout = Arch::from_u32(hdr.arch).map(RegLayout::of).unwrap_or(RegLayout::of(Arch::A2a3));
    let (dmb, cond) = (layout.data_main_base as u32, layout.cond as u32);

    // 1. Report.
    let hl = HandshakeLayout::from_u32(hdr.handshake_layout).ok_or(bad)?;
    let hs = hdr.handshake_off as usize + hl.slot_bytes as usize * block_idx as usize;
    let (done_off, pcid_off) = (hl.aicore_done_off as usize, hl.physical_core_id_off as usize);
    if hs + hl.slot_bytes as usize > image.len() {
        return Err(bad);
    }
    let core_type = if block_idx < hdr.aic_count { CORE_TYPE_AIC } else { CORE_TYPE_AIV };
    // Relaxed: both published by the Release store of `aicore_done` below.
    image.u32_at(hs + pcid_off).store(physical_core_id, Ordering::Relaxed);
    // Relaxed: as above.
    image.u32_at(hs + hl.core_type_off as usize).store(core_type, Ordering::Relaxed);
    // Release: pairs with the scheduler's Acquire load of `aicore_done` in its phase-1 sweep
    // (AICore writes go to memory; a cluster cache outside its snoop domain does not see them).
    image.u32_at(hs + done_off).store(aicore_done_value(block_idx), Ordering::Release);
    ops.notify_aicpu();

    // 2. Wait for the window to open.
    let first = ops.core_wait(base, dmb, &mut |v| v != 0, None).unwrap_or(AICORE_EXIT_SIGNAL);
    ops.reg_write_core(base, cond, COND_IDLE);
    // Acquire: pairs with the scheduler's Release store of `task` (phase 2), which precedes its
    // window-opening register write that we observed above.
    let task_ptr = image.u64_at(hs + hl.task_off as usize).load(Ordering::Acquire);
    let payload = task_ptr.wrapping_sub(image.addr());
    if first != AICORE_EXIT_SIGNAL
        && (task_ptr < image.addr() || payload + PAYLOAD_PAIR_BYTES > image.len() as u64)
    {
        ops.reg_write_core(base, cond, COND_EXITED);
        return Err(bad);
    }

    // 3. Dispatch loop.
    let mut last = 0u32;
    let mut tensors: Vec<F32Slice> = Vec::with_capacity(super::image::MAX_TASK_TENSORS);
    let mut cache = TranslateCache::new();
    let flags_off = hdr.run_off as usize + super::image::RUN_BLOCK_DFX_FLAGS;
    // Relaxed: written by the AICPU before its window-opening register write, which this core
    // observed (Acquire) in step 2.
    let timed = image.u32_at(flags_off).load(Ordering::Relaxed) & super::dfx::DFX_SWIMLANE != 0;
    let now = || if timed { ops.clock_cycles() } else { 0 };
    let guards = guard_table(&image, &hdr);
    super::inflight::bind(block_idx);
    loop {
        let v = ops
            .core_wait(base, dmb, &mut |v| v != last && v != AICPU_IDLE && v != 0, None)
            .unwrap_or(AICORE_EXIT_SIGNAL);
        if v == AICORE_EXIT_SIGNAL {
            ops.reg_write_core(base, cond, COND_EXITED);
            return Ok(());
        }
        // Ordered after the load that saw the dispatch: never before the scheduler's dispatch
        // time, which it read before its register write.
        let received = if timed { ops.clock_cycles_ordered() } else { 0 };
        last = v;
        if !is_dispatch(v) {
            continue;
        }
        let entry = payload as usize + (v as usize & 1) * 256;
        let a: DispatchArgs = image.read_record(entry);
        ops.reg_write_core(base, cond, cond_ack(v));
        let start = now();
        // Named per core until it returns: a kernel that ends the process is named by it.
        super::inflight::enter(block_idx, a.task, a.kernel_id);
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_kernel(ops, &a, &mut tensors, &mut cache, custom)
        }))
        .unwrap_or(Err(KernelFault::Panicked { kernel: a.kernel_id }));
        super::inflight::leave(block_idx);
        // A loaded kernel is the user's code: what it wrote past its outputs is its fault.
        let ran = match ran {
            Ok(()) if is_custom_kernel(a.kernel_id) => check_guards(ops, &a, &guards),
            r => r,
        };
        let end = now();
        let st = match ran {
            Ok(()) => PayloadStatus::new(PAYLOAD_OK, 0, [0; 3]),
            Err(f) => {
                let (code, detail) = f.encode();
                PayloadStatus::new(PAYLOAD_FAULT, code, detail)
            }
        };
        image.write_record(entry + PAYLOAD_CORE_LINE, &st.with_times(received, start, end));
        ops.reg_write_core(base, cond, cond_fin(v));
    }
}

/// The image's guard table: `(address, bytes)` of each guarded allocation, sorted by address
/// (empty when the table does not fit the image).
fn guard_table(image: &ImageView, hdr: &RuntimeHeader) -> Vec<(u64, u64)> {
    let (off, n) = (hdr.guard_off as usize, hdr.guard_count as usize);
    let fits = n.checked_mul(16).and_then(|b| off.checked_add(b)).is_some_and(|e| e <= image.len());
    if !fits {
        return Vec::new();
    }
    (0..n)
        .map(|i| {
            let r: TensorRecord = image.read_record(off + 16 * i);
            (r.addr, r.bytes)
        })
        .collect()
}

/// After a loaded kernel ran: the first output or inout tensor argument of `a` lying in a
/// guarded allocation whose guard band no longer holds [`GUARD_FILL`] is a write past the end
/// of that allocation, the kernel's [`KernelFault::OutOfBounds`].
fn check_guards(
    ops: &dyn DeviceOps,
    a: &DispatchArgs,
    guards: &[(u64, u64)],
) -> Result<(), KernelFault> {
    let nt = (a.n_tensors as usize).min(a.tensors.len()).min(16);
    for (i, t) in a.tensors[..nt].iter().enumerate() {
        // Two role bits per tensor: 2 output, 3 inout (`task::Role`).
        if (a.roles >> (2 * i)) & 2 == 0 {
            continue;
        }
        let k = guards.partition_point(|&(addr, _)| addr <= t.addr);
        let Some(&(start, bytes)) = k.checked_sub(1).and_then(|k| guards.get(k)) else {
            continue;
        };
        let end = start.saturating_add(bytes);
        if t.addr.saturating_add(t.bytes) > end {
            continue;
        }
        let Ok(p) = ops.translate(end, GUARD_CHECK_BYTES) else { continue };
        let intact = (0..GUARD_CHECK_BYTES as usize).all(|b| {
            // SAFETY: `translate` vouched for GUARD_CHECK_BYTES bytes at `p`; another core's
            // kernel may write them concurrently, so they are read as atomics.
            let byte = unsafe { &*(p.add(b) as *const AtomicU8) };
            // Relaxed: this core's own kernel wrote (or not) before this load on this thread;
            // another core's concurrent write is that core's fault, found by its own check.
            byte.load(Ordering::Relaxed) == GUARD_FILL
        });
        if !intact {
            return Err(KernelFault::OutOfBounds { kernel: a.kernel_id, index: i as u32 });
        }
    }
    Ok(())
}

fn run_kernel(
    ops: &dyn DeviceOps,
    a: &DispatchArgs,
    tensors: &mut Vec<F32Slice>,
    cache: &mut TranslateCache<32>,
    custom: Option<&dyn CustomDispatch>,
) -> Result<(), KernelFault> {
    if is_custom_kernel(a.kernel_id) {
        return run_custom(a, custom);
    }
    tensors.clear();
    let nt = (a.n_tensors as usize).min(a.tensors.len());
    for t in &a.tensors[..nt] {
        let s = cache
            .get(ops, t.addr, t.bytes)
            .map_err(|_| KernelFault::OutsideDeviceMemory { addr: t.addr, bytes: t.bytes })?;
        tensors.push(s);
    }
    let ns = (a.n_scalars as usize).min(a.scalars.len());
    kernels::execute(&KernelCall {
        kernel: a.kernel_id,
        tensors,
        scalars: &a.scalars[..ns],
        block_idx: a.block_idx,
        block_dim: a.block_dim,
    })
}

/// A loaded kernel's dispatch: the payload's device ranges and scalars as a [`DeviceCall`] for
/// its device entry, which translates (bounds-checks) every range through the OS services table
/// itself.
fn run_custom(a: &DispatchArgs, custom: Option<&dyn CustomDispatch>) -> Result<(), KernelFault> {
    let kernel = a.kernel_id;
    let mut call = DeviceCall {
        n_tensors: (a.n_tensors as usize).min(a.tensors.len()) as u32,
        n_scalars: (a.n_scalars as usize).min(a.scalars.len()) as u32,
        block_idx: a.block_idx,
        block_dim: a.block_dim.max(1),
        ..DeviceCall::default()
    };
    for (d, t) in call.tensors.iter_mut().zip(&a.tensors[..call.n_tensors as usize]) {
        *d = TensorArg { addr: t.addr, bytes: t.bytes };
    }
    call.scalars[..call.n_scalars as usize].copy_from_slice(&a.scalars[..call.n_scalars as usize]);
    let mut error = KernelErrorRecord::default();
    match custom.and_then(|c| c.call(kernel, &call, &mut error)) {
        None => Err(KernelFault::UnknownKernel { kernel }),
        Some(ferry_abi::services::STATUS_OK) => Ok(()),
        Some(status) => Err(loaded_fault(kernel, status, &error)),
    }
}

/// A loaded kernel's refusal as a typed fault: the `KernelError` its device entry recorded, or
/// its bare status when it recorded none.
fn loaded_fault(kernel: u32, status: i32, e: &KernelErrorRecord) -> KernelFault {
    match e.kind {
        KERNEL_ERR_MISSING_TENSOR => KernelFault::MissingTensor { kernel, index: e.index },
        KERNEL_ERR_MISSING_SCALAR => KernelFault::MissingScalar { kernel, index: e.index },
        KERNEL_ERR_BAD_ADDRESS => KernelFault::BadAddress { kernel, index: e.index },
        KERNEL_ERR_SHAPE => KernelFault::Shape { kernel, expected: e.expected, got: e.got },
        KERNEL_ERR_PANIC => KernelFault::Panicked { kernel },
        KERNEL_ERR_VIEW => KernelFault::View {
            kernel,
            operand: e.index & 0xffff,
            need: e.expected,
            have: e.got,
            code: (e.index >> 16) as u8,
        },
        _ => KernelFault::Status { kernel, status },
    }
}
