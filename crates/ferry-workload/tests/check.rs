//! `ferry workload check`'s refusals: one test per kind of malformed workload, each asserting
//! the line the error names and its reason. A valid base is broken in one place per test (the
//! base itself is checked to pass, so each failure is the edit's).
use ferry_workload::{BuiltinKernels, Workload, WorkloadError};
use std::path::Path;

const HEAD: &str = r#"[workload]
name = "t"
verify = "host-reference"
[params]
n = 128
[[tensor]]
name = "x"
shape = ["n"]
init = { iota = { start = 0.0, step = 1.0 } }
[[tensor]]
name = "y"
shape = [128]
"#;

fn parse(text: &str) -> Result<Workload, WorkloadError> {
    Workload::parse(text, "w.toml", Path::new("."), &BuiltinKernels, false)
}

/// The line (1-based) of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).expect("needle in text") + 1
}

#[track_caller]
fn refuse(tail: &str, needle: &str, reason: &str) {
    let text = format!("{HEAD}{tail}");
    let e = parse(&text).expect_err("must be refused");
    let want = line_of(&text, needle);
    assert_eq!(e.line(), Some(want), "{e}");
    assert!(e.message().contains(reason), "`{e}` lacks `{reason}`");
    assert!(e.to_string().starts_with(&format!("w.toml:{want}:")), "{e}");
}

const GOOD: &str = r#"[[graph]]
repeat = 4
var = "i"
  [[graph.body]]
  kernel = "add"
  args = [
    { tensor = "x", role = "input", offset = "i * 32", len = 32 },
    { tensor = "x", role = "input", offset = "i * 32", len = 32 },
    { tensor = "y", role = "output", offset = "i * 32", len = 32 },
  ]
"#;

#[test]
fn the_base_is_valid_and_expands_to_its_tasks() {
    let wl = parse(&format!("{HEAD}{GOOD}")).unwrap();
    assert_eq!(wl.tasks(), 4);
    let want: Vec<f64> = (0..128).map(|i| 2.0 * i as f64).collect();
    assert_eq!(wl.host_reference(&BuiltinKernels).unwrap()[1], want);
}

#[test]
fn toml_syntax_error() {
    refuse("[[graph]]\nkernel = \"add\nargs = []\n", "kernel = \"add", "string");
}

#[test]
fn unknown_key() {
    refuse("[[graph]]\nkernel = \"copy\"\nblokcs = 2\n", "blokcs", "unknown field `blokcs`");
}

#[test]
fn unknown_kernel() {
    refuse("[[graph]]\nkernel = \"matmul\"\n", "matmul", "unknown kernel `matmul`");
}

#[test]
fn unknown_tensor() {
    refuse(
        "[[graph]]\nkernel = \"copy\"\nargs = [\n { tensor = \"x\", role = \"input\" },\n { tensor = \"z\", role = \"output\" },\n]\n",
        "\"z\"",
        "unknown tensor `z`",
    );
}

#[test]
fn view_out_of_range_in_a_later_iteration() {
    // Fine for i = 0..2; task 3 reads 96 + 64 > 128.
    let tail = GOOD.replace(
        "len = 32 },\n    { tensor = \"x\", role = \"input\", offset = \"i * 32\", len = 32 }",
        "len = 32 },\n    { tensor = \"x\", role = \"input\", offset = \"i * 32\", len = 64 }",
    );
    refuse(
        &tail,
        "len = 64",
        "task 3 ('add'): input view of `x` out of range: offset 96 + len 64 > 128 elements",
    );
}

#[test]
fn an_add_input_shorter_than_its_output() {
    // The kernel table says add's inputs cover its output: the second input is 16 long.
    let tail =
        GOOD.replace("len = 32 },\n    { tensor = \"y\"", "len = 16 },\n    { tensor = \"y\"");
    assert_ne!(tail, GOOD);
    refuse(
        &tail,
        "len = 16",
        "task 0 ('add'): kernel `add` needs each input at least as long as its output `y` (32 elements); `x` has 16",
    );
    // Longer inputs are fine (the kernel reads the output's length of each).
    let longer = GOOD.replace(
        "offset = \"i * 32\", len = 32 },\n    { tensor = \"y\"",
        "offset = 0, len = 64 },\n    { tensor = \"y\"",
    );
    assert_ne!(longer, GOOD);
    parse(&format!("{HEAD}{longer}")).unwrap();
}

#[test]
fn scalar_of_the_wrong_type() {
    refuse(
        "[[graph]]\nkernel = \"scale\"\nargs = [{ tensor = \"x\", role = \"inout\" }]\nscalars = [\n  { u64 = 2 },\n]\n",
        "u64 = 2",
        "kernel `scale` reads this scalar as f32",
    );
}

#[test]
fn wrong_tensor_count() {
    refuse(
        "[[graph]]\nname = \"lonely\"\nkernel = \"add\"\nargs = [{ tensor = \"x\", role = \"input\" }]\n",
        "[[graph]]",
        "task 'lonely': kernel `add` takes 3..=3 tensors, 1 given",
    );
}

#[test]
fn too_many_blocks() {
    refuse(
        "[[graph]]\nkernel = \"attn_merge\"\nblocks = 2\nargs = [{ tensor = \"x\", role = \"input\" }, { tensor = \"y\", role = \"output\" }]\nscalars = [{ u64 = 1 }, { u64 = 1 }]\n",
        "blocks = 2",
        "blocks = 2, kernel `attn_merge` takes 1..=1",
    );
}

#[test]
fn unknown_name_in_an_expression() {
    refuse(
        "[[graph]]\nkernel = \"copy\"\nargs = [\n { tensor = \"x\", role = \"input\", offset = \"m * 2\" },\n { tensor = \"y\", role = \"output\" },\n]\n",
        "m * 2",
        "unknown name `m`",
    );
}

#[test]
fn repeat_count_with_a_loop_variable() {
    refuse(
        "[[graph]]\nrepeat = 2\nvar = \"i\"\n  [[graph.body]]\n  repeat = \"i + 1\"\n  var = \"j\"\n",
        "i + 1",
        "repeat count must be constant",
    );
}

#[test]
fn task_total_over_the_limit_before_expansion() {
    // 3.6 billion tasks: only a count from the repeat counts can name that total; an
    // expansion would never get there.
    let tail = "[[graph]]\nrepeat = 60000\nvar = \"i\"\n  [[graph.body]]\n  repeat = 60000\n  var = \"j\"\n    [[graph.body.body]]\n    kernel = \"add_scalar\"\n    args = [{ tensor = \"x\", role = \"inout\" }]\n    scalars = [{ f32 = 1.0 }]\n";
    refuse(tail, "[[graph.body.body]]", "expands to more than 4194304 tasks");
    let e = parse(&format!("{HEAD}{tail}")).expect_err("must be refused");
    assert!(e.message().contains("(at least 3600000000)"), "counted, not expanded: {e}");
}

#[test]
fn init_file_of_the_wrong_size_is_refused_before_reading() {
    let dir = std::env::temp_dir().join(format!("ferry-wl-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("x.bin"), [0u8; 12]).unwrap();
    let text = format!(
        "{}[[tensor]]\nname = \"f\"\nshape = [4]\ninit = {{ file = \"x.bin\" }}\n{GOOD}",
        HEAD
    );
    let e = Workload::parse(&text, "w.toml", &dir, &BuiltinKernels, false).unwrap_err();
    assert_eq!(e.line(), Some(line_of(&text, "x.bin")), "{e}");
    assert!(e.message().contains("has 12 bytes, tensor `f` needs 16"), "{e}");
    std::fs::write(dir.join("x.bin"), [0u8; 16]).unwrap();
    Workload::parse(&text, "w.toml", &dir, &BuiltinKernels, false).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_role() {
    refuse(
        "[[graph]]\nkernel = \"copy\"\nargs = [\n { tensor = \"x\", role = \"read\" },\n { tensor = \"y\", role = \"output\" },\n]\n",
        "\"read\"",
        "role `read` is not input, output or inout",
    );
}

#[test]
fn scratch_arena_exhausted() {
    refuse(
        "[[graph]]\nscope = \"s\"\nscratch = [\n  { name = \"tmp\", len = 64 },\n]\n",
        "\"tmp\"",
        "scratch arena exhausted",
    );
}

#[test]
fn nesting_too_deep() {
    let mut t = String::new();
    let mut path = String::from("graph");
    for d in 0..9 {
        t.push_str(&format!("[[{path}]]\nscope = \"s{d}\"\n"));
        path.push_str(".body");
    }
    // The entry's error names its `[[...]]` header line.
    refuse(&t, "[[graph.body.body.body.body.body.body.body.body]]", "nest deeper than 8");
}

#[test]
fn loop_variable_that_is_not_fresh() {
    refuse(
        "[[graph]]\nrepeat = 2\nvar = \"i\"\n  [[graph.body]]\n  repeat = 2\n  var = \"n\"\n",
        "var = \"n\"",
        "loop variable `n` is not a fresh name",
    );
}

#[test]
fn constant_arithmetic_that_underflows() {
    refuse(
        "[[graph]]\nkernel = \"copy\"\nargs = [\n { tensor = \"x\", role = \"input\", len = \"n - 200\" },\n { tensor = \"y\", role = \"output\" },\n]\n",
        "n - 200",
        "goes below zero",
    );
}

#[test]
fn nothing_to_verify() {
    let text = HEAD.replace("verify = \"host-reference\"\n", "") + GOOD;
    let e = parse(&text).unwrap_err();
    assert_eq!(e.line(), Some(1), "{e}");
    assert!(e.message().contains("nothing to verify"), "{e}");
}

#[test]
fn unsupported_dtype() {
    let text = HEAD.replace("shape = [128]", "dtype = \"f64\"\nshape = [128]") + GOOD;
    let e = parse(&text).unwrap_err();
    assert_eq!(e.line(), Some(line_of(&text, "f64")), "{e}");
    assert!(e.message().contains("dtype `f64` is not supported (one of f32, f16, bf16"), "{e}");
}

#[test]
fn a_typed_tensor_given_to_an_f32_kernel() {
    let text = HEAD.replace("shape = [128]", "dtype = \"f16\"\nshape = [128]") + GOOD;
    let e = parse(&text).unwrap_err();
    assert_eq!(e.line(), Some(line_of(&text, "tensor = \"y\"")), "{e}");
    assert!(e.message().contains("kernel `add` takes f32 tensors, `y` is f16"), "{e}");
}

#[test]
fn every_example_workload_checks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workloads");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            for small in [false, true] {
                Workload::load(&p, &BuiltinKernels, small).unwrap_or_else(|e| panic!("{e}"));
            }
            n += 1;
        }
    }
    assert!(n >= 5);
    let big = Workload::load(&dir.join("graph-100k.toml"), &BuiltinKernels, false).unwrap();
    assert!(big.tasks() >= 100_000);
    assert!(big.program().len() < 200, "the loop form keeps the program small");
}

#[test]
fn hostile_nesting_is_refused_before_deserializing() {
    let deep = format!("[[graph{}]]\nscope = \"x\"\n", ".body".repeat(5000));
    refuse(&deep, "[[graph.body", "nests deeper than 8 bodies");
    let inline = format!(
        "[[graph]]\nscope = \"x\"\nbody = {}{}\n",
        "[{ scope = \"y\", body = ".repeat(3000),
        "]".repeat(3000)
    );
    refuse(&inline, "body = [", "nested brackets and braces");
}

/// Each `scope = "..."` entry is one site, named by its label, however often a repeat expands it;
/// the site is the index of the scope's opcode in the program (what the device records carry).
#[test]
fn scopes_are_named_by_site() {
    let tail = r#"[[graph]]
repeat = 4
var = "g"
  [[graph.body]]
  scope = "outer"
  scratch = [{ name = "s", len = 32 }]
    [[graph.body.body]]
    kernel = "copy"
    args = [{ tensor = "x", role = "input", offset = "g * 32", len = 32 }, { tensor = "s", role = "output" }]
    [[graph.body.body]]
    scope = "inner"
      [[graph.body.body.body]]
      kernel = "copy"
      args = [{ tensor = "s", role = "input" }, { tensor = "y", role = "output", offset = "g * 32", len = 32 }]
"#;
    let head = HEAD.replacen("name = \"t\"\n", "name = \"t\"\nscratch_bytes = 256\n", 1);
    let text = format!("{head}{tail}");
    let w = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let s = w.scopes();
    let names: Vec<(&str, String)> = s.iter().map(|s| (s.name.as_str(), s.at.clone())).collect();
    let at = |label: &str| format!("w.toml:{}", line_of(&text, label));
    assert_eq!(names, [("outer", at("scope = \"outer\"")), ("inner", at("scope = \"inner\""))]);
    for sc in s {
        let word: usize = sc.site.strip_prefix("workload:").unwrap().parse().unwrap();
        assert_eq!(w.program()[word], ferry_runtime::device::workload::OP_SCOPE, "{sc:?}");
    }
    assert_ne!(s[0].site, s[1].site);
}

#[test]
fn a_value_of_the_wrong_form_names_the_forms_accepted() {
    refuse(
        "[[graph]]\nrepeat = 1.5\nkernel = \"add\"\n",
        "repeat = 1.5",
        "expected an integer or a constant expression in quotes",
    );
    refuse(
        "[[graph]]\nkernel = \"scale\"\nargs = [{ tensor = \"x\", role = \"input\" }, \
         { tensor = \"y\", role = \"output\" }]\nscalars = [{ f32 = true }]\n",
        "scalars",
        "expected a number (e.g. 0.5) or the name of a parameter in quotes",
    );
    let text = HEAD.replace("init = { iota = { start = 0.0, step = 1.0 } }", "init = 7");
    let e = parse(&text).expect_err("must be refused");
    assert!(e.message().contains("\"zeros\" or a table with one of constant"), "{e}");
    assert!(!e.to_string().contains("untagged"), "{e}");
}

#[test]
fn a_long_value_is_echoed_cut() {
    let name = "k".repeat(5_000);
    let text = format!("{HEAD}[[graph]]\nkernel = \"{name}\"\n");
    let e = parse(&text).expect_err("must be refused");
    assert!(e.message().chars().count() < 400, "{e}");
    assert!(e.message().contains('…'), "{e}");
}
