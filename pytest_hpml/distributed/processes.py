"""The rank processes of one spawned test: started, watched, stopped, and read back.

Each rank is started with the handler torch's elastic launcher starts a worker with
(:func:`~torch.distributed.elastic.multiprocessing.subprocess_handler.get_subprocess_handler`: a
process group of its own, killed whole), in a directory of its own; or, where a run with
``--hpml-against`` has a fork server, forked by it with torch imported, the same otherwise
(Note [Fork server]). The parent watches the
ranks: the first rank that fails or dies, or the test's deadline, ends the wait; ranks still
running are asked for their stacks (``faulthandler`` on ``SIGUSR1``), then killed with their
process groups, as torch's launcher closes its workers. What each rank left is read back: its
reports, how it ended, its stacks without pytest's own frames, and the tail of its output.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from .. import _compat
from .reports import RankRun, read_reports
from .spec import PARENT_ENV, Spec

STACK_GRACE = 0.5  # seconds a running rank gets to write its stacks before it is killed
CLOSE_GRACE = 5.0  # seconds a rank gets to end on SIGTERM before SIGKILL, as torch's launcher
TAIL_LINES = 40
# Frames of pytest's own machinery, left out of the stacks of ranks that were stopped.
PLUMBING = ("/_pytest/", "/pluggy/", "<frozen runpy>", "/pytest/__main__.py")


class Ranks:
    """The rank processes of one test, in ``workdir`` (a directory per rank: its output, its
    ``--basetemp``), started one by one so that a deadline can stop the starting."""

    def __init__(self, workdir: Path, forker: Any = None) -> None:
        """``forker``: a fork server's ``Server`` or ``Client``, which forks the ranks, or
        None: they start afresh."""
        self.workdir = workdir
        self.subprocess_handlers: dict[int, Any] = {}  # the name torch's launcher gives them
        self.forker = forker

    def start(self, rank: int, args: Sequence[str], env: dict[str, str]) -> None:
        from torch.distributed.elastic.multiprocessing.subprocess_handler import (
            get_subprocess_handler,
        )

        home = self.workdir / f"rank{rank}"
        home.mkdir()
        if self.forker is not None:
            try:
                self.subprocess_handlers[rank] = ForkedRank(self.forker, home, args, env)
                return
            except OSError:  # the server ended: this rank and the next start afresh
                self.forker = None
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
        for handler in self.subprocess_handlers.values():
            if isinstance(handler, ForkedRank):
                handler.proc.release()


class ForkedRank:
    """A rank the fork server forked, with what torch's launcher's handler has: ``proc`` (its
    ``poll``, ``wait``, ``pid``), ``close(death_sig)`` for its process group, its log files."""

    def __init__(self, forker: Any, home: Path, args: Sequence[str], env: dict[str, str]):
        self._stdout = open(home / "stdout.log", "w")  # noqa: SIM115 - closed with the rank
        self._stderr = open(home / "stderr.log", "w")  # noqa: SIM115
        try:
            # A forked rank's parent is the server: it dies with that one, and with this
            # process through the server (its connection closing).
            self.proc = forker.popen(
                [sys.executable, *args],
                cwd=os.getcwd(),
                env={**os.environ, **env, PARENT_ENV: str(forker.pid)},
                output=(self._stdout.fileno(), self._stderr.fileno()),
                session=True,
            )
        except OSError:
            self.close_logs()
            raise

    def close(self, death_sig: signal.Signals = signal.SIGTERM) -> None:
        os.killpg(self.proc.pid, death_sig)
        self.close_logs()

    def close_logs(self) -> None:
        self._stdout.close()
        self._stderr.close()


def _signal_group(handler: Any, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended since it was looked at
        handler.close(death_sig=sig)


def watch(item: pytest.Item, ranks: Ranks, asked: Spec, deadline: float) -> list[RankRun]:
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
        run.reports = read_reports(item.config, workdir / f"rank{rank}.json")
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


def _tail(*paths: str | None) -> str:
    lines: list[str] = []
    for path in paths:
        if path:
            lines += _read(Path(path)).splitlines()
    # A crash dump lists the crashing frame first: keep it whole rather than the last lines.
    crash = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    return "\n".join(lines[crash:] if crash is not None else lines[-TAIL_LINES:])
