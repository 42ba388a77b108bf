"""Head against base (--hpml-against=REV): the inner project is a real git repository made in
the test's directory; its committed benchmarks are the base, its working tree (uncommitted
changes included) the head. pytest-hpml checks the base out in a real git worktree and
measures both sides in real pytest processes.

The inner benchmarks are pure Python (the processes need not import torch, so a pair takes
about a second) and their changes are large (4x the work, or a count), so that every verdict
asserted here holds on a busy machine too.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import venv
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml.bench.pairing import Pairs, Side
from pytest_hpml.config.role import RERUN_ENV
from pytest_hpml.model import Comparison
from pytest_hpml.verdict import stats
from tests.conftest import (
    BENCH_TIME,
    DUMPS_STACKS,
    TIMES_UNJUDGED,
    committed,
    git,
    interrupt,
    interruptible,
)
from tests.test_processes import still_running

if TYPE_CHECKING:
    from tests.conftest import Project

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="needs git",
)

# The code under test: the base commits SCALE = 1; a working tree changes it.
WORK = "SCALE = {scale}\n\n\ndef work():\n    return sum(range(int(20_000 * SCALE)))\n"
TESTS = """
import os

from work import SCALE, work


def test_timed(benchmark):
    benchmark(work)


def test_counted(benchmark):
    benchmark.record("calls", round(10 * SCALE))
"""
QUICK = (BENCH_TIME, "--hpml-pairs=3")  # 3 pairs: the t test on 2 needs a 6.3-sigma change


@pytest.fixture
def repo(project: Project) -> Project:
    """The inner project committed at SCALE = 1, as a git repository."""
    return committed(project, work=WORK.format(scale=1), test_inner=TESTS)


def worktrees(path: Path) -> list[str]:
    """The worktrees git knows of the repository at ``path`` (the main one first)."""
    lines = git(path, "worktree", "list", "--porcelain").splitlines()
    return [line.split(" ", 1)[1] for line in lines if line.startswith("worktree ")]


def left_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("pytest-hpml-*"))


def table_verdicts(project: Project, result: pytest.RunResult) -> dict[str, str]:
    return {test.split("::")[1]: v for (test, _), v in project.verdicts(result).items()}


def test_a_slower_working_tree_regresses_against_its_commit(repo: Project) -> None:
    """4x the work is settled at the first look: 3 pairs of the 7 allowed (Note [Adaptive
    pairs])."""
    repo.pytester.makepyfile(work=WORK.format(scale=4))  # uncommitted: 4x the work
    result = repo.run("--hpml-against=HEAD", BENCH_TIME, "--hpml-pairs=7", "--hpml-report=r.json")
    assert table_verdicts(repo, result) == {"test_timed": "regressed", "test_counted": "regressed"}
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "hpml: 2 of 2 benchmarks regressed",
            "hpml: against: base * (HEAD; Python *) vs head * + changes (Python *), 3 pairs",
            "hpml: 3 pair(s) of processes, base and head alternating (they took * s); every "
            "verdict settled after 3 of at most 7 pairs",
            "hpml: pytest-benchmark's own table is left out: it would show this process's one "
            "round, not the pairs' measurements that were judged",
        ]
    )
    assert "Name (time in" not in result.stdout.str()  # its one round beside the verdicts
    report = json.loads((repo.path / "r.json").read_text())
    assert report["against"]["revision"] == "HEAD"
    assert (report["against"]["pairs"], report["against"]["cap"]) == (3, 7)
    assert report["against"]["looks"] == [[3, 2]]
    assert report["against"]["head"].endswith(" + changes")
    (timed,) = [r for r in report["results"] if r["test"].endswith("test_timed")]
    verdict = timed["verdicts"]["time"]
    assert len(verdict["pairs"]) == 3
    assert min(verdict["pairs"]) > 2  # each pair saw about 4x the work
    assert "timed on the measuring thread's CPU clock" in verdict["reason"]
    assert report["results"][1]["verdicts"]["calls"]["change"] == pytest.approx(3.0)  # 40 vs 10
    assert worktrees(repo.path) == [str(repo.path)]  # the base worktree is gone


def test_an_unchanged_tree_passes_against_head(repo: Project) -> None:
    result = repo.run("--hpml-against=HEAD", *QUICK, "--hpml-threshold=50%")
    assert table_verdicts(repo, result) == {"test_timed": "pass", "test_counted": "pass"}
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["hpml: 3 pair(s) of processes, base and head alternating *"])
    assert worktrees(repo.path) == [str(repo.path)]


def test_progress_lines_say_how_far_the_pairs_got_in_a_log(repo: Project) -> None:
    """Not on a terminal (a subprocess's output is a pipe): a line as the pairs start and one
    as they end, between the last test line and the summary; none with -qq."""
    result = repo.run_subprocess(
        "--hpml-against=HEAD", BENCH_TIME, "--hpml-pairs=2", TIMES_UNJUDGED
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    # why the pairs stopped, where a benchmark was left unsettled at the cap: two pairs that
    # differ by 2x on a busy machine leave an interval wider than any threshold; and the first
    # pair's line, where a busy machine made it last over 10 s (progress.PLAIN_EVERY)
    lines = [
        line
        for line in result.outlines
        if not fnmatch.fnmatch(line, "hpml: * of 2 unsettled at the cap of 2* (* s)")
        and not fnmatch.fnmatch(line, "hpml: pair 1 of 2 done (*)")
        and not fnmatch.fnmatch(line, "hpml: pair * waits * s for its * process *")
    ]
    pytest.LineMatcher(lines).fnmatch_lines(
        [
            "test_inner.py .. * [[]100%[]]",
            "hpml: measuring 2 benchmarks in 2 pairs of fresh processes, base and head alternating",
            "hpml: pair 2 of 2 done (* s)",
            "",
            "=* hpml benchmarks =*",
        ],
        consecutive=True,
    )
    quiet = repo.run("--hpml-against=HEAD", BENCH_TIME, "--hpml-pairs=2", "-qq", TIMES_UNJUDGED)
    assert quiet.ret == pytest.ExitCode.OK, quiet.stdout.str()
    assert "hpml: no regression in 2 benchmarks" in quiet.outlines  # the answer, not the method
    assert [line for line in quiet.outlines if "hpml: measuring" in line or " done (" in line] == []


def test_a_judge_hook_that_head_against_base_does_not_ask_is_said(repo: Project) -> None:
    """A conftest's judge would be passed over unsaid: --hpml-against judges on the pairs'
    ratios, and the warning says so; without --hpml-against there is nothing to say."""
    repo.pytester.makeconftest(
        "def pytest_hpml_judge_metric(name, record, baseline):\n    return None\n"
    )
    result = repo.run("--hpml-against=HEAD", *QUICK, TIMES_UNJUDGED)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*PytestConfigWarning: pytest_hpml_judge_metric of *conftest.py is not asked with "
            "--hpml-against: each metric is judged on its pairs' ratios"
        ]
    )
    alone = repo.run("--hpml-baseline=off", BENCH_TIME)
    assert "is not asked with --hpml-against" not in alone.stdout.str()


def test_a_wait_for_a_process_of_a_pair_says_what_it_waits_for(repo: Project) -> None:
    """A base whose benchmark takes long to warm up: a line after 10 s (SPEAK_AFTER)
    names the pair, the side and the stage; the run went silent for as long before."""
    mark = repo.path / "slept"  # outside the base worktree, which the run makes elsewhere
    slow = (
        "import os\nimport time\n\n\ndef test_timed(benchmark):\n"
        f"    if os.environ.get('{RERUN_ENV}') and not os.path.exists({str(mark)!r}):\n"
        f"        open({str(mark)!r}, 'w').close()\n"
        "        time.sleep(12)  # the first base process only\n"
        "    benchmark(sum, range(100))\n"
    )
    repo.pytester.makepyfile(test_inner=slow)
    git(repo.path, "commit", "-qam", "a base that sleeps once")
    repo.pytester.makepyfile(
        test_inner="def test_timed(benchmark):\n    benchmark(sum, range(100))\n"
    )
    result = repo.run_subprocess("--hpml-against=HEAD", *QUICK, TIMES_UNJUDGED)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "hpml: pair 1 waits 1? s for its base process to start, set up or warm up its next "
            "benchmark"
        ]
    )


# Sleeps, so timed on the wall clock: the processes whose count on their side (kept in its
# tree; the head's session is its first) is 1 or 4 sleep 9.8% longer, so that the pairs' ratios
# run 1.098, 1/1.098, 1, 1.098, 1/1.098 whatever the machine's load. Against a threshold of
# 15%, 3 pairs do not settle the change and are not let go, and 5 do settle it; against 7.5%,
# 3 are let go (Note [Adaptive pairs]). The factors that give all three lie between 1.087 and
# 1.109 (stats.compare_pairs on these ratios); a wake-up's lateness moves a 20 ms sleep by
# tens of microseconds, a fraction of that room.
SPREAD = """
import os
import time
from pathlib import Path

import pytest

from work import SCALE, work

COUNT = Path("processes.txt")
SEEN = len(COUNT.read_text().split()) if COUNT.exists() else 0
COUNT.write_text("x " * (SEEN + 1))
PAUSE = 0.02 * (1.098 if SEEN % 3 == 1 else 1.0)


def ran(name):
    with open("ran.txt", "a") as out:
        out.write(f"{os.getpid()} {name}\\n")


def test_timed(benchmark):
    ran("timed")
    benchmark(work)


@pytest.mark.hpml_bench(threshold=0.15)
def test_spread(benchmark):
    ran("spread")
    benchmark(time.sleep, PAUSE)


@pytest.mark.hpml_bench(threshold=0.075)
def test_hopeless(benchmark):
    ran("hopeless")
    benchmark(time.sleep, PAUSE)
    benchmark.record("sleeps", 1, tolerance=0.5)  # no interval: never "not measured beyond"
"""


def test_the_pairs_say_how_many_were_unsettled_at_the_cap_and_how_many_let_go_earlier() -> None:
    """A benchmark let go at a look counts among the settled at the cap's look (Note [Adaptive
    pairs]): the summary names it apart from the ones the cap left unsettled."""
    side = Side("base", Path("."), "0" * 12, sys.executable)
    found = Pairs(side, side, measured=[{}] * 5, cap=5, benchmarks=3, looks=[(3, 2), (5, 2)])
    assert found.stopped() == "1 of 3 unsettled at the cap of 5"
    found.let_go.add("test_inner.py::test_hopeless")
    assert found.stopped() == (
        "1 of 3 unsettled at the cap of 5; 1 more let go earlier: it would not settle them"
    )
    found.looks[-1] = (5, 3)
    assert found.stopped() == ""  # none unsettled at the cap: nothing to say


def test_settled_benchmarks_stop_and_the_others_run_to_the_cap(repo: Project) -> None:
    """test_timed (10x the work) is settled at the first look; test_spread, whose pairs spread
    9.8%, is not, and the two pairs after it measure it alone, up to the cap of 5;
    test_hopeless spreads alike against a threshold of 7.5%, which 5 pairs would not settle
    either, and stops at the first look (Note [Adaptive pairs])."""
    committed(repo, test_inner=SPREAD)
    repo.pytester.makepyfile(work=WORK.format(scale=10))
    result = repo.run("--hpml-against=HEAD", BENCH_TIME, "--hpml-pairs=5", "--hpml-report=r.json")
    report = json.loads((repo.path / "r.json").read_text())
    against, out = report["against"], result.stdout.str()
    results = {r["test"].rsplit("::", 1)[1]: r["verdicts"] for r in report["results"]}
    processes: dict[str, set[str]] = {}
    for line in (repo.path / "ran.txt").read_text().splitlines():
        pid, name = line.split()
        processes.setdefault(name, set()).add(pid)
    # Whatever the pairs measured: the head side's processes are this session's and one a pair,
    # 3 for a benchmark that stopped at the first look and all of the run's for the others
    counts = {name: len(pids) for name, pids in processes.items()}
    first, settled_first = against["looks"][0]
    assert set(counts.values()) <= {1 + first, 1 + against["pairs"]}, out
    stopped = [name for name, count in counts.items() if count == 1 + first]
    assert len(stopped) == settled_first or against["pairs"] == first, out
    # The path itself holds where the sleeps kept their design: a host busy enough to stretch a
    # 20 ms sleep by more than 0.5% moves the ratios out of the band that gives it (SPREAD)
    designed = (1.098, 1 / 1.098, 1.0)
    kept = all(
        abs(math.log(ratio / aim)) < 0.005
        for name in ("test_spread", "test_hopeless")
        for ratio, aim in zip(results[name]["time"]["pairs"][:3], designed)
    )
    if not kept:
        return
    assert (against["pairs"], against["cap"]) == (5, 5), out
    assert (first, settled_first) == (3, 2), out  # test_timed settled, test_hopeless let go
    verdicts = table_verdicts(repo, result)
    assert verdicts["test_timed"] == "regressed", out
    reason = results["test_hopeless"]["time"]["reason"]
    assert "not measured beyond 3 pairs: at this spread, 5 would not settle it either" in reason
    assert "not measured beyond" not in results["test_hopeless"]["sleeps"]["reason"], out
    assert ", or (a pass; 1 here) once its interval, narrowed as the cap's pairs" in out
    # the cap's look counts test_hopeless, let go at the first, among the settled, as the first
    # did; test_spread is settled there too where its 5 pairs fit its interval in 15%
    spread_time = results["test_spread"]["time"]  # settled: beyond the threshold, or within it
    decided = spread_time["verdict"] in (stats.REGRESSED, stats.IMPROVED)
    settled = decided or stats.quiet(
        Comparison.from_dict(spread_time)
    )  # an inconclusive one is neither
    assert against["looks"][-1] == [5, 2 + settled], out
    if not settled:
        let_go = "1 of 3 unsettled at the cap of 5; 1 more let go earlier: it would not settle them"
        assert let_go in out, out
    assert counts == {"timed": 4, "spread": 6, "hopeless": 4}, out


# Each measuring process writes, per benchmark, when it imported the test module, when the
# test's set-up began, and when each of its benchmark's calls began and ended.
TIMELINE = """
import json
import math
import os
import time

from work import work

IMPORTED = time.time()


def timed(benchmark, name):
    began, calls = time.time(), []

    def call():  # about 1 ms: its 300 samples take more than a slice
        start = time.time()
        for _ in range(4):
            work()
        calls.append((start, time.time()))

    benchmark(call)
    warm = 1 + benchmark.stats.options["warmup"]  # the first call and the warm-up's
    if os.environ.get("HPML_INTERNAL_RERUN"):
        with open(os.environ["WRITTEN"], "a") as out:
            line = [os.getpid(), name, IMPORTED, began, calls[warm:], calls[:warm]]
            out.write(json.dumps(line) + "\\n")


def test_first(benchmark):
    timed(benchmark, "first")


def test_second(benchmark):
    timed(benchmark, "second")
"""


def written_in_pairs(repo: Project, out: Path, tests: str, bench_time: float) -> list[Any]:
    """Run ``tests`` (which append JSON lines to the file named by $WRITTEN) against HEAD in 2
    pairs of processes with ``bench_time``; return what they wrote."""
    repo.monkeypatch.setenv("WRITTEN", str(out))
    committed(repo, test_inner=tests)
    result = repo.run(
        "--hpml-against=HEAD", f"--hpml-bench-time={bench_time:g}", "--hpml-pairs=2", TIMES_UNJUDGED
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_the_processes_of_a_pair_start_together_and_measure_in_turn(
    repo: Project, tmp_path: Path
) -> None:
    """The two processes of each pair import, set each benchmark up and warm it up side by
    side, then measure it in turns, slice by slice (Note [Slices]), benchmark by benchmark; no
    two processes' measured calls overlap (Note [Cheaper processes])."""
    # a second a process: half a second a benchmark, five slices of 0.1 s a side
    written = written_in_pairs(repo, tmp_path / "timeline.txt", TIMELINE, bench_time=1.0)
    runs = sorted(written, key=lambda run: run[4][0][0])  # by its first call
    assert len(runs) == 8, runs  # 2 benchmarks in 2 processes a pair, 2 pairs
    calls = sorted((start, end, run[0]) for run in runs for start, end in run[4])
    for (_, end, _), (start, _, _) in zip(calls, calls[1:]):
        assert end <= start, runs  # one call at a time, whichever process makes it
    for pair in (runs[0:4], runs[4:8]):
        names = {name: [run for run in pair if run[1] == name] for name in ("first", "second")}
        assert [len(measured) for measured in names.values()] == [2, 2], runs
        (a, b), (c, d) = names["first"], names["second"]
        assert a[0] != b[0], runs  # a process each
        assert {a[0], b[0]} == {c[0], d[0]}, runs  # the same two for both benchmarks
        firsts = max(a[4][-1][1], b[4][-1][1])
        assert firsts <= min(c[4][0][0], d[4][0][0]), runs  # benchmark by benchmark
        turns = [pid for start, _, pid in calls if a[4][0][0] <= start <= firsts]
        switches = sum(p != q for p, q in zip(turns, turns[1:]))
        assert switches >= 3, (turns, runs)  # in slices: base, head, base, head at least
        assert max(a[2], b[2]) < a[4][0][0], runs  # both imported before either measured
        assert max(c[3], d[3]) < min(c[4][0][0], d[4][0][0]), runs  # and set it up together
        for one, other in ((a, b), (c, d)):  # and warmed it up, each before either measured
            assert max(one[5][-1][1], other[5][-1][1]) <= min(one[4][0][0], other[4][0][0])


# A call of 0.1 s: each process writes how many samples it took and how many calls warmed up.
LONG = """
import json
import math
import os
import time


def test_long(benchmark):
    benchmark(time.sleep, 0.1)
    with open(os.environ["WRITTEN"], "a") as out:
        role = "pair" if os.environ.get("HPML_INTERNAL_RERUN") else "session"
        line = [role, benchmark.stats.stats.rounds, benchmark.stats.options["warmup"]]
        out.write(json.dumps(line) + "\\n")
"""


def test_a_pairs_process_takes_three_samples_of_a_long_call(repo: Project, tmp_path: Path) -> None:
    """With a window of 0.2 s, a process of the pairs takes three samples of a 0.1 s call and
    warms it up for the window; the session, one sample, without a warm-up (Note [Samples and
    rounds], pairs)."""
    written = written_in_pairs(repo, tmp_path / "samples.txt", LONG, bench_time=0.2)
    lines = sorted(map(tuple, written))
    assert [line[:2] for line in lines] == [("pair", 3)] * 4 + [("session", 1)], lines
    # the window ends after two calls of the warm-up (one, where the first lasted it all)
    assert [line[2] in (1, 2) for line in lines[:4]] == [True] * 4, lines
    assert lines[4][2] == 0, lines


# A distributed benchmark whose ranks each write when they began and ended it, which start of
# ranks they belong to (their directory), and whether torch came with the process.
RANKS = """
import json
import math
import os
import sys
import time

PRELOADED = "torch" in sys.modules

import pytest
import torch


@pytest.mark.distributed(world_size=2)
def test_ranks(rank, benchmark):
    x = torch.randn(64, 64)
    began = time.time()
    benchmark(lambda: x @ x)
    started = os.path.dirname(os.environ["HPML_RANK_RESULT"])
    with open(os.environ["TIMELINE"], "a") as out:
        out.write(json.dumps([started, began, time.time(), PRELOADED]) + "\\n")
"""


def test_the_ranks_of_a_distributed_benchmark_measure_in_their_sides_turn(
    repo: Project, tmp_path: Path
) -> None:
    """Ranks cannot pass a turn slice by slice: the process of a pair that starts them holds
    its turn until they have ended, so that no two processes' ranks measure at once (Note
    [Slices]). The fork server forks them, torch imported, for the session and for each
    process of the pairs (Note [Fork server])."""
    timeline = tmp_path / "timeline.txt"
    repo.monkeypatch.setenv("TIMELINE", str(timeline))
    committed(repo, test_inner=RANKS)
    result = repo.run_subprocess(
        "--hpml-against=HEAD", BENCH_TIME, "--hpml-pairs=2", TIMES_UNJUDGED
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    spans: dict[str, list[float]] = {}  # by the start of ranks they belong to
    lines = [json.loads(line) for line in timeline.read_text().splitlines()]
    for started, began, ended, _ in lines:
        low, high = spans.setdefault(started, [began, ended])
        spans[started] = [min(low, began), max(high, ended)]
    assert len(spans) == 5, spans  # the session's ranks, and each process's of 2 pairs
    assert len(lines) == 10
    assert all(preloaded for *_, preloaded in lines), lines
    ordered = sorted(spans.values())
    for (_, ended), (began, _) in zip(ordered, ordered[1:]):
        assert ended <= began, ordered


# A benchmark, then a test that waits, in the session itself, until both processes of the first
# pair have imported the module (each writes a file named by its pid).
WAITS_FOR_THE_PAIR = """
import os
import time
from pathlib import Path

from work import work

MARKS = Path(os.environ["MARKS"])
if os.environ.get("HPML_INTERNAL_RERUN"):
    (MARKS / str(os.getpid())).write_text("imported")


def test_a_benchmark(benchmark):
    benchmark(work)


def test_z_waits_for_the_pair():
    if os.environ.get("HPML_INTERNAL_RERUN"):
        return
    deadline = time.monotonic() + 120
    while len(list(MARKS.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(list(MARKS.iterdir())) == 2, "the first pair had not started"
"""


def test_the_first_pair_starts_while_the_session_runs_its_tests(
    project: Project, tmp_path: Path
) -> None:
    """The first pair's processes start at the end of collection, so that their imports and
    set-up overlap the session's own tests (Note [Cheaper processes])."""
    marks = tmp_path / "marks"
    marks.mkdir()
    project.monkeypatch.setenv("MARKS", str(marks))
    committed(project, work=WORK.format(scale=1), test_inner=WAITS_FOR_THE_PAIR)
    result = project.run("--hpml-against=HEAD", *QUICK, TIMES_UNJUDGED)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert len(list(marks.iterdir())) == 6  # the first pair's two, then the two others


def test_the_base_side_runs_the_base_code_first_on_sys_path(repo: Project) -> None:
    """Each side imports its own tree's ``work``: a faster working tree improves."""
    repo.pytester.makepyfile(work=WORK.format(scale=0.25))
    result = repo.run("--hpml-against=HEAD", *QUICK, "-k", "counted")
    assert table_verdicts(repo, result) == {"test_counted": "improved"}
    assert result.ret == pytest.ExitCode.OK
    assert "refresh their baselines" not in result.stdout.str()  # nothing is stored here


def test_new_and_removed_benchmarks_are_shown_not_failed(repo: Project) -> None:
    source = TESTS.replace("def test_counted(", "def test_added(")
    repo.pytester.makepyfile(test_inner=source, work=WORK.format(scale=3))
    result = repo.run("--hpml-against=HEAD", *QUICK, "--hpml-report-md=r.md")
    verdicts = table_verdicts(repo, result)
    assert verdicts["test_added"] == "new"
    assert "test_counted" not in verdicts
    result.stdout.fnmatch_lines(
        ["hpml: removed (only in the base revision): test_inner.py::test_counted"]
    )
    markdown = (repo.path / "r.md").read_text()
    assert "removed (only in the base revision): test\\_inner.py::test\\_counted" in markdown
    assert "against: base " in markdown


def test_a_benchmark_failing_on_the_base_side_is_reported_not_failed(repo: Project) -> None:
    broken = TESTS.replace("    benchmark(work)\n", "    benchmark(work)\n    assert SCALE != 1\n")
    repo.pytester.makepyfile(test_inner=broken)
    git(repo.path, "commit", "-qam", "a base whose test_timed fails")
    repo.pytester.makepyfile(test_inner=TESTS)  # the working tree fixes it
    result = repo.run("--hpml-against=HEAD", *QUICK)
    assert table_verdicts(repo, result)["test_timed"] == "inconclusive"
    result.stdout.fnmatch_lines(
        ["hpml: test_inner.py::test_timed: failed on the base side (call: *), not judged"]
    )
    assert result.ret == pytest.ExitCode.OK


def test_a_benchmark_skipped_on_the_base_side_says_why(repo: Project) -> None:
    """It read "0 complete pair(s) of processes: at least 2 are needed", the skip unnamed."""
    skipped = TESTS.replace("    benchmark(work)\n", "    pytest.skip('not on base')\n", 1)
    repo.pytester.makepyfile(test_inner="import pytest\n" + skipped)
    git(repo.path, "commit", "-qam", "a base that skips test_timed")
    repo.pytester.makepyfile(test_inner=TESTS)
    result = repo.run("--hpml-against=HEAD", *QUICK)
    assert table_verdicts(repo, result)["test_timed"] == "inconclusive"
    result.stdout.fnmatch_lines(
        ["hpml: test_inner.py::test_timed: skipped on the base side (not on base), not judged"]
    )
    assert result.ret == pytest.ExitCode.OK


def test_a_metric_the_base_records_instead_is_new_and_the_other_removed(repo: Project) -> None:
    """A base whose test records a count where the working tree's times: it read "0 complete
    pair(s) of processes", and the base's count went unnamed."""
    counting = TESTS.replace("    benchmark(work)\n", "    benchmark.record('n', 1)\n", 1)
    repo.pytester.makepyfile(test_inner=counting)
    git(repo.path, "commit", "-qam", "a base whose test_timed records a count")
    repo.pytester.makepyfile(test_inner=TESTS)
    result = repo.run("--hpml-against=HEAD", *QUICK)
    assert table_verdicts(repo, result)["test_timed"] == "new"
    result.stdout.fnmatch_lines(
        [
            "*test_inner.py::test_timed*new*only in the working tree's test (the base's records "
            "n): not compared*",
            "hpml: removed (only in the base revision): test_inner.py::test_timed n*",
        ]
    )
    assert result.ret == pytest.ExitCode.OK


def test_a_step_that_waits_off_its_thread_is_judged_on_the_wall_clock(repo: Project) -> None:
    """Sleeping stands for work done elsewhere (a DataLoader's workers, another thread): the
    measuring thread's CPU clock does not see it, so the wall clock judges (Note [Thread
    clock])."""
    waits = "import time\n\nfrom work import SCALE\n\n\ndef test_waits(benchmark):\n"
    repo.pytester.makepyfile(test_waits=waits + "    benchmark(time.sleep, 0.002 * SCALE)\n")
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-qm", "a benchmark that sleeps")
    repo.pytester.makepyfile(work=WORK.format(scale=4))
    result = repo.run("--hpml-against=HEAD", *QUICK, "-k", "waits", "--hpml-report=r.json")
    assert table_verdicts(repo, result) == {"test_waits": "regressed"}
    (waited,) = json.loads((repo.path / "r.json").read_text())["results"]
    assert "CPU clock" not in waited["verdicts"]["time"]["reason"]


def test_a_branch_name_is_a_revision(repo: Project) -> None:
    git(repo.path, "branch", "before")
    repo.pytester.makepyfile(work=WORK.format(scale=2))
    git(repo.path, "commit", "-qam", "twice the calls")
    result = repo.run("--hpml-against=before", *QUICK, "-k", "counted")
    assert table_verdicts(repo, result) == {"test_counted": "regressed"}
    result.stdout.fnmatch_lines(
        [
            "hpml: 1 of 1 benchmark regressed",
            "hpml: against: base * (before; Python *) vs head * (Python *), 3 pairs",
        ]
    )


# --- errors: one usage error, nothing left behind -------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hpml-against=no-such-rev"], "*--hpml-against=no-such-rev: no such commit in *"),
        (
            ["--hpml-against=HEAD", "--hpml-baseline=update"],
            "*--hpml-against compares with a git revision and records no baseline*",
        ),
        (
            ["--hpml-against=HEAD", "--hpml-against-python=/no/such/python"],
            "*--hpml-against-python=/no/such/python: no such interpreter*",
        ),
        # paths each side would put first on sys.path: once ignored without a word
        (
            ["--hpml-against=HEAD", "--hpml-against-paths=src,nonexistent"],
            "ERROR: --hpml-against-paths=src,nonexistent: nonexistent is no directory of the "
            "rootdir *; name directories of the rootdir, relative to it (such as src)",
        ),
        (
            ["--hpml-against=HEAD", f"--hpml-against-paths={sys.prefix}"],
            f"ERROR: --hpml-against-paths={sys.prefix}: {sys.prefix} lies outside the rootdir *, "
            "the same for both sides; *",
        ),
        (
            ["--hpml-against=HEAD", "--hpml-against-paths=src/../.."],
            "*: src/../.. lies outside the rootdir *",
        ),
    ],
    ids=["revision", "baseline", "python", "paths-missing", "paths-absolute", "paths-above"],
)
def test_a_bad_revision_or_setting_is_a_usage_error(
    repo: Project, args: list[str], message: str
) -> None:
    (repo.path / "src").mkdir()
    before = left_in(Path(tempfile.gettempdir()))
    result = repo.run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str()
    assert worktrees(repo.path) == [str(repo.path)]
    assert left_in(Path(tempfile.gettempdir())) == before


@pytest.mark.parametrize(
    ("source", "named"),
    [("env", "HPML_AGAINST_PYTHON="), ("ini", "ini hpml_against_python = ")],
)
def test_the_base_interpreter_is_named_by_the_source_that_gave_it(
    repo: Project, source: str, named: str
) -> None:
    """HPML_AGAINST_PYTHON="python3 -S" was said to be --hpml-against-python's; a command line
    where one program is named is said to be one."""
    python = f"{Path(sys.executable).name} -S"
    result = repo.run("--hpml-against=HEAD", *repo.configure(source, against_python=python))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert repo.error_lines(result) == [
        f"ERROR: {named}{python}: no such interpreter; name the interpreter alone "
        f"({Path(sys.executable).name}), without arguments"
    ]
    assert worktrees(repo.path) == [str(repo.path)]


def test_outside_a_git_repository_is_a_usage_error(project: Project) -> None:
    project.pytester.makepyfile(work=WORK.format(scale=1), test_inner=TESTS)
    result = project.run("--hpml-against=HEAD")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*is not in a git repository; run it in a clone*"])


def test_without_git_installed_is_a_usage_error(
    repo: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no git on it
    result = repo.run("--hpml-against=HEAD")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hpml-against needs git, which is not installed here*"])


def test_a_directory_the_base_revision_lacks_is_a_usage_error(repo: Project) -> None:
    """pytest started in a directory only the working tree has: the base side could not start
    there, so the run stops before any test, naming the directory."""
    fresh = repo.path / "fresh"
    fresh.mkdir()
    (fresh / "test_fresh.py").write_text("def test_nothing():\n    pass\n")
    repo.monkeypatch.chdir(fresh)
    result = repo.run("--hpml-against=HEAD", "--rootdir", str(repo.path))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hpml-against=HEAD: fresh (where pytest runs) is not in*"])
    assert worktrees(repo.path) == [str(repo.path)]


def test_under_a_launcher_is_a_usage_error(repo: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 of a torchrun launch reports, but must not start pairs of processes of its own."""
    launch = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    for name, value in {**launch, "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    result = repo.run("--hpml-against=HEAD")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*not under torchrun, mpirun or srun*"])


def test_an_interpreter_without_the_plugin_is_a_usage_error(repo: Project, tmp_path: Path) -> None:
    """A real virtualenv without pytest-hpml (nor torch) as the base side's interpreter."""
    venv.create(tmp_path / "bare", with_pip=False)
    python = tmp_path / "bare" / "bin" / "python"
    result = repo.run("--hpml-against=HEAD", f"--hpml-against-python={python}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*--hpml-against-python={python} cannot import pytest_hpml*install pytest-hpml*"]
    )
    assert worktrees(repo.path) == [str(repo.path)]


def test_a_slow_interpreter_is_said_to_be_awaited(monkeypatch: pytest.MonkeyPatch) -> None:
    """A base interpreter that takes its time (a cold disk, a wrapper) was 300 s of silence."""
    from pytest_hpml.bench import environment

    monkeypatch.setattr(environment, "SPEAK_AFTER", 0.2)
    said: list[str] = []
    slow = subprocess.Popen(
        ["sh", "-c", "sleep 1; echo '{\"packages\": {}}'"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    found, why = environment.described(slow, lambda: said.append("waiting"))
    assert (found, why, said) == ({"packages": {}}, "", ["waiting"])
    quick = subprocess.Popen(
        ["echo", '{"packages": {}}'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert environment.described(quick, lambda: said.append("again"))[0] == {"packages": {}}
    assert said == ["waiting"]  # nothing said of a quick one


@pytest.mark.parametrize("printed", ["[1, 2]", '{"packages": [1]}', '{"python": "3.11"}'])
def test_an_interpreter_that_prints_other_json_is_a_usage_error(
    repo: Project, tmp_path: Path, printed: str
) -> None:
    """A wrapper that answers with another program's JSON: was an AttributeError, INTERNALERROR."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho '{printed}'\n")
    python.chmod(0o755)
    result = repo.run("--hpml-against=HEAD", f"--hpml-against-python={python}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*does not answer as a Python interpreter (it printed JSON that describes no *"]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_revision_that_names_a_tag_and_a_branch_is_a_usage_error(repo: Project) -> None:
    """git resolved it to the tag's older commit, its warning swallowed."""
    git(repo.path, "tag", "x", "HEAD")
    (repo.path / "later.txt").write_text("later\n")
    git(repo.path, "add", "later.txt")
    git(repo.path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "later")
    git(repo.path, "branch", "x")
    result = repo.run("--hpml-against=x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--hpml-against=x is ambiguous: refs/tags/x and refs/heads/x are different commits*"]
    )
    assert worktrees(repo.path) == [str(repo.path)]


@pytest.mark.parametrize("inside", ["absolute", "relative"])
def test_a_temporary_directory_in_the_rootdir_is_a_usage_error(repo: Project, inside: str) -> None:
    """The base worktree was made under the rootdir and collected as head tests."""
    (repo.path / "tmp").mkdir()
    repo.monkeypatch.setenv("TMPDIR", str(repo.path / "tmp") if inside == "absolute" else "tmp")
    result = repo.run_subprocess("--hpml-against=HEAD")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["*--hpml-against: the temporary directory * lies in the rootdir*"])
    assert worktrees(repo.path) == [str(repo.path)]


def test_a_worktree_that_cannot_be_made_is_a_usage_error(repo: Project) -> None:
    """A commit that names a file git lost: the revision resolves, its checkout fails."""
    blob = git(repo.path, "rev-parse", "HEAD:work.py").strip()
    (repo.path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    before = left_in(Path(tempfile.gettempdir()))
    result = repo.run("--hpml-against=HEAD")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: git worktree add --detach --quiet * failed in *"])
    assert "Traceback" not in result.stderr.str()
    assert worktrees(repo.path) == [str(repo.path)]
    assert left_in(Path(tempfile.gettempdir())) == before


# A real pytest of the inner project against its HEAD, quickly.
AGAINST_HEAD = [
    sys.executable,
    "-m",
    "pytest",
    "-p",
    "no:cacheprovider",
    "-q",
    "--hpml-against=HEAD",
    *QUICK,
]


def commit_a_waiting_benchmark(repo: Project) -> None:
    """Commit a test_timed whose measuring processes write their pid and their parent's to
    child.pid and wait, unless GO_ON is set."""
    waits = TESTS.replace(
        "    benchmark(work)\n",
        "    if os.environ.get('HPML_INTERNAL_RERUN') and not os.environ.get('GO_ON'):\n"
        "        open('child.pid', 'w').write(f'{os.getpid()} {os.getppid()}')\n"
        "        import time; time.sleep(600)\n"
        "    benchmark(work)\n",
    )
    repo.pytester.makepyfile(test_inner=waits)
    git(repo.path, "commit", "-qam", "a benchmark that waits in a measuring process")


@pytest.mark.parametrize(
    "number", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda n: n.name
)
def test_ctrl_c_while_the_sides_measure_leaves_no_worktree(
    repo: Project, tmp_path: Path, number: int
) -> None:
    """SIGINT to a real pytest while a base process measures, or SIGTERM (a CI's cancel) or
    SIGHUP (Note [Ending signals]): pytest's exit on Ctrl-C, the process stopped, and the one
    that forked it (Note [Fork server]), and neither the worktree nor a request file left."""
    commit_a_waiting_benchmark(repo)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    inner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--hpml-against=HEAD"],
        cwd=repo.path,
        env={**os.environ, "TMPDIR": str(scratch), **DUMPS_STACKS},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=interruptible,
    )
    try:
        pid, parent = _wait_for(inner, scratch)
        output, _ = interrupt(inner, number=number)
    finally:
        inner.kill()
    assert inner.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "KeyboardInterrupt" in output
    assert "Traceback" not in output, output
    assert still_running([pid, parent]) == []
    assert left_in(scratch) == []
    assert worktrees(repo.path) == [str(repo.path)]


# git, on PATH before the real one: as the run removes its base worktree, the signal reaches
# pytest (git's parent), which then has half a second left to end.
SIGNALS_THE_REMOVAL = """#!/bin/sh
if [ "$1 $2" = "worktree remove" ]; then kill -{name} $PPID; sleep 0.5; fi
exec {git} "$@"
"""


@pytest.mark.parametrize("name", ["INT", "TERM", "HUP"])
def test_a_signal_while_the_worktree_is_removed_is_held_until_it_is(
    repo: Project, tmp_path: Path, name: str
) -> None:
    """The signal's default action had ended the run halfway: the worktree stayed."""
    wrapper = tmp_path / "bin"
    wrapper.mkdir()
    real = shutil.which("git")
    (wrapper / "git").write_text(SIGNALS_THE_REMOVAL.format(name=name, git=real))
    (wrapper / "git").chmod(0o755)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {
        **os.environ,
        "TMPDIR": str(scratch),
        "PATH": f"{wrapper}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        AGAINST_HEAD,
        cwd=repo.path,
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=interruptible,
        timeout=300,
    )
    assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout + done.stderr
    assert (
        f"hpml: SIG{name} received as the run ended: held until its base worktree was removed, "
        "exit status 2"
    ) in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert left_in(scratch) == []
    assert worktrees(repo.path) == [str(repo.path)]


# A signal to the run itself after the pairs: in the terminal summary, or in pytest's own
# clean-up (a clean-up added as the run is unconfigured runs before the earlier ones).
SIGNALS_THE_END = f"""
import os
import signal


def _signal():
    os.kill(os.getpid(), signal.SIG{{name}})


def pytest_terminal_summary(config):
    if "{{moment}}" == "summary" and not os.environ.get("{RERUN_ENV}"):
        _signal()


def pytest_unconfigure(config):
    if "{{moment}}" == "clean-up" and not os.environ.get("{RERUN_ENV}"):
        config.add_cleanup(_signal)
"""


@pytest.mark.parametrize(("moment", "name"), [("summary", "HUP"), ("clean-up", "INT")])
def test_a_signal_after_the_pairs_is_held_until_the_run_ends(
    repo: Project, tmp_path: Path, moment: str, name: str
) -> None:
    """A SIGHUP in another plugin's summary, and a Ctrl-C in pytest's gc clean-up, each
    ended in a KeyboardInterrupt traceback."""
    repo.pytester.makeconftest(SIGNALS_THE_END.format(moment=moment, name=name))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = subprocess.run(
        [*AGAINST_HEAD, TIMES_UNJUDGED],
        cwd=repo.path,
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        preexec_fn=interruptible,
        timeout=300,
    )
    assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout + done.stderr
    assert f"hpml: SIG{name} received as the run ended" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert left_in(scratch) == []
    assert worktrees(repo.path) == [str(repo.path)]


def test_a_worktree_that_a_killed_run_left_is_removed_by_the_next_run(
    repo: Project, tmp_path: Path
) -> None:
    """SIGKILL leaves the worktree on disk and registered; the next run removes it and says
    so, and leaves a worktree of another tool alone."""
    commit_a_waiting_benchmark(repo)
    other = tmp_path / "another-tools-tree"
    git(repo.path, "worktree", "add", "--detach", "--quiet", str(other), "HEAD")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    command = AGAINST_HEAD
    env = {**os.environ, "TMPDIR": str(scratch)}
    inner = subprocess.Popen(
        command, cwd=repo.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        pid, parent = _wait_for(inner, scratch)
    finally:
        inner.kill()
        inner.communicate()
    assert still_running([pid, parent]) == []
    (left,) = scratch.glob("pytest-hpml-base-*")
    assert str(left) in worktrees(repo.path)

    again = subprocess.run(
        command, cwd=repo.path, env={**env, "GO_ON": "1"}, capture_output=True, text=True
    )
    assert again.returncode == pytest.ExitCode.OK, again.stdout + again.stderr
    assert (
        f"hpml: removed the base worktree {left}, which a run that ended without cleaning up "
        f"(process {inner.pid}) left behind"
    ) in again.stderr
    assert worktrees(repo.path) == [str(repo.path), str(other)]
    assert left_in(scratch) == []


# A Ctrl-C that a finalizer swallows, while the controller waits for a process that never says
# a word: Python prints "Exception ignored in" and goes on.
SWALLOWED = """
import os, signal, time
from pytest_hpml.bench import ending, reruns

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # in the finalizer still, wherever Python raises it

turn = reruns.Turn()
with ending.watching_ctrl_c():
    Finalized()  # garbage at once: its finalizer runs
    print("went on", flush=True)
    try:
        turn.said(lambda: False)  # its process never says a word
    except KeyboardInterrupt:
        print("interrupted")
"""


def test_a_ctrl_c_that_a_finalizer_swallowed_still_ends_the_wait_for_a_process() -> None:
    """A real SIGINT whose KeyboardInterrupt a finalizer swallowed ends the controller's wait
    for a process's word all the same (Note [Swallowed Ctrl-C]): it had waited on, for a
    process still in its test (seen once on a slow host, the test above)."""
    done = subprocess.run(
        [sys.executable, "-c", SWALLOWED],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=interruptible,
    )
    assert done.stdout.split() == ["went", "on", "interrupted"], done.stderr
    assert "Exception ignored in" in done.stderr
    assert "KeyboardInterrupt" in done.stderr


def test_ctrl_c_is_watched_only_where_pythons_own_handler_is_set() -> None:
    """A SIGINT handler of the user's keeps its say while the pairs measure; Python's own is
    watched, and back once they end (Note [Swallowed Ctrl-C])."""
    import signal

    from pytest_hpml.bench import ending

    def mine(number: int, frame: object) -> None:
        """A handler that does not raise."""

    before = signal.signal(signal.SIGINT, mine)
    try:
        with ending.watching_ctrl_c():
            assert signal.getsignal(signal.SIGINT) is mine
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with ending.watching_ctrl_c():
            assert signal.getsignal(signal.SIGINT) not in (mine, signal.default_int_handler)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def _wait_for(inner: subprocess.Popen[str], scratch: Path, seconds: float = 120) -> tuple[int, int]:
    """The pid of the first measuring process and of its parent, once it waits in the base
    worktree."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and inner.poll() is None:
        found = list(scratch.glob("pytest-hpml-base-*/child.pid"))
        if found and len(found[0].read_text().split()) == 2:
            pid, parent = map(int, found[0].read_text().split())
            return pid, parent
        time.sleep(0.1)
    raise AssertionError(f"no measuring process started: {inner.communicate()[0]}")


# A call of about twenty operators whose head adds two views, or two kernels (Note [Work
# counters]): a graph library's patch release added two aten::select to such a call.
SELECTS = """
import torch

EXTRA = {extra!r}
x, w = torch.randn(8, 16), torch.randn(16, 16)


def call():
    y = torch.relu(x @ w + 1.0)
    for _ in range(4):
        y = torch.tanh(y @ w) * 0.5
    if EXTRA == "views":
        y = y.select(0, 0).unsqueeze(0)
    elif EXTRA == "kernels":
        y = y * 2.0 * 3.0
    return y.sum()
"""
VIEW_TEST = "from call import call\n\n\ndef test_call(benchmark):\n    benchmark(call)\n"


@pytest.mark.parametrize("extra", ["views", "kernels"])
def test_two_more_views_pass_where_two_more_kernels_fail(project: Project, extra: str) -> None:
    committed(project, call=SELECTS.format(extra=""), test_inner=VIEW_TEST)
    project.pytester.makepyfile(call=SELECTS.format(extra=extra))
    result = project.run_subprocess(
        "--hpml-against=HEAD", BENCH_TIME, "--hpml-pairs=3", TIMES_UNJUDGED, "--hpml-report=r.json"
    )
    [found] = json.loads((project.path / "r.json").read_text())["results"]
    verdicts = found["verdicts"]
    ops, views = verdicts["ops"], verdicts["views"]
    if extra == "views":
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        assert (ops["verdict"], ops["current"]) == ("pass", ops["baseline"]), ops
        assert (views["verdict"], views["current"] - views["baseline"]) == ("changed", 2), views
        assert "aten::select: 0 -> 1 per call" in views["reason"]
        result.stdout.fnmatch_lines(
            ["hpml: changed (not failing) test_inner.py::test_call", "  views: *"]
        )
    else:
        assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
        assert ops["verdict"] == "regressed", ops
        assert "aten::mul: 4 -> 6 per call" in ops["reason"]
        assert views["verdict"] == "pass", views


# Work whose speed the process draws once, from its string hashes (which PYTHONHASHSEED sets):
# one of several speeds, 1x to 2.7x, whatever the code, as dict look-ups of one library landed
# in three speeds per process (Note [Pair seeds]). Each process writes the one it drew.
SPEEDS = """
import os

SCALE = {scale}
SPEED = (1.0, 1.3, 1.6, 1.9, 2.3, 2.7)[hash("speed of this process") % 6]
with open(os.environ["SPEEDS_FILE"], "a") as out:
    # with its hash seed and parent, which tell the pair a process belongs to
    out.write(f"{{SPEED}} {{os.environ.get('PYTHONHASHSEED')}} {{os.getpid()}} {{os.getppid()}}\\n")


def work():
    return sum(range(int(8_000 * SPEED * SCALE)))
"""


@pytest.mark.parametrize(("scale", "verdict"), [(1.0, "pass"), (1.15, "regressed")])
def test_processes_at_three_speeds_drawn_per_process_neither_alarm_nor_hide(
    repo: Project, tmp_path: Path, scale: float, verdict: str
) -> None:
    """The two processes of a pair share their hash seed, and every pair draws a new one: the
    speed a process draws from its hashes is its pair's other's, and cancels in the pair's
    ratio. An unchanged tree passes however the pairs' speeds fell; 15% more work is caught.
    Run again where every pair happened to draw one speed (at most 1 in 36 runs)."""
    speeds = tmp_path / "speeds.txt"
    repo.monkeypatch.setenv("SPEEDS_FILE", str(speeds))
    repo.monkeypatch.delenv("PYTHONHASHSEED", raising=False)  # the pairs' own seeds apply
    # another interpreter's name for the base side: no fork server, whose processes would all
    # share its hashes (Note [Fork server]), so every process starts fresh with its pair's seed
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    committed(repo, work=SPEEDS.format(scale=1.0))
    repo.pytester.makepyfile(work=SPEEDS.format(scale=scale))
    pairs: dict[str, set[str]] = {}
    for _ in range(3):
        speeds.unlink(missing_ok=True)
        result = repo.run_subprocess(
            "--hpml-against=HEAD", f"--hpml-against-python={python}", BENCH_TIME, "-k", "timed",
            "--hpml-report=r.json",
        )  # fmt: skip
        [found] = json.loads((repo.path / "r.json").read_text())["results"]
        time = found["verdicts"]["time"]
        assert time["verdict"] == verdict, time
        expected = pytest.ExitCode.OK if verdict == "pass" else pytest.ExitCode.TESTS_FAILED
        assert result.ret == expected
        lines = [line.split() for line in speeds.read_text().splitlines()]
        started = {pid for _, _, pid, _ in lines}
        pairs = {}  # each pair's seed: the speeds its processes drew
        for speed, seed, _, parent in lines:
            if parent in started:  # a pair's process, which the session started
                pairs.setdefault(seed, set()).add(speed)
        assert len(pairs) >= 3, lines
        assert all(len(drawn) == 1 for drawn in pairs.values()), lines  # one speed per pair
        if len({speed for drawn in pairs.values() for speed in drawn}) >= 2:
            break
    assert len({speed for drawn in pairs.values() for speed in drawn}) >= 2, pairs
