//! A small synthetic run with every subsystem on: the fixture of the output, trace and view
//! tests (here and in `ferry-cli`), and a demo input for the views.
//!
//! Three cores (one AIC, two AIV), two AICPU scheduler threads, six tasks of three kernels with
//! dependency edges of every source, one PMU row per task, two nested scopes, argument dumps with
//! payloads. Under [`LossPolicy::Block`] the `aicpu_task/core1` lane stalls for 1980 cycles at its
//! pop gate and nothing is lost (task `T4`'s finish is pushed out to the lane's recovery, as the
//! seed describes); under [`LossPolicy::Drop`] the same lane waits out a 500-cycle budget and
//! drops T4's AICPU record, and the PMU lane of thread 0 drops one row.

use ferry_abi::records::SchedPhaseKind;

use super::args::{ArgsDump, DumpedArg};
use super::deps::{tensor_id, DepArg, DepEdge, DepTask, DepTensor, DepsGraph, EdgeSource};
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
/// use ferry_dfx::output::{sample::sample_run, LossPolicy};
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
                    shape: vec![4],
                    start_offset: 0,
                    strides: vec![1],
                },
                DepArg {
                    idx: 1,
                    role: "OUTPUT".into(),
                    tensor_id: Some(tid(u64::from(t.i))),
                    dtype: "FLOAT32".into(),
                    shape: vec![4],
                    start_offset: 0,
                    strides: vec![1],
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
        consumer_dtype: Some("FLOAT32".into()),
        consumer_shape: Some(vec![4]),
        consumer_start_offset: Some(0),
        consumer_strides: Some(vec![1]),
        ..Default::default()
    };
    g.edges.push(creator(1, 4));
    g.edges.push(creator(2, 4));
    g.edges.push(DepEdge::explicit(sample_task(3), sample_task(5)));
    let mut tm = creator(5, 6);
    tm.source = EdgeSource::Tensormap;
    tm.overlap = Some("covered".into());
    tm.producer_dtype = Some("FLOAT32".into());
    tm.producer_shape = Some(vec![4]);
    tm.producer_start_offset = Some(0);
    tm.producer_strides = Some(vec![1]);
    g.edges.push(tm);
    run.deps = Some(g);

    // ArgsDump: task 1's input and output tensors, task 2's scalar (sorted export order).
    let mut a = ArgsDump { run_dir: "sample".into(), level: 2, ..Default::default() };
    let f32s = |v: [f32; 4]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let tensor = |task, idx, role: &str, stage: &str| DumpedArg {
        task_id: task,
        func_id: vec![7],
        arg_index: idx,
        role: role.into(),
        stage: stage.into(),
        kind: "tensor".into(),
        dtype: "FLOAT32".into(),
        is_contiguous: true,
        shape: vec![4],
        strides: vec![1],
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
    scalar.func_id = vec![8];
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
        records: vec![
            row("orch.cpp:77", ScopePhase::Begin, 1, (0, 0), (0, 0), (1, 1)),
            row("orch.cpp:90", ScopePhase::Begin, 2, (0, 0), (0, 0), (0, 0)),
            row("orch.cpp:90", ScopePhase::End, 2, (1, 4), (0, 900_000), (0, 14)),
            row("orch.cpp:77", ScopePhase::End, 1, (2, 3), (0, 4096), (1, 3)),
        ],
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
    run.loss = LossAccounting { policy, budget_cycles: budget, lanes };
    run
}
