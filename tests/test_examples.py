"""examples/mlp run as its user would: copied into a fresh directory, the plugin found through
its entry point, the example's own pyproject.toml as the configuration."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mlp"
# Enough for one torch import and a dozen tiny tests on a slow CI machine; a hang fails instead.
TIMEOUT_S = 300


@pytest.fixture
def example(pytester: pytest.Pytester, no_cuda_env: None) -> pytest.Pytester:
    """A copy of examples/mlp as pytester's directory, run with every GPU hidden.

    Hidden GPUs and --hpml-device=cpu make the outcomes below the same on every machine.
    """
    shutil.copytree(
        EXAMPLE,
        pytester.path,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", ".benchmarks"),
    )
    return pytester


def test_example_passes_in_the_precisions_of_its_pyproject(example: pytest.Pytester) -> None:
    result = example.runpytest_subprocess(
        "-p", "no:cacheprovider", "--benchmark-disable", "--hpml-device=cpu", "-v",
        timeout=TIMEOUT_S,
    )  # fmt: skip
    # Four tests x (fp32, bf16), the bf16-only and the compiled one once each; the cuda-only
    # one is skipped (no device left) and the slow one deselected.
    result.assert_outcomes(passed=10, skipped=1, deselected=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "hpml: device=cpu precision=fp32,bf16 *",  # the ini key of the example's pyproject
            "*::test_matches_fp32_cpu_reference[[]cpu-fp32[]] PASSED*",
            "*::test_matches_fp32_cpu_reference[[]cpu-bf16[]] PASSED*",
            "*::test_compiled_model_matches_eager[[]cpu-eager[]] PASSED*",
            "*::test_bf16_training_keeps_fp32_weights[[]cpu-bf16[]] PASSED*",
            "*::test_large_batch_step_stays_under_256_mib[[]no-device[]] SKIPPED*",
            "*::test_train_step_speed[[]cpu-bf16[]] PASSED*",
        ]
    )
    result.stdout.no_fnmatch_line("*test_bf16_training_keeps_fp32_weights[[]cpu-fp32[]]*")
    result.stdout.no_fnmatch_line("*test_learns_the_toy_problem*")


def test_example_runs_its_slow_test_and_benchmarks_when_asked(example: pytest.Pytester) -> None:
    result = example.runpytest_subprocess(
        "-p", "no:cacheprovider", "--hpml-device=cpu", "--hpml-run-slow",
        "-k", "learns or speed", "--benchmark-max-time=0.01", "--benchmark-min-rounds=2",
        timeout=TIMEOUT_S,
    )  # fmt: skip
    result.assert_outcomes(passed=3, deselected=9)
    assert result.ret == pytest.ExitCode.OK
    # pytest-benchmark's table lists the faster first, whichever that is on this machine
    for row in ("test_train_step_speed[[]cpu-fp32[]] *", "test_train_step_speed[[]cpu-bf16[]] *"):
        result.stdout.fnmatch_lines(["*benchmark: 2 tests*", row])
