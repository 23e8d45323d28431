//! Typed tensors and N-d views: the dtypes' host reference against values worked out by hand,
//! the example workload on the simulated chip (both variants), and each refusal of a view with
//! its line, before anything runs.
use ferry_runtime::host::{DeviceRunner, RunnerConfig, Variant};
use ferry_sim::Arch;
use ferry_workload::{BuiltinKernels, VerifyError, Workload, WorkloadError};
use std::path::Path;

fn parse(text: &str) -> Result<Workload, WorkloadError> {
    Workload::parse(text, "w.toml", Path::new("."), &BuiltinKernels, false)
}

/// The line (1-based) of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).expect("needle in text") + 1
}

const HEAD: &str = r#"[workload]
name = "t"
verify = "host-reference"
[[tensor]]
name = "a"
dtype = "int8"
shape = [3, 8]
init = { iota = { start = 120.0, step = 1.0 } }
[[tensor]]
name = "b"
dtype = "int32"
shape = [3, 4]
init = { constant = 10.0 }
[[tensor]]
name = "h"
dtype = "bf16"
shape = [4, 3]
init = { iota = { start = 0.5, step = 1.0 } }
[[tensor]]
name = "o8"
dtype = "int8"
shape = [3, 4]
[[tensor]]
name = "of"
shape = [3, 4]
"#;

/// o8 = a[:, 2..6] + b (int8 out: wraps); of = o8 as f32; then of = of * transpose(h) (f32).
const GOOD: &str = r#"[[graph]]
kernel = "add_nd"
args = [
  { tensor = "a", role = "input", offset = 4, shape = [3, 4], strides = [8, 1] },
  { tensor = "b", role = "input", shape = [3, 4] },
  { tensor = "o8", role = "output", shape = [3, 4] },
]
[[graph]]
kernel = "cast_nd"
args = [{ tensor = "o8", role = "input", len = 12 }, { tensor = "of", role = "output" }]
[[graph]]
kernel = "mul_nd"
args = [
  { tensor = "of", role = "input", shape = [3, 4] },
  { tensor = "h", role = "input", shape = [3, 4], strides = [1, 3] },
  { tensor = "of", role = "inout", shape = [3, 4] },
]
"#;

fn wrap8(v: i64) -> i64 {
    v as i8 as i64
}

#[test]
fn the_host_reference_computes_each_dtype_by_its_rules() {
    let wl = parse(&format!("{HEAD}{GOOD}")).unwrap();
    assert_eq!(wl.tasks(), 3);
    let r = wl.host_reference(&BuiltinKernels).unwrap();
    // a[r][c] = 120 + 8r + c, saturated at 127 by the init; + 10 wraps in int8.
    let a = |r: i64, c: i64| (120 + 8 * r + c).min(127);
    for row in 0..3i64 {
        for col in 0..4i64 {
            let k = (row * 4 + col) as usize;
            let o8 = wrap8(a(row, col + 4) + 10);
            assert_eq!(r[3][k], o8 as f64, "o8[{row}][{col}]");
            // h[i][j] = 0.5 + 3i + j; its transpose at (row, col) is h[col][row].
            let h = 0.5 + (3 * col + row) as f64;
            let want = (o8 as f32 * h as f32) as f64;
            assert_eq!(r[4][k], want, "of[{row}][{col}]");
        }
    }
    // The inputs are where the init put them, in their dtypes.
    assert_eq!(r[1], vec![10.0; 12]);
    assert_eq!(r[3][0], -122.0, "124 + 10 wraps");
    assert_eq!(r[2][11], 11.5);
}

#[test]
fn the_example_runs_and_verifies_on_the_chip() {
    let _bound = ferry_watchdog::bound("the dtypes workload on the simulated chip");
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workloads/dtypes.toml");
    let wl = Workload::load(&p, &BuiltinKernels, false).unwrap();
    for (id, variant) in [(0, Variant::DeviceOrchestrated), (1, Variant::HostBuiltGraph)] {
        let mut runner = DeviceRunner::new(RunnerConfig::small(Arch::A2a3)).unwrap();
        runner.register_callable(id, wl.callable(variant)).unwrap();
        let out = runner.run(id, wl.run_args().unwrap()).unwrap();
        let sum = wl.verify(&out, &BuiltinKernels).unwrap_or_else(|e| panic!("{variant:?}: {e}"));
        assert_eq!(sum, 2976.0, "the primary output `acc`'s checksum");
        // One unit off in an int32 output is found (integers are exact).
        let mut bad = out.clone();
        let acc = bad.tensors[4].as_mut().unwrap();
        acc[1] = f32::from_bits(acc[1].to_bits().wrapping_add(1));
        assert!(matches!(wl.verify(&bad, &BuiltinKernels), Err(VerifyError::Checksum { .. })));
        // One bf16 unit in the last place is within the bf16 tolerance; a sign flip is not.
        let mut near = out.clone();
        let y = near.tensors[7].as_mut().unwrap();
        y[0] = f32::from_bits(y[0].to_bits() ^ 1);
        assert_eq!(wl.verify(&near, &BuiltinKernels), Ok(2976.0));
        let y = near.tensors[7].as_mut().unwrap();
        y[0] = f32::from_bits(y[0].to_bits() ^ 0x8000_0000);
        match wl.verify(&near, &BuiltinKernels) {
            Err(VerifyError::Mismatch { tensor, index: 1, dtype: "bf16", .. }) => {
                assert_eq!(tensor, "y")
            }
            r => panic!("{variant:?}: {r:?}"),
        }
    }
}

/// The bf16 layer kernels (matmul, rmsnorm, rope, softmax) on the chip, against their host
/// reference within bf16's tolerance, on both variants; each softmax row sums to 1.
#[test]
fn the_bf16_layer_example_runs_and_verifies_on_the_chip() {
    let _bound = ferry_watchdog::bound("the bf16 layer workload on the simulated chip");
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workloads/bf16-layer.toml");
    let wl = Workload::load(&p, &BuiltinKernels, false).unwrap();
    assert_eq!(wl.tasks(), 11);
    for (id, variant) in [(0, Variant::DeviceOrchestrated), (1, Variant::HostBuiltGraph)] {
        let mut runner = DeviceRunner::new(RunnerConfig::small(Arch::A5)).unwrap();
        runner.register_callable(id, wl.callable(variant)).unwrap();
        let out = runner.run(id, wl.run_args().unwrap()).unwrap();
        let sum = wl.verify(&out, &BuiltinKernels).unwrap_or_else(|e| panic!("{variant:?}: {e}"));
        assert!((sum - 16.0).abs() < 0.01, "{sum}");
        let p = out.tensors[7].as_ref().unwrap();
        for row in p.chunks(64) {
            let s: f32 = row.iter().sum();
            assert!((s - 1.0).abs() < 1e-3 && row.iter().all(|&v| v > 0.0), "{s}");
        }
    }
}

#[track_caller]
fn refuse(graph: &str, needle: &str, reason: &str) {
    let text = format!("{HEAD}{graph}");
    let e = parse(&text).expect_err("must be refused");
    assert_eq!(e.line(), Some(line_of(&text, needle)), "{e}");
    assert!(e.message().contains(reason), "`{e}` lacks `{reason}`");
}

fn one(kernel: &str, args: &str) -> String {
    format!("[[graph]]\nkernel = \"{kernel}\"\nargs = [\n{args}\n]\n")
}

#[test]
fn an_n_d_view_out_of_range_names_its_line() {
    // Row pitch 8 over 24 int8 elements: rows at 0, 8, 16; offset 6 puts the last at 6+16+3.
    refuse(
        &one(
            "cast_nd",
            "{ tensor = \"a\", role = \"input\", offset = 8, shape = [3, 4], strides = [8, 1] },\n{ tensor = \"b\", role = \"output\", shape = [3, 4] },",
        ),
        "offset = 8",
        "input view of `a` out of range: offset 8 + extent 20 (shape [3, 4]) > 24 elements",
    );
}

#[test]
fn a_view_not_on_a_word_names_its_line() {
    refuse(
        &one(
            "cast_nd",
            "{ tensor = \"a\", role = \"input\", offset = 2, len = 12 },\n{ tensor = \"b\", role = \"output\", len = 12 },",
        ),
        "offset = 2",
        "starts at element 2, not on a 32-bit word (int8 elements: the offset is a multiple of 4)",
    );
}

#[test]
fn arguments_of_different_shapes() {
    refuse(
        &one(
            "cast_nd",
            "{ tensor = \"a\", role = \"input\", shape = [4, 3] },\n{ tensor = \"b\", role = \"output\", shape = [3, 4] },",
        ),
        "tensor = \"b\"",
        "has shape [3, 4], the first argument's is [4, 3]",
    );
}

#[test]
fn an_output_view_that_reaches_an_element_twice() {
    refuse(
        &one(
            "cast_nd",
            "{ tensor = \"a\", role = \"input\", shape = [3, 4] },\n{ tensor = \"b\", role = \"output\", shape = [3, 4], strides = [0, 1] },",
        ),
        "strides = [0, 1]",
        "an output view reaches an element twice",
    );
}

#[test]
fn malformed_views() {
    let pair = |first: &str| {
        one(
            "cast_nd",
            &format!("{first},\n{{ tensor = \"b\", role = \"output\", shape = [3, 4] }},"),
        )
    };
    refuse(
        &pair("{ tensor = \"a\", role = \"input\", strides = [1] }"),
        "strides = [1]",
        "`strides` needs a `shape`",
    );
    refuse(
        &pair("{ tensor = \"a\", role = \"input\", shape = [12], len = 12 }"),
        "len = 12",
        "`len` or `shape`, not both",
    );
    refuse(
        &pair("{ tensor = \"a\", role = \"input\", shape = [3, 0] }"),
        "[3, 0]",
        "each at least 1",
    );
    refuse(
        &pair("{ tensor = \"a\", role = \"input\", shape = [1, 1, 1, 1, 12] }"),
        "[1, 1, 1, 1, 12]",
        "1..=4 dimensions",
    );
    refuse(
        &pair("{ tensor = \"a\", role = \"input\", shape = [3, 4], strides = [8] }"),
        "strides = [8]",
        "1 strides for the 2 dimensions",
    );
    refuse(
        &pair("{ tensor = \"a\", role = \"input\", shape = [1, 1, 1, 1], strides = [40000, 1, 1, 1] }"),
        "40000",
        "stride 0 is 40000, a view of this rank holds at most 32767",
    );
}

#[test]
fn a_matmul_output_must_sum_over_k() {
    let mm = |out: &str| {
        one(
            "matmul_nd",
            &format!(
                "{{ tensor = \"a\", role = \"input\", shape = [3, 8, 4], strides = [8, 1, 0] }},\n\
                 {{ tensor = \"h\", role = \"input\", shape = [3, 8, 4], strides = [0, 0, 1] }},\n\
                 {{ tensor = \"of\", role = \"output\", shape = [3, 8, 4], strides = {out} }},"
            ),
        )
    };
    parse(&format!("{HEAD}{}", mm("[4, 0, 1]"))).unwrap();
    refuse(&mm("[4, 1, 1]"), "role = \"output\"", "its output's stride on K is 0");
    refuse(&mm("[1, 0, 1]"), "role = \"output\"", "an output view reaches an element twice");
    let flat = one("matmul_nd", "{ tensor = \"a\", role = \"input\", len = 12 },\n{ tensor = \"b\", role = \"input\", len = 12 },\n{ tensor = \"of\", role = \"output\", len = 12 },");
    refuse(&flat, "len = 12 },", "need `shape` ([M, K, N])");
}

#[test]
fn view_keys_on_an_f32_kernel_and_scalars_on_a_view_kernel() {
    let text = "{ tensor = \"of\", role = \"input\", shape = [12] },\n{ tensor = \"of\", role = \"output\" },";
    refuse(&one("copy", text), "shape = [12]", "`shape` and `strides` need a view kernel");
    let g = "[[graph]]\nkernel = \"cast_nd\"\nargs = [{ tensor = \"a\", role = \"input\", len = 12 }, { tensor = \"b\", role = \"output\" }]\nscalars = [{ u64 = 1 }]\n";
    refuse(g, "[[graph]]", "takes 0 scalars, 1 given");
}

#[test]
fn an_init_file_is_sized_by_its_dtype() {
    let dir = std::env::temp_dir().join(format!("ferry-typed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("h.bin"), [0u8; 24]).unwrap(); // 12 bf16
    std::fs::write(dir.join("short.bin"), [0u8; 23]).unwrap();
    let text = |f: &str| {
        HEAD.replace(
            "init = { iota = { start = 0.5, step = 1.0 } }",
            &format!("init = {{ file = \"{f}\" }}"),
        ) + GOOD
    };
    let ok = Workload::parse(&text("h.bin"), "w.toml", &dir, &BuiltinKernels, false).unwrap();
    assert_eq!(ok.host_reference(&BuiltinKernels).unwrap()[2], vec![0.0; 12]);
    let e =
        Workload::parse(&text("short.bin"), "w.toml", &dir, &BuiltinKernels, false).unwrap_err();
    assert!(
        e.message().contains("has 23 bytes, tensor `h` needs 24 (12 little-endian bf16)"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
