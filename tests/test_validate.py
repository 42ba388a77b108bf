"""tools/validate.py on one case of the corpus of real changes (validation/): kornia's focal
loss, whose 0.6 release computes a second softmax pass and reduces with an einsum (kornia
PR 1362). The runner builds both sides from wheels, runs the gate and pytest-benchmark, and
writes the table; the gate must fail the case, naming operators that changed.

The wheels are downloaded by ``tox -e tests`` (PYTEST_HPML_WHEELS); outside tox the test is
skipped with that reason. Instruction counts are left out here (minutes under valgrind).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
CASE = "kornia-focal-loss-einsum"
WHEELS = os.environ.get("PYTEST_HPML_WHEELS", "")


@pytest.mark.skipif(
    not WHEELS, reason="needs the case's wheels: tox -e tests downloads them (PYTEST_HPML_WHEELS)"
)
def test_the_runner_fails_a_real_regression_and_names_what_changed(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable, str(ROOT / "tools" / "validate.py"), "--only", CASE,
            "--no-instructions", "--wheels", WHEELS,
            "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"),
        ],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    row = json.loads((tmp_path / "out" / "results.json").read_text())["cases"][0]
    gate = row["gate"]
    assert gate["exit"] == 1, row  # the regression fails the gate's run
    assert gate["counters"]["verdict"] == "regressed", gate
    assert "aten::" in gate["counters"]["named"], gate
    assert row["correct"] is True
    assert row["pytest_benchmark"]["base_exit"] == 0, row
    table = (tmp_path / "out" / "results.md").read_text()
    assert f"| {CASE} | kornia | 0.5.11 -> 0.6.1 | regressed |" in table
    assert "- regressed: the gate right on 1 of 1" in table


def test_the_scale_corpus_loads_and_its_table_counts_each_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The manifests of validation/suites are whole, and a run's row counts what it said."""
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import validate_suites

    folders = sorted(p for p in (ROOT / "validation" / "suites").iterdir() if p.is_dir())
    suites = [validate_suites.load_suite(p) for p in folders]
    assert len(suites) >= 2
    assert any(s.get("known") for s in suites), "a release pair names the changes it holds"
    times = {f"t.py::test_{i}": "pass" for i in range(84)}
    times |= {"t.py::test_x": "inconclusive", "t.py::test_y": "improved"}
    gate = {"exit": 0, "wall": 258.4, "times": times, "benchmarks": 86, "unsettled": 4}
    row = {
        "name": "suite", "release": "1.0",
        "unchanged": [
            {"run": 1, "hogs": 0, "gate": gate, "plain": {"exits": [0, 0], "wall": 166.0}},
            {"run": 2, "hogs": 2, "gate": gate, "plain": None},
        ],
    }  # fmt: skip
    lines = validate_suites.table([row]).splitlines()
    assert lines[2] == "| suite 1.0 | 1 | none | 0 | 86 | 0 | 1 | 1 | 4 | 258 | 166 | 1.56x |"
    assert lines[3] == "| suite 1.0 | 2 | 2 CPU hogs | 0 | 86 | 0 | 1 | 1 | 4 | 258 | - | - |"
