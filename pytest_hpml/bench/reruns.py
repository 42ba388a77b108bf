"""Measuring benchmarks again in fresh processes, as asv does.

Each process has a speed of its own that per-round normalization does not remove; pooling
``--hpml-processes`` processes per side shrinks that spread (Note [Processes]).

The session that ran the tests is the first process. At its end it starts the others one after
another: ``python -m pytest`` with the same arguments, told through :data:`RERUN_ENV` which
tests to run (the rest are deselected) and for how long, and writing what they measured to a
JSON file that is then pooled into this run's metrics.

Stopping them: Ctrl-C stops the process measuring (as Ctrl-C in a terminal would, then killed
after :data:`STOP_GRACE` s) and ends the run as pytest ends it on Ctrl-C. Each dies with the
first process, even one killed with SIGKILL. Its request file, which it removes once read, and
its answer, which it writes only at its end, hold the only trace of it on disk: a first process
killed in the instant between the answer and its reading leaves that one file behind.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Union

import pytest

from ..config.invocation import child_args
from ..config.progress import Progress, plural
from ..config.role import (
    RERUN_ENV,
    RERUN_FORMAT,
    RERUN_PREFIX,
    measuring_threads,
)
from ..model import Result
from ..storage.reader import Unreadable, read_json
from .ending import SEEN_CTRL_C
from .metrics import is_sampled

if TYPE_CHECKING:
    from .forkserver import Forked, Server

    Process = Union[subprocess.Popen[str], Forked]  # a process started fresh or forked

# In a rerun's request: whether it records the work counters and peak memory too. They are the
# same in every process, so the processes that only add samples leave them out.
COUNTS_KEY = "counts"
# In a rerun's request: whether it collects only the files of the tests it measures (Note
# [Cheaper processes]); without it, it collects all, and lists every benchmark it found.
NARROW_KEY = "narrow"
# In a rerun's request: the descriptors of its two pipes to the controller, with which it waits
# for its turn to measure (:class:`Turn`); without them, it measures at once.
TURN_KEY = "turn"
# In a rerun's request from a process the fork server forked: where that server takes requests
# for a distributed test's ranks ({"address", "pid", "python"}; Note [Fork server]).
FORKSERVER_KEY = "forkserver"
# In a rerun's request of the pairs: a number the two processes of a pair share and the next
# pair draws anew; it sets their hash seed where they start fresh and their heap's first
# allocations (Note [Pair seeds]).
PAIR_SEED_KEY = "pair_seed"
# what one process's run of a metric keeps
RUN_KEYS = ("samples", "reference", "budget", "load", "state")
STOP_GRACE = 5.0  # seconds an interrupted process gets to end before it is killed


@dataclass
class Reruns:
    """What the other processes measured, by test id and metric, and what went wrong."""

    runs: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def measure_again(
    config: pytest.Config, tests: Sequence[str], count: int, bench_time: float
) -> Reruns:
    """Run ``tests`` in ``count`` fresh processes, one after another. Ctrl-C ends the run as
    pytest does, keeping what the processes that finished measured."""
    found = Reruns()
    start = time.monotonic()
    doing = (
        f"measuring {plural(len(tests), 'benchmark')} in {plural(count, 'more fresh process')}"
        f", {count + 1} in all"
    )
    # the session itself was the first process: the estimate rests on the others
    with Progress(config, "processes", count + 1, one="process", doing=doing, done=1) as progress:
        for index in range(count):
            number, total = index + 2, count + 1
            progress.step(number - 1)
            try:
                done, results = _measure_in_one(config, tests, bench_time)
            except KeyboardInterrupt:
                progress.close()  # its line ended before pytest says where Ctrl-C hit
                found.notes.append(f"process {number} of {total} measured nothing (interrupted)")
                interrupted(config)
                break
            _take(found, results, done, number, total)
            progress.step(number)
    found.seconds = time.monotonic() - start
    return found


def _measure_in_one(
    config: pytest.Config, tests: Sequence[str], bench_time: float
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]] | None]:
    """One fresh process of this tree and what it measured (None if nothing): its samples
    only, since the first process counted the rest."""
    done, answer = ask(config, tests, bench_time, request={COUNTS_KEY: False, NARROW_KEY: True})
    return done, None if answer is None else answer["results"]


def ask(
    config: pytest.Config,
    tests: Sequence[str],
    bench_time: float,
    *,
    python: str = sys.executable,
    cwd: Path | None = None,
    args: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    wrapper: Sequence[str] = (),
    request: dict[str, Any] | None = None,
    turn: Turn | None = None,
    server: Server | None = None,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """Run ``tests`` in one fresh pytest process (``python -m pytest`` with the first
    process's arguments, unless ``args`` are given; run by ``wrapper``, a command such as
    valgrind's, if given) and return its answer: what it measured (``results``), the tests
    that failed there (``failed``) and the benchmark tests it collected (``benchmarks``); None
    if it wrote none. It is asked in a file that it removes once read (``request`` adds to
    what it is asked) and answers in one of the same name; neither is left when this
    returns. The request says what it is and which process made it: the process acts on no
    other file (Note [Internal variables]). With ``turn``, it measures only once told to. With
    ``server``, a fork server of its interpreter, the server forks it (Note [Fork server])."""
    forked = server if server and not wrapper and python == server.python else None
    if forked is not None and not forked.ready():  # it could not import torch: start afresh
        forked = None
    ends = () if turn is None else turn.claim()
    if ends is None:  # stopped while it waited for the fork server
        return subprocess.CompletedProcess([python], -signal.SIGINT, "", "not started"), None
    handle, name = tempfile.mkstemp(prefix=RERUN_PREFIX, suffix=".json")
    try:
        wanted = {
            **(request or {}),
            "format": RERUN_FORMAT,
            "tests": list(tests),
            "bench_time": bench_time,
            "output": name,
            "parent": os.getpid() if forked is None else forked.pid,
            **({TURN_KEY: list(ends)} if turn is not None else {}),
            **({FORKSERVER_KEY: forked.where()} if forked is not None and forked.address else {}),
        }
        with os.fdopen(handle, "w", encoding="utf-8") as written:
            json.dump(wanted, written)
        done = run_captured(
            [*wrapper, python, "-m", "pytest", *(child_args(config) if args is None else args)],
            cwd=cwd or config.invocation_params.dir,
            env={**os.environ, **measuring_environment(config), **(env or {}), RERUN_ENV: name},
            started=None if turn is None else turn.started,
            pass_fds=ends,
            server=forked,
        )
        return done, _answer(Path(name))
    finally:
        if turn is not None:
            turn.passed()  # where the process never started
        Path(name).unlink(missing_ok=True)


def measuring_environment(config: pytest.Config) -> dict[str, str]:
    """The thread count a process measures at, set before its interpreter starts, so that
    torch runs at it from its first operator, however the tests import torch (Note [Torch
    state])."""
    from ..hardware.torch_state import thread_environment

    return thread_environment(measuring_threads(config))


def run_captured(
    command: list[str],
    started: Callable[[Process], None] | None = None,
    server: Server | None = None,
    **popen: Any,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` with its output captured, but a process interrupted is stopped;
    ``started`` is told of the process once it runs. ``server`` forks it, if given."""
    opened: Process = (
        server.popen(command, **popen)
        if server is not None
        else subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
        )
    )
    with opened as child:
        if started is not None:
            started(child)
        try:
            stdout, stderr = child.communicate()
        except BaseException:
            _stop(child)
            raise
    assert child.returncode is not None  # communicate() waited for it
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)


def _stop(child: Process) -> None:
    """SIGINT, as Ctrl-C in a terminal sends it: the child's pytest ends as on Ctrl-C and stops
    what it started (ranks included); SIGKILL if it has not ended within STOP_GRACE s, or at a
    second Ctrl-C."""
    try:
        child.send_signal(signal.SIGINT)
        child.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        pass
    finally:
        child.kill()  # nothing, if it ended
        child.wait()


class Turn:
    """The two pipes through which one rerun process of a pair takes its turns to measure
    (Note [Cheaper processes]). Before each benchmark test's first measurement it writes
    :data:`READY` on the first and waits for a byte on the second; after each slice of its
    measuring it writes :data:`SLICED` and waits (Note [Slices]); once that test has ended, it
    writes :data:`MEASURED` and waits again. The controller lets the two processes of a pair
    measure in turns, slice by slice, the other waiting, and then lets both go on side by side
    to their next benchmark: so no measurement shares the machine with the other process's
    start or a test's set-up, while those share it with each other."""

    def __init__(self) -> None:
        self._ready, ready = os.pipe()
        go, self._go = os.pipe()
        self.child_ends: tuple[int, ...] = (ready, go)  # the process's ends, passed by number
        self.child: Process | None = None
        self.ended = False  # stopped or closed: a process that starts now is stopped at once
        # The thread that starts the process owns its ends once it claimed them, and closes
        # them once: a descriptor closed twice may close another's that reused its number.
        self._lock = threading.Lock()
        self._claimed = False

    def claim(self) -> tuple[int, ...] | None:
        """The process's ends, for the one thread that starts it; None once stopped or closed."""
        with self._lock:
            if self.ended:
                return None
            self._claimed = True
            return self.child_ends

    def passed(self) -> None:
        """Close the process's ends here (once): it holds them, or it never started."""
        with self._lock:
            ends, self.child_ends = self.child_ends, ()
        for end in ends:
            _close(end)

    def started(self, child: Process) -> None:
        """The process runs: its ends are its own now (and an end it closes, by ending, shows
        here as the end of the pipe). One that started after :meth:`stop` or :meth:`close`
        (it waited for the fork server) is stopped at once."""
        self.child = child  # before reading ``ended``: stop() sets it before reading ``child``
        self.passed()
        if self.ended:
            _stop(child)

    def said(
        self, ended: Callable[[], bool], waiting: Callable[[float], None] | None = None
    ) -> bytes:
        """What the process says next: :data:`READY`, :data:`MEASURED`, or ``b""`` once it
        has ended (``ended()``, or the end of the pipe) without saying more. ``waiting`` is
        told, about every tenth of a second, how many seconds this wait has lasted."""
        import select  # here: only the controller of a pair needs it

        start = time.monotonic()
        while True:
            if waiting is not None:
                waiting(time.monotonic() - start)
            if SEEN_CTRL_C:  # seen, and its KeyboardInterrupt swallowed (Note [Swallowed Ctrl-C])
                raise KeyboardInterrupt
            over = ended()  # read before looking: a byte written before the end is still seen
            readable, _, _ = select.select([self._ready], [], [], 0.0 if over else 0.1)
            if readable:
                try:
                    return os.read(self._ready, 1)
                except OSError:  # closed by close(), on Ctrl-C
                    return b""
            if over:
                return b""

    def go(self, cpu: int | None = None) -> None:
        """Its turn (after READY or SLICED), measuring on the ``cpu``-th of the CPUs it may use
        (Note [Slices]), or on to its next benchmark (after MEASURED, no ``cpu``)."""
        word = NEXT if cpu is None else bytes([cpu % 255])
        with contextlib.suppress(OSError):  # it ended before measuring: nobody reads the pipe
            os.write(self._go, word)

    def stop(self) -> None:
        """Ctrl-C: stop the process, as :func:`ask` would."""
        self.ended = True
        if self.child is not None:
            _stop(self.child)

    def close(self) -> None:
        """Close the controller's ends: a process still waiting then goes on at once."""
        with self._lock:
            self.ended = True
            ends: tuple[int, ...] = (self._ready, self._go)
            if not self._claimed:  # else the thread that claimed them closes them
                ends, self.child_ends = (*ends, *self.child_ends), ()
            self._ready = self._go = -1
        for end in ends:
            _close(end)


# what a process of a pair says through its Turn: ready to measure, a slice measured (Note
# [Slices]), the test measured and ended
READY, SLICED, MEASURED = b"r", b"s", b"m"
SLICE = 0.01  # seconds a process of a pair measures before the other measures as long
NEXT = b"\xff"  # the controller's word after MEASURED; before a slice, the CPU's index


def take_turns(
    order: Sequence[Turn],
    running: Sequence[Any],
    first_cpu: int = 0,
    waiting: Callable[[int, bool, float], None] | None = None,
) -> None:
    """Let the processes of a pair (``running``: their futures, which are done once they
    ended) measure each benchmark in turns, in ``order``, a slice each until each has
    measured all of it, both on one CPU (Note [Slices]): the ``first_cpu``-th of those they
    may use for the first benchmark, the next for the next. Then they go on to the next side
    by side, until every one has ended (Note [Cheaper processes]). ``waiting`` is told which
    process is awaited, whether in a slice of its measuring, and for how many seconds."""

    def said(index: int, measuring: bool = False) -> bytes:
        told = None if waiting is None else functools.partial(waiting, index, measuring)
        return order[index].said(running[index].done, told)

    words = [said(index) for index in range(len(order))]
    cpu = first_cpu
    while READY in words:
        measuring = [i for i, word in enumerate(words) if word == READY]
        while measuring:  # a slice each, in order, until each has measured all of its turn
            for index in measuring:
                order[index].go(cpu)
                words[index] = said(index, measuring=True)
            measuring = [i for i in measuring if words[i] == SLICED]  # not MEASURED, not ended
        cpu += 1
        measured = [i for i, word in enumerate(words) if word == MEASURED]
        for index in measured:
            order[index].go()
        for index in measured:
            words[index] = said(index)


# How a process says a test was skipped there, beside what failed there.
SKIPPED = "skipped"


def on_side(side: str, why: str) -> str:
    """``why`` a test of ``side`` was not judged, as a reader reads it: skipped or failed."""
    kind, _, reason = why.partition(": ")
    if kind == SKIPPED:
        return f"skipped on the {side} side ({reason})"
    return f"failed on the {side} side ({why})"


def _close(end: int) -> None:
    with contextlib.suppress(OSError):  # closed already
        os.close(end)


def _tell(ends: Sequence[int], word: bytes) -> bytes:
    """Say ``word`` to the controller and wait for its answer (a byte); ``b""`` once it is
    gone (then this process goes on alone, and dies with it)."""
    ready, go = ends
    try:
        os.write(ready, word)
        return os.read(go, 1)  # nothing, at the pipe's end: the controller let it go
    except OSError:
        return b""


def interrupted(config: pytest.Config) -> None:
    """End the run as pytest ends it on Ctrl-C: exit status 2, and pytest's own one line
    saying where the KeyboardInterrupt hit (its terminal reporter prints what this hook gets).
    Called while the KeyboardInterrupt is handled."""
    session = config.pluginmanager.get_plugin("session")
    if session is not None:
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    config.hook.pytest_keyboard_interrupt(excinfo=pytest.ExceptionInfo.from_current())


def _answer(path: Path) -> dict[str, Any] | None:
    """What a process wrote back, or None if it wrote nothing usable (it died before its end,
    or wrote half a file): the caller then says the process measured nothing, and why."""
    try:
        answer = read_json(path, "answer of a measuring process")
    except (OSError, Unreadable):
        return None
    return answer if _is_answer(answer) else None


def _is_answer(answer: Any) -> bool:
    """Whether ``answer`` has the shape :meth:`Rerun.pytest_sessionfinish` writes."""
    if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
        return False
    results = all(
        isinstance(r, dict)
        and isinstance(r.get("test"), str)
        and isinstance(r.get("metrics"), dict)
        for r in answer["results"]
    )
    failed = isinstance(answer.get("failed", {}), dict)
    return results and failed and isinstance(answer.get("benchmarks", []), list)


def silence(done: subprocess.CompletedProcess[str]) -> str:
    """Why a process answered nothing: its exit status and last line of output."""
    tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
    return f"exit {done.returncode}: {tail[0]}"


def _take(
    found: Reruns,
    results: list[dict[str, Any]] | None,
    done: subprocess.CompletedProcess[str],
    number: int,
    total: int,
) -> None:
    """Keep one process's sampled metrics; say why, if it measured nothing."""
    if results is None:
        found.notes.append(f"process {number} of {total} measured nothing ({silence(done)})")
        return
    for result in results:
        for name, record in result["metrics"].items():
            if is_sampled(record) and record.get("samples"):
                run = {k: record[k] for k in RUN_KEYS if k in record}
                found.runs.setdefault(result["test"], {}).setdefault(name, []).append(run)


def pool(results: Iterable[Result], found: Reruns) -> list[str]:
    """Add the other processes' runs to this run's metrics; return the tests that got some."""
    pooled = []
    for result in results:
        extra = found.runs.get(result.test, {})
        for name, runs in extra.items():
            record = result.metrics.get(name)
            if record is not None and is_sampled(record):
                record.setdefault("processes", []).extend(runs)
        if extra:
            pooled.append(result.test)
    return pooled
