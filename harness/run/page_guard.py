"""Who may use the live page (`run --web`): the run's control token, the page's own origin, and off loopback a password.

A tab of another site in the operator's browser can send the page a simple POST (a form's),
with the operator's cookies and Basic credentials; it cannot set a header, and cannot read an
answer unless the page serves CORS. So a request that changes the run (any but GET, HEAD and
OPTIONS) needs the per-run token in `X-MRTR-Token` (printed with the URL; the page's own
`fetch` adds it, `token_script`) and an `Origin` / `Sec-Fetch-Site` that is the page's own;
Locust's open CORS is stripped from every answer (`without_cors`). On loopback the page
answers only to a loopback `Host` (a name another site resolves to 127.0.0.1, DNS rebinding,
would otherwise read the page and its token); off loopback every request needs HTTP Basic
with the password in `MRTR_WEB_PASSWORD`. Standard library only: the command line checks the
password's variable before anything starts, and tests ask the guard without loading Locust.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["TOKEN_HEADER", "WEB_PASSWORD_ENV", "PageGuard", "control_token", "same_origin", "token_script",
           "without_cors"]

TOKEN_HEADER = "X-MRTR-Token"
"""The header a request that changes the run carries the run's control token in (a header: no other site's page
can set one without CORS, which the page does not serve)."""
WEB_PASSWORD_ENV = "MRTR_WEB_PASSWORD"
"""The variable holding the page's password (HTTP Basic, any user name) when `--web` listens off loopback."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that only read; any other is a control, however the route is named."""
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""`Host` names a loopback page answers to (a name another site resolves to 127.0.0.1 is refused)."""


@dataclass(frozen=True)
class PageGuard:
    """Who may use the page: the run's control token, and (off loopback) the password every request needs."""

    token: str
    password: str | None = None
    loopback: bool = True

    def refusal(self, method: str, host: str, headers: Any, password: str | None) -> tuple[int, str] | None:
        """(status, why) when a request may not be answered (`password`: its HTTP Basic password); None: it may."""
        if self.loopback and _host_name(host) not in LOOPBACK_HOSTS:
            return 403, f"this page answers only to a loopback address, not {host}"
        if self.password is not None and not _same_secret(password, self.password):
            return 401, f"log in with the password in {WEB_PASSWORD_ENV} (any user name)"
        if method in SAFE_METHODS:
            return None
        if not same_origin(headers, host):
            return 403, "a request from another site's page cannot change this run"
        if not _same_secret(headers.get(TOKEN_HEADER), self.token):
            return 403, f"a request that changes this run needs its control token ({TOKEN_HEADER}, printed with " \
                        "the URL)"
        return None


def control_token() -> str:
    """A fresh per-run token for the page's controls."""
    return secrets.token_urlsafe(24)


def same_origin(headers: Any, host: str) -> bool:
    """Whether a request comes from the page's own origin, as the browser says it (`Sec-Fetch-Site`, `Origin`); a
    request with neither (curl, a script) is taken as such: it must still carry the token."""
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = headers.get("Origin")
    return origin is None or origin in (f"http://{host}", f"https://{host}")


def _same_secret(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def _host_name(host: str) -> str | None:
    """The `Host` header's name, without its port (`[::1]:8089` -> `::1`); None when it is none."""
    try:
        return urlsplit(f"//{host}").hostname
    except ValueError:
        return None


def token_script(token: str) -> str:
    """The page's own requests that change the run carry the token: `fetch` (which Locust's page sends STOP with)
    adds the header to every same-origin request but a GET or HEAD."""
    return ("<script>(() => {const token = " + json.dumps(token) + ", fetchFirst = window.fetch.bind(window);"
            "window.fetch = (input, init) => {const request = new Request(input, init);"
            "if (['GET', 'HEAD'].includes(request.method) || new URL(request.url).origin !== location.origin) "
            "return fetchFirst(request);"
            "const headers = new Headers(request.headers); headers.set(" + json.dumps(TOKEN_HEADER) + ", token);"
            "return fetchFirst(new Request(request, {headers}));};})();</script>")


def without_cors(wsgi_app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """Locust's app with no `Access-Control-*` header on any answer (Locust turns on flask-cors for every origin):
    another site's page can neither read the page (and its token) nor pass a preflight."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            kept = [(name, value) for name, value in headers if not name.lower().startswith("access-control-")]
            return start_response(status, kept, exc_info)

        return wsgi_app(environ, start)

    return app
