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
}
