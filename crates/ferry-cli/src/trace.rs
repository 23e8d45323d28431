//! `ferry trace DIR`: the Perfetto protobuf trace and the Chrome JSON fallback of a run's files.
use std::path::PathBuf;

use clap::Args;
use ferry_dfx::output::{
    self, Needs, WriteOptions, WriteReport, Written, CHROME_FILE, PERFETTO_FILE,
};

#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// Output directory of a run (holds chip_swimlane_records.json and friends).
    dir: PathBuf,
    /// Where to write the traces (default: DIR).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Writes both traces; returns what to print.
pub(crate) fn execute(a: &TraceArgs) -> anyhow::Result<String> {
    let r = crate::analysis::open(&a.dir, &Needs::TRACE)?;
    let out = a.out.clone().unwrap_or_else(|| a.dir.clone());
    // Traces only: the run's own files (perhaps the original runtime's) stay as they are.
    let opts = WriteOptions { files: false, traces: true, progress: None };
    let report = output::write_all(&out, &r.run, &opts)?;
    for f in &report.files {
        crate::analysis::record(&r, &f.path, Written { bytes: f.bytes, xxh3: f.xxh3 })?;
    }
    Ok(summary(&out, &report))
}

/// What `ferry trace` (and `ferry run` with the swimlane on) prints about the traces of `report`.
pub(crate) fn summary(dir: &std::path::Path, report: &WriteReport) -> String {
    let t = report.trace.unwrap_or_default();
    format!(
        "{}: {}, {}, {}\n{}: Chrome JSON fallback\n",
        dir.join(PERFETTO_FILE).display(),
        ferry_dfx::output::views::plural(t.tracks as u64, "track", "tracks"),
        ferry_dfx::output::views::plural(t.slices as u64, "slice", "slices"),
        ferry_dfx::output::views::plural(t.counters as u64, "counter value", "counter values"),
        dir.join(CHROME_FILE).display()
    )
}

pub(crate) fn run(a: &TraceArgs) -> anyhow::Result<()> {
    crate::stdout::print(&execute(a)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;

    #[test]
    fn writes_both_traces() {
        let d = sample_dir("trace", false);
        let msg = execute(&TraceArgs { dir: d.path.clone(), out: None }).unwrap();
        assert!(msg.contains("tracks"), "{msg}");
        let pb = std::fs::read(d.path.join(PERFETTO_FILE)).unwrap();
        assert_eq!(pb[0], 0x0A); // Trace.packet, length-delimited
        let js: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.path.join(CHROME_FILE)).unwrap()).unwrap();
        assert!(js["traceEvents"].as_array().unwrap().len() > 10);
    }

    #[test]
    fn a_dir_without_files_is_an_error() {
        let d = crate::testdir::TestDir::new("trace-empty");
        let e = execute(&TraceArgs { dir: d.path.clone(), out: None }).unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("has no chip_swimlane_records.json") && e.contains("--swimlane"), "{e}");
    }
}
