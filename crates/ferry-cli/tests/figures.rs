//! `ferry figures` renders the figures page from `ferry bench all --json` outputs; bad input is
//! one clear error.
use std::process::Command;

fn ferry(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

#[test]
fn figures_gives_each_figure_as_the_range_over_the_invocations() {
    let _bound = ferry_watchdog::bound("the ferry binary");
    let dir = tempfile_dir("figures-range");
    let run = |x: f64, y: f64| {
        serde_json::json!({
            "date": "2026-12-06 08:00", "quick": false,
            "machine": {"cpus": 2, "cpu_model": "test cpu", "loadavg_before": [0.5], "loadavg_after": [1.0]},
            "build": {"profile": "release", "commit": "0123456789abcdef"},
            "areas": {"sim": {"idle_waiting_cpu_pct_of_core": x, "contention": {"beside_all": {"wall_vs_alone": y}}}}
        })
        .to_string()
    };
    std::fs::write(dir.join("1.json"), run(0.45, 1.22)).unwrap();
    std::fs::write(dir.join("2.json"), run(0.52, 1.25)).unwrap();
    let (a, b) = (dir.join("1.json"), dir.join("2.json"));
    let out = ferry(&["figures", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = String::from_utf8(out.stdout).unwrap();
    let row = |what: &str| {
        page.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no row {what}:\n{page}"))
            .to_string()
    };
    assert!(row("awaiting a dispatch").contains("**0.45 % – 0.52 %**"), "{page}");
    assert!(row("one busy loop per CPU").contains("**1.22x – 1.25x**"), "{page}");
    assert!(
        row("`1.json`").contains("test cpu") && row("`1.json`").contains("`0123456789`"),
        "{page}"
    );
    // The same page through -o.
    let md = dir.join("figures.md");
    let out =
        ferry(&["figures", a.to_str().unwrap(), b.to_str().unwrap(), "-o", md.to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&md).unwrap().trim_end(), page.trim_end());
}

#[test]
fn figures_refuses_a_file_that_is_not_a_bench_all_output() {
    let _bound = ferry_watchdog::bound("the ferry binary");
    let dir = tempfile_dir("figures-bad");
    let f = dir.join("x.json");
    std::fs::write(&f, r#"{"area": "sim"}"#).unwrap();
    let out = ferry(&["figures", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("x.json") && err.contains("areas"), "{err}");
    let out = ferry(&["bench", "sim", "-o", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only for `ferry bench all`"));
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
