"""The verdict on one metric against its baseline, by the judge its kind names.

Sampled metrics (time, rate, ratio) are judged on their samples pooled over processes, in
units of the reference workload where that steadies them (Note [Reference workload]); counts
exactly or within their tolerance. A plugin can judge a metric its own way through the
``pytest_hpml_judge_metric`` hook.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from ..bench import metrics
from ..hardware import torch_state
from . import stats


def runs(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The process runs of a sampled metric: its own, those of the other processes of its
    session (``processes``) and, for a stored one, those kept by append (``earlier``)."""
    return [record, *record.get("processes", ()), *record.get("earlier", ())]


def measured_value(record: Mapping[str, Any]) -> float | None:
    """What a metric measured, as the verdict table shows it."""
    if "samples" in record:
        return stats.median(record["samples"]) if record["samples"] else None
    return record.get("value")


def pooled(process_runs: Sequence[Mapping[str, Any]], key: str = "samples") -> list[float]:
    """One field (samples, reference) of several process runs, together."""
    return [s for run in process_runs for s in run[key]]


def center(record: Mapping[str, Any]) -> float | None:
    """The number that stands for a record: its samples' median (every process run), or its
    value."""
    if not record.get("samples"):
        return record.get("value")
    return stats.median(pooled(runs(record)))


# Fewer process runs than this cannot show whether the reference steadies a benchmark.
PROCESSES_TO_CALIBRATE = 3


def _spread(values: Sequence[float]) -> float:
    """How far per-process medians stray from their median: the median |log(m / median)|."""
    center = stats.median(values)
    return stats.median([abs(math.log(v / center)) for v in values])


def steadiness(
    process_runs: Sequence[Mapping[str, Any]], per_second: bool = False
) -> tuple[float, float] | None:
    """The spread of the per-process medians of these runs in reference units and raw; None
    when there are too few runs to tell, or a run without the reference."""
    if len(process_runs) < PROCESSES_TO_CALIBRATE or not all(
        run.get("reference") and run.get("samples") for run in process_runs
    ):
        return None
    raw = [stats.median(run["samples"]) for run in process_runs]
    units = [
        stats.median(stats.normalize(run["samples"], run["reference"], per_second))
        for run in process_runs
    ]
    if min(raw + units) <= 0:
        return None
    return _spread(units), _spread(raw)


@dataclass(frozen=True)
class Judged:
    """The samples a verdict compares, one list per process run: in units of the reference
    workload, or raw (``units`` False), and then ``why_raw`` when the reference was timed but
    not used."""

    current: list[list[float]]
    stored: list[list[float]]
    units: bool = True
    why_raw: str = ""

    def pooled(self) -> tuple[list[float], list[float]]:
        return [s for run in self.current for s in run], [s for run in self.stored for s in run]

    def process_medians(self) -> tuple[list[float], list[float]]:
        return [stats.median(r) for r in self.current if r], [
            stats.median(r) for r in self.stored if r
        ]


def judged(
    current: Sequence[Mapping[str, Any]],
    stored: Sequence[Mapping[str, Any]],
    per_second: bool = False,
) -> Judged:
    """What a verdict compares: the current and stored process runs' samples.

    Reference units where both sides timed the reference workload and it made the stored
    baseline's processes steadier (or where fewer than :data:`PROCESSES_TO_CALIBRATE` stored
    runs cannot tell); raw otherwise (Note [Raw or reference units]). The choice rests on the
    baseline alone, so the run being judged cannot tilt it.
    """

    def raw(why: str = "") -> Judged:
        samples = [list(r["samples"]) for r in current], [list(r["samples"]) for r in stored]
        return Judged(*samples, units=False, why_raw=why)

    if not all(r.get("reference") for r in [*current, *stored]):
        return raw()  # e.g. pure-Python benchmarks: torch was never loaded
    spreads = steadiness(stored, per_second)
    if spreads is not None and spreads[0] > spreads[1]:
        return raw(
            f"judged raw: the reference workload did not steady this benchmark (the "
            f"baseline's processes spread {spreads[0]:.1%} in reference units, "
            f"{spreads[1]:.1%} raw)"
        )

    def units(runs_: Sequence[Mapping[str, Any]]) -> list[list[float]]:
        return [stats.normalize(r["samples"], r["reference"], per_second) for r in runs_]

    return Judged(units(current), units(stored))


# Signs that a run shared its cores with other work (Note [Busy machine]): the reference
# workload's time spreading this much (90th over 10th percentile) within one process run, or
# more runnable work than usable cores.
BUSY_SPREAD = 2.0
BUSY_LOAD = 1.0


def busy(process_runs: Sequence[Mapping[str, Any]]) -> str | None:
    """Why these runs were measured on a busy machine, or None if nothing shows it."""
    signs = []
    spreads = [
        stats.quantile(run["reference"], 0.9) / stats.quantile(run["reference"], 0.1)
        for run in process_runs
        if len(run.get("reference") or ()) >= 10 and min(run["reference"]) > 0
    ]
    if spreads and max(spreads) > BUSY_SPREAD:
        signs.append(f"the reference workload's time varied {max(spreads):.1f}x within a process")
    loads = [run["load"] for run in process_runs if run.get("load") is not None]
    if loads and max(loads) > BUSY_LOAD:
        signs.append(f"load average {max(loads):.1f} per usable core")
    return " and ".join(signs) or None


def _busy_reason(current: Sequence[Mapping[str, Any]], stored: Sequence[Mapping[str, Any]]) -> str:
    here, there = busy(current), busy(stored)
    return "; ".join(
        text
        for text in (
            here and f"measured on a busy machine: {here}",
            there and f"the baseline was recorded on a busy machine: {there}",
        )
        if text
    )


def rule(processes: int) -> str:
    """How a time is judged against its stored baseline, in words built from the values the
    judge uses (``processes``: how many measured it in this run, at most)."""
    return (
        f"times are the medians over the rounds of {processes} process(es), in units of the "
        "reference workload where it steadied the baseline; a change beyond the threshold "
        f"counts where the Mann-Whitney U test on the rounds puts it beyond chance at "
        f"{stats.ALPHA:.0%} and the spread between processes ({stats.PROCESS_ALPHA:.0%}) "
        "allows it"
    )


def judge_metric(
    record: dict[str, Any], base: dict[str, Any] | None, threshold: float
) -> stats.Comparison:
    """Compare one metric with its baseline by the judge of its kind."""
    kind = metrics.kind_of(record)
    if kind is None:
        reason = f"unknown metric kind {record.get('kind')!r}: not judged"
        return stats.Comparison(stats.INCONCLUSIVE, reason=reason)
    return JUDGES[kind.judge](record, base, threshold)


def judge_count(
    record: Mapping[str, Any], base: Mapping[str, Any] | None, threshold: float
) -> stats.Comparison:
    """A deterministic value: exact, or within the record's own tolerance; a changed work
    counter says which operators changed, and where (Note [Work counters])."""
    result = stats.compare_value(
        record["value"],
        None if base is None else base.get("value"),
        tolerance=record.get("tolerance") or 0.0,
        higher_is_worse=metrics.higher_is_worse(record),
    )
    if result.verdict in (stats.REGRESSED, stats.IMPROVED) and base and record.get("detail"):
        stored = base.get("detail") or {}
        why = explain(record["detail"], stored, none_before=base.get("value") == 0)
        return dataclasses.replace(result, reason=why) if why else result
    return result


OTHERS = metrics.Instructions.OTHERS  # an instruction profile's functions outside its top ones
EXPLAINED = 5  # operators (or kinds) named in a changed count's reason, the largest changes


def explain(
    current: Mapping[str, Any], stored: Mapping[str, Any], none_before: bool = False
) -> str:
    """What changed between two work counters' details: the counts per operator (or per kind)
    that moved most, then the source lines of this run's syncs, copies or host tensors;
    ``none_before`` where the stored count was 0, so that it had no lines."""
    key = "ops" if "ops" in current or "ops" in stored else "by"
    now, then = current.get(key) or {}, stored.get(key) or {}
    named = {*now, *then} - {OTHERS}  # the rest of an instruction profile, ranked last
    moved = sorted(
        (name for name in named if _moved(now, then, name)),
        key=lambda name: (-_moved(now, then, name), name),
    )
    parts = [f"{name}: {_shown(then, name)} -> {_shown(now, name)} per call" for name in moved]
    if len(parts) > EXPLAINED:
        parts = [*parts[:EXPLAINED], f"{len(parts) - EXPLAINED} more"]
    if now.get(OTHERS, 0) != then.get(OTHERS, 0):
        parts.append(f"{OTHERS}: {then.get(OTHERS, 0):,} -> {now.get(OTHERS, 0):,} per call")
    sites = _sites(current, stored, none_before)
    if sites:
        parts.append("where: " + ", ".join(sites[:EXPLAINED]))
    return "; ".join(parts)


def _sites(current: Mapping[str, Any], stored: Mapping[str, Any], none_before: bool) -> list[str]:
    """This run's syncs, copies or host tensors by line: where the other side's lines are known
    (a count of 0 had none), each marked new or kept, the new ones first."""
    before = stored.get("sites") or {}
    known = none_before or bool(stored.get("ops") or stored.get("by"))
    found = sorted(  # new first, each kind in its order, the most frequent first
        ((known and line in before.get(name, ()), f"{name} at {line}")
         for name, lines in (current.get("sites") or {}).items() for line in lines),
        key=lambda f: f[0],
    )  # fmt: skip
    return [f"{site} ({'kept' if kept else 'new'})" if known else site for kept, site in found]


def _count(counts: Mapping[str, int], name: str) -> int:
    """``name``'s count; for a function outside an instruction profile's top ones, the least of
    those, which it stayed under."""
    if not _bounded(counts, name):
        return counts.get(name, 0)
    return min((v for k, v in counts.items() if k != OTHERS), default=0)


def _bounded(counts: Mapping[str, int], name: str) -> bool:
    """Whether ``name`` fell outside an instruction profile's top functions (its count is
    only known to lie under the least of theirs)."""
    return name not in counts and OTHERS in counts


def _moved(now: Mapping[str, int], then: Mapping[str, int], name: str) -> int:
    """How much ``name``'s count moved at least (0: it may not have moved)."""
    current, before = _count(now, name), _count(then, name)
    if _bounded(now, name):
        return 0 if _bounded(then, name) else max(0, before - current)
    return max(0, current - before) if _bounded(then, name) else abs(current - before)


def _shown(counts: Mapping[str, int], name: str) -> str:
    return f"{'<' if _bounded(counts, name) else ''}{_count(counts, name):,}"


# A speed-up over more cores is judged where the host left them free, all but this share of
# one core (its own daemons' work, a tick of the clock): Note [Free cores].
CORE_SLACK = 0.25


def has_free_cores(run: Mapping[str, Any], needed: int) -> bool:
    """Whether the host's other work left ``needed`` cores free while ``run`` measured."""
    free = run.get("free_cores")
    return free is not None and free >= needed - CORE_SLACK


def short_of_cores(needed: int, where: str, process_runs: Sequence[Mapping[str, Any]]) -> str:
    """Why a speed-up over ``needed`` cores is not judged on ``process_runs`` (of ``where``)."""
    known = [r["free_cores"] for r in process_runs if r.get("free_cores") is not None]
    if not known:
        return (
            f"a speed-up over {needed} cores: {where} does not say whether they were free "
            "(Note [Free cores]); not judged"
        )
    return (
        f"a speed-up over {needed} cores: the host's other work left {min(known):.2g} of them "
        f"free while {where} measured (Note [Free cores]); not judged"
    )


def judge_ratio(
    record: Mapping[str, Any], base: Mapping[str, Any] | None, threshold: float
) -> stats.Comparison:
    """A speed-up measured in one run: its paired-round ratios, raw (the reference cancels
    out of a ratio), at the record's tolerance if it has one; a speed-up over more cores only
    on the process runs that had them free."""
    current, stored = runs(record), [] if base is None else runs(base)
    if not any(r.get("samples") for r in stored):
        return stats.Comparison(stats.NO_BASELINE, current=_median(pooled(current)))
    needed, left_out = record.get("cores"), ""
    if needed:
        for where, side in (("this run", current), ("the baseline", stored)):
            if not any(has_free_cores(r, needed) for r in side):
                reason = short_of_cores(needed, where, side)
                return stats.Comparison(
                    stats.INCONCLUSIVE, current=_median(pooled(current)), reason=reason
                )
        kept = [[r for r in side if has_free_cores(r, needed)] for side in (current, stored)]
        if len(kept[0]) + len(kept[1]) < len(current) + len(stored):
            left_out = (
                f"judged on the {len(kept[0])} of {len(current)} process runs and "
                f"{len(kept[1])} of {len(stored)} baseline runs that had {needed} cores free"
            )
        current, stored = kept
    samples = Judged([r["samples"] for r in current], [r["samples"] for r in stored])
    result = stats.compare_samples(
        *samples.pooled(),
        threshold=record.get("tolerance") or threshold,
        higher_is_worse=metrics.higher_is_worse(record),
        processes=samples.process_medians(),
    )
    result = _with_reason(result, left_out)
    return with_states(result, {"baseline": stored, "this run": current})


def judge_samples(
    record: Mapping[str, Any], base: Mapping[str, Any] | None, threshold: float
) -> stats.Comparison:
    """Times and rates: in reference units where that steadies them, else raw."""
    current, stored = runs(record), [] if base is None else runs(base)
    if not any(r.get("samples") for r in stored):  # nothing stored, or a record without samples
        return stats.Comparison(stats.NO_BASELINE, current=_median(pooled(current)))
    samples = judged(current, stored, metrics.per_second(record))
    result = stats.compare_samples(
        *samples.pooled(),
        threshold=threshold,
        higher_is_worse=metrics.higher_is_worse(record),
        processes=samples.process_medians(),
    )
    # The raw medians are what people recognize, whatever was judged.
    raw_base = stats.median(pooled(stored))
    raw_current = _median(pooled(current))
    if not samples.units:
        reason = joined(result.reason, samples.why_raw)
        result = dataclasses.replace(result, baseline=raw_base, current=raw_current, reason=reason)
        if all(r.get("reference") for r in [*current, *stored]):
            units = _units_change(current, stored, metrics.per_second(record))
            result = _both_show(result, units, ("raw", "in reference units"), threshold)
        result = _with_reason(result, _busy_reason(current, stored))
        return with_states(result, {"baseline": stored, "this run": current})
    raw_change = None if raw_current is None or raw_base <= 0 else raw_current / raw_base - 1
    result = dataclasses.replace(
        result, baseline=raw_base, current=raw_current, raw_change=raw_change
    )
    if raw_change is not None:
        result = _both_show(result, raw_change, ("in reference units", "raw"), threshold)
    result = _with_reason(result, _busy_reason(current, stored))
    return with_states(result, {"baseline": stored, "this run": current})


def with_states(
    result: stats.Comparison, sides: Mapping[str, Sequence[Mapping[str, Any]]]
) -> stats.Comparison:
    """A time judged on processes (``sides``: name -> process runs) that measured in different
    torch states says so; at different thread counts it is no verdict on the code (Note
    [Torch state])."""
    states: dict[str, Sequence[dict[str, Any]]] = {
        name: [r.get("state") or {} for r in side] for name, side in sides.items()
    }
    distinct = {name: _distinct(found) for name, found in states.items() if any(found)}
    result = dataclasses.replace(result, states=distinct or None)
    found = torch_state.differences(states)
    if not found:
        return _with_reason(result, _not_asked([s for side in states.values() for s in side]))
    said = "the processes measured in different torch states: " + "; ".join(found)
    if not any(d.startswith("threads:") for d in found) or result.verdict in (
        stats.NO_BASELINE,
        stats.INCONCLUSIVE,
    ):
        return _with_reason(result, said)
    said += " (a time at another thread count measures another thing: set --hpml-threads)"
    return dataclasses.replace(
        result, verdict=stats.INCONCLUSIVE, confidence=None, reason=joined(result.reason, said)
    )


def threshold_said(
    result: stats.Comparison, record: Mapping[str, Any], session: float
) -> stats.Comparison:
    """A verdict reached at another threshold than the run's (``session``) says which, and
    where it came from: a change beyond the run's threshold never passes without a why."""
    used, kind = result.threshold, metrics.kind_of(record)
    if used is None or kind is None:
        return result
    if kind.sampled:
        if math.isclose(used, session):
            return result
        origin = (
            record.get("tolerance_from")
            if record.get("tolerance")
            else "the test's hpml_bench(threshold=...)"
        )
        said = f"threshold {_percent(used)} from {origin}, not the run's {_percent(session)}"
    else:  # a count: exact, unless a tolerance was given
        if not used:
            return result
        origin = record.get("tolerance_from") or "the metric's record"
        said = f"within a tolerance of {_percent(used)} from {origin} (counts are otherwise exact)"
    return dataclasses.replace(result, reason=joined(result.reason, said))


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.3g}%"


def _distinct(states: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The different states among a side's processes, in the order first seen."""
    found: list[dict[str, Any]] = []
    for state in states:
        if state and dict(state) not in found:
            found.append(dict(state))
    return found


def _not_asked(states: Sequence[Mapping[str, Any]]) -> str:
    """What to say where every process measured at one thread count, but not the one asked."""
    threads = {s["threads"] for s in states if "threads" in s}
    asked = {s["asked"] for s in states if "asked" in s}
    if len(threads) != 1 or len(asked) != 1 or threads == asked:
        return ""
    return (
        f"measured at {threads.pop()} threads on every process, not the {asked.pop()} asked: "
        "the test sets its own count"
    )


def joined(*reasons: str | None) -> str:
    """A verdict's reasons, those given, in one."""
    return "; ".join(r for r in reasons if r)


def _with_reason(result: stats.Comparison, reason: str) -> stats.Comparison:
    if not reason:
        return result
    return dataclasses.replace(result, reason=joined(result.reason, reason))


def _both_show(
    result: stats.Comparison, other: float | None, labels: tuple[str, str], threshold: float
) -> stats.Comparison:
    """A change stands only where the other evidence shows it too, beyond the threshold and in
    the same direction: normalization must not make a change out of raw times within the
    threshold, nor raw times call a machine slower as a whole a regression (Note [Raw or
    reference units]). ``labels`` name the judged change and ``other``."""
    if result.verdict not in (stats.REGRESSED, stats.IMPROVED) or result.change is None:
        return result
    if other is not None and other * result.change > 0 and abs(other) > threshold:
        return result
    shown = "undefined" if other is None else f"{other:+.1%}"
    reason = (
        f"{result.change:+.1%} {labels[0]} but {shown} {labels[1]}: a change must show in both "
        "beyond the threshold"
    )
    return dataclasses.replace(
        result,
        verdict=stats.INCONCLUSIVE,
        reason=joined(result.reason, reason),
    )


def _units_change(
    current: Sequence[Mapping[str, Any]], stored: Sequence[Mapping[str, Any]], per_second: bool
) -> float | None:
    """The change of the medians in reference units (None where the baseline's is not positive)."""
    medians = [
        stats.median(
            [s for r in side for s in stats.normalize(r["samples"], r["reference"], per_second)]
        )
        for side in (current, stored)
    ]
    return medians[0] / medians[1] - 1 if medians[1] > 0 else None


def _median(values: list[float]) -> float | None:
    return stats.median(values) if values else None


Judge = Callable[[Mapping[str, Any], "Mapping[str, Any] | None", float], stats.Comparison]
# The judge each metric kind names (bench.metrics.Kind.judge).
JUDGES: dict[str, Judge] = {"samples": judge_samples, "ratio": judge_ratio, "count": judge_count}
