//! The versioned ABI a ferry custom kernel library is built against.
//!
//! A kernel library is a `cdylib` that ferry loads at run time (`ferry run --kernels LIB.so`,
//! or `DeviceRunner::load_kernels` from Rust) through the same AICPU-OS loader path as ferry's
//! own kernel library, without rebuilding ferry. Its kernels run on the simulated chip's AICore
//! worker threads; each also has a host reference ferry verifies the device against.
//!
//! | item | what |
//! |---|---|
//! | [`kernel_library!`] | declares the library: name, and per kernel its name, core kind, tensor-count range, scalar dtypes, most SPMD blocks, device entry and host reference |
//! | [`DeviceArgs`] / [`DeviceTensor`] | what a device entry sees: its block, scalars, and bounds-checked views of its tensors in device memory |
//! | [`DeviceView`] / [`host_view`] | a view kernel's tensors as typed N-d views, by element, on the device and in its host reference |
//! | [`KernelError`] | what a kernel returns when its arguments do not fit; it becomes a typed fault of the run |
//! | [`KERNEL_LIB_ABI_VERSION`] | the version the library records; ferry refuses a library of another version |
//! | the raw records ([`KernelLibraryDesc`], [`KernelEntry`], [`DeviceCall`], [`HostCall`]) and the loader's checks | [`kernel_lib`], re-exported at the root |
//! | [`DeviceServices`], `STATUS_*` | [`services`]: the AICPU OS's services table every loaded program receives, and the status codes its entries return |
//! | [`DType`] | the scalar and element types, by code, and their conversions (f16 and bf16 round to nearest, ties to even) |
//! | [`orch_lib`] / [`orch`] / [`orchestration_library!`] | orchestration libraries: the records and table of the orchestration ABI ([`ORCH_LIB_ABI_VERSION`]), and the safe layer (`Orch`, `TaskSpec`, `View`) a function is written in |
//! | [`layout`] | typed N-d views: the shape and operand words a view kernel reads its arguments' dtypes, shapes and strides from |
//!
//! The crate depends on nothing but `core` and `std`, so it builds on its own, outside ferry's
//! checkout. Without its default `std` feature it is `no_std` and holds only the records,
//! [`services`] and [`DType`] (ferry's `ferry-abi` uses it so, and re-exports them); the safe
//! layer and [`kernel_library!`] need `std`.
//!
//! # Versioning rule
//!
//! [`KERNEL_LIB_ABI_VERSION`] changes whenever a record's layout or meaning changes; a library
//! records the version of the crate it was built with, and a ferry of another version refuses
//! it with a typed error (rebuild the library against the new crate). The descriptor's first 12
//! bytes (`magic`, `abi_version`) stay where they are in every version.
//!
//! # Example
//!
//! ```
//! use ferry_kernel_abi::{kernel_library, DeviceArgs, KernelError};
//!
//! /// out = a * x + y, one block's share of the elements.
//! fn saxpy(k: &DeviceArgs<'_>) -> Result<(), KernelError> {
//!     let (x, y, out) = (k.tensor(0)?, k.tensor(1)?, k.tensor(2)?);
//!     let a = k.scalar_f32(0)?;
//!     k.require_len(&[&x, &y], out.len())?;
//!     for i in k.block_range(out.len()) {
//!         out.set(i, a * x.get(i) + y.get(i));
//!     }
//!     Ok(())
//! }
//!
//! /// The host reference: the whole task over host buffers.
//! fn saxpy_ref(t: &mut [&mut [f32]], s: &[u64]) -> Result<(), KernelError> {
//!     let a = ferry_kernel_abi::f32_scalar(s, 0)?;
//!     let [x, y, out] = t else { return Err(KernelError::MissingTensor { index: 2 }) };
//!     for ((o, &xi), &yi) in out.iter_mut().zip(x.iter()).zip(y.iter()) {
//!         *o = a * xi + yi;
//!     }
//!     Ok(())
//! }
//!
//! kernel_library! {
//!     name: "example",
//!     kernels: [{
//!         name: "saxpy", core: Aiv, tensors: 3..=3, scalars: [Float32],
//!         max_blocks: 1024, device: saxpy, host: saxpy_ref,
//!     }],
//! }
//! # fn main() {
//! # let d = unsafe { &*ferry_kernel_library() };
//! # assert_eq!(d.kernel_count, 1);
//! # assert_eq!(d.abi_version, ferry_kernel_abi::KERNEL_LIB_ABI_VERSION);
//! # }
//! ```
//!
//! # Safety
//!
//! The macro writes the only `unsafe` a library needs: the exported descriptor and the
//! `extern "C"` trampolines, which catch panics (a panic never unwinds into ferry) and reach
//! device memory only through ranges the OS's `translate` service vouched for.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

#[cfg(feature = "std")]
extern crate std;

mod dtype;
pub mod kernel_lib;
pub mod layout;
#[cfg(feature = "std")]
mod library;
#[cfg(feature = "std")]
pub mod orch;
pub mod orch_lib;
pub mod services;
#[cfg(feature = "std")]
mod view;

pub use dtype::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16, DType};
pub use kernel_lib::{
    c_name, DeviceCall, DeviceKernelFn, HostCall, HostKernelFn, HostTensor, KernelEntry,
    KernelErrorRecord, KernelLibraryDesc, TensorArg, CORE_AIC, CORE_AIV, KERNEL_ERR_BAD_ADDRESS,
    KERNEL_ERR_MISSING_SCALAR, KERNEL_ERR_MISSING_TENSOR, KERNEL_ERR_NONE, KERNEL_ERR_PANIC,
    KERNEL_ERR_SHAPE, KERNEL_ERR_VIEW, KERNEL_LIB_ABI_VERSION, KERNEL_LIB_MAGIC, MAX_CALL_SCALARS,
    MAX_CALL_TENSORS, NAME_BYTES, SCALAR_VIEW_OPERAND, SCALAR_VIEW_SHAPE,
};
#[cfg(feature = "std")]
pub use library::*;
pub use orch_lib::ORCH_LIB_ABI_VERSION;
pub use services::{
    DeviceServices, STATUS_BAD_ADDRESS, STATUS_INVALID_ARGUMENT, STATUS_OK, STATUS_PANIC,
    STATUS_RUNTIME_BASE,
};
#[cfg(feature = "std")]
pub use view::{host_view, DeviceView, HostView};
