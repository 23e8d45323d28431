//! Typed N-d views: how a kernel that takes views learns each tensor argument's dtype, shape and
//! strides.
//!
//! A tensor argument reaches a kernel as a device range (an address and a byte count). A
//! *view kernel* reads that range as an N-d view described by its scalars, which the workload
//! compiler (or an orchestration) fills in:
//!
//! | scalar | what |
//! |---|---|
//! | 0 | the **shape word**: the view's shape, shared by every tensor argument |
//! | `1 + i` | the **operand word** of tensor argument `i`: its dtype and its strides |
//!
//! Each argument's range starts at its view's first element; element `(i0, …, in-1)` of
//! argument `k` lies at byte `size(dtype_k) · Σ i_d · stride_k,d` of the range, so the range
//! must hold [`extent`] elements: a kernel checks that ([`ViewLayout::check_fits`]) before it
//! touches one.
//!
//! # Encoding
//!
//! Shape word: bits 0..2 hold `ndims - 1` (1..=[`MAX_VIEW_DIMS`] dimensions), then the
//! dimensions, outermost first, [`SHAPE_BITS`]`[ndims - 1]` bits each from bit 2. Operand word:
//! bits 0..4 hold the `DType` code, then the strides (in elements, outermost first),
//! [`STRIDE_BITS`]`[ndims - 1]` bits each from bit 4. A one-dimensional shape word is `len * 4`,
//! and a contiguous one-dimensional operand word is `16 | dtype`.
//!
//! ```
//! use ferry_kernel_abi::layout::{self, ViewLayout};
//! use ferry_kernel_abi::DType;
//! let shape = layout::encode_shape(&[3, 4]).unwrap();
//! let op = layout::encode_operand(DType::Int8, &[8, 1]).unwrap();
//! let l = ViewLayout::decode(shape, &[op]).unwrap();
//! assert_eq!(l.numel(), 12);
//! assert_eq!(l.operand(0).dtype, DType::Int8);
//! assert_eq!(layout::extent(l.shape(), &l.operand(0).strides[..2]), Some(2 * 8 + 3 + 1));
//! ```
use crate::dtype::DType;

/// Most dimensions of a view.
pub const MAX_VIEW_DIMS: usize = 4;
/// Bits per dimension in a shape word, by `ndims - 1`.
pub const SHAPE_BITS: [u32; MAX_VIEW_DIMS] = [62, 31, 20, 15];
/// Bits per stride in an operand word, by `ndims - 1`.
pub const STRIDE_BITS: [u32; MAX_VIEW_DIMS] = [60, 30, 20, 15];
/// Most operands (tensor arguments) a view kernel's scalars describe: the scalars after the
/// shape word.
pub const MAX_OPERANDS: usize = crate::kernel_lib::MAX_CALL_SCALARS - 1;

/// Why a view cannot be encoded, or words do not decode to one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewLayoutError {
    /// No dimensions, or more than [`MAX_VIEW_DIMS`].
    Dims {
        /// Dimensions given.
        ndims: usize,
    },
    /// A dimension does not fit its field.
    DimTooLarge {
        /// Which dimension.
        dim: usize,
        /// Its value.
        value: u64,
        /// The largest the field holds.
        max: u64,
    },
    /// A stride does not fit its field.
    StrideTooLarge {
        /// Which dimension.
        dim: usize,
        /// Its value.
        value: u64,
        /// The largest the field holds.
        max: u64,
    },
    /// The strides' count differs from the shape's.
    StrideCount {
        /// Dimensions of the shape.
        ndims: usize,
        /// Strides given.
        strides: usize,
    },
    /// An operand word's dtype code is not a `DType`.
    Dtype {
        /// The code.
        code: u8,
    },
    /// More operands than the scalars describe, or fewer scalars than operands.
    Operands {
        /// Operands asked for.
        operands: usize,
    },
    /// The view's elements overflow 64 bits.
    Overflow,
    /// A range is too short for its view.
    Range {
        /// The argument.
        operand: usize,
        /// Bytes the view spans.
        need: u64,
        /// Bytes the range has.
        have: u64,
    },
}

impl core::fmt::Display for ViewLayoutError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Dims { ndims } => {
                write!(f, "a view has 1..={MAX_VIEW_DIMS} dimensions, not {ndims}")
            }
            Self::DimTooLarge { dim, value, max } => {
                write!(f, "dimension {dim} is {value}, a view of this rank holds at most {max}")
            }
            Self::StrideTooLarge { dim, value, max } => {
                write!(f, "stride {dim} is {value}, a view of this rank holds at most {max}")
            }
            Self::StrideCount { ndims, strides } => {
                write!(f, "{strides} strides for {ndims} dimensions")
            }
            Self::Dtype { code } => write!(f, "dtype code {code} is unknown"),
            Self::Operands { operands } => {
                write!(f, "{operands} operands, the view scalars describe at most {MAX_OPERANDS}")
            }
            Self::Overflow => f.write_str("the view's element count overflows"),
            Self::Range { operand, need, have } => {
                write!(f, "tensor {operand} spans {need} bytes of its view, its range has {have}")
            }
        }
    }
}

impl core::error::Error for ViewLayoutError {}

fn field_max(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

/// The shape word of `dims` (outermost first).
///
/// # Errors
/// [`ViewLayoutError::Dims`], [`ViewLayoutError::DimTooLarge`].
pub fn encode_shape(dims: &[u64]) -> Result<u64, ViewLayoutError> {
    let n = dims.len();
    if n == 0 || n > MAX_VIEW_DIMS {
        return Err(ViewLayoutError::Dims { ndims: n });
    }
    let bits = SHAPE_BITS[n - 1];
    let mut w = (n - 1) as u64;
    for (i, &d) in dims.iter().enumerate() {
        if d > field_max(bits) {
            return Err(ViewLayoutError::DimTooLarge { dim: i, value: d, max: field_max(bits) });
        }
        w |= d << (2 + bits * i as u32);
    }
    Ok(w)
}

/// The operand word of a view of `dtype` with `strides` (elements, outermost first).
///
/// # Errors
/// [`ViewLayoutError::Dims`], [`ViewLayoutError::StrideTooLarge`].
pub fn encode_operand(dtype: DType, strides: &[u64]) -> Result<u64, ViewLayoutError> {
    let n = strides.len();
    if n == 0 || n > MAX_VIEW_DIMS {
        return Err(ViewLayoutError::Dims { ndims: n });
    }
    let bits = STRIDE_BITS[n - 1];
    let mut w = dtype as u64;
    for (i, &s) in strides.iter().enumerate() {
        if s > field_max(bits) {
            return Err(ViewLayoutError::StrideTooLarge { dim: i, value: s, max: field_max(bits) });
        }
        w |= s << (4 + bits * i as u32);
    }
    Ok(w)
}

/// Elements a view of `shape` with `strides` spans from its first element to its last, both
/// included (0 for an empty view); `None` on overflow.
pub fn extent(shape: &[u64], strides: &[u64]) -> Option<u64> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape
        .iter()
        .zip(strides)
        .try_fold(1u64, |acc, (&d, &s)| acc.checked_add((d - 1).checked_mul(s)?))
}

/// One operand of a decoded [`ViewLayout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperandLayout {
    /// Its element type.
    pub dtype: DType,
    /// Its strides in elements (the first `ndims` used).
    pub strides: [u64; MAX_VIEW_DIMS],
}

/// A decoded shape word and operand words: what a view kernel reads from its scalars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewLayout {
    ndims: usize,
    dims: [u64; MAX_VIEW_DIMS],
    operands: [OperandLayout; MAX_OPERANDS],
    n_operands: usize,
}

impl ViewLayout {
    /// Decodes the shape word and one operand word per tensor argument.
    ///
    /// # Errors
    /// [`ViewLayoutError::Operands`] for more than [`MAX_OPERANDS`], [`ViewLayoutError::Dtype`] for an
    /// unknown dtype code. (The fields are narrow enough that the element count never
    /// overflows: at most 2^62.)
    pub fn decode(shape: u64, operands: &[u64]) -> Result<ViewLayout, ViewLayoutError> {
        if operands.len() > MAX_OPERANDS {
            return Err(ViewLayoutError::Operands { operands: operands.len() });
        }
        let ndims = (shape & 3) as usize + 1;
        let (sb, tb) = (SHAPE_BITS[ndims - 1], STRIDE_BITS[ndims - 1]);
        let mut dims = [0u64; MAX_VIEW_DIMS];
        for (i, d) in dims[..ndims].iter_mut().enumerate() {
            *d = (shape >> (2 + sb * i as u32)) & field_max(sb);
        }
        let empty = OperandLayout { dtype: DType::Float32, strides: [0; MAX_VIEW_DIMS] };
        let mut out = [empty; MAX_OPERANDS];
        for (o, &w) in out.iter_mut().zip(operands) {
            let code = (w & 0xf) as u8;
            o.dtype = DType::from_u8(code).ok_or(ViewLayoutError::Dtype { code })?;
            for (i, s) in o.strides[..ndims].iter_mut().enumerate() {
                *s = (w >> (4 + tb * i as u32)) & field_max(tb);
            }
        }
        Ok(ViewLayout { ndims, dims, operands: out, n_operands: operands.len() })
    }

    /// The shape, outermost first.
    pub fn shape(&self) -> &[u64] {
        &self.dims[..self.ndims]
    }

    /// Elements of the view (the product of the shape).
    pub fn numel(&self) -> u64 {
        self.shape().iter().product()
    }

    /// OperandLayout `i` (zeros and f32 past the decoded ones).
    pub fn operand(&self, i: usize) -> OperandLayout {
        self.operands.get(i).copied().unwrap_or(self.operands[0])
    }

    /// Operands decoded.
    pub fn operands(&self) -> usize {
        self.n_operands
    }

    /// Bytes operand `i`'s view spans from its first element to the end of its last.
    ///
    /// # Errors
    /// [`ViewLayoutError::Overflow`].
    pub fn span_bytes(&self, i: usize) -> Result<u64, ViewLayoutError> {
        let o = self.operand(i);
        extent(self.shape(), &o.strides[..self.ndims])
            .and_then(|e| e.checked_mul(o.dtype.size() as u64))
            .ok_or(ViewLayoutError::Overflow)
    }

    /// Checks that every operand's range (`ranges[i]` bytes) holds its view.
    ///
    /// # Errors
    /// [`ViewLayoutError::Range`] for the first that does not, [`ViewLayoutError::Operands`] when the
    /// counts differ.
    pub fn check_fits(&self, ranges: &[u64]) -> Result<(), ViewLayoutError> {
        if ranges.len() != self.n_operands {
            return Err(ViewLayoutError::Operands { operands: ranges.len() });
        }
        for (i, &have) in ranges.iter().enumerate() {
            let need = self.span_bytes(i)?;
            if need > have {
                return Err(ViewLayoutError::Range { operand: i, need, have });
            }
        }
        Ok(())
    }

    /// Element offset, in operand `i`'s elements, of the view's `k`-th element in row-major
    /// order (the last dimension fastest); `k` below [`numel`](Self::numel).
    pub fn element(&self, i: usize, mut k: u64) -> u64 {
        let o = self.operand(i);
        let mut at = 0u64;
        for d in (0..self.ndims).rev() {
            let n = self.dims[d].max(1);
            at = at.wrapping_add((k % n).wrapping_mul(o.strides[d]));
            k /= n;
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_at_every_rank() {
        for n in 1..=MAX_VIEW_DIMS {
            let dmax = field_max(SHAPE_BITS[n - 1]);
            let smax = field_max(STRIDE_BITS[n - 1]);
            let dims: [u64; 4] = [2, 3, 5, 7];
            let strides: [u64; 4] = [smax, 1, smax - 1, 4];
            let shape = encode_shape(&dims[..n]).unwrap();
            let a = encode_operand(DType::BFloat16, &strides[..n]).unwrap();
            let b = encode_operand(DType::UInt8, &[1; 4][..n]).unwrap();
            let l = ViewLayout::decode(shape, &[a, b]).unwrap();
            assert_eq!(l.shape(), &dims[..n]);
            assert_eq!(&l.operand(0).strides[..n], &strides[..n]);
            assert_eq!((l.operand(0).dtype, l.operand(1).dtype), (DType::BFloat16, DType::UInt8));
            assert_eq!(
                encode_shape(&[dmax + 1; 4][..n]),
                Err(ViewLayoutError::DimTooLarge { dim: 0, value: dmax + 1, max: dmax })
            );
            assert_eq!(
                encode_operand(DType::Int8, &[smax + 1; 4][..n]),
                Err(ViewLayoutError::StrideTooLarge { dim: 0, value: smax + 1, max: smax })
            );
            assert_eq!(
                ViewLayout::decode(encode_shape(&[dmax; 4][..n]).unwrap(), &[]).unwrap().shape()[0],
                dmax
            );
        }
        assert_eq!(encode_shape(&[]), Err(ViewLayoutError::Dims { ndims: 0 }));
        assert_eq!(encode_shape(&[1; 5]), Err(ViewLayoutError::Dims { ndims: 5 }));
        // The documented one-dimensional forms.
        assert_eq!(encode_shape(&[1000]), Ok(4000));
        assert_eq!(encode_operand(DType::Int32, &[1]), Ok(16 | DType::Int32 as u64));
    }

    #[test]
    fn decode_refuses_what_is_not_a_view() {
        assert_eq!(ViewLayout::decode(4, &[0xf]), Err(ViewLayoutError::Dtype { code: 15 }));
        assert_eq!(ViewLayout::decode(4, &[0; 4]), Err(ViewLayoutError::Operands { operands: 4 }));
        // The fields are narrow enough that no shape word's element count overflows.
        for n in 1..=MAX_VIEW_DIMS {
            let max = [field_max(SHAPE_BITS[n - 1]); 4];
            let l = ViewLayout::decode(encode_shape(&max[..n]).unwrap(), &[]).unwrap();
            assert_eq!(l.shape(), &max[..n]);
            assert!(l.shape().iter().try_fold(1u64, |p, &d| p.checked_mul(d)).is_some());
        }
    }

    #[test]
    fn extents_offsets_and_fit() {
        // A 3x4 view with row pitch 8 over int8: spans 2*8 + 3 + 1 elements.
        let shape = encode_shape(&[3, 4]).unwrap();
        let op = encode_operand(DType::Int8, &[8, 1]).unwrap();
        let wide = encode_operand(DType::Int32, &[4, 1]).unwrap();
        let l = ViewLayout::decode(shape, &[op, wide]).unwrap();
        assert_eq!((l.span_bytes(0), l.span_bytes(1)), (Ok(20), Ok(48)));
        assert_eq!(l.check_fits(&[20, 48]), Ok(()));
        assert_eq!(
            l.check_fits(&[19, 48]),
            Err(ViewLayoutError::Range { operand: 0, need: 20, have: 19 })
        );
        assert_eq!(l.check_fits(&[20]), Err(ViewLayoutError::Operands { operands: 1 }));
        let offs: [u64; 12] = core::array::from_fn(|k| l.element(0, k as u64));
        assert_eq!(offs, [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19]);
        assert_eq!(l.element(1, 5), 5);
        assert_eq!(extent(&[0, 4], &[8, 1]), Some(0));
        assert_eq!(extent(&[u64::MAX, 2], &[2, 1]), None);
        // A transposed view: strides (1, 3) over a 3x4 (rows of 3) buffer.
        let t = ViewLayout::decode(
            encode_shape(&[4, 3]).unwrap(),
            &[encode_operand(DType::Float32, &[1, 4]).unwrap()],
        )
        .unwrap();
        assert_eq!(t.element(0, 1), 4);
        assert_eq!(t.element(0, 3), 1);
    }
}
