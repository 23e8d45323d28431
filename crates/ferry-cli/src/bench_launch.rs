//! `ferry bench launch`'s runtime series: back-to-back vector runs on the runtime's real
//! descriptor, one launch slot against two (`ferry_bench::launch_series`).
use ferry_bench::launch_series::{self as launch_bench, LaunchSeriesConfig, LaunchSeriesReport};
use ferry_runtime::examples::Size;
use ferry_runtime::host::{RunnerConfig, Variant};
use ferry_sim::Arch;

/// The series `ferry bench launch` measures: the vector example on a2a3 host-built (the 1.5x
/// target) and device-orchestrated, and a5 host-built (which also stages launch metadata).
pub(crate) fn runtime_series(quick: bool) -> anyhow::Result<Vec<LaunchSeriesReport>> {
    let legs = [
        (Arch::A2a3, Variant::HostBuiltGraph),
        (Arch::A2a3, Variant::DeviceOrchestrated),
        (Arch::A5, Variant::HostBuiltGraph),
    ];
    legs.into_iter()
        .map(|(arch, variant)| {
            let cfg = LaunchSeriesConfig {
                runner: RunnerConfig::default_for(arch),
                variant,
                size: Size::Small,
                runs: if quick { 40 } else { 200 },
                // 9 rounds: on the 2-core VMs a serial round now and then runs in a mode ~1.7x
                // faster than the rest (its host steps ~10x faster; the host thread's waits then
                // find the CPU busy instead of idle), and the median must not land on it by chance.
                rounds: if quick { 1 } else { 9 },
                pipelined_slots: 2,
            };
            Ok(launch_bench::run(&cfg)?)
        })
        .collect()
}

/// The transaction report's JSON object with the runtime series added as `"runtime": [...]`.
pub(crate) fn json(transaction: &str, series: &[LaunchSeriesReport]) -> String {
    let list: Vec<String> = series.iter().map(LaunchSeriesReport::to_json).collect();
    let body = transaction.strip_suffix('}').unwrap_or(transaction);
    format!("{body},\"runtime\":[{}]}}", list.join(","))
}

pub(crate) fn print(series: &[LaunchSeriesReport]) -> anyhow::Result<()> {
    for s in series {
        let c = &s.config;
        crate::stdout::outln!(
            "runtime series: vector ({:?}) on {} {:?}, {} runs per series, medians of {} interleaved rounds",
            c.size,
            c.runner.arch.name(),
            c.variant,
            c.runs,
            c.rounds
        )?;
        crate::stdout::outln!(
            "  serial (1 slot): {:>8.0} runs/s; pipelined ({} slots): {:>8.0} runs/s ({:.2}x)",
            s.serial_runs_per_s,
            c.pipelined_slots,
            s.pipelined_runs_per_s,
            s.speedup()
        )?;
        crate::stdout::outln!(
            "  descriptor bytes per run: unchanged {}, changed {}; metadata {}, suffix {} (synchronous at prepare)",
            s.unchanged_bytes_per_run,
            s.changed_bytes_per_run,
            s.metadata_bytes_per_run,
            s.suffix_bytes_per_run
        )?;
        crate::stdout::outln!(
            "  chip idle between runs (device clock): serial {:.1} % of wall, pipelined {:.1} %; \
             pipelined {:.0} runs/s = {:.2} of device-bound (each round against its own; {:.0} \
             runs/s; chip busy {:.1} %, mean run {:.2}x the median)",
            100.0 * s.serial_idle_fraction,
            100.0 * s.pipelined_idle_fraction,
            s.pipelined_runs_per_s,
            s.pipelined_of_device_bound(),
            s.pipelined_device_bound_runs_per_s,
            100.0 * s.pipelined_busy_fraction,
            s.pipelined_exec_mean_over_median
        )?;
        let p = &s.serial_phases;
        crate::stdout::outln!(
            "  serial run: prepare {:.0} us, launch {:.0} us, finalize {:.0} us (device execution {:.0} us), check {:.0} us",
            p.prepare_us,
            p.launch_us,
            p.finalize_us,
            p.execute_us,
            p.check_us
        )?;
    }
    Ok(())
}
