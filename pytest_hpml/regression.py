"""Benchmarks against baselines, for a whole session: verdicts per metric, recording, exit status.

Verdicts are reached where a test ran (an xdist worker, or the only process) and travel in the
test report (``user_properties``), so the controlling process sees every one of them; it alone
writes baseline files and reports.
"""

from __future__ import annotations

import dataclasses
import datetime
import subprocess
from collections.abc import Generator
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from . import baselines, fingerprint, markers, processes, reports, stats
from .baselines import Judged, judged, pooled, runs
from .devices import hardware
from .distributed import launch
from .fixtures import BENCHMARK_KEY
from .options import SETTINGS_KEY, Settings

PROPERTY = "hpml_benchmark"
MAX_STORED_SAMPLES = 400
EARLIER_RUNS = 6  # process runs kept besides the latest run's by --hpml-baseline=append
RUN_FIELDS = ("samples", "reference", "recorded", "commit")


class Regression:
    """The session's baselines: where they are, what they say, and what this run found.

    Registered as a plugin object: its hooks attach verdicts to reports where tests run and
    collect, record, report and set the exit status where the session is controlled.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.settings: Settings = config.stash[SETTINGS_KEY]
        self.directory = Path(config.rootpath, self.settings.baseline_dir)
        self.results: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._files: dict[Path, dict[str, Any] | None] = {}
        self.written: list[Path] = []
        self.reruns: processes.Reruns | None = None
        self.process_count = 1

    @cached_property
    def fingerprint(self) -> fingerprint.Fingerprint:
        return fingerprint.current(hardware(self.config), self.settings.machine)

    def path_for(self, record: dict[str, Any]) -> Path:
        if record.get("portable"):
            return baselines.portable_path(self.directory, self.fingerprint)
        return baselines.machine_path(self.directory, self.fingerprint)

    def stored(self, test: str, name: str, record: dict[str, Any]) -> dict[str, Any] | None:
        """The baseline of one metric, or None; an unreadable file is reported once."""
        return self._entries(self.path_for(record)).get(test, {}).get(name)

    def _entries(self, path: Path) -> dict[str, Any]:
        if path not in self._files:
            try:
                self._files[path] = baselines.load(path)
            except baselines.BaselineError as exc:
                self._files[path] = None
                self.errors.append(str(exc))
        data = self._files[path]
        return {} if data is None else data["entries"]

    def processes_for(self, test: str) -> int:
        """How many processes measure ``test``: --hpml-record-processes when recording,
        --hpml-processes when comparing with a stored time baseline, else one (nothing to be
        precise against)."""
        mode, count = self.settings.baseline, self.settings.processes
        if mode == "off":
            return 1
        if mode in ("update", "append"):
            return self.settings.record_processes
        if count == 1:
            return 1
        stored = self._entries(baselines.machine_path(self.directory, self.fingerprint))
        return count if stored.get(test) else 1

    def budget(self, test: str) -> float:
        """Seconds of rounds for ``test`` in this process: all of --hpml-bench-time when it is
        measured here alone; else the share of one of a comparison's processes, which a
        recording process gets too."""
        if self.processes_for(test) == 1:
            return self.settings.bench_time
        return self.settings.bench_time / self.settings.processes

    def measure_again(self) -> None:
        """Measure the sampled benchmarks in the other processes and judge the pooled runs."""
        counts = {r["test"]: self.processes_for(r["test"]) for r in self.results if _sampled(r)}
        tests = [test for test, count in counts.items() if count > 1]
        if not tests:
            return
        self.process_count = max(counts[test] for test in tests)
        share = self.settings.bench_time / self.settings.processes
        self.reruns = processes.measure_again(self.config, tests, self.process_count - 1, share)
        pooled_tests = set(processes.pool(self.results, self.reruns))
        for result in self.results:
            if result["test"] in pooled_tests:
                result["verdicts"] = self.judge(
                    result["test"], result["metrics"], result["threshold"]
                )

    def judge(self, test: str, metrics: dict[str, Any], threshold: float) -> dict[str, Any]:
        """Verdicts for every metric of one test (all ``no-baseline`` when mode is off)."""
        verdicts = {}
        for name, record in metrics.items():
            base = None if self.settings.baseline == "off" else self.stored(test, name, record)
            verdicts[name] = dataclasses.asdict(judge_metric(record, base, threshold))
        return verdicts

    def payload(self, item: pytest.Item, metrics: dict[str, Any]) -> dict[str, Any]:
        """What travels in the report: metrics, threshold, verdicts, new errors."""
        threshold, _ = markers.bench_settings(item.get_closest_marker("hpml_bench"))
        threshold = threshold or self.settings.threshold
        known = len(self.errors)
        verdicts = self.judge(item.nodeid, metrics, threshold)
        return {
            "test": item.nodeid,
            "threshold": threshold,
            "metrics": metrics,
            "verdicts": verdicts,
            "errors": self.errors[known:],
        }

    def collect(self, payload: dict[str, Any]) -> None:
        self.results.append(payload)
        self.errors.extend(e for e in payload.get("errors", ()) if e not in self.errors)

    @property
    def regressed(self) -> list[tuple[str, str, dict[str, Any]]]:
        return [
            (r["test"], name, v)
            for r in self.results
            for name, v in r["verdicts"].items()
            if v["verdict"] == stats.REGRESSED
        ]

    def write(self) -> list[Path]:
        """Merge this run's metrics into the baseline files (update or append mode)."""
        updates: dict[Path, dict[str, dict[str, Any]]] = {}
        stamp = {"recorded": now(), "commit": commit(self.config.rootpath)}
        for result in self.results:
            for name, record in result["metrics"].items():
                entry = updates.setdefault(self.path_for(record), {}).setdefault(result["test"], {})
                entry[name] = {**compact(record), **stamp}
        written = []
        for path, entries in sorted(updates.items()):
            header = (
                {"torch": self.fingerprint.torch_minor}
                if path.name.startswith("portable-")
                else {"fingerprint": self.fingerprint.as_dict()}
            )
            try:
                baselines.merge(
                    path, entries, header, append if self.settings.baseline == "append" else None
                )
            except baselines.BaselineError as exc:
                self.errors.append(f"{exc} (not overwritten)")
            else:
                written.append(path)
        return written

    @property
    def controller(self) -> bool:
        """True unless this is a pytest-xdist worker or a rank other than the reporting one."""
        here = launch(self.config)
        rank_only = here is not None and (here.spawned or here.rank != 0)
        return not hasattr(self.config, "workerinput") and not rank_only

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Judge a passed benchmark's metrics and attach them to its call report."""
        report = yield
        bench = item.stash.get(BENCHMARK_KEY, None)
        if call.when == "call" and report.passed and bench is not None and bench.metrics:
            report.user_properties.append((PROPERTY, self.payload(item, bench.metrics)))
        return report

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect the verdicts of every test, whichever process ran it."""
        for name, value in report.user_properties:
            if name == PROPERTY:
                self.collect(value)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Record baselines, write the JSON report and fail the session on a regression."""
        if not self.controller or not (self.results or self.errors):
            return
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            self.measure_again()
        self.write_reports()  # before recording: the reports show what the run was judged against
        if self.settings.baseline in ("update", "append"):
            self.written = self.write()
        # A regression fails only a comparing run; an unreadable or unwritable file fails any.
        failing = self.errors or (self.settings.baseline == "compare" and self.regressed)
        if failing and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Print the verdict table, then what regressed, improved or could not be read."""
        if not self.controller or not (self.results or self.errors):
            return
        tr = terminalreporter
        tr.write_sep("=", "hpml benchmarks")
        for line in reports.table(self.results):
            tr.write_line(line)
        cited = reports.citations(self.results)
        if cited:
            tr.write_line("hpml: published figures beside ours:")
            for line in cited:
                tr.write_line(f"  {line}")
        summary = ", ".join(f"{n} {v}" for v, n in reports.counts(self.results).items())
        tr.write_line(
            f"hpml: {summary or 'no metrics'}; baselines: {self.directory} "
            f"({self.settings.baseline})"
        )
        for test, name, v in self.regressed:
            unit = self._unit(test, name)
            tr.write_line(f"hpml: REGRESSED {test} {name}: {reports.describe(v, unit)}", red=True)
        improved = sorted({r["test"] for r in self.results if _has(r, stats.IMPROVED)})
        if improved:
            tr.write_line(
                "hpml: improved; refresh their baselines with: pytest --hpml-baseline=update "
                + " ".join(improved)
            )
        if self.reruns is not None:
            tests = len(self.reruns.runs)
            tr.write_line(
                f"hpml: {tests} benchmark(s) measured in {self.process_count} processes "
                f"(the others took {self.reruns.seconds:.1f} s)"
            )
            for note in self.reruns.notes:
                tr.write_line(f"hpml: {note}; judged on fewer processes", yellow=True)
        for path in self.written:
            tr.write_line(f"hpml: baselines recorded in {path}")
        for error in self.errors:
            tr.write_line(f"hpml: ERROR {error}", red=True)

    def write_reports(self) -> None:
        """The JSON, Markdown and HTML reports that were asked for."""
        chosen, root = self.settings, self.config.rootpath
        writers = (
            (chosen.report, reports.write_json),
            (chosen.report_md, reports.write_markdown),
            (chosen.report_html, reports.write_html),
        )
        document = None
        for path, write in writers:
            if path:
                document = document or self.document()
                write(Path(root, path), document)

    def _unit(self, test: str, name: str) -> str:
        return next(r["metrics"][name]["unit"] for r in self.results if r["test"] == test)

    def document(self) -> dict[str, Any]:
        """The JSON report: fingerprint, commit, every metric and verdict."""
        return {
            "format": reports.REPORT_FORMAT,
            "created": now(),
            "commit": commit(self.config.rootpath),
            "fingerprint": self.fingerprint.as_dict(),
            "baseline_mode": self.settings.baseline,
            "baseline_dir": str(self.directory),
            "results": self.results,
            "counts": reports.counts(self.results),
            "errors": self.errors,
        }


def append(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Keep earlier runs of a sampled metric beside the new one (a baseline pooled over
    processes is steadier than one process's); deterministic values are replaced."""
    if old is None or "samples" not in new or old.get("kind") != new.get("kind"):
        return new
    stamp = {k: old[k] for k in ("recorded", "commit") if k in old}
    earlier = [{**stamp, **{k: run[k] for k in RUN_FIELDS if k in run}} for run in runs(old)]
    return {**new, "earlier": earlier[:EARLIER_RUNS]}


def _sampled(result: dict[str, Any]) -> bool:
    return any(m.get("kind") in processes.SAMPLED for m in result["metrics"].values())


def _has(result: dict[str, Any], verdict: str) -> bool:
    return any(v["verdict"] == verdict for v in result["verdicts"].values())


def judge_metric(
    record: dict[str, Any], base: dict[str, Any] | None, threshold: float
) -> stats.Comparison:
    """Compare one metric with its baseline according to its kind."""
    kind = record["kind"]
    if kind == "count":
        return stats.compare_value(
            record["value"],
            None if base is None else base.get("value"),
            tolerance=record.get("tolerance") or 0.0,
            higher_is_worse=record.get("higher_is_worse", True),
        )
    current = runs(record)
    stored = [] if base is None else runs(base)
    if not any(r.get("samples") for r in stored):  # nothing stored, or a record without samples
        return stats.Comparison(stats.NO_BASELINE, current=_median(pooled(current)))
    if kind == "ratio":
        samples = Judged([r["samples"] for r in current], [r["samples"] for r in stored])
        return stats.compare_samples(
            *samples.pooled(),
            threshold=record.get("tolerance") or threshold,
            higher_is_worse=False,
            processes=samples.process_medians(),
        )
    samples = judged(current, stored, kind == "rate")
    result = stats.compare_samples(
        *samples.pooled(),
        threshold=threshold,
        higher_is_worse=kind == "time",
        processes=samples.process_medians(),
    )
    # The raw medians are what people recognize, whatever was judged.
    raw_base = stats.median(pooled(stored))
    raw_current = _median(pooled(current))
    if not samples.units:
        reason = "; ".join(r for r in (result.reason, samples.why_raw) if r)
        return dataclasses.replace(result, baseline=raw_base, current=raw_current, reason=reason)
    raw_change = None if raw_current is None or raw_base <= 0 else raw_current / raw_base - 1
    return dataclasses.replace(
        result, baseline=raw_base, current=raw_current, raw_change=raw_change
    )


def _median(values: list[float]) -> float | None:
    return stats.median(values) if values else None


def compact(record: dict[str, Any]) -> dict[str, Any]:
    """What is stored: samples thinned evenly to at most MAX_STORED_SAMPLES a process run,
    5 digits each."""
    out = dict(record)
    if "processes" in out:
        out["processes"] = [compact(run) for run in out["processes"]]
    for key in ("samples", "reference"):
        values = out.get(key)
        if values:
            step = max(1, -(-len(values) // MAX_STORED_SAMPLES))
            out[key] = [float(f"{v:.5g}") for v in values[::step]]
    return out


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def commit(root: Path) -> str | None:
    """The checked-out commit, if ``root`` is in a git repository."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


REGRESSION_KEY = pytest.StashKey[Regression]()


def regression(config: pytest.Config) -> Regression:
    """The session's :class:`Regression`, created on first use."""
    if REGRESSION_KEY not in config.stash:
        config.stash[REGRESSION_KEY] = Regression(config)
    return config.stash[REGRESSION_KEY]
