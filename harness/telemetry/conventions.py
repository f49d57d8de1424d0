"""The names the harness's spans and metrics carry: OpenTelemetry's MCP conventions first, then the project's `mrtr.*`.

The conventions (semantic conventions for MCP, status Development) name a client span
`{mcp.method.name} {target}` and give its attributes and the metric
`mcp.client.operation.duration`; where they say nothing (MRTR's rounds, flows, leads, the
chaos), the attributes are the project's own, under `mrtr.`. `ATTRIBUTES` documents each one:
docs/metrics.md is written from it.
"""

from __future__ import annotations

from typing import Final, NamedTuple

# --- OpenTelemetry's (MCP, GenAI, RPC, server, error) -----------------------------------------------------

MCP_METHOD: Final = "mcp.method.name"
MCP_PROTOCOL_VERSION: Final = "mcp.protocol.version"
GEN_AI_OPERATION: Final = "gen_ai.operation.name"
GEN_AI_TOOL: Final = "gen_ai.tool.name"
EXECUTE_TOOL: Final = "execute_tool"
ERROR_TYPE: Final = "error.type"
RPC_STATUS: Final = "rpc.response.status_code"
JSONRPC_REQUEST_ID: Final = "jsonrpc.request.id"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"

CLIENT_DURATION: Final = "mcp.client.operation.duration"
"""The conventions' client metric: a histogram in seconds, one value per round."""
DURATION_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""The conventions' explicit bucket boundaries for `mcp.client.operation.duration`."""

SERVICE_NAME_DEFAULT: Final = "mrtr-harness"
"""`service.name` when `OTEL_SERVICE_NAME` does not say another."""

# --- the project's own ---------------------------------------------------------------------------------

RUN_ID: Final = "mrtr.run.id"
FLOW_KIND: Final = "mrtr.flow.kind"
FLOW_ID: Final = "mrtr.flow.id"
FLOW_OUTCOME: Final = "mrtr.flow.outcome"
FLOW_ROUNDS: Final = "mrtr.flow.rounds"
HOST: Final = "mrtr.host"
LEAD: Final = "mrtr.lead"
ROUND: Final = "mrtr.round"
REPLICA: Final = "mrtr.replica"
ROUND_OUTCOME: Final = "mrtr.round.outcome"
STATE_BYTES: Final = "mrtr.request_state.bytes"
SCENARIO: Final = "mrtr.scenario"
SEED: Final = "mrtr.seed"
CHAOS_ACTION: Final = "mrtr.chaos.action"
CHAOS_TARGET: Final = "mrtr.chaos.target"
REJECTION_REASON: Final = "mrtr.rejection.reason"


class Attribute(NamedTuple):
    """One attribute the harness sets: its name, the spans that carry it, what it means."""

    name: str
    spans: str
    meaning: str


ATTRIBUTES: Final[tuple[Attribute, ...]] = (
    Attribute(MCP_METHOD, "round", "`tools/call` (the conventions')."),
    Attribute(MCP_PROTOCOL_VERSION, "round", "the revision the host's client speaks (`2026-07-28`, or a 2025 one)."),
    Attribute(GEN_AI_OPERATION, "round", "`execute_tool` (the conventions')."),
    Attribute(GEN_AI_TOOL, "round", "the tool called."),
    Attribute(JSONRPC_REQUEST_ID, "round", "the round's JSON-RPC id, as the server's span has it."),
    Attribute(SERVER_ADDRESS, "round", "the host of the URL the round was sent to."),
    Attribute(SERVER_PORT, "round", "its port."),
    Attribute(ERROR_TYPE, "round", "a failed round only: the JSON-RPC code (`-32602`), `tool_error`, the HTTP status "
                                   "(`503`, `401`) or the transport failure (`connection_error`, `timeout`, ...)."),
    Attribute(RPC_STATUS, "round", "a JSON-RPC error only: its code, as `error.type`."),
    Attribute(ROUND, "round", "the round's place in its call (1, 2, ...)."),
    Attribute(REPLICA, "round, reconciled", "the replica the round is counted under (as the journal's `replica`); on "
                                            "a reconciled span, the replica that logged the reason."),
    Attribute(ROUND_OUTCOME, "round", "the round's outcome (as the journal's `outcome`)."),
    Attribute(STATE_BYTES, "round", "the length of the `requestState` the answer carried; absent when none."),
    Attribute(FLOW_KIND, "flow, round", "the flow's kind (a `call` flow's name)."),
    Attribute(FLOW_ID, "flow, round", "the flow's id, as the journal's `flow_id`."),
    Attribute(FLOW_OUTCOME, "flow", "how the flow ended (as the journal's flow `outcome`)."),
    Attribute(FLOW_ROUNDS, "flow", "how many rounds the flow sent."),
    Attribute(HOST, "flow", "the `[[hosts]]` entry the flow's lead sits behind."),
    Attribute(LEAD, "flow", "the lead's index among the run's leads."),
    Attribute(REJECTION_REASON, "reconciled", "the reason a replica logged for the rejected round (`unknown key`, "
                                              "`seal`, ...), once reconciliation matched the two."),
    Attribute(SCENARIO, "run", "the scenario's name."),
    Attribute(SEED, "run", "the scenario's seed."),
    Attribute(CHAOS_ACTION, "chaos", "the chaos action (as the journal's `action`)."),
    Attribute(CHAOS_TARGET, "chaos", "whom it acted on (as the journal's `target`)."),
    Attribute(RUN_ID, "resource", "the run's id (its results folder's name), on every span and metric."),
)
"""Every attribute of the harness's spans, for docs/metrics.md."""
