"""The report files: JSON (every metric and verdict), a Markdown summary, the HTML report."""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from ..config.resolution import explicit
from ..model import results_of
from ..storage import reader, writer
from ..verdict import baselines, stats
from .text import (
    COLUMNS,
    HTML_TITLE,
    MARKDOWN_HEADING,
    citations,
    counted,
    counts,
    differs,
    headline,
    legend,
    rows,
    sides,
    visible,
)

REPORT_FORMAT = "pytest-hpml-report/1"
MARKDOWN_COLUMNS = (*COLUMNS, "reason")


def is_report(path: Path) -> bool:
    """Whether ``path`` holds a pytest-hpml JSON report (readable, of this format)."""
    try:
        document = reader.read_json(path, "file")
    except (OSError, reader.Unreadable):
        return False
    return isinstance(document, dict) and document.get("format") == REPORT_FORMAT


def _head(path: Path, size: int = 4096) -> str:
    """The first ``size`` characters of the file ``path`` ("" if it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(size)
    except OSError:
        return ""


# The outputs of a run: option dest -> what it is, and whether a file is one (a file that is
# not is never replaced: Note [Files]). The Markdown begins with its heading, the HTML has its
# title in its head: a README that merely names pytest-hpml is neither.
OUTPUTS: dict[str, tuple[str, Callable[[Path], bool]]] = {
    "report": ("JSON report", is_report),
    "report_md": ("Markdown summary", lambda p: _head(p).startswith(MARKDOWN_HEADING)),
    "report_html": ("HTML report", lambda p: HTML_TITLE in _head(p)),
}


def check_paths(chosen: Any, baseline_mode: str, root: Path) -> None:
    """Stop before any test runs if a report, the history or the baseline directory cannot be
    used (read, or when recording written), or a report would replace a baseline file, another
    report of the run or a file that is not a report: found at the end, the measurements of the
    whole run would be lost."""
    directory = Path(root, chosen.baseline_dir)
    asked = [
        (_where(chosen, dest), dest, Path(root, getattr(chosen, dest)))
        for dest in OUTPUTS
        if getattr(chosen, dest)
    ]

    def clash(other: str) -> str:
        return f"is also {other}'s file; each report needs a path of its own"

    found = first_problem(asked, {}, clash, root, directory)
    if found:
        where, dest, why = found
        raise pytest.UsageError(f"{where}: {getattr(chosen, dest)} {why}")
    if chosen.history:  # a directory added to, as the baselines' is when recording
        kept = Path(root, chosen.history)
        problem = _directory_problem(kept, root, True, _explicit(chosen, "history"))
        if os.path.realpath(kept) == os.path.realpath(directory):
            problem = "is the baseline directory; the history needs a directory of its own"
        if problem:
            raise pytest.UsageError(f"{_where(chosen, 'history')}: {chosen.history} {problem}")
    if baseline_mode != "off":
        recording = baseline_mode in ("update", "append")
        problem = _directory_problem(directory, root, recording, _explicit(chosen, "baseline_dir"))
        if problem:
            where = _where(chosen, "baseline_dir")
            raise pytest.UsageError(f"{where}: {chosen.baseline_dir} {problem}")


def first_problem(
    outputs: list[tuple[str, str, Path]],
    taken: dict[str, str],
    clash: Callable[[str], str],
    root: Path | None,
    baseline_dir: Path | None,
) -> tuple[str, str, str] | None:
    """The first of ``outputs`` (label, OUTPUTS key, path) that cannot be written, as (label,
    key, why): a path another output, or an input in ``taken`` (resolved path -> label), has
    already (``clash(its label)`` says so), or :func:`output_problem`'s reason. None if all
    can be written."""
    for label, dest, path in outputs:
        same = taken.setdefault(os.path.realpath(path), label)
        problem = clash(same) if same != label else output_problem(path, dest, root, baseline_dir)
        if problem:
            return label, dest, problem
    return None


def _directory_problem(directory: Path, root: Path, recording: bool, named: bool) -> str | None:
    """Why the baseline directory cannot be read (or, ``recording``, written), or None: one
    written outside the project must be ``named`` for this run (Note [Outside the project])."""
    if writer.looping(directory):
        return "is a symbolic link loop"
    if directory.exists() and not directory.is_dir():
        return "is a file, not a directory"
    if not recording:
        return None
    if not named and not writer.inside(directory, root):
        return (
            f"leads to {os.path.realpath(directory)}, outside the project "
            f"({os.path.realpath(root)}); pytest-hpml writes there only where the command line "
            "or an HPML_* variable names it"
        )
    return writer.creatable(directory)


def _explicit(chosen: Any, dest: str) -> bool:
    """Whether this run's command line or environment named the setting ``dest``."""
    return explicit(chosen.sources.get(dest, "default"))


def _where(chosen: Any, dest: str) -> str:
    """Where a setting came from: its option, variable or ini key (the option by default)."""
    source = chosen.sources.get(dest, "default")
    return f"--hpml-{dest.replace('_', '-')}" if source == "default" else source


def output_problem(
    path: Path, dest: str, root: Path | None, baseline_dir: Path | None
) -> str | None:
    """Why the output ``dest`` (a key of OUTPUTS) cannot be written to ``path``, or None."""
    problem = writer.problem(path, root)
    if problem or writer.is_stream(path) or _step_summary(path):
        return problem
    if baselines.is_baseline(path) or _in_baselines(path, baseline_dir):
        return "is a baseline file; a report never replaces one: name another file"
    what, ours = OUTPUTS[dest]
    if path.is_file() and path.stat().st_size and not ours(path):
        return f"exists and is not a pytest-hpml {what}; remove it or name another file"
    return None


def _in_baselines(path: Path, directory: Path | None) -> bool:
    """Whether ``path`` is named as a baseline file of ``directory`` is (machine-*.json...)."""
    if directory is None or Path(os.path.realpath(path)).parent != Path(
        os.path.realpath(directory)
    ):
        return False
    return re.fullmatch(r"(machine|portable|instructions)-.*\.json", path.name) is not None


def _step_summary(path: Path) -> bool:
    """Whether ``path`` is GitHub's step summary file, which the Markdown is appended to."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    return bool(summary and os.path.realpath(summary) == os.path.realpath(path))


def keep(document: dict[str, Any]) -> str:
    """Write ``document`` where it can always be written (the temporary directory); returns
    the path, for the message that says a write failed."""
    handle, path = tempfile.mkstemp(prefix="pytest-hpml-results-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(json.dumps(document, indent=1, sort_keys=True) + "\n")
    return path


def write_json(path: Path, document: dict[str, Any], root: Path | None = None) -> None:
    writer.write(path, json.dumps(document, indent=1, sort_keys=True) + "\n", root=root)


# Characters with a meaning in GitHub's Markdown, escaped with a backslash in every name shown.
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+!|~-])")


def md(text: Any) -> str:
    """``text`` as literal Markdown: HTML made inert (entities) and Markdown's own characters
    escaped, so no test id, metric, machine name, source or error can end a cell or a code
    span, or bring in HTML (GitHub renders step summaries and comments); control characters
    and bidirectional overrides shown as escapes (``text.visible``)."""
    shown = visible(str(text).replace("\n", " "))
    return _MARKDOWN.sub(r"\\\1", html.escape(shown, quote=False))


# GitHub refuses a pull-request comment longer than this; a longer summary is cut to fit, with
# room left for the marker a comment action adds, and says where the full report is.
COMMENT_LIMIT = 65_536
ROOM = 1_000
OPEN_ROWS = 10  # a table with more rows than this is collapsed (<details>)


@dataclass(frozen=True)
class Block:
    """A part of the summary after the answer: plain lines, or a table that can lose rows when
    the summary is cut to fit a comment."""

    title: str
    lines: tuple[str, ...]
    table: bool = False
    collapsed: bool = False

    def render(self, keep: int | None = None) -> list[str]:
        """Its Markdown lines, with only the first ``keep`` rows or lines."""
        shown = list(self.lines[:keep])
        cut = len(self.lines) - len(shown)
        more = [f"_{cut:,} more in the full report_"] if cut else []
        if not self.table:
            return ["", *([self.title, ""] if self.title else []), *shown, *more]
        body = [_TABLE_HEAD, _TABLE_RULE, *shown, *(["", *more] if more else [])]
        if self.collapsed:  # GitHub renders the table inside once a blank line follows <summary>
            return ["", f"<details><summary>{self.title}</summary>", "", *body, "", "</details>"]
        return ["", f"**{self.title}**", "", *body]


_TABLE_HEAD = "| " + " | ".join(MARKDOWN_COLUMNS) + " |"
_TABLE_RULE = "|" + "---|" * len(MARKDOWN_COLUMNS)
# The verdicts a reviewer reads first, above the rest (a "look" is the pairs' interim analysis).
TO_READ = (stats.REGRESSED, stats.ACCEPTED, stats.IMPROVED, stats.INCONCLUSIVE, stats.CHANGED)


def markdown(document: dict[str, Any], full_report: str | Path | None = None) -> str:
    """A Markdown summary for a pull-request comment or a CI step summary: the answer first
    (pass or fail, how many regressed, what was judged against what), then the details, long
    tables collapsed. One longer than a GitHub comment may be is cut to fit and ends with where
    the full report is: ``full_report``, the JSON report's path, if there is one."""
    head, blocks = _answer(document), _blocks(document)
    whole = "\n".join([*head, *(line for b in blocks for line in b.render())]) + "\n"
    if len(whole) <= COMMENT_LIMIT - ROOM:
        return whole
    end = ["", _cut_line(full_report)]
    budget = COMMENT_LIMIT - ROOM - _size(head) - _size(end)
    kept: list[str] = []
    for block in blocks:
        lines = _fitted(block, budget)
        kept += lines
        budget -= _size(lines)
    return "\n".join([*head, *kept, *end]) + "\n"


def _size(lines: list[str]) -> int:
    """Characters of ``lines`` joined, with the newline that joins them to the rest."""
    return sum(len(line) + 1 for line in lines)


def _fitted(block: Block, budget: int) -> list[str]:
    """``block`` with as many of its rows as fit in ``budget`` characters, or nothing."""
    if _size(block.render()) <= budget:
        return block.render()
    low, high = 0, len(block.lines)  # the most rows that fit lies in [low, high)
    if _size(block.render(0)) > budget:
        return []
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _size(block.render(middle)) <= budget else (low, middle)
    return block.render(low)


def _cut_line(full_report: str | Path | None) -> str:
    """The last line of a cut summary: why, and where the whole report is."""
    cut = f"**Shortened** to fit GitHub's {COMMENT_LIMIT:,} characters for a comment"
    if full_report:
        return f"{cut}; the full report is {md(full_report)}."
    return f"{cut}; run with `--hpml-report=PATH` for the full report."


def _answer(document: dict[str, Any]) -> list[str]:
    """The heading (pass or fail, how many regressed), what was judged against what, where."""
    results = results_of(document)
    found = counts(results)
    fingerprint = document["fingerprint"]
    verdicts = ", ".join(f"{n:,} {md(v)}" for v, n in found.items()) or "no metrics"
    return [
        f"{MARKDOWN_HEADING}{headline(document, results)}",
        "",
        f"{_judged(document)}.",
        "",
        f"Machine: {md(fingerprint.get('name', '?'))} ({md(fingerprint.get('id', '?'))}); "
        f"verdicts: {verdicts}.{_merged(document)}",
    ]


def _merged(document: dict[str, Any]) -> str:
    """' Merged from 3 reports ...' for a report of ``pytest-hpml merge``, else ''."""
    shards = document.get("shards")
    if not isinstance(shards, list):
        return ""
    tested = (document.get("control") or {}).get("tested", 0)
    machines = list(dict.fromkeys(f"{s.get('machine')} ({s.get('machine_id')})" for s in shards))
    return (
        f" Merged from {counted(len(shards), 'report')} of one run's shards, their "
        f"{counted(tested, 'tested metric')} judged together (Note \\[Sharded runs\\])"
        + (
            f"; the shards ran on {', '.join(md(m) for m in machines)}."
            if len(machines) > 1
            else "."
        )
    )


def _judged(document: dict[str, Any]) -> str:
    """The two sides: the base and head revisions, or this commit and the stored baselines."""
    against = document.get("against")
    if against:
        return f"Judged against: {md(sides(against))}; {md(differs(against))}"
    commit, mode = md(document.get("commit") or "?"), document.get("baseline_mode")
    where = md(document.get("baseline_dir") or "?")
    if mode == "compare":
        return f"Judged against: the stored baselines in {where}, commit {commit}"
    if mode in ("update", "append"):
        return f"Commit {commit}, recorded as baselines in {where} ({md(mode)})"
    return f"Commit {commit}, baselines: {md(mode or '?')}"


def _blocks(document: dict[str, Any]) -> list[Block]:
    """The details after the answer, most needed first: a cut summary loses the last. The
    errors come first: they failed the run."""
    results, against = results_of(document), document.get("against")
    found = rows(results)
    table = tuple(_md_row(row) for row in found)
    errors = Block("", tuple(f"- **Error:** {md(e)}" for e in document.get("errors") or ()))
    cited = tuple(f"- {md(line)}" for line in citations(results))
    extra = [
        Block("", (md(legend(bool(against))),) if table else ()),
        Block("", tuple(_one_side(against))),
        Block("Published figures beside ours:", cited),
    ]
    if len(table) <= OPEN_ROWS:
        blocks = [errors, Block("Verdicts", table, table=True), *extra]
    else:
        to_read = tuple(line for row, line in zip(found, table) if row["verdict"] in TO_READ)
        title = f"Regressed, accepted, improved, inconclusive or changed: {len(to_read):,}"
        notable = Block(title, to_read, table=True, collapsed=len(to_read) > OPEN_ROWS)
        everything = Block(f"All {len(table):,} verdicts", table, table=True, collapsed=True)
        blocks = [errors, notable, *extra, everything]
    return [b for b in blocks if b.lines]


def _md_row(row: dict[str, str]) -> str:
    verdict = md(row["verdict"])
    mark = {"regressed": f"**{verdict}**", "improved": f"_{verdict}_"}.get(row["verdict"])
    cells = [md(row[c]) for c in MARKDOWN_COLUMNS[:-2]] + [mark or verdict, md(row["reason"])]
    return "| " + " | ".join(cells) + " |"


def _one_side(against: dict[str, Any] | None) -> list[str]:
    """The benchmarks --hpml-against could not judge: failed on the base side, or removed."""
    if not against:
        return []
    failed = sorted((against.get("base_failed") or {}).items())
    return [f"- failed on the base side, not judged: {md(t)} ({md(why)})" for t, why in failed] + [
        f"- removed (only in the base revision): {md(t)}" for t in against.get("removed", ())
    ]


def write_markdown(
    path: Path,
    document: dict[str, Any],
    full_report: str | Path | None = None,
    root: Path | None = None,
) -> None:
    """Write the summary; append when ``path`` is GitHub's step summary file. ``full_report``:
    the JSON report's path, named where the summary is cut."""
    text = markdown(document, full_report)
    writer.write(path, text, root=root, append=_step_summary(path))


def write_html(path: Path, document: dict[str, Any], root: Path | None = None) -> None:
    """A standalone HTML report (see :mod:`pytest_hpml.report.html`)."""
    from .html import render, stored_baselines  # matplotlib: only when a report is drawn

    stored = stored_baselines(document, Path(document["baseline_dir"]))
    writer.write(path, render(document, stored), root=root)
