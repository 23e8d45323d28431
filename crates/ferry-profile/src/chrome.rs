//! Chrome Trace Event JSON fallback (`{"traceEvents": [...]}`), built from the same
//! `TracePlan` ([`super::perfetto::TracePlan`]) as the Perfetto trace.
//!
//! Duration events must nest per thread in this format, and overlapping `X` events on one tid are
//! silently dropped or mis-drawn by viewers. Every planned track — including each overlap child
//! track — therefore gets its own tid, so no two slices on one tid ever overlap. Flows are `s`/`f`
//! pairs (the `f` binds to the enclosing slice, `"bp": "e"`), stall time per lane is a `C` counter.
//! Timestamps are microseconds (fractional).
//!
//! [`write_plan`] streams the events straight into the writer, one event at a time, with no
//! intermediate JSON value, written by hand (`jsonw`); keys are written in sorted order (as
//! `serde_json`'s map writes them), so the bytes are those of serialising the whole trace as one
//! `serde_json::Value` (a test compares them with serde's serialization of the same events).

use std::collections::BTreeMap;
use std::io::{self, Write};

#[cfg(test)]
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
#[cfg(test)]
use serde::Serialize;

use super::jsonw::Json;
use super::model::RunModel;
use super::perfetto::{plan, CounterUnit, PlanTrack, TracePlan, TrackKind};
use super::stream::{IdMap, Ticker};

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

#[cfg(test)]
#[derive(Serialize)]
struct NameArg<'a> {
    name: &'a str,
}

#[cfg(test)]
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
#[cfg(test)]
struct SortedArgs<'a>(&'a [(&'static str, u64)]);

#[cfg(test)]
impl Serialize for SortedArgs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in sorted_args(self.0) {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

#[cfg(test)]
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

#[cfg(test)]
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

#[cfg(test)]
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

#[cfg(test)]
#[derive(Serialize)]
struct Counter<'a> {
    args: serde_json::Value,
    name: &'a str,
    ph: &'static str,
    pid: i64,
    ts: f64,
}

/// Every event of a plan, serialized one by one into the array (the reference the
/// hand-written writer is tested against).
#[cfg(test)]
struct Events<'a, 't> {
    plan: &'a TracePlan,
    tick: &'a Ticker<'t>,
}

#[cfg(test)]
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
        let names: BTreeMap<u64, &PlanTrack> = p.tracks.iter().map(|t| (t.uuid, t)).collect();
        for &(track, ts, v) in &p.counters {
            let (pid, _) = ids[&track];
            seq.serialize_element(&Counter {
                args: serde_json::json!({ counter_key(names[&track]): v }),
                name: &names[&track].name,
                ph: "C",
                pid,
                ts: us(ts),
            })?;
            tick.tick(1);
        }
        seq.end()
    }
}

#[cfg(test)]
#[cfg(test)]
#[derive(Serialize)]
struct Trace<'a, 't> {
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
    #[serde(rename = "traceEvents")]
    trace_events: Events<'a, 't>,
}

/// A slice's integer annotations in key order, each key once (a repeated key keeps its last
/// value, as a map insert would). Slices carry two or three annotations: selecting the next key
/// beats sorting a copy.
fn sorted_args<'a>(
    args: &'a [(&'static str, u64)],
) -> impl Iterator<Item = (&'static str, u64)> + 'a {
    let mut last: Option<&str> = None;
    std::iter::from_fn(move || {
        let mut next: Option<(&'static str, u64)> = None;
        for &(k, v) in args {
            if last.is_some_and(|l| k <= l) {
                continue;
            }
            match next {
                Some((nk, _)) if k > nk => {}
                _ => next = Some((k, v)),
            }
        }
        last = next.map(|(k, _)| k);
        next
    })
}

/// Appends a slice's annotations as a JSON object with sorted keys ([`sorted_args`]).
fn put_sorted_args(j: &mut Json, args: &[(&'static str, u64)]) {
    j.raw(b"{");
    for (i, (k, v)) in sorted_args(args).enumerate() {
        if i > 0 {
            j.raw(b",");
        }
        j.str(k);
        j.raw(b":");
        j.u64(v);
    }
    j.raw(b"}");
}

/// Appends `,"pid":P,"tid":T,"ts":TS}`, the tail every thread event shares.
#[inline]
/// The argument a counter's value goes under: `stall_ns` for the lanes' stall time, else named
/// by the track's unit.
fn counter_key(t: &PlanTrack) -> &'static str {
    match t.unit {
        CounterUnit::TimeNs if t.name.starts_with("stall ") => "stall_ns",
        CounterUnit::TimeNs => "ns",
        CounterUnit::Count => "count",
        CounterUnit::Bytes => "bytes",
    }
}

fn put_place(j: &mut Json, pid: i64, tid: i64, ts: f64) {
    j.raw(b",\"pid\":");
    j.i64(pid);
    j.raw(b",\"tid\":");
    j.i64(tid);
    j.raw(b",\"ts\":");
    j.f64(ts);
    j.raw(b"}");
}

/// Every event of `p` into `w`, one at a time: the bytes serde_json writes for the events in
/// sorted key order (a test compares them), written by hand ([`Json`]).
fn write_events<W: Write>(w: &mut W, p: &TracePlan, tick: &Ticker<'_>) -> io::Result<()> {
    let ids: IdMap<u64, (i64, i64)> = track_ids(p).into_iter().collect();
    let mut j = Json::new();
    j.raw(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
    let mut first = true;
    let mut sep = |j: &mut Json| {
        if !std::mem::take(&mut first) {
            j.raw(b",");
        }
    };
    for t in &p.tracks {
        let (pid, tid) = ids[&t.uuid];
        let name = match t.kind {
            TrackKind::Process { .. } => Some((&b"process_name"[..], 0)),
            TrackKind::Thread { .. } | TrackKind::Child => Some((&b"thread_name"[..], tid)),
            TrackKind::Counter => None,
        };
        if let Some((name, tid)) = name {
            sep(&mut j);
            j.raw(b"{\"args\":{\"name\":");
            j.str(&t.name);
            j.raw(b"},\"name\":\"");
            j.raw(name);
            j.raw(b"\",\"ph\":\"M\",\"pid\":");
            j.i64(pid);
            j.raw(b",\"tid\":");
            j.i64(tid);
            j.raw(b"}");
        }
        tick.tick(1);
    }
    for sl in &p.slices {
        let (pid, tid) = ids[&sl.track];
        let ts = us(sl.start_ns);
        sep(&mut j);
        j.raw(b"{\"args\":");
        put_sorted_args(&mut j, &sl.args);
        j.raw(b",\"cat\":");
        j.str(sl.category);
        j.raw(b",\"dur\":");
        j.f64(us(sl.end_ns.saturating_sub(sl.start_ns)));
        j.raw(b",\"name\":");
        j.str(&sl.name);
        j.raw(b",\"ph\":\"X\"");
        put_place(&mut j, pid, tid, ts);
        for &id in &sl.flows_out {
            sep(&mut j);
            j.raw(b"{\"cat\":\"dep\",\"id\":");
            j.u64(id);
            j.raw(b",\"name\":\"dep\",\"ph\":\"s\"");
            put_place(&mut j, pid, tid, ts);
        }
        for &id in &sl.flows_in {
            sep(&mut j);
            j.raw(b"{\"bp\":\"e\",\"cat\":\"dep\",\"id\":");
            j.u64(id);
            j.raw(b",\"name\":\"dep\",\"ph\":\"f\"");
            put_place(&mut j, pid, tid, ts);
        }
        tick.tick(1);
        j.drain_into(w)?;
    }
    let names: IdMap<u64, &PlanTrack> = p.tracks.iter().map(|t| (t.uuid, t)).collect();
    for &(track, ts, v) in &p.counters {
        let (pid, _) = ids[&track];
        let t = names[&track];
        sep(&mut j);
        j.raw(b"{\"args\":{");
        j.str(counter_key(t));
        j.raw(b":");
        j.i64(v);
        j.raw(b"},\"name\":");
        j.str(&t.name);
        j.raw(b",\"ph\":\"C\",\"pid\":");
        j.i64(pid);
        j.raw(b",\"ts\":");
        j.f64(us(ts));
        j.raw(b"}");
        tick.tick(1);
        j.drain_into(w)?;
    }
    j.raw(b"]}");
    j.finish_into(w)
}

/// Streams the Chrome JSON trace of `plan` into `w` (compact JSON, one event at a time).
///
/// # Errors
///
/// The first error of `w`.
///
/// # Examples
/// ```
/// use ferry_profile::{chrome, perfetto, sample::sample_run, LossPolicy};
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
    let mut w = w;
    write_events(&mut w, plan, tick)
}

/// The Chrome JSON trace of `run`, without the tracks that hold nothing, in memory (tests and
/// small runs; [`super::write_all`] streams it into its file).
pub fn write_chrome_trace(run: &RunModel) -> Vec<u8> {
    let mut out = Vec::new();
    let mut plan = plan(run);
    plan.prune_empty();
    // Writing into a `Vec` cannot fail (string keys, finite numbers).
    let _ = write_plan(&mut out, &plan);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{sample_run, scaled_run};
    use crate::LossPolicy;

    fn serde_bytes(plan: &TracePlan) -> Vec<u8> {
        let tick = Ticker::silent();
        let trace = Trace { display_time_unit: "ns", trace_events: Events { plan, tick: &tick } };
        serde_json::to_vec(&trace).unwrap()
    }

    /// The hand-written trace is byte for byte serde's serialization of the same events, for
    /// plans with every event shape, and names that need escapes.
    #[test]
    fn the_written_trace_is_serde_jsons() {
        for run in [sample_run(LossPolicy::Block), sample_run(LossPolicy::Drop), scaled_run(300)] {
            let mut p = plan(&run);
            assert!(!p.slices.is_empty() && !p.counters.is_empty(), "every event shape");
            assert!(p.slices.iter().any(|s| !s.flows_in.is_empty() && !s.args.is_empty()));
            let mut got = Vec::new();
            write_plan(&mut got, &p).unwrap();
            assert_eq!(
                String::from_utf8(got).unwrap(),
                String::from_utf8(serde_bytes(&p)).unwrap()
            );
            p.tracks[0].name = "a \"quoted\" \\ name\n".into();
            p.slices[0].name = "tab\there".into();
            let mut got = Vec::new();
            write_plan(&mut got, &p).unwrap();
            assert_eq!(
                String::from_utf8(got).unwrap(),
                String::from_utf8(serde_bytes(&p)).unwrap()
            );
        }
    }
}
