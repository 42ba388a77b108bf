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
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .. import _compat, vcs
from ..config.invocation import child_args
from ..config.progress import Progress, plural
from . import ending, forkserver, reruns, worktree
from .environment import (
    CHECK_TIMEOUT,
    describe_here,
    described,
    describing,
    version,
)
from .pairing import BASE, HEAD, Pairs, Side, Waited, take

# Pairs that count the work (the others only time): two processes a side show a count that
# varies with the input (Note [Torch state]).
COUNTED_PAIRS = 2


class Against:
    """The comparison's two sides and the base worktree, made once in the controller."""

    def __init__(self, config: pytest.Config, revision: str, python: str, paths: Sequence[str]):
        self.config = config
        self.asked = revision
        self.paths = worktree.check_paths(config, paths)
        self.top = worktree.toplevel(config.rootpath)
        self.here = worktree.inside(self.top, Path(config.invocation_params.dir))
        sha = worktree.commit_of(self.top, revision)
        dirty = worktree.git_or_usage(
            self.top, "status", "--porcelain", "--untracked-files=no"
        ).strip()
        head = worktree.commit_of(self.top, "HEAD")[:12] + (" + changes" if dirty else "")
        self.head = Side(HEAD, self.top, head, sys.executable)
        self._descriptions: dict[str, dict[str, Any]] | None = None
        self._base_description: dict[str, Any] | None = None  # another interpreter's
        self._early: _Started | None = None  # the first pair, started at collection's end
        # forks the pairs' processes (Note [Fork server])
        self._server: forkserver.Server | None = None
        self._server_tried = False
        self._watches: list[Any] = []  # torch_state.OnImport: the server starts with torch's import
        worktree.check_temporary(config.rootpath)
        worktree.remove_left_behind(config, self.top)
        self.directory = Path(tempfile.mkdtemp(prefix=f"{worktree.WORKTREE_PREFIX}{os.getpid()}-"))
        try:
            worktree.git_or_usage(
                self.top, "worktree", "add", "--detach", "--quiet", str(self.directory), sha
            )
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
                    waited = Waited(progress, index + 1, started.order)
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
                side.name: take(found, side, *process.result())
                for side, process in zip(started.order, started.running)
            }
        except BaseException:
            started.stop()
            raise
        finally:
            started.close()


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


def _check_python(python: str, against: Against) -> tuple[str, dict[str, Any]]:
    """The base side's interpreter and its description, once it is seen to import
    pytest-hpml, pytest-benchmark and (where this one has it) torch; a usage error
    otherwise."""
    named = worktree.named(against.config, "against_python", python)
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
    finish = ending.Finish(ending.Ending(config), against.remove)
    config.pluginmanager.register(finish, "hpml-against-finish")
    config.add_cleanup(finish)  # where pytest_unconfigure never comes
    against.watch_imports()


def rank_forker(config: pytest.Config) -> Any:
    """What forks a distributed test's ranks with torch imported: with --hpml-against, the
    fork server, in the controller and in the processes of the pairs it forked; else None,
    and each rank starts afresh (Note [Fork server])."""
    rerun = config.pluginmanager.get_plugin("hpml-rerun")
    if rerun is not None:
        return rerun.forker()
    against = config.stash.get(AGAINST_KEY, None)
    return against.forker() if against is not None else None
