"""Measured as the user wrote it (Note [Torch state], Note [Split pairs]): the thread count
and the seed apply however the test imports torch, in every process that measures; a count
that depends on random data is the same in every process once seeded; and a verdict whose
processes measured at two speeds says so instead of trusting the lucky ones.

The inner projects are real git repositories measured head against base in real processes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import BENCH_TIME, TIMES_UNJUDGED, committed

if TYPE_CHECKING:
    from tests.conftest import Project

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="needs git",
)

# torch imported by the test body, after the benchmark fixture started, as many libraries'
# tests do; each call notes its process and the thread count it ran with.
IMPORTS_INSIDE = """
import os


def test_case(benchmark):
    import torch

    x = torch.randn(64, 64)

    def call():
        with open(os.environ["PROBE_FILE"], "a") as out:
            out.write(f"{os.getpid()} {torch.get_num_threads()}\\n")
        return x @ x

    benchmark(call)
"""


def probed(path: Path) -> dict[str, set[int]]:
    """The thread counts each process's calls ran with, by process id."""
    found: dict[str, set[int]] = {}
    for line in path.read_text().splitlines():
        pid, threads = line.split()
        found.setdefault(pid, set()).add(int(threads))
    return found


@pytest.fixture
def probe(project: Project, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The probe's file; torch's default thread count 2 wherever nothing sets one."""
    path = project.path / "threads.txt"
    monkeypatch.setenv("PROBE_FILE", str(path))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    return path


def test_against_measures_at_one_thread_where_the_test_imports_torch(
    project: Project, probe: Path
) -> None:
    committed(project, test_inner=IMPORTS_INSIDE)
    result = project.run_subprocess(
        "--hpml-against=HEAD", "--hpml-pairs=2", BENCH_TIME, TIMES_UNJUDGED
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    found = probed(probe)
    assert len(found) >= 5  # the run's own process and both sides of two pairs
    assert all(threads == {1} for threads in found.values()), found


def test_stored_baselines_measure_at_the_asked_threads_where_the_test_imports_torch(
    project: Project, probe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPML_RECORD_PROCESSES", "2")  # a fresh process records too
    project.write_tests(IMPORTS_INSIDE)
    result = project.run_subprocess("--hpml-threads=1", "--hpml-baseline=update", BENCH_TIME)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    found = probed(probe)
    assert len(found) >= 2
    assert all(threads == {1} for threads in found.values()), found
    (record,) = project.stored("machine").values()
    states = [record["time"].get("state"), *(r.get("state") for r in record["time"]["processes"])]
    assert [s["threads"] for s in states] == [1] * len(states), states


# Random data drawn in every call, unseeded: unique values, and with them the bytes allocated,
# differ from one draw to the next.
UNSEEDED = """
def test_unique(benchmark):
    import torch

    benchmark(lambda: torch.unique(torch.randint(0, 1000, (1000,))))
"""


def test_counts_of_random_data_are_the_same_in_every_process(project: Project) -> None:
    committed(project, test_inner=UNSEEDED)
    report = project.path / "r.json"
    result = project.run_subprocess(
        "--hpml-against=HEAD",
        "--hpml-pairs=3",
        BENCH_TIME,
        TIMES_UNJUDGED,
        f"--hpml-report={report}",
    )
    verdicts = json.loads(report.read_text())["results"][0]["verdicts"]
    counted = {name: v for name, v in verdicts.items() if name != "time"}
    assert counted["allocated_bytes"]["verdict"] == "pass", counted["allocated_bytes"]
    states = verdicts["time"]["states"]  # each side's torch state, as its processes read it
    assert states["head"] == states["base"]
    assert [s["threads"] for s in states["head"]] == [1]
    assert {v["verdict"] for v in counted.values()} == {"pass"}, counted
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()


# The base side's processes all take the slow path; two of the working tree's five take a
# path four times faster, chosen per process (by a counter), as a thread count or a busy
# machine makes some processes fast and others slow. The code is the same on both sides.
SPLIT = """
import os
from pathlib import Path

SIDE = "base" if "pytest-hpml-base-" in __file__ else "head"
COUNTER = Path(os.environ["SPLIT_DIR"], SIDE)
STARTED = int(COUNTER.read_text()) if COUNTER.exists() else 0
COUNTER.write_text(str(STARTED + 1))
# the run's own process is head's 0th; the pairs' head processes are 1 to 5
FAST = SIDE == "head" and STARTED in (2, 4)


def work():
    return sum(range(20_000 if FAST else 80_000))


def test_split(benchmark):
    benchmark(work)
"""


def test_processes_at_two_speeds_are_never_called_changed(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same code on both sides, two of the head side's five processes four times faster:
    the pairs that agree judge, the two set aside, and no change is claimed (Note [Split
    pairs])."""
    counters = project.path.parent / "counters"
    counters.mkdir()
    monkeypatch.setenv("SPLIT_DIR", str(counters))
    committed(project, test_inner=SPLIT)
    report = project.path / "r.json"
    result = project.run(
        "--hpml-against=HEAD", BENCH_TIME, "--hpml-pairs=5", f"--hpml-report={report}"
    )
    (verdict,) = (r["verdicts"]["time"] for r in json.loads(report.read_text())["results"])
    assert min(verdict["sides"]["head"]) < 0.5 * min(verdict["sides"]["base"]), verdict
    assert verdict["verdict"] in ("inconclusive", "pass"), verdict
    assert "pairs set aside at 0.2" in verdict["reason"], verdict
    assert result.ret == pytest.ExitCode.OK


# A benchmark that leaves torch's deterministic flag alone, one that sets it, and checks after
# each: the flag is restored, and restoring an unchanged one imports nothing.
DETERMINISTIC = """
import sys

import torch


def test_untouched(benchmark):
    benchmark(torch.ones, 4)


def test_nothing_more_was_imported():
    assert "torch._inductor" not in sys.modules


def test_sets_it(benchmark):
    torch.use_deterministic_algorithms(True)
    benchmark(torch.ones, 4)


def test_it_is_restored():
    assert not torch.are_deterministic_algorithms_enabled()
"""


def test_the_deterministic_flag_is_restored_only_where_a_test_changed_it(
    project: Project,
) -> None:
    """Setting the flag imports torch._inductor (1.6 s the first time, in every fresh process
    of a comparison): putting back a value that did not change must not (Note [Cheaper
    processes])."""
    project.write_tests(DETERMINISTIC)
    result = project.run_subprocess(BENCH_TIME, "--hpml-baseline=off")
    result.assert_outcomes(passed=4)
