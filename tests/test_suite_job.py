"""The suite's main job (``tox -e suite``) on a machine with no time baselines of its own:
it judges the counts against the committed portable file, so a planted operator in a suite's
model fails it, and an unchanged model passes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PORTABLE = sorted((ROOT / "baselines").glob("portable-torch*.json"))
BENCHMARK = "suites/test_threads.py::test_training_step_speedup_with_threads_up_to_the_cores"
# Two activations between the book CNN's linears: 4 more operators in a step of 37 (+11%).
PLANTED = (
    "                fc1=nn.Linear(64 * (size // 4) ** 2, 512, bias=bias),\n",
    "                fc1=nn.Linear(64 * (size // 4) ** 2, 512, bias=bias),\n"
    "                planted_relu=nn.ReLU(),\n"
    "                planted_gelu=nn.GELU(),\n",
)


def _torch_minor() -> str:
    import torch

    return ".".join(torch.__version__.split(".")[:2])


@pytest.fixture
def suite_copy(pytester: pytest.Pytester, no_cuda_env: None) -> pytest.Pytester:
    """The suites, their configuration and only the committed portable counts: a machine that
    recorded no times of its own."""
    committed = [p for p in PORTABLE if p.name == f"portable-torch{_torch_minor()}.json"]
    if not committed:
        pytest.skip(f"no portable baselines committed for torch {_torch_minor()}")
    shutil.copytree(
        ROOT / "suites", pytester.path / "suites", ignore=shutil.ignore_patterns("__pycache__")
    )
    (pytester.path / "baselines").mkdir()
    shutil.copy(committed[0], pytester.path / "baselines")
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject[pyproject.index("[tool.pytest.ini_options]") :].split("\n\n")[0]
    (pytester.path / "pyproject.toml").write_text(
        section.replace('["tests", "suites"]', '["suites"]')
    )
    shutil.copy(ROOT / "conftest.py", pytester.path / "conftest.py")
    return pytester


def run_benchmark(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict[str, dict[str, str]]]:
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", BENCHMARK, "--hpml-bench-time=0.2", "--hpml-report=r.json",
        timeout=300,
    )  # fmt: skip
    report = json.loads((pytester.path / "r.json").read_text())
    [found] = report["results"]
    return result, found["verdicts"]


def test_the_unchanged_suite_passes_on_its_counts_without_time_baselines(
    suite_copy: pytest.Pytester,
) -> None:
    result, verdicts = run_benchmark(suite_copy)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert verdicts["ops[threads1]"]["verdict"] == "pass"
    assert verdicts["time[threads1]"]["verdict"] == "no-baseline"


def test_a_planted_operator_in_a_suites_model_fails_the_suite(suite_copy: pytest.Pytester) -> None:
    models = suite_copy.path / "suites" / "models.py"
    source = models.read_text()
    assert PLANTED[0] in source, "the book CNN's layers moved: update PLANTED"
    models.write_text(source.replace(*PLANTED))
    result, verdicts = run_benchmark(suite_copy)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    ops = verdicts["ops[threads1]"]
    assert ops["verdict"] == "regressed", ops
    assert re.search(r"aten::gelu: 0 -> 1 per call", ops["reason"]), ops["reason"]
    assert verdicts["time[threads1]"]["verdict"] == "no-baseline"  # no times of this machine
