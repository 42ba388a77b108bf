"""The history (--hpml-history) and its steps (pytest-hpml history): records written by the real
plugin at the commits of a real git repository, read back by the real command."""

from __future__ import annotations

import html
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml.storage import writer
from pytest_hpml.verdict import changes

from .conftest import TIMES_UNJUDGED, count_tests, git

if TYPE_CHECKING:
    from .conftest import Project

# A training step whose work two of 30 commits change: commit 11 reads a value back to the host
# (a sync the work counter counts), commit 23 does 2.5 times the step's matmuls: more than a
# busy host moves a single run. One runner had spikes of up to +45% in 6 of 30 commits (a 20%
# step ranked below them); another ran each commit at one of two speeds 55% apart, so that a
# 60% step's faster runs ranked among the slower runs before it, and no step was found.
STEP = """
import torch

NOTE = {note!r}  # changed by every commit
LAYERS = {layers}


def step(x, w):
    for _ in range(LAYERS):
        x = torch.tanh(x @ w)
{sync}    return x


def test_step(benchmark):
    torch.manual_seed(0)
    x, w = torch.randn(64, 64), torch.randn(64, 64) / 8
    benchmark(step, x, w)
"""
COMMITS = 30
SYNC_AT, SLOWER_AT = 11, 23  # commits counted from 1


def step_source(commit: int) -> str:
    sync = "    float(x.sum())  # logged: a host sync\n" if commit >= SYNC_AT else ""
    layers = 25 if commit >= SLOWER_AT else 10
    return STEP.format(note=f"commit {commit}", layers=layers, sync=sync)


def history_run(project: Project, directory: str = "history") -> pytest.RunResult:
    """A nightly run of the checked-out commit: brief, in this process, one torch thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return project.run(f"--hpml-history={directory}", "--hpml-bench-time=0.1", TIMES_UNJUDGED)
    finally:
        torch.set_num_threads(threads)


def commit_at(path: Path, second: int) -> None:
    """Commit everything, dated ``second`` seconds into 2026: the history orders commits by
    the time they were made, and a test makes them faster than one a second."""
    git(path, "add", "-A")
    date = f"2026-01-01T00:{second // 60:02d}:{second % 60:02d}Z"
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{second}"],
        cwd=path,
        check=True,
        env={**os.environ, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date},
    )


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_hpml", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def no_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checked-out file of the same size within the same second as the last would be read
    from stale bytecode: none is written."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


@pytest.mark.usefixtures("no_bytecode")
def test_thirty_commits_steps_found_where_the_work_changed(project: Project, tmp_path: Path):
    git(project.path, "init", "-q")
    for commit in range(1, COMMITS + 1):
        project.pytester.makepyfile(test_step=step_source(commit))
        commit_at(project.path, commit)
        history_run(project).assert_outcomes(passed=1)
    records = sorted((project.path / "history").glob("*.json"))
    assert len(records) == COMMITS
    site = tmp_path / "site"
    done = run_cli("history", str(project.path / "history"), "--site", str(site))
    assert done.returncode == 0, done.stderr
    figures = site_figures(site)
    times = next(f["values"] for f in figures if f["metric"] == "time")
    found, said = steps_said(done.stdout), f"{done.stdout}\ntimes: {times}"
    commits = git(project.path, "log", "--reverse", "--format=%h", "--abbrev=12").split()
    # The counts are the code's alone: they step where the work changed and nowhere else.
    counted = {commits.index(c) + 1 for _, m, c, _ in found if m != "time"}
    assert counted == {SYNC_AT, SLOWER_AT}, said
    assert [c for _, m, c, _ in found if m == "syncs"] == [commits[SYNC_AT - 1]], said
    # Time is the host's too: thirty runs one after another on a host whose speed drifted
    # (about +25% at commit 19 on one runner, four commits before the slower code; -9% then
    # +11% before it on another) placed time steps there. So a slower step must be found, and
    # the commits with the slower code must be slower than those before, but where the time
    # steps is not asserted.
    timed = [(c, change) for _, m, c, change in found if m == "time"]
    assert any(change.startswith("+") for _, change in timed), said
    before, after = (
        [t[0] for t in part] for part in (times[: SLOWER_AT - 1], times[SLOWER_AT - 1 :])
    )
    assert statistics.median(after) > statistics.median(before), said
    drawn = {f["metric"]: [s["commit"] for s in f["steps"]] for f in figures}
    assert drawn["time"] == [c for c, _ in timed]
    assert drawn["syncs"] == [commits[SYNC_AT - 1]]
    assert len(figures[0]["commits"]) == COMMITS
    # every point links to its run's page, which shows the run's commit
    page = next((site / "benchmarks").glob("*.html")).read_text()
    links = set(re.findall(r'href="(\.\./runs/[^"]+\.html)"', page))
    assert len(links) == COMMITS
    run_page = (site / "benchmarks" / sorted(links)[0]).read_text()
    assert re.search(r"<dd>[0-9a-f]{12}</dd>", run_page)
    # a record is a JSON report: the command's other subcommands read it
    shown = run_cli("show", str(records[0]), "--test", "test_step")
    assert shown.returncode == 0, shown.stderr
    assert "syncs" in shown.stdout


def site_figures(site: Path) -> list[dict[str, Any]]:
    """What each plot of the site's benchmark pages drew (its data-values)."""
    found = []
    for page in sorted((site / "benchmarks").glob("*.html")):
        for value in re.findall(r'<figure class="history" data-values="([^"]*)"', page.read_text()):
            found.append(json.loads(html.unescape(value)))
    return found


def steps_said(out: str) -> list[tuple[str, str, str, str]]:
    """(test, metric, commit, change) of each step in the command's table."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("test "))
    found = []
    for line in lines[head + 1 :]:
        if line.startswith("wrote "):
            break
        cells = re.split(r" {2,}", line.strip())
        found.append((cells[0], cells[1], cells[3], cells[6]))
    return found


def test_records_are_never_overwritten_by_writers_at_once(tmp_path: Path):
    """Eight processes add 25 records each to one directory at once: 200 files, each whole."""
    code = (
        "import sys\nfrom pathlib import Path\nfrom pytest_hpml.storage import writer\n"
        "for i in range(25):\n"
        "    writer.add_new(Path(sys.argv[1]), 'same-stem', '{\"n\": %d}' % i + ' ' * 20000)\n"
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "history")]) for _ in range(8)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0] * 8
    files = sorted((tmp_path / "history").iterdir())
    assert len(files) == 200
    assert all(json.loads(f.read_text())["n"] in range(25) for f in files)


def test_a_killed_writer_leaves_nothing_a_reader_takes(tmp_path: Path):
    """A writer killed while writing leaves only its temporary dot file: the history has no
    record in it, and a later writer removes it once it is a day old."""
    directory = tmp_path / "history"
    code = (
        "import sys, os\nfrom pathlib import Path\nfrom pytest_hpml.storage import writer\n"
        "os.fsync = lambda fd: os.kill(os.getpid(), 9)  # killed after writing, before linking\n"
        "writer.add_new(Path(sys.argv[1]), 'run', '{}')\n"
    )
    killed = subprocess.run([sys.executable, "-c", code, str(directory)], timeout=60)
    assert killed.returncode == -9
    left = list(directory.iterdir())
    assert [p.name.startswith(".new-") for p in left] == [True]
    done = run_cli("history", str(directory))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("0 runs at 0 commits")
    old = left[0].stat().st_mtime - writer.STALE_SECONDS - 60
    os.utime(left[0], (old, old))
    writer.add_new(directory, "run", "{}")
    assert [p.name.startswith("run-") for p in directory.iterdir()] == [True]


def test_a_count_step_is_found_an_outlier_and_noise_are_not():
    """The method alone, on series given to it (no measurement is claimed here)."""
    assert [s.index for s in changes.steps([3] * 12 + [4] * 10, counted=True)] == [12]
    assert changes.steps([3] * 12 + [40] + [3] * 10, counted=True) == []  # one commit: no step
    lognormal = [1.0, 1.04, 0.97, 1.01, 0.99, 1.06, 0.95, 1.0, 1.02, 0.98, 1.03, 0.96] * 2
    assert changes.steps(lognormal, counted=False, min_change=0.06) == []
    slower = lognormal[:12] + [1.3 * v for v in lognormal[12:]]
    (step,) = changes.steps(slower, counted=False, min_change=0.06)
    assert step.index == 12
    assert step.confidence > 0.99
    assert 0.25 < step.change < 0.35


def test_the_command_names_what_it_cannot_read_and_uses_the_rest(project: Project):
    """One line per unusable file, exit 2; a missing directory is one line too."""
    git(project.path, "init", "-q")
    project.write_tests(count_tests(1))
    commit_at(project.path, 1)
    project.run("--hpml-history=history").assert_outcomes(passed=1)
    directory = project.path / "history"
    (directory / "broken.json").write_text("{")
    (directory / "report.json").write_text(json.dumps({"format": "pytest-hpml-report/1"}))
    done = run_cli("history", str(directory))
    assert done.returncode == 2
    assert done.stdout.startswith("1 run at 1 commit on 1 machine, 1 series: 0 steps")
    errors = done.stderr.splitlines()
    assert len(errors) == 2
    assert "broken.json is not valid JSON" in errors[0]
    assert "report.json is not usable" in errors[1]
    missing = run_cli("history", str(project.path / "nothing"))
    assert missing.returncode == 2
    assert (
        missing.stderr.strip() == f"pytest-hpml: error: no history directory {project.path}/nothing"
    )


NAMED = """
import os

import pytest


@pytest.mark.parametrize("name", ["<script>alert(1)</script>&'\\""])
def test_named(benchmark, name):
    benchmark.record("n", int(os.environ.get("COUNT", "1")))
"""


@pytest.mark.usefixtures("no_bytecode")
def test_the_site_escapes_every_name(project: Project, tmp_path: Path):
    """A test id holding markup is text on every page, and in the plots' values."""
    git(project.path, "init", "-q")
    project.write_tests(NAMED)
    for second, count in enumerate((1, 1, 1, 2, 2, 2)):
        project.monkeypatch.setenv("COUNT", str(count))  # the count the code would change
        (project.path / "note.txt").write_text(str(second))
        commit_at(project.path, second)
        project.run("--hpml-history=history").assert_outcomes(passed=1)
    site = tmp_path / "site"
    done = run_cli("history", str(project.path / "history"), "--site", str(site))
    assert done.returncode == 0, done.stderr
    assert "<script>alert(1)</script>" in done.stdout  # a terminal shows it as it is
    pages = [p.read_text() for p in site.rglob("*.html")]
    assert len(pages) == 1 + 1 + 6  # the index, the benchmark, the runs
    assert not any("<script" in page for page in pages)
    assert all("&lt;script&gt;" in page for page in pages[:2])
    (figure,) = site_figures(site)
    assert figure["metric"] == "n"
    assert [s["change"] for s in figure["steps"]] == [1.0]
    again = run_cli("history", str(project.path / "history"), "--site", str(site))
    assert again.returncode == 0, again.stderr  # an earlier site is replaced
    elsewhere = run_cli("history", str(project.path / "history"), "--site", str(project.path))
    assert elsewhere.returncode == 2
    assert elsewhere.stderr.strip() == (
        f"pytest-hpml: error: --site {project.path} is a directory holding other files; name "
        "an empty or new directory"
    )


def test_history_options_are_checked_before_the_tests(project: Project):
    project.write_tests(count_tests(1))
    (project.path / "taken").write_text("")
    result = project.run("--hpml-history=taken")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--hpml-history: taken is a file, not a directory" in result.stderr.str()
    result = project.run("--hpml-history=baselines", "--hpml-baseline=update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "the history needs a directory of its own" in result.stderr.str()
    result = project.run("--hpml-history=h", "--hpml-against=HEAD")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "give one of them" in result.stderr.str()
    assert not (project.path / "h").exists()
