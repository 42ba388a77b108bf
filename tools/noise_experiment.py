"""Does a baseline comparison fail on real regressions and stay quiet on noise?

Records a baseline of a CPU benchmark of a few milliseconds per call, then runs N sessions of
the unchanged benchmark and N of a version doing 15% more work, interleaved, and counts how
many each tool calls a regression: pytest-hpml with default settings (so each session measures
in --hpml-processes processes, 3 by default), and pytest-benchmark with
``--benchmark-compare-fail=median:10%``.

    python tools/noise_experiment.py --runs 20 [--appends 2] [--keep DIR]
    python tools/noise_experiment.py --example readme --runs 10 --hogs 2

``--appends N`` records pytest-hpml's baseline in 1 + N processes (update, then append);
``--keep DIR`` saves each compare run's JSON report there for analysis. ``--example readme``
measures the README's own benchmark example instead (a ``Linear(512, 512)`` training step of
about 1 ms, ``threshold=0.05``; the slower version has 15% more rows in its batch). ``--hogs N``
starts N CPU-bound processes (``python -c "while True: pass"``) once the baselines are
recorded, on an idle machine, and keeps them running through the comparisons.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

# A few milliseconds of CPU training steps; SCALE, set before this code, multiplies the work.
CNN = textwrap.dedent(
    """
    torch.manual_seed(0)
    images = torch.randn(1, 3, 32, 32)
    conv = torch.nn.Conv2d(3, 16, 3, padding=1)
    head = torch.nn.Linear(16 * 32 * 32, 10)


    def train_steps():
        for _ in range(round(20 * SCALE)):
            head(conv(images).relu().flatten(1)).sum().backward()
    """
)
BENCHMARK = (
    'import os\n\nimport torch\n\nSCALE = float(os.environ.get("WORK_SCALE", "1"))\n'
    + CNN
    + "\n\ndef test_cnn_steps(benchmark):\n    benchmark(train_steps)\n"
)


README_EXAMPLE = textwrap.dedent(
    """
    import os

    import pytest
    import torch

    SCALE = float(os.environ.get("WORK_SCALE", "1"))


    @pytest.mark.hpml_bench(threshold=0.05, batch_size=64)
    def test_train_step(benchmark, device):
        model = torch.nn.Linear(512, 512).to(device)
        x = torch.randn(round(64 * SCALE), 512, device=device)
        benchmark.track(model=model)
        benchmark(lambda: model(x).sum().backward())
    """
)
EXAMPLES = {"cnn": BENCHMARK, "readme": README_EXAMPLE}


SECONDS: dict[str, list[float]] = {}  # wall time of each compare run, by tool


def run(project: Path, scale: float, args: list[str], tool: str = "") -> int:
    env = {**os.environ, "WORK_SCALE": str(scale)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    start = time.monotonic()
    code = subprocess.run(cmd, cwd=project, env=env, capture_output=True).returncode
    if tool:
        SECONDS.setdefault(tool, []).append(time.monotonic() - start)
    return code


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
    parser.add_argument("--example", choices=sorted(EXAMPLES), default="cnn")
    parser.add_argument("--hogs", type=int, default=0, help="CPU-bound processes competing")
    opts = parser.parse_args()
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        compare(opts, hogs)
    finally:
        for hog in hogs:
            hog.kill()


def compare(opts: argparse.Namespace, hogs: list[subprocess.Popen[bytes]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "test_bench.py").write_text(EXAMPLES[opts.example])
        # The README's example uses pytest-hpml's fixtures: pytest-benchmark alone cannot run it.
        tools = TOOLS if opts.example == "cnn" else {"pytest-hpml": TOOLS["pytest-hpml"]}
        flagged = {tool: {1.0: 0, opts.extra: 0} for tool in tools}
        for tool, (record, _) in tools.items():
            assert run(project, 1.0, record) == 0, f"{tool}: recording the baseline failed"
        for _ in range(opts.appends):
            assert run(project, 1.0, ["--hpml-baseline=append"]) == 0, "appending failed"
        if opts.keep:
            opts.keep.mkdir(parents=True, exist_ok=True)
        hogs += [
            subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(opts.hogs)
        ]
        for i in range(opts.runs):
            for scale in (1.0, opts.extra) if i % 2 == 0 else (opts.extra, 1.0):
                for tool, (_, compare) in tools.items():
                    if opts.keep and tool == "pytest-hpml":
                        compare = [*compare, f"--hpml-report={opts.keep}/{scale}-{i:02d}.json"]
                    code = run(project, scale, compare, tool)
                    flagged[tool][scale] += code == 1
            print(f"run {i + 1}/{opts.runs}: {flagged}", flush=True)
    more = f"{opts.extra - 1:.0%} more work"
    print(f"\n{'tool':18s} {'unchanged: regressed':>22s} {more + ': regressed':>28s}")
    for tool, found in flagged.items():
        unchanged, slower = found[1.0], found[opts.extra]
        print(f"{tool:18s} {unchanged:>14d} of {opts.runs} {slower:>20d} of {opts.runs}")
    for tool, seconds in SECONDS.items():
        print(f"{tool}: a compare run took {statistics.median(seconds):.1f} s (median)")


if __name__ == "__main__":
    main()
