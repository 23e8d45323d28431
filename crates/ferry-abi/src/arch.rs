//! Arch profiles: the per-chip constants every layer agrees on.
//!
//! # Examples
//! ```
//! use ferry_abi::arch::{Arch, A2A3};
//! assert_eq!(Arch::A2a3.profile().max_aicpu_threads, 4);
//! // The DFX backpressure budget is 30 seconds of device clock.
//! assert_eq!(A2A3.dfx_backpressure_budget_cycles, 50_000_000 * 30);
//! ```

/// Seconds of device clock that one DFX backpressure gate may wait (the backpressure design's 30-second ceiling).
pub const DFX_BACKPRESSURE_TIMEOUT_SECONDS: u64 = 30;

/// The two chip generations ferry models.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Ascend a2/a3: 4 AICPU threads, 24 AIC + 48 AIV per die, 50 MHz sys counter, SVM.
    A2a3 = 0,
    /// Ascend a5: 5 AICPU threads, 36 AIC + 72 AIV per die, 1 GHz sys counter, non-SVM.
    A5 = 1,
}

impl Arch {
    /// Every arch, in a stable order.
    pub const ALL: [Arch; 2] = [Arch::A2a3, Arch::A5];

    /// The constant profile of this arch.
    pub const fn profile(self) -> &'static ArchProfile {
        match self {
            Arch::A2a3 => &A2A3,
            Arch::A5 => &A5,
        }
    }

    /// Short lowercase name as used on the command line (`a2a3`, `a5`).
    pub const fn name(self) -> &'static str {
        self.profile().name
    }

    /// Parses `a2a3` / `a5` (case-insensitive); `None` for anything else.
    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// Decodes the wire value (`Arch as u32`); `None` for an unknown value.
    pub const fn from_u32(v: u32) -> Option<Arch> {
        match v {
            0 => Some(Arch::A2a3),
            1 => Some(Arch::A5),
            _ => None,
        }
    }
}

/// Constants of one chip generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchProfile {
    /// The arch this profile describes.
    pub arch: Arch,
    /// Lowercase name (`a2a3`, `a5`).
    pub name: &'static str,
    /// `PLATFORM_MAX_AICPU_THREADS`: AICPU threads a launch may use; also the `MAX_T` dimension of
    /// every DFX ready-queue header, whatever the number of threads that actually run.
    pub max_aicpu_threads: u32,
    /// AIC (cube) cores per die.
    pub aic_per_die: u32,
    /// AIV (vector) cores per die.
    pub aiv_per_die: u32,
    /// Device system-counter frequency in Hz (`PLATFORM_PROF_SYS_CNT_FREQ`).
    pub clock_hz: u64,
    /// Whether host and device share one view of device memory (SVM). Non-SVM hosts work on a
    /// mirror and must copy ranges explicitly.
    pub svm: bool,
    /// `PLATFORM_DFX_BACKPRESSURE_TIMEOUT_CYCLES`: frequency × 30, the one budget of a DFX gate.
    pub dfx_backpressure_budget_cycles: u64,
}

impl ArchProfile {
    /// All AICore workers (AIC + AIV) on one die (`MAX_CORES`).
    pub const fn max_cores(&self) -> u32 {
        self.aic_per_die + self.aiv_per_die
    }

    /// Converts device cycles to nanoseconds at this arch's clock (saturating).
    pub const fn cycles_to_ns(&self, cycles: u64) -> u64 {
        let ns = (cycles as u128) * 1_000_000_000 / (self.clock_hz as u128);
        if ns > u64::MAX as u128 {
            u64::MAX
        } else {
            ns as u64
        }
    }

    /// Converts nanoseconds to device cycles at this arch's clock (saturating).
    pub const fn ns_to_cycles(&self, ns: u64) -> u64 {
        let c = (ns as u128) * (self.clock_hz as u128) / 1_000_000_000;
        if c > u64::MAX as u128 {
            u64::MAX
        } else {
            c as u64
        }
    }
}

/// The a2a3 profile.
pub const A2A3: ArchProfile = ArchProfile {
    arch: Arch::A2a3,
    name: "a2a3",
    max_aicpu_threads: 4,
    aic_per_die: 24,
    aiv_per_die: 48,
    clock_hz: 50_000_000,
    svm: true,
    dfx_backpressure_budget_cycles: 50_000_000 * DFX_BACKPRESSURE_TIMEOUT_SECONDS,
};

/// The a5 profile.
pub const A5: ArchProfile = ArchProfile {
    arch: Arch::A5,
    name: "a5",
    max_aicpu_threads: 5,
    aic_per_die: 36,
    aiv_per_die: 72,
    clock_hz: 1_000_000_000,
    svm: false,
    dfx_backpressure_budget_cycles: 1_000_000_000 * DFX_BACKPRESSURE_TIMEOUT_SECONDS,
};

const _: () = assert!(A2A3.max_cores() == 72 && A5.max_cores() == 108);
const _: () = assert!(A2A3.dfx_backpressure_budget_cycles == A2A3.clock_hz * 30);
const _: () = assert!(A5.dfx_backpressure_budget_cycles == A5.clock_hz * 30);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Arch::ALL {
            assert_eq!(Arch::from_name(a.name()), Some(a));
            assert_eq!(Arch::from_u32(a as u32), Some(a));
        }
        assert_eq!(Arch::from_name("A5"), Some(Arch::A5));
        assert_eq!(Arch::from_name("a3"), None);
        assert_eq!(Arch::from_u32(7), None);
    }

    #[test]
    fn cycle_conversion() {
        assert_eq!(A2A3.cycles_to_ns(50), 1_000);
        assert_eq!(A5.ns_to_cycles(1_000), 1_000);
        assert_eq!(A2A3.cycles_to_ns(A2A3.dfx_backpressure_budget_cycles), 30_000_000_000);
        assert_eq!(A5.cycles_to_ns(u64::MAX), u64::MAX);
    }
}
