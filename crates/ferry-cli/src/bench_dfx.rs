//! `ferry bench dfx`: what DFX costs, as a user meets it.
//!
//! Every figure comes from medians of interleaved rounds in this one run (the 2-core machines
//! these run on swing 2–3x between single runs):
//!
//! * the transport (`ferry_bench::dfx::transport`): writer hot path, buffer switch, and the drain as a ratio
//!   of a streaming memcpy of the same working set, on both arches, polling and with the doorbell
//!   hint;
//! * the all-five storm: (a) in-run throughput as a ratio of DFX off (and each subsystem's), on
//!   the full path; (b) the whole `ferry run --example storm` command, spawned as a user runs it,
//!   as a ratio of the same command with DFX off (and the same with `--chrome-json`); (c) bytes written per record and (d) the write
//!   phase in records/s; and the trace phase at 5,000 and 50,000 tasks.
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use ferry_profile::{self as output, RunModel, WriteOptions};
use ferry_runtime::examples::Size;
use ferry_sim::Arch;
use serde_json::json;

/// The targets, printed next to the figures.
const TARGET_IN_RUN: f64 = 0.85;
const TARGET_COMMAND: f64 = 3.0;
const TARGET_WRITE_RECORDS_PER_S: f64 = 1e6;
const TARGET_TRACE_RATIO: f64 = 12.0;

/// Interleaved rounds of the in-run measurement (every configuration once per round).
const IN_RUN_ROUNDS: u32 = 11;

/// Further rounds of DFX off and all five alone, one run right after the other: the headline
/// ratio (a) is the noisiest figure (its rounds' own ratios spread by ±0.05 on the 2-core VMs,
/// where a single storm run swings 72-140 ms), so it gets 31 samples a side rather than 11, each
/// pair ~0.3 s apart rather than a round's ~3 s.
const IN_RUN_PAIRS: u32 = 20;

/// The DFX flags of the all-five command.
const ALL_FIVE: [&str; 7] = ["--swimlane", "4", "--pmu", "2", "--dep-gen", "--dump-args", "3"];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// (b): the storm command with DFX off, with all five on (`--out` a scratch directory), and with
/// all five and `--chrome-json`, interleaved (in an order rotated each round), `rounds` times;
/// returns the three medians in seconds and the median of the rounds' own all-five / off ratios.
fn command(small: bool, rounds: u32, scratch: &Path) -> anyhow::Result<(f64, f64, f64, f64)> {
    let exe = std::env::current_exe().context("locating the ferry binary")?;
    let run = |dfx: bool, chrome: bool| -> anyhow::Result<f64> {
        let mut c = Command::new(&exe);
        c.args(["run", "--example", "storm"]);
        if small {
            c.arg("--small");
        }
        if dfx {
            let _ = std::fs::remove_dir_all(scratch);
            c.args(ALL_FIVE).arg("--scope-stats").arg("--out").arg(scratch);
        }
        if chrome {
            c.arg("--chrome-json");
        }
        let t0 = Instant::now();
        let out = c.output().context("running ferry run")?;
        let s = t0.elapsed().as_secs_f64();
        anyhow::ensure!(
            out.status.success(),
            "ferry run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(s)
    };
    let (mut off, mut all, mut chrome) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds.max(1) {
        // The order rotates each round: a command started right after another one's exit
        // (~150 MB unmapped, its model freed in the background) runs measurably slower, so no
        // command may always follow the same one.
        for k in 0..3 {
            match (r + k) % 3 {
                0 => off.push(run(false, false)?),
                1 => all.push(run(true, false)?),
                _ => chrome.push(run(true, true)?),
            }
        }
    }
    let _ = std::fs::remove_dir_all(scratch);
    let paired = median(all.iter().zip(&off).map(|(a, o)| a / o.max(1e-9)).collect());
    Ok((median(off), median(all), median(chrome), paired))
}

/// The medians of `rounds` writes of `model` into `dir` with `opts`: (files phase, traces phase,
/// the last report).
fn write_rounds(
    model: &RunModel,
    dir: &Path,
    opts: &WriteOptions<'_>,
    rounds: u32,
) -> anyhow::Result<(Duration, Duration, output::WriteReport)> {
    let (mut files, mut traces, mut last) = (Vec::new(), Vec::new(), None);
    for _ in 0..rounds.max(1) {
        let r = output::write_all(dir, model, opts)?;
        files.push(r.files_elapsed.as_secs_f64());
        traces.push(r.traces_elapsed.as_secs_f64());
        last = Some(r);
    }
    let last = last.context("no write round")?;
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

fn dfx_cpu_split(rows: &[ferry_bench::dfx::costs::CostRow]) -> Option<DfxCpu> {
    let of = |name: &str| rows.iter().find(|r| r.config == name);
    let (off, all) = (of("off")?, of("all")?);
    let (o, a) = (off.cpu?, all.cpu?);
    let n = all.records.max(1) as f64;
    let total =
        |c: &ferry_bench::dfx::thread_cpu::RoleCpu| c.aicpu_ns + c.aicore_ns + c.dfx_host_ns;
    Some(DfxCpu {
        records: all.records,
        aicpu_ns_per_record: (a.aicpu_ns - o.aicpu_ns) / n,
        host_ns_per_record: a.dfx_host_ns / n,
        aicore_ms_added: (a.aicore_ns - o.aicore_ns) / 1e6,
        cpu_ratio: total(&o) / total(&a).max(1.0),
    })
}

pub(crate) fn run(quick: bool, as_json: bool) -> anyhow::Result<()> {
    let cfg = if quick {
        ferry_bench::dfx::transport::BenchConfig::quick()
    } else {
        ferry_bench::dfx::transport::BenchConfig::default()
    };
    let transport = ferry_bench::dfx::transport::run(&cfg);
    let arch = Arch::A2a3;
    let (size, rounds, tasks) =
        if quick { (Size::Small, 1, 5_000) } else { (Size::Full, 7, 50_000) };
    // The in-run rounds are cheap (~0.1 s per run) and their ratio is the noisiest figure (a
    // single storm run swings 72-140 ms here), so they get more rounds than the write phases.
    let (in_run_rounds, in_run_pairs) = if quick { (1, 0) } else { (IN_RUN_ROUNDS, IN_RUN_PAIRS) };
    let anyhow_err = |e: Box<dyn std::error::Error + Send + Sync>| anyhow::anyhow!("{e}");
    let rows = ferry_bench::dfx::costs::subsystem_costs(arch, size, in_run_rounds, in_run_pairs)
        .map_err(anyhow_err)?;
    let ratio_of = |name: &str| rows.iter().find(|r| r.config == name).map_or(0.0, |r| r.ratio);
    let tps_of = |name: &str| rows.iter().find(|r| r.config == name).map_or(0.0, |r| r.tasks_per_s);
    let paired_of =
        |name: &str| rows.iter().find(|r| r.config == name).map_or(0.0, |r| r.ratio_paired);

    let scratch = std::env::temp_dir().join(format!("ferry-bench-dfx-{}", std::process::id()));
    let (cmd_off, cmd_all, cmd_chrome, cmd_paired) =
        command(quick, if quick { 1 } else { 6 }, &scratch.join("run"))?;

    // The write phase and the trace phase, from models of the all-five storm at both sizes.
    let big = ferry_bench::dfx::costs::storm_model(arch, size).map_err(anyhow_err)?;
    let small = ferry_bench::dfx::costs::storm_model(arch, Size::Small).map_err(anyhow_err)?;
    let files_only = WriteOptions { files: true, traces: false, chrome: false, progress: None };
    // The trace phase with both encoders, the Chrome JSON's too.
    let traces_only = WriteOptions { files: false, traces: true, chrome: true, progress: None };
    let (files_s, _, wrote) = write_rounds(&big, &scratch.join("files"), &files_only, rounds)?;
    // The whole phase as `ferry run` has it: the files and the Perfetto trace, on the same two
    // threads.
    let whole = WriteOptions { files: true, traces: true, chrome: false, progress: None };
    let mut whole_s = Vec::new();
    for _ in 0..rounds.max(1) {
        let t0 = std::time::Instant::now();
        output::write_all(&scratch.join("whole"), &big, &whole)?;
        whole_s.push(t0.elapsed().as_secs_f64());
    }
    let whole_s = median(whole_s);
    let (mut t_small, mut t_big) = (Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        t_small.push(write_rounds(&small, &scratch.join("t5k"), &traces_only, 1)?.1.as_secs_f64());
        t_big.push(write_rounds(&big, &scratch.join("t50k"), &traces_only, 1)?.1.as_secs_f64());
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let (t_small, t_big) = (median(t_small), median(t_big));
    let records_per_s = wrote.records as f64 / files_s.as_secs_f64().max(1e-9);
    let drains: Vec<serde_json::Value> = transport
        .drain
        .iter()
        .map(|d| {
            let target = if d.svm { 0.5 } else { 0.3 };
            json!({
                "arch": d.arch, "doorbell": d.doorbell, "gb_per_s": d.gb_per_s,
                "memcpy_gb_per_s": d.memcpy_gb_per_s, "vs_memcpy": d.vs_memcpy,
                "target_vs_memcpy": target, "writer_waits": d.writer_waits,
                // The same bytes handed from one thread to another with no transport (what
                // this machine moves between two CPUs now; it follows the VM's phases).
                "cross_core_gb_per_s": d.cross_core_gb_per_s, "vs_cross_core": d.vs_cross_core,
            })
        })
        .collect();
    let poll_vs_bell: Vec<serde_json::Value> = Arch::ALL
        .into_iter()
        .filter_map(|a| {
            let (p, b) = (transport.drain_of(a, false)?, transport.drain_of(a, true)?);
            Some(json!({ "arch": a.name(), "doorbell_over_polling": b.gb_per_s / p.gb_per_s.max(1e-12), "target": "<= 1.5" }))
        })
        .collect();
    let subsystems: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            json!({
                "config": r.config, "tasks_per_s": r.tasks_per_s, "ratio_vs_off": r.ratio,
                "ratio_vs_off_paired": r.ratio_paired,
                "records": r.records, "dropped": r.dropped, "stall_waits": r.stall_waits,
                "cpu_ms_per_run": r.cpu.map(|c| json!({
                    "aicpu": c.aicpu_ns / 1e6, "aicore": c.aicore_ns / 1e6,
                    "dfx_host": c.dfx_host_ns / 1e6,
                })),
            })
        })
        .collect();
    let dfx_cpu = dfx_cpu_split(&rows);
    let j = json!({
        "transport": serde_json::from_str::<serde_json::Value>(&transport.to_json())?,
        "drain": drains,
        "polling_vs_doorbell": poll_vs_bell,
        "storm": {
            "arch": arch.name(),
            "tasks": tasks,
            "rounds": rounds,
            "in_run_rounds": in_run_rounds,
            // More rounds of off and all five alone, adjacent (their medians and paired ratio
            // are over `in_run_rounds + in_run_pairs` samples).
            "in_run_pairs": in_run_pairs,
            "statistic": "median of interleaved rounds",
            "policy": "block",
            "path": "device program (Path A) + launch transaction",
            "host_threads": ferry_runtime::host::dfx::HOST_THREADS,
            // What the chip's clock reads (tsc or monotonic, `FERRY_DEVICE_CLOCK`): with DFX on
            // it is read ~8 times per task, so the in-run figures depend on it.
            "device_clock": ferry_sim::clock::DeviceClock::real(arch.profile()).source_name(),
            "in_run": {
                "off_tasks_per_s": tps_of("off"),
                "all_tasks_per_s": tps_of("all"),
                "ratio": ratio_of("all"),
                "ratio_paired": paired_of("all"),
                "target": TARGET_IN_RUN,
                "with_every_payload": {
                    "ratio": ratio_of("all_dump_args=2"),
                    "ratio_paired": paired_of("all_dump_args=2"),
                    "note": "all five with --dump-args 2: every tensor's payload copied (level 3 copies only tensors marked with dump(...), and the storm marks none)",
                },
                "dfx_cpu": dfx_cpu.map(|d| json!({
                    "records": d.records,
                    "aicpu_ns_per_record": d.aicpu_ns_per_record,
                    "dfx_host_ns_per_record": d.host_ns_per_record,
                    "aicore_ms_added": d.aicore_ms_added,
                    "cpu_off_over_all": d.cpu_ratio,
                    "note": "CPU time of the chip's and the engine's threads during the run (median of the rounds); on 2 cores both runs are CPU-bound",
                })),
            },
            "command": {
                "off_s": cmd_off,
                "all_s": cmd_all,
                "ratio": cmd_all / cmd_off.max(1e-9),
                "ratio_paired": cmd_paired,
                "target": TARGET_COMMAND,
                "all_with_chrome_json_s": cmd_chrome,
                "with_chrome_json_ratio": cmd_chrome / cmd_off.max(1e-9),
            },
            "write_phase": {
                "records": wrote.records,
                "bytes": wrote.bytes,
                "bytes_per_record": wrote.bytes_per_record(),
                "files_s": files_s.as_secs_f64(),
                "records_per_s": records_per_s,
                "target_records_per_s": TARGET_WRITE_RECORDS_PER_S,
                "with_traces_s": whole_s,
                "with_traces_records_per_s": wrote.records as f64 / whole_s.max(1e-9),
            },
            "trace_phase": {
                "tasks": [small.tasks().len(), big.tasks().len()],
                "seconds": [t_small, t_big],
                "ratio": t_big / t_small.max(1e-9),
                "target": TARGET_TRACE_RATIO,
            },
            "subsystems": subsystems,
        },
    });
    if as_json {
        crate::stdout::outln!("{}", serde_json::to_string_pretty(&j)?)?;
        return Ok(());
    }
    crate::stdout::outln!(
        "DFX transport (a2a3 hot path {:.1} ns/record, switch {:.0} ns):",
        transport.hot_path_ns_per_record,
        transport.switch_ns
    )?;
    for d in &transport.drain {
        crate::stdout::outln!(
            "  drain {:<5} {:<8} {:>6.2} GB/s = {:.2} of a streaming memcpy of the same {} MiB, \
             {:.2} of a bare copy between two threads",
            d.arch,
            if d.doorbell { "doorbell" } else { "polling" },
            d.gb_per_s,
            d.vs_memcpy,
            d.working_set_bytes >> 20,
            d.vs_cross_core
        )?;
    }
    crate::stdout::outln!(
        "{} storm, {tasks} tasks, all five subsystems, median of {rounds} interleaved rounds \
         ({in_run_rounds} in the run, then {in_run_pairs} more of off and all five alone):",
        arch.name()
    )?;
    crate::stdout::outln!(
        "  in run:      {:.2} of DFX off (target >= {TARGET_IN_RUN}); median of the rounds' own \
         ratios {:.2}; with every payload (--dump-args 2) {:.2}",
        ratio_of("all"),
        paired_of("all"),
        ratio_of("all_dump_args=2")
    )?;
    crate::stdout::outln!(
        "  command:     {:.2} s vs {:.2} s off = {:.2}x (target <= {TARGET_COMMAND}; rounds' own \
         ratios {:.2}x); with --chrome-json {:.2} s = {:.2}x",
        cmd_all,
        cmd_off,
        cmd_all / cmd_off.max(1e-9),
        cmd_paired,
        cmd_chrome,
        cmd_chrome / cmd_off.max(1e-9)
    )?;
    crate::stdout::outln!(
        "  write phase: {} records, {:.1} bytes/record, files {:.2} M records/s (target >= 1); \
         with the Perfetto trace {:.3} s = {:.2} M records/s",
        wrote.records,
        wrote.bytes_per_record(),
        records_per_s / 1e6,
        whole_s,
        wrote.records as f64 / whole_s.max(1e-9) / 1e6
    )?;
    crate::stdout::outln!(
        "  trace phase: {:.3} s at {} tasks, {:.3} s at {} tasks = {:.1}x (target <= {TARGET_TRACE_RATIO})",
        t_small,
        small.tasks().len(),
        t_big,
        big.tasks().len(),
        t_big / t_small.max(1e-9)
    )?;
    if let Some(d) = dfx_cpu {
        crate::stdout::outln!(
            "  DFX CPU:     {:.0} ns/record on the AICPU threads + {:.0} ns/record on the host \
             engine ({} records); AICore threads +{:.1} ms; run CPU off/all {:.2}",
            d.aicpu_ns_per_record,
            d.host_ns_per_record,
            d.records,
            d.aicore_ms_added,
            d.cpu_ratio
        )?;
    }
    for r in &rows {
        crate::stdout::outln!(
            "  {:<12} {:>10.0} tasks/s  ratio {:>5.2} (paired {:>4.2})  {:>9} records, {} dropped, \
             {} gate waits",
            r.config,
            r.tasks_per_s,
            r.ratio,
            r.ratio_paired,
            r.records,
            r.dropped,
            r.stall_waits
        )?;
    }
    Ok(())
}
