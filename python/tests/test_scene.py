"""The scene-test helper, and the arrays a run hands back."""
import numpy as np
import pytest

import ferry
from ferry.testing import SceneTestCase, check_outputs


class TestChain(SceneTestCase):
    """x -> scale 0.5 -> add_scalar 1 -> mul with y, on both platforms, with the swimlane on."""

    rtol = 1e-6
    run_options = {"swimlane": 2}

    def generate_args(self):
        rng = np.random.default_rng(1)
        return {"x": rng.standard_normal((8, 128)).astype(np.float32),
                "y": rng.standard_normal((8, 128)).astype(np.float32)}

    def build_graph(self, g, args):
        x, y = g.input("x", args["x"]), g.input("y", args["y"])
        out = g.output("out", shape=(8, 128))
        for r in range(8):
            row = slice(r * 128, (r + 1) * 128)
            with g.scope("row", t=128) as (t,):
                g.task("scale", [x[row].input(), t.output()], scalars=[ferry.f32(0.5)])
                g.task("add_scalar", [t.inout()], scalars=[ferry.f32(1.0)])
                g.task("mul", [t.input(), y[row].input(), out[row].output()])

    def compute_golden(self, args):
        return {"out": (args["x"] * 0.5 + 1.0) * args["y"]}

    def check_result(self, result, platform):
        assert result.outputs["out"].shape == (8, 128)
        assert result.tasks == 24
        with result.profile() as p:
            assert len(p.tasks()["task"]) == 24


class TestOnlyA5(SceneTestCase):
    platforms = ("a5",)

    def generate_args(self):
        return {"x": np.arange(64, dtype=np.float32)}

    def build_graph(self, g, args):
        g.task("add_scalar", [g.input("x", args["x"]).inout()], scalars=[ferry.f32(1.0)])

    def compute_golden(self, args):
        return {"x": args["x"] + 1}


def test_check_outputs_catches_a_wrong_golden_or_shape():
    out = {"y": np.arange(4, dtype=np.float32)}
    check_outputs(out, {"y": np.arange(4)}, rtol=0)
    with pytest.raises(AssertionError, match="output `y`"):
        check_outputs(out, {"y": np.arange(4) + 1e-3}, rtol=1e-6)
    with pytest.raises(ferry.ShapeError):
        check_outputs(out, {"y": np.zeros((2, 2))})
    with pytest.raises(AssertionError, match="not among"):
        check_outputs(out, {"z": np.zeros(4)})


def _root(a):
    while isinstance(a, np.ndarray) and a.base is not None:
        assert not a.flags.owndata
        a = a.base
    return a


def test_a_64_mib_output_comes_back_without_a_copy():
    n = 16 << 20  # 64 MiB of f32
    g = ferry.Graph("big")
    x = g.input("x", np.ones(n, np.float32))
    g.task("add_scalar", [x.inout()], scalars=[ferry.f32(1.0)])
    r = g.run()
    out = r.outputs["x"]
    assert out.shape == (n,) and out.dtype == np.float32 and out[0] == 2.0 and out[-1] == 2.0
    # The array does not own its memory: its base is the run's own buffer, handed over by
    # ferry, not a fresh numpy allocation.
    assert not out.flags.owndata
    root = _root(out)
    assert not isinstance(root, (np.ndarray, bytes, bytearray)), type(root)


def test_examples_and_workload_files_run(tmp_path):
    r = ferry.run("vector", small=True, arch="a5", variant="host")
    assert r.tasks > 0 and r.outputs and all(a.dtype == np.float32 for a in r.outputs.values())
    wl = ferry.run(workload=ferry_root() / "examples/workloads/diamond.toml", small=True)
    assert set(wl.outputs) >= {"x", "out"}
    i = np.arange(wl.outputs["out"].size, dtype=np.float64)
    np.testing.assert_array_equal(wl.outputs["out"], 3 * i + 3)


def test_device_options_reach_the_chip(tmp_path):
    r = ferry.run("vector", small=True, swimlane=1, aic=1, aiv=2, aicpu_threads=2, out=tmp_path / "r")
    with r.profile() as p:
        assert len(p.report()["cores"]) == 3, "one AIC and two AIV"
        assert set(p.tasks()["core"].tolist()) <= {0, 1, 2}


def test_report_and_diff_are_dicts(tmp_path):
    a = ferry.run("vector", small=True, dfx=True, out=tmp_path / "a")
    b = ferry.run("vector", small=True, dfx=True, out=tmp_path / "b", repeat=2)
    with a.profile() as pa, ferry.Profile(b.runs[-1] if b.runs else b.profile_dir) as pb:
        rep = pa.report()
        assert {k["kernel"] for k in rep["kernels"]} == set(a.per_kernel)
        d = ferry.diff(pa, pb)
        assert isinstance(d, dict) and d


def ferry_root():
    from conftest import ROOT
    return ROOT
