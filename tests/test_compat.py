"""Private APIs behind ``_compat``: a version without them is one clear usage error."""

from __future__ import annotations

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
