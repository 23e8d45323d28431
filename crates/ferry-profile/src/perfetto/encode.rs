//! The Perfetto wire encoding: each planned track, slice and counter value as a `TracePacket`,
//! written as soon as it is encoded.

use std::io::{self, Write};

use super::{plan, CounterUnit, PlanSlice, PlanTrack, TracePlan, TrackKind, SEQUENCE_ID};
use crate::model::RunModel;
use crate::stream::{IdMap, Ticker};

/// A protobuf message being encoded (fields appended in call order).
#[derive(Default)]
struct Msg(Vec<u8>);

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl Msg {
    fn clear(&mut self) -> &mut Self {
        self.0.clear();
        self
    }
    fn key(&mut self, field: u32, wire: u8) {
        put_varint(&mut self.0, (u64::from(field) << 3) | u64::from(wire));
    }
    fn varint(&mut self, field: u32, v: u64) -> &mut Self {
        self.key(field, 0);
        put_varint(&mut self.0, v);
        self
    }
    fn int(&mut self, field: u32, v: i64) -> &mut Self {
        // int32/int64: two's complement as a 64-bit varint.
        self.varint(field, v as u64)
    }
    fn fixed64(&mut self, field: u32, v: u64) -> &mut Self {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
        self.key(field, 2);
        put_varint(&mut self.0, b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    fn string(&mut self, field: u32, s: &str) -> &mut Self {
        self.bytes(field, s.as_bytes())
    }
    fn msg(&mut self, field: u32, m: &Msg) -> &mut Self {
        self.bytes(field, &m.0)
    }
}

// Field numbers of Perfetto's public trace schema (protos/perfetto/trace/...).
const TRACE_PACKET: u32 = 1;
const TP_TIMESTAMP: u32 = 8;
const TP_SEQ_ID: u32 = 10;
const TP_TRACK_EVENT: u32 = 11;
const TP_SEQUENCE_FLAGS: u32 = 13;
const TP_TRACK_DESCRIPTOR: u32 = 60;
const TP_INTERNED_DATA: u32 = 12;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
const ID_EVENT_NAMES: u32 = 2;
const EN_IID: u32 = 1;
const EN_NAME: u32 = 2;
const TE_NAME_IID: u32 = 10;
const TD_UUID: u32 = 1;
const TD_NAME: u32 = 2;
const TD_PROCESS: u32 = 3;
const TD_THREAD: u32 = 4;
const TD_PARENT_UUID: u32 = 5;
const TD_COUNTER: u32 = 8;
const PD_PID: u32 = 1;
const PD_PROCESS_NAME: u32 = 6;
const THD_PID: u32 = 1;
const THD_TID: u32 = 2;
const THD_THREAD_NAME: u32 = 5;
const CD_UNIT: u32 = 3;
const CD_UNIT_TIME_NS: u64 = 1;
const CD_UNIT_COUNT: u64 = 2;
const CD_UNIT_SIZE_BYTES: u64 = 3;
const TE_DEBUG_ANNOTATIONS: u32 = 4;
const TE_TYPE: u32 = 9;
const TE_TRACK_UUID: u32 = 11;
const TE_CATEGORIES: u32 = 22;
const TE_NAME: u32 = 23;
const TE_COUNTER_VALUE: u32 = 30;
const TE_FLOW_IDS: u32 = 47;
const TE_TERMINATING_FLOW_IDS: u32 = 48;
const TYPE_SLICE_BEGIN: u64 = 1;
const TYPE_SLICE_END: u64 = 2;
const TYPE_COUNTER: u64 = 4;
const DA_UINT_VALUE: u32 = 3;
const DA_NAME: u32 = 10;

/// Scratch messages reused for every packet: encoding a trace allocates only while a buffer
/// grows to the largest packet.
#[derive(Default)]
struct Encoder {
    packet: Msg,
    event: Msg,
    sub: Msg,
    sub2: Msg,
    /// `Trace.packet` key and length prefix of the current packet.
    head: Vec<u8>,
}

impl Encoder {
    /// Writes `self.packet` as one `Trace.packet` field.
    fn emit<W: Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.head.clear();
        self.head.push(((TRACE_PACKET << 3) | 2) as u8);
        put_varint(&mut self.head, self.packet.0.len() as u64);
        w.write_all(&self.head)?;
        w.write_all(&self.packet.0)
    }

    /// `self.packet` = a timestamped packet carrying `self.event`.
    fn event_packet(&mut self, ts: u64) -> &mut Msg {
        self.packet
            .clear()
            .varint(TP_TIMESTAMP, ts)
            .varint(TP_SEQ_ID, SEQUENCE_ID.into())
            .msg(TP_TRACK_EVENT, &self.event)
    }

    fn track(&mut self, t: &PlanTrack, first: bool) {
        let (td, sub) = (self.event.clear(), &mut self.sub);
        td.varint(TD_UUID, t.uuid);
        if let Some(p) = t.parent {
            td.varint(TD_PARENT_UUID, p);
        }
        match &t.kind {
            TrackKind::Process { pid } => {
                sub.clear().int(PD_PID, (*pid).into()).string(PD_PROCESS_NAME, &t.name);
                td.msg(TD_PROCESS, sub);
            }
            TrackKind::Thread { pid, tid } => {
                sub.clear()
                    .int(THD_PID, (*pid).into())
                    .int(THD_TID, (*tid).into())
                    .string(THD_THREAD_NAME, &t.name);
                td.msg(TD_THREAD, sub);
            }
            TrackKind::Child => {
                td.string(TD_NAME, &t.name);
            }
            TrackKind::Counter => {
                td.string(TD_NAME, &t.name);
                let unit = match t.unit {
                    CounterUnit::TimeNs => CD_UNIT_TIME_NS,
                    CounterUnit::Count => CD_UNIT_COUNT,
                    CounterUnit::Bytes => CD_UNIT_SIZE_BYTES,
                };
                sub.clear().varint(CD_UNIT, unit);
                td.msg(TD_COUNTER, sub);
            }
        }
        let p = self.packet.clear().varint(TP_SEQ_ID, SEQUENCE_ID.into());
        if first {
            p.varint(TP_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
        }
        p.msg(TP_TRACK_DESCRIPTOR, &self.event);
    }

    /// The begin packet of `s`; `name` is `Err(name)` for a plain name, `Ok((iid, new))` for an
    /// interned one (`new`: first use, so the packet defines it).
    fn slice_begin(&mut self, s: &PlanSlice, name: Result<(u64, bool), &str>) {
        let ev = self.event.clear();
        ev.varint(TE_TYPE, TYPE_SLICE_BEGIN)
            .varint(TE_TRACK_UUID, s.track)
            .string(TE_CATEGORIES, s.category);
        match name {
            Ok((iid, _)) => ev.varint(TE_NAME_IID, iid),
            Err(n) => ev.string(TE_NAME, n),
        };
        for (name, v) in &s.args {
            self.sub.clear().string(DA_NAME, name).varint(DA_UINT_VALUE, *v);
            ev.msg(TE_DEBUG_ANNOTATIONS, &self.sub);
        }
        for f in &s.flows_out {
            ev.fixed64(TE_FLOW_IDS, *f);
        }
        for f in &s.flows_in {
            ev.fixed64(TE_TERMINATING_FLOW_IDS, *f);
        }
        self.event_packet(s.start_ns);
        if let Ok((iid, new)) = name {
            self.packet.varint(TP_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
            if new {
                self.sub.clear().varint(EN_IID, iid).string(EN_NAME, &s.name);
                self.sub2.clear().msg(ID_EVENT_NAMES, &self.sub);
                self.packet.msg(TP_INTERNED_DATA, &self.sub2);
            }
        }
    }

    fn slice_end(&mut self, s: &PlanSlice) {
        self.event.clear().varint(TE_TYPE, TYPE_SLICE_END).varint(TE_TRACK_UUID, s.track);
        self.event_packet(s.end_ns);
    }

    fn counter(&mut self, track: u64, ts: u64, v: i64) {
        self.event
            .clear()
            .varint(TE_TYPE, TYPE_COUNTER)
            .varint(TE_TRACK_UUID, track)
            .int(TE_COUNTER_VALUE, v);
        self.event_packet(ts);
    }
}

/// How [`encode_plan_with`] writes slice names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Intern slice names: each distinct name is sent once in the packet's `interned_data`
    /// (`event_names`) and events carry `name_iid` (smaller traces for runs with many tasks of
    /// few kernels). Off: every event carries its `name`.
    pub intern_names: bool,
}

/// Encodes `plan` as a Perfetto protobuf trace with plain names, in memory (tests and small
/// traces; [`write_plan`] streams).
pub fn encode_plan(plan: &TracePlan) -> Vec<u8> {
    encode_plan_with(plan, EncodeOptions::default())
}

/// Encodes `plan` as a Perfetto protobuf trace, in memory (tests and small traces;
/// [`write_plan`] streams).
pub fn encode_plan_with(plan: &TracePlan, opts: EncodeOptions) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a `Vec` cannot fail.
    let _ = write_plan(&mut out, plan, opts);
    out
}

/// Streams `plan` into `w` as a Perfetto protobuf trace: one `TrackDescriptor` packet per track,
/// then a begin and an end packet per slice, then one packet per counter value, each packet
/// written as soon as it is encoded (memory stays at one packet, whatever the trace's size).
///
/// # Errors
///
/// The first error of `w`.
///
/// # Examples
/// ```
/// use ferry_profile::{perfetto, sample::sample_run, LossPolicy};
/// let plan = perfetto::plan(&sample_run(LossPolicy::Block));
/// let mut out = Vec::new();
/// perfetto::write_plan(&mut out, &plan, perfetto::EncodeOptions::default()).unwrap();
/// assert_eq!(out, perfetto::encode_plan(&plan));
/// ```
pub fn write_plan<W: Write>(w: W, plan: &TracePlan, opts: EncodeOptions) -> io::Result<()> {
    write_plan_ticked(w, plan, opts, &Ticker::silent())
}

/// [`write_plan`], one tick per track, slice and counter value.
pub(crate) fn write_plan_ticked<W: Write>(
    mut w: W,
    plan: &TracePlan,
    opts: EncodeOptions,
    tick: &Ticker<'_>,
) -> io::Result<()> {
    let mut enc = Encoder::default();
    for (i, t) in plan.tracks.iter().enumerate() {
        enc.track(t, i == 0);
        enc.emit(&mut w)?;
        tick.tick(1);
    }
    let mut interned: IdMap<&str, u64> = IdMap::default();
    // The previous slice's name and iid: slices in a row mostly share one name (one kernel's
    // `Arc`), found by address without hashing the string.
    let mut last: Option<(&str, u64)> = None;
    for s in &plan.slices {
        let name = if opts.intern_names {
            match last {
                Some((n, iid)) if std::ptr::eq(n, &*s.name) => Ok((iid, false)),
                _ => {
                    let next = interned.len() as u64 + 1;
                    let iid = *interned.entry(&*s.name).or_insert(next);
                    last = Some((&*s.name, iid));
                    Ok((iid, iid == next))
                }
            }
        } else {
            Err(&*s.name)
        };
        enc.slice_begin(s, name);
        enc.emit(&mut w)?;
        enc.slice_end(s);
        enc.emit(&mut w)?;
        tick.tick(1);
    }
    for &(track, ts, v) in &plan.counters {
        enc.counter(track, ts, v);
        enc.emit(&mut w)?;
        tick.tick(1);
    }
    Ok(())
}

/// The Perfetto protobuf trace of `run`, with interned slice names and without the tracks that
/// hold nothing ([`TracePlan::prune_empty`]), in memory (tests and small
/// runs; [`write_all`](crate::write_all) streams it into its file).
pub fn write_trace(run: &RunModel) -> Vec<u8> {
    let mut plan = plan(run);
    plan.prune_empty();
    encode_plan_with(&plan, EncodeOptions { intern_names: true })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_encode_like_protobuf() {
        let mut v = Vec::new();
        put_varint(&mut v, 300);
        assert_eq!(v, [0xAC, 0x02]);
        let mut m = Msg::default();
        m.int(1, -1);
        assert_eq!(m.0.len(), 11); // key + 10-byte varint
    }
}
