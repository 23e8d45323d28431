//! `ferry deps DIR`: the dependency graph of `deps.json` as text, or `--json` (the model of
//! [`ferry_profile::analysis::DepsListing`]; schema in docs/reports.md).
use std::path::PathBuf;

use clap::Args;
use ferry_profile::{analysis, views, Needs};

#[derive(Debug, Args)]
pub(crate) struct DepsArgs {
    /// Output directory of a run.
    dir: PathBuf,
    /// Print the graph as one JSON object (schema: docs/reports.md).
    #[arg(long)]
    json: bool,
}

pub(crate) fn execute(a: &DepsArgs) -> anyhow::Result<String> {
    // deps.json, and the swimlane when it is there: never the PMU rows or the payloads.
    let r = crate::analysis::open(&a.dir, &Needs::DEPS)?;
    if a.json {
        let mut l = analysis::deps_listing(&r.run).expect("open_run: a required file is read");
        l.outcome = r.outcome.clone();
        return Ok(format!("{}\n", serde_json::to_string_pretty(&l)?));
    }
    Ok(views::deps_text(&r.run))
}

pub(crate) fn run(a: &DepsArgs) -> anyhow::Result<()> {
    crate::stdout::print(&execute(a)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;

    #[test]
    fn lists_tasks_edges_and_violations() {
        let d = sample_dir("deps", false);
        let t = execute(&DepsArgs { dir: d.path.clone(), json: false }).unwrap();
        assert!(t.contains("6 tasks, 7 tensors, 4 edges"), "{t}");
        assert!(t.contains("hb_violation"), "{t}");
        assert!(t.contains("kernel matmul"), "{t}");
        let j = execute(&DepsArgs { dir: d.path.clone(), json: true }).unwrap();
        let l: analysis::DepsListing = serde_json::from_str(&j).unwrap();
        assert_eq!((l.tasks, l.tensors, l.edges, l.hb_violations.len()), (6, 7, 4, 1));
        assert_eq!(l.task_list[0].kernel, "matmul");
        assert_eq!(l.task_list[0].succs, ["0x100000004"]);
    }
}
