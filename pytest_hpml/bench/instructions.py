"""Instruction counts under callgrind (``--hpml-instructions``): the CPU work of a benchmark's
call, counted in one more pytest process that runs under valgrind (Note [Instruction counts]).

The first process asks for the counts (:func:`count_in_valgrind`) once its own tests ran; the
process under valgrind measures nothing, but each benchmark's ``benchmark(...)`` counts its
calls with a :class:`Callgrind`: valgrind translates torch without instrumenting it (starting
instrumented, importing torch alone takes over ten minutes), ``callgrind_control`` switches
instrumentation on just before the counted calls and off after them, and torch's own
callgrind client requests switch collection on and dump what was collected. The run that
asked reads the dumps (:func:`attribute`): Python under valgrind read one in 1.9 s, not 0.05 s.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import gc
import importlib.util
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.values import usable_cpus
from .dumps import mapped_files, parse, top

# A benchmark's calls are counted until at least this many instructions were counted, or
# MAX_CALLS calls: one call of a large step, ten of a small one (Note [Instruction counts]).
TARGET_INSTRUCTIONS = 20_000_000
MAX_CALLS = 10
# Uncounted calls first: lazy initialization must not be counted. After one, the counts of the
# next calls agreed within 0.07% (Note [Instruction counts]); two for a margin.
WARMUP_CALLS = 2
# A count this much above or below its baseline is a change: between processes and beside a
# second valgrind the counts measured here moved by under 0.1% (Note [Instruction counts]).
TOLERANCE = 0.01
# A call that waits for other threads or processes (OpenMP's, DataLoader workers, ranks) is not
# counted: what this process executes then depends on timing. Waits show as voluntary context
# switches of the calling thread, thousands in such a call under valgrind and a few at most in
# a call that computes alone (Note [Instruction counts]).
WAITS_ALLOWED = 10
CONTROL_TIMEOUT = 120.0  # seconds callgrind_control may take to switch instrumentation
REQUEST_KEY = "instructions"  # in a rerun's request: the directory callgrind writes to


def unavailable() -> str | None:
    """Why instructions cannot be counted here; None if they can."""
    if not sys.platform.startswith("linux"):
        return f"callgrind's switches are used on Linux only, this is {sys.platform}"
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (on Debian and Ubuntu: apt-get install valgrind)"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed: its client requests switch callgrind's collection"
    return None


def valgrind_version() -> str:
    try:
        done = subprocess.run(["valgrind", "--version"], capture_output=True, text=True)
    except OSError:
        return "?"
    return done.stdout.strip().removeprefix("valgrind-") or "?"


def command(directory: Path) -> list[str]:
    """The valgrind command line that the counting process runs under."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",  # torch's import would take over ten minutes instrumented
        "--collect-atstart=no",
        # the dump format parse() reads, whatever a ~/.valgrindrc or VALGRIND_OPTS says
        "--cache-sim=no",
        "--branch-sim=no",
        "--collect-jumps=no",
        "--collect-systime=no",
        "--separate-threads=no",
        "--dump-instr=no",
        f"--callgrind-out-file={directory}/callgrind.%p.out",
    ]


# The CPU kernels counted (Note [Instruction counts]): valgrind runs AVX2 kernels hundreds of
# times slower than their native speed (MKL's sgemm 2,200x), SSE ones about ten times.
KERNELS = {"ATEN_CPU_CAPABILITY": "default"}
X86_KERNELS = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"}
KERNELS_NAME = "sse4"  # in the key of x86-64 counts; "default" elsewhere


def x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def environment() -> dict[str, str]:
    """What the counting process runs with: hashing fixed (set iteration order decides some
    work), one thread (OpenMP threads spinning would make a count depend on timing), and
    torch's, MKL's and oneDNN's kernels held to the instruction sets valgrind runs fast."""
    fixed = {"PYTHONHASHSEED": "0", "HPML_THREADS": "1", "OMP_NUM_THREADS": "1", **KERNELS}
    return {**fixed, **X86_KERNELS} if x86() else fixed


@dataclass
class Counted:
    """What the calls of one benchmark asked of the CPU."""

    instructions: float  # per call
    calls: int
    dumps: list[str] = field(default_factory=list)  # callgrind's, for :func:`attribute`
    seconds: float = 0.0  # what counting took, under valgrind
    waits: int = 0  # voluntary context switches in a warm-up call


@dataclass
class Uncounted:
    """Why a benchmark's calls were not counted."""

    why: str
    seconds: float = 0.0  # what finding out took, under valgrind


def machine_key(valgrind: str) -> str:
    """What a count depends on (Note [Instruction counts]): the architecture, the instruction
    set valgrind presents (the same CPU on every host of a kind; glibc's string functions
    choose by it), the kernels counted (:data:`KERNELS`), and the versions of valgrind, torch
    and Python. Asked in the counting process."""
    import torch

    from .. import _compat

    kernels = KERNELS_NAME if x86() else "default"
    python = ".".join(map(str, sys.version_info[:2]))
    torch_version = torch.__version__.split("+")[0]
    return (
        f"{platform.machine()}-{_compat.cpu_level()}-{kernels}-valgrind{valgrind}"
        f"-torch{torch_version}-py{python}"
    )


class Callgrind:
    """Counts calls in a process that runs under valgrind's callgrind, started by
    :func:`command`."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self.pid = os.getpid()
        self._dumps = 0  # kept so far, each under a name of its own

    @functools.cached_property
    def key(self) -> str:
        """What the counts of this process depend on (:func:`machine_key`)."""
        return machine_key(valgrind_version())

    def count(
        self, call: Callable[[], Any], sync: Callable[[], None]
    ) -> tuple[Counted | Uncounted, Any]:
        """Warm ``call`` up, then count the instructions of a few calls: one first, and more
        until TARGET_INSTRUCTIONS or MAX_CALLS, each call's share of them. Returns them (or why
        not: a call that waits) and what the first call returned."""
        from .. import _compat

        start = time.perf_counter()
        requests = _compat.callgrind_requests()  # imports torch, if need be, uninstrumented
        result, waits = _warm_up(call, sync)
        if waits > WAITS_ALLOWED:
            why = (
                f"a call waits for other threads or processes ({waits:,} times): what this "
                "process executes depends on their timing"
            )
            return Uncounted(why, time.perf_counter() - start), result
        enabled = gc.isenabled()
        gc.collect()
        gc.disable()  # a collection would land in whichever call crossed the threshold
        try:
            with self._instrumented():
                total, dumps = self._collect(requests, call, 1, sync)
                calls = max(1, min(MAX_CALLS, math.ceil(TARGET_INSTRUCTIONS / max(total, 1))))
                if calls > 1:
                    more, extra = self._collect(requests, call, calls - 1, sync)
                    total, dumps = total + more, dumps + extra
        finally:
            if enabled:
                gc.enable()
        seconds = time.perf_counter() - start
        return Counted(total / calls, calls, dumps, seconds, waits), result

    @contextlib.contextmanager
    def _instrumented(self) -> Iterator[None]:
        """Instrumentation on inside; off after, unless switching it off fails while an error
        is already on its way (that error is the one to see)."""
        self._instrument("on")
        try:
            yield
        except BaseException:
            with contextlib.suppress(RuntimeError):
                self._instrument("off")
            raise
        self._instrument("off")

    def _collect(
        self,
        requests: tuple[Callable[[], None], Callable[[], None]],
        call: Callable[[], Any],
        calls: int,
        sync: Callable[[], None],
    ) -> tuple[int, list[str]]:
        """Collect ``calls`` calls: their total, and callgrind's dump of them kept for
        :func:`attribute`. Collection is switched off again whatever happens: left on, the next
        benchmark's switch would invert it."""
        toggle, dump = requests
        toggle()  # collection on
        try:
            for _ in range(calls):
                call()
            sync()
        finally:
            dump()  # collection off, and what was collected written out
            found = sorted(self.directory.glob(f"callgrind.{self.pid}.out.*"))
            kept = self._keep(found[-1]) if found else None
            for path in found:
                path.unlink(missing_ok=True)
        if kept is None:
            raise RuntimeError(f"callgrind wrote no dump in {self.directory}")
        return _total(kept), [str(kept)]

    def _keep(self, dump: Path) -> Path:
        """The dump under a name of its own, beside the files this process maps now (code
        outside every object callgrind knows is named by them)."""
        self._dumps += 1
        kept = self.directory / f"counted.{self.pid}.{self._dumps}.out"
        dump.rename(kept)
        with contextlib.suppress(OSError):  # then such code is all taken as run time code
            shutil.copyfile("/proc/self/maps", kept.with_suffix(".maps"))
        return kept

    def _instrument(self, state: str) -> None:
        """``callgrind_control -i on|off`` on this process. valgrind takes the command while
        this process runs, so it spins until the command returns: blocked in a system call, it
        would need the command to wake it with ptrace, which hardened kernels forbid."""
        try:
            control = subprocess.Popen(
                ["callgrind_control", "-i", state, str(self.pid)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        except OSError as exc:  # callgrind_control is a perl script: perl may be missing
            raise RuntimeError(f"callgrind_control cannot run: {exc}") from None
        deadline = time.monotonic() + CONTROL_TIMEOUT
        while control.poll() is None:
            if time.monotonic() > deadline:
                control.kill()
                raise RuntimeError(f"callgrind_control -i {state} did not answer")
        said = control.stdout.read() if control.stdout else ""
        if control.returncode or "OK" not in said:
            raise RuntimeError(f"callgrind_control -i {state} failed: {said.strip()[-200:]}")


def _warm_up(call: Callable[[], Any], sync: Callable[[], None]) -> tuple[Any, int]:
    """WARMUP_CALLS calls: what the first returned, and how often each later one waited."""
    result = call()
    before = voluntary_switches()
    for _ in range(WARMUP_CALLS - 1):
        call()
    sync()
    return result, round((voluntary_switches() - before) / (WARMUP_CALLS - 1))


def voluntary_switches() -> int:
    """How often this thread has given up the CPU to wait (Linux: ``RUSAGE_THREAD``)."""
    import resource

    return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw


def _total(dump: Path) -> int:
    """The total of a dump, from its last line (``totals:``), without reading the rest."""
    with open(dump, "rb") as lines:
        lines.seek(max(0, lines.seek(0, os.SEEK_END) - 4096))
        found = re.findall(rb"^totals: (\d+)", lines.read(), re.MULTILINE)
    if not found:
        raise RuntimeError(f"callgrind's dump {dump} has no totals")
    return int(found[-1])


def _read(path: Path) -> tuple[int, dict[str, int]]:
    """A dump, its code without a symbol named by the files mapped when it was written."""
    try:
        with open(path.with_suffix(".maps"), encoding="utf-8", errors="replace") as maps:
            files = mapped_files(maps)
    except OSError:  # then code in no object callgrind knows is all taken as run time code
        files = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        return parse(lines, files)


def attribute(answer: dict[str, Any]) -> None:
    """In the run that asked, before the dumps' directory goes: each count's top functions
    (``detail["by"]``, per call) from the dumps the process under valgrind kept."""
    for result in answer.get("results", []):
        for name, record in result.get("metrics", {}).items():
            detail = record.get("detail") or {}
            if not is_instructions(name) or "dumps" not in detail:
                continue
            functions: dict[str, int] = defaultdict(int)
            for dump in detail.pop("dumps"):
                # gone or cut short: the profile says less; the count, from its total, stands
                with contextlib.suppress(OSError, ValueError):
                    for function, cost in _read(Path(dump))[1].items():
                        functions[function] += cost
            detail["by"] = top(functions, record.get("calls") or 1)


@dataclass
class Counting:
    """What the processes under valgrind counted, side by side with --hpml-against."""

    counted: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # side, test
    failed: dict[str, dict[str, str]] = field(default_factory=dict)  # side -> test -> why
    uncounted: dict[str, str] = field(default_factory=dict)  # "test metric" -> why
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the processes under valgrind, start-up included
    counting: dict[str, float] = field(default_factory=dict)  # test id -> seconds counting it
    tests: int = 0  # benchmarks asked for
    left_out: int = 0  # benchmarks --hpml-instructions=changed did not ask for

    @property
    def on(self) -> str:
        """What the counts depend on (:func:`machine_key`), as the processes found it."""
        keys = {
            record.get("counted_on")
            for metrics in self.counted.get("head", {}).values()
            for record in metrics.values()
        }
        return ", ".join(sorted(k for k in keys if k))


Ask = Callable[..., tuple[subprocess.CompletedProcess[str], "dict[str, Any] | None"]]


def _unshown(done: int, note: str | None = None) -> None:
    """Progress that no one is shown."""


def count(
    tests: Sequence[str], sides: Mapping[str, Ask], step: Callable[..., None] = _unshown
) -> Counting:
    """Count the instructions of ``tests`` in one process under callgrind per side, asked
    through each side's ``ask`` (a rerun's :func:`~pytest_hpml.bench.reruns.ask`, with the
    side's interpreter and tree bound). ``step(done, note)`` is told when the processes start
    and as each one ends (a :class:`~pytest_hpml.config.progress.Progress`'s). Ctrl-C ends it
    as a rerun's does."""
    found = Counting(tests=len(tests))
    why = unavailable()
    if why or not tests:
        found.notes += [f"instructions not counted: {why}"] if why else []
        return found
    start = time.monotonic()

    from .reruns import NARROW_KEY

    def one(side: str) -> tuple[str, Any, Any]:
        with tempfile.TemporaryDirectory(prefix="pytest-hpml-callgrind-") as directory:
            done, answer = sides[side](
                tests,
                wrapper=command(Path(directory)),
                env=environment(),
                # the files of the tests it counts only: valgrind makes every import slow
                request={REQUEST_KEY: directory, NARROW_KEY: True},
            )
            if answer is not None:
                attribute(answer)
            return side, done, answer

    # The sides' processes run at once where there are cores for them: a count does not
    # depend on what runs beside it (Note [Instruction counts]), and valgrind is slow.
    workers = max(1, min(len(sides), usable_cpus()))
    step(0, _order(list(sides), workers))
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            for ended, (side, done, answer) in enumerate(pool.map(one, sides), 1):
                _take(found, side, done, answer)
                step(ended)
    finally:
        found.seconds = time.monotonic() - start
    return found


def _order(sides: Sequence[str], workers: int) -> str:
    """How the sides' processes run, as the progress line says it."""
    if len(sides) < 2:
        return ""
    return f"{' and '.join(sides)} at once" if workers > 1 else ", then ".join(sides)


def _take(
    found: Counting,
    side: str,
    done: subprocess.CompletedProcess[str],
    answer: dict[str, Any] | None,
) -> None:
    """Keep one side's counts; say why, if it counted nothing."""
    if answer is None:
        from .reruns import silence

        found.notes.append(f"the {side} process under valgrind counted nothing ({silence(done)})")
        return
    found.counted[side] = {}
    found.failed[side] = dict(answer.get("failed", {}))
    for result in answer["results"]:
        test = result["test"]
        counted = {n: r for n, r in result["metrics"].items() if is_instructions(n)}
        if counted:  # a pedantic or record-only benchmark has none
            found.counted[side][test] = counted
        for name, why in result.get("uncounted", {}).items():
            found.uncounted.setdefault(f"{test} {name}", why)
        spent = result.get("instruction_seconds", 0.0)
        found.counting[test] = found.counting.get(test, 0.0) + spent


def is_instructions(name: str) -> bool:
    """Whether a metric is an instruction count (``instructions``, ``instructions[variant]``)."""
    return name.partition("[")[0] == "instructions"
