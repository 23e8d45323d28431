//! `ferry view DIR`: one self-contained HTML swimlane (no network, no external scripts).
use std::path::PathBuf;

use clap::Args;
use ferry_profile::{views, Needs};

/// Default file name of the page.
pub(crate) use ferry_profile::VIEW_FILE;

#[derive(Debug, Args)]
pub(crate) struct ViewArgs {
    /// Output directory of a run.
    dir: PathBuf,
    /// Where this command writes its output: the page (default: DIR/swimlane.html).
    #[arg(short, long, value_name = "FILE")]
    out: Option<PathBuf>,
}

pub(crate) fn execute(a: &ViewArgs) -> anyhow::Result<String> {
    let r = crate::analysis::open(&a.dir, &Needs::TRACE)?;
    let out = a.out.clone().unwrap_or_else(|| a.dir.join(VIEW_FILE));
    crate::analysis::write_output(&r, &out, views::swimlane_html(&r.run).as_bytes())?;
    Ok(format!("{}\n", out.display()))
}

pub(crate) fn run(a: &ViewArgs) -> anyhow::Result<()> {
    crate::stdout::print(&execute(a)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;

    #[test]
    fn page_is_self_contained_and_shows_the_stall() {
        let d = sample_dir("view", false);
        execute(&ViewArgs { dir: d.path.clone(), out: None }).unwrap();
        let html = std::fs::read_to_string(d.path.join(VIEW_FILE)).unwrap();
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(!html.contains("<script src"));
        assert!(html.contains("aicpu_task/core1 stall"));
        assert!(html.contains("core0 (aic)"));
    }
}
