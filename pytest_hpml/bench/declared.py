"""What a test declares to the ``benchmark`` fixture besides the call it times: what one call
processes (``track``), a metric of its own (``record``), bounds on its work (``expect``), the
changes it accepts (``expect_change``) and published figures to show beside (``cite``). A part
of :class:`~pytest_hpml.bench.benchmark.HpmlBenchmark`."""

from __future__ import annotations

import functools
import numbers
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .. import _compat
from . import metrics
from .measure import users_error
from .recorded import RecordsWork

if TYPE_CHECKING:
    from typing_extensions import Self

# pytest reads this in every frame of this module: a failure of the benchmarked code shows that
# code, not pytest-hpml's (Note [Tracebacks]).
__tracebackhide__ = users_error

# What the calls accept, in their messages (the rest are metrics.VALUE, TOLERANCE, ...).
BATCH = "the samples one call processes: an int >= 1"
UNIT = "a unit: a str without control characters, such as 'B' or 'GB/s' ('' for none)"
RATIO = "a speed-up's threshold: a finite number >= 0, such as 0.1"


Call = TypeVar("Call", bound=Callable[..., Any])


def may_refuse(method: Call) -> Call:
    """A call whose arguments the benchmark checks: refused, it still used the fixture, so that
    pytest-benchmark adds no "not used at all" to the refusal (one message per bad input)."""

    @functools.wraps(method)
    def call(self: Declarations, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception:
            self._refused = True
            raise

    return cast(Call, call)


def of(variant: str | None) -> str:
    return "" if variant is None else f" for variant {variant!r}"


class Declarations(RecordsWork):
    """The calls a test makes to declare what its benchmark is, checked as they are made."""

    _tracked: bool  # track() says what one call processes, once
    _batch_size: int | None
    _model: Any
    _flops: bool
    accepted: dict[str, dict[str, str]]  # metric -> change and reason
    _refused: bool  # whether a call of the test's failed (may_refuse)
    disabled: bool  # pytest-benchmark's: timing is off

    @may_refuse
    def track(
        self, *, model: Any = None, batch_size: int | None = None, flops: bool = True
    ) -> Self:
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

    @may_refuse
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

    @may_refuse
    def expect(self, variant: str | None = None, **bounds: float) -> Self:
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
                    f"{key}={chosen[key]!r}{of(variant)}; give one bound per counter"
                )
        self._expected[variant] = {**chosen, **checked}
        if self._counted:
            self._check_expected()
        return self

    @may_refuse
    def expect_change(self, reason: str, **changes: str | int) -> Self:
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

    @may_refuse
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
