"""The graph of examples/workloads/diamond.toml built in Python from numpy arrays, run with all
five DFX subsystems on both arches, checked against a numpy golden and against `ferry report`."""
import json
import subprocess
from collections import Counter, defaultdict

import numpy as np
import pytest

import ferry
from conftest import ferry_bin

GROUPS, GROUP = 64, 256
N = GROUPS * GROUP


def diamond(x: np.ndarray) -> ferry.Graph:
    g = ferry.Graph("diamond")
    xt = g.input("x", x)
    out = g.output("out", shape=x.shape)
    for i in range(GROUPS):
        with g.scope("diamond", s=GROUP, u=GROUP, v=GROUP) as (s, u, v):
            g.task("copy", [xt[i * GROUP:(i + 1) * GROUP].input(), s.output()], name="root")
            g.task("scale", [s.input(), u.output()], scalars=[ferry.f32(2.0)], name="left")
            g.task("add_scalar", [s.input(), v.output()], scalars=[ferry.f32(3.0)], name="right")
            g.task("add", [u.input(), v.input(), out[i * GROUP:(i + 1) * GROUP].output()],
                   blocks=2, name="join")
    return g


def golden(x: np.ndarray) -> np.ndarray:
    return 2 * x + (x + 3)


@pytest.mark.parametrize("arch", ["a2a3", "a5"])
def test_diamond_from_numpy_with_all_dfx(arch, tmp_path):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(N).astype(np.float32)
    r = diamond(x).run(arch=arch, dfx=True, out=tmp_path / "run")
    np.testing.assert_allclose(r.outputs["out"], golden(x), rtol=1e-6)
    assert r.tasks == 4 * GROUPS
    assert r.per_kernel == {"copy": GROUPS, "scale": GROUPS, "add_scalar": GROUPS, "add": GROUPS}

    with r.profile() as p:
        t = p.tasks()
        assert len(t["task"]) == 4 * GROUPS, "one row per task"
        assert len(set(t["task"].tolist())) == 4 * GROUPS
        assert Counter(t["kernel"].tolist()) == {"copy": GROUPS, "scale": GROUPS, "add_scalar": GROUPS, "add": GROUPS}
        assert all(len(c) == len(t["task"]) for c in t.values())
        assert (t["end"] >= t["start"]).all()
        assert (t["blocks"][t["kernel"] == "add"] == 2).all()
        # Per-kernel totals equal `ferry report --json`'s.
        mine = defaultdict(lambda: [0, 0, 0])
        for k, e, b in zip(t["kernel"], t["exec_cycles"], t["blocks"]):
            mine[k][0] += 1
            mine[k][1] += int(e)
            mine[k][2] += int(b)
        cli = json.loads(subprocess.run([ferry_bin(), "report", "--json", r.profile_dir],
                                        check=True, capture_output=True, text=True).stdout)
        theirs = {k["kernel"]: [k["tasks"], k["exec_cycles"], k["blocks"]] for k in cli["kernels"]}
        assert dict(mine) == theirs
        assert p.report()["kernels"] == cli["kernels"]
        pmu = p.pmu()
        assert len(pmu["task"]) == 4 * GROUPS and set(pmu["task"].tolist()) == set(t["task"].tolist())
        assert Counter(pmu["kernel"].tolist()) == Counter(t["kernel"].tolist())
        assert len(pmu) > 7, "a column per counter"
        d = p.deps()
        kernel_of = dict(zip(t["task"].tolist(), t["kernel"].tolist()))
        pairs = Counter((kernel_of[a], kernel_of[b]) for a, b in zip(d["pred"].tolist(), d["succ"].tolist()) if a in kernel_of)
        assert all(b in kernel_of for b in d["succ"].tolist()), "every edge ends at a task of the run"
        # The diamond's own edges are among them (the scratch tensors' reuse adds more).
        for pair in [("copy", "scale"), ("copy", "add_scalar"), ("scale", "add"), ("add_scalar", "add")]:
            assert pairs[pair] > 0, (pair, pairs)
        sc = p.scopes()
        assert Counter(zip(sc["name"].tolist(), sc["phase"].tolist())) == {("diamond", "begin"): GROUPS, ("diamond", "end"): GROUPS}
        loss = p.loss()
        assert len(loss["lane"]) > 0
        assert (loss["produced"] == loss["collected"] + loss["dropped"]).all()
        assert {"chip_swimlane", "pmu", "dep_gen", "args_dump", "scope_stats"} <= set(loss["subsystem"].tolist())


def test_golden_mismatch_is_caught(tmp_path):
    x = np.arange(N, dtype=np.float32)
    r = diamond(x).run(arch="a2a3")
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(r.outputs["out"], golden(x) + 1, rtol=1e-6)
