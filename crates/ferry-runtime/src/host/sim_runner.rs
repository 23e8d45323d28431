//! The simulated chip's half of [`DeviceRunner`]: building a platform for it
//! ([`DeviceRunner::new`], each in a private device root), starting the chip's cores and AICPU
//! threads on a device ([`DeviceRunner::init`]), and the in-process path's device operations
//! ([`DeviceRunner::ops`]). Everything else the runner does is in `host/runner.rs` and its
//! child modules, above the backend seam.
use super::runner::DeviceRunner;
use super::sim_backend::SimDevice;
use super::{OsServicesOps, RunnerConfig, SimOps};
use crate::device::ops::DeviceOps;
use crate::error::{ConfigError, RunnerError};
use ferry_sim::cores::{Chip, CoreConfig};
use ferry_sim::PlatformBuilder;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A device root private to one runner's platform, in the user's device root
/// ([`ferry_sim::device_root`]): the simulated AICPU OS keys loaded objects by path, so two
/// platforms in one process must not share a root. Made private first, and cleared of the
/// directories of processes that were killed before they could remove theirs.
fn private_root() -> Result<std::path::PathBuf, RunnerError> {
    use ferry_sim::device_root;
    static SEQ: AtomicU64 = AtomicU64::new(0);
    // Relaxed: only uniqueness of the name matters.
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let base = device_root::user_root();
    device_root::ensure_private(&base)
        .map_err(|e| ConfigError::DeviceRoot { path: base.clone(), reason: e.to_string() })?;
    let swept = device_root::sweep_stale(&base);
    if swept > 0 {
        tracing::info!(swept, root = %base.display(), "removed device directories of killed runs");
    }
    Ok(base.join(device_root::process_dir_name(n)))
}

impl DeviceRunner {
    /// Builds a simulated platform with one device and a runner on it.
    ///
    /// # Errors
    /// [`RunnerError::Config`] for an unusable configuration; a simulator failure.
    pub fn new(cfg: RunnerConfig) -> Result<DeviceRunner, RunnerError> {
        let root = private_root()?;
        let p = PlatformBuilder::new(cfg.arch)
            .hbm_bytes(cfg.hbm_bytes)
            .device_root(&root)
            .profile(cfg.profile)
            .path_b_fixes(cfg.fixes)
            .aicore_launch_latency(cfg.aicore_launch_latency)
            .aicore_start_after_line_fills(cfg.aicore_start_after_line_fills)
            .build()?;
        let dev = p.device(0)?.clone();
        let mut r = match DeviceRunner::init(dev, cfg) {
            Ok(r) => r,
            Err(e) => {
                drop(p);
                let _ = std::fs::remove_dir_all(&root);
                return Err(e);
            }
        };
        r.platform = Some(p);
        r.root = Some(root);
        Ok(r)
    }

    /// Init on an existing device: starts the chip's threads, writes the `regs` table, and (full
    /// path) loads the AICPU program through `ferry_launch`'s loader with the configured method,
    /// whose init entry latches the [`InitArgs`](ferry_abi::launch::InitArgs) once; in process,
    /// the linked program's init.
    ///
    /// The simulated AICPU OS keys loaded programs by path (`<device root>/…/<pid>_<dev>/`):
    /// two runners on devices of different platforms in one process need different device
    /// roots ([`DeviceRunner::new`] gives each platform its own).
    ///
    /// # Errors
    /// [`RunnerError::Config`] for fewer than 2 or more than the arch's AICPU threads, no cores
    /// or a zero task window; a simulator failure.
    pub fn init(device: SimDevice, cfg: RunnerConfig) -> Result<DeviceRunner, RunnerError> {
        DeviceRunner::<Chip>::check_config(&cfg, device.arch().arch)?;
        let chip = Chip::new(
            device.clone(),
            CoreConfig { aicpu_threads: cfg.aicpu_threads, aic: cfg.aic, aiv: cfg.aiv },
        )?;
        let ops = Arc::new(SimOps::new(chip.clone()));
        DeviceRunner::assemble(device, chip, cfg, Some(ops), |chip| {
            OsServicesOps::new(chip).map(|o| Arc::new(o) as Arc<dyn DeviceOps>)
        })
    }

    /// The device half's chip services (for benches and tests that call kernels directly).
    pub fn ops(&self) -> &SimOps {
        // `init`, the only way to a runner on the chip, gives it the in-process operations.
        match &self.in_process {
            Some(ip) => &ip.ops,
            None => unreachable!("`init`, the only way to a runner on the chip, gives it its ops"),
        }
    }
}
