//! The element and scalar types ferry's records and kernel tables name by code.

/// Element types of tensor arguments, with their codes in records.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    Float32 = 0,
    /// 16-bit float.
    Float16 = 1,
    /// bfloat16.
    BFloat16 = 2,
    /// 8-bit signed integer.
    Int8 = 3,
    /// 16-bit signed integer.
    Int16 = 4,
    /// 32-bit signed integer.
    Int32 = 5,
    /// 64-bit signed integer.
    Int64 = 6,
    /// 8-bit unsigned integer.
    UInt8 = 7,
    /// 32-bit unsigned integer.
    UInt32 = 8,
    /// 64-bit unsigned integer.
    UInt64 = 9,
}

impl DType {
    /// Every dtype, in code order.
    pub const ALL: [DType; 10] = [
        Self::Float32,
        Self::Float16,
        Self::BFloat16,
        Self::Int8,
        Self::Int16,
        Self::Int32,
        Self::Int64,
        Self::UInt8,
        Self::UInt32,
        Self::UInt64,
    ];

    /// Decodes a code; `None` when unknown.
    pub const fn from_u8(v: u8) -> Option<Self> {
        if (v as usize) < Self::ALL.len() {
            Some(Self::ALL[v as usize])
        } else {
            None
        }
    }

    /// The name the output files use (`"FLOAT32"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Float32 => "FLOAT32",
            Self::Float16 => "FLOAT16",
            Self::BFloat16 => "BFLOAT16",
            Self::Int8 => "INT8",
            Self::Int16 => "INT16",
            Self::Int32 => "INT32",
            Self::Int64 => "INT64",
            Self::UInt8 => "UINT8",
            Self::UInt32 => "UINT32",
            Self::UInt64 => "UINT64",
        }
    }

    /// Parses [`DType::name`] back.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            Self::Int8 | Self::UInt8 => 1,
            Self::Float16 | Self::BFloat16 | Self::Int16 => 2,
            Self::Float32 | Self::Int32 | Self::UInt32 => 4,
            Self::Int64 | Self::UInt64 => 8,
        }
    }

    /// The name workload files use (`"f32"`, `"bf16"`, `"int8"`, …).
    pub const fn short_name(self) -> &'static str {
        match self {
            Self::Float32 => "f32",
            Self::Float16 => "f16",
            Self::BFloat16 => "bf16",
            Self::Int8 => "int8",
            Self::Int16 => "int16",
            Self::Int32 => "int32",
            Self::Int64 => "int64",
            Self::UInt8 => "uint8",
            Self::UInt32 => "uint32",
            Self::UInt64 => "uint64",
        }
    }

    /// Parses [`DType::short_name`] back.
    pub fn from_short_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.short_name() == s)
    }

    /// Whether the type is a floating-point one (f32, f16, bf16).
    pub const fn is_float(self) -> bool {
        matches!(self, Self::Float32 | Self::Float16 | Self::BFloat16)
    }

    /// Whether the type is a signed integer.
    pub const fn is_signed_int(self) -> bool {
        matches!(self, Self::Int8 | Self::Int16 | Self::Int32 | Self::Int64)
    }

    /// The element whose little-endian bits are the low [`size`](Self::size) bytes of `bits`,
    /// as an `f32`: floats widen exactly (f16 and bf16 are subsets of f32), integers convert as
    /// Rust's `as` does (nearest, so a 64-bit integer may round).
    pub fn to_f32(self, bits: u64) -> f32 {
        match self {
            Self::Float32 => f32::from_bits(bits as u32),
            Self::Float16 => f16_to_f32(bits as u16),
            Self::BFloat16 => bf16_to_f32(bits as u16),
            Self::UInt8 | Self::UInt32 | Self::UInt64 => self.to_u64(bits) as f32,
            _ => self.to_i64(bits) as f32,
        }
    }

    /// The element's bits as a signed 64-bit integer: signed types sign-extend, unsigned ones
    /// zero-extend (a `uint64` above `i64::MAX` wraps), floats convert toward zero, saturating
    /// (NaN is 0).
    pub fn to_i64(self, bits: u64) -> i64 {
        match self {
            Self::Int8 => bits as u8 as i8 as i64,
            Self::Int16 => bits as u16 as i16 as i64,
            Self::Int32 => bits as u32 as i32 as i64,
            Self::Int64 | Self::UInt64 => bits as i64,
            Self::UInt8 | Self::UInt32 => self.to_u64(bits) as i64,
            _ => self.to_f32(bits) as i64,
        }
    }

    /// The low [`size`](Self::size) bytes of `bits`, zero-extended.
    const fn to_u64(self, bits: u64) -> u64 {
        match self.size() {
            8 => bits,
            n => bits & ((1u64 << (8 * n)) - 1),
        }
    }

    /// The bits (low [`size`](Self::size) bytes) of the element nearest `v`: floats round to
    /// nearest, ties to even (NaN stays NaN, overflow is infinity); integers convert toward zero
    /// and saturate at the type's range (NaN is 0), as Rust's `as` does.
    pub fn from_f32(self, v: f32) -> u64 {
        match self {
            Self::Float32 => u64::from(v.to_bits()),
            Self::Float16 => u64::from(f32_to_f16(v)),
            Self::BFloat16 => u64::from(f32_to_bf16(v)),
            Self::Int8 => u64::from(v as i8 as u8),
            Self::Int16 => u64::from(v as i16 as u16),
            Self::Int32 => u64::from(v as i32 as u32),
            Self::Int64 => v as i64 as u64,
            Self::UInt8 => u64::from(v as u8),
            Self::UInt32 => u64::from(v as u32),
            Self::UInt64 => v as u64,
        }
    }

    /// The bits of the integer `v` in this type: integers keep its low bytes (two's complement
    /// wrap-around, as integer arithmetic on the device does), floats take the nearest value.
    pub fn from_i64(self, v: i64) -> u64 {
        if self.is_float() {
            self.from_f32(v as f32)
        } else {
            self.to_u64(v as u64)
        }
    }
}

/// bfloat16 bits to `f32` (exact: bf16 is the top half of an f32).
pub const fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `f32` to bfloat16 bits, rounding to nearest, ties to even; NaN stays a (quiet) NaN.
pub const fn f32_to_bf16(v: f32) -> u16 {
    let x = v.to_bits();
    if v.is_nan() {
        return ((x >> 16) as u16) | 0x0040;
    }
    let round_bit = 0x0000_8000u32;
    if x & round_bit != 0 && x & (3 * round_bit - 1) != 0 {
        (x >> 16) as u16 + 1
    } else {
        (x >> 16) as u16
    }
}

/// IEEE binary16 bits to `f32` (exact).
pub const fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x03ff) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: normalise the mantissa into f32's implicit-one form.
            let shift = m.leading_zeros() - 21; // bits to the implicit one at bit 10
            let m = (m << shift) & 0x03ff;
            sign | ((127 - 15 + 1 - shift) << 23) | (m << 13)
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7fc0_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// `f32` to IEEE binary16 bits, rounding to nearest, ties to even; values past the range are
/// infinity, NaN stays a (quiet) NaN.
pub const fn f32_to_f16(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x007f_ffff;
    if exp == 0xff {
        let nan = if man != 0 { 0x0200 | (man >> 13) as u16 } else { 0 };
        return sign | 0x7c00 | nan;
    }
    let half_exp = exp - 127 + 15;
    if half_exp >= 0x1f {
        return sign | 0x7c00;
    }
    if half_exp <= 0 {
        // A subnormal half (or zero): shift the mantissa, implicit one included, into place.
        if 14 - half_exp > 24 {
            return sign;
        }
        let man = man | 0x0080_0000;
        let shift = (14 - half_exp) as u32;
        let mut half_man = man >> shift;
        let round_bit = 1u32 << (shift - 1);
        if man & round_bit != 0 && man & (3 * round_bit - 1) != 0 {
            half_man += 1;
        }
        return sign | half_man as u16;
    }
    let bits = ((half_exp as u32) << 10) | (man >> 13);
    let round_bit = 0x0000_1000u32;
    // A carry out of the mantissa correctly bumps the exponent (up to infinity).
    let bits = if man & round_bit != 0 && man & (3 * round_bit - 1) != 0 { bits + 1 } else { bits };
    sign | bits as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for (i, d) in DType::ALL.into_iter().enumerate() {
            assert_eq!(d as usize, i);
            assert_eq!(DType::from_u8(i as u8), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_u8(DType::ALL.len() as u8), None);
        assert_eq!(DType::from_name("FLOAT64"), None);
    }

    #[test]
    fn short_names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_short_name(d.short_name()), Some(d));
        }
        assert_eq!(DType::from_short_name("f64"), None);
        assert_eq!(DType::from_short_name("FLOAT32"), None);
    }

    /// Every f16 and bf16 widens exactly as the `half` crate widens it.
    #[test]
    fn half_floats_widen_like_the_half_crate() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{h:#x}");
            // `half` quiets a signalling NaN as it widens; a bf16 is the top of its f32.
            let (got, want) = (bf16_to_f32(h), half::bf16::from_bits(h).to_f32());
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{h:#x}");
            assert_eq!(got.to_bits(), u32::from(h) << 16);
        }
    }

    /// f32 narrows to f16 and bf16 as the `half` crate narrows it (round to nearest, ties to
    /// even), over a sweep of bit patterns that covers every exponent, the subnormal and overflow
    /// edges and the rounding ties.
    #[test]
    fn f32_narrows_like_the_half_crate() {
        let check = |x: u32| {
            let v = f32::from_bits(x);
            let (g16, w16) = (f32_to_f16(v), half::f16::from_f32(v).to_bits());
            let (gb, wb) = (f32_to_bf16(v), half::bf16::from_f32(v).to_bits());
            if v.is_nan() {
                assert!(f16_to_f32(g16).is_nan() && bf16_to_f32(gb).is_nan(), "{x:#x}");
            } else {
                assert_eq!(g16, w16, "f16 of {x:#x} ({v:e})");
                assert_eq!(gb, wb, "bf16 of {x:#x} ({v:e})");
            }
        };
        let mut x = 0u32;
        loop {
            check(x);
            // Ties and their neighbours in both formats' rounding positions.
            for low in [0x1000, 0x0fff, 0x1001, 0x3000, 0x8000, 0x7fff, 0x8001, 0x18000] {
                check((x & !0x1_ffff) | low);
            }
            match x.checked_add(0x0001_3579) {
                Some(n) => x = n,
                None => break,
            }
        }
    }

    #[test]
    fn element_conversions() {
        use DType::*;
        assert_eq!(Int8.to_i64(0xff), -1);
        assert_eq!(UInt8.to_i64(0xff), 255);
        assert_eq!(Int32.to_i64(0x8000_0000), i64::from(i32::MIN));
        assert_eq!(Int8.from_i64(130), 130u64 & 0xff, "integers wrap");
        assert_eq!(Int8.from_f32(300.0), 127, "floats saturate into integers");
        assert_eq!(Int8.from_f32(-300.0), 0x80);
        assert_eq!(UInt8.from_f32(-1.0), 0);
        assert_eq!(Int32.from_f32(f32::NAN), 0);
        assert_eq!(Int32.from_f32(-2.7), (-2i32) as u32 as u64, "toward zero");
        assert_eq!(BFloat16.to_f32(BFloat16.from_f32(1.0 + 1.0 / 256.0)), 1.0, "tie to even");
        assert_eq!(Float16.to_f32(Float16.from_i64(2049)), 2048.0);
        assert_eq!(Float32.from_f32(0.5), u64::from(0.5f32.to_bits()));
        for d in DType::ALL {
            let one = if d.is_float() { d.from_f32(1.0) } else { d.from_i64(1) };
            assert_eq!(d.to_f32(one), 1.0, "{d:?}");
            assert_eq!(d.to_i64(one), 1, "{d:?}");
        }
    }
}
