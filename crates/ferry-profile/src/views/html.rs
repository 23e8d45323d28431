//! The two self-contained HTML pages: the swimlane (`ferry view`) and the scope occupancy plot
//! (`ferry scopes`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::plural;
use crate::model::RunModel;
use crate::scopes::{ScopePhase, ScopeRow, ScopeStats};

/// Escapes text for HTML/SVG.
pub fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title><style>\
body{{font-family:sans-serif;margin:16px}} table{{border-collapse:collapse}} \
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}} \
.danger{{background:#f4b6b6}} .warn{{background:#f9dfa8}} .ok{{background:#c8e6c9}} \
svg text{{font-size:11px}}</style></head><body><h1>{t}</h1>\n{body}</body></html>\n",
        t = html_escape(title)
    )
}

/// The `ferry view` page: one self-contained, interactive HTML swimlane (no network, no
/// resources outside the file). A canvas draws a row per busy core (kernel executions, overlap
/// lanes as extra rows), per AICPU thread (scheduler phases), per orchestrator (submits), a
/// scheduler-view row per busy core (dispatch → finish) and a row per lane that stalled (marked,
/// its waits in red); idle rows are folded into one line per group. Below the rows, the scope
/// occupancy and ready-queue depth counters as step plots. Time runs from the run's start.
///
/// Wheel zooms around the pointer (shift+wheel pans), drag pans, keys `+`/`-`/`w`/`s` zoom,
/// arrows/`a`/`d` pan, `0` resets, `/` searches by kernel or task id, Enter or `n` goes to the
/// next hit; a click on a task shows its arguments, PMU counters, predecessors and successors.
/// Slices that fall into a pixel already drawn merge into it, so a frame draws at most about
/// one rectangle per pixel column per row, whatever the task count. The page keeps its state in
/// `window.ferryView` (visible range, rectangles drawn, search hits, the selection) for scripts.
///
/// The data is [`view_data`](super::view_data)'s: compact, compressed, inflated by the
/// browser's own `DecompressionStream`.
pub fn swimlane_html(run: &RunModel) -> String {
    swimlane_html_of(run, None)
}

/// [`swimlane_html`] of a run that failed with `failure` (from its manifest's outcome): the
/// page's bar says so, in red, before anything else.
pub fn swimlane_html_of(run: &RunModel, failure: Option<&str>) -> String {
    // The report under the canvas is `ferry report`'s, a failed run's error and the tasks it
    // left undone included.
    let outcome = failure
        .map(|e| crate::RunOutcome::Failed { error: e.to_string(), task: run.meta.failed.clone() });
    let text = crate::analysis::Report { outcome, ..crate::analysis::report(run) }.text(None);
    swimlane_html_reporting(run, failure, &text)
}

/// [`swimlane_html_of`] with `report_text` as the page's report (a session's report for a
/// session read as one model, [`session_model`](crate::session_model)).
pub fn swimlane_html_reporting(run: &RunModel, failure: Option<&str>, report_text: &str) -> String {
    let data = super::viewer::view_data(run);
    let title = html_escape(&format!("ferry view ({})", run.meta.arch));
    let mut failed = failure.map_or_else(String::new, |e| {
        format!(
            "<span id=\"fv-failed\">the run failed (its profile is complete): {}</span> ",
            html_escape(e)
        )
    });
    // The task whose kernel failed, named as every command names it; a click goes to it.
    if let Some(f) = &run.meta.failed {
        let ran = run.tasks().iter().any(|t| t.task_id == f.id);
        let note = if ran { "" } else { " (it never finished: no slice)" };
        let _ = write!(
            failed,
            "<button id=\"fv-failed-task\" title=\"go to the failed task\">failed: {}{note}</button> ",
            html_escape(&f.label())
        );
    }
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title><style>{css}</style></head>\
<body><div id=\"fv-bar\"><b>{title}</b> {failed}<input id=\"fv-search\" placeholder=\"search kernel or task id (/)\" size=\"28\"> \
<span id=\"fv-hits\"></span> <button id=\"fv-reset\">reset zoom (0)</button> <span id=\"fv-range\">loading…</span>\
<span class=\"fv-help\">wheel: zoom · shift+wheel / drag / arrows: pan · +/-: zoom · click: details</span>\
<div id=\"fv-legend\"></div></div>\
<div id=\"fv-scroll\"><div id=\"fv-spacer\"></div><canvas id=\"fv-canvas\"></canvas></div>\
<p id=\"fv-folded\"></p>{no_records}<div id=\"fv-details\"></div>\
<h3>Report</h3><pre id=\"fv-report\">{report}</pre>\
<script id=\"ferry-data\" type=\"application/json\">{json}</script><script>{js}</script></body></html>\n",
        css = VIEW_CSS,
        no_records = no_records_line(run),
        report = html_escape(report_text),
        json = data.json,
        js = VIEW_JS,
    )
}

/// The page's one line for the subsystems that were on but recorded nothing (no rows drawn for
/// them); empty when each recorded something.
fn no_records_line(run: &RunModel) -> String {
    let line = crate::Subsystem::no_records_line(&run.no_records());
    if line.is_empty() {
        return line;
    }
    format!("<p id=\"fv-no-records\">{}</p>", html_escape(&line))
}

const VIEW_JS: &str = include_str!("viewer.js");
const VIEW_CSS: &str = "body{font-family:sans-serif;margin:8px}\
#fv-bar{position:sticky;top:0;background:#fff;padding:4px 0;z-index:2;font-size:13px}\
#fv-bar span{margin-left:8px;color:#444}.fv-help{color:#888!important;font-size:11px}\
#fv-scroll{position:relative;height:72vh;overflow-y:auto;border:1px solid #ccc}\
#fv-canvas{position:sticky;top:0;left:0;display:block;margin-top:0}#fv-spacer{position:absolute;width:1px}\
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}\
.fv-link{font-family:monospace;font-size:11px;margin:1px}#fv-details h3{margin:8px 0 2px}\
#fv-details h4{margin:6px 0 2px}#fv-legend{font-size:11px;color:#333}#fv-folded{color:#666;font-size:12px}\
#fv-bar #fv-failed{color:#c00;font-weight:bold}\
#fv-no-records{color:#666;font-size:12px}#fv-failed-task{color:#f00;font-weight:bold;border:1px solid #f00;background:#fff}";

/// Occupancy of one scope instance (begin/end paired by `(ring, site)`).
#[derive(Clone, Debug, PartialEq)]
pub struct ScopeUsage {
    /// `file:line`.
    pub site: String,
    /// What the site is called ([`ScopeStats::names`]); the site itself when unnamed.
    pub name: String,
    /// Ring.
    pub ring: i32,
    /// Depth.
    pub depth: i32,
    /// Task window: `(high water = end.head − begin.tail, real = end.head − end.tail,
    /// alloc = end.head − begin.head)`.
    pub task_window: (i64, i64, i64),
    /// Heap in bytes, same triple.
    pub heap: (i64, i64, i64),
    /// Dep pool, same triple.
    pub dep_pool: (i64, i64, i64),
    /// Live tensormap entries at the end.
    pub tensormap: i64,
    /// Peak / capacity per metric (task window, heap, dep pool, tensormap); `None` without a
    /// capacity.
    pub risk: [Option<f64>; 4],
    /// Whether the heap's fill counts as risk: not when the capacity is the run's own
    /// reservation ([`ScopeStats::heap_reserved`]), which a run sized to its need fills by
    /// construction.
    pub heap_is_risk: bool,
}

impl ScopeUsage {
    /// The worst risk among the metrics that count ([`heap_is_risk`](Self::heap_is_risk)).
    pub fn worst(&self) -> f64 {
        self.risk
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != 1 || self.heap_is_risk)
            .filter_map(|(_, r)| *r)
            .fold(0.0, f64::max)
    }
}

/// `danger` at ≥ 80 % of capacity, `warn` at ≥ 50 %, else `ok`.
pub fn risk_class(r: f64) -> &'static str {
    if r >= 0.8 {
        "danger"
    } else if r >= 0.5 {
        "warn"
    } else {
        "ok"
    }
}

/// Pairs begin/end records per `(ring, site)` with a stack; returns the scopes in end order and
/// the number of unmatched records.
pub fn scope_usage(s: &ScopeStats) -> (Vec<ScopeUsage>, usize) {
    let mut open: BTreeMap<(i32, &str), Vec<&ScopeRow>> = BTreeMap::new();
    let mut out = Vec::new();
    let mut unmatched = 0;
    let ring_cap = |v: &[i64; 4], r: i32| v.get(r as usize).copied().filter(|&c| c > 0);
    for r in &s.records {
        match r.phase {
            ScopePhase::Begin => open.entry((r.ring, r.site.as_str())).or_default().push(r),
            ScopePhase::End => {
                let Some(b) = open.get_mut(&(r.ring, r.site.as_str())).and_then(Vec::pop) else {
                    unmatched += 1;
                    continue;
                };
                // Saturating: positions read from a file may be anything.
                let tri = |bt: i64, bh: i64, et: i64, eh: i64| {
                    (eh.saturating_sub(bt), eh.saturating_sub(et), eh.saturating_sub(bh))
                };
                let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                let tw = tri(
                    b.task_window_start,
                    b.task_window_end,
                    r.task_window_start,
                    r.task_window_end,
                );
                let heap = tri(
                    signed(b.heap_start),
                    signed(b.heap_end),
                    signed(r.heap_start),
                    signed(r.heap_end),
                );
                let dp = tri(b.dep_pool_start, b.dep_pool_end, r.dep_pool_start, r.dep_pool_end);
                let heap_caps = s.heap_max.map(signed);
                let frac = |peak: i64, cap: Option<i64>| cap.map(|c| peak as f64 / c as f64);
                out.push(ScopeUsage {
                    site: r.site.clone(),
                    name: s.label(&r.site).to_string(),
                    ring: r.ring,
                    depth: r.depth,
                    task_window: tw,
                    heap,
                    dep_pool: dp,
                    tensormap: r.tensormap,
                    risk: [
                        frac(tw.0, ring_cap(&s.task_window_max, r.ring)),
                        frac(heap.0, ring_cap(&heap_caps, r.ring)),
                        frac(dp.0, ring_cap(&s.dep_pool_max, r.ring)),
                        frac(r.tensormap, (s.tensormap_max > 0).then_some(s.tensormap_max)),
                    ],
                    heap_is_risk: !s.heap_reserved,
                });
            }
        }
    }
    unmatched += open.values().map(Vec::len).sum::<usize>();
    (out, unmatched)
}

/// The `ferry scopes` page: a self-contained HTML plot of scope occupancy (inline SVG bars per
/// scope and metric, coloured by risk) and the table behind it.
pub fn scopes_html(s: &ScopeStats) -> String {
    let (usage, unmatched) = scope_usage(s);
    let metrics = ["task window", "heap", "dep pool", "tensormap"];
    let colour = |r: f64| match risk_class(r) {
        "danger" => "#d62728",
        "warn" => "#ff9f1c",
        _ => "#2ca02c",
    };
    // One row per scope instance, its four metrics side by side: a run of 64 scopes is 64 rows.
    let (label_w, bar_w, col_w, row_h) = (240.0, 130.0, 190.0, 16.0);
    let h = (usage.len() + 1) as f64 * row_h + 8.0;
    let mut svg =
        format!("<svg width=\"{}\" height=\"{h}\">\n", label_w + col_w * metrics.len() as f64);
    for (i, m) in metrics.iter().enumerate() {
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"12\" font-weight=\"bold\">{m}</text>",
            label_w + col_w * i as f64
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"4\" y=\"12\" font-weight=\"bold\">scope (name #n, in closing order)</text>"
    );
    let mut nth: BTreeMap<&str, usize> = BTreeMap::new();
    let mut y = row_h;
    for u in &usage {
        let n = nth.entry(u.name.as_str()).or_insert(0);
        *n += 1;
        let _ = write!(
            svg,
            "<text x=\"4\" y=\"{}\">{} #{} (depth {}, ring {})</text>",
            y + 12.0,
            html_escape(&u.name),
            n,
            u.depth,
            u.ring
        );
        for (i, (m, r)) in metrics.iter().zip(u.risk).enumerate() {
            let r = r.unwrap_or(0.0);
            // A reservation's fill is shown in a neutral colour: it is no risk.
            let fill = if i == 1 && !u.heap_is_risk { "#7f7f7f" } else { colour(r) };
            let x = label_w + col_w * i as f64;
            let _ = write!(
                svg,
                "<rect x=\"{x}\" y=\"{}\" width=\"{bar_w}\" height=\"{}\" fill=\"#eee\"/>\
<rect x=\"{x}\" y=\"{}\" width=\"{:.1}\" height=\"{}\" fill=\"{}\"><title>{} {m}: {:.1}% of capacity</title></rect>\
<text x=\"{}\" y=\"{}\">{:.1}%</text>",
                y + 2.0,
                row_h - 4.0,
                y + 2.0,
                (r.min(1.0) * bar_w).max(1.0),
                row_h - 4.0,
                fill,
                html_escape(&u.name),
                r * 100.0,
                x + bar_w + 4.0,
                y + 12.0,
                r * 100.0
            );
        }
        svg.push('\n');
        y += row_h;
    }
    svg.push_str("</svg>\n");
    let mut table = String::from(
        "<table><tr><th>scope</th><th>site</th><th>ring</th><th>depth</th><th>task window hw/real/alloc</th>\
<th>heap MiB hw/real/alloc</th><th>dep pool hw/real/alloc</th><th>tensormap</th><th>risk</th></tr>\n",
    );
    let mib = |b: i64| b as f64 / (1024.0 * 1024.0);
    for u in &usage {
        let w = u.worst();
        let _ = writeln!(
            table,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/{}/{}</td><td>{:.3}/{:.3}/{:.3}</td><td>{}/{}/{}</td><td>{}</td><td>{:.1}% {}</td></tr>",
            risk_class(w),
            html_escape(&u.name),
            html_escape(&u.site),
            u.ring,
            u.depth,
            u.task_window.0,
            u.task_window.1,
            u.task_window.2,
            mib(u.heap.0),
            mib(u.heap.1),
            mib(u.heap.2),
            u.dep_pool.0,
            u.dep_pool.1,
            u.dep_pool.2,
            u.tensormap,
            w * 100.0,
            risk_class(w)
        );
    }
    table.push_str("</table>\n");
    let body = format!(
        "<p>{}; {} unmatched begin/end records; {} records, {} dropped{}. Risk = peak / \
capacity: danger &ge; 80 %, warn &ge; 50 %{}.</p>\n{svg}{table}",
        plural(usage.len() as u64, "scope", "scopes"),
        unmatched,
        s.total,
        s.dropped,
        if s.fatal { "; FATAL latched" } else { "" },
        if s.heap_reserved {
            "; the heap's capacity is the run's own scratch reservation, sized to what it asked \
             for, so its fill (grey) is shown but is no risk"
        } else {
            ""
        }
    );
    page("ferry scope stats", &body)
}
