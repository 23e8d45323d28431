//! The text renderings of [`Report`] and [`Diff`]: what `ferry report` and `ferry diff` print
//! without `--json`.

use std::fmt::Write as _;

use super::critical::{StaticPath, WaitKind, Weight};
use super::diff::{Diff, Pair};
use super::Report;
use crate::RunOutcome;

/// Tasks of a static path the text shows (the first ones and the last two); `--json` has them
/// all.
const PATH_SHOWN: usize = 24;
/// Tasks of the observed path the text lists one per line (the first ones and the last two);
/// `--json` has them all.
const OBSERVED_SHOWN: usize = 6;
/// Lanes that only waited (lost nothing) the loss table lists as rows, the longest waiters
/// first; the others are one line of sums.
const STALL_ROWS: usize = 2;
/// Cores per line of the per-core table.
const CORES_PER_LINE: usize = 3;

/// `ns` in the unit that reads best: `ns`, `us`, `ms` or `s`, three decimals.
pub(crate) fn duration(ns: f64) -> String {
    let a = ns.abs();
    if a >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if a >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if a >= 1e3 {
        format!("{:.3} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// `part` over `whole` as a percentage, one decimal (0 when `whole` is 0).
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// What [`Report::sort_kernels`] orders by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelSort {
    /// Total device time (the default order).
    Total,
    /// Average exec per block.
    Exec,
    /// Average latency (dispatch to finish) per block.
    Latency,
    /// Tasks.
    Tasks,
    /// Name, alphabetically.
    Name,
}

fn us(hz: u64, cycles: u64) -> f64 {
    if hz == 0 {
        cycles as f64
    } else {
        cycles as f64 * 1e6 / hz as f64
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl Report {
    /// Keeps kernel `k`'s rows in the per-kernel tables (time and PMU; the PMU's `all` line
    /// stays the run's): `ferry report --kernel`.
    pub fn keep_kernel(&mut self, k: &str) {
        self.kernels.retain(|x| x.kernel == k);
        if let Some(p) = &mut self.pmu {
            p.kernels.retain(|x| x.kernel == k);
        }
    }

    /// The text of `ferry report`: at most `top` kernels (all with `None`).
    pub fn text(&self, top: Option<usize>) -> String {
        let r = &self.run;
        let hz = r.clock_hz;
        let us = |c: u64| us(hz, c);
        let avg = |sum: u64, n: u64| if n == 0 { 0.0 } else { us(sum) / n as f64 };
        let mut s = String::new();
        let blocks = if r.blocks == r.tasks {
            String::new()
        } else {
            format!(", {}", plural(r.blocks, "block", "blocks"))
        };
        let _ = writeln!(
            s,
            "ferry report: {}arch {}, clock {} Hz, chip swimlane level {}, {}{blocks} on {}, \
             wall {}",
            r.run.map_or_else(String::new, |l| format!("run {} of {}, ", l.index, l.runs)),
            r.arch,
            hz,
            r.swimlane_level,
            plural(r.tasks, "task", "tasks"),
            plural(u64::from(r.cores), "core", "cores"),
            duration(r.wall_ns as f64),
        );
        if let Some(e) = self.outcome.as_ref().and_then(RunOutcome::failure) {
            let _ = writeln!(s, "the run failed (its profile is complete): {e}");
            // What the failure left undone: the submitted tasks that never ran.
            if r.no_slice > 0 {
                let more = r.no_slice.saturating_sub(r.no_slice_first.len() as u64);
                let tail = if more > 0 { format!(", … ({more} more)") } else { String::new() };
                let _ = writeln!(
                    s,
                    "{} of {} submitted tasks never ran: {}{tail}",
                    r.no_slice,
                    r.submitted_tasks.unwrap_or(r.no_slice),
                    r.no_slice_first.join(", ")
                );
            }
        }
        let _ = writeln!(s, "{}", self.verdict());

        let shown = top.unwrap_or(usize::MAX).min(self.kernels.len());
        let _ = writeln!(
            s,
            "\nPer kernel, the most device time first{} (averages in us; head = propagation + \
             setup):",
            if shown < self.kernels.len() {
                format!(" (top {shown} of {})", self.kernels.len())
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            s,
            "  {:<16} {:>6} {:>6} {:>12} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
            "kernel",
            "tasks",
            "blocks",
            "total_us",
            "share",
            "exec",
            "latency",
            "head",
            "head.prop",
            "head.setup",
            "tail",
            "exec%"
        );
        for k in &self.kernels[..shown] {
            let n = k.with_aicpu;
            let _ = writeln!(
                s,
                "  {:<16} {:>6} {:>6} {:>12.3} {:>5.1}% {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} \
                 {:>10.3} {:>7}",
                k.kernel,
                k.tasks,
                k.blocks,
                us(k.exec_cycles),
                k.exec_share * 100.0,
                avg(k.exec_cycles, k.blocks),
                avg(k.latency_cycles, n),
                avg(k.head_propagation_cycles.saturating_add(k.head_setup_cycles), n),
                avg(k.head_propagation_cycles, n),
                avg(k.head_setup_cycles, n),
                avg(k.tail_cycles, n),
                k.exec_pct.map_or("-".to_string(), |p| format!("{p:.1}"))
            );
        }

        let _ = writeln!(s, "\nPer core (busy = time with a block running, over the wall time):");
        let idle: Vec<String> =
            self.cores.iter().filter(|c| c.blocks == 0).map(|c| c.core.to_string()).collect();
        let busy: Vec<String> = self
            .cores
            .iter()
            .filter(|c| c.blocks > 0)
            .map(|c| {
                format!(
                    "core{:<3} {} t{:<2} {:>7} blk {:>12} {:>5.1}%",
                    c.core,
                    c.core_type.name(),
                    c.thread,
                    c.blocks,
                    duration(us(c.busy_cycles) * 1e3),
                    c.utilisation * 100.0
                )
            })
            .collect();
        for line in busy.chunks(CORES_PER_LINE) {
            let _ = writeln!(s, "  {}", line.join("   "));
        }
        if !idle.is_empty() {
            let _ = writeln!(
                s,
                "  {} ran no block: core {}",
                plural(idle.len() as u64, "core", "cores"),
                idle.join(", ")
            );
        }

        // A PMU that recorded no row is said on the `no records` line, not drawn as a table.
        if let Some(p) = self.pmu.as_ref().filter(|p| p.total.rows > 0) {
            let _ = writeln!(
                s,
                "\nPMU (event type {}, {}; sums per kernel):",
                p.event_type,
                plural(p.total.rows, "row", "rows")
            );
            let _ = write!(s, "  {:<16} {:>6} {:>14}", "kernel", "rows", "total_cycles");
            for n in &p.counter_names {
                let _ = write!(s, " {n:>14}");
            }
            let _ = writeln!(s);
            // With one kernel the run's `all` row repeats it: one row says both.
            let all = (p.kernels.len() != 1).then_some(&p.total);
            for k in p.kernels.iter().chain(all) {
                let _ = write!(s, "  {:<16} {:>6} {:>14}", k.kernel, k.rows, k.total_cycles);
                for v in &k.counters {
                    let _ = write!(s, " {v:>14}");
                }
                let _ = writeln!(s);
            }
        }

        self.critical_path_text(&mut s);

        // A clean order check is said in the verdict's line; only a failed one is a section.
        if self.order_violations > 0 || self.missing_aicpu_records > 0 {
            let _ = writeln!(
                s,
                "\nOrder check (dispatch <= start <= end <= finish): {}",
                plural(self.order_violations, "violation", "violations")
            );
        }
        if self.missing_aicpu_records > 0 {
            let _ = writeln!(
                s,
                "  {} AICore tasks have no AICPU dispatch/finish record",
                self.missing_aicpu_records
            );
        }

        self.loss_text(&mut s, us);
        s
    }

    /// Loss and stalls, one table. A lane that lost nothing, waited for nothing and reconciles
    /// says nothing: the lanes like it are counted in one line (`--json` lists every lane). Of
    /// the lanes that only waited, the [`STALL_ROWS`] longest waiters are rows and the others
    /// one line of sums, so the table's height does not follow how loaded the host was.
    fn loss_text(&self, s: &mut String, us: impl Fn(u64) -> f64) {
        let l = &self.loss;
        let st = &self.stalls;
        let _ = writeln!(
            s,
            "\nLoss and stalls (transport records per lane; dep_gen and args lanes count 8-byte \
             words; policy {:?}, budget {} cycles = {} per wait):",
            st.policy,
            st.budget_cycles,
            duration(us(st.budget_cycles) * 1e3),
        );
        let quiet = |ln: &super::LossLane| ln.dropped == 0 && ln.stall_cycles == 0 && ln.reconciles;
        let only_waited =
            |ln: &super::LossLane| ln.dropped == 0 && ln.stall_cycles > 0 && ln.reconciles;
        let same = |w: &super::StalledLane, ln: &super::LossLane| {
            w.lane == ln.lane && w.thread == ln.thread
        };
        // `stalls.lanes` is every lane that waited, the longest waiter first.
        let shown_waiters: Vec<&super::StalledLane> = st
            .lanes
            .iter()
            .filter(|w| l.lanes.iter().any(|ln| same(w, ln) && only_waited(ln)))
            .take(STALL_ROWS)
            .collect();
        let row = |ln: &super::LossLane| {
            !quiet(ln) && (!only_waited(ln) || shown_waiters.iter().any(|w| same(w, ln)))
        };
        if l.lanes.iter().any(row) {
            let _ = writeln!(
                s,
                "  {:<24} {:>6} {:>10} {:>10} {:>8} {:>12} {:>6} {:>12}  reconcile",
                "lane",
                "thread",
                "produced",
                "collected",
                "dropped",
                "stall_us",
                "waits",
                "longest_us"
            );
        }
        for ln in l.lanes.iter().filter(|ln| row(ln)) {
            let (n, longest) = st.lanes.iter().find(|w| same(w, ln)).map_or_else(
                || ("-".to_string(), "-".to_string()),
                |w| (w.waits.to_string(), format!("{:.3}", us(w.longest_cycles))),
            );
            let _ = writeln!(
                s,
                "  {:<24} {:>6} {:>10} {:>10} {:>8} {:>12.3} {:>6} {:>12}  {}",
                ln.lane,
                ln.thread,
                ln.produced,
                ln.collected,
                ln.dropped,
                us(ln.stall_cycles),
                n,
                longest,
                if ln.reconciles { "ok" } else { "MISMATCH" }
            );
        }
        // The waiters past the rows: counted, with their sums.
        let (mut n, mut recs, mut stall, mut count, mut longest) = (0u64, 0u64, 0u64, 0u64, 0u64);
        for ln in l.lanes.iter().filter(|ln| only_waited(ln) && !row(ln)) {
            n += 1;
            recs = recs.saturating_add(ln.produced);
            stall = stall.saturating_add(ln.stall_cycles);
            if let Some(w) = st.lanes.iter().find(|w| same(w, ln)) {
                count = count.saturating_add(w.waits);
                longest = longest.max(w.longest_cycles);
            }
        }
        if n > 0 {
            let _ = writeln!(
                s,
                "  {} waited too: {:.3} us in {count} wait(s) in all, longest {:.3} us; every \
                 record collected ({recs} in all), none dropped",
                plural(n, "other lane", "other lanes"),
                us(stall),
                us(longest)
            );
        }
        if !st.inflated_tasks.is_empty() {
            let _ = writeln!(
                s,
                "  {} task(s) were seen finishing while their scheduler thread's lane was \
                 stalled (finish, latency and tail may be inflated; start and end stay exact): {}",
                st.inflated_tasks.len(),
                st.inflated_tasks.join(", ")
            );
        }
        let (n, recs) = l
            .lanes
            .iter()
            .filter(|ln| quiet(ln))
            .fold((0u64, 0u64), |(n, r), ln| (n + 1, r.saturating_add(ln.produced)));
        let mut extra = Vec::new();
        if let Some([records, overwrite]) = l.args_dropped {
            extra.push(format!(
                "args_dump: dropped_records {records}, dropped_overwrite {overwrite}"
            ));
        }
        if let Some(d) = l.scopes_dropped {
            extra.push(format!("scope_stats: dropped {d}"));
        }
        let extra =
            if extra.is_empty() { String::new() } else { format!("; {}", extra.join("; ")) };
        let all = n == l.lanes.len() as u64 && l.reconciles;
        if n > 0 {
            let which = if n == l.lanes.len() as u64 {
                format!("all {}", plural(n, "lane", "lanes"))
            } else {
                plural(n, "other lane", "other lanes")
            };
            let _ = writeln!(
                s,
                "  {which}: every record collected ({recs} in all), none dropped, no stall{}",
                if all { format!("; reconcile ok{extra}") } else { String::new() }
            );
        }
        if !all {
            let _ = writeln!(
                s,
                "  total: produced {}, collected {}, dropped {}; reconcile {}{extra}",
                l.produced,
                l.collected,
                l.dropped,
                if l.reconciles { "ok" } else { "MISMATCH" }
            );
        }
    }

    /// The per-kernel table as CSV (a header, then one line per kernel of at most `top`): every
    /// column of the text's table, times in microseconds, plus the kernel's function id.
    pub fn kernels_csv(&self, top: Option<usize>) -> String {
        let hz = self.run.clock_hz;
        let avg = |sum: u64, n: u64| if n == 0 { 0.0 } else { us(hz, sum) / n as f64 };
        let mut s = String::from(
            "kernel,func_id,tasks,blocks,total_us,share,exec_us,latency_us,head_us,\
             head_prop_us,head_setup_us,tail_us,exec_pct\n",
        );
        let shown = top.unwrap_or(usize::MAX).min(self.kernels.len());
        for k in &self.kernels[..shown] {
            let n = k.with_aicpu;
            let quoted = if k.kernel.contains([',', '"', '\n']) {
                format!("\"{}\"", k.kernel.replace('"', "\"\""))
            } else {
                k.kernel.clone()
            };
            let _ = writeln!(
                s,
                "{quoted},{},{},{},{:.3},{:.4},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{}",
                k.func_id.map_or_else(String::new, |f| f.to_string()),
                k.tasks,
                k.blocks,
                us(hz, k.exec_cycles),
                k.exec_share,
                avg(k.exec_cycles, k.blocks),
                avg(k.latency_cycles, n),
                avg(k.head_propagation_cycles.saturating_add(k.head_setup_cycles), n),
                avg(k.head_propagation_cycles, n),
                avg(k.head_setup_cycles, n),
                avg(k.tail_cycles, n),
                k.exec_pct.map_or_else(String::new, |p| format!("{p:.1}"))
            );
        }
        s
    }

    /// Sorts the kernels by `key` (the most first; by name: alphabetical).
    pub fn sort_kernels(&mut self, key: KernelSort) {
        let hz = self.run.clock_hz;
        let per = |sum: u64, n: u64| if n == 0 { 0.0 } else { us(hz, sum) / n as f64 };
        match key {
            KernelSort::Total => self.kernels.sort_by_key(|k| std::cmp::Reverse(k.exec_cycles)),
            KernelSort::Tasks => self.kernels.sort_by_key(|k| std::cmp::Reverse(k.tasks)),
            KernelSort::Exec => self.kernels.sort_by(|a, b| {
                per(b.exec_cycles, b.blocks).total_cmp(&per(a.exec_cycles, a.blocks))
            }),
            KernelSort::Latency => self.kernels.sort_by(|a, b| {
                per(b.latency_cycles, b.with_aicpu).total_cmp(&per(a.latency_cycles, a.with_aicpu))
            }),
            KernelSort::Name => self.kernels.sort_by(|a, b| a.kernel.cmp(&b.kernel)),
        }
    }

    /// One line that answers first: how busy the cores were, where the critical path's time
    /// went (shares of the makespan), what was lost and whether any lane stalled.
    pub fn verdict(&self) -> String {
        let mut parts = Vec::new();
        if !self.cores.is_empty() {
            let ran = self.cores.iter().filter(|c| c.blocks > 0).count();
            let busy = self.cores.iter().fold(0u64, |a, c| a.saturating_add(c.busy_cycles));
            let whole = self.run.wall_cycles.saturating_mul(self.cores.len() as u64);
            parts.push(format!(
                "cores {:.1} % busy ({ran} of {} ran blocks)",
                share(busy, whole),
                self.cores.len()
            ));
        }
        if let Some(o) = &self.critical_path.observed {
            let m = o.makespan_cycles;
            let stall = o
                .data_wait_cycles
                .saturating_add(o.core_wait_cycles)
                .saturating_add(o.front_gap_cycles);
            parts.push(format!(
                "critical path: compute {:.1} %, stall {:.1} % (data wait {:.1} %, core wait \
                 {:.1} %, front gap {:.1} %)",
                share(o.compute_cycles, m),
                share(stall, m),
                share(o.data_wait_cycles, m),
                share(o.core_wait_cycles, m),
                share(o.front_gap_cycles, m)
            ));
        }
        let l = &self.loss;
        let lossy = l.lanes.iter().filter(|ln| ln.dropped > 0).count() as u64;
        parts.push(match (l.dropped, l.reconciles) {
            (0, true) => format!("loss: none ({} records, every one collected)", l.produced),
            (d, true) => format!(
                "loss: {d} of {} records dropped on {}",
                l.produced,
                plural(lossy, "lane", "lanes")
            ),
            (d, false) => format!(
                "loss: {d} of {} records dropped, and the accounting does NOT reconcile",
                l.produced
            ),
        });
        let st = &self.stalls;
        parts.push(if st.lanes.is_empty() {
            "no lane stalled".into()
        } else {
            format!(
                "{} stalled for {}",
                plural(st.lanes.len() as u64, "lane", "lanes"),
                duration(us(self.run.clock_hz, st.total_stall_cycles) * 1e3)
            )
        });
        parts.push(format!(
            "order check: {}",
            plural(self.order_violations, "violation", "violations")
        ));
        // The subsystems that recorded nothing, as `Subsystem::no_records_line` words it: said
        // here, in the verdict's line, and drawn as no table.
        if !self.run.no_records.is_empty() {
            parts.push(format!("no records: {}", self.run.no_records.join(", ")));
        }
        format!("verdict: {}", parts.join("; "))
    }

    fn critical_path_text(&self, s: &mut String) {
        let hz = self.run.clock_hz;
        let cp = &self.critical_path;
        let _ = writeln!(s, "\nCritical path:");
        let chain = |p: &StaticPath| {
            let n = p.tasks.len();
            let show = |t: &super::critical::PathTask| format!("{} {}", t.task_id, t.kernel);
            if n <= PATH_SHOWN {
                return p.tasks.iter().map(show).collect::<Vec<_>>().join(" -> ");
            }
            let head: Vec<String> = p.tasks[..PATH_SHOWN - 2].iter().map(show).collect();
            format!(
                "{} -> ... ({} more) -> {} -> {}",
                head.join(" -> "),
                n - PATH_SHOWN,
                show(&p.tasks[n - 2]),
                show(&p.tasks[n - 1])
            )
        };
        for p in [&cp.static_by_time, &cp.static_by_count].into_iter().flatten() {
            let what = match p.weight {
                Weight::Time => format!(
                    "static by time: {:.3} us, {}",
                    us(hz, p.length),
                    plural(p.tasks.len() as u64, "task", "tasks")
                ),
                Weight::Count => {
                    format!("static by count: {}", plural(p.length, "task", "tasks"))
                }
            };
            let _ = writeln!(s, "  {what}: {}", chain(p));
        }
        if let Some(o) = &cp.observed {
            let d = |c: u64| duration(us(hz, c) * 1e3);
            let _ = writeln!(
                s,
                "  observed: makespan {} = compute {} + data wait {} + core wait {} + front gap \
                 {}, {}:",
                d(o.makespan_cycles),
                d(o.compute_cycles),
                d(o.data_wait_cycles),
                d(o.core_wait_cycles),
                d(o.front_gap_cycles),
                plural(o.tasks.len() as u64, "task", "tasks")
            );
            let n = o.tasks.len();
            for (i, t) in o.tasks.iter().enumerate() {
                if n > OBSERVED_SHOWN && i == OBSERVED_SHOWN - 2 {
                    let _ = writeln!(s, "    ... ({} more)", n - OBSERVED_SHOWN);
                }
                if n > OBSERVED_SHOWN && (OBSERVED_SHOWN - 2..n - 2).contains(&i) {
                    continue;
                }
                let why = match t.wait {
                    WaitKind::FrontGap => "front gap",
                    WaitKind::Data => "data wait",
                    WaitKind::Core => "core wait",
                };
                let _ = writeln!(
                    s,
                    "    {:<8} {:<16} core{:<4} compute {:>10.3} us after {} {:.3} us",
                    t.task_id,
                    t.kernel,
                    t.core,
                    us(hz, t.compute_cycles),
                    why,
                    us(hz, t.wait_cycles)
                );
            }
        }
        for n in &cp.notes {
            let _ = writeln!(s, "  {n}");
        }
    }
}

fn us_ns(ns: u64) -> f64 {
    ns as f64 / 1e3
}

fn pair_us(p: &Pair) -> String {
    format!("{:.3} -> {:.3} us ({:+.3} us)", us_ns(p.a), us_ns(p.b), p.delta as f64 / 1e3)
}

fn pair_n(p: &Pair) -> String {
    format!("{} -> {} ({:+})", p.a, p.b, p.delta)
}

impl Diff {
    /// The text of `ferry diff` (B against A; at most `top` kernels, all with `None`).
    pub fn text(&self, top: Option<usize>) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "ferry diff (B against A; + is B slower or larger):");
        if !self.setup.is_empty() {
            let _ = writeln!(
                s,
                "  the runs were set up differently (what follows compares them anyway):"
            );
            for c in &self.setup {
                let _ = writeln!(s, "    {}: {} -> {}", c.what, c.a, c.b);
            }
        }
        for (run, o) in ["A", "B"].iter().zip(&self.outcome) {
            if let Some(e) = o.as_ref().and_then(RunOutcome::failure) {
                let _ = writeln!(s, "  run {run} failed (its profile is complete): {e}");
            }
        }
        let _ = writeln!(s, "  wall: {}", pair_us(&self.wall_ns));
        let _ = writeln!(s, "  tasks: {}, blocks: {}", pair_n(&self.tasks), pair_n(&self.blocks));
        match &self.regression {
            Some(k) => {
                let _ = writeln!(s, "  biggest kernel regression: {k}");
            }
            None => {
                let _ = writeln!(s, "  no kernel regressed");
            }
        }
        let shown = top.unwrap_or(usize::MAX).min(self.kernels.len());
        let _ = writeln!(s, "\nPer kernel (total exec, the biggest regression first):");
        let _ = writeln!(
            s,
            "  {:<16} {:>14} {:>14} {:>14} {:>8} {:>10}",
            "kernel", "a_us", "b_us", "delta_us", "ratio", "tasks"
        );
        for k in &self.kernels[..shown] {
            let _ = writeln!(
                s,
                "  {:<16} {:>14.3} {:>14.3} {:>+14.3} {:>8} {:>10}",
                k.kernel,
                us_ns(k.exec_ns.a),
                us_ns(k.exec_ns.b),
                k.exec_ns.delta as f64 / 1e3,
                k.ratio.map_or("-".to_string(), |r| format!("{r:.2}x")),
                format!("{}->{}", k.tasks.a, k.tasks.b)
            );
        }
        let cp = &self.critical_path;
        let _ = writeln!(s, "\nCritical path:");
        let mut any = false;
        let mut line = |name: &str, v: String| {
            any = true;
            let _ = writeln!(s, "  {name}: {v}");
        };
        if let Some(p) = &cp.static_by_time_ns {
            line("static by time", pair_us(p));
        }
        if let Some(p) = &cp.static_by_count {
            let same = match cp.same_static_kernels {
                Some(true) => ", same kernels",
                Some(false) => ", different kernels",
                None => "",
            };
            line("static by count", format!("{}{same}", pair_n(p)));
        }
        if let Some(p) = &cp.observed_makespan_ns {
            line("observed makespan", pair_us(p));
        }
        if let Some(p) = &cp.observed_compute_ns {
            line("observed compute", pair_us(p));
        }
        if let Some(p) = &cp.observed_wait_ns {
            line("observed waits", pair_us(p));
        }
        if let Some(p) = &cp.observed_tasks {
            line("observed tasks", pair_n(p));
        }
        if !any {
            let _ = writeln!(s, "  not in both runs");
        }
        let st = &self.stalls;
        let _ = writeln!(
            s,
            "\nStalls: {}; stalled lanes {}; inflated tasks {}",
            pair_us(&st.total_ns),
            pair_n(&st.stalled_lanes),
            pair_n(&st.inflated_tasks)
        );
        let l = &self.loss;
        let rec = |b: bool| if b { "ok" } else { "MISMATCH" };
        let _ = writeln!(
            s,
            "Loss: produced {}; dropped {}; reconcile {} / {}",
            pair_n(&l.produced),
            pair_n(&l.dropped),
            rec(l.reconciles[0]),
            rec(l.reconciles[1])
        );
        s
    }
}
