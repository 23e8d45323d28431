//! The text renderings of [`Report`] and [`Diff`]: what `ferry report` and `ferry diff` print
//! without `--json`.

use std::fmt::Write as _;

use super::critical::{StaticPath, WaitKind, Weight};
use super::diff::{Diff, Pair};
use super::Report;
use crate::RunOutcome;

/// Tasks of a path the text shows (the first ones and the last two); `--json` has them all.
const PATH_SHOWN: usize = 24;

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
             wall {:.3} us",
            r.run.map_or_else(String::new, |l| format!("run {} of {}, ", l.index, l.runs)),
            r.arch,
            hz,
            r.swimlane_level,
            plural(r.tasks, "task", "tasks"),
            plural(u64::from(r.cores), "core", "cores"),
            us(r.wall_cycles),
        );
        if let Some(e) = self.outcome.as_ref().and_then(RunOutcome::failure) {
            let _ = writeln!(s, "the run failed (its profile is complete): {e}");
        }

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
        for c in self.cores.iter().filter(|c| c.blocks > 0) {
            let _ = writeln!(
                s,
                "  core{:<4} {} thread {:>2}: {:>6} blocks, busy {:>12.3} us, {:>5.1}%",
                c.core,
                c.core_type.name(),
                c.thread,
                c.blocks,
                us(c.busy_cycles),
                c.utilisation * 100.0
            );
        }
        if !idle.is_empty() {
            let _ = writeln!(
                s,
                "  {} ran no block: core {}",
                plural(idle.len() as u64, "core", "cores"),
                idle.join(", ")
            );
        }

        if let Some(p) = &self.pmu {
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
            for k in p.kernels.iter().chain([&p.total]) {
                let _ = write!(s, "  {:<16} {:>6} {:>14}", k.kernel, k.rows, k.total_cycles);
                for v in &k.counters {
                    let _ = write!(s, " {v:>14}");
                }
                let _ = writeln!(s);
            }
        }

        self.critical_path_text(&mut s);

        let _ = writeln!(
            s,
            "\nOrder check (dispatch <= start <= end <= finish): {}",
            plural(self.order_violations, "violation", "violations")
        );
        if self.missing_aicpu_records > 0 {
            let _ = writeln!(
                s,
                "  {} AICore tasks have no AICPU dispatch/finish record",
                self.missing_aicpu_records
            );
        }

        let st = &self.stalls;
        let _ = writeln!(
            s,
            "\nStalled lanes (policy {:?}, budget {} cycles = {:.3} us per wait):",
            st.policy,
            st.budget_cycles,
            us(st.budget_cycles)
        );
        if st.lanes.is_empty() {
            let _ = writeln!(s, "  none");
        }
        for ln in &st.lanes {
            let _ = writeln!(
                s,
                "  {} (thread {}): stalled {:.3} us in {} wait(s), longest {:.3} us",
                ln.lane,
                ln.thread,
                us(ln.stall_cycles),
                ln.waits,
                us(ln.longest_cycles)
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

        let l = &self.loss;
        let _ = writeln!(
            s,
            "\nLoss accounting (transport records per lane; dep_gen and args lanes count 8-byte \
             words):"
        );
        let _ = writeln!(
            s,
            "  {:<24} {:>6} {:>10} {:>10} {:>8} {:>12}  reconcile",
            "lane", "thread", "produced", "collected", "dropped", "stall_us"
        );
        for ln in &l.lanes {
            let _ = writeln!(
                s,
                "  {:<24} {:>6} {:>10} {:>10} {:>8} {:>12.3}  {}",
                ln.lane,
                ln.thread,
                ln.produced,
                ln.collected,
                ln.dropped,
                us(ln.stall_cycles),
                if ln.reconciles { "ok" } else { "MISMATCH" }
            );
        }
        let _ = writeln!(
            s,
            "  total: produced {}, collected {}, dropped {}; reconcile {}",
            l.produced,
            l.collected,
            l.dropped,
            if l.reconciles { "ok" } else { "MISMATCH" }
        );
        if let Some([records, overwrite]) = l.args_dropped {
            let _ = writeln!(
                s,
                "  args_dump: dropped_records {records}, dropped_overwrite {overwrite}"
            );
        }
        if let Some(d) = l.scopes_dropped {
            let _ = writeln!(s, "  scope_stats: dropped {d}");
        }
        s
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
            let _ = writeln!(
                s,
                "  observed: makespan {:.3} us = compute {:.3} + data wait {:.3} + core wait {:.3} \
                 + front gap {:.3}, {}:",
                us(hz, o.makespan_cycles),
                us(hz, o.compute_cycles),
                us(hz, o.data_wait_cycles),
                us(hz, o.core_wait_cycles),
                us(hz, o.front_gap_cycles),
                plural(o.tasks.len() as u64, "task", "tasks")
            );
            let n = o.tasks.len();
            for (i, t) in o.tasks.iter().enumerate() {
                if n > PATH_SHOWN && i == PATH_SHOWN - 2 {
                    let _ = writeln!(s, "    ... ({} more)", n - PATH_SHOWN);
                }
                if n > PATH_SHOWN && (PATH_SHOWN - 2..n - 2).contains(&i) {
                    continue;
                }
                let why = match t.wait {
                    WaitKind::FrontGap => "front gap",
                    WaitKind::Data => "data wait",
                    WaitKind::Core => "core wait",
                };
                let _ = writeln!(
                    s,
                    "    {} {:<16} core{:<4} compute {:>10.3} us after {} {:.3} us",
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
