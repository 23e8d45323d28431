//! `ferry report DIR`: per-kernel time (the most first), per-core utilisation, the PMU sums,
//! stalls, loss and the critical paths of a run, as text or `--json` (the model of
//! [`ferry_profile::analysis::Report`]; schema in docs/reports.md).
use std::path::PathBuf;

use clap::Args;
use ferry_profile::analysis;
use ferry_profile::{Needs, Opened, OpenedRun};

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Output directory of a run (or of a session over several runs, `ferry run --repeat N`:
    /// the runs with their wall times, then one table per kernel over the steady runs).
    dir: PathBuf,
    /// Print the report as one JSON object (schema: docs/reports.md).
    #[arg(long)]
    json: bool,
    /// Show only the first N kernels of the order (text, JSON and CSV).
    #[arg(long, value_name = "N")]
    top: Option<usize>,
    /// Show only the kernel of this name in the per-kernel tables (text, JSON and CSV).
    #[arg(long, value_name = "NAME")]
    kernel: Option<String>,
    /// Print the per-kernel table as CSV (a header, then one line per kernel; times in us).
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// Order the kernels by total device time, average exec, average latency, tasks or name.
    #[arg(long, value_enum, default_value_t = SortArg::Total)]
    sort: SortArg,
    /// In a session, set the first K runs apart as warm-up runs (default: what `ferry run
    /// --warmup` recorded, else none).
    #[arg(long, value_name = "K")]
    warmup: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SortArg {
    /// Total device time, the most first.
    Total,
    /// Average exec per block, the longest first.
    Exec,
    /// Average latency (dispatch to finish) per block, the longest first.
    Latency,
    /// Tasks, the most first.
    Tasks,
    /// Name, alphabetically.
    Name,
}

impl SortArg {
    fn key(self) -> analysis::KernelSort {
        match self {
            SortArg::Total => analysis::KernelSort::Total,
            SortArg::Exec => analysis::KernelSort::Exec,
            SortArg::Latency => analysis::KernelSort::Latency,
            SortArg::Tasks => analysis::KernelSort::Tasks,
            SortArg::Name => analysis::KernelSort::Name,
        }
    }
}

/// The session `runs` (`ferry run --repeat N` with DFX), its runs `opened`: their reports, read
/// as one, warm-up runs set apart (`warmup`, else what the run recorded).
pub(crate) fn session_of(
    runs: &ferry_profile::SessionRuns,
    opened: &[OpenedRun],
    warmup: Option<u32>,
) -> analysis::SessionReport {
    ferry_profile::progress::step("computing the report");
    let reports = opened.iter().map(analysis::report_opened).collect();
    analysis::session_report(runs, reports, warmup.unwrap_or(runs.warmup))
}

/// The report of a session over several runs: the runs' table, then one table per kernel over
/// the steady runs.
fn session(
    a: &ReportArgs,
    runs: &ferry_profile::SessionRuns,
    opened: &[OpenedRun],
) -> anyhow::Result<String> {
    let mut s = session_of(runs, opened, a.warmup);
    for rep in &mut s.reports {
        rep.sort_kernels(a.sort.key());
    }
    if let Some(k) = &a.kernel {
        let names = s.reports.iter().flat_map(|r| r.kernels.iter().map(|x| x.kernel.as_str()));
        ferry_profile::views::known_kernel(k, names)?;
        for rep in &mut s.reports {
            rep.keep_kernel(k);
        }
        if let Some(st) = &mut s.steady {
            st.kernels.retain(|x| x.kernel == *k);
        }
    }
    if a.csv {
        return Ok(s.kernels_csv(a.top));
    }
    if a.json {
        if let Some(n) = a.top {
            for rep in &mut s.reports {
                rep.kernels.truncate(n);
            }
            if let Some(st) = &mut s.steady {
                st.kernels.truncate(n);
            }
        }
        return Ok(format!("{}\n", serde_json::to_string_pretty(&s)?));
    }
    Ok(s.text(&a.dir.display().to_string(), a.top))
}

pub(crate) fn execute(a: &ReportArgs) -> anyhow::Result<String> {
    // A run that never finished: what its native profile sealed before the end.
    if let Some(i) = ferry_profile::open_interrupted(&a.dir)? {
        eprintln!(
            "ferry: the run in {} was interrupted: reporting the chunks it sealed",
            a.dir.display()
        );
        if a.json {
            return Ok(format!("{}\n", serde_json::to_string_pretty(&i)?));
        }
        return Ok(i.text());
    }
    let r = match crate::analysis::open_any(&a.dir, &Needs::REPORT)? {
        Opened::Session(runs, opened) => return session(a, &runs, &opened),
        Opened::Run(r) => *r,
    };
    ferry_profile::progress::step("computing the report");
    let mut r = analysis::report_opened(&r);
    r.sort_kernels(a.sort.key());
    if let Some(k) = &a.kernel {
        ferry_profile::views::known_kernel(k, r.kernels.iter().map(|x| x.kernel.as_str()))?;
        r.keep_kernel(k);
    }
    if a.csv {
        return Ok(r.kernels_csv(a.top));
    }
    if a.json {
        if let Some(n) = a.top {
            r.kernels.truncate(n);
        }
        return Ok(format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    Ok(r.text(a.top))
}

pub(crate) fn run(a: &ReportArgs) -> anyhow::Result<()> {
    crate::stdout::print(&ferry_profile::progress::run("report", || execute(a))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;
    use ferry_profile::analysis::Report;

    fn args(d: &std::path::Path, json: bool, top: Option<usize>) -> ReportArgs {
        ReportArgs {
            dir: d.to_path_buf(),
            json,
            top,
            kernel: None,
            csv: false,
            sort: SortArg::Total,
            warmup: None,
        }
    }

    #[test]
    fn kernel_keeps_only_that_kernels_rows_and_refuses_a_name_that_did_not_run() {
        let d = sample_dir("report-kernel", false);
        let one =
            |json, csv| ReportArgs { kernel: Some("add".into()), csv, ..args(&d.path, json, None) };
        let r: Report = serde_json::from_str(&execute(&one(true, false)).unwrap()).unwrap();
        assert_eq!(r.kernels.iter().map(|k| k.kernel.as_str()).collect::<Vec<_>>(), ["add"]);
        let csv = execute(&one(false, true)).unwrap();
        assert_eq!(csv.lines().count(), 2, "{csv}");
        assert!(csv.lines().nth(1).unwrap().starts_with("add,"), "{csv}");
        let t = execute(&one(false, false)).unwrap();
        assert!(t.contains("\n  add ") && !t.contains("\n  relu "), "{t}");
        let bad = ReportArgs { kernel: Some("nope".into()), ..args(&d.path, false, None) };
        let e = execute(&bad).unwrap_err().to_string();
        assert!(e.contains("no kernel named `nope`") && e.contains("relu"), "{e}");
    }

    #[test]
    fn block_run_reports_the_stall_and_no_loss() {
        let d = sample_dir("report-block", false);
        let r = execute(&args(&d.path, false, None)).unwrap();
        let row = r.lines().find(|l| l.trim_start().starts_with("aicpu_task/core1 ")).unwrap();
        assert!(row.contains(" 39.600 "), "{r}");
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

    #[test]
    fn csv_has_a_header_and_a_line_per_kernel_in_the_chosen_order() {
        let d = sample_dir("report-csv", false);
        let a = |sort, top| ReportArgs {
            dir: d.path.clone(),
            json: false,
            top,
            kernel: None,
            csv: true,
            sort,
            warmup: None,
        };
        let csv = execute(&a(SortArg::Total, None)).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[0].starts_with("kernel,func_id,tasks,blocks,total_us,"), "{csv}");
        let names: Vec<&str> = lines[1..].iter().map(|l| l.split(',').next().unwrap()).collect();
        assert_eq!(names, ["relu", "add", "matmul"], "{csv}");
        assert!(lines.iter().all(|l| l.split(',').count() == 13), "{csv}");
        let by_name = execute(&a(SortArg::Name, Some(2))).unwrap();
        let names: Vec<&str> =
            by_name.lines().skip(1).map(|l| l.split(',').next().unwrap()).collect();
        assert_eq!(names, ["add", "matmul"], "{by_name}");
        let by_tasks = execute(&a(SortArg::Tasks, Some(1))).unwrap();
        assert!(by_tasks.lines().nth(1).unwrap().starts_with("relu,"), "{by_tasks}");
    }

    #[test]
    fn the_report_opens_with_a_verdict_and_folds_quiet_lanes() {
        let d = sample_dir("report-verdict", false);
        let r = execute(&args(&d.path, false, None)).unwrap();
        let v = r.lines().nth(1).unwrap();
        assert!(v.starts_with("verdict: cores "), "{r}");
        for part in ["critical path: compute ", "loss: none (", "1 lane stalled for 39.600 us"] {
            assert!(v.contains(part), "{part}: {v}");
        }
        // The stalled lane has its row; the lanes that lost and waited for nothing are one line.
        assert!(
            r.contains("aicpu_task/core1") && r.contains("13 other lanes: every record"),
            "{r}"
        );
        assert!(!r.contains("aicore_task/core0 "), "{r}");
    }
}
