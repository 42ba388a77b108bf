"""The report files: JSON (every metric and verdict), a Markdown summary, the HTML report."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..verdict.baselines import write_atomic
from .text import COLUMNS, citations, counts, headline, rows

REPORT_FORMAT = "pytest-hpml-report/1"


def write_json(path: Path, document: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(document, indent=1, sort_keys=True) + "\n")


def markdown(document: dict[str, Any]) -> str:
    """A Markdown summary for a pull-request comment or a CI step summary."""
    results = document["results"]
    found = counts(results)
    lines = [
        f"### pytest-hpml benchmarks: {headline(found)}",
        "",
        f"Machine: {document['fingerprint'].get('name', '?')} "
        f"(`{document['fingerprint'].get('id', '?')}`), commit `{document.get('commit') or '?'}`, "
        f"baselines: {document['baseline_mode']}.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for row in rows(results):
        mark = {"regressed": "**regressed**", "improved": "_improved_"}.get(row["verdict"])
        cells = [f"`{row['test']}`", *(row[c] for c in COLUMNS[1:-1]), mark or row["verdict"]]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += ["", ", ".join(f"{n} {v}" for v, n in found.items()) or "no metrics"]
    cited = citations(results)
    if cited:
        lines += ["", "Published figures beside ours:", "", *(f"- {line}" for line in cited)]
    lines += [f"\n**Error:** {e}" for e in document.get("errors", ())]
    return "\n".join(lines) + "\n"


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
