"""Fixtures of pytest-hpml and their parametrization from the options.

``device``, ``precision``, ``backend`` and ``num_workers`` are parametrized in
``pytest_generate_tests`` (ids such as ``test_step[cuda-bf16]``, selectable with ``-k bf16``);
``dist_backend`` and ``hpml_seed`` take one value per run. Every one of them seeds random,
numpy and torch first, through ``hpml_seed``. torch is imported only when a fixture runs.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from . import markers
from .compile import CompileBackend, reset_dynamo, unknown_backends
from .devices import hardware
from .distributed import Launch, launch
from .options import SETTINGS_KEY, Settings
from .precision import Precision

if TYPE_CHECKING:
    import torch

PARAMETRIZED = ("device", "precision", "backend", "num_workers")
FIXTURES = (*PARAMETRIZED, "dist_backend", "hpml_seed", "rank", "world_size")


def settings(config: pytest.Config) -> Settings:
    return config.stash[SETTINGS_KEY]


def devices(config: pytest.Config) -> list[str]:
    """The selected devices with ``auto`` resolved, without duplicates."""
    hw = hardware(config)
    return list(dict.fromkeys(hw.resolve(spec) for spec in settings(config).devices))


def _choices(metafunc: pytest.Metafunc, name: str) -> tuple[list[Any], list[str], str | None]:
    """Values, ids, and the marker restricting them (``precision``/``device``), for one fixture."""
    config, chosen = metafunc.config, settings(metafunc.config)
    if name == "device":
        values = devices(config)
        allowed = markers.allowed(metafunc.definition, "device")
        kept = [d for d in values if allowed is None or d.partition(":")[0] in allowed]
        return kept, kept, _restricted(allowed, values, "--hpml-device")
    if name == "precision":
        allowed = markers.allowed(metafunc.definition, "precision")
        values = list(chosen.precisions)
        kept = [p for p in values if allowed is None or p in allowed]
        return kept, kept, _restricted(allowed, values, "--hpml-precision")
    if name == "backend":
        return list(chosen.backends), list(chosen.backends), None
    return list(chosen.workers), [f"workers{n}" for n in chosen.workers], None


def _restricted(allowed: tuple[str, ...] | None, selected: list[str], flag: str) -> str | None:
    if allowed is None:
        return None
    return f"runs only with {', '.join(allowed)}; selected: {', '.join(selected)} ({flag})"


def _is_ours(metafunc: pytest.Metafunc, name: str) -> bool:
    """False when the test's ``name`` fixture is the user's own or already parametrized."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        argnames = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if isinstance(argnames, str):
            argnames = [a.strip() for a in argnames.split(",")]
        if name in argnames:
            return False
    fixturedefs = getattr(metafunc, "_arg2fixturedefs", {}).get(name)
    if not fixturedefs:
        return False
    return getattr(fixturedefs[-1].func, "__module__", None) == __name__


def parametrize(metafunc: pytest.Metafunc) -> None:
    """Parametrize the hpml fixtures a test asks for, in a fixed order for readable ids."""
    for name in PARAMETRIZED:
        if name not in metafunc.fixturenames or not _is_ours(metafunc, name):
            continue
        values, ids, restriction = _choices(metafunc, name)
        if values:
            params = [pytest.param(v, id=i) for v, i in zip(values, ids)]
        else:
            params = [
                pytest.param(None, id=f"no-{name}", marks=pytest.mark.skip(reason=restriction))
            ]
        metafunc.parametrize(name, params, indirect=True)


def uses_hpml(item: pytest.Item) -> bool:
    """Whether a collected test asks for an hpml fixture or marker."""
    names = getattr(item, "fixturenames", ())
    if any(n in names for n in FIXTURES):
        return True
    return any(mark.name in markers.HARDWARE_MARKERS for mark in item.iter_markers())


def check_selection(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Stop with a usage error if a selected device is missing or a backend unknown to torch."""
    hw = hardware(config)
    for device in devices(config):
        reason = hw.unavailable(device)
        if reason:
            raise pytest.UsageError(reason)
    if any("backend" in getattr(item, "fixturenames", ()) for item in items):
        chosen = settings(config)
        unknown, known = unknown_backends(chosen.backends)
        if unknown:
            raise pytest.UsageError(
                f"{chosen.sources['backends']}: unknown torch.compile backend(s) "
                f"{', '.join(unknown)}; choose from {', '.join(known)}"
            )


def seed_everything(seed: int) -> None:
    """Seed random, numpy (when installed) and torch (all devices)."""
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(seed)
    import torch

    torch.manual_seed(seed)


@pytest.fixture
def hpml_seed(request: pytest.FixtureRequest) -> int:
    """The run's seed (``--hpml-seed``), already applied to random, numpy and torch."""
    seed = settings(request.config).seed
    seed_everything(seed)
    return seed


@pytest.fixture
def device(request: pytest.FixtureRequest, hpml_seed: int) -> torch.device:
    """A ``torch.device`` from ``--hpml-device``; the test runs once per selected device."""
    import torch

    spec = getattr(request, "param", None) or devices(request.config)[0]
    here = launch(request.config)
    if here is not None and spec == "cuda":  # each rank its own GPU
        return torch.device("cuda", here.local_rank)
    return torch.device(spec)


def _current_device(request: pytest.FixtureRequest) -> torch.device:
    if "device" in request.fixturenames:
        return request.getfixturevalue("device")
    import torch

    return torch.device(devices(request.config)[0])


@pytest.fixture
def precision(request: pytest.FixtureRequest, hpml_seed: int) -> Iterator[Precision]:
    """A :class:`~pytest_hpml.precision.Precision` from ``--hpml-precision``, for the test's device.

    Skips when the device cannot run it; sets the TF32 flags it implies and restores them after.
    """
    name = getattr(request, "param", None) or settings(request.config).precisions[0]
    value = Precision(name, _current_device(request))
    reason = value.unsupported(hardware(request.config))
    if reason:
        pytest.skip(reason)
    with value.flags():
        yield value


@pytest.fixture
def backend(request: pytest.FixtureRequest, hpml_seed: int) -> Iterator[CompileBackend]:
    """A :class:`~pytest_hpml.compile.CompileBackend` from ``--hpml-backend``.

    Dynamo's caches are reset before and after, so compiled graphs do not leak between tests.
    """
    value = CompileBackend(getattr(request, "param", None) or settings(request.config).backends[0])
    reset_dynamo()
    yield value
    reset_dynamo()


@pytest.fixture
def dist_backend(request: pytest.FixtureRequest, hpml_seed: int) -> str:
    """The ``torch.distributed`` backend: ``--hpml-dist-backend``, auto meaning nccl on CUDA."""
    if launch(request.config) is not None:
        import torch.distributed as dist

        return dist.get_backend()
    chosen = settings(request.config).dist_backend
    if chosen != "auto":
        return chosen
    return "nccl" if _current_device(request).type == "cuda" else "gloo"


def _rank_of(request: pytest.FixtureRequest) -> Launch:
    here = launch(request.config)
    if here is None:
        pytest.fail(
            f"the {request.fixturename} fixture needs @pytest.mark.distributed "
            "(or pytest started by torchrun, mpirun or srun)",
            pytrace=False,
        )
    return here


@pytest.fixture
def rank(request: pytest.FixtureRequest) -> int:
    """This rank's number (0 to world_size - 1) in a ``@pytest.mark.distributed`` test."""
    return _rank_of(request).rank


@pytest.fixture
def world_size(request: pytest.FixtureRequest) -> int:
    """How many ranks run this ``@pytest.mark.distributed`` test."""
    return _rank_of(request).world_size


BENCHMARK_KEY = pytest.StashKey[Any]()


@pytest.fixture
def benchmark(benchmark: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """pytest-benchmark's ``benchmark``, measured by pytest-hpml and judged against baselines.

    See :class:`~pytest_hpml.benchmarking.HpmlBenchmark`. Rounds end with the test's device
    synchronized; with torch loaded, each round is preceded by the reference workload.
    """
    import sys

    from .benchmarking import HpmlBenchmark, Plan, Reference, synchronizer
    from .regression import regression

    device = request.getfixturevalue("device") if "device" in request.fixturenames else None
    sync = synchronizer(device)
    _, batch_size = markers.bench_settings(request.node.get_closest_marker("hpml_bench"))
    plan = Plan(
        budget=regression(request.config).budget(request.node.nodeid),
        min_rounds=benchmark._min_rounds,
        disable_gc=benchmark._disable_gc,
        timer=benchmark._timer,
        sync=sync,
        device=device,
        # A pure-Python benchmark need not pay for importing torch.
        reference=Reference(device, sync) if "torch" in sys.modules else None,
    )
    value = HpmlBenchmark.adopt(benchmark, plan, batch_size)
    request.node.stash[BENCHMARK_KEY] = value
    yield value
    value.settle()  # before pytest-benchmark's own teardown, which this fixture depends on


@pytest.fixture
def num_workers(request: pytest.FixtureRequest, hpml_seed: int) -> int:
    """A DataLoader worker count from ``--hpml-workers``."""
    param = getattr(request, "param", None)
    return settings(request.config).workers[0] if param is None else param
