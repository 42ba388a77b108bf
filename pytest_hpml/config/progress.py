"""Progress of the long work after the tests: the pairs of ``--hpml-against``, the other
processes of a comparison or a recording, the processes under valgrind.

Each of them runs for a minute or more after the last test line, with nothing new to show
until the summary. A :class:`Progress` says how far it got, through pytest's terminal reporter
and only in the process that reports: on a terminal, one line rewritten in place (``hpml:
pairs 3/5, base then head, 41 s so far, ~27 s left``), completed at the end; elsewhere (a CI
log), plain lines, at most one every :data:`PLAIN_EVERY` seconds and one per step (``hpml: pair
3 of 5 done, 60 of 86 settled (41 s; ~27 s left)``); nothing with ``-qq``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import pytest

from .role import is_controller

PLAIN_EVERY = 10.0  # seconds from one plain line to the next, at least (the last step excepted)
TICK = 1.0  # seconds from one rewrite of the live line to the next, its clock running
QUIET = -2  # at this verbosity (-qq) and below, no progress is shown


class Progress:
    """How far one long stage got: ``done`` of ``total`` steps (``what``, ``one`` of them).

    Nothing is shown until the first :meth:`step` (a stage that finds nothing to do shows
    nothing); :meth:`close` (or the end of a ``with`` block, Ctrl-C included) completes the
    live line. ``done`` counts steps that were done before the stage began (the session's own
    process among the processes of a comparison): the estimate of what is left rests on the
    steps done here, unless ``estimate`` is off (steps that run at once).
    """

    def __init__(
        self,
        config: pytest.Config,
        what: str,
        total: int,
        *,
        one: str,
        doing: str,
        done: int = 0,
        estimate: bool = True,
        clock: Callable[[], float] = time.monotonic,
        tick: float | None = TICK,
    ) -> None:
        self.what, self.one, self.doing, self.total = what, one, doing, total
        self.estimate = estimate
        self.reporter = shown_by(config)
        self.live = self.reporter is not None and on_terminal(self.reporter)
        # the reporter's writer: how wide the terminal is, whether its last line is open
        self.writer = config.get_terminal_writer() if self.reporter is not None else None
        self._clock, self._tick = clock, tick
        self._first = self._done = done
        self._note = ""
        self._tally = ""  # a count the plain lines show too (``60 of 86 settled``)
        self._started: float | None = None  # when the first step came
        self._at = 0.0  # when ``done`` last grew
        self._printed, self._printed_at = done, 0.0  # the last plain line: its step, its time
        self._shown = 0  # characters of the live line now on the terminal
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._closed = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def step(self, done: int, note: str | None = None, tally: str | None = None) -> None:
        """``done`` steps are done (the first call starts the stage); ``note`` says what runs
        now (the live line shows it; None keeps the last one); ``tally`` counts what the steps
        achieved (the plain lines show it too; None keeps the last one)."""
        now = self._clock()
        with self._lock:
            if self._started is None:
                self._start(now)
            if done > self._done:
                self._done, self._at = done, now
            if note is not None:
                self._note = note
            if tally is not None:
                self._tally = tally
            if self.live:
                self._rewrite(self.line(now))
            elif self._due(now):
                self._printed, self._printed_at = self._done, now
                self._write(f"hpml: {self.step_line(now)}")

    def say(self, text: str) -> None:
        """What the stage waits for now: the live line shows it (until the next step's note),
        a log gets it as a plain line."""
        with self._lock:
            if self.reporter is None or self._started is None or self._closed:
                return
            if self.live:
                self._note = text
                self._rewrite(self.line(self._clock()))
            else:
                self._write(f"hpml: {text}")

    def close(self, said: str | None = None) -> None:
        """End the stage: the live line completed, its clock stopped; safe to call twice.
        ``said`` says why a stage ended before its last step (``every verdict settled after 3
        pairs``): it ends the live line, or comes as a plain line of its own."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        with self._lock:
            if self._started is None or self.reporter is None or self._closed:
                return
            self._closed = True
            elapsed = seconds(self._clock() - self._started)
            if self.live and self._shown:
                done = said or f"{self.what} {self._done}/{self.total} done"
                self._rewrite(f"hpml: {done} in {elapsed}")
                self.reporter.line("")
                self._shown = 0
            elif said and not self.live:
                self._write(f"hpml: {said} ({elapsed})")

    def line(self, now: float) -> str:
        """The live line at ``now``: steps done, what runs, the time so far and what is left."""
        assert self._started is not None
        parts = [f"{self.what} {self._done}/{self.total}", self._note, self._tally]
        parts.append(f"{seconds(now - self._started)} so far")
        left = self._left(now)
        if left is not None:
            parts.append(f"~{seconds(left)} left")
        return "hpml: " + ", ".join(part for part in parts if part)

    def step_line(self, now: float) -> str:
        """A plain line for the step just done (what is left only before the last one)."""
        assert self._started is not None
        said = seconds(now - self._started)
        left = self._left(now)
        if left is not None:
            said += f"; ~{seconds(left)} left"
        tally = f", {self._tally}" if self._tally else ""
        return f"{self.one} {self._done} of {self.total} done{tally} ({said})"

    def _start(self, now: float) -> None:
        """The stage's first output, on a line of its own: the plain start line, or the live
        line's clock."""
        self._started, self._at, self._printed_at = now, now, now
        if self.reporter is None or self.writer is None:
            return
        self.reporter.ensure_newline()  # the last test line, where the reporter left it open
        if self.writer.width_of_current_line:  # -q leaves its dots line so
            self.reporter.line("")
        if not self.live:
            self._write(f"hpml: {self.doing}")
        elif self._tick is not None:
            self._ticker = threading.Thread(target=self._run_clock, daemon=True)
            self._ticker.start()

    def _due(self, now: float) -> bool:
        """Whether a plain line is due: a step done since the last one, and the last step or
        PLAIN_EVERY seconds since that line."""
        if self.reporter is None or self._done <= self._printed:
            return False
        return self._done >= self.total or now - self._printed_at >= PLAIN_EVERY

    def _left(self, now: float) -> float | None:
        """Seconds left at the pace of the steps done here; None before the first one, after
        the last, past the estimate, or without an estimate."""
        counted = self._done - self._first
        if not self.estimate or counted <= 0 or self._done >= self.total:
            return None
        assert self._started is not None
        pace = (self._at - self._started) / counted
        left = pace * (self.total - self._done) - (now - self._at)
        return left if left >= 0.5 else None

    def _run_clock(self) -> None:
        """Rewrite the live line every TICK seconds, so that its clock runs between steps."""
        assert self._tick is not None
        while not self._stop.wait(self._tick):
            with self._lock:
                if self._stop.is_set():
                    return
                self._rewrite(self.line(self._clock()))

    def _rewrite(self, text: str) -> None:
        """The live line, replaced by ``text`` (cut to the terminal's width: a wrapped line
        cannot be rewritten), what is left of the longer one before blanked."""
        if self.reporter is None or self.writer is None:
            return
        text = text[: max(self.writer.fullwidth - 1, 1)]
        self.reporter.write("\r" + text + " " * max(self._shown - len(text), 0), flush=True)
        self._shown = len(text)

    def _write(self, text: str) -> None:
        if self.reporter is not None:
            self.reporter.line(text)
            self.reporter.flush()


def shown_by(config: pytest.Config) -> Any:
    """The terminal reporter that shows progress: the one of the process that reports, unless
    ``-qq`` (or ``-p no:terminal``); None otherwise."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or reporter.verbosity <= QUIET or not is_controller(config):
        return None
    return reporter


def on_terminal(reporter: Any) -> bool:
    """Whether the reporter writes to a terminal, where a line can be rewritten in place (as
    pytest rewrites its "collecting ..." line): its ``isatty`` is a bool in older pytest, a
    callable bool in newer ones."""
    isatty = reporter.isatty
    return bool(isatty() if callable(isatty) else isatty)


def seconds(value: float) -> str:
    """A duration as the progress lines say it: ``41 s``, ``1 min 50 s``."""
    whole = max(round(value), 0)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60} s"


def plural(count: int, one: str) -> str:
    """``count`` and ``one``, its last word in the plural unless one: ``2 fresh processes``."""
    many = one + ("es" if one.endswith(("s", "sh", "ch", "x")) else "s")
    return f"{count} {one if count == 1 else many}"


def counting_progress(config: pytest.Config, tests: int, processes: int) -> Progress:
    """The progress of the processes under valgrind (--hpml-instructions); they run at once
    where there are cores for them, so the first to end tells nothing of the others."""
    doing = (
        f"counting the instructions of {plural(tests, 'benchmark')} under valgrind, "
        f"in {plural(processes, 'process')}"
    )
    return Progress(
        config,
        "processes under valgrind",
        processes,
        one="process under valgrind",
        doing=doing,
        estimate=False,
    )
