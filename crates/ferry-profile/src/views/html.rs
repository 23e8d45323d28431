//! The two self-contained HTML pages: the swimlane (`ferry view`) and the scope occupancy plot
//! (`ferry scopes`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{plural, report};
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

const PALETTE: [&str; 8] =
    ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#bab0ac"];

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

/// One row of the swimlane page.
struct Row {
    label: String,
    bars: Vec<(u64, u64, String, String)>, // start, end, colour, tooltip
}

/// The `ferry view` page: one self-contained HTML swimlane (inline SVG, no scripts, no network):
/// a row per core (kernel executions, overlap lanes as extra rows), per AICPU thread (scheduler
/// phases), a scheduler-view row per core (dispatch → finish), and a row per lane that stalled
/// (its waits in red), then the report as text.
pub fn swimlane_html(run: &RunModel) -> String {
    use crate::perfetto::{plan, TrackKind};
    let p = plan(run);
    let names: BTreeMap<u64, String> = p.tracks.iter().map(|t| (t.uuid, t.name.clone())).collect();
    let mut rows: Vec<Row> = Vec::new();
    let mut row_of: BTreeMap<u64, usize> = BTreeMap::new();
    for t in &p.tracks {
        if matches!(t.kind, TrackKind::Process { .. } | TrackKind::Counter) {
            continue;
        }
        row_of.insert(t.uuid, rows.len());
        rows.push(Row { label: names[&t.uuid].clone(), bars: Vec::new() });
    }
    let mut colour: BTreeMap<std::sync::Arc<str>, &str> = BTreeMap::new();
    for s in &p.slices {
        let Some(&r) = row_of.get(&s.track) else { continue };
        let n = colour.len();
        let c = if s.category == "dfx" {
            "#d62728"
        } else {
            colour.entry(s.name.clone()).or_insert(PALETTE[n % PALETTE.len()])
        };
        let mut tip = format!(
            "{} [{} ns .. {} ns] {} ns",
            s.name,
            s.start_ns,
            s.end_ns,
            s.end_ns.saturating_sub(s.start_ns)
        );
        for (k, v) in &s.args {
            let _ = write!(tip, " {k}={v:#x}");
        }
        rows[r].bars.push((s.start_ns, s.end_ns, c.to_string(), tip));
    }
    let t0 = p.slices.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let t1 = p.slices.iter().map(|s| s.end_ns).max().unwrap_or(1).max(t0.saturating_add(1));
    let span = (t1 - t0).max(1);
    let (label_w, plot_w, row_h) = (220.0, 1000.0, 18.0);
    let x = |t: u64| label_w + t.saturating_sub(t0) as f64 * plot_w / span as f64;
    let h = rows.len() as f64 * row_h + 30.0;
    let mut svg = format!("<svg width=\"{}\" height=\"{h}\">\n", label_w + plot_w + 10.0);
    for (i, r) in rows.iter().enumerate() {
        let y = i as f64 * row_h;
        let _ = writeln!(
            svg,
            "<text x=\"4\" y=\"{}\">{}</text><line x1=\"{label_w}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#eee\"/>",
            y + 13.0,
            html_escape(&r.label),
            label_w + plot_w,
            y + row_h,
            y + row_h
        );
        for (s, e, c, tip) in &r.bars {
            let _ = writeln!(
                svg,
                "<rect x=\"{:.2}\" y=\"{}\" width=\"{:.2}\" height=\"{}\" fill=\"{c}\"><title>{}</title></rect>",
                x(*s),
                y + 2.0,
                (x(*e) - x(*s)).max(1.0),
                row_h - 4.0,
                html_escape(tip)
            );
        }
    }
    // Five evenly spaced time ticks under the rows.
    for k in 0..=4u64 {
        let t = t0.saturating_add((u128::from(span) * u128::from(k) / 4) as u64);
        let anchor = match k {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.2}\" x2=\"{x:.2}\" y1=\"0\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{x:.2}\" y=\"{}\" text-anchor=\"{anchor}\">{} ns</text>",
            h - 22.0,
            h - 8.0,
            t,
            x = x(t)
        );
    }
    svg.push_str("</svg>\n");
    let mut legend = String::from("<p>");
    for (name, c) in &colour {
        let _ = write!(
            legend,
            "<span style=\"color:{c}\">&#9632;</span> {} &nbsp; ",
            html_escape(name)
        );
    }
    legend.push_str("<span style=\"color:#d62728\">&#9632;</span> dfx backpressure stall</p>");
    let body = format!("{svg}{legend}<pre>{}</pre>", html_escape(&report(run)));
    page(&format!("ferry swimlane ({})", run.meta.arch), &body)
}

/// Occupancy of one scope instance (begin/end paired by `(ring, site)`).
#[derive(Clone, Debug, PartialEq)]
pub struct ScopeUsage {
    /// `file:line`.
    pub site: String,
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
    let (label_w, bar_w, row_h) = (260.0, 600.0, 16.0);
    let h = (usage.len() * metrics.len()) as f64 * row_h + 20.0;
    let mut svg = format!("<svg width=\"{}\" height=\"{h}\">\n", label_w + bar_w + 80.0);
    let mut y = 0.0;
    for u in &usage {
        for (i, (m, r)) in metrics.iter().zip(u.risk).enumerate() {
            let r = r.unwrap_or(0.0);
            // A reservation's fill is shown in a neutral colour: it is no risk.
            let fill = if i == 1 && !u.heap_is_risk { "#7f7f7f" } else { colour(r) };
            let _ = writeln!(
                svg,
                "<text x=\"4\" y=\"{}\">{} r{} {}</text><rect x=\"{label_w}\" y=\"{}\" width=\"{:.1}\" height=\"{}\" fill=\"{}\"><title>{:.1}% of capacity</title></rect><text x=\"{}\" y=\"{}\">{:.1}%</text>",
                y + 12.0,
                html_escape(&u.site),
                u.ring,
                m,
                y + 2.0,
                (r.min(1.0) * bar_w).max(1.0),
                row_h - 4.0,
                fill,
                r * 100.0,
                label_w + bar_w + 4.0,
                y + 12.0,
                r * 100.0
            );
            y += row_h;
        }
    }
    svg.push_str("</svg>\n");
    let mut table = String::from(
        "<table><tr><th>site</th><th>ring</th><th>depth</th><th>task window hw/real/alloc</th>\
<th>heap MiB hw/real/alloc</th><th>dep pool hw/real/alloc</th><th>tensormap</th><th>risk</th></tr>\n",
    );
    let mib = |b: i64| b as f64 / (1024.0 * 1024.0);
    for u in &usage {
        let w = u.worst();
        let _ = writeln!(
            table,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}/{}/{}</td><td>{:.3}/{:.3}/{:.3}</td><td>{}/{}/{}</td><td>{}</td><td>{:.1}% {}</td></tr>",
            risk_class(w),
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
