//! The compiled program and its interpreter (`ferry_runtime::device::workload`): the device
//! side validates what it reads and refuses a malformed program with a typed status before
//! submitting anything, on every variant; the runner stays usable afterwards.
use ferry_runtime::device::task::TensorInfo;
use ferry_runtime::device::workload::{self as w, ProgramFault};
use ferry_runtime::host::graph::GraphBuilder;
use ferry_runtime::host::{DeviceRunner, RunArgs, RunnerConfig, TensorInit, Variant};
use ferry_runtime::{DeviceFault, RunError, SubmitError};
use ferry_sim::Arch;
use ferry_workload::{BuiltinKernels, Workload};
use std::path::Path;

const DIAMOND: &str = r#"[workload]
name = "d"
verify = "host-reference"
scratch_bytes = 1024
outputs = ["out"]
[[tensor]]
name = "x"
shape = [64]
init = { iota = { start = 0.0, step = 1.0 } }
[[tensor]]
name = "out"
shape = [64]
[[graph]]
repeat = 4
var = "g"
  [[graph.body]]
  scope = "s"
  scratch = [{ name = "s", len = 16 }, { name = "u", len = 16 }]
    [[graph.body.body]]
    kernel = "scale"
    args = [{ tensor = "x", role = "input", offset = "g * 16", len = 16 }, { tensor = "s", role = "output" }]
    scalars = [{ f32 = 2.0 }]
    [[graph.body.body]]
    kernel = "add_scalar"
    args = [{ tensor = "s", role = "input" }, { tensor = "u", role = "output" }]
    scalars = [{ f32 = 1.0 }]
    [[graph.body.body]]
    kernel = "add"
    args = [{ tensor = "u", role = "input" }, { tensor = "s", role = "input" }, { tensor = "out", role = "output", offset = "g * 16", len = 16 }]
"#;

fn diamond() -> Workload {
    Workload::parse(DIAMOND, "d.toml", Path::new("."), &BuiltinKernels, false).unwrap()
}

/// Runs `program` through a host graph builder over two 64-element tensors; the tasks it
/// recorded, or the refusal.
fn interpret(program: &[u32]) -> Result<usize, SubmitError> {
    let t = |i: u64| TensorInfo { addr: 0x1000 * (i + 1), len: 64 };
    let mut gb = GraphBuilder::new(vec![t(0), t(1)], vec![], (0x10_0000, 1024), None);
    let r = w::run_words(&mut gb, program);
    let n = gb.tasks().len();
    if let Err(SubmitError::BadProgram { fault, .. }) = r {
        // Validation runs before the first submit; only arithmetic that depends on a loop
        // variable's value (validated with every variable at 0) can fail later.
        if fault != ProgramFault::Arithmetic {
            assert_eq!(n, 0, "nothing is submitted before validation ({fault:?})");
        }
    }
    r.map(|()| n)
}

fn fault(program: &[u32]) -> ProgramFault {
    match interpret(program) {
        Err(SubmitError::BadProgram { fault, .. }) => fault,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_good_program_runs_and_each_corruption_is_refused_with_its_fault() {
    let p = diamond().program().to_vec();
    assert_eq!(interpret(&p), Ok(12));
    let edit = |i: usize, v: u32| {
        let mut q = p.clone();
        q[i] = v;
        q
    };
    assert_eq!(fault(&edit(0, 0xdead)), ProgramFault::BadHeader);
    assert_eq!(fault(&p[..p.len() - 1]), ProgramFault::BadHeader, "total words disagree");
    let mut short = p[..p.len() - 3].to_vec();
    short[2] = short.len() as u32;
    assert!(matches!(fault(&short), ProgramFault::Truncated | ProgramFault::BadExpr));
    assert_eq!(fault(&edit(6, 13)), ProgramFault::TaskCount);
    // The repeat: op var body count-expr; its body length past the end.
    let r = w::HEADER_WORDS;
    assert_eq!(p[r], w::OP_REPEAT);
    assert_eq!(fault(&edit(r + 2, 10_000)), ProgramFault::Truncated);
    assert_eq!(fault(&edit(r + 1, 7)), ProgramFault::UnboundVar, "var slot beyond the header's");
    assert_eq!(fault(&edit(r, 99)), ProgramFault::BadOpcode);
    // The scope right after the repeat's count expression (n = 3: E_CONST lo hi).
    let s = r + 3 + 4;
    assert_eq!(p[s], w::OP_SCOPE);
    assert_eq!(
        fault(&edit(s + 3, 9)),
        ProgramFault::BadTensorRef,
        "scratch slot beyond the header's"
    );
    assert_eq!(fault(&edit(5, w::MAX_SLOTS + 1)), ProgramFault::BadHeader);
    // The first task's first argument names a run tensor that does not exist.
    // The scope: op n_scratch body, then 2 x (slot, 4-word length expression).
    let t = s + 3 + 2 * 5;
    assert_eq!(p[t], w::OP_TASK);
    let arg = t + 4 + 1 + p[t + 4] as usize;
    assert_eq!(fault(&edit(arg, 5)), ProgramFault::BadTensorRef);
    assert_eq!(fault(&edit(arg, w::SCRATCH_REF | 3)), ProgramFault::BadTensorRef);
    assert_eq!(fault(&edit(arg + 1, 0)), ProgramFault::BadOpcode, "role 0");
    // Its offset expression: `g * 16` = VAR g, CONST 16, MUL; a stray operator underflows.
    assert_eq!(p[arg + 3], w::E_VAR);
    assert_eq!(fault(&edit(arg + 3, w::E_ADD)), ProgramFault::BadExpr);
    assert_eq!(fault(&edit(arg + 4, 3)), ProgramFault::UnboundVar);
}

/// Every single-word mutation of a program (bounded set) is either run or refused; none
/// panics or reads out of range (a panic would fail the test; the slice reads are checked).
#[test]
fn mutated_programs_never_panic() {
    let p = diamond().program().to_vec();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut refused = 0;
    for i in 0..p.len() {
        for _ in 0..8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut q = p.clone();
            q[i] = match x % 4 {
                0 => x as u32,
                1 => q[i].wrapping_add(1),
                2 => q[i].wrapping_sub(1),
                _ => (x >> 32) as u32 % 16,
            };
            if interpret(&q).is_err() {
                refused += 1;
            }
        }
    }
    assert!(refused > p.len(), "most mutations are caught: {refused}");
}

fn run(
    runner: &mut DeviceRunner,
    id: u32,
    args: RunArgs,
) -> Result<ferry_runtime::RunOutput, RunError> {
    runner.run(id, args)
}

/// On the device (full path: the orch-workload object reads the program from device memory)
/// and host-built: a corrupted program is a typed fault, the good one runs afterwards on the
/// same runner and verifies.
#[test]
fn the_runner_refuses_a_corrupt_program_and_stays_usable() {
    let _bound = ferry_watchdog::bound("the workload's runs on the simulated chip");
    let wl = diamond();
    for arch in [Arch::A2a3, Arch::A5] {
        for (id, variant) in [(0, Variant::DeviceOrchestrated), (1, Variant::HostBuiltGraph)] {
            // One runner per variant: the device keeps the first AICPU program (Path A latch).
            let mut runner = DeviceRunner::new(RunnerConfig::small(arch)).unwrap();
            runner.register_callable(id, wl.callable(variant)).unwrap();
            let good = wl.run_args().unwrap();
            let mut bad = good.clone();
            let Some(TensorInit::Data(words)) = bad.tensors.last_mut() else { panic!() };
            let r = w::HEADER_WORDS;
            words[r + 2] = f32::from_bits(100_000); // the repeat's body runs past the end
            match run(&mut runner, id, bad) {
                Err(RunError::Fault(DeviceFault::Submit(SubmitError::BadProgram {
                    fault,
                    at,
                }))) => {
                    assert_eq!(
                        (fault, at),
                        (ProgramFault::Truncated, (r + 2) as u64),
                        "{variant:?}"
                    );
                }
                other => panic!("{arch:?} {variant:?}: {other:?}"),
            }
            let mut missing = good.clone();
            missing.scalars[0] = 99;
            assert!(matches!(
                run(&mut runner, id, missing),
                Err(RunError::Fault(DeviceFault::Submit(SubmitError::MissingTensor { .. })))
            ));
            let out = run(&mut runner, id, good).unwrap();
            let sum = wl.verify(&out, &BuiltinKernels).unwrap();
            // out = (2x + 1) + 2x over x = 0..64.
            assert_eq!(sum, (0..64).map(|x| 4.0 * x as f64 + 1.0).sum::<f64>());
            // Verification can fail: one element off, or a task short.
            let mut wrong = out.clone();
            wrong.tensors[1].as_mut().unwrap()[5] += 1e-3;
            assert!(matches!(
                wl.verify(&wrong, &BuiltinKernels),
                Err(ferry_workload::VerifyError::Mismatch { index: 5, .. })
            ));
            let mut short = out.clone();
            short.stats.tasks -= 1;
            assert!(matches!(
                wl.verify(&short, &BuiltinKernels),
                Err(ferry_workload::VerifyError::TaskCount { got: 11, want: 12 })
            ));
            runner.finalize().unwrap();
        }
    }
}

#[test]
fn an_expected_checksum_or_values_that_differ_fail_verification() {
    let _bound = ferry_watchdog::bound("the workload's run on the simulated chip");
    let text = DIAMOND.replace("verify = \"host-reference\"\n", "")
        + "[[expect]]\ntensor = \"out\"\nchecksum = 8128.0\n";
    let wl = Workload::parse(&text, "d.toml", Path::new("."), &BuiltinKernels, false).unwrap();
    let mut runner = DeviceRunner::new(RunnerConfig::small(Arch::A2a3)).unwrap();
    runner.register_callable(0, wl.callable(Variant::DeviceOrchestrated)).unwrap();
    let out = runner.run(0, wl.run_args().unwrap()).unwrap();
    assert_eq!(wl.verify(&out, &BuiltinKernels), Ok(8128.0));
    let off = text.replace("checksum = 8128.0", "checksum = 8129.0");
    let wl2 = Workload::parse(&off, "d.toml", Path::new("."), &BuiltinKernels, false).unwrap();
    match wl2.verify(&out, &BuiltinKernels) {
        Err(ferry_workload::VerifyError::Checksum { at, got, .. }) => {
            assert_eq!(got, 8128.0);
            assert_eq!(
                at,
                format!("d.toml:{}", off.lines().position(|l| l == "[[expect]]").unwrap() + 1)
            );
        }
        other => panic!("{other:?}"),
    }
    runner.finalize().unwrap();
}
