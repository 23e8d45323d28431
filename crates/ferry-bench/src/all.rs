//! `ferry bench all`: every bench area in turn, each in a process of its own, as one JSON object
//! with the date, the machine and the build: the input of [`crate::figures`].
//!
//! ```text
//! ferry bench all --json -o docs/figures/1.json
//! ferry bench all --json -o docs/figures/2.json
//! ferry figures docs/figures/1.json docs/figures/2.json -o docs/figures.md
//! ```

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// The areas `ferry bench all` runs, in order, as `ferry bench` arguments.
pub const AREAS: &[(&str, &[&str])] = &[
    ("sim", &["sim"]),
    ("launch", &["launch"]),
    ("copy", &["copy"]),
    ("copy_server", &["copy", "--emulate-server"]),
    ("runtime", &["runtime"]),
    ("dfx", &["dfx"]),
];

/// Why `ferry bench all` failed.
#[derive(Debug, thiserror::Error)]
pub enum AllError {
    /// An area's process could not be started.
    #[error("starting `ferry bench {args}`")]
    Start {
        /// The area's `ferry bench` arguments.
        args: String,
        /// Why it could not start.
        #[source]
        source: std::io::Error,
    },
    /// An area's process failed.
    #[error("`ferry bench {args} --json` failed ({status})")]
    Failed {
        /// The area's `ferry bench` arguments.
        args: String,
        /// How it ended.
        status: std::process::ExitStatus,
    },
    /// An area's process printed no JSON object.
    #[error("`ferry bench {args} --json` printed no JSON object")]
    NoJson {
        /// The area's `ferry bench` arguments.
        args: String,
        /// What was wrong with its output.
        #[source]
        source: serde_json::Error,
    },
}

/// Runs every area of [`AREAS`] through `exe`, the `ferry` binary (`exe bench <area> --json`),
/// each in its own process so no process-wide state (pools, the yield gate) carries from one to
/// the next, and returns one object: `{"date", "machine", "build", "areas": {name: area's
/// JSON}}`. `progress` gets one line before each area; the areas' standard error is this
/// process's.
///
/// # Errors
/// [`AllError`] when an area cannot start, fails or prints no JSON object.
pub fn bench_all(
    exe: &Path,
    quick: bool,
    mut progress: impl FnMut(&str),
) -> Result<Value, AllError> {
    let load_before = loadavg();
    let mut areas = serde_json::Map::new();
    for (i, (name, args)) in AREAS.iter().enumerate() {
        let joined = args.join(" ");
        progress(&format!("bench all: [{}/{}] ferry bench {joined} --json", i + 1, AREAS.len()));
        let mut cmd = Command::new(exe);
        cmd.arg("bench").args(*args).arg("--json").stdin(Stdio::null()).stderr(Stdio::inherit());
        if quick {
            cmd.arg("--quick");
        }
        let out =
            cmd.output().map_err(|source| AllError::Start { args: joined.clone(), source })?;
        if !out.status.success() {
            return Err(AllError::Failed { args: joined, status: out.status });
        }
        let v: Value = serde_json::from_slice(&out.stdout)
            .map_err(|source| AllError::NoJson { args: joined, source })?;
        areas.insert((*name).to_string(), v);
    }
    Ok(json!({
        "date": utc_now(),
        "quick": quick,
        "machine": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "cpu_model": cpu_model(),
            "memory_gib": mem_gib(),
            "kernel": read_trim("/proc/sys/kernel/osrelease"),
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
        },
        "build": {
            "version": env!("CARGO_PKG_VERSION"),
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "commit": git_commit(),
        },
        "areas": Value::Object(areas),
    }))
}

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn loadavg() -> Vec<f64> {
    read_trim("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|m| m.trim().to_string())
}

fn mem_gib() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: f64 = info
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((kb / (1024.0 * 1024.0) * 10.0).round() / 10.0)
}

fn git_commit() -> Option<String> {
    let out =
        Command::new("git").args(["rev-parse", "HEAD"]).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Now as `YYYY-MM-DD HH:MM`, UTC (days to civil date: Howard Hinnant's algorithm).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil(secs)
}

fn civil(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", rem / 3600, rem % 3600 / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), "1970-01-01 00:00");
        assert_eq!(civil(951_782_400), "2000-02-29 00:00");
        assert_eq!(civil(1_796_545_800), "2026-12-06 08:30");
    }
}
