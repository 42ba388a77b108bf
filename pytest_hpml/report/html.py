"""The standalone HTML report: header, verdict table, a chart of every relative change and, per
benchmark, this run's samples beside the baseline's.

One self-contained file (inline styles, plots as base64 PNG) so that it still reads after being
uploaded as a CI artifact. matplotlib is imported only when a report is drawn: the plugin must
not pay for it, and it is an optional dependency (the ``report`` extra: matplotlib).
"""

from __future__ import annotations

import base64
import html
import importlib.util
import io
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ..bench.metrics import kind_of, per_second
from ..verdict import judge, stats
from . import text as reports

Baselines = Mapping[str, Mapping[str, Mapping[str, Any]]]  # test id -> metric -> record

COLOURS = {
    stats.PASS: "#5b8c5a",
    stats.REGRESSED: "#c62828",
    stats.IMPROVED: "#1f6fb4",
    stats.INCONCLUSIVE: "#e69500",
    stats.NO_BASELINE: "#9e9e9e",
    stats.RECORDED: "#607d8b",
    stats.NEW: "#00897b",
}
LONG_ID = 160  # characters of a test id shown in the table; longer ones are cut in the middle
INSTALL_HINT = "pip install matplotlib (pytest-hpml's 'report' extra)"

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.2em; margin-top: 2em; }
h3 { font: 600 .95em ui-monospace, monospace; margin: 1.5em 0 .3em; word-break: break-all; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .1em 1em; margin: .5em 0; }
dt { color: #666; } dd { margin: 0; font-family: ui-monospace, monospace; }
table { border-collapse: collapse; font-size: .9em; }
th, td { padding: .25em .6em; border-bottom: 1px solid #ddd; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.test { font-family: ui-monospace, monospace; word-break: break-all; }
.badge { display: inline-block; padding: .1em .6em; border-radius: 1em; color: #fff;
         margin-right: .4em; font-weight: 600; }
.errors { color: #c62828; } img { max-width: 100%; } .note { color: #666; font-size: .9em; }
"""


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
    and the baseline medians. See :func:`stored_baselines`.
    """
    figure_class = _figure_class()
    results = document["results"]
    sections = [
        _header(document),
        "<h2>Verdicts</h2>",
        _table(results),
        _changes(figure_class, results),
        _samples(figure_class, results, baselines or {}),
    ]
    title = f"pytest-hpml benchmarks: {reports.headline(reports.counts(results))}"
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(s for s in sections if s)
        + "\n</body></html>\n"
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
    path = machine_path(directory, Fingerprint.from_dict(document["fingerprint"]))
    try:
        data = load(path)
    except BaselineError:
        return {}  # the run reported it already; the plots just lack the baseline
    unusable(data)  # never plotted, as never judged (the run or the CLI names them)
    return data["entries"]


def _figure_class() -> Any:
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


def _header(document: dict[str, Any]) -> str:
    results = document["results"]
    found = reports.counts(results)  # from the verdicts themselves, never a file's "counts"
    fp = document.get("fingerprint") or {}
    facts = {
        "machine": f"{fp.get('name', '?')} ({fp.get('id', '?')})",
        "commit": document.get("commit") or "?",
        "created": document.get("created") or "?",
        **_judged_by(document),
        **{k: _fact(fp.get(k)) for k in ("cpu", "cores", "gpus", "driver", "cuda", "torch")},
    }
    badges = "".join(
        f"<span class='badge' style='background:{COLOURS.get(v, '#666')}'>"
        f"{html.escape(str(n))} {html.escape(v)}</span>"
        for v, n in sorted(found.items(), key=lambda item: _order(item[0]))
    )
    errors = "".join(f"<li>{html.escape(str(e))}</li>" for e in document.get("errors") or ())
    return (
        f"<h1>pytest-hpml benchmarks: {html.escape(reports.headline(found))}</h1>\n"
        f"<p>{badges or 'no metrics'}</p>\n<dl>"
        + "".join(f"<dt>{k}</dt><dd>{html.escape(str(v))}</dd>" for k, v in facts.items())
        + "</dl>"
        + (f"\n<ul class='errors'>{errors}</ul>" if errors else "")
    )


def _order(verdict: str) -> int:
    return stats.VERDICTS.index(verdict) if verdict in stats.VERDICTS else len(stats.VERDICTS)


def _fact(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return "-" if value is None else str(value)


def _table(results: list[dict[str, Any]]) -> str:
    """The same rows as the terminal and Markdown tables, verdicts coloured, reasons added."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in reports.COLUMNS)
    body = ["<tr>" + "".join(_cells(row)) + "</tr>" for row in reports.rows(results)]
    return f"<table><tr>{head}</tr>\n" + "\n".join(body) + "</table>"


def _cells(row: dict[str, str]) -> list[str]:
    cells = []
    for column in reports.COLUMNS:
        value = html.escape(row[column])
        if column == "test" and len(row[column]) > LONG_ID:  # the whole id on hover
            full = html.escape(row[column], quote=True)
            shown = html.escape(_short(row[column], LONG_ID))
            cells.append(f"<td class='test' title=\"{full}\">{shown}</td>")
        elif column == "test":
            cells.append(f"<td class='test'>{value}</td>")
        elif column == "metric":
            cells.append(f"<td>{value}</td>")
        elif column == "verdict":
            colour = COLOURS.get(row["verdict"], "#666")
            reason = f" <span class='note'>({html.escape(row['reason'])})</span>"
            cells.append(
                f"<td><b style='color:{colour}'>{value}</b>{reason if row['reason'] else ''}</td>"
            )
        else:
            cells.append(f"<td class='num'>{value}</td>")
    return cells


def _png(figure: Any, alt: str) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f"<img alt='{html.escape(alt, quote=True)}' src='data:image/png;base64,{data}'>"


def _plain(text: str) -> str:
    """Text for matplotlib: a '$' would start mathtext."""
    return text.replace("$", r"\$")


def _short(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width // 2 - 1] + "…" + text[-width // 2 :]


# --- the chart of relative changes ---------------------------------------------------------


def _changes(figure_class: Any, results: list[dict[str, Any]]) -> str:
    """One bar per judged metric: its relative change, coloured by verdict, with its
    threshold marked, so what moved stands out among everything that did not."""
    bars = [
        (f"{r['test']}  {name}", v)
        for r in results
        for name, v in sorted(r["verdicts"].items())
        if v["change"] is not None
    ]
    if not bars:
        return ""
    figure = figure_class(figsize=(10, 1.4 + 0.28 * len(bars)), layout="constrained")
    ax = figure.add_subplot()
    ys = range(len(bars))[::-1]  # the first test at the top, as in the table
    for y, (_, v) in zip(ys, bars):
        if v.get("threshold"):  # grey band: a bar that ends inside it moved less than that
            width = 200 * v["threshold"]
            ax.barh(y, width, left=-width / 2, height=0.9, color="#e6e6e6", zorder=1)
        change = _finite(v["change"]) * 100
        clipped = change != v["change"] * 100
        colour = COLOURS.get(v["verdict"], "#666")
        ax.barh(y, change, height=0.6, color=colour, hatch="//" if clipped else None, zorder=2)
        ax.annotate(
            f"{v['change']:+.1%}",
            (change, y),
            xytext=(4 if change >= 0 else -4, 0),
            textcoords="offset points",
            ha="left" if change >= 0 else "right",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(list(ys), [_plain(_short(label)) for label, _ in bars], fontsize=8)
    ax.axvline(0, color="#444", linewidth=0.8, zorder=3)
    ax.set_xlabel("change from the baseline, % (grey: within the threshold)", fontsize=9)
    ax.margins(x=0.15, y=0.5 / len(bars))
    _legend(ax, {v["verdict"] for _, v in bars})
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


# --- samples per benchmark -----------------------------------------------------------------


def _samples(figure_class: Any, results: list[dict[str, Any]], baselines: Baselines) -> str:
    parts = []
    for result in results:
        names = [
            n
            for n, m in sorted(result["metrics"].items())
            if getattr(kind_of(m), "plotted", False) and m.get("samples")
        ]
        if names and any(n in result["verdicts"] for n in names):
            stored = baselines.get(result["test"], {})
            parts.append(_benchmark(figure_class, result, names, stored))
    if not parts:
        return ""
    note = (
        "<p class='note'>Each panel: the baseline's samples, this run's, and this run's in the "
        "baseline's units (scaled by the two runs' reference workload times, which is what is "
        "judged). Solid line: baseline median; dashed: ± threshold. Points beyond the axis "
        "are counted at its edge.</p>"
    )
    return "<h2>Samples</h2>\n" + note + "\n" + "\n".join(parts)


def _benchmark(
    figure_class: Any, result: dict[str, Any], names: list[str], stored: Mapping[str, Any]
) -> str:
    """One figure per test, a panel per time or rate metric."""
    figure = figure_class(figsize=(3.3 * len(names) + 0.4, 3.4), layout="constrained")
    axes = figure.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names):
        _panel(ax, name, result, stored.get(name))
    test = result["test"]
    return f"<h3>{html.escape(test)}</h3>\n" + _png(figure, f"samples of {test}")


def _panel(ax: Any, name: str, result: dict[str, Any], base: Mapping[str, Any] | None) -> None:
    record, verdict = result["metrics"][name], result["verdicts"].get(name, {})
    groups = _groups(record, base)
    factor, unit = reports.scale(stats.median(next(iter(groups.values()))), record["unit"])
    values = [[v / factor for v in vs] for vs in groups.values()]
    low, high = _limits(values)
    middle = verdict.get("baseline")
    if middle is not None and verdict.get("threshold"):
        middle /= factor
        band = (middle * (1 - verdict["threshold"]), middle * (1 + verdict["threshold"]))
        ax.axhline(middle, color="#444", linewidth=1)
        for edge in band:
            ax.axhline(edge, color="#444", linewidth=1, linestyle="--")
        low, high = min(low, band[0]), max(high, band[1])
    # Noisy machines spread samples over decades: a log axis keeps the threshold band visible.
    log = low > 0 and high / low > 5
    if log:
        ax.set_yscale("log")
        _plain_ticks(ax.yaxis)
    limits = _pad(low, high, log)
    _strips(ax, values, limits)
    ax.set_xticks(range(1, len(groups) + 1), list(groups), fontsize=8)
    ax.set_ylim(*limits)
    ax.set_ylabel(_plain(unit or name), fontsize=8)
    ax.tick_params(axis="y", which="both", labelsize=8)
    label = verdict.get("verdict", "")
    ax.set_title(_plain(f"{name}: {label}"), fontsize=9, color=COLOURS.get(label, "#222"))


def _plain_ticks(axis: Any) -> None:
    """Log-axis ticks as plain numbers (60, 200, 0.5), not ``6x10^1``: the unit on the axis
    label already carries the SI prefix (ms, GFLOP/s). The default formatters still choose
    which ticks get a label, so that minor ticks do not crowd."""
    for get, put in (
        (axis.get_major_formatter, axis.set_major_formatter),
        (axis.get_minor_formatter, axis.set_minor_formatter),
    ):
        put(_plain_formatter(get()))


def _plain_formatter(chooser: Any) -> Any:
    from matplotlib.ticker import Formatter

    class Plain(Formatter):
        def set_axis(self, axis: Any) -> None:
            super().set_axis(axis)
            chooser.set_axis(axis)

        def set_locs(self, locs: Any) -> None:
            super().set_locs(locs)
            chooser.set_locs(locs)

        def __call__(self, x: float, pos: int | None = None) -> str:
            return plain_number(x) if chooser(x, pos) else ""

    return Plain()


def plain_number(x: float) -> str:
    """A tick value as people write it: 20000, 150, 60, 2.5, 0.05."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _groups(record: Mapping[str, Any], base: Mapping[str, Any] | None) -> dict[str, list[float]]:
    """What to draw: baseline, current and, where both runs timed the reference workload,
    current in the baseline's units (where a verdict judges them so: ``judge.judged``)."""
    current = judge.runs(record)
    if not base or not base.get("samples"):
        return {"current": judge.pooled(current)}
    stored = judge.runs(base)
    groups = {"baseline": judge.pooled(stored), "current": judge.pooled(current)}
    rate = per_second(record)
    samples = judge.judged(current, stored, rate)
    normalized = samples.pooled()[0]
    if normalized and samples.units:
        # Judged in reference units (stats.normalize); drawn in the baseline's units.
        unit = stats.median(judge.pooled(stored, "reference"))
        groups["current\nnormalized"] = [s / unit if rate else s * unit for s in normalized]
    return groups


def _limits(values: list[list[float]]) -> tuple[float, float]:
    """Axis limits that keep every box in view but not a few far outliers (3 IQR fences)."""
    lows, highs = [], []
    for vs in values:
        q1, q3 = stats.quantile(vs, 0.25), stats.quantile(vs, 0.75)
        fence = 3 * (q3 - q1)
        lows.append(max(min(vs), q1 - fence))
        highs.append(min(max(vs), q3 + fence))
    return min(lows), max(highs)


def _pad(low: float, high: float, log: bool = False) -> tuple[float, float]:
    if log:
        return low / 1.15, high * 1.25
    span = (high - low) or abs(high) or 1.0
    return low - 0.08 * span, high + 0.12 * span


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
