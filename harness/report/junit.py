"""junit.xml: the run's checks as test cases, so Jenkins and GitLab show which check failed and why.

One test case per threshold condition, per invariant, for reconciliation, per hypothesis
probe, and one for the run itself. That last one is why a run that was interrupted,
aborted or deviated never shows as all green next to a non-zero exit code. The layout is
the common denominator CI tools read: `testsuites > testsuite > testcase`, with
`failure`/`error`/`skipped` children carrying a `message`.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness import foreign_text
from harness.atomic_files import write_atomically
from harness.folding.invariants import InvariantResult
from harness.folding.thresholds import ThresholdResult
from harness.report.verdict import (
    RunStatus,
    RunVerdict,
    condition_text,
    describe_detail,
    observed_text,
    probe_title,
)

_ERRORS = frozenset({RunStatus.INTERRUPTED, RunStatus.ERRORED})
"""Statuses that are not an assertion failing but the run not being able to judge: JUnit `error`."""


@dataclass(frozen=True)
class Case:
    """One test case and how it ended: `failure`, `error`, `skipped` or None (passed)."""

    group: str
    name: str
    outcome: str | None = None
    message: str = ""
    text: str = ""


def write_junit(path: Path, scenario_name: str, verdict: RunVerdict) -> Path:
    """Write junit.xml with one suite named after the scenario."""
    return write_atomically(path, xml_bytes(junit_tree(scenario_name, verdict)))


def xml_bytes(root: ET.Element) -> bytes:
    """A JUnit document as its file holds it: indented, UTF-8, with its XML declaration, every text and attribute
    made what XML 1.0 allows (names from the folders and servers read are data, never markup)."""
    tree = ET.ElementTree(foreign_text.clean_xml_tree(root))
    ET.indent(tree)
    buffer = io.BytesIO()
    tree.write(buffer, encoding="utf-8", xml_declaration=True)
    return buffer.getvalue()


def junit_tree(scenario_name: str, verdict: RunVerdict) -> ET.Element:
    cases = cases_for(verdict)
    counts = {"tests": str(len(cases)),
              "failures": str(sum(case.outcome == "failure" for case in cases)),
              "errors": str(sum(case.outcome == "error" for case in cases)),
              "skipped": str(sum(case.outcome == "skipped" for case in cases)),
              "time": f"{verdict.duration:.3f}"}
    root = ET.Element("testsuites", {"name": "mrtr-harness", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": scenario_name, **counts, **_timestamp(verdict)})
    properties = ET.SubElement(suite, "properties")
    for name, value in (("run_id", verdict.run_id or ""), ("status", verdict.status.value),
                        ("exit_code", str(int(verdict.exit_code))), ("judged", verdict.judged.value)):
        ET.SubElement(properties, "property", {"name": name, "value": value})
    for case in cases:
        element = ET.SubElement(suite, "testcase", {"classname": f"{scenario_name}.{case.group}", "name": case.name,
                                                    "time": "0"})
        if case.outcome is not None:
            child = ET.SubElement(element, case.outcome, {"message": case.message, "type": case.group})
            child.text = case.text or case.message
    if verdict.problems:
        ET.SubElement(suite, "system-out").text = "\n".join(verdict.problems)
    return foreign_text.clean_xml_tree(root)  # an OAuth error, a ledger row, a tool's words: data, never markup


def cases_for(verdict: RunVerdict) -> list[Case]:
    """Every check of the verdict as a case, in the order the terminal table lists them."""
    cases = [_threshold_case(threshold) for threshold in verdict.thresholds]
    cases += [_invariant_case(result) for _, result in sorted(verdict.invariants.items())]
    cases.append(_reconciliation_case(verdict))
    cases.append(_unmatched_logged_case(verdict))
    cases += [Case("hypothesis", f"steady state {probe.phase} chaos", None if probe.ok else "failure",
                   f"the {probe_title(probe, verdict.started)} failed: {describe_detail(probe.detail)}",
                   "" if probe.detail is None else str(probe.detail)) for probe in verdict.hypothesis]
    cases.append(_run_case(verdict))
    return cases


def _threshold_case(threshold: ThresholdResult) -> Case:
    expected = condition_text(threshold)
    name = f"{threshold.threshold.key}: {expected}"
    if threshold.passed:
        return Case("thresholds", name)
    return Case("thresholds", name, "failure", f"observed {observed_text(threshold)}, expected {expected}")


def _invariant_case(result: InvariantResult) -> Case:
    if result.passed and not result.checked:
        return Case("invariants", result.name, "skipped", "not checked: the target has no ledger to check it against")
    if result.passed:
        return Case("invariants", result.name)
    return Case("invariants", result.name, "failure",
                f"{result.violations} violation{'s' * (result.violations != 1)}, expected 0",
                describe_detail(result.examples, 2000))


def _reconciliation_case(verdict: RunVerdict) -> Case:
    name = "unexplained rejections == 0"
    reconciliation = verdict.reconciliation
    if reconciliation is None:
        return Case("reconciliation", name, "skipped", "the journal has no reconciliation record")
    if reconciliation.passed:
        return Case("reconciliation", name)
    return Case("reconciliation", name, "failure",
                f"observed {reconciliation.unexplained} unexplained of {reconciliation.client_rejections} "
                f"client rejections, expected 0")


def _unmatched_logged_case(verdict: RunVerdict) -> Case:
    """Reported, not failed: lines other clients caused are normal on a shared deployment (a threshold can fail it)."""
    name = "unmatched logged rejections"
    reconciliation = verdict.reconciliation
    if reconciliation is None or reconciliation.unmatched_logged is None:
        return Case("reconciliation", name, "skipped", "the journal has no reconciliation record")
    return Case("reconciliation", name, message=f"{reconciliation.unmatched_logged} logged lines no client "
                "rejection of this run explains") if reconciliation.unmatched_logged else Case("reconciliation", name)


def _run_case(verdict: RunVerdict) -> Case:
    """The run as a whole: fails when the status is not `completed`, naming why."""
    name = "run completed"
    if verdict.status is RunStatus.COMPLETED:
        return Case("run", name)
    outcome = "error" if verdict.status in _ERRORS or verdict.exit_code != 1 else "failure"
    message = f"status {verdict.status.value}, exit code {int(verdict.exit_code)}"
    return Case("run", name, outcome, message + (f": {verdict.reason}" if verdict.reason else ""),
                "\n".join(verdict.problems))


def _timestamp(verdict: RunVerdict) -> dict[str, str]:
    if verdict.started is None:
        return {}
    return {"timestamp": datetime.fromtimestamp(verdict.started, UTC).strftime("%Y-%m-%dT%H:%M:%S")}
