//! Builds the template kernel library (`examples/kernel-template`) with cargo, once per test
//! binary, offline, into `target/tmp/kernel-template` (shared by every test binary that uses
//! it, so the suite builds the tiny crate once), bounded to 300 s.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Builds the template once per test binary and returns its shared object.
pub(crate) fn template_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        // Both users live in `crates/<crate>/`.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let manifest = root.join("examples/kernel-template/Cargo.toml");
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernel-template");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut child = Command::new(cargo)
            .args(["build", "--release", "--offline", "--quiet", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target)
            // The outer build's flags (e.g. loom's cfg) are not the template's.
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
                panic!("building the kernel template took more than 300 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(status.success(), "cargo build of the kernel template failed: {status}");
        let so = target.join("release/libferry_kernel_template.so");
        assert!(so.is_file(), "{} missing", so.display());
        so
    })
}
