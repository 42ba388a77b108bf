"""Errors: bad option values and unusable devices stop the run (exit 4) with one clear line;
wrong marker arguments are collection errors naming the test, without a traceback."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch

from pytest_hpml.config.values import MAX_DEVICE_INDEX, MAX_RANKS, MAX_THREADS, shown

if TYPE_CHECKING:
    from tests.conftest import Project

# option, bad value, what the error says about it
BAD_VALUES = [
    ("device", "tpu", "unknown device 'tpu'; choose from auto, cpu, cuda, cuda:N, mps"),
    ("precision", "fp8", "unknown precision 'fp8'; choose from fp32, tf32, fp16, bf16"),
    (
        "backend",
        "inductor:fast",
        "invalid backend 'inductor:fast': 'fast' is no mode of inductor; choose from default, "
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
    # a count that crashes the process (libgomp aborts at 20000 threads), or starts too many
    (
        "threads",
        "20000",
        f"expected auto or a positive number of threads (at most {MAX_THREADS}), got '20000'",
    ),
    (
        "max_ranks",
        "40000",
        f"expected auto or a positive number of ranks (at most {MAX_RANKS}), got '40000'",
    ),
    ("pairs", "9" * 40, f"expected 2 to 32 pairs, got '{'9' * 40}'"),
    # text that only looks right: fullwidth letters, a digit torch does not read
    ("device", "\uff43\uff50\uff55", "unknown device '\uff43\uff50\uff55'; choose from auto"),
    ("device", "cuda:\u0661", "unknown device 'cuda:\u0661'; choose from auto"),
    # numbers in ASCII digits only, as the device index: int() reads any script's digits
    ("workers", "\u0663", "'\u0663' is ARABIC-INDIC DIGIT THREE, not ASCII"),
    ("seed", "\uff11\uff12", "seed must be an integer, got '\uff11\uff12'; '\uff11' is FULLWIDTH"),
    ("threshold", "0.\uff15", "got '0.\uff15'; '\uff15' is FULLWIDTH DIGIT FIVE, not ASCII"),
    # an index torch would wrap around to another device (cuda:256 is cuda:0)
    ("device", "cuda:256", f"torch numbers devices from 0 to {MAX_DEVICE_INDEX}"),
    # a mode left empty is no backend of its own
    ("backend", "inductor:", "invalid backend 'inductor:': '' is no mode of inductor; choose"),
    ("seed", "-1", "seed must be in [0, 2**32), got -1"),
    # what no setting holds: a control character, a pasted file
    ("machine", "a\x1bb", "the value contains the control character '\\x1b'; remove it"),
    ("report", "x" * 5000, "a value of 5000 characters; at most 4096"),
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
    ids=[f"{option}-{ascii(value)[1:30]}" for option, value, _ in BAD_VALUES],
)
def test_bad_value_is_a_usage_error_naming_the_choices(
    project: Project, source: str, option: str, value: str, message: str
) -> None:
    result = project.run(*project.configure(source, **{option: value}))
    origin = ORIGINS[source].format(
        option=option, dashed=option.replace("_", "-"), upper=option.upper(), value=shown(value)
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


def named(source: str, option: str) -> str:
    """How a message names ``option`` set from ``source``."""
    return {"cli": f"--hpml-{option.replace('_', '-')}", "env": f"HPML_{option.upper()}"}.get(
        source, f"ini hpml_{option}"
    )


def not_opted_in(project: Project) -> None:
    """Unset the variables that make every inner project an hpml project."""
    for name in ("HPML_BENCHMARKS", "HPML_PROCESSES", "HPML_RECORD_PROCESSES"):
        project.monkeypatch.delenv(name)


PLAIN = "def test_plain():\n    pass\n"


@pytest.mark.parametrize(
    ("option", "value"),
    [("pairs", "3"), ("against_python", "/no/such/python"), ("against_paths", "src")],
)
def test_an_option_of_head_against_base_without_against_is_a_usage_error(
    project: Project, source: str, option: str, value: str
) -> None:
    """Given for this run it would be ignored; in the ini file it is standing configuration
    for the runs that give --hpml-against, and no error."""
    project.write_tests(PLAIN)
    result = project.run(*project.configure(source, **{option: value}))
    if source in ("ini", "toml"):
        result.assert_outcomes(passed=1)
        return
    given = named(source, option)
    drop = f"unset {given}" if source == "env" else f"drop {given}"
    assert_usage_error(
        result,
        f"{given} applies only with --hpml-against, which is not given; give --hpml-against, "
        f"or {drop}",
    )
    assert len(project.error_lines(result)) == 1


@pytest.mark.parametrize(("off", "given"), [("env", "cli"), ("ini", "cli"), ("ini", "env")])
def test_a_benchmark_option_given_while_benchmarks_are_off_is_a_usage_error(
    project: Project, off: str, given: str
) -> None:
    """HPML_BENCHMARKS=0 pytest --hpml-baseline=update --hpml-report=r.json ran, wrote
    nothing and said nothing."""
    not_opted_in(project)
    project.write_tests(PLAIN)
    args = project.configure(off, benchmarks="0")
    args += project.configure(given, baseline="update", report="r.json")
    result = project.run(*args)
    drop = f"unset {named(given, 'baseline')}" if given == "env" else "drop --hpml-baseline"
    assert_usage_error(
        result,
        f"{named(given, 'baseline')} is an option of pytest-hpml's benchmarks, but "
        f"{named(off, 'benchmarks')} turned them off; {drop}, or turn them on with "
        "--hpml-benchmarks",
    )
    made = sorted(p.name for p in project.path.iterdir() if p.name != "__pycache__")
    assert made == ["conftest.py", "test_inner.py"] + (["tox.ini"] if off == "ini" else [])


def test_a_benchmark_option_of_the_ini_file_while_benchmarks_are_off_is_no_error(
    project: Project,
) -> None:
    not_opted_in(project)
    project.write_tests(PLAIN)
    project.configure("env", benchmarks="0")
    project.configure("ini", report="r.json")
    project.run().assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("args", "asks"),
    [
        (("--hpml-benchmarks",), "--hpml-benchmarks"),
        ((), "HPML_BENCHMARKS"),
        (("--hpml-report=r.json",), "--hpml-report"),
    ],
)
def test_hpml_benchmarks_asked_for_without_pytest_benchmark_is_a_usage_error(
    project: Project, args: tuple[str, ...], asks: str
) -> None:
    """They measure with pytest-benchmark's fixture: without it, every benchmark test failed
    with "recursive dependency involving fixture 'benchmark'"."""
    if asks != "HPML_BENCHMARKS":
        not_opted_in(project)
    project.write_tests(PLAIN)
    result = project.run("-p", "no:benchmark", *args)
    assert_usage_error(
        result,
        f"pytest-benchmark is disabled (-p no:benchmark), but {asks} asks for pytest-hpml's "
        "benchmarks, which measure with its benchmark fixture; drop one",
    )


def test_hpml_benchmarks_of_the_ini_file_are_off_without_pytest_benchmark(
    project: Project,
) -> None:
    """-p no:benchmark is the run's word against the ini file's standing one: the benchmarks
    are off, said once, and the other tests run."""
    not_opted_in(project)
    project.write_tests(PLAIN + "\n\ndef test_bench(benchmark):\n    pass\n")
    project.configure("ini", benchmarks="true")
    result = project.run("-p", "no:benchmark")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*fixture 'benchmark' not found",
            "*PytestConfigWarning: pytest-benchmark is disabled (-p no:benchmark): pytest-hpml's "
            "benchmarks, turned on by ini hpml_benchmarks, are off for this run",
        ]
    )
    assert "recursive dependency" not in result.stdout.str()


def test_a_run_that_asks_nothing_of_pytest_hpml_is_not_broken_by_no_benchmark(
    project: Project,
) -> None:
    not_opted_in(project)
    project.write_tests(PLAIN)
    result = project.run("-p", "no:benchmark")
    result.assert_outcomes(passed=1)
    assert "PytestConfigWarning" not in result.stdout.str()


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
