"""A pytest helper so a test reads like a scene test: inputs, a graph, a numpy golden, a
tolerance and the platforms it runs on.

    from ferry.testing import SceneTestCase

    class TestDouble(SceneTestCase):
        rtol = 1e-6

        def generate_args(self):
            return {"x": np.arange(1024, dtype=np.float32)}

        def build_graph(self, g, args):
            x = g.input("x", args["x"])
            y = g.output("y", shape=x.shape)
            g.task("scale", [x.input(), y.output()], scalars=[ferry.f32(2.0)])

        def compute_golden(self, args):
            return {"y": 2 * args["x"]}

pytest runs ``test_scene`` once per platform in ``ARCHES`` (a2a3, a5); a class narrows them with
``platforms``, passes run options (``dfx=True``, ``kernels=[...]``) with ``run_options``, and
can inspect each run in ``check_result``.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence

import numpy as np
import pytest

import ferry


def check_outputs(outputs: Mapping[str, np.ndarray], golden: Mapping[str, Any], *,
                  rtol: float = 0.0, atol: float = 0.0) -> None:
    """Every golden tensor is in ``outputs`` with its shape and within the tolerance
    (``numpy.testing.assert_allclose``); raises ``AssertionError`` naming the tensor, or
    ``ferry.ShapeError`` for a golden of another shape."""
    for name, want in golden.items():
        if name not in outputs:
            raise AssertionError(f"output `{name}` is not among the run's: {sorted(outputs)}")
        got, want = outputs[name], np.asarray(want)
        if got.shape != want.shape:
            raise ferry.ShapeError(f"output `{name}` has shape {got.shape}, the golden {want.shape}")
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"output `{name}`")


class SceneTestCase:
    """Base of a scene test: subclass as ``Test...`` and define ``generate_args``,
    ``build_graph`` and ``compute_golden``."""

    platforms: Sequence[str] = ferry.ARCHES
    rtol: float = 0.0
    atol: float = 0.0
    run_options: Dict[str, Any] = {}

    def generate_args(self) -> Dict[str, np.ndarray]:
        raise NotImplementedError("a scene test defines generate_args()")

    def build_graph(self, graph: ferry.Graph, args: Dict[str, np.ndarray]) -> None:
        raise NotImplementedError("a scene test defines build_graph(graph, args)")

    def compute_golden(self, args: Dict[str, np.ndarray]) -> Dict[str, Any]:
        raise NotImplementedError("a scene test defines compute_golden(args)")

    def check_result(self, result: ferry.Result, platform: str) -> None:
        """Called after the outputs matched; a test may check more (a profile, the figures)."""

    @pytest.fixture(params=ferry.ARCHES)
    def platform(self, request: Any) -> str:
        if request.param not in self.platforms:
            pytest.skip(f"{type(self).__name__} does not run on {request.param}")
        return request.param

    def test_scene(self, platform: str, tmp_path: Any) -> None:
        args = self.generate_args()
        graph = ferry.Graph(type(self).__name__)
        self.build_graph(graph, args)
        opts = dict(self.run_options)
        if opts.get("dfx") or any(opts.get(k) for k in ("swimlane", "pmu", "dep_gen", "dump_args", "scope_stats")):
            opts.setdefault("out", tmp_path / "run")
        result = graph.run(arch=platform, **opts)
        check_outputs(result.outputs, self.compute_golden(args), rtol=self.rtol, atol=self.atol)
        self.check_result(result, platform)
