//! The per-core handshake slot.
//!
//! One [`Handshake`] per AICore worker lives in the runtime image, one cache line each. At start
//! the core reports itself (`physical_core_id`, `core_type`, then `aicore_done = block_idx + 1`);
//! the AICPU collects the reports, then writes `task` (only after the report, because the core's
//! report flushes the whole line) and opens the core's register window
//! ([`crate::regs`]). The simulated chip accesses the fields atomically; this module only fixes
//! the layout and the values.
//!
//! Worker indices follow the block layout: `0..block_dim` are AIC cores, `block_dim..3·block_dim`
//! are AIV cores in pairs (cluster `(i − block_dim) / 2`, sub-block `(i − block_dim) % 2`).
//!
//! # Examples
//!
//! ```
//! use ferry_abi::handshake::{aiv_block_index, core_type_for_index, Handshake, CORE_TYPE_AIV};
//! use ferry_abi::launch::AbiRecord;
//!
//! let block_dim = 8;
//! let idx = aiv_block_index(3, 1, block_dim); // cluster 3, second AIV
//! assert_eq!(idx, 15);
//! let slot = Handshake::pretyped(core_type_for_index(idx, block_dim));
//! assert_eq!(slot.core_type, CORE_TYPE_AIV);
//! assert_eq!(Handshake::SIZE, 64);
//! ```

use crate::launch::abi_record;

/// `core_type` of an AIC (cube) core.
pub const CORE_TYPE_AIC: u32 = 0;
/// `core_type` of an AIV (vector) core.
pub const CORE_TYPE_AIV: u32 = 1;
/// `aicore_done` before the core has reported.
pub const AICORE_DONE_PENDING: u32 = 0;
/// Bytes per handshake slot: one cache line.
pub const HANDSHAKE_SIZE: usize = 64;

/// The value a core writes into `aicore_done` to report: `block_idx + 1` (never
/// [`AICORE_DONE_PENDING`]).
pub const fn aicore_done_value(block_idx: u32) -> u32 {
    block_idx + 1
}

/// The block index encoded in a reported `aicore_done`; `None` while it is
/// [`AICORE_DONE_PENDING`].
pub const fn reported_block_index(aicore_done: u32) -> Option<u32> {
    aicore_done.checked_sub(1)
}

/// The core type the host pre-types for worker `index`: the first `block_dim` are AIC, the rest
/// AIV.
pub const fn core_type_for_index(index: u32, block_dim: u32) -> u32 {
    if index < block_dim {
        CORE_TYPE_AIC
    } else {
        CORE_TYPE_AIV
    }
}

/// Block index of AIV `sub_block` (0 or 1) of `cluster`: `cluster · 2 + sub_block + block_dim`,
/// so AIVs come after all AICs.
pub const fn aiv_block_index(cluster: u32, sub_block: u32, block_dim: u32) -> u32 {
    cluster * 2 + sub_block + block_dim
}

/// Handshake slots (AICore workers) of a launch: `3 · block_dim` (one AIC + two AIV per cluster).
pub const fn worker_count(block_dim: u32) -> u32 {
    block_dim * 3
}

/// One core's handshake slot, one cache line.
///
/// # Layout
///
/// | offset | size | field | writer → reader |
/// |---:|---:|---|---|
/// | 0 | 4 | `aicpu_ready` u32 | legacy, unused (host zeroes it) |
/// | 4 | 4 | `aicore_done` u32 | AICore → AICPU: 0 = pending, `block_idx + 1` = reported |
/// | 8 | 8 | `task` u64 | AICPU → AICore: device address of the core's 2-entry dispatch payload |
/// | 16 | 4 | `core_type` u32 | host pre-types, AICore rewrites in its report: `CORE_TYPE_*` |
/// | 20 | 4 | `physical_core_id` u32 | AICore → AICPU (must be below the arch's physical core bound) |
/// | 24 | 40 | `_reserved0` [u32; 10] | pads to one cache line |
///
/// Size 64, align 64. One line per core avoids false sharing between cores, but not between the
/// two directions within one core.
///
/// # Examples
///
/// ```
/// use ferry_abi::handshake::{Handshake, CORE_TYPE_AIC};
/// use ferry_abi::launch::AbiRecord;
/// let h = Handshake::zeroed();
/// assert_eq!(h.core_type, CORE_TYPE_AIC);
/// assert_eq!(Handshake::from_bytes(h.as_bytes()), Ok(h));
/// ```
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Handshake {
    /// Legacy AICPU-ready flag; unused, kept zero.
    pub aicpu_ready: u32,
    /// 0 until the core reports, then `block_idx + 1` ([`aicore_done_value`]).
    pub aicore_done: u32,
    /// Device address of this core's dispatch payload pair, written after the report.
    pub task: u64,
    /// [`CORE_TYPE_AIC`] or [`CORE_TYPE_AIV`].
    pub core_type: u32,
    /// The core's physical id: the index into the `KernelArgs::regs` table.
    pub physical_core_id: u32,
    _reserved0: [u32; 10],
}

abi_record!(Handshake, size 64, align 64, [
    aicpu_ready @ 0,
    aicore_done @ 4,
    task @ 8,
    core_type @ 16,
    physical_core_id @ 20,
    _reserved0 @ 24,
]);

const _: () = assert!(core::mem::size_of::<Handshake>() == HANDSHAKE_SIZE);

/// Where a launch's handshake fields live: the default one-line slot ([`Handshake`]), or
/// option D of docs/design/launch.md: AICore-written and AICPU-written fields on
/// disjoint cache lines, so that cleaning the AICPU's line never writes a stale copy of an
/// AICore field back, and invalidating the AICore's line never drops an AICPU write.
///
/// # Layout
///
/// | layout | slot bytes | line 0 (offsets) | line 1 (offsets) |
/// |---|---:|---|---|
/// | [`HandshakeLayout::COMBINED`] | 64 | `aicpu_ready` 0, `aicore_done` 4, `task` 8, `core_type` 16, `physical_core_id` 20 | — |
/// | [`HandshakeLayout::SPLIT`] | 128 | AICore: `aicore_done` 4, `core_type` 16, `physical_core_id` 20 | AICPU: `aicpu_ready` 64, `task` 72 |
///
/// The AICore fields keep their offsets in both layouts; line 0 of a split slot is a
/// [`Handshake`] whose `task` and `aicpu_ready` stay zero.
///
/// # Examples
///
/// ```
/// use ferry_abi::handshake::HandshakeLayout;
/// let d = HandshakeLayout::SPLIT;
/// assert_eq!(d.slot_bytes, 128);
/// assert_ne!(d.task_off / 64, d.aicore_done_off / 64, "disjoint lines");
/// assert_eq!(HandshakeLayout::from_u32(d.id), Some(d));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HandshakeLayout {
    /// The layout's id in the runtime image header (0 combined, 1 split).
    pub id: u32,
    /// Bytes per core's slot (a multiple of the 64-byte line).
    pub slot_bytes: u32,
    /// Offset of `aicore_done` in the slot.
    pub aicore_done_off: u32,
    /// Offset of `core_type`.
    pub core_type_off: u32,
    /// Offset of `physical_core_id`.
    pub physical_core_id_off: u32,
    /// Offset of `task`.
    pub task_off: u32,
    /// Offset of the line the AICore writes.
    pub aicore_line_off: u32,
    /// Offset of the line holding the AICPU-written `task`.
    pub aicpu_line_off: u32,
}

impl HandshakeLayout {
    /// The default one-line slot: every field on one cache line.
    pub const COMBINED: HandshakeLayout = HandshakeLayout {
        id: 0,
        slot_bytes: 64,
        aicore_done_off: 4,
        core_type_off: 16,
        physical_core_id_off: 20,
        task_off: 8,
        aicore_line_off: 0,
        aicpu_line_off: 0,
    };
    /// Option D: the AICore's report on line 0, the AICPU's `task` on line 1.
    pub const SPLIT: HandshakeLayout = HandshakeLayout {
        id: 1,
        slot_bytes: 128,
        aicore_done_off: 4,
        core_type_off: 16,
        physical_core_id_off: 20,
        task_off: 72,
        aicore_line_off: 0,
        aicpu_line_off: 64,
    };

    /// The layout with header id `id`.
    pub const fn from_u32(id: u32) -> Option<HandshakeLayout> {
        match id {
            0 => Some(Self::COMBINED),
            1 => Some(Self::SPLIT),
            _ => None,
        }
    }

    /// Whether the AICPU- and AICore-written fields sit on disjoint lines.
    pub const fn is_split(&self) -> bool {
        self.aicore_line_off != self.aicpu_line_off
    }
}

impl Handshake {
    /// All zero: what the host writes before a launch (an AIC slot that has not reported).
    pub const fn zeroed() -> Handshake {
        Handshake::pretyped(CORE_TYPE_AIC)
    }

    /// A zeroed slot pre-typed as `core_type`.
    pub const fn pretyped(core_type: u32) -> Handshake {
        Handshake {
            aicpu_ready: 0,
            aicore_done: AICORE_DONE_PENDING,
            task: 0,
            core_type,
            physical_core_id: 0,
            _reserved0: [0; 10],
        }
    }

    /// Whether the core has reported ([`Handshake::aicore_done`] is not pending).
    pub const fn is_reported(&self) -> bool {
        self.aicore_done != AICORE_DONE_PENDING
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::AbiRecord;

    #[test]
    fn layout_round_trip_and_offsets() {
        let mut h = Handshake::pretyped(CORE_TYPE_AIV);
        h.aicore_done = aicore_done_value(9);
        h.task = 0x1122_3344_5566_7788;
        h.physical_core_id = 42;
        let b = h.as_bytes();
        assert_eq!(b.len(), 64);
        assert_eq!(&b[0..4], &[0; 4]);
        assert_eq!(&b[4..8], &10u32.to_le_bytes());
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[16..20], &CORE_TYPE_AIV.to_le_bytes());
        assert_eq!(&b[20..24], &42u32.to_le_bytes());
        assert!(b[24..].iter().all(|&x| x == 0));
        assert_eq!(Handshake::from_bytes(b), Ok(h));
        assert!(Handshake::from_bytes(&b[..63]).is_err());
        assert!(Handshake::from_bytes(&[0u8; 128]).is_err());
        assert_eq!(Handshake::default(), Handshake::zeroed());
    }

    #[test]
    fn layouts_match_the_record_and_split_lines() {
        let c = HandshakeLayout::COMBINED;
        assert_eq!(c.slot_bytes as usize, HANDSHAKE_SIZE);
        assert_eq!(c.aicore_done_off as usize, core::mem::offset_of!(Handshake, aicore_done));
        assert_eq!(c.task_off as usize, core::mem::offset_of!(Handshake, task));
        assert_eq!(c.core_type_off as usize, core::mem::offset_of!(Handshake, core_type));
        assert_eq!(
            c.physical_core_id_off as usize,
            core::mem::offset_of!(Handshake, physical_core_id)
        );
        assert!(!c.is_split());
        let d = HandshakeLayout::SPLIT;
        assert!(d.is_split());
        for off in [d.aicore_done_off, d.core_type_off, d.physical_core_id_off] {
            assert_eq!(off / 64, d.aicore_line_off / 64);
        }
        assert_eq!(d.task_off / 64, d.aicpu_line_off / 64);
        assert_eq!(HandshakeLayout::from_u32(2), None);
    }

    #[test]
    fn slots_are_cache_line_aligned_in_arrays() {
        let slots = [Handshake::zeroed(); 3];
        let base = slots.as_ptr() as usize;
        assert_eq!(base % 64, 0);
        assert_eq!(core::mem::size_of_val(&slots), 192);
    }

    #[test]
    fn report_encoding() {
        assert!(!Handshake::zeroed().is_reported());
        assert_eq!(reported_block_index(AICORE_DONE_PENDING), None);
        for idx in [0, 1, 71, 107] {
            let done = aicore_done_value(idx);
            assert_ne!(done, AICORE_DONE_PENDING);
            assert_eq!(reported_block_index(done), Some(idx));
        }
    }

    #[test]
    fn worker_indexing() {
        let b = 8;
        assert_eq!(worker_count(b), 24);
        assert_eq!(core_type_for_index(0, b), CORE_TYPE_AIC);
        assert_eq!(core_type_for_index(7, b), CORE_TYPE_AIC);
        assert_eq!(core_type_for_index(8, b), CORE_TYPE_AIV);
        assert_eq!(core_type_for_index(23, b), CORE_TYPE_AIV);
        // AIVs of cluster c sit at b + 2c and b + 2c + 1, covering b..3b exactly once.
        let mut seen = [false; 24];
        for c in 0..b {
            for s in 0..2 {
                let i = aiv_block_index(c, s, b) as usize;
                assert!(!seen[i]);
                seen[i] = true;
            }
        }
        assert!(seen[..8].iter().all(|&x| !x) && seen[8..].iter().all(|&x| x));
    }
}
