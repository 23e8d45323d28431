//! Crates a user can take: `ferry-kernel-abi` and `ferry-abi` copied out of the checkout and a
//! library scaffolded by `ferry kernels new` beside them build offline with no ferry workspace
//! around them; the built library loads under its own name and runs its workload; and cargo
//! packages the two ABI crates.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn ferry(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferry")).current_dir(dir).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Runs cargo with `args` in `dir`, bounded to 300 s (a hang guard, not a timing).
fn cargo(dir: &Path, args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut child = Command::new(cargo)
        .current_dir(dir)
        .args(args)
        // The outer build's flags (e.g. loom's cfg) are not these crates'.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .spawn()
        .expect("spawn cargo");
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for cargo") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("cargo {args:?} in {} took more than 300 s", dir.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "cargo {args:?} in {} failed: {status}", dir.display());
}

struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_scaffolded_library_builds_outside_the_workspace_and_runs() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Outside the checkout: no workspace manifest above it for cargo to find.
    let tmp = Tmp(std::env::temp_dir().join(format!("ferry-kernels-new-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    copy_dir(&crates.join("ferry-abi"), &tmp.0.join("ferry-abi"));
    copy_dir(&crates.join("ferry-kernel-abi"), &tmp.0.join("ferry-kernel-abi"));
    let abi = tmp.0.join("ferry-kernel-abi");

    let o = ferry(&tmp.0, &["kernels", "new", "my-kernels", "--kernel-abi", abi.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("libmy_kernels.so"), "{}", text(&o));
    // A second scaffold into the same, now non-empty, directory is refused.
    let again =
        ferry(&tmp.0, &["kernels", "new", "my-kernels", "--kernel-abi", abi.to_str().unwrap()]);
    assert!(!again.status.success(), "{}", text(&again));
    assert!(text(&again).contains("not empty"), "{}", text(&again));

    let lib_dir = tmp.0.join("my-kernels");
    cargo(&lib_dir, &["build", "--offline", "--quiet"]);
    let so = lib_dir.join("target/debug/libmy_kernels.so");
    assert!(so.is_file(), "{} missing", so.display());
    // The copied ABI crates build (and their own tests compile) on their own, too.
    cargo(&abi, &["build", "--offline", "--quiet"]);

    let o = ferry(
        &lib_dir,
        &["run", "--small", "--aic", "2", "--aiv", "4", "--kernels", so.to_str().unwrap()]
            .into_iter()
            .chain(["--workload", "workload.toml"])
            .collect::<Vec<_>>(),
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("my-kernels from"), "{t}");
    assert!(t.contains("saxpy (id 256), clamp (id 257)"), "{t}");
    let expected: f64 = (0..8192).map(|i| f64::from((2 * i + 1).min(1001))).sum();
    assert!(t.contains(&format!("ok (checksum {expected:.4})")), "{t}");
}

#[test]
fn cargo_packages_the_abi_crates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("package-abi");
    let t = target.to_str().unwrap();
    cargo(
        &root,
        &["package", "-p", "ferry-abi", "-p", "ferry-kernel-abi", "--no-verify", "--offline"]
            .into_iter()
            .chain(["--allow-dirty", "--quiet", "--target-dir", t])
            .collect::<Vec<_>>(),
    );
    for c in ["ferry-abi-0.1.0.crate", "ferry-kernel-abi-0.1.0.crate"] {
        assert!(target.join("package").join(c).is_file(), "{c} missing");
    }
}
