"""Just enough SVG for a one-file report: line charts with vertical markers, and bar charts.

The report must open offline from one file, on a machine with nothing installed, and CI
artefact viewers strip scripts; inline SVG renders everywhere. A plotting package would
bring scripts, fonts or a dependency; this small module is deterministic (the same run
gives the same bytes) and escapes every text it draws. Tooltips are SVG `<title>`s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.foreign_text import html as escape  # foreign text: escaped, controls shown, capped

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#8C6D1F", "#444444")
"""Okabe-Ito, readable by colour-blind people; repeats past eight series."""

WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 62, 190, 50, 44
"""The top margin holds the title and, under it, the markers' labels, so labels never sit on the data."""
_LEGEND_ROWS = 12


@dataclass(frozen=True)
class Series:
    """One named line; a None y breaks the line (no data there), rather than drawing a false zero."""

    name: str
    points: Sequence[tuple[float, float | None]]


@dataclass(frozen=True)
class Marker:
    """A vertical line at `x` with a label (a chaos action), shaded until `until` when it lasted."""

    x: float
    label: str
    until: float | None = None
    failed: bool = False


@dataclass(frozen=True)
class _Frame:
    """Maps data to pixels inside the plot box."""

    x_max: float
    y_max: float

    def px(self, x: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * (x / self.x_max if self.x_max else 0.0)

    def py(self, y: float) -> float:
        return HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * (y / self.y_max if self.y_max else 0.0)


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str,
               markers: Sequence[Marker] = (), x_max: float | None = None,
               y_format: Callable[[float], str] | None = None, counts: bool = False) -> str:
    """A line chart from x = 0, with axes, ticks, a legend and markers drawn over the data.

    `counts` keeps y ticks whole: half a rejection is not a thing.
    """
    xs = [x for line in series for x, _ in line.points]
    ys = [y for line in series for _, y in line.points if y is not None]
    x_ticks = nice_ticks(max([x_max or 0.0, *xs, *(m.x for m in markers), 1e-9]))
    y_ticks = nice_ticks(max([*ys, 0.0]), whole=counts)
    frame = _Frame(x_ticks[-1], y_ticks[-1])
    parts = [_open(title), *_axes(frame, x_ticks, y_ticks, x_label, y_label, y_format)]
    parts += [_band(frame, marker) for marker in markers if marker.until is not None and marker.until > marker.x]
    for index, line in enumerate(series):
        parts.append(_polyline(frame, line, PALETTE[index % len(PALETTE)]))
    if not ys:
        parts.append(_note("no data"))
    parts += [_marker(frame, marker, index) for index, marker in enumerate(markers)]
    parts.append(_legend([line.name for line in series]))
    return "\n".join([*parts, "</svg>"])


def bar_chart(categories: Sequence[str], groups: Sequence[tuple[str, Sequence[float]]], *, title: str,
              x_label: str, y_label: str) -> str:
    """Grouped bars: one group per category, one bar per named series (its values in category order)."""
    y_ticks = nice_ticks(max([value for _, values in groups for value in values] + [0.0]), whole=True)
    frame = _Frame(float(len(categories) or 1), y_ticks[-1])
    parts = [_open(title), *_axes(frame, [], y_ticks, x_label, y_label, None)]
    slot = (frame.px(1) - frame.px(0)) * 0.8 / max(1, len(groups))
    for c, category in enumerate(categories):
        centre = frame.px(c + 0.5)
        parts.append(f'<text x="{centre:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                     f'{escape(category)}</text>')
        for g, (name, values) in enumerate(groups):
            value = values[c] if c < len(values) else 0.0
            x = centre - slot * len(groups) / 2 + slot * g
            top = frame.py(value)
            parts.append(f'<rect x="{x:.1f}" y="{top:.1f}" width="{max(slot - 1, 1):.1f}" '
                         f'height="{frame.py(0) - top:.1f}" fill="{PALETTE[g % len(PALETTE)]}">'
                         f'<title>{escape(f"{name} {category}: {_num(value)}")}</title></rect>')
            if value:
                parts.append(f'<text x="{x + slot / 2:.1f}" y="{top - 3:.1f}" text-anchor="middle" '
                             f'font-size="9">{escape(_num(value))}</text>')
    if not any(value for _, values in groups for value in values):
        parts.append(_note("no data"))
    parts.append(_legend([name for name, _ in groups]))
    return "\n".join([*parts, "</svg>"])


def nice_ticks(high: float, count: int = 5, *, whole: bool = False) -> list[float]:
    """Ticks from 0 in steps of 1, 2, 2.5 or 5 x 10^k (whole steps only, if asked), the last at or above `high`."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if whole:
        step = max(1.0, math.ceil(step))
    return [round(i * step, 10) for i in range(math.ceil(high / step - 1e-9) + 1)]


def _open(title: str) -> str:
    return (f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
            f'aria-label="{escape(title)}" font-family="sans-serif" font-size="11">\n'
            f'<title>{escape(title)}</title>\n'
            f'<text x="{LEFT}" y="17" font-size="13" font-weight="bold">{escape(title)}</text>')


def _axes(frame: _Frame, x_ticks: Sequence[float], y_ticks: Sequence[float], x_label: str, y_label: str,
          y_format: Callable[[float], str] | None) -> list[str]:
    left, right, bottom = frame.px(0), WIDTH - RIGHT, frame.py(0)
    parts = [f'<line x1="{left}" y1="{TOP}" x2="{left}" y2="{bottom}" stroke="#333"/>',
             f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#333"/>']
    for tick in y_ticks:
        y = frame.py(tick)
        text = y_format(tick) if y_format else _num(tick)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 5}" y="{y + 4:.1f}" text-anchor="end">{escape(text)}</text>')
    for tick in x_ticks:
        x = frame.px(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" stroke="#333"/>')
        parts.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{escape(_num(tick))}</text>')
    parts.append(f'<text x="{(left + right) / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text transform="translate(14 {(TOP + bottom) / 2:.1f}) rotate(-90)" text-anchor="middle">'
                 f'{escape(y_label)}</text>')
    return parts


def _polyline(frame: _Frame, line: Series, colour: str) -> str:
    """One path, broken where y is None; dots as well when points are few enough to tell apart."""
    commands, pen_down, dots = [], False, []
    for x, y in line.points:
        if y is None:
            pen_down = False
            continue
        commands.append(f'{"L" if pen_down else "M"}{frame.px(x):.1f} {frame.py(y):.1f}')
        pen_down = True
        dots.append((frame.px(x), frame.py(y), x, y))
    drawn = [f'<path d="{" ".join(commands)}" fill="none" stroke="{colour}" stroke-width="1.6">'
             f'<title>{escape(line.name)}</title></path>'] if commands else []
    if len(dots) <= 60:
        drawn += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2" fill="{colour}">'
                  f'<title>{escape(f"{line.name} at {_num(x)}: {_num(y)}")}</title></circle>'
                  for px, py, x, y in dots]
    return f'<g class="series">{"".join(drawn)}</g>'


def _band(frame: _Frame, marker: Marker) -> str:
    x, until = frame.px(marker.x), frame.px(marker.until or marker.x)
    return (f'<rect class="chaos-band" x="{x:.1f}" y="{TOP}" width="{until - x:.1f}" '
            f'height="{frame.py(0) - TOP:.1f}" fill="#D55E00" fill-opacity="0.08"/>')


def _marker(frame: _Frame, marker: Marker, index: int) -> str:
    """A dashed vertical line, its label above the plot; labels alternate rows so neighbours stay legible."""
    x = frame.px(marker.x)
    colour = "#C00000" if marker.failed else "#7A3E00"
    label_y = TOP - 17 + (index % 2) * 12
    anchor, label_x = ("end", x + 3) if x > WIDTH - RIGHT - 120 else ("start", x - 3)
    return (f'<g class="chaos-marker"><title>{escape(f"{marker.label} at {_num(marker.x)} s")}</title>'
            f'<line x1="{x:.1f}" y1="{label_y + 2}" x2="{x:.1f}" y2="{frame.py(0):.1f}" stroke="{colour}" '
            f'stroke-dasharray="4 3" stroke-width="1.2"/>'
            f'<text x="{label_x:.1f}" y="{label_y}" fill="{colour}" font-size="10" text-anchor="{anchor}">'
            f'{escape(marker.label)}</text></g>')


def _legend(names: Sequence[str]) -> str:
    x = WIDTH - RIGHT + 14
    rows = []
    for index, name in enumerate(names[:_LEGEND_ROWS]):
        y = TOP + 2 + index * 16
        text = name if len(name) <= 26 else name[:25] + "…"
        rows.append(f'<rect x="{x}" y="{y - 8}" width="10" height="10" fill="{PALETTE[index % len(PALETTE)]}"/>'
                    f'<text x="{x + 15}" y="{y + 1}">{escape(text)}</text>')
    if len(names) > _LEGEND_ROWS:
        rows.append(f'<text x="{x}" y="{TOP + 2 + _LEGEND_ROWS * 16}">+{len(names) - _LEGEND_ROWS} more</text>')
    return f'<g class="legend">{"".join(rows)}</g>'


def _note(text: str) -> str:
    return (f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.1f}" y="{(TOP + HEIGHT - BOTTOM) / 2:.1f}" '
            f'text-anchor="middle" fill="#888">{escape(text)}</text>')


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"
