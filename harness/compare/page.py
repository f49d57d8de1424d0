"""compare.html: the two runs' distributions side by side, and every metric's verdict, in one offline file.

A person opens it to learn whether the night regressed and where: the verdict comes first,
then the regressions alone, each regressed distribution drawn baseline against current,
then every metric's row, then the other distributions. A percentile shift is easiest to
judge on the whole curve: for each flow, tool and round the round latency at every
percentile, baseline and current on one chart (a curve above the other all along is a
shift; curves that part only at the right are a tail), and for each tool the share of
calls by rounds taken. Built from the report's own SVG and page helpers, so it opens from a
CI artefact with no scripts and no network.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.atomic_files import write_atomically
from harness.compare.comparison import Comparison, ComparisonOutcome, MetricResult
from harness.compare.outputs import row_cells
from harness.compare.samples import RunSamples
from harness.foreign_text import html as escape  # foreign text: escaped, controls shown, capped
from harness.journal.distributions import Counts, Sketch
from harness.report import svg
from harness.report.html import CHART_CSS, META_CSS, PAGE_CSS, TABLE_CSS, cell, page, table

_CSS = (PAGE_CSS + META_CSS + TABLE_CSS + CHART_CSS
        + ".regression{color:#cf222e;font-weight:600}.improved{color:#1a7f37}.noise,.skip{color:#9a6700}\n")
_VERDICT_CLASSES = {ComparisonOutcome.REGRESSION: "regression", ComparisonOutcome.IMPROVED: "improved",
                    ComparisonOutcome.NOT_SIGNIFICANT: "noise"}
_QUANTILES = [float(q) for q in range(1, 100)] + [99.5, 99.9, 100.0]
_TOP_ROUNDS = 10


def write_page(path: Path, comparison: Comparison) -> Path:
    return write_atomically(path, render_page(comparison))


def render_page(comparison: Comparison) -> str:
    before, after = comparison.baseline.samples, comparison.current.samples
    title = f"{comparison.current.scenario.name}: {'regression' if comparison.regressions else 'no regression'}"
    regressed_latency, regressed_rounds = _regressed_keys(comparison.regressions)
    latency_keys = sorted(before.latency.keys() | after.latency.keys())
    rounds_keys = sorted(before.rounds_per_call.keys() | after.rounds_per_call.keys())
    body = [_header(comparison)]
    if comparison.regressions:
        body += ["<h2>Regressions</h2>", _metrics_table(comparison.regressions),
                 *_latency_charts(before, after, [key for key in latency_keys if key in regressed_latency]),
                 *_rounds_charts(before, after, [key for key in rounds_keys if key in regressed_rounds])]
    body += ["<h2>Every metric</h2>", _metrics_table(comparison.results),
             "<h2>Round latency by percentile</h2>",
             *_latency_charts(before, after, [key for key in latency_keys if key not in regressed_latency],
                              none="no other rounds" if regressed_latency else "no rounds in either run"),
             "<h2>Rounds per call</h2>",
             *_rounds_charts(before, after, [key for key in rounds_keys if key not in regressed_rounds],
                             none="no other calls" if regressed_rounds else "no calls in either run")]
    return page(title, _CSS, body)


_LATENCY = re.compile(r"round_duration\{flow='([^']*)',tool='([^']*)',round='(\d+)'\}\.")
_ROUNDS = re.compile(r"rounds_per_call\{flow='([^']*)',tool='([^']*)'\}\.")


def _regressed_keys(regressions: list[MetricResult]) -> tuple[set[tuple[str, str, int]], set[tuple[str, str]]]:
    """The distributions a regression was found in: (flow, tool, round) of round latency, (flow, tool) of rounds
    per call, read back from the metrics' names (`harness.compare.comparison` writes them)."""
    latency, rounds = set(), set()
    for result in regressions:
        if found := _LATENCY.match(result.metric):
            latency.add((found[1], found[2], int(found[3])))
        elif found := _ROUNDS.match(result.metric):
            rounds.add((found[1], found[2]))
    return latency, rounds


def _header(comparison: Comparison) -> str:
    regressions = comparison.regressions
    verdict = (f'<p class="regression">{len(regressions)} regression{"s" * (len(regressions) != 1)}: '
               + escape(", ".join(result.metric for result in regressions)) + "</p>"
               if regressions else '<p class="improved">No regression.</p>')
    meta = [("baseline", comparison.baseline.run_id), ("current", comparison.current.run_id),
            ("significance", f"{comparison.settings.significance:g}"),
            ("exit code", str(comparison.exit_code))]
    differences = (f'<p class="skip">Compared with --force; the scenarios differ in: '
                   f'{escape(", ".join(comparison.scenario_differences))}</p>'
                   if comparison.scenario_differences else "")
    return header(f"{comparison.current.scenario.name}: baseline comparison", meta, verdict + differences)


def header(heading: str, meta: list[tuple[str, str]], verdict: str) -> str:
    """The page's heading, its facts in a line (name, value), then the verdict's HTML (compare.html, history.html)."""
    return (f"<header><h1>{escape(heading)}</h1>"
            '<p class="meta">' + "".join(f"<span>{escape(name)} <b>{escape(value)}</b></span>"
                                         for name, value in meta)
            + f"</p>{verdict}</header>")


def _metrics_table(results: list[MetricResult]) -> str:
    rows = []
    for result in results:
        cells = row_cells(result)
        css = _VERDICT_CLASSES.get(result.verdict)
        rows.append([cell(cells[0]), *(cell(text, numeric=True) for text in cells[1:6]),
                     cell(cells[6], css=css), cell(result.note)])
    return table(["metric", "baseline", "current", "change", "tolerance", "significance", "verdict", "note"], rows,
                 "nothing to compare")


def _latency_charts(before: RunSamples, after: RunSamples, keys: list[tuple[str, str, int]],
                    none: str | None = None) -> list[str]:
    charts = []
    for key in keys:
        flow, tool, number = key
        series = [svg.Series(name, _quantile_points(samples.latency.get(key)))
                  for name, samples in (("baseline", before), ("current", after))]
        charts.append(svg.line_chart(series, title=f"{flow} / {tool} / round {number}: latency by percentile",
                                     x_label="percentile of rounds", y_label="latency (ms)", x_max=100.0))
    return charts or ([f'<p class="meta">{escape(none)}</p>'] if none else [])


def _quantile_points(values: Sketch | None) -> list[tuple[float, float | None]]:
    points: list[tuple[float, float | None]] = []
    for q in _QUANTILES:
        value = values.percentile(q) if values is not None else None
        points.append((q, value * 1000 if value is not None else None))
    return points


def _rounds_charts(before: RunSamples, after: RunSamples, keys: list[tuple[str, str]],
                   none: str | None = None) -> list[str]:
    """Per tool: the percentage of calls that took 1, 2, ... 10+ rounds, baseline and current bars side by side."""
    charts = []
    categories = [*(str(n) for n in range(1, _TOP_ROUNDS)), f"{_TOP_ROUNDS}+"]
    for key in keys:
        flow, tool = key
        groups = [(name, _shares(samples.rounds_per_call.get(key)))
                  for name, samples in (("baseline %", before), ("current %", after))]
        charts.append(svg.bar_chart(categories, groups, title=f"{flow} / {tool}: calls by rounds taken",
                                    x_label="rounds in the call", y_label="% of calls"))
    return charts or ([f'<p class="meta">{escape(none)}</p>'] if none else [])


def _shares(rounds: Counts | None) -> list[float]:
    buckets = [0] * _TOP_ROUNDS
    for count, calls in rounds.items() if rounds is not None else []:
        buckets[min(count, _TOP_ROUNDS) - 1] += calls
    total = sum(buckets)
    return [round(100 * bucket / total, 1) if total else 0.0 for bucket in buckets]
