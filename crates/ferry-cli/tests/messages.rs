//! `ferry run`'s messages for bad options name the option and the valid range.
use std::process::Command;

fn stderr_of(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(!o.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn aicpu_threads_out_of_range_give_the_range_that_works() {
    let _bound = ferry_watchdog::bound("the ferry process");
    for n in ["1", "1000"] {
        let e = stderr_of(&["run", "--small", "--aicpu-threads", n], &[]);
        assert!(e.contains(&format!("{n} AICPU threads")), "{e}");
        assert!(e.contains("takes 2..=4"), "{n}: {e}");
        let e = stderr_of(&["run", "--small", "--arch", "a5", "--aicpu-threads", n], &[]);
        assert!(e.contains("takes 2..=5"), "{n}: {e}");
    }
}

#[test]
fn a_negative_drop_wait_is_an_invalid_value_not_an_unknown_flag() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let e = stderr_of(&["run", "--dfx-drop-wait", "-1"], &[]);
    assert!(e.contains("invalid value '-1'") && e.contains("--dfx-drop-wait"), "{e}");
}

#[test]
fn a_bad_log_filter_names_the_option() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let e = stderr_of(&["--log", "x=[", "info"], &[]);
    assert!(e.contains("--log / FERRY_LOG `x=[`"), "{e}");
    let e = stderr_of(&["info"], &[("FERRY_LOG", "x=[")]);
    assert!(e.contains("--log / FERRY_LOG `x=[`"), "{e}");
}
