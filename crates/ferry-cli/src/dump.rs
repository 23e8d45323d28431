//! `ferry dump list|export|replay DIR`: list, filter and export the argument dump; replay a task
//! from a dump with payloads and compare its outputs.
use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand};
use ferry_profile::{
    self as output, analysis, views, views::DumpFilter, Needs, ARG_ROLES, ARG_STAGES,
};

#[derive(Debug, Args)]
pub(crate) struct DumpArgs {
    #[command(subcommand)]
    action: DumpAction,
}

/// Which arguments: every filter is optional and they combine.
#[derive(Debug, Args)]
struct Filter {
    /// Only this task: its id in hex, as every command prints it (`0x40` or `40`).
    #[arg(long, value_parser = ferry_profile::parse_task_id, value_name = "ID")]
    task: Option<u64>,
    /// Only this role (INPUT, OUTPUT, INOUT, SCALAR; any case).
    #[arg(long, value_parser = parse_role)]
    role: Option<String>,
    /// Only this stage (before_dispatch, after_completion).
    #[arg(long, value_parser = parse_stage)]
    stage: Option<String>,
    /// Only tasks of this kernel: its name (`add_scalar`) or function id (a decimal number).
    #[arg(long, visible_alias = "kernel", value_name = "KERNEL")]
    func: Option<String>,
    /// Only this argument index.
    #[arg(long)]
    arg: Option<u32>,
}

#[derive(Debug, Subcommand)]
enum DumpAction {
    /// List the (filtered) arguments with their first values.
    List {
        /// Output directory of a run (holds args_dump/).
        dir: PathBuf,
        #[command(flatten)]
        filter: Filter,
        /// Print the arguments as one JSON object (schema: docs/reports.md).
        #[arg(long)]
        json: bool,
    },
    /// Write each (filtered) argument as text (+ raw .bin payload) into a folder.
    Export {
        /// Output directory of a run (holds args_dump/).
        dir: PathBuf,
        /// Where this command writes its output: the folder to write into.
        #[arg(short, long, value_name = "DIR")]
        out: PathBuf,
        #[command(flatten)]
        filter: Filter,
    },
    /// Re-runs task ID on the host from its dumped inputs (a dump with their payloads:
    /// `--dump-args 2`, or 3 with the task's tensors marked with dump(...)) and compares every
    /// output with the dumped one, bit for bit.
    Replay {
        /// Output directory of a run (holds args_dump/).
        dir: PathBuf,
        /// The task to replay: its id in hex, as every command prints it (`0x40` or `40`).
        #[arg(long, value_parser = ferry_profile::parse_task_id, value_name = "ID")]
        task: u64,
    },
}

/// `s` if it is one of `set` (any case), else the valid values.
fn one_of(s: &str, set: &[&str]) -> Result<String, String> {
    match set.iter().find(|v| v.eq_ignore_ascii_case(s)) {
        Some(v) => Ok((*v).to_string()),
        None => Err(format!("`{s}` is not one of {}", set.join(", "))),
    }
}

fn parse_role(s: &str) -> Result<String, String> {
    one_of(s, &ARG_ROLES)
}

fn parse_stage(s: &str) -> Result<String, String> {
    one_of(s, &ARG_STAGES)
}

pub(crate) fn execute(a: &DumpArgs) -> anyhow::Result<String> {
    let dir = match &a.action {
        DumpAction::List { dir, .. } | DumpAction::Export { dir, .. } => dir,
        DumpAction::Replay { dir, .. } => dir,
    };
    let by_name = match &a.action {
        DumpAction::List { filter: f, .. } | DumpAction::Export { filter: f, .. } => {
            f.func.as_deref().is_some_and(|k| k.parse::<i32>().is_err())
        }
        DumpAction::Replay { .. } => false,
    };
    // A kernel named by name needs the names: the swimlane's name map, read when there.
    let needs = if by_name {
        Needs { swimlane: ferry_profile::Need::Optional, ..Needs::DUMP }
    } else {
        Needs::DUMP
    };
    let r = crate::analysis::open(dir, &needs)?;
    let dump = r.run.args.as_ref().expect("open_run: a required file is read or an error");
    let func = |k: &Option<String>| -> anyhow::Result<Option<i32>> {
        let Some(k) = k else { return Ok(None) };
        if let Ok(id) = k.parse() {
            return Ok(Some(id));
        }
        match r.run.kernels.iter().find(|(_, n)| n.as_str() == k) {
            Some((&id, _)) => Ok(Some(id)),
            None => {
                let known: Vec<&str> = r.run.kernels.values().map(String::as_str).collect();
                bail!(
                    "no kernel named `{k}` in this run (its kernels: {})",
                    if known.is_empty() { "none named".to_string() } else { known.join(", ") }
                )
            }
        }
    };
    let filter = |f: &Filter| -> anyhow::Result<DumpFilter> {
        Ok(DumpFilter {
            task: f.task,
            role: f.role.clone(),
            stage: f.stage.clone(),
            func: func(&f.func)?,
            arg_index: f.arg,
        })
    };
    match &a.action {
        DumpAction::List { filter: f, json: true, .. } => {
            let l = analysis::DumpListing {
                outcome: r.outcome.clone(),
                ..analysis::dump_listing(dump, &filter(f)?)
            };
            Ok(format!("{}\n", serde_json::to_string_pretty(&l)?))
        }
        DumpAction::List { filter: f, .. } => Ok(views::dump_list(dump, &filter(f)?)),
        DumpAction::Export { out, filter: f, .. } => {
            let paths = views::dump_export(dump, &filter(f)?, out)?;
            Ok(format!(
                "exported {} into {}\n",
                views::plural(paths.len() as u64, "file", "files"),
                out.display()
            ))
        }
        DumpAction::Replay { task, .. } => replay(dump, *task),
    }
}

fn replay(dump: &output::ArgsDump, task: u64) -> anyhow::Result<String> {
    let args = ferry_runtime::host::dfx::replay_task(dump, task)?;
    let mut s = String::new();
    let mut bad = 0;
    for a in &args {
        let same = a.matches();
        bad += usize::from(!same);
        let diff = a.dumped.iter().zip(&a.replayed).filter(|(x, y)| x != y);
        s += &format!(
            "task {task:#x} arg {}: {} {} elements, {}\n",
            a.index,
            a.dumped.len(),
            a.dtype.name(),
            if same { "reproduced".to_string() } else { format!("{} differ", diff.count()) }
        );
    }
    if bad > 0 {
        bail!("{s}task {task:#x}: {bad} of {} outputs differ from the dump", args.len());
    }
    Ok(s + &format!("task {task:#x}: all {} outputs reproduced\n", args.len()))
}

pub(crate) fn run(a: &DumpArgs) -> anyhow::Result<()> {
    crate::stdout::print(&ferry_profile::progress::run("dump", || execute(a))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::sample_dir;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        dump: DumpArgs,
    }

    fn parse(args: &[&str]) -> DumpArgs {
        Cli::try_parse_from(std::iter::once("dump").chain(args.iter().copied())).unwrap().dump
    }

    #[test]
    fn list_filter_and_export() {
        let d = sample_dir("dump", false);
        let dir = d.path.to_str().unwrap();
        let all = execute(&parse(&["list", dir])).unwrap();
        assert!(all.contains("3 of 3 args"), "{all}");
        let out = execute(&parse(&["list", dir, "--role", "OUTPUT"])).unwrap();
        assert!(out.contains("1 of 3 args") && out.contains("[2 4 6 8]"), "{out}");
        let task2 = execute(&parse(&["list", dir, "--task", "0x100000002"])).unwrap();
        assert!(task2.contains("value 42"), "{task2}");
        // Ids are hex with or without 0x, as every command prints them.
        assert_eq!(execute(&parse(&["list", dir, "--task", "100000002"])).unwrap(), task2);
        let e = Cli::try_parse_from(["dump", "list", dir, "--task", "0xzz"]).unwrap_err();
        assert!(e.to_string().contains("not a task id"), "{e}");
        // A kernel by name or by decimal id selects the same arguments.
        let by_name = execute(&parse(&["list", dir, "--func", "add"])).unwrap();
        assert_eq!(execute(&parse(&["list", dir, "--func", "8"])).unwrap(), by_name);
        assert!(by_name.contains("1 of 3 args") && by_name.contains("value 42"), "{by_name}");
        let e = execute(&parse(&["list", dir, "--func", "conv"])).unwrap_err().to_string();
        assert!(e.contains("no kernel named `conv`") && e.contains("matmul"), "{e}");
        let x = d.path.join("export");
        let msg = execute(&parse(&[
            "export",
            dir,
            "-o",
            x.to_str().unwrap(),
            "--stage",
            "before_dispatch",
        ]))
        .unwrap();
        assert!(msg.starts_with("exported 3 files"), "{msg}"); // tensor .bin + .txt, scalar .txt
        let j = execute(&parse(&["list", dir, "--role", "OUTPUT", "--json"])).unwrap();
        let l: analysis::DumpListing = serde_json::from_str(&j).unwrap();
        assert_eq!((l.total, l.shown), (3, 1));
        assert_eq!(l.args[0].task_id, "0x100000001");
        assert_eq!((l.args[0].role.as_str(), l.args[0].payload_bytes), ("OUTPUT", Some(16)));
        // --json belongs to `list` alone.
        let e = Cli::try_parse_from(["dump", "replay", dir, "--task", "0", "--json"]).unwrap_err();
        assert!(e.to_string().contains("--json"), "{e}");
    }
}
