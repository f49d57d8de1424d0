"""The harness's own OpenTelemetry: round CLIENT spans, flow spans, the run with its chaos, sampling, the duration
metric, and the ids in the journal, as a real run exports them to a real OTLP receiver (oteltap).

Two real runs (about 9 s each) and a unit check of the request bytes:
- the embedded shop with per-process keys and round-robin routing: a retry that lands on the other replica cannot
  open the state (-32602, logged `unknown key`), one that lands on its own replica finds it expired (the leads think
  past the states' lifetime: `expired`); reconciliation puts each round's own logged reason under its span; the
  replicas export too, so each rejected round's SERVER span is the child of its CLIENT span, and the replica's log
  line names the same trace;
  `OTEL_TRACES_SAMPLER_ARG=0`, so only the failed flows are exported;
- the refund desk with the SDK's own tracing on (`tests/servers/traced_desk.py`), share 1: every flow exported,
  and each of the desk's SERVER spans is the child of the harness's CLIENT span for that round.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from harness.mrtr.wire import CallFrame, Envelope
from harness.telemetry.conventions import DURATION_BUCKETS
from harness.telemetry.export import resource
from harness.telemetry.marks import FlowTrace, Sampling, kept
from tests.harness_run import SCENARIOS, Finished, leaks, run_harness
from tests.otlp import (
    SPAN_KIND_CLIENT,
    SPAN_KIND_INTERNAL,
    SPAN_KIND_SERVER,
    OtlpReceiver,
    attributes,
    hex_id,
    otlp_receiver,
)
from tests.servers import start_server

SHOP = """
name = "otel-trace"
seed = 7
duration = "3s"
time_scale = 600
grace = "5s"

[target]
replicas = 2
keyring = "ephemeral"

[load]
arrival_rate = 8
routing = "round-robin"

[[flows]]
kind = "refund"
amount = "above-limit"

[[flows]]
kind = "refund"
amount = "below-limit"

[leads]
think = { dist = "constant", value = "15m" }  # past the states' 10 min: a retry that stays on its replica expires

[[chaos]]
at = "1s"
action = "restart"
replica = 2
"""

DESK = """
name = "traced-desk"
seed = 3
duration = "2s"
time_scale = 600
grace = "5s"

[target]
kind = "external"
urls = ["{url}"]

[load]
arrival_rate = 4

[[flows]]
kind = "call"
tool = "refund_item"
arguments = [{{ order_id = "O-1001" }}]
answers = {{ sku = ["mug"] }}

[leads]
decline = 0.0
cancel = 0.0
abandon = 0.0
"""


API_KEY = "otlp-key-5d1c9a77e0"
"""A backend's API key in `OTEL_EXPORTER_OTLP_HEADERS`: read by the exporter, written nowhere."""


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as running:
        yield running


@pytest.fixture(scope="module")
def shop_run(receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory) -> Finished:
    folder = tmp_path_factory.mktemp("shop")
    scenario = folder / "shop.toml"
    scenario.write_text(SHOP)
    return run_harness(scenario, folder / "results", "--otlp", receiver.url,
                       env={"OTEL_TRACES_SAMPLER_ARG": "0", "OTEL_EXPORTER_OTLP_HEADERS": f"x-api-key={API_KEY}"})


def _is_span_id(value: object) -> bool:
    return isinstance(value, str) and len(value) == 16 and all(c in "0123456789abcdef" for c in value)


def _by_id(receiver: OtlpReceiver) -> dict[tuple[str, str], object]:
    return {(hex_id(span.trace_id), hex_id(span.span_id)): span for span in receiver.spans()}


def test_a_traced_round_carries_its_traceparent_and_an_untraced_one_the_same_bytes_as_ever() -> None:
    envelope = Envelope({"elicitation": {}}, ("mrtr-harness", "1"))
    frame = CallFrame(envelope, "issue_refund", {"quote_id": "q-1"})
    plain = frame.body(7, {"release": {"action": "accept"}}, "v1.state")
    assert plain == (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"issue_refund",'
                     b'"arguments":{"quote_id":"q-1"},"inputResponses":{"release":{"action":"accept"}},'
                     b'"requestState":"v1.state","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
                     b'"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},'
                     b'"io.modelcontextprotocol/clientInfo":{"name":"mrtr-harness","version":"1"}}}}')
    trace = FlowTrace()
    span = trace.new_span()
    traced = orjson.loads(frame.body(7, {"release": {"action": "accept"}}, "v1.state",
                                            trace.traceparent(span)))
    meta = traced["params"].pop("_meta")
    assert meta.pop("traceparent") == f"00-{trace.trace_id:032x}-{span}-01" and len(span) == 16
    expected = orjson.loads(plain)
    assert meta == expected["params"].pop("_meta")
    assert traced == expected
    more = [trace.new_span() for _ in range(300)]  # a flow's span ids: unique in its trace, none the flow span's
    assert len({span, *more}) == 301 and trace.trace_text[16:] not in more
    assert all(len(one) == 16 and int(one, 16) for one in more)


def test_the_sampled_share_is_drawn_from_the_seed_and_the_flow_id_and_every_failed_flow_is_kept() -> None:
    ids = [f"w{worker}-{n:06d}" for worker in range(2) for n in range(2000)]
    tenth = {flow_id for flow_id in ids if kept(7, flow_id, 0.1, False)}
    assert tenth == {flow_id for flow_id in ids if kept(7, flow_id, 0.1, False)}  # a rerun keeps the same flows
    assert 300 < len(tenth) < 500 and tenth != {flow_id for flow_id in ids if kept(8, flow_id, 0.1, False)}
    assert all(kept(7, flow_id, 0.0, True) for flow_id in ids) and not any(kept(7, f, 0.0, False) for f in ids)
    sampling = Sampling(7, 0.1)  # what the load judges each flow with when it ends
    assert {flow_id for flow_id in ids if sampling.kept(flow_id, False, "completed")} == tenth
    assert tenth == {flow_id for flow_id in ids if zlib.crc32(f"7:{flow_id}".encode()) < 0.1 * 2**32}  # the rule
    assert all(sampling.kept(flow_id, False, "rejected") and sampling.kept(flow_id, True, "completed")
               for flow_id in ids)


def test_every_rejected_flow_is_exported_with_its_rounds_ids_in_the_journal_and_the_reason_under_the_round(
        shop_run: Finished, receiver: OtlpReceiver) -> None:
    assert shop_run.code == 0, shop_run.output
    journal = shop_run.journal()
    rejected = [r for r in journal if r["type"] == "round" and r["code"] == "-32602"]
    assert rejected, "the scenario should have rounds rejected for unknown key"
    receiver.wait_for_spans(lambda span: span.kind == SPAN_KIND_CLIENT and span.status.code == 2, len(rejected))
    spans = _by_id(receiver)
    for record in rejected:
        assert len(record["trace_id"]) == 32 and len(record["span_id"]) == 16
        span = spans[(record["trace_id"], record["span_id"])]
        assert span.kind == SPAN_KIND_CLIENT and span.name == f"tools/call {record['tool']}"
        said = attributes(span)
        assert said["mcp.method.name"] == "tools/call" and said["gen_ai.tool.name"] == record["tool"]
        assert said["gen_ai.operation.name"] == "execute_tool" and said["mcp.protocol.version"] == "2026-07-28"
        assert said["error.type"] == "-32602" and said["rpc.response.status_code"] == "-32602"
        assert said["server.address"] == "127.0.0.1" and said["mrtr.round"] == record["round"]
        assert said["mrtr.flow.id"] == record["flow_id"] and said["mrtr.replica"] == record["replica"]
        flow = spans[(record["trace_id"], hex_id(span.parent_span_id))]
        assert flow.kind == SPAN_KIND_INTERNAL and attributes(flow)["mrtr.flow.outcome"] == "rejected"
    wanted = {(record["trace_id"], record["span_id"]) for record in rejected}  # the replicas' side, joined
    servers = receiver.wait_for_spans(lambda span: span.kind == SPAN_KIND_SERVER
                                      and (hex_id(span.trace_id), hex_id(span.parent_span_id)) in wanted,
                                      len(rejected))
    assert {(hex_id(span.trace_id), hex_id(span.parent_span_id)) for span in servers} == wanted
    assert all(attributes(span)["error.type"] == "-32602" and span.name.startswith("tools/call ") for span in servers)
    reasons = receiver.wait_for_spans(lambda span: span.name.startswith("mrtr.reconciled "), len(rejected))
    under = {(hex_id(span.trace_id), hex_id(span.parent_span_id)): attributes(span) for span in reasons}
    own = _logged_reasons(journal, rejected)  # each rejected round with the line its own replica logged for it
    assert {"unknown key", "expired"} <= set(own.values()), own  # two reasons: a round given another's fails
    for record in rejected:
        reason = own[(record["trace_id"], record["span_id"])]
        assert under[(record["trace_id"], record["span_id"])]["mrtr.rejection.reason"] == reason, (record, reason)
    flows = [r for r in journal if r["type"] == "flow"]
    failed_flows = {r["flow_id"] for r in journal if r["type"] == "round" and r["code"] is not None} \
        | {f["flow_id"] for f in flows if f["outcome"] in ("rejected", "error", "rounds_exceeded")}
    assert {f["flow_id"] for f in flows if "trace_id" in f} == failed_flows
    exported_flows = {attributes(span)["mrtr.flow.id"] for span in receiver.spans()
                      if span.name.startswith("mrtr.flow ")}
    assert exported_flows == failed_flows
    rounds = [r for r in journal if r["type"] == "round"]
    assert all(_is_span_id(r.get("span_id")) for r in rounds), "every round of a traced run carries its span id"
    clients = {(hex_id(s.trace_id), hex_id(s.span_id)) for s in receiver.spans() if s.kind == SPAN_KIND_CLIENT}
    traces = {r["flow_id"]: r["trace_id"] for r in journal if r["type"] == "start"}
    assert {(traces[r["flow_id"]], r["span_id"]) for r in rounds if r["flow_id"] in failed_flows} <= clients
    assert any(f["outcome"] == "completed" for f in flows), "share 0: the completed flows were left out"


def _logged_reasons(journal: list[dict], rejected: list[dict]) -> dict[tuple[str, str], str]:
    """Each rejected round, by (trace id, span id), with the reason its replica logged for it: the rejection
    lines of the same trace from the replica that served the round, in order, one line for one round (a line
    unpaired, or a round without its line, fails here)."""
    lines: dict[tuple[str, str], list[str]] = {}
    for r in journal:
        if r["type"] == "rejection":
            assert "trace_id" in r, f"a rejection logged outside a traced request: {r}"
            lines.setdefault((r["trace_id"], r["replica"]), []).append(r["reason"])
    rounds: dict[tuple[str, str], list[dict]] = {}
    for r in sorted(rejected, key=lambda r: r["sent"]):
        rounds.setdefault((r["trace_id"], r["replica"]), []).append(r)
    assert rounds.keys() == lines.keys(), (sorted(rounds.keys() ^ lines.keys()), lines)
    paired = {}
    for key, of_trace in rounds.items():
        assert len(of_trace) == len(lines[key]), (key, of_trace, lines[key])
        paired |= {(r["trace_id"], r["span_id"]): reason for r, reason in zip(of_trace, lines[key], strict=True)}
    return paired


def test_the_otlp_headers_are_written_nowhere(shop_run: Finished) -> None:
    assert shop_run.code == 0, shop_run.output
    assert leaks(shop_run, {"OTEL_EXPORTER_OTLP_HEADERS": API_KEY}, jwts=False) == []


def test_the_service_is_named_mrtr_harness_unless_otel_service_name_says_and_carries_the_run_id(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    assert resource("run-1").attributes["service.name"] == "mrtr-harness"
    assert resource("run-1").attributes["mrtr.run.id"] == "run-1"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "nightly-load")
    assert resource("run-1").attributes["service.name"] == "nightly-load"


def test_otlp_wants_an_http_url(tmp_path: Path) -> None:
    finished = run_harness(SCENARIOS / "smoke.toml", tmp_path, "--otlp", "collector:4318")
    assert finished.code == 2 and "--otlp needs an http(s) URL" in finished.output
    assert finished.folder is None  # refused before anything started


def test_the_run_span_has_the_chaos_as_children_and_the_metrics_arrive_the_duration_in_the_conventions_buckets(
        shop_run: Finished, receiver: OtlpReceiver) -> None:
    assert shop_run.code == 0, shop_run.output
    run = receiver.wait_for_spans(lambda span: span.name == "mrtr.run otel-trace")[0]
    chaos = receiver.wait_for_spans(lambda span: span.name == "mrtr.chaos restart")[0]
    assert chaos.trace_id == run.trace_id and chaos.parent_span_id == run.span_id
    assert attributes(chaos)["mrtr.chaos.target"] == "r2"
    metric = receiver.wait_for_metric("mcp.client.operation.duration", where=lambda metric: any(  # the run's own
        attributes(point)["gen_ai.tool.name"] == "issue_refund" for point in metric.histogram.data_points))[-1]
    assert metric.unit == "s"
    points = metric.histogram.data_points
    assert points and all(list(point.explicit_bounds) == list(DURATION_BUCKETS) for point in points)
    failed = [attributes(point) for point in points if "error.type" in attributes(point)]
    assert {point["error.type"] for point in failed} == {"-32602"}
    assert {point["gen_ai.tool.name"] for point in map(attributes, points)} == {"quote_refund", "issue_refund"}
    rejected = sum(1 for r in shop_run.journal() if r["type"] == "round" and r["code"] == "-32602")
    rounds = [r for r in shop_run.journal() if r["type"] == "round"]
    assert sum(point.count for point in points) == len(rounds)  # every round once, cumulative at the close
    assert sum(point.count for point in points if "error.type" in attributes(point)) == rejected
    assert all(sum(point.bucket_counts) == point.count for point in points)
    errors = receiver.wait_for_metric("mrtr_client_errors_total")[-1]  # the project's counters, the last export
    assert errors.sum.is_monotonic
    assert sum(point.as_double or point.as_int for point in errors.sum.data_points
               if attributes(point).get("code") == "-32602") == rejected


def test_the_servers_span_is_the_child_of_the_rounds_client_span(receiver: OtlpReceiver, tmp_path: Path) -> None:
    desk = start_server("tests.servers.traced_desk", env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url},
                        log=tmp_path / "desk.log")
    try:
        scenario = tmp_path / "desk.toml"
        scenario.write_text(DESK.format(url=desk.url))
        finished = run_harness(scenario, tmp_path / "results", "--otlp", receiver.url,
                               env={"OTEL_TRACES_SAMPLER_ARG": "1"})
    finally:
        desk.stop()
    assert finished.code == 0, finished.output
    flows = [r for r in finished.journal() if r["type"] == "flow"]
    assert flows and all("trace_id" in flow for flow in flows), "share 1: every flow is exported"
    traces = {flow["trace_id"] for flow in flows}
    clients = receiver.wait_for_spans(lambda span: span.kind == SPAN_KIND_CLIENT and hex_id(span.trace_id) in traces,
                                      sum(flow["rounds"] for flow in flows))
    servers = receiver.wait_for_spans(lambda span: span.kind == SPAN_KIND_SERVER and hex_id(span.trace_id) in traces,
                                      len(clients))
    by_span = {(span.trace_id, span.span_id): span for span in clients}
    for server in servers:
        client = by_span[(server.trace_id, server.parent_span_id)]
        assert server.name == client.name == "tools/call refund_item"
        assert attributes(server)["jsonrpc.request.id"] == attributes(client)["jsonrpc.request.id"]
    rounds = [r for r in finished.journal() if r["type"] == "round"]  # share 1: every flow kept, every round there
    starts = {r["flow_id"]: r["trace_id"] for r in finished.journal() if r["type"] == "start"}
    assert rounds and {(starts[r["flow_id"]], r["span_id"]) for r in rounds} \
        == {(hex_id(span.trace_id), hex_id(span.span_id)) for span in clients}


def test_a_locust_workers_flows_are_exported_by_the_masters_fold(receiver: OtlpReceiver, tmp_path: Path) -> None:
    """`--workers 1`: the flows run in the worker, which writes their ids into the journal part it ships; the
    master's live fold folds that part and exports their spans (share 1: every flow), as the part says."""
    scenario = tmp_path / "shop.toml"
    scenario.write_text(SHOP.replace('duration = "3s"', 'duration = "2s"'))
    finished = run_harness(scenario, tmp_path / "results", "--otlp", receiver.url, "--workers", "1",
                           env={"OTEL_TRACES_SAMPLER_ARG": "1"})
    assert finished.code == 0, finished.output
    assert finished.folder is not None
    flows = [record for line in (finished.folder / "journal-w0.jsonl").read_text().splitlines()
             if (record := orjson.loads(line))["type"] == "flow"]
    assert flows and all(flow["flow_id"].startswith("w0-") and len(flow["trace_id"]) == 32 for flow in flows)
    traces = {flow["trace_id"] for flow in flows}
    spans = receiver.wait_for_spans(lambda span: span.name.startswith("mrtr.flow ")
                                    and hex_id(span.trace_id) in traces, len(flows))
    assert {attributes(span)["mrtr.flow.id"] for span in spans} == {flow["flow_id"] for flow in flows}


def test_the_live_folds_telemetry_keeps_only_flows_in_flight_and_sends_the_spans_of_the_flows_the_load_marked(
        receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fold's side alone (no run: about 0.1 s): journal records in, the spans of the flow whose `flow` record the
    load marked kept out to the receiver, the flows ended forgotten, the unmarked one never sent, and neither a marked
    flow whose start names no trace id nor one whose mark is another trace's (a damaged journal) sends anything."""
    from harness.folding.flow_traces import FlowTelemetry
    from harness.telemetry.export import FoldSpanSink

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    telemetry = FlowTelemetry(FoldSpanSink("fold-unit"), None)
    traces = {"f-1": FlowTrace(), "f-2": FlowTrace(), "f-other": FlowTrace()}
    for flow_id, trace in traces.items():
        telemetry.add({"type": "start", "t": 1.0, "flow_id": flow_id, "flow": "call", "host": "default",
                       "trace_id": trace.trace_text, "lead": 3})
    telemetry.add({"type": "start", "t": 1.0, "flow_id": "f-no-trace", "flow": "call", "trace_id": "not a trace id"})
    rounds = [("f-1", None), ("f-2", None), ("f-1", "-32602"), ("f-no-trace", "-32602"), ("f-other", "-32602")]
    for number, (flow_id, code) in enumerate(rounds, 1):
        telemetry.add({"type": "round", "t": 1.5, "flow_id": flow_id, "flow": "call", "tool": "refund_item",
                       "round": number, "replica": "r1", "sent": 1.2, "server_time": 0.3, "outcome": "ok",
                       "http_status": 200, "code": code, "span_id": f"{number:016x}", "request_id": number,
                       "server": "127.0.0.1:8123"})
    assert set(telemetry.in_flight) == {"f-1", "f-2", "f-other", "f-no-trace"}
    marks = {"f-1": traces["f-1"].trace_text, "f-2": None, "f-no-trace": "0" * 31 + "1",
             "f-other": traces["f-1"].trace_text}
    for flow_id, mark in marks.items():
        end = {"type": "flow", "t": 2.0, "flow_id": flow_id, "flow": "call", "outcome": "completed"}
        telemetry.add(end if mark is None else {**end, "trace_id": mark})
    assert telemetry.in_flight == {}, "a flow's rounds go with its end"
    telemetry.close()
    mine = {trace.trace_text: flow_id for flow_id, trace in traces.items()}
    spans = receiver.wait_for_spans(lambda span: hex_id(span.trace_id) in mine, 3)
    assert {mine[hex_id(span.trace_id)] for span in spans} == {"f-1"}, "only the flow the load marked kept"
    clients = {hex_id(span.span_id): attributes(span) for span in spans if span.kind == SPAN_KIND_CLIENT}
    assert set(clients) == {f"{1:016x}", f"{3:016x}"}
    assert clients[f"{3:016x}"]["error.type"] == "-32602" and clients[f"{3:016x}"]["server.port"] == 8123
    flow = next(span for span in spans if span.kind == SPAN_KIND_INTERNAL)
    assert hex_id(flow.span_id) == traces["f-1"].trace_text[16:] and attributes(flow)["mrtr.lead"] == 3
    assert not [span for span in receiver.spans() if attributes(span).get("mrtr.flow.id") in {"f-no-trace", "f-other"}]


def test_the_duration_histogram_counts_a_batch_of_rounds_by_their_fields_and_leaves_damaged_rounds_out(
        receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fold's `mcp.client.operation.duration` alone: rounds set aside by their journal fields and counted a batch
    at a time; two HTTP statuses of one JSON-RPC code share one series (its `error.type`), an HTTP failure's series
    is named by its status, and a round whose time or tool is not the journal's type is not counted anywhere."""
    from harness.telemetry.client_metrics import ClientDurations

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    durations = ClientDurations("durations-unit")
    tool = "durations-unit-tool"  # the receiver is shared: this test's points are this tool's
    for seconds in (0.004, 0.03, 0.03, 7.0):
        durations.record_round(seconds, tool, None, 200, "2026-07-28")
    durations.record_round(0.015, tool, "-32602", 200, "2026-07-28")
    durations.add_pending()  # a batch done: the next round of the same series starts a new one
    durations.record_round(0.5, tool, "-32602", 400, "2026-07-28")
    durations.record_round(0.2, tool, "http_error", 503, "2026-07-28")
    for damaged in ("0.1", None, [0.1]):
        durations.record_round(damaged, tool, None, 200, "2026-07-28")
    durations.record_round(0.1, [tool], None, 200, "2026-07-28")
    durations.record_round(0.1, 7, None, 200, "2026-07-28")
    durations.close()
    (mine,) = receiver.wait_for_metric("mcp.client.operation.duration", where=lambda metric: any(
        attributes(point)["gen_ai.tool.name"] == tool for point in metric.histogram.data_points))
    points = {attributes(point).get("error.type"): point for point in mine.histogram.data_points}
    assert set(points) == {None, "-32602", "503"}
    ok, rejected, http = points[None], points["-32602"], points["503"]
    assert (ok.count, ok.sum, ok.min, ok.max) == (4, pytest.approx(7.064), 0.004, 7.0)
    assert list(ok.bucket_counts) == [1, 0, 2, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    assert (rejected.count, rejected.min, rejected.max) == (2, 0.015, 0.5)
    assert rejected.bucket_counts[1] == 1 and rejected.bucket_counts[5] == 1
    assert (http.count, http.sum) == (1, 0.2)
