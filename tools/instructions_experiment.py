"""Do instruction counts (``--hpml-instructions``) catch 2% more work, in torch operators or in
plain Python, and stay quiet on an unchanged step, on a busy machine?

Makes a project with the CNN training step of ``noise_experiment.py`` (about 6 ms here) and
three benchmarks of it: unchanged, with extra torch work and with an extra Python loop. A first
run records the counts with nothing added, and counts the extra pieces alone, so that each is
sized to 2% of the step's instructions. Then N compare runs with both added (time threshold
99%, out of the way), each judged on its instruction counts alone.

``--hogs 2`` starts two CPU-bound processes (``python -c "while True: pass"``) for the whole
experiment.

    python tools/instructions_experiment.py --runs 20 --hogs 2 [--out results.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from noise_experiment import CNN

WORK = (
    "import os\n\nimport torch\n\nSCALE = 1\n"
    + CNN
    + """

TORCH_REPS = int(os.environ.get("TORCH_REPS", "0"))
PYTHON_ITERS = int(os.environ.get("PYTHON_ITERS", "0"))
extra = torch.randn(64, 64)


def more_torch(reps):
    for _ in range(reps):
        extra.mul_(1.0)


def more_python(iterations):
    total = 0
    for i in range(iterations):
        total += i
    return total
"""
)
TESTS = """
from work import PYTHON_ITERS, TORCH_REPS, more_python, more_torch, train_steps


def test_unchanged(benchmark):
    benchmark(train_steps)


def test_more_torch(benchmark):
    benchmark(lambda: (train_steps(), more_torch(TORCH_REPS)))


def test_more_python(benchmark):
    benchmark(lambda: (train_steps(), more_python(PYTHON_ITERS)))


def test_unit_torch(benchmark):
    benchmark(more_torch, 100)


def test_unit_python(benchmark):
    benchmark(more_python, 10_000)
"""
OPTIONS = ("--hpml-instructions", "--hpml-threshold=99%", "--hpml-bench-time=0.5")
JUDGED = ("test_unchanged", "test_more_torch", "test_more_python")


def pytest(project: Path, env: dict[str, str], *args: str) -> tuple[dict, float, int]:
    """One run: its JSON report, wall seconds and exit status."""
    report = project / "report.json"
    report.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *OPTIONS]
    start = time.monotonic()
    done = subprocess.run(
        [*command, f"--hpml-report={report}", *args],
        cwd=project,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - start
    if not report.exists():
        raise SystemExit(f"no report (exit {done.returncode}):\n{done.stdout[-3000:]}")
    return json.loads(report.read_text()), seconds, done.returncode


def instructions(report: dict) -> dict[str, dict]:
    """test name -> the instructions metric's verdict (with the counts)."""
    return {
        r["test"].partition("::")[2]: {
            **r["verdicts"]["instructions"],
            **r["metrics"]["instructions"],
        }
        for r in report["results"]
        if "instructions" in r["verdicts"]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--hogs", type=int, default=0, help="CPU-bound processes competing")
    parser.add_argument("--share", type=float, default=0.02, help="extra work, of the step's")
    parser.add_argument("--out", type=Path, help="one JSON line per compare run")
    opts = parser.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(opts.hogs)]
    try:
        with tempfile.TemporaryDirectory() as root:
            experiment(Path(root), opts)
    finally:
        for hog in hogs:
            hog.kill()


def experiment(project: Path, opts: argparse.Namespace) -> None:
    (project / "work.py").write_text(WORK)
    (project / "test_work.py").write_text(TESTS)
    (project / "pytest.ini").write_text("[pytest]\n")
    report, seconds, _ = pytest(project, {}, "--hpml-baseline=update", "--hpml-record-processes=1")
    counted = instructions(report)
    step = counted["test_unchanged"]["value"]
    torch_rep = counted["test_unit_torch"]["value"] / 100
    python_iter = counted["test_unit_python"]["value"] / 10_000
    sizes = {
        "TORCH_REPS": str(round(opts.share * step / torch_rep)),
        "PYTHON_ITERS": str(round(opts.share * step / python_iter)),
    }
    print(f"recorded in {seconds:.0f} s: step {step:,} instructions; added {sizes}", flush=True)
    caught = {name: 0 for name in JUDGED}
    changes: dict[str, list[float]] = {name: [] for name in JUDGED}
    walls = []
    for index in range(opts.runs):
        report, seconds, status = pytest(
            project, sizes, "--hpml-baseline=compare", "--hpml-processes=1", "-k", "not unit"
        )
        walls.append(seconds)
        found = instructions(report)
        line = {"run": index + 1, "seconds": round(seconds, 1), "exit": status}
        for name in JUDGED:
            verdict = found[name]
            caught[name] += verdict["verdict"] == "regressed"
            changes[name].append(verdict["change"])
            line[name] = {k: verdict[k] for k in ("verdict", "change", "value", "calls")}
            line[name]["reason"] = str(verdict.get("reason", ""))[:300]
        print(json.dumps(line), flush=True)
        if opts.out:
            with opts.out.open("a") as out:
                out.write(json.dumps(line) + "\n")
    for name in JUDGED:
        low, high = min(changes[name]), max(changes[name])
        print(
            f"{name}: regressed {caught[name]} of {opts.runs}; change {low:+.3%} to {high:+.3%} "
            f"(median {statistics.median(changes[name]):+.3%})"
        )
    middle, low, high = statistics.median(walls), min(walls), max(walls)
    print(f"seconds per compare run: median {middle:.0f} ({low:.0f} to {high:.0f})")


if __name__ == "__main__":
    main()
