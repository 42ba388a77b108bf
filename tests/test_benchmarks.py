"""Benchmarks end to end: recording baselines, each verdict against them, the metrics beyond time,
pytest-benchmark's own behaviour kept, and the reports.

Wall times are never asserted: a regression is planted as four times the work (and an
improvement as a quarter of it), judged with a generous threshold, so that verdicts hold on a
noisy machine.
"""

from __future__ import annotations

import json
import re
import statistics
from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml.bench.metrics import is_work_counter
from tests.conftest import WORK, count_tests

if TYPE_CHECKING:
    from tests.conftest import Project

THRESHOLD = "--hpml-threshold=0.6"
WORK_TIME = ("test_inner.py::test_work", "time")


@pytest.fixture
def recorded(project: Project) -> Project:
    """A project whose WORK benchmark has a baseline recorded at scale 1."""
    project.write_tests(WORK)
    assert project.bench("--hpml-baseline=update").ret == pytest.ExitCode.OK
    return project


def sorted_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A json object hook asserting the object's keys are in sorted order."""
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys)
    return dict(pairs)


def test_update_records_time_and_counts_in_machine_and_portable_files(project: Project) -> None:
    project.write_tests(WORK + '    benchmark.record("graph_breaks", 0)\n')
    result = project.bench("--hpml-baseline=update", "--benchmark-json=out.json")
    assert result.ret == pytest.ExitCode.OK
    files = project.baseline_files()
    assert sorted(files) == ["machine", "portable"]
    parsed = {k: json.loads(p.read_text(), object_pairs_hook=sorted_keys) for k, p in files.items()}
    time = parsed["machine"]["entries"]["test_inner.py::test_work"]["time"]
    assert len(time["samples"]) == len(time["reference"]) >= 5
    assert all(isinstance(s, float) and s > 0 for s in time["samples"] + time["reference"])
    [bench] = json.loads((project.path / "out.json").read_text())["benchmarks"]
    # A sample is the mean of a run of pytest-benchmark's rounds, in raw seconds per call.
    assert bench["stats"]["rounds"] % len(time["samples"]) == 0
    assert statistics.mean(time["samples"]) == pytest.approx(bench["stats"]["mean"], rel=1e-4)
    portable = parsed["portable"]["entries"]["test_inner.py::test_work"]
    assert set(portable) == {"graph_breaks"}
    assert portable["graph_breaks"]["value"] == 0
    assert set(parsed["machine"]["entries"]["test_inner.py::test_work"]) == {"time"}
    result.stdout.fnmatch_lines([f"hpml: baselines recorded in {files['machine']}"])


def test_a_test_that_only_records_counts_used_the_fixture(project: Project) -> None:
    project.write_tests(
        "def test_counts(benchmark):\n    benchmark.record('parameters', 1234, unit='')\n"
    )
    result = project.bench(
        "--hpml-baseline=update", "-W", "error::pytest_benchmark.logger.PytestBenchmarkWarning"
    )
    assert result.ret == pytest.ExitCode.OK
    assert "not used" not in result.stdout.str()
    stored = json.loads(next((project.path / "baselines").glob("portable-*.json")).read_text())
    assert stored["entries"]["test_inner.py::test_counts"]["parameters"]["value"] == 1234


def test_recorded_benchmark_is_compared_by_default_on_the_next_run(recorded: Project) -> None:
    result = recorded.bench(THRESHOLD)
    # Compared, not "no-baseline". What the comparison says of unchanged work depends on the
    # machine's load in the two runs (under two CPU hogs: pass, inconclusive, and once
    # "improved", the baseline having been recorded in a busier moment): only that it compared
    # is this test's claim; the verdicts on known changes are the tests below.
    assert recorded.verdicts(result)[WORK_TIME] != "no-baseline"
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    result.stdout.fnmatch_lines(["hpml: baselines: * (compare)", "hpml: metrics: 1 *"])


def test_without_a_baseline_the_verdict_is_no_baseline_and_nothing_is_written(
    project: Project,
) -> None:
    project.write_tests(WORK)
    result = project.bench()
    assert result.ret == pytest.ExitCode.OK
    assert project.verdicts(result) == {WORK_TIME: "no-baseline"}
    assert not project.baseline_dir.exists()


# The work changes 50-fold, far beyond what a busy machine does to the reference units: with
# a quarter of the work, two CPU hogs left -47% of the -75% raw change, below the threshold.
def test_fifty_times_the_work_regresses_and_fails_the_session(recorded: Project) -> None:
    recorded.monkeypatch.setenv("WORK_SCALE", "50")
    result = recorded.bench(THRESHOLD)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert recorded.verdicts(result) == {WORK_TIME: "regressed"}
    [at] = [i for i, line in enumerate(result.outlines) if line.startswith("hpml: REGRESSED")]
    assert result.outlines[at] == "hpml: REGRESSED test_inner.py::test_work"
    line = result.outlines[at + 1]
    value = r"[\d.]+ (s|ms|us|ns)"
    assert re.fullmatch(
        rf"  time: {value} -> {value}, raw \+\d+\.\d%, "
        r"change \+\d+\.\d% in reference units, confidence \d+\.\d%, threshold 60%",
        line,
    ), line


def test_the_refresh_command_quotes_parametrized_ids_for_a_shell(project: Project) -> None:
    # A count that falls is an improvement whatever the machine's load: the command is the point.
    project.write_tests(
        "import os\n\nimport pytest\n\n\n@pytest.mark.parametrize('n', ['a b'])\n"
        "def test_work(benchmark, n):\n"
        '    benchmark.record("n", int(os.environ.get("COUNT", "2")))\n'
    )
    project.run("--hpml-baseline=update")
    project.monkeypatch.setenv("COUNT", "1")
    result = project.run()
    result.stdout.fnmatch_lines(
        [
            "hpml: improved; refresh their baselines with: "
            "pytest --hpml-baseline=update 'test_inner.py::test_work[a b]'"
        ]
    )


def test_a_fiftieth_of_the_work_improves_and_prints_the_refresh_command(
    recorded: Project,
) -> None:
    recorded.monkeypatch.setenv("WORK_SCALE", "0.02")
    result = recorded.bench(THRESHOLD)
    assert result.ret == pytest.ExitCode.OK
    assert recorded.verdicts(result) == {WORK_TIME: "improved"}
    result.stdout.fnmatch_lines(
        [
            "hpml: improved; refresh their baselines with: "
            "pytest --hpml-baseline=update test_inner.py::test_work"
        ]
    )


def test_update_mode_never_fails_for_a_regression_and_records_the_new_times(
    recorded: Project,
) -> None:
    before = recorded.stored("machine")["test_inner.py::test_work"]["time"]["samples"]
    recorded.monkeypatch.setenv("WORK_SCALE", "4")
    result = recorded.bench(THRESHOLD, "--hpml-baseline=update")
    assert result.ret == pytest.ExitCode.OK
    # recording judges nothing: no REGRESSED line, the summary and the exit code agree
    assert recorded.verdicts(result) == {WORK_TIME: "recorded"}
    assert "REGRESSED" not in result.stdout.str()
    result.stdout.fnmatch_lines(["hpml: baselines: * (update)", "hpml: metrics: 1 recorded"])
    assert recorded.stored("machine")["test_inner.py::test_work"]["time"]["samples"] != before


def test_too_few_rounds_are_inconclusive(project: Project) -> None:
    project.write_tests(WORK.replace("benchmark(work)", "benchmark.pedantic(work, rounds=3)"))
    project.bench("--hpml-baseline=update")
    result = project.bench(THRESHOLD)
    assert result.ret == pytest.ExitCode.OK
    assert project.verdicts(result) == {WORK_TIME: "inconclusive"}
    # the last hpml line says what to do instead
    [last] = [line for line in result.outlines if line.startswith("hpml: ")][-1:]
    assert re.fullmatch(
        r"hpml: 1 time verdict\(s\) could not be reached against the stored baselines"
        r"( on this busy machine)?; judge the change against its base instead "
        r"\(--hpml-against=origin/main .*\), or record and compare on a dedicated runner; "
        r"counts were judged all the same",
        last,
    ), last


def test_the_hpml_table_says_how_its_times_differ_from_pytest_benchmarks(
    project: Project,
) -> None:
    project.write_tests(WORK + count_tests(1))
    result = project.bench("--hpml-baseline=update")
    result.stdout.fnmatch_lines(
        [
            "*hpml benchmarks*",
            "hpml: times are the medians over the rounds of 1 process(es)*; "
            "pytest-benchmark's own table shows this process's rounds only",
        ]
    )
    project.write_tests(count_tests(1))  # counts only: no time to tell apart
    result = project.run("--hpml-baseline=update")
    result.stdout.no_fnmatch_line("*times are medians*")


def test_changed_count_regresses_exactly(project: Project) -> None:
    project.write_tests(count_tests(1))
    project.run("--hpml-baseline=update")
    assert project.verdicts(project.run()) == {("test_inner.py::test_0", "n"): "pass"}
    project.monkeypatch.setenv("COUNT", "2")
    result = project.run()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert project.verdicts(result) == {("test_inner.py::test_0", "n"): "regressed"}


def doubled_count(project: Project, tests: int, *args: str) -> pytest.RunResult:
    """Record ``tests`` count benchmarks, then run them with ``args`` counting twice as much."""
    project.write_tests(count_tests(tests))
    project.run("--hpml-baseline=update")
    project.monkeypatch.setenv("COUNT", "2")
    return project.run(*args)


def test_pytest_last_line_counts_the_regression_in_red(project: Project) -> None:
    result = doubled_count(project, 2, "--color=yes")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    last = result.outlines[-1]
    assert "2 passed" in last
    assert "2 benchmarks regressed" in last  # benchmarks, not their metrics
    assert last.startswith("\x1b[31m")  # red, as a failed test makes it, not green
    project.monkeypatch.delenv("COUNT")
    result = project.run("--color=yes")
    assert result.ret == pytest.ExitCode.OK
    assert "regressed" not in result.outlines[-1]
    assert result.outlines[-1].startswith("\x1b[32m")


def test_update_mode_prints_no_verdict_and_its_last_line_agrees(project: Project) -> None:
    result = doubled_count(project, 1, "--hpml-baseline=update")
    assert result.ret == pytest.ExitCode.OK
    assert project.verdicts(result) == {("test_inner.py::test_0", "n"): "recorded"}
    assert result.parseoutcomes() == {"passed": 1}
    result.stdout.no_fnmatch_line("*REGRESSED*")


TRACKED = """
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode


def test_tracked(benchmark, record):
    model, x = torch.nn.Linear(16, 8), torch.randn(4, 16)
    with FlopCounterMode(display=False) as counter:
        model(x)
    record(flops=counter.get_total_flops())
    benchmark.track(model=model, batch_size=4)
    benchmark(model, x)


@pytest.mark.hpml_bench(batch_size=32)
def test_marked(benchmark):
    benchmark(sum, range(100))
"""


def assert_per_round(rate: dict[str, Any], amount: float, time: dict[str, Any]) -> None:
    """Each rate sample is ``amount`` divided by the same round's time."""
    assert len(rate["samples"]) == len(time["samples"])
    expected = [amount / t for t in time["samples"]]
    assert rate["samples"] == pytest.approx(expected, rel=1e-3)  # stored to 5 digits
    assert rate["reference"] == time["reference"]


def test_track_records_parameters_flops_throughput_and_flop_rate(project: Project) -> None:
    project.write_tests(TRACKED)
    project.bench("--hpml-baseline=update").assert_outcomes(passed=2)
    [counted] = project.records()
    portable = project.stored("portable")["test_inner.py::test_tracked"]
    machine = project.stored("machine")["test_inner.py::test_tracked"]
    values = {k: v["value"] for k, v in portable.items() if not is_work_counter(k)}
    assert values.pop("peak_memory") >= 4 * 8 * 4  # at least the output; exact value: below
    assert values == {
        "params": 16 * 8 + 8,
        "param_bytes": (16 * 8 + 8) * 4,
        "flops": counted["flops"],
    }
    # the work counters' FLOPs by dtype add up to torch's FlopCounterMode total
    assert portable["flops[float32]"]["value"] == counted["flops"]
    assert sorted(machine) == ["flop_rate", "throughput", "time"]
    assert_per_round(machine["throughput"], 4, machine["time"])
    assert_per_round(machine["flop_rate"], counted["flops"], machine["time"])
    marked = project.stored("machine")["test_inner.py::test_marked"]
    assert_per_round(marked["throughput"], 32, marked["time"])


def test_tracked_peak_memory_is_the_same_from_run_to_run(project: Project) -> None:
    project.write_tests(TRACKED)
    peaks = []
    for _ in range(2):
        project.bench("--hpml-baseline=update").assert_outcomes(passed=2)
        peaks.append(project.stored("portable")["test_inner.py::test_tracked"]["peak_memory"])
    assert peaks[0]["value"] == peaks[1]["value"] > 0
    assert peaks[0]["unit"] == "B"


COMPILED = """
import torch


def test_broken(benchmark):
    def step(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    compiled = torch.compile(step, backend="eager")
    benchmark(compiled, torch.ones(4))


def test_eager(benchmark):
    benchmark(torch.ones(4).sin)


def test_gave_up(benchmark):
    def step(x):
        for _ in range(2):  # a data-dependent branch in a loop: dynamo runs the frame eagerly
            x = x * 2
            if x.sum() > 0:
                x = x + 1
        return x

    benchmark(torch.compile(step, backend="eager"), torch.ones(4))
"""


def test_compiled_code_records_graphs_breaks_and_recompiles(project: Project) -> None:
    project.write_tests(COMPILED)
    project.bench("--hpml-baseline=update").assert_outcomes(passed=3)
    stored = {
        test: {k: v for k, v in metrics.items() if not is_work_counter(k)}
        for test, metrics in project.stored("portable").items()
    }
    broken = {k: v["value"] for k, v in stored["test_inner.py::test_broken"].items()}
    assert broken == {"graphs": 2, "graph_breaks": 1, "recompiles": 0}
    assert stored["test_inner.py::test_eager"] == {}  # nothing compiled, no compile metrics
    # Compiled code that dynamo gave up on still records its counts: losing a graph shows.
    gave_up = {k: v["value"] for k, v in stored["test_inner.py::test_gave_up"].items()}
    assert set(gave_up) == {"graphs", "graph_breaks", "recompiles"}
    assert gave_up["graph_breaks"] >= 1


def test_variants_record_each_time_and_paired_speedups(project: Project) -> None:
    project.write_tests(
        """
        def test_variants(benchmark):
            benchmark.variants({"small": lambda: sum(range(500)), "big": lambda: sum(range(1500))})
        """
    )
    project.bench("--hpml-baseline=update").assert_outcomes(passed=1)
    stored = project.stored("machine")["test_inner.py::test_variants"]
    assert sorted(stored) == ["speedup[big/small]", "time[big]", "time[small]"]
    small, big = stored["time[small]"]["samples"], stored["time[big]"]["samples"]
    speedup = stored["speedup[big/small]"]
    assert speedup["kind"] == "ratio"
    assert speedup["samples"] == pytest.approx([s / b for s, b in zip(small, big)], rel=1e-3)


def test_variants_record_throughput_and_what_dynamo_compiled(project: Project) -> None:
    project.write_tests(
        """
        import pytest
        import torch

        def step(x):
            y = x.sin()
            torch._dynamo.graph_break()
            return y.cos()

        @pytest.mark.hpml_bench(batch_size=4)
        def test_variants(benchmark):
            x = torch.ones(4)
            compiled = torch.compile(step, backend="eager")
            benchmark.variants({"eager": lambda: step(x), "compiled": lambda: compiled(x)})
        """
    )
    project.bench("--hpml-baseline=update").assert_outcomes(passed=1)
    machine = project.stored("machine")["test_inner.py::test_variants"]
    assert {"throughput[eager]", "throughput[compiled]"} <= set(machine)
    time, rate = machine["time[compiled]"], machine["throughput[compiled]"]
    assert rate["samples"] == pytest.approx([4 / t for t in time["samples"]], rel=1e-3)
    stored = project.stored("portable")["test_inner.py::test_variants"]
    counts = {k: v["value"] for k, v in stored.items() if not is_work_counter(k)}
    assert counts == {"graphs": 2, "graph_breaks": 1, "recompiles": 0}
    assert stored["ops[eager]"]["value"] > 0  # each variant's work counted


def test_pytest_benchmark_table_and_json_keep_working(project: Project) -> None:
    project.write_tests(WORK)
    result = project.bench("--benchmark-json=out.json")
    result.stdout.fnmatch_lines(["*benchmark: 1 tests*", "Name (time in *", "test_work *"])
    [bench] = json.loads((project.path / "out.json").read_text())["benchmarks"]
    assert bench["name"] == "test_work"
    assert bench["stats"]["rounds"] >= 5
    assert bench["extra_info"] == {}  # hpml's data stays out of the user's extra_info


def test_extra_info_holds_what_the_test_put_there_only(project: Project) -> None:
    project.write_tests(
        "def test_mine(benchmark):\n"
        "    benchmark.extra_info['mine'] = 1\n"
        "    benchmark.variants({'a': lambda: sum(range(9)), 'b': lambda: sum(range(10))})\n"
    )
    project.bench("--benchmark-json=out.json").assert_outcomes(passed=1)
    [bench] = json.loads((project.path / "out.json").read_text())["benchmarks"]
    assert bench["extra_info"] == {"mine": 1}


def test_pedantic_keeps_its_rounds_and_iterations(project: Project) -> None:
    project.write_tests(
        "def test_pedantic(benchmark):\n"
        "    benchmark.pedantic(sum, args=(range(100),), rounds=7, iterations=3)\n"
    )
    project.bench("--benchmark-json=out.json", "--hpml-baseline=update").assert_outcomes(passed=1)
    [bench] = json.loads((project.path / "out.json").read_text())["benchmarks"]
    assert (bench["stats"]["rounds"], bench["stats"]["iterations"]) == (7, 3)
    time = project.stored("machine")["test_inner.py::test_pedantic"]["time"]
    assert (len(time["samples"]), time["iterations"]) == (7, 3)


def test_benchmark_disable_runs_once_and_records_nothing(project: Project) -> None:
    project.write_tests(
        """
        def test_once(benchmark, record):
            calls = []
            benchmark(calls.append, 1)
            record(calls=len(calls))
        """
    )
    result = project.bench(
        "--benchmark-disable",  # with --hpml-baseline=update: a usage error (test_bad_inputs)
        "-W",
        "error::pytest_benchmark.logger.PytestBenchmarkWarning",
    )
    result.assert_outcomes(passed=1)
    assert project.records() == [{"test": "test_once", "calls": 1}]
    assert "hpml benchmarks" not in result.stdout.str()
    assert not project.baseline_dir.exists()


@pytest.mark.parametrize("disable", [[], ["--benchmark-disable"]], ids=["enabled", "disabled"])
def test_using_the_fixture_twice_raises_fixture_already_used(
    project: Project, disable: list[str]
) -> None:
    project.write_tests(
        """
        def test_twice(benchmark):
            benchmark(sum, range(10))
            benchmark.variants({"a": lambda: 1, "b": lambda: 2})
        """
    )
    result = project.bench(*disable)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FixtureAlreadyUsed: Fixture can only be used once.*"])


MARKED = """
import pytest


def test_default(benchmark):
    benchmark.record("n", 1)


@pytest.mark.hpml_bench(threshold=0.5)
def test_marked(benchmark):
    benchmark.record("n", 1)
"""


def test_marker_threshold_overrides_the_option_in_the_report(project: Project) -> None:
    project.write_tests(MARKED)
    project.run("--hpml-threshold=0.2", "--hpml-report=report.json").assert_outcomes(passed=2)
    report = json.loads((project.path / "report.json").read_text())
    assert {r["test"]: r["threshold"] for r in report["results"]} == {
        "test_inner.py::test_default": 0.2,
        "test_inner.py::test_marked": 0.5,
    }


STACKED = """
import pytest


@pytest.mark.hpml_bench(threshold=0.5, batch_size=8)
class TestMarked:
    @pytest.mark.hpml_bench(work=False, batch_size=4)
    def test_method(self, benchmark):
        benchmark.record("n", 1)
"""


def test_stacked_marks_take_each_argument_from_the_nearest_that_gives_it(
    project: Project,
) -> None:
    """A method's own mark kept only its own arguments: the class's threshold fell to 6%."""
    project.write_tests(STACKED)
    project.run("--hpml-threshold=0.2", "--hpml-report=report.json").assert_outcomes(passed=1)
    [result] = json.loads((project.path / "report.json").read_text())["results"]
    assert result["threshold"] == 0.5  # the class's
    assert "ops" not in result["metrics"]  # the method's work=False: nothing counted


def test_json_report_has_fingerprint_results_and_counts(project: Project) -> None:
    project.write_tests(count_tests(2))
    project.run("--hpml-report=out/report.json").assert_outcomes(passed=2)
    report = json.loads((project.path / "out" / "report.json").read_text())
    assert report["format"] == "pytest-hpml-report/1"
    assert {"id", "name", "cpu", "cores", "torch"} <= set(report["fingerprint"])
    assert [r["test"] for r in report["results"]] == [
        "test_inner.py::test_0",
        "test_inner.py::test_1",
    ]
    assert report["results"][0]["verdicts"]["n"]["verdict"] == "no-baseline"
    assert (report["counts"], report["errors"]) == ({"no-baseline": 2}, [])


def test_markdown_report_has_the_verdict_table(project: Project) -> None:
    project.write_tests(count_tests(1))
    project.run("--hpml-report-md=summary.md").assert_outcomes(passed=1)
    lines = (project.path / "summary.md").read_text().splitlines()
    assert lines[0] == "### pytest-hpml benchmarks: pass: no regression in 1 benchmark"
    assert (
        "| test | metric | baseline | current | raw change | change | confidence | verdict "
        "| reason |" in lines
    )
    # names are escaped, not put in code spans (a backtick in an id would end the span)
    assert (
        "| test\\_inner.py::test\\_0 | n | \\- | 1 | \\- | \\- | \\- | no\\-baseline |  |" in lines
    )


CITED = """
import pytest


def test_cited(benchmark):
    benchmark.record("speedup", 2.5, unit="x")
    benchmark.cite("speedup", 1.67, "book ch. 7: EfficientNet, A100, AMP fp16")


def test_cited_too_early(benchmark):
    benchmark.cite("speedup", 1.67, "book")
"""


def test_a_cited_figure_is_shown_beside_ours_and_not_judged(project: Project) -> None:
    project.write_tests(CITED)
    result = project.run("--hpml-report=report.json", "--hpml-report-md=summary.md")
    result.assert_outcomes(passed=1, failed=1)
    line = (
        "*test_cited speedup: here 2.5 x; cited 1.67 x (book ch. 7: EfficientNet, A100, AMP fp16)"
    )
    result.stdout.fnmatch_lines(["hpml: published figures beside ours:", line])
    result.stdout.fnmatch_lines(
        ["*cite() after measuring: no metric 'speedup' (measured: none yet)"]
    )
    report = json.loads((project.path / "report.json").read_text())
    [cited] = [r for r in report["results"] if r["test"].endswith("test_cited")]
    assert cited["metrics"]["speedup"]["cited"] == {
        "value": 1.67,
        "source": "book ch. 7: EfficientNet, A100, AMP fp16",
    }
    assert "cited 1.67 x" in (project.path / "summary.md").read_text()
    disabled = project.run("--benchmark-disable", "-k", "test_cited and not early")
    disabled.assert_outcomes(passed=1)  # no timing, nothing to cite beside: not an error


# Each call of the benchmark refused at the call, the test's own line shown (Note [Tracebacks]).
REFUSED = """
def test_name_none(benchmark):
    benchmark.record(None, 1)


def test_name_empty(benchmark):
    benchmark.record("", 1)


def test_name_control(benchmark):
    benchmark.record("n\\x1b[2J", 1)


def test_value_text(benchmark):
    benchmark.record("n", "abc")


def test_value_nan(benchmark):
    benchmark.record("n", float("nan"))


def test_value_overflow(benchmark):
    benchmark.record("n", 1e400)


def test_value_int_beyond_float(benchmark):
    benchmark.record("n", 10**400)


def test_value_bool(benchmark):
    benchmark.record("n", True)


def test_tolerance_negative(benchmark):
    benchmark.record("n", 1, tolerance=-1)


def test_unit_number(benchmark):
    benchmark.record("n", 1, unit=3)


def test_cite_nan(benchmark):
    benchmark.cite("time", float("nan"), "a book")


def test_batch_size_zero(benchmark):
    benchmark.track(batch_size=0)


def test_variant_unnamed(benchmark):
    benchmark.variants({"": sum, "b": sum})


def test_good(benchmark):
    benchmark.record("n", 2**60, unit="B", tolerance=0.5)
"""


def test_each_call_refuses_a_bad_argument_at_the_call_naming_it(project: Project) -> None:
    """Each bad argument gave an INTERNALERROR, a traceback from the terminal summary, or a
    NaN written into the baseline; now the test fails at its own line, and nothing more is
    said (no "not used at all" from pytest-benchmark beside it)."""
    project.write_tests(REFUSED)
    result = project.bench("--hpml-baseline=update", "--tb=short")
    result.assert_outcomes(failed=13, passed=1)
    name = "give a metric's name: a non-empty str without control characters or blanks around it"
    value = "give a finite int or float (not a bool)"
    result.stdout.fnmatch_lines(
        [
            f"E   TypeError: record(name=None): {name}",
            f"E   ValueError: record(name=''): {name}",
            "E   ValueError: record(name='n\\x1b[2J'): it contains the control character "
            f"'\\x1b'; {name}",
            f"E   TypeError: record(value='abc'): {value}",
            f"E   ValueError: record(value=nan): {value}",
            f"E   ValueError: record(value=inf): {value}",
            f"E   ValueError: record(value=1000000000*... (401 characters)): {value}",
            f"E   TypeError: record(value=True): {value}",
            "E   ValueError: record(tolerance=-1): give a relative tolerance: a finite number*",
            "E   TypeError: record(unit=3): give a unit: a str without control characters*",
            f"E   ValueError: cite(value=nan): {value}",
            "E   ValueError: track(batch_size=0): give the samples one call processes: an int >= 1",
            "E   ValueError: variants(targets={'': <built-in function sum>, *}): give a metric's*",
        ],
        consecutive=False,
    )
    output = result.stdout.str()
    for unwanted in ("pytest_hpml/", "INTERNALERROR", "Traceback", "not used at all"):
        assert unwanted not in output
    stored = project.stored("portable")
    assert list(stored) == ["test_inner.py::test_good"]  # the int kept exact
    assert stored["test_inner.py::test_good"]["n"]["value"] == 2**60


MEASURED_ITSELF = """
def test_after(benchmark):
    benchmark(sum, range(10))
    benchmark.record("time", 1)


def test_before(benchmark):
    benchmark.record("time", 1)
    benchmark(sum, range(10))


def test_variant_before(benchmark):
    benchmark.record("time[a]", 1)
    benchmark.variants({"a": lambda: sum(range(10)), "b": lambda: sum(range(9))})


def test_twice(benchmark):
    benchmark.record("n", 1)
    benchmark.record("n", 2)


def test_beside(benchmark):
    benchmark.record("throughput[b16]", 10.0)  # no batch size: not measured here
    benchmark.variants({"b16": lambda: sum(range(10)), "b32": lambda: sum(range(9))})
"""


def test_a_metric_has_one_value_whoever_gives_it_first(project: Project) -> None:
    """A count named as a metric the benchmark measures replaced the measurement (or was
    replaced by it) unsaid; now the second is refused, in either order, naming the first."""
    project.write_tests(MEASURED_ITSELF)
    result = project.bench("--tb=short")
    result.assert_outcomes(failed=4, passed=1)
    again = "a metric has one value: give this one another name"
    result.stdout.fnmatch_lines(
        [
            f"E   ValueError: record(name='time'): benchmark(...) gave 'time' already; {again}",
            "E   ValueError: benchmark(...) measures 'time' itself, which record('time', ...) "
            "gave already: give that metric another name",
            # [[] is fnmatch's [
            "E   ValueError: variants(...) measures 'time[[]a]' itself, which record('time[[]a]', "
            "...) gave already*",
            f"E   ValueError: record(name='n'): record(...) gave 'n' already; {again}",
        ],
        consecutive=False,
    )
    assert "pytest_hpml/" not in result.stdout.str()
    # refused before its rounds: pytest-benchmark's table has no times of test_before
    assert not any(line.startswith("test_before ") for line in result.outlines)


def test_quiet_prints_the_answer_and_the_failing_blocks_only(project: Project) -> None:
    """-q, as pytest's own: the answer line and one block per benchmark that needs a reader."""
    project.write_tests(
        "import os\n\n\ndef test_work(benchmark):\n"
        '    benchmark.record("n", int(os.environ.get("COUNT", "2")))\n'
    )
    project.run("--hpml-baseline=update")
    project.monkeypatch.setenv("COUNT", "3")
    loud, quiet = project.run(), project.run("-q")
    assert quiet.ret == loud.ret == pytest.ExitCode.TESTS_FAILED
    start = quiet.outlines.index(next(x for x in quiet.outlines if " hpml benchmarks " in x))
    end = next(i for i, x in enumerate(quiet.outlines) if "1 benchmark regressed in " in x)
    assert quiet.outlines[start + 1 : end] == [
        "hpml: 1 of 1 benchmark regressed",
        "hpml: REGRESSED test_inner.py::test_work",
        quiet.outlines[start + 3],
    ]
    assert quiet.outlines[start + 3].startswith("  n: 2 -> 3")
    assert "hpml: metrics: 1 regressed" in loud.outlines  # the table and counts, without -q
