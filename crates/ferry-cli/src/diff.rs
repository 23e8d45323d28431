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
    if a.json {
        if let Some(n) = a.top {
            d.kernels.truncate(n);
        }
        return Ok(format!("{}\n", serde_json::to_string_pretty(&d)?));
    }
    Ok(d.text(a.top))
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
}
