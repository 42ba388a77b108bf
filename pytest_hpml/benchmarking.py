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
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from pytest_benchmark.fixture import BenchmarkFixture, FixtureAlreadyUsed

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
    """A fixed small training step on a device: convolution, matmul and a tiny MLP, forward
    and backward.

    Timed just before each round, it measures how fast this process runs right now (shared
    cores, frequency, neighbours), so that times from two processes can be compared. It mixes
    compute-bound, memory-bound and dispatch-bound work because a reference that is only one of
    these tracks a typical training step less well (measured: see README, "Noise").
    """

    repeat = 1

    def __init__(self, device: Any = None, sync: Callable[[], None] = lambda: None) -> None:
        import torch

        gen = torch.Generator().manual_seed(0)
        device = torch.device(device or "cpu")

        def weight(*shape: int) -> Any:
            return (torch.randn(*shape, generator=gen) / shape[-1] ** 0.5).to(device)

        self.images = torch.randn(2, 3, 32, 32, generator=gen).to(device)
        self.inputs = torch.randn(64, 128, generator=gen).to(device)
        self.square = weight(192, 192)
        self.params = [
            weight(8, 3, 3, 3).requires_grad_(),
            weight(10, 8 * 32 * 32).requires_grad_(),
            weight(128, 128).requires_grad_(),
            weight(10, 128).requires_grad_(),
        ]
        self.sync = sync

    def step(self) -> None:
        import torch.nn.functional as F

        conv, head, hidden, out = self.params
        for _ in range(2):
            features = F.conv2d(self.images, conv, padding=1).relu().flatten(1)
            F.linear(features, head).sum().backward()
            (self.square @ self.square).sum()
            F.linear(F.linear(self.inputs, hidden).relu(), out).sum().backward()
        for param in self.params:
            param.grad = None

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


def metric(kind: str, unit: str, **fields: Any) -> dict[str, Any]:
    """One metric record as stored in baselines and reports.

    kinds: ``time`` (seconds per call; samples with the reference times of their rounds),
    ``rate`` (per second, higher is better; samples), ``ratio`` (a speed-up measured in one
    run, higher is better; paired samples), ``count`` (a deterministic value).
    """
    portable = fields.pop("portable", kind == "count")
    return {"kind": kind, "unit": unit, "portable": portable, **fields}


def time_metric(series: Series) -> dict[str, Any]:
    return metric(
        "time",
        "s",
        samples=series.samples,
        reference=series.reference,
        first_call=series.first_call,
        warmup_calls=series.warmup_calls,
        iterations=series.iterations,
    )


def rate_metric(series: Series, amount: float, unit: str) -> dict[str, Any]:
    """``amount`` per call (samples, FLOPs) divided by each round's time."""
    return metric(
        "rate",
        unit,
        samples=[amount / s for s in series.samples],
        reference=series.reference,
    )


def model_size(model: Any) -> tuple[int, int]:
    """Parameters and their bytes (buffers included in the bytes)."""
    params = list(model.parameters())
    count = sum(p.numel() for p in params)
    size = sum(t.numel() * t.element_size() for t in [*params, *model.buffers()])
    return count, size


def count_flops(fn: Callable[[], Any]) -> int | None:
    """FLOPs of one call, counted by torch's FlopCounterMode (None if it cannot run under it)."""
    import warnings

    from torch.utils.flop_counter import FlopCounterMode

    try:
        with warnings.catch_warnings(), FlopCounterMode(display=False) as counter:
            # The counter's global module hooks make a compiled module warn; counting is fine.
            warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)`")
            fn()
    except Exception:  # e.g. a compiled graph that cannot run under a dispatch mode
        return None
    return int(counter.get_total_flops())


class HpmlBenchmark(BenchmarkFixture):
    """pytest-benchmark's ``benchmark`` fixture, measured the pytest-hpml way.

    Use it as before, ``benchmark(fn, *args)`` or ``benchmark.pedantic(...)``: pytest-benchmark's
    options, tables, JSON and comparisons keep working. pytest-hpml adds to each round the
    device synchronization and the reference workload, warms up first (reporting the first
    call), and offers :meth:`track` (model and batch size: parameters, FLOPs, throughput),
    :meth:`variants` (named callables measured interleaved, with speed-ups) and :meth:`record`
    (any deterministic metric). What is measured is kept in ``metrics`` for the baselines.
    """

    @classmethod
    def adopt(cls, fixture: BenchmarkFixture, plan: Plan, batch_size: int | None) -> HpmlBenchmark:
        """Take over pytest-benchmark's fixture object, sharing its state (pytest-benchmark
        still finds a ``BenchmarkFixture`` whose stats and flags are the ones it made)."""
        self = cls.__new__(cls)
        self.__dict__ = fixture.__dict__
        self._plan = plan
        self._batch_size = batch_size
        self._model = None
        self._flops = False
        self.metrics = {}
        return self

    def track(
        self, *, model: Any = None, batch_size: int | None = None, flops: bool = True
    ) -> HpmlBenchmark:
        """Say what one call processes: adds parameters, FLOPs, throughput and FLOP/s."""
        self._model = model
        self._flops = flops
        if batch_size is not None:
            self._batch_size = batch_size
        return self

    def record(
        self,
        name: str,
        value: float,
        *,
        unit: str = "",
        tolerance: float = 0.0,
        portable: bool = True,
        higher_is_worse: bool = True,
    ) -> None:
        """Record a deterministic metric (graph breaks, bytes moved, ...) to compare with the
        baseline exactly or within ``tolerance`` (relative)."""
        self.metrics[name] = metric(
            "count",
            unit,
            value=value,
            tolerance=tolerance,
            portable=portable,
            higher_is_worse=higher_is_worse,
        )

    def cite(self, name: str, value: float, source: str) -> None:
        """Show a published figure (a book's, a paper's) beside the metric ``name`` measured
        here: reference data for the reader, never judged. Nothing to cite beside when timing is
        off (``--benchmark-disable``, xdist)."""
        if self.disabled:
            return
        if name not in self.metrics:
            measured = ", ".join(self.metrics) or "none yet"
            raise ValueError(f"cite() after measuring: no metric {name!r} (measured: {measured})")
        self.metrics[name]["cited"] = {"value": value, "source": source}

    def __call__(self, function_to_benchmark: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Benchmark ``function_to_benchmark(*args, **kwargs)``; returns its result."""
        call = _bind(function_to_benchmark, args, kwargs)
        self._claim("benchmark(...)")
        if self.disabled:
            return call()
        compiled = DynamoCounters()
        series, results = measure({"time": call}, replace(self._plan, after_warmup=compiled.mark))
        self._feed(series["time"])
        self.metrics["time"] = time_metric(series["time"])
        self._describe(call, series["time"])
        for name, value in compiled.metrics().items():
            self.record(name, value)
        return results["time"]

    def variants(
        self,
        targets: dict[str, Callable[[], Any]],
        *,
        baseline: str | None = None,
        tolerance: float | None = None,
    ) -> dict[str, Series]:
        """Measure named callables with their rounds interleaved; record each one's time and
        the speed-up of each over ``baseline`` (default: the first) as paired-round ratios."""
        if len(targets) < 2:
            raise ValueError("variants() needs at least two named callables")
        baseline = baseline or next(iter(targets))
        if baseline not in targets:
            raise ValueError(f"baseline {baseline!r} is not one of {', '.join(targets)}")
        self._claim("variants(...)")
        if self.disabled:  # --benchmark-disable, or xdist: run each once, measure nothing
            return {
                name: Series(name, first_call=_timed(self._plan, fn, 1)[0])
                for name, fn in targets.items()
            }
        compiled = DynamoCounters()
        series, _ = measure(targets, replace(self._plan, after_warmup=compiled.mark))
        self._feed(series[baseline])
        self.extra_info["hpml_variants"] = {n: s.median for n, s in series.items()}
        base = series[baseline]
        for name, s in series.items():
            self.metrics[f"time[{name}]"] = time_metric(s)
            if self._batch_size:
                self.metrics[f"throughput[{name}]"] = rate_metric(s, self._batch_size, "samples/s")
            if name != baseline:
                ratios = [b / c for b, c in zip(base.samples, s.samples)]
                self.metrics[f"speedup[{name}/{baseline}]"] = metric(
                    "ratio", "x", samples=ratios, tolerance=tolerance
                )
        for name, value in compiled.metrics().items():  # of all the variants together
            self.record(name, value)
        return series

    def pedantic(
        self,
        target: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        setup: Callable[[], Any] | None = None,
        teardown: Callable[..., Any] | None = None,
        rounds: int = 1,
        warmup_rounds: int = 0,
        iterations: int = 1,
    ) -> Any:
        """pytest-benchmark's pedantic mode, its schedule kept as given; rounds end with the
        device synchronized and, where a setup is allowed (iterations == 1), start after the
        reference workload."""
        if self.disabled:
            return super().pedantic(
                target, args, kwargs, setup, teardown, rounds, warmup_rounds, iterations
            )
        plan, clock = self._plan, self._timer
        references: list[float] = []
        first: list[float] = []

        def timer() -> float:
            plan.sync()
            return clock()

        def timed_target(*a: Any, **k: Any) -> Any:
            if first:
                return target(*a, **k)
            start = clock()
            result = target(*a, **k)
            plan.sync()
            first.append(clock() - start)
            return result

        def setup_with_reference() -> Any:
            references.append(plan.reference.time(clock))
            return setup() if setup else None

        use_reference = plan.reference is not None and iterations == 1
        self._timer = timer
        result = super().pedantic(
            timed_target,
            args,
            kwargs,
            setup_with_reference if use_reference else setup,
            teardown,
            rounds,
            warmup_rounds,
            iterations,
        )
        samples = list(self.stats.stats.data)
        series = Series("time", samples, references[-len(samples) :] if use_reference else [])
        series.first_call, series.iterations = first[0], iterations
        series.warmup_calls = warmup_rounds * iterations
        self.metrics["time"] = time_metric(series)
        self._describe(None, series)
        return result

    def settle(self) -> None:
        """At teardown: a test that only recorded deterministic metrics has used the fixture,
        which pytest-benchmark would otherwise call "not used at all"."""
        if not self._mode and self.metrics:
            self._mode = "record(...)"

    def _claim(self, mode: str) -> None:
        """pytest-benchmark's rule: one measurement per test."""
        if self._mode:
            self.has_error = True
            raise FixtureAlreadyUsed(
                f"Fixture can only be used once. Previously it was used in {self._mode} mode."
            )
        self._mode = mode

    def _feed(self, series: Series) -> None:
        """Hand the rounds to pytest-benchmark, so its table, JSON and compare see them."""
        stats = self._make_stats(series.iterations)
        for sample in series.samples:
            stats.update(sample * series.iterations)
        self.extra_info["hpml_first_call_s"] = series.first_call

    def _describe(self, call: Callable[[], Any] | None, series: Series) -> None:
        """Metrics besides time: throughput, parameters, FLOPs, FLOP/s and peak memory."""
        if self._batch_size:
            self.metrics["throughput"] = rate_metric(series, self._batch_size, "samples/s")
        if self._model is not None:
            params, size = model_size(self._model)
            self.record("params", params)
            self.record("param_bytes", size, unit="B")
        if self._flops and call is not None:
            flops = count_flops(call)
            if flops:
                self.record("flops", flops, unit="FLOP")
                self.metrics["flop_rate"] = rate_metric(series, flops, "FLOP/s")
            self._record_memory(call)

    def _record_memory(self, call: Callable[[], Any]) -> None:
        """Peak memory of one call: CUDA's allocator on a GPU (same GPU model and torch only),
        else the tensors the call allocates, which is the same on any machine."""
        device = self._plan.device
        if getattr(device, "type", None) == "cuda":
            peak = cuda_peak_memory(call, device, self._plan.sync)
            self.record("peak_memory", peak, unit="B", tolerance=0.05, portable=False)
        elif getattr(device, "type", "cpu") == "cpu":
            peak = tracked_peak_memory(call)
            if peak is not None:
                self.record("peak_memory", peak, unit="B")


def cuda_peak_memory(call: Callable[[], Any], device: Any, sync: Callable[[], None]) -> int:
    """Bytes CUDA's caching allocator held at most during one call, above what was there."""
    import torch

    sync()
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    call()
    sync()
    return int(torch.cuda.max_memory_allocated(device) - before)


def tracked_peak_memory(call: Callable[[], Any]) -> int | None:
    """Most bytes of tensor storage that one call had allocated at once (its own allocations,
    freed ones subtracted), counted by a dispatch mode: the same from run to run."""
    from .memory import StorageTracker

    try:
        with StorageTracker() as tracker:
            call()
    except Exception:  # e.g. compiled code that cannot run under a dispatch mode
        return None
    return tracker.peak


class DynamoCounters:
    """Graphs, graph breaks and recompilations of compiled code during a measurement, from
    dynamo's counters (nothing when torch.compile is not in use)."""

    def __init__(self) -> None:
        self.start = self.warm = _dynamo_counts()

    def mark(self) -> None:
        self.warm = _dynamo_counts()

    def metrics(self) -> dict[str, int]:
        if self.start is None or self.warm is None:
            return {}
        end = _dynamo_counts()
        graphs = self.warm["graphs"] - self.start["graphs"]
        if end["frames"] == self.start["frames"]:
            return {}  # dynamo saw no frame: no compiled code here
        # An explicit break counts under graph_break, an unsupported construct under
        # unimplemented, and a break inside an inlined module under both: the larger increase
        # does not count it twice (the larger total would hide breaks after earlier tests').
        breaks = max(self.warm[k] - self.start[k] for k in ("graph_break", "unimplemented"))
        # A frame dynamo gave up on entirely makes 0 graphs: recorded, so that it shows.
        return {
            "graphs": graphs,
            "graph_breaks": breaks,
            "recompiles": end["graphs"] - self.warm["graphs"],
        }


def _dynamo_counts() -> dict[str, int] | None:
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.utils import counters

    return {
        "graphs": counters["stats"]["unique_graphs"],
        "graph_break": sum(counters["graph_break"].values()),
        "unimplemented": sum(counters["unimplemented"].values()),
        "frames": counters["frames"]["total"],
    }


def _bind(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[[], Any]:
    if not args and not kwargs:
        return fn
    return lambda: fn(*args, **kwargs)
