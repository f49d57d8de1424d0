"""Reports from a journal: the verdict and exit code, summary.json, junit.xml, report.html, the terminal table.

Journals are written with the real `Journal` writer, the way a run writes them, and read
back the way a user or a CI job would: status and exit code, the failing check named,
files that parse, an HTML page that needs nothing from the network.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator, ValidationError

from harness.config.scenario import Scenario, parse_scenario
from harness.config.thresholds import Threshold, parse_thresholds
from harness.errors import ExitCode
from harness.folding.read import read_run
from harness.journal.writer import FlowOutcome, Journal
from harness.report import RunStatus, render_thresholds, write_results
from harness.report.verdict import decide
from tests.harness_run import ROOT, SUMMARY_SCHEMA, valid_summary

T0 = 1_760_000_000.0
RUN_SECONDS = 30
CHAOS_ACTIONS = 2

PASSING = {
    "round_duration{flow='refund'}": ["p(95) < 250ms", "max < 1s"],
    "completed_ratio": ">= 0.7",
    "rejections{reason='unknown key'}": "> 0",
    "rounds_per_call{flow='refund'}": "p(99) <= 2",
}
FAILING_LATENCY = {**PASSING, "round_duration{flow='return'}": "p(95) < 10ms"}


@pytest.fixture
def scenario() -> Scenario:
    return parse_scenario('name = "nightly-refunds"\nseed = 7\nduration = "30s"\ndescription = "refunds & <returns>"\n'
                          '[load]\narrival_rate = 2\n[[flows]]\nkind = "refund"\n[[flows]]\nkind = "return"\n')


def thresholds(table: dict[str, str | list[str]]) -> list[Threshold]:
    return parse_thresholds(table)


def put(journal: Journal, record_type: str, **fields: object) -> None:
    """A record as any writer journals it (the typed records are plain dicts on the wire)."""
    journal.write({"type": record_type, **fields})  # type: ignore[arg-type]


def write_run(path: Path, *, violations: int = 0, unexplained: int = 0, ended: bool = True, torn: bool = False,
              hypothesis_after: bool = True, invariant_detail: str = "", end_status: str = "completed",
              end_reason: str | None = None, target_error: str | None = None, judged: str | None = None) -> Path:
    """A 30-second run: refunds (2 rounds) and returns (1 round), a key rotation and a restart, a
    few rejections on two replicas, the ledger checks, reconciliation and the hypothesis. `judged`: the table its
    start record says it judged (none: a journal from before the key)."""
    with Journal(path) as journal:
        put(journal, "run", t=T0, event="start", run_id="run-0007", scenario="nightly-refunds", seed=7,
            **({"judged": judged} if judged is not None else {}))
        put(journal, "hypothesis", t=T0 + 0.5, phase="before", ok=True, detail="p95 < 250ms")
        for n in range(60):
            _flow(journal, n)
        put(journal, "chaos", t=T0 + 10, action="rotate-keys", phase="start", target="replica-1", ok=None,
                      detail="minter-first")
        put(journal, "chaos", t=T0 + 12, action="rotate-keys", phase="end", target="replica-1", ok=True, detail="")
        put(journal, "chaos", t=T0 + 20, action="restart", phase="start", target="replica-2", ok=None, detail="")
        put(journal, "chaos", t=T0 + 21.5, action="restart", phase="end", target="replica-2", ok=True, detail="")
        for n in range(3):
            put(journal, "rejection", t=T0 + 11 + n, replica="replica-2", reason="unknown key",
                          method="tools/call")
        put(journal, "rejection", t=T0 + 25, replica="replica-1", reason="expired", method="tools/call")
        put(journal, "run", t=T0 + RUN_SECONDS, event="load-stopped")
        if not ended:
            journal.close()  # the process died here: nothing more reaches the file but the torn line
            return _tear(path) if torn else path
        put(journal, "hypothesis", t=T0 + 31, phase="after", ok=hypothesis_after, detail=[  # as the runner writes it
            {"threshold": "completed_ratio", "condition": "count >= 0.9", "observed": 0.95, "passed": True},
            {"threshold": "round_duration", "condition": "p(95) < 0.25", "observed": 0.9,
             "passed": hypothesis_after}])
        put(journal, "invariant", t=T0 + 32, invariant="no refund released twice", violations=violations,
                      detail=invariant_detail or ([f"refund R-{n}" for n in range(violations)] or None))
        put(journal, "invariant", t=T0 + 32, invariant="every started flow has one outcome", violations=0)
        put(journal, "reconciliation", t=T0 + 33, client_rejections=4 + unexplained, logged=4, matched=4,
            unexplained=unexplained, unmatched_logged=0,
            examples={"unexplained": [f"f{n} round 2 on replica-1" for n in range(unexplained)],
                      "unmatched_logged": []})
        put(journal, "run", t=T0 + 34, event="end", status=end_status, reason=end_reason, target_error=target_error)
    return path


def _flow(journal: Journal, n: int) -> None:
    """Flow n starts at n/2 s: a refund (one call, 2 rounds) or every third a return (1 round); some are
    declined, and four refunds are rejected (a -32602 on round 2)."""
    kind = "refund" if n % 3 else "return"
    start = T0 + n * 0.5
    rounds = 2 if kind == "refund" else 1
    outcome = (FlowOutcome.REJECTED if n % 15 == 7 else FlowOutcome.DECLINED if n % 10 == 3
               else FlowOutcome.COMPLETED)
    put(journal, "start", t=start, flow_id=f"f{n}", flow=kind, scheduled=start, late=False)
    for number in range(1, rounds + 1):
        latency = 0.04 + (n % 7) * 0.02 + number * 0.01
        rejected = outcome is FlowOutcome.REJECTED and number == rounds
        put(journal, "round", t=start + number * 0.2, flow_id=f"f{n}", flow=kind, tool=f"{kind}_tool",
                      round=number, replica=f"replica-{1 + (n + number) % 2}", intended=start, sent=start,
                      latency=latency, server_time=latency * 0.8,
                      outcome="invalid_state" if rejected else "complete", http_status=400 if rejected else 200,
                      code=-32602 if rejected else None)
    put(journal, "flow", t=start + rounds * 0.2 + 0.1, flow_id=f"f{n}", flow=kind, outcome=outcome.value,
                  rounds=rounds, duration=rounds * 0.2, server_time=0.1, think_time=0.05, late=False,
                  calls=[{"tool": f"{kind}_tool", "rounds": rounds, "outcome": "complete"}])


def _tear(path: Path) -> Path:
    """What a kill -9 mid-write leaves: the last line cut in half, no newline."""
    with open(path, "a", encoding="utf-8") as file:
        file.write('{"type":"flow","t":1760000031.2,"flow_id":"f99","flow":"ref')
    return path


def results(tmp_path: Path, scenario: Scenario, table: dict[str, str | list[str]], **journal_options) -> tuple:
    journal = write_run(tmp_path / "journal.jsonl", **journal_options)
    verdict = write_results(tmp_path / "results", scenario, [journal], thresholds(table),
                            extra={"locust": {"requests": 120}})
    summary = valid_summary(tmp_path / "results" / "summary.json")  # checked against docs/summary.schema.json
    return verdict, summary


# --- the verdict and the exit code --------------------------------------------------------------


@pytest.mark.parametrize("edit", [
    pytest.param(lambda summary: summary.update(verdict="passed"), id="a key the schema does not know"),
    pytest.param(lambda summary: summary.pop("status"), id="a key gone"),
    pytest.param(lambda summary: summary.update(exit_code=5), id="an exit code that does not exist"),
    pytest.param(lambda summary: summary["flows"].update(total="120"), id="a count that is text"),
    pytest.param(lambda summary: summary.update(schema=2), id="another layout version"),
])
def test_the_summary_schema_refuses_a_summary_the_writer_does_not_write(tmp_path: Path, scenario: Scenario,
                                                                        edit) -> None:
    """The schema CI validates summary.json with is strict: a drifted summary fails it, naming the key."""
    _, summary = results(tmp_path, scenario, FAILING_LATENCY, end_status="interrupted",
                         end_reason="interrupted by SIGTERM")
    edit(summary)
    with pytest.raises(ValidationError):
        Draft202012Validator(json.loads(SUMMARY_SCHEMA.read_text())).validate(summary)


def test_a_run_that_passes_every_check_is_completed_with_exit_code_0(tmp_path: Path, scenario: Scenario) -> None:
    verdict, summary = results(tmp_path, scenario, PASSING)

    assert verdict.status is RunStatus.COMPLETED and verdict.exit_code == ExitCode.PASSED == 0
    assert summary["status"] == "completed" and summary["exit_code"] == 0 and summary["problems"] == []
    assert all(row["passed"] for row in summary["thresholds"])
    assert len(summary["thresholds"]) == 5
    assert "✗" not in render_thresholds(verdict)


def test_a_failed_threshold_exits_1_and_is_named_in_the_summary_junit_and_terminal(tmp_path: Path,
                                                                                 scenario: Scenario) -> None:
    verdict, summary = results(tmp_path, scenario, FAILING_LATENCY)

    assert verdict.status is RunStatus.FAILED and verdict.exit_code == 1
    failed = [row for row in summary["thresholds"] if not row["passed"]]
    assert [(row["threshold"], row["condition"]) for row in failed] == [("round_duration{flow='return'}",
                                                                         "p(95) < 0.01")]
    assert failed[0]["observed"] > 0.01
    assert any("round_duration{flow='return'}" in problem for problem in summary["problems"])

    failures = ET.parse(tmp_path / "results" / "junit.xml").getroot().iter("failure")
    messages = {failure.get("message") for failure in failures}
    assert any(m.startswith("observed p(95)=") and m.endswith("expected p(95) < 10ms") for m in messages)

    table = render_thresholds(verdict)
    failing_line = next(line for line in table.splitlines() if "✗" in line)
    assert "'p(95) < 10ms'" in failing_line and "p(95)=" in failing_line
    assert "round_duration{flow='return'}" in table and "status failed, exit code 1" in table


@pytest.mark.parametrize(("table", "code"), [(PASSING, 0), (FAILING_LATENCY, 1)])
def test_the_three_line_gate_docs_summary_md_shows_passes_a_passed_run_and_names_a_failed_runs_problems(
        tmp_path: Path, scenario: Scenario, table: dict, code: int) -> None:
    block = re.search(r"## A gate in three lines\n.*?```python\n(.*?)```", (ROOT / "docs" / "summary.md").read_text(),
                      re.S)
    assert block is not None and block[1].count("\n") == 3
    (tmp_path / "gate.py").write_text(block[1])
    _, summary = results(tmp_path, scenario, table)
    done = subprocess.run([sys.executable, str(tmp_path / "gate.py"), str(tmp_path / "results" / "summary.json")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == code
    assert done.stderr.splitlines() == summary["problems"] and (code == 0) == (summary["problems"] == [])


def test_an_invariant_violation_fails_the_run_even_when_every_threshold_passes(tmp_path: Path,
                                                                               scenario: Scenario) -> None:
    verdict, summary = results(tmp_path, scenario, PASSING, violations=2)

    assert all(row["passed"] for row in summary["thresholds"])
    assert verdict.status is RunStatus.FAILED and verdict.exit_code == 1
    assert summary["invariants"]["no refund released twice"] == {
        "invariant": "no refund released twice", "checked": True, "violations": 2, "passed": False,
        "detail": ["refund R-0", "refund R-1"]}
    assert summary["invariants"]["every started flow has one outcome"]["passed"] is True
    assert "✗ no refund released twice: 2 violations" in render_thresholds(verdict)


def test_unexplained_rejections_fail_the_run(tmp_path: Path, scenario: Scenario) -> None:
    verdict, summary = results(tmp_path, scenario, PASSING, unexplained=3)

    assert verdict.status is RunStatus.FAILED and verdict.exit_code == 1
    assert summary["reconciliation"] == {"client_rejections": 7, "logged": 4, "matched": 4, "unexplained": 3,
                                         "no_adapter": 0, "unmatched_logged": 0, "from_redispatched_rounds": 0,
                                         "settled_early": 0,
                                         "passed": False, "not_judged": 0, "unobserved": [], "judged": True,
                                         "examples": {"unexplained": [f"f{n} round 2 on replica-1" for n in range(3)],
                                                      "unmatched_logged": []}}
    assert summary["rejections"]["unexplained"] == 3
    assert "✗ unexplained rejections == 0: 3 unexplained of 7 client rejections, 4 logged" in \
        render_thresholds(verdict)


def test_a_cut_off_journal_still_gets_every_file_marked_interrupted_with_a_non_zero_exit(
        tmp_path: Path, scenario: Scenario) -> None:
    verdict, summary = results(tmp_path, scenario, PASSING, ended=False, torn=True)

    assert verdict.status is RunStatus.INTERRUPTED and verdict.exit_code == ExitCode.INTERRUPTED == 130
    assert summary["status"] == "interrupted" and summary["exit_code"] == 130
    assert summary["flows"]["total"] == 60 and summary["duration"] == RUN_SECONDS
    assert summary["reconciliation"] is None
    assert summary["journal"]["records"] > 0
    assert (summary["journal"]["torn"], summary["journal"]["unreadable"]) == (1, 0)  # a kill's torn line is no damage
    for name in ("summary.json", "junit.xml", "report.html"):
        assert (tmp_path / "results" / name).stat().st_size > 0
    run_case = _testcases(tmp_path)["nightly-refunds.run"][0]
    assert run_case.find("error") is not None


def test_an_interrupted_run_is_not_a_pass_even_when_every_check_passed(tmp_path: Path, scenario: Scenario) -> None:
    verdict, summary = results(tmp_path, scenario, PASSING, end_status="interrupted",
                               end_reason="interrupted by SIGINT")

    assert verdict.status is RunStatus.INTERRUPTED and verdict.exit_code == ExitCode.INTERRUPTED == 130
    assert all(row["passed"] for row in summary["thresholds"])


def test_a_target_that_cannot_be_reached_exits_3(tmp_path: Path, scenario: Scenario) -> None:
    verdict, summary = results(tmp_path, scenario, PASSING, end_status="aborted",
                               target_error="replica-1: connection refused")

    assert verdict.status is RunStatus.ABORTED and verdict.exit_code == ExitCode.TARGET == 3
    assert "connection refused" in summary["reason"]


def test_a_run_that_stopped_itself_is_aborted(tmp_path: Path, scenario: Scenario) -> None:
    verdict, _ = results(tmp_path, scenario, PASSING, end_status="aborted",
                         end_reason="invariant violated: payout twice")

    assert verdict.status is RunStatus.ABORTED and verdict.exit_code == 1
    assert "payout twice" in (verdict.reason or "")


def test_a_hypothesis_failing_after_chaos_deviates(tmp_path: Path, scenario: Scenario) -> None:
    verdict, summary = results(tmp_path, scenario, PASSING, hypothesis_after=False)

    assert verdict.status is RunStatus.DEVIATED and verdict.exit_code == 1
    assert [probe["ok"] for probe in summary["hypothesis"]] == [True, False]
    assert "✗ steady state after chaos (probed at 31.0s) — round_duration p(95) < 250ms (observed 900ms)" in \
        render_thresholds(verdict)


def test_decide_without_the_checks_still_fails_on_the_figures_violations(tmp_path: Path) -> None:
    read = read_run([write_run(tmp_path / "journal.jsonl", violations=1)])

    verdict = decide(read.figures, thresholds(PASSING))

    assert verdict.status is RunStatus.FAILED and verdict.invariants["no refund released twice"].violations == 1


# --- summary.json ------------------------------------------------------------------------------


def test_the_summary_holds_the_runs_figures_and_the_callers_extra(tmp_path: Path, scenario: Scenario) -> None:
    _, summary = results(tmp_path, scenario, PASSING)

    assert summary["run_id"] == "run-0007"
    assert summary["scenario"] == {"name": "nightly-refunds", "seed": 7, "description": "refunds & <returns>"}
    assert summary["flows"]["by_flow"]["return"] == {"completed": 18, "declined": 2}
    assert summary["flows"]["by_flow"]["refund"] == {"completed": 32, "declined": 4, "rejected": 4}
    assert sum(summary["flows"]["by_outcome"].values()) == summary["flows"]["total"] == 60
    assert summary["rejections"]["by_reason"] == {"expired": {"replica-1": 1}, "unknown key": {"replica-2": 3}}
    assert summary["rounds_per_call"]["refund"] == {"count": 40, "p50": 2, "p95": 2, "p99": 2, "max": 2}
    assert set(summary["round_latency_seconds"]["refund"]) == {"1", "2"}
    assert [(a["action"], a["target"], a["start"], a["end"], a["ok"]) for a in summary["chaos"]] == [
        ("rotate-keys", "replica-1", 10.0, 12.0, True), ("restart", "replica-2", 20.0, 21.5, True)]
    assert summary["extra"]["locust"] == {"requests": 120}


def test_the_summary_percentiles_are_the_ones_the_thresholds_observed(tmp_path: Path, scenario: Scenario) -> None:
    table = {"round_duration{flow='refund',round='2'}": ["p(50) < 1s", "p(95) < 1s", "p(99) < 1s"],
             "rounds_per_call{flow='return'}": "max <= 10"}
    _, summary = results(tmp_path, scenario, table)

    observed = {row["condition"].split()[0]: row["observed"] for row in summary["thresholds"]}
    assert summary["round_latency_seconds"]["refund"]["2"]["p50"] == observed["p(50)"]
    assert summary["round_latency_seconds"]["refund"]["2"]["p95"] == observed["p(95)"]
    assert summary["round_latency_seconds"]["refund"]["2"]["p99"] == observed["p(99)"]
    assert summary["rounds_per_call"]["return"]["max"] == observed["max"]


# --- junit.xml ----------------------------------------------------------------------------------


def _testcases(tmp_path: Path) -> dict[str, list[ET.Element]]:
    root = ET.parse(tmp_path / "results" / "junit.xml").getroot()
    assert root.tag == "testsuites" and [child.tag for child in root] == ["testsuite"]
    cases: dict[str, list[ET.Element]] = {}
    for case in root.find("testsuite").iter("testcase"):
        cases.setdefault(case.get("classname"), []).append(case)
    return cases


def test_junit_has_one_testcase_per_threshold_condition_invariant_and_check(tmp_path: Path,
                                                                             scenario: Scenario) -> None:
    verdict, _ = results(tmp_path, scenario, FAILING_LATENCY, violations=1)

    cases = _testcases(tmp_path)
    assert len(cases["nightly-refunds.thresholds"]) == 6  # 5 passing conditions + the failing one
    assert len(cases["nightly-refunds.invariants"]) == 2
    assert [c.get("name") for c in cases["nightly-refunds.reconciliation"]] == ["unexplained rejections == 0",
                                                                               "unmatched logged rejections"]
    assert len(cases["nightly-refunds.hypothesis"]) == 2 and len(cases["nightly-refunds.run"]) == 1

    suite = ET.parse(tmp_path / "results" / "junit.xml").getroot().find("testsuite")
    total = sum(len(group) for group in cases.values())
    assert suite.get("tests") == str(total) and suite.get("failures") == "3"  # threshold, invariant, run
    assert float(suite.get("time")) == pytest.approx(RUN_SECONDS)
    invariant = next(c for c in cases["nightly-refunds.invariants"] if c.get("name") == "no refund released twice")
    assert invariant.find("failure").get("message") == "1 violation, expected 0"
    assert verdict.exit_code == 1


# --- report.html --------------------------------------------------------------------------------


class _StrictHtml(HTMLParser):
    """Fails on a closing tag that does not match the open one: catches broken markup and unescaped text."""

    VOID = frozenset({"meta", "br", "hr", "img", "input", "link"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
        else:
            self.open.pop()


def test_the_html_report_is_one_self_contained_file_with_a_marker_per_chaos_action(
        tmp_path: Path, scenario: Scenario) -> None:
    results(tmp_path, scenario, FAILING_LATENCY, invariant_detail="<script>alert('x')</script> & more",
            violations=1)
    page = (tmp_path / "results" / "report.html").read_text(encoding="utf-8")

    assert "<script" not in page.lower() and "http://" not in page and "https://" not in page
    assert "url(" not in page and "@import" not in page and "<link" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in page
    parser = _StrictHtml()
    parser.feed(page)
    parser.close()
    assert parser.errors == [] and parser.open == []

    charts = re.findall(r"<svg\b.*?</svg>", page, flags=re.S)
    for chart in charts:
        ET.fromstring(chart)  # each plot is well-formed SVG
    titles = [ET.fromstring(chart).findtext("title") for chart in charts]
    time_plots = [chart for chart, title in zip(charts, titles, strict=True) if "bins)" in title]
    assert len(time_plots) == 4  # flows/s, latency, one per replica with rejections
    assert all(chart.count('class="chaos-marker"') == CHAOS_ACTIONS for chart in time_plots)
    assert all("rotate-keys replica-1" in chart and "restart replica-2" in chart for chart in time_plots)
    histogram = next(chart for chart, title in zip(charts, titles, strict=True) if title.startswith("Rounds per call"))
    assert ">refund</text>" in histogram and ">return</text>" in histogram  # a bar per flow
    assert "✗ fail" in page and "round_duration{flow=&#x27;return&#x27;}" in page
    assert "nightly-refunds" in page and "failed" in page


def test_the_html_report_renders_a_cut_off_run_without_rejections_or_chaos(tmp_path: Path,
                                                                           scenario: Scenario) -> None:
    journal = tmp_path / "journal.jsonl"
    with Journal(journal) as writer:
        put(writer, "run", t=T0, event="start", run_id="run-cut", scenario="nightly-refunds", seed=7)
        _flow(writer, 1)
    _tear(journal)

    verdict = write_results(tmp_path / "results", scenario, [journal, tmp_path / "lost-part.jsonl"], [])
    page = (tmp_path / "results" / "report.html").read_text(encoding="utf-8")

    assert verdict.status is RunStatus.INTERRUPTED
    assert page.count("<svg") == 4 and 'class="chaos-marker"' not in page  # flows, latency, rejections, rounds
    summary = json.loads((tmp_path / "results" / "summary.json").read_text(encoding="utf-8"))
    assert summary["journal"]["missing"] == [str(tmp_path / "lost-part.jsonl")]


# --- the terminal table -------------------------------------------------------------------------


def test_the_terminal_table_is_plain_text_unless_colour_is_asked_for(tmp_path: Path, scenario: Scenario) -> None:
    verdict, _ = results(tmp_path, scenario, FAILING_LATENCY)

    plain = render_thresholds(verdict)
    coloured = render_thresholds(verdict, color=True)

    assert "\033[" not in plain and "\033[31m✗\033[0m" in coloured
    assert plain.count("✓") == 5 + 2 + 2 + 2 + 2  # conditions, invariants, reconciliation (2), hypothesis, chaos
    assert "█ CHAOS" in plain
    assert "✓ '>= 0.700' ratio=" in plain


def test_an_invariant_the_target_could_not_check_is_skipped_not_passed(tmp_path: Path, scenario: Scenario) -> None:
    journal = write_run(tmp_path / "journal.jsonl")
    with Journal(journal) as writer:  # an external target: no shop ledger to check payouts against
        put(writer, "invariant", t=T0 + 34.5, invariant="no payout twice", checked=False, violations=0, detail=[])

    verdict = write_results(tmp_path / "results", scenario, [journal], thresholds(PASSING))

    assert verdict.status is RunStatus.COMPLETED and verdict.exit_code == 0
    case = next(c for c in _testcases(tmp_path)["nightly-refunds.invariants"] if c.get("name") == "no payout twice")
    assert case.find("skipped") is not None
    assert "- 1 ledger invariant (the shop's refunds) not checked: the target declares no ledger" in render_thresholds(
        verdict)


def test_a_flow_the_harness_lost_track_of_is_its_own_error_not_the_target_s(tmp_path: Path, scenario: Scenario) -> None:
    """A started flow with no end record in a run that ended normally is a bug of the harness's bookkeeping:
    status errored, exit 4, never an invariant the target failed."""
    journal = tmp_path / "journal.jsonl"
    with Journal(journal) as writer:
        put(writer, "run", t=T0, event="start", run_id="run-lost", scenario="nightly-refunds", seed=7)
        put(writer, "start", t=T0 + 1, flow_id="w0-000001", flow="refund", scheduled=None, late=False)
        put(writer, "invariant", t=T0 + 2, invariant="one_outcome_per_flow", checked=True, violations=1,
            detail=["w0-000001: started 1 times, ended 0 times"])
        put(writer, "run", t=T0 + 3, event="end", status="completed", reason=None)

    verdict = write_results(tmp_path / "results", scenario, [journal], [])

    assert verdict.status is RunStatus.ERRORED and verdict.exit_code == ExitCode.HARNESS == 4
    assert "harness lost track" in (verdict.reason or "")


def test_crossed_replica_share_counts_continuation_rounds_served_elsewhere_and_fails_a_sticky_run():
    from harness.folding.figures import RunFigures
    from harness.folding.thresholds import evaluate

    def figures_of(marks: list[bool | None]) -> RunFigures:
        figures = RunFigures()
        for n, crossed in enumerate(marks):
            record = {"type": "round", "t": T0 + n, "flow": "refund", "round": 1 if crossed is None else 2,
                      "latency": 0.01, "outcome": "complete", "code": None, "replica": "r1"}
            if crossed is not None:
                record["crossed"] = crossed
            figures.add(record)
        return figures

    wanted = thresholds({"crossed_replica_share": "> 0"})
    crossing = figures_of([None, True, None, False, True])
    assert crossing.ratio("crossed_replica_share", {}) == pytest.approx(2 / 3)
    assert crossing.crossings() == (2, 3)
    assert all(verdict.passed for verdict in evaluate(wanted, crossing))
    sticky = figures_of([None, False, None, False])  # every retry back on the replica of its first round
    assert not any(verdict.passed for verdict in evaluate(wanted, sticky))
    assert crossing.ratio("crossed_replica_share", {"flow": "return"}) is None  # no such rounds: nothing shown


# --- `report DIR` on a damaged journal ----------------------------------------------------------------


def _results_folder(tmp_path: Path, scenario: Scenario, judged: str | None = None) -> Path:
    """A results folder as a run leaves it (scenario.json, journal.jsonl) that passes every check."""
    folder = tmp_path / "run-0007"
    folder.mkdir()
    (folder / "scenario.json").write_text(scenario.model_dump_json(), encoding="utf-8")
    write_run(folder / "journal.jsonl", judged=judged)
    return folder


def _report(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "report", str(folder), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def _damage(journal: Path, every: int, garbage: bytes) -> int:
    """Replace every `every`-th line of the journal with `garbage`; how many lines were replaced."""
    lines = journal.read_bytes().splitlines(keepends=True)
    damaged = [garbage if n % every == every - 1 else line for n, line in enumerate(lines)]
    journal.write_bytes(b"".join(damaged))
    return sum(1 for n in range(len(lines)) if n % every == every - 1)


def test_report_counts_unreadable_lines_and_does_not_trust_the_verdict_unless_lenient(tmp_path: Path,
                                                                                      scenario: Scenario) -> None:
    folder = _results_folder(tmp_path, scenario)
    assert _report(folder).returncode == 0  # the intact journal passes
    damaged = _damage(folder / "journal.jsonl", 40, b'{"type": "round", "t": 17600\x00\x00\xff\n')

    done = _report(folder)

    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr
    warning = [line for line in done.stderr.splitlines() if "journal is damaged" in line]
    assert warning == [f"mrtr-harness report: the journal is damaged: {damaged} journal lines could not be read, "
                       "so the verdict above is not trusted (exit 4; --lenient exits as it says)"]
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["journal"]["unreadable"] == damaged and summary["journal"]["torn"] == 0

    lenient = _report(folder, "--lenient")
    assert lenient.returncode == json.loads((folder / "summary.json").read_text())["exit_code"], lenient.stderr
    assert f"warning: the journal is damaged: {damaged} journal lines could not be read" in lenient.stderr


def test_report_on_a_binary_journal_exits_2_naming_the_file(tmp_path: Path, scenario: Scenario) -> None:
    folder = _results_folder(tmp_path, scenario)
    for content, words in ((bytes(range(256)) * 40, "it is a binary file"),
                           ('{"type": "run", "scenario": "caf\u00e9"}\n'.encode("latin-1"), "it is not UTF-8 text")):
        (folder / "journal.jsonl").write_bytes(content)
        done = _report(folder)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stderr.strip() == (f"mrtr-harness report: {folder / 'journal.jsonl'} is not a journal: {words}"
                                       + (" (NUL bytes in its first line)" if "binary" in words
                                          else " (byte 0xe9 at offset 32)"))


def test_report_judges_the_table_the_run_judged_or_the_one_asked_for(tmp_path: Path, scenario: Scenario) -> None:
    """Plain `report` judges the table the run's journal says it judged (here [reproduces], a failure that did not
    happen: exit 1), whatever a summary written since says; `--judge expect` judges the same figures by [expect]."""
    failure = scenario.model_copy(update={"reproduces": {"invariant_violations": "> 0"}})
    folder = _results_folder(tmp_path, failure, judged="reproduces")
    for args, code, words in (((), 1, "exit code 1 (judged by [reproduces]: the failure did not reproduce)"),
                              (("--judge", "expect"), 0, "exit code 0 (judged by [expect])"),
                              ((), 1, "(judged by [reproduces]: the failure did not reproduce)")):
        done = _report(folder, *args)
        assert done.returncode == code and words in done.stdout, (args, done.stdout, done.stderr)
        assert json.loads((folder / "summary.json").read_text())["judged"] == ("expect" if args else "reproduces")


def test_report_judging_a_table_the_scenario_has_not_is_a_usage_error(tmp_path: Path, scenario: Scenario) -> None:
    done = _report(_results_folder(tmp_path, scenario), "--judge", "reproduces")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "mrtr-harness report: scenario 'nightly-refunds' has no [reproduces] table (the failure it reproduces): only "
        "its [expect] can be judged"]


def test_top_errors_carry_a_few_example_trace_ids_in_the_summary_and_beside_each_error_in_the_html(
        tmp_path: Path, scenario: Scenario) -> None:
    """Rounds whose records carry their client span's trace id (tracing on): each error group keeps its latest
    three, newest first, whatever order the journal's parts are read in; a malformed id is no trace id."""
    traces = [f"{n:x}".rjust(32, "a") for n in range(1, 6)]
    folder = tmp_path / "run-traced"
    folder.mkdir()
    (folder / "scenario.json").write_text(scenario.model_dump_json(), encoding="utf-8")
    journal = folder / "journal.jsonl"
    with Journal(journal) as writer:
        put(writer, "run", t=T0, event="start", run_id="run-traced", scenario="nightly-refunds", seed=7)
        put(writer, "run", t=T0, event="load-started")
        rounds = [(traces[n], T0 + 1 + n) for n in (3, 0, 4, 1, 2)]  # not in time order: as workers' parts mix
        rounds += [("NOT-A-TRACE", T0 + 9), ("0" * 32, T0 + 9.5), (None, T0 + 10)]
        for n, (trace_id, t) in enumerate(rounds):
            put(writer, "start", t=t - 0.5, flow_id=f"f{n}", flow="refund", scheduled=None, late=False)
            record = {"t": t, "flow_id": f"f{n}", "flow": "refund", "tool": "issue_refund", "round": 2,
                      "replica": "r1", "intended": t - 0.1, "sent": t - 0.1, "latency": 0.1, "server_time": 0.05,
                      "outcome": "invalid_state", "http_status": 400, "code": "-32602",
                      "error": "Invalid or expired requestState"}
            put(writer, "round", **record, **({"trace_id": trace_id, "span_id": "00f067aa0ba902b7"}
                                              if trace_id else {}))
            put(writer, "flow", t=t + 0.1, flow_id=f"f{n}", flow="refund", outcome="rejected", rounds=2,
                duration=0.6, server_time=0.1, think_time=0.0, late=False, answers=[],
                calls=[{"tool": "issue_refund", "rounds": 2, "outcome": "invalid_state"}])
        put(writer, "start", t=T0 + 11, flow_id="g", flow="return", scheduled=None, late=False)
        put(writer, "round", t=T0 + 12, flow_id="g", flow="return", tool="record_return", round=1, replica="r2",
            intended=T0 + 11, sent=T0 + 11, latency=0.1, server_time=0.05, outcome="tool_error", http_status=200,
            code="tool_error", error="order O-1 has no item 'box'")
        put(writer, "run", t=T0 + 13, event="end", status="completed", reason=None)

    verdict = write_results(folder, scenario, [journal], [], save=True)
    summary = valid_summary(folder / "summary.json")  # trace_ids is in the schema
    by_tool = {group["tool"]: group for group in summary["top_errors"]}
    latest = [traces[4], traces[3], traces[2]]
    terminal = render_thresholds(verdict).split("TOP ERRORS", 1)[1].splitlines()
    assert "trace (latest)" in terminal[2]  # the terminal's table: the newest id of each, "-" for an untraced one
    rejected = next(line for line in terminal if "Invalid or expired requestState" in line)
    assert traces[4] in rejected and traces[3] not in rejected
    assert " - " in next(line for line in terminal if "has no item" in line)
    assert by_tool["issue_refund"]["count"] == 8 and by_tool["issue_refund"]["trace_ids"] == latest
    assert by_tool["record_return"]["trace_ids"] == []
    page = (folder / "report.html").read_text()
    row = re.search(r"<tr>(?:(?!</tr>).)*Invalid or expired requestState(?:(?!</tr>).)*</tr>", page, re.S)
    assert row is not None and all(f"<code>{trace_id}</code>" in row[0] for trace_id in latest)
    assert traces[0] not in page and traces[1] not in page and "NOT-A-TRACE" not in page  # a handful, not all
    assert "trace ids (latest)" in page

    (folder / "summary.json").unlink()
    rebuilt = _report(folder)  # from the figures saved beside the journal (figures.json): the same ids
    assert "figures.json" not in rebuilt.stderr, rebuilt.stderr  # the snapshot was taken, not refused
    assert json.loads((folder / "summary.json").read_text())["top_errors"] == summary["top_errors"]


def test_a_runs_own_verdict_decided_without_unreadable_lines_is_a_harness_error(tmp_path: Path,
                                                                                scenario: Scenario) -> None:
    """What `run` does with its own journal (`distrust_damage`, as `write_run_results` asks): a line that could not
    be read (a worker's part is written from what the worker sent) makes a passing verdict exit 4, said in summary.json
    and in one problem line; the same intact journal still passes."""
    journal = write_run(tmp_path / "journal.jsonl")
    intact = write_results(tmp_path / "intact", scenario, [journal], [], distrust_damage=True)
    assert intact.exit_code is ExitCode.PASSED, intact.problems
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join([*lines[:10], b'{"type": ["round"], "t": 1}\n', *lines[10:]]))

    verdict = write_results(tmp_path / "damaged", scenario, [journal], [], distrust_damage=True)

    assert verdict.exit_code is ExitCode.HARNESS and verdict.status is RunStatus.ERRORED
    summary = valid_summary(tmp_path / "damaged" / "summary.json")
    assert summary["exit_code"] == 4 and summary["journal"]["unreadable"] == 1
    assert summary["problems"][0] == ("the journal is damaged: 1 line could not be read, and the verdict was decided "
                                      "without them (exit 4; it would have been 0)")
