"""Output contracts without a server: a result checked against the outputSchema its tool declared."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from mcp.server.mcpserver.utilities.func_metadata import func_metadata

from harness.folding.figures import RunFigures
from harness.load.output_contracts import (
    RETRY_AFTER,
    UNCHECKED,
    OutputContracts,
    _result,
    checker_for,
    declared_schemas,
    mismatch_of,
    surely_conforms,
)
from harness.mrtr.transport import HttpAnswer
from harness.shop.server import Inspection, Quote, RefundView

QUOTE_SCHEMA = {"type": "object", "properties": {"quote_id": {"type": "string"},
                                                 "needs_confirmation": {"type": "boolean"}},
                "required": ["quote_id", "needs_confirmation"]}
PAGES = [{"tools": [{"name": "quote_refund", "inputSchema": {}, "outputSchema": QUOTE_SCHEMA},
                    {"name": "free_text", "inputSchema": {}}]}]


def result(structured: object, is_error: bool = False) -> dict:
    return {"content": [{"type": "text", "text": json.dumps(structured)}], "structuredContent": structured,
            "isError": is_error}


def test_a_result_that_breaks_the_declared_schema_is_a_mismatch_naming_where_and_not_the_value():
    contracts = OutputContracts(lambda line: PAGES)
    assert contracts.mismatch("quote_refund", result({"quote_id": "Q-1", "needs_confirmation": True})) is None
    said = contracts.mismatch("quote_refund", result({"quote_id": "Q-1", "needs_confirmation": "yes-secret"}))
    assert said == "needs_confirmation: fails type"
    assert contracts.mismatch("quote_refund", {"content": []}) == \
        "no structuredContent, though the tool declared an outputSchema"


def test_tool_errors_and_tools_that_declare_nothing_are_not_checked():
    contracts = OutputContracts(lambda line: PAGES)
    assert contracts.mismatch("quote_refund", result({"oops": 1}, is_error=True)) is None
    assert contracts.mismatch("free_text", result({"anything": 1})) is None
    assert contracts.mismatch("not_listed", result({"anything": 1})) is None


def test_a_declared_schema_that_is_no_json_schema_counts_every_result():
    contracts = OutputContracts(lambda line: [{"tools": [{"name": "t", "outputSchema": {"type": 12}}]}])
    assert contracts.mismatch("t", result({})) == "its outputSchema is not a valid JSON Schema"


def test_an_unreadable_tools_list_fails_closed_and_is_read_again_later():
    now = [0.0]
    reads: list[str] = []

    def read(line: str) -> list[object] | None:
        reads.append(line)
        return None if len(reads) == 1 else PAGES

    contracts = OutputContracts(read, clock=lambda: now[0])
    bad = result({"quote_id": 1, "needs_confirmation": True})
    assert contracts.mismatch("quote_refund", bad, "Authorization: x\r\n") == UNCHECKED
    assert contracts.mismatch("free_text", bad) == UNCHECKED and len(reads) == 1
    now[0] = RETRY_AFTER
    assert contracts.mismatch("quote_refund", bad) == "quote_id: fails type" and len(reads) == 2
    assert reads[0] == "Authorization: x\r\n"


def test_mismatches_are_counted_per_tool_with_the_first_example():
    figures = RunFigures()
    for index, mismatch in enumerate(["needs_confirmation: fails type", "quote_id: fails type", None]):
        record = {"type": "round", "t": 1.0, "flow": "refund", "tool": "quote_refund", "round": 1, "replica": "r0",
                  "latency": 0.01, "outcome": "complete", "code": None, "flow_id": f"f{index}"}
        if mismatch is not None:
            record["output_mismatch"] = mismatch
        figures.add_round(record)
    assert figures.count("output_schema_mismatches", {}) == 2
    assert figures.count("output_schema_mismatches", {"tool": "issue_refund"}) == 0
    assert figures.output_contracts() == {"quote_refund": {"mismatches": 2,
                                                           "example": "needs_confirmation: fails type"}}


def test_declared_schemas_skip_what_is_not_a_tool():
    assert set(declared_schemas([{"tools": [None, {"name": 3, "outputSchema": {}}, "x"]}, None, {"tools": 5}])) == set()


@given(st.integers(100, 599), st.sampled_from(["application/json", "text/event-stream"]), st.binary())
def test_any_tools_list_answer_reads_without_raising(status, content_type, body):
    page = _result(HttpAnswer(status, content_type, body))
    assert page is None or isinstance(page, dict)
    declared_schemas([page])


def test_flows_that_need_the_schemas_while_they_are_read_wait_for_them_rather_than_count_unchecked():
    import gevent
    from gevent.event import Event

    answered = Event()
    reads: list[str] = []

    def read(line: str) -> list[object] | None:
        reads.append(line)
        answered.wait(5)
        return PAGES

    contracts = OutputContracts(read)
    bad = result({"quote_id": 1, "needs_confirmation": True})
    first = gevent.spawn(contracts.mismatch, "quote_refund", bad)
    second = gevent.spawn(contracts.mismatch, "quote_refund", bad)
    gevent.sleep(0)
    answered.set()
    gevent.joinall([first, second], timeout=5)
    assert [first.value, second.value] == ["quote_id: fails type"] * 2 and len(reads) == 1


TYPES = ["string", "boolean", "null", "integer", "number", "object", "array"]
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                       max_size=3), max_leaves=6)
NAMES = st.sampled_from(["a", "b", "c", "type", "required"])
FIELDS = st.fixed_dictionaries({"type": st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), min_size=1,
                                                                          max_size=3, unique=True)},
                                optional={"title": st.text(max_size=3), "description": st.text(max_size=3),
                                          "default": JSON_VALUES, "minLength": st.integers(0, 3)})
SCHEMAS = st.fixed_dictionaries({"type": st.sampled_from(["object", "object", "string"]),
                                 "properties": st.dictionaries(NAMES, FIELDS, max_size=4)},
                                optional={"required": st.lists(NAMES, max_size=3, unique=True),
                                          "additionalProperties": st.booleans(), "title": st.text(max_size=3),
                                          "$schema": st.just("http://json-schema.org/draft-04/schema#")})
VALUES = st.dictionaries(NAMES, JSON_VALUES, max_size=4) | JSON_VALUES


@given(SCHEMAS, VALUES)
def test_the_quick_check_of_a_flat_schema_never_changes_what_jsonschema_says(schema, value):
    from jsonschema import validators
    from jsonschema.exceptions import SchemaError

    cls = validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError:  # draft 4 takes no empty `required`: no check, quick or not, reads such a schema
        assert checker_for(schema)(result(value)) == "its outputSchema is not a valid JSON Schema"
        return
    validator = cls(schema)
    sure = surely_conforms(schema)
    if sure is not None and sure(value):
        assert validator.is_valid(value)
    assert checker_for(schema)(result(value)) == mismatch_of(validator, value)


def test_a_typed_tools_flat_return_model_takes_the_quick_check_and_a_nested_one_jsonschema():
    def quote() -> Quote: ...
    def refund() -> RefundView: ...
    def inspection() -> Inspection: ...  # an optional note: anyOf, which only jsonschema reads

    assert surely_conforms(func_metadata(quote).output_schema) is not None
    assert surely_conforms(func_metadata(refund).output_schema) is not None
    assert surely_conforms(func_metadata(inspection).output_schema) is None
    assert surely_conforms(QUOTE_SCHEMA)({"quote_id": "Q-1", "needs_confirmation": 1}) is False
