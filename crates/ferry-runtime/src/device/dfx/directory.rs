//! The full path's DFX directories: what a `KernelArgs` profiling base points at, and the
//! device half's [`DfxDevice`] attached from them.
use super::super::ops::DeviceOps;
use super::{ArgsArena, DfxDevice, DfxRegions};
use ferry_dfx::DeviceRegion;
use std::sync::Arc;

/// Magic of a DFX directory ("FDFX").
pub const DFX_DIR_MAGIC: u32 = 0x5846_4446;
/// Version of the DFX directory layout.
pub const DFX_DIR_VERSION: u32 = 1;
/// Bytes of a directory's header; `(addr, len)` pairs of u64 follow.
pub const DFX_DIR_HEADER: usize = 32;
/// Most entries a directory may hold.
pub const DFX_DIR_MAX_ENTRIES: u32 = 64;
/// [`DfxDirectory::flags`]: writers ring the host after each publish (the optional doorbell
/// hint; by default the host polls and nothing is signalled).
pub const DFX_DIR_FLAG_DOORBELL_HINT: u32 = 1;

/// What a `KernelArgs` profiling base points at on the full path: a small block of device memory
/// naming the subsystem's transport region(s) and, for ArgsDump, the payload arenas.
///
/// # Layout
/// Little-endian: `magic` u32 at 0 ([`DFX_DIR_MAGIC`]), `version` u32 at 4, `level` u32 at 8
/// (swimlane level, PMU event type, ArgsDump level; 1 for DepGen / ScopeStats), `count` u32 at 12,
/// `threads` u32 at 16 (AICPU threads, last = orchestrator), `aic` u32 at 20, `flags` u32 at 24
/// (`DFX_DIR_FLAG_*`), 4 reserved bytes, then `count` entries of `addr` u64, `len` u64 (device
/// address and bytes; `addr` 0 = absent).
///
/// | base | entries |
/// |---|---|
/// | `chip_swimlane_data_base` | AICore task, AICPU task, scheduler phase, orchestrator phase regions |
/// | `pmu_data_base`, `dep_gen_data_base`, `scope_stats_data_base` | the subsystem's region |
/// | `dump_data_base` | the metadata region, then one [`ArgsArena`] per scheduler thread |
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DfxDirectory {
    /// Level / event type.
    pub level: u32,
    /// AICPU threads of the run.
    pub threads: u32,
    /// AIC workers.
    pub aic: u32,
    /// `DFX_DIR_FLAG_*` bits.
    pub flags: u32,
    /// `(device address, bytes)` of each region or arena.
    pub entries: Vec<(u64, u64)>,
}

impl DfxDirectory {
    /// Bytes of the encoded directory.
    pub fn encoded_len(&self) -> usize {
        DFX_DIR_HEADER + 16 * self.entries.len()
    }

    /// The directory's bytes as it lies in device memory.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.encoded_len());
        for w in [
            DFX_DIR_MAGIC,
            DFX_DIR_VERSION,
            self.level,
            self.entries.len() as u32,
            self.threads,
            self.aic,
            self.flags,
            0,
        ] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        for &(a, l) in &self.entries {
            b.extend_from_slice(&a.to_le_bytes());
            b.extend_from_slice(&l.to_le_bytes());
        }
        b
    }

    /// Reads the directory at device address `base` through `ops`.
    ///
    /// # Errors
    /// When the address does not translate or the bytes are not a directory of this version.
    pub fn read(ops: &dyn DeviceOps, base: u64) -> Result<DfxDirectory, String> {
        let read = |addr: u64, len: usize| -> Result<Vec<u8>, String> {
            let p = ops.translate(addr, len as u64).map_err(|e| e.to_string())?;
            let mut out = vec![0u8; len];
            // SAFETY: `translate` returned a pointer to `len` readable bytes of one live
            // allocation; the host wrote the directory before the launch (which orders it before
            // this thread started) and nobody writes it during the run.
            unsafe { std::ptr::copy_nonoverlapping(p.cast_const(), out.as_mut_ptr(), len) };
            Ok(out)
        };
        let h = read(base, DFX_DIR_HEADER)?;
        let u = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if u(&h, 0) != DFX_DIR_MAGIC || u(&h, 4) != DFX_DIR_VERSION {
            return Err(format!("no DFX directory at {base:#x}"));
        }
        let count = u(&h, 12);
        if count > DFX_DIR_MAX_ENTRIES {
            return Err(format!("DFX directory at {base:#x}: {count} entries"));
        }
        let e = read(base + DFX_DIR_HEADER as u64, 16 * count as usize)?;
        let q = |o: usize| u64::from_le_bytes(e[o..o + 8].try_into().unwrap_or([0; 8]));
        Ok(DfxDirectory {
            level: u(&h, 8),
            threads: u(&h, 16),
            aic: u(&h, 20),
            flags: u(&h, 24),
            entries: (0..count as usize).map(|i| (q(16 * i), q(16 * i + 8))).collect(),
        })
    }
}

/// A view of `len` bytes of device memory at `addr`, through `ops.translate`.
///
/// The view does not own the memory: the host keeps every DFX allocation alive until the run's
/// AICPU threads returned and the collection finished.
fn device_view(
    ops: &dyn DeviceOps,
    addr: u64,
    len: u64,
) -> Result<(std::ptr::NonNull<u8>, u64), String> {
    let p = ops.translate(addr, len).map_err(|e| e.to_string())?;
    let p = std::ptr::NonNull::new(p).ok_or_else(|| format!("{addr:#x} translated to null"))?;
    if p.as_ptr() as usize % 64 != 0 {
        return Err(format!("DFX memory at {addr:#x} is not 64-byte aligned"));
    }
    Ok((p, len))
}

fn attach_region(
    ops: &dyn DeviceOps,
    (addr, len): (u64, u64),
    clock: &Arc<dyn ferry_dfx::clock::CycleClock>,
    doorbell_hint: bool,
) -> Result<Option<DeviceRegion>, String> {
    if addr == 0 {
        return Ok(None);
    }
    let (p, len) = device_view(ops, addr, len)?;
    // SAFETY: `p` is 64-byte aligned (checked) and valid for `len` bytes of one live allocation
    // the host keeps until the run's AICPU threads returned (the only users of this view);
    // every access to it follows the DFX transport's protocol (atomics / single writer).
    let view = unsafe { ferry_dfx::mem::ShmRegion::from_raw_parts(p, len as usize, Arc::new(())) };
    let region = DeviceRegion::attach(view, addr, clock.clone()).map_err(|e| e.to_string())?;
    // By default nothing signals the host (it polls its queues, as on hardware). With the
    // optional doorbell hint, a buffer switch rings the host's drain shard through the OS, keyed
    // by the region's device address (`DfxSession::start_on` registers the bells).
    Ok(Some(match ops.host_notifier().filter(|_| doorbell_hint) {
        Some(n) => region.with_host_notify(Arc::new(move |q| n(addr, q))),
        None => region,
    }))
}

impl DfxDevice {
    /// The full path's DFX: what the profiling bases and flag word of `args` name, attached
    /// from device memory (`ops.translate`) with `clock` for the gate budgets. `Ok(None)` when
    /// no profiling bit is set.
    ///
    /// # Errors
    /// A base that is not a directory, a region that does not translate or whose header is
    /// not a transport region.
    pub fn from_kernel_args(
        ops: &dyn DeviceOps,
        args: &ferry_abi::launch::KernelArgs,
        threads: u32,
        clock: Arc<dyn ferry_dfx::clock::CycleClock>,
    ) -> Result<Option<DfxDevice>, String> {
        use ferry_abi::launch::{
            PROFILING_FLAG_CHIP_SWIMLANE, PROFILING_FLAG_DEP_GEN, PROFILING_FLAG_DUMP_ARGS,
            PROFILING_FLAG_PMU, PROFILING_FLAG_SCOPE_STATS,
        };
        let flags = args.enable_profiling_flag;
        let dir = |bit: u32, base: u64| -> Result<Option<DfxDirectory>, String> {
            if flags & bit == 0 || base == 0 {
                return Ok(None);
            }
            DfxDirectory::read(ops, base).map(Some)
        };
        let sw = dir(PROFILING_FLAG_CHIP_SWIMLANE, args.chip_swimlane_data_base)?;
        let pmu = dir(PROFILING_FLAG_PMU, args.pmu_data_base)?;
        let dep = dir(PROFILING_FLAG_DEP_GEN, args.dep_gen_data_base)?;
        let scope = dir(PROFILING_FLAG_SCOPE_STATS, args.scope_stats_data_base)?;
        let dump = dir(PROFILING_FLAG_DUMP_ARGS, args.dump_data_base)?;
        let any = [&sw, &pmu, &dep, &scope, &dump].into_iter().flatten().next().cloned();
        let Some(first) = any else { return Ok(None) };
        let entry = |d: &Option<DfxDirectory>, i: usize| {
            d.as_ref().and_then(|d| d.entries.get(i).copied()).unwrap_or((0, 0))
        };
        let region = |d: &Option<DfxDirectory>, i: usize| {
            let hint = d.as_ref().is_some_and(|d| d.flags & DFX_DIR_FLAG_DOORBELL_HINT != 0);
            attach_region(ops, entry(d, i), &clock, hint)
        };
        let mut arenas = Vec::new();
        if let Some(d) = &dump {
            for &(addr, len) in d.entries.iter().skip(1) {
                let (p, len) = device_view(ops, addr, len)?;
                // SAFETY: 64-byte aligned, `len` bytes of one live allocation the host keeps
                // until the run's AICPU threads returned; every access is atomic.
                arenas.push(Arc::new(unsafe { ArgsArena::from_raw_parts(p, len, Arc::new(())) }));
            }
        }
        Ok(Some(DfxDevice {
            swimlane: sw.as_ref().map_or(0, |d| d.level),
            pmu: pmu.as_ref().map_or(0, |d| d.level),
            dep_gen: dep.is_some(),
            args_level: dump.as_ref().map_or(0, |d| d.level),
            scope_stats: scope.is_some(),
            threads: if first.threads == 0 { threads } else { first.threads },
            aic: first.aic,
            regions: DfxRegions {
                aicore: region(&sw, 0)?,
                aicpu: region(&sw, 1)?,
                sched: region(&sw, 2)?,
                orch: region(&sw, 3)?,
                pmu: region(&pmu, 0)?,
                dep_gen: region(&dep, 0)?,
                scope: region(&scope, 0)?,
                args: region(&dump, 0)?,
            },
            arenas,
        }))
    }
}
