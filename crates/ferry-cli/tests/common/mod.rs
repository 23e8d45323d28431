//! What the tests that need tools outside Rust share: running `ferry`, and finding the tools
//! (Python with the `perfetto` package, Node with `playwright-core`, Chromium). A test whose tool
//! is missing prints why and passes, unless `FERRY_REQUIRE_TEST_TOOLS=1` (set by `.ci/run`,
//! which installs them), where a missing tool fails the test.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `ferry` binary under test.
pub fn ferry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
}

/// Runs `ferry args…`; panics with its output when it fails.
pub fn ferry_ok(args: &[&str]) -> Output {
    let out = ferry().args(args).output().expect("spawning ferry");
    assert!(
        out.status.success(),
        "ferry {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The repository's `tools/` folder.
pub fn tools() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools")
}

/// A fresh scratch directory for one test (removed first if left over).
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `Some(())` when the tools are there; otherwise prints `why` and returns `None`, or panics
/// when `FERRY_REQUIRE_TEST_TOOLS=1`.
pub fn need(ok: bool, test: &str, why: &str) -> Option<()> {
    if ok {
        return Some(());
    }
    if std::env::var("FERRY_REQUIRE_TEST_TOOLS").is_ok_and(|v| v == "1") {
        panic!("{test}: {why} (FERRY_REQUIRE_TEST_TOOLS=1: the tools must be installed)");
    }
    println!("{test}: SKIPPED: {why}");
    eprintln!("{test}: SKIPPED: {why}");
    None
}

/// Whether `cmd args…` runs and exits 0.
pub fn runs(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd).args(args).output().is_ok_and(|o| o.status.success())
}

/// The Chromium to drive: `$FERRY_CHROMIUM` or `/usr/bin/chromium`, when it exists.
pub fn chromium() -> Option<PathBuf> {
    let p = std::env::var_os("FERRY_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    p.is_file().then_some(p)
}

/// Why the browser tests cannot run here (`None`: they can).
pub fn browser_missing() -> Option<String> {
    if chromium().is_none() {
        return Some(
            "no Chromium at /usr/bin/chromium or $FERRY_CHROMIUM (apt-get install chromium)".into(),
        );
    }
    if !runs("node", &["--version"]) {
        return Some("no node on PATH".into());
    }
    if !tools().join("browser/node_modules/playwright-core").is_dir() {
        return Some(
            "tools/browser has no node_modules/playwright-core (npm ci --prefix tools/browser)"
                .into(),
        );
    }
    None
}

/// Builds the C++ decode step (`examples/decode-cpp`) with `make` and the system C++ compiler
/// alone (no cargo on the PATH) into `dir`, and returns its shared object; `None` (the test
/// skipped, saying why) where `c++` or `make` does not run.
pub fn make_decode_cpp(test: &str, dir: &Path) -> Option<PathBuf> {
    let tools = runs("c++", &["--version"]) && runs("make", &["--version"]);
    need(tools, test, "the system C++ compiler `c++` or `make` does not run")?;
    std::fs::create_dir_all(dir).unwrap();
    let lib = dir.join("libferry_decode_cpp.so");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/decode-cpp");
    let o = Command::new("make")
        .arg("-B")
        .arg("-C")
        .arg(&src)
        .arg(format!("LIB={}", lib.display()))
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .expect("spawning make");
    assert!(
        o.status.success(),
        "make could not build examples/decode-cpp:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(lib.is_file(), "{} missing", lib.display());
    Some(lib)
}

/// The original-format files of every DFX subsystem and the Perfetto trace, as `ferry export`
/// writes them from a run's native profile.
pub const ORIGINAL_FILES: [&str; 5] =
    ["deps.json", "pmu.csv", "scope_stats", "args_dump", "trace.perfetto-trace"];

/// Checks that the run in `out` (all five subsystems, the default output) wrote its native
/// profile alone, and that `ferry export` writes every subsystem's original files from it into
/// `out`'s sibling `<out>-export`; returns that directory.
pub fn export_every_subsystem(out: &Path) -> PathBuf {
    assert!(out.join("profile.ferry").is_file(), "{}: no native profile", out.display());
    for f in ORIGINAL_FILES {
        assert!(!out.join(f).exists(), "{}: {f} without --original-formats", out.display());
    }
    let mut name = out.file_name().unwrap().to_os_string();
    name.push("-export");
    let exported = out.with_file_name(name);
    ferry_ok(&["export", out.to_str().unwrap(), "-o", exported.to_str().unwrap()]);
    for f in ORIGINAL_FILES {
        assert!(exported.join(f).exists(), "{}: no {f} exported", out.display());
    }
    exported
}

/// Checks that the run in `out`, made with `--original-formats`, wrote every subsystem's
/// original files beside its native profile, and that `ferry export` of that profile into
/// `out`'s sibling `<out>-export` writes the same files, byte for byte.
pub fn export_matches_the_run_flag(out: &Path) {
    assert!(out.join("profile.ferry").is_file(), "{}: no native profile", out.display());
    let mut name = out.file_name().unwrap().to_os_string();
    name.push("-export");
    let exported = out.with_file_name(name);
    ferry_ok(&["export", out.to_str().unwrap(), "-o", exported.to_str().unwrap()]);
    fn same(a: &Path, b: &Path) {
        if a.is_dir() {
            let mut names: Vec<_> =
                std::fs::read_dir(a).unwrap().map(|e| e.unwrap().file_name()).collect();
            names.sort();
            for n in names {
                same(&a.join(&n), &b.join(&n));
            }
        } else {
            let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b));
            let y = y.unwrap_or_else(|e| panic!("{}: {e}", b.display()));
            assert!(
                x == y,
                "{} differs from the run's ({} vs {} bytes)",
                b.display(),
                y.len(),
                x.len()
            );
        }
    }
    for f in ORIGINAL_FILES {
        assert!(out.join(f).exists(), "{}: no {f} with --original-formats", out.display());
        same(&out.join(f), &exported.join(f));
    }
}
