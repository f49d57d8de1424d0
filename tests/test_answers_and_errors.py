"""A scenario's pinned answers, and the servers' error texts in the journal, the reports and Locust.

Against the refund desk (`tests/servers/refund_desk.py`, a real SDK server), which asks
which SKU to refund as free text: leads answering from the schema alone invent SKUs and
the desk answers "order ... has no item ..."; `answers = { sku = [...] }` removes every one
of those errors, while the leads still decide to accept or decline, and the same seed
picks the same SKUs. The messages never carry a requestState, and equal errors group.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.config.leads import LeadProfile
from harness.config.scenario import parse_scenario
from harness.config.strict import ScenarioError
from harness.leads.lead import Lead, capabilities
from harness.load.seeding import stream
from harness.mrtr.client import MrtrClient
from harness.mrtr.error_text import MESSAGE_LIMIT, error_pattern, scrub
from harness.mrtr.outcome import Outcome
from harness.mrtr.routing import Router
from tests.harness_run import ROOT, Finished, run_harness
from tests.servers import Running, start_server

SKUS = ["mug", "tee"]
SDK_PREFIX = "Error executing tool refund_item: "
"""How the SDK words a tool's ToolError in the result's text."""

SCENARIO = """
name = "refund-desk"
seed = 11
duration = "6s"
time_scale = 60
grace = "8s"

[target]
kind = "external"
urls = ["{url}"]

[load]
arrival_rate = 4

[[flows]]
kind = "call"
tool = "refund_item"
arguments = [{{ order_id = "O-1001" }}, {{ order_id = "O-1002" }}]
{answers}

[leads]
think = {{ dist = "constant", value = "15s" }}
decline = 0.4
"""


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    log = tmp_path_factory.mktemp("desk") / "desk.log"
    running = start_server("tests.servers.refund_desk", env={"REFUND_DESK_KEY": secrets.token_hex(32)}, log=log)
    try:
        yield running
    finally:
        running.stop()


def _client(desk: Running) -> MrtrClient:
    return MrtrClient(Router([desk.url]), capabilities=capabilities(LeadProfile()))


def lead_profile_for(answers: str) -> LeadProfile:
    """The lead profile the run gives the scenario's `call` flow (its `answers` merged in)."""
    scenario = parse_scenario(SCENARIO.format(url="http://127.0.0.1:1/mcp", answers=answers))
    return scenario.flows[0].lead_profile(scenario.leads)


def _run(desk: Running, tmp_path: Path, answers: str) -> Finished:
    scenario = tmp_path / "desk.toml"
    scenario.write_text(SCENARIO.format(url=desk.url, answers=answers))
    return run_harness(scenario, tmp_path / "results")


def test_leads_who_invent_skus_end_in_the_desks_tool_error_and_its_text_is_journaled_and_reported(
        desk: Running, tmp_path: Path) -> None:
    finished = _run(desk, tmp_path, "")
    outcomes = finished.summary["flows"]["by_outcome"]
    assert outcomes.get("tool_error", 0) > 0, finished.output
    errors = [record["error"] for record in finished.journal() if record["type"] == "round" and "error" in record]
    assert len(errors) == outcomes["tool_error"]
    assert all(re.fullmatch(r"Error executing tool refund_item: order O-100[12] has no item '[^']*'", error)
               for error in errors), errors
    assert all(len(error) <= MESSAGE_LIMIT and "v1." not in error for error in errors)
    top = finished.summary["top_errors"]
    assert top == [{"count": len(errors), "flow": "refund_item", "tool": "refund_item", "round": 2,
                    "message": f"{SDK_PREFIX}order <id> has no item <value>", "example": errors[0],
                    "first": top[0]["first"], "last": top[0]["last"], "trace_ids": []}]  # tracing off: none
    assert 0 <= top[0]["first"] <= top[0]["last"]
    assert "TOP ERRORS" in finished.output and "order <id> has no item <value>" in finished.output
    html = (finished.folder / "report.html").read_text()
    assert "<h2>Top errors</h2>" in html and "order &lt;id&gt; has no item &lt;value&gt;" in html


def test_pinned_skus_remove_the_invented_sku_errors_and_the_leads_still_decide(desk: Running,
                                                                                tmp_path: Path) -> None:
    finished = _run(desk, tmp_path, 'answers = { sku = ["mug", "tee"] }')
    outcomes = finished.summary["flows"]["by_outcome"]
    assert set(outcomes) <= {"completed", "declined"}, finished.output
    assert outcomes.get("completed", 0) > 0 and outcomes.get("declined", 0) > 0, outcomes
    assert finished.summary["top_errors"] == []
    assert not [record for record in finished.journal() if record["type"] == "round" and "error" in record]
    refunded = [line.split()[-1] for line in Path(desk.log.name).read_text().splitlines()
                if line.startswith("refunded ")]
    assert set(refunded) == set(SKUS), "both pinned SKUs are picked, and nothing else is typed"


def test_the_same_seed_picks_the_same_skus_from_the_flows_stream(desk: Running) -> None:
    asked = _client(desk).send_round("refund_item", {"order_id": "O-1001"})
    assert asked.outcome is Outcome.INPUT_REQUIRED and asked.input_requests is not None
    profile = lead_profile_for('answers = { sku = ["mug", "tee"] }')

    def picks(seed: int) -> list[str | None]:
        answers = [Lead(profile, stream(seed, "flow", n)).respond(asked.input_requests) for n in range(40)]
        return [(answer.input_responses or {}).get("item", {}).get("content", {}).get("sku") for answer in answers]

    first = picks(11)
    assert first == picks(11)
    assert first != picks(12)
    assert {sku for sku in first if sku is not None} == set(SKUS)


def test_an_answer_list_must_not_be_empty() -> None:
    with pytest.raises(ScenarioError, match=r"desk.toml:\d+: flows\[1\]\.answers: .*empty list"):
        parse_scenario(SCENARIO.format(url="http://127.0.0.1:1/mcp", answers="answers = { sku = [] }"), "desk.toml")


def test_a_real_request_state_in_an_error_text_is_scrubbed(desk: Running) -> None:
    asked = _client(desk).send_round("refund_item", {"order_id": "O-1002"})
    state = asked.request_state
    assert state is not None and state.startswith("v1.") and len(state) > 40
    key = secrets.token_hex(32)
    echoed = f"could not resume from requestState {state} (sealed with key={key}); ring {secrets.token_urlsafe(32)}"
    scrubbed = scrub(echoed)
    assert state not in scrubbed and state[3:40] not in scrubbed and key not in scrubbed
    assert scrubbed.startswith("could not resume from requestState <requestState>")
    assert scrub("x" * 500) == "x" * (MESSAGE_LIMIT - 1) + "…"


def test_a_json_rpc_error_says_its_message_and_an_http_error_its_status_and_body(desk: Running) -> None:
    client = _client(desk)
    forged = "v1." + secrets.token_urlsafe(60)
    rejected = client.send_round("refund_item", {"order_id": "O-1001"}, request_state=forged,
                                 input_responses={"item": {"action": "accept", "content": {"sku": "mug"}}})
    assert (rejected.outcome, rejected.message) == (Outcome.INVALID_STATE, "Invalid or expired requestState")
    refused = client.send_round("refund_item", {"order_id": "O-1001"}, headers={"Host": "shop.example"})
    assert refused.outcome is Outcome.HTTP_ERROR
    assert refused.message == f"HTTP {refused.http_status}: Invalid HTTP request received."


LOCUST_GROUPS = """
import json, sys
from locust.stats import RequestStats  # in its own process: importing Locust patches the whole process for gevent
from harness.mrtr.outcome import Outcome, OutcomeError

stats = RequestStats()
for message in json.loads(sys.argv[1]):
    stats.log_error("MRTR", "refund_item r2", OutcomeError(Outcome.TOOL_ERROR, message=message))
print(json.dumps([[error.occurrences, str(error.error)] for error in stats.errors.values()]))
"""


def test_locust_groups_two_errors_that_differ_only_by_their_order_into_one_failure(desk: Running) -> None:
    client = _client(desk)
    messages = []
    for order_id in ("O-1001", "O-1002"):
        asked = client.send_round("refund_item", {"order_id": order_id})
        answered = client.send_round("refund_item", {"order_id": order_id}, request_state=asked.request_state,
                                     input_responses={"item": {"action": "accept", "content": {"sku": "lamp"}}},
                                     round_number=2)
        assert answered.outcome is Outcome.TOOL_ERROR
        assert answered.message == f"{SDK_PREFIX}order {order_id} has no item 'lamp'"
        messages.append(answered.message)
    grouped = subprocess.run([sys.executable, "-c", LOCUST_GROUPS, json.dumps(messages)], capture_output=True,
                             text=True, timeout=60, cwd=ROOT, check=True)
    assert json.loads(grouped.stdout) == [[2, f"tool_error: {SDK_PREFIX}order <id> has no item <value>"]]


def test_error_patterns_replace_what_varies_per_flow_and_keep_what_does_not() -> None:
    assert error_pattern("quote Q-7001 for 3f2504e0-4f89-11d3-9a0c-0305e82c3301 expired at 2026-12-01T06:41:19Z") \
        == "quote <id> for <uuid> expired at <time>"
    assert error_pattern("ledger row 123456 is locked") == "ledger row <n> is locked"
    assert error_pattern("HTTP 502: Bad Gateway") == "HTTP 502: Bad Gateway"
    assert error_pattern("can't refund EUR 234.56") == "can't refund EUR 234.56"
