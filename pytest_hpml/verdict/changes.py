"""Change points: the commits where a metric's history stepped, each with its size and the
confidence that it is no accident of the noise (Note [Change points]).

Candidates come from ruptures' Pelt (an exact segmentation under a penalty per step) on the
log-values, scaled by the series' own noise; each is kept only if a permutation test of the
segment around it, on ranks, is confident that the segment holds a step, and the step is at
least ``min_change``; then it is placed where the absolute deviations are least. numpy and
ruptures are imported inside the functions: the plugin never needs them (the ``history`` extra
installs ruptures).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import stats

# Confidence a step needs to be shown: 1 - the permutation test's p-value.
CONFIDENCE = 0.99
PERMUTATIONS = 9_999  # the smallest p-value is 1 / (PERMUTATIONS + 1)
# Fewest points on either side of a step: one point alone is an outlier, not a step, so a
# step is found once a second commit after it has been measured.
MIN_SEGMENT = 2
# Pelt's penalty per step, in units of the noise's variance: BIC's 2 ln(n) for a shift in the
# mean at an unknown place, made 1.5 times stricter (the test below has the final word).
PENALTY = 3.0
# Noise below this (in log units, 0.5%) is taken as this: a count's history has none, and a
# step of one part in a million is no step worth a look.
NOISE_FLOOR = 0.005
INSTALL_HINT = "pip install ruptures (pytest-hpml's 'history' extra)"


class MissingLibrary(ImportError):
    """ruptures is not installed; the message says how to install it."""


@dataclass(frozen=True)
class Step:
    """A step of a series: between points ``index - 1`` and ``index``."""

    index: int  # the first point after the step
    before: float  # the median of the points since the previous step
    after: float  # the median of the points up to the next step
    confidence: float  # 1 - p of the permutation test of the segment around it

    @property
    def change(self) -> float:
        """The relative change, ``after / before - 1`` (infinite from 0)."""
        if self.before == 0:
            return 0.0 if self.after == 0 else math.copysign(math.inf, self.after)
        return self.after / self.before - 1


def steps(
    values: Sequence[float],
    *,
    counted: bool,
    min_change: float = 0.0,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> list[Step]:
    """The steps of ``values`` (one per commit, in commit order), first to last.

    ``counted``: the values are counts (0 allowed: the log of ``1 + value`` is taken), else
    positive measurements (times, rates). A step smaller than ``min_change`` (relative) or
    less confident than ``confidence`` is not one."""
    if len(values) < 2 * MIN_SEGMENT:
        return []
    logs = [math.log1p(v) if counted else math.log(v) for v in values]
    cuts = _candidates(logs)
    while True:
        found = [_step(values, logs, cuts, i, counted, seed) for i in range(len(cuts))]
        weak = [
            (s.confidence, abs(s.change), i)
            for i, s in enumerate(found)
            if s.confidence < confidence or abs(s.change) < min_change
        ]
        if not weak:
            return [_placed(values, logs, cuts, i, counted, seed) for i in range(len(cuts))]
        del cuts[min(weak)[2]]  # the weakest goes; its neighbours are tested again without it


def noise(logs: Sequence[float]) -> float:
    """The series' noise in log units, from its successive differences (median absolute
    deviation): a few steps barely move it, as they would the standard deviation."""
    differences = [b - a for a, b in zip(logs, logs[1:])]
    mad = stats.median([abs(d - stats.median(differences)) for d in differences])
    return max(1.4826 * mad / math.sqrt(2), NOISE_FLOOR)


def _candidates(logs: Sequence[float]) -> list[int]:
    """Where Pelt places steps in the series, scaled to unit noise."""
    try:
        import numpy
        import ruptures
    except ImportError:
        raise MissingLibrary(f"finding steps needs ruptures: {INSTALL_HINT}") from None
    scaled = numpy.asarray(logs, dtype=float).reshape(-1, 1) / noise(logs)
    found = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(scaled)
    return list(found.predict(pen=PENALTY * math.log(len(logs))))[:-1]  # the last is the end


def _neighbours(cuts: list[int], i: int, count: int) -> tuple[int, int]:
    """The segment around step ``i`` of ``cuts``: from the step before it (or the first of
    ``count`` values) to the step after it (or the end)."""
    return (cuts[i - 1] if i else 0), (cuts[i + 1] if i + 1 < len(cuts) else count)


def _step(
    values: Sequence[float],
    logs: Sequence[float],
    cuts: list[int],
    i: int,
    counted: bool,
    seed: int,
) -> Step:
    """Step ``i`` of ``cuts``, tested on the segment between its neighbouring steps. A count
    that holds one value before and another after stepped for certain: nothing but the code
    moves a count, and a permutation test of a few commits could not say more than 1 in the
    number of ways to order them."""
    low, high = _neighbours(cuts, i, len(values))
    cut = cuts[i]
    before, after = list(values[low:cut]), list(values[cut:high])
    exact = counted and len(set(before)) == 1 and len(set(after)) == 1 and before != after
    return Step(
        index=cut,
        before=stats.median(before),
        after=stats.median(after),
        confidence=1.0 if exact else 1 - permutation_p(logs[low:high], seed),
    )


def _placed(
    values: Sequence[float],
    logs: Sequence[float],
    cuts: list[int],
    i: int,
    counted: bool,
    seed: int,
) -> Step:
    """Step ``i`` of ``cuts`` placed where the absolute deviations from the two sides'
    medians are least, between its neighbours: Pelt's squared error moves a step by a commit
    or two towards an outlier beside it; the absolute deviations hardly do."""
    low, high = _neighbours(cuts, i, len(values))

    def cost(cut: int) -> float:
        return _deviation(logs[low:cut]) + _deviation(logs[cut:high])

    best = min(range(low + MIN_SEGMENT, high - MIN_SEGMENT + 1), key=lambda c: (cost(c), c))
    placed = [*cuts[:i], best, *cuts[i + 1 :]]
    return _step(values, logs, placed, i, counted, seed)


def _deviation(points: Sequence[float]) -> float:
    middle = stats.median(list(points))
    return sum(abs(p - middle) for p in points)


def permutation_p(segment: Sequence[float], seed: int = 0) -> float:
    """The p-value of "``segment`` holds no step": how often the points, shuffled, show a
    step as large as they do in order. The statistic is the largest standardized difference
    of mean ranks over every place a step of at least MIN_SEGMENT points a side could be
    (E-Divisive tests the same way), so where the step lies is part of what is tested, and an
    outlier is one rank however far out it lies."""
    import numpy
    from scipy.stats import rankdata

    ranks = rankdata(numpy.asarray(segment, dtype=float))
    rng = numpy.random.default_rng(seed)
    shuffled = rng.permuted(numpy.tile(ranks, (PERMUTATIONS, 1)), axis=1)
    observed = _largest_split(ranks[None, :])[0]
    larger = int(numpy.count_nonzero(_largest_split(shuffled) >= observed - 1e-9))
    return (1 + larger) / (1 + PERMUTATIONS)


def _largest_split(rows: Any) -> Any:
    """For each row, the largest of :func:`_splits`."""
    return _splits(rows).max(axis=1)


def _splits(rows: Any) -> Any:
    """For each row and each place that leaves at least MIN_SEGMENT points a side, from the
    first: |mean before - mean after| * sqrt(a b / n)."""
    import numpy

    n = rows.shape[1]
    before = numpy.arange(MIN_SEGMENT, n - MIN_SEGMENT + 1)
    sums = numpy.cumsum(rows, axis=1)[:, before - 1]
    total = rows.sum(axis=1, keepdims=True)
    after = n - before
    gap = sums / before - (total - sums) / after
    return numpy.abs(gap * numpy.sqrt(before * after / n))
