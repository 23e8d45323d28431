//! Analysis views over a [`RunModel`]: the text report, the dependency summary, the argument dump
//! listing and export, and two self-contained HTML pages (the swimlane and the scope occupancy
//! plot). HTML pages embed everything (inline SVG and CSS, no scripts or resources from the
//! network).
//!
//! | file | views |
//! |---|---|
//! | `mod.rs` | text: the report, kernel statistics, the dependency summary, the argument dump |
//! | `html.rs` | HTML: the swimlane page and the scope occupancy page |

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ferry_abi::records::DType;

use super::args::{ArgsDump, DumpedArg};
use super::deps::DepEdge;
use super::model::{JoinedTask, LaneLoss, RunModel};
use super::{write_atomic_in, OutputError};
use std::io::Write as _;

mod html;
mod viewer;
pub use html::{
    html_escape, risk_class, scope_usage, scopes_html, swimlane_html, swimlane_html_of,
    swimlane_html_reporting, ScopeUsage,
};
pub use viewer::{base64, view_data, ViewData, ViewRow};

/// Timing of one kernel, summed over its tasks (device cycles).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Kernel function id (`None`: unknown).
    pub func_id: Option<i32>,
    /// Kernel name.
    pub name: String,
    /// Block dispatches (AICore executions): an SPMD task of `b` blocks counts `b`.
    pub count: u64,
    /// Distinct tasks (task tokens).
    pub tasks: u64,
    /// Σ end − start.
    pub exec: u64,
    /// Σ finish − dispatch (tasks with both AICPU timestamps).
    pub latency: u64,
    /// Σ receive − dispatch.
    pub head_propagation: u64,
    /// Σ start − receive.
    pub head_setup: u64,
    /// Σ finish − end.
    pub tail: u64,
    /// Tasks with AICPU timestamps (the denominators of latency and overheads).
    pub with_aicpu: u64,
}

impl KernelStats {
    /// Exec as a percentage of latency over the tasks with AICPU timestamps.
    pub fn exec_pct(&self, tasks: &[JoinedTask]) -> Option<f64> {
        let exec: u64 = tasks
            .iter()
            .filter(|t| t.func_id == self.func_id && t.dispatch.is_some() && t.finish.is_some())
            .map(|t| t.end.saturating_sub(t.start))
            .fold(0u64, u64::saturating_add);
        (self.latency > 0).then(|| exec as f64 * 100.0 / self.latency as f64)
    }
}

/// Per-kernel statistics, by kernel id.
pub fn kernel_stats(run: &RunModel) -> Vec<KernelStats> {
    let mut m: BTreeMap<Option<i32>, KernelStats> = BTreeMap::new();
    let mut seen: std::collections::HashSet<(Option<i32>, u64)> = std::collections::HashSet::new();
    for t in run.tasks() {
        let k = m.entry(t.func_id).or_insert_with(|| KernelStats {
            func_id: t.func_id,
            name: run.kernel_name(t.func_id),
            ..Default::default()
        });
        // Saturating: cycles read from a file may be anything (a sum past u64::MAX shows as
        // u64::MAX, never as a wrapped small number).
        k.count += 1;
        if seen.insert((t.func_id, t.task_id)) {
            k.tasks += 1;
        }
        k.exec = k.exec.saturating_add(t.end.saturating_sub(t.start));
        if let (Some(d), Some(f)) = (t.dispatch, t.finish) {
            k.with_aicpu += 1;
            k.latency = k.latency.saturating_add(f.saturating_sub(d));
            k.head_propagation = k.head_propagation.saturating_add(t.receive.saturating_sub(d));
            k.head_setup = k.head_setup.saturating_add(t.start.saturating_sub(t.receive.max(d)));
            k.tail = k.tail.saturating_add(f.saturating_sub(t.end));
        }
    }
    m.into_values().collect()
}

/// Lanes that stalled, longest total first.
pub fn stalled_lanes(run: &RunModel) -> Vec<&LaneLoss> {
    let mut v: Vec<&LaneLoss> = run.loss.lanes.iter().filter(|l| l.stall_cycles > 0).collect();
    v.sort_by(|a, b| b.stall_cycles.cmp(&a.stall_cycles).then(a.lane.cmp(&b.lane)));
    v
}

/// Tasks whose AICPU-observed finish is pushed out by a stall: the task ended before a stall of a
/// lane written by the AICPU thread that owns its core, and its finish lies after that stall
/// began (the scheduler was parked at the gate and polled FIN only on recovery; docs/design/dfx-backpressure.md).
pub fn stall_inflated_tasks(run: &RunModel) -> Vec<JoinedTask> {
    // Per AICPU thread: its lanes' waits sorted by start, and the running maximum of their ends,
    // so "some wait began by the finish and ended at or after the end" is one binary search.
    let mut waits: BTreeMap<u32, Vec<[u64; 2]>> = BTreeMap::new();
    for l in &run.loss.lanes {
        waits.entry(l.thread).or_default().extend(l.stalls.iter().copied());
    }
    let waits: BTreeMap<u32, (Vec<[u64; 2]>, Vec<u64>)> = waits
        .into_iter()
        .map(|(th, mut w)| {
            w.sort_unstable();
            let max_end = w
                .iter()
                .scan(0u64, |m, w| {
                    *m = (*m).max(w[1]);
                    Some(*m)
                })
                .collect();
            (th, (w, max_end))
        })
        .collect();
    run.tasks()
        .into_iter()
        .filter(|t| {
            let Some(f) = t.finish else { return false };
            let thread = run.meta.core_to_thread.get(t.core as usize).copied().unwrap_or(-1);
            let Some((w, max_end)) = u32::try_from(thread).ok().and_then(|th| waits.get(&th))
            else {
                return false;
            };
            let began = w.partition_point(|w| w[0] <= f);
            began > 0 && max_end[began - 1] >= t.end
        })
        .collect()
}

/// `1 core`, `2 cores`: `n` and the noun in the number `n` asks for.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `160 tasks, 640 blocks`: distinct tasks (task tokens) and their block dispatches (an SPMD task
/// of `b` blocks runs `b` times); the blocks only when they differ.
pub fn tasks_and_blocks(tasks: &[JoinedTask]) -> String {
    let distinct: std::collections::HashSet<u64> = tasks.iter().map(|t| t.task_id).collect();
    let (n, b) = (distinct.len() as u64, tasks.len() as u64);
    if n == b {
        plural(n, "task", "tasks")
    } else {
        format!("{}, {}", plural(n, "task", "tasks"), plural(b, "block", "blocks"))
    }
}

/// The `ferry report` text of `run`, exactly (`analysis::report(run).text(None)`): the
/// verdict, per-kernel time, per-core utilisation, the PMU summary, stalls, loss and the
/// critical paths. The page shows it; there is one report.
pub fn report(run: &RunModel) -> String {
    crate::analysis::report(run).text(None)
}

/// Which tasks `ferry deps` lists (every `None` keeps all; they combine).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DepsFilter {
    /// Only this task id.
    pub task: Option<u64>,
    /// Only tasks of the kernel of this name.
    pub kernel: Option<String>,
    /// At most this many tasks (the first in submission order).
    pub top: Option<usize>,
}

/// A filter naming what a run does not hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// The task is not in the run's graph.
    #[error("task {id:#x} is not in this run's deps.json ({tasks} tasks)")]
    UnknownTask {
        /// The id asked for.
        id: u64,
        /// Tasks the graph holds.
        tasks: usize,
    },
    /// No task (or row) of a kernel of that name.
    #[error("no kernel named `{name}` in this run (its kernels: {})", known.join(", "))]
    UnknownKernel {
        /// The name asked for.
        name: String,
        /// The kernels the run holds, sorted.
        known: Vec<String>,
    },
}

/// `name` among `names`, or [`FilterError::UnknownKernel`] listing them.
///
/// # Errors
/// [`FilterError::UnknownKernel`] when no name is `name`.
pub fn known_kernel<S: AsRef<str>>(
    name: &str,
    names: impl IntoIterator<Item = S>,
) -> Result<(), FilterError> {
    let known: std::collections::BTreeSet<String> =
        names.into_iter().map(|n| n.as_ref().to_string()).collect();
    if known.contains(name) {
        return Ok(());
    }
    Err(FilterError::UnknownKernel { name: name.to_string(), known: known.into_iter().collect() })
}

impl DepsFilter {
    /// Refuses a task or kernel `run`'s graph does not hold, naming what it holds (a run without
    /// a graph passes: its listing says so).
    ///
    /// # Errors
    /// [`FilterError`] naming the missing task or kernel.
    pub fn check(&self, run: &RunModel) -> Result<(), FilterError> {
        let Some(g) = &run.deps else { return Ok(()) };
        if let Some(id) = self.task {
            if !g.tasks.iter().any(|t| t.task_id == id) {
                return Err(FilterError::UnknownTask { id, tasks: g.tasks.len() });
            }
        }
        if let Some(k) = &self.kernel {
            let kernel = g
                .tasks
                .iter()
                .map(|t| run.kernel_name(t.kernel_ids.iter().copied().find(|&k| k >= 0)));
            known_kernel(k, kernel)?;
        }
        Ok(())
    }

    /// Whether task `id` of kernel `kernel` passes the task and kernel filters.
    pub fn keeps(&self, id: u64, kernel: &str) -> bool {
        self.task.is_none_or(|t| t == id) && self.kernel.as_deref().is_none_or(|k| k == kernel)
    }

    /// Whether any filter is set.
    pub fn any(&self) -> bool {
        self.task.is_some() || self.kernel.is_some() || self.top.is_some()
    }

    /// `tasks shown: N of M (task 0x40, kernel add, top 5)`: the line a filtered listing opens
    /// with.
    pub fn shown_line(&self, shown: usize, of: usize) -> String {
        let mut by = Vec::new();
        if let Some(t) = self.task {
            by.push(format!("task {t:#x}"));
        }
        if let Some(k) = &self.kernel {
            by.push(format!("kernel {k}"));
        }
        if let Some(n) = self.top {
            by.push(format!("top {n}"));
        }
        format!("tasks shown: {shown} of {of} ({})", by.join(", "))
    }
}

/// The `ferry deps` text: counts per edge source, then one line per task with its kernel,
/// predecessors and successors; flags happens-before violations seen in the swimlane (a
/// producer that ended after its consumer started).
pub fn deps_text(run: &RunModel) -> String {
    deps_text_filtered(run, &DepsFilter::default())
}

/// [`deps_text`] listing only the tasks `filter` keeps, after a line that says how many of
/// all (the counts and the violations stay those of the whole graph).
pub fn deps_text_filtered(run: &RunModel, filter: &DepsFilter) -> String {
    let mut s = String::new();
    let Some(g) = &run.deps else {
        return "no deps.json in this run\n".to_string();
    };
    let mut by_source: BTreeMap<String, usize> = BTreeMap::new();
    for e in &g.edges {
        *by_source.entry(format!("{:?}", e.source).to_lowercase()).or_default() += 1;
    }
    let _ = writeln!(
        s,
        "deps: {}, {}, {} ({})",
        plural(g.tasks.len() as u64, "task", "tasks"),
        plural(g.tensors.len() as u64, "tensor", "tensors"),
        plural(g.edges.len() as u64, "edge", "edges"),
        by_source.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    );
    let span: BTreeMap<u64, (u64, u64)> =
        run.tasks().iter().map(|t| (t.task_id, (t.start, t.end))).collect();
    let mut violations = 0;
    for e in &g.edges {
        if let (Some(p), Some(c)) = (span.get(&e.pred), span.get(&e.succ)) {
            if p.1 > c.0 {
                violations += 1;
                let _ = writeln!(
                    s,
                    "  hb_violation: {:#x} ended at {} after {:#x} started at {}",
                    e.pred, p.1, e.succ, c.0
                );
            }
        }
    }
    let _ = writeln!(s, "happens-before violations: {violations}");
    // Edges by consumer and by producer, in edge order: one pass, not a scan per task.
    let mut into: BTreeMap<u64, Vec<&DepEdge>> = BTreeMap::new();
    let mut from: BTreeMap<u64, Vec<&DepEdge>> = BTreeMap::new();
    for e in &g.edges {
        into.entry(e.succ).or_default().push(e);
        from.entry(e.pred).or_default().push(e);
    }
    let kernel_of =
        |t: &crate::DepTask| run.kernel_name(t.kernel_ids.iter().copied().find(|&k| k >= 0));
    let kept = g.tasks.iter().filter(|t| filter.keeps(t.task_id, &kernel_of(t)));
    let kept: Vec<_> = kept.take(filter.top.unwrap_or(usize::MAX)).collect();
    if filter.any() {
        let _ = writeln!(s, "{}", filter.shown_line(kept.len(), g.tasks.len()));
    }
    for t in kept {
        let none = Vec::new();
        let preds: Vec<String> = into
            .get(&t.task_id)
            .unwrap_or(&none)
            .iter()
            .map(|e| format!("{:#x}({:?})", e.pred, e.source).to_lowercase())
            .collect();
        let succs: Vec<String> = from
            .get(&t.task_id)
            .unwrap_or(&none)
            .iter()
            .map(|e| format!("{:#x}", e.succ))
            .collect();
        let _ = writeln!(
            s,
            "  task {:#x} kernel {} blocks {} args {} <- [{}] -> [{}]",
            t.task_id,
            kernel_of(&t),
            t.block_num,
            t.args.len(),
            preds.join(", "),
            succs.join(", ")
        );
    }
    s
}

/// Which dumped arguments to list or export (every `None` matches all).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpFilter {
    /// Task id.
    pub task: Option<u64>,
    /// Role (`INPUT`, …), case-insensitive.
    pub role: Option<String>,
    /// Stage (`before_dispatch`, `after_completion`).
    pub stage: Option<String>,
    /// Kernel function id.
    pub func: Option<i32>,
    /// Argument index.
    pub arg_index: Option<u32>,
}

impl DumpFilter {
    /// Whether `a` passes the filter.
    pub fn matches(&self, a: &DumpedArg) -> bool {
        self.task.is_none_or(|t| a.task_id == t)
            && self.role.as_ref().is_none_or(|r| a.role.eq_ignore_ascii_case(r))
            && self.stage.as_ref().is_none_or(|st| a.stage.eq_ignore_ascii_case(st))
            && self.func.is_none_or(|f| a.func_id.contains(&f))
            && self.arg_index.is_none_or(|i| a.arg_index == i)
    }
}

/// Formats a payload as values of `dtype` (hex bytes for unknown types; at most `limit` values).
pub fn format_payload(dtype: &str, bytes: &[u8], limit: usize) -> String {
    let Some(dt) = DType::from_name(dtype) else {
        return bytes.iter().take(limit).map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ");
    };
    let n = dt.size();
    let vals: Vec<String> = bytes
        .chunks_exact(n)
        .take(limit)
        .map(|c| {
            let mut b8 = [0u8; 8];
            b8[..n].copy_from_slice(c);
            let u = u64::from_le_bytes(b8);
            match dt {
                DType::Float32 => format!("{}", f32::from_bits(u as u32)),
                DType::Float16 | DType::BFloat16 => format!("0x{u:04x}"),
                DType::Int8 => format!("{}", u as u8 as i8),
                DType::Int16 => format!("{}", u as u16 as i16),
                DType::Int32 => format!("{}", u as u32 as i32),
                DType::Int64 => format!("{}", u as i64),
                DType::UInt8 | DType::UInt32 | DType::UInt64 => format!("{u}"),
            }
        })
        .collect();
    let more = bytes.len() / n > limit;
    format!("{}{}", vals.join(" "), if more { " …" } else { "" })
}

/// Formats a scalar's `value` (its raw little-endian bits, as the record carries it) as a value of
/// `dtype`: FLOAT32 bits `1056964608` print `0.5`; an unknown dtype prints the bits in decimal.
///
/// # Examples
/// ```
/// use ferry_profile::views::format_scalar;
/// assert_eq!(format_scalar("FLOAT32", u64::from(0.5f32.to_bits())), "0.5");
/// assert_eq!(format_scalar("INT32", u64::from((-3i32) as u32)), "-3");
/// assert_eq!(format_scalar("UINT64", 42), "42");
/// assert_eq!(format_scalar("MYSTERY", 7), "7");
/// ```
pub fn format_scalar(dtype: &str, bits: u64) -> String {
    match DType::from_name(dtype) {
        Some(dt) => format_payload(dtype, &bits.to_le_bytes()[..dt.size()], 1),
        None => bits.to_string(),
    }
}

/// The `ferry dump` listing of the arguments that pass `f`.
pub fn dump_list(d: &ArgsDump, f: &DumpFilter) -> String {
    let mut s = String::new();
    let shown: Vec<Cow<'_, DumpedArg>> = d.in_export_order().filter(|a| f.matches(a)).collect();
    let _ = writeln!(
        s,
        "args_dump level {}: {} of {} args (dropped_records {}, dropped_overwrite {})",
        d.level,
        shown.len(),
        d.args.len(),
        d.dropped_records,
        d.dropped_overwrite
    );
    for a in shown {
        let _ = write!(
            s,
            "  {:<#10x} {:<16} arg {} {:<6} {} {} shape {:?}",
            a.task_id, a.stage, a.arg_index, a.role, a.kind, a.dtype, a.shape
        );
        if let Some(v) = a.value {
            let _ = write!(s, " value {}", format_scalar(&a.dtype, v));
        }
        if let Some(p) = d.payload(&a) {
            let _ = write!(s, " bytes {} = [{}]", p.len(), format_payload(&a.dtype, &p, 8));
        }
        if a.truncated {
            let _ = write!(s, " TRUNCATED");
        }
        if a.overwritten {
            let _ = write!(s, " OVERWRITTEN");
        }
        let _ = writeln!(s);
    }
    s
}

/// Exports each argument that passes `f` into `out`: `<task>_<stage>_arg<i>_<role>.txt` (all
/// values as text) and, for tensors with payload, `.bin` (the raw bytes). Returns the paths.
/// `out` is opened (created where missing) and checked as every output directory is
/// ([`ferry_fs::Dir::open_writable`]); each file is written atomically through its handle.
///
/// # Errors
///
/// [`OutputError::Io`] when the directory is refused or a file cannot be written or a payload
/// read.
pub fn dump_export(d: &ArgsDump, f: &DumpFilter, out: &Path) -> Result<Vec<PathBuf>, OutputError> {
    let dir = ferry_fs::Dir::open_writable(out, true)?;
    let write = |name: &str, bytes: &[u8]| {
        write_atomic_in(&dir, name, |w| w.write_all(bytes)).map_err(|source| OutputError::Io {
            file: dir.join(name).display().to_string(),
            source,
        })
    };
    let mut paths = Vec::new();
    for a in d.in_export_order().filter(|a| f.matches(a)) {
        let stem =
            format!("{:#x}_{}_arg{}_{}", a.task_id, a.stage, a.arg_index, a.role.to_lowercase());
        let mut text = format!(
            "task {:#x}\nstage {}\narg_index {}\nrole {}\nkind {}\ndtype {}\nshape {:?}\nstrides {:?}\nstart_offset {}\n",
            a.task_id, a.stage, a.arg_index, a.role, a.kind, a.dtype, a.shape, a.strides, a.start_offset
        );
        if let Some(v) = a.value {
            let _ = writeln!(text, "value {}", format_scalar(&a.dtype, v));
        }
        if let Some(p) = d.payload(&a) {
            let _ = writeln!(text, "values {}", format_payload(&a.dtype, &p, usize::MAX));
            let bin = format!("{stem}.bin");
            write(&bin, &p)?;
            paths.push(out.join(bin));
        }
        let txt = format!("{stem}.txt");
        write(&txt, text.as_bytes())?;
        paths.push(out.join(txt));
    }
    Ok(paths)
}
