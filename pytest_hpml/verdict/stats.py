"""Statistics behind the verdicts: a rank test on the samples plus a minimum effect size, and a
t test one level up, on the medians of the processes.

The tests are scipy's, imported only when a verdict is computed (never at plugin start-up):
the plugin loads into every pytest run.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import replace

from ..model import Comparison as Comparison  # the verdict of one metric

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
    # halves first: the mean of two finite floats near the largest one is finite too
    return ordered[mid] if n % 2 else ordered[mid - 1] / 2 + ordered[mid] / 2


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
    base = median(baseline)
    if len(current) < MIN_SAMPLES or len(baseline) < MIN_SAMPLES:
        reason = (
            f"too few samples ({len(current)} now, {len(baseline)} in the baseline, "
            f"need {MIN_SAMPLES})"
        )
        shown = median(current) if current else None
        return Comparison(INCONCLUSIVE, base, shown, None, None, threshold, reason)
    cur = median(current)
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
    if processes is not None and resolution is not None and abs(change) <= resolution:
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


# Pairs whose log-ratios lie further apart than this are of different speeds of the processes,
# not of noise: the pairs' noise is a few percent (Note [Split pairs]).
SPLIT = math.log(1.2)


def majority(ratios: Sequence[float]) -> tuple[list[float], list[float]]:
    """The pairs that agree, and those set aside (Note [Split pairs]): where the ratios fall
    into groups more than :data:`SPLIT` apart, the group that holds more than half of them;
    all of them otherwise (one group, or none with a majority)."""
    ordered = sorted(r for r in ratios if r > 0)
    groups: list[list[float]] = []
    for ratio in ordered:
        if groups and math.log(ratio / groups[-1][-1]) <= SPLIT:
            groups[-1].append(ratio)
        else:
            groups.append([ratio])
    largest = max(groups, key=len, default=[])
    if len(groups) < 2 or 2 * len(largest) <= len(ordered):
        return list(ratios), []
    return [r for r in ratios if r in largest], [r for r in ratios if r not in largest]


# Pairs a group must hold beyond those set aside for its change to count (Note [Split pairs]):
# two pairs against one are two processes' luck, not evidence.
OUTVOTE = 3


def outvotes(agreeing: Sequence[float], aside: Sequence[float]) -> bool:
    """Whether the pairs that agree hold enough beyond those set aside (``majority``) for a
    change they show to count: :data:`OUTVOTE` more, or none set aside."""
    return not aside or len(agreeing) - len(aside) >= OUTVOTE


def compare_pairs(
    ratios: Sequence[float],
    *,
    threshold: float,
    higher_is_worse: bool = True,
    alpha: float = PAIR_ALPHA,
    looks: int = 1,
) -> Comparison:
    """Judge head against base on one ratio per pair of processes measured side by side (Note
    [Head against base]).

    The change is the geometric mean of the ratios; it counts when it exceeds ``threshold``
    and a one-sample t test on the log-ratios puts it beyond chance at ``alpha`` shared by
    ``looks`` (Note [Adaptive pairs]), one-sided. The reason gives the pairs and the
    confidence interval at that level.
    """
    per_look = alpha / looks
    logs = sorted(math.log(r) for r in ratios if r > 0)
    if len(logs) < 2:
        reason = f"{len(logs)} usable pair(s) of processes: at least 2 are needed"
        return Comparison(INCONCLUSIVE, threshold=threshold, reason=reason)
    from scipy.stats import t  # only when a verdict is computed

    mean = sum(logs) / len(logs)
    change = math.expm1(mean)
    error = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1) / len(logs))
    degrees = len(logs) - 1
    if error == 0:  # every pair agrees exactly
        p_up, p_down = (0.0, 1.0) if mean > 0 else (1.0, 0.0) if mean < 0 else (1.0, 1.0)
    else:
        p_up, p_down = float(t.sf(mean / error, degrees)), float(t.cdf(mean / error, degrees))
    p_up, p_down = min(1.0, looks * p_up), min(1.0, looks * p_down)  # the looks' share
    half = float(t.ppf(1 - per_look, degrees)) * error
    low, high = math.expm1(mean - half), math.expm1(mean + half)
    # a pass settles at each look's own level: stopping early risks a missed change, not a
    # false alarm, which the looks' shared level guards (Note [Adaptive pairs])
    near = float(t.ppf(1 - alpha, degrees)) * error
    settling = (math.expm1(mean - near), math.expm1(mean + near))
    level = _level(per_look)
    reason = f"{len(logs)} pairs: {change:+.1%}, {level} interval {low:+.1%} to {high:+.1%}"
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
        settling = (-settling[1] / (1 + settling[1]), -settling[0] / (1 + settling[0]))
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
        settling=settling,
    )


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
    threshold on both sides, nor a metric new to the working tree's test."""
    if result.verdict in (REGRESSED, IMPROVED, NEW):
        return True
    if result.verdict != PASS or result.interval is None or result.threshold is None:
        return False
    return _within(result.settling or result.interval, result.threshold)


def let_go(result: Comparison, done: int, cap: int, looks: int) -> bool:
    """Whether a pass that is not settled after ``done`` pairs (its level shared by
    ``looks``) would still not be at ``cap`` pairs, were its change to stay where it is, and
    could not become a regression then either: its change lies within the threshold (the
    pairs' mean, the middle pair and the interval's centre alike), and its interval, narrowed
    as ``cap`` pairs would narrow it, still reaches beyond (Note [Adaptive pairs],
    futility)."""
    # a settled pass needs no test: its narrowed interval fits where its interval did
    if result.verdict != PASS or done >= cap:
        return False
    if result.interval is None or result.threshold is None or result.degrees is None:
        return False
    if result.degrees < 2:
        return False  # an interval on under 2 degrees of freedom says little of its centre
    # the change and the middle pair well within it: a change near the threshold may be a
    # larger one the first pairs caught low
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
    # with them
    error = (high - low) / 2 / float(t.ppf(level, result.degrees))
    grown = result.degrees * cap / done
    half = error * math.sqrt(done / cap) * float(t.ppf(level, grown))
    return not _within((math.expm1(middle - half), math.expm1(middle + half)), result.threshold)


# A pass is let go only where its change lies within this share of the threshold
# (Note [Adaptive pairs], futility).
FUTILE_SHARE = 0.5


def _within(interval: tuple[float, float] | list[float], threshold: float) -> bool:
    """Whether a change's interval lies within the threshold on both sides."""
    low, high = interval
    return -threshold < low and high < threshold


def quiet(verdict: Comparison) -> bool:
    """Whether a judged metric shows no change a count of instructions could add to (Note
    [Changed benchmarks]): a pass, settled where it has an interval (head against base)."""
    if verdict.verdict != PASS:
        return False
    if verdict.interval is None or verdict.threshold is None:
        return True
    return _within(verdict.settling or verdict.interval, verdict.threshold)


def looks(cap: int) -> tuple[int, ...]:
    """The numbers of pairs after which head against base judges whether to measure more: 3,
    then every second pair up to ``cap`` (Note [Adaptive pairs])."""
    first = min(FIRST_LOOK, cap)
    return tuple(sorted({first, *range(first, cap, LOOK_EVERY), cap}))


FIRST_LOOK = 3  # pairs: 2 a side is the least a t test takes, and a third shows a split
LOOK_EVERY = 2  # pairs: each look adds one base and one head process to every order


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


def session_wide(verdicts: Sequence[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """``verdicts`` with the session's false alarms held to ``alpha`` across all its tested
    metrics: each ``regressed`` or ``improved`` verdict whose p-value does not survive the
    Benjamini-Hochberg procedure over every verdict that rests on a test (scipy's
    ``false_discovery_control``) becomes ``inconclusive`` (Note [Many metrics])."""
    tested = [
        i for i, v in enumerate(verdicts) if v.confidence is not None and v.change is not None
    ]
    found = list(verdicts)
    if len(tested) < 2:
        return found
    from scipy.stats import false_discovery_control  # only when verdicts are computed

    p_values = [min(1.0, max(0.0, 1.0 - (verdicts[i].confidence or 0.0))) for i in tested]
    adjusted = false_discovery_control(p_values, method="bh")
    for i, q in zip(tested, adjusted):
        verdict = verdicts[i]
        if verdict.verdict in (REGRESSED, IMPROVED) and q >= alpha:
            said = (
                f"not significant once the session's {len(tested)} tested metrics are counted "
                f"(Benjamini-Hochberg q = {q:.3f}, needs < {alpha:g})"
            )
            reason = "; ".join(r for r in (verdict.reason, said) if r)
            found[i] = replace(verdict, verdict=INCONCLUSIVE, reason=reason)
    return found
