"""history.html: each gated metric night by night, with the Sen line its verdict was judged on, in one offline file.

One chart per metric the history judged (a metric that could not be judged, or was not
measured every night, has its row and no chart): the nightly values, oldest first, and the
straight line of Sen's slope through them, so a creep reads as points climbing along the
line and noise as points scattered about a flat one. Built from the report's own SVG and
page helpers, as compare.html is: no scripts, nothing fetched.
"""

from __future__ import annotations

from pathlib import Path

from harness.atomic_files import write_atomically
from harness.compare.history import History, MetricTrend, TrendOutcome
from harness.compare.history_outputs import row_cells
from harness.compare.page import header
from harness.foreign_text import html as escape  # foreign text: escaped, controls shown, capped
from harness.report import svg
from harness.report.html import CHART_CSS, META_CSS, PAGE_CSS, TABLE_CSS, cell, page, table

_CSS = (PAGE_CSS + META_CSS + TABLE_CSS + CHART_CSS
        + ".drift{color:#cf222e;font-weight:600}.ok{color:#1a7f37}.noise{color:#9a6700}\n")
_VERDICT_CLASSES = {TrendOutcome.DRIFT: "drift", TrendOutcome.UNJUDGED: "drift",
                    TrendOutcome.NOT_SIGNIFICANT: "noise"}
_SCALES = {"s": (1000.0, "ms"), "share": (100.0, "%")}
"""How a unit is plotted: seconds as milliseconds, a share as a percentage."""


def write_page(path: Path, history: History) -> Path:
    return write_atomically(path, render_page(history))


def render_page(history: History) -> str:
    failures = history.failures
    verdict = "drift" if failures else "no trend beyond tolerance"
    title = f"{history.scenario}: {verdict} over {len(history.nights)} nights"
    charts = [_chart(metric, history) for metric in history.metrics if metric.trend is not None]
    body = [_header(history), "<h2>Metrics</h2>", _metrics_table(history), "<h2>Night by night</h2>",
            *(charts or ['<p class="meta">no metric could be judged</p>'])]
    return page(title, _CSS, body)


def _header(history: History) -> str:
    failures = history.failures
    verdict = (f'<p class="drift">{len(failures)} metric{"s" * (len(failures) != 1)} failed: '
               + escape(", ".join(metric.metric for metric in failures)) + "</p>"
               if failures else '<p class="ok">No trend beyond its tolerance.</p>')
    meta = [("nights", str(len(history.nights))), ("oldest", history.nights[0].run_id),
            ("newest", history.nights[-1].run_id), ("significance", f"{history.settings.significance:g}"),
            ("exit code", str(history.exit_code))]
    return header(f"{history.scenario}: trends over the nights", meta, verdict)


def _metrics_table(history: History) -> str:
    rows = []
    for metric in history.metrics:
        cells = row_cells(metric)
        rows.append([cell(cells[0]), *(cell(text, numeric=True) for text in cells[1:7]),
                     cell(cells[7], css=_VERDICT_CLASSES.get(metric.verdict)), cell(metric.note)])
    return table(["metric", "first", "last", "per night", "drift", "tolerance", "trend", "verdict", "note"], rows,
                 "no metric")


def _chart(metric: MetricTrend, history: History) -> str:
    """The nightly values (night 1 is the oldest) and the Sen line through them."""
    assert metric.trend is not None
    scale, unit = _SCALES.get(metric.unit, (1.0, metric.unit))
    nights = range(len(metric.values))
    values = [(index + 1.0, None if value is None else value * scale) for index, value in zip(nights, metric.values,
                                                                                             strict=True)]
    trend = metric.trend
    line = [(index + 1.0, max(0.0, trend.start + trend.slope * index) * scale) for index in nights]
    return svg.line_chart([svg.Series("each night", values), svg.Series("Sen's slope", line)],
                          title=f"{metric.metric}: {metric.verdict.value}", x_label="night (1 is the oldest)",
                          y_label=unit, x_max=float(len(history.nights)), counts=metric.unit == "count")
