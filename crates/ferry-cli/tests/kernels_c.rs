//! A kernel library written in C: `ferry kernels new --lang c` scaffolds it outside the
//! checkout, the system C compiler and `make` build it (no cargo), and ferry loads it like a
//! Rust one: its workload runs and verifies against its host references, its outputs are the
//! closed form, and a block it refuses, or a write past its output, is the typed fault naming
//! the kernel, its library and its task. Where `cc` or `make` does not run, the test says why and passes, unless
//! `FERRY_REQUIRE_TEST_TOOLS=1`.
mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{need, runs, scratch};

fn ferry(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferry")).current_dir(dir).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn a_c_library_builds_with_make_alone_and_runs_like_a_rust_one() {
    let test = "a_c_library_builds_with_make_alone_and_runs_like_a_rust_one";
    let tools = runs("cc", &["--version"]) && runs("make", &["--version"]);
    if need(tools, test, "the system C compiler `cc` or `make` does not run").is_none() {
        return;
    }
    let _bound = ferry_watchdog::bound("make building the C kernel library and ferry running it");
    let tmp = scratch("kernels-c");
    let dir = tmp.join("my-c-kernels");

    // `--kernel-abi` is a Rust library's: refused, nothing written.
    let o = ferry(&tmp, &["kernels", "new", "my-c-kernels", "--lang", "c", "--kernel-abi", "."]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("--kernel-abi is for a Rust library"), "{}", text(&o));
    assert!(!dir.exists());

    let o = ferry(&tmp, &["kernels", "new", "my-c-kernels", "--lang", "c"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("`make`"), "{}", text(&o));
    assert!(!dir.join("Cargo.toml").exists(), "a C library has no crate");

    // Built with the C compiler alone: no cargo, no Rust toolchain on the PATH.
    let o = Command::new("make")
        .current_dir(&dir)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(o.status.success(), "make failed:\n{}", text(&o));
    let so = dir.join("libmy_c_kernels.so");
    assert!(so.is_file(), "{} missing", so.display());
    let so = so.to_str().unwrap();

    let out = tmp.join("out");
    let run = ["run", "--small", "--aic", "2", "--aiv", "4", "--kernels", so];
    let o = ferry(
        &dir,
        &run.into_iter()
            .chain(["--workload", "workload.toml", "--out", out.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("my-c-kernels from "), "{t}");
    assert!(t.contains("libmy_c_kernels.so: saxpy (id 256), clamp (id 257)"), "{t}");
    assert!(t.contains("per kernel: saxpy 8, clamp 8"), "{t}");
    // The output, element by element: clamp(2 x + 1, 0, 1001) over x = 0..8192.
    let bytes = std::fs::read(out.join("out.f32")).unwrap();
    assert_eq!(bytes.len(), 8192 * 4);
    for (i, b) in bytes.chunks_exact(4).enumerate() {
        let got = f32::from_le_bytes(b.try_into().unwrap());
        assert_eq!(got, (2 * i + 1).min(1001) as f32, "out[{i}]");
    }

    // `x` shorter than the output: the kernel refuses every block with a shape error, which
    // is one typed fault naming the kernel, its library and its task.
    std::fs::write(dir.join("short.toml"), SHORT).unwrap();
    let o = ferry(&dir, &run.into_iter().chain(["--workload", "short.toml"]).collect::<Vec<_>>());
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    let fault = "task 0x0: kernel `saxpy` (library `my-c-kernels`, id 256) failed on its core: \
                 a tensor has 512 elements, the kernel needs 1024";
    assert_eq!(t.matches(fault).count(), 1, "{t}");

    // A C kernel that writes one element past its block (raw pointers: nothing stops it) is
    // the fault a Rust kernel's would be: one task over whole tensors, whose last block writes
    // past the output's allocation.
    let src = std::fs::read_to_string(dir.join("kernels.c")).unwrap();
    let body = "for (uint64_t i = start; i < end; i++) out[i] = a * x[i] + y[i];";
    assert_eq!(src.matches(body).count(), 1, "saxpy's loop moved: {src}");
    let src = src.replace(body, &body.replace("i < end", "i <= end"));
    std::fs::write(dir.join("kernels.c"), src).unwrap();
    let o = Command::new("make").current_dir(&dir).output().unwrap();
    assert!(o.status.success(), "make failed:\n{}", text(&o));
    std::fs::write(dir.join("whole.toml"), SHORT.replace("shape = [512]", "shape = [1024]"))
        .unwrap();
    let o = ferry(&dir, &run.into_iter().chain(["--workload", "whole.toml"]).collect::<Vec<_>>());
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    let fault = "task 0x0: kernel `saxpy` (library `my-c-kernels`, id 256) failed on its core: \
                 wrote past the end of tensor argument 2";
    assert_eq!(t.matches(fault).count(), 1, "{t}");
    std::fs::remove_dir_all(&tmp).unwrap();
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
