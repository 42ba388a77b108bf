"""Installed is not opted in: a run that says nothing of pytest-hpml gets pytest-benchmark as
if pytest-hpml were not installed (Note [Opting in]); one line opts a project in."""

from __future__ import annotations

import json
from typing import Any

import pytest

INNER = """
import json


def test_sum(benchmark):
    benchmark.extra_info["mine"] = 1
    benchmark(sum, range(100))
    with open("fixture.json", "w") as out:
        json.dump({"class": type(benchmark).__name__}, out)
"""
# Short and verbose: pytest-benchmark's calibration lines show its own rounds were taken.
OPTIONS = ("--benchmark-max-time=0.05", "--benchmark-verbose", "--benchmark-json=out.json")


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project that says nothing of pytest-hpml: no HPML_* variable, no hpml ini key."""
    for name in ("HPML_BENCHMARKS", "HPML_PROCESSES", "HPML_RECORD_PROCESSES", "HPML_BASELINE"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_inner=INNER)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    result = pytester.runpytest_subprocess(*OPTIONS, *args)
    found = json.loads((pytester.path / "out.json").read_text())
    found["fixture"] = json.loads((pytester.path / "fixture.json").read_text())["class"]
    return result, found


def test_not_opted_in_is_pytest_benchmark_untouched(inner: pytest.Pytester) -> None:
    alone, without = run(inner, "-p", "no:hpml")
    installed, found = run(inner)
    assert installed.ret == alone.ret == pytest.ExitCode.OK
    assert found["fixture"] == without["fixture"] == "BenchmarkFixture"
    [bench], [bench_alone] = found["benchmarks"], without["benchmarks"]
    assert bench["extra_info"] == bench_alone["extra_info"] == {"mine": 1}
    assert bench["options"] == bench_alone["options"]
    for result in (alone, installed):  # pytest-benchmark's log, on stderr
        assert "Calibrating to target round" in result.stderr.str()
    installed.stdout.no_fnmatch_line("*hpml benchmarks*")
    installed.stdout.no_fnmatch_line("hpml: *benchmarks=*")


@pytest.mark.parametrize(
    ("how", "args", "env"),
    [
        ("ini", (), {}),
        ("option", ("--hpml-benchmarks",), {}),
        ("env", (), {"HPML_BENCHMARKS": "1"}),
        ("a benchmark option", ("--hpml-baseline=off",), {}),
    ],
)
def test_one_line_opts_in(
    inner: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
    args: tuple[str, ...],
    env: dict[str, str],
) -> None:
    if how == "ini":
        inner.makeini("[pytest]\nhpml_benchmarks = true\n")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result, found = run(inner, "--hpml-bench-time=0.2", *args)
    assert result.ret == pytest.ExitCode.OK
    assert found["fixture"] == "HpmlBenchmark"
    result.stdout.fnmatch_lines(["*hpml benchmarks*", "test_inner.py::test_sum *time*"])


def test_opting_out_explicitly_wins_over_the_ini_files_benchmark_options(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Standing configuration waits for a run that opts in; the same option given for this
    run is a usage error (tests/test_errors.py)."""
    inner.makeini("[pytest]\nhpml_baseline = off\n")
    monkeypatch.setenv("HPML_BENCHMARKS", "0")
    result, found = run(inner)
    assert result.ret == pytest.ExitCode.OK
    assert found["fixture"] == "BenchmarkFixture"


OPTED_IN = """
import pytest


def test_sum(benchmark):
    benchmark(sum, range(100))


@pytest.mark.benchmark(warmup=True, max_time=0.5)
def test_marked(benchmark):
    benchmark(sum, range(100))
"""


@pytest.fixture
def opted_in(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("HPML_BENCHMARKS", "1")
    monkeypatch.setenv("HPML_BASELINE", "off")
    monkeypatch.setenv("HPML_BENCH_TIME", "0.2")
    pytester.makepyfile(test_inner=OPTED_IN)
    return pytester


def benchmarks(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    result = pytester.runpytest_subprocess("--benchmark-json=out.json", *args)
    found = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    return result, {bench["name"]: bench for bench in found}


def test_honoured_min_rounds_timer_and_gc(opted_in: pytest.Pytester) -> None:
    args = ("--benchmark-min-rounds=700", "--benchmark-timer=time.process_time")
    result, found = benchmarks(opted_in, *args, "--benchmark-disable-gc")
    assert result.ret == pytest.ExitCode.OK
    options = found["test_sum"]["options"]
    assert found["test_sum"]["stats"]["rounds"] >= 700
    assert (options["timer"], options["disable_gc"], options["min_rounds"]) == (
        "process_time",
        True,
        700,
    )


def test_the_json_options_say_what_was_used(opted_in: pytest.Pytester) -> None:
    result, found = benchmarks(opted_in, "--benchmark-min-time=0.00002")
    assert result.ret == pytest.ExitCode.OK
    options, stats = found["test_sum"]["options"], found["test_sum"]["stats"]
    assert options["max_time"] == 0.2  # --hpml-bench-time, not pytest-benchmark's 1.0
    assert options["min_time"] == 0.00002  # the round length asked for, honoured
    assert options["warmup"] > 0  # the warm-up calls made
    # pytest-benchmark's calibration made rounds of many calls: sum(range(100)) takes about a
    # microsecond, far less than the 20 us asked for.
    assert stats["iterations"] >= 5


def test_superseded_settings_are_named_once(opted_in: pytest.Pytester) -> None:
    result, _ = benchmarks(opted_in, "--benchmark-max-time=2", "--benchmark-precision=0.05")
    assert result.ret == pytest.ExitCode.OK
    out = result.stdout.str()
    assert out.count("hpml: pytest-benchmark's max_time is superseded by --hpml-bench-time") == 1
    assert out.count("hpml: pytest-benchmark's warmup is superseded") == 1  # the marker's
    assert out.count("hpml: pytest-benchmark's precision is superseded") == 1


def test_cprofile_and_verbose_are_honoured(opted_in: pytest.Pytester) -> None:
    result, found = benchmarks(opted_in, "--benchmark-cprofile=ncalls", "--benchmark-verbose")
    assert result.ret == pytest.ExitCode.OK
    assert found["test_sum"]["cprofile"]  # the profile pytest-benchmark keeps
    result.stdout.fnmatch_lines(["*cProfile (time in s)*"])
    log = result.stderr.str()
    assert "pytest-hpml: first call" in log
    assert "Ran for " in log
    assert " rounds x " in log


def test_an_hpml_bench_mark_in_a_run_not_opted_in_is_named_as_without_effect(
    inner: pytest.Pytester,
) -> None:
    inner.makepyfile(
        test_marked="import pytest\n\n\n@pytest.mark.hpml_bench(threshold=0.1)\n"
        "def test_marked(benchmark):\n    benchmark(sum, range(10))\n"
    )
    result = inner.runpytest_subprocess("test_marked.py", "--benchmark-disable")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*@pytest.mark.hpml_bench on 1 test(s) (test_marked.py::test_marked, ...) has no effect*"]
    )
