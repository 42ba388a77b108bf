"""Verdicts as text: values with readable units, the verdict table, one line per verdict.
Shared by the terminal summary, the Markdown and HTML reports and the command line."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..bench.metrics import is_work_counter
from ..model import Comparison, Result
from ..verdict import stats

# What a terminal, an editor or a browser acts on instead of showing (Note [Shown text]): C0
# and C1 controls and DEL (escape sequences, bell, carriage return, backspace), the line and
# paragraph separators, the bidirectional marks, embeddings, overrides and isolates that
# reorder what is shown, and lone surrogates (which no terminal can be written).
_HIDDEN = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)


def visible(value: object) -> str:
    """``value`` as text that shows every character it holds: each control, bidirectional
    override or lone surrogate as its escape (``\\x1b``, ``\\u202e``), all else as it is (é,
    中 and emoji included). Applied where text leaves pytest-hpml (the terminal, the Markdown,
    the HTML, the command's output), so that no name read from a file or an option can move the
    cursor, retitle or clear a reviewer's terminal, or make a line read other than it is."""
    return _HIDDEN.sub(_escape, str(value))


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


UNITS = {"s": [(1, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")]}
PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


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


QUIET = (stats.PASS, stats.NO_BASELINE)  # work counters' verdicts left out of the tables


def rows(results: Sequence[Result]) -> list[dict[str, str]]:
    """One row per test and metric, in test order; the work counters only where they changed
    (the JSON report has them all)."""
    out = []
    for result in results:
        for name, verdict in sorted(result.verdicts.items()):
            if is_work_counter(name) and verdict.verdict in QUIET:
                continue
            unit = result.metrics[name]["unit"]
            change, raw = verdict.change, verdict.raw_change
            if raw is None:  # judged raw (no reference, or it did not steady the baseline)
                raw = change
            baseline, current = values(verdict, unit)
            out.append(
                {
                    "test": result.test,
                    "metric": name,
                    "baseline": baseline,
                    "current": current,
                    "change": percent(change),
                    "raw change": percent(raw),
                    "confidence": "-"
                    if verdict.confidence is None
                    else f"{verdict.confidence:.1%}",
                    "verdict": verdict.verdict,
                    "reason": verdict.reason,
                }
            )
    return out


# "change" is what is judged (time in units of the reference workload where that steadies the
# benchmark, else raw: then both columns show the same); "raw change" is the plain ratio of the
# medians. The terminal table adds the reason of a verdict that has one.
# How each report begins (the Markdown's first line, the HTML's title): what tells a file
# written by pytest-hpml from a file it must not replace (Note [Files]).
TITLE = "pytest-hpml benchmarks: "
MARKDOWN_HEADING = f"### {TITLE}"
HTML_TITLE = f"<title>{TITLE}"

COLUMNS = ("test", "metric", "baseline", "current", "raw change", "change", "confidence", "verdict")


def legend(against: bool) -> str:
    """What each column of the verdict table holds, the same in every row of one mode."""
    if against:
        return (
            "columns: baseline is the geometric mean of the base processes' fastest samples (a "
            "speed-up, of their medians; a count, its middle value); change is the geometric "
            "mean of the pairs' ratios that were judged, and current the baseline moved by it "
            "(raw change the same: no reference workload here)"
        )
    return (
        "columns: baseline and current are medians of the raw rounds (a count, its value); raw "
        "change is their ratio - 1; change is what was judged: a time or rate in units of the "
        "reference workload (raw where the reason says so), a speed-up or count as it is"
    )


# A table of more rows than this leaves out its quiet rows at the default verbosity: a suite of
# a hundred benchmarks shows what changed, and one line counts the rest (-v shows every row).
FOLD_AT = 20


def table(results: Sequence[Result], fold: bool = False) -> list[str]:
    """The verdict table, as aligned text lines, with the reason of each verdict that has one;
    with ``fold``, a long table's quiet rows left out and counted in a last line."""
    body = rows(results)
    left_out: dict[str, int] = {}
    if fold and len(body) > FOLD_AT:
        for row in body:
            if row["verdict"] in QUIET:
                left_out[row["verdict"]] = left_out.get(row["verdict"], 0) + 1
        body = [row for row in body if row["verdict"] not in QUIET]
    columns = (*COLUMNS, "reason") if any(row["reason"] for row in body) else COLUMNS
    lines = [line.rstrip() for line in align(columns, body)] if body else []
    if left_out:
        each = ", ".join(f"{n} {verdict}" for verdict, n in left_out.items())
        lines.append(f"{sum(left_out.values())} more rows not shown ({each}); -v shows them")
    return lines


def citations(results: Sequence[Result]) -> list[str]:
    """'test metric: here 2.9 x; cited 1.67 x (source)', for metrics citing a published figure."""
    lines = []
    for result in results:
        for name, record in sorted(result.metrics.items()):
            cited = record.get("cited")
            if not cited:
                continue
            unit = record.get("unit", "")
            judged = result.verdicts.get(name)
            here = None if judged is None else judged.current
            lines.append(
                f"{result.test} {name}: here {fmt(here, unit)}; "
                f"cited {fmt(cited['value'], unit)} ({cited['source']})"
            )
    return lines


def align(columns: Sequence[str], body: list[dict[str, str]]) -> list[str]:
    """A header line and one line per row, each column padded to its widest cell, every cell
    made visible (a control character in a test id would move the cursor, not the column)."""
    cells = [{c: visible(r[c]) for c in columns} for r in body]
    widths = {c: max([len(c), *(len(r[c]) for r in cells)]) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in columns) for r in cells]
    return lines


def counts(results: Sequence[Result]) -> dict[str, int]:
    found = {v: 0 for v in stats.VERDICTS}
    for result in results:
        for verdict in result.verdicts.values():
            found[verdict.verdict] += 1
    return {k: n for k, n in found.items() if n}


def answer(results: Sequence[Result], errors: int = 0) -> str:
    """The summary's first line: how many benchmarks regressed, or that none of them did, then
    how many more need a reader (changed, accepted, inconclusive) and the errors."""
    regressed = len(regressions(results))
    total = counted(len(results), "benchmark")
    if not results:
        said = "no benchmark measured"
    elif regressed:
        said = f"{regressed:,} of {total} regressed"
    else:
        said = f"no regression in {total}"
    more = [
        f"{n:,} {verdict}"
        for verdict in (stats.CHANGED, stats.ACCEPTED, stats.INCONCLUSIVE, stats.IMPROVED)
        for n in [_worst(results, verdict)]
        if n
    ]
    if errors:
        more.append(counted(errors, "error"))
    return "; ".join([said, ", ".join(more)] if more else [said])


def counted(n: int, word: str) -> str:
    """``n`` and ``word``, in the plural unless one: '2,000 benchmarks'."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def regressions(results: Sequence[Result]) -> list[Result]:
    """The benchmarks with a metric that regressed."""
    return [r for r in results if has(r, stats.REGRESSED)]


# A benchmark's verdicts by how much they ask of a reader: it is counted, and its block headed,
# by the first of these it has.
WORST_FIRST = (
    stats.REGRESSED,
    stats.CHANGED,
    stats.ACCEPTED,
    stats.INCONCLUSIVE,
    stats.IMPROVED,
)


def _worst(results: Sequence[Result], verdict: str) -> int:
    """How many benchmarks have ``verdict`` as their worst: the first of :data:`WORST_FIRST`."""
    return sum(next((v for v in WORST_FIRST if has(r, v)), None) == verdict for r in results)


def has(result: Result, verdict: str) -> bool:
    return any(v.verdict == verdict for v in result.verdicts.values())


# The verdicts a benchmark's block spells out, with how the block is headed and coloured: a
# regression fails the run; an accepted change or a grown count its class allows does not.
SPELLED_OUT = {
    stats.REGRESSED: ("REGRESSED", "red"),
    stats.CHANGED: ("changed (not failing)", "yellow"),
    stats.ACCEPTED: ("accepted (not failing)", "yellow"),
}


def blocks(results: Sequence[Result]) -> list[tuple[str, list[str], str]]:
    """One block per benchmark with a verdict :data:`SPELLED_OUT`: its heading line, one line
    per such metric (the counters, which name the cause, before the times), and its colour."""
    out = []
    rank = list(SPELLED_OUT)
    for result in results:
        shown = [(n, v) for n, v in result.verdicts.items() if v.verdict in SPELLED_OUT]
        if not shown:
            continue
        worst = next(v for v in SPELLED_OUT if any(c.verdict == v for _, c in shown))
        label, colour = SPELLED_OUT[worst]
        shown.sort(key=lambda f: (rank.index(f[1].verdict), not is_work_counter(f[0]), f[0]))
        lines = []
        for name, verdict in shown:
            also = "" if verdict.verdict == worst else f" ({verdict.verdict})"
            said = describe(verdict, result.metrics[name]["unit"])
            cause = _cause(verdict.reason, counter=is_work_counter(name))
            lines.append(f"  {name}{also}: {said}{f'; {cause}' if cause else ''}")
        out.append((f"{label} {result.test}", lines, colour))
    return out


def _cause(reason: str, counter: bool) -> str:
    """What a reason says changed, for a counter: the operator that moved most, and the lines
    of its syncs, copies or host tensors; and for any metric, who accepted the change and why.
    The rest of the reason is the method, which the table shows."""
    clauses = reason.split("; ")
    kept = [
        c
        for i, c in enumerate(clauses)
        if (counter and ((i == 0 and " -> " in c) or c.startswith("where: ")))
        or c.startswith("accepted by ")
    ]
    return "; ".join(kept)


def headline(document: Mapping[str, Any], results: Sequence[Result]) -> str:
    """A report's answer, as the run's exit status has it: 'fail: 2 of 14 benchmarks regressed'
    (:func:`answer`) where it judged; else how many metrics it recorded or measured."""
    errors = len(document.get("errors") or ())
    judging = document.get("baseline_mode") == "compare" or bool(document.get("against"))
    if judging:
        failed = errors or regressions(results)
        return f"{'fail' if failed else 'pass'}: {answer(results, errors)}"
    metrics = counted(sum(len(r.verdicts) for r in results), "metric")
    done = "recorded" if document.get("baseline_mode") in ("update", "append") else "measured"
    said = f"{metrics} {done}, not judged" + (f", {counted(errors, 'error')}" if errors else "")
    return f"{'fail' if errors else 'pass'}: {said}"


def against_block(against: Any) -> dict[str, Any]:
    """What a report says of the two sides of ``--hpml-against`` (a ``bench.sides.Against``):
    each one's revision, interpreter, Python, torch, CUDA and cuDNN, and the installed
    distributions whose versions differ, each read from that side's own interpreter."""
    from ..bench.environment import differences

    environments = against.environments()
    return {
        "revision": against.asked,
        "base": against.base.revision,
        "head": against.head.revision,
        "base_python": against.base.python,
        "head_python": against.head.python,
        "environments": {
            side: {k: v for k, v in found.items() if k != "packages"}
            for side, found in environments.items()
        },
        "differs": differences(environments["base"], environments["head"])
        if environments
        else None,
    }


def sides(against: dict[str, Any], pairs: bool = True) -> str:
    """'base 1a2b3c (origin/main; Python 3.11.7, torch 2.14.1) vs head 4d5e6f + changes
    (Python 3.11.7, torch 2.15.0), 5 pairs', from a report's ``against`` block."""
    environments = against.get("environments") or {}
    base = str(against.get("base", "?"))
    said = [str(against["revision"])] if against.get("revision") else []
    if said and base.startswith(said[0]):
        said = []
    base += _in(said, environments.get("base"))
    head = str(against.get("head", "?")) + _in([], environments.get("head"))
    count = f", {against.get('pairs', 0)} pairs" if pairs else ""
    return f"base {base} vs head {head}{count}"


def _in(said: list[str], environment: dict[str, Any] | None) -> str:
    """' (origin/main; Python 3.11.7, torch 2.14.1, CUDA 13.0, cuDNN 91900)'."""
    found = [
        f"{label} {environment[key]}"
        for key, label in (("python", "Python"), ("torch", "torch"), ("cuda", "CUDA"))
        if environment and environment.get(key)
    ]
    if environment and environment.get("cudnn"):
        found.append(f"cuDNN {environment['cudnn']}")
    parts = "; ".join(p for p in (", ".join(said), ", ".join(found)) if p)
    return f" ({parts})" if parts else ""


def differs(against: dict[str, Any]) -> str:
    """What differs between the two sides' environments, from a report's ``against`` block:
    'differs: torch 2.14.1 -> 2.15.0', or that both ran in one environment."""
    found = against.get("differs")
    if found is None:
        return "the sides' environments could not be described"
    if found:
        return "differs: " + ", ".join(found)
    if against.get("base_python") == against.get("head_python"):
        return f"the same environment on both sides ({against.get('head_python')}): only the code"
    return "no installed version differs between the two environments: only the code"


def values(verdict: Comparison, unit: str) -> tuple[str, str]:
    """Baseline and current, readable; in full where rounding would show two different counts
    alike (29,500 B and 29,504 B are both '29.5 kB')."""
    baseline, current = verdict.baseline, verdict.current
    shown = fmt(baseline, unit), fmt(current, unit)
    counts = all(isinstance(v, (int, float)) and float(v).is_integer() for v in (baseline, current))
    if shown[0] == shown[1] and baseline != current and counts:
        shown = f"{baseline:,.0f} {unit}".rstrip(), f"{current:,.0f} {unit}".rstrip()
    return shown


def percent(change: float | None) -> str:
    """A relative change ('-' for none: a count that rose from 0 has none)."""
    return "-" if change is None else f"{change:+.1%}"


def describe(verdict: Comparison, unit: str = "") -> str:
    """One line for a verdict: baseline -> current, change (and raw change), confidence."""
    parts = [" -> ".join(values(verdict, unit))]
    if verdict.raw_change is not None:
        parts.append(f"raw {percent(verdict.raw_change)}")
    if verdict.change is not None:
        judged = " in reference units" if verdict.raw_change is not None else ""
        parts.append(f"change {percent(verdict.change)}{judged}")
    if verdict.confidence is not None:
        parts.append(f"confidence {verdict.confidence:.1%}")
    if verdict.threshold is not None:
        parts.append(f"threshold {verdict.threshold:.0%}")
    return ", ".join(parts)
