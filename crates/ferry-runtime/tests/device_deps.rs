//! The device half's dependencies: what a device program links (`ferry-runtime` without default
//! features) resolves to, as `cargo tree` reports it. The host's crates (the simulated chip, the
//! loader, the profile and its JSON, DEFLATE and file handling) must stay out of it; a dependency
//! that pulls one in again fails here, naming the path that brought it.
use std::path::Path;
use std::process::Command;

/// Crates only the host half (`host` feature) may bring in.
const HOST_ONLY: [&str; 8] = [
    "ferry-profile",
    "serde_json",
    "miniz_oxide",
    "ferry-sim",
    "ferry-launch",
    "ferry-programs",
    "ferry-fs",
    "ferry-bench",
];

/// `cargo tree` of ferry-runtime without default features, normal dependencies only, as
/// `(depth, package name)` per line.
fn device_half_tree() -> Vec<(usize, String)> {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The cargo that builds this test; offline: the lock file's packages are already here.
    let out = Command::new(env!("CARGO"))
        .arg("tree")
        .arg("--manifest-path")
        .arg(ws.join("Cargo.toml"))
        .args(["-p", "ferry-runtime", "--no-default-features", "-e", "normal"])
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

#[test]
fn the_device_half_links_no_host_crate() {
    let tree = device_half_tree();
    let names: Vec<&str> = tree.iter().map(|(_, n)| n.as_str()).collect();
    // The tree was read: the crate itself and what the device half does need are there.
    assert_eq!(names.first(), Some(&"ferry-runtime"), "{names:?}");
    for needed in ["ferry-abi", "ferry-dfx"] {
        assert!(names.contains(&needed), "{needed} missing from the device half's tree: {names:?}");
    }
    let found: Vec<String> = (0..tree.len())
        .filter(|&i| HOST_ONLY.contains(&tree[i].1.as_str()))
        .map(|i| path_to(&tree, i))
        .collect();
    assert!(
        found.is_empty(),
        "ferry-runtime without default features (what a device program links) depends on host \
         crates:\n  {}",
        found.join("\n  ")
    );
}
