//! Builds the device programs under `device/` with a nested `cargo build` and embeds their
//! bytes.
//!
//! The device crates depend only on `ferry-abi` and the task runtime's device half
//! (`ferry-runtime` without its `host` feature, which links `ferry-dfx`'s record writers), so the
//! nested build is small. It uses its own
//! target directory inside `OUT_DIR` (no lock shared with the outer build), release mode without
//! debug info, and the outer build's jobserver. Each program gets a build id (FNV-1a-64 of its
//! name and of every source file of `device/` and of the workspace crates they link) through an
//! environment variable its crate reads with `option_env!`, so the program can report which
//! build it is; the loader compares that report with [`Program::build_id`].
use std::path::{Path, PathBuf};
use std::process::Command;

/// (package, library file stem, constant, program name, kind, build-id variable)
const PROGRAMS: &[(&str, &str, &str, &str, &str, &str)] = &[
    (
        "ferry-device-dispatcher",
        "ferry_dispatcher",
        "DISPATCHER",
        "dispatcher",
        "Dispatcher",
        "FERRY_BUILD_ID_DISPATCHER",
    ),
    (
        "ferry-device-aicpu-orchestrated",
        "ferry_aicpu_device_orchestrated",
        "AICPU_DEVICE_ORCHESTRATED",
        "device-orchestrated",
        "Aicpu",
        "FERRY_BUILD_ID_AICPU_DEVICE_ORCHESTRATED",
    ),
    (
        "ferry-device-aicpu-host-built-graph",
        "ferry_aicpu_host_built_graph",
        "AICPU_HOST_BUILT_GRAPH",
        "host-built-graph",
        "Aicpu",
        "FERRY_BUILD_ID_AICPU_HOST_BUILT_GRAPH",
    ),
    (
        "ferry-device-kernels",
        "ferry_kernels",
        "KERNELS",
        "kernels",
        "KernelLibrary",
        "FERRY_BUILD_ID_KERNELS",
    ),
    (
        "ferry-device-orch-vector",
        "ferry_orch_vector",
        "ORCH_VECTOR",
        "vector",
        "Orchestration",
        "FERRY_BUILD_ID_ORCH_VECTOR",
    ),
    (
        "ferry-device-orch-paged-attention",
        "ferry_orch_paged_attention",
        "ORCH_PAGED_ATTENTION",
        "paged-attention",
        "Orchestration",
        "FERRY_BUILD_ID_ORCH_PAGED_ATTENTION",
    ),
    (
        "ferry-device-orch-storm",
        "ferry_orch_storm",
        "ORCH_STORM",
        "storm",
        "Orchestration",
        "FERRY_BUILD_ID_ORCH_STORM",
    ),
    (
        "ferry-device-orch-workload",
        "ferry_orch_workload",
        "ORCH_WORKLOAD",
        "workload",
        "Orchestration",
        "FERRY_BUILD_ID_ORCH_WORKLOAD",
    ),
];

/// ferry-runtime's sources compiled only with its `host` feature (`src/lib.rs` gates them),
/// which the device programs build without. Listing a file here that the device half does
/// compile would leave its changes out of the build id: keep it to what `lib.rs` gates.
const RUNTIME_HOST_ONLY: [&str; 2] =
    ["crates/ferry-runtime/src/host", "crates/ferry-runtime/src/examples.rs"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs" || x == "toml") {
            out.push(p);
        }
    }
}

fn main() {
    // A device crate that (indirectly) depends on this crate would make the nested build run
    // this script again, recursively: refuse with a message instead.
    println!("cargo:rerun-if-env-changed=FERRY_PROGRAMS_NESTED_BUILD");
    if std::env::var_os("FERRY_PROGRAMS_NESTED_BUILD").is_some() {
        panic!(
            "a crate under device/ depends on ferry-programs (directly or through ferry-launch or \
             a crate above it, e.g. ferry-runtime with its `host` feature); device programs may \
             depend only on ferry-abi, ferry-runtime without default features and device/ crates"
        );
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let ws = manifest.parent().and_then(Path::parent).expect("crates/ferry-programs").to_path_buf();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    let device = ws.join("device");
    // The workspace crates the device programs link: the ABI, the task runtime's device half
    // and the DFX transport it writes records through.
    let linked: Vec<PathBuf> = ["crates/ferry-abi", "crates/ferry-runtime", "crates/ferry-dfx"]
        .iter()
        .map(|c| ws.join(c))
        .collect();
    println!("cargo:rerun-if-changed={}", device.display());
    for c in &linked {
        println!("cargo:rerun-if-changed={}", c.join("src").display());
        println!("cargo:rerun-if-changed={}", c.join("Cargo.toml").display());
    }

    let mut files = Vec::new();
    sources(&device, &mut files);
    for c in &linked {
        sources(&c.join("src"), &mut files);
        files.push(c.join("Cargo.toml"));
    }
    // The build id hashes only what the device programs compile: a change to ferry-runtime's
    // host half leaves the programs (and their ids) as they are, so the nested build below
    // finds them fresh instead of rebuilding every program in release.
    let host_only: Vec<PathBuf> = RUNTIME_HOST_ONLY.iter().map(|p| ws.join(p)).collect();
    files.retain(|f| !host_only.iter().any(|h| f.starts_with(h)));
    files.sort();
    let mut tree = Vec::new();
    for f in &files {
        tree.extend_from_slice(f.strip_prefix(&ws).unwrap_or(f).to_string_lossy().as_bytes());
        tree.extend_from_slice(&std::fs::read(f).unwrap_or_default());
    }
    let tree_hash = ferry_abi::services::fnv1a_64(&tree);

    let target_dir = out.join("device-target");
    let build = |offline: bool| {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.arg("build").arg("--release").arg("--manifest-path").arg(ws.join("Cargo.toml"));
        cmd.arg("--target-dir").arg(&target_dir);
        if offline {
            cmd.arg("--offline");
        }
        for p in PROGRAMS {
            cmd.arg("-p").arg(p.0);
            let id = ferry_abi::services::fnv1a_64(p.3.as_bytes()) ^ tree_hash;
            cmd.env(p.5, format!("0x{id:016x}"));
        }
        // The outer build's wrappers (clippy-driver, sccache) and target flags are not for the
        // device programs: they are built as plain release shared objects.
        for v in [
            "RUSTC_WRAPPER",
            "RUSTC_WORKSPACE_WRAPPER",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_PRIMARY_PACKAGE",
            "CLIPPY_ARGS",
            "CLIPPY_CONF_DIR",
        ] {
            cmd.env_remove(v);
        }
        cmd.env("CARGO_PROFILE_RELEASE_DEBUG", "0");
        cmd.env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
        cmd.env("CARGO_TERM_COLOR", "never");
        cmd.env("FERRY_PROGRAMS_NESTED_BUILD", "1");
        cmd.output()
    };
    let mut output = build(true).expect("running the nested cargo build of device/");
    if !output.status.success() {
        // A clean clone may not have every crate of the lock file downloaded yet.
        output = build(false).expect("running the nested cargo build of device/");
    }
    if !output.status.success() {
        panic!("building the device programs failed:\n{}", String::from_utf8_lossy(&output.stderr));
    }

    let mut code = String::from("// Generated by build.rs: the embedded device programs.\n");
    let mut all = Vec::new();
    for &(package, stem, konst, name, kind, _) in PROGRAMS {
        let src = target_dir.join("release").join(format!("lib{stem}.so"));
        let bytes =
            std::fs::read(&src).unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
        let dst = out.join(format!("lib{stem}.so"));
        std::fs::write(&dst, &bytes).unwrap_or_else(|e| panic!("writing {}: {e}", dst.display()));
        let fp = ferry_abi::services::fingerprint(&bytes);
        let id = ferry_abi::services::fnv1a_64(name.as_bytes()) ^ tree_hash;
        code.push_str(&format!(
            "/// The `{name}` program (package `{package}`).\n\
             pub static {konst}: Program = Program {{\n    name: {name:?},\n    package: {package:?},\n    kind: ProgramKind::{kind},\n    bytes: include_bytes!({dst:?}),\n    fingerprint: 0x{fp:016x},\n    build_id: 0x{id:016x},\n}};\n",
            dst = dst.display().to_string(),
        ));
        all.push(konst);
    }
    code.push_str(&format!(
        "/// Every embedded program.\npub static ALL: [&Program; {}] = [{}];\n",
        all.len(),
        all.iter().map(|k| format!("&{k}")).collect::<Vec<_>>().join(", ")
    ));
    std::fs::write(out.join("programs.rs"), code).expect("writing programs.rs");
}
