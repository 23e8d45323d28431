//! Gather throughput and planning cost, shared by `cargo bench -p ferry-bench --bench copy` and
//! `ferry bench copy`.
//!
//! For each fragment size, one run moves `count` fragments host → device three ways, on the
//! same platform and buffers:
//! - **engine**: [`HbmCopyEngine`] as configured (the gather kernel when the mean fragment is
//!   below 128 KiB, else null-stream copies — the row says which path ran);
//! - **per-fragment**: the same engine with the kernel off (one null-stream copy per fragment);
//! - **contiguous**: one copy of the same number of bytes (the baseline).
//!
//! Sources are permuted (stride-7 permutation) so nothing coalesces. After one warm-up of each
//! path the three run in `repeats` interleaved rounds (the order rotating), and every figure is
//! the path's median. The device is simulated: absolute GiB/s measure the
//! simulator on this host; the ratios between the three paths are the point.
//!
//! Defaults are scaled for a 2-core, 24 GiB machine: 8192 × 4 KiB (32 MiB), 1024 × 64 KiB
//! (64 MiB), 256 × 256 KiB (64 MiB). [`CopyBenchConfig::full`] is the issue's full size (8192
//! fragments of each size; 2 GiB host + 2 GiB device memory for 256 KiB).
use ferry_copy::planner::plan_items;
use ferry_copy::{transfer_detailed, HbmConfig, HbmCopyEngine, Loc, TransferItem, TransferRef};
use ferry_sim::{Arch, DeviceError, MemoryError, PlatformBuilder};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Errors of the bench and the emulator.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The simulated device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A registration or allocation failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A gather region could not be registered through the backend seam.
    #[error("registering the gather region")]
    Backend(#[from] ferry_backend::BackendError),
    /// A transfer reported failures.
    #[error("transfer failed: {0}")]
    Transfer(String),
    /// The configuration cannot be run.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// What to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyBenchConfig {
    /// `(fragment bytes, fragment count)` per row.
    pub shapes: Vec<(u64, u64)>,
    /// Interleaved timed rounds per path (the median is reported).
    pub repeats: u32,
    /// Items per planning measurement.
    pub plan_items: usize,
}

impl Default for CopyBenchConfig {
    /// Scaled-down sizes (see the module docs).
    fn default() -> Self {
        Self {
            shapes: vec![(4 << 10, 8192), (64 << 10, 1024), (256 << 10, 256)],
            repeats: 31,
            plan_items: 8192,
        }
    }
}

impl CopyBenchConfig {
    /// The issue's full size: 8192 fragments of 4 KiB, 64 KiB and 256 KiB.
    pub fn full() -> Self {
        Self {
            shapes: vec![(4 << 10, 8192), (64 << 10, 8192), (256 << 10, 8192)],
            ..Self::default()
        }
    }

    /// Small and fast (smoke runs, tests).
    pub fn quick() -> Self {
        Self {
            shapes: vec![(4 << 10, 512), (64 << 10, 64), (256 << 10, 16)],
            repeats: 1,
            plan_items: 1024,
        }
    }
}

/// One fragment size.
#[derive(Clone, Debug, PartialEq)]
pub struct GatherRow {
    /// Bytes per fragment.
    pub fragment_bytes: u64,
    /// Fragments.
    pub fragments: u64,
    /// Which path the engine took: `"gather"` or `"copy-engine"`.
    pub engine_path: &'static str,
    /// Best time of the engine path.
    pub engine: Duration,
    /// Best time with one null-stream copy per fragment.
    pub per_fragment: Duration,
    /// Best time of one contiguous copy of the same bytes.
    pub contiguous: Duration,
}

impl GatherRow {
    /// Bytes moved per run.
    pub fn bytes(&self) -> u64 {
        self.fragment_bytes * self.fragments
    }

    fn gib_s(&self, d: Duration) -> f64 {
        self.bytes() as f64 / d.as_secs_f64().max(1e-12) / (1u64 << 30) as f64
    }
}

/// Results.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchReport {
    /// One row per fragment size.
    pub rows: Vec<GatherRow>,
    /// Interleaved rounds behind each row's medians.
    pub repeats: u32,
    /// Items planned per measurement.
    pub plan_items: usize,
    /// Planning cost, nanoseconds per item (scattered, non-coalescing items).
    pub plan_ns_per_item: f64,
}

impl BenchReport {
    /// The report as one JSON object.
    pub fn to_json(&self) -> String {
        let rows: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                format!(
                    concat!(
                        "{{\"fragment_bytes\":{},\"fragments\":{},\"bytes\":{},\"engine_path\":\"{}\",",
                        "\"engine_ms\":{:.3},\"per_fragment_ms\":{:.3},\"contiguous_ms\":{:.3},",
                        "\"engine_gib_s\":{:.3},\"per_fragment_gib_s\":{:.3},\"contiguous_gib_s\":{:.3},",
                        "\"engine_vs_contiguous\":{:.3},\"engine_vs_per_fragment\":{:.3}}}"
                    ),
                    r.fragment_bytes,
                    r.fragments,
                    r.bytes(),
                    r.engine_path,
                    r.engine.as_secs_f64() * 1e3,
                    r.per_fragment.as_secs_f64() * 1e3,
                    r.contiguous.as_secs_f64() * 1e3,
                    r.gib_s(r.engine),
                    r.gib_s(r.per_fragment),
                    r.gib_s(r.contiguous),
                    r.contiguous.as_secs_f64() / r.engine.as_secs_f64().max(1e-12),
                    r.per_fragment.as_secs_f64() / r.engine.as_secs_f64().max(1e-12),
                )
            })
            .collect();
        format!(
            "{{\"area\":\"copy\",\"gather\":[{}],\"plan_items\":{},\"plan_ns_per_item\":{:.1}}}",
            rows.join(","),
            self.plan_items,
            self.plan_ns_per_item
        )
    }
}

impl crate::AreaReport for BenchReport {
    fn to_json(&self) -> String {
        BenchReport::to_json(self)
    }

    fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "host-to-device, medians of {} interleaved rounds (simulated device; compare the columns)",
            self.repeats
        );
        for row in &self.rows {
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let _ = writeln!(
                s,
                "  {:>5} x {:>4} KiB: engine ({}) {:>8.2} ms, per-fragment {:>8.2} ms, contiguous {:>8.2} ms",
                row.fragments,
                row.fragment_bytes >> 10,
                row.engine_path,
                ms(row.engine),
                ms(row.per_fragment),
                ms(row.contiguous)
            );
        }
        let _ = write!(
            s,
            "  planning: {:.1} ns per item ({} scattered items)",
            self.plan_ns_per_item, self.plan_items
        );
        s
    }
}

/// `ferry bench copy`'s configuration: [`CopyBenchConfig::full`] with `full`, else
/// [`CopyBenchConfig::quick`] with `quick`, else the default.
pub fn config(quick: bool, full: bool) -> CopyBenchConfig {
    match (full, quick) {
        (true, _) => CopyBenchConfig::full(),
        (false, true) => CopyBenchConfig::quick(),
        (false, false) => CopyBenchConfig::default(),
    }
}

/// Runs every measurement of `cfg`.
///
/// # Errors
/// When the simulated platform cannot be built or a transfer fails.
///
/// # Examples
/// ```
/// use ferry_bench::copy::{run, CopyBenchConfig};
/// let r = run(&CopyBenchConfig { shapes: vec![(4096, 16)], repeats: 1, plan_items: 64 })?;
/// assert_eq!(r.rows[0].engine_path, "gather");
/// assert!(r.to_json().contains("\"area\":\"copy\""));
/// # Ok::<(), ferry_bench::copy::BenchError>(())
/// ```
pub fn run(cfg: &CopyBenchConfig) -> Result<BenchReport, BenchError> {
    let mut rows = Vec::new();
    for &(frag, count) in &cfg.shapes {
        let mut f = GatherFixture::new(frag, count)?;
        let engine_path = f.engine_path();
        const PATHS: [Path; 3] = [Path::Engine, Path::PerFragment, Path::Contiguous];
        for p in PATHS {
            f.run(p)?; // warm-up
        }
        // Interleaved rounds, the order rotating each round, so a load swing on a shared
        // machine hits every path alike; each path's figure is its median.
        let mut times: [Vec<Duration>; 3] = Default::default();
        for round in 0..cfg.repeats.max(1) as usize {
            for k in 0..3 {
                let i = (round + k) % 3;
                times[i].push(f.run(PATHS[i])?);
            }
        }
        let [engine, per_fragment, contiguous] = times.map(|mut t| {
            t.sort_unstable();
            t[t.len() / 2]
        });
        f.verify()?;
        rows.push(GatherRow {
            fragment_bytes: frag,
            fragments: count,
            engine_path,
            engine,
            per_fragment,
            contiguous,
        });
    }
    Ok(BenchReport {
        rows,
        repeats: cfg.repeats,
        plan_items: cfg.plan_items,
        plan_ns_per_item: plan_ns_per_item(cfg.plan_items),
    })
}

/// Nanoseconds per item to plan `n` scattered items (best of a few runs).
pub fn plan_ns_per_item(n: usize) -> f64 {
    let n = n.max(1) as u64;
    // Planning never dereferences endpoints; fixed fake addresses suffice.
    let src = TransferRef { addr: 0x1000_0000, size: 8 * n * 4096, loc: Loc::Cpu, device: None };
    let dst = TransferRef { addr: 0x9000_0000, size: n * 4096, loc: Loc::Device, device: Some(0) };
    let items = permuted_items(src, dst, 4096, n);
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        let set = plan_items(&items, |_, _| true);
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        std::hint::black_box(set);
        best = best.min(ns);
    }
    best
}

/// `n` fragments of `frag` bytes: source slot `(7·i) mod n`, destination slot `i`.
fn permuted_items(src: TransferRef, dst: TransferRef, frag: u64, n: u64) -> Vec<TransferItem> {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let stride = (7..).find(|&s| gcd(s, n) == 1).unwrap_or(1);
    (0..n)
        .map(|i| TransferItem {
            src,
            src_offset: ((i * stride) % n) * frag,
            dst,
            dst_offset: i * frag,
            size: frag,
            tag: i,
        })
        .collect()
}

/// Which path a [`GatherFixture`] run takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The engine as configured.
    Engine,
    /// One null-stream copy per fragment.
    PerFragment,
    /// One contiguous copy of the same bytes.
    Contiguous,
}

/// A platform, a registered host buffer and a device buffer for one fragment size (also used
/// by the criterion bench).
pub struct GatherFixture {
    host: Vec<u8>,
    engine: HbmCopyEngine<ferry_sim::Platform>,
    no_kernel: HbmCopyEngine<ferry_sim::Platform>,
    items: Vec<TransferItem>,
    whole: [TransferItem; 1],
    dev: ferry_sim::DevicePtr,
    platform: ferry_sim::Platform,
}

impl std::fmt::Debug for GatherFixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatherFixture").field("fragments", &self.items.len()).finish()
    }
}

impl GatherFixture {
    /// `count` fragments of `frag` bytes.
    ///
    /// # Errors
    /// When the platform cannot be built, or memory cannot be allocated or registered.
    pub fn new(frag: u64, count: u64) -> Result<Self, BenchError> {
        let total = frag
            .checked_mul(count)
            .filter(|&t| t > 0)
            .ok_or_else(|| BenchError::Config(format!("{count} fragments of {frag} bytes")))?;
        let len = usize::try_from(total).map_err(|_| BenchError::Config("too large".into()))?;
        let platform = PlatformBuilder::new(Arch::A2a3).hbm_bytes(total + (64 << 20)).build()?;
        let mut host: Vec<u8> = (0..len).map(|i| (i as u8) ^ ((i >> 12) as u8)).collect();
        let engine = HbmCopyEngine::new(platform.clone(), HbmConfig::default());
        let no_kernel = HbmCopyEngine::new(
            platform.clone(),
            HbmConfig { gather_kernel: false, ..HbmConfig::default() },
        );
        // SAFETY: `host` is owned by the fixture and outlives both engines' use of it: the
        // registration lives in `engine`, which `Drop for GatherFixture` clears before `host`
        // is freed, and nothing else touches `host` while transfers run.
        unsafe { engine.add_host_gather_region(host.as_mut_ptr(), len)? };
        engine.prewarm(1);
        no_kernel.prewarm(1);
        let dev = platform.device(0)?.malloc(total)?;
        // SAFETY: as above.
        let src = unsafe { TransferRef::host(host.as_mut_ptr(), len) };
        let dst = TransferRef::device(0, dev, total);
        let items = permuted_items(src, dst, frag, count);
        let whole = [TransferItem { src, src_offset: 0, dst, dst_offset: 0, size: total, tag: 0 }];
        Ok(Self { host, engine, no_kernel, items, whole, dev, platform })
    }

    /// Which path the configured engine takes for this shape.
    pub fn engine_path(&self) -> &'static str {
        let n = self.items.len() as u64;
        if n >= 2 && self.whole[0].size / n < self.engine.config().gather_threshold {
            "gather"
        } else {
            "copy-engine"
        }
    }

    /// One timed run of `which`.
    ///
    /// # Errors
    /// When the transfer reports a failure.
    pub fn run(&mut self, which: Path) -> Result<Duration, BenchError> {
        let (e, items) = match which {
            Path::Engine => (&self.engine, &self.items[..]),
            Path::PerFragment => (&self.no_kernel, &self.items[..]),
            Path::Contiguous => (&self.engine, &self.whole[..]),
        };
        let t = Instant::now();
        let o = transfer_detailed(e, items);
        let d = t.elapsed();
        if !o.is_ok() {
            return Err(BenchError::Transfer(format!(
                "{:?} {:?}",
                o.rejected.first(),
                o.failures.first()
            )));
        }
        Ok(d)
    }

    /// Checks the device buffer against the permutation (after an engine or per-fragment run).
    ///
    /// # Errors
    /// When a byte differs.
    pub fn verify(&mut self) -> Result<(), BenchError> {
        let Some(last) = self.items.last() else { return Ok(()) };
        let total = (last.dst_offset + last.size) as usize;
        self.run(Path::Engine)?;
        let mut out = vec![0u8; total];
        self.platform.device(0)?.copy_dtoh(self.dev, &mut out)?;
        for it in &self.items {
            let (s, d, n) = (it.src_offset as usize, it.dst_offset as usize, it.size as usize);
            if out[d..d + n] != self.host[s..s + n] {
                return Err(BenchError::Transfer(format!("fragment {} differs", it.tag)));
            }
        }
        Ok(())
    }
}

impl Drop for GatherFixture {
    fn drop(&mut self) {
        // Unregister before `host` is freed (fields drop after this body).
        self.engine.clear_host_gather_regions();
    }
}
