"""Tests marked ``@pytest.mark.distributed``: run in ``world_size`` real ranks.

**Spawned** (the usual case): the pytest process that collected the test (the *parent*) hosts
a ``TCPStore`` on a free port, as torchrun's agent does, and starts ``world_size`` fresh
``python -m pytest`` processes one by one, each with the handler torch's elastic launcher starts
a worker with (:func:`~torch.distributed.elastic.multiprocessing.subprocess_handler.
get_subprocess_handler`: a process group of its own, killed whole). Each rank runs that one
test, with ``torch.distributed`` initialized from the usual environment (``RANK``,
``WORLD_SIZE``, ``MASTER_PORT``...), and writes its test reports to a JSON file. The parent
watches the ranks: the first rank that fails or dies, or the test's timeout, ends the test;
ranks still running are asked for their stacks (``faulthandler`` on ``SIGUSR1``), then killed
with their process groups. The ranks' reports are merged into one per phase.

The timeout counts from the start of the launch: a deadline that passes while ranks are still
being started stops the starting. A test asking for more ranks than :func:`rank_limit` fails at
its setup, before any starts. Ctrl-C stops the ranks and removes their directory, and pytest
ends as it does on Ctrl-C (torch's own launcher would turn SIGINT into an exception of its own
for the rest of the run); ranks die with a parent killed outright (leaving the directory).

**Launched**: pytest itself was started by ``torchrun``, ``mpirun`` or ``srun``. Every process
is a rank: the process group is initialized once, every rank checks that all collected the
same tests, each test runs in place on every rank, and the ranks exchange their reports after
each test, so that rank 0 reports one merged outcome (the others print nothing). Rank
variables that no launcher set are a usage error before any rendezvous, and rank 0 says where
it waits for the others, and for how long (Note [Launches]).

A backend this torch was built without skips the test before any rank starts, as nccl without
enough GPUs does.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from .. import _compat
from ..config import markers
from ..config.invocation import child_args, keep_only
from ..config.options import OPTIONS, usable_cpus
from ..config.role import (
    RANK_BENCH_TIME_ENV,
    RANK_RESULT_ENV,
    RENDEZVOUS_ENV,
    RERUN_ENV,
    Launch,
    backend_source,
    die_with_parent,
    launch,
    missing_backend,
    settings,
)
from ..hardware import gpus
from ..hardware.devices import devices, hardware

RESULT_ENV = RANK_RESULT_ENV  # a spawned rank writes its reports here
TEST_ENV = "HPML_RANK_TEST"  # the node id a spawned rank runs
BACKEND_ENV = "HPML_RANK_BACKEND"  # the backend the parent chose for the test
TIMEOUT_ENV = "HPML_RANK_TIMEOUT"  # seconds, for the process group's collectives
PARENT_ENV = "HPML_RANK_PARENT"  # the parent's pid: a rank dies with it
GROUP_ENV = "HPML_RANK_GROUP"  # "0": a test run apart on leased GPUs, no process group
STACK_GRACE = 0.5  # seconds a running rank gets to write its stacks before it is killed
CLOSE_GRACE = 5.0  # seconds a rank gets to end on SIGTERM before SIGKILL, as torch's launcher
# gloo ranks of a test mostly wait for one another: a few per core still make progress, and
# more than this many per core is a typo (world_size=10**6) sooner than a plan.
RANKS_PER_CPU = 4
STACKS_ENV = "HPML_RANK_STACKS"  # where a spawned rank writes its stacks when asked
TAIL_LINES = 40
# Frames of pytest's own machinery, left out of the stacks of ranks that were stopped.
PLUMBING = ("/_pytest/", "/pluggy/", "<frozen runpy>", "/pytest/__main__.py")

# --------------------------------------------------------------------------- what a test asks


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


# --------------------------------------------------------------------------- merging reports


@dataclass
class RankRun:
    """What one rank left behind: its reports, and how its process ended."""

    rank: int
    reports: list[pytest.TestReport] = field(default_factory=list)
    exit: str | None = None  # "exit code 3", "killed by SIGKILL", None while it ran on
    stopped: str | None = None  # why the parent stopped it (timeout, another rank failed)
    output: str = ""  # the tail of its own stdout and stderr, outside pytest's capture
    stacks: str = ""  # what faulthandler wrote when asked
    first: bool = False  # the rank whose failure ended the test: told first

    def report(self, when: str) -> pytest.TestReport | None:
        return next((r for r in self.reports if r.when == when), None)


def merge(item: pytest.Item, runs: Sequence[RankRun]) -> list[pytest.TestReport]:
    """One report per phase from every rank's: failed if any rank failed or vanished, skipped
    only if every rank skipped, a failure if they disagree. Rank 0's report is the base."""
    merged = [_merge_phase(item, "setup", runs)]
    if merged[0].passed:
        merged.append(_merge_phase(item, "call", runs))
    merged.append(_merge_phase(item, "teardown", runs))
    return merged


def _merge_phase(item: pytest.Item, when: str, runs: Sequence[RankRun]) -> pytest.TestReport:
    reports = {run.rank: run.report(when) for run in runs}
    problems = []
    for run in sorted(runs, key=lambda run: (not run.first, run.rank)):
        report = reports[run.rank]
        if report is None:
            if when != "teardown":  # a rank that vanished earlier is reported there
                problems.append(_vanished(run, when))
        elif report.failed:
            problems.append(f"rank {run.rank} failed: {_crash(report)}\n{report.longreprtext}")
    outcomes = {r.outcome for r in reports.values() if r is not None}
    base = reports.get(0) or next((r for r in reports.values() if r is not None), None)
    if not problems and outcomes == {"skipped"}:
        return base  # type: ignore[return-value]
    if not problems and len(outcomes) > 1:
        said = ", ".join(
            f"rank {rank} {r.outcome}" + (f" ({_skip_text(r)})" if r.skipped else "")
            for rank, r in sorted(reports.items())
            if r is not None
        )
        problems.append(f"the ranks disagree: {said}")
    sections = [s for run in runs for s in _sections(run, reports[run.rank])]
    return pytest.TestReport(
        item.nodeid,
        item.location,
        dict.fromkeys(item.keywords, 1),
        "failed" if problems else "passed",
        "\n\n".join(problems) if problems else None,
        when,  # type: ignore[arg-type]
        sections,
        duration=max((r.duration for r in reports.values() if r is not None), default=0.0),
        user_properties=base.user_properties if base is not None and not problems else (),
    )


def skipped(item: pytest.Item, reason: str) -> list[pytest.TestReport]:
    """The reports of a test skipped before any rank started."""
    _, line, _ = item.location
    keywords = dict.fromkeys(item.keywords, 1)
    longrepr = (str(item.path), (line or 0) + 1, f"Skipped: {reason}")
    return [
        pytest.TestReport(item.nodeid, item.location, keywords, "skipped", longrepr, "setup"),
        pytest.TestReport(item.nodeid, item.location, keywords, "passed", None, "teardown"),
    ]


def failed(item: pytest.Item, message: str) -> list[pytest.TestReport]:
    """The reports of a test that failed at its setup, before its ranks ran, as a test with a
    wrong mark fails (made by pytest's own hook, so that the summary line shows ``message``)."""
    call = pytest.CallInfo.from_call(lambda: pytest.fail(message, pytrace=False), "setup")
    setup = item.ihook.pytest_runtest_makereport(item=item, call=call)
    keywords = dict.fromkeys(item.keywords, 1)
    teardown = pytest.TestReport(item.nodeid, item.location, keywords, "passed", None, "teardown")
    return [setup, teardown]


def spawn_protocol(
    item: pytest.Item, nextitem: pytest.Item | None, budget: Callable[[str], float]
) -> bool | None:
    """Run a distributed test in ranks of its own, or a test needing more GPUs than this xdist
    worker has in a process of its own on leased GPUs, and log the merged reports; None for
    the other tests, and in a process that is a rank already.

    ``budget(test id)``: the seconds of rounds a benchmark gets in one process, which the
    ranks are told (passed in by the plugin: the bench layer decides it)."""
    if launch(item.config) is not None:
        return None
    asked = spec(item)
    share = gpus.share(item.config)
    need = gpus_needed(item, asked)
    leased = share is not None and need > len(share.mine)
    if asked is None and not leased:
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reason = skip_reason(item, asked) if asked else None
    refused = too_many_ranks(item, asked) if asked and not reason else None
    if reason:
        reports = skipped(item, reason)
    elif refused:
        reports = failed(item, refused)
    elif leased and need > len(share.every):  # type: ignore[union-attr]
        reports = skipped(item, f"needs {need} GPUs, found {len(share.every)}")  # type: ignore[union-attr]
    elif leased:
        with share.lease(need) as chosen:  # type: ignore[union-attr]
            apart = asked or Spec(1, "gloo", math.inf)
            reports = run_spawned(item, apart, budget, chosen, group=asked is not None)
    else:
        reports = run_spawned(item, asked, budget)  # type: ignore[arg-type]
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    _tear_down_before(item, nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _tear_down_before(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """What this process set up for earlier tests (module, class fixtures) and ``nextitem``
    does not need is torn down here, as pytest's own protocol does after each test."""
    # pytest_runtest_teardown would also read what setup left in the item's stash, and this
    # process never set the item up: only its setup state is unwound.
    call = pytest.CallInfo.from_call(lambda: _compat.teardown_exact(item, nextitem), "teardown")
    if call.excinfo is not None:
        report = item.ihook.pytest_runtest_makereport(item=item, call=call)
        item.ihook.pytest_runtest_logreport(report=report)


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


def _crash(report: pytest.TestReport) -> str:
    """The one line that says what went wrong (pytest's short summary shows it)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    return (getattr(crash, "message", "") or "").splitlines()[0] if crash else ""


def _skip_text(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def _vanished(run: RankRun, when: str) -> str:
    what = f"rank {run.rank} did not finish {when}"
    if run.stopped:
        what += f": {run.stopped}"
    if run.exit:
        what += f" ({run.exit})"
    if run.stacks.strip():
        what += f"\nwhere rank {run.rank} was:\n{run.stacks.strip()}"
    if run.output.strip() and not run.stacks.strip():
        what += f"\nlast output of rank {run.rank}:\n{run.output.strip()}"
    return what


def _sections(run: RankRun, report: pytest.TestReport | None) -> list[tuple[str, str]]:
    """The rank's captured output, each section named after its rank."""
    if report is None:
        return []
    return [(f"{name} (rank {run.rank})", text) for name, text in report.sections]


def serialize(config: pytest.Config, report: pytest.TestReport) -> dict[str, Any]:
    return config.hook.pytest_report_to_serializable(config=config, report=report)


def deserialize(config: pytest.Config, data: dict[str, Any]) -> pytest.TestReport:
    if isinstance(data.get("longrepr"), list):  # a skip's (path, line, reason), after JSON
        data = {**data, "longrepr": tuple(data["longrepr"])}
    return config.hook.pytest_report_from_serializable(config=config, data=data)


# --------------------------------------------------------------------------- the parent


def run_spawned(
    item: pytest.Item,
    asked: Spec,
    budget: Callable[[str], float],
    visible: Sequence[str] | None = None,
    group: bool = True,
) -> list[pytest.TestReport]:
    """Run ``item`` in ``asked.world_size`` fresh ranks and merge what they reported.

    ``visible``: the GPUs the ranks may see (leased ones); ``group``: whether they form a
    process group (not for a plain test run apart on leased GPUs). However this ends (Ctrl-C
    included), no rank is left running and the ranks' directory is removed.
    """
    from torch.distributed import TCPStore

    deadline = time.monotonic() + asked.timeout  # starting the ranks is part of the test
    ranks = Ranks(Path(tempfile.mkdtemp(prefix="pytest-hpml-ranks-")))
    try:
        store = TCPStore("127.0.0.1", 0, asked.world_size, True, wait_for_workers=False)
        bench_time = budget(item.nodeid)
        for rank in range(asked.world_size):
            if time.monotonic() > deadline:
                return failed(item, _late(asked, rank))
            env = _rank_env(item, asked, rank, store.port, ranks.workdir, bench_time)
            if visible is not None:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(visible)
            env[GROUP_ENV] = "1" if group else "0"
            ranks.start(rank, _rank_args(item.config, ranks.workdir, rank), env)
        return merge(item, _watch(item, ranks, asked, deadline))
    finally:
        ranks.close()
        shutil.rmtree(ranks.workdir, ignore_errors=True)


def _late(asked: Spec, started: int) -> str:
    return (
        f"timed out after {asked.timeout:g} s while starting the ranks ({started} of "
        f"{asked.world_size} started); those started were stopped"
    )


class Ranks:
    """The rank processes of one test, in ``workdir`` (a directory per rank: its output, its
    ``--basetemp``), started one by one so that a deadline can stop the starting."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.subprocess_handlers: dict[int, Any] = {}  # the name torch's launcher gives them

    def start(self, rank: int, args: Sequence[str], env: dict[str, str]) -> None:
        from torch.distributed.elastic.multiprocessing.subprocess_handler import (
            get_subprocess_handler,
        )

        home = self.workdir / f"rank{rank}"
        home.mkdir()
        self.subprocess_handlers[rank] = get_subprocess_handler(
            entrypoint=sys.executable,
            args=tuple(args),
            env=env,
            stdout=str(home / "stdout.log"),
            stderr=str(home / "stderr.log"),
            local_rank_id=rank,
        )

    @property
    def procs(self) -> dict[int, Any]:
        return {rank: handler.proc for rank, handler in self.subprocess_handlers.items()}

    def output(self, rank: int) -> str:
        home = self.workdir / f"rank{rank}"
        return _tail(str(home / "stdout.log"), str(home / "stderr.log"))

    def close(self) -> None:
        """Stop the ranks still running with their process groups (DataLoader workers too):
        SIGTERM, then SIGKILL after CLOSE_GRACE s, as torch's launcher closes its workers."""
        running = [h for h in self.subprocess_handlers.values() if h.proc.poll() is None]
        for handler in running:
            _signal_group(handler, signal.SIGTERM)
        end = time.monotonic() + CLOSE_GRACE
        for handler in running:
            try:
                handler.proc.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(handler, signal.SIGKILL)
                handler.proc.wait()
        _compat.close_elastic_streams(self)


def _signal_group(handler: Any, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended since it was looked at
        handler.close(death_sig=sig)


def _rank_env(
    item: pytest.Item, asked: Spec, rank: int, port: int, workdir: Path, bench_time: float
) -> dict:
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(asked.world_size),
        "LOCAL_WORLD_SIZE": str(asked.world_size),
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        # The ranks rendezvous on the parent's store, as torchrun's workers do on the agent's.
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_RUN_ID": f"hpml-{os.getpid()}",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        RESULT_ENV: str(workdir / f"rank{rank}.json"),
        STACKS_ENV: str(workdir / f"rank{rank}-stacks.txt"),
        TEST_ENV: item.nodeid,
        BACKEND_ENV: asked.backend,
        TIMEOUT_ENV: str(asked.timeout) if math.isfinite(asked.timeout) else "",
        PARENT_ENV: str(os.getpid()),
        RERUN_ENV: "",  # a rank measures in its own process only
        RANK_BENCH_TIME_ENV: str(bench_time),
    }


def _rank_args(config: pytest.Config, workdir: Path, rank: int) -> tuple[str, ...]:
    return (
        "-m",
        "pytest",
        *child_args(config),
        "-p",
        "no:cacheprovider",
        f"--basetemp={workdir / f'rank{rank}' / 'tmp'}",
        "--hpml-processes=1",
    )


def _watch(item: pytest.Item, ranks: Ranks, asked: Spec, deadline: float) -> list[RankRun]:
    """Wait for every rank, or for the first failure or the deadline; collect what they left."""
    procs = ranks.procs
    workdir = ranks.workdir
    stopped = None
    first = None
    while True:
        codes = {r: p.poll() for r, p in procs.items()}
        if all(code is not None for code in codes.values()):
            break
        failed = sorted(r for r, code in codes.items() if code not in (None, 0))
        if failed:
            first = failed[0]
            stopped = f"stopped after rank {first} ended with {_exit_text(codes[first])}"
        elif time.monotonic() > deadline:
            stopped = f"timed out after {asked.timeout:g} s"
        if stopped:
            _ask_for_stacks(procs)
            break
        time.sleep(0.05)
    runs = []
    for rank, proc in procs.items():
        code = proc.poll()
        run = RankRun(rank, exit=None if code is None else _exit_text(code), first=rank == first)
        if code is None:
            run.stopped = stopped
        run.reports = _read_reports(item.config, workdir / f"rank{rank}.json")
        run.stacks = _without_plumbing(_read(workdir / f"rank{rank}-stacks.txt"))
        run.output = ranks.output(rank)
        runs.append(run)
    return runs


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _ask_for_stacks(procs: Mapping[int, Any]) -> None:
    """Ranks still running write their stacks (faulthandler, on SIGUSR1) before they are killed."""
    running = [p for p in procs.values() if p.poll() is None]
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGUSR1)
    if running:
        time.sleep(STACK_GRACE)


def _without_plumbing(stacks: str) -> str:
    return "\n".join(line for line in stacks.splitlines() if not any(p in line for p in PLUMBING))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _read_reports(config: pytest.Config, path: Path) -> list[pytest.TestReport]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [deserialize(config, d) for d in data]


def _tail(*paths: str | None) -> str:
    lines: list[str] = []
    for path in paths:
        if path:
            lines += _read(Path(path)).splitlines()
    # A crash dump lists the crashing frame first: keep it whole rather than the last lines.
    crash = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    return "\n".join(lines[crash:] if crash is not None else lines[-TAIL_LINES:])


# --------------------------------------------------------------------------- the ranks


class Rank:
    """The plugin of a process that is one rank: process group, selection, and reports."""

    def __init__(self, config: pytest.Config, here: Launch) -> None:
        self.config = config
        self.here = here
        self.reports: list[dict[str, Any]] = []
        self.exchange_group: Any = None
        if here.spawned:
            die_with_parent(int(os.environ.get(PARENT_ENV) or 0))
            self.stacks = _stacks_file()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Launched: only rank 0 prints; the others' outcomes reach it after each test."""
        if not self.here.spawned and self.here.rank != 0:
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                session.config.pluginmanager.unregister(reporter)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """A spawned rank runs only the test it was started for."""
        if self.here.spawned:
            keep_only(config, items, {os.environ[TEST_ENV]})

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Join the process group; launched ranks check they collected the same tests."""
        if os.environ.get(GROUP_ENV) == "0":
            return
        init_process_group(self.config, self.here)
        if self.here.spawned:
            return
        import torch.distributed as dist

        self.exchange_group = dist.new_group(backend="gloo")
        digest = hashlib.sha256("\n".join(i.nodeid for i in session.items).encode()).hexdigest()
        digests: list[Any] = [None] * self.here.world_size
        dist.all_gather_object(digests, (len(session.items), digest), group=self.exchange_group)
        differ = [r for r, d in enumerate(digests) if d != digests[0]]
        if differ:
            raise pytest.UsageError(
                f"hpml: ranks {differ} collected other tests than rank 0 "
                f"({', '.join(f'rank {r}: {d[0]} tests' for r, d in enumerate(digests))}); "
                "every rank must collect the same tests in the same order"
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Launched: skip a distributed test this launch cannot run (another world size)."""
        asked = spec(item)
        reason = asked and skip_reason(item, asked)
        if reason:
            pytest.skip(reason)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
        """Launched: run the test on every rank, exchange the reports, log the merged ones."""
        if self.here.spawned:
            return None  # type: ignore[return-value]
        import torch.distributed as dist

        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        own = _compat.runtestprotocol(item, nextitem)
        gathered: list[Any] = [None] * self.here.world_size
        payload = [serialize(item.config, r) for r in own]
        dist.all_gather_object(gathered, payload, group=self.exchange_group)
        runs = [
            RankRun(rank, [deserialize(item.config, d) for d in data])
            for rank, data in enumerate(gathered)
        ]
        for report in merge(item, runs) if self.here.rank == 0 else own:
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A spawned rank writes each report as soon as it has it: a crash loses no more."""
        if not self.here.spawned:
            return
        self.reports.append(serialize(self.config, report))
        path = Path(os.environ[RESULT_ENV])
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(self.reports), encoding="utf-8")
        os.replace(scratch, path)

    @pytest.hookimpl
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Leave the process group cleanly."""
        if "torch.distributed" in sys.modules:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()


def init_process_group(config: pytest.Config, here: Launch) -> None:
    """Initialize ``torch.distributed`` from the environment, once per process: a spawned
    rank with the backend and timeout its parent chose for the test, a launched one with the
    run's --hpml-dist-backend and --hpml-dist-timeout. Launched, rank 0 says where it waits
    for the others and for how long; a process group that cannot be made (a backend torch
    lacks, ranks that never come) is a usage error that says so (Note [Launches])."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    backend, source, seconds = _group_settings(config, here)
    missing = missing_backend(backend, source)
    if missing:
        raise pytest.UsageError(f"hpml: {missing}; choose another with --hpml-dist-backend")
    _export_env(here)
    where = ":".join(os.environ[name] for name in RENDEZVOUS_ENV)
    if not here.spawned:
        _say(
            config,
            f"hpml: {_who(here)}: joining the others at {where} ({backend}), for at most "
            f"{seconds:g} s ({_timeout_source(config)})",
        )
    if backend == "nccl":
        torch.cuda.set_device(here.local_rank)
    timeout = datetime.timedelta(seconds=seconds)
    try:
        dist.init_process_group(
            backend, rank=here.rank, world_size=here.world_size, timeout=timeout
        )
    except Exception as exc:  # a store that timed out, an address that does not resolve...
        said = (str(exc).strip().splitlines() or [""])[0]
        raise pytest.UsageError(
            f"hpml: {_who(here)} could not join the process group at {where} ({backend}) "
            f"within {seconds:g} s: {type(exc).__name__}: {said}"
        ) from None


def _group_settings(config: pytest.Config, here: Launch) -> tuple[str, str, float]:
    """(backend, where it was chosen, timeout in seconds) of this process's group."""
    if here.spawned:
        seconds = float(os.environ.get(TIMEOUT_ENV) or 300)
        return os.environ.get(BACKEND_ENV) or _session_backend(), "chosen for the test", seconds
    chosen = settings(config)
    backend = chosen.dist_backend
    if backend == "auto":
        backend = _session_backend()
    return backend, backend_source(chosen), chosen.dist_timeout


def _who(here: Launch) -> str:
    return f"{here.launcher} rank {here.rank} of {here.world_size}"


def _timeout_source(config: pytest.Config) -> str:
    where = settings(config).sources.get("dist_timeout", "default")
    return "--hpml-dist-timeout default" if where == "default" else where


def _say(config: pytest.Config, line: str) -> None:
    """A line on the terminal, where this process has one (launched, rank 0 only)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)


def _session_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def _export_env(here: Launch) -> None:
    """mpirun and srun name ranks their own way; env:// reads torchrun's names."""
    os.environ.setdefault("RANK", str(here.rank))
    os.environ.setdefault("WORLD_SIZE", str(here.world_size))
    os.environ.setdefault("LOCAL_RANK", str(here.local_rank))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")


def _stacks_file() -> Any:
    """Stacks of every thread go to a file the parent reads, on SIGUSR1."""
    stream = open(os.environ[STACKS_ENV], "w")  # noqa: SIM115  (open while the rank lives)
    faulthandler.register(signal.SIGUSR1, file=stream, all_threads=True)
    return stream
