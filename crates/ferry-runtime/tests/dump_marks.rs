//! ArgsDump levels against `dump(...)` marks (docs/dfx.md): 1 (partial) dumps only
//! marked arguments, 2 (full) every argument with its payload, 3 (hybrid) every argument's
//! metadata and only the marked tensors' payloads — on both orchestration variants (the
//! host-built graph carries the marks in its task records) and both launch paths. Then the
//! device's arena gate on a chip the test plays itself, and the device's silence towards the
//! host.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferry_abi::arch::A2A3;
use ferry_abi::args_dump;
use ferry_abi::dfx::DfxLayout;
use ferry_dfx::clock::VirtualClock;
use ferry_dfx::mem::{DeviceMemory, SvmMemory};
use ferry_dfx::{DfxBuilder, DfxTransport};
use ferry_runtime::device::dfx::{ArgsArena, DfxDevice, DfxRegions};
use ferry_runtime::device::kernels::{K_ADD, K_ADD_SCALAR};
use ferry_runtime::device::ops::TranslateError;
use ferry_runtime::device::task::ResolvedTask;
use ferry_runtime::host::dfx::{DfxChip, DfxOptions, DfxSession};
use ferry_runtime::host::{Callable, DeviceRunner, RunArgs, RunnerConfig, TensorInit, Variant};
use ferry_runtime::{DeviceOps, Orchestrate, Role, SubmitError, Task, TensorId};
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

/// The device by default rings no host bell: the host polls its ready queues, as on hardware,
/// and a run with ArgsDump on the loaded AICPU program makes no `notify_host` call. Only the
/// doorbell hint, when asked for, makes the device ring.
#[test]
fn the_device_rings_the_host_only_when_the_hint_is_asked_for() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for hint in [false, true] {
        let cfg = RunnerConfig::small(Arch::A2a3);
        let mut r = DeviceRunner::new(cfg).unwrap();
        r.register_callable(1, Callable::new("marked-add", Variant::HostBuiltGraph, marked_add))
            .unwrap();
        let args = RunArgs {
            tensors: vec![TensorInit::Zeros(N), TensorInit::Zeros(N), TensorInit::Zeros(N)],
            scalars: vec![],
            scratch_bytes: 0,
        };
        let opts = DfxOptions { dump_args: 2, doorbell_hint: hint, ..DfxOptions::default() };
        let s = DfxSession::start_on(&opts, DfxChip::of(&cfg, 0), r.device()).unwrap();
        r.attach_dfx_session(Some(&s)).unwrap();
        r.run(1, args).unwrap();
        r.attach_dfx_session(None).unwrap();
        let d = s.finish().unwrap().args.expect("an args dump");
        assert_eq!(d.args.len(), 6, "hint {hint}: the dump is whole");
        let rings = r.device().aicpu_os().host_notifications();
        assert_eq!(rings > 0, hint, "hint {hint}: the device rang the host {rings} times");
    }
}

/// Device address of the tensors an [`ArenaChip`] holds.
const TENSORS: u64 = 0x7_0000_0000;

/// What the test's host does at each pass of an AICPU wait.
type HostStep = Box<dyn FnMut() + Send>;

/// The chip as the ArgsDump of a scheduler thread sees it, played by the test: tensor memory,
/// a clock that advances one cycle per read, and the host's step (its collector copying
/// payloads and its acknowledgement) run at each pass of an AICPU wait, i.e. of the arena
/// gate's loop. Nothing runs on another thread: every interleaving is the test's.
struct ArenaChip {
    tensors: Box<[AtomicU64]>,
    now: AtomicU64,
    waits: AtomicU64,
    host: Mutex<HostStep>,
}

impl ArenaChip {
    /// `words` words of tensor memory, word `i` holding `i + 1`.
    fn new(words: u64) -> ArenaChip {
        ArenaChip {
            tensors: (0..words).map(|i| AtomicU64::new(i + 1)).collect(),
            now: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            host: Mutex::new(Box::new(|| {})),
        }
    }

    fn on_wait(&self, f: impl FnMut() + Send + 'static) {
        *self.host.lock().unwrap() = Box::new(f);
    }

    fn waits(&self) -> u64 {
        // Relaxed: a counter of this thread's own waits.
        self.waits.load(Ordering::Relaxed)
    }
}

// SAFETY: `translate` hands out pointers into `tensors` only, bounds-checked, 8-byte aligned
// for an aligned address, valid as long as the chip (which each test keeps past every use);
// nothing writes them while a thread dumps. No register, core or other device memory exists.
unsafe impl DeviceOps for ArenaChip {
    fn translate(&self, addr: u64, len: u64) -> Result<*mut u8, TranslateError> {
        let bytes = 8 * self.tensors.len() as u64;
        match addr.checked_sub(TENSORS) {
            Some(off) if off.checked_add(len).is_some_and(|end| end <= bytes) => {
                Ok(self.tensors.as_ptr().cast::<u8>().wrapping_add(off as usize).cast_mut())
            }
            _ => Err(TranslateError { addr, len, reason: "not a tensor of the test".into() }),
        }
    }
    fn reg_read(&self, _: u64, _: u32) -> u32 {
        0
    }
    fn reg_write_aicpu(&self, _: u64, _: u32, _: u32) {}
    fn reg_write_core(&self, _: u64, _: u32, _: u32) {}
    fn core_wait(
        &self,
        _: u64,
        _: u32,
        _: &mut dyn FnMut(u32) -> bool,
        _: Option<std::time::Duration>,
    ) -> Option<u32> {
        None
    }
    fn aicpu_wait(&self, cond: &mut dyn FnMut() -> bool, _: Option<std::time::Duration>) -> bool {
        // Relaxed: as in `waits`.
        self.waits.fetch_add(1, Ordering::Relaxed);
        (self.host.lock().unwrap())();
        cond()
    }
    fn notify_aicpu(&self) {}
    fn clock_cycles(&self) -> u64 {
        // Relaxed: one thread reads this clock.
        self.now.fetch_add(1, Ordering::Relaxed)
    }
    fn clock_hz(&self) -> u64 {
        A2A3.clock_hz
    }
}

/// ArgsDump of `threads` scheduler threads at level 2 (every tensor with its payload): one
/// lane of four 64-word buffers per thread, an arena of `arena` bytes each, and gates
/// (the arena gate's included) that give up after 200 cycles.
struct ArgsOnChip {
    dev: Arc<DfxDevice>,
    mem: Arc<dyn DeviceMemory>,
    layout: DfxLayout,
}

impl ArgsOnChip {
    fn new(threads: u32, arena: u64) -> ArgsOnChip {
        let mut b = DfxBuilder::new(&A2A3);
        b.ready_queues(threads).ready_depth(8).records_per_buffer(64).block_budget_cycles(200);
        for t in 0..threads {
            b.lane(t, 0, 4);
        }
        let c = b.build::<u64>().unwrap();
        let mem: Arc<dyn DeviceMemory> = Arc::new(SvmMemory::new(c.region_size(), 0x10_0000));
        let clock = Arc::new(VirtualClock::ticking(1));
        let t = DfxTransport::<u64>::new(c.clone(), mem.clone(), clock).unwrap();
        let dev = DfxDevice {
            args_level: 2,
            threads,
            regions: DfxRegions { args: Some(t.device_region()), ..DfxRegions::default() },
            arenas: (0..threads).map(|_| Arc::new(ArgsArena::new(arena))).collect(),
            ..DfxDevice::default()
        };
        ArgsOnChip { dev: Arc::new(dev), mem, layout: c.layout() }
    }

    /// Payloads the chains of the buffers published on thread `t`'s ready queue name (what
    /// its host could have copied by now), and how many buffers that is.
    fn published(&self, t: u32) -> (u64, u32) {
        let v = self.mem.host_view();
        let l = &self.layout;
        // Acquire: pairs with the writer's Release store of the tail.
        let tail = v.load_u32(l.tail_offset(t), Ordering::Acquire);
        let mut payloads = 0;
        for i in 0..tail {
            let e = l.entry_offset(t, i);
            // Relaxed (entry, count and words): published by the tail's Release store.
            let off = (v.load_u64(e + 8, Ordering::Relaxed) - self.mem.device_addr()) as usize;
            let count = v.load_u32(off + l.count_offset(), Ordering::Relaxed) as usize;
            let words: Vec<u64> =
                (0..count).map(|w| v.load_u64(off + 8 * w, Ordering::Relaxed)).collect();
            for chain in args_dump::chains(&words) {
                let sizes = chain.unwrap().payloads().flatten().filter(|&(_, n)| n > 0);
                payloads += sizes.count() as u64;
            }
        }
        (payloads, tail)
    }
}

/// A task of `n` input tensors of `bytes` bytes each, one after the other in the chip's tensor
/// memory.
fn inputs(n: u32, bytes: u64) -> ResolvedTask {
    let mut t = ResolvedTask { kernel: K_ADD, n_tensors: n, ..ResolvedTask::EMPTY };
    for i in 0..n as usize {
        t.tensors[i] = (TENSORS + i as u64 * bytes, bytes, Role::Input);
    }
    t
}

/// What the host saw at each pass of an arena gate's wait: payloads named by the published
/// buffers, buffers published, the acknowledgement it had published.
type Passes = Arc<Mutex<Vec<(u64, u32, u64)>>>;

/// The host of thread `t`: at each pass of a wait it acknowledges one more of the payloads
/// the published buffers name (a collector that copies one payload per step), never one it
/// could not have seen.
fn acknowledge_one_per_pass(chip: &ArenaChip, dump: &Arc<ArgsOnChip>, t: u32) -> Passes {
    let passes: Passes = Arc::default();
    let (seen, dump) = (passes.clone(), dump.clone());
    chip.on_wait(move || {
        let (named, buffers) = dump.published(t);
        let acks = dump.dev.arenas[t as usize].completed();
        // Relaxed: this step is the counter's only writer.
        let done = acks.load(Ordering::Relaxed);
        seen.lock().unwrap().push((named, buffers, done));
        if done < named {
            // Release: as the ack hook's, after the copy it counts.
            acks.store(done + 1, Ordering::Release);
        }
    });
    passes
}

/// Before a payload write that wraps the arena the thread seals and publishes its metadata
/// buffer (with the chain it was building, whose payload is already in the arena), notes the
/// payloads it has published and waits until its acknowledgement reaches that count. Three
/// 64-byte payloads per stage in a 256-byte arena: the second stage's second payload finds the
/// cursor at the arena's end; by then four payloads are published, in one buffer, and the
/// gate passes only when the host has acknowledged the fourth.
#[test]
fn an_arena_wrap_seals_publishes_and_waits_for_every_payload_it_published() {
    let _bound = ferry_watchdog::bound("the arena gate");
    let dump = Arc::new(ArgsOnChip::new(1, 256));
    let chip = ArenaChip::new(3 * 8);
    let passes = acknowledge_one_per_pass(&chip, &dump, 0);
    let arena = dump.dev.arenas[0].clone();
    let mut thread = dump.dev.thread(0, &[]);
    let task = inputs(3, 64);
    thread.on_dispatch(&chip, (0, 1), 0, 0, &task, 0);
    assert_eq!(chip.waits(), 0, "three payloads fit the arena");
    thread.on_dispatch(&chip, (0, 1), 1, 0, &task, 0);
    // Relaxed (arena counters): this thread wrote them, or the host step on it.
    let (dropped, acked) = (arena.dropped().load(Ordering::Relaxed), arena.completed());
    assert_eq!(dropped, 0, "the gate did not give up");
    let passes = passes.lock().unwrap().clone();
    let first = &passes[..passes.len().min(5)];
    let Some(&(named, buffers, _)) = first.first() else { panic!("the gate did not wait") };
    assert_eq!((named, buffers), (4, 1), "sealed and published before waiting: {first:?}");
    assert_eq!(arena.published().load(Ordering::Relaxed), 4, "the count it waited for");
    assert_eq!(acked.load(Ordering::Relaxed), 4, "the gate passed at the fourth ack");
    assert_eq!(passes.len(), 4, "one pass per acknowledgement: {first:?}");
    // The fifth payload (the second tensor, words 9 to 16) went to the arena's start.
    let mut got = Vec::new();
    // SAFETY: nothing writes the arena while this thread reads it (the dump is done).
    unsafe { arena.read_into(0, 64, |b| got.extend_from_slice(b)) };
    let want: Vec<u8> = (9..=16u64).flat_map(u64::to_le_bytes).collect();
    assert_eq!(got, want);
    thread.finish();
}

/// A thread's arena gate waits for its own acknowledgement counter only: it passes as soon as
/// its own count reaches what it published while another thread's count lags (0: that
/// thread's host has acknowledged nothing), and it does not pass early while another
/// thread's count runs far ahead.
#[test]
fn a_thread_waits_for_its_own_acknowledgement_only() {
    let _bound = ferry_watchdog::bound("the arena gate");
    let dump = Arc::new(ArgsOnChip::new(2, 256));
    let chip = ArenaChip::new(3 * 8);
    let passes = acknowledge_one_per_pass(&chip, &dump, 1);
    let (other, own) = (dump.dev.arenas[0].clone(), dump.dev.arenas[1].clone());
    let mut first = dump.dev.thread(0, &[]);
    let task = inputs(3, 64);
    first.on_dispatch(&chip, (0, 1), 0, 0, &task, 0); // three payloads nobody acknowledges
    let mut thread = dump.dev.thread(1, &[]);
    // Lap 1 (thread 0 acknowledged nothing): the wrap waits for four acknowledgements.
    thread.on_dispatch(&chip, (0, 1), 1, 0, &task, 0);
    thread.on_dispatch(&chip, (0, 1), 2, 0, &task, 0);
    let last = || passes.lock().unwrap().last().copied();
    // Relaxed (arena counters): written on this thread, or by the host step on it.
    assert_eq!(own.dropped().load(Ordering::Relaxed), 0, "gave up; last pass {:?}", last());
    assert_eq!(own.completed().load(Ordering::Relaxed), 4);
    assert_eq!(other.completed().load(Ordering::Relaxed), 0);
    // Lap 2 (thread 0's count far ahead): the next wrap still waits for its own eighth.
    other.completed().store(1_000, Ordering::Relaxed);
    thread.on_dispatch(&chip, (0, 1), 3, 0, &task, 0);
    assert_eq!(own.dropped().load(Ordering::Relaxed), 0);
    assert_eq!(own.completed().load(Ordering::Relaxed), 8, "last pass {:?}", last());
    thread.finish();
    first.finish();
}
