//! `ferry diff A B`: run B compared with run A — wall time, tasks, per-kernel time (the biggest
//! regression first), critical paths, stalls and loss — as text or `--json` (the model of
//! [`ferry_profile::analysis::Diff`]; schema in docs/reports.md).
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use ferry_profile::analysis;

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// Output directory of the baseline run (A).
    a: PathBuf,
    /// Output directory of the run compared with it (B).
    b: PathBuf,
    /// Print the comparison as one JSON object (schema: docs/reports.md).
    #[arg(long)]
    json: bool,
    /// Show only the first N kernels (the biggest regressions).
    #[arg(long, value_name = "N")]
    top: Option<usize>,
}

pub(crate) fn execute(a: &DiffArgs) -> anyhow::Result<String> {
    let ra = crate::report::build(&a.a).with_context(|| format!("run A ({})", a.a.display()))?;
    let rb = crate::report::build(&a.b).with_context(|| format!("run B ({})", a.b.display()))?;
    let mut d = analysis::diff(&ra, &rb);
    // What else set the runs apart, from their summaries: threads, cores, variant, path.
    if let (Some(sa), Some(sb)) = (summary_of(&a.a), summary_of(&a.b)) {
        d.add_setup("aicpu_threads", &sa.aicpu_threads.to_string(), &sb.aicpu_threads.to_string());
        d.add_setup("aic", &sa.aic.to_string(), &sb.aic.to_string());
        d.add_setup("aiv", &sa.aiv.to_string(), &sb.aiv.to_string());
        d.add_setup("variant", &sa.variant, &sb.variant);
        d.add_setup("path", &sa.path, &sb.path);
    }
    if a.json {
        if let Some(n) = a.top {
            d.kernels.truncate(n);
        }
        return Ok(format!("{}\n", serde_json::to_string_pretty(&d)?));
    }
    Ok(d.text(a.top))
}

/// The run summary (`summary.json`) of the run in `dir`, or of the run whose example
/// subdirectory `dir` is; `None` when there is none that reads (a failed run writes none).
fn summary_of(dir: &std::path::Path) -> Option<ferry_profile::RunSummary> {
    let limit = ferry_profile::MAX_SMALL_FILE_BYTES;
    [dir.to_path_buf(), dir.join("..")].iter().find_map(|d| {
        let bytes = ferry_fs::read_input(&d.join(ferry_profile::SUMMARY_FILE), limit).ok()?;
        serde_json::from_slice(&bytes).ok()
    })
}

pub(crate) fn run(a: &DiffArgs) -> anyhow::Result<()> {
    crate::stdout::print(&execute(a)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;

    #[test]
    fn a_run_against_itself_has_no_delta_and_a_missing_run_is_named() {
        let d = sample_dir("diff-self", false);
        let args = |json| DiffArgs { a: d.path.clone(), b: d.path.clone(), json, top: None };
        let t = execute(&args(false)).unwrap();
        assert!(t.contains("no kernel regressed") && t.contains("(+0.000 us)"), "{t}");
        let v: analysis::Diff = serde_json::from_str(&execute(&args(true)).unwrap()).unwrap();
        assert!(v.is_zero(), "{v:?}");
        let e = execute(&DiffArgs {
            a: d.path.clone(),
            b: d.path.join("nope"),
            json: false,
            top: None,
        })
        .unwrap_err();
        assert!(format!("{e:#}").starts_with("run B ("), "{e:#}");
    }

    #[test]
    fn a_changed_setup_is_said_first() {
        let da = sample_dir("diff-setup-a", false);
        let db = sample_dir("diff-setup-b", false);
        let summary = |threads: u32| {
            let mut s = ferry_profile::RunSummary::new("a2a3", threads, 1, 2, "device", "direct");
            s.runs.clear();
            serde_json::to_vec(&s).unwrap()
        };
        std::fs::write(da.path.join(ferry_profile::SUMMARY_FILE), summary(3)).unwrap();
        std::fs::write(db.path.join(ferry_profile::SUMMARY_FILE), summary(2)).unwrap();
        let t =
            execute(&DiffArgs { a: da.path.clone(), b: db.path.clone(), json: false, top: None })
                .unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].contains("set up differently"), "{t}");
        assert_eq!(lines[2].trim(), "aicpu_threads: 3 -> 2", "{t}");
        let v: analysis::Diff = serde_json::from_str(
            &execute(&DiffArgs { a: da.path.clone(), b: db.path.clone(), json: true, top: None })
                .unwrap(),
        )
        .unwrap();
        assert_eq!(v.setup.len(), 1, "{v:?}");
    }
}
