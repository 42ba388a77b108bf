"""``pytest-hpml bisect GOOD BAD -k TEST``: the first commit where a benchmark's metric changed.

The commits of ``git rev-list --first-parent --ancestry-path GOOD..BAD`` are checked out
one at a time in a temporary git worktree, as ``--hpml-against`` checks out its base, and the
test is measured there in a fresh pytest process; a binary search halves them (Note [Bisect]).
A count (a work counter, an instruction count) is exact: one process per commit
(``--hpml-baseline=off``), judged against GOOD's count as a stored one would be. A time is
judged against GOOD in pairs of processes: ``--hpml-against=GOOD`` run in the commit's tree,
``regressed`` or ``improved`` meaning changed. The worktree is removed at the end, on Ctrl-C
too.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from .. import vcs
from ..bench import reruns
from ..bench.metrics import is_work_counter
from ..model import Comparison
from ..verdict import judge, stats
from ..verdict.baselines import BaselineError

# The verdicts that mean the metric moved: a change a test accepts or a count's class allows
# is a change all the same.
MOVED = (stats.REGRESSED, stats.IMPROVED, stats.ACCEPTED, stats.CHANGED)
BRIEF = 0.1  # seconds of rounds a process measuring a count takes (--hpml-bench-time)
TRIES = 2  # times a time is judged against GOOD before an inconclusive verdict stops the search


class BisectError(BaselineError):
    """Why the search cannot start or go on: a bad revision, a test that measures nothing."""


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:12]

    def __str__(self) -> str:
        return f"{self.short} ({self.subject})"


@dataclass(frozen=True)
class Found:
    """The first commit whose metric differs from GOOD's, and its verdict against GOOD."""

    commit: Commit
    verdict: Comparison
    unit: str


@dataclass(frozen=True)
class Started:
    """The search begins: ``commits`` after GOOD, judged exactly or in pairs, in about
    ``steps`` runs."""

    good: Commit
    commits: int
    metric: str
    exact: bool
    steps: int


@dataclass(frozen=True)
class Judged:
    """One commit's verdict on the metric against GOOD."""

    commit: Commit
    metric: str
    verdict: Comparison
    unit: str


@dataclass(frozen=True)
class Ended:
    """The search is over: ``found`` is the first commit that changed the metric, or None
    where BAD's is GOOD's."""

    good: str
    bad: str
    metric: str
    found: Found | None
    commits: int
    runs: int  # pytest runs
    seconds: float


Event = Union[Started, Judged, Ended]


def commits(top: Path, good: str, bad: str) -> tuple[Commit, list[Commit]]:
    """GOOD, and the commits after it up to BAD on BAD's first-parent line, oldest first."""
    shas = [_revision(top, revision) for revision in (good, bad)]
    if shas[0] == shas[1]:
        raise BisectError(f"{good} and {bad} are the same commit: nothing lies between them")
    try:
        vcs.git(top, "merge-base", "--is-ancestor", *shas)
    except vcs.GitError:
        raise BisectError(
            f"{good} is not an ancestor of {bad}: name the older, good commit first"
        ) from None
    span = f"{shas[0]}..{shas[1]}"
    listed = vcs.git(
        top, "log", "--format=%H %s", "--first-parent", "--ancestry-path", "--reverse", span
    )
    lines = (line.partition(" ") for line in listed.splitlines() if line)
    found = [Commit(sha, subject) for sha, _, subject in lines]
    if not found or found[-1].sha != shas[1]:
        raise BisectError(f"{bad} is not on a first-parent line from {good}")
    subject = vcs.git(top, "log", "-1", "--format=%s", shas[0]).strip()
    return Commit(shas[0], subject), found


def _revision(top: Path, revision: str) -> str:
    """The commit ``revision`` names, or a :class:`BisectError` saying it names none."""
    try:
        return vcs.commit(top, revision)
    except vcs.Ambiguous as exc:
        raise BisectError(f"{exc}; name one in full ({exc.first})") from None
    except vcs.GitError:
        raise BisectError(f"{revision!r} is no commit of {top}") from None


@contextlib.contextmanager
def worktree(top: Path, commit: Commit) -> Iterator[Path]:
    """A temporary detached worktree of ``top`` at ``commit``, removed on leaving, on Ctrl-C
    too."""
    directory = Path(tempfile.mkdtemp(prefix="pytest-hpml-bisect-"))
    try:
        vcs.git(top, "worktree", "add", "--detach", "--quiet", str(directory), commit.sha)
        yield directory
    finally:
        vcs.remove_worktree(top, directory)


@dataclass
class Bisect:
    """The search for the first commit where ``metric`` of the test ``-k test`` selects
    changed. ``read`` reads a JSON report; ``tell`` is given each step as it happens."""

    top: Path  # the repository
    here: Path  # where pytest runs, relative to the repository's top
    test: str
    metric: str
    pytest_args: Sequence[str]
    read: Callable[[Path], dict[str, Any]]
    tell: Callable[[Event], None]
    measured: int = 0  # pytest runs so far
    # set as the search starts
    good: Commit = field(init=False)
    tree: Path = field(init=False)  # the worktree
    scratch: Path = field(init=False)  # where the runs' reports go
    against: dict[str, Any] | None = field(init=False)  # GOOD's record of a count
    unit: str = field(init=False, default="")

    def run(self, good: Commit, found: list[Commit]) -> Found | None:
        """The first of ``found`` (oldest first, BAD last) whose metric differs from GOOD's;
        None if BAD's does not."""
        with worktree(self.top, good) as tree, tempfile.TemporaryDirectory() as scratch:
            self.good, self.tree, self.scratch = good, tree, Path(scratch)
            self.against = self._measure(good) if exact(self.metric) else None
            steps = math.ceil(math.log2(len(found))) if len(found) > 1 else 1
            self.tell(Started(good, len(found), self.metric, self.against is not None, steps))
            # GOOD is unchanged; the first change lies in (low, high]. BAD is judged only if
            # the search ends there: where an earlier commit moved, so did BAD (one change,
            # which stays: what a bisection assumes), and one run is saved.
            judged: dict[int, Comparison] = {}
            low, high = -1, len(found) - 1
            while high - low > 1:
                middle = (low + high) // 2
                judged[middle] = self._judge(found[middle])
                moved = judged[middle].verdict in MOVED
                low, high = (low, middle) if moved else (middle, high)
            if high not in judged:
                judged[high] = self._judge(found[high])
                if judged[high].verdict not in MOVED:
                    return None
            return Found(found[high], judged[high], self.unit)

    def _judge(self, commit: Commit) -> Comparison:
        """``commit``'s verdict on the metric against GOOD, and a line saying it."""
        for _ in range(TRIES):
            if self.against is not None:
                record = self._measure(commit)
                verdict = judge.judge_count(record, self.against, 0.0)
            else:
                result = self._result(commit, [f"--hpml-against={self.good.sha}"])
                verdict = self._verdict(commit, result)
            if verdict.verdict != stats.INCONCLUSIVE:
                break
        self.tell(Judged(commit, self.metric, verdict, self.unit))
        if verdict.verdict not in (*MOVED, stats.PASS):
            raise BisectError(
                f"at {commit}: {self.metric} is {verdict.verdict} against GOOD "
                f"{TRIES} times ({verdict.reason or 'no reason given'}); give it more "
                "pairs or time (-- --hpml-pairs=N --hpml-bench-time=S)"
            )
        return verdict

    def _measure(self, commit: Commit) -> dict[str, Any]:
        """The count's record at ``commit``, measured alone (--hpml-baseline=off), timed
        briefly unless the arguments say otherwise: a count needs one call."""
        first = [f"--hpml-bench-time={BRIEF}"]
        return self._recorded(commit, self._result(commit, ["--hpml-baseline=off"], first))

    def _verdict(self, commit: Commit, result: dict[str, Any]) -> Comparison:
        """The metric's verdict against GOOD in ``result``, of --hpml-against=GOOD."""
        self._recorded(commit, result)
        verdict = Comparison.from_dict(result["verdicts"][self.metric])
        if verdict.verdict == stats.NEW:
            raise BisectError(f"{result['test']} is not at GOOD, {self.good}: nothing to judge by")
        return verdict

    def _recorded(self, commit: Commit, result: dict[str, Any]) -> dict[str, Any]:
        """The metric's record in ``result``; a :class:`BisectError` if the test has none."""
        if self.metric not in result["metrics"] or self.metric not in result["verdicts"]:
            recorded = ", ".join(sorted(result["metrics"])) or "nothing"
            raise BisectError(
                f"at {commit}: {result['test']} records no metric {self.metric!r}; it records "
                f"{recorded}"
            )
        record: dict[str, Any] = result["metrics"][self.metric]
        self.unit = record.get("unit", "")
        return record

    def _result(
        self, commit: Commit, extra: list[str], first: Sequence[str] = ()
    ) -> dict[str, Any]:
        """The one result of the test at ``commit``, from a pytest run in the worktree."""
        vcs.git(self.tree, "checkout", "--detach", "--quiet", "--force", commit.sha)
        vcs.git(self.tree, "clean", "-fdxq")  # what an earlier commit's run left
        if not (self.tree / self.here).is_dir():
            raise BisectError(
                f"at {commit}: {self.here} (where pytest runs) is not in that commit; run "
                "from a directory every commit has, e.g. the repository's top level"
            )
        report = self.scratch / f"{self.measured}.json"
        self.measured += 1
        done = reruns.run_captured(
            [*self._command(first), *extra, f"--hpml-report={report}"],
            cwd=self.tree / self.here,
            env=self._environment(),
            start_new_session=True,  # Ctrl-C reaches it from here, once (reruns._stop)
        )
        if not report.is_file():
            raise BisectError(f"at {commit}: pytest wrote no report ({reruns.silence(done)})")
        results: list[dict[str, Any]] = self.read(report)["results"]
        if len(results) != 1:
            tests = ", ".join(r["test"] for r in results[:5]) or reruns.silence(done)
            raise BisectError(
                f"at {commit}: -k {self.test!r} measured {len(results)} benchmarks ({tests}); "
                "select one"
            )
        return results[0]

    def _command(self, first: Sequence[str]) -> list[str]:
        """pytest's command line: ``first``, then the user's arguments (which override it)."""
        instructions = ["--hpml-instructions=all"] if self.metric == "instructions" else []
        return [
            sys.executable,
            "-m",
            "pytest",
            *first,
            *self.pytest_args,
            "-p",
            "no:cacheprovider",
            *instructions,
            "-k",
            self.test,
        ]

    def _environment(self) -> dict[str, str]:
        """The commit's code first on the path, as each side of --hpml-against has it; no
        bytecode written, so that no cached module outlives the checkout of another commit."""
        first = [self.tree, *([self.tree / "src"] if (self.tree / "src").is_dir() else [])]
        earlier = os.environ.get("PYTHONPATH")
        path = os.pathsep.join([*map(str, first), *([earlier] if earlier else [])])
        return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


def exact(metric: str) -> bool:
    """Whether ``metric`` is a count that one process tells exactly: a work counter, or the
    instruction count. Any other is judged against GOOD in pairs of processes (a count there
    exactly too, only at greater cost)."""
    return is_work_counter(metric) or metric == "instructions"


def bisect(
    start: Path,
    good: str,
    bad: str,
    test: str,
    metric: str,
    pytest_args: Sequence[str],
    read: Callable[[Path], dict[str, Any]],
    tell: Callable[[Event], None],
) -> int:
    """Search, telling each step and the end; the command's exit status: 0 when a commit is
    named, 1 when BAD's metric is GOOD's."""
    began = time.monotonic()
    try:
        top = Path(vcs.git(start, "rev-parse", "--show-toplevel").strip()).resolve()
        here = start.resolve().relative_to(top)
    except vcs.GitError as exc:
        raise BisectError(f"bisect needs a git repository: {exc}") from None
    good_commit, found = commits(top, good, bad)
    search = Bisect(top, here, test, metric, pytest_args, read, tell)
    try:
        first = search.run(good_commit, found)
    except vcs.GitError as exc:
        raise BisectError(str(exc)) from None
    seconds = time.monotonic() - began
    tell(Ended(good, bad, metric, first, len(found), search.measured, seconds))
    return 1 if first is None else 0
