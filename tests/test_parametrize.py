"""Parametrization: one test per selected device, precision, backend and worker count; a
test's own parameters for these fixtures (indirect=True), read as the options are read."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.conftest import Project


def test_step_runs_once_per_device_and_precision(project: Project) -> None:
    project.write_step()
    result = project.run("--hpml-device=cpu", "--hpml-precision=fp32,bf16", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "test_step.py::test_step[[]cpu-fp32[]] PASSED*",
            "test_step.py::test_step[[]cpu-bf16[]] PASSED*",
        ]
    )


def test_keyword_selects_one_precision(project: Project) -> None:
    project.write_step()
    result = project.run("--hpml-device=cpu", "--hpml-precision=fp32,bf16", "-k", "bf16", "-v")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["test_step.py::test_step[[]cpu-bf16[]] PASSED*"])


def test_ids_keep_a_fixed_order_whatever_the_argument_order(project: Project) -> None:
    project.write_tests(
        """
        def test_all(num_workers, backend, precision, device):
            pass
        """
    )
    result = project.run("--hpml-device=cpu", "--hpml-loader-workers=0,2", "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "test_inner.py::test_all[[]cpu-fp32-eager-workers0[]]",
            "test_inner.py::test_all[[]cpu-fp32-eager-workers2[]]",
        ]
    )


def test_fixture_used_through_a_user_fixture_is_parametrized(project: Project) -> None:
    project.write_tests(
        """
        import pytest


        @pytest.fixture
        def batch(device):
            return device.type


        def test_batch(batch):
            assert batch == "cpu"
        """
    )
    result = project.run("--hpml-device=cpu", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_inner.py::test_batch[[]cpu[]] PASSED*"])


def test_auto_and_cpu_run_once_on_a_cpu_machine(project: Project, cpu_machine: None) -> None:
    project.write_step()
    result = project.run("--hpml-device=auto,cpu", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_step.py::test_step[[]cpu-fp32[]] PASSED*"])


def test_user_device_fixture_is_left_alone(project: Project) -> None:
    project.write_tests(
        """
        import pytest


        @pytest.fixture
        def device():
            return "mine"


        def test_own(device):
            assert device == "mine"
        """
    )
    result = project.run("--hpml-device=cpu", "--hpml-precision=fp32,bf16", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_inner.py::test_own PASSED*"])


def test_user_parametrize_of_device_is_left_alone(project: Project) -> None:
    project.write_tests(
        """
        import pytest


        @pytest.mark.parametrize("device", ["a", "b"])
        def test_by_name(device):
            assert device in ("a", "b")


        @pytest.mark.parametrize(("device", "n"), [("c", 1)])
        def test_by_tuple(device, n):
            assert device == "c"
        """
    )
    result = project.run("--hpml-device=cpu", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "test_inner.py::test_by_name[[]a[]] PASSED*",
            "test_inner.py::test_by_name[[]b[]] PASSED*",
            "test_inner.py::test_by_tuple[[]c-1[]] PASSED*",
        ]
    )


# A test's own values for pytest-hpml's fixtures (indirect=True), each as an option gives it.
INDIRECT_GOOD = """
import pytest
import torch

from pytest_hpml.fixtures.compile import CompileBackend


@pytest.mark.parametrize("precision", ["FP16"], indirect=True)
def test_precision(precision, record):
    record(value=precision.name)


@pytest.mark.parametrize("num_workers", ["auto", 3], indirect=True)
def test_workers(num_workers, record):
    record(value=num_workers)


@pytest.mark.parametrize("device", [torch.device("cpu"), "auto"], indirect=True)
def test_device(device, record):
    record(value=str(device))


@pytest.mark.parametrize("backend", [CompileBackend("eager")], indirect=True)
def test_backend(backend, record):
    record(value=str(backend))


@pytest.mark.parametrize("dist_backend", ["GLOO"], indirect=True)
def test_dist_backend(dist_backend, record):
    record(value=dist_backend)


@pytest.mark.parametrize("hpml_seed", [7], indirect=True)
def test_seed(hpml_seed, record):
    record(value=[hpml_seed, torch.initial_seed()])
"""


def test_a_tests_own_values_are_read_as_the_options_read_them(
    project: Project, cpu_machine: None
) -> None:
    """What an option accepts, a test's own parameter may give, in any form the option or the
    fixture itself gives: "FP16" and "auto" read as --hpml-precision and --hpml-loader-workers read
    them, a torch.device or a CompileBackend as it prints."""
    project.write_tests(INDIRECT_GOOD)
    project.run().assert_outcomes(passed=8)
    seen = {r["test"]: r["value"] for r in project.records()}
    workers = max(1, min(len(os.sched_getaffinity(0)), 8))
    assert seen == {
        "test_precision[FP16]": "fp16",
        "test_workers[auto]": workers,
        "test_workers[3]": 3,
        "test_device[device0]": "cpu",
        "test_device[auto]": "cpu",
        "test_backend[backend0]": "eager",
        "test_dist_backend[GLOO]": "gloo",
        "test_seed[7]": [7, 7],
    }


INDIRECT_BAD = """
import pytest


@pytest.mark.parametrize("precision", ["fp8", "fp32,bf16", ""], indirect=True)
def test_precision(precision):
    pass


@pytest.mark.parametrize("num_workers", [-1, 300, True, 2.0], indirect=True)
def test_workers(num_workers):
    pass


@pytest.mark.parametrize("device", ["tpu", None], indirect=True)
def test_device(device):
    pass


@pytest.mark.parametrize("backend", ["no_such_backend", "inductor:fast"], indirect=True)
def test_backend(backend):
    pass


@pytest.mark.parametrize("dist_backend", ["tcp"], indirect=True)
def test_dist_backend(dist_backend):
    pass


@pytest.mark.parametrize("hpml_seed", [-1], indirect=True)
def test_seed(hpml_seed):
    pass


@pytest.mark.parametrize("rank", [0], indirect=True)
def test_rank(rank):
    pass
"""


def test_a_tests_own_values_the_options_refuse_fail_it_at_setup_in_one_line(
    project: Project,
) -> None:
    """Each bad parameter fails its own test at setup, in one line naming the test, the
    fixture, the value and the choices, in the option's own words; no traceback."""
    project.write_tests(INDIRECT_BAD)
    result = project.run()
    result.assert_outcomes(errors=14)
    said = {
        "test_precision[fp8]": "fixture precision, parametrized with 'fp8': unknown precision "
        "'fp8'; choose from fp32, tf32, fp16, bf16",
        "test_precision[fp32,bf16]": "one value per test, got 2: give each its own parameter",
        "test_precision[]": "an empty value; give one such as 'fp32'",
        "test_workers[-1]": "unknown worker count '-1'; choose from integers >= 0 or auto",
        "test_workers[300]": "worker count 300 is more than 256; choose fewer",
        "test_workers[True]": "parametrized with True: expected a value such as '0', got a bool",
        "test_workers[2.0]": "parametrized with 2.0: expected a value such as '0', got a float",
        "test_device[tpu]": "unknown device 'tpu'; choose from auto, cpu, cuda, cuda:N, mps",
        "test_device[None]": "parametrized with None: expected a value such as 'auto', got a "
        "NoneType",
        "test_backend[no_such_backend]": "unknown torch.compile backend no_such_backend; "
        "choose from ",
        "test_backend[inductor:fast]": "invalid backend 'inductor:fast': 'fast' is no mode of "
        "inductor",
        "test_dist_backend[tcp]": "unknown distributed backend 'tcp'; choose from auto, gloo, "
        "nccl, mpi",
        "test_seed[-1]": "seed must be in [0, 2**32), got -1",
        "test_rank[0]": "fixture rank, parametrized with 0: it takes no parameter",
    }
    output = result.stdout.str()
    for test, message in said.items():
        [line] = [line for line in result.outlines if line.startswith(f"test_inner.py::{test}: ")]
        assert message in line, (test, output)
    assert "(comma-separated for several)" not in output  # a parameter is one value
    assert "Traceback" not in output
    assert "pytest_hpml/" not in output  # no frame of the fixtures


def test_a_tests_own_device_is_skipped_where_it_cannot_run(
    project: Project, cpu_machine: None
) -> None:
    """An unavailable device, or one the test's device mark leaves out, skips the test with a
    reason, as pytest-hpml's own parametrization and a gpu mark do."""
    project.write_tests(
        """
        import pytest


        @pytest.mark.parametrize("device", ["cuda"], indirect=True)
        def test_cuda(device):
            pass


        @pytest.mark.device("cuda")
        @pytest.mark.parametrize("device", ["cpu"], indirect=True)
        def test_marked(device):
            pass


        @pytest.mark.precision("fp32")
        @pytest.mark.parametrize("precision", ["bf16"], indirect=True)
        def test_low(precision):
            pass
        """
    )
    result = project.run("-rs")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED * cuda is not available here: torch *, no CUDA GPU*",
            "SKIPPED * runs only with cuda; selected: cpu "
            "(@pytest.mark.parametrize(..., indirect=True))",
            "SKIPPED * runs only with fp32; selected: bf16 "
            "(@pytest.mark.parametrize(..., indirect=True))",
        ]
    )
