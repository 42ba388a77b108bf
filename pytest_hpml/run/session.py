"""The session's verdicts: what every benchmark measured, judged against its stored baseline,
and the baselines this run records.

Verdicts are reached where a test ran (an xdist worker, or the only process) and travel in the
test report (``user_properties``), so the controller sees every one of them; it alone measures
benchmarks again in fresh processes, records baselines and writes reports.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .. import vcs
from ..bench import reruns
from ..bench.fixture import BENCHMARK_KEY
from ..bench.metrics import is_sampled
from ..bench.pairing import Pairs
from ..config import markers
from ..config.progress import counting_progress
from ..config.resolution import Settings
from ..config.role import Duty, duty, is_controller, settings
from ..hardware import fingerprint
from ..model import Result
from ..storage import writer
from ..storage.writer import Refused
from ..verdict import baselines, paired, policy, stats
from ..verdict.judge import busy, measured_value, runs, threshold_said
from . import pairs, stored

if TYPE_CHECKING:
    from ..bench.sides import Against


class Verdicts:
    """The session's baselines: where they are, what they say, and what this run found."""

    def __init__(self, config: pytest.Config, chosen: Settings, duty: Duty) -> None:
        self.config = config
        self.settings = chosen
        self.duty = duty
        self.directory = Path(config.rootpath, chosen.baseline_dir)
        self.results: list[Result] = []
        self.errors: list[str] = []
        self.notes: list[str] = []  # settings of other plugins that pytest-hpml overrides
        self._files: dict[Path, dict[str, Any] | None] = {}
        self.written: list[Path] = []
        self.unwritten: list[str] = []  # what could not be written, and why
        self.reruns: reruns.Reruns | None = None
        self.process_count = 1
        self.demoted = 0  # regressions and improvements the session-wide control took back
        self.tested = 0  # metrics whose verdicts rest on a test
        self.pairs: Pairs | None = None  # once --hpml-against measured both sides
        self.looks: tuple[int, ...] = ()  # pairs after which they may stop (Note [Adaptive pairs])
        self.removed: list[str] = []  # benchmarks of the base revision the working tree lacks
        self.counting: Any = None  # bench.instructions.Counting, with --hpml-instructions

    @functools.cached_property
    def fingerprint(self) -> fingerprint.Fingerprint:
        found: fingerprint.Fingerprint = self.config.hook.pytest_hpml_fingerprint(
            config=self.config
        )
        return found.with_name(self.settings.machine) if self.settings.machine else found

    def path_for(self, record: dict[str, Any]) -> Path:
        if record.get("counted_on"):  # an instruction count
            return baselines.instructions_path(self.directory, record["counted_on"])
        if record.get("portable"):
            return baselines.portable_path(self.directory, self.fingerprint)
        return baselines.machine_path(self.directory, self.fingerprint)

    def stored(self, test: str, name: str, record: dict[str, Any]) -> dict[str, Any] | None:
        """The baseline of one metric, or None; an unreadable file is reported once."""
        entry: dict[str, Any] | None = self._entries(self.path_for(record)).get(test, {}).get(name)
        return entry

    def _entries(self, path: Path) -> dict[str, Any]:
        if path not in self._files:
            try:
                loaded = baselines.load(path)
            except baselines.BaselineError as exc:
                self._files[path] = None
                if str(exc) not in self.errors:  # a directory's problem is every file's in it
                    self.errors.append(str(exc))
            else:
                self._files[path] = loaded
                said = baselines.unusable(loaded)
                self.errors.extend(f"baseline file {path}: {problem}" for problem in said)
        data = self._files[path]
        entries: dict[str, Any] = {} if data is None else data["entries"]
        return entries

    def processes_for(self, test: str) -> int:
        """How many processes measure ``test``: --hpml-record-processes when recording,
        --hpml-processes when comparing with a stored time baseline, else one (nothing to be
        precise against)."""
        mode, count = self.duty.baseline, self.duty.processes
        if mode == "off":
            return 1
        if mode in ("update", "append"):
            return self.duty.record_processes
        if count == 1:
            return 1
        stored = self._entries(baselines.machine_path(self.directory, self.fingerprint))
        return count if stored.get(test) else 1

    def budget(self, test: str) -> float:
        """Seconds of rounds for ``test`` in this process: what a parent process set; else all
        of --hpml-bench-time when it is measured here alone; else the share of one of a
        comparison's processes, which a recording process gets too. With --hpml-against, 0:
        this run only checks that it works, the pairs measure (one sample, Note [Cheaper
        processes])."""
        if self.duty.bench_time is not None:
            return self.duty.bench_time
        if self.settings.against:
            return 0.0
        if self.processes_for(test) == 1:
            return self.settings.bench_time
        return self.settings.bench_time / self.settings.processes

    def measure_again(self) -> None:
        """Measure the sampled benchmarks in the other processes and judge the pooled runs."""
        sampled = [r.test for r in self.results if any(map(is_sampled, r.metrics.values()))]
        counts = {test: self.processes_for(test) for test in sampled}
        tests = [test for test, count in counts.items() if count > 1]
        if not tests:
            return
        self.process_count = max(counts[test] for test in tests)
        share = self.settings.bench_time / self.settings.processes
        self.reruns = reruns.measure_again(self.config, tests, self.process_count - 1, share)
        pooled_tests = set(reruns.pool(self.results, self.reruns))
        for result in self.results:
            if result.test in pooled_tests:
                result.verdicts = self.judge(
                    result.test, result.metrics, result.threshold, result.accepted
                )

    @property
    def against(self) -> Against | None:
        """The comparison's sides with --hpml-against, else None."""
        from ..bench.sides import AGAINST_KEY

        return self.config.stash.get(AGAINST_KEY, None) if self.duty.against else None

    def measure_against(self) -> None:
        """Measure every benchmark in pairs of processes of the base tree and the working
        tree, and judge each metric on its pairs (Note [Head against base])."""
        against = self.against
        tests = [result.test for result in self.results]
        if against is None or not tests:
            return
        self.looks = stats.looks(self.settings.pairs)
        found = self.pairs = against.measure(
            tests,
            self.looks,
            lambda count: pairs.pair_window(self.settings, count),
            self.unsettled,
            before=stats.import_ahead,
        )
        self.process_count = 2 * len(found.measured)
        on_base = found.collected.get("base")
        for result in self.results:
            result.verdicts.update(self.judge_against(result, result.metrics))
        on_head = found.collected.get("head")
        if on_base is not None and on_head is not None:
            self.removed = sorted(on_base - on_head)
        for result in self.results:  # a metric the base's test records and the head's does not
            gone = found.names("base", result.test) - set(result.metrics)
            self.removed += [f"{result.test} {name}" for name in sorted(gone)]

    def judge_against(self, result: Result, metrics: dict[str, Any]) -> dict[str, stats.Comparison]:
        """Verdicts for ``metrics`` of one test (``result``) on the pairs of processes and
        the counts under valgrind of both sides."""
        verdicts: dict[str, stats.Comparison] = {}
        found = self.pairs
        if found is None:  # called once the pairs measured
            return verdicts
        for name, record in metrics.items():
            verdict = self._against(result, name, record, found)
            # only a time or rate is judged on the pairs: a recorded value has no interval
            let_go = result.test in found.let_go and is_sampled(record)
            if let_go and not stats.settled(verdict):
                reason = (
                    f"{verdict.reason}; not measured beyond {len(verdict.pairs or ())} pairs: "
                    f"at this spread, {found.cap} would not settle it either"
                )
                verdict = dataclasses.replace(verdict, reason=reason)
            verdict = threshold_said(verdict, record, self.settings.threshold)
            verdict = self.settle(verdict, name, result.accepted)
            verdicts[name] = verdict
        return verdicts

    def unsettled(self, found: Pairs) -> list[str]:
        """The benchmarks whose verdicts more pairs of processes (``found``) could change: a
        time or rate neither beyond the threshold nor within it by its interval (Note
        [Adaptive pairs])."""
        on_base = found.collected.get("base")
        failed = {test for tests in found.failed.values() for test in tests}
        done, looks = len(found.measured), len(self.looks)
        measuring = []
        for result in self.results:
            test = result.test
            if (on_base is not None and test not in on_base) or test in failed:
                continue  # nothing to compare with, or it would fail again
            if test in found.let_go:  # let go at an earlier look: no pair measured it since
                continue
            judged = [
                self._against(result, name, record, found)
                for name, record in result.metrics.items()
                if is_sampled(record)
            ]
            if all(stats.settled(c) for c in judged):
                continue
            if all(stats.settled(c) or stats.let_go(c, done, found.cap, looks) for c in judged):
                found.let_go.add(test)
                continue
            measuring.append(test)
        return measuring

    def _against(
        self, result: Result, name: str, record: dict[str, Any], found: Pairs
    ) -> stats.Comparison:
        """One metric's verdict against the base side (``found``):
        new, not judged, or on its pairs."""
        test, failed = result.test, found.failed.get("base", {})
        on_base = found.collected.get("base")
        if on_base is not None and test not in on_base:
            reason = "only in the working tree: nothing to compare with"
            return stats.Comparison(stats.NEW, current=measured_value(record), reason=reason)
        if test in failed:
            reason = f"{reruns.on_side('base', failed[test])}: not judged"
            return stats.Comparison(
                stats.INCONCLUSIVE, current=measured_value(record), reason=reason
            )
        runs = found.runs(test, name)
        on_base_side = set() if runs else found.names("base", test)
        if on_base_side and name not in on_base_side:
            kept = ", ".join(sorted(on_base_side))
            reason = f"only in the working tree's test (the base's records {kept}): not compared"
            return stats.Comparison(stats.NEW, current=measured_value(record), reason=reason)
        return paired.judge_paired(record, runs, result.threshold, len(self.looks))

    def count_instructions(self) -> None:
        """With --hpml-instructions: count the benchmarks' instructions in a process under
        callgrind, each side's with --hpml-against (judged there, on both sides' counts), else
        judged here against the stored counts (Note [Instruction counts])."""
        if not self.settings.instructions or not self.results:
            return
        from ..bench import instructions

        asked = [r for r in self.results if r.instructions]
        tests = [r.test for r in asked if self._may_have_changed(r)]
        against = self.against
        sides: dict[str, Callable[..., Any]]
        if against is None:
            sides = {"head": functools.partial(reruns.ask, self.config, bench_time=0.0)}
        else:
            sides = {side.name: against.asker(side) for side in (against.base, against.head)}
        progress = counting_progress(self.config, len(tests), len(sides))
        try:
            with progress:
                self.counting = instructions.count(tests, sides, progress.step)
        except KeyboardInterrupt:
            self.counting = instructions.Counting(notes=["instructions not counted (interrupted)"])
            reruns.interrupted(self.config)
            return
        self.counting.left_out = len(asked) - len(tests)
        if self.pairs is not None:
            self.pairs.counted = self.counting.counted
        counted = self.counting.counted.get("head", {})
        for result in self.results:
            found = counted.get(result.test, {})
            result.metrics.update(found)
            verdicts = (
                self.judge_against(result, found)
                if self.pairs is not None
                else self.judge(result.test, found, result.threshold, result.accepted)
            )
            result.verdicts.update(verdicts)

    def _may_have_changed(self, result: Result) -> bool:
        """Whether --hpml-instructions counts ``result``'s benchmark: always, unless asked for
        the changed ones only (Note [Changed benchmarks]) in a run that judges; then where a
        work counter or a time did not pass, or a time's interval reaches beyond the
        threshold."""
        if self.settings.instructions != "changed" or not self.judging:
            return True
        verdicts = result.verdicts.values()
        return not verdicts or not all(stats.quiet(verdict) for verdict in verdicts)

    def busy_benchmarks(self) -> dict[str, str]:
        """The benchmarks whose runs here show a busy machine, and how (Note [Busy machine])."""
        found: dict[str, str] = {}
        for result in self.results:
            for name, record in result.metrics.items():
                why = (
                    busy(self._measured(result.test, name, record)) if is_sampled(record) else None
                )
                if why:
                    found.setdefault(result.test, why)
        return found

    def _measured(self, test: str, name: str, record: dict[str, Any]) -> list[Any]:
        """The process runs a verdict on a metric rests on: the pairs' with --hpml-against,
        else this session's (and its other processes')."""
        if self.pairs is None:
            return runs(record)
        return [run for pair in self.pairs.runs(test, name) for run in pair]

    def control_false_alarms(self) -> None:
        """Judge the session's tested metrics together, so that hundreds of them do not add up
        to a false alarm (Note [Many metrics]); compare and against modes only: nothing else is
        judged."""
        if not self.judging:
            return
        strict = self.settings.counters == "strict"
        self.demoted, self.tested = policy.control(self.results, strict, bool(self.duty.against))

    def judge(
        self,
        test: str,
        metrics: dict[str, Any],
        threshold: float,
        accepted: dict[str, Any] | None = None,
    ) -> dict[str, stats.Comparison]:
        """Verdicts for every metric of one test (all ``no-baseline`` when mode is off);
        ``accepted``: the changes the test accepts (``benchmark.expect_change``)."""
        verdicts: dict[str, stats.Comparison] = {}
        for name, record in metrics.items():
            # recording judges nothing: what it replaces is not what the next run is judged by
            judging = self.duty.baseline == "compare"
            base = self.stored(test, name, record) if judging else None
            comparison = self.config.hook.pytest_hpml_judge_metric(
                config=self.config,
                test=test,
                name=name,
                record=record,
                baseline=base,
                threshold=threshold,
            )
            if self.recording:
                comparison = dataclasses.replace(comparison, verdict=stats.RECORDED)
            else:
                comparison = threshold_said(comparison, record, self.settings.threshold)
                comparison = self.settle(comparison, name, accepted)
            verdicts[name] = comparison
        return verdicts

    def settle(
        self, comparison: stats.Comparison, name: str, accepted: dict[str, Any] | None
    ) -> stats.Comparison:
        """The verdict that counts for the run, by the counter policy and the test's accepted
        changes (Note [Counter policy], Note [Accepted changes])."""
        strict = self.settings.counters == "strict"
        return policy.settle(comparison, name, accepted, strict)

    def payload(self, item: pytest.Item) -> Result | None:
        """What travels in a passed benchmark's report: metrics, threshold, verdicts, new
        errors; None for a test that measured nothing."""
        bench = item.stash.get(BENCHMARK_KEY, None)
        if bench is None or not (bench.metrics or bench.uncounted):
            return None  # (under valgrind, what was not counted and why travels too)
        chosen = markers.bench_settings(markers.bench_mark(item))
        threshold = chosen.threshold or self.settings.threshold
        known = len(self.errors)
        accepted = bench.accepted
        for said in policy.unrecorded(accepted, chosen.tolerance, bench.metrics):
            self.errors.append(f"{item.nodeid}: {said}")
        verdicts = self.judge(item.nodeid, bench.metrics, threshold, accepted)
        return Result(
            test=item.nodeid,
            threshold=threshold,
            metrics=bench.metrics,
            verdicts=verdicts,
            accepted=accepted,
            errors=self.errors[known:],
            notes=bench.superseded,
            work_seconds=bench.work_seconds,
            instruction_seconds=bench.instruction_seconds,
            uncounted=bench.uncounted,
            instructions=chosen.instructions,
            no_peak=bench.no_peak,
        )

    def collect(self, payload: dict[str, Any]) -> None:
        """Take a result from a test report's ``user_properties`` (the wire's JSON form)."""
        result = Result.from_dict(payload)
        self.results.append(result)
        self.errors.extend(e for e in result.errors if e not in self.errors)
        for note in result.notes:
            if note not in self.notes:
                self.notes.append(note)

    @property
    def regressed(self) -> list[tuple[str, str, stats.Comparison]]:
        return self.having(stats.REGRESSED)

    def having(self, verdict: str) -> list[tuple[str, str, stats.Comparison]]:
        """(test, metric, verdict) of every metric judged ``verdict``."""
        return [
            (r.test, name, v)
            for r in self.results
            for name, v in r.verdicts.items()
            if v.verdict == verdict
        ]

    @property
    def recording(self) -> bool:
        return self.duty.baseline in ("update", "append")

    @property
    def judging(self) -> bool:
        """Whether this run judges (against stored baselines or the base revision)."""
        return self.duty.baseline == "compare" or bool(self.duty.against)

    @property
    def failing(self) -> bool:
        """A regression fails only a judging run; an unreadable or unwritable file any."""
        return bool(self.errors) or (self.judging and bool(self.regressed))

    def write(self) -> list[Path]:
        """Merge this run's metrics into the baseline files (update or append mode)."""
        updates: dict[Path, dict[str, dict[str, Any]]] = {}
        stamp = {"recorded": writer.now(), "commit": vcs.head_commit(self.config.rootpath)}
        for result in self.results:
            for name, record in result.metrics.items():
                entry = updates.setdefault(self.path_for(record), {}).setdefault(result.test, {})
                entry[name] = {**stored.compact(record), **stamp}
        written = []
        # no link of a baseline file leads out of the project, or out of a directory outside it
        # that the run named (Note [Outside the project])
        root = self.config.rootpath
        if not writer.inside(self.directory, root):
            root = self.directory
        for path, entries in sorted(updates.items()):
            header = stored.header(path, entries, self.fingerprint)
            combine = stored.append if self.duty.baseline == "append" else None
            try:
                baselines.merge(path, entries, header, combine, root=root)
            except baselines.BaselineError as exc:  # the broken file is left as it is
                self.unwritten.append(f"{exc} (not overwritten)")
            except Refused as exc:
                self.unwritten.append(f"baseline file {exc}")
            except OSError as exc:
                self.unwritten.append(f"cannot write baseline file {path}: {exc.strerror or exc}")
            else:
                written.append(path)
        return written

    def other_machines(self) -> str | None:
        """Where sampled metrics found no baseline on this machine but other machines have
        some: which, and how the nearest differs (``stored.other_machines``); compare only."""
        if self.duty.baseline != "compare":
            return None
        return stored.other_machines(self.directory, self.fingerprint, self.results)


VERDICTS_KEY = pytest.StashKey[Verdicts]()


def verdicts(config: pytest.Config) -> Verdicts:
    """The session's :class:`Verdicts`, made when a benchmark first needs it."""
    if VERDICTS_KEY not in config.stash:
        config.stash[VERDICTS_KEY] = Verdicts(config, settings(config), duty(config))
    return config.stash[VERDICTS_KEY]


def reported(config: pytest.Config) -> Verdicts | None:
    """The verdicts where this process reports them: in the controller, once a benchmark gave
    metrics or a baseline file could not be read, or whenever reports were asked for; None
    elsewhere."""
    if not is_controller(config):
        return None
    if reports_asked(config) or _untimed(config):  # say what came of it, always
        return verdicts(config)
    found = config.stash.get(VERDICTS_KEY, None)
    return found if found is not None and (found.results or found.errors) else None


def _untimed(config: pytest.Config) -> bool:
    """A run of benchmarks while pytest-xdist turns timing off: it may measure nothing at
    all, and must say why."""
    return bool(getattr(config.option, "numprocesses", None)) and settings(config).benchmarks


def reports_asked(config: pytest.Config) -> bool:
    """Whether this process writes report files: a CI step that uploads them must find them,
    even when every benchmark failed."""
    chosen = settings(config)
    return duty(config).reports and bool(chosen.report or chosen.report_md or chosen.report_html)
