"""Tensors of every dtype ferry has, from numpy arrays and back (views of the run's own buffers),
through flat, strided and transposed views, checked against numpy goldens; and the bad input a
typed graph can hold, refused with a clear exception."""

import ml_dtypes
import numpy as np
import pytest

import ferry
from conftest import ROOT

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32


def _root(a):
    while isinstance(a, np.ndarray) and a.base is not None:
        assert not a.flags.owndata
        a = a.base
    return a


def sample(name: str, n: int) -> np.ndarray:
    """`n` values of dtype `name`, its extremes among them for an integer type."""
    dt = ferry.DTYPES[name]
    if name in ("f32", "f16", "bf16"):
        return np.linspace(-3.5, 3.5, n).astype(dt)
    info = np.iinfo(dt)
    v = (np.arange(n, dtype=np.int64) * 5 - 40).astype(dt) if dt.kind == "i" else np.arange(n).astype(dt) * 3
    v[0], v[1] = info.min, info.max
    return v


def test_the_dtype_table_is_ferrys():
    assert set(ferry.DTYPES) == {"f32", "f16", "bf16", "int8", "int16", "int32", "int64", "uint8",
                                 "uint32", "uint64"}
    assert ferry.DTYPES["bf16"] == BF16


@pytest.mark.parametrize("name", sorted(ferry.DTYPES))
def test_every_dtype_goes_in_and_comes_back_as_itself(name):
    # 15 elements: an 8- or 16-bit tensor ends inside its last word, which is cut off.
    x = sample(name, 15).reshape(3, 5)
    g = ferry.Graph(f"cast-{name}")
    xt = g.input("x", x)
    y = g.output("y", shape=(3, 5), dtype=name)
    assert xt.dtype == name and y.dtype == name
    g.task("cast_nd", [xt.input(), y.output()])
    out = g.run().outputs["y"]
    assert out.dtype == ferry.DTYPES[name] and out.shape == (3, 5), (out.dtype, out.shape)
    assert np.array_equal(out, x), (out, x)
    # A view of the run's buffer, not a copy.
    assert not out.flags.owndata
    assert not isinstance(_root(out), (np.ndarray, bytes, bytearray))


def test_a_workload_files_outputs_come_back_typed():
    r = ferry.run(workload=ROOT / "examples/workloads/dtypes.toml")
    o = r.outputs
    assert (o["acc"].dtype, o["y"].dtype, o["t"].dtype) == (np.int32, BF16, F32)
    assert o["acc"].shape == o["y"].shape == o["t"].shape == (96,)
    assert o["acc"].sum() == 2976  # the file's own expectation
    assert np.array_equal(o["t"], o["y"].astype(F32))


@pytest.mark.parametrize("arch", ferry.ARCHES)
def test_int8_wraps_through_a_strided_view_and_widens(arch):
    rows, cols, pitch = 8, 12, 16
    img = np.arange(-64, -64 + rows * pitch).astype(np.int8).reshape(rows, pitch)
    bias = np.full((rows, cols), 100, np.int8)
    g = ferry.Graph("ints")
    ti = g.input("img", img)
    tb = g.input("bias", bias)
    s8 = g.output("sum8", (rows, cols), np.int8)
    wide = g.output("wide", (rows, cols), "int32")
    acc = g.output("acc", (rows, cols), np.int32)
    cropped = ti.view((rows, cols), (pitch, 1))  # img[:, :cols]
    g.task("add_nd", [cropped.input(), tb.view().input(), s8.view().output()], blocks=2)
    g.task("cast_nd", [s8.input(), wide.output()])  # flat: [96] and [96]
    g.task("add_nd", [wide.view().input(), cropped.input(), acc.view().output()])
    r = g.run(arch=arch)
    want8 = img[:, :cols] + bias  # numpy's int8 wraps as ferry's does
    assert r.outputs["sum8"].dtype == np.int8
    assert np.array_equal(r.outputs["sum8"], want8)
    assert np.array_equal(r.outputs["wide"], want8.astype(np.int32))
    assert np.array_equal(r.outputs["acc"], want8.astype(np.int32) + img[:, :cols].astype(np.int32))
    assert (want8 < 0).any() and (img[:, :cols] > 27).any(), "the golden exercises the wrap"


def test_bf16_product_with_a_transposed_operand():
    rows, cols = 8, 12
    rng = np.random.default_rng(7)
    x = rng.standard_normal((rows, cols)).astype(BF16)
    w = rng.standard_normal((cols, rows)).astype(BF16)
    g = ferry.Graph("bf16")
    tx, tw = g.input("x", x), g.input("w", w)
    y = g.output("y", (rows, cols), "bf16")
    t = g.output("t", (rows, cols))
    g.task("mul_nd", [tx.view().input(), tw.T.input(), y.view().output()], blocks=3)
    for r in range(rows):  # one row per task, flat views
        g.task("cast_nd", [y[r * cols:(r + 1) * cols].input(), t[r * cols:(r + 1) * cols].output()])
    out = g.run()
    # f32 products of bf16 values are exact; each rounds to nearest even, as ml_dtypes rounds.
    want = (x.astype(F32) * w.T.astype(F32)).astype(BF16)
    assert out.outputs["y"].dtype == BF16
    assert np.array_equal(out.outputs["y"], want)
    assert out.outputs["t"].dtype == F32
    assert np.array_equal(out.outputs["t"], want.astype(F32))


def test_mixed_operands_compute_in_f32():
    a = np.linspace(-2, 2, 16).astype(np.float16)
    b = np.arange(16, dtype=np.uint8) * 7
    g = ferry.Graph("mixed")
    ta, tb = g.input("a", a), g.input("b", b)
    o = g.output("o", (16,), "f32")
    g.task("add_nd", [ta.input(), tb.input(), o.output()])
    assert np.array_equal(g.run().outputs["o"], a.astype(F32) + b.astype(F32))


def test_dtypes_ferry_lacks_are_refused():
    g = ferry.Graph("g")
    for bad in (np.zeros(4), np.zeros(4, np.complex64), np.zeros(4, bool), np.zeros(4, np.uint16)):
        with pytest.raises(ferry.DtypeError, match=r"tensor `x`: dtype .* is not one ferry supports"):
            g.input("x", bad)
    with pytest.raises(ferry.DtypeError, match="the array is int8, the tensor bfloat16"):
        g.input("x", np.zeros(4, np.int8), dtype="bf16")
    with pytest.raises(ferry.DtypeError, match="float64"):
        g.output("y", (4,), dtype=np.float64)
    with pytest.raises(ferry.DtypeError, match="'f33'"):
        g.output("y", (4,), dtype="f33")


def test_views_that_do_not_fit_are_refused():
    g = ferry.Graph("g")
    x = g.input("x", np.zeros((4, 6), np.int8))
    with pytest.raises(ferry.ShapeError, match="spans 25 elements, outside its 24"):
        x.view((5, 5))
    with pytest.raises(ferry.ShapeError, match="one non-negative stride per dimension"):
        x.view((2, 3), (3,))
    with pytest.raises(ferry.ShapeError, match="1 to 4 positive dimensions"):
        x.view((1, 1, 1, 1, 1))
    with pytest.raises(ferry.ShapeError, match="whole 2-d tensor"):
        x[0:4].T


def test_typed_graphs_the_compiler_refuses_name_their_entry():
    # An int8 tensor into an f32 kernel.
    g = ferry.Graph("g")
    x = g.input("x", np.zeros(16, np.int8))
    g.task("add_scalar", [x.inout()], scalars=[ferry.f32(1.0)], name="f32_only")
    with pytest.raises(ferry.WorkloadError) as e:
        g.run()
    assert e.value.entry == "task `f32_only` (kernel add_scalar)", (str(e.value), e.value.entry)
    # An int8 view that does not start on a 32-bit word.
    g = ferry.Graph("g2")
    x = g.input("x", np.zeros(16, np.int8))
    y = g.output("y", (4,), np.int8)
    g.task("cast_nd", [x.view((4,), offset=2).input(), y.output()], name="unaligned")
    with pytest.raises(ferry.WorkloadError, match="32-bit word") as e:
        g.run()
    assert e.value.entry == "task `unaligned` (kernel cast_nd)"
    # Arguments of different shapes.
    g = ferry.Graph("g3")
    x = g.input("x", np.zeros((4, 6), np.int32))
    y = g.output("y", (6, 4), np.int32)
    g.task("cast_nd", [x.view().input(), y.view((4, 6)).output()], name="ok_shapes")
    g.task("cast_nd", [x.view((4, 6)).input(), y.view((6, 4)).output()], name="bad_shapes")
    with pytest.raises(ferry.WorkloadError, match="shape") as e:
        g.run()
    assert e.value.entry == "task `bad_shapes` (kernel cast_nd)"
