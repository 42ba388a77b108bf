"""GPUs shared by pytest-xdist workers. Each worker holds a slice of the GPUs
(:mod:`pytest_hpml.hardware.gpus`): a test that fits on the slice holds it while it runs
(:class:`HeldGpus`), and a test needing more GPUs than the slice runs apart on GPUs leased for
it (:class:`SharedGpus`, through :func:`.spawn.spawn_protocol`): a distributed test in its
ranks, another test in one process of its own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Callable

import pytest

from ..config.role import launch
from ..hardware import gpus
from .spawn import spawn_protocol
from .spec import gpus_needed, spec


@contextlib.contextmanager
def gpus_held(item: pytest.Item) -> Iterator[None]:
    """In an xdist worker, hold its GPUs while a test that fits on them runs."""
    share = gpus.share(item.config)
    need = 0 if share is None or launch(item.config) else gpus_needed(item, spec(item))
    if share is None or not 0 < need <= len(share.mine):
        yield
        return
    with share.holding(share.mine):
        yield


class SharedGpus:
    """The plugin of an xdist worker holding a slice of the GPUs: a test that needs more GPUs
    than the slice runs apart on leased ones, the others hold the slice while they run.
    Registered only in such a worker, so other runs pay nothing for it."""

    def __init__(self, budget: Callable[[str], float]) -> None:
        self.budget = budget

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        """Run a test needing more GPUs than this worker has on leased GPUs (and a
        distributed test in ranks of its own)."""
        return spawn_protocol(item, nextitem, self.budget)


class HeldGpus:
    """Beside :class:`SharedGpus`: holds the worker's GPUs while a test that fits on them runs.
    An object of its own because pytest takes only ``pytest_*`` names as hooks, and the
    wrapper and the protocol above are two implementations of one hook."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        with gpus_held(item):
            return (yield)
