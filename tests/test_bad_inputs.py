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
OPTIONS: list[Case] = [
    # blank from each source: unset, and said (Note [Blank values])
    Case(
        "blank-variable-is-unset-and-said",
        (),
        r"PytestConfigWarning: HPML_DEVICE is blank: treated as unset \(default auto\)",
        0,
        files={"test_count.py": COUNT},
        env={"HPML_DEVICE": " \t ", "HPML_BENCHMARKS": "1"},
    ),
    Case(
        "blank-report-flag-writes-nothing-and-says-so",
        ("--hpml-benchmarks", "--hpml-report="),
        r"PytestConfigWarning: --hpml-report is blank: treated as unset \(default: none\)",
        0,
        files={"test_count.py": COUNT},
    ),
    Case(
        "blank-ini-baseline-dir-records-in-the-default",
        ("--hpml-baseline=update",),
        r"ini hpml_baseline_dir is blank: treated as unset \(default baselines\)",
        0,
        files={"pytest.ini": "[pytest]\nhpml_baseline_dir =\n", "test_count.py": COUNT},
        made=(PORTABLE,),
    ),
    Case(
        "blank-toml-value-is-unset-and-said",
        ("--hpml-benchmarks",),
        r"ini hpml_precision is blank: treated as unset \(default fp32\)",
        0,
        files={
            "pyproject.toml": '[tool.pytest.ini_options]\nhpml_precision = "  "\n',
            "test_count.py": COUNT,
        },
    ),
    Case(
        "blank-under-warnings-as-errors",
        ("-W", "error"),
        r"ERROR: HPML_SEED is blank: treated as unset \(default 0\); an error under this run's "
        r"warning filters",
        USAGE,
        env={"HPML_SEED": ""},
    ),
    Case(
        "blank-against-with-pairs",
        ("--hpml-against= ", "--hpml-pairs=3"),
        r"ERROR: --hpml-pairs applies only with --hpml-against, which is not given; give "
        r"--hpml-against, or drop --hpml-pairs",
        USAGE,
    ),
    Case(
        "benchmark-disable-while-recording",  # recorded nothing, said nothing
        ("--benchmark-disable", "--hpml-baseline=update"),
        r"ERROR: --benchmark-disable times nothing, but --hpml-baseline=update records "
        r"baselines: nothing would be measured",
        USAGE,
        files={"test_count.py": COUNT},
    ),
    # options that work only with another
    Case(
        "against-python-without-against",
        (),
        r"ERROR: HPML_AGAINST_PYTHON applies only with --hpml-against, which is not given; give "
        r"--hpml-against, or unset HPML_AGAINST_PYTHON",
        USAGE,
        env={"HPML_AGAINST_PYTHON": "/nonexistent"},
    ),
    Case(
        "benchmark-options-while-benchmarks-are-off",
        ("--hpml-baseline=update", "--hpml-report=r.json"),
        r"ERROR: --hpml-baseline is an option of pytest-hpml's benchmarks, but HPML_BENCHMARKS "
        r"turned them off; drop --hpml-baseline, or turn them on with --hpml-benchmarks",
        USAGE,
        files={"test_count.py": COUNT},
        env={"HPML_BENCHMARKS": "0"},
    ),
    Case(
        "hpml-benchmarks-without-pytest-benchmark",
        ("-p", "no:benchmark", "--hpml-benchmarks"),
        r"ERROR: pytest-benchmark is disabled \(-p no:benchmark\), but --hpml-benchmarks asks "
        r"for pytest-hpml's benchmarks, which measure with its benchmark fixture; drop one",
        USAGE,
        files={"test_bench.py": BENCH},
    ),
    # counts that crash the process or are no count
    Case(
        "threads-that-abort-libgomp",
        ("--hpml-threads=20000",),
        r"argument --hpml-threads: expected auto or a positive number of threads "
        r"\(at most 1024\), got '20000'",
        USAGE,
    ),
    Case(
        "more-digits-than-int-reads",
        (),
        r"ERROR: HPML_PAIRS=9{60}\.\.\. \(1000 characters\): expected 2 to 32 pairs, got '9+'",
        USAGE,
        env={"HPML_PAIRS": "9" * 1000, "PYTHONINTMAXSTRDIGITS": "640"},  # int() refuses 641
    ),
    # text: pasted, look-alike, controlling the terminal
    Case(
        "a-pasted-file-as-a-value",
        (),
        r"ERROR: ini hpml_machine = x{60}\.\.\. \(5000 characters\) \(\S+pytest.ini\): a value "
        r"of 5000 characters; at most 4096",
        USAGE,
        files={"pytest.ini": "[pytest]\nhpml_machine = " + "x" * 5000 + "\n"},
    ),
    Case(
        "fullwidth-device",
        ("--hpml-device=\uff43\uff50\uff55",),
        r"argument --hpml-device: unknown device '\uff43\uff50\uff55'; choose from auto, cpu",
        USAGE,
    ),
    Case(
        "control-characters-in-a-name",
        (),
        r"ERROR: HPML_MACHINE='box\\x1b\]0;x\\x07': the value contains the control character "
        r"'\\x1b'; remove it",
        USAGE,
        env={"HPML_MACHINE": "box\x1b]0;x\x07"},
    ),
    # numbers: bounded before int() reads them, in ASCII digits, shown cut short
    Case(
        "device-index-of-more-digits-than-int-reads",
        (),
        r"ERROR: HPML_DEVICE=cuda:9{55}\.\.\. \(1005 characters\): device 'cuda:9{55}'\.\.\. "
        r"\(1005 characters\): torch numbers devices from 0 to 127",
        USAGE,
        env={"HPML_DEVICE": "cuda:" + "9" * 1000, "PYTHONINTMAXSTRDIGITS": "640"},
    ),
    Case(
        "seed-of-more-digits-than-int-reads",
        ("--hpml-seed=" + "1" * 700,),
        r"(?m)argument --hpml-seed: seed must be in \[0, 2\*\*32\), got 1{60}\.\.\. "
        r"\(700 characters\)$",
        USAGE,
        env={"PYTHONINTMAXSTRDIGITS": "640"},
    ),
    Case(
        "digit-of-another-script",
        ("--hpml-loader-workers=\u0663",),
        r"argument --hpml-loader-workers: unknown worker count '\u0663'; .*; '\u0663' is "
        r"ARABIC-INDIC DIGIT THREE, not ASCII",
        USAGE,
    ),
    Case(
        "fullwidth-seed",
        (),
        r"ERROR: HPML_SEED=\uff11\uff12: seed must be an integer, got '\uff11\uff12'; '\uff11' is "
        r"FULLWIDTH DIGIT ONE, not ASCII",
        USAGE,
        env={"HPML_SEED": "\uff11\uff12"},
    ),
    Case(
        "backend-with-an-empty-mode",
        ("--hpml-backend=inductor:",),
        r"argument --hpml-backend: invalid backend 'inductor:': '' is no mode of inductor",
        USAGE,
    ),
    # a value that would be ignored: a typo of a variable, a TOML list
    Case(
        "variable-that-is-no-option",
        (),
        r"PytestConfigWarning: HPML_TRESHOLD is no option of pytest-hpml and is ignored; did you "
        r"mean HPML_THRESHOLD\?",
        0,
        files={"test_plain.py": "def test_plain():\n    pass\n"},
        env={"HPML_TRESHOLD": "0.5"},
    ),
    Case(
        "toml-list",
        (),
        r"ERROR: ini hpml_precision = \['fp32', 'bf16'\] \(\S+pyproject.toml\): a TOML list, where "
        r'pytest-hpml reads a string; write hpml_precision = "fp32,bf16"',
        USAGE,
        files={"pyproject.toml": '[tool.pytest.ini_options]\nhpml_precision = ["fp32","bf16"]\n'},
    ),
    # paths each side of --hpml-against would put first on sys.path
    Case(
        "against-paths-that-do-not-exist",
        ("--hpml-against=HEAD", "--hpml-against-paths=nonexistent"),
        r"ERROR: --hpml-against-paths=nonexistent: nonexistent is no directory of the rootdir "
        r"\S+; name directories of the rootdir, relative to it",
        USAGE,
        files={"test_count.py": COUNT},
    ),
    Case(
        "against-paths-outside-the-rootdir",
        ("--hpml-against=HEAD", "--hpml-against-paths=/usr"),
        r"ERROR: --hpml-against-paths=/usr: /usr lies outside the rootdir \S+, the same for both "
        r"sides",
        USAGE,
        files={"test_count.py": COUNT},
    ),
]

# --- marker and fixture arguments (indirect parametrization included) -------------------------
ARGUMENTS: list[Case] = [
    Case(
        "indirect-parameters-read-as-their-options",
        (),
        r"(?s)test_x.py::test_precision\[fp8\]: fixture precision, parametrized with 'fp8': "
        r"unknown precision 'fp8'; choose from fp32, tf32, fp16, bf16\n"
        r".*test_x.py::test_workers\[-1\]: fixture num_workers, parametrized with -1: unknown "
        r"worker count '-1'; choose from integers >= 0 or auto\n"
        r".*test_x.py::test_device\[tpu\]: fixture device, parametrized with 'tpu': unknown "
        r"device 'tpu'; choose from auto, cpu, cuda, cuda:N, mps\n.* 3 errors",
        FAILED,
        files={
            "test_x.py": "import pytest\n\n\n"
            '@pytest.mark.parametrize("precision", ["fp8"], indirect=True)\n'
            "def test_precision(precision):\n    pass\n\n\n"
            '@pytest.mark.parametrize("num_workers", [-1], indirect=True)\n'
            "def test_workers(num_workers):\n    pass\n\n\n"
            '@pytest.mark.parametrize("device", ["tpu"], indirect=True)\n'
            "def test_device(device):\n    pass\n"
        },
    ),
    Case(
        "tolerance-of-a-count-the-benchmark-does-not-record",
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"hpml: ERROR test_bench.py::test_sum: hpml_bench\(tolerance=\.\.\.\) names "
        r"'no_such_counter', which this benchmark does not count; it counts 'instructions'",
        FAILED,
        files={
            "test_bench.py": "import pytest\n\n\n"
            '@pytest.mark.hpml_bench(tolerance={"no_such_counter": 0.01})\n' + BENCH.lstrip()
        },
    ),
    Case(
        "hpml-bench-mark-on-a-test-that-benchmarks-nothing",
        ("--hpml-benchmarks",),
        r"@pytest.mark.hpml_bench on 1 test\(s\) \(test_x.py::test_plain, \.\.\.\) has no "
        r"effect: no test it marks asks for the benchmark fixture",
        0,
        files={
            "test_x.py": "import pytest\n\n\n"
            "@pytest.mark.hpml_bench(threshold=0.5)\ndef test_plain():\n    pass\n"
        },
    ),
    Case(
        "distributed-timeout-beyond-the-options-bound",
        (),
        r"test_x.py::test_ranks: wrong @pytest.mark.distributed: timeout: expected seconds in "
        r"\(0, 3600\], got '1e\+15', as --hpml-dist-timeout",
        FAILED,
        files={
            "test_x.py": "import pytest\n\n\n"
            "@pytest.mark.distributed(timeout=1e15)\ndef test_ranks():\n    pass\n"
        },
    ),
    Case(
        "a-failing-benchmark-shows-the-users-frames-only",
        ("--hpml-benchmarks",),
        r"(?s)\A(?!.*pytest_hpml/bench/).*>   fail = lambda: 1 / 0\n.*ZeroDivisionError",
        FAILED,
        files={"test_fails.py": FAILING},
    ),
]


# --- the benchmark's own calls: record, expect, expect_change ---------------------------------
def calling(*lines: str) -> dict[str, str]:
    """An inner test file whose one test makes these calls of its benchmark (needs no torch)."""
    return {"test_calls.py": "def test_calls(benchmark):\n" + "".join(f"    {c}\n" for c in lines)}


CALLS: list[Case] = [
    Case(
        "record-a-name-that-is-no-str",  # was an INTERNALERROR in the verdict's counter names
        ("--hpml-benchmarks",),
        r"TypeError: record\(name=None\): give a metric's name: a non-empty str without control "
        r"characters or blanks around it",
        FAILED,
        files=calling("benchmark.record(None, 1)"),
    ),
    Case(
        "record-a-name-with-control-characters",  # refused, and shown escaped
        ("--hpml-benchmarks",),
        r"(?s)\A(?!.*[\x1b\x07]).*ValueError: record\(name='n\\x1b\]0;x\\x07'\): it contains "
        r"the control character '\\x1b'; give a metric's name",
        FAILED,
        files=calling("benchmark.record('n\\x1b]0;x\\x07', 1)"),
    ),
    Case(
        "record-a-value-that-is-no-number",  # was a traceback from the terminal summary
        ("--hpml-benchmarks",),
        r"TypeError: record\(value='abc'\): give a finite int or float \(not a bool\)",
        FAILED,
        files=calling("benchmark.record('n', 'abc')"),
    ),
    Case(
        "record-nan-is-not-recorded",  # was NaN written into the baseline, rejected when read
        ("--hpml-baseline=update",),
        r"ValueError: record\(value=nan\): give a finite int or float",
        FAILED,
        files=calling("benchmark.record('n', float('nan'))"),
    ),
    Case(
        "record-a-metric-the-benchmark-measures",  # replaced the measured time unsaid
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"ValueError: record\(name='time'\): benchmark\(\.\.\.\) gave 'time' already; a "
        r"metric has one value: give this one another name",
        FAILED,
        files=calling("benchmark(sum, range(100))", "benchmark.record('time', 1)"),
    ),
    Case(
        "expect-change-an-amount-beyond-a-float",  # was an INTERNALERROR where it was applied
        ("--hpml-benchmarks",),
        r"TypeError: expect_change\(time='\+9{58}\.\.\. \(404 characters\)\): give how much "
        r"it may grow, as '\+15%' \(relative\) or '\+2' \(per call\), a finite number",
        FAILED,
        files=calling("benchmark.expect_change('r', time='+' + '9' * 400 + '%')"),
    ),
    Case(
        "expect-change-a-time-per-call",  # '+15' was read as 15 s a call: 40,000x accepted
        ("--hpml-benchmarks",),
        r"ValueError: expect_change\(time='\+15'\): a time grows by a percent, as '\+15%'; "
        r"an amount per call \('\+2'\) is for counts",
        FAILED,
        files=calling("benchmark.expect_change('r', time='+15')"),
    ),
    Case(
        "expect-change-of-nothing",  # '+0%' accepted no change
        ("--hpml-benchmarks",),
        r"ValueError: expect_change\(ops='\+0%'\): accepts no change; give how much it may "
        r"grow, as '\+15%' or '\+2' per call, or drop it",
        FAILED,
        files=calling("benchmark.expect_change('r', ops='+0%')"),
    ),
    Case(
        "expect-change-twice-for-a-metric",  # the second replaced the first unsaid
        ("--hpml-benchmarks",),
        r"ValueError: expect_change\(time='\+50%'\): an earlier expect_change accepts \+5% "
        r"for 'time' \('r'\); accept one amount per metric",
        FAILED,
        files=calling(
            "benchmark.expect_change('r', time='+5%')",
            "benchmark.expect_change('r2', time='+50%')",
        ),
    ),
    Case(
        "track-a-model-that-is-no-module",  # the rounds ran, then an AttributeError of ours
        ("--hpml-benchmarks",),
        r"TypeError: track\(model='not a module'\): give a torch.nn.Module",
        FAILED,
        files=calling("benchmark.track(model='not a module')"),
    ),
    Case(
        "benchmark-a-generator",  # its making was timed and saved as the test's time
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"TypeError: benchmark\(squares\) returned a generator: only its making was timed, "
        r"not its work; benchmark a function that runs it",
        FAILED,
        files={
            "test_calls.py": "def squares():\n    yield from (i * i for i in range(1000))\n\n\n"
            "def test_calls(benchmark):\n    benchmark(squares)\n"
        },
    ),
    Case(
        "benchmark-an-async-generator",  # its making was timed, as a generator's was
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"TypeError: benchmark\(squares\) returned an async generator: only its making was "
        r"timed",
        FAILED,
        files={
            "test_calls.py": "async def squares():\n    for i in range(10):\n        yield i\n\n\n"
            "def test_calls(benchmark):\n    benchmark(squares)\n"
        },
    ),
    Case(
        "benchmark-a-coroutine-is-refused-at-its-first-call",  # then 3 "never awaited" warnings
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"(?s)TypeError: benchmark\(co\) returned a coroutine: only its making was timed.*"
        r"=+ 1 failed in [0-9.]+s =+",
        FAILED,
        files={
            "test_calls.py": "async def co():\n    return 1\n\n\n"
            "def test_calls(benchmark):\n    benchmark(co)\n"
        },
    ),
    Case(
        "track-twice",  # the second batch size replaced the first, unsaid
        ("--hpml-benchmarks",),
        r"ValueError: track\(\) was called already: give all its arguments in one call",
        FAILED,
        files=calling("benchmark.track(batch_size=8)", "benchmark.track(batch_size=16)"),
    ),
    Case(
        "track-a-batch-size-the-mark-gives-otherwise",  # track's won over the mark's, unsaid
        ("--hpml-benchmarks",),
        r"ValueError: track\(batch_size=32\): hpml_bench gives batch_size=64; give it in one "
        r"place",
        FAILED,
        files={
            "test_calls.py": "import pytest\n\n\n@pytest.mark.hpml_bench(batch_size=64)\n"
            "def test_calls(benchmark):\n    benchmark.track(batch_size=32)\n"
            "    benchmark(sum, range(100))\n"
        },
    ),
    Case(
        "expect-a-bound-that-is-no-number",  # was a TypeError deep in the work counters
        ("--hpml-benchmarks",),
        r"TypeError: expect\(ops='zero'\): give the most one call may ask for: a finite "
        r"number >= 0",
        FAILED,
        files=calling("benchmark.expect(ops='zero')"),
    ),
    Case(
        "tolerance-of-an-empty-name-is-quoted",  # said "names , which this benchmark ..."
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"hpml: ERROR test_bench.py::test_sum: hpml_bench\(tolerance=\.\.\.\) names '', which "
        r"this benchmark does not count; it counts 'instructions'",
        FAILED,
        files={
            "test_bench.py": "import pytest\n\n\n"
            '@pytest.mark.hpml_bench(tolerance={"": 0.1})\n' + BENCH.lstrip()
        },
    ),
]

# --- files read: baselines, reports ------------------------------------------------------------
READ: list[Case] = [
    Case(
        "baseline-a-fifo",  # open() waited for a writer forever
        ("--hpml-benchmarks",),
        r"hpml: ERROR baseline file \S+ is not a regular file",
        FAILED,
        files={"test_count.py": COUNT},
        fifos=(PORTABLE,),
    ),
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
        "baseline-an-integer-of-5000-digits",  # was an INTERNALERROR, exit 3, no results
        ("--hpml-benchmarks",),
        r"hpml: ERROR baseline file \S+ holds an integer of more than 4,300 digits",
        FAILED,
        files={"test_count.py": COUNT, PORTABLE: '{"format": 1, "n": ' + "7" * 5000 + "}"},
    ),
    Case(
        "baseline-a-test-given-twice",  # the last copy won, unsaid
        ("--hpml-benchmarks",),
        r"hpml: ERROR baseline file \S+ gives the key 'test_count.py::test_count' twice in one "
        r"object",
        FAILED,
        files={
            "test_count.py": COUNT,
            PORTABLE: '{"format": "pytest-hpml-baselines/1", "entries": {'
            '"test_count.py::test_count": {}, "test_count.py::test_count": {}}}',
        },
    ),
    Case(
        "baseline-two-files-for-one-machine",  # one of them was ignored, unsaid
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"baseline file \S+: machine-\S+ and machine-\S+ both name machine [0-9a-f]{12}: which "
        r"one holds its times is not known",
        FAILED,
        files={
            "test_bench.py": BENCH,
            MACHINE: baseline_file({}),
            "baselines/machine-a-label-of-its-own-" + _HERE.id + ".json": baseline_file({}),
        },
    ),
    Case(
        "baseline-a-machine-file-of-another-fingerprint",  # used as this machine's
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"baseline file \S+: its name says machine [0-9a-f]{12}, its fingerprint '000000000000'",
        FAILED,
        files={
            "test_bench.py": BENCH,
            MACHINE: json.dumps(
                {
                    "format": "pytest-hpml-baselines/1",
                    "fingerprint": {"id": "000000000000"},
                    "entries": {"test_bench.py::test_sum": {"time": TIME}},
                }
            ),
        },
    ),
    Case(
        "baseline-a-time-in-milliseconds",  # 0.0007 read as seconds: improved -99.8%
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r'entries\["test_bench.py::test_sum"\]\["time"\]: unit \'ms\': a time is stored in '
        r"seconds \('s'\); not used",
        FAILED,
        files={
            "test_bench.py": BENCH,
            MACHINE: baseline_file({"test_bench.py::test_sum": {"time": {**TIME, "unit": "ms"}}}),
        },
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
        r'entries\["test_count.py::test_count"\]\["n"\]: value \'1\' is not a finite number; '
        r"not used",
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
        r'\["time"\]: samples is empty: a baseline without samples cannot be judged against',
        FAILED,
        files={
            "test_bench.py": BENCH,
            MACHINE: baseline_file({"test_bench.py::test_sum": {"time": {**TIME, "samples": []}}}),
        },
    ),
    Case(
        "baseline-fields-besides-samples",
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r'entries\["test_bench.py::test_sum"\]\["time"\]: \["iterations"\] is -3, not a whole '
        r"number >= 1; not used",
        FAILED,
        files={
            "test_bench.py": BENCH,
            MACHINE: baseline_file(
                {"test_bench.py::test_sum": {"time": {**TIME, "iterations": -3}}}
            ),
        },
    ),
    Case(
        "baseline-fingerprint-that-is-no-object",
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"is not a pytest-hpml baseline \(fingerprint is 'x', not an object\)",
        FAILED,
        files={
            "test_bench.py": BENCH,
            MACHINE: json.dumps(
                {"format": "pytest-hpml-baselines/1", "fingerprint": "x", "entries": {}}
            ),
        },
    ),
    Case(
        "baseline-entry-without-a-test-id",
        ("--hpml-benchmarks",),
        r'entries\[""\]: an entry without a test id; not used',
        FAILED,
        files={
            "test_count.py": COUNT,
            PORTABLE: baseline_file({"": {"n": {"kind": "count", "value": 1}}}),
        },
    ),
    Case(
        "show-a-file-with-an-unusable-record",
        ("pytest-hpml", "show", PORTABLE),
        r'(?s)entries\["t"\]\["n"\]: value None is not a finite number; not used',
        CLI_ERROR,
        files={
            PORTABLE: baseline_file(
                {"t": {"n": {"kind": "count"}}, "u": {"n": {"kind": "count", "value": 2}}}
            )
        },
    ),
    Case(
        "list-a-file-as-the-directory",
        ("pytest-hpml", "list", "--dir", "a.json"),
        r"^pytest-hpml: error: a.json is a file, not a directory",
        CLI_ERROR,
        files={"a.json": "{}"},
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
        files={
            "test_count.py": COUNT,
            "README.md": "# My project\n\nCI runs the pytest-hpml benchmarks on every PR.\n",
        },
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
        r"--hpml-baseline-dir: baselines leads to \S+/elsewhere, outside the project \(\S+\); "
        r"pytest-hpml writes there only where the command line or an HPML_\* variable names it",
        USAGE,
        files={
            "project/pytest.ini": "[pytest]\n",
            "project/test_count.py": COUNT,
            "elsewhere/x": "",
        },
        links={"project/baselines": "../elsewhere"},
        cwd="project",
    ),
    # One rule for paths and links (Note [Outside the project]): an ini key recorded out of the
    # project through "..", without a word; a link named on the command line was refused.
    Case(
        "ini-baseline-directory-out-of-the-project",
        ("--hpml-baseline=update",),
        r"ini hpml_baseline_dir: ../elsewhere leads to \S+/elsewhere, outside the project",
        USAGE,
        files={
            "project/pytest.ini": "[pytest]\nhpml_baseline_dir = ../elsewhere\n",
            "project/test_count.py": COUNT,
        },
        cwd="project",
    ),
    Case(
        "named-baseline-directory-out-of-the-project-records-there",
        ("--hpml-baseline=update", "--hpml-baseline-dir=../elsewhere"),
        r"baselines: \S+/project/\.\./elsewhere \(update\)",
        0,
        files={"project/pytest.ini": "[pytest]\n", "project/test_count.py": COUNT},
        cwd="project",
        made=(portable_path(Path("elsewhere"), _HERE).as_posix(),),
    ),
    Case(
        "named-link-out-of-the-project-records-in-its-target",
        ("--hpml-baseline=update",),
        r"baselines: \S+/project/baselines \(update\)",
        0,
        files={
            "project/pytest.ini": "[pytest]\n",
            "project/test_count.py": COUNT,
            "elsewhere/x": "",
        },
        env={"HPML_BASELINE_DIR": "baselines"},
        links={"project/baselines": "../elsewhere"},
        cwd="project",
        made=(portable_path(Path("elsewhere"), _HERE).as_posix(),),
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
        "xdist-against-the-base",  # ran the tests on the workers, measured no pair, exit 0
        ("-n", "2", "--hpml-against=HEAD"),
        r"--hpml-against measures in pairs of processes of its own, which pytest-xdist's "
        r"workers \(-n 2\) would not run; run it without -n",
        USAGE,
        files={"test_bench.py": BENCH},
    ),
    Case(
        "xdist-each-counts-every-benchmark-once-a-worker",  # "2 recorded" for one metric
        ("-n", "2", "--dist", "each", "--hpml-baseline=update"),
        r"--dist each runs every benchmark on every worker, and pytest-hpml would count each "
        r"once a worker",
        USAGE,
        files={"test_count.py": COUNT},
    ),
    # an option typed for a mode that never reads it (Note [Unread options])
    Case(
        "processes-without-stored-baselines",  # measured in one process, unsaid
        ("--hpml-baseline=off", "--hpml-processes=5"),
        r"ERROR: --hpml-processes=5 is not read with --hpml-baseline=off, which neither reads "
        r"nor records stored baselines; drop --hpml-processes",
        USAGE,
        files={"test_bench.py": BENCH},
    ),
    Case(
        "machine-id-without-stored-baselines",
        ("--hpml-baseline=off", "--hpml-machine-id=x"),
        r"ERROR: --hpml-machine-id=x is not read with --hpml-baseline=off",
        USAGE,
        files={"test_bench.py": BENCH},
    ),
    Case(
        "record-processes-when-comparing",
        ("--hpml-record-processes=4",),
        r"ERROR: --hpml-record-processes=4 is not read with --hpml-baseline=compare \(the "
        r"default\), which records no baseline",
        USAGE,
        files={"test_bench.py": BENCH},
    ),
    Case(
        "baseline-dir-against-the-base",
        ("--hpml-against=HEAD", "--hpml-baseline-dir=elsewhere"),
        r"ERROR: --hpml-baseline-dir=elsewhere is not read with --hpml-against=HEAD, which "
        r"measures in pairs and uses no stored baseline",
        USAGE,
        files={"test_bench.py": BENCH},
    ),
    Case(
        "processes-against-the-base",
        ("--hpml-against=HEAD", "--hpml-processes=5"),
        r"ERROR: --hpml-processes=5 is not read with --hpml-against=HEAD.*; drop --hpml-processes",
        USAGE,
        files={"test_bench.py": BENCH},
    ),
    Case(
        "standing-processes-without-stored-baselines-is-let-be",  # the ini serves other runs
        ("--hpml-baseline=off", "--hpml-report=r.json"),
        r"1 passed",
        0,
        files={
            "pytest.ini": "[pytest]\naddopts = --hpml-processes=5\nhpml_machine_id = x\n",
            "test_count.py": COUNT,
        },
        env={"HPML_RECORD_PROCESSES": "2"},
        made=("r.json",),
    ),
    Case(
        "xdist-instructions",  # counted none, unsaid
        ("-n", "2", "--hpml-instructions"),
        r"ERROR: --hpml-instructions=all is not read under pytest-xdist \(-n 2\), whose "
        r"workers count no instructions; drop --hpml-instructions, or run without -n",
        USAGE,
        files={"test_bench.py": BENCH},
    ),
    Case(
        "xdist-threads",
        ("-n", "2", "--hpml-threads=2"),
        r"ERROR: --hpml-threads=2 is not read under pytest-xdist \(-n 2\), whose workers time "
        r"nothing",
        USAGE,
        files={"test_bench.py": BENCH},
    ),
    Case(
        "xdist-comparing-a-stored-time-says-it-was-not-measured",
        ("-n", "2", "--hpml-benchmarks"),
        r"hpml: times were not measured: under pytest-xdist, pytest-benchmark turns timing off "
        r".*; nothing was measured",
        0,
        files={
            "test_bench.py": BENCH,
            MACHINE: baseline_file({"test_bench.py::test_sum": {"time": TIME}}),
        },
    ),
    Case(
        "report-into-a-symbolic-link-loop",
        ("--hpml-report=loop/r.json",),
        r"--hpml-report: loop/r.json leads into a symbolic link loop",
        USAGE,
        files={"test_count.py": COUNT},
        links={"loop": "loop"},
    ),
    Case(
        "baseline-directory-a-symbolic-link-loop",
        ("--hpml-baseline=update",),
        r"--hpml-baseline-dir: baselines is a symbolic link loop",
        USAGE,
        files={"test_count.py": COUNT},
        links={"baselines": "baselines"},
    ),
    Case(
        "baseline-directory-a-file-when-comparing",
        ("--hpml-benchmarks",),
        r"hpml: ERROR the baseline directory \S+/baselines is a file, not a directory",
        FAILED,
        files={"test_count.py": COUNT, "baselines": "not a directory"},
    ),
    Case(
        "baseline-directory-a-link-to-a-file-said-once",  # once for each file it should hold
        ("--hpml-benchmarks",),
        r"(?s)hpml: ERROR the baseline directory \S+/baselines is a file, not a directory\n"
        r"=+ 1 passed, 1 hpml error in",
        FAILED,
        files={"test_count.py": COUNT, "notes.txt": "x"},
        links={"baselines": "notes.txt"},
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
ENVIRONMENT: list[Case] = [
    Case(
        "internal-rerun-variable-naming-a-file-of-the-user",
        ("--hpml-benchmarks",),
        r"(?m)^ERROR: HPML_INTERNAL_RERUN=settings.json: this variable is internal to "
        r"pytest-hpml .*settings.json is no file pytest-hpml made .*; the file was left as it was",
        USAGE,
        files={"test_count.py": COUNT, "settings.json": '{"keep": true}'},
        env={"HPML_INTERNAL_RERUN": "settings.json"},
    ),
    Case(
        "internal-rerun-request-that-is-not-json",
        ("--hpml-benchmarks",),
        r"HPML_INTERNAL_RERUN=pytest-hpml-rerun-1.json: .*rerun request pytest-hpml-rerun-1.json "
        r"is not valid JSON \(Expecting value: line 1 column 1\)",
        USAGE,
        files={"test_count.py": COUNT, "pytest-hpml-rerun-1.json": "not json"},
        env={"HPML_INTERNAL_RERUN": "pytest-hpml-rerun-1.json"},
    ),
    Case(
        "internal-rerun-request-that-is-another-document",
        ("--hpml-benchmarks",),
        r'pytest-hpml-rerun-2.json is no pytest-hpml rerun request \(its "format" is not',
        USAGE,
        files={
            "test_count.py": COUNT,
            "pytest-hpml-rerun-2.json": json.dumps({"format": "pytest-hpml-report/1"}),
        },
        env={"HPML_INTERNAL_RERUN": "pytest-hpml-rerun-2.json"},
    ),
    Case(
        "internal-rerun-request-linked-to-a-file-of-the-user",
        ("--hpml-benchmarks",),
        r"pytest-hpml-rerun-3.json is no regular file",
        USAGE,
        files={"test_count.py": COUNT, "settings.json": '{"keep": true}'},
        links={"pytest-hpml-rerun-3.json": "settings.json"},
        env={"HPML_INTERNAL_RERUN": "pytest-hpml-rerun-3.json"},
    ),
    # Once: nothing for 301 s, then DistStoreError. The timeout is a safety net, never reached.
    Case(
        "rank-variables-no-launcher-set",
        ("--hpml-dist-timeout=5",),
        r"(?m)^ERROR: hpml: RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 are set, but MASTER_ADDR and "
        r"MASTER_PORT not: no launcher started this pytest .*Unset RANK, WORLD_SIZE, LOCAL_RANK",
        USAGE,
        files={"test_ranks.py": "def test_x(rank):\n    pass\n"},
        env={
            "RANK": "0",
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "",
            "MASTER_PORT": "",
        },
    ),
    Case(
        "rank-beyond-the-world-size",
        ("--hpml-dist-timeout=5",),
        r"(?m)^ERROR: hpml: SLURM_PROCID=2 SLURM_NTASKS=2 SLURM_LOCALID=0: SLURM_PROCID and "
        r"SLURM_LOCALID must be below SLURM_NTASKS",
        USAGE,
        files={"test_ranks.py": "def test_x(rank):\n    pass\n"},
        env={"SLURM_PROCID": "2", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"},
    ),
    # Once: a 76-line INTERNALERROR per rank. (Where torch has MPI, mpi is no bad input.)
    *(
        []
        if __import__("torch.distributed").distributed.is_mpi_available()
        else [
            Case(
                "dist-backend-torch-was-built-without",
                ("--hpml-dist-backend=mpi", "-rs"),
                r"SKIPPED \[1\] test_ranks.py:4: mpi backend \(--hpml-dist-backend=mpi\): torch "
                r"\S+ was built without it \(torch.distributed.is_mpi_available\(\) is False\)",
                0,
                files={
                    "test_ranks.py": "import pytest\n\n\n"
                    "@pytest.mark.distributed(world_size=2)\ndef test_x(rank):\n    pass\n"
                },
            )
        ]
    ),
    # rank variables that are no numbers: once an INTERNALERROR, or silently no launch
    Case(
        "world-size-of-more-digits-than-int-reads",
        (),
        r"(?m)^ERROR: hpml: WORLD_SIZE='9{60}'\.\.\. \(5000 characters\) is no number from 0 to "
        r"2147483647 in ASCII digits\. Unset RANK, WORLD_SIZE, LOCAL_RANK",
        USAGE,
        env={
            "RANK": "0",
            "WORLD_SIZE": "9" * 5000,
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29514",
        },
    ),
    Case(
        "rank-with-spaces",
        (),
        r"(?m)^ERROR: hpml: RANK=' 0 ' is no number from 0 to 2147483647 in ASCII digits",
        USAGE,
        env={
            "RANK": " 0 ",
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29514",
        },
    ),
    Case(
        "mpirun-size-that-is-no-number",
        (),
        r"(?m)^ERROR: hpml: OMPI_COMM_WORLD_SIZE='x' is no number .*Unset OMPI_COMM_WORLD_RANK, "
        r"OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK",
        USAGE,
        env={
            "OMPI_COMM_WORLD_RANK": "0",
            "OMPI_COMM_WORLD_SIZE": "x",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        },
    ),
    # blank is unset (Note [Blank values]); pytest-hpml clears it so for its own ranks
    Case(
        "blank-internal-rerun-variable",
        (),
        r"1 passed",
        0,
        files={"test_plain.py": "def test_plain():\n    pass\n"},
        env={"HPML_INTERNAL_RERUN": "  "},
    ),
]

# --- what reaches a terminal, a Markdown or an HTML page ---------------------------------------
# What a crafted file or option carries: an OSC sequence retitling the terminal, a bell, an
# erase of the screen; and as pytest-hpml shows it (report.text.visible), as a pattern.
CRAFTED = "\x1b]0;pwned\x07\x1b[2J"
CRAFTED_SHOWN = re.escape(r"\x1b]0;pwned\x07\x1b[2J")
CRAFTED_MD = re.escape(r"\\x1b\]0;pwned\\x07\\x1b\[2J")  # the same in Markdown, escaped again
# Output that holds no raw control character but the newlines that join its lines, and no
# bidirectional override; then anything. A pattern's prefix (its '.' matches newlines too).
NO_RAW = r"(?s)\A(?!.*[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]).*"
CRAFTED_FINGERPRINT = {**_HERE.as_dict(), "name": f"box{CRAFTED}", "id": f"id{CRAFTED}"}
CRAFTED_BASELINE = json.dumps(
    {
        "format": "pytest-hpml-baselines/1",
        "fingerprint": CRAFTED_FINGERPRINT,
        "entries": {f"test_a.py::test{CRAFTED}": {"time\u202e": TIME}},
    }
)
CRAFTED_REPORT = json.dumps(
    {
        "format": "pytest-hpml-report/1",
        "fingerprint": CRAFTED_FINGERPRINT,
        "commit": f"c{CRAFTED}",
        "baseline_mode": "compare",
        "baseline_dir": f"b{CRAFTED}",
        "errors": [f"e{CRAFTED}"],
        "results": [
            {
                "test": f"test_a.py::test{CRAFTED}",
                "metrics": {"n\u202e": {"kind": "count", "unit": "", "value": 2}},
                "verdicts": {
                    "n\u202e": {
                        "verdict": "regressed",
                        "baseline": 1,
                        "current": 2,
                        "change": 1.0,
                        "confidence": None,
                        "reason": f"r{CRAFTED}",
                    }
                },
            }
        ],
    }
)
# Another machine's baseline file: a run on this one says its name beside theirs.
OTHER_MACHINE = json.dumps(
    {
        "format": "pytest-hpml-baselines/1",
        "fingerprint": {**_HERE.as_dict(), "cores": _HERE.cores + 1, "name": "other"},
        "entries": {"test_bench.py::test_sum": {"time": TIME}},
    }
)
# An inner test recording a count whose name carries the controls (its source stays ASCII).
# (a control character in a name is refused at record(): CALLS)
CRAFTED_COUNT = """
def test_count(benchmark):
    benchmark.record("n\\u202e", 1, portable=True)
"""
SHOWN: list[Case] = [
    Case(
        "show-a-crafted-baseline-file",
        ("pytest-hpml", "show", "baselines/machine-crafted.json"),
        rf"{NO_RAW}\ntest_a\.py::test{CRAFTED_SHOWN} +time\\u202e +time +700 ns",
        0,
        files={"baselines/machine-crafted.json": CRAFTED_BASELINE},
    ),
    Case(
        "list-a-crafted-machine-name",
        ("pytest-hpml", "list", "--dir", "baselines"),
        rf"{NO_RAW}\nmachine-crafted\.json +box{CRAFTED_SHOWN} +id{CRAFTED_SHOWN} +1 +1",
        0,
        files={"baselines/machine-crafted.json": CRAFTED_BASELINE},
    ),
    Case(
        "diff-crafted-names",
        ("pytest-hpml", "diff", "crafted.json", "crafted.json"),
        rf"{NO_RAW}\ntest_a\.py::test{CRAFTED_SHOWN} +time\\u202e +700 ns +700 ns +\+0\.0%",
        0,
        files={"crafted.json": CRAFTED_BASELINE},
    ),
    Case(
        "render-a-crafted-report-to-markdown-and-html",
        ("pytest-hpml", "render", "r.json", "--md", "/dev/stdout", "--html", "/dev/stderr"),
        rf"{NO_RAW}Machine: box{CRAFTED_MD} \(id{CRAFTED_MD}\).*"
        rf"\| test\\_a\.py::test{CRAFTED_MD} \| n\\\\u202e \|.*\| r{CRAFTED_MD} \|.*"
        rf"<dd>box{CRAFTED_SHOWN} \(id{CRAFTED_SHOWN}\)</dd>.*<li>e{CRAFTED_SHOWN}</li>",
        0,
        files={"r.json": CRAFTED_REPORT},
    ),
    Case(  # an option refuses control characters; what it says shows them escaped
        "a-machine-name-with-controls",
        ("--hpml-benchmarks", f"--hpml-machine=m{CRAFTED}"),
        rf"{NO_RAW}--hpml-machine\b.*\\x1b",
        USAGE,
        files={"test_count.py": COUNT},
    ),
    Case(  # bidirectional overrides are not controls: the name is kept, and shown escaped
        "terminal-and-markdown-of-a-crafted-machine-name-and-baseline-file-name",
        (
            "--hpml-benchmarks",
            "--hpml-bench-time=0.2",
            "--hpml-machine=box\u202e\u2066",
            "--hpml-report-md=/dev/stdout",
        ),
        rf"{NO_RAW}Machine: box\\\\u202e\\\\u2066 \(.*"
        r"hpml: no time baselines for this machine \(box\\u202e\\u2066, id \w+\): times not "
        r"judged, .*"
        rf"the nearest machine-{CRAFTED_SHOWN}\.json, ",
        0,
        files={"test_bench.py": BENCH, f"baselines/machine-{CRAFTED}.json": OTHER_MACHINE},
    ),
    Case(
        "another-machines-file-that-is-no-json",  # passed over without a word
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"hpml: no time baselines for this machine \(.*\): times not judged, counts judged; "
        r"skipped: baseline file \S*machine-other-000000000000\.json is not valid JSON \(.*\); "
        r"record this machine's",
        0,
        files={"test_bench.py": BENCH, "baselines/machine-other-000000000000.json": "{not json"},
    ),
    Case(
        "a-portable-file-that-says-another-torch",  # judged as this torch's, unsaid
        ("--hpml-benchmarks",),
        r"baseline file \S+portable-torch\d+\.\d+\.json: its name says torch \d+\.\d+, its "
        r"torch field '1\.0'",
        FAILED,
        files={
            "test_count.py": COUNT,
            PORTABLE: json.dumps(
                {
                    "format": "pytest-hpml-baselines/1",
                    "torch": "1.0",
                    "entries": {"test_count.py::test_count": {"n": {"kind": "count", "value": 1}}},
                }
            ),
        },
    ),
    Case(
        "a-time-in-a-portable-file",  # passed over: the time read "no-baseline", unsaid
        ("--hpml-benchmarks", "--hpml-bench-time=0.2"),
        r"baseline file \S+portable-torch\d+\.\d+\.json: entries\[\"test_bench.py::test_sum\"\]"
        r"\[\"time\"\] is a time, which one machine measures; a portable file holds counts only",
        FAILED,
        files={  # its count has the file read
            "test_bench.py": BENCH + '    benchmark.record("n", 1, portable=True)\n',
            PORTABLE: baseline_file({"test_bench.py::test_sum": {"time": TIME}}),
        },
    ),
    Case(
        "the-command-given-an-argument-with-controls",
        ("pytest-hpml", "list", f"x{CRAFTED}"),
        rf"{NO_RAW}pytest-hpml: error: unrecognized arguments: x{CRAFTED_SHOWN}",
        CLI_ERROR,
    ),
    Case(
        "terminal-table-of-a-crafted-metric-name",
        ("--hpml-benchmarks",),
        rf"{NO_RAW}\ntest_crafted\.py::test_count +n\\u202e +- +1 +- ",
        0,
        files={"test_crafted.py": CRAFTED_COUNT},
    ),
]

CASES = [*OPTIONS, *ARGUMENTS, *CALLS, *READ, *WRITTEN, *ENVIRONMENT, *SHOWN]


@pytest.fixture(autouse=True)
def kept_apart(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary directory of each run started here, one of the test's own: the results
    that a run whose write failed keeps there (``report.files.keep``) stay with the test, not
    in the machine's temporary directory, where every run of this module left a few."""
    directory = tmp_path_factory.mktemp("tmp")
    monkeypatch.setenv("TMPDIR", str(directory))
    return directory


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
        (pytester.path / name).parent.mkdir(parents=True, exist_ok=True)
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
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, kept_apart: Path
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
        ': entries["test_bench.py::test_sum"]["time"]: processes and earlier must be lists of '
        "process runs: earlier is not a list; nothing can be appended to it"
    )
    kept = r".*\(not overwritten\); the measurements are kept in (/\S+\.json)"
    found = re.search(f"hpml: ERROR baseline file \\S+{said}{kept}", result.stdout.str())
    assert found, result.stdout.str()
    assert path.read_bytes() == before
    measured = json.loads(Path(found.group(1)).read_text())  # kept in this test's directory
    assert Path(found.group(1)).parent == kept_apart
    assert [r["test"] for r in measured["results"]] == ["test_bench.py::test_sum"]
