"""How rounds are measured: device-correct timing, warm-up until times settle, and targets
measured with their rounds interleaved with the reference workload.

Each timed round ends with the device synchronized; lazy first-call work (``torch.compile``,
cuDNN autotuning, allocator growth) is absorbed in the warm-up and reported apart.
"""

from __future__ import annotations

import gc
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

Timer = Callable[[], float]


def synchronizer(device: Any = None) -> Callable[[], None]:
    """A function that waits for work queued on ``device`` (or on any initialized accelerator)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return lambda: None
    kind = getattr(device, "type", None)
    if kind == "cuda" or (kind is None and torch.cuda.is_initialized()):
        return lambda: torch.cuda.synchronize(device)
    if kind == "mps":
        return torch.mps.synchronize
    return lambda: None


@dataclass
class Series:
    """The raw measurement of one callable."""

    name: str
    samples: list[float] = field(default_factory=list)  # seconds per call, one per round
    reference: list[float] = field(default_factory=list)  # reference time before each round
    first_call: float = math.nan  # seconds, lazy work included
    warmup_calls: int = 0
    iterations: int = 1  # calls per round

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


@dataclass
class Plan:
    """How long and how to measure."""

    budget: float = 3.0  # seconds of rounds, reference included
    min_rounds: int = 5
    min_round_time: float = 1e-3  # calls per round are chosen so a round lasts at least this
    warmup_time: float = 0.5  # at most this long (and 50 calls) warming up after the first call
    disable_gc: bool = False
    timer: Timer = time.perf_counter
    sync: Callable[[], None] = lambda: None
    reference: Any = None  # a reference workload (see .reference), timed before each round
    rounds: int | None = None  # fixed schedule (pedantic), instead of the budget
    iterations: int | None = None
    warmup_rounds: int | None = None
    device: Any = None  # where peak memory is measured
    after_warmup: Callable[[], None] = lambda: None  # e.g. a snapshot of dynamo's counters


def _timed(plan: Plan, fn: Callable[[], Any], calls: int) -> tuple[float, Any]:
    result = None
    gc_was_enabled = gc.isenabled()
    if plan.disable_gc:
        gc.disable()
    try:
        start = plan.timer()
        for _ in range(calls):
            result = fn()
        plan.sync()
        return plan.timer() - start, result
    finally:
        if gc_was_enabled:
            gc.enable()


def _warm_up(plan: Plan, targets: dict[str, Callable[[], Any]], series: dict[str, Series]) -> None:
    """Call each target until its times settle (lazy work must not land in the rounds), for at
    most ``plan.warmup_time``; a fixed schedule (pedantic) gives the count instead."""
    history: dict[str, list[float]] = {name: [] for name in targets}
    fixed = plan.warmup_rounds is not None
    count = plan.warmup_rounds if fixed else 50
    deadline = plan.timer() + plan.warmup_time
    for _ in range(count):
        if not fixed and (_settled(history) or plan.timer() > deadline):
            break
        for name, fn in targets.items():
            history[name].append(_timed(plan, fn, 1)[0])
            series[name].warmup_calls += 1


def _settled(history: dict[str, list[float]]) -> bool:
    """The last three calls of every target within 10% of one another."""
    for times in history.values():
        last = times[-3:]
        if len(last) < 3 or max(last) > 1.1 * min(last):
            return False
    return True


def measure(
    targets: dict[str, Callable[[], Any]], plan: Plan
) -> tuple[dict[str, Series], dict[str, Any]]:
    """Measure ``targets`` (name -> no-argument callable) with rounds interleaved.

    Each round times the reference workload, then every target once (the order rotates, so
    drift and cache effects hit all alike). Returns the series and each target's last result.
    """
    series = {name: Series(name) for name in targets}
    results: dict[str, Any] = {}
    for name, fn in targets.items():
        series[name].first_call, results[name] = _timed(plan, fn, 1)
    if plan.reference is not None:
        for _ in range(3):  # the reference's own first calls are slow too
            plan.reference.time(plan.timer)
    _warm_up(plan, targets, series)
    plan.after_warmup()
    for name, fn in targets.items():
        estimate = max(_timed(plan, fn, 1)[0], 1e-9)
        series[name].iterations = plan.iterations or max(
            1, math.ceil(plan.min_round_time / estimate)
        )
    names = list(targets)
    deadline = plan.timer() + plan.budget
    rounds = 0
    while _more(plan, rounds, deadline):
        ref = plan.reference.time(plan.timer) if plan.reference else None
        shift = rounds % len(names)
        for name in names[shift:] + names[:shift]:
            s = series[name]
            elapsed, results[name] = _timed(plan, targets[name], s.iterations)
            s.samples.append(elapsed / s.iterations)
            if ref is not None:
                s.reference.append(ref / plan.reference.repeat)
        rounds += 1
    return series, results


def _more(plan: Plan, rounds: int, deadline: float) -> bool:
    if plan.rounds is not None:
        return rounds < plan.rounds
    return rounds < plan.min_rounds or plan.timer() < deadline
