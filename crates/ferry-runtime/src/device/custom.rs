//! Loaded (custom) kernels as the device half sees them: their shapes, read from device memory
//! on the AICPU, and their device entries, called by the AICore executor.
//!
//! The host loads a kernel library through the AICPU OS (`ferry_abi::kernel_lib`) and writes
//! one [`KernelSpecRecord`] per loaded kernel into a device allocation the runtime image's
//! header names (`RuntimeHeader::kernel_table`, `kernel_table_count`). The AICPU reads that
//! table when a run starts ([`CustomKernels::read`], bounded by
//! `ferry_abi::kernel_lib::MAX_CUSTOM_KERNELS` before anything is allocated) and validates
//! every submission against it, as against the built-in table ([`shape`]): no host object is
//! shared with the device. The AICore executor reaches a loaded kernel's device entry through a
//! [`CustomDispatch`]: on the simulated chip the AICore "binary" is the executor the launch
//! starts on each core thread, and the library is the object the AICPU OS loaded for it.
use super::image::{ImageView, Record};
use super::kernels::{self, CoreKind};
use super::ops::DeviceOps;
use crate::error::DeviceFault;
use ferry_abi::kernel_lib::{
    is_custom_kernel, DeviceCall, KernelErrorRecord, CORE_AIC, CUSTOM_KERNEL_BASE,
    MAX_CUSTOM_KERNELS,
};
use std::mem::size_of;

/// One loaded kernel's shape in device memory.
///
/// # Layout
/// 32 bytes: `id`, `core` ([`CORE_AIC`] / `CORE_AIV`), `min_tensors`, `max_tensors`,
/// `scalar_count`, `max_blocks`, `scalar_dtypes` (one `DType` code per byte), `flags`
/// (u32 each; bit 0 [`SPEC_VIEW`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelSpecRecord {
    /// Kernel id (`CUSTOM_KERNEL_BASE + index`).
    pub id: u32,
    /// Core kind code.
    pub core: u32,
    /// Fewest tensors.
    pub min_tensors: u32,
    /// Most tensors.
    pub max_tensors: u32,
    /// Scalars required.
    pub scalar_count: u32,
    /// Most SPMD blocks.
    pub max_blocks: u32,
    /// Scalar dtype codes, little-endian bytes.
    pub scalar_dtypes: u32,
    /// [`SPEC_VIEW`] for a view kernel; other bits zero.
    pub flags: u32,
}

/// [`KernelSpecRecord::flags`]: a view kernel (its scalars are the layout words of its
/// tensors' views, `ferry_abi::layout`).
pub const SPEC_VIEW: u32 = 1;
const _: () = assert!(size_of::<KernelSpecRecord>() == 32);
// SAFETY: repr(C), eight u32 fields tiling 0..32 without padding.
unsafe impl Record for KernelSpecRecord {}

/// What the runtime checks a task against: the part of a kernel's spec that submission and
/// dispatch need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelShape {
    /// Core kind.
    pub core: CoreKind,
    /// Accepted tensor counts (inclusive).
    pub tensors: (u32, u32),
    /// Scalars required.
    pub scalars: u32,
    /// Most SPMD blocks.
    pub max_blocks: u32,
}

/// The loaded kernels' shapes, indexed by `id - CUSTOM_KERNEL_BASE`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CustomKernels {
    recs: Vec<KernelSpecRecord>,
}

impl CustomKernels {
    /// No loaded kernels.
    pub fn none() -> CustomKernels {
        CustomKernels::default()
    }

    /// From records (the host side builds the table it uploads from the same records). A record
    /// whose id is not `CUSTOM_KERNEL_BASE + index` ends the table (it and everything after it
    /// are dropped), as do records past `MAX_CUSTOM_KERNELS`.
    pub fn from_records(recs: Vec<KernelSpecRecord>) -> CustomKernels {
        let ok = recs
            .iter()
            .enumerate()
            .take_while(|(i, r)| r.id == CUSTOM_KERNEL_BASE + *i as u32)
            .count()
            .min(MAX_CUSTOM_KERNELS as usize);
        let mut recs = recs;
        recs.truncate(ok);
        CustomKernels { recs }
    }

    /// The records.
    pub fn records(&self) -> &[KernelSpecRecord] {
        &self.recs
    }

    /// Reads `count` records at device address `addr` (the image header's kernel table).
    ///
    /// # Errors
    /// [`DeviceFault::BadImage`] (with the header's magic and version, `bad`) when `count` is
    /// above `MAX_CUSTOM_KERNELS` (checked before anything is allocated), the table is not live
    /// device memory, or a record's id is not its position's.
    pub fn read(
        ops: &dyn DeviceOps,
        addr: u64,
        count: u32,
        bad: DeviceFault,
    ) -> Result<CustomKernels, DeviceFault> {
        if count == 0 {
            return Ok(CustomKernels::none());
        }
        if count > MAX_CUSTOM_KERNELS {
            return Err(bad);
        }
        let bytes = u64::from(count) * size_of::<KernelSpecRecord>() as u64;
        let view = ImageView::new(ops, addr, bytes).map_err(|_| bad)?;
        let recs: Vec<KernelSpecRecord> = (0..count as usize)
            .map(|i| view.read_record(i * size_of::<KernelSpecRecord>()))
            .collect();
        if recs.iter().enumerate().any(|(i, r)| r.id != CUSTOM_KERNEL_BASE + i as u32) {
            return Err(bad);
        }
        Ok(CustomKernels { recs })
    }

    /// The dtype of scalar `index` of loaded kernel `id` (`None` for another id or an index past
    /// its scalars).
    pub fn scalar_dtype(&self, id: u32, index: usize) -> Option<ferry_abi::records::DType> {
        if !is_custom_kernel(id) {
            return None;
        }
        let r = self.recs.get((id - CUSTOM_KERNEL_BASE) as usize)?;
        if index >= (r.scalar_count as usize).min(4) {
            return None;
        }
        ferry_abi::records::DType::from_u8(r.scalar_dtypes.to_le_bytes()[index])
    }

    /// Whether loaded kernel `id` is a view kernel.
    pub fn is_view(&self, id: u32) -> bool {
        is_custom_kernel(id)
            && self
                .recs
                .get((id - CUSTOM_KERNEL_BASE) as usize)
                .is_some_and(|r| r.flags & SPEC_VIEW != 0)
    }

    /// The shape of loaded kernel `id`.
    pub fn shape(&self, id: u32) -> Option<KernelShape> {
        if !is_custom_kernel(id) {
            return None;
        }
        let r = self.recs.get((id - CUSTOM_KERNEL_BASE) as usize)?;
        Some(KernelShape {
            core: if r.core == CORE_AIC { CoreKind::Aic } else { CoreKind::Aiv },
            tensors: (r.min_tensors, r.max_tensors),
            scalars: r.scalar_count,
            max_blocks: r.max_blocks,
        })
    }
}

/// The shape of kernel `id`: a built-in one, or one of `custom`.
pub fn shape(id: u32, custom: &CustomKernels) -> Option<KernelShape> {
    match kernels::spec(id) {
        Some(s) => Some(KernelShape {
            core: s.core,
            tensors: s.tensors,
            scalars: s.scalars,
            max_blocks: s.max_blocks,
        }),
        None => custom.shape(id),
    }
}

/// How the AICore executor reaches a loaded kernel's device entry.
pub trait CustomDispatch: Send + Sync {
    /// Runs loaded kernel `id` for one block; its `STATUS_*`, or `None` when no kernel has that
    /// id. A refusing kernel describes why in `error`.
    fn call(&self, id: u32, call: &DeviceCall, error: &mut KernelErrorRecord) -> Option<i32>;
}

// A task's argument capacity is a loaded kernel's call capacity.
const _: () = {
    assert!(super::image::MAX_TASK_TENSORS == ferry_abi::kernel_lib::MAX_CALL_TENSORS);
    assert!(super::image::MAX_TASK_SCALARS == ferry_abi::kernel_lib::MAX_CALL_SCALARS);
};

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u32) -> KernelSpecRecord {
        KernelSpecRecord {
            id: CUSTOM_KERNEL_BASE + i,
            core: CORE_AIC,
            min_tensors: 1,
            max_tensors: 2,
            scalar_count: 1,
            max_blocks: 4,
            ..Default::default()
        }
    }

    #[test]
    fn shapes_cover_builtins_then_the_loaded_range() {
        let c = CustomKernels::from_records(vec![rec(0), rec(1)]);
        assert_eq!(shape(kernels::K_ADD, &c).map(|s| s.tensors), Some((3, 3)));
        let s = shape(CUSTOM_KERNEL_BASE + 1, &c).unwrap();
        assert_eq!((s.core, s.tensors, s.scalars, s.max_blocks), (CoreKind::Aic, (1, 2), 1, 4));
        assert_eq!(shape(CUSTOM_KERNEL_BASE + 2, &c), None);
        assert_eq!(shape(kernels::KERNEL_COUNT, &c), None);
        assert_eq!(shape(CUSTOM_KERNEL_BASE, &CustomKernels::none()), None);
        // A record out of place ends the table.
        let c = CustomKernels::from_records(vec![rec(0), rec(5), rec(2)]);
        assert_eq!(c.records().len(), 1);
    }
}
