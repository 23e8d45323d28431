//! `ferry report DIR`: per-kernel timing, stalled lanes and loss accounting.
use std::path::PathBuf;

use clap::Args;
use ferry_profile::{views, Needs};

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Output directory of a run.
    dir: PathBuf,
}

pub(crate) fn execute(a: &ReportArgs) -> anyhow::Result<String> {
    let r = crate::analysis::open(&a.dir, &Needs::REPORT)?;
    Ok(views::report(&r.run))
}

pub(crate) fn run(a: &ReportArgs) -> anyhow::Result<()> {
    crate::stdout::print(&execute(a)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;

    #[test]
    fn block_run_reports_the_stall_and_no_loss() {
        let d = sample_dir("report-block", false);
        let r = execute(&ReportArgs { dir: d.path.clone() }).unwrap();
        assert!(r.contains("aicpu_task/core1 (thread 0): stalled 39.600 us"), "{r}");
        assert!(r.contains("policy Block"), "{r}");
        assert!(r.contains("dropped 0; reconcile ok"), "{r}");
        for k in ["matmul", "add", "relu", "exec%", "head.prop", "tail"] {
            assert!(r.contains(k), "{k}: {r}");
        }
    }

    #[test]
    fn drop_run_reports_dropped_counts_per_lane() {
        let d = sample_dir("report-drop", true);
        let r = execute(&ReportArgs { dir: d.path.clone() }).unwrap();
        assert!(r.contains("policy Drop"), "{r}");
        assert!(r.contains("dropped 2; reconcile ok"), "{r}");
        let pmu = r
            .lines()
            .find(|l| l.trim_start().starts_with("pmu/thread1") && !l.contains("stalled"))
            .unwrap();
        assert_eq!(pmu.split_whitespace().nth(4), Some("1"), "{pmu}");
    }
}
