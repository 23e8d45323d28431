//! `ferry trace DIR`: the Perfetto protobuf trace and the Chrome JSON fallback of a run's files.
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use ferry_dfx::output::{self, chrome, perfetto};

/// File name of the Perfetto protobuf trace.
pub(crate) const PERFETTO_FILE: &str = "trace.perfetto-trace";
/// File name of the Chrome JSON trace.
pub(crate) const CHROME_FILE: &str = "trace.chrome.json";

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
    let run = output::read_run(&a.dir).with_context(|| format!("reading {}", a.dir.display()))?;
    let out = a.out.clone().unwrap_or_else(|| a.dir.clone());
    let plan = perfetto::plan(&run);
    let pb = out.join(PERFETTO_FILE);
    let bytes = perfetto::encode_plan_with(&plan, perfetto::EncodeOptions { intern_names: true });
    output::write_bytes_atomic(&pb, &bytes)?;
    let js = out.join(CHROME_FILE);
    // Serialising a `Value` cannot fail.
    let json = serde_json::to_vec(&chrome::encode_chrome(&plan))?;
    output::write_bytes_atomic(&js, &json)?;
    Ok(format!(
        "{}: {} tracks, {} slices, {} counter values\n{}: Chrome JSON fallback\n",
        pb.display(),
        plan.tracks.len(),
        plan.slices.len(),
        plan.counters.len(),
        js.display()
    ))
}

/// Writes both traces of the run in `dir` into `dir` (what `ferry run` calls when the swimlane
/// is on).
pub(crate) fn write_traces(dir: &std::path::Path) -> anyhow::Result<String> {
    execute(&TraceArgs { dir: dir.to_path_buf(), out: None })
}

pub(crate) fn run(a: &TraceArgs) -> anyhow::Result<()> {
    print!("{}", execute(a)?);
    Ok(())
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
        assert!(format!("{e:#}").contains("no DFX output files"), "{e:#}");
    }
}
