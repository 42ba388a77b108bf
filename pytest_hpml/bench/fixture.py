"""The ``benchmark`` fixture and what the plugin hands it.

As pytest-benchmark's plugin builds its fixture with ``add_stats=`` and ``logger=``, this
fixture is given its collaborators in a :class:`BenchSession` (in ``config.stash``): how long a
test may measure here, and how to make the reference workload. It reaches no other layer; the
verdict layer finds the measured fixture in the test's stash (:data:`BENCHMARK_KEY`).

This module is light (registered at start-up); the measuring code is imported when a test
first asks for ``benchmark``.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import pytest

from .. import _compat
from ..config import markers

if TYPE_CHECKING:
    from .benchmark import HpmlBenchmark


class Peaks(NamedTuple):
    """How a benchmark learns its device's dense peak FLOP/s, for ``mfu`` (Note [MFU])."""

    # (torch.device, precision) -> FLOP/s, or None: --hpml-peak-flops, else the hook
    ask: Callable[[Any, str], Any]
    # whether anything besides the table may answer (--hpml-peak-flops, a project's hook), so
    # that a device the table lacks (the CPU) is worth counting FLOPs for
    beyond_table: Callable[[], bool]


class BenchSession(NamedTuple):
    """The benchmark fixture's collaborators, set up by the plugin."""

    # seconds of rounds for a test id, in this process; 0: one sample (measure.ONE_SAMPLE)
    budget: Callable[[str], float]
    reference: Callable[[Any, Callable[[], None]], Any]  # (device, sync) -> reference workload
    threads: int | None = None  # torch's intra-op threads while measuring; None: leave them
    seed: int = 0  # random, numpy and torch seeded with it before each measurement
    thread_clock: bool = False  # time samples on the thread's CPU clock too (Note [Thread clock])
    xdist_worker: bool = False  # timing is off here, but the work is counted (Note [Work counters])
    # in the process under valgrind: counts instructions instead of timing (instructions.Callgrind)
    callgrind: Any = None
    # the work counters and peak memory: off in a process that only times (they are the same in
    # every process; Note [Work counters]) and in the one counting instructions
    counts: bool = True
    peaks: Peaks | None = None  # None: no mfu metric
    # before a process's first measurement: its turn, in a pair's process (reruns.Turn)
    take_turn: Callable[[], None] = lambda: None
    # every slice of its turn (seconds; 0: none): a pair's process lets the other measure one
    pass_turn: Callable[[], None] = lambda: None
    slice: float = 0.0
    # a process of the pairs of --hpml-against: fewer samples, a shorter warm-up (measure.paired)
    paired: bool = False


BENCH_SESSION_KEY = pytest.StashKey[BenchSession]()
# a test's measured fixture, for the verdicts
BENCHMARK_KEY: pytest.StashKey[HpmlBenchmark] = pytest.StashKey()
PROPERTY = "hpml_benchmark"  # a benchmark's metrics and verdicts travel in reports as this


@pytest.fixture
def benchmark(benchmark: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """pytest-benchmark's ``benchmark``, measured by pytest-hpml and judged against baselines.

    See :class:`~pytest_hpml.bench.benchmark.HpmlBenchmark`. Rounds end with the test's device
    synchronized; with torch loaded, each round is preceded by the reference workload. torch's
    thread count and seed are set however the test imports torch (Note [Torch state]).
    """
    from ..hardware.torch_state import TorchState
    from .benchmark import HpmlBenchmark
    from .measure import Plan, users_error

    __tracebackhide__ = users_error  # a test's own failure at teardown shows the test's code
    _compat.check_pytest_benchmark()
    given = request.config.stash[BENCH_SESSION_KEY]
    device = request.getfixturevalue("device") if "device" in request.fixturenames else None
    state = TorchState(given.threads, given.seed)
    state.start()
    try:
        settings = markers.bench_settings(markers.bench_mark(request.node))
        budget = given.budget(request.node.nodeid)
        plan = Plan(
            budget=budget,
            round_time=_round_time(benchmark, device),
            calibrate=_calibration(benchmark, device),
            disable_gc=_compat.disable_gc(benchmark),
            timer=_compat.timer(benchmark),
            device=device,
            before=given.take_turn,
            between=given.pass_turn,
            slice=given.slice,
            **torch_parts(given, device),
            **_schedule(given, budget, benchmark),
        )
        value = HpmlBenchmark.adopt(
            benchmark,
            plan,
            settings,
            state=state,
            # a test that imports torch itself: its parts are made at the first measurement
            late=None if "torch" in sys.modules else functools.partial(torch_parts, given, device),
            count_disabled=given.xdist_worker,
            counts=given.counts,
            callgrind=given.callgrind if settings.instructions else None,
            peaks=given.peaks,
        )
        request.node.stash[BENCHMARK_KEY] = value
        yield value
        value.settle()  # before pytest-benchmark's own teardown, which this fixture depends on
    finally:
        state.stop()


def _schedule(given: BenchSession, budget: float, benchmark: Any) -> dict[str, Any]:
    """The least rounds (pytest-benchmark's), or a pair's process's plan, or one sample where
    the budget is 0 s."""
    from .measure import ONE_SAMPLE, paired

    schedule: dict[str, Any] = {"min_rounds": _compat.min_rounds(benchmark)}
    if given.paired:
        schedule.update(paired(budget))
    if budget == 0:
        schedule.update(ONE_SAMPLE)
    return schedule


def torch_parts(given: BenchSession, device: Any) -> dict[str, Any]:
    """The parts of a plan that depend on torch being loaded: the device's synchronization,
    the reference workload and the thread clock (a pure-Python benchmark need not pay for
    importing torch)."""
    from .measure import synchronizer

    sync = synchronizer(device)
    return {
        "sync": sync,
        "reference": given.reference(device, sync) if "torch" in sys.modules else None,
        "cpu_clock": time.thread_time if given.thread_clock and _on_host(device) else None,
    }


def callgrind(request: dict[str, Any] | None) -> Any:
    """In the process a run started under valgrind to count instructions (its rerun request
    says where callgrind writes), what counts them; None elsewhere."""
    if request is None:  # the first process and xdist workers do not import the module
        return None
    from .instructions import REQUEST_KEY, Callgrind

    return Callgrind(request[REQUEST_KEY]) if request.get(REQUEST_KEY) else None


def counts(request: dict[str, Any] | None) -> bool:
    """Whether this process records the work counters and peak memory: not a rerun asked only
    to time, nor the one counting instructions."""
    if request is None:
        return True
    from .instructions import REQUEST_KEY
    from .reruns import COUNTS_KEY

    return bool(request.get(COUNTS_KEY, True)) and not request.get(REQUEST_KEY)


def _round_time(benchmark: Any, device: Any) -> float:
    """pytest-benchmark's rounds on the CPU; a round that ends with an accelerator's
    synchronization lasts a sample, so that the synchronization does not dominate it."""
    from .measure import Plan

    if _synchronized(device):
        return Plan.min_round_time
    return _compat.round_target(benchmark)


def _calibration(benchmark: Any, device: Any) -> Callable[[Callable[[], Any]], int] | None:
    """pytest-benchmark's own choice of calls per round, on the CPU (Note [Samples and rounds])."""
    if _synchronized(device):
        return None
    return lambda function: _compat.calibrated_iterations(benchmark, function)


def _on_host(device: Any) -> bool:
    """Whether the test's work runs on this host's CPU alone: no accelerator in use, whose time
    a thread's CPU clock would not see."""
    torch = sys.modules.get("torch")
    cuda = torch is not None and torch.cuda.is_initialized()
    return getattr(device, "type", "cpu") == "cpu" and not cuda


def _synchronized(device: Any) -> bool:
    """Whether a round on ``device`` ends with an accelerator's synchronization."""
    return getattr(device, "type", "cpu") in ("cuda", "mps")
