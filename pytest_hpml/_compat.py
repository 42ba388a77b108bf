"""Every use of a private API of pytest, pytest-benchmark or torch, in one place.

Private names change without notice. Each one is reached only through a function here, which
checks that the name exists and otherwise stops the run with an error that names the version
found and the versions supported, instead of an ``AttributeError`` deep inside a test. The
module is light (the fixture modules import it at start-up): torch, pytest-benchmark and
``importlib.metadata`` are imported by the functions that need them.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, cast

import pytest

# pytest-benchmark's fixture internals used here exist, unchanged, from 4.0 through 5.x; the
# package metadata pins the same range (pyproject.toml).
PYTEST_BENCHMARK = ((4, 0), (6, 0))  # supported: >= first, < second
PYTEST = ((8, 0), (10, 0))


# A dependency's version lacks a private API pytest-hpml needs (pytest marks UsageError final).
UnsupportedVersion = pytest.UsageError


def _version(distribution: str) -> str:
    import importlib.metadata  # only when a version must be named

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _numbers(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _unsupported(distribution: str, supported: tuple[tuple[int, ...], ...], what: str) -> str:
    low, high = supported
    return (
        f"pytest-hpml needs {what} of {distribution}, missing in {distribution} "
        f"{_version(distribution)}; supported: {distribution} >={low[0]}.{low[1]},<{high[0]}"
    )


def _require(obj: Any, name: str, distribution: str, supported: Any) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError:
        raise UnsupportedVersion(
            _unsupported(distribution, supported, f"{type(obj).__name__}.{name}")
        ) from None


@functools.cache
def check_pytest_benchmark(found: str | None = None) -> None:
    """Stop with a usage error when the installed pytest-benchmark (or ``found``) is outside
    the tested range. Checked once, when a test first asks for ``benchmark``."""
    found = found or _version("pytest-benchmark")
    low, high = PYTEST_BENCHMARK
    if found != "?" and not low <= _numbers(found) < high:
        raise UnsupportedVersion(
            f"pytest-benchmark {found} is not supported by pytest-hpml "
            f"(supported: >={low[0]}.{low[1]},<{high[0]}); install a supported version"
        )


# --------------------------------------------------------------------------- pytest


def fixturedefs(metafunc: pytest.Metafunc, name: str) -> Any:
    """The fixture definitions a test's argument ``name`` resolves to (None if it has none)."""
    table = _require(metafunc, "_arg2fixturedefs", "pytest", PYTEST)
    return table.get(name)


def teardown_exact(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Tear down what earlier tests set up and ``nextitem`` does not need (pytest's own
    protocol does this after each test; a test run elsewhere skips that protocol)."""
    state = _require(item.session, "_setupstate", "pytest", PYTEST)
    state.teardown_exact(nextitem)


def runtestprotocol(item: pytest.Item, nextitem: pytest.Item | None) -> list[pytest.TestReport]:
    """pytest's per-test protocol without logging: the reports of setup, call and teardown."""
    try:
        from _pytest.runner import runtestprotocol as protocol
    except ImportError:
        raise UnsupportedVersion(
            _unsupported("pytest", PYTEST, "_pytest.runner.runtestprotocol")
        ) from None
    return protocol(item, log=False, nextitem=nextitem)


def fail_in_last_line(config: pytest.Config, outcomes: dict[str, list[pytest.TestReport]]) -> None:
    """Count ``outcomes`` (e.g. ``{"regressed": [report, ...]}``) in pytest's last line and
    make that line red, as it is for failed tests: the session's exit status is 1 because of
    them, and a green "N passed" beside exit status 1 tells the user the opposite of what
    happened. pytest colours only its own outcomes red; the colour table and the line's colour
    are private."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    shown = {name: reports for name, reports in outcomes.items() if reports}
    if reporter is None or not shown:
        return
    from _pytest import terminal

    colors = _require(terminal, "_color_for_type", "pytest", PYTEST)
    _require(reporter, "_determine_main_color", "pytest", PYTEST)
    for name, reports in shown.items():
        reporter.stats.setdefault(name, []).extend(reports)
        colors[name] = "red"
    reporter._determine_main_color = lambda unknown_type_seen: "red"


def uncaptured(config: pytest.Config) -> Any:
    """A context in which the process's real standard output and error are file descriptors
    1 and 2 (pytest's capture is suspended, as for its own terminal output): a report written
    to /dev/stdout then reaches the terminal or the file the shell redirected it to, not the
    capture's temporary file. pytest's capture manager and its method are private."""
    import contextlib

    manager = config.pluginmanager.get_plugin("capturemanager")
    if manager is None:  # -p no:capture
        return contextlib.nullcontext()
    return _require(manager, "global_and_fixture_disabled", "pytest", PYTEST)()


# --------------------------------------------------------------------------- pytest-benchmark


def hide_benchmark_table(config: pytest.Config) -> bool:
    """Keep pytest-benchmark from printing its table, which its session's ``display`` leaves
    out where ``quiet`` is set (4.0 to 5.x); whether it had one to print."""
    session = getattr(config, "_benchmarksession", None)
    if session is None:
        return False
    _require(session, "quiet", "pytest-benchmark", PYTEST_BENCHMARK)
    session.quiet = True
    return bool(getattr(session, "groups", None))


def benchmark_fixture_class() -> type:
    from pytest_benchmark.fixture import BenchmarkFixture

    return BenchmarkFixture


def fixture_already_used() -> type[Exception]:
    from pytest_benchmark.fixture import FixtureAlreadyUsed

    return FixtureAlreadyUsed


def share_state(target: Any, fixture: Any) -> None:
    """Make ``target`` share ``fixture``'s state, so that pytest-benchmark, which holds
    ``fixture``, sees the stats and flags that ``target`` sets."""
    for name in ("_timer", "_min_rounds", "_disable_gc", "_mode", "_make_stats", "stats"):
        _require(fixture, name, "pytest-benchmark", PYTEST_BENCHMARK)
    target.__dict__ = fixture.__dict__


def timer(fixture: Any) -> Callable[[], float]:
    return cast(
        "Callable[[], float]", _require(fixture, "_timer", "pytest-benchmark", PYTEST_BENCHMARK)
    )


def set_timer(fixture: Any, clock: Callable[[], float]) -> None:
    fixture._timer = clock


def min_rounds(fixture: Any) -> int:
    return cast(int, _require(fixture, "_min_rounds", "pytest-benchmark", PYTEST_BENCHMARK))


def disable_gc(fixture: Any) -> bool:
    return cast(bool, _require(fixture, "_disable_gc", "pytest-benchmark", PYTEST_BENCHMARK))


def mode(fixture: Any) -> str | None:
    """How the fixture was used (``benchmark(...)``, ``pedantic(...)``), None if not yet."""
    return cast("str | None", _require(fixture, "_mode", "pytest-benchmark", PYTEST_BENCHMARK))


def set_mode(fixture: Any, value: str) -> None:
    fixture._mode = value


def make_stats(fixture: Any, iterations: int) -> Any:
    """A new stats object in pytest-benchmark's table, JSON and comparisons."""
    return _require(fixture, "_make_stats", "pytest-benchmark", PYTEST_BENCHMARK)(iterations)


def round_times(fixture: Any) -> list[float]:
    """The per-round times pytest-benchmark measured (pedantic mode)."""
    return list(fixture.stats.stats.data)


def round_target(fixture: Any) -> float:
    """The shortest round pytest-benchmark would time with this fixture: its ``min_time``, or
    the timer's precision times ``calibration_precision`` where that is longer."""
    minimum = _require(fixture, "_min_time", "pytest-benchmark", PYTEST_BENCHMARK)
    precision = _require(fixture, "_get_precision", "pytest-benchmark", PYTEST_BENCHMARK)
    calibration = _require(fixture, "_calibration_precision", "pytest-benchmark", PYTEST_BENCHMARK)
    return float(max(minimum, precision(timer(fixture)) * calibration))


def calibrated_iterations(fixture: Any, function: Callable[[], Any]) -> int:
    """The calls per round pytest-benchmark's own calibration chooses for ``function`` (its
    ``--benchmark-verbose`` log shows it calibrating)."""
    runner = _require(fixture, "_make_runner", "pytest-benchmark", PYTEST_BENCHMARK)
    calibrate = _require(fixture, "_calibrate_timer", "pytest-benchmark", PYTEST_BENCHMARK)
    _, iterations, _ = calibrate(runner(function, (), {}))
    return int(iterations)


def log(fixture: Any, message: str) -> None:
    """A line of ``--benchmark-verbose`` output, where pytest-benchmark writes its own."""
    logger = _require(fixture, "_logger", "pytest-benchmark", PYTEST_BENCHMARK)
    logger.debug(message, yellow=True, bold=True)


def save_cprofile(fixture: Any, profile: Any) -> None:
    """Keep a cProfile run as pytest-benchmark does for ``--benchmark-cprofile``."""
    _require(fixture, "_save_cprofile", "pytest-benchmark", PYTEST_BENCHMARK)(profile)


def record_options(stats: Any, **used: Any) -> None:
    """Say in pytest-benchmark's JSON ``options`` block what was really used."""
    _require(stats, "options", "pytest-benchmark", PYTEST_BENCHMARK).update(used)


# What a fixture's settings are when neither the command line nor the marker changed them.
BENCHMARK_DEFAULTS = {"_max_time": 1.0, "_warmup": False, "_precision": None}


def changed_settings(fixture: Any) -> dict[str, Any]:
    """The pytest-benchmark settings of ``fixture`` that differ from its defaults, by the
    option's name (``max_time``, ``warmup``, ``precision``)."""
    return {
        name.lstrip("_"): getattr(fixture, name)
        for name, default in BENCHMARK_DEFAULTS.items()
        if getattr(fixture, name, default) not in (default, 0)
    }


# --------------------------------------------------------------------------- torch

TORCH = ((2, 4), (3, 0))


def dispatch_mode_class() -> type:
    """torch's ``TorchDispatchMode``, the base of the counters that see every operator."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        raise UnsupportedVersion(
            _unsupported("torch", TORCH, "torch.utils._python_dispatch.TorchDispatchMode")
        ) from None
    return cast(type, TorchDispatchMode)


def unguarded_dispatch_mode(mode_class: type, dispatch: Callable[..., Any]) -> type:
    """``mode_class`` with ``dispatch`` as its ``__torch_dispatch__``, not wrapped in dynamo's
    ``disable``. torch wraps a mode's ``__torch_dispatch__`` (``_should_skip_dynamo``) so that
    dynamo never compiles it, and the wrapper imports ``torch._dynamo`` on its first call: 1.2 s
    in every process that counts work. Only for use while dynamo is not loaded, when no compiled
    code can run."""
    body: dict[str, Any] = {"__torch_dispatch__": dispatch}
    if hasattr(dispatch_mode_class(), "_should_skip_dynamo"):
        body["_should_skip_dynamo"] = classmethod(lambda cls: False)
    return type(f"Unguarded{mode_class.__name__}", (mode_class,), body)


def flop_formulas() -> dict[Any, Callable[..., int]]:
    """torch's FLOP formula of each operator (the table behind ``FlopCounterMode``, which
    torch does not document as public)."""
    from torch.utils import flop_counter

    return dict(_require(flop_counter, "flop_registry", "torch", TORCH))


def callgrind_requests() -> tuple[Callable[[], None], Callable[[], None]]:
    """torch's callgrind client requests, compiled into libtorch (what
    ``torch.utils.benchmark``'s ``collect_callgrind`` uses): switch collection on or off, and
    switch it off and dump what was collected. Undocumented, hence here."""
    import torch

    supported = getattr(torch._C, "_valgrind_supported_platform", None)
    toggle = getattr(torch._C, "_valgrind_toggle", None)
    dump = getattr(torch._C, "_valgrind_toggle_and_dump_stats", None)
    if supported is None or toggle is None or dump is None:
        raise UnsupportedVersion(_unsupported("torch", TORCH, "torch._C._valgrind_toggle"))
    if not supported():
        raise RuntimeError("this torch build has no callgrind client requests (platform)")
    return toggle, dump


def cpu_level() -> str:
    """The widest of AVX-512 and AVX2 that the CPU reports (under valgrind: the CPU valgrind
    presents), ``base`` if neither, whatever ``ATEN_CPU_CAPABILITY`` holds torch's kernels to.
    torch asks cpuinfo through private functions, hence here."""
    import torch

    cpu = torch.cpu
    for level in ("avx512", "avx2"):
        supported = getattr(cpu, f"_is_{level}_supported", None)
        if supported is None:
            raise UnsupportedVersion(
                _unsupported("torch", TORCH, f"torch.cpu._is_{level}_supported")
            )
        if supported():
            return level
    return "base"


def dynamo_counters() -> dict[str, int] | None:
    """dynamo's graphs, graph breaks, unsupported constructs and frames so far; None while
    ``torch._dynamo`` is not loaded (nothing was compiled)."""
    import sys

    if "torch._dynamo" not in sys.modules:
        return None
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        raise UnsupportedVersion(
            _unsupported("torch", TORCH, "torch._dynamo.utils.counters")
        ) from None
    return {
        "graphs": counters["stats"]["unique_graphs"],
        "graph_break": sum(counters["graph_break"].values()),
        "unimplemented": sum(counters["unimplemented"].values()),
        "frames": counters["frames"]["total"],
    }


def close_elastic_streams(context: Any) -> None:
    """Close the log files torch's elastic launcher opened for every rank (it closes only
    those of ranks still running)."""
    for handler in context.subprocess_handlers.values():
        for name in ("_stdout", "_stderr"):
            stream = getattr(handler, name, None)
            if stream is not None:
                stream.close()


def torch_version_info(load_torch: Callable[[], Any]) -> tuple[str, str | None]:
    """``torch.__version__`` (``2.14.1+cu130``, local label included) and ``torch.version.cuda``,
    without importing torch when it is not loaded yet: a run of pure-Python benchmarks would
    pay seconds and hundreds of MiB for it only to name the machine its baselines are kept for.
    Both are read from torch's ``version.py``, which its build generates as plain assignments.
    Where torch is loaded, or its files are not laid out so, ``load_torch()`` gives the module."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        try:
            return _torch_version_file()
        except Exception:  # another layout (or no torch): importing it says what is wrong
            torch = load_torch()
    return str(torch.__version__), torch.version.cuda


def _torch_version_file() -> tuple[str, str | None]:
    """What torch's ``version.py`` says, run under a private name outside ``sys.modules``:
    as ``torch.version`` it would be a submodule of a package that is not loaded."""
    import importlib.util
    from pathlib import Path

    found = importlib.util.find_spec("torch")
    if found is None or not found.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")
    [location] = found.submodule_search_locations
    spec = importlib.util.spec_from_file_location(
        "_pytest_hpml_torch_version", Path(location, "version.py")
    )
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"torch has no version.py in {location}", name="torch.version")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    version, cuda = module.__version__, module.cuda
    if not isinstance(version, str) or not isinstance(cuda, (str, type(None))):
        raise TypeError(f"torch's version.py says version {version!r}, CUDA {cuda!r}")
    return version, cuda
