//! Public type names are unique in the workspace: a `pub struct`, `enum`, `union`, `type` or
//! `trait` is defined under its name by one crate only (a crate that re-exports another's type
//! with `pub use` defines nothing). Two crates' `Report`s with different meanings make every
//! reader and every import ask which one is meant.
//!
//! `KNOWN` lists the names still defined twice, each with its crates; it only shrinks: a new
//! duplicate fails the test, and so does an entry whose duplicate is gone (remove it).
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Names defined by two crates today, to be renamed in one of them.
const KNOWN: [(&str, [&str; 2]); 8] = [
    ("CollectError", ["ferry-profile", "ferry-runtime"]),
    ("DeviceArgs", ["ferry-abi", "ferry-kernel-abi"]),
    ("KernelCall", ["ferry-abi", "ferry-runtime"]),
    ("KernelInfo", ["ferry-runtime", "ferry-workload"]),
    ("Program", ["aicpu", "ferry-programs"]),
    ("Report", ["ferry-bench", "ferry-profile"]),
    ("RunReport", ["ferry-bench", "ferry-dfx"]),
    ("VerifyError", ["ferry-runtime", "ferry-workload"]),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The public type name a line defines, if it defines one.
fn defined_name(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("pub ")?;
    let rest = ["struct ", "enum ", "union ", "type ", "trait "]
        .iter()
        .find_map(|k| rest.strip_prefix(k))?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
    let name = &rest[..end];
    name.starts_with(|c: char| c.is_ascii_uppercase()).then_some(name)
}

/// Every public type name of the workspace's library sources, with the crates defining it.
fn definitions() -> BTreeMap<String, BTreeSet<String>> {
    let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for group in ["crates", "device"] {
        let Ok(rd) = std::fs::read_dir(root().join(group)) else { continue };
        for krate in rd.flatten() {
            let mut files = Vec::new();
            rust_files(&krate.path().join("src"), &mut files);
            let name = krate.file_name().to_string_lossy().into_owned();
            for f in files {
                let text = std::fs::read_to_string(&f).unwrap();
                for n in text.lines().filter_map(defined_name) {
                    names.entry(n.to_string()).or_default().insert(name.clone());
                }
            }
        }
    }
    names
}

#[test]
fn no_public_type_name_is_defined_in_two_crates() {
    let known: BTreeMap<&str, BTreeSet<String>> =
        KNOWN.iter().map(|(n, c)| (*n, c.iter().map(|s| s.to_string()).collect())).collect();
    let defs = definitions();
    let mut new = Vec::new();
    let mut gone = Vec::new();
    for (name, crates) in defs.iter().filter(|(_, c)| c.len() > 1) {
        if known.get(name.as_str()) != Some(crates) {
            new.push(format!("{name}: {crates:?}"));
        }
    }
    for (name, crates) in &known {
        if defs.get(*name) != Some(crates) {
            gone.push(*name);
        }
    }
    assert!(new.is_empty(), "public type names defined in two crates:\n{}", new.join("\n"));
    assert!(gone.is_empty(), "no longer defined twice, remove from KNOWN: {gone:?}");
}

#[test]
fn the_scan_sees_definitions_and_not_re_exports() {
    assert_eq!(defined_name("pub struct HbmMemory {"), Some("HbmMemory"));
    assert_eq!(defined_name("    pub enum AicoreType {"), Some("AicoreType"));
    assert_eq!(defined_name("pub type StreamKernelFn = Box<()>;"), Some("StreamKernelFn"));
    assert_eq!(defined_name("pub trait Backend: Clone {"), Some("Backend"));
    assert_eq!(defined_name("pub use ferry_backend::DevicePtr;"), None);
    assert_eq!(defined_name("pub(crate) struct Slot<D> {"), None);
    assert_eq!(defined_name("pub fn new() -> Self {"), None);
    let defs = definitions();
    assert_eq!(defs.get("DevicePtr").map(|c| c.len()), Some(1), "ferry-sim re-exports it");
    assert!(defs.contains_key("HbmCopyEngine"));
}
