"""One shop MCP replica: the single command every backend starts (`mrtr-harness shop replica`).

Every way the harness runs a replica (a local process, a container, a compose service)
goes through this one entry point with the same options, so a replica behaves the same
whichever backend started it, and a failure mode is chosen by options alone: the store
(`memory` = records one process sees), the key ring (`ephemeral` = the key that dies on
restart), the TTL, the server name (the audience), the clock offset.

OpenTelemetry's own variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, ...) make it export the
MCP SDK's SERVER span for each request over OTLP/HTTP, joined to the caller's trace by the `traceparent` in
`params._meta`; every log line inside a traced request carries `trace_id=<32 hex>` (docs/tracing.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from harness.config.durations import parse_duration
from harness.config.replica_knobs import KNOBS, ReplicaKnob
from harness.errors import ExitCode
from harness.mrtr.reasons import REQUEST_STATE_LOGGER, parse_rejection
from harness.shop.leak import leaking
from harness.shop.tracing import TraceIdFilter, start_tracing

logger = logging.getLogger("harness.shop.replica")


Transport = Literal["http", "stdio"]
"""How a replica is reached: Streamable HTTP on `--port` (the default), or its standard input and output (`--transport
stdio`: one client, the process that started it; the harness's stdio target, `harness.targets.stdio`)."""

LogFormat = Literal["python", "typescript"]
"""How a replica writes its rejection lines: as the Python SDK logs them (the SDK's own line, the default), or as
the TypeScript SDK's server reports them (`--log-format typescript`), so a run reads a second implementation's
format end to end (`harness.logs.adapters`)."""

TYPESCRIPT_REASONS: Final = {"seal": "mac", "malformed": "malformed", "expired": "expired", "principal": "bind"}
"""The reasons the TypeScript SDK's `createRequestStateCodec` gives for the ones it shares with the Python SDK;
a reason it has no word for is written as the Python SDK spells it (a custom `verify` hook's message)."""


class ReplicaSettings(BaseModel):
    """Everything that makes one replica differ from another, validated once at start."""

    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535)
    transport: Transport = "http"
    api: str = Field(description="base URL of the shop's API")
    store: str = KNOBS["store"].default
    answers_store: str | None = None
    keyring: str = "ephemeral"
    ttl: float = Field(default=parse_duration(KNOBS["ttl"].default), gt=0)
    name: str = Field(default=KNOBS["name"].default, min_length=1,
                      description="server name, sealed into every state as its audience")
    replica_id: str | None = None
    clock_offset: float = 0.0
    leak: float = Field(default=0.0, ge=0, description="MB a minute this replica keeps while it serves (a planted "
                                                         "leak: `harness.shop.leak`)")
    principal_header: str | None = None
    allowed_hosts: list[str] = Field(default_factory=list)
    sse: bool = False
    serve_2025: bool = False
    payment_rounds: int | None = Field(default=None, ge=0)
    auth_issuer: str | None = Field(default=None, description="the OAuth issuer whose tokens this replica accepts")
    auth_server: str | None = None
    auth_audience: str = "mcp-shop"
    resource_url: str | None = None
    log_format: LogFormat = "python"

    @model_validator(mode="after")
    def _one_binding(self) -> ReplicaSettings:
        if self.auth_issuer is not None and self.principal_header is not None:
            raise ValueError("--principal-header and --auth-issuer both bind states to a caller: give one "
                             "(with auth on, states are bound to the token's client, issuer and subject)")
        if self.auth_issuer is None and (self.resource_url or self.auth_server):
            raise ValueError("--resource-url and --auth-server need --auth-issuer")
        if self.transport == "http" and self.port is None:
            raise ValueError("--port is needed to serve over HTTP (or give --transport stdio)")
        if self.transport == "stdio" and (self.auth_issuer or self.principal_header or self.sse or self.serve_2025
                                          or self.leak):
            raise ValueError("--transport stdio takes no --auth-issuer, --principal-header, --sse, --serve-2025 or "
                             "--leak: they are HTTP's (a stdio server's one client is the process that started it)")
        return self

    @property
    def resource(self) -> str:
        """This replica's URL as a protected resource (RFC 9728 `resource`)."""
        return self.resource_url or f"http://{self.host}:{self.port}/mcp"

    @field_validator("api")
    @classmethod
    def _api_is_http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @property
    def label(self) -> str:
        return self.replica_id or (f"replica-{self.port}" if self.port is not None else f"replica-{os.getpid()}")


def parse_args(argv: Sequence[str] | None) -> ReplicaSettings:
    parser = argparse.ArgumentParser(prog="mrtr-harness shop replica",
                                     description="Run one shop MCP replica (Streamable HTTP: stateless 2026-07-28; "
                                                 "2025-era clients get a session; or --transport stdio: one client "
                                                 "over standard input and output).")
    add_arguments(parser)
    return settings_from(parser, parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The replica's options, shared by `shop replica` and `python -m harness.shop.server`."""
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port to listen on (needed over HTTP)")
    parser.add_argument("--transport", choices=("http", "stdio"), default="http",
                        help="http (default): Streamable HTTP on --port, with /healthz and /metrics; stdio: one "
                             "client over standard input and output (the process that started it), logs on stderr")
    parser.add_argument("--api", required=True, help="base URL of the shop's API, e.g. http://127.0.0.1:8100")
    _knob(parser, KNOBS["store"])
    parser.add_argument("--answers-store", default=None,
                        help="where the once-only record of answered states lives, when not in --store "
                             "(e.g. memory: reproduces a replay that passes on another replica)")
    parser.add_argument("--keyring", default="ephemeral",
                        help="sealing keys: file:PATH (re-read on change), env:VARIABLE, or ephemeral (default; "
                             "a per-process key that dies with the process)")
    _knob(parser, KNOBS["ttl"])
    _knob(parser, KNOBS["name"])
    parser.add_argument("--replica-id", help="label for this replica in logs and metrics (default replica-PORT)")
    _knob(parser, KNOBS["clock_offset"])
    _knob(parser, KNOBS["leak"])
    parser.add_argument("--principal-header",
                        help="bind every state to the value of this request header (reproduces principal checks)")
    parser.add_argument("--allowed-host", action="append", default=[], dest="allowed_hosts",
                        help="extra Host header value to accept (repeatable; '*' accepts any), for proxies "
                             "and containers")
    parser.add_argument("--sse", action="store_true", help="answer in SSE mode instead of plain JSON")
    parser.add_argument("--serve-2025", action="store_true",
                        help="serve 2025-era clients too: ask them over their session (elicitation/create) "
                             "instead of with input requests, which reach them as -32603")
    parser.add_argument("--payment-rounds", type=int, default=None,
                        help="URL-mode rounds pay_refund asks before it answers \"Not paid\" (default 4; 0: no "
                             "count, so an abandoned page asks until the client's round cap)")
    parser.add_argument("--auth-issuer", default=None,
                        help="be an OAuth resource server: accept only JWT access tokens from this issuer "
                             "(the shop's authorization server); issue_refund then needs refunds:write")
    parser.add_argument("--auth-server", default=None,
                        help="where this replica reaches the issuer for its keys and revocation feed "
                             "(default: the issuer URL)")
    parser.add_argument("--auth-audience", default="mcp-shop", help="the tokens' aud it accepts (default mcp-shop)")
    parser.add_argument("--log-format", choices=("python", "typescript"), default="python",
                        help="how rejection lines are written: as the Python SDK logs them (default), or as the "
                             "TypeScript SDK's server reports them through onerror (`Error: requestState "
                             "verification rejected tools/call: mac`)")
    parser.add_argument("--resource-url", default=None,
                        help="this replica's MCP URL as clients reach it, for the protected-resource metadata "
                             "(default http://HOST:PORT/mcp)")


def _knob(parser: argparse.ArgumentParser, knob: ReplicaKnob) -> None:
    """A knob chaos turns, as its row in the one table gives it (`harness.config.replica_knobs`)."""
    parser.add_argument(knob.option, default=knob.default, help=knob.help)


def settings_from(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ReplicaSettings:
    """Validate the options; one clear error naming the option, then exit 2."""
    try:
        values = vars(args) | {"ttl": parse_duration(args.ttl), "clock_offset": _signed_seconds(args.clock_offset),
                               "leak": _megabytes_a_minute(args.leak)}
        return ReplicaSettings(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        if not error["loc"]:  # a rule across options: its message names them
            parser.error(str(error["msg"]).removeprefix("Value error, "))
        parser.error(f"--{str(error['loc'][0]).replace('_', '-')}: {error['msg']}")
    except ValueError as exc:
        parser.error(str(exc))
    raise AssertionError("unreachable")


def _megabytes_a_minute(text: str) -> float:
    """--leak's value: MB a minute, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--leak: {text!r} is not a number of MB a minute (e.g. 50)") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"--leak: {text!r} is not a number of MB a minute, 0 or more (e.g. 50)")
    return value


def _signed_seconds(text: str) -> float:
    text = str(text).strip()
    sign = -1.0 if text.startswith("-") else 1.0
    return sign * parse_duration(text.lstrip("+-"))


class _ReplicaFilter(logging.Filter):
    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def filter(self, record: logging.LogRecord) -> bool:
        record.replica = self.label
        return True


class _UtcFormatter(logging.Formatter):
    """Every line stamped in UTC with milliseconds, as the harness's log readers expect."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class _TypeScriptRejections(logging.Formatter):
    """`--log-format typescript`: a rejection written as `@modelcontextprotocol/server` 2.x reports it through
    `console.error(error)` in its onerror (the error's line, then a stack frame); every other record as before."""

    def __init__(self, plain: logging.Formatter) -> None:
        super().__init__()
        self._plain = plain

    def format(self, record: logging.LogRecord) -> str:
        if record.name == REQUEST_STATE_LOGGER:
            parsed = parse_rejection(record.getMessage())
            if parsed is not None:
                method, reason = parsed
                return (f"Error: requestState verification rejected {method}: {TYPESCRIPT_REASONS.get(reason, reason)}"
                        "\n    at Server._verifyRequestState (mcp-shop.mjs:1:1)")
        return self._plain.format(record)


def configure_logging(label: str, log_format: LogFormat = "python") -> None:
    """One self-contained line per record on stderr: time, level, replica, trace id (inside a traced request),
    logger, message.

    Forced over whatever the SDK set up (it installs rich's handler when rich is present,
    which pads and blanks repeated times), so every rejection line carries its own
    timestamp and replica name and a collector can parse it line by line.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_ReplicaFilter(label))
    handler.addFilter(TraceIdFilter())
    plain = _UtcFormatter("%(asctime)s %(levelname)s replica=%(replica)s%(trace)s %(name)s: %(message)s")
    handler.setFormatter(plain if log_format == "python" else _TypeScriptRejections(plain))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    for noisy in ("httpx", "mcp.server.streamable_http_manager", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


ServerBuilder = Callable[..., Any]
"""Makes the replica's MCP server: called with name, store, answers, api_url and security (and serve_2025,
payment_rounds when set; for a resource server, token_verifier and auth)."""


def build_app(settings: ReplicaSettings, build: ServerBuilder, *, on_stop: Callable[[], None] | None = None) -> Any:
    """The replica's ASGI app: the MCP server `build` makes, at /mcp, with /metrics and /healthz."""
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    server, codec, store, registry, closing = build_server(settings, build, on_stop=on_stop)

    @server.custom_route("/healthz", methods=["GET"], include_in_schema=False)
    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "replica": settings.label, "name": settings.name, "pid": os.getpid(),
                             "ttl": settings.ttl, "store": store.kind, "keys": list(codec.fingerprints),
                             "clock_offset": settings.clock_offset})

    # 2026-07-28 requests are stateless whatever this says (the SDK routes them by their header); a 2025 client
    # gets a session, so the server knows what it declared. It is asked on its call's stream, which only SSE mode
    # has (in JSON mode the SDK gives a session no back-channel): serving 2025 means answering in SSE mode.
    app = server.streamable_http_app(stateless_http=False, json_response=not (settings.sse or settings.serve_2025),
                                     transport_security=_transport_security(settings, TransportSecuritySettings),
                                     host=settings.host)
    if settings.auth_issuer is not None:
        from harness.shop.token_checks import gate_scopes

        gate_scopes(app, settings.resource)
    app = leaking(_naming_the_replica(app, settings.label), settings.leak)
    return closing_at_shutdown(app, closing), codec, store


def build_server(settings: ReplicaSettings, build: ServerBuilder, *,
                 on_stop: Callable[[], None] | None = None) -> tuple[Any, Any, Any, Any, Callable[[], None]]:
    """The replica's MCP server as `build` makes it, whatever it is served over: (server, codec, store, its
    metrics registry, what closes it when it stops)."""
    from prometheus_client import CollectorRegistry

    from harness.metrics.instrument import instrument
    from harness.shop.planted import planted_guard
    from harness.shop.sealing import build_security
    from harness.shop.store import open_store

    bind = _header_principal(settings.principal_header) if settings.principal_header else None
    extra = {"bind_principal": bind} if bind else {}  # with auth on: the SDK's own binding, never overridden
    guard = planted_guard(settings.keyring, settings.label)  # MRTR_SHOP_PLANTED: off unless set
    security, codec = build_security(settings.keyring, ttl=settings.ttl, audience=None,
                                     clock_offset=settings.clock_offset, guard=guard, **extra)
    store = open_store(settings.store)
    answers = open_store(settings.answers_store) if settings.answers_store else store
    eras = {"serve_2025": True} if settings.serve_2025 else {}
    rounds = {"payment_rounds": settings.payment_rounds} if settings.payment_rounds is not None else {}
    server = build(name=settings.name, store=store, answers=answers, api_url=settings.api, security=security,
                   **eras, **rounds, **_resource_server(settings))
    registry = CollectorRegistry()
    instrument(server, registry=registry)
    stopped = guard.stopped if guard else None  # a clean stop: a planted fault tells a restart from a kill
    return server, codec, store, registry, _all_of(store.close, stopped, on_stop)


def _all_of(*steps: Callable[[], None] | None) -> Callable[[], None]:
    """One call doing each step given, in order, each whatever the one before it raised."""

    def run() -> None:
        for step in steps:
            if step is not None:
                try:
                    step()
                except Exception:  # the next step still runs: the process is stopping
                    logger.exception("while stopping")

    return run


def _resource_server(settings: ReplicaSettings) -> dict[str, Any]:
    """With --auth-issuer, the SDK's token verifier and auth settings for the server; otherwise nothing."""
    if settings.auth_issuer is None:
        return {}
    from harness.shop.token_checks import JwtVerifier, auth_settings

    return {"token_verifier": JwtVerifier(settings.auth_issuer, settings.auth_audience, settings.auth_server),
            "auth": auth_settings(settings.auth_issuer, settings.resource)}


SERVED_BY_HEADER = b"x-served-by"


def _naming_the_replica(app: Any, label: str) -> Any:
    """The app, its every HTTP answer carrying `X-Served-By: <replica id>`.

    Behind a balancer a client sends every round to one URL; this header tells it which
    replica answered, so that rounds are counted per replica as the logs' rejections are.
    """
    value = label.encode("latin-1", "replace")

    async def named(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_named(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), (SERVED_BY_HEADER, value)]}
            await send(message)

        await app(scope, receive, send_named)

    return named


def closing_at_shutdown(app: Any, close: Callable[[], None]) -> Any:
    """The app, calling `close` when the server shuts it down (ASGI lifespan), before it says it is done.

    uvicorn ends a process stopped by SIGTERM by raising the signal again once it has shut
    down, so code after `Server.run()` never runs: the lifespan is the last word a process
    gets. Closing the store there folds a sqlite store's write-ahead log into its file.
    """

    async def closing(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return

        async def send_closing(message: Any) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                close()
            await send(message)

        await app(scope, receive, send_closing)

    return closing


def _transport_security(settings: ReplicaSettings, cls: Any) -> Any:
    """Accept loopback hosts plus whatever a proxy or container network reaches the replica by."""
    if "*" in settings.allowed_hosts:
        return cls(enable_dns_rebinding_protection=False)
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", *settings.allowed_hosts]
    origins = [f"http://{host}" for host in hosts]
    return cls(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


def _header_principal(header: str) -> Callable[[Any], str | None]:
    def bind(ctx: Any) -> str | None:
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        return headers.get(header) if headers is not None else None

    return bind


# The MCP server itself is given by the caller (`build`: `harness.shop.server.build_replica_server`, imported
# under its own name or as `__main__`), so this module never imports the server and `python -m
# harness.shop.server` can start a replica through it without an import cycle. (Said here, not in the module's
# docstring: that is `shop replica --help`.)
def main(argv: Sequence[str] | None, build: ServerBuilder) -> int:
    """Parse the replica's options and serve until stopped: the one entry point every launch goes through."""
    settings = parse_args(argv)
    return serve(settings, build)


def serve(settings: ReplicaSettings, build: ServerBuilder) -> int:
    import uvicorn

    from harness.shop.sealing import KeyRingError
    from harness.shop.store import StoreSpecError, StoreUnavailable

    configure_logging(settings.label, settings.log_format)
    stop_tracing = start_tracing(settings.label)  # here, in the replica's own process: after a zygote's fork
    if settings.transport == "stdio":
        return serve_stdio(settings, build, stop_tracing)
    try:
        app, codec, store = build_app(settings, build, on_stop=stop_tracing)
    except (KeyRingError, StoreSpecError, StoreUnavailable) as exc:
        print(f"mrtr-harness shop replica: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    configure_logging(settings.label, settings.log_format)  # again: building MCPServer reconfigures the root logger
    logger.info("serving http://%s:%d/mcp name=%s ttl=%gs store=%s keyring=%s sealing-key=%s clock-offset=%gs",
                settings.host, settings.port, settings.name, settings.ttl, store.kind,
                settings.keyring.split(":", 1)[0], codec.fingerprints[0], settings.clock_offset)
    assert settings.port is not None  # over HTTP: the settings said so
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            lifespan="on")
    uvicorn.Server(config).run()
    return 0


def serve_stdio(settings: ReplicaSettings, build: ServerBuilder, on_stop: Callable[[], None] | None) -> int:
    """Serve the same MCP server over standard input and output (the SDK's stdio transport) until stdin closes.

    The protocol owns stdout; every log line goes to stderr, as over HTTP. Nothing of HTTP's applies: no
    /healthz (its first answer is its readiness), no /metrics, no `X-Served-By` (its one client knows whom it
    started). The leak knob grows its memory per request, as over HTTP.
    """
    import anyio

    from harness.shop.sealing import KeyRingError
    from harness.shop.store import StoreSpecError, StoreUnavailable

    try:
        server, codec, store, _registry, closing = build_server(settings, build, on_stop=on_stop)
    except (KeyRingError, StoreSpecError, StoreUnavailable) as exc:
        print(f"mrtr-harness shop replica: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    configure_logging(settings.label, settings.log_format)  # again: building MCPServer reconfigures the root logger
    logger.info("serving stdio pid=%d name=%s ttl=%gs store=%s keyring=%s sealing-key=%s clock-offset=%gs",
                os.getpid(), settings.name, settings.ttl, store.kind, settings.keyring.split(":", 1)[0],
                codec.fingerprints[0], settings.clock_offset)
    try:
        anyio.run(server.run_stdio_async)
    finally:
        closing()
    return 0
