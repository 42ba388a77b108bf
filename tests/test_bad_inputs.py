"""Bad inputs, as a careless or hostile user gives them: each gives one clear message and the
exit status it names, prints no traceback, and loses or changes no file.

The table is by kind of input (options, marker and fixture arguments, files read, files
written, internal variables, the distributed environment, what reaches a terminal); each row
stands for its kind, and the mechanism that handles it handles its kind. A row: files to write
first, the command (pytest's arguments, or ``pytest-hpml ...``), the environment, the exit
status, a pattern the output must match, and the files that may change (every other file
written first must be left byte for byte and mode for mode as it was).
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_hpml.hardware import fingerprint
from pytest_hpml.hardware.devices import Hardware
from pytest_hpml.verdict.baselines import machine_path, portable_path

USAGE = int(pytest.ExitCode.USAGE_ERROR)  # 4
FAILED = int(pytest.ExitCode.TESTS_FAILED)  # 1
CLI_ERROR = 2  # pytest-hpml's command: an unreadable or unwritable file

# An inner benchmark that needs no torch and measures in a fraction of a second.
BENCH = """
def test_sum(benchmark):
    benchmark(sum, range(100))
"""


@dataclass(frozen=True)
class Case:
    """One bad input and what it must give."""

    id: str
    args: tuple[str, ...]  # pytest's arguments; ("pytest-hpml", ...) runs the command
    expect: str  # a regular expression the output (stdout and stderr) must match
    exit: int
    files: Mapping[str, str | bytes] = field(default_factory=dict)  # written first
    env: Mapping[str, str] = field(default_factory=dict)
    changed: tuple[str, ...] = ()  # files written first that may change
    modes: Mapping[str, int] = field(default_factory=dict)  # chmod after writing
    links: Mapping[str, str] = field(default_factory=dict)  # symbolic links: name -> target
    cwd: str = ""  # the directory the command runs in, relative to the test's directory
    fifos: tuple[str, ...] = ()  # named pipes to make first
    made: tuple[str, ...] = ()  # files that must exist afterwards


def baseline_file(entries: object) -> str:
    return json.dumps({"format": "pytest-hpml-baselines/1", "entries": entries})


# This machine's baseline files, as the inner runs name them.
_HERE = fingerprint.current(Hardware())
MACHINE = machine_path(Path("baselines"), _HERE).as_posix()
PORTABLE = portable_path(Path("baselines"), _HERE).as_posix()
# A stored time record of BENCH's test, as a run records it.
TIME = {"kind": "time", "unit": "s", "samples": [7.4e-07, 6.6e-07], "reference": []}
# An inner benchmark whose function fails.
FAILING = """
def test_fails(benchmark):
    fail = lambda: 1 / 0
    benchmark(fail)
"""
# Inner tests recording a portable count (no timing, no torch).
COUNT = """
def test_count(benchmark):
    benchmark.record("n", 1, portable=True)
"""


# --- options, ini keys and environment variables ---------------------------------------------
OPTIONS: list[Case] = []

# --- marker and fixture arguments (indirect parametrization included) -------------------------
ARGUMENTS: list[Case] = []

# --- files read: baselines, reports ------------------------------------------------------------
READ: list[Case] = [
    Case(
        "baseline-not-utf8-compare",
        ("--hpml-benchmarks",),
        r"hpml: ERROR baseline file \S+ is not UTF-8 text \(byte 0xff at offset 1, line 1\)",
        FAILED,
        files={"test_count.py": COUNT, PORTABLE: b"{\xff}"},
    ),
    Case(
        "baseline-not-utf8-update-keeps-measurements",
        ("--hpml-baseline=update",),
        r"is not UTF-8 text .* \(not overwritten\); the measurements are kept in /\S+\.json",
        FAILED,
        files={"test_count.py": COUNT, PORTABLE: b"\xfe\xff"},
    ),
    Case(
        "baseline-nested-too-deep",
        ("--hpml-benchmarks",),
        r"baseline file \S+ is nested deeper than 64 levels",
        FAILED,
        files={"test_count.py": COUNT, PORTABLE: "[" * 100_000 + "]" * 100_000},
    ),
    Case(
        "baseline-field-path-named",
        ("--hpml-benchmarks",),
        r'entries\["test_count.py::test_count"\].n: value \'1\' is not a finite number; not used',
        FAILED,
        files={
            "test_count.py": COUNT,
            PORTABLE: baseline_file(
                {"test_count.py::test_count": {"n": {"kind": "count", "unit": "", "value": "1"}}}
            ),
        },
    ),
    Case(
        "baseline-without-samples-is-unusable",
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"time: samples is empty: a baseline without samples cannot be judged against",
        FAILED,
        files={
            "test_bench.py": BENCH,
            MACHINE: baseline_file({"test_bench.py::test_sum": {"time": {**TIME, "samples": []}}}),
        },
    ),
    Case(
        "show-a-file-not-utf8",
        ("pytest-hpml", "show", PORTABLE),
        r"^pytest-hpml: error: baseline file \S+ is not UTF-8 text",
        CLI_ERROR,
        files={PORTABLE: b"\x80"},
    ),
    Case(
        "list-skips-a-bad-file-and-lists-the-rest",
        ("pytest-hpml", "list", "--dir", "baselines"),
        r"(?s)machine-good-1\.json +- +- +1 +1.*is not UTF-8 text",
        CLI_ERROR,
        files={
            "baselines/machine-bad-0.json": b"\xff",
            "baselines/machine-good-1.json": baseline_file({"t": {"time": TIME}}),
        },
    ),
    Case(
        "render-a-report-whose-fingerprint-is-a-number",
        ("pytest-hpml", "render", "r.json", "--md", "r.md"),
        r"^pytest-hpml: error: r.json is not a pytest-hpml report "
        r"\(fingerprint is int, not an object\)",
        CLI_ERROR,
        files={
            "r.json": json.dumps(
                {"format": "pytest-hpml-report/1", "fingerprint": 7, "results": []}
            )
        },
    ),
    Case(
        "show-a-directory",
        ("pytest-hpml", "show", "baselines"),
        r"^pytest-hpml: error: baselines is a directory",
        CLI_ERROR,
        files={"baselines/x.txt": "x"},
    ),
]

# --- files written: reports, baselines, the command's outputs ----------------------------------
WRITTEN: list[Case] = [
    Case(
        "report-onto-a-baseline-file",
        ("--hpml-benchmarks", f"--hpml-report={PORTABLE}"),
        rf"--hpml-report: {PORTABLE} is a baseline file; a report never replaces one",
        USAGE,
        files={"test_count.py": COUNT, PORTABLE: baseline_file({})},
    ),
    Case(
        "two-reports-one-path",
        ("--hpml-report=r.json", "--hpml-report-md=r.json"),
        r"--hpml-report-md: r.json is also --hpml-report's file; each report needs a path",
        USAGE,
        files={"test_count.py": COUNT},
    ),
    Case(
        "report-onto-a-file-that-is-no-report",
        ("--hpml-report=settings.json",),
        r"--hpml-report: settings.json exists and is not a pytest-hpml JSON report",
        USAGE,
        files={"test_count.py": COUNT, "settings.json": '{"keep": true}'},
    ),
    Case(
        "markdown-onto-a-readme",
        ("--hpml-report-md=README.md",),
        r"--hpml-report-md: README.md exists and is not a pytest-hpml Markdown summary",
        USAGE,
        files={"test_count.py": COUNT, "README.md": "# My project\n"},
    ),
    Case(
        "read-only-report",
        ("--hpml-report=r.json",),
        r"--hpml-report: r.json is read-only \(mode 0444\); pytest-hpml does not replace it",
        USAGE,
        files={"test_count.py": COUNT, "r.json": ""},
        modes={"r.json": 0o444},
    ),
    Case(
        "read-only-baseline-on-update",
        ("--hpml-baseline=update",),
        rf"ERROR baseline file \S+{PORTABLE} is read-only \(mode 0444\).*"
        r"the measurements are kept in /\S+\.json",
        FAILED,
        files={"test_count.py": COUNT, PORTABLE: baseline_file({})},
        modes={PORTABLE: 0o444},
    ),
    Case(
        "baseline-directory-linked-out-of-the-project",
        ("--hpml-baseline=update",),
        r"--hpml-baseline-dir: baselines leads through a link to \S+/elsewhere, outside the "
        r"project",
        USAGE,
        files={
            "project/pytest.ini": "[pytest]\n",
            "project/test_count.py": COUNT,
            "elsewhere/x": "",
        },
        links={"project/baselines": "../elsewhere"},
        cwd="project",
    ),
    Case(
        "markdown-to-stdout-keeps-the-log",
        ("--hpml-benchmarks", "--hpml-report-md=/dev/stdout"),
        r"(?s)collected 1 item.*### pytest-hpml benchmarks: .* 1 passed",
        0,
        files={"test_count.py": COUNT},
    ),
    Case(
        "report-onto-a-full-device-keeps-measurements",
        ("--hpml-report=/dev/full",),
        r"ERROR cannot write /dev/full: No space left on device; the measurements are kept in "
        r"/\S+\.json",
        FAILED,
        files={"test_count.py": COUNT},
    ),
    Case(
        "report-onto-a-fifo-nobody-reads",
        ("--hpml-report-html=/dev/full", "--hpml-report=fifo"),
        r"fifo is a FIFO that nothing reads; the measurements are kept in /\S+\.json",
        FAILED,
        files={"test_count.py": COUNT},
        fifos=("fifo",),
    ),
    Case(
        "reports-asked-for-when-the-only-benchmark-failed",
        ("--hpml-report=r.json", "--hpml-report-md=r.md", "--tb=short"),
        r"(?s)test_fails.py:4: in test_fails\n +benchmark\(fail\)\n.*ZeroDivisionError.* 1 failed",
        FAILED,
        files={"test_fails.py": FAILING},
        made=("r.json", "r.md"),
    ),
    Case(
        "xdist-recording-pure-python-benchmarks-says-why-nothing",
        ("-n", "2", "--hpml-baseline=update"),
        r"hpml: times were not measured: under pytest-xdist, pytest-benchmark turns timing off "
        r".*; nothing was measured",
        0,
        files={"test_bench.py": BENCH},
    ),
    Case(
        "render-onto-its-own-report",
        ("pytest-hpml", "render", "r.json", "--md", "r.json"),
        r"^pytest-hpml: error: --md r.json is also the report read; name a file of its own",
        CLI_ERROR,
        files={
            "r.json": json.dumps(
                {"format": "pytest-hpml-report/1", "fingerprint": {}, "results": []}
            )
        },
    ),
]

# --- internal variables and the distributed environment ---------------------------------------
ENVIRONMENT: list[Case] = []

# --- what reaches a terminal, a Markdown or an HTML page ---------------------------------------
SHOWN: list[Case] = []

CASES = [*OPTIONS, *ARGUMENTS, *READ, *WRITTEN, *ENVIRONMENT, *SHOWN]


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every regular file under ``root``: its bytes and permission bits."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
            found[path.relative_to(root).as_posix()] = (
                path.read_bytes(),
                stat.S_IMODE(path.stat().st_mode),
            )
    return found


def run_case(pytester: pytest.Pytester, case: Case) -> pytest.RunResult:
    if case.args and case.args[0] == "pytest-hpml":
        return pytester.run(sys.executable, "-m", "pytest_hpml", *case.args[1:])
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *case.args)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, case: Case) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    for name in [n for n in os.environ if n.startswith("HPML_")]:
        monkeypatch.delenv(name)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    for name, content in case.files.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    for name, mode in case.modes.items():
        (pytester.path / name).chmod(mode)
    for name, target in case.links.items():
        (pytester.path / name).symlink_to(target)
    for name in case.fifos:
        os.mkfifo(pytester.path / name)
    before = snapshot(pytester.path)
    monkeypatch.chdir(pytester.path / case.cwd)
    result = run_case(pytester, case)
    output = "\n".join([*result.outlines, *result.errlines])
    assert result.ret == case.exit, output
    assert re.search(case.expect, output), f"no {case.expect!r} in:\n{output}"
    assert "Traceback" not in output, output
    assert "INTERNALERROR" not in output, output
    after = snapshot(pytester.path)
    assert [name for name in case.made if name not in after] == []
    for name, (content, mode) in before.items():
        if name in case.changed:
            continue
        assert name in after, f"{name} was removed"
        assert after[name][0] == content, f"{name} was changed"
        assert after[name][1] == mode, f"{name}'s mode went from {mode:o} to {after[name][1]:o}"


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_a_report_written_to_a_device_leaves_it_a_device(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    """Renamed over, /dev/null would become a regular file for every process of the machine
    (as root, which CI containers run as): the writer writes devices in place."""
    monkeypatch.setenv("HPML_BENCHMARKS", "1")
    pytester.makepyfile(test_count=COUNT)
    before = os.stat(device)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--hpml-report={device}")
    after = os.stat(device)
    assert stat.S_ISCHR(after.st_mode)
    assert after.st_rdev == before.st_rdev
    assert result.ret == (FAILED if device == "/dev/full" else 0)


def test_appending_to_an_unusable_record_keeps_file_and_measurements(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored time whose earlier runs are not a list: appending to it said "recorded" and the
    next comparison rejected the file; now the file is left as it was, the run fails naming
    the field, and what it measured is kept."""
    monkeypatch.setenv("HPML_RECORD_PROCESSES", "1")
    pytester.makepyfile(test_bench=BENCH)
    args = ("-p", "no:cacheprovider", "--hpml-bench-time=0.2")
    assert pytester.runpytest_subprocess(*args, "--hpml-baseline=update").ret == 0
    path = pytester.path / MACHINE
    data = json.loads(path.read_text())
    data["entries"]["test_bench.py::test_sum"]["time"]["earlier"] = {"not": "a list"}
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    result = pytester.runpytest_subprocess(*args, "--hpml-baseline=append")
    assert result.ret == FAILED
    said = re.escape(
        ': entries["test_bench.py::test_sum"].time: processes and earlier must be lists of '
        "process runs: earlier is not a list; nothing can be appended to it"
    )
    kept = r".*\(not overwritten\); the measurements are kept in /\S+\.json"
    assert re.search(f"hpml: ERROR baseline file \\S+{said}{kept}", result.stdout.str())
    assert path.read_bytes() == before
