"""Baseline files: merged, never half-written, never lost to xdist workers or a killed run;
broken ones reported in one line and left alone; a baseline of another machine is not used."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pytest

from pytest_hpml.storage import writer
from pytest_hpml.verdict import baselines
from tests.conftest import count_tests

if TYPE_CHECKING:
    from tests.conftest import Project

FIX = "; fix it, or delete it and re-record with --hpml-baseline=update"

# Makes the first baseline write of a run stall once its temporary file is complete, after
# saying so in ``writing``: the moment to kill it.
STALLED_WRITE = """

import contextlib
import os
import pathlib
import time

_fsync = os.fsync


def _stall(fd):
    _fsync(fd)
    pathlib.Path("writing").touch()
    time.sleep(120)


os.fsync = _stall
"""


UPDATE = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--hpml-baseline=update"]


def stored_counts(project: Project) -> dict[str, int]:
    return {test: m["n"]["value"] for test, m in project.stored("portable").items()}


def temporary_files(project: Project) -> list[Path]:
    return sorted(project.baseline_dir.glob(".*.tmp"))


@contextlib.contextmanager
def running(command: list[str], cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process that is killed at the latest when the block ends."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def replaced(path: Path) -> Callable[[], bool]:
    """Whether ``path`` was replaced (or created) since this call."""

    def stamp() -> tuple[int, int] | None:
        return (path.stat().st_ino, path.stat().st_mtime_ns) if path.exists() else None

    before = stamp()
    return lambda: stamp() not in (before, None)


def kill_when(process: subprocess.Popen[bytes], ready: Callable[[], bool], delay: float) -> None:
    """SIGKILL ``process`` ``delay`` seconds after ``ready()`` (polled) turns true."""
    deadline = time.monotonic() + 60
    while not ready():
        assert process.poll() is None, "the process ended before it was ready"
        assert time.monotonic() < deadline, "the process was never ready"
        time.sleep(0.002)
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait()


def test_update_of_some_tests_keeps_the_entries_of_the_others(project: Project) -> None:
    project.write_tests(count_tests(2))
    project.run("--hpml-baseline=update").assert_outcomes(passed=2)
    project.monkeypatch.setenv("COUNT", "2")
    project.run("--hpml-baseline=update", "-k", "test_0").assert_outcomes(passed=1, deselected=1)
    assert stored_counts(project) == {"test_inner.py::test_0": 2, "test_inner.py::test_1": 1}


def test_merge_keeps_the_metrics_not_updated(tmp_path: Path) -> None:
    path = tmp_path / "portable-torch2.0.json"
    baselines.merge(path, {"t": {"a": {"value": 1}, "b": {"value": 2}}}, {})
    baselines.merge(path, {"t": {"a": {"value": 3}}, "u": {"a": {"value": 4}}}, {})
    entries = baselines.load(path)["entries"]
    assert entries == {"t": {"a": {"value": 3}, "b": {"value": 2}}, "u": {"a": {"value": 4}}}


def test_merge_leaves_nothing_but_the_baseline_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    path = tmp_path / "baselines" / "portable-torch2.0.json"
    baselines.merge(path, {"t": {"a": {"value": 1}}}, {})
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert list(temp.iterdir()) == []  # the lock is on the directory, not in a lock file


def test_xdist_workers_lose_no_entry(project: Project) -> None:
    project.write_tests(count_tests(6, timed=True))
    result = project.run_subprocess("-n", "2", "--hpml-baseline=update", "--hpml-bench-time=0.05")
    result.assert_outcomes(passed=6)
    assert stored_counts(project) == {f"test_inner.py::test_{i}": 1 for i in range(6)}


def test_write_killed_after_its_temporary_file_leaves_the_old_baseline(project: Project) -> None:
    project.write_tests(count_tests(1))
    project.run("--hpml-baseline=update").assert_outcomes(passed=1)
    before = project.baseline_files()["portable"].read_bytes()
    (project.path / "conftest.py").write_text(
        (project.path / "conftest.py").read_text() + STALLED_WRITE
    )
    project.monkeypatch.setenv("COUNT", "2")
    with running(UPDATE, project.path) as run:
        kill_when(run, (project.path / "writing").exists, 0)
    assert project.baseline_files()["portable"].read_bytes() == before
    assert len(temporary_files(project)) == 1  # killed mid-write: nothing cleaned it up


def test_next_update_removes_the_temporary_file_of_a_killed_write(project: Project) -> None:
    project.write_tests(count_tests(1))
    project.run("--hpml-baseline=update")
    stale = project.baseline_files()["portable"]
    stale = stale.with_name(f".{stale.name}.abc123.tmp")
    stale.write_text('{"entries": {')
    project.monkeypatch.setenv("COUNT", "3")
    project.run("--hpml-baseline=update")
    assert stored_counts(project) == {"test_inner.py::test_0": 3}
    assert temporary_files(project) == []


# Merges into the baseline file argv[1] forever, a bigger file each time: killed at any moment,
# it is most likely writing.
WRITER = """
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from pytest_hpml.verdict.baselines import merge

for i in range(10**9):
    merge(Path(sys.argv[1]), {f"test_{os.getpid()}_{i}": {"time": {"samples": [1.0] * 99}}}, {})
"""


def test_writes_killed_at_any_moment_leave_a_valid_baseline(tmp_path: Path) -> None:
    path = tmp_path / "machine-x.json"
    for delay in (0.0, 0.01, 0.02, 0.05, 0.1, 0.2):
        with running([sys.executable, "-c", WRITER, str(path)], tmp_path) as writer:
            kill_when(writer, replaced(path), delay)
        assert baselines.load(path)["entries"]
        assert len(list(tmp_path.glob(".*.tmp"))) <= 1  # at most the one being written


def test_failed_write_leaves_the_old_content(tmp_path: Path) -> None:
    path = tmp_path / "machine-x.json"
    path.write_text("old\n")
    with pytest.raises(UnicodeEncodeError):
        writer.replace(path, "new \ud800")  # a lone surrogate cannot be encoded
    assert path.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [path]


BROKEN = {
    "truncated": (
        lambda text: text[: len(text) // 2],
        "is not valid JSON (* line * column *)" + FIX,
    ),
    "entries-a-list": (
        lambda text: '{"format": "pytest-hpml-baselines/1", "entries": []}',
        "is not a pytest-hpml baseline (entries is not an object)" + FIX,
    ),
    "not-an-object": (
        lambda text: "[1, 2]",
        "is not a pytest-hpml baseline (its top level *)" + FIX,
    ),
}


@pytest.fixture(params=sorted(BROKEN))
def broken(request: pytest.FixtureRequest, project: Project) -> tuple[Path, str]:
    """A project with a test recording to a broken portable file and one plain test; the file
    and the pattern of the error about it."""
    project.write_tests(count_tests(1) + "\n\ndef test_plain():\n    pass\n")
    project.run("--hpml-baseline=update").assert_outcomes(passed=2)
    path = project.baseline_files()["portable"]
    corrupt, message = BROKEN[request.param]
    path.write_text(corrupt(path.read_text()))
    return path, f"hpml: ERROR baseline file {path} {message}"


def test_broken_baseline_is_one_error_line_and_fails_the_session(
    project: Project, broken: tuple[Path, str]
) -> None:
    _, error = broken
    result = project.run()
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([error])
    assert len(project.hpml_errors(result)) == 1


def test_broken_baseline_is_not_overwritten_by_update(
    project: Project, broken: tuple[Path, str]
) -> None:
    path, error = broken
    content = path.read_bytes()
    result = project.run("--hpml-baseline=update")
    result.assert_outcomes(passed=2)
    assert path.read_bytes() == content
    result.stdout.fnmatch_lines([error + " (not overwritten); the measurements are kept in *"])
    kept = re.search(r"the measurements are kept in (\S+)", result.stdout.str()).group(1)
    assert json.loads(Path(kept).read_text())["results"]  # nothing measured is lost
    Path(kept).unlink()


def test_a_baseline_recorded_under_another_machine_name_is_found_by_its_id(
    project: Project,
) -> None:
    project.write_tests(count_tests(1, portable=False))
    project.run("--hpml-baseline=update", "--hpml-machine=ci box").assert_outcomes(passed=1)
    assert project.baseline_files()["machine"].name.startswith("machine-ci-box-")
    project.monkeypatch.setenv("COUNT", "2")
    result = project.run("--hpml-machine=laptop")  # the name labels the machine, nothing more
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert project.verdicts(result) == {("test_inner.py::test_0", "n"): "regressed"}
    assert len(project.baseline_files()) == 1


def test_baseline_of_another_fingerprint_is_not_used(project: Project) -> None:
    project.write_tests(count_tests(1, portable=False))
    project.run("--hpml-baseline=update").assert_outcomes(passed=1)
    recorded = project.baseline_files()["machine"]
    name, _, fingerprint_id = recorded.stem.rpartition("-")
    os.rename(recorded, recorded.with_name(f"{name}-{'0' * len(fingerprint_id)}.json"))
    project.monkeypatch.setenv("COUNT", "2")  # would regress against the recorded baseline
    result = project.run()
    assert result.ret == pytest.ExitCode.OK
    assert project.verdicts(result) == {("test_inner.py::test_0", "n"): "no-baseline"}


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("samples", "NaN", "samples must be a list of positive finite numbers"),
        ("samples", "Infinity", "samples must be a list of positive finite numbers"),
        ("samples", '"fast"', "samples must be a list of positive finite numbers"),
        ("reference", "0.0", "reference must be a list of positive finite numbers"),
        ("value", "NaN", "value nan is not a finite number"),
    ],
)
def test_an_unusable_stored_value_is_named_and_never_judged(
    project: Project, field: str, value: str, problem: str
) -> None:
    project.write_tests("import torch  # noqa: F401\n" + count_tests(1, portable=False, timed=True))
    project.bench("--hpml-baseline=update")
    path = project.baseline_files()["machine"]  # the count is not portable here
    data = json.loads(path.read_text())
    metric = "time" if field != "value" else "n"
    record = data["entries"]["test_inner.py::test_0"][metric]
    if field == "value":
        record["value"] = "__BAD__"
    else:
        record[field] = [*record[field][:-1], "__BAD__"]
    path.write_text(json.dumps(data).replace('"__BAD__"', value))
    result = project.bench()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    [error] = project.hpml_errors(result)
    assert f'entries["test_inner.py::test_0"]["{metric}"]: {problem}' in error
    assert project.verdicts(result)[("test_inner.py::test_0", metric)] == "no-baseline"
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
