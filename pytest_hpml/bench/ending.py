"""How a run stops on a signal: each Ctrl-C noted, should a finalizer swallow its
KeyboardInterrupt (Note [Swallowed Ctrl-C]); SIGTERM and SIGHUP ending it as Ctrl-C does, and
held once the pairs are over (Note [Ending signals])."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from .. import _compat

# The Ctrl-Cs seen while :func:`watching_ctrl_c` watches (Note [Swallowed Ctrl-C]).
SEEN_CTRL_C: list[int] = []


@contextlib.contextmanager
def watching_ctrl_c() -> Iterator[None]:
    """Note each Ctrl-C (SIGINT), then raise its KeyboardInterrupt as Python does (Note
    [Swallowed Ctrl-C]). Only where Python's own handler is set: not where SIGINT is ignored (a
    background job) or handled otherwise (a handler of the user's keeps its say), nor outside
    the main thread (where no handler can be set)."""
    previous = signal.getsignal(signal.SIGINT)
    if (
        previous is not signal.default_int_handler
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def seen(number: int, frame: FrameType | None) -> None:
        SEEN_CTRL_C.append(number)
        signal.default_int_handler(number, frame)

    SEEN_CTRL_C.clear()  # one a Ctrl-C left while this was ending last time
    try:
        signal.signal(signal.SIGINT, seen)
        yield
    finally:
        SEEN_CTRL_C.clear()  # before Python's handler is back: a Ctrl-C from now on raises itself
        signal.signal(signal.SIGINT, previous)


# Signals that end a run as Ctrl-C does (Note [Ending signals]): a CI's cancel, `timeout` and
# `docker stop` send SIGTERM; a closed terminal, SIGHUP.
ENDING = (signal.SIGTERM, signal.SIGHUP)


class Ending:
    """While the run lasts, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, so
    that the run stops its processes and removes its worktree as on Ctrl-C; once the pairs are
    over (:meth:`defer` to :meth:`restore`), an ending signal is held until the run has ended,
    and a second ends it at once (Note [Ending signals]). Only where the signal's default action is
    set (Python's own for SIGINT): a handler of the user's, or an ignored signal, keeps it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.held: list[int] = []
        self.before: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for number in (signal.SIGINT, *ENDING):
            handler = signal.getsignal(number)
            default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
            if handler is default:
                self.before[number] = handler
        for number in ENDING:
            if number in self.before:
                signal.signal(number, _as_ctrl_c)

    def defer(self) -> None:
        """Hold each ending signal from now on, until :meth:`restore`."""
        for number in self.before:
            signal.signal(number, self._hold)

    def _hold(self, number: int, frame: FrameType | None) -> None:
        if self.held:  # a second signal: the run ends at once, the worktree not yet removed
            self.held.clear()  # so restore() does not say it was
            self.restore()
            signal.raise_signal(number)
            return
        self.held.append(number)
        session = self.config.pluginmanager.get_plugin("session")
        if session is not None:
            session.exitstatus = pytest.ExitCode.INTERRUPTED

    def restore(self) -> None:
        """Give each signal its handler back; say so where one was held."""
        for number, handler in self.before.items():
            signal.signal(number, handler)
        self.before = {}
        if self.held:
            name = signal.Signals(self.held[0]).name
            with _compat.uncaptured(self.config):
                print(
                    f"hpml: {name} received as the run ended: held until its base worktree was "
                    "removed, exit status 2",
                    file=sys.stderr,
                    flush=True,
                )
            self.held.clear()


def _as_ctrl_c(number: int, frame: FrameType | None) -> None:
    SEEN_CTRL_C.append(number)  # seen, should a finalizer swallow it (Note [Swallowed Ctrl-C])
    raise KeyboardInterrupt(f"{signal.Signals(number).name} received")


class Finish:
    """Ends head against base (``remove`` removes its base worktree): once the pairs are
    over, an ending signal is held (a Ctrl-C in the summary or in pytest's clean-up would end
    in a traceback); the worktree is removed as the run is unconfigured, after every other
    plugin; the handlers are given back in a clean-up, after pytest's own (Note [Ending
    signals])."""

    def __init__(self, ending: Ending, remove: Callable[[], None]) -> None:
        self.ending, self.remove_worktree, self.removed = ending, remove, False

    def hold(self) -> None:
        """From now until the run has ended, an ending signal is held (the pairs are over)."""
        self.ending.defer()

    def remove(self) -> None:
        if self.removed:
            return
        self.removed = True
        self.ending.defer()
        self.remove_worktree()

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.remove()

    def __call__(self) -> None:  # the clean-up, also where pytest_unconfigure never came
        try:
            self.remove()
        finally:
            self.ending.restore()
