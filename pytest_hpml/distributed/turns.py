"""A pair's turn, lent to the ranks of a distributed benchmark (Note [Slices]).

The process of a pair that starts a distributed benchmark's ranks does not take its turn
before it starts them: its ranks start, join their process group, set the benchmark up and
warm it up side by side with the other process's ranks. The first rank about to measure asks
for the turn (:meth:`RankTurn.take`, the ``take_turn`` of its benchmark fixture); the process
that started the ranks sees the question while it watches them (:meth:`Lender.lend`), takes its
turn from the controller, and answers; every rank that measures waits for that answer. The turn
goes back once the ranks have ended, as for a test run in the process itself.

The two speak through files in a directory the process made for the ranks (:data:`TURN_ENV`):
a rank creates ``asked``, the process creates ``given``. A rank has no pipe of the pair's
(the launcher that starts it passes none), and the exchange comes once per benchmark: polling
costs nothing that matters.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

TURN_ENV = "HPML_RANK_TURN"  # the directory through which a spawned rank asks for the turn
ASKED, GIVEN = "asked", "given"
POLL = 0.005  # seconds between two looks of a rank waiting for the turn


class RankTurn:
    """A spawned rank's side: ask for the pair's turn before measuring, and wait for it."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.taken = False

    def take(self) -> None:
        """Before the first measurement of this rank's test: ask (unless another rank has),
        and wait until the turn is given (once: the rank runs one test)."""
        if self.taken:
            return
        self.taken = True
        with contextlib.suppress(FileExistsError):  # another rank asked first
            (self.where / ASKED).open("x").close()
        given = self.where / GIVEN
        while not given.exists():  # a rank dies with its parent: no timeout of its own
            time.sleep(POLL)


def rank_turn() -> Callable[[], None] | None:
    """In a spawned rank: how it takes the pair's turn, where its parent lends it one."""
    where = os.environ.get(TURN_ENV)
    return RankTurn(Path(where)).take if where else None


class Lender:
    """The side of the process that started the ranks: lends them its turn when they ask."""

    def __init__(self, where: Path, take_turn: Callable[[], None] | None) -> None:
        self.where = where
        self._take_turn = take_turn

    def env(self) -> dict[str, str]:
        """What each rank is told: where to ask, or nothing to ask for ("")."""
        return {TURN_ENV: str(self.where) if self._take_turn is not None else ""}

    def lend(self) -> None:
        """Between two looks at the ranks: if one asked, take the turn (waiting for it) and
        give it to them."""
        if self._take_turn is None or not (self.where / ASKED).exists():
            return
        take, self._take_turn = self._take_turn, None
        take()
        (self.where / GIVEN).touch()
