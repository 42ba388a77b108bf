"""Measurement on top of pytest-benchmark: device-correct rounds, warm-up, a reference workload
interleaved with the rounds, and named variants measured in one run.

pytest-benchmark's fixture keeps its options, statistics, JSON and comparison; what it lacks
for PyTorch is done here: each timed round ends with the device synchronized, lazy first-call
work (``torch.compile``, cuDNN autotuning, allocator growth) is absorbed and reported apart, and
every round is preceded by a fixed reference workload on the same device so that the time can
be normalized against how fast this process happens to run.
"""

from __future__ import annotations

import gc
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

from .stats import median

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


class Reference:
    """A fixed small training step (MLP forward and backward) on a device.

    Timed just before each round, it measures how fast this process runs right now (shared
    cores, frequency, neighbours), so that times from two processes can be compared.
    """

    def __init__(self, device: Any = None, sync: Callable[[], None] = lambda: None) -> None:
        import torch

        generator = torch.Generator().manual_seed(0)
        device = torch.device(device or "cpu")
        self.inputs = torch.randn(64, 128, generator=generator).to(device)
        self.layers = [
            torch.randn(128, 128, generator=generator).div(12).to(device).requires_grad_(),
            torch.randn(128, 10, generator=generator).div(12).to(device).requires_grad_(),
        ]
        self.sync = sync
        self.repeat = 8

    def step(self) -> None:
        hidden = (self.inputs @ self.layers[0]).relu()
        (hidden @ self.layers[1]).sum().backward()
        for layer in self.layers:
            layer.grad = None

    def time(self, timer: Timer) -> float:
        start = timer()
        for _ in range(self.repeat):
            self.step()
        self.sync()
        return timer() - start


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
        return median(self.samples)

    def normalized(self) -> list[float]:
        """Samples divided by this run's typical reference time (unitless)."""
        return normalize(self.samples, self.reference)


def normalize(samples: Sequence[float], reference: Sequence[float]) -> list[float]:
    """Express each sample in units of the run's median reference time."""
    if not reference:
        return list(samples)
    unit = median(reference)
    return [s / unit for s in samples]


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
    reference: Reference | None = None
    rounds: int | None = None  # fixed schedule (pedantic), instead of the budget
    iterations: int | None = None
    warmup_rounds: int | None = None


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
    """Call each target until its times settle: lazy work must not land in the rounds."""
    history: dict[str, list[float]] = {name: [] for name in targets}
    deadline = plan.timer() + plan.warmup_time
    for _ in range(50 if plan.warmup_rounds is None else plan.warmup_rounds):
        if plan.warmup_rounds is None and plan.timer() > deadline and _settled(history):
            break
        for name, fn in targets.items():
            history[name].append(_timed(plan, fn, 1)[0])
            series[name].warmup_calls += 1
        if plan.warmup_rounds is None and _settled(history) and len(history[name]) >= 3:
            break


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
    _warm_up(plan, targets, series)
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
