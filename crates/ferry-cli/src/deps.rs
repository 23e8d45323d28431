//! `ferry deps DIR`: the dependency graph of `deps.json` as text, or `--json` (the model of
//! [`ferry_profile::analysis::DepsListing`]; schema in docs/reports.md).
use std::path::PathBuf;

use clap::Args;
use ferry_profile::{analysis, views, Needs};

#[derive(Clone, Debug, Args)]
pub(crate) struct DepsArgs {
    /// Output directory of a run.
    dir: PathBuf,
    /// Print the graph as one JSON object (schema: docs/reports.md).
    #[arg(long)]
    json: bool,
    /// Only this task: its id in hex, as every command prints it (`0x40`, `40` or
    /// `0x0000000000000040`).
    #[arg(long, value_parser = ferry_profile::parse_task_id, value_name = "ID")]
    task: Option<u64>,
    /// Only tasks of this kernel (its name, as the listing shows it).
    #[arg(long, value_name = "NAME")]
    kernel: Option<String>,
    /// Show only the first N tasks (in submission order, after --task/--kernel).
    #[arg(long, value_name = "N")]
    top: Option<usize>,
}

pub(crate) fn execute(a: &DepsArgs) -> anyhow::Result<String> {
    // deps.json, and the swimlane when it is there: never the PMU rows or the payloads.
    let r = crate::analysis::open(&a.dir, &Needs::DEPS)?;
    ferry_profile::progress::step("listing the graph");
    let filter = views::DepsFilter { task: a.task, kernel: a.kernel.clone(), top: a.top };
    filter.check(&r.run)?;
    if a.json {
        let mut l = analysis::deps_listing_filtered(&r.run, &filter)
            .expect("open_run: a required file is read");
        l.outcome = r.outcome.clone();
        return Ok(format!("{}\n", serde_json::to_string_pretty(&l)?));
    }
    Ok(views::deps_text_filtered(&r.run, &filter))
}

pub(crate) fn run(a: &DepsArgs) -> anyhow::Result<()> {
    crate::stdout::print(&ferry_profile::progress::run("deps", || execute(a))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;

    fn args(dir: &std::path::Path, json: bool) -> DepsArgs {
        DepsArgs { dir: dir.to_path_buf(), json, task: None, kernel: None, top: None }
    }

    fn listing(a: &DepsArgs) -> analysis::DepsListing {
        serde_json::from_str(&execute(&DepsArgs { json: true, ..a.clone() }).unwrap()).unwrap()
    }

    #[test]
    fn filters_by_task_in_every_id_form_by_kernel_and_top() {
        let d = sample_dir("deps-filter", false);
        let all = listing(&args(&d.path, true));
        assert_eq!(all.shown, all.tasks);
        let pick = &all.task_list[1];
        let id = ferry_profile::parse_task_id(&pick.task_id).unwrap();
        // One task, named in each form a user meets.
        for form in [format!("{id:#x}"), format!("{id:x}"), format!("{id:#018x}")] {
            let task = Some(ferry_profile::parse_task_id(&form).unwrap());
            let l = listing(&DepsArgs { task, ..args(&d.path, true) });
            assert_eq!(l.task_list, std::slice::from_ref(pick), "{form}");
            assert_eq!((l.shown, l.tasks), (1, all.tasks));
            let t = execute(&DepsArgs { task, ..args(&d.path, false) }).unwrap();
            assert!(t.contains(&format!("tasks shown: 1 of {} (task {id:#x})", all.tasks)), "{t}");
            assert_eq!(t.matches("\n  task ").count(), 1, "{t}");
        }
        // A kernel's tasks, then the first N of them.
        let name = pick.kernel.clone();
        let of: Vec<_> = all.task_list.iter().filter(|t| t.kernel == name).cloned().collect();
        let l = listing(&DepsArgs { kernel: Some(name.clone()), ..args(&d.path, true) });
        assert_eq!(l.task_list, of);
        let l = listing(&DepsArgs { top: Some(2), ..args(&d.path, true) });
        assert_eq!(l.task_list, all.task_list[..2]);
        let l = listing(&DepsArgs { kernel: Some(name), top: Some(1), ..args(&d.path, true) });
        assert_eq!(l.task_list, of[..1]);
        // What the graph does not hold is refused, naming what it holds.
        let e = execute(&DepsArgs { kernel: Some("nope".into()), ..args(&d.path, false) });
        let e = e.unwrap_err().to_string();
        assert!(e.contains("no kernel named `nope`") && e.contains("matmul"), "{e}");
        let e = execute(&DepsArgs { task: Some(0xdead_beef), ..args(&d.path, false) });
        assert!(e.unwrap_err().to_string().contains("task 0xdeadbeef is not in"));
    }

    #[test]
    fn lists_tasks_edges_and_violations() {
        let d = sample_dir("deps", false);
        let t = execute(&args(&d.path, false)).unwrap();
        assert!(t.contains("6 tasks, 7 tensors, 4 edges"), "{t}");
        assert!(t.contains("hb_violation"), "{t}");
        assert!(t.contains("kernel matmul"), "{t}");
        let j = execute(&args(&d.path, true)).unwrap();
        let l: analysis::DepsListing = serde_json::from_str(&j).unwrap();
        assert_eq!((l.tasks, l.tensors, l.edges, l.hb_violations.len()), (6, 7, 4, 1));
        assert_eq!(l.task_list[0].kernel, "matmul");
        assert_eq!(l.task_list[0].succs, ["0x100000004"]);
    }
}
