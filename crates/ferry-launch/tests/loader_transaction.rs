//! The loaded AICPU program as the AICPU entry of a launch transaction: the published run's
//! front-less `KernelArgs` reach the real device program by value.
use ferry_abi::launch::KernelArgs;
use ferry_launch::loader::Loader;
use ferry_launch::{EntryKernels, LaunchDescriptor, LaunchStaging, RunStreams};
use ferry_programs::AICPU_DEVICE_ORCHESTRATED;
use ferry_sim::cores::{Chip, CoreConfig};
use ferry_sim::{Arch, PlatformBuilder};
use std::time::Duration;

#[test]
fn a_published_run_execs_the_loaded_program_with_its_kernel_args() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    let root = std::env::temp_dir().join(format!("ferry-loader-tx-{}", std::process::id()));
    let p =
        PlatformBuilder::new(Arch::A2a3).hbm_bytes(64 << 20).device_root(&root).build().unwrap();
    let dev = p.device(0).unwrap();
    let chip = Chip::new(dev.clone(), CoreConfig { aicpu_threads: 2, aic: 1, aiv: 2 }).unwrap();
    let loader = Loader::new(&chip).unwrap();
    let program = loader.load(&AICPU_DEVICE_ORCHESTRATED).unwrap();

    let streams = RunStreams::new(dev).unwrap();
    let mut slot = LaunchStaging::new(dev, 0);
    let desc = LaunchDescriptor::new(vec![3u8; 4096], 1024).unwrap();
    let regs = chip.window(0).base().0;
    slot.prepare_runtime_args(&desc, KernelArgs::new(0, regs)).unwrap();
    let exec = program.aicpu_entry(2);
    let aicpu = move |d: &_, a| exec(d, a).map_err(|e| e.to_string());
    slot.launch(&streams, EntryKernels::new(|_, _| Ok(()), aicpu)).unwrap();
    slot.finish_run(Duration::from_secs(30)).unwrap();

    let report = program.report().unwrap();
    assert_eq!(report.exec_calls, 2);
    let seen = report.last_exec_args().unwrap();
    // runtime_args (offset 0) is the slot's device destination, regs (offset 8) what we passed.
    assert_eq!(seen.runtime_args, slot.destination().unwrap().0);
    assert_eq!(seen.regs, regs);
    assert_eq!(&report.last_exec_blob[8..16], &regs.to_le_bytes());
    slot.teardown().unwrap();
    drop((program, loader));
    let _ = std::fs::remove_dir_all(&root);
}
