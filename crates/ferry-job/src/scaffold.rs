//! Scaffolding a custom kernel library crate outside ferry's workspace (`ferry kernels new`).
//!
//! The new crate is the template library (`examples/kernel-template`: `saxpy` and `clamp`, each a
//! device entry and a host reference, and a workload that runs them) under the user's name: its
//! package, its `[lib] name` (so the built file is `lib<name>.so`) and the library name in
//! `kernel_library!` all follow the name. It depends on `ferry-kernel-abi` by path and is its own
//! workspace, so `cargo build --release --offline` in it builds nothing of ferry but that crate,
//! which has no dependencies.
//!
//! [`c_kernel_library`] scaffolds the same two kernels in C (`examples/kernel-template-c`): the
//! kernel ABI's C header `ferry_kernel.h` copied beside `kernels.c` and a Makefile, so the
//! system C compiler and `make` build it with no Rust at all (`ferry kernels new --lang c`).
//!
//! # Examples
//! ```
//! let files = ferry_job::scaffold::kernel_library("my-kernels", ferry_job::scaffold::CHECKOUT_ABI.as_ref())?;
//! assert!(files.iter().any(|(path, text)| *path == "Cargo.toml" && text.contains("name = \"my_kernels\"")));
//! let c = ferry_job::scaffold::c_kernel_library("my-kernels")?;
//! assert!(c.iter().any(|(path, text)| *path == "Makefile" && text.contains("LIB = libmy_kernels.so")));
//! # Ok::<(), ferry_job::scaffold::ScaffoldError>(())
//! ```
use std::path::{Path, PathBuf};

/// The template's library source; its `kernel_library!` name is [`TEMPLATE_LIBRARY_LINE`].
const TEMPLATE_LIB_RS: &str = include_str!("../../../examples/kernel-template/src/lib.rs");
/// The template's workload file; it names the built file as [`TEMPLATE_SO_STEM`].
const TEMPLATE_WORKLOAD: &str = include_str!("../../../examples/kernel-template/workload.toml");
const TEMPLATE_GITIGNORE: &str = include_str!("../../../examples/kernel-template/.gitignore");
const TEMPLATE_LIBRARY_LINE: &str = "    name: \"kernel-template\",\n";
const TEMPLATE_SO_STEM: &str = "ferry_kernel_template";
/// The C template's source; its library name is [`C_TEMPLATE_LIBRARY_LINE`].
const C_TEMPLATE_KERNELS: &str = include_str!("../../../examples/kernel-template-c/kernels.c");
/// The C template's Makefile; its include path is [`C_TEMPLATE_INCLUDE_LINE`], its built file
/// [`C_TEMPLATE_SO_STEM`].
const C_TEMPLATE_MAKEFILE: &str = include_str!("../../../examples/kernel-template-c/Makefile");
const C_TEMPLATE_WORKLOAD: &str = include_str!("../../../examples/kernel-template-c/workload.toml");
const C_TEMPLATE_GITIGNORE: &str = include_str!("../../../examples/kernel-template-c/.gitignore");
const C_TEMPLATE_LIBRARY_LINE: &str = "#define LIBRARY_NAME \"kernel-template-c\"\n";
const C_TEMPLATE_INCLUDE_LINE: &str = "FERRY_INCLUDE ?= ../../crates/ferry-kernel-abi/include\n";
const C_TEMPLATE_SO_STEM: &str = "ferry_kernel_template_c";
/// The kernel ABI's C header, as this ferry was built with it.
pub const C_HEADER: &str = include_str!("../../ferry-kernel-abi/include/ferry_kernel.h");
/// The orchestration template's library source; its library name is [`ORCH_LIBRARY_LINE`].
const ORCH_LIB_RS: &str = include_str!("../../../examples/orchestration-template/src/lib.rs");
/// The orchestration template's workload file; it names the built file as [`ORCH_SO_STEM`].
const ORCH_WORKLOAD: &str = include_str!("../../../examples/orchestration-template/workload.toml");
const ORCH_LIBRARY_LINE: &str = "    name: \"orchestration-template\",\n";
const ORCH_SO_STEM: &str = "ferry_orchestration_template";
/// Longest library name a kernel library's descriptor holds (its 32-byte field, NUL-terminated).
pub const MAX_NAME: usize = ferry_kernel_abi::kernel_lib::NAME_BYTES - 1;
/// This checkout's `ferry-kernel-abi`, the default dependency path.
pub const CHECKOUT_ABI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../ferry-kernel-abi");

/// Why a library could not be scaffolded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScaffoldError {
    /// The name is not a usable package and library name.
    #[error(
        "library name `{0}`: use 1..={MAX_NAME} bytes of ASCII letters, digits, `-` and `_`, \
         starting with a letter"
    )]
    Name(String),
    /// The dependency path is not a `ferry-kernel-abi` crate directory.
    #[error(
        "{} is not a ferry-kernel-abi crate directory (pass --kernel-abi DIR: the \
         crates/ferry-kernel-abi directory of a ferry checkout)",
        .0.display()
    )]
    NotKernelAbi(PathBuf),
    /// The target exists and is not a directory, or holds files.
    #[error("{} exists and is {what}; nothing was written", dir.display())]
    Occupied {
        /// The target directory.
        dir: PathBuf,
        /// `not a directory`, `not empty`.
        what: &'static str,
    },
    /// The target directory was refused or a file could not be written.
    #[error(transparent)]
    Fs(#[from] ferry_fs::FsError),
    /// Writing a file failed.
    #[error("writing {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The `[lib] name` of package `name`: what cargo names the built `lib<it>.so`.
pub fn lib_name(name: &str) -> String {
    name.replace('-', "_")
}

fn check_name(name: &str) -> Result<(), ScaffoldError> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let first_letter = name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic());
    if !ok_chars || !first_letter || name.len() > MAX_NAME {
        return Err(ScaffoldError::Name(name.to_string()));
    }
    Ok(())
}

/// `abi` when it is a `ferry-kernel-abi` crate directory, as an absolute path.
fn checked_abi(abi: &Path) -> Result<String, ScaffoldError> {
    let not_abi = || ScaffoldError::NotKernelAbi(abi.to_path_buf());
    let manifest = abi.join("Cargo.toml");
    let bytes = ferry_fs::read_input(&manifest, 1 << 20).map_err(|_| not_abi())?;
    let text = String::from_utf8(bytes).map_err(|_| not_abi())?;
    if !text.lines().any(|l| l.trim() == "name = \"ferry-kernel-abi\"") {
        return Err(not_abi());
    }
    let abi = abi.canonicalize().map_err(|_| not_abi())?;
    abi.to_str().map(str::to_owned).ok_or_else(not_abi)
}

/// The `Cargo.toml` of a new library `name` (`what` in its first comment) depending on the
/// `ferry-kernel-abi` at `abi`.
fn cargo_toml(name: &str, what: &str, abi: &str) -> String {
    let lib = lib_name(name);
    format!(
        r#"# {what}
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
    )
}

/// The files of a new orchestration library `name` (the template library,
/// `examples/orchestration-template`, under that name) depending on the `ferry-kernel-abi` at
/// `abi`: relative path and contents.
///
/// # Errors
/// [`ScaffoldError::Name`], [`ScaffoldError::NotKernelAbi`].
pub fn orchestration_library(
    name: &str,
    abi: &Path,
) -> Result<Vec<(&'static str, String)>, ScaffoldError> {
    check_name(name)?;
    let abi = checked_abi(abi)?;
    let lib = lib_name(name);
    let lib_rs = ORCH_LIB_RS.replace(ORCH_LIBRARY_LINE, &format!("    name: \"{name}\",\n"));
    let workload = ORCH_WORKLOAD.replace(ORCH_SO_STEM, &lib);
    let readme = format!(
        r#"# {name}

A ferry orchestration library: `ragged_rows` reads per-row lengths from a device tensor and
submits tasks for each row accordingly; `fails_after_one` shows how a function's own failure
is reported. Both are declared with `ferry_kernel_abi::orchestration_library!` in `src/lib.rs`.
ferry loads the built library at run time, on the AICPU (device-orchestrated) or on the host
(host-built); nothing in ferry is rebuilt.

```sh
cargo build --release --offline
ferry run --orchestration target/release/lib{lib}.so --workload workload.toml
ferry run --orchestration target/release/lib{lib}.so --workload workload.toml --variant host
```

ferry's `docs/orchestration.md` describes the ABI, its versioning rule and the errors;
`docs/workloads.md` the workload format.
"#
    );
    Ok(vec![
        (
            "Cargo.toml",
            cargo_toml(
                name,
                "A ferry orchestration library (`ferry kernels new --orchestration`).",
                &abi,
            ),
        ),
        (".gitignore", TEMPLATE_GITIGNORE.to_string()),
        ("README.md", readme),
        ("src/lib.rs", lib_rs),
        ("workload.toml", workload),
    ])
}

/// The files of a new kernel library `name` depending on the `ferry-kernel-abi` at `abi`:
/// relative path and contents.
///
/// # Errors
/// [`ScaffoldError::Name`], [`ScaffoldError::NotKernelAbi`].
pub fn kernel_library(
    name: &str,
    abi: &Path,
) -> Result<Vec<(&'static str, String)>, ScaffoldError> {
    check_name(name)?;
    let abi = checked_abi(abi)?;
    let lib = lib_name(name);
    // The template's library line is where this expects it (a test holds it there).
    let lib_rs =
        TEMPLATE_LIB_RS.replace(TEMPLATE_LIBRARY_LINE, &format!("    name: \"{name}\",\n"));
    let workload = TEMPLATE_WORKLOAD.replace(TEMPLATE_SO_STEM, &lib);
    let cargo_toml = cargo_toml(name, "A ferry custom kernel library (`ferry kernels new`).", &abi);
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

/// The files of a new kernel library `name` written in C: `kernels.c` (`saxpy` and `clamp`),
/// the kernel ABI's header `ferry_kernel.h`, a `Makefile` that builds `lib<lib_name>.so` with
/// the system C compiler, a workload that runs the kernels, a README and a `.gitignore`.
///
/// # Errors
/// [`ScaffoldError::Name`].
pub fn c_kernel_library(name: &str) -> Result<Vec<(&'static str, String)>, ScaffoldError> {
    check_name(name)?;
    let lib = lib_name(name);
    // The template's lines are where this expects them (a test holds them there).
    let kernels = C_TEMPLATE_KERNELS
        .replace(C_TEMPLATE_LIBRARY_LINE, &format!("#define LIBRARY_NAME \"{name}\"\n"));
    let makefile = C_TEMPLATE_MAKEFILE
        .replace(C_TEMPLATE_INCLUDE_LINE, "FERRY_INCLUDE ?= .\n")
        .replace(C_TEMPLATE_SO_STEM, &lib);
    let workload = C_TEMPLATE_WORKLOAD.replace(C_TEMPLATE_SO_STEM, &lib);
    let readme = format!(
        r#"# {name}

A ferry custom kernel library written in C: two AICore kernels (`saxpy`: `out = a * x + y`;
`clamp`: `out = clamp(x, lo, hi)`, or in place), each a device entry and a host reference,
declared in the kernel table at the end of `kernels.c`. `ferry_kernel.h` is the kernel ABI's C
header (version {version}); the system C compiler and `make` build the library, no Rust needed.
ferry loads it at run time; nothing in ferry is rebuilt.

```sh
make
ferry run --kernels lib{lib}.so --workload workload.toml
ferry workload check --kernels lib{lib}.so workload.toml
```

Kernel names are unique among every library a run loads: rename `saxpy` and `clamp` (in the
table and in `workload.toml`) before you load this library beside another made from the same
template. ferry's `docs/kernels.md` describes the ABI, its versioning rule and the errors;
`docs/workloads.md` the workload format.
"#,
        version = ferry_kernel_abi::kernel_lib::KERNEL_LIB_ABI_VERSION,
    );
    Ok(vec![
        ("Makefile", makefile),
        (".gitignore", C_TEMPLATE_GITIGNORE.to_string()),
        ("README.md", readme),
        ("ferry_kernel.h", C_HEADER.to_string()),
        ("kernels.c", kernels),
        ("workload.toml", workload),
    ])
}

/// Writes `files` under `dir`, which must not exist or be empty (nothing of the user's is
/// overwritten). The directory is opened once and checked as every output directory is
/// (another user's, or writable by everyone without the sticky bit, is refused); each file is
/// created new (`O_EXCL|O_NOFOLLOW`) through its handle, so nothing planted there is written
/// through.
///
/// # Errors
/// [`ScaffoldError::Occupied`], [`ScaffoldError::Fs`], [`ScaffoldError::Write`].
pub fn write_new(dir: &Path, files: &[(&str, String)]) -> Result<(), ScaffoldError> {
    let occupied = |what| ScaffoldError::Occupied { dir: dir.to_path_buf(), what };
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(m) if m.file_type().is_symlink() && dir.is_dir() => {}
        Ok(_) => return Err(occupied("not a directory")),
        Err(_) => {}
    }
    let handle = ferry_fs::Dir::open_writable(dir, true)?;
    if !handle.entries()?.is_empty() {
        return Err(occupied("not empty"));
    }
    for (rel, text) in files {
        let (d, name) = match rel.rsplit_once('/') {
            Some((sub, name)) => (handle.create_sub(sub)?, name),
            None => (handle.clone(), *rel),
        };
        let mut f = d.create_new(name)?;
        std::io::Write::write_all(&mut f, text.as_bytes())
            .map_err(|source| ScaffoldError::Write { path: d.join(name), source })?;
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
        assert_eq!(TEMPLATE_LIB_RS.matches(TEMPLATE_LIBRARY_LINE).count(), 1);
        let files = kernel_library("my-lib", Path::new(CHECKOUT_ABI)).unwrap();
        let get = |n: &str| &files.iter().find(|(p, _)| *p == n).unwrap().1;
        let toml = get("Cargo.toml");
        assert!(toml.contains("name = \"my-lib\"\n"), "{toml}");
        assert!(toml.contains("name = \"my_lib\"\n"), "{toml}");
        assert!(get("src/lib.rs").contains("    name: \"my-lib\",\n"));
        assert!(!get("src/lib.rs").contains("kernel-template"));
        assert!(get("workload.toml").contains("target/release/libmy_lib.so"));
        assert!(!get("workload.toml").contains(TEMPLATE_SO_STEM));
        let err = kernel_library("my-lib", Path::new("/nonexistent")).unwrap_err();
        assert!(err.to_string().contains("--kernel-abi"), "{err}");
    }

    #[test]
    fn the_c_scaffold_renames_library_and_built_file() {
        assert_eq!(C_TEMPLATE_KERNELS.matches(C_TEMPLATE_LIBRARY_LINE).count(), 1);
        assert_eq!(C_TEMPLATE_MAKEFILE.matches(C_TEMPLATE_INCLUDE_LINE).count(), 1);
        assert!(C_TEMPLATE_MAKEFILE.contains(&format!("LIB = lib{C_TEMPLATE_SO_STEM}.so\n")));
        let files = c_kernel_library("my-lib").unwrap();
        let get = |n: &str| &files.iter().find(|(p, _)| *p == n).unwrap().1;
        assert!(get("kernels.c").contains("#define LIBRARY_NAME \"my-lib\"\n"));
        assert!(!get("kernels.c").contains("kernel-template-c"));
        assert!(get("Makefile").contains("LIB = libmy_lib.so\n"), "{}", get("Makefile"));
        assert!(get("Makefile").contains("FERRY_INCLUDE ?= .\n"));
        assert!(get("workload.toml").contains("libmy_lib.so"));
        assert!(!get("workload.toml").contains(C_TEMPLATE_SO_STEM));
        assert_eq!(get("ferry_kernel.h"), C_HEADER);
        assert!(c_kernel_library("9lives").is_err());
    }

    #[test]
    fn the_orchestration_scaffold_renames_package_lib_and_library() {
        assert_eq!(ORCH_LIB_RS.matches(ORCH_LIBRARY_LINE).count(), 1);
        assert_eq!(ORCH_WORKLOAD.matches(ORCH_SO_STEM).count(), 1);
        let files = orchestration_library("my-orch", Path::new(CHECKOUT_ABI)).unwrap();
        let get = |n: &str| &files.iter().find(|(p, _)| *p == n).unwrap().1;
        assert!(get("Cargo.toml").contains("name = \"my_orch\"\n"));
        assert!(get("src/lib.rs").contains("    name: \"my-orch\",\n"));
        assert!(get("workload.toml").contains("target/release/libmy_orch.so"));
    }

    #[test]
    fn a_non_empty_directory_is_refused_and_kept() {
        let dir = std::env::temp_dir().join(format!("ferry-scaffold-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("mine.txt"), "keep").unwrap();
        let err = write_new(&dir, &[("Cargo.toml", String::new())]).unwrap_err();
        assert!(matches!(err, ScaffoldError::Occupied { what: "not empty", .. }), "{err}");
        assert!(!dir.join("Cargo.toml").exists());
        assert_eq!(std::fs::read_to_string(dir.join("mine.txt")).unwrap(), "keep");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
