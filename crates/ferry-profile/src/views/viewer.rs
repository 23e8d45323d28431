//! The data of the interactive `ferry view` page: the rows, slices, tasks, PMU counters,
//! arguments, dependency edges and counter series of a run, in one compact encoding.
//!
//! Small, readable parts (row labels, names) go into a JSON header;
//! the bulk goes into one byte stream of LEB128 varints (times as deltas from the previous slice
//! of the row), compressed with raw DEFLATE and embedded as base64, which the page inflates with
//! the browser's own `DecompressionStream`. The stream's layout, in order:
//!
//! 1. per row (header `rows`, in order): per slice, `Δstart dur name task+1` (times in ns
//!    relative to the run's start, `name` an index into `strings`, `task` an index into the
//!    task table or 0 for none);
//! 2. per task (header `tasks` of them): `id_hi id_lo kernel+1 blocks`;
//! 3. PMU: per task, `0` (no row) or `1 core v0 … vK` (`K` = header `pmu` names, the first being
//!    `pmu_total_cycles`);
//! 4. arguments: per task `n`, then per argument `index role dtype ndims dims… stage value`
//!    (strings; `stage` 0 for the dependency graph's description, `value` 0 for none);
//! 5. edges (header `edges` of them): `succ zigzag(pred − succ)`, sorted by successor;
//! 6. per counter series (header `series`): `n`, then `Δt zigzag(Δvalue)` per sample.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use crate::model::RunModel;
use crate::perfetto::{self, TrackKind};
use crate::views::{format_payload, format_scalar};

/// A row of the page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewRow {
    /// Label.
    pub label: String,
    /// Group (`AICore`, `AICPU`, `Scheduler view`, `DFX lanes`, `Scopes`).
    pub group: String,
    /// `core`, `aicpu`, `orch`, `sched`, `stall`, `scope` or `overlap`.
    pub kind: &'static str,
    /// Slices on the row.
    pub slices: usize,
}

/// The page's data: the JSON header (with the compressed stream inside) and its parts' sizes.
#[derive(Clone, Debug)]
pub struct ViewData {
    /// The JSON header, ready to embed.
    pub json: String,
    /// The rows.
    pub rows: Vec<ViewRow>,
    /// Idle rows folded away (no slices): their labels.
    pub folded: Vec<String>,
    /// Distinct tasks.
    pub tasks: usize,
    /// Slices over all rows.
    pub slices: usize,
    /// Bytes of the varint stream before compression.
    pub raw_bytes: usize,
    /// Bytes after compression (before base64).
    pub packed_bytes: usize,
}

#[derive(Default)]
struct Strings {
    list: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

#[derive(Default)]
struct Stream(Vec<u8>);

impl Stream {
    fn u(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn i(&mut self, v: i64) {
        self.u(((v << 1) ^ (v >> 63)) as u64);
    }
}

/// Standard base64 (RFC 4648, with padding).
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let b = [c[0], c.get(1).copied().unwrap_or(0), c.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= c.len() {
                s.push(A[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// A JSON string literal of `s` that is also safe inside an HTML `<script>` element.
fn js_str(s: &str) -> String {
    let j = serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    j.replace("</", "<\\/").replace("<!--", "<\\!--")
}

fn js_list<'a>(it: impl IntoIterator<Item = &'a str>) -> String {
    let v: Vec<String> = it.into_iter().map(js_str).collect();
    format!("[{}]", v.join(","))
}

/// The groups of rows, in page order.
const GROUPS: [&str; 6] = ["Runs", "AICore", "AICPU", "Scheduler view", "DFX lanes", "Scopes"];

/// The group and kind of plan track `uuid` (`None`: not a row of the page).
fn row_kind(
    uuid: u64,
    kind: &TrackKind,
    root: &str,
    name: &str,
) -> Option<(&'static str, &'static str)> {
    if matches!(kind, TrackKind::Process { .. } | TrackKind::Counter) {
        return None;
    }
    // A session read as one: its runs and the gaps between them, above the cores.
    if uuid == perfetto::UUID_SESSION_RUNS {
        return Some(("Runs", "run"));
    }
    let k = if name.ends_with(" stall") {
        "stall"
    } else if name.contains(" overlap ") {
        "overlap"
    } else {
        match root {
            "AICore" => "core",
            "Scheduler view" => "sched",
            "AICPU" if (perfetto::uuid_orch(0)..perfetto::uuid_sched_view(0)).contains(&uuid) => {
                "orch"
            }
            "AICPU" => "aicpu",
            "Scope occupancy" => "scope",
            _ => return None,
        }
    };
    let g = match root {
        "AICore" => "AICore",
        "AICPU" => "AICPU",
        "Scheduler view" => "Scheduler view",
        "DFX lanes" => "DFX lanes",
        "Scope occupancy" => "Scopes",
        _ => return None,
    };
    Some((g, k))
}

/// Builds the page data of `run`.
pub fn view_data(run: &RunModel) -> ViewData {
    let p = perfetto::plan(run);
    let tasks = run.tasks();
    let m = &run.meta;
    let mut strings = Strings::default();

    // Task table: distinct task ids, in first-start order.
    let mut task_no: HashMap<u64, u64> = HashMap::new();
    let mut task_ids: Vec<u64> = Vec::new();
    let mut blocks: Vec<u64> = Vec::new();
    let mut task_kernel: Vec<Option<i32>> = Vec::new();
    for t in &tasks {
        let n = *task_no.entry(t.task_id).or_insert_with(|| {
            task_ids.push(t.task_id);
            blocks.push(0);
            task_kernel.push(t.func_id);
            task_ids.len() as u64 - 1
        });
        blocks[n as usize] += 1;
    }

    // Rows from the plan's tracks; a track's root process decides its group.
    let parent: HashMap<u64, u64> =
        p.tracks.iter().filter_map(|t| Some((t.uuid, t.parent?))).collect();
    let names: HashMap<u64, &str> = p.tracks.iter().map(|t| (t.uuid, t.name.as_str())).collect();
    let root = |mut u: u64| {
        while let Some(&q) = parent.get(&u) {
            u = q;
        }
        names.get(&u).copied().unwrap_or("")
    };
    // The failed task's markers are the page's own drawing (from the header), not row slices.
    let mut by_track: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, s) in
        p.slices.iter().enumerate().filter(|(_, s)| s.category != perfetto::FAILED_CATEGORY)
    {
        by_track.entry(s.track).or_default().push(i);
    }
    let t0 = p
        .slices
        .iter()
        .filter(|s| !matches!(s.category, "run" | "clock") && !s.name.starts_with("loss "))
        .map(|s| s.start_ns)
        .min()
        .unwrap_or(0);
    let mut rows: Vec<ViewRow> = Vec::new();
    let mut folded: Vec<String> = Vec::new();
    let mut st = Stream::default();
    let mut t1 = t0;
    let none = Vec::new();
    // Rows by group (`GROUPS`), in plan order within a group: a stall row under an idle (folded) AICPU thread still joins the AICPU group.
    let mut order: Vec<(usize, &perfetto::PlanTrack, &'static str, &'static str)> = p
        .tracks
        .iter()
        .filter(|t| !t.name.starts_with("loss "))
        .filter_map(|t| {
            let (g, k) = row_kind(t.uuid, &t.kind, root(t.uuid), &t.name)?;
            let rank = GROUPS.iter().position(|&x| x == g);
            Some((rank.unwrap_or(4), t, g, k))
        })
        .collect();
    order.sort_by_key(|o| o.0);
    for (_, t, group, kind) in order {
        let list = by_track.get(&t.uuid).unwrap_or(&none);
        if list.is_empty() {
            folded.push(t.name.clone());
            continue;
        }
        rows.push(ViewRow { label: t.name.clone(), group: group.into(), kind, slices: list.len() });
        let mut prev = t0;
        for &i in list {
            let s = &p.slices[i];
            let start = s.start_ns.max(t0);
            st.u(start - prev.min(start));
            prev = start;
            st.u(s.end_ns.saturating_sub(start));
            t1 = t1.max(s.end_ns);
            st.u(strings.id(&s.name));
            let task = s.args.iter().find(|a| a.0 == "task_id").and_then(|a| task_no.get(&a.1));
            st.u(task.map_or(0, |&n| n + 1));
        }
    }

    // Tasks.
    for (n, &id) in task_ids.iter().enumerate() {
        st.u(id >> 32);
        st.u(id & 0xffff_ffff);
        st.u(task_kernel[n].map_or(0, |f| strings.id(&run.kernel_name(Some(f))) + 1));
        st.u(blocks[n]);
    }

    // PMU: the first row of each task.
    let mut pmu_names: Vec<String> = Vec::new();
    let mut pmu_row: Vec<Option<usize>> = vec![None; task_ids.len()];
    if let Some(pmu) = &run.pmu {
        pmu_names.push("pmu_total_cycles".into());
        pmu_names.extend(pmu.counter_names.iter().cloned());
        for (i, r) in pmu.rows.iter().enumerate() {
            if let Some(&n) = task_no.get(&r.task_id) {
                pmu_row[n as usize].get_or_insert(i);
            }
        }
    }
    for r in &pmu_row {
        match (r, &run.pmu) {
            (Some(i), Some(pmu)) => {
                let row = &pmu.rows[*i];
                st.u(1);
                st.u(row.core_id.into());
                st.u(row.pmu_total_cycles);
                for k in 0..pmu_names.len() - 1 {
                    st.u(row.counters.get(k).copied().unwrap_or(0));
                }
            }
            _ => st.u(0),
        }
    }

    // Arguments: the dependency graph's description of each, then each dumped value.
    type Arg = (u32, u64, u64, Vec<u64>, u64, u64);
    let mut args: Vec<Vec<Arg>> = vec![Vec::new(); task_ids.len()];
    if let Some(g) = &run.deps {
        for t in g.tasks.iter() {
            let Some(&n) = task_no.get(&t.task_id) else { continue };
            let a = &mut args[n as usize];
            if !a.is_empty() {
                continue;
            }
            for x in &t.args {
                a.push((x.idx, strings.id(&x.role), strings.id(&x.dtype), x.shape.to_vec(), 0, 0));
            }
        }
    }
    if let Some(d) = &run.args {
        for x in d.in_export_order() {
            let Some(&n) = task_no.get(&x.task_id) else { continue };
            let value = match (x.value, d.payload(&x)) {
                (Some(v), _) => Some(format_scalar(&x.dtype, v)),
                (None, Some(b)) => Some(format!("[{}]", format_payload(&x.dtype, &b, 8))),
                (None, None) => None,
            };
            let mut value = value.unwrap_or_default();
            if x.truncated {
                value.push_str(" (truncated)");
            }
            if x.overwritten {
                value.push_str(" (overwritten)");
            }
            let v = if value.is_empty() { 0 } else { strings.id(&value) + 1 };
            let role = strings.id(&x.role);
            let dtype = strings.id(&x.dtype);
            let stage = strings.id(&x.stage) + 1;
            args[n as usize].push((x.arg_index, role, dtype, x.shape.to_vec(), stage, v));
        }
    }
    for a in &args {
        st.u(a.len() as u64);
        for (idx, role, dtype, shape, stage, v) in a {
            st.u((*idx).into());
            st.u(*role);
            st.u(*dtype);
            st.u(shape.len() as u64);
            for &d in shape {
                st.u(d);
            }
            st.u(*stage);
            st.u(*v);
        }
    }

    // Edges between tasks that ran, by successor.
    let mut edges: Vec<(u64, u64)> = run
        .deps
        .iter()
        .flat_map(|g| &g.edges)
        .filter_map(|e| Some((*task_no.get(&e.succ)?, *task_no.get(&e.pred)?)))
        .collect();
    edges.sort_unstable();
    edges.dedup();
    for &(s, pr) in &edges {
        st.u(s);
        st.i(pr as i64 - s as i64);
    }

    // Counter series: scope occupancy and the shared ready-queue depths, from the plan.
    let mut series: Vec<(String, String, &'static str)> = Vec::new();
    let mut values: BTreeMap<u64, Vec<(u64, i64)>> = BTreeMap::new();
    for &(u, ts, v) in &p.counters {
        values.entry(u).or_default().push((ts, v));
    }
    for t in &p.tracks {
        if t.kind != TrackKind::Counter {
            continue;
        }
        let group = root(t.uuid);
        let wanted = group == "Scope occupancy" || t.name.starts_with("shared queue");
        let Some(v) = values.get(&t.uuid).filter(|_| wanted) else { continue };
        let unit = match t.unit {
            perfetto::CounterUnit::Bytes => "bytes",
            perfetto::CounterUnit::TimeNs => "ns",
            perfetto::CounterUnit::Count => "",
        };
        series.push((t.name.clone(), group.to_string(), unit));
        st.u(v.len() as u64);
        let (mut pt, mut pv) = (t0, 0i64);
        for &(ts, x) in v {
            let ts = ts.max(pt);
            st.u(ts - pt);
            st.i(x.wrapping_sub(pv));
            (pt, pv) = (ts, x);
        }
    }

    let raw_bytes = st.0.len();
    let packed = miniz_oxide::deflate::compress_to_vec(&st.0, 6);
    let packed_bytes = packed.len();

    // Header.
    let mut j = String::with_capacity(packed.len() * 4 / 3 + 4096);
    let title = format!("ferry view ({} run, {})", m.arch, super::tasks_and_blocks(&tasks));
    let _ = write!(
        j,
        "{{\"title\":{},\"arch\":{},\"clockHz\":{},\"t0\":{},\"span\":{},",
        js_str(&title),
        js_str(&m.arch),
        m.clock_freq_hz,
        t0,
        t1.saturating_sub(t0).max(1)
    );
    let _ = write!(j, "\"strings\":{},", js_list(strings.list.iter().map(String::as_str)));
    j.push_str("\"rows\":[");
    for (i, r) in rows.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(
            j,
            "{sep}{{\"label\":{},\"group\":{},\"kind\":\"{}\",\"n\":{}}}",
            js_str(&r.label),
            js_str(&r.group),
            r.kind,
            r.slices
        );
    }
    let _ = write!(j, "],\"folded\":{},", js_list(folded.iter().map(String::as_str)));
    let _ = write!(j, "\"tasks\":{},\"edges\":{},", task_ids.len(), edges.len());
    let _ = write!(j, "\"pmu\":{},", js_list(pmu_names.iter().map(String::as_str)));
    j.push_str("\"series\":[");
    for (i, (name, group, unit)) in series.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(
            j,
            "{sep}{{\"name\":{},\"group\":{},\"unit\":\"{unit}\"}}",
            js_str(name),
            js_str(group)
        );
    }
    // The task whose kernel failed: its label and its index in the task table (-1: no slice).
    match &m.failed {
        Some(f) => {
            let n = task_no.get(&f.id).map_or(-1, |&n| n as i64);
            let _ = write!(j, "],\"failed\":{{\"label\":{},\"task\":{n}}}", js_str(&f.label()));
        }
        None => j.push_str("],\"failed\":null"),
    }
    let _ = write!(j, ",\"rawBytes\":{raw_bytes},\"data\":\"{}\"}}", base64(&packed));
    let slices = rows.iter().map(|r| r.slices).sum();
    ViewData { json: j, rows, folded, tasks: task_ids.len(), slices, raw_bytes, packed_bytes }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        for (i, o) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg==")]
        {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn script_strings_cannot_close_the_script() {
        assert_eq!(js_str("a</script>"), "\"a<\\/script>\"");
    }
}
