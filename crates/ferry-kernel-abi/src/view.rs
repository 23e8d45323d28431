//! Typed N-d views in the safe layer: how a view kernel (scalars `[ViewShape, ViewOperand, …]`
//! in [`kernel_library!`](crate::kernel_library)) reads and writes its tensors by element, in
//! their dtypes, on the device ([`DeviceArgs::view`]) and in its host reference ([`host_view`]).
//!
//! ```
//! use ferry_kernel_abi::layout::{encode_operand, encode_shape};
//! use ferry_kernel_abi::{host_view, DType};
//! // A 2x2 int8 view with row pitch 4 over two words.
//! let scalars = [encode_shape(&[2, 2]).unwrap(), encode_operand(DType::Int8, &[4, 1]).unwrap()];
//! let mut t = [f32::from_bits(0x0000_0201), f32::from_bits(0x0000_0403)];
//! let mut v = host_view(&mut t, &scalars, 0).unwrap();
//! assert_eq!((v.numel(), v.get(3)), (4, 4.0));
//! v.set(1, -1.0);
//! assert_eq!(t[0].to_bits(), 0x0000_ff01);
//! ```
use crate::layout::ViewLayout;
use crate::library::{DeviceArgs, KernelError};
use crate::DType;
use std::marker::PhantomData;
use std::vec::Vec;

/// The layout of tensor `index` from a view kernel's scalars, checked against `have` bytes.
fn layout(scalars: &[u64], index: usize, have: u64) -> Result<(DType, ViewLayout), KernelError> {
    let shape = *scalars.first().ok_or(KernelError::MissingScalar { index: 0 })?;
    let op = *scalars.get(1 + index).ok_or(KernelError::MissingScalar { index: 1 + index })?;
    let code = (op & 0xf) as u8;
    let dtype = DType::from_u8(code).ok_or(KernelError::View { index, need: 0, have: 0, code })?;
    let l = ViewLayout::decode(shape, &[op]).map_err(|_| KernelError::View {
        index,
        need: u64::MAX,
        have,
        code: 0,
    })?;
    let need = l.span_bytes(0).unwrap_or(u64::MAX);
    if need > have {
        return Err(KernelError::View { index, need, have, code: 0 });
    }
    Ok((dtype, l))
}

/// A tensor argument of a view kernel's device entry: its view's elements, in its dtype.
#[derive(Debug)]
pub struct DeviceView<'a> {
    ptr: *mut u8,
    dtype: DType,
    layout: ViewLayout,
    _life: PhantomData<&'a ()>,
}

impl<'a> DeviceArgs<'a> {
    /// Tensor argument `index` of a view kernel as its view: the shape word (scalar 0) and its
    /// operand word (scalar `1 + index`) decoded and checked against its range.
    ///
    /// # Errors
    /// As [`tensor`](DeviceArgs::tensor); [`KernelError::MissingScalar`] without the words;
    /// [`KernelError::View`] for an unknown dtype or a view its range cannot hold.
    pub fn view(&self, index: usize) -> Result<DeviceView<'a>, KernelError> {
        let t = self.tensor(index)?;
        let scalars: Vec<u64> = (0..crate::kernel_lib::MAX_CALL_SCALARS)
            .map_while(|i| self.scalar_u64(i).ok())
            .collect();
        let (dtype, layout) = layout(&scalars, index, t.len as u64 * 4)?;
        Ok(DeviceView { ptr: t.ptr.cast(), dtype, layout, _life: PhantomData })
    }
}

impl DeviceView<'_> {
    /// Elements of the view.
    pub fn numel(&self) -> usize {
        self.layout.numel() as usize
    }

    /// Its dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Its shape, outermost first.
    pub fn shape(&self) -> &[u64] {
        self.layout.shape()
    }

    fn at(&self, k: usize) -> *mut u8 {
        assert!(k < self.numel(), "element {k} of a {}-element view", self.numel());
        let byte = self.layout.element(0, k as u64) as usize * self.dtype.size();
        self.ptr.wrapping_add(byte)
    }

    /// The bits of the view's `k`-th element (row-major), zero-extended.
    ///
    /// # Panics
    /// When `k >= numel()` (the trampoline turns the panic into a status).
    #[track_caller]
    pub fn load(&self, k: usize) -> u64 {
        let p = self.at(k);
        let mut b = [0u8; 8];
        // SAFETY: `view` checked the range (which `translate` vouched for, live for the call)
        // holds every element of the view, and `k < numel()`; the element's `size` bytes are
        // read as bytes, so no alignment is needed.
        unsafe { core::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), self.dtype.size()) };
        u64::from_le_bytes(b)
    }

    /// Stores the view's `k`-th element (the low bytes of `bits`); only its own bytes change.
    ///
    /// # Panics
    /// When `k >= numel()`.
    #[track_caller]
    pub fn store(&self, k: usize, bits: u64) {
        let p = self.at(k);
        // SAFETY: as in `load`; the range is writable device memory (the `translate` contract).
        unsafe {
            core::ptr::copy_nonoverlapping(bits.to_le_bytes().as_ptr(), p, self.dtype.size())
        };
    }

    /// Element `k` as an `f32` ([`DType::to_f32`]).
    #[track_caller]
    pub fn get(&self, k: usize) -> f32 {
        self.dtype.to_f32(self.load(k))
    }

    /// Sets element `k` to the nearest value of the dtype ([`DType::from_f32`]).
    #[track_caller]
    pub fn set(&self, k: usize, v: f32) {
        self.store(k, self.dtype.from_f32(v))
    }
}

/// A tensor argument of a view kernel's host reference: its view over the host buffer.
#[derive(Debug)]
pub struct HostView<'b> {
    words: &'b mut [f32],
    dtype: DType,
    layout: ViewLayout,
}

/// Tensor `index` of a view kernel's host reference (`t`, its host buffer) as its view, from
/// the same scalars the device entry reads.
///
/// # Errors
/// As [`DeviceArgs::view`].
pub fn host_view<'b>(
    t: &'b mut [f32],
    scalars: &[u64],
    index: usize,
) -> Result<HostView<'b>, KernelError> {
    let (dtype, layout) = layout(scalars, index, t.len() as u64 * 4)?;
    Ok(HostView { words: t, dtype, layout })
}

impl HostView<'_> {
    /// Elements of the view.
    pub fn numel(&self) -> usize {
        self.layout.numel() as usize
    }

    /// Its dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    fn byte(&self, k: usize) -> usize {
        assert!(k < self.numel(), "element {k} of a {}-element view", self.numel());
        self.layout.element(0, k as u64) as usize * self.dtype.size()
    }

    /// The bits of the view's `k`-th element (row-major), zero-extended.
    ///
    /// # Panics
    /// When `k >= numel()`.
    #[track_caller]
    pub fn load(&self, k: usize) -> u64 {
        let b = self.byte(k);
        (0..self.dtype.size()).fold(0u64, |acc, i| {
            let w = self.words[(b + i) / 4].to_bits();
            acc | u64::from((w >> (8 * ((b + i) % 4))) as u8) << (8 * i)
        })
    }

    /// Stores the view's `k`-th element (the low bytes of `bits`).
    ///
    /// # Panics
    /// When `k >= numel()`.
    #[track_caller]
    pub fn store(&mut self, k: usize, bits: u64) {
        let b = self.byte(k);
        for i in 0..self.dtype.size() {
            let (w, sh) = ((b + i) / 4, 8 * ((b + i) % 4));
            let old = self.words[w].to_bits() & !(0xff << sh);
            self.words[w] = f32::from_bits(old | u32::from((bits >> (8 * i)) as u8) << sh);
        }
    }

    /// Element `k` as an `f32`.
    #[track_caller]
    pub fn get(&self, k: usize) -> f32 {
        self.dtype.to_f32(self.load(k))
    }

    /// Sets element `k` to the nearest value of the dtype.
    #[track_caller]
    pub fn set(&mut self, k: usize, v: f32) {
        let bits = self.dtype.from_f32(v);
        self.store(k, bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{encode_operand, encode_shape};
    use std::string::ToString;

    #[test]
    fn a_host_view_refuses_what_its_buffer_cannot_hold() {
        let s = [encode_shape(&[3, 4]).unwrap(), encode_operand(DType::BFloat16, &[4, 1]).unwrap()];
        let mut t = [0.0f32; 6]; // 12 bf16: exactly the view
        let mut v = host_view(&mut t, &s, 0).unwrap();
        v.set(11, 1.5);
        assert_eq!(v.get(11), 1.5);
        assert_eq!(t[5].to_bits() >> 16, 0x3fc0, "element 11 is the last word's high half");
        let mut short = [0.0f32; 5];
        assert_eq!(
            host_view(&mut short, &s, 0).unwrap_err(),
            KernelError::View { index: 0, need: 24, have: 20, code: 0 }
        );
        assert_eq!(
            host_view(&mut short, &[s[0], 0xf], 0).unwrap_err(),
            KernelError::View { index: 0, need: 0, have: 0, code: 15 }
        );
        assert_eq!(
            host_view(&mut short, &s, 1).unwrap_err(),
            KernelError::MissingScalar { index: 2 }
        );
        let e = KernelError::View { index: 2, need: 0, have: 0, code: 15 };
        assert_eq!(e.record().index, 2 | 15 << 16);
        assert_eq!(e.to_string(), "the view of tensor 2 names dtype code 15, which is unknown");
    }
}
