//! The decoder of device-written record buffers: never trusts the bytes, never panics.

use core::fmt;

use super::*;
use crate::launch::AbiRecord;

/// Why device-written bytes are not a valid buffer or record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordDecodeError {
    /// The buffer is shorter than a buffer of this capacity.
    TooShort {
        /// Record type.
        record: &'static str,
        /// Bytes a buffer of the capacity needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The buffer's count exceeds its capacity.
    CountOverCapacity {
        /// Record type.
        record: &'static str,
        /// Count the device wrote.
        count: u32,
        /// Records the buffer holds.
        capacity: usize,
    },
    /// A field holds a value outside its enumeration or range.
    BadField {
        /// Record type.
        record: &'static str,
        /// Field name.
        field: &'static str,
        /// The raw value.
        value: u64,
    },
}

impl fmt::Display for RecordDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort { record, expected, actual } => {
                write!(f, "{record} buffer is {actual} bytes, needs {expected}")
            }
            Self::CountOverCapacity { record, count, capacity } => {
                write!(f, "{record} buffer count {count} exceeds its capacity {capacity}")
            }
            Self::BadField { record, field, value } => {
                write!(f, "{record}.{field} has invalid value {value}")
            }
        }
    }
}

impl core::error::Error for RecordDecodeError {}

/// A record a DFX lane writes, with its buffer geometry and field validation.
pub trait DeviceRecord: AbiRecord {
    /// Where this record's buffers keep their count.
    const PLACEMENT: BufferCountPlacement;
    /// Records per buffer in the original runtime's sizing.
    const RECORDS_PER_BUFFER: usize;

    /// Checks every enumerated or bounded field.
    ///
    /// # Errors
    ///
    /// [`RecordDecodeError::BadField`] naming the first field out of range.
    fn validate(&self) -> Result<(), RecordDecodeError> {
        Ok(())
    }

    /// Size of a buffer holding `capacity` records.
    fn buffer_size(capacity: usize) -> usize {
        Self::PLACEMENT.buffer_size(Self::SIZE, capacity)
    }
}

fn bad<R: AbiRecord>(field: &'static str, value: u64) -> Result<(), RecordDecodeError> {
    Err(RecordDecodeError::BadField { record: R::NAME, field, value })
}

impl DeviceRecord for AicpuTaskRecord {
    const PLACEMENT: BufferCountPlacement = BufferCountPlacement::AfterRecords;
    const RECORDS_PER_BUFFER: usize = AICPU_TASK_RECORDS_PER_BUFFER;
}

impl DeviceRecord for AicoreTaskRecord {
    const PLACEMENT: BufferCountPlacement = BufferCountPlacement::AfterRecords;
    const RECORDS_PER_BUFFER: usize = AICORE_TASK_RECORDS_PER_BUFFER;
}

impl DeviceRecord for SchedPhaseRecord {
    const PLACEMENT: BufferCountPlacement = BufferCountPlacement::AfterRecords;
    const RECORDS_PER_BUFFER: usize = SCHED_PHASE_RECORDS_PER_BUFFER;
    fn validate(&self) -> Result<(), RecordDecodeError> {
        if SchedPhaseKind::from_u32(self.kind).is_none() {
            return bad::<Self>("kind", self.kind.into());
        }
        Ok(())
    }
}

impl DeviceRecord for OrchPhaseRecord {
    const PLACEMENT: BufferCountPlacement = BufferCountPlacement::AfterRecords;
    const RECORDS_PER_BUFFER: usize = ORCH_PHASE_RECORDS_PER_BUFFER;
}

impl DeviceRecord for PmuRecord {
    const PLACEMENT: BufferCountPlacement = BufferCountPlacement::AfterRecords;
    const RECORDS_PER_BUFFER: usize = PMU_RECORDS_PER_BUFFER;
    fn validate(&self) -> Result<(), RecordDecodeError> {
        if self.core_type != CORE_TYPE_AIC && self.core_type != CORE_TYPE_AIV {
            return bad::<Self>("core_type", self.core_type as u32 as u64);
        }
        Ok(())
    }
}

impl DeviceRecord for ScopeStatsRecord {
    const PLACEMENT: BufferCountPlacement = BufferCountPlacement::FirstPadded64;
    const RECORDS_PER_BUFFER: usize = SCOPE_STATS_RECORDS_PER_BUFFER;
    fn validate(&self) -> Result<(), RecordDecodeError> {
        if self.phase != SCOPE_PHASE_BEGIN && self.phase != SCOPE_PHASE_END {
            return bad::<Self>("phase", self.phase as u16 as u64);
        }
        if !(0..SCOPE_RINGS as i16).contains(&self.ring_id) {
            return bad::<Self>("ring_id", self.ring_id as u16 as u64);
        }
        if self.site_file().is_none() {
            return bad::<Self>("site_file_basename", 0);
        }
        Ok(())
    }
}

impl DeviceRecord for ArgsDumpRecord {
    const PLACEMENT: BufferCountPlacement = BufferCountPlacement::AfterRecords;
    const RECORDS_PER_BUFFER: usize = ARGS_DUMP_RECORDS_PER_BUFFER;
    fn validate(&self) -> Result<(), RecordDecodeError> {
        if role_name(self.role).is_none() {
            return bad::<Self>("role", self.role.into());
        }
        if stage_name(self.stage).is_none() {
            return bad::<Self>("stage", self.stage.into());
        }
        if usize::from(self.ndims) > ARGS_MAX_DIMS {
            return bad::<Self>("ndims", self.ndims.into());
        }
        if self.kind > ARG_KIND_SCALAR {
            return bad::<Self>("kind", self.kind.into());
        }
        if self.kind == ARG_KIND_TENSOR && DType::from_u8(self.dtype).is_none() {
            return bad::<Self>("dtype", self.dtype.into());
        }
        if self.func_count > 3 {
            return bad::<Self>("func_count", self.func_count.into());
        }
        Ok(())
    }
}

/// A decoded view of one device-written record buffer: `count` records of type `R`.
#[derive(Clone, Copy, Debug)]
pub struct RecordBuffer<'a, R> {
    records: &'a [u8],
    count: usize,
    _r: core::marker::PhantomData<R>,
}

impl<'a, R: DeviceRecord> RecordBuffer<'a, R> {
    /// Records the device wrote.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The records, each validated; an invalid one yields its error and iteration goes on.
    pub fn records(&self) -> impl Iterator<Item = Result<R, RecordDecodeError>> + 'a {
        self.records.chunks_exact(R::SIZE).map(|b| {
            let r = R::from_bytes(b).map_err(|_| RecordDecodeError::TooShort {
                record: R::NAME,
                expected: R::SIZE,
                actual: b.len(),
            })?;
            r.validate()?;
            Ok(r)
        })
    }
}

/// Decodes a buffer of `capacity` records of type `R` as the device wrote it (count placement
/// per [`DeviceRecord::PLACEMENT`]).
///
/// # Errors
///
/// [`RecordDecodeError::TooShort`] when `bytes` is shorter than a buffer of `capacity` records,
/// [`RecordDecodeError::CountOverCapacity`] when the count exceeds `capacity`. Never panics.
pub fn decode_buffer<R: DeviceRecord>(
    bytes: &[u8],
    capacity: usize,
) -> Result<RecordBuffer<'_, R>, RecordDecodeError> {
    let too_short =
        RecordDecodeError::TooShort { record: R::NAME, expected: usize::MAX, actual: bytes.len() };
    let Some(records_len) = R::SIZE.checked_mul(capacity) else {
        return Err(too_short);
    };
    if records_len > usize::MAX / 2 {
        return Err(too_short);
    }
    let expected = R::buffer_size(capacity);
    if bytes.len() < expected {
        return Err(RecordDecodeError::TooShort { record: R::NAME, expected, actual: bytes.len() });
    }
    let at = R::PLACEMENT.count_offset(R::SIZE, capacity);
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    let count = u32::from_le_bytes(word);
    if count as usize > capacity {
        return Err(RecordDecodeError::CountOverCapacity { record: R::NAME, count, capacity });
    }
    let start = R::PLACEMENT.records_offset();
    Ok(RecordBuffer {
        records: &bytes[start..start + count as usize * R::SIZE],
        count: count as usize,
        _r: core::marker::PhantomData,
    })
}
