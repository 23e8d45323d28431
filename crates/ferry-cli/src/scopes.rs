//! `ferry scopes DIR`: a self-contained HTML plot of scope occupancy, coloured by risk.
use std::path::PathBuf;

use clap::Args;
use ferry_profile::{views, Needs, SCOPES_DIR};

/// Default file name of the page (inside DIR/scope_stats/).
pub(crate) const SCOPES_HTML: &str = "scope_stats.html";

#[derive(Debug, Args)]
pub(crate) struct ScopesArgs {
    /// Output directory of a run (holds scope_stats/).
    dir: PathBuf,
    /// Page to write (default: DIR/scope_stats/scope_stats.html).
    #[arg(long, short)]
    out: Option<PathBuf>,
}

pub(crate) fn execute(a: &ScopesArgs) -> anyhow::Result<String> {
    let r = crate::analysis::open(&a.dir, &Needs::SCOPES)?;
    let s = r.run.scopes.as_ref().expect("open_run: a required file is read or an error");
    let out = a.out.clone().unwrap_or_else(|| a.dir.join(SCOPES_DIR).join(SCOPES_HTML));
    crate::analysis::write_output(&r, &out, views::scopes_html(s).as_bytes())?;
    let (usage, unmatched) = views::scope_usage(s);
    let worst = usage.iter().map(|u| u.worst()).fold(0.0, f64::max);
    Ok(format!(
        "{}: {}, {unmatched} unmatched records, worst {:.1}% ({})\n",
        out.display(),
        views::plural(usage.len() as u64, "scope", "scopes"),
        worst * 100.0,
        views::risk_class(worst)
    ))
}

pub(crate) fn run(a: &ScopesArgs) -> anyhow::Result<()> {
    crate::stdout::print(&execute(a)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;

    #[test]
    fn writes_a_risk_coloured_page() {
        let d = sample_dir("scopes", false);
        let msg = execute(&ScopesArgs { dir: d.path.clone(), out: None }).unwrap();
        assert!(msg.contains("2 scopes, 0 unmatched records") && msg.contains("danger"), "{msg}");
        let html = std::fs::read_to_string(d.path.join("scope_stats").join(SCOPES_HTML)).unwrap();
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(html.contains("#d62728")); // the danger colour
    }
}
