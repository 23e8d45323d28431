//! `run_profiled`: one DFX session over several runs, and a failed run's profile.
use ferry_profile::{OutDir, WriteOptions, SWIMLANE_FILE};
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::dfx::DfxOptions;
use ferry_runtime::host::profile::{run_profiled, ProfileTarget};
use ferry_runtime::host::{DeviceRunner, RunnerConfig};

#[test]
fn one_session_spans_every_run_the_closure_launches_and_a_failure_keeps_the_profile() {
    let _bound = ferry_watchdog::bound("the profiled runs on the simulated chip");
    let dir = std::env::temp_dir().join(format!("ferry-run-profiled-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut runner = DeviceRunner::new(RunnerConfig::small(ferry_sim::Arch::A2a3)).unwrap();
    let run = Example::Vector.build(Size::Small);
    runner.register_callable(0, run.callable.clone()).unwrap();
    let dfx = DfxOptions { swimlane: 1, ..DfxOptions::default() };
    let mut rows = Vec::new();
    for launches in [1u32, 3] {
        let mut out = OutDir::claim(&dir, &[]).unwrap();
        out.begin("t", &["test".into()], "a2a3", &[]).unwrap();
        let target = ProfileTarget {
            out: &mut out,
            dir: dir.clone(),
            case: "vector".into(),
            write: WriteOptions::default(),
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
        rows.push(p.model.swimlane.unwrap().aicore_tasks.len());
        out.commit().unwrap();
    }
    // Three launches in one session: three times the rows of one.
    assert_eq!(rows[1], 3 * rows[0], "{rows:?}");
    runner.finalize().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
