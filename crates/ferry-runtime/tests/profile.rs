//! `run_profiled`: one DFX session over several runs, and a failed run's profile (the
//! closure's own verdict, and a kernel that faults on its core).
use ferry_profile::{
    open_run, Manifest, Needs, OutDir, RunLabel, RunOutcome, WriteOptions, DEPS_FILE,
    PERFETTO_FILE, PMU_FILE, RUNS_FILE, SWIMLANE_FILE,
};
use ferry_runtime::device::kernels::K_ADD;
use ferry_runtime::device::task::{Orchestrate, Task, TensorId, View};
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::dfx::DfxOptions;
use ferry_runtime::host::profile::{
    claim_run_dir, example_summary, run_profiled, run_summary, ProfileTarget,
};
use ferry_runtime::host::{Callable, DeviceRunner, RunArgs, RunnerConfig, TensorInit, Variant};
use ferry_runtime::{DeviceFault, KernelFault, RunError, SubmitError};

#[test]
fn one_session_spans_every_run_the_closure_launches_and_a_failure_keeps_the_profile() {
    let _bound = ferry_watchdog::bound("the profiled runs on the simulated chip");
    let dir = std::env::temp_dir().join(format!("ferry-run-profiled-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut runner = DeviceRunner::new(RunnerConfig::small(ferry_sim::Arch::A2a3)).unwrap();
    let run = Example::Vector.build(Size::Small);
    runner.register_callable(0, run.callable.clone()).unwrap();
    let dfx = DfxOptions { swimlane: 1, ..DfxOptions::default() };
    let mut rows: Vec<Vec<usize>> = Vec::new();
    for launches in [1u32, 3] {
        let mut out = OutDir::claim(&dir, &[]).unwrap();
        out.begin("t", &["test".into()], "a2a3", &[]).unwrap();
        let target = ProfileTarget {
            out: &mut out,
            dir: dir.clone(),
            case: "vector".into(),
            write: WriteOptions::default(),
            scope_names: Default::default(),
            warmup: 0,
            fsync: Default::default(),
        };
        let done = run_profiled(&mut runner, &dfx, run.args.scratch_bytes, Some(target), |r| {
            for _ in 0..launches {
                let p = r.prepare(0, run.args.clone()).map_err(|e| e.to_string())?;
                let l = r.launch(p).map_err(|e| e.to_string())?;
                let output = r.finalize_run(l).map_err(|e| e.to_string())?;
                run.verify(&output).map_err(|e| e.to_string())?;
            }
            // The closure's own verdict: the profile is written whatever it says.
            Err::<((), Option<_>), String>(format!("{launches} launches"))
        })
        .unwrap();
        assert_eq!(done.run.unwrap_err(), format!("{launches} launches"));
        let p = done.profile.unwrap().expect("DFX on");
        assert!(p.report.files.iter().any(|f| f.path.ends_with(SWIMLANE_FILE)));
        // One launch: one profile in the directory; three: one per run, each labelled, in
        // `run-NNN/`, with `runs.json` beside them.
        let models: Vec<_> = if p.runs.is_empty() {
            vec![p.model]
        } else {
            assert!(p.report.files.iter().any(|f| f.path.ends_with(RUNS_FILE)));
            p.runs
                .into_iter()
                .enumerate()
                .map(|(k, r)| {
                    assert_eq!(r.dir, dir.join(RunLabel::dir_name(k as u32)));
                    assert_eq!(r.model.meta.run, Some(RunLabel { index: k as u32, runs: 3 }));
                    assert!(r.model.loss.reconciles());
                    r.model
                })
                .collect()
        };
        assert_eq!(models.len() as u32, launches);
        rows.push(models.iter().map(|m| m.swimlane.as_ref().unwrap().aicore_tasks.len()).collect());
        out.commit().unwrap();
    }
    // Three launches in one session: three runs, each with the rows of one.
    assert_eq!(rows[1], [rows[0][0]; 3], "{rows:?}");
    runner.finalize().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A good `add` (64 elements), then one whose first input is 8 elements for a 64-element output:
/// refused by the kernel on its core (a kernel fault), after the first ran.
fn good_then_bad_shape(o: &mut dyn Orchestrate) -> Result<(), SubmitError> {
    o.submit(&Task::new(K_ADD).input(TensorId(0)).input(TensorId(0)).output(TensorId(1)))?;
    o.submit(
        &Task::new(K_ADD)
            .input(View::range(TensorId(0), 0, 8))
            .input(TensorId(0))
            .output(TensorId(2)),
    )?;
    Ok(())
}

/// A run whose kernel faults completes its profile in its run directory: every file written and
/// listed, the manifest marked failed with the fault, and each analysis command's files open.
#[test]
fn a_kernel_fault_completes_the_profile_and_marks_the_run_failed() {
    let _bound = ferry_watchdog::bound("the faulting run on the simulated chip");
    let dir = std::env::temp_dir().join(format!("ferry-kernel-fault-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut runner = DeviceRunner::new(RunnerConfig::small(ferry_sim::Arch::A2a3)).unwrap();
    let graph = Callable::new("faults", Variant::HostBuiltGraph, good_then_bad_shape);
    runner.register_callable(0, graph).unwrap();
    let args = RunArgs {
        tensors: vec![
            TensorInit::Data(vec![1.0; 64]),
            TensorInit::Zeros(64),
            TensorInit::Zeros(64),
        ],
        scalars: vec![],
        scratch_bytes: 0,
    };
    let mut rd = claim_run_dir(&dir, runner.config(), &["test".into()], false).unwrap();
    let dfx = DfxOptions {
        swimlane: 4,
        pmu: 2,
        dep_gen: true,
        dump_args: 2,
        scope_stats: true,
        ..DfxOptions::default()
    };
    let write = WriteOptions { files: true, traces: true, chrome: false, progress: None };
    let target = ProfileTarget::in_run_dir(&mut rd, None, "faults", write).unwrap();
    let done = run_profiled(&mut runner, &dfx, 0, Some(target), |r| {
        let p = r.prepare(0, args.clone())?;
        let host = p.host_orchestration().cloned();
        let l = r.launch(p)?;
        Ok::<_, RunError>((r.finalize_run(l)?, host))
    })
    .unwrap();
    let err = done.run.unwrap_err();
    assert!(
        matches!(
            err,
            RunError::Fault(DeviceFault::Kernel { task: 1, fault: KernelFault::Shape { .. }, .. })
        ),
        "{err:?}"
    );
    let profile = done.profile.unwrap().expect("DFX on");
    // The model (and so the traces written from it) marks the task whose kernel failed, named.
    let failed = profile.model.meta.failed.clone().expect("the failed task is marked");
    assert_eq!(failed.id, 1, "{failed:?}");
    assert!(!failed.kernel.starts_with("id "), "the kernel is named: {failed:?}");
    assert!(
        rd.fail_at(&err.to_string(), Some(failed.clone())).unwrap(),
        "a written profile is committed"
    );

    let m = Manifest::verified(&dir).unwrap();
    assert_eq!(m.outcome, Some(RunOutcome::Failed { error: err.to_string(), task: Some(failed) }));
    let written: Vec<String> = profile
        .report
        .files
        .iter()
        .map(|f| f.path.strip_prefix(&dir).unwrap().display().to_string())
        .collect();
    for f in [SWIMLANE_FILE, PMU_FILE, DEPS_FILE, PERFETTO_FILE] {
        assert!(written.iter().any(|w| w == f), "{f} not in {written:?}");
    }
    for f in &written {
        m.verify(&dir, f).unwrap();
    }
    for (what, needs) in [
        ("report", Needs::REPORT),
        ("trace", Needs::TRACE),
        ("deps", Needs::DEPS),
        ("dump", Needs::DUMP),
        ("scopes", Needs::SCOPES),
    ] {
        let r = open_run(&dir, &needs).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(r.failure(), Some(err.to_string().as_str()), "{what}");
        assert_eq!(r.skipped, 0, "{what}: {:?}", r.warnings);
    }
    // The task that ran before the fault is in the profile.
    let r = open_run(&dir, &Needs::REPORT).unwrap();
    assert!(!r.run.tasks().is_empty(), "the first task's rows");
    let rep = ferry_profile::analysis::report_opened(&r);
    assert!(rep.text(None).contains("the run failed"), "{}", rep.text(None));
    runner.finalize().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A vector run with all five subsystems (every payload dumped) into `dir`, writing `write`
/// beside the native profile; its profile and the manifest's files.
fn profiled_vector(
    dir: &std::path::Path,
    write: WriteOptions<'_>,
) -> (ferry_runtime::host::profile::WrittenProfile, Vec<String>) {
    let mut runner = DeviceRunner::new(RunnerConfig::small(ferry_sim::Arch::A2a3)).unwrap();
    let run = Example::Vector.build(Size::Small);
    runner.register_callable(0, run.callable.clone()).unwrap();
    let mut rd = claim_run_dir(dir, runner.config(), &["test".into()], true).unwrap();
    let dfx = DfxOptions {
        swimlane: 4,
        pmu: 2,
        dep_gen: true,
        dump_args: 2,
        scope_stats: true,
        ..DfxOptions::default()
    };
    let target = ProfileTarget::in_run_dir(&mut rd, None, "vector", write).unwrap();
    let done = run_profiled(&mut runner, &dfx, run.args.scratch_bytes, Some(target), |r| {
        let p = r.prepare(0, run.args.clone()).map_err(|e| e.to_string())?;
        let l = r.launch(p).map_err(|e| e.to_string())?;
        Ok::<_, String>((r.finalize_run(l).map_err(|e| e.to_string())?, None))
    })
    .unwrap();
    let output = done.run.unwrap();
    let p = done.profile.unwrap().expect("DFX on");
    let mut summary = run_summary(runner.config(), Variant::DeviceOrchestrated);
    let checksum = run.verify(&output).unwrap();
    summary.runs.push(example_summary(Example::Vector, &output, checksum, None));
    rd.finish(&summary, &[]).unwrap();
    runner.finalize().unwrap();
    let listed = Manifest::verified(dir).unwrap().files.into_iter().map(|e| e.path).collect();
    (p, listed)
}

/// The native profile holds the run: rebuilt from it alone ([`NativeReader`]), the model is the
/// one the run collected, the ArgsDump payloads copied while the run ran included; an analysis
/// rebuilds only the subsystems it needs. Written alone (the default output), the collectors
/// keep no record, the run's model is its loss accounting, and every analysis reads the native
/// profile.
#[test]
fn the_native_profile_alone_reads_as_the_collected_model_part_by_part() {
    use ferry_profile::{open_run_with, read_native, NativeDecoder, Need, Subsystem};
    use ferry_runtime::host::profile::NativeReader;
    let _bound = ferry_watchdog::bound("the profiled runs on the simulated chip");
    let dir = std::env::temp_dir().join(format!("ferry-native-only-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // With the original formats: the model collected in memory, against the native profile's.
    let (p, _) = profiled_vector(&dir, WriteOptions { files: true, ..WriteOptions::default() });
    let rec = read_native(&dir).unwrap().recording;
    let all = NativeReader.decode(&rec, &Needs::REPORT).unwrap().models.remove(0);
    assert_eq!(all.swimlane, p.model.swimlane);
    assert_eq!(all.pmu, p.model.pmu);
    assert_eq!(all.deps, p.model.deps);
    assert_eq!(all.scopes, p.model.scopes);
    assert_eq!(all.loss, p.model.loss);
    // The payloads, byte for byte.
    let dump = NativeReader.decode(&rec, &Needs::DUMP).unwrap().models.remove(0).args.unwrap();
    let want = p.model.args.as_ref().unwrap();
    let (got, want_args): (Vec<_>, Vec<_>) =
        (dump.in_export_order().collect(), want.in_export_order().collect());
    assert_eq!(got, want_args);
    assert!(got.iter().any(|a| dump.payload(a).is_some()), "level 2 dumps payloads");
    for a in &got {
        assert_eq!(dump.payload(a), want.payload(a), "{a:?}");
    }
    // Only what an analysis needs: the others are not rebuilt, their loss lines left out.
    let deps = NativeReader.decode(&rec, &Needs::DEPS).unwrap().models.remove(0);
    assert!(deps.deps.is_some() && deps.swimlane.is_some());
    assert!(deps.pmu.is_none() && deps.args.is_none() && deps.scopes.is_none());
    let subsystems: std::collections::BTreeSet<_> =
        deps.loss.lanes.iter().filter_map(|l| l.subsystem).collect();
    assert_eq!(subsystems, [Subsystem::ChipSwimlane, Subsystem::DepGen].into());
    let scopes_only = Needs { scopes: Need::Required, ..Needs::default() };
    let s = NativeReader.decode(&rec, &scopes_only).unwrap().models.remove(0);
    assert!(s.scopes.is_some() && s.swimlane.is_none() && s.deps.is_none() && s.args.is_none());

    // The native profile alone.
    let none = WriteOptions { files: false, traces: false, chrome: false, progress: None };
    let (p, listed) = profiled_vector(&dir, none);
    assert!(p.report.files.is_empty(), "no original file: {:?}", p.report.files);
    let native = p.native.clone().expect("the native profile");
    assert!(native.sealed.chunks > 0 && native.path == dir.join("profile.ferry"));
    assert!(listed.contains(&"profile.ferry".to_string()), "{listed:?}");
    assert!(!listed.iter().any(|f| f == SWIMLANE_FILE || f == DEPS_FILE), "{listed:?}");
    // The run's model: its loss accounting, no row.
    assert!(p.model.swimlane.is_none() && p.model.deps.is_none() && p.model.args.is_none());
    assert!(p.model.loss.reconciles() && !p.model.loss.lanes.is_empty());
    let read = open_run_with(&dir, &Needs::REPORT, &NativeReader).unwrap();
    assert!(read.is_verified() && read.warnings.is_empty(), "{:?}", read.warnings);
    assert_eq!(read.run.loss.totals(), p.model.loss.totals());
    assert!(!read.run.tasks().is_empty());
    let dump = open_run_with(&dir, &Needs::DUMP, &NativeReader).unwrap().run.args.unwrap();
    assert!(dump.in_export_order().any(|a| dump.payload(&a).is_some()), "payloads recorded");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A session over several runs recorded into its native profile alone: each run's loss
/// accounting reconciles from the counts the collectors kept (every subsystem, the argument
/// dump's lanes included), and the session reads back run by run.
#[test]
fn a_session_recorded_alone_accounts_for_every_run() {
    use ferry_profile::{open_any, Opened};
    use ferry_runtime::host::profile::NativeReader;
    let _bound = ferry_watchdog::bound("the profiled runs on the simulated chip");
    let dir = std::env::temp_dir().join(format!("ferry-native-session-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut runner = DeviceRunner::new(RunnerConfig::small(ferry_sim::Arch::A2a3)).unwrap();
    let run = Example::Vector.build(Size::Small);
    runner.register_callable(0, run.callable.clone()).unwrap();
    let mut rd = claim_run_dir(&dir, runner.config(), &["test".into()], false).unwrap();
    let dfx = DfxOptions {
        swimlane: 4,
        pmu: 2,
        dep_gen: true,
        dump_args: 2,
        scope_stats: true,
        ..DfxOptions::default()
    };
    let none = WriteOptions { files: false, traces: false, chrome: false, progress: None };
    let target = ProfileTarget::in_run_dir(&mut rd, None, "vector", none).unwrap();
    let done = run_profiled(&mut runner, &dfx, run.args.scratch_bytes, Some(target), |r| {
        for _ in 0..3 {
            let p = r.prepare(0, run.args.clone()).map_err(|e| e.to_string())?;
            let l = r.launch(p).map_err(|e| e.to_string())?;
            r.finalize_run(l).map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(((), None))
    })
    .unwrap();
    done.run.unwrap();
    let p = done.profile.unwrap().expect("DFX on");
    assert_eq!(p.runs.len(), 3);
    for (k, r) in p.runs.iter().enumerate() {
        assert_eq!(r.dir, dir.join(RunLabel::dir_name(k as u32)));
        assert!(r.model.loss.reconciles(), "run {k}");
        let args = r.model.loss.lanes.iter().filter(|l| l.lane.starts_with("args "));
        assert!(args.map(|l| l.collected).sum::<u64>() > 0, "run {k}: its dump's words");
    }
    let mut summary = run_summary(runner.config(), Variant::DeviceOrchestrated);
    summary.runs.clear();
    rd.finish(&summary, &[]).unwrap();
    match open_any(&dir, &Needs::REPORT, &NativeReader).unwrap() {
        Opened::Session(runs, opened) => {
            assert_eq!((runs.runs.len(), opened.len()), (3, 3));
            for (k, (o, w)) in opened.iter().zip(&p.runs).enumerate() {
                assert_eq!(o.run.loss.totals(), w.model.loss.totals(), "run {k}");
                assert!(!o.run.tasks().is_empty(), "run {k}");
            }
        }
        Opened::Run(_) => panic!("a session of three runs read as one"),
    }
    runner.finalize().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
