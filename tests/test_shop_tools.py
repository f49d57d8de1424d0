"""Each shop tool's path through real replicas, driven by the SDK's own Client, rounds counted on the wire."""

from __future__ import annotations

import httpx
import pytest
from mcp_types import ElicitResult

from harness.shop.orders import build_orders
from harness.shop.server import PAYMENT_ROUNDS
from tests.sdk import Wire, answer, connect, run, say_yes

CATALOGUE = build_orders()
HELD_ORDERS = iter(CATALOGUE.order_ids(needs_confirmation=True))
SMALL_ORDERS = iter(CATALOGUE.order_ids(needs_confirmation=False))


@pytest.fixture(scope="module")
def shop(deploy):
    return deploy(replicas=2)


def ledger(shop) -> dict[str, dict]:
    return {row["refund_id"]: row for row in httpx.get(f"{shop.api.base_url}/ledger").json()["refunds"]}


def refund_flow(shop, order_id: str, elicitation=say_yes) -> tuple[object, Wire]:
    wire = Wire()

    async def flow():
        async with connect(shop.replica_urls[0], elicitation, wire) as client:
            quote = (await client.call_tool("quote_refund", {"order_id": order_id})).structured_content
            return await client.call_tool("issue_refund", {"quote_id": quote["quote_id"]})

    return run(flow), wire


def test_refund_under_the_limit_completes_in_one_round(shop):
    result, wire = refund_flow(shop, next(SMALL_ORDERS))
    assert result.structured_content["status"] == "requested"
    assert wire.rounds("issue_refund") == 1
    assert ledger(shop)[result.structured_content["refund_id"]]["released"] == 1


def test_refund_above_the_limit_is_released_after_two_rounds(shop):
    result, wire = refund_flow(shop, next(HELD_ORDERS))
    assert not result.is_error
    assert result.structured_content["status"] == "requested"
    assert wire.rounds("issue_refund") == 2
    assert ledger(shop)[result.structured_content["refund_id"]]["released"] == 1


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_refund_nobody_accepted_stays_held(shop, action):
    before = set(ledger(shop))
    result, wire = refund_flow(shop, next(HELD_ORDERS), answer(action))
    assert result.is_error
    assert wire.rounds("issue_refund") == 2
    (new,) = [row for refund_id, row in ledger(shop).items() if refund_id not in before]
    assert new["status"] == "needs_confirmation" and new["released"] == 0


def test_decline_and_cancel_say_different_things(shop):
    declined, _ = refund_flow(shop, next(HELD_ORDERS), answer("decline"))
    cancelled, _ = refund_flow(shop, next(HELD_ORDERS), answer("cancel"))
    assert "still holds it" in declined.content[0].text
    assert "Ask again later" in cancelled.content[0].text


def test_a_client_that_cannot_show_forms_is_refused_with_32021(shop):
    from mcp import MCPError

    async def flow():
        async with connect(shop.replica_urls[0], None) as client:
            quote = (await client.call_tool("quote_refund", {"order_id": next(HELD_ORDERS)})).structured_content
            try:
                await client.call_tool("issue_refund", {"quote_id": quote["quote_id"]})
            except MCPError as error:
                return error.error.code
        return None

    assert run(flow) == -32021


def paid_refund_id(shop) -> str:
    result, _ = refund_flow(shop, next(SMALL_ORDERS))
    return result.structured_content["refund_id"]


def pay(shop, refund_id: str, elicitation) -> tuple[str, Wire]:
    wire = Wire()

    async def flow():
        async with connect(shop.replica_urls[1], elicitation, wire) as client:
            return await client.call_tool("pay_refund", {"refund_id": refund_id})

    result = run(flow)
    return result.content[0].text, wire


def test_url_mode_payout_completes_after_the_lead_finishes_on_the_page(shop):
    refund_id = paid_refund_id(shop)
    visits = []

    async def lead(context, params):  # accept first without finishing, then finish on the page
        visits.append(params.url)
        if len(visits) == 2:
            assert httpx.post(params.url).status_code == 200
        return ElicitResult(action="accept")

    text, wire = pay(shop, refund_id, lead)
    assert text == f"Paid {refund_id} through the payment provider."
    assert wire.rounds("pay_refund") == 3
    assert len(set(visits)) == 1, "every round points at the same provider flow"
    assert ledger(shop)[refund_id]["paid"] == 1


def test_url_mode_gives_up_with_an_unfinished_result_when_nobody_finishes(shop):
    refund_id = paid_refund_id(shop)
    text, wire = pay(shop, refund_id, answer("accept"))
    assert text.startswith("Not paid") and "stays released" in text
    assert wire.rounds("pay_refund") == PAYMENT_ROUNDS + 1
    assert ledger(shop)[refund_id]["paid"] == 0


def test_a_second_payout_is_refused_by_the_shop(shop):
    refund_id = paid_refund_id(shop)

    async def finish(context, params):
        httpx.post(params.url)
        return ElicitResult(action="accept")

    pay(shop, refund_id, finish)
    text, _ = pay(shop, refund_id, finish)
    assert text.startswith("Not paid again")
    row = ledger(shop)[refund_id]
    assert row["paid"] == 1 and row["payout_conflicts"] == 1


@pytest.mark.parametrize("action, expected", [
    ("accept", "Recorded RT-"),
    ("decline", "The user declined"),
    ("cancel", "The user closed the form without answering"),
])
def test_record_return_asks_a_form_and_branches_on_the_answer(shop, action, expected):
    order = CATALOGUE.get(next(HELD_ORDERS))
    forms = []

    async def inspector(context, params):
        forms.append(params.requested_schema)
        content = {"reason": "damaged in transit", "restock": False} if action == "accept" else None
        return ElicitResult(action=action, content=content)

    wire = Wire()

    async def flow():
        async with connect(shop.replica_urls[0], inspector, wire) as client:
            return await client.call_tool("record_return", {"order_id": order.order_id, "sku": order.lines[0].sku})

    result = run(flow)
    assert result.content[0].text.startswith(expected), result.content[0].text
    assert wire.rounds("record_return") == 2
    assert set(forms[0]["properties"]) == {"reason", "restock", "note"}
    assert set(forms[0]["required"]) == {"reason", "restock"}
