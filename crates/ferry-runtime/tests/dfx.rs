//! DFX collection end to end: all five subsystems through the transport on the three examples,
//! both arches, both graph variants, with a one-buffer pool (the "Done when").
use ferry_dfx::Policy;
use ferry_profile::{EdgeSource, ScopePhase};
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::dfx::{replay_task, DfxChip, DfxOptions, DfxSession, ReplayError};
use ferry_runtime::host::{DeviceRunner, RunOutput, RunnerConfig, Variant};
use ferry_sim::Arch;
use std::collections::{BTreeMap, BTreeSet};

/// Which launch path a DFX run takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// The device half linked into the test (`LaunchPath::InProcess`), session in host memory.
    InProcess,
    /// The loaded AICPU program and the launch transaction; the session lives in device memory
    /// and reaches the program through `KernelArgs`' profiling bases.
    Full,
}

fn run_with(
    arch: Arch,
    ex: Example,
    variant: Variant,
    opts: &DfxOptions,
) -> (RunOutput, ferry_profile::RunModel, u64) {
    run_on(Path::InProcess, arch, ex, variant, opts)
}

fn run_on(
    path: Path,
    arch: Arch,
    ex: Example,
    variant: Variant,
    opts: &DfxOptions,
) -> (RunOutput, ferry_profile::RunModel, u64) {
    let (out, m, tasks, notifies) = run_counting(path, arch, ex, variant, opts);
    if path == Path::Full && !opts.doorbell_hint {
        // docs/design/dfx-backpressure.md: no host-device handshake; the host polls its queues.
        assert_eq!(notifies, 0, "{arch:?} {ex:?} {variant:?}: the device signalled the host");
    }
    (out, m, tasks)
}

/// One run and its model, its task count and the device's `notify_host` calls.
fn run_counting(
    path: Path,
    arch: Arch,
    ex: Example,
    variant: Variant,
    opts: &DfxOptions,
) -> (RunOutput, ferry_profile::RunModel, u64, u64) {
    let cfg = match path {
        Path::InProcess => RunnerConfig::small(arch).in_process(),
        Path::Full => RunnerConfig::small(arch),
    };
    let mut r = DeviceRunner::new(cfg).unwrap();
    let run = ex.build(Size::Small).with_variant(variant);
    r.register_callable(1, run.callable.clone()).unwrap();
    let chip = DfxChip {
        arch,
        threads: cfg.aicpu_threads,
        aic: cfg.aic,
        aiv: cfg.aiv,
        task_window: cfg.task_window,
        scratch_bytes: run.args.scratch_bytes,
    };
    let s = match path {
        Path::InProcess => DfxSession::start(opts, chip, r.device().clock()).unwrap(),
        Path::Full => DfxSession::start_on(opts, chip, r.device()).unwrap(),
    };
    r.attach_dfx_session(Some(&s)).unwrap();
    let out = r.run(1, run.args.clone()).unwrap_or_else(|e| panic!("{arch:?} {ex:?}: {e}"));
    r.attach_dfx_session(None).unwrap();
    let launches = r.launch_stats().map(|st| st.publishes).filter(|&n| n > 0);
    assert_eq!(launches.is_some(), path == Path::Full, "{path:?}: the launch transaction ran");
    run.verify(&out).unwrap_or_else(|e| panic!("{arch:?} {ex:?} {variant:?}: {e}"));
    let m = s.finish().unwrap_or_else(|e| panic!("{arch:?} {ex:?} {variant:?}: {e}"));
    (out, m, run.tasks, r.device().aicpu_os().host_notifications())
}

/// Dependencies a tensor map finds over `deps.json`'s tasks when every task is still running.
fn replay_edges(d: &ferry_profile::DepsGraph) -> BTreeSet<(u64, u64)> {
    let addr: BTreeMap<u64, u64> = d.tensors.iter().map(|t| (t.tensor_id, t.buffer_addr)).collect();
    let mut map = ferry_runtime::device::tensor_map::TensorMap::new();
    let mut out = BTreeSet::new();
    for t in &d.tasks {
        let mut deps = Vec::new();
        for a in &t.args {
            let start = addr[&a.tensor_id.unwrap()];
            let end = start + 4 * a.shape[0];
            map.access(t.task_id, start, end, a.role != "INPUT", &mut deps, &mut |_| true);
        }
        out.extend(deps.into_iter().filter(|&p| p != t.task_id).map(|p| (p, t.task_id)));
    }
    out
}

fn one_buffer(policy: Policy) -> DfxOptions {
    DfxOptions {
        policy,
        buffers_per_lane: Some(1),
        records_per_buffer: Some(4),
        arena_bytes: 64 << 10,
        ..DfxOptions::all()
    }
}

#[test]
fn every_subsystem_is_lossless_with_a_one_buffer_pool_under_block() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in [Arch::A2a3, Arch::A5] {
        for ex in Example::ALL {
            for variant in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
                lossless_under_block(Path::InProcess, arch, ex, variant);
            }
        }
    }
}

#[test]
fn the_loaded_aicpu_program_collects_every_subsystem_from_device_memory() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // The full path: the AICPU program is the Path A shared object, the transport regions,
    // arenas and directories live in simulated device memory, and the program attaches its
    // writers from `KernelArgs`' profiling bases. Nothing tells the host that a buffer is ready:
    // its engine polls the ready queues (`lossless_under_block` checks that the device made no
    // `notify_host` call), and a one-buffer pool still completes every example losslessly.
    for arch in [Arch::A2a3, Arch::A5] {
        for ex in Example::ALL {
            for variant in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
                lossless_under_block(Path::Full, arch, ex, variant);
            }
        }
    }
}

/// The doorbell hint, when asked for, is the device's only signal to the host: the counter the
/// default path is checked against does move with it.
#[test]
fn the_doorbell_hint_is_the_only_device_to_host_signal() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let opts = DfxOptions { doorbell_hint: true, ..one_buffer(Policy::Block) };
    let (_, m, _, notifies) =
        run_counting(Path::Full, Arch::A2a3, Example::Vector, Variant::DeviceOrchestrated, &opts);
    assert!(m.loss.reconciles() && m.loss.totals().2 == 0);
    assert!(notifies > 0, "the hint rings the host through notify_host");
}

fn lossless_under_block(path: Path, arch: Arch, ex: Example, variant: Variant) {
    let what = format!("{path:?} {arch:?} {ex:?} {variant:?}");
    let opts = one_buffer(Policy::Block);
    let (_, m, tasks) = run_on(path, arch, ex, variant, &opts);
    let unreconciled: Vec<_> = m.loss.lanes.iter().filter(|l| !l.reconciles()).collect();
    assert!(m.loss.reconciles(), "{what}: lanes that do not reconcile: {unreconciled:#?}");
    assert_eq!(m.loss.totals().2, 0, "{what}: zero loss under Block");
    let deps = m.deps.as_ref().unwrap();
    assert_eq!(deps.tasks.len() as u64, tasks, "{what}: one DepGen record per submit");
    let blocks: BTreeMap<u64, u32> = deps.tasks.iter().map(|t| (t.task_id, t.block_num)).collect();
    // Swimlane: every dispatch exactly once, ordered dispatch ≤ start ≤ end ≤ finish.
    let joined = m.tasks();
    let mut per_task: BTreeMap<u64, u32> = BTreeMap::new();
    for t in &joined {
        assert!(t.is_ordered(), "{what}: {t:?}");
        assert!(t.dispatch.is_some() && t.finish.is_some(), "{what}: {t:?}");
        *per_task.entry(t.task_id).or_default() += 1;
    }
    assert_eq!(per_task, blocks, "{what}: each block of each task exactly once");
    let sw = m.swimlane.as_ref().unwrap();
    assert_eq!(sw.aicpu_tasks.len(), joined.len(), "{what}");
    assert!(sw.sched_phases.iter().map(Vec::len).sum::<usize>() > 0, "{what}");
    assert_eq!(sw.orch_phases.iter().map(Vec::len).sum::<usize>() as u64, tasks);
    // PMU: one row per task, counters that mean something.
    let pmu = m.pmu.as_ref().unwrap();
    let rows: BTreeSet<u64> = pmu.rows.iter().map(|r| r.task_id).collect();
    assert_eq!(pmu.rows.len() as u64, tasks, "{what}");
    assert_eq!(rows.len() as u64, tasks, "{what}");
    assert!(pmu.rows.iter().all(|r| r.pmu_total_cycles > 0), "{what}");
    assert!(pmu.rows.iter().any(|r| r.counters.iter().any(|&c| c > 0)), "{what}");
    // Scopes balanced (the vector example opens one per chunk).
    let sc = m.scopes.as_ref().unwrap();
    let begins = sc.records.iter().filter(|r| r.phase == ScopePhase::Begin).count();
    let ends = sc.records.iter().filter(|r| r.phase == ScopePhase::End).count();
    assert_eq!(begins, ends, "{what}");
    if ex == Example::Vector && variant == Variant::DeviceOrchestrated {
        assert!(begins > 0, "{what}");
    }
    // Deps: the runtime's edges. A replay of the tensor map over the recorded
    // arguments (no task finished) finds every one of them; the host-built graph has
    // exactly the replay's edges, the device orchestrator the subset whose producer
    // was still running at submit.
    let edges: BTreeSet<(u64, u64)> = deps.edges.iter().map(|e| (e.pred, e.succ)).collect();
    assert_eq!(edges.len(), deps.edges.len(), "{what}: no repeated edge");
    assert!(deps.edges.iter().all(|e| e.source == EdgeSource::Tensormap), "{what}");
    let replay = replay_edges(deps);
    assert!(edges.is_subset(&replay), "{what}");
    if variant == Variant::HostBuiltGraph {
        assert_eq!(edges, replay, "{what}");
    }
    if ex != Example::Storm {
        assert!(!edges.is_empty(), "{what}");
    }
    // Args dump: a replay of a task reproduces its outputs. The storm marks no argument, so at
    // level 3 it keeps every argument's metadata and no payload.
    let args = m.args.as_ref().unwrap();
    assert_eq!(args.dropped_records, 0, "{what}");
    let step = if ex == Example::Storm { 97 } else { 1 };
    let hybrid_unmarked = ex == Example::Storm && opts.dump_args == 3;
    if hybrid_unmarked {
        assert!(args.bin.is_empty(), "{what}: payloads of unmarked tensors");
        let per_task = args.args.iter().filter(|a| a.kind == "tensor").count() as u64;
        assert_eq!(per_task, 2 * tasks, "{what}: each task's inout before and after");
    }
    for t in deps.tasks.iter().step_by(step).chain(deps.tasks.last()) {
        match replay_task(args, t.task_id) {
            Err(ReplayError::Missing { .. }) if hybrid_unmarked => {}
            Err(e) => panic!("{what}: {e}"),
            Ok(_) if hybrid_unmarked => panic!("{what}: replayed without payloads"),
            Ok(r) => {
                assert!(!r.is_empty(), "{what}");
                assert!(r.iter().all(|a| a.matches()), "{what}: task {}", t.task_id);
            }
        }
    }
}

#[test]
fn drop_policy_reports_its_losses_and_changes_nothing_else() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // A zero Drop bound with one buffer per lane: every switch the host has not caught up with
    // drops a buffer's worth of records.
    let opts = DfxOptions { drop_wait_cycles: Some(0), ..one_buffer(Policy::Drop) };
    let (mut any_dropped, mut any_args_dropped) = (false, false);
    for (path, arch) in [(Path::InProcess, Arch::A2a3), (Path::Full, Arch::A5)] {
        let (out, m, tasks) =
            run_on(path, arch, Example::Storm, Variant::DeviceOrchestrated, &opts);
        // The run itself is unchanged: every task ran and verified (in run_with).
        assert_eq!(out.stats.tasks, tasks);
        assert!(m.loss.reconciles(), "produced = collected + dropped on every lane");
        let (produced, collected, dropped) = m.loss.totals();
        assert_eq!(produced, collected + dropped);
        any_dropped |= dropped > 0;
        // ArgsDump counts its losses in arguments (its lanes' lines count chain words): every
        // storm task has three (input and scalar before dispatch, output after completion),
        // each either in the model or counted dropped, none twice.
        let args = m.args.as_ref().unwrap();
        assert_eq!(args.args.len() as u64 + args.dropped_records, 3 * tasks, "{arch:?}");
        any_args_dropped |= args.dropped_records > 0;
        // Every file carries its subsystem's loss lines, and they read back as written.
        let dir =
            std::env::temp_dir().join(format!("ferry-dfx-drop-{}-{arch:?}", std::process::id()));
        ferry_profile::write_run(&dir, &m).unwrap();
        let back = ferry_profile::read_run(&dir).unwrap();
        assert_eq!(back.loss.totals(), m.loss.totals(), "{arch:?}");
        assert_eq!(back.loss.policy, ferry_profile::LossPolicy::Drop);
        let report = ferry_profile::views::report(&back);
        assert!(report.contains(&format!("dropped {dropped}")), "{report}");
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(any_dropped, "a zero Drop bound on a one-buffer pool drops records");
    assert!(any_args_dropped, "and whole ArgsDump chains");
}

#[test]
fn dfx_off_leaves_the_runner_untouched() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let cfg = RunnerConfig::small(Arch::A2a3).in_process();
    let mut r = DeviceRunner::new(cfg).unwrap();
    let run = Example::Vector.build(Size::Small);
    r.register_callable(1, run.callable.clone()).unwrap();
    let s = DfxSession::start(
        &DfxOptions::all(),
        DfxChip {
            arch: Arch::A2a3,
            threads: cfg.aicpu_threads,
            aic: cfg.aic,
            aiv: cfg.aiv,
            task_window: cfg.task_window,
            scratch_bytes: 0,
        },
        r.device().clock(),
    )
    .unwrap();
    r.attach_dfx(Some(s.device()));
    r.attach_dfx(None);
    let out = r.run(1, run.args.clone()).unwrap();
    run.verify(&out).unwrap();
    let m = s.finish().unwrap();
    assert_eq!(m.loss.totals(), (0, 0, 0));
    assert!(m.swimlane.unwrap().aicore_tasks.is_empty());
}

#[test]
fn a_small_payload_arena_wraps_behind_the_host_acknowledgement_without_loss() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // 8 KiB per scheduler thread: the vector example's 4 KiB views wrap the arena every other
    // payload, so each lap waits at the arena gate for the host's acknowledgement.
    let opts = DfxOptions { arena_bytes: 8 << 10, ..one_buffer(Policy::Block) };
    for arch in [Arch::A2a3, Arch::A5] {
        let (_, m, _) = run_with(arch, Example::Vector, Variant::DeviceOrchestrated, &opts);
        let args = m.args.as_ref().unwrap();
        assert_eq!((args.dropped_records, args.dropped_overwrite), (0, 0), "{arch:?}");
        assert!(args.args.iter().all(|a| a.kind == "scalar" || a.bin_offset.is_some()));
        assert!(args.bin.len() > 4 * (8 << 10), "{arch:?}: several laps of payload");
        for t in m.deps.as_ref().unwrap().tasks.iter() {
            let r = replay_task(args, t.task_id).unwrap();
            assert!(r.iter().all(|a| a.matches()), "{arch:?}: task {}", t.task_id);
        }
    }
}

#[test]
fn stall_intervals_lie_on_the_device_clock_the_tasks_are_stamped_with() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    // The session starts well after the chip's device clock began counting (at device creation):
    // a transport that measured stalls from its own creation would place every stall that much
    // before the tasks that caused it.
    let mut stalls = 0;
    for arch in [Arch::A2a3, Arch::A5] {
        let cfg = RunnerConfig::small(arch).in_process();
        let mut r = DeviceRunner::new(cfg).unwrap();
        let run = Example::Vector.build(Size::Small);
        r.register_callable(1, run.callable.clone()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let chip = DfxChip {
            arch,
            threads: cfg.aicpu_threads,
            aic: cfg.aic,
            aiv: cfg.aiv,
            task_window: cfg.task_window,
            scratch_bytes: run.args.scratch_bytes,
        };
        let s = DfxSession::start(&one_buffer(Policy::Block), chip, r.device().clock()).unwrap();
        r.attach_dfx_session(Some(&s)).unwrap();
        let out = r.run(1, run.args.clone()).unwrap();
        r.attach_dfx_session(None).unwrap();
        run.verify(&out).unwrap();
        let m = s.finish().unwrap();
        let tasks = m.tasks();
        // A per-core lane's writer only writes (and so only waits) after its core's first task
        // was dispatched.
        let mut first: BTreeMap<u32, u64> = BTreeMap::new();
        for t in &tasks {
            let at = t.dispatch.unwrap_or(t.start);
            first.entry(t.core).and_modify(|f| *f = (*f).min(at)).or_insert(at);
        }
        for l in &m.loss.lanes {
            let Some(core) = l.core else { continue };
            for &[a, b] in &l.stalls {
                stalls += 1;
                assert!(
                    a >= first[&core],
                    "{arch:?} {}: stall {a}..{b} before core {core}'s first dispatch {}",
                    l.lane,
                    first[&core]
                );
            }
        }
    }
    assert!(stalls > 0, "a one-buffer pool makes the per-core writers wait for the host");
}

/// A dead or wedged DFX host through the session (docs/design/dfx-backpressure.md): the host's threads exit before the
/// run starts; the run completes and verifies, the device's writers give up at their gates
/// within the Drop budget, and `finish` plays the restarted host: every record is collected or
/// counted dropped, lane by lane, nothing else. The runner then takes a fresh session and runs
/// losslessly.
#[test]
fn a_dead_dfx_host_loses_only_what_the_device_counted_and_the_runner_goes_on() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in [Arch::A2a3, Arch::A5] {
        let cfg = RunnerConfig::small(arch);
        let mut r = DeviceRunner::new(cfg).unwrap();
        let run = Example::Vector.build(Size::Small);
        r.register_callable(1, run.callable.clone()).unwrap();
        let chip = DfxChip {
            arch,
            threads: cfg.aicpu_threads,
            aic: cfg.aic,
            aiv: cfg.aiv,
            task_window: cfg.task_window,
            scratch_bytes: run.args.scratch_bytes,
        };
        let opts = DfxOptions {
            drop_wait_cycles: Some(arch.profile().clock_hz / 20_000),
            ..one_buffer(Policy::Drop)
        };
        // A first run per launch slot loads and stages what every later run reuses; memory is
        // compared after them.
        for _ in 0..cfg.launch_slots {
            run.verify(&r.run(1, run.args.clone()).unwrap()).unwrap();
        }
        let used = r.device().memory().used();
        let mut s = DfxSession::start_on(&opts, chip, r.device()).unwrap();
        assert!(s.host_threads() > 0);
        s.halt_host();
        assert!(s.host_halted() && s.host_threads() == 0);
        s.halt_host(); // a second halt does nothing
        r.attach_dfx_session(Some(&s)).unwrap();
        let out = r.run(1, run.args.clone()).unwrap_or_else(|e| panic!("{arch:?}: {e}"));
        r.attach_dfx_session(None).unwrap();
        run.verify(&out).unwrap();
        let m = s.finish().unwrap_or_else(|e| panic!("{arch:?}: the restarted host: {e}"));
        let dropped: u64 = m.loss.lanes.iter().map(|l| l.dropped).sum();
        assert!(dropped > 0, "{arch:?}: one-buffer lanes with no host must drop");
        for l in &m.loss.lanes {
            assert_eq!(l.produced, l.collected + l.dropped, "{arch:?} {}: {l:?}", l.lane);
        }
        assert!(m.loss.lanes.iter().any(|l| l.collected > 0), "what was queued is collected");
        assert_eq!(r.device().memory().used(), used, "{arch:?}: the session's memory is freed");
        // The runner goes on: a fresh session, lossless under Block.
        let s = DfxSession::start_on(&one_buffer(Policy::Block), chip, r.device()).unwrap();
        r.attach_dfx_session(Some(&s)).unwrap();
        let out = r.run(1, run.args.clone()).unwrap();
        r.attach_dfx_session(None).unwrap();
        run.verify(&out).unwrap();
        let m = s.finish().unwrap();
        assert!(m.loss.lanes.iter().all(|l| l.dropped == 0 && l.produced == l.collected));
    }
}
