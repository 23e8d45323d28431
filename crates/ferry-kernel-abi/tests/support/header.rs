//! What the header tests share: compiling a layout program against a header with the system
//! C or C++ compiler, comparing what it prints with the table computed from the Rust records,
//! and finding the integer `pub const`s of a Rust module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A record: its C name, Rust size, alignment, and each field's name and Rust offset.
pub(crate) type Record = (&'static str, usize, usize, Vec<(&'static str, usize)>);

/// A [`Record`] from a Rust type and its fields.
macro_rules! rec {
    ($c:literal, $t:ty, [$($f:ident),* $(,)?]) => {
        (
            $c,
            std::mem::size_of::<$t>(),
            std::mem::align_of::<$t>(),
            vec![$((stringify!($f), std::mem::offset_of!($t, $f))),*],
        )
    };
}

/// The table both sides print: `size R N`, `align R N`, `offset R.f N`, `const NAME N`, then
/// `export NAME` lines.
pub(crate) fn rust_table(
    records: &[Record],
    constants: &std::collections::BTreeMap<String, u64>,
    exports: &[&str],
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, size, align, fields) in records {
        out.push(format!("size {name} {size}"));
        out.push(format!("align {name} {align}"));
        for (f, off) in fields {
            out.push(format!("offset {name}.{f} {off}"));
        }
    }
    for (k, v) in constants {
        out.push(format!("const {k} {v}"));
    }
    out.extend(exports.iter().map(|e| format!("export {e}")));
    out
}

/// The C program printing the same table from `header`; `exports` are the header's macros
/// (without `FERRY_`) naming exported symbols.
pub(crate) fn c_program(
    header: &str,
    records: &[Record],
    constants: &std::collections::BTreeMap<String, u64>,
    exports: &[&str],
) -> String {
    let mut s = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include <string.h>\n\
         #include \"{header}\"\n\
         #ifdef __cplusplus\n#define ALIGNOF alignof\n#else\n#define ALIGNOF _Alignof\n#endif\n\
         int main(void) {{\n"
    );
    for (name, _, _, fields) in records {
        s += &format!("printf(\"size {name} %zu\\n\", sizeof({name}));\n");
        s += &format!("printf(\"align {name} %zu\\n\", ALIGNOF({name}));\n");
        for (f, _) in fields {
            s += &format!("printf(\"offset {name}.{f} %zu\\n\", offsetof({name}, {f}));\n");
        }
    }
    for k in constants.keys() {
        s += &format!("printf(\"const {k} %llu\\n\", (unsigned long long)(FERRY_{k}));\n");
    }
    for e in exports {
        s += &format!("printf(\"export %s\\n\", FERRY_{e});\n");
    }
    s + "return 0;\n}\n"
}

/// `FERRY_REQUIRE_TEST_TOOLS=1`: a missing compiler fails the test instead of skipping it.
pub(crate) fn require_tools() -> bool {
    std::env::var("FERRY_REQUIRE_TEST_TOOLS").is_ok_and(|v| v == "1")
}

struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles `program` (saved as `file`) with `compiler` and `std` against the crate's
/// `include/` and returns what it prints, or `None` (the test skipped, saying why) when the
/// compiler does not run.
pub(crate) fn layout_from(
    compiler: &str,
    std: &str,
    file: &str,
    program: &str,
) -> Option<Vec<String>> {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let dir = format!("ferry-header-{}-{file}", std::process::id());
    let tmp = Tmp(Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir));
    let _ = std::fs::remove_dir_all(&tmp.0);
    std::fs::create_dir_all(&tmp.0).unwrap();
    let src = tmp.0.join(file);
    std::fs::write(&src, program).unwrap();
    let exe = tmp.0.join("layout");
    let built = Command::new(compiler)
        .args([std, "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(&include)
        .arg(&src)
        .output();
    let built = match built {
        Ok(o) => o,
        Err(e) if !require_tools() => {
            println!("skipped: the compiler `{compiler}` does not run ({e})");
            return None;
        }
        Err(e) => {
            panic!("the compiler `{compiler}` does not run ({e}) and FERRY_REQUIRE_TEST_TOOLS=1")
        }
    };
    assert!(
        built.status.success(),
        "{compiler} could not compile the layout program:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    Some(String::from_utf8(run.stdout).unwrap().lines().map(String::from).collect())
}

/// Fails listing every line where `c` (what `compiler` printed for `header`) differs from `rust`.
pub(crate) fn check_against_rust(header: &str, compiler: &str, rust: &[String], c: &[String]) {
    let differ: Vec<String> = rust
        .iter()
        .zip(c)
        .filter(|(r, c)| r != c)
        .map(|(r, c)| format!("  rust: {r}\n  {compiler}: {c}"))
        .collect();
    assert!(
        differ.is_empty(),
        "{header} under {compiler} disagrees with the Rust ABI:\n{}",
        differ.join("\n")
    );
    assert_eq!(rust.len(), c.len(), "the {compiler} program printed another number of lines");
}

/// The integer `pub const`s of `src/<file>`: a top-level one by its name, one in an inner
/// module (indented) by `inner_prefix` + its name.
pub(crate) fn integer_consts(file: &str, inner_prefix: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(file);
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for line in text.lines() {
        let inner = line.starts_with(' ');
        let Some(rest) = line.trim_start().strip_prefix("pub const ") else { continue };
        let Some((name, ty)) = rest.split_once(':') else { continue };
        let ty = ty.trim_start();
        if ["u8 ", "u32 ", "i32 ", "u64 ", "usize "].iter().any(|t| ty.starts_with(t)) {
            out.push(if inner { format!("{inner_prefix}{name}") } else { name.to_string() });
        }
    }
    out
}
