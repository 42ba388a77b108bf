"""The static site of a history (``pytest-hpml history DIR --site OUT``): an index of the steps
found and of the benchmarks, a page per benchmark with one plot per metric over the commits
(measurements and counts on separate axes, steps marked), and a page per run, which each
point of a plot links to, with the run's record beside it.

Plots are matplotlib's, as the HTML report's are, but SVG, written into the page: a point of
an SVG figure can be a link (matplotlib's ``urls``), so every point opens its run with no
script and no server. Every name shown is escaped (``html.escape``); the plots' labels are
drawn as paths, and the figure's values are in its ``data-values`` attribute too.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..storage import writer
from ..verdict import changes, stats
from . import history as store
from . import text
from .axes import plain_number
from .html import STYLE, breakable, escape, figure_class, plain, summary

SITE_TITLE = "pytest-hpml history"
WORSE, BETTER = "#c62828", "#1f6fb4"  # the HTML report's regressed and improved


def write(found: store.History, out: Path) -> Path:
    """Write the site of ``found`` into ``out``; the path of its index page."""
    refused = _problem(out)
    if refused:
        raise writer.Refused(f"--site {out} {refused}")
    figure = figure_class()
    pages = _run_pages(found.runs)
    by_test: dict[str, list[store.Series]] = {}
    for series in found.series:
        by_test.setdefault(series.test, []).append(series)
    benchmarks = {test: f"benchmarks/{i:04d}.html" for i, test in enumerate(sorted(by_test))}
    for test, kept in by_test.items():
        body = _benchmark(figure, found, test, kept, pages)
        writer.replace(out / benchmarks[test], _page(test, body, up="../"))
    for run, name in pages.items():
        record = json.dumps(run.document, indent=1, sort_keys=True) + "\n"
        writer.replace(out / "runs" / f"{name}.json", record)
        link = f"<p><a href='{name}.json'>The run's record (JSON)</a> · <a href='../index.html'>"
        writer.replace(out / "runs" / f"{name}.html", summary(run.document, link + "history</a>"))
    index = out / "index.html"
    writer.replace(index, _page(SITE_TITLE, _index(found, benchmarks, pages)))
    return index


def _problem(out: Path) -> str | None:
    """Why ``out`` cannot take the site: a file, or a directory holding other things than a
    site of a history (whose files would be replaced)."""
    if out.exists() and not out.is_dir():
        return "is a file, not a directory"
    index = out / "index.html"
    if out.is_dir() and any(out.iterdir()):
        head = index.read_text(encoding="utf-8", errors="replace")[:2000] if index.is_file() else ""
        if f"<title>{SITE_TITLE}" not in head:
            return "is a directory holding other files; name an empty or new directory"
    return writer.creatable(out)


def _run_pages(runs: list[store.Run]) -> dict[store.Run, str]:
    """The page name of each run: its record's name where that is plain, unique either way."""
    names: dict[store.Run, str] = {}
    for i, run in enumerate(runs):
        stem = run.path.stem
        plain_name = re.fullmatch(r"[A-Za-z0-9_.-]{1,120}", stem) and not stem.startswith(".")
        names[run] = stem if plain_name else f"run-{i:05d}"
    return names


def _page(title: str, body: str, up: str = "") -> str:
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{SITE_TITLE}: {escape(title)}</title><style>{STYLE}{SITE_STYLE}</style></head>"
        f"\n<body>\n<p class='note'><a href='{up}index.html'>{SITE_TITLE}</a></p>\n{body}\n"
        "</body></html>\n"
    )


SITE_STYLE = """
svg { max-width: 100%; height: auto; } .worse { color: #c62828; } .better { color: #1f6fb4; }
"""


def _index(found: store.History, benchmarks: dict[str, str], pages: dict[store.Run, str]) -> str:
    machines = {run.machine: run.machine_name for run in found.runs}
    facts = {
        "runs": f"{len(found.runs):,}",
        "commits": f"{len(found.commits):,}",
        "machines": ", ".join(f"{name} ({i})" for i, name in sorted(machines.items())),
        "series": f"{len(found.series):,} (benchmark, metric and machine)",
    }
    rows = [
        "<tr>"
        + f"<td class='test'><a href='{benchmarks[s.test]}'>{breakable(s.test)}</a></td>"
        + "".join(f"<td>{escape(v)}</td>" for v in store.step_cells(found, s, step))
        + "</tr>"
        for s, step in found.steps()
    ]
    head = "".join(f"<th>{escape(c)}</th>" for c in store.STEP_COLUMNS)
    steps = (
        f"<div class='wide'><table><tr>{head}</tr>\n" + "\n".join(rows) + "</table></div>"
        if rows
        else "<p>No step found.</p>"
    )
    listed = "".join(
        f"<li><a href='{page}'>{breakable(test)}</a></li>" for test, page in benchmarks.items()
    )
    latest = "".join(
        f"<li><a href='runs/{pages[run]}.html'>{escape(run.commit)}</a> "
        f"{escape(run.created)} on {escape(run.machine_name)}</li>"
        for run in reversed(found.runs[-20:])
    )
    return (
        f"<h1>{SITE_TITLE}</h1>\n<dl>"
        + "".join(f"<dt>{k}</dt><dd>{escape(v)}</dd>" for k, v in facts.items())
        + f"</dl>\n<h2>Steps</h2>\n<p class='note'>{escape(STEPS_NOTE)}</p>\n{steps}\n"
        f"<h2>Benchmarks</h2>\n<ul>{listed}</ul>\n<h2>Latest runs</h2>\n<ul>{latest}</ul>"
    )


STEPS_NOTE = (
    "A step is a commit after which a metric's values differ from those before it: found by "
    "Pelt (ruptures) on the log-values, kept where a permutation test of the commits around it "
    "is confident, and for a time or rate, where it is at least the threshold. Before and "
    "after: the medians of the commits since the previous step and up to the next."
)


def _benchmark(
    figure: Any,
    found: store.History,
    test: str,
    series: list[store.Series],
    pages: dict[store.Run, str],
) -> str:
    """A benchmark's page: measurements first, then counts, one plot each."""
    ordered = sorted(series, key=lambda s: (s.counted, s.metric != "time", s.metric, s.machine))
    parts = [f"<h1>{breakable(test)}</h1>"]
    flat = {id(s) for s in ordered if len({v for vs in s.values for v in vs}) == 1}
    groups: tuple[tuple[str, Callable[[store.Series], bool]], ...] = (
        ("Times and rates", lambda s: not s.counted),
        ("Counts", lambda s: s.counted and id(s) not in flat),
        ("Counts the same at every commit", lambda s: s.counted and id(s) in flat),
    )
    for title, chosen in groups:
        shown = [s for s in ordered if chosen(s)]
        if shown:
            parts.append(f"<h2>{title}</h2>")
            parts += [_plot(figure, found, s, pages) for s in shown]
    return "\n".join(parts)


def _plot(
    figure_class_: Any, found: store.History, series: store.Series, pages: dict[store.Run, str]
) -> str:
    """One metric over the commits: a point per run, linking to its page, the medians between
    steps as a line, each step a dashed line with its change."""
    points = [series.point(i) for i in range(len(series.commits))]
    factor, unit = text.scale(max(points) or 1.0, series.unit)
    figure = figure_class_(figsize=(10, 2.8), layout="constrained")
    ax = figure.subplots()
    for i, (x, values) in enumerate(zip(series.commits, series.values)):
        urls = [f"../runs/{pages[run]}.html" for run in series.runs[i]]
        ax.scatter([x] * len(values), [v / factor for v in values], s=14, color="#333", urls=urls)
    _levels(ax, series, factor)
    for step in series.found:
        _mark(ax, series, step, factor)
    ax.set_xlim(-0.5, len(found.commits) - 0.5)
    ticks = list(range(0, len(found.commits), max(1, len(found.commits) // 30)))
    ax.set_xticks(ticks, [plain(found.commits[t][:8]) for t in ticks], rotation=90, fontsize=7)
    ax.set_ylabel(plain(f"{store.statistic(series)}, {unit}" if unit else "value"), fontsize=8)
    low, high = ax.get_ylim()
    ax.set_ylim(min(low, 0) if series.counted else low, high)
    ax.yaxis.set_major_formatter(lambda y, _: plain_number(y))
    ax.set_title(plain(f"{series.metric} on {series.machine}"), fontsize=9, loc="left")
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]  # the XML declaration and doctype: not inside a page
    data = {
        "metric": series.metric,
        "machine": series.machine,
        "unit": series.unit,
        "commits": [found.commits[c] for c in series.commits],
        "values": series.values,
        "steps": [
            {"commit": found.commits[series.commits[s.index]], "change": s.change,
             "confidence": s.confidence, "before": s.before, "after": s.after}
            for s in series.found
        ],
    }  # fmt: skip
    escaped = escape(json.dumps(data), quote=True)
    return f'<figure class="history" data-values="{escaped}">{svg}</figure>'


def _levels(ax: Any, series: store.Series, factor: float) -> None:
    """The median of each stretch between steps, as a horizontal line across it."""
    bounds = [0, *(s.index for s in series.found), len(series.commits)]
    for low, high in zip(bounds, bounds[1:]):
        level = stats.median([series.point(i) for i in range(low, high)]) / factor
        xs = series.commits[low] - 0.4, series.commits[high - 1] + 0.4
        ax.plot(xs, [level, level], color="#5b8c5a", linewidth=1.5, zorder=1)


def _mark(ax: Any, series: store.Series, step: changes.Step, factor: float) -> None:
    """A step: a dashed line before its commit, coloured by whether it is worse, and its
    change and confidence beside it."""
    x = (series.commits[step.index - 1] + series.commits[step.index]) / 2
    worse = (step.after > step.before) == series.worse_up
    colour = WORSE if worse else BETTER
    ax.axvline(x, color=colour, linestyle="--", linewidth=1.2)
    up = step.after > step.before  # the label goes where the points after the step are not
    ax.annotate(
        plain(f"{store.change(step)} ({step.confidence:.2%})"),
        (x, 0.0 if up else 1.0),
        xycoords=("data", "axes fraction"),
        xytext=(3, 4 if up else -11),
        textcoords="offset points",
        color=colour,
        fontsize=8,
        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
    )
