"""Report header: the settings line always, the hardware line once hpml tests need torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tests.conftest import Project


def test_settings_line_shows_the_defaults_and_the_seed(project: Project) -> None:
    result = project.run()
    result.stdout.fnmatch_lines(
        [
            "hpml: device=auto precision=fp32 backend=eager dist-backend=auto loader-workers=0 "
            "seed=0 benchmarks=hpml threshold=6%"
        ]
    )


def test_hardware_line_is_shown_once_for_hpml_tests(project: Project, cpu_machine: None) -> None:
    project.write_step()
    result = project.run()
    assert len(project.hardware_lines(result)) == 1
    result.stdout.fnmatch_lines(
        [f"hpml: torch {torch.__version__} *, no CUDA GPU (CUDA_VISIBLE_DEVICES*); running on cpu"]
    )


def test_hardware_line_follows_collection_when_the_tests_load_torch(
    project: Project, no_cuda_env: None
) -> None:
    project.write_step()
    result = project.run_subprocess("--hpml-device=cpu")
    result.assert_outcomes(passed=1)
    assert len(project.hardware_lines(result)) == 1
    result.stdout.fnmatch_lines(
        [
            "hpml: device=cpu *",
            "collected 1 item",
            f"hpml: torch {torch.__version__} *, no CUDA GPU (CUDA_VISIBLE_DEVICES=''); "
            "running on cpu",
        ]
    )


def test_project_without_hpml_tests_gets_no_hardware_line(project: Project) -> None:
    project.write_tests("def test_plain():\n    pass\n")
    result = project.run_subprocess()
    result.assert_outcomes(passed=1)
    assert project.settings(result)["seed"] == "0"
    assert project.hardware_lines(result) == []
    assert project.torch_imported() == [False]


def test_disabled_plugin_adds_no_header_lines(project: Project) -> None:
    project.write_tests("def test_plain():\n    pass\n")
    result = project.run("-p", "no:hpml")
    result.assert_outcomes(passed=1)
    assert not [line for line in result.outlines if line.startswith("hpml:")]
