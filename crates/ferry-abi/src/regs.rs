//! The per-core register window through which the AICPU dispatches to an AICore.
//!
//! Each core has a block of 32-bit registers; its base is `KernelArgs::regs[physical_core_id]`.
//! The AICPU writes `DATA_MAIN_BASE` (open the window, dispatch a task id, signal exit); the core
//! writes `COND` (ACK/FIN of a task id, idle, exited). Offsets differ per arch and are bundled in
//! a [`RegLayout`]; the values are the same on both arches.
//!
//! | `DATA_MAIN_BASE` value | meaning |
//! |---|---|
//! | [`DATA_MAIN_BASE_RESET`] (0) | after kernel launch, window closed (the core waits for ≠ 0) |
//! | `0..=`[`MAX_TASK_ID`] | dispatch that task id (once the window is open) |
//! | [`AICORE_EXIT_SIGNAL`] | exit |
//! | [`AICPU_IDLE`] | window open, nothing dispatched |
//!
//! `COND` is bit 31 = state ([`COND_FIN_BIT`]: 0 ACK, 1 FIN), bits 0..31 = task id; idle is
//! FIN([`CORE_IDLE_ID`]) and exited is FIN([`CORE_EXITED_ID`]).
//!
//! # Examples
//!
//! ```
//! use ferry_abi::arch::Arch;
//! use ferry_abi::regs::{cond_ack, cond_fin, Cond, RegLayout, COND_IDLE};
//!
//! let regs = RegLayout::of(Arch::A2a3);
//! let core_base = 0x10_0000u64;
//! assert_eq!(core_base + regs.cond, 0x10_04C8);
//!
//! assert_eq!(Cond::decode(cond_ack(7)), Cond::Ack(7));
//! assert_eq!(Cond::decode(cond_fin(7)), Cond::Fin(7));
//! assert_eq!(Cond::decode(COND_IDLE), Cond::Idle);
//! ```

use crate::arch::Arch;

/// `DATA_MAIN_BASE` after the kernel launch (hardware reset): the window is closed.
pub const DATA_MAIN_BASE_RESET: u32 = 0;
/// `DATA_MAIN_BASE`: window open, nothing dispatched.
pub const AICPU_IDLE: u32 = 0x7FFF_FFFD;
/// `DATA_MAIN_BASE`: the core must exit.
pub const AICORE_EXIT_SIGNAL: u32 = 0x7FFF_FFF0;
/// Largest dispatchable task id; the ids above it are reserved signals.
pub const MAX_TASK_ID: u32 = 0x7FFF_FFEF;

/// `FAST_PATH_ENABLE` (a2a3 only): open.
pub const FAST_PATH_OPEN: u32 = 0xE;
/// `FAST_PATH_ENABLE` (a2a3 only): closed.
pub const FAST_PATH_CLOSE: u32 = 0xF;

/// `COND` bit 31: set = FIN (task finished), clear = ACK (task accepted).
pub const COND_FIN_BIT: u32 = 1 << 31;
/// `COND` bits 0..31: the task id.
pub const COND_TASK_ID_MASK: u32 = !COND_FIN_BIT;
/// Task id the core reports (as FIN) while idle.
pub const CORE_IDLE_ID: u32 = 0x7FFF_FFFF;
/// Task id the core reports (as FIN) once it has exited.
pub const CORE_EXITED_ID: u32 = 0x7FFF_FFFE;
/// `COND` of an idle core: FIN([`CORE_IDLE_ID`]).
pub const COND_IDLE: u32 = cond_fin(CORE_IDLE_ID);
/// `COND` of an exited core: FIN([`CORE_EXITED_ID`]).
pub const COND_EXITED: u32 = cond_fin(CORE_EXITED_ID);

/// Whether a `DATA_MAIN_BASE` value is a task id (`0..=MAX_TASK_ID`) rather than a signal.
pub const fn is_task_id(value: u32) -> bool {
    value <= MAX_TASK_ID
}

/// Which entry of the core's 2-entry dispatch payload buffer task `task_id` uses (`id & 1`).
pub const fn payload_slot(task_id: u32) -> usize {
    (task_id & 1) as usize
}

/// `COND` value acknowledging `task_id` (bit 31 clear).
///
/// # Panics
///
/// In debug builds, when `task_id` does not fit 31 bits; release builds mask it.
pub const fn cond_ack(task_id: u32) -> u32 {
    debug_assert!(task_id <= COND_TASK_ID_MASK, "task id does not fit COND");
    task_id & COND_TASK_ID_MASK
}

/// `COND` value reporting `task_id` finished (bit 31 set).
///
/// # Panics
///
/// In debug builds, when `task_id` does not fit 31 bits; release builds mask it.
pub const fn cond_fin(task_id: u32) -> u32 {
    debug_assert!(task_id <= COND_TASK_ID_MASK, "task id does not fit COND");
    (task_id & COND_TASK_ID_MASK) | COND_FIN_BIT
}

/// Whether a `COND` value is a FIN (includes idle and exited).
pub const fn cond_is_fin(cond: u32) -> bool {
    cond & COND_FIN_BIT != 0
}

/// The task id field of a `COND` value.
pub const fn cond_task_id(cond: u32) -> u32 {
    cond & COND_TASK_ID_MASK
}

/// What one `COND` reading says to the AICPU about a core that holds dispatch `running` and,
/// queued behind it, possibly `pending` (the other entry of its payload pair).
///
/// The AICPU may queue a second dispatch on a core only once the core has taken the first:
/// `COND = ACK(running)` says it read `DATA_MAIN_BASE = running` and its payload, so a new
/// `DATA_MAIN_BASE` value is seen as a new dispatch, not instead of `running`, and the entry the
/// pending payload goes into (`pending & 1`) is not the one the core reads. Once the core
/// finishes `running` it writes `FIN(running)`, finds `DATA_MAIN_BASE = pending` and writes
/// `ACK(pending)` without waiting, so a FIN may be overwritten before the AICPU sees it: an ACK
/// or FIN of `pending` also says `running` finished (its status line, written before its FIN,
/// is published by the later register write too).
///
/// # Examples
///
/// ```
/// use ferry_abi::regs::{cond_ack, cond_fin, dispatch_progress, DispatchProgress};
///
/// // The core took task 5: a second dispatch may be queued behind it.
/// assert_eq!(dispatch_progress(cond_ack(5), 5, None), DispatchProgress { may_queue: true, ..DispatchProgress::NONE });
/// // It already acknowledged the queued 6: 5 is done, though its FIN was never seen.
/// let p = dispatch_progress(cond_ack(6), 5, Some(6));
/// assert!(p.running_done && !p.pending_done);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DispatchProgress {
    /// `running` has finished (its status line is readable).
    pub running_done: bool,
    /// `pending` has finished too.
    pub pending_done: bool,
    /// Nothing is queued and the core has taken `running`: a dispatch may be queued behind it.
    pub may_queue: bool,
}

impl DispatchProgress {
    /// Nothing finished, nothing may be queued.
    pub const NONE: DispatchProgress =
        DispatchProgress { running_done: false, pending_done: false, may_queue: false };
}

/// Reads `cond` for a core holding dispatch `running` and, queued behind it, `pending` (see
/// [`DispatchProgress`]). Task ids are never reused while in flight (they count up, wrapping from
/// [`MAX_TASK_ID`] to 1), so a reading is never an earlier dispatch's.
pub const fn dispatch_progress(cond: u32, running: u32, pending: Option<u32>) -> DispatchProgress {
    let mut p = DispatchProgress::NONE;
    if cond == cond_fin(running) {
        p.running_done = true;
    } else if let Some(q) = pending {
        if cond == cond_ack(q) {
            p.running_done = true;
        } else if cond == cond_fin(q) {
            p.running_done = true;
            p.pending_done = true;
        }
    } else if cond == cond_ack(running) {
        p.may_queue = true;
    }
    p
}

/// A decoded `COND` value.
///
/// # Examples
///
/// ```
/// use ferry_abi::regs::{Cond, COND_EXITED};
/// assert_eq!(Cond::decode(COND_EXITED), Cond::Exited);
/// assert_eq!(Cond::Fin(3).encode(), 0x8000_0003);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cond {
    /// The core accepted this task id and is running it.
    Ack(u32),
    /// The core finished this task id.
    Fin(u32),
    /// The core is idle (FIN of [`CORE_IDLE_ID`]).
    Idle,
    /// The core has exited (FIN of [`CORE_EXITED_ID`]).
    Exited,
}

impl Cond {
    /// Decodes a raw `COND` register value.
    pub const fn decode(cond: u32) -> Cond {
        let id = cond_task_id(cond);
        if !cond_is_fin(cond) {
            Cond::Ack(id)
        } else if id == CORE_IDLE_ID {
            Cond::Idle
        } else if id == CORE_EXITED_ID {
            Cond::Exited
        } else {
            Cond::Fin(id)
        }
    }

    /// The raw `COND` register value.
    ///
    /// # Panics
    ///
    /// In debug builds, when a task id does not fit 31 bits.
    pub const fn encode(self) -> u32 {
        match self {
            Cond::Ack(id) => cond_ack(id),
            Cond::Fin(id) => cond_fin(id),
            Cond::Idle => COND_IDLE,
            Cond::Exited => COND_EXITED,
        }
    }
}

/// Register offsets of one arch's per-core window, in bytes from the core's register base.
///
/// `block_size` is the size of the window ferry's simulated chip gives each core: it covers the
/// highest register (`COND`) rounded up with headroom, 0x1400 on a2a3 (`COND` at 0x4C8) and 0x6000
/// on a5 (`COND` at 0x5108). It is ferry's choice, not the hardware stride; nothing but the
/// simulator depends on it, because cores find their bases through the `KernelArgs::regs` table.
///
/// # Examples
///
/// ```
/// use ferry_abi::arch::Arch;
/// use ferry_abi::regs::RegLayout;
/// let a5 = RegLayout::of(Arch::A5);
/// assert_eq!((a5.data_main_base, a5.cond, a5.fast_path_enable), (0xD0, 0x5108, None));
/// assert_eq!(a5.doorbell(), 0xD4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegLayout {
    /// The arch.
    pub arch: Arch,
    /// `DATA_MAIN_BASE` (low 32 bits): AICPU → core dispatch register.
    pub data_main_base: u64,
    /// `COND`: core → AICPU status register.
    pub cond: u64,
    /// `FAST_PATH_ENABLE` (a2a3 only): [`FAST_PATH_OPEN`] / [`FAST_PATH_CLOSE`].
    pub fast_path_enable: Option<u64>,
    /// Bytes of register window per core in the simulated chip.
    pub block_size: u64,
    /// Physical core ids are below this bound (a2a3 25 × 3, a5 2 dies × 18 × 3); it is the length
    /// of the `KernelArgs::regs` table, and a handshake reporting an id at or above it fails.
    pub max_physical_cores: u32,
}

/// The a2a3 register layout.
pub const A2A3_REGS: RegLayout = RegLayout {
    arch: Arch::A2a3,
    data_main_base: 0xA0,
    cond: 0x4C8,
    fast_path_enable: Some(0x18),
    block_size: 0x1400,
    max_physical_cores: 75,
};

/// The a5 register layout.
pub const A5_REGS: RegLayout = RegLayout {
    arch: Arch::A5,
    data_main_base: 0xD0,
    cond: 0x5108,
    fast_path_enable: None,
    block_size: 0x6000,
    max_physical_cores: 108,
};

impl RegLayout {
    /// The layout of `arch`.
    pub const fn of(arch: Arch) -> &'static RegLayout {
        match arch {
            Arch::A2a3 => &A2A3_REGS,
            Arch::A5 => &A5_REGS,
        }
    }

    /// `DATA_MAIN_BASE` high 32 bits: the early-dispatch doorbell (`data_main_base + 4`), set to
    /// the staged task id when its dependencies are met.
    pub const fn doorbell(&self) -> u64 {
        self.data_main_base + 4
    }

    /// Whether `offset` is a 4-byte register slot inside the window.
    pub const fn contains(&self, offset: u64) -> bool {
        offset % 4 == 0 && offset + 4 <= self.block_size
    }
}

const fn check_layout(l: &RegLayout) -> bool {
    let fast_ok = match l.fast_path_enable {
        Some(off) => l.contains(off),
        None => true,
    };
    l.contains(l.data_main_base) && l.contains(l.doorbell()) && l.contains(l.cond) && fast_ok
}
const _: () = assert!(check_layout(&A2A3_REGS) && check_layout(&A5_REGS));
// Physical core ids cover every worker of the arch.
const _: () = assert!(A2A3_REGS.max_physical_cores >= crate::arch::A2A3.max_cores());
const _: () = assert!(A5_REGS.max_physical_cores >= crate::arch::A5.max_cores());
// The reserved ids sit above every task id.
const _: () = assert!(MAX_TASK_ID < AICORE_EXIT_SIGNAL && AICORE_EXIT_SIGNAL < AICPU_IDLE);
const _: () = assert!(COND_IDLE == 0xFFFF_FFFF && COND_EXITED == 0xFFFF_FFFE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cond_encoding_round_trips() {
        for id in [0, 1, 2, 1000, MAX_TASK_ID] {
            assert_eq!(cond_ack(id), id);
            assert_eq!(cond_fin(id), id | 0x8000_0000);
            assert!(!cond_is_fin(cond_ack(id)));
            assert!(cond_is_fin(cond_fin(id)));
            assert_eq!(cond_task_id(cond_ack(id)), id);
            assert_eq!(cond_task_id(cond_fin(id)), id);
            for c in [Cond::Ack(id), Cond::Fin(id)] {
                assert_eq!(Cond::decode(c.encode()), c);
            }
        }
        assert_eq!(Cond::decode(COND_IDLE), Cond::Idle);
        assert_eq!(Cond::decode(COND_EXITED), Cond::Exited);
        assert_eq!(Cond::Idle.encode(), 0xFFFF_FFFF);
        assert_eq!(Cond::Exited.encode(), 0xFFFF_FFFE);
        // An ACK of the idle id is not idle: only FIN carries the state.
        assert_eq!(Cond::decode(CORE_IDLE_ID), Cond::Ack(CORE_IDLE_ID));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "task id does not fit COND")]
    fn cond_rejects_wide_ids_in_debug() {
        let _ = cond_fin(0x8000_0000);
    }

    /// Every reading a core holding `running` (and maybe `pending`) can show, and what each
    /// says; a reading of neither id (an earlier dispatch's, idle, exited) says nothing.
    #[test]
    fn dispatch_progress_reads_every_state_of_a_queued_pair() {
        let (r, q) = (41, 42);
        let none = DispatchProgress::NONE;
        let queue = DispatchProgress { may_queue: true, ..none };
        let r_done = DispatchProgress { running_done: true, ..none };
        let both = DispatchProgress { running_done: true, pending_done: true, may_queue: false };
        // Alone: dispatched but not taken yet, taken, finished.
        assert_eq!(dispatch_progress(COND_IDLE, r, None), none);
        assert_eq!(dispatch_progress(cond_fin(r - 1), r, None), none);
        assert_eq!(dispatch_progress(cond_ack(r), r, None), queue);
        assert_eq!(dispatch_progress(cond_fin(r), r, None), r_done);
        // With one queued: never a second queue; each later state finishes `running`.
        assert_eq!(dispatch_progress(cond_ack(r), r, Some(q)), none);
        assert_eq!(dispatch_progress(cond_fin(r), r, Some(q)), r_done);
        assert_eq!(dispatch_progress(cond_ack(q), r, Some(q)), r_done);
        assert_eq!(dispatch_progress(cond_fin(q), r, Some(q)), both);
        assert_eq!(dispatch_progress(COND_EXITED, r, Some(q)), none);
        // Ids wrap from MAX_TASK_ID to 1.
        assert_eq!(dispatch_progress(cond_ack(1), MAX_TASK_ID, Some(1)), r_done);
    }

    #[test]
    fn data_main_values() {
        assert!(is_task_id(0));
        assert!(is_task_id(MAX_TASK_ID));
        assert!(!is_task_id(AICORE_EXIT_SIGNAL));
        assert!(!is_task_id(AICPU_IDLE));
        assert_eq!((payload_slot(6), payload_slot(7)), (0, 1));
        assert_eq!(
            (AICPU_IDLE, AICORE_EXIT_SIGNAL, MAX_TASK_ID),
            (0x7FFFFFFD, 0x7FFFFFF0, 0x7FFFFFEF)
        );
    }

    #[test]
    fn layouts_per_arch() {
        let a = RegLayout::of(Arch::A2a3);
        assert_eq!(a.arch, Arch::A2a3);
        assert_eq!((a.data_main_base, a.doorbell(), a.cond), (0xA0, 0xA4, 0x4C8));
        assert_eq!(
            (a.fast_path_enable, a.block_size, a.max_physical_cores),
            (Some(0x18), 0x1400, 75)
        );
        let b = RegLayout::of(Arch::A5);
        assert_eq!(b.arch, Arch::A5);
        assert_eq!(
            (b.data_main_base, b.cond, b.block_size, b.max_physical_cores),
            (0xD0, 0x5108, 0x6000, 108)
        );
        assert!(!a.contains(0x1400) && a.contains(0x13FC) && !a.contains(0xA2));
    }
}
