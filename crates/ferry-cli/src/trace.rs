//! `ferry trace DIR`: the Perfetto protobuf trace (and, asked for, the Chrome JSON) of a run's
//! files; what it wrote as text or, with `--json`, one JSON object (schema in docs/reports.md).
use std::path::PathBuf;

use clap::Args;
use ferry_profile::{self as output, Needs, Opened, WriteOptions, Written};

#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// Output directory of a run (holds chip_swimlane_records.json and friends), or of a
    /// session over several runs (`ferry run --repeat N`: one trace spanning the runs, with a
    /// track of the runs and the gaps between them).
    dir: PathBuf,
    /// Where this command writes its output: the directory for the traces (default: DIR).
    #[arg(short, long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Also write trace.chrome.json, the Chrome Trace Event JSON (the legacy format, for tools
    /// that read nothing else; about twice the Perfetto trace's size).
    #[arg(long)]
    chrome_json: bool,
    /// Print what was written as one JSON object: each file with its size, and the trace's
    /// tracks, slices and counter values.
    #[arg(long)]
    json: bool,
}

/// Writes the traces; returns what to print.
pub(crate) fn execute(a: &TraceArgs) -> anyhow::Result<String> {
    let (r, session) = match crate::analysis::open_any(&a.dir, &Needs::TRACE)? {
        Opened::Session(runs, opened) => {
            let models: Vec<_> = opened.iter().map(|r| r.run.clone()).collect();
            let first = opened.into_iter().next().expect("open_any: a session has a run");
            (first, Some(output::session_model(models, runs.warmup)))
        }
        Opened::Run(r) => (*r, None),
    };
    ferry_profile::progress::step("writing the traces");
    let out = a.out.clone().unwrap_or_else(|| a.dir.clone());
    // Traces only: the run's own files (perhaps the original runtime's) stay as they are.
    let opts = WriteOptions { files: false, traces: true, chrome: a.chrome_json, progress: None };
    let report = output::write_all(&out, session.as_ref().unwrap_or(&r.run), &opts)?;
    for f in &report.files {
        crate::analysis::record(&r, &f.path, Written { bytes: f.bytes, xxh3: f.xxh3 })?;
    }
    let model = session.as_ref().unwrap_or(&r.run);
    let no_records: Vec<&str> = model.no_records().iter().map(|s| s.title()).collect();
    if a.json {
        let t = report.trace.clone().unwrap_or_default();
        let files: Vec<serde_json::Value> = report
            .files
            .iter()
            .map(|f| serde_json::json!({ "path": f.path.display().to_string(), "bytes": f.bytes }))
            .collect();
        let v = serde_json::json!({
            "written": files,
            "tracks": t.tracks,
            "slices": t.slices,
            "counter_values": t.counters,
            "empty_tracks": t.empty,
            "no_records": no_records,
            "outcome": r.outcome,
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    let mut s = report.traces_text(&out);
    let line = ferry_profile::Subsystem::no_records_line(&model.no_records());
    if !line.is_empty() {
        s += &format!("{line}\n");
    }
    Ok(s)
}

pub(crate) fn run(a: &TraceArgs) -> anyhow::Result<()> {
    crate::stdout::print(&ferry_profile::progress::run("trace", || execute(a))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;
    use ferry_profile::{CHROME_FILE, PERFETTO_FILE};

    #[test]
    fn writes_the_perfetto_trace_and_the_chrome_json_when_asked() {
        let d = sample_dir("trace", false);
        let msg =
            execute(&TraceArgs { dir: d.path.clone(), out: None, chrome_json: false, json: false })
                .unwrap();
        assert!(msg.contains("tracks") && !msg.contains("Chrome"), "{msg}");
        let pb = std::fs::read(d.path.join(PERFETTO_FILE)).unwrap();
        assert_eq!(pb[0], 0x0A); // Trace.packet, length-delimited
        assert!(!d.path.join(CHROME_FILE).exists());
        let msg =
            execute(&TraceArgs { dir: d.path.clone(), out: None, chrome_json: true, json: false })
                .unwrap();
        assert!(msg.contains("Chrome JSON"), "{msg}");
        let js: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.path.join(CHROME_FILE)).unwrap()).unwrap();
        assert!(js["traceEvents"].as_array().unwrap().len() > 10);
        assert_eq!(std::fs::read(d.path.join(PERFETTO_FILE)).unwrap(), pb);
        let j =
            execute(&TraceArgs { dir: d.path.clone(), out: None, chrome_json: true, json: true })
                .unwrap();
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        let w = v["written"].as_array().unwrap();
        assert_eq!(w.len(), 2, "{v}");
        assert!(w[0]["path"].as_str().unwrap().ends_with(PERFETTO_FILE), "{v}");
        assert_eq!(w[0]["bytes"], pb.len() as u64);
        assert!(v["tracks"].as_u64().unwrap() > 0 && v["slices"].as_u64().unwrap() >= 6, "{v}");
    }

    #[test]
    fn a_dir_without_files_is_an_error() {
        let d = crate::testdir::TestDir::new("trace-empty");
        let e =
            execute(&TraceArgs { dir: d.path.clone(), out: None, chrome_json: false, json: false })
                .unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("has no chip_swimlane_records.json") && e.contains("--swimlane"), "{e}");
    }
}
