"""Verdicts of head against base (``--hpml-against``): each metric judged on the pairs of
processes that measured both sides side by side (Note [Head against base]).

A sampled metric gives one ratio per pair, head's median over base's (in units of the
reference workload where that steadies the base side's processes, as in the stored-baseline
mode); the verdict rests on the spread of the pairs' log-ratios, a one-sample t test from
scipy, plus the threshold, and the change must show both raw and in reference units. A count
is compared exactly between the sides (the median of its processes' values, for a measured
value recorded with a tolerance).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..bench import metrics
from . import stats
from .judge import Judged, _both_show, busy, judge_count, judged


def judge_paired(
    record: Mapping[str, Any],
    pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
    threshold: float,
) -> stats.Comparison:
    """One metric of the working tree (``record``, for its kind) judged on its (head, base)
    records, one per pair of processes."""
    kind = metrics.kind_of(record)
    if kind is None:
        reason = f"unknown metric kind {record.get('kind')!r}: not judged"
        return stats.Comparison(stats.INCONCLUSIVE, reason=reason)
    if not kind.sampled:  # the same in every process, or a value with its tolerance
        if not pairs:
            return stats.Comparison(stats.INCONCLUSIVE, reason="the base side did not measure it")
        head, base = ({"value": stats.median([p[i]["value"] for p in pairs])} for i in (0, 1))
        return judge_count({**record, **head}, base, threshold)
    usable = [(h, b) for h, b in pairs if h.get("samples") and b.get("samples")]
    if len(usable) < 2:
        reason = f"{len(usable)} complete pair(s) of processes: at least 2 are needed"
        return stats.Comparison(stats.INCONCLUSIVE, reason=reason)
    head, base = [list(side) for side in zip(*usable)]
    tolerance = record.get("tolerance") if kind.judge == "ratio" else None
    if kind.judge == "ratio":  # a speed-up within one run: the reference cancels out of it
        chosen = Judged([r["samples"] for r in head], [r["samples"] for r in base], units=False)
    else:
        chosen = judged(head, base, metrics.per_second(record), "the base side's")
    ratios = [
        stats.median(h) / stats.median(b)
        for h, b in zip(chosen.current, chosen.stored)
        if h and b and stats.median(b) > 0
    ]
    result = stats.compare_pairs(
        ratios,
        threshold=tolerance or threshold,
        higher_is_worse=metrics.higher_is_worse(record),
    )
    raw = [stats.median(h["samples"]) / stats.median(b["samples"]) for h, b in usable]
    raw_change = math.exp(sum(map(math.log, raw)) / len(raw)) - 1 if min(raw) > 0 else None
    shown = dataclasses.replace(
        result,
        baseline=stats.median([s for r in base for s in r["samples"]]),
        current=stats.median([s for r in head for s in r["samples"]]),
        raw_change=raw_change if chosen.units else None,
        reason="; ".join(r for r in (result.reason, chosen.why_raw) if r),
    )
    if chosen.units and kind.judge != "ratio":
        shown = _both_show(shown, raw_change, ("in reference units", "raw"), tolerance or threshold)
    why = busy([*head, *base])
    if why:
        why = f"measured on a busy machine: {why}"
        shown = dataclasses.replace(shown, reason="; ".join(r for r in (shown.reason, why) if r))
    return shown
