"""The role this pytest process plays, answered in one place, and what it does in that role.

A pytest-hpml run can be several processes: the one the user started (the *controller*),
pytest-xdist workers, *reruns* that measure benchmarks again in fresh processes, and *ranks*
of a distributed test (spawned by pytest-hpml, or pytest itself launched by torchrun, mpirun
or srun). Every place that must behave differently asks :func:`role` (or the one predicate
:func:`is_controller`), never the environment or ``config.workerinput`` itself.

What the user chose stays in :class:`~pytest_hpml.config.options.Settings`; what this process
does with it (the baseline mode in force here, its share of the measuring time, whether it
writes reports) is its :class:`Duty`. A process that a run started for its own use (a rerun, a
spawned rank) dies with the process that started it (:func:`die_with_parent`).
"""

from __future__ import annotations

import enum
import functools
import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from .options import SETTINGS_KEY, Settings

RERUN_ENV = "HPML_RERUN"  # path of the JSON that tells a rerun process what to do
RANK_RESULT_ENV = "HPML_RANK_RESULT"  # a spawned rank writes its reports here
RANK_BENCH_TIME_ENV = "HPML_RANK_BENCH_TIME"  # seconds of rounds per benchmark in a rank
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends

# (rank, world size, local rank) variables of each launcher, first match wins.
LAUNCHERS = (
    ("torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK")),
    ("mpirun", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")),
    ("srun", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")),
)


class Role(enum.Enum):
    """What this process is in the run."""

    CONTROLLER = "controller"  # started by the user (or rank 0 of a launch): reports
    XDIST_WORKER = "xdist worker"  # runs tests; its controller reports
    RERUN = "rerun"  # measures benchmarks again for the controller, reports nothing
    RANK = "rank"  # one rank of a distributed test; rank 0 or the parent reports


class Launch(NamedTuple):
    """This process's place among the ranks, when it is one."""

    rank: int
    world_size: int
    local_rank: int
    launcher: str  # torchrun, mpirun, srun, or pytest-hpml (a spawned rank)

    @property
    def spawned(self) -> bool:
        return self.launcher == "pytest-hpml"


def launch_from(environ: Mapping[str, str]) -> Launch | None:
    """The launch this process belongs to, from its environment; None when it is no rank.

    An ``srun`` or ``mpirun`` of a single task is no launch: pytest then spawns ranks itself.
    """
    for launcher, names in LAUNCHERS:
        if all(environ.get(name, "").isdecimal() for name in names):
            rank, size, local = (int(environ[name]) for name in names)
            if size < 2 and launcher != "torchrun":
                return None
            if environ.get(RANK_RESULT_ENV):
                launcher = "pytest-hpml"
            return Launch(rank, size, local, launcher)
    return None


LAUNCH_KEY = pytest.StashKey["Launch | None"]()


def launch(config: pytest.Config) -> Launch | None:
    """This process's launch (read once per session), or None when it is no rank."""
    if LAUNCH_KEY not in config.stash:
        config.stash[LAUNCH_KEY] = launch_from(os.environ)
    return config.stash[LAUNCH_KEY]


def rerun_request() -> dict[str, Any] | None:
    """In a rerun process, what the controller asked of it; None elsewhere."""
    path = os.environ.get(RERUN_ENV)
    return _take_request(path) if path else None


@functools.cache
def _take_request(path: str) -> dict[str, Any] | None:
    """Read the request once, and remove its file: while the rerun measures, nothing of the run
    is on disk for a controller killed with SIGKILL to leave behind. A pytest that a test of the
    rerun starts inherits the variable but finds no file: it is no rerun."""
    file = Path(path)
    try:
        request = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    file.unlink(missing_ok=True)
    return request


def die_with_parent(parent: int) -> None:
    """End this process when ``parent``, the process that started it, ends, even killed with
    SIGKILL (Linux): a rerun or rank left running would hold cores and GPUs for nobody.

    The kernel kills it with SIGKILL, so it cleans up nothing: a rank stuck in a collective could
    not run a handler anyway."""
    if sys.platform.startswith("linux"):
        import ctypes  # here: only such processes need it

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent and os.getppid() != parent:
        os._exit(1)  # the parent ended before the line above took effect


def role(config: pytest.Config) -> Role:
    """The one answer to "what is this process?"."""
    here = launch(config)
    if here is not None and (here.spawned or here.rank != 0):
        return Role.RANK
    if hasattr(config, "workerinput"):
        return Role.XDIST_WORKER
    if rerun_request() is not None:
        return Role.RERUN
    return Role.CONTROLLER


def is_controller(config: pytest.Config) -> bool:
    """Whether this process prints the summary, records baselines and writes reports."""
    return role(config) is Role.CONTROLLER


class Duty(NamedTuple):
    """What this process does with the user's settings, given its role."""

    baseline: str  # the baseline mode in force here: "off" in a rerun
    processes: int  # processes a comparison is measured in (1 in reruns and ranks)
    record_processes: int  # processes a baseline is recorded in (1 in reruns and ranks)
    bench_time: float | None  # seconds of rounds per benchmark set by a parent, else None
    reports: bool  # whether this process writes the --hpml-report* files
    against: str = ""  # the base revision this process judges against (--hpml-against)


def duty_of(chosen: Settings, config: pytest.Config) -> Duty:
    """This process's duty: a controller does what the user chose; a rerun measures for as
    long as asked and judges nothing; a rank measures in its own process only, and only the
    reporting rank (launched rank 0) writes reports."""
    here = launch(config)
    if here is not None:
        budget = os.environ.get(RANK_BENCH_TIME_ENV) if here.spawned else None
        quiet = here.spawned or here.rank != 0
        return Duty(chosen.baseline, 1, 1, float(budget) if budget else None, not quiet)
    asked = rerun_request()
    if asked is not None:
        return Duty("off", 1, 1, float(asked["bench_time"]), False)
    if chosen.against:  # stored baselines are neither read nor written
        return Duty("off", 1, 1, None, True, chosen.against)
    return Duty(chosen.baseline, chosen.processes, chosen.record_processes, None, True)


DUTY_KEY = pytest.StashKey[Duty]()


def settings(config: pytest.Config) -> Settings:
    """The options as the user chose them."""
    return config.stash[SETTINGS_KEY]


def duty(config: pytest.Config) -> Duty:
    """What this process does with them (see :func:`duty_of`)."""
    if DUTY_KEY not in config.stash:
        config.stash[DUTY_KEY] = duty_of(settings(config), config)
    return config.stash[DUTY_KEY]


def measuring_threads(config: pytest.Config) -> int | None:
    """torch's intra-op thread count while benchmarks measure, in every process of the run:
    ``--hpml-threads``, else 1 with ``--hpml-against`` (Note [Threads]); None leaves torch's."""
    chosen = settings(config)
    return chosen.threads or (1 if chosen.against else None)
