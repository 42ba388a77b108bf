"""The ``pytest-hpml`` command: look at baseline files and JSON reports without running pytest.

    pytest-hpml list [--dir baselines]          the baseline files, their machine, entry counts
    pytest-hpml show FILE [--test PATTERN]      the entries of a baseline file or report
    pytest-hpml diff OLD NEW                    median change per test and metric
    pytest-hpml render REPORT.json [--md OUT.md] [--html OUT.html] [--baselines DIR]
    pytest-hpml history DIR [--site OUT] [--test PATTERN] [--threshold F] [--confidence C]
    pytest-hpml merge R1.json R2.json ... -o MERGED.json [--md OUT.md] [--html OUT.html]
    pytest-hpml bisect GOOD BAD -k TEST [--metric NAME] [-- PYTEST_ARG...]

It never imports torch: it is for looking at files from CI on any machine. Unreadable files are
one-line errors and exit status 2.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from .bench.metrics import kind_of, per_second
from .config.values import fraction_between_0_and_1
from .model import results_of
from .report import files, history, text
from .report.html import ReportError
from .report.reading import existing, holds, load_report, report_problem
from .storage import reader, writer
from .verdict import baselines, changes, judge, stats
from .verdict.baselines import BaselineError
from .verdict.judge import center

Entries = dict[str, dict[str, Any]]  # test id -> metric -> record


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    ours, rest = given, []
    if "--" in given:  # the rest is pytest's (bisect): argparse would read it as its own
        ours, rest = given[: given.index("--")], given[given.index("--") + 1 :]
    top = parser()
    args = top.parse_args(ours)
    if rest and args.run is not run_bisect:
        top.error("arguments after -- are pytest's, for bisect only")
    args.pytest_args = rest
    try:
        status: int = args.run(args)
        return status
    except (reader.Unreadable, ReportError, changes.MissingLibrary, OSError) as exc:
        say(f"pytest-hpml: error: {_message(exc)}", file=sys.stderr)
        return 2


def _message(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return f"cannot write {exc.filename}: {exc.strerror}"
    return str(exc)


class _Parser(argparse.ArgumentParser):
    """argparse, its errors made visible: it quotes an unrecognized argument as it is."""

    def error(self, message: str) -> NoReturn:
        super().error(text.visible(message))


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="pytest-hpml", description="Look at pytest-hpml baseline files and JSON reports."
    )
    commands = top.add_subparsers(title="commands", metavar="COMMAND", required=True)
    add = commands.add_parser
    cmd = add("list", help="the baseline files in a directory: machine, id, entry counts")
    cmd.add_argument("--dir", type=Path, default=Path("baselines"), help="default: baselines")
    cmd.set_defaults(run=run_list)
    cmd = add("show", help="the entries of a baseline file or JSON report, with medians")
    cmd.add_argument("file", type=Path, metavar="FILE")
    cmd.add_argument("--test", metavar="PATTERN", help="test ids containing PATTERN (or a glob)")
    cmd.set_defaults(run=run_show)
    cmd = add("diff", help="median change per test and metric between two files")
    cmd.add_argument("old", type=Path, metavar="OLD", help="a baseline file or JSON report")
    cmd.add_argument("new", type=Path, metavar="NEW", help="a baseline file or JSON report")
    cmd.set_defaults(run=run_diff)
    cmd = add("render", help="the Markdown and/or HTML report of a JSON report")
    cmd.add_argument("report", type=Path, metavar="REPORT", help="from pytest --hpml-report")
    _add_views(cmd)
    cmd.set_defaults(run=run_render)
    cmd = add("history", help="the commits where a metric stepped, from --hpml-history's files")
    cmd.add_argument("dir", type=Path, metavar="DIR", help="from pytest --hpml-history=DIR")
    cmd.add_argument("--site", type=Path, metavar="OUT", help="write the HTML site into OUT")
    cmd.add_argument("--test", metavar="TEXT", help="only test ids containing TEXT")
    cmd.add_argument(
        "--threshold",
        type=fraction_between_0_and_1,
        default=DEFAULT_THRESHOLD,
        metavar="F",
        help=f"smallest step of a time or rate, relative (default {DEFAULT_THRESHOLD}); a count's "
        "steps are all shown",
    )
    cmd.add_argument(
        "--confidence",
        type=fraction_between_0_and_1,
        default=changes.CONFIDENCE,
        metavar="C",
        help=f"confidence a step needs (default {changes.CONFIDENCE})",
    )
    cmd.set_defaults(run=run_history)
    _add_merge(add)
    _add_bisect(add)
    return top


def _add_merge(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``pytest-hpml merge`` (Note [Sharded runs])."""
    cmd = add(
        "merge",
        help="the JSON reports of a suite's shards (CI jobs) as one report and one verdict",
        description="Join the shards' reports into one, judged together as one session; "
        "exit status 1 if that fails, 0 if not, 2 for reports that are not shards of one run.",
    )
    cmd.add_argument("reports", type=Path, nargs="+", metavar="REPORT", help="one per shard")
    cmd.add_argument(
        "-o", "--output", type=Path, required=True, metavar="MERGED", help="the merged report"
    )
    _add_views(cmd)
    cmd.set_defaults(run=run_merge)


def _add_bisect(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``pytest-hpml bisect`` (Note [Bisect]); what follows ``--`` is pytest's (:func:`main`)."""
    cmd = add(
        "bisect",
        usage="pytest-hpml bisect GOOD BAD -k TEST [--metric NAME] [-- PYTEST_ARG ...]",
        help="the first commit between GOOD and BAD where a benchmark's metric changed",
        description="Check out each commit needed in a temporary worktree and measure the test "
        "there, halving the commits from GOOD to BAD (first parents). Arguments after -- go to "
        "pytest (paths, --hpml-bench-time, --hpml-pairs, --hpml-threshold). Exit status 0 when "
        "a commit is named, 1 when BAD's metric is GOOD's, 2 when it cannot search.",
    )
    cmd.add_argument("good", metavar="GOOD", help="a commit where the metric is as it was")
    cmd.add_argument("bad", metavar="BAD", help="a later commit where it changed")
    cmd.add_argument("-k", dest="test", required=True, metavar="TEST", help="selects one test")
    cmd.add_argument(
        "--metric",
        default="time",
        metavar="NAME",
        help="ops, syncs or another work counter, instructions (exact), or time (judged "
        "against GOOD in pairs of processes); default: time",
    )
    cmd.set_defaults(run=run_bisect)


def _add_views(cmd: argparse.ArgumentParser) -> None:
    """The options of the Markdown and HTML reports drawn from a JSON report."""
    cmd.add_argument("--md", type=Path, metavar="OUT", help="write the Markdown summary here")
    cmd.add_argument("--html", type=Path, metavar="OUT", help="write the HTML report here")
    cmd.add_argument(
        "--baselines",
        type=Path,
        metavar="DIR",
        help="baseline directory whose samples to plot (default: the report's, in compare mode)",
    )


DEFAULT_THRESHOLD = 0.06  # --hpml-threshold's default


# --- reading ---------------------------------------------------------------------------------


def load_entries(path: Path, said: list[str]) -> Entries:
    """The records of a baseline file or a JSON report, test id -> metric -> record; the
    unusable ones are left out, printed and added to ``said`` (the command then exits 2, as
    ``list`` does for a bad file)."""
    if files.is_report(existing(path)):
        return {r["test"]: r["metrics"] for r in load_report(path)["results"]}
    data = baselines.load(path)
    for problem in baselines.unusable(data):
        said.append(problem)
        say(f"pytest-hpml: {path}: {problem}", file=sys.stderr)
    entries: Entries = data["entries"]
    return entries


# --- commands --------------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    directory: Path = args.dir
    if directory.exists() and not directory.is_dir():
        raise BaselineError(f"{directory} is a file, not a directory (see --dir)")
    if not directory.is_dir():
        raise BaselineError(f"no baseline directory {directory} (see --dir)")
    paths = sorted(directory.glob("*.json"))
    if not paths:
        say(f"no baseline files in {directory}")
        return 0
    body, failed = [], False
    for path in paths:
        try:
            data = baselines.load(path)
        except BaselineError as exc:
            say(f"pytest-hpml: error: {exc}", file=sys.stderr)
            failed = True
            continue
        body.append(_file_row(path, data))
    _print(("file", "machine", "id", "tests", "metrics"), body)
    return 2 if failed else 0


def _file_row(path: Path, data: dict[str, Any]) -> dict[str, str]:
    fp = data.get("fingerprint") or {}
    machine = fp.get("name") or (
        f"portable, torch {data['torch']}"
        if "torch" in data
        else f"instructions, {data['counted_on']}"
        if "counted_on" in data
        else "-"
    )
    entries = data["entries"]
    return {
        "file": path.name,
        "machine": machine,
        "id": fp.get("id", "-"),
        "tests": str(len(entries)),
        "metrics": str(sum(len(m) for m in entries.values())),
    }


def run_show(args: argparse.Namespace) -> int:
    said: list[str] = []
    entries = load_entries(args.file, said)
    chosen = {t: m for t, m in entries.items() if _matches(t, args.test)}
    if not chosen:
        say(f"no test matches{'' if args.test is None else f' {args.test!r}'} in {args.file}")
        near = difflib.get_close_matches(args.test or "", sorted(entries), n=3, cutoff=0.3)
        names = {_name(t): t for t in entries}
        near += [names[n] for n in difflib.get_close_matches(args.test or "", names, n=3)]
        if near:
            say("nearest: " + ", ".join(dict.fromkeys(near)))
        return 1
    body = [
        _record_row(test, name, record)
        for test, metrics in sorted(chosen.items())
        for name, record in sorted(metrics.items())
    ]
    _print(("test", "metric", "kind", "median/value", "samples", "recorded", "commit"), body)
    return 2 if said else 0


def _name(test: str) -> str:
    """The test's name as users type it: ``test_step[cpu]`` of ``t/test_a.py::test_step[cpu]``."""
    return test.rpartition("::")[2]


def _matches(test: str, pattern: str | None) -> bool:
    """A glob matches the whole id or the test's name (``test_tiny*``); plain text, any part."""
    if pattern is None:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(test, pattern) or fnmatch.fnmatchcase(_name(test), pattern)
    return pattern in test


def _record_row(test: str, name: str, record: dict[str, Any]) -> dict[str, str]:
    process_runs = judge.runs(record) if record.get("samples") else []
    count = len(judge.pooled(process_runs))
    return {
        "test": test,
        "metric": name,
        "kind": str(record.get("kind", "?")),
        "median/value": text.fmt(center(record), record.get("unit", "")),
        "samples": f"{count} ({len(process_runs)} runs)" if process_runs else "-",
        "recorded": record.get("recorded") or "-",
        "commit": record.get("commit") or "-",
    }


def run_diff(args: argparse.Namespace) -> int:
    said: list[str] = []
    old, new = load_entries(args.old, said), load_entries(args.new, said)
    # Like with like: against a machine file, a report's portable counts are not "added" (they
    # live in the portable file), and against a portable file its times are not either.
    kinds = {path: holds(path) for path in (args.old, args.new)}
    for side, path, other in ((args.old, args.new, new), (args.new, args.old, old)):
        held = kinds[side]
        if held is not None and kinds[path] is None:  # a baseline file against a report
            for metrics in other.values():
                for name in [n for n, r in metrics.items() if not held(r)]:
                    del metrics[name]
    body = []
    for test in sorted(old.keys() | new.keys()):
        before, after = old.get(test, {}), new.get(test, {})
        for name in sorted(before.keys() | after.keys()):
            body.append(_diff_row(test, name, before.get(name), after.get(name)))
    if not body:
        say("no entries in either file")
        return 2 if said else 0
    _print(("test", "metric", "old", "new", "change", "normalized"), body)
    return 2 if said else 0


def _diff_row(
    test: str, name: str, old: dict[str, Any] | None, new: dict[str, Any] | None
) -> dict[str, str]:
    unit = (new or old or {}).get("unit", "")
    before = None if old is None else center(old)
    after = None if new is None else center(new)
    if before is None or after is None:
        change = "added" if before is None else "removed"
    else:
        change = f"{after / before - 1:+.1%}" if before else "-"
    return {
        "test": test,
        "metric": name,
        "old": text.fmt(before, unit),
        "new": text.fmt(after, unit),
        "change": change,
        "normalized": _normalized_change(old, new),
    }


def _normalized_change(old: dict[str, Any] | None, new: dict[str, Any] | None) -> str:
    """The change in units of each run's reference workload (time and rate only), which is
    what a verdict judges: comparable across machines and loads. "-" where a verdict would
    judge raw times (see :func:`judge.judged`)."""
    kind = kind_of(new or {})
    if not (old and new) or kind is None or kind.judge != "samples":
        return "-"
    if not (center(old) and center(new)):
        return "-"
    samples = judge.judged(judge.runs(new), judge.runs(old), per_second(new))
    after, before = samples.pooled()
    if not samples.units or not (before and after):
        return "-"
    return f"{stats.median(after) / stats.median(before) - 1:+.1%}"


def run_render(args: argparse.Namespace) -> int:
    if not (args.md or args.html):
        raise BaselineError("render: say what to write, --md OUT and/or --html OUT")
    document = load_report(args.report)
    _check_outputs({os.path.realpath(args.report): "the report read"}, _views(args))
    _write_views(args, document, args.report)
    return 0


def run_merge(args: argparse.Namespace) -> int:
    """Merge the shards' reports (Note [Sharded runs]): exit 1 if the merged run fails."""
    from .report import merge

    reports = [(path, load_report(path)) for path in args.reports]
    read: dict[str, str] = {}
    for path in args.reports:
        resolved = os.path.realpath(path)
        if resolved in read:
            raise merge.Unmergeable(f"{path} is given twice: merge each shard's report once")
        read[resolved] = f"the report read {path}"
    _check_outputs(read, [("-o", "report", args.output), *_views(args)])
    try:
        document, repeated = merge.merge(reports)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
        raise BaselineError(f"the reports merged are malformed ({problem})") from None
    files.write_json(args.output, document)
    say(f"wrote {args.output}")
    _write_views(args, document, args.output)
    found = text.counts(results_of(document))
    said = ", ".join(f"{n:,} {v}" for v, n in found.items()) or "no metrics"
    again = f", {repeated} in more than one (kept once)" if repeated else ""
    failing = merge.failing(document)
    say(
        f"merged {len(reports)} reports: {len(document['results'])} tests{again}; {said}; "
        f"{len(document['errors'])} errors: {'fail' if failing else 'pass'}"
    )
    return 1 if failing else 0


def run_bisect(args: argparse.Namespace) -> int:
    """Name the first commit where the metric changed (Note [Bisect])."""
    from .report.bisect_text import lines
    from .run.bisect import Event, bisect

    def tell(event: Event) -> None:
        for line in lines(event):
            say(line)

    try:
        return bisect(
            Path.cwd(),
            args.good,
            args.bad,
            args.test,
            args.metric,
            args.pytest_args,
            read=load_report,
            tell=tell,
        )
    except KeyboardInterrupt:
        say("pytest-hpml: bisect interrupted; its worktree is removed", file=sys.stderr)
        return 130


def _views(args: argparse.Namespace) -> list[tuple[str, str, Path]]:
    """The Markdown and HTML outputs asked for, as (option, OUTPUTS key, path)."""
    named = [("--md", "report_md", args.md), ("--html", "report_html", args.html)]
    return [(option, dest, path) for option, dest, path in named if path is not None]


def _write_views(args: argparse.Namespace, document: dict[str, Any], report: Path) -> None:
    """Write the Markdown and HTML reports asked for of ``document`` (read from, or written
    to, ``report``); a :class:`BaselineError` if its values are of the wrong shape."""
    try:
        if args.md:
            files.write_markdown(args.md, document, full_report=report)
            say(f"wrote {args.md}")
        if args.html:
            _write_html(args, document)
            say(f"wrote {args.html}")
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
        raise BaselineError(f"report {report} is malformed ({problem})") from None


def _check_outputs(read: dict[str, str], asked: list[tuple[str, str, Path]]) -> None:
    """Refuse, before writing anything, an output that is a report read (``read``: resolved
    path -> what it is), another output, a baseline file or a file that is not a report of its
    kind (Note [Files])."""
    found = files.first_problem(
        asked, dict(read), lambda other: f"is also {other}; name a file of its own", None, None
    )
    if found:
        option, _, problem = found
        path = next(path for name, _, path in asked if name == option)
        raise writer.Refused(f"{option} {path} {problem}")


def _write_html(args: argparse.Namespace, document: dict[str, Any]) -> None:
    from .report import html

    entries = html.stored_baselines(document, args.baselines)
    if args.baselines and not entries:
        say(f"note: no baseline samples for this machine in {args.baselines}", file=sys.stderr)
    writer.write(args.html, html.render(document, entries))


def run_history(args: argparse.Namespace) -> int:
    runs, said = history.load(args.dir, report_problem)
    for problem in said:
        say(f"pytest-hpml: {problem}; left out", file=sys.stderr)
    found = history.history(runs, args.test)
    history.find_steps(found, args.threshold, args.confidence)
    machines = len({run.machine for run in runs})
    steps = list(found.steps())
    say(
        f"{_counted(len(runs), 'run')} at {_counted(len(found.commits), 'commit')} on "
        f"{_counted(machines, 'machine')}, {_counted(len(found.series), 'series', 'series')}: "
        f"{_counted(len(steps), 'step')}"
    )
    if steps:
        columns = history.STEP_COLUMNS
        body = [
            dict(zip(columns, [s.test, *history.step_cells(found, s, step)])) for s, step in steps
        ]
        _print(columns, body)
    if args.site:
        from .report import site

        say(f"wrote {site.write(found, args.site)}")
    return 2 if said else 0


def _counted(n: int, one: str, many: str = "") -> str:
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def _print(columns: Sequence[str], body: list[dict[str, str]]) -> None:
    for line in text.align(columns, body):
        say(line.rstrip())


def say(line: str, file: TextIO | None = None) -> None:
    """Print one line of the command's output (standard output unless ``file``), made visible
    (``text.visible``): test ids, machine names, paths and errors come from files a pull
    request can craft, and a terminal acts on the controls they may hold. Flushed: a CI log
    shows bisect's progress as it goes, not at its end."""
    print(text.visible(line), file=sys.stdout if file is None else file, flush=True)
