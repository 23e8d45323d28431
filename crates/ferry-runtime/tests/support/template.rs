//! Builds the kernel libraries the tests load with cargo, once per test binary each, offline,
//! into `target/tmp/<name>` (shared by every test binary that uses it, so the suite builds each
//! tiny crate once), bounded to 300 s: the templates (`examples/kernel-template`,
//! `examples/orchestration-template`), the decode step (`examples/decode`), the misbehaving
//! kernels (`crates/ferry-runtime/tests/fixtures/faulty-kernels`) and an AICPU program of another
//! launch ABI (`crates/ferry-runtime/tests/fixtures/skewed-aicpu-program`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Builds the template once per test binary and returns its shared object.
pub(crate) fn template_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        build("examples/kernel-template", "kernel-template", "libferry_kernel_template.so")
    })
}

/// Builds the orchestration template (`examples/orchestration-template`) once per test binary
/// and returns its shared object.
pub(crate) fn orch_template_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        build(
            "examples/orchestration-template",
            "orchestration-template",
            "libferry_orchestration_template.so",
        )
    })
}

/// Builds the decode step (`examples/decode`) once per test binary and returns its shared
/// object.
pub(crate) fn decode_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build("examples/decode", "decode", "libferry_decode.so"))
}

/// Builds the orchestration fixtures (`tests/fixtures/orch-fixtures`) once per test binary and
/// returns their shared object.
pub(crate) fn orch_fixtures_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        build(
            "crates/ferry-runtime/tests/fixtures/orch-fixtures",
            "orch-fixtures",
            "libferry_orch_fixtures.so",
        )
    })
}

/// Builds the faulty kernels (`hang`: a kernel that never returns) once per test binary and
/// returns their shared object.
pub(crate) fn faulty_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        build(
            "crates/ferry-runtime/tests/fixtures/faulty-kernels",
            "faulty-kernels",
            "libferry_faulty_kernels.so",
        )
    })
}

/// Builds the AICPU program built as if against the next launch ABI
/// (`crates/ferry-runtime/tests/fixtures/skewed-aicpu-program`) once per test binary and
/// returns its shared object.
pub(crate) fn skewed_aicpu_program() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        build(
            "crates/ferry-runtime/tests/fixtures/skewed-aicpu-program",
            "skewed-aicpu-program",
            "libferry_skewed_aicpu_program.so",
        )
    })
}

/// Builds the crate at `dir` (relative to the repository) into `target/tmp/<target>`.
fn build(dir: &str, target: &str, so: &str) -> PathBuf {
    // Both users live in `crates/<crate>/`.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest = root.join(dir).join("Cargo.toml");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join(target);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut child = Command::new(cargo)
        .args(["build", "--release", "--offline", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        // The outer build's flags (e.g. loom's cfg) are not the library's.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .spawn()
        .expect("spawn cargo");
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for cargo") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("building {dir} took more than 300 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "cargo build of {dir} failed: {status}");
    let so = target.join("release").join(so);
    assert!(so.is_file(), "{} missing", so.display());
    so
}
