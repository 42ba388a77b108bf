"""What the end of a session says: the report files, the failures on pytest's last line, and the
terminal summary, all from the session's verdicts (``run/`` measures and judges them)."""

from __future__ import annotations

import shlex
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from .. import _compat
from ..bench import reruns
from ..bench.metrics import is_sampled, is_work_counter
from ..config.progress import plural
from ..model import Result
from ..run.finish import Reporting
from ..run.session import Verdicts
from ..storage.writer import now
from ..vcs import head_commit
from ..verdict import judge, paired, stats
from . import files, history, text


def last_line(verdicts: Verdicts) -> dict[str, list[pytest.TestReport]]:
    """What fails the session, as pytest's last line counts it: one failed report per
    benchmark that regressed (not per metric), which other plugins reading pytest's tallies
    can take for what it is; and the errors."""
    regressed = text.regressions(verdicts.results) if verdicts.judging else []
    errors = verdicts.errors
    return {
        "benchmark regressed" if len(regressed) == 1 else "benchmarks regressed": [
            _failure(r.test, "regressed: " + "; ".join(_regressions(r))) for r in regressed
        ],
        "hpml error" if len(errors) == 1 else "hpml errors": [_failure("", e) for e in errors],
    }


def _regressions(result: Result) -> list[str]:
    return [
        f"{name}: {text.describe(v, result.metrics[name]['unit'])}"
        for name, v in sorted(result.verdicts.items())
        if v.verdict == stats.REGRESSED
    ]


def _failure(test: str, message: str) -> pytest.TestReport:
    test, message = text.visible(test), text.visible(message)  # other plugins may show them
    where = test.split("::")[0]
    return pytest.TestReport(test, (where, None, test), {}, "failed", message, "call")


def write_reports(verdicts: Verdicts) -> None:
    """The JSON, Markdown and HTML reports that were asked for, and the history record."""
    if not verdicts.duty.reports:
        return
    chosen, root = verdicts.settings, verdicts.config.rootpath
    writers = (
        (chosen.report, files.write_json),
        (chosen.report_md, partial(files.write_markdown, full_report=chosen.report)),
        (chosen.report_html, files.write_html),
    )
    made = None
    for path, write in writers:
        if path:
            made = made or document(verdicts)
            try:
                with _compat.uncaptured(verdicts.config):  # /dev/stdout is the real one
                    write(Path(root, path), made, root=root)
            except OSError as exc:
                verdicts.unwritten.append(f"cannot write {path}: {exc.strerror or exc}")
            except Exception as exc:  # a report that cannot be drawn must not lose the run
                verdicts.unwritten.append(f"cannot write {path}: {type(exc).__name__}: {exc}")
    if chosen.history:
        try:
            history.add(Path(root, chosen.history), made or document(verdicts), root)
        except OSError as exc:
            said = exc.strerror or exc
            verdicts.unwritten.append(f"cannot add to the history {chosen.history}: {said}")


def document(verdicts: Verdicts) -> dict[str, Any]:
    """The JSON report: fingerprint, commit, every metric and verdict."""
    return {
        "format": files.REPORT_FORMAT,
        "created": now(),
        "commit": head_commit(verdicts.config.rootpath),
        "fingerprint": verdicts.fingerprint.as_dict(),
        "baseline_mode": verdicts.duty.baseline,
        "baseline_dir": str(verdicts.directory),
        "results": [result.to_dict() for result in verdicts.results],
        "counts": text.counts(verdicts.results),
        "errors": verdicts.errors,
        "against": _against(verdicts),
        "instructions": _counting(verdicts),
        # what `pytest-hpml merge` needs to judge shards together (Note [Sharded runs])
        "counters": verdicts.settings.counters,
        "control": {"tested": verdicts.tested, "demoted": verdicts.demoted},
    }


def _counting(verdicts: Verdicts) -> dict[str, Any] | None:
    """With --hpml-instructions: how the instructions were counted; None otherwise."""
    found = verdicts.counting
    if found is None:
        return None
    return {
        "counted_on": found.on,
        "benchmarks": found.tests,
        "left_out": found.left_out,  # by --hpml-instructions=changed
        "seconds": round(found.seconds, 1),
        "counting_seconds": {test: round(t, 2) for test, t in found.counting.items()},
        "failed": found.failed,
        "uncounted": found.uncounted,
        "notes": found.notes,
    }


def _against(verdicts: Verdicts) -> dict[str, Any] | None:
    """With --hpml-against: both sides, the pairs, and what only one side has or only base
    failed; None otherwise."""
    against, found = verdicts.against, verdicts.pairs
    if against is None:
        return None
    return {
        **text.against_block(against),
        "pairs": 0 if found is None else len(found.measured),
        "cap": None if found is None else found.cap,
        # pairs done and verdicts settled at each look (Note [Adaptive pairs])
        "looks": [] if found is None else [list(look) for look in found.looks],
        "seconds": None if found is None else round(found.seconds, 1),
        "base_failed": {} if found is None else found.failed.get("base", {}),
        "removed": verdicts.removed,
        "notes": [] if found is None else found.notes,
    }


class Shown:
    """pytest's terminal reporter, every line written through it made visible (text.visible):
    test ids, metric names, machine names, reasons and errors come from files and options."""

    def __init__(self, reporter: Any) -> None:
        self.reporter = reporter
        self.warnings_only = False  # -q, once the blocks are out: what warns or fails only

    def write_line(self, line: str, **markup: bool) -> None:
        if not self.warnings_only or markup.get("red") or markup.get("yellow"):
            self.reporter.write_line(text.visible(line), **markup)

    def write_sep(self, sep: str, title: str | None = None, **markup: bool) -> None:
        shown = None if title is None else text.visible(title)
        self.reporter.write_sep(sep, shown, **markup)


def terminal(reporter: Any, verdicts: Verdicts) -> None:
    """Print the verdict table, then what regressed, improved or could not be read."""
    reporter = Shown(reporter)  # the one way out to the terminal: the helpers below get it
    results = verdicts.results
    reporter.write_sep("=", "hpml benchmarks")
    colour = "red" if verdicts.failing else "green"
    answer = text.answer(results if verdicts.judging else [], len(verdicts.errors))
    if verdicts.judging or verdicts.errors:
        reporter.write_line(f"hpml: {answer}", **{colour: True})
    quiet = verdicts.config.get_verbosity() < 0  # -q: the answer, the blocks and the warnings
    block = _against(verdicts)
    if block is not None and not quiet:
        reporter.write_line(f"hpml: against: {text.sides(block)}")
        reporter.write_line(f"hpml: {text.differs(block)}")
    elif not quiet:
        reporter.write_line(f"hpml: baselines: {verdicts.directory} ({verdicts.duty.baseline})")
    for heading, lines, colour in text.blocks(results) if verdicts.judging else ():
        reporter.write_line(f"hpml: {heading}", **{colour: True})
        for line in lines:
            reporter.write_line(line)
    reporter.warnings_only = quiet
    fold = verdicts.config.get_verbosity() < 1
    for line in text.table(results, fold=fold) if results else ():
        reporter.write_line(line)
    if results:
        reporter.write_line(f"hpml: {text.legend(verdicts.against is not None)}")
    if any(is_sampled(record) for r in results for record in r.metrics.values()):
        what = (
            paired.rule(verdicts.process_count // 2, verdicts.looks, len(_let_go(verdicts)))
            if verdicts.against is not None
            else judge.rule(verdicts.process_count)
        )
        own = "" if verdicts.against is not None else OWN_TABLE
        reporter.write_line(f"hpml: {what}{own}")
    cited = text.citations(results)
    if cited:
        reporter.write_line("hpml: published figures beside ours:")
        for line in cited:
            reporter.write_line(f"  {line}")
    summary = ", ".join(f"{n} {v}" for v, n in text.counts(results).items())
    against = verdicts.against
    reporter.write_line(f"hpml: metrics: {summary or 'none'}")
    improved = sorted({r.test for r in results if text.has(r, stats.IMPROVED)})
    if improved and against is None:
        reporter.write_line(
            "hpml: improved; refresh their baselines with: pytest --hpml-baseline=update "
            + " ".join(shlex.quote(test) for test in improved)  # ids with [...] for a shell
        )
    if verdicts.demoted:
        reporter.write_line(
            f"hpml: {verdicts.demoted} change(s) not significant once the session's "
            f"{verdicts.tested} tested metrics are counted (Benjamini-Hochberg): inconclusive"
        )
    _work(reporter, verdicts)
    _no_peak(reporter, verdicts)
    _instructions(reporter, verdicts)
    _busy(reporter, verdicts)
    _processes(reporter, verdicts)
    _pairs(reporter, verdicts)
    elsewhere = verdicts.other_machines()
    if elsewhere:
        reporter.write_line(f"hpml: {elsewhere}", yellow=True)
    for note in verdicts.notes:
        reporter.write_line(f"hpml: {note}", yellow=True)
    for path in verdicts.written:
        reporter.write_line(f"hpml: baselines recorded in {path}")
    for error in verdicts.errors:
        reporter.write_line(f"hpml: ERROR {error}", red=True)
    _unreached(reporter, verdicts)
    if against is not None and _compat.hide_benchmark_table(verdicts.config):
        reporter.write_line(f"hpml: {HIDDEN_TABLE}")


# pytest-benchmark's table beside the verdicts: under --hpml-against it would show the one round
# this process took, which contradicts the pairs' values (only they are judged).
OWN_TABLE = "; pytest-benchmark's own table shows this process's rounds only"
HIDDEN_TABLE = (
    "pytest-benchmark's own table is left out: it would show this process's one round, "
    "not the pairs' measurements that were judged"
)


def _unreached(reporter: Any, verdicts: Verdicts) -> None:
    """The last line of a stored-baseline comparison whose time verdicts were not reached: on
    a busy or unknown runner a time stored elsewhere or earlier says little, and what to do
    instead is the point (Note [Busy machine])."""
    if verdicts.against is not None or verdicts.duty.baseline != "compare":
        return
    unreached = [
        (test, name)
        for r in verdicts.results
        for name, v in r.verdicts.items()
        if v.verdict == stats.INCONCLUSIVE and is_sampled(r.metrics[name])
        for test in [r.test]
    ]
    if not unreached:
        return
    busy = " on this busy machine" if verdicts.busy_benchmarks() else ""
    reporter.write_line(
        f"hpml: {len(unreached)} time verdict(s) could not be reached against the stored "
        f"baselines{busy}; judge the change against its base instead "
        "(--hpml-against=origin/main measures both sides here, in one run), or record and "
        "compare on a dedicated runner; counts were judged all the same",
        yellow=True,
    )


def _instructions(reporter: Any, verdicts: Verdicts) -> None:
    """How the instructions were counted (--hpml-instructions), what it cost, what went wrong."""
    found = verdicts.counting
    if found is None:
        return
    counted = len(found.counted.get("head", {}))
    if found.counted:
        spent = found.counting.values()
        reporter.write_line(
            f"hpml: instructions of {counted} of {found.tests} benchmark(s) counted under "
            f"callgrind in {len(found.counted)} process(es), {found.seconds:.1f} s in all: "
            f"{sum(spent):.1f} s counting, at most {max(spent, default=0.0):.1f} s a "
            f"benchmark, the rest starting valgrind and the tests; counted on {found.on}"
        )
    if found.left_out:
        reporter.write_line(
            f"hpml: instructions of {plural(found.left_out, 'benchmark')} not counted "
            "(--hpml-instructions=changed): their work counters unchanged and their times "
            "passed within the threshold"
        )
    for side, failed in found.failed.items():
        for test, why in failed.items():
            reporter.write_line(f"hpml: {side} under valgrind: {test} {why}", yellow=True)
    for metric, why in found.uncounted.items():
        reporter.write_line(f"hpml: not counted: {metric}: {why}", yellow=True)
    for note in found.notes:
        reporter.write_line(f"hpml: {note}", yellow=True)


def _work(reporter: Any, verdicts: Verdicts) -> None:
    """What the table leaves out of the work counters (Note [Work counters]); and under
    pytest-xdist, that only counts were measured."""
    judged = [
        v.verdict
        for r in verdicts.results
        for name, v in r.verdicts.items()
        if is_work_counter(name)
    ]
    if judged:
        quiet = sum(v in text.QUIET for v in judged)
        seconds = [r.work_seconds for r in verdicts.results]
        reporter.write_line(
            f"hpml: {len(judged)} work counters judged, {quiet} of them unchanged or without "
            "a baseline and left out of the table (the JSON report has them all); counting "
            f"took {sum(seconds):.2f} s, at most {max(seconds):.2f} s a benchmark"
        )
    if getattr(verdicts.config.option, "numprocesses", None) and not any(
        is_sampled(record) for r in verdicts.results for record in r.metrics.values()
    ):
        counts = "counts were recorded and judged" if verdicts.results else "nothing was measured"
        reporter.write_line(
            "hpml: times were not measured: under pytest-xdist, pytest-benchmark turns timing "
            f"off (tests running side by side disturb each other's times); {counts}",
            yellow=True,
        )


def _no_peak(reporter: Any, verdicts: Verdicts) -> None:
    """Once a run, not per test: why benchmarks with FLOPs have no ``mfu`` (Note [MFU])."""
    reasons = dict.fromkeys(r.no_peak for r in verdicts.results if r.no_peak)
    for why in reasons:
        reporter.write_line(
            f"hpml: mfu not computed: {why}; give one with --hpml-peak-flops or the "
            "pytest_hpml_peak_flops hook"
        )


def _busy(reporter: Any, verdicts: Verdicts) -> None:
    """Say which benchmarks ran on a busy machine: their verdicts, or the baselines being
    recorded from them, deserve less trust (Note [Busy machine])."""
    found = verdicts.busy_benchmarks()
    if not found:
        return
    tests = _some(list(found), len(verdicts.results))
    if verdicts.recording:
        reporter.write_line(
            f"hpml: WARNING recorded on a busy machine ({next(iter(found.values()))}): {tests}. "
            "Baselines from such runs make later verdicts noisy or wrong: record them again on "
            "a quiet machine (--hpml-baseline=update)",
            red=True,
        )
    else:
        reporter.write_line(
            f"hpml: {len(found)} benchmark(s) measured on a busy machine (their reasons say "
            f"how), so their verdicts deserve less trust: {tests}",
            yellow=True,
        )


def _processes(reporter: Any, verdicts: Verdicts) -> None:
    found = verdicts.reruns
    if found is None:
        return
    reporter.write_line(
        f"hpml: {len(found.runs)} benchmark(s) measured in {verdicts.process_count} processes "
        f"(the others took {found.seconds:.1f} s)"
    )
    for note in found.notes:
        reporter.write_line(f"hpml: {note}; judged on fewer processes", yellow=True)


def _pairs(reporter: Any, verdicts: Verdicts) -> None:
    """How head was measured against base, and what only one side has or only base failed."""
    found = verdicts.pairs
    if found is None:
        return
    stopped = found.stopped()
    reporter.write_line(
        f"hpml: {len(found.measured)} pair(s) of processes, base and head alternating "
        f"(they took {found.seconds:.1f} s){f'; {stopped}' if stopped else ''}"
    )
    for test, why in sorted(found.failed.get("base", {}).items()):
        reporter.write_line(f"hpml: {test}: {reruns.on_side('base', why)}, not judged", yellow=True)
    if verdicts.removed:
        reporter.write_line(
            "hpml: removed (only in the base revision): " + ", ".join(verdicts.removed)
        )
    for note in found.notes:
        reporter.write_line(f"hpml: {note}", yellow=True)


def _some(tests: list[str], of: int, shown: int = 5) -> str:
    """A few test ids, or all of them in one word: a line that names a hundred ids is unread."""
    if len(tests) == of and of > shown:
        return f"all {of}"
    more = f" and {len(tests) - shown} more" if len(tests) > shown else ""
    return ", ".join(tests[:shown]) + more


def _let_go(verdicts: Any) -> set[str]:
    """The benchmarks head against base stopped measuring unsettled (Note [Adaptive pairs])."""
    return verdicts.pairs.let_go if verdicts.pairs is not None else set()


def kept(verdicts: Verdicts) -> str:
    """Where the measurements of a run whose files could not be written are kept."""
    return files.keep(document(verdicts))


REPORTING = Reporting(write=write_reports, kept=kept, last_line=last_line)
