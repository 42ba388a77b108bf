"""The plugin's overhead on a project that does not use it: budget 3% (Note [Start-up cost]).

A benchmark that is run and reported, never asserted: wall times on a shared machine are too
noisy for a pass/fail line. What is asserted is deterministic: both variants pass the same
tests and torch is never imported.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_benchmark.fixture import BenchmarkFixture

    from tests.conftest import Project

TESTS = 30
PAIRS = 9
BUDGET = 1.03


def test_plugin_overhead_on_a_project_without_torch(
    project: Project, benchmark: BenchmarkFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write_tests("".join(f"def test_{i}():\n    assert {i} >= 0\n" for i in range(TESTS)))
    seconds: dict[str, list[float]] = {"with": [], "without": []}
    summaries: dict[str, set[str]] = {"with": set(), "without": set()}

    def run(variant: str) -> None:
        disable = ["-p", "no:hpml"] if variant == "without" else []
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *disable]
        start = time.perf_counter()
        out = subprocess.run(command, cwd=project.path, capture_output=True, text=True)
        seconds[variant].append(time.perf_counter() - start)
        summaries[variant].add(out.stdout.strip().splitlines()[-1].partition(" in ")[0])

    # Interleaved: each timed plugin-enabled round follows an untimed run without the plugin.
    benchmark.pedantic(
        run, args=("with",), setup=lambda: run("without"), rounds=PAIRS, warmup_rounds=0
    )

    with_plugin, without = (statistics.median(seconds[v]) for v in ("with", "without"))
    ratio = with_plugin / without
    benchmark.extra_info.update(
        median_with_s=with_plugin, median_without_s=without, ratio=ratio, budget=BUDGET
    )
    with capsys.disabled():
        print(
            f"\nhpml overhead over {len(seconds['with'])} pairs of {TESTS}-test runs: "
            f"median {with_plugin:.3f} s with the plugin, {without:.3f} s without, "
            f"ratio {ratio:.3f} (budget {BUDGET})"
        )

    assert summaries == {"with": {f"{TESTS} passed"}, "without": {f"{TESTS} passed"}}
    assert project.torch_imported() == [False] * (2 * len(seconds["with"]))
