//! A runner refuses a configuration it cannot run with a typed [`ConfigError`] naming the
//! setting, before it starts anything on the device: AICPU threads outside `2..=max`, a zero
//! task window, launch slots outside `1..=MAX_LAUNCH_SLOTS`, and a device of another arch.
use ferry_runtime::host::{DeviceRunner, RunnerConfig, MAX_LAUNCH_SLOTS};
use ferry_runtime::{ConfigError, RunnerError};
use ferry_sim::{Arch, PlatformBuilder};

fn refusal(cfg: RunnerConfig) -> ConfigError {
    match DeviceRunner::new(cfg) {
        Err(RunnerError::Config(e)) => e,
        Err(e) => panic!("expected a configuration error, got {e}"),
        Ok(_) => panic!("the runner accepted the configuration"),
    }
}

#[test]
fn aicpu_threads_outside_two_to_the_arch_max_are_refused() {
    let _bound = ferry_watchdog::bound("refused runner configurations");
    let max = Arch::A2a3.profile().max_aicpu_threads;
    for threads in [0, 1, max + 1] {
        let cfg = RunnerConfig { aicpu_threads: threads, ..RunnerConfig::small(Arch::A2a3) };
        assert!(
            matches!(
                refusal(cfg),
                ConfigError::AicpuThreads { threads: t, arch: Arch::A2a3, max: m }
                    if t == threads && m == max
            ),
            "{threads} AICPU threads"
        );
    }
}

#[test]
fn a_zero_task_window_is_refused() {
    let _bound = ferry_watchdog::bound("refused runner configurations");
    let cfg = RunnerConfig { task_window: 0, ..RunnerConfig::small(Arch::A5) };
    assert!(matches!(refusal(cfg), ConfigError::ZeroTaskWindow));
}

#[test]
fn launch_slots_outside_one_to_the_max_are_refused() {
    let _bound = ferry_watchdog::bound("refused runner configurations");
    for slots in [0, MAX_LAUNCH_SLOTS + 1] {
        let cfg = RunnerConfig { launch_slots: slots, ..RunnerConfig::small(Arch::A5) };
        assert!(
            matches!(
                refusal(cfg),
                ConfigError::LaunchSlots { slots: s, max: MAX_LAUNCH_SLOTS } if s == slots
            ),
            "{slots} launch slots"
        );
    }
}

#[test]
fn a_device_of_another_arch_is_refused() {
    let _bound = ferry_watchdog::bound("refused runner configurations");
    let p = PlatformBuilder::new(Arch::A5).hbm_bytes(16 << 20).build().unwrap();
    let device = p.device(0).unwrap().clone();
    match DeviceRunner::init(device, RunnerConfig::small(Arch::A2a3)) {
        Err(RunnerError::Config(ConfigError::ArchMismatch { device, configured })) => {
            assert_eq!((device, configured), (Arch::A5, Arch::A2a3));
        }
        Err(e) => panic!("expected an arch mismatch, got {e}"),
        Ok(_) => panic!("a runner for a2a3 started on an a5 device"),
    }
}
