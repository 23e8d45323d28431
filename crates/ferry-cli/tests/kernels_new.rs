//! Crates a user can take: `ferry-kernel-abi` alone copied out of the checkout and a library
//! scaffolded by `ferry kernels new` beside it build offline with no ferry workspace around them;
//! the built library loads under its own name and runs its workload; and
//! `cargo package -p ferry-kernel-abi --no-verify` packages the ABI crate on its own.
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
    let _bound = ferry_watchdog::bound(
        "cargo building the scaffolded library and the ferry binary running it",
    );
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Outside the checkout: no workspace manifest above it for cargo to find.
    let tmp = Tmp(std::env::temp_dir().join(format!("ferry-kernels-new-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    // The ABI crate alone: nothing else of ferry is beside it.
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
    // A kernel that panics on a short input (the template refuses it with a typed error).
    let lib_rs = lib_dir.join("src/lib.rs");
    let src = std::fs::read_to_string(&lib_rs).unwrap();
    let guard = "    let a = k.scalar_f32(0)?;\n    k.require_len(&[&x, &y], out.len())?;";
    assert_eq!(src.matches(guard).count(), 1, "saxpy's guard moved: {src}");
    let src = src.replace(
        guard,
        "    let a = k.scalar_f32(0)?;\n    assert!(x.len() >= out.len(), \"x is too short\");\n    k.require_len(&[&x, &y], out.len())?;",
    );
    std::fs::write(&lib_rs, src).unwrap();
    cargo(&lib_dir, &["build", "--offline", "--quiet"]);
    let so = lib_dir.join("target/debug/libmy_kernels.so");
    assert!(so.is_file(), "{} missing", so.display());
    // The copied ABI crate builds on its own too, with and without `std` (as ferry-abi uses it).
    cargo(&abi, &["build", "--offline", "--quiet"]);
    cargo(&abi, &["build", "--offline", "--quiet", "--no-default-features"]);

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

    // Its panic, in every block of a 4-block task on 4 vector cores, is one typed error naming
    // the kernel; the panic hook prints nothing, and the message is in the device log.
    std::fs::write(lib_dir.join("short.toml"), SHORT).unwrap();
    let run = ["run", "--small", "--aic", "2", "--aiv", "4", "--kernels", so.to_str().unwrap()];
    let args: Vec<&str> = run.into_iter().chain(["--workload", "short.toml"]).collect();
    let o = ferry(&lib_dir, &args);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert_eq!(
        t.matches(
            "task 0x0: kernel `saxpy` (library `my-kernels`, id 256) failed on its core: panicked"
        )
        .count(),
        1,
        "{t}"
    );
    assert!(!t.contains("x is too short"), "{t}");
    assert!(!t.contains("panicked at"), "{t}");
    let o = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .current_dir(&lib_dir)
        .args(&args)
        .env("FERRY_LOG", "info")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("kernel panicked: x is too short at src/lib.rs:"), "{}", text(&o));
}

#[test]
fn a_scaffolded_orchestration_library_builds_outside_the_workspace_and_runs() {
    let _bound = ferry_watchdog::bound(
        "cargo building the scaffolded orchestration library and the ferry binary running it",
    );
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tmp = Tmp(std::env::temp_dir().join(format!("ferry-orch-new-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    copy_dir(&crates.join("ferry-kernel-abi"), &tmp.0.join("ferry-kernel-abi"));
    let abi = tmp.0.join("ferry-kernel-abi");
    let new = ["kernels", "new", "my-orch", "--orchestration", "--kernel-abi"];
    let o = ferry(&tmp.0, &[&new[..], &[abi.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("--orchestration target/release/libmy_orch.so"), "{}", text(&o));
    let lib_dir = tmp.0.join("my-orch");
    cargo(&lib_dir, &["build", "--offline", "--quiet"]);
    let so = lib_dir.join("target/debug/libmy_orch.so");
    assert!(so.is_file(), "{} missing", so.display());
    for variant in ["device", "host"] {
        let run = ["run", "--orchestration", so.to_str().unwrap(), "--variant", variant];
        let o = ferry(&lib_dir, &[&run[..], &["--workload", "workload.toml"]].concat());
        let t = text(&o);
        assert!(o.status.success(), "{variant}: {t}");
        assert!(t.contains(", 15 tasks,") && t.contains("ok (checksum"), "{variant}: {t}");
    }
}

/// `x` shorter than the output, in four blocks.
const SHORT: &str = r#"[workload]
name = "short"
verify = "host-reference"
[[tensor]]
name = "x"
shape = [512]
[[tensor]]
name = "y"
shape = [1024]
[[tensor]]
name = "out"
shape = [1024]
[[graph]]
kernel = "saxpy"
blocks = 4
args = [
  { tensor = "x", role = "input" },
  { tensor = "y", role = "input" },
  { tensor = "out", role = "output" },
]
scalars = [{ f32 = 2.0 }]
"#;

/// `cargo package -p ferry-kernel-abi --no-verify`, as a user runs it (offline, into a fresh
/// target directory; `--allow-dirty` so it runs on a working tree with changes): it succeeds on
/// its own, with nothing else of ferry published (a dependency on another ferry crate would have
/// to resolve from a registry, and fail).
#[test]
fn cargo_packages_the_kernel_abi_crate_alone() {
    let _bound = ferry_watchdog::bound("cargo packaging the kernel ABI crate");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("package-kernel-abi");
    let _ = std::fs::remove_dir_all(&target);
    let t = target.to_str().unwrap();
    cargo(
        &root,
        &["package", "-p", "ferry-kernel-abi", "--no-verify", "--offline", "--allow-dirty"]
            .into_iter()
            .chain(["--quiet", "--target-dir", t])
            .collect::<Vec<_>>(),
    );
    let crate_file = target.join("package/ferry-kernel-abi-0.1.0.crate");
    assert!(crate_file.is_file(), "{} missing", crate_file.display());
}
