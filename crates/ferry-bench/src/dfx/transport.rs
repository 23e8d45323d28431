//! The `ferry bench dfx` measurements of the transport, shared with the criterion benches
//! (`cargo bench -p ferry-bench --bench dfx`).
//!
//! [`run`] measures, in one process and one run:
//!
//! * the writer's hot path (ns per record, buffer switches amortised);
//! * one buffer switch (ns, with one record per buffer and the host draining);
//! * drain throughput: bytes moved from a writer to a copying collector through a live host
//!   engine, as a ratio of a streaming `memcpy` of the same working set (the pool's bytes), on
//!   both arches (a5: one bulk mirror copy per buffer), with the host polling (the default) and
//!   with the optional doorbell hint — the median of interleaved rounds (memcpy, then each drain
//!   configuration, every round), since a shared 2-core machine swings single runs 2–3x;
//! * the stall time per lane with a shrunk pool (one buffer per lane) and a slow collector.
//!
//! # Examples
//! ```
//! use ferry_bench::dfx::transport::{run, TransportBenchConfig};
//! let report = run(&TransportBenchConfig::quick());
//! assert!(report.hot_path_ns_per_record > 0.0);
//! assert_eq!(report.drain.len(), 4); // two arches, polling and doorbell
//! assert!(report.to_json().starts_with('{'));
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_abi::arch::Arch;
use serde::Serialize;

use ferry_dfx::clock::SteadyClock;
use ferry_dfx::mem::{DeviceMemory, MirroredMemory, SvmMemory};
use ferry_dfx::{
    CollectSink, CollectedBuffer, DeviceWriter, DfxBuilder, DfxTransport, LaneStats, Policy,
};

/// The record the benches write: 32 bytes, the size of a ChipSwimlane AICPU task record.
pub type BenchRecord = [u64; 4];

/// What to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportBenchConfig {
    /// Arch of the hot-path, switch and stall measurements.
    pub arch: Arch,
    /// Records written for the hot-path measurement.
    pub hot_path_records: u64,
    /// Buffer switches measured.
    pub switches: u64,
    /// Bytes each drain configuration moves per round.
    pub drain_bytes: u64,
    /// Buffers of the drain measurement's lane (its pool).
    pub drain_buffers: u32,
    /// Records per buffer of the drain measurement (32 bytes each).
    pub drain_records_per_buffer: u32,
    /// Interleaved rounds of the drain measurement (the median is reported).
    pub drain_rounds: u32,
    /// Lanes of the shrunk-pool stall measurement (one buffer each).
    pub stall_lanes: u32,
    /// Buffers each stall lane fills.
    pub stall_buffers_per_lane: u32,
    /// Time the slow collector spends per buffer in the stall measurement.
    pub stall_collector_delay: Duration,
}

impl Default for TransportBenchConfig {
    /// The drain moves 256 MiB per configuration and round through 8 × 1 MiB buffers (the size
    /// class of the busiest default lanes), 5 rounds.
    fn default() -> Self {
        Self {
            arch: Arch::A2a3,
            hot_path_records: 20_000_000,
            switches: 200_000,
            drain_bytes: 256 << 20,
            drain_buffers: 8,
            drain_records_per_buffer: 32 * 1024,
            drain_rounds: 5,
            stall_lanes: 4,
            stall_buffers_per_lane: 200,
            stall_collector_delay: Duration::from_micros(50),
        }
    }
}

impl TransportBenchConfig {
    /// A configuration that runs in well under a second (tests, smoke runs).
    pub fn quick() -> Self {
        Self {
            hot_path_records: 200_000,
            switches: 2_000,
            drain_bytes: 16 << 20,
            drain_rounds: 1,
            stall_buffers_per_lane: 20,
            ..Self::default()
        }
    }
}

/// Stall of one lane in the shrunk-pool measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LaneStall {
    /// Lane id.
    pub lane: u32,
    /// Total time at gates, in ns of device clock.
    pub stall_ns: u64,
    /// Longest single wait, in ns.
    pub max_stall_ns: u64,
    /// Buffers published.
    pub switches: u32,
    /// Stall as a fraction of the lane's run time.
    pub stall_fraction: f64,
}

/// Drain throughput of one arch and wake-up mode, next to the memcpy of the same working set.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DrainFigures {
    /// Arch name.
    pub arch: String,
    /// Whether host and device share one view (a5 copies each buffer to a host mirror).
    pub svm: bool,
    /// Whether the optional doorbell hint was on (off: the host polls).
    pub doorbell: bool,
    /// Bytes of the lane's pool (the working set).
    pub working_set_bytes: u64,
    /// Median drain throughput, GB/s (10⁹ bytes).
    pub gb_per_s: f64,
    /// Median streaming memcpy of the same working set in the same rounds, GB/s.
    pub memcpy_gb_per_s: f64,
    /// `gb_per_s / memcpy_gb_per_s`.
    pub vs_memcpy: f64,
    /// Median [`cross_core_copy`] of the same bytes through the same pool in the same rounds,
    /// GB/s: what the machine moves between two threads with no transport at all. On the 2-core
    /// VMs it follows the VM's phases (vCPU placement) where a one-CPU memcpy does not.
    pub cross_core_gb_per_s: f64,
    /// `gb_per_s / cross_core_gb_per_s`.
    pub vs_cross_core: f64,
    /// Gate waits of the writer, summed over the rounds.
    pub writer_waits: u64,
    /// Records lost (0: Block policy).
    pub dropped: u64,
}

/// The numbers of one [`run`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BenchReport {
    /// Arch of the hot-path, switch and stall figures.
    pub arch: String,
    /// Bytes per record.
    pub record_bytes: u64,
    /// Writer hot path, ns per record.
    pub hot_path_ns_per_record: f64,
    /// One buffer switch (publish + claim, space available), ns.
    pub switch_ns: f64,
    /// One buffer's round trip through a live host (one record per buffer, 8 in flight), ns.
    pub switch_round_trip_ns: f64,
    /// Drain throughput per arch, polling and with the doorbell hint.
    pub drain: Vec<DrainFigures>,
    /// Interleaved rounds behind each drain median.
    pub drain_rounds: u32,
    /// Per-lane stall with a one-buffer pool and a slow collector.
    pub stall: Vec<LaneStall>,
    /// Collector delay per buffer in the stall measurement, ns.
    pub stall_collector_delay_ns: u64,
}

impl BenchReport {
    /// The report as one JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The drain figures of `arch` with or without the doorbell.
    pub fn drain_of(&self, arch: Arch, doorbell: bool) -> Option<&DrainFigures> {
        self.drain.iter().find(|d| d.arch == arch.name() && d.doorbell == doorbell)
    }
}

fn memory(arch: Arch, len: usize) -> Arc<dyn DeviceMemory> {
    if arch.profile().svm {
        Arc::new(SvmMemory::new(len, 0x10_0000_0000))
    } else {
        Arc::new(MirroredMemory::new(len, 0x10_0000_0000))
    }
}

/// A collector that copies every record out (what a subsystem's `on_buffer_collected` does).
#[derive(Debug, Default)]
pub struct CopySink {
    out: Vec<BenchRecord>,
    /// Records seen.
    pub records: u64,
    delay: Duration,
}

impl CollectSink<BenchRecord> for CopySink {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, BenchRecord>) {
        self.out.clear();
        self.out.extend_from_slice(b.records);
        black_box(&self.out);
        self.records += b.records.len() as u64;
        if !self.delay.is_zero() {
            let until = Instant::now() + self.delay;
            while Instant::now() < until {
                std::thread::yield_now();
            }
        }
    }
}

/// What one [`writer_run`] measured.
struct WriterRun {
    /// Time the writer spent writing.
    writing: Duration,
    /// Time until the host had collected every record (host stopped).
    end_to_end: Duration,
    dropped: u64,
    waits: u64,
}

/// Runs one writer (one lane) against a live host. `rpb` = records per buffer, `pool` =
/// buffers, `doorbell`: the optional wake-up hint.
fn writer_run(
    arch: Arch,
    records: u64,
    rpb: u32,
    pool: u32,
    slots: u32,
    doorbell: bool,
) -> WriterRun {
    let p = arch.profile();
    let cfg = DfxBuilder::new(p)
        .ready_queues(1)
        .ready_depth(64)
        .free_slots(slots)
        .lane(0, 0, pool)
        .records_per_buffer(rpb)
        .policy(Policy::Block)
        .doorbell_hint(doorbell)
        .build::<BenchRecord>()
        .expect("bench config");
    let mem = memory(arch, cfg.region_size());
    mem.device_view().prefault();
    mem.host_view().prefault();
    let t = DfxTransport::<BenchRecord>::new(cfg, mem, Arc::new(SteadyClock::new(p.clock_hz)))
        .expect("bench transport");
    let device = t.device_region();
    let host = t.start(|_| CopySink::default());
    let mut w = device.writer::<BenchRecord>(0, &[0]).expect("writer");
    let start = Instant::now();
    for i in 0..records {
        w.record(0, [i, i, i, i]);
    }
    let writing = start.elapsed();
    let st = w.finish();
    let report = host.stop();
    let end_to_end = start.elapsed();
    debug_assert_eq!(report.lanes[0].collected + st[0].dropped, records);
    WriterRun { writing, end_to_end, dropped: st[0].dropped, waits: st[0].stall_waits }
}

/// Times `n` calls of `step` in chunks of `chunk` and returns the best chunk's rate scaled to
/// `n`: on a busy machine a chunk that was descheduled is slower, never faster, so the fastest
/// chunk is the undisturbed cost.
fn best_rate(n: u64, chunk: u64, mut step: impl FnMut(u64)) -> Duration {
    let mut best = f64::INFINITY;
    let mut i = 0;
    while i < n {
        let k = chunk.min(n - i);
        let t0 = Instant::now();
        for j in i..i + k {
            step(j);
        }
        let per = t0.elapsed().as_nanos() as f64 / k as f64;
        best = best.min(per);
        i += k;
    }
    Duration::from_nanos((best * n as f64) as u64)
}

/// A transport with no host threads: `pool` buffers of `rpb` records pre-filled in the free
/// queue, Drop policy with a zero bound so nothing ever waits. Returns a writer on it.
fn hostless_writer(arch: Arch, rpb: u32, pool: u32) -> DeviceWriter<BenchRecord> {
    let p = arch.profile();
    let cfg = DfxBuilder::new(p)
        .ready_queues(1)
        .ready_depth(pool + 2)
        .free_slots(pool)
        .lane(0, 0, pool)
        .records_per_buffer(rpb)
        .policy(Policy::Drop)
        .drop_wait_cycles(0)
        .build::<BenchRecord>()
        .expect("bench config");
    let mem = memory(arch, cfg.region_size());
    mem.device_view().prefault();
    let t = DfxTransport::<BenchRecord>::new(cfg, mem, Arc::new(SteadyClock::new(p.clock_hz)))
        .expect("bench transport");
    let device = t.device_region();
    // The region stays alive through the writer's view; the host side is not needed.
    device.writer::<BenchRecord>(0, &[0]).expect("writer")
}

/// Writer hot path: ns per record in 1000-record (32 KB, the original AicpuTask size) buffers
/// that a live host keeps recycling, so they stay cache-warm. Reported as the fastest
/// 4096-record chunk's rate scaled to `records` (switches included, amortised; chunks that had
/// to wait at a gate or were descheduled are slower and do not count).
pub fn hot_path(arch: Arch, records: u64) -> Duration {
    let p = arch.profile();
    let cfg = DfxBuilder::new(p)
        .ready_queues(1)
        .ready_depth(64)
        .free_slots(8)
        .lane(0, 0, 16)
        .records_per_buffer(1000)
        .policy(Policy::Block)
        .build::<BenchRecord>()
        .expect("bench config");
    let mem = memory(arch, cfg.region_size());
    mem.device_view().prefault();
    mem.host_view().prefault();
    let t = DfxTransport::<BenchRecord>::new(cfg, mem, Arc::new(SteadyClock::new(p.clock_hz)))
        .expect("bench transport");
    let device = t.device_region();
    let host = t.start(|_| {
        |b: &CollectedBuffer<'_, BenchRecord>| {
            black_box(b.records.len());
        }
    });
    let mut w = device.writer::<BenchRecord>(0, &[0]).expect("writer");
    let d = best_rate(records, 4096, |i| w.record(0, [i, i, i, i]));
    w.finish();
    host.stop();
    d
}

/// `n` buffer switches (publish + claim, one record per buffer) with space in both queues: the
/// cost of the switch itself, with no waiting. The median batch's rate, scaled to `n`.
pub fn switches(arch: Arch, n: u64) -> Duration {
    const POOL: u64 = 8;
    // The last buffer's switch finds no replacement; time only the POOL - 1 full switches.
    let per_writer = POOL - 1;
    let mut left = n;
    let mut batches = Vec::new();
    while left > 0 {
        let k = left.min(per_writer);
        let mut w = hostless_writer(arch, 1, POOL as u32);
        let t0 = Instant::now();
        for i in 0..k {
            w.record(0, [i, 0, 0, 0]);
        }
        batches.push(t0.elapsed().as_nanos() as f64 / k as f64);
        black_box(&w);
        left -= k;
    }
    // The median batch: robust to batches that were descheduled on a busy machine.
    batches.sort_by(f64::total_cmp);
    let median = batches.get(batches.len() / 2).copied().unwrap_or(0.0);
    Duration::from_nanos((median * n as f64) as u64)
}

/// Round trip of one buffer through a live host (one record per buffer, eight buffers in
/// flight): how fast a writer can switch when the host must return every buffer.
pub fn switch_round_trip(arch: Arch, n: u64) -> Duration {
    writer_run(arch, n, 1, 8, 8, false).writing
}

/// Drain throughput: time to move `bytes` from a writer through a live host engine to a
/// copying collector (`pool` buffers of `rpb` records), and the writer's drops and gate waits.
pub fn drain(arch: Arch, bytes: u64, pool: u32, rpb: u32, doorbell: bool) -> (Duration, u64, u64) {
    let records = bytes / size_of::<BenchRecord>() as u64;
    let r = writer_run(arch, records, rpb, pool, pool.min(8).next_power_of_two().min(8), doorbell);
    (r.end_to_end, r.dropped, r.waits)
}

/// A streaming memcpy of `bytes` over a working set of `working_set` bytes (source and
/// destination each that large, copied in `chunk`-byte pieces, cycling), for comparison with
/// [`drain`]: the time of the whole copy.
pub fn memcpy(bytes: u64, working_set: usize, chunk: usize) -> Duration {
    let chunk = chunk.clamp(64, working_set.max(64));
    let n_chunks = (working_set / chunk).max(1);
    let src = vec![1u8; n_chunks * chunk];
    let mut dst = vec![0u8; n_chunks * chunk];
    dst.copy_from_slice(&src); // fault the pages in before timing
    let n = (bytes as usize).div_ceil(chunk);
    let t0 = Instant::now();
    for i in 0..n {
        let off = (i % n_chunks) * chunk;
        dst[off..off + chunk].copy_from_slice(&src[off..off + chunk]);
        black_box(&mut dst);
    }
    let d = t0.elapsed();
    Duration::from_nanos((d.as_nanos() as f64 * bytes as f64 / (n * chunk) as f64) as u64)
}

/// The bare hand-off the drain does, without a transport: one thread writes `bytes` as 32-byte
/// records into `buffers` buffers of `buffer_bytes` in turn, another copies each buffer out (as
/// the drain's copying collector does) and hands it back, both polling (a failed poll yields).
/// Where [`memcpy`] is one CPU's streaming copy, this is what the machine moves from one thread
/// to another: every line crosses between two CPUs' caches twice per lap. The time of the
/// whole transfer.
pub fn cross_core_copy(bytes: u64, buffers: usize, buffer_bytes: usize) -> Duration {
    use std::sync::mpsc::{sync_channel, TryRecvError};
    let words = (buffer_bytes / 8).max(4) & !3;
    let laps = (bytes as usize).div_ceil(words * 8);
    let (to_copy, full) = sync_channel::<Box<[u64]>>(buffers);
    let (to_fill, empty) = sync_channel::<Box<[u64]>>(buffers);
    for _ in 0..buffers.max(1) {
        let _ = to_fill.send(vec![0u64; words].into_boxed_slice());
    }
    let poll = |rx: &std::sync::mpsc::Receiver<Box<[u64]>>| loop {
        match rx.try_recv() {
            Ok(b) => return Some(b),
            Err(TryRecvError::Empty) => std::thread::yield_now(),
            Err(TryRecvError::Disconnected) => return None,
        }
    };
    std::thread::scope(|sc| {
        let copier = sc.spawn(move || {
            let mut out: Vec<u64> = Vec::with_capacity(words);
            while let Some(b) = poll(&full) {
                out.clear();
                out.extend_from_slice(&b);
                black_box(&out);
                if to_fill.send(b).is_err() {
                    break;
                }
            }
        });
        let t0 = Instant::now();
        let mut i = 0u64;
        for _ in 0..laps {
            let Some(mut b) = poll(&empty) else { break };
            for r in b.chunks_exact_mut(4) {
                r.copy_from_slice(&[i, i, i, i]);
                i += 1;
            }
            if to_copy.send(b).is_err() {
                break;
            }
        }
        drop(to_copy);
        let _ = copier.join();
        let d = t0.elapsed();
        Duration::from_nanos(
            (d.as_nanos() as f64 * bytes as f64 / (laps * words * 8) as f64) as u64,
        )
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The drain figures: every round runs the memcpy, then each (arch, doorbell) drain, so each
/// median sees the same machine conditions.
fn drain_figures(cfg: &TransportBenchConfig) -> Vec<DrainFigures> {
    let rec = size_of::<BenchRecord>() as u64;
    let bytes = (cfg.drain_bytes / rec).max(1) * rec;
    let buf = cfg.drain_records_per_buffer as usize * rec as usize;
    let ws = buf * cfg.drain_buffers as usize;
    let configs: Vec<(Arch, bool)> =
        Arch::ALL.into_iter().flat_map(|a| [(a, false), (a, true)]).collect();
    let gbs = |d: Duration| bytes as f64 / d.as_secs_f64().max(1e-9) / 1e9;
    let (mut mc, mut xc) = (Vec::new(), Vec::new());
    let mut runs: Vec<(Vec<f64>, u64, u64)> = configs.iter().map(|_| (Vec::new(), 0, 0)).collect();
    for _ in 0..cfg.drain_rounds.max(1) {
        mc.push(gbs(memcpy(bytes, ws, buf)));
        xc.push(gbs(cross_core_copy(bytes, cfg.drain_buffers as usize, buf)));
        for (k, &(arch, bell)) in configs.iter().enumerate() {
            let (d, dropped, waits) =
                drain(arch, bytes, cfg.drain_buffers, cfg.drain_records_per_buffer, bell);
            runs[k].0.push(gbs(d));
            runs[k].1 += dropped;
            runs[k].2 += waits;
        }
    }
    let (memcpy_gb, cross_gb) = (median(mc), median(xc));
    configs
        .into_iter()
        .zip(runs)
        .map(|((arch, doorbell), (g, dropped, waits))| {
            let gb = median(g);
            DrainFigures {
                arch: arch.name().to_owned(),
                svm: arch.profile().svm,
                doorbell,
                working_set_bytes: ws as u64,
                gb_per_s: gb,
                memcpy_gb_per_s: memcpy_gb,
                vs_memcpy: gb / memcpy_gb.max(1e-12),
                cross_core_gb_per_s: cross_gb,
                vs_cross_core: gb / cross_gb.max(1e-12),
                writer_waits: waits,
                dropped,
            }
        })
        .collect()
}

/// Shrunk pool: `lanes` lanes with one buffer each, a collector that spends `delay` per buffer;
/// returns each lane's stall.
pub fn stall(arch: Arch, lanes: u32, buffers_per_lane: u32, delay: Duration) -> Vec<LaneStall> {
    let p = arch.profile();
    let mut b = DfxBuilder::new(p);
    b.ready_queues(lanes.min(p.max_aicpu_threads)).records_per_buffer(256);
    let queues = lanes.min(p.max_aicpu_threads);
    for l in 0..lanes {
        b.lane(l % queues, 0, 1);
    }
    let cfg = b.build::<BenchRecord>().expect("stall config");
    let mem = memory(arch, cfg.region_size());
    let t = DfxTransport::<BenchRecord>::new(cfg, mem, Arc::new(SteadyClock::new(p.clock_hz)))
        .expect("stall transport");
    let device = t.device_region();
    let host = t.start(move |_| CopySink { delay, ..CopySink::default() });
    let n = buffers_per_lane as u64 * 256;
    let runs: Vec<(Vec<LaneStats>, Duration)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..queues)
            .map(|q| {
                let device = device.clone();
                s.spawn(move || {
                    let lanes = device.lanes_of_queue(q);
                    let mut w = device.writer::<BenchRecord>(q, &lanes).expect("writer");
                    let start = Instant::now();
                    for i in 0..n {
                        for l in 0..lanes.len() {
                            w.record(l, [i, 0, 0, 0]);
                        }
                    }
                    let d = start.elapsed();
                    (w.finish(), d)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("stall writer")).collect()
    });
    host.stop();
    let mut out = Vec::new();
    for (stats, d) in runs {
        for st in stats {
            let stall_ns = p.cycles_to_ns(st.stall_cycles);
            out.push(LaneStall {
                lane: st.lane,
                stall_ns,
                max_stall_ns: p.cycles_to_ns(st.max_stall_cycles),
                switches: st.switches,
                stall_fraction: stall_ns as f64 / d.as_nanos().max(1) as f64,
            });
        }
    }
    out.sort_by_key(|l| l.lane);
    out
}

/// Runs every measurement once (the drain in interleaved rounds) and reports them together.
pub fn run(cfg: &TransportBenchConfig) -> BenchReport {
    let rec = size_of::<BenchRecord>() as u64;
    let hot = hot_path(cfg.arch, cfg.hot_path_records);
    let sw = switches(cfg.arch, cfg.switches);
    let rt = switch_round_trip(cfg.arch, cfg.switches / 10 + 1);
    BenchReport {
        arch: cfg.arch.name().to_owned(),
        record_bytes: rec,
        hot_path_ns_per_record: hot.as_nanos() as f64 / cfg.hot_path_records.max(1) as f64,
        switch_ns: sw.as_nanos() as f64 / cfg.switches.max(1) as f64,
        switch_round_trip_ns: rt.as_nanos() as f64 / (cfg.switches / 10 + 1) as f64,
        drain: drain_figures(cfg),
        drain_rounds: cfg.drain_rounds.max(1),
        stall: stall(
            cfg.arch,
            cfg.stall_lanes,
            cfg.stall_buffers_per_lane,
            cfg.stall_collector_delay,
        ),
        stall_collector_delay_ns: cfg.stall_collector_delay.as_nanos() as u64,
    }
}

const _: () = assert!(size_of::<BenchRecord>() == 32);
