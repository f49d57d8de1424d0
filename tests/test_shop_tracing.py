"""The shop's replicas export the SDK's SERVER spans over OTLP, joined to the caller's trace, and log its trace id.

Real parts only: a deployment of real replica processes (forked by the zygote, as a run starts them) exporting to
a real OTLP/HTTP receiver (`tests.otlp`, oteltap), driven by hand-built 2026-07-28 rounds that carry a W3C
`traceparent` in `params._meta`, as the harness's client does when its tracing is on.

Cost: one deployment (API, zygote, one replica: about 2 s) for the module, one more for each of the stop tests
and the late-variables test (the dead collector's starts an interpreter: about 3 s, and 2 s of bounded flush),
and a receiver each; about 20 s in all under -n 4. Every wait is bounded (spans within 30 s; with a 100 ms batch
delay they come at once).
"""

from __future__ import annotations

import json
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.cli.main import main
from harness.logs.parse import LineParser, Rejection
from harness.processes.children import free_port
from harness.shop.orders import build_orders
from harness.shop.tracing import DEFAULT_SERVICE_NAME, tracer_provider
from harness.targets.local_deployment import LocalDeployment, ReplicaOptions
from tests.otlp import SPAN_KIND_SERVER, OtlpReceiver, attributes, hex_id, otlp_receiver

HELD_ORDERS = iter(build_orders().order_ids(needs_confirmation=True))
YES = {"confirm": {"action": "accept", "content": {"release": True}}}
PROTOCOL = "2026-07-28"


class Traced:
    """A receiver and a deployment whose replicas export to it."""

    def __init__(self, receiver: OtlpReceiver, deployment: LocalDeployment) -> None:
        self.receiver, self.deployment = receiver, deployment
        self.url = deployment.replica_urls[0]

    def server_spans(self, trace_id: str, count: int = 1) -> list:
        return self.receiver.wait_for_spans(
            lambda span: span.kind == SPAN_KIND_SERVER and hex_id(span.trace_id) == trace_id, count=count)


def traceparent(trace_id: str, parent: str) -> str:
    return f"00-{trace_id}-{parent}-01"


def post(url: str, tool: str, arguments: dict, *, parent: str | None = None, state: str | None = None,
         responses: dict | None = None) -> httpx.Response:
    """One round built by hand, with `traceparent` in its `_meta` when given."""
    meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"}}
    if parent is not None:
        meta["traceparent"] = parent
    params: dict = {"name": tool, "arguments": arguments, "_meta": meta}
    if state is not None:
        params |= {"requestState": state, "inputResponses": responses or YES}
    return httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params},
                      headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL,
                               "Mcp-Method": "tools/call", "Mcp-Name": tool}, timeout=10)


def first_round(url: str, parent: str | None = None) -> tuple[dict, str]:
    """Quote a held refund, then ask to issue it (traced when `parent` is given): (the arguments, the state)."""
    quote = post(url, "quote_refund", {"order_id": next(HELD_ORDERS)}).json()
    arguments = {"quote_id": quote["result"]["structuredContent"]["quote_id"]}
    asked = post(url, "issue_refund", arguments, parent=parent).json()["result"]
    assert asked["resultType"] == "input_required"
    return arguments, asked["requestState"]


def ids() -> tuple[str, str]:
    """A fresh (trace id, span id), as a client's tracer would make them."""
    return secrets.token_hex(16), secrets.token_hex(8)


def exporting(monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver, delay_ms: int) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", str(delay_ms))
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    with otlp_receiver() as receiver, pytest.MonkeyPatch.context() as monkeypatch:
        exporting(monkeypatch, receiver, delay_ms=100)
        deployment = LocalDeployment(tmp_path_factory.mktemp("traced"), replicas=1)
        try:
            deployment.start()
            yield Traced(receiver, deployment)
        finally:
            deployment.stop()


def rejections(log: Path) -> list[Rejection]:
    found: list[Rejection] = []
    parser = LineParser(found.append)
    for line in log.read_text().splitlines():
        parser.feed(line)
    parser.flush()
    return found


def test_a_round_with_a_traceparent_is_a_server_span_in_the_callers_trace(traced):
    trace_id, parent = ids()
    first_round(traced.url, traceparent(trace_id, parent))
    [span] = traced.server_spans(trace_id)
    assert hex_id(span.parent_span_id) == parent  # the caller's span is its parent: one trace, end to end
    assert span.name == "tools/call issue_refund"
    assert attributes(span) | {"mcp.method.name": "tools/call", "gen_ai.tool.name": "issue_refund"} == \
        attributes(span)
    assert "error.type" not in attributes(span)


def test_a_tampered_state_is_a_32602_server_span_and_a_log_line_with_its_trace_id(traced):
    arguments, state = first_round(traced.url)
    trace_id, parent = ids()
    tampered = state[:-3] + ("AAA" if not state.endswith("AAA") else "BBB")
    answer = post(traced.url, "issue_refund", arguments, parent=traceparent(trace_id, parent), state=tampered)
    assert answer.json()["error"]["code"] == -32602
    [span] = traced.server_spans(trace_id)
    assert hex_id(span.parent_span_id) == parent
    assert attributes(span)["error.type"] == "-32602"
    assert attributes(span)["rpc.response.status_code"] == "-32602"
    log = traced.deployment.replicas[0].log_path
    [line] = [line for line in log.read_text().splitlines() if trace_id in line]
    assert f"replica=r1 trace_id={trace_id} mcp.server.request_state: requestState rejected on tools/call: " \
           "seal" in line
    [rejection] = [found for found in rejections(log) if found.trace_id == trace_id]
    assert (rejection.replica, rejection.reason, rejection.method) == ("r1", "seal", "tools/call")


def test_triage_shows_the_trace_id_of_a_rejection_it_read(traced, tmp_path, capsys):
    arguments, state = first_round(traced.url)
    trace_id, parent = ids()
    post(traced.url, "issue_refund", arguments, parent=traceparent(trace_id, parent), state=state[:-3] + "AAA")
    log = tmp_path / "r1.log"
    log.write_text(traced.deployment.replicas[0].log_path.read_text())
    assert main(["triage", "--once", "--json", "--file", str(log)]) == 1  # seal: tampering, as triage says
    assert trace_id in json.loads(capsys.readouterr().out)["trace_ids"]["seal"]


def test_a_round_without_a_traceparent_logs_the_trace_the_replica_began(traced):
    arguments, state = first_round(traced.url)
    post(traced.url, "issue_refund", arguments, state=state[:-3] + "AAA")
    log = traced.deployment.replicas[0].log_path
    trace_id = rejections(log)[-1].trace_id
    assert trace_id is not None  # a trace of the replica's own, exported: still one a person can look up
    [span] = traced.server_spans(trace_id)
    assert not span.parent_span_id and attributes(span)["error.type"] == "-32602"


def test_a_replica_stopped_gracefully_sends_the_spans_it_still_held(tmp_path, monkeypatch):
    with otlp_receiver() as receiver:
        exporting(monkeypatch, receiver, delay_ms=600_000)  # nothing leaves before the stop flushes it
        deployment = LocalDeployment(tmp_path, replicas=1)
        try:
            deployment.start()
            trace_id, parent = ids()
            first_round(deployment.replica_urls[0], traceparent(trace_id, parent))
            assert not [span for span in receiver.spans() if hex_id(span.trace_id) == trace_id]
        finally:
            deployment.stop()  # SIGTERM: the replica flushes on its way out
        [span] = receiver.wait_for_spans(lambda span: hex_id(span.trace_id) == trace_id)
        assert hex_id(span.parent_span_id) == parent


def test_the_replicas_resource_names_the_shop_and_the_replica(monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    provider = tracer_provider("r2")
    try:
        assert provider.resource.attributes["service.name"] == DEFAULT_SERVICE_NAME
        assert provider.resource.attributes["service.instance.id"] == "r2"
    finally:
        provider.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "checkout-mcp")
    provider = tracer_provider("r1")
    try:
        assert provider.resource.attributes["service.name"] == "checkout-mcp"
    finally:
        provider.shutdown()


def test_a_replica_whose_collector_is_down_still_stops_by_itself(tmp_path, monkeypatch):
    """The exporter would retry a dead collector for a minute; the replica waits for it a bounded time, so
    SIGTERM ends it (not the SIGKILL that follows a stop's 15 s allowance here; the SDK alone would wait 30 s)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "60")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
    deployment = LocalDeployment(tmp_path, replicas=1)
    try:
        deployment.start([ReplicaOptions(launch="module")])  # an interpreter of ours: its exit status is ours
        trace_id, parent = ids()
        first_round(deployment.replica_urls[0], traceparent(trace_id, parent))
        replica = deployment.replicas[0]
        replica.stop(timeout=15)
        assert replica.process is not None and replica.process.returncode == -signal.SIGTERM
    finally:
        deployment.stop()


def test_containers_are_handed_opentelemetrys_variables(monkeypatch, tmp_path):
    """The docker backend's containers do not inherit the harness's environment: they are given every OTEL_*
    variable as the harness has it (a run spec's own settings win). No engine here: the run options it is given."""
    from harness.targets.image import RunSpec, host_python_run_spec
    from harness.telemetry.variables import otel_variables

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "checkout-mcp")
    environment = host_python_run_spec([tmp_path]).options()["environment"]
    assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4318"
    assert environment["OTEL_SERVICE_NAME"] == "checkout-mcp" and environment["HOME"] == "/tmp"
    own = RunSpec(image="shop", python=["python"], environment={"OTEL_SERVICE_NAME": "from-the-image-spec"})
    assert own.options()["environment"]["OTEL_SERVICE_NAME"] == "from-the-image-spec"
    assert otel_variables({"OTEL_SDK_DISABLED": "true", "PATH": "/bin"}) == {"OTEL_SDK_DISABLED": "true"}


def test_a_replica_forked_after_tracing_was_turned_on_exports(tmp_path, monkeypatch):
    """The zygote was started before the variables were set (it inherited none): the replica it forks next is
    handed them, as `run --otlp` has them now."""
    with otlp_receiver() as receiver:
        deployment = LocalDeployment(tmp_path, replicas=1)
        try:
            deployment.start()
            exporting(monkeypatch, receiver, delay_ms=100)
            deployment.restart_replica(0)
            trace_id, parent = ids()
            first_round(deployment.replica_urls[0], traceparent(trace_id, parent))
            [span] = receiver.wait_for_spans(lambda span: hex_id(span.trace_id) == trace_id)
            assert hex_id(span.parent_span_id) == parent
        finally:
            deployment.stop()
