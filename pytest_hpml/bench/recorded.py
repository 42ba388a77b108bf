"""What the ``benchmark`` fixture records of one call besides its time: the work counters,
the instructions under valgrind, peak memory and MFU, each an exact count with what explains
it (Note [Work counters]). A part of :class:`~pytest_hpml.bench.benchmark.HpmlBenchmark`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from .. import _compat
from ..config.markers import BenchSettings
from . import metrics
from .counters import cuda_peak_memory, tracked_peak_memory
from .measure import Plan, Series, users_error

# pytest reads this in every frame of this module: a failure of the benchmarked code shows that
# code, not pytest-hpml's (Note [Tracebacks]).
__tracebackhide__ = users_error


def origin(settings: BenchSettings, name: str) -> str | None:
    """Where the tolerance of the counter ``name`` was set, if the test set one."""
    return "hpml_bench(tolerance=...)" if name in settings.tolerance else None


class RecordsWork:
    """The records of the fixture that are counts: one call's work, instructions, memory and
    MFU, and how a metric is kept (``_put``)."""

    _plan: Plan
    _settings: BenchSettings
    _state: Any  # hardware.torch_state.TorchState: threads and seed (None: none)
    state: dict[str, Any]  # torch's state while the rounds ran
    _counts: bool  # off: another process counts them (they are the same in all)
    _callgrind: Any  # under valgrind: instructions counted, nothing timed
    _peaks: Any  # fixture.Peaks: how the device's peak is found, for mfu
    _work: dict[str | None, Any]  # the work counted: variant (None) -> counters
    _counted: bool  # whether the work was counted (or could not be)
    work_seconds: float  # what counting it took
    instruction_seconds: float  # what counting its instructions took, under valgrind
    uncounted: dict[str, str]  # instruction metric -> why it was not counted
    no_peak: str | None  # why a step with FLOPs has no mfu (Note [MFU])
    _expected: dict[str | None, dict[str, float]]  # variant -> bounds
    metrics: dict[str, dict[str, Any]]  # metric -> record
    _recorded: set[str]  # the metrics the test recorded (record())

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

    def _reseed(self) -> None:
        if self._state is not None:
            self._state.reseed()

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
                tolerance_from=origin(self._settings, "instructions")
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
                tolerance_from=origin(self._settings, name),
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
