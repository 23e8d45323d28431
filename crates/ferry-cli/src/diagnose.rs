//! `ferry diagnose handshake`: the device-memory readback that diagnoses the Path B hang
//! (docs/design/launch.md). Runs the vector example
//! once on the configured device, then reads every core's handshake slot and the AICPU's record
//! of what it last saw back from device memory, and prints them side by side.
use crate::device_opts::DeviceOpts;
use anyhow::Context;
use clap::{Args, Subcommand};
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::{DeviceRunner, LoadMethod, RunnerConfig};
use ferry_runtime::RunError;
use ferry_sim::Arch;

#[derive(Debug, Args)]
pub(crate) struct DiagnoseArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Per core, `aicore_done` as the AICPU last saw it and as device memory holds it.
    Handshake(HandshakeArgs),
}

#[derive(Debug, Args)]
struct HandshakeArgs {
    /// Chip generation.
    #[arg(long, default_value = "a2a3", value_parser = crate::info::arch_parser())]
    arch: Arch,
    /// AIC (cube) workers.
    #[arg(long, default_value_t = 2)]
    aic: u32,
    /// AIV (vector) workers.
    #[arg(long, default_value_t = 4)]
    aiv: u32,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    device: DeviceOpts,
}

pub(crate) fn run(a: &DiagnoseArgs) -> anyhow::Result<()> {
    let What::Handshake(h) = &a.what;
    let mut cfg = RunnerConfig { aic: h.aic, aiv: h.aiv, ..RunnerConfig::small(h.arch) };
    h.device.apply(&mut cfg);
    let mut runner = DeviceRunner::new(cfg).context("starting the simulated chip")?;
    if h.device.method() == LoadMethod::Preinstalled {
        ferry_job::install_preinstalled(&runner)?;
    }
    let ex = Example::Vector.build(Size::Small);
    runner.register_callable(0, ex.callable.clone())?;
    let outcome = match runner.run(0, ex.args.clone()) {
        Ok(out) => match ex.verify(&out) {
            Ok(_) => "completed and verified".to_string(),
            Err(e) => format!("completed with wrong results: {e}"),
        },
        Err(e @ RunError::HandshakeTimeout { .. }) => e.to_string(),
        Err(e) => return Err(e).context("running the vector example"),
    };
    let cores = runner.last_handshake();
    let stale = cores.iter().filter(|c| c.is_stale()).count();
    if h.json {
        let rows: Vec<_> = cores
            .iter()
            .map(|c| {
                serde_json::json!({
                    "core": c.core,
                    "core_type": c.core_type,
                    "physical_core_id": c.physical_core_id,
                    "aicore_done_aicpu": c.aicpu_saw,
                    "aicore_done_memory": c.memory_done,
                    "stale": c.is_stale(),
                })
            })
            .collect();
        crate::stdout::outln!(
            "{}",
            serde_json::json!({
                "profile": cfg.profile.name(),
                "path": cfg.path.to_string(),
                "fixes": cfg.fixes.letters(),
                "split_handshake": cfg.handshake_layout.is_split(),
                "run": outcome,
                "stale_cores": stale,
                "cores": rows,
            })
        )?;
        return Ok(());
    }
    crate::stdout::outln!("device: {}", ferry_job::device_line(&cfg))?;
    crate::stdout::outln!("path:   {}", cfg.path)?;
    crate::stdout::outln!("run:    {outcome}")?;
    crate::stdout::outln!("handshake read back from device memory (D2H), per core:")?;
    crate::stdout::outln!(
        "  {:>4} {:>4} {:>9} {:>13} {:>15}  state",
        "core",
        "type",
        "physical",
        "aicpu saw",
        "memory holds"
    )?;
    for c in cores {
        let kind = if c.core_type == ferry_abi::handshake::CORE_TYPE_AIC { "aic" } else { "aiv" };
        let state = if c.is_stale() {
            "STALE"
        } else if c.memory_done == 0 {
            "not reported"
        } else {
            "seen"
        };
        crate::stdout::outln!(
            "  {:>4} {:>4} {:>9} {:>13} {:>15}  {state}",
            c.core,
            kind,
            c.physical_core_id,
            c.aicpu_saw,
            c.memory_done
        )?;
    }
    if stale > 0 {
        crate::stdout::outln!(
            "{stale} stale handshake(s): memory holds the cores' reports, the AICPU never saw \
             them — its cluster is outside AICore's snoop domain (the Path B hang, docs/design/launch.md)"
        )?;
    } else {
        crate::stdout::outln!("every report the AICPU saw matches device memory")?;
    }
    Ok(())
}
