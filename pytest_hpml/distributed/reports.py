"""The reports of a distributed test: what each rank left behind (:class:`RankRun`), merged into
one report per phase.

A test fails if any rank failed or vanished, is skipped only if every rank skipped, and is a
failure if the ranks disagree; a rank that vanished is reported with why it was stopped, its
exit, and where it was (its stacks) or its last output. Reports cross processes as JSON, through
pytest's own (de)serialization hooks: a spawned rank writes them to a file the parent reads, a
launched rank gathers them on rank 0. Also the reports of a test skipped or failed before any
rank started.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest


@dataclass
class RankRun:
    """What one rank left behind: its reports, and how its process ended."""

    rank: int
    reports: list[pytest.TestReport] = field(default_factory=list)
    exit: str | None = None  # "exit code 3", "killed by SIGKILL", None while it ran on
    stopped: str | None = None  # why the parent stopped it (timeout, another rank failed)
    output: str = ""  # the tail of its own stdout and stderr, outside pytest's capture
    stacks: str = ""  # what faulthandler wrote when asked
    first: bool = False  # the rank whose failure ended the test: told first

    def report(self, when: str) -> pytest.TestReport | None:
        return next((r for r in self.reports if r.when == when), None)


def merge(item: pytest.Item, runs: Sequence[RankRun]) -> list[pytest.TestReport]:
    """One report per phase from every rank's: failed if any rank failed or vanished, skipped
    only if every rank skipped, a failure if they disagree. Rank 0's report is the base."""
    merged = [_merge_phase(item, "setup", runs)]
    if merged[0].passed:
        merged.append(_merge_phase(item, "call", runs))
    merged.append(_merge_phase(item, "teardown", runs))
    return merged


def _merge_phase(item: pytest.Item, when: str, runs: Sequence[RankRun]) -> pytest.TestReport:
    reports = {run.rank: run.report(when) for run in runs}
    problems = []
    for run in sorted(runs, key=lambda run: (not run.first, run.rank)):
        report = reports[run.rank]
        if report is None:
            if when != "teardown":  # a rank that vanished earlier is reported there
                problems.append(_vanished(run, when))
        elif report.failed:
            problems.append(f"rank {run.rank} failed: {_crash(report)}\n{report.longreprtext}")
    outcomes = {r.outcome for r in reports.values() if r is not None}
    base = reports.get(0) or next((r for r in reports.values() if r is not None), None)
    if not problems and outcomes == {"skipped"}:
        return base  # type: ignore[return-value]
    if not problems and len(outcomes) > 1:
        said = ", ".join(
            f"rank {rank} {r.outcome}" + (f" ({_skip_text(r)})" if r.skipped else "")
            for rank, r in sorted(reports.items())
            if r is not None
        )
        problems.append(f"the ranks disagree: {said}")
    sections = [s for run in runs for s in _sections(run, reports[run.rank])]
    return pytest.TestReport(
        item.nodeid,
        item.location,
        dict.fromkeys(item.keywords, 1),
        "failed" if problems else "passed",
        "\n\n".join(problems) if problems else None,
        when,  # type: ignore[arg-type]
        sections,
        duration=max((r.duration for r in reports.values() if r is not None), default=0.0),
        user_properties=base.user_properties if base is not None and not problems else (),
    )


def _crash(report: pytest.TestReport) -> str:
    """The one line that says what went wrong (pytest's short summary shows it)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    return (getattr(crash, "message", "") or "").splitlines()[0] if crash else ""


def _skip_text(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def _vanished(run: RankRun, when: str) -> str:
    what = f"rank {run.rank} did not finish {when}"
    if run.stopped:
        what += f": {run.stopped}"
    if run.exit:
        what += f" ({run.exit})"
    if run.stacks.strip():
        what += f"\nwhere rank {run.rank} was:\n{run.stacks.strip()}"
    if run.output.strip() and not run.stacks.strip():
        what += f"\nlast output of rank {run.rank}:\n{run.output.strip()}"
    return what


def _sections(run: RankRun, report: pytest.TestReport | None) -> list[tuple[str, str]]:
    """The rank's captured output, each section named after its rank."""
    if report is None:
        return []
    return [(f"{name} (rank {run.rank})", text) for name, text in report.sections]


def skipped(item: pytest.Item, reason: str) -> list[pytest.TestReport]:
    """The reports of a test skipped before any rank started."""
    _, line, _ = item.location
    keywords: dict[str, Literal[1]] = dict.fromkeys(item.keywords, 1)
    longrepr = (str(item.path), (line or 0) + 1, f"Skipped: {reason}")
    return [
        pytest.TestReport(item.nodeid, item.location, keywords, "skipped", longrepr, "setup"),
        pytest.TestReport(item.nodeid, item.location, keywords, "passed", None, "teardown"),
    ]


def failed(item: pytest.Item, message: str) -> list[pytest.TestReport]:
    """The reports of a test that failed at its setup, before its ranks ran, as a test with a
    wrong mark fails (made by pytest's own hook, so that the summary line shows ``message``)."""
    call = pytest.CallInfo.from_call(lambda: pytest.fail(message, pytrace=False), "setup")
    setup = item.ihook.pytest_runtest_makereport(item=item, call=call)
    keywords: dict[str, Literal[1]] = dict.fromkeys(item.keywords, 1)
    teardown = pytest.TestReport(item.nodeid, item.location, keywords, "passed", None, "teardown")
    return [setup, teardown]


def serialize(config: pytest.Config, report: pytest.TestReport) -> dict[str, Any]:
    data: dict[str, Any] = config.hook.pytest_report_to_serializable(config=config, report=report)
    return data


def deserialize(config: pytest.Config, data: dict[str, Any]) -> pytest.TestReport:
    if isinstance(data.get("longrepr"), list):  # a skip's (path, line, reason), after JSON
        data = {**data, "longrepr": tuple(data["longrepr"])}
    report: pytest.TestReport = config.hook.pytest_report_from_serializable(
        config=config, data=data
    )
    return report


def read_reports(config: pytest.Config, path: Path) -> list[pytest.TestReport]:
    """The reports a spawned rank wrote to ``path``; none where it wrote none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [deserialize(config, d) for d in data]
