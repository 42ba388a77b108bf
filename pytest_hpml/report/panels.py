"""What each panel of the HTML report draws: the values a verdict compared, per process or
per pair, in the metric's own unit, as data (:class:`Panel`) apart from the drawing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..bench.metrics import per_second
from ..model import Comparison, Result
from ..verdict import judge, stats
from ..verdict.paired import THREAD_CLOCK


@dataclass(frozen=True)
class Panel:
    """What one panel draws: the values a verdict compared, in the metric's own unit.

    The page embeds it beside the picture (the figure's ``data-values``), so that a reader or a
    test can hold the picture against the table without reading pixels."""

    metric: str
    verdict: str
    unit: str
    statistic: str  # what each value is, and on which clock, as the verdict took it
    clock: str
    groups: dict[str, list[float]]  # x label -> values, left to right
    paired: bool = False  # the i-th values of the two groups come from the i-th pair
    medians: dict[str, list[float]] = field(default_factory=dict)  # group -> process medians
    baseline: float | None = None  # the table's baseline and current
    current: float | None = None
    threshold: float | None = None
    band: tuple[float, float] | None = None  # baseline +/- threshold: where current passes


def panel_values(name: str, result: Result, base: Mapping[str, Any] | None) -> Panel:
    """The values behind one metric's verdict: with --hpml-against, each pair's two processes'
    values as the verdict picked them (``sides``); else the pooled samples a stored baseline
    is judged on, with the median of each process."""
    record = result.metrics[name]
    verdict = result.verdicts.get(name) or Comparison("")
    sides = _sides(verdict)
    if sides:
        groups, medians = {"base": sides[1], "head": sides[0]}, {}
        statistic, clock = _statistic(record, verdict)
    else:
        runs = _groups(record, base)
        groups = {label: _rounded(judge.pooled(r)) for label, r in runs.items()}
        medians = {k: _rounded([stats.median(r["samples"]) for r in v]) for k, v in runs.items()}
        medians = {k: v for k, v in medians.items() if len(v) > 1}  # one is the box's median
        statistic, clock = "every sample", "the wall clock"
    baseline, threshold = verdict.baseline, verdict.threshold
    band = (
        (baseline * (1 - threshold), baseline * (1 + threshold)) if baseline and threshold else None
    )
    return Panel(
        name,
        verdict.verdict,
        record["unit"],
        statistic,
        clock,
        groups,
        paired=bool(sides),
        medians=medians,
        baseline=baseline,
        current=verdict.current,
        threshold=threshold,
        band=band,
    )


def _sides(verdict: Comparison) -> tuple[list[float], list[float]] | None:
    """Head's and base's per-process values of a head-against-base verdict, pair by pair, or
    None (a stored-baseline verdict, or too few pairs to judge)."""
    sides = verdict.sides
    if sides is None:
        return None
    head, base = (list(sides.get(k) or ()) for k in ("head", "base"))
    if not head or len(head) != len(base):
        return None
    return head, base


def _statistic(record: Mapping[str, Any], verdict: Comparison) -> tuple[str, str]:
    """The statistic and the clock of each process's value (verdict.paired.judge_paired)."""
    pick = "highest" if per_second(record) else "fastest"
    thread = THREAD_CLOCK in verdict.reason
    return f"{pick} sample of each process", (
        "the measuring thread's CPU clock" if thread else "the wall clock"
    )


def _rounded(values: list[float]) -> list[float]:
    """Six digits: what the page embeds, as the JSON report rounds a verdict's sides."""
    return [float(f"{v:.6g}") for v in values]


def _groups(
    record: Mapping[str, Any], base: Mapping[str, Any] | None
) -> dict[str, list[Mapping[str, Any]]]:
    """The process runs to draw: baseline, current and, where both runs timed the reference
    workload, current in the baseline's units (where a verdict judges them so:
    ``judge.judged``)."""
    current = judge.runs(record)
    if not base or not base.get("samples"):
        return {"current": current}
    stored = judge.runs(base)
    groups = {"baseline": stored, "current": current}
    rate = per_second(record)
    samples = judge.judged(current, stored, rate)
    if samples.pooled()[0] and samples.units:
        # Judged in reference units (stats.normalize); drawn in the baseline's units.
        unit = stats.median(judge.pooled(stored, "reference"))
        groups["current\nnormalized"] = [
            {"samples": [s / unit if rate else s * unit for s in run]} for run in samples.current
        ]
    return groups
