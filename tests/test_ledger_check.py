"""The ledger check a target supplies: its rows read over HTTP, and `abort_on_violation`'s live count.

The ledger is served by a real HTTP server in this process (the standard library's),
whose rows the test changes between reads: what the shop's `GET /ledger` would list.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from harness.targets.ledger_check import LedgerAtApi, LedgerCheck, NewDoubles


def refund(refund_id: str, *, released: int = 1, paid: int = 0) -> dict[str, Any]:
    return {"refund_id": refund_id, "quote_id": f"Q-{refund_id}", "status": "requested", "released": released,
            "paid": paid}


class Shop:
    """What `GET /ledger` answers: the rows in `refunds`, or `status` when it is not 200."""

    def __init__(self) -> None:
        self.refunds: list[dict[str, Any]] = []
        self.status = 200


@pytest.fixture
def shop() -> Iterator[tuple[Shop, str]]:
    state = Shop()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"refunds": state.refunds}).encode()
            self.send_response(state.status if self.path == "/ledger" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_ledger_is_read_as_its_rows_or_as_why_it_could_not_be(shop):
    state, api = shop
    state.refunds = [refund("R-1"), refund("R-2", released=2)]
    assert LedgerCheck(api).read().refunds == state.refunds
    assert LedgerCheck(api).doubled() == 1
    state.status = 500
    unread = LedgerCheck(api).read()
    assert unread.refunds is None
    assert unread.error is not None and unread.error.startswith(f"GET {api}/ledger: HTTPStatusError")
    assert LedgerCheck(api).doubled() is None


def test_a_target_without_the_shop_s_api_supplies_no_ledger_check():
    class Deployment(LedgerAtApi):
        def __init__(self, api_url: str | None) -> None:
            self.api_url = api_url

    assert Deployment(None).ledger_check() is None
    check = Deployment("http://127.0.0.1:9").ledger_check()
    assert check is not None and check.api_url == "http://127.0.0.1:9"


def test_only_a_new_double_release_or_payout_counts_for_the_abort(shop):
    """What the ledger held before the load (another run's, on a shared store) is already there: no abort for it."""
    state, api = shop
    state.refunds = [refund("R-old", released=2)]
    doubles = NewDoubles(LedgerCheck(api))
    doubles.mark()
    assert not doubles.grew()
    state.refunds.append(refund("R-new", paid=1))
    assert not doubles.grew()
    state.refunds.append(refund("R-twice", paid=2))
    assert doubles.grew()


def test_a_ledger_unread_before_the_load_counts_from_its_first_read(shop):
    state, api = shop
    state.status = 500
    doubles = NewDoubles(LedgerCheck(api))
    doubles.mark()
    assert doubles.before is None
    state.status = 200
    state.refunds = [refund("R-old", released=2)]
    assert not doubles.grew()  # the first read is the baseline
    assert not doubles.grew()
    state.refunds.append(refund("R-new", released=3))
    assert doubles.grew()
