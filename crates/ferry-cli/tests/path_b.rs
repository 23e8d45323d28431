//! `ferry info` names the device profile and the device clock's source; `ferry diagnose handshake` prints each core's
//! `aicore_done` as the AICPU saw it and as memory holds it; `ferry run` reaches Path B with a
//! fix.
use std::process::Command;

fn ferry(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ferry")).args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    (o.status.success(), text)
}

#[test]
fn path_b_info_names_the_device_profile() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let (ok, out) = ferry(&["info"]);
    assert!(ok, "{out}");
    assert!(out.contains("profile: vendor (Path A latch on"), "{out}");
    let (ok, out) = ferry(&["info", "--profile", "relaxed", "--json"]);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["devices"][0]["profile"], "relaxed");
    assert_eq!(v["devices"][0]["path_a_latch"], false);
    let (ok, out) = ferry(&["info", "--profile", "lenient"]);
    assert!(!ok && out.contains("unknown device profile `lenient`"), "{out}");
}

#[test]
fn info_names_the_device_clock_and_ferry_device_clock_picks_it() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let source = |env: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
        c.args(["info", "--json"]);
        match env {
            Some(v) => c.env("FERRY_DEVICE_CLOCK", v),
            None => c.env_remove("FERRY_DEVICE_CLOCK"),
        };
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (v["devices"][0]["clock_source"].as_str().unwrap().to_string(), o.stderr)
    };
    // The TSC exactly where the host kernel keeps time with it.
    let kernel_tsc = cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc");
    let auto = if kernel_tsc { "tsc" } else { "monotonic" };
    assert_eq!(source(None).0, auto);
    assert_eq!(source(Some("auto")).0, auto);
    assert_eq!(source(Some("monotonic")).0, "monotonic");
    // A value it does not know is named on stderr, and the default kept.
    let (s, err) = source(Some("hpet"));
    assert_eq!(s, auto);
    let err = String::from_utf8_lossy(&err);
    assert!(err.contains("FERRY_DEVICE_CLOCK=\"hpet\""), "{err}");
}

#[test]
fn path_b_diagnose_handshake_prints_what_the_aicpu_saw_and_memory_holds() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let (ok, out) = ferry(&["diagnose", "handshake", "--json"]);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["profile"], "vendor");
    let cores = v["cores"].as_array().unwrap();
    assert_eq!(cores.len(), 6);
    for (i, c) in cores.iter().enumerate() {
        assert_eq!(c["aicore_done_aicpu"], i + 1, "{c}");
        assert_eq!(c["aicore_done_memory"], i + 1, "{c}");
    }
    let (ok, out) = ferry(&[
        "diagnose",
        "handshake",
        "--method",
        "path-b",
        "--handshake-timeout-ms",
        "300",
        "--aicore-latency-ms",
        "40",
        "--aic",
        "4",
        "--aiv",
        "8",
    ]);
    assert!(ok, "{out}");
    assert!(out.contains("timed out") && out.contains("STALE"), "{out}");
    assert!(!out.contains(" seen\n"), "every core stale: {out}");
    assert!(out.contains("aicpu saw") && out.contains("memory holds"), "{out}");
}

#[test]
fn path_b_run_completes_with_fix_c_and_names_the_device() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let (ok, out) =
        ferry(&["run", "--small", "--example", "vector", "--method", "path-b", "--fixes", "c"]);
    assert!(ok, "{out}");
    assert!(out.contains("path b, custom scheduler") && out.contains("Path B fixes: c"), "{out}");
    let (ok, out) = ferry(&["run", "--small", "--fixes", "d"]);
    assert!(!ok && out.contains("`d` is not a Path B fix"), "{out}");
}
