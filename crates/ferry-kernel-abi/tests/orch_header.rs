//! `include/ferry_orchestration.h` agrees with the Rust orchestration ABI (`orch_lib.rs`): a
//! program compiled against the header by the system C and C++ compilers prints the size,
//! alignment and every field offset of each record, every constant, the ABI version and the
//! export names; the same table computed here from the Rust definitions must match it line for
//! line. A field that moves on either side, a record that grows, a constant that changes — or
//! an integer `pub const` of `orch_lib.rs` the header does not carry — fails the test. Where no
//! compiler runs, the test says why and passes, unless `FERRY_REQUIRE_TEST_TOOLS=1`.
#[macro_use]
mod support;

use std::collections::BTreeMap;

use ferry_kernel_abi::orch_lib::*;
use support::header::{self, Record};

/// The records the header declares.
fn records() -> Vec<Record> {
    vec![
        rec!(
            "FerryOrchContext",
            OrchContext,
            [
                services,
                runtime_args,
                callable_id,
                api_version,
                api,
                lib_api_version,
                reserved,
                lib_api
            ]
        ),
        rec!("FerryOrchFunctionEntry", OrchFunctionEntry, [name, tensors, scalars, entry]),
        rec!(
            "FerryOrchLibraryDesc",
            OrchLibraryDesc,
            [magic, abi_version, desc_bytes, entry_bytes, function_count, functions, name]
        ),
        rec!("FerryOrchArg", OrchArg, [tensor, dir, dtype, ndims, offset, shape, strides]),
        rec!("FerryOrchScalar", OrchScalar, [dtype, reserved, bits]),
        rec!(
            "FerryOrchTask",
            OrchTask,
            [kernel, block_dim, n_args, n_scalars, n_after, flags, args, scalars, after]
        ),
        rec!(
            "FerryOrchLibApi",
            OrchLibApi,
            [
                version,
                size,
                user,
                tensor_count,
                tensor_bytes,
                scalar_count,
                scalar,
                submit,
                scope_begin,
                scope_end,
                alloc,
                read
            ]
        ),
    ]
}

/// Every constant the header defines, by its Rust name (`builtin::X` as `BUILTIN_X`).
fn constants() -> BTreeMap<String, u64> {
    [
        ("ORCH_LIB_ABI_VERSION", u64::from(ORCH_LIB_ABI_VERSION)),
        ("ORCH_LIB_MAGIC", ORCH_LIB_MAGIC),
        ("MAX_LIBRARY_FUNCTIONS", u64::from(MAX_LIBRARY_FUNCTIONS)),
        ("MAX_FUNCTION_NAME", MAX_FUNCTION_NAME as u64),
        ("MAX_TASK_ARGS", MAX_TASK_ARGS as u64),
        ("MAX_TASK_SCALARS", MAX_TASK_SCALARS as u64),
        ("MAX_TASK_AFTER", MAX_TASK_AFTER as u64),
        ("MAX_ARG_DIMS", MAX_ARG_DIMS as u64),
        ("DIR_IN", u64::from(DIR_IN)),
        ("DIR_OUT", u64::from(DIR_OUT)),
        ("DIR_INOUT", u64::from(DIR_INOUT)),
        ("TASK_VIEW_SCALARS", u64::from(TASK_VIEW_SCALARS)),
        ("KERNEL_NONE", u64::from(KERNEL_NONE)),
        ("ORCH_STATUS_BAD_TABLE", ORCH_STATUS_BAD_TABLE as u64),
        ("BUILTIN_ADD", u64::from(builtin::ADD)),
        ("BUILTIN_MUL", u64::from(builtin::MUL)),
        ("BUILTIN_COPY", u64::from(builtin::COPY)),
        ("BUILTIN_ADD_ND", u64::from(builtin::ADD_ND)),
        ("BUILTIN_MUL_ND", u64::from(builtin::MUL_ND)),
        ("BUILTIN_CAST_ND", u64::from(builtin::CAST_ND)),
        ("BUILTIN_RMSNORM_ND", u64::from(builtin::RMSNORM_ND)),
        ("BUILTIN_SOFTMAX_ND", u64::from(builtin::SOFTMAX_ND)),
        ("BUILTIN_ROPE_ND", u64::from(builtin::ROPE_ND)),
        ("BUILTIN_MATMUL_ND", u64::from(builtin::MATMUL_ND)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

const EXPORTS: [&str; 2] = ["EXPORT_ORCH_LIBRARY", "ORCH_FN_PREFIX"];

fn rust_table() -> Vec<String> {
    header::rust_table(&records(), &constants(), &[EXPORT_ORCH_LIBRARY, ORCH_FN_PREFIX])
}

fn c_program() -> String {
    header::c_program("ferry_orchestration.h", &records(), &constants(), &EXPORTS)
}

#[test]
fn the_orchestration_header_matches_the_rust_abi() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if let Some(c) = header::layout_from(&cc, "-std=c11", "orch_layout.c", &c_program()) {
        header::check_against_rust("ferry_orchestration.h", &cc, &rust_table(), &c);
    }
}

/// The same header, the same table, from C++ (the C++ decode step includes it as it is).
#[test]
fn the_orchestration_header_is_the_same_abi_in_cpp() {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if let Some(c) = header::layout_from(&cxx, "-std=c++17", "orch_layout.cpp", &c_program()) {
        header::check_against_rust("ferry_orchestration.h", &cxx, &rust_table(), &c);
    }
}

/// Every integer `pub const` of `orch_lib.rs` (those of its `builtin` module as `BUILTIN_*`) is
/// in the table above, and so in the header, or the program would not compile.
#[test]
fn the_orchestration_header_carries_every_constant_of_the_abi() {
    let known = constants();
    let missing: Vec<String> = header::integer_consts("orch_lib.rs", "BUILTIN_")
        .into_iter()
        .filter(|n| !known.contains_key(n))
        .collect();
    assert!(missing.is_empty(), "constants ferry_orchestration.h does not carry: {missing:?}");
}
