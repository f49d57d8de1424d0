"""The envelope fuzzer's judgement, without a server: what each answer counts as, and how a run folds the counts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.config.flows import FuzzFlow
from harness.config.mutations import EnvelopeMutation
from harness.config.thresholds import parse_threshold
from harness.folding.figures import RunFigures
from harness.folding.fuzz import FuzzFold
from harness.load.envelope import HUGE_ID, EnvelopeAnswer, judge, make_mutant, read_answer
from harness.mrtr.transport import HttpAnswer

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}


def answer(status: int, message: dict | None = None, sse: bool = False) -> HttpAnswer:
    body = b"" if message is None else json.dumps(message).encode()
    if sse and message is not None:
        return HttpAnswer(status, "text/event-stream", b"event: message\r\ndata: " + body + b"\r\n\r\n")
    return HttpAnswer(status, "application/json", body)


def error(code: int, request_id: object = None) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": "no"}}


@pytest.mark.parametrize(("mutation", "http", "expected"), [
    (EnvelopeMutation.INVALID_JSON, answer(400, error(-32700)), EnvelopeAnswer.AS_REQUIRED),
    (EnvelopeMutation.INVALID_JSON, answer(400, error(-32700, 7)), EnvelopeAnswer.OTHERWISE),  # id must be null
    (EnvelopeMutation.INVALID_JSON, answer(500, error(-32603)), EnvelopeAnswer.OTHERWISE),
    (EnvelopeMutation.MISSING_ID, answer(202), EnvelopeAnswer.AS_REQUIRED),
    (EnvelopeMutation.MISSING_ID, answer(200, {"jsonrpc": "2.0", "id": None, "result": {}}), EnvelopeAnswer.OTHERWISE),
    (EnvelopeMutation.OBJECT_ID, answer(400, error(-32600)), EnvelopeAnswer.AS_REQUIRED),
    (EnvelopeMutation.FLOAT_ID, answer(200, {"jsonrpc": "2.0", "id": 1.5, "result": {}}), EnvelopeAnswer.OTHERWISE),
    (EnvelopeMutation.HUGE_ID, answer(200, {"jsonrpc": "2.0", "id": HUGE_ID, "result": {}}, sse=True),
     EnvelopeAnswer.AS_REQUIRED),
    (EnvelopeMutation.HUGE_ID, answer(200, {"jsonrpc": "2.0", "id": float(HUGE_ID), "result": {}}),
     EnvelopeAnswer.OTHERWISE),  # rounded through a double: not the id it was sent
    (EnvelopeMutation.JSONRPC_1, answer(400, error(-32600, 12)), EnvelopeAnswer.AS_REQUIRED),
    (EnvelopeMutation.JSONRPC_1, answer(400, error(-32600, 13)), EnvelopeAnswer.OTHERWISE),  # another request's id
    (EnvelopeMutation.PARAMS_ARRAY, answer(400, error(-32602, 12)), EnvelopeAnswer.AS_REQUIRED),
    (EnvelopeMutation.PARAMS_NULL, answer(400, error(-32602, 12)), EnvelopeAnswer.OTHERWISE),
    (EnvelopeMutation.OVERSIZE_BODY, answer(413), EnvelopeAnswer.AS_REQUIRED),
    (EnvelopeMutation.OVERSIZE_BODY, answer(200, {"jsonrpc": "2.0", "id": 12, "result": {}}),
     EnvelopeAnswer.OTHERWISE),
])
def test_each_answer_counts_as_the_spec_says(mutation, http, expected):
    sent_id = HUGE_ID if mutation is EnvelopeMutation.HUGE_ID else 12
    assert judge(mutation, read_answer(http), sent_id) is expected


def test_nothing_back_is_no_answer():
    assert judge(EnvelopeMutation.INVALID_JSON, None, None) is EnvelopeAnswer.NO_ANSWER


def test_what_came_instead_is_described_without_the_id_itself():
    assert read_answer(answer(400, error(-32602, {"secret": 1}))).describe() == "400 -32602 id other"
    assert read_answer(answer(400, error(-32600))).describe() == "400 -32600 id null"
    assert read_answer(answer(202)).describe() == "202"


@given(st.integers(100, 599), st.sampled_from(["application/json", "text/event-stream", "text/html"]), st.binary())
def test_any_answer_reads_without_raising(status, content_type, body):
    got = read_answer(HttpAnswer(status, content_type, body))
    assert got.status == status
    assert isinstance(got.describe(), str)


@pytest.mark.parametrize("mutation", list(EnvelopeMutation))
def test_each_mutant_is_broken_only_its_own_way(mutation):
    mutant = make_mutant(mutation, META, 12, 4096, {"X-Lead": "ada"})
    assert mutant.headers["X-Lead"] == "ada" and mutant.headers["mcp-method"] == "tools/list"
    if mutation is EnvelopeMutation.INVALID_JSON:
        with pytest.raises(ValueError):
            json.loads(mutant.body)
        return
    request = json.loads(mutant.body)
    assert request["method"] == "tools/list"
    if mutation is EnvelopeMutation.OVERSIZE_BODY:
        assert len(mutant.body) == 4097
    assert ("id" in request) is (mutation is not EnvelopeMutation.MISSING_ID)
    assert mutant.copies == (2 if mutation is EnvelopeMutation.DUPLICATE_ID else 1)
    if mutation is EnvelopeMutation.HUGE_ID:
        assert request["id"] == HUGE_ID == mutant.sent_id


def test_a_fuzz_flow_sends_no_envelope_mutant_unless_asked():
    assert FuzzFlow(kind="fuzz").envelope == []
    flow = FuzzFlow(kind="fuzz", envelope=["invalid-json", "oversize-body"], envelope_body_limit=1024)
    assert flow.envelope == [EnvelopeMutation.INVALID_JSON, EnvelopeMutation.OVERSIZE_BODY]
    with pytest.raises(ValueError, match="twice"):
        FuzzFlow(kind="fuzz", envelope=["invalid-json", "invalid-json"])


def flow_record(flow_id: str, mutation: str, answered: str, got: str | None = None) -> dict:
    record = {"type": "flow", "t": 1.0, "flow_id": flow_id, "flow": "fuzz", "outcome": "completed", "rounds": 0,
              "duration": 0.1, "server_time": 0.0, "think_time": 0.0, "answers": [], "calls": [], "late": False,
              "envelope_mutation": mutation, "envelope_answer": answered, "envelope_length": 90}
    if got is not None:
        record["envelope_got"] = got
    return record


def test_the_fold_counts_each_class_and_names_what_came_instead():
    records = [flow_record("f1", "params-null", "otherwise", "400 -32602 id the request's"),
               flow_record("f2", "params-null", "as_required"), flow_record("f3", "invalid-json", "no_answer")]
    fold, figures = FuzzFold(), RunFigures()
    for record in records:
        fold.add(record)
        figures.add_flow(record)
    table = fold.table().as_dict()["by_envelope"]
    assert table["params-null"]["sent"] == 2 and table["params-null"]["as_required"] == 1
    assert table["params-null"]["answered_instead"] == {"400 -32602 id the request's": 1}
    assert table["invalid-json"]["no_answer"] == 1
    assert list(table) == ["invalid-json", "params-null"]
    assert figures.count("envelope_mutants", {"answer": "otherwise"}) == 1
    assert figures.count("envelope_mutants", {"mutation": "params-null"}) == 2
    assert parse_threshold("envelope_mutants{answer='otherwise'}", "== 0").metric == "envelope_mutants"
