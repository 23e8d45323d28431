//! `ferry view DIR`: one self-contained HTML swimlane (no network, no external scripts); what it
//! wrote as a line of text or, with `--json`, one JSON object (schema in docs/reports.md).
use std::path::PathBuf;

use clap::Args;
use ferry_profile::{views, Needs, Opened};

/// Default file name of the page.
pub(crate) use ferry_profile::VIEW_FILE;

#[derive(Debug, Args)]
pub(crate) struct ViewArgs {
    /// Output directory of a run, or of a session over several runs (`ferry run --repeat N`:
    /// one page spanning the runs, with a row of the runs and the gaps between them).
    dir: PathBuf,
    /// Where this command writes its output: the page (default: DIR/swimlane.html).
    #[arg(short, long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print what was written as one JSON object: the page, its size, what it draws and how the
    /// run ended (schema: docs/reports.md).
    #[arg(long)]
    json: bool,
}

/// A session's page: its runs read as one model, the session's report under it.
fn session(
    a: &ViewArgs,
    runs: &ferry_profile::SessionRuns,
    opened: Vec<ferry_profile::OpenedRun>,
) -> anyhow::Result<String> {
    let report = crate::report::session_of(runs, &opened, None);
    let text = report.text(&a.dir.display().to_string(), None);
    ferry_profile::progress::step("drawing the page");
    let mut models = Vec::with_capacity(opened.len());
    let mut first = None;
    for r in opened {
        models.push(r.run.clone());
        first.get_or_insert(r);
    }
    let first = first.expect("open_session: at least one run");
    let model = ferry_profile::session_model(models, report.warmup);
    let failed: Vec<String> = report
        .runs
        .iter()
        .filter_map(|r| Some(format!("{}: {}", r.dir, r.outcome.as_ref()?.failure()?)))
        .collect();
    let failure = (!failed.is_empty()).then(|| failed.join("; "));
    let page = views::swimlane_html_reporting(&model, failure.as_deref(), &text);
    let out = match &a.out {
        Some(p) => {
            crate::analysis::write_output(&first, p, page.as_bytes())?;
            p.clone()
        }
        None => crate::analysis::write_in(&first, &a.dir, VIEW_FILE, page.as_bytes())?,
    };
    if a.json {
        let tasks = model.tasks();
        let v = serde_json::json!({
            "written": out.display().to_string(),
            "bytes": page.len(),
            "runs": model.meta.session.len(),
            "warmup": report.warmup,
            "blocks": tasks.len(),
            "cores": model.meta.num_cores(),
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    Ok(format!("{}\n", out.display()))
}

pub(crate) fn execute(a: &ViewArgs) -> anyhow::Result<String> {
    let r = match crate::analysis::open_any(&a.dir, &Needs::TRACE)? {
        Opened::Session(runs, opened) => return session(a, &runs, opened),
        Opened::Run(r) => *r,
    };
    ferry_profile::progress::step("drawing the page");
    let page = views::swimlane_html_of(&r.run, r.failure());
    ferry_profile::progress::step(format!("writing the page ({:.1} MB)", page.len() as f64 / 1e6));
    let out = match &a.out {
        Some(p) => {
            crate::analysis::write_output(&r, p, page.as_bytes())?;
            p.clone()
        }
        None => crate::analysis::write_in_run(&r, VIEW_FILE, page.as_bytes())?,
    };
    if a.json {
        let tasks = r.run.tasks();
        let distinct: std::collections::HashSet<u64> = tasks.iter().map(|t| t.task_id).collect();
        let cores: std::collections::BTreeSet<u32> = tasks.iter().map(|t| t.core).collect();
        let v = serde_json::json!({
            "written": out.display().to_string(),
            "bytes": page.len(),
            "tasks": distinct.len(),
            "blocks": tasks.len(),
            "cores": r.run.meta.num_cores(),
            "busy_cores": cores.len(),
            "outcome": r.outcome,
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    Ok(format!("{}\n", out.display()))
}

pub(crate) fn run(a: &ViewArgs) -> anyhow::Result<()> {
    crate::stdout::print(&ferry_profile::progress::run("view", || execute(a))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;

    #[test]
    fn page_is_self_contained_and_shows_the_stall() {
        let d = sample_dir("view", false);
        execute(&ViewArgs { dir: d.path.clone(), out: None, json: false }).unwrap();
        let html = std::fs::read_to_string(d.path.join(VIEW_FILE)).unwrap();
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(!html.contains("<script src"));
        assert!(html.contains("aicpu_task/core1 stall"));
        assert!(html.contains("core0 (aic)"));
    }

    #[test]
    fn json_says_what_was_written_and_drawn() {
        let d = sample_dir("view-json", false);
        let page = d.path.join("page.html");
        let a = ViewArgs { dir: d.path.clone(), out: Some(page.clone()), json: true };
        let v: serde_json::Value = serde_json::from_str(&execute(&a).unwrap()).unwrap();
        assert_eq!(v["written"], page.display().to_string());
        assert_eq!(v["bytes"], std::fs::metadata(&page).unwrap().len());
        let run = ferry_profile::read_run(&d.path).unwrap();
        let tasks = run.tasks();
        let distinct: std::collections::HashSet<u64> = tasks.iter().map(|t| t.task_id).collect();
        assert_eq!(v["tasks"], distinct.len(), "{v}");
        assert_eq!(v["blocks"], tasks.len(), "{v}");
        assert_eq!(v["cores"], run.meta.num_cores(), "{v}");
        assert!(v["busy_cores"].as_u64().unwrap() <= v["cores"].as_u64().unwrap(), "{v}");
        assert_eq!(v["outcome"], serde_json::Value::Null, "no manifest: not recorded");
    }
}
