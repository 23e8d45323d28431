//! ArgsDump levels against `dump(...)` marks (docs/dfx.md): 1 (partial) dumps only
//! marked arguments, 2 (full) every argument with its payload, 3 (hybrid) every argument's
//! metadata and only the marked tensors' payloads — on both orchestration variants (the
//! host-built graph carries the marks in its task records) and both launch paths.
use ferry_runtime::device::kernels::{K_ADD, K_ADD_SCALAR};
use ferry_runtime::host::dfx::{DfxChip, DfxOptions, DfxSession};
use ferry_runtime::host::{Callable, DeviceRunner, RunArgs, RunnerConfig, TensorInit, Variant};
use ferry_runtime::{Orchestrate, SubmitError, Task, TensorId};
use ferry_sim::Arch;

const N: usize = 64;

/// Task 0: `out = x + y` with `x` and `out` marked, `y` not. Task 1: `out += 1`, nothing marked.
fn marked_add(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    let (x, y, out) = (TensorId(0), TensorId(1), TensorId(2));
    o.submit(&Task::new(K_ADD).input(x).dump().input(y).output(out).dump())?;
    o.submit(&Task::new(K_ADD_SCALAR).inout(out).scalar_f32(1.0))?;
    Ok(())
}

/// One dumped argument: (task, stage, arg index, kind, whether it has a payload).
type Row = (u64, String, u32, String, bool);

fn dumped(level: u32, variant: Variant, full_path: bool) -> (Vec<Row>, usize) {
    let cfg = RunnerConfig::small(Arch::A2a3);
    let cfg = if full_path { cfg } else { cfg.in_process() };
    let mut r = DeviceRunner::new(cfg).unwrap();
    r.register_callable(1, Callable::new("marked-add", variant, marked_add)).unwrap();
    let x: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..N).map(|i| 0.5 * i as f32).collect();
    let args = RunArgs {
        tensors: vec![
            TensorInit::Data(x.clone()),
            TensorInit::Data(y.clone()),
            TensorInit::Zeros(N),
        ],
        scalars: vec![],
        scratch_bytes: 0,
    };
    let chip = DfxChip::of(&cfg, 0);
    let opts = DfxOptions { dump_args: level, ..DfxOptions::default() };
    let s = if full_path {
        DfxSession::start_on(&opts, chip, r.device()).unwrap()
    } else {
        DfxSession::start(&opts, chip, r.device().clock()).unwrap()
    };
    r.attach_dfx_session(Some(&s)).unwrap();
    let out = r.run(1, args).unwrap();
    r.attach_dfx_session(None).unwrap();
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b + 1.0).collect();
    assert_eq!(out.tensors[2].as_deref(), Some(&want[..]), "the run itself is unchanged");
    let m = s.finish().unwrap();
    let d = m.args.expect("an args dump");
    assert_eq!((d.dropped_records, d.dropped_overwrite), (0, 0));
    let mut rows: Vec<Row> = d
        .args
        .iter()
        .map(|a| {
            let payload = d.payload(&a).is_some_and(|p| !p.is_empty());
            (a.task_id, a.stage.to_string(), a.arg_index, a.kind.to_string(), payload)
        })
        .collect();
    rows.sort();
    (rows, d.bin.len() as usize)
}

fn row(task: u64, stage: &str, index: u32, kind: &str, payload: bool) -> Row {
    (task, stage.into(), index, kind.into(), payload)
}

#[test]
fn each_level_keeps_what_the_marks_ask_for_on_both_variants_and_paths() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let (b, a) = ("before_dispatch", "after_completion");
    for (variant, full) in [
        (Variant::DeviceOrchestrated, false),
        (Variant::HostBuiltGraph, false),
        (Variant::HostBuiltGraph, true),
    ] {
        let what = format!("{variant:?}, full path {full}");
        // Level 1: only the marked tensors, with their payloads; no scalar, nothing of task 1.
        let (rows, bin) = dumped(1, variant, full);
        assert_eq!(rows, [row(0, a, 2, "tensor", true), row(0, b, 0, "tensor", true)], "{what}");
        assert_eq!(bin, 2 * 4 * N, "{what}");
        // Level 2: everything, every tensor with its payload.
        let (rows, bin) = dumped(2, variant, full);
        let full_rows = [
            row(0, a, 2, "tensor", true),
            row(0, b, 0, "tensor", true),
            row(0, b, 1, "tensor", true),
            row(1, a, 0, "tensor", true),
            row(1, b, 0, "tensor", true),
            row(1, b, 1, "scalar", false),
        ];
        assert_eq!(rows, full_rows, "{what}");
        assert_eq!(bin, 5 * 4 * N, "{what}");
        // Level 3: every argument's metadata, the payloads of the marked ones only.
        let (rows, bin) = dumped(3, variant, full);
        let hybrid = [
            row(0, a, 2, "tensor", true),
            row(0, b, 0, "tensor", true),
            row(0, b, 1, "tensor", false),
            row(1, a, 0, "tensor", false),
            row(1, b, 0, "tensor", false),
            row(1, b, 1, "scalar", false),
        ];
        assert_eq!(rows, hybrid, "{what}");
        assert_eq!(bin, 2 * 4 * N, "{what}");
    }
}

#[test]
fn dump_marks_the_last_tensor_and_nothing_without_one() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let t = Task::new(K_ADD).dump().input(TensorId(0)).input(TensorId(1)).dump().dump();
    let marks: Vec<bool> = t.args().map(|a| a.dump).collect();
    assert_eq!(marks, [false, true], "dump() before any tensor marks nothing");
}

/// An empty tensor in a stage whose other tensor carries a payload (the general path, which
/// copies payloads one by one): it is dumped with its metadata and no payload,
/// and only the payload that exists is copied.
#[test]
fn an_empty_tensor_beside_a_payload_is_dumped_without_one() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    fn add_empty(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
        o.submit(&Task::new(K_ADD).input(TensorId(0)).input(TensorId(1)).output(TensorId(2)))?;
        Ok(())
    }
    let cfg = RunnerConfig::small(Arch::A2a3);
    let mut r = DeviceRunner::new(cfg).unwrap();
    r.register_callable(1, Callable::new("add-empty", Variant::HostBuiltGraph, add_empty)).unwrap();
    let x: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let args = RunArgs {
        tensors: vec![TensorInit::Data(x), TensorInit::Zeros(0), TensorInit::Zeros(0)],
        scalars: vec![],
        scratch_bytes: 0,
    };
    let opts = DfxOptions { dump_args: 2, ..DfxOptions::default() };
    let s = DfxSession::start_on(&opts, DfxChip::of(&cfg, 0), r.device()).unwrap();
    r.attach_dfx_session(Some(&s)).unwrap();
    r.run(1, args).unwrap();
    r.attach_dfx_session(None).unwrap();
    let d = s.finish().unwrap().args.expect("an args dump");
    assert_eq!((d.dropped_records, d.dropped_overwrite), (0, 0));
    let before: Vec<(u32, u64, Option<u64>, u64, bool)> = d
        .args
        .iter()
        .filter(|a| a.stage == "before_dispatch")
        .map(|a| (a.arg_index, a.numel, a.bin_offset, a.bin_size, a.overwritten))
        .collect();
    let x = (0, N as u64, Some(0), 4 * N as u64, false);
    assert_eq!(before, [x, (1, 0, None, 0, false)], "x with its payload, y without");
    assert_eq!(d.bin.len() as usize, 4 * N, "only x's bytes were copied");
}

/// Level 3 with nothing marked: every stage has no payload to copy, so each is encoded in one
/// pass; it still keeps exactly the arguments its stage dumps (inputs before dispatch, the
/// output after completion).
#[test]
fn a_stage_without_payloads_dumps_exactly_its_own_arguments() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    fn add(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
        o.submit(&Task::new(K_ADD).input(TensorId(0)).input(TensorId(1)).output(TensorId(2)))?;
        Ok(())
    }
    let cfg = RunnerConfig::small(Arch::A2a3);
    let mut r = DeviceRunner::new(cfg).unwrap();
    r.register_callable(1, Callable::new("add", Variant::HostBuiltGraph, add)).unwrap();
    let args = RunArgs {
        tensors: vec![TensorInit::Zeros(N), TensorInit::Zeros(N), TensorInit::Zeros(N)],
        scalars: vec![],
        scratch_bytes: 0,
    };
    let opts = DfxOptions { dump_args: 3, ..DfxOptions::default() };
    let s = DfxSession::start_on(&opts, DfxChip::of(&cfg, 0), r.device()).unwrap();
    r.attach_dfx_session(Some(&s)).unwrap();
    r.run(1, args).unwrap();
    r.attach_dfx_session(None).unwrap();
    let d = s.finish().unwrap().args.expect("an args dump");
    let mut rows: Vec<Row> = d
        .args
        .iter()
        .map(|a| (a.task_id, a.stage.to_string(), a.arg_index, a.kind.to_string(), false))
        .collect();
    rows.sort();
    let (b, a) = ("before_dispatch", "after_completion");
    let want = [
        row(0, a, 2, "tensor", false),
        row(0, b, 0, "tensor", false),
        row(0, b, 1, "tensor", false),
    ];
    assert_eq!(rows, want);
    assert!(d.bin.is_empty(), "no payload at all");
}

/// A stage with nothing to dump writes no chain at all: at level 1, a task whose only marked
/// tensor is an input dumps one chain before dispatch (its header and the input: 7 words on
/// the ArgsDump lanes) and nothing after completion.
#[test]
fn a_stage_with_nothing_to_dump_writes_no_chain() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    fn add_marked_input(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
        let t = Task::new(K_ADD).input(TensorId(0)).dump().input(TensorId(1)).output(TensorId(2));
        o.submit(&t)?;
        Ok(())
    }
    let cfg = RunnerConfig::small(Arch::A2a3);
    let mut r = DeviceRunner::new(cfg).unwrap();
    let callable = Callable::new("add-marked-input", Variant::HostBuiltGraph, add_marked_input);
    r.register_callable(1, callable).unwrap();
    let args = RunArgs {
        tensors: vec![TensorInit::Zeros(N), TensorInit::Zeros(N), TensorInit::Zeros(N)],
        scalars: vec![],
        scratch_bytes: 0,
    };
    let opts = DfxOptions { dump_args: 1, ..DfxOptions::default() };
    let s = DfxSession::start_on(&opts, DfxChip::of(&cfg, 0), r.device()).unwrap();
    r.attach_dfx_session(Some(&s)).unwrap();
    r.run(1, args).unwrap();
    r.attach_dfx_session(None).unwrap();
    let m = s.finish().unwrap();
    let words: u64 = m
        .loss
        .lanes
        .iter()
        .filter(|l| l.subsystem == Some(ferry_profile::Subsystem::ArgsDump))
        .map(|l| l.produced)
        .sum();
    let d = m.args.expect("an args dump");
    let rows: Vec<(String, u32)> =
        d.args.iter().map(|a| (a.stage.to_string(), a.arg_index)).collect();
    assert_eq!(rows, [("before_dispatch".to_string(), 0)]);
    assert_eq!(words, 7, "one chain: a 3-word header and the 4-word input");
}

/// A stage longer than one chain can hold (ArgsDump buffers of one record, 16 words) continues
/// in a fresh chain with the same header: every argument is dumped, none dropped.
#[test]
fn a_stage_longer_than_a_chain_continues_in_a_fresh_one() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    fn add_with_scalars(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
        let t = Task::new(K_ADD).input(TensorId(0)).input(TensorId(1)).output(TensorId(2));
        o.submit(&t.scalar_f32(1.0).scalar_f32(2.0).scalar_f32(3.0))?;
        Ok(())
    }
    let cfg = RunnerConfig::small(Arch::A2a3);
    let mut r = DeviceRunner::new(cfg).unwrap();
    let callable = Callable::new("add-with-scalars", Variant::HostBuiltGraph, add_with_scalars);
    r.register_callable(1, callable).unwrap();
    let args = RunArgs {
        tensors: vec![TensorInit::Zeros(N), TensorInit::Zeros(N), TensorInit::Zeros(N)],
        scalars: vec![],
        scratch_bytes: 0,
    };
    // Level 2: x and y carry payloads, so the stage takes the general path; its header (3
    // words), x and y (4 each) and three scalars (2 each) are 17 words, one more than a chain.
    let opts = DfxOptions { dump_args: 2, records_per_buffer: Some(1), ..DfxOptions::default() };
    let s = DfxSession::start_on(&opts, DfxChip::of(&cfg, 0), r.device()).unwrap();
    r.attach_dfx_session(Some(&s)).unwrap();
    r.run(1, args).unwrap();
    r.attach_dfx_session(None).unwrap();
    let d = s.finish().unwrap().args.expect("an args dump");
    assert_eq!((d.dropped_records, d.dropped_overwrite), (0, 0));
    let mut before: Vec<(u32, String)> = d
        .args
        .iter()
        .filter(|a| a.stage == "before_dispatch")
        .map(|a| (a.arg_index, a.kind.to_string()))
        .collect();
    before.sort();
    let want: Vec<(u32, String)> =
        [(0, "tensor"), (1, "tensor"), (3, "scalar"), (4, "scalar"), (5, "scalar")]
            .iter()
            .map(|&(i, k)| (i, k.to_string()))
            .collect();
    assert_eq!(before, want);
}

/// A payload larger than the thread's arena is cut to half the arena (whole words) and marked
/// truncated; one that fits exactly is copied whole.
#[test]
fn a_payload_larger_than_the_arena_is_truncated_to_half_of_it() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    fn add(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
        o.submit(&Task::new(K_ADD).input(TensorId(0)).input(TensorId(1)).output(TensorId(2)))?;
        Ok(())
    }
    for (arena_bytes, bin, truncated) in [(4 * N as u64, 4 * N as u64, false), (200, 100, true)] {
        let cfg = RunnerConfig::small(Arch::A2a3);
        let mut r = DeviceRunner::new(cfg).unwrap();
        r.register_callable(1, Callable::new("add", Variant::HostBuiltGraph, add)).unwrap();
        let args = RunArgs {
            tensors: vec![TensorInit::Zeros(N), TensorInit::Zeros(N), TensorInit::Zeros(N)],
            scalars: vec![],
            scratch_bytes: 0,
        };
        let opts = DfxOptions { dump_args: 2, arena_bytes, ..DfxOptions::default() };
        let s = DfxSession::start_on(&opts, DfxChip::of(&cfg, 0), r.device()).unwrap();
        r.attach_dfx_session(Some(&s)).unwrap();
        r.run(1, args).unwrap();
        r.attach_dfx_session(None).unwrap();
        let d = s.finish().unwrap().args.expect("an args dump");
        let x = d.args.iter().find(|a| a.stage == "before_dispatch" && a.arg_index == 0).unwrap();
        let what = format!("arena of {arena_bytes} bytes");
        assert_eq!((x.bin_size, x.truncated, x.overwritten), (bin, truncated, false), "{what}");
    }
}

/// Payloads that wrap a small arena: when the cursor reaches the arena's end exactly, or a
/// payload would cross it, the thread seals its chain, waits for the host to acknowledge what
/// it copied, and writes on from the arena's start. Every payload arrives whole, none
/// overwritten or dropped, with the bytes its tensor held at that stage.
#[test]
fn payloads_that_wrap_a_small_arena_all_arrive_whole() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    const M: usize = 16; // 64-byte tensors
    fn two_adds(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
        let (x, y, s, t) = (TensorId(0), TensorId(1), TensorId(2), TensorId(3));
        o.submit(&Task::new(K_ADD).input(x).input(y).output(s))?;
        o.submit(&Task::new(K_ADD).input(s).input(y).output(t))?;
        Ok(())
    }
    let x: Vec<f32> = (0..M).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..M).map(|i| 100.0 + i as f32).collect();
    let s: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
    let t: Vec<f32> = s.iter().zip(&y).map(|(a, b)| a + b).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    // (task, stage, argument) -> the tensor's bytes at that stage.
    let (b, a) = ("before_dispatch", "after_completion");
    let want = [
        ((0, b, 0), bytes(&x)),
        ((0, b, 1), bytes(&y)),
        ((0, a, 2), bytes(&s)),
        ((1, b, 0), bytes(&s)),
        ((1, b, 1), bytes(&y)),
        ((1, a, 2), bytes(&t)),
    ];
    // 256 bytes: the fourth payload ends exactly at the arena's end, so the fifth finds the
    // cursor at a lap's start and seals the chain it belongs to half-way (task 1's stage before
    // dispatch becomes two chains: 3 more words on the ArgsDump lanes, 39 in all); 200 bytes:
    // the fourth would cross the end, and seals before its chain holds anything (36 words:
    // four stages of a 3-word header and 4 words per argument). A seal anywhere else would
    // split another chain.
    for (arena_bytes, words) in [(256, 39), (200, 36)] {
        // One scheduler thread: every payload goes through its one arena (with two, which
        // thread dispatches or completes a task, and so whose arena a payload lands in, is the
        // scheduler's choice, and the arena may never wrap).
        let cfg = RunnerConfig { aicpu_threads: 2, ..RunnerConfig::small(Arch::A2a3) };
        let mut r = DeviceRunner::new(cfg).unwrap();
        r.register_callable(1, Callable::new("two-adds", Variant::HostBuiltGraph, two_adds))
            .unwrap();
        let args = RunArgs {
            tensors: vec![
                TensorInit::Data(x.clone()),
                TensorInit::Data(y.clone()),
                TensorInit::Zeros(M),
                TensorInit::Zeros(M),
            ],
            scalars: vec![],
            scratch_bytes: 0,
        };
        let opts = DfxOptions { dump_args: 2, arena_bytes, ..DfxOptions::default() };
        let session = DfxSession::start_on(&opts, DfxChip::of(&cfg, 0), r.device()).unwrap();
        r.attach_dfx_session(Some(&session)).unwrap();
        r.run(1, args).unwrap();
        r.attach_dfx_session(None).unwrap();
        let m = session.finish().unwrap();
        let lane_words: u64 = m
            .loss
            .lanes
            .iter()
            .filter(|l| l.subsystem == Some(ferry_profile::Subsystem::ArgsDump))
            .map(|l| l.produced)
            .sum();
        let d = m.args.expect("an args dump");
        let what = format!("arena of {arena_bytes} bytes");
        assert_eq!(lane_words, words, "{what}: chains sealed only where they must be");
        assert_eq!((d.dropped_records, d.dropped_overwrite), (0, 0), "{what}");
        for ((task, stage, index), data) in &want {
            let arg = d
                .args
                .iter()
                .find(|g| g.task_id == *task && g.stage == *stage && g.arg_index == *index)
                .unwrap_or_else(|| panic!("{what}: task {task} {stage} argument {index}"));
            assert!(!arg.overwritten && !arg.truncated, "{what}: {arg:?}");
            let got = d.payload(&arg).unwrap_or_else(|| panic!("{what}: no payload {arg:?}"));
            assert_eq!(got, &data[..], "{what}: task {task} {stage} argument {index}");
        }
    }
}
