//! `ferry deps DIR`: the dependency graph of `deps.json` as text.
use std::path::PathBuf;

use clap::Args;
use ferry_profile::{views, Needs};

#[derive(Debug, Args)]
pub(crate) struct DepsArgs {
    /// Output directory of a run.
    dir: PathBuf,
}

pub(crate) fn execute(a: &DepsArgs) -> anyhow::Result<String> {
    // deps.json, and the swimlane when it is there: never the PMU rows or the payloads.
    let r = crate::analysis::open(&a.dir, &Needs::DEPS)?;
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
        let t = execute(&DepsArgs { dir: d.path.clone() }).unwrap();
        assert!(t.contains("6 tasks, 7 tensors, 4 edges"), "{t}");
        assert!(t.contains("hb_violation"), "{t}");
        assert!(t.contains("kernel matmul"), "{t}");
    }
}
