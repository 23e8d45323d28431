//! `include/ferry_kernel.h` agrees with the Rust ABI: a C program compiled against the header
//! by the system C compiler prints the size, alignment and every field offset of each record
//! and every constant; the same table computed here from the Rust definitions must match it
//! line for line. A field that moves on either side, a record that grows, a constant that
//! changes — or a `pub const` of `kernel_lib.rs` or `services.rs` the header does not carry —
//! fails the test. Where no C compiler runs, the test says why and passes, unless
//! `FERRY_REQUIRE_TEST_TOOLS=1`.
use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_kernel_abi::kernel_lib::*;
use ferry_kernel_abi::services::*;
use ferry_kernel_abi::DType;

/// A record: its C name, Rust size, alignment, and each field's name and Rust offset.
type Record = (&'static str, usize, usize, Vec<(&'static str, usize)>);

/// The records the header declares.
fn records() -> Vec<Record> {
    macro_rules! rec {
        ($c:literal, $t:ty, [$($f:ident),* $(,)?]) => {
            ($c, size_of::<$t>(), align_of::<$t>(), vec![$((stringify!($f), offset_of!($t, $f))),*])
        };
    }
    vec![
        rec!("FerryKernelErrorRecord", KernelErrorRecord, [kind, index, expected, got]),
        rec!("FerryTensorArg", TensorArg, [addr, bytes]),
        rec!(
            "FerryDeviceCall",
            DeviceCall,
            [tensors, scalars, n_tensors, n_scalars, block_idx, block_dim]
        ),
        rec!("FerryHostTensor", HostTensor, [ptr, len]),
        rec!("FerryHostCall", HostCall, [tensors, scalars, n_tensors, n_scalars]),
        rec!(
            "FerryKernelEntry",
            KernelEntry,
            [
                name,
                core,
                min_tensors,
                max_tensors,
                scalar_count,
                scalar_dtypes,
                max_blocks,
                device,
                host
            ]
        ),
        rec!(
            "FerryKernelLibraryDesc",
            KernelLibraryDesc,
            [magic, abi_version, desc_bytes, entry_bytes, kernel_count, kernels, name]
        ),
        rec!(
            "FerryDeviceServices",
            DeviceServices,
            [
                abi_version,
                size,
                ctx,
                translate,
                reg_read,
                reg_write_aicpu,
                reg_write_core,
                core_wait,
                aicpu_wait,
                notify_aicpu,
                now_cycles,
                clock_hz,
                log,
                thread_info,
                save_so_file,
                load_object,
                object_symbol,
                close_object,
                notify_host,
                mem_load,
                mem_store,
                cache_op
            ]
        ),
    ]
}

/// Every constant the header defines, by its Rust name, as the Rust crate has it.
fn constants() -> BTreeMap<String, u64> {
    let mut c: BTreeMap<String, u64> = [
        ("KERNEL_LIB_ABI_VERSION", u64::from(KERNEL_LIB_ABI_VERSION)),
        ("KERNEL_LIB_MAGIC", KERNEL_LIB_MAGIC),
        ("MAX_LIBRARY_KERNELS", u64::from(MAX_LIBRARY_KERNELS)),
        ("MAX_CUSTOM_KERNELS", u64::from(MAX_CUSTOM_KERNELS)),
        ("CUSTOM_KERNEL_BASE", u64::from(CUSTOM_KERNEL_BASE)),
        ("NAME_BYTES", NAME_BYTES as u64),
        ("MAX_CALL_TENSORS", MAX_CALL_TENSORS as u64),
        ("MAX_CALL_SCALARS", MAX_CALL_SCALARS as u64),
        ("CORE_AIC", u64::from(CORE_AIC)),
        ("CORE_AIV", u64::from(CORE_AIV)),
        ("SCALAR_VIEW_SHAPE", u64::from(SCALAR_VIEW_SHAPE)),
        ("SCALAR_VIEW_OPERAND", u64::from(SCALAR_VIEW_OPERAND)),
        ("KERNEL_ERR_NONE", u64::from(KERNEL_ERR_NONE)),
        ("KERNEL_ERR_MISSING_TENSOR", u64::from(KERNEL_ERR_MISSING_TENSOR)),
        ("KERNEL_ERR_MISSING_SCALAR", u64::from(KERNEL_ERR_MISSING_SCALAR)),
        ("KERNEL_ERR_BAD_ADDRESS", u64::from(KERNEL_ERR_BAD_ADDRESS)),
        ("KERNEL_ERR_SHAPE", u64::from(KERNEL_ERR_SHAPE)),
        ("KERNEL_ERR_PANIC", u64::from(KERNEL_ERR_PANIC)),
        ("KERNEL_ERR_VIEW", u64::from(KERNEL_ERR_VIEW)),
        ("SERVICES_ABI_VERSION", u64::from(SERVICES_ABI_VERSION)),
        ("WAIT_FOREVER", WAIT_FOREVER),
        ("WAIT_SATISFIED", WAIT_SATISFIED),
        ("MEM_LOAD_PLAIN", u64::from(MEM_LOAD_PLAIN)),
        ("MEM_LOAD_VOLATILE", u64::from(MEM_LOAD_VOLATILE)),
        ("MEM_LOAD_ACQUIRE", u64::from(MEM_LOAD_ACQUIRE)),
        ("MEM_STORE_PLAIN", u64::from(MEM_STORE_PLAIN)),
        ("MEM_STORE_RELEASE", u64::from(MEM_STORE_RELEASE)),
        ("CACHE_OP_CIVAC", u64::from(CACHE_OP_CIVAC)),
        ("CACHE_OP_IVAC", u64::from(CACHE_OP_IVAC)),
        ("CACHE_LINE_BYTES", CACHE_LINE_BYTES),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (name, code) in [
        ("STATUS_OK", STATUS_OK),
        ("STATUS_INVALID_ARGUMENT", STATUS_INVALID_ARGUMENT),
        ("STATUS_UNSUPPORTED", STATUS_UNSUPPORTED),
        ("STATUS_ABI_SIZE_MISMATCH", STATUS_ABI_SIZE_MISMATCH),
        ("STATUS_ABI_VERSION_MISMATCH", STATUS_ABI_VERSION_MISMATCH),
        ("STATUS_NO_SERVICES", STATUS_NO_SERVICES),
        ("STATUS_BAD_ADDRESS", STATUS_BAD_ADDRESS),
        ("STATUS_IO", STATUS_IO),
        ("STATUS_BAD_NAME", STATUS_BAD_NAME),
        ("STATUS_MISSING_SYMBOL", STATUS_MISSING_SYMBOL),
        ("STATUS_NOT_INITIALISED", STATUS_NOT_INITIALISED),
        ("STATUS_PANIC", STATUS_PANIC),
        ("STATUS_BAD_CALLABLE", STATUS_BAD_CALLABLE),
        ("STATUS_UNKNOWN_KERNEL", STATUS_UNKNOWN_KERNEL),
        ("STATUS_RUNTIME_BASE", STATUS_RUNTIME_BASE),
    ] {
        c.insert(name.to_string(), code as u64);
    }
    for d in DType::ALL {
        c.insert(format!("DTYPE_{}", d.name()), d as u64);
    }
    c
}

/// The table both sides print: `size R N`, `align R N`, `offset R.f N`, `const NAME N`.
fn rust_table() -> Vec<String> {
    let mut out = Vec::new();
    for (name, size, align, fields) in records() {
        out.push(format!("size {name} {size}"));
        out.push(format!("align {name} {align}"));
        for (f, off) in fields {
            out.push(format!("offset {name}.{f} {off}"));
        }
    }
    for (k, v) in constants() {
        out.push(format!("const {k} {v}"));
    }
    out.push(format!("export {EXPORT_KERNEL_LIBRARY}"));
    out.push(format!("export {EXPORT_SET_SERVICES}"));
    out
}

/// The C program printing the same table from the header.
fn c_program() -> String {
    let mut s = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <string.h>\n\
         #include \"ferry_kernel.h\"\n\
         #ifdef __cplusplus\n#define ALIGNOF alignof\n#else\n#define ALIGNOF _Alignof\n#endif\n\
         int main(void) {\n",
    );
    for (name, _, _, fields) in records() {
        s += &format!("printf(\"size {name} %zu\\n\", sizeof({name}));\n");
        s += &format!("printf(\"align {name} %zu\\n\", ALIGNOF({name}));\n");
        for (f, _) in fields {
            s += &format!("printf(\"offset {name}.{f} %zu\\n\", offsetof({name}, {f}));\n");
        }
    }
    for k in constants().keys() {
        s += &format!("printf(\"const {k} %llu\\n\", (unsigned long long)(FERRY_{k}));\n");
    }
    s += "printf(\"export %s\\n\", FERRY_EXPORT_KERNEL_LIBRARY);\n";
    s += "printf(\"export %s\\n\", FERRY_EXPORT_SET_SERVICES);\nreturn 0;\n}\n";
    s
}

fn require_tools() -> bool {
    std::env::var("FERRY_REQUIRE_TEST_TOOLS").is_ok_and(|v| v == "1")
}

struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles the layout program with `compiler` (`lang`: `c` or `c++`) and returns what it
/// prints, or `None` (the test skipped) when the compiler does not run.
fn layout_from(compiler: &str, std: &str, file: &str) -> Option<Vec<String>> {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let tmp = Tmp(Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ferry-header-{file}")));
    let _ = std::fs::remove_dir_all(&tmp.0);
    std::fs::create_dir_all(&tmp.0).unwrap();
    let src = tmp.0.join(file);
    std::fs::write(&src, c_program()).unwrap();
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
        "{compiler} could not compile against ferry_kernel.h:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    Some(String::from_utf8(run.stdout).unwrap().lines().map(String::from).collect())
}

fn check_against_rust(compiler: &str, c: &[String]) {
    let rust = rust_table();
    let differ: Vec<String> = rust
        .iter()
        .zip(c)
        .filter(|(r, c)| r != c)
        .map(|(r, c)| format!("  rust: {r}\n  {compiler}: {c}"))
        .collect();
    assert!(
        differ.is_empty(),
        "ferry_kernel.h under {compiler} disagrees with the Rust ABI:\n{}",
        differ.join("\n")
    );
    assert_eq!(rust.len(), c.len(), "the {compiler} program printed another number of lines");
}

#[test]
fn the_c_header_matches_the_rust_abi() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if let Some(c) = layout_from(&cc, "-std=c11", "layout.c") {
        check_against_rust(&cc, &c);
    }
}

/// The same header, the same table, from C++ (a C++ kernel library includes it as it is).
#[test]
fn the_header_is_the_same_abi_in_cpp() {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if let Some(c) = layout_from(&cxx, "-std=c++17", "layout.cpp") {
        check_against_rust(&cxx, &c);
    }
}

/// Every integer `pub const` of the modules the header mirrors is in the table above (and so
/// in the header, or the C program would not compile).
#[test]
fn the_header_carries_every_constant_of_the_abi() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let known = constants();
    let mut missing = Vec::new();
    for file in ["kernel_lib.rs", "services.rs"] {
        let text = std::fs::read_to_string(src.join(file)).unwrap();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("pub const ") else { continue };
            let Some((name, ty)) = rest.split_once(':') else { continue };
            let ty = ty.trim_start();
            let integer =
                ["u8 ", "u32 ", "i32 ", "u64 ", "usize "].iter().any(|t| ty.starts_with(t));
            if integer && !known.contains_key(name) {
                missing.push(format!("{file}: {name}"));
            }
        }
    }
    assert!(missing.is_empty(), "constants ferry_kernel.h does not carry: {missing:?}");
}
