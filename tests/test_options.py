"""Options: each one read from the command line, HPML_* variables and ini keys, in that order."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml.config.options import GROUP, OPTIONS, Option
from pytest_hpml.config.resolution import (
    BENCHMARK_OPTIONS,
    NEEDS,
    STORED_ONLY,
    Settings,
    values_given,
)
from pytest_hpml.config.values import INTERNAL_PREFIXES, MAX_THREADS, shown
from tests.conftest import count_tests

if TYPE_CHECKING:
    from tests.conftest import Project

# option: (value as given, value as the settings line shows it once parsed)
EVERY_OPTION = {
    "device": ("cpu,cuda:1", "cpu,cuda:1"),
    "precision": ("BF16,fp16,bf16", "bf16,fp16"),
    "backend": ("aot_eager,inductor:max-autotune", "aot_eager,inductor:max-autotune"),
    "dist_backend": ("GLOO", "gloo"),
    "loader_workers": ("0,2,2", "0,2"),
    "seed": ("1234", "1234"),
}

# option: (command line, environment, ini, default) values, all different
LAYERS = {
    "device": ("cpu", "mps", "cuda", "auto"),
    "precision": ("bf16", "fp16", "tf32", "fp32"),
    "backend": ("aot_eager", "inductor", "cudagraphs", "eager"),
    "dist_backend": ("gloo", "nccl", "mpi", "auto"),
    "loader_workers": ("1", "2", "3", "0"),
    "seed": ("7", "8", "9", "0"),
}
LEVELS = ("cli", "env", "ini", "default")

SLOW_TEST = """
import pytest


@pytest.mark.slow
def test_slow():
    pass
"""


def test_every_option_is_read_from_each_source(project: Project, source: str) -> None:
    args = project.configure(source, **{name: given for name, (given, _) in EVERY_OPTION.items()})
    result = project.run(*args)
    expected = {name.replace("_", "-"): shown for name, (_, shown) in EVERY_OPTION.items()}
    expected |= {"benchmarks": "hpml", "threshold": "6%"}
    assert project.settings(result) == expected


@pytest.mark.parametrize("option", LAYERS)
@pytest.mark.parametrize("winner", LEVELS)
def test_command_line_beats_environment_beats_ini_beats_default(
    project: Project, option: str, winner: str
) -> None:
    values = dict(zip(LEVELS, LAYERS[option]))
    args: list[str] = []
    for level in LEVELS[LEVELS.index(winner) : -1]:  # the winner and every level below it
        args += project.configure(level, **{option: values[level]})
    shown = project.settings(project.run(*args))[option.replace("_", "-")]
    assert shown == values[winner]


def named(source: str, option: str) -> str:
    """How a message names ``option`` set from ``source``."""
    return {"cli": f"--hpml-{option.replace('_', '-')}", "env": f"HPML_{option.upper()}"}.get(
        source, f"ini hpml_{option}"
    )


def config_warnings(result: pytest.RunResult) -> list[str]:
    """The text of each PytestConfigWarning in the run's warnings summary."""
    found = re.findall(r"PytestConfigWarning: (.*)", result.stdout.str())
    return [line.strip() for line in found]


@pytest.mark.parametrize("blank", ["", "   "], ids=["empty", "spaces"])
def test_a_blank_value_is_unset_and_said_from_each_source(
    project: Project, source: str, blank: str
) -> None:
    result = project.run(*project.configure(source, precision=blank, loader_workers=blank))
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert (project.settings(result)["precision"], project.settings(result)["loader-workers"]) == (
        "fp32",
        "0",
    )
    assert config_warnings(result) == [
        f"{named(source, 'precision')} is blank: treated as unset (default fp32)",
        f"{named(source, 'loader_workers')} is blank: treated as unset (default 0)",
    ]


@pytest.mark.parametrize(
    ("blank", "below", "said"),
    [
        ("env", "ini", "HPML_PRECISION is blank: treated as unset (ini hpml_precision applies)"),
        ("cli", "env", "--hpml-precision is blank: treated as unset (HPML_PRECISION applies)"),
    ],
)
def test_a_blank_value_passes_over_to_the_next_source(
    project: Project, blank: str, below: str, said: str
) -> None:
    args = project.configure(blank, precision="") + project.configure(below, precision="bf16")
    result = project.run(*args)
    assert project.settings(result)["precision"] == "bf16"
    assert config_warnings(result) == [said]


def test_a_blank_value_below_the_one_that_applies_is_not_said(project: Project) -> None:
    project.configure("env", precision=" ")
    result = project.run("--hpml-precision=bf16")
    assert project.settings(result)["precision"] == "bf16"
    assert config_warnings(result) == []


@pytest.mark.parametrize("option", ["report", "against", "peak_flops", "against_paths"])
def test_a_blank_value_of_an_option_whose_default_is_none_is_unset_and_said(
    project: Project, source: str, option: str
) -> None:
    """A blank --hpml-against once ran against the stored baselines without a word."""
    for name in ("HPML_BENCHMARKS", "HPML_PROCESSES", "HPML_RECORD_PROCESSES"):
        project.monkeypatch.delenv(name)
    result = project.run(*project.configure(source, **{option: " "}))
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "benchmarks" not in project.settings(result)  # a blank value opts nothing in
    assert config_warnings(result) == [
        f"{named(source, option)} is blank: treated as unset (default: none)"
    ]
    assert list(project.path.glob("*.json")) == []


def test_a_blank_baseline_dir_records_in_the_default_one(project: Project, source: str) -> None:
    """Refused on the command line but ignored in the environment before: now unset from every
    source, so a recording run keeps its measurements, in baselines/, and says why there."""
    project.write_tests(count_tests(1))
    result = project.run(*project.configure(source, baseline_dir=""), "--hpml-baseline=update")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert set(project.baseline_files()) == {"portable"}
    assert config_warnings(result) == [
        f"{named(source, 'baseline_dir')} is blank: treated as unset (default baselines)"
    ]


def test_a_blank_value_under_warnings_as_errors_is_a_usage_error(project: Project) -> None:
    """pytest raises a configure-time warning that -W error turns into an error: an
    INTERNALERROR with a traceback, were it not caught."""
    project.configure("env", seed="")
    result = project.run("-W", "error")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert project.error_lines(result) == [
        "ERROR: HPML_SEED is blank: treated as unset (default 0); an error under this run's "
        "warning filters"
    ]


def deprecations(result: pytest.RunResult) -> list[str]:
    """The text of each HpmlDeprecationWarning in the run's warnings summary."""
    return [
        line.strip() for line in re.findall(r"HpmlDeprecationWarning: (.*)", result.stdout.str())
    ]


def test_an_old_option_name_still_works_and_says_its_new_one(project: Project, source: str) -> None:
    result = project.run(*project.configure(source, workers="0,2"))
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert project.settings(result)["loader-workers"] == "0,2"
    old, new = named(source, "workers"), named(source, "loader_workers")
    assert deprecations(result) == [f"{old} is deprecated; it is {new} now"]


def test_the_new_name_beats_the_old_one_in_the_same_place_and_the_old_is_said(
    project: Project,
) -> None:
    project.configure("env", workers="2", loader_workers="1")
    result = project.run("--hpml-workers=3")  # the command line beats the environment
    assert project.settings(result)["loader-workers"] == "3"
    project.configure("ini", workers="4")
    result = project.run()
    assert project.settings(result)["loader-workers"] == "1"
    assert deprecations(result) == [
        "HPML_WORKERS is deprecated; it is HPML_LOADER_WORKERS now",
        "ini hpml_workers is deprecated; it is ini hpml_loader_workers now",
    ]


def test_an_old_name_under_warnings_as_errors_is_a_usage_error(project: Project) -> None:
    result = project.run("-W", "error", "--hpml-workers=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert project.error_lines(result) == [
        "ERROR: --hpml-workers is deprecated; it is --hpml-loader-workers now; an error under "
        "this run's warning filters"
    ]


def test_the_former_counter_policy_word_still_works_and_says_its_new_one(
    project: Project, source: str
) -> None:
    [opt] = [opt for opt in OPTIONS if opt.dest == "counters"]
    result = project.run(*project.configure(source, counters="classes"))
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    where = named(source, "counters")
    assert deprecations(result) == [f"{where}=classes is deprecated; it is {where}=lenient now"]
    assert opt.read("classes") == "lenient"


def test_help_shows_no_old_name(project: Project) -> None:
    shown = project.run("--help").stdout.str()
    assert "--hpml-loader-workers" in shown
    assert "--hpml-workers" not in shown


def read_from(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, opt: Option, source: str, value: str
) -> Any:
    """What ``value`` given to ``opt`` by ``source`` reads as: its value, or the error after
    the part that names the source."""
    monkeypatch.delenv(opt.env, raising=False)
    args: list[str] = []
    if source == "cli":
        args = [f"{opt.cli}={value}"]
    elif source == "env":
        monkeypatch.setenv(opt.env, value)
    else:
        pytester.makeini(f"[pytest]\n{opt.ini} = {value}\n")
    try:
        config = pytester.parseconfig(*args)
        return next(values_given(config, opt))[1]
    except pytest.UsageError as exc:
        origin = {
            "cli": f"argument {opt.cli}: ",  # after argparse's usage lines
            "env": f"{opt.env}={shown(value.strip())}: ",
            "ini": f"ini {opt.ini} = {shown(value.strip())} (",
        }[source]
        [said] = [line for line in str(exc).splitlines() if origin in line]
        return said.partition("): ")[2] if source == "ini" else said.partition(origin)[2]
    finally:
        (pytester.path / "tox.ini").unlink(missing_ok=True)


@pytest.mark.parametrize(
    "value",
    [" \t ", "a\x07b", "9" * 5000, "\uff58", "9" * 40, "cuda:\u0661"],
    ids=["blank", "control", "long", "fullwidth", "huge", "arabic-digit"],
)
def test_every_option_reads_a_value_alike_from_each_source(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """The same Option.read serves the command line (argparse's type=), the environment and
    the ini file: one value is accepted, refused or set aside the same way by all three."""
    for name in [n for n in os.environ if n.startswith("HPML_")]:
        monkeypatch.delenv(name)
    for opt in (opt for opt in OPTIONS if not opt.flag):
        read = {
            source: read_from(pytester, monkeypatch, opt, source, value)
            for source in ("cli", "env", "ini")
        }
        assert read["cli"] == read["env"] == read["ini"], (opt.cli, read)


def test_run_slow_is_read_from_each_source(project: Project, source: str) -> None:
    project.write_tests(SLOW_TEST)
    result = project.run(*project.configure(source, run_slow="true"))
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("layers", "runs"),
    [
        ({"env": "0", "ini": "true"}, False),
        ({"env": "yes", "ini": "false"}, True),
        ({"cli": "true", "env": "off"}, True),
    ],
    ids=["env-0-beats-ini", "env-yes-beats-ini", "cli-beats-env-off"],
)
def test_run_slow_precedence(project: Project, layers: dict[str, str], runs: bool) -> None:
    project.write_tests(SLOW_TEST)
    args: list[str] = []
    for source, value in layers.items():
        args += project.configure(source, run_slow=value)
    result = project.run(*args)
    result.assert_outcomes(passed=1 if runs else 0, deselected=0 if runs else 1)


def test_help_shows_the_hpml_group_with_every_option(project: Project) -> None:
    assert {"--hpml-device", "--hpml-precision", "--hpml-baseline", "--hpml-run-slow"} <= {
        opt.cli for opt in OPTIONS
    }
    result = project.run("--help")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"{GROUP}:", *(f"  {o.cli}*" for o in OPTIONS)])
    text = " ".join(result.stdout.str().split())  # the help is wrapped to the terminal width
    for opt in OPTIONS:
        default = f" (default {opt.default})" if opt.default and not opt.flag else ""
        assert f"{opt.summary}{default}" in text
        assert f"{opt.ini} ({'bool' if opt.flag else 'string'}): see {opt.cli}" in text


def test_help_adds_at_most_120_lines(pytester: pytest.Pytester) -> None:
    """One summary a line or two per option, one pointer per ini key: the help of every
    option had added 323 lines to pytest's (pytest-benchmark's 34 options take 120)."""
    ours = pytester.runpytest_subprocess("--help")
    without = pytester.runpytest_subprocess("-p", "no:hpml", "--help")
    assert ours.ret == without.ret == pytest.ExitCode.OK
    added = len(ours.outlines) - len(without.outlines)
    assert 0 < added <= 120, "\n".join(ours.outlines)


def test_the_option_table_is_the_one_list_of_options() -> None:
    """The settings hold one field per option of the table, in its order; what needs what, what
    opts in and what only stored baselines read are columns of the table, not lists beside it."""
    assert Settings._fields == (*(opt.dest for opt in OPTIONS), "sources")
    dests = {opt.dest for opt in OPTIONS}
    assert {*NEEDS, *NEEDS.values(), *BENCHMARK_OPTIONS, *STORED_ONLY} <= dests
    assert len({opt.name for opt in OPTIONS}) == len(OPTIONS) == len(dests)


def test_each_option_has_a_summary_of_one_line() -> None:
    """pytest's help column is 56 characters wide at 80 columns; a summary wraps there."""
    assert [o.cli for o in OPTIONS if not 0 < len(o.summary) <= 56 or "%" in o.summary] == []


def test_help_texts_hold_no_percent_sign() -> None:
    """argparse formats a help text with %: a lone % breaks pytest --help for every project
    where pytest-hpml is installed (write "percent")."""
    assert [opt.cli for opt in OPTIONS if "%" in opt.help] == []


# What a benchmark under --hpml-threads does: torch's threads set, the same count in the
# environment of a measuring process (read by OpenMP when it starts), then parallel work.
MANY_THREADS = """
import torch

torch.set_num_threads({threads})
a = torch.randn(256, 256)
(a @ a).sum().item()
torch.nn.functional.conv2d(torch.randn(8, 3, 32, 32), torch.randn(4, 3, 3, 3)).sum().item()
assert torch.get_num_threads() == {threads}
"""


def test_the_most_threads_allowed_run_torch(tmp_path: Path) -> None:
    """20000 threads made libgomp abort the run and 100000 crashed it: the bound on
    --hpml-threads is a count seen to run."""
    env = {**os.environ, "OMP_NUM_THREADS": str(MAX_THREADS)}
    code = MANY_THREADS.format(threads=MAX_THREADS)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_help_lists_the_ini_keys_with_their_types(project: Project) -> None:
    result = project.run("--help")
    kinds = {opt.ini: "bool" if opt.flag else "string" for opt in OPTIONS}
    result.stdout.fnmatch_lines([f"  {ini} ({kind}):*" for ini, kind in kinds.items()])


@pytest.mark.parametrize(("value", "said"), [("maybe", "expected true or false"), ("", "blank")])
def test_an_on_off_ini_key_is_a_bool_blank_unset_and_a_bad_one_named(
    project: Project, value: str, said: str
) -> None:
    project.pytester.makeini(f"[pytest]\nhpml_run_slow = {value}\n")
    result = project.run()
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == (
        pytest.ExitCode.USAGE_ERROR if value else pytest.ExitCode.NO_TESTS_COLLECTED
    )
    assert said in output
    assert "hpml_run_slow" in output


def test_markers_lists_every_hpml_marker_with_its_signature(project: Project) -> None:
    result = project.run("--markers")
    for line in [
        "@pytest.mark.gpu(count=1, memory_gb=None, capability=None): skip unless *",
        "@pytest.mark.precision(*names): run only with these of the selected precisions *",
        "@pytest.mark.device(*types): run only on these of the selected device types *",
        "@pytest.mark.slow: deselected unless --hpml-run-slow *",
    ]:
        result.stdout.fnmatch_lines([line])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("fast", "expected a peak in FLOP/s such as 989e12, got 'fast'"),
        ("0", "expected a positive peak in FLOP/s, got '0'"),
        ("-1e12", "expected a positive peak in FLOP/s, got '-1e12'"),
        ("inf", "expected a positive peak in FLOP/s, got 'inf'"),
        ("989", "less than a megaFLOP/s: write 989e12 for 989 TFLOP/s"),
    ],
)
def test_a_bad_peak_is_a_usage_error(project: Project, value: str, message: str) -> None:
    result = project.run(f"--hpml-peak-flops={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    project.monkeypatch.setenv("HPML_PEAK_FLOPS", value)
    result = project.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"HPML_PEAK_FLOPS={value}: " in result.stderr.str()
    assert message in result.stderr.str()


@pytest.mark.parametrize("source", ["cli", "env", "ini"])
def test_a_long_value_is_shown_cut_short_from_every_source(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """700 digits once came back in full from the command line, and as "seed must be an
    integer" where Python's digit limit (PYTHONINTMAXSTRDIGITS=640) made int() refuse them."""
    for name in [n for n in os.environ if n.startswith("HPML_")]:
        monkeypatch.delenv(name)
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        said = {
            opt.cli: read_from(pytester, monkeypatch, opt, source, "1" * 700)
            for opt in OPTIONS
            if not opt.flag
        }
    finally:
        sys.set_int_max_str_digits(limit)
    assert said["--hpml-seed"] == f"seed must be in [0, 2**32), got {'1' * 60}... (700 characters)"
    # the messages of the options that refuse it (the others give the value, or a tuple)
    refused = {cli: text for cli, text in said.items() if text not in ("1" * 700, ("1" * 700,))}
    assert len(refused) >= 10
    assert [cli for cli, text in refused.items() if "1" * 61 in str(text)] == []


# numeric options, and a value that only looks like a number: another script's digits
LOOK_ALIKE_NUMBERS = {
    "loader_workers": "\u0663",  # ARABIC-INDIC DIGIT THREE, which int() reads as 3
    "seed": "\uff11\uff12",  # FULLWIDTH DIGIT ONE, TWO: 12 to int()
    "threshold": "\uff10.05",
    "bench_time": "\uff11",
    "dist_timeout": "\u0663\u0660",
    "max_ranks": "\u0663",
    "threads": "\uff14",
    "processes": "\u0662",
    "pairs": "\uff13",
    "record_processes": "\uff12",
    "peak_flops": "\uff19\uff18\uff19e12",
}


@pytest.mark.parametrize("option", LOOK_ALIKE_NUMBERS)
def test_a_number_is_read_in_ascii_digits_only(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """int() and float() read the digits of any script: --hpml-loader-workers=\u0663 ran 3 workers
    and --hpml-seed=\uff11\uff12 seeded 12, while the fullwidth device was refused."""
    for name in [n for n in os.environ if n.startswith("HPML_")]:
        monkeypatch.delenv(name)
    [opt] = [opt for opt in OPTIONS if opt.dest == option]
    value = LOOK_ALIKE_NUMBERS[option]
    said = read_from(pytester, monkeypatch, opt, "env", value)
    odd = next(c for c in value if not c.isascii())
    assert said.endswith(f"; '{odd}' is {unicodedata.name(odd)}, not ASCII"), said


def test_an_hpml_variable_that_is_no_option_is_said_with_the_nearest_one(
    project: Project,
) -> None:
    """HPML_TRESHOLD=0.5 was ignored without a word, where pytest says "Unknown config option"
    of a typo in the ini file. The variables of pytest-hpml's own processes are no typo."""
    for name, value in {
        "HPML_TRESHOLD": "0.5",
        "HPML_SNAKE": "1",
        "HPML_devices": "cpu",
        "HPML_INTERNAL_FUTURE": "x",
        "HPML_RANK_RESULT": "",
    }.items():
        project.monkeypatch.setenv(name, value)
    project.write_tests("def test_plain():\n    pass\n")
    result = project.run()
    result.assert_outcomes(passed=1)
    assert project.settings(result)["threshold"] == "6%"
    assert config_warnings(result) == [
        "HPML_SNAKE is no option of pytest-hpml and is ignored; pytest --help lists the options",
        "HPML_TRESHOLD is no option of pytest-hpml and is ignored; did you mean HPML_THRESHOLD?",
        "HPML_devices is no option of pytest-hpml and is ignored; did you mean HPML_DEVICE?",
    ]


def test_every_variable_pytest_hpml_sets_for_its_processes_is_exempt_as_internal() -> None:
    """A variable pytest-hpml sets for a rank or a rerun that is no option must carry an
    internal prefix, or every such process would warn of it as a typo."""
    package = Path(__file__).parent.parent / "pytest_hpml"
    named = {
        name
        for path in package.rglob("*.py")
        for name in re.findall(r'"(HPML_[A-Z_]+)"', path.read_text(encoding="utf-8"))
    }
    options = {opt.env for opt in OPTIONS}
    assert sorted(n for n in named - options if not n.startswith(INTERNAL_PREFIXES)) == []


@pytest.mark.parametrize(
    ("table", "line", "said"),
    [
        (
            "tool.pytest.ini_options",
            'hpml_precision = ["fp32", "bf16"]',
            (
                "ini hpml_precision = ['fp32', 'bf16'] (",
                "pyproject.toml): a TOML list, where pytest-hpml reads a string; write "
                'hpml_precision = "fp32,bf16"',
            ),
        ),
        (
            "tool.pytest.ini_options",
            "hpml_loader_workers = [0, 2]",
            ("ini hpml_loader_workers = [0, 2] (", '; write hpml_loader_workers = "0,2"'),
        ),
        (
            "tool.pytest",  # pytest 9's own table, whose values keep their TOML types
            "hpml_seed = 12",
            (
                "ini hpml_seed = 12 (",
                "pyproject.toml): a TOML integer, where pytest-hpml reads a string; write "
                'hpml_seed = "12"',
            ),
        ),
    ],
    ids=["list", "list-of-numbers", "number-in-pytest-table"],
)
def test_a_toml_value_that_is_no_string_says_how_to_write_it(
    project: Project, table: str, line: str, said: tuple[str, str]
) -> None:
    """A TOML list was split as its repr: unknown precision "['fp32'"."""
    if table == "tool.pytest" and int(pytest.__version__.split(".")[0]) < 9:
        pytest.skip("pytest 9 reads [tool.pytest]")
    project.pytester.makepyprojecttoml(f"[{table}]\n{line}\n")
    result = project.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [error] = project.error_lines(result)  # the path of the file between the two parts
    assert error.startswith(f"ERROR: {said[0]}"), error
    assert error.endswith(said[1]), error
    assert "Warning" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("table", ["tool.pytest", "tool.pytest.ini_options"])
def test_a_toml_boolean_turns_instructions_on_or_off(project: Project, table: str) -> None:
    """--hpml-instructions takes all, changed or off, and the truth values it took as a flag:
    a TOML true or false in either table."""
    if table == "tool.pytest" and int(pytest.__version__.split(".")[0]) < 9:
        pytest.skip("pytest 9 reads [tool.pytest]")
    project.pytester.makepyprojecttoml(f"[{table}]\nhpml_instructions = false\n")
    assert project.run().ret == pytest.ExitCode.NO_TESTS_COLLECTED
    project.pytester.makepyprojecttoml(f"[{table}]\nhpml_instructions = 3\n")
    assert project.run().ret == pytest.ExitCode.USAGE_ERROR


def test_a_toml_number_under_ini_options_is_read_as_its_text(project: Project) -> None:
    """pytest gives the scalars of [tool.pytest.ini_options] as text: a number there is fine."""
    project.pytester.makepyprojecttoml("[tool.pytest.ini_options]\nhpml_seed = 12\n")
    assert project.settings(project.run())["seed"] == "12"
