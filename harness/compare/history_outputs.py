"""What `mrtr-harness history` leaves: the terminal table, history.json and history.html.

The same rows in each, in the same order, as `compare`'s outputs: a person reads the table
in the CI log, a script reads history.json, and history.html (`harness.compare.history_page`)
plots each metric night by night with the trend line the verdict was judged on.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from harness import foreign_text
from harness.atomic_files import write_atomically
from harness.compare.history import History, MetricTrend
from harness.compare.outputs import TABLE_LIMIT, format_value, plain_table

HISTORY_JSON, HISTORY_HTML = "history.json", "history.html"
_HEADERS = ("metric", "night 1", "last night", "fitted line", "per night", "drift", "tolerance", "trend", "verdict")
LEGEND = ("fitted line: the trend line (Sen's slope) at night 1 and at the last night; per night and drift are its "
          "slope and its whole change, relative to its night-1 value: not last minus first, which one odd night "
          "moves")
"""Said under the table: what drift is measured on, so nobody reads it off the first and last nights' figures."""


def write_json(path: Path, history: History) -> Path:
    return write_atomically(path, json.dumps(history.as_dict(), indent=2, sort_keys=True) + "\n")


def render_table(history: History) -> str:
    """The terminal table, plain text, then one line per metric that failed the gate."""
    first, last = history.nights[0].run_id, history.nights[-1].run_id
    lines = [f"history: {history.scenario}, {len(history.nights)} nights from {first} to {last} (Mann-Kendall, "
             f"significance {history.settings.significance:g})", "",
             *plain_table(_HEADERS, [row_cells(metric) for metric in history.metrics]), "", LEGEND, ""]
    failures = history.failures
    if failures:
        lines.append(f"✗ {len(failures)} metric{'s' * (len(failures) != 1)} drifted or cannot be judged, exit code 1:")
        lines += [f"    - {metric.metric}: {metric.note}" for metric in failures]
    else:
        lines.append("✓ no trend beyond its tolerance, exit code 0")
    return foreign_text.block("\n".join(lines), TABLE_LIMIT) + "\n"  # the nights' run ids and names: their words


def row_cells(metric: MetricTrend) -> tuple[str, str, str, str, str, str, str, str, str]:
    """One row as text: the first and last nights' figures, the fitted line at both ends, its slope per night and
    the drift (relative to the line's night-1 value), the tolerance, the trend test and the verdict."""
    known = [value for value in metric.values if value is not None]
    first = format_value(known[0], metric.unit) if known else "-"
    last = format_value(metric.values[-1], metric.unit)
    trend = metric.trend
    end = None if trend is None else trend.start + trend.slope * (len(metric.values) - 1)
    fitted = "-" if trend is None else f"{format_value(trend.start, metric.unit)} → {format_value(end, metric.unit)}"
    per_night = _relative(trend.slope, trend.start) if trend else "-"
    drift = "-" if metric.drift is None else _signed(metric.drift)
    tolerance = "exact" if metric.tolerance is None else f"{metric.tolerance * 100:g}%"
    test = f"p={trend.p_value:.2g}, S={trend.s:+d}" if trend else "n/a"
    return (metric.metric, first, last, fitted, per_night, drift, tolerance, test, metric.verdict.value)


def _relative(change: float, start: float) -> str:
    if change == 0:
        return "+0.0%"
    if start == 0:
        return f"{change:+.3g}"
    return f"{change / abs(start) * 100:+.1f}%"


def _signed(drift: float) -> str:
    """The drift as a signed change worse (+) or better (-): `worse` reads the same for either direction."""
    if math.isinf(drift):
        return "worse from 0" if drift > 0 else "better from 0"
    return f"{drift * 100:+.1f}% worse" if drift > 0 else ("no worse" if drift == 0 else f"{-drift * 100:.1f}% better")
