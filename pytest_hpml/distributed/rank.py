"""A pytest process that is one rank: its process group, the tests it runs, and its reports.

**Spawned** by a parent pytest (:mod:`.spawn`): the rank runs the one test it was started for,
with the backend and timeout its parent chose, dies with its parent, writes each report to the
file its parent reads as soon as it has it, and writes its stacks when asked (``faulthandler``
on ``SIGUSR1``).

**Launched**: pytest itself was started by ``torchrun``, ``mpirun`` or ``srun``. Every process
is a rank: the process group is initialized once, every rank checks that all collected the
same tests, each test runs in place on every rank, and the ranks exchange their reports after
each test, so that rank 0 reports one merged outcome (the others print nothing). Rank
variables that no launcher set are a usage error before any rendezvous, and rank 0 says where
it waits for the others, and for how long (Note [Launches]).
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .. import _compat
from ..config.invocation import files_of, holds_none, keep_only
from ..config.role import (
    RENDEZVOUS_ENV,
    Launch,
    backend_source,
    die_with_parent,
    end_before_summary,
    missing_backend,
    settings,
)
from .reports import RankRun, deserialize, merge, serialize
from .spec import (
    BACKEND_ENV,
    GROUP_ENV,
    PARENT_ENV,
    RESULT_ENV,
    STACKS_ENV,
    TEST_ENV,
    TIMEOUT_ENV,
    skip_reason,
    spec,
)


class Rank:
    """The plugin of a process that is one rank: process group, selection, and reports."""

    def __init__(self, config: pytest.Config, here: Launch) -> None:
        self.config = config
        self.here = here
        self.reports: list[dict[str, Any]] = []
        self.exchange_group: Any = None
        # a spawned rank's one file to collect (pytest_ignore_collect)
        self.files = files_of([os.environ[TEST_ENV]]) if here.spawned else None
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

    @pytest.hookimpl
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """A spawned rank collects only the file of the test it was started for: importing
        the other test modules (torchvision, nni, datasets) only delays the ranks' start
        (Note [Cheaper processes])."""
        if self.files is None:
            return None
        return holds_none(collection_path, config, self.files)

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

    @pytest.hookimpl(tryfirst=True)
    def pytest_terminal_summary(self, exitstatus: int) -> None:
        """A spawned rank has written every report: it ends before the summary."""
        if self.here.spawned:
            end_before_summary(exitstatus)

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
        with _torch_log_held():
            dist.init_process_group(
                backend, rank=here.rank, world_size=here.world_size, timeout=timeout
            )
    except Exception as exc:  # a store that timed out, an address that does not resolve...
        said = (str(exc).strip().splitlines() or [""])[0]
        raise pytest.UsageError(
            f"hpml: {_who(here)} could not join the process group at {where} ({backend}) "
            f"within {seconds:g} s: {type(exc).__name__}: {said}"
        ) from None


@contextlib.contextmanager
def _torch_log_held() -> Iterator[None]:
    """Hold what is written to file descriptor 2 while the process group is made: torch's C++
    log of each failed try to reach the store carries the C++ backtrace of its exception (some
    40 lines a try). A group that is made writes it out as it was; one that is not drops it,
    and the usage error gives torch's first line (Note [Launches])."""
    sys.stderr.flush()
    saved, made = os.dup(2), False
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
            made = True
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if made:
                log.seek(0)
                with open(2, "wb", closefd=False) as stderr:
                    shutil.copyfileobj(log, stderr)


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
