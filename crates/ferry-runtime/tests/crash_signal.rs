//! A SIGINT or SIGTERM that lands just before a run arms its crash guard: the `ferry` command's
//! signal thread finds no guard ([`end_by_signal`] returns `false`), the run arms one, and the
//! signal thread's `exit(128 + sig)` must still end the process with that status, not be taken
//! for a kernel's `exit()` ([`EXIT_DURING_RUN`]). The sequence runs in a child process (this
//! test binary again), one step after the other on one thread, so it does not depend on timing.
use std::process::Command;

use ferry_runtime::host::crash::{end_by_signal, CrashGuard, EXIT_DURING_RUN};

const CHILD_ENV: &str = "FERRY_TEST_CRASH_SIGNAL_CHILD";

#[test]
fn a_signal_exit_after_a_guard_armed_late_keeps_its_status() {
    if std::env::var_os(CHILD_ENV).is_some() {
        assert!(!end_by_signal(libc::SIGINT), "no guard armed yet");
        let _guard = CrashGuard::arm(None, [(1, "k".to_string())], "").unwrap();
        std::process::exit(128 + libc::SIGINT);
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_signal_exit_after_a_guard_armed_late_keeps_its_status"])
        .arg("--nocapture")
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(EXIT_DURING_RUN), "taken for a kernel's exit: {stderr}");
    assert_eq!(out.status.code(), Some(128 + libc::SIGINT), "{stderr}");
    assert!(!stderr.contains("the run was ended"), "{stderr}");
}

/// The control: a thread that is not ending by a signal and calls `exit()` while a guard is
/// armed is a kernel's exit, recorded and turned into [`EXIT_DURING_RUN`].
#[test]
fn an_exit_while_armed_is_a_kernels() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let _guard = CrashGuard::arm(None, [(1, "k".to_string())], "").unwrap();
        std::process::exit(0);
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "an_exit_while_armed_is_a_kernels", "--nocapture"])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_DURING_RUN), "{stderr}");
    assert!(stderr.contains("the run was ended: exit(0)"), "{stderr}");
}
