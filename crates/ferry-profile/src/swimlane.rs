//! `chip_swimlane_records.json` (docs/dfx.md), raw device cycles.
//!
//! Top-level keys: `chip_swimlane_level`, `metadata` (`clock_freq_hz`, `num_cores`, `core_types`,
//! `core_to_thread`; ferry adds `arch` and `kernel_names`), `aicore_tasks`
//! (`[core_id, task_token_raw, reg_task_id, start, end, receive_to_start_cycles]`),
//! `aicpu_tasks` (`[core_id, reg_task_id, dispatch, finish]`), `aicpu_scheduler_phases` (one
//! array of phase objects per scheduler thread), `aicpu_orchestrator_phases`, and ferry's `dfx`
//! (loss accounting of the ChipSwimlane lanes). Readers of the original file ignore the extra keys.
//!
//! Host time (`host_time`): `metadata.clock_anchors` in every file ferry writes; a host-built
//! run adds `metadata.orchestrator_source: "host"` (+ clock domain, origin and `host_capture`)
//! and `host_orchestrator_phases`, and writes the device's graph-install envelopes under
//! [`GRAPH_LOAD_KEY`] instead of `aicpu_orchestrator_phases`.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use ferry_abi::records::SchedPhaseKind;
#[cfg(test)]
use serde::ser::{SerializeSeq, SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};

use super::host_time::{
    ClockAnchors, HostCapture, HostOrchPhase, HostOrchestration, HOST_CLOCK_DOMAIN,
};
use super::jsonw::Json;
use super::model::{
    AicoreTask, AicpuTask, CoreType, LossAccounting, OrchPhase, RunLabel, RunMeta, SchedPhase,
    Swimlane,
};
#[cfg(test)]
use super::stream::TickSeq;
use super::stream::Ticker;
use super::OutputError;

/// File name inside the output directory.
pub const SWIMLANE_FILE: &str = "chip_swimlane_records.json";

/// ferry's key for a host-built run's device records of installing the uploaded graph (the
/// envelopes a device-orchestrated run writes as `aicpu_orchestrator_phases`).
pub const GRAPH_LOAD_KEY: &str = "aicpu_graph_load_phases";

#[derive(Deserialize)]
struct Metadata {
    clock_freq_hz: u64,
    /// Required by the format; `core_types` is what the reader uses.
    #[serde(rename = "num_cores")]
    _num_cores: usize,
    core_types: Vec<CoreType>,
    core_to_thread: Vec<i32>,
    #[serde(default)]
    arch: Option<String>,
    #[serde(default)]
    kernel_names: BTreeMap<String, String>,
    #[serde(default)]
    case: Option<String>,
    #[serde(default)]
    orchestrator_source: Option<String>,
    #[serde(default)]
    host_clock_domain_id: Option<String>,
    #[serde(default)]
    host_orchestration_origin_ns: Option<u64>,
    #[serde(default)]
    host_capture: Option<HostCapture>,
    #[serde(default)]
    clock_anchors: Option<ClockAnchors>,
    #[serde(default)]
    run: Option<RunLabel>,
}

/// [`Metadata`] borrowed from the model (same fields, same order; integer map keys serialize as
/// JSON strings).
#[derive(Serialize)]
struct MetadataOut<'a> {
    clock_freq_hz: u64,
    num_cores: usize,
    core_types: &'a [CoreType],
    core_to_thread: &'a [i32],
    arch: Option<&'a str>,
    kernel_names: &'a BTreeMap<i32, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    case: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    orchestrator_source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    orchestrator_clock_domain: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host_clock_domain_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host_orchestration_origin_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host_capture: Option<HostCapture>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clock_anchors: Option<&'a ClockAnchors>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<RunLabel>,
}

#[derive(Deserialize)]
struct PhaseObj {
    kind: String,
    start_cycles: u64,
    end_cycles: u64,
    loop_iter: u32,
    tasks_processed: u32,
    #[serde(default)]
    pop_hit: Option<u32>,
    #[serde(default)]
    pop_miss: Option<u32>,
    #[serde(default)]
    task_id: Option<u64>,
    #[serde(default)]
    shared_at_start: [i16; 3],
    #[serde(default)]
    shared_at_end: [i16; 3],
}

/// [`PhaseObj`] as written: built on the stack per phase.
#[cfg(test)]
#[derive(Serialize)]
struct PhaseOut {
    kind: &'static str,
    start_cycles: u64,
    end_cycles: u64,
    loop_iter: u32,
    tasks_processed: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pop_hit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pop_miss: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_id: Option<u64>,
    shared_at_start: [i16; 3],
    shared_at_end: [i16; 3],
}

#[derive(Serialize, Deserialize)]
struct OrchObj {
    submit_idx: u32,
    task_id: u64,
    start_cycles: u64,
    end_cycles: u64,
}

/// Per-thread arrays of arrays, streamed.
#[cfg(test)]
struct Threads<'a, 't, T, F> {
    threads: &'a [Vec<T>],
    f: F,
    tick: &'a Ticker<'t>,
}

#[cfg(test)]
impl<'a, T, F, S> Serialize for Threads<'a, '_, T, F>
where
    F: Fn(&'a T) -> S + Copy,
    S: Serialize,
{
    fn serialize<Ser: Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
        let mut seq = s.serialize_seq(Some(self.threads.len()))?;
        for th in self.threads {
            seq.serialize_element(&TickSeq { items: th, f: self.f, tick: self.tick })?;
        }
        seq.end()
    }
}

/// The file's top level, in the original's key order, every array streamed from the model: the
/// serde reference the hand-written writer is tested against.
#[cfg(test)]
struct FileOut<'a, 't> {
    meta: &'a RunMeta,
    kernels: &'a BTreeMap<i32, String>,
    sw: &'a Swimlane,
    loss: &'a LossAccounting,
    tick: &'a Ticker<'t>,
}

#[cfg(test)]
impl Serialize for FileOut<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (meta, sw, tick) = (self.meta, self.sw, self.tick);
        let mut st = s.serialize_struct("FileOut", 8)?;
        st.serialize_field("chip_swimlane_level", &sw.level)?;
        let host = meta.host_orchestration.as_ref();
        st.serialize_field(
            "metadata",
            &MetadataOut {
                clock_freq_hz: meta.clock_freq_hz,
                num_cores: meta.num_cores(),
                core_types: &meta.core_types,
                core_to_thread: &meta.core_to_thread,
                arch: Some(&meta.arch),
                kernel_names: self.kernels,
                case: meta.case.as_deref(),
                orchestrator_source: host.map(|_| "host"),
                orchestrator_clock_domain: host.map(|_| HOST_CLOCK_DOMAIN),
                host_clock_domain_id: host.map(|h| h.clock_domain_id.as_str()),
                host_orchestration_origin_ns: host.map(|h| h.origin_ns),
                host_capture: host.map(HostCapture::of),
                clock_anchors: meta.clock_anchors.as_ref(),
                run: meta.run,
            },
        )?;
        st.serialize_field(
            "aicore_tasks",
            &TickSeq {
                items: &sw.aicore_tasks,
                f: |t: &AicoreTask| {
                    (t.core, t.task_token_raw, t.reg_task_id, t.start, t.end, t.receive_to_start)
                },
                tick,
            },
        )?;
        st.serialize_field(
            "aicpu_tasks",
            &TickSeq {
                items: &sw.aicpu_tasks,
                f: |t: &AicpuTask| (t.core, t.reg_task_id, t.dispatch, t.finish),
                tick,
            },
        )?;
        st.serialize_field(
            "aicpu_scheduler_phases",
            &Threads { threads: &sw.sched_phases, f: phase_out, tick },
        )?;
        // A host-built run's orchestrator is the host: the device's records of installing the
        // uploaded graph go under ferry's own key, since the original's readers refuse host
        // and AICPU orchestrator records in one file.
        st.serialize_field(
            if host.is_some() { GRAPH_LOAD_KEY } else { "aicpu_orchestrator_phases" },
            &Threads {
                threads: &sw.orch_phases,
                f: |o: &OrchPhase| OrchObj {
                    submit_idx: o.submit_idx,
                    task_id: o.task_id,
                    start_cycles: o.start,
                    end_cycles: o.end,
                },
                tick,
            },
        )?;
        if let Some(h) = host {
            // One host orchestrator thread: one inner array.
            st.serialize_field("host_orchestrator_phases", &[&h.phases])?;
        }
        st.serialize_field("dfx", self.loss)?;
        st.end()
    }
}

#[derive(Deserialize)]
struct FileIn {
    chip_swimlane_level: u32,
    metadata: Metadata,
    #[serde(default)]
    aicore_tasks: Vec<Vec<u64>>,
    #[serde(default)]
    aicpu_tasks: Vec<Vec<u64>>,
    #[serde(default)]
    aicpu_scheduler_phases: Vec<Vec<PhaseObj>>,
    #[serde(default)]
    aicpu_orchestrator_phases: Vec<Vec<OrchObj>>,
    #[serde(default)]
    host_orchestrator_phases: Vec<Vec<HostOrchPhase>>,
    #[serde(default)]
    aicpu_graph_load_phases: Vec<Vec<OrchObj>>,
    #[serde(default)]
    dfx: LossAccounting,
}

#[cfg(test)]
fn phase_out(p: &SchedPhase) -> PhaseOut {
    let task = p.task_id();
    PhaseOut {
        kind: p.kind.name(),
        start_cycles: p.start,
        end_cycles: p.end,
        loop_iter: p.loop_iter,
        tasks_processed: p.tasks_processed,
        pop_hit: task.is_none().then_some(p.phase_data[0]),
        pop_miss: task.is_none().then_some(p.phase_data[1]),
        task_id: task,
        shared_at_start: p.shared_at_start,
        shared_at_end: p.shared_at_end,
    }
}

/// Writes the swimlane file's JSON to `w`.
///
/// # Errors
///
/// [`OutputError::Json`] when writing fails.
pub fn write_swimlane<W: Write>(
    w: W,
    meta: &RunMeta,
    kernels: &BTreeMap<i32, String>,
    sw: &Swimlane,
    loss: &LossAccounting,
) -> Result<(), OutputError> {
    write_swimlane_ticked(w, meta, kernels, sw, loss, &Ticker::silent())
}

/// [`write_swimlane`], one tick per record.
pub(crate) fn write_swimlane_ticked<W: Write>(
    w: W,
    meta: &RunMeta,
    kernels: &BTreeMap<i32, String>,
    sw: &Swimlane,
    loss: &LossAccounting,
    tick: &Ticker<'_>,
) -> Result<(), OutputError> {
    let (io, json) = (OutputError::io(SWIMLANE_FILE), OutputError::json(SWIMLANE_FILE));
    let mut w = w;
    let mut j = Json::new();
    let host = meta.host_orchestration.as_ref();
    j.raw(b"{\"chip_swimlane_level\":");
    j.u64(sw.level.into());
    j.raw(b",\"metadata\":");
    j.serde(&MetadataOut {
        clock_freq_hz: meta.clock_freq_hz,
        num_cores: meta.num_cores(),
        core_types: &meta.core_types,
        core_to_thread: &meta.core_to_thread,
        arch: Some(&meta.arch),
        kernel_names: kernels,
        case: meta.case.as_deref(),
        orchestrator_source: host.map(|_| "host"),
        orchestrator_clock_domain: host.map(|_| HOST_CLOCK_DOMAIN),
        host_clock_domain_id: host.map(|h| h.clock_domain_id.as_str()),
        host_orchestration_origin_ns: host.map(|h| h.origin_ns),
        host_capture: host.map(HostCapture::of),
        clock_anchors: meta.clock_anchors.as_ref(),
        run: meta.run,
    })
    .map_err(&json)?;
    j.raw(b",\"aicore_tasks\":");
    j.records(&mut w, &sw.aicore_tasks, tick, |j, t| {
        let (core, reg, r2s) = (t.core.into(), t.reg_task_id.into(), t.receive_to_start.into());
        j.u64s([core, t.task_token_raw, reg, t.start, t.end, r2s]);
    })
    .map_err(&io)?;
    j.raw(b",\"aicpu_tasks\":");
    j.records(&mut w, &sw.aicpu_tasks, tick, |j, t| {
        j.u64s([t.core.into(), t.reg_task_id.into(), t.dispatch, t.finish]);
    })
    .map_err(&io)?;
    j.raw(b",\"aicpu_scheduler_phases\":[");
    for (k, th) in sw.sched_phases.iter().enumerate() {
        if k > 0 {
            j.raw(b",");
        }
        j.records(&mut w, th, tick, put_phase).map_err(&io)?;
    }
    // A host-built run's orchestrator is the host: the device's records of installing the
    // uploaded graph go under ferry's own key, since the original's readers refuse host and
    // AICPU orchestrator records in one file.
    j.raw(b"],\"");
    j.raw(if host.is_some() { GRAPH_LOAD_KEY } else { "aicpu_orchestrator_phases" }.as_bytes());
    j.raw(b"\":[");
    for (k, th) in sw.orch_phases.iter().enumerate() {
        if k > 0 {
            j.raw(b",");
        }
        j.records(&mut w, th, tick, |j, o| {
            j.raw(b"{\"submit_idx\":");
            j.u64(o.submit_idx.into());
            j.raw(b",\"task_id\":");
            j.u64(o.task_id);
            j.raw(b",\"start_cycles\":");
            j.u64(o.start);
            j.raw(b",\"end_cycles\":");
            j.u64(o.end);
            j.raw(b"}");
        })
        .map_err(&io)?;
    }
    j.raw(b"]");
    if let Some(h) = host {
        // One host orchestrator thread: one inner array.
        j.raw(b",\"host_orchestrator_phases\":");
        j.serde(&[&h.phases]).map_err(&json)?;
    }
    j.raw(b",\"dfx\":");
    j.serde(loss).map_err(&json)?;
    j.raw(b"}");
    j.finish_into(&mut w).map_err(&io)
}

/// One scheduler phase's object, field for field what the serde reference writes (`pop_hit`
/// and `pop_miss` for a phase without a task, `task_id` for one with).
fn put_phase(j: &mut Json, p: &SchedPhase) {
    j.raw(b"{\"kind\":");
    j.str(p.kind.name());
    j.raw(b",\"start_cycles\":");
    j.u64(p.start);
    j.raw(b",\"end_cycles\":");
    j.u64(p.end);
    j.raw(b",\"loop_iter\":");
    j.u64(p.loop_iter.into());
    j.raw(b",\"tasks_processed\":");
    j.u64(p.tasks_processed.into());
    match p.task_id() {
        None => {
            j.raw(b",\"pop_hit\":");
            j.u64(p.phase_data[0].into());
            j.raw(b",\"pop_miss\":");
            j.u64(p.phase_data[1].into());
        }
        Some(t) => {
            j.raw(b",\"task_id\":");
            j.u64(t);
        }
    }
    j.raw(b",\"shared_at_start\":");
    j.i64s(p.shared_at_start.iter().map(|&v| i64::from(v)));
    j.raw(b",\"shared_at_end\":");
    j.i64s(p.shared_at_end.iter().map(|&v| i64::from(v)));
    j.raw(b"}");
}

/// What [`read_swimlane`] returns: the run metadata, kernel names, records and loss accounting.
pub type SwimlaneParts = (RunMeta, BTreeMap<i32, String>, Swimlane, LossAccounting);

/// Reads a swimlane file (also the original runtime's, without ferry's extra keys).
///
/// # Errors
///
/// [`OutputError::Json`] on malformed JSON, [`OutputError::Format`] on a short row or an unknown
/// phase kind.
pub fn read_swimlane<R: Read>(r: R) -> Result<SwimlaneParts, OutputError> {
    let f: FileIn = serde_json::from_reader(r).map_err(OutputError::json(SWIMLANE_FILE))?;
    let bad = |what: String| OutputError::Format { file: SWIMLANE_FILE.into(), what };
    let num = |v: u64, col: &str| -> Result<u32, OutputError> {
        u32::try_from(v).map_err(|_| bad(format!("{col} {v} does not fit 32 bits")))
    };
    if f.metadata.clock_freq_hz == 0 {
        return Err(bad(
            "metadata.clock_freq_hz is 0: no time can be derived from the cycles".into()
        ));
    }
    if let Some(t) = f
        .metadata
        .core_to_thread
        .iter()
        .find(|&&t| t < -1 || t >= super::model::MAX_FILE_THREADS as i32)
    {
        return Err(bad(format!(
            "metadata.core_to_thread names thread {t} (-1 or 0..{})",
            super::model::MAX_FILE_THREADS
        )));
    }
    super::model::check_loss(&f.dfx, SWIMLANE_FILE)?;
    let mut meta = RunMeta::new(
        f.metadata.arch.as_deref().unwrap_or("a2a3"),
        f.metadata.clock_freq_hz,
        f.metadata.core_types,
    );
    if f.metadata.core_to_thread.len() == meta.core_types.len() {
        meta.core_to_thread = f.metadata.core_to_thread;
    }
    meta.case = f.metadata.case;
    meta.clock_anchors = f.metadata.clock_anchors;
    meta.run = f.metadata.run;
    let host_phases = !f.host_orchestrator_phases.is_empty();
    match f.metadata.orchestrator_source.as_deref() {
        Some("host") => {
            if !f.aicpu_orchestrator_phases.iter().all(Vec::is_empty) {
                return Err(bad("a host-orchestrated file carries aicpu_orchestrator_phases: \
                                host and AICPU orchestrator records do not mix"
                    .into()));
            }
            meta.host_orchestration = Some(HostOrchestration {
                clock_domain_id: f.metadata.host_clock_domain_id.unwrap_or_default(),
                origin_ns: f.metadata.host_orchestration_origin_ns.unwrap_or(0),
                expected_records: f.metadata.host_capture.map_or(0, |c| c.expected_records),
                phases: f.host_orchestrator_phases.into_iter().flatten().collect(),
            });
        }
        None | Some("aicpu") if !host_phases => {}
        other => {
            return Err(bad(format!(
                "host_orchestrator_phases with orchestrator_source {other:?} (needs \"host\")"
            )))
        }
    }
    let kernels = f
        .metadata
        .kernel_names
        .into_iter()
        .filter_map(|(k, v)| k.parse::<i32>().ok().map(|k| (k, v)))
        .collect();
    let mut sw = Swimlane::new(f.chip_swimlane_level);
    for row in f.aicore_tasks {
        if row.len() < 5 {
            return Err(bad(format!("aicore_tasks row has {} columns, needs 5 or 6", row.len())));
        }
        sw.aicore_tasks.push(AicoreTask {
            core: num(row[0], "core_id")?,
            task_token_raw: row[1],
            reg_task_id: num(row[2], "reg_task_id")?,
            start: row[3],
            end: row[4],
            receive_to_start: row
                .get(5)
                .map(|&v| num(v, "receive_to_start"))
                .transpose()?
                .unwrap_or(0),
        });
    }
    for row in f.aicpu_tasks {
        if row.len() < 4 {
            return Err(bad(format!("aicpu_tasks row has {} columns, needs 4", row.len())));
        }
        sw.aicpu_tasks.push(AicpuTask {
            core: num(row[0], "core_id")?,
            reg_task_id: num(row[1], "reg_task_id")?,
            dispatch: row[2],
            finish: row[3],
        });
    }
    for th in f.aicpu_scheduler_phases {
        let mut v = Vec::with_capacity(th.len());
        for p in th {
            let kind = SchedPhaseKind::from_name(&p.kind)
                .ok_or_else(|| bad(format!("unknown scheduler phase kind {:?}", p.kind)))?;
            let phase_data = match p.task_id {
                Some(t) if kind.carries_task() => [t as u32, (t >> 32) as u32],
                _ => [p.pop_hit.unwrap_or(0), p.pop_miss.unwrap_or(0)],
            };
            v.push(SchedPhase {
                kind,
                start: p.start_cycles,
                end: p.end_cycles,
                loop_iter: p.loop_iter,
                tasks_processed: p.tasks_processed,
                phase_data,
                shared_at_start: p.shared_at_start,
                shared_at_end: p.shared_at_end,
            });
        }
        sw.sched_phases.push(v);
    }
    if !f.aicpu_graph_load_phases.is_empty() && meta.host_orchestration.is_none() {
        return Err(bad(format!("{GRAPH_LOAD_KEY} without orchestrator_source \"host\"")));
    }
    let orch = if meta.host_orchestration.is_some() {
        f.aicpu_graph_load_phases
    } else {
        f.aicpu_orchestrator_phases
    };
    for th in orch {
        sw.orch_phases.push(
            th.into_iter()
                .map(|o| OrchPhase {
                    submit_idx: o.submit_idx,
                    task_id: o.task_id,
                    start: o.start_cycles,
                    end: o.end_cycles,
                })
                .collect(),
        );
    }
    Ok((meta, kernels, sw, f.dfx))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written file is byte for byte serde's serialization through the reference
    /// `FileOut`: every array and phase shape of the sample runs, orchestrated by the AICPU and
    /// by the host, with metadata strings that need escapes.
    #[test]
    fn the_written_file_is_serde_jsons() {
        use crate::sample::{sample_run, scaled_run};
        use crate::LossPolicy;
        let mut runs = vec![sample_run(LossPolicy::Block), sample_run(LossPolicy::Drop)];
        runs.push(scaled_run(300));
        let mut odd = sample_run(LossPolicy::Block);
        odd.meta.case = Some("a \"case\"\\\n".into());
        odd.kernels.insert(9, "k\u{1}".into());
        odd.meta.host_orchestration = Some(HostOrchestration {
            clock_domain_id: "ferry-process-1".into(),
            origin_ns: 100,
            expected_records: 1,
            phases: vec![HostOrchPhase {
                submit_idx: 0,
                task_id: 3,
                start_host_ns: 100,
                end_host_ns: 150,
            }],
        });
        runs.push(odd);
        let phases = || runs.iter().flat_map(|r| r.swimlane.as_ref().unwrap().sched_phases.iter());
        assert!(phases().flatten().any(|p| p.task_id().is_some()));
        assert!(phases().flatten().any(|p| p.task_id().is_none()));
        for run in &runs {
            let sw = run.swimlane.as_ref().unwrap();
            let mut got = Vec::new();
            write_swimlane(&mut got, &run.meta, &run.kernels, sw, &run.loss).unwrap();
            let tick = Ticker::silent();
            let file = FileOut {
                meta: &run.meta,
                kernels: &run.kernels,
                sw,
                loss: &run.loss,
                tick: &tick,
            };
            let want = serde_json::to_vec(&file).unwrap();
            assert_eq!(String::from_utf8(got).unwrap(), String::from_utf8(want).unwrap());
        }
    }

    #[test]
    fn reads_the_spec_example() {
        let text = r#"{
          "chip_swimlane_level": 4,
          "metadata": {"clock_freq_hz": 50000000, "num_cores": 3,
                       "core_types": ["aic", "aiv", "aiv"], "core_to_thread": [0, 0, 0]},
          "aicore_tasks": [[0, 4294967296, 1, 1000, 1500, 12]],
          "aicpu_tasks":  [[0, 1, 980, 1520]],
          "aicpu_scheduler_phases": [[
             {"kind": "dispatch", "start_cycles": 970, "end_cycles": 990, "loop_iter": 3,
              "tasks_processed": 1, "pop_hit": 1, "pop_miss": 0,
              "shared_at_start": [0,1,0], "shared_at_end": [0,0,0]}]],
          "aicpu_orchestrator_phases": [[
             {"submit_idx": 0, "task_id": 4294967296, "start_cycles": 900, "end_cycles": 950}]]
        }"#;
        let (meta, _, sw, loss) = read_swimlane(text.as_bytes()).unwrap();
        assert_eq!(meta.num_cores(), 3);
        assert_eq!(sw.aicore_tasks[0].receive_to_start, 12);
        assert_eq!(sw.aicpu_tasks[0].finish, 1520);
        assert_eq!(sw.sched_phases[0][0].kind, SchedPhaseKind::Dispatch);
        assert_eq!(sw.sched_phases[0][0].phase_data, [1, 0]);
        assert_eq!(sw.orch_phases[0][0].task_id, 1 << 32);
        assert!(loss.lanes.is_empty());
    }

    #[test]
    fn short_rows_and_unknown_kinds_are_format_errors() {
        let text = r#"{"chip_swimlane_level": 1, "metadata": {"clock_freq_hz": 1, "num_cores": 0,
            "core_types": [], "core_to_thread": []}, "aicore_tasks": [[0, 1, 2]]}"#;
        assert!(matches!(read_swimlane(text.as_bytes()), Err(OutputError::Format { .. })));
        let text = r#"{"chip_swimlane_level": 3, "metadata": {"clock_freq_hz": 1, "num_cores": 0,
            "core_types": [], "core_to_thread": []}, "aicpu_scheduler_phases": [[{"kind": "nap",
            "start_cycles": 0, "end_cycles": 1, "loop_iter": 0, "tasks_processed": 0}]]}"#;
        assert!(matches!(read_swimlane(text.as_bytes()), Err(OutputError::Format { .. })));
        assert!(matches!(read_swimlane(&b"{"[..]), Err(OutputError::Json { .. })));
    }

    #[test]
    fn written_file_has_the_documented_fields() {
        use crate::{sample::sample_run, LossPolicy};
        let run = sample_run(LossPolicy::Block);
        let mut out = Vec::new();
        let sw = run.swimlane.as_ref().unwrap();
        write_swimlane(&mut out, &run.meta, &run.kernels, sw, &run.loss).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        for k in [
            "chip_swimlane_level",
            "metadata",
            "aicore_tasks",
            "aicpu_tasks",
            "aicpu_scheduler_phases",
            "aicpu_orchestrator_phases",
            "dfx",
        ] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
        for k in ["clock_freq_hz", "num_cores", "core_types", "core_to_thread"] {
            assert!(v["metadata"].get(k).is_some(), "metadata.{k}");
        }
        assert_eq!(v["metadata"]["core_types"][0], "aic");
        assert!(v["aicore_tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r.as_array().unwrap().len() == 6));
        assert!(v["aicpu_tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r.as_array().unwrap().len() == 4));
        let d = &v["aicpu_scheduler_phases"][0][0];
        for k in [
            "kind",
            "start_cycles",
            "end_cycles",
            "loop_iter",
            "tasks_processed",
            "pop_hit",
            "pop_miss",
            "shared_at_start",
            "shared_at_end",
        ] {
            assert!(d.get(k).is_some(), "phase.{k}");
        }
        // A task-carrying kind writes task_id instead of the pop counters.
        let dummy = &v["aicpu_scheduler_phases"][1][3];
        assert_eq!(dummy["kind"], "dummy_task");
        assert_eq!(dummy["task_id"], (1u64 << 32) | 9);
        assert!(dummy.get("pop_hit").is_none());
        let o = &v["aicpu_orchestrator_phases"][0][0];
        for k in ["submit_idx", "task_id", "start_cycles", "end_cycles"] {
            assert!(o.get(k).is_some(), "orch.{k}");
        }
    }

    #[test]
    fn host_built_runs_are_marked_and_round_trip() {
        use crate::host_time::{ClockAnchorSample, ANCHOR_PRE};
        use crate::{sample::sample_run, LossPolicy};
        let mut run = sample_run(LossPolicy::Block);
        let sw = run.swimlane.clone().unwrap();
        let write = |meta: &RunMeta| {
            let mut out = Vec::new();
            write_swimlane(&mut out, meta, &run.kernels, &sw, &run.loss).unwrap();
            out
        };
        // Device-orchestrated: anchors, no host marks, the device's orchestrator phases.
        let mut anchors = ClockAnchors::new_sim();
        anchors.samples.push(ClockAnchorSample {
            position: ANCHOR_PRE.into(),
            sample_idx: 0,
            host_before_ns: 10,
            device_cycles: 5,
            host_after_ns: 20,
            error: None,
        });
        run.meta.clock_anchors = Some(anchors);
        let dev: serde_json::Value = serde_json::from_slice(&write(&run.meta)).unwrap();
        assert!(dev["metadata"].get("orchestrator_source").is_none());
        assert!(dev.get("host_orchestrator_phases").is_none());
        assert!(dev["aicpu_orchestrator_phases"].as_array().is_some_and(|a| !a.is_empty()));
        assert_eq!(dev["metadata"]["clock_anchors"]["samples"][0]["device_cycles"], 5);
        // Host-built: marked, host phases, the device's install envelopes under ferry's key.
        run.meta.host_orchestration = Some(HostOrchestration {
            clock_domain_id: "ferry-process-1".into(),
            origin_ns: 100,
            expected_records: 1,
            phases: vec![HostOrchPhase {
                submit_idx: 0,
                task_id: 0,
                start_host_ns: 100,
                end_host_ns: 150,
            }],
        });
        let bytes = write(&run.meta);
        let host: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let m = &host["metadata"];
        assert_eq!(m["orchestrator_source"], "host");
        assert_eq!(m["orchestrator_clock_domain"], "host_monotonic_ns");
        assert_eq!(m["host_orchestration_origin_ns"], 100);
        assert_eq!(m["host_capture"]["status"], "complete");
        assert_eq!(m["host_capture"]["recorded_records"], 1);
        assert_eq!(host["host_orchestrator_phases"][0][0]["end_host_ns"], 150);
        assert!(host.get("aicpu_orchestrator_phases").is_none());
        assert!(host.get(GRAPH_LOAD_KEY).is_some());
        let (meta, _, back, _) = read_swimlane(&bytes[..]).unwrap();
        assert_eq!(meta, run.meta);
        assert_eq!(back, sw);
        // Host and AICPU orchestrator records in one file are refused.
        let mut mixed = host.clone();
        mixed["aicpu_orchestrator_phases"] = dev["aicpu_orchestrator_phases"].clone();
        let e = read_swimlane(mixed.to_string().as_bytes()).unwrap_err();
        assert!(e.to_string().contains("do not mix"), "{e}");
    }
}
