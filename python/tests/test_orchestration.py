"""An orchestration library from Python: the decode step written in C++ (examples/decode-cpp,
built with `make` alone) runs examples/decode's workload on both arches and variants with every
DFX subsystem, its graph follows the context lengths, and it builds the Rust decode step's graph:
the same tasks per kernel and the same bf16 outputs."""

import ml_dtypes
import numpy as np
import pytest

import ferry
from conftest import ROOT, tool

WORKLOAD = ROOT / "examples/decode/workload.toml"
LENS = [5, 12, 19, 26]  # the workload's ctx_lens: iota from 5, step 7


def tasks(lens):
    """8 tasks per sequence with a context, and 2 per page of 8."""
    return sum(8 + 2 * -(-n // 8) for n in lens if n > 0)


@pytest.mark.parametrize("arch", ferry.ARCHES)
@pytest.mark.parametrize("variant", ["device", "host"])
def test_the_cpp_decode_step_runs_from_python(arch, variant, tmp_path):
    lib = tool("FERRY_CPP_DECODE", "the C++ decode step, built with make")
    r = ferry.run(workload=WORKLOAD, orchestration=lib, arch=arch, variant=variant, dfx=True,
                  out=tmp_path / "run")
    assert r.tasks == tasks(LENS), r
    assert r.per_kernel["matmul_nd"] == 4 * 4 and r.per_kernel["cast_nd"] == 2 * sum(
        -(-n // 8) for n in LENS), r.per_kernel
    out = r.outputs["out"]
    assert out.dtype == np.dtype(ml_dtypes.bfloat16) and out.size == 4 * 64
    assert np.isfinite(out.astype(np.float32)).all()
    with r.profile() as p:
        assert len(p.tasks()["kernel"]) == r.tasks


@pytest.mark.parametrize("variant", ["device", "host"])
def test_the_cpp_and_rust_decode_steps_agree(variant):
    cpp = tool("FERRY_CPP_DECODE", "the C++ decode step, built with make")
    rust = tool("FERRY_RUST_DECODE", "the Rust decode step, built with cargo")
    a = ferry.run(workload=WORKLOAD, orchestration=cpp, variant=variant)
    b = ferry.run(workload=WORKLOAD, orchestration=rust, variant=variant)
    assert (a.tasks, a.per_kernel) == (b.tasks, b.per_kernel)
    np.testing.assert_array_equal(a.outputs["out"], b.outputs["out"])


def test_a_workload_whose_function_has_no_library_is_refused():
    with pytest.raises(ferry.FerryError, match="decode_step"):
        ferry.run(workload=WORKLOAD)
