//! The watchdog turns a hang into a failure naming the test: a child test process that blocks
//! for good under a one-second bound is aborted, and its stderr names the test and the wait.

use std::process::Command;
use std::time::Duration;

const CHILD: &str = "FERRY_WATCHDOG_TEST_CHILD";

/// Blocks for good under a one-second bound when run as the child of the test below; a no-op
/// otherwise.
#[test]
fn child_that_hangs() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let _bound = ferry_watchdog::bound_for("a reply nobody sends", Duration::from_secs(1));
    let (_tx, rx) = std::sync::mpsc::channel::<()>();
    let _ = rx.recv();
    unreachable!("the channel's sender is alive: recv never returns");
}

/// A helper's narrower bound inside the test's own: the test's (earlier) deadline expires, and
/// the message names the helper's wait.
#[test]
fn child_that_hangs_in_a_helper() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let _test = ferry_watchdog::bound_for("the matrix", Duration::from_secs(1));
    let _case = ferry_watchdog::bound_for("case 3 of the matrix", Duration::from_secs(600));
    let (_tx, rx) = std::sync::mpsc::channel::<()>();
    let _ = rx.recv();
    unreachable!("the channel's sender is alive: recv never returns");
}

/// Runs `test` of this binary as a child process and returns its failure's stderr.
fn run_child(test: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--test-threads", "1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "the hung child exited successfully: {stderr}");
    stderr
}

#[test]
fn a_hang_aborts_the_test_process_naming_the_test_and_the_wait() {
    let stderr = run_child("child_that_hangs");
    assert!(
        stderr.contains("test `child_that_hangs` hung waiting for a reply nobody sends"),
        "{stderr}"
    );
}

#[test]
fn a_hang_names_the_innermost_wait() {
    let stderr = run_child("child_that_hangs_in_a_helper");
    assert!(
        stderr
            .contains("test `child_that_hangs_in_a_helper` hung waiting for case 3 of the matrix"),
        "{stderr}"
    );
}

#[test]
fn a_test_that_finishes_drops_its_bound_without_a_trace() {
    let bound = ferry_watchdog::bound_for("a thread's reply", Duration::from_secs(1));
    let t = std::thread::spawn(|| 7);
    bound.waiting_for("the thread to exit");
    assert_eq!(t.join().unwrap(), 7);
    drop(bound);
    // The monitor would abort this process had the dropped bound stayed armed; outlive it.
    // (Not a timing assertion: sleeping longer only makes the check stronger.)
    std::thread::sleep(Duration::from_millis(1500));
}

#[test]
fn the_bound_comes_from_the_environment_when_set() {
    // Only reads the variable; the harness may run tests in parallel, so nothing sets it here.
    let b = ferry_watchdog::configured_bound();
    match std::env::var(ferry_watchdog::BOUND_ENV).ok().and_then(|v| v.parse::<u64>().ok()) {
        Some(s) if s > 0 => assert_eq!(b, Duration::from_secs(s)),
        _ => assert_eq!(b, ferry_watchdog::DEFAULT_BOUND),
    }
}

/// Grows its memory for good under a 64 MiB memory bound when run as the child of the test
/// below; a no-op otherwise.
#[test]
fn child_that_grows() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let _bound = ferry_watchdog::bound_with_memory("a model that never ends", 64 << 20);
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        // Touched, so the pages are resident.
        hoard.push(vec![1u8; 4 << 20]);
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_wait_that_grows_past_its_memory_bound_aborts_naming_the_test() {
    if ferry_watchdog::resident_bytes().is_none() {
        return; // no /proc: only the time bound applies
    }
    let stderr = run_child("child_that_grows");
    assert!(
        stderr.contains(
            "test `child_that_grows` hung waiting for a model that never ends: the \
             process grew to"
        ),
        "{stderr}"
    );
}
