//! `ferry report DIR`: per-kernel time (the most first), per-core utilisation, the PMU sums,
//! stalls, loss and the critical paths of a run, as text or `--json` (the model of
//! [`ferry_profile::analysis::Report`]; schema in docs/reports.md).
use std::path::PathBuf;

use clap::Args;
use ferry_profile::analysis::{self, Report};
use ferry_profile::Needs;

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Output directory of a run (of a session over several runs, `ferry run --repeat N`:
    /// every run's report after the runs' table).
    dir: PathBuf,
    /// Print the report as one JSON object (schema: docs/reports.md).
    #[arg(long)]
    json: bool,
    /// Show only the N kernels with the most device time (text and JSON).
    #[arg(long, value_name = "N")]
    top: Option<usize>,
}

/// The report of the run in `dir`: every file present is read, and one that is present but
/// unreadable (truncated, changed since the run) is an error.
pub(crate) fn build(dir: &std::path::Path) -> anyhow::Result<Report> {
    let r = crate::analysis::open(dir, &Needs::REPORT)?;
    Ok(analysis::report_opened(&r))
}

/// The report of a session over several runs (`ferry run --repeat N` with DFX): the runs'
/// table from `runs.json`, then each run's report.
fn session(a: &ReportArgs, runs: &ferry_profile::SessionRuns) -> anyhow::Result<String> {
    let mut reports = Vec::with_capacity(runs.runs.len());
    for r in &runs.runs {
        let mut rep = build(&a.dir.join(&r.dir))?;
        if let Some(n) = a.top {
            rep.kernels.truncate(n);
        }
        reports.push(rep);
    }
    if a.json {
        let v = serde_json::json!({ "runs": runs.runs, "reports": reports });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    let mut s = format!(
        "ferry report: {} runs of one DFX session in {} ({})\n",
        runs.runs.len(),
        a.dir.display(),
        ferry_profile::RUNS_FILE
    );
    s.push_str("  run       blocks  device cycles                produced  collected  dropped  reconcile\n");
    for r in &runs.runs {
        let span = r.device_cycles.map_or_else(|| "-".to_string(), |[a, b]| format!("{a}..{b}"));
        s.push_str(&format!(
            "  {:<8} {:>7}  {:<27} {:>9} {:>10} {:>8}  {}\n",
            r.dir,
            r.blocks.map_or_else(|| "-".to_string(), |b| b.to_string()),
            span,
            r.produced,
            r.collected,
            r.dropped,
            if r.reconciles { "ok" } else { "FAILS" }
        ));
    }
    for (r, rep) in runs.runs.iter().zip(&reports) {
        s.push_str(&format!("\n== {} ==\n", r.dir));
        s.push_str(&rep.text(a.top));
    }
    Ok(s)
}

pub(crate) fn execute(a: &ReportArgs) -> anyhow::Result<String> {
    if !a.dir.join(ferry_profile::SWIMLANE_FILE).exists() {
        if let Some(runs) = ferry_profile::read_runs(&a.dir)? {
            return session(a, &runs);
        }
    }
    let mut r = build(&a.dir)?;
    if a.json {
        if let Some(n) = a.top {
            r.kernels.truncate(n);
        }
        return Ok(format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    Ok(r.text(a.top))
}

pub(crate) fn run(a: &ReportArgs) -> anyhow::Result<()> {
    crate::stdout::print(&execute(a)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;

    fn args(d: &std::path::Path, json: bool, top: Option<usize>) -> ReportArgs {
        ReportArgs { dir: d.to_path_buf(), json, top }
    }

    #[test]
    fn block_run_reports_the_stall_and_no_loss() {
        let d = sample_dir("report-block", false);
        let r = execute(&args(&d.path, false, None)).unwrap();
        assert!(r.contains("aicpu_task/core1 (thread 0): stalled 39.600 us"), "{r}");
        assert!(r.contains("policy Block"), "{r}");
        assert!(r.contains("dropped 0; reconcile ok"), "{r}");
        for k in ["matmul", "add", "relu", "exec%", "head.prop", "tail", "Per core", "PMU"] {
            assert!(r.contains(k), "{k}: {r}");
        }
        assert!(r.contains("static by time: 11.200 us, 3 tasks"), "{r}");
    }

    #[test]
    fn drop_run_reports_dropped_counts_per_lane() {
        let d = sample_dir("report-drop", true);
        let r = execute(&args(&d.path, false, None)).unwrap();
        assert!(r.contains("policy Drop"), "{r}");
        assert!(r.contains("dropped 2; reconcile ok"), "{r}");
        let pmu = r
            .lines()
            .find(|l| l.trim_start().starts_with("pmu/thread1") && !l.contains("stalled"))
            .unwrap();
        assert_eq!(pmu.split_whitespace().nth(4), Some("1"), "{pmu}");
    }

    #[test]
    fn json_is_the_report_model_and_top_cuts_the_kernels() {
        let d = sample_dir("report-json", false);
        let j = execute(&args(&d.path, true, Some(2))).unwrap();
        let r: Report = serde_json::from_str(&j).unwrap();
        assert_eq!(r.kernels.len(), 2);
        assert_eq!(r.kernels[0].kernel, "relu");
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        let cp = &v["critical_path"]["static_by_count"]["tasks"];
        assert_eq!(cp[0]["task_id"], "0x100000003", "{v}");
        assert_eq!(v["format"], analysis::REPORT_FORMAT);
    }
}
