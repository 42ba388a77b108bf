"""The report files: JSON (every metric and verdict), a Markdown summary, the HTML report."""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from ..verdict.baselines import write_atomic
from .text import COLUMNS, citations, counts, differs, headline, rows, sides

REPORT_FORMAT = "pytest-hpml-report/1"
MARKDOWN_COLUMNS = (*COLUMNS, "reason")


def check_paths(chosen: Any, recording: bool, root: Path) -> None:
    """Stop before any test runs if a report or (when recording) the baseline directory cannot
    be written: found at the end, the measurements of the whole run would be lost."""
    for dest in ("report", "report_md", "report_html"):
        given = getattr(chosen, dest)
        problem = given and _file_problem(Path(root, given))
        if problem:
            raise pytest.UsageError(f"{_where(chosen, dest)}: {given} {problem}")
    if recording:
        directory = Path(root, chosen.baseline_dir)
        where = _where(chosen, "baseline_dir")
        if directory.exists() and not directory.is_dir():
            raise pytest.UsageError(f"{where}: {chosen.baseline_dir} is a file, not a directory")
        problem = _creatable(directory)
        if problem:
            raise pytest.UsageError(f"{where}: {chosen.baseline_dir} {problem}")


def _where(chosen: Any, dest: str) -> str:
    """Where a setting came from: its option, variable or ini key (the option by default)."""
    source = chosen.sources.get(dest, "default")
    return f"--hpml-{dest.replace('_', '-')}" if source == "default" else source


def _file_problem(path: Path) -> str | None:
    if path.is_dir():
        return "is a directory; name a file in it"
    if path.exists() and not os.access(path, os.W_OK):
        return "cannot be written (read-only)"
    return _creatable(path.parent)


def _creatable(directory: Path) -> str | None:
    """Why ``directory`` cannot be made or written, or None."""
    existing = directory
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot be created: {existing} is a file"
    if not os.access(existing, os.W_OK):
        return f"cannot be written: {existing} is read-only"
    return None


def keep(document: dict[str, Any]) -> str:
    """Write ``document`` where it can always be written (the temporary directory); returns
    the path, for the message that says a write failed."""
    handle, path = tempfile.mkstemp(prefix="pytest-hpml-results-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(json.dumps(document, indent=1, sort_keys=True) + "\n")
    return path


def write_json(path: Path, document: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(document, indent=1, sort_keys=True) + "\n")


# Characters with a meaning in GitHub's Markdown, escaped with a backslash in every name shown.
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+!|~-])")


def md(text: Any) -> str:
    """``text`` as literal Markdown: HTML made inert (entities) and Markdown's own characters
    escaped, so no test id, metric, machine name, source or error can end a cell or a code
    span, or bring in HTML (GitHub renders step summaries and comments)."""
    return _MARKDOWN.sub(r"\\\1", html.escape(str(text), quote=False)).replace("\n", " ")


def markdown(document: dict[str, Any]) -> str:
    """A Markdown summary for a pull-request comment or a CI step summary."""
    results = document["results"]
    found = counts(results)
    fingerprint = document["fingerprint"]
    against = document.get("against")
    judged_by = (
        f"against: {md(sides(against))}; {md(differs(against))}"
        if against
        else f"commit {md(document.get('commit') or '?')}, baselines: "
        f"{md(document['baseline_mode'])}"
    )
    lines = [
        f"### pytest-hpml benchmarks: {headline(found)}",
        "",
        f"Machine: {md(fingerprint.get('name', '?'))} ({md(fingerprint.get('id', '?'))}), "
        f"{judged_by}.",
        "",
        "| " + " | ".join(MARKDOWN_COLUMNS) + " |",
        "|" + "---|" * len(MARKDOWN_COLUMNS),
    ]
    for row in rows(results):
        verdict = md(row["verdict"])
        mark = {"regressed": f"**{verdict}**", "improved": f"_{verdict}_"}.get(row["verdict"])
        cells = [md(row[c]) for c in MARKDOWN_COLUMNS[:-2]] + [mark or verdict, md(row["reason"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", ", ".join(f"{n} {md(v)}" for v, n in found.items()) or "no metrics"]
    lines += _one_side(against)
    cited = citations(results)
    if cited:
        lines += ["", "Published figures beside ours:", "", *(f"- {md(line)}" for line in cited)]
    lines += [f"\n**Error:** {md(e)}" for e in document.get("errors", ())]
    return "\n".join(lines) + "\n"


def _one_side(against: dict[str, Any] | None) -> list[str]:
    """The benchmarks --hpml-against could not judge: failed on the base side, or removed."""
    if not against:
        return []
    lines = [
        f"- failed on the base side, not judged: {md(test)} ({md(why)})"
        for test, why in sorted((against.get("base_failed") or {}).items())
    ]
    lines += [f"- removed (only in the base revision): {md(t)}" for t in against.get("removed", ())]
    return ["", *lines] if lines else []


def write_markdown(path: Path, document: dict[str, Any]) -> None:
    """Write the summary; append when ``path`` is GitHub's step summary file."""
    text = markdown(document)
    if os.environ.get("GITHUB_STEP_SUMMARY") and Path(os.environ["GITHUB_STEP_SUMMARY"]) == path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
        return
    write_atomic(path, text)


def write_html(path: Path, document: dict[str, Any]) -> None:
    """A standalone HTML report (see :mod:`pytest_hpml.report.html`)."""
    from .html import render, stored_baselines  # matplotlib: only when a report is drawn

    write_atomic(path, render(document, stored_baselines(document, Path(document["baseline_dir"]))))
