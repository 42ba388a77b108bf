"""GPUs shared among pytest-xdist workers.

Under ``pytest -n K`` the controlling process hands each worker a disjoint slice of the visible
GPUs, which the worker makes its ``CUDA_VISIBLE_DEVICES`` before anything in it initializes
CUDA. A test that uses GPUs holds its worker's slice (a file lock per GPU, shared by all the
workers) while it runs. A test that needs more GPUs than its worker has (``gpu(count=N)``, or
an nccl distributed test of ``world_size`` N) waits until N GPUs are free, leases them, and
runs in a fresh process that sees only those: never two tests on one GPU at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..config.role import Role, role
from . import devices

SLICE_INPUT = "hpml_gpus"  # workerinput keys
ALL_INPUT = "hpml_all_gpus"
LOCKS_INPUT = "hpml_gpu_locks"
POLL = 0.2  # seconds between attempts to lease GPUs held by other workers


def visible_gpus() -> list[str]:
    """The ids of the visible GPUs, as ``CUDA_VISIBLE_DEVICES`` would name them."""
    count = devices.device_count()
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [str(i) for i in range(count)]
    return [v.strip() for v in value.split(",") if v.strip()][:count]


def slices(gpus: Sequence[str], workers: int) -> list[list[str]]:
    """Disjoint, nearly equal slices of ``gpus``, one per worker (empty when GPUs run out)."""
    n = len(gpus)
    return [list(gpus[i * n // workers : (i + 1) * n // workers]) for i in range(workers)]


@dataclass(frozen=True)
class Share:
    """A worker's part of the GPUs: its own slice, all of them, and where their locks live."""

    mine: tuple[str, ...]
    every: tuple[str, ...]
    locks: Path

    def _lock(self, stack: contextlib.ExitStack, gpu: str, wait: bool) -> bool:
        """Lock one GPU's file until ``stack`` closes; False if another test holds it and
        ``wait`` is off."""
        handle = stack.enter_context(open(self.locks / f"gpu-{gpu}.lock", "w"))  # noqa: SIM115
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    @contextlib.contextmanager
    def holding(self, gpus: Sequence[str]) -> Iterator[None]:
        """Hold the locks of ``gpus`` (in a fixed order: no deadlock between workers)."""
        with contextlib.ExitStack() as stack:
            for gpu in sorted(gpus):
                self._lock(stack, gpu, wait=True)
            yield

    @contextlib.contextmanager
    def lease(self, count: int) -> Iterator[list[str]]:
        """Wait for ``count`` GPUs that no other test holds; yield their ids while held."""
        while True:
            with contextlib.ExitStack() as stack:
                got: list[str] = []
                for gpu in self.every:  # stop at ``count``: hold no GPU the test does not use
                    if len(got) < count and self._lock(stack, gpu, wait=False):
                        got.append(gpu)
                if len(got) == count:
                    yield got
                    return
            time.sleep(POLL)  # all released: let the holders finish


SHARE_KEY = pytest.StashKey["Share | None"]()


def share(config: pytest.Config) -> Share | None:
    """This xdist worker's GPUs, or None outside xdist or without GPUs."""
    return config.stash.get(SHARE_KEY, None)


def take_slice(config: pytest.Config) -> None:
    """In a worker: see only the slice the controller gave it (before CUDA starts here)."""
    given = getattr(config, "workerinput", {})
    if SLICE_INPUT not in given:
        return
    os.environ["CUDA_VISIBLE_DEVICES"] = given[SLICE_INPUT]
    config.stash[SHARE_KEY] = Share(
        tuple(filter(None, given[SLICE_INPUT].split(","))),
        tuple(given[ALL_INPUT].split(",")),
        Path(given[LOCKS_INPUT]),
    )


class Scheduler:
    """The controller's plugin under xdist: slices the GPUs and tells each worker its own."""

    def __init__(self, config: pytest.Config) -> None:
        self.workers = int(config.option.numprocesses)
        self.gpus = visible_gpus()
        self.plan = slices(self.gpus, self.workers)
        self.locks = Path(tempfile.mkdtemp(prefix="pytest-hpml-gpus-"))

    def header(self) -> str:
        given = " ".join(f"gw{i}={','.join(s) or 'none'}" for i, s in enumerate(self.plan))
        return f"hpml: GPUs per xdist worker: {given}"

    @pytest.hookimpl
    def pytest_configure_node(self, node: Any) -> None:
        """Give a starting worker its slice, the full list and the lock directory."""
        index = int(node.gateway.id.removeprefix("gw"))
        node.workerinput[SLICE_INPUT] = ",".join(self.plan[index % self.workers])
        node.workerinput[ALL_INPUT] = ",".join(self.gpus)
        node.workerinput[LOCKS_INPUT] = str(self.locks)

    @pytest.hookimpl
    def pytest_unconfigure(self) -> None:
        """Remove the lock files."""
        shutil.rmtree(self.locks, ignore_errors=True)


def schedule(config: pytest.Config) -> Scheduler | None:
    """Register the scheduler in an xdist controller on a machine with GPUs."""
    if role(config) is Role.XDIST_WORKER or not config.pluginmanager.hasplugin("xdist"):
        return None
    if not getattr(config.option, "numprocesses", None) or config.option.dist == "no":
        return None
    if not visible_gpus():
        return None
    scheduler = Scheduler(config)
    config.pluginmanager.register(scheduler, "hpml-gpus")
    return scheduler
