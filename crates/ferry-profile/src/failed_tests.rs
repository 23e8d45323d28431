//! A failed run's task, marked: the Perfetto trace decoded with the published schema finds the
//! marker on the failed task's own track, and only there; the page's data names it.

use std::collections::BTreeMap;

use ferry_perfetto_proto::protos::{track_event::Type, Trace};
use ferry_perfetto_proto::Message;

use super::sample::sample_run;
use super::*;

/// A slice begin as decoded: track, name, start, its integer annotations.
type Begin = (u64, String, u64, BTreeMap<String, u64>);

/// Every slice begin of `bytes`, and the tracks' names by uuid.
fn begins(bytes: &[u8]) -> (Vec<Begin>, BTreeMap<u64, String>) {
    let trace = Trace::decode(bytes).unwrap();
    let (mut names, mut tracks, mut out) = (BTreeMap::new(), BTreeMap::new(), Vec::new());
    for p in trace.packet {
        if let Some(id) = &p.interned_data {
            for n in &id.event_names {
                names.insert(n.iid.unwrap(), n.name.clone().unwrap());
            }
        }
        if let Some(td) = p.track_descriptor {
            let name = td
                .name
                .or_else(|| td.thread.and_then(|t| t.thread_name))
                .or_else(|| td.process.and_then(|p| p.process_name))
                .unwrap_or_default();
            tracks.insert(td.uuid.unwrap(), name);
            continue;
        }
        let ev = p.track_event.unwrap();
        if Type::try_from(ev.r#type.unwrap()).unwrap() != Type::SliceBegin {
            continue;
        }
        let name = match ev.name_iid {
            Some(iid) => names[&iid].clone(),
            None => ev.name.unwrap(),
        };
        let args = ev
            .debug_annotations
            .iter()
            .filter_map(|a| Some((a.name.clone()?, a.uint_value?)))
            .collect();
        out.push((ev.track_uuid.unwrap(), name, p.timestamp.unwrap(), args));
    }
    (out, tracks)
}

/// The sample run with its task `id` marked failed.
fn failed_sample(id: u64) -> RunModel {
    let mut run = sample_run(LossPolicy::Block);
    run.meta.failed = Some(FailedTask { id, kernel: "add".into(), run: None });
    run
}

#[test]
fn the_trace_marks_the_failed_task_on_its_own_track() {
    let ok = sample_run(LossPolicy::Block);
    let tasks = ok.tasks();
    let target = tasks[tasks.len() / 2];
    let run = failed_sample(target.task_id);
    let (slices, tracks) = begins(&perfetto::write_trace(&run));
    let label = format!("failed: task {:#x} (add)", target.task_id);
    let markers: Vec<&Begin> = slices.iter().filter(|s| s.1 == label).collect();
    // One marker per block of the task, each on the track (and at the start) of one of its
    // kernel slices, which carry `failed = 1`; no other slice does.
    let blocks: Vec<&Begin> = slices
        .iter()
        .filter(|s| s.3.get("task_id") == Some(&target.task_id) && s.1 != label)
        .filter(|s| tracks[&s.0].starts_with("core") && !tracks[&s.0].ends_with("dispatch-finish"))
        .collect();
    assert!(!blocks.is_empty() && markers.len() == blocks.len(), "{markers:?} {blocks:?}");
    for b in &blocks {
        assert_eq!(b.3.get("failed"), Some(&1), "{b:?}");
        assert!(markers.iter().any(|m| m.0 == b.0 && m.2 == b.2), "no marker on {b:?}");
    }
    for m in &markers {
        assert_eq!((m.3.get("task_id"), m.3.get("failed")), (Some(&target.task_id), Some(&1)));
    }
    let flagged = slices.iter().filter(|s| s.3.contains_key("failed")).count();
    assert_eq!(flagged, 2 * blocks.len(), "only the failed task's slices are flagged");
    // A run that did not fail has no marker at all.
    let (clean, _) = begins(&perfetto::write_trace(&ok));
    assert!(clean.iter().all(|s| !s.1.starts_with("failed") && !s.3.contains_key("failed")));
}

#[test]
fn a_failed_task_that_left_no_slice_is_marked_on_the_runs_track() {
    let run = failed_sample(0xdead);
    let (slices, tracks) = begins(&perfetto::write_trace(&run));
    let m: Vec<&Begin> = slices.iter().filter(|s| s.1 == "failed: task 0xdead (add)").collect();
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(tracks[&m[0].0], perfetto::FAILED_TRACK);
    assert_eq!(m[0].0, perfetto::UUID_FAILED);
}

#[test]
fn the_pages_data_names_the_failed_task_and_its_slices() {
    let ok = sample_run(LossPolicy::Block);
    let id = ok.tasks()[0].task_id;
    let d = views::view_data(&failed_sample(id));
    let head: serde_json::Value = serde_json::from_str(&d.json).unwrap();
    let f = &head["failed"];
    assert_eq!(f["label"], format!("task {id:#x} (add)"), "{f}");
    assert!(f["task"].as_i64().unwrap() >= 0, "the task ran: {f}");
    // The markers are the page's own drawing, not slices of its rows.
    assert_eq!(d.slices, views::view_data(&ok).slices);
    let none = views::view_data(&failed_sample(0xdead));
    let head: serde_json::Value = serde_json::from_str(&none.json).unwrap();
    assert_eq!(head["failed"]["task"], -1, "a task that never ran has no slice");
    let clean: serde_json::Value = serde_json::from_str(&views::view_data(&ok).json).unwrap();
    assert!(clean["failed"].is_null());
}

#[test]
fn a_failed_runs_report_names_the_tasks_that_never_ran() {
    let mut run = sample_run(LossPolicy::Block);
    let last = run.tasks().last().unwrap().task_id;
    let sw = run.swimlane.as_mut().unwrap();
    let regs: Vec<(u32, u32)> = sw
        .aicore_tasks
        .iter()
        .filter(|t| t.task_token_raw == last)
        .map(|t| (t.core, t.reg_task_id))
        .collect();
    sw.aicore_tasks.retain(|t| t.task_token_raw != last);
    sw.aicpu_tasks.retain(|t| !regs.contains(&(t.core, t.reg_task_id)));
    let r = analysis::report(&run);
    assert_eq!((r.run.no_slice, r.run.no_slice_first.clone()), (1, vec![format!("{last:#x}")]));
    let failed = RunOutcome::Failed { error: "boom".into(), task: None };
    let text = analysis::Report { outcome: Some(failed), ..r.clone() }.text(None);
    let line = format!("1 of 6 submitted tasks never ran: {last:#x}\n");
    assert!(text.contains(&line), "{text}");
    // A run that did not fail says nothing of the kind (a task may lack its slice for another
    // reason: a record the swimlane dropped).
    assert!(!r.text(None).contains("never ran"));
}
