"""The lines ``pytest-hpml bisect`` prints, one or more for each step of its search
(``run/bisect.py``)."""

from __future__ import annotations

from ..config.progress import plural
from ..model import Comparison
from ..run.bisect import Ended, Event, Judged, Started
from . import text


def describe(verdict: Comparison, unit: str) -> str:
    """A verdict against GOOD in one line: the values, the change, what moved."""
    said = text.describe(verdict, unit)
    return f"{said}; {verdict.reason}" if verdict.reason else said


def lines(event: Event) -> list[str]:
    """What the command prints for one step of the search."""
    if isinstance(event, Started):
        how = "exactly" if event.exact else "against it in pairs of processes"
        return [
            f"bisect: {plural(event.commits, 'commit')} after {event.good}, {event.metric} "
            f"judged {how}; about {plural(event.steps, 'step')}"
        ]
    if isinstance(event, Judged):
        verdict = event.verdict
        said = describe(verdict, event.unit)
        return [f"  {event.commit}: {event.metric} {verdict.verdict}, {said}"]
    return _ended(event)


def _ended(event: Ended) -> list[str]:
    took = f"{plural(event.runs, 'pytest run')}, {event.seconds:.0f} s"
    found, metric = event.found, event.metric
    if found is None:
        return [
            f"bisect: {metric} at {event.bad} is as at {event.good}: no commit changed it ({took})"
        ]
    return [
        f"first commit where {metric} changed: {found.commit.sha} {found.commit.subject}",
        f"  {metric} {found.verdict.verdict}: {describe(found.verdict, found.unit)}",
        f"bisect: {plural(event.commits, 'commit')} searched in {took}",
    ]
