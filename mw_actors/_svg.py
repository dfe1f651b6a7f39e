"""Small inline SVG charts for mw's self-contained pages: labelled axes, values, tooltips.

No script and no network: each chart is one ``<svg>`` element, its points and
bars carry a ``<title>`` (the browser shows it on hover), and the same inputs
always give the same bytes (every number is formatted, none is measured).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Bars", "Point", "Series", "bar_chart", "html_table", "line_chart", "scatter_chart"]

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 30, 40  # the legend sits above the plot
COLORS = ("#c0392b", "#2471a3", "#1e8449", "#8e44ad", "#b9770e", "#566573")


@dataclass(frozen=True)
class Series:
    """A line: its label, its points (x, y) and each point's tooltip."""

    label: str
    points: Sequence[tuple[float, float]]
    tips: Sequence[str] = ()
    dashed: bool = False


@dataclass(frozen=True)
class Bars:
    """Groups of bars: a label per group, and per series one value (None: no bar)."""

    groups: Sequence[str]
    series: Sequence[tuple[str, Sequence[float | None]]]
    tips: Sequence[Sequence[str]] = field(default_factory=tuple)


@dataclass(frozen=True)
class Point:
    """A point of a scatter chart: where, its tooltip, and its group (the colour)."""

    x: float
    y: float
    tip: str
    group: int = 0


def _number(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


def _frame(x_label: str, y_label: str, y_max: float, *, width: int, height: int) -> list[str]:
    """The axes, the y ticks (0, half, max) and the axis labels."""
    inner_h = height - TOP - BOTTOM
    parts = [
        f"<svg width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img' font-family='sans-serif'>",
        f"<line x1='{LEFT}' y1='{TOP}' x2='{LEFT}' y2='{height - BOTTOM}' stroke='#333'/>",
        f"<line x1='{LEFT}' y1='{height - BOTTOM}' x2='{width - RIGHT}' "
        f"y2='{height - BOTTOM}' stroke='#333'/>",
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + inner_h * (1 - fraction)
        parts.append(
            f"<line x1='{LEFT}' x2='{width - RIGHT}' y1='{y:.1f}' y2='{y:.1f}' stroke='#eee'/>"
            f"<text x='{LEFT - 6}' y='{y + 4:.1f}' text-anchor='end' font-size='11'>"
            f"{_number(y_max * fraction)}</text>"
        )
    parts.append(
        f"<text x='{(LEFT + width - RIGHT) / 2:.1f}' y='{height - 6}' text-anchor='middle' "
        f"font-size='12'>{html.escape(x_label)}</text>"
        f"<text transform='translate(14 {(TOP + height - BOTTOM) / 2:.1f}) rotate(-90)' "
        f"text-anchor='middle' font-size='12'>{html.escape(y_label)}</text>"
    )
    return parts


def _legend(labels: Sequence[str], width: int) -> str:
    items = "".join(
        f"<tspan fill='{COLORS[i % len(COLORS)]}'>&#9632; </tspan>"
        f"<tspan>{html.escape(label)}   </tspan>"
        for i, label in enumerate(labels)
    )
    return f"<text x='{width - RIGHT}' y='12' text-anchor='end' font-size='11'>{items}</text>"


def line_chart(
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    y_max: float | None = None,
    marks: Sequence[tuple[float, str]] = (),
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """Lines over a shared x axis; ``marks`` are labelled vertical lines (boundaries)."""
    xs = [x for s in series for x, _ in s.points] + [x for x, _ in marks]
    ys = [y for s in series for _, y in s.points]
    if not ys:
        return "<p class='none'>nothing to plot yet</p>"
    top = y_max if y_max is not None else (max(ys) or 1.0)
    low, high = min(xs), max(xs)
    span = (high - low) or 1.0
    inner_w, inner_h = width - LEFT - RIGHT, height - TOP - BOTTOM

    def at(x: float, y: float) -> tuple[float, float]:
        across = (x - low) / span if high > low else 0.5  # one x: in the middle
        return LEFT + inner_w * across, TOP + inner_h * (1 - min(y, top) / top)

    parts = _frame(x_label, y_label, top, width=width, height=height)
    for tick in sorted({low, high, *(x for x, _ in marks)}):
        px, _ = at(tick, 0)
        parts.append(
            f"<text x='{px:.1f}' y='{height - BOTTOM + 14}' text-anchor='middle' "
            f"font-size='10'>{_number(tick)}</text>"
        )
    for x, label in marks:
        px, _ = at(x, 0)
        parts.append(
            f"<line x1='{px:.1f}' x2='{px:.1f}' y1='{TOP}' y2='{height - BOTTOM}' "
            f"stroke='#999' stroke-dasharray='3 3'><title>{html.escape(label)}</title></line>"
        )
    for i, line in enumerate(series):
        color = COLORS[i % len(COLORS)]
        if not line.points:
            continue
        path = " ".join("{:.1f},{:.1f}".format(*at(x, y)) for x, y in line.points)
        dash = " stroke-dasharray='5 3'" if line.dashed else ""
        parts.append(
            f"<polyline points='{path}' fill='none' stroke='{color}' stroke-width='2'{dash}/>"
        )
        for j, (x, y) in enumerate(line.points):
            px, py = at(x, y)
            tip = line.tips[j] if j < len(line.tips) else f"{line.label}: {_number(y)}"
            parts.append(
                f"<circle cx='{px:.1f}' cy='{py:.1f}' r='3.5' fill='{color}'>"
                f"<title>{html.escape(tip)}</title></circle>"
            )
    parts.append(_legend([s.label for s in series], width))
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(
    bars: Bars,
    *,
    x_label: str,
    y_label: str,
    y_max: float | None = None,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """Grouped bars, each with its value written above it and a tooltip."""
    values = [v for _, vs in bars.series for v in vs if v is not None]
    if not bars.groups:
        return "<p class='none'>nothing to plot yet</p>"
    top = y_max if y_max is not None else (max(values, default=0.0) or 1.0)
    inner_w, inner_h = width - LEFT - RIGHT, height - TOP - BOTTOM
    slot = inner_w / len(bars.groups)
    bar = slot * 0.8 / max(len(bars.series), 1)
    parts = _frame(x_label, y_label, top, width=width, height=height)
    for g, group in enumerate(bars.groups):
        center = LEFT + slot * (g + 0.5)
        parts.append(
            f"<text x='{center:.1f}' y='{height - BOTTOM + 14}' text-anchor='middle' "
            f"font-size='10'>{html.escape(group)}</text>"
        )
        for s, (label, series_values) in enumerate(bars.series):
            value = series_values[g]
            if value is None:
                continue
            x = LEFT + slot * g + slot * 0.1 + bar * s
            h = inner_h * min(value, top) / top
            y = TOP + inner_h - h
            tip = (
                bars.tips[s][g]
                if s < len(bars.tips) and g < len(bars.tips[s])
                else f"{group}: {label} {_number(value)}"
            )
            color = COLORS[s % len(COLORS)]
            parts.append(
                f"<rect x='{x:.1f}' y='{y:.1f}' width='{bar:.1f}' height='{h:.1f}' "
                f"fill='{color}'><title>{html.escape(tip)}</title></rect>"
                f"<text x='{x + bar / 2:.1f}' y='{y - 3:.1f}' text-anchor='middle' "
                f"font-size='10'>{_number(value)}</text>"
            )
    parts.append(_legend([label for label, _ in bars.series], width))
    parts.append("</svg>")
    return "".join(parts)


def scatter_chart(
    points: Sequence[Point],
    groups: Sequence[str],
    *,
    x_label: str,
    y_label: str,
    width: int = WIDTH,
    height: int = HEIGHT + 40,
) -> str:
    """Points on two value axes, each axis ticked at its low, middle and high value."""
    if not points:
        return "<p class='none'>nothing to plot yet</p>"
    x0, x1 = min(p.x for p in points), max(p.x for p in points)
    y0, y1 = min(p.y for p in points), max(p.y for p in points)
    # A margin of a tenth of the span around the points (one value: around it), so none
    # sits on the frame.
    dx = (x1 - x0) * 0.1 or (abs(x0) or 1) * 0.05
    dy = (y1 - y0) * 0.1 or (abs(y0) or 1) * 0.05
    x0, x1, y0, y1 = x0 - dx, x1 + dx, y0 - dy, y1 + dy
    inner_w, inner_h = width - LEFT - RIGHT, height - TOP - BOTTOM

    def at(x: float, y: float) -> tuple[float, float]:
        return LEFT + inner_w * (x - x0) / (x1 - x0), TOP + inner_h * (1 - (y - y0) / (y1 - y0))

    parts = [
        f"<svg width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img' font-family='sans-serif'>",
        f"<rect x='{LEFT}' y='{TOP}' width='{inner_w}' height='{inner_h}' fill='none' "
        "stroke='#333'/>",
    ]
    for fraction in (0.0, 0.5, 1.0):
        x, y = at(x0 + (x1 - x0) * fraction, y0 + (y1 - y0) * fraction)
        parts.append(
            f"<text x='{x:.1f}' y='{height - BOTTOM + 14}' text-anchor='middle' font-size='10'>"
            f"{_number(x0 + (x1 - x0) * fraction)}</text>"
            f"<text x='{LEFT - 6}' y='{y + 4:.1f}' text-anchor='end' font-size='10'>"
            f"{_number(y0 + (y1 - y0) * fraction)}</text>"
        )
    parts.append(
        f"<text x='{(LEFT + width - RIGHT) / 2:.1f}' y='{height - 6}' text-anchor='middle' "
        f"font-size='12'>{html.escape(x_label)}</text>"
        f"<text transform='translate(14 {(TOP + height - BOTTOM) / 2:.1f}) rotate(-90)' "
        f"text-anchor='middle' font-size='12'>{html.escape(y_label)}</text>"
    )
    for point in points:
        x, y = at(point.x, point.y)
        parts.append(
            f"<circle cx='{x:.1f}' cy='{y:.1f}' r='6' fill='{COLORS[point.group % len(COLORS)]}' "
            f"fill-opacity='0.8'><title>{html.escape(point.tip)}</title></circle>"
        )
    parts.append(_legend(groups, width))
    parts.append("</svg>")
    return "".join(parts)


def html_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain table for the same pages: a header row, then the rows (``-`` for empty)."""

    def cells(values: Sequence[str], tag: str) -> str:
        return "".join(f"<{tag}>{html.escape(v or '-')}</{tag}>" for v in values)

    body = "".join(f"<tr>{cells(row, 'td')}</tr>" for row in rows)
    return f"<table><thead><tr>{cells(columns, 'th')}</tr></thead><tbody>{body}</tbody></table>"
