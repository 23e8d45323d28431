//! A session's end in its native profile, and its models rebuilt from the native profile alone:
//! what the analysis commands read and `ferry export` writes the original formats from.
//!
//! The records are the native profile's chunks (one per collected buffer, with its lane and
//! sequence number; the ArgsDump payloads a buffer's chains had copied follow it as an
//! `args_bin` chunk of the same lane); what the model takes beside them — the chip, the options,
//! the kernels' names, every lane's loss line and run ends, where each payload went — is sealed
//! by [`DfxSession::finish`] as one [`RecordStream::Meta`] chunk (lane [`META_SESSION`]): the
//! [`SessionEnd`]. A session rebuilt from both goes through the same conversion as the
//! collected one, so the files written from it are the same bytes.
//!
//! [`DfxSession::finish`]: super::DfxSession::finish
use std::collections::BTreeMap;

use ferry_abi::arch::Arch;
use ferry_abi::records::{
    AicoreTaskRecord, AicpuTaskRecord, OrchPhaseRecord, PmuRecord, SchedPhaseRecord,
    ScopeStatsRecord,
};
use ferry_dfx::{RunEnd, RunEnds};
use ferry_profile::collect::{LaneLog, LaneRecords};
use ferry_profile::recorder::{Packed, RecordStream, Recording};
use ferry_profile::{ArgBin, LaneLoss, LossPolicy, RunModel};
use serde::{Deserialize, Serialize};

use super::model::Taken;
use super::runs::Regions;
use super::sinks::ArgsLane;
use super::{CollectError, DfxChip, DfxError, DfxOptions};

/// Lane of the [`RecordStream::Meta`] chunk holding a session's end: what its models take beside the
/// records (JSON).
pub const META_SESSION: u32 = 0;

/// What a session's models take beside the records (JSON in a [`RecordStream::Meta`] chunk).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct SessionEnd {
    pub(super) swimlane: u32,
    pub(super) pmu: u32,
    pub(super) dep_gen: bool,
    pub(super) dump_args: u32,
    pub(super) scope_stats: bool,
    pub(super) arch: String,
    pub(super) threads: u32,
    pub(super) aic: u32,
    pub(super) aiv: u32,
    pub(super) task_window: u32,
    pub(super) scratch_bytes: u64,
    pub(super) kernels: Vec<(i32, String)>,
    pub(super) policy: LossPolicy,
    pub(super) budget_cycles: u64,
    pub(super) arena_drops: u64,
    pub(super) per_run: bool,
    /// Per region that was on, by its stream id.
    pub(super) regions: BTreeMap<u16, RegionEnd>,
}

/// One region's loss lines and run ends (and, for ArgsDump, how each buffer's payloads went).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct RegionEnd {
    pub(super) loss: Vec<LaneLoss>,
    /// Per lane: the run ends' total, and each end `[produced, dropped, stall cycles, stall
    /// waits, seq]`.
    pub(super) ends: Vec<(u64, Vec<[u64; 5]>)>,
    /// ArgsDump only, per lane.
    #[serde(default)]
    pub(super) args: Vec<ArgsEnd>,
}

/// How an ArgsDump lane's buffers placed their payloads.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct ArgsEnd {
    /// Per buffer: whether its chains were walked for payloads.
    walked: Vec<bool>,
    /// Per buffer: its first argument's place in `places`.
    first: Vec<usize>,
    /// The walked chains' payloads, `[kind, offset, size]`: kind 0 none, 1 in the lane's bin,
    /// 2 overwritten.
    places: Vec<[u64; 3]>,
}

impl RegionEnd {
    pub(super) fn of<L>(t: &Taken<L>) -> RegionEnd {
        let ends = t
            .ends
            .iter()
            .map(|e| {
                let v = e
                    .ends
                    .iter()
                    .map(|r| {
                        [r.produced, r.dropped, r.stall_cycles, r.stall_waits, u64::from(r.seq)]
                    })
                    .collect();
                (e.total, v)
            })
            .collect();
        RegionEnd { loss: t.loss.clone(), ends, args: Vec::new() }
    }

    fn ends(&self) -> Vec<RunEnds> {
        self.ends
            .iter()
            .map(|(total, v)| RunEnds {
                total: *total,
                ends: v
                    .iter()
                    .map(|e| RunEnd {
                        produced: e[0],
                        dropped: e[1],
                        stall_cycles: e[2],
                        stall_waits: e[3],
                        seq: e[4] as u32,
                    })
                    .collect(),
            })
            .collect()
    }
}

/// The places of an ArgsDump lane's payloads as [`RegionEnd::args`] keeps them.
pub(super) fn args_end(lane: &ArgsLane) -> ArgsEnd {
    let places = lane
        .payloads
        .iter()
        .map(|p| match *p {
            ArgBin::None => [0, 0, 0],
            ArgBin::At { offset, size } => [1, offset, size],
            ArgBin::Overwritten => [2, 0, 0],
        })
        .collect();
    ArgsEnd { walked: lane.walked.clone(), first: lane.first_payload.clone(), places }
}

/// Why a native profile cannot be rebuilt into models.
fn invalid(why: String) -> DfxError {
    CollectError::Native(why).into()
}

impl SessionEnd {
    /// The end of a stopped session whose regions are `r`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn of(
        r: &Regions,
        chip: &DfxChip,
        opts: &DfxOptions,
        kernels: Vec<(i32, String)>,
        policy: LossPolicy,
        budget_cycles: u64,
        arena_drops: u64,
        per_run: bool,
    ) -> SessionEnd {
        let mut regions = BTreeMap::new();
        let mut put = |stream: RecordStream, end: Option<RegionEnd>| {
            if let Some(e) = end {
                regions.insert(stream as u16, e);
            }
        };
        put(RecordStream::Aicore, r.aicore.as_ref().map(RegionEnd::of));
        put(RecordStream::Aicpu, r.aicpu.as_ref().map(RegionEnd::of));
        put(RecordStream::Sched, r.sched.as_ref().map(RegionEnd::of));
        put(RecordStream::Orch, r.orch.as_ref().map(RegionEnd::of));
        put(RecordStream::Pmu, r.pmu.as_ref().map(RegionEnd::of));
        put(RecordStream::Scope, r.scope.as_ref().map(RegionEnd::of));
        put(RecordStream::DepGen, r.dep_gen.as_ref().map(RegionEnd::of));
        put(
            RecordStream::Args,
            r.args.as_ref().map(|t| RegionEnd {
                args: t.lanes.iter().map(args_end).collect(),
                ..RegionEnd::of(t)
            }),
        );
        SessionEnd {
            swimlane: opts.swimlane,
            pmu: opts.pmu,
            dep_gen: opts.dep_gen,
            dump_args: opts.dump_args,
            scope_stats: opts.scope_stats,
            arch: chip.arch.name().to_string(),
            threads: chip.threads,
            aic: chip.aic,
            aiv: chip.aiv,
            task_window: chip.task_window,
            scratch_bytes: chip.scratch_bytes,
            kernels,
            policy,
            budget_cycles,
            arena_drops,
            per_run,
            regions,
        }
    }

    /// The chip and options the session's models are built for.
    pub(super) fn parts(&self) -> Result<(DfxChip, DfxOptions), DfxError> {
        let arch = Arch::from_name(&self.arch)
            .ok_or_else(|| invalid(format!("unknown arch {:?}", self.arch)))?;
        // What sizes the model is checked against the chip before anything is allocated by it.
        let p = arch.profile();
        if self.threads == 0
            || self.threads > p.max_aicpu_threads
            || self.aic > p.aic_per_die
            || self.aiv > p.aiv_per_die
        {
            return Err(invalid(format!(
                "{} AICPU threads, {} AIC + {} AIV: no {} chip has them (at most {}, {} + {})",
                self.threads,
                self.aic,
                self.aiv,
                arch.name(),
                p.max_aicpu_threads,
                p.aic_per_die,
                p.aiv_per_die
            )));
        }
        let chip = DfxChip {
            arch,
            threads: self.threads,
            aic: self.aic,
            aiv: self.aiv,
            task_window: self.task_window,
            scratch_bytes: self.scratch_bytes,
        };
        let opts = DfxOptions {
            swimlane: self.swimlane,
            pmu: self.pmu,
            dep_gen: self.dep_gen,
            dump_args: self.dump_args,
            scope_stats: self.scope_stats,
            ..DfxOptions::default()
        };
        Ok((chip, opts))
    }
}

/// The session end sealed in `rec`.
///
/// # Errors
/// [`DfxError::Collect`] when there is none (the run did not finish) or it does not parse.
pub(super) fn session_end(rec: &Recording) -> Result<SessionEnd, DfxError> {
    let chunk = rec
        .chunks
        .iter()
        .find(|c| c.stream == RecordStream::Meta && c.lane == META_SESSION)
        .ok_or_else(|| invalid("it holds no session end (the run did not finish)".into()))?;
    let end: SessionEnd = serde_json::from_slice(rec.payload(chunk))
        .map_err(|e| invalid(format!("its session end: {e}")))?;
    // A lane's thread names a track of the trace: one of a chip's, as every file's reader checks.
    let mut lanes = end.regions.values().flat_map(|r| &r.loss);
    if let Some(l) = lanes.find(|l| l.thread >= ferry_profile::MAX_FILE_THREADS) {
        return Err(invalid(format!("lane {:?} names AICPU thread {}", l.lane, l.thread)));
    }
    Ok(end)
}

/// One region's lanes from `rec`'s chunks of `stream`, as its collector had them.
fn lanes<R: Packed + ferry_dfx::Record>(
    rec: &Recording,
    stream: RecordStream,
) -> BTreeMap<u32, LaneLog<R>> {
    let mut l = LaneRecords::<R>::default();
    for c in rec.chunks.iter().filter(|c| c.stream == stream) {
        l.push(c.lane, c.seq, &rec.chunk_records::<R>(c));
    }
    LaneRecords::merge([l])
}

/// The regions of the session `end` describes, from `rec`'s chunks.
///
/// # Errors
/// [`DfxError::Collect`] for an ArgsDump lane whose buffers or payload bytes disagree with its
/// session end.
pub(super) fn regions(rec: &Recording, end: &SessionEnd) -> Result<Regions, DfxError> {
    fn taken<R: Packed + ferry_dfx::Record>(
        rec: &Recording,
        end: &SessionEnd,
        stream: RecordStream,
    ) -> Option<Taken<BTreeMap<u32, LaneLog<R>>>> {
        let r = end.regions.get(&(stream as u16))?;
        Some(Taken { lanes: lanes(rec, stream), loss: r.loss.clone(), ends: r.ends() })
    }
    let args = match end.regions.get(&(RecordStream::Args as u16)) {
        None => None,
        Some(r) => {
            let mut out: Vec<ArgsLane> = Vec::new();
            for (lane, a) in r.args.iter().enumerate() {
                let mut l = ArgsLane::default();
                let of_lane = |c: &&ferry_profile::recorder::ChunkInfo| {
                    c.stream == RecordStream::Args && c.lane == lane as u32
                };
                for c in rec.chunks.iter().filter(of_lane) {
                    l.buffers.push(l.words.append_whole(&rec.chunk_records::<u64>(c)));
                    l.seqs.push(c.seq);
                }
                // Where each buffer's arguments start among the places: in order, within them.
                let firsts_ok = a.first.windows(2).all(|w| w[0] <= w[1])
                    && a.first.last().is_none_or(|&f| f <= a.places.len());
                if !firsts_ok {
                    return Err(invalid(format!(
                        "ArgsDump lane {lane}: its buffers' first payloads are not in order \
                         within its {} payloads",
                        a.places.len()
                    )));
                }
                if l.buffers.len() != a.walked.len() || a.first.len() != a.walked.len() {
                    return Err(invalid(format!(
                        "ArgsDump lane {lane}: {} buffers recorded, {} in its session end",
                        l.buffers.len(),
                        a.walked.len()
                    )));
                }
                // The lane's payload bytes: its `args_bin` chunks, in file order.
                let of_bin = |c: &&ferry_profile::recorder::ChunkInfo| {
                    c.stream == RecordStream::ArgsBin && c.lane == lane as u32
                };
                for c in rec.chunks.iter().filter(of_bin) {
                    l.bin.extend_from_slice(rec.payload(c));
                }
                let held = l.bin.len() as u64;
                for p in &a.places {
                    l.payloads.push(match p[0] {
                        1 if p[1].checked_add(p[2]).is_some_and(|e| e <= held) => {
                            ArgBin::At { offset: p[1], size: p[2] }
                        }
                        1 => {
                            return Err(invalid(format!(
                                "ArgsDump lane {lane}: a payload at {} of {} bytes, past the \
                                 {held} payload bytes recorded",
                                p[1], p[2]
                            )))
                        }
                        2 => ArgBin::Overwritten,
                        _ => ArgBin::None,
                    });
                }
                l.walked = a.walked.clone();
                l.first_payload = a.first.clone();
                out.push(l);
            }
            Some(Taken { lanes: out, loss: r.loss.clone(), ends: r.ends() })
        }
    };
    Ok(Regions {
        aicore: taken::<AicoreTaskRecord>(rec, end, RecordStream::Aicore),
        aicpu: taken::<AicpuTaskRecord>(rec, end, RecordStream::Aicpu),
        sched: taken::<SchedPhaseRecord>(rec, end, RecordStream::Sched),
        orch: taken::<OrchPhaseRecord>(rec, end, RecordStream::Orch),
        pmu: taken::<PmuRecord>(rec, end, RecordStream::Pmu),
        scope: taken::<ScopeStatsRecord>(rec, end, RecordStream::Scope),
        dep_gen: taken::<u64>(rec, end, RecordStream::DepGen),
        args,
    })
}

/// Which subsystems a rebuild from a native profile builds ([`models_from_recording_parts`]):
/// an analysis that reads only the dependency graph need not decode the argument dump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts {
    /// ChipSwimlane (its four record kinds).
    pub swimlane: bool,
    /// PMU.
    pub pmu: bool,
    /// DepGen.
    pub dep_gen: bool,
    /// ArgsDump.
    pub args: bool,
    /// ScopeStats.
    pub scopes: bool,
}

impl Parts {
    /// Every subsystem the session recorded.
    pub const ALL: Parts =
        Parts { swimlane: true, pmu: true, dep_gen: true, args: true, scopes: true };
}

impl SessionEnd {
    /// This end with the subsystems `parts` leaves out switched off: their regions (records and
    /// loss lines) are not rebuilt.
    fn only(mut self, parts: Parts) -> SessionEnd {
        let mut drop = |on: bool, streams: &[RecordStream]| {
            if !on {
                for s in streams {
                    self.regions.remove(&(*s as u16));
                }
            }
        };
        use RecordStream::{Aicore, Aicpu, Args, DepGen, Orch, Pmu, Sched, Scope};
        drop(parts.swimlane, &[Aicore, Aicpu, Sched, Orch]);
        drop(parts.pmu, &[Pmu]);
        drop(parts.dep_gen, &[DepGen]);
        drop(parts.args, &[Args]);
        drop(parts.scopes, &[Scope]);
        if !parts.swimlane {
            self.swimlane = 0;
        }
        if !parts.pmu {
            self.pmu = 0;
        }
        self.dep_gen &= parts.dep_gen;
        if !parts.args {
            self.dump_args = 0;
        }
        self.scope_stats &= parts.scopes;
        self
    }
}

/// The models of the session a native profile recorded (as [`super::DfxSession::finish_runs`]
/// built them, or [`super::DfxSession::finish`] for a session finished as one model).
///
/// # Errors
/// [`DfxError::Collect`] when `rec` holds no session end or records that disagree with it, and
/// as [`super::DfxSession::finish_runs`].
pub fn models_from_recording(rec: &Recording) -> Result<Vec<RunModel>, DfxError> {
    models_from_recording_parts(rec, Parts::ALL)
}

/// [`models_from_recording`], building only the subsystems in `parts` (the others are `None` in
/// every model, their loss lines left out).
///
/// # Errors
/// As [`models_from_recording`].
pub fn models_from_recording_parts(
    rec: &Recording,
    parts: Parts,
) -> Result<Vec<RunModel>, DfxError> {
    let end = session_end(rec)?.only(parts);
    let (chip, opts) = end.parts()?;
    let m = super::base_model(&chip, end.kernels.iter().cloned(), end.policy, end.budget_cycles);
    let taken = regions(rec, &end)?;
    super::build_models(m, taken, &chip, &opts, end.arena_drops, end.per_run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_profile::recorder::{read_recording, FsyncPolicy, Recorder, RECORD_FILE};

    /// A native profile of `meta` (lane, bytes) chunks after one DepGen chunk.
    fn recording(tag: &str, meta: &[(u32, &[u8])]) -> Recording {
        let d = std::env::temp_dir().join(format!("ferry-native-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let h = ferry_fs::Dir::open_writable(&d, true).unwrap();
        let rec = Recorder::create(&h, RECORD_FILE, FsyncPolicy::Never).unwrap();
        rec.append(RecordStream::DepGen, 0, 0, &[1u64, 2]);
        for (lane, bytes) in meta {
            rec.append_bytes(RecordStream::Meta, *lane, 0, bytes);
        }
        rec.finish().unwrap();
        let r = read_recording(&h, RECORD_FILE, 1 << 20).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        r
    }

    /// The error's cause chain, one line.
    fn chain(e: &DfxError) -> String {
        let mut s = e.to_string();
        let mut at: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(c) = at {
            s.push_str(&format!(": {c}"));
            at = c.source();
        }
        s
    }

    /// A session end as JSON: an a2a3 chip of `threads` AICPU threads and 8 + 16 cores, with an
    /// ArgsDump region whose one lane has `first` as its buffers' first payloads.
    fn end_json(threads: u32, first: &[usize]) -> Vec<u8> {
        let args = serde_json::json!({
            "loss": [], "ends": [],
            "args": [{ "walked": vec![true; first.len()], "first": first, "places": [[0, 0, 0]] }],
        });
        serde_json::to_vec(&serde_json::json!({
            "swimlane": 0, "pmu": 0, "dep_gen": false, "dump_args": 2, "scope_stats": false,
            "arch": "a2a3", "threads": threads, "aic": 8, "aiv": 16, "task_window": 16,
            "scratch_bytes": 0, "kernels": [], "policy": "Block", "budget_cycles": 1,
            "arena_drops": 0, "per_run": true, "regions": { "8": args },
        }))
        .unwrap()
    }

    /// What a session end says is checked before anything is sized or indexed by it: a chip
    /// the arch does not have, a lane on a thread no chip has, payload places out of order or
    /// past the places are typed errors, never an allocation or a panic.
    #[test]
    fn a_session_end_is_checked_before_it_sizes_anything() {
        let ok = recording("end-ok", &[(META_SESSION, &end_json(4, &[0]))]);
        let e = chain(&models_from_recording(&ok).unwrap_err());
        // Sound so far: the recording holds no args chunk for the lane's one buffer.
        assert!(e.contains("0 buffers recorded, 1 in its session end"), "{e}");
        let huge = recording("end-threads", &[(META_SESSION, &end_json(u32::MAX, &[0]))]);
        let e = chain(&models_from_recording(&huge).unwrap_err());
        assert!(e.contains("no a2a3 chip has them"), "{e}");
        for (tag, first) in [("order", &[1usize, 0][..]), ("past", &[2][..])] {
            let bad = recording(tag, &[(META_SESSION, &end_json(4, first))]);
            let e = chain(&models_from_recording(&bad).unwrap_err());
            assert!(e.contains("first payloads are not in order"), "{tag}: {e}");
        }
        let mut v: serde_json::Value = serde_json::from_slice(&end_json(4, &[0])).unwrap();
        v["regions"]["6"] = serde_json::json!({ "loss": [{
            "lane": "dep_gen thread 9999", "subsystem": "dep_gen", "thread": 9999, "core": null,
            "produced": 0, "collected": 0, "dropped": 0, "stall_cycles": 0, "stall_waits": 0,
            "stalls": [],
        }], "ends": [] });
        let far = recording("end-lane", &[(META_SESSION, &serde_json::to_vec(&v).unwrap())]);
        let e = chain(&models_from_recording(&far).unwrap_err());
        assert!(e.contains("names AICPU thread 9999"), "{e}");
    }

    /// A native profile without its session's end (a run that never finished), or with one that
    /// does not parse, is a typed error naming what is missing, never a model of half a run.
    #[test]
    fn a_profile_without_a_sound_session_end_is_not_rebuilt() {
        let e = chain(&models_from_recording(&recording("none", &[])).unwrap_err());
        assert!(e.contains("no session end"), "{e}");
        // The profile's own end is not the session's.
        let e = chain(&models_from_recording(&recording("other", &[(1, b"{}")])).unwrap_err());
        assert!(e.contains("no session end"), "{e}");
        let bad = recording("bad", &[(META_SESSION, b"{\"arch\":")]);
        let e = chain(&models_from_recording(&bad).unwrap_err());
        assert!(e.contains("its session end"), "{e}");
    }
}
