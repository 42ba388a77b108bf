"""Reports of benchmark verdicts: the terminal table, the JSON report and the Markdown summary
(the HTML report is drawn by :mod:`pytest_hpml.html`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import stats

UNITS = {"s": [(1, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")]}
PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
REPORT_FORMAT = "pytest-hpml-report/1"


def scale(value: float, unit: str) -> tuple[float, str]:
    """The divisor and unit that make ``value`` readable: (1e-3, 'ms') for 0.0123 s."""
    if unit == "s":
        for factor, name in UNITS["s"]:
            if abs(value) >= factor or factor == 1e-9:
                return factor, name
    for factor, prefix in PREFIXES:
        if abs(value) >= factor:
            return factor, prefix + unit
    return 1.0, unit


def fmt(value: float | None, unit: str) -> str:
    """A value with a readable unit: 0.0123 s -> '12.3 ms', 1.6e9 FLOP -> '1.6 GFLOP'."""
    if value is None:
        return "-"
    factor, name = scale(value, unit)
    digits = ".4g" if factor == 1 and unit != "s" else ".3g"
    return f"{value / factor:{digits}} {name}".rstrip()


def rows(results: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One row per test and metric, in test order."""
    out = []
    for result in results:
        for name, verdict in sorted(result["verdicts"].items()):
            unit = result["metrics"][name]["unit"]
            change, raw = verdict["change"], verdict.get("raw_change")
            out.append(
                {
                    "test": result["test"],
                    "metric": name,
                    "baseline": fmt(verdict["baseline"], unit),
                    "current": fmt(verdict["current"], unit),
                    "change": "-" if change is None else f"{change:+.1%}",
                    "raw change": "-" if raw is None else f"{raw:+.1%}",
                    "confidence": "-"
                    if verdict["confidence"] is None
                    else f"{verdict['confidence']:.1%}",
                    "verdict": verdict["verdict"],
                    "reason": verdict.get("reason", ""),
                }
            )
    return out


# "change" is what is judged (time in units of the reference workload); "raw change" is the
# plain ratio of the medians, shown for context.
COLUMNS = ("test", "metric", "baseline", "current", "raw change", "change", "confidence", "verdict")


def table(results: list[dict[str, Any]]) -> list[str]:
    """The verdict table, as aligned text lines."""
    return align(COLUMNS, rows(results))


def citations(results: list[dict[str, Any]]) -> list[str]:
    """'test metric: here 2.9 x; cited 1.67 x (source)', for metrics citing a published figure."""
    lines = []
    for result in results:
        for name, record in sorted(result["metrics"].items()):
            cited = record.get("cited")
            if not cited:
                continue
            unit = record.get("unit", "")
            here = result["verdicts"].get(name, {}).get("current")
            lines.append(
                f"{result['test']} {name}: here {fmt(here, unit)}; "
                f"cited {fmt(cited['value'], unit)} ({cited['source']})"
            )
    return lines


def align(columns: Sequence[str], body: list[dict[str, str]]) -> list[str]:
    """A header line and one line per row, each column padded to its widest cell."""
    widths = {c: max([len(c), *(len(r[c]) for r in body)]) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in columns) for r in body]
    return lines


def counts(results: list[dict[str, Any]]) -> dict[str, int]:
    found = {v: 0 for v in stats.VERDICTS}
    for result in results:
        for verdict in result["verdicts"].values():
            found[verdict["verdict"]] += 1
    return {k: n for k, n in found.items() if n}


def headline(found: dict[str, int]) -> str:
    """'2 regression(s)' or 'no regression', from :func:`counts`."""
    bad = found.get(stats.REGRESSED, 0)
    return f"{bad} regression(s)" if bad else "no regression"


def write_json(path: Path, document: dict[str, Any]) -> None:
    from .baselines import write_atomic

    write_atomic(path, json.dumps(document, indent=1, sort_keys=True) + "\n")


def describe(verdict: dict[str, Any], unit: str = "") -> str:
    """One line for a verdict: baseline -> current, change (and raw change), confidence."""
    parts = [f"{fmt(verdict['baseline'], unit)} -> {fmt(verdict['current'], unit)}"]
    if verdict.get("raw_change") is not None:
        parts.append(f"raw {verdict['raw_change']:+.1%}")
    if verdict["change"] is not None:
        judged = " in reference units" if verdict.get("raw_change") is not None else ""
        parts.append(f"change {verdict['change']:+.1%}{judged}")
    if verdict["confidence"] is not None:
        parts.append(f"confidence {verdict['confidence']:.1%}")
    if verdict.get("threshold") is not None:
        parts.append(f"threshold {verdict['threshold']:.0%}")
    return ", ".join(parts)


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
    import os

    text = markdown(document)
    if os.environ.get("GITHUB_STEP_SUMMARY") and Path(os.environ["GITHUB_STEP_SUMMARY"]) == path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
        return
    from .baselines import write_atomic

    write_atomic(path, text)


def check_html(chosen: Any) -> None:
    """Fail at the start, not after the benchmarks have run: the HTML report needs matplotlib."""
    if not chosen.report_html:
        return
    import pytest

    from .html import INSTALL_HINT, available

    if not available():
        where = chosen.sources.get("report_html", "--hpml-report-html")
        raise pytest.UsageError(f"{where}: the HTML report needs matplotlib; {INSTALL_HINT}")


def write_html(path: Path, document: dict[str, Any]) -> None:
    """A standalone HTML report (see :mod:`pytest_hpml.html`)."""
    from .baselines import write_atomic
    from .html import render, stored_baselines

    write_atomic(path, render(document, stored_baselines(document, Path(document["baseline_dir"]))))
