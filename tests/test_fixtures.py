"""Fixtures: device, precision, backend, dist_backend, num_workers and hpml_seed; the
benchmark fixture's tracebacks."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
import torch

from pytest_hpml.bench.measure import Plan, measure, users_error
from pytest_hpml.fixtures.precision import Precision, tf32

if TYPE_CHECKING:
    from tests.conftest import Project

CPU = torch.device("cpu")


def test_device_is_a_torch_device_and_auto_resolves_to_cpu(
    project: Project, cpu_machine: None
) -> None:
    project.write_probe()
    project.run().assert_outcomes(passed=1)
    [seen] = project.records()
    assert (seen["device"], seen["is_torch_device"]) == ("cpu", True)


@pytest.mark.parametrize(
    ("name", "dtype", "tolerances"),
    [
        ("fp32", "torch.float32", [1e-5, 1e-5]),
        ("fp16", "torch.float16", [1e-2, 1e-2]),
        ("bf16", "torch.bfloat16", [5e-2, 5e-2]),
    ],
)
def test_precision_has_its_dtype_and_tolerances(
    project: Project, name: str, dtype: str, tolerances: list[float]
) -> None:
    project.write_probe()
    project.run(f"--hpml-precision={name}").assert_outcomes(passed=1)
    [seen] = project.records()
    assert (seen["precision"], seen["dtype"], seen["tolerances"]) == (name, dtype, tolerances)


def test_precision_autocast_runs_matmul_in_its_dtype_on_cpu(project: Project) -> None:
    project.write_probe()
    project.run("--hpml-device=cpu", "--hpml-precision=fp32,fp16,bf16").assert_outcomes(passed=3)
    seen = {r["precision"]: r["matmul_dtype"] for r in project.records()}
    assert seen == {"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16"}


def test_precision_assert_close_uses_its_tolerances(project: Project) -> None:
    project.write_tests(
        """
        import pytest
        import torch


        def test_against_fp32_reference(precision):
            a = torch.randn(32, 32)
            with precision.autocast():
                low = a @ a
            precision.assert_close(low, a @ a)
            with pytest.raises(AssertionError):
                precision.assert_close(low * 1.5, a @ a)
        """
    )
    project.run("--hpml-precision=fp32,fp16,bf16").assert_outcomes(passed=3)


def test_tf32_is_skipped_on_cpu_with_a_reason(project: Project) -> None:
    project.write_probe()
    result = project.run("--hpml-device=cpu", "--hpml-precision=tf32", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * tf32 is a CUDA mode *; on cpu it is plain fp32"])


def test_fp32_precision_turns_tf32_off_and_restores_it_after_a_failure(
    project: Project, tf32_flags: None
) -> None:
    project.write_tests(
        """
        import torch

        FLAGS = (torch.backends.cuda.matmul, torch.backends.cudnn)


        def test_before():
            for flags in FLAGS:
                flags.allow_tf32 = True


        def test_fp32(precision):
            assert [flags.allow_tf32 for flags in FLAGS] == [False, False]
            raise RuntimeError("failing on purpose")


        def test_after():
            assert [flags.allow_tf32 for flags in FLAGS] == [True, True]
        """
    )
    result = project.run("--hpml-precision=fp32")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError: failing on purpose"])


@pytest.mark.parametrize(("name", "inside"), [("fp32", False), ("tf32", True)])
def test_precision_flags_set_tf32_and_restore_it(name: str, inside: bool, tf32_flags: None) -> None:
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    matmul.allow_tf32 = cudnn.allow_tf32 = not inside
    with Precision(name, CPU).flags():
        assert (matmul.allow_tf32, cudnn.allow_tf32) == (inside, inside)
    assert (matmul.allow_tf32, cudnn.allow_tf32) == (not inside, not inside)


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_mixed_precision_flags_leave_tf32_alone(name: str, tf32_flags: None) -> None:
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    matmul.allow_tf32, cudnn.allow_tf32 = True, False
    with Precision(name, CPU).flags():
        assert (matmul.allow_tf32, cudnn.allow_tf32) == (True, False)


def test_tf32_restores_flags_when_the_block_raises(tf32_flags: None) -> None:
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    matmul.allow_tf32, cudnn.allow_tf32 = False, True
    with pytest.raises(KeyError), tf32(True):
        raise KeyError("inside")
    assert (matmul.allow_tf32, cudnn.allow_tf32) == (False, True)


def test_tf32_restores_a_state_set_through_fp32_precision(tf32_flags: None) -> None:
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    matmul.fp32_precision, conv.fp32_precision = "tf32", "ieee"
    with tf32(False):
        assert (matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, False)
    assert (matmul.fp32_precision, conv.fp32_precision) == ("tf32", "ieee")


def test_eager_backend_returns_the_function_unchanged_and_aot_eager_compiles_it(
    project: Project,
) -> None:
    project.write_tests(
        """
        import torch


        def step(x):
            return torch.sin(x) * 2 + 1


        def test_compiled(backend, record):
            x = torch.linspace(-1, 1, 8)
            compiled = backend.compile(step)
            record(
                backend=str(backend),
                unchanged=compiled is step,
                same_result=torch.equal(compiled(x), step(x)),
            )
        """
    )
    project.run("--hpml-backend=eager,aot_eager").assert_outcomes(passed=2)
    assert [(r["backend"], r["unchanged"], r["same_result"]) for r in project.records()] == [
        ("eager", True, True),
        ("aot_eager", False, True),
    ]


def test_dynamo_is_reset_after_a_test_using_backend(project: Project) -> None:
    project.write_tests(
        """
        import torch
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list


        def step(x):
            return x * 2


        def compiled_graphs():
            return len(_debug_get_cache_entry_list(step.__code__))


        def test_compiles(backend, record):
            backend.compile(step)(torch.ones(3))
            record(graphs=compiled_graphs())


        def test_next(record):
            record(graphs=compiled_graphs())
        """
    )
    project.run("--hpml-backend=aot_eager").assert_outcomes(passed=2)
    assert [r["graphs"] for r in project.records()] == [1, 0]


def test_dist_backend_auto_is_gloo_on_cpu(project: Project) -> None:
    project.write_probe()
    project.run("--hpml-device=cpu").assert_outcomes(passed=1)
    assert [r["dist_backend"] for r in project.records()] == ["gloo"]


@pytest.mark.parametrize("name", ["gloo", "nccl", "mpi"])
def test_dist_backend_given_explicitly_is_returned_as_is(project: Project, name: str) -> None:
    """Or, where this torch was built without it, the test is skipped, saying so."""
    project.write_probe()
    result = project.run(f"--hpml-dist-backend={name}", "-rs")
    if getattr(torch.distributed, f"is_{name}_available")():
        result.assert_outcomes(passed=1)
        assert [r["dist_backend"] for r in project.records()] == [name]
    else:
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(
            [f"SKIPPED * {name} backend (--hpml-dist-backend={name}): torch * built without it*"]
        )


@pytest.mark.parametrize(
    ("given", "counts"),
    [
        ("0,2", [0, 2]),
        ("auto", [max(1, min(len(os.sched_getaffinity(0)), 8))]),
    ],
)
def test_num_workers_runs_once_per_count(project: Project, given: str, counts: list[int]) -> None:
    project.write_probe()
    project.run(f"--hpml-loader-workers={given}").assert_outcomes(passed=len(counts))
    assert [r["num_workers"] for r in project.records()] == counts


def test_hpml_seed_gives_each_test_the_same_random_numbers(project: Project) -> None:
    project.write_tests(
        """
        import random

        import numpy
        import torch


        def draw(record, seed):
            record(seed=seed, draws=[random.random(), numpy.random.rand(), torch.rand(1).item()])


        def test_first(hpml_seed, record):
            draw(record, hpml_seed)


        def test_second(hpml_seed, record):
            draw(record, hpml_seed)
        """
    )
    project.run("--hpml-seed=3").assert_outcomes(passed=2)
    first, second = project.records()
    assert first["seed"] == second["seed"] == 3
    assert first["draws"] == second["draws"]


def test_different_seeds_give_different_random_numbers(project: Project) -> None:
    project.write_probe()
    for seed in ("1", "2"):
        project.run(f"--hpml-seed={seed}").assert_outcomes(passed=1)
    first, second = project.records()
    assert (first["seed"], second["seed"]) == (1, 2)
    assert all(a != b for a, b in zip(first["draws"], second["draws"]))


FAILING_BENCHMARKS = """
def divide(x):
    return 1 / x


def test_call(benchmark):
    benchmark(divide, 0)


def test_variants(benchmark):
    benchmark.variants({"one": lambda: divide(1), "zero": lambda: divide(0)})


def test_not_callable(benchmark):
    benchmark(5)


def test_bad_amount(benchmark):
    benchmark.expect_change("why", ops="lots")
"""


def test_a_failing_benchmark_shows_the_users_frames_not_pytest_hpmls(project: Project) -> None:
    """Between the test and the code it benchmarks lie pytest-hpml's measuring frames: a failure
    of that code, or pytest-hpml refusing what the test asked, shows the test's lines only."""
    project.write_tests(FAILING_BENCHMARKS)
    result = project.run("--tb=short")
    result.assert_outcomes(failed=4)
    output = result.stdout.str()
    assert "pytest_hpml/" not in output
    result.stdout.fnmatch_lines(
        [
            "*_ test_call _*",
            "test_inner.py:*: in test_call",
            "test_inner.py:*: in divide",
            "E   ZeroDivisionError: division by zero",
            "*_ test_variants _*",
            "test_inner.py:*: in test_variants",
            "test_inner.py:*: in <lambda>",
            "test_inner.py:*: in divide",
            "E   ZeroDivisionError: division by zero",
            "*_ test_not_callable _*",
            "test_inner.py:*: in test_not_callable",
            "E   TypeError: 'int' object is not callable",
            "*_ test_bad_amount _*",
            "test_inner.py:*: in test_bad_amount",
            "E   TypeError: expect_change(ops='lots'): give how much it may grow*",
        ]
    )


def test_a_failure_of_pytest_hpmls_own_code_keeps_its_frames() -> None:
    """Where pytest-hpml itself breaks (here, a reference workload it cannot time), its frames
    stay in the traceback, for the bug report; the benchmarked code's own failure hides them."""
    with pytest.raises(AttributeError) as broken:
        measure({"f": lambda: None}, Plan(budget=0.01, reference=object()))
    assert users_error(broken) is False
    with pytest.raises(ZeroDivisionError) as failed:
        measure({"f": lambda: 1 / 0}, Plan(budget=0.01))
    assert users_error(failed) is True
