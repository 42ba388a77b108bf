"""Measuring benchmarks again in fresh processes, as asv does.

Normalizing by the reference workload follows the machine's speed round by round, but each
process also has a speed of its own (memory layout, core placement): measured here, unchanged
runs of one benchmark spread 2-3% from process to process after normalization. Pooling
``--hpml-processes`` processes per side shrinks that spread, so a small threshold can hold.

The session that ran the tests is the first process. At its end it starts the others one after
another: ``python -m pytest`` with the same arguments, told through :data:`RERUN_ENV` which
tests to run (the rest are deselected) and for how long, and writing what they measured to a
JSON file that is then pooled into this run's metrics.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .options import Settings

RERUN_ENV = "HPML_RERUN"  # path of the JSON that tells a rerun process what to do
SAMPLED = ("time", "rate", "ratio")  # metric kinds with samples, worth pooling

# Options a rerun process must not repeat: they write files of the first process or schedule
# tests elsewhere. True: the option takes a value (as ``--opt=V`` or ``--opt V``).
_DROPPED = {
    "--basetemp": True,
    "--junitxml": True,
    "--junit-xml": True,
    "--benchmark-json": True,
    "--benchmark-save": True,
    "--benchmark-autosave": False,
    "--benchmark-histogram": False,
    "-n": True,
    "--numprocesses": True,
    "--dist": True,
    "--maxprocesses": True,
    "--lf": False,
    "--last-failed": False,
    "--ff": False,
    "--failed-first": False,
    "--nf": False,
    "--new-first": False,
    "--sw": False,
    "--stepwise": False,
}


def rerun_request() -> dict[str, Any] | None:
    """In a rerun process, what the first process asked of it; None elsewhere."""
    path = os.environ.get(RERUN_ENV)
    if not path:
        return None
    return json.loads(Path(path).read_text(encoding="utf-8"))


def rerun_settings(chosen: Settings, asked: dict[str, Any]) -> Settings:
    """A rerun measures for as long as asked and records, judges and reports nothing."""
    return dataclasses.replace(
        chosen,
        baseline="off",
        report="",
        report_md="",
        report_html="",
        processes=1,
        bench_time=asked["bench_time"],
    )


def child_args(config: pytest.Config) -> list[str]:
    """The first process's arguments, without those that would clash with it."""
    args = [str(a) for a in config.invocation_params.args]
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        short = arg[:2] if arg.startswith("-n") and not arg.startswith("--") else name
        if short in _DROPPED:
            skip = _DROPPED[short] and "=" not in arg and len(arg) == len(short)
            continue
        kept.append(arg)
    if config.pluginmanager.hasplugin("xdist"):
        kept.append("-n0")  # an ini addopts "-n auto" would spread the reruns
    return kept


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
            if record.get("kind") in SAMPLED and record.get("samples"):
                run = {k: record[k] for k in ("samples", "reference") if k in record}
                found.runs.setdefault(result["test"], {}).setdefault(name, []).append(run)


def pool(results: Iterable[dict[str, Any]], found: Reruns) -> list[str]:
    """Add the other processes' runs to this run's metrics; return the tests that got some."""
    pooled = []
    for result in results:
        extra = found.runs.get(result["test"], {})
        for name, runs in extra.items():
            record = result["metrics"].get(name)
            if record is not None and record.get("kind") in SAMPLED:
                record.setdefault("processes", []).extend(runs)
        if extra:
            pooled.append(result["test"])
    return pooled


def keep_only(config: pytest.Config, items: list[pytest.Item], tests: set[str]) -> None:
    """Deselect every collected test whose node id is not in ``tests``."""
    dropped = [item for item in items if item.nodeid not in tests]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.nodeid in tests]


class Rerun:
    """The plugin of a rerun process: runs only the tests asked for and hands back results."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.tests = set(request["tests"])
        self.output = request["output"]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Deselect every test the first process does not want measured again."""
        keep_only(config, items, self.tests)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write what this process measured for the first one to pool."""
        from .regression import regression

        results = regression(session.config).results
        Path(self.output).write_text(json.dumps({"results": results}), encoding="utf-8")
