"""Envelope mutants and output contracts against real shop replicas (the SDK's streamable HTTP server).

The classes the SDK answers as JSON-RPC 2.0 and MCP require must be judged `as_required`; the
ones it answers otherwise are exactly those `SDK_DEVIATIONS` names, with what it sends instead.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest

from harness.config.mutations import EnvelopeMutation
from harness.load.envelope import SDK_DEVIATIONS, EnvelopeAnswer, exchange, judge, make_mutant
from harness.load.output_contracts import OutputContracts, declared_schemas, read_tool_pages
from harness.mrtr.transport import Transport
from harness.mrtr.wire import Envelope
from harness.shop.server import LOOSE_OUTPUT_ENV, NO_OUTPUT_SCHEMA_ENV
from tests.harness_run import run_harness, valid_summary

LIMIT = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def shop(deploy):
    return deploy(replicas=1)


@pytest.mark.parametrize("mutation", list(EnvelopeMutation))
def test_the_sdk_server_answers_each_envelope_mutant_as_the_spec_requires_or_as_its_named_deviation(shop, mutation):
    envelope = Envelope({"elicitation": {"form": {}}}, ("envelope-test", "1"))
    mutant = make_mutant(mutation, json.loads(envelope.meta_json), 41, LIMIT, envelope.base_headers)
    transport = Transport(read_timeout=30)
    try:
        answers = exchange(transport, shop.replica_urls[0], mutant)
    finally:
        transport.close()
    assert len(answers) == mutant.copies and all(got is not None for got in answers)
    verdicts = {judge(mutation, got, mutant.sent_id) for got in answers}
    if mutation in SDK_DEVIATIONS:
        assert verdicts == {EnvelopeAnswer.OTHERWISE}
        assert SDK_DEVIATIONS[mutation].startswith(answers[0].describe() + ":")
    else:
        assert verdicts == {EnvelopeAnswer.AS_REQUIRED}, [got.describe() for got in answers if got is not None]


@pytest.fixture(scope="module")
def loose_shop(deploy):
    """A replica started with the shop's `MRTR_SHOP_LOOSE_OUTPUT` knob: its quotes break quote_refund's schema."""
    os.environ[LOOSE_OUTPUT_ENV] = "1"
    try:
        return deploy(replicas=1)
    finally:
        del os.environ[LOOSE_OUTPUT_ENV]


def contracts_of(url: str) -> OutputContracts:
    envelope = Envelope({"elicitation": {"form": {}}}, ("contract-test", "1"))
    transport = Transport(read_timeout=30)
    return OutputContracts(lambda line: read_tool_pages(transport, url, envelope.meta_json, envelope.base_headers,
                                                        line))


def quote(url: str) -> dict:
    body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "quote_refund", "arguments": {"order_id": "O-1000"},
                       "_meta": json.loads(Envelope({}, ("contract-test", "1")).meta_json)}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
               "Mcp-Method": "tools/call", "Mcp-Name": "quote_refund", "Content-Type": "application/json"}
    return httpx.post(url, json=body, headers=headers, timeout=30).json()["result"]


def test_the_shops_quote_declares_an_output_schema_and_conforms_to_it(shop):
    url = shop.replica_urls[0]
    pages = read_tool_pages(Transport(read_timeout=30), url, Envelope({}, ("t", "1")).meta_json,
                            Envelope({}, ("t", "1")).base_headers)
    assert pages is not None and "quote_refund" in declared_schemas(pages)
    assert contracts_of(url).mismatch("quote_refund", quote(url)) is None


def test_the_loose_output_knob_breaks_the_quotes_declared_schema_past_the_sdks_own_check(loose_shop):
    url = loose_shop.replica_urls[0]
    result = quote(url)
    assert not result.get("isError") and result["structuredContent"]["needs_confirmation"] in (0, 1)
    assert contracts_of(url).mismatch("quote_refund", result) == "needs_confirmation: fails type"


RUN = """
name = "envelope"
seed = 5
duration = "8s"
time_scale = 60
grace = "5s"

[target]
kind = "embedded"
replicas = 2
store = "sqlite"

[load]
arrival_rate = 8

[[flows]]
kind = "fuzz"
mutations = ["bit-flip"]
envelope = {envelope}
envelope_body_limit = 65536
weight = 3

[[flows]]
kind = "refund"

[leads]
think = {{ dist = "constant", value = "10s" }}

[expect]
"envelope_mutants{{answer='no_answer'}}" = "== 0"
output_schema_mismatches = "== 0"
"""


def test_a_run_counts_envelope_mutants_by_class_and_fails_on_a_broken_output_contract(tmp_path):
    classes = [mutation.value for mutation in EnvelopeMutation]
    scenario = tmp_path / "envelope.toml"
    scenario.write_text(RUN.format(envelope=json.dumps(classes)))
    finished = run_harness(scenario, tmp_path / "results", timeout=240, env={LOOSE_OUTPUT_ENV: "1"})
    assert finished.code == 1, finished.output
    summary = valid_summary(finished.folder / "summary.json")
    by_envelope = summary["fuzz"]["by_envelope"]
    assert set(by_envelope) <= set(classes) and by_envelope, summary["fuzz"]
    for mutation, row in by_envelope.items():
        assert row["sent"] == row["as_required"] + row["otherwise"] + row["no_answer"], (mutation, row)
        assert row["no_answer"] == 0, (mutation, row)
        if mutation == EnvelopeMutation.OVERSIZE_BODY:  # 64 KiB is not the SDK's limit (4 MiB): it takes the body
            assert row["answered_instead"] == {"200 result id the request's": row["sent"]}, row
            continue
        known = SDK_DEVIATIONS.get(EnvelopeMutation(mutation))
        assert (row["otherwise"] > 0) == (known is not None), (mutation, row)
    assert summary["output_contracts"]["quote_refund"]["mismatches"] > 0
    failed = {row["metric"]: row for row in summary["thresholds"] if not row["passed"]}
    assert set(failed) == {"output_schema_mismatches"}, summary["thresholds"]
    assert summary["problems"] == [next(line for line in summary["problems"] if "output_schema_mismatches" in line)]
    page = (finished.folder / "report.html").read_text()
    assert "<h2>Fuzzed JSON-RPC envelopes</h2>" in page and "<h2>Output contracts</h2>" in page


SCHEMALESS_RUN = """
name = "schemaless"
seed = 5
duration = "4s"
time_scale = 60
grace = "5s"

[target]
kind = "embedded"
replicas = 1
store = "sqlite"

[load]
arrival_rate = 4

[[flows]]
kind = "refund"

[leads]
think = { dist = "constant", value = "10s" }

[expect]
output_schema_mismatches = "== 0"
"""


def test_the_no_output_schema_knob_declares_no_schema_and_a_run_then_checks_nothing(deploy, tmp_path):
    knobs = {NO_OUTPUT_SCHEMA_ENV: "1", LOOSE_OUTPUT_ENV: "1"}  # loose quotes: a check, had there been one, fails
    os.environ.update(knobs)
    try:
        url = deploy(replicas=1).replica_urls[0]
    finally:
        for name in knobs:
            del os.environ[name]
    envelope = Envelope({}, ("t", "1"))
    pages = read_tool_pages(Transport(read_timeout=30), url, envelope.meta_json, envelope.base_headers)
    assert pages is not None
    tools = [tool for page in pages if isinstance(page, dict) for tool in page["tools"]]
    assert "quote_refund" in {tool["name"] for tool in tools}
    assert [tool["name"] for tool in tools if "outputSchema" in tool] == []
    assert quote(url)["structuredContent"]["needs_confirmation"] in (0, 1)  # the result itself unchanged
    scenario = tmp_path / "schemaless.toml"
    scenario.write_text(SCHEMALESS_RUN)
    finished = run_harness(scenario, tmp_path / "results", timeout=180, env=knobs)
    assert finished.code == 0, finished.output
    summary = valid_summary(finished.folder / "summary.json")
    assert summary["output_contracts"] == {}
    assert [row["passed"] for row in summary["thresholds"] if row["metric"] == "output_schema_mismatches"] == [True]
    assert summary["flows"]["by_outcome"].get("completed", 0) > 0, summary["flows"]
