"""Reports a reviewer can trust: both sides of a comparison named, the rule said as the code
applies it, one definition per column, and every threshold that is not the run's said with
where it came from.

The inner projects are real git repositories of pure-Python benchmarks (a pair of processes
takes about a second), measured head against base in real processes.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_hpml.verdict import paired, stats
from tests.conftest import BENCH_TIME, committed, git
from tests.test_against import QUICK, TESTS, WORK

if TYPE_CHECKING:
    from tests.conftest import Project

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="needs git",
)


@pytest.fixture
def repo(project: Project) -> Project:
    return committed(project, work=WORK.format(scale=1), test_inner=TESTS)


def header_lines(result: pytest.RunResult) -> list[str]:
    """The header's "against" lines: those above the summary, which names the sides again."""
    summary = next(i for i, line in enumerate(result.outlines) if " hpml benchmarks " in line)
    return [line for line in result.outlines[:summary] if line.startswith("hpml: against: ")]


def test_both_sides_are_named_in_the_header_summary_and_json(repo: Project) -> None:
    result = repo.run("--hpml-against=HEAD", *QUICK, "--hpml-report=r.json")
    python = ".".join(map(str, sys.version_info[:3]))
    (header,) = header_lines(result)
    # said after collection, so that describing each side's interpreter (which imports torch)
    # runs beside the collection instead of holding the header up
    collected = next(i for i, line in enumerate(result.outlines) if line.startswith("collected"))
    assert result.outlines.index(header) > collected
    assert header.startswith("hpml: against: base ")
    assert f"(HEAD; Python {python}, torch " in header
    assert " vs head " in header
    assert header.count(f"Python {python}") == 2
    result.stdout.fnmatch_lines(
        [
            f"hpml: the same environment on both sides ({sys.executable}): only the code",
            "hpml: against: base * (HEAD; Python *, torch *) vs head * (Python *), 3 pairs",
        ]
    )
    against = json.loads((repo.path / "r.json").read_text())["against"]
    assert against["differs"] == []
    for side in ("base", "head"):
        assert against["environments"][side]["python"] == python
        assert against["environments"][side]["torch"].startswith("2.")


def another_environment(where: Path) -> Path:
    """A real virtualenv whose interpreter sees this one's packages (a .pth file) and one more
    distribution of its own, so that the two sides' environments differ by it."""
    venv.create(where, with_pip=False)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(where), "platbase": str(where)}))
    # its .pth files too (an editable install is one)
    here = sysconfig.get_path("purelib")
    (purelib / "this-environment.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    info = purelib / "hpml_example_extra-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hpml-example-extra\nVersion: 2.0\n"
    )
    return where / "bin" / "python"


def test_what_differs_between_two_environments_is_listed(repo: Project, tmp_path: Path) -> None:
    python = another_environment(tmp_path / "other")
    result = repo.run(
        "--hpml-against=HEAD",
        f"--hpml-against-python={python}",
        *QUICK,
        "-k",
        "counted",
        "--hpml-report=r.json",
        "--hpml-report-md=r.md",
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["hpml: differs: hpml-example-extra 2.0 -> -"])
    against = json.loads((repo.path / "r.json").read_text())["against"]
    assert against["differs"] == ["hpml-example-extra 2.0 -> -"]
    assert against["base_python"] == str(python)
    assert r"differs: hpml\-example\-extra 2.0 \-&gt; \-" in (repo.path / "r.md").read_text()


def test_the_rule_the_summary_states_is_built_from_the_values_the_judge_uses(
    repo: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = repo.run("--hpml-against=HEAD", *QUICK, "-k", "timed")
    result.stdout.fnmatch_lines(
        [
            "hpml: a pair's ratio is the median over the slices its two processes measured in "
            "turns on one CPU (0.01 s each) of the ratio of their fastest samples *; the pairs "
            "that agree (a group of more than half, where they fall 20% apart; a change counts "
            "where it holds 3 more than the rest) are judged by a t test on their log-ratios, * "
            "beyond chance at 5%, one-sided; up to 3 pairs, *"
        ]
    )
    # the judge's own values: the text follows them
    monkeypatch.setattr(stats, "SPLIT", math.log(1.5))
    monkeypatch.setattr(paired, "SLICE", 0.05)
    result = repo.run("--hpml-against=HEAD", BENCH_TIME, "--hpml-pairs=5", "-k", "timed")
    result.stdout.fnmatch_lines(
        [
            "*turns on one CPU (0.05 s each)*where they fall 50% apart*5% shared by 2 looks "
            "(after 3 and 5 pairs: 0.025 each), one-sided*"
        ]
    )


THRESHOLDS = """
import pytest

from work import SCALE, work


@pytest.mark.hpml_bench(threshold=0.5)
def test_loose(benchmark):
    benchmark(work)


def test_counted(benchmark):
    benchmark.record("calls", round(10 * SCALE), tolerance=0.5)
"""


def test_a_threshold_not_the_runs_is_said_with_where_it_came_from(repo: Project) -> None:
    repo.pytester.makepyfile(test_inner=THRESHOLDS)
    git(repo.path, "commit", "-qam", "benchmarks with their own thresholds")
    repo.pytester.makepyfile(work=WORK.format(scale=1.2))  # 12 calls instead of 10
    result = repo.run("--hpml-against=HEAD", *QUICK, "--hpml-report=r.json")
    verdicts = {
        r["test"].split("::")[1]: r["verdicts"]
        for r in json.loads((repo.path / "r.json").read_text())["results"]
    }
    calls = verdicts["test_counted"]["calls"]
    assert calls["verdict"] == "pass"
    assert calls["change"] == pytest.approx(0.2)
    assert "within a tolerance of 50% from benchmark.record(tolerance=...)" in calls["reason"]
    loose = verdicts["test_loose"]["time"]
    assert (
        "threshold 50% from the test's hpml_bench(threshold=...), not the run's 6%"
        in (loose["reason"])
    )
    assert result.ret == pytest.ExitCode.OK


def test_the_table_says_what_its_columns_hold(repo: Project) -> None:
    result = repo.run("--hpml-against=HEAD", *QUICK, "-k", "timed")
    result.stdout.fnmatch_lines(
        ["hpml: columns: baseline is the geometric mean of the base processes' fastest samples*"]
    )
    result = repo.run(BENCH_TIME, "--hpml-baseline=update", "-k", "timed")
    result = repo.run(BENCH_TIME, "-k", "timed")
    result.stdout.fnmatch_lines(
        ["hpml: columns: baseline and current are medians of the raw rounds*"]
    )
