"""Benchmarks measured in several processes (--hpml-processes): the other processes run only the
benchmarks, share the measuring time, and their runs are pooled, stored and judged together.

The first process runs in this interpreter (pytester); the others are real ``python -m pytest``
processes started by the plugin. Where a test signals the first process, it is a real pytest in a
process of its own too (:func:`start_pytest`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_hpml.bench import reruns
from pytest_hpml.config import invocation
from pytest_hpml.config.role import RERUN_ENV, RERUN_FORMAT, RERUN_PREFIX, rerun_request
from tests.conftest import BENCH_TIME, DUMPS_STACKS, TIMES_UNJUDGED, WORK, interrupt, interruptible

if TYPE_CHECKING:
    from tests.conftest import Project

TEST = "test_inner.py::test_work"
RECORD_IN_2 = "--hpml-record-processes=2"

# WORK, a test that is no benchmark, and a record of which processes ran which test.
SOURCE = (
    "import os\n\nimport torch  # noqa: F401  (every process then times the reference workload)\n"
    + WORK
    + '    with open("ran.txt", "a") as out:\n'
    + f'        out.write(os.environ.get("{RERUN_ENV}", "first") + "\\n")\n'
    + "\n\ndef test_plain():\n"
    + '    with open("plain.txt", "a") as out:\n'
    + '        out.write("ran\\n")\n'
)


@pytest.fixture
def project3(project: Project) -> Project:
    project.write_tests(SOURCE)
    return project


# WORK, where a measuring process (not the first) says it runs, then waits to be stopped.
WAITS = (
    "import time\nfrom pathlib import Path\n"
    + WORK
    + f'    if os.environ.get("{RERUN_ENV}"):\n'
    + '        Path("child.pid").write_text(str(os.getpid()))\n'
    + "        time.sleep(600)\n"
)


def start_pytest(project: Project, tmpdir: Path, *args: str) -> subprocess.Popen[str]:
    """A real pytest of the inner project in a process of its own, for a test to signal; its
    temporary files (and those of the processes it starts) go to ``tmpdir``."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=project.path,
        env={**os.environ, "TMPDIR": str(tmpdir), "OMP_NUM_THREADS": "1", **DUMPS_STACKS},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=interruptible,
    )


def wait_for_pid(inner: subprocess.Popen[str], path: Path, seconds: float = 60) -> int:
    """The pid that a process of ``inner``'s run wrote to ``path`` once it got there."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and inner.poll() is None:
        text = path.read_text() if path.exists() else ""
        if text.strip():
            return int(text)
        time.sleep(0.1)
    inner.kill()
    raise AssertionError(f"nothing wrote {path.name}:\n{inner.communicate()[0]}")


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def still_running(pids: Iterable[int], seconds: float = 10) -> list[int]:
    """Those of ``pids`` that still run after up to ``seconds``: a process that was stopped
    may take a moment to go, on a busy machine more."""
    deadline = time.monotonic() + seconds
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if alive(pid)]
    for pid in left:  # not to leave them to the tests after this one
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def hpml_files(tmpdir: Path) -> list[str]:
    """What pytest-hpml left in the temporary directory ``tmpdir``."""
    return sorted(path.name for path in tmpdir.glob("pytest-hpml-*"))


def ran(project: Project, name: str = "ran.txt") -> list[str]:
    return (project.path / name).read_text().split()


def test_update_records_the_runs_of_every_process(project3: Project) -> None:
    result = project3.bench("--hpml-baseline=update", "--hpml-record-processes=3")
    assert result.ret == pytest.ExitCode.OK
    record = project3.stored("machine")[TEST]["time"]
    runs = [record, *record["processes"]]
    assert len(runs) == 3
    assert all(len(run["samples"]) == len(run["reference"]) >= 5 for run in runs)
    result.stdout.fnmatch_lines(["hpml: 1 benchmark(s) measured in 3 processes (*"])
    first, *others = ran(project3)
    assert first == "first"
    assert len(others) == 2
    assert "first" not in others
    assert ran(project3, "plain.txt") == ["ran"]  # the other processes ran only the benchmark


def test_the_other_processes_collect_only_the_files_they_measure(project3: Project) -> None:
    """A test module without the benchmark is imported by the first process only (Note
    [Cheaper processes])."""
    project3.pytester.makepyfile(
        test_other="import os\n\n"
        'with open("imported.txt", "a") as out:\n'
        f'    out.write(os.environ.get("{RERUN_ENV}", "first") + "\\n")\n\n\n'
        "def test_nothing():\n    pass\n"
    )
    result = project3.bench("--hpml-baseline=update", "--hpml-record-processes=2")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert ran(project3, "imported.txt") == ["first"]
    assert len(ran(project3)) == 2  # the benchmark's module, in both


def test_processes_share_the_bench_time(project3: Project) -> None:
    project3.bench(
        "--hpml-baseline=update",
        "--hpml-processes=2",
        "--hpml-record-processes=3",
        "--hpml-bench-time=1",
    )
    record = project3.stored("machine")[TEST]["time"]
    assert len(record["processes"]) == 2
    # half of the second each, as in a comparison in 2 processes (what each process measures
    # in that time is tested with a counting clock in test_measurement.py, not with wall time)
    assert [run["budget"] for run in (record, *record["processes"])] == [0.5, 0.5, 0.5]


def test_a_benchmark_measured_in_one_process_gets_all_the_bench_time(project3: Project) -> None:
    project3.monkeypatch.setenv("HPML_PROCESSES", "3")  # typed, it is refused as unread
    project3.bench("--hpml-baseline=off", "--hpml-bench-time=1", "--hpml-report=r.json")
    [entry] = json.loads((project3.path / "r.json").read_text())["results"]
    assert entry["metrics"]["time"]["budget"] == 1.0  # not a third of the second


def test_compare_without_a_baseline_measures_in_one_process(project3: Project) -> None:
    result = project3.bench("--hpml-processes=3")
    assert result.ret == pytest.ExitCode.OK
    assert ran(project3) == ["first"]
    assert "measured in 3 processes" not in result.stdout.str()


def test_compare_pools_the_processes_of_both_sides(project3: Project) -> None:
    project3.bench("--hpml-baseline=update", "--hpml-record-processes=2")
    result = project3.bench("--hpml-processes=2", "--hpml-report=report.json", TIMES_UNJUDGED)
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out
    [entry] = json.loads((project3.path / "report.json").read_text())["results"]
    assert len(entry["metrics"]["time"].get("processes", ())) == 1, out
    assert entry["verdicts"]["time"]["verdict"] != "no-baseline", out
    assert len(ran(project3)) == 4


def test_progress_lines_say_how_far_the_other_processes_got_in_a_log(project: Project) -> None:
    """Comparing with a stored baseline in 2 processes, not on a terminal (a subprocess's
    output is a pipe): a line as the other process starts and one as it ends; none with -qq."""
    project.write_tests(WORK)
    project.bench("--hpml-baseline=update")
    result = project.run_subprocess(BENCH_TIME, "--hpml-processes=2", TIMES_UNJUDGED)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "test_inner.py . * [[]100%[]]",
            "hpml: measuring 1 benchmark in 1 more fresh process, 2 in all",
            "hpml: process 2 of 2 done (* s)",
            "",
            "=* hpml benchmarks =*",
        ],
        consecutive=True,
    )
    result.stdout.fnmatch_lines(["hpml: 1 benchmark(s) measured in 2 processes (*"])
    quiet = project.bench("--hpml-processes=2", "-qq", TIMES_UNJUDGED)
    assert quiet.ret == pytest.ExitCode.OK, quiet.stdout.str()
    assert "hpml: no regression in 1 benchmark" in quiet.outlines  # the answer, not the method
    assert [line for line in quiet.outlines if "hpml: measuring" in line or " done (" in line] == []


def test_append_keeps_every_process_run_as_earlier_runs(project3: Project) -> None:
    project3.bench("--hpml-baseline=update", "--hpml-record-processes=2")
    project3.bench("--hpml-baseline=append", "--hpml-record-processes=2")
    record = project3.stored("machine")[TEST]["time"]
    assert len(record["processes"]) == 1
    assert len(record["earlier"]) == 2
    assert all(run["recorded"] and len(run["samples"]) >= 5 for run in record["earlier"])


def test_a_process_that_dies_is_named_and_the_run_judged_on_the_others(project: Project) -> None:
    project.write_tests(
        "import os\n" + WORK + f'    if os.environ.get("{RERUN_ENV}"):\n        os._exit(3)\n'
    )
    result = project.bench("--hpml-baseline=update", "--hpml-record-processes=2")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["hpml: process 2 of 2 measured nothing (exit 3*); judged on fewer processes"]
    )
    assert "processes" not in project.stored("machine")[TEST]["time"]


# WORK, where a measuring process registers an exit handler and keeps an object that says when
# the interpreter's teardown frees it.
ENDS = (
    "import atexit\nimport os\n"
    + WORK
    + "\n\ndef said(what, open=open):  # open kept: a teardown may have removed the name\n"
    + '    with open("ends.txt", "a") as out:\n'
    + '        out.write(what + "\\n")\n'
    + "\n\nclass Kept:\n    def __del__(self, said=said):\n"
    + '        said("torn down")\n'
    + f'\n\nif os.environ.get("{RERUN_ENV}"):\n'
    + "    KEPT = Kept()\n"
    + '    atexit.register(said, "exit handler")\n'
)


def test_a_measuring_process_runs_every_exit_handler_and_skips_the_teardown(
    project: Project,
) -> None:
    """Once its answer is written, a measuring process skips its terminal summary, runs the
    exit handlers (the tests' own too) and ends without freeing the modules one by one (Note
    [Cheaper processes])."""
    project.write_tests(ENDS)
    result = project.bench("--hpml-baseline=update", "--hpml-record-processes=2")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "processes" in project.stored("machine")[TEST]["time"]  # its answer was read
    assert ran(project, "ends.txt") == ["exit", "handler"]
    assert len(ran(project, "torch_imported.txt")) == 2  # two sessions ended
    assert ran(project, "summaries.txt") == [str(os.getpid())]  # this run's, in this process


def measuring_in_two(
    project: Project, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.Popen[str], int, Path]:
    """A recording pytest, its second measuring process (by pid) running, and its TMPDIR."""
    project.write_tests(WAITS)
    tmpdir = tmp_path_factory.mktemp("tmpdir")
    inner = start_pytest(project, tmpdir, BENCH_TIME, "--hpml-baseline=update", RECORD_IN_2)
    return inner, wait_for_pid(inner, project.path / "child.pid"), tmpdir


def test_ctrl_c_while_measuring_in_more_processes_stops_them_as_pytest_stops(
    project: Project, tmp_path_factory: pytest.TempPathFactory
) -> None:
    inner, child, tmpdir = measuring_in_two(project, tmp_path_factory)
    out = interrupt(inner)[0]
    assert still_running([child]) == []
    assert inner.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "KeyboardInterrupt" in out
    assert "Traceback" not in out, out  # pytest's one line, not the plugin's traceback
    assert "process 2 of 2 measured nothing (interrupted)" in out
    assert hpml_files(tmpdir) == []


def test_a_measuring_process_dies_with_a_pytest_killed_from_outside(
    project: Project, tmp_path_factory: pytest.TempPathFactory
) -> None:
    inner, child, tmpdir = measuring_in_two(project, tmp_path_factory)
    inner.send_signal(signal.SIGKILL)
    inner.communicate(timeout=60)
    assert still_running([child]) == []
    # The measuring process took its request away when it started, and answers only at its
    # end: the run it died with left no file.
    assert hpml_files(tmpdir) == []


def _request(path: Path, **fields: object) -> Path:
    """A request file as :func:`reruns.ask` writes one, made for a process of this one's parent
    (as this process is), with ``fields`` changed."""
    document = {
        "format": RERUN_FORMAT,
        "tests": ["test_inner.py::test_work"],
        "bench_time": 0.5,
        "output": str(path),
        "parent": os.getppid(),
        **fields,
    }
    path.write_text(json.dumps(document))
    return path


def test_a_rerun_takes_the_request_made_for_it_once_and_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _request(tmp_path / f"{RERUN_PREFIX}taken.json")
    monkeypatch.setenv(RERUN_ENV, str(path))
    asked = rerun_request()
    assert asked is not None
    assert asked["tests"] == ["test_inner.py::test_work"]
    assert not path.exists()  # nothing of the run left on disk while the rerun measures
    assert rerun_request() == asked  # read once: every hook of the process gets the same


# Not this process's parent, whichever that is (process 1, for a run left to init).
NOT_THE_PARENT = os.getppid() + 1


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        (
            {"parent": NOT_THE_PARENT},
            f"was made for a process that process {NOT_THE_PARENT} starts; this one's parent is",
        ),
        ({"format": "pytest-hpml-report/1"}, 'is no pytest-hpml rerun request \\(its "format"'),
        ({"output": "/etc/hosts"}, "asks for the answer in another file \\('/etc/hosts'\\)"),
        ({"tests": "test_inner.py"}, "tests is not a list of test ids"),
        ({"bench_time": "1"}, "bench_time is not a number of seconds"),
    ],
    ids=["another-parent", "no-format", "another-output", "tests", "bench-time"],
)
def test_a_request_made_for_another_process_is_a_usage_error_and_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fields: dict[str, object], said: str
) -> None:
    path = _request(tmp_path / f"{RERUN_PREFIX}other.json", **fields)
    before = path.read_bytes()
    monkeypatch.setenv(RERUN_ENV, str(path))
    with pytest.raises(pytest.UsageError, match=said) as refused:
        rerun_request()
    assert str(refused.value).startswith(
        f"{RERUN_ENV}={path}: this variable is internal to pytest-hpml"
    )
    assert path.read_bytes() == before


def test_a_pytest_that_a_test_of_a_rerun_starts_is_no_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It inherits the variable, but the rerun took the file away when it started."""
    monkeypatch.setenv(RERUN_ENV, str(tmp_path / f"{RERUN_PREFIX}taken-away.json"))
    assert rerun_request() is None


@pytest.mark.parametrize(
    "written",
    [
        b"",
        b'{"results": [',
        b"\xff\xfe",
        b"[]",
        b'{"results": [1]}',
        b'{"results": [], "failed": []}',
    ],
    ids=["empty", "half-written", "not-utf8", "a-list", "results-not-records", "failed-a-list"],
)
def test_an_answer_half_written_or_of_another_shape_is_no_answer(
    tmp_path: Path, written: bytes
) -> None:
    """The first process then says the other measured nothing (and why), never crashes."""
    path = tmp_path / f"{RERUN_PREFIX}answer.json"
    path.write_bytes(written)
    assert reruns._answer(path) is None
    assert reruns._answer(tmp_path / "never-written.json") is None
    path.write_text(json.dumps({"results": [{"test": "t", "metrics": {}}], "failed": {}}))
    assert reruns._answer(path) == {"results": [{"test": "t", "metrics": {}}], "failed": {}}


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        (["--basetemp", "/t", "-x", "tests"], ["-x", "tests"]),
        (["--basetemp=/t", "--junitxml=j.xml", "-k", "fast"], ["-k", "fast"]),
        (["-n", "2", "--dist", "load", "-q"], ["-q"]),
        (["-n2", "--benchmark-autosave", "--lf", "a.py::t"], ["a.py::t"]),
        (["--benchmark-json", "b.json", "--hpml-precision=bf16"], ["--hpml-precision=bf16"]),
    ],
)
def test_other_processes_drop_the_options_that_write_files_or_spread_tests(
    pytester: pytest.Pytester, given: list[str], kept: list[str]
) -> None:
    config = pytester.parseconfig(*given)  # pytester adds a --basetemp of its own
    xdist = ["-n0"] if config.pluginmanager.hasplugin("xdist") else []
    assert invocation.child_args(config) == kept + xdist
