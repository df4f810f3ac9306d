"""Plots as inline SVG, drawn on the server: a line chart of rates over time and a
bar chart of a histogram. Pure functions from numbers to markup; every piece of
text is escaped; colours come from the stylesheet (classes, no inline styles)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from runtime import units

LINE_SIZE = (1000, 230)  # viewBox of a line chart: a page wide
BAR_SIZE = (560, 220)  # of a bar chart: half a page
BAR_MAX_W = 48.0  # a bar is no wider than this (a few buckets do not fill the width)
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 12, 28  # margins around the plotting area
# the width a bar's label may take: "250 ms" at the largest size the stylesheet
# gives labels (15 units, on pages 900 to 1100 px wide)
LABEL_W = 64.0


@dataclass(frozen=True)
class Series:
    """One line: its name (the legend), a CSS class, and (x, y) points, x ascending."""

    name: str
    css: str
    points: Sequence[tuple[float, float]]


def nice_top(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above `value` (1 for none)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)  # pragma: no cover - the loop always returns


def number_label(value: float) -> str:
    """A tick label: 0, 0.5, 12, 1.5k, 2M."""
    for limit, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:g}{suffix}"
    return f"{value:g}" if value == int(value) else f"{value:.2g}"


def seconds_label(value_s: float) -> str:
    """A duration bucket's label: 0, 5 ms, 250 ms, 1 s, 30 s, 2 min, 1 h, 3 d."""
    return "0" if value_s <= 0 else units.duration(value_s)


def _frame(body: list[str], title: str, size: tuple[int, int], kind: str) -> Markup:
    head = (
        f'<svg class="plot {kind}" viewBox="0 0 {size[0]} {size[1]}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(title)}</title>"
    )
    return Markup(head + "".join(body) + "</svg>")  # noqa: S704 - every text part escaped


def _text(x: float, y: float, label: str, css: str = "tick", anchor: str = "middle") -> str:
    return (
        f'<text class="{escape(css)}" x="{x:.1f}" y="{y:.1f}" '
        f'text-anchor="{anchor}">{escape(label)}</text>'
    )


def _y_axis(top: float, unit: str, size: tuple[int, int]) -> list[str]:
    """Grid lines and labels at 0, top/2 and top."""
    parts = []
    width, height = size
    inner = height - TOP - BOTTOM
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + inner * (1 - fraction)
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        parts.append(_text(LEFT - 6, y + 4, number_label(top * fraction) + unit, anchor="end"))
    return parts


def line_chart(
    series: Sequence[Series],
    x_range: tuple[float, float],
    x_ticks: Sequence[tuple[float, str]],
    title: str,
    unit: str = "",
) -> Markup:
    """Lines over a shared x range; the y axis starts at 0 and ends at a nice number."""
    x0, x1 = x_range
    span = (x1 - x0) or 1.0
    top = nice_top(max((y for s in series for _, y in s.points), default=0.0))
    width, height = LINE_SIZE
    inner_w, inner_h = width - LEFT - RIGHT, height - TOP - BOTTOM
    body = _y_axis(top, unit, LINE_SIZE)
    for i, (x, label) in enumerate(x_ticks):
        anchor = "end" if i == len(x_ticks) - 1 else "start" if i == 0 else "middle"
        body.append(_text(LEFT + inner_w * (x - x0) / span, height - 6, label, anchor=anchor))
    for s in series:
        coords = " ".join(
            f"{LEFT + inner_w * (x - x0) / span:.1f},{TOP + inner_h * (1 - y / top):.1f}"
            for x, y in s.points
            if x0 <= x <= x1
        )
        if coords:
            body.append(f'<polyline class="line {escape(s.css)}" points="{coords}"/>')
    legend_x = LEFT + 10.0
    for s in series:
        body.append(_text(legend_x, TOP + 14, s.name, f"legend {s.css}", "start"))
        legend_x += 20 + 10 * len(s.name)  # the legend's text is up to 16 units
    return _frame(body, title, LINE_SIZE, "lines")


def bar_chart(buckets: Sequence[tuple[str, int]], title: str) -> Markup:
    """One bar per bucket (label, count), equal widths; labels thinned to fit."""
    full_w, full_h = BAR_SIZE
    inner_w, inner_h = full_w - LEFT - RIGHT, full_h - TOP - BOTTOM
    top = nice_top(max((n for _, n in buckets), default=0))
    body = _y_axis(top, "", BAR_SIZE)
    if not buckets:
        body.append(_text(full_w / 2, full_h / 2, "no data", "empty"))
        return _frame(body, title, BAR_SIZE, "bars")
    width = min(inner_w / len(buckets), BAR_MAX_W)
    every = max(1, math.ceil(len(buckets) * LABEL_W / inner_w))
    for i, (label, count) in enumerate(buckets):
        h = inner_h * count / top
        x = LEFT + i * width
        body.append(
            f'<rect class="bar" x="{x + 1:.1f}" y="{TOP + inner_h - h:.1f}" '
            f'width="{max(width - 2, 1):.1f}" height="{h:.1f}">'
            f"<title>{escape(label)}: {count}</title></rect>"
        )
        if i % every == 0:
            body.append(_text(x + width / 2, full_h - 6, label))
    return _frame(body, title, BAR_SIZE, "bars")
