//! `ferry info`: arch profiles and the simulated device inventory.
use anyhow::Context;
use clap::Args;
use ferry_sim::cores::CoreConfig;
use ferry_sim::{Arch, PlatformBuilder};

#[derive(Debug, Args)]
pub(crate) struct InfoArgs {
    /// Arch of the simulated devices to list: a2a3 (50 MHz, SVM) or a5 (1 GHz, non-SVM).
    #[arg(long, default_value = "a2a3", value_parser = arch_parser())]
    arch: Arch,
    /// Number of simulated devices to list.
    #[arg(long, default_value_t = 1)]
    devices: u32,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Device profile of the listed devices: vendor (default) or relaxed.
    #[arg(long, default_value = "vendor", value_parser = parse_profile)]
    profile: ferry_sim::profile::DeviceProfile,
}

fn parse_profile(s: &str) -> Result<ferry_sim::profile::DeviceProfile, String> {
    ferry_sim::profile::DeviceProfile::from_name(s)
        .ok_or_else(|| format!("unknown device profile `{s}` (expected vendor or relaxed)"))
}

/// The `--arch` parser: its help lists the arches (`[possible values: a2a3, a5]`).
pub(crate) fn arch_parser() -> impl clap::builder::TypedValueParser<Value = Arch> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Arch::ALL.iter().map(|a| a.name()))
        .try_map(|s: String| Arch::from_name(&s).ok_or_else(|| format!("unknown arch `{s}`")))
}

pub(crate) fn run(a: &InfoArgs) -> anyhow::Result<()> {
    let platform = PlatformBuilder::new(a.arch)
        .devices(a.devices)
        .profile(a.profile)
        .build()
        .context("building the simulated platform")?;
    let profiles: Vec<_> = Arch::ALL
        .iter()
        .map(|arch| {
            let p = arch.profile();
            serde_json::json!({
                "arch": p.name,
                "max_aicpu_threads": p.max_aicpu_threads,
                "aic_per_die": p.aic_per_die,
                "aiv_per_die": p.aiv_per_die,
                "run_default_aic": CoreConfig::default_for(p).aic,
                "run_default_aiv": CoreConfig::default_for(p).aiv,
                "clock_hz": p.clock_hz,
                "svm": p.svm,
                "dfx_backpressure_budget_cycles": p.dfx_backpressure_budget_cycles,
            })
        })
        .collect();
    let devices: Vec<_> = platform
        .devices()
        .iter()
        .map(|d| {
            let cores = CoreConfig::default_for(d.arch());
            let caps = d.aicpu_os().caps();
            serde_json::json!({
                "profile": caps.profile.name(),
                "path_a_latch": caps.first_saved_so_wins,
                "path_b_coherent": caps.custom_scheduler_coherent,
                "ordinal": d.ordinal(),
                "arch": d.arch().name,
                "hbm_bytes": d.memory().size(),
                "svm": d.memory().is_svm(),
                "sim_aicpu_threads": cores.aicpu_threads,
                "sim_aic": cores.aic,
                "sim_aiv": cores.aiv,
                "clock": if d.clock().is_virtual() { "virtual" } else { "real" },
                "clock_source": d.clock().source_name(),
            })
        })
        .collect();
    if a.json {
        crate::stdout::outln!(
            "{}",
            serde_json::json!({
                "arch_profiles": profiles,
                "devices": devices,
                "descriptor_extents": ferry_bench::extents::measure()?.json(),
            })
        )?;
        return Ok(());
    }
    crate::stdout::outln!(
        "arch profiles (hardware: one die's cores; a simulated run uses fewer, see \"run\")"
    )?;
    crate::stdout::outln!(
        "  {:<6} {:>6} {:>8} {:>8} {:>14} {:>5} {:>16}   {}",
        "arch",
        "aicpu",
        "die aic",
        "die aiv",
        "clock",
        "svm",
        "dfx budget",
        "run (default)"
    )?;
    for arch in Arch::ALL {
        let p = arch.profile();
        let run = CoreConfig::default_for(p);
        crate::stdout::outln!(
            "  {:<6} {:>6} {:>8} {:>8} {:>10} MHz {:>5} {:>9} cycles   {} AIC + {} AIV",
            p.name,
            p.max_aicpu_threads,
            p.aic_per_die,
            p.aiv_per_die,
            p.clock_hz / 1_000_000,
            if p.svm { "yes" } else { "no" },
            p.dfx_backpressure_budget_cycles,
            run.aic,
            run.aiv
        )?;
    }
    crate::stdout::outln!(
        "  die aic/aiv: the cores a die of that arch has; run: the AICore workers `ferry run` \
         simulates by default (each one a host thread on this machine: `--aic N --aiv N` \
         choose others)"
    )?;
    crate::stdout::outln!("{}", ferry_bench::extents::measure()?.to_text())?;
    crate::stdout::outln!("simulated devices ({})", a.arch.name())?;
    for d in platform.devices() {
        let c = CoreConfig::default_for(d.arch());
        crate::stdout::outln!(
            "  device {}: {} MiB HBM, {}, {} AICPU threads, {} AIC + {} AIV simulated cores (by default), clock: {}",
            d.ordinal(),
            d.memory().size() >> 20,
            if d.memory().is_svm() { "SVM" } else { "non-SVM (explicit range copies)" },
            c.aicpu_threads,
            c.aic,
            c.aiv,
            d.clock().source_name()
        )?;
        let caps = d.aicpu_os().caps();
        crate::stdout::outln!(
            "    profile: {} (Path A latch {}, Path B cluster {})",
            caps.profile.name(),
            if caps.first_saved_so_wins { "on" } else { "off" },
            if caps.custom_scheduler_coherent {
                "coherent"
            } else {
                "outside AICore's snoop domain"
            }
        )?;
    }
    Ok(())
}
