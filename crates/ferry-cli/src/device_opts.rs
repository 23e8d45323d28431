//! The simulated device's profile and how a run reaches it (`ferry run`, `ferry diagnose`).
use clap::{Args, ValueEnum};
use ferry_runtime::host::{
    DeviceProfile, HandshakeLayout, LaunchPath, LoadMethod, PathBFixes, RunnerConfig,
};
use std::time::Duration;

#[derive(Debug, Args)]
pub(crate) struct DeviceOpts {
    /// Device profile: `vendor` (default: the Path A latch, an incoherent Path B cluster, as the
    /// vendor stack) or `relaxed` (ferry's own device: no latch, a coherent Path B cluster).
    #[arg(long, default_value = "vendor", value_parser = parse_profile)]
    profile: DeviceProfile,
    /// How the AICPU program is made runnable: path-a (dispatcher bootstrap), path-b (custom
    /// scheduler) or preinstalled (method 1).
    #[arg(long, value_enum, default_value_t = MethodArg::PathA)]
    method: MethodArg,
    /// Vendor-side Path B fixes of the device, comma-separated: a (EL0 cache maintenance),
    /// b (non-cacheable handshake memory), c (same-cluster affinity).
    #[arg(long, default_value = "", value_parser = PathBFixes::parse)]
    fixes: PathBFixes,
    /// Split each handshake slot into an AICore line and an AICPU line (option D of docs/design/launch.md).
    #[arg(long)]
    split_handshake: bool,
    /// How long the schedulers wait for their cores' handshake reports, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    handshake_timeout_ms: u64,
    /// How long each run's AICore kernel takes to start, in milliseconds (default 0): with a
    /// few, every core reports after the AICPU's first handshake sweep.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    aicore_latency_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum MethodArg {
    /// Method 2, the dispatcher bootstrap.
    PathA,
    /// Method 3, the custom scheduler.
    PathB,
    /// Method 1, preinstalled (ferry installs the programs out of band first).
    Preinstalled,
}

fn parse_profile(s: &str) -> Result<DeviceProfile, String> {
    DeviceProfile::from_name(s)
        .ok_or_else(|| format!("unknown device profile `{s}` (expected vendor or relaxed)"))
}

impl DeviceOpts {
    /// Applies the options to `cfg`.
    pub(crate) fn apply(&self, cfg: &mut RunnerConfig) {
        cfg.profile = self.profile;
        cfg.fixes = self.fixes;
        cfg.path = LaunchPath::DeviceProgram(self.method());
        if self.split_handshake {
            cfg.handshake_layout = HandshakeLayout::SPLIT;
        }
        cfg.handshake_timeout = Duration::from_millis(self.handshake_timeout_ms);
        cfg.aicore_launch_latency = Duration::from_millis(self.aicore_latency_ms);
    }

    pub(crate) fn method(&self) -> LoadMethod {
        match self.method {
            MethodArg::PathA => LoadMethod::DispatcherBootstrap,
            MethodArg::PathB => LoadMethod::CustomScheduler,
            MethodArg::Preinstalled => LoadMethod::Preinstalled,
        }
    }
}
