//! What recorded nothing is said in one line, not drawn: the trace holds no track without a
//! slice or a counter value (an idle core's), the report and the page name the subsystems that
//! were on but recorded nothing.

use std::collections::BTreeSet;

use ferry_perfetto_proto::protos::Trace;
use ferry_perfetto_proto::Message;

use super::sample::sample_run;
use super::*;

/// The sample run with a fourth core that ran nothing, and a PMU and a ScopeStats that were on
/// but recorded nothing.
fn with_idle_parts() -> RunModel {
    let mut run = sample_run(LossPolicy::Block);
    run.meta.core_types.push(CoreType::Aiv);
    run.meta.core_to_thread.push(0);
    run.pmu = Some(PmuTable::default());
    run.scopes = Some(ScopeStats::default());
    run
}

/// Every track of a trace, and the tracks some event is on.
fn tracks_and_used(bytes: &[u8]) -> (Vec<(u64, Option<u64>)>, BTreeSet<u64>) {
    let trace = Trace::decode(bytes).unwrap();
    let (mut tracks, mut used) = (Vec::new(), BTreeSet::new());
    for p in trace.packet {
        if let Some(td) = p.track_descriptor {
            tracks.push((td.uuid.unwrap(), td.parent_uuid));
        } else if let Some(ev) = p.track_event {
            used.insert(ev.track_uuid.unwrap());
        }
    }
    (tracks, used)
}

#[test]
fn the_trace_has_no_track_that_holds_nothing() {
    let run = with_idle_parts();
    let idle = perfetto::uuid_core(3);
    // The plan has the idle core's track (the page folds it into one line) ...
    assert!(perfetto::plan(&run).tracks.iter().any(|t| t.uuid == idle));
    // ... the trace does not: every track holds an event or is the parent of one that does.
    let (tracks, used) = tracks_and_used(&perfetto::write_trace(&run));
    assert!(!tracks.iter().any(|t| t.0 == idle), "the idle core's track was written");
    let parents: BTreeSet<u64> = tracks.iter().filter_map(|t| t.1).collect();
    for (u, _) in &tracks {
        assert!(used.contains(u) || parents.contains(u), "track {u} holds nothing");
    }
    // The busy cores are all there.
    for c in 0..3 {
        assert!(tracks.iter().any(|t| t.0 == perfetto::uuid_core(c)), "core{c} missing");
    }
    let mut plan = perfetto::plan(&run);
    let dropped = plan.prune_empty();
    assert!(dropped.contains(&"core3 (aiv)".to_string()), "{dropped:?}");
}

#[test]
fn subsystems_that_recorded_nothing_are_named_in_one_line() {
    let run = with_idle_parts();
    assert_eq!(run.no_records(), [Subsystem::Pmu, Subsystem::ScopeStats]);
    let line = "no records: PMU, ScopeStats";
    assert_eq!(Subsystem::no_records_line(&run.no_records()), line);
    let report = analysis::report(&run);
    assert_eq!(report.run.no_records, ["PMU", "ScopeStats"]);
    let text = report.text(None);
    // Said once, at the end of the verdict's line: the report grows by no line.
    let verdict = text.lines().nth(1).unwrap();
    assert!(verdict.starts_with("verdict: ") && verdict.ends_with(&format!("; {line}")), "{text}");
    assert_eq!(text.matches(line).count(), 1, "{text}");
    let off = RunModel { pmu: None, scopes: None, ..with_idle_parts() };
    assert_eq!(text.lines().count(), analysis::report(&off).text(None).lines().count());
    assert!(!text.contains("\nPMU ("), "an empty PMU table is drawn:\n{text}");
    let page = views::swimlane_html(&run);
    assert!(page.contains(&format!("<p id=\"fv-no-records\">{line}</p>")), "the page says it");
    // A run whose subsystems each recorded something says nothing of the kind.
    let ok = sample_run(LossPolicy::Block);
    assert!(ok.no_records().is_empty());
    assert!(!analysis::report(&ok).text(None).contains("no records"));
    assert!(!views::swimlane_html(&ok).contains("id=\"fv-no-records\""));
}
