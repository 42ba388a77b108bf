"""The axes of the HTML report's figures: ticks as plain numbers, and limits that keep every
box in view. Imports matplotlib only when a figure is drawn."""

from __future__ import annotations

from typing import Any

from ..verdict import stats


def plain_ticks(axis: Any) -> None:
    """Log-axis ticks as plain numbers (60, 200, 0.5), not ``6x10^1``: the unit on the axis
    label already carries the SI prefix (ms, GFLOP/s). The default formatters still choose
    which ticks get a label, so that minor ticks do not crowd."""
    for get, put in (
        (axis.get_major_formatter, axis.set_major_formatter),
        (axis.get_minor_formatter, axis.set_minor_formatter),
    ):
        put(plain_formatter(get()))


def plain_formatter(chooser: Any) -> Any:
    """A formatter that labels the ticks ``chooser`` labels, as plain numbers."""
    from matplotlib.ticker import Formatter

    class Plain(Formatter):  # type: ignore[misc]  # matplotlib is not installed for lint
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


def view_limits(values: list[list[float]]) -> tuple[float, float]:
    """Axis limits that keep every box in view but not a few far outliers (3 IQR fences)."""
    lows, highs = [], []
    for vs in values:
        q1, q3 = stats.quantile(vs, 0.25), stats.quantile(vs, 0.75)
        fence = 3 * (q3 - q1)
        lows.append(max(min(vs), q1 - fence))
        highs.append(min(max(vs), q3 + fence))
    return min(lows), max(highs)


def pad(low: float, high: float, log: bool = False) -> tuple[float, float]:
    """Room around the values: a little more above, where the labels go."""
    if log:
        return low / 1.15, high * 1.25
    span = (high - low) or abs(high) or 1.0
    return low - 0.08 * span, high + 0.12 * span
