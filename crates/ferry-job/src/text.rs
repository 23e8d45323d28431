//! What a job's results read as in text: the lines `ferry run` prints, as values that
//! implement [`Display`](fmt::Display). The command prints them; another caller can log them.
use std::fmt;
use std::path::Path;
use std::time::Duration;

use ferry_profile::{self as output, SUMMARY_FILE};
use ferry_runtime::host::profile::WrittenProfile;
use ferry_runtime::host::{RegisteredKernel, RepeatReport, RunnerConfig, Variant};

use crate::{CaseKind, CaseOutcome, GraphReady, JobOutcome, JobStart, ProfileLocation};

/// The name a variant goes by in what ferry prints.
pub fn variant_name(v: Variant) -> &'static str {
    match v {
        Variant::DeviceOrchestrated => "device-orchestrated",
        Variant::HostBuiltGraph => "host-built",
    }
}

/// The simulated device's profile, Path B fixes and handshake layout in one line (what
/// `ferry run` and `ferry diagnose` print after `device:`).
pub fn device_line(c: &RunnerConfig) -> String {
    let what = match c.profile {
        ferry_runtime::host::DeviceProfile::Vendor => "Path A latch on, Path B cluster incoherent",
        ferry_runtime::host::DeviceProfile::Relaxed => "no Path A latch, Path B cluster coherent",
    };
    format!(
        "{} profile ({what}); Path B fixes: {}; handshake: {}",
        c.profile.name(),
        c.fixes.letters(),
        if c.handshake_layout.is_split() { "split lines (option d)" } else { "one line" }
    )
}

/// The chip of a job of examples (three lines); nothing for a workload, whose line is its
/// [`GraphReady`]'s.
impl fmt::Display for JobStart<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cases.is_empty() {
            return Ok(());
        }
        let c = self.config;
        writeln!(
            f,
            "ferry run: simulated {} chip, {} AICPU threads (1 orchestrator + {} schedulers), {} AIC + {} AIV, {} graphs",
            c.arch.name(),
            c.aicpu_threads,
            c.aicpu_threads - 1,
            c.aic,
            c.aiv,
            variant_name(self.variant)
        )?;
        writeln!(f, "{:<16} {}", "path:", c.path)?;
        writeln!(f, "{:<16} {}", "device:", device_line(c))
    }
}

/// A checked graph and the chip it runs on (one line).
impl fmt::Display for GraphReady<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.config;
        writeln!(
            f,
            "ferry run: {} `{}` ({}), {} tasks, simulated {} chip, {} AICPU threads, {} AIC + {} AIV, {}",
            self.kind,
            self.name,
            self.file.map_or_else(|| "in memory".to_string(), |f| f.display().to_string()),
            self.tasks,
            c.arch.name(),
            c.aicpu_threads,
            c.aic,
            c.aiv,
            variant_name(self.variant)
        )
    }
}

/// What a kernel library added as it loaded (one line):
/// `kernels: <library> from <path>: <name (id)>, …`.
#[derive(Clone, Copy, Debug)]
pub struct LoadedLibrary<'a> {
    /// Where the library was loaded from.
    pub path: &'a Path,
    /// The kernels it added.
    pub kernels: &'a [RegisteredKernel],
}

impl fmt::Display for LoadedLibrary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> =
            self.kernels.iter().map(|k| format!("{} (id {})", k.name, k.id)).collect();
        let library = self.kernels.first().and_then(|k| k.library.clone()).unwrap_or_default();
        writeln!(
            f,
            "{:<16} {} from {}: {}",
            "kernels:",
            library,
            self.path.display(),
            names.join(", ")
        )
    }
}

/// A case's repetition (one line): runs, launch slots, time and rate.
#[derive(Clone, Copy, Debug)]
pub struct RepeatLine<'a> {
    /// The case.
    pub case: &'a str,
    /// Its repetition.
    pub report: &'a RepeatReport,
}

impl fmt::Display for RepeatLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rep = self.report;
        writeln!(
            f,
            "{:<16} {} runs back to back through {} launch slots in {:.1} ms: {:.0} runs/s, every run verified",
            self.case,
            rep.runs,
            rep.slots,
            rep.elapsed.as_secs_f64() * 1e3,
            rep.runs_per_s()
        )
    }
}

/// What a job did, as `ferry run` prints it at the end: examples as a table (tasks, wall,
/// tasks/s, ns/task, the check, per-kernel counts; a total row when there are several), a
/// workload or graph as its line; then where the summary was written. Made by
/// [`JobOutcome::table`].
#[derive(Clone, Copy, Debug)]
pub struct OutcomeTable<'a> {
    outcome: &'a JobOutcome,
}

impl JobOutcome {
    /// What the job did, as text ([`OutcomeTable`]).
    pub fn table(&self) -> OutcomeTable<'_> {
        OutcomeTable { outcome: self }
    }
}

impl fmt::Display for OutcomeTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cases = &self.outcome.cases;
        if cases.iter().all(|c| c.kind == CaseKind::Example) {
            examples_table(f, cases)?;
        } else {
            for c in cases {
                graph_line(f, c)?;
            }
        }
        if let Some(d) = &self.outcome.out {
            writeln!(f, "wrote {}", d.join(SUMMARY_FILE).display())?;
        }
        Ok(())
    }
}

fn examples_table(f: &mut fmt::Formatter<'_>, done: &[CaseOutcome]) -> fmt::Result {
    writeln!(
        f,
        "{:<16} {:>8} {:>11} {:>12} {:>9}  verified",
        "example", "tasks", "wall", "tasks/s", "ns/task"
    )?;
    let (mut tasks, mut wall) = (0u64, Duration::ZERO);
    for d in done {
        let s = &d.output.stats;
        tasks += s.tasks;
        wall += s.wall;
        writeln!(
            f,
            "{:<16} {:>8} {:>8.1} ms {:>12.0} {:>9.0}  ok (checksum {:.4})",
            d.name,
            s.tasks,
            s.wall.as_secs_f64() * 1e3,
            s.tasks as f64 / s.wall.as_secs_f64(),
            s.wall.as_nanos() as f64 / s.tasks.max(1) as f64,
            d.checksum
        )?;
        per_kernel(f, d)?;
    }
    if done.len() > 1 {
        writeln!(
            f,
            "{:<16} {:>8} {:>8.1} ms {:>12.0}",
            "total",
            tasks,
            wall.as_secs_f64() * 1e3,
            tasks as f64 / wall.as_secs_f64()
        )?;
    }
    Ok(())
}

/// A workload's (or graph's) line and its per-kernel counts.
fn graph_line(f: &mut fmt::Formatter<'_>, case: &CaseOutcome) -> fmt::Result {
    let s = &case.output.stats;
    writeln!(
        f,
        "{:<16} {:>8} {:>8.1} ms {:>12.0} tasks/s  ok (checksum {:.4})",
        case.name,
        s.tasks,
        s.wall.as_secs_f64() * 1e3,
        s.tasks as f64 / s.wall.as_secs_f64(),
        case.checksum
    )?;
    per_kernel(f, case)
}

fn per_kernel(f: &mut fmt::Formatter<'_>, case: &CaseOutcome) -> fmt::Result {
    let per: Vec<String> =
        case.output.stats.per_kernel.iter().map(|(k, n)| format!("{k} {n}")).collect();
    writeln!(f, "{:<16} per kernel: {}", "", per.join(", "))
}

/// What to do with the profiles a job wrote: the Perfetto trace at ui.perfetto.dev, the
/// swimlane page, the report (nothing when there are none).
#[derive(Clone, Copy, Debug)]
pub struct NextSteps<'a> {
    /// The profiles, in the order they were written.
    pub profiles: &'a [ProfileLocation],
    /// Whether the profiles hold the swimlane (`ferry trace` makes the Perfetto trace of it
    /// when the run did not write one).
    pub swimlane: bool,
}

impl fmt::Display for NextSteps<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.profiles.is_empty() {
            return Ok(());
        }
        writeln!(f, "next:")?;
        for p in self.profiles {
            let d = p.dir.display();
            if let (Some(first), Some(last)) = (p.runs.first(), p.runs.last()) {
                let (fst, lst) = (first.display(), last.display());
                writeln!(
                    f,
                    "  ferry report {d}    # the runs with their wall times, then the kernels over them"
                )?;
                writeln!(f, "  ferry view {d}      # one page spanning the runs")?;
                writeln!(f, "  ferry trace {d}     # one Perfetto trace spanning the runs")?;
                if p.perfetto {
                    writeln!(
                        f,
                        "  open {} (… {}) at https://ui.perfetto.dev (Open trace file): a run's own trace",
                        first.join(output::PERFETTO_FILE).display(),
                        last.join(output::PERFETTO_FILE).display()
                    )?;
                }
                writeln!(f, "  ferry report {fst}      # a run's full report (… {lst})")?;
                continue;
            }
            if p.perfetto {
                writeln!(
                    f,
                    "  open {} at https://ui.perfetto.dev (Open trace file)",
                    p.dir.join(output::PERFETTO_FILE).display()
                )?;
            } else if self.swimlane {
                writeln!(
                    f,
                    "  ferry trace {d}     # the Perfetto trace, for https://ui.perfetto.dev"
                )?;
            }
            writeln!(f, "  ferry view {d}      # one HTML page of the run")?;
            writeln!(f, "  ferry report {d}    # per-kernel timing, stalls and loss")?;
        }
        Ok(())
    }
}

/// The lines about a profile just written: its files, records, loss and rates, and the traces
/// (a session over several runs: one line per run, then the write's rate).
#[derive(Clone, Copy, Debug)]
pub struct ProfileWriteLines<'a> {
    /// The profile.
    pub profile: &'a WrittenProfile,
    /// Whether the Perfetto trace was written.
    pub perfetto: bool,
    /// Whether the Chrome JSON trace was written.
    pub chrome: bool,
}

impl fmt::Display for ProfileWriteLines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p, traces) = (self.profile, self.perfetto);
        native_line(f, p)?;
        if !p.runs.is_empty() {
            return session_lines(f, p, traces);
        }
        let (report, model, dir) = (&p.report, &p.model, &p.dir);
        let (produced, collected, dropped) = model.loss.totals();
        if report.files.is_empty() {
            // The native profile alone.
            writeln!(
                f,
                "dfx: lanes, DepGen's and ArgsDump's in 8-byte words: {produced} produced, \
                 {collected} collected, {dropped} dropped, {:?}",
                model.loss.policy
            )?;
            return no_scopes_line(f, model);
        }
        let files = report.files.len() - usize::from(traces) - usize::from(self.chrome);
        writeln!(
            f,
            "dfx: {} in {} ({} records; lanes, DepGen's in 8-byte words: {produced} \
             produced, {collected} collected, {dropped} dropped, {:?})",
            output::views::plural(files as u64, "file", "files"),
            dir.display(),
            report.records,
            model.loss.policy
        )?;
        writeln!(
            f,
            "dfx: wrote {:.1} MB of files in {:.3} s ({:.0} records/s, {:.1} bytes/record){}",
            (report.bytes - report.trace_bytes()) as f64 / 1e6,
            report.files_elapsed.as_secs_f64(),
            report.records_per_sec(),
            report.bytes_per_record(),
            traces_time(report, traces)
        )?;
        no_scopes_line(f, model)?;
        if traces {
            f.write_str(&report.traces_text(dir))?;
        }
        Ok(())
    }
}

/// The line about the native profile a run wrote while it ran: its size, chunks and records.
fn native_line(f: &mut fmt::Formatter<'_>, p: &WrittenProfile) -> fmt::Result {
    let Some(n) = &p.native else { return Ok(()) };
    let s = n.sealed;
    writeln!(
        f,
        "dfx: native profile {}: {:.1} MB, {} chunks, {} records",
        n.path.display(),
        s.bytes as f64 / 1e6,
        s.chunks,
        s.records
    )
}

/// The line saying the scope statistics recorded no scope, when they did not (from the records,
/// or, for a model of the loss accounting alone, from the ScopeStats lanes' counts).
fn no_scopes_line(f: &mut fmt::Formatter<'_>, model: &output::RunModel) -> fmt::Result {
    let none = match &model.scopes {
        Some(sc) => sc.records.is_empty(),
        None => {
            let scope = Some(output::Subsystem::ScopeStats);
            let mut lanes = model.loss.lanes.iter().filter(|l| l.subsystem == scope).peekable();
            lanes.peek().is_some() && lanes.all(|l| l.produced == 0)
        }
    };
    if none {
        writeln!(f, "dfx: scope_stats recorded no scope: the graph opened none (nothing to plot)")?;
    }
    Ok(())
}

/// `, traces in S s` when the traces were written.
fn traces_time(report: &output::WriteReport, traces: bool) -> String {
    if traces {
        format!(", traces in {:.3} s", report.traces_elapsed.as_secs_f64())
    } else {
        String::new()
    }
}

/// A session over several runs: one line per run (its directory, records and loss accounting,
/// which reconciles per run), then the write's rate.
fn session_lines(f: &mut fmt::Formatter<'_>, p: &WrittenProfile, traces: bool) -> fmt::Result {
    if p.report.files.is_empty() {
        // The native profile alone: each run is read as `DIR/run-NNN` from it.
        writeln!(
            f,
            "dfx: {} runs in one session, read as {}/run-NNN from its native profile",
            p.runs.len(),
            p.dir.display()
        )?;
        for r in &p.runs {
            let (produced, collected, dropped) = r.model.loss.totals();
            let name =
                r.dir.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            writeln!(
                f,
                "dfx: {name}: {produced} produced, {collected} collected, {dropped} dropped{}",
                if r.model.loss.reconciles() { "" } else { " (does NOT reconcile)" }
            )?;
        }
        return Ok(());
    }
    writeln!(
        f,
        "dfx: {} runs in one session, each in a directory of {} with its own files{} (runs listed in {})",
        p.runs.len(),
        p.dir.display(),
        if traces { " and trace" } else { "" },
        output::RUNS_FILE
    )?;
    for r in &p.runs {
        let (produced, collected, dropped) = r.model.loss.totals();
        let name = r.dir.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        writeln!(
            f,
            "dfx: {name}: {} records; {produced} produced, {collected} collected, {dropped} dropped{}",
            r.report.records,
            if r.model.loss.reconciles() { "" } else { " (does NOT reconcile)" }
        )?;
    }
    let report = &p.report;
    writeln!(
        f,
        "dfx: wrote {:.1} MB in {:.3} s ({:.0} records/s){}",
        report.bytes as f64 / 1e6,
        (report.files_elapsed + report.traces_elapsed).as_secs_f64(),
        report.records_per_sec(),
        traces_time(report, traces)
    )
}
