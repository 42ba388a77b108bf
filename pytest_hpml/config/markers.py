"""Markers of pytest-hpml: their registration, argument checks and evaluation.

Arguments are checked at collection and at setup (a wrong one fails its test, named); the
hardware a marker asks for is looked at only when its test is set up, never at import.
"""

from __future__ import annotations

import argparse
import inspect
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import pytest

from .values import DEVICE_TYPES, PRECISIONS, number, parse_seconds

MARKERS = {
    "gpu": "gpu(count=1, memory_gb=None, capability=None): skip unless at least `count` CUDA "
    "GPUs are visible, each with at least `memory_gb` GiB and compute capability >= "
    "`capability` (a tuple such as (8, 0)).",
    "precision": "precision(*names): run only with these of the selected precisions "
    "(fp32, tf32, fp16, bf16).",
    "device": "device(*types): run only on these of the selected device types (cpu, cuda, mps).",
    "distributed": "distributed(world_size=2, backend=None, timeout=None): run the test in "
    "world_size ranks with torch.distributed initialized (backend: gloo, nccl, mpi; default "
    "--hpml-dist-backend), failing when a rank fails, dies or outlives `timeout` seconds "
    "(default --hpml-dist-timeout, and at most what it takes); fixtures rank and world_size "
    "tell each rank its place.",
    "slow": "slow: deselected unless --hpml-run-slow (env HPML_RUN_SLOW, ini hpml_run_slow).",
    "hpml_bench": "hpml_bench(threshold=None, batch_size=None, work=True, tolerance=None, "
    "instructions=True): judge this benchmark's time metrics with this minimum relative change "
    "(default --hpml-threshold); batch_size adds throughput (samples/s); work=False leaves out "
    "its work counters, instructions=False its instruction count (--hpml-instructions); "
    "tolerance maps a count's name (a work counter's, as ops or flops[float32], or "
    "instructions) to the relative change it may make; a name the benchmark does not count "
    "fails the run.",
}


# The markers that make a test need torch and the hardware checks (slow does not).
HARDWARE_MARKERS = frozenset(MARKERS) - {"slow", "hpml_bench"}
DIST_BACKEND_NAMES = ("gloo", "nccl", "mpi")


class MarkerError(ValueError):
    """A marker used with arguments it does not take."""


def register(config: pytest.Config) -> None:
    """Make the markers known to ``--strict-markers`` and ``pytest --markers``."""
    for text in MARKERS.values():
        config.addinivalue_line("markers", text)


@dataclass(frozen=True)
class GpuRequirement:
    """What ``@pytest.mark.gpu`` asks of the machine."""

    count: int = 1
    memory_gb: float | None = None
    capability: tuple[int, int] | None = None

    def describe(self) -> str:
        text = f"{self.count} GPU" + ("s" if self.count != 1 else "")
        if self.memory_gb is not None:
            text += f" with >= {self.memory_gb:g} GiB"
        if self.capability is not None:
            text += f" of compute capability >= {self.capability[0]}.{self.capability[1]}"
        return text


def _gpu(count: int = 1, memory_gb: float | None = None, capability: Any = None) -> None:
    """The signature ``@pytest.mark.gpu`` is bound against."""


def _bind(mark: pytest.Mark, signature_of: Any) -> inspect.BoundArguments:
    try:
        bound = inspect.signature(signature_of).bind(*mark.args, **mark.kwargs)
    except TypeError as exc:
        raise MarkerError(f"{exc}; {MARKERS[mark.name].split(':')[0]}") from None
    bound.apply_defaults()
    return bound


def _hpml_bench(
    threshold: float | None = None,
    batch_size: int | None = None,
    work: bool = True,
    tolerance: dict[str, float] | None = None,
    instructions: bool = True,
) -> None:
    """The signature ``@pytest.mark.hpml_bench`` is bound against."""


class BenchSettings(NamedTuple):
    """A benchmark's ``hpml_bench`` arguments."""

    threshold: float | None = None  # None: the run's --hpml-threshold
    batch_size: int | None = None
    work: bool = True  # count its work (Note [Work counters])
    tolerance: Mapping[str, float] = MappingProxyType({})  # count name: relative change allowed
    instructions: bool = True  # count its instructions with --hpml-instructions


def bench_mark(node: pytest.Item) -> pytest.Mark | None:
    """The ``hpml_bench`` marks on ``node`` and the module and class above it, as one: each
    argument from the nearest mark that gives it (a method's ``work=False`` keeps its class's
    ``threshold``)."""
    marks = list(node.iter_markers("hpml_bench"))  # nearest first
    if len(marks) < 2:
        return marks[0] if marks else None
    merged: dict[str, Any] = {}
    for mark in reversed(marks):
        try:
            given = inspect.signature(_hpml_bench).bind(*mark.args, **mark.kwargs).arguments
        except TypeError:
            return marks[0]  # the nearest, whose own check says what is wrong
        merged.update(given)
    combined: pytest.Mark = pytest.mark.hpml_bench(**merged).mark
    return combined


def bench_settings(mark: pytest.Mark | None) -> BenchSettings:
    """Check ``hpml_bench`` arguments."""
    if mark is None:
        return BenchSettings()
    args = _bind(mark, _hpml_bench).arguments
    threshold, batch_size = args.get("threshold"), args.get("batch_size")
    if threshold is not None and not (number(threshold) and 0 < threshold < 1):
        raise MarkerError(
            f"threshold must be a fraction between 0 and 1 such as 0.05 (5%), got {threshold!r}"
        )
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise MarkerError(f"batch_size must be a positive integer, got {batch_size!r}")
    work, tolerance = args.get("work", True), args.get("tolerance") or {}
    instructions = args.get("instructions", True)
    for name, flag in (("work", work), ("instructions", instructions)):
        if not isinstance(flag, bool):
            raise MarkerError(f"{name} must be True or False, got {flag!r}")
    if not isinstance(tolerance, dict) or not all(
        isinstance(k, str) and number(v) and 0 <= v < 1 for k, v in tolerance.items()
    ):
        raise MarkerError(
            "tolerance must map a count's name to a fraction between 0 and 1, such as "
            f"{{'ops': 0.02}}, got {tolerance!r}"
        )
    return BenchSettings(threshold, batch_size, work, tolerance, instructions)


def _distributed(world_size: int = 2, backend: str | None = None, timeout: Any = None) -> None:
    """The signature ``@pytest.mark.distributed`` is bound against."""


def distributed_settings(mark: pytest.Mark) -> tuple[int, str | None, float | None]:
    """Check ``distributed`` arguments: (world_size, backend, timeout), None when not given."""
    args = _bind(mark, _distributed).arguments
    world_size, backend, timeout = args["world_size"], args["backend"], args["timeout"]
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise MarkerError(f"world_size must be a positive integer, got {world_size!r}")
    if backend is not None and backend not in DIST_BACKEND_NAMES:
        raise MarkerError(
            f"unknown backend {backend!r}; choose from {', '.join(DIST_BACKEND_NAMES)}"
        )
    if timeout is not None and not (number(timeout) and timeout > 0):
        raise MarkerError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return world_size, backend, None if timeout is None else _seconds(timeout)


def _seconds(timeout: float) -> float:
    """A timeout within --hpml-dist-timeout's bounds, by its parser: a longer one is a typo, and
    beyond what a process group's timedelta holds, an OverflowError in every rank."""
    try:
        parse_seconds(f"{timeout:g}")  # 1e+15, as the test may have written it
    except argparse.ArgumentTypeError as exc:
        raise MarkerError(f"timeout: {exc}, as --hpml-dist-timeout") from None
    return float(timeout)


def gpu_requirement(mark: pytest.Mark) -> GpuRequirement:
    """Check the arguments of one ``gpu`` mark."""
    args = _bind(mark, _gpu).arguments
    count, memory_gb, capability = args["count"], args["memory_gb"], args["capability"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise MarkerError(f"count must be a positive integer, got {count!r}")
    if memory_gb is not None and not (number(memory_gb) and memory_gb > 0):
        raise MarkerError(f"memory_gb must be a positive number of GiB, got {memory_gb!r}")
    if capability is not None:
        capability = _capability(capability)
    return GpuRequirement(count, memory_gb, capability)


def _capability(value: Any) -> tuple[int, int]:
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        return (value[0], value[1])
    raise MarkerError(f"capability must be a (major, minor) tuple such as (8, 0), got {value!r}")


def _names(mark: pytest.Mark, choices: tuple[str, ...], what: str) -> tuple[str, ...]:
    if mark.kwargs:
        raise MarkerError(f"{mark.name}() takes only positional {what} names, got {mark.kwargs}")
    if not mark.args:
        raise MarkerError(f"{mark.name}() needs at least one {what}: {', '.join(choices)}")
    for name in mark.args:
        if name not in choices:
            raise MarkerError(f"unknown {what} {name!r}; choose from {', '.join(choices)}")
    return tuple(mark.args)


def allowed(node: pytest.Item | Any, name: str) -> tuple[str, ...] | None:
    """What ``@pytest.mark.precision``/``device`` allow on ``node`` (closest mark wins), or None."""
    mark = node.get_closest_marker(name)
    if mark is None:
        return None
    if name == "precision":
        return _names(mark, PRECISIONS, "precision")
    return _names(mark, DEVICE_TYPES, "device type")


def problem(node: pytest.Function | Any) -> str | None:
    """What is wrong with the hpml marks of a test ("wrong @pytest.mark.gpu: ..."), or None.

    Asked at collection (a test with a wrong mark is not parametrized) and again when the
    test is set up, where it fails that test alone: every wrong mark of a run is reported,
    each naming its test, and ``-k`` still selects the others of the file."""
    for mark in node.iter_markers():
        try:
            if mark.name == "gpu":
                gpu_requirement(mark)
            elif mark.name == "hpml_bench":
                bench_settings(mark)
            elif mark.name == "distributed":
                distributed_settings(mark)
            elif mark.name in ("precision", "device"):
                _names(mark, PRECISIONS if mark.name == "precision" else DEVICE_TYPES, mark.name)
            elif mark.name == "slow" and (mark.args or mark.kwargs):
                raise MarkerError("slow takes no arguments")
        except MarkerError as exc:
            return f"wrong @pytest.mark.{mark.name}: {exc}"
    return None


def benchmark_problem(node: pytest.Item) -> str | None:
    """What is wrong with a pytest-benchmark mark that pytest-hpml measures by, or None: its
    marker takes a ``min_rounds`` that its --benchmark-min-rounds refuses."""
    mark = node.get_closest_marker("benchmark")
    rounds = None if mark is None else mark.kwargs.get("min_rounds")
    if rounds is None or (type(rounds) is int and rounds >= 1):
        return None
    return f"wrong @pytest.mark.benchmark: min_rounds={rounds!r}; a whole number of at least 1"


def deselect_slow(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop tests marked slow, unless ``-m`` names the marker (then the user chose them). A
    test with a wrong mark stays, so that its setup says what is wrong."""
    if "slow" in (config.option.markexpr or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow") and not problem(item)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        dropped = set(map(id, slow))
        items[:] = [item for item in items if id(item) not in dropped]


def warn_unused_marks(items: list[pytest.Item], benchmarks: bool = False) -> None:
    """Say once for each hpml mark that means nothing, rather than let what the user wrote be
    ignored silently: every hpml_bench mark where benchmarks are pytest-benchmark's (Note
    [Opting in]), and each mark on tests that lack the fixture it sets (hpml_bench on tests
    that benchmark nothing, precision and device on tests without those fixtures). A wrong
    mark is left to fail its test. Each warning points at the first such test, not here."""
    if benchmarks:
        marked = _marking_none(items, "hpml_bench", "benchmark")
        why = "no test it marks asks for the benchmark fixture, whose measurement it sets"
    else:
        marked = [item for item in items if item.get_closest_marker("hpml_bench")]
        why = (
            "this run's benchmarks are pytest-benchmark's; opt in with hpml_benchmarks = true "
            "in the ini file, --hpml-benchmarks or HPML_BENCHMARKS=1"
        )
    _warn(marked, "hpml_bench", why)
    for name in ("precision", "device"):
        why = f"no test it marks asks for the {name} fixture, whose values it restricts"
        _warn(_marking_none(items, name, name), name, why)


def _warn(marked: list[pytest.Item], name: str, why: str) -> None:
    marked = [item for item in marked if not problem(item)]
    if not marked:
        return
    first = marked[0]
    said = f"@pytest.mark.{name} on {len(marked)} test(s) ({first.nodeid}, ...) has no "
    said += f"effect: {why}"
    try:
        warnings.warn_explicit(
            pytest.PytestConfigWarning(said),
            pytest.PytestConfigWarning,
            str(first.path),
            (first.location[1] or 0) + 1,  # location counts lines from 0
        )
    except pytest.PytestConfigWarning:  # -W error: said as an error, not an INTERNALERROR
        raise pytest.UsageError(f"{said}; an error under this run's warning filters") from None


def _marking_none(items: list[pytest.Item], name: str, fixture: str) -> list[pytest.Item]:
    """The tests under a ``name`` mark that marks no test asking for ``fixture``: a mark on a
    module or class whose such tests sit beside others is in use, and not reported."""
    marked: dict[str, list[pytest.Item]] = {}  # the node bearing the closest mark -> its tests
    used: set[str] = set()
    for item in items:
        bearer = next(item.iter_markers_with_node(name), None)
        if bearer is None:
            continue
        marked.setdefault(bearer[0].nodeid, []).append(item)
        if fixture in getattr(item, "fixturenames", ()):
            used.add(bearer[0].nodeid)
    return [test for node, tests in marked.items() if node not in used for test in tests]


def is_benchmark(item: pytest.Item) -> bool:
    """Whether ``item`` is a benchmark test: it asks for pytest-benchmark's fixture."""
    return "benchmark" in getattr(item, "fixturenames", ())


def runs_in_ranks(item: pytest.Item) -> bool:
    """Whether ``item`` runs in ranks of its own: it is marked ``@pytest.mark.distributed``."""
    return item.get_closest_marker("distributed") is not None


def gpu_skip_reason(req: GpuRequirement, hardware: Any) -> str | None:
    """Why the visible GPUs do not meet ``req``, or None when they do.

    Counting is cheap; names, memory and capability are probed only when the mark asks for them.
    """
    if hardware.cuda_count < req.count:
        return f"needs {req.describe()}, found {hardware.cuda_count}"
    if req.memory_gb is None and req.capability is None:
        return None
    gpus = hardware.gpus
    fit = [
        g
        for g in gpus
        if (req.memory_gb is None or g.memory_gb >= req.memory_gb)
        and (req.capability is None or g.capability >= req.capability)
    ]
    if len(fit) >= req.count:
        return None
    found = "; ".join(f"cuda:{g.index} {g.describe()}" for g in gpus)
    return f"needs {req.describe()}, found {len(fit)} qualifying of {len(gpus)}: {found}"
