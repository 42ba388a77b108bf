"""The ``benchmark`` fixture's value: pytest-benchmark's fixture, measured the pytest-hpml way.

pytest-benchmark's fixture keeps its options, statistics, JSON and comparison; what it lacks
for PyTorch is done by :mod:`.measure` (device-correct rounds, warm-up, interleaved targets),
:mod:`.reference` (the reference workload) and :mod:`.counters` (FLOPs, memory, compile
counts). Imported when a test first asks for ``benchmark``, never at plugin start-up.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import sys
from dataclasses import replace
from typing import Any, Callable

from .. import _compat
from ..config.markers import BenchSettings
from ..config.values import shown, usable_cpus
from ..hardware.torch_state import observed
from . import cores as cores_free
from . import metrics
from .counters import DynamoCounters, count_flops, model_size
from .declared import RATIO, Declarations, may_refuse
from .measure import Cadence, Plan, Series, _timed, measure, users_error

# pytest reads this in every frame of this module: a failure of the benchmarked code shows that
# code, not pytest-hpml's (Note [Tracebacks]).
__tracebackhide__ = users_error


def time_metric(
    series: Series, budget: float | None = None, state: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``budget``: the seconds of rounds this process was given (None or 0: a fixed schedule,
    0 being one sample); ``state``: torch's, while the rounds ran (Note [Torch state])."""
    return metrics.Time(
        "s",
        budget=budget or None,
        samples=series.samples,
        cpu_samples=series.cpu_samples or None,
        reference=series.reference,
        first_call=series.first_call,
        warmup_calls=series.warmup_calls,
        iterations=series.iterations,
        load=series.load,
        state=state or None,
        slices=series.slices or None,
    ).as_dict()


def rate_metric(
    series: Series, amount: float, unit: str, state: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``amount`` per call (samples, FLOPs) divided by each round's time."""
    samples, cpu = ([amount / s for s in times] for times in (series.samples, series.cpu_samples))
    return metrics.Rate(
        unit,
        samples=samples,
        cpu_samples=cpu or None,
        reference=series.reference,
        state=state or None,
        slices=series.slices or None,
    ).as_dict()


def _run_work(function: Callable[..., Any], result: Any) -> Any:
    """``result``, unless it is work not yet done: a generator or a coroutine was timed as it
    was made, not as it ran (a TypeError, so that no such time is recorded)."""
    __tracebackhide__ = True  # refuses the test's function (Note [Tracebacks])
    kinds = (
        (inspect.isgenerator, "a generator"),
        (inspect.iscoroutine, "a coroutine"),
        (inspect.isasyncgen, "an async generator"),
    )
    what = next((name for test, name in kinds if test(result)), None)
    if what is not None:
        if inspect.iscoroutine(result):
            result.close()  # never awaited: say so here, not in a RuntimeWarning
        name = getattr(function, "__qualname__", repr(function))
        raise TypeError(
            f"benchmark({shown(name)}) returned {what}: only its making was timed, not "
            "its work; benchmark a function that runs it (lambda: list(gen()) or "
            "asyncio.run(coro()))"
        )
    return result


class HpmlBenchmark(Declarations, _compat.benchmark_fixture_class()):  # type: ignore[misc]
    """pytest-benchmark's ``benchmark`` fixture, measured the pytest-hpml way.

    Use it as before, ``benchmark(fn, *args)`` or ``benchmark.pedantic(...)``: pytest-benchmark's
    options, tables, JSON and comparisons keep working. pytest-hpml adds to each round the
    device synchronization and the reference workload, warms up first (reporting the first
    call), and offers :meth:`track` (model and batch size: parameters, FLOPs, throughput),
    :meth:`variants` (named callables measured interleaved, with speed-ups) and :meth:`record`
    (any deterministic metric). What is measured is kept in ``metrics`` for the baselines.
    """

    _late: Callable[[], dict[str, Any]] | None  # the plan's torch parts, for a late torch
    _count_disabled: bool  # under xdist timing is off, but counts need no quiet cores
    superseded: list[str]

    @classmethod
    def adopt(
        cls,
        fixture: Any,
        plan: Plan,
        settings: BenchSettings,
        *,
        state: Any = None,
        late: Callable[[], dict[str, Any]] | None = None,
        count_disabled: bool = False,
        counts: bool = True,
        callgrind: Any = None,
        peaks: Any = None,
    ) -> HpmlBenchmark:
        """Take over pytest-benchmark's fixture object, sharing its state (pytest-benchmark
        still finds a ``BenchmarkFixture`` whose stats and flags are the ones it made)."""
        self = cls.__new__(cls)
        _compat.share_state(self, fixture)
        self._plan, self._settings, self._state, self._late = plan, settings, state, late
        self.state = {}
        # under xdist timing is off, but counts need no quiet cores (Note [Work counters])
        self._count_disabled = count_disabled
        self._counts, self._callgrind, self._peaks = counts, callgrind, peaks
        if callgrind is not None:  # as with --benchmark-disable: pedantic runs once, cite() no-op
            self.disabled = True
        self._batch_size = settings.batch_size
        self._tracked = False
        self._model = None
        self._flops = False
        self._work = {}
        self._counted = False
        self.work_seconds = 0.0
        self.instruction_seconds = 0.0
        self.uncounted = {}
        self.no_peak = None
        self._expected = {}
        self.accepted = {}
        self.metrics = {}
        self._recorded = set()
        self._refused = False
        self.superseded = superseded(fixture, plan)
        return self

    def __call__(self, function_to_benchmark: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Benchmark ``function_to_benchmark(*args, **kwargs)``; returns its result."""
        __tracebackhide__ = True  # calls the benchmarked code (Note [Tracebacks])
        call = _bind(function_to_benchmark, args, kwargs)
        self._claim("benchmark(...)")
        self._measures("time")  # in every mode, before any round
        self._ready()
        if self._callgrind is not None:
            return self._count_instructions({None: call})
        if self.disabled:  # --benchmark-disable, or xdist: timing is off
            result = _run_work(function_to_benchmark, call())
            if self._count_disabled or self._expected:
                self._count_work({None: call})
            return result
        compiled = DynamoCounters()
        made = functools.partial(_run_work, function_to_benchmark)
        plan = replace(self._plan, after_warmup=compiled.mark, first_result=made)
        series, results = measure({"time": call}, plan)
        made(results["time"])  # a pedantic schedule warms up by no call
        self._feed(series["time"])
        self.state = self._observe()
        self._put("time", time_metric(series["time"], self._plan.budget, self.state))
        self._count_work({None: call})  # before _describe, which takes its peak memory
        self._describe(call, series["time"])
        for name, value in compiled.metrics().items():
            self._record(name, value)
        if self.cprofile:
            return self._profile(call, series["time"])
        return results["time"]

    def _profile(self, call: Callable[[], Any], series: Series) -> Any:
        """--benchmark-cprofile: profile the call as pytest-benchmark does, after measuring."""
        __tracebackhide__ = True  # calls the benchmarked code (Note [Tracebacks])
        import cProfile

        loops = getattr(self, "cprofile_loops", None) or series.iterations
        profile, result = cProfile.Profile(), None
        for _ in range(loops):
            result = profile.runcall(call)
        _compat.save_cprofile(self, profile)
        return result

    @may_refuse
    def variants(
        self,
        targets: dict[str, Callable[[], Any]],
        *,
        baseline: str | None = None,
        tolerance: float | None = None,
        cores: dict[str, int] | None = None,
    ) -> dict[str, Series]:
        """Measure named callables with their rounds interleaved; record each one's time and
        the speed-up of each over ``baseline`` (default: the first) as paired-round ratios.
        ``cores``: how many cores a variant keeps busy (default 1); a speed-up where either
        side needs more than one is judged only where the host left them free (Note [Free
        cores])."""
        __tracebackhide__ = True  # calls the benchmarked code (Note [Tracebacks])
        if not isinstance(targets, dict):
            raise TypeError(f"{metrics.given('variants', 'targets', targets)}: give a dict")
        for name in targets:  # each names metrics: time[name], speedup[name/baseline]
            metrics.check_name("variants", "targets", targets, name)
        if tolerance is not None:
            tolerance = metrics.check_number("variants", "tolerance", tolerance, RATIO, 0)
        if len(targets) < 2:
            raise ValueError("variants() needs at least two named callables")
        baseline = baseline or next(iter(targets))
        if baseline not in targets:
            raise ValueError(f"baseline {baseline!r} is not one of {', '.join(targets)}")
        busy = _cores_of(targets, cores)
        self._claim("variants(...)")
        self._measures(*(f"time[{name}]" for name in targets))
        self._ready()
        if self._callgrind is not None:
            self._count_instructions(_by_variant(targets))
            return {name: Series(name) for name in targets}
        if self.disabled:  # --benchmark-disable, or xdist: run each once, count, time nothing
            found = {
                name: Series(name, first_call=_timed(self._plan, fn, 1)[0])
                for name, fn in targets.items()
            }
            if self._count_disabled or self._expected:
                self._count_work(_by_variant(targets))
            return found
        compiled = DynamoCounters()
        host = cores_free.snapshot()
        series, _ = measure(targets, replace(self._plan, after_warmup=compiled.mark))
        free = cores_free.free_cores(host, cores_free.snapshot())
        self._feed(series[baseline])
        base, state = series[baseline], self._observe()
        self.state = state
        for name, s in series.items():
            self._put(f"time[{name}]", time_metric(s, self._plan.budget, state))
            if self._batch_size:
                rate = rate_metric(s, self._batch_size, "samples/s", state)
                self._put(f"throughput[{name}]", rate)
            if name != baseline:
                ratios = [b / c for b, c in zip(base.samples, s.samples)]
                ratio = metrics.Ratio(
                    "x",
                    samples=ratios,
                    tolerance=tolerance,
                    tolerance_from="variants(tolerance=...)" if tolerance else None,
                    state=state or None,
                )
                if max(busy[name], busy[baseline]) > 1:  # a speed-up over more cores
                    ratio.cores = min(max(busy[name], busy[baseline]), usable_cpus())
                    ratio.free_cores = free
                self._put(f"speedup[{name}/{baseline}]", ratio.as_dict())
        for name, value in compiled.metrics().items():  # of all the variants together
            self._record(name, value)
        self._count_work(_by_variant(targets))
        for name, fn in targets.items():
            self._record_mfu(name, fn, series[name])
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
        self._measures("time", call="pedantic(...)")
        self._ready(turn=True)  # its schedule is the user's: the turn spans all of it
        if self.disabled:
            return super().pedantic(
                target, args, kwargs, setup, teardown, rounds, warmup_rounds, iterations
            )
        plan, clock = self._plan, _compat.timer(self)
        references: list[float] = []
        first: list[float] = []
        cadence, counted = Cadence(replace(plan, timer=clock)), Series("time")

        def timer() -> float:
            __tracebackhide__ = True  # calls the benchmarked code (Note [Tracebacks])
            plan.sync()
            return clock()

        def timed_target(*a: Any, **k: Any) -> Any:
            __tracebackhide__ = True  # calls the benchmarked code (Note [Tracebacks])
            if first:
                return target(*a, **k)
            start = clock()
            result = target(*a, **k)
            plan.sync()
            first.append(clock() - start)
            return result

        def setup_with_reference() -> Any:
            __tracebackhide__ = True  # calls the benchmarked code (Note [Tracebacks])
            reference = cadence.value(counted)
            if reference is not None:  # None: no reference workload, none kept
                references.append(reference)
            return setup() if setup else None

        use_reference = plan.reference is not None and iterations == 1
        _compat.set_timer(self, timer)
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
        samples = _compat.round_times(self)
        series = Series("time", samples, references[-len(samples) :] if use_reference else [])
        series.first_call, series.iterations = first[0], iterations
        series.references_timed = counted.references_timed
        series.reference_seconds = counted.reference_seconds
        series.warmup_calls = warmup_rounds * iterations
        self.state = self._observe()
        self._put("time", time_metric(series, state=self.state))
        self._describe(None, series)
        return result

    def settle(self) -> None:
        """At teardown: a test that only recorded deterministic metrics, or whose call was
        refused, has used the fixture, which pytest-benchmark would otherwise call "not used at
        all"."""
        __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
        if not _compat.mode(self) and (self.metrics or self._refused):
            _compat.set_mode(self, "record(...)")
        # a refused call failed the test already: nothing more to say (one message)
        if self._expected and not self._counted and not self.disabled and not self._refused:
            raise AssertionError(
                "benchmark.expect(...) was given, but nothing was benchmarked to check it on"
            )

    def _ready(self, turn: bool = False) -> None:
        """Before the first call: the plan's torch parts where the test imported torch after
        the fixture started, and the generators seeded, so that every process (both sides of
        ``--hpml-against`` too) draws the same random numbers (Note [Torch state]). With
        ``turn``, a pair's process then waits for its turn: a measurement that does not warm up
        in :func:`measure`, which waits there."""
        if self._late is not None and "torch" in sys.modules:
            self._plan = replace(self._plan, **self._late())
            self._late = None
        self._reseed()
        if turn:
            self._plan.before()

    def _observe(self) -> dict[str, Any]:
        """torch's state after the rounds, which the calls ran in, and the thread count this
        run asked for (Note [Torch state])."""
        asked = None if self._state is None else self._state.threads
        found = observed()
        return {**found, "asked": asked} if found and asked is not None else found

    def _claim(self, mode: str) -> None:
        """pytest-benchmark's rule: one measurement per test."""
        __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
        used = _compat.mode(self)
        if used:
            self.has_error = True
            raise _compat.fixture_already_used()(
                f"Fixture can only be used once. Previously it was used in {used} mode."
            )
        _compat.set_mode(self, mode)

    def _feed(self, series: Series) -> None:
        """Hand the rounds to pytest-benchmark, so its table, JSON and compare see them, and
        say how they were taken (its JSON ``options``, its ``--benchmark-verbose`` lines). The
        first call and the variants' times are hpml's metrics, kept in its report and
        baselines: the user's extra_info stays the user's."""
        stats = _compat.make_stats(self, series.iterations)
        for elapsed in series.rounds:
            stats.update(elapsed)
        plan = self._plan
        _compat.record_options(
            stats, max_time=plan.budget, min_time=plan.round_time, warmup=series.warmup_calls
        )
        for line in _verbose(series, plan):
            _compat.log(self, line)

    def _describe(self, call: Callable[[], Any] | None, series: Series) -> None:
        """Metrics besides time: throughput, parameters, FLOPs, FLOP/s, MFU and peak memory."""
        if self._batch_size:
            self._put("throughput", rate_metric(series, self._batch_size, "samples/s", self.state))
        if self._model is not None:
            params, size = model_size(self._model)
            self._record("params", params)
            self._record("param_bytes", size, "B")
        if self._flops and call is not None:  # in every process: FLOP/s needs its rounds
            flops = count_flops(call)
            if flops:
                self._record("flops", flops, "FLOP")
                self._put("flop_rate", rate_metric(series, flops, "FLOP/s", self.state))
            if self._counts:
                self._record_memory(call)
        if call is not None:
            self._record_mfu(None, call, series)


def _bind(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[[], Any]:
    if not args and not kwargs:
        return fn

    def bound() -> Any:
        __tracebackhide__ = True  # calls the benchmarked code (Note [Tracebacks])
        return fn(*args, **kwargs)

    return bound


def _verbose(series: Series, plan: Plan) -> list[str]:
    """What --benchmark-verbose shows of pytest-hpml's measuring, in pytest-benchmark's words."""
    lines = [
        f"  pytest-hpml: first call {series.first_call:.3g}s, then {series.warmup_calls} "
        "warm-up calls until three agree within 10%",
        f"  pytest-hpml: {len(series.rounds)} rounds x {series.iterations} iterations "
        f"({len(series.samples)} samples of {series.rounds_per_sample} rounds; "
        f"budget {plan.budget:g}s)",
        f"  Ran for {series.seconds:.3f}s.",  # pytest-benchmark's words for its own rounds
    ]
    if series.references_timed:
        lines.append(
            f"  Reference workload timed {series.references_timed} times, "
            f"{series.reference_seconds:.3g}s in all"
        )
    return lines


def _by_variant(targets: dict[str, Callable[[], Any]]) -> dict[str | None, Callable[[], Any]]:
    """Named callables as the work counters key them (None: the one call of ``benchmark()``)."""
    return {name: target for name, target in targets.items()}


def superseded(fixture: Any, plan: Plan) -> list[str]:
    """pytest-benchmark settings this run asked for that pytest-hpml decides instead."""
    why = {
        "max_time": f"superseded by --hpml-bench-time ({plan.budget:g}s of rounds here, fewer "
        "once a benchmark has enough samples)",
        "warmup": "superseded: pytest-hpml warms up every benchmark until three calls agree "
        "within 10%",
        "precision": "superseded: pytest-hpml stops once a benchmark has enough samples or its "
        "--hpml-bench-time is spent",
    }
    return [
        f"pytest-benchmark's {name} is {why[name]}" for name in _compat.changed_settings(fixture)
    ]


def _cores_of(targets: dict[str, Any], cores: Any) -> dict[str, int]:
    """``variants(cores=...)`` checked at the call: each variant's cores, 1 where not named."""
    __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
    if cores is None:
        return dict.fromkeys(targets, 1)
    if not isinstance(cores, dict):
        raise TypeError(
            f"{metrics.given('variants', 'cores', cores)}: give a dict of variant names to "
            "the cores each keeps busy"
        )
    for name, count in cores.items():
        if name not in targets:
            raise ValueError(
                f"{metrics.given('variants', 'cores', cores)}: {name!r} is not one of the "
                f"variants ({', '.join(map(repr, targets))})"
            )
        if not isinstance(count, numbers.Integral) or isinstance(count, bool) or count < 1:
            raise ValueError(
                f"{metrics.given('variants', 'cores', cores)}: {name!r} must keep a whole "
                "number of cores >= 1 busy"
            )
    return {name: int(cores.get(name, 1)) for name in targets}
