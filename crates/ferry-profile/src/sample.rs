//! A small synthetic run with every subsystem on: the fixture of the output, trace and view
//! tests (here and in `ferry-cli`), and a demo input for the views; and [`scaled_run`], a
//! storm-shaped run of any size for scale tests and benches of the write phase.
//!
//! Three cores (one AIC, two AIV), two AICPU scheduler threads, six tasks of three kernels with
//! dependency edges of every source, one PMU row per task, two nested scopes, argument dumps with
//! payloads. Under [`LossPolicy::Block`] the `aicpu_task/core1` lane stalls for 1980 cycles at its
//! pop gate and nothing is lost (task `T4`'s finish is pushed out to the lane's recovery); under [`LossPolicy::Drop`] the same lane waits out a 500-cycle budget and
//! drops T4's AICPU record, and the PMU lane of thread 0 drops one row.

use ferry_abi::records::SchedPhaseKind;

use super::args::{ArgsDump, DumpedArg};
use super::deps::{
    tensor_id, DepArg, DepEdge, DepTask, DepTensor, DepsGraph, EdgeGeometry, EdgeSource,
};
use super::model::*;
use super::pmu::{PmuRow, PmuTable};
use super::scopes::{ScopePhase, ScopeRow, ScopeStats};

/// Task id of sample task `i` (ring 1, local id `i`).
pub const fn sample_task(i: u32) -> u64 {
    (1u64 << 32) | i as u64
}

/// The lane that stalls in the sample run.
pub const SAMPLE_STALLED_LANE: &str = "aicpu_task/core1";

struct T {
    i: u32,
    core: u32,
    reg: u32,
    func: i32,
    dispatch: u64,
    start: u64,
    end: u64,
    finish: u64,
}

/// The sample run under `policy`.
///
/// # Examples
/// ```
/// use ferry_profile::{sample::sample_run, LossPolicy};
/// let run = sample_run(LossPolicy::Drop);
/// assert_eq!(run.loss.totals().2, 2); // two records dropped
/// assert!(run.loss.reconciles());
/// ```
pub fn sample_run(policy: LossPolicy) -> RunModel {
    let drop = policy == LossPolicy::Drop;
    let mut meta =
        RunMeta::new("a2a3", 50_000_000, vec![CoreType::Aic, CoreType::Aiv, CoreType::Aiv]);
    meta.core_to_thread = vec![0, 0, 1];
    let mut run = RunModel::new(meta);
    run.kernels.insert(7, "matmul".into());
    run.kernels.insert(8, "add".into());
    run.kernels.insert(9, "relu".into());

    // T4's finish is inflated by the stall of its lane (Block: recovery at 2590).
    let t4_finish = if drop { 1120 } else { 2600 };
    let tasks = [
        T { i: 1, core: 0, reg: 1, func: 7, dispatch: 100, start: 110, end: 400, finish: 420 },
        T { i: 2, core: 1, reg: 1, func: 8, dispatch: 120, start: 130, end: 300, finish: 320 },
        T { i: 3, core: 2, reg: 1, func: 9, dispatch: 130, start: 140, end: 260, finish: 280 },
        T {
            i: 4,
            core: 1,
            reg: 2,
            func: 8,
            dispatch: 430,
            start: 440,
            end: 600,
            finish: t4_finish,
        },
        T { i: 5, core: 2, reg: 2, func: 9, dispatch: 300, start: 310, end: 500, finish: 520 },
        // An SPMD re-dispatch to the same core that overlaps T5.
        T { i: 6, core: 2, reg: 3, func: 9, dispatch: 440, start: 450, end: 700, finish: 720 },
    ];

    let mut sw = Swimlane::new(4);
    for t in &tasks {
        sw.aicore_tasks.push(AicoreTask {
            core: t.core,
            task_token_raw: sample_task(t.i),
            reg_task_id: t.reg,
            start: t.start,
            end: t.end,
            receive_to_start: 4,
        });
        if !(drop && t.i == 4) {
            sw.aicpu_tasks.push(AicpuTask {
                core: t.core,
                reg_task_id: t.reg,
                dispatch: t.dispatch,
                finish: t.finish,
            });
        }
    }
    let phase = |kind, start, end, loop_iter, n, data| SchedPhase {
        kind,
        start,
        end,
        loop_iter,
        tasks_processed: n,
        phase_data: data,
        shared_at_start: [0, 1, 0],
        shared_at_end: [0, 0, 0],
    };
    sw.sched_phases = vec![
        vec![
            phase(SchedPhaseKind::Dispatch, 95, 125, 0, 2, [2, 0]),
            phase(SchedPhaseKind::Complete, 315, 325, 1, 1, [0, 0]),
            phase(SchedPhaseKind::Complete, 415, 425, 2, 1, [0, 0]),
            phase(SchedPhaseKind::Dispatch, 425, 435, 2, 1, [1, 0]),
        ],
        vec![
            phase(SchedPhaseKind::Dispatch, 125, 135, 0, 1, [1, 0]),
            phase(SchedPhaseKind::Complete, 275, 285, 1, 1, [0, 0]),
            phase(SchedPhaseKind::Dispatch, 295, 305, 1, 1, [1, 1]),
            phase(SchedPhaseKind::DummyTask, 306, 308, 1, 1, [9, 1]),
        ],
    ];
    sw.orch_phases = vec![tasks
        .iter()
        .map(|t| OrchPhase {
            submit_idx: t.i - 1,
            task_id: sample_task(t.i),
            start: 10 * u64::from(t.i),
            end: 10 * u64::from(t.i) + 8,
        })
        .collect()];
    run.swimlane = Some(sw);

    // PMU: one row per task; Drop loses task 5's row.
    let mut pmu = PmuTable::new("a2a3", 2);
    for t in &tasks {
        if drop && t.i == 5 {
            continue;
        }
        let total = t.end - t.start;
        pmu.rows.push(PmuRow {
            thread_id: run.meta.core_to_thread[t.core as usize] as u32,
            core_id: t.core,
            task_id: sample_task(t.i),
            func_id: t.func as u32,
            core_type: i32::from(t.core != 0),
            pmu_total_cycles: total,
            counters: (0..8u64).map(|k| total / (k + 2)).collect(),
        });
    }
    run.pmu = Some(pmu);

    // DepGen: every task, the tensors, and edges of each source.
    let buf = |k: u64| 0x1_0000_0000 + k * 0x1000;
    let tid = |k: u64| tensor_id(buf(k), 0);
    let mut g = DepsGraph::default();
    for t in &tasks {
        let kernel_ids = if t.core == 0 { [t.func, -1, -1] } else { [-1, t.func, -1] };
        g.tasks.push(DepTask {
            task_id: sample_task(t.i),
            scope: "auto".into(),
            kernel_ids,
            block_num: 1,
            args: vec![
                DepArg {
                    idx: 0,
                    role: "INPUT".into(),
                    tensor_id: Some(tid(u64::from(t.i) - 1)),
                    dtype: "FLOAT32".into(),
                    shape: [4].into(),
                    start_offset: 0,
                    strides: [1].into(),
                },
                DepArg {
                    idx: 1,
                    role: "OUTPUT".into(),
                    tensor_id: Some(tid(u64::from(t.i))),
                    dtype: "FLOAT32".into(),
                    shape: [4].into(),
                    start_offset: 0,
                    strides: [1].into(),
                },
            ],
        });
    }
    for k in 0..=6 {
        g.tensors.push(DepTensor {
            tensor_id: tid(k),
            buffer_addr: buf(k),
            version: 0,
            dtype: "FLOAT32".into(),
            buffer_numel: 4,
        });
    }
    let creator = |p: u32, s: u32| DepEdge {
        pred: sample_task(p),
        succ: sample_task(s),
        arg: 0,
        source: EdgeSource::Creator,
        flags: vec!["wait".into(), "retain".into()],
        tensor_id: Some(tid(u64::from(p))),
        geometry: Some(Box::new(EdgeGeometry {
            consumer_dtype: Some("FLOAT32".into()),
            consumer_shape: Some(vec![4]),
            consumer_start_offset: Some(0),
            consumer_strides: Some(vec![1]),
            ..Default::default()
        })),
    };
    g.edges.push(creator(1, 4));
    g.edges.push(creator(2, 4));
    g.edges.push(DepEdge::explicit(sample_task(3), sample_task(5)));
    let mut tm = creator(5, 6);
    tm.source = EdgeSource::Tensormap;
    let geo = tm.geometry_mut();
    geo.overlap = Some("covered".into());
    geo.producer_dtype = Some("FLOAT32".into());
    geo.producer_shape = Some(vec![4]);
    geo.producer_start_offset = Some(0);
    geo.producer_strides = Some(vec![1]);
    g.edges.push(tm);
    run.deps = Some(g);

    // ArgsDump: task 1's input and output tensors, task 2's scalar (sorted export order).
    let mut a = ArgsDump { run_dir: "sample".into(), level: 2, ..Default::default() };
    let f32s = |v: [f32; 4]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let tensor = |task, idx, role: &'static str, stage: &'static str| DumpedArg {
        task_id: task,
        func_id: [7].into(),
        arg_index: idx,
        role: role.into(),
        stage: stage.into(),
        kind: "tensor".into(),
        dtype: "FLOAT32".into(),
        is_contiguous: true,
        shape: [4].into(),
        strides: [1].into(),
        numel: 4,
        ..Default::default()
    };
    a.push(
        tensor(sample_task(1), 0, "INPUT", "before_dispatch"),
        Some(&f32s([1.0, 2.0, 3.0, 4.0])),
    );
    a.push(
        tensor(sample_task(1), 1, "OUTPUT", "after_completion"),
        Some(&f32s([2.0, 4.0, 6.0, 8.0])),
    );
    let mut scalar = tensor(sample_task(2), 2, "SCALAR", "before_dispatch");
    scalar.kind = "scalar".into();
    scalar.dtype = "INT64".into();
    scalar.value = Some(42);
    scalar.shape.clear();
    scalar.strides.clear();
    scalar.numel = 1;
    scalar.func_id = [8].into();
    a.push(scalar, None);
    run.args = Some(a);

    // ScopeStats: an outer scope and a nested one that fills most of its ring's window.
    let row =
        |site: &str, phase, depth, tw: (i64, i64), heap: (u64, u64), dp: (i64, i64)| ScopeRow {
            site: site.into(),
            phase,
            depth,
            ring: depth.min(3),
            task_window_start: tw.0,
            task_window_end: tw.1,
            heap_start: heap.0,
            heap_end: heap.1,
            dep_pool_start: dp.0,
            dep_pool_end: dp.1,
            tensormap: 3,
        };
    run.scopes = Some(ScopeStats {
        fatal: false,
        dropped: 0,
        total: 4,
        task_window_max: [8, 4, 4, 0],
        heap_max: [1 << 28, 1 << 28, 1 << 20, 0],
        dep_pool_max: [1024, 1024, 16, 0],
        tensormap_max: 65536,
        heap_reserved: false,
        records: vec![
            row("orch.cpp:77", ScopePhase::Begin, 1, (0, 0), (0, 0), (1, 1)),
            row("orch.cpp:90", ScopePhase::Begin, 2, (0, 0), (0, 0), (0, 0)),
            row("orch.cpp:90", ScopePhase::End, 2, (1, 4), (0, 900_000), (0, 14)),
            row("orch.cpp:77", ScopePhase::End, 1, (2, 3), (0, 4096), (1, 3)),
        ],
        names: Default::default(),
    });

    // Loss accounting: every lane; one stall.
    let budget = if drop { 500 } else { 50_000_000 * 30 };
    let mut lanes = Vec::new();
    let mut lane = |s: Subsystem, name: String, thread: u32, core: Option<u32>, produced: u64| {
        lanes.push(LaneLoss {
            subsystem: Some(s),
            lane: name,
            thread,
            core,
            produced,
            collected: produced,
            dropped: 0,
            stall_cycles: 0,
            stalls: Vec::new(),
            stall_waits: 0,
        })
    };
    for c in 0..3u32 {
        let th = run.meta.core_to_thread[c as usize] as u32;
        let n = tasks.iter().filter(|t| t.core == c).count() as u64;
        lane(Subsystem::ChipSwimlane, format!("aicore_task/core{c}"), th, Some(c), n);
        lane(Subsystem::ChipSwimlane, format!("aicpu_task/core{c}"), th, Some(c), n);
    }
    lane(Subsystem::ChipSwimlane, "sched_phase/thread0".into(), 0, None, 4);
    lane(Subsystem::ChipSwimlane, "sched_phase/thread1".into(), 1, None, 4);
    lane(Subsystem::ChipSwimlane, "orch_phase/thread0".into(), 0, None, 6);
    lane(Subsystem::Pmu, "pmu/thread0".into(), 0, None, 3);
    lane(Subsystem::Pmu, "pmu/thread1".into(), 1, None, 3);
    lane(Subsystem::DepGen, "dep_gen/thread0".into(), 0, None, 6);
    lane(Subsystem::ArgsDump, "args_dump/thread0".into(), 0, None, 3);
    lane(Subsystem::ScopeStats, "scope_stats/thread0".into(), 0, None, 4);
    for l in &mut lanes {
        if l.lane == SAMPLE_STALLED_LANE {
            if drop {
                l.stalls = vec![[610, 1110]];
                l.collected -= 1;
                l.dropped = 1;
            } else {
                l.stalls = vec![[610, 2590]];
            }
            l.stall_cycles = l.stalls.iter().map(|s| s[1] - s[0]).sum();
        }
        if drop && l.lane == "pmu/thread1" {
            l.stalls = vec![[505, 1005]];
            l.stall_cycles = 500;
            l.collected -= 1;
            l.dropped = 1;
        }
    }
    run.loss = LossAccounting { policy, budget_cycles: budget, lanes, run: None };
    run
}

/// Cores of [`scaled_run`]: 8 AIC then 16 AIV, as `ferry run` sets the chip up.
pub const SCALED_CORES: u32 = 24;
/// AICPU scheduler threads of [`scaled_run`] (core `c` belongs to thread `c % 3`); the
/// orchestrator is thread 3.
pub const SCALED_THREADS: u32 = 3;
/// Dependency distance of [`scaled_run`]: task `i` consumes task `i − 64`'s output (the storm's
/// 64 lanes).
pub const SCALED_LANES: u32 = 64;

/// Task `i` of [`scaled_run`] as [`RunModel::tasks`] must join it.
///
/// Task `i` runs on core `i % 24` as that core's dispatch `i / 24 + 1`. Its kernel comes from
/// `deps.json` (7, 8 or 9) except where the deps task has no active kernel (`i % 7 == 3`) or is
/// missing (`i % 17 == 9`): then from its PMU row (20 or 21), unless that row is missing too
/// (`i % 11 == 4`). Its AICPU record is missing where `i % 13 == 5`. Every 97th task runs long
/// enough to overlap the next ones on its core.
pub fn scaled_task(i: u32) -> JoinedTask {
    let start = 1000 + 10 * u64::from(i);
    let len = if i % 97 == 0 { 900 } else { 40 + u64::from(i * 7 % 50) };
    let aicpu = i % 13 != 5;
    let deps_kernel = (i % 7 != 3 && i % 17 != 9).then_some(7 + (i % 3) as i32);
    let pmu_kernel = (i % 11 != 4).then_some(20 + (i % 2) as i32);
    JoinedTask {
        core: i % SCALED_CORES,
        reg_task_id: i / SCALED_CORES + 1,
        task_id: (1u64 << 32) | u64::from(i),
        func_id: deps_kernel.or(pmu_kernel),
        dispatch: aicpu.then_some(start - 8),
        receive: start - 3,
        start,
        end: start + len,
        finish: aicpu.then_some(start + len + 6),
    }
}

/// A deterministic permutation of `0..n` (records in another order than the tasks).
fn shuffled(n: u32) -> impl Iterator<Item = u32> {
    // 1_000_003 is prime, so it is coprime to every n below it: j ↦ j·p mod n is a bijection.
    (0..n).map(move |j| ((u64::from(j) * 1_000_003) % u64::from(n.max(1))) as u32)
}

/// A storm-shaped run of `tasks` tasks with all five subsystems on, for scale tests and benches
/// of the write phase (no device needed): per task one AICore and (mostly) one AICPU record, an
/// orchestrator submit, a scheduler phase for two tasks in three, a PMU row, a DepGen task with
/// its output tensor and an edge from task `i − 64`, and three dumped arguments (two tensors
/// with 16-byte payloads and a scalar); a scope per 1000 tasks; a loss line per lane, one of
/// which stalled. Records are stored in a shuffled order, so a join by position fails. Task `i`
/// joins as [`scaled_task`] says.
///
/// # Examples
/// ```
/// use ferry_profile::sample::{scaled_run, scaled_task};
/// let run = scaled_run(1000);
/// assert_eq!(run.record_count(), run.loss.totals().1);
/// assert_eq!(run.tasks()[0], scaled_task(0));
/// ```
pub fn scaled_run(tasks: u32) -> RunModel {
    let n = tasks;
    let cores: Vec<CoreType> =
        (0..SCALED_CORES).map(|c| if c < 8 { CoreType::Aic } else { CoreType::Aiv }).collect();
    let mut meta = RunMeta::new("a2a3", 50_000_000, cores);
    meta.core_to_thread = (0..SCALED_CORES).map(|c| (c % SCALED_THREADS) as i32).collect();
    let mut run = RunModel::new(meta);
    for (k, name) in [(7, "add"), (8, "mul"), (9, "scale"), (20, "pmu_only_a"), (21, "pmu_only_b")]
    {
        run.kernels.insert(k, name.into());
    }
    let thread_of = |i: u32| (i % SCALED_CORES) % SCALED_THREADS;
    let orch = SCALED_THREADS;

    let mut sw = Swimlane::new(4);
    sw.sched_phases = vec![Vec::new(); SCALED_THREADS as usize];
    sw.orch_phases = vec![Vec::new()];
    let mut pmu = PmuTable::new("a2a3", 2);
    let mut g = DepsGraph::default();
    let mut a = ArgsDump { run_dir: "scaled".into(), level: 3, ..Default::default() };
    let tid = |i: u32| tensor_id(0x1_0000_0000 + u64::from(i) * 0x1000, 0);
    for i in shuffled(n) {
        let t = scaled_task(i);
        sw.aicore_tasks.push(AicoreTask {
            core: t.core,
            task_token_raw: t.task_id,
            reg_task_id: t.reg_task_id,
            start: t.start,
            end: t.end,
            receive_to_start: (t.start - t.receive) as u32,
        });
        if let (Some(dispatch), Some(finish)) = (t.dispatch, t.finish) {
            sw.aicpu_tasks.push(AicpuTask {
                core: t.core,
                reg_task_id: t.reg_task_id,
                dispatch,
                finish,
            });
        }
        if i % 11 != 4 {
            let total = t.end - t.start;
            pmu.rows.push(PmuRow {
                thread_id: thread_of(i),
                core_id: t.core,
                task_id: t.task_id,
                func_id: 20 + i % 2,
                core_type: i32::from(t.core >= 8),
                pmu_total_cycles: total,
                counters: (0..8u64).map(|k| total / (k + 2)).collect(),
            });
        }
        if i % 17 != 9 {
            let k = if i % 7 == 3 { -1 } else { 7 + (i % 3) as i32 };
            let kernel_ids = if t.core < 8 { [k, -1, -1] } else { [-1, k, -1] };
            let input = i.checked_sub(SCALED_LANES).map(tid);
            let arg = |idx, role: &'static str, tensor_id| DepArg {
                idx,
                role: role.into(),
                tensor_id,
                dtype: "FLOAT32".into(),
                shape: [4].into(),
                start_offset: 0,
                strides: [1].into(),
            };
            g.tasks.push(DepTask {
                task_id: t.task_id,
                scope: "auto".into(),
                kernel_ids,
                block_num: 1,
                args: vec![arg(0, "INPUT", input), arg(1, "OUTPUT", Some(tid(i)))],
            });
        }
        let payload = |x: u32| -> Vec<u8> {
            (0..4u32).flat_map(|k| ((x + k) as f32).to_le_bytes()).collect()
        };
        let tensor = |idx, role: &'static str, stage: &'static str| DumpedArg {
            task_id: t.task_id,
            func_id: [t.func_id.unwrap_or(-1)].into(),
            arg_index: idx,
            role: role.into(),
            stage: stage.into(),
            kind: "tensor".into(),
            dtype: "FLOAT32".into(),
            is_contiguous: true,
            shape: [4].into(),
            strides: [1].into(),
            numel: 4,
            ..Default::default()
        };
        a.push(tensor(0, "INPUT", "before_dispatch"), Some(&payload(i)));
        a.push(tensor(1, "OUTPUT", "after_completion"), Some(&payload(i + 1)));
        let mut scalar = tensor(2, "SCALAR", "before_dispatch");
        scalar.kind = "scalar".into();
        scalar.dtype = "INT64".into();
        scalar.value = Some(u64::from(i));
        scalar.shape.clear();
        scalar.strides.clear();
        scalar.numel = 1;
        a.push(scalar, None);
    }
    // Phases and submits in device (time) order, as the writers record them.
    for i in 0..n {
        let t = scaled_task(i);
        if i % 3 != 2 {
            let kind = if i % 2 == 0 { SchedPhaseKind::Dispatch } else { SchedPhaseKind::Complete };
            sw.sched_phases[thread_of(i) as usize].push(SchedPhase {
                kind,
                start: t.start - 12,
                end: t.start - 9,
                loop_iter: i / 3,
                tasks_processed: 1,
                phase_data: [1, 0],
                shared_at_start: [0, 1, 0],
                shared_at_end: [0, 0, 0],
            });
        }
        sw.orch_phases[0].push(OrchPhase {
            submit_idx: i,
            task_id: t.task_id,
            start: 10 * u64::from(i),
            end: 10 * u64::from(i) + 6,
        });
        g.tensors.push(DepTensor {
            tensor_id: tid(i),
            buffer_addr: 0x1_0000_0000 + u64::from(i) * 0x1000,
            version: 0,
            dtype: "FLOAT32".into(),
            buffer_numel: 4,
        });
        if let Some(p) = i.checked_sub(SCALED_LANES) {
            g.edges.push(DepEdge {
                pred: (1u64 << 32) | u64::from(p),
                succ: t.task_id,
                arg: 0,
                source: EdgeSource::Creator,
                flags: vec!["wait".into()],
                tensor_id: Some(tid(p)),
                ..Default::default()
            });
        }
    }
    let mut scopes = ScopeStats {
        task_window_max: [1024, 0, 0, 0],
        heap_max: [1 << 28, 0, 0, 0],
        dep_pool_max: [4096, 0, 0, 0],
        tensormap_max: 65536,
        ..Default::default()
    };
    for k in 0..n.div_ceil(1000) {
        let row = |phase, end: i64| ScopeRow {
            site: "storm.rs:40".into(),
            phase,
            depth: 1,
            ring: 1,
            task_window_start: i64::from(k) * 1000,
            task_window_end: i64::from(k) * 1000 + end,
            heap_start: 0,
            heap_end: 4096 * end as u64,
            dep_pool_start: 0,
            dep_pool_end: end,
            tensormap: end,
        };
        scopes.records.push(row(ScopePhase::Begin, 0));
        scopes.records.push(row(ScopePhase::End, 1000));
    }
    scopes.total = scopes.records.len() as u64;

    // Loss lines: every lane collected everything; aicpu_task/core1 stalled twice.
    let mut lanes = Vec::new();
    let mut lane = |s: Subsystem, name: String, thread: u32, core: Option<u32>, collected| {
        lanes.push(LaneLoss {
            subsystem: Some(s),
            lane: name,
            thread,
            core,
            produced: collected,
            collected,
            ..Default::default()
        })
    };
    for c in 0..SCALED_CORES {
        let th = c % SCALED_THREADS;
        let n_core = sw.aicore_tasks.iter().filter(|t| t.core == c).count() as u64;
        let n_cpu = sw.aicpu_tasks.iter().filter(|t| t.core == c).count() as u64;
        lane(Subsystem::ChipSwimlane, format!("aicore_task/core{c}"), th, Some(c), n_core);
        lane(Subsystem::ChipSwimlane, format!("aicpu_task/core{c}"), th, Some(c), n_cpu);
    }
    for (t, v) in sw.sched_phases.iter().enumerate() {
        let t = t as u32;
        lane(Subsystem::ChipSwimlane, format!("sched_phase/thread{t}"), t, None, v.len() as u64);
    }
    lane(Subsystem::ChipSwimlane, "orch_phase/thread3".into(), orch, None, u64::from(n));
    for t in 0..SCALED_THREADS {
        let rows = pmu.rows.iter().filter(|r| r.thread_id == t).count() as u64;
        lane(Subsystem::Pmu, format!("pmu/thread{t}"), t, None, rows);
    }
    lane(Subsystem::DepGen, "dep_gen/thread3".into(), orch, None, g.tasks.len() as u64);
    lane(Subsystem::ArgsDump, "args_dump/thread0".into(), 0, None, a.args.len() as u64);
    lane(Subsystem::ScopeStats, "scope_stats/thread3".into(), orch, None, scopes.total);
    for l in &mut lanes {
        if l.lane == "aicpu_task/core1" {
            l.stalls = vec![[5000, 5600], [9000, 9100]];
            l.stall_cycles = 700;
        }
    }
    run.swimlane = Some(sw);
    run.pmu = Some(pmu);
    run.deps = Some(g);
    run.args = Some(a);
    run.scopes = Some(scopes);
    run.loss = LossAccounting {
        policy: LossPolicy::Block,
        budget_cycles: 50_000_000 * 30,
        lanes,
        run: None,
    };
    run
}
