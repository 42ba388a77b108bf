"""Measuring benchmarks again in fresh processes, as asv does.

Each process has a speed of its own that per-round normalization does not remove; pooling
``--hpml-processes`` processes per side shrinks that spread (Note [Processes]).

The session that ran the tests is the first process. At its end it starts the others one after
another: ``python -m pytest`` with the same arguments, told through :data:`RERUN_ENV` which
tests to run (the rest are deselected) and for how long, and writing what they measured to a
JSON file that is then pooled into this run's metrics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from ..config.invocation import child_args, keep_only
from ..config.role import RERUN_ENV
from .metrics import is_sampled


@dataclass
class Reruns:
    """What the other processes measured, by test id and metric, and what went wrong."""

    runs: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def measure_again(
    config: pytest.Config, tests: Sequence[str], count: int, bench_time: float
) -> Reruns:
    """Run ``tests`` in ``count`` fresh processes, one after another."""
    found = Reruns()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pytest-hpml-") as tmp:
        for index in range(count):
            output = Path(tmp, f"process-{index}.json")
            request = Path(tmp, f"request-{index}.json")
            wanted = {"tests": list(tests), "bench_time": bench_time, "output": str(output)}
            request.write_text(json.dumps(wanted), encoding="utf-8")
            done = subprocess.run(
                [sys.executable, "-m", "pytest", *child_args(config)],
                cwd=config.invocation_params.dir,
                env={**os.environ, RERUN_ENV: str(request)},
                capture_output=True,
                text=True,
            )
            _take(found, output, done, index + 2, count + 1)
    found.seconds = time.monotonic() - start
    return found


def _take(
    found: Reruns, output: Path, done: subprocess.CompletedProcess[str], number: int, total: int
) -> None:
    """Keep one process's sampled metrics; say why, if it measured nothing."""
    try:
        results = json.loads(output.read_text(encoding="utf-8"))["results"]
    except (OSError, ValueError, KeyError):
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
        found.notes.append(
            f"process {number} of {total} measured nothing (exit {done.returncode}: {tail[0]})"
        )
        return
    for result in results:
        for name, record in result["metrics"].items():
            if is_sampled(record) and record.get("samples"):
                run = {k: record[k] for k in ("samples", "reference", "budget") if k in record}
                found.runs.setdefault(result["test"], {}).setdefault(name, []).append(run)


def pool(results: Iterable[dict[str, Any]], found: Reruns) -> list[str]:
    """Add the other processes' runs to this run's metrics; return the tests that got some."""
    pooled = []
    for result in results:
        extra = found.runs.get(result["test"], {})
        for name, runs in extra.items():
            record = result["metrics"].get(name)
            if record is not None and is_sampled(record):
                record.setdefault("processes", []).extend(runs)
        if extra:
            pooled.append(result["test"])
    return pooled


class Rerun:
    """The plugin of a rerun process: runs only the tests asked for and hands back results.

    ``results`` gives what this process measured, at the end of its session (passed in: the
    verdict layer holds the results, and this layer must not reach up to it).
    """

    def __init__(self, request: dict[str, Any], results: Callable[[], list[Any]]) -> None:
        self.tests = set(request["tests"])
        self.output = request["output"]
        self.results = results

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Deselect every test the first process does not want measured again."""
        keep_only(config, items, self.tests)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write what this process measured for the first one to pool."""
        document = {"results": self.results()}
        Path(self.output).write_text(json.dumps(document), encoding="utf-8")
