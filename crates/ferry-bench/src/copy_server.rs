//! The server emulator of the copy-pool design's "Verification" (`ferry bench copy
//! --emulate-server`), on the simulated chip with the stall cost model on, run without and with
//! Prewarm in interleaved rounds.
//!
//! One run, in a serving process's order:
//! 1. **server start**: a platform of `devices` devices, a composite of [`LocalCopyEngine`] and
//!    [`HbmCopyEngine`], and (in the prewarm run) [`HbmCopyEngine::prewarm`] first. Queue
//!    counters are snapshot here ("after start");
//! 2. the backend's **host DRAM pool** registers on a background thread, region by region (each
//!    registration holds the driver lock for `bytes / registration rate`), while
//! 3. **clients**, one per device, allocate a KV buffer and fill device memory until only
//!    [`EmulatorConfig::free_after_fill`] is left (queue creation is then expensive);
//! 4. **serving** starts once the pool is registered: `threads` threads (spread over the
//!    devices) each make `calls` calls: batch puts (KV pages → pool pages, D2H) and gets
//!    (pool → KV, H2D) of `ranges` scattered page ranges, and every `fallback_every`-th call a
//!    batch of large fragments each way (≥ 128 KiB, so it stays on the null stream). Every
//!    call's latency is recorded. [`EmulatorConfig::eviction`] optionally evicts every
//!    device's queues once during serving (KFD under memory pressure).
//!
//! What makes the freeze: with the cost model on, a queue creation on a nearly full device
//! stalls, and holds the process-wide driver lock (libhsakmt's FMM lock) for the whole stall,
//! so every other queue creation, allocation and registration of the process — and, through
//! the SDMA engine allocator, every copy of that device — backs up behind it. Without Prewarm
//! the first gathers and copies create their streams, compute queues, SDMA queues and staging
//! mid-serving; with it they were created at start and serving creates and allocates nothing.
//!
//! # Scale
//! The stall costs are the copy-pool design's scaled **1000× down** ([`CostModel::stalls`]: seconds become
//! milliseconds; a 30–92 s queue creation on a full GPU is 30–92 ms here, the 28 s first
//! code-object load 28 ms). The work is scaled with them as far as a CPU-simulated device
//! allows: a real call's copy takes milliseconds on the GPU, which would be microseconds here,
//! below what 16 threads on 2 cores can time, so a default call moves 512 ranges of 1 KiB
//! (0.5 MiB, ~0.1 ms of copying): the smallest batch that still runs the gather path with
//! hundreds of fragments. The real server took up to 342 s without and ≤ 5 s with Prewarm (0.015,
//! docs/design/copy-pool.md);
//! [`EmulatorReport::freeze_ratio`] is the same ratio here.
//!
//! The report gives, per leg: max, p99 and mean call latency (medians over the rounds),
//! queues, streams and code objects created after start, bytes/s, and whether every byte
//! round-tripped; and the freeze ratio. [`EmulatorConfig::full`] uses the real server's 8192-range
//! batches and 4 devices.
use crate::copy::BenchError;
use ferry_copy::{
    transfer_detailed, CompositeTransferEngine, HbmConfig, HbmCopyEngine, LocalCopyEngine,
    TransferItem, TransferRef,
};
use ferry_sim::cost::CostModel;
use ferry_sim::{Arch, DevicePtr, Platform, PlatformBuilder};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Shape of one emulator run.
#[derive(Clone, Debug, PartialEq)]
pub struct EmulatorConfig {
    /// Devices (one client each).
    pub devices: u32,
    /// HBM per device.
    pub hbm_bytes: u64,
    /// Device bytes left free after the clients fill their devices.
    pub free_after_fill: u64,
    /// Serving threads (spread round-robin over devices).
    pub threads: usize,
    /// Page ranges per batch put/get.
    pub ranges: u64,
    /// Bytes per page range.
    pub page_bytes: u64,
    /// Calls per thread.
    pub calls: usize,
    /// Every n-th call is a fallback batch (0 = never).
    pub fallback_every: usize,
    /// Fragments of a fallback batch, each way.
    pub fallback_fragments: u64,
    /// Bytes per fallback fragment (≥ 128 KiB keeps it on the null stream).
    pub fallback_fragment_bytes: u64,
    /// Regions the host pool registers in.
    pub pool_regions: usize,
    /// Host registration speed while it holds the driver lock.
    pub registration_bytes_per_sec: f64,
    /// Streams per device for the prewarm run.
    pub prewarm_streams: usize,
    /// The device cost model.
    pub cost: CostModel,
    /// Check every byte after the run.
    pub verify: bool,
    /// An optional KFD-style eviction of every device's queues: `(after, length)` from the
    /// start of serving (docs/design/copy-pool.md: once per run, 0.6–46 s, as the clients fill their GPUs).
    pub eviction: Option<(Duration, Duration)>,
    /// Interleaved rounds (without, with, without, …); the report gives medians.
    pub rounds: usize,
}

impl Default for EmulatorConfig {
    /// Scaled-down sizes (see the module docs): 2 devices of 512 MiB filled to 48 MiB free,
    /// 16 threads × 8 calls of 512 × 1 KiB ranges, a fallback batch every third call, a
    /// 16 MiB pool (one slice per thread) registering at 256 MiB/s, Prewarm(8), 3 rounds.
    fn default() -> Self {
        let mut cost = CostModel::stalls();
        cost.registration_bytes_per_sec = 256.0 * (1 << 20) as f64;
        Self {
            devices: 2,
            hbm_bytes: 512 << 20,
            free_after_fill: 48 << 20,
            threads: 16,
            ranges: 512,
            page_bytes: 1024,
            calls: 8,
            fallback_every: 3,
            fallback_fragments: 2,
            fallback_fragment_bytes: 256 << 10,
            pool_regions: 8,
            registration_bytes_per_sec: cost.registration_bytes_per_sec,
            prewarm_streams: ferry_copy::env::DEFAULT_PREWARM_STREAMS,
            cost,
            verify: true,
            eviction: None,
            rounds: 3,
        }
    }
}

impl EmulatorConfig {
    /// The issue's shape: 8192 ranges per batch, 4 devices of 1 GiB.
    pub fn full() -> Self {
        Self { devices: 4, hbm_bytes: 1 << 30, ranges: 8192, calls: 8, ..Self::default() }
    }

    /// Small, cost model off: for tests that assert counters.
    pub fn small() -> Self {
        Self {
            devices: 2,
            hbm_bytes: 64 << 20,
            free_after_fill: 28 << 20,
            threads: 4,
            ranges: 64,
            page_bytes: 1024,
            calls: 4,
            fallback_every: 2,
            fallback_fragments: 2,
            fallback_fragment_bytes: 128 << 10,
            pool_regions: 2,
            registration_bytes_per_sec: f64::INFINITY,
            prewarm_streams: 8,
            cost: CostModel::default(),
            verify: true,
            eviction: None,
            rounds: 1,
        }
    }

    fn slice_bytes(&self) -> u64 {
        self.ranges * self.page_bytes
    }

    fn fallback_bytes(&self) -> u64 {
        self.fallback_fragments * self.fallback_fragment_bytes
    }
}

/// Results of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerRunReport {
    /// Streams per device prewarmed (0 = no prewarm).
    pub prewarm_streams: usize,
    /// Time the prewarm took.
    pub prewarm: Duration,
    /// Time from the end of the prewarm until the host pool was registered (serving starts
    /// then).
    pub registration: Duration,
    /// KFD-style queue evictions during serving, all devices.
    pub evictions: u64,
    /// Calls made.
    pub calls: usize,
    /// Slowest call.
    pub max_call: Duration,
    /// 99th-percentile call.
    pub p99_call: Duration,
    /// Mean call.
    pub mean_call: Duration,
    /// Hardware queues (compute + copy engine) created after start, all devices.
    pub queues_created_after_start: u64,
    /// Streams created after start, all devices.
    pub streams_created_after_start: u64,
    /// Code objects loaded after start, all devices.
    pub code_object_loads_after_start: u64,
    /// Device memory queues held at the end, all devices.
    pub queue_memory_bytes: u64,
    /// Queue creations that waited for the driver lock, all devices.
    pub driver_lock_waits: u64,
    /// Bytes moved by serving calls.
    pub bytes: u64,
    /// Serving wall time.
    pub wall: Duration,
    /// Gather kernels that ran.
    pub gathers: u64,
    /// Plans copied on the null stream.
    pub fallback_plans: u64,
    /// Times a gather waited for a pooled stream.
    pub pool_waits: u64,
    /// Failed or rejected items.
    pub failed_items: u64,
    /// Whether every byte round-tripped (`None` when not checked).
    pub verified: Option<bool>,
}

impl ServerRunReport {
    /// Serving throughput.
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn to_json(&self) -> String {
        format!(
            concat!(
                "{{\"prewarm_streams\":{},\"prewarm_ms\":{:.1},\"registration_ms\":{:.1},",
                "\"evictions\":{},\"calls\":{},\"max_call_ms\":{:.2},",
                "\"p99_call_ms\":{:.2},\"mean_call_ms\":{:.2},\"queues_created_after_start\":{},",
                "\"streams_created_after_start\":{},\"code_object_loads_after_start\":{},",
                "\"queue_memory_bytes\":{},\"driver_lock_waits\":{},\"bytes\":{},\"wall_ms\":{:.1},",
                "\"bytes_per_sec\":{:.0},\"gathers\":{},\"fallback_plans\":{},\"pool_waits\":{},",
                "\"failed_items\":{},\"verified\":{}}}"
            ),
            self.prewarm_streams,
            self.prewarm.as_secs_f64() * 1e3,
            self.registration.as_secs_f64() * 1e3,
            self.evictions,
            self.calls,
            self.max_call.as_secs_f64() * 1e3,
            self.p99_call.as_secs_f64() * 1e3,
            self.mean_call.as_secs_f64() * 1e3,
            self.queues_created_after_start,
            self.streams_created_after_start,
            self.code_object_loads_after_start,
            self.queue_memory_bytes,
            self.driver_lock_waits,
            self.bytes,
            self.wall.as_secs_f64() * 1e3,
            self.bytes_per_sec(),
            self.gathers,
            self.fallback_plans,
            self.pool_waits,
            self.failed_items,
            self.verified.map_or("null".to_owned(), |v| v.to_string()),
        )
    }
}

/// Both legs, side by side, over interleaved rounds.
#[derive(Clone, Debug, PartialEq)]
pub struct EmulatorReport {
    /// The configuration every run used.
    pub config: EmulatorConfig,
    /// Without Prewarm (lazy, uncapped pool): per-round medians of the latencies and times,
    /// the most any round created or waited for the counters, `verified` only if every round
    /// verified.
    pub without_prewarm: ServerRunReport,
    /// With `Prewarm(prewarm_streams)`, summarised as `without_prewarm`.
    pub with_prewarm: ServerRunReport,
    /// Every round's pair (without, with), in the order they ran.
    pub rounds: Vec<(ServerRunReport, ServerRunReport)>,
}

impl EmulatorReport {
    /// The freeze ratio: the with-Prewarm leg's median max call over the without leg's
    /// (docs/design/copy-pool.md: 5 s / 342 s ≈ 0.015).
    pub fn freeze_ratio(&self) -> f64 {
        self.with_prewarm.max_call.as_secs_f64()
            / self.without_prewarm.max_call.as_secs_f64().max(1e-9)
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// One leg's rounds summarised (see [`EmulatorReport::without_prewarm`]).
fn summarise(runs: &[&ServerRunReport]) -> ServerRunReport {
    let med = |f: fn(&ServerRunReport) -> Duration| median(runs.iter().map(|r| f(r)).collect());
    let most = |f: fn(&ServerRunReport) -> u64| runs.iter().map(|r| f(r)).max().unwrap_or(0);
    let first = runs.first().map(|r| (*r).clone()).unwrap_or_default();
    ServerRunReport {
        prewarm: med(|r| r.prewarm),
        registration: med(|r| r.registration),
        max_call: med(|r| r.max_call),
        p99_call: med(|r| r.p99_call),
        mean_call: med(|r| r.mean_call),
        wall: med(|r| r.wall),
        evictions: most(|r| r.evictions),
        queues_created_after_start: most(|r| r.queues_created_after_start),
        streams_created_after_start: most(|r| r.streams_created_after_start),
        code_object_loads_after_start: most(|r| r.code_object_loads_after_start),
        queue_memory_bytes: most(|r| r.queue_memory_bytes),
        driver_lock_waits: most(|r| r.driver_lock_waits),
        gathers: most(|r| r.gathers),
        fallback_plans: most(|r| r.fallback_plans),
        pool_waits: most(|r| r.pool_waits),
        failed_items: most(|r| r.failed_items),
        verified: runs.iter().try_fold(true, |all, r| r.verified.map(|v| all && v)),
        ..first
    }
}

impl EmulatorReport {
    /// The report as one JSON object.
    pub fn to_json(&self) -> String {
        let c = &self.config;
        format!(
            concat!(
                "{{\"area\":\"copy-emulator\",\"devices\":{},\"threads\":{},\"ranges\":{},",
                "\"page_bytes\":{},\"calls_per_thread\":{},\"cost_model\":{},\"rounds\":{},",
                "\"freeze_ratio\":{:.4},\"round_freeze_ratios\":[{}],",
                "\"without_prewarm\":{},\"with_prewarm\":{}}}"
            ),
            c.devices,
            c.threads,
            c.ranges,
            c.page_bytes,
            c.calls,
            c.cost.enabled,
            self.rounds.len(),
            self.freeze_ratio(),
            self.rounds
                .iter()
                .map(|(w, p)| format!(
                    "{:.4}",
                    p.max_call.as_secs_f64() / w.max_call.as_secs_f64().max(1e-9)
                ))
                .collect::<Vec<_>>()
                .join(","),
            self.without_prewarm.to_json(),
            self.with_prewarm.to_json()
        )
    }
}

/// `ferry bench copy --emulate-server`'s configuration: [`EmulatorConfig::full`] with `full`,
/// else 2 calls in 1 round with `quick`, else the default; the "with prewarm" leg takes its
/// streams from the server's knob (`UMBP_HBM_GATHER_PREWARM_STREAMS`), as the server would: a
/// bad value is logged and the default kept, and 0 (which would turn the leg into a second lazy
/// run) keeps the default too and says so.
pub fn config(quick: bool, full: bool) -> EmulatorConfig {
    let mut cfg = match (full, quick) {
        (true, _) => EmulatorConfig::full(),
        (false, true) => EmulatorConfig { calls: 2, rounds: 1, ..Default::default() },
        (false, false) => EmulatorConfig::default(),
    };
    match ferry_copy::env::CopyKnobs::from_env().prewarm_streams {
        0 => tracing::warn!(
            "UMBP_HBM_GATHER_PREWARM_STREAMS=0 disables prewarm; the emulator's prewarm leg keeps {}",
            cfg.prewarm_streams
        ),
        n => cfg.prewarm_streams = n,
    }
    cfg
}

impl crate::AreaReport for EmulatorReport {
    fn to_json(&self) -> String {
        EmulatorReport::to_json(self)
    }

    /// Both legs side by side, as `ferry bench copy --emulate-server` prints them.
    fn to_text(&self) -> String {
        let cfg = &self.config;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "server emulator: {} devices, {} threads x {} calls, {} ranges of {} B, stall cost model {}, {} interleaved rounds (medians)",
            cfg.devices,
            cfg.threads,
            cfg.calls,
            cfg.ranges,
            cfg.page_bytes,
            if cfg.cost.enabled { "on (docs/design/copy-pool.md / 1000)" } else { "off" },
            self.rounds.len()
        );
        let _ = writeln!(s, "  {:<34} {:>14} {:>14}", "", "without", "with prewarm");
        let (w, p) = (&self.without_prewarm, &self.with_prewarm);
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
        let rows = [
            ("max call", ms(w.max_call), ms(p.max_call)),
            ("p99 call", ms(w.p99_call), ms(p.p99_call)),
            ("mean call", ms(w.mean_call), ms(p.mean_call)),
            (
                "queues created after start",
                w.queues_created_after_start.to_string(),
                p.queues_created_after_start.to_string(),
            ),
            (
                "streams created after start",
                w.streams_created_after_start.to_string(),
                p.streams_created_after_start.to_string(),
            ),
            (
                "MiB/s",
                format!("{:.0}", w.bytes_per_sec() / (1u64 << 20) as f64),
                format!("{:.0}", p.bytes_per_sec() / (1u64 << 20) as f64),
            ),
            ("prewarm", ms(w.prewarm), ms(p.prewarm)),
            ("failed items", w.failed_items.to_string(), p.failed_items.to_string()),
            ("bytes verified", format!("{:?}", w.verified), format!("{:?}", p.verified)),
        ];
        for (name, x, y) in rows {
            let _ = writeln!(s, "  {name:<34} {x:>14} {y:>14}");
        }
        let _ = write!(
            s,
            "  freeze ratio (max call with / without): {:.3} (docs/design/copy-pool.md: 5 s / 342 s = 0.015)",
            self.freeze_ratio()
        );
        s
    }
}

/// Runs the emulator without and with Prewarm.
///
/// # Errors
/// When the configuration does not fit the devices, or the platform cannot be built.
///
/// # Examples
/// ```
/// use ferry_bench::copy_server::{run, EmulatorConfig};
/// let r = run(&EmulatorConfig { threads: 2, calls: 2, ranges: 16, ..EmulatorConfig::small() })?;
/// assert_eq!(r.with_prewarm.queues_created_after_start, 0);
/// assert!(r.without_prewarm.queues_created_after_start > 0);
/// # Ok::<(), ferry_bench::copy::BenchError>(())
/// ```
pub fn run(cfg: &EmulatorConfig) -> Result<EmulatorReport, BenchError> {
    if cfg.threads == 0 || cfg.devices == 0 || cfg.ranges < 2 || cfg.page_bytes == 0 {
        return Err(BenchError::Config("threads, devices, page bytes > 0 and ranges ≥ 2".into()));
    }
    // Interleaved: a load swing on a shared machine hits both legs alike.
    let rounds = (0..cfg.rounds.max(1))
        .map(|_| Ok((run_once(cfg, 0)?, run_once(cfg, cfg.prewarm_streams)?)))
        .collect::<Result<Vec<_>, BenchError>>()?;
    let without_prewarm = summarise(&rounds.iter().map(|r| &r.0).collect::<Vec<_>>());
    let with_prewarm = summarise(&rounds.iter().map(|r| &r.1).collect::<Vec<_>>());
    Ok(EmulatorReport { config: cfg.clone(), without_prewarm, with_prewarm, rounds })
}

/// Queue-ish counters summed over devices.
fn totals(p: &Platform) -> [u64; 5] {
    p.devices().iter().fold([0; 5], |mut a, d| {
        let c = d.counters();
        a[0] += c.compute_queues_created + c.sdma_queues_created;
        a[1] += c.streams_created;
        a[2] += c.code_object_loads;
        a[3] += c.queue_memory_bytes;
        a[4] += c.driver_lock_waits;
        a
    })
}

struct Shared {
    engines: CompositeTransferEngine,
    pool: TransferRef,
    kv: Vec<TransferRef>,
}

fn run_once(cfg: &EmulatorConfig, prewarm: usize) -> Result<ServerRunReport, BenchError> {
    let mut cost = cfg.cost;
    cost.registration_bytes_per_sec = cfg.registration_bytes_per_sec;
    let platform = PlatformBuilder::new(Arch::A2a3)
        .devices(cfg.devices)
        .hbm_bytes(cfg.hbm_bytes)
        .cost_model(cost)
        .build()?;
    // 1. Server start.
    let hbm = Arc::new(HbmCopyEngine::new(platform.clone(), HbmConfig::default()));
    let mut engines = CompositeTransferEngine::new();
    engines.add_engine(Arc::new(LocalCopyEngine::default())).add_engine(hbm.clone());
    let t = Instant::now();
    hbm.prewarm(prewarm);
    let prewarm_time = t.elapsed();
    let start = totals(&platform);

    // 2. The host DRAM pool: one slice per thread (pages + fallback area), registering in the
    // background region by region.
    let per_thread = cfg.slice_bytes() + cfg.fallback_bytes();
    let pool_len = usize::try_from(per_thread * cfg.threads as u64)
        .map_err(|_| BenchError::Config("pool too large".into()))?;
    let mut pool_mem = vec![0u8; pool_len];
    let pool_ptr = pool_mem.as_mut_ptr() as usize;
    let regions = cfg.pool_regions.clamp(1, cfg.threads);
    let region_len = pool_len.div_ceil(regions);
    let registrar = {
        let (p, e) = (platform.clone(), hbm.clone());
        std::thread::spawn(move || {
            let mut off = 0;
            while off < pool_len {
                let len = region_len.min(pool_len - off);
                // SAFETY: the region lies inside `pool_mem`, which outlives every registration:
                // `run_once` joins this thread, then clears the engine's regions before
                // `pool_mem` drops; serving threads access it only through transfers.
                match unsafe { p.register_host((pool_ptr + off) as *mut u8, len) } {
                    Ok(r) => e.adopt_host_registration(r),
                    Err(err) => tracing::warn!("pool registration failed: {err}"),
                }
                off += len;
            }
        })
    };

    // 3. Clients: KV buffer per device, then fill the device until little is free (while the
    // pool registers).
    let threads_on =
        |d: u32| (0..cfg.threads).filter(|t| *t as u32 % cfg.devices == d).count() as u64;
    let mut kv = Vec::new();
    let mut ballast = Vec::new();
    for d in platform.devices() {
        let bytes = (threads_on(d.ordinal()) * per_thread).max(64);
        let ptr = d.malloc(bytes)?;
        let host = d.memory().host_ptr(ptr, bytes)?;
        // SAFETY: `host` is the SVM view of the `bytes`-byte allocation just made; nothing else
        // uses it yet.
        let view = unsafe { std::slice::from_raw_parts_mut(host, bytes as usize) };
        fill_kv(view, d.ordinal());
        kv.push(TransferRef::device(d.ordinal(), ptr, bytes));
        let free = d.memory().size() - d.memory().used();
        if free > cfg.free_after_fill {
            ballast.push((d.clone(), d.malloc(free - cfg.free_after_fill)?));
        }
    }

    // The server serves from its pool once the pool is registered (docs/design/copy-pool.md: Prewarm, then the
    // backend and its pool, then serving).
    let _ = registrar.join();
    let registered = t.elapsed() - prewarm_time;

    // 4. Serving, with the optional KFD-style eviction as the clients' fill presses the driver.
    // SAFETY: `pool_mem` outlives the serving threads (joined below); each thread reads and
    // writes only its own slice, through transfers.
    let pool = unsafe { TransferRef::host(pool_mem.as_mut_ptr(), pool_len) };
    let shared = Arc::new(Shared { engines, pool, kv });
    let t0 = Instant::now();
    let evictor = cfg.eviction.map(|(after, length)| {
        let devices = platform.devices().to_vec();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            for d in &devices {
                d.evict_queues(length);
            }
        })
    });
    let workers: Vec<_> = (0..cfg.threads)
        .map(|t| {
            let (s, c) = (shared.clone(), cfg.clone());
            std::thread::spawn(move || serve(&s, &c, t))
        })
        .collect();
    let mut lat = Vec::new();
    let (mut bytes, mut failed) = (0u64, 0u64);
    for w in workers {
        let (l, b, f) =
            w.join().map_err(|_| BenchError::Transfer("a serving thread panicked".into()))?;
        lat.extend(l);
        bytes += b;
        failed += f;
    }
    let wall = t0.elapsed();
    if let Some(e) = evictor {
        let _ = e.join();
    }
    let end = totals(&platform);

    let verified = cfg.verify.then(|| verify(&platform, cfg, &shared, &pool_mem));
    hbm.clear_host_gather_regions();
    drop(shared);
    for (d, p) in ballast {
        let _ = d.free(p);
    }
    lat.sort_unstable();
    let st = hbm.stats();
    let pool_waits = (0..cfg.devices).filter_map(|d| hbm.pool_stats(d)).map(|p| p.waits).sum();
    Ok(ServerRunReport {
        prewarm_streams: prewarm,
        prewarm: prewarm_time,
        registration: registered,
        evictions: platform.devices().iter().map(|d| d.counters().queue_evictions).sum(),
        calls: lat.len(),
        max_call: lat.last().copied().unwrap_or_default(),
        p99_call: percentile(&lat, 0.99),
        mean_call: if lat.is_empty() {
            Duration::ZERO
        } else {
            lat.iter().sum::<Duration>() / lat.len() as u32
        },
        queues_created_after_start: end[0] - start[0],
        streams_created_after_start: end[1] - start[1],
        code_object_loads_after_start: end[2] - start[2],
        queue_memory_bytes: end[3],
        driver_lock_waits: end[4],
        bytes,
        wall,
        gathers: st.gathers,
        fallback_plans: st.fallback_plans,
        pool_waits,
        failed_items: failed,
        verified,
    })
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn kv_byte(dev: u32, i: usize) -> u8 {
    (i as u8).wrapping_mul(13) ^ ((i >> 10) as u8) ^ (dev as u8).wrapping_mul(101)
}

fn fill_kv(view: &mut [u8], dev: u32) {
    for (i, b) in view.iter_mut().enumerate() {
        *b = kv_byte(dev, i);
    }
}

/// Where thread `t`'s pages live: (KV endpoint, offset of its KV slice, offset of its pool
/// slice).
fn layout(s: &Shared, cfg: &EmulatorConfig, t: usize) -> (TransferRef, u64, u64) {
    let dev = t as u32 % cfg.devices;
    let rank = (0..t).filter(|u| *u as u32 % cfg.devices == dev).count() as u64;
    let per_thread = cfg.slice_bytes() + cfg.fallback_bytes();
    (s.kv[dev as usize], rank * per_thread, t as u64 * per_thread)
}

/// Page `i` of a thread's KV slice lives at pool page `perm(i)`.
fn perm(i: u64, n: u64) -> u64 {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let stride = (7..).find(|&s| gcd(s, n) == 1).unwrap_or(1);
    (i * stride) % n
}

/// One serving thread: returns (call latencies, bytes moved, failed items).
fn serve(s: &Shared, cfg: &EmulatorConfig, t: usize) -> (Vec<Duration>, u64, u64) {
    let (kv, kv_off, pool_off) = layout(s, cfg, t);
    let n = cfg.ranges;
    let pg = cfg.page_bytes;
    let put: Vec<_> = (0..n)
        .map(|i| TransferItem {
            src: kv,
            src_offset: kv_off + i * pg,
            dst: s.pool,
            dst_offset: pool_off + perm(i, n) * pg,
            size: pg,
            tag: i,
        })
        .collect();
    let get: Vec<_> = put
        .iter()
        .map(|it| TransferItem {
            src: it.dst,
            src_offset: it.dst_offset,
            dst: it.src,
            dst_offset: it.src_offset,
            ..*it
        })
        .collect();
    // Fallback batches: large fragments of the slice's tail area, each way.
    let fb_kv = kv_off + cfg.slice_bytes();
    let fb_pool = pool_off + cfg.slice_bytes();
    let fb = cfg.fallback_fragment_bytes;
    let fb_put: Vec<_> = (0..cfg.fallback_fragments)
        .map(|i| TransferItem {
            src: kv,
            src_offset: fb_kv + i * fb,
            dst: s.pool,
            dst_offset: fb_pool + i * fb,
            size: fb,
            tag: i,
        })
        .collect();
    let fb_get: Vec<_> = fb_put
        .iter()
        .map(|it| TransferItem {
            src: it.dst,
            src_offset: it.dst_offset,
            dst: it.src,
            dst_offset: it.src_offset,
            ..*it
        })
        .collect();
    let mut lat = Vec::with_capacity(cfg.calls);
    let (mut bytes, mut failed) = (0u64, 0u64);
    let (mut normal, mut fallbacks) = (0usize, 0usize);
    for c in 0..cfg.calls {
        let fallback = cfg.fallback_every != 0 && c % cfg.fallback_every == cfg.fallback_every - 1;
        // Each kind alternates put, get, put, ...: a get always finds what this thread put.
        let items = if fallback {
            fallbacks += 1;
            if fallbacks % 2 == 1 {
                &fb_put
            } else {
                &fb_get
            }
        } else {
            normal += 1;
            if normal % 2 == 1 {
                &put
            } else {
                &get
            }
        };
        let t0 = Instant::now();
        let o = transfer_detailed(&s.engines, items);
        lat.push(t0.elapsed());
        failed += o.failed_tags().len() as u64;
        bytes += items.iter().map(|i| i.size).sum::<u64>();
    }
    (lat, bytes, failed)
}

/// Every KV byte is still the client's pattern (gets wrote back what puts read), and every
/// pool page that a put wrote holds the KV page it came from.
fn verify(p: &Platform, cfg: &EmulatorConfig, s: &Shared, pool: &[u8]) -> bool {
    for d in p.devices() {
        let kv = s.kv[d.ordinal() as usize];
        let Ok(h) = d.memory().host_ptr(DevicePtr(kv.addr), kv.size) else { return false };
        // SAFETY: the SVM view of the live KV allocation; every serving thread has been joined.
        let view = unsafe { std::slice::from_raw_parts(h, kv.size as usize) };
        if view.iter().enumerate().any(|(i, &b)| b != kv_byte(d.ordinal(), i)) {
            return false;
        }
    }
    let (n, pg) = (cfg.ranges, cfg.page_bytes as usize);
    (0..cfg.threads).all(|t| {
        let (kv, kv_off, pool_off) = layout(s, cfg, t);
        let dev = kv.device.unwrap_or(0);
        (0..n).all(|i| {
            let k = (kv_off as usize) + i as usize * pg;
            let q = pool_off as usize + perm(i, n) as usize * pg;
            (0..pg).all(|j| pool[q + j] == kv_byte(dev, k + j))
        })
    })
}
