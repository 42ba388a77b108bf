"""What a ``@pytest.mark.distributed`` test asks for, and whether it can have it here.

The marker's request with its defaults resolved (:class:`Spec`), why this machine or this
launch cannot run it (a skip), and the most ranks a spawned test may start here: a test asking
for more than :func:`rank_limit` fails at its setup, before any rank starts. A backend this
torch was built without skips the test before any rank starts, as nccl without enough GPUs
does. Also the GPUs a test uses at once, which the GPU leases across xdist workers go by, and
the variables through which the parent tells a spawned rank its test.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from ..config import markers
from ..config.options import OPTIONS
from ..config.role import (
    RANK_PARENT_ENV,
    RANK_RESULT_ENV,
    backend_source,
    launch,
    missing_backend,
    settings,
)
from ..config.values import usable_cpus
from ..hardware import gpus
from ..hardware.devices import devices, hardware

# What the parent tells a spawned rank, and the rank reads back.
RESULT_ENV = RANK_RESULT_ENV  # a spawned rank writes its reports here
TEST_ENV = "HPML_RANK_TEST"  # the node id a spawned rank runs
BACKEND_ENV = "HPML_RANK_BACKEND"  # the backend the parent chose for the test
TIMEOUT_ENV = "HPML_RANK_TIMEOUT"  # seconds, for the process group's collectives
PARENT_ENV = RANK_PARENT_ENV  # the parent's pid: a rank dies with it
GROUP_ENV = "HPML_RANK_GROUP"  # "0": a test run apart on leased GPUs, no process group
STACKS_ENV = "HPML_RANK_STACKS"  # where a spawned rank writes its stacks when asked

# gloo ranks of a test mostly wait for one another: a few per core still make progress, and
# more than this many per core is a typo (world_size=10**6) sooner than a plan.
RANKS_PER_CPU = 4


@dataclass(frozen=True)
class Spec:
    """What ``@pytest.mark.distributed`` asks for, with the defaults resolved."""

    world_size: int
    backend: str
    timeout: float
    source: str = ""  # where the backend was chosen, for messages


def spec(item: pytest.Item) -> Spec | None:
    """The resolved marker of a distributed test; None for other tests, and for a test whose
    marks are wrong (it runs here and fails at its setup, saying what is wrong)."""
    mark = item.get_closest_marker("distributed")
    if mark is None or markers.problem(item):
        return None
    world_size, backend, timeout = markers.distributed_settings(mark)
    chosen = settings(item.config)
    source = f"@pytest.mark.distributed(backend={backend!r})"
    if not backend:
        backend = os.environ.get(BACKEND_ENV) or chosen.dist_backend
        source = backend_source(chosen)
    if backend == "auto":
        backend = "nccl" if _on_cuda(item) else "gloo"
    return Spec(world_size, backend, float(timeout or chosen.dist_timeout), source)


def _on_cuda(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    device = callspec.params.get("device") if callspec else None
    if device is None:
        device = devices(item.config)[0]
    return str(device).startswith("cuda")


def skip_reason(item: pytest.Item, asked: Spec) -> str | None:
    """Why this machine (or this launch) cannot run the test, or None."""
    missing = missing_backend(asked.backend, asked.source)
    if missing:
        return missing
    here = launch(item.config)
    if here is not None and not here.spawned and here.world_size != asked.world_size:
        return (
            f"needs world_size={asked.world_size}; this {here.launcher} launch has "
            f"{here.world_size} ranks"
        )
    if asked.backend == "nccl" and (here is None or here.spawned):
        share = gpus.share(item.config)
        found = len(share.every) if share else hardware(item.config).cuda_count
        if found < asked.world_size:
            return (
                f"nccl with world_size={asked.world_size} needs {asked.world_size} GPUs "
                f"(one per rank), found {found}"
            )
    return None


def rank_limit(config: pytest.Config) -> tuple[int, str]:
    """The most ranks a spawned test may start here, and why: --hpml-max-ranks, else
    RANKS_PER_CPU per usable CPU, or one per GPU where there are more GPUs."""
    chosen = settings(config)
    if chosen.max_ranks is not None:
        return chosen.max_ranks, chosen.sources["max_ranks"]
    cpus = usable_cpus()
    share = gpus.share(config)
    found = len(share.every) if share else hardware(config).cuda_count
    if found > RANKS_PER_CPU * cpus:
        return found, f"one per GPU: {found} GPUs"
    return RANKS_PER_CPU * cpus, f"{RANKS_PER_CPU} per usable CPU: {cpus} CPUs"


def too_many_ranks(item: pytest.Item, asked: Spec) -> str | None:
    """Why ``asked`` is more ranks than this machine should start at once, or None."""
    limit, why = rank_limit(item.config)
    if asked.world_size <= limit:
        return None
    option = next(opt for opt in OPTIONS if opt.dest == "max_ranks")
    return (
        f"{item.nodeid}: world_size={asked.world_size} is more ranks than this machine runs at "
        f"once: at most {limit} ({why}); raise the limit with {option.cli}=N "
        f"(env {option.env}, ini {option.ini})"
    )


def gpus_needed(item: pytest.Item, asked: Spec | None) -> int:
    """GPUs a test uses at once: its gpu mark's count, an nccl test's ranks, one on cuda."""
    if markers.problem(item):
        return 0  # it fails at its setup
    need = 0
    mark = item.get_closest_marker("gpu")
    if mark is not None:
        need = markers.gpu_requirement(mark).count
    if asked is not None and asked.backend == "nccl":
        need = max(need, asked.world_size)
    callspec = getattr(item, "callspec", None)
    if callspec is not None and str(callspec.params.get("device", "")).startswith("cuda"):
        need = max(need, 1)
    return need
