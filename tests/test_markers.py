"""Markers: gpu, precision, device and slow, each met and unmet; arguments they refuse."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from pytest_hpml.config.markers import (
    GpuRequirement,
    MarkerError,
    distributed_settings,
    gpu_requirement,
    gpu_skip_reason,
)
from pytest_hpml.hardware.devices import GpuInfo

if TYPE_CHECKING:
    from tests.conftest import Project


@dataclass(frozen=True)
class Machine:
    """What gpu_skip_reason reads of the hardware, as plain data."""

    cuda_count: int
    gpus: tuple[GpuInfo, ...]


A100 = GpuInfo(0, "A100", 80 * 2**30, (8, 0))
T4 = GpuInfo(1, "T4", 16 * 2**30, (7, 5))
TWO_GPUS = Machine(2, (A100, T4))
BOTH = "cuda:0 A100 (sm_80, 80.0 GiB); cuda:1 T4 (sm_75, 16.0 GiB)"


def test_gpu_marks_are_skipped_on_a_machine_without_gpus(
    project: Project, cpu_machine: None
) -> None:
    project.write_tests(
        """
        import pytest


        @pytest.mark.gpu(count=4)
        def test_four():
            pass


        @pytest.mark.gpu()
        def test_one():
            pass
        """
    )
    result = project.run("-v")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [
            "test_inner.py::test_four SKIPPED (needs 4 GPUs, found 0)*",
            "test_inner.py::test_one SKIPPED (needs 1 GPU, found 0)*",
        ]
    )


@pytest.mark.parametrize(
    ("requirement", "reason"),
    [
        (GpuRequirement(), None),
        (GpuRequirement(count=2), None),
        (GpuRequirement(count=3), "needs 3 GPUs, found 2"),
        (GpuRequirement(memory_gb=40), None),
        (
            GpuRequirement(count=2, memory_gb=40),
            f"needs 2 GPUs with >= 40 GiB, found 1 qualifying of 2: {BOTH}",
        ),
        (GpuRequirement(capability=(8, 0)), None),
        (
            GpuRequirement(capability=(9, 0)),
            f"needs 1 GPU of compute capability >= 9.0, found 0 qualifying of 2: {BOTH}",
        ),
        (GpuRequirement(count=2, memory_gb=16, capability=(7, 5)), None),
    ],
    ids=[
        "one",
        "two",
        "three-unmet",
        "memory",
        "memory-unmet",
        "capability",
        "capability-unmet",
        "all-met",
    ],
)
def test_gpu_skip_reason(requirement: GpuRequirement, reason: str | None) -> None:
    assert gpu_skip_reason(requirement, TWO_GPUS) == reason


def test_gpu_skip_reason_looks_at_gpu_details_only_when_asked() -> None:
    counted_only = SimpleNamespace(cuda_count=2)  # no gpus attribute to read
    assert gpu_skip_reason(GpuRequirement(count=2), counted_only) is None


def test_gpu_requirement_reads_the_mark_arguments() -> None:
    mark = pytest.mark.gpu(2, memory_gb=40, capability=[8, 6]).mark
    assert gpu_requirement(mark) == GpuRequirement(2, 40, (8, 6))


PRECISION_MARKED = """
import pytest


@pytest.mark.precision("fp16", "bf16")
def test_low(precision):
    assert precision.name in ("fp16", "bf16")
"""


def test_precision_mark_keeps_only_its_precisions(project: Project) -> None:
    project.write_tests(PRECISION_MARKED)
    result = project.run("--hpml-precision=fp32,bf16,fp16", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["test_inner.py::test_low[[]bf16[]] PASSED*", "test_inner.py::test_low[[]fp16[]] PASSED*"]
    )


def test_precision_mark_skips_with_a_reason_when_none_is_selected(project: Project) -> None:
    project.write_tests(PRECISION_MARKED)
    result = project.run("-v")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "test_inner.py::test_low[[]no-precision[]] SKIPPED "
            "(runs only with fp16, bf16; selected: fp32 (--hpml-precision))*"
        ]
    )


def test_device_mark_skips_cuda_tests_on_cpu_and_runs_cpu_ones(project: Project) -> None:
    project.write_tests(
        """
        import pytest


        @pytest.mark.device("cuda")
        def test_cuda(device):
            pass


        @pytest.mark.device("cpu", "mps")
        def test_cpu(device):
            assert device.type == "cpu"
        """
    )
    result = project.run("--hpml-device=cpu", "-v")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "test_inner.py::test_cuda[[]no-device[]] SKIPPED "
            "(runs only with cuda; selected: cpu (--hpml-device))*",
            "test_inner.py::test_cpu[[]cpu[]] PASSED*",
        ]
    )


SLOW_AND_FAST = """
import pytest


@pytest.mark.slow
def test_slow():
    pass


def test_fast():
    pass
"""


def test_slow_tests_are_deselected_by_default(project: Project) -> None:
    project.write_tests(SLOW_AND_FAST)
    result = project.run("-v")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["test_inner.py::test_fast PASSED*"])


def test_slow_tests_are_kept_when_marker_expression_asks_for_them(project: Project) -> None:
    project.write_tests(SLOW_AND_FAST)
    result = project.run("-m", "slow", "-v")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["test_inner.py::test_slow PASSED*"])


def test_hpml_markers_pass_strict_markers(project: Project) -> None:
    project.write_tests(
        """
        import pytest


        @pytest.mark.gpu(count=1)
        @pytest.mark.precision("fp32")
        @pytest.mark.device("cpu")
        @pytest.mark.slow
        def test_marked():
            pass
        """
    )
    result = project.run("--strict-markers", "--hpml-run-slow", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["test_inner.py::test_marked"])


@pytest.mark.parametrize(
    ("timeout", "said"),
    [
        (3600, None),
        (0.5, None),
        (3601, "timeout: expected seconds in (0, 3600], got '3601', as --hpml-dist-timeout"),
        (1e15, "timeout: expected seconds in (0, 3600], got '1e+15', as --hpml-dist-timeout"),
    ],
)
def test_a_distributed_timeout_is_bounded_as_the_option_is(
    timeout: float, said: str | None
) -> None:
    """Beyond what a process group's timedelta holds, a timeout was an OverflowError in every
    rank; it is refused as --hpml-dist-timeout refuses it, by the same parser."""
    mark = pytest.mark.distributed(timeout=timeout).mark
    if said is None:
        assert distributed_settings(mark) == (2, None, float(timeout))
    else:
        with pytest.raises(MarkerError) as refused:
            distributed_settings(mark)
        assert str(refused.value) == said


BENCH_MARKS = """
import pytest


@pytest.mark.hpml_bench(threshold=0.5)
def test_plain():
    pass


@pytest.mark.hpml_bench(threshold=0.5)
def test_bench(benchmark):
    benchmark.record("n", 1)


class TestMarked:
    pytestmark = pytest.mark.hpml_bench(threshold=0.2)

    def test_helper(self):
        pass

    def test_bench(self, benchmark):
        benchmark.record("n", 1)
"""


def test_an_hpml_bench_mark_on_a_test_that_benchmarks_nothing_is_said(project: Project) -> None:
    """Its threshold would be ignored silently; a mark on a class (or module) whose benchmarks
    sit beside plain tests is in use."""
    project.write_tests(BENCH_MARKS)
    result = project.run()
    result.assert_outcomes(passed=4, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*PytestConfigWarning: @pytest.mark.hpml_bench on 1 test(s) "
            "(test_inner.py::test_plain, ...) has no effect: no test it marks asks for the "
            "benchmark fixture*"
        ]
    )
    strict = project.run("-W", "error::pytest.PytestConfigWarning")  # an error: not internal
    assert strict.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in strict.stdout.str() + strict.stderr.str()
    strict.stderr.fnmatch_lines(
        ["ERROR: @pytest.mark.hpml_bench on 1 test(s) * an error under this run's warning filters"]
    )


RESTRICTING_MARKS = """
import pytest

pytestmark = pytest.mark.device("cpu")  # in use: test_on_cpu asks for the device fixture


@pytest.mark.precision("fp16")
def test_no_precision():
    pass


@pytest.mark.device("cuda")
def test_no_device():
    pass


def test_on_cpu(device):
    assert device.type == "cpu"
"""


@pytest.mark.parametrize("name", ["precision", "device"])
def test_a_restricting_mark_on_a_test_without_its_fixture_is_said(
    project: Project, name: str
) -> None:
    """It restricts nothing there; a module's mark whose tests ask for the fixture is in use."""
    project.write_tests(RESTRICTING_MARKS)
    result = project.run("-W", "always::pytest.PytestConfigWarning")
    result.assert_outcomes(passed=3, warnings=2)
    result.stdout.fnmatch_lines(
        [
            f"*PytestConfigWarning: @pytest.mark.{name} on 1 test(s) (test_inner.py::test_no_"
            f"{name}, ...) has no effect: no test it marks asks for the {name} fixture, whose "
            "values it restricts"
        ]
    )


def test_a_benchmark_mark_of_no_rounds_fails_its_test(project: Project) -> None:
    """pytest-benchmark's marker takes ``min_rounds=0``, which its --benchmark-min-rounds
    refuses: the test would measure by another rule than the one it wrote."""
    project.write_tests(
        "import pytest\n\n\n@pytest.mark.benchmark(min_rounds=0)\n"
        "def test_rounds(benchmark):\n    benchmark(sum, range(10))\n"
    )
    result = project.run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_inner.py::test_rounds: wrong @pytest.mark.benchmark: min_rounds=0; a whole "
            "number of at least 1"
        ]
    )
    assert "not used at all" not in result.stdout.str()  # refused before the fixture is made


TOLERANCES = """
import pytest
import torch


@pytest.mark.hpml_bench(tolerance={"no_such_counter": 0.01, "time": 0.1, "instructions": 0.02})
def test_pure(benchmark):
    benchmark(sum, range(10))


@pytest.mark.hpml_bench(tolerance={"ops": 0.1, "flops[float32]": 0.1, "syncs[fast]": 0.1})
def test_variants(benchmark):
    x = torch.ones(4, 4)
    benchmark.variants({"fast": lambda: x @ x, "slow": lambda: (x @ x).sum().item()})
"""


def test_a_tolerance_for_a_count_the_benchmark_does_not_record_is_refused(
    project: Project,
) -> None:
    """A tolerance applies to the work counters and instructions, by their names without a
    variant's suffix: any other name would be ignored, so it fails the run naming the counts,
    as an expect_change naming an unrecorded metric does."""
    project.write_tests(TOLERANCES)
    result = project.bench()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    errors = project.hpml_errors(result)
    assert len(errors) == 2, errors
    assert errors[0] == (
        "hpml: ERROR test_inner.py::test_pure: hpml_bench(tolerance=...) names "
        "'no_such_counter', 'time', which this benchmark does not count; it counts 'instructions'"
    )
    assert errors[1].startswith(
        "hpml: ERROR test_inner.py::test_variants: hpml_bench(tolerance=...) names 'syncs[fast]', "
        "which this benchmark does not count; it counts 'allocated_bytes', 'allocations', "
    )
    assert ", 'flops[float32]', " in errors[1]
    assert ", 'ops', " in errors[1]
