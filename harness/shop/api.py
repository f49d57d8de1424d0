"""The shop's HTTP API (Starlette): orders, refund quotes, refunds, returns, payouts, the ledger.

It is the system of record behind the MCP server. It enforces the refund policy (a
refund above EUR 150.00 is held as `needs_confirmation`), acts on `confirm`, `cancel`
and `payout` only from the state each needs and answers 409 otherwise: that 409 is the
backstop that stops a second release even when every record in front of it failed.
Its state lives in the configured store, so a restart loses nothing.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from harness.shop.orders import Orders, build_orders, format_cents
from harness.shop.refund_ledger import Conflict, Ledger
from harness.shop.store import Store

MAX_BODY_BYTES = 64 * 1024
"""Requests to the API are small JSON objects; anything larger is refused before parsing."""

_RETURN_REASONS = ("damaged in transit", "wrong item sent", "missing part", "arrived late", "changed mind")


class BadRequest(Exception):
    """A request the API refuses with 400 and a message that says what to fix."""


def create_app(store: Store, orders: Orders | None = None, *, release_guard: bool = True) -> Starlette:
    """Build the API over `store`; the orders default to the standard seed. `release_guard=False` turns off
    the 409 on a second release (see `Ledger`)."""
    shop = _Shop(store, orders or build_orders(), release_guard=release_guard)
    routes = [
        Route("/healthz", shop.health, methods=["GET"]),
        Route("/orders/{order_id}", shop.order, methods=["GET"]),
        Route("/orders/{order_id}/refund-quote", shop.refund_quote, methods=["GET"]),
        Route("/refunds", shop.create_refund, methods=["POST"]),
        Route("/refunds/{refund_id}", shop.refund, methods=["GET"]),
        Route("/refunds/{refund_id}/confirm", shop.confirm, methods=["POST"]),
        Route("/refunds/{refund_id}/cancel", shop.cancel, methods=["POST"]),
        Route("/refunds/{refund_id}/payout", shop.payout, methods=["POST"]),
        Route("/returns", shop.record_return, methods=["POST"]),
        Route("/pay/{flow_id}", shop.payment_page, methods=["GET", "POST"], name="payment_page"),
        Route("/payment-flows", shop.start_payment_flow, methods=["POST"]),
        Route("/payment-flows/{flow_id}", shop.payment_flow, methods=["GET"]),
        Route("/ledger", shop.ledger_listing, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={BadRequest: _bad_request})
    app.state.shop = shop
    return app


async def _bad_request(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=400)


def _not_found(what: str) -> JSONResponse:
    return JSONResponse({"error": f"there is no {what}"}, status_code=404)


def _conflict(exc: Conflict) -> JSONResponse:
    return JSONResponse({"error": str(exc), "refund": exc.refund.public()}, status_code=409)


async def _json_body(request: Request) -> dict[str, Any]:
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(f"body is {len(body)} bytes; the API takes at most {MAX_BODY_BYTES}")
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object")
    return data


def _field(data: dict[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BadRequest(f"field {name!r} must be a {kind.__name__}")
    return value


class _Shop:
    """The route handlers, over one ledger and one set of orders."""

    def __init__(self, store: Store, orders: Orders, *, release_guard: bool = True) -> None:
        self.store = store
        self.orders = orders
        self.ledger = Ledger(store, release_guard=release_guard)

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "store": self.store.kind, "orders": len(self.orders.orders),
                             "pid": os.getpid()})

    async def order(self, request: Request) -> Response:
        order = self.orders.get(request.path_params["order_id"])
        if order is None:
            return _not_found(f"order {request.path_params['order_id']}")
        return JSONResponse({
            "order_id": order.order_id,
            "total": format_cents(order.total_cents),
            "lines": [{"sku": line.sku, "title": line.title, "kind": line.kind,
                       "amount": format_cents(line.amount_cents)} for line in order.lines],
        })

    async def refund_quote(self, request: Request) -> Response:
        """What a whole refund of the order would be, and whether the policy holds it."""
        order = self.orders.get(request.path_params["order_id"])
        if order is None:
            return _not_found(f"order {request.path_params['order_id']}")
        return JSONResponse({"order_id": order.order_id, "amount_cents": order.total_cents,
                             "amount": format_cents(order.total_cents),
                             "needs_confirmation": order.needs_confirmation})

    async def create_refund(self, request: Request) -> Response:
        data = await _json_body(request)
        order_id, quote_id = _field(data, "order_id", str), _field(data, "quote_id", str)
        order = self.orders.get(order_id)
        if order is None:
            return _not_found(f"order {order_id}")
        refund, created = self.ledger.create(order_id, quote_id, order.total_cents)
        return JSONResponse(refund.public(), status_code=201 if created else 200)

    async def refund(self, request: Request) -> Response:
        refund = self.ledger.get(request.path_params["refund_id"])
        return JSONResponse(refund.public()) if refund else _not_found(f"refund {request.path_params['refund_id']}")

    async def confirm(self, request: Request) -> Response:
        return self._act(request, self.ledger.confirm)

    async def cancel(self, request: Request) -> Response:
        return self._act(request, self.ledger.cancel)

    async def payout(self, request: Request) -> Response:
        return self._act(request, self.ledger.pay)

    def _act(self, request: Request, action: Any) -> Response:
        refund_id = request.path_params["refund_id"]
        try:
            return JSONResponse(action(refund_id).public())
        except KeyError:
            return _not_found(f"refund {refund_id}")
        except Conflict as exc:
            return _conflict(exc)

    async def record_return(self, request: Request) -> Response:
        data = await _json_body(request)
        order_id, sku = _field(data, "order_id", str), _field(data, "sku", str)
        reason, restock = _field(data, "reason", str), _field(data, "restock", bool)
        note = data.get("note")
        if reason not in _RETURN_REASONS:
            raise BadRequest(f"reason must be one of {', '.join(_RETURN_REASONS)}")
        if note is not None and (not isinstance(note, str) or len(note) > 200):
            raise BadRequest("note must be a string of at most 200 characters")
        order = self.orders.get(order_id)
        if order is None or order.line(sku) is None:
            return _not_found(f"line {sku} on order {order_id}")
        return_id = f"RT-{self.store.incr('sequence', 'return'):05d}"
        record = {"return_id": return_id, "order_id": order_id, "sku": sku, "reason": reason,
                  "restock": restock, "note": note}
        self.store.put("return", return_id, json.dumps(record))
        return JSONResponse(record, status_code=201)

    async def start_payment_flow(self, request: Request) -> Response:
        """Start a payout's sign-in flow at the provider: a fresh flow id and the page to send the lead to.

        The provider (here, the API) keeps the record of flows and of which ones finished,
        so any MCP replica can tell from the flow id alone whether the lead is done.
        """
        data = await _json_body(request)
        refund_id = _field(data, "refund_id", str)
        if self.ledger.get(refund_id) is None:
            return _not_found(f"refund {refund_id}")
        flow_id = secrets.token_urlsafe(12)
        self.store.put("payflow", flow_id, refund_id)
        url = str(request.url_for("payment_page", flow_id=flow_id))
        return JSONResponse({"flow_id": flow_id, "refund_id": refund_id, "url": url}, status_code=201)

    async def payment_page(self, request: Request) -> Response:
        """The payment provider's page a URL-mode question sends the lead to.

        GET shows it; POST is the lead finishing the sign-in there, the out-of-band step
        that the MCP server later finds finished. A flow id nobody started is 404.
        """
        flow_id = request.path_params["flow_id"]
        if self.store.get("payflow", flow_id) is None:
            return _not_found(f"payment flow {flow_id}")
        if request.method == "GET":
            return HTMLResponse(f"<h1>Connect your payment account</h1><form method=post action='/pay/{flow_id}'>"
                                "<button>Connect</button></form>")
        self.store.put("payflow-finished", flow_id, secrets.token_hex(4))
        return JSONResponse({"flow_id": flow_id, "finished": True})

    async def payment_flow(self, request: Request) -> Response:
        flow_id = request.path_params["flow_id"]
        refund_id = self.store.get("payflow", flow_id)
        if refund_id is None:
            return _not_found(f"payment flow {flow_id}")
        finished = self.store.get("payflow-finished", flow_id) is not None
        return JSONResponse({"flow_id": flow_id, "refund_id": refund_id, "finished": finished})

    async def ledger_listing(self, request: Request) -> Response:
        entries = self.ledger.entries()
        totals = {name: sum(entry[name] for entry in entries)
                  for name in ("released", "paid", "release_conflicts", "payout_conflicts")}
        return JSONResponse({"refunds": entries, "totals": {"refunds": len(entries), **totals}})
