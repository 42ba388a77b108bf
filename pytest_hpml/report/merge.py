"""``pytest-hpml merge``: the JSON reports of a suite's shards as one report and one verdict.

A suite split over CI jobs (a matrix by ``-k`` or by files, pytest-xdist within each) writes a
report per job, and each job judged its metrics together with its own only: the session-wide
control (Note [Many metrics]) counted one shard's tested metrics, not the suite's. The merge
takes every verdict back to what its test's run found (``policy.uncontrolled``) and takes the
session-wide steps again over all of them, as one unsharded session would have (Note [Sharded
runs]).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..model import Result, results_of
from ..storage.writer import now
from ..verdict import policy, stats
from ..verdict.baselines import BaselineError
from . import text

Report = tuple[Path, dict[str, Any]]  # a report's path and what it holds


class Unmergeable(BaselineError):
    """Reports that are not shards of one run: of different machines, commits, baselines or
    modes, given twice, or with a test that two of them judged differently."""


# What the shards of one run share: where it is in a report (keys), and what it is called.
SHARED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("commit",), "commit"),
    (("baseline_mode",), "baseline mode (--hpml-baseline)"),
    (("counters",), "counter policy (--hpml-counters)"),
    (("against", "revision"), "revision judged against (--hpml-against)"),
    (("against", "base"), "base commit"),
    (("against", "head"), "head commit"),
    (("instructions", "counted_on"), "instruction counting (--hpml-instructions)"),
)
# What shards judged against stored baselines share besides: those are per machine. Shards
# judged against a revision each measured both sides on their own runner: any runner will do.
SHARED_STORED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("fingerprint", "id"), "machine id"),
    (("fingerprint", "name"), "machine name"),
    (("baseline_dir",), "baseline directory"),
)


def merge(reports: Sequence[Report]) -> tuple[dict[str, Any], int]:
    """One report of the shards' ``reports`` (at least one), judged as one session; and how
    many results were in more than one report (kept once: they agree). An
    :class:`Unmergeable` says why the reports cannot be merged."""
    for path, document in reports:
        if not isinstance(document.get("control"), dict) or document.get("counters") is None:
            raise Unmergeable(
                f"{path} was written by an earlier pytest-hpml: it lacks the verdicts before "
                "the session-wide control; run its job again with this version"
            )
    (first_path, first), *others = reports
    for path, document in others:
        _check_shared((first_path, first), (path, document))
    results, repeated = _results(reports)
    demoted = tested = 0
    if first["baseline_mode"] == "compare" or first.get("against"):  # as the session judges
        strict = first["counters"] == "strict"
        demoted, tested = policy.control(results, strict, bool(first.get("against")))
    documents = [document for _, document in reports]
    merged = {
        **{key: first.get(key) for key in ("format", "commit", "fingerprint", "counters")},
        **{key: first.get(key) for key in ("baseline_mode", "baseline_dir")},
        "created": now(),
        "results": [result.to_dict() for result in results],
        "counts": text.counts(results),
        "errors": _unique(e for d in documents for e in d.get("errors") or ()),
        "against": _against([d["against"] for d in documents]),
        "instructions": _instructions([d["instructions"] for d in documents]),
        "control": {"tested": tested, "demoted": demoted},
        "shards": [_shard(path, document) for path, document in reports],
    }
    return merged, repeated


def failing(document: dict[str, Any]) -> bool:
    """Whether a run with this report fails, as the session decides it (``Verdicts.failing``):
    on any error, or on a regression where it judged."""
    judging = document.get("baseline_mode") == "compare" or bool(document.get("against"))
    regressed = any(
        v["verdict"] == stats.REGRESSED for r in document["results"] for v in r["verdicts"].values()
    )
    return bool(document.get("errors")) or (judging and regressed)


def _check_shared(first: Report, other: Report) -> None:
    """Refuse ``other`` where it differs from ``first`` in what shards of one run share."""
    shared = SHARED if first[1].get("against") else SHARED + SHARED_STORED
    for keys, what in shared:
        mine, theirs = (_at(document, keys) for _, document in (first, other))
        if mine != theirs:
            raise Unmergeable(
                f"{other[0]} and {first[0]} are not shards of one run: their {what} differs "
                f"({_said(theirs)} in {other[0]}, {_said(mine)} in {first[0]})"
            )


def _at(document: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """The value at ``keys`` in ``document``, or None where a part is missing or null."""
    found: Any = document
    for key in keys:
        found = found.get(key) if isinstance(found, dict) else None
    return found


def _said(value: Any) -> str:
    return "none" if value is None else repr(value)


def _results(reports: Sequence[Report]) -> tuple[list[Result], int]:
    """Every report's results, each verdict as its test's run found it; a test in several
    reports once, where they agree (its first), else :class:`Unmergeable`."""
    kept: dict[str, tuple[Path, Result]] = {}
    repeated = 0
    for path, document in reports:
        for result in results_of(document):
            result.verdicts = {n: policy.uncontrolled(v) for n, v in result.verdicts.items()}
            found = (path, result)
            earlier = kept.setdefault(result.test, found)
            if earlier is not found:
                _check_agree(result.test, earlier, found)
                repeated += 1
    return [result for _, result in kept.values()], repeated


def _check_agree(test: str, earlier: tuple[Path, Result], later: tuple[Path, Result]) -> None:
    """A test in two reports (shards that overlap) must have been judged alike in both."""
    (one, mine), (two, theirs) = earlier, later
    for name in sorted(mine.verdicts.keys() | theirs.verdicts.keys()):
        said = [_verdict_of(r, name) for r in (mine, theirs)]
        if said[0] != said[1]:
            raise Unmergeable(
                f"{test} is in {one} and {two}, judged differently: its {name} is {said[0]} in "
                f"{one}, {said[1]} in {two}; run it in one shard only"
            )


def _verdict_of(result: Result, name: str) -> str:
    found = result.verdicts.get(name)
    return "not measured" if found is None else found.verdict


def _unique(values: Iterable[Any]) -> list[Any]:
    """``values`` in their order, each once."""
    return list(dict.fromkeys(values))


def _against(blocks: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The shards' ``against`` blocks as one: the sides (the same in each), the fewest pairs
    any shard's verdicts rest on, the time they all took, what failed or was removed."""
    if blocks[0] is None:
        return None
    found: list[dict[str, Any]] = [b for b in blocks if b is not None]
    return {
        **found[0],
        "pairs": min(b.get("pairs") or 0 for b in found),
        "seconds": _total(b.get("seconds") for b in found),
        "base_failed": _joined(b.get("base_failed") for b in found),
        "removed": sorted(_unique(t for b in found for t in b.get("removed") or ())),
        "notes": _unique(n for b in found for n in b.get("notes") or ()),
    }


def _instructions(blocks: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The shards' ``instructions`` blocks (--hpml-instructions) as one."""
    if blocks[0] is None:
        return None
    found: list[dict[str, Any]] = [b for b in blocks if b is not None]
    failed: dict[str, dict[str, str]] = {}
    for block in found:
        for side, tests in (block.get("failed") or {}).items():
            failed.setdefault(side, {}).update(tests)
    return {
        **found[0],
        "benchmarks": sum(b.get("benchmarks") or 0 for b in found),
        "left_out": sum(b.get("left_out") or 0 for b in found),
        "seconds": _total(b.get("seconds") for b in found),
        "counting_seconds": _joined(b.get("counting_seconds") for b in found),
        "failed": failed,
        "uncounted": _joined(b.get("uncounted") for b in found),
        "notes": _unique(n for b in found for n in b.get("notes") or ()),
    }


def _total(values: Iterable[float | None]) -> float | None:
    """The sum of ``values``, None if one is unknown."""
    found = list(values)
    return None if None in found else round(sum(found), 1)  # type: ignore[arg-type]


def _joined(mappings: Iterable[dict[str, Any] | None]) -> dict[str, Any]:
    joined: dict[str, Any] = {}
    for mapping in mappings:
        joined.update(mapping or {})
    return joined


def _shard(path: Path, document: dict[str, Any]) -> dict[str, Any]:
    """What the merged report says of one shard's report."""
    return {
        "report": str(path),
        "created": document.get("created"),
        "machine": _at(document, ("fingerprint", "name")),
        "machine_id": _at(document, ("fingerprint", "id")),
        "tests": len(document["results"]),
        "tested": document["control"].get("tested"),
        "demoted": document["control"].get("demoted"),
    }
