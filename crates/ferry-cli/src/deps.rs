//! `ferry deps DIR`: the dependency graph of `deps.json` as text.
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use ferry_dfx::output::{self, views};

#[derive(Debug, Args)]
pub(crate) struct DepsArgs {
    /// Output directory of a run.
    dir: PathBuf,
}

pub(crate) fn execute(a: &DepsArgs) -> anyhow::Result<String> {
    let run = output::read_run(&a.dir).with_context(|| format!("reading {}", a.dir.display()))?;
    Ok(views::deps_text(&run))
}

pub(crate) fn run(a: &DepsArgs) -> anyhow::Result<()> {
    print!("{}", execute(a)?);
    Ok(())
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
