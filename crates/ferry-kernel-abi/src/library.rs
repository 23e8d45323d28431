//! The safe layer a kernel library is written in: [`KernelError`], [`DeviceArgs`] and
//! [`DeviceTensor`], and the [`kernel_library!`](crate::kernel_library) macro with the
//! trampolines it expands to (they catch panics, so this layer needs `std`).

use crate::kernel_lib::{
    DeviceCall, HostCall, KernelErrorRecord, KernelLibraryDesc, CORE_AIC, CORE_AIV,
    KERNEL_ERR_BAD_ADDRESS, KERNEL_ERR_MISSING_SCALAR, KERNEL_ERR_MISSING_TENSOR, KERNEL_ERR_PANIC,
    KERNEL_ERR_SHAPE, KERNEL_ERR_VIEW, MAX_CALL_SCALARS, MAX_CALL_TENSORS,
};
use crate::services::{
    DeviceServices, STATUS_BAD_ADDRESS, STATUS_INVALID_ARGUMENT, STATUS_OK, STATUS_PANIC,
    STATUS_RUNTIME_BASE,
};
#[cfg(doc)]
use crate::DType;
use std::boxed::Box;
use std::format;
use std::marker::PhantomData;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::string::{String, ToString};
use std::thread_local;

/// Which kind of core a kernel runs on ([`kernel_library!`](crate::kernel_library)'s `core:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Core {
    /// A cube core.
    Aic = CORE_AIC,
    /// A vector core.
    Aiv = CORE_AIV,
}

/// Why a kernel refused its arguments. The device entry's error becomes the run's typed kernel
/// fault ([`record`](Self::record) carries it across, and ferry prints it with the kernel's name
/// and this `Display` text); the host reference's error fails the verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelError {
    /// Tensor argument `index` is not there.
    MissingTensor {
        /// The argument index.
        index: usize,
    },
    /// Scalar argument `index` is not there.
    MissingScalar {
        /// The argument index.
        index: usize,
    },
    /// Tensor `index`'s range is not inside live device memory.
    BadAddress {
        /// The argument index.
        index: usize,
    },
    /// A tensor is shorter than the kernel needs.
    Shape {
        /// Elements needed.
        expected: usize,
        /// Elements there.
        got: usize,
    },
    /// A kernel-defined failure; the code must be at least [`STATUS_RUNTIME_BASE`].
    Failed(i32),
    /// Tensor `index`'s view ([`DeviceArgs::view`]) spans `need` bytes, its range has `have`;
    /// or (`need` and `have` 0) its operand word names the unknown dtype code `code`.
    View {
        /// The tensor argument.
        index: usize,
        /// Bytes the view spans.
        need: u64,
        /// Bytes the range has.
        have: u64,
        /// The unknown dtype code, when that is what is wrong.
        code: u8,
    },
}

impl KernelError {
    /// The `STATUS_*` code the device entry returns for it.
    pub fn status(&self) -> i32 {
        match *self {
            KernelError::BadAddress { .. } => STATUS_BAD_ADDRESS,
            KernelError::Failed(c) if c >= STATUS_RUNTIME_BASE => c,
            _ => STATUS_INVALID_ARGUMENT,
        }
    }

    /// The record the device entry hands back (a `Failed` code travels as the status alone).
    pub fn record(&self) -> KernelErrorRecord {
        let at = |kind, index: usize| KernelErrorRecord {
            kind,
            index: u32::try_from(index).unwrap_or(u32::MAX),
            ..KernelErrorRecord::default()
        };
        match *self {
            KernelError::MissingTensor { index } => at(KERNEL_ERR_MISSING_TENSOR, index),
            KernelError::MissingScalar { index } => at(KERNEL_ERR_MISSING_SCALAR, index),
            KernelError::BadAddress { index } => at(KERNEL_ERR_BAD_ADDRESS, index),
            KernelError::Shape { expected, got } => KernelErrorRecord {
                kind: KERNEL_ERR_SHAPE,
                index: 0,
                expected: expected as u64,
                got: got as u64,
            },
            KernelError::Failed(_) => KernelErrorRecord::default(),
            KernelError::View { index, need, have, code } => KernelErrorRecord {
                kind: KERNEL_ERR_VIEW,
                index: (index.min(0xffff) as u32) | u32::from(code) << 16,
                expected: need,
                got: have,
            },
        }
    }
}

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            KernelError::MissingTensor { index } => write!(f, "no tensor argument {index}"),
            KernelError::MissingScalar { index } => write!(f, "no scalar argument {index}"),
            KernelError::BadAddress { index } => {
                write!(f, "tensor {index} is not inside live device memory")
            }
            KernelError::Shape { expected, got } => {
                write!(f, "a tensor has {got} elements, the kernel needs {expected}")
            }
            KernelError::Failed(c) => write!(f, "kernel-defined failure {c}"),
            KernelError::View { index, need: 0, have: 0, code } => {
                write!(f, "the view of tensor {index} names dtype code {code}, which is unknown")
            }
            KernelError::View { index, need, have, .. } => {
                write!(f, "the view of tensor {index} spans {need} bytes, its range has {have}")
            }
        }
    }
}

impl std::error::Error for KernelError {}

/// What a kernel's device entry sees: one SPMD block of one task.
#[derive(Debug)]
pub struct DeviceArgs<'a> {
    services: &'a DeviceServices,
    call: &'a DeviceCall,
}

impl<'a> DeviceArgs<'a> {
    /// Tensor arguments of the task.
    pub fn tensor_count(&self) -> usize {
        (self.call.n_tensors as usize).min(MAX_CALL_TENSORS)
    }

    /// Tensor argument `index` as `f32` elements in device memory, translated (and so
    /// bounds-checked) through the OS's services table.
    ///
    /// # Errors
    /// [`KernelError::MissingTensor`]; [`KernelError::BadAddress`] when the range is not inside
    /// one live device allocation.
    pub fn tensor(&self, index: usize) -> Result<DeviceTensor<'a>, KernelError> {
        if index >= self.tensor_count() {
            return Err(KernelError::MissingTensor { index });
        }
        let t = self.call.tensors[index];
        let len = (t.bytes / 4) as usize;
        if len == 0 {
            return Ok(DeviceTensor { ptr: std::ptr::null_mut(), len: 0, _life: PhantomData });
        }
        let p = (self.services.translate)(self.services.ctx, t.addr, t.bytes);
        if p.is_null() {
            return Err(KernelError::BadAddress { index });
        }
        Ok(DeviceTensor { ptr: p.cast(), len, _life: PhantomData })
    }

    /// Scalar argument `index`, raw.
    ///
    /// # Errors
    /// [`KernelError::MissingScalar`].
    pub fn scalar_u64(&self, index: usize) -> Result<u64, KernelError> {
        let n = (self.call.n_scalars as usize).min(MAX_CALL_SCALARS);
        self.call.scalars[..n].get(index).copied().ok_or(KernelError::MissingScalar { index })
    }

    /// Scalar argument `index` as an `f32` (its low 32 bits).
    ///
    /// # Errors
    /// [`KernelError::MissingScalar`].
    pub fn scalar_f32(&self, index: usize) -> Result<f32, KernelError> {
        self.scalar_u64(index).map(|b| f32::from_bits(b as u32))
    }

    /// This block's index in `0..block_dim()`.
    pub fn block_idx(&self) -> u32 {
        self.call.block_idx
    }

    /// The task's block count (at least 1).
    pub fn block_dim(&self) -> u32 {
        self.call.block_dim.max(1)
    }

    /// This block's contiguous share of `n` elements (the blocks tile `0..n` in order).
    pub fn block_range(&self, n: usize) -> Range<usize> {
        let bd = self.block_dim() as usize;
        let chunk = n.div_ceil(bd);
        let start = (self.call.block_idx as usize).saturating_mul(chunk).min(n);
        start..(start + chunk).min(n)
    }

    /// Checks that every tensor in `tensors` has at least `n` elements.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for the first shorter one.
    pub fn require_len(&self, tensors: &[&DeviceTensor<'_>], n: usize) -> Result<(), KernelError> {
        match tensors.iter().find(|t| t.len() < n) {
            Some(t) => Err(KernelError::Shape { expected: n, got: t.len() }),
            None => Ok(()),
        }
    }
}

/// A tensor argument in device memory: `len` `f32`s. Arguments may alias (an inout tensor, two
/// views of one tensor), so elements are read and written one at a time, never through slices.
#[derive(Debug)]
pub struct DeviceTensor<'a> {
    pub(crate) ptr: *mut f32,
    pub(crate) len: usize,
    _life: PhantomData<&'a ()>,
}

impl DeviceTensor<'_> {
    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element's address in device memory, for a kernel that works on raw memory
    /// (vectorised code, a C or C++ routine): `len()` elements from here are the tensor.
    /// Writing outside them is a kernel bug: ferry reports a write just past the end of an
    /// output tensor's allocation as the kernel's `OutOfBounds` fault, naming the kernel and
    /// its task.
    pub fn as_mut_ptr(&self) -> *mut f32 {
        self.ptr
    }

    /// Element `i`.
    ///
    /// # Panics
    /// When `i >= len()` (the trampoline turns the panic into a status; it never unwinds into
    /// ferry).
    #[track_caller]
    pub fn get(&self, i: usize) -> f32 {
        assert!(i < self.len, "element {i} of a {}-element tensor", self.len);
        // SAFETY: `translate` vouched for `len * 4` bytes at `ptr`, live for the call; `i < len`
        // (checked above); unaligned reads need no alignment.
        unsafe { self.ptr.add(i).read_unaligned() }
    }

    /// Sets element `i`.
    ///
    /// # Panics
    /// When `i >= len()`.
    #[track_caller]
    pub fn set(&self, i: usize, v: f32) {
        assert!(i < self.len, "element {i} of a {}-element tensor", self.len);
        // SAFETY: as in `get`; the range is writable device memory (the `translate` contract).
        unsafe { self.ptr.add(i).write_unaligned(v) }
    }
}

/// Scalar `index` of a host reference's scalars as an `f32`.
///
/// # Errors
/// [`KernelError::MissingScalar`].
pub fn f32_scalar(scalars: &[u64], index: usize) -> Result<f32, KernelError> {
    scalars
        .get(index)
        .map(|&b| f32::from_bits(b as u32))
        .ok_or(KernelError::MissingScalar { index })
}

/// A device entry as [`kernel_library!`](crate::kernel_library) takes it.
pub type DeviceKernel = fn(&DeviceArgs<'_>) -> Result<(), KernelError>;
/// A host reference as [`kernel_library!`](crate::kernel_library) takes it: the task's tensors
/// (distinct host buffers, in argument order) and scalars.
pub type HostKernel = fn(&mut [&mut [f32]], &[u64]) -> Result<(), KernelError>;

fn status_of(r: std::thread::Result<Result<(), KernelError>>) -> i32 {
    match r {
        Ok(Ok(())) => STATUS_OK,
        Ok(Err(e)) => e.status(),
        Err(_) => STATUS_PANIC,
    }
}

thread_local! {
    /// Set while this thread runs a kernel through a trampoline: its panics are reported as a
    /// status (and, on the device, to the device log), not printed by the panic hook.
    static IN_KERNEL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The message of the last panic caught on this thread inside a kernel.
    static PANIC_MESSAGE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Runs `f` with panics kept quiet: the first call wraps the panic hook (of this library's
/// copy of `std`) so a panic inside a kernel records its message and location for the
/// trampoline instead of printing it, and a panic anywhere else reaches the previous hook.
pub(crate) fn quietly<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_KERNEL.with(|k| k.get()) {
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-string panic payload".into());
                let at = info.location().map(|l| format!(" at {l}")).unwrap_or_default();
                PANIC_MESSAGE.with(|m| *m.borrow_mut() = format!("{message}{at}"));
            } else {
                previous(info);
            }
        }));
    });
    IN_KERNEL.with(|k| k.set(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    IN_KERNEL.with(|k| k.set(false));
    r
}

/// The device log level of a kernel's panic message (`info`: `FERRY_LOG=info` shows it).
const PANIC_LOG_LEVEL: u32 = 20;

/// The device trampoline the macro's `extern "C"` entries call: runs `f`, records its
/// [`KernelError`] in `error`, and turns a panic into [`STATUS_PANIC`] with its message in the
/// device log (never the panic hook's output, never an unwind into ferry).
///
/// # Safety
/// `services` and `call` are null or valid for the call, `error` null or valid for writes (the
/// `DeviceKernelFn` contract).
#[doc(hidden)]
pub unsafe fn __device_trampoline(
    services: *const DeviceServices,
    call: *const DeviceCall,
    error: *mut KernelErrorRecord,
    f: DeviceKernel,
) -> i32 {
    if services.is_null() || call.is_null() {
        return STATUS_INVALID_ARGUMENT;
    }
    // SAFETY: non-null and valid by the caller's contract.
    let (services, call) = unsafe { (&*services, &*call) };
    let args = DeviceArgs { services, call };
    let r = quietly(|| f(&args));
    let record = match &r {
        Ok(Err(e)) => e.record(),
        Err(_) => {
            let m = PANIC_MESSAGE.with(|m| std::mem::take(&mut *m.borrow_mut()));
            services.log_str(PANIC_LOG_LEVEL, &format!("kernel panicked: {m}"));
            KernelErrorRecord { kind: KERNEL_ERR_PANIC, ..KernelErrorRecord::default() }
        }
        Ok(Ok(())) => KernelErrorRecord::default(),
    };
    if !error.is_null() {
        // SAFETY: non-null, so valid for writes by the caller's contract.
        unsafe { error.write(record) };
    }
    status_of(r)
}

/// The host trampoline the macro's `extern "C"` entries call.
///
/// # Safety
/// `call` is null or valid, and its used tensors are distinct live buffers (the
/// `HostKernelFn` contract).
#[doc(hidden)]
pub unsafe fn __host_trampoline(call: *const HostCall, f: HostKernel) -> i32 {
    if call.is_null() {
        return STATUS_INVALID_ARGUMENT;
    }
    // SAFETY: valid by the caller's contract.
    let c = unsafe { &*call };
    let n = (c.n_tensors as usize).min(MAX_CALL_TENSORS);
    let mut bufs: [&mut [f32]; MAX_CALL_TENSORS] = Default::default();
    for (b, t) in bufs.iter_mut().zip(&c.tensors[..n]) {
        if t.len > 0 {
            if t.ptr.is_null() {
                return STATUS_INVALID_ARGUMENT;
            }
            // SAFETY: a live buffer of `len` f32s, distinct from every other argument (the
            // caller's contract), so the mutable slices do not alias.
            *b = unsafe { std::slice::from_raw_parts_mut(t.ptr, t.len as usize) };
        }
    }
    let ns = (c.n_scalars as usize).min(MAX_CALL_SCALARS);
    status_of(quietly(|| f(&mut bufs[..n], &c.scalars[..ns])))
}

/// Pads scalar dtype codes into the entry's field.
///
/// # Panics
/// At compile time, for more than [`MAX_CALL_SCALARS`] scalars.
#[doc(hidden)]
pub const fn __dtypes(d: &[u8]) -> [u8; MAX_CALL_SCALARS] {
    assert!(d.len() <= MAX_CALL_SCALARS, "a kernel takes at most 4 scalars");
    let mut out = [0u8; MAX_CALL_SCALARS];
    let mut i = 0;
    while i < d.len() {
        out[i] = d[i];
        i += 1;
    }
    out
}

/// The scalar codes [`kernel_library!`](crate::kernel_library)'s `scalars:` names: every
/// [`DType`] variant, and a view kernel's `ViewShape` and `ViewOperand`.
#[doc(hidden)]
#[allow(non_upper_case_globals)]
pub mod __scalar {
    use crate::kernel_lib::{SCALAR_VIEW_OPERAND, SCALAR_VIEW_SHAPE};
    use crate::DType;
    /// f32.
    pub const Float32: u8 = DType::Float32 as u8;
    /// f16.
    pub const Float16: u8 = DType::Float16 as u8;
    /// bf16.
    pub const BFloat16: u8 = DType::BFloat16 as u8;
    /// int8.
    pub const Int8: u8 = DType::Int8 as u8;
    /// int16.
    pub const Int16: u8 = DType::Int16 as u8;
    /// int32.
    pub const Int32: u8 = DType::Int32 as u8;
    /// int64.
    pub const Int64: u8 = DType::Int64 as u8;
    /// uint8.
    pub const UInt8: u8 = DType::UInt8 as u8;
    /// uint32.
    pub const UInt32: u8 = DType::UInt32 as u8;
    /// uint64.
    pub const UInt64: u8 = DType::UInt64 as u8;
    /// A view kernel's shape word.
    pub const ViewShape: u8 = SCALAR_VIEW_SHAPE;
    /// A view kernel's operand word.
    pub const ViewOperand: u8 = SCALAR_VIEW_OPERAND;
}

/// A pointer to a library's kernel table, for its static descriptor.
#[doc(hidden)]
#[derive(Debug)]
pub struct __Table(pub KernelLibraryDesc);
// SAFETY: the descriptor and the table it points at are immutable statics of the library.
unsafe impl Sync for __Table {}

/// Declares a kernel library: exports `ferry_kernel_library` (the descriptor) and
/// `ferry_set_services`, with one `extern "C"` device entry and host reference per kernel.
/// Invoke it once per `cdylib`.
///
/// ```text
/// kernel_library! {
///     name: "mylib",
///     kernels: [
///         { name: "saxpy", core: Aiv, tensors: 3..=3, scalars: [Float32],
///           max_blocks: 1024, device: saxpy, host: saxpy_ref },
///     ],
/// }
/// ```
///
/// `core` is `Aic` or `Aiv`; `scalars` lists a [`DType`] variant per scalar, or for a view
/// kernel `[ViewShape, ViewOperand, …]` (one `ViewOperand` per tensor: a workload fills them in
/// from its views, and [`DeviceArgs::view`] reads them); `device` is a
/// [`DeviceKernel`], `host` a [`HostKernel`]. Names take 1..=31 bytes (checked at compile time).
#[macro_export]
macro_rules! kernel_library {
    (
        name: $lib:literal,
        kernels: [ $( {
            name: $name:literal,
            core: $core:ident,
            tensors: $min:literal ..= $max:literal,
            scalars: [ $($dt:ident),* $(,)? ],
            max_blocks: $blocks:expr,
            device: $dev:path,
            host: $host:path $(,)?
        } ),+ $(,)? ] $(,)?
    ) => {
        const __FERRY_N: usize = <[&str]>::len(&[$($name),+]);
        static __FERRY_KERNELS: [$crate::KernelEntry; __FERRY_N] = [ $( $crate::KernelEntry {
            name: $crate::c_name($name),
            core: $crate::Core::$core as u32,
            min_tensors: $min,
            max_tensors: $max,
            scalar_count: <[u8]>::len(&[$($crate::__scalar::$dt),*]) as u32,
            scalar_dtypes: $crate::__dtypes(&[$($crate::__scalar::$dt),*]),
            max_blocks: $blocks,
            device: Some({
                unsafe extern "C" fn device(
                    s: *const $crate::DeviceServices,
                    c: *const $crate::DeviceCall,
                    e: *mut $crate::KernelErrorRecord,
                ) -> i32 {
                    // SAFETY: forwarded `DeviceKernelFn` contract.
                    unsafe { $crate::__device_trampoline(s, c, e, $dev) }
                }
                device
            }),
            host: Some({
                unsafe extern "C" fn host(c: *const $crate::HostCall) -> i32 {
                    // SAFETY: forwarded `HostKernelFn` contract.
                    unsafe { $crate::__host_trampoline(c, $host) }
                }
                host
            }),
        } ),+ ];

        static __FERRY_DESC: $crate::__Table = $crate::__Table($crate::KernelLibraryDesc {
            magic: $crate::KERNEL_LIB_MAGIC,
            abi_version: $crate::KERNEL_LIB_ABI_VERSION,
            desc_bytes: ::core::mem::size_of::<$crate::KernelLibraryDesc>() as u32,
            entry_bytes: ::core::mem::size_of::<$crate::KernelEntry>() as u32,
            kernel_count: __FERRY_N as u32,
            kernels: &__FERRY_KERNELS as *const [$crate::KernelEntry; __FERRY_N]
                as *const $crate::KernelEntry,
            name: $crate::c_name($lib),
        });

        /// The library's descriptor (the kernel ABI's one required export).
        ///
        /// # Safety
        /// Always safe to call; `unsafe` because it is an FFI export.
        #[no_mangle]
        pub unsafe extern "C" fn ferry_kernel_library() -> *const $crate::KernelLibraryDesc {
            &__FERRY_DESC.0
        }

        /// Stores nothing: kernels receive the OS services table with every call.
        ///
        /// # Safety
        /// `services` is null or points at a live table.
        #[no_mangle]
        pub unsafe extern "C" fn ferry_set_services(s: *const $crate::DeviceServices) -> i32 {
            if s.is_null() { $crate::STATUS_INVALID_ARGUMENT } else { $crate::STATUS_OK }
        }
    };
}
