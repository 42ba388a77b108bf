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
import time
from dataclasses import replace
from typing import Any, Callable, TypeVar, cast

from .. import _compat
from ..config.markers import BenchSettings
from ..config.values import shown, usable_cpus
from ..hardware.torch_state import observed
from . import cores as cores_free
from . import metrics
from .counters import DynamoCounters, count_flops, cuda_peak_memory, model_size, tracked_peak_memory
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


Call = TypeVar("Call", bound=Callable[..., Any])


def _may_refuse(method: Call) -> Call:
    """A call whose arguments the benchmark checks: refused, it still used the fixture, so that
    pytest-benchmark adds no "not used at all" to the refusal (one message per bad input)."""

    @functools.wraps(method)
    def call(self: HpmlBenchmark, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception:
            self._refused = True
            raise

    return cast(Call, call)


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


class HpmlBenchmark(_compat.benchmark_fixture_class()):  # type: ignore[misc]
    """pytest-benchmark's ``benchmark`` fixture, measured the pytest-hpml way.

    Use it as before, ``benchmark(fn, *args)`` or ``benchmark.pedantic(...)``: pytest-benchmark's
    options, tables, JSON and comparisons keep working. pytest-hpml adds to each round the
    device synchronization and the reference workload, warms up first (reporting the first
    call), and offers :meth:`track` (model and batch size: parameters, FLOPs, throughput),
    :meth:`variants` (named callables measured interleaved, with speed-ups) and :meth:`record`
    (any deterministic metric). What is measured is kept in ``metrics`` for the baselines.
    """

    _plan: Plan
    _settings: BenchSettings
    _state: Any  # hardware.torch_state.TorchState: threads and seed (None: none)
    _late: Callable[[], dict[str, Any]] | None  # the plan's torch parts, for a late torch
    state: dict[str, Any]  # torch's state while the rounds ran
    _count_disabled: bool  # under xdist timing is off, but counts need no quiet cores
    _counts: bool  # off: another process counts them (they are the same in all)
    _callgrind: Any  # under valgrind: instructions counted, nothing timed
    _peaks: Any  # fixture.Peaks: how the device's peak is found, for mfu
    _batch_size: int | None
    _tracked: bool  # track() says what one call processes, once
    _model: Any
    _flops: bool
    _work: dict[str | None, Any]  # the work counted: variant (None) -> counters
    _counted: bool  # whether the work was counted (or could not be)
    work_seconds: float  # what counting it took
    instruction_seconds: float  # what counting its instructions took, under valgrind
    uncounted: dict[str, str]  # instruction metric -> why it was not counted
    no_peak: str | None  # why a step with FLOPs has no mfu (Note [MFU])
    _expected: dict[str | None, dict[str, float]]  # variant -> bounds
    accepted: dict[str, dict[str, str]]  # metric -> change and reason
    metrics: dict[str, dict[str, Any]]  # metric -> record
    _recorded: set[str]  # the metrics the test recorded (record())
    _refused: bool  # whether a call of the test's failed (_may_refuse)
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

    @_may_refuse
    def track(
        self, *, model: Any = None, batch_size: int | None = None, flops: bool = True
    ) -> HpmlBenchmark:
        """Say what one call processes: adds parameters, FLOPs, throughput and FLOP/s."""
        __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
        metrics.check_flag("track", "flops", flops)
        if self._tracked:  # the second replaced the first, unsaid
            raise ValueError("track() was called already: give all its arguments in one call")
        if batch_size is not None:
            given = metrics.given("track", "batch_size", batch_size)
            if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
                raise TypeError(f"{given}: give {BATCH}")
            batch_size = metrics.check_number("track", "batch_size", batch_size, BATCH, 1)
            if self._batch_size and batch_size != self._batch_size:  # the mark's lost, unsaid
                raise ValueError(
                    f"{given}: hpml_bench gives batch_size={self._batch_size:g}; give it in one "
                    "place"
                )
            self._batch_size = batch_size
        torch = sys.modules.get("torch")  # a module of torch's means torch is imported
        if model is not None and (torch is None or not isinstance(model, torch.nn.Module)):
            raise TypeError(f"{metrics.given('track', 'model', model)}: give a torch.nn.Module")
        self._model, self._flops, self._tracked = model, flops, True
        return self

    @_may_refuse
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
        baseline exactly or within ``tolerance`` (relative). Once per name, and not a name the
        benchmark measures itself (``time``, ``syncs``, ``peak_memory``...), in either order."""
        __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
        name = metrics.check_name("record", "name", name, name)
        value = metrics.check_number("record", "value", value, metrics.VALUE)
        tolerance = metrics.check_number("record", "tolerance", tolerance, metrics.TOLERANCE, 0)
        metrics.check_text("record", "unit", unit, UNIT, empty=True)
        metrics.check_flag("record", "portable", portable)
        metrics.check_flag("record", "higher_is_worse", higher_is_worse)
        if name in self.metrics:
            first = "record(...)" if name in self._recorded else _compat.mode(self)
            raise ValueError(
                f"{metrics.given('record', 'name', name)}: {first} gave {name!r} already; "
                "a metric has one value: give this one another name"
            )
        origin = "benchmark.record(tolerance=...)" if tolerance else None
        self._record(name, value, unit, tolerance, origin, portable, higher_is_worse)
        self._recorded.add(name)

    def _record(
        self,
        name: str,
        value: float,
        unit: str = "",
        tolerance: float = 0.0,
        origin: str | None = None,
        portable: bool = True,
        higher_is_worse: bool = True,
    ) -> None:
        """:meth:`record`, saying where a tolerance came from (``origin``), for the verdict."""
        count = metrics.Count(
            unit,
            portable=portable,
            value=value,
            tolerance=tolerance,
            tolerance_from=origin,
            higher_is_worse=higher_is_worse,
        )
        self._put(name, count.as_dict())

    def _put(self, name: str, record: dict[str, Any]) -> None:
        """Keep a metric the benchmark measured itself; one the test recorded under that name
        before is refused (after, :meth:`record` refuses it): neither value replaces the
        other unsaid."""
        __tracebackhide__ = True  # refuses what the test asked (Note [Tracebacks])
        self._measures(name)
        self.metrics[name] = record

    def _measures(self, *names: str, call: str | None = None) -> None:
        """Refuse to measure what the test recorded itself (:meth:`_put`); for the times, said
        before the rounds (and where timing is off), so that no budget is spent on a
        measurement refused after."""
        __tracebackhide__ = True  # refuses what the test asked (Note [Tracebacks])
        for name in names:
            if name in self._recorded:
                raise ValueError(
                    f"{call or _compat.mode(self)} measures {name!r} itself, which "
                    f"record({name!r}, ...) gave already: give that metric another name"
                )

    @_may_refuse
    def expect(self, variant: str | None = None, **bounds: float) -> HpmlBenchmark:
        """State what one call may ask of the machine at most, whatever any baseline says:
        ``benchmark.expect(syncs=0, copies=0)``, or ``flops_float32=0`` for FLOPs of one dtype;
        with :meth:`variants`, of every variant or of the one named by ``variant``. The names
        are the work counters' (Note [Work counters]); a counter above its bound fails the
        test, naming the operators and source lines. Checked once the work is counted: call it
        before or after ``benchmark(...)``."""
        __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
        if variant is not None:
            metrics.check_name("expect", "variant", variant, variant)
        known = metrics.WORK_UNITS
        unknown = sorted(n for n in bounds if n not in known and not n.startswith("flops_"))
        if unknown:
            raise TypeError(
                f"expect() got unknown work counter(s) {', '.join(map(repr, unknown))}; known: "
                f"{', '.join(metrics.WORK_UNITS)} and flops_<dtype> (flops_float64, ...)"
            )
        chosen, checked = self._expected.get(variant, {}), {}
        for key, bound in bounds.items():
            metrics.check_keyword("expect", key, bound)
            checked[key] = metrics.check_number("expect", key, bound, metrics.BOUND, 0)
            if key in chosen:  # a second bound would replace the first unsaid
                raise ValueError(
                    f"{metrics.given('expect', key, bound)}: an earlier expect() gave "
                    f"{key}={chosen[key]!r}{_of(variant)}; give one bound per counter"
                )
        self._expected[variant] = {**chosen, **checked}
        if self._counted:
            self._check_expected()
        return self

    @_may_refuse
    def expect_change(self, reason: str, **changes: str | int) -> HpmlBenchmark:
        """Accept, in the change itself, that metrics of this benchmark grow:
        ``benchmark.expect_change("exact GELU for accuracy", ops="+2", time="+15%")``. A metric
        that grows by at most that much (relative with ``%``, else per call) is ``accepted``
        with ``reason`` instead of failing the run; beyond it, it fails as before. Names are the
        metrics' (``time``, ``instructions``, ``syncs``, ``flops_float32`` for
        ``flops[float32]``; a name covers its variants). Once the base has the change, the
        report says it did not happen: drop the call then (Note [Accepted changes])."""
        __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
        if not isinstance(reason, str) or not reason.strip():
            raise TypeError("expect_change() needs a reason: what the change adds, and why")
        if not changes:
            raise TypeError("expect_change() names no metric: e.g. ops='+2' or time='+15%'")
        found: dict[str, dict[str, str]] = {}
        for key, asked in changes.items():
            name = metrics.check_keyword("expect_change", key, asked)
            amount = metrics.check_amount("expect_change", key, asked)
            if amount.value == 0:
                raise ValueError(
                    f"{metrics.given('expect_change', key, asked)}: accepts no change; give how "
                    "much it may grow, as '+15%' or '+2' per call, or drop it"
                )
            if not amount.relative and name == "time":  # '+15' would read as 15 s a call
                raise ValueError(
                    f"{metrics.given('expect_change', key, asked)}: a time grows by a percent, "
                    f"as '+{amount.value:g}%'; an amount per call ('+2') is for counts"
                )
            first = self.accepted.get(name) or found.get(name)
            if first is not None:  # a second amount would replace the first unsaid
                raise ValueError(
                    f"{metrics.given('expect_change', key, asked)}: an earlier expect_change "
                    f"accepts {first['change']} for {name!r} ({first['reason']!r}); accept one "
                    "amount per metric"
                )
            found[name] = {"change": str(amount), "reason": reason.strip()}
        self.accepted.update(found)
        return self

    @_may_refuse
    def cite(self, name: str, value: float, source: str) -> None:
        """Show a published figure (a book's, a paper's) beside the metric ``name`` measured
        here: reference data for the reader, never judged. Nothing to cite beside when timing is
        off (``--benchmark-disable``, xdist)."""
        __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
        metrics.check_name("cite", "name", name, name)
        value = metrics.check_number("cite", "value", value, metrics.VALUE)
        metrics.check_text("cite", "source", source, "where the figure comes from: a str")
        if self.disabled:
            return
        if name not in self.metrics:
            measured = ", ".join(self.metrics) or "none yet"
            raise ValueError(f"cite() after measuring: no metric {name!r} (measured: {measured})")
        self.metrics[name]["cited"] = {"value": value, "source": source}

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

    @_may_refuse
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

    def _reseed(self) -> None:
        if self._state is not None:
            self._state.reseed()

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

    def _record_mfu(self, variant: str | None, call: Callable[[], Any], series: Series) -> None:
        """``mfu`` (``mfu[name]`` of a variant): the rounds' FLOP/s over the device's dense peak
        in the precision of most of the FLOPs (Note [MFU]); or, in ``no_peak``, why not. The
        FLOPs by dtype are the work counters', else counted here where a peak may be known."""
        if self._peaks is None or "torch" not in sys.modules:
            return
        from . import mfu

        counted = self._work.get(variant)
        tally = counted.tally if counted is not None else None
        tracked = self.metrics.get("flops", {}).get("value", 0) if variant is None else 0
        if tally is None:
            if not mfu.worth_counting(self._plan.device, self._peaks):
                if tracked:  # FLOPs without a peak: said, as where the work was counted
                    self.no_peak = mfu.uncounted(self._plan.device)
                return
            from .work import count_flops_by_key

            tally = count_flops_by_key(call)
        if not tally:
            return
        # the benchmark's own count where it tracks FLOPs (so that mfu is flop_rate / peak)
        flops = tracked or sum(tally.values())
        found, why = mfu.utilization(tally, flops, series, self._peaks)
        name = "mfu" if variant is None else f"mfu[{variant}]"
        if found is not None:
            self._put(name, {**found, **({"state": self.state} if self.state else {})})
        self.no_peak = why or self.no_peak

    def _count_work(self, calls: dict[str | None, Callable[[], Any]]) -> None:
        """The work counters of one more call of each (variant name, or None: the benchmarked
        function), outside the timed rounds (Note [Work counters]), recorded as exact counts
        with what explains them: ``syncs``, or ``syncs[name]`` of a variant."""
        self._counted = True
        if not self._counts:  # counted, and their expectations checked, in another process
            return
        if self._settings.work and "torch" in sys.modules:
            from .work import count_work

            for variant, call in calls.items():
                self._reseed()  # the same draws in every process (Note [Torch state])
                start = time.perf_counter()
                counter = count_work(call)
                self.work_seconds += time.perf_counter() - start
                if counter is None:
                    continue
                self._work[variant] = counter
                if counter.ops:  # no torch work: no counters, in any process
                    self._record_work(counter, "" if variant is None else f"[{variant}]")
        self._check_expected()

    def _count_instructions(self, calls: dict[str | None, Callable[[], Any]]) -> Any:
        """In the process under valgrind: the instructions of each callable's calls
        (Note [Instruction counts]), ``instructions`` or ``instructions[name]``. Returns what
        the last callable's first call returned."""
        from .instructions import TOLERANCE, Uncounted

        self._counted = True
        result = None
        for variant, call in calls.items():
            self._reseed()
            counted, result = self._callgrind.count(call, self._plan.sync)
            self.instruction_seconds += counted.seconds
            name = "instructions" + ("" if variant is None else f"[{variant}]")
            if isinstance(counted, Uncounted):
                self.uncounted[name] = counted.why
                continue
            count = metrics.Instructions(
                "instr",
                value=round(counted.instructions),
                tolerance=self._settings.tolerance.get("instructions", TOLERANCE),
                tolerance_from=_origin(self._settings, "instructions")
                or "instruction counts' default",
                detail={"dumps": counted.dumps},  # read by instructions.attribute()
                calls=counted.calls,
                counted_on=self._callgrind.key,
                waits=counted.waits,
            )
            self._put(name, count.as_dict())
        return result

    def _record_work(self, counter: Any, suffix: str) -> None:
        for name, (value, detail) in counter.metrics().items():
            tolerance = self._settings.tolerance.get(name, 0.0)
            unit = metrics.WORK_UNITS.get(name, "FLOP")  # else FLOPs of a dtype
            count = metrics.Count(
                unit,
                value=value,
                tolerance=tolerance,
                tolerance_from=_origin(self._settings, name),
                detail=detail or None,
            )
            self._put(name + suffix, count.as_dict())

    def _check_expected(self) -> None:
        """Fail the test where a work counter is above what ``expect`` allows (checked where
        the work is counted: not in the processes that only time, or count instructions)."""
        __tracebackhide__ = True  # fails the test on what it asked for (Note [Tracebacks])
        if not self._expected or not self._counts:
            return
        from .work import over_budget  # imports torch: only where something is expected

        problems = []
        for variant, bounds in self._expected.items():
            chosen: dict[str | None, Any] = (
                self._work if variant is None else {variant: self._work.get(variant)}
            )
            if not chosen or None in chosen.values():
                raise AssertionError(
                    f"benchmark.expect(...) cannot be checked: the work of "
                    f"{'this benchmark' if variant is None else repr(variant)} was not counted "
                    "(hpml_bench(work=False), no such variant, torch not loaded, or code that "
                    "cannot run under torch's dispatch mode)"
                )
            for name, counter in chosen.items():
                found = over_budget(counter, bounds)
                problems += [f"{name}: {p}" if name else p for p in found]
        if problems:
            raise AssertionError("; ".join(problems))

    def _record_memory(self, call: Callable[[], Any]) -> None:
        """Peak memory of one call: CUDA's allocator on a GPU (same GPU model and torch only),
        else the tensors the call allocates, which is the same on any machine."""
        device = self._plan.device
        peak: int | None
        if getattr(device, "type", None) == "cuda":
            peak = cuda_peak_memory(call, device, self._plan.sync)
            origin = "CUDA peak memory's default"
            self._record("peak_memory", peak, "B", 0.05, origin, portable=False)
        elif getattr(device, "type", "cpu") == "cpu":
            # the work counters' pass tracked the same storages: no second pass to count them
            counted = self._work.get(None)
            peak = counted.peak if counted is not None else tracked_peak_memory(call)
            if peak is not None:
                self._record("peak_memory", peak, "B")


# What the calls accept, in their messages (the rest are metrics.VALUE, TOLERANCE, ...).
BATCH = "the samples one call processes: an int >= 1"
UNIT = "a unit: a str without control characters, such as 'B' or 'GB/s' ('' for none)"
RATIO = "a speed-up's threshold: a finite number >= 0, such as 0.1"


def _of(variant: str | None) -> str:
    return "" if variant is None else f" for variant {variant!r}"


def _origin(settings: BenchSettings, name: str) -> str | None:
    """Where the tolerance of the counter ``name`` was set, if the test set one."""
    return "hpml_bench(tolerance=...)" if name in settings.tolerance else None


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
