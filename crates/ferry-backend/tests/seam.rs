//! Nothing above the seam names the simulated chip: the crates that program against
//! `ferry-backend` neither depend on `ferry-sim` (normal dependencies, as `cargo tree` reports
//! them; their tests may use it as a dev-dependency) nor name `ferry_sim` in their library
//! code, and neither do the modules above the seam in crates that still depend on the chip
//! elsewhere. Doc comments may: their examples are doctests, built with the dev-dependencies
//! like the tests. A crate or module that reaches past the seam again fails here, naming the
//! path.
use std::path::{Path, PathBuf};
use std::process::Command;

/// The crates that reach a device only through the seam.
const ABOVE_THE_SEAM: [&str; 2] = ["ferry-copy", "ferry-launch"];

/// Library source directories and files (under `crates/`) that reach a device only through
/// the seam: whole crates, and the modules of the runtime's host half that do (the rest of it
/// still builds and drives the simulated chip, docs/architecture.md). The runner (`host/runner.rs`
/// and `host/runner/`, every file of it) is generic over its device (`RunnerDevice`), and it
/// and the DFX session (`host/dfx`, every file of it) name the chip's types only through the
/// aliases `host/sim_backend.rs` binds (the runner's default device).
const SOURCES_ABOVE_THE_SEAM: [&str; 12] = [
    "ferry-copy/src",
    "ferry-launch/src",
    "ferry-runtime/src/host/config.rs",
    "ferry-runtime/src/host/dfx",
    "ferry-runtime/src/host/extent.rs",
    "ferry-runtime/src/host/handshake.rs",
    "ferry-runtime/src/host/kernel_registry.rs",
    "ferry-runtime/src/host/orch_library.rs",
    "ferry-runtime/src/host/profile.rs",
    "ferry-runtime/src/host/runner.rs",
    "ferry-runtime/src/host/runner",
    "ferry-runtime/src/host/slots.rs",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `cargo tree -p <krate> -e normal` as `(depth, package name)` per line.
fn normal_tree(krate: &str) -> Vec<(usize, String)> {
    // The cargo that builds this test; offline: the lock file's packages are already here.
    let out = Command::new(env!("CARGO"))
        .arg("tree")
        .arg("--manifest-path")
        .arg(workspace().join("Cargo.toml"))
        .args(["-p", krate, "-e", "normal"])
        .args(["--prefix", "depth", "--format", "{p}", "--offline", "--color", "never"])
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("running cargo tree");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let name_at = l.find(|c: char| !c.is_ascii_digit())?;
            let depth = l[..name_at].parse().ok()?;
            let name = l[name_at..].split_whitespace().next()?.to_string();
            Some((depth, name))
        })
        .collect()
}

/// The chain of packages from the root to line `i` of `tree`.
fn path_to(tree: &[(usize, String)], i: usize) -> String {
    let mut chain = vec![tree[i].1.as_str()];
    let mut depth = tree[i].0;
    for (d, name) in tree[..i].iter().rev() {
        if *d < depth {
            chain.push(name);
            depth = *d;
        }
    }
    chain.reverse();
    chain.join(" -> ")
}

/// Every `.rs` file under `dir` (or `dir` itself, when it is a file).
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    if dir.is_file() {
        out.push(dir.to_path_buf());
        return;
    }
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_crate_above_the_seam_depends_on_the_simulated_chip() {
    for krate in ABOVE_THE_SEAM {
        let tree = normal_tree(krate);
        assert_eq!(tree.first().map(|t| t.1.as_str()), Some(krate), "{tree:?}");
        assert!(
            tree.iter().any(|(_, n)| n == "ferry-backend"),
            "{krate} programs against the seam"
        );
        let bad: Vec<String> = (0..tree.len())
            .filter(|&i| tree[i].1 == "ferry-sim")
            .map(|i| path_to(&tree, i))
            .collect();
        assert!(bad.is_empty(), "{krate} reaches the simulated chip: {bad:?}");
    }
}

#[test]
fn no_library_source_above_the_seam_names_the_simulated_chip() {
    for dir in SOURCES_ABOVE_THE_SEAM {
        let mut files = Vec::new();
        sources(&workspace().join("crates").join(dir), &mut files);
        assert!(!files.is_empty(), "{dir} has sources");
        let mut hits = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (n, line) in text.lines().enumerate() {
                let doc =
                    line.trim_start().starts_with("//!") || line.trim_start().starts_with("///");
                if line.contains("ferry_sim") && !doc {
                    hits.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
                // In a crate that still depends on the chip, a module's parent may name it: a
                // module above the seam imports what it uses of its parent by name (test
                // modules, indented, may glob-import the module they test).
                let glob = line.starts_with("use super::") && line.contains('*');
                if dir.starts_with("ferry-runtime/") && glob {
                    hits.push(format!("{}:{}: {} (a glob import)", f.display(), n + 1, line));
                }
            }
        }
        assert!(hits.is_empty(), "{dir} names ferry_sim:\n{}", hits.join("\n"));
    }
}
