"""Graphs built in Python: tensors from numpy arrays, views, tasks on kernels, scopes.

A ``Graph`` is compiled to ferry's workload form (the TOML of docs/workloads.md, its inputs as
raw little-endian files beside it) in a private temporary directory and run through the same job
as ``ferry run --workload``: the compiler checks it, the run is verified against the kernels'
host implementations, and an error's line is mapped back to the graph entry that caused it
(``err.entry``).
"""
from __future__ import annotations

import os
import re
import tempfile
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import ml_dtypes
import numpy as np

from . import _ferry

# ferry's dtypes and their numpy forms: the one table to extend when ferry gains a dtype (the
# name is the workload file's `dtype`; an output comes back as the run's word buffer, viewed as
# the numpy dtype without a copy). bf16 is ml_dtypes' `bfloat16`, the numpy bf16 of JAX,
# TensorFlow and ONNX: numpy has none of its own.
DTYPES: Dict[str, np.dtype] = {
    "f32": np.dtype("<f4"),
    "f16": np.dtype("<f2"),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "int8": np.dtype("i1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "uint8": np.dtype("u1"),
    "uint32": np.dtype("<u4"),
    "uint64": np.dtype("<u8"),
}


class DtypeError(_ferry.FerryError, TypeError):
    """An array's dtype is not the tensor's, or not one ferry has."""


def _dtype_name(dtype: Union[str, np.dtype, type]) -> str:
    """ferry's name of ``dtype`` (a name of ``DTYPES`` or anything ``np.dtype`` takes)."""
    supported = ", ".join(f"{k} ({v})" for k, v in DTYPES.items())
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        want = np.dtype(dtype)
    except TypeError:
        raise DtypeError(f"dtype {dtype!r} is not one ferry supports (supported: {supported})") from None
    for name, dt in DTYPES.items():
        if dt == want:
            return name
    raise DtypeError(f"dtype {want} is not one ferry supports (supported: {supported})")


class ShapeError(_ferry.FerryError, ValueError):
    """An array's shape, or a view's extent, does not fit the tensor."""


class Scalar:
    """A task's scalar argument: ``f32(x)`` or ``u64(n)``."""

    def __init__(self, kind: str, value: Union[int, float]) -> None:
        self.kind, self.value = kind, value

    def _toml(self) -> str:
        return f"{{ f32 = {float(self.value)!r} }}" if self.kind == "f32" else f"{{ u64 = {int(self.value)} }}"


def f32(x: float) -> Scalar:
    return Scalar("f32", x)


def u64(n: int) -> Scalar:
    if n < 0:
        raise ValueError(f"u64 scalar {n} is negative")
    return Scalar("u64", n)


class Arg:
    """A tensor (or a view of it) with a role: what a task reads or writes."""

    def __init__(self, tensor: "Tensor", role: str) -> None:
        self.tensor, self.role = tensor, role

    def _toml(self) -> str:
        t = self.tensor
        s = f'{{ tensor = "{t.name}", role = "{self.role}"'
        if t.view_shape is not None:
            s += f", offset = {t.offset}, shape = {list(t.view_shape)}, strides = {list(t.view_strides)}"
        elif t.offset is not None:
            s += f", offset = {t.offset}, len = {t.len}"
        return s + " }"


class Tensor:
    """A graph tensor or a view of one: ``t[a:b]``, a contiguous run of its flattened elements,
    or ``t.view(shape, strides, offset)`` / ``t.T``, an N-d view (for the view kernels:
    ``add_nd``, ``cast_nd``, ...)."""

    def __init__(self, name: str, shape: Tuple[int, ...], dtype: str, offset: Optional[int] = None,
                 length: Optional[int] = None, view_shape: Optional[Tuple[int, ...]] = None,
                 view_strides: Optional[Tuple[int, ...]] = None) -> None:
        self.name, self.shape, self.dtype = name, shape, dtype
        self.size = int(np.prod(shape))
        self.offset, self.len = offset, length
        self.view_shape, self.view_strides = view_shape, view_strides

    def view(self, shape: Optional[Sequence[int]] = None, strides: Optional[Sequence[int]] = None,
             offset: int = 0) -> "Tensor":
        """An N-d view of the tensor's elements: element ``(i0, ...)`` is flat element
        ``offset + sum(i_k * strides[k])`` (strides in elements; default row-major contiguous;
        shape default the tensor's own). 1 to 4 dimensions; every element it reaches must be
        inside the tensor. A view kernel's arguments all have one shape: a whole tensor passed
        as it is is a flat view, ``[size]``."""
        if self.offset is not None or self.view_shape is not None:
            raise ShapeError(f"tensor `{self.name}`: a view is taken of a whole tensor")
        shape = tuple(int(d) for d in (self.shape if shape is None else shape))
        if not 1 <= len(shape) <= 4 or any(d < 1 for d in shape):
            raise ShapeError(f"tensor `{self.name}`: view shape {shape} needs 1 to 4 positive dimensions")
        if strides is None:
            strides = tuple(int(np.prod(shape[k + 1:])) for k in range(len(shape)))
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape) or any(s < 0 for s in strides):
            raise ShapeError(f"tensor `{self.name}`: strides {strides} need one non-negative stride per dimension of {shape}")
        offset = int(offset)
        extent = 1 + sum((d - 1) * s for d, s in zip(shape, strides))
        if offset < 0 or offset + extent > self.size:
            raise ShapeError(f"tensor `{self.name}`: view at offset {offset} spans {extent} elements, "
                             f"outside its {self.size}")
        return Tensor(self.name, self.shape, self.dtype, offset, None, shape, strides)

    @property
    def T(self) -> "Tensor":
        """The transposed view of a 2-d tensor."""
        if len(self.shape) != 2 or self.offset is not None or self.view_shape is not None:
            raise ShapeError(f"tensor `{self.name}`: .T is the view of a whole 2-d tensor")
        rows, cols = self.shape
        return self.view((cols, rows), (1, cols))

    def __getitem__(self, s: slice) -> "Tensor":
        if self.view_shape is not None:
            raise ShapeError(f"tensor `{self.name}`: an N-d view is not sliced further")
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise ShapeError(f"tensor `{self.name}`: a view is a contiguous slice t[a:b]")
        base, n = (self.offset or 0), (self.len if self.len is not None else self.size)
        a, b, _ = s.indices(n)
        if not (0 <= a < b <= n) or s.start is not None and s.start > n or s.stop is not None and s.stop > n:
            raise ShapeError(f"tensor `{self.name}`: view [{s.start}:{s.stop}] is outside its {n} elements")
        return Tensor(self.name, self.shape, self.dtype, base + a, b - a)

    def input(self) -> Arg:
        return Arg(self, "input")

    def output(self) -> Arg:
        return Arg(self, "output")

    def inout(self) -> Arg:
        return Arg(self, "inout")

    def __repr__(self) -> str:
        if self.view_shape is not None:
            view = f".view({self.view_shape}, {self.view_strides}, offset={self.offset})"
        else:
            view = "" if self.offset is None else f"[{self.offset}:{self.offset + self.len}]"
        return f"Tensor({self.name!r}{view}, shape={self.shape}, dtype={self.dtype})"


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Graph:
    """A task graph built in Python. Declare tensors (``input`` from a numpy array, ``output``
    by shape), add ``task``s in order (a Python loop is the repeat), group them in ``scope``s
    with scratch tensors, then ``run``.
    """

    def __init__(self, name: str) -> None:
        if not re.match(r"^[A-Za-z0-9_.-]{1,63}$", name):
            raise ValueError(f"graph name {name!r} must be 1-63 characters of A-Z a-z 0-9 - _ .")
        self.name = name
        self._tensors: List[Tuple[Tensor, Optional[np.ndarray], bool]] = []
        self._body: List[Any] = []
        self._stack: List[List[Any]] = [self._body]

    def _tensor(self, name: str, shape: Sequence[int], dtype: str, data: Optional[np.ndarray],
                output: bool) -> Tensor:
        if not _NAME.match(name) or any(t.name == name for t, _, _ in self._tensors):
            raise ValueError(f"tensor name {name!r} is not a fresh identifier")
        shape = tuple(int(d) for d in shape)
        if not shape or any(d <= 0 for d in shape):
            raise ShapeError(f"tensor `{name}`: shape {shape} needs positive dimensions")
        t = Tensor(name, shape, _dtype_name(dtype), None, None)
        self._tensors.append((t, data, output))
        return t

    def input(self, name: str, data: np.ndarray, *, dtype: Union[str, np.dtype, None] = None,
              shape: Optional[Sequence[int]] = None) -> Tensor:
        """A tensor whose initial value is ``data`` (a numpy array of one of ``DTYPES``, bf16 as
        ``ml_dtypes.bfloat16``; with ``dtype`` or ``shape`` given, the array must have them:
        nothing is converted)."""
        if not isinstance(data, np.ndarray):
            raise DtypeError(f"tensor `{name}`: expected a numpy array, got {type(data).__name__}")
        try:
            name_of = _dtype_name(data.dtype)
        except DtypeError as e:
            raise DtypeError(f"tensor `{name}`: {e}") from None
        if dtype is not None and _dtype_name(dtype) != name_of:
            raise DtypeError(f"tensor `{name}`: the array is {data.dtype}, the tensor {np.dtype(DTYPES[_dtype_name(dtype)])}")
        if shape is not None and tuple(shape) != data.shape:
            raise ShapeError(f"tensor `{name}`: the array's shape is {data.shape}, the tensor's {tuple(shape)}")
        return self._tensor(name, data.shape, name_of, data, False)

    def output(self, name: str, shape: Sequence[int], dtype: Union[str, np.dtype] = "f32") -> Tensor:
        """A tensor that starts as zeros and comes back in ``Result.outputs`` as an array of
        its dtype (a name of ``DTYPES`` or a numpy dtype) and shape."""
        return self._tensor(name, shape, dtype, None, True)

    def task(self, kernel: str, args: Sequence[Arg], *, scalars: Sequence[Scalar] = (),
             blocks: int = 1, name: Optional[str] = None) -> None:
        """A task: ``kernel`` (built-in or from a loaded library) on ``args``."""
        for a in args:
            if not isinstance(a, Arg):
                raise TypeError(f"task `{name or kernel}`: args are tensor.input()/.output()/.inout(), got {a!r}")
        self._stack[-1].append(("task", kernel, list(args), list(scalars), int(blocks), name))

    @contextmanager
    def scope(self, label: str, **scratch: int) -> Iterator[Tuple[Tensor, ...]]:
        """A scope (``PTO2_SCOPE``) with scratch tensors of the given lengths, yielded in order."""
        body: List[Any] = []
        views = tuple(Tensor(n, (int(k),), "f32") for n, k in scratch.items())
        self._stack[-1].append(("scope", label, dict(scratch), body))
        self._stack.append(body)
        try:
            yield views
        finally:
            self._stack.pop()

    def to_workload(self, inputs_dir: str, tolerance: float = 0.0) -> Tuple[str, Dict[int, str]]:
        """The workload file's text (inputs written to ``inputs_dir``) and, per line, the graph
        entry it declares."""
        lines: List[str] = []
        entries: Dict[int, str] = {}
        scratch_total = 0
        out_names = [t.name for t, _, o in self._tensors if o] or [t.name for t, _, _ in self._tensors]
        lines += ["[workload]", f'name = "{self.name}"', 'verify = "host-reference"',
                  f"tolerance = {float(tolerance)!r}",
                  "outputs = [" + ", ".join(f'"{n}"' for n in out_names) + "]"]
        scratch_line = len(lines)
        lines.append("")
        for t, data, _ in self._tensors:
            entries[len(lines) + 1] = f"tensor `{t.name}`"
            init = ""
            if data is not None:
                path = os.path.join(inputs_dir, f"{t.name}.bin")
                np.ascontiguousarray(data, dtype=DTYPES[t.dtype]).tofile(path)
                init = f'init = {{ file = "{t.name}.bin" }}'
            lines += ["[[tensor]]", f'name = "{t.name}"', f'dtype = "{t.dtype}"', f"shape = {list(t.shape)}"]
            if init:
                lines.append(init)

        def emit(body: List[Any], header: str, depth: int) -> int:
            peak = 0
            for item in body:
                entries[len(lines) + 1] = (
                    f"task `{item[5] or item[1]}` (kernel {item[1]})" if item[0] == "task" else f"scope `{item[1]}`"
                )
                lines.append(f"[[{header}]]")
                if item[0] == "task":
                    _, kernel, args, scalars, blocks, name = item
                    lines.append(f'kernel = "{kernel}"')
                    if name:
                        lines.append(f'name = "{name}"')
                    if blocks != 1:
                        lines.append(f"blocks = {blocks}")
                    lines.append("args = [" + ", ".join(a._toml() for a in args) + "]")
                    if scalars:
                        lines.append("scalars = [" + ", ".join(s._toml() for s in scalars) + "]")
                else:
                    _, label, scratch, inner = item
                    lines.append(f'scope = "{label}"')
                    lines.append("scratch = [" + ", ".join(
                        f'{{ name = "{n}", len = {k} }}' for n, k in scratch.items()) + "]")
                    own = sum(4 * k + 64 for k in scratch.values())
                    peak = max(peak, own + emit(inner, header + ".body", depth + 1))
            return peak

        scratch_total = emit(self._body, "graph", 0)
        lines[scratch_line] = f"scratch_bytes = {scratch_total}"
        return "\n".join(lines) + "\n", entries

    def run(self, *, tolerance: float = 0.0, **options: Any) -> "Any":
        """Runs the graph (the options of ``ferry.run``: arch, variant, kernels, the DFX
        subsystems or ``dfx=True``, out, force, repeat, ...) and returns its ``Result``; its
        outputs have the tensors' shapes. The run is checked against the kernels' host
        implementations (within ``tolerance``)."""
        from . import Result, _options

        with tempfile.TemporaryDirectory(prefix="ferry-graph-") as d:
            text, entries = self.to_workload(d, tolerance)
            path = os.path.join(d, f"{self.name}.toml")
            with open(path, "w") as f:
                f.write(text)
            opts = _options(**{**_DEFAULTS, **options})
            try:
                raw = _ferry.run("workload", path, **opts)
            except _ferry.WorkloadError as e:
                e.entry = _entry(entries, e.line)
                raise
            except _ferry.KernelFault as e:
                m = re.search(r":(\d+):\d+$", e.at or "")
                e.entry = _entry(entries, int(m.group(1)) if m else None)
                raise
        shapes = {t.name: t.shape for t, _, _ in self._tensors}
        return Result(raw, shapes)


_DEFAULTS: Dict[str, Any] = dict(
    arch="a2a3", variant="device", small=False, kernels=(), swimlane=0, pmu=0, dep_gen=False,
    dump_args=0, scope_stats=False, dfx=False, out=None, force=False, repeat=1, warmup=0,
    kernel_budget=None, aic=None, aiv=None, aicpu_threads=None,
)


def _entry(entries: Dict[int, str], line: Optional[int]) -> Optional[str]:
    """The graph entry declared at or before ``line``."""
    if line is None:
        return None
    before = [k for k in entries if k <= line]
    return entries[max(before)] if before else None
