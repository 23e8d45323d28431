//! The Python package's own test suite (python/tests, pytest) as part of `cargo test`: a venv
//! under target/, the package built into it by maturin from python/ (`pip install ./python`, as
//! docs/python.md says, in the debug profile so it reuses this build's crates) and pytest run on
//! it, with this build's `ferry` (for `ferry report --json`), the faulty-kernels library (for
//! a kernel fault), the C template library built with `make` (a kernel library in C) and the
//! decode step's orchestration in C++ (`make`) and in Rust (cargo). Where
//! python3, its venv module or the packages cannot be had, the test
//! prints why and passes, unless `FERRY_REQUIRE_TEST_TOOLS=1` (set by `.ci/run`).
mod common;
#[path = "../../ferry-runtime/tests/support/template.rs"]
mod template;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{make_decode_cpp, need, runs};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `cmd`, returning its output; `what` names it in a failure.
fn output(cmd: &mut Command, what: &str) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("spawning {what}: {e}"))
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn the_python_package_builds_and_its_pytest_suite_passes() {
    // Building the wheel on a loaded two-core machine takes minutes; the suite about one.
    let _bound = ferry_watchdog::bound_for("pip, maturin and pytest", Duration::from_secs(1500));
    let test = "the_python_package_builds_and_its_pytest_suite_passes";
    let venv_ok = runs("python3", &["-c", "import venv, ensurepip"]);
    if need(venv_ok, test, "python3 with its venv and ensurepip modules is missing").is_none() {
        return;
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pyvenv");
    let py = venv.join("bin/python");
    if !py.is_file() {
        let o = output(Command::new("python3").args(["-m", "venv"]).arg(&venv), "python3 -m venv");
        if need(o.status.success(), test, &format!("python3 -m venv failed:\n{}", text(&o)))
            .is_none()
        {
            return;
        }
    }
    let pip = |args: &[&str]| {
        let mut c = Command::new(&py);
        c.args(["-m", "pip", "--disable-pip-version-check", "-q"]).args(args).current_dir(root());
        // maturin (installed into the venv) must be found by pip's build step.
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![venv.join("bin")];
        paths.extend(std::env::split_paths(&path));
        c.env("PATH", std::env::join_paths(paths).unwrap());
        c
    };
    let o = output(&mut pip(&["install", "-r", "python/requirements-test.txt"]), "pip");
    let why = format!("pip could not install python/requirements-test.txt:\n{}", text(&o));
    if need(o.status.success(), test, &why).is_none() {
        return;
    }
    // The package itself: an install is a build, and a failed build is a failure.
    let o = output(
        pip(&["install", "--no-build-isolation", "--force-reinstall", "--no-deps", "./python"])
            .env("MATURIN_PEP517_ARGS", "--profile dev"),
        "pip install ./python",
    );
    assert!(o.status.success(), "pip install ./python failed:\n{}", text(&o));
    // The C template, built by make alone into the target directory (the checkout is untouched).
    let c_lib = Path::new(env!("CARGO_TARGET_TMPDIR")).join("libferry_kernel_template_c.so");
    let o = output(
        Command::new("make")
            .arg("-C")
            .arg(root().join("examples/kernel-template-c"))
            .arg(format!("LIB={}", c_lib.display()))
            .arg("-B"),
        "make",
    );
    assert!(o.status.success(), "make could not build the C template:\n{}", text(&o));
    // The C++ decode step, by make alone, beside it; the Rust one by cargo, to compare with.
    // Without a C++ compiler (where that may be skipped) its tests are left out, said above.
    let cpp_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("decode-cpp");
    let cpp_decode = make_decode_cpp(test, &cpp_dir);
    let mut pytest = Command::new(&py);
    pytest.args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests"]);
    match &cpp_decode {
        Some(lib) => pytest.env("FERRY_CPP_DECODE", lib),
        None => pytest.arg("--ignore=python/tests/test_orchestration.py"),
    };
    let o = output(
        pytest
            .current_dir(root())
            .env("FERRY_BIN", env!("CARGO_BIN_EXE_ferry"))
            .env("FERRY_FAULTY_KERNELS", template::faulty_lib())
            .env("FERRY_C_KERNELS", &c_lib)
            .env("FERRY_RUST_DECODE", template::decode_lib())
            // Every test of the suite runs here: a skipped one is a failure.
            .env("FERRY_REQUIRE_TEST_TOOLS", "1"),
        "pytest",
    );
    let out = text(&o);
    println!("{out}");
    assert!(o.status.success(), "pytest failed (exit {:?}):\n{out}", o.status.code());
    assert!(
        out.lines().any(|l| l.contains(" passed") && !l.contains(" failed")),
        "pytest ran no test:\n{out}"
    );
}
