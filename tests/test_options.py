"""Options: each one read from the command line, HPML_* variables and ini keys, in that order."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_hpml.config.options import OPTIONS

if TYPE_CHECKING:
    from tests.conftest import Project

# option: (value as given, value as the settings line shows it once parsed)
EVERY_OPTION = {
    "device": ("cpu,cuda:1", "cpu,cuda:1"),
    "precision": ("BF16,fp16,bf16", "bf16,fp16"),
    "backend": ("aot_eager,inductor:max-autotune", "aot_eager,inductor:max-autotune"),
    "dist_backend": ("GLOO", "gloo"),
    "workers": ("0,2,2", "0,2"),
    "seed": ("1234", "1234"),
}

# option: (command line, environment, ini, default) values, all different
LAYERS = {
    "device": ("cpu", "mps", "cuda", "auto"),
    "precision": ("bf16", "fp16", "tf32", "fp32"),
    "backend": ("aot_eager", "inductor", "cudagraphs", "eager"),
    "dist_backend": ("gloo", "nccl", "mpi", "auto"),
    "workers": ("1", "2", "3", "0"),
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


def test_empty_environment_variable_is_ignored(project: Project) -> None:
    project.configure("env", precision="")
    project.configure("ini", precision="bf16")
    assert project.settings(project.run())["precision"] == "bf16"


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
    result.stdout.fnmatch_lines(
        ["pytest-hpml: PyTorch training tests and benchmarks:", *(f"  {o.cli}*" for o in OPTIONS)]
    )
    text = " ".join(result.stdout.str().split())  # the help is wrapped to the terminal width
    for opt in OPTIONS:
        assert f"[env {opt.env}, ini {opt.ini}; default: {opt.default}]" in text


def test_help_lists_the_ini_keys(project: Project) -> None:
    result = project.run("--help")
    result.stdout.fnmatch_lines([f"  {opt.ini} (string):*" for opt in OPTIONS])


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
