"""Does head-against-base (``--hpml-against``) fail on real regressions and stay quiet on noise?

Makes a git repository with a CPU benchmark of a few milliseconds per call, committed, then
compares working trees against that commit N times each, interleaved: unchanged, doing 5% more
work, and doing 15% more. Each comparison is one job of each tool, side by side:

- pytest-hpml: ``pytest --hpml-against=HEAD`` at default settings;
- pytest-benchmark: the base commit's benchmark saved (``--benchmark-save``), then the working
  tree's compared with ``--benchmark-compare-fail=median:10%``.

``--inside`` writes the benchmark as many libraries' tests are written: torch imported inside
the test function, a convolution of a (8, 16, 32, 32) batch (torch's intra-op threads engage
on it), no seed.

``--hogs 2`` starts two CPU-bound processes (``python -c "while True: pass"``) for the whole
experiment, so that they compete with the benchmarks for the machine's cores. ``--bursty 2``
starts two that spin and sleep in turn, each spell 50 to 1500 ms at random: load that comes
and goes within one comparison.

    python tools/against_experiment.py --runs 20 [--hogs 2 | --bursty 2] [--out results.jsonl]

``--hpml-options="A|B"`` runs each comparison once per variant, interleaved: a variant is
pytest-hpml options and variables, such as ``PYTHONPATH=<a checkout of another commit>``
(that commit's pytest-hpml, measured beside this one's).

Prints, per version, how many comparisons each tool called a regression, the median wall time
of one comparison, and how many pairs of processes pytest-hpml's adaptive rule took (Note
[Adaptive pairs]): their median and most, of at most ``--hpml-pairs``.

``--full`` measures every comparison to the cap (a ``conftest.py`` in the benchmark's project
turns the stops off), so that ``--out`` keeps every pair; ``--replay FILE...`` then judges the
stored comparisons as this checkout's adaptive rule would have, each look on the first pairs,
and prints its verdicts per version and load. A change to the rule is replayed on the same
comparisons as the rule before it (``tools/comparisons/`` keeps those the Notes cite).

    python tools/against_experiment.py --full --runs 30 --only-hpml --out full.jsonl
    python tools/against_experiment.py --replay full.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

from noise_experiment import CNN  # the same benchmark as the stored-baseline experiment

WORK = "import torch\n\nSCALE = {scale}\n" + CNN.replace("{", "{{").replace("}", "}}")
SIZE = 32  # the side of the CNN's images
STEPS = 20  # training steps a call: with SIZE, about 7 ms on the 2-core VM
TEST = textwrap.dedent(
    """
    from work import train_steps


    def test_cnn_steps(benchmark):
        benchmark(train_steps)
    """
)
# torch is imported by the test body, after the benchmark fixture has started.
WORK_INSIDE = textwrap.dedent(
    """
    SCALE = {scale}


    def convolutions(functional, x, w):
        for _ in range(round(4 * SCALE)):
            functional.conv2d(x, w, padding=1)
    """
)
TEST_INSIDE = textwrap.dedent(
    """
    def test_case(benchmark):
        import torch
        import torch.nn.functional as F

        from work import convolutions

        x = torch.randn(8, 16, 32, 32)
        w = torch.randn(16, 16, 3, 3)
        benchmark(lambda: convolutions(F, x, w))
    """
)
# Load that comes and goes: spells of spinning and of sleeping, each 50 to 1500 ms at random.
BURSTY = textwrap.dedent(
    """
    import random
    import time

    while True:
        end = time.monotonic() + random.uniform(0.05, 1.5)
        while time.monotonic() < end:
            pass
        time.sleep(random.uniform(0.05, 1.5))
    """
)
VERSIONS = {"unchanged": 1.0, "5% slower": 1.05, "15% slower": 1.15}
# --full: the controller never stops at a look, so every comparison keeps all its pairs.
FULL = textwrap.dedent(
    """
    from pytest_hpml.verdict import stats

    stats.settled = lambda result: False
    stats.hopeless = lambda result, done, cap, looks: False
    """
)


def sized(size: int, steps: int) -> str:
    """:data:`WORK` with images of ``size`` x ``size`` and ``steps`` steps a call. A version
    does ``round(steps * scale)`` steps: with 7 steps, "15% slower" does 8 (+14.3%)."""
    work = WORK
    for old, new in (
        (f"{SIZE}, {SIZE}", f"{size}, {size}"),
        (f"{SIZE} * {SIZE}", f"{size} * {size}"),
        (f"{STEPS} * SCALE", f"{steps} * SCALE"),
    ):
        if old not in work:  # the CNN of noise_experiment.py changed: say so, not measure it
            raise SystemExit(f"against_experiment: the CNN's code has no {old!r} to resize")
        work = work.replace(old, new)
    return work


def git(project: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=project, check=True, capture_output=True)


def make_project(root: Path, work: str, test: str, full: bool = False) -> Path:
    project = root / "project"
    project.mkdir()
    (project / "work.py").write_text(work.format(scale=1.0))
    (project / "test_work.py").write_text(test)
    if full:
        (project / "conftest.py").write_text(FULL)
    (project / "pytest.ini").write_text("[pytest]\n")
    git(project, "init", "-q")
    git(project, "-c", "user.name=x", "-c", "user.email=x@x", "add", "-A")
    git(project, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "base")
    return project


def pytest(project: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run pytest in ``project``; an argument NAME=VALUE (no leading dash) sets a variable of
    its environment instead, e.g. PYTHONPATH=<a checkout of another pytest-hpml commit>."""
    env = dict(os.environ)
    env.update(a.split("=", 1) for a in args if "=" in a and not a.startswith("-"))
    args = tuple(a for a in args if a.startswith("-") or "=" not in a)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    start = time.monotonic()
    done = subprocess.run(command, cwd=project, capture_output=True, text=True, env=env)
    return done, time.monotonic() - start


def hpml(project: Path, report: Path, extra: Sequence[str] = ()) -> dict[str, object]:
    done, seconds = pytest(project, "--hpml-against=HEAD", f"--hpml-report={report}", *extra)
    written = json.loads(report.read_text())
    verdict = written["results"][0]["verdicts"]["time"]
    return {
        "pairs_taken": written["against"]["pairs"],
        "pairs_cap": written["against"]["cap"],
        "exit": done.returncode,
        "verdict": verdict["verdict"],
        "change": verdict["change"],
        "base_median": verdict["baseline"],
        "pairs": verdict.get("pairs"),
        "sides": verdict.get("sides"),  # each process's fastest sample, per side
        "reason": verdict["reason"],
        "seconds": seconds,
        "options": list(extra),
    }


def benchmark(project: Path, work: str, scale: float, storage: Path) -> dict[str, object]:
    """pytest-benchmark's way: the base commit's code saved, then the working tree's compared."""
    plain = ("-p", "no:hpml", f"--benchmark-storage={storage}")
    (project / "work.py").write_text(work.format(scale=1.0))
    _, first = pytest(project, *plain, "--benchmark-save=base")
    (project / "work.py").write_text(work.format(scale=scale))
    done, second = pytest(
        project, *plain, "--benchmark-compare", "--benchmark-compare-fail=median:10%"
    )
    for saved in storage.rglob("*.json"):
        saved.unlink()
    return {"exit": done.returncode, "failed": done.returncode != 0, "seconds": first + second}


def replay(files: Sequence[Path], threshold: float) -> None:
    """Judge each stored comparison (one that kept all its pairs: ``--full``) as this
    checkout's adaptive rule would have: each look on the first pairs, stopping where it
    stops; print the verdicts per version and load. The pairs' ratios are the stored ones; a
    file from before pairs were compared slice by slice (Note [Slices]) has the ratios of the
    processes' fastest samples only, and those stand in for them."""
    from pytest_hpml.verdict import stats

    found: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for line in (json.loads(text) for file in files for text in file.read_text().splitlines()):
        sides, cap = line["hpml"]["sides"], line["hpml"]["pairs_cap"]
        if line["hpml"]["pairs_taken"] < cap:
            continue  # stopped early: the later looks cannot be replayed
        ratios = line["hpml"].get("pairs") or [h / b for h, b in zip(sides["head"], sides["base"])]
        looks = stats.looks(cap)
        for done in looks:
            agreeing, _ = stats.majority(ratios[:done])
            result = stats.compare_pairs(agreeing, threshold=threshold, looks=len(looks))
            if stats.settled(result) or stats.hopeless(result, done, cap, len(looks)):
                break
        load = f"{line['hogs']} hogs, {line['bursty']} bursty" + (
            f", {line['note']}" if line.get("note") else ""
        )
        options = " ".join(line["hpml"].get("options", []))
        version = f"{line['version']} {options}".strip()
        found.setdefault((version, load), []).append((result.verdict, done))
    print("version     comparisons  pairs (mean)  verdicts, load")
    for (version, load), judged in sorted(found.items()):
        verdicts = dict(collections.Counter(v for v, _ in judged))
        pairs = statistics.mean(n for _, n in judged)
        print(f"{version:<11} {len(judged):>11}  {pairs:>12.2f}  {verdicts}, {load}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--hogs", type=int, default=0, help="CPU-bound processes competing")
    parser.add_argument(
        "--bursty", type=int, default=0, help="processes that spin and sleep in random spells"
    )
    parser.add_argument("--versions", default=",".join(VERSIONS), help="a comma list")
    parser.add_argument("--out", type=Path, help="append one JSON line per comparison here")
    parser.add_argument("--only-hpml", action="store_true", help="leave pytest-benchmark out")
    parser.add_argument(
        "--inside", action="store_true", help="torch imported inside the test function"
    )
    parser.add_argument(
        "--hpml-options",
        default="",
        help="pytest-hpml options for each comparison, e.g. '--hpml-pairs=5', and "
        "variables (PYTHONPATH=DIR: another checkout's pytest-hpml); several such variants, "
        "separated by '|', alternate in each run",
    )
    parser.add_argument(
        "--full", action="store_true", help="measure every comparison to the cap of pairs"
    )
    parser.add_argument("--size", type=int, default=SIZE, help="the side of the CNN's images")
    parser.add_argument(
        "--steps",
        type=int,
        default=STEPS,
        help=f"training steps a call ({STEPS} of size {SIZE}: about 7 ms on the 2-core VM; "
        "7 of size 12: 0.9 to 1.1 ms)",
    )
    parser.add_argument(
        "--note", default="", help="a word stored with each comparison: what else ran"
    )
    parser.add_argument(
        "--replay",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="judge the comparisons stored by --full --out with this checkout's rule",
    )
    parser.add_argument(
        "--threshold", type=float, default=0.06, help="the threshold --replay judges at"
    )
    options = parser.parse_args()
    if options.replay:
        replay(options.replay, options.threshold)
        return
    variants = [v.split() for v in options.hpml_options.split("|")]  # [[]] when none
    work, test = (
        (WORK_INSIDE, TEST_INSIDE) if options.inside else (sized(options.size, options.steps), TEST)
    )
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(options.hogs)
    ] + [subprocess.Popen([sys.executable, "-c", BURSTY]) for _ in range(options.bursty)]
    found: dict[str, list[tuple[dict, dict]]] = {}
    try:
        with tempfile.TemporaryDirectory() as scratch:
            project = make_project(Path(scratch), work, test, options.full)
            for run in range(options.runs):
                for version in options.versions.split(","):
                    scale = VERSIONS[version]
                    (project / "work.py").write_text(work.format(scale=scale))
                    for extra in variants:
                        ours = hpml(project, Path(scratch, "report.json"), extra)
                        theirs = (
                            {"failed": False, "seconds": 0.0, "skipped": True}
                            if options.only_hpml
                            else benchmark(project, work, scale, Path(scratch, "storage"))
                        )
                        named = " ".join([version, *extra])
                        found.setdefault(named, []).append((ours, theirs))
                        line = {"run": run, "version": version, "hogs": options.hogs}
                        line["bursty"] = options.bursty
                        line["note"] = options.note
                        line |= {"hpml": ours, "pytest-benchmark": theirs}
                        line["load"] = os.getloadavg()[0]
                        print(json.dumps(line), flush=True)
                        if options.out:
                            with options.out.open("a") as out:
                                out.write(json.dumps(line) + "\n")
    finally:
        for hog in hogs:
            hog.kill()
    print(
        f"\n{options.runs} comparisons per version, {options.hogs} CPU hog(s), "
        f"{options.bursty} bursty process(es)"
    )
    print(
        "version     pytest-hpml regressed  pytest-benchmark failed  seconds (hpml / pb)  "
        "pairs (median, most, cap)  verdicts"
    )
    for version, pairs in found.items():
        ours = sum(o["verdict"] == "regressed" for o, _ in pairs)
        theirs = sum(t["failed"] for _, t in pairs)
        seconds = [statistics.median(s[k]["seconds"] for s in pairs) for k in (0, 1)]
        taken = [o["pairs_taken"] for o, _ in pairs]
        print(
            f"{version:<11} {ours:>2}/{len(pairs):<19} {theirs:>2}/{len(pairs):<22} "
            f"{seconds[0]:.1f} / {seconds[1]:<13.1f} "
            f"{statistics.median(taken):g}, {max(taken)}, {pairs[0][0]['pairs_cap']}  "
            + str(dict(collections.Counter(o["verdict"] for o, _ in pairs)))
        )


if __name__ == "__main__":
    main()
