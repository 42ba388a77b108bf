"""Project-wide test configuration: pytester for the plugin's tests, hypothesis profiles."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["pytester"]

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis comes with the "suites"/"test" extras
    pass
else:
    # ci: derandomized (same examples every run) and no deadline (torch ops vary in time).
    settings.register_profile(
        "ci",
        derandomize=True,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile("dev", deadline=None, max_examples=20)
    # Without --hypothesis-profile: random examples, but no deadline either. Examples that
    # start DataLoader workers or train a model take 0.1-1 s on a busy 2-core machine.
    settings.register_profile("hpml", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("hpml")


@pytest.fixture(autouse=True)
def _no_hpml_environment(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Keep HPML_* variables of the outer run out of the plugin's own pytester runs."""
    if "pytester" in request.fixturenames:
        for name in list(os.environ):
            if name.startswith("HPML_"):
                monkeypatch.delenv(name)
