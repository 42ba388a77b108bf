"""The other side of :mod:`.reruns`: the plugin of a process started to measure again (a
rerun, or a process of a pair). It runs only the tests it was asked for, takes its turns and
its CPU as the controller says, and hands back what it measured."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

from ..config import markers
from ..config.invocation import files_of, holds_none, keep_only
from ..config.role import (
    die_with_parent,
    end_before_summary,
    written,
)
from .reruns import (
    FORKSERVER_KEY,
    MEASURED,
    NARROW_KEY,
    NEXT,
    PAIR_SEED_KEY,
    READY,
    SKIPPED,
    SLICE,
    SLICED,
    TURN_KEY,
    _close,
    _tell,
)

if TYPE_CHECKING:
    from .forkserver import Client


class Rerun:
    """The plugin of a rerun process: runs only the tests asked for and hands back results.

    ``results`` gives what this process measured, at the end of its session (passed in: the
    verdict layer holds the results, and this layer must not reach up to it).
    """

    def __init__(self, request: dict[str, Any], results: Callable[[], list[Any]]) -> None:
        die_with_parent(request["parent"])
        self.tests = set(request["tests"])
        self.output = request["output"]
        self.results = results
        self.failed: dict[str, str] = {}  # test id -> what failed
        self.benchmarks: list[str] = []  # every benchmark test collected, wanted or not
        # the files of the tests asked for, where only those are collected
        self.files = files_of(self.tests) if request.get(NARROW_KEY) else None
        self.turn: list[int] | None = request.get(TURN_KEY)
        self.holding = False  # the test running took its turn (Turn)
        self._server = request.get(FORKSERVER_KEY)
        self._client: Client | None = None
        self._cpus = _allowed_cpus()  # where this process may run, pinned while it measures
        self._pinned = False
        # kept for the process's life: the heap's first allocations, as its pair's (Note [Pair
        # seeds])
        self._pad = heap_pad(request.get(PAIR_SEED_KEY))

    def forker(self) -> Client | None:
        """What forks the ranks of a distributed test here: the fork server that forked this
        process, where it said how to reach it (Note [Fork server]); else None."""
        where = self._server
        if self._client is None and isinstance(where, dict):
            from .forkserver import Client

            address, pid, python = (where.get(k) for k in ("address", "pid", "python"))
            if isinstance(address, str) and isinstance(pid, int) and isinstance(python, str):
                self._client = Client(address, pid, python)
        return self._client

    def take_turn(self, measuring: bool = True) -> None:
        """Before a test's first measurement: wait for this process's turn (:class:`Turn`);
        once a test, which gives the turn back when it has ended. ``measuring``: this thread
        measures, on the CPU the controller names (Note [Slices]); a test run in ranks takes
        the turn for them, unpinned, so that the ranks it starts are not."""
        if self.turn and not self.holding:
            self.holding = True
            self._resume(_tell(self.turn, READY), measuring)

    @property
    def paired(self) -> bool:
        """Whether this is a process of the pairs of --hpml-against: it takes turns."""
        return bool(self.turn)

    @property
    def slice(self) -> float:
        """Seconds of measuring between two of :meth:`pass_turn`; 0 without turns."""
        return SLICE if self.paired else 0.0

    def pass_turn(self) -> None:
        """Mid-turn, between two samples: let the other process of the pair measure a slice,
        and go on once it has (Note [Slices])."""
        if self.turn and self.holding:
            self._resume(_tell(self.turn, SLICED), self._pinned)

    def _resume(self, answer: bytes, measuring: bool) -> None:
        """Go on measuring after the controller's ``answer``, on the CPU it names."""
        if not answer:
            self._alone()
        elif measuring and self._cpus and answer != NEXT:
            self._pin({self._cpus[answer[0] % len(self._cpus)]})

    def _pin(self, cpus: set[int]) -> None:
        """This thread on ``cpus`` only; where it cannot be, as it was."""
        try:
            os.sched_setaffinity(0, cpus)
        except (AttributeError, OSError):
            return
        self._pinned = cpus != set(self._cpus)

    def _unpin(self) -> None:
        if self._pinned:
            self._pin(set(self._cpus))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
        """A test that took a turn gives it back once it, and its teardown, ended; then waits
        until the other process of the pair has measured the same. A test run in ranks of its
        own takes the turn before they start and holds it until they end: they measure
        without passing it, and the other process's ranks would measure beside them (Note
        [Slices])."""
        if markers.runs_in_ranks(item):
            self.take_turn(measuring=False)
        try:
            return (yield)
        finally:
            self._unpin()  # the next test sets up on any core, beside the other process
            if self.turn and self.holding:
                self.holding = False
                if not _tell(self.turn, MEASURED):
                    self._alone()

    def _alone(self) -> None:
        """The controller is gone or let go: measure without turns from now on."""
        self._unpin()
        for end in self.turn or ():
            _close(end)
        self.turn = None

    @pytest.hookimpl
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """Where asked to, leave out every file and directory that holds none of the tests
        asked for: importing the other test modules (torchvision, datasets) buys nothing here
        (Note [Cheaper processes])."""
        if self.files is None:
            return None
        return holds_none(collection_path, config, self.files)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Deselect every test the first process does not want measured again (after noting
        the benchmarks collected: on the base side of --hpml-against, those the working tree
        lacks were removed)."""
        self.benchmarks = [item.nodeid for item in items if markers.is_benchmark(item)]
        keep_only(config, items, self.tests)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Note what failed here, for the first process to report."""
        self._failed(report, report.when)

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Note a module that could not be collected here: its tests are not new, but broken."""
        self._failed(report, "collection")

    def _failed(self, report: pytest.TestReport | pytest.CollectReport, when: str) -> None:
        if report.nodeid in self.failed:
            return
        if report.failed:
            lines = report.longreprtext.strip().splitlines()
            self.failed[report.nodeid] = f"{when}: {lines[-1] if lines else 'failed'}"
        elif report.skipped and isinstance(report.longrepr, tuple):  # said as a skip, not judged
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
            self.failed[report.nodeid] = f"{SKIPPED}: {reason}"

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write what this process measured for the first one to pool."""
        document = {
            "results": self.results(),
            "failed": self.failed,
            "benchmarks": self.benchmarks,
        }
        Path(self.output).write_text(json.dumps(document), encoding="utf-8")
        written(int(session.exitstatus))

    @pytest.hookimpl(tryfirst=True)
    def pytest_terminal_summary(self, exitstatus: int) -> None:
        """The answer is written (:meth:`pytest_sessionfinish`): end before the summary."""
        end_before_summary(exitstatus)


def _allowed_cpus() -> list[int]:
    """The CPUs this process may run on, in order; none where it cannot tell."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return []


def heap_pad(seed: Any) -> list[bytes]:
    """Objects of sizes drawn from ``seed``, made before the tests are collected: the heap
    then places what follows as the other process of the pair does, and as no other pair
    does (Note [Pair seeds]). None for no seed."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        return []
    import random

    draw = random.Random(seed)
    return [bytes(draw.randrange(1, 512)) for _ in range(draw.randrange(1, 2048))]
