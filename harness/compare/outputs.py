"""What a comparison leaves behind: the terminal table, compare.json and compare-junit.xml.

The same rows in each, in the same order: a person reads the table in the CI log, a
script reads compare.json, the CI server shows one JUnit case per metric (failed when it
regressed, a metric only one run has included), so a red nightly names the metric.
compare.html (`harness.compare.page`) draws the distributions behind the rows.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from harness import foreign_text
from harness.atomic_files import write_atomically
from harness.compare.comparison import Comparison, MetricResult
from harness.report.junit import xml_bytes
from harness.report.verdict import format_seconds

COMPARE_JSON, COMPARE_JUNIT, COMPARE_HTML = "compare.json", "compare-junit.xml", "compare.html"
TABLE_LIMIT = 1_000_000
"""The most characters a terminal table shows (its rows are never near it; a forged folder's could be)."""
_HEADERS = ("metric", "baseline", "current", "change", "tolerance", "significance", "verdict")


def write_json(path: Path, comparison: Comparison) -> Path:
    return write_atomically(path, json.dumps(comparison.as_dict(), indent=2, sort_keys=True) + "\n")


def render_table(comparison: Comparison) -> str:
    """The terminal table, plain text (CI logs show colour codes as noise), then one line per regression."""
    lines = [f"compare: baseline {comparison.baseline.run_id}, current {comparison.current.run_id} "
             f"(significance {comparison.settings.significance:g})", "",
             *plain_table(_HEADERS, [row_cells(result) for result in comparison.results]), ""]
    if comparison.regressions:
        lines.append(f"✗ {len(comparison.regressions)} regression{'s' * (len(comparison.regressions) != 1)}, "
                     f"exit code 1:")
        lines += [f"    - {result.metric}: {result.note}" for result in comparison.regressions]
    else:
        lines.append("✓ no regression, exit code 0")
    return foreign_text.block("\n".join(lines), TABLE_LIMIT) + "\n"  # run ids, flow and tool names: the folders' words


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, a rule under the headers: a table a CI log shows as it is."""
    table = [headers, *rows]
    widths = [max(len(row[column]) for row in table) for column in range(len(headers))]
    lines = []
    for index, row in enumerate(table):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def row_cells(result: MetricResult) -> tuple[str, str, str, str, str, str, str]:
    """One row as text: the metric, both figures, the change, its tolerance, the test and the verdict."""
    return (result.metric, format_value(result.baseline, result.unit), format_value(result.current, result.unit),
            format_change(result), "exact" if result.tolerance is None else f"{result.tolerance * 100:g}%",
            format_significance(result), result.verdict.value)


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return format_seconds(value)
    if unit == "share":
        return f"{value * 100:.1f}%"
    if unit in ("count", "flows"):
        return str(int(value))
    if unit == "status":
        return "completed" if value else "not completed"
    if unit == "ms":
        return f"{value:.3g}ms"
    return f"{value:.3g}"


def format_change(result: MetricResult) -> str:
    change = result.change
    if change is None:
        return "-"
    if math.isinf(change):
        return "new" if change > 0 else "gone"
    if result.unit == "status":
        return "-"
    if result.unit == "count":
        return f"{int((result.current or 0) - (result.baseline or 0)):+d}"
    return f"{change * 100:+.1f}%"


def format_significance(result: MetricResult) -> str:
    if result.p_value is None:
        return "n/a"
    samples = f", n={result.samples[0]}/{result.samples[1]}" if result.samples else ""
    return f"p={result.p_value:.2g}{samples}"


def write_junit(path: Path, comparison: Comparison) -> Path:
    """One suite, one case per metric: a regression is a failure (a metric only one run has is one too)."""
    results = comparison.results
    counts = {"tests": str(len(results)),
              "failures": str(sum(result.regressed for result in results)),
              "errors": "0",
              "skipped": "0",
              "time": "0"}
    root = ET.Element("testsuites", {"name": "mrtr-harness compare", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": f"{comparison.current.scenario.name}.compare", **counts})
    properties = ET.SubElement(suite, "properties")
    for name, value in (("baseline", comparison.baseline.run_id), ("current", comparison.current.run_id),
                        ("significance", f"{comparison.settings.significance:g}"),
                        ("exit_code", str(comparison.exit_code))):
        ET.SubElement(properties, "property", {"name": name, "value": value})
    for result in results:
        case = ET.SubElement(suite, "testcase", {"classname": f"{comparison.current.scenario.name}.compare",
                                                 "name": result.metric, "time": "0"})
        text = _case_text(result)
        if result.regressed:
            ET.SubElement(case, "failure", {"message": text, "type": "regression"}).text = text
        else:
            ET.SubElement(case, "system-out").text = text
    return write_atomically(path, xml_bytes(root))


def _case_text(result: MetricResult) -> str:
    metric, baseline, current, change, tolerance, significance, verdict = row_cells(result)
    text = (f"{verdict}: baseline {baseline}, current {current} ({change}), tolerance {tolerance}, "
            f"{significance}")
    return f"{text}; {result.note}" if result.note else text
