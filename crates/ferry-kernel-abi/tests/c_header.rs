//! `include/ferry_kernel.h` agrees with the Rust ABI: a C program compiled against the header
//! by the system C compiler prints the size, alignment and every field offset of each record
//! and every constant; the same table computed here from the Rust definitions must match it
//! line for line. A field that moves on either side, a record that grows, a constant that
//! changes — or a `pub const` of `kernel_lib.rs` or `services.rs` the header does not carry —
//! fails the test. Where no C compiler runs, the test says why and passes, unless
//! `FERRY_REQUIRE_TEST_TOOLS=1`.
#[macro_use]
mod support;

use std::collections::BTreeMap;

use ferry_kernel_abi::kernel_lib::*;
use ferry_kernel_abi::services::*;
use ferry_kernel_abi::DType;
use support::header::{self, Record};

/// The records the header declares.
fn records() -> Vec<Record> {
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

const EXPORTS: [&str; 2] = ["EXPORT_KERNEL_LIBRARY", "EXPORT_SET_SERVICES"];

fn rust_table() -> Vec<String> {
    header::rust_table(&records(), &constants(), &[EXPORT_KERNEL_LIBRARY, EXPORT_SET_SERVICES])
}

fn c_program() -> String {
    header::c_program("ferry_kernel.h", &records(), &constants(), &EXPORTS)
}

#[test]
fn the_c_header_matches_the_rust_abi() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if let Some(c) = header::layout_from(&cc, "-std=c11", "layout.c", &c_program()) {
        header::check_against_rust("ferry_kernel.h", &cc, &rust_table(), &c);
    }
}

/// The same header, the same table, from C++ (a C++ kernel library includes it as it is).
#[test]
fn the_header_is_the_same_abi_in_cpp() {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if let Some(c) = header::layout_from(&cxx, "-std=c++17", "layout.cpp", &c_program()) {
        header::check_against_rust("ferry_kernel.h", &cxx, &rust_table(), &c);
    }
}

/// Every integer `pub const` of the modules the header mirrors is in the table above (and so
/// in the header, or the C program would not compile).
#[test]
fn the_header_carries_every_constant_of_the_abi() {
    let known = constants();
    let missing: Vec<String> = ["kernel_lib.rs", "services.rs"]
        .into_iter()
        .flat_map(|f| header::integer_consts(f, "").into_iter().map(move |n| (f, n)))
        .filter(|(_, n)| !known.contains_key(n))
        .map(|(f, n)| format!("{f}: {n}"))
        .collect();
    assert!(missing.is_empty(), "constants ferry_kernel.h does not carry: {missing:?}");
}
