"""Does a baseline comparison fail on real regressions and stay quiet on noise?

Records a baseline of a CPU benchmark of a few milliseconds per call, then runs N sessions of
the unchanged benchmark and N of a version doing 15% more work, interleaved, and counts how
many each tool calls a regression: pytest-hpml with default settings (so each session measures
in --hpml-processes processes, 3 by default), and pytest-benchmark with
``--benchmark-compare-fail=median:10%``.

    python tools/noise_experiment.py --runs 20 [--appends 2] [--keep DIR]

``--appends N`` records pytest-hpml's baseline in 1 + N processes (update, then append);
``--keep DIR`` saves each compare run's JSON report there for analysis.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

BENCHMARK = textwrap.dedent(
    """
    import os

    import torch

    torch.manual_seed(0)
    SCALE = float(os.environ.get("WORK_SCALE", "1"))
    images = torch.randn(1, 3, 32, 32)
    conv = torch.nn.Conv2d(3, 16, 3, padding=1)
    head = torch.nn.Linear(16 * 32 * 32, 10)


    def train_steps():
        for _ in range(round(20 * SCALE)):
            head(conv(images).relu().flatten(1)).sum().backward()


    def test_cnn_steps(benchmark):
        benchmark(train_steps)
    """
)


def run(project: Path, scale: float, args: list[str]) -> int:
    env = {**os.environ, "WORK_SCALE": str(scale)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=project, env=env, capture_output=True).returncode


TOOLS = {
    "pytest-hpml": (["--hpml-baseline=update"], ["--hpml-benchmarks"]),
    "pytest-benchmark": (
        ["-p", "no:hpml", "--benchmark-save=base"],
        ["-p", "no:hpml", "--benchmark-compare", "--benchmark-compare-fail=median:10%"],
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--extra", type=float, default=1.15, help="work of the slower version")
    parser.add_argument("--appends", type=int, default=0, help="extra baseline processes")
    parser.add_argument("--keep", type=Path, help="save pytest-hpml's JSON reports here")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "test_bench.py").write_text(BENCHMARK)
        flagged = {tool: {1.0: 0, opts.extra: 0} for tool in TOOLS}
        for tool, (record, _) in TOOLS.items():
            assert run(project, 1.0, record) == 0, f"{tool}: recording the baseline failed"
        for _ in range(opts.appends):
            assert run(project, 1.0, ["--hpml-baseline=append"]) == 0, "appending failed"
        if opts.keep:
            opts.keep.mkdir(parents=True, exist_ok=True)
        for i in range(opts.runs):
            for scale in (1.0, opts.extra) if i % 2 == 0 else (opts.extra, 1.0):
                for tool, (_, compare) in TOOLS.items():
                    if opts.keep and tool == "pytest-hpml":
                        compare = [*compare, f"--hpml-report={opts.keep}/{scale}-{i:02d}.json"]
                    code = run(project, scale, compare)
                    flagged[tool][scale] += code == 1
            print(f"run {i + 1}/{opts.runs}: {flagged}", flush=True)
    more = f"{opts.extra - 1:.0%} more work"
    print(f"\n{'tool':18s} {'unchanged: regressed':>22s} {more + ': regressed':>28s}")
    for tool, found in flagged.items():
        unchanged, slower = found[1.0], found[opts.extra]
        print(f"{tool:18s} {unchanged:>14d} of {opts.runs} {slower:>20d} of {opts.runs}")


if __name__ == "__main__":
    main()
