//! `ferry scopes DIR`: a self-contained HTML plot of scope occupancy, coloured by risk; what it
//! wrote as a line of text or, with `--json`, one JSON object (schema in docs/reports.md).
use std::path::PathBuf;

use clap::Args;
use ferry_profile::{views, Needs, SCOPES_DIR};

/// Default file name of the page (inside DIR/scope_stats/).
pub(crate) use ferry_profile::SCOPES_HTML;

#[derive(Debug, Args)]
pub(crate) struct ScopesArgs {
    /// Output directory of a run (holds scope_stats/).
    dir: PathBuf,
    /// Where this command writes its output: the page (default:
    /// DIR/scope_stats/scope_stats.html).
    #[arg(short, long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print what was written as one JSON object: the page and each scope's worst occupancy.
    #[arg(long)]
    json: bool,
}

pub(crate) fn execute(a: &ScopesArgs) -> anyhow::Result<String> {
    let r = crate::analysis::open(&a.dir, &Needs::SCOPES)?;
    let s = r.run.scopes.as_ref().expect("open_run: a required file is read or an error");
    if s.records.is_empty() {
        // Nothing to plot: said in one line, no empty page written.
        let why = "ScopeStats recorded no scope: the run's graph opened none (a workload's \
                   `scope` bodies and the examples' scoped chunks open scopes; the storm opens \
                   none), so there is nothing to plot and no page was written";
        if a.json {
            let v = serde_json::json!({
                "written": null, "scopes": [], "unmatched_records": 0, "worst": 0.0,
                "risk": null, "note": why, "outcome": r.outcome,
            });
            return Ok(format!("{}\n", serde_json::to_string_pretty(&v)?));
        }
        return Ok(format!("{}: {why}\n", a.dir.display()));
    }
    let page = views::scopes_html(s);
    let out = match &a.out {
        Some(p) => {
            crate::analysis::write_output(&r, p, page.as_bytes())?;
            p.clone()
        }
        None => crate::analysis::write_in_run(
            &r,
            &format!("{SCOPES_DIR}/{SCOPES_HTML}"),
            page.as_bytes(),
        )?,
    };
    let (usage, unmatched) = views::scope_usage(s);
    let worst = usage.iter().map(|u| u.worst()).fold(0.0, f64::max);
    if a.json {
        let scopes: Vec<serde_json::Value> = usage
            .iter()
            .map(|u| {
                let at = s.names.get(&u.site).map(|l| l.at.as_str()).filter(|a| !a.is_empty());
                serde_json::json!({
                    "name": u.name, "site": u.site, "at": at, "ring": u.ring, "depth": u.depth,
                    "worst": u.worst(), "risk": views::risk_class(u.worst()),
                })
            })
            .collect();
        let v = serde_json::json!({
            "written": out.display().to_string(),
            "scopes": scopes,
            "unmatched_records": unmatched,
            "worst": worst,
            "risk": views::risk_class(worst),
            "outcome": r.outcome,
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    Ok(format!(
        "{}: {}, {unmatched} unmatched records, worst {:.1}% ({})\n",
        out.display(),
        views::plural(usage.len() as u64, "scope", "scopes"),
        worst * 100.0,
        views::risk_class(worst)
    ))
}

pub(crate) fn run(a: &ScopesArgs) -> anyhow::Result<()> {
    crate::stdout::print(&ferry_profile::progress::run("scopes", || execute(a))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;

    #[test]
    fn writes_a_risk_coloured_page() {
        let d = sample_dir("scopes", false);
        let msg = execute(&ScopesArgs { dir: d.path.clone(), out: None, json: false }).unwrap();
        assert!(msg.contains("2 scopes, 0 unmatched records") && msg.contains("danger"), "{msg}");
        let html = std::fs::read_to_string(d.path.join("scope_stats").join(SCOPES_HTML)).unwrap();
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(html.contains("#d62728")); // the danger colour
        let j = execute(&ScopesArgs { dir: d.path.clone(), out: None, json: true }).unwrap();
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["scopes"].as_array().unwrap().len(), 2, "{v}");
        assert_eq!(
            (v["unmatched_records"].as_u64(), v["risk"].as_str()),
            (Some(0), Some("danger"))
        );
        assert!(v["written"].as_str().unwrap().ends_with(SCOPES_HTML), "{v}");
    }

    #[test]
    fn a_run_that_opened_no_scope_says_so_and_writes_no_page() {
        let d = sample_dir("scopes-none", false);
        let f = d.path.join("scope_stats").join(ferry_profile::SCOPES_FILE);
        // The header line alone: the subsystem was on, the graph opened no scope.
        let text = std::fs::read_to_string(&f).unwrap();
        std::fs::write(&f, format!("{}\n", text.lines().next().unwrap())).unwrap();
        let _ = std::fs::remove_file(d.path.join(ferry_profile::MANIFEST_FILE));
        let msg = execute(&ScopesArgs { dir: d.path.clone(), out: None, json: false }).unwrap();
        assert!(msg.contains("recorded no scope") && msg.contains("no page was written"), "{msg}");
        assert!(!d.path.join("scope_stats").join(SCOPES_HTML).exists());
        let j = execute(&ScopesArgs { dir: d.path.clone(), out: None, json: true }).unwrap();
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert!(v["written"].is_null() && v["note"].as_str().is_some(), "{v}");
    }
}
