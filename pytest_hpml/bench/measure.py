"""How rounds are measured: device-correct timing, warm-up until times settle, and targets
measured with their rounds interleaved with the reference workload.

Each timed round ends with the device synchronized; lazy first-call work (``torch.compile``,
cuDNN autotuning, allocator growth) is absorbed in the warm-up and reported apart.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

Timer = Callable[[], float]

# pytest-hpml's own files: an error raised in one of them is pytest-hpml's (Note [Tracebacks]).
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def users_error(excinfo: Any) -> bool:
    """The ``__tracebackhide__`` of pytest-hpml's frames between a test and the code it
    benchmarks: hidden when the error was raised by that code, or by pytest-hpml refusing what
    the test asked (in a frame marked ``__tracebackhide__ = True``); shown when it was raised in
    pytest-hpml's own code, which then broke, so that a bug report has its lines (Note
    [Tracebacks])."""
    if excinfo is None or not excinfo.traceback:
        return True
    raised = excinfo.traceback[-1]
    if not str(raised.path).startswith(PACKAGE + os.sep):
        return True
    return raised.frame.f_locals.get("__tracebackhide__") is True


# pytest reads this in every frame of this module (Note [Tracebacks]).
__tracebackhide__ = users_error


def synchronizer(device: Any = None) -> Callable[[], None]:
    """A function that waits for work queued on ``device`` (or on any initialized accelerator)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return lambda: None
    kind = getattr(device, "type", None)
    if kind == "cuda" or (kind is None and torch.cuda.is_initialized()):
        return lambda: torch.cuda.synchronize(device)
    if kind == "mps":
        synchronize: Callable[[], None] = torch.mps.synchronize
        return synchronize
    return lambda: None


@dataclass
class Series:
    """The raw measurement of one callable."""

    name: str
    samples: list[float] = field(default_factory=list)  # seconds per call, one per sample
    cpu_samples: list[float] = field(default_factory=list)  # the same, on ``Plan.cpu_clock``
    reference: list[float] = field(default_factory=list)  # latest reference time at each sample
    first_call: float = math.nan  # seconds, lazy work included
    warmup_calls: int = 0
    iterations: int = 1  # calls per round
    rounds: list[float] = field(default_factory=list)  # seconds of each round (pytest-benchmark's)
    rounds_per_sample: int = 1
    references_timed: int = 0  # how often the reference workload ran during the rounds
    reference_seconds: float = 0.0  # and how long, in all
    seconds: float = 0.0  # wall time of the rounds of all targets, the reference included
    load: float | None = None  # 1-minute load average per usable core when the rounds ended
    # where each slice of a pair's process began, as indices into ``samples`` (Note [Slices])
    slices: list[int] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


# A benchmark stops once it has this many samples, budget or not: beyond it a median no longer
# moves by more than processes differ (Note [Samples and rounds]).
ENOUGH_SAMPLES = 300
MIN_SAMPLES = 5  # fewer than this are judged inconclusive
# A budget of 0 s: the first call and one sample of one call, no warm-up. A run that only
# checks that its benchmarks work gets it: the session of --hpml-against, whose pairs of
# processes measure (Note [Cheaper processes]).
ONE_SAMPLE: dict[str, int] = {"rounds": 1, "warmup_rounds": 0, "iterations": 1}
WARMUP_TIME = 0.5  # seconds: at most this long (and 50 calls) warming up after the first call
# A process of the pairs of --hpml-against (Note [Samples and rounds], pairs): at least this
# many samples, and a warm-up no longer than its window of rounds.
PAIR_SAMPLES = 3


def paired(budget: float) -> dict[str, float]:
    """The plan of a process of the pairs, given its window of rounds (``budget``, seconds):
    the pairs' processes, not one process's samples, carry the verdict."""
    warmup = min(budget, WARMUP_TIME)
    return {"min_samples": PAIR_SAMPLES, "min_rounds": PAIR_SAMPLES, "warmup_time": warmup}


# A call whose warm-up lasted this many rounds makes a round by itself: pytest-benchmark's
# calibration, asked, would time it once more only to choose one call (Note [Samples and rounds]).
LONG_CALL = 100


@dataclass
class Plan:
    """How long and how to measure."""

    budget: float = 3.0  # seconds of rounds at most, reference included
    min_rounds: int = 5
    min_samples: int = MIN_SAMPLES  # samples at least, budget or not
    round_time: float = 5e-6  # a round lasts at least this (pytest-benchmark's calibration)
    calibrate: Callable[[Callable[[], Any]], int] | None = None  # calls per round, if given
    min_round_time: float = 1e-3  # a sample (a run of rounds) lasts at least this
    enough_samples: int = ENOUGH_SAMPLES
    reference_share: float = 0.2  # the reference workload's share of the rounds' time, at most
    warmup_time: float = WARMUP_TIME
    disable_gc: bool = False
    timer: Timer = time.perf_counter
    cpu_clock: Timer | None = None  # also time each sample on this (Note [Thread clock])
    sync: Callable[[], None] = lambda: None
    reference: Any = None  # a reference workload (see .reference), timed before each round
    rounds: int | None = None  # fixed schedule (pedantic), instead of the budget
    iterations: int | None = None
    warmup_rounds: int | None = None
    device: Any = None  # where peak memory is measured
    after_warmup: Callable[[], None] = lambda: None  # e.g. a snapshot of dynamo's counters
    # the first warm-up call's result, checked before more calls (a coroutine refused at once)
    first_result: Callable[[Any], Any] = lambda result: result
    # after the warm-up, before the calibration and the rounds: a rerun process of a pair waits
    # for its turn (reruns.Turn); the first call and the warm-up need none (Note [Cheaper
    # processes])
    before: Callable[[], None] = lambda: None
    # every slice of measuring, between samples: a pair's process lets the other one measure a
    # slice (Note [Slices]); the pause does not count against the budget
    between: Callable[[], None] = lambda: None
    slice: float = 0.0  # seconds; 0: no pauses


def _timed(plan: Plan, fn: Callable[[], Any], calls: int) -> tuple[float, Any]:
    __tracebackhide__ = True  # calls the benchmarked code: what fails here is that code's
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


def _warm_up(
    plan: Plan, targets: dict[str, Callable[[], Any]], series: dict[str, Series]
) -> dict[str, list[float]]:
    """Call each target until its times settle (lazy work must not land in the rounds), for at
    most ``plan.warmup_time``; a fixed schedule (pedantic) gives the count instead. Returns the
    warm-up times of each target."""
    history: dict[str, list[float]] = {name: [] for name in targets}
    fixed = plan.warmup_rounds is not None
    count = 50 if plan.warmup_rounds is None else plan.warmup_rounds
    deadline = plan.timer() + plan.warmup_time
    for _ in range(count):
        if not fixed and (_settled(history) or plan.timer() > deadline):
            break
        for name, fn in targets.items():
            elapsed, result = _timed(plan, fn, 1)
            if not history[name]:
                plan.first_result(result)
            history[name].append(elapsed)
            series[name].warmup_calls += 1
    return history


def _settled(history: dict[str, list[float]]) -> bool:
    """The last three calls of every target within 10% of one another."""
    for times in history.values():
        last = times[-3:]
        if len(last) < 3 or max(last) > 1.1 * min(last):
            return False
    return True


class Cadence:
    """The reference workload, timed again only when the rounds since its last run took at
    least ``(1 - share) / share`` times as long as that run: it never takes more than its share
    of the time, and a long benchmark still gets it before every sample (Note [Samples and
    rounds])."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.latest: float | None = None
        self.cost = 0.0
        self.ended = 0.0

    def value(self, owner: Series) -> float | None:
        """The reference time to normalize the next sample by, timed again if due."""
        plan = self.plan
        if plan.reference is None:
            return None
        share = plan.reference_share
        if self.latest is None or (plan.timer() - self.ended) * share >= self.cost * (1 - share):
            self.cost = plan.reference.time(plan.timer)
            self.ended = plan.timer()
            self.latest = self.cost / plan.reference.repeat
            owner.references_timed += 1
            owner.reference_seconds += self.cost
        return self.latest


def _calibrate(plan: Plan, fn: Callable[[], Any], s: Series, warm: list[float]) -> None:
    """Calls per round (a round lasts ``round_time``, as pytest-benchmark's do) and rounds per
    sample (a sample lasts ``min_round_time``); a fixed schedule keeps one round a sample.
    ``plan.calibrate`` (pytest-benchmark's own calibration) chooses the calls where given;
    else a round is timed and lengthened until it lasts long enough, as pytest-benchmark does:
    the time of one call alone overstates a short call by the clock's own cost. A call whose
    warm-up lasted :data:`LONG_CALL` rounds is one call a round, without timing it again
    (Note [Samples and rounds])."""
    fastest = min(warm[-3:], default=0.0)  # seconds a call; 0: not warmed up
    if plan.iterations is not None:
        s.iterations = plan.iterations
        if plan.rounds is not None:  # a fixed schedule: a round a sample, nothing to estimate
            return
    elif fastest >= LONG_CALL * plan.round_time:
        s.iterations = 1
    elif plan.calibrate is not None:
        s.iterations = plan.calibrate(fn)
        fastest = _timed(plan, fn, s.iterations)[0] / s.iterations
    else:
        s.iterations, fastest = _lengthened(plan, fn, _call_time(plan, fn, fastest))
    if plan.rounds is None:
        estimate = _call_time(plan, fn, fastest)
        s.rounds_per_sample = max(1, math.ceil(plan.min_round_time / (s.iterations * estimate)))


def _call_time(plan: Plan, fn: Callable[[], Any], known: float) -> float:
    """``known`` seconds a call, else one call timed now."""
    return max(known or _timed(plan, fn, 1)[0], 1e-9)


def _lengthened(plan: Plan, fn: Callable[[], Any], estimate: float) -> tuple[int, float]:
    """Calls per round, raised until a timed round lasts ``round_time``, and the time of a
    call that round gives."""
    iterations = max(1, math.ceil(plan.round_time / estimate))
    for _ in range(5):
        elapsed = _timed(plan, fn, iterations)[0]
        if elapsed >= plan.round_time:
            return iterations, max(elapsed / iterations, 1e-9)
        iterations = math.ceil(iterations * 1.2 * plan.round_time / max(elapsed, 1e-9))
    return iterations, estimate


def measure(
    targets: dict[str, Callable[[], Any]], plan: Plan
) -> tuple[dict[str, Series], dict[str, Any]]:
    """Measure ``targets`` (name -> no-argument callable) with rounds interleaved.

    Each sample is a run of rounds of every target in turn (the order rotates, so drift and
    cache effects hit all alike), normalized by the reference time taken just before it or,
    for short samples, at most a few samples earlier (:class:`Cadence`). Returns the series and
    each target's last result.
    """
    series = {name: Series(name) for name in targets}
    results: dict[str, Any] = {}
    for name, fn in targets.items():
        series[name].first_call, results[name] = _timed(plan, fn, 1)
    if plan.reference is not None:
        for _ in range(3):  # the reference's own first calls are slow too
            plan.reference.time(plan.timer)
    warm = _warm_up(plan, targets, series)
    plan.after_warmup()
    plan.before()  # a pair's process warmed up beside the other; it calibrates in its turn
    for name, fn in targets.items():
        _calibrate(plan, fn, series[name], warm[name])
    names, first = list(targets), series[next(iter(targets))]
    cadence = Cadence(plan)
    deadline, began = plan.timer() + plan.budget, time.perf_counter()
    ends = plan.timer() + plan.slice if plan.slice else math.inf  # this slice
    paused = 0.0  # seconds the other process of a pair measured, in all
    while _more(plan, len(first.samples), len(first.rounds), deadline):
        ref = cadence.value(first)
        shift = len(first.samples) % len(names)
        for name in names[shift:] + names[:shift]:
            results[name] = _sample(plan, targets[name], series[name], ref)
        now = plan.timer() if plan.slice else 0.0
        if now >= ends:
            plan.between()
            resumed = plan.timer()
            deadline, paused = deadline + resumed - now, paused + resumed - now
            ends = resumed + plan.slice
            for s in series.values():  # every target has as many samples here
                s.slices.append(len(s.samples))
    load = load_per_core()
    for s in series.values():
        s.seconds, s.load = time.perf_counter() - began - paused, load
    return series, results


def load_per_core() -> float | None:
    """The 1-minute load average per CPU this process may use (None where there is none):
    above 1, runnable work was waiting for a core (Note [Busy machine])."""
    from ..config.values import usable_cpus

    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    return round(load / usable_cpus(), 3)


def _sample(plan: Plan, fn: Callable[[], Any], s: Series, ref: float | None) -> Any:
    """One sample of ``fn``: ``rounds_per_sample`` rounds, each kept for pytest-benchmark.
    The CPU clock, where asked for, is read around the whole sample (at least 1 ms), not
    around each round: reading it costs a system call."""
    total, result, calls = 0.0, None, s.iterations * s.rounds_per_sample
    cpu_start = plan.cpu_clock() if plan.cpu_clock else 0.0
    for _ in range(s.rounds_per_sample):
        elapsed, result = _timed(plan, fn, s.iterations)
        s.rounds.append(elapsed)
        total += elapsed
    if plan.cpu_clock:
        s.cpu_samples.append((plan.cpu_clock() - cpu_start) / calls)
    s.samples.append(total / calls)
    if ref is not None:
        s.reference.append(ref)
    return result


def _more(plan: Plan, samples: int, rounds: int, deadline: float) -> bool:
    if plan.rounds is not None:
        return samples < plan.rounds
    in_time = plan.timer() < deadline
    if samples < plan.min_samples or rounds < plan.min_rounds:
        return True
    return in_time and samples < plan.enough_samples
