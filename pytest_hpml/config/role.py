"""The role this pytest process plays, answered in one place, and what it does in that role.

A pytest-hpml run can be several processes: the one the user started (the *controller*),
pytest-xdist workers, *reruns* that measure benchmarks again in fresh processes, and *ranks*
of a distributed test (spawned by pytest-hpml, or pytest itself launched by torchrun, mpirun
or srun). Every place that must behave differently asks :func:`role` (or the one predicate
:func:`is_controller`), never the environment or ``config.workerinput`` itself.

What the user chose stays in :class:`~pytest_hpml.config.resolution.Settings`; what this process
does with it (the baseline mode in force here, its share of the measuring time, whether it
writes reports) is its :class:`Duty`. A process that a run started for its own use (a rerun, a
spawned rank) dies with the process that started it (:func:`die_with_parent`).
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import functools
import os
import signal
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from .resolution import SETTINGS_KEY, Settings, say
from .values import digits, quoted, whole

# The rerun channel (Note [Internal variables]): the path of the JSON that tells a rerun process
# what to do, in a variable no user sets by accident, acted on only when the file is a request
# made for this very process (:func:`_take_request`).
RERUN_ENV = "HPML_INTERNAL_RERUN"
RERUN_PREFIX = "pytest-hpml-rerun-"  # the name of every request file starts so
RERUN_FORMAT = "pytest-hpml-rerun/1"  # every request's "format" field
RANK_RESULT_ENV = "HPML_RANK_RESULT"  # a spawned rank writes its reports here
RANK_BENCH_TIME_ENV = "HPML_RANK_BENCH_TIME"  # seconds of rounds per benchmark in a rank
RANK_PARENT_ENV = "HPML_RANK_PARENT"  # the pid of what started a rank: it dies with it
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends

# (rank, world size, local rank) variables of each launcher, first match wins.
LAUNCHERS = (
    ("torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK")),
    ("mpirun", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")),
    ("srun", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")),
)
# torch's env:// rendezvous reads these beside RANK and WORLD_SIZE: every launcher of torch ranks
# (torchrun, DeepSpeed's, Kubeflow's, accelerate's) sets them, a shell left over does not
# (Note [Launches]).
RENDEZVOUS_ENV = ("MASTER_ADDR", "MASTER_PORT")
MAX_RANK = 2**31 - 1  # torch.distributed's ranks and world sizes are C ints


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
    local_given: bool = True  # False: no local rank variable, so 0 (Note [Launches])

    @property
    def spawned(self) -> bool:
        return self.launcher == "pytest-hpml"


class BadLaunch(Exception):
    """Rank variables that cannot be a launch this process is part of: why, and the variables
    of the launcher they belong to."""

    def __init__(self, why: str, names: Sequence[str]) -> None:
        super().__init__(why)
        self.why = why
        self.names = tuple(names)


def launch_from(environ: Mapping[str, str]) -> Launch | None:
    """The launch this process belongs to, from its environment; None when it is no rank.

    A launcher's variables are there when its rank and world size are (an empty one is unset);
    each one there must then be a whole number in ASCII digits, or :class:`BadLaunch` says
    which is not. Without the local rank (Kubeflow's PyTorchJob sets none), it is 0: one rank
    per machine. An ``srun`` or ``mpirun`` of a single task is no launch: pytest then spawns
    ranks itself.
    """
    for launcher, names in LAUNCHERS:
        given_rank, given_size, given_local = (environ.get(name) or None for name in names)
        if given_rank is None or given_size is None:
            continue
        rank = _rank_number(names[0], given_rank, names)
        size = _rank_number(names[1], given_size, names)
        local = None if given_local is None else _rank_number(names[2], given_local, names)
        if size < 2 and launcher != "torchrun":
            return None
        if environ.get(RANK_RESULT_ENV):
            launcher = "pytest-hpml"
        return Launch(rank, size, local or 0, launcher, local is not None)
    return None


def _rank_number(name: str, value: str, names: Sequence[str]) -> int:
    """A rank variable's number, compared with its bound before int() sees it;
    :class:`BadLaunch` if it is none. ASCII digits only: torch's env:// reading would take
    ``" 0 "`` or another script's digits, a shell or another launcher reading them would not."""
    number = whole(value, MAX_RANK) if digits(value) else None
    if number is None:
        raise BadLaunch(
            f"{name}={quoted(value)} is no number from 0 to {MAX_RANK} in ASCII digits", names
        )
    return number


LAUNCH_KEY = pytest.StashKey["Launch | None"]()


def launch_problem(environ: Mapping[str, str], here: Launch) -> str | None:
    """Why the rank variables of ``environ`` (``here``, read by :func:`launch_from`) cannot be
    a launch this process is part of, or None (Note [Launches]). Asked before any rendezvous:
    rank 0 of variables no launcher set would wait for ranks that never come."""
    if here.spawned:
        return None
    names = dict(LAUNCHERS)[here.launcher]
    given = " ".join(f"{name}={environ[name]}" for name in names if environ.get(name))
    if here.world_size < 1 or max(here.rank, here.local_rank) >= here.world_size:
        return f"{given}: {names[0]} and {names[2]} must be below {names[1]}"
    missing = [name for name in RENDEZVOUS_ENV if not environ.get(name)]
    if here.launcher == "torchrun" and missing:
        return (
            f"{given} are set, but {' and '.join(missing)} not: no launcher started this pytest "
            "(torchrun, like every launcher of torch.distributed ranks, sets both)"
        )
    port = environ.get("MASTER_PORT", "")
    if port and not (digits(port) and whole(port, 65535)):
        return f"{given}, MASTER_PORT={quoted(port)}: MASTER_PORT is no port number (1 to 65535)"
    return None


def launch(config: pytest.Config) -> Launch | None:
    """This process's launch (read once per session), or None when it is no rank. Rank
    variables that cannot be a launch are a usage error (:func:`launch_problem`)."""
    if LAUNCH_KEY not in config.stash:
        try:
            here = launch_from(os.environ)
            problem = launch_problem(os.environ, here) if here is not None else None
            if here is not None and problem:
                raise BadLaunch(problem, dict(LAUNCHERS)[here.launcher])
        except BadLaunch as exc:
            raise pytest.UsageError(
                f"hpml: {exc.why}. Unset {', '.join(exc.names)} to run the tests in this process "
                "(a @pytest.mark.distributed test starts ranks of its own), or start pytest with "
                "its launcher"
            ) from None
        if here is not None and not here.local_given:
            local = dict(LAUNCHERS)[here.launcher][2]
            say(
                config,
                f"hpml: {local} is not set: local rank 0, one rank per machine (as Kubeflow's "
                f"PyTorchJob starts them); set {local} where a machine runs several ranks",
            )
        config.stash[LAUNCH_KEY] = here
    return config.stash[LAUNCH_KEY]


def missing_backend(backend: str, source: str) -> str | None:
    """Why this torch cannot make a process group of ``backend`` (chosen by ``source``), or
    None. Asked before any rank starts: a backend torch was built without is then a skip (or,
    for a launch's own process group, a usage error), as nccl without GPUs is."""
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        return f"{backend} backend ({source}): torch {torch.__version__} has no torch.distributed"
    built = getattr(dist, f"is_{backend}_available", None)
    if built is not None and not built():
        return (
            f"{backend} backend ({source}): torch {torch.__version__} was built without it "
            f"(torch.distributed.is_{backend}_available() is False)"
        )
    return None


def backend_source(chosen: Settings) -> str:
    """Where the run's distributed backend was chosen, with its value, for messages."""
    where = chosen.sources.get("dist_backend", "default")
    if where == "default":
        return f"--hpml-dist-backend default, {chosen.dist_backend}"
    return f"{where}={chosen.dist_backend}"


def rerun_request() -> dict[str, Any] | None:
    """In a rerun process, what the controller asked of it; None elsewhere. A value of
    :data:`RERUN_ENV` naming no request made for this process is a usage error, and its file
    is left as it was (Note [Internal variables])."""
    path = os.environ.get(RERUN_ENV)
    if not (path and path.strip()):  # blank is unset; pytest-hpml clears it so for its ranks
        return None
    request, refused = _take_request(path)
    if refused:
        raise pytest.UsageError(
            f"{RERUN_ENV}={path}: this variable is internal to pytest-hpml (the request file "
            f"of a process it starts itself), and {refused}; the file was left as it was. "
            f"Unset {RERUN_ENV}"
        )
    return request


@functools.cache
def _take_request(path: str) -> tuple[dict[str, Any] | None, str]:
    """The request in ``path`` and "", its file removed (once per process: while the rerun
    measures, nothing of the run is on disk for a controller killed with SIGKILL to leave
    behind); (None, "") when no such file is there (a pytest that a test of the rerun starts
    inherits the variable, but the rerun took the file away: it is no rerun); (None, why) when
    the file is no request made for this process: nothing else is read, nothing removed."""
    from ..storage.reader import Unreadable, read_json  # here: only reruns read one

    file = Path(path)
    if not (file.name.startswith(RERUN_PREFIX) and file.suffix == ".json"):
        return None, f"{path} is no file pytest-hpml made (their names are {RERUN_PREFIX}*.json)"
    try:
        info = file.lstat()
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{path} cannot be looked at ({exc.strerror or exc})"
    if not stat.S_ISREG(info.st_mode):
        return None, f"{path} is no regular file (a link, a directory, a device)"
    if info.st_uid != os.getuid():
        return None, f"{path} belongs to another user (uid {info.st_uid})"
    try:
        request = read_json(file, "rerun request")
    except FileNotFoundError:
        return None, ""
    except Unreadable as exc:
        return None, str(exc)
    refused = _not_for_this_process(request, path)
    if refused:
        return None, refused
    file.unlink(missing_ok=True)
    return request, ""


def _not_for_this_process(request: Any, path: str) -> str | None:
    """Why ``request``, read from ``path``, is no request that this process's parent made for
    it (:func:`~pytest_hpml.bench.reruns.ask` writes them), or None."""
    if not isinstance(request, dict) or request.get("format") != RERUN_FORMAT:
        return f'{path} is no pytest-hpml rerun request (its "format" is not "{RERUN_FORMAT}")'
    parent = request.get("parent")
    if parent != os.getppid():
        return (
            f"{path} was made for a process that process {parent!r} starts; this one's parent "
            f"is process {os.getppid()}"
        )
    if request.get("output") != path:
        return f"{path} asks for the answer in another file ({request.get('output')!r})"
    tests, seconds = request.get("tests"), request.get("bench_time")
    if not isinstance(tests, list) or not all(isinstance(test, str) for test in tests):
        return f"{path}: tests is not a list of test ids"
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        return f"{path}: bench_time is not a number of seconds"
    return None


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


def end_before_summary(exitstatus: int) -> None:
    """From ``pytest_terminal_summary``: end a process that a run started for its own use
    (a rerun, a spawned rank), whose session has ended and has written all it tells its
    parent. No one reads its summary, and a plugin's can cost (Note [Cheaper processes]). The
    plugins' ``pytest_unconfigure`` and the exit handlers still run, and then the process
    ends without tearing its interpreter down (:func:`end_quickly`)."""
    written(exitstatus)
    pytest.exit("ended before its terminal summary, which no one reads", returncode=exitstatus)


# The exit status of a process that has written all it tells its parent (:func:`written`).
_ENDING: dict[str, int] = {}


def end_quickly() -> None:
    """In a process a run started for its own use (its :data:`RERUN_ENV` set: a rerun, or a
    spawned rank, which gets it blank), before any conftest runs: once it has written all it
    tells its parent (:func:`written`), it ends without tearing the interpreter down, which
    frees torch's modules and objects one by one: 0.4 s a process on the 2-core VM, which the
    next pair, or the test that spawned the ranks, waits for (Note [Cheaper processes]). Exit
    handlers run in the reverse order of their registration, so every one registered after
    this (torch's, the tests' own) still runs first."""
    atexit.register(_end_now)


def written(exitstatus: int) -> None:
    """This process has written all it tells its parent and will end with ``exitstatus``."""
    _ENDING["status"] = exitstatus


def _end_now() -> None:
    status = _ENDING.get("status")
    if status is None:  # it wrote nothing yet (or is no such process): end as Python does
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # closed or replaced by a test: nothing to flush
            stream.flush()
    os._exit(status)


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
