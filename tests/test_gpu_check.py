"""tools/gpu_check.sh, the GPU run plan: what of it runs without a GPU. Its command line, the
steps it lists and prints, and a run of the steps that end on a CPU (with CUDA hidden, so that
they end alike on any machine): the folder, the logs and the summary it writes, a failed step
followed by the next, a step stopped at its time limit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "gpu_check.sh"
STEPS = [
    "env",
    "install",
    "tests-cuda-1",
    "tests-cuda-2",
    "suites-cuda",
    "timing-fidelity",
    "mfu",
    "baselines",
    "against",
]


def gpu_check(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=cwd,
        env={**os.environ, "PYTHON": sys.executable, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def commands(out: str) -> dict[str, str]:
    """The steps of a --dry-run and their commands."""
    lines = out.splitlines()
    return {line.split()[1]: lines[i + 1] for i, line in enumerate(lines) if line.startswith("# ")}


def test_list_names_every_step_in_order(tmp_path: Path) -> None:
    done = gpu_check("--list", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == STEPS
    assert list(tmp_path.iterdir()) == []


def test_help_says_how_to_use_it(tmp_path: Path) -> None:
    done = gpu_check("--help", cwd=tmp_path)
    assert done.returncode == 0
    assert "Usage: tools/gpu_check.sh [--out DIR] [--steps a,b,c]" in done.stdout
    assert "summary.txt" in done.stdout


def test_a_dry_run_prints_every_command_and_runs_nothing(tmp_path: Path) -> None:
    done = gpu_check("--dry-run", "--out", "checked", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = commands(done.stdout)
    assert list(found) == STEPS
    out = tmp_path / "checked"
    assert not out.exists()
    assert f"--hpml-report={out}/suites-cuda.json" in found["suites-cuda"]
    assert (
        "--hpml-precision=fp32,tf32,fp16,bf16 --hpml-backend=eager,inductor"
        in (found["suites-cuda"])
    )
    assert f"tools/gpu_timing.py --out {out}/timing.json" in found["timing-fidelity"]
    assert "tools/gpu_mfu.py --hpml-device=cuda" in found["mfu"]
    assert f"--hpml-baseline=update --hpml-baseline-dir={out}/baselines" in found["baselines"]
    assert "--hpml-against=HEAD -k " in found["against"]
    assert found["install"].startswith(f"{sys.executable} -m pip install --no-deps -e .")
    assert "--find-links wheels nni" in found["install"]


def test_the_two_halves_of_the_tests_hold_every_test_file_once(tmp_path: Path) -> None:
    found = commands(gpu_check("--dry-run", cwd=tmp_path).stdout)
    halves = [re.findall(r"tests/test_\w+\.py", found[f"tests-cuda-{n}"]) for n in (1, 2)]
    every = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py"))
    assert sorted(halves[0] + halves[1]) == every
    assert abs(len(halves[0]) - len(halves[1])) <= 1
    for command in (found["tests-cuda-1"], found["tests-cuda-2"]):
        assert "--hpml-device=cuda --hpml-baseline=off -x -q -p no:cacheprovider" in command


def test_the_folder_defaults_to_a_dated_one_here(tmp_path: Path) -> None:
    found = commands(gpu_check("--dry-run", "--steps=timing-fidelity", cwd=tmp_path).stdout)
    assert re.search(
        rf"--out {re.escape(str(tmp_path))}/gpu-check-\d{{8}}-\d{{6}}/timing.json$",
        found["timing-fidelity"],
    )


def test_steps_run_in_the_plans_order_whatever_the_order_asked(tmp_path: Path) -> None:
    done = gpu_check("--dry-run", "--steps", "mfu,env,mfu", cwd=tmp_path)
    assert list(commands(done.stdout)) == ["env", "mfu"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus"], "unknown option '--bogus'"),
        (["extra"], "unknown option 'extra'"),
        (["--out"], "--out needs a directory"),
        (["--out="], "--out needs a directory"),
        (["--steps", "env,gpu"], "unknown step 'gpu'; the steps: env install tests-cuda-1"),
        (["--steps"], "--steps needs a comma list"),
    ],
)
def test_a_wrong_command_line_is_refused(tmp_path: Path, args: list[str], message: str) -> None:
    done = gpu_check(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr
    assert "(see --help)" in done.stderr
    assert done.stdout == ""
    assert list(tmp_path.iterdir()) == []


def summary(path: Path) -> list[tuple[str, ...]]:
    """The summary's lines as (step, exit code, seconds, status)."""
    line = re.compile(r"(\S+) +exit (\d+) +(\d+) s  (.+)")
    return [line.fullmatch(text).groups() for text in path.read_text().splitlines()]  # type: ignore[union-attr]


def test_a_failed_step_is_summed_up_and_the_next_one_runs(
    tmp_path: Path, no_cuda_env: None
) -> None:
    """With CUDA hidden the env step fails (no device 0 to describe) and the timing step
    skips: both are logged, and summed up in the folder."""
    done = gpu_check("--steps", "env,timing-fidelity", "--out", "checked", cwd=tmp_path)
    assert done.returncode == 1
    out = tmp_path / "checked"
    assert sorted(p.name for p in out.iterdir()) == [
        "env.log",
        "env.txt",
        "summary.txt",
        "timing-fidelity.log",
        "timing.json",
    ]
    assert f"torch {torch.__version__}" in (out / "env.txt").read_text()
    assert "skipped: no CUDA" in (out / "timing-fidelity.log").read_text()
    assert json.loads((out / "timing.json").read_text())["skipped"].startswith("skipped: no CUDA")
    rows = summary(out / "summary.txt")
    assert [(row[0], row[1], row[3]) for row in rows] == [
        ("env", "1", "failed"),
        ("timing-fidelity", "0", "ok"),
    ]
    assert done.stdout.endswith((out / "summary.txt").read_text())


def test_a_step_is_stopped_at_its_time_limit(tmp_path: Path) -> None:
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nsleep 60\n")
    slow.chmod(0o755)
    started = time.monotonic()
    done = gpu_check(
        "--steps=timing-fidelity",
        "--out=checked",
        cwd=tmp_path,
        env={"PYTHON": str(slow), "GPU_CHECK_STEP_TIMEOUT": "1"},
    )
    assert time.monotonic() - started < 30
    assert done.returncode == 1
    [row] = summary(tmp_path / "checked" / "summary.txt")
    assert (row[0], row[1], row[3]) == ("timing-fidelity", "124", "timed out after 1 s")


def test_the_timing_tool_skips_without_cuda(tmp_path: Path, no_cuda_env: None) -> None:
    out = tmp_path / "timing.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gpu_timing.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("skipped: no CUDA")
    assert "skipped" in json.loads(out.read_text())
