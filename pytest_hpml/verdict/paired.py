"""Verdicts of head against base (``--hpml-against``): each metric judged on the pairs of
processes that measured both sides side by side (Note [Head against base]).

A time or rate gives one ratio per pair: the two processes measured it in turns, slice by
slice on one CPU, and the pair's ratio is the median over their slices of the ratio of each
slice's fastest sample (Note [Slices]), on the measuring thread's CPU clock where the work ran
on that thread (Note [Thread clock]). A speed-up measured within one run gives one ratio per
pair, of the processes' medians. The pairs that agree (Note [Split pairs]) are judged by a
one-sample t test on their log-ratios, plus the threshold. A count is compared exactly
between the sides (the median of its processes' values, for a measured value recorded with a
tolerance).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..bench import metrics
from ..bench.reruns import SLICE
from . import stats
from .judge import busy, has_free_cores, joined, judge_count, short_of_cores, with_states


def judge_paired(
    record: Mapping[str, Any],
    pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
    threshold: float,
    looks: int = 1,
) -> stats.Comparison:
    """One metric of the working tree (``record``, for its kind) judged on its (head, base)
    records, one per pair of processes; a test's level shared by ``looks`` (Note [Adaptive
    pairs])."""
    kind = metrics.kind_of(record)
    if kind is None:
        reason = f"unknown metric kind {record.get('kind')!r}: not judged"
        return stats.Comparison(stats.INCONCLUSIVE, reason=reason)
    if not kind.sampled:  # the same in every process, or a value with its tolerance
        if not pairs:
            return stats.Comparison(stats.INCONCLUSIVE, reason="the base side did not measure it")
        # the middle value itself (not a mean of two): an exact count stays a value it took
        head_count, base_count = (
            {"value": _middle([p[i]["value"] for p in pairs]), "detail": pairs[0][i].get("detail")}
            for i in (0, 1)
        )
        judged = judge_count({**record, **head_count}, base_count, threshold)
        return varying(judged, record, pairs)
    usable = [(h, b) for h, b in pairs if h.get("samples") and b.get("samples")]
    needed = record.get("cores") if kind.judge == "ratio" else None
    if needed:  # a speed-up over more cores, on the pairs that had them free
        free = [p for p in usable if all(has_free_cores(run, needed) for run in p)]
        if len(free) < 2 <= len(usable):
            reason = short_of_cores(needed, "the pairs", [run for p in usable for run in p])
            return stats.Comparison(stats.INCONCLUSIVE, reason=reason)
        usable = free
    if len(usable) < 2:
        reason = f"{len(usable)} complete pair(s) of processes: at least 2 are needed"
        return stats.Comparison(stats.INCONCLUSIVE, reason=reason)
    head, base = [list(side) for side in zip(*usable)]
    clock = "samples"
    pick: Callable[[Sequence[float]], float]
    tolerance: float | None
    if kind.judge == "ratio":  # a speed-up within one run, paired by round: its median
        pick, tolerance = stats.median, record.get("tolerance")
    else:  # the fastest sample of each slice (Note [Slices])
        pick, tolerance = (max if metrics.per_second(record) else min), None
        if all(_thread_bound(r) for r in (*head, *base)):
            clock = "cpu_samples"
    picked = [(pick(h[clock]), pick(b[clock])) for h, b in usable]
    worse = metrics.higher_is_worse(record)
    if kind.judge == "ratio":
        ratios = [h / b for h, b in picked if h > 0 and b > 0]
    else:  # each pair's ratio, slice against slice where both sides took turns in slices
        ratios = [r for r in (pair_ratio(h, b, clock, pick) for h, b in usable) if r > 0]
    agreeing, aside = stats.majority(ratios)
    result = stats.compare_pairs(
        agreeing, threshold=tolerance or threshold, higher_is_worse=worse, looks=looks
    )
    if aside:
        said = ", ".join(f"{r:.3g}x" for r in aside)
        reason = (
            f"{result.reason}; {len(aside)} of {len(ratios)} pairs set aside at {said}: their "
            "processes ran at another speed (Note [Split pairs])"
        )
        result = dataclasses.replace(result, reason=reason)
        if result.verdict in (stats.REGRESSED, stats.IMPROVED) and not stats.outvotes(
            agreeing, aside
        ):
            reason = (
                f"{result.reason}; {len(agreeing)} of {len(ratios)} pairs agree, too few over "
                f"the {len(aside)} set aside to settle a change (Note [Split pairs])"
            )
            result = dataclasses.replace(result, verdict=stats.INCONCLUSIVE, reason=reason)
    # each side as the geometric mean of its processes' values, the head's moved by the change
    # judged: so that current / baseline - 1 is that change
    kept = [(h, b) for h, b in picked if h > 0 and b > 0] or [(math.nan, math.nan)]
    baseline = stats.geometric_mean([b for _, b in kept])
    current = (
        baseline * (1 + result.change)
        if baseline is not None and result.change is not None
        else math.nan
    )
    sides = {
        name: tuple(float(f"{v:.6g}") for v in side)
        for name, side in zip(("head", "base"), zip(*picked))
    }
    rounded = tuple(float(f"{r:.4g}") for r in ratios)
    shown = dataclasses.replace(
        result, baseline=baseline, current=current, pairs=rounded, sides=sides
    )
    why = busy([*head, *base])
    notes = [shown.reason, THREAD_CLOCK if clock == "cpu_samples" else ""]
    notes.append(f"measured on a busy machine: {why}" if why else "")
    shown = dataclasses.replace(shown, reason=joined(*notes))
    return with_states(shown, {"base": base, "head": head})


def pair_ratio(
    head: Mapping[str, Any],
    base: Mapping[str, Any],
    clock: str = "samples",
    pick: Callable[[Sequence[float]], float] = min,
) -> float:
    """One pair's head-over-base ratio of a time or rate (Note [Slices]): the median over the
    slices the two processes took in turns of the ratio of their slices' ``pick`` (fastest
    sample, or highest rate), so that a spell or speed of the machine that one slice of each
    side shared cancels; where a side measured in one slice, the ratio of the processes'."""
    sliced = [_slice_values(record, clock, pick) for record in (head, base)]
    count = min(len(values) for values in sliced)
    if count >= 2:
        return math.exp(
            stats.median([math.log(h / b) for h, b in zip(*sliced) if h > 0 and b > 0] or [0.0])
        )
    high, low = (pick(record[clock]) for record in (head, base))
    return high / low if low > 0 else 0.0


def _slice_values(
    record: Mapping[str, Any], clock: str, pick: Callable[[Sequence[float]], float]
) -> list[float]:
    """``pick`` of each slice of a process's samples on ``clock``; one value for one slice."""
    values = record.get(clock) or []
    starts = [0, *(i for i in record.get("slices") or () if 0 < i < len(values))]
    bounds = [*starts, len(values)]
    return [pick(values[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]


def varying(
    result: stats.Comparison,
    record: Mapping[str, Any],
    pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
) -> stats.Comparison:
    """A count that differed between the processes of one side depends on the input, not the
    code alone, and a value measured and recorded within a tolerance moves with the machine: a
    difference between the sides within that spread passes (Note [Torch state])."""
    sides = [[p[i]["value"] for p in pairs] for i in (0, 1)]
    if all(len(set(values)) == 1 for values in sides):
        return result
    unit = f" {record['unit']}" if record.get("unit") else ""
    spread = "; ".join(
        f"{name} {_whole(min(values))} to {_whole(max(values))}{unit}"
        for name, values in zip(("head", "base"), sides)
    )
    cause = (
        "a measured value, it moves with the machine"
        if record.get("tolerance")
        else "it depends on the input, e.g. random data that no seed fixes"
    )
    reason = f"varies between the processes of a side ({spread}): {cause}"
    overlap = max(map(min, sides)) <= min(map(max, sides))
    if overlap and result.verdict in (stats.REGRESSED, stats.IMPROVED):
        return dataclasses.replace(result, verdict=stats.PASS, reason=reason)
    return dataclasses.replace(result, reason=joined(result.reason, reason))


def rule(processes: int, looks: Sequence[int], let_go: int = 0) -> str:
    """How a time is judged head against base, in words built from the values the judge uses,
    so that the text cannot drift from the code (``processes``: how many a side measured at
    most; ``looks``: the pairs after which they could stop; ``let_go``: how many passes
    stopped unsettled, which the cap would not have settled either)."""
    shared = (
        f"{stats.PAIR_ALPHA:.0%} shared by {len(looks)} looks (after {_listed(looks)} pairs: "
        f"{stats.PAIR_ALPHA / len(looks):.3g} each), one-sided"
        if len(looks) > 1
        else f"{stats.PAIR_ALPHA:.0%}, one-sided"
    )
    return (
        f"a pair's ratio is the median over the slices its two processes measured in turns on "
        f"one CPU ({SLICE:g} s each) of the ratio of their fastest samples (on the "
        f"measuring thread's CPU clock where it ran {THREAD_SHARE:.0%} of the time); the pairs "
        f"that agree (a group of more than half, where they fall {math.expm1(stats.SPLIT):.0%} "
        f"apart; a change counts where it holds {stats.OUTVOTE} more than the rest) are judged "
        f"by a t test on their log-ratios, a change beyond the threshold "
        f"counting where it puts it beyond chance at {shared}; up to {processes} pairs, a "
        "benchmark stopping at a look once its change is beyond the threshold so, or its "
        f"interval at {stats.PAIR_ALPHA:.0%} a side lies within it"
        + (
            f", or (a pass; {let_go} here) once its interval, narrowed as the cap's pairs would "
            "narrow it, still would not"
            if let_go
            else ""
        )
    )


def _listed(values: Sequence[int]) -> str:
    """3, 5 and 7."""
    words = [str(v) for v in values]
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else words[0]


# A process's work ran on its measuring thread when, in its least disturbed sample, that
# thread's CPU clock counted at least this share of the wall time (Note [Thread clock]).
THREAD_SHARE = 0.9
THREAD_CLOCK = "timed on the measuring thread's CPU clock"


def _thread_bound(record: Mapping[str, Any]) -> bool:
    """Whether ``record``'s process did its work on the measuring thread, so that the thread's
    CPU times stand for it (Note [Thread clock])."""
    wall, cpu = record.get("samples") or [], record.get("cpu_samples") or []
    if not cpu or len(cpu) != len(wall):
        return False
    if metrics.per_second(record):  # a rate: work per second, on each clock
        wall, cpu = cpu, wall
    return max((c / w for w, c in zip(wall, cpu) if w > 0), default=0.0) >= THREAD_SHARE


def _whole(value: float) -> str:
    """A count in full (1,652,900), another value to 4 digits."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.4g}"


def _middle(values: list[float]) -> float:
    return sorted(values)[(len(values) - 1) // 2]
