//! The per-run launch arguments: [`KernelArgs`] (the AICPU exec entry's) and its AICore
//! projection [`AicoreLaunchArgs`].

use super::*;

/// Version of the [`KernelArgs`] / [`AicoreLaunchArgs`] layouts. Bump it on any change to either.
pub const KERNEL_ARGS_ABI_VERSION: u32 = 1;

/// `enable_profiling_flag` bit 0: dump task arguments (ArgsDump).
pub const PROFILING_FLAG_DUMP_ARGS: u32 = 1 << 0;
/// `enable_profiling_flag` bit 1: chip swimlane (ChipSwimlane).
pub const PROFILING_FLAG_CHIP_SWIMLANE: u32 = 1 << 1;
/// `enable_profiling_flag` bit 2: PMU counters (PMU).
pub const PROFILING_FLAG_PMU: u32 = 1 << 2;
/// `enable_profiling_flag` bit 3: dependency-graph capture (DepGen).
pub const PROFILING_FLAG_DEP_GEN: u32 = 1 << 3;
/// `enable_profiling_flag` bit 4: scope statistics (ScopeStats).
pub const PROFILING_FLAG_SCOPE_STATS: u32 = 1 << 4;
/// Every defined profiling bit; the others are reserved and zero.
pub const PROFILING_FLAG_ALL: u32 = PROFILING_FLAG_DUMP_ARGS
    | PROFILING_FLAG_CHIP_SWIMLANE
    | PROFILING_FLAG_PMU
    | PROFILING_FLAG_DEP_GEN
    | PROFILING_FLAG_SCOPE_STATS;

/// The front-less per-run payload of the AICPU exec entry, passed by value as the launch blob.
///
/// `runtime_args` sits at offset 0 and `regs` at 8 with no launch front before them (docs/design/launch.md:
/// the 48-byte "front" was a misdiagnosis of build skew). Per-device invariants (device id, log
/// level, timeouts, DMA workspaces) are not here; they travel once in [`InitArgs`]. The AICPU gets
/// a private copy, so anything it returns to the host goes through a device address in the
/// payload (`device_wall_data_base`), never an inline field.
///
/// # One layout for both arches
///
/// The original had two layouts (96 bytes on a2a3, 88 on a5) in which the shared fields sat at
/// different offsets (`dump_data_base` at 24 vs 16, …). Two separately built programs that
/// disagree on the arch then misread each other silently, which is exactly the 507018 build-skew
/// failure. ferry uses one layout: the a2a3 one, whose offsets are kept
/// unchanged, with the a5-only fields placed where a2a3 had tail padding (`force_simt_anchor`) or
/// after it (`aicore_pmu_ring_addrs`). Arch-only fields are zero on the other arch. The ABI stamp
/// (`abi_version`, `abi_size`) comes last, because offset 0 is locked to `runtime_args`; it is
/// the last 8 bytes of any version of this payload, so [`AbiStamp::peek`] can read it from a blob
/// of any length.
///
/// # Layout
///
/// | offset | size | field | arch | read by |
/// |---:|---:|---|---|---|
/// | 0 | 8 | `runtime_args` | both | AICPU, AICore |
/// | 8 | 8 | `regs` | both | AICPU (a5: AICore too) |
/// | 16 | 8 | `ffts_base_addr` | a2a3 | AICore |
/// | 24 | 8 | `dump_data_base` | both | AICPU |
/// | 32 | 8 | `chip_swimlane_data_base` | both | AICPU |
/// | 40 | 8 | `pmu_data_base` | both | AICPU |
/// | 48 | 8 | `pmu_reg_addrs` | a2a3 | AICPU |
/// | 56 | 8 | `dep_gen_data_base` | both | AICPU |
/// | 64 | 8 | `scope_stats_data_base` | both | AICPU |
/// | 72 | 8 | `chip_swimlane_aicore_rotation_table` | both | AICore |
/// | 80 | 8 | `device_wall_data_base` | both | AICPU |
/// | 88 | 4 | `enable_profiling_flag` | both | AICPU, AICore |
/// | 92 | 4 | `force_simt_anchor` | a5 | AICore |
/// | 96 | 8 | `aicore_pmu_ring_addrs` | a5 | AICore |
/// | 104 | 4 | `abi_version` | both | both (stamp) |
/// | 108 | 4 | `abi_size` | both | both (stamp) |
///
/// Size 112, align 8.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{AbiRecord, KernelArgs, KERNEL_ARGS_ABI_VERSION};
/// let args = KernelArgs::new(0x10, 0x20);
/// assert_eq!(args.abi_version, KERNEL_ARGS_ABI_VERSION);
/// assert_eq!(args.abi_size as usize, KernelArgs::SIZE);
/// assert_eq!(&args.as_bytes()[..8], &0x10u64.to_le_bytes());
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelArgs {
    /// Device address of the uploaded runtime image.
    pub runtime_args: u64,
    /// Device address of a `u64` table of per-core register block bases, indexed by physical core
    /// id (length [`RegLayout::max_physical_cores`](crate::regs::RegLayout::max_physical_cores)).
    pub regs: u64,
    /// a2a3 only: FFTS control base set into each AICore; 0 on a5.
    pub ffts_base_addr: u64,
    /// ArgsDump shared-memory base, or 0.
    pub dump_data_base: u64,
    /// ChipSwimlane profiling base, or 0.
    pub chip_swimlane_data_base: u64,
    /// PMU profiling base, or 0.
    pub pmu_data_base: u64,
    /// a2a3 only: device address of the per-core PMU register table; 0 on a5.
    pub pmu_reg_addrs: u64,
    /// DepGen capture base, or 0.
    pub dep_gen_data_base: u64,
    /// ScopeStats base, or 0.
    pub scope_stats_data_base: u64,
    /// Device address of a `u64[num_aicore]` table of per-core swimlane head slots, indexed by
    /// block index.
    pub chip_swimlane_aicore_rotation_table: u64,
    /// Device address of the phase/timing buffer the AICPU writes and the host reads back.
    pub device_wall_data_base: u64,
    /// Profiling bitmask: `PROFILING_FLAG_*`.
    pub enable_profiling_flag: u32,
    /// a5 only: always 0; an opaque runtime condition that keeps a never-taken SIMT path alive in
    /// the AICore program. 0 on a2a3.
    pub force_simt_anchor: u32,
    /// a5 only: device address of the per-core PMU ring table read by AICore; 0 on a2a3.
    pub aicore_pmu_ring_addrs: u64,
    /// [`KERNEL_ARGS_ABI_VERSION`] of the build that wrote the payload.
    pub abi_version: u32,
    /// `size_of::<KernelArgs>()` of the build that wrote the payload.
    pub abi_size: u32,
}

abi_record!(KernelArgs, size 112, align 8, [
    runtime_args @ 0,
    regs @ 8,
    ffts_base_addr @ 16,
    dump_data_base @ 24,
    chip_swimlane_data_base @ 32,
    pmu_data_base @ 40,
    pmu_reg_addrs @ 48,
    dep_gen_data_base @ 56,
    scope_stats_data_base @ 64,
    chip_swimlane_aicore_rotation_table @ 72,
    device_wall_data_base @ 80,
    enable_profiling_flag @ 88,
    force_simt_anchor @ 92,
    aicore_pmu_ring_addrs @ 96,
    abi_version @ 104,
    abi_size @ 108,
]);

impl KernelArgs {
    /// A payload with the two locked fields set, profiling off, and this build's ABI stamp.
    pub const fn new(runtime_args: u64, regs: u64) -> KernelArgs {
        KernelArgs {
            runtime_args,
            regs,
            ffts_base_addr: 0,
            dump_data_base: 0,
            chip_swimlane_data_base: 0,
            pmu_data_base: 0,
            pmu_reg_addrs: 0,
            dep_gen_data_base: 0,
            scope_stats_data_base: 0,
            chip_swimlane_aicore_rotation_table: 0,
            device_wall_data_base: 0,
            enable_profiling_flag: 0,
            force_simt_anchor: 0,
            aicore_pmu_ring_addrs: 0,
            abi_version: KERNEL_ARGS_ABI_VERSION,
            abi_size: size_of::<KernelArgs>() as u32,
        }
    }

    /// Whether every bit of `flag` (a `PROFILING_FLAG_*` mask) is set.
    ///
    /// # Examples
    ///
    /// ```
    /// use ferry_abi::launch::{KernelArgs, PROFILING_FLAG_DEP_GEN, PROFILING_FLAG_PMU};
    /// let mut args = KernelArgs::new(0, 0);
    /// args.enable_profiling_flag = PROFILING_FLAG_PMU;
    /// assert!(args.profiling_enabled(PROFILING_FLAG_PMU));
    /// assert!(!args.profiling_enabled(PROFILING_FLAG_DEP_GEN));
    /// ```
    pub const fn profiling_enabled(&self, flag: u32) -> bool {
        self.enable_profiling_flag & flag == flag
    }

    /// Checks the ABI stamp against this build.
    ///
    /// # Errors
    ///
    /// [`DecodeError::VersionMismatch`] or [`DecodeError::SizeFieldMismatch`] when the payload was
    /// written by a build with another layout.
    pub fn check_abi(&self) -> Result<(), DecodeError> {
        check_stamp(Self::NAME, self.abi_version, self.abi_size, Self::SIZE)
    }

    /// [`AbiRecord::from_bytes`] followed by [`KernelArgs::check_abi`]: what a device program
    /// calls on the blob it was launched with.
    ///
    /// # Errors
    ///
    /// [`DecodeError::WrongLength`], [`DecodeError::VersionMismatch`] or
    /// [`DecodeError::SizeFieldMismatch`]; use [`AbiStamp::peek`] on the blob to report the
    /// sender's version.
    pub fn from_bytes_checked(bytes: &[u8]) -> Result<KernelArgs, DecodeError> {
        let args = KernelArgs::from_bytes(bytes)?;
        args.check_abi()?;
        Ok(args)
    }
}

impl Default for KernelArgs {
    /// [`KernelArgs::new(0, 0)`](KernelArgs::new): zero addresses, but a valid ABI stamp.
    fn default() -> KernelArgs {
        KernelArgs::new(0, 0)
    }
}

/// The projection of [`KernelArgs`] that the AICore entry reads, passed by value in the AICore
/// launch's own argument block (docs/design/launch.md: neither side reads a device-resident copy).
///
/// It carries every field an AICore program reads on either arch, plus its own ABI stamp (same
/// version as `KernelArgs`: the two change together). The block dimension and each core's block
/// index are not here: as on hardware, they come from the launch configuration (`block_dim`)
/// and the core itself.
///
/// # Layout
///
/// | offset | size | field | arch |
/// |---:|---:|---|---|
/// | 0 | 8 | `runtime_args` | both |
/// | 8 | 8 | `regs` | both |
/// | 16 | 8 | `ffts_base_addr` | a2a3 |
/// | 24 | 8 | `chip_swimlane_aicore_rotation_table` | both |
/// | 32 | 8 | `aicore_pmu_ring_addrs` | a5 |
/// | 40 | 4 | `enable_profiling_flag` | both |
/// | 44 | 4 | `force_simt_anchor` | a5 |
/// | 48 | 4 | `abi_version` | both |
/// | 52 | 4 | `abi_size` | both |
///
/// Size 56, align 8.
///
/// # Examples
///
/// ```
/// use ferry_abi::launch::{AbiRecord, AicoreLaunchArgs, KernelArgs};
/// let mut args = KernelArgs::new(0x10, 0x20);
/// args.chip_swimlane_aicore_rotation_table = 0x30;
/// let core = AicoreLaunchArgs::from(&args);
/// assert_eq!(core.chip_swimlane_aicore_rotation_table, 0x30);
/// assert_eq!(AicoreLaunchArgs::from_bytes_checked(core.as_bytes()), Ok(core));
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AicoreLaunchArgs {
    /// [`KernelArgs::runtime_args`].
    pub runtime_args: u64,
    /// [`KernelArgs::regs`].
    pub regs: u64,
    /// [`KernelArgs::ffts_base_addr`] (a2a3).
    pub ffts_base_addr: u64,
    /// [`KernelArgs::chip_swimlane_aicore_rotation_table`].
    pub chip_swimlane_aicore_rotation_table: u64,
    /// [`KernelArgs::aicore_pmu_ring_addrs`] (a5).
    pub aicore_pmu_ring_addrs: u64,
    /// [`KernelArgs::enable_profiling_flag`].
    pub enable_profiling_flag: u32,
    /// [`KernelArgs::force_simt_anchor`] (a5).
    pub force_simt_anchor: u32,
    /// [`KERNEL_ARGS_ABI_VERSION`] of the build that wrote the payload.
    pub abi_version: u32,
    /// `size_of::<AicoreLaunchArgs>()` of the build that wrote the payload.
    pub abi_size: u32,
}

abi_record!(AicoreLaunchArgs, size 56, align 8, [
    runtime_args @ 0,
    regs @ 8,
    ffts_base_addr @ 16,
    chip_swimlane_aicore_rotation_table @ 24,
    aicore_pmu_ring_addrs @ 32,
    enable_profiling_flag @ 40,
    force_simt_anchor @ 44,
    abi_version @ 48,
    abi_size @ 52,
]);

impl AicoreLaunchArgs {
    /// Whether every bit of `flag` (a `PROFILING_FLAG_*` mask) is set.
    pub const fn profiling_enabled(&self, flag: u32) -> bool {
        self.enable_profiling_flag & flag == flag
    }

    /// Checks the ABI stamp against this build.
    ///
    /// # Errors
    ///
    /// [`DecodeError::VersionMismatch`] or [`DecodeError::SizeFieldMismatch`].
    pub fn check_abi(&self) -> Result<(), DecodeError> {
        check_stamp(Self::NAME, self.abi_version, self.abi_size, Self::SIZE)
    }

    /// [`AbiRecord::from_bytes`] followed by [`AicoreLaunchArgs::check_abi`].
    ///
    /// # Errors
    ///
    /// [`DecodeError::WrongLength`], [`DecodeError::VersionMismatch`] or
    /// [`DecodeError::SizeFieldMismatch`].
    pub fn from_bytes_checked(bytes: &[u8]) -> Result<AicoreLaunchArgs, DecodeError> {
        let args = AicoreLaunchArgs::from_bytes(bytes)?;
        args.check_abi()?;
        Ok(args)
    }
}

impl From<&KernelArgs> for AicoreLaunchArgs {
    /// Projects the AICore-read fields and stamps this build's ABI.
    fn from(k: &KernelArgs) -> AicoreLaunchArgs {
        AicoreLaunchArgs {
            runtime_args: k.runtime_args,
            regs: k.regs,
            ffts_base_addr: k.ffts_base_addr,
            chip_swimlane_aicore_rotation_table: k.chip_swimlane_aicore_rotation_table,
            aicore_pmu_ring_addrs: k.aicore_pmu_ring_addrs,
            enable_profiling_flag: k.enable_profiling_flag,
            force_simt_anchor: k.force_simt_anchor,
            abi_version: KERNEL_ARGS_ABI_VERSION,
            abi_size: size_of::<AicoreLaunchArgs>() as u32,
        }
    }
}

impl Default for AicoreLaunchArgs {
    /// The projection of [`KernelArgs::default`].
    fn default() -> AicoreLaunchArgs {
        AicoreLaunchArgs::from(&KernelArgs::default())
    }
}
