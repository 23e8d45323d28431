"""A kernel library written in C (examples/kernel-template-c, built with `make` alone) loads and
runs from Python as a Rust one does, and a block it refuses is a KernelFault naming it."""

import numpy as np
import pytest

import ferry
from conftest import tool


@pytest.mark.parametrize("arch", ferry.ARCHES)
def test_c_saxpy_and_clamp_run_and_match_numpy(arch):
    lib = tool("FERRY_C_KERNELS", "the C template library, built with make")
    n, chunk = 4096, 1024
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, np.float32)
    g = ferry.Graph("c-saxpy")
    tx, ty = g.input("x", x), g.input("y", y)
    out = g.output("out", (n,))
    for c in range(n // chunk):
        s = slice(c * chunk, (c + 1) * chunk)
        g.task("saxpy", [tx[s].input(), ty[s].input(), out[s].output()], scalars=[ferry.f32(2.0)],
               blocks=2)
        g.task("clamp", [out[s].inout()], scalars=[ferry.f32(0.0), ferry.f32(1001.0)])
    r = g.run(kernels=[lib], arch=arch)
    assert r.per_kernel == {"saxpy": 4, "clamp": 4}, r.per_kernel
    np.testing.assert_array_equal(r.outputs["out"], np.minimum(2 * x + 1, 1001))


def test_a_block_the_c_kernel_refuses_is_a_kernel_fault():
    lib = tool("FERRY_C_KERNELS", "the C template library, built with make")
    g = ferry.Graph("c-short")
    x = g.input("x", np.zeros(512, np.float32))
    y = g.input("y", np.zeros(1024, np.float32))
    out = g.output("out", (1024,))
    g.task("saxpy", [x.input(), y.input(), out.output()], scalars=[ferry.f32(2.0)], blocks=4,
           name="short_x")
    with pytest.raises(ferry.KernelFault, match="a tensor has 512 elements, the kernel needs 1024") as e:
        g.run(kernels=[lib])
    f = e.value
    assert (f.kernel, f.task, f.library) == ("saxpy", 0, "kernel-template-c"), str(f)
    assert f.entry == "task `short_x` (kernel saxpy)"
