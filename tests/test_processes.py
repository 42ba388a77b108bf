"""Benchmarks measured in several processes (--hpml-processes): the other processes run only the
benchmarks, share the measuring time, and their runs are pooled, stored and judged together.

The first process runs in this interpreter (pytester); the others are real ``python -m pytest``
processes started by the plugin.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from pytest_hpml.config import invocation
from tests.conftest import WORK

if TYPE_CHECKING:
    from tests.conftest import Project

TEST = "test_inner.py::test_work"

# WORK, a test that is no benchmark, and a record of which processes ran which test.
SOURCE = (
    "import os\n\nimport torch  # noqa: F401  (every process then times the reference workload)\n"
    + WORK
    + '    with open("ran.txt", "a") as out:\n'
    + '        out.write(os.environ.get("HPML_RERUN", "first") + "\\n")\n'
    + "\n\ndef test_plain():\n"
    + '    with open("plain.txt", "a") as out:\n'
    + '        out.write("ran\\n")\n'
)


@pytest.fixture
def project3(project: Project) -> Project:
    project.write_tests(SOURCE)
    return project


def ran(project: Project, name: str = "ran.txt") -> list[str]:
    return (project.path / name).read_text().split()


def test_update_records_the_runs_of_every_process(project3: Project) -> None:
    result = project3.bench("--hpml-baseline=update", "--hpml-record-processes=3")
    assert result.ret == pytest.ExitCode.OK
    record = project3.stored("machine")[TEST]["time"]
    runs = [record, *record["processes"]]
    assert len(runs) == 3
    assert all(len(run["samples"]) == len(run["reference"]) >= 5 for run in runs)
    result.stdout.fnmatch_lines(["hpml: 1 benchmark(s) measured in 3 processes (*"])
    first, *others = ran(project3)
    assert first == "first"
    assert len(others) == 2
    assert "first" not in others
    assert ran(project3, "plain.txt") == ["ran"]  # the other processes ran only the benchmark


def test_processes_share_the_bench_time(project3: Project) -> None:
    project3.bench(
        "--hpml-baseline=update",
        "--hpml-processes=2",
        "--hpml-record-processes=3",
        "--hpml-bench-time=1",
    )
    record = project3.stored("machine")[TEST]["time"]
    assert len(record["processes"]) == 2
    # half of the second each, as in a comparison in 2 processes (what each process measures
    # in that time is tested with a counting clock in test_measurement.py, not with wall time)
    assert [run["budget"] for run in (record, *record["processes"])] == [0.5, 0.5, 0.5]


def test_a_benchmark_measured_in_one_process_gets_all_the_bench_time(project3: Project) -> None:
    project3.bench(
        "--hpml-baseline=off", "--hpml-processes=3", "--hpml-bench-time=1", "--hpml-report=r.json"
    )
    [entry] = json.loads((project3.path / "r.json").read_text())["results"]
    assert entry["metrics"]["time"]["budget"] == 1.0  # not a third of the second


def test_compare_without_a_baseline_measures_in_one_process(project3: Project) -> None:
    result = project3.bench("--hpml-processes=3")
    assert result.ret == pytest.ExitCode.OK
    assert ran(project3) == ["first"]
    assert "measured in 3 processes" not in result.stdout.str()


def test_compare_pools_the_processes_of_both_sides(project3: Project) -> None:
    project3.bench("--hpml-baseline=update", "--hpml-record-processes=2")
    result = project3.bench(
        "--hpml-processes=2", "--hpml-report=report.json", "--hpml-threshold=0.6"
    )
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out
    [entry] = json.loads((project3.path / "report.json").read_text())["results"]
    assert len(entry["metrics"]["time"].get("processes", ())) == 1, out
    assert entry["verdicts"]["time"]["verdict"] != "no-baseline", out
    assert len(ran(project3)) == 4


def test_append_keeps_every_process_run_as_earlier_runs(project3: Project) -> None:
    project3.bench("--hpml-baseline=update", "--hpml-record-processes=2")
    project3.bench("--hpml-baseline=append", "--hpml-record-processes=2")
    record = project3.stored("machine")[TEST]["time"]
    assert len(record["processes"]) == 1
    assert len(record["earlier"]) == 2
    assert all(run["recorded"] and len(run["samples"]) >= 5 for run in record["earlier"])


def test_a_process_that_dies_is_named_and_the_run_judged_on_the_others(project: Project) -> None:
    project.write_tests(
        "import os\n" + WORK + '    if os.environ.get("HPML_RERUN"):\n        os._exit(3)\n'
    )
    result = project.bench("--hpml-baseline=update", "--hpml-record-processes=2")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["hpml: process 2 of 2 measured nothing (exit 3*); judged on fewer processes"]
    )
    assert "processes" not in project.stored("machine")[TEST]["time"]


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        (["--basetemp", "/t", "-x", "tests"], ["-x", "tests"]),
        (["--basetemp=/t", "--junitxml=j.xml", "-k", "fast"], ["-k", "fast"]),
        (["-n", "2", "--dist", "load", "-q"], ["-q"]),
        (["-n2", "--benchmark-autosave", "--lf", "a.py::t"], ["a.py::t"]),
        (["--benchmark-json", "b.json", "--hpml-precision=bf16"], ["--hpml-precision=bf16"]),
    ],
)
def test_other_processes_drop_the_options_that_write_files_or_spread_tests(
    pytester: pytest.Pytester, given: list[str], kept: list[str]
) -> None:
    config = pytester.parseconfig(*given)  # pytester adds a --basetemp of its own
    xdist = ["-n0"] if config.pluginmanager.hasplugin("xdist") else []
    assert invocation.child_args(config) == kept + xdist
