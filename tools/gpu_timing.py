"""Timing fidelity on a CUDA GPU: the benchmark fixture's median against
``torch.utils.benchmark.Timer(...).blocked_autorange()`` and CUDA events.

In one process, for each workload (an 8192x8192x8192 bf16 matmul, a convolution network's
training step, a tiny launch-bound kernel), the three ways of timing take turns, ``--rounds``
times, in a rotating order, each for ``--seconds``:

- ``hpml``: pytest-hpml's own rounds (``pytest_hpml.bench.measure.measure``, as the
  ``benchmark`` fixture runs them on a GPU: each round ends with the device synchronized,
  rounds of at least 1 ms), without the reference workload; the median of its samples;
- ``timer``: ``torch.utils.benchmark.Timer(...).blocked_autorange()``, its median;
- ``events``: CUDA events recorded around blocks of calls, the median time a call per block.

Prints a table (each way's median of its per-turn medians, its spread over the turns, and its
ratio to the events') and writes it as JSON. Without CUDA it says ``skipped: no CUDA`` and
exits 0, so that a run plan can call it anywhere.

    python tools/gpu_timing.py [--out timing.json] [--rounds 5] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's pytest_hpml

METHODS = ("hpml", "timer", "events")
EVENT_BLOCK = 0.01  # seconds of calls between two CUDA events


def matmul(torch: Any, device: Any) -> tuple[Callable[[], Any], float]:
    """An 8192^3 bf16 matmul: compute-bound, about a millisecond on an H100."""
    n = 8192
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    return (lambda: a @ b), 2.0 * n**3


def conv_step(torch: Any, device: Any) -> tuple[Callable[[], Any], float]:
    """A training step (forward, backward, SGD) of a small convolution network at batch 64."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1, stride=2),
        nn.ReLU(),
        nn.Conv2d(128, 128, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 3, 64, 64, device=device)
    y = torch.randint(0, 10, (64,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    return step, 0.0


def tiny(torch: Any, device: Any) -> tuple[Callable[[], Any], float]:
    """One element added in place: the launch, not the kernel, is the time."""
    x = torch.zeros(1, device=device)
    return (lambda: x.add_(1)), 0.0


WORKLOADS = {"matmul_bf16_8192": matmul, "conv_train_step": conv_step, "tiny_launch": tiny}


def by_hpml(fn: Callable[[], Any], device: Any, seconds: float) -> float:
    from pytest_hpml.bench.measure import Plan, measure, synchronizer

    plan = Plan(
        budget=seconds,
        round_time=Plan.min_round_time,  # as the fixture's rounds on a GPU
        sync=synchronizer(device),
        device=device,
    )
    series, _ = measure({"fn": fn}, plan)
    return statistics.median(series["fn"].samples)


def by_timer(fn: Callable[[], Any], device: Any, seconds: float) -> float:
    from torch.utils.benchmark import Timer

    return float(Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=seconds).median)


def by_events(fn: Callable[[], Any], device: Any, seconds: float) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def block(calls: int) -> float:
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # ms -> s

    block(3)  # warm
    calls = max(1, round(EVENT_BLOCK / max(block(1), 1e-7)))
    per_call, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(per_call) < 5:
        per_call.append(block(calls) / calls)
    return statistics.median(per_call)


TIMERS = {"hpml": by_hpml, "timer": by_timer, "events": by_events}


def compare(torch: Any, rounds: int, seconds: float) -> dict[str, Any]:
    """Every workload timed by every way, interleaved; the medians of each turn."""
    device = torch.device("cuda")
    found: dict[str, Any] = {}
    for name, make in WORKLOADS.items():
        fn, flops = make(torch, device)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        turns: dict[str, list[float]] = {method: [] for method in METHODS}
        for turn in range(rounds):
            order = METHODS[turn % 3 :] + METHODS[: turn % 3]  # each way first in turn
            for method in order:
                turns[method].append(TIMERS[method](fn, device, seconds))
        found[name] = {"flops": flops, "turns": turns}
        del fn
        torch.cuda.empty_cache()
    return found


def summary(found: dict[str, Any], peak: Callable[[str], float | None]) -> dict[str, Any]:
    """Per workload and way: the median of its turns, their spread, the ratio to the events',
    and, where the FLOPs are known, TFLOP/s and MFU (the table's bf16 peak)."""
    out: dict[str, Any] = {}
    for name, entry in found.items():
        medians = {m: statistics.median(entry["turns"][m]) for m in METHODS}
        rows = {}
        for method in METHODS:
            turns = entry["turns"][method]
            row: dict[str, Any] = {
                "median_s": medians[method],
                "spread": (max(turns) - min(turns)) / medians[method],
                "vs_events": medians[method] / medians["events"],
                "turns_s": turns,
            }
            if entry["flops"]:
                row["tflops"] = entry["flops"] / medians[method] / 1e12
                top = peak("bf16")
                row["mfu"] = None if top is None else entry["flops"] / medians[method] / top
            rows[method] = row
        out[name] = rows
    return out


def fmt_time(seconds: float) -> str:
    for factor, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "us")):
        if seconds >= factor:
            return f"{seconds / factor:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def table(rows: dict[str, Any]) -> list[str]:
    header = f"{'workload':<18} {'way':<7} {'median':>10} {'spread':>7} {'vs events':>9} {'MFU':>6}"
    lines = [header, "-" * len(header)]
    for name, methods in rows.items():
        for method, row in methods.items():
            mfu = row.get("mfu")
            lines.append(
                f"{name:<18} {method:<7} {fmt_time(row['median_s']):>10} "
                f"{row['spread']:>7.1%} {row['vs_events']:>9.3f} "
                f"{'-' if mfu is None else format(mfu, '.1%'):>6}"
            )
    return lines


def positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Timing fidelity on a CUDA GPU.")
    parser.add_argument("--out", type=Path, help="write the results to this JSON file")
    parser.add_argument(
        "--rounds", type=positive(int), default=5, help="turns of each way (default 5)"
    )
    parser.add_argument(
        "--seconds", type=positive(float), default=0.5, help="seconds of each turn (default 0.5)"
    )
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        why = f"skipped: no CUDA (torch {torch.__version__} sees no CUDA device)"
        print(why)
        if args.out:
            args.out.write_text(json.dumps({"skipped": why}, indent=1) + "\n")
        return 0
    from pytest_hpml.hardware.peaks import peak_flops

    properties = torch.cuda.get_device_properties(0)
    found = compare(torch, args.rounds, args.seconds)
    rows = summary(found, lambda precision: peak_flops(properties, precision))
    print(f"{properties.name}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"{args.rounds} turns of {args.seconds:g} s per way, interleaved")
    for line in table(rows):
        print(line)
    if args.out:
        document = {
            "device": properties.name,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "rounds": args.rounds,
            "seconds": args.seconds,
            "workloads": rows,
        }
        args.out.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
