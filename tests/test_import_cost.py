"""Import cost: the plugin loads into every pytest run, so it must not import torch."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.conftest import Project

HEAVY = ("torch", "torchvision", "nni", "numpy")


def imported_modules(statement: str) -> list[str]:
    """Every module a fresh interpreter imports to run ``statement`` (``-X importtime``)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
    )
    return [
        line.rpartition("|")[2].strip()
        for line in out.stderr.splitlines()
        if line.startswith("import time:")
    ]


def test_importing_the_plugin_imports_no_heavy_library() -> None:
    modules = imported_modules("import pytest_hpml.plugin")
    assert "pytest_hpml.plugin" in modules
    assert [m for m in modules if m.partition(".")[0] in HEAVY] == []


@pytest.mark.parametrize(
    ("helper", "module"),
    [("assert_optimizer_matches", "helpers.optim"), ("assert_shrinks", "helpers.pruning")],
)
def test_a_helper_and_torch_are_imported_only_when_the_helper_is_used(
    helper: str, module: str
) -> None:
    code = (
        "import sys, pytest_hpml\n"
        f"heavy = lambda: sorted({{'torch', 'nni', 'pytest_hpml.{module}'}} & set(sys.modules))\n"
        "print(heavy())\n"
        f"pytest_hpml.{helper}\n"
        "print(heavy())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # nni neither: prune() imports it on its first call.
    assert out.stdout.splitlines() == ["[]", f"['pytest_hpml.{module}', 'torch']"]


@pytest.mark.parametrize(
    "tests",
    [
        "def test_plain():\n    pass\n",
        "import pytest\n\n\n@pytest.mark.slow\ndef test_slow():\n    pass\n",
    ],
    ids=["plain", "slow-marked"],
)
def test_run_of_a_project_without_torch_never_imports_it(project: Project, tests: str) -> None:
    project.write_tests(tests)
    project.run_subprocess("--hpml-run-slow").assert_outcomes(passed=1)
    assert project.torch_imported() == [False]


# What a run of a project that uses nothing of pytest-hpml imports of it: the option table and
# marker checks, the role of the process, and the two fixture modules pytest must know.
START_UP = [
    "pytest_hpml",
    "pytest_hpml._compat",
    "pytest_hpml.bench",
    "pytest_hpml.bench.fixture",
    "pytest_hpml.config",
    "pytest_hpml.config.markers",
    "pytest_hpml.config.options",
    "pytest_hpml.config.resolution",
    "pytest_hpml.config.role",
    "pytest_hpml.config.values",
    "pytest_hpml.fixtures",
    "pytest_hpml.fixtures.fixtures",
    "pytest_hpml.hookspecs",
    "pytest_hpml.plugin",
    "pytest_hpml.report",
    "pytest_hpml.report.header",
]


def test_a_project_that_uses_no_hpml_feature_loads_only_the_start_up_modules(
    project: Project,
) -> None:
    project.write_tests("def test_plain():\n    assert True\n")
    project.pytester.makeconftest(
        "import sys\n\n\n"
        "def pytest_sessionfinish(session):\n"
        "    loaded = sorted(m for m in sys.modules if m.startswith('pytest_hpml'))\n"
        "    (session.config.rootpath / 'loaded.txt').write_text('\\n'.join(loaded))\n"
    )
    project.run_subprocess().assert_outcomes(passed=1)
    assert (project.path / "loaded.txt").read_text().split() == START_UP
