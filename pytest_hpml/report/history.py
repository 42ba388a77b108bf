"""The history of a project's benchmarks: one file per run in a directory (``--hpml-history``),
and the steps each metric took over the commits (``pytest-hpml history``; Note [History]).

A history record is the run's JSON report, as ``--hpml-report`` writes it, plus a ``history``
object: the time of the commit (the order of commits, whenever each was measured) and whether
tracked files differed from it. The report already holds the commit, the time of the run, the
machine's fingerprint and torch's version. So a record is a report: ``pytest-hpml show`` and
``render`` read it as one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import TypeGuard  # in typing from Python 3.10

from ..bench.metrics import higher_is_worse, is_sampled, kind_of
from ..storage import reader, writer
from ..verdict import changes, judge, stats
from . import text

HISTORY_FORMAT = "pytest-hpml-history/1"


def record(document: dict[str, Any], root: Path) -> dict[str, Any]:
    """The history record of a run: its JSON report ``document`` and the ``history`` keys."""
    from ..vcs import changed, commit_time  # the plugin's: the command needs none

    return {
        **document,
        "history": {
            "format": HISTORY_FORMAT,
            "commit_time": commit_time(root),
            "changed": changed(root),
        },
    }


def add(directory: Path, document: dict[str, Any], root: Path) -> Path:
    """Add the run's record to the history in ``directory`` as a new file; its path."""
    entry = record(document, root)
    keys = (entry["created"], entry.get("commit") or "no-commit", entry["fingerprint"]["id"])
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(map(str, keys)))
    return writer.add_new(directory, stem, json.dumps(entry, indent=1, sort_keys=True) + "\n")


# --- reading --------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # one run is one record: compared (and hashed) by identity
class Run:
    """One record of the history."""

    path: Path
    document: dict[str, Any] = field(repr=False)

    @property
    def commit(self) -> str:
        return self.document.get("commit") or "?"

    @property
    def created(self) -> str:
        return str(self.document.get("created") or "")

    @property
    def commit_time(self) -> str:
        return str(self.document["history"].get("commit_time") or "")

    @property
    def machine(self) -> str:
        return str(self.document["fingerprint"].get("id", "?"))

    @property
    def machine_name(self) -> str:
        return str(self.document["fingerprint"].get("name", "?"))

    @property
    def torch(self) -> str:
        return str(self.document["fingerprint"].get("torch", "?"))


def _history_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with a record's ``history`` object, or its run for a history."""
    keys = data.get("history")
    if not isinstance(keys, dict) or keys.get("format") != HISTORY_FORMAT:
        return f"history.format is not {HISTORY_FORMAT!r}: not a history record"
    if not isinstance(keys.get("commit_time"), (str, type(None))):
        return "history.commit_time is not text or null"
    if not isinstance(data.get("created"), str):
        return "created is not text"
    if data.get("against"):
        return "measured with --hpml-against, in pairs: not one commit's values"
    return None


def load(
    directory: Path, report_problem: Callable[[Any], str | None]
) -> tuple[list[Run], list[str]]:
    """The records in ``directory``, in commit order, and what is wrong with each file that
    cannot be used (it is left out). ``report_problem`` checks a record as a JSON report."""
    if directory.exists() and not directory.is_dir():
        raise reader.Unreadable(f"history {directory} is a file, not a directory")
    if not directory.is_dir():
        raise reader.Unreadable(f"no history directory {directory}")
    runs, said = [], []
    for path in sorted(directory.glob("*.json")):  # .new-*.tmp: a writer at work
        try:
            data = reader.read_json(path, "history record")
        except (OSError, reader.Unreadable) as exc:
            said.append(str(exc))
            continue
        wrong = report_problem(data) or _history_problem(data)
        if wrong:
            said.append(f"history record {path} is not usable ({wrong})")
            continue
        runs.append(Run(path, data))
    runs.sort(key=lambda run: (run.commit_time or run.created, run.created, run.path.name))
    return runs, said


# --- series ---------------------------------------------------------------------------------


@dataclass
class Series:
    """One metric of one benchmark on one machine, over the commits."""

    machine: str
    test: str
    metric: str
    unit: str
    kind: str
    counted: bool  # a count (work counters, FLOPs...), else a measurement (time, rate)
    worse_up: bool  # a higher value is worse
    commits: list[int] = field(default_factory=list)  # the index of each point's commit
    values: list[list[float]] = field(default_factory=list)  # each run's value at that commit
    runs: list[list[Run]] = field(default_factory=list)
    found: list[changes.Step] = field(default_factory=list)

    def point(self, i: int) -> float:
        """The value standing for the point's commit: its runs' median (each run's value is
        :func:`run_value`)."""
        return stats.median(self.values[i])

    def add(self, commit: int, value: float, run: Run) -> None:
        if self.commits and self.commits[-1] == commit:
            self.values[-1].append(value)
            self.runs[-1].append(run)
        else:
            self.commits.append(commit)
            self.values.append([value])
            self.runs.append([run])


@dataclass
class History:
    """The runs of a history, their commits in order, and one series per metric."""

    runs: list[Run]
    commits: list[str]  # in commit order
    series: list[Series]

    def steps(self) -> Iterable[tuple[Series, changes.Step]]:
        return ((s, step) for s in self.series for step in s.found)


def history(runs: list[Run], test: str | None = None) -> History:
    """The series of ``runs`` (in commit order); ``test``: only test ids holding it."""
    commits: list[str] = []
    found: dict[tuple[str, str, str], Series] = {}
    for run in runs:
        if not commits or commits[-1] != run.commit:
            commits.append(run.commit)
        for result in run.document["results"]:
            if test is not None and test not in result["test"]:
                continue
            for name, data in result["metrics"].items():
                value = run_value(data)
                counted = not is_sampled(data)
                if not _usable(value, counted):
                    continue
                key = (run.machine, result["test"], name)
                if key not in found:
                    unit, kind = str(data.get("unit", "")), str(data.get("kind"))
                    found[key] = Series(*key, unit, kind, counted, higher_is_worse(data))
                found[key].add(len(commits) - 1, float(value), run)
    ordered = [found[k] for k in sorted(found)]
    return History(runs, commits, ordered)


def run_value(record: dict[str, Any]) -> float | None:
    """What stands for a run's metric: a time by its fastest sample, a rate by its highest
    (the least disturbed by a busy machine: Note [Fastest sample]); any other by its median or
    value."""
    kind = kind_of(record)
    if kind is None or kind.judge != "samples" or not record.get("samples"):
        return judge.center(record)
    pooled = [v for v in judge.pooled(judge.runs(record)) if _usable(v, False)]
    if not pooled:
        return None
    return max(pooled) if kind.per_second else min(pooled)


def statistic(series: Series) -> str:
    """What each point of ``series`` is, as :func:`run_value` took it."""
    if series.counted:
        return "value"
    return {"time": "fastest sample", "rate": "highest sample"}.get(series.kind, "median")


def _usable(value: Any, counted: bool) -> TypeGuard[float]:
    """A value a series can hold: finite, at least 0 for a count, above 0 for a measurement
    (whose logarithm is taken)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return value >= 0 if counted else value > 0


def find_steps(found: History, threshold: float, confidence: float) -> None:
    """Find each series' steps (Note [Change points]): measurements at least ``threshold``
    (relative), counts any."""
    for series in found.series:
        points = [series.point(i) for i in range(len(series.commits))]
        series.found = changes.steps(
            points,
            counted=series.counted,
            min_change=0.0 if series.counted else threshold,
            confidence=confidence,
        )


def torch_changed(series: Series, step: changes.Step) -> str:
    """'torch 2.3.1 -> 2.4.0' where torch's version differs across the step, else ''."""
    before = {run.torch for run in series.runs[step.index - 1]}
    after = {run.torch for run in series.runs[step.index]}
    if before == after:
        return ""
    return f"torch {', '.join(sorted(before))} -> {', '.join(sorted(after))}"


STEP_COLUMNS = (
    "test", "metric", "machine", "commit", "before", "after", "change", "confidence", "note"
)  # fmt: skip


def step_cells(found: History, series: Series, step: changes.Step) -> list[str]:
    """A step's cells after the test id (STEP_COLUMNS), as the command prints them too."""
    return [
        series.metric,
        series.machine,
        found.commits[series.commits[step.index]],
        text.fmt(step.before, series.unit),
        text.fmt(step.after, series.unit),
        change(step),
        f"{step.confidence:.2%}",
        torch_changed(series, step),
    ]


def change(step: changes.Step) -> str:
    """A step's relative change, '+20.3%'; 'from 0' for a count that rose from none."""
    return text.percent(step.change) if abs(step.change) != float("inf") else "from 0"
