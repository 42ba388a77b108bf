"""Errors: bad option values and unusable devices stop the run (exit 4) with one clear line;
wrong marker arguments are collection errors naming the test, without a traceback."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    from tests.conftest import Project

# option, bad value, what the error says about it
BAD_VALUES = [
    ("device", "tpu", "unknown device 'tpu'; choose from auto, cpu, cuda, cuda:N, mps"),
    ("precision", "fp8", "unknown precision 'fp8'; choose from fp32, tf32, fp16, bf16"),
    (
        "backend",
        "inductor:fast",
        "invalid backend 'inductor:fast': only inductor takes a mode, one of default, "
        "reduce-overhead, max-autotune, max-autotune-no-cudagraphs",
    ),
    (
        "dist_backend",
        "mpich",
        "unknown distributed backend 'mpich'; choose from auto, gloo, nccl, mpi",
    ),
    ("workers", "-1", "unknown worker count '-1'; choose from integers >= 0 or auto"),
    ("workers", "\u00b2", "unknown worker count '\u00b2'; choose from integers >= 0 or auto"),
    ("seed", "abc", "seed must be an integer, got 'abc'"),
    ("seed", "4294967296", "seed must be in [0, 2**32), got 4294967296"),
    ("baseline", "keep", "unknown baseline mode 'keep'; choose from compare, update"),
    ("threshold", "ten", "expected a fraction such as 0.1 or 10%, got 'ten'"),
    ("threshold", "0", "expected a positive fraction or percentage, got '0'"),
    ("threshold", "5", "expected a fraction below 1 (0.05 is 5%), got '5'; write 5% for 5 percent"),
    ("threshold", "nan", "expected a positive fraction or percentage, got 'nan'"),
    ("threshold", "inf%", "expected a positive fraction or percentage, got 'inf%'"),
    ("threshold", "2000%", "expected at most 1000%, got '2000%'"),
    ("workers", "100000", "worker count 100000 is more than 256; choose fewer"),
    ("bench_time", "-1", "expected seconds in (0, 3600], got '-1'"),
    ("bench_time", "1s", "expected seconds, got '1s'"),
]

# where the error says the value came from, per source
ORIGINS = {
    "cli": "argument --hpml-{dashed}:",
    "env": "HPML_{upper}={value}:",
    "ini": "ini hpml_{option} = {value} (",
    "toml": "ini hpml_{option} = {value} (",
}


def assert_usage_error(result: pytest.RunResult, *fragments: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = result.stderr.str()
    for fragment in fragments:
        assert fragment in errors


@pytest.mark.parametrize(
    ("option", "value", "message"),
    BAD_VALUES,
    ids=[f"{option}-{value}" for option, value, _ in BAD_VALUES],
)
def test_bad_value_is_a_usage_error_naming_the_choices(
    project: Project, source: str, option: str, value: str, message: str
) -> None:
    result = project.run(*project.configure(source, **{option: value}))
    origin = ORIGINS[source].format(
        option=option, dashed=option.replace("_", "-"), upper=option.upper(), value=value
    )
    assert_usage_error(result, origin, message)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("env", "HPML_RUN_SLOW=maybe: expected true or false, got 'maybe'"),
        ("ini", "'maybe'"),  # pytest parses the bool ini key itself
    ],
)
def test_bad_run_slow_value_is_a_usage_error(project: Project, where: str, message: str) -> None:
    assert_usage_error(project.run(*project.configure(where, run_slow="maybe")), message)


def test_unknown_compile_backend_is_a_usage_error_listing_the_known_ones(
    project: Project, source: str
) -> None:
    project.write_probe()
    result = project.run(*project.configure(source, backend="eager,nosuch"))
    named = {"cli": "--hpml-backend", "env": "HPML_BACKEND"}.get(source, "ini hpml_backend")
    assert_usage_error(result, f"{named}: unknown torch.compile backend(s) nosuch; choose from ")
    assert len(project.error_lines(result)) == 1
    assert {"aot_eager", "eager", "inductor"} <= set(
        project.error_lines(result)[0].rpartition("choose from ")[2].split(", ")
    )


def test_unknown_compile_backend_is_ignored_without_backend_tests(project: Project) -> None:
    project.write_step()
    project.run("--hpml-backend=nosuch").assert_outcomes(passed=1)


def test_cuda_device_without_gpu_is_one_usage_error(project: Project, no_cuda_env: None) -> None:
    project.write_step()
    result = project.run_subprocess("--hpml-device=cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = project.error_lines(result)
    for fact in (f"torch {torch.__version__}", "sees 0", "CUDA_VISIBLE_DEVICES=''"):
        assert fact in line


def test_mps_device_off_apple_silicon_is_a_usage_error(project: Project) -> None:
    if torch.backends.mps.is_available():
        pytest.skip("MPS is available here")
    project.write_step()
    result = project.run("--hpml-device=mps")
    assert_usage_error(result, f"torch {torch.__version__}", "reports MPS unavailable")
    assert len(project.error_lines(result)) == 1


@pytest.mark.parametrize(
    ("mark", "message"),
    [
        ("gpu(count=0)", "count must be a positive integer, got 0"),
        ("gpu(cnt=2)", "got an unexpected keyword argument 'cnt'"),
        ("gpu(capability=8)", "capability must be a (major, minor) tuple"),
        ("precision('fp8x')", "unknown precision 'fp8x'; choose from fp32, tf32, fp16, bf16"),
        ("device('tpu')", "unknown device 'tpu'; choose from cpu, cuda, mps"),
        ("slow(1)", "slow takes no arguments"),
        ("hpml_bench(threshold=-0.1)", "threshold must be a fraction between 0 and 1"),
        ("hpml_bench(threshold=5)", "threshold must be a fraction between 0 and 1 such as 0.05"),
        ("hpml_bench(threshold=float('nan'))", "threshold must be a fraction between 0 and 1"),
        ("gpu(memory_gb=float('nan'))", "memory_gb must be a positive number of GiB, got nan"),
        ("distributed(timeout=float('inf'))", "timeout must be a positive number of seconds"),
        ("hpml_bench(batch_size=2.5)", "batch_size must be a positive integer, got 2.5"),
        (
            "hpml_bench(0.1, 8, True, {}, True, 1)",
            "too many positional arguments; hpml_bench(threshold=",
        ),
        ("hpml_bench(work=1)", "work must be True or False, got 1"),
        ("hpml_bench(instructions='no')", "instructions must be True or False, got 'no'"),
        ('hpml_bench(tolerance={"ops": 2})', "tolerance must map a count's name to a fraction"),
    ],
)
def test_wrong_marker_is_a_collection_error_naming_the_test(
    project: Project, mark: str, message: str
) -> None:
    project.write_tests(f"import pytest\n\n\n@pytest.mark.{mark}\ndef test_marked():\n    pass\n")
    result = project.run()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=1)
    name = mark.partition("(")[0]
    result.stdout.fnmatch_lines([f"*test_inner.py::test_marked: wrong @pytest.mark.{name}: *"])
    output = result.stdout.str()
    assert message in output
    assert "Traceback" not in output
    assert "pytest_hpml" not in output


SEVERAL_WRONG = """
import pytest


@pytest.mark.gpu(count=0)
def test_no_gpus():
    pass


@pytest.mark.precision("fp8x")
def test_fp8(precision):
    pass


def test_good():
    pass
"""


def test_every_wrong_marker_of_a_file_is_reported_and_the_others_still_run(
    project: Project,
) -> None:
    project.write_tests(SEVERAL_WRONG)
    result = project.run()
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "*test_inner.py::test_no_gpus: wrong @pytest.mark.gpu: count must be a positive*",
            "*test_inner.py::test_fp8: wrong @pytest.mark.precision: unknown precision 'fp8x'*",
        ]
    )
    project.run("-k", "good").assert_outcomes(passed=1)
