//! `ferry kernels new NAME`: scaffolds a custom kernel library crate outside ferry's workspace.
//!
//! The new crate is the template library (`examples/kernel-template`: `saxpy` and `clamp`, each a
//! device entry and a host reference, and a workload that runs them) under the user's name: its
//! package, its `[lib] name` (so the built file is `lib<name>.so`) and the library name in
//! `kernel_library!` all follow `NAME`. It depends on `ferry-kernel-abi` by path and is its own
//! workspace, so `cargo build --release --offline` in it builds nothing of ferry but that crate,
//! which has no dependencies.
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

/// The template's library source; its `kernel_library!` name is [`TEMPLATE_LIBRARY_LINE`].
const TEMPLATE_LIB_RS: &str = include_str!("../../../examples/kernel-template/src/lib.rs");
/// The template's workload file; it names the built file as [`TEMPLATE_SO_STEM`].
const TEMPLATE_WORKLOAD: &str = include_str!("../../../examples/kernel-template/workload.toml");
const TEMPLATE_GITIGNORE: &str = include_str!("../../../examples/kernel-template/.gitignore");
const TEMPLATE_LIBRARY_LINE: &str = "    name: \"kernel-template\",\n";
const TEMPLATE_SO_STEM: &str = "ferry_kernel_template";
/// Longest library name a kernel library's descriptor holds (its 32-byte field, NUL-terminated).
const MAX_NAME: usize = ferry_abi::kernel_lib::NAME_BYTES - 1;
/// This checkout's `ferry-kernel-abi`, the default dependency path.
const CHECKOUT_ABI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../ferry-kernel-abi");

/// `ferry kernels ...`.
#[derive(Debug, Args)]
pub(crate) struct KernelsArgs {
    #[command(subcommand)]
    command: KernelsCommand,
}

#[derive(Debug, Subcommand)]
enum KernelsCommand {
    /// Create a kernel library crate (a cdylib with two example kernels, a workload that runs
    /// them and a README): build it with `cargo build --release`, load it with
    /// `ferry run --kernels target/release/lib<NAME>.so`.
    New {
        /// Package and library name: 1..=31 bytes of ASCII letters, digits, `-` and `_`,
        /// starting with a letter (`-` becomes `_` in the built file's name).
        name: String,
        /// Directory to create (default: `./NAME`); it must not exist or be empty.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The `ferry-kernel-abi` crate directory the library depends on by path (default:
        /// the one of the ferry checkout this binary was built from).
        #[arg(long, value_name = "DIR")]
        kernel_abi: Option<PathBuf>,
    },
}

pub(crate) fn run(a: &KernelsArgs) -> anyhow::Result<()> {
    match &a.command {
        KernelsCommand::New { name, dir, kernel_abi } => {
            let dir = dir.clone().unwrap_or_else(|| PathBuf::from(name));
            let abi = kernel_abi.clone().unwrap_or_else(|| PathBuf::from(CHECKOUT_ABI));
            let files = scaffold(name, &abi)?;
            write_new(&dir, &files)?;
            crate::stdout::outln!(
                "created kernel library `{name}` in {}: cd there, `cargo build --release`, then \
                 `ferry run --kernels target/release/lib{}.so --workload workload.toml`",
                dir.display(),
                lib_name(name)
            )
        }
    }
}

/// The `[lib] name` of package `name`: what cargo names the built `lib<it>.so`.
pub(crate) fn lib_name(name: &str) -> String {
    name.replace('-', "_")
}

fn check_name(name: &str) -> anyhow::Result<()> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let first_letter = name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic());
    if !ok_chars || !first_letter || name.len() > MAX_NAME {
        bail!(
            "library name `{name}`: use 1..={MAX_NAME} bytes of ASCII letters, digits, `-` and \
             `_`, starting with a letter"
        );
    }
    Ok(())
}

/// The files of a new library `name` depending on the `ferry-kernel-abi` at `abi`: relative
/// path and contents.
///
/// # Errors
/// A bad name, or `abi` not a `ferry-kernel-abi` crate directory.
pub(crate) fn scaffold(name: &str, abi: &Path) -> anyhow::Result<Vec<(&'static str, String)>> {
    check_name(name)?;
    let manifest = abi.join("Cargo.toml");
    let text = ferry_fs::read_input(&manifest, 1 << 20)
        .map_err(anyhow::Error::new)
        .and_then(|b| Ok(String::from_utf8(b)?))
        .with_context(|| {
            format!(
                "{} is not a ferry-kernel-abi crate directory (pass --kernel-abi DIR: the \
             crates/ferry-kernel-abi directory of a ferry checkout)",
                abi.display()
            )
        })?;
    if !text.lines().any(|l| l.trim() == "name = \"ferry-kernel-abi\"") {
        bail!("{} is not the ferry-kernel-abi crate's manifest", manifest.display());
    }
    let abi = abi.canonicalize().with_context(|| format!("resolving {}", abi.display()))?;
    let abi = abi.to_str().context("the ferry-kernel-abi path is not UTF-8")?;
    let lib = lib_name(name);
    anyhow::ensure!(
        TEMPLATE_LIB_RS.matches(TEMPLATE_LIBRARY_LINE).count() == 1,
        "the template's library name line is not where the scaffold expects it"
    );
    let lib_rs =
        TEMPLATE_LIB_RS.replace(TEMPLATE_LIBRARY_LINE, &format!("    name: \"{name}\",\n"));
    let workload = TEMPLATE_WORKLOAD.replace(TEMPLATE_SO_STEM, &lib);
    let cargo_toml = format!(
        r#"# A ferry custom kernel library (`ferry kernels new`).
[package]
name = "{name}"
version = "0.1.0"
edition = "2021"
publish = false

# Its own workspace: nothing here builds or rebuilds ferry.
[workspace]

[lib]
# The built file is `target/release/lib{lib}.so`.
name = "{lib}"
crate-type = ["cdylib"]

[dependencies]
ferry-kernel-abi = {{ path = {abi:?} }}

[profile.release]
debug = false
"#
    );
    let readme = format!(
        r#"# {name}

A ferry custom kernel library: two AICore kernels (`saxpy`: `out = a * x + y`; `clamp`:
`out = clamp(x, lo, hi)`, or in place), each a device entry and a host reference, declared with
`ferry_kernel_abi::kernel_library!` in `src/lib.rs`. ferry loads the built library at run time;
nothing in ferry is rebuilt.

```sh
cargo build --release --offline
ferry run --kernels target/release/lib{lib}.so --workload workload.toml
ferry workload check --kernels target/release/lib{lib}.so workload.toml
```

Kernel names are unique among every library a run loads: rename `saxpy` and `clamp` (in
`kernel_library!` and in `workload.toml`) before you load this library beside another made from
the same template. ferry's `docs/kernels.md` describes the ABI, its versioning rule and the
errors; `docs/workloads.md` the workload format.
"#
    );
    Ok(vec![
        ("Cargo.toml", cargo_toml),
        (".gitignore", TEMPLATE_GITIGNORE.to_string()),
        ("README.md", readme),
        ("src/lib.rs", lib_rs),
        ("workload.toml", workload),
    ])
}

/// Writes `files` under `dir`, which must not exist or be empty (nothing of the user's is
/// overwritten). The directory is opened once and checked as every output directory is
/// (another user's, or writable by everyone without the sticky bit, is refused); each file is
/// created new (`O_EXCL|O_NOFOLLOW`) through its handle, so nothing planted there is written
/// through.
fn write_new(dir: &Path, files: &[(&str, String)]) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(m) if m.file_type().is_symlink() && dir.is_dir() => {}
        Ok(_) => bail!("{} exists and is not a directory; nothing was written", dir.display()),
        Err(_) => {}
    }
    let handle = ferry_fs::Dir::open_writable(dir, true)?;
    if !handle.entries()?.is_empty() {
        bail!("{} exists and is not empty; nothing was written", dir.display());
    }
    for (rel, text) in files {
        let (d, name) = match rel.rsplit_once('/') {
            Some((sub, name)) => (handle.create_sub(sub)?, name),
            None => (handle.clone(), *rel),
        };
        let mut f = d.create_new(name)?;
        std::io::Write::write_all(&mut f, text.as_bytes())
            .with_context(|| format!("writing {}", d.join(name).display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_lib_name_follows_the_package() {
        for bad in ["", "9lib", "my lib", "ünï", "a/b", &"x".repeat(MAX_NAME + 1)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        check_name(&"x".repeat(MAX_NAME)).unwrap();
        assert_eq!(lib_name("my-kernels_2"), "my_kernels_2");
    }

    #[test]
    fn the_scaffold_renames_package_lib_and_library() {
        let files = scaffold("my-lib", Path::new(CHECKOUT_ABI)).unwrap();
        let get = |n: &str| &files.iter().find(|(p, _)| *p == n).unwrap().1;
        let toml = get("Cargo.toml");
        assert!(toml.contains("name = \"my-lib\"\n"), "{toml}");
        assert!(toml.contains("name = \"my_lib\"\n"), "{toml}");
        assert!(get("src/lib.rs").contains("    name: \"my-lib\",\n"));
        assert!(!get("src/lib.rs").contains("kernel-template"));
        assert!(get("workload.toml").contains("target/release/libmy_lib.so"));
        assert!(!get("workload.toml").contains(TEMPLATE_SO_STEM));
        let err = scaffold("my-lib", Path::new("/nonexistent")).unwrap_err();
        assert!(format!("{err:#}").contains("--kernel-abi"), "{err:#}");
    }

    #[test]
    fn a_non_empty_directory_is_refused_and_kept() {
        let dir = crate::testdir::TestDir::new("kernels-new");
        std::fs::write(dir.path.join("mine.txt"), "keep").unwrap();
        let err = write_new(&dir.path, &[("Cargo.toml", String::new())]).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
        assert!(!dir.path.join("Cargo.toml").exists());
        assert_eq!(std::fs::read_to_string(dir.path.join("mine.txt")).unwrap(), "keep");
    }
}
