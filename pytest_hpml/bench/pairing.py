"""The pairs of processes of head against base: the two sides, what the pairs measured, and
the lines that say what a pair waits for."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.progress import Progress, plural
from . import reruns
from .environment import SPEAK_AFTER

BASE, HEAD = "base", "head"
SPEAK_EVERY = 30.0  # seconds from one line saying what a pair waits for to the next


@dataclass(frozen=True)
class Side:
    """One side of the comparison: a tree of the repository and how to run its tests."""

    name: str  # BASE or HEAD
    top: Path  # the tree's top level: the repository itself or the base worktree
    revision: str  # the commit (12 hex digits), "+ changes" on a head with uncommitted ones
    python: str

    def path(self, head_top: Path, where: Path) -> Path:
        """``where``, a path of the working tree, in this side's tree."""
        try:
            return self.top / Path(where).resolve().relative_to(head_top)
        except ValueError:  # outside the repository: the same on both sides
            return Path(where)


@dataclass
class Pairs:
    """What the pairs of processes measured: per pair, each side's results by test id."""

    base: Side
    head: Side
    measured: list[dict[str, dict[str, dict[str, Any]]]] = field(default_factory=list)
    failed: dict[str, dict[str, str]] = field(default_factory=dict)  # side -> test -> why
    collected: dict[str, set[str]] = field(default_factory=dict)  # side -> benchmark tests
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # side -> test -> metrics counted once per side under valgrind (--hpml-instructions)
    counted: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    cap: int = 0  # the most pairs a benchmark gets (--hpml-pairs)
    benchmarks: int = 0  # how many were to be measured
    # at each look (Note [Adaptive pairs]): pairs done, and how many benchmarks were settled
    looks: list[tuple[int, int]] = field(default_factory=list)
    # the benchmarks no longer measured although unsettled: the cap would not settle them
    let_go: set[str] = field(default_factory=set)

    def stopped(self) -> str:
        """Why the pairs stopped where they did, in words."""
        done, benchmarks = len(self.measured), self.benchmarks
        if done < self.cap and self.looks and self.looks[-1][1] == benchmarks:
            stopped = f"after {done} of at most {plural(self.cap, 'pair')}"
            if not self.let_go:
                return f"every verdict settled {stopped}"
            return (
                f"every verdict settled {stopped}, or could not be by the cap "
                f"({len(self.let_go)} of {benchmarks})"
            )
        settled = self.looks[-1][1] if self.looks else 0
        if done >= self.cap and settled < benchmarks:
            stopped = f"{benchmarks - settled} of {benchmarks} unsettled at the cap of {self.cap}"
            if not self.let_go:
                return stopped
            return f"{stopped}; {len(self.let_go)} more let go earlier: it would not settle them"
        return ""

    def names(self, side: str, test: str) -> set[str]:
        """The metrics ``side``'s ``test`` measured (or counted) in any pair."""
        return {
            name
            for pair in [*self.measured, self.counted]
            for name in pair.get(side, {}).get(test, {})
        }

    def runs(self, test: str, name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(head, base) records of one metric, one per pair in which both sides measured it
        (or counted it, under valgrind)."""
        found = []
        for pair in [*self.measured, self.counted]:
            head = pair.get(HEAD, {}).get(test, {}).get(name)
            base = pair.get(BASE, {}).get(test, {}).get(name)
            if head is not None and base is not None:
                found.append((head, base))
        return found


class Waited:
    """Says what a pair waits for once one wait has lasted :data:`SPEAK_AFTER` seconds, and
    again every :data:`SPEAK_EVERY` seconds it goes on: a base whose benchmark never returns
    is awaited as long as pytest would await it, but not in silence. No wait is cut short:
    a benchmark's set-up and warm-up (a compiled model) may take minutes."""

    def __init__(self, progress: Progress, pair: int, order: Sequence[Side]) -> None:
        self.progress, self.pair, self.order = progress, pair, order
        self.due, self.last = SPEAK_AFTER, 0.0

    def __call__(self, index: int, measuring: bool, seconds: float) -> None:
        if seconds < self.last:  # a new wait
            self.due = SPEAK_AFTER
        self.last = seconds
        if seconds < self.due:
            return
        self.due = seconds + SPEAK_EVERY
        side, waits = self.order[index].name, f"pair {self.pair} waits {seconds:.0f} s"
        if measuring:
            said = (
                f"{waits} for its {side} process to end a slice of its measuring ({reruns.SLICE} "
                "s as a rule): a call of its benchmark lasts that long, or never ends"
            )
        else:
            said = f"{waits} for its {side} process to start, set up or warm up its next benchmark"
        self.progress.say(said)


def take(
    found: Pairs, side: Side, done: subprocess.CompletedProcess[str], answer: Any
) -> dict[str, dict[str, Any]]:
    """What one process of ``side`` measured, by test id (none if it answered nothing); what
    failed there, and the benchmarks it collected, noted in ``found``."""
    if answer is None:
        note = f"a {side.name} process measured nothing ({reruns.silence(done)})"
        if note not in found.notes:
            found.notes.append(note)
        return {}
    for test, why in answer.get("failed", {}).items():
        found.failed.setdefault(side.name, {}).setdefault(test, why)
    found.collected.setdefault(side.name, set()).update(answer.get("benchmarks", ()))
    return {result["test"]: result["metrics"] for result in answer["results"]}
