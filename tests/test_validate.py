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
