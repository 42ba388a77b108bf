"""A run of pure-Python benchmarks never imports torch: the machine fingerprint its baselines
are keyed by reads torch's version from its files, and GPUs are counted in a short-lived
process, so the run pays neither torch's import time nor its memory."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import torch

from pytest_hpml import _compat
from pytest_hpml.hardware import fingerprint
from pytest_hpml.hardware.devices import Hardware, import_torch
from pytest_hpml.verdict import stats

if TYPE_CHECKING:
    import pytest

    from tests.conftest import Project

PURE_PYTHON = """
def test_sum(benchmark):
    benchmark(sum, range(100))


def test_sorted(benchmark):
    benchmark(sorted, range(100, 0, -1))
"""

TESTS = ("test_inner.py::test_sum", "test_inner.py::test_sorted")

# Computes the fingerprint in a fresh interpreter, then says whether torch got imported.
FINGERPRINT = """
import json, sys
from pytest_hpml.hardware import fingerprint
from pytest_hpml.hardware.devices import Hardware

print(json.dumps(fingerprint.current(Hardware()).as_dict()))
print(json.dumps(sorted(m for m in sys.modules if m.partition(".")[0] == "torch")))
"""


def pure_python_project(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("HPML_BENCH_TIME", "0.2")
    project.write_tests(PURE_PYTHON)
    return project


def test_compare_run_of_pure_python_benchmarks_never_imports_torch(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    pure_python_project(project, monkeypatch)
    recorded = project.run_subprocess("--hpml-baseline=update")
    assert recorded.parseoutcomes()["passed"] == 2, recorded.stdout.str()
    compared = project.run_subprocess()  # compare: the default mode
    assert compared.parseoutcomes()["passed"] == 2, compared.stdout.str()
    assert project.torch_imported() == [False, False]
    verdicts = project.verdicts(compared)
    assert set(verdicts) == {(test, "time") for test in TESTS}
    # A baseline was found: both runs keyed it by the same machine.
    assert stats.NO_BASELINE not in verdicts.values()


def test_pure_python_run_keys_baselines_by_the_fingerprint_torch_gives(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    pure_python_project(project, monkeypatch)
    project.run_subprocess("--hpml-baseline=update").assert_outcomes(passed=2)
    assert project.torch_imported() == [False]
    stored = json.loads(project.baseline_files()["machine"].read_text())["fingerprint"]
    assert "torch" in sys.modules  # here it is: the fingerprint is read through torch
    assert stored == fingerprint.current(Hardware()).as_dict()


def test_fingerprint_without_torch_equals_the_one_with_it() -> None:
    out = subprocess.run(
        [sys.executable, "-c", FINGERPRINT], capture_output=True, text=True, check=True
    )
    found, loaded = (json.loads(line) for line in out.stdout.splitlines())
    assert loaded == []
    assert found == fingerprint.current(Hardware()).as_dict()


def test_torch_version_is_read_as_torch_reports_it() -> None:
    code = (
        "import sys\n"
        "from pytest_hpml import _compat\n"
        "from pytest_hpml.hardware.devices import import_torch\n"
        "print(list(_compat.torch_version_info(import_torch)))\n"
        "print(sorted(m for m in sys.modules if m.partition('.')[0] == 'torch'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    version, loaded = out.stdout.splitlines()
    assert version == str([str(torch.__version__), torch.version.cuda])
    assert loaded == "[]"
    # Where torch is loaded, the module itself says.
    assert _compat.torch_version_info(import_torch) == (torch.__version__, torch.version.cuda)
