"""The shop's MCP server: four tools that ask a support lead mid-call, replicated without stickiness.

- `quote_refund(order_id)`: asks the API what a whole refund would be; records the quote.
- `issue_refund(quote_id)`: needs the `refunds:write` scope when auth is on. Above the
  policy limit, one form question (`confirm`, a required boolean `release`) with the
  refund id as `requestState`; on the retry it checks the state names the refund, claims
  the once-only record, then releases.
- `record_return(order_id, sku)`: a resolver form (reason, restock, optional note);
  decline and cancel lead different ways.
- `pay_refund(refund_id)`: URL mode; the flow id and a round counter ride in
  `requestState`, and only the provider's record says the lead finished.

Records a retry needs (quotes, answered states) live in the replica's configured store,
so a retry that lands on another replica finds them; with `memory` they do not, which is
exactly the production failure the harness reproduces. This module can also be run as
`python -m harness.shop.server`, which registers the resolver under `__main__`: a
replica started that way next to ones started by `mrtr-harness shop replica` re-asks
every round (the on-call case "replicas started two ways").

2025-era clients (the `initialize` handshake, a session): by default the tools ask them as
they ask everyone, with an input request, which such a client cannot read (-32603, the
on-call case "an old client on the same server"); the resolver asks over the session,
which only SSE mode gives a back-channel (-32600 in JSON mode). With `serve_2025` the
hand-built tools check `ctx.protocol_version` and ask a 2025 session with
`ctx.elicit` / `ctx.elicit_url` instead.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from typing import Annotated, Any, Final, Literal, cast

import httpx
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
    TextContent,
    Tool,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

from harness.shop.store import Store
from harness.shop.token_checks import require_scope
from harness.vocabulary import PAYMENT_ROUNDS

ReturnReason = Literal["damaged in transit", "wrong item sent", "missing part", "arrived late", "changed mind"]
"""The refund policy's five reasons for a return."""

RELEASE_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {"release": {"type": "boolean", "title": "Release"}},
    "required": ["release"],
}

LOOSE_OUTPUT_ENV = "MRTR_SHOP_LOOSE_OUTPUT"
"""A test knob: set to 1 in a replica's environment, quote_refund says `needs_confirmation` as 1 or 0.

The SDK checks a tool's own CallToolResult against its model in pydantic's lax mode, which takes 1 for
True, so the answer goes out; the outputSchema the tool declared says boolean, so a client that checks
the contract (the harness's `output_schema_mismatches`) sees every quote break it. A client that reads
the flag for its truth (the shop's own flows) still reads it right, so nothing else in a run changes."""

NO_OUTPUT_SCHEMA_ENV = "MRTR_SHOP_NO_OUTPUT_SCHEMA"
"""A benchmark knob: set to 1 in a replica's environment, tools/list declares no tool's outputSchema.

The results stay as they are (`structuredContent` included, the flows read it), so a run does the same
work less the harness's output contracts, which check nothing a tool did not declare
(`benchmarks/output_contracts.py` measures what the checks cost that way)."""

SESSION_PAYMENT_ROUNDS = 10
"""A 2025 session's URL-mode questions when the shop counts none: its client has no round cap of its own."""


class Release(BaseModel):
    """The confirmation form, as a 2025-era session is asked it (`RELEASE_FORM` is the same form, by hand)."""

    release: bool = Field(title="Release")


def handshake_era(ctx: Context) -> bool:
    """Whether the call came over a 2025-era session (the `initialize` handshake), not a 2026-07-28 request."""
    return ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS


class Quote(BaseModel):
    quote_id: str
    order_id: str
    amount: str
    needs_confirmation: bool


class RefundView(BaseModel):
    refund_id: str
    order_id: str
    quote_id: str
    amount: str
    status: str


class Inspection(BaseModel):
    """The return form: a flat object with primitive fields only, as elicitation requires."""

    reason: ReturnReason = Field(description="The refund policy's reason that fits what you found")
    restock: bool = Field(description="The item can go back on sale")
    note: str | None = Field(default=None, max_length=200, description="Anything the refund should say")


logger = logging.getLogger("harness.shop.server")
UNASKED_LINE: Final = "input request refused on %s: the client did not declare %s-mode elicitation"
"""The line a replica logs when it refuses a call with -32021 (its own words: the SDK logs none for it)."""


def require_elicitation(ctx: Context, mode: Literal["form", "url"]) -> None:
    """Refuse with -32021 unless the client declared it can show this kind of question.

    A server must not ask what the client cannot show; the SDK's resolvers check this
    for themselves, hand-built input requests must check it here.
    """
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    declared = elicitation is not None and (
        (elicitation.url is not None) if mode == "url" else (elicitation.form is not None or elicitation.url is None)
    )
    if not declared:  # the shop's own line (the SDK logs none for -32021): what a reason adapter's [unasked] reads
        logger.warning(UNASKED_LINE, "tools/call", mode)
        raise MCPError(code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                       message=f"Client did not declare {mode}-mode elicitation, which this tool needs to ask",
                       data={"requiredCapabilities": {"elicitation": {mode: {}}}})


class ShopRecords:
    """The replica's records between rounds: quotes and the once-only record of answered states."""

    def __init__(self, store: Store, answers: Store | None = None) -> None:
        self.store = store
        self.answers = answers or store

    def save_quote(self, quote: Quote) -> None:
        self.store.put("quote", quote.quote_id, quote.model_dump_json())

    def quote(self, quote_id: str) -> Quote | None:
        text = self.store.get("quote", quote_id)
        return Quote.model_validate_json(text) if text is not None else None

    def claim_answer(self, state: str) -> bool:
        """The once-only record: True for the first claim of a state, False for every replay.

        The SDK's seal cannot stop a replayed retry, which is valid until it expires on
        every replica; this claim, checked before the release, can.
        """
        return self.answers.add("answered", state, "1")

    def release_claim(self, state: str) -> None:
        """Give a claim back when the release itself failed for a reason other than 409."""
        self.answers.discard("answered", state)


class ShopApi:
    """The MCP server's client for the shop's API."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=10.0)

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict]:
        try:
            response = await self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ToolError(f"The shop's API is unreachable ({type(exc).__name__}); try again later.") from None
        return response.status_code, response.json()

    async def aclose(self) -> None:
        await self._http.aclose()


def build_server(*, name: str, store: Store, api: ShopApi, security: RequestStateSecurity,
                 answers: Store | None = None, serve_2025: bool = False,
                 payment_rounds: int = PAYMENT_ROUNDS, token_verifier: TokenVerifier | None = None,
                 auth: AuthSettings | None = None) -> MCPServer:
    """The shop's MCP server, with its tools bound to this replica's records and API client.

    `answers` holds the once-only record when it should live apart from the quotes
    (the on-call case of a once-only record kept in one process's memory). `serve_2025`:
    a 2025-era session is asked over its session (`ctx.elicit`), not with an input request
    it cannot read (-32603). `payment_rounds`: pay_refund's URL-mode round count, 0 for none.
    With `token_verifier` and `auth` it is an OAuth resource server (`harness.shop.token_checks`).
    """
    kind = SchemalessServer if os.environ.get(NO_OUTPUT_SCHEMA_ENV) == "1" else MCPServer
    server = kind(name, request_state_security=security, token_verifier=token_verifier, auth=auth)
    records = ShopRecords(store, answers)
    _add_refund_tools(server, records, api, serve_2025)
    _add_return_tool(server, api)
    _add_payout_tool(server, api, serve_2025, payment_rounds)
    return server


class SchemalessServer(MCPServer):
    """The shop's server declaring no outputSchema in tools/list (`NO_OUTPUT_SCHEMA_ENV`); its results unchanged."""

    async def list_tools(self) -> list[Tool]:
        return [tool.model_copy(update={"output_schema": None}) for tool in await super().list_tools()]


def build_replica_server(*, name: str, store: Store, api_url: str, security: RequestStateSecurity,
                         answers: Store | None = None, serve_2025: bool = False,
                         payment_rounds: int = PAYMENT_ROUNDS, token_verifier: TokenVerifier | None = None,
                         auth: AuthSettings | None = None) -> MCPServer:
    """`build_server` as a replica builds it (`harness.shop.replica.build_app`): given the API's URL."""
    return build_server(name=name, store=store, api=ShopApi(api_url), security=security, answers=answers,
                        serve_2025=serve_2025, payment_rounds=payment_rounds, token_verifier=token_verifier,
                        auth=auth)


def _loosely(quote: Quote) -> CallToolResult:
    """The quote with its flag said as 1 or 0 (`LOOSE_OUTPUT_ENV`): a lax check passes it, the schema does not."""
    structured = {**quote.model_dump(mode="json"), "needs_confirmation": int(quote.needs_confirmation)}
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(structured))],
                          structured_content=structured)


def _add_refund_tools(server: MCPServer, records: ShopRecords, api: ShopApi, serve_2025: bool) -> None:
    loose_output = os.environ.get(LOOSE_OUTPUT_ENV) == "1"

    @server.tool(description="Quote a whole refund of an order, by its order_id (e.g. O-1234).")
    async def quote_refund(order_id: str) -> Quote:
        status, body = await api.request("GET", f"/orders/{order_id}/refund-quote")
        if status != 200:
            raise ToolError(f"There is no order {order_id}.")
        quote = Quote(quote_id=f"Q-{secrets.token_hex(5)}", order_id=order_id, amount=body["amount"],
                      needs_confirmation=body["needs_confirmation"])
        records.save_quote(quote)
        if loose_output:  # the SDK passes a CallToolResult through; the declared schema stays Quote's
            return cast(Quote, _loosely(quote))
        return quote

    @server.tool(description="Issue the refund a quote describes. Above EUR 150.00 a support lead confirms it.")
    async def issue_refund(quote_id: str, ctx: Context) -> RefundView | InputRequiredResult:
        require_scope("issue_refund")
        refund = await _refund_for_quote(records, api, quote_id)
        answer = _elicited(ctx, "confirm")
        answered = answer is not None and ctx.request_state == refund.refund_id
        if not answered:  # first round, or an answer to a question never asked
            if refund.status != "needs_confirmation":
                return refund
            require_elicitation(ctx, "form")
            if serve_2025 and handshake_era(ctx):
                return await _confirm_over_session(ctx, records, api, refund)
            ask = ElicitRequestFormParams(requested_schema=RELEASE_FORM, message=_release_question(refund))
            return InputRequiredResult(input_requests={"confirm": ElicitRequest(params=ask)},
                                       request_state=refund.refund_id)
        assert answer is not None
        if answer.action == "cancel":  # a dismissed form: the question stays open
            raise ToolError(f"The lead closed the question without answering; refund {refund.refund_id} stays held. "
                            "Ask again later.")
        if answer.action != "accept" or not (answer.content or {}).get("release"):  # a decline stands
            raise ToolError(f"Nobody confirmed refund {refund.refund_id}, so the shop's API still holds it.")
        return await _release_once(records, api, refund)


def _release_question(refund: RefundView) -> str:
    return (f"Release refund of EUR {refund.amount} for order {refund.order_id}? "
            "It is above the policy limit, so a lead must confirm it.")


async def _confirm_over_session(ctx: Context, records: ShopRecords, api: ShopApi, refund: RefundView) -> RefundView:
    """The 2025 way: ask over the session (`elicitation/create`) and wait, the call held open, for the answer."""
    answer = await ctx.elicit(_release_question(refund), Release)
    if answer.action == "cancel":
        raise ToolError(f"The lead closed the question without answering; refund {refund.refund_id} stays held. "
                        "Ask again later.")
    if not isinstance(answer, AcceptedElicitation) or not answer.data.release:
        raise ToolError(f"Nobody confirmed refund {refund.refund_id}, so the shop's API still holds it.")
    return await _release_once(records, api, refund)


def _elicited(ctx: Context, key: str) -> ElicitResult | None:
    """The person's answer to the question asked under `key`; anything but an elicitation answer is no answer.

    A client may send back any input response under any key; only an elicitation result
    answers a form or a URL question, so anything else leaves the question open.
    """
    answer = (ctx.input_responses or {}).get(key)
    return answer if isinstance(answer, ElicitResult) else None


async def _refund_for_quote(records: ShopRecords, api: ShopApi, quote_id: str) -> RefundView:
    quote = records.quote(quote_id)
    if quote is None:
        raise ToolError(f"There is no quote {quote_id}. Quote the refund again with quote_refund.")
    status, body = await api.request("POST", "/refunds", {"order_id": quote.order_id, "quote_id": quote_id})
    if status not in (200, 201):
        raise ToolError(f"The shop's API refused the refund for quote {quote_id}: {body.get('error')}")
    return RefundView.model_validate(body)


async def _release_once(records: ShopRecords, api: ShopApi, refund: RefundView) -> RefundView:
    if not records.claim_answer(refund.refund_id):
        raise ToolError(f"Refund {refund.refund_id} was already confirmed. Don't send the same answer again.")
    status, body = await api.request("POST", f"/refunds/{refund.refund_id}/confirm")
    if status == 409:
        raise ToolError(f"Refund {refund.refund_id} is no longer held ({body['refund']['status']}); "
                        "the shop's API did not release it again.")
    if status != 200:
        records.release_claim(refund.refund_id)
        raise ToolError(f"The shop's API could not release refund {refund.refund_id}; try again.")
    return RefundView.model_validate(body)


def ask_inspection(order_id: str, sku: str) -> Elicit[Inspection]:
    """The resolver behind record_return's form; its `module:qualname` is the answer's key on the wire."""
    return Elicit(f"You opened the return of {sku} from order {order_id}. What did you find?", Inspection)


def _add_return_tool(server: MCPServer, api: ShopApi) -> None:
    @server.tool(description="Record what a returned item was like when its parcel was opened. "
                             "The user fills in a form.")
    async def record_return(order_id: str, sku: str,
                            found: Annotated[ElicitationResult[Inspection], Resolve(ask_inspection)]) -> str:
        if not isinstance(found, AcceptedElicitation):
            return ("The user declined: don't record this return, and don't ask again." if found.action == "decline"
                    else "The user closed the form without answering: ask again later.")
        status, body = await api.request("POST", "/returns", {"order_id": order_id, "sku": sku,
                                                              **found.data.model_dump()})
        if status != 201:
            raise ToolError(f"The shop's API did not record the return: {body.get('error')}")
        return f"Recorded {body['return_id']}: {found.data.reason}, restock {found.data.restock}."


def _add_payout_tool(server: MCPServer, api: ShopApi, serve_2025: bool, payment_rounds: int) -> None:
    @server.tool(description="Pay out a released refund through the shop's payment provider, by its refund_id.")
    async def pay_refund(refund_id: str, ctx: Context) -> str | InputRequiredResult:
        if serve_2025 and handshake_era(ctx):
            return await _pay_over_session(ctx, api, refund_id, payment_rounds)
        flow_id, rounds = _payment_state(ctx.request_state)
        if flow_id is not None and await _payment_finished(api, flow_id, refund_id):
            return await _pay(api, refund_id)
        answer = _elicited(ctx, "connect")
        if answer is not None and answer.action != "accept":
            return f"Not paid: the user didn't connect a payment account. {refund_id} stays released, unpaid."
        if payment_rounds and rounds >= payment_rounds:
            return _not_signed_in(refund_id, rounds)
        require_elicitation(ctx, "url")
        if flow_id is None:
            flow_id, url = await _start_payment_flow(api, refund_id)
        else:
            url = f"{api.base_url}/pay/{flow_id}"
        ask = ElicitRequestURLParams(url=url, message="To pay refunds, connect your payment provider account "
                                                      "on its own page.")
        return InputRequiredResult(input_requests={"connect": ElicitRequest(params=ask)},
                                   request_state=json.dumps({"flow": flow_id, "round": rounds + 1}))


def _not_signed_in(refund_id: str, rounds: int) -> str:
    return (f"Not paid: the payment provider has not seen the sign-in after {rounds} rounds. "
            f"{refund_id} stays released, unpaid; start the payout again later.")


async def _pay_over_session(ctx: Context, api: ShopApi, refund_id: str, payment_rounds: int) -> str:
    """The 2025 way: send the lead to the provider's page over the session, and ask again until it is finished."""
    require_elicitation(ctx, "url")
    flow_id, url = await _start_payment_flow(api, refund_id)
    limit = payment_rounds or SESSION_PAYMENT_ROUNDS
    for _ in range(limit):
        answer = await ctx.elicit_url("To pay refunds, connect your payment provider account on its own page.",
                                      url, flow_id)
        if answer.action != "accept":
            return f"Not paid: the user didn't connect a payment account. {refund_id} stays released, unpaid."
        if await _payment_finished(api, flow_id, refund_id):
            return await _pay(api, refund_id)
    return _not_signed_in(refund_id, limit)


def _payment_state(state: str | None) -> tuple[str | None, int]:
    """(flow id, rounds so far) from pay_refund's own state; anything else is a flow never started."""
    if not state:
        return None, 0
    try:
        data = json.loads(state)
        return str(data["flow"]), int(data["round"])
    except (ValueError, KeyError, TypeError):
        return None, 0


async def _start_payment_flow(api: ShopApi, refund_id: str) -> tuple[str, str]:
    status, body = await api.request("POST", "/payment-flows", {"refund_id": refund_id})
    if status != 201:
        raise ToolError(f"There is no refund {refund_id} to pay.")
    return body["flow_id"], body["url"]


async def _payment_finished(api: ShopApi, flow_id: str, refund_id: str) -> bool:
    status, body = await api.request("GET", f"/payment-flows/{flow_id}")
    return status == 200 and body["refund_id"] == refund_id and body["finished"]


async def _pay(api: ShopApi, refund_id: str) -> str:
    status, body = await api.request("POST", f"/refunds/{refund_id}/payout")
    if status == 409:
        return f"Not paid again: refund {refund_id} is {body['refund']['status']}."
    if status != 200:
        raise ToolError(f"The payment provider could not pay {refund_id}: {body.get('error')}")
    return f"Paid {refund_id} through the payment provider."


if __name__ == "__main__":  # the second way to start a replica: see the module docstring
    from harness.shop.replica import main

    raise SystemExit(main(None, build_replica_server))
