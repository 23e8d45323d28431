#!/usr/bin/env python3
"""Checks a ferry Perfetto trace against Perfetto's published schema.

Decodes TRACE with the `perfetto` package's `perfetto_trace_pb2` (Perfetto's own generated
protobuf module, independent of ferry's encoder) and checks:

* every event names a track declared by a TrackDescriptor (0 undeclared tracks), no uuid is
  declared twice, and every parent uuid is declared;
* slices balance: on every track each SLICE_END closes an open SLICE_BEGIN, in time order, and
  no slice is left open (0 unbalanced slices);
* counter values come in time order on their track, only on counter tracks;
* it reports the slices of the `scopes` track (one per scope, named by the workload's scope
  labels) by name;
* the counter tracks the run's subsystems imply exist and carry values: PMU counters (a track
  under the `PMU` process) and scope occupancy (under `Scope occupancy`), unless told otherwise.

Prints one JSON object with the counts; exits 1 with the failures listed when a check fails.

Usage: check_perfetto_trace.py TRACE [--expect pmu,scopes,anchors,loss]
"""
import argparse
import json
import sys
from collections import defaultdict

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TrackEvent = pb.TrackEvent


def check(path, expect):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    tracks = {}
    names = {}  # iid -> interned event name
    open_slices = defaultdict(list)  # track -> stack of (name, ts)
    last_counter_ts = {}
    counter_values = defaultdict(int)
    failures = []
    counts = defaultdict(int)

    def fail(msg):
        if len(failures) < 50:
            failures.append(msg)

    # Descriptors first: a track may be declared after an event in file order only if the
    # reader buffers, which trace processor does; ferry declares all tracks first.
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            if td.uuid in tracks:
                fail(f"track uuid {td.uuid} declared twice")
            tracks[td.uuid] = td
    for td in tracks.values():
        if td.HasField("parent_uuid") and td.parent_uuid not in tracks:
            fail(f"track {td.uuid} has an undeclared parent {td.parent_uuid}")

    def track_name(td):
        if td.HasField("process"):
            return td.process.process_name
        if td.HasField("thread"):
            return td.thread.thread_name
        return td.name

    def root_name(uuid):
        td = tracks[uuid]
        while td.HasField("parent_uuid") and td.parent_uuid in tracks:
            td = tracks[td.parent_uuid]
        return track_name(td)

    undeclared = set()
    scope_slices = defaultdict(int)  # name -> slices on the `scopes` track (and its overlaps)
    for p in trace.packet:
        if p.HasField("interned_data"):
            for en in p.interned_data.event_names:
                names[en.iid] = en.name
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        t = ev.track_uuid
        if t not in tracks:
            undeclared.add(t)
            continue
        ts = p.timestamp
        if ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            name = names.get(ev.name_iid) if ev.HasField("name_iid") else ev.name
            if name is None:
                fail(f"slice on track {t} at {ts} names an unknown iid {ev.name_iid}")
            stack = open_slices[t]
            if stack and ts < stack[-1][1]:
                fail(f"slice {name!r} on track {t} begins at {ts} before its parent")
            stack.append((name, ts))
            counts["slices"] += 1
            if root_name(t) == "Scope occupancy" and track_name(tracks[t]).startswith("scopes"):
                scope_slices[name] += 1
        elif ev.type == TrackEvent.TYPE_SLICE_END:
            stack = open_slices[t]
            if not stack:
                counts["unbalanced"] += 1
                fail(f"slice end on track {t} at {ts} closes nothing")
                continue
            name, begin = stack.pop()
            if ts < begin:
                counts["unbalanced"] += 1
                fail(f"slice {name!r} on track {t} ends at {ts} before it began at {begin}")
        elif ev.type == TrackEvent.TYPE_COUNTER:
            if not tracks[t].HasField("counter"):
                fail(f"counter value on the non-counter track {t}")
            if ts < last_counter_ts.get(t, 0):
                fail(f"counter track {t} goes back in time at {ts}")
            last_counter_ts[t] = ts
            counter_values[t] += 1
            counts["counter_values"] += 1
        else:
            fail(f"unexpected event type {ev.type} on track {t}")
    left_open = sum(len(s) for s in open_slices.values())
    counts["unbalanced"] += left_open
    if left_open:
        fail(f"{left_open} slices never end")
    if undeclared:
        fail(f"events on {len(undeclared)} undeclared tracks, e.g. {sorted(undeclared)[:5]}")

    counter_tracks = [u for u, td in tracks.items() if td.HasField("counter")]
    by_root = defaultdict(list)
    for u in counter_tracks:
        by_root[root_name(u)].append(u)
    slice_tracks_by_name = {track_name(td): u for u, td in tracks.items()}
    pmu = [u for u in by_root.get("PMU", []) if counter_values[u] > 0]
    scopes = [u for u in by_root.get("Scope occupancy", []) if counter_values[u] > 0]
    if "pmu" in expect and not pmu:
        fail("no PMU counter track with values")
    if "scopes" in expect and not scopes:
        fail("no scope occupancy counter track with values")
    if "anchors" in expect and "clock anchors" not in slice_tracks_by_name:
        fail("no clock anchors track")
    if "loss" in expect and "loss accounting" not in slice_tracks_by_name:
        fail("no loss accounting track")
    report = {
        "tracks": len(tracks),
        "counter_tracks": len(counter_tracks),
        "pmu_counter_tracks": len(pmu),
        "scope_counter_tracks": len(scopes),
        "slices": counts["slices"],
        "counter_values": counts["counter_values"],
        "unbalanced_slices": counts["unbalanced"],
        "undeclared_tracks": len(undeclared),
        "scope_slices": dict(scope_slices),
        "failures": failures,
    }
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--expect", default="pmu,scopes,loss",
                    help="comma-separated: pmu, scopes, anchors, loss (default pmu,scopes,loss)")
    a = ap.parse_args()
    expect = {e for e in a.expect.split(",") if e}
    report = check(a.trace, expect)
    print(json.dumps(report, indent=1))
    sys.exit(1 if report["failures"] else 0)


if __name__ == "__main__":
    main()
