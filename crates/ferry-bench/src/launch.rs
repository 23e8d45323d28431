//! Host cost of one run's launch transaction, shared by `cargo bench -p ferry-bench --bench
//! launch` and `ferry bench launch` ([`measure`]: this and the runtime series of
//! [`crate::launch_series`]).
//!
//! Each measured run is `stage_launch_metadata` (when metadata is configured) +
//! `prepare_runtime_args` + `queue_run_entry` + `launch` with no-op entries; the run's
//! retirement (`finish_run`, which waits for the streams) is outside the timed region. Two
//! series run on the same slot: **changed**, where every run edits the launch-route prefix so
//! the descriptor is copied, and **unchanged**, where the identical prefix is already resident
//! and only metadata (if any) is copied.
//!
//! # Examples
//! ```
//! use ferry_bench::launch::{run, LaunchBenchConfig};
//! let r = run(&LaunchBenchConfig { iterations: 20, ..LaunchBenchConfig::default() })?;
//! assert_eq!(r.changed_bytes_per_run, 43_264);
//! assert_eq!(r.unchanged_bytes_per_run, 0);
//! assert!(r.to_json().starts_with("{\"area\":\"launch\""));
//! # Ok::<(), ferry_bench::launch::LaunchBenchError>(())
//! ```
use crate::launch_series::{self, LaunchSeriesReport, SeriesError};
use ferry_abi::launch::KernelArgs;
use ferry_launch::transaction::{FinishError, LaunchError, PrepareError, StageError};
use ferry_launch::{EntryKernels, LaunchDescriptor, LaunchStaging, MetadataRegion, RunStreams};
use ferry_sim::{Arch, DeviceError, PlatformBuilder};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

// The original runtime's descriptor extents (docs/design/launch.md): the launch bench's
// descriptor size, and what `ferry info` sets beside ferry's own.

/// A2/A3 TMR descriptor extent from docs/design/launch.md (bytes).
pub const A2A3_TMR_EXTENT: usize = 43_264;
/// A5 TMR descriptor extent from docs/design/launch.md (bytes).
pub const A5_TMR_EXTENT: usize = 47_872;
/// A2/A3 HBG descriptor extent from docs/design/launch.md (bytes).
pub const A2A3_HBG_EXTENT: usize = 9_472;
/// A5 HBG descriptor extent from docs/design/launch.md (bytes).
pub const A5_HBG_EXTENT: usize = 14_080;

/// What to measure.
#[derive(Clone, Copy, Debug)]
pub struct LaunchBenchConfig {
    /// Arch of the simulated device.
    pub arch: Arch,
    /// Launch-route prefix bytes (the descriptor extent).
    pub descriptor_bytes: usize,
    /// Metadata bytes staged per run (0: none; a5 HBG stages its resident scheduler layout).
    pub metadata_bytes: usize,
    /// Measured runs per series.
    pub iterations: u32,
}

impl Default for LaunchBenchConfig {
    fn default() -> Self {
        Self {
            arch: Arch::A2a3,
            descriptor_bytes: A2A3_TMR_EXTENT,
            metadata_bytes: 0,
            iterations: 2_000,
        }
    }
}

/// Results.
#[derive(Clone, Copy, Debug)]
pub struct LaunchBenchReport {
    /// The configuration measured.
    pub config: LaunchBenchConfig,
    /// Mean host time of prepare + publish + launch with a changed prefix, nanoseconds.
    pub changed_ns_per_run: f64,
    /// Mean host time with an unchanged prefix, nanoseconds.
    pub unchanged_ns_per_run: f64,
    /// Bytes queued for copy per run with a changed prefix.
    pub changed_bytes_per_run: u64,
    /// Bytes queued for copy per run with an unchanged prefix.
    pub unchanged_bytes_per_run: u64,
    /// Entry forks per run with a changed prefix.
    pub changed_forks_per_run: f64,
    /// Entry forks per run with an unchanged prefix.
    pub unchanged_forks_per_run: f64,
}

impl LaunchBenchReport {
    /// One JSON object. `bytes_ratio_changed_vs_unchanged` is `null` when the unchanged series
    /// copies nothing.
    pub fn to_json(&self) -> String {
        let bytes_ratio = if self.unchanged_bytes_per_run == 0 {
            "null".to_string()
        } else {
            format!(
                "{:.3}",
                self.changed_bytes_per_run as f64 / self.unchanged_bytes_per_run as f64
            )
        };
        format!(
            concat!(
                "{{\"area\":\"launch\",\"arch\":\"{:?}\",\"descriptor_bytes\":{},",
                "\"metadata_bytes\":{},\"iterations\":{},",
                "\"changed_ns_per_run\":{:.0},\"unchanged_ns_per_run\":{:.0},",
                "\"time_ratio_changed_vs_unchanged\":{:.3},",
                "\"changed_bytes_per_run\":{},\"unchanged_bytes_per_run\":{},",
                "\"bytes_ratio_changed_vs_unchanged\":{},",
                "\"changed_forks_per_run\":{:.2},\"unchanged_forks_per_run\":{:.2}}}"
            ),
            self.config.arch,
            self.config.descriptor_bytes,
            self.config.metadata_bytes,
            self.config.iterations,
            self.changed_ns_per_run,
            self.unchanged_ns_per_run,
            self.changed_ns_per_run / self.unchanged_ns_per_run,
            self.changed_bytes_per_run,
            self.unchanged_bytes_per_run,
            bytes_ratio,
            self.changed_forks_per_run,
            self.unchanged_forks_per_run,
        )
    }
}

/// A step of the bench failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchBenchError {
    /// Device setup failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A device operation through the backend seam failed.
    #[error(transparent)]
    Backend(#[from] ferry_backend::BackendError),
    /// The configuration is unusable.
    #[error("invalid bench configuration: {0}")]
    Config(String),
    /// Staging metadata failed.
    #[error(transparent)]
    Stage(#[from] StageError),
    /// Preparation failed.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// Launch failed.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// Retirement failed.
    #[error(transparent)]
    Finish(#[from] FinishError),
}

/// One series' measurements.
struct Series {
    elapsed: Duration,
    bytes: u64,
    forks: u64,
}

/// A slot, its streams and a descriptor, ready to run series on.
pub struct LaunchBench {
    /// Kept alive for the slot and streams.
    _platform: ferry_sim::Platform,
    streams: RunStreams<ferry_sim::Device>,
    slot: LaunchStaging<ferry_sim::Device>,
    descriptor: LaunchDescriptor,
    metadata: Option<MetadataRegion>,
    counter: u32,
}

impl std::fmt::Debug for LaunchBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchBench").field("slot", &self.slot).finish_non_exhaustive()
    }
}

impl LaunchBench {
    /// Builds a device, a stream pair and a slot, and runs one warm-up run.
    ///
    /// # Errors
    /// See [`LaunchBenchError`].
    pub fn new(cfg: &LaunchBenchConfig) -> Result<Self, LaunchBenchError> {
        if cfg.descriptor_bytes < 4 {
            return Err(LaunchBenchError::Config("descriptor_bytes must be at least 4".into()));
        }
        let platform = PlatformBuilder::new(cfg.arch).hbm_bytes(64 << 20).build()?;
        let dev = platform.device(0)?.clone();
        let streams = RunStreams::new(&dev)?;
        let metadata = if cfg.metadata_bytes > 0 {
            let dst = dev.malloc(cfg.metadata_bytes as u64)?;
            Some(MetadataRegion::new(dst, vec![0x5a; cfg.metadata_bytes]))
        } else {
            None
        };
        let descriptor = LaunchDescriptor::new(vec![0; cfg.descriptor_bytes], cfg.descriptor_bytes)
            .map_err(|e| LaunchBenchError::Config(e.to_string()))?;
        let mut b = Self {
            slot: LaunchStaging::new(&dev, 0),
            _platform: platform,
            streams,
            descriptor,
            metadata,
            counter: 0,
        };
        b.one(true)?;
        Ok(b)
    }

    /// Runs one transaction (timed part only) and retires it; returns the timed duration.
    ///
    /// # Errors
    /// See [`LaunchBenchError`].
    pub fn one(&mut self, change_prefix: bool) -> Result<Duration, LaunchBenchError> {
        if change_prefix {
            self.counter = self.counter.wrapping_add(1);
            self.descriptor.image_mut()[..4].copy_from_slice(&self.counter.to_le_bytes());
        }
        let t0 = Instant::now();
        if let Some(m) = &self.metadata {
            self.slot.stage_launch_metadata(vec![m.clone()])?;
        }
        self.slot.prepare_runtime_args(&self.descriptor, KernelArgs::new(0, 0))?;
        self.slot.launch(&self.streams, EntryKernels::noop())?;
        let dt = t0.elapsed();
        self.slot.finish_run(Duration::from_secs(50))?;
        Ok(dt)
    }

    fn series(&mut self, change_prefix: bool, n: u32) -> Result<Series, LaunchBenchError> {
        let before = self.slot.stats();
        let mut elapsed = Duration::ZERO;
        for _ in 0..n {
            elapsed += self.one(change_prefix)?;
        }
        let after = self.slot.stats();
        Ok(Series {
            elapsed,
            bytes: after.bytes_copied - before.bytes_copied,
            forks: after.forks - before.forks,
        })
    }
}

/// Measures both series.
///
/// # Errors
/// See [`LaunchBenchError`].
pub fn run(cfg: &LaunchBenchConfig) -> Result<LaunchBenchReport, LaunchBenchError> {
    let n = cfg.iterations.max(1);
    let mut b = LaunchBench::new(cfg)?;
    let changed = b.series(true, n)?;
    // The prefix from the last changed run is resident now.
    let unchanged = b.series(false, n)?;
    let per = |d: Duration| d.as_nanos() as f64 / f64::from(n);
    Ok(LaunchBenchReport {
        config: *cfg,
        changed_ns_per_run: per(changed.elapsed),
        unchanged_ns_per_run: per(unchanged.elapsed),
        changed_bytes_per_run: changed.bytes / u64::from(n),
        unchanged_bytes_per_run: unchanged.bytes / u64::from(n),
        changed_forks_per_run: changed.forks as f64 / f64::from(n),
        unchanged_forks_per_run: unchanged.forks as f64 / f64::from(n),
    })
}

/// What `ferry bench launch` measures: the transaction's host cost, then the runtime series.
#[derive(Clone, Debug)]
pub struct LaunchArea {
    /// The launch transaction alone ([`run`]).
    pub transaction: LaunchBenchReport,
    /// The runtime series ([`launch_series::legs`]).
    pub series: Vec<LaunchSeriesReport>,
}

/// Why `ferry bench launch` failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchAreaError {
    /// The transaction measurement failed.
    #[error(transparent)]
    Transaction(#[from] LaunchBenchError),
    /// A runtime series failed.
    #[error(transparent)]
    Series(#[from] SeriesError),
}

/// `ferry bench launch`: [`run`] with the default configuration (200 runs per series with
/// `quick`), then every leg of [`launch_series::legs`].
///
/// # Errors
/// [`LaunchAreaError`] when either measurement fails.
pub fn measure(quick: bool) -> Result<LaunchArea, LaunchAreaError> {
    let mut cfg = LaunchBenchConfig::default();
    if quick {
        cfg.iterations = 200;
    }
    let transaction = run(&cfg)?;
    let series =
        launch_series::legs(quick).iter().map(launch_series::run).collect::<Result<Vec<_>, _>>()?;
    Ok(LaunchArea { transaction, series })
}

impl crate::AreaReport for LaunchArea {
    /// The transaction report's JSON object with the runtime series added as `"runtime": [...]`.
    fn to_json(&self) -> String {
        let list: Vec<String> = self.series.iter().map(LaunchSeriesReport::to_json).collect();
        let transaction = self.transaction.to_json();
        let body = transaction.strip_suffix('}').unwrap_or(&transaction);
        format!("{body},\"runtime\":[{}]}}", list.join(","))
    }

    fn to_text(&self) -> String {
        let (r, cfg) = (&self.transaction, &self.transaction.config);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "launch transaction ({:?}, {}-byte descriptor prefix, {} runs per series)",
            cfg.arch, cfg.descriptor_bytes, cfg.iterations
        );
        let _ = writeln!(
            s,
            "  changed prefix:   {:>8.0} ns per prepare+publish+launch, {} bytes copied",
            r.changed_ns_per_run, r.changed_bytes_per_run
        );
        let _ = writeln!(
            s,
            "  unchanged prefix: {:>8.0} ns per prepare+publish+launch, {} bytes copied",
            r.unchanged_ns_per_run, r.unchanged_bytes_per_run
        );
        let _ = write!(
            s,
            "  time ratio changed/unchanged: {:.2}",
            r.changed_ns_per_run / r.unchanged_ns_per_run
        );
        for series in &self.series {
            let _ = write!(s, "\n{}", series.to_text());
        }
        s
    }
}
