//! `ferry diff A B`: run B compared with run A — setup differences first, then wall time,
//! tasks, per-kernel time (the biggest regression first), critical paths, stalls and loss — as
//! text or `--json` (the model of [`ferry_profile::analysis::Diff`]); two sessions over several
//! runs (`ferry run --repeat N`) compare their steady states, per kernel with the runs' spread
//! ([`ferry_profile::analysis::SessionDiff`]). Schemas in docs/reports.md.
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use ferry_profile::{analysis, Needs, Opened};

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// Output directory of the baseline run or session (A).
    a: PathBuf,
    /// Output directory of the run or session compared with it (B).
    b: PathBuf,
    /// Print the comparison as one JSON object (schema: docs/reports.md).
    #[arg(long)]
    json: bool,
    /// Show only the first N kernels (the biggest regressions).
    #[arg(long, value_name = "N")]
    top: Option<usize>,
    /// Sessions only: set each session's first K runs apart as warm-up runs (default: what
    /// `ferry run --warmup` recorded).
    #[arg(long, value_name = "K")]
    warmup: Option<u32>,
}

/// A run's report as a session of one run, or a session's.
fn as_session(o: &Opened, warmup: Option<u32>) -> analysis::SessionReport {
    match o {
        Opened::Session(runs, opened) => crate::report::session_of(runs, opened, warmup),
        Opened::Run(r) => {
            let r = analysis::report_opened(r);
            analysis::session_report(&ferry_profile::SessionRuns::default(), vec![r], 0)
        }
    }
}

/// What else set the runs apart, from their summaries: threads, cores, variant, path.
fn add_summaries(d: &mut analysis::Diff, a: &std::path::Path, b: &std::path::Path) {
    if let (Some(sa), Some(sb)) = (summary_of(a), summary_of(b)) {
        d.add_setup("aicpu_threads", &sa.aicpu_threads.to_string(), &sb.aicpu_threads.to_string());
        d.add_setup("aic", &sa.aic.to_string(), &sb.aic.to_string());
        d.add_setup("aiv", &sa.aiv.to_string(), &sb.aiv.to_string());
        d.add_setup("variant", &sa.variant, &sb.variant);
        d.add_setup("path", &sa.path, &sb.path);
    }
}

/// Two sessions (or a session and a run): their steady states compared, setup first.
fn sessions(a: &DiffArgs, oa: &Opened, ob: &Opened) -> anyhow::Result<String> {
    let sa = as_session(oa, a.warmup);
    let sb = as_session(ob, a.warmup);
    // The setup: the first steady runs' reports compared, and the runs' summaries.
    let first = |s: &analysis::SessionReport| {
        s.reports.get(s.warmup as usize).or(s.reports.last()).cloned()
    };
    let setup = match (first(&sa), first(&sb)) {
        (Some(ra), Some(rb)) => {
            let mut d = analysis::diff(&ra, &rb);
            add_summaries(&mut d, &a.a, &a.b);
            d.setup
        }
        _ => Vec::new(),
    };
    let mut d = analysis::session_diff(&sa, &sb, setup);
    if a.json {
        if let Some(n) = a.top {
            d.kernels.truncate(n);
        }
        return Ok(format!("{}\n", serde_json::to_string_pretty(&d)?));
    }
    Ok(d.text(a.top))
}

pub(crate) fn execute(a: &DiffArgs) -> anyhow::Result<String> {
    let open = |dir: &std::path::Path, which: &str| {
        crate::analysis::open_any(dir, &Needs::REPORT)
            .with_context(|| format!("run {which} ({})", dir.display()))
    };
    let (oa, ob) = (open(&a.a, "A")?, open(&a.b, "B")?);
    let (ra, rb) = match (&oa, &ob) {
        (Opened::Run(ra), Opened::Run(rb)) => (ra, rb),
        _ => return sessions(a, &oa, &ob),
    };
    ferry_profile::progress::step("comparing the runs");
    let mut d = analysis::diff(&analysis::report_opened(ra), &analysis::report_opened(rb));
    add_summaries(&mut d, &a.a, &a.b);
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
fn summary_of(dir: &std::path::Path) -> Option<ferry_profile::SummaryJson> {
    let limit = ferry_profile::MAX_SMALL_FILE_BYTES;
    [dir.to_path_buf(), dir.join("..")].iter().find_map(|d| {
        let bytes = ferry_fs::read_input(&d.join(ferry_profile::SUMMARY_FILE), limit).ok()?;
        serde_json::from_slice(&bytes).ok()
    })
}

pub(crate) fn run(a: &DiffArgs) -> anyhow::Result<()> {
    crate::stdout::print(&ferry_profile::progress::run("diff", || execute(a))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;

    #[test]
    fn a_run_against_itself_has_no_delta_and_a_missing_run_is_named() {
        let d = sample_dir("diff-self", false);
        let args =
            |json| DiffArgs { a: d.path.clone(), b: d.path.clone(), json, top: None, warmup: None };
        let t = execute(&args(false)).unwrap();
        assert!(t.contains("no kernel regressed") && t.contains("(+0.000 us)"), "{t}");
        let v: analysis::Diff = serde_json::from_str(&execute(&args(true)).unwrap()).unwrap();
        assert!(v.is_zero(), "{v:?}");
        let e = execute(&DiffArgs {
            a: d.path.clone(),
            b: d.path.join("nope"),
            json: false,
            top: None,
            warmup: None,
        })
        .unwrap_err();
        assert!(format!("{e:#}").starts_with("run B ("), "{e:#}");
    }

    #[test]
    fn a_changed_setup_is_said_first() {
        let da = sample_dir("diff-setup-a", false);
        let db = sample_dir("diff-setup-b", false);
        let summary = |threads: u32| {
            let mut s = ferry_profile::SummaryJson::new("a2a3", threads, 1, 2, "device", "direct");
            s.runs.clear();
            serde_json::to_vec(&s).unwrap()
        };
        std::fs::write(da.path.join(ferry_profile::SUMMARY_FILE), summary(3)).unwrap();
        std::fs::write(db.path.join(ferry_profile::SUMMARY_FILE), summary(2)).unwrap();
        let t = execute(&DiffArgs {
            a: da.path.clone(),
            b: db.path.clone(),
            json: false,
            top: None,
            warmup: None,
        })
        .unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].contains("set up differently"), "{t}");
        assert_eq!(lines[2].trim(), "aicpu_threads: 3 -> 2", "{t}");
        let v: analysis::Diff = serde_json::from_str(
            &execute(&DiffArgs {
                a: da.path.clone(),
                b: db.path.clone(),
                json: true,
                top: None,
                warmup: None,
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!(v.setup.len(), 1, "{v:?}");
    }
}
