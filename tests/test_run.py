"""`mrtr-harness run` end to end: verdicts, exit codes, results, interruption, and counts that agree."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.config.disk import rounds_bound
from harness.config.durations import format_duration
from harness.config.scenario import load_scenario
from harness.journal.writer import read_journal
from harness.processes.children import alive
from tests.harness_run import ROOT, SCENARIOS, imported_modules, key_files, run_harness, valid_summary
from tests.services import sigint_default

SMOKE = SCENARIOS / "smoke.toml"


SERVER_PACKAGES = {"mcp", "mcp_types", "starlette", "uvicorn", "sse_starlette"}
"""What serves MCP (the SDK, its types' pydantic models) or a replica's HTTP: never imported by the load process.
(Locust's own web UI, flask, comes with `import locust` itself.)"""
SHOP_MODULES_A_RUN_MAY_IMPORT = {"harness.shop", "harness.shop.orders", "harness.shop.replica",
                                 "harness.shop.authserver"}
"""The orders its flows pick from, and the command-line options of a replica and of the authorization server (the
CLI's `shop replica` and `shop auth-server`; neither imports its server until it serves)."""


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke scenario as a user runs it, for half its duration (its every part still runs: the flows, the
    leads, the end and every result), read by the tests below."""
    return run_harness(SMOKE, tmp_path_factory.mktemp("smoke"), "--duration", "15s",
                       python_options=("-X", "importtime"))


def test_smoke_passes_and_leaves_every_result(smoke):
    assert smoke.code == 0, smoke.output
    assert smoke.summary["status"] == "completed"
    for name in ("journal.jsonl", "summary.json", "junit.xml", "report.html", "scenario.toml", "scenario.json",
                 "locust_stats.json", "metrics.prom"):
        assert (smoke.folder / name).stat().st_size > 0, name
    assert "✓ status completed, exit code 0" in smoke.output


def test_the_run_s_own_process_imports_no_server_code(smoke):
    """Start-up is a load process's fixed cost (`benchmarks/startup.py`): the run imports Locust and its own
    code, never the SDK's server side or a web server, even while it starts the embedded shop's replicas."""
    imported = imported_modules(smoke.output)
    assert {"locust", "harness.run.run", "harness.shop.orders"} <= imported, sorted(imported)[:20]
    assert not {name for name in imported if name.split(".")[0] in SERVER_PACKAGES}
    assert {name for name in imported if name.split(".")[:2] == ["harness", "shop"]} <= SHOP_MODULES_A_RUN_MAY_IMPORT


def test_the_results_folder_keeps_no_key(smoke):
    """The replicas' ring files are deleted when the target stops: fingerprints only stay."""
    assert smoke.folder is not None and (smoke.folder / "target").is_dir()
    assert not key_files(smoke.folder), key_files(smoke.folder)


def test_locust_the_metrics_and_the_journal_count_the_same_rounds(smoke):
    import json

    journal = smoke.journal()
    rounds = [record for record in journal if record["type"] == "round"]
    stats = json.loads((smoke.folder / "locust_stats.json").read_text())
    locust_requests = sum(entry["num_requests"] for entry in stats)
    prom = (smoke.folder / "metrics.prom").read_text()
    metric_rounds = sum(float(m) for m in re.findall(r"^mrtr_round_duration_seconds_count\{[^}]*\} (\S+)$", prom,
                                                     re.M))
    started = sum(float(m) for m in re.findall(r"^mrtr_flows_started_total\{[^}]*\} (\S+)$", prom, re.M))
    finished = sum(float(m) for m in re.findall(r"^mrtr_flows_finished_total\{[^}]*\} (\S+)$", prom, re.M))
    assert len(rounds) > 20
    assert locust_requests == len(rounds) == metric_rounds
    flows = [record for record in journal if record["type"] == "flow"]
    assert started == finished == len(flows) == len([r for r in journal if r["type"] == "start"])


def test_locust_rows_are_tool_rounds_sized_by_the_answers_and_the_reports_size_the_request_states(smoke):
    """Locust's rows read `issue_refund round 2` (`r2` names a replica everywhere else), with the answers' bytes as
    their sizes; summary.json and report.html give the size of every request state a round's answer carried."""
    import json
    from collections import defaultdict

    rounds = [record for record in smoke.journal() if record["type"] == "round"]
    stats = json.loads((smoke.folder / "locust_stats.json").read_text())
    assert {entry["name"] for entry in stats} == {
        f"{r['tool']} round {r['round'] if r['round'] < 10 else '10+'}" for r in rounds}
    assert any(entry["name"].endswith(" round 2") for entry in stats)
    for entry in stats:
        assert entry["total_content_length"] > 0, entry  # "Average size (bytes)" was 0 on every row
    states: dict[tuple[str, str], list[int]] = defaultdict(list)
    for record in rounds:
        if record["outcome"] == "input_required":  # the shop seals a state into every question it asks
            states[(record["flow"], str(record["round"]))].append(record["state_bytes"])
    assert states, "the smoke's leads are asked"
    summary = smoke.summary["request_state_bytes"]
    assert {(flow, number) for flow, by_round in summary.items() for number in by_round} == set(states)
    for (flow, number), sizes in states.items():
        spread = summary[flow][number]
        assert (spread["count"], spread["max"]) == (len(sizes), max(sizes)), (flow, number)
        assert min(sizes) <= spread["p50"] <= max(sizes) and min(sizes) > 50
    page = report_text(smoke.folder / "report.html")
    flow, number = min(states)
    assert "requestState (bytes)" in page
    assert f"p50 {summary[flow][number]['p50']:g}, max {max(states[(flow, number)])}" in page


def test_every_round_names_the_replica_that_served_it(smoke):
    replicas = {record["replica"] for record in smoke.journal() if record["type"] == "round"}
    assert replicas == {"r1", "r2", "r3"}


def test_no_flow_of_the_run_sends_more_rounds_than_the_disk_estimate_bounds_its_kind_by(smoke):
    """`validate`'s disk warning counts each kind's most rounds (`harness.config.disk`): a real run stays within."""
    scenario = load_scenario(SMOKE)
    kinds = {flow.kind: flow for flow in scenario.flows}
    flows = [record for record in smoke.journal() if record["type"] == "flow"]
    assert {record["flow"] for record in flows} == set(kinds), "every kind ran"
    for record in flows:
        assert record["rounds"] <= rounds_bound(kinds[record["flow"]], scenario.target), record


def test_the_same_seed_gives_the_same_flows_and_answers(smoke, tmp_path):
    """Same seed, same plan and same decisions; only URL mode's re-asks are a race with the clock.

    A payout's lead accepts, then finishes on the provider's page a modelled while later; the
    retry that reaches the server before the page is finished is asked again. How many times
    that happens depends on the machine's timing, not on the seed, so for payouts the decisions
    are compared as far as both runs got, and the outcomes only when they got equally far.
    """
    again = run_harness(SMOKE, tmp_path, "--duration", "10s")  # the first flows of the same plan

    def plan(finished):
        records = finished.journal()
        starts = {r["flow_id"]: r["flow"] for r in records if r["type"] == "start"}
        ends = {r["flow_id"]: r for r in records if r["type"] == "flow" and r["outcome"] != "interrupted"}
        return starts, ends

    first_starts, first_ends = plan(smoke)
    second_starts, second_ends = plan(again)
    common = sorted(set(first_starts) & set(second_starts))
    assert len(common) > 20
    assert [first_starts[f] for f in common] == [second_starts[f] for f in common]
    both = sorted(set(first_ends) & set(second_ends))
    assert len(both) > 20
    for flow_id in both:
        first, second = first_ends[flow_id], second_ends[flow_id]
        assert first.get("order_id") == second.get("order_id"), flow_id
        shorter = min(len(first["answers"]), len(second["answers"]))
        assert first["answers"][:shorter] == second["answers"][:shorter], flow_id
        if first["flow"] != "payout" or len(first["answers"]) == len(second["answers"]):
            assert (first["outcome"], first["answers"]) == (second["outcome"], second["answers"]), flow_id


def test_nightly_passes(tmp_path):
    finished = run_harness(SCENARIOS / "nightly.toml", tmp_path, timeout=240)
    assert finished.code == 0, finished.output
    actions = [r["action"] for r in finished.journal() if r["type"] == "chaos" and r["phase"] == "end"]
    assert actions[:2] == ["rolling-restart", "rotate-keys"]
    # each probe of the hypothesis names the window it judged; chaos details read as sentences
    windows = re.findall(r"✓ steady state (before|during|after) chaos \(flows that ended (\d+\.\d)s–(\d+\.\d)s\)",
                         finished.output)
    assert {phase for phase, _, _ in windows} >= {"during", "after"}, finished.output
    # the chaos starts at 5 s, or as soon after as a busy machine wakes it: never before
    assert all(float(start) >= 5.0 for phase, start, _ in windows if phase == "during"), finished.output
    assert all(float(start) <= float(end) for _, start, end in windows)
    page = report_text(finished.folder / "report.html")
    assert re.search(r"rolling-restart all [\d.]+ [\d.]+ serving again after [\d.]+m?s, [\d.]+m?s, [\d.]+m?s", page)
    assert re.search(r"new key [0-9a-f]+; add-key on r1,r2,r3, then promote-key on r1,r2,r3, then retire-key on "
                     r"r1,r2,r3", page), page
    assert "{'" not in page and "['" not in page  # no Python repr reaches a reader


def report_text(path) -> str:
    """report.html as a reader sees it: the text of its tables, without the charts and the page's script."""
    import html

    page = re.sub(r"<(script|style|svg)\b.*?</\1>", "", path.read_text(), flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def test_the_verdict_reads_like_a_person_wrote_it(smoke):
    """Ratios to three places and durations with units, in the terminal and report.html; a ratio threshold
    says `ratio`; the smoke run's expected declines are shown apart from errors and not counted as them."""
    table = smoke.output[smoke.output.index("█ THRESHOLDS"):]
    assert re.search(r"✓ '>= 0\.800' ratio=0\.\d{3}$", table, re.MULTILINE), table
    assert re.search(r"✓ 'p\(95\) < 1s' p\(95\)=\d+(\.\d+)?ms$", table, re.MULTILINE), table
    assert not re.search(r"\d\.\d{4,}", table), table
    assert [format_duration(t) for t in (5.00176, 12.345, 0.25)] == ["5s", "12.3s", "0.25s"]  # the progress line's
    page = report_text(smoke.folder / "report.html")
    assert not re.search(r"\d\.\d{4,}", page), re.findall(r".{40}\d\.\d{4,}.{20}", page)
    assert "completed_ratio >= 0.800 ratio=0." in page
    ratio = next(t for t in smoke.summary["thresholds"] if t["threshold"] == "completed_ratio")
    assert ratio["condition"] == "ratio >= 0.8" and ratio["aggregate"] == "ratio"
    # declines: a tool error answering the person's decline is an expected answer, not an error
    refunds = smoke.summary["flows"]["by_flow"]["refund"]
    answered = refunds.get("declined", 0) + refunds.get("cancelled", 0)
    answers = smoke.summary["expected_answers"]
    assert answered > 0 and sum(group["count"] for group in answers if group["flow"] == "refund") == answered
    assert all("Nobody confirmed refund" not in group["message"] for group in smoke.summary["top_errors"])
    assert any("Nobody confirmed refund" in group["message"] for group in answers)
    expected = [r for r in smoke.journal() if r["type"] == "round" and "expected" in r]
    assert expected and all(r["code"] is None and "error" not in r for r in expected)
    top = smoke.output[smoke.output.index("EXPECTED ANSWERS"):]
    assert "Nobody confirmed refund" in top
    assert "Expected answers" in page


OUTLASTING_CHAOS = """
name = "outlasting-chaos"
seed = 5
duration = "3s"
time_scale = 60
grace = "2s"
chaos_overrun = "4s"

[target]
replicas = 2
ttl = "10m"

[load]
arrival_rate = 4

[[flows]]
kind = "refund"

[leads]
think = { dist = "constant", value = "6s" }

[[chaos]]
at = "1s"
action = "pause"
replica = 1
duration = "4s"             # ends about 2 s after the load was due to stop: the load goes on for it

[[chaos]]
at = "2s"
action = "pause"
replica = 2
duration = "30s"            # starts late, outlasts chaos_overrun: cut short

[[chaos]]
at = "3s"
action = "restart"
replica = 1                 # its turn never comes

[expect]
chaos_failures = "== 0"
"""


def test_the_load_runs_on_for_a_chaos_action_and_what_outlasts_chaos_overrun_fails_by_name(tmp_path):
    scenario = tmp_path / "outlasting.toml"
    scenario.write_text(OUTLASTING_CHAOS)
    finished = run_harness(scenario, tmp_path / "results", timeout=120)
    assert finished.code == 1, finished.output
    journal = finished.journal()
    started = next(r["t"] for r in journal if r["type"] == "run" and r["event"] == "start")
    ends = [(r["action"], r["target"], r["ok"], r["error"]) for r in journal
            if r["type"] == "chaos" and r["phase"] == "end" and r["action"] != "rollback"]
    assert [end[:3] for end in ends] == [("pause", "r1", True), ("pause", "r2", False), ("restart", "r1", False)]
    assert ends[1][3].startswith("cut short") and ends[2][3].startswith("not run"), ends
    events = [r for r in journal if r["type"] == "run"]
    assert [r["action"] for r in events if r["event"] == "load-extended"] == ["pause"]
    stopped = next(r for r in events if r["event"] == "load-stopped")
    assert stopped["reason"].startswith("chaos_overrun reached")
    first_pause_end = next(r["t"] for r in journal if r["type"] == "chaos" and r["phase"] == "end")
    assert stopped["t"] >= first_pause_end > started + 3  # the load was still on when the first pause ended
    failed = [t for t in finished.summary["thresholds"] if not t["passed"]]
    assert [(t["threshold"], t["observed"]) for t in failed] == [("chaos_failures", 2)]
    assert "✗ pause r2" in finished.output and "cut short" in finished.output
    assert "✗ restart r1" in finished.output and "not run" in finished.output
    assert "still running at the end of the load" in finished.output


def test_a_failed_threshold_exits_1_and_is_named(tmp_path):
    scenario = tmp_path / "strict.toml"
    scenario.write_text(SMOKE.read_text().replace('completed_ratio = ">= 0.8"', 'flows_started = "> 100000"'))
    finished = run_harness(scenario, tmp_path / "results", "--duration", "4s")
    assert finished.code == 1
    failed = [t for t in finished.summary["thresholds"] if not t["passed"]]
    assert [t["threshold"] for t in failed] == ["flows_started"]
    assert "flows_started" in (finished.folder / "junit.xml").read_text()
    assert "✗" in finished.output and "flows_started" in finished.output


@pytest.mark.parametrize("edit, message", [
    (('arrival_rate = 4', 'arrival_rate = -4'), "load.arrival_rate: must be above 0, not -4"),
    (('kind = "payout"', 'kind = "paypal"'), "flows[3]"),
    (('"round_duration" = "p(95) < 1s"', '"round_duration" = "< 1s"'), "name an aggregate"),
    (('[load]', '[load'), "not valid TOML"),
])
def test_a_broken_scenario_exits_2_with_a_useful_message_and_starts_nothing(tmp_path, edit, message):
    scenario = tmp_path / "broken.toml"
    scenario.write_text(SMOKE.read_text().replace(*edit))
    results = tmp_path / "results"
    finished = run_harness(scenario, results)
    assert finished.code == 2
    assert message in finished.output
    assert "Traceback" not in finished.output
    assert not results.exists() or not any(results.iterdir())


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_and_sigterm_exit_130_with_results_marked_interrupted_and_no_replica_behind(tmp_path, stop):
    """Ctrl-C and SIGTERM (what CI runners and Kubernetes send to cancel) both exit 130: interrupted, never 1."""
    process, output = _started(tmp_path, preexec_fn=sigint_default)
    try:
        _until_journal(process, output, tmp_path, lambda text: text.count(b'"type":"round"') >= 3)  # load under way
        process.send_signal(stop)
        process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 130, output.read_text()  # an interruption, told apart from a failed verdict (1)
    (folder,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    summary = valid_summary(folder / "summary.json")
    assert (summary["status"], summary["exit_code"]) == ("interrupted", 130)
    assert summary["reason"].startswith(f"interrupted by {stop.name}")
    pids = [int(pid) for log in (folder / "target" / "logs").glob("*.log")
            for pid in re.findall(r"Started server process \[(\d+)\]", log.read_text())]
    assert len(pids) >= 4
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _started(results: Path, **options: Any) -> tuple[subprocess.Popen[bytes], Path]:
    """smoke.toml run as a user runs it, its output in a file beside its results (read without blocking)."""
    output = results / "output.txt"
    with open(output, "wb") as sink:
        return subprocess.Popen([sys.executable, "-m", "harness", "run", str(SMOKE), "--results", str(results)],
                                stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
                                **options), output


def _until_journal(process: subprocess.Popen[bytes], output: Path, results: Path,
                   holds: Callable[[bytes], bool], timeout: float = 90) -> None:
    """Wait until the run's journal text satisfies `holds`, the run still going (`timeout` only bounds a failure)."""
    deadline = time.monotonic() + timeout
    while not any(holds(journal.read_bytes()) for journal in results.glob("*/journal.jsonl")):
        assert process.poll() is None, output.read_text()
        assert time.monotonic() < deadline, f"not in the journal within {timeout:g} s:\n{output.read_text()}"
        time.sleep(0.2)


def test_validate_checks_every_shipped_scenario():
    paths = [str(p) for p in sorted(SCENARIOS.rglob("*.toml"))]
    result = subprocess.run([sys.executable, "-m", "harness", "validate", *paths], capture_output=True, text=True,
                            cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok (") == len(paths)


def test_a_target_that_cannot_be_reached_exits_3(tmp_path):
    scenario = tmp_path / "external.toml"
    scenario.write_text(SMOKE.read_text().replace('kind = "embedded"', 'kind = "external"\nurls = ["http://127.0.0.1:9/mcp"]'))
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == 3, finished.output
    assert finished.summary["status"] == "aborted"
    # one cause, not a threshold "no samples" and an invariant "not checked" for each thing it prevented
    (problem,) = finished.summary["problems"]
    assert problem.startswith("target error: cannot reach http://127.0.0.1:9/mcp")
    shown = subprocess.run([sys.executable, "-m", "harness", "report", str(finished.folder)], capture_output=True,
                           text=True, cwd=ROOT, timeout=60)
    assert shown.returncode == 3, shown.stderr
    assert "no samples" not in shown.stdout and "not checked" not in shown.stdout and "THRESHOLDS" not in shown.stdout
    assert "no threshold, invariant or reconciliation was judged" in shown.stdout and "target error" in shown.stdout


RESTORES_HANDLERS = """
import io, signal, sys
from pathlib import Path
import locust  # noqa: F401 - patches gevent first, as the CLI does
from harness.run.run import Run, RunOptions
from harness.config.scenario import load_scenario

def mine(signum, frame):
    pass

signal.signal(signal.SIGTERM, mine)
path, results = Path(sys.argv[1]), Path(sys.argv[2])
run = Run(load_scenario(path), path.read_text(), RunOptions(results_root=results, progress=False, stream=io.StringIO()))
code = run.execute()
print(code, signal.getsignal(signal.SIGTERM) is mine, signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""


def test_a_run_gives_back_the_signal_handlers_it_replaced(tmp_path):
    """A capacity sweep runs one `Run` per step in its own process: each must leave Ctrl-C and SIGTERM as it found
    them, or the sweep's own Ctrl-C handling is gone after the first step."""
    scenario = tmp_path / "external.toml"
    scenario.write_text(SMOKE.read_text().replace('kind = "embedded"',
                                                  'kind = "external"\nurls = ["http://127.0.0.1:9/mcp"]'))
    result = subprocess.run([sys.executable, "-c", RESTORES_HANDLERS, str(scenario), str(tmp_path / "results")],
                            capture_output=True, text=True, cwd=ROOT, timeout=120, preexec_fn=sigint_default)
    assert result.stdout.split() == ["3", "True", "True"], result.stdout + result.stderr


def _replica_pids(folder) -> list[int]:
    return [int(pid) for log in (folder / "target" / "logs").glob("*.log")
            for pid in re.findall(r"Started server process \[(\d+)\]", log.read_text())]


def test_a_harness_error_exits_4_with_results_written_and_everything_stopped(tmp_path):
    """A metrics port already in use is the harness's failure: exit 4 and status errored, never exit 1 (a failed
    test); the cause on one line, the traceback in a file, and the target torn down all the same."""
    with __import__("socket").socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        finished = run_harness(SMOKE, tmp_path, "--duration", "5s", "--metrics-port", str(taken.getsockname()[1]))
    assert finished.code == 4, finished.output
    assert "harness error: OSError" in finished.output and "Traceback" not in finished.output
    summary = finished.summary
    assert summary["status"] == "errored" and summary["exit_code"] == 4
    assert "Address already in use" in summary["reason"]
    assert "Traceback" in (finished.folder / "harness-error.txt").read_text()
    last = list(read_journal(finished.folder / "journal.jsonl"))[-1]
    assert (last["type"], last["event"], last["status"]) == ("run", "end", "errored")
    pids = _replica_pids(finished.folder)
    assert len(pids) >= 4  # the API and three replicas were up when the error came
    assert all(not alive(pid) for pid in pids)
    cases = (finished.folder / "junit.xml").read_text()
    assert "status errored, exit code 4" in cases


def test_report_rebuilds_the_results_of_a_run_killed_with_sigkill(tmp_path):
    process, output = _started(tmp_path)
    try:  # load until flows have ended, then no chance to write anything
        _until_journal(process, output, tmp_path, lambda text: text.count(b'"type":"flow"') >= 2
                       and text.count(b"\n") > 12)
    finally:
        process.kill()
        process.wait(10)
    (folder,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    try:
        assert not (folder / "summary.json").exists()
        rebuilt = subprocess.run([sys.executable, "-m", "harness", "report", str(folder)], capture_output=True,
                                 text=True, cwd=ROOT, timeout=120)
        assert rebuilt.returncode == 130, rebuilt.stdout + rebuilt.stderr  # cut off: interrupted, not failed

        summary = valid_summary(folder / "summary.json")
        assert summary["status"] == "interrupted" and "cut off" in summary["reason"]
        assert summary["flows"]["total"] > 0 and summary["journal"]["records"] > 10
        assert (folder / "junit.xml").stat().st_size > 0 and (folder / "report.html").stat().st_size > 0
        assert "status interrupted, exit code 130" in rebuilt.stdout
    finally:  # a killed harness cannot stop what it started; this test's own children go here
        for pid in _replica_pids(folder):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_report_on_a_finished_run_reaches_the_run_s_own_verdict(smoke, tmp_path):
    import json
    import shutil

    copy = tmp_path / smoke.folder.name
    shutil.copytree(smoke.folder, copy)
    before = json.loads((copy / "summary.json").read_text())
    rebuilt = subprocess.run([sys.executable, "-m", "harness", "report", str(copy)], capture_output=True, text=True,
                             cwd=ROOT, timeout=120)
    after = json.loads((copy / "summary.json").read_text())
    assert rebuilt.returncode == smoke.code == 0, rebuilt.stderr
    for key in ("status", "exit_code", "thresholds", "invariants", "reconciliation", "flows", "rejections"):
        assert after[key] == before[key], key


def test_report_refuses_a_folder_that_is_not_results(tmp_path):
    result = subprocess.run([sys.executable, "-m", "harness", "report", str(tmp_path)], capture_output=True,
                            text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 2 and "not a results folder" in result.stderr


WAITING = """
name = "many-waiting"
seed = 3
duration = "6s"
grace = "0s"
[target]
kind = "embedded"
replicas = 2
[load]
model = "open"
arrival_rate = 120
[[flows]]
kind = "return"
[leads]
think = { dist = "constant", value = "20m" }
[expect]
invariant_violations = "== 0"
"""


def test_every_flow_still_waiting_on_its_lead_at_the_stop_has_exactly_one_end_record(tmp_path):
    """Hundreds of flows wait on leads who take 20 minutes; the run stops with no grace. Each is journaled as
    interrupted by the run itself, once, and the harness's bookkeeping never fails the target's verdict."""
    scenario = tmp_path / "waiting.toml"
    scenario.write_text(WAITING)
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == 0, finished.output
    journal = finished.journal()
    starts = [record["flow_id"] for record in journal if record["type"] == "start"]
    ends = [record["flow_id"] for record in journal if record["type"] == "flow"]
    assert len(starts) > 300
    assert sorted(starts) == sorted(ends) and len(set(ends)) == len(ends)
    by_run = [record for record in journal if record["type"] == "flow" and record.get("interrupted_by_run")]
    assert len(by_run) > 0.9 * len(starts)
    assert all(record["outcome"] == "interrupted" for record in by_run)
    assert finished.summary["invariants"]["one_outcome_per_flow"]["violations"] == 0


STUBBORN = """
import gevent
from harness.run.failures import OverloadedError, stop_greenlets

stopping = []

def stubborn():
    while not stopping:
        try:
            gevent.sleep(10)
        except gevent.GreenletExit:
            continue  # too busy to die: what an overloaded hub looks like from here

greenlet = gevent.spawn(stubborn)
gevent.sleep(0)
try:
    stop_greenlets([greenlet], timeout=0.2)
except Exception as exc:  # an ordinary error, which the run reports as its own (exit 4)
    print(type(exc).__name__, exc)
stopping.append(True)
greenlet.kill()
"""


def test_a_greenlet_of_the_run_that_will_not_stop_is_the_harness_s_error_not_an_escape():
    """An overloaded load process once let gevent's Timeout (a BaseException) escape the run: exit 1, a false
    "failed", and the flows in flight never journaled. It is now an ordinary error the run reports as its own.
    (In a process of its own: importing the run lets Locust patch gevent, which pytest's process must not.)"""
    done = subprocess.run([sys.executable, "-c", STUBBORN], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("OverloadedError the run's own greenlets did not stop within 0 s"), done.stdout
