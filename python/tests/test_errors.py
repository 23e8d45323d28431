"""Bad input raises a clear exception carrying the typed error's fields, never a crash."""

import numpy as np
import pytest

import ferry
from conftest import ROOT, tool


def one_task(kernel: str = "add_scalar", x=None) -> ferry.Graph:
    g = ferry.Graph("one")
    t = g.input("x", np.zeros(16, np.float32) if x is None else x)
    g.task(kernel, [t.inout()], scalars=[ferry.f32(1.0)], name="only")
    return g


def test_wrong_dtype_is_refused_before_anything_runs():
    g = ferry.Graph("g")
    with pytest.raises(ferry.DtypeError, match=r"tensor `x`: .*float64.*not one ferry supports"):
        g.input("x", np.zeros(16))  # float64
    with pytest.raises(TypeError):  # a DtypeError is a TypeError too
        g.input("y", np.zeros(16, np.complex64))
    with pytest.raises(ferry.DtypeError, match="expected a numpy array"):
        g.input("z", [1.0, 2.0])


def test_wrong_shape_is_refused():
    g = ferry.Graph("g")
    with pytest.raises(ferry.ShapeError, match=r"shape is \(16,\), the tensor's \(4, 4\)"):
        g.input("x", np.zeros(16, np.float32), shape=(4, 4))
    x = g.input("x2", np.zeros(16, np.float32))
    with pytest.raises(ferry.ShapeError, match="outside its 16 elements"):
        x[8:20]
    with pytest.raises(ferry.ShapeError):
        g.output("y", shape=(0,))


def test_a_task_the_compiler_refuses_names_the_graph_entry():
    g = ferry.Graph("g")
    x = g.input("x", np.zeros(16, np.float32))
    g.task("add", [x.input()], name="mismatched")  # add takes two inputs and an output
    with pytest.raises(ferry.WorkloadError) as e:
        g.run()
    assert e.value.line is not None and e.value.col is not None
    assert e.value.entry == "task `mismatched` (kernel add)", (str(e.value), e.value.entry)


def test_missing_kernel_is_a_workload_error_at_its_task():
    with pytest.raises(ferry.WorkloadError, match="no_such_kernel") as e:
        one_task("no_such_kernel").run()
    assert e.value.entry == "task `only` (kernel no_such_kernel)"
    assert isinstance(e.value.line, int) and e.value.file.endswith("one.toml")


def test_workload_file_error_carries_file_line_col(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[workload]\nname = "bad"\nverify = "host-reference"\n[[tensor]]\nname = "x"\nshape = [-1]\n')
    with pytest.raises(ferry.WorkloadError) as e:
        ferry.run(workload=bad)
    assert (e.value.file, e.value.line) == (str(bad), 6), str(e.value)
    assert e.value.col >= 1 and e.value.message
    with pytest.raises(ferry.WorkloadError) as again:
        ferry.check_workload(bad)
    assert again.value.line == 6
    assert ferry.check_workload(ROOT / "examples/workloads/diamond.toml", small=True)["tensors"] == ["x", "out"]
    with pytest.raises(ferry.WorkloadError) as e:
        ferry.run(workload=tmp_path / "missing.toml")
    assert e.value.line is None and "missing.toml" in e.value.file


def test_options_refused_name_the_option(tmp_path):
    with pytest.raises(ferry.OptionsError) as e:
        ferry.run("vector", arch="a9")
    assert e.value.option == "arch"
    with pytest.raises(ferry.OptionsError, match="not one of"):
        ferry.run("no-such-example")
    with pytest.raises(ferry.OptionsError, match="output directory"):
        ferry.run("vector", small=True, swimlane=1)  # DFX without out=
    with pytest.raises(ferry.OptionsError):
        ferry.run("vector", small=True, repeat=0)
    with pytest.raises(ferry.OptionsError):
        ferry.run("vector", small=True, aicpu_threads=99)  # more than the chip has


def test_missing_and_closed_profiles(tmp_path):
    with pytest.raises(ferry.ProfileError) as e:
        ferry.Profile(tmp_path / "nope")
    assert e.value.dir == str(tmp_path / "nope")
    r = ferry.run("vector", small=True, swimlane=2, out=tmp_path / "run")
    p = r.profile()
    assert len(p.tasks()["task"]) == r.tasks
    p.close()
    with pytest.raises(ferry.ProfileError, match="closed"):
        p.tasks()
    with pytest.raises(ferry.ProfileError, match="collected no profile"):
        ferry.run("vector", small=True).profile()


def test_a_panic_is_an_exception_not_a_crash():
    with pytest.raises(ferry.InternalError, match="deliberate panic"):
        ferry._ferry._panic_for_test()


def test_a_kernel_fault_names_kernel_task_and_graph_entry(tmp_path):
    lib = tool("FERRY_FAULTY_KERNELS", "the faulty-kernels library")
    g = ferry.Graph("fault")
    x = g.input("x", np.zeros(16, np.float32))
    g.task("overrun", [x.inout()], name="writes_past_its_end")
    with pytest.raises(ferry.KernelFault) as e:
        g.run(kernels=[lib], dfx=True, out=tmp_path / "run")
    f = e.value
    assert (f.kernel, f.task, f.library) == ("overrun", 0, "faulty-kernels"), str(f)
    assert f.entry == "task `writes_past_its_end` (kernel overrun)"
    assert isinstance(f, ferry.RunFailed) and f.case == "fault"
    # The failed run's profile was kept and reads as failed.
    with ferry.Profile(f.profile) as p:
        assert p.failure()
