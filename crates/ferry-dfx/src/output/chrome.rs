//! Chrome Trace Event JSON fallback (`{"traceEvents": [...]}`), built from the same
//! `TracePlan` ([`super::perfetto::TracePlan`]) as the Perfetto trace.
//!
//! Duration events must nest per thread in this format, and overlapping `X` events on one tid are
//! silently dropped or mis-drawn by viewers. Every planned track — including each overlap child
//! track — therefore gets its own tid, so no two slices on one tid ever overlap. Flows are `s`/`f`
//! pairs (the `f` binds to the enclosing slice, `"bp": "e"`), stall time per lane is a `C` counter.
//! Timestamps are microseconds (fractional).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::model::RunModel;
use super::perfetto::{plan, TracePlan, TrackKind};

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

/// The Chrome JSON trace of a plan.
pub fn encode_chrome(p: &TracePlan) -> Value {
    let ids = track_ids(p);
    let mut ev: Vec<Value> = Vec::new();
    for t in &p.tracks {
        let (pid, tid) = ids[&t.uuid];
        match t.kind {
            TrackKind::Process { .. } => ev.push(
                json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": t.name}}),
            ),
            TrackKind::Thread { .. } | TrackKind::Child => ev.push(
                json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": t.name}}),
            ),
            TrackKind::Counter => {}
        }
    }
    for s in &p.slices {
        let (pid, tid) = ids[&s.track];
        let args: serde_json::Map<String, Value> =
            s.args.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect();
        ev.push(json!({
            "ph": "X", "name": s.name, "cat": s.category, "pid": pid, "tid": tid,
            "ts": us(s.start_ns), "dur": us(s.end_ns - s.start_ns), "args": args,
        }));
        for f in &s.flows_out {
            ev.push(
                json!({"ph": "s", "name": "dep", "cat": "dep", "id": f, "pid": pid, "tid": tid,
                           "ts": us(s.start_ns)}),
            );
        }
        for f in &s.flows_in {
            ev.push(json!({"ph": "f", "bp": "e", "name": "dep", "cat": "dep", "id": f, "pid": pid,
                           "tid": tid, "ts": us(s.start_ns)}));
        }
    }
    let names: BTreeMap<u64, &str> = p.tracks.iter().map(|t| (t.uuid, t.name.as_str())).collect();
    for &(track, ts, v) in &p.counters {
        let (pid, _) = ids[&track];
        ev.push(json!({"ph": "C", "name": names[&track], "pid": pid, "ts": us(ts),
                       "args": {"stall_ns": v}}));
    }
    json!({"traceEvents": ev, "displayTimeUnit": "ns"})
}

/// The Chrome JSON trace of `run`, serialised.
pub fn write_chrome_trace(run: &RunModel) -> Vec<u8> {
    // Serialising a `Value` cannot fail (string keys, finite numbers).
    serde_json::to_vec(&encode_chrome(&plan(run))).unwrap_or_default()
}
