"""The ledger invariants, fed ledgers that break them: each break is reported, naming its flow or refund.

Against the shop these breaks cannot happen (its transitions are compare-and-set), so
these ledgers are written by hand: without them nothing would show that the checks can
fail. Earlier runs' refunds on the same store must raise nothing, and a ledger that
cannot be read must fail the run instead of passing as "not checked": both also through
real runs against the shop on a Redis store an earlier run left broken refunds on.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.folding.invariants import (
    INVARIANTS,
    JOURNAL_INVARIANTS,
    RACE_INVARIANTS,
    InvariantResult,
    check_invariants,
)
from harness.shop.orders import build_orders
from harness.shop.store import open_store
from tests.harness_run import ROOT, run_harness
from tests.services import redis_server


def row(refund_id: str, quote_id: str, status: str, *, released: int = 0, paid: int = 0,
        amount_cents: int = 20_000) -> dict[str, Any]:
    """One row as the shop's `GET /ledger` lists it."""
    return {"refund_id": refund_id, "order_id": "O-1", "quote_id": quote_id, "amount_cents": amount_cents,
            "status": status, "released": released, "paid": paid, "release_conflicts": 0, "payout_conflicts": 0}


def flow(flow_id: str, quote_id: str | None, outcome: str, *, kind: str = "refund", held: bool = True,
         answers: tuple[str, ...] = ()) -> dict[str, Any]:
    """One journal `flow` record, with the facts the refund flows add."""
    return {"flow_id": flow_id, "flow": kind, "outcome": outcome, "quote_id": quote_id, "held": held,
            "answers": list(answers)}


def start(flow_id: str) -> dict[str, Any]:
    return {"flow_id": flow_id, "flow": "refund"}


def judge(ledger: list[dict[str, Any]] | None, flows: list[dict[str, Any]], starts: list[dict[str, Any]] | None = None,
          **kwargs: Any) -> dict[str, InvariantResult]:
    starts = [start(record["flow_id"]) for record in flows] if starts is None else starts
    return {result.name: result for result in check_invariants(ledger, starts, flows, **kwargs)}


def broken(results: dict[str, InvariantResult]) -> dict[str, list[str]]:
    return {name: result.examples for name, result in results.items() if result.violations}


CLEAN_FLOWS = [
    flow("f1", "Q-1", "completed", answers=("accept",)),
    flow("f2", "Q-2", "declined", answers=("decline",)),
    flow("f3", "Q-3", "completed", held=False),
]
CLEAN_LEDGER = [
    row("R-00001", "Q-1", "requested", released=1),
    row("R-00002", "Q-2", "needs_confirmation"),
    row("R-00003", "Q-3", "paid", released=1, paid=1, amount_cents=5_000),
]


def test_a_clean_run_breaks_nothing_and_checks_every_invariant():
    results = judge(CLEAN_LEDGER, CLEAN_FLOWS)
    assert set(results) == set(INVARIANTS)
    assert broken(results) == {}
    assert {name for name, result in results.items() if not result.checked} == set(RACE_INVARIANTS)  # no race ran


@pytest.mark.parametrize(("ledger_row", "invariant", "named"), [
    (row("R-00001", "Q-1", "requested", released=2), "no_double_release", "R-00001"),
    (row("R-00001", "Q-1", "paid", released=1, paid=2), "no_double_payout", "R-00001"),
])
def test_a_refund_released_or_paid_twice_is_reported_by_its_refund_id(ledger_row, invariant, named):
    results = judge([ledger_row, *CLEAN_LEDGER[1:]], CLEAN_FLOWS)
    assert list(broken(results)) == [invariant]
    assert results[invariant].violations == 1
    assert named in results[invariant].examples[0]


def test_a_held_refund_released_with_no_accepted_answer_is_reported():
    flows = [flow("f1", "Q-1", "tool_error", answers=("decline",))]
    results = judge([row("R-00007", "Q-1", "requested", released=1)], flows)
    assert results["no_release_without_accept"].violations == 1
    assert "R-00007" in results["no_release_without_accept"].examples[0]


def test_a_refund_this_run_never_held_needs_no_accepted_answer():
    """Held or not is the journal's fact about this run's quote, not the shop's policy limit."""
    flows = [flow("f1", "Q-1", "completed", held=False)]
    results = judge([row("R-00001", "Q-1", "requested", released=1, amount_cents=90_000)], flows)
    assert broken(results) == {}


def test_a_confirmed_flow_whose_refund_is_still_held_is_reported_by_its_flow():
    flows = [flow("f9", "Q-9", "completed", answers=("accept",))]
    results = judge([row("R-00009", "Q-9", "needs_confirmation")], flows)
    assert list(broken(results)) == ["confirmed_refund_released"]
    assert results["confirmed_refund_released"].examples[0].startswith("f9:")
    assert "R-00009" in results["confirmed_refund_released"].examples[0]


@pytest.mark.parametrize("outcome", ["declined", "cancelled", "abandoned"])
def test_a_flow_that_did_not_accept_but_whose_refund_went_out_is_reported(outcome):
    flows = [flow("f4", "Q-4", outcome)]
    results = judge([row("R-00004", "Q-4", "requested", released=1)], flows)
    assert set(broken(results)) == {"declined_refund_still_held", "no_release_without_accept"}
    assert results["declined_refund_still_held"].examples[0].startswith(f"f4: {outcome}")


def test_a_started_flow_with_no_end_record_is_reported_by_its_flow_id():
    starts = [start("f1"), start("f2"), start("f3"), start("lost-7")]
    results = judge(CLEAN_LEDGER, CLEAN_FLOWS, starts)
    assert list(broken(results)) == ["one_outcome_per_flow"]
    assert results["one_outcome_per_flow"].examples == ["lost-7: started 1 times, ended 0 times"]


def test_refunds_of_an_earlier_run_on_the_same_store_raise_nothing():
    """An earlier run's refunds (quotes none of this run's flows created) break every rule and count for none."""
    earlier = [
        row("R-00101", "Q-old-1", "requested", released=2),
        row("R-00102", "Q-old-2", "paid", released=1, paid=3),
        row("R-00103", "Q-old-3", "requested", released=1),  # held, released, accepted by nobody in this run
    ]
    results = judge(earlier + CLEAN_LEDGER, CLEAN_FLOWS)
    assert broken(results) == {}
    # the same rows, when this run's flows did make those quotes, are violations: the filter is by quote
    mine = [flow("g1", "Q-old-1", "completed", answers=("accept",)), flow("g2", "Q-old-2", "completed", held=False),
            flow("g3", "Q-old-3", "declined", answers=("decline",))]
    assert set(broken(judge(earlier, mine))) == {"no_double_release", "no_double_payout", "no_release_without_accept",
                                                 "declined_refund_still_held"}


def test_a_ledger_that_cannot_be_read_fails_ledger_readable_and_checks_nothing_else_on_it():
    results = judge(None, CLEAN_FLOWS, ledger_error="GET http://127.0.0.1:9/ledger: ConnectError: refused")
    assert list(broken(results)) == ["ledger_readable"]
    assert results["ledger_readable"].checked
    assert "ConnectError" in results["ledger_readable"].examples[0]
    assert not results["no_double_release"].checked
    assert results["one_outcome_per_flow"].checked


def test_a_target_without_a_ledger_leaves_the_ledger_invariants_unchecked_and_passes():
    results = judge(None, CLEAN_FLOWS)
    assert broken(results) == {}
    checked = {name for name, result in results.items() if result.checked}
    assert checked == set(JOURNAL_INVARIANTS) - set(RACE_INVARIANTS)  # no race ran


# --- end to end: a run against a store an earlier run left a double release on --------------

AGAIN = """\
name = "again-on-the-same-store"
seed = 5
duration = "6s"
grace = "5s"
time_scale = 60

[target]
kind = "external"
urls = {urls}
api = "{api}"

[load]
arrival_rate = 3
routing = "other-replica"

[[flows]]
kind = "refund"
amount = "above-limit"
weight = 3

[[flows]]
kind = "refund"
amount = "below-limit"

[leads]
think = {{ dist = "constant", value = "6s" }}
decline = 0.3
"""


def _start_shop(store_url: str, workdir: Path) -> tuple[subprocess.Popen[str], str, list[str]]:
    """`mrtr-harness shop up` on the given store: its API URL and its replicas' MCP URLs."""
    shop = subprocess.Popen([sys.executable, "-m", "harness", "shop", "up", "--replicas", "2", "--store", store_url,
                             "--workdir", str(workdir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT)
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any("Ctrl-C" in line for line in lines) and shop.poll() is None:
        lines.append(shop.stdout.readline() if shop.stdout else "")
    output = "".join(lines)
    api = re.search(r"shop API\s+(http://127\.0\.0\.1:\d+)", output)
    urls = re.findall(r"(http://127\.0\.0\.1:\d+/mcp)", output)
    if api is None or len(urls) != 2:
        _stop(shop)
        pytest.fail(f"shop up did not start:\n{output}")
    return shop, api[1], urls


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM: `shop up` stops every process it started, by their PIDs."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _earlier_run(api: str, store_url: str) -> dict[str, str]:
    """Refunds an earlier run left behind, each breaking a rule: released twice, paid twice, released unasked.

    The shop's transitions cannot release or pay twice, so the earlier run's bug is made
    by counting one more release and payout in the store, as a broken replica would have.
    """
    held, small = build_orders().order_ids(needs_confirmation=True), build_orders().order_ids(
        needs_confirmation=False)
    made = {}
    for name, order_id in (("released twice", held[-1]), ("released unasked", held[-2]), ("paid twice", small[-1])):
        refund = httpx.post(f"{api}/refunds", json={"order_id": order_id, "quote_id": f"Q-earlier-{name}"})
        refund.raise_for_status()
        made[name] = refund.json()["refund_id"]
    for name in ("released twice", "released unasked"):
        httpx.post(f"{api}/refunds/{made[name]}/confirm").raise_for_status()
    httpx.post(f"{api}/refunds/{made['paid twice']}/payout").raise_for_status()
    with open_store(store_url) as store:
        store.incr("released", made["released twice"])
        store.incr("paid", made["paid twice"])
    return made


@pytest.fixture(scope="module")
def broken_store(tmp_path_factory) -> Iterator[tuple[str, list[str], dict[str, str]]]:
    """The shop up on a Redis store holding an earlier run's broken refunds: its API, replicas, those refunds."""
    with redis_server() as store_url:
        shop, api, urls = _start_shop(store_url, tmp_path_factory.mktemp("shop"))
        try:
            yield api, urls, _earlier_run(api, store_url)
        finally:
            _stop(shop)


def test_a_run_on_a_store_an_earlier_run_broke_judges_only_its_own_refunds(broken_store, tmp_path):
    api, urls, earlier = broken_store
    scenario = tmp_path / "again.toml"
    scenario.write_text(AGAIN.format(urls=json.dumps(urls), api=api))
    finished = run_harness(scenario, tmp_path / "results")
    ledger = {row["refund_id"]: row for row in httpx.get(f"{api}/ledger").json()["refunds"]}
    assert finished.code == 0, finished.output
    # the ledger the run read held the earlier run's breaks ...
    assert ledger[earlier["released twice"]]["released"] == 2
    assert ledger[earlier["paid twice"]]["paid"] == 2
    assert ledger[earlier["released unasked"]]["status"] == "requested"
    # ... and every ledger invariant was checked, on refunds of this run's own quotes, and held
    invariants = finished.summary["invariants"]
    assert set(invariants) == set(INVARIANTS)
    assert all(result["checked"] and result["passed"] for name, result in invariants.items()
               if name not in RACE_INVARIANTS), invariants
    flows = [record for record in finished.journal() if record["type"] == "flow"]
    quotes = {record.get("quote_id") for record in flows} - {None}
    assert any(record.get("held") for record in flows)
    assert len([row for row in ledger.values() if row["quote_id"] in quotes]) == len(quotes)


def test_a_declared_ledger_that_cannot_be_read_fails_the_run(broken_store, tmp_path):
    """The replicas answer, but the API the target declares does not: not "unchecked", a failed run."""
    _, urls, _ = broken_store
    scenario = tmp_path / "no-ledger.toml"
    scenario.write_text(AGAIN.format(urls=json.dumps(urls), api="http://127.0.0.1:9").replace('"6s"', '"2s"'))
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == 1, finished.output
    readable = finished.summary["invariants"]["ledger_readable"]
    assert readable["checked"] and not readable["passed"]
    assert "127.0.0.1:9/ledger" in " ".join(readable["detail"] or [])
    assert "ledger_readable" in finished.output
