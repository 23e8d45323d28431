"""ferry from Python: run graphs on a simulated chip with numpy in and out, read profiles as tables.

    import numpy as np, ferry
    g = ferry.Graph("double")
    x = g.input("x", np.arange(8, dtype=np.float32))
    y = g.output("y", shape=(8,))
    g.task("scale", [x.input(), y.output()], scalars=[ferry.f32(2.0)])
    r = g.run(arch="a5")
    assert (r.outputs["y"] == 2 * np.arange(8)).all()

`run` runs a built-in example or a workload file; `Graph.run` a graph built here. Every failure
is a `FerryError` subclass carrying its error's fields (`WorkloadError.line`, `KernelFault.kernel`
and `.task`, ...). `Profile` opens a run's profile: `tasks()`, `blocks()` and `loss()` are dicts
of numpy arrays (`pandas.DataFrame(p.tasks())` works as is), `report()` and `diff()` dicts.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from . import _ferry
from ._ferry import (  # noqa: F401  (re-exported)
    FerryError,
    InternalError,
    KernelFault,
    KernelsError,
    OptionsError,
    ProfileError,
    RunFailed,
    WorkloadError,
    WrongResult,
)
from ._graph import DTYPES, Arg, DtypeError, Graph, Scalar, ShapeError, Tensor, f32, u64  # noqa: F401

ARCHES = tuple(_ferry.ARCHES)
"""The simulated chips: ``("a2a3", "a5")``."""

__all__ = [
    "ARCHES", "DTYPES", "Arg", "DtypeError", "FerryError", "Graph", "InternalError", "KernelFault",
    "KernelsError", "OptionsError", "Profile", "ProfileError", "Result", "RunFailed", "Scalar", "ShapeError",
    "Tensor", "WorkloadError", "WrongResult", "check_workload", "diff", "f32", "run", "u64",
]


class Result:
    """What a run did: its outputs as numpy arrays, its figures and where its profile went.

    ``outputs`` maps tensor names to arrays of their dtypes (``DTYPES``; a built-in example's
    are float32, named ``t0``, ``t1``, ...); each array is a view of the run's own buffer,
    handed over without a copy.
    """

    def __init__(self, raw: Dict[str, Any], shapes: Optional[Dict[str, tuple]] = None) -> None:
        case = raw["cases"][0]
        self.raw = raw
        self.name: str = case["name"]
        self.tasks: int = case["tasks"]
        self.per_kernel: Dict[str, int] = case["per_kernel"]
        self.wall_s: float = case["wall_s"]
        self.checksum: float = case["checksum"]
        self.profile_dir: Optional[str] = case["profile"]
        self.runs: List[str] = case["runs"]
        self.out: Optional[str] = raw["out"]
        named = case["named"] or {f"t{i}": a for i, a in enumerate(case["outputs"]) if a is not None}
        typed = case.get("typed", {})
        shapes = shapes or {}
        self.outputs: Dict[str, np.ndarray] = {
            k: _typed(a, typed.get(k), shapes.get(k)) for k, a in named.items()
        }

    def profile(self) -> "Profile":
        """Opens this run's profile (raises ``ProfileError`` when the run collected none)."""
        if self.profile_dir is None:
            raise ProfileError("this run collected no profile (turn a DFX subsystem on and give out=)")
        return Profile(self.profile_dir)

    def __repr__(self) -> str:
        return f"Result({self.name!r}, tasks={self.tasks}, outputs={list(self.outputs)})"


def _typed(words: np.ndarray, typed: Optional[tuple], shape: Optional[tuple]) -> np.ndarray:
    """A run's word buffer as its tensor: viewed as the dtype, cut to the elements (a word
    holds up to four), reshaped; every step a view of the same memory, never a copy."""
    a = words
    if typed is not None:
        name, elems = typed
        a = a.view(DTYPES[name])[:elems]
    return a.reshape(shape) if shape is not None else a


def run(
    example: Optional[str] = None,
    *,
    workload: Union[str, os.PathLike, None] = None,
    arch: str = "a2a3",
    variant: str = "device",
    small: bool = False,
    kernels: Sequence[Union[str, os.PathLike]] = (),
    orchestration: Union[str, os.PathLike, None] = None,
    swimlane: int = 0,
    pmu: int = 0,
    dep_gen: bool = False,
    dump_args: int = 0,
    scope_stats: bool = False,
    dfx: bool = False,
    out: Union[str, os.PathLike, None] = None,
    force: bool = False,
    repeat: int = 1,
    warmup: int = 0,
    kernel_budget: Optional[float] = None,
    aic: Optional[int] = None,
    aiv: Optional[int] = None,
    aicpu_threads: Optional[int] = None,
) -> Result:
    """Runs a built-in example (``"vector"``, ``"paged-attention"``, ``"storm"``) or a workload
    file on a simulated chip, as ``ferry run`` does, and returns its ``Result``.

    ``orchestration`` is the library (C, C++ or Rust, docs/orchestration.md) whose function a
    workload's ``[orchestration]`` table names. ``dfx=True`` turns on all five DFX subsystems
    (swimlane 4, PMU 2, DepGen, ArgsDump 3, ScopeStats); they need ``out``. ``aic``, ``aiv`` and ``aicpu_threads`` are the device
    options (default: the arch's). Raises ``OptionsError``, ``WorkloadError``,
    ``KernelsError``, ``RunFailed``/``KernelFault`` or ``WrongResult``.
    """
    if (example is None) == (workload is None):
        raise OptionsError("give exactly one of an example name or workload=")
    kind, target = ("example", example) if workload is None else ("workload", os.fspath(workload))
    opts = _options(
        arch=arch, variant=variant, small=small, kernels=kernels, swimlane=swimlane, pmu=pmu,
        dep_gen=dep_gen, dump_args=dump_args, scope_stats=scope_stats, dfx=dfx, out=out,
        force=force, repeat=repeat, warmup=warmup, kernel_budget=kernel_budget, aic=aic, aiv=aiv,
        aicpu_threads=aicpu_threads,
    )
    if orchestration is not None:
        opts["orchestration"] = os.fspath(orchestration)
    return Result(_ferry.run(kind, target, **opts))


def _options(*, dfx: bool, kernels: Iterable[Any], out: Any, **kw: Any) -> Dict[str, Any]:
    if dfx:
        kw.update(swimlane=kw["swimlane"] or 4, pmu=kw["pmu"] or 2, dep_gen=True,
                  dump_args=kw["dump_args"] or 3, scope_stats=True)
    kw["kernels"] = [os.fspath(k) for k in kernels]
    kw["out"] = None if out is None else os.fspath(out)
    return kw


def check_workload(path: Union[str, os.PathLike], *, kernels: Sequence[Union[str, os.PathLike]] = (),
                   small: bool = False) -> Dict[str, Any]:
    """Checks a workload file without running it (``ferry workload check``): returns its
    ``name``, ``tensors`` and ``tasks``, or raises ``WorkloadError`` naming the line."""
    return _ferry.check_workload(os.fspath(path), kernels=[os.fspath(k) for k in kernels], small=small)


def _column(v: Any) -> np.ndarray:
    return np.asarray(v, dtype=object) if isinstance(v, list) else v


class Profile:
    """A run's profile, read for analysis (checked against its manifest, every read bounded).

    Tables are dicts of equal-length numpy arrays (text columns as object arrays): hand one to
    ``pandas.DataFrame`` or ``pyarrow.table`` as it is. Use it as a context manager, or call
    ``close()``; a closed profile raises ``ProfileError``.
    """

    def __init__(self, dir: Union[str, os.PathLike]) -> None:
        self._p = _ferry.Profile(os.fspath(dir))

    @property
    def dir(self) -> str:
        return self._p.dir

    def tasks(self) -> Dict[str, np.ndarray]:
        """One row per task: task, kernel, func_id, core, blocks, start, end, exec_cycles, run
        (device cycles)."""
        return {k: _column(v) for k, v in self._p.tasks().items()}

    def blocks(self) -> Dict[str, np.ndarray]:
        """One row per block execution: task, kernel, core, dispatch, start, end, finish, run."""
        return {k: _column(v) for k, v in self._p.blocks().items()}

    def pmu(self) -> Dict[str, np.ndarray]:
        """One row per PMU row (one per task): thread, core, task, kernel, func_id, core_type,
        total_cycles, then a column per counter the run programmed (empty without PMU)."""
        return {k: _column(v) for k, v in self._p.pmu().items()}

    def deps(self) -> Dict[str, np.ndarray]:
        """One row per dependency edge of DepGen's graph: pred (0: the run's inputs), succ, arg,
        source (explicit, creator, tensormap), tensor (-1: none). Empty without DepGen."""
        return {k: _column(v) for k, v in self._p.deps().items()}

    def scopes(self) -> Dict[str, np.ndarray]:
        """One row per ScopeStats record (a scope's begin or end): site, name, phase, depth,
        ring and the occupancy then (task window, heap bytes, dep pool, tensormap)."""
        return {k: _column(v) for k, v in self._p.scopes().items()}

    def loss(self) -> Dict[str, np.ndarray]:
        """One row per lane: lane, subsystem, thread, core, produced, collected, dropped,
        stall_cycles."""
        return {k: _column(v) for k, v in self._p.loss().items()}

    def report(self) -> Dict[str, Any]:
        """``ferry report --json``'s model as a dict."""
        return self._p.report()

    def diff(self, other: "Profile") -> Dict[str, Any]:
        """``ferry diff --json``'s model: ``other`` compared with this run."""
        return self._p.diff(other._p)

    def warnings(self) -> List[str]:
        return self._p.warnings()

    def failure(self) -> Optional[str]:
        return self._p.failure()

    def close(self) -> None:
        self._p.close()

    def __enter__(self) -> "Profile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def diff(a: Profile, b: Profile) -> Dict[str, Any]:
    """``ferry diff a b --json``'s model."""
    return a.diff(b)
