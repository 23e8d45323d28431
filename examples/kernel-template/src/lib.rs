//! A ferry custom kernel library: three kernels, each a device entry (one SPMD block, over
//! device memory) and a host reference (the whole task, over host buffers) that ferry verifies
//! the device against.
//!
//! | kernel | tensors | scalars | computes |
//! |---|---|---|---|
//! | `saxpy` | `x`, `y` → `out` | `a` (f32) | `out[i] = a * x[i] + y[i]` |
//! | `clamp` | `x` → `out`, or one inout | `lo`, `hi` (f32) | `out[i] = min(max(x[i], lo), hi)` |
//! | `relu_nd` | `x` → `out`, typed N-d views of any dtype | the views' layout words | `out = max(x, 0)` |
//!
//! `relu_nd` is a view kernel: its scalars are a shape word and one operand word per tensor,
//! which a workload fills in from its views (`shape`, `strides`, any dtype); it reads and
//! writes its tensors by element through `DeviceArgs::view` and `host_view`.
use ferry_kernel_abi::{f32_scalar, host_view, kernel_library, DeviceArgs, KernelError};

/// `out = a * x + y`, this block's share of the elements.
fn saxpy(k: &DeviceArgs<'_>) -> Result<(), KernelError> {
    let (x, y, out) = (k.tensor(0)?, k.tensor(1)?, k.tensor(2)?);
    let a = k.scalar_f32(0)?;
    k.require_len(&[&x, &y], out.len())?;
    for i in k.block_range(out.len()) {
        out.set(i, a * x.get(i) + y.get(i));
    }
    Ok(())
}

/// Host reference of `saxpy`: a plain loop over the whole task.
fn saxpy_ref(t: &mut [&mut [f32]], s: &[u64]) -> Result<(), KernelError> {
    let a = f32_scalar(s, 0)?;
    let [x, y, out] = t else { return Err(KernelError::MissingTensor { index: 2 }) };
    if x.len() < out.len() || y.len() < out.len() {
        return Err(KernelError::Shape { expected: out.len(), got: x.len().min(y.len()) });
    }
    for i in 0..out.len() {
        out[i] = a * x[i] + y[i];
    }
    Ok(())
}

/// `out = clamp(x, lo, hi)`; with one tensor, in place.
fn clamp(k: &DeviceArgs<'_>) -> Result<(), KernelError> {
    let x = k.tensor(0)?;
    let out = if k.tensor_count() > 1 { k.tensor(1)? } else { k.tensor(0)? };
    let (lo, hi) = (k.scalar_f32(0)?, k.scalar_f32(1)?);
    k.require_len(&[&x], out.len())?;
    for i in k.block_range(out.len()) {
        out.set(i, x.get(i).max(lo).min(hi));
    }
    Ok(())
}

/// Host reference of `clamp`.
fn clamp_ref(t: &mut [&mut [f32]], s: &[u64]) -> Result<(), KernelError> {
    let (lo, hi) = (f32_scalar(s, 0)?, f32_scalar(s, 1)?);
    match t {
        [x] => x.iter_mut().for_each(|v| *v = v.max(lo).min(hi)),
        [x, out] => {
            for (o, v) in out.iter_mut().zip(x.iter()) {
                *o = v.max(lo).min(hi);
            }
        }
        _ => return Err(KernelError::MissingTensor { index: 0 }),
    }
    Ok(())
}

/// `out = max(x, 0)` over this block's share of the view's elements, in each tensor's dtype.
fn relu_nd(k: &DeviceArgs<'_>) -> Result<(), KernelError> {
    let (x, out) = (k.view(0)?, k.view(1)?);
    for i in k.block_range(out.numel()) {
        out.set(i, x.get(i).max(0.0));
    }
    Ok(())
}

/// Host reference of `relu_nd`.
fn relu_nd_ref(t: &mut [&mut [f32]], s: &[u64]) -> Result<(), KernelError> {
    let [x, out] = t else { return Err(KernelError::MissingTensor { index: 1 }) };
    let (x, mut out) = (host_view(x, s, 0)?, host_view(out, s, 1)?);
    for i in 0..out.numel() {
        out.set(i, x.get(i).max(0.0));
    }
    Ok(())
}

kernel_library! {
    name: "kernel-template",
    kernels: [
        {
            name: "saxpy", core: Aiv, tensors: 3..=3, scalars: [Float32],
            max_blocks: 65536, device: saxpy, host: saxpy_ref,
        },
        {
            name: "clamp", core: Aiv, tensors: 1..=2, scalars: [Float32, Float32],
            max_blocks: 65536, device: clamp, host: clamp_ref,
        },
        {
            name: "relu_nd", core: Aiv, tensors: 2..=2,
            scalars: [ViewShape, ViewOperand, ViewOperand],
            max_blocks: 65536, device: relu_nd, host: relu_nd_ref,
        },
    ],
}
