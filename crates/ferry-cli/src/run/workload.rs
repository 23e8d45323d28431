//! `ferry run --workload FILE` and `ferry workload check FILE`: a user's workload file, checked
//! and compiled by `ferry-workload`, run like an example (both variants, every DFX flag: the
//! name map and clock anchors are written for it) and verified as the file says.
use super::{fail, print_next_steps, profiled, Place, RunArgs};
use anyhow::Context;
use clap::{Args, Subcommand};
use ferry_profile::ScopeLabel;
use ferry_profile::SUMMARY_FILE;
use ferry_runtime::host::profile::{run_summary, workload_summary};
use ferry_runtime::host::KernelRegistry;
use ferry_runtime::host::{DeviceRunner, RunnerConfig, Variant};
use ferry_workload::Workload;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// `ferry workload ...`.
#[derive(Debug, Args)]
pub(crate) struct WorkloadArgs {
    #[command(subcommand)]
    command: WorkloadCommand,
}

#[derive(Debug, Subcommand)]
enum WorkloadCommand {
    /// Parse, check and compile a workload file without running it: every error names its line
    /// (`file:line:col: message`); exit status 1 on the first one.
    Check {
        /// The workload file (TOML; format in docs/workloads.md).
        file: PathBuf,
        /// Check with the file's `[small]` parameter overrides.
        #[arg(long)]
        small: bool,
        /// Custom kernel libraries the workload names (as `ferry run --kernels`); loading them
        /// starts a simulated chip.
        #[arg(long = "kernels", value_name = "LIB.so", value_delimiter = ',')]
        kernels: Vec<PathBuf>,
    },
}

/// The kernels a workload may name: the built-ins and the libraries `libs` (loaded into
/// `runner`, which holds them on the device).
fn catalog(runner: &mut DeviceRunner, libs: &[PathBuf]) -> anyhow::Result<Arc<KernelRegistry>> {
    crate::kernels::load(runner, libs)?;
    Ok(runner.kernel_registry())
}

pub(crate) fn workload_command(a: &WorkloadArgs) -> anyhow::Result<()> {
    match &a.command {
        WorkloadCommand::Check { file, small, kernels } => {
            let registry = if kernels.is_empty() {
                Arc::new(KernelRegistry::new())
            } else {
                let mut r = DeviceRunner::new(RunnerConfig::small(ferry_sim::Arch::A2a3))
                    .context("starting a simulated chip to load the kernel libraries")?;
                let k = catalog(&mut r, kernels)?;
                r.finalize()?;
                k
            };
            let wl = Workload::load(file, &*registry, *small)?;
            crate::stdout::outln!(
                "{}: ok: workload `{}`, {} tensors, {} tasks, program of {} words",
                file.display(),
                wl.name(),
                wl.tensor_names().count(),
                wl.tasks(),
                wl.program().len()
            )?;
            Ok(())
        }
    }
}

pub(super) fn run(a: &RunArgs, file: &Path) -> anyhow::Result<()> {
    // Checked against the built-ins first, so a malformed file is refused before a chip starts
    // (a name only a library defines is checked again below, with the libraries loaded).
    let builtin = KernelRegistry::new();
    if a.kernels.is_empty() {
        Workload::load(file, &builtin, a.small)?;
    }
    let (cfg, variant, dfx) = a.setup()?;
    let mut run_dir = a.claim(&cfg)?;
    let mut runner = DeviceRunner::new(cfg).context("starting the simulated chip")?;
    if a.device.method() == ferry_runtime::host::LoadMethod::Preinstalled {
        crate::device_opts::install_preinstalled(&runner)?;
    }
    let cat = catalog(&mut runner, &a.kernels)?;
    let wl = Workload::load(file, &*cat, a.small)?;
    let args = wl.run_args()?;
    crate::stdout::outln!(
        "ferry run: workload `{}` ({}), {} tasks, simulated {} chip, {} AICPU threads, {} AIC + {} AIV, {}",
        wl.name(),
        file.display(),
        wl.tasks(),
        a.arch.name(),
        cfg.aicpu_threads,
        cfg.aic,
        cfg.aiv,
        match variant {
            Variant::DeviceOrchestrated => "device-orchestrated",
            Variant::HostBuiltGraph => "host-built",
        }
    )?;
    runner.register_callable(0, wl.callable(variant))?;
    let scope_names = wl
        .scopes()
        .iter()
        .map(|s| (s.site.clone(), ScopeLabel { name: s.name.clone(), at: s.at.clone() }))
        .collect();
    let at = Place { run_dir: run_dir.as_mut(), sub: None, case: wl.name(), scope_names };
    let ran = profiled(&mut runner, &dfx, a, at, args.scratch_bytes, |runner| {
        if a.repeat > 1 {
            let rep = runner
                .repeat(0, a.repeat, |_| args.clone(), |_, out| wl.verify(out, &*cat).map(|_| ()))
                .map_err(|e| crate::kernel_fault::name_kernel_fault(e.into(), &cat, Some(&wl)))?;
            crate::stdout::outln!(
                "{:<16} {:>8} runs through {} launch slots in {:.1} ms: {:.1} runs/s, every run verified",
                wl.name(),
                rep.runs,
                rep.slots,
                rep.elapsed.as_secs_f64() * 1e3,
                rep.runs_per_s()
            )?;
        }
        let p = runner.prepare(0, args.clone())?;
        let host = p.host_orchestration().cloned();
        let mut l = runner.launch(p)?;
        let limit = runner.config().timeout;
        let start = std::time::Instant::now();
        while !runner.wait_timeout(&mut l, Duration::from_millis(50))? && start.elapsed() < limit {}
        Ok((runner.finalize_run(l)?, host))
    })?;
    let profiles: Vec<_> = ran.profile.into_iter().collect();
    let verified = ran
        .run
        .map_err(|e| crate::kernel_fault::name_kernel_fault(e, &cat, Some(&wl)))
        .with_context(|| format!("workload `{}`", wl.name()))
        .and_then(|out| {
            let c = wl.verify(&out, &*cat).map_err(|e| {
                anyhow::anyhow!("workload `{}` produced a wrong result: {e}", wl.name())
            })?;
            Ok((out, c))
        });
    let (out, checksum) = match verified {
        Ok(v) => v,
        Err(e) => return fail(run_dir, &profiles, e),
    };
    let s = &out.stats;
    crate::stdout::outln!(
        "{:<16} {:>8} {:>8.1} ms {:>12.0} tasks/s  ok (checksum {:.4})",
        wl.name(),
        s.tasks,
        s.wall.as_secs_f64() * 1e3,
        s.tasks as f64 / s.wall.as_secs_f64(),
        checksum
    )?;
    let per: Vec<String> = s.per_kernel.iter().map(|(k, n)| format!("{k} {n}")).collect();
    crate::stdout::outln!("{:<16} per kernel: {}", "", per.join(", "))?;
    if let Some(rd) = run_dir {
        let mut summary = run_summary(&cfg, variant);
        summary.runs.push(workload_summary(wl.name(), file, &out, checksum));
        let outputs: Vec<(&str, &[f32])> = wl
            .tensor_names()
            .enumerate()
            .filter_map(|(i, name)| Some((name, out.tensors.get(i)?.as_deref()?)))
            .collect();
        let written = rd.path().join(SUMMARY_FILE);
        rd.finish(&summary, &outputs)?;
        crate::stdout::outln!("wrote {}", written.display())?;
    }
    print_next_steps(&profiles)?;
    runner.finalize()?;
    Ok(())
}
