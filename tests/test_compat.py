"""Private APIs behind ``_compat``: a version without them is one clear usage error."""

from __future__ import annotations

import os

import pytest

from pytest_hpml import _compat


@pytest.mark.parametrize("version", ["3.4.1", "6.0.0", "7.1"])
def test_an_unsupported_pytest_benchmark_is_named_with_the_supported_range(version: str) -> None:
    with pytest.raises(_compat.UnsupportedVersion, match=rf"pytest-benchmark {version} .*>=4.0,<6"):
        _compat.check_pytest_benchmark(version)


@pytest.mark.parametrize("version", ["4.0.0", "5.1.0", "5.3.1.dev2"])
def test_a_supported_pytest_benchmark_passes(version: str) -> None:
    _compat.check_pytest_benchmark(version)


def test_a_missing_private_attribute_names_the_version_found() -> None:
    class Fixture:  # what a future pytest-benchmark without _timer would hand over
        pass

    with pytest.raises(_compat.UnsupportedVersion, match=r"Fixture\._timer of pytest-benchmark"):
        _compat.timer(Fixture())


# The oldest pytest and pytest-benchmark pytest-hpml supports, installed into a directory of
# their own that goes first on PYTHONPATH (tox -e tests does it; pytest 9 needs
# pytest-benchmark 5.3.1, the newest, which the environment itself has).
OLDEST = os.environ.get("PYTEST_HPML_OLDEST", "")
INNER = "def test_sum(benchmark):\n    benchmark(sum, range(100))\n"


@pytest.mark.skipif(
    not OLDEST,
    reason="needs pytest 8.0.2 and pytest-benchmark 4.0.0 in PYTEST_HPML_OLDEST=DIR "
    "(tox -e tests installs them)",
)
def test_the_oldest_supported_pytest_and_pytest_benchmark_work(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [OLDEST, os.environ.get("PYTHONPATH")]))
    )
    pytester.makepyfile(test_inner=INNER)
    alone = pytester.runpytest_subprocess()
    alone.assert_outcomes(passed=1)
    alone.stdout.fnmatch_lines(["platform * pytest-8.0.2*", "benchmark: 4.0.0 *"])
    alone.stdout.no_fnmatch_line("*hpml benchmarks*")
    opted = pytester.runpytest_subprocess(
        "--hpml-benchmarks", "--hpml-baseline=off", "--hpml-bench-time=0.2", "--benchmark-verbose"
    )
    opted.assert_outcomes(passed=1)
    opted.stdout.fnmatch_lines(
        ["benchmark: 4.0.0 *", "*hpml benchmarks*", "test_inner.py::test_sum *"]
    )
