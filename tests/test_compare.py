"""`mrtr-harness compare` and `run --baseline`: regressions against a baseline run, read from journals.

The results folders are written with the real `Journal` and the typed records of
`harness.journal.records`, the way a run writes them, with seeded latencies: the same seed gives
the same samples, so "slower by 40%" is the baseline's samples times 1.4, and no test
depends on how fast this machine is. The command is run as a user runs it (a
subprocess) and judged by its exit code, what it names and the files it leaves.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from scipy.stats import mannwhitneyu

from harness.cli.main import build_parser
from harness.compare.cli import add_tolerance_options
from harness.compare.samples import read_results
from harness.compare.stats import mann_whitney_greater
from harness.compare.tolerances import ToleranceError, settle, tolerance_keys
from harness.config.compare import CompareSettings
from harness.config.scenario import Scenario, load_scenario, parse_scenario
from harness.config.strict import ScenarioError
from harness.journal.records import (
    CallSummary,
    CpuUsed,
    EndStatus,
    FlowEnded,
    FlowOutcome,
    FlowStarted,
    InvariantChecked,
    LoadStarted,
    LoadStopped,
    Reconciled,
    RecordType,
    RejectionLogged,
    RoundDone,
    RunEnded,
    RunEvent,
    RunStarted,
)
from harness.journal.writer import Journal
from tests.harness_run import ROOT, run_harness

T0 = 1_790_000_000.0
LOAD_SECONDS = 60.0
SCENARIO = """\
name = "nightly-compare"
seed = 11
duration = "60s"
[load]
arrival_rate = 5
[[flows]]
kind = "refund"
[[flows]]
kind = "return"
"""
SLOW_REFUND_P95 = "round_duration{flow='refund',tool='issue_refund',round='1'}.p95"


def scenario(extra: str = "", text: str = SCENARIO) -> Scenario:
    return parse_scenario(text + extra)


def write_run(folder: Path, run: Scenario, *, flows: int = 300, scale: float = 1.0, seed: int = 1,
              rejections: Sequence[str] = (), return_rounds: int = 2, cpu: bool = True,
              status: EndStatus | None = EndStatus.COMPLETED, t0: float = T0) -> Path:
    """A results folder: refunds (quote_refund, then issue_refund over 2 rounds) and returns (record_return over
    `return_rounds`), each round's latency lognormal around 10 ms times `scale`, `rejections` logged by reason;
    the run ends with `status` (None: no `run end` record, as a kill leaves it); it starts at `t0`."""
    folder.mkdir(parents=True)
    (folder / "scenario.json").write_text(run.model_dump_json(indent=2), encoding="utf-8")
    latencies = random.Random(seed)
    with Journal(folder / "journal.jsonl") as journal:
        journal.write(RunStarted(type=RecordType.RUN, event=RunEvent.START, t=t0, run_id=folder.name,
                                 scenario=run.name, seed=run.seed, duration=LOAD_SECONDS))
        journal.write(LoadStarted(type=RecordType.RUN, event=RunEvent.LOAD_STARTED, t=t0 + 1))
        for n in range(flows):
            start = t0 + 1 + n * LOAD_SECONDS / max(flows, 1)
            calls = ([("quote_refund", 1), ("issue_refund", 2)] if n % 3 else [("record_return", return_rounds)])
            _flow(journal, f"f{n}", "refund" if n % 3 else "return", start, calls,
                  lambda: latencies.lognormvariate(math.log(0.010), 0.4) * scale)
        for index, reason in enumerate(rejections):
            journal.write(RejectionLogged(type=RecordType.REJECTION, t=t0 + 2 + index, replica="r1", reason=reason,
                                          method="tools/call"))
        journal.write(LoadStopped(type=RecordType.RUN, event=RunEvent.LOAD_STOPPED, t=t0 + 1 + LOAD_SECONDS,
                                  reason="duration"))
        if cpu:
            journal.write(CpuUsed(type=RecordType.RUN, event=RunEvent.CPU, t=t0 + 62, rounds=flows * 2,
                                  harness_seconds=1.0, harness_per_round_ms=1.5, harness_startup_seconds=0.5,
                                  replicas_measured=["r1"],
                                  replica_seconds=3.0, replica_per_round_ms=5.0))
        journal.write(InvariantChecked(type=RecordType.INVARIANT, t=t0 + 63, invariant="no_double_release",
                                       checked=True, violations=0, detail=[]))
        journal.write(Reconciled(type=RecordType.RECONCILIATION, t=t0 + 63, client_rejections=len(rejections),
                                 logged=len(rejections), matched=len(rejections), unexplained=0, unmatched_logged=0,
                                 examples={}))
        if status is not None:
            journal.write(RunEnded(type=RecordType.RUN, event=RunEvent.END, t=t0 + 64, status=status, reason=None))
    return folder


def _flow(journal: Journal, flow_id: str, kind: str, start: float, calls: list[tuple[str, int]], latency) -> None:
    journal.write(FlowStarted(type=RecordType.START, t=start, flow_id=flow_id, flow=kind, scheduled=start,
                              late=False))
    t = start
    for tool, rounds in calls:
        for number in range(1, rounds + 1):
            seconds = latency()
            t += seconds
            journal.write(RoundDone(type=RecordType.ROUND, t=t, flow_id=flow_id, flow=kind, tool=tool, round=number,
                                    replica="r1", intended=t - seconds, sent=t - seconds, latency=seconds,
                                    server_time=seconds, outcome="complete" if number == rounds else "input_required",
                                    http_status=200, code=None))
    journal.write(FlowEnded(type=RecordType.FLOW, t=t, flow_id=flow_id, flow=kind, outcome=FlowOutcome.COMPLETED,
                            rounds=sum(rounds for _, rounds in calls), duration=t - start, server_time=t - start,
                            think_time=0.0, answers=["accept"], late=False,
                            calls=[CallSummary(tool=tool, rounds=rounds, outcome="complete")
                                   for tool, rounds in calls]))


def compare(baseline: Path, current: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "compare", str(baseline), str(current), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def metrics(folder: Path) -> dict[str, dict]:
    return {row["metric"]: row for row in json.loads((folder / "compare.json").read_text())["metrics"]}


# --- the command, on pairs of journals --------------------------------------------------------------


def test_an_identical_pair_passes_and_every_output_says_so(tmp_path):
    run = scenario()
    baseline = write_run(tmp_path / "base", run)
    current = write_run(tmp_path / "current", run)

    done = compare(baseline, current)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "no regression, exit code 0" in done.stdout
    assert SLOW_REFUND_P95 in done.stdout  # the table lists the metrics it compared
    document = json.loads((current / "compare.json").read_text())
    assert document["regressed"] is False and document["exit_code"] == 0
    by_metric = metrics(current)
    assert by_metric[SLOW_REFUND_P95]["change"] == 0
    assert {row["verdict"] for row in by_metric.values()} == {"pass"}
    assert {"cpu.harness_per_round_ms", "cpu.replica_per_round_ms", "flows_per_second"} <= by_metric.keys()


def test_rounds_slower_by_40_percent_fail_naming_the_metric_in_every_output(tmp_path):
    run = scenario()
    baseline = write_run(tmp_path / "base", run)
    current = write_run(tmp_path / "current", run, scale=1.4)  # the same samples, each 40% slower

    done = compare(baseline, current)

    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{SLOW_REFUND_P95}: worse by more than 25%, significant" in done.stdout
    slow = metrics(current)[SLOW_REFUND_P95]
    # the change of two p95s, each within 1% of the exact one
    assert slow["verdict"] == "regression" and slow["change"] == pytest.approx(0.4, abs=0.03)
    assert slow["p_value"] < 0.01 and slow["samples"] == [200, 200]
    assert metrics(current)["rejections"]["verdict"] == "pass"  # counts did not move
    suite = ET.parse(current / "compare-junit.xml").getroot().find("testsuite")
    failed = [case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None]
    assert SLOW_REFUND_P95 in failed
    assert len(list(suite.iter("testcase"))) == len(metrics(current))  # one case per metric
    assert int(suite.get("failures")) == len(json.loads((current / "compare.json").read_text())["regressions"])


def test_a_small_change_inside_the_tolerance_passes(tmp_path):
    run = scenario()
    baseline = write_run(tmp_path / "base", run, seed=1)
    current = write_run(tmp_path / "current", run, seed=2, scale=1.05)  # other noise, 5% slower

    done = compare(baseline, current)

    assert done.returncode == 0, done.stdout
    assert not [row for row in metrics(current).values() if row["verdict"] == "regression"]


def test_a_large_change_on_too_few_samples_is_not_significant_and_passes_saying_so(tmp_path):
    run = scenario()
    baseline = write_run(tmp_path / "base", run, flows=4)
    current = write_run(tmp_path / "current", run, flows=4, scale=2.0)  # twice as slow, on two rounds per key

    done = compare(baseline, current)

    assert done.returncode == 0, done.stdout
    slow = metrics(current)[SLOW_REFUND_P95]
    # the change of two p95s, each within 1% of the exact one
    assert slow["verdict"] == "not significant" and slow["change"] == pytest.approx(1.0, abs=0.04)
    assert "not significant" in done.stdout and "not significant on 2 and 2 samples" in slow["note"]


def test_one_extra_rejection_fails_exactly(tmp_path):
    run = scenario()
    baseline = write_run(tmp_path / "base", run, rejections=["expired"])
    current = write_run(tmp_path / "current", run, rejections=["expired", "expired"])

    done = compare(baseline, current)

    assert done.returncode == 1, done.stdout
    assert "rejections{reason='expired'}: 1 more than the baseline" in done.stdout
    row = metrics(current)["rejections{reason='expired'}"]
    assert (row["baseline"], row["current"], row["exact"]) == (1, 2, True)


def test_a_return_that_gained_a_round_fails_on_rounds_per_call(tmp_path):
    run = scenario()
    baseline = write_run(tmp_path / "base", run)
    current = write_run(tmp_path / "current", run, return_rounds=3)

    done = compare(baseline, current)

    assert done.returncode == 1
    assert metrics(current)["rounds_per_call{flow='return',tool='record_return'}.mean"]["verdict"] == "regression"
    gained = metrics(current)["round_duration{flow='return',tool='record_return',round='3'}.p95"]
    assert gained["verdict"] == "regression" and "no samples in the baseline" in gained["note"]


def test_the_scenario_table_sets_tolerances_and_the_command_line_overrides_them(tmp_path):
    lenient = scenario('[compare]\nround_duration = { p50 = "50%", p95 = "50%", p99 = "60%" }\n')
    baseline = write_run(tmp_path / "base", scenario())
    current = write_run(tmp_path / "current", lenient, scale=1.4)

    assert compare(baseline, current).returncode == 0  # 40% slower is inside the run's own 50%

    done = compare(baseline, current, "--tolerance", "round_duration.p95=20%", "--output", str(tmp_path / "out"))
    assert done.returncode == 1
    regressions = json.loads((tmp_path / "out" / "compare.json").read_text())["regressions"]
    assert SLOW_REFUND_P95 in regressions and all(metric.endswith(".p95") for metric in regressions)


def test_folders_that_are_not_results_exit_2(tmp_path):
    current = write_run(tmp_path / "current", scenario())
    (tmp_path / "empty").mkdir()

    for baseline in (tmp_path / "empty", tmp_path / "missing"):
        done = compare(baseline, current)
        assert done.returncode == 2
        assert "is not a results folder" in done.stderr
    assert not (current / "compare.json").exists()


def test_a_binary_journal_exits_2_naming_the_file(tmp_path):
    baseline = write_run(tmp_path / "base", scenario())
    current = write_run(tmp_path / "current", scenario())
    (current / "journal.jsonl").write_bytes(bytes(range(256)))

    done = compare(baseline, current)

    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"mrtr-harness compare: {current / 'journal.jsonl'} is not a journal: it is a "
                                   "binary file (NUL bytes in its first line)")


def test_a_bad_tolerance_exits_2_naming_the_keys(tmp_path):
    run = write_run(tmp_path / "run", scenario())
    done = compare(run, run, "--tolerance", "round_duration.p95=20")
    assert done.returncode == 2 and "percentage" in done.stderr
    done = compare(run, run, "--tolerance", "latency=20%")
    assert done.returncode == 2 and "round_duration.p95" in done.stderr


def test_different_scenarios_exit_2_unless_forced(tmp_path):
    baseline = write_run(tmp_path / "base", scenario())
    current = write_run(tmp_path / "current", scenario(text=SCENARIO.replace("arrival_rate = 5", "arrival_rate = 9")))

    done = compare(baseline, current)
    assert done.returncode == 2
    assert "different scenarios" in done.stderr and "load" in done.stderr and "--force" in done.stderr

    forced = compare(baseline, current, "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert json.loads((current / "compare.json").read_text())["scenario_differences"] == ["load"]


# --- what cannot be judged is not a pass -------------------------------------------------------------------


def _regressions(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The lines under `✗ N regressions`: one per regressed metric, `metric: why`."""
    return [line.strip().removeprefix("- ") for line in done.stdout.split("exit code 1:")[-1].splitlines()
            if line.strip().startswith("- ")]


@pytest.mark.parametrize(("status", "words"), [
    (None, "the current run did not complete: its journal has no `run end` record (killed, or cut short)"),
    (EndStatus.ABORTED, "the current run did not complete: its journal ends with status aborted"),
    (EndStatus.INTERRUPTED, "the current run did not complete: its journal ends with status interrupted")])
def test_a_current_run_that_did_not_complete_is_a_regression(tmp_path, status, words):
    baseline = write_run(tmp_path / "base", scenario())
    current = write_run(tmp_path / "current", scenario(), status=status)

    done = compare(baseline, current)

    assert done.returncode == 1, done.stdout + done.stderr
    assert _regressions(done) == [f"run_completed: {words}"]
    assert metrics(current)["run_completed"]["verdict"] == "regression"


@pytest.mark.parametrize("cut", ["empty", "a tenth"])
def test_an_empty_or_cut_current_journal_does_not_pass(tmp_path, cut):
    baseline = write_run(tmp_path / "base", scenario())
    current = write_run(tmp_path / "current", scenario())
    journal = current / "journal.jsonl"
    journal.write_bytes(b"" if cut == "empty" else journal.read_bytes()[:journal.stat().st_size // 10])

    done = compare(baseline, current)

    assert done.returncode == 1, done.stdout + done.stderr
    regressions = _regressions(done)
    assert regressions[0].startswith("run_completed: the current run did not complete")
    assert regressions[1].startswith("flows_finished: worse by more than 20%")
    assert metrics(current)[SLOW_REFUND_P95]["verdict"] == ("regression" if cut == "empty" else "pass")


def test_a_flow_tool_or_round_the_current_run_lost_is_a_regression(tmp_path):
    baseline = write_run(tmp_path / "base", scenario(), return_rounds=3)
    current = write_run(tmp_path / "current", scenario(), return_rounds=2)

    done = compare(baseline, current)

    assert done.returncode == 1
    assert ("round_duration{flow='return',tool='record_return',round='3'}.p95: no samples in the current run, and "
            "the baseline has them: the run lost this flow, tool or round") in _regressions(done)


def test_fewer_flows_finished_than_the_baseline_beyond_the_tolerance_is_a_regression(tmp_path):
    baseline = write_run(tmp_path / "base", scenario())
    assert compare(baseline, write_run(tmp_path / "a-few-fewer", scenario(), flows=285)).returncode == 0  # 5% fewer

    fewer = write_run(tmp_path / "fewer", scenario(), flows=200)  # a third fewer, in as long a run
    done = compare(baseline, fewer)
    assert done.returncode == 1
    row = metrics(fewer)["flows_finished"]
    assert (row["baseline"], row["current"], row["tolerance"], row["verdict"]) == (300, 200, 0.2, "regression")
    # the tolerance, from the command line or the run's [compare] table (flows/s falls as much: allowed too)
    allowed = ("--tolerance", "flows_finished=40%", "--tolerance", "flows_per_second=40%")
    assert compare(baseline, fewer, *allowed).returncode == 0
    lenient = write_run(tmp_path / "lenient", scenario('[compare]\nflows_finished = "40%"\n'
                                                       'flows_per_second = "40%"\n'), flows=200)
    assert compare(baseline, lenient).returncode == 0


@pytest.mark.parametrize(("status", "flows", "words"), [
    (None, 300, "did not complete (its journal has no `run end` record: killed, or cut short)"),
    (EndStatus.ERRORED, 300, "did not complete (status errored)"),
    (EndStatus.COMPLETED, 0, "finished no flows: there is nothing to compare with")])
def test_a_baseline_that_cannot_judge_anything_exits_2(tmp_path, status, flows, words):
    baseline = write_run(tmp_path / "base", scenario(), status=status, flows=flows)
    current = write_run(tmp_path / "current", scenario())

    done = compare(baseline, current)

    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().startswith(f"mrtr-harness compare: the baseline {baseline} {words}")
    assert not (current / "compare.json").exists()


def _damage(journal: Path, lines: int) -> None:
    """The journal's first `lines` flow records overwritten with bytes that are no JSON (a disk's damage)."""
    text = journal.read_bytes().splitlines(keepends=True)
    flows = [n for n, line in enumerate(text) if line.startswith(b'{"type":"flow"')][:lines]
    for n in flows:
        text[n] = b"\x00" * (len(text[n]) - 1) + b"\n"
    journal.write_bytes(b"".join(text))


def test_a_damaged_current_journal_is_a_regression_and_a_damaged_baseline_a_warning(tmp_path):
    baseline = write_run(tmp_path / "base", scenario())
    current = write_run(tmp_path / "current", scenario())
    _damage(current / "journal.jsonl", 3)

    done = compare(baseline, current)

    assert done.returncode == 1, done.stdout
    assert _regressions(done) == ["journal_unreadable: the current run's journal is damaged: 3 lines could not be "
                                  "read, so its figures are incomplete"]

    done = compare(current, baseline)  # the damaged one as the baseline: judged by what could be read, said so
    assert f"warning: the baseline {current}'s journal is damaged: 3 lines could not be read" in done.stderr


def test_a_run_compared_with_itself_warns_and_still_runs(tmp_path):
    run = write_run(tmp_path / "run", scenario())
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)

    for other, words in ((run, f"the baseline and the current run are the same folder ({run})"),
                         (copy, f"the baseline {run} and the current run {copy} have the same journal")):
        done = compare(run, other)
        assert done.returncode == 0, done.stderr
        assert f"mrtr-harness compare: warning: {words}" in done.stderr
        assert json.loads((other / "compare.json").read_text())["warnings"][0].startswith(words)


def test_an_output_folder_that_cannot_be_written_exits_2_naming_it(tmp_path):
    run = write_run(tmp_path / "run", scenario())
    (tmp_path / "somefile").write_text("not a folder")
    output = tmp_path / "somefile" / "sub"

    done = compare(run, run, "--output", str(output))

    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"mrtr-harness compare: cannot write the comparison into {output}: a part of that path is a file, not a folder"]


def test_cpu_is_compared_only_when_both_runs_measured_it(tmp_path):
    baseline = write_run(tmp_path / "base", scenario(), cpu=False)
    current = write_run(tmp_path / "current", scenario())

    assert compare(baseline, current).returncode == 0
    assert not [metric for metric in metrics(current) if metric.startswith("cpu.")]


def test_compare_html_draws_both_runs_per_round_and_needs_no_network(tmp_path):
    run = scenario()
    baseline = write_run(tmp_path / "base", run)
    current = write_run(tmp_path / "current", run, scale=1.4)
    compare(baseline, current)

    page = (current / "compare.html").read_text()
    collector = _Tags()
    collector.feed(page)
    round_keys = {(m.split("'")[1], m.split("'")[3], m.split("'")[5]) for m in metrics(current)
                  if m.startswith("round_duration")}
    latency_charts = [title for title in collector.titles if "latency by percentile" in title]
    assert len(latency_charts) == len(round_keys) == 5  # refund: quote r1, issue r1-2; return: r1-2
    assert page.count("<title>baseline</title>") >= len(round_keys)  # both runs on every chart
    assert page.count("<title>current</title>") >= len(round_keys)
    assert "script" not in collector.tags and not collector.links
    assert SLOW_REFUND_P95 in unescape(page) and "regression" in page



def test_compare_html_puts_the_verdict_and_the_regressions_first_each_regressed_distribution_drawn(tmp_path):
    """A 60-row table is not where a person starts: the verdict, the regressed rows alone, and each regressed
    round's latency curve, baseline against current, come before every metric's row and the other charts."""
    run = scenario()
    baseline = write_run(tmp_path / "base", run)
    current = write_run(tmp_path / "current", run, scale=1.4)
    compare(baseline, current)

    page = unescape((current / "compare.html").read_text())
    first, rest = page.split("<h2>Every metric</h2>")
    assert "<h2>Regressions</h2>" in first
    assert first.index('<p class="regression">') < first.index("<h2>Regressions</h2>")  # the verdict first
    rows = metrics(current)
    regressed = {name for name, row in rows.items() if row["verdict"] == "regression"}
    assert SLOW_REFUND_P95 in regressed and regressed < set(rows)
    for name in rows:  # the regressed rows, and no other, before every metric's table
        assert (f"<td>{name}</td>" in first) == (name in regressed), name
    keys = {(m.split("'")[1], m.split("'")[3], m.split("'")[5]) for m in regressed if m.startswith("round_duration")}
    drawn = [title for title in _titles(first) if "latency by percentile" in title]
    assert sorted(drawn) == sorted(f"{flow} / {tool} / round {n}: latency by percentile" for flow, tool, n in keys)
    assert not [title for title in _titles(rest) if title in drawn]  # each drawn once


def _titles(html: str) -> list[str]:
    collector = _Tags()
    collector.feed(html)
    return collector.titles


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.titles: list[str] = []
        self.links: list[str] = []
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self._in_title = tag == "title"
        self.links += [value for name, value in attrs if name in ("href", "src") and value]

    def handle_data(self, data):
        if self._in_title:
            self.titles.append(data)

    def handle_endtag(self, tag):
        self._in_title = False


# --- the pieces ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n_baseline", "n_current", "shift", "whole"),
                         [(300, 300, 1.4, False), (3, 3, 2.0, False), (50, 80, 1.0, True), (200, 150, 1.05, False),
                          (10, 12, 1.0, True), (1, 1, 2.0, False)])
def test_the_u_test_agrees_with_scipy(n_baseline, n_current, shift, whole):
    draw = random.Random(n_baseline * 1000 + n_current)
    baseline = [draw.lognormvariate(0, 0.5) for _ in range(n_baseline)]
    current = [draw.lognormvariate(0, 0.5) * shift for _ in range(n_current)]
    if whole:  # rounds per call: small integers, many ties
        baseline, current = [round(v * 2) for v in baseline], [round(v * 2) for v in current]

    ours = mann_whitney_greater(baseline, current)
    reference = mannwhitneyu(current, baseline, alternative="greater", method="asymptotic")

    assert ours.u == reference.statistic
    assert ours.p_value == pytest.approx(reference.pvalue, rel=1e-9)


def test_the_u_test_finds_no_evidence_without_samples_or_with_every_value_tied():
    assert mann_whitney_greater([], [1.0, 2.0]).p_value == 1.0
    assert mann_whitney_greater([2.0, 2.0], [2.0, 2.0, 2.0]).p_value == 1.0


def test_tolerances_read_as_percentages_and_a_bad_one_is_named_with_its_line():
    settings = settle(CompareSettings(), ["round_duration.p95=20%", "completed_ratio=2.5%"], significance=0.05)
    assert (settings.round_duration.p95, settings.completed_ratio, settings.significance) == (0.2, 0.025, 0.05)
    with pytest.raises(ToleranceError, match="round_duration.p99"):
        settle(CompareSettings(), ["round_duration.p99=lots"])
    with pytest.raises(ScenarioError, match=r"<scenario>:\d+: compare.round_duration.p95: a tolerance is a percentage"):
        scenario('[compare]\nround_duration.p95 = "20"\n')
    written = scenario('[compare]\nround_duration.p95 = "20%"\n')
    assert Scenario.model_validate_json(written.model_dump_json()).compare == written.compare  # as results keep it


def test_the_help_lists_exactly_the_keys_tolerance_takes():
    """--help lists `harness.vocabulary`'s keys, --tolerance takes the [compare] table's leaves: the same, or the
    help would show a key that cannot be set (or hide one that can)."""
    parser = argparse.ArgumentParser()
    add_tolerance_options(parser)
    shown = " ".join(parser.format_help().split()).split("keys: ", 1)[1].split(" (repeatable)", 1)[0]
    assert shown.split(", ") == tolerance_keys()


# --- run --baseline -------------------------------------------------------------------------------------


def test_run_with_a_baseline_that_is_not_results_exits_2_and_starts_nothing(tmp_path):
    (tmp_path / "nothing").mkdir()
    done = run_harness(ROOT / "scenarios" / "smoke.toml", tmp_path / "results", "--baseline", str(tmp_path / "nothing"),
                       timeout=60)
    assert done.code == 2 and "is not a results folder" in done.output
    assert done.folder is None


def test_run_with_a_baseline_of_another_scenario_exits_2_and_starts_nothing(tmp_path):
    other = write_run(tmp_path / "base", scenario())
    done = run_harness(ROOT / "scenarios" / "smoke.toml", tmp_path / "results", "--baseline", str(other), timeout=60)
    assert done.code == 2 and "different scenarios" in done.output
    assert done.folder is None
    # It names what works: `run` refuses --force (a gate compares like with like); `compare --force` takes it.
    assert "mrtr-harness compare --force BASELINE RESULTS" in done.output
    assert "--force compares them anyway" not in done.output
    refused = run_harness(ROOT / "scenarios" / "smoke.toml", tmp_path / "forced", "--baseline", str(other), "--force",
                          timeout=60)
    assert refused.code == 2 and "unrecognized arguments: --force" in refused.output


def test_run_with_a_bad_tolerance_exits_2_before_the_run_not_after_it(tmp_path):
    smoke = ROOT / "scenarios" / "smoke.toml"
    baseline = write_run(tmp_path / "base", load_scenario(smoke), flows=3)
    done = run_harness(smoke, tmp_path / "results", "--baseline", str(baseline), "--tolerance",
                       "round_duration.p95=lots", timeout=60)
    assert done.code == 2 and "a tolerance is a percentage" in done.output
    assert done.folder is None
    done = run_harness(smoke, tmp_path / "results", "--tolerance", "round_duration.p95=20%", timeout=60)
    assert done.code == 2 and "need --baseline" in done.output
    assert done.folder is None


def test_run_with_a_baseline_that_did_not_complete_exits_2_and_starts_nothing(tmp_path):
    smoke = ROOT / "scenarios" / "smoke.toml"
    baseline = write_run(tmp_path / "base", load_scenario(smoke), flows=3, status=None)
    done = run_harness(smoke, tmp_path / "results", "--baseline", str(baseline), timeout=60)
    assert done.code == 2 and f"--baseline {baseline}: the baseline {baseline} did not complete" in done.output
    assert done.folder is None


def test_run_baseline_folds_a_regression_into_a_passing_run(tmp_path):
    """A real run of a scenario with no timing threshold (it passes), against a baseline whose rounds took
    0.1 ms each: the run is far slower than that on any machine, so the comparison fails it."""
    path = _quick_scenario(tmp_path)
    as_run = load_scenario(path, {"duration": "6s"})
    baseline = tmp_path / "baseline"
    write_run(baseline, as_run, flows=300, scale=0.01)  # the shop's own refund and return flows and tools

    done = run_harness(path, tmp_path / "results", "--duration", "6s", "--baseline", str(baseline))

    assert done.folder is not None, done.output
    folded = done.summary["compare"]
    assert folded["run_exit_code"] == 0, done.output  # the run itself passed ...
    assert done.code == 1, done.output  # ... and the comparison failed it
    assert folded["regressed"] is True and folded["exit_code"] == 1
    assert any(metric.startswith("round_duration{flow='refund'") for metric in folded["regressions"])
    assert (done.folder / "compare.json").is_file() and (done.folder / "compare-junit.xml").is_file()
    assert (done.folder / "compare.html").is_file()

    rebuilt = subprocess.run([sys.executable, "-m", "harness", "report", str(done.folder)], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    assert rebuilt.returncode == 1, rebuilt.stderr  # the rebuild keeps the regression's verdict ...
    summary = json.loads((done.folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["compare"] == folded  # ... and the comparison in summary.json



def _quick_scenario(tmp_path: Path, expect: str = 'invariant_violations = "== 0"') -> Path:
    """The smoke scenario with only the thresholds given (no timing threshold: it passes on any machine)."""
    path = tmp_path / "quick.toml"
    path.write_text((ROOT / "scenarios" / "smoke.toml").read_text().split("[expect]")[0]
                    + f"[expect]\n{expect}\n", encoding="utf-8")
    return path


def test_night_one_becomes_the_baseline_night_two_compares_with_it_and_no_baseline_fails_closed(tmp_path):
    """The guide's order: night one with --first-baseline keeps its run as the baseline; night two, the same
    command without the flag, is compared with it; a night whose baseline is missing exits 2 naming the flag."""
    path = _quick_scenario(tmp_path)
    baseline = tmp_path / "baseline"

    one = run_harness(path, tmp_path / "one", "--duration", "4s", "--baseline", str(baseline), "--first-baseline")

    assert one.code == 0, one.output
    assert "compare" not in one.summary and not (one.folder / "compare.json").exists()  # nothing to compare yet
    assert json.loads((baseline / "summary.json").read_text()) == one.summary  # the run itself, kept
    assert (baseline / "journal.jsonl").read_bytes() == (one.folder / "journal.jsonl").read_bytes()

    two = run_harness(path, tmp_path / "two", "--duration", "4s", "--baseline", str(baseline))

    assert two.folder is not None, two.output
    assert two.summary["compare"]["baseline"] == str(baseline) and two.summary["compare"]["run_exit_code"] == 0
    night_one_flows = read_results(one.folder).samples.flows_finished
    assert night_one_flows > 0 and metrics(two.folder)["flows_finished"]["baseline"] == night_one_flows
    assert two.code == two.summary["compare"]["exit_code"], two.output  # passed or regressed: judged either way

    again = run_harness(path, tmp_path / "three", "--baseline", str(baseline), "--first-baseline", timeout=60)
    assert again.code == 2 and "drop --first-baseline" in again.output and again.folder is None

    missing = run_harness(path, tmp_path / "four", "--baseline", str(tmp_path / "no-such"), timeout=60)
    assert missing.code == 2 and again.folder is None
    assert missing.output.strip().splitlines()[-1] == (f"mrtr-harness run: --baseline {tmp_path / 'no-such'} does not "
                                                       "exist: with no baseline yet, add --first-baseline and this "
                                                       "run becomes it")


def test_a_first_night_that_fails_is_not_kept_as_the_baseline(tmp_path):
    path = _quick_scenario(tmp_path, 'completed_ratio = "> 1"')  # no run completes more than all its flows
    baseline = tmp_path / "baseline"

    done = run_harness(path, tmp_path / "results", "--duration", "3s", "--baseline", str(baseline),
                       "--first-baseline")

    assert done.code == 1, done.output
    assert not baseline.exists() and "not kept as the baseline" in done.output


def test_first_baseline_needs_a_baseline_folder_apart_from_the_results(tmp_path):
    smoke = ROOT / "scenarios" / "smoke.toml"
    done = run_harness(smoke, tmp_path / "results", "--first-baseline", timeout=60)
    assert done.code == 2 and "--first-baseline needs --baseline DIR" in done.output and done.folder is None
    done = run_harness(smoke, tmp_path / "results", "--baseline", str(tmp_path), "--first-baseline", timeout=60)
    assert done.code == 2 and "would hold the --results folder" in done.output and done.folder is None


# --- the nightly CI example and its guide -----------------------------------------------------------------


def _guide() -> str:
    return (ROOT / "docs" / "nightly-ci.md").read_text(encoding="utf-8")


def _blocks(section: str, language: str) -> list[str]:
    parts = section.split(f"```{language}\n")[1:]
    return [part.split("```")[0] for part in parts]


def _workflow() -> dict:
    return yaml.safe_load((ROOT / "docs" / "ci" / "nightly.yml").read_text(encoding="utf-8"))


def _run_lines(job: dict) -> list[str]:
    return [line.strip() for step in job["steps"] for line in step.get("run", "").splitlines()]


def _guide_commands() -> tuple[str, str, str, list[str]]:
    """The guide's sh blocks in order: install, night one, later nights, promoting (its lines)."""
    install, night_one, later, promote = ([line.strip() for line in block.splitlines() if line.strip()]
                                          for block in _blocks(_guide(), "sh")[:4])
    return install[0], night_one[0], later[0], promote


def _run_step_script(script: str, folder: Path, env: dict[str, str], exit_code: int = 0) -> list[list[str]]:
    """A workflow step's shell, run by bash in `folder` with a stub `mrtr-harness` (from `.venv/bin/activate`)
    that records its arguments and exits `exit_code`: what the step would run, without running it."""
    activate = folder / ".venv" / "bin" / "activate"
    activate.parent.mkdir(parents=True, exist_ok=True)
    activate.write_text(f'mrtr-harness() {{ printf "%s\\0" "$@" >> calls; printf "\\n" >> calls; '
                        f'return {exit_code}; }}\n', encoding="utf-8")
    subprocess.run(["bash", "-c", script], cwd=folder, env={"PATH": "/usr/bin:/bin", **env}, timeout=30)
    calls = (folder / "calls").read_text() if (folder / "calls").exists() else ""
    return [[part for part in line.split("\0") if part] for line in calls.splitlines()]


def test_the_nightly_workflow_is_valid_yaml_and_runs_the_guides_commands():
    workflow = _workflow()
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert triggers["schedule"][0]["cron"].split()[2:] == ["*", "*", "*"]  # every night
    nightly, promote = workflow["jobs"]["nightly"], workflow["jobs"]["promote"]

    install, night_one, later, promoting = _guide_commands()
    assert "pip install -e '.[test]'" in install and install in _run_lines(nightly) and install in _run_lines(promote)
    assert night_one == later + " --first-baseline" and later.endswith("--baseline baseline")
    assert night_one in _run_lines(nightly) and later in _run_lines(nightly)
    assert (ROOT / later.split("mrtr-harness run ")[1].split()[0]).is_file()
    assert any("mrtr-harness report" in line and "cp -r" in line for line in promoting)  # checked, then copied
    assert any("mrtr-harness report" in line and "cp -r" in line for line in _run_lines(promote))

    uploads = [step for step in nightly["steps"] if step.get("uses", "").startswith("actions/upload-artifact@")]
    uploaded = "\n".join(step["with"]["path"] for step in uploads)
    assert all(step.get("if") == "always()" for step in uploads)  # a failing night still leaves its results
    assert "results/" in uploaded and "junit.xml" in uploaded and "compare-junit.xml" in uploaded
    downloaded = next(step for step in promote["steps"] if step.get("uses", "").startswith("actions/download-"))
    assert downloaded["with"]["name"] == uploads[0]["with"]["name"].replace("github.run_id", "inputs.promote")


def test_the_nightly_workflow_fails_closed_and_saves_a_baseline_only_on_purpose(tmp_path):
    """A scheduled night restores the baseline or fails, runs `run --baseline` without the first-night flag (so
    `run` itself exits 2 on a missing baseline), and saves nothing; only night one (an input) and a promotion
    (another input, a run that `report` says passed) save a baseline."""
    workflow = _workflow()
    inputs = workflow.get("on", workflow.get(True))["workflow_dispatch"]["inputs"]
    assert inputs["first_baseline"]["type"] == "boolean" and inputs["first_baseline"]["default"] is False
    nightly, promote = workflow["jobs"]["nightly"], workflow["jobs"]["promote"]
    assert (nightly["if"], promote["if"]) == ("${{ !inputs.promote }}", "${{ inputs.promote }}")

    def uses(job: dict, action: str) -> list[dict]:
        return [step for step in job["steps"] if step.get("uses", "").startswith(f"actions/{action}@")]

    restore, = uses(nightly, "cache/restore")
    assert restore["with"]["fail-on-cache-miss"] is True and restore["if"] == "${{ !inputs.first_baseline }}"
    saved, = uses(nightly, "cache/save")
    assert saved["if"] == "${{ success() && inputs.first_baseline }}" and saved["with"]["path"] == "baseline"
    assert restore["with"]["restore-keys"] in saved["with"]["key"]
    promoted, = uses(promote, "cache/save")
    assert promoted["with"] == saved["with"] and "if" not in promoted  # after the check step passed
    assert not any("baseline" in line for line in _run_lines(nightly) if "cp " in line or "mv " in line)

    step = next(step for step in nightly["steps"] if "mrtr-harness run" in step.get("run", ""))
    variable = next(iter(step["env"]))
    assert step["env"][variable] == "${{ inputs.first_baseline }}"
    for value, first in (("", False), ("false", False), ("true", True)):  # a schedule has no inputs: ""
        folder = tmp_path / f"night-{value or 'scheduled'}"
        folder.mkdir()
        (called,) = _run_step_script(step["run"], folder, {variable: value})
        args = build_parser().parse_args(called)
        assert (args.command, args.baseline, args.first_baseline) == ("run", Path("baseline"), first), called

    check = next(step for step in promote["steps"] if "mrtr-harness report" in step.get("run", ""))
    for passed in (True, False):
        folder = tmp_path / f"promote-{passed}"
        night = folder / "chosen" / "20261201T021700Z-nightly"
        night.mkdir(parents=True)
        (night / "journal.jsonl").write_text("{}\n", encoding="utf-8")
        (called,) = _run_step_script(check["run"], folder, {}, exit_code=0 if passed else 1)
        assert called == ["report", "chosen/20261201T021700Z-nightly"]
        assert (folder / "baseline" / "journal.jsonl").is_file() is passed  # a night that did not pass is not pinned


def test_the_guides_compare_table_is_the_defaults():
    table = _blocks(_guide(), "toml")[0]
    assert scenario(table).compare == CompareSettings()
