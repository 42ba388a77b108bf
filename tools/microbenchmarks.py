"""What pytest-hpml costs 20 microbenchmarks of small torch ops (a few microseconds a call).

Writes a project of 20 pytest-benchmark tests and runs it, in fresh processes:

1. pytest-benchmark alone (``-p no:hpml``) and with pytest-hpml installed but not opted in,
   alternated ``--pairs`` times: the ratio of their wall times, and of their rounds;
2. opted in (``--hpml-benchmarks``): recording the baselines (``--hpml-baseline=update``), then
   comparing with them, each timed, with each benchmark's rounds beside the rounds
   pytest-benchmark alone takes for it, both per second of measuring (the time its
   ``--benchmark-verbose`` log says its rounds ran for; for pytest-hpml, those of the first
   process, the reference workload included).

    python tools/microbenchmarks.py [--pairs 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

OPS = {
    "add": "a + b",
    "mul": "a * b",
    "sub": "a - b",
    "div": "a / (b.abs() + 1)",
    "relu": "a.relu()",
    "sigmoid": "a.sigmoid()",
    "tanh": "a.tanh()",
    "exp": "a.exp()",
    "sum": "a.sum()",
    "mean": "a.mean()",
    "max": "a.max()",
    "matmul": "m @ m",
    "transpose": "m.t().contiguous()",
    "cat": "torch.cat([a, b])",
    "stack": "torch.stack([a, b])",
    "view": "a.view(8, 8)",
    "clone": "a.clone()",
    "softmax": "torch.softmax(a, 0)",
    "linear": "torch.nn.functional.linear(m, m)",
    "layer_norm": "torch.nn.functional.layer_norm(m, (8,))",
}
HEADER = textwrap.dedent(
    """
    import torch

    torch.set_num_threads(1)
    a, b, m = torch.randn(64), torch.randn(64), torch.randn(8, 8)
    """
)


def project(path: Path) -> None:
    tests = "".join(
        f"\n\ndef test_{name}(benchmark):\n    benchmark(lambda: {expr})\n"
        for name, expr in OPS.items()
    )
    (path / "test_ops.py").write_text(HEADER + tests)


RAN = re.compile(r"Ran for ([\d.]+)(m|u|n)?s\.")
SCALE = {"": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def run(path: Path, *args: str) -> tuple[float, dict[str, dict[str, float]], int]:
    """Wall seconds, each benchmark's rounds and the seconds its rounds took (as
    ``--benchmark-verbose`` says, in the order the tests ran), and the exit code."""
    out = path / "out.json"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPML_")}
    start = time.perf_counter()
    done = subprocess.run(
        [*cmd, f"--benchmark-json={out}", "--benchmark-verbose"],
        cwd=path,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    rounds = {
        b["name"]: {"rounds": b["stats"]["rounds"], "iterations": b["stats"]["iterations"]}
        for b in json.loads(out.read_text())["benchmarks"]
    }
    ran = [float(n) * SCALE[unit] for n, unit in RAN.findall(done.stderr)]
    for name, seconds in zip([f"test_{op}" for op in OPS], ran):
        rounds[name]["seconds"] = seconds
    return wall, rounds, done.returncode


def installed_not_opted_in(path: Path, pairs: int) -> None:
    walls: dict[str, list[float]] = {"alone": [], "installed": []}
    counts: dict[str, list[int]] = {"alone": [], "installed": []}
    for i in range(pairs):
        order = ("alone", "installed") if i % 2 == 0 else ("installed", "alone")
        for which in order:
            wall, rounds, _ = run(path, *(["-p", "no:hpml"] if which == "alone" else []))
            walls[which].append(wall)
            counts[which].append(sum(r["rounds"] for r in rounds.values()))
    ratios = [i / a for i, a in zip(walls["installed"], walls["alone"])]
    print("not opted in: wall seconds, pytest-benchmark alone  ", _fmt(walls["alone"]))
    print("not opted in: wall seconds, pytest-hpml installed   ", _fmt(walls["installed"]))
    print(f"not opted in: ratio installed / alone per pair       {_fmt(ratios, 3)}")
    print(f"not opted in: median ratio                           {statistics.median(ratios):.3f}")
    print(
        f"not opted in: rounds in all, alone / installed       {counts['alone']} / "
        f"{counts['installed']}"
    )


def opted_in(path: Path) -> None:
    _, alone, _ = run(path, "-p", "no:hpml")
    record, _, code = run(path, "--hpml-benchmarks", "--hpml-baseline=update")
    compare, compared, verdict = run(path, "--hpml-benchmarks")
    print(
        f"opted in: recording {record:.1f} s (exit {code}), comparing {compare:.1f} s "
        f"(exit {verdict}); together {record + compare:.1f} s"
    )
    print(
        f"{'benchmark':12s} {'alone: rounds x calls':>23s} {'rounds/s':>9s} "
        f"{'hpml: rounds x calls':>21s} {'rounds/s':>9s} {'ratio':>6s}"
    )
    ratios = []
    for name in OPS:
        key = f"test_{name}"
        a, h = alone[key], compared[key]
        base, here = a["rounds"] / a["seconds"], h["rounds"] / h["seconds"]
        ratios.append(here / base)
        print(
            f"{key:12s} {a['rounds']:>15d} x {a['iterations']:>5d} {base:9.0f} "
            f"{h['rounds']:>13d} x {h['iterations']:>5d} {here:9.0f} {here / base:6.2f}"
        )
    print(
        f"rounds per second of measuring, hpml / alone: median {statistics.median(ratios):.2f}, "
        f"min {min(ratios):.2f}"
    )


def _fmt(values: list[float], digits: int = 1) -> str:
    return " ".join(f"{v:.{digits}f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write the project here instead of a temp dir")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = opts.keep or Path(tmp)
        path.mkdir(parents=True, exist_ok=True)
        project(path)
        installed_not_opted_in(path, opts.pairs)
        opted_in(path)


if __name__ == "__main__":
    main()
