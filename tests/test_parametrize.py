"""Parametrization: one test per selected device, precision, backend and worker count."""

from __future__ import annotations

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
    result = project.run("--hpml-device=cpu", "--hpml-workers=0,2", "--collect-only", "-q")
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
