//! Chrome Trace Event JSON fallback (`{"traceEvents": [...]}`), built from the same
//! `TracePlan` ([`super::perfetto::TracePlan`]) as the Perfetto trace.
//!
//! Duration events must nest per thread in this format, and overlapping `X` events on one tid are
//! silently dropped or mis-drawn by viewers. Every planned track — including each overlap child
//! track — therefore gets its own tid, so no two slices on one tid ever overlap. Flows are `s`/`f`
//! pairs (the `f` binds to the enclosing slice, `"bp": "e"`), stall time per lane is a `C` counter.
//! Timestamps are microseconds (fractional).
//!
//! [`write_plan`] streams the events through serde's serializer straight into the writer, one
//! event at a time, with no intermediate JSON value; keys are written in sorted order (as
//! `serde_json`'s map writes them), so the bytes are those of serialising the whole trace as one
//! `serde_json::Value`.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;

use super::model::RunModel;
use super::perfetto::{plan, TracePlan, TrackKind};
use super::stream::Ticker;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// `(pid, tid)` of every planned track: processes and thread tracks keep theirs, child tracks get
/// a fresh tid in their ancestor's process, counters live on their process.
pub fn track_ids(p: &TracePlan) -> BTreeMap<u64, (i64, i64)> {
    let mut ids: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
    let mut next_tid = 1_000_000i64;
    for t in &p.tracks {
        let id = match &t.kind {
            TrackKind::Process { pid } => (i64::from(*pid), 0),
            TrackKind::Thread { pid, tid } => (i64::from(*pid), i64::from(*tid)),
            TrackKind::Child | TrackKind::Counter => {
                let pid = t.parent.and_then(|u| ids.get(&u)).map_or(0, |&(pid, _)| pid);
                next_tid += 1;
                (pid, next_tid)
            }
        };
        ids.insert(t.uuid, id);
    }
    ids
}

// One struct per event shape; fields in sorted key order.

#[derive(Serialize)]
struct NameArg<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct Meta<'a> {
    args: NameArg<'a>,
    name: &'static str,
    ph: &'static str,
    pid: i64,
    tid: i64,
}

/// A slice's integer annotations as a JSON object with sorted keys (a repeated key keeps its
/// last value, as a map insert would).
struct SortedArgs<'a>(&'a [(&'static str, u64)]);

impl Serialize for SortedArgs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        let mut last: Option<&str> = None;
        // Slices carry two or three annotations: selecting the next key beats sorting a copy.
        loop {
            let mut next: Option<(&str, u64)> = None;
            for &(k, v) in self.0 {
                if last.is_some_and(|l| k <= l) {
                    continue;
                }
                match next {
                    Some((nk, _)) if k > nk => {}
                    _ => next = Some((k, v)),
                }
            }
            let Some((k, v)) = next else { break };
            m.serialize_entry(k, &v)?;
            last = Some(k);
        }
        m.end()
    }
}

#[derive(Serialize)]
struct Complete<'a> {
    args: SortedArgs<'a>,
    cat: &'a str,
    dur: f64,
    name: &'a str,
    ph: &'static str,
    pid: i64,
    tid: i64,
    ts: f64,
}

#[derive(Serialize)]
struct FlowStart {
    cat: &'static str,
    id: u64,
    name: &'static str,
    ph: &'static str,
    pid: i64,
    tid: i64,
    ts: f64,
}

#[derive(Serialize)]
struct FlowEnd {
    bp: &'static str,
    cat: &'static str,
    id: u64,
    name: &'static str,
    ph: &'static str,
    pid: i64,
    tid: i64,
    ts: f64,
}

#[derive(Serialize)]
struct StallArg {
    stall_ns: i64,
}

#[derive(Serialize)]
struct Counter<'a> {
    args: StallArg,
    name: &'a str,
    ph: &'static str,
    pid: i64,
    ts: f64,
}

/// Every event of a plan, serialized one by one into the array.
struct Events<'a, 't> {
    plan: &'a TracePlan,
    tick: &'a Ticker<'t>,
}

impl Serialize for Events<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (p, tick) = (self.plan, self.tick);
        let ids = track_ids(p);
        let mut seq = s.serialize_seq(None)?;
        for t in &p.tracks {
            let (pid, tid) = ids[&t.uuid];
            let name = match t.kind {
                TrackKind::Process { .. } => Some(("process_name", 0)),
                TrackKind::Thread { .. } | TrackKind::Child => Some(("thread_name", tid)),
                TrackKind::Counter => None,
            };
            if let Some((name, tid)) = name {
                let args = NameArg { name: &t.name };
                seq.serialize_element(&Meta { args, name, ph: "M", pid, tid })?;
            }
            tick.tick(1);
        }
        for sl in &p.slices {
            let (pid, tid) = ids[&sl.track];
            let ts = us(sl.start_ns);
            seq.serialize_element(&Complete {
                args: SortedArgs(&sl.args),
                cat: sl.category,
                dur: us(sl.end_ns.saturating_sub(sl.start_ns)),
                name: &sl.name,
                ph: "X",
                pid,
                tid,
                ts,
            })?;
            for &id in &sl.flows_out {
                let (cat, name, ph) = ("dep", "dep", "s");
                seq.serialize_element(&FlowStart { cat, id, name, ph, pid, tid, ts })?;
            }
            for &id in &sl.flows_in {
                let (bp, cat, name, ph) = ("e", "dep", "dep", "f");
                seq.serialize_element(&FlowEnd { bp, cat, id, name, ph, pid, tid, ts })?;
            }
            tick.tick(1);
        }
        let names: BTreeMap<u64, &str> =
            p.tracks.iter().map(|t| (t.uuid, t.name.as_str())).collect();
        for &(track, ts, v) in &p.counters {
            let (pid, _) = ids[&track];
            seq.serialize_element(&Counter {
                args: StallArg { stall_ns: v },
                name: names[&track],
                ph: "C",
                pid,
                ts: us(ts),
            })?;
            tick.tick(1);
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct Trace<'a, 't> {
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
    #[serde(rename = "traceEvents")]
    trace_events: Events<'a, 't>,
}

/// Streams the Chrome JSON trace of `plan` into `w` (compact JSON, one event at a time).
///
/// # Errors
///
/// The first error of `w`.
///
/// # Examples
/// ```
/// use ferry_dfx::output::{chrome, perfetto, sample::sample_run, LossPolicy};
/// let plan = perfetto::plan(&sample_run(LossPolicy::Block));
/// let mut out = Vec::new();
/// chrome::write_plan(&mut out, &plan).unwrap();
/// let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
/// assert!(v["traceEvents"].as_array().unwrap().len() > plan.slices.len());
/// ```
pub fn write_plan<W: Write>(w: W, plan: &TracePlan) -> io::Result<()> {
    write_plan_ticked(w, plan, &Ticker::silent())
}

/// [`write_plan`], one tick per track, slice and counter value.
pub(crate) fn write_plan_ticked<W: Write>(
    w: W,
    plan: &TracePlan,
    tick: &Ticker<'_>,
) -> io::Result<()> {
    let trace = Trace { display_time_unit: "ns", trace_events: Events { plan, tick } };
    serde_json::to_writer(w, &trace).map_err(io::Error::from)
}

/// The Chrome JSON trace of `run`, in memory (tests and small runs; [`super::write_all`]
/// streams it into its file).
pub fn write_chrome_trace(run: &RunModel) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a `Vec` cannot fail (string keys, finite numbers).
    let _ = write_plan(&mut out, &plan(run));
    out
}
