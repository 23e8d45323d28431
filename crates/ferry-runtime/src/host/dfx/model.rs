//! The run model from a stopped session's reports: each region's lanes merged (no copy), then
//! converted into swimlane, PMU, ScopeStats and DepGen rows; ArgsDump keeps its chains, indexed
//! ([`ChainArgs`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{Builder, Scope, ScopedJoinHandle};

use ferry_abi::records::{
    self as abi, AicoreTaskRecord, AicpuTaskRecord, OrchPhaseRecord, PmuRecord, SchedPhaseRecord,
    ScopeStatsRecord,
};
use ferry_dfx::{Record, RunReport};
use ferry_profile::collect::{self, DepGenLog, LaneLog, LaneRecords};
use ferry_profile::{
    ArgBin, ArgsDump, ChainArgs, DepsGraph, LaneLoss, PmuTable, RunModel, ScopeStats, Subsystem,
    Swimlane,
};

use super::deps;
use super::sinks::ArgsLane;
#[cfg(test)]
use super::sinks::ArgsSink;
use super::{CollectError, DfxChip, DfxError, DfxOptions, LaneIds, Sub};
use crate::device::sched::cluster_of;
use ferry_abi::records::RecordDecodeError;

pub(super) type Lanes<R> = Option<BTreeMap<u32, LaneLog<R>>>;

/// A subsystem's records that do not decode.
fn records(subsystem: &'static str) -> impl Fn(RecordDecodeError) -> DfxError {
    move |source| CollectError::Records { subsystem, source }.into()
}

/// Work started beside this thread by [`beside`]: on a thread of the scope, or already done.
pub(super) enum Beside<'s, T> {
    Thread(ScopedJoinHandle<'s, T>),
    Done(T),
}

impl<T> Beside<'_, T> {
    /// The work's result; a panic on its thread is carried on.
    pub(super) fn join(self) -> T {
        match self {
            Beside::Thread(h) => match h.join() {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            },
            Beside::Done(r) => r,
        }
    }
}

/// Runs `f` on a thread of `sc` spawned by `thread`, or here and now when no thread can be had
/// (a process at its thread limit): a stopped session's records become a model either way
/// rather than being lost to a panic.
pub(super) fn beside<'s, T, F>(sc: &'s Scope<'s, '_>, thread: Builder, f: F) -> Beside<'s, T>
where
    F: FnOnce() -> T + Send + 's,
    T: Send + 's,
{
    // The work stays reachable from here: a failed spawn drops the thread's closure, not `f`.
    let work = Arc::new(Mutex::new(Some(f)));
    let theirs = Arc::clone(&work);
    let spawned = thread.spawn_scoped(sc, move || {
        let f = theirs.lock().unwrap_or_else(PoisonError::into_inner).take();
        f.expect("only a failed spawn takes the work back")()
    });
    match spawned {
        Ok(h) => Beside::Thread(h),
        Err(e) => {
            tracing::warn!(error = %e, "no thread for a DFX conversion: running it here");
            let f = work.lock().unwrap_or_else(PoisonError::into_inner).take();
            Beside::Done(f.expect("a thread that did not start took nothing")())
        }
    }
}

/// The swimlane, PMU and ScopeStats rows of a run into `m`, from each region's lanes.
pub(super) fn rows(
    m: &mut RunModel,
    (aicore, aicpu, sched, orch): (
        Lanes<AicoreTaskRecord>,
        Lanes<AicpuTaskRecord>,
        Lanes<SchedPhaseRecord>,
        Lanes<OrchPhaseRecord>,
    ),
    pmu: Lanes<PmuRecord>,
    scope: Option<(BTreeMap<u32, LaneLog<ScopeStatsRecord>>, u64, u64)>,
    c: &DfxChip,
    opts: &DfxOptions,
) -> Result<(), DfxError> {
    let scheds = c.threads.max(2) - 1;
    fn sw(m: &mut RunModel) -> &mut Swimlane {
        m.swimlane.get_or_insert_with(|| Swimlane::new(1))
    }
    for (core, recs) in aicore.into_iter().flatten() {
        for b in recs.buffers() {
            collect::add_aicore_records(sw(m), core, b);
        }
    }
    for (core, recs) in aicpu.into_iter().flatten() {
        for b in recs.buffers() {
            collect::add_aicpu_records(sw(m), core, b);
        }
    }
    for (t, recs) in sched.into_iter().flatten() {
        for b in recs.buffers() {
            collect::add_sched_records(sw(m), t, b).map_err(records("scheduler phase"))?;
        }
    }
    for recs in orch.into_iter().flat_map(BTreeMap::into_values) {
        for b in recs.buffers() {
            collect::add_orch_records(sw(m), 0, b);
        }
    }
    if let Some(lanes) = pmu {
        let mut t = PmuTable::new(c.arch.name(), opts.pmu);
        for (core, recs) in lanes {
            let thread = cluster_of(core, c.aic) % scheds;
            for b in recs.buffers() {
                collect::add_pmu_records(&mut t, thread, core, b).map_err(records("pmu"))?;
            }
        }
        // By task id, stably; by key-index pairs, so each ~130-byte row moves once, not once per
        // merge level (the lanes interleave their task ids).
        t.rows.sort_by_cached_key(|r| r.task_id);
        m.pmu = Some(t);
    }
    if let Some((lanes, total, dropped)) = scope {
        let mut st = ScopeStats {
            total,
            dropped,
            task_window_max: [i64::from(c.task_window); abi::SCOPE_RINGS],
            // The heap is the run's scratch arena: reserved at what the run asked for, so its
            // fill is no ring pressure (see `ScopeStats::heap_reserved`).
            heap_max: [c.scratch_bytes; abi::SCOPE_RINGS],
            heap_reserved: true,
            dep_pool_max: [i64::from(c.task_window) * 16; abi::SCOPE_RINGS],
            tensormap_max: i64::from(c.task_window) * 64,
            ..ScopeStats::default()
        };
        for recs in lanes.into_values() {
            for b in recs.buffers() {
                collect::add_scope_records(&mut st, b).map_err(records("scope stats"))?;
            }
        }
        m.scopes = Some(st);
    }
    Ok(())
}

/// DepGen's graph from its lanes (a lane's buffers hold whole chains), checked for decode errors
/// and, when nothing was dropped (`lossless`), for submits left incomplete.
pub(super) fn dep_gen(
    lanes: BTreeMap<u32, LaneLog<u64>>,
    lossless: bool,
) -> Result<DepsGraph, DfxError> {
    let mut log = DepGenLog::default();
    for words in lanes.into_values() {
        for b in words.buffers() {
            log.push_buffer(b);
        }
    }
    log.finish();
    if let Some(e) = log.error {
        return Err(CollectError::DepGen(e).into());
    }
    if lossless && log.incomplete > 0 {
        return Err(CollectError::IncompleteSubmits { incomplete: log.incomplete }.into());
    }
    Ok(deps::deps_graph(log))
}

/// The ArgsDump model from its shards' sinks: each lane's collected chains kept as they came
/// ([`ChainArgs`]: an argument is decoded when it is read, not expanded into a row here), each
/// payload placed in one `args.bin` (the lanes' bins one after the other), and the arguments lost
/// (`dropped`: the device's count, in arguments, of those the arena gate gave up on and of those
/// whose chain the writer lost; the lanes' transport lines count words).
pub(super) fn args_dump(
    lanes: Vec<ArgsLane>,
    level: u32,
    dropped: u64,
) -> Result<ArgsDump, DfxError> {
    let mut d = ArgsDump { level, ..ArgsDump::default() };
    d.bin.reserve(lanes.iter().map(|l| l.bin.len()).sum());
    let mut kept = ChainArgs::default();
    for lane in lanes {
        if let Some(e) = lane.bad {
            return Err(CollectError::ArgsChain(e).into());
        }
        let base = d.bin.len();
        let mut payloads = lane.payloads.iter();
        let mut overwritten = 0u64;
        let walked = lane.walked;
        kept.push_lane(lane.words, lane.buffers, |buffer| {
            if !walked.get(buffer).copied().unwrap_or(true) {
                // A buffer whose chains could name no payload (`ArgsSink`).
                return ArgBin::None;
            }
            // The lane's bin goes after those before it.
            match payloads.next().copied().unwrap_or_default() {
                ArgBin::At { offset, size } => ArgBin::At { offset: base + offset, size },
                ArgBin::Overwritten => {
                    overwritten += 1;
                    ArgBin::Overwritten
                }
                ArgBin::None => ArgBin::None,
            }
        })
        .map_err(|e| DfxError::from(CollectError::Args(e)))?;
        d.dropped_overwrite += overwritten;
        for c in lane.bin.chunks() {
            d.bin.extend_from_slice(c);
        }
    }
    d.args = kept.into();
    d.dropped_records = dropped;
    Ok(d)
}

/// Takes one region's report off the engine: its loss lines go into `loss`, its shards' records
/// are merged per lane.
pub(super) fn take<R: Record + ferry_profile::recorder::Packed>(
    report: &mut ferry_dfx::EngineReport,
    sub: Sub<R, LaneRecords<R>>,
    subsystem: Subsystem,
    name: &str,
) -> Taken<BTreeMap<u32, LaneLog<R>>> {
    let r = report.take(sub.key);
    let loss = loss_lines(&r, &sub.ids, subsystem, name);
    Taken { loss, ends: r.run_ends, lanes: LaneRecords::merge(r.sinks) }
}

/// One region taken off a stopped engine: its lanes' records, loss lines and run ends (each
/// by lane).
pub(super) struct Taken<L> {
    pub(super) lanes: L,
    pub(super) loss: Vec<LaneLoss>,
    pub(super) ends: Vec<ferry_dfx::RunEnds>,
}

pub(super) fn loss_lines<S>(
    report: &RunReport<S>,
    ids: &LaneIds,
    sub: Subsystem,
    name: &str,
) -> Vec<LaneLoss> {
    report
        .lanes
        .iter()
        .map(|r| {
            let (thread, core) = ids.get(r.lane as usize).copied().unwrap_or((0, None));
            let label = match core {
                Some(c) => format!("{name} core {c}"),
                None => format!("{name} thread {thread}"),
            };
            LaneLoss::from_reconcile(r, sub, label, thread, core)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The collector frames each buffer's chains, copies every tensor's payload out of the
    /// thread's arena and counts it for the acknowledgement; the model keeps the chains and reads
    /// back each argument as the record the device described. Words that do not frame are a typed error of the
    /// model, never a panic, and the payloads before them were still acknowledged.
    #[test]
    fn args_chains_become_records_with_their_payloads_and_bad_words_are_an_error() {
        use crate::device::dfx::ArgsArena;
        use ferry_abi::args_dump::{self, ArgsChainHead};
        use ferry_abi::records::{self as abi, ArgsDumpRecord};
        use ferry_dfx::{CollectSink, CollectedBuffer};
        use std::sync::atomic::{AtomicU64, Ordering};

        let arena = Arc::new(ArgsArena::new(4096));
        let consumed = Arc::new(vec![AtomicU64::new(0)]);
        let sink = || ArgsSink::new(vec![arena.clone()], consumed.clone());
        let tensor = ArgsDumpRecord {
            task_id: 5,
            role: abi::ARG_ROLE_OUTPUT,
            stage: abi::ARG_STAGE_AFTER_COMPLETION,
            ndims: 1,
            dtype: abi::DType::Float32 as u8,
            is_contiguous: 1,
            payload_offset: 128,
            payload_size: 64,
            func_ids: [4, 0, 0],
            func_count: 1,
            shapes: [16, 0, 0, 0, 0],
            strides: [1, 0, 0, 0, 0],
            ..Default::default()
        };
        let scalar = ArgsDumpRecord {
            kind: abi::ARG_KIND_SCALAR,
            role: abi::ARG_ROLE_SCALAR,
            arg_index: 1,
            ndims: 0,
            payload_offset: 0,
            payload_size: 0,
            shapes: [0; 5],
            strides: [0; 5],
            scalar_value: 7,
            ..tensor
        };
        let mut words = [0u64; 16];
        let mut n = args_dump::start(&mut words, &ArgsChainHead::of(&tensor)).unwrap();
        n = args_dump::push(&mut words, n, &tensor).unwrap();
        n = args_dump::push(&mut words, n, &scalar).unwrap();
        let buffer =
            |records| CollectedBuffer { lane: 0, kind: 0, seq: 0, queue: 0, shard: 0, records };

        // The device's cursor after copying that payload (bytes 128..192).
        arena.write_offset().store(192, Ordering::Relaxed);
        let mut good = sink();
        good.on_buffer_collected(&buffer(&words[..n]));
        assert_eq!(consumed[0].load(Ordering::Relaxed), 1, "one payload copied and counted");
        let d = args_dump(ArgsSink::merge(vec![good]), 3, 2).unwrap();
        assert_eq!(d.args.len(), 2);
        let (a0, a1) = (d.args.get(0).unwrap(), d.args.get(1).unwrap());
        assert_eq!((a0.bin_size, a0.bin_offset, a0.numel, d.bin.len()), (64, Some(0), 16, 64));
        assert!(a1.kind == "scalar" && a1.value == Some(7) && a1.bin_offset.is_none());
        assert_eq!(d.args.get(2), None);
        assert_eq!(d.dropped_records, 2, "the device's count, in arguments");

        let mut bad = sink();
        let mut corrupt = words;
        corrupt[args_dump::ARGS_CHAIN_HEADER_WORDS] |= 1 << 40; // a reserved bit
        let both: Vec<u64> = words[..n].iter().chain(&corrupt[..n]).copied().collect();
        bad.on_buffer_collected(&buffer(&both));
        assert_eq!(consumed[0].load(Ordering::Relaxed), 2, "the first chain's payload");
        let e = args_dump(ArgsSink::merge(vec![bad]), 3, 0).unwrap_err();
        assert!(matches!(e, DfxError::Collect(CollectError::ArgsChain(_))), "{e:?}");
    }

    #[test]
    fn work_beside_runs_on_a_thread_or_here_when_none_can_be_had() {
        let _bound = ferry_watchdog::bound("the work beside on its thread");
        let here = std::thread::current().id();
        let data = vec![1u64, 2, 3];
        std::thread::scope(|sc| {
            let data = &data;
            let on_thread = beside(sc, Builder::new(), move || {
                (data.iter().sum::<u64>(), std::thread::current().id())
            });
            // A stack no machine can map: the spawn fails, and the work runs on this thread.
            let no_thread = beside(sc, Builder::new().stack_size(1 << 60), move || {
                (data.len() as u64, std::thread::current().id())
            });
            assert!(matches!(no_thread, Beside::Done(_)), "the spawn was expected to fail");
            let (sum, there) = on_thread.join();
            assert_eq!(sum, 6);
            assert_ne!(there, here);
            assert_eq!(no_thread.join(), (3, here));
        });
    }

    #[test]
    fn a_panic_beside_is_carried_on() {
        let _bound = ferry_watchdog::bound("the panicking thread beside");
        let r = std::panic::catch_unwind(|| {
            std::thread::scope(|sc| beside(sc, Builder::new(), || panic!("conversion bug")).join())
        });
        let p = r.expect_err("the panic reaches the caller");
        assert_eq!(p.downcast_ref::<&str>(), Some(&"conversion bug"));
    }

    /// A buffer whose chains can name no payload (the thread's arena cursor has not moved past
    /// the last payload the walked chains named) is not walked: its arguments read back with no
    /// payload. One that names a new payload is walked and its payload copied, in order after a
    /// skipped one; the acknowledgement counts only copied payloads.
    #[test]
    fn buffers_that_name_no_new_payload_are_not_walked_and_read_back_without_one() {
        use crate::device::dfx::ArgsArena;
        use ferry_abi::args_dump::{self, ArgsChainHead};
        use ferry_abi::records::{self as abi, ArgsDumpRecord};
        use ferry_dfx::{CollectSink, CollectedBuffer};
        use std::sync::atomic::{AtomicU64, Ordering};

        let arena = Arc::new(ArgsArena::new(4096));
        let consumed = Arc::new(vec![AtomicU64::new(0)]);
        let mut sink = ArgsSink::new(vec![arena.clone()], consumed.clone());
        let tensor = |task: u64, payload_offset: u64, payload_size: u64| ArgsDumpRecord {
            task_id: task,
            role: abi::ARG_ROLE_INPUT,
            ndims: 1,
            dtype: abi::DType::Float32 as u8,
            is_contiguous: 1,
            payload_offset,
            payload_size,
            func_ids: [4, 0, 0],
            func_count: 1,
            shapes: [16, 0, 0, 0, 0],
            strides: [1, 0, 0, 0, 0],
            ..Default::default()
        };
        let chain = |r: &ArgsDumpRecord| {
            let mut w = [0u64; 16];
            let n = args_dump::start(&mut w, &ArgsChainHead::of(r)).unwrap();
            let n = args_dump::push(&mut w, n, r).unwrap();
            w[..n].to_vec()
        };
        let collect = |s: &mut ArgsSink, seq: u32, r: &ArgsDumpRecord| {
            let words = chain(r);
            s.on_buffer_collected(&CollectedBuffer {
                lane: 0,
                kind: 0,
                seq,
                queue: 0,
                shard: 0,
                records: &words,
            });
        };
        // Task 1 copies 64 bytes (cursor 64): walked.
        arena.write_offset().store(64, Ordering::Relaxed);
        collect(&mut sink, 0, &tensor(1, 0, 64));
        assert_eq!(consumed[0].load(Ordering::Relaxed), 1);
        // Task 2 names none and the cursor did not move: not walked.
        collect(&mut sink, 1, &tensor(2, 0, 0));
        // Task 3 copies the next 64 bytes (cursor 128): walked again.
        arena.write_offset().store(128, Ordering::Relaxed);
        collect(&mut sink, 2, &tensor(3, 64, 64));
        assert_eq!(consumed[0].load(Ordering::Relaxed), 2, "both payloads, nothing for task 2");
        assert_eq!(sink.lanes[0].walked, [true, false, true]);
        let d = args_dump(ArgsSink::merge(vec![sink]), 3, 0).unwrap();
        let bins: Vec<_> =
            (0..3).map(|i| d.args.get(i).map(|a| (a.task_id, a.bin_offset, a.bin_size))).collect();
        assert_eq!(bins, [Some((1, Some(0), 64)), Some((2, None, 0)), Some((3, Some(64), 64))]);
        assert_eq!(d.bin.len(), 128);
    }

    /// What counts as consumed for the arena acknowledgement: every payload a collected chain
    /// names, once, whether its bytes were copied or had already been overwritten by a later lap
    /// (the device counts each payload it published; one left out would hold its arena gate
    /// shut for good), and nothing for an argument without a payload. The count is published
    /// to the device only by the acknowledgement hook, and only when it changed.
    #[test]
    fn every_named_payload_counts_once_for_the_acknowledgement_copied_or_overwritten() {
        use super::super::sinks::ArgsAcks;
        use crate::device::dfx::ArgsArena;
        use ferry_abi::args_dump::{self, ArgsChainHead};
        use ferry_abi::records::{self as abi, ArgsDumpRecord};
        use ferry_dfx::{CollectSink, CollectedBuffer, ReplenishHooks};
        use std::sync::atomic::{AtomicU64, Ordering};

        let arena = Arc::new(ArgsArena::new(256));
        let size = arena.size();
        let consumed = Arc::new(vec![AtomicU64::new(0)]);
        let mut sink = ArgsSink::new(vec![arena.clone()], consumed.clone());
        let mut acks = ArgsAcks { arenas: vec![arena.clone()], consumed: consumed.clone() };
        let tensor = |task: u64, payload_offset: u64, payload_size: u64| ArgsDumpRecord {
            task_id: task,
            role: abi::ARG_ROLE_INPUT,
            ndims: 1,
            dtype: abi::DType::Float32 as u8,
            is_contiguous: 1,
            payload_offset,
            payload_size,
            func_ids: [4, 0, 0],
            func_count: 1,
            shapes: [16, 0, 0, 0, 0],
            strides: [1, 0, 0, 0, 0],
            ..Default::default()
        };
        // One buffer, one chain per task.
        let buffer = |rs: &[ArgsDumpRecord]| {
            let mut words = Vec::new();
            for r in rs {
                let mut w = [0u64; 16];
                let n = args_dump::start(&mut w, &ArgsChainHead::of(r)).unwrap();
                let n = args_dump::push(&mut w, n, r).unwrap();
                words.extend_from_slice(&w[..n]);
            }
            words
        };
        let collect = |s: &mut ArgsSink, seq: u32, words: &[u64]| {
            s.on_buffer_collected(&CollectedBuffer {
                lane: 0,
                kind: 0,
                seq,
                queue: 0,
                shard: 0,
                records: words,
            });
        };
        // Nothing collected: the hook publishes nothing.
        acks.publish_arena_acks();
        assert_eq!(arena.completed().load(Ordering::Relaxed), 0);
        // Two payloads and an argument without one, in one buffer: two consumed.
        arena.write_offset().store(128, Ordering::Relaxed);
        collect(&mut sink, 0, &buffer(&[tensor(1, 0, 64), tensor(2, 0, 0), tensor(3, 64, 64)]));
        assert_eq!(consumed[0].load(Ordering::Relaxed), 2);
        assert_eq!(arena.completed().load(Ordering::Relaxed), 0, "only the hook acknowledges");
        acks.publish_arena_acks();
        assert_eq!(arena.completed().load(Ordering::Relaxed), 2);
        // The cursor ran more than a lap past task 4's payload: its bytes are gone
        // (overwritten), yet it was published and counts, or the device would wait for it.
        arena.write_offset().store(128 + 2 * size, Ordering::Relaxed);
        collect(&mut sink, 1, &buffer(&[tensor(4, 128, 64)]));
        assert_eq!(consumed[0].load(Ordering::Relaxed), 3);
        acks.publish_arena_acks();
        assert_eq!(arena.completed().load(Ordering::Relaxed), 3);
        assert_eq!(sink.lanes[0].payloads.len(), 4, "one entry per argument of walked buffers");
    }
}
