"""Shared helpers for pytest-hpml's own tests: an inner project driven through ``pytester``.

In-process runs share this interpreter's torch, so they cost no import. pytester drops every
module a run imported once it ends, but torch and the parts of it loaded lazily (dynamo,
distributed, ...) cannot be imported twice in one interpreter: torch is imported here, before
any snapshot, and the library modules a run loads are put back after it (see ``KeepLibraries``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

# Records what the inner tests saw (one JSON object a line) and, at session end, whether torch
# was imported (meaningful only for runs in a subprocess, where nothing imported it before).
INNER_CONFTEST = """
import json
import os
import sys

import pytest


@pytest.fixture
def record(request):
    def write(**values):
        with (request.config.rootpath / "records.jsonl").open("a") as out:
            out.write(json.dumps({"test": request.node.name, **values}) + "\\n")

    return write


def pytest_sessionfinish(session):
    with (session.config.rootpath / "torch_imported.txt").open("a") as out:
        out.write(f"{'torch' in sys.modules}\\n")


def pytest_terminal_summary(config):
    with (config.rootpath / "summaries.txt").open("a") as out:
        out.write(f"{os.getpid()}\\n")
"""

# An inner test using every hpml fixture and recording what each one gave it.
PROBE = """
import random

import numpy
import torch


def test_probe(device, precision, backend, num_workers, dist_backend, hpml_seed, record):
    x = torch.ones(4, 4, device=device)
    with precision.autocast():
        matmul_dtype = str((x @ x).dtype)
    record(
        device=str(device),
        is_torch_device=isinstance(device, torch.device),
        precision=precision.name,
        dtype=str(precision.dtype),
        matmul_dtype=matmul_dtype,
        tolerances=[precision.rtol, precision.atol],
        backend=str(backend),
        num_workers=num_workers,
        dist_backend=dist_backend,
        seed=hpml_seed,
        draws=[random.random(), float(numpy.random.rand()), torch.rand(1).item()],
    )
"""

# The typical device-and-precision test: ids such as test_step[cpu-bf16].
STEP = """
import torch


def test_step(device, precision):
    x = torch.ones(2, 2, device=device)
    with precision.autocast():
        assert (x @ x).dtype == precision.dtype
"""

SOURCES = ("cli", "env", "ini", "toml")

# Inner benchmark runs measure briefly: what is asserted about them holds under any noise.
BENCH_TIME = "--hpml-bench-time=0.2"

# Where a test's claim is not about time, times are judged at the largest threshold (11x):
# a stored baseline or a base side measured in a quieter moment of a shared machine cannot fail
# the run, and only what the test changes can.
TIMES_UNJUDGED = "--hpml-threshold=1000%"


# A pure-Python workload timed with ``benchmark``; WORK_SCALE multiplies the work it does.
WORK = """
import os


def work():
    return sum(range(int(20_000 * float(os.environ.get("WORK_SCALE", "1")))))


def test_work(benchmark):
    benchmark(work)
"""


def count_tests(count: int = 2, *, portable: bool = True, timed: bool = False) -> str:
    """Inner tests ``test_0``... that record a count metric ``n`` (COUNT, default 1) and, if
    ``timed``, time a trivial call: without it they are fast and their verdicts deterministic."""
    call = "    benchmark(sum, range(10))\n" if timed else ""
    return "import os\n" + "".join(
        f"\n\ndef test_{i}(benchmark):\n{call}"
        f'    benchmark.record("n", int(os.environ.get("COUNT", "1")), portable={portable})\n'
        for i in range(count)
    )


# Every library module an in-process run imported, kept for the rest of the session.
LIBRARIES: dict[str, ModuleType] = {}


class KeepLibraries:
    """An inner-run plugin remembering the modules loaded from outside the inner project."""

    def __init__(self, project_root: str) -> None:
        self.project_root = project_root

    def pytest_unconfigure(self) -> None:
        for name, module in list(sys.modules.items()):
            if not (getattr(module, "__file__", None) or "").startswith(self.project_root):
                LIBRARIES.setdefault(name, module)


class Project:
    """The inner pytest project of one test: its files, configuration and runs."""

    def __init__(self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pytester = pytester
        self.monkeypatch = monkeypatch
        self.path = pytester.path
        monkeypatch.setenv("COLUMNS", "200")  # skip reasons and help lines are not cut short
        # An hpml project (tests of a run that is not opted in unset this and the two below).
        monkeypatch.setenv("HPML_BENCHMARKS", "1")
        # Benchmarks are measured in this process alone unless a test asks for more.
        monkeypatch.setenv("HPML_PROCESSES", "1")
        monkeypatch.setenv("HPML_RECORD_PROCESSES", "1")
        pytester.makeconftest(INNER_CONFTEST)

    def write_probe(self) -> None:
        self.pytester.makepyfile(test_probe=PROBE)

    def write_step(self) -> None:
        self.pytester.makepyfile(test_step=STEP)

    def write_tests(self, source: str) -> None:
        self.pytester.makepyfile(test_inner=source)

    def configure(self, source: str, **options: str) -> list[str]:
        """Set hpml options (``dist_backend="gloo"``) from ``source``; return the CLI args."""
        if source == "cli":
            return [
                f"--hpml-{name.replace('_', '-')}" + ("" if name == "run_slow" else f"={value}")
                for name, value in options.items()
            ]
        if source == "env":
            for name, value in options.items():
                self.monkeypatch.setenv(f"HPML_{name.upper()}", value)
        elif source == "ini":
            self.pytester.makeini(
                "[pytest]\n" + "".join(f"hpml_{n} = {v}\n" for n, v in options.items())
            )
        elif source == "toml":
            self.pytester.makepyprojecttoml(
                "[tool.pytest.ini_options]\n"
                + "".join(f"hpml_{n} = {json.dumps(v)}\n" for n, v in options.items())
            )
        else:
            raise ValueError(f"unknown option source {source!r}")
        return []

    def run(self, *args: str) -> pytest.RunResult:
        """Run pytest in this process (torch stays imported, so it is cheap)."""
        # pytest_hpml is imported already, so pytest cannot rewrite its asserts: expected here.
        result = self.pytester.runpytest(
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore::pytest.PytestAssertRewriteWarning",
            *args,
            plugins=[KeepLibraries(str(self.path))],
        )
        sys.modules.update(LIBRARIES)
        return result

    def bench(self, *args: str) -> pytest.RunResult:
        """Run in this process with benchmarks measured briefly and torch on one thread.

        On a shared machine, torch's threads wait for one another whenever a neighbour holds a
        core: the reference workload then varies tenfold and more from one round to the next.
        """
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self.run(BENCH_TIME, *args)
        finally:
            torch.set_num_threads(threads)

    def run_subprocess(self, *args: str) -> pytest.RunResult:
        """Run pytest in a fresh interpreter: for CUDA and for what gets imported."""
        return self.pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=120)

    def records(self) -> list[dict[str, Any]]:
        """What the inner tests passed to ``record``, in the order they ran."""
        path = self.path / "records.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def torch_imported(self) -> list[bool]:
        """For each finished run, whether torch was in ``sys.modules`` at its end."""
        return [line == "True" for line in (self.path / "torch_imported.txt").read_text().split()]

    @property
    def baseline_dir(self) -> Path:
        return self.path / "baselines"

    def baseline_files(self) -> dict[str, Path]:
        """The baseline files by kind, ``machine`` and ``portable`` (at most one of each)."""
        found: dict[str, Path] = {}
        for path in sorted(self.baseline_dir.glob("*.json")):
            kind = path.name.partition("-")[0]
            assert kind not in found, f"two {kind} baseline files: {found[kind]}, {path}"
            found[kind] = path
        return found

    def stored(self, kind: str) -> dict[str, Any]:
        """The entries (test id -> metric -> record) of the ``machine`` or ``portable`` file."""
        return json.loads(self.baseline_files()[kind].read_text())["entries"]

    @staticmethod
    def verdicts(result: pytest.RunResult) -> dict[tuple[str, str], str]:
        """The "hpml benchmarks" table at the end of a run: (test id, metric) -> verdict."""
        lines = result.outlines
        starts = [i for i, line in enumerate(lines) if re.fullmatch(r"=+ hpml benchmarks =+", line)]
        assert len(starts) == 1, result.stdout.str()
        heads = [i for i, line in enumerate(lines) if re.match(r"test +metric +baseline ", line)]
        table = {}
        for line in lines[heads[0] + 1 :] if heads else ():  # after the column names
            if line.startswith("hpml:"):
                break
            cells = re.split(r" {2,}", line.strip())  # columns are 2 spaces apart
            table[(cells[0], cells[1])] = cells[7]  # a reason may follow the verdict
        return table

    @staticmethod
    def hpml_errors(result: pytest.RunResult) -> list[str]:
        return [line for line in result.outlines if line.startswith("hpml: ERROR ")]

    @staticmethod
    def settings(result: pytest.RunResult) -> dict[str, str]:
        """The header's ``hpml: device=... seed=...`` line as a dict."""
        lines = [line for line in result.outlines if line.startswith("hpml: device=")]
        assert len(lines) == 1, result.outlines
        return dict(item.split("=", 1) for item in lines[0].removeprefix("hpml: ").split())

    @staticmethod
    def hardware_lines(result: pytest.RunResult) -> list[str]:
        return [line for line in result.outlines if line.startswith("hpml: torch ")]

    @staticmethod
    def error_lines(result: pytest.RunResult) -> list[str]:
        return [line for line in result.errlines if line.startswith("ERROR:")]


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Project:
    """An inner project with the recording conftest, no HPML_* variables set."""
    return Project(pytester, monkeypatch)


@pytest.fixture(params=SOURCES)
def source(request: pytest.FixtureRequest) -> str:
    """Each place an option can be set: command line, environment, ini file, pyproject.toml."""
    return request.param


@pytest.fixture
def cpu_machine() -> None:
    """Skip tests that state what happens on a machine without a CUDA GPU, like this one."""
    if torch.cuda.device_count():
        pytest.skip("asserts the behaviour of a machine without a CUDA GPU")


@pytest.fixture(autouse=True)
def _keep_libraries() -> Iterator[None]:
    """Put back the library modules that pytester dropped when the test's fixtures ended."""
    yield
    sys.modules.update(LIBRARIES)


@pytest.fixture
def tf32_flags() -> Iterator[None]:
    """Put torch's TF32 flags back after a test that changes them in this process."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.allow_tf32, cudnn.allow_tf32)
    yield
    matmul.allow_tf32, cudnn.allow_tf32 = saved


@pytest.fixture
def no_cuda_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide every GPU from subprocess runs, so their outcome is the same on any machine."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def git(path: Path, *args: str) -> str:
    """Run a real git command in ``path``; its output."""
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=path,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def committed(project: Project, **files: str) -> Project:
    """The inner project with ``files`` written (as ``makepyfile`` names them) and committed, as
    a git repository: the base side of --hpml-against=HEAD."""
    project.pytester.makepyfile(**files)
    git(project.path, "init", "-q")
    git(project.path, "add", "-A")
    git(project.path, "commit", "-qm", "base")
    return project


def interruptible() -> None:
    """``preexec_fn`` of a process a test sends Ctrl-C (SIGINT), SIGTERM or SIGHUP to: their
    default actions, even in a run started with them ignored (a shell's background job ignores
    SIGINT, ``nohup`` SIGHUP), which every child inherits and which Python then leaves so."""
    import signal

    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


# In the environment of a process that a test interrupts: on SIGABRT it prints every thread's
# stack, which :func:`interrupt` asks for when the process does not end.
DUMPS_STACKS = {"PYTHONFAULTHANDLER": "1"}


def interrupt(
    process: subprocess.Popen[str], seconds: float = 60, number: int | None = None
) -> tuple[str, str]:
    """Ctrl-C (SIGINT, or the signal ``number``) to ``process`` (started with
    :data:`DUMPS_STACKS`): its output once it ended. One still running after ``seconds`` fails
    the test with what it was doing (its threads' stacks) and the processes under it, which are
    then killed: a hang is found where it happened, and the tests after it run on a quiet
    machine."""
    import signal

    process.send_signal(signal.SIGINT if number is None else number)
    try:
        return process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        running = process.poll() is None
        under = _processes_under(process.pid)
        if running:
            process.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.communicate(timeout=10)  # kept: the call below returns all it read
        for pid in under:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, err = process.communicate()
        state = "still running" if running else "ended, its output still open in a child"
        listed = "\n".join(under.values())
        pytest.fail(
            f"not ended {seconds:g} s after Ctrl-C ({state}); processes under it:\n{listed}\n"
            f"its output (stacks after SIGABRT):\n{out}\n{err or ''}"
        )


def _processes_under(pid: int) -> dict[int, str]:
    """``ps``'s lines of ``pid`` and the processes under it, by pid."""
    listed = subprocess.run(
        ["ps", "-e", "-o", "pid=,ppid=,stat=,etime=,args="], capture_output=True, text=True
    ).stdout.splitlines()
    lines = {int(line.split()[0]): line for line in listed}
    parents = {child: int(line.split()[1]) for child, line in lines.items()}
    under, more = set(), {pid}
    while more:
        under |= more
        more = {child for child, parent in parents.items() if parent in under} - under
    return {found: lines[found] for found in sorted(under) if found in lines}
