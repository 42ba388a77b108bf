"""Statistics behind the verdicts: a rank test on the samples plus a minimum effect size, and a
t test one level up, on the medians of the processes.

The tests are scipy's, imported only when a verdict is computed (never at plugin start-up):
the plugin loads into every pytest run.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

PASS = "pass"
REGRESSED = "regressed"
IMPROVED = "improved"
NO_BASELINE = "no-baseline"
INCONCLUSIVE = "inconclusive"
RECORDED = "recorded"  # --hpml-baseline=update/append: measured and stored, not judged
NEW = "new"  # --hpml-against: a benchmark the base revision does not have
# a work counter grown within what its class may grow without failing (Note [Counter policy])
CHANGED = "changed"
ACCEPTED = "accepted"  # grown within what the change accepts (benchmark.expect_change)
VERDICTS = (PASS, REGRESSED, IMPROVED, NO_BASELINE, INCONCLUSIVE, RECORDED, NEW, CHANGED, ACCEPTED)

MIN_SAMPLES = 5
ALPHA = 0.01


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        raise ValueError("median of no values")
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def geometric_mean(values: Sequence[float]) -> float | None:
    """The geometric mean of positive ``values``; None where one is not (nan: no pair both
    sides measured)."""
    if any(not v > 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile, ``q`` in [0, 1]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation, scaled to estimate a normal standard deviation."""
    center = median(values)
    return 1.4826 * median([abs(v - center) for v in values])


def mann_whitney_greater(current: Sequence[float], baseline: Sequence[float]) -> float:
    """One-sided p-value that ``current`` tends to be larger than ``baseline``: scipy's
    Mann-Whitney U, exact for small samples without ties, else the normal approximation with
    tie and continuity corrections."""
    from scipy.stats import mannwhitneyu  # only when a verdict is computed

    return float(mannwhitneyu(current, baseline, alternative="greater", method="auto").pvalue)


# The test between process medians is one-sided at 5%, not the rank test's 1%: it is a second
# gate, after the threshold and the rank test (Note [Processes]).
PROCESS_ALPHA = 0.05


def t95(df: int) -> float:
    """The one-sided 95% quantile of Student's t with ``df`` >= 1 degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(1 - PROCESS_ALPHA, df))


def process_resolution(current: Sequence[float], baseline: Sequence[float]) -> float | None:
    """The smallest relative change that the per-process medians can tell from the spread
    between processes (a pooled-variance t test on their logs, one-sided at 5%); None with too few
    processes to estimate that spread (fewer than 3 in all, or one a side). Note [Processes]."""
    if len(current) < 1 or len(baseline) < 1 or len(current) + len(baseline) < 3:
        return None
    if min(*current, *baseline) <= 0:
        return None
    logs = [[math.log(v) for v in side] for side in (current, baseline)]
    squares = sum((x - sum(side) / len(side)) ** 2 for side in logs for x in side)
    df = len(current) + len(baseline) - 2
    sd = math.sqrt(squares / df)
    return math.expm1(t95(df) * sd * math.sqrt(1 / len(current) + 1 / len(baseline)))


def normalize(
    samples: Sequence[float], reference: Sequence[float], per_second: bool = False
) -> list[float]:
    """Express each sample in units of the reference time measured just before its round.

    Each round is paired with its own reference (Note [Reference workload]); when rounds and
    references do not pair up, the run's median reference is the unit. ``per_second`` metrics
    (rates) are multiplied instead.
    """
    if not reference:
        return list(samples)
    units = reference if len(reference) == len(samples) else [median(reference)] * len(samples)
    if per_second:
        return [s * u for s, u in zip(samples, units)]
    return [s / u for s, u in zip(samples, units)]


@dataclass(frozen=True)
class Comparison:
    """The verdict on one metric, with what it rests on."""

    verdict: str
    baseline: float | None = None
    current: float | None = None
    change: float | None = None  # relative: +0.15 means 15% higher than the baseline
    confidence: float | None = None  # 1 - p of the one-sided test in the direction of change
    threshold: float | None = None
    reason: str = ""
    raw_change: float | None = None  # before normalization by the reference, when it applies
    pairs: tuple[float, ...] | None = None  # --hpml-against: head/base ratio of each pair
    sides: dict[str, tuple[float, ...]] | None = None  # --hpml-against: each process's value
    # torch's state each side measured in, its distinct ones (Note [Torch state])
    states: dict[str, list[dict[str, Any]]] | None = None
    # --hpml-against: the change's interval at the level of one look (Note [Adaptive pairs])
    interval: tuple[float, float] | None = None
    # --hpml-against: the degrees of freedom of the t test behind ``interval``
    degrees: float | None = None


def compare_samples(
    current: Sequence[float],
    baseline: Sequence[float],
    *,
    threshold: float,
    higher_is_worse: bool = True,
    alpha: float = ALPHA,
    processes: tuple[Sequence[float], Sequence[float]] | None = None,
) -> Comparison:
    """Judge the samples of a metric against the baseline's: in units of the reference workload
    or raw, as the caller chose (Note [Raw or reference units]).

    A change counts only when the rank test is significant at ``alpha`` *and* the medians differ
    by more than ``threshold`` (relative): with hundreds of samples any drift is "significant",
    so the effect size carries the decision and the test guards against chance on few samples.

    ``processes``, the medians of each process run (current, baseline), adds a test one level
    up: samples of one process share its speed, so the rank test on pooled samples overstates
    what they show when processes differ. A change within what the spread between processes
    allows (:func:`process_resolution`) is inconclusive, however significant its samples.
    """
    if not baseline:
        return Comparison(NO_BASELINE, current=median(current) if current else None)
    base, cur = median(baseline), median(current) if current else None
    if len(current) < MIN_SAMPLES or len(baseline) < MIN_SAMPLES:
        reason = (
            f"too few samples ({len(current)} now, {len(baseline)} in the baseline, "
            f"need {MIN_SAMPLES})"
        )
        return Comparison(INCONCLUSIVE, base, cur, None, None, threshold, reason)
    if base <= 0:  # no relative change from it
        reason = f"the baseline's median is {base:g}: no relative change from it"
        return Comparison(INCONCLUSIVE, base, cur, None, None, threshold, reason)
    change = cur / base - 1
    p_up = mann_whitney_greater(current, baseline)
    p_down = mann_whitney_greater(baseline, current)
    worse, p_worse = (change > 0, p_up) if higher_is_worse else (change < 0, p_down)
    better, p_better = (change < 0, p_down) if higher_is_worse else (change > 0, p_up)
    confidence = 1 - min(p_up, p_down)
    if abs(change) <= threshold:
        return Comparison(PASS, base, cur, change, confidence, threshold)
    resolution = process_resolution(*processes) if processes else None
    if resolution is not None and change < 0:
        # The t test is on logs: a fall is resolved as far as the rise it mirrors, 1 - 1/(1 + r)
        # (otherwise a rate falling 17% would pass as "within the spread" where the same runs'
        # time, 21% higher, is a regression).
        resolution /= 1 + resolution
    if resolution is not None and abs(change) <= resolution:
        reason = (
            f"change above the threshold but within the spread between processes: "
            f"{len(processes[0])} and {len(processes[1])} processes resolve {resolution:.1%}"
        )
    elif worse and p_worse < alpha:
        return Comparison(REGRESSED, base, cur, change, 1 - p_worse, threshold)
    elif better and p_better < alpha:
        return Comparison(IMPROVED, base, cur, change, 1 - p_better, threshold)
    else:
        reason = "change above the threshold but not significant: samples too noisy"
    return Comparison(INCONCLUSIVE, base, cur, change, confidence, threshold, reason)


# The pairs' test is one-sided at 5%: with 5 pairs, a t test at 1% would need a 15% change to
# stand 4.7 standard errors clear of noise. The threshold carries the decision on a quiet
# machine, and the session-wide control (Note [Many metrics]) covers many metrics.
PAIR_ALPHA = 0.05


def compare_pairs(
    ratios: Sequence[float],
    *,
    threshold: float,
    higher_is_worse: bool = True,
    alpha: float = PAIR_ALPHA,
    looks: int = 1,
    trim: float = 0.0,
) -> Comparison:
    """Judge head against base on the ratios of their medians, one per pair of processes
    measured side by side (Note [Head against base]).

    The change is the geometric mean of the ratios; it counts when it exceeds ``threshold``
    and a one-sample t test on the log-ratios puts it beyond chance at ``alpha`` shared by
    ``looks`` (Note [Adaptive pairs]), one-sided. With ``trim``, the share of the pairs set
    aside at each end, it is Yuen's trimmed t test (Note [Steady pairs]): the change is the
    trimmed mean's, and the spread is the winsorized one, so that the pairs set aside still
    widen the interval. The reason gives the pairs and the confidence interval at that level.
    """
    per_look = alpha / looks
    logs = sorted(math.log(r) for r in ratios if r > 0)
    if len(logs) < 2:
        reason = f"{len(logs)} usable pair(s) of processes: at least 2 are needed"
        return Comparison(INCONCLUSIVE, threshold=threshold, reason=reason)
    from scipy.stats import t  # only when a verdict is computed

    cut = trimmed(len(logs), trim)
    kept = logs[cut : len(logs) - cut]
    mean = sum(kept) / len(kept)
    change = math.expm1(mean)
    error = _trimmed_error(logs, cut)
    degrees = len(kept) - 1
    if error == 0:  # every pair kept agrees exactly
        p_up, p_down = (0.0, 1.0) if mean > 0 else (1.0, 0.0) if mean < 0 else (1.0, 1.0)
    else:
        p_up, p_down = float(t.sf(mean / error, degrees)), float(t.cdf(mean / error, degrees))
    p_up, p_down = min(1.0, looks * p_up), min(1.0, looks * p_down)  # the looks' share
    half = float(t.ppf(1 - per_look, degrees)) * error
    low, high = math.expm1(mean - half), math.expm1(mean + half)
    level = _level(per_look)
    judged = f"{len(logs)} pairs" + (
        f" ({cut} lowest and {cut} highest set aside, their spread kept: Yuen's trimmed t test)"
        if cut
        else ""
    )
    reason = f"{judged}: {change:+.1%}, {level} interval {low:+.1%} to {high:+.1%}"
    worse, p_worse = (change > 0, p_up) if higher_is_worse else (change < 0, p_down)
    better, p_better = (change < 0, p_down) if higher_is_worse else (change > 0, p_up)
    confidence = 1 - min(p_up, p_down)
    verdict = PASS
    if abs(change) > threshold:
        if worse and p_worse < alpha:
            verdict, confidence = REGRESSED, 1 - p_worse
        elif better and p_better < alpha:
            verdict, confidence = IMPROVED, 1 - p_better
        else:
            verdict = INCONCLUSIVE
            reason += "; change above the threshold but the pairs disagree"
    ratios = tuple(float(f"{r:.4g}") for r in ratios)
    if not higher_is_worse:  # as the metric goes: a rate's interval, from its ratios'
        low, high = -high / (1 + high), -low / (1 + low)
    return Comparison(
        verdict,
        None,
        None,
        change,
        confidence,
        threshold,
        reason,
        pairs=ratios,
        interval=(low, high),
        degrees=degrees,
    )


def trimmed(count: int, trim: float) -> int:
    """How many of ``count`` values a trim of ``trim`` sets aside at each end: the whole part
    of its share, as scipy's ``trim_mean`` cuts."""
    return int(trim * count)


def _trimmed_error(ordered: Sequence[float], cut: int) -> float:
    """The standard error of the mean of ``ordered`` without its ``cut`` lowest and highest,
    as Yuen's test takes it (scipy's ``ttest_ind`` with ``trim``, for one sample): from the
    winsorized variance, those values moved in to the nearest kept one. Without a cut, the
    plain standard error of the mean."""
    low, high = ordered[cut], ordered[len(ordered) - 1 - cut]
    winsorized = [min(max(value, low), high) for value in ordered]
    count, kept = len(ordered), len(ordered) - 2 * cut
    mean = sum(winsorized) / count
    squares = sum((w - mean) ** 2 for w in winsorized)  # (count - 1) times the variance
    return math.sqrt(squares / (kept * (kept - 1)))


def import_ahead() -> None:
    """Import scipy's statistics now, once the first pair of head against base has started
    and before its first turn: its processes are still importing and warming up (nothing
    measures), and the first look, after 3 pairs, would otherwise wait for the import, about
    0.7 s, between two pairs (Note [Cheaper processes]). Not in a thread: two threads importing
    numpy at once may see it half initialized."""
    with contextlib.suppress(ImportError):  # said where a verdict needs it
        import scipy.stats  # noqa: F401


def _level(alpha: float) -> str:
    """The two-sided confidence level that matches a one-sided test at ``alpha``: 90%, 97.5%."""
    return f"{100 * (1 - 2 * alpha):.4g}%"


def settled(result: Comparison) -> bool:
    """Whether more pairs of processes could still change ``result`` (Note [Adaptive pairs]):
    not when it is a regression or an improvement, nor a pass whose interval lies within the
    threshold on both sides."""
    if result.verdict in (REGRESSED, IMPROVED):
        return True
    if result.verdict != PASS or result.interval is None or result.threshold is None:
        return False
    return _within(result.interval, result.threshold)


def hopeless(result: Comparison, done: int, cap: int, looks: int) -> bool:
    """Whether a pass that is not settled after ``done`` pairs (its level shared by
    ``looks``) would still not be at ``cap`` pairs, were its change to stay where it is, and
    could not become a regression then either: its change lies within the threshold (the
    sides' best, the middle pair and the interval's centre alike), and its interval, narrowed
    as ``cap`` pairs would narrow it, still reaches beyond (Note [Adaptive pairs],
    futility)."""
    # a settled pass needs no test: its narrowed interval fits where its interval did
    if result.verdict != PASS or done >= cap:
        return False
    if result.interval is None or result.threshold is None or (result.degrees or 0) < 2:
        return False  # an interval on under 2 degrees of freedom says little of its centre
    # the sides' best, and the middle pair of processes (Note [Split processes]), well within
    # it: a change near the threshold may be a larger one the first pairs caught low
    middle_pair = median([r - 1 for r in result.pairs]) if result.pairs else 0.0
    room = FUTILE_SHARE * result.threshold
    if max(abs(result.change or 0.0), abs(middle_pair)) > room:
        return False
    from scipy.stats import t  # only when a verdict is computed

    low, high = (math.log1p(bound) for bound in result.interval)
    middle, level = (low + high) / 2, 1 - PAIR_ALPHA / looks
    if abs(math.expm1(middle)) > room:
        return False
    # the standard error falls as the square root of the pairs; the degrees of freedom grow
    # with them (Welch's about in proportion)
    error = (high - low) / 2 / float(t.ppf(level, result.degrees))
    grown = result.degrees * cap / done
    half = error * math.sqrt(done / cap) * float(t.ppf(level, grown))
    return not _within((math.expm1(middle - half), math.expm1(middle + half)), result.threshold)


# A pass is let go as hopeless only where its change lies within this share of the threshold
# (Note [Adaptive pairs], futility).
FUTILE_SHARE = 0.5


def _within(interval: tuple[float, float] | list[float], threshold: float) -> bool:
    """Whether a change's interval lies within the threshold on both sides."""
    low, high = interval
    return -threshold < low and high < threshold


def quiet(verdict: dict[str, Any]) -> bool:
    """Whether a judged metric (a :class:`Comparison` as a dict) shows no change a count of
    instructions could add to (Note [Changed benchmarks]): a pass, settled where it has an
    interval (head against base)."""
    if verdict.get("verdict") != PASS:
        return False
    if verdict.get("interval") is None or verdict.get("threshold") is None:
        return True
    return _within(verdict["interval"], verdict["threshold"])


def looks(cap: int) -> tuple[int, ...]:
    """The numbers of pairs after which head against base judges whether to measure more: 3,
    then every second pair up to ``cap`` (Note [Adaptive pairs])."""
    first = min(FIRST_LOOK, cap)
    return tuple(sorted({first, *range(first, cap, LOOK_EVERY), cap}))


FIRST_LOOK = 3  # pairs: 2 a side is the least a t test takes, and a third outvotes a split
LOOK_EVERY = 2  # pairs: each look adds one base and one head process to every order


# A process whose fastest sample lies within this factor of its side's fastest is steady; one
# further off ran through a slow spell of the host (Note [Steady processes]).
STEADY = 1.10
# Welch's test on the steady processes needs this many a side (all of them, with fewer); with
# fewer, the pairs judge (Note [Steady pairs]): the host changed speed while they ran.
STEADY_LEAST = 3
# The share of the pairs set aside at each end where the pairs judge (Note [Steady pairs]): 1 of
# 5 or 7, a pair whose processes ran at two speeds; none of 3, whose t test widens instead.
PAIR_TRIM = 0.2


def compare_sides(
    head: Sequence[float],
    base: Sequence[float],
    *,
    threshold: float,
    higher_is_worse: bool = True,
    alpha: float = PAIR_ALPHA,
    looks: int = 1,
) -> Comparison:
    """Judge head against base on one value per process of each side: its fastest sample, or
    for a rate its highest (Note [Steady processes]); ``alpha`` is shared by ``looks`` (Note
    [Adaptive pairs]).

    The noise of a shared machine only ever slows a process, so the change is the ratio of
    the two sides' best values. It counts when it exceeds ``threshold`` and Welch's t test
    (scipy's ``ttest_ind``) on the log-values of each side's steady processes puts the
    difference beyond chance at ``alpha``, one-sided.
    """
    costs = [[v if higher_is_worse else 1 / v for v in side if v > 0] for side in (head, base)]
    if min(len(c) for c in costs) < 2:
        reason = "fewer than 2 processes of a side measured it"
        return Comparison(INCONCLUSIVE, threshold=threshold, reason=reason)
    steady = [[math.log(c) for c in side if c <= STEADY * min(side)] for side in costs]
    best = [min(side) for side in costs]
    change = best[0] / best[1] - 1 if higher_is_worse else best[1] / best[0] - 1
    counts = f"steady processes: head {len(steady[0])}, base {len(steady[1])}"
    # the processes differ more than spells explain, or the host changed speed while they ran
    if min(len(s) for s in steady) < min(STEADY_LEAST, *map(len, costs)):
        return _steady_pairs(head, base, counts, threshold, higher_is_worse, alpha, looks)
    per_look = alpha / looks
    p_slower, low, high, degrees = _welch(*steady, per_look)
    reason = (
        f"{len(head)} pairs: {change:+.1%} (fastest of each side); {counts}, their means "
        f"{math.expm1(low):+.1%} to {math.expm1(high):+.1%} ({_level(per_look)} interval)"
    )
    # as the metric goes: a time's change of the means, or a rate's (the costs' inverse)
    interval = (
        (math.expm1(low), math.expm1(high))
        if higher_is_worse
        else (math.expm1(-high), math.expm1(-low))
    )
    slower = best[0] > best[1]  # in cost: the head's best took longer
    p_worse = min(1.0, looks * (p_slower if slower else 1 - p_slower))  # the looks' share
    confidence, verdict = 1 - min(1.0, looks * min(p_slower, 1 - p_slower)), PASS
    if abs(change) > threshold:
        split = _split(costs, change, threshold, higher_is_worse)
        if split:  # the best processes say one thing, most pairs another
            verdict, confidence = INCONCLUSIVE, None
            reason += f"; {split}"
        elif p_worse < alpha:
            verdict, confidence = (REGRESSED if slower else IMPROVED), 1 - p_worse
        else:
            verdict = INCONCLUSIVE
            reason += "; change above the threshold but the processes disagree"
    return Comparison(
        verdict,
        change=change,
        confidence=confidence,
        threshold=threshold,
        reason=reason,
        interval=interval,
        degrees=degrees,
    )


def _steady_pairs(
    head: Sequence[float],
    base: Sequence[float],
    counts: str,
    threshold: float,
    higher_is_worse: bool,
    alpha: float,
    looks: int,
) -> Comparison:
    """Judge on the pairs where a side has fewer than :data:`STEADY_LEAST` steady processes
    (Note [Steady pairs]): all of them, by Yuen's trimmed t test (:func:`compare_pairs` with
    :data:`PAIR_TRIM`); the geometric means of the pairs it keeps stand for the sides."""
    pairs = sorted(
        ((h, b) for h, b in zip(head, base) if h > 0 and b > 0), key=lambda p: p[0] / p[1]
    )
    result = compare_pairs(
        [h / b for h, b in pairs],
        threshold=threshold,
        higher_is_worse=higher_is_worse,
        alpha=alpha,
        looks=looks,
        trim=PAIR_TRIM,
    )
    reason = f"{counts} (too few: judged on the pairs); {result.reason}"
    cut = trimmed(len(pairs), PAIR_TRIM)
    current, baseline = (geometric_mean(side) for side in zip(*pairs[cut : len(pairs) - cut]))
    return replace(result, reason=reason, current=current, baseline=baseline)


def _split(costs: list[list[float]], change: float, threshold: float, higher_is_worse: bool) -> str:
    """Why the change of the sides' best processes is not the change most pairs of processes
    saw, or "" where they agree (Note [Split processes]). ``costs``: head's and base's value of
    each process, lower is better, in the order of the pairs; ``change`` as the metric goes
    (a rate's, higher is better)."""
    changes = [h / b - 1 if higher_is_worse else b / h - 1 for h, b in zip(*costs)]
    if len(changes) < 2:
        return ""
    middle = median(changes)
    judged, seen = math.log1p(change), math.log1p(middle)
    # the middle pair saw the same change: within the threshold, or half of a large one
    if abs(judged - seen) <= max(threshold, abs(judged) / 2):
        return ""
    within = [c for c in changes if abs(c) <= threshold]
    beyond = [c for c in changes if abs(c) > threshold]
    groups = ", ".join(
        f"{len(group)} {label} {median(group):+.1%}"
        for group, label in ((within, "within the threshold at"), (beyond, "beyond it at"))
        if group
    )
    return (
        f"the pairs of processes disagree ({len(changes)} pairs: {groups}; the middle pair "
        f"{middle:+.1%}): the processes measured at different speeds; look for "
        "a thread count, a path chosen per process or a busy machine"
    )


def _welch(
    head: list[float], base: list[float], alpha: float
) -> tuple[float, float, float, float | None]:
    """One-sided p that head's mean is above base's, the difference's interval at the
    two-sided level that matches a one-sided test at ``alpha``, and the test's degrees of
    freedom (None where there is no spread to test)."""
    if len(set(head)) == 1 and len(set(base)) == 1:  # no spread to judge by: the sign decides
        difference = head[0] - base[0]
        p = 0.0 if difference > 0 else 1.0 if difference < 0 else 0.5
        return p, difference, difference, None
    from scipy.stats import ttest_ind  # only when a verdict is computed

    result = ttest_ind(head, base, equal_var=False)
    interval = result.confidence_interval(confidence_level=1 - 2 * alpha)
    greater = ttest_ind(head, base, equal_var=False, alternative="greater").pvalue
    return float(greater), float(interval.low), float(interval.high), float(result.df)


def compare_value(
    current: float, baseline: float | None, *, tolerance: float = 0.0, higher_is_worse: bool = True
) -> Comparison:
    """Judge a deterministic metric (FLOPs, parameters, graph breaks): exact or within tolerance."""
    if baseline is None:
        return Comparison(NO_BASELINE, current=current)
    if baseline == current:
        return Comparison(PASS, baseline, current, 0.0, None, tolerance)
    # from 0 there is no relative change (and JSON has no infinity to write one)
    change = (current - baseline) / abs(baseline) if baseline else None
    if change is not None and abs(change) <= tolerance:
        return Comparison(PASS, baseline, current, change, None, tolerance)
    verdict = REGRESSED if (current > baseline) == higher_is_worse else IMPROVED
    return Comparison(verdict, baseline, current, change, None, tolerance)


def session_wide(verdicts: Sequence[dict[str, Any]], alpha: float = ALPHA) -> int:
    """Hold the session's false alarms to ``alpha`` across all its tested metrics: each
    ``regressed`` or ``improved`` verdict whose p-value does not survive the Benjamini-Hochberg
    procedure over every verdict that rests on a test (scipy's ``false_discovery_control``)
    becomes ``inconclusive``. Changes ``verdicts`` (``Comparison.as dict``) in place; returns
    how many it demoted (Note [Many metrics])."""
    tested = [
        v for v in verdicts if v.get("confidence") is not None and v.get("change") is not None
    ]
    if len(tested) < 2:
        return 0
    from scipy.stats import false_discovery_control  # only when verdicts are computed

    p_values = [min(1.0, max(0.0, 1.0 - v["confidence"])) for v in tested]
    adjusted = false_discovery_control(p_values, method="bh")
    demoted = 0
    for verdict, q in zip(tested, adjusted):
        if verdict["verdict"] in (REGRESSED, IMPROVED) and q >= alpha:
            verdict["reason"] = "; ".join(
                r
                for r in (
                    verdict.get("reason"),
                    f"not significant once the session's {len(tested)} tested metrics are counted "
                    f"(Benjamini-Hochberg q = {q:.3f}, needs < {alpha:g})",
                )
                if r
            )
            verdict["verdict"] = INCONCLUSIVE
            demoted += 1
    return demoted
