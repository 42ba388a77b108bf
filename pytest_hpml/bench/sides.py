"""Head against base (``--hpml-against=REV``): the working tree's benchmarks and the same
benchmarks of a git revision, measured side by side in one job (Note [Head against base]).

The base revision is checked out as a detached ``git worktree`` in the temporary directory for
the length of the run. Each side runs in fresh pytest processes that import that side's code
first (its rootdir, ``src/`` and ``--hpml-against-paths`` lead ``sys.path``); the two sides
alternate in pairs, in an order that cancels a drift of the machine's speed (base-head,
head-base, base-head, ...). The processes are the reruns of :mod:`.reruns`, asked through the
same request file; the worktree is removed at the end of the run, on Ctrl-C too.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .. import _compat, vcs
from ..config.invocation import child_args
from ..config.progress import Progress, plural
from ..config.resolution import SETTINGS_KEY
from ..config.values import given, shown
from . import ending, forkserver, reruns
from .ending import Ending
from .environment import (
    CHECK_TIMEOUT,
    SPEAK_AFTER,
    describe_here,
    described,
    describing,
    version,
)

BASE, HEAD = "base", "head"
SPEAK_EVERY = 30.0  # seconds from one line saying what a pair waits for to the next
# Pairs that count the work (the others only time): two processes a side show a count that
# varies with the input (Note [Torch state]).
COUNTED_PAIRS = 2


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


class Against:
    """The comparison's two sides and the base worktree, made once in the controller."""

    def __init__(self, config: pytest.Config, revision: str, python: str, paths: Sequence[str]):
        self.config = config
        self.asked = revision
        self.paths = _check_paths(config, paths)
        self.top = _toplevel(config.rootpath)
        self.here = _inside(self.top, Path(config.invocation_params.dir))
        sha = _commit(self.top, revision)
        dirty = _git(self.top, "status", "--porcelain", "--untracked-files=no").strip()
        head = _commit(self.top, "HEAD")[:12] + (" + changes" if dirty else "")
        self.head = Side(HEAD, self.top, head, sys.executable)
        self._descriptions: dict[str, dict[str, Any]] | None = None
        self._base_description: dict[str, Any] | None = None  # another interpreter's
        self._early: _Started | None = None  # the first pair, started at collection's end
        # forks the pairs' processes (Note [Fork server])
        self._server: forkserver.Server | None = None
        self._server_tried = False
        self._watches: list[Any] = []  # torch_state.OnImport: the server starts with torch's import
        _check_temporary(config.rootpath)
        _remove_left_behind(config, self.top)
        self.directory = Path(tempfile.mkdtemp(prefix=f"{WORKTREE_PREFIX}{os.getpid()}-"))
        try:
            _git(self.top, "worktree", "add", "--detach", "--quiet", str(self.directory), sha)
            self.base = Side(BASE, self.directory, sha[:12], sys.executable)
            _check_tree(self, revision)
            if python:
                found, self._base_description = _check_python(python, self)
                self.base = Side(BASE, self.directory, sha[:12], found)
        except BaseException:
            self.remove()
            raise

    def environments(self) -> dict[str, dict[str, Any]]:
        """Each side's environment (:data:`DESCRIBE`), the same one twice where both sides
        run in this interpreter; empty where this one could not be described."""
        if self._descriptions is None:
            head = describe_here(_modules())
            base = self._base_description or head
            self._descriptions = {} if head is None or base is None else {BASE: base, HEAD: head}
        return self._descriptions

    def remove(self) -> None:
        """Remove the base worktree and git's record of it; safe to call twice. A first pair
        started early and never used is stopped."""
        if self._early is not None:
            self._early.stop()
            self._early = None
        self._unwatch()
        if self._server is not None:
            self._server.close()
        vcs.remove_worktree(self.top, self.directory)

    def environment(self, side: Side) -> dict[str, str]:
        """PYTHONPATH that puts ``side``'s code first: its rootdir, src/, the ini's paths."""
        earlier = os.environ.get("PYTHONPATH")
        first = map(str, self._first(side))
        return {"PYTHONPATH": os.pathsep.join([*first, *([earlier] if earlier else [])])}

    def _first(self, side: Side) -> list[Path]:
        """The paths ``side``'s processes put first: its rootdir, src/, the ini's paths."""
        root = side.path(self.top, self.config.rootpath)
        first = [root, *([root / "src"] if (root / "src").is_dir() else [])]
        return first + [root / extra for extra in self.paths]

    def arguments(self, side: Side) -> list[str]:
        """The first process's arguments, with paths into the working tree moved to ``side``'s."""
        moved = []
        for arg in child_args(self.config):
            name, equals, value = arg.partition("=")
            if equals and os.path.isabs(value):
                moved.append(f"{name}={side.path(self.top, Path(value))}")
            elif os.path.isabs(arg):
                moved.append(str(side.path(self.top, Path(arg))))
            else:
                moved.append(arg)
        return moved

    def measure(
        self,
        tests: Sequence[str],
        looks: Sequence[int],
        window: Callable[[int], float],
        unsettled: Callable[[Pairs], list[str]],
        before: Callable[[], None] = lambda: None,
    ) -> Pairs:
        """Measure ``tests`` in pairs of fresh processes, alternating the order of the sides
        from pair to pair. After each of ``looks`` pairs, ``unsettled`` says which verdicts more
        pairs could change: the next pairs measure those only, each for ``window(count)``
        seconds, and none once all are settled or the last look is reached (Note [Adaptive
        pairs]). ``before`` runs once the first pair's processes have started, before their
        first turn, while nothing measures. Ctrl-C stops the process measuring and ends the
        run as pytest does, keeping the pairs completed."""
        cap = looks[-1]
        found = Pairs(self.base, self.head, cap=cap, benchmarks=len(tests))
        start = time.monotonic()
        doing = f"measuring {plural(len(tests), 'benchmark')} in " + (
            f"pairs of fresh processes, base and head alternating, until each verdict is "
            f"settled ({looks[0]} to {cap} pairs)"
            if len(looks) > 1
            else f"{plural(cap, 'pair')} of fresh processes, base and head alternating"
        )
        measuring = list(tests)
        # a Ctrl-C that a finalizer swallowed still ends them (Note [Swallowed Ctrl-C])
        watching = ending.watching_ctrl_c()
        with watching, Progress(self.config, "pairs", cap, one="pair", doing=doing) as progress:
            for index in range(cap):
                if index in looks:  # a look: settled verdicts need no more pairs
                    measuring = unsettled(found)
                    found.looks.append((index, len(tests) - len(measuring)))
                    if not measuring:
                        break
                order = (self.base, self.head) if index % 2 == 0 else (self.head, self.base)
                settled = f"{len(tests) - len(measuring)} of {len(tests)} settled"
                tally = settled if len(looks) > 1 else None  # a fixed count of pairs settles none
                progress.step(index, f"{order[0].name} then {order[1].name}", tally)
                # the first complete pairs record the counts: two a side show whether they vary
                complete = sum(bool(p.get(BASE) and p.get(HEAD)) for p in found.measured)
                counts = complete < COUNTED_PAIRS
                try:
                    early, self._early = self._early if index == 0 else None, None
                    if early is not None and not set(measuring) <= set(early.tests):
                        early.stop()  # a benchmark it does not measure: start afresh
                        early = None
                    started = early or self._start(
                        found, order, measuring, window(len(measuring)), counts
                    )
                    waited = _Waited(progress, index + 1, started.order)
                    pair = self._finish(found, started, before if index == 0 else None, waited)
                except KeyboardInterrupt:
                    progress.close()  # its line ended before pytest says where Ctrl-C hit
                    found.notes.append(f"pair {index + 1} of {cap} not completed (interrupted)")
                    reruns.interrupted(self.config)
                    break
                found.measured.append(pair)
                progress.step(index + 1)
            else:
                found.looks.append((cap, len(tests) - len(unsettled(found))))
            progress.close(found.stopped() or None)
        if self._server is not None and self._server.why:
            found.notes.append(f"each process imported torch: no fork server ({self._server.why})")
        elif self._server is not None and self._server.declined:
            declined = self._server.declined
            found.notes.append(f"each process imported the collection's libraries ({declined})")
        found.seconds = time.monotonic() - start
        return found

    def forker(self) -> forkserver.Server | None:
        """The fork server, where it serves this run's processes: it forks the ranks of this
        session's distributed tests too (Note [Fork server])."""
        server = self._server
        if server is None or not self._server_tried or not server.ready():
            return None
        return server if server.address else None

    def asker(self, side: Side) -> Callable[..., Any]:
        """:func:`reruns.ask` for fresh processes of ``side``: its interpreter, its tree, its
        paths first; ``env`` adds to its environment."""

        def ask(
            tests: Sequence[str],
            bench_time: float = 0.0,
            *,
            env: dict[str, str] | None = None,
            **more: Any,
        ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
            return reruns.ask(
                self.config,
                tests,
                bench_time,
                python=side.python,
                cwd=side.path(self.top, self.config.invocation_params.dir),
                args=self.arguments(side),
                env={**self.environment(side), **(env or {})},
                server=self._server,
                **more,
            )

        return ask

    def start_early(self, tests: Sequence[str], bench_time: float) -> None:
        """Start the first pair at the end of collection, on every benchmark collected: its
        processes import, collect, set the first benchmark up and warm it up while this session
        runs its tests, then wait on their turn pipes until :meth:`measure` gives them their
        turns (Note [Cheaper processes]). With no benchmark, no server is started for them
        (one that torch's import started ends)."""
        if not tests and not self._server_tried:
            self._unwatch()
            if self._server is not None:
                self._server.close()
                self._server = None
        if tests and self._early is None:
            self._start_server()
            order = (self.base, self.head)  # the first pair's, as in measure()
            self._early = self._start(None, order, tests, bench_time, counts=True)

    def _start(
        self,
        found: Pairs | None,
        order: tuple[Side, Side],
        tests: Sequence[str],
        bench_time: float,
        counts: bool,
    ) -> _Started:
        """The two processes of a pair, in ``order``: started together, they import, collect,
        set each benchmark up and warm it up side by side, and measure it in turns, slice by
        slice, once :meth:`_finish` lets them (Note [Cheaper processes])."""
        from concurrent.futures import ThreadPoolExecutor

        self._start_server()
        # the first pair, which counts, collects everything: it lists each side's benchmarks
        seed = random.getrandbits(32)  # the pair's own (Note [Pair seeds])
        request = {
            reruns.COUNTS_KEY: counts,
            reruns.NARROW_KEY: bool(found and found.measured),
            reruns.PAIR_SEED_KEY: seed,
        }
        # a process started fresh hashes as its pair's other does; a forked one as the server
        env = {} if "PYTHONHASHSEED" in os.environ else {"PYTHONHASHSEED": str(seed)}
        turns = [reruns.Turn() for _ in order]
        pool = ThreadPoolExecutor(len(order), thread_name_prefix="hpml-pair")
        running = [
            pool.submit(self.asker(side), tests, bench_time, env=env, request=request, turn=turn)
            for side, turn in zip(order, turns)
        ]
        index = len(found.measured) if found is not None else 0
        return _Started(order, list(tests), turns, pool, running, first_cpu=index)

    def watch_imports(self) -> None:
        """Start the fork server the moment this process starts importing torch (or
        torchvision), where both sides run in this interpreter: it imports them while the
        collection does, not after it (Note [Fork server])."""
        if not self._forks():
            return
        from ..hardware.torch_state import OnImport

        for package in forkserver.PACKAGES:
            if package in sys.modules:  # a conftest imported it
                self._importing(package)
            else:
                watch = OnImport(package, before=functools.partial(self._importing, package))
                self._watches.append(watch.watch())

    def _importing(self, package: str) -> None:
        if self._server_tried:  # the pairs have started: the server is what it is
            return
        if self._server is None:
            with contextlib.suppress(OSError):  # no server: the pairs start fresh processes
                self._server = self._new_server(forkserver.importing(package))
        else:
            self._server.load(forkserver.importing(package))

    def _unwatch(self) -> None:
        for watch in self._watches:
            watch.remove()
        self._watches.clear()

    def _forks(self) -> bool:
        """Whether a fork server can serve both sides: they run in this interpreter."""
        return self.base.python == self.head.python == sys.executable

    def _start_server(self) -> None:
        """Before the first pair: keep the server started when torch's import began, with
        what else the collection imported (torchvision), or start one now; none where the
        collection did not import torch (Note [Fork server]). Its processes wait for it."""
        if self._server_tried:
            return
        self._server_tried = True
        self._unwatch()
        modules = forkserver.preloaded()
        if self._server is not None and modules:
            self._server.load(modules)
        elif self._server is not None:  # torch's import began and failed, or never ran
            self._server.close()
            self._server = None
        elif modules and self._forks():
            self._server = self._new_server(modules)
        if self._server is not None:
            self._server.libraries(forkserver.libraries(self._plugins()))

    def _plugins(self) -> set[str]:
        """The packages of pytest's plugins from installed distributions (this one among
        them): a side may bring a version of its own, so each process imports them."""
        found = {"pytest_hpml"}
        for plugin, _ in self.config.pluginmanager.list_plugin_distinfo():
            found.add(getattr(plugin, "__name__", "").partition(".")[0])
        return found

    def _new_server(self, modules: Sequence[str]) -> forkserver.Server:
        env = {**os.environ, **reruns.measuring_environment(self.config)}
        here = Path(self.config.invocation_params.dir)
        first = [
            p
            for side in (self.base, self.head)
            for p in (side.path(self.top, here), *self._first(side))
        ]
        return forkserver.Server(modules, first, env)

    def _finish(
        self,
        found: Pairs,
        started: _Started,
        before: Callable[[], None] | None = None,
        waited: Callable[[int, bool, float], None] | None = None,
    ) -> dict[str, dict[str, dict[str, Any]]]:
        """Let the processes of ``started`` measure in turns (after ``before``, if given) until
        both ended; what each side measured, by test id and metric; ``waited`` is told of each
        wait for one of them. Ctrl-C stops both."""
        try:
            if before is not None:
                before()
            reruns.take_turns(started.turns, started.running, started.first_cpu, waited)
            return {
                side.name: _take(found, side, *process.result())
                for side, process in zip(started.order, started.running)
            }
        except BaseException:
            started.stop()
            raise
        finally:
            started.close()


class _Waited:
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


@dataclass
class _Started:
    """A pair's two processes, running in ``pool``, each with its turn."""

    order: tuple[Side, Side]
    tests: list[str]
    turns: list[reruns.Turn]
    pool: Any  # a concurrent.futures.ThreadPoolExecutor
    running: list[Any]  # its futures: (CompletedProcess, answer) once a process ended
    first_cpu: int = 0  # which of the usable CPUs its first benchmark measures on

    def stop(self) -> None:
        """Stop both processes, as Ctrl-C does."""
        for turn in self.turns:
            turn.stop()
        self.close()

    def close(self) -> None:
        for turn in self.turns:
            turn.close()  # a process still waiting measures, and ends
        self.pool.shutdown(wait=True)


def _take(
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


# A base worktree's name holds its run's process id: a later run knows which ones a killed run
# left behind (SIGKILL: nothing could clean up).
WORKTREE_PREFIX = "pytest-hpml-base-"
_LEFT_BEHIND = re.compile(re.escape(WORKTREE_PREFIX) + r"(\d+)-")


def _remove_left_behind(config: pytest.Config, top: Path) -> None:
    """Remove the base worktrees of ``top`` whose run no longer runs, and say so; another
    tool's worktrees, and those of a run still going, are left alone."""
    listed = _git(top, "worktree", "list", "--porcelain").splitlines()
    for path in (Path(line[len("worktree ") :]) for line in listed if line.startswith("worktree ")):
        match = _LEFT_BEHIND.match(path.name)
        if match is None or _running(int(match.group(1))):
            continue
        vcs.remove_worktree(top, path)
        with _compat.uncaptured(config):
            print(
                f"hpml: removed the base worktree {path}, which a run that ended without "
                f"cleaning up (process {match.group(1)}) left behind",
                file=sys.stderr,
                flush=True,
            )


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process, or no pid at all: not ours to judge
    return True


NEEDS_GIT = "--hpml-against needs git, which is not installed here (or not on PATH)"


def _git(top: Path, *args: str) -> str:
    """Run git in ``top``; a usage error saying what failed."""
    try:
        return vcs.git(top, *args)
    except vcs.Missing:
        raise pytest.UsageError(NEEDS_GIT) from None
    except vcs.GitError as exc:
        raise pytest.UsageError(str(exc)) from None


def _inside(top: Path, here: Path) -> Path:
    """``here``, the invocation directory, which must lie in the repository: relative paths on
    the command line then name the same files in both trees."""
    try:
        here.resolve().relative_to(top)
    except ValueError:
        raise pytest.UsageError(
            f"--hpml-against: pytest runs from {here}, outside the repository {top}; run it "
            "from inside the repository, so that its paths name the same files in both trees"
        ) from None
    return here


def _modules() -> list[str]:
    """What each side's processes import, and its description imports first."""
    torch = importlib.util.find_spec("torch") is not None
    return ["pytest_hpml", "pytest_benchmark", *(["torch"] if torch else [])]


def _check_tree(against: Against, revision: str) -> None:
    """The base tree must have the directory pytest runs from, or its processes cannot start."""
    where = against.base.path(against.top, against.here)
    if not where.is_dir():
        relative = where.relative_to(against.directory)
        raise pytest.UsageError(
            f"--hpml-against={revision}: {relative} (where pytest runs) is not in that revision; "
            "run pytest from a directory both trees have, e.g. the repository's top level"
        )


def _toplevel(root: Path) -> Path:
    try:
        return Path(vcs.git(root, "rev-parse", "--show-toplevel").strip()).resolve()
    except vcs.Missing:
        raise pytest.UsageError(NEEDS_GIT) from None
    except vcs.GitError:
        raise pytest.UsageError(
            f"--hpml-against compares with a git revision, but the rootdir {root} is not in a "
            "git repository; run it in a clone, or compare with stored baselines "
            "(--hpml-baseline)"
        ) from None


def _commit(top: Path, revision: str) -> str:
    try:
        return vcs.commit(top, revision)
    except vcs.Missing:
        raise pytest.UsageError(NEEDS_GIT) from None
    except vcs.Ambiguous as exc:
        raise pytest.UsageError(
            f"--hpml-against={exc}; name one in full (--hpml-against={exc.first})"
        ) from None
    except vcs.GitError:
        raise pytest.UsageError(
            f"--hpml-against={revision}: no such commit in {top}; name a branch, tag or sha "
            "(git rev-parse must know it: in CI, fetch the base first, e.g. "
            "actions/checkout with fetch-depth: 0)"
        ) from None


def _named(config: pytest.Config, dest: str, value: Any) -> str:
    """An option's value as messages name it, with the source that gave it
    (``HPML_AGAINST_PYTHON=python3 -S``, ``ini hpml_against_paths = src``)."""
    sources = config.stash[SETTINGS_KEY].sources if SETTINGS_KEY in config.stash else {}
    source = sources.get(dest, "default")
    return given(f"--hpml-{dest.replace('_', '-')}" if source == "default" else source, value)


def _check_python(python: str, against: Against) -> tuple[str, dict[str, Any]]:
    """The base side's interpreter and its description, once it is seen to import
    pytest-hpml, pytest-benchmark and (where this one has it) torch; a usage error
    otherwise."""
    named = _named(against.config, "against_python", python)
    found = shutil.which(python)
    if found is None:
        command = python.split()  # "python3 -S": a command line, where a program is named
        alone = len(command) > 1 and shutil.which(command[0])
        hint = f"; name the interpreter alone ({command[0]}), without arguments" if alone else ""
        raise pytest.UsageError(f"{named}: no such interpreter{hint}")
    found = os.path.abspath(found)  # the base side runs in the worktree
    modules = _modules()
    env = {**os.environ, **against.environment(Side(BASE, against.directory, "", found))}

    def waiting() -> None:
        with _compat.uncaptured(against.config):
            print(
                f"hpml: waiting for {named} to import {', '.join(modules)} (at most "
                f"{CHECK_TIMEOUT:g} s)",
                file=sys.stderr,
                flush=True,
            )

    try:
        description, why = described(describing(found, modules, env), waiting)
    except OSError as exc:
        raise pytest.UsageError(f"{named} cannot run: {exc}") from None
    if description is None and why.startswith("it printed"):  # an answer, not Python's
        raise pytest.UsageError(
            f"{named} does not answer as a Python interpreter ({why}); name the interpreter of "
            "the base side's environment"
        )
    if description is None:
        raise pytest.UsageError(
            f"{named} cannot import {', '.join(modules)} ({why}); "
            "install pytest-hpml (and torch) into that environment"
        )
    theirs, ours = description["packages"].get("pytest-hpml", "?"), version()
    if theirs != ours:
        raise pytest.UsageError(
            f"{named} has pytest-hpml {theirs}, this one {ours}: "
            "both sides must measure alike; install the same version into both environments"
        )
    return found, description


def _check_temporary(root: Path) -> None:
    """A usage error where the temporary directory lies in the rootdir: the base worktree made
    there would be collected as the head's tests."""
    where, root = Path(tempfile.gettempdir()).resolve(), root.resolve()
    if where == root or root in where.parents:
        named = next(
            (f"{v}={os.environ[v]}" for v in ("TMPDIR", "TEMP", "TMP") if v in os.environ), ""
        )
        raise pytest.UsageError(
            f"--hpml-against: the temporary directory {where} ({named or 'the default'}) lies "
            f"in the rootdir {root}, where pytest would collect the base worktree as the head's "
            "tests; set TMPDIR to a directory outside it"
        )


def _check_paths(config: pytest.Config, paths: Sequence[str]) -> tuple[str, ...]:
    """``paths`` (--hpml-against-paths), each a directory of the rootdir, which each side puts
    first on ``sys.path`` from its own tree; a usage error otherwise. A path outside the rootdir
    (absolute, or through ``..``) would be the same on both sides, one that is no directory puts
    nothing there: either way the comparison would not be what it says."""
    root = config.rootpath.resolve()
    for path in paths:
        where = (root / path).resolve()
        if where != root and root not in where.parents:
            why = f"{shown(path)} lies outside the rootdir {root}, the same for both sides"
        elif not where.is_dir():
            why = f"{shown(path)} is no directory of the rootdir {root}"
        else:
            continue
        raise pytest.UsageError(
            f"{_named(config, 'against_paths', ','.join(paths))}: {why}; name directories of "
            "the rootdir, relative to it (such as src)"
        )
    return tuple(paths)


AGAINST_KEY = pytest.StashKey[Against]()


def prepare(config: pytest.Config, chosen: Any, launched: bool) -> None:
    """Make the base worktree (a usage error if it cannot be), removed when the run ends;
    nothing for a run that measures nothing (--help, --collect-only)."""
    if launched:
        raise pytest.UsageError(
            f"{chosen.sources['against']}: head against base runs its own processes; start "
            "pytest itself, not under torchrun, mpirun or srun"
        )
    if config.getoption("help", False) or config.getoption("collectonly", False):
        return
    against = Against(config, chosen.against, chosen.against_python, chosen.against_paths)
    config.stash[AGAINST_KEY] = against
    finish = _Finish(ending.Ending(config), against)
    config.pluginmanager.register(finish, "hpml-against-finish")
    config.add_cleanup(finish)  # where pytest_unconfigure never comes
    against.watch_imports()


class _Finish:
    """Ends head against base: once the pairs are over, an ending signal is held (a Ctrl-C in
    the summary or in pytest's clean-up would end in a traceback); the worktree is removed as
    the run is unconfigured, after every other plugin; the handlers are given back in a
    clean-up, after pytest's own (Note [Ending signals])."""

    def __init__(self, ending: Ending, against: Against) -> None:
        self.ending, self.against, self.removed = ending, against, False

    def hold(self) -> None:
        """From now until the run has ended, an ending signal is held (the pairs are over)."""
        self.ending.defer()

    def remove(self) -> None:
        if self.removed:
            return
        self.removed = True
        self.ending.defer()
        self.against.remove()

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.remove()

    def __call__(self) -> None:  # the clean-up, also where pytest_unconfigure never came
        try:
            self.remove()
        finally:
            self.ending.restore()


def rank_forker(config: pytest.Config) -> Any:
    """What forks a distributed test's ranks with torch imported: with --hpml-against, the
    fork server, in the controller and in the processes of the pairs it forked; else None,
    and each rank starts afresh (Note [Fork server])."""
    rerun = config.pluginmanager.get_plugin("hpml-rerun")
    if rerun is not None:
        return rerun.forker()
    against = config.stash.get(AGAINST_KEY, None)
    return against.forker() if against is not None else None
