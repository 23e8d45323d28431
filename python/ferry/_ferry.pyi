"""Type hints of the native module ``ferry._ferry`` (crates/ferry-python)."""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

ARCHES: List[str]

class FerryError(Exception): ...

class WorkloadError(FerryError):
    file: str
    line: Optional[int]
    col: Optional[int]
    message: str
    entry: Optional[str]  # set by Graph.run: the graph entry at `line`

class OptionsError(FerryError):
    option: Optional[str]

class KernelsError(FerryError):
    path: str

class RunFailed(FerryError):
    case: str
    profile: Optional[str]
    repeat: Optional[Tuple[int, int]]

class KernelFault(RunFailed):
    kernel: str
    task: int
    library: Optional[str]
    at: Optional[str]
    fault: str
    entry: Optional[str]  # set by Graph.run

class WrongResult(FerryError):
    case: str
    what: str
    profile: Optional[str]

class ProfileError(FerryError):
    dir: str

class InternalError(FerryError): ...

def run(
    kind: str,
    target: str,
    *,
    arch: str = "a2a3",
    variant: str = "device",
    small: bool = False,
    kernels: Sequence[str] = ...,
    orchestration: Optional[str] = None,
    swimlane: int = 0,
    pmu: int = 0,
    dep_gen: bool = False,
    dump_args: int = 0,
    scope_stats: bool = False,
    out: Optional[str] = None,
    force: bool = False,
    repeat: int = 1,
    warmup: int = 0,
    kernel_budget: Optional[float] = None,
    aic: Optional[int] = None,
    aiv: Optional[int] = None,
    aicpu_threads: Optional[int] = None,
) -> Dict[str, Any]:
    """Runs an example (kind="example") or a workload file (kind="workload"). Returns
    {"out": str | None, "job_s": float (Job::run's seconds), "cases": [{"name", "kind", "tasks", "wall_s", "checksum",
    "per_kernel": {kernel: tasks}, "profile": str | None, "runs": [str],
    "outputs": [ndarray | None] (float32 word buffers), "named": {tensor: ndarray},
    "typed": {tensor: (dtype name, elements)} (a workload's: how each buffer is viewed)}]}."""

def check_workload(path: str, *, kernels: Sequence[str] = ..., small: bool = False) -> Dict[str, Any]:
    """{"name", "tensors": [str], "tasks": int}, or raises WorkloadError."""

def _panic_for_test() -> None: ...
def _job_seconds(example: str, *, arch: str = "a2a3", small: bool = False) -> float:
    """Seconds `Job::run` of the example took, timed in Rust (the overhead benchmark's baseline)."""

class Profile:
    def __init__(self, dir: str) -> None: ...
    @property
    def dir(self) -> str: ...
    def tasks(self) -> Dict[str, Any]: ...
    def blocks(self) -> Dict[str, Any]: ...
    def loss(self) -> Dict[str, Any]: ...
    def pmu(self) -> Dict[str, Any]: ...
    def deps(self) -> Dict[str, Any]: ...
    def scopes(self) -> Dict[str, Any]: ...
    def report(self) -> Dict[str, Any]: ...
    def diff(self, other: "Profile") -> Dict[str, Any]: ...
    def warnings(self) -> List[str]: ...
    def failure(self) -> Optional[str]: ...
    def close(self) -> None: ...
