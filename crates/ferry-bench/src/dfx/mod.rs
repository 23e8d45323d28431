//! `ferry bench dfx`: what DFX costs, as a user meets it ([`measure`]).
//!
//! Every figure comes from medians of interleaved rounds in this one run (the 2-core machines
//! these run on swing 2–3x between single runs):
//!
//! * the transport ([`transport`]): writer hot path, buffer switch, and the drain as a ratio
//!   of a streaming memcpy of the same working set, on both arches, polling and with the doorbell
//!   hint;
//! * the all-five storm: (a) in-run throughput as a ratio of DFX off (and each subsystem's, from
//!   [`costs`]), on the full path; (b) the whole `ferry run --example storm` command, spawned as
//!   a user runs it with the default output (the native profile alone), as a ratio of the same
//!   command with DFX off (and the same with `--original-formats`, which also writes the
//!   original runtime's files and the Perfetto trace at once); (c) bytes per record of the
//!   native profile and of the original formats and (d) the write phase in records/s; and the
//!   trace phase at 5,000 and 50,000 tasks.
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ferry_profile::{self as output, OutputError, RunModel, WriteOptions};
use ferry_runtime::examples::Size;
use ferry_sim::Arch;

pub mod costs;
mod report;
pub mod thread_cpu;
pub mod transport;

use costs::CostRow;
use thread_cpu::RoleCpu;

/// The targets, printed next to the figures.
const TARGET_IN_RUN: f64 = 0.9;
const TARGET_COMMAND: f64 = 1.3;
const TARGET_WRITE_RECORDS_PER_S: f64 = 1e6;
const TARGET_TRACE_RATIO: f64 = 12.0;
const TARGET_NATIVE_BYTES_PER_RECORD: f64 = 48.0;

/// Interleaved rounds of the in-run measurement (every configuration once per round).
const IN_RUN_ROUNDS: u32 = 11;

/// Further rounds of DFX off and all five alone, one run right after the other: the headline
/// ratio (a) is the noisiest figure (its rounds' own ratios spread by ±0.05 on the 2-core VMs,
/// where a single storm run swings 72-140 ms), so it gets 31 samples a side rather than 11, each
/// pair ~0.3 s apart rather than a round's ~3 s.
const IN_RUN_PAIRS: u32 = 20;

/// The DFX flags of the all-five command.
const ALL_FIVE: [&str; 7] = ["--swimlane", "4", "--pmu", "2", "--dep-gen", "--dump-args", "3"];

/// Why `ferry bench dfx` failed.
#[derive(Debug, thiserror::Error)]
pub enum DfxAreaError {
    /// A storm run, its DFX session or its collection failed (said in that error's words).
    #[error("{0}")]
    Run(Box<dyn std::error::Error + Send + Sync>),
    /// The `ferry run` command could not be started.
    #[error("running ferry run")]
    Spawn(#[source] std::io::Error),
    /// The `ferry run` command failed (its standard error).
    #[error("ferry run failed: {0}")]
    Command(String),
    /// Writing the storm's profile failed.
    #[error(transparent)]
    Output(#[from] OutputError),
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The command with DFX off, all five, all five with `--original-formats` (median seconds), and
/// the median of the rounds' own all-five / off ratios.
type CommandTimes = (f64, f64, f64, f64);

/// (b): the storm command with DFX off, with all five on (`--out` a scratch directory, the
/// default output), and with all five and `--original-formats`, interleaved (in an order
/// rotated each round), `rounds` times;
/// returns the three medians in seconds and the median of the rounds' own all-five / off ratios,
/// and what the last all-five run's native profile holds.
fn command(
    exe: &Path,
    small: bool,
    rounds: u32,
    scratch: &Path,
) -> Result<(CommandTimes, NativeProfile), DfxAreaError> {
    let mut native = NativeProfile::default();
    let mut run = |dfx: bool, original: bool| -> Result<f64, DfxAreaError> {
        let mut c = Command::new(exe);
        c.args(["run", "--example", "storm"]);
        if small {
            c.arg("--small");
        }
        if dfx {
            let _ = std::fs::remove_dir_all(scratch);
            c.args(ALL_FIVE).arg("--scope-stats").arg("--out").arg(scratch);
        }
        if original {
            c.arg("--original-formats");
        }
        let t0 = Instant::now();
        let out = c.output().map_err(DfxAreaError::Spawn)?;
        let s = t0.elapsed().as_secs_f64();
        if !out.status.success() {
            return Err(DfxAreaError::Command(String::from_utf8_lossy(&out.stderr).into_owned()));
        }
        if dfx {
            native = NativeProfile::of(scratch)?;
        }
        Ok(s)
    };
    let (mut off, mut all, mut original) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds.max(1) {
        // The order rotates each round: a command started right after another one's exit
        // (~150 MB unmapped, its model freed in the background) runs measurably slower, so no
        // command may always follow the same one.
        for k in 0..3 {
            match (r + k) % 3 {
                0 => off.push(run(false, false)?),
                1 => all.push(run(true, false)?),
                _ => original.push(run(true, true)?),
            }
        }
    }
    let _ = std::fs::remove_dir_all(scratch);
    let paired = median(all.iter().zip(&off).map(|(a, o)| a / o.max(1e-9)).collect());
    Ok(((median(off), median(all), median(original), paired), native))
}

/// What an all-five storm command's native profile (`profile.ferry`, written while it ran)
/// holds.
#[derive(Clone, Copy, Debug, Default)]
pub struct NativeProfile {
    /// Bytes of the file.
    pub bytes: u64,
    /// Sealed chunks.
    pub chunks: u64,
    /// Transport records in them (DepGen and ArgsDump: 8-byte words).
    pub transport_records: u64,
}

impl NativeProfile {
    fn of(dir: &Path) -> Result<NativeProfile, DfxAreaError> {
        use ferry_profile::recorder::{read_recording, RECORD_FILE};
        let handle = ferry_fs::Dir::open(dir)
            .map_err(|e| DfxAreaError::Command(format!("{}: {e}", dir.display())))?;
        let r = read_recording(&handle, RECORD_FILE, output::MAX_RECORDS_FILE_BYTES)
            .map_err(|e| DfxAreaError::Command(format!("{}: {e}", dir.display())))?;
        Ok(NativeProfile {
            bytes: r.bytes,
            chunks: r.chunks.len() as u64,
            transport_records: r.total(),
        })
    }
}

/// The medians of `rounds` writes of `model` into `dir` with `opts`: (files phase, traces phase,
/// the last report).
fn write_rounds(
    model: &RunModel,
    dir: &Path,
    opts: &WriteOptions<'_>,
    rounds: u32,
) -> Result<(Duration, Duration, output::WriteReport), DfxAreaError> {
    let (mut files, mut traces, mut last) = (Vec::new(), Vec::new(), None);
    for _ in 0..rounds.max(1) {
        let r = output::write_all(dir, model, opts)?;
        files.push(r.files_elapsed.as_secs_f64());
        traces.push(r.traces_elapsed.as_secs_f64());
        last = Some(r);
    }
    // `rounds.max(1)` rounds ran: there is a last one.
    let last = last.unwrap_or_default();
    Ok((Duration::from_secs_f64(median(files)), Duration::from_secs_f64(median(traces)), last))
}

/// What the all-five run's DFX costs in CPU time, against the DFX-off run.
#[derive(Clone, Copy, Debug)]
struct DfxCpu {
    records: u64,
    /// Added AICPU-thread CPU per record (the device side: records, chains, payload copies).
    aicpu_ns_per_record: f64,
    /// Host engine CPU per record (drain, collect, replenish).
    host_ns_per_record: f64,
    /// Added AICore-thread CPU (their waits last as long as the run).
    aicore_ms_added: f64,
    /// The off run's CPU over the all-five run's (all roles): the in-run ratio where a run is
    /// CPU-bound.
    cpu_ratio: f64,
}

fn dfx_cpu_split(rows: &[CostRow]) -> Option<DfxCpu> {
    let of = |name: &str| rows.iter().find(|r| r.config == name);
    let (off, all) = (of("off")?, of("all")?);
    let (o, a) = (off.cpu?, all.cpu?);
    let n = all.records.max(1) as f64;
    let total = |c: &RoleCpu| c.aicpu_ns + c.aicore_ns + c.dfx_host_ns;
    Some(DfxCpu {
        records: all.records,
        aicpu_ns_per_record: (a.aicpu_ns - o.aicpu_ns) / n,
        host_ns_per_record: a.dfx_host_ns / n,
        aicore_ms_added: (a.aicore_ns - o.aicore_ns) / 1e6,
        cpu_ratio: total(&o) / total(&a).max(1.0),
    })
}

/// Everything `ferry bench dfx` measured ([`measure`]).
#[derive(Clone, Debug)]
pub struct DfxArea {
    /// The transport's own figures.
    pub transport: transport::BenchReport,
    /// The storm's arch.
    pub arch: Arch,
    /// The storm's tasks (5,000 with `quick`, else 50,000).
    pub tasks: u64,
    /// Rounds of the command, write-phase and trace-phase measurements.
    pub rounds: u32,
    /// Interleaved rounds of the in-run measurement.
    pub in_run_rounds: u32,
    /// Further adjacent rounds of DFX off and all five alone.
    pub in_run_pairs: u32,
    /// What the chip's clock reads (`tsc` or `monotonic`).
    pub device_clock: &'static str,
    /// Each DFX configuration's in-run figures ([`costs::subsystem_costs`]).
    pub rows: Vec<CostRow>,
    /// The command with DFX off, all five, all five with `--original-formats` (median seconds),
    /// and the median of the rounds' own all-five / off ratios.
    pub command: (f64, f64, f64, f64),
    /// The last all-five command's native profile.
    pub native: NativeProfile,
    /// The last write of the all-five storm's files.
    pub wrote: output::WriteReport,
    /// Median seconds of the files phase.
    pub files_s: f64,
    /// Median seconds of the files and the Perfetto trace together.
    pub whole_s: f64,
    /// Tasks of the small and the big storm model.
    pub trace_tasks: [usize; 2],
    /// Median seconds of the trace phase of the small and the big storm model.
    pub trace_s: [f64; 2],
}

/// `ferry bench dfx`: the transport's figures, then the storm's, the command's figures through
/// `exe` (the `ferry` binary: `exe run --example storm …`), and the write and trace phases.
/// `quick`: one round of each, the 5,000-task storm.
///
/// # Errors
/// [`DfxAreaError`] when a run, a command or a write fails.
pub fn measure(exe: &Path, quick: bool) -> Result<DfxArea, DfxAreaError> {
    let cfg = if quick {
        transport::TransportBenchConfig::quick()
    } else {
        transport::TransportBenchConfig::default()
    };
    let transport = transport::run(&cfg);
    let arch = Arch::A2a3;
    let (size, rounds, tasks) =
        if quick { (Size::Small, 1, 5_000) } else { (Size::Full, 7, 50_000) };
    // The in-run rounds are cheap (~0.1 s per run) and their ratio is the noisiest figure (a
    // single storm run swings 72-140 ms here), so they get more rounds than the write phases.
    let (in_run_rounds, in_run_pairs) = if quick { (1, 0) } else { (IN_RUN_ROUNDS, IN_RUN_PAIRS) };
    let rows = costs::subsystem_costs(arch, size, in_run_rounds, in_run_pairs)
        .map_err(DfxAreaError::Run)?;

    let scratch = std::env::temp_dir().join(format!("ferry-bench-dfx-{}", std::process::id()));
    let (command, native) = command(exe, quick, if quick { 1 } else { 6 }, &scratch.join("run"))?;

    // The write phase and the trace phase, from models of the all-five storm at both sizes.
    let big = costs::storm_model(arch, size).map_err(DfxAreaError::Run)?;
    let small = costs::storm_model(arch, Size::Small).map_err(DfxAreaError::Run)?;
    let files_only = WriteOptions { files: true, traces: false, chrome: false, progress: None };
    // The trace phase with both encoders, the Chrome JSON's too.
    let traces_only = WriteOptions { files: false, traces: true, chrome: true, progress: None };
    let (files_s, _, wrote) = write_rounds(&big, &scratch.join("files"), &files_only, rounds)?;
    // The whole phase as `ferry run` has it: the files and the Perfetto trace, on the same two
    // threads.
    let whole = WriteOptions { files: true, traces: true, chrome: false, progress: None };
    let mut whole_s = Vec::new();
    for _ in 0..rounds.max(1) {
        let t0 = Instant::now();
        output::write_all(&scratch.join("whole"), &big, &whole)?;
        whole_s.push(t0.elapsed().as_secs_f64());
    }
    let (mut t_small, mut t_big) = (Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        t_small.push(write_rounds(&small, &scratch.join("t5k"), &traces_only, 1)?.1.as_secs_f64());
        t_big.push(write_rounds(&big, &scratch.join("t50k"), &traces_only, 1)?.1.as_secs_f64());
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(DfxArea {
        transport,
        arch,
        tasks,
        rounds,
        in_run_rounds,
        in_run_pairs,
        // What the chip's clock reads (tsc or monotonic, `FERRY_DEVICE_CLOCK`): with DFX on it
        // is read ~8 times per task, so the in-run figures depend on it.
        device_clock: ferry_sim::clock::DeviceClock::real(arch.profile()).source_name(),
        rows,
        command,
        native,
        wrote,
        files_s: files_s.as_secs_f64(),
        whole_s: median(whole_s),
        trace_tasks: [small.tasks().len(), big.tasks().len()],
        trace_s: [median(t_small), median(t_big)],
    })
}
