"""The standalone HTML report: header, verdict table, a chart of every relative change and, per
benchmark, the values its verdicts compared: with --hpml-against each pair's base and head
processes, on the statistic and clock the verdict used; against stored baselines the samples
of both runs. Each figure carries those values in its ``data-values`` attribute too.

One self-contained file (inline styles, plots as base64 PNG) so that it still reads after being
uploaded as a CI artifact. matplotlib is imported only when a report is drawn: the plugin must
not pay for it, and it is an optional dependency (the ``report`` extra: matplotlib).
"""

from __future__ import annotations

import base64
import dataclasses
import html
import importlib.util
import io
import json
import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ..bench.metrics import kind_of
from ..model import Comparison, Result, results_of
from ..verdict import stats
from . import text as reports
from .axes import pad, plain_ticks, view_limits
from .panels import Panel, panel_values

Baselines = Mapping[str, Mapping[str, Mapping[str, Any]]]  # test id -> metric -> record

COLOURS = {
    stats.PASS: "#5b8c5a",
    stats.REGRESSED: "#c62828",
    stats.IMPROVED: "#1f6fb4",
    stats.INCONCLUSIVE: "#e69500",
    stats.NO_BASELINE: "#9e9e9e",
    stats.RECORDED: "#607d8b",
    stats.NEW: "#00897b",
    stats.CHANGED: "#8d6e63",
    stats.ACCEPTED: "#7b1fa2",
}
LONG_ID = 160  # characters of a test id shown in the table; longer ones are cut in the middle
INSTALL_HINT = "pip install matplotlib (pytest-hpml's 'report' extra)"

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.2em; margin-top: 2em; }
h3 { font: 600 .95em ui-monospace, monospace; margin: 1.5em 0 .3em; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .1em 1em; margin: .5em 0; }
dt { color: #666; } dd { margin: 0; font-family: ui-monospace, monospace; }
table { border-collapse: collapse; font-size: .9em; }
th, td { padding: .25em .6em; border-bottom: 1px solid #ddd; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.test { font-family: ui-monospace, monospace; }
td.test span, h3 span { white-space: nowrap; }
.wide { overflow-x: auto; } figure { margin: 0; }
.badge { display: inline-block; padding: .1em .6em; border-radius: 1em; color: #fff;
         margin-right: .4em; font-weight: 600; }
.errors { color: #c62828; } img { max-width: 100%; } .note { color: #666; font-size: .9em; }
"""


def escape(value: object, quote: bool = True) -> str:
    """``value`` as HTML text: every value on the page passes here, made visible
    (``text.visible``: a bidirectional override would reorder what a reviewer reads) before
    its markup is made inert."""
    return html.escape(reports.visible(value), quote=quote)


class ReportError(ImportError):
    """The HTML report cannot be drawn here (matplotlib is missing)."""


def available() -> bool:
    """Whether :func:`render` can run, checked without importing matplotlib."""
    return importlib.util.find_spec("matplotlib") is not None


def check_html(chosen: Any) -> None:
    """Fail at the start, not after the benchmarks have run: the HTML report needs matplotlib."""
    if not chosen.report_html:
        return
    if not available():
        where = chosen.sources.get("report_html", "--hpml-report-html")
        raise pytest.UsageError(f"{where}: the HTML report needs matplotlib; {INSTALL_HINT}")


def render(document: dict[str, Any], baselines: Baselines | None = None) -> str:
    """The report for a JSON report ``document`` (see ``Regression.document``).

    ``baselines`` (test id -> metric -> stored record, as in a baseline file's ``entries``)
    supplies the baseline samples to plot; the document itself carries only this run's samples
    and the baseline medians (and, with --hpml-against, each process's value that a verdict
    used, on both sides). See :func:`stored_baselines`.
    """
    figures = figure_class()
    results = results_of(document)
    sections = [
        _header(document),
        "<h2>Verdicts</h2>",
        _table(results),
        _changes(figures, results),
        _samples(figures, results, baselines or {}, bool(document.get("against"))),
    ]
    title = escape(reports.headline(document, results))
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"{reports.HTML_TITLE}{title}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(s for s in sections if s)
        + "\n</body></html>\n"
    )


def summary(document: dict[str, Any], extra: str = "") -> str:
    """A page of the report without its plots: the header and the verdict table (a run's page
    in a history site), ``extra`` HTML after them. Needs no matplotlib."""
    results = results_of(document)
    title = escape(reports.headline(document, results))
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"{reports.HTML_TITLE}{title}</title><style>{STYLE}</style></head>\n<body>\n"
        f"{_header(document)}\n<h2>Verdicts</h2>\n{_table(results)}\n{extra}\n</body></html>\n"
    )


def stored_baselines(document: dict[str, Any], directory: Path | None = None) -> dict[str, Any]:
    """The entries of the machine baseline file the document was compared with, or ``{}``.

    The plugin passes ``directory`` (it writes reports before recording). Read later, a report
    of an update run would find its own samples there, so only compare runs are looked up.
    """
    from ..hardware.fingerprint import Fingerprint
    from ..verdict.baselines import BaselineError, load, machine_path, unusable

    if directory is None:
        if document.get("baseline_mode") != "compare" or not document.get("baseline_dir"):
            return {}
        directory = Path(document["baseline_dir"])
    try:  # a report's fingerprint lacking the hardware names no baseline file: nothing to plot
        path = machine_path(directory, Fingerprint.from_dict(document["fingerprint"]))
        data = load(path)
    except (BaselineError, KeyError, TypeError, ValueError, AttributeError):
        return {}  # the run reported it already; the plots just lack the baseline
    unusable(data)  # never plotted, as never judged (the run or the CLI names them)
    entries: dict[str, Any] = data["entries"]
    return entries


def figure_class() -> Any:
    """matplotlib's Figure, used without pyplot: no backend, no global state."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ReportError(f"the HTML report needs matplotlib: {INSTALL_HINT}") from None
    return Figure


def _judged_by(document: dict[str, Any]) -> dict[str, str]:
    """What the verdicts compare with: the base revision, or the stored baselines."""
    against = document.get("against")
    if against:
        return {"against": reports.sides(against), "environments": reports.differs(against)}
    return {
        "baselines": f"{document.get('baseline_mode', '?')}: {document.get('baseline_dir', '?')}"
    }


def _merged(document: dict[str, Any]) -> dict[str, str]:
    """For a report of ``pytest-hpml merge``: the shards' reports it joined."""
    shards = document.get("shards")
    if not isinstance(shards, list):
        return {}
    names = [str(s.get("report", "?")) if isinstance(s, dict) else "?" for s in shards]
    return {"merged from": ", ".join(names)}


def _header(document: dict[str, Any]) -> str:
    results = results_of(document)
    found = reports.counts(results)  # from the verdicts themselves, never a file's "counts"
    fp = document.get("fingerprint") or {}
    facts = {
        "machine": f"{fp.get('name', '?')} ({fp.get('id', '?')})",
        "commit": document.get("commit") or "?",
        "created": document.get("created") or "?",
        **_judged_by(document),
        **_merged(document),
        **{k: _fact(fp.get(k)) for k in ("cpu", "cores", "gpus", "driver", "cuda", "torch")},
    }
    badges = "".join(
        f"<span class='badge' style='background:{COLOURS.get(v, '#666')}'>"
        f"{escape(str(n))} {escape(v)}</span>"
        for v, n in sorted(found.items(), key=lambda item: _order(item[0]))
    )
    errors = "".join(f"<li>{escape(str(e))}</li>" for e in document.get("errors") or ())
    return (
        f"<h1>pytest-hpml benchmarks: {escape(reports.headline(document, results))}</h1>\n"
        f"<p>{badges or 'no metrics'}</p>\n<dl>"
        + "".join(f"<dt>{k}</dt><dd>{escape(str(v))}</dd>" for k, v in facts.items())
        + "</dl>"
        + (f"\n<ul class='errors'>{errors}</ul>" if errors else "")
    )


def _order(verdict: str) -> int:
    return stats.VERDICTS.index(verdict) if verdict in stats.VERDICTS else len(stats.VERDICTS)


def _fact(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return "-" if value is None else str(value)


def _table(results: Sequence[Result]) -> str:
    """The same rows as the terminal and Markdown tables, verdicts coloured, reasons added;
    scrolled sideways rather than squeezed where an id's part is wider than the page."""
    head = "".join(f"<th>{escape(c)}</th>" for c in reports.COLUMNS)
    body = ["<tr>" + "".join(_cells(row)) + "</tr>" for row in reports.rows(results)]
    return f"<div class='wide'><table><tr>{head}</tr>\n" + "\n".join(body) + "</table></div>"


def _cells(row: dict[str, str]) -> list[str]:
    cells = []
    for column in reports.COLUMNS:
        value = escape(row[column])
        if column == "test" and len(row[column]) > LONG_ID:  # the whole id on hover
            full = escape(row[column], quote=True)
            shown = breakable(_short(row[column], LONG_ID))
            cells.append(f"<td class='test' title=\"{full}\">{shown}</td>")
        elif column == "test":
            cells.append(f"<td class='test'>{breakable(row[column])}</td>")
        elif column == "metric":
            cells.append(f"<td>{value}</td>")
        elif column == "verdict":
            colour = COLOURS.get(row["verdict"], "#666")
            reason = f" <span class='note'>({escape(row['reason'])})</span>"
            cells.append(
                f"<td><b style='color:{colour}'>{value}</b>{reason if row['reason'] else ''}</td>"
            )
        else:
            cells.append(f"<td class='num'>{value}</td>")
    return cells


# Where a test id may wrap: after a directory, after '::', before its parameters.
_ID_BREAKS = re.compile(r"(?<=/)|(?<=::)|(?=\[)")


def breakable(test: str) -> str:
    """``test`` escaped, its parts unbreakable (``white-space: nowrap``) with a ``<wbr>``
    between them: a narrow column wraps ``tests/test_case.py::test_case[cpu]`` only between
    its parts, never inside a name as ``word-break: break-all`` did."""
    parts = [part for part in _ID_BREAKS.split(test) if part]
    return "<wbr>".join(f"<span>{escape(part)}</span>" for part in parts)


def _png(figure: Any, alt: str) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f"<img alt='{escape(alt, quote=True)}' src='data:image/png;base64,{data}'>"


def plain(text: str) -> str:
    """Text for matplotlib, made visible: a '$' would start mathtext."""
    return reports.visible(text).replace("$", r"\$")


def _short(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width // 2 - 1] + "…" + text[-width // 2 :]


# --- the chart of relative changes ---------------------------------------------------------


def _changes(figure_class: Any, results: Sequence[Result]) -> str:
    """One bar per judged metric: its relative change, coloured by verdict, with its
    threshold marked, so what moved stands out among everything that did not."""
    bars = [
        (f"{r.test}  {name}", v)
        for r in results
        for name, v in sorted(r.verdicts.items())
        if v.change is not None
    ]
    if not bars:
        return ""
    figure = figure_class(figsize=(10, 1.4 + 0.28 * len(bars)), layout="constrained")
    ax = figure.add_subplot()
    ys = range(len(bars))[::-1]  # the first test at the top, as in the table
    for y, (_, v) in zip(ys, bars):
        if v.threshold:  # grey band: a bar that ends inside it moved less than that
            width = 200 * v.threshold
            ax.barh(y, width, left=-width / 2, height=0.9, color="#e6e6e6", zorder=1)
        moved = v.change or 0.0  # bars hold only the changes that are not None
        change = _finite(moved) * 100
        clipped = change != moved * 100
        colour = COLOURS.get(v.verdict, "#666")
        ax.barh(y, change, height=0.6, color=colour, hatch="//" if clipped else None, zorder=2)
        ax.annotate(
            f"{v.change:+.1%}",
            (change, y),
            xytext=(4 if change >= 0 else -4, 0),
            textcoords="offset points",
            ha="left" if change >= 0 else "right",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(list(ys), [plain(_short(label)) for label, _ in bars], fontsize=8)
    ax.axvline(0, color="#444", linewidth=0.8, zorder=3)
    ax.set_xlabel("change from the baseline, % (grey: within the threshold)", fontsize=9)
    ax.margins(x=0.15, y=0.5 / len(bars))
    _legend(ax, {v.verdict for _, v in bars})
    return "<h2>Changes</h2>\n" + _png(figure, "relative change of every metric")


def _finite(change: float) -> float:
    """Changes beyond +/-1000% (a count from 0 is infinite) are drawn hatched at that length."""
    return max(-10.0, min(10.0, change))


def _legend(ax: Any, verdicts: set[str]) -> None:
    from matplotlib.patches import Patch

    shown = [v for v in stats.VERDICTS if v in verdicts]
    handles = [Patch(color=COLOURS[v], label=v) for v in shown]
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0, 1),
        ncol=len(shown),
        fontsize=8,
        frameon=False,
    )


# --- per benchmark: the values each verdict compared -----------------------------------------


PAIRED_NOTE = (
    "Head against base: each point is one process's value that the verdict used (the axis "
    "names the statistic and the clock), base on the left, head on the right, a line joining "
    "the two processes of a pair. Solid line: the base side's best, the table's baseline; "
    "grey band: ± the threshold around it; coloured bar: the head side's best, the table's "
    "current."
)
UNPAIRED_NOTE = (
    "A panel without pairs (a benchmark new in head, or one too few pairs measured): the "
    "head's samples on the wall clock, unjudged."
)
SAMPLES_NOTE = (
    "Stored baselines: the baseline's samples, this run's, and this run's in the baseline's "
    "units (scaled by the two runs' reference workload times, which is what is judged); "
    "◆ the median of each process. Solid line: the baseline median; grey band: ± the "
    "threshold; coloured bar: the current median. Points beyond the axis are counted at its "
    "edge."
)


def _samples(
    figure_class: Any, results: Sequence[Result], baselines: Baselines, against: bool
) -> str:
    parts, panels = [], []
    for result in results:
        names = [
            n
            for n, m in sorted(result.metrics.items())
            if getattr(kind_of(m), "plotted", False) and m.get("samples")
        ]
        if names and any(n in result.verdicts for n in names):
            stored = baselines.get(result.test, {})
            part, drawn = _benchmark(figure_class, result, names, stored)
            parts.append(part)
            panels += drawn
    if not parts:
        return ""
    notes = [PAIRED_NOTE] if any(p.paired for p in panels) else []
    if not all(p.paired for p in panels):
        notes.append(UNPAIRED_NOTE if against else SAMPLES_NOTE)
    intro = "".join(f"<p class='note'>{escape(n)}</p>" for n in notes)
    return "<h2>What was judged</h2>\n" + intro + "\n" + "\n".join(parts)


def _benchmark(
    figure_class: Any, result: Result, names: list[str], stored: Mapping[str, Any]
) -> tuple[str, list[Panel]]:
    """One figure per test, a panel per time or rate metric, its values in ``data-values``."""
    figure = figure_class(figsize=(3.6 * len(names) + 0.4, 3.6), layout="constrained")
    axes = figure.subplots(1, len(names), squeeze=False)[0]
    panels = [_panel(ax, name, result, stored.get(name)) for ax, name in zip(axes, names)]
    test = result.test
    data = escape(json.dumps([dataclasses.asdict(p) for p in panels]), quote=True)
    return (
        f'<h3>{breakable(test)}</h3>\n<figure data-values="{data}">'
        + _png(figure, f"values judged for {test}")
        + "</figure>"
    ), panels


def _panel(ax: Any, name: str, result: Result, base: Mapping[str, Any] | None) -> Panel:
    """Draw one metric's panel; returns what it drew."""
    shown = panel_values(name, result, base)
    _draw(ax, shown)
    return shown


def _draw(ax: Any, shown: Panel) -> None:
    groups = list(shown.groups.values())
    factor, unit = reports.scale(stats.median(groups[0]), shown.unit)
    values = [[v / factor for v in vs] for vs in groups]
    low, high = (
        (min(map(min, values)), max(map(max, values))) if shown.paired else view_limits(values)
    )
    if shown.band and shown.baseline is not None:
        band = (shown.band[0] / factor, shown.band[1] / factor)
        ax.axhspan(*band, color="#e6e6e6", zorder=0)
        ax.axhline(shown.baseline / factor, color="#444", linewidth=1, zorder=1)
        low, high = min(low, band[0]), max(high, band[1])
    # Noisy machines spread samples over decades: a log axis keeps the threshold band visible.
    log = low > 0 and high / low > 5
    if log:
        ax.set_yscale("log")
        plain_ticks(ax.yaxis)
    limits = pad(low, high, log)
    if shown.paired:
        _pairs(ax, values)
    else:
        _strips(ax, values, limits)
        _medians(ax, shown, factor)
    _current(ax, shown, factor)
    ax.set_xticks(range(1, len(groups) + 1), list(shown.groups), fontsize=8)
    ax.set_xlim(0.4, len(groups) + 0.6)
    ax.set_ylim(*limits)
    label = f"{unit or shown.metric}: {shown.statistic}\non {shown.clock}"
    ax.set_ylabel(plain(label), fontsize=8)
    ax.tick_params(axis="y", which="both", labelsize=8)
    ax.set_title(plain(_title(shown)), fontsize=9, color=COLOURS.get(shown.verdict, "#222"))


def _title(shown: Panel) -> str:
    """'time: regressed, 706 us -> 1.09 ms': the table's row, in short."""
    title = f"{shown.metric}: {shown.verdict}" if shown.verdict else shown.metric
    if shown.baseline is not None and shown.current is not None:
        judged = Comparison(shown.verdict, shown.baseline, shown.current)
        title += f", {' -> '.join(reports.values(judged, shown.unit))}"
    return title


def _pairs(ax: Any, values: list[list[float]]) -> None:
    """One line per pair of processes, base to head: a change all pairs share slopes alike."""
    for base, head in zip(*values):
        ax.plot([1, 2], [base, head], color="#9e9e9e", linewidth=0.8, zorder=2)
    for x, side in enumerate(values, start=1):
        ax.scatter([x] * len(side), side, s=16, color="#1f6fb4", linewidths=0, zorder=3)


def _medians(ax: Any, shown: Panel, factor: float) -> None:
    """Each process's median, beside its group's samples: the processes' spread is what the
    verdict's second test weighs (stats.process_resolution)."""
    for x, label in enumerate(shown.groups, start=1):
        medians = [v / factor for v in shown.medians.get(label, ())]
        ax.scatter([x + 0.3] * len(medians), medians, s=14, marker="D", color="#222", zorder=4)


def _current(ax: Any, shown: Panel, factor: float) -> None:
    """The table's current value: a bar in the verdict's colour over the group it sums up."""
    if shown.current is None or shown.baseline is None:
        return
    x = list(shown.groups).index("head" if shown.paired else "current") + 1
    colour = COLOURS.get(shown.verdict, "#222")
    ax.hlines(shown.current / factor, x - 0.3, x + 0.3, color=colour, linewidth=2.5, zorder=2.5)


def _strips(ax: Any, values: list[list[float]], limits: tuple[float, float]) -> None:
    """Box plots with every sample jittered on top; points off the axis become a count."""
    jitter = random.Random("pytest-hpml")  # the same report twice draws the same picture
    ax.boxplot(
        values,
        widths=0.5,
        showfliers=False,
        medianprops={"color": "#222", "linewidth": 1.5},
        boxprops={"color": "#666"},
        whiskerprops={"color": "#666"},
        capprops={"color": "#666"},
    )
    low, high = limits
    for x, vs in enumerate(values, start=1):
        shown = [v for v in vs if low <= v <= high]
        xs = [x + jitter.uniform(-0.15, 0.15) for _ in shown]
        ax.scatter(xs, shown, s=7, alpha=0.45, color="#1f6fb4", linewidths=0, zorder=3)
        above, below = sum(v > high for v in vs), sum(v < low for v in vs)
        if above:
            ax.annotate(f"▲{above}", (x, high), ha="center", va="top", fontsize=7)
        if below:
            ax.annotate(f"▼{below}", (x, low), ha="center", va="bottom", fontsize=7)
